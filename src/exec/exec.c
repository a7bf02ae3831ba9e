/* exec.c - one shell step as a child process: its own process group, output
 * lines, stops; exec_files.c holds its environment and state files.
 * Runs on the calling thread (a step worker); no shared state. */
#include "exec/exec.h"
#include "exec/exec_files.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "base/clock.h"
#include "base/error.h"
#include "records/spec.h"

extern char **environ;

/* After the process group is killed, output still buffered in the pipes is
 * read for at most this long: a process that left the group (setsid) may
 * hold the pipes open forever, and must not hold the step open with them. */
#define DRAIN_MS 250
/* Without pidfds (Linux < 5.3) the shell's exit is checked this often. */
#define EXIT_CHECK_MS 50
#define TAIL_LINES 20
#define TAIL_LINE_MAX 400    /* of each stderr line kept in the tail */

/* ======================================================================
 * Output: lines and the stderr tail
 * ==================================================================== */

struct out_stream {
	int fd;        /* the parent's read end; -1 at EOF or once abandoned */
	int which;     /* 1 stdout, 2 stderr */
	size_t len;
	char buf[LR_EXEC_LINE_MAX + 1];
};

struct tail {
	char buf[2048];
	size_t len;
	int lines;
};

/* The longest prefix of s[0..n) that does not end inside a UTF-8
 * character, so that a split line stays valid text on both sides. */
static size_t utf8_cut(const char *s, size_t n)
{
	size_t i = n, back = 0;

	while (i > 0 && back < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
		i--;
		back++;
	}
	if (i == 0)
		return n;
	unsigned char lead = (unsigned char)s[i - 1];
	size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
	if (n - (i - 1) < need && i - 1 > 0)
		return i - 1;
	return n;
}

static void tail_drop_first(struct tail *t)
{
	char *nl = memchr(t->buf, '\n', t->len);
	size_t cut = nl != NULL ? (size_t)(nl - t->buf) + 1 : t->len;

	memmove(t->buf, t->buf + cut, t->len - cut);
	t->len -= cut;
	t->lines--;
}

static void tail_push(struct tail *t, const char *line)
{
	size_t n = strnlen(line, TAIL_LINE_MAX);

	if (n == 0)
		return; /* a blank line tells nothing in an error message */
	if (n == TAIL_LINE_MAX)
		n = utf8_cut(line, n);
	while (t->lines > 0 &&
	       (t->lines >= TAIL_LINES || t->len + n + 1 > sizeof(t->buf) - 1))
		tail_drop_first(t);
	memcpy(t->buf + t->len, line, n);
	t->len += n;
	t->buf[t->len++] = '\n';
	t->lines++;
}

static void tail_copy(const struct tail *t, char *out, size_t size)
{
	size_t n = t->len > 0 ? t->len - 1 : 0; /* without the last '\n' */

	if (n >= size)
		n = size - 1;
	memcpy(out, t->buf, n);
	out[n] = '\0';
}

/* ======================================================================
 * The running child
 * ==================================================================== */

enum stop_why { STOP_NONE, STOP_TIMEOUT, STOP_CANCEL, STOP_DEADLINE };

struct child {
	const lr_exec_opts *o;
	pid_t pid;           /* the shell; also its process group id */
	int pidfd;           /* readable once the shell exits; -1: poll waitid */
	struct out_stream out[2];
	struct tail tail;
	int exited;          /* the shell exited; still a zombie, so the pid and
	                        the group id cannot be reused until reap() */
	int status_lost;     /* reaped by someone else (SIGCHLD ignored) */
	int group_killed;    /* SIGKILL sent to the group: the end */
	int kill_after_grace;/* a stop needed SIGKILL for the shell itself */
	enum stop_why stop;
	int64_t start_ms, term_ms, drain_until;
	int64_t grace_ms;
	int wstatus;
};

static int64_t current_deadline(const lr_exec_opts *o)
{
	return o->deadline != NULL ? o->deadline(o->user) : o->deadline_ms;
}

