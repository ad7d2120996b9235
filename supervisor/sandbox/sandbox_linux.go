package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	occgroups "github.com/opencontainers/cgroups"
	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/specconv"
	"golang.org/x/sys/unix"

	"cyberos.dev/cgroups"
	"cyberos.dev/supervisor/internal/seccomp"
	"cyberos.dev/supervisor/spawn"
)

// DefaultCgroupParent is the cgroup under which every invocation of the
// default run dir gets its own leaf, named by the invocation id. A runner
// with another run dir uses "/cyberos-<hash of the run dir>", so that
// leftover cleanup (which trusts the run dir's locks) never touches the
// sandboxes of another runner.
const DefaultCgroupParent = "/cyberos"

// extraMaskedPaths are masked besides runc's defaults: /proc/config.gz is
// the host kernel's whole build configuration (which hardening options and
// drivers it has), of no use to a skill.
var extraMaskedPaths = []string{"/proc/config.gz"}

// DefaultRunDir is where the runner keeps its state unless told otherwise.
const DefaultRunDir = "/run/cyberos"

// CgroupParentFor is the cgroup parent a runner with runDir uses.
func CgroupParentFor(runDir string) string {
	if filepath.Clean(runDir) == DefaultRunDir {
		return DefaultCgroupParent
	}
	sum := sha256.Sum256([]byte(filepath.Clean(runDir)))
	return DefaultCgroupParent + "-" + hex.EncodeToString(sum[:6])
}

// placeCgroups resolves cfg.CgroupPlacement into the parent of the
// sandboxes' cgroups, and a sentence saying where that is and why. With
// enter, PlacementService (chosen or automatic) on cgroup v2 moves this
// process into its own cgroup's DaemonLeaf first.
func placeCgroups(cfg Options, h cgroups.Hierarchy, enter bool) (parent, where string, err error) {
	root := CgroupParentFor(cfg.RunDir)
	atRoot := func(why string) (string, string, error) {
		return root, fmt.Sprintf("at the hierarchy root, %s/<id>: %s", root, why), nil
	}
	switch cfg.CgroupPlacement {
	case "", PlacementRoot:
		return atRoot("cgroup_placement is root")
	case PlacementAuto, PlacementService:
	default:
		return "", "", fmt.Errorf("sandbox: cgroup placement %q: want auto, service or root", cfg.CgroupPlacement)
	}
	auto := cfg.CgroupPlacement == PlacementAuto
	self, err := os.ReadFile("/proc/self/cgroup")
	var own string
	if err == nil {
		own, err = h.Own(self)
	}
	switch {
	case err != nil && auto:
		return atRoot(err.Error())
	case err != nil:
		return "", "", fmt.Errorf("sandbox: cgroup_placement service: %w", err)
	}
	// A runner made earlier in this process has moved it into the leaf.
	if h.Mode == cgroups.Unified && path.Base(own) == DaemonLeaf {
		own = path.Dir(own)
	}
	switch {
	case own == "/" && auto:
		return atRoot("this process is in the root cgroup")
	case own == "/":
		return "", "", errors.New("sandbox: cgroup_placement service: this process is in the root cgroup, which is not delegated to it")
	case auto && !h.Delegated(own):
		return atRoot(fmt.Sprintf("this process's cgroup %s is not delegated to it (systemd marks a Delegate=yes unit's cgroup, from version 251; set cgroup_placement: service for another manager that delegates)", own))
	}
	if enter {
		if err := h.EnterLeaf(own, DaemonLeaf, os.Getpid()); err != nil {
			return "", "", fmt.Errorf("sandbox: cgroup placement under %s: %w", own, err)
		}
	}
	parent = path.Join(own, path.Base(root))
	where = fmt.Sprintf("under this process's own cgroup, %s/<id>", parent)
	if h.Mode == cgroups.Unified {
		where += fmt.Sprintf(" (the process itself in %s/%s)", own, DaemonLeaf)
	}
	if auto {
		where += ": systemd delegated " + own + " to it"
	}
	return parent, where, nil
}

// CgroupPlacement says where a runner with opts puts its sandboxes'
// cgroups, and why, without moving this process (doctor).
func CgroupPlacement(opts Options) (string, error) {
	if opts.RunDir == "" {
		opts.RunDir = DefaultRunDir
	}
	_, where, err := placeCgroups(opts, cgroups.System(), false)
	return where, err
}

// CgroupWhere says where this runner puts its sandboxes' cgroups.
func (r *LinuxRunner) CgroupWhere() string { return r.cgroupWhere }

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

// rootfsFor is the root of spec's sandbox: the shared skeleton, or for a
// spec with Binds a copy of it of its own, holding the mount points
// (boundRootfs).
func (r *LinuxRunner) rootfsFor(spec Spec) string {
	if len(spec.Binds) == 0 {
		return r.rootfs()
	}
	return filepath.Join(r.boundRoots(), spec.ID)
}

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

// CleanLeftovers destroys containers and cgroups whose supervisor is gone:
// a container's lock file is held (flock) by the process running it, so a
// lock we can take belongs to a crashed run. It returns the ids cleaned.
func (r *LinuxRunner) CleanLeftovers() ([]string, error) {
	entries, err := os.ReadDir(r.stateRoot())
	if err != nil {
		return nil, fmt.Errorf("sandbox leftovers: %w", err)
	}
	var cleaned []string
	for _, e := range entries {
		id := e.Name()
		lock, ok := tryLock(r.lockPath(id))
		if !ok {
			continue // a live supervisor owns it
		}
		helper, err := r.spawner()
		if err != nil {
			lock.Close()
			return cleaned, fmt.Errorf("sandbox leftovers: %w", err)
		}
		c := helper.Container(r.stateRoot(), id)
		if err := c.Signal(unix.SIGKILL); !errors.Is(err, spawn.ErrHelperGone) {
			if err := c.Destroy(); err != nil {
				_ = cgroups.KillAll(r.cgroupParent + "/" + id)
				_ = c.Destroy()
			}
		}
		_ = os.RemoveAll(filepath.Join(r.stateRoot(), id))
		_ = os.RemoveAll(filepath.Join(r.boundRoots(), id))
		_ = os.Remove(r.lockPath(id))
		lock.Close()
		cleaned = append(cleaned, id)
	}
	// A root copy whose container state is already gone (its supervisor
	// died between the two removals).
	if ents, err := os.ReadDir(r.boundRoots()); err == nil {
		for _, e := range ents {
			if _, err := os.Stat(filepath.Join(r.stateRoot(), e.Name())); !errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if lock, ok := tryLock(r.lockPath(e.Name())); ok {
				_ = os.RemoveAll(filepath.Join(r.boundRoots(), e.Name()))
				_ = os.Remove(r.lockPath(e.Name()))
				lock.Close()
			}
		}
	}
	ids, err := cgroups.RemoveLeftovers(r.cgroupParent, func(id string) bool {
		lock, ok := tryLock(r.lockPath(id))
		if ok {
			lock.Close()
			_ = os.Remove(r.lockPath(id))
		}
		return !ok
	})
	cleaned = append(cleaned, ids...)
	if err != nil {
		return cleaned, fmt.Errorf("sandbox leftovers: %w", err)
	}
	return cleaned, nil
}

