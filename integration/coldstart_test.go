//go:build linux

package integration

// Issue 19 item 2, a cheaper cold start: the seccomp profile is checked once
// per content, not once per start, and the state dir is no longer probed
// with a file written through whatever sits at <state>/.probe. These tests
// hold what must not change with it.

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestProfileEditHonouredByDaemon: one daemon, one skill that reports
// whether mkdir works, its profile edited between invocations. Each
// invocation runs under the profile file's bytes at its start and its
// started row names their sha256: the edit that drops mkdir is enforced at
// the next invocation, a profile swapped for an invalid one is refused
// before anything runs (no started row), and the first profile put back
// counts again.
func TestProfileEditHonouredByDaemon(t *testing.T) {
	e := newEnv(t)
	profiles := e.profilesWithout(t, "nomkdir", "mkdir", "mkdirat")
	def := filepath.Join(profiles, "default.json")
	original, err := os.ReadFile(def)
	if err != nil {
		t.Fatal(err)
	}
	nomkdir, err := os.ReadFile(filepath.Join(profiles, "nomkdir.json"))
	if err != nil {
		t.Fatal(err)
	}
	e.skill("mkdirer", "", "#!/bin/sh\nif mkdir /tmp/d 2>/dev/null; then echo '{\"mkdir\":\"ok\"}'; else echo '{\"mkdir\":\"refused\"}'; fi\n")
	d := startDaemon(t, e, "seccomp_profiles_dir: "+profiles)

	invoke := func(want string) {
		t.Helper()
		code, env, raw := d.invoke(map[string]any{"skill_id": "mkdirer"})
		if code != 200 || env.Outcome != "success" || !strings.Contains(string(env.Result), `"mkdir":"`+want+`"`) {
			t.Fatalf("invoke: %d %s; want mkdir %s", code, raw, want)
		}
	}
	write := func(b []byte) {
		t.Helper()
		if err := os.WriteFile(def, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	invoke("ok")
	invoke("ok")
	write(nomkdir) // in place: same path, same inode
	invoke("refused")
	write([]byte(`{"defaultAction": "SCMP_ACT_ALLOW"}`))
	if code, _, raw := d.invoke(map[string]any{"skill_id": "mkdirer"}); code != 400 || !strings.Contains(raw, "seccomp") {
		t.Errorf("an invalid profile swapped in: %d %s, want 400 naming the profile", code, raw)
	}
	write(original)
	invoke("ok")

	sum := func(b []byte) string {
		s := sha256.Sum256(b)
		return hex.EncodeToString(s[:])
	}
	want := []string{sum(original), sum(original), sum(nomkdir), sum(original)}
	_, prof := e.policyHashes(t, "mkdirer")
	if strings.Join(prof, " ") != strings.Join(want, " ") {
		t.Errorf("started rows name the profiles\n%q\nwant the bytes each ran under\n%q", prof, want)
	}
}

// TestStateDirProbeFollowsNoSymlink: a symlink at <state>/.probe (where
// every invocation used to create, truncate, write and fsync a probe file
// as root, following it) to a file elsewhere: invocations succeed and the
// file it points to is left as it was.
func TestStateDirProbeFollowsNoSymlink(t *testing.T) {
	e := newEnv(t)
	dir := e.skill("plain", "", "#!/bin/sh\necho '{}'\n")
	e.run(dir).mustOutcome(t, "success") // creates the state dir
	victim := filepath.Join(e.base, "victim")
	if err := os.WriteFile(victim, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(e.stateDir, ".probe")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		e.run(dir).mustOutcome(t, "success")
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious\n" {
		t.Errorf("the file behind <state>/.probe was written: %q %v", b, err)
	}
}

// TestReadOnlyStateDirRefused: the daemon's state dir becomes read-only
// under it (a filesystem remounted read-only after an error): the next
// invocation is refused before dispatch, 503 "refused" naming the state
// dir, and once it is writable again invocations succeed.
func TestReadOnlyStateDirRefused(t *testing.T) {
	e := newEnv(t)
	e.skill("plain", "", "#!/bin/sh\necho '{}'\n")
	d := startDaemon(t, e)
	if code, env, raw := d.invoke(map[string]any{"skill_id": "plain"}); code != 200 || env.Outcome != "success" {
		t.Fatalf("first invocation: %d %s", code, raw)
	}
	started := len(e.auditRows("--kind", "skill.invoked_started"))
	// A read-only bind mount over the state dir's path: the daemon's open
	// files still write, every lookup by name sees a read-only filesystem.
	if err := unix.Mount(e.stateDir, e.stateDir, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	mounted := true
	unmount := func() {
		if mounted {
			_ = unix.Unmount(e.stateDir, unix.MNT_DETACH)
			mounted = false
		}
	}
	t.Cleanup(unmount)
	if err := unix.Mount("", e.stateDir, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
		t.Fatal(err)
	}
	code, _, raw := d.invoke(map[string]any{"skill_id": "plain"})
	if code != 503 || !strings.Contains(raw, "refused") || !strings.Contains(raw, "not writable") {
		t.Errorf("invocation on a read-only state dir: %d %s, want 503 refused, not writable", code, raw)
	}
	unmount()
	if n := len(e.auditRows("--kind", "skill.invoked_started")); n != started {
		t.Errorf("%d started rows after the refusal, want %d", n, started)
	}
	if code, env, raw := d.invoke(map[string]any{"skill_id": "plain"}); code != 200 || env.Outcome != "success" {
		t.Errorf("after the state dir is writable again: %d %s", code, raw)
	}
}
