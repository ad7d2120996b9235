//go:build linux

package integration

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"cyberos.dev/internal/testutil"
	"cyberos.dev/supervisor/sandbox"
)

// prebuiltEnv names a directory holding cyberos, cyberos-spawn, cyberos-init,
// cyberos-tool and probes/<name>, built beforehand; TestMain then builds nothing.
const prebuiltEnv = "CYBEROS_IT_PREBUILT"

// startEnv, when "warm", runs this package's sandbox and broker suites
// (warmSuite) again with every `skill run` starting warm (--start warm): a
// sandbox made ahead as the daemon's pool makes it, then handed the
// invocation. Same tests, same assertions; each run must report start warm.
const startEnv = "CYBEROS_IT_START"

// warmSuite is what the warm pass runs when no -test.run is given: every
// test of a sandbox's containment, its limits, the broker and the tools
// that runs skills through `skill run`.
var warmSuite = strings.Join([]string{
	// sandbox_test.go
	"TestInsideTheSandbox", "TestHostSeesUnprivilegedUID", "TestOOMIsKilled", "TestPidsMax",
	"TestDeadlineKillsEverything", "TestOutcomes", "TestConcurrentInvocationsLeaveNothing",
	"TestBadInputIsRefused", "TestCrashLeftoversAreCleaned",
	// hostile_test.go
	"TestLandlockConfinesSkill", "TestHostile.*",
	// seccomp_test.go, cgroup_test.go
	"TestProfilesTrySyscalls", "TestStrictProfileRunsExamples", "TestDockerDefaultProfile",
	"TestSeccompCommandsExitStatus", "TestCgroupLimitsApplied", "TestDeadlineKillsThroughCgroup",
	// broker_test.go, egress_test.go, policyin_test.go
	"TestBroker.*", "TestHttpFetchCannotReachHost", "TestSkillCannotRewritePolicy",
	// userns_test.go, leaks_test.go, scale_test.go, install_test.go
	"TestInotifyExhaustionIsContained", "TestDefaultProfileRefusesInotify",
	"TestConcurrentSandboxesHaveDistinctHostUIDs", "TestLeak.*", "TestKeyringNoneMadePerSandbox",
	"TestSkillsRunUnderAStrictUmask",
	// audit_test.go: the rows of an invocation, and of one whose supervisor died
	"TestAuditHundredParallelRuns", "TestAuditKill9ClosesOrphanAsLost", "TestAuditTamperIsDetected",
	"TestAuditNoRawArgs", "TestAuditFullStateDirRefuses", "TestDeadlineOutlivesASupervisorKill",
}, "|")

// itStart is startEnv's value: "cold" (the default) or "warm".
var itStart = "cold"

// Built once by TestMain: the real cyberos binary and the probe programs.
var (
	cyberosBin string
	probeDir   string
	repoRoot   string
)

