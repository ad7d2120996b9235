/*
 * cyberos-init: the first process (pid 1) of every cyberos sandbox.
 *
 * It starts the skill as its only child, forwards termination signals (the
 * deadline's SIGTERM among them) to it, reaps every orphan, and when the
 * skill ends kills what the skill left behind and writes how it ended to
 * fd 3 for the supervisor:
 *   "exit N\n", "signal N\n", "exec ERRNO\n" when the entrypoint could
 *   not be executed, or "landlock ERRNO\n" when Landlock could not be
 *   applied (the skill was not started).
 *
 * Why the skill is not pid 1 itself: the kernel drops every signal sent to
 * a pid namespace's init for which it has no handler, even signals it sends
 * itself. A skill as pid 1 ignored a default-action SIGTERM, its abort()
 * was seen to end in SIGSEGV (glibc falls through to hlt) instead of
 * SIGABRT, and nothing reaped its orphans.
 *
 * Why C: it is single-threaded, so it takes one pid of the skill's
 * pids.max; a Go init took nine (runtime threads). Built static, it is
 * bind-mounted read-only at /run/cyberos/bin/cyberos-init.
 *
 * Landlock (defense in depth under the mount namespace and seccomp): with
 * "--landlock ABI" it restricts itself, before forking the skill, to the
 * sandbox's own view (rules in landlock_rules below), so the skill and
 * everything it starts inherit the domain. It is applied here, not with
 * go-landlock, because this is the last code that runs before the skill's
 * execve and it must stay a single-threaded C process (see above): the
 * rules can only be made after libcontainer's pivot_root, which happens
 * inside its Go init, and the only program between that and the skill is
 * this one. The supervisor decides the ABI (the kernel's, capped at the
 * newest this file knows, 0 when unavailable) and records it in the
 * invocation's containment; if the kernel then refuses what was asked,
 * this reports "landlock ERRNO" on fd 3 and the skill never runs (fail
 * closed: the record never claims more than what ran).
 *
 * "--deadline-ms N" is the backstop of the invocation's deadline: N ms
 * after the skill starts, this kills every process of the sandbox and
 * exits (then the kernel ends the pid namespace), so a sandbox never
 * outlives its deadline even when no supervisor is left to end it. The
 * supervisor passes its own deadline plus a margin: it ends the skill first
 * whenever it is alive.
 *
 * "--control" makes the sandbox ready before its invocation exists (a warm
 * sandbox): after the limits and Landlock are in place, this waits on fd 4
 * for the invocation, then starts the skill. The message is NUL-terminated
 * fields ending with an empty one: the deadline backstop in ms ("0" for
 * none), then the skill's environment, one "NAME=value" per field. EOF
 * with no message means the sandbox was discarded unused: exit 0 without
 * starting anything. A message that is too long, malformed or cut short
 * by EOF is reported as "control ERRNO" on fd 3 and the skill is not
 * started.
 *
 * After the message fd 4 stays open as the supervisor's lifeline: only the
 * supervisor holds its write end, and keeps it until it has ended the
 * sandbox, so EOF on it means the supervisor died (kill -9, a crash). This
 * then kills the sandbox as at the deadline, within moments, instead of
 * leaving the skill to run unsupervised until its deadline backstop. It
 * asks for SIGIO on that EOF (O_ASYNC), which it waits for with the rest;
 * a profile refusing that fcntl leaves the deadline backstop alone.
 *
 * "--exec" is the mode of the Bash tool's processes, which libcontainer
 * starts in the running sandbox outside this init: apply Landlock, then
 * execvp the program in place (no fork, no status fd), because a Landlock
 * domain only covers the process that made it and its descendants.
 *
 * "--rlimit RESOURCE:SOFT:HARD" (repeatable, numbers as in setrlimit(2),
 * 18446744073709551615 = unlimited) sets a resource limit on itself first
 * thing, in both modes, so the skill and the Bash tool's processes inherit
 * it. The supervisor passes them here when the sandbox's user namespace is
 * owned by the sandbox's own uid: setting them from the host (prlimit) then
 * needs CAP_SYS_RESOURCE, while lowering one's own limit needs nothing. A
 * limit that cannot be set is reported as "rlimit ERRNO" on fd 3 (the skill
 * is not started).
 *
 * "--seccomp FD:FLAGS" loads the sandbox's seccomp filter before anything
 * else, in both modes: FD holds the compiled program (struct sock_filter
 * array, host order; the supervisor compiles each profile once, as
 * libcontainer's init would at every start), FLAGS are seccomp(2)'s. FD is
 * closed after, so nothing this starts sees it. Until then this process
 * is not dumpable (the supervisor installs it execute-only, and it says so
 * with prctl first thing), so no process of the skill's uid can ptrace it
 * or write its memory and run unfiltered. no_new_privs, which
 * libcontainer sets, lets an unprivileged process load it. A program that
 * cannot be read or loaded is reported as "seccomp ERRNO" on fd 3 (--exec:
 * on stderr) and nothing is started (fail closed).
 *
 * "--userns-hold" runs on the host, not in a sandbox: the supervisor starts
 * it as the sandbox's own unprivileged host uid, it makes a user namespace
 * (so that uid, not root, owns it and is charged for what the sandbox
 * uses), says "ready" on stdout, and keeps the namespace alive until its
 * stdin closes, while the supervisor writes the id maps and libcontainer
 * joins it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define STATUS_FD 3
#define CONTROL_FD 4
#define MAX_CONTROL (64 * 1024)
#define MAX_ENV 256

/*
 * Landlock UAPI (linux/landlock.h), spelled out here because the build
 * host's kernel headers may predate the ABI the running kernel offers.
 * The values are fixed by the kernel's ABI.
 */
