//go:build linux

package integration

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The audit fault suite: what an operator's fault drill does to the two
// files of the audit store (the journal audit.jsonl, the index audit.db)
// while the daemon is stopped, and what the real binary must say.

// faultStore makes a state dir with n successful runs (2n rows) and returns
// the journal's lines.
func faultStore(t *testing.T, n int) (*env, [][]byte) {
	t.Helper()
	e := newEnv(t)
	dir := e.skill("drill", "", "#!/bin/sh\necho '{\"n\":1}'\n")
	for range n {
		e.run(dir).mustOutcome(t, "success")
	}
	raw, err := os.ReadFile(filepath.Join(e.stateDir, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if i := bytes.IndexByte(raw, 0); i >= 0 { // the preallocated end
		raw = raw[:i]
	}
	lines := bytes.Split(bytes.TrimSuffix(raw, []byte("\n")), []byte("\n"))
	if len(lines) != 2*n {
		t.Fatalf("journal has %d lines, want %d", len(lines), 2*n)
	}
	return e, lines
}

// mustContain fails unless out holds every one of want.
func mustContain(t *testing.T, what, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s does not say %q:\n%s", what, w, out)
		}
	}
}

// flipAt changes the byte at off in path to another byte of the same class
// (a digit stays a digit, a letter a letter), so the file stays parseable.
func flipAt(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	switch c := b[0]; {
	case c >= '0' && c <= '8', c >= 'A' && c <= 'Y', c >= 'a' && c <= 'y':
		b[0]++
	default:
		b[0]--
	}
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}

// TestAuditFaultJournalByteFlipped: one byte of an old row's payload in
// the journal is changed (the index is intact): verify fails and names the
// row (seq, row_id), the file and line, and the field.
func TestAuditFaultJournalByteFlipped(t *testing.T) {
	e, lines := faultStore(t, 3)
	victim := lines[1] // seq 2: the first run's skill.invoked_completed
	off := int64(len(lines[0]) + 1)
	i := bytes.Index(victim, []byte(`"duration_ms":`)) + len(`"duration_ms":`)
	flipAt(t, filepath.Join(e.stateDir, "audit.jsonl"), off+int64(i))
	rowID := string(victim[bytes.Index(victim, []byte(`"row_id":"`))+10:][:26])
	code, out := e.verify()
	if code != 1 {
		t.Errorf("verify exit %d, want 1", code)
	}
	t.Logf("verify:\n%s", out)
	mustContain(t, "verify", out, "seq 2", rowID, "audit.jsonl line 2", "payload")
}

// TestAuditFaultIndexByteFlipped: one byte of an old row in audit.db
// (changed in the file, not through SQL) is named too.
func TestAuditFaultIndexByteFlipped(t *testing.T) {
	e, lines := faultStore(t, 3)
	victim := lines[2] // seq 3
	rowID := victim[bytes.Index(victim, []byte(`"row_id":"`))+10:][:26]
	db := filepath.Join(e.stateDir, "audit.db")
	data, err := os.ReadFile(db)
	if err != nil {
		t.Fatal(err)
	}
	// Every copy in the file: a page may keep a stale one (freed cells).
	n := 0
	for at := bytes.Index(data, rowID); at >= 0; at = bytes.Index(data[at+1:], rowID) + at + 1 {
		flipAt(t, db, int64(at+20))
		if n++; !bytes.Contains(data[at+1:], rowID) {
			break
		}
	}
	if n == 0 {
		t.Fatalf("row_id %s not found in audit.db", rowID)
	}
	code, out := e.verify()
	if code != 1 {
		t.Errorf("verify exit %d, want 1", code)
	}
	t.Logf("verify:\n%s", out)
	mustContain(t, "verify", out, "seq 3", string(rowID), "audit.db", "row_id")
}

