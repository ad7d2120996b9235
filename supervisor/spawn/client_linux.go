package spawn

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/opencontainers/runc/libcontainer"
	"github.com/opencontainers/runc/libcontainer/configs"
	"golang.org/x/sys/unix"
)

// ErrHelperGone: the helper exited (or its socket broke); what it had
// started keeps running, and a new helper cleans it up.
var ErrHelperGone = errors.New("the sandbox creation helper is gone")

// CallBound bounds how long the helper may take to answer any request but
// Wait (which lasts as long as its process; Reap is bounded): libcontainer's
// own steps time out within a minute, so a helper silent for longer is
// wedged (stopped, or stuck inside libcontainer). The client then kills it,
// every call still waiting fails with ErrHelperGone, and the runner's next
// call starts a new helper, which loads the old one's containers from their
// state. Without the bound, one wedged helper would hang every invocation's
// deadline kill. A variable for tests.
var CallBound = 2 * time.Minute

// Client is the runner's end of one helper process.
type Client struct {
	conn *net.UnixConn
	cmd  *exec.Cmd

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan reply
	err     error  // set once the connection broke
	killed  string // why the client killed the helper, if it did
	done    chan struct{}
}

// Start starts the helper binary bin and connects to it.
func Start(bin string) (*Client, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("sandbox helper socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "spawn"), os.NewFile(uintptr(fds[1]), "spawn")
	defer theirs.Close()
	// A create request carries a container's config: let one be as large
	// as the helper reads (root may exceed the default send buffer).
	_ = unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, maxMessage)
	cmd := exec.Command(bin, ServeArg)
	cmd.ExtraFiles = []*os.File{theirs} // fd 3
	cmd.Stderr = os.Stderr
	cmd.Env = []string{}
	if err := cmd.Start(); err != nil {
		ours.Close()
		return nil, fmt.Errorf("start the sandbox creation helper %s: %w", bin, err)
	}
	c, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, err
	}
	cl := &Client{conn: c.(*net.UnixConn), cmd: cmd, pending: map[uint64]chan reply{}, done: make(chan struct{})}
	go cl.read()
	return cl, nil
}

// read delivers replies to their callers until the connection breaks, then
// fails every call still waiting.
func (c *Client) read() {
	buf := make([]byte, 64<<10)
	var err error
	for {
		var n int
		n, _, _, _, err = c.conn.ReadMsgUnix(buf, nil)
		if err != nil || n == 0 {
			break
		}
		var r reply
		if err = json.Unmarshal(buf[:n], &r); err != nil {
			break
		}
		c.mu.Lock()
		ch := c.pending[r.ID]
		delete(c.pending, r.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- r
		}
	}
	if err == nil {
		err = errors.New("EOF")
	}
	c.mu.Lock()
	if c.killed != "" {
		err = errors.New(c.killed)
	}
	c.err = fmt.Errorf("%w (%w)", ErrHelperGone, err)
	for id, ch := range c.pending {
		ch <- reply{ID: id, gone: c.err}
		delete(c.pending, id)
	}
	c.mu.Unlock()
	_ = c.cmd.Wait()
	close(c.done)
}

// kill ends a wedged helper; read then fails every waiting call.
func (c *Client) kill(why string) {
	c.mu.Lock()
	if c.killed == "" {
		c.killed = why
	}
	c.mu.Unlock()
	_ = c.cmd.Process.Kill()
}

// Pid is the helper's pid.
func (c *Client) Pid() int { return c.cmd.Process.Pid }

// Alive reports whether the helper still answers.
func (c *Client) Alive() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err == nil
}

// Close closes the socket, which ends the helper, and waits for it.
// Containers it made keep running.
func (c *Client) Close() error {
	err := c.conn.Close()
	<-c.done
	return err
}

// call sends req with files and waits for its reply, at most CallBound
// unless unbounded.
func (c *Client) call(req request, files []*os.File) (reply, error) {
	return c.callBounded(req, files, true)
}

func (c *Client) callBounded(req request, files []*os.File, bounded bool) (reply, error) {
	ch := make(chan reply, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return reply{}, err
	}
	c.next++
	req.ID = c.next
	c.pending[req.ID] = ch
	c.mu.Unlock()
	b, err := json.Marshal(req)
	if err == nil && len(b) > maxMessage {
		err = fmt.Errorf("request of %d bytes, more than the helper's %d", len(b), maxMessage)
	}
	if err == nil {
		var oob []byte
		if len(files) > 0 {
			fds := make([]int, len(files))
			for i, f := range files {
				fds[i] = int(f.Fd())
			}
			oob = unix.UnixRights(fds...)
		}
		_, _, err = c.conn.WriteMsgUnix(b, oob, nil)
	}
	if err != nil {
		c.mu.Lock()
		delete(c.pending, req.ID)
		c.mu.Unlock()
		return reply{}, fmt.Errorf("sandbox helper %s: %w", req.Op, err)
	}
	var r reply
	if !bounded {
		r = <-ch
	} else {
		bound := time.NewTimer(CallBound)
		select {
		case r = <-ch:
		case <-bound.C:
			c.kill(fmt.Sprintf("killed: no answer to %s in %v", req.Op, CallBound))
			r = <-ch // failed by read once the helper's end closed
		}
		bound.Stop()
	}
	if r.gone != nil {
		return r, r.gone
	}
	if r.Err != "" {
		return r, errors.New(r.Err)
	}
	return r, nil
}