#ifndef __NR_landlock_create_ruleset
#define __NR_landlock_create_ruleset 444
#endif
#ifndef __NR_landlock_add_rule
#define __NR_landlock_add_rule 445
#endif
#ifndef __NR_landlock_restrict_self
#define __NR_landlock_restrict_self 446
#endif

#define LL_CREATE_RULESET_VERSION (1U << 0)
#define LL_RULE_PATH_BENEATH 1

#define LL_EXECUTE (1ULL << 0)
#define LL_WRITE_FILE (1ULL << 1)
#define LL_READ_FILE (1ULL << 2)
#define LL_READ_DIR (1ULL << 3)
#define LL_REMOVE_DIR (1ULL << 4)
#define LL_REMOVE_FILE (1ULL << 5)
#define LL_MAKE_CHAR (1ULL << 6)
#define LL_MAKE_DIR (1ULL << 7)
#define LL_MAKE_REG (1ULL << 8)
#define LL_MAKE_SOCK (1ULL << 9)
#define LL_MAKE_FIFO (1ULL << 10)
#define LL_MAKE_BLOCK (1ULL << 11)
#define LL_MAKE_SYM (1ULL << 12)
#define LL_REFER (1ULL << 13)    /* ABI 2 */
#define LL_TRUNCATE (1ULL << 14) /* ABI 3 */
#define LL_IOCTL_DEV (1ULL << 15) /* ABI 5 */

#define LL_SCOPE_ABSTRACT_UNIX_SOCKET (1ULL << 0) /* ABI 6 */
#define LL_SCOPE_SIGNAL (1ULL << 1)               /* ABI 6 */

/* The newest ABI whose access rights this file knows (ABI 7 added only
 * logging flags). Keep in step with landlockMaxABI in the supervisor. */
#define LL_MAX_ABI 7

struct ll_ruleset_attr {
	uint64_t handled_access_fs;
	uint64_t handled_access_net; /* ABI 4 */
	uint64_t scoped;             /* ABI 6 */
};

struct ll_path_beneath_attr {
	uint64_t allowed_access;
	int32_t parent_fd;
} __attribute__((packed));

/* Rights that apply to a file (the rest only make sense on directories). */
#define LL_FILE_RIGHTS (LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_TRUNCATE | LL_IOCTL_DEV)

#define LL_R (LL_READ_FILE | LL_READ_DIR)
#define LL_RX (LL_R | LL_EXECUTE)
/* Read-write in a scratch tmpfs: everything but device nodes (which the
 * skill, without CAP_MKNOD, could not make anyway). */
#define LL_RW (LL_R | LL_WRITE_FILE | LL_REMOVE_DIR | LL_REMOVE_FILE | LL_MAKE_DIR | LL_MAKE_REG | \
	       LL_MAKE_SOCK | LL_MAKE_FIFO | LL_MAKE_SYM | LL_REFER | LL_TRUNCATE)
#define LL_DEV (LL_READ_FILE | LL_WRITE_FILE | LL_TRUNCATE)

