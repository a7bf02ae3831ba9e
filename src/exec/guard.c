/* guard.c - the guard process of a shell step (see guard.h) and the
 * runner's side of it: start, messages, end.
 *
 * Threads: the lr_guard_* functions run on the step's worker thread. The
 * guard itself is forked from that thread without exec, so everything from
 * guard_main on may use only async-signal-safe system calls: no malloc, no
 * stdio, no locks; numbers are formatted and parsed by hand. */
#include "exec/guard.h"
#include "exec/orphans.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"

/* ---- the schedule ------------------------------------------------------- */

void lr_guard_schedule(int64_t deadline, int64_t learnt_at, int64_t grace_ms,
                       int64_t *term_at, int64_t *kill_at)
{
	int64_t window = deadline - learnt_at;
	int64_t lead = window > 0 ? window / 4 : 0;
	if (grace_ms < lead)
		lead = grace_ms > 0 ? grace_ms : 0;
	*kill_at = deadline - LR_GUARD_KILL_MARGIN_MS;
	*term_at = *kill_at - lead;
}

/* ---- messages from the runner ------------------------------------------- */

enum { MSG_DEADLINE = 1, MSG_STOP = 2 };

struct msg {
	int32_t kind;
	int32_t pad;
	int64_t value;
};

static void send_msg(lr_guard *g, int32_t kind, int64_t value)
{
	struct msg m = { .kind = kind, .value = value };
	/* 16 bytes: one atomic pipe write. A guard that is gone (it killed the
	 * step on its own) makes it fail: nothing to tell then. */
	ssize_t n = write(g->ctl, &m, sizeof(m));
	(void)n;
}

void lr_guard_deadline(lr_guard *g, int64_t deadline_ms)
{
	send_msg(g, MSG_DEADLINE, deadline_ms);
}

void lr_guard_stop(lr_guard *g, int64_t grace_ms)
{
	send_msg(g, MSG_STOP, grace_ms);
}

/* ======================================================================
 * The guard process: async-signal-safe from here to guard_main's end
 * ==================================================================== */

/* Its descriptors, at fixed numbers. */
enum { G_CTL = 3, G_STATUS, G_OUT, G_ERR, G_DIR, G_NULL, G_IN, G_SIG, G_FIRST_FREE };

struct guard_args {
	const lr_guard_spec *spec;
	int ctl, status; /* the guard's ends of the two pipes */
};

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void close_from(int first)
{
#ifdef SYS_close_range
	if (syscall(SYS_close_range, (unsigned)first, ~0U, 0) == 0)
		return;
#endif
	struct rlimit rl;
	int max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536 ? (int)rl.rlim_cur
	                                                                     : 65536;
	for (int fd = first; fd < max; fd++)
		close(fd);
}

/* Every signal back to its default disposition (ignored ones survive exec),
 * then `ignore` ignored. */
static void reset_signals(const int *ignore, size_t n)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			(void)sigaction(sig, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	for (size_t i = 0; i < n; i++)
		(void)sigaction(ignore[i], &sa, NULL);
}

/* Put the inherited descriptors at their fixed numbers and close every
 * other one (the runner's sockets, eventfds, other steps' pipes). */
static bool arrange_fds(const struct guard_args *a)
{
	int null = open("/dev/null", O_RDWR);
	/* No directory, or no stdin passed: /dev/null stands in. */
	int from[] = { a->ctl, a->status, a->spec->out_fd, a->spec->err_fd,
	               a->spec->dir_fd >= 0 ? a->spec->dir_fd : null, null,
	               a->spec->pass_stdin ? 0 : null };
	int high[7];
	for (int i = 0; i < 7; i++)
		if (from[i] < 0 || (high[i] = fcntl(from[i], F_DUPFD, 64)) < 0)
			return false;
	for (int i = 0; i < 7; i++)
		if (dup2(high[i], G_CTL + i) < 0)
			return false;
	close_from(G_SIG);
	return true;
}