func (r *LinuxRunner) lockPath(id string) string { return filepath.Join(r.lockDir(), id+".lock") }

// tryLock opens and exclusively flocks path without blocking.
func tryLock(path string) (*os.File, bool) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, false
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil || !stillAt(f, path) {
		f.Close()
		return nil, false
	}
	return f, true
}

// stillAt reports whether f is the file at path. A sandbox's lock file is
// unlinked when it ends; a lock taken on the unlinked file (opened just
// before) guards nothing, and the sandbox made again under that id (a warm
// one whose init died) holds a new file at path: a cleaner must not take
// that one for a leftover's.
func stillAt(f *os.File, path string) bool {
	var have, at unix.Stat_t
	return unix.Fstat(int(f.Fd()), &have) == nil && unix.Lstat(path, &at) == nil && have.Dev == at.Dev && have.Ino == at.Ino
}

// prepareRootfs builds, once per run dir, the empty skeleton every sandbox
// uses as its root: symlinks for the merged-/usr layout, a tiny /etc and
// mount points. It is shared read-only; each container mounts over it in
// its own mount namespace, so nothing per-invocation is written here.
func (r *LinuxRunner) prepareRootfs() error {
	r.skelOnce.Do(func() {
		want := skeletonStamp()
		current := func() bool {
			have, err := os.ReadFile(filepath.Join(r.rootfs(), skeletonStampFile))
			return err == nil && string(have) == want
		}
		if current() {
			return // built by an earlier run, still current
		}
		// Many supervisors may start at once on a fresh run dir: one builds,
		// the others wait for it and find it current.
		lock, err := os.OpenFile(filepath.Join(r.cfg.RunDir, "skeleton.lock"), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			r.skelErr = err
			return
		}
		defer lock.Close()
		if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
			r.skelErr = err
			return
		}
		if current() {
			return
		}
		r.skelErr = buildSkeleton(r.rootfs(), want)
	})
	return r.skelErr
}

// skeletonStampFile records what a skeleton was built from; a skeleton whose
// stamp differs (new layout version, host ld.so.cache changed) is rebuilt.
const skeletonStampFile = ".cyberos-skeleton"

func skeletonStamp() string {
	stamp := "v2" // v2: modes set whatever the umask
	if fi, err := os.Stat("/etc/ld.so.cache"); err == nil {
		stamp += fmt.Sprintf(" ld.so.cache %d %d", fi.Size(), fi.ModTime().UnixNano())
	}
	return stamp
}

func buildSkeleton(dir, stamp string) error {
	tmp := dir + ".tmp." + fmt.Sprint(os.Getpid())
	_ = os.RemoveAll(tmp)
	if err := os.MkdirAll(filepath.Join(tmp, "etc"), 0o755); err != nil {
		return err
	}
	for _, d := range []string{"usr", "skill", "tmp", "proc", "dev", "run/cyberos/bin"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			return err
		}
	}
	for _, top := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		host := "/" + top
		fi, err := os.Lstat(host)
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(host)
			if err != nil {
				return err
			}
			if err := os.Symlink(target, filepath.Join(tmp, top)); err != nil {
				return err
			}
		} else if fi.IsDir() {
			if err := os.MkdirAll(filepath.Join(tmp, top), 0o755); err != nil {
				return err
			}
		}
	}
	files := map[string]string{
		"etc/passwd":        fmt.Sprintf("root:x:0:0:root:/root:/bin/sh\nskill:x:%d:%d:skill:/tmp:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", SkillUID, SkillUID),
		"etc/group":         fmt.Sprintf("root:x:0:\nskill:x:%d:\nnogroup:x:65534:\n", SkillUID),
		"etc/hostname":      Hostname + "\n",
		"etc/hosts":         "127.0.0.1\tlocalhost " + Hostname + "\n::1\tlocalhost\n",
		"etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
		"etc/resolv.conf":   "",
		skeletonStampFile:   stamp,
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(tmp, name), []byte(body), 0o644); err != nil {
			return err
		}
	}
	if cache, err := os.ReadFile("/etc/ld.so.cache"); err == nil {
		if err := os.WriteFile(filepath.Join(tmp, "etc/ld.so.cache"), cache, 0o644); err != nil {
			return err
		}
	}
	for _, f := range []string{"run/cyberos/broker.sock", "run/cyberos/bin/cyberos-tool", "run/cyberos/bin/cyberos-init"} {
		if err := os.WriteFile(filepath.Join(tmp, f), nil, 0o644); err != nil {
			return err
		}
	}
	// The modes the sandbox's root (a host uid of its own) needs, whatever
	// the umask the supervisor runs with (the unit's is 0077).
	err := filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			return os.Chmod(p, 0o755)
		case d.Type().IsRegular():
			return os.Chmod(p, 0o644)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// Replace any older skeleton atomically enough: a running container has
	// its rootfs mounted in its own namespace, so removing the old one from
	// under it does not disturb it.
	old := dir + ".old." + fmt.Sprint(os.Getpid())
	if err := os.Rename(dir, old); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	return os.RemoveAll(old)
}

