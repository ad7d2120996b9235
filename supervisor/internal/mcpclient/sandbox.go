package mcpclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/oklog/ulid/v2"

	"cyberos.dev/supervisor/sandbox"
)

// Sandboxed is how a stdio server runs: its command line, environment and
// sandbox limits. The command runs as the sandbox's entrypoint (through a
// launcher script in LauncherDir, bound read-only at /skill), in the same
// kind of sandbox as a skill's: its own namespaces (network: loopback
// only), cgroup limits, seccomp profile, no capabilities, a read-only root
// holding the host's /usr, /bin and /lib, and Binds.
type Sandboxed struct {
	Runner sandbox.Runner
	// Server names the sandboxes (mcp-<server>-<ulid>).
	Server string
	// Command is an absolute path inside the sandbox; Args follow it.
	Command string
	Args    []string
	// Env is the server's whole environment (secrets included).
	Env []string
	// LauncherDir is a root-owned directory for the launcher script.
	LauncherDir string
	// Stderr receives the server's stderr (a capped log file); nil
	// discards it.
	Stderr io.Writer
	// Prepare, when set, is called at each start for that start's
	// environment (added to Env: secrets read afresh) and stderr (closed
	// once the sandbox ended), replacing Stderr.
	Prepare func() (env []string, stderr io.WriteCloser, err error)

	MemoryMB, PidsMax int64
	CPU               float64
	ProfilesDir       string
	SeccompProfile    string
	Binds             []sandbox.Bind
	// Egress, when set, is the server's way out: a proxy listening on
	// 127.0.0.1 in its network namespace, named by HTTP(S)_PROXY. Without
	// it the server has loopback only.
	Egress *Egress
	// StopGrace is how long a server gets to exit once its stdin closed
	// before its sandbox is killed (default 2s).
	StopGrace time.Duration
	// Standby, when set, has a sandbox made ahead for a start (see
	// Standby; one made from SandboxSpec). Unused with Egress.
	Standby *Standby
}

// sandboxID names a sandbox of server: mcp-<server>-<ulid>.
func sandboxID(server string) string {
	return "mcp-" + server + "-" + strings.ToLower(ulid.Make().String())
}

// serverCPUPeriod is the period of a server's CPU quota: long enough for
// node's or python's multi-threaded start to run on every CPU, within
// its quota and burst, without being throttled.
const serverCPUPeriod = 500 * time.Millisecond

// SandboxSpec is the sandbox every start of sb makes: all but its id,
// environment, stdio and network. Its CPU quota is counted over
// serverCPUPeriod and may burst by as much again out of what it left
// unused (its standby sandbox idled before its start); its average stays
// CPU.
func (sb *Sandboxed) SandboxSpec() sandbox.Spec {
	return sandbox.Spec{
		SkillDir: sb.LauncherDir, Entrypoint: "main",
		MemoryMB: sb.MemoryMB, PidsMax: sb.PidsMax, CPU: sb.CPU, CPUBurst: sb.CPU, CPUPeriod: serverCPUPeriod,
		ProfilesDir: sb.ProfilesDir, SeccompProfile: sb.SeccompProfile, Binds: sb.Binds,
	}
}

// WriteLauncher writes dir/main: a shell script that execs command with
// args, each quoted for the shell.
func WriteLauncher(dir, command string, args []string) error {
	var b strings.Builder
	b.WriteString("#!/bin/sh\nexec")
	for _, a := range append([]string{command}, args...) {
		b.WriteString(" '")
		b.WriteString(strings.ReplaceAll(a, "'", `'\''`))
		b.WriteString("'")
	}
	b.WriteString("\n")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".main-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	_, err = f.WriteString(b.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o755) // whatever the umask
	}
	if err != nil {
		return err
	}
	return os.Rename(f.Name(), filepath.Join(dir, "main"))
}

// Transport returns the transport factory: each connection starts a new
// sandbox running the server, speaking MCP over its stdin and stdout.
func (sb *Sandboxed) Transport() (func(context.Context) (mcp.Transport, error), error) {
	for _, b := range sb.Binds {
		if !filepath.IsAbs(b.Path) || filepath.Clean(b.Path) != b.Path || b.Path == "/" {
			return nil, fmt.Errorf("mcpclient: bind %q: must be an absolute, clean path other than /", b.Path)
		}
	}
	if err := WriteLauncher(sb.LauncherDir, sb.Command, sb.Args); err != nil {
		return nil, fmt.Errorf("mcpclient: launcher: %w", err)
	}
	return sb.start, nil
}

