//go:build darwin || linux

package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseShimArgs(t *testing.T) {
	core := rlimitSetting{unix.RLIMIT_CORE, 0}
	for _, c := range []struct {
		args []string
		want []rlimitSetting
	}{
		{[]string{"10", "1073741824", "32", "64", "--", "/s/run"},
			[]rlimitSetting{{unix.RLIMIT_CPU, 10}, {unix.RLIMIT_AS, 1 << 30}, {unix.RLIMIT_NPROC, 32}, {unix.RLIMIT_NOFILE, 64}, core}},
		// 0 leaves a limit as inherited (the darwin runner passes CPU 0:
		// the deadline ends a skill, not CPU seconds).
		{[]string{"0", "1073741824", "0", "1024", "--", "/s/run"},
			[]rlimitSetting{{unix.RLIMIT_AS, 1 << 30}, {unix.RLIMIT_NOFILE, 1024}, core}},
		// ...except RLIMIT_CORE, which is always 0.
		{[]string{"0", "0", "0", "0", "--", "/s/run"}, []rlimitSetting{core}},
	} {
		set, prog, err := parseShimArgs(c.args)
		if err != nil {
			t.Errorf("%q: %v", c.args, err)
			continue
		}
		if !slices.Equal(set, c.want) || prog != "/s/run" {
			t.Errorf("%q: %v %q, want %v %q", c.args, set, prog, c.want, "/s/run")
		}
	}
}

func TestParseShimArgsRefuses(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "usage: rlimit-init"},
		{[]string{"0", "0", "0", "0", "--"}, "usage: rlimit-init"},                   // no program
		{[]string{"0", "0", "0", "0", "/s/run", "--"}, "usage: rlimit-init"},         // no separator
		{[]string{"0", "0", "0", "0", "--", "/s/run", "x"}, "usage: rlimit-init"},    // program arguments
		{[]string{"0", "lots", "0", "0", "--", "/s/run"}, "limit 1"},                 // not a number
		{[]string{"0", "0", "-1", "0", "--", "/s/run"}, "limit 2"},                   // negative
		{[]string{"0", "0", "0", "18446744073709551616", "--", "/s/run"}, "limit 3"}, // over 64 bits
	} {
		set, _, err := parseShimArgs(c.args)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, %v; want an error containing %q", c.args, set, err, c.want)
		}
	}
}

// envShimChild carries the shim's arguments (JSON) to the re-executed test
// binary (TestRlimitShimHelperProcess).
const envShimChild = "CYBEROS_RLIMIT_SHIM_ARGS"

// TestRlimitShimLowersLimits runs the shim in a child process, as the macOS
// runner does, and has the program it execs print its limits.
func TestRlimitShimLowersLimits(t *testing.T) {
	prog := filepath.Join(t.TempDir(), "limits")
	if err := os.WriteFile(prog, []byte("#!/bin/sh\nulimit -v; ulimit -n; ulimit -c; ulimit -t\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// AS 8 GiB: low enough to be a real limit, high enough for the Go
	// runtime of the child to reach its exec.
	args, _ := json.Marshal([]string{"600", fmt.Sprint(8 << 30), "0", "64", "--", prog})
	cmd := exec.Command(os.Args[0], "-test.run=^TestRlimitShimHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envShimChild+"="+string(args))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("shim child: %v\n%s", err, stderr.String())
	}
	// ulimit -v is in KiB; -t in seconds.
	if got, want := strings.Fields(string(out)), []string{fmt.Sprint(8 << 20), "64", "0", "600"}; !slices.Equal(got, want) {
		t.Errorf("limits after the shim (as KiB, nofile, core, cpu s) = %q, want %q", got, want)
	}
}

// TestRlimitShimHelperProcess is not a test: it is the child side of
// TestRlimitShimLowersLimits. It raises its core limit first, so a 0 seen
// after the shim is the shim's doing, then runs the shim, which execs.
func TestRlimitShimHelperProcess(t *testing.T) {
	raw := os.Getenv(envShimChild)
	if raw == "" {
		return
	}
	var args []string
	if err := json.Unmarshal([]byte(raw), &args); err != nil {
		fmt.Fprintln(os.Stderr, "shim child:", err)
		os.Exit(126)
	}
	var core unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_CORE, &core); err == nil {
		if core.Max == 0 {
			core.Max = 1 << 20 // only root may raise a hard limit; best effort
		}
		core.Cur = core.Max
		_ = unix.Setrlimit(unix.RLIMIT_CORE, &core)
	}
	err := rlimitShim(args)
	fmt.Fprintln(os.Stderr, "shim child:", err)
	os.Exit(126)
}
