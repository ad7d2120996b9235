//go:build linux

package integration

// Smaller leaks and defaults (issue 16, item 7), each asserted from inside
// a real sandbox by the leaks probe:
//
//	leak or missing default                      decision                            test
//	/proc/config.gz (the host kernel's config)   masked (runc MaskPaths)             TestLeakProcConfigGz
//	sync(), syncfs(): a host-wide flush           refused by every shipped profile    TestLeakSyncRefused
//	RLIMIT_FSIZE, RLIMIT_NOFILE, RLIMIT_CORE      defaults 128 MiB, 1024, 0           TestLeakRlimitDefaults
//	  (and the Bash tool's processes)                                                TestLeakRlimitDefaults
//	  configurable by the daemon's defaults                                          TestLeakRlimitsFromDaemonConfig
//	no CPU quota when the frontmatter is silent   default 1 CPU (defaults.cpu)        TestLeakDefaultCPUQuota
//	host paths in /proc/self/mountinfo            binaries bound from copies in the   TestLeakMountinfoHostPaths
//	                                              run dir; what remains is asserted

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Defaults the sandbox applies (sandbox.DefaultFileSizeMB, DefaultNoFile).
const (
	leakFsizeBytes = 128 << 20
	leakNoFile     = 1024
)

type leakMount struct {
	Point  string `json:"point"`
	Root   string `json:"root"`
	FSType string `json:"fstype"`
	Source string `json:"source"`
}

type leakReport struct {
	ConfigGzError   string            `json:"config_gz_error"`
	ConfigGzBytes   int               `json:"config_gz_bytes"`
	Sync            string            `json:"sync"`
	Syncfs          string            `json:"syncfs"`
	Fsync           string            `json:"fsync"`
	Limits          map[string]string `json:"limits"`
	FsizeSoft       uint64            `json:"fsize_soft"`
	WriteBelowFsize string            `json:"write_below_fsize"`
	WriteAtFsize    string            `json:"write_at_fsize"`
	RaiseFsize      string            `json:"raise_fsize"`
	Mounts          []leakMount       `json:"mounts"`
}

// leaks runs the leaks probe as skill name and returns its report.
func (e *env) leaks(t *testing.T, name, frontmatter string) (leakReport, result) {
	t.Helper()
	r := e.run(e.skill(name, frontmatter, "probe:leaks"))
	r.mustOutcome(t, "success")
	var out leakReport
	if err := json.Unmarshal(r.env.Result, &out); err != nil {
		t.Fatalf("probe output %s: %v", r.env.Result, err)
	}
	return out, r
}

// TestLeakProcConfigGz: /proc/config.gz, where the kernel has it, gives
// the sandbox nothing (masked by an empty file); the host reads it whole.
func TestLeakProcConfigGz(t *testing.T) {
	e := newEnv(t)
	host, herr := os.ReadFile("/proc/config.gz")
	t.Logf("host /proc/config.gz: %d bytes (%v)", len(host), herr)
	out, _ := e.leaks(t, "configgz", "")
	if out.ConfigGzBytes != 0 {
		t.Errorf("/proc/config.gz is masked: the skill read %d bytes of it", out.ConfigGzBytes)
	}
	if out.ConfigGzError != "ok" && out.ConfigGzError != "ENOENT" {
		t.Errorf("/proc/config.gz: %s, want an empty read (masked) or ENOENT (no such file on this kernel)", out.ConfigGzError)
	}
}

// TestLeakSyncRefused: sync() and syncfs() flush filesystems the host
// shares with every other sandbox; every shipped profile refuses them with
// EPERM, while fsync of the skill's own file stays allowed.
func TestLeakSyncRefused(t *testing.T) {
	e := newEnv(t)
	files, _ := filepath.Glob(filepath.Join(repoRoot, "seccomp-profiles", "*.json"))
	if len(files) < 2 {
		t.Fatalf("profiles: %v", files)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		out, _ := e.leaks(t, "sync-"+name, "x-seccomp-profile: "+name+"\n")
		if out.Sync != "EPERM" || out.Syncfs != "EPERM" {
			t.Errorf("%s: sync → %s, syncfs → %s; want both EPERM", name, out.Sync, out.Syncfs)
		}
		if out.Fsync != "ok" {
			t.Errorf("%s: fsync of the skill's own file → %s, want it allowed", name, out.Fsync)
		}
	}
}

