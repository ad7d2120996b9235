//go:build linux

package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/internal/testutil"
)

// Must show (issue 21, audit shipping): two daemons on one machine, each
// with its own host id, state dir and id ranges, ship their audit rows to
// one PostgreSQL, which then holds exactly each host's journal: every row,
// once, with the journal's hashes; 1 000 invocations, 2 000 invocation
// rows. PostgreSQL stopped for 10 s mid-load fails no invocation (the
// journal is the durable write); the lag rises, and returns to 0 once it
// is back; audit verify --dsn passes.
func TestFleetTwoDaemonsShipToOnePostgres(t *testing.T) {
	pg := testutil.StartPostgres(t)
	db := newFleetDatabase(t, pg, "fleet", true)
	auditor := db.auditor()
	eA, eB := newEnv(t), newEnv(t)
	for _, e := range []*env{eA, eB} {
		e.skill("quick", "", "#!/bin/sh\necho '{}'\n")
	}
	fleetCfg := func(host string) string {
		return fmt.Sprintf("fleet: {postgres_dsn: '%s', host_id: %s}", db.host(host), host)
	}
	dA := startDaemon(t, eA, fleetCfg("host-a"))
	// Its own id ranges: two daemons on one host must not share them.
	dB := startDaemon(t, eB, fleetCfg("host-b"), "max_concurrent: 16", "warm: {max_sandboxes: 2}", "userns: {host_id_base: 200000000}")

	// A Kubernetes probe reaches the metrics port only.
	for _, d := range []*daemonProc{dA, dB} {
		resp, err := http.Get("http://" + d.metricsAddr + "/healthz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("GET /healthz on metrics_listen: %v %v", resp, err)
		}
		resp.Body.Close()
	}

	var invoked atomic.Int64 // invocations answered, over every load
	load := func(n int) (failed []string) {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, d := range []*daemonProc{dA, dB} {
			for w := 0; w < 2; w++ {
				wg.Add(1)
				go func(d *daemonProc) {
					defer wg.Done()
					for i := 0; i < n; i++ {
						code, env, raw := d.invoke(map[string]any{"skill_id": "quick", "tenant_id": "11111111-1111-1111-1111-111111111111"})
						invoked.Add(1)
						if code != 200 || env.Outcome != "success" {
							mu.Lock()
							failed = append(failed, fmt.Sprintf("HTTP %d %s", code, raw))
							mu.Unlock()
						}
					}
				}(d)
			}
		}
		wg.Wait()
		return failed
	}
	if failed := load(25); len(failed) > 0 { // 100 invocations
		t.Fatalf("%d invocations failed: %v", len(failed), failed[0])
	}
	shippedAll(t, pg, map[string]*env{"host-a": eA, "host-b": eB}, dA, dB)

	// 900 more, PostgreSQL stopped for 10 s in the middle of them.
	done := make(chan []string)
	t0 := time.Now()
	before := invoked.Load()
	go func() { done <- load(225) }()
	// Stop PostgreSQL once the load is under way.
	waitFor(t, 30*time.Second, func() bool { return invoked.Load() >= before+40 })
	pg.Stop()
	var maxLag float64
	for stopped := time.Now(); time.Since(stopped) < 10*time.Second; time.Sleep(250 * time.Millisecond) {
		maxLag = max(maxLag, dA.gauge("cyberos_audit_ship_lag_rows")+dB.gauge("cyberos_audit_ship_lag_rows"))
	}
	pg.Start()
	failed := <-done
	loadEnd := time.Now()
	if len(failed) > 0 {
		t.Fatalf("with PostgreSQL stopped for 10 s, %d invocations failed: %v", len(failed), failed[0])
	}
	shippedAll(t, pg, map[string]*env{"host-a": eA, "host-b": eB}, dA, dB)
	t.Logf("900 invocations in %v, PostgreSQL stopped for 10 s of it: lag up to %.0f rows; every row in PostgreSQL %v after the last invocation",
		loadEnd.Sub(t0).Round(time.Millisecond), maxLag, time.Since(loadEnd).Round(time.Millisecond))
	if maxLag <= 0 {
		t.Errorf("lag with PostgreSQL stopped under load: %v, want > 0", maxLag)
	}
	if n := dA.gauge(`cyberos_audit_ship_errors_total{reason="database"}`); n <= 0 {
		t.Errorf("no shipping error counted while PostgreSQL was stopped")
	}
	if n := pg.Psql("fleet", "SELECT count(*) FROM audit_rows WHERE kind IN ('skill.invoked_started', 'skill.invoked_completed')"); n != "2000" {
		t.Errorf("invocation rows in PostgreSQL: %s, want 2000 (1 000 invocations)", n)
	}

	// The auditor's view: every host's chain verifies from PostgreSQL, and
	// a tenant's rows come from both hosts.
	out, err := cyberos("audit", "verify", "--dsn-file", auditor).CombinedOutput()
	sections := strings.Split(string(out), "== host ")
	if err != nil || len(sections) != 3 || !strings.HasPrefix(sections[1], "host-a\n") || !strings.HasPrefix(sections[2], "host-b\n") ||
		!strings.Contains(sections[1], "\nok: ") || !strings.Contains(sections[2], "\nok: ") {
		t.Fatalf("audit verify --dsn: %v\n%s", err, out)
	}
	// A head host A recorded off-host matches what it shipped; a forged one
	// does not.
	rowsA := eA.auditRows()
	head := rowsA[len(rowsA)/2]
	if out, err := cyberos("audit", "verify", "--dsn-file", auditor, "--host", "host-a", "--anchor", fmt.Sprintf("%d:%s", head.Seq, head.RowHash)).CombinedOutput(); err != nil {
		t.Errorf("verify --dsn --host --anchor of a recorded head: %v\n%s", err, out)
	}
	forged := fmt.Sprintf("%d:%s", head.Seq, strings.Repeat("0", 64))
	if out, err := cyberos("audit", "verify", "--dsn-file", auditor, "--host", "host-a", "--anchor", forged).CombinedOutput(); exitCode(err) != 1 || !strings.Contains(string(out), "chain was rewritten") {
		t.Errorf("verify --dsn --anchor of a forged head: exit %d\n%s", exitCode(err), out)
	}
	out, err = cyberos("audit", "export", "--dsn-file", auditor, "--tenant", "11111111-1111-1111-1111-111111111111", "--kind", "skill.invoked_completed").Output()
	if err != nil {
		t.Fatalf("audit export --dsn: %v", err)
	}
	perHost := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		var r struct {
			Host string `json:"host_id"`
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal([]byte(l), &r); err != nil || r.Kind != "skill.invoked_completed" {
			t.Fatalf("export line %q: %v", l, err)
		}
		perHost[r.Host]++
	}
	if perHost["host-a"] != 500 || perHost["host-b"] != 500 {
		t.Errorf("completed rows of the tenant per host: %v, want 500 each", perHost)
	}
}