// boundRootfs makes the root of a sandbox with binds (an MCP server's): a
// copy of the shared skeleton with the binds' mount points, made as root
// on the host since the container's own root (a mapped uid) may not write
// it. The points are empty directories (or files) named as the bound
// paths; in the shared skeleton they would show every later sandbox which
// host paths some server was given. cleanup removes the copy.
func (r *LinuxRunner) boundRootfs(spec Spec) error {
	root := r.rootfsFor(spec)
	for _, b := range spec.Binds {
		if !filepath.IsAbs(b.Path) || filepath.Clean(b.Path) != b.Path || b.Path == "/" {
			return fmt.Errorf("bind %q: must be an absolute, clean path other than /", b.Path)
		}
	}
	// The sandbox's root (a host uid of its own) must traverse it.
	if err := os.MkdirAll(r.boundRoots(), 0o711); err != nil {
		return err
	}
	if err := os.Chmod(r.boundRoots(), 0o711); err != nil {
		return err
	}
	if err := os.RemoveAll(root); err != nil {
		return err
	}
	if err := copySkeleton(r.rootfs(), root); err != nil {
		return fmt.Errorf("copy of the skeleton: %w", err)
	}
	for _, b := range spec.Binds {
		fi, err := os.Stat(b.Path)
		if err != nil {
			return fmt.Errorf("bind: %w", err)
		}
		point := filepath.Join(root, b.Path)
		if fi.IsDir() {
			err = os.MkdirAll(point, 0o755)
		} else if err = os.MkdirAll(filepath.Dir(point), 0o755); err == nil {
			var f *os.File
			if f, err = os.OpenFile(point, os.O_CREATE|os.O_RDONLY, 0o644); err == nil {
				f.Close()
			}
		}
		if err != nil {
			return fmt.Errorf("bind %s: mount point: %w", b.Path, err)
		}
		// MkdirAll honours the umask; the mapped root must traverse.
		for d := filepath.Dir(point); len(d) > len(root); d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				return err
			}
		}
		if fi.IsDir() {
			if err := os.Chmod(point, 0o755); err != nil {
				return err
			}
		}
	}
	return nil
}

// copySkeleton copies the skeleton src (directories, symlinks and small
// regular files, as buildSkeleton makes them) to dst with its modes.
func copySkeleton(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			if err := os.Mkdir(to, 0o755); err != nil {
				return err
			}
			return os.Chmod(to, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := os.WriteFile(to, b, 0o644); err != nil {
				return err
			}
			return os.Chmod(to, 0o644)
		}
		return fmt.Errorf("%s: unexpected file type %v", p, d.Type())
	})
}

// Check loads the seccomp profile the spec names and says what Start will
// enforce.
func (r *LinuxRunner) Check(spec Spec) (Containment, error) {
	sc, profileHash, err := seccomp.LoadProfileShared(spec.ProfilesDir, spec.SeccompProfile)
	if err != nil {
		return Containment{}, err
	}
	if spec.Recorder == nil {
		if _, err := seccomp.ProgramFor(profileHash, sc); err != nil && !errors.Is(err, seccomp.ErrUnsupportedProgram) {
			return Containment{}, fmt.Errorf("%w: %s: %w", ErrProfile, spec.SeccompProfile, err)
		}
	}
	_, cont := r.config(spec, nil)
	r.leaseMu.Lock()
	if l, ok := r.leases[spec.ID]; ok {
		l.identity(r.nsOwner(l)).Describe(&cont)
	}
	r.leaseMu.Unlock()
	cont.Seccomp = seccompSummary(spec.SeccompProfile)
	cont.SeccompProfileHash = profileHash
	planLandlock(r.landlockABI, r.landlockErr, sc, spec.SeccompProfile).apply(&cont)
	if spec.Recorder != nil {
		cont.Seccomp += recordingNote
	}
	return cont, nil
}

// recordingNote marks the containment of a recording run.
const recordingNote = "; RECORDING: allowed calls are reported, then let through"

func seccompSummary(profile string) string {
	return fmt.Sprintf("%s (allowlist, native architecture only)", profile)
}

// Start creates the container for spec and starts the skill in it: the
// same two steps as a warm sandbox (prewarm, then activate), back to back,
// so both kinds of start run one code path.
func (r *LinuxRunner) Start(spec Spec) (Process, error) {
	start := time.Now()
	p, err := r.prewarm(spec, start)
	if err != nil {
		return nil, err
	}
	env := spec.Env
	if spec.Network != nil {
		more, err := p.network(spec.Network)
		if err != nil {
			return nil, p.abort(fmt.Errorf("sandbox network: %w", err))
		}
		env = append(slices.Clip(env), more...)
	}
	if err := p.activate(Activation{Env: env, Stdin: spec.Stdin, Stdout: spec.Stdout, Stderr: spec.Stderr, Deadline: spec.Deadline}, start); err != nil {
		return nil, p.abort(err)
	}
	return p, nil
}

// network calls hook with the network namespace of p's init, which waits
// for its activation: nothing of the sandbox's entrypoint runs yet.
func (p *linuxProcess) network(hook func(*os.File) ([]string, error)) ([]string, error) {
	ns, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", p.proc.Pid()))
	if err != nil {
		return nil, err
	}
	defer ns.Close()
	if !p.Alive() {
		return nil, errInitGone // the pid may name another process now
	}
	return hook(ns)
}

// Prewarm makes the sandbox for spec without its invocation: Env, stdio and
// Deadline are ignored (Activate brings them), Recorder must be nil.
func (r *LinuxRunner) Prewarm(spec Spec) (Warm, error) {
	if spec.Recorder != nil {
		return nil, errors.New("sandbox: a recording run is never prewarmed")
	}
	if spec.Network != nil {
		return nil, errors.New("sandbox: a sandbox with a Network hook is never prewarmed")
	}
	spec.Env, spec.Stdin, spec.Stdout, spec.Stderr, spec.Deadline = nil, nil, nil, nil, 0
	return r.prewarm(spec, time.Now())
}

