// Package testutil holds helpers shared by tests: the root gate and polling.
package testutil

import (
	"os"
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
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
