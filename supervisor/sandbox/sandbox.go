// Package sandbox turns one invocation's limits into a running, contained
// process: a libcontainer container on Linux, an rlimit-only child on macOS.
//
// On Linux it decides every control a sandbox gets and turns it into a
// libcontainer config (namespaces, id maps, mounts over a read-only root,
// no capabilities, cgroup limits, rlimits), places the cgroups, and owns
// the container's life from creation to destruction. It does not make the
// kernel calls itself: package spawn's helper (cyberos-spawn) creates the
// namespaces and cgroups and starts each container's init through
// libcontainer (whose init sets the uids, drops the capabilities and loads
// the filters package seccomp cannot compile, such as a recording one), and
// cyberos-init (sandbox-init/), the container's pid 1, loads the compiled
// seccomp program this package hands it, applies Landlock (and, in a user
// namespace owned by the sandbox's uid, the rlimits) and starts the skill.
// Package seccomp reads and compiles the profiles, and package
// cgroups owns the control files of an existing cgroup (stats, freezing,
// cgroup.kill, removal).
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"sort"
	"sync"
	"time"

	"cyberos.dev/cgroups"
	"cyberos.dev/supervisor/internal/seccomp"
	"cyberos.dev/wire"
)

// Paths inside the sandbox.
const (
	SkillMount     = "/skill"
	BrokerSockPath = wire.SandboxSocket
	ToolBinPath    = "/run/cyberos/bin/cyberos-tool"
	InitBinPath    = "/run/cyberos/bin/cyberos-init"
	Hostname       = "skill"
	// SkillUID is the uid (and gid) the skill runs as inside the sandbox.
	SkillUID = 1000
)

// Rlimit defaults of a sandbox whose Spec leaves them 0. RLIMIT_CORE is
// always 0: a core dump has no reader, and writing one costs the skill's
// tmpfs and time.
const (
	// DefaultFileSizeMB is twice the default /tmp: a file on the sandbox's
	// own tmpfs never reaches it, any other writable file stops there.
	DefaultFileSizeMB = 128
	// DefaultNoFile is RLIMIT_NOFILE: the kernel's open files are a host-wide
	// resource.
	DefaultNoFile = 1024
)

// Errors callers test with errors.Is.
var (
	// ErrUnsupported: this platform cannot run a sandbox at all.
	ErrUnsupported = errors.New("sandbox: unsupported platform")
	// ErrSeccompNotCompiled: the binary was built without the seccomp tag.
	ErrSeccompNotCompiled = seccomp.ErrNotCompiled
	// ErrProfile: the seccomp profile is missing or invalid (the seccomp
	// package's error, so errors.Is matches either name).
	ErrProfile = seccomp.ErrProfile
	// ErrDegraded: the platform cannot enforce what the policy requires and
	// degraded mode was not allowed.
	ErrDegraded = errors.New("sandbox: cannot enforce the policy on this platform")
)

// Options are the host-side settings of a runner.
type Options struct {
	// InitBinary is the static cyberos-init, the sandbox's pid 1. Default:
	// cyberos-init beside the running executable.
	InitBinary string
	// ToolBinary is the static cyberos-tool client, bind-mounted read-only
	// at ToolBinPath. Default: cyberos-tool beside the running executable.
	ToolBinary string
	// SpawnBinary is the static cyberos-spawn, the creation helper that
	// makes the Linux sandboxes and that libcontainer re-executes as each
	// one's first process. Default: cyberos-spawn beside the running
	// executable.
	SpawnBinary string
	// RunDir holds libcontainer state, the shared read-only rootfs skeleton
	// and per-invocation lock files. Default /run/cyberos.
	RunDir string
	// HostIDBase is the first host uid/gid of the id ranges: range n maps
	// container ids 0..65535 to HostIDBase+n*65536 onwards.
	HostIDBase uint32
	// IDRanges is how many ranges there are, so how many sandboxes may run
	// at once with a user namespace (default DefaultIDRanges). Each running
	// sandbox holds one range of its own.
	IDRanges int
	// DisableUserNS forces running without a user namespace.
	DisableUserNS bool
	// CgroupPlacement is where the sandboxes' cgroups go; "" is
	// PlacementRoot. Only the daemon places them under its own cgroup.
	CgroupPlacement Placement
}

