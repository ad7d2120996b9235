// Command trysyscall calls each syscall every shipped profile must refuse,
// and a few that tell the profiles apart (x_…), with harmless arguments, and
// prints {"name": "errno name or ok"} as JSON.
// All attempts run on one locked thread.
package main

import (
	"encoding/json"
	"os"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

func errnoName(e unix.Errno) string {
	switch e {
	case 0:
		return "ok"
	case unix.EPERM:
		return "EPERM"
	case unix.ENOSYS:
		return "ENOSYS"
	case unix.EACCES:
		return "EACCES"
	case unix.EINVAL:
		return "EINVAL"
	case unix.EFAULT:
		return "EFAULT"
	case unix.EBADF:
		return "EBADF"
	case unix.ENOENT:
		return "ENOENT"
	}
	return e.Error()
}

func main() {
	runtime.LockOSThread()
	const nsFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUSER
	calls := []struct {
		name string
		nr   uintptr
		args [6]uintptr
	}{
		{"mount", unix.SYS_MOUNT, [6]uintptr{}},
		{"umount2", unix.SYS_UMOUNT2, [6]uintptr{}},
		{"pivot_root", unix.SYS_PIVOT_ROOT, [6]uintptr{}},
		{"chroot", unix.SYS_CHROOT, [6]uintptr{}},
		{"unshare", unix.SYS_UNSHARE, [6]uintptr{unix.CLONE_NEWUSER}},
		{"setns", unix.SYS_SETNS, [6]uintptr{^uintptr(0)}},
		{"ptrace", unix.SYS_PTRACE, [6]uintptr{unix.PTRACE_TRACEME}},
		{"process_vm_readv", unix.SYS_PROCESS_VM_READV, [6]uintptr{1}},
		{"process_vm_writev", unix.SYS_PROCESS_VM_WRITEV, [6]uintptr{1}},
		{"keyctl", unix.SYS_KEYCTL, [6]uintptr{}},
		{"add_key", unix.SYS_ADD_KEY, [6]uintptr{}},
		{"request_key", unix.SYS_REQUEST_KEY, [6]uintptr{}},
		{"bpf", unix.SYS_BPF, [6]uintptr{}},
		{"perf_event_open", unix.SYS_PERF_EVENT_OPEN, [6]uintptr{}},
		{"io_uring_setup", unix.SYS_IO_URING_SETUP, [6]uintptr{}},
		{"io_uring_enter", unix.SYS_IO_URING_ENTER, [6]uintptr{^uintptr(0)}},
		{"io_uring_register", unix.SYS_IO_URING_REGISTER, [6]uintptr{^uintptr(0)}},
		{"userfaultfd", unix.SYS_USERFAULTFD, [6]uintptr{}},
		{"kexec_load", unix.SYS_KEXEC_LOAD, [6]uintptr{}},
		{"kexec_file_load", unix.SYS_KEXEC_FILE_LOAD, [6]uintptr{^uintptr(0), ^uintptr(0)}},
		{"init_module", unix.SYS_INIT_MODULE, [6]uintptr{}},
		{"finit_module", unix.SYS_FINIT_MODULE, [6]uintptr{^uintptr(0)}},
		{"delete_module", unix.SYS_DELETE_MODULE, [6]uintptr{}},
		{"open_by_handle_at", unix.SYS_OPEN_BY_HANDLE_AT, [6]uintptr{^uintptr(0)}},
		{"swapon", unix.SYS_SWAPON, [6]uintptr{}},
		{"swapoff", unix.SYS_SWAPOFF, [6]uintptr{}},
		{"reboot", unix.SYS_REBOOT, [6]uintptr{}},
		{"acct", unix.SYS_ACCT, [6]uintptr{}},
		{"quotactl", unix.SYS_QUOTACTL, [6]uintptr{}},
		{"settimeofday", unix.SYS_SETTIMEOFDAY, [6]uintptr{}},
		{"clock_settime", unix.SYS_CLOCK_SETTIME, [6]uintptr{}},
		{"clone_newns", unix.SYS_CLONE, [6]uintptr{nsFlags}},
		{"clone3", unix.SYS_CLONE3, [6]uintptr{}},
	}
	out := map[string]string{}
	for _, c := range calls {
		_, _, e := unix.RawSyscall6(c.nr, c.args[0], c.args[1], c.args[2], c.args[3], c.args[4], c.args[5])
		out[c.name] = errnoName(e)
	}
	// Controls: allowed calls must not be refused.
	_, _, e := unix.RawSyscall(unix.SYS_GETPID, 0, 0, 0)
	out["control_getpid"] = errnoName(e)

	// x_ calls tell the shipped profiles apart (integration/seccomp_test.go
	// has each profile's expectation). Arguments make each fail early or do
	// nothing when allowed; an fd it gets is closed.
	var zero byte
	extra := []struct {
		name string
		nr   uintptr
		args [6]uintptr
	}{
		{"x_socket_unix", unix.SYS_SOCKET, [6]uintptr{unix.AF_UNIX, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}},
		{"x_socket_inet", unix.SYS_SOCKET, [6]uintptr{unix.AF_INET, unix.SOCK_STREAM | unix.SOCK_CLOEXEC}},
		{"x_socket_netlink", unix.SYS_SOCKET, [6]uintptr{unix.AF_NETLINK, unix.SOCK_RAW | unix.SOCK_CLOEXEC}},
		{"x_bind", unix.SYS_BIND, [6]uintptr{^uintptr(0)}},
		{"x_ioctl_tcgets", unix.SYS_IOCTL, [6]uintptr{0, unix.TCGETS, uintptr(unsafe.Pointer(&zero))}},
		{"x_ioctl_tiocsti", unix.SYS_IOCTL, [6]uintptr{0, unix.TIOCSTI, uintptr(unsafe.Pointer(&zero))}},
		{"x_ioctl_tiocswinsz", unix.SYS_IOCTL, [6]uintptr{^uintptr(0), unix.TIOCSWINSZ}},
		{"x_personality_query", unix.SYS_PERSONALITY, [6]uintptr{0xFFFFFFFF}},
		{"x_setresuid_noop", unix.SYS_SETRESUID, [6]uintptr{^uintptr(0), ^uintptr(0), ^uintptr(0)}},
		{"x_memfd_create", unix.SYS_MEMFD_CREATE, [6]uintptr{}},
		{"x_inotify_init1", unix.SYS_INOTIFY_INIT1, [6]uintptr{unix.IN_CLOEXEC}},
		{"x_linkat", unix.SYS_LINKAT, [6]uintptr{^uintptr(0), 0, ^uintptr(0), 0}},
		{"x_mknodat", unix.SYS_MKNODAT, [6]uintptr{^uintptr(0)}},
		{"x_io_setup", unix.SYS_IO_SETUP, [6]uintptr{}},
		{"x_shmget", unix.SYS_SHMGET, [6]uintptr{0, 0, 0}},
		{"x_getppid", unix.SYS_GETPPID, [6]uintptr{}},
		// mseal (462 on every architecture; Linux 6.10) is newer than any
		// call the shipped profiles name: the filter's ENOSYS stub answers
		// (the profile's default would be EPERM, the kernel EINVAL).
		{"x_mseal", 462, [6]uintptr{0, 0, ^uintptr(0)}},
	}
	for _, c := range extra {
		r, _, e := unix.RawSyscall6(c.nr, c.args[0], c.args[1], c.args[2], c.args[3], c.args[4], c.args[5])
		out[c.name] = errnoName(e)
		if e == 0 && (c.nr == unix.SYS_SOCKET || c.nr == unix.SYS_INOTIFY_INIT1) {
			unix.Close(int(r))
		}
	}
	json.NewEncoder(os.Stdout).Encode(out)
}
