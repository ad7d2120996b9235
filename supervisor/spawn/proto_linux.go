// Package spawn is the sandbox creation helper: a small process, started by
// the runner and linked with little more than libcontainer, that creates,
// signals, waits for and destroys the runner's containers.
//
// libcontainer starts every container's init, and every process it execs
// into a container, by re-executing /proc/self/exe. In the supervisor that
// is the whole cyberos binary (the CLI, the daemon, the audit store, the
// telemetry), whose Go start alone costs several times a small binary's.
// Made from this helper, each start re-executes cyberos-spawn instead.
//
// The runner and the helper talk over a private SOCK_SEQPACKET socketpair:
// one JSON message a request or a reply, the request's files (the init's
// stdio, status and control pipes) passed with SCM_RIGHTS. Nothing else can
// reach the helper: it has no socket in the file system, and its end of the
// pair is close-on-exec, so no container process inherits it.
package spawn

import (
	"github.com/opencontainers/runc/libcontainer/configs"
)

// Operations a request names.
const (
	opCreate  = "create"  // libcontainer.Create, then Run of its init
	opExec    = "exec"    // Run of one more process in a container
	opStatus  = "status"  // the container's libcontainer.Status
	opKill    = "kill"    // signal the container's init
	opSignal  = "signal"  // signal a process the helper started
	opWait    = "wait"    // wait for a process the helper started
	opDestroy = "destroy" // libcontainer's Destroy of a container
)

// maxMessage bounds one message: a container's config with a large seccomp
// profile is tens of KiB.
const maxMessage = 4 << 20

// maxFiles bounds the files passed with one request: the init's stdin,
// stdout, stderr and its extra files.
const maxFiles = 8

// request is one call from the runner. Files arrive with it: the process's
// stdin, stdout and stderr, then its Extra extra files.
type request struct {
	ID        uint64          `json:"id"`
	Op        string          `json:"op"`
	StateRoot string          `json:"state_root,omitempty"`
	Container string          `json:"container,omitempty"`
	Config    *configs.Config `json:"config,omitempty"`
	Process   *procSpec       `json:"process,omitempty"`
	Handle    uint64          `json:"handle,omitempty"`
	Signal    int             `json:"signal,omitempty"`
}

// procSpec is the part of a libcontainer.Process the runner sets.
type procSpec struct {
	Args  []string `json:"args"`
	Env   []string `json:"env"`
	UID   int      `json:"uid"`
	GID   int      `json:"gid"`
	Cwd   string   `json:"cwd"`
	Init  bool     `json:"init"`
	Extra int      `json:"extra"`
	// Hold starts an init without letting it through libcontainer's exec
	// fifo (Start without Exec), where Run waits between the two: a test
	// stands for a runner that died there with it.
	Hold bool `json:"hold,omitempty"`
}

// reply answers the request with the same ID.
type reply struct {
	ID  uint64 `json:"id"`
	Err string `json:"err,omitempty"`
	// Created: libcontainer.Create succeeded, so the container exists (and
	// must be destroyed) even when Err says its init did not start.
	Created bool `json:"created,omitempty"`
	// Handle names the process create or exec started, for signal and wait.
	Handle uint64 `json:"handle,omitempty"`
	// Pid is the started process's pid, in the helper's pid namespace
	// (the runner's).
	Pid    int `json:"pid,omitempty"`
	Status int `json:"status,omitempty"`
	// Waited: WaitStatus is the process's wait status (Err may still say
	// it exited non-zero).
	Waited     bool   `json:"waited,omitempty"`
	WaitStatus uint32 `json:"wait_status,omitempty"`
	// gone: made by the runner's end when the connection broke.
	gone error
}
