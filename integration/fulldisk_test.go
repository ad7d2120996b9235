//go:build linux

package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestNoisySkillOnANearlyFullDisk: the daemon's state dir is a 16 MiB
// tmpfs filled to about 3 MiB free; a skill writing 300 KB to stderr is
// invoked 50 times. No caller is told success without a durable completed
// row, and every started row has its completed row while the daemon runs
// on (no restart closes anything). Once space is freed, invocations
// succeed again.
func TestNoisySkillOnANearlyFullDisk(t *testing.T) {
	e := newEnv(t)
	mnt := filepath.Join(e.base, "nearfull")
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", mnt).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", mnt).Run() })
	e.stateDir = mnt
	e.skill("noisy", "", "#!/bin/sh\nhead -c 307200 /dev/zero >&2\necho '{\"ok\":true}'\n")
	d := startDaemon(t, e)
	if code, env, raw := d.invoke(map[string]any{"skill_id": "noisy"}); code != 200 || env.Outcome != "success" {
		t.Fatalf("first invocation on an empty disk: %d %s", code, raw)
	}
	// Fill the disk up to about 3 MiB free: logs, the index and the journal compete for it.
	var st unix.Statfs_t
	if err := unix.Statfs(mnt, &st); err != nil {
		t.Fatal(err)
	}
	free := int64(st.Bavail) * st.Bsize
	filler := filepath.Join(mnt, "filler")
	if err := os.WriteFile(filler, make([]byte, max(free-3<<20, 0)), 0o600); err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]int{}
	var succeeded []string
	for range 50 {
		code, env, raw := d.invoke(map[string]any{"skill_id": "noisy"})
		switch {
		case code == 200:
			outcomes[env.Outcome]++
			if env.Outcome == "success" {
				succeeded = append(succeeded, env.InvocationID)
			}
		default:
			var ae struct {
				Code string `json:"code"`
			}
			_ = json.Unmarshal([]byte(raw), &ae)
			outcomes[ae.Code]++
		}
	}
	t.Logf("50 invocations on a nearly full disk: %v", outcomes)
	completed := map[string]string{}
	var started []string
	for _, r := range e.auditRows() {
		var p struct {
			InvocationID string `json:"invocation_id"`
			Outcome      string `json:"outcome"`
		}
		_ = json.Unmarshal(r.Payload, &p)
		switch r.Kind {
		case "skill.invoked_started":
			started = append(started, p.InvocationID)
		case "skill.invoked_completed":
			completed[p.InvocationID] = p.Outcome
		}
	}
	for _, id := range succeeded {
		if completed[id] != "success" {
			t.Errorf("invocation %s was answered success without a durable completed row (row: %q)", id, completed[id])
		}
	}
	for _, id := range started {
		if _, ok := completed[id]; !ok {
			t.Errorf("started row of %s has no completed row while the daemon runs", id)
		}
	}
	// Space freed: the next invocation succeeds, no restart needed.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if code, env, raw := d.invoke(map[string]any{"skill_id": "noisy"}); code != 200 || env.Outcome != "success" {
		t.Errorf("after space was freed: %d %s", code, raw)
	}
	if code, out := e.verify(); code != 0 {
		t.Errorf("verify after the full-disk runs: exit %d %s", code, out)
	}
}
