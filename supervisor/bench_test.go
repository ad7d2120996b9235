//go:build linux

package supervisor

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"cyberos.dev/audit"
	"cyberos.dev/audit/auditstore"
	"cyberos.dev/internal/testutil"
	"cyberos.dev/supervisor/internal/tools"
	"cyberos.dev/supervisor/sandbox"
)

// TestMain removes the creation helper the benchmark below built for its
// real sandboxes.
func TestMain(m *testing.M) {
	code := m.Run()
	testutil.RemoveSpawnBinary()
	os.Exit(code)
}

// noopAuditor accepts every row and stores nothing: the reference the
// audit cost is measured against.
type noopAuditor struct{}

func (noopAuditor) Emit(context.Context, audit.Draft) (audit.Row, error) { return audit.Row{}, nil }

// benchSetup is a real runner (cyberos-init built from the tree, the
// creation helper), a trivial skill that prints {}, and a state dir, all
// removed when b ends. Needs root.
func benchSetup(b *testing.B) (runner *sandbox.LinuxRunner, skill, state, profiles string) {
	testutil.RequiresRoot(b)
	base, err := os.MkdirTemp("", "cyberos-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(base) })
	b.Cleanup(func() { testutil.RemoveCgroupDirs(sandbox.CgroupParentFor(filepath.Join(base, "run"))) })
	os.Chmod(base, 0o711)
	wd, _ := os.Getwd()
	repo := filepath.Join(wd, "..")
	initBin := filepath.Join(base, "cyberos-init")
	if out, err := testutil.BuildInit(initBin, filepath.Join(repo, "sandbox-init", "cyberos-init.c")).CombinedOutput(); err != nil {
		b.Fatalf("build init: %v %s", err, out)
	}
	skill = filepath.Join(base, "skill")
	os.MkdirAll(skill, 0o755)
	os.WriteFile(filepath.Join(skill, "SKILL.md"), []byte("---\nname: bench\ndescription: d\n---\n"), 0o644)
	os.WriteFile(filepath.Join(skill, "main"), []byte("#!/bin/sh\necho '{}'\n"), 0o755)
	runner, err = sandbox.NewLinuxRunner(sandbox.Options{RunDir: filepath.Join(base, "run"), InitBinary: initBin, ToolBinary: initBin, SpawnBinary: testutil.SpawnBinary(b)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { runner.Close() })
	return runner, skill, filepath.Join(base, "state"), filepath.Join(repo, "seccomp-profiles")
}

// BenchmarkRunAuditVsNoop: a whole invocation of a trivial skill in a real
// sandbox, with the durable audit store and with a no-op sink, interleaved
// in the same run. Reports medians and the ratio. Needs root:
// go test -tags seccomp -run '^$' -bench RunAuditVsNoop -benchtime 30x ./supervisor/
func BenchmarkRunAuditVsNoop(b *testing.B) {
	runner, skill, state, profiles := benchSetup(b)
	store, err := auditstore.Open(state)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	sock := socketDir(b)
	sups := map[string]*Supervisor{
		"audit": {Runner: runner, Audit: store, StateDir: state, ProfilesDir: profiles, Tools: tools.Registry(), SocketDir: sock},
		"noop":  {Runner: runner, Audit: noopAuditor{}, StateDir: state, ProfilesDir: profiles, Tools: tools.Registry(), SocketDir: sock},
	}
	samples := map[string][]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, name := range []string{"audit", "noop"} {
			t0 := time.Now()
			env, err := sups[name].Run(b.Context(), Request{SkillDir: skill})
			if err != nil || env.Outcome != OutcomeSuccess {
				b.Fatalf("%s: %v %+v", name, err, env)
			}
			samples[name] = append(samples[name], time.Since(t0))
		}
	}
	b.StopTimer()
	med := func(d []time.Duration) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[len(s)/2].Microseconds()) / 1000
	}
	b.ReportMetric(med(samples["audit"]), "audit-median-ms")
	b.ReportMetric(med(samples["noop"]), "noop-median-ms")
	b.ReportMetric(med(samples["audit"])/med(samples["noop"]), "audit/noop")
	b.ReportMetric(0, "ns/op")
}

// BenchmarkPrepare: what an invocation checks before its first row, as
// Run does it with the daemon's runner: the skill folder and SKILL.md, the
// policy hash, the enforcer, the runner's Check (the seccomp profile read
// and hashed, the containment it would enforce) and the state dir. Check
// alone too. Needs root:
// go test -tags seccomp -run '^$' -bench Prepare ./supervisor/
func BenchmarkPrepare(b *testing.B) {
	runner, skill, state, profiles := benchSetup(b)
	if err := os.MkdirAll(state, 0o700); err != nil {
		b.Fatal(err)
	}
	s := &Supervisor{Runner: runner, StateDir: state, ProfilesDir: profiles, Tools: tools.Registry(), SocketDir: socketDir(b)}
	req := Request{SkillDir: skill}
	inv, err := s.prepare(b.Context(), req, NewID())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("prepare", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.prepare(b.Context(), req, NewID()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Check", func(b *testing.B) {
		for b.Loop() {
			if _, err := runner.Check(inv.spec); err != nil {
				b.Fatal(err)
			}
		}
	})
}
