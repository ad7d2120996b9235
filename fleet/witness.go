package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
)

// PostgreSQL as the witness of each host's chain: the rows a host shipped
// cannot be changed or removed there (audit_rows is append-only), so a
// host whose journal lost its tail, or was replaced by another chain,
// shows it against them even when nothing in its state dir does.

// ErrMissingLocally: PostgreSQL holds rows of this host that its journal
// lacks (a cut tail, or a state dir started afresh). It wraps ErrDiverged:
// new rows written after it would reuse seqs already shipped.
var ErrMissingLocally = fmt.Errorf("%w: PostgreSQL holds rows the journal lacks", ErrDiverged)

// queryRower is a pool or one of its connections.
type queryRower interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ShippedHead returns the newest row PostgreSQL holds for host (seq 0:
// none, also when nothing was ever migrated there).
func ShippedHead(ctx context.Context, q queryRower, host string) (seq int64, hash string, err error) {
	err = q.QueryRow(ctx, `SELECT seq, row_hash FROM audit_rows WHERE host_id = $1 ORDER BY seq DESC LIMIT 1`, host).Scan(&seq, &hash)
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, pgx.ErrNoRows), errors.As(err, &pgErr) && pgErr.Code == "42P01": // undefined_table
		return 0, "", nil
	case err != nil:
		return 0, "", fmt.Errorf("fleet: the shipped head of %s: %w", host, err)
	}
	return seq, hash, nil
}

// CheckHead compares the local chain's head with what PostgreSQL holds for
// host: the journal must reach the shipped head (else ErrMissingLocally),
// and the row both hold at the shorter one's head must be the same row
// (else ErrDiverged). The chain links every row to the one before, so an
// equal hash there means the same chain up to it. Nothing shipped: nil.
func CheckHead(ctx context.Context, q queryRower, host string, src Source) error {
	shippedSeq, shippedHash, err := ShippedHead(ctx, q, host)
	if err != nil || shippedSeq == 0 {
		return err
	}
	localSeq, err := src.LastSeq(ctx)
	if err != nil {
		return fmt.Errorf("fleet: the journal's head: %w", err)
	}
	if at := min(localSeq, shippedSeq); at > 0 {
		rows, err := src.Rows(ctx, auditstore.Filter{AfterSeq: at - 1, Limit: 1})
		if err != nil {
			return fmt.Errorf("fleet: the journal's seq %d: %w", at, err)
		}
		if len(rows) != 1 || rows[0].Seq != at {
			return fmt.Errorf("fleet: the journal has no row of seq %d below its head %d", at, localSeq)
		}
		want := shippedHash
		if at != shippedSeq {
			if err := q.QueryRow(ctx, `SELECT row_hash FROM audit_rows WHERE host_id = $1 AND seq = $2`, host, at).Scan(&want); err != nil {
				return fmt.Errorf("fleet: the shipped row %d of %s: %w", at, host, err)
			}
		}
		if rows[0].RowHash != want {
			return fmt.Errorf("%w: host %s: the journal's seq %d has row_hash %.12s…, the one shipped %.12s…: this journal is another chain than the one shipped under this host id (replaced, or a second host uses the id)",
				ErrDiverged, host, at, rows[0].RowHash, want)
		}
	}
	if localSeq < shippedSeq {
		return fmt.Errorf("%w: host %s: the journal ends at seq %d, PostgreSQL holds up to seq %d: rows %d..%d are missing locally (a cut tail)",
			ErrMissingLocally, host, localSeq, shippedSeq, localSeq+1, shippedSeq)
	}
	return nil
}

// SeqRange is the rows From..To.
type SeqRange struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

func (r SeqRange) String() string {
	if r.From == r.To {
		return fmt.Sprintf("seq %d", r.From)
	}
	return fmt.Sprintf("seq %d..%d", r.From, r.To)
}

