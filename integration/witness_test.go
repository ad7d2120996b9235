//go:build linux

package integration

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cyberos.dev/audit/auditstore"
	"cyberos.dev/internal/testutil"
)

// Must show (issue 36, finding 5): PostgreSQL witnesses the host's chain.
// The journal's tail is cut and audit.anchor and audit.db deleted, so
// nothing in the state dir shows the loss: `audit verify --dsn-file` (the
// auditor) reports the rows missing locally and fails, the daemon (as
// host-a's role, which sees host-a's rows only) refuses to start naming
// `audit repair --from-dsn-file`, which restores the cut rows from
// PostgreSQL byte for byte as host-a's role; the daemon then starts and
// ships on without a conflict. Another host's role, blind to host-a's
// rows, is refused rather than calling the cut journal whole.
func TestFleetWitnessCutTail(t *testing.T) {
	pg := testutil.StartPostgres(t)
	db := newFleetDatabase(t, pg, "fleet", true)
	db.host("host-a")
	hostFile, auditor := db.dsnFile("fleet_host_a"), db.auditor()
	e := newEnv(t)
	dir := e.skill("quick", "", "#!/bin/sh\necho '{}'\n")
	// The daemon and `skill run --config` as host-a's role, which sees
	// host-a's rows only; verify as the auditor, repair as host-a's role.
	cfg := fmt.Sprintf("fleet: {postgres_dsn_file: '%s', host_id: host-a}", hostFile)
	d := startDaemon(t, e, cfg)
	for i := 0; i < 12; i++ {
		if code, env, raw := d.invoke(map[string]any{"skill_id": "quick"}); code != 200 || env.Outcome != "success" {
			t.Fatalf("HTTP %d %s", code, raw)
		}
	}
	d.stop(30 * time.Second)
	shipped, _ := strconv.ParseInt(pg.Psql("fleet", "SELECT max(seq) FROM audit_rows WHERE host_id = 'host-a'"), 10, 64)
	if shipped < 24 {
		t.Fatalf("PostgreSQL holds host-a's rows up to seq %d, want at least 24", shipped)
	}

	// Cut every row after shipped-10 and delete what records the head.
	journal := filepath.Join(e.stateDir, auditstore.JournalName)
	orig := journalText(t, journal)
	keep := shipped - 10
	cutAt, shippedEnd := lineEnd(t, orig, keep), lineEnd(t, orig, shipped)
	if err := os.Truncate(journal, int64(cutAt)); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{auditstore.AnchorName, auditstore.FileName, auditstore.FileName + "-wal", auditstore.FileName + "-shm"} {
		os.Remove(filepath.Join(e.stateDir, f))
	}
	if out, err := cyberos("audit", "verify", "--state-dir", e.stateDir).CombinedOutput(); err != nil {
		t.Logf("audit verify (local only) on the cut journal: %v\n%s", err, out)
	}

	out, err := cyberos("audit", "verify", "--state-dir", e.stateDir, "--dsn-file", auditor, "--host", "host-a").CombinedOutput()
	wantMissing := fmt.Sprintf("seq %d..%d", keep+1, shipped)
	if exitCode(err) != 1 || !strings.Contains(string(out), "missing locally") || !strings.Contains(string(out), wantMissing) {
		t.Errorf("audit verify --dsn-file on a journal cut after seq %d (PostgreSQL holds %d): exit %d, want 1 naming %s missing locally\n%s",
			keep, shipped, exitCode(err), wantMissing, out)
	}

	t.Logf("audit verify --dsn-file on the cut journal: exit %d\n%s", exitCode(err), out)
	// Another host's role sees none of host-a's rows: it must not call the
	// cut journal whole, nor restore nothing and say so.
	db.host("host-b")
	hostB := db.dsnFile("fleet_host_b")
	for _, args := range [][]string{
		{"audit", "verify", "--state-dir", e.stateDir, "--dsn-file", hostB, "--host", "host-a"},
		{"audit", "repair", "--state-dir", e.stateDir, "--from-dsn-file", hostB, "--host", "host-a"},
	} {
		if out, err := cyberos(args...).CombinedOutput(); err == nil || !strings.Contains(string(out), "not bound to its host id") {
			t.Errorf("%s as host-b's role: exit %d, want a refusal naming the role's binding\n%s", strings.Join(args, " "), exitCode(err), out)
		}
	}
	code, logs := serveOnce(t, e, cfg)
	t.Logf("supervisor serve on the cut journal: exit %d\n%s", code, logs)
	if code != 3 || !strings.Contains(logs, "cyberos audit repair") || !strings.Contains(logs, "--from-dsn-file "+hostFile) {
		t.Errorf("supervisor serve on the cut journal: exit %d, want 3 naming `cyberos audit repair --from-dsn-file %s`\n%s", code, hostFile, logs)
	}
	// skill run with the daemon's config, on its state dir: refused too,
	// before a row is written.
	r := e.run(dir, "--config", filepath.Join(e.base, "etc", "supervisor.yaml"))
	if r.code != 3 || !strings.Contains(r.stderr, "--from-dsn-file") {
		t.Errorf("skill run --config on the cut journal: exit %d, want 3 naming `cyberos audit repair --from-dsn-file`\n%s%s", r.code, r.stdout, r.stderr)
	}
	if got := journalText(t, journal); got != orig[:cutAt] {
		t.Errorf("refused starts changed the cut journal (%d bytes, was %d)", len(got), cutAt)
	}

	out, err = cyberos("audit", "repair", "--state-dir", e.stateDir, "--from-dsn-file", hostFile, "--host", "host-a").CombinedOutput()
	if err != nil {
		t.Fatalf("audit repair --from-dsn-file as host-a's role: %v\n%s", err, out)
	}
	t.Logf("audit repair --from-dsn-file as host-a's role: %s", out)
	if got := journalText(t, journal); got != orig[:shippedEnd] {
		t.Errorf("the repaired journal is not the original through seq %d byte for byte (%d bytes, want %d)", shipped, len(got), shippedEnd)
	}
	for _, args := range [][]string{
		{"audit", "verify", "--state-dir", e.stateDir},
		{"audit", "verify", "--state-dir", e.stateDir, "--dsn-file", auditor, "--host", "host-a"},
	} {
		if out, err := cyberos(args...).CombinedOutput(); err != nil {
			t.Errorf("%s after the repair: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	d = startDaemon(t, e, cfg)
	if code, env, raw := d.invoke(map[string]any{"skill_id": "quick"}); code != 200 || env.Outcome != "success" {
		t.Fatalf("after the repair: HTTP %d %s", code, raw)
	}
	if _, line, ok := strings.Cut(d.logs.String(), "audit witness: the journal holds the chain"); !ok {
		t.Errorf("the daemon did not log its comparison with PostgreSQL at start:\n%s", d.logs.String())
	} else {
		t.Logf("the daemon's comparison at start: …%s", strings.SplitN(line, "\n", 2)[0])
	}
	shippedAll(t, pg, map[string]*env{"host-a": e}, d)
	if n := d.gauge(`cyberos_audit_ship_errors_total{reason="diverged"}`); n != 0 {
		t.Errorf("after the repair, shipping diverged %v times", n)
	}
}

// Must show (issue 36, finding 5): a journal replaced under the same
// host_id (a new chain) is refused at start whether it is shorter or
// longer than what PostgreSQL holds, and `audit repair --from-dsn-file` does not
// graft PostgreSQL's rows onto it. With PostgreSQL away at start the
// daemon starts, saying so (WARN, cyberos_audit_witness_unchecked 1), and
// the shipper flags the journal diverged at its first contact, before the
// new chain reaches PostgreSQL's seq.
func TestFleetWitnessReplacedJournal(t *testing.T) {
	pg := testutil.StartPostgres(t)
	db := newFleetDatabase(t, pg, "fleet", true)
	db.host("host-a")
	hostFile, auditor := db.dsnFile("fleet_host_a"), db.auditor()
	e := newEnv(t)
	dir := e.skill("quick", "", "#!/bin/sh\necho '{}'\n")
	// The daemon and `skill run --config` as host-a's role, which sees
	// host-a's rows only; verify as the auditor, repair as host-a's role.
	cfg := fmt.Sprintf("fleet: {postgres_dsn_file: '%s', host_id: host-a}", hostFile)
	d := startDaemon(t, e, cfg)
	for i := 0; i < 5; i++ {
		if code, env, raw := d.invoke(map[string]any{"skill_id": "quick"}); code != 200 || env.Outcome != "success" {
			t.Fatalf("HTTP %d %s", code, raw)
		}
	}
	d.stop(30 * time.Second)
	count := func() string {
		return pg.Psql("fleet", "SELECT count(*) || ' ' || max(seq) FROM audit_rows WHERE host_id = 'host-a'")
	}
	before := count()
	shipped, _ := strconv.ParseInt(strings.Fields(before)[1], 10, 64)

	// A new chain under the same host id: shorter than the shipped one.
	if err := os.RemoveAll(e.stateDir); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(e.stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	e.run(dir).mustOutcome(t, "success")
	journal := filepath.Join(e.stateDir, auditstore.JournalName)
	replaced := journalText(t, journal)

	code, logs := serveOnce(t, e, cfg)
	if code != 3 || !strings.Contains(logs, "diverged") {
		t.Errorf("supervisor serve on a replaced, shorter journal: exit %d, want 3 naming it diverged\n%s", code, logs)
	}
	out, err := cyberos("audit", "verify", "--state-dir", e.stateDir, "--dsn-file", auditor, "--host", "host-a").CombinedOutput()
	if exitCode(err) != 1 || !strings.Contains(string(out), "differs from PostgreSQL") {
		t.Errorf("audit verify --dsn-file on a replaced journal: exit %d, want 1 naming rows that differ\n%s", exitCode(err), out)
	}
	out, err = cyberos("audit", "repair", "--state-dir", e.stateDir, "--from-dsn-file", hostFile, "--host", "host-a").CombinedOutput()
	if exitCode(err) != 1 || journalText(t, journal) != replaced {
		t.Errorf("audit repair --from-dsn-file onto another chain: exit %d (want 1), journal changed: %v\n%s", exitCode(err), journalText(t, journal) != replaced, out)
	}

	// PostgreSQL away at start: the daemon starts and says the chain is
	// unchecked; the shipper flags it at its first contact.
	pg.Stop()
	r := e.run(dir, "--config", filepath.Join(e.base, "etc", "supervisor.yaml"))
	r.mustOutcome(t, "success")
	if !strings.Contains(r.stderr, "level=WARN") || !strings.Contains(r.stderr, "audit witness unchecked") {
		t.Errorf("skill run --config with PostgreSQL away: no WARN about the unchecked witness:\n%s", r.stderr)
	}
	d = startDaemon(t, e, cfg)
	if v := d.gauge("cyberos_audit_witness_unchecked"); v != 1 {
		t.Errorf("cyberos_audit_witness_unchecked with PostgreSQL away at start: %v, want 1", v)
	}
	if !strings.Contains(d.logs.String(), "level=WARN") || !strings.Contains(d.logs.String(), "witness") {
		t.Errorf("no WARN about the unchecked witness in the daemon's log:\n%s", d.logs.String())
	}
	pg.Start()
	waitFor(t, 30*time.Second, func() bool { return d.gauge(`cyberos_audit_ship_errors_total{reason="diverged"}`) > 0 })
	local := e.auditRows()
	if last := local[len(local)-1].Seq; last >= shipped {
		t.Fatalf("the new chain reached seq %d, PostgreSQL's %d: the test needs it shorter", last, shipped)
	}
	d.stop(30 * time.Second)
	if after := count(); after != before {
		t.Errorf("PostgreSQL's rows of host-a changed from %s to %s", before, after)
	}

	// The new chain, now longer than the shipped one: refused at start.
	for i := int64(0); i <= shipped/2; i++ {
		e.run(dir).mustOutcome(t, "success")
	}
	code, logs = serveOnce(t, e, cfg)
	if code != 3 || !strings.Contains(logs, "diverged") {
		t.Errorf("supervisor serve on a replaced, longer journal: exit %d, want 3 naming it diverged\n%s", code, logs)
	}
}

// journalText is the journal's lines (its end is its first NUL byte).
func journalText(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// lineEnd is the offset just past the journal line of seq.
func lineEnd(t testing.TB, text string, seq int64) int {
	t.Helper()
	prefix := fmt.Sprintf(`{"seq":%d,`, seq)
	i := strings.Index(text, "\n"+prefix)
	if seq == 1 && strings.HasPrefix(text, prefix) {
		i = -1
	} else if i < 0 {
		t.Fatalf("no journal line of seq %d", seq)
	}
	j := strings.IndexByte(text[i+1:], '\n')
	if j < 0 {
		t.Fatalf("the journal line of seq %d has no end", seq)
	}
	return i + 1 + j + 1
}

// serveOnce runs `supervisor serve` on e with the daemon config's extra
// lines and expects it to refuse: it returns the exit code and the output.
// A daemon that answers /healthz instead fails the test.
func serveOnce(t *testing.T, e *env, extra ...string) (int, string) {
	t.Helper()
	cfgPath := filepath.Join(e.base, "etc", "supervisor.yaml")
	if err := os.MkdirAll(filepath.Dir(cfgPath), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(e.base, "skills"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(e.daemonConfig(freePort(t), extra...)), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cmd := cyberos("supervisor", "serve", "--config", cfgPath, "--run-dir", e.runDir, "--log-level", "info")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill() // a no-op once it has exited
		<-exited
		if t.Failed() {
			t.Logf("supervisor serve's output:\n%s", logs.String())
		}
	})
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var dl net.Dialer
		return dl.DialContext(ctx, "unix", filepath.Join(e.base, "admin.sock"))
	}}}
	// Wait for it to exit, or to serve /healthz, which it must not.
	served := false
	waitFor(t, 30*time.Second, func() bool {
		select {
		case <-exited:
			return true
		default:
		}
		if resp, err := client.Get("http://cyberos/healthz"); err == nil {
			resp.Body.Close()
			served = resp.StatusCode == 200
		}
		return served
	})
	if served {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		t.Error("supervisor serve started and served /healthz where it must refuse") // the cleanup logs its output
		return 0, logs.String()
	}
	return exitCode(waitErr), logs.String()
}
