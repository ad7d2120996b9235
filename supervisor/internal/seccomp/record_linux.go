package seccomp

import (
	"slices"

	"github.com/opencontainers/runc/libcontainer/configs"
)

// recordBaseline are allowed, not notified, while recording, and always
// part of a recorded profile. runc's init installs the filter and then
// writes the notify fd's number to its parent: until the parent has handed
// the fd to our listener, any notified call on that thread would hang the
// start. write is refused by runc itself for that reason; the rest are
// what the Go runtime may do on that thread in between (memory, locks,
// signals, scheduling). Every Go or libc program needs them anyway.
var recordBaseline = []string{
	"write", "futex", "mmap", "munmap", "madvise", "mprotect", "rt_sigreturn", "rt_sigprocmask",
	"sigaltstack", "sched_yield", "nanosleep", "tgkill", "gettid", "getpid", "exit", "exit_group",
	"clock_gettime",
}

// recordUnnotified are allowed, not notified, while recording, and kept in
// a recorded profile as the base allows them (clone with its conditions).
// A notified call waits for the listener's answer interruptibly: a signal
// arriving meanwhile ends it with EINTR where the base profile would have
// let it run (seccomp_do_user_notification; the filter flag
// SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV narrows that window only from
// libseccomp 2.6, and only once the listener has read the notification;
// Debian 12 has 2.5). Programs expect EINTR where a
// call may return it, but fork never does: in a shell catching SIGCHLD, an
// earlier child's exit during a notified clone made dash print "Cannot fork"
// and the recorded skill fail (seen in the cgroup v2 VM, where the listener
// answers slowly). So the calls that make processes and threads are not
// notified, and a recorded profile always allows them: pids.max, not the
// profile, bounds what a skill may spawn.
var recordUnnotified = []string{"clone", "fork", "vfork"}

// NotNotified lists the calls a recording filter allows without notifying
// the listener (recordBaseline, recordUnnotified): a recorder never sees them.
func NotNotified() []string { return append(slices.Clone(recordBaseline), recordUnnotified...) }

// RecordingConfig turns a loaded profile into the filter `seccomp record`
// runs under: every call the profile allows (conditions included) is
// notified to the listener at listenerPath instead, which records it and
// lets it continue; every refusal and the default action stay as they are.
// So the skill runs exactly as permitted under the base profile, and what it
// used is seen call by call, including what runc's init and cyberos-init do
// after the filter is installed.
func RecordingConfig(base *configs.Seccomp, listenerPath string) *configs.Seccomp {
	c := *base
	c.ListenerPath = listenerPath
	c.Syscalls = make([]*configs.Syscall, 0, len(base.Syscalls))
	for _, s := range base.Syscalls {
		s2 := *s
		if s2.Action == configs.Allow && !slices.Contains(recordBaseline, s2.Name) && !slices.Contains(recordUnnotified, s2.Name) {
			s2.Action = configs.Notify
		}
		c.Syscalls = append(c.Syscalls, &s2)
	}
	return &c
}