// shippedAll waits until PostgreSQL holds as many rows of each host as its
// journal and every daemon's lag reads 0 (the gauge is as of the last
// shipping round, up to a poll old), then checks the rows are the
// journal's: the same seqs, each once, with the same row hashes.
func shippedAll(t *testing.T, pg *testutil.Postgres, hosts map[string]*env, ds ...*daemonProc) {
	t.Helper()
	waitFor(t, slow(30*time.Second), func() bool {
		for host, e := range hosts {
			if pg.Psql("fleet", "SELECT count(*) FROM audit_rows WHERE host_id = '"+host+"'") != strconv.Itoa(len(e.auditRows())) {
				return false
			}
		}
		for _, d := range ds {
			if d.gauge("cyberos_audit_ship_lag_rows") != 0 {
				return false
			}
		}
		return true
	})
	for host, e := range hosts {
		rows := e.auditRows()
		got := pg.Psql("fleet", "SELECT seq || ' ' || row_hash FROM audit_rows WHERE host_id = '"+host+"' ORDER BY seq")
		lines := strings.Split(got, "\n")
		if len(lines) != len(rows) {
			t.Fatalf("host %s: PostgreSQL holds %d rows, its journal %d", host, len(lines), len(rows))
		}
		for i, r := range rows {
			if want := strconv.FormatInt(r.Seq, 10) + " " + r.RowHash; lines[i] != want {
				t.Fatalf("host %s row %d: PostgreSQL %q, journal %q", host, i, lines[i], want)
			}
		}
	}
}