// Placement is where a runner makes its sandboxes' cgroups.
type Placement string

const (
	// PlacementAuto is PlacementService when systemd delegated the
	// process's cgroup to it (a unit with Delegate=yes, which systemd 251
	// and later marks), and PlacementRoot otherwise.
	PlacementAuto Placement = "auto"
	// PlacementService makes them under the process's own cgroup, as
	// <own>/cyberos/<id>, where the unit's KillMode, `systemctl status`
	// and its limits reach them. On cgroup v2 the process first moves into
	// the leaf <own>/supervisor: a cgroup whose children use controllers
	// holds no process itself.
	PlacementService Placement = "service"
	// PlacementRoot makes them at the hierarchy root, /cyberos/<id>, for a
	// process no service manager delegated a subtree to.
	PlacementRoot Placement = "root"
)

// DaemonLeaf is the cgroup v2 leaf PlacementService moves the daemon into.
const DaemonLeaf = "supervisor"

// DeadlineBackstop is how long after Spec.Deadline the sandbox ends
// itself; the supervisor, while alive, ends it at the deadline.
const DeadlineBackstop = time.Second

// Spec is everything the sandbox needs to start one invocation.
type Spec struct {
	ID         string // invocation id: container id, and the leaf of the cgroup path
	SkillDir   string // absolute host path, bind-mounted read-only at /skill
	Entrypoint string // path relative to SkillDir
	Env        []string

	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Pipes, when set, replaces Stdin and Stdout: Start fills it with the
	// caller's ends of the process's stdin and stdout pipes (see Pipes).
	Pipes *Pipes

	MemoryMB int64   // memory.max (and no swap)
	PidsMax  int64   // pids.max
	CPU      float64 // CPUs of quota, 0 = none
	// CPUBurst is how many CPUs above CPU the sandbox may use for a moment
	// out of the quota it left unused (cpu.max.burst, Linux 5.14; not set
	// on older kernels): a server's start, after it idled. 0 = none.
	CPUBurst float64
	// CPUPeriod is the period over which CPU is counted (cpu.max's second
	// field), at most a second: 0 = 100 ms. A longer one lets a
	// multi-threaded start use every CPU until its quota is spent.
	CPUPeriod time.Duration
	TmpSizeMB int64 // size of the tmpfs at /tmp

	// FileSizeMB is RLIMIT_FSIZE (soft = hard) of every process of the
	// sandbox, the skill's and the Bash tool's: 0 = DefaultFileSizeMB.
	FileSizeMB int64
	// NoFile is RLIMIT_NOFILE (soft = hard): 0 = DefaultNoFile.
	NoFile int64

	// Deadline is the invocation's deadline, 0 = none. The sandbox's pid 1
	// kills it Deadline+DeadlineBackstop after the start if nothing ended
	// it before: no sandbox outlives a supervisor that died.
	Deadline time.Duration

	ProfilesDir    string // directory of <name>.json OCI seccomp profiles
	SeccompProfile string // profile name
	// SeccompProfileHash, when set, is the hash Check returned (and the
	// started row recorded): Start refuses a profile whose bytes changed
	// since, so the audit never names a profile the sandbox did not load.
	SeccompProfileHash string

	// BrokerSocket, when set, is the invocation's host socket, bind-mounted
	// at /run/cyberos/broker.sock.
	BrokerSocket string

	// Binds are host paths bound at the same path inside the sandbox,
	// read-only unless Writable (an MCP server's files). Each must be an
	// absolute, clean path other than /.
	Binds []Bind

	// Network, when set, is called once the sandbox's namespaces exist and
	// before its entrypoint runs, with its network namespace (Linux: an
	// open /proc/PID/ns/net); the environment it returns is added to Env.
	// An MCP server's egress proxy listens in the namespace from here.
	// A runner that cannot honour it refuses the start.
	Network func(netns *os.File) (env []string, err error)

	// AllowDegraded lets a platform that cannot enforce every control run
	// anyway, saying in Containment what was not enforced.
	AllowDegraded bool

	// Recorder, when set, runs the sandbox under the recording form of its
	// profile (`cyberos seccomp record`): every call the profile allows is
	// reported to Recorder and let through, every refusal stays. Linux only.
	Recorder *SyscallRecorder
}