// TestAuditFaultJournalDeleted: the journal is gone, the index holds rows.
// `skill run` refuses (exit 3) and the daemon refuses to start, both saying
// what is missing, the index's last seq and the command that repairs;
// nothing is written. `audit repair` rebuilds the journal from the index
// (which verifies), and the chain then continues.
func TestAuditFaultJournalDeleted(t *testing.T) {
	e, _ := faultStore(t, 2)
	journal := filepath.Join(e.stateDir, "audit.jsonl")
	if err := os.Remove(journal); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(e.base, "skills", "drill")
	r := e.run(dir)
	if r.code != 3 {
		t.Errorf("skill run exit %d, want 3\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	t.Logf("skill run: %s", r.stderr)
	mustContain(t, "skill run", r.stderr, "audit.jsonl", "seq 4", "cyberos audit repair --state-dir "+e.stateDir)
	if _, err := os.Stat(journal); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("skill run left a journal behind: %v", err)
	}

	// The daemon refuses too.
	serveRefuses(t, e, "audit.jsonl", "seq 4", "cyberos audit repair --state-dir "+e.stateDir)
	if _, err := os.Stat(journal); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("serve left a journal behind: %v", err)
	}

	// Repair, then verify and run again.
	rep, err := cyberos("audit", "repair", "--state-dir", e.stateDir).CombinedOutput()
	if err != nil {
		t.Fatalf("repair: %v\n%s", err, rep)
	}
	if code, out := e.verify(); code != 0 || !strings.Contains(out, "ok: 4 rows") {
		t.Errorf("verify after repair: exit %d\n%s", code, out)
	}
	e.run(dir).mustOutcome(t, "success")
	if code, out := e.verify(); code != 0 || !strings.Contains(out, "ok: 6 rows") {
		t.Errorf("verify after a run on the repaired store: exit %d\n%s", code, out)
	}
}

