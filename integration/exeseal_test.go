package integration

import (
	"encoding/json"
	"testing"

	"github.com/cyberos/supervisor/internal/testutil"
)

// TestBinarySealedByOverlay: libcontainer re-executes bin/cyberos as every
// sandbox's first process and seals it first; on this host (and in the VM
// suite, whose guest loads the module as a host does on demand) that must be
// the overlayfs seal, not a copy of the whole binary into memory per start,
// so the starts measured and tested here are the ones production makes.
func TestBinarySealedByOverlay(t *testing.T) {
	testutil.RequiresRoot(t)
	out, err := cyberos("doctor", "--json").Output()
	if err != nil {
		t.Fatalf("doctor: %v", err)
	}
	var fs []struct {
		Control string `json:"control"`
		OK      bool   `json:"ok"`
		Detail  string `json:"detail"`
	}
	if err := json.Unmarshal(out, &fs); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	for _, f := range fs {
		if f.Control == "binary sealing" {
			if !f.OK {
				t.Errorf("doctor: binary sealing: %s", f.Detail)
			}
			return
		}
	}
	t.Errorf("doctor has no binary sealing finding:\n%s", out)
}
