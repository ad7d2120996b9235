// Command hostile is a skill that attacks its own sandbox from inside and
// reports, as one JSON object on stdout, what each attempt got: "ok" or the
// errno name. Its args pick the attack: {"op": "...", ...}. Ops:
//
//	landlock   read/list what only Landlock refuses, and controls
//	proc1root  reach the host through /proc/1/root, /proc/1/cwd
//	exec       run args.path (a setuid copy of this probe) with op ids
//	ids        this process's uids and effective capabilities
//	paths      stat/read/append/create each of args.paths (host paths)
//	socket     unlink, rename, chmod, write the broker socket, then call it
//	neighbour  reach another invocation: args.sockets, args.pids
//	tiocsti    push a character into a terminal
//	fds        open files until the kernel refuses
//	tmpfill    write /tmp (and /dev/shm) until full
//	spin       burn args.threads CPUs for args.seconds
//	aio        take AIO contexts (host-wide fs.aio-nr) while the call lets it
//	mapfiles   pin open files (host-wide fs.file-nr) with mappings, fds closed
//	tcpfill    fill loopback TCP buffers, up to args.mib MiB
package main

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

type args struct {
	Op      string   `json:"op"`
	Path    string   `json:"path"`
	Paths   []string `json:"paths"`
	Sockets []string `json:"sockets"`
	Pids    []int    `json:"pids"`
	Threads int      `json:"threads"`
	Seconds float64  `json:"seconds"`
	Marker  string   `json:"marker"`
	MiB     int      `json:"mib"`
}

// res turns an error into "ok" or its errno name.
func res(err error) string {
	if err == nil {
		return "ok"
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}

func main() {
	var a args
	if err := json.NewDecoder(os.Stdin).Decode(&a); err != nil {
		fmt.Fprintln(os.Stderr, "args:", err)
		os.Exit(2)
	}
	out := map[string]any{}
	switch a.Op {
	case "landlock":
		landlock(out)
	case "proc1root":
		proc1root(out, a)
	case "exec":
		execIDs(out, a.Path)
	case "ids":
		ids(out)
	case "paths":
		paths(out, a.Paths)
	case "socket":
		brokerSocket(out)
	case "neighbour":
		neighbour(out, a)
	case "tiocsti":
		tiocsti(out)
	case "fds":
		fds(out)
	case "tmpfill":
		fill(out, "tmp", "/tmp/fill")
		fill(out, "shm", "/dev/shm/fill")
	case "spin":
		spin(out, a)
	case "aio":
		aio(out)
	case "mapfiles":
		mapFiles(out)
	case "tcpfill":
		tcpFill(out, a.MiB)
	default:
		fmt.Fprintln(os.Stderr, "unknown op", a.Op)
		os.Exit(2)
	}
	json.NewEncoder(os.Stdout).Encode(out)
}

func readErr(p string) error { _, err := os.ReadFile(p); return err }

func landlock(out map[string]any) {
	// The skeleton's stamp file is in the sandbox's root directory: mounted,
	// mode 0644, readable by any uid, and outside every Landlock rule.
	var st unix.Stat_t
	out["skeleton_stat"] = res(unix.Stat("/.cyberos-skeleton", &st))
	out["skeleton_mode"] = fmt.Sprintf("%o", st.Mode&0o777)
	out["skeleton_read"] = res(readErr("/.cyberos-skeleton"))
	_, err := os.ReadDir("/")
	out["root_list"] = res(err)
	_, err = os.ReadDir("/run/cyberos")
	out["run_list"] = res(err)
	// Controls: what the rules allow.
	out["etc_read"] = res(readErr("/etc/passwd"))
	out["proc_read"] = res(readErr("/proc/self/status"))
	out["tmp_write"] = res(os.WriteFile("/tmp/landlock-probe", []byte("x"), 0o644))
	out["proc_write"] = res(os.WriteFile("/proc/self/comm", []byte("x"), 0))
}

func proc1root(out map[string]any, a args) {
	l, err := os.Readlink("/proc/1/root")
	out["root_link"] = l + "|" + res(err)
	b, err := os.ReadFile("/proc/1/root/etc/hostname")
	out["hostname_via_proc1"] = strings.TrimSpace(string(b)) + "|" + res(err)
	// A host file the test made: must not be reachable by any route.
	for _, p := range []string{a.Marker, "/proc/1/root" + a.Marker, "/proc/1/cwd" + a.Marker,
		"/proc/1/root/../../../.." + a.Marker, "/proc/self/root" + a.Marker} {
		out["marker "+p] = res(readErr(p))
	}
	fd, err := unix.Open("/proc/1/root", unix.O_PATH|unix.O_DIRECTORY, 0)
	if err == nil {
		_, err = unix.Openat(fd, "../../../.."+a.Marker, unix.O_RDONLY, 0)
		unix.Close(fd)
	}
	out["marker openat(/proc/1/root, ../..)"] = res(err)
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, n)
		}
	}
	out["pids"] = pids
}