// TestAuditFaultIndexGarbage: 4 KiB of garbage inside audit.db. verify
// and export fail saying why and naming `audit repair`, which moves the
// damaged index aside and rebuilds it from the journal; verify is then ok
// and export has every row.
func TestAuditFaultIndexGarbage(t *testing.T) {
	e, _ := faultStore(t, 3)
	db := filepath.Join(e.stateDir, "audit.db")
	f, err := os.OpenFile(db, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	garbage := bytes.Repeat([]byte{0xde, 0xad, 0xbe, 0xef}, 1024)
	if _, err := f.WriteAt(garbage, 4096); err != nil { // page 2: the rows' table
		t.Fatal(err)
	}
	f.Close()
	code, out := e.verify()
	if code != 1 {
		t.Errorf("verify exit %d, want 1", code)
	}
	t.Logf("verify:\n%s", out)
	mustContain(t, "verify", out, "audit.db", "cyberos audit repair --state-dir "+e.stateDir)

	var stderr bytes.Buffer
	export := cyberos("audit", "export", "--state-dir", e.stateDir)
	export.Stderr = &stderr
	if err := export.Run(); err == nil {
		t.Error("export of a damaged index succeeded")
	}
	t.Logf("export: %s", stderr.String())
	mustContain(t, "export", stderr.String(), "audit.db", "cyberos audit repair --state-dir "+e.stateDir)

	r := e.run(filepath.Join(e.base, "skills", "drill"))
	if r.code != 3 {
		t.Errorf("skill run on a damaged index: exit %d, want 3\n%s", r.code, r.stderr)
	}
	mustContain(t, "skill run", r.stderr, "cyberos audit repair --state-dir "+e.stateDir)

	serveRefuses(t, e, "audit.db", "cyberos audit repair --state-dir "+e.stateDir)

	rep, err := cyberos("audit", "repair", "--state-dir", e.stateDir).CombinedOutput()
	if err != nil {
		t.Fatalf("repair: %v\n%s", err, rep)
	}
	t.Logf("repair: %s", rep)
	damaged, _ := filepath.Glob(filepath.Join(e.stateDir, "audit-damaged-*", "audit.db"))
	if len(damaged) != 1 {
		t.Errorf("damaged index kept as %v, want one audit-damaged-*/audit.db", damaged)
	}
	if code, out := e.verify(); code != 0 || !strings.Contains(out, "ok: 6 rows") {
		t.Errorf("verify after repair: exit %d\n%s", code, out)
	}
	if _, rows := e.export(); len(rows) != 6 {
		t.Errorf("export after repair: %d rows, want 6", len(rows))
	}
}

// TestAuditFaultTailCutIndexDeleted: the journal's last run cut off and
// the index deleted: a shorter chain that verifies on its own, but verify
// reports the rows lost against the anchor, skill run refuses, and repair
// goes on only with --accept-loss.
func TestAuditFaultTailCutIndexDeleted(t *testing.T) {
	e, lines := faultStore(t, 3)
	journal := bytes.Join(lines[:4], []byte("\n"))
	if err := os.WriteFile(filepath.Join(e.stateDir, "audit.jsonl"), append(journal, '\n'), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(filepath.Join(e.stateDir, "audit.db"+suffix))
	}
	code, out := e.verify()
	t.Logf("verify:\n%s", out)
	if code != 1 {
		t.Errorf("verify exit %d, want 1", code)
	}
	mustContain(t, "verify", out, "rows lost", "audit.anchor", "rows 5..6 are missing")
	r := e.run(filepath.Join(e.base, "skills", "drill"))
	if r.code != 3 {
		t.Errorf("skill run exit %d, want 3\n%s", r.code, r.stderr)
	}
	mustContain(t, "skill run", r.stderr, "rows 5..6 are missing", "cyberos audit repair --state-dir "+e.stateDir)
	if out, err := cyberos("audit", "repair", "--state-dir", e.stateDir).CombinedOutput(); err == nil || !strings.Contains(string(out), "--accept-loss") {
		t.Errorf("repair without --accept-loss: %v\n%s", err, out)
	}
	if out, err := cyberos("audit", "repair", "--state-dir", e.stateDir, "--accept-loss").CombinedOutput(); err != nil {
		t.Fatalf("repair --accept-loss: %v\n%s", err, out)
	}
	e.run(filepath.Join(e.base, "skills", "drill")).mustOutcome(t, "success")
	if code, out := e.verify(); code != 0 || !strings.Contains(out, "ok: 6 rows") {
		t.Errorf("verify after accepting the loss and one run: exit %d\n%s", code, out)
	}
}

// TestAuditFaultVerifyReadOnlyStateDir: verify and export read a state
// dir on a read-only mount (as on a full disk: nothing may be created) and
// leave it as it was.
func TestAuditFaultVerifyReadOnlyStateDir(t *testing.T) {
	e, _ := faultStore(t, 2)
	ro := filepath.Join(e.base, "ro")
	if err := os.Mkdir(ro, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(e.stateDir, ro, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(ro, unix.MNT_DETACH) })
	if err := unix.Mount("", ro, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	before := dirNames(t, e.stateDir)
	out, err := cyberos("audit", "verify", "--state-dir", ro).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ok: 4 rows") {
		t.Errorf("verify of a read-only state dir: %v\n%s", err, out)
	}
	exp, err := cyberos("audit", "export", "--state-dir", ro).CombinedOutput()
	if err != nil || bytes.Count(exp, []byte("\n")) != 4 {
		t.Errorf("export of a read-only state dir: %v\n%s", err, exp)
	}
	if after := dirNames(t, e.stateDir); !slices.Equal(before, after) {
		t.Errorf("state dir changed: %v → %v", before, after)
	}
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// serveRefuses runs `cyberos supervisor serve` on e's state dir and fails
// unless it exits 3 at once saying every one of want.
func serveRefuses(t *testing.T, e *env, want ...string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(e.base, "skills"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(e.base, "supervisor.yaml")
	if err := os.WriteFile(cfg, []byte(e.daemonConfig(freePort(t))), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), slow(30*time.Second))
	defer cancel()
	serve := exec.CommandContext(ctx, cyberosBin, "supervisor", "serve", "--config", cfg, "--run-dir", e.runDir)
	out, err := serve.CombinedOutput()
	if code := exitCode(err); code != 3 {
		t.Errorf("serve exit %d (%v), want 3:\n%s", code, err, out)
	}
	mustContain(t, "serve", string(out), want...)
}

// TestAuditFaultVerifyFullStateDir: verify and export on a state dir whose
// disk is full to the last byte (they used to open the index read-write:
// "database or disk is full", exit 3).
func TestAuditFaultVerifyFullStateDir(t *testing.T) {
	e := newEnv(t)
	mnt := e.tinyStateDir(t)
	dir := e.skill("drill", "", "#!/bin/sh\necho '{}'\n")
	for range 2 {
		e.run(dir).mustOutcome(t, "success")
	}
	filler, err := os.OpenFile(filepath.Join(mnt, "filler"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{64 << 10, 512, 1} {
		for buf := make([]byte, n); ; {
			if _, err := filler.Write(buf); err != nil {
				break
			}
		}
	}
	filler.Close()
	if code, out := e.verify(); code != 0 || !strings.Contains(out, "ok: 4 rows") {
		t.Errorf("verify on a full disk: exit %d\n%s", code, out)
	}
	exp, err := cyberos("audit", "export", "--state-dir", e.stateDir).CombinedOutput()
	if err != nil || bytes.Count(exp, []byte("\n")) != 4 {
		t.Errorf("export on a full disk: %v\n%s", err, exp)
	}
}