// Proc is a process for the helper to start in a container: the fields of
// libcontainer.Process the runner sets.
type Proc struct {
	Args, Env             []string
	UID, GID              int
	Cwd                   string
	Stdin, Stdout, Stderr *os.File
	ExtraFiles            []*os.File
	Hold                  bool // see procSpec.Hold
}

func (p *Proc) spec(init bool) (*procSpec, []*os.File, error) {
	if p.Stdin == nil || p.Stdout == nil || p.Stderr == nil {
		return nil, nil, errors.New("sandbox helper: stdin, stdout and stderr must be files")
	}
	files := append([]*os.File{p.Stdin, p.Stdout, p.Stderr}, p.ExtraFiles...)
	if len(files) > maxFiles {
		return nil, nil, fmt.Errorf("sandbox helper: %d files, at most %d", len(files), maxFiles)
	}
	return &procSpec{Args: p.Args, Env: p.Env, UID: p.UID, GID: p.GID, Cwd: p.Cwd, Init: init, Extra: len(p.ExtraFiles), Hold: p.Hold}, files, nil
}

// Container is a container the helper made (or can load from its state).
type Container struct {
	c         *Client
	stateRoot string
	id        string
}

// Process is a process the helper started in a container.
type Process struct {
	c   *Client
	h   uint64
	pid int
}

// Create makes container id under stateRoot from cfg and runs its init.
// The Container is non-nil once the container exists, even when the init
// did not start: the caller destroys it.
func (c *Client) Create(stateRoot, id string, cfg *configs.Config, init *Proc) (*Container, *Process, error) {
	spec, files, err := init.spec(true)
	if err != nil {
		return nil, nil, err
	}
	r, err := c.call(request{Op: opCreate, StateRoot: stateRoot, Container: id, Config: cfg, Process: spec}, files)
	var k *Container
	if r.Created {
		k = &Container{c: c, stateRoot: stateRoot, id: id}
	}
	if err != nil {
		return k, nil, err
	}
	return k, &Process{c: c, h: r.Handle, pid: r.Pid}, nil
}

// Container names a container of stateRoot that a helper of this runner
// made before (the helper loads its state).
func (c *Client) Container(stateRoot, id string) *Container {
	return &Container{c: c, stateRoot: stateRoot, id: id}
}

func (k *Container) req(op string) request {
	return request{Op: op, StateRoot: k.stateRoot, Container: k.id}
}

// Run starts p in the container: it joins the container's namespaces and
// cgroup, under its seccomp filter, capabilities and no_new_privs.
func (k *Container) Run(p *Proc) (*Process, error) {
	spec, files, err := p.spec(false)
	if err != nil {
		return nil, err
	}
	req := k.req(opExec)
	req.Process = spec
	r, err := k.c.call(req, files)
	if err != nil {
		return nil, err
	}
	return &Process{c: k.c, h: r.Handle, pid: r.Pid}, nil
}

// Status is the container's libcontainer status.
func (k *Container) Status() (libcontainer.Status, error) {
	r, err := k.c.call(k.req(opStatus), nil)
	if err != nil {
		return libcontainer.Stopped, err
	}
	return libcontainer.Status(r.Status), nil
}

// Signal signals the container's init.
func (k *Container) Signal(sig unix.Signal) error {
	req := k.req(opKill)
	req.Signal = int(sig)
	_, err := k.c.call(req, nil)
	return err
}

// Destroy removes the container: its cgroup and its state.
func (k *Container) Destroy() error {
	_, err := k.c.call(k.req(opDestroy), nil)
	return err
}

// Pid is the process's pid.
func (p *Process) Pid() int { return p.pid }

// Signal signals the process (until Wait returned).
func (p *Process) Signal(sig unix.Signal) error {
	_, err := p.c.call(request{Op: opSignal, Handle: p.h, Signal: int(sig)}, nil)
	return err
}

// Wait waits for the process to end and returns its wait status; err is
// set only when there is none.
func (p *Process) Wait() (unix.WaitStatus, error) { return p.wait(false) }

// Reap is Wait for a process that has ended (or was killed): its wait
// status is due at once, so the call is bounded by CallBound like every
// other.
func (p *Process) Reap() (unix.WaitStatus, error) { return p.wait(true) }

func (p *Process) wait(bounded bool) (unix.WaitStatus, error) {
	r, err := p.c.callBounded(request{Op: opWait, Handle: p.h}, nil, bounded)
	if !r.Waited {
		if err == nil {
			err = errors.New("sandbox helper: no wait status")
		}
		return 0, err
	}
	return unix.WaitStatus(r.WaitStatus), nil
}
