package fleet

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/internal/testutil"
	"cyberos.dev/telemetry"
)

func newPool(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

func newStore(t *testing.T) *auditstore.Store { return benchStore(t) }

func benchStore(t testing.TB) *auditstore.Store {
	t.Helper()
	s, err := auditstore.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// emit writes n invocations (started + completed rows) to s.
func emit(t *testing.T, s *auditstore.Store, tenant string, n int) { emitB(t, s, tenant, n) }

func emitB(t testing.TB, s *auditstore.Store, tenant string, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		c := audit.Common{InvocationID: fmt.Sprintf("inv-%s-%d-%d", tenant[:8], time.Now().UnixNano(), i), RequestID: "req", SkillID: "s", TenantID: tenant, TraceID: strings.Repeat("a", 32)}
		if _, err := s.Emit(context.Background(), audit.InvokedStarted(c, "1.0.0", "", strings.Repeat("b", 64), map[string]string{})); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Emit(context.Background(), audit.InvokedCompleted(c, audit.OutcomeSuccess, 1, "", "")); err != nil {
			t.Fatal(err)
		}
	}
}

// pgRows are a host's rows in PostgreSQL, as seq → row_hash, checked to be
// 1..n without a gap.
func pgRows(t *testing.T, pool *pgxpool.Pool, host string) map[int64]string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT seq, row_hash FROM audit_rows WHERE host_id = $1 ORDER BY seq`, host)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[int64]string{}
	for rows.Next() {
		var seq int64
		var h string
		if err := rows.Scan(&seq, &h); err != nil {
			t.Fatal(err)
		}
		if seq != int64(len(out))+1 {
			t.Fatalf("host %s: seq %d after %d rows: a gap", host, seq, len(out))
		}
		out[seq] = h
	}
	return out
}

// sameAsJournal fails unless PostgreSQL holds exactly the store's rows.
func sameAsJournal(t *testing.T, pool *pgxpool.Pool, host string, s *auditstore.Store) {
	t.Helper()
	local, err := s.Rows(context.Background(), auditstore.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	got := pgRows(t, pool, host)
	if len(got) != len(local) {
		t.Fatalf("PostgreSQL holds %d rows of host %s, the journal %d", len(got), host, len(local))
	}
	for _, r := range local {
		if got[r.Seq] != r.RowHash {
			t.Fatalf("seq %d: PostgreSQL row_hash %.12s, journal %.12s", r.Seq, got[r.Seq], r.RowHash)
		}
	}
}

func TestShipCopiesTheJournalExactly(t *testing.T) {
	pg := testutil.StartPostgres(t)
	pool := newFleetDB(t, pg, "ship1").host("host-a")
	st := newStore(t)
	emit(t, st, "11111111-1111-1111-1111-111111111111", 60)
	m := telemetry.NewMetrics()
	sh := &Shipper{Pool: pool, HostID: "host-a", Source: st, Batch: 50, Metrics: m}
	if err := sh.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	sameAsJournal(t, pool, "host-a", st)
	if lag := promtest.ToFloat64(m.AuditShipLag); lag != 0 {
		t.Errorf("lag %v after a flush", lag)
	}
	// A stop (the daemon's context ending) is not a shipping failure.
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	emit(t, st, "11111111-1111-1111-1111-111111111111", 1)
	if _, err := sh.ShipOnce(stopped); err == nil {
		t.Fatal("ShipOnce with an ended context: no error")
	}
	if n := promtest.ToFloat64(m.AuditShipErrors.WithLabelValues(telemetry.ShipErrorDatabase)); n != 0 {
		t.Errorf("a stop counted as %v database errors", n)
	}
	if n := promtest.ToFloat64(m.AuditShipped); n != 120 {
		t.Errorf("shipped counter %v, want 120", n)
	}
	// The payload is the exact text the hash covers, and the generated
	// columns find the invocation and the tenant.
	var payload, tenant string
	if err := pool.QueryRow(context.Background(), `SELECT payload, tenant_id FROM audit_rows WHERE host_id = 'host-a' AND seq = 1`).Scan(&payload, &tenant); err != nil {
		t.Fatal(err)
	}
	first, _ := st.Rows(context.Background(), auditstore.Filter{Limit: 1})
	if payload != string(first[0].Payload) || tenant != "11111111-1111-1111-1111-111111111111" {
		t.Errorf("row 1: payload %q tenant %q; journal %q", payload, tenant, first[0].Payload)
	}
}

// A restarted shipper (a daemon restart, a lost connection) resumes after
// the last seq PostgreSQL holds: no row twice, none missing.
func TestShipResumesWithoutDuplicates(t *testing.T) {
	pg := testutil.StartPostgres(t)
	pool := newFleetDB(t, pg, "ship2").host("host-a")
	st := newStore(t)
	emit(t, st, "11111111-1111-1111-1111-111111111111", 10)
	first := &Shipper{Pool: pool, HostID: "host-a", Source: st, Batch: 7}
	if _, err := first.ShipOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	first.disconnect()
	if got := len(pgRows(t, pool, "host-a")); got != 7 {
		t.Fatalf("one batch shipped %d rows, want 7", got)
	}
	emit(t, st, "11111111-1111-1111-1111-111111111111", 10)
	second := &Shipper{Pool: pool, HostID: "host-a", Source: st, Batch: 7}
	if err := second.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	sameAsJournal(t, pool, "host-a", st)
}

// PostgreSQL stopped mid-stream: emitters never wait, the lag grows, and
// once it is back everything arrives exactly once.
func TestShipSurvivesAPostgresRestart(t *testing.T) {
	pg := testutil.StartPostgres(t)
	pool := newFleetDB(t, pg, "ship3").host("host-a")
	st := newStore(t)
	m := telemetry.NewMetrics()
	sh := &Shipper{Pool: pool, HostID: "host-a", Source: st, Batch: 20, Poll: 20 * time.Millisecond, Backoff: 200 * time.Millisecond, Metrics: m}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); sh.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	emit(t, st, "11111111-1111-1111-1111-111111111111", 20)
	testutil.WaitFor(t, 10*time.Second, func() bool { return promtest.ToFloat64(m.AuditShipped) == 40 })

	pg.Stop()
	t0 := time.Now()
	emit(t, st, "11111111-1111-1111-1111-111111111111", 30)
	if d := time.Since(t0); d > 5*time.Second {
		t.Errorf("60 emits took %v with PostgreSQL down: emitters waited for the shipper", d)
	}
	testutil.WaitFor(t, 10*time.Second, func() bool {
		return promtest.ToFloat64(m.AuditShipLag) == 60 && promtest.ToFloat64(m.AuditShipErrors.WithLabelValues(telemetry.ShipErrorDatabase)) > 0
	})
	pg.Start()
	testutil.WaitFor(t, 20*time.Second, func() bool { return promtest.ToFloat64(m.AuditShipLag) == 0 })
	cancel()
	wg.Wait()
	sameAsJournal(t, pool, "host-a", st)
}

// Two daemons configured with one host id: the second ships nothing.
func TestShipRefusesASecondShipperOfOneHostID(t *testing.T) {
	pg := testutil.StartPostgres(t)
	pool := newFleetDB(t, pg, "ship4").host("same")
	a, b := newStore(t), newStore(t)
	emit(t, a, "11111111-1111-1111-1111-111111111111", 3)
	emit(t, b, "22222222-2222-2222-2222-222222222222", 3)
	m := telemetry.NewMetrics()
	first := &Shipper{Pool: pool, HostID: "same", Source: a}
	if _, err := first.ShipOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer first.disconnect()
	second := &Shipper{Pool: pool, HostID: "same", Source: b, Metrics: m}
	if _, err := second.ShipOnce(context.Background()); !errors.Is(err, ErrHostIDInUse) {
		t.Fatalf("second shipper of host id %q: %v, want ErrHostIDInUse", "same", err)
	}
	if promtest.ToFloat64(m.AuditShipErrors.WithLabelValues(telemetry.ShipErrorHostID)) != 1 {
		t.Errorf("host_id_in_use not counted")
	}
	// Once the first is gone, the second finds a chain that is not its
	// own and refuses to extend or overwrite it.
	first.disconnect()
	emit(t, b, "22222222-2222-2222-2222-222222222222", 1)
	if _, err := second.ShipOnce(context.Background()); !errors.Is(err, ErrDiverged) {
		t.Fatalf("another host's chain under this id: %v, want ErrDiverged", err)
	}
	sameAsJournal(t, pool, "same", a)
}

// A journal replaced after shipping (restored from an old backup and
// written on) no longer continues the shipped chain: refused, nothing
// shipped, the shipped rows untouched.
func TestShipRefusesADivergedJournal(t *testing.T) {
	pg := testutil.StartPostgres(t)
	pool := newFleetDB(t, pg, "ship5").host("host-a")
	old := newStore(t)
	emit(t, old, "11111111-1111-1111-1111-111111111111", 5)
	if err := (&Shipper{Pool: pool, HostID: "host-a", Source: old}).Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	replaced := newStore(t)
	emit(t, replaced, "11111111-1111-1111-1111-111111111111", 8)
	m := telemetry.NewMetrics()
	sh := &Shipper{Pool: pool, HostID: "host-a", Source: replaced, Metrics: m}
	if err := sh.Flush(context.Background()); !errors.Is(err, ErrDiverged) {
		t.Fatalf("flush of a replaced journal: %v, want ErrDiverged", err)
	}
	if promtest.ToFloat64(m.AuditShipErrors.WithLabelValues(telemetry.ShipErrorDiverged)) != 1 {
		t.Errorf("diverged not counted")
	}
	sameAsJournal(t, pool, "host-a", old)
}

// Shipped rows cannot be changed or removed through SQL.
func TestShippedRowsAreAppendOnly(t *testing.T) {
	pg := testutil.StartPostgres(t)
	db := newFleetDB(t, pg, "ship6")
	pool := db.host("host-a")
	st := newStore(t)
	emit(t, st, "11111111-1111-1111-1111-111111111111", 1)
	if err := (&Shipper{Pool: pool, HostID: "host-a", Source: st}).Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		`UPDATE audit_rows SET payload = '{}' WHERE seq = 1`,
		`DELETE FROM audit_rows WHERE seq = 2`,
		`TRUNCATE audit_rows`,
	} {
		// As the owner: the daemon's role may not even try (roles_test.go).
		if _, err := db.owner.Exec(context.Background(), q); err == nil || !strings.Contains(err.Error(), "append-only") {
			t.Errorf("%s: %v, want the append-only refusal", q, err)
		}
	}
	sameAsJournal(t, pool, "host-a", st)
}

// Two migrations run at once apply each migration once; a database from a newer build is
// refused rather than used.
func TestMigrateConcurrentlyAndRefuseNewer(t *testing.T) {
	pg := testutil.StartPostgres(t)
	pool := ownerDB(t, pg, "mig")
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func(i int) { defer wg.Done(); errs[i] = Migrate(context.Background(), pool) }(i)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("migrate %d: %v", i, err)
		}
	}
	if v, want := pg.Psql("mig", `SELECT count(*) || ':' || max(version) FROM cyberos_schema`), strconv.Itoa(SchemaVersion())+":"+strconv.Itoa(SchemaVersion()); v != want {
		t.Errorf("cyberos_schema: %s", v)
	}
	pg.Psql("mig", fmt.Sprintf(`INSERT INTO cyberos_schema (version, name) VALUES (%d, 'from_the_future')`, SchemaVersion()+1))
	if err := Migrate(context.Background(), pool); !errors.Is(err, ErrSchemaTooNew) {
		t.Fatalf("newer schema: %v, want ErrSchemaTooNew", err)
	}
}

// The fleet's reads: every host's chain verifies from PostgreSQL alone; a
// row altered there (by someone who can lift the append-only trigger) is
// named, on its host only; a tenant's rows come from every host.
func TestFleetVerifyAndExport(t *testing.T) {
	pg := testutil.StartPostgres(t)
	db := newFleetDB(t, pg, "reads")
	pool := db.auditor()
	a, b := newStore(t), newStore(t)
	emit(t, a, "11111111-1111-1111-1111-111111111111", 3)
	emit(t, a, "22222222-2222-2222-2222-222222222222", 1)
	emit(t, b, "11111111-1111-1111-1111-111111111111", 2)
	for host, st := range map[string]*auditstore.Store{"host-a": a, "host-b": b} {
		if err := (&Shipper{Pool: db.host(host), HostID: host, Source: st}).Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	reps, err := Verify(context.Background(), pool, "", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) != 2 || reps[0].Host != "host-a" || reps[1].Host != "host-b" || !reps[0].Report.OK || !reps[1].Report.OK ||
		reps[0].Report.Rows != 8 || reps[1].Report.Rows != 4 {
		t.Fatalf("verify: %+v", reps)
	}
	var rowsOfT []string
	if err := EachRow(context.Background(), pool, RowFilter{Tenant: "11111111-1111-1111-1111-111111111111"}, func(h string, r audit.Row) error {
		rowsOfT = append(rowsOfT, fmt.Sprintf("%s/%d", h, r.Seq))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if strings.Join(rowsOfT, " ") != "host-a/1 host-a/2 host-a/3 host-a/4 host-a/5 host-a/6 host-b/1 host-b/2 host-b/3 host-b/4" {
		t.Errorf("tenant 1111… rows: %v", rowsOfT)
	}
	pg.Psql("reads", `ALTER TABLE audit_rows DISABLE TRIGGER audit_rows_append_only;
		UPDATE audit_rows SET payload = replace(payload, '"success"', '"error"') WHERE host_id = 'host-b' AND seq = 2;`)
	reps, err = Verify(context.Background(), pool, "", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reps[0].Report.OK || reps[1].Report.OK || len(reps[1].Report.Problems) == 0 || reps[1].Report.Problems[0].Seq != 2 {
		t.Fatalf("after altering host-b seq 2: %+v", reps)
	}
	if only, _ := Verify(context.Background(), pool, "host-a", "", nil); len(only) != 1 || only[0].Host != "host-a" {
		t.Errorf("verify of host-a only: %+v", only)
	}
}

// RowFilter.Since keeps the rows whose ts is at or after it.
func TestFleetRowsSince(t *testing.T) {
	pg := testutil.StartPostgres(t)
	pool := newFleetDB(t, pg, "since").host("host-a")
	st := newStore(t)
	emit(t, st, "11111111-1111-1111-1111-111111111111", 2)
	// The cut is a clock reading after every ts stamped so far.
	cut := time.Now()
	for start := cut; cut.UnixNano() <= start.UnixNano(); {
		cut = time.Now()
	}
	emit(t, st, "11111111-1111-1111-1111-111111111111", 3)
	if err := (&Shipper{Pool: pool, HostID: "host-a", Source: st}).Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	if err := EachRow(context.Background(), pool, RowFilter{Since: cut}, func(_ string, r audit.Row) error {
		seqs = append(seqs, r.Seq)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(seqs) != "[5 6 7 8 9 10]" {
		t.Errorf("rows since the cut: seqs %v, want 5..10", seqs)
	}
}

// A host's heads recorded off the host (its syslog anchors): the shipped
// row at a head's seq must carry the head's hash; a head not shipped yet is
// a note, not a problem.
func TestFleetVerifyAgainstAnchors(t *testing.T) {
	pg := testutil.StartPostgres(t)
	pool := newFleetDB(t, pg, "anchors").host("host-a")
	st := newStore(t)
	emit(t, st, "11111111-1111-1111-1111-111111111111", 3)
	if err := (&Shipper{Pool: pool, HostID: "host-a", Source: st}).Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	rows, _ := st.Rows(context.Background(), auditstore.Filter{})
	good := audit.Checkpoint{Seq: 4, RowHash: rows[3].RowHash}
	ahead := audit.Checkpoint{Seq: 9, RowHash: strings.Repeat("c", 64)}
	reps, err := Verify(context.Background(), pool, "host-a", "", []audit.Checkpoint{good, ahead})
	if err != nil || len(reps) != 1 || !reps[0].Report.OK || len(reps[0].Report.Notes) != 1 || !strings.Contains(reps[0].Report.Notes[0], "seq 9 is not shipped yet") {
		t.Fatalf("a matching head and one not shipped yet: %+v %v", reps, err)
	}
	forged := audit.Checkpoint{Seq: 4, RowHash: strings.Repeat("d", 64)}
	reps, err = Verify(context.Background(), pool, "host-a", "", []audit.Checkpoint{forged})
	if err != nil || len(reps) != 1 || reps[0].Report.OK || reps[0].Report.Problems[0].Seq != 4 {
		t.Fatalf("a head the shipped chain does not match: %+v %v", reps, err)
	}
	if _, err := Verify(context.Background(), pool, "", "", []audit.Checkpoint{good}); err == nil {
		t.Error("heads without a host: no error")
	}
}

// TestFlushAfterRunFindsTheLockFree: Run releases the host id's advisory
// lock as it returns, so the Flush that follows it at once at shutdown
// ships the last rows (a closed session's backend drops its locks only
// when it exits, which may be after the Flush has tried).
func TestFlushAfterRunFindsTheLockFree(t *testing.T) {
	pg := testutil.StartPostgres(t)
	pool := newFleetDB(t, pg, "ship9").host("host-a")
	st := newStore(t)
	const tenant = "11111111-1111-1111-1111-111111111111"
	for round := range 20 {
		emit(t, st, tenant, 2)
		sh := &Shipper{Pool: pool, HostID: "host-a", Source: st, Poll: time.Hour}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); sh.Run(ctx) }()
		head, err := st.LastSeq(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		testutil.WaitFor(t, 10*time.Second, func() bool { return int64(len(pgRows(t, pool, "host-a"))) == head })
		emit(t, st, tenant, 2)
		cancel()
		<-done
		if err := sh.Flush(context.Background()); err != nil {
			t.Fatalf("round %d: Flush right after Run: %v", round, err)
		}
	}
	sameAsJournal(t, pool, "host-a", st)
}
