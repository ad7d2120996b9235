package tools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"cyberos.dev/policy"
)

// Bash limits.
const (
	// DefaultBashTimeout is Bash's timeout when the args give none.
	DefaultBashTimeout = 30 * time.Second
	// MaxBashTimeout is the longest timeout_ms Bash accepts.
	MaxBashTimeout = 10 * time.Minute
	// MaxBashOutput caps stdout and stderr each; the first bytes are kept.
	MaxBashOutput = 1 << 20
)

// bashGrace is how much longer than the timeout the call's context lives: a
// backstop should Env.Exec not end the command on its own. A variable for
// tests.
var bashGrace = 5 * time.Second

// bashEnv is the whole environment of a Bash command.
var bashEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"}

// bashTool is Bash {command, timeout_ms?} → {"exit_code","stdout","stderr",
// "stdout_truncated","stderr_truncated","timed_out","signal"?}. The command
// runs as /bin/sh -c inside the invocation's sandbox (Env.Exec), never on
// the host.
type bashTool struct{}

// NewBash returns the Bash tool.
func NewBash() Tool { return bashTool{} }

func (bashTool) Name() policy.Tool { return policy.ToolBash }

func (bashTool) Description() string {
	return fmt.Sprintf(`Run a shell command (/bin/sh -c) inside the skill's sandbox. Args {"command","timeout_ms"?} `+
		`(default %d, at most %d); result {"exit_code","stdout","stderr","stdout_truncated","stderr_truncated","timed_out","signal"?}. `+
		`stdout and stderr keep their first %d MiB each; environment PATH, HOME=/tmp, LANG=C.UTF-8 only; stdin is empty. `+
		`A non-zero exit is a result, not an error; a timeout is an error that still carries the output so far.`,
		DefaultBashTimeout.Milliseconds(), MaxBashTimeout.Milliseconds(), MaxBashOutput>>20)
}

type bashArgs struct {
	Command   *string `json:"command"`
	TimeoutMS *int64  `json:"timeout_ms"`
}

// Call checks the command with the enforcer (a refusal never reaches
// Env.Exec) and runs it. Output bytes that are not UTF-8 become U+FFFD in
// the result.
//
// On a timeout Call returns both the result — timed_out true, the output
// captured until the command was stopped (capped as always), exit_code and
// signal as Env.Exec reported them — and an error wrapping ErrTimeout, so the
// broker records the outcome timeout and may still hand the partial output
// to the skill (as the error's data). The partial output is kept because it
// is what tells the skill where its command hung.
func (b bashTool) Call(ctx context.Context, c *Call) (any, error) {
	if c == nil || c.Env == nil || c.Env.Enforcer == nil {
		return nil, skillError(ErrFailed, "no enforcer for this invocation")
	}
	var a bashArgs
	if err := unmarshalArgs(c.Args, &a); err != nil {
		return nil, err
	}
	switch {
	case a.Command == nil:
		return nil, skillError(ErrInvalidParams, "command is required")
	case strings.TrimSpace(*a.Command) == "":
		return nil, skillError(ErrInvalidParams, "command must not be empty")
	case strings.IndexByte(*a.Command, 0) >= 0:
		return nil, skillError(ErrInvalidParams, "command must not contain NUL")
	}
	timeout := DefaultBashTimeout
	if a.TimeoutMS != nil {
		ms := *a.TimeoutMS
		if ms < 1 || ms > MaxBashTimeout.Milliseconds() {
			return nil, fmt.Errorf("%w: timeout_ms must be between 1 and %d", ErrInvalidParams, MaxBashTimeout.Milliseconds())
		}
		timeout = time.Duration(ms) * time.Millisecond
	}
	if err := c.Env.Enforcer.CheckBash(*a.Command); err != nil {
		return nil, err
	}
	if c.Env.Exec == nil {
		return nil, skillError(ErrFailed, "no sandbox to run commands in")
	}

	stdout, stderr := &cappedBuffer{max: MaxBashOutput}, &cappedBuffer{max: MaxBashOutput}
	execCtx, cancel := context.WithTimeout(ctx, timeout+bashGrace)
	defer cancel()
	res, err := c.Env.Exec(execCtx, ExecRequest{
		Argv:    []string{"/bin/sh", "-c", *a.Command},
		Env:     slices.Clone(bashEnv),
		Stdin:   bytes.NewReader(nil),
		Stdout:  stdout,
		Stderr:  stderr,
		Timeout: timeout,
	})
	out := bashOut{exitCode: res.ExitCode, signal: res.Signal, timedOut: res.TimedOut}
	out.stdout, out.stdoutTruncated = stdout.result()
	out.stderr, out.stderrTruncated = stderr.result()

	switch {
	case res.TimedOut:
	case err == nil:
		return out.encode(ctx, c)
	case ctx.Err() != nil:
		// The invocation itself is ending (its deadline, a kill).
		return nil, ctxErr(ctx.Err())
	case errors.Is(execCtx.Err(), context.DeadlineExceeded):
		// The backstop: Env.Exec did not stop the command at the timeout.
	default:
		return nil, fmt.Errorf("%w: run in sandbox: %w", ErrFailed, err)
	}
	out.timedOut = true
	enc, eerr := out.encode(ctx, c)
	if eerr != nil {
		return nil, eerr
	}
	return enc, fmt.Errorf("%w: command ran longer than %s", ErrTimeout, timeout)
}