func execIDs(out map[string]any, path string) {
	cmd := exec.Command(path)
	cmd.Stdin = strings.NewReader(`{"op":"ids"}`)
	b, err := cmd.Output()
	out["exec"] = res(err)
	var got map[string]any
	json.Unmarshal(b, &got)
	out["child"] = got
	self := map[string]any{}
	ids(self)
	out["self"] = self
	var st unix.Stat_t
	unix.Stat(path, &st)
	out["file_mode"] = fmt.Sprintf("%o", st.Mode&0o7777)
	out["file_uid"] = st.Uid
}

func ids(out map[string]any) {
	r, e, s := unix.Getresuid()
	rg, eg, sg := unix.Getresgid()
	out["ruid"], out["euid"], out["suid"] = r, e, s
	out["rgid"], out["egid"], out["sgid"] = rg, eg, sg
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "CapEff" || k == "CapPrm") {
			out[k] = strings.TrimSpace(v)
		}
	}
}

func paths(out map[string]any, ps []string) {
	for _, p := range ps {
		var st unix.Stat_t
		out[p+" stat"] = res(unix.Lstat(p, &st))
		out[p+" read"] = res(readErr(p))
		fd, err := unix.Open(p, unix.O_WRONLY|unix.O_APPEND|unix.O_NOFOLLOW, 0)
		if err == nil {
			unix.Close(fd)
		}
		out[p+" append"] = res(err)
		fd, err = unix.Open(p+".hostile", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL, 0o644)
		if err == nil {
			unix.Close(fd)
		}
		out[p+" create"] = res(err)
	}
}

const sock = "/run/cyberos/broker.sock"

// call makes one JSON-RPC call on a fresh connection to path.
func call(path, method string) (string, error) {
	c, err := net.Dial("unix", path)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	body := []byte(`{"jsonrpc":"2.0","id":1,"method":"` + method + `"}`)
	var h [4]byte
	binary.BigEndian.PutUint32(h[:], uint32(len(body)))
	if _, err := c.Write(append(h[:], body...)); err != nil {
		return "", err
	}
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return "", err
	}
	b := make([]byte, binary.BigEndian.Uint32(h[:]))
	_, err = io.ReadFull(c, b)
	return string(b), err
}

func brokerSocket(out map[string]any) {
	out["unlink"] = res(unix.Unlink(sock))
	out["rename"] = res(unix.Rename(sock, "/run/cyberos/moved.sock"))
	out["rename_over"] = res(os.WriteFile("/tmp/fake.sock", nil, 0o644))
	if out["rename_over"] == "ok" {
		out["rename_over"] = res(unix.Rename("/tmp/fake.sock", sock))
	}
	out["chmod"] = res(unix.Chmod(sock, 0o777))
	out["chown"] = res(unix.Chown(sock, 0, 0))
	fd, err := unix.Open(sock, unix.O_WRONLY|unix.O_TRUNC, 0)
	if err == nil {
		unix.Close(fd)
	}
	out["open_write"] = res(err)
	out["mknod_beside"] = res(unix.Mknod("/run/cyberos/evil.sock", unix.S_IFSOCK|0o666, 0))
	status, err := call(sock, "broker.status")
	out["status"] = status
	out["status_err"] = res(err)
}