func (sb *Sandboxed) start(context.Context) (mcp.Transport, error) {
	stderr, env := sb.Stderr, sb.Env
	var stderrCloser io.Closer
	if sb.Prepare != nil {
		more, w, err := sb.Prepare()
		if err != nil {
			return nil, err
		}
		env = append(slices.Clip(env), more...)
		stderr, stderrCloser = w, w
	}
	if stderr == nil {
		stderr = io.Discard
	}
	ok := false
	defer func() {
		if !ok && stderrCloser != nil {
			stderrCloser.Close()
		}
	}()
	pipes := &sandbox.Pipes{}
	var proxy *egressProxy
	var err error
	p, id := sb.activateStandby(sandbox.Activation{Env: env, Stderr: stderr, Pipes: pipes})
	if p == nil {
		p, id, err = sb.startCold(env, stderr, pipes, &proxy)
	}
	if err != nil {
		if proxy != nil {
			proxy.Close()
		}
		return nil, err
	}
	run := &sandboxRun{p: p, runner: sb.Runner, id: id, in: pipes.Stdin, out: pipes.Stdout, waited: make(chan struct{}), grace: sb.StopGrace}
	if run.grace <= 0 {
		run.grace = 2 * time.Second
	}
	ok = true
	go func() {
		// The server's end (exit, crash, kill) is EOF on its stdout (every
		// process of the sandbox that held it is gone): the session ends,
		// and so do its calls.
		_, _ = p.Wait()
		if stderrCloser != nil {
			stderrCloser.Close()
		}
		if proxy != nil {
			proxy.Close()
		}
		close(run.waited)
	}()
	// The SDK reads and writes the sandbox's pipes itself (no copying
	// goroutine between) and bounds each message it reads.
	return &mcp.IOTransport{Reader: pipes.Stdout, Writer: run}, nil
}

// activateStandby starts the server in the standby sandbox, if one is
// ready, and returns it and its id; nil when none is, and when the
// standby one would not activate (the server then starts cold).
func (sb *Sandboxed) activateStandby(a sandbox.Activation) (sandbox.Process, string) {
	if sb.Egress != nil {
		return nil, ""
	}
	w := sb.Standby.take()
	if w == nil {
		return nil, ""
	}
	p, err := w.Activate(a)
	if err != nil {
		sb.Standby.discard(w)
		return nil, ""
	}
	return p, w.ID()
}

// startCold makes the server's sandbox and starts it; with Egress, its
// proxy listens in the sandbox's network namespace (*proxy, which the
// caller closes once the sandbox ended).
func (sb *Sandboxed) startCold(env []string, stderr io.Writer, pipes *sandbox.Pipes, proxy **egressProxy) (sandbox.Process, string, error) {
	spec := sb.SandboxSpec()
	spec.ID, spec.Env, spec.Stderr, spec.Pipes = sandboxID(sb.Server), env, stderr, pipes
	if sb.Egress != nil {
		spec.Network = func(ns *os.File) ([]string, error) {
			ln, err := listenInNetNS(ns, "127.0.0.1:0")
			if err != nil {
				return nil, fmt.Errorf("egress proxy: %w", err)
			}
			*proxy = sb.Egress.serve(sb.Server, ln)
			return proxyEnv(ln.Addr().String()), nil
		}
	}
	if _, err := sb.Runner.Check(spec); err != nil {
		return nil, "", err
	}
	if _, err := sb.Runner.Reserve(spec.ID); err != nil {
		return nil, "", err
	}
	p, err := sb.Runner.Start(spec)
	if err != nil {
		sb.Runner.Release(spec.ID)
		return nil, "", err
	}
	return p, spec.ID, nil
}

// sandboxRun is a running server's stdin; closing it ends the sandbox.
type sandboxRun struct {
	p      sandbox.Process
	runner sandbox.Runner
	id     string
	in     io.WriteCloser
	out    io.Closer
	waited chan struct{}
	grace  time.Duration
	once   sync.Once
	err    error
}

func (r *sandboxRun) Write(b []byte) (int, error) { return r.in.Write(b) }

// Close closes the server's stdin, waits StopGrace for it to exit, kills
// the sandbox if it did not, and destroys it.
func (r *sandboxRun) Close() error {
	r.once.Do(func() {
		r.in.Close()
		select {
		case <-r.waited:
		case <-time.After(r.grace):
			_ = r.p.KillAll()
			<-r.waited
		}
		r.out.Close()
		r.err = r.p.Close()
		r.runner.Release(r.id)
		if errors.Is(r.err, os.ErrNotExist) {
			r.err = nil
		}
	})
	return r.err
}

// Close closes W when it is an io.Closer.
func (c *CappedWriter) Close() error {
	if cl, ok := c.W.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// CappedWriter writes to w until max bytes were written, then drops the
// rest and notes once that it did: a server's stderr cannot fill the disk.
type CappedWriter struct {
	mu   sync.Mutex
	W    io.Writer
	Max  int64
	n    int64
	full bool
}

func (c *CappedWriter) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.full {
		return len(b), nil
	}
	if room := c.Max - c.n; int64(len(b)) > room {
		_, _ = c.W.Write(b[:room])
		_, _ = io.WriteString(c.W, "\n[cyberos: stderr over the cap; the rest dropped]\n")
		c.n, c.full = c.Max, true
		return len(b), nil
	}
	c.n += int64(len(b))
	_, err := c.W.Write(b)
	if err != nil {
		c.full = true // a failing log drops the rest rather than the server
	}
	return len(b), nil
}
