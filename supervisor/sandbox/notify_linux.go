package sandbox

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	libseccomp "github.com/seccomp/libseccomp-golang"
	"golang.org/x/sys/unix"

	"cyberos.dev/internal/unixsock"
)

// notifyListener is the seccomp agent of a recording sandbox (`cyberos
// seccomp record`). libcontainer installs the recording filter (every
// allowed call → SCMP_ACT_NOTIFY, seccomp.RecordingConfig) in the
// container's init and in every exec'd process, takes the notify fd from the
// child with pidfd_getfd, and sends it to the listener socket with
// SCM_RIGHTS. For each notification we record the call's name and answer
// "continue": the kernel then runs the call as if the filter had allowed it.
// Refusals of the profile never reach us; the kernel answers them itself.
//
// Why notify rather than the alternatives measured here: SCMP_ACT_LOG
// reaches the kernel log only through audit or printk, rate-limited, so
// calls go missing; SCMP_ACT_TRACE needs a ptrace supervisor for every
// process of the sandbox. A user-notification listener sees every call of
// every process under the filter, in order, and changes nothing the skill
// sees except timing.
type notifyListener struct {
	path string
	ln   *net.UnixListener
	rec  *SyscallRecorder
	stop chan struct{}
	wg   sync.WaitGroup
}

func startNotifyListener(path string, rec *SyscallRecorder) (*notifyListener, error) {
	_ = os.Remove(path)
	ln, err := unixsock.Listen(path, 0o600)
	if err != nil {
		return nil, fmt.Errorf("seccomp record listener: %w", err)
	}
	l := &notifyListener{path: path, ln: ln, rec: rec, stop: make(chan struct{})}
	l.wg.Add(1)
	go l.accept()
	return l, nil
}

func (l *notifyListener) accept() {
	defer l.wg.Done()
	for {
		c, err := l.ln.AcceptUnix()
		if err != nil {
			select {
			case <-l.stop:
			default:
				l.rec.fail(fmt.Errorf("accept: %w", err))
			}
			return
		}
		fd, err := receiveFd(c)
		c.Close()
		if err != nil {
			l.rec.fail(err)
			continue
		}
		l.wg.Add(1)
		go l.serve(fd)
	}
}

// receiveFd reads runc's one message: the container process state as JSON
// with the notify fd attached.
func receiveFd(c *net.UnixConn) (int, error) {
	buf := make([]byte, 64<<10)
	oob := make([]byte, unix.CmsgSpace(4*4))
	_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return -1, fmt.Errorf("read seccomp fd: %w", err)
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return -1, fmt.Errorf("seccomp fd message: %w", err)
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil || len(fds) == 0 {
			continue
		}
		for _, extra := range fds[1:] {
			unix.Close(extra)
		}
		return fds[0], nil
	}
	return -1, errors.New("seccomp fd message carried no fd")
}

// serve answers one filter's notifications until every process using the
// filter is gone (POLLHUP) or the listener is closed.
func (l *notifyListener) serve(fd int) {
	defer l.wg.Done()
	defer unix.Close(fd)
	for {
		select {
		case <-l.stop:
			return
		default:
		}
		pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(pfd, 100)
		if errors.Is(err, unix.EINTR) || n == 0 {
			continue
		}
		if err != nil {
			l.rec.fail(fmt.Errorf("poll seccomp fd: %w", err))
			return
		}
		if pfd[0].Revents&unix.POLLIN == 0 {
			return // POLLHUP: no process uses the filter any more
		}
		req, err := libseccomp.NotifReceive(libseccomp.ScmpFd(fd))
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINTR) {
				continue // the caller died or was interrupted before we read it
			}
			l.rec.fail(fmt.Errorf("seccomp notification: %w", err))
			return
		}
		name, err := req.Data.Syscall.GetNameByArch(req.Data.Arch)
		if err != nil {
			name = fmt.Sprintf("syscall-%d", int(req.Data.Syscall))
		}
		l.rec.add(name)
		resp := &libseccomp.ScmpNotifResp{ID: req.ID, Flags: libseccomp.NotifRespFlagContinue}
		if err := libseccomp.NotifRespond(libseccomp.ScmpFd(fd), resp); err != nil && !errors.Is(err, unix.ENOENT) {
			l.rec.fail(fmt.Errorf("seccomp notification answer: %w", err))
		}
	}
}

// Close stops accepting, waits (bounded) for the filters' users to be gone
// and removes the socket.
func (l *notifyListener) Close() {
	close(l.stop)
	l.ln.Close()
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		l.rec.fail(errors.New("seccomp record listener did not stop"))
	}
	_ = os.Remove(l.path)
}