// addSeq extends the last range with seq, or starts a new one.
func addSeq(rs []SeqRange, seq int64) []SeqRange {
	if n := len(rs); n > 0 && rs[n-1].To+1 == seq {
		rs[n-1].To = seq
		return rs
	}
	return append(rs, SeqRange{seq, seq})
}

// maxListed bounds the differing rows a WitnessReport lists one by one.
const maxListed = 20

// WitnessReport is a host's journal compared with the rows PostgreSQL
// holds for its host id, in both directions.
type WitnessReport struct {
	Host        string `json:"host_id"`
	LocalRows   int    `json:"local_rows"`
	LocalLast   int64  `json:"local_last"`
	ShippedRows int    `json:"shipped_rows"`
	ShippedLast int64  `json:"shipped_last"`
	// MissingLocally are rows PostgreSQL holds that the journal lacks.
	MissingLocally []SeqRange `json:"missing_locally"`
	// Differ are rows both hold whose copies differ (the first maxListed;
	// DifferCount counts them all); Gaps rows the journal holds that
	// PostgreSQL lacks though it holds later ones.
	Differ      []auditstore.Problem `json:"differ"`
	DifferCount int                  `json:"differ_count"`
	Gaps        []SeqRange           `json:"gaps"`
	// Unshipped are the journal's rows past PostgreSQL's last: shipping's
	// lag, not damage.
	Unshipped []SeqRange `json:"unshipped"`
	OK        bool       `json:"ok"`
}

// Compare reads the journal's rows (each, in seq order) beside the rows
// PostgreSQL holds for host, both streamed, and reports every seq that
// only one of them holds and every row whose copies differ. The role must
// see host's rows (CheckSeesHost): the auditor's, or host's own.
func Compare(ctx context.Context, pool *pgxpool.Pool, host string, each func(fn func(audit.Row) error) error) (WitnessReport, error) {
	rep := WitnessReport{Host: host}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return rep, fmt.Errorf("fleet: connect: %w", err)
	}
	defer conn.Release()
	if err := CheckSeesHost(ctx, conn, host); err != nil {
		return rep, err
	}
	rs, err := conn.Query(ctx, `SELECT seq, row_id, kind, ts, prev_hash, row_hash, payload FROM audit_rows WHERE host_id = $1 ORDER BY seq`, host)
	if err != nil {
		return rep, fmt.Errorf("fleet: read %s's rows: %w", host, err)
	}
	defer rs.Close()
	var pg audit.Row
	havePG := false
	next := func() error {
		if havePG = rs.Next(); !havePG {
			return rs.Err()
		}
		var kind, payload string
		if err := rs.Scan(&pg.Seq, &pg.RowID, &kind, &pg.TS, &pg.PrevHash, &pg.RowHash, &payload); err != nil {
			return err
		}
		pg.Kind, pg.Payload = audit.Kind(kind), json.RawMessage(payload)
		rep.ShippedRows++
		rep.ShippedLast = pg.Seq
		return nil
	}
	if err := next(); err != nil {
		return rep, fmt.Errorf("fleet: read %s's rows: %w", host, err)
	}
	var localOnly []SeqRange
	err = each(func(l audit.Row) error {
		if rep.LocalRows > 0 && l.Seq <= rep.LocalLast {
			return fmt.Errorf("fleet: the journal's seq %d follows seq %d: `cyberos audit verify` names the damage", l.Seq, rep.LocalLast)
		}
		rep.LocalRows++
		rep.LocalLast = l.Seq
		for havePG && pg.Seq < l.Seq {
			rep.MissingLocally = addSeq(rep.MissingLocally, pg.Seq)
			if err := next(); err != nil {
				return err
			}
		}
		if !havePG || pg.Seq > l.Seq {
			localOnly = addSeq(localOnly, l.Seq)
			return nil
		}
		if field := auditstore.RowDiff(l, pg); field != "" {
			rep.DifferCount++
			if len(rep.Differ) < maxListed {
				rep.Differ = append(rep.Differ, auditstore.Problem{Seq: l.Seq, RowID: l.RowID, Field: field,
					Reason: fmt.Sprintf("differs from PostgreSQL's copy (%s: journal row_hash %.12s…, PostgreSQL's %.12s…)", field, l.RowHash, pg.RowHash)})
			}
		}
		return next()
	})
	if err != nil {
		return rep, err
	}
	for havePG {
		rep.MissingLocally = addSeq(rep.MissingLocally, pg.Seq)
		if err := next(); err != nil {
			return rep, fmt.Errorf("fleet: read %s's rows: %w", host, err)
		}
	}
	for _, r := range localOnly {
		switch {
		case r.From > rep.ShippedLast:
			rep.Unshipped = append(rep.Unshipped, r)
		case r.To < rep.ShippedLast:
			rep.Gaps = append(rep.Gaps, r)
		default: // cannot straddle: seqs past ShippedLast are only ever local
			rep.Gaps = append(rep.Gaps, SeqRange{r.From, rep.ShippedLast})
			rep.Unshipped = append(rep.Unshipped, SeqRange{rep.ShippedLast + 1, r.To})
		}
	}
	rep.OK = len(rep.MissingLocally) == 0 && rep.DifferCount == 0 && len(rep.Gaps) == 0
	return rep, nil
}