func neighbour(out map[string]any, a args) {
	for _, s := range a.Sockets {
		_, err := call(s, "tool.list")
		out["connect "+s] = res(err)
	}
	for _, p := range a.Pids {
		out[fmt.Sprintf("kill %d", p)] = res(unix.Kill(p, 0))
		out[fmt.Sprintf("mem %d", p)] = res(readErr(fmt.Sprintf("/proc/%d/mem", p)))
		out[fmt.Sprintf("environ %d", p)] = res(readErr(fmt.Sprintf("/proc/%d/environ", p)))
	}
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			pids = append(pids, n)
		}
	}
	out["pids"] = pids
	status, err := call(sock, "broker.status")
	out["own_status"] = status
	out["own_status_err"] = res(err)
}

func tiocsti(out map[string]any) {
	c := byte('x')
	for _, fd := range []int{0, 1, 2} {
		_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
		out[fmt.Sprintf("fd%d", fd)] = res(errnoOrNil(e))
	}
	for _, p := range []string{"/dev/tty", "/dev/ptmx", "/dev/console", "/dev/tty0", "/dev/pts/ptmx"} {
		fd, err := unix.Open(p, unix.O_RDWR|unix.O_NOCTTY, 0)
		if err == nil {
			_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCSTI, uintptr(unsafe.Pointer(&c)))
			err = errnoOrNil(e)
			unix.Close(fd)
		}
		out[p] = res(err)
	}
}