/*
 * The sandbox's own view, and nothing else: the read-only system binds and
 * the skill (read, execute), the tiny /etc and /proc (read), the scratch
 * tmpfs /tmp (read-write, execute: its mount allows it and skills run what
 * they write there) and /dev/shm (read-write), and the harmless device
 * nodes (read-write, no ioctl). Not listed, so refused whatever the file
 * modes say: the root directory itself and the skeleton's files in it,
 * /run/cyberos apart from the tool client, and every device ioctl.
 * Paths missing in this sandbox are skipped. The broker socket needs no
 * rule: connecting to a socket is not a filesystem access Landlock
 * handles. TCP is not handled either: the network namespace has only
 * loopback, and skills may serve themselves on it.
 */
static const struct {
	const char *path;
	uint64_t access;
} landlock_rules[] = {
	{"/usr", LL_RX},	 {"/bin", LL_RX},     {"/sbin", LL_RX},	  {"/lib", LL_RX},
	{"/lib32", LL_RX},	 {"/lib64", LL_RX},   {"/libx32", LL_RX},  {"/skill", LL_RX},
	{"/run/cyberos/bin", LL_RX},
	{"/etc", LL_R},		 {"/proc", LL_R},
	{"/tmp", LL_RW | LL_EXECUTE}, {"/dev/shm", LL_RW},
	{"/dev/null", LL_DEV},	 {"/dev/zero", LL_DEV}, {"/dev/full", LL_DEV}, {"/dev/random", LL_DEV},
	{"/dev/urandom", LL_DEV}, {"/dev/tty", LL_DEV},
};

/* Extra rules from --landlock-path ro:PATH | rw:PATH: the host paths bound
 * into this sandbox (an MCP server's files), read+exec or read-write. */
#define MAX_EXTRA_RULES 64
static struct {
	const char *path;
	uint64_t access;
} extra_rules[MAX_EXTRA_RULES];
static int nextra;

static int parse_landlock_path(const char *arg) {
	if (nextra == MAX_EXTRA_RULES || arg[0] == '\0' || arg[1] == '\0' || arg[2] != ':' || arg[3] != '/')
		return -1;
	if (strncmp(arg, "ro", 2) == 0)
		extra_rules[nextra].access = LL_RX;
	else if (strncmp(arg, "rw", 2) == 0)
		extra_rules[nextra].access = LL_RW;
	else
		return -1;
	extra_rules[nextra++].path = arg + 3;
	return 0;
}

/* add_rule grants access beneath path (a missing path is skipped). */
static int add_rule(int rs, const char *path, uint64_t access, uint64_t handled) {
	int fd = open(path, O_PATH | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			return 0;
		int e = errno;
		fprintf(stderr, "cyberos-init: landlock rule %s: %s\n", path, strerror(e));
		return e;
	}
	struct stat st;
	access &= handled;
	if (fstat(fd, &st) == 0 && !S_ISDIR(st.st_mode))
		access &= LL_FILE_RIGHTS;
	struct ll_path_beneath_attr pb = {.allowed_access = access, .parent_fd = fd};
	if (syscall(__NR_landlock_add_rule, rs, LL_RULE_PATH_BENEATH, &pb, 0) < 0) {
		int e = errno;
		fprintf(stderr, "cyberos-init: landlock rule %s: %s\n", path, strerror(e));
		close(fd);
		return e;
	}
	close(fd);
	return 0;
}

/* handled_fs is every filesystem right the given ABI knows. */
static uint64_t handled_fs(int abi) {
	uint64_t h = LL_EXECUTE | LL_WRITE_FILE | LL_READ_FILE | LL_READ_DIR | LL_REMOVE_DIR | LL_REMOVE_FILE |
		     LL_MAKE_CHAR | LL_MAKE_DIR | LL_MAKE_REG | LL_MAKE_SOCK | LL_MAKE_FIFO | LL_MAKE_BLOCK | LL_MAKE_SYM;
	if (abi >= 2)
		h |= LL_REFER;
	if (abi >= 3)
		h |= LL_TRUNCATE;
	if (abi >= 5)
		h |= LL_IOCTL_DEV;
	return h;
}

/*
 * apply_landlock restricts this process (and what it forks or execs) to
 * landlock_rules at exactly the given ABI. It returns 0 or an errno; what
 * failed is said on stderr.
 */
