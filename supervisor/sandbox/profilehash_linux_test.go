package sandbox

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"cyberos.dev/supervisor/internal/seccomp"
)

// TestStartLoadsTheCheckedProfile: the profile the started row names (the
// hash Check returned) is the one Start loads. Edited between Check and
// Start, the start is refused with ErrProfile and leaves nothing behind;
// checked again, the edited profile runs and the containment names its
// bytes. Profiles are checked once per content (seccomp's cache), so this
// holds the cache to the file's bytes too.
func TestStartLoadsTheCheckedProfile(t *testing.T) {
	w := newWorld(t)
	dir := filepath.Join(w.base, "profiles")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	copyProfile := func(from string) []byte {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(w.profiles, from+".json"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "p.json"), b, 0o644); err != nil {
			t.Fatal(err)
		}
		return b
	}
	hash := func(b []byte) string {
		s := sha256.Sum256(b)
		return hex.EncodeToString(s[:])
	}
	spec := func(id string) Spec {
		s := w.spec(id, io.Discard)
		s.ProfilesDir, s.SeccompProfile = dir, "p"
		return s
	}
	def := copyProfile("default")

	id := fmt.Sprintf("checked-%d", os.Getpid())
	s := spec(id)
	cont, err := w.runner.Check(s)
	if err != nil {
		t.Fatal(err)
	}
	if cont.SeccompProfileHash != hash(def) {
		t.Fatalf("Check names %s, want the file's %s", cont.SeccompProfileHash, hash(def))
	}
	s.SeccompProfileHash = cont.SeccompProfileHash
	strict := copyProfile("strict")
	p, err := w.runner.Start(s)
	if err == nil {
		p.Close()
		t.Fatal("Start ran a profile edited since Check")
	}
	if !errors.Is(err, ErrProfile) || !strings.Contains(err.Error(), "changed since") {
		t.Errorf("err %v, want ErrProfile saying the profile changed", err)
	}
	if _, err := os.Stat(filepath.Join(w.runDir, "containers", id)); err == nil {
		t.Error("the refused start left its container state")
	}
	if _, err := os.Stat(w.runner.lockPath(id)); err == nil {
		t.Error("the refused start left its lock")
	}

	s = spec(id)
	if cont, err = w.runner.Check(s); err != nil {
		t.Fatal(err)
	}
	s.SeccompProfileHash = cont.SeccompProfileHash
	w.runProfile(t, s)
	if cont.SeccompProfileHash != hash(strict) {
		t.Errorf("containment names %s, want the edited file's %s", cont.SeccompProfileHash, hash(strict))
	}
}

// TestCheckLeavesTheSharedProfileAlone: Check reads the profile config the
// seccomp cache shares with every later load of the same bytes; after
// Checks under two profiles it still equals the file's own decoding.
func TestCheckLeavesTheSharedProfileAlone(t *testing.T) {
	w := newWorld(t)
	for _, name := range []string{"default", "strict"} {
		shared, _, err := seccomp.LoadProfileShared(w.profiles, name)
		if err != nil {
			t.Fatal(err)
		}
		_, fresh, err := seccomp.LoadProfileFile(filepath.Join(w.profiles, name+".json")) // not through the cache
		if err != nil {
			t.Fatal(err)
		}
		s := w.spec(fmt.Sprintf("shared-%s-%d", name, os.Getpid()), io.Discard)
		s.SeccompProfile = name
		for range 3 {
			if _, err := w.runner.Check(s); err != nil {
				t.Fatal(err)
			}
		}
		if !reflect.DeepEqual(shared, fresh) {
			t.Errorf("%s: Check changed the shared profile config", name)
		}
	}
}