static void deliver(struct child *c, struct out_stream *s, size_t n,
                    int newline)
{
	size_t end = n;

	if (newline && end > 0 && s->buf[end - 1] == '\r')
		end--;
	char saved = s->buf[end];
	s->buf[end] = '\0';
	if (c->o->line != NULL)
		c->o->line(c->o->user, s->which, s->buf);
	if (s->which == 2)
		tail_push(&c->tail, s->buf);
	s->buf[end] = saved;
	memmove(s->buf, s->buf + n, s->len - n);
	s->len -= n;
}

static void feed(struct child *c, struct out_stream *s, const char *data,
                 size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (data[i] == '\n') {
			deliver(c, s, s->len, 1);
			continue;
		}
		s->buf[s->len++] = data[i] != '\0' ? data[i] : '?';
		if (s->len == LR_EXEC_LINE_MAX)
			deliver(c, s, utf8_cut(s->buf, s->len), 0);
	}
}

static void close_stream(struct child *c, struct out_stream *s)
{
	if (s->fd < 0)
		return;
	if (s->len > 0)
		deliver(c, s, s->len, 0); /* a last line without '\n' */
	close(s->fd);
	s->fd = -1;
}

static void read_stream(struct child *c, struct out_stream *s)
{
	char buf[8192];
	ssize_t r = read(s->fd, buf, sizeof(buf));

	if (r < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (r <= 0) {
		close_stream(c, s);
		return;
	}
	feed(c, s, buf, (size_t)r);
}

static int streams_closed(const struct child *c)
{
	return c->out[0].fd < 0 && c->out[1].fd < 0;
}

static void begin_stop(struct child *c, enum stop_why why, int64_t now)
{
	c->stop = why;
	c->term_ms = now;
	(void)kill(-c->pid, SIGTERM);
	/* A stopped process sees SIGTERM only once it runs again. */
	(void)kill(-c->pid, SIGCONT);
}

/* The end of the step: whatever is left in its group goes with it. */
static void kill_group(struct child *c, int64_t now)
{
	/* Safe from pid reuse: the shell is not reaped yet, so its pid still
	 * names this group. ESRCH (nothing left) is the common answer. */
	if (!c->status_lost)
		(void)kill(-c->pid, SIGKILL);
	c->group_killed = 1;
	c->drain_until = now + DRAIN_MS;
}

/* Note the shell's exit without reaping it (WNOWAIT). */
static void check_exit(struct child *c)
{
	siginfo_t si;

	memset(&si, 0, sizeof(si));
	if (waitid(P_PID, (id_t)c->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
		if (errno == EINTR)
			return;
		c->exited = 1;
		c->status_lost = 1;
		return;
	}
	if (si.si_pid == c->pid)
		c->exited = 1;
}

static enum stop_why stop_due(const struct child *c, int64_t now)
{
	const lr_exec_opts *o = c->o;
	int64_t deadline = current_deadline(o);

	if (o->timeout_ms > 0 && now >= c->start_ms + o->timeout_ms)
		return STOP_TIMEOUT;
	if (deadline > 0 && now >= deadline)
		return STOP_DEADLINE;
	return STOP_NONE;
}

/* Act on the clock and on the shell's exit: start a stop, escalate it, or
 * end the step. */
static void advance(struct child *c, int64_t now)
{
	if (c->group_killed)
		return;
	if (c->stop == STOP_NONE && !c->exited) {
		enum stop_why why = stop_due(c, now);
		if (why != STOP_NONE)
			begin_stop(c, why, now);
	}
	if (c->exited && (c->stop == STOP_NONE || streams_closed(c))) {
		/* The step is over when its shell is; during a stop, the rest
		 * of the group keeps its grace while it still has output
		 * open. */
		kill_group(c, now);
	} else if (c->stop != STOP_NONE && now >= c->term_ms + c->grace_ms) {
		c->kill_after_grace = !c->exited;
		kill_group(c, now);
	}
}

static int finished(const struct child *c, int64_t now)
{
	return c->exited && c->group_killed &&
	       (streams_closed(c) || now >= c->drain_until);
}

static void earliest(int64_t *wake, int64_t t)
{
	if (t > 0 && (*wake == 0 || t < *wake))
		*wake = t;
}

/* How long poll may sleep: until the next thing advance() must do. */
static int poll_timeout(const struct child *c, int64_t now)
{
	int64_t wake = 0;

	if (!c->group_killed && c->stop == STOP_NONE && !c->exited) {
		if (c->o->timeout_ms > 0)
			earliest(&wake, c->start_ms + c->o->timeout_ms);
		earliest(&wake, current_deadline(c->o));
	}
	if (!c->group_killed && c->stop != STOP_NONE)
		earliest(&wake, c->term_ms + c->grace_ms);
	if (c->group_killed && c->exited)
		earliest(&wake, c->drain_until);
	if (c->pidfd < 0 && !c->exited)
		earliest(&wake, now + EXIT_CHECK_MS);
	if (wake == 0)
		return -1;
	if (wake <= now)
		return 0;
	return wake - now > INT_MAX ? INT_MAX : (int)(wake - now);
}

/* One poll over the output, the cancel fd and the pidfd. */
static void wait_events(struct child *c, int64_t now)
{
	struct pollfd p[4];
	int n = 0, i_out[2] = { -1, -1 }, i_cancel = -1, i_pid = -1;
	int cancel_fd = c->o->cancel_fd;

	for (int s = 0; s < 2; s++)
		if (c->out[s].fd >= 0) {
			i_out[s] = n;
			p[n++] = (struct pollfd){ c->out[s].fd, POLLIN, 0 };
		}
	/* Once a stop has begun, cancel_fd stays readable: watching it
	 * further would spin. */
	if (cancel_fd >= 0 && c->stop == STOP_NONE && !c->exited) {
		i_cancel = n;
		p[n++] = (struct pollfd){ cancel_fd, POLLIN, 0 };
	}
	if (c->pidfd >= 0 && !c->exited) {
		i_pid = n;
		p[n++] = (struct pollfd){ c->pidfd, POLLIN, 0 };
	}
	if (poll(p, (nfds_t)n, poll_timeout(c, now)) < 0) {
		if (errno != EINTR)
			lr_sleep_ms(10); /* ENOMEM: try again, without spinning */
		return;
	}
	for (int s = 0; s < 2; s++)
		if (i_out[s] >= 0 && p[i_out[s]].revents != 0)
			read_stream(c, &c->out[s]);
	/* Any event counts, including POLLNVAL: a broken cancel fd must stop
	 * the step rather than make this loop spin. */
	if (i_cancel >= 0 && p[i_cancel].revents != 0)
		begin_stop(c, STOP_CANCEL, lr_mono_ms());
	if ((i_pid >= 0 && p[i_pid].revents != 0) ||
	    (c->pidfd < 0 && !c->exited))
		check_exit(c);
}

static void supervise(struct child *c)
{
	for (;;) {
		int64_t now = lr_mono_ms();
		advance(c, now);
		if (finished(c, now))
			break;
		wait_events(c, now);
	}
}

static void reap(struct child *c)
{
	close_stream(c, &c->out[0]);
	close_stream(c, &c->out[1]);
	if (c->pidfd >= 0)
		close(c->pidfd);
	c->pidfd = -1;
	while (!c->status_lost && waitpid(c->pid, &c->wstatus, 0) < 0) {
		if (errno != EINTR)
			c->status_lost = 1;
	}
}

static int open_pidfd(pid_t pid)
{
#ifdef SYS_pidfd_open
	long fd = syscall(SYS_pidfd_open, pid, 0); /* always close-on-exec */
	if (fd >= 0)
		return (int)fd;
#endif
	(void)pid;
	return -1;
}

/* ======================================================================
 * Spawning
 * ==================================================================== */

static void close_fds(int *fds, int n)
{
	for (int i = 0; i < n; i++)
		if (fds[i] >= 0) {
			close(fds[i]);
			fds[i] = -1;
		}
}

/* Keep a pipe end off 0..2, where the child's dup2s would overwrite it
 * (possible when this process runs with a standard stream closed). */
static int above_stdio(int *fd)
{
	if (*fd > 2)
		return 0;
	int moved = fcntl(*fd, F_DUPFD_CLOEXEC, 3);
	close(*fd);
	*fd = moved;
	return moved >= 0 ? 0 : -1;
}

/* rd: the parent's ends (non-blocking), wr: the child's stdout and stderr.
 * All close-on-exec from birth, so that a step spawned at the same moment
 * by another thread never inherits them. */
static int open_pipes(int rd[2], int wr[2], lr_err *err)
{
	for (int i = 0; i < 2; i++) {
		int p[2];
		if (pipe2(p, O_CLOEXEC) != 0)
			goto fail;
		rd[i] = p[0];
		wr[i] = p[1];
		if (above_stdio(&rd[i]) != 0 || above_stdio(&wr[i]) != 0 ||
		    fcntl(rd[i], F_SETFL, O_NONBLOCK) != 0)
			goto fail;
	}
	return 0;
fail:
	lr_err_set(err, LR_ESYS, "pipe: %s", strerror(errno));
	close_fds(rd, 2);
	close_fds(wr, 2);
	return LR_ESYS;
}

static int spawn_actions(posix_spawn_file_actions_t *fa, const int wr[2])
{
	int rc = posix_spawn_file_actions_addopen(fa, 0, "/dev/null", O_RDONLY, 0);
	if (rc == 0)
		rc = posix_spawn_file_actions_adddup2(fa, wr[0], 1);
	if (rc == 0)
		rc = posix_spawn_file_actions_adddup2(fa, wr[1], 2);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 34)
	/* Descriptors other code opened without O_CLOEXEC stay with us. */
	if (rc == 0)
		rc = posix_spawn_file_actions_addclosefrom_np(fa, 3);
#endif
	return rc;
}

/* Own process group (so the whole step can be signalled), nothing blocked,
 * and default dispositions for the signals this process may ignore or
 * handle (gRPC apps ignore SIGPIPE; ignored signals survive exec). */
static int spawn_attrs(posix_spawnattr_t *attr)
{
	static const int reset[] = { SIGTERM, SIGINT, SIGPIPE, SIGCHLD, SIGHUP,
	                             SIGQUIT, SIGUSR1, SIGUSR2, SIGALRM };
	sigset_t none, dflt;

	sigemptyset(&none);
	sigemptyset(&dflt);
	for (size_t i = 0; i < sizeof(reset) / sizeof(reset[0]); i++)
		sigaddset(&dflt, reset[i]);
	int rc = posix_spawnattr_setflags(attr, POSIX_SPAWN_SETPGROUP |
	                                  POSIX_SPAWN_SETSIGMASK |
	                                  POSIX_SPAWN_SETSIGDEF);
	if (rc == 0)
		rc = posix_spawnattr_setpgroup(attr, 0);
	if (rc == 0)
		rc = posix_spawnattr_setsigmask(attr, &none);
	if (rc == 0)
		rc = posix_spawnattr_setsigdefault(attr, &dflt);
	return rc;
}

/* posix_spawn, not fork: this process has threads, and between fork and
 * exec only async-signal-safe calls would be allowed. */
static int spawn_shell(const char *run, char **envp, const int wr[2],
                       pid_t *pid, lr_err *err)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	char sh[] = "sh", dash_c[] = "-c";
	char *argv[] = { sh, dash_c, (char *)run, NULL };

	int rc = posix_spawn_file_actions_init(&fa);
	if (rc != 0)
		return lr_err_set(err, LR_ENOMEM, "spawn /bin/sh: %s",
		                  strerror(rc));
	rc = posix_spawnattr_init(&attr);
	if (rc == 0) {
		rc = spawn_actions(&fa, wr);
		if (rc == 0)
			rc = spawn_attrs(&attr);
		if (rc == 0)
			rc = posix_spawn(pid, "/bin/sh", &fa, &attr, argv, envp);
		posix_spawnattr_destroy(&attr);
	}
	posix_spawn_file_actions_destroy(&fa);
	if (rc != 0)
		return lr_err_set(err, LR_ESYS, "spawn /bin/sh: %s", strerror(rc));
	return 0;
}