func TestMain(m *testing.M) {
	flag.Parse()
	switch v := os.Getenv(startEnv); v {
	case "", "cold":
	case "warm":
		itStart = v
		if f := flag.Lookup("test.run"); f.Value.String() == "" {
			_ = f.Value.Set("^(" + warmSuite + ")$")
		}
	default:
		fmt.Fprintf(os.Stderr, "%s=%q: want cold or warm\n", startEnv, v)
		os.Exit(2)
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	tmp, err := os.MkdirTemp("", "cyberos-it-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(tmp)
	// The sandbox's mapped root must traverse to the probes.
	if err := os.Chmod(tmp, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	wd, _ := os.Getwd()
	repoRoot = filepath.Dir(wd)
	if dir := os.Getenv(prebuiltEnv); dir != "" {
		// The VM (scripts/vm) has no Go toolchain or compiler: it brings
		// the binaries and probes built on the host.
		cyberosBin = filepath.Join(dir, "cyberos")
		probeDir = filepath.Join(dir, "probes")
		for _, p := range []string{cyberosBin, filepath.Join(dir, "cyberos-spawn"), filepath.Join(dir, "cyberos-init"), filepath.Join(dir, "cyberos-tool"), probeDir} {
			if _, err := os.Stat(p); err != nil {
				fmt.Fprintf(os.Stderr, "%s=%s: %v\n", prebuiltEnv, dir, err)
				return 1
			}
		}
		return m.Run()
	}
	cyberosBin = filepath.Join(tmp, "cyberos")
	for _, build := range []*exec.Cmd{
		// As `make build` builds it: static (see the Makefile's STATIC).
		exec.Command("go", "build", "-tags", "seccomp netgo osusergo", "-ldflags", `-extldflags "-static"`, "-o", cyberosBin, "./cmd/cyberos"),
		exec.Command("go", "build", "-tags", "seccomp netgo osusergo", "-ldflags", `-extldflags "-static"`, "-o", filepath.Join(tmp, "cyberos-spawn"), "./cmd/cyberos-spawn"),
		testutil.BuildInit(filepath.Join(tmp, "cyberos-init"), "sandbox-init/cyberos-init.c"),
		exec.Command("go", "build", "-o", filepath.Join(tmp, "cyberos-tool"), "./cmd/cyberos-tool"),
	} {
		build.Dir = repoRoot
		build.Env = append(os.Environ(), "CGO_ENABLED=1")
		if strings.Contains(build.String(), "cyberos-tool") {
			build.Env = append(os.Environ(), "CGO_ENABLED=0")
		}
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n%s", build, err, out)
			return 1
		}
	}
	probeDir = filepath.Join(tmp, "probes")
	ents, _ := os.ReadDir("testdata/probes")
	for _, e := range ents {
		b := exec.Command("go", "build", "-o", filepath.Join(probeDir, e.Name()), "./testdata/probes/"+e.Name())
		b.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := b.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build probe %s: %v\n%s", e.Name(), err, out)
			return 1
		}
	}
	_ = os.Chmod(probeDir, 0o755)
	return m.Run()
}

// env is one test's private world: a run dir (containers, locks, rootfs
// skeleton), a state dir and a place for skills, all removed at the end.
type env struct {
	t        testing.TB
	base     string
	runDir   string
	stateDir string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	testutil.RequiresRoot(t)
	base, err := os.MkdirTemp("", "cyberos-it-")
	if err != nil {
		t.Fatal(err)
	}
	// 0711: the sandbox's mapped root must reach the skills and the rootfs.
	if err := os.Chmod(base, 0o711); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, base: base, runDir: filepath.Join(base, "run"), stateDir: filepath.Join(base, "state")}
	t.Cleanup(func() {
		os.RemoveAll(base)
		testutil.RemoveCgroupDirs(sandbox.CgroupParentFor(e.runDir))
	})
	return e
}

// skill writes a skill folder: SKILL.md from frontmatter lines, and main
// either copied from a probe (name "probe:NAME") or written as a script.
func (e *env) skill(name, frontmatter, main string) string {
	e.t.Helper()
	dir := filepath.Join(e.base, "skills", name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		e.t.Fatal(err)
	}
	_ = os.Chmod(filepath.Dir(dir), 0o755)
	md := "---\nname: " + name + "\ndescription: test skill\n" + frontmatter + "---\n"
	if err := os.WriteFile(filepath.Join(dir, "SKILL.md"), []byte(md), 0o644); err != nil {
		e.t.Fatal(err)
	}
	if probe, ok := strings.CutPrefix(main, "probe:"); ok {
		b, err := os.ReadFile(filepath.Join(probeDir, probe))
		if err != nil {
			e.t.Fatal(err)
		}
		main = string(b)
	}
	if err := os.WriteFile(filepath.Join(dir, "main"), []byte(main), 0o755); err != nil {
		e.t.Fatal(err)
	}
	return dir
}

// result is one `cyberos skill run` as the tests see it.
type result struct {
	code   int
	stdout string
	stderr string
	env    envelope
}

type envelope struct {
	InvocationID string          `json:"invocation_id"`
	RequestID    string          `json:"request_id"`
	SkillID      string          `json:"skill_id"`
	Version      string          `json:"version"`
	Outcome      string          `json:"outcome"`
	DurationMS   int64           `json:"duration_ms"`
	Result       json.RawMessage `json:"result"`
	ResultHash   string          `json:"result_hash"`
	ErrorMessage string          `json:"error_message"`
	LogTail      string          `json:"log_tail"`
	SignalSent   string          `json:"signal_sent"`
	TraceID      string          `json:"trace_id"`
	DeadlineMS   int64           `json:"deadline_ms"`
	// ProtocolAbuse counts the broker protocol abuse of the invocation by kind.
	ProtocolAbuse map[string]int64 `json:"protocol_abuse"`
	SandboxStart  float64          `json:"sandbox_start_ms"`
	Containment   struct {
		Namespaces    []string `json:"namespaces"`
		UserNamespace string   `json:"user_namespace"`
		Seccomp       string   `json:"seccomp"`
		Landlock      string   `json:"landlock"`
		CgroupMode    string   `json:"cgroup_mode"`
		NotEnforced   []string `json:"not_enforced"`
		Start         string   `json:"start"`
	} `json:"containment"`
	Stats struct {
		MemoryPeakBytes uint64 `json:"memory_peak_bytes"`
		OOMKills        uint64 `json:"oom_kills"`
		PidsPeak        uint64 `json:"pids_peak"`
		PidsLimitHits   uint64 `json:"pids_limit_hits"`
	} `json:"stats"`
}