// bashOut is a Bash result before encoding: the output as captured, not
// copied into strings.
type bashOut struct {
	exitCode                         int
	signal                           string
	stdout, stderr                   []byte
	stdoutTruncated, stderrTruncated bool
	timedOut                         bool
}

// encode writes the result ({"exit_code","signal"?,"stderr",
// "stderr_truncated","stdout","stdout_truncated","timed_out"}) as canonical JSON, its
// size reserved first: output of control characters is six times its
// size in JSON (invalid UTF-8 becomes U+FFFD, three bytes a byte).
func (r bashOut) encode(ctx context.Context, c *Call) (any, error) {
	size := len(`{"exit_code":,"stderr":,"stderr_truncated":,"stdout":,"stdout_truncated":,"timed_out":}`) +
		intLen(int64(r.exitCode)) + escapedLen(r.stderr) + escapedLen(r.stdout) +
		boolLen(r.stderrTruncated) + boolLen(r.stdoutTruncated) + boolLen(r.timedOut)
	if r.signal != "" {
		size += len(`,"signal":`) + escapedLen(r.signal)
	}
	if err := c.reserve(ctx, int64(size)); err != nil {
		return nil, err
	}
	w := newCanonWriter(size)
	w.raw(`{"exit_code":`)
	w.int(int64(r.exitCode))
	if r.signal != "" {
		w.raw(`,"signal":`)
		str(w, r.signal)
	}
	w.raw(`,"stderr":`)
	str(w, r.stderr)
	w.raw(`,"stderr_truncated":`)
	w.bool(r.stderrTruncated)
	w.raw(`,"stdout":`)
	str(w, r.stdout)
	w.raw(`,"stdout_truncated":`)
	w.bool(r.stdoutTruncated)
	w.raw(`,"timed_out":`)
	w.bool(r.timedOut)
	w.raw("}")
	out, ok := w.done()
	if !ok {
		c.release(int64(size))
		return nil, fmt.Errorf("%w: Bash's result is not the size computed for it", ErrFailed)
	}
	return out, nil
}

// cappedBuffer keeps the first max bytes written to it and notes whether
// more came. It never fails a write, so the command is not killed by a
// broken pipe for talking too much.
type cappedBuffer struct {
	mu        sync.Mutex
	max       int
	buf       []byte
	truncated bool
	done      bool // result was taken
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := len(p)
	if b.done {
		return n, nil // a command outliving its result: dropped
	}
	room := b.max - len(b.buf)
	if len(p) > room {
		b.truncated = true
		p = p[:max(room, 0)]
	}
	if need := len(b.buf) + len(p); need > cap(b.buf) {
		// Doubling, not append's gentler growth for large slices: a
		// megabyte of output leaves half as much garbage behind.
		grown := make([]byte, len(b.buf), min(max(2*cap(b.buf), need, 64<<10), b.max))
		copy(grown, b.buf)
		b.buf = grown
	}
	b.buf = append(b.buf, p...)
	return n, nil
}

// result returns what was kept, not copied: later writes are dropped.
func (b *cappedBuffer) result() ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.done = true
	return b.buf, b.truncated
}
