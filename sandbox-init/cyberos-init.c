/*
 * cyberos-init: the first process (pid 1) of every cyberos sandbox.
 *
 * It starts the skill as its only child, forwards termination signals (the
 * deadline's SIGTERM among them) to it, reaps every orphan, and when the
 * skill ends writes how it ended to fd 3 for the supervisor:
 *   "exit N\n", "signal N\n", or "exec ERRNO\n" when the entrypoint could
 *   not be executed.
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
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#define STATUS_FD 3

static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

static void report(const char *what, int n) {
	dprintf(STATUS_FD, "%s %d\n", what, n);
}

int main(int argc, char **argv) {
	if (argc < 3 || strcmp(argv[1], "--") != 0) {
		fprintf(stderr, "usage: cyberos-init -- PROGRAM [ARGS...]\n");
		return 127;
	}
	/* The skill must see only fds 0, 1 and 2. */
	if (fcntl(STATUS_FD, F_SETFD, FD_CLOEXEC) < 0) {
		perror("cyberos-init: status fd");
		return 127;
	}

	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);

	/* A pipe closed on exec tells the parent whether exec worked. */
	int ep[2];
	if (pipe2(ep, O_CLOEXEC) < 0) {
		perror("cyberos-init: pipe");
		return 127;
	}
	pid_t child = fork();
	if (child < 0) {
		report("exec", errno);
		perror("cyberos-init: fork");
		return 127;
	}
	if (child == 0) {
		close(ep[0]);
		sigprocmask(SIG_SETMASK, &old, NULL);
		execv(argv[2], &argv[2]);
		int e = errno;
		(void)!write(ep[1], &e, sizeof e);
		_exit(127);
	}
	close(ep[1]);
	int exec_errno = 0;
	if (read(ep[0], &exec_errno, sizeof exec_errno) == (ssize_t)sizeof exec_errno) {
		report("exec", exec_errno);
		fprintf(stderr, "cyberos-init: exec %s: %s\n", argv[2], strerror(exec_errno));
		waitpid(child, NULL, 0);
		return 127;
	}
	close(ep[0]);

	for (;;) {
		siginfo_t si;
		int sig = sigwaitinfo(&all, &si);
		if (sig < 0) {
			if (errno == EINTR)
				continue;
			perror("cyberos-init: sigwaitinfo");
			return 127;
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
			if (WIFSIGNALED(ws)) {
				report("signal", WTERMSIG(ws));
				return 128 + WTERMSIG(ws);
			}
			if (WIFEXITED(ws)) {
				report("exit", WEXITSTATUS(ws));
				return WEXITSTATUS(ws);
			}
		}
	}
}