// Bind is a host path bound into a sandbox at the same path.
type Bind struct {
	Path     string
	Writable bool
}

// SyscallRecorder collects the system calls a sandbox made.
type SyscallRecorder struct {
	mu   sync.Mutex
	seen map[string]int
	errs []error
}

// NewSyscallRecorder returns an empty recorder.
func NewSyscallRecorder() *SyscallRecorder { return &SyscallRecorder{seen: map[string]int{}} }

func (r *SyscallRecorder) add(name string) {
	r.mu.Lock()
	r.seen[name]++
	r.mu.Unlock()
}

func (r *SyscallRecorder) fail(err error) {
	r.mu.Lock()
	r.errs = append(r.errs, err)
	r.mu.Unlock()
}

// Syscalls are the names seen, sorted.
func (r *SyscallRecorder) Syscalls() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.seen))
	for n := range r.seen {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Counts is how often each name was seen.
func (r *SyscallRecorder) Counts() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.seen)
}

// Err reports what went wrong while recording (a recording with errors may
// be incomplete).
func (r *SyscallRecorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return errors.Join(r.errs...)
}

// Exit is how the skill's process ended.
type Exit struct {
	Code   int       // exit status when it exited
	Signal os.Signal // the signal that killed it, nil when it exited
	// ExecError is set when the entrypoint could not be executed at all.
	ExecError string
}

// Process is a started sandbox. Wait must be called once; Close always.
type Process interface {
	// Terminate sends SIGTERM to the skill (pid 1 of the sandbox).
	Terminate() error
	// KillAll kills every process of the sandbox, wherever it forked to.
	KillAll() error
	// Wait waits for the skill and every other process of the sandbox.
	Wait() (Exit, error)
	// Stats reads resource accounting; valid until Close.
	Stats() (cgroups.Stats, error)
	// OOMKills reads Stats' OOMKills alone, a cheaper read; valid until
	// Close.
	OOMKills() (uint64, error)
	// Close removes the container, its cgroup, mounts and scratch.
	Close() error
	// Exec runs another process inside the running sandbox (the Bash tool):
	// same namespaces, cgroup, seccomp filter, no capabilities,
	// no_new_privs, the skill's uid. It is killed at r.Timeout.
	Exec(ctx context.Context, r ExecSpec) (ExecExit, error)
	// Containment says what is actually enforced.
	Containment() Containment
	// StartLatency is the time from Start to the skill running.
	StartLatency() time.Duration
}

// ExecSpec is a process to run in a running sandbox.
type ExecSpec struct {
	Argv           []string
	Env            []string
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Timeout        time.Duration
}

// ExecExit is how an exec'd process ended.
type ExecExit struct {
	Exit
	TimedOut bool
}

// Runner starts sandboxes. One per platform; a fake in unit tests.
type Runner interface {
	// Check validates what Start would refuse (profile, degraded mode)
	// without starting anything, and returns the containment Start will
	// achieve, so it can be recorded before the skill runs.
	Check(spec Spec) (Containment, error)
	Start(spec Spec) (Process, error)
	// Reserve takes the host identity sandbox id will run as (its own id
	// range), before its broker socket is made; Start uses it and its
	// Close gives it back. Release gives it back when no Start took it.
	Reserve(id string) (Identity, error)
	// Release frees what Reserve took for id unless a Start took it over.
	Release(id string)
	// Owns reports whether host pid belongs to sandbox id (the broker's
	// peer check). It holds from the skill's first instruction on.
	Owns(id string, pid int32) bool
}

// Warmer is a Runner that can make a sandbox before its invocation exists.
type Warmer interface {
	// Prewarm creates the sandbox for spec (its ID a sandbox id of its own,
	// reserved with Reserve) up to the point where its init waits for the
	// invocation. Env, stdio and Deadline are ignored: Activate brings them.
	Prewarm(spec Spec) (Warm, error)
}

// Start kinds, Containment.Start: made ahead of its invocation, or for it.
const (
	StartWarm = "warm"
	StartCold = "cold"
)

// Warm is a prewarmed sandbox: namespaces, mounts, cgroup, limits, the
// seccomp filter and Landlock are in place, and nothing of the skill runs
// yet. It serves one invocation (Activate) or none (Close); either way it
// is destroyed with Close.
type Warm interface {
	// ID is the sandbox's id (container id and cgroup leaf).
	ID() string
	// Alive reports whether its init is still waiting.
	Alive() bool
	// Activate starts the skill with the invocation's environment, stdio
	// and deadline; StartLatency is then the activation's own time.
	Activate(a Activation) (Process, error)
	Close() error
}

