package sandbox

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"cyberos.dev/cgroups"
	"cyberos.dev/supervisor/internal/seccomp"
	"cyberos.dev/supervisor/spawn"
)

// DefaultRunDir is where the runner keeps its state unless told otherwise.
const DefaultRunDir = "/run/cyberos"

// LinuxRunner starts libcontainer sandboxes.
type LinuxRunner struct {
	cfg        Options
	userNS     bool
	userNSWhy  string
	cgroupMode cgroups.Mode
	// cgroupParent holds this runner's invocation cgroups; cgroupWhere
	// says where that is and why (CgroupPlacement).
	cgroupParent, cgroupWhere string
	skelOnce                  sync.Once
	skelErr                   error
	// landlockABI is the kernel's Landlock ABI (landlockErr when it has none).
	landlockABI int
	landlockErr error
	// cpuBurst: the kernel has CFS burst (Spec.CPUBurst).
	cpuBurst bool
	// initCopy and toolCopy are the binaries' copies in the run dir, the
	// sources of their bind mounts (copyBinaries).
	initCopy, toolCopy string
	// ownedNS: each sandbox's user namespace is made by a holder running as
	// the sandbox's own host uid (ownedNSWhy says why not).
	ownedNS    bool
	ownedNSWhy string
	// leases are the id ranges reserved for sandboxes not started yet.
	leaseMu sync.Mutex
	leases  map[string]*idLease
	// helper is the creation helper (cyberos-spawn) that makes this
	// runner's containers; started again if it died.
	helperMu sync.Mutex
	helper   *spawn.Client
	// leftovers are what NewLinuxRunner's CleanLeftovers removed.
	leftovers []string
}

var _ Runner = (*LinuxRunner)(nil)

// New returns the Linux runner.
func New(opts Options) (Runner, error) { return NewLinuxRunner(opts) }

// NewLinuxRunner checks that this binary and kernel can sandbox (seccomp
// compiled in, run dir usable) and cleans what crashed runs left behind.
func NewLinuxRunner(cfg Options) (_ *LinuxRunner, err error) {
	cfg, err = preflight(cfg)
	if err != nil {
		return nil, err
	}
	h := cgroups.System()
	parent, where, err := placeCgroups(cfg, h, true)
	if err != nil {
		return nil, err
	}
	r := &LinuxRunner{cfg: cfg, cgroupMode: h.Mode, cgroupParent: parent, cgroupWhere: where, leases: map[string]*idLease{}}
	// The creation helper starts now, in the cgroup placeCgroups chose:
	// its Go start overlaps the rest of the caller's setup (for `skill
	// run`, the audit store's open) instead of delaying the first sandbox.
	if _, err := r.spawner(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.Close()
		}
	}()
	// The container root user must be able to traverse to the rootfs, so
	// the run dir and the skeleton are 0711/0755, state and locks 0700.
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{
		{cfg.RunDir, 0o711},
		{r.stateRoot(), 0o700},
		{r.lockDir(), 0o700},
		{r.idRangeDir(), 0o700},
	} {
		if err := os.MkdirAll(d.path, d.mode); err != nil {
			return nil, fmt.Errorf("sandbox run dir: %w", err)
		}
		if err := os.Chmod(d.path, d.mode); err != nil {
			return nil, fmt.Errorf("sandbox run dir: %w", err)
		}
	}
	if err := r.copyBinaries(); err != nil {
		return nil, err
	}
	r.userNS, r.userNSWhy, r.ownedNS, r.ownedNSWhy = probeUserNS(cfg.DisableUserNS, cfg.InitBinary, cfg.HostIDBase)
	r.landlockABI, r.landlockErr = kernelLandlockABI()
	r.cpuBurst = kernelAtLeast(5, 14)
	if r.leftovers, err = r.CleanLeftovers(); err != nil {
		return nil, err
	}
	return r, nil
}

// Leftovers are the ids of the sandboxes of dead supervisors that
// NewLinuxRunner removed: their broker sockets are stale too.
func (r *LinuxRunner) Leftovers() []string { return r.leftovers }

// spawner returns the runner's creation helper, starting it the first time
// and again when the last one died (its sandboxes keep running, and the
// new helper loads them from their state to end them).
func (r *LinuxRunner) spawner() (*spawn.Client, error) {
	r.helperMu.Lock()
	defer r.helperMu.Unlock()
	if r.helper != nil && r.helper.Alive() {
		return r.helper, nil
	}
	c, err := spawn.Start(r.cfg.SpawnBinary)
	if err != nil {
		return nil, err
	}
	r.helper = c
	return c, nil
}

// Close ends the runner's creation helper. Sandboxes still running are
// left to their Close; the runner must not start any more.
func (r *LinuxRunner) Close() error {
	r.helperMu.Lock()
	defer r.helperMu.Unlock()
	if r.helper == nil {
		return nil
	}
	err := r.helper.Close()
	r.helper = nil
	return err
}