/* The caller's environment with the state file paths set. */
static int child_env(const lr_exec_opts *o, const struct lr_state_dir *sd,
                     char ***envp, lr_err *err)
{
	char in[PATH_MAX + 32], out[PATH_MAX + 32];
	const char *add[] = { in, out, NULL };

	snprintf(in, sizeof(in), "LEASERUN_STATE_IN=%s", sd->in);
	snprintf(out, sizeof(out), "LEASERUN_STATE_OUT=%s", sd->out);
	*envp = lr_exec_env_build(o->env != NULL ? o->env : environ, NULL, add);
	if (*envp == NULL)
		return lr_err_set(err, LR_ENOMEM, "step environment: out of memory");
	return 0;
}

/* ======================================================================
 * Results
 * ==================================================================== */

static void format_ms(int64_t ms, char *buf, size_t size)
{
	if (ms % 1000 == 0)
		snprintf(buf, size, "%llds", (long long)(ms / 1000));
	else
		snprintf(buf, size, "%lldms", (long long)ms);
}

static void describe_stop(const struct child *c, lr_exec_result *res)
{
	char t[32], grace[64] = "";

	if (c->kill_after_grace) {
		format_ms(c->grace_ms, t, sizeof(t));
		snprintf(grace, sizeof(grace), " (SIGKILL after the %s grace)", t);
	}
	res->outcome = c->stop == STOP_TIMEOUT ? LR_EXEC_TIMEOUT : LR_EXEC_STOPPED;
	format_ms(c->o->timeout_ms, t, sizeof(t));
	if (c->stop == STOP_TIMEOUT)
		snprintf(res->msg, sizeof(res->msg), "timed out after %s%s", t,
		         grace);
	else if (c->stop == STOP_CANCEL)
		snprintf(res->msg, sizeof(res->msg), "stopped on request%s", grace);
	else
		snprintf(res->msg, sizeof(res->msg),
		         "stopped: lease deadline reached%s", grace);
}

