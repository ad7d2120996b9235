package cgroups

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"cyberos.dev/internal/testutil"
)

func TestOwn(t *testing.T) {
	const hybrid = "12:pids:/system.slice/x.service\n4:memory:/system.slice/x.service\n3:cpu,cpuacct:/system.slice/x.service\n1:name=systemd:/system.slice/x.service\n0::/system.slice/x.service\n"
	cases := []struct {
		name string
		mode Mode
		proc string
		want string // "" with errWant
		err  string
	}{
		{"unified", Unified, "0::/system.slice/x.service/supervisor\n", "/system.slice/x.service/supervisor", ""},
		{"unified, no v2 entry", Unified, "4:memory:/a\n", "", "no cgroup v2 entry"},
		{"hybrid, one subtree", Hybrid, hybrid, "/system.slice/x.service", ""},
		{"hybrid, pids elsewhere", Hybrid, strings.Replace(hybrid, "12:pids:/system.slice/x.service", "12:pids:/", 1), "", "but / for pids"},
		{"legacy, no memory", Legacy, "12:pids:/a\n", "", "no memory controller"},
		{"unavailable", Unavailable, hybrid, "", "no cgroup hierarchy"},
		{"dot-dot cannot climb", Unified, "0::/a/../../..\n", "/", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := Hierarchy{Mode: c.mode}.Own([]byte(c.proc))
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Own = %q, %v; want an error saying %q", got, err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("Own = %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

// TestEnterLeaf: on v2 the pid is written into <path>/<leaf>/cgroup.procs
// (made if missing); the root cgroup is refused; on v1 nothing is done.
func TestEnterLeaf(t *testing.T) {
	root := fakeTree(t, map[string]string{"svc/": ""})
	h := Hierarchy{Root: root, Mode: Unified}
	if err := h.EnterLeaf("/svc", "supervisor", 42); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "svc/supervisor/cgroup.procs")); err != nil || string(b) != "42" {
		t.Fatalf("cgroup.procs = %q, %v; want 42", b, err)
	}
	if err := h.EnterLeaf("/", "supervisor", 42); err == nil {
		t.Fatal("EnterLeaf on the root cgroup: no error")
	}
	v1 := Hierarchy{Root: fakeTree(t, map[string]string{"memory/svc/": ""}), Mode: Hybrid}
	if err := v1.EnterLeaf("/svc", "supervisor", 42); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(v1.Root, "memory/svc/supervisor")); err == nil {
		t.Fatal("EnterLeaf made a leaf on v1")
	}
}

// TestDelegated: only systemd's mark, "1", on the tree systemd keeps
// (v2, Hybrid's unified, Legacy's name=systemd) counts.
func TestDelegated(t *testing.T) {
	testutil.RequiresRoot(t) // trusted.* xattrs
	cases := []struct {
		mode   Mode
		marked string // the directory given the mark, under the root
		value  string
		want   bool
	}{
		{Unified, "svc", "1", true},
		{Unified, "svc", "0", false},
		{Unified, "", "", false},
		{Hybrid, "unified/svc", "1", true},
		{Hybrid, "memory/svc", "1", false},
		{Legacy, "systemd/svc", "1", true},
	}
	for _, c := range cases {
		root := fakeTree(t, map[string]string{"svc/": "", "unified/svc/": "", "memory/svc/": "", "systemd/svc/": ""})
		if c.marked != "" {
			if err := unix.Setxattr(filepath.Join(root, c.marked), DelegateXattr, []byte(c.value), 0); err != nil {
				t.Fatalf("setxattr on %s: %v", root, err)
			}
		}
		if got := (Hierarchy{Root: root, Mode: c.mode}).Delegated("/svc"); got != c.want {
			t.Errorf("%v with %s=%q on %q: Delegated = %v, want %v", c.mode, DelegateXattr, c.value, c.marked, got, c.want)
		}
	}
}