/* Why execve failed, on the step's stderr, so that it shows in the step's
 * error; and the shell's exit status for it: 127 not found, 126 found but
 * not runnable (a directory, no permission, not an executable). write(2)
 * only, as befits a forked child. */
__attribute__((noreturn)) static void exec_failed(const char *path, int e)
{
	const char *why = e == E2BIG    ? "its arguments or environment are too long"
	                  : e == ENOENT ? "no such file"
	                  : e == EACCES ? "permission denied"
	                  : e == ENOEXEC ? "not an executable"
	                  : e == ENOMEM ? "out of memory"
	                  : "execve failed";
	const char *parts[] = { "leaserun: cannot run ", path, ": ", why, "\n" };
	for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
		if (write(2, parts[i], strlen(parts[i])) < 0)
			break;
	_exit(e == ENOENT || e == ENOTDIR ? 127 : 126);
}

static void exec_shell(const lr_guard_spec *spec, pid_t guard)
{
	(void)setpgid(0, 0);
	/* A second line: should the guard die, so does the shell. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != guard)
		_exit(127);
	reset_signals(NULL, 0);
	if (dup2(G_IN, 0) < 0 || dup2(G_OUT, 1) < 0 || dup2(G_ERR, 2) < 0)
		_exit(127);
	if (spec->take_terminal) {
		/* Blocked, SIGTTOU cannot stop a background group taking it. */
		sigset_t ttou;
		sigemptyset(&ttou);
		sigaddset(&ttou, SIGTTOU);
		sigprocmask(SIG_BLOCK, &ttou, NULL);
		(void)tcsetpgrp(0, getpid());
	}
	close_from(3);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	const char *path = spec->path != NULL ? spec->path : "/bin/sh";
	execve(path, spec->argv, spec->envp);
	exec_failed(path, errno);
}