// prewarm creates the container and starts its init, which waits on its
// control pipe for the invocation (activate).
func (r *LinuxRunner) prewarm(spec Spec, start time.Time) (*linuxProcess, error) {
	if err := r.prepareRootfs(); err != nil {
		return nil, fmt.Errorf("sandbox rootfs: %w", err)
	}
	sc, profileHash, err := seccomp.LoadProfileHashed(spec.ProfilesDir, spec.SeccompProfile)
	if err != nil {
		return nil, err
	}
	if spec.SeccompProfileHash != "" && profileHash != spec.SeccompProfileHash {
		return nil, fmt.Errorf("%w: %s changed since the invocation was checked (sha256 %s, now %s)", ErrProfile, spec.SeccompProfile, spec.SeccompProfileHash, profileHash)
	}
	lock, ok := tryLock(r.lockPath(spec.ID))
	if !ok {
		return nil, fmt.Errorf("sandbox %s: already running", spec.ID)
	}
	p := &linuxProcess{runner: r, id: spec.ID, lock: lock, started: start, spec: spec}
	if len(spec.Binds) > 0 {
		if err := r.boundRootfs(spec); err != nil {
			return nil, p.abort(fmt.Errorf("sandbox rootfs: %w", err))
		}
	}
	var holder *nsHolder
	defer func() { holder.stop() }()
	if r.userNS {
		if p.lease, err = r.takeLease(spec.ID); err != nil {
			return nil, p.abort(err)
		}
		if r.ownedNS {
			if holder, err = startNSHolder(r.cfg.InitBinary, p.lease.start); err != nil {
				return nil, p.abort(fmt.Errorf("sandbox start: %w", err))
			}
		}
	}
	cfg, cont := r.config(spec, p.lease)
	if holder != nil {
		for i := range cfg.Namespaces {
			if cfg.Namespaces[i].Type == configs.NEWUSER {
				cfg.Namespaces[i].Path = holder.path()
			}
		}
	}
	if holder != nil {
		p.initRlimits = moveRlimitsToInit(cfg)
	}
	if spec.Recorder == nil {
		// cyberos-init loads the compiled profile before anything else
		// (withSeccomp): the container's Go init has no filter to build.
		// What Compile does not handle, libcontainer's init loads as before.
		p.filter, err = seccomp.ProgramFor(profileHash, sc)
		switch {
		case errors.Is(err, seccomp.ErrUnsupportedProgram):
			cfg.Seccomp = sc
		case err != nil:
			return nil, p.abort(fmt.Errorf("%w: %s: %w", ErrProfile, spec.SeccompProfile, err))
		}
	}
	cont.Seccomp = seccompSummary(spec.SeccompProfile)
	cont.SeccompProfileHash = profileHash
	ll := planLandlock(r.landlockABI, r.landlockErr, sc, spec.SeccompProfile)
	ll.Binds = spec.Binds
	ll.apply(&cont)
	p.cont, p.landlock = cont, ll
	if spec.Recorder != nil {
		if p.notify, err = startNotifyListener(filepath.Join(r.lockDir(), spec.ID+".notify.sock"), spec.Recorder); err != nil {
			return nil, p.abort(err)
		}
		cfg.Seccomp = seccomp.RecordingConfig(sc, p.notify.path)
		p.cont.Seccomp += recordingNote
	}
	helper, err := r.spawner()
	if err != nil {
		return nil, p.abort(fmt.Errorf("sandbox create: %w", err))
	}
	// cyberos-init reports the skill's wait status on fd 3 (its ExtraFiles[0]).
	statusR, statusW, err := os.Pipe()
	if err != nil {
		return nil, p.abort(fmt.Errorf("sandbox status pipe: %w", err))
	}
	p.status = statusR
	defer statusW.Close()
	// The invocation comes later on fd 4 (cyberos-init --control); stdio
	// are pipes of ours, connected to the invocation's readers and writers
	// by activate.
	child, err := p.openPipes()
	if err != nil {
		return nil, p.abort(fmt.Errorf("sandbox pipes: %w", err))
	}
	defer child.close()
	filter, err := p.filterFile()
	if err != nil {
		return nil, p.abort(err)
	}
	defer filter.Close()
	extra := []*os.File{statusW, child.control} // fds 3 and 4 (cyberos-init's CONTROL_FD)
	if filter != nil {
		extra = append(extra, filter) // initFilterFD
	}
	uid := r.skillUID()
	init := &spawn.Proc{
		Args:       append(withControl(withSeccomp(withInitRlimits(ll.initArgs(false), p.initRlimits), initFilterFD, p.filter)), filepath.Join(SkillMount, spec.Entrypoint)),
		ExtraFiles: extra,
		Env:        []string{"PATH=/usr/bin:/bin"},
		UID:        uid,
		GID:        uid,
		Cwd:        "/tmp",
		Stdin:      child.stdin,
		Stdout:     child.stdout,
		Stderr:     child.stderr,
		Hold:       holdInit,
	}
	c, proc, err := helper.Create(r.stateRoot(), spec.ID, cfg, init)
	p.created = c != nil
	// A helper that died (or was killed, wedged) during the create may
	// have made the cgroup and started the init: cleanup ends them there.
	p.orphaned = !p.created && errors.Is(err, spawn.ErrHelperGone)
	if err != nil {
		return nil, p.abort(err)
	}
	// Before the skill makes a socket: on cgroup v1 its TCP buffers count
	// against its memory limit only from here on
	// (TestHostileTCPBuffers).
	switch err := cgroups.LimitSocketMemory(p.cgroupPath(), spec.MemoryMB<<20); {
	case errors.Is(err, cgroups.ErrNoSocketLimit):
		p.cont.NotEnforced = append(p.cont.NotEnforced, "TCP buffers within memory.max: "+err.Error())
	case err != nil:
		return nil, p.abort(fmt.Errorf("sandbox start: %w", err))
	}
	// The sandbox's processes keep its user namespace alive now.
	holder.stop()
	holder = nil
	p.proc = proc
	return p, nil
}

// initFilterFD is where cyberos-init finds its seccomp program (its
// ExtraFiles[2]); an Exec'd process finds it at execFilterFD.
const (
	initFilterFD = 5
	execFilterFD = 3
)

// withSeccomp makes cyberos-init load prog from fd first thing; args are
// unchanged without one (libcontainer loads the filter then).
func withSeccomp(args []string, fd int, prog *seccomp.Program) []string {
	if prog == nil {
		return args
	}
	return append([]string{args[0], "--seccomp", fmt.Sprintf("%d:%d", fd, prog.Flags)}, args[1:]...)
}

// filterFile is p's seccomp program in a sealed memfd for one process of
// the sandbox, or nil when cyberos-init loads none.
func (p *linuxProcess) filterFile() (*os.File, error) {
	if p.filter == nil {
		return nil, nil
	}
	return p.filter.File()
}

// childEnds are the sandbox init's ends of its stdio and control pipes,
// closed in the supervisor once the init has them.
type childEnds struct{ stdin, stdout, stderr, control *os.File }

func (c childEnds) close() {
	for _, f := range []*os.File{c.stdin, c.stdout, c.stderr, c.control} {
		if f != nil {
			f.Close()
		}
	}
}

// openPipes makes the stdio and control pipes; p keeps its own ends.
func (p *linuxProcess) openPipes() (childEnds, error) {
	var c childEnds
	var err error
	pipe := func(r, w **os.File) {
		if err == nil {
			*r, *w, err = os.Pipe()
		}
	}
	pipe(&c.stdin, &p.stdin)
	pipe(&p.stdout, &c.stdout)
	pipe(&p.stderr, &c.stderr)
	pipe(&c.control, &p.control)
	if err != nil {
		c.close()
	}
	return c, err
}

// maxControl is cyberos-init's bound on the control message (MAX_CONTROL).
const maxControl = 64 << 10

