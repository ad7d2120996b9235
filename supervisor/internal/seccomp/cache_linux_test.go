package seccomp

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/opencontainers/runc/libcontainer/configs"
)

// fresh converts path's current bytes without the cache, for comparison.
func fresh(t *testing.T, path string) *configs.Seccomp {
	t.Helper()
	_, cfg, err := LoadProfileFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

func sumOf(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestProfileCacheHonoursEdits: a profile whose bytes did not change is not
// checked again, yet every load returns the config and the hash of the bytes
// the file holds now: after an edit (even one keeping the size and the
// mtime), after a swap for an invalid profile (refused as without a cache),
// after the swap back; a file that became world-writable or a symlink is
// refused although its bytes were cached; a caller changing the config it
// got does not change what the next caller gets. LoadProfileShared, which
// hands out the cached config itself, honours edits alike.
func TestProfileCacheHonoursEdits(t *testing.T) {
	t.Run("LoadProfileHashed", func(t *testing.T) { profileCacheHonoursEdits(t, LoadProfileHashed, true) })
	t.Run("LoadProfileShared", func(t *testing.T) { profileCacheHonoursEdits(t, LoadProfileShared, false) })
}

func profileCacheHonoursEdits(t *testing.T, loadFn func(dir, name string) (*configs.Seccomp, string, error), copies bool) {
	dir := t.TempDir()
	path := writeProfile(t, dir, "p", okProfile)
	load := func() (*configs.Seccomp, string, error) { return loadFn(dir, "p") }

	checked := profiles.checked.Load()
	cfg, hash, err := load()
	if err != nil {
		t.Fatal(err)
	}
	if hash != sumOf(t, path) || !reflect.DeepEqual(cfg, fresh(t, path)) {
		t.Fatalf("first load: hash %s, config %+v", hash, cfg)
	}
	if copies { // a caller may change its copy (the recorder builds on it)
		cfg.DefaultAction = configs.Allow
		cfg.Syscalls[0].Action = configs.Allow
		cfg.Syscalls[3].Args[0].Value = 0
	}
	for range 5 {
		again, h, err := load()
		if err != nil || h != hash || !reflect.DeepEqual(again, fresh(t, path)) {
			t.Fatalf("unchanged profile: hash %s (want %s), err %v, config %+v", h, hash, err, again)
		}
	}
	if n := profiles.checked.Load() - checked; n != 1 {
		t.Errorf("six loads of unchanged bytes checked them %d times, want 1", n)
	}

	// An edit of the same length, the mtime put back: only the bytes tell.
	fi, _ := os.Stat(path)
	edited := []byte(okProfile)
	copy(edited[len(`{"defaultAction": "SCMP_ACT_ERRNO", "defaultErrnoRet": `):], "2")
	if len(edited) != len(okProfile) {
		t.Fatal("edit changed the length")
	}
	if err := os.WriteFile(path, edited, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, fi.ModTime(), fi.ModTime()); err != nil {
		t.Fatal(err)
	}
	cfg, h, err := load()
	if err != nil || h == hash || h != sumOf(t, path) || cfg.DefaultErrnoRet == nil || *cfg.DefaultErrnoRet != 2 {
		t.Fatalf("after an edit: hash %s (old %s), err %v, defaultErrnoRet %v; want the edited profile", h, hash, err, cfg.DefaultErrnoRet)
	}

	// Swapped for an invalid profile: refused, every time.
	invalid := filepath.Join(dir, "invalid")
	if err := os.WriteFile(invalid, []byte(`{"defaultAction": "SCMP_ACT_ALLOW"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(invalid, path); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if _, _, err := load(); !errors.Is(err, ErrProfile) {
			t.Fatalf("an invalid profile swapped in: err %v, want ErrProfile", err)
		}
	}
	// And back: the first bytes load again.
	writeProfile(t, dir, "p", okProfile)
	if _, h, err := load(); err != nil || h != hash {
		t.Fatalf("the first profile back: hash %s (want %s), err %v", h, hash, err)
	}

	// The file checks run whatever the cache holds.
	if err := os.Chmod(path, 0o646); err != nil {
		t.Fatal(err)
	}
	if _, _, err := load(); !errors.Is(err, ErrProfile) {
		t.Errorf("world-writable profile with cached bytes: err %v, want ErrProfile", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	other := writeProfile(t, dir, "other", okProfile)
	if err := os.Rename(path, filepath.Join(dir, "moved")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, path); err != nil {
		t.Fatal(err)
	}
	if _, _, err := load(); !errors.Is(err, ErrProfile) {
		t.Errorf("profile replaced by a symlink to the same bytes: err %v, want ErrProfile", err)
	}
}

// TestProfileCacheConcurrent: loads from many goroutines while the profile
// is swapped between two valid versions; each load returns a config and a
// hash of the same version (run with -race).
func TestProfileCacheConcurrent(t *testing.T) {
	dir := t.TempDir()
	bodies := []string{okProfile, `{"defaultAction": "SCMP_ACT_KILL_PROCESS", "flags": [],
 "syscalls": [{"names": ["read", "write", "exit_group"], "action": "SCMP_ACT_ALLOW"}]}`}
	want := map[string]*configs.Seccomp{}
	for i, b := range bodies {
		p := writeProfile(t, dir, fmt.Sprint("v", i), b)
		want[sumOf(t, p)] = fresh(t, p)
	}
	writeProfile(t, dir, "p", bodies[0])
	stop := make(chan struct{})
	var swapper sync.WaitGroup
	swapper.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			tmp := filepath.Join(dir, fmt.Sprint("tmp", i))
			if err := os.WriteFile(tmp, []byte(bodies[i%2]), 0o644); err != nil {
				t.Error(err)
				return
			}
			if err := os.Rename(tmp, filepath.Join(dir, "p.json")); err != nil {
				t.Error(err)
				return
			}
			time.Sleep(100 * time.Microsecond)
		}
	})
	var loaders sync.WaitGroup
	for range 8 {
		loaders.Go(func() {
			for range 200 {
				cfg, h, err := LoadProfileHashed(dir, "p")
				if err != nil {
					t.Error(err)
					return
				}
				if w, ok := want[h]; !ok || !reflect.DeepEqual(cfg, w) {
					t.Errorf("hash %s names no version, or its config is another version's", h)
					return
				}
				cfg.Syscalls[0].Name = "changed by a caller"
			}
		})
	}
	loaders.Wait()
	close(stop)
	swapper.Wait()
}

// TestProfileCacheBounded: many profile paths do not grow the cache past
// its bound.
func TestProfileCacheBounded(t *testing.T) {
	dir := t.TempDir()
	for i := range maxCachedProfiles + 10 {
		writeProfile(t, dir, fmt.Sprint("p", i), okProfile)
		if _, err := LoadProfile(dir, fmt.Sprint("p", i)); err != nil {
			t.Fatal(err)
		}
	}
	profiles.mu.Lock()
	n := len(profiles.m)
	profiles.mu.Unlock()
	if n > maxCachedProfiles {
		t.Errorf("%d cached profiles, bound %d", n, maxCachedProfiles)
	}
}

// BenchmarkLoadProfile: loading the default profile as Check and Start do,
// its bytes checked in full (a new or edited profile) and cached.
func BenchmarkLoadProfile(b *testing.B) {
	for _, tc := range []struct {
		name   string
		cached bool
	}{{"checked", false}, {"cached", true}} {
		b.Run(tc.name, func(b *testing.B) {
			for range b.N {
				if !tc.cached {
					profiles.forget(filepath.Join(profilesDir, "default.json"))
				}
				if _, _, err := LoadProfileHashed(profilesDir, "default"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