// RestoreResult says what RestoreFromWitness did.
type RestoreResult struct {
	Before   WitnessReport
	Restored SeqRange // To 0: none
}

// RestoreFromWitness restores a cut tail of the journal in stateDir from
// the rows PostgreSQL holds for host: only when the journal is a prefix of
// the shipped chain (every row it holds is PostgreSQL's, and what it
// lacks is PostgreSQL's rows after its last). The shipped rows carry
// every field a journal line holds, so auditstore.RestoreTail writes the lines
// as the writer had, each checked to continue the chain. A journal that
// differs from the shipped rows anywhere is not touched.
func RestoreFromWitness(ctx context.Context, pool *pgxpool.Pool, host, stateDir string) (RestoreResult, error) {
	var res RestoreResult
	each, closeReader, err := journalRows(ctx, stateDir)
	if err != nil {
		return res, err
	}
	res.Before, err = Compare(ctx, pool, host, each)
	closeReader()
	if err != nil {
		return res, err
	}
	b := res.Before
	switch {
	case b.DifferCount > 0:
		return res, fmt.Errorf("%w: host %s: %d rows differ from PostgreSQL's, the first %s (%s): the journal is not a prefix of the shipped chain; nothing restored",
			ErrDiverged, host, b.DifferCount, SeqRange{b.Differ[0].Seq, b.Differ[0].Seq}, b.Differ[0].Field)
	case len(b.Gaps) > 0:
		return res, fmt.Errorf("%w: host %s: PostgreSQL lacks %s though it holds later rows; nothing restored", ErrDiverged, host, b.Gaps[0])
	case len(b.MissingLocally) == 0:
		return res, nil
	case len(b.MissingLocally) > 1 || b.MissingLocally[0].From != b.LocalLast+1:
		return res, fmt.Errorf("%w: host %s: the journal lacks %s inside its chain, not a cut tail: `cyberos audit repair` without --from-dsn mends rows inside it",
			ErrMissingLocally, host, b.MissingLocally[0])
	}
	tail := b.MissingLocally[0]
	rs, err := pool.Query(ctx, `SELECT seq, row_id, kind, ts, prev_hash, row_hash, payload FROM audit_rows
		WHERE host_id = $1 AND seq BETWEEN $2 AND $3 ORDER BY seq`, host, tail.From, tail.To)
	if err != nil {
		return res, fmt.Errorf("fleet: read %s's rows %s: %w", host, tail, err)
	}
	rows, err := pgx.CollectRows(rs, func(row pgx.CollectableRow) (audit.Row, error) {
		var r audit.Row
		var kind, payload string
		err := row.Scan(&r.Seq, &r.RowID, &kind, &r.TS, &r.PrevHash, &r.RowHash, &payload)
		r.Kind, r.Payload = audit.Kind(kind), json.RawMessage(payload)
		return r, err
	})
	if err != nil {
		return res, fmt.Errorf("fleet: read %s's rows %s: %w", host, tail, err)
	}
	if err := auditstore.RestoreTail(ctx, stateDir, rows); err != nil {
		return res, err
	}
	res.Restored = tail
	return res, nil
}

