/* exec.c - one shell step as seen from the runner: its guard (guard.c),
 * which runs the shell in its own process group, the output lines, stops,
 * and the lease deadline passed on; exec_files.c holds its environment and
 * state files. Runs on the calling thread (a step worker); no shared
 * state. */
#include "exec/exec.h"
#include "exec/exec_files.h"
#include "exec/guard.h"
#include "exec/orphans.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
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
#include "base/utf8.h"
#include "records/spec.h"

extern char **environ;

/* Without a deadline_fd, a move of the deadline is looked for this long
 * before the guard would act on the old one. */
#define FORWARD_MS 100
/* After the process group is killed, output still buffered in the pipes is
 * read for at most this long: a process that left the group (setsid) may
 * hold the pipes open forever, and must not hold the step open with them. */
#define DRAIN_MS 250
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
		n = lr_utf8_whole(line, n);
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
 * The running step, seen from here: its guard (guard.h) runs the shell
 * ==================================================================== */

enum stop_why { STOP_NONE, STOP_TIMEOUT, STOP_CANCEL, STOP_DEADLINE };

struct child {
	const lr_exec_opts *o;
	lr_guard guard;
	struct out_stream out[2];
	struct tail tail;
	int exited;          /* the guard sent the shell's wait status */
	int all_gone;        /* the guard's status pipe ended: no process of
	                        the step is left */
	int status_lost;     /* it ended without the shell's status */
	int guard_lost;      /* the guard was killed before it could say so */
	int orphans_stopped; /* what it left was found and killed (orphans.h) */
	enum stop_why stop;
	int64_t start_ms, term_ms, drain_until;
	int64_t grace_ms;
	int64_t deadline;    /* the lease deadline the guard knows */
	int64_t learnt_at;   /* when it was sent */
	lr_guard_said said;  /* what the guard's status pipe said */
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
			deliver(c, s, lr_utf8_whole(s->buf, s->len), 0);
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

/* Ask the guard to stop the step: SIGTERM now, SIGKILL after the grace
 * (and never after its deadline). */
static void begin_stop(struct child *c, enum stop_why why, int64_t now)
{
	c->stop = why;
	c->term_ms = now;
	if (why == STOP_CANCEL && c->o->grace_now != NULL) {
		int64_t g = c->o->grace_now(c->o->user);
		c->grace_ms = g > 0 ? g : 0;
	}
	lr_guard_stop(&c->guard, c->grace_ms);
}

/* A stop under way with a grace, and the step lost its right to run
 * meanwhile (its claim is gone): the grace ends now. */
static void end_grace(struct child *c)
{
	if (c->stop == STOP_NONE || c->grace_ms == 0 || c->o->grace_now == NULL ||
	    c->o->grace_now(c->o->user) > 0)
		return;
	c->grace_ms = 0;
	lr_guard_stop(&c->guard, 0);
}

/* A renewal moved the deadline: the guard must know before it acts. */
static void pass_deadline(struct child *c, int64_t now)
{
	int64_t d = current_deadline(c->o);
	if (d > c->deadline) {
		c->deadline = d;
		c->learnt_at = now;
		lr_guard_deadline(&c->guard, d);
	}
}

/* When the guard starts stopping the step unless the deadline moves. */
static int64_t guard_term_at(const struct child *c)
{
	int64_t term_at, kill_at;
	if (c->deadline <= 0)
		return 0;
	lr_guard_schedule(c->deadline, c->learnt_at, c->grace_ms, &term_at, &kill_at);
	return term_at;
}

/* The guard's time to stop the step has come, by the deadline it knows:
 * the step is stopped for the deadline (noted for its outcome; the guard
 * needs no word). */
static void deadline_came(struct child *c, int64_t now)
{
	int64_t term_at = guard_term_at(c);
	if (term_at > 0 && now >= term_at) {
		c->stop = STOP_DEADLINE;
		c->term_ms = now;
	}
}

/* Act on the clock: a timeout, or the guard about to act on the deadline. */
static void advance(struct child *c, int64_t now)
{
	if (c->all_gone && c->drain_until == 0)
		c->drain_until = now + DRAIN_MS;
	if (c->stop != STOP_NONE || c->exited)
		return;
	const lr_exec_opts *o = c->o;
	if (o->timeout_ms > 0 && now >= c->start_ms + o->timeout_ms) {
		begin_stop(c, STOP_TIMEOUT, now);
		return;
	}
	int64_t term_at = guard_term_at(c);
	if (term_at > 0 && now >= term_at - FORWARD_MS) {
		pass_deadline(c, now); /* a renewal not signalled on deadline_fd */
		deadline_came(c, now);
	}
}

static int finished(const struct child *c, int64_t now)
{
	return c->all_gone && (streams_closed(c) || now >= c->drain_until);
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

	if (c->stop == STOP_NONE && !c->exited) {
		if (c->o->timeout_ms > 0)
			earliest(&wake, c->start_ms + c->o->timeout_ms);
		int64_t term_at = guard_term_at(c);
		earliest(&wake, now < term_at - FORWARD_MS ? term_at - FORWARD_MS : term_at);
	}
	if (c->all_gone)
		earliest(&wake, c->drain_until);
	if (wake == 0)
		return -1;
	if (wake <= now)
		return 0;
	return wake - now > INT_MAX ? INT_MAX : (int)(wake - now);
}

/* What the guard says: the shell's wait status, then LR_GUARD_ALL_GONE
 * and end of file once no process of the step is left. */
static void read_status(struct child *c)
{
	bool had = c->said.exited;
	bool ended = lr_guard_read(&c->guard, &c->said);
	c->exited = c->said.exited || ended;
	/* The guard stops the step by its own clock: a shell it killed can
	 * be reaped before advance() saw the time come. */
	if (!had && c->said.exited && c->stop == STOP_NONE && WIFSIGNALED(c->said.wstatus))
		deadline_came(c, lr_mono_ms());
	if (ended) {
		c->all_gone = 1;
		c->status_lost = !c->said.exited;
	}
}

/* One poll over the output, the guard's status, the cancel fd and the
 * deadline fd. */
static void wait_events(struct child *c, int64_t now)
{
	struct pollfd p[5];
	int n = 0, i_out[2] = { -1, -1 }, i_cancel = -1, i_moved = -1, i_status = -1;
	int cancel_fd = c->o->cancel_fd, moved_fd = c->o->deadline_fd;

	for (int s = 0; s < 2; s++)
		if (c->out[s].fd >= 0) {
			i_out[s] = n;
			p[n++] = (struct pollfd){ c->out[s].fd, POLLIN, 0 };
		}
	if (!c->all_gone) {
		i_status = n;
		p[n++] = (struct pollfd){ c->guard.status, POLLIN, 0 };
	}
	/* Once a stop has begun, cancel_fd stays readable: watching it
	 * further would spin. */
	if (cancel_fd >= 0 && c->stop == STOP_NONE && !c->exited) {
		i_cancel = n;
		p[n++] = (struct pollfd){ cancel_fd, POLLIN, 0 };
	}
	if (moved_fd > 2 && !c->exited) {
		i_moved = n;
		p[n++] = (struct pollfd){ moved_fd, POLLIN, 0 };
	}
	if (poll(p, (nfds_t)n, poll_timeout(c, now)) < 0) {
		if (errno != EINTR)
			lr_sleep_ms(10); /* ENOMEM: try again, without spinning */
		return;
	}
	for (int s = 0; s < 2; s++)
		if (i_out[s] >= 0 && p[i_out[s]].revents != 0)
			read_stream(c, &c->out[s]);
	if (i_moved >= 0 && p[i_moved].revents != 0) {
		uint64_t drain;
		ssize_t r = read(moved_fd, &drain, sizeof(drain));
		(void)r;
		pass_deadline(c, lr_mono_ms());
		end_grace(c);
	}
	/* Any event counts, including POLLNVAL: a broken cancel fd must stop
	 * the step rather than make this loop spin. */
	if (i_cancel >= 0 && p[i_cancel].revents != 0)
		begin_stop(c, STOP_CANCEL, lr_mono_ms());
	if (i_status >= 0 && p[i_status].revents != 0)
		read_status(c);
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
	close_stream(c, &c->out[0]);
	close_stream(c, &c->out[1]);
}

/* ======================================================================
 * Starting
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

/* rd: our ends (non-blocking), wr: the step's stdout and stderr. All
 * close-on-exec from birth; a guard forked at the same moment by another
 * thread closes its copies at once. */
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

