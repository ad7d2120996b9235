package sandbox

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cyberos/supervisor/cgroups"
)

// TestWaitReturnsWithTheSandboxEmpty: a skill that leaves a process behind,
// detached from its output pipes so that nothing else holds Wait back, has
// no process left in its sandbox but the exiting init when Wait returns,
// started cold and warm: cyberos-init kills and reaps what is left before
// it reports and closes its ends of the pipes Wait reads.
func TestWaitReturnsWithTheSandboxEmpty(t *testing.T) {
	w := newWorld(t)
	script := "#!/bin/sh\n/bin/sleep 1000 </dev/null >/dev/null 2>&1 &\n"
	if err := os.WriteFile(filepath.Join(w.skillDir, "main"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	check := func(name string, p Process) {
		t.Helper()
		ex, err := p.Wait()
		lp := p.(*linuxProcess)
		procs, perr := cgroups.Procs(lp.cgroupPath())
		left := slices.DeleteFunc(procs, func(pid int) bool { return pid == lp.proc.Pid() })
		if err != nil || ex.Code != 0 || ex.Signal != nil {
			t.Errorf("%s: skill ended %+v, %v; want exit 0", name, ex, err)
		}
		if perr != nil || len(left) > 0 {
			t.Errorf("%s: processes left in the sandbox when Wait returned: %v (%v)", name, left, perr)
		}
		if err := p.Close(); err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
	}

	spec := w.spec("orphan-cold", io.Discard)
	release := w.reserve(t, spec)
	p, err := w.runner.Start(spec)
	if err != nil {
		t.Fatal(err)
	}
	check("cold", p)
	release()

	warm := w.prewarm(t, "orphan-warm")
	if p, err = warm.Activate(Activation{Stdout: io.Discard, Stderr: io.Discard, Deadline: time.Minute}); err != nil {
		t.Fatal(err)
	}
	check("warm", p)
}