static pid_t fork_now(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
	return _Fork(); /* no atfork handlers: nothing but the system call */
#else
	return (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
#endif
}

/* "123" -> 123; -1 for anything else. */
static long parse_num(const char *s, const char **end)
{
	long n = 0;
	const char *p = s;
	if (*p < '0' || *p > '9')
		return -1;
	for (; *p >= '0' && *p <= '9'; p++)
		n = n * 10 + (*p - '0');
	if (end != NULL)
		*end = p;
	return n;
}

static void put_num(char *out, long n)
{
	char tmp[24];
	int len = 0;
	do {
		tmp[len++] = (char)('0' + n % 10);
		n /= 10;
	} while (n > 0);
	while (len > 0)
		*out++ = tmp[--len];
	*out = '\0';
}

/* The parent and process group of pid, from /proc/<pid>/stat. */
static bool read_stat(long pid, long *ppid, long *pgrp)
{
	char path[48] = "/proc/";
	put_num(path + 6, pid);
	size_t len = strlen(path);
	memcpy(path + len, "/stat", 6);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	char buf[512];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	/* "pid (comm) S ppid pgrp ...": comm may hold anything, even ")". */
	char *p = strrchr(buf, ')');
	if (p == NULL || p[1] != ' ' || p[2] == '\0' || p[3] != ' ')
		return false;
	const char *q;
	*ppid = parse_num(p + 4, &q);
	if (*ppid < 0 || *q != ' ')
		return false;
	*pgrp = parse_num(q + 1, NULL);
	return *pgrp >= 0;
}

/* Send sig to every child of the guard (processes that left the step's
 * group are reparented here) and to the groups they lead. Returns how many
 * children it found. */
static int signal_children(pid_t self, int sig)
{
	int found = 0;
	int dir = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return 0;
	char buf[4096];
	long n;
	while ((n = syscall(SYS_getdents64, dir, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < n;) {
			struct dirent64 *d = (struct dirent64 *)(buf + off);
			off += d->d_reclen;
			long pid = parse_num(d->d_name, NULL), ppid, pgrp;
			if (pid <= 0 || !read_stat(pid, &ppid, &pgrp) || ppid != self)
				continue;
			found++;
			(void)kill((pid_t)pid, sig);
			if (pgrp == pid)
				(void)kill((pid_t)-pid, sig);
			if (sig == SIGTERM)
				(void)kill((pid_t)pid, SIGCONT);
		}
	}
	close(dir);
	return found;
}

/* Remove the state directory and what the step left in it (one level). */
static void remove_dir(const char *path)
{
	char buf[4096];
	long n;
	if (lseek(G_DIR, 0, SEEK_SET) != 0)
		return;
	while ((n = syscall(SYS_getdents64, G_DIR, buf, sizeof(buf))) > 0) {
		for (long off = 0; off < n;) {
			struct dirent64 *d = (struct dirent64 *)(buf + off);
			off += d->d_reclen;
			if (strcmp(d->d_name, ".") == 0 || strcmp(d->d_name, "..") == 0)
				continue;
			if (unlinkat(G_DIR, d->d_name, 0) != 0 && errno == EISDIR)
				(void)unlinkat(G_DIR, d->d_name, AT_REMOVEDIR);
		}
	}
	(void)rmdir(path);
}

struct watch {
	pid_t self, shell;
	bool shell_done, all_dead, runner_gone, term_sent, kill_sent, group_gone;
	bool for_deadline; /* a signal was sent for the deadline, not asked */
	int64_t deadline, learnt_at, grace;
	int64_t stop_term_at, stop_kill_at; /* asked for; INT64_MAX: not */
};

static void signal_step(struct watch *w, int sig)
{
	if (!w->group_gone && kill(-w->shell, sig) != 0 && errno == ESRCH && w->shell_done)
		w->group_gone = true; /* its id may be reused from now on */
	if (sig == SIGTERM && !w->group_gone)
		(void)kill(-w->shell, SIGCONT); /* a stopped process sees it only then */
	signal_children(w->self, sig);
}

/* SIGTERM and SIGKILL when their time has come; the next time to look. */
static int64_t enforce(struct watch *w, int64_t now)
{
	int64_t term_at, kill_at;
	lr_guard_schedule(w->deadline, w->learnt_at, w->grace, &term_at, &kill_at);
	bool term_for_deadline = term_at <= w->stop_term_at;
	bool kill_for_deadline = kill_at <= w->stop_kill_at;
	if (w->stop_kill_at < kill_at)
		kill_at = w->stop_kill_at;
	if (w->stop_term_at < term_at)
		term_at = w->stop_term_at;
	if (w->shell_done) {
		/* The step is over with its shell: nothing of it stays. */
		signal_step(w, SIGKILL);
		return now + 20;
	}
	if (!w->term_sent && now >= term_at) {
		signal_step(w, SIGTERM);
		w->term_sent = true;
		w->for_deadline |= term_for_deadline;
	}
	if (!w->kill_sent && now >= kill_at) {
		signal_step(w, SIGKILL);
		w->kill_sent = true;
		w->for_deadline |= kill_for_deadline;
	}
	if (!w->term_sent)
		return term_at;
	if (!w->kill_sent)
		return kill_at;
	return now + 20; /* killed: until it is gone */
}

/* Reap what ended; tell the runner the shell's status; note when no
 * process of the step is left. */
static void reap(struct watch *w)
{
	for (;;) {
		int st = 0;
		pid_t pid = waitpid(-1, &st, WNOHANG);
		if (pid > 0) {
			if (pid == w->shell && !w->shell_done) {
				w->shell_done = true;
				ssize_t n = write(G_STATUS, &st, sizeof(st));
				char why = LR_GUARD_DEADLINE;
				if (w->for_deadline)
					n = write(G_STATUS, &why, 1);
				(void)n;
			}
			continue;
		}
		if (pid < 0 && errno == ECHILD && w->shell_done && !w->all_dead) {
			w->all_dead = true;
			/* All of the step is gone: said, then end of file. (A
			 * guard killed before says nothing.) */
			char gone = LR_GUARD_ALL_GONE;
			ssize_t n = write(G_STATUS, &gone, 1);
			(void)n;
			close(G_STATUS);
		}
		return;
	}
}

static void read_ctl(struct watch *w, int64_t now)
{
	struct msg m[32];
	ssize_t n = read(G_CTL, m, sizeof(m));
	if (n < 0 && errno == EINTR)
		return;
	if (n <= 0) {
		/* The runner is done with the step, or died: stop what is
		 * left, with the grace, within the deadline. */
		w->runner_gone = true;
		if (w->stop_term_at == INT64_MAX) {
			w->stop_term_at = now;
			w->stop_kill_at = now + w->grace;
		}
		return;
	}
	for (ssize_t i = 0; i < n / (ssize_t)sizeof(m[0]); i++) {
		if (m[i].kind == MSG_DEADLINE && m[i].value > w->deadline) {
			w->deadline = m[i].value;
			w->learnt_at = now;
		} else if (m[i].kind == MSG_STOP) {
			/* A later stop may shorten the grace (a lease lost during
			 * a shutdown's), never lengthen it. */
			int64_t kill_at = now + (m[i].value > 0 ? m[i].value : 0);
			if (w->stop_term_at == INT64_MAX)
				w->stop_term_at = now;
			if (kill_at < w->stop_kill_at)
				w->stop_kill_at = kill_at;
		}
	}
}

static void watch_loop(struct watch *w, const char *dir_path)
{
	for (;;) {
		int64_t now = now_ms();
		reap(w);
		if (w->all_dead && w->runner_gone) {
			if (dir_path != NULL)
				remove_dir(dir_path);
			_exit(0);
		}
		int64_t next = w->all_dead ? INT64_MAX : enforce(w, now);
		struct pollfd p[2] = { { G_SIG, POLLIN, 0 }, { G_CTL, POLLIN, 0 } };
		int np = w->runner_gone ? 1 : 2;
		int64_t wait = next == INT64_MAX ? -1 : next - now_ms();
		if (wait < 0 && next != INT64_MAX)
			wait = 0;
		if (poll(p, (nfds_t)np, wait > 60000 ? 60000 : (int)wait) <= 0)
			continue;
		if (p[0].revents != 0) {
			struct signalfd_siginfo si[8];
			ssize_t n = read(G_SIG, si, sizeof(si));
			(void)n;
		}
		if (np == 2 && p[1].revents != 0)
			read_ctl(w, now_ms());
	}
}

__attribute__((noreturn)) static void guard_main(const struct guard_args *a, int64_t learnt_at)
{
	static const int ignored[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE,
	                               SIGUSR1, SIGUSR2, SIGALRM };
	reset_signals(ignored, sizeof(ignored) / sizeof(ignored[0]));
	(void)setpgid(0, 0); /* terminal signals are for the runner */
	(void)prctl(PR_SET_NAME, "leaserun-guard");
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0 || !arrange_fds(a))
		_exit(126);
	sigset_t chld;
	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_SETMASK, &chld, NULL);
	int sig = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sig < 0 || (sig != G_SIG && dup2(sig, G_SIG) != G_SIG))
		_exit(126);
	if (sig != G_SIG)
		close(sig);
	/* The runner's own standard streams are not the guard's business. */
	for (int fd = 0; fd < 3; fd++)
		(void)dup2(G_NULL, fd);
	pid_t self = getpid();
	/* vfork: the guard still maps the runner's memory, and copying its
	 * page tables would cost more than the step's start. The child only
	 * makes system calls on its own stack until execve. */
	pid_t shell = vfork();
	if (shell == 0)
		exec_shell(a->spec, self);
	if (shell < 0)
		_exit(126);
	(void)setpgid(shell, shell);
	close(G_OUT);
	close(G_ERR);
	close(G_NULL);
	close(G_IN);
	int64_t deadline = a->spec->deadline_ms > 0 ? a->spec->deadline_ms : INT64_MAX;
	struct watch w = { .self = self, .shell = shell, .deadline = deadline,
	                   .learnt_at = learnt_at, .grace = a->spec->grace_ms,
	                   .stop_term_at = INT64_MAX, .stop_kill_at = INT64_MAX };
	watch_loop(&w, a->spec->dir_path);
	_exit(0);
}

