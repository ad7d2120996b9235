package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeTree writes files (relative path → content; a path ending in "/" is
// an empty directory) under a new temp dir and returns it.
func fakeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const inv = "/cyberos/inv-1"

func TestStats(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  Mode
		files map[string]string
		want  Stats
	}{{
		name: "v1",
		mode: Legacy,
		files: map[string]string{
			"memory" + inv + "/memory.max_usage_in_bytes": "33554432\n",
			"memory" + inv + "/memory.limit_in_bytes":     "33554432\n",
			"memory" + inv + "/memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n",
			"memory" + inv + "/memory.failcnt":            "999\n", // reclaim at the limit, not kills
			"memory" + inv + "/memory.memsw.failcnt":      "998\n",
			"pids" + inv + "/pids.peak":                   "16\n",
			"pids" + inv + "/pids.max":                    "16\n",
			"pids" + inv + "/pids.events":                 "max 7\n",
			"pids" + inv + "/pids.current":                "2\n",
		},
		want: Stats{MemoryPeakBytes: 32 << 20, MemoryLimitBytes: 32 << 20, OOMKills: 3, PidsPeak: 16, PidsLimit: 16, PidsLimitHits: 7},
	}, {
		name: "hybrid reads v1",
		mode: Hybrid,
		files: map[string]string{
			"memory" + inv + "/memory.max_usage_in_bytes": "1000\n",
			"memory" + inv + "/memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n",
			"pids" + inv + "/pids.events":                 "max 2\n",
			"unified" + inv + "/memory.peak":              "555\n", // not where v1 accounting is
		},
		want: Stats{MemoryPeakBytes: 1000, OOMKills: 1, PidsLimitHits: 2},
	}, {
		name: "v1 old kernel: oom_control without oom_kill, failcnt set",
		mode: Legacy,
		files: map[string]string{
			"memory" + inv + "/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\n",
			"memory" + inv + "/memory.failcnt":     "12\n",
		},
		want: Stats{},
	}, {
		name: "v1 unlimited",
		mode: Legacy,
		files: map[string]string{
			"memory" + inv + "/memory.limit_in_bytes": "9223372036854771712\n",
			"pids" + inv + "/pids.max":                "max\n",
		},
		want: Stats{},
	}, {
		name: "v1 unlimited 64k pages",
		mode: Legacy,
		files: map[string]string{
			"memory" + inv + "/memory.limit_in_bytes": "9223372036854710272\n",
		},
		want: Stats{},
	}, {
		name: "v1 missing optional files",
		mode: Legacy,
		files: map[string]string{
			"memory" + inv + "/": "",
			"pids" + inv + "/":   "",
		},
		want: Stats{},
	}, {
		name: "v1 pids controller absent",
		mode: Legacy,
		files: map[string]string{
			"memory" + inv + "/memory.max_usage_in_bytes": "4096\n",
		},
		want: Stats{MemoryPeakBytes: 4096},
	}, {
		name: "v2",
		mode: Unified,
		files: map[string]string{
			inv[1:] + "/memory.peak":   "33550336\n",
			inv[1:] + "/memory.max":    "33554432\n",
			inv[1:] + "/memory.events": "low 0\nhigh 0\nmax 40\noom 5\noom_kill 2\noom_group_kill 0\n",
			inv[1:] + "/pids.peak":     "16\n",
			inv[1:] + "/pids.max":      "16\n",
			inv[1:] + "/pids.events":   "max 9\n",
			inv[1:] + "/pids.current":  "1\n",
		},
		want: Stats{MemoryPeakBytes: 33550336, MemoryLimitBytes: 32 << 20, OOMKills: 2, PidsPeak: 16, PidsLimit: 16, PidsLimitHits: 9},
	}, {
		name: "v2 unlimited",
		mode: Unified,
		files: map[string]string{
			inv[1:] + "/memory.max": "max\n",
			inv[1:] + "/pids.max":   "max\n",
		},
		want: Stats{},
	}, {
		name:  "v2 missing optional files",
		mode:  Unified,
		files: map[string]string{inv[1:] + "/": ""},
		want:  Stats{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			h := Hierarchy{Root: fakeTree(t, tc.files), Mode: tc.mode}
			got, err := h.Stats(inv)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("Stats = %+v, want %+v", got, tc.want)
			}
			if n, err := h.OOMKills(inv); err != nil || n != tc.want.OOMKills {
				t.Errorf("OOMKills = %d, %v; want %d, as Stats reads it", n, err, tc.want.OOMKills)
			}
		})
	}
}