// The DSN file may hold a password: no skill reads it through the file
// tools, even one allowed the directory it lives in. PostgreSQL need not
// be up for the daemon to serve (its rows wait in the journal).
func TestFleetDSNFileIsReservedFromSkills(t *testing.T) {
	e := newEnv(t)
	dir := filepath.Join(e.base, "secrets")
	os.MkdirAll(dir, 0o755)
	dsnFile := filepath.Join(dir, "postgres-dsn")
	os.WriteFile(dsnFile, []byte("postgres://cyberos:SECRETPW@127.0.0.1:1/cyberos?sslmode=disable\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "other.txt"), []byte("fine\n"), 0o644)
	e.skill("peek", fmt.Sprintf("allowed_tools: [Read, Grep]\nx-allowed-files: ['%s/**']\n", dir), callScript(
		[3]string{"other", "Read", fmt.Sprintf(`{"path":"%s/other.txt"}`, dir)},
		[3]string{"dsn", "Read", fmt.Sprintf(`{"path":"%s"}`, dsnFile)},
		[3]string{"grep", "Grep", fmt.Sprintf(`{"pattern":"SECRETPW","path":"%s"}`, dir)},
	))
	d := startDaemon(t, e, fmt.Sprintf("fleet: {postgres_dsn_file: %s, host_id: host-a}", dsnFile))
	code, env, raw := d.invoke(map[string]any{"skill_id": "peek"})
	if code != 200 || env.Outcome != "success" {
		t.Fatalf("HTTP %d %s", code, raw)
	}
	var m map[string]callResult
	if err := json.Unmarshal(env.Result, &m); err != nil {
		t.Fatalf("result %s: %v", env.Result, err)
	}
	mustOK(t, m, "other")
	mustRefuse(t, m, "dsn", "file_violation")
	if strings.Contains(string(env.Result), "SECRETPW") {
		t.Errorf("the DSN's password reached the skill: %s", env.Result)
	}
}

// Must show (issue 21, tenant memory): with a fleet, tenant memory is the
// fleet's. A note emitted through daemon A is found by a MemorySearch (and
// read) through daemon B for the same tenant, and not for another tenant.
// With PostgreSQL stopped, a memory call fails with a clear tool error,
// audited, and the invocation still ends; a skill without memory tools is
// not affected.
func TestFleetMemoryAcrossHosts(t *testing.T) {
	pg := testutil.StartPostgres(t)
	db := newFleetDatabase(t, pg, "fleet", true)
	auditor := db.auditor()
	eA, eB := newEnv(t), newEnv(t)
	const t1, t2 = "11111111-1111-1111-1111-111111111111", "22222222-2222-2222-2222-222222222222"
	eA.skill("saver", "allowed_tools: [MemoryEmit]\nallowed_memory_scopes: [\"notes/**\"]\n", callScript(
		[3]string{"emit", "MemoryEmit", `{"path":"notes/fleet","body":"saved on host a: pomegranate"}`}))
	for _, e := range []*env{eA, eB} {
		e.skill("finder", "allowed_tools: [MemoryRead, MemorySearch]\nallowed_memory_scopes: [\"notes/**\"]\n", callScript(
			[3]string{"search", "MemorySearch", `{"query":"pomegranate"}`},
			[3]string{"read", "MemoryRead", `{"path":"notes/fleet"}`}))
		e.skill("quick", "", "#!/bin/sh\necho '{}'\n")
	}
	fleetCfg := func(host string) string {
		return fmt.Sprintf("fleet: {postgres_dsn: '%s', host_id: %s}", db.host(host), host)
	}
	dA := startDaemon(t, eA, fleetCfg("host-a"))
	dB := startDaemon(t, eB, fleetCfg("host-b"), "max_concurrent: 16", "warm: {max_sandboxes: 2}", "userns: {host_id_base: 200000000}")

	run := func(d *daemonProc, skill, tenant string) (map[string]callResult, envelope) {
		t.Helper()
		code, env, raw := d.invoke(map[string]any{"skill_id": skill, "tenant_id": tenant})
		if code != 200 || env.Outcome != "success" {
			t.Fatalf("%s as %s: HTTP %d %s", skill, tenant, code, raw)
		}
		var m map[string]callResult
		if skill != "quick" {
			if err := json.Unmarshal(env.Result, &m); err != nil {
				t.Fatalf("%s result %s: %v", skill, env.Result, err)
			}
		}
		return m, env
	}
	m, saved := run(dA, "saver", t1)
	mustOK(t, m, "emit")
	// A host reads only its own shipped rows: replay through host B does
	// not find what host A ran; the auditor's export does, once shipped.
	resp, err := dB.client.Get("http://cyberos/v1/invocations/" + saved.InvocationID + "/replay")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("replay through host B of host A's invocation: HTTP %d, want 404", resp.StatusCode)
	}
	waitFor(t, slow(20*time.Second), func() bool {
		out, err := cyberos("audit", "export", "--dsn-file", auditor, "--invocation", saved.InvocationID, "--kind", string(audit.KindToolCallCompleted)).Output()
		return err == nil && strings.Contains(string(out), `"host_id":"host-a"`) && strings.Contains(string(out), "MemoryEmit")
	})
	m, _ = run(dB, "finder", t1)
	if s := string(mustOK(t, m, "search")); !strings.Contains(s, `"notes/fleet"`) {
		t.Errorf("tenant 1's search through host B: %s, want the note saved through host A", s)
	}
	if r := string(mustOK(t, m, "read")); !strings.Contains(r, "pomegranate") {
		t.Errorf("tenant 1's read through host B: %s", r)
	}
	m, _ = run(dB, "finder", t2)
	if s := string(mustOK(t, m, "search")); strings.Contains(s, "notes/fleet") {
		t.Errorf("tenant 2 found tenant 1's note: %s", s)
	}
	if c := m["read"]; c.Err == nil || strings.Contains(string(c.OK), "pomegranate") {
		t.Errorf("tenant 2 read tenant 1's note: %+v", c)
	}

	pg.Stop()
	run(dA, "quick", t1) // no memory tool: unaffected
	m, env := run(dB, "finder", t1)
	for _, name := range []string{"search", "read"} {
		c := m[name]
		if c.Err == nil || c.Err.Data.Detail != "the memory store is unavailable; try again later" {
			t.Errorf("%s with PostgreSQL stopped: %+v %+v, want the memory-unavailable tool error", name, c, c.Err)
		}
	}
	rows := eB.auditRows("--invocation", env.InvocationID)
	var failed int
	for _, r := range rows {
		if r.Kind == audit.KindToolCallCompleted && strings.Contains(string(r.Payload), `"outcome":"error"`) {
			failed++
		}
	}
	if failed != 2 {
		t.Errorf("audit rows of the invocation: %d failed tool calls, want 2", failed)
	}
	pg.Start()
	m, _ = run(dB, "finder", t1)
	if s := string(mustOK(t, m, "search")); !strings.Contains(s, `"notes/fleet"`) {
		t.Errorf("after PostgreSQL is back, search: %s", s)
	}
}