/* ======================================================================
 * The runner's side
 * ==================================================================== */

int lr_guard_start(const lr_guard_spec *spec, lr_guard *g, lr_err *err)
{
	int ctl[2], status[2];
	g->pid = -1;
	g->ctl = g->status = -1;
	if (pipe2(ctl, O_CLOEXEC) != 0)
		return lr_err_set(err, LR_ESYS, "guard: pipe: %s", strerror(errno));
	if (pipe2(status, O_CLOEXEC) != 0) {
		close(ctl[0]);
		close(ctl[1]);
		return lr_err_set(err, LR_ESYS, "guard: pipe: %s", strerror(errno));
	}
	struct guard_args a = { .spec = spec, .ctl = ctl[0], .status = status[1] };
	int64_t learnt_at = lr_mono_ms();
	lr_orphans_lock(); /* known as a guard before anyone looks for orphans */
	pid_t pid = fork_now();
	if (pid == 0)
		guard_main(&a, learnt_at);
	int saved = errno;
	lr_orphans_forked(pid);
	close(ctl[0]);
	close(status[1]);
	if (pid < 0) {
		close(ctl[1]);
		close(status[0]);
		return lr_err_set(err, LR_ESYS, "guard: fork: %s", strerror(saved));
	}
	(void)fcntl(status[0], F_SETFL, O_NONBLOCK);
	g->pid = pid;
	g->ctl = ctl[1];
	g->status = status[0];
	return 0;
}