func TestStatsNotExist(t *testing.T) {
	for _, mode := range []Mode{Legacy, Hybrid, Unified} {
		t.Run(mode.String(), func(t *testing.T) {
			// Another cgroup and the controllers exist; inv does not.
			root := fakeTree(t, map[string]string{
				"memory/cyberos/other/memory.max_usage_in_bytes": "1",
				"pids/cyberos/other/pids.peak":                   "1",
				"cyberos/other/memory.peak":                      "1",
			})
			_, err := Hierarchy{Root: root, Mode: mode}.Stats(inv)
			if !errors.Is(err, ErrNotExist) {
				t.Fatalf("Stats of a missing cgroup: %v, want ErrNotExist", err)
			}
			if _, err := (Hierarchy{Root: root, Mode: mode}).OOMKills(inv); !errors.Is(err, ErrNotExist) {
				t.Fatalf("OOMKills of a missing cgroup: %v, want ErrNotExist", err)
			}
		})
	}
}

func TestStatsMalformed(t *testing.T) {
	for _, content := range []string{"abc\n", "-1\n", ""} {
		root := fakeTree(t, map[string]string{"pids" + inv + "/pids.peak": content})
		_, err := Hierarchy{Root: root, Mode: Legacy}.Stats(inv)
		if err == nil || errors.Is(err, ErrNotExist) {
			t.Errorf("pids.peak %q: err = %v, want a parse error", content, err)
		}
	}
}

func TestPathCannotLeaveRoot(t *testing.T) {
	// A sibling of the root that ".." would reach without cleaning.
	parent := t.TempDir()
	root := filepath.Join(parent, "root")
	if err := os.MkdirAll(filepath.Join(parent, "escape"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(parent, "escape", "memory.peak"), []byte("7"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := Hierarchy{Root: root, Mode: Unified}.Stats("../escape")
	if !errors.Is(err, ErrNotExist) {
		t.Fatalf("Stats(../escape) = %v, want ErrNotExist (path confined to root)", err)
	}
}

func TestUnavailable(t *testing.T) {
	h := Hierarchy{Root: t.TempDir(), Mode: Unavailable}
	if _, err := h.Stats(inv); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Stats: %v, want ErrUnsupported", err)
	}
	if _, err := h.Procs(inv); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Procs: %v, want ErrUnsupported", err)
	}
	if err := h.KillAll(inv); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("KillAll: %v, want ErrUnsupported", err)
	}
	if _, err := h.RemoveLeftovers("/cyberos", nil); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("RemoveLeftovers: %v, want ErrUnsupported", err)
	}
}

func TestModeString(t *testing.T) {
	for m, want := range map[Mode]string{Unavailable: "unavailable", Legacy: "legacy", Hybrid: "hybrid", Unified: "unified", 9: "Mode(9)"} {
		if got := m.String(); got != want {
			t.Errorf("Mode(%d).String() = %q, want %q", int(m), got, want)
		}
	}
}

func TestDetectModeMatchesHost(t *testing.T) {
	m := DetectMode()
	t.Logf("mode %v", m)
	for _, c := range []string{"memory", "pids", "freezer", "cpu"} {
		ok, d := HasController(c)
		t.Logf("controller %s: %v (%s)", c, ok, d)
	}
	if _, err := os.Stat(DefaultRoot); err != nil {
		if m != Unavailable {
			t.Errorf("DetectMode() = %v without %s", m, DefaultRoot)
		}
		return
	}
	_, errUnified := os.Stat(filepath.Join(DefaultRoot, "cgroup.controllers"))
	_, errMemV1 := os.Stat(filepath.Join(DefaultRoot, "memory"))
	switch {
	case errUnified == nil && m != Unified:
		t.Errorf("DetectMode() = %v, but %s is a v2 root", m, DefaultRoot)
	case errUnified != nil && errMemV1 == nil && m != Legacy && m != Hybrid:
		t.Errorf("DetectMode() = %v, but %s holds v1 controllers", m, DefaultRoot)
	}
}