// controlMessage is cyberos-init's --control message: NUL-terminated
// fields, the deadline backstop in ms, then the environment, and an empty
// field that ends it (the pipe stays open after it: the lifeline).
func controlMessage(a Activation) ([]byte, error) {
	var ms int64
	if a.Deadline > 0 {
		ms = (a.Deadline + DeadlineBackstop).Milliseconds()
	}
	b := append(strconv.AppendInt(nil, ms, 10), 0)
	for _, kv := range a.Env {
		if strings.IndexByte(kv, 0) >= 0 || !strings.Contains(kv, "=") {
			return nil, fmt.Errorf("sandbox: environment entry %q is not NAME=value", kv)
		}
		b = append(append(b, kv...), 0)
	}
	b = append(b, 0)
	if len(b) > maxControl {
		return nil, fmt.Errorf("sandbox: the invocation's environment is %d bytes, more than %d", len(b), maxControl)
	}
	return b, nil
}

// Alive reports whether the sandbox's init is still waiting for its
// invocation: a warm sandbox whose init died is never activated. The init
// holds the control pipe's only read end until it reads its invocation, so
// once it died the pipe has no reader, which poll reports as POLLERR on our
// write end: no call to the helper, on the warm path of every invocation.
func (p *linuxProcess) Alive() bool {
	if p.control == nil || !p.created {
		return false
	}
	rc, err := p.control.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	err = rc.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}
		n, err := unix.Poll(fds, 0)
		alive = err == nil && n == 1 && fds[0].Revents&(unix.POLLERR|unix.POLLHUP|unix.POLLNVAL) == 0
	})
	return err == nil && alive
}

// ID is the sandbox's container id (the leaf of its cgroup path).
func (p *linuxProcess) ID() string { return p.id }

// Activate hands the invocation to the waiting init, which starts the
// skill. A sandbox is activated at most once. If its init died while it
// waited (killed, OOM), nothing of the invocation has run: the sandbox is
// made again, cold, under the same id and in the same id range (the
// identity its invocation recorded), and the returned Process is that one,
// with Containment().Start StartCold.
func (p *linuxProcess) Activate(a Activation) (Process, error) {
	t0 := time.Now()
	err := p.activate(a, t0)
	if errors.Is(err, errInitGone) {
		q, rerr := p.remake()
		if rerr != nil {
			return nil, fmt.Errorf("sandbox: its init died before activation, and making it again failed: %w", rerr)
		}
		q.cont.Start = StartCold
		p, err = q, q.activate(a, t0)
	}
	if err != nil {
		return nil, err
	}
	return p, nil
}

// remake destroys p, whose init is dead, and makes the sandbox again from
// its spec in the same range. p's Close is then a no-op.
func (p *linuxProcess) remake() (*linuxProcess, error) {
	r, lease := p.runner, p.lease
	p.lease = nil
	var err error
	p.once.Do(func() { err = p.cleanup() })
	p.control = nil // closed by cleanup: p is never activated now
	if err != nil {
		p.lease = lease // not destroyed: the range stays held
		return nil, err
	}
	r.leaseMu.Lock()
	r.leases[p.id] = lease // a reservation, which prewarm takes over
	r.leaseMu.Unlock()
	q, err := r.prewarm(p.spec, time.Now())
	if err != nil {
		r.Release(p.id)
		return nil, err
	}
	return q, nil
}

// activate sends the control message and connects stdio; since is when
// the start began, for StartLatency.
func (p *linuxProcess) activate(a Activation, since time.Time) error {
	msg, err := controlMessage(a)
	if err != nil {
		return err
	}
	if p.control == nil {
		return errors.New("sandbox: already activated")
	}
	if !p.Alive() {
		return errInitGone
	}
	ctl := p.control
	p.control = nil
	if _, err = ctl.Write(msg); err != nil {
		ctl.Close()
		return fmt.Errorf("sandbox: hand the invocation to its init: %w", err)
	}
	p.lifeline = ctl
	p.copies = make(chan struct{}, 2)
	copyOut := func(dst io.Writer, src *os.File) {
		if dst == nil {
			dst = io.Discard
		}
		_, _ = io.Copy(dst, src)
		p.copies <- struct{}{}
	}
	go copyOut(a.Stdout, p.stdout)
	go copyOut(a.Stderr, p.stderr)
	in := p.stdin
	p.stdin = nil
	go func() {
		if a.Stdin != nil {
			_, _ = io.Copy(in, a.Stdin) // EPIPE once the sandbox is gone
		}
		in.Close()
	}()
	p.latency = time.Since(since)
	return nil
}

// errInitGone: a sandbox's init died before its activation; nothing of the
// invocation was sent to it.
var errInitGone = errors.New("sandbox: its init is gone; it cannot be activated")

// holdInit makes prewarm leave the init before its exec (spawn's
// procSpec.Hold); a test sets it.
var holdInit bool

