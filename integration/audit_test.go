//go:build linux

package integration

import (
	"bytes"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"cyberos.dev/internal/testutil"
	"cyberos.dev/supervisor/sandbox"
	_ "modernc.org/sqlite"
)

type row struct {
	Seq     int64           `json:"seq"`
	RowID   string          `json:"row_id"`
	Kind    string          `json:"kind"`
	Payload json.RawMessage `json:"payload"`
}

func (r row) field(name string) any {
	var m map[string]any
	_ = json.Unmarshal(r.Payload, &m)
	return m[name]
}

// export runs `cyberos audit export` on this env's state dir.
func (e *env) export(args ...string) (raw []byte, rows []row) {
	e.t.Helper()
	out, err := cyberos(append([]string{"audit", "export", "--state-dir", e.stateDir}, args...)...).Output()
	if err != nil {
		e.t.Fatalf("audit export: %v", err)
	}
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var r row
		if err := json.Unmarshal(line, &r); err != nil {
			e.t.Fatalf("export line %q: %v", line, err)
		}
		rows = append(rows, r)
	}
	return out, rows
}

// verify runs `cyberos audit verify` and returns its exit status and output.
func (e *env) verify(args ...string) (int, string) {
	e.t.Helper()
	out, err := cyberos(append([]string{"audit", "verify", "--state-dir", e.stateDir}, args...)...).CombinedOutput()
	return exitCode(err), string(out)
}

// TestAuditHundredParallelRuns: 100 parallel `skill run` processes on one
// state dir → exactly 200 invocation rows, all paired, chain verifies.
func TestAuditHundredParallelRuns(t *testing.T) {
	e := newEnv(t)
	dir := e.skill("quick", "", "#!/bin/sh\necho '{}'\n")
	var wg sync.WaitGroup
	codes := make([]result, 100)
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = e.run(dir)
		}()
	}
	wg.Wait()
	for i, c := range codes {
		if c.code != 0 {
			t.Errorf("run %d exited %d: %s", i, c.code, c.stderr)
		}
	}
	_, rows := e.export()
	started, completed := map[string]bool{}, map[string]bool{}
	for _, r := range rows {
		id, _ := r.field("invocation_id").(string)
		switch r.Kind {
		case "skill.invoked_started":
			started[id] = true
		case "skill.invoked_completed":
			completed[id] = true
		}
	}
	if len(rows) != 200 || len(started) != 100 || len(completed) != 100 {
		t.Errorf("%d rows, %d started, %d completed; want 200/100/100", len(rows), len(started), len(completed))
	}
	for id := range started {
		if !completed[id] {
			t.Errorf("%s started, never completed", id)
		}
	}
	if code, out := e.verify(); code != 0 {
		t.Errorf("verify exit %d: %s", code, out)
	}
}

// tinyStateDir mounts a 1 MiB tmpfs (unmounted when the test ends) and
// makes it the env's state dir.
func (e *env) tinyStateDir(t *testing.T) string {
	t.Helper()
	mnt := filepath.Join(e.base, "tiny")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	e.stateDir = mnt
	return mnt
}