func TestProcs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		mode  Mode
		files map[string]string
		want  []int
	}{{
		name: "v1 union of freezer, pids, memory with descendants",
		mode: Legacy,
		files: map[string]string{
			"freezer" + inv + "/cgroup.procs":       "10\n11\n",
			"freezer" + inv + "/child/cgroup.procs": "12\n",
			"pids" + inv + "/cgroup.procs":          "11\n13\n",
			"memory" + inv + "/cgroup.procs":        "10\n",
			"cpu" + inv + "/cgroup.procs":           "99\n", // not a controller Procs reads
		},
		want: []int{10, 11, 12, 13},
	}, {
		name: "hybrid adds unified",
		mode: Hybrid,
		files: map[string]string{
			"pids" + inv + "/cgroup.procs":    "5\n",
			"unified" + inv + "/cgroup.procs": "6\n",
		},
		want: []int{5, 6},
	}, {
		name: "v2 with descendants",
		mode: Unified,
		files: map[string]string{
			inv[1:] + "/cgroup.procs":         "",
			inv[1:] + "/a/cgroup.procs":       "21\n",
			inv[1:] + "/a/b/c/cgroup.procs":   "22\n23\n",
			"cyberos/inv-2/cgroup.procs":      "30\n",
			"cyberos/inv-1x/cgroup.procs":     "31\n",
			inv[1:] + "/a/b/c/cgroup.threads": "99\n",
		},
		want: []int{21, 22, 23},
	}, {
		name:  "empty",
		mode:  Unified,
		files: map[string]string{inv[1:] + "/cgroup.procs": ""},
		want:  []int{},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Hierarchy{Root: fakeTree(t, tc.files), Mode: tc.mode}.Procs(inv)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("Procs = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestProcsNotExist(t *testing.T) {
	for _, mode := range []Mode{Legacy, Hybrid, Unified} {
		h := Hierarchy{Root: t.TempDir(), Mode: mode}
		if _, err := h.Procs(inv); !errors.Is(err, ErrNotExist) {
			t.Errorf("%v: Procs of a missing cgroup: %v, want ErrNotExist", mode, err)
		}
		if err := h.KillAll(inv); !errors.Is(err, ErrNotExist) {
			t.Errorf("%v: KillAll of a missing cgroup: %v, want ErrNotExist", mode, err)
		}
	}
}

func TestKillAllEmpty(t *testing.T) {
	root := fakeTree(t, map[string]string{
		"freezer" + inv + "/cgroup.procs":  "",
		"freezer" + inv + "/freezer.state": "THAWED\n",
	})
	if err := (Hierarchy{Root: root, Mode: Legacy}).KillAll(inv); err != nil {
		t.Fatal(err)
	}
}

func TestRefuseRootCgroup(t *testing.T) {
	h := Hierarchy{Root: t.TempDir(), Mode: Unified}
	for _, p := range []string{"/", "", "..", "/cyberos/.."} {
		if err := h.KillAll(p); !errors.Is(err, errRootCgroup) {
			t.Errorf("KillAll(%q) = %v, want refusal", p, err)
		}
		if _, err := h.RemoveLeftovers(p, nil); !errors.Is(err, errRootCgroup) {
			t.Errorf("RemoveLeftovers(%q) = %v, want refusal", p, err)
		}
	}
}

func TestRemoveLeftovers(t *testing.T) {
	keep := func(id string) bool { return id == "running" }
	t.Run("v1", func(t *testing.T) {
		// Empty dirs stand in for cgroups: rmdir removes them, and no
		// cgroup.procs means no processes.
		root := fakeTree(t, map[string]string{
			"memory/cyberos/crashed/":         "",
			"memory/cyberos/crashed/nested/":  "",
			"pids/cyberos/crashed/":           "",
			"freezer/cyberos/running/":        "",
			"memory/cyberos/running/":         "",
			"cpu,cpuacct/cyberos/cpu-only/":   "", // only in a controller KillAll does not read
			"unified/cyberos/crashed/":        "",
			"memory/other/crashed/":           "", // another parent: untouched
			"memory/cyberos/notes.txt":        "a file, not a cgroup",
			"systemd/cyberos/crashed-2/deep/": "",
		})
		if err := os.Symlink("cpu,cpuacct", filepath.Join(root, "cpu")); err != nil {
			t.Fatal(err)
		}
		h := Hierarchy{Root: root, Mode: Hybrid}
		removed, err := h.RemoveLeftovers("/cyberos", keep)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"cpu-only", "crashed", "crashed-2"}; !slices.Equal(removed, want) {
			t.Errorf("removed %v, want %v", removed, want)
		}
		for _, gone := range []string{"memory/cyberos/crashed", "pids/cyberos/crashed", "unified/cyberos/crashed", "cpu,cpuacct/cyberos/cpu-only", "systemd/cyberos/crashed-2"} {
			if _, err := os.Stat(filepath.Join(root, gone)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s still there (%v)", gone, err)
			}
		}
		for _, kept := range []string{"freezer/cyberos/running", "memory/cyberos/running", "memory/other/crashed", "memory/cyberos/notes.txt", "memory/cyberos"} {
			if _, err := os.Stat(filepath.Join(root, kept)); err != nil {
				t.Errorf("%s removed: %v", kept, err)
			}
		}
	})
	t.Run("v2", func(t *testing.T) {
		root := fakeTree(t, map[string]string{
			"cyberos/crashed/sub/": "",
			"cyberos/running/":     "",
		})
		removed, err := Hierarchy{Root: root, Mode: Unified}.RemoveLeftovers("/cyberos", keep)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(removed, []string{"crashed"}) {
			t.Errorf("removed %v, want [crashed]", removed)
		}
		if _, err := os.Stat(filepath.Join(root, "cyberos/running")); err != nil {
			t.Error(err)
		}
	})
	t.Run("no parent", func(t *testing.T) {
		removed, err := Hierarchy{Root: t.TempDir(), Mode: Unified}.RemoveLeftovers("/cyberos", nil)
		if err != nil || len(removed) != 0 {
			t.Errorf("RemoveLeftovers = %v, %v; want nothing, no error", removed, err)
		}
	})
	t.Run("never deletes files", func(t *testing.T) {
		// Not cgroupfs: rmdir fails on a regular file, the id is reported
		// as an error and the file survives.
		root := fakeTree(t, map[string]string{"cyberos/crashed/memory.peak": "1"})
		removed, err := Hierarchy{Root: root, Mode: Unified}.RemoveLeftovers("/cyberos", nil)
		if err == nil || len(removed) != 0 {
			t.Errorf("RemoveLeftovers = %v, %v; want an error", removed, err)
		}
		if _, err := os.Stat(filepath.Join(root, "cyberos/crashed/memory.peak")); err != nil {
			t.Error(err)
		}
	})
}

func TestHasController(t *testing.T) {
	v1 := fakeTree(t, map[string]string{
		"memory/cgroup.procs":            "",
		"pids/cgroup.procs":              "",
		"unified/cgroup.controllers":     "hugetlb\n",
		"notmounted/":                    "",
		"unified/cgroup.subtree_control": "",
		"cpu,cpuacct/cgroup.procs":       "",
	})
	v2 := fakeTree(t, map[string]string{"cgroup.controllers": "cpuset cpu io memory pids\n"})
	for _, tc := range []struct {
		h    Hierarchy
		name string
		want bool
	}{
		{Hierarchy{v1, Legacy}, "memory", true},
		{Hierarchy{v1, Legacy}, "freezer", false},
		{Hierarchy{v1, Legacy}, "notmounted", false},
		{Hierarchy{v1, Legacy}, "hugetlb", false},
		{Hierarchy{v1, Hybrid}, "hugetlb", true},
		{Hierarchy{v1, Hybrid}, "pids", true},
		{Hierarchy{v1, Hybrid}, "freezer", false},
		{Hierarchy{v2, Unified}, "memory", true},
		{Hierarchy{v2, Unified}, "freezer", true},
		{Hierarchy{v2, Unified}, "rdma", false},
		{Hierarchy{v2, Unavailable}, "memory", false},
	} {
		ok, detail := tc.h.HasController(tc.name)
		if ok != tc.want || detail == "" {
			t.Errorf("%v HasController(%q) = %v, %q; want %v", tc.h.Mode, tc.name, ok, detail, tc.want)
		}
	}
}