static void describe_signal(int sig, lr_exec_result *res)
{
	const char *abbrev = NULL;

#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 32)
	abbrev = sigabbrev_np(sig); /* thread-safe, unlike strsignal */
#endif
	res->outcome = LR_EXEC_SIGNAL;
	res->signal = sig;
	if (abbrev != NULL)
		snprintf(res->msg, sizeof(res->msg), "killed by signal %d (SIG%s)",
		         sig, abbrev);
	else
		snprintf(res->msg, sizeof(res->msg), "killed by signal %d", sig);
}

static void describe_end(const struct child *c, lr_exec_result *res)
{
	tail_copy(&c->tail, res->stderr_tail, sizeof(res->stderr_tail));
	if (c->stop != STOP_NONE) {
		describe_stop(c, res);
	} else if (c->status_lost) {
		res->outcome = LR_EXEC_EXIT;
		res->exit_status = -1;
		snprintf(res->msg, sizeof(res->msg),
		         "exit status unknown: the shell was reaped elsewhere "
		         "(is SIGCHLD ignored?)");
	} else if (WIFSIGNALED(c->wstatus)) {
		describe_signal(WTERMSIG(c->wstatus), res);
	} else {
		res->exit_status = WEXITSTATUS(c->wstatus);
		res->outcome = res->exit_status == 0 ? LR_EXEC_OK : LR_EXEC_EXIT;
		snprintf(res->msg, sizeof(res->msg), "exit status %d",
		         res->exit_status);
	}
}

