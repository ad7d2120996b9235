package fleet

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/telemetry"
)

// Source is the host's audit store, read in seq order (auditstore.Store).
type Source interface {
	Rows(ctx context.Context, f auditstore.Filter) ([]audit.Row, error)
	LastSeq(ctx context.Context) (int64, error)
}

// Defaults of a Shipper's zero fields.
const (
	DefaultShipBatch  = 500
	DefaultShipPoll   = 250 * time.Millisecond
	DefaultMaxBackoff = 5 * time.Second
)

// ErrHostIDInUse: another daemon ships under this host id right now.
var ErrHostIDInUse = errors.New("fleet: another daemon is shipping under this host id")

// ErrDiverged: the host's journal no longer continues the chain already
// shipped for its host id (a journal restored, repaired or replaced, or a
// second host configured with the same id). Nothing more is shipped until
// an operator looks: overwriting the shipped rows would erase evidence.
var ErrDiverged = errors.New("fleet: the local audit chain does not continue the shipped one")

// NewPool parses dsn and makes a pool that connects on first use, so a
// daemon starts while PostgreSQL is away (its rows wait in the journal).
func NewPool(dsn string) (*pgxpool.Pool, error) {
	cfg, err := ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = max(cfg.MaxConns, 4)
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	return pgxpool.NewWithConfig(context.Background(), cfg)
}

// Shipper copies a host's audit rows, in seq order, to the fleet's
// PostgreSQL. It reads the journal, never the emitters: an emitter never
// waits for it, and rows written while PostgreSQL is away are shipped
// when it is back (the journal is the buffer). Each batch is one
// transaction, idempotent on (host_id, seq), and resumes from the last
// seq PostgreSQL holds for the host, so a crash or a lost connection
// neither loses nor duplicates a row.
type Shipper struct {
	Pool    *pgxpool.Pool
	HostID  string
	Source  Source
	Batch   int           // rows per transaction; 0: DefaultShipBatch
	Poll    time.Duration // how often to look for new rows; 0: DefaultShipPoll
	Backoff time.Duration // longest wait between failed attempts; 0: DefaultMaxBackoff
	Log     *slog.Logger
	Metrics *telemetry.Metrics // nil: none
	// OnDiverged, when set, is told each time PostgreSQL refuses the
	// journal as not the chain it witnessed (ErrDiverged): the daemon
	// then stops taking invocations, as for damage its own check finds.
	OnDiverged func(error)

	conn *pgxpool.Conn // holds the host id's advisory lock
	last shipped
}

// shipped is the newest row PostgreSQL holds for the host.
type shipped struct {
	seq  int64
	hash string
}