// Activation is what a prewarmed sandbox gets from its invocation.
type Activation struct {
	Env            []string
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Pipes is Spec.Pipes: when set, Activate fills it instead of copying
	// Stdin and Stdout.
	Pipes *Pipes
	// Deadline is Spec.Deadline: the sandbox's init ends everything
	// Deadline+DeadlineBackstop after the skill starts. 0 = none.
	Deadline time.Duration
}

// Pipes are the caller's ends of a sandboxed process's stdin and stdout,
// for a peer that talks with it over them (an MCP server's stdio): the
// caller reads and writes the pipes itself, where Spec.Stdin and
// Spec.Stdout are copied to and from them by a goroutine each, one more
// hand-off every message. The caller closes both; Wait does not read
// Stdout.
type Pipes struct {
	Stdin  io.WriteCloser
	Stdout io.ReadCloser
}

// Identity is the host identity of one sandbox.
type Identity struct {
	// UID and GID are the host ids the skill's processes run as; the
	// broker socket is owned by them.
	UID, GID int
	// RangeStart is the first host id of the sandbox's range (its container
	// root), -1 without a user namespace.
	RangeStart int
	// Owner is the host uid that owns the sandbox's user namespace (the one
	// the kernel charges its per-user counters to), -1 without one.
	Owner int
}

// Describe records id in c.
func (id Identity) Describe(c *Containment) {
	c.HostUID = id.UID
	if id.Owner >= 0 {
		c.UsernsOwner = fmt.Sprintf("host uid %d", id.Owner)
		if id.Owner == 0 {
			c.UsernsOwner = "host root"
		}
	}
	if id.RangeStart >= 0 {
		c.UserNamespace = fmt.Sprintf("skill runs as uid %d = host uid %d (map %d-%d, this sandbox's own range)", SkillUID, id.UID, id.RangeStart, id.RangeStart+IDRangeSize-1)
	}
}

// Containment records what was enforced for one invocation; it goes into
// the envelope and the audit row. NotEnforced lists what the platform could
// not apply.
type Containment struct {
	Platform       string   `json:"platform"`
	Namespaces     []string `json:"namespaces,omitempty"`
	UserNamespace  string   `json:"user_namespace"` // "host uid N-M" or why not
	Seccomp        string   `json:"seccomp"`        // profile name and action, or "none"
	Landlock       string   `json:"landlock"`       // "ABI N enforced: …" or "unavailable: why"
	CgroupMode     string   `json:"cgroup_mode,omitempty"`
	MemoryMaxBytes int64    `json:"memory_max_bytes"`
	PidsMax        int64    `json:"pids_max"`
	CPUQuota       float64  `json:"cpu_quota,omitempty"`
	CPUBurst       float64  `json:"cpu_burst,omitempty"`
	Capabilities   string   `json:"capabilities"`
	NoNewPrivs     bool     `json:"no_new_privs"`
	ReadOnlyRoot   bool     `json:"readonly_root"`
	Rlimits        []string `json:"rlimits,omitempty"`
	NotEnforced    []string `json:"not_enforced,omitempty"`

	// SeccompProfileHash is the hex SHA-256 of the profile file's bytes the
	// filter was built from; empty without seccomp.
	SeccompProfileHash string `json:"seccomp_profile_hash,omitempty"`
	// Egress is how the broker's Http tools, which connect from the host,
	// are kept off the host and its neighbours (tools.EgressMode); the
	// supervisor fills it in.
	Egress string `json:"egress,omitempty"`
	// HostUID is the host uid the skill runs as (0 until one is reserved).
	HostUID int `json:"host_uid,omitempty"`
	// UsernsOwner is who owns the user namespace: the kernel charges the
	// sandbox's per-user counters (inotify, keys, …) to that host uid.
	UsernsOwner string `json:"userns_owner,omitempty"`
	// Start is how the sandbox was made: "warm" (ahead of the invocation,
	// from the daemon's pool) or "cold" (for it); the supervisor fills it in.
	Start string `json:"start,omitempty"`
}