// config maps a Spec onto a libcontainer config. Every security control is
// set here, in one place: namespaces, id maps, mounts, masked paths, no
// capabilities, no_new_privs, cgroup limits, rlimits. lease is the
// sandbox's id range (nil in Check, before one is taken).
func (r *LinuxRunner) config(spec Spec, lease *idLease) (*configs.Config, Containment) {
	memBytes := spec.MemoryMB << 20
	pids := spec.PidsMax
	tmpMB := spec.TmpSizeMB
	if tmpMB <= 0 {
		tmpMB = 64
	}
	fsize, nofile := uint64(DefaultFileSizeMB)<<20, uint64(DefaultNoFile)
	if spec.FileSizeMB > 0 {
		fsize = uint64(spec.FileSizeMB) << 20
	}
	if spec.NoFile > 0 {
		nofile = uint64(spec.NoFile)
	}
	ns := configs.Namespaces{
		{Type: configs.NEWNS}, {Type: configs.NEWUTS}, {Type: configs.NEWIPC},
		{Type: configs.NEWPID}, {Type: configs.NEWNET}, {Type: configs.NEWCGROUP},
	}
	cont := Containment{
		Platform:       "linux",
		Namespaces:     []string{"mount", "uts", "ipc", "pid", "net (loopback only)", "cgroup"},
		CgroupMode:     r.cgroupMode.String(),
		MemoryMaxBytes: memBytes,
		PidsMax:        pids,
		CPUQuota:       spec.CPU,
		Capabilities:   "none (all sets empty, bounding included)",
		NoNewPrivs:     true,
		ReadOnlyRoot:   true,
		Rlimits:        []string{fmt.Sprintf("fsize=%d", fsize), fmt.Sprintf("nofile=%d", nofile), "core=0"},
	}
	const bindRO = unix.MS_BIND | unix.MS_REC | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV
	mounts := []*configs.Mount{
		{Source: "proc", Destination: "/proc", Device: "proc", Flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC},
		{Source: "tmpfs", Destination: "/dev", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_STRICTATIME, Data: "mode=755,size=64k"},
		{Source: "shm", Destination: "/dev/shm", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC, Data: "mode=1777,size=16m"},
		{Source: "tmpfs", Destination: "/tmp", Device: "tmpfs", Flags: unix.MS_NOSUID | unix.MS_NODEV, Data: fmt.Sprintf("mode=1777,size=%dm", tmpMB)},
		{Source: "/usr", Destination: "/usr", Device: "bind", Flags: bindRO},
		{Source: spec.SkillDir, Destination: SkillMount, Device: "bind", Flags: bindRO},
		{Source: r.initCopy, Destination: InitBinPath, Device: "bind", Flags: bindRO},
	}
	for _, top := range []string{"bin", "sbin", "lib", "lib32", "lib64", "libx32"} {
		if fi, err := os.Lstat("/" + top); err == nil && fi.IsDir() {
			mounts = append(mounts, &configs.Mount{Source: "/" + top, Destination: "/" + top, Device: "bind", Flags: bindRO})
		}
	}
	if spec.BrokerSocket != "" {
		// Read-only: connecting still works, but the skill (which owns the
		// socket inode) cannot chmod or chown it (TestHostileSupervisorState).
		mounts = append(mounts, &configs.Mount{Source: spec.BrokerSocket, Destination: BrokerSockPath, Device: "bind", Flags: unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC})
	}
	mounts = append(mounts, &configs.Mount{Source: r.toolCopy, Destination: ToolBinPath, Device: "bind", Flags: bindRO})
	for _, b := range spec.Binds {
		flags := bindRO
		if b.Writable {
			flags = unix.MS_BIND | unix.MS_REC | unix.MS_NOSUID | unix.MS_NODEV
		}
		mounts = append(mounts, &configs.Mount{Source: b.Path, Destination: b.Path, Device: "bind", Flags: flags})
	}
	example := specconv.Example().Linux
	oomAdj := 1000
	cfg := &configs.Config{
		Rootfs:          r.rootfsFor(spec),
		Readonlyfs:      true,
		Hostname:        Hostname,
		Namespaces:      ns,
		Mounts:          mounts,
		Devices:         specconv.AllowedDevices,
		MaskPaths:       append(slices.Clip(example.MaskedPaths), extraMaskedPaths...),
		ReadonlyPaths:   example.ReadonlyPaths,
		Capabilities:    &configs.Capabilities{},
		NoNewPrivileges: true,
		OomScoreAdj:     &oomAdj,
		Networks:        []*configs.Network{{Type: "loopback", Address: "127.0.0.1/0", Gateway: "localhost"}},
		// No session keyring per container: libcontainer's was charged to
		// the sandbox's host uid and failed the start once that uid's key
		// quota (kernel.keys.maxkeys) was used up. The skill cannot reach
		// the keyring it inherits instead: no seccomp profile allows
		// keyctl, add_key or request_key, and /proc/keys is masked.
		NoNewKeyring: true,
		// Set from the host (prlimit) on the sandbox's init and on every
		// process Exec starts, so the Bash tool's commands get them too.
		Rlimits: []configs.Rlimit{
			{Type: unix.RLIMIT_FSIZE, Hard: fsize, Soft: fsize},
			{Type: unix.RLIMIT_NOFILE, Hard: nofile, Soft: nofile},
			{Type: unix.RLIMIT_CORE, Hard: 0, Soft: 0},
		},
		Cgroups: &occgroups.Cgroup{
			Path: r.cgroupParent + "/" + spec.ID,
			Resources: &occgroups.Resources{
				Memory:     memBytes,
				MemorySwap: memBytes, // memory+swap = memory: no swap
				PidsLimit:  &pids,
			},
		},
	}
	for _, d := range specconv.AllowedDevices {
		cfg.Cgroups.Resources.Devices = append(cfg.Cgroups.Resources.Devices, &d.Rule)
	}
	if spec.CPU > 0 {
		const period = 100_000
		cfg.Cgroups.Resources.CpuPeriod = period
		cfg.Cgroups.Resources.CpuQuota = int64(spec.CPU * period)
	}
	if r.userNS {
		cont.Namespaces = append(cont.Namespaces, "user")
		last := uint64(r.cfg.HostIDBase) + uint64(r.cfg.IDRanges)*IDRangeSize - 1
		cont.UserNamespace = fmt.Sprintf("skill runs as uid %d in a host id range of its own (one of %d in %d-%d)", SkillUID, r.cfg.IDRanges, r.cfg.HostIDBase, last)
		if r.ownedNS {
			cont.UsernsOwner = "the range's own host uid"
		} else {
			cont.UsernsOwner = "host root"
			cont.NotEnforced = append(cont.NotEnforced, "user namespace owned by the sandbox's uid: "+r.ownedNSWhy)
		}
		if lease != nil {
			base := lease.start
			cfg.Namespaces = append(cfg.Namespaces, configs.Namespace{Type: configs.NEWUSER})
			cfg.UIDMappings = []configs.IDMap{{ContainerID: 0, HostID: int64(base), Size: IDRangeSize}}
			cfg.GIDMappings = []configs.IDMap{{ContainerID: 0, HostID: int64(base), Size: IDRangeSize}}
			lease.identity(r.nsOwner(lease)).Describe(&cont)
		}
	} else {
		cont.UserNamespace = fmt.Sprintf("none (%s); skill runs as host uid %d", r.userNSWhy, r.skillUID())
		cont.NotEnforced = append(cont.NotEnforced, "user namespace: "+r.userNSWhy)
	}
	return cfg, cont
}

