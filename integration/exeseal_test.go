//go:build linux

package integration

import (
	"testing"

	"cyberos.dev/internal/testutil"
)

// TestBinarySealedByOverlay: libcontainer re-executes bin/cyberos-spawn as
// every sandbox's first process and seals it first; on this host (and in the VM
// suite, whose guest loads the module as a host does on demand) that must be
// the overlayfs seal, not a copy of the whole binary into memory per start,
// so the starts measured and tested here are the ones production makes.
func TestBinarySealedByOverlay(t *testing.T) {
	testutil.RequiresRoot(t)
	f, ok := doctor(t)["binary sealing"]
	if !ok {
		t.Fatal("doctor has no binary sealing finding")
	}
	if !f.OK {
		t.Errorf("doctor: binary sealing: %s", f.Detail)
	}
}