static int apply_landlock(int abi) {
	long have = syscall(__NR_landlock_create_ruleset, NULL, 0, LL_CREATE_RULESET_VERSION);
	if (have < 0) {
		int e = errno;
		fprintf(stderr, "cyberos-init: landlock unavailable: %s\n", strerror(e));
		return e;
	}
	if (have < abi) {
		fprintf(stderr, "cyberos-init: landlock ABI %ld, %d was asked for\n", have, abi);
		return EOPNOTSUPP;
	}
	struct ll_ruleset_attr attr = {.handled_access_fs = handled_fs(abi)};
	if (abi >= 6)
		attr.scoped = LL_SCOPE_ABSTRACT_UNIX_SOCKET | LL_SCOPE_SIGNAL;
	int rs = (int)syscall(__NR_landlock_create_ruleset, &attr, sizeof attr, 0);
	if (rs < 0) {
		int e = errno;
		fprintf(stderr, "cyberos-init: landlock_create_ruleset: %s\n", strerror(e));
		return e;
	}
	for (size_t i = 0; i < sizeof landlock_rules / sizeof landlock_rules[0]; i++) {
		int e = add_rule(rs, landlock_rules[i].path, landlock_rules[i].access, attr.handled_access_fs);
		if (e != 0) {
			close(rs);
			return e;
		}
	}
	for (int i = 0; i < nextra; i++) {
		int e = add_rule(rs, extra_rules[i].path, extra_rules[i].access, attr.handled_access_fs);
		if (e != 0) {
			close(rs);
			return e;
		}
	}
	if (syscall(__NR_landlock_restrict_self, rs, 0) < 0) {
		int e = errno;
		fprintf(stderr, "cyberos-init: landlock_restrict_self: %s\n", strerror(e));
		close(rs);
		return e;
	}
	close(rs);
	return 0;
}

#define MAX_FILTER 4096 /* BPF_MAXINSNS */

/* load_seccomp: see "--seccomp" above; it returns 0 or an errno. */
static int load_seccomp(int fd, unsigned int flags) {
	static struct sock_filter insns[MAX_FILTER];
	struct stat st;
	int e = 0;
	if (fstat(fd, &st) < 0)
		e = errno;
	else if (st.st_size <= 0 || st.st_size % sizeof insns[0] != 0 || st.st_size > (off_t)sizeof insns)
		e = EINVAL;
	else {
		ssize_t n = pread(fd, insns, (size_t)st.st_size, 0);
		if (n != st.st_size)
			e = n < 0 ? errno : EIO;
	}
	close(fd);
	if (e != 0)
		return e;
	struct sock_fprog prog = {.len = (unsigned short)(st.st_size / sizeof insns[0]), .filter = insns};
	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &prog) < 0)
		return errno;
	return 0;
}

static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

static void report(const char *what, int n) {
	dprintf(STATUS_FD, "%s %d\n", what, n);
}

/* REAP_GRACE_MS bounds how long finish waits for the processes it
 * killed: one the kernel keeps (stuck in an uninterruptible wait) is left
 * to it, as every one was when this exited without waiting. */
#define REAP_GRACE_MS 1000