/* Wait for the guard to end; its wait status. */
static int reap_guard(lr_guard *g)
{
	int st = 0;
	while (g->pid > 0 && waitpid(g->pid, &st, 0) < 0 && errno == EINTR)
		;
	if (g->pid > 0) {
		lr_orphans_reaped(g->pid);
		g->wstatus = st;
	}
	g->pid = -1;
	return g->wstatus;
}

bool lr_guard_read(lr_guard *g, lr_guard_said *s)
{
	for (;;) {
		char extra = 0;
		char *p = s->got < sizeof(int) ? (char *)&s->wstatus + s->got : &extra;
		ssize_t r = read(g->status, p, s->got < sizeof(int) ? sizeof(int) - s->got : 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r == 0 || errno != EAGAIN;
		if (p == &extra) {
			s->all_gone = s->all_gone || extra == LR_GUARD_ALL_GONE;
			s->deadline = s->deadline || extra == LR_GUARD_DEADLINE;
		}
		else
			s->got += (size_t)r;
		s->exited = s->got == sizeof(int);
	}
}

bool lr_guard_killed(lr_guard *g, const lr_guard_said *s)
{
	/* Without the word that all of the step is gone, the guard is
	 * ending: killed, or failed before it started the shell. */
	return !s->all_gone && WIFSIGNALED(reap_guard(g));
}

bool lr_guard_never_started(const lr_guard *g)
{
	/* Its only exits with 126 come before the shell's start. */
	return g->pid < 0 && WIFEXITED(g->wstatus) && WEXITSTATUS(g->wstatus) == 126;
}

void lr_guard_end(lr_guard *g)
{
	if (g->ctl >= 0)
		close(g->ctl);
	if (g->status >= 0)
		close(g->status);
	g->ctl = g->status = -1;
	reap_guard(g);
}
