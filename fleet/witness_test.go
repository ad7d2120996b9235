package fleet

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/internal/testutil"
	"cyberos.dev/telemetry"
)

// rowSource is a journal as a slice of rows (a cut or replaced one).
type rowSource []audit.Row

func (s rowSource) Rows(_ context.Context, f auditstore.Filter) ([]audit.Row, error) {
	var out []audit.Row
	for _, r := range s {
		if r.Seq > f.AfterSeq && (f.Limit == 0 || len(out) < f.Limit) {
			out = append(out, r)
		}
	}
	return out, nil
}

func (s rowSource) LastSeq(context.Context) (int64, error) {
	if len(s) == 0 {
		return 0, nil
	}
	return s[len(s)-1].Seq, nil
}

func (s rowSource) each(fn func(audit.Row) error) error {
	for _, r := range s {
		if err := fn(r); err != nil {
			return err
		}
	}
	return nil
}

func storeRows(t *testing.T, s *auditstore.Store) rowSource {
	t.Helper()
	rows, err := s.Rows(context.Background(), auditstore.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// The head check and the comparison against what PostgreSQL holds for a
// host: a journal that holds the shipped chain (and more, not shipped
// yet) passes; one cut short is missing rows locally; another chain,
// shorter, as long or longer, is diverged.
func TestWitnessCheckHeadAndCompare(t *testing.T) {
	pg := testutil.StartPostgres(t)
	ctx := context.Background()
	if seq, _, err := ShippedHead(ctx, newPool(t, pg.CreateDatabase("bare")), "host-a"); err != nil || seq != 0 {
		t.Fatalf("the head of a database never migrated: %d %v, want 0 and no error", seq, err)
	}
	// As the daemon reads it: host-a's own role, which row-level security
	// shows host-a's rows only.
	db := newFleetDB(t, pg, "witness1")
	pool := db.host("host-a")
	st := newStore(t)
	emit(t, st, "11111111-1111-1111-1111-111111111111", 10)
	if err := (&Shipper{Pool: pool, HostID: "host-a", Source: st}).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	emit(t, st, "11111111-1111-1111-1111-111111111111", 2) // not shipped
	full := storeRows(t, st)
	other := newStore(t)
	emit(t, other, "22222222-2222-2222-2222-222222222222", 15)
	replaced := storeRows(t, other)

	for _, c := range []struct {
		name      string
		journal   rowSource
		err       error // of CheckHead
		missing   []SeqRange
		differ    int
		unshipped []SeqRange
	}{
		{"the shipped chain and more", full, nil, nil, 0, []SeqRange{{21, 24}}},
		{"the shipped chain", full[:20], nil, nil, 0, nil},
		{"cut short", full[:15], ErrMissingLocally, []SeqRange{{16, 20}}, 0, nil},
		{"empty", nil, ErrMissingLocally, []SeqRange{{1, 20}}, 0, nil},
		{"another chain, shorter", replaced[:6], ErrDiverged, []SeqRange{{7, 20}}, 6, nil},
		{"another chain, as long", replaced[:20], ErrDiverged, nil, 20, nil},
		{"another chain, longer", replaced, ErrDiverged, nil, 20, []SeqRange{{21, 30}}},
	} {
		err := CheckHead(ctx, pool, "host-a", c.journal)
		if !errors.Is(err, c.err) || (c.err == nil) != (err == nil) ||
			errors.Is(c.err, ErrMissingLocally) != errors.Is(err, ErrMissingLocally) {
			t.Errorf("%s: CheckHead: %v, want %v", c.name, err, c.err)
		}
		rep, err := Compare(ctx, pool, "host-a", c.journal.each)
		if err != nil {
			t.Fatalf("%s: Compare: %v", c.name, err)
		}
		if !slices.Equal(rep.MissingLocally, c.missing) || rep.DifferCount != c.differ || !slices.Equal(rep.Unshipped, c.unshipped) ||
			rep.OK != (c.err == nil) || rep.ShippedRows != 20 || len(rep.Gaps) != 0 {
			t.Errorf("%s: Compare: %+v; want missing %v, %d differing, unshipped %v", c.name, rep, c.missing, c.differ, c.unshipped)
		}
	}
	if err := CheckHead(ctx, db.host("host-b"), "host-b", replaced); err != nil {
		t.Errorf("a host that shipped nothing: %v", err)
	}
	// The auditor's role sees every host's rows: the same report.
	if rep, err := Compare(ctx, db.auditor(), "host-a", full[:15].each); err != nil || !slices.Equal(rep.MissingLocally, []SeqRange{{16, 20}}) {
		t.Errorf("Compare as the auditor on a journal cut short: %+v %v, want seq 16..20 missing locally", rep, err)
	}
}

// Row-level security shows a host's role only the rows of the host id it
// is bound to: another host's role comparing host-a's cut journal would
// see none of host-a's rows and call it whole. It is refused instead.
func TestWitnessRefusesARoleBlindToTheHost(t *testing.T) {
	pg := testutil.StartPostgres(t)
	ctx := context.Background()
	db := newFleetDB(t, pg, "witness4")
	dir := t.TempDir()
	st, err := auditstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	emit(t, st, "11111111-1111-1111-1111-111111111111", 6)
	if err := (&Shipper{Pool: db.host("host-a"), HostID: "host-a", Source: st}).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	cut := storeRows(t, st)[:5]
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	hostB := db.host("host-b")
	rep, err := Compare(ctx, hostB, "host-a", cut.each)
	if !errors.Is(err, ErrHostNotBound) || rep.OK {
		t.Errorf("Compare of host-a's cut journal as host-b's role: OK=%v %v, want ErrHostNotBound", rep.OK, err)
	}
	fresh := t.TempDir()
	if res, err := RestoreFromWitness(ctx, hostB, "host-a", fresh); !errors.Is(err, ErrHostNotBound) || res.Restored.To != 0 {
		t.Errorf("restore of host-a as host-b's role: %+v %v, want ErrHostNotBound and nothing restored", res.Restored, err)
	}
	db.pg.Psql("postgres", "CREATE ROLE witness4_unbound LOGIN IN ROLE cyberos_runtime")
	if _, err := Compare(ctx, newPool(t, db2dsn(db.pg, "witness4_unbound", db.name)), "host-a", cut.each); !errors.Is(err, ErrHostNotBound) {
		t.Errorf("Compare as a host role bound to no host id: %v, want ErrHostNotBound", err)
	}
	if res, err := RestoreFromWitness(ctx, db.auditor(), "host-a", fresh); err != nil || res.Restored != (SeqRange{1, 12}) {
		t.Errorf("restore of host-a as the auditor: %+v %v, want seq 1..12", res.Restored, err)
	}
}

// A journal replaced by a shorter chain under the same host id is
// diverged at the shipper's first comparison, not once it passes the
// shipped seq; the shipped rows stay as they were.
func TestShipFlagsAReplacedShorterJournalAtOnce(t *testing.T) {
	pg := testutil.StartPostgres(t)
	pool := newFleetDB(t, pg, "witness2").host("host-a")
	ctx := context.Background()
	old := newStore(t)
	emit(t, old, "11111111-1111-1111-1111-111111111111", 5)
	if err := (&Shipper{Pool: pool, HostID: "host-a", Source: old}).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	replaced := newStore(t)
	emit(t, replaced, "11111111-1111-1111-1111-111111111111", 2)
	m := telemetry.NewMetrics()
	m.AuditWitnessUnchecked.Set(1)
	var told error
	sh := &Shipper{Pool: pool, HostID: "host-a", Source: replaced, Metrics: m, OnDiverged: func(err error) { told = err }}
	t.Cleanup(sh.disconnect) // before the pool closes
	if _, err := sh.ShipOnce(ctx); !errors.Is(err, ErrDiverged) {
		t.Fatalf("first shipment of a replaced, shorter journal: %v, want ErrDiverged", err)
	}
	if !errors.Is(told, ErrDiverged) {
		t.Errorf("OnDiverged told %v, want ErrDiverged", told)
	}
	if promtest.ToFloat64(m.AuditShipErrors.WithLabelValues(telemetry.ShipErrorDiverged)) != 1 {
		t.Errorf("diverged not counted")
	}
	if promtest.ToFloat64(m.AuditWitnessUnchecked) != 1 {
		t.Errorf("witness marked checked after a failed comparison")
	}
	sameAsJournal(t, pool, "host-a", old)

	good := &Shipper{Pool: pool, HostID: "host-a", Source: old, Metrics: m}
	if _, err := good.ShipOnce(ctx); err != nil {
		t.Fatal(err)
	}
	good.disconnect()
	if promtest.ToFloat64(m.AuditWitnessUnchecked) != 0 {
		t.Errorf("cyberos_audit_witness_unchecked still 1 after a comparison that passed")
	}
}

// A state dir made afresh takes the whole shipped chain back, byte for
// byte; one holding another chain is not touched.
func TestRestoreFromWitness(t *testing.T) {
	pg := testutil.StartPostgres(t)
	pool := newFleetDB(t, pg, "witness3").host("host-a")
	ctx := context.Background()
	dir := t.TempDir()
	st, err := auditstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	emit(t, st, "11111111-1111-1111-1111-111111111111", 6)
	if err := (&Shipper{Pool: pool, HostID: "host-a", Source: st}).Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	fresh := t.TempDir()
	res, err := RestoreFromWitness(ctx, pool, "host-a", fresh)
	if err != nil || res.Restored != (SeqRange{1, 12}) {
		t.Fatalf("restore into an empty state dir: %+v %v, want seq 1..12", res.Restored, err)
	}
	if a, b := journalOf(t, dir), journalOf(t, fresh); !bytes.Equal(a, b) {
		t.Errorf("the restored journal (%d bytes) is not the shipped host's (%d bytes)", len(b), len(a))
	}
	if rep, err := auditstore.VerifyDir(ctx, fresh); err != nil || !rep.OK || rep.Rows != 12 {
		t.Errorf("the restored state dir: %+v %v", rep, err)
	}

	other := t.TempDir()
	os2, err := auditstore.Open(other)
	if err != nil {
		t.Fatal(err)
	}
	emit(t, os2, "22222222-2222-2222-2222-222222222222", 2)
	os2.Close()
	before := journalOf(t, other)
	if _, err := RestoreFromWitness(ctx, pool, "host-a", other); !errors.Is(err, ErrDiverged) || errors.Is(err, ErrMissingLocally) {
		t.Errorf("restore onto another chain: %v, want ErrDiverged", err)
	}
	if !bytes.Equal(before, journalOf(t, other)) {
		t.Errorf("a refused restore changed the journal")
	}
}

// journalOf is the journal's lines in dir (its end is its first NUL byte).
func journalOf(t *testing.T, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, auditstore.JournalName))
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return b
}
