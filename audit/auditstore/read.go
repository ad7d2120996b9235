// The read path: rows by filter, unterminated invocations, and Verify of
// the index against the journal.

package auditstore

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"io"
	"strings"

	"cyberos.dev/audit"
)

// Filter selects rows for Rows and Each. Zero fields select everything.
type Filter struct {
	InvocationID string
	Kind         audit.Kind
	AfterSeq     int64 // rows with seq > AfterSeq
	Limit        int   // at most this many rows; 0 = no limit
}

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
	q := `SELECT ` + rowColumns + ` FROM audit_rows`
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
	return s.each(ctx, s.db, q, args, fn)
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
const unterminatedQuery = `SELECT ` + rowColumns + ` FROM audit_rows WHERE seq IN (SELECT seq FROM open_invocations) ORDER BY seq`

// Unterminated returns every skill.invoked_started row that has no
// skill.invoked_completed for the same invocation_id, in seq order: the
// invocations running now, or lost by a supervisor that died (close those
// with outcome "lost").
func (s *Store) Unterminated(ctx context.Context) ([]audit.Row, error) {
	if err := s.catchUp(ctx); err != nil {
		return nil, err
	}
	var out []audit.Row
	err := s.each(ctx, s.db, unterminatedQuery, nil, func(r audit.Row) error {
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
	err = s.each(ctx, s.db, `SELECT `+rowColumns+` FROM audit_rows ORDER BY seq`, nil, func(r audit.Row) error {
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
				v.problem(r, "missing from the journal (it ends before this row)")
				return nil
			}
		}
		switch {
		case jerr != nil:
			v.problem(r, fmt.Sprintf("journal line %d: %v", line, jerr))
		default:
			if diff := RowDiff(r, j); diff != "" {
				v.problem(r, fmt.Sprintf("journal line %d differs from the index: %s", line, diff))
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

// RowDiff names the first field in which two copies of a row differ ("" when
// they are the same row): the journal and the index, or a host and its
// fleet's PostgreSQL.
func RowDiff(a, b audit.Row) string {
	switch {
	case a.Seq != b.Seq:
		return fmt.Sprintf("seq %d vs %d", a.Seq, b.Seq)
	case a.RowID != b.RowID:
		return "row_id"
	case a.Kind != b.Kind:
		return "kind"
	case a.TS != b.TS:
		return "ts"
	case a.PrevHash != b.PrevHash:
		return "prev_hash"
	case a.RowHash != b.RowHash:
		return "row_hash"
	case !bytes.Equal(a.Payload, b.Payload):
		return "payload"
	}
	return ""
}

// query reads rows through the writer's connection (used by Open).
func (s *Store) query(ctx context.Context, q string, args ...any) ([]audit.Row, error) {
	var out []audit.Row
	err := s.each(ctx, s.wconn, q, args, func(r audit.Row) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func (s *Store) each(ctx context.Context, qr querier, q string, args []any, fn func(audit.Row) error) error {
	rs, err := qr.QueryContext(ctx, q, args...)
	if err != nil {
		return readErr(ctx, err)
	}
	defer rs.Close()
	for rs.Next() {
		var r audit.Row
		var kind string
		var payload []byte
		if err := rs.Scan(&r.Seq, &r.RowID, &kind, &r.TS, &r.PrevHash, &r.RowHash, &payload); err != nil {
			return readErr(ctx, err)
		}
		r.Kind, r.Payload = audit.Kind(kind), payload
		if err := fn(r); err != nil {
			return err
		}
	}
	if err := rs.Err(); err != nil {
		return readErr(ctx, err)
	}
	return nil
}

// readErr wraps a read failure in ErrUnavailable unless it is the caller's
// own context ending.
func readErr(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	return fmt.Errorf("%w: read: %w", ErrUnavailable, err)
}