	/* The shell needed SIGKILL: it outlived the SIGTERM's grace. */
	if (c->stop != STOP_DEADLINE && !c->status_lost && WIFSIGNALED(c->said.wstatus) &&
	    WTERMSIG(c->said.wstatus) == SIGKILL) {
		format_ms(c->grace_ms, t, sizeof(t));
		snprintf(grace, sizeof(grace), " (SIGKILL after the %s grace)", t);
	}
	res->outcome = c->stop == STOP_TIMEOUT    ? LR_EXEC_TIMEOUT
	               : c->stop == STOP_DEADLINE ? LR_EXEC_DEADLINE
	                                          : LR_EXEC_STOPPED;
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

static void describe_end(struct child *c, lr_exec_result *res)
{
	tail_copy(&c->tail, res->stderr_tail, sizeof(res->stderr_tail));
	/* The guard stopped the step for the deadline while this process
	 * could not see it coming (frozen, say). */
	if (c->said.deadline && c->stop == STOP_NONE)
		c->stop = STOP_DEADLINE;
	if (c->guard_lost && c->orphans_stopped) {
		/* An interrupted attempt, as when its runner is killed. */
		res->outcome = LR_EXEC_EXIT;
		res->exit_status = -1;
		snprintf(res->msg, sizeof(res->msg),
		         "the step's guard was killed; what the step left running was stopped");
	} else if (c->guard_lost) {
		/* Whatever else happened: nothing may run the step again. */
		res->outcome = LR_EXEC_GUARD_LOST;
		snprintf(res->msg, sizeof(res->msg),
		         "the step's guard was killed before every process of the step "
		         "had ended: some may still run, so the step is not run again");
	} else if (c->stop != STOP_NONE) {
		describe_stop(c, res);
	} else if (c->status_lost && lr_guard_never_started(&c->guard)) {
		res->outcome = LR_EXEC_SPAWN;
		snprintf(res->msg, sizeof(res->msg),
		         "the step's guard could not start it (out of descriptors or "
		         "processes, say)");
	} else if (c->status_lost) {
		res->outcome = LR_EXEC_EXIT;
		res->exit_status = -1;
		snprintf(res->msg, sizeof(res->msg),
		         "exit status unknown: the step's guard ended without it");
	} else if (WIFSIGNALED(c->said.wstatus)) {
		describe_signal(WTERMSIG(c->said.wstatus), res);
	} else {
		res->exit_status = WEXITSTATUS(c->said.wstatus);
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
	c->guard.pid = -1;
	c->guard.ctl = c->guard.status = -1;
	c->grace_ms = o->grace_ms > 0 ? o->grace_ms : 0;
	for (int s = 0; s < 2; s++) {
		c->out[s].fd = rd[s];
		c->out[s].which = s + 1;
		rd[s] = -1; /* now owned by c */
	}
}

/* Start the guard with the shell, and supervise until no process of the
 * step is left. The guard stays, holding the state directory, until
 * lr_exec_run has read the state and calls lr_guard_end. */
static int run_child(const lr_exec_opts *o, char **envp, struct lr_state_dir *sd,
                     struct child *c, lr_exec_result *res, lr_err *err)
{
	int rd[2] = { -1, -1 }, wr[2] = { -1, -1 };
	int rc = open_pipes(rd, wr, err);
	if (rc != 0)
		return rc;
	child_init(c, o, rd);
	char sh[] = "sh", dash_c[] = "-c";
	char *argv[] = { sh, dash_c, (char *)o->run, NULL };
	c->deadline = current_deadline(o);
	lr_guard_spec spec = { .argv = argv, .envp = envp, .out_fd = wr[0], .err_fd = wr[1],
	                       .dir_fd = sd->fd, .dir_path = sd->dir,
	                       .deadline_ms = c->deadline, .grace_ms = c->grace_ms };
	rc = lr_guard_start(&spec, &c->guard, err);
	close_fds(wr, 2);
	if (rc != 0) {
		close_fds(&c->out[0].fd, 1);
		close_fds(&c->out[1].fd, 1);
		return rc;
	}
	c->start_ms = c->learnt_at = lr_mono_ms();
	supervise(c);
	c->guard_lost = lr_guard_killed(&c->guard, &c->said);
	if (c->guard_lost)
		c->orphans_stopped = lr_orphans_kill();
	describe_end(c, res);
	return 0;
}

int lr_exec_run(const lr_exec_opts *o, lr_exec_result *res, lr_err *err)
{
	struct lr_state_dir *sd = NULL;
	struct child *c = NULL;
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
		res->outcome = early == STOP_CANCEL ? LR_EXEC_STOPPED : LR_EXEC_DEADLINE;
		snprintf(res->msg, sizeof(res->msg), "%s, before start",
		         early == STOP_CANCEL ? "stopped on request"
		                              : "stopped: lease deadline reached");
		return 0;
	}
	/* On the heap: three PATH_MAX buffers, two line buffers and the
	 * tail, and step workers may run on small thread stacks. */
	sd = calloc(1, sizeof(*sd));
	c = calloc(1, sizeof(*c));
	if (sd == NULL || c == NULL) {
		rc = lr_err_set(err, LR_ENOMEM, "exec: out of memory");
		goto fail;
	}
	sd->fd = -1;
	c->guard.pid = -1;
	c->guard.ctl = c->guard.status = -1;
	rc = lr_state_dir_make(o, sd, err);
	if (rc == 0)
		rc = child_env(o, sd, &envp, err);
	if (rc == 0)
		rc = run_child(o, envp, sd, c, res, err);
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
	if (c != NULL)
		lr_guard_end(&c->guard); /* it removes the directory too */
	free(c);
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