// TestLeakRlimitDefaults: with nothing configured, the skill and its Bash
// commands run with RLIMIT_FSIZE 128 MiB, RLIMIT_NOFILE 1024 and
// RLIMIT_CORE 0 (soft = hard, so they cannot be raised); a write past the
// file size limit gets EFBIG when SIGXFSZ is ignored, and kills a process
// that keeps SIGXFSZ's default action (a shell skill ends as panic, by
// SIGXFSZ).
func TestLeakRlimitDefaults(t *testing.T) {
	e := newEnv(t)
	out, _ := e.leaks(t, "rlimits", "")
	checkLimits(t, "skill", out.Limits, leakFsizeBytes, leakNoFile)
	if out.FsizeSoft != leakFsizeBytes || out.WriteBelowFsize != "ok" || out.WriteAtFsize != "EFBIG" || out.RaiseFsize != "EPERM" {
		t.Errorf("RLIMIT_FSIZE %d: write below → %s, at the limit → %s, raise → %s; want %d, ok, EFBIG, EPERM",
			out.FsizeSoft, out.WriteBelowFsize, out.WriteAtFsize, out.RaiseFsize, leakFsizeBytes)
	}

	// The Bash tool's processes run in the same sandbox with the same limits.
	m := calls(t, e.run(e.skill("rlimits-bash", "allowed_tools: [Bash]\n", callScript(
		[3]string{"limits", "Bash", `{"command":"cat /proc/self/limits"}`}))))
	var res struct {
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
	}
	if err := json.Unmarshal(mustOK(t, m, "limits"), &res); err != nil || res.ExitCode != 0 {
		t.Fatalf("Bash cat /proc/self/limits: %v exit %d", err, res.ExitCode)
	}
	checkLimits(t, "Bash", parseLimits(res.Stdout), leakFsizeBytes, leakNoFile)

	// dd keeps SIGXFSZ's default action: writing one byte at the limit
	// (sparse, no tmpfs space) kills it, and the skill with it.
	r := e.run(e.skill("fsize-kill", "", "#!/bin/sh\nexec dd if=/dev/zero of=/tmp/big bs=1 count=1 seek="+strconv.Itoa(leakFsizeBytes)+" 2>/dev/null\n"))
	r.mustOutcome(t, "panic")
	if !strings.Contains(r.env.ErrorMessage, "SIGXFSZ") {
		t.Errorf("a write past RLIMIT_FSIZE: error_message %q, want it to name SIGXFSZ", r.env.ErrorMessage)
	}
}

// TestLeakRlimitsFromDaemonConfig: the daemon's defaults.file_size_mb and
// defaults.nofile set the sandbox's limits.
func TestLeakRlimitsFromDaemonConfig(t *testing.T) {
	e := newEnv(t)
	e.skill("limits", "", "probe:leaks")
	d := startDaemon(t, e, "defaults:", "  file_size_mb: 16", "  nofile: 256")
	code, env, raw := d.invoke(map[string]any{"skill_id": "limits"})
	if code != 200 || env.Outcome != "success" {
		t.Fatalf("invoke: %d %s", code, raw)
	}
	var out leakReport
	if err := json.Unmarshal(env.Result, &out); err != nil {
		t.Fatal(err)
	}
	checkLimits(t, "daemon config", out.Limits, 16<<20, 256)
	if out.WriteAtFsize != "EFBIG" {
		t.Errorf("write at the configured RLIMIT_FSIZE → %s, want EFBIG", out.WriteAtFsize)
	}
}

func checkLimits(t *testing.T, who string, l map[string]string, fsize, nofile int) {
	t.Helper()
	for name, w := range map[string]string{
		"Max file size":      strconv.Itoa(fsize) + " " + strconv.Itoa(fsize),
		"Max open files":     strconv.Itoa(nofile) + " " + strconv.Itoa(nofile),
		"Max core file size": "0 0",
	} {
		if got := l[name]; got != w {
			t.Errorf("%s: /proc/self/limits %q = %q, want %q", who, name, got, w)
		}
	}
}

// parseLimits reads /proc/self/limits text into name → "soft hard".
func parseLimits(s string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		line := sc.Text()
		if len(line) < 26 || strings.HasPrefix(line, "Limit") {
			continue
		}
		if f := strings.Fields(line[25:]); len(f) >= 2 {
			out[strings.TrimSpace(line[:25])] = f[0] + " " + f[1]
		}
	}
	return out
}

// TestLeakDefaultCPUQuota: a skill whose frontmatter says nothing about
// x-cpu gets one CPU of quota in its cgroup (v2 cpu.max "100000 100000",
// v1 cpu.cfs_quota_us 100000 over cpu.cfs_period_us 100000).
func TestLeakDefaultCPUQuota(t *testing.T) {
	e := newEnv(t)
	dirs := sleeperCgroups(t, e, "silent-cpu", "", "27183")
	want := map[string]string{}
	switch kernelCgroupMode(t) {
	case "unified":
		want[filepath.Join(dirs[""], "cpu.max")] = "100000 100000"
	default:
		cpu := dirs["cpu,cpuacct"]
		if cpu == "" {
			cpu = dirs["cpu"]
		}
		want[filepath.Join(cpu, "cpu.cfs_quota_us")] = "100000"
		want[filepath.Join(cpu, "cpu.cfs_period_us")] = "100000"
	}
	for f, w := range want {
		if !strings.Contains(f, e.runDirCgroupParent()) {
			t.Errorf("%s is not under this runner's cgroup parent %s (cgroups %v)", f, e.runDirCgroupParent(), dirs)
			continue
		}
		if got := readTrim(t, f); got != w {
			t.Errorf("default CPU quota: %s = %q, want %q", f, got, w)
		}
	}
}