// journalRows walks the journal in stateDir for Compare. A state dir with
// neither journal nor index (one made afresh to take the shipped chain)
// has no rows; an index without its journal is for `audit repair`, which
// rebuilds the journal from it.
func journalRows(ctx context.Context, stateDir string) (each func(fn func(audit.Row) error) error, closeReader func(), err error) {
	_, jerr := os.Stat(filepath.Join(stateDir, auditstore.JournalName))
	_, ierr := os.Stat(filepath.Join(stateDir, auditstore.FileName))
	switch {
	case errors.Is(jerr, fs.ErrNotExist) && errors.Is(ierr, fs.ErrNotExist):
		if fi, err := os.Stat(stateDir); err != nil {
			return nil, nil, fmt.Errorf("%w: state dir %s: not a directory (%w)", auditstore.ErrUnavailable, stateDir, err)
		} else if !fi.IsDir() {
			return nil, nil, fmt.Errorf("%w: state dir %s: not a directory", auditstore.ErrUnavailable, stateDir)
		}
		return func(func(audit.Row) error) error { return nil }, func() {}, nil
	case errors.Is(jerr, fs.ErrNotExist):
		return nil, nil, fmt.Errorf("%w: %s has an index and no journal: `%s` rebuilds the journal from the index first",
			auditstore.ErrNeedsRepair, stateDir, auditstore.RepairCommand(stateDir))
	}
	r, err := auditstore.OpenReader(stateDir)
	if err != nil {
		return nil, nil, err
	}
	return func(fn func(audit.Row) error) error { return r.EachJournalRow(ctx, fn) }, func() { r.Close() }, nil
}

// CheckSeesHost is the check of a role that reads a host's rows to compare
// or restore them outside a daemon (`audit repair --from-dsn`): row-level
// security shows a host's role only the rows of the host id cyberos_hosts
// binds it to, so a role bound to another id, or to none, would see no
// rows of host and report "nothing shipped". The auditor's role, and any
// that is not a host's, pass (they read every row, or are refused by the
// grants with an error of their own).
func CheckSeesHost(ctx context.Context, q queryRower, host string) error {
	var role string
	var auditor, runtime bool
	err := q.QueryRow(ctx, `SELECT session_user, pg_has_role(session_user, 'cyberos_auditor', 'USAGE'),
		pg_has_role(session_user, 'cyberos_runtime', 'USAGE')`).Scan(&role, &auditor, &runtime)
	if err != nil {
		return fmt.Errorf("fleet: check the role's view of host %s: %w", host, err)
	}
	if auditor || !runtime {
		return nil
	}
	var bound *string
	if err := q.QueryRow(ctx, `SELECT cyberos_host_id()`).Scan(&bound); err != nil {
		return fmt.Errorf("fleet: read the role's binding: %w", err)
	}
	switch {
	case bound == nil:
		return fmt.Errorf("%w: cyberos_hosts binds role %s to no host id, so it sees no rows of host %s: use that host's role or the auditor's", ErrHostNotBound, role, host)
	case *bound != host && *bound != "*":
		return fmt.Errorf("%w: cyberos_hosts binds role %s to host id %q, so it sees no rows of host %s: use that host's role or the auditor's", ErrHostNotBound, role, *bound, host)
	}
	return nil
}
