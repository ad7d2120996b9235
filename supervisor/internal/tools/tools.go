// Package tools holds the native tools a skill reaches through the broker,
// one file each. Every tool re-checks its resource (path, memory path, URL)
// with the invocation's policy.Enforcer at call time: default deny.
package tools

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"time"

	"cyberos.dev/memory"
	"cyberos.dev/policy"
)

// Error classes the broker maps to JSON-RPC codes (in one function there).
// A refusal is a *policy.Denial; these are the other failures.
var (
	ErrInvalidParams = errors.New("invalid params") // -32602
	ErrNotFound      = errors.New("not found")      // tool error
	ErrTooLarge      = errors.New("too large")      // tool error
	ErrTimeout       = errors.New("timed out")      // tool error, outcome timeout
	ErrFailed        = errors.New("tool failed")    // tool error

	// ErrHostFault is wrapped beside a class when the host failed in a way
	// the skill cannot change and a retry will not mend (a memory store
	// that refuses writes): the broker logs it at WARN, for the operator.
	ErrHostFault = errors.New("host fault")
)

// SkillError is a tool failure whose message the tool wrote for the skill:
// a fixed text with no host paths or errno. The broker passes Msg on as the
// JSON-RPC error's data.detail; other tool errors reach the skill as their
// class only (their text stays in the supervisor's log).
type SkillError struct {
	Class error // one of the error classes above
	Msg   string
}

func (e *SkillError) Error() string { return e.Class.Error() + ": " + e.Msg }
func (e *SkillError) Unwrap() error { return e.Class }

func skillError(class error, msg string) error { return &SkillError{Class: class, Msg: msg} }

// ExecRequest is a command to run inside the invocation's sandbox.
type ExecRequest struct {
	Argv    []string
	Env     []string
	Stdin   io.Reader
	Stdout  io.Writer
	Stderr  io.Writer
	Timeout time.Duration
}

// ExecResult is how the command ended.
type ExecResult struct {
	ExitCode int
	Signal   string // set when killed by a signal
	TimedOut bool
}

// Env is one invocation's world, shared by all its calls.
type Env struct {
	SkillID, InvocationID, TenantID string
	Policy                          *policy.Policy
	Enforcer                        *policy.Enforcer
	Memory                          *memory.Store
	// Exec runs a process inside the invocation's sandbox (Bash).
	Exec func(ctx context.Context, r ExecRequest) (ExecResult, error)
	// Resolve, when set, replaces DNS for the Http tools (tests map names
	// to 127.0.0.1 with it). Every address is still checked by the enforcer.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
	// HostAddrs and KernelRoute, when set, replace the host's interface
	// addresses (HostAddrs) and the kernel's route lookup (KernelRoute) for
	// the Http tools' egress check; tests inject them.
	HostAddrs   func() ([]netip.Addr, error)
	KernelRoute func(netip.Addr) (RouteKind, error)
}

// Call is one tool.call.
type Call struct {
	Env         *Env
	Args        json.RawMessage
	Traceparent string // W3C header value, for HttpFetch/HttpPost
	TraceID     string // for MemoryEmit
	// Mem, when set, is the call's share of the budget of response bytes
	// in flight; nil holds nothing (result.go).
	Mem Memory
}

// Tool is a native tool.
type Tool interface {
	Name() policy.Tool
	Description() string
	// Call performs it. The result is marshalled as the JSON-RPC result,
	// or, a Canonical, sent as it is (result.go).
	Call(ctx context.Context, c *Call) (any, error)
}