/* ======================================================================
 * lr_exec_run
 * ==================================================================== */

/* A step that must stop already is not started at all. */
static enum stop_why stop_before_start(const lr_exec_opts *o)
{
	int64_t deadline = current_deadline(o);

	if (o->cancel_fd >= 0) {
		struct pollfd p = { o->cancel_fd, POLLIN, 0 };
		if (poll(&p, 1, 0) > 0)
			return STOP_CANCEL;
	}
	if (deadline > 0 && lr_mono_ms() >= deadline)
		return STOP_DEADLINE;
	return STOP_NONE;
}

static void child_init(struct child *c, const lr_exec_opts *o, int rd[2])
{
	memset(c, 0, sizeof(*c));
	c->o = o;
	c->pidfd = -1;
	c->grace_ms = o->grace_ms > 0 ? o->grace_ms : 0;
	for (int s = 0; s < 2; s++) {
		c->out[s].fd = rd[s];
		c->out[s].which = s + 1;
		rd[s] = -1; /* now owned by c */
	}
}

/* Spawn and supervise until the shell has exited and its group is gone. */
static int run_child(const lr_exec_opts *o, char **envp, lr_exec_result *res,
                     lr_err *err)
{
	int rd[2] = { -1, -1 }, wr[2] = { -1, -1 };
	struct child *c;
	int rc = open_pipes(rd, wr, err);

	if (rc != 0)
		return rc;
	/* On the heap: two line buffers and the tail are ~10 KiB, and step
	 * workers may run on small thread stacks. */
	c = malloc(sizeof(*c));
	if (c == NULL) {
		rc = lr_err_set(err, LR_ENOMEM, "spawn /bin/sh: out of memory");
		goto out;
	}
	child_init(c, o, rd);
	rc = spawn_shell(o->run, envp, wr, &c->pid, err);
	close_fds(wr, 2);
	if (rc != 0) {
		close_fds(&c->out[0].fd, 1);
		close_fds(&c->out[1].fd, 1);
		goto out;
	}
	c->start_ms = lr_mono_ms();
	c->pidfd = open_pidfd(c->pid);
	supervise(c);
	reap(c);
	describe_end(c, res);
out:
	close_fds(rd, 2);
	close_fds(wr, 2);
	free(c);
	return rc;
}

