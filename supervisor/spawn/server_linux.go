package spawn

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"

	_ "github.com/opencontainers/cgroups/devices" // device rules in the cgroup manager
	"github.com/opencontainers/runc/libcontainer"
	_ "github.com/opencontainers/runc/libcontainer/nsenter" // joins namespaces before the Go runtime starts in "init"
	"golang.org/x/sys/unix"
)

// init pins the main goroutine to the main thread. libcontainer changes
// namespaces on the thread it runs on; without this the caller's main
// thread was seen left inside the first container's mount namespace
// (DESIGN.md). Proven by TestSupervisorStaysInHostMountNS in integration/.
func init() {
	runtime.LockOSThread()
}

// ServeArg is the argument the runner starts the helper with; the socket is
// its fd 3.
const ServeArg = "serve"

// Main is cyberos-spawn's main. As "init" it is libcontainer's container
// init, re-executed into every new container; as ServeArg it serves the
// runner that started it until the runner closes the socket.
func Main() {
	if len(os.Args) > 1 && os.Args[1] == "init" {
		containerInit()
	}
	if len(os.Args) != 2 || os.Args[1] != ServeArg {
		fmt.Fprintln(os.Stderr, "cyberos-spawn: the sandbox creation helper; cyberos starts it, it is not run by hand")
		os.Exit(2)
	}
	// Close-on-exec before anything else: the containers this process
	// starts must not inherit the runner's socket.
	unix.CloseOnExec(3)
	f := os.NewFile(3, "spawn socket")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cyberos-spawn:", err)
		os.Exit(2)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		fmt.Fprintln(os.Stderr, "cyberos-spawn: fd 3 is not a unix socket")
		os.Exit(2)
	}
	if err := Serve(uc); err != nil {
		fmt.Fprintln(os.Stderr, "cyberos-spawn:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// containerInit runs libcontainer's container init; it never returns.
func containerInit() {
	if os.Getenv("_LIBCONTAINER_INITTYPE") == "standard" {
		go exitIfControlHangsUp()
	}
	libcontainer.Init()
}

// controlFD is the init's end of the control pipe: the init's second extra
// file, cyberos-init's CONTROL_FD.
const controlFD = 4

// exitIfControlHangsUp ends a container init whose supervisor is gone
// before the init execs cyberos-init. Libcontainer's init waits for the
// supervisor to open the container's exec fifo, and would wait forever if
// the supervisor died in between; the control pipe's write end is the
// supervisor's, so a hang-up with no message on it means it died (or
// dropped the sandbox). A message means the sandbox was activated: stop
// watching, cyberos-init reads it.
func exitIfControlHangsUp() {
	var st unix.Stat_t
	if unix.Fstat(controlFD, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return
	}
	if fl, err := unix.FcntlInt(controlFD, unix.F_GETFL, 0); err != nil || fl&unix.O_ACCMODE != unix.O_RDONLY {
		return
	}
	fds := []unix.PollFd{{Fd: controlFD, Events: unix.POLLIN}}
	for {
		_, err := unix.Poll(fds, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil || fds[0].Revents&(unix.POLLIN|unix.POLLNVAL) != 0 {
			return
		}
		if fds[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0 {
			os.Exit(1)
		}
	}
}

// server holds the containers and processes it made for one runner.
type server struct {
	conn       *net.UnixConn
	wmu        sync.Mutex
	mu         sync.Mutex
	containers map[string]*libcontainer.Container
	procs      map[uint64]*libcontainer.Process
	next       uint64
}

// Serve answers conn's requests, each in its own goroutine (wait blocks),
// until conn reaches EOF. The containers it made are left running: a
// runner that is gone cleans its leftovers when it starts again.
func Serve(conn *net.UnixConn) error {
	s := &server{conn: conn, containers: map[string]*libcontainer.Container{}, procs: map[uint64]*libcontainer.Process{}}
	buf := make([]byte, maxMessage)
	oob := make([]byte, unix.CmsgSpace(maxFiles*4))
	for {
		n, oobn, flags, _, err := conn.ReadMsgUnix(buf, oob)
		if errors.Is(err, io.EOF) {
			return nil // the runner closed its end
		}
		if err != nil {
			return err
		}
		if n == 0 && oobn == 0 {
			return nil // the runner closed its end
		}
		files, ferr := receivedFiles(oob[:oobn], flags)
		var req request
		if err := json.Unmarshal(buf[:n], &req); err != nil {
			closeAll(files)
			return fmt.Errorf("bad request: %w", err)
		}
		if flags&unix.MSG_TRUNC != 0 {
			ferr = errors.New("request larger than the helper's buffer")
		}
		if ferr != nil {
			closeAll(files)
			s.send(reply{ID: req.ID, Err: ferr.Error()})
			continue
		}
		go func() { s.send(s.handle(&req, files)) }()
	}
}

// receivedFiles turns a message's SCM_RIGHTS into files (close-on-exec:
// Go's ReadMsgUnix receives with MSG_CMSG_CLOEXEC).
func receivedFiles(oob []byte, flags int) ([]*os.File, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			return files, err
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "passed"))
		}
	}
	if flags&unix.MSG_CTRUNC != 0 {
		return files, errors.New("too many files passed with one request")
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

func (s *server) send(r reply) {
	b, err := json.Marshal(r)
	if err != nil {
		b, _ = json.Marshal(reply{ID: r.ID, Err: err.Error()})
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	_, _, _ = s.conn.WriteMsgUnix(b, nil, nil)
}

func (s *server) handle(req *request, files []*os.File) reply {
	defer closeAll(files) // the started process has its own copies
	r := reply{ID: req.ID}
	var err error
	switch req.Op {
	case opCreate:
		r.Created, r.Handle, r.Pid, err = s.create(req, files)
	case opExec:
		r.Handle, r.Pid, err = s.exec(req, files)
	case opStatus:
		var st libcontainer.Status
		st, err = s.status(req.StateRoot, req.Container)
		r.Status = int(st)
	case opKill:
		var c *libcontainer.Container
		if c, err = s.container(req.StateRoot, req.Container); err == nil {
			err = c.Signal(syscall.Signal(req.Signal))
		}
	case opSignal:
		var p *libcontainer.Process
		if p, err = s.process(req.Handle, false); err == nil {
			err = p.Signal(syscall.Signal(req.Signal))
		}
	case opWait:
		r.Waited, r.WaitStatus, err = s.wait(req.Handle)
	case opDestroy:
		err = s.destroy(req.StateRoot, req.Container)
	default:
		err = fmt.Errorf("unknown operation %q", req.Op)
	}
	if err != nil {
		r.Err = err.Error()
	}
	return r
}

// process builds the libcontainer.Process a request describes from the
// files passed with it.
func process(spec *procSpec, files []*os.File) (*libcontainer.Process, error) {
	if spec == nil {
		return nil, errors.New("no process in the request")
	}
	if len(files) != 3+spec.Extra {
		return nil, fmt.Errorf("the process needs %d files, %d were passed", 3+spec.Extra, len(files))
	}
	return &libcontainer.Process{
		Args: spec.Args, Env: spec.Env, UID: spec.UID, GID: spec.GID, Cwd: spec.Cwd, Init: spec.Init,
		Stdin: files[0], Stdout: files[1], Stderr: files[2], ExtraFiles: files[3:],
	}, nil
}

func (s *server) create(req *request, files []*os.File) (created bool, handle uint64, pid int, err error) {
	if req.Config == nil {
		return false, 0, 0, errors.New("no config in the request")
	}
	proc, err := process(req.Process, files)
	if err != nil {
		return false, 0, 0, err
	}
	c, err := libcontainer.Create(req.StateRoot, req.Container, req.Config)
	if err != nil {
		return false, 0, 0, fmt.Errorf("sandbox create: %w", err)
	}
	s.mu.Lock()
	s.containers[req.Container] = c
	s.mu.Unlock()
	start := run
	if req.Process.Hold {
		start = (*libcontainer.Container).Start
	}
	if err := start(c, proc); err != nil {
		return true, 0, 0, fmt.Errorf("sandbox start: %w", err)
	}
	pid, _ = proc.Pid()
	return true, s.keep(proc), pid, nil
}

func (s *server) exec(req *request, files []*os.File) (handle uint64, pid int, err error) {
	c, err := s.container(req.StateRoot, req.Container)
	if err != nil {
		return 0, 0, err
	}
	proc, err := process(req.Process, files)
	if err != nil {
		return 0, 0, err
	}
	if err := run(c, proc); err != nil {
		return 0, 0, fmt.Errorf("sandbox exec: %w", err)
	}
	pid, _ = proc.Pid()
	return s.keep(proc), pid, nil
}

func (s *server) keep(p *libcontainer.Process) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	s.procs[s.next] = p
	return s.next
}

// process returns the process of a handle; take removes it (wait).
func (s *server) process(h uint64, take bool) (*libcontainer.Process, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p, ok := s.procs[h]
	if !ok {
		return nil, fmt.Errorf("no process %d", h)
	}
	if take {
		delete(s.procs, h)
	}
	return p, nil
}

// container returns a container this helper made, or loads it from its
// state (one a previous helper of the runner made).
func (s *server) container(root, id string) (*libcontainer.Container, error) {
	s.mu.Lock()
	c, ok := s.containers[id]
	s.mu.Unlock()
	if ok {
		return c, nil
	}
	return libcontainer.Load(root, id)
}

func (s *server) status(root, id string) (libcontainer.Status, error) {
	c, err := s.container(root, id)
	if err != nil {
		return libcontainer.Stopped, err
	}
	return c.Status()
}

func (s *server) wait(h uint64) (bool, uint32, error) {
	p, err := s.process(h, true)
	if err != nil {
		return false, 0, err
	}
	ps, err := p.Wait()
	if ps == nil {
		return false, 0, err
	}
	ws, _ := ps.Sys().(syscall.WaitStatus)
	return true, uint32(ws), nil
}

func (s *server) destroy(root, id string) error {
	c, err := s.container(root, id)
	if err != nil {
		return err
	}
	if err := c.Destroy(); err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.containers, id)
	s.mu.Unlock()
	return nil
}

// run is c.Run(proc), with a panic inside libcontainer turned into an
// error: a start that takes libcontainer over a minute (seen with 100
// starts at once in a VM under software emulation and memory pressure) hits
// a race in runc v1.5.3's mount-source helper (process_linux.go: the request
// channel is closed by a 1-minute context while a request is being sent:
// "send on closed channel"). The start failed; it is not a helper bug.
func run(c *libcontainer.Container, proc *libcontainer.Process) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("libcontainer panicked: %v", v)
		}
	}()
	return c.Run(proc)
}