// run runs `cyberos skill run DIR --json` with this env's dirs plus extra flags.
func (e *env) run(dir string, extra ...string) result {
	e.t.Helper()
	cmd := e.command(dir, extra...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatalf("run cyberos: %v", err)
	}
	if r.code <= 1 && out.Len() > 0 {
		if err := json.Unmarshal(out.Bytes(), &r.env); err != nil {
			e.t.Fatalf("envelope is not JSON: %v\n%s\nstderr: %s", err, out.String(), r.stderr)
		}
		if s := r.env.Containment.Start; s != "" && s != itStart {
			e.t.Fatalf("%s=%s, but the skill's sandbox started %s\nstdout: %s\nstderr: %s", startEnv, itStart, s, r.stdout, r.stderr)
		}
	}
	return r
}

// command is `cyberos skill run DIR --json` with this env's dirs, starting
// as startEnv says, plus extra flags.
func (e *env) command(dir string, extra ...string) *exec.Cmd {
	args := append([]string{"skill", "run", dir, "--json", "--start", itStart,
		"--state-dir", e.stateDir, "--run-dir", e.runDir,
		"--seccomp-profiles", filepath.Join(repoRoot, "seccomp-profiles")}, extra...)
	return exec.Command(cyberosBin, args...)
}

// mustOutcome fails unless the run ended with want.
func (r result) mustOutcome(t *testing.T, want string) {
	t.Helper()
	if r.env.Outcome != want {
		t.Fatalf("outcome %q, want %q (exit %d)\nerror_message: %s\nstdout: %s\nstderr: %s", r.env.Outcome, want, r.code, r.env.ErrorMessage, r.stdout, r.stderr)
	}
}

// cgroupLeaves lists the invocation cgroups left under /cyberos in every
// mounted hierarchy.
func cgroupLeaves(t *testing.T) []string {
	t.Helper()
	var left []string
	roots, _ := filepath.Glob("/sys/fs/cgroup/*/cyberos*")
	v2, _ := filepath.Glob("/sys/fs/cgroup/cyberos*")
	roots = append(roots, v2...)
	for _, r := range roots {
		ents, _ := os.ReadDir(r)
		for _, e := range ents {
			if e.IsDir() {
				left = append(left, filepath.Join(r, e.Name()))
			}
		}
	}
	return left
}

// hasCgroup reports whether any hierarchy still has a cgroup for id.
func hasCgroup(t *testing.T, id string) bool {
	for _, l := range cgroupLeaves(t) {
		if filepath.Base(l) == id {
			return true
		}
	}
	return false
}

// procsMatching lists host pids whose command line contains s.
func procsMatching(s string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && strings.Contains(string(bytes.ReplaceAll(b, []byte{0}, []byte{' '})), s) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func waitFor(t testing.TB, d time.Duration, cond func() bool) { testutil.WaitFor(t, slow(d), cond) }

// slowdownEnv is a factor (default 1) for the upper time bounds of these
// tests, for machines that run them slower than real hardware: the VM of
// scripts/vm sets it under software emulation. Lower bounds stay exact
// unless a test says why not.
const slowdownEnv = "CYBEROS_TEST_SLOWDOWN"

var slowdown = func() float64 {
	f, err := strconv.ParseFloat(os.Getenv(slowdownEnv), 64)
	if err != nil || f < 1 {
		return 1
	}
	return f
}()

// slow stretches an upper time bound by the slowdown factor.
func slow(d time.Duration) time.Duration { return time.Duration(float64(d) * slowdown) }

// cyberos builds a command running the built binary.
func cyberos(args ...string) *exec.Cmd { return exec.Command(cyberosBin, args...) }

// exitCode of a finished command's error (0 when nil).
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

func killPid(pid int) error { return syscall.Kill(pid, syscall.SIGKILL) }

// doctor runs `cyberos doctor --json` and returns its findings by control.
func doctor(t *testing.T) map[string]sandbox.Finding {
	t.Helper()
	out, err := cyberos("doctor", "--json").Output()
	if err != nil {
		t.Fatalf("doctor: %v", err)
	}
	var findings []sandbox.Finding
	if err := json.Unmarshal(out, &findings); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	got := map[string]sandbox.Finding{}
	for _, f := range findings {
		got[f.Control] = f
	}
	return got
}