// TestAuditFullStateDirRefuses: on a tiny tmpfs that is full, the next
// invocation is refused (exit 3) before anything runs, and the rows already
// there still verify.
func TestAuditFullStateDirRefuses(t *testing.T) {
	e := newEnv(t)
	mnt := e.tinyStateDir(t)
	ok := e.run(e.skill("first", "", "#!/bin/sh\necho '{}'\n"))
	ok.mustOutcome(t, "success")
	// Fill the tmpfs to the last byte.
	filler, _ := os.OpenFile(filepath.Join(mnt, "filler"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	buf := make([]byte, 64<<10)
	for {
		if _, err := filler.Write(buf); err != nil {
			break
		}
	}
	for {
		if _, err := filler.Write(buf[:512]); err != nil {
			break
		}
	}
	filler.Close()
	r := e.run(e.skill("second", "", "#!/bin/sh\nexec /bin/sleep 16180\n"))
	if r.code != 3 {
		t.Fatalf("exit %d on a full state dir, want 3\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if len(procsMatching("sleep 16180")) > 0 {
		t.Error("the skill ran")
	}
	os.Remove(filepath.Join(mnt, "filler"))
	if code, out := e.verify(); code != 0 {
		t.Errorf("store corrupt after the refusal: exit %d %s", code, out)
	}
}

// TestAuditKill9ClosesOrphanAsLost: `kill -9` of `skill run` mid-invocation;
// the next start closes the orphan as lost and leaves no cgroup behind.
func TestAuditKill9ClosesOrphanAsLost(t *testing.T) {
	e := newEnv(t)
	cmd := e.command(e.skill("orphan", "", "#!/bin/sh\nexec /bin/sleep 31415\n"), "--deadline", "60s")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return len(procsMatching("sleep 31415")) > 0 })
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	_, rows := e.export()
	if len(rows) != 1 || rows[0].Kind != "skill.invoked_started" {
		t.Fatalf("before reconciliation: %d rows", len(rows))
	}
	id := rows[0].field("invocation_id").(string)
	if code, out := e.verify(); code != 0 || !strings.Contains(out, id) {
		t.Errorf("verify should pass and list %s as open: exit %d %s", id, code, out)
	}
	e.run(e.skill("next", "", "#!/bin/sh\necho '{}'\n")).mustOutcome(t, "success")
	_, rows = e.export("--invocation", id)
	last := rows[len(rows)-1]
	if last.Kind != "skill.invoked_completed" || last.field("outcome") != "lost" {
		t.Errorf("orphan closed with %s %v, want completed/lost", last.Kind, last.field("outcome"))
	}
	if hasCgroup(t, id) || len(procsMatching("sleep 31415")) > 0 {
		t.Error("the orphan's cgroup or process survived")
	}
	if code, out := e.verify(); code != 0 {
		t.Errorf("verify after reconciliation: exit %d %s", code, out)
	}
}

// TestAuditTamperIsDetected: one byte changed in the store, or in an
// export, makes verify fail naming the row.
func TestAuditTamperIsDetected(t *testing.T) {
	e := newEnv(t)
	dir := e.skill("tampered", "", "#!/bin/sh\necho '{\"n\":1}'\n")
	for range 3 {
		e.run(dir).mustOutcome(t, "success")
	}
	raw, rows := e.export()
	victim := rows[3]

	t.Run("export", func(t *testing.T) {
		// Flip one character inside row 4's payload (a digit of duration_ms).
		lines := bytes.Split(bytes.TrimSpace(raw), []byte("\n"))
		l := lines[3]
		i := bytes.Index(l, []byte(`"duration_ms":`)) + len(`"duration_ms":`)
		if l[i] == '9' {
			l[i] = '8'
		} else {
			l[i]++
		}
		f := filepath.Join(e.base, "export.jsonl")
		os.WriteFile(f, append(bytes.Join(lines, []byte("\n")), '\n'), 0o600)
		code, out := e.verify("--file", f)
		if code == 0 || !strings.Contains(out, "seq "+strconv.FormatInt(victim.Seq, 10)) || !strings.Contains(out, victim.RowID) {
			t.Errorf("verify of a tampered export: exit %d, output does not name seq %d / %s:\n%s", code, victim.Seq, victim.RowID, out)
		}
	})
	t.Run("store", func(t *testing.T) {
		db, err := sql.Open("sqlite", filepath.Join(e.stateDir, "audit.db"))
		if err != nil {
			t.Fatal(err)
		}
		// An attacker with the file drops the append-only trigger first.
		if _, err := db.Exec(`DROP TRIGGER audit_rows_no_update`); err != nil {
			t.Fatalf("drop trigger: %v", err)
		}
		res, err := db.Exec(`UPDATE audit_rows SET payload = replace(payload, '"outcome":"success"', '"outcome":"successs"') WHERE seq = ?`, victim.Seq)
		if err != nil {
			db.Close()
			t.Fatalf("tamper: %v", err)
		}
		if n, _ := res.RowsAffected(); n != 1 {
			t.Fatalf("tampered %d rows", n)
		}
		db.Close()
		code, out := e.verify()
		if code == 0 || !strings.Contains(out, fmt.Sprintf("seq %d", victim.Seq)) {
			t.Errorf("verify of a tampered store: exit %d, does not name seq %d:\n%s", code, victim.Seq, out)
		}
	})
}

// TestAuditNoRawArgs: the raw args of an invocation appear in no row, no
// log line of the supervisor and no file of the state dir.
func TestAuditNoRawArgs(t *testing.T) {
	e := newEnv(t)
	const secret = "RAW-ARGS-7c2f1d"
	r := e.run(e.skill("private", "", "#!/bin/sh\ncat >/dev/null\necho '{\"done\":true}'\n"),
		"--args", `{"query":"`+secret+`"}`, "--log-level", "debug")
	r.mustOutcome(t, "success")
	raw, _ := e.export()
	if bytes.Contains(raw, []byte(secret)) {
		t.Error("an audit row holds the raw args")
	}
	if strings.Contains(r.stderr, secret) {
		t.Error("a log line holds the raw args")
	}
	_ = filepath.WalkDir(e.stateDir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s holds the raw args", p)
			}
		}
		return nil
	})
}

// TestDeadlineOutlivesASupervisorKill: `kill -9` of `skill run` while the
// skill sleeps; with no supervisor left, the sandbox still ends itself by
// its deadline plus the backstop (cyberos-init's own timer).
func TestDeadlineOutlivesASupervisorKill(t *testing.T) {
	e := newEnv(t)
	deadline := slow(3 * time.Second)
	cmd := e.command(e.skill("outlive", "", "#!/bin/sh\nexec /bin/sleep 31416\n"), "--deadline", deadline.String())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, func() bool { return len(procsMatching("sleep 31416")) > 0 })
	t0 := time.Now()
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	// The skill started before t0, so its backstop fires before
	// t0 + deadline + sandbox.DeadlineBackstop.
	limit := deadline + sandbox.DeadlineBackstop + slow(time.Second)
	if !testutil.Eventually(limit, func() bool { return len(procsMatching("sleep 31416")) == 0 }) {
		t.Fatalf("the sandbox still runs %v after its supervisor was killed (deadline %v)", time.Since(t0), deadline)
	}
	t.Logf("the sandbox ended %v after its supervisor was killed (deadline %v)", time.Since(t0).Round(time.Millisecond), deadline)
	// The next start closes the orphan and removes what it left.
	e.run(e.skill("next", "", "#!/bin/sh\necho '{}'\n")).mustOutcome(t, "success")
}