// linuxProcess is one running container.
type linuxProcess struct {
	runner *LinuxRunner
	id     string
	// created: the helper made the container, which cleanup destroys.
	created bool
	proc    *spawn.Process // the init
	// reaped: Wait got the init's wait status from the helper, so the
	// pid namespace and every process in it are gone.
	reaped bool
	// reap gets the result of the reap that Wait started and did not
	// wait for (init reported); collectReap takes it.
	reap chan error
	// orphaned: the helper was gone before it answered the create.
	orphaned bool
	lock     *os.File
	lease    *idLease // the sandbox's host id range, held until cleanup
	// initRlimits are cyberos-init's --rlimit arguments (moveRlimitsToInit).
	initRlimits []string
	status      *os.File // read end of cyberos-init's status pipe
	// control is the write end of init's control pipe until activation;
	// stdin, stdout and stderr are our ends of the skill's stdio.
	control, stdin, stdout, stderr *os.File
	// lifeline is the control pipe's write end after activation, held until
	// cleanup: this process holds the only one, so when it dies cyberos-init
	// reads EOF and kills the sandbox (TestSandboxEndsWithItsSupervisor).
	lifeline *os.File
	// copies gets one value as each of stdout and stderr reaches EOF.
	copies chan struct{}
	notify *notifyListener
	cont   Containment
	// landlock is what cyberos-init applies, to Exec'd processes too.
	landlock landlockPlan
	// filter is the seccomp program cyberos-init loads, in Exec'd
	// processes too (nil when libcontainer loads the filter: the
	// recorder's, or one seccomp.Compile does not handle).
	filter  *seccomp.Program
	started time.Time
	latency time.Duration
	once    sync.Once
	// spec is what a warm sandbox was made from, to make it again when
	// its init died before activation.
	spec Spec
}

func (p *linuxProcess) cgroupPath() string { return p.runner.cgroupParent + "/" + p.id }

func (p *linuxProcess) Terminate() error {
	if p.proc == nil {
		return errors.New("sandbox: not started")
	}
	return p.proc.Signal(unix.SIGTERM)
}

// KillAll kills every process in the sandbox's cgroup, init included, so
// nothing that forked, re-parented or ignores signals survives. That needs
// no helper; signalling init through the helper comes after, as a second
// means, so a helper that does not answer delays only KillAll's return
// (by spawn.CallBound at most), never the kill.
func (p *linuxProcess) KillAll() error {
	err := cgroups.KillAll(p.cgroupPath())
	if c, cerr := p.container(); cerr == nil {
		_ = c.Signal(unix.SIGKILL)
	}
	return err
}

// container is the sandbox's container through the runner's live helper: a
// helper started after the one that made it died loads it from its state.
func (p *linuxProcess) container() (*spawn.Container, error) {
	h, err := p.runner.spawner()
	if err != nil {
		return nil, err
	}
	return h.Container(p.runner.stateRoot(), p.id), nil
}

// Wait waits for the sandbox's init and reports how the skill ended, as
// cyberos-init saw it. When init itself was killed (the deadline, the OOM
// killer) there is no report and init's own status is returned.
//
// It first reads init's status pipe to EOF, which comes when init closes
// it after its report, every other process of the sandbox killed and
// reaped, or when init exits: a pipe read parks the goroutine on the
// runtime's poller, where wait4 would hold an OS thread per waiting
// sandbox. When init reported, Wait returns without waiting for its reap
// (a helper round trip, and init's exit tearing down the namespaces):
// Close collects it.
func (p *linuxProcess) Wait() (Exit, error) {
	report, reported := readInitStatus(p.status)
	reap := make(chan error, 1)
	var ws unix.WaitStatus
	go func() {
		var err error
		ws, err = p.proc.Reap()
		reap <- err
	}()
	p.drainOutput()
	if reported {
		p.reap = reap
		return report, nil
	}
	err := <-reap
	p.reaped = err == nil
	if err != nil {
		return Exit{}, fmt.Errorf("sandbox wait: %w", err)
	}
	if ws.Signaled() {
		return Exit{Code: -1, Signal: ws.Signal()}, nil
	}
	return Exit{Code: ws.ExitStatus()}, nil
}

// reapGrace is how long Close waits for the reap of an init that reported
// (its status pipe is at EOF, so it is exiting) before it kills the
// sandbox, in case that init is still alive after all.
const reapGrace = time.Second

// collectReap waits for the reap that Wait left running, if any.
func (p *linuxProcess) collectReap() {
	if p.reap == nil {
		return
	}
	var err error
	select {
	case err = <-p.reap:
	case <-time.After(reapGrace):
		_ = p.KillAll()
		err = <-p.reap
	}
	p.reap = nil
	p.reaped = err == nil
}

// outputDrain bounds how long Wait reads the skill's output after the
// sandbox's init reported or ended. Init (or the kernel, when init itself
// was killed) has killed every other process of the pid namespace by
// then, so the pipes are at EOF unless a process outside the sandbox
// holds one.
const outputDrain = 5 * time.Second

// drainOutput waits for the stdout and stderr copies to reach EOF.
func (p *linuxProcess) drainOutput() {
	if p.copies == nil {
		return
	}
	drain := time.After(outputDrain)
	for range 2 {
		select {
		case <-p.copies:
		case <-drain:
			_ = p.stdout.SetReadDeadline(time.Now())
			_ = p.stderr.SetReadDeadline(time.Now())
			drain = nil
			<-p.copies
		}
	}
	p.copies = nil
}

// readInitStatus parses cyberos-init's one line: "exit N", "signal N",
// "exec ERRNO" or "landlock ERRNO".
func readInitStatus(f *os.File) (Exit, bool) {
	if f == nil {
		return Exit{}, false
	}
	b, _ := io.ReadAll(io.LimitReader(f, 64))
	var n int
	switch {
	case scan(b, "exit %d", &n):
		return Exit{Code: n}, true
	case scan(b, "signal %d", &n):
		return Exit{Code: -1, Signal: syscall.Signal(n)}, true
	case scan(b, "exec %d", &n):
		return Exit{Code: 127, ExecError: syscall.Errno(n).Error()}, true
	case scan(b, "rlimit %d", &n):
		return Exit{Code: 127, ExecError: "the sandbox could not set its resource limits: " + syscall.Errno(n).Error()}, true
	case scan(b, "control %d", &n):
		return Exit{Code: 127, ExecError: "the sandbox could not read its invocation: " + syscall.Errno(n).Error()}, true
	case scan(b, "seccomp %d", &n):
		return Exit{Code: 127, ExecError: "the sandbox could not load its seccomp filter: " + syscall.Errno(n).Error()}, true
	case scan(b, "landlock %d", &n):
		return Exit{Code: 127, ExecError: "the sandbox could not apply Landlock: " + syscall.Errno(n).Error()}, true
	}
	return Exit{}, false
}

func scan(b []byte, format string, n *int) bool {
	c, err := fmt.Sscanf(string(b), format, n)
	return err == nil && c == 1
}

func (p *linuxProcess) Stats() (cgroups.Stats, error) { return cgroups.ReadStats(p.cgroupPath()) }

func (p *linuxProcess) OOMKills() (uint64, error) { return cgroups.ReadOOMKills(p.cgroupPath()) }