func errnoOrNil(e syscall.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

func fds(out map[string]any) {
	var opened []int
	var err error
	for len(opened) < 1<<20 {
		var fd int
		fd, err = unix.Open("/dev/null", unix.O_RDONLY, 0)
		if err != nil {
			break
		}
		opened = append(opened, fd)
	}
	out["opened"] = len(opened)
	out["error"] = res(err)
	var rl unix.Rlimit
	unix.Getrlimit(unix.RLIMIT_NOFILE, &rl)
	out["rlimit_cur"], out["rlimit_max"] = rl.Cur, rl.Max
	out["raise"] = res(unix.Setrlimit(unix.RLIMIT_NOFILE, &unix.Rlimit{Cur: 1 << 20, Max: 1 << 20}))
	for _, fd := range opened {
		unix.Close(fd)
	}
	// The broker still serves once fds are free again.
	status, err := call(sock, "broker.status")
	out["after_status"] = strings.Contains(status, "invocation_id")
	out["after_err"] = res(err)
}

func fill(out map[string]any, name, path string) {
	f, err := os.Create(path)
	if err != nil {
		out[name+"_error"] = res(err)
		return
	}
	chunk := bytes.Repeat([]byte{0xa5}, 1<<20)
	var n int64
	for n < 1<<30 {
		var w int
		w, err = f.Write(chunk)
		n += int64(w)
		if err != nil {
			break
		}
	}
	f.Close()
	out[name+"_bytes"] = n
	out[name+"_error"] = res(err)
	os.Remove(path)
}

func spin(out map[string]any, a args) {
	runtime.GOMAXPROCS(a.Threads + 1)
	start := time.Now()
	end := start.Add(time.Duration(a.Seconds * float64(time.Second)))
	done := make(chan int, a.Threads)
	for range a.Threads {
		go func() {
			n := 0
			for time.Now().Before(end) {
				for range 10000 {
					n++
				}
			}
			done <- n
		}()
	}
	for range a.Threads {
		<-done
	}
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	out["wall_s"] = time.Since(start).Seconds()
	out["cpu_s"] = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// aio asks for 16 AIO contexts of 4096 events each, as many as the host's
// default fs.aio-max-nr holds, and reads the host-wide fs.aio-nr (not
// namespaced) before and while it holds what it got.
func aio(out map[string]any) {
	out["aio_nr_before"] = aioNr()
	var ctxs []uintptr
	var first syscall.Errno
	for range 16 {
		var ctx uintptr
		_, _, e := unix.RawSyscall(unix.SYS_IO_SETUP, 4096, uintptr(unsafe.Pointer(&ctx)), 0)
		if e != 0 {
			first = e
			break
		}
		ctxs = append(ctxs, ctx)
	}
	out["io_setup"] = res(errnoOrNil(first))
	out["contexts"] = len(ctxs)
	out["aio_nr_held"] = aioNr()
	for _, ctx := range ctxs {
		unix.RawSyscall(unix.SYS_IO_DESTROY, ctx, 0, 0)
	}
}

func aioNr() int {
	b, err := os.ReadFile("/proc/sys/fs/aio-nr")
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return -1
	}
	return n
}

// mapFiles opens one small /tmp file again and again, maps each open file
// and closes its descriptor: the mapping keeps the open file (counted in
// the host-wide fs.file-nr) past RLIMIT_NOFILE. It stops at the first
// error and reports how many it pinned and fs.file-nr then.
func mapFiles(out map[string]any) {
	out["file_nr_before"] = fileNr()
	if err := os.WriteFile("/tmp/mapped", make([]byte, 4096), 0o644); err != nil {
		out["error"] = res(err)
		return
	}
	n := 0
	var err error
	for n < 1<<24 {
		var fd int
		if fd, err = unix.Open("/tmp/mapped", unix.O_RDONLY, 0); err != nil {
			break
		}
		_, err = unix.Mmap(fd, 0, 4096, unix.PROT_READ, unix.MAP_SHARED)
		unix.Close(fd)
		if err != nil {
			break
		}
		n++
	}
	out["pinned"] = n
	out["error"] = res(err)
	out["file_nr_held"] = fileNr()
}

func fileNr() int {
	b, err := os.ReadFile("/proc/sys/fs/file-nr")
	if err != nil {
		return -1
	}
	n, err := strconv.Atoi(strings.Fields(string(b))[0])
	if err != nil {
		return -1
	}
	return n
}

// tcpFill connects to itself over loopback TCP again and again and writes,
// without reading, until each connection takes no more: the bytes the
// kernel buffers are counted in the host-wide net.ipv4.tcp_mem (the "mem"
// pages of /proc/net/sockstat). It stops at limit MiB, at an error, or
// when eight connections in a row take nothing.
func tcpFill(out map[string]any, limitMiB int) {
	out["sockstat_before"] = tcpSockstat()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		out["error"] = res(err)
		return
	}
	limit := limitMiB << 20
	buf := make([]byte, 1<<20)
	var keep []net.Conn
	total, idle := 0, 0
	for total < limit && idle < 8 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			out["error"] = res(err)
			break
		}
		s, err := ln.Accept()
		if err != nil {
			out["error"] = res(err)
			break
		}
		keep = append(keep, c, s)
		raw, _ := c.(*net.TCPConn).SyscallConn()
		took := 0
		raw.Control(func(fd uintptr) {
			unix.SetNonblock(int(fd), true)
			for total < limit {
				n, err := unix.Write(int(fd), buf)
				if n > 0 {
					total += n
					took += n
				}
				if err != nil {
					break
				}
			}
		})
		if took < 64<<10 {
			idle++
		} else {
			idle = 0
		}
	}
	out["buffered"] = total
	out["connections"] = len(keep) / 2
	out["sockstat_held"] = tcpSockstat()
	for _, c := range keep {
		c.Close()
	}
}

// tcpSockstat is the TCP line of /proc/net/sockstat.
func tcpSockstat() string {
	b, _ := os.ReadFile("/proc/net/sockstat")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "TCP:") {
			return l
		}
	}
	return ""
}