// Preflight runs the checks New makes before it touches the host: seccomp
// compiled in, cyberos-init and cyberos-tool present and executable, the id
// ranges clear of the host's users. `serve --check` runs it.
func Preflight(opts Options) error {
	_, err := preflight(opts)
	return err
}

// preflight is Preflight returning opts with its defaults filled in.
func preflight(cfg Options) (Options, error) {
	if !seccomp.CompiledIn() {
		return cfg, ErrSeccompNotCompiled
	}
	if cfg.RunDir == "" {
		cfg.RunDir = DefaultRunDir
	}
	if cfg.InitBinary == "" || cfg.ToolBinary == "" || cfg.SpawnBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return cfg, fmt.Errorf("sandbox: locate cyberos-init, cyberos-tool and cyberos-spawn: %w", err)
		}
		if cfg.InitBinary == "" {
			cfg.InitBinary = filepath.Join(filepath.Dir(exe), "cyberos-init")
		}
		if cfg.ToolBinary == "" {
			cfg.ToolBinary = filepath.Join(filepath.Dir(exe), "cyberos-tool")
		}
		if cfg.SpawnBinary == "" {
			cfg.SpawnBinary = filepath.Join(filepath.Dir(exe), "cyberos-spawn")
		}
	}
	for _, b := range []struct{ what, path string }{{"sandbox init", cfg.InitBinary}, {"sandbox tool client", cfg.ToolBinary}, {"sandbox creation helper", cfg.SpawnBinary}} {
		if fi, err := os.Stat(b.path); err != nil || !fi.Mode().IsRegular() || fi.Mode()&0o001 == 0 {
			return cfg, fmt.Errorf("sandbox: the %s %s is missing or not executable by the sandbox user (build it with `make build`)", b.what, b.path)
		}
	}
	if cfg.HostIDBase == 0 {
		cfg.HostIDBase = DefaultHostIDBase
	}
	if cfg.IDRanges == 0 {
		cfg.IDRanges = DefaultIDRanges
	}
	if err := CheckIDRanges("userns.host_id_base", "userns.ranges", cfg.HostIDBase, cfg.IDRanges, HostIDFiles); err != nil {
		return cfg, err
	}
	return cfg, nil
}

func (r *LinuxRunner) stateRoot() string  { return filepath.Join(r.cfg.RunDir, "containers") }
func (r *LinuxRunner) lockDir() string    { return filepath.Join(r.cfg.RunDir, "locks") }
func (r *LinuxRunner) rootfs() string     { return filepath.Join(r.cfg.RunDir, "rootfs") }
func (r *LinuxRunner) boundRoots() string { return filepath.Join(r.cfg.RunDir, "rootfs-bound") }

func (r *LinuxRunner) lockPath(id string) string { return filepath.Join(r.lockDir(), id+".lock") }

// probeUserNS says whether sandboxes get a user namespace (userNS, else
// why not) and whether it can be owned by the sandbox's own host uid
// (owned, else ownedWhy; see probeOwnedNS). Where the owned one works that
// one probe answers both: a user namespace an unprivileged uid may make,
// root may make too.
func probeUserNS(disabled bool, initBinary string, uid uint32) (userNS bool, why string, owned bool, ownedWhy string) {
	if disabled {
		return false, "disabled by configuration", false, ""
	}
	if owned, ownedWhy = probeOwnedNS(initBinary, uid); owned {
		return true, "", true, ""
	}
	if userNS, why = userNSAvailable(false); !userNS {
		return false, why, false, ""
	}
	return true, "", false, ownedWhy
}

// userNSAvailable probes once whether this kernel lets us create a user
// namespace (some hosts disable them with user.max_user_namespaces=0).
func userNSAvailable(disabled bool) (bool, string) {
	if disabled {
		return false, "disabled by configuration"
	}
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}
	if err := cmd.Run(); err != nil {
		return false, fmt.Sprintf("kernel refused a user namespace: %v", err)
	}
	return true, ""
}

// UserNamespace reports whether sandboxes get a user namespace, and if not why.
func (r *LinuxRunner) UserNamespace() (bool, string) { return r.userNS, r.userNSWhy }

// nobodyUID is the host uid (and gid) a skill runs as without a user
// namespace: it owns nothing on the host.
const nobodyUID = 65534

// skillUID is the uid (and gid) the skill's processes get: SkillUID inside
// its own user namespace, else nobodyUID on the host.
func (r *LinuxRunner) skillUID() int {
	if r.userNS {
		return SkillUID
	}
	return nobodyUID
}

// Owns reads the pid's cgroup membership: every process of the sandbox,
// exec'd ones included, is in the cgroup whose path ends in the id.
func (r *LinuxRunner) Owns(id string, pid int32) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return false
	}
	leaf := r.cgroupParent + "/" + id
	for _, line := range strings.Split(string(b), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && (parts[2] == leaf || strings.HasPrefix(parts[2], leaf+"/")) {
			return true
		}
	}
	return false
}

// Reexec does nothing on Linux: libcontainer re-executes the creation
// helper (cyberos-spawn) as each container's init, never this binary.
func Reexec() {}