// Run ships until ctx ends: what is there, then every Poll, retrying
// failures with a growing backoff.
func (s *Shipper) Run(ctx context.Context) {
	wait := time.Duration(0)
	defer s.disconnect()
	for {
		n, err := s.ShipOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		switch {
		case errors.Is(err, ErrDiverged):
			wait = s.maxBackoff()
			s.logger().Error("audit shipping refused: the local chain is not the one shipped; see `cyberos audit verify --dsn`", "err", err, "retry_in", wait)
		case err != nil:
			wait = min(max(2*wait, 100*time.Millisecond), s.maxBackoff())
			s.logger().Warn("audit shipping failed; retrying", "err", err, "retry_in", wait)
		case n > 0:
			wait = 0
			continue // more may be waiting
		default:
			wait = 0
		}
		t := time.NewTimer(max(wait, s.poll()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// ShipOnce ships the rows the journal holds beyond what PostgreSQL has, up
// to one batch, and returns how many it shipped. One goroutine at a time
// ships (Run, or ShipOnce and Flush when Run is not running).
func (s *Shipper) ShipOnce(ctx context.Context) (int, error) {
	n, err := s.shipOnce(ctx)
	if err != nil {
		s.disconnect()
		if m := s.Metrics; m != nil && ctx.Err() == nil { // a stop is not a failure
			reason := telemetry.ShipErrorDatabase
			switch {
			case errors.Is(err, ErrHostIDInUse):
				reason = telemetry.ShipErrorHostID
			case errors.Is(err, ErrDiverged):
				reason = telemetry.ShipErrorDiverged
			}
			m.AuditShipErrors.WithLabelValues(reason).Inc()
		}
		if errors.Is(err, ErrDiverged) && s.OnDiverged != nil && ctx.Err() == nil {
			s.OnDiverged(err)
		}
	}
	if m := s.Metrics; m != nil {
		// Before the first connection the resume point is unknown: the
		// lag shown is then the whole journal, an upper bound.
		if head, herr := s.Source.LastSeq(ctx); herr == nil {
			m.AuditShipLag.Set(float64(max(0, head-s.last.seq)))
		}
		m.AuditShipped.Add(float64(n))
	}
	return n, err
}

// Flush ships until the journal is all in PostgreSQL, ctx ends or a
// shipment fails. Not while Run runs: the daemon calls it once Run has
// returned, at shutdown.
func (s *Shipper) Flush(ctx context.Context) error {
	defer s.disconnect()
	for {
		n, err := s.ShipOnce(ctx)
		if err != nil || n == 0 {
			return err
		}
	}
}

func (s *Shipper) shipOnce(ctx context.Context) (int, error) {
	if err := s.connect(ctx); err != nil {
		return 0, err
	}
	rows, err := s.Source.Rows(ctx, auditstore.Filter{AfterSeq: s.last.seq, Limit: s.batch()})
	if err != nil {
		return 0, fmt.Errorf("fleet: read the journal: %w", err)
	}
	if len(rows) == 0 {
		return 0, nil
	}
	// The batch must continue the shipped chain, row by row.
	prev := s.last
	for _, r := range rows {
		if r.Seq != prev.seq+1 || (prev.seq > 0 && r.PrevHash != prev.hash) {
			return 0, fmt.Errorf("%w: host %s, journal seq %d (prev_hash %.12s…) after shipped seq %d (row_hash %.12s…)",
				ErrDiverged, s.HostID, r.Seq, r.PrevHash, prev.seq, prev.hash)
		}
		prev = shipped{r.Seq, r.RowHash}
	}
	n := len(rows)
	seqs, ids, kinds, tss := make([]int64, n), make([]string, n), make([]string, n), make([]string, n)
	prevs, hashes, payloads := make([]string, n), make([]string, n), make([]string, n)
	for i, r := range rows {
		seqs[i], ids[i], kinds[i], tss[i] = r.Seq, r.RowID, string(r.Kind), r.TS
		prevs[i], hashes[i], payloads[i] = r.PrevHash, r.RowHash, string(r.Payload)
	}
	err = pgx.BeginFunc(ctx, s.conn, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO audit_rows (host_id, seq, row_id, kind, ts, prev_hash, row_hash, payload)
			SELECT $1, * FROM unnest($2::bigint[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[], $8::text[])
			ON CONFLICT (host_id, seq) DO NOTHING`, s.HostID, seqs, ids, kinds, tss, prevs, hashes, payloads)
		if err != nil {
			return err
		}
		if int(tag.RowsAffected()) == n {
			return nil
		}
		// Some were there already: only the same rows may be.
		var differ int64
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM audit_rows a
			JOIN unnest($2::bigint[], $3::text[]) AS u(seq, row_hash) ON a.seq = u.seq
			WHERE a.host_id = $1 AND a.row_hash <> u.row_hash`, s.HostID, seqs, hashes).Scan(&differ); err != nil {
			return err
		}
		if differ > 0 {
			return fmt.Errorf("%w: host %s: %d of seq %d..%d are in PostgreSQL with other hashes", ErrDiverged, s.HostID, differ, seqs[0], seqs[n-1])
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrDiverged) {
			return 0, err
		}
		return 0, fmt.Errorf("fleet: ship seq %d..%d: %w", seqs[0], seqs[n-1], err)
	}
	s.last = prev
	return n, nil
}

// connect takes a connection, checks the database is set up for this
// host (CheckRuntime), takes the host id's advisory lock, and reads where
// shipping resumes.
func (s *Shipper) connect(ctx context.Context) error {
	if s.conn != nil {
		return nil
	}
	conn, err := s.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("fleet: connect: %w", err)
	}
	if err := CheckRuntime(ctx, conn, s.HostID); err != nil {
		conn.Release()
		return err
	}
	var locked bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, hostLockKey(s.HostID)).Scan(&locked); err != nil {
		conn.Release()
		return fmt.Errorf("fleet: connect: %w", err)
	}
	if !locked {
		conn.Release()
		return fmt.Errorf("%w: %s (each daemon needs its own fleet.host_id)", ErrHostIDInUse, s.HostID)
	}
	var last shipped
	err = conn.QueryRow(ctx, `SELECT seq, row_hash FROM audit_rows WHERE host_id = $1 ORDER BY seq DESC LIMIT 1`, s.HostID).Scan(&last.seq, &last.hash)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		conn.Conn().Close(ctx) //nolint:errcheck // dropping the session drops the lock
		conn.Release()
		return fmt.Errorf("fleet: resume point: %w", err)
	}
	// The first comparison, and one at every reconnection: the journal
	// must hold the shipped chain, not a shorter or another one.
	if err := CheckHead(ctx, conn, s.HostID, s.Source); err != nil {
		conn.Conn().Close(ctx) //nolint:errcheck // dropping the session drops the lock
		conn.Release()
		return err
	}
	if m := s.Metrics; m != nil {
		m.AuditWitnessUnchecked.Set(0)
	}
	s.conn, s.last = conn, last
	return nil
}

// disconnect releases the host id's advisory lock and closes the session.
// The lock is released explicitly first: a closed session's backend drops
// it only when it exits, and the Flush that follows Run at shutdown takes
// it again at once.
func (s *Shipper) disconnect() {
	if s.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, _ = s.conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, hostLockKey(s.HostID))
	_ = s.conn.Conn().Close(ctx)
	s.conn.Release()
	s.conn = nil
}

// hostLockKey is the advisory lock key of a host id's shipping.
func hostLockKey(hostID string) int64 {
	h := fnv.New64a()
	h.Write([]byte("cyberos-ship:" + hostID))
	return int64(h.Sum64())
}

func (s *Shipper) batch() int {
	if s.Batch > 0 {
		return s.Batch
	}
	return DefaultShipBatch
}

func (s *Shipper) poll() time.Duration {
	if s.Poll > 0 {
		return s.Poll
	}
	return DefaultShipPoll
}

func (s *Shipper) maxBackoff() time.Duration {
	if s.Backoff > 0 {
		return s.Backoff
	}
	return DefaultMaxBackoff
}

func (s *Shipper) logger() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}
