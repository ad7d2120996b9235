// Package testutil holds helpers shared by tests: the root gate, polling,
// a PostgreSQL server per test binary, the creation helper built once, and
// what benchmarks read of the machine. Its own tests check the module's
// layout and package docs.
package testutil

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RequiresRoot skips a test that needs root and a real kernel, loudly. In CI
// (env CI set) not being root is a failure, so root tests cannot rot unrun.
func RequiresRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s needs root and CI is set: run the suite as root", t.Name())
	}
	t.Skipf("SKIPPED %s: needs root and a real kernel (run as root; CI does)", t.Name())
}

// WaitFor polls cond every 10ms until it is true or timeout passes, then fails.
func WaitFor(t testing.TB, timeout time.Duration, cond func() bool) {
	t.Helper()
	if !Eventually(timeout, cond) {
		t.Fatalf("condition not met within %v", timeout)
	}
}

// Eventually polls cond every 10ms until it is true (it returns true) or
// timeout passes (false): WaitFor for a caller whose failure message says
// more than that the time ran out.
func Eventually(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(10 * time.Millisecond)
	}
	return true
}

// RemoveCgroupDirs removes the (empty) cgroup directory parent, a path like
// "/cyberos-1a2b", from every mounted hierarchy: what a test's runner left.
func RemoveCgroupDirs(parent string) {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*" + parent)
	if d := "/sys/fs/cgroup" + parent; fileExists(d) {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		_ = os.Remove(d)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// RequiresTool returns the path of an executable a test needs: env's value
// when set, else def. A missing tool skips the test, loudly; in CI (env CI
// set) it is a failure, so the test cannot rot unrun. hint says how to get it.
func RequiresTool(t testing.TB, env, def, hint string) string {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		path = def
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
		return path
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s needs %s (%s) and CI is set: %s", t.Name(), path, env, hint)
	}
	t.Skipf("SKIPPED %s: needs %s (set %s, or %s)", t.Name(), path, env, hint)
	return ""
}

// BusyCPU is the time all CPUs have spent busy since boot: /proc/stat's
// cpu line without idle and iowait, in USER_HZ ticks (10 ms).
func BusyCPU(tb testing.TB) time.Duration {
	tb.Helper()
	d, err := ReadBusyCPU()
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// ReadBusyCPU is BusyCPU for a goroutine other than the test's, which must
// not call Fatal: it returns the error instead.
func ReadBusyCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return 0, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var ticks int64
	for i, v := range f[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/stat: %q: %w", line, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}
