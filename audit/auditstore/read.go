// The read path: rows by filter, unterminated invocations, and Verify of
// the index against the journal.

package auditstore

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore/internal/statedir"
)

// Rows returns the rows matching f in seq order. A filtered result is not a
// contiguous chain: Verify needs every row (the zero Filter).
func (s *Store) Rows(ctx context.Context, f Filter) ([]audit.Row, error) {
	var out []audit.Row
	err := s.Each(ctx, f, func(r audit.Row) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// Each calls fn for every row matching f in seq order, reading from one
// snapshot, without holding all rows in memory. An error from fn stops the
// walk and is returned as is.
func (s *Store) Each(ctx context.Context, f Filter, fn func(audit.Row) error) error {
	var where []string
	var args []any
	if f.InvocationID != "" {
		where = append(where, `invocation_id = ?`)
		args = append(args, f.InvocationID)
	}
	if f.Kind != "" {
		where = append(where, `kind = ?`)
		args = append(args, string(f.Kind))
	}
	if f.AfterSeq > 0 {
		where = append(where, `seq > ?`)
		args = append(args, f.AfterSeq)
	}
	q := `SELECT ` + statedir.RowColumns + ` FROM audit_rows`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, ` AND `)
	}
	q += ` ORDER BY seq`
	if f.Limit > 0 {
		q += ` LIMIT ?`
		args = append(args, f.Limit)
	}
	if err := s.catchUp(ctx); err != nil {
		return err
	}
	return statedir.EachRow(ctx, s.db, q, args, fn)
}

// LastSeq returns the seq of the newest durable row, 0 for an empty store.
func (s *Store) LastSeq(ctx context.Context) (int64, error) {
	if err := s.catchUp(ctx); err != nil {
		return 0, err
	}
	var seq int64
	if err := s.db.QueryRowContext(ctx, `SELECT coalesce(max(seq), 0) FROM audit_rows`).Scan(&seq); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return seq, nil
}

// unterminatedQuery reads the started rows open_invocations names.
const unterminatedQuery = `SELECT ` + statedir.RowColumns + ` FROM audit_rows WHERE seq IN (SELECT seq FROM open_invocations) ORDER BY seq`

// Unterminated returns every skill.invoked_started row that has no
// skill.invoked_completed for the same invocation_id, in seq order: the
// invocations running now, or lost by a supervisor that died (close those
// with outcome "lost").
func (s *Store) Unterminated(ctx context.Context) ([]audit.Row, error) {
	if err := s.catchUp(ctx); err != nil {
		return nil, err
	}
	var out []audit.Row
	err := statedir.EachRow(ctx, s.db, unterminatedQuery, nil, func(r audit.Row) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// Verify checks the whole store (see the package function Verify), reading
// one snapshot of the index, and checks that the journal holds the same
// rows, byte for byte: a row altered in either file is named. (Index rows
// older than the journal's first row come from a store made before the
// journal existed and have no journal line to compare.) The error is for a
// store that cannot be read; what is wrong with the rows is in the Report.
func (s *Store) Verify(ctx context.Context) (Report, error) {
	if err := s.catchUp(ctx); err != nil {
		return Report{}, err
	}
	end, err := s.j.durableEnd()
	if err != nil {
		return Report{}, fmt.Errorf("%w: journal: %w", ErrUnavailable, err)
	}
	sc := bufio.NewScanner(io.NewSectionReader(s.j.r, 0, end))
	sc.Buffer(make([]byte, 0, 64<<10), audit.MaxLineBytes)
	line := 0
	next := func() (audit.Row, error, bool) {
		if !sc.Scan() {
			return audit.Row{}, nil, false
		}
		line++
		r, err := audit.DecodeRow(sc.Bytes())
		return r, err, true
	}
	first, firstErr, haveJournal := next()
	pending := haveJournal // first holds the journal line not yet compared
	v := NewVerifier()
	err = statedir.EachRow(ctx, s.db, `SELECT `+statedir.RowColumns+` FROM audit_rows ORDER BY seq`, nil, func(r audit.Row) error {
		v.Add(r)
		if !haveJournal || (pending && firstErr == nil && r.Seq < first.Seq) {
			return nil // older than the journal
		}
		var j audit.Row
		var jerr error
		if pending {
			j, jerr, pending = first, firstErr, false
		} else {
			var ok bool
			if j, jerr, ok = next(); !ok {
				v.AddProblem(r, "missing from the journal (it ends before this row)")
				return nil
			}
		}
		switch {
		case jerr != nil:
			v.AddProblem(r, fmt.Sprintf("journal line %d: %v", line, jerr))
		default:
			if diff := RowDiff(r, j); diff != "" {
				v.AddProblem(r, fmt.Sprintf("journal line %d differs from the index: %s", line, diff))
			}
		}
		return nil
	})
	if err != nil {
		return Report{}, err
	}
	if err := sc.Err(); err != nil {
		return Report{}, fmt.Errorf("%w: read journal: %w", ErrUnavailable, err)
	}
	return v.Report(), nil
}

// query reads rows through the writer's connection (used by Open).
func (s *Store) query(ctx context.Context, q string, args ...any) ([]audit.Row, error) {
	var out []audit.Row
	err := statedir.EachRow(ctx, s.wconn, q, args, func(r audit.Row) error {
		out = append(out, r)
		return nil
	})
	return out, err
}