static long long monotonic_ms(void) {
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* reap_killed reaps this process's children until none is left or
 * REAP_GRACE_MS has passed. SIGCHLD is blocked (main), so sigtimedwait
 * waits for the next one to end. */
static void reap_killed(void) {
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	long long until = monotonic_ms() + REAP_GRACE_MS;
	for (;;) {
		pid_t p = waitpid(-1, NULL, WNOHANG);
		if (p > 0 || (p < 0 && errno == EINTR))
			continue;
		if (p < 0)
			return; /* ECHILD: none left */
		long long left = until - monotonic_ms();
		if (left <= 0)
			return;
		struct timespec ts = {left / 1000, (left % 1000) * 1000000L};
		if (sigtimedwait(&chld, NULL, &ts) < 0 && errno == EAGAIN)
			return;
	}
}

/* finish ends the sandbox with its skill: as the pid namespace's init it
 * kills what the skill left behind (its orphans are this process's
 * children now) and reaps them, then reports how the skill ended and
 * closes its ends of the status and output pipes. The supervisor's reads
 * of them then end at once, not once this process's exit has torn the
 * sandbox's namespaces down, and no process of the sandbox is left but
 * this one. A kill that a profile refuses leaves them to the kernel, which
 * kills them when this exits. Outside a pid namespace (tests run it on
 * the host) kill(-1) would reach every process of its uid: not sent. */
static int finish(const char *what, int n, int code) {
	if (getpid() == 1 && kill(-1, SIGKILL) == 0)
		reap_killed();
	report(what, n);
	close(STATUS_FD);
	close(0);
	close(1);
	close(2);
	return code;
}

static int usage(void) {
	fprintf(stderr, "usage: cyberos-init [--seccomp FD:FLAGS] [--rlimit RES:SOFT:HARD]... [--landlock ABI] [--landlock-path ro|rw:PATH]... [--deadline-ms N] [--control] [--exec] -- PROGRAM [ARGS...]\n"
			"       cyberos-init --userns-hold\n");
	return 127;
}

#define MAX_RLIMITS 16

struct init_rlimit {
	int resource;
	struct rlimit lim;
};

/* parse_rlimit reads "RESOURCE:SOFT:HARD"; it returns 0 or -1. */
static int parse_rlimit(const char *s, struct init_rlimit *out) {
	char *end;
	errno = 0;
	long r = strtol(s, &end, 10);
	if (errno || *end != ':' || r < 0 || r >= RLIM_NLIMITS)
		return -1;
	unsigned long long soft = strtoull(end + 1, &end, 10);
	if (errno || *end != ':')
		return -1;
	unsigned long long hard = strtoull(end + 1, &end, 10);
	if (errno || *end != '\0' || soft > hard)
		return -1;
	out->resource = (int)r;
	out->lim.rlim_cur = (rlim_t)soft;
	out->lim.rlim_max = (rlim_t)hard;
	return 0;
}

/* set_rlimits applies every parsed limit; it returns 0 or an errno. */
static int set_rlimits(const struct init_rlimit *l, int n) {
	for (int i = 0; i < n; i++) {
		if (setrlimit(l[i].resource, &l[i].lim) < 0) {
			int e = errno;
			fprintf(stderr, "cyberos-init: setrlimit %d: %s\n", l[i].resource, strerror(e));
			return e;
		}
	}
	return 0;
}

/* userns_hold: see "--userns-hold" above. */
static int userns_hold(void) {
	if (unshare(CLONE_NEWUSER) < 0) {
		fprintf(stderr, "cyberos-init: unshare(CLONE_NEWUSER): %s\n", strerror(errno));
		return 1;
	}
	if (write(STDOUT_FILENO, "ready\n", 6) != 6)
		return 1;
	char buf[64];
	ssize_t n;
	while ((n = read(STDIN_FILENO, buf, sizeof buf)) != 0)
		if (n < 0 && errno != EINTR)
			break;
	return 0;
}

/* control_end returns the length of the message in buf[0..len) up to and
 * including its terminating empty field, or 0 while it is incomplete.
 * Fields are never empty, so the first "\0\0" ends it. */
static size_t control_end(const char *buf, size_t len) {
	for (size_t i = 1; i < len; i++)
		if (buf[i] == '\0' && buf[i - 1] == '\0')
			return i + 1;
	return 0;
}

/*
 * read_control reads the invocation from CONTROL_FD (see "--control"):
 * it returns 0 with *envp and *deadline_ms set, 1 when the sandbox was
 * discarded (EOF before any byte), or an errno. CONTROL_FD stays open
 * (the lifeline).
 */
static int read_control(char ***envp, long long *deadline_ms) {
	static char buf[MAX_CONTROL + 1];
	static char *env[MAX_ENV + 1];
	size_t len = 0, msg = 0;
	while (msg == 0) {
		ssize_t n = read(CONTROL_FD, buf + len, sizeof buf - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno;
		if (n == 0)
			return len == 0 ? 1 : EPIPE;
		len += (size_t)n;
		msg = control_end(buf, len);
		if (msg == 0 && len > MAX_CONTROL)
			return E2BIG;
	}
	if (msg != len)
		return EINVAL; /* bytes after the message */
	len = msg - 1;     /* the fields, each NUL-terminated */
	char *end;
	errno = 0;
	long long v = strtoll(buf, &end, 10);
	if (errno || *end != '\0' || end == buf || v < 0 || v > 2LL * 86400000)
		return EINVAL;
	*deadline_ms = v;
	size_t n = 0;
	for (char *f = end + 1; f < buf + len; f += strlen(f) + 1) {
		if (n == MAX_ENV || strchr(f, '=') == NULL)
			return EINVAL;
		env[n++] = f;
	}
	env[n] = NULL;
	*envp = env;
	return 0;
}

/* watch_lifeline makes EOF (or data) on CONTROL_FD send this process
 * SIGIO; it returns 0 or -1 (said on stderr: the deadline backstop stays). */
static int watch_lifeline(void) {
	int fl = fcntl(CONTROL_FD, F_GETFL);
	if (fl < 0 || fcntl(CONTROL_FD, F_SETOWN, getpid()) < 0 ||
	    fcntl(CONTROL_FD, F_SETFL, fl | O_ASYNC | O_NONBLOCK) < 0) {
		perror("cyberos-init: watching the supervisor (only the deadline backstop ends an orphaned sandbox)");
		return -1;
	}
	return 0;
}

/* supervisor_gone reads what CONTROL_FD holds without blocking: true at
 * EOF, which the supervisor's death (its write end closing) brings. */
static int supervisor_gone(void) {
	char b[256];
	for (;;) {
		ssize_t n = read(CONTROL_FD, b, sizeof b);
		if (n == 0)
			return 1;
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return 0; /* EAGAIN: nothing to read, the writer is there */
	}
}

int main(int argc, char **argv) {
	int abi = 0, exec_mode = 0, control = 0, i = 1, seccomp_fd = -1;
	unsigned int seccomp_flags = 0;
	long long deadline_ms = 0;
	struct init_rlimit rlimits[MAX_RLIMITS];
	int nrlimits = 0;
	if (argc == 2 && strcmp(argv[1], "--userns-hold") == 0)
		return userns_hold();
	/* Until the filter and Landlock are in place no process of the skill's
	 * uid may trace this one (see "--seccomp"); the execute-only binary
	 * already makes the exec non-dumpable, this holds where the
	 * fs.suid_dumpable sysctl would undo that. */
	if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
		perror("cyberos-init: PR_SET_DUMPABLE");
		return 127;
	}
	for (; i < argc && strcmp(argv[i], "--") != 0; i++) {
		if (strcmp(argv[i], "--rlimit") == 0 && i + 1 < argc) {
			if (nrlimits == MAX_RLIMITS || parse_rlimit(argv[++i], &rlimits[nrlimits]) != 0)
				return usage();
			nrlimits++;
		} else if (strcmp(argv[i], "--landlock") == 0 && i + 1 < argc) {
			char *end;
			long v = strtol(argv[++i], &end, 10);
			if (*end != '\0' || v < 0 || v > LL_MAX_ABI)
				return usage();
			abi = (int)v;
		} else if (strcmp(argv[i], "--landlock-path") == 0 && i + 1 < argc) {
			if (parse_landlock_path(argv[++i]) != 0)
				return usage();
		} else if (strcmp(argv[i], "--deadline-ms") == 0 && i + 1 < argc) {
			char *end;
			long long v = strtoll(argv[++i], &end, 10);
			if (*end != '\0' || v <= 0 || v > 2LL * 86400000)
				return usage();
			deadline_ms = v;
		} else if (strcmp(argv[i], "--seccomp") == 0 && i + 1 < argc) {
			char *end;
			errno = 0;
			long fd = strtol(argv[++i], &end, 10);
			if (errno || *end != ':' || fd < 3 || fd > 1023)
				return usage();
			unsigned long f = strtoul(end + 1, &end, 10);
			if (errno || *end != '\0' || f > 0xffff)
				return usage();
			seccomp_fd = (int)fd;
			seccomp_flags = (unsigned int)f;
		} else if (strcmp(argv[i], "--exec") == 0) {
			exec_mode = 1;
		} else if (strcmp(argv[i], "--control") == 0) {
			control = 1;
		} else {
			return usage();
		}
	}
	if (i + 1 >= argc)
		return usage();
	char **prog = &argv[i + 1];

	if (seccomp_fd >= 0) {
		int e = load_seccomp(seccomp_fd, seccomp_flags);
		if (e != 0) {
			if (!exec_mode)
				report("seccomp", e);
			fprintf(stderr, "cyberos-init: seccomp: %s\n", strerror(e));
			return 127;
		}
	}

	if (exec_mode) {
		if (set_rlimits(rlimits, nrlimits) != 0)
			return 127;
		if (abi > 0 && apply_landlock(abi) != 0)
			return 127;
		execvp(prog[0], prog);
		fprintf(stderr, "cyberos-init: exec %s: %s\n", prog[0], strerror(errno));
		return 127;
	}

	/* The skill must see only fds 0, 1 and 2. */
	if (fcntl(STATUS_FD, F_SETFD, FD_CLOEXEC) < 0 || (control && fcntl(CONTROL_FD, F_SETFD, FD_CLOEXEC) < 0)) {
		perror("cyberos-init: status or control fd");
		return 127;
	}

	int rerr = set_rlimits(rlimits, nrlimits);
	if (rerr != 0) {
		report("rlimit", rerr);
		return 127;
	}

	if (abi > 0) {
		int e = apply_landlock(abi);
		if (e != 0) {
			report("landlock", e);
			return 127;
		}
	}

	char **envp = environ;
	if (control) {
		int e = read_control(&envp, &deadline_ms);
		if (e == 1)
			return 0;
		if (e != 0) {
			report("control", e);
			return 127;
		}
	}

	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);

	/* SIGIO is blocked (its default would end this process) and waited for
	 * below with the rest. */
	int lifeline = control && watch_lifeline() == 0;
	if (lifeline && supervisor_gone()) {
		report("control", EPIPE);
		return 127;
	}

	/* A pipe closed on exec tells the parent whether exec worked. */
	int ep[2];
	if (pipe2(ep, O_CLOEXEC) < 0) {
		perror("cyberos-init: pipe");
		return 127;
	}
	/* vfork: until its execve the child runs in this process's memory, so
	 * starting it copies no page tables and makes no page of this process
	 * copy-on-write, which a fork would. The child only sets its signal
	 * mask and execs, or writes errno to the pipe and exits. A profile
	 * that refuses vfork gets a fork instead. */
	pid_t child = vfork();
	if (child < 0 && (errno == EPERM || errno == ENOSYS))
		child = fork();
	if (child < 0) {
		report("exec", errno);
		perror("cyberos-init: fork");
		return 127;
	}
	if (child == 0) {
		close(ep[0]);
		sigprocmask(SIG_SETMASK, &old, NULL);
		execve(prog[0], prog, envp);
		int e = errno;
		(void)!write(ep[1], &e, sizeof e);
		_exit(127);
	}
	close(ep[1]);
	int exec_errno = 0;
	if (read(ep[0], &exec_errno, sizeof exec_errno) == (ssize_t)sizeof exec_errno) {
		report("exec", exec_errno);
		fprintf(stderr, "cyberos-init: exec %s: %s\n", prog[0], strerror(exec_errno));
		waitpid(child, NULL, 0);
		return 127;
	}
	close(ep[0]);

	/* Timers are not inherited across fork: only this process gets it. A
	 * profile refusing setitimer leaves the supervisor's deadline alone. */
	if (deadline_ms > 0) {
		struct itimerval it = {0};
		it.it_value.tv_sec = deadline_ms / 1000;
		it.it_value.tv_usec = (deadline_ms % 1000) * 1000;
		if (setitimer(ITIMER_REAL, &it, NULL) != 0)
			perror("cyberos-init: deadline backstop");
	}

	for (;;) {
		siginfo_t si;
		int sig = sigwaitinfo(&all, &si);
		if (sig < 0) {
			if (errno == EINTR)
				continue;
			perror("cyberos-init: sigwaitinfo");
			return 127;
		}
		if (sig == SIGIO && lifeline && supervisor_gone()) {
			fprintf(stderr, "cyberos-init: the supervisor is gone: killing the sandbox\n");
			return finish("signal", SIGKILL, 128 + SIGKILL);
		}
		if (sig == SIGALRM && si.si_code == SI_KERNEL) {
			/* Our deadline timer, not a SIGALRM a process sent. */
			fprintf(stderr, "cyberos-init: deadline backstop reached: killing the sandbox\n");
			return finish("signal", SIGKILL, 128 + SIGKILL);
		}
		if (sig != SIGCHLD) {
			for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
				if (sig == forwarded[i])
					kill(child, sig);
			continue;
		}
		int ws;
		pid_t p;
		while ((p = waitpid(-1, &ws, WNOHANG)) > 0) {
			if (p != child)
				continue; /* an orphan, reaped */
			if (WIFSIGNALED(ws))
				return finish("signal", WTERMSIG(ws), 128 + WTERMSIG(ws));
			if (WIFEXITED(ws))
				return finish("exit", WEXITSTATUS(ws), WEXITSTATUS(ws));
		}
	}
}