// TestLeakMountinfoHostPaths: the host paths a skill reads in its
// /proc/self/mountinfo (the root of each bind mount within its host
// filesystem) are exactly: the run dir's rootfs skeleton, the copies of the
// sandbox binaries in the run dir, the invocation's broker socket in the
// run dir, the skill folder, and /usr (with /bin, /lib… where they are
// directories). The directory the binaries are installed in no longer
// shows. Kernel filesystems (proc, the host's /dev nodes) show paths inside
// themselves only and are left out. Mount sources (the host's block device
// names) stay visible: the README's sandbox table says so.
func TestLeakMountinfoHostPaths(t *testing.T) {
	e := newEnv(t)
	out, r := e.leaks(t, "mounts", "")
	skillDir := filepath.Join(e.base, "skills", "mounts")
	binDir := filepath.Dir(cyberosBin)
	hm := hostMounts(t)
	// The socket is named by the sandbox's id: the invocation's for a cold
	// start, the warm sandbox's own (warm-<ULID>) for a warm one.
	sockets := filepath.Join(e.runDir, "sockets")
	sock := filepath.Join(sockets, "cyberos-skill-broker."+r.env.InvocationID+".sock")
	if itStart == "warm" {
		re := regexp.MustCompile(`^cyberos-skill-broker\.warm-[0-9A-Z]{26}\.sock$`)
		sock = ""
		for _, m := range out.Mounts {
			if m.Point == "/run/cyberos/broker.sock" && filepath.Dir(m.Root) == hm.rel(sockets) && re.MatchString(filepath.Base(m.Root)) {
				sock = filepath.Join(sockets, filepath.Base(m.Root))
			}
		}
		if sock == "" {
			t.Fatalf("no warm sandbox's broker socket mounted at /run/cyberos/broker.sock: %+v", out.Mounts)
		}
	}
	wantPaths := []string{
		filepath.Join(e.runDir, "rootfs"),
		sock,
		skillDir,
		"/usr",
	}
	for _, b := range []string{"cyberos-init", "cyberos-tool"} {
		sum, err := fileSHA256(filepath.Join(binDir, b))
		if err != nil {
			t.Fatal(err)
		}
		wantPaths = append(wantPaths, filepath.Join(e.runDir, "bin", b+"-"+sum[:16]))
	}
	for _, top := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		if fi, err := os.Lstat(top); err == nil && fi.IsDir() {
			wantPaths = append(wantPaths, top)
		}
	}
	var want []string
	for _, p := range wantPaths {
		if rel := hm.rel(p); rel != "/" && !slices.Contains(want, rel) {
			want = append(want, rel)
		}
	}
	var got []string
	for _, m := range out.Mounts {
		if m.Root == "/" || m.FSType == "proc" || m.FSType == "devtmpfs" || slices.Contains(got, m.Root) {
			continue
		}
		got = append(got, m.Root)
	}
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("host paths in the sandbox's mountinfo:\n got  %q\n want %q\nmounts: %+v", got, want, out.Mounts)
	}
	binRel := hm.rel(binDir)
	for _, g := range got {
		if binRel != "/" && (g == binRel || strings.HasPrefix(g, binRel+"/")) {
			t.Errorf("the binaries' host directory %s shows in the sandbox's mountinfo: %s", binDir, g)
		}
	}
}

func fileSHA256(p string) (string, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// hostMountTable is the host's own mount table (mount point → root within
// its filesystem), to tell where a host path shows in a mountinfo.
type hostMountTable []leakMount

func hostMounts(t *testing.T) hostMountTable {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var ms hostMountTable
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		a, b := strings.Fields(pre), strings.Fields(post)
		if ok && len(a) >= 5 && len(b) >= 2 {
			ms = append(ms, leakMount{Point: a[4], Root: a[3], FSType: b[0], Source: b[1]})
		}
	}
	return ms
}

// rel is how host path p shows as a mount's root in a mountinfo: its path
// within the filesystem of the (last mounted) mount that holds it.
func (ms hostMountTable) rel(p string) string {
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	best := -1
	for i, m := range ms {
		if (p == m.Point || m.Point == "/" || strings.HasPrefix(p, m.Point+"/")) && (best < 0 || len(m.Point) >= len(ms[best].Point)) {
			best = i
		}
	}
	if best < 0 {
		return p
	}
	m := ms[best]
	rest := strings.TrimPrefix(p, m.Point)
	if m.Point == "/" {
		rest = p
	}
	return filepath.Clean(filepath.Join(m.Root, rest))
}