int lr_exec_run(const lr_exec_opts *o, lr_exec_result *res, lr_err *err)
{
	struct lr_state_dir *sd = NULL;
	char **envp = NULL;
	lr_err local;
	int rc;

	if (err == NULL)
		err = &local;
	memset(res, 0, sizeof(*res));
	res->outcome = LR_EXEC_SPAWN;
	if (o == NULL || o->run == NULL) {
		rc = lr_err_set(err, LR_EINVAL, "exec: no command to run");
		goto fail;
	}
	enum stop_why early = stop_before_start(o);
	if (early != STOP_NONE) {
		res->outcome = LR_EXEC_STOPPED;
		snprintf(res->msg, sizeof(res->msg), "%s, before start",
		         early == STOP_CANCEL ? "stopped on request"
		                              : "stopped: lease deadline reached");
		return 0;
	}
	sd = calloc(1, sizeof(*sd)); /* three PATH_MAX buffers */
	if (sd == NULL) {
		rc = lr_err_set(err, LR_ENOMEM, "exec: out of memory");
		goto fail;
	}
	rc = lr_state_dir_make(o, sd, err);
	if (rc == 0)
		rc = child_env(o, sd, &envp, err);
	if (rc == 0)
		rc = run_child(o, envp, res, err);
	if (rc != 0)
		goto fail;
	if (res->outcome == LR_EXEC_OK)
		lr_state_out_read(sd->out, res);
	goto out;
fail:
	res->outcome = LR_EXEC_SPAWN;
	snprintf(res->msg, sizeof(res->msg), "%s", err->msg);
out:
	lr_exec_env_free(envp);
	if (sd != NULL)
		lr_state_dir_remove(sd);
	free(sd);
	return rc;
}

void lr_exec_result_clear(lr_exec_result *res)
{
	if (res == NULL)
		return;
	free(res->state_out);
	res->state_out = NULL;
}