// Close kills what is left, then destroys the container (cgroup and state)
// and releases the lock. Order matters: Signal(SIGKILL) → reap → Destroy;
// Destroy on a running container may refuse (DESIGN.md).
func (p *linuxProcess) Close() error {
	var err error
	p.once.Do(func() { err = p.cleanup() })
	return err
}

// abort cleans up after a failed Start and returns err, with the cleanup's
// error added when the container could not be removed.
func (p *linuxProcess) abort(err error) error {
	if cerr := p.cleanup(); cerr != nil {
		return fmt.Errorf("%w (cleanup: %w)", err, cerr)
	}
	return err
}

func (p *linuxProcess) cleanup() error {
	var errs []error
	p.collectReap()
	if p.created {
		c, err := p.container()
		if err == nil {
			// After the init's reap (Wait's, or collected above) the
			// container is stopped: no status call, a helper round trip.
			// Destroy fails if anything still sits in the cgroup, and the
			// kill below runs.
			if !p.reaped {
				if st, err := c.Status(); err != nil || st != libcontainer.Stopped {
					_ = p.KillAll()
					if p.proc != nil {
						_, _ = p.proc.Reap()
					}
				}
			}
			if err = c.Destroy(); err != nil {
				_ = cgroups.KillAll(p.cgroupPath())
				err = c.Destroy()
			}
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("destroy %s: %w", p.id, err))
		}
	}
	if p.orphaned {
		if err := cgroups.Remove(p.cgroupPath()); err != nil {
			errs = append(errs, fmt.Errorf("remove %s after its helper died: %w", p.id, err))
		}
	}
	_ = os.RemoveAll(filepath.Join(p.runner.stateRoot(), p.id))
	if len(p.spec.Binds) > 0 && len(errs) == 0 {
		// Only once the container is gone: its mounts sit on this copy.
		_ = os.RemoveAll(p.runner.rootfsFor(p.spec))
	}
	_ = os.Remove(p.runner.lockPath(p.id))
	if p.lock != nil {
		p.lock.Close()
	}
	for _, f := range []*os.File{p.status, p.control, p.lifeline, p.stdin, p.stdout, p.stderr} {
		if f != nil {
			f.Close()
		}
	}
	if p.notify != nil {
		p.notify.Close()
	}
	// Every process of the range is gone (reaped above): it may be reused.
	// A sandbox that could not be destroyed keeps its range.
	if len(errs) == 0 {
		p.lease.release()
	}
	return errors.Join(errs...)
}

// Exec starts r.Argv in the container with libcontainer (Init false): it
// joins the container's namespaces and cgroup, and libcontainer applies
// empty capability sets and no_new_privs to it; cyberos-init --exec then
// loads the sandbox's seccomp filter, applies the skill's Landlock rules
// and execs it.
// Its stdio are pipes we own, so a background child holding them open
// cannot block the call past its end: after the process exits, output is
// drained for at most execDrain.
func (p *linuxProcess) Exec(ctx context.Context, r ExecSpec) (ExecExit, error) {
	uid := p.runner.skillUID()
	filter, err := p.filterFile()
	if err != nil {
		return ExecExit{}, err
	}
	defer filter.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		return ExecExit{}, err
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return ExecExit{}, err
	}
	stdin, err := stdinFile(r.Stdin)
	if err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return ExecExit{}, err
	}
	defer stdin.Close()
	// Through cyberos-init --exec, which loads the seccomp filter, applies
	// the skill's Landlock rules and execs r.Argv in place.
	spec := &spawn.Proc{
		Args: append(withSeccomp(withInitRlimits(p.landlock.initArgs(true), p.initRlimits), execFilterFD, p.filter), r.Argv...), Env: r.Env, UID: uid, GID: uid, Cwd: "/tmp",
		Stdin: stdin, Stdout: outW, Stderr: errW,
	}
	if filter != nil {
		spec.ExtraFiles = []*os.File{filter} // execFilterFD
	}
	copyDone := make(chan struct{}, 2)
	copyOut := func(dst io.Writer, src *os.File) {
		if dst == nil {
			dst = io.Discard
		}
		_, _ = io.Copy(dst, src)
		copyDone <- struct{}{}
	}
	c, err := p.container()
	var proc *spawn.Process
	if err == nil {
		proc, err = c.Run(spec)
	}
	if err != nil {
		outR.Close()
		outW.Close()
		errR.Close()
		errW.Close()
		return ExecExit{}, fmt.Errorf("sandbox exec: %w", err)
	}
	outW.Close()
	errW.Close()
	go copyOut(r.Stdout, outR)
	go copyOut(r.Stderr, errR)

	var timedOut bool
	waited := make(chan struct{})
	go func() {
		select {
		case <-waited:
		case <-ctx.Done():
			_ = proc.Signal(unix.SIGKILL)
		case <-time.After(r.Timeout):
			timedOut = true
			_ = proc.Signal(unix.SIGKILL)
		}
	}()
	ws, werr := proc.Wait()
	close(waited)
	// Drain what the process wrote; a background child that keeps the
	// pipes open is cut off.
	drain := time.After(execDrain)
	for range 2 {
		select {
		case <-copyDone:
		case <-drain:
			// os.Pipe's ends are pollable on Linux: deadlines cannot fail.
			_ = outR.SetReadDeadline(time.Now())
			_ = errR.SetReadDeadline(time.Now())
		}
	}
	outR.Close()
	errR.Close()
	ex := ExecExit{TimedOut: timedOut}
	if werr != nil {
		return ex, fmt.Errorf("sandbox exec wait: %w", werr)
	}
	if ws.Signaled() {
		ex.Code, ex.Signal = -1, ws.Signal()
	} else {
		ex.Code = ws.ExitStatus()
	}
	return ex, nil
}

// stdinFile is in as a file for the helper to pass on: a file as it is
// (duplicated, so the caller keeps its own), anything else through a pipe
// fed from here, and nil as an empty one.
func stdinFile(in io.Reader) (*os.File, error) {
	if f, ok := in.(*os.File); ok {
		fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return nil, err
		}
		return os.NewFile(uintptr(fd), f.Name()), nil
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	go func() {
		if in != nil {
			_, _ = io.Copy(pw, in) // EPIPE once the process is gone
		}
		pw.Close()
	}()
	return pr, nil
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

// execDrain bounds how long Exec reads output after the process exited.
const execDrain = 200 * time.Millisecond

func (p *linuxProcess) Containment() Containment    { return p.cont }
func (p *linuxProcess) StartLatency() time.Duration { return p.latency }

// Reexec does nothing on Linux: libcontainer re-executes the creation
// helper (cyberos-spawn) as each container's init, never this binary.
func Reexec() {}
