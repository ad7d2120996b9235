package supervisor

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cyberos/supervisor/audit"
	"github.com/cyberos/supervisor/internal/testutil"
	"github.com/cyberos/supervisor/supervisor/sandbox"
	"github.com/cyberos/supervisor/supervisor/tools"
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

// BenchmarkRunAuditVsNoop: a whole invocation of a trivial skill in a real
// sandbox, with the durable audit store and with a no-op sink, interleaved
// in the same run. Reports medians and the ratio. Needs root:
// go test -tags seccomp -run '^$' -bench RunAuditVsNoop -benchtime 30x ./supervisor/
func BenchmarkRunAuditVsNoop(b *testing.B) {
	testutil.RequiresRoot(b)
	base, err := os.MkdirTemp("", "cyberos-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(base)
	defer testutil.RemoveCgroupDirs(sandbox.CgroupParentFor(filepath.Join(base, "run")))
	os.Chmod(base, 0o711)
	wd, _ := os.Getwd()
	repo := filepath.Join(wd, "..")
	initBin := filepath.Join(base, "cyberos-init")
	if out, err := exec.Command("gcc", "-static", "-O2", "-o", initBin, filepath.Join(repo, "sandbox-init", "cyberos-init.c")).CombinedOutput(); err != nil {
		b.Fatalf("build init: %v %s", err, out)
	}
	skill := filepath.Join(base, "skill")
	os.MkdirAll(skill, 0o755)
	os.WriteFile(filepath.Join(skill, "SKILL.md"), []byte("---\nname: bench\ndescription: d\n---\n"), 0o644)
	os.WriteFile(filepath.Join(skill, "main"), []byte("#!/bin/sh\necho '{}'\n"), 0o755)
	runner, err := sandbox.NewLinuxRunner(sandbox.Options{RunDir: filepath.Join(base, "run"), InitBinary: initBin, ToolBinary: initBin, SpawnBinary: testutil.SpawnBinary(b)})
	if err != nil {
		b.Fatal(err)
	}
	defer runner.Close()
	state := filepath.Join(base, "state")
	store, err := audit.Open(state)
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	sock := socketDir(b)
	sups := map[string]*Supervisor{
		"audit": {Runner: runner, Audit: store, StateDir: state, ProfilesDir: filepath.Join(repo, "seccomp-profiles"), Tools: tools.Registry(), SocketDir: sock},
		"noop":  {Runner: runner, Audit: noopAuditor{}, StateDir: state, ProfilesDir: filepath.Join(repo, "seccomp-profiles"), Tools: tools.Registry(), SocketDir: sock},
	}
	samples := map[string][]time.Duration{}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, name := range []string{"audit", "noop"} {
			t0 := time.Now()
			env, err := sups[name].Run(Request{SkillDir: skill})
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
