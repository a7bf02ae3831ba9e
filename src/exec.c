/* exec.c - one shell step as a child process: private state dir, own process group,
 * output lines, stops. Runs on the calling thread (a step worker); no shared state. */
#include "exec.h"

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

#include "clock.h"
#include "error.h"
#include "spec.h"

extern char **environ;

/* After the process group is killed, output still buffered in the pipes is
 * read for at most this long: a process that left the group (setsid) may
 * hold the pipes open forever, and must not hold the step open with them. */
#define DRAIN_MS 250
/* Without pidfds (Linux < 5.3) the shell's exit is checked this often. */
#define EXIT_CHECK_MS 50
/* A pretty-printed state may be several times its compact size; beyond this
 * the file is refused unread, so that a runaway step cannot make the runner
 * load gigabytes. */
#define STATE_READ_MAX (4 * LR_STATE_MAX_BYTES)
#define NAME_MAX_CHARS 100   /* of work_dir_name kept in the directory name */
#define TAIL_LINES 20
#define TAIL_LINE_MAX 400    /* of each stderr line kept in the tail */
#define REMOVE_DEPTH_MAX 32

/* ======================================================================
 * Environment
 * ==================================================================== */

static size_t env_name_len(const char *kv)
{
	const char *eq = strchr(kv, '=');
	return eq != NULL ? (size_t)(eq - kv) : strlen(kv);
}

/* "K=V" with a non-empty K. */
static int env_entry_ok(const char *kv)
{
	const char *eq = strchr(kv, '=');
	return eq != NULL && eq != kv;
}

/* One of the names in list (bare names, or "K=V" entries when entries is
 * set) equals the n bytes at name. */
static int env_listed(const char *const *list, int entries, const char *name,
                      size_t n)
{
	if (list == NULL)
		return 0;
	for (; *list != NULL; list++) {
		if (entries && !env_entry_ok(*list))
			continue;
		if (env_name_len(*list) == n && strncmp(*list, name, n) == 0)
			return 1;
	}
	return 0;
}

static size_t count_strings(const char *const *v)
{
	size_t n = 0;
	while (v != NULL && v[n] != NULL)
		n++;
	return n;
}

/* Append a copy of kv; 0, or -1 when out of memory. */
static int env_push(char **env, size_t *n, const char *kv)
{
	env[*n] = strdup(kv);
	if (env[*n] == NULL)
		return -1;
	(*n)++;
	return 0;
}

char **lr_exec_env_build(char *const *base, const char *const *drop,
                         const char *const *add)
{
	const char *const *b = (const char *const *)base;
	size_t nb = count_strings(b), na = count_strings(add), n = 0;
	char **env = calloc(nb + na + 1, sizeof(*env));

	if (env == NULL)
		return NULL;
	for (size_t i = 0; i < nb; i++) {
		size_t len = env_name_len(b[i]);
		if (!env_entry_ok(b[i]) || env_listed(drop, 0, b[i], len) ||
		    env_listed(add, 1, b[i], len))
			continue;
		if (env_push(env, &n, b[i]) != 0)
			goto oom;
	}
	for (size_t i = 0; i < na; i++) {
		/* A later entry of the same name wins. */
		if (!env_entry_ok(add[i]) ||
		    env_listed(add + i + 1, 1, add[i], env_name_len(add[i])))
			continue;
		if (env_push(env, &n, add[i]) != 0)
			goto oom;
	}
	return env;
oom:
	lr_exec_env_free(env);
	return NULL;
}

void lr_exec_env_free(char **env)
{
	if (env == NULL)
		return;
	for (size_t i = 0; env[i] != NULL; i++)
		free(env[i]);
	free(env);
}

/* ======================================================================
 * The private state directory
 * ==================================================================== */

struct state_dir {
	int made;
	char dir[PATH_MAX];
	char in[PATH_MAX];
	char out[PATH_MAX];
};

static int name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' ||
	       c == '-';
}

/* The directory name must not reach outside the base ('/'), nor surprise a
 * shell or a person listing $TMPDIR. */
static void sanitise_name(const char *name, char *out, size_t size)
{
	size_t n = 0;

	if (name == NULL || *name == '\0')
		name = "step";
	for (; *name != '\0' && n + 1 < size; name++)
		out[n++] = name_char(*name) ? *name : '_';
	out[n] = '\0';
}

static int write_file(const char *path, const char *text, lr_err *err)
{
	size_t len = strlen(text), done = 0;
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
	              0600);

	if (fd < 0)
		return lr_err_set(err, LR_ESYS, "create %s: %s", path,
		                  strerror(errno));
	/* Not left to the umask: the step must be able to write its state. */
	if (fchmod(fd, 0600) != 0) {
		int e = errno;
		close(fd);
		return lr_err_set(err, LR_ESYS, "chmod %s: %s", path, strerror(e));
	}
	while (done < len) {
		ssize_t w = write(fd, text + done, len - done);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			int e = errno;
			close(fd);
			return lr_err_set(err, LR_ESYS, "write %s: %s", path,
			                  strerror(e));
		}
		done += (size_t)w;
	}
	if (close(fd) != 0)
		return lr_err_set(err, LR_ESYS, "write %s: %s", path,
		                  strerror(errno));
	return 0;
}

static int path_join(char *buf, const char *dir, const char *name)
{
	int n = snprintf(buf, PATH_MAX, "%s/%s", dir, name);
	return n >= 0 && n < PATH_MAX ? 0 : -1;
}

/* <base>/leaserun-<name>.XXXXXX (0700) holding state-in.json and an empty
 * state-out.json. A random suffix, so that an orphaned older execution of
 * the same step never shares files with this one. */
static int make_state_dir(const lr_exec_opts *o, struct state_dir *sd,
                          lr_err *err)
{
	const char *base = o->work_dir_base != NULL ? o->work_dir_base : "/tmp";
	char name[NAME_MAX_CHARS + 1], leaf[NAME_MAX_CHARS + 32];

	sanitise_name(o->work_dir_name, name, sizeof(name));
	snprintf(leaf, sizeof(leaf), "leaserun-%s.XXXXXX", name);
	if (path_join(sd->dir, base, leaf) != 0)
		return lr_err_set(err, LR_EINVAL,
		                  "state directory under %s: path too long", base);
	if (mkdtemp(sd->dir) == NULL)
		return lr_err_set(err, LR_ESYS, "state directory under %s: %s",
		                  base, strerror(errno));
	sd->made = 1;
	/* mkdtemp's 0700 is cut by the umask; the step must be able to write
	 * here, and nobody else may read the state. */
	if (chmod(sd->dir, 0700) != 0)
		return lr_err_set(err, LR_ESYS, "chmod %s: %s", sd->dir,
		                  strerror(errno));
	if (path_join(sd->in, sd->dir, "state-in.json") != 0 ||
	    path_join(sd->out, sd->dir, "state-out.json") != 0)
		return lr_err_set(err, LR_EINVAL, "%s: path too long", sd->dir);
	int rc = write_file(sd->in, o->state_in != NULL ? o->state_in : "null",
	                    err);
	if (rc != 0)
		return rc;
	return write_file(sd->out, "", err);
}

/* Remove name (relative to dir_fd) and everything under it, never following
 * symbolic links. Best effort: a leftover directory is not worth failing a
 * step for. */
static void remove_tree(int dir_fd, const char *name, int depth)
{
	if (unlinkat(dir_fd, name, 0) == 0 || errno != EISDIR)
		return; /* gone, or not a directory we could empty */
	if (depth > REMOVE_DEPTH_MAX)
		return;
	/* The step may have left a read-only directory: make it ours. (A
	 * directory, not a symbolic link: those unlink without EISDIR.) */
	(void)fchmodat(dir_fd, name, 0700, 0);
	int fd = openat(dir_fd, name,
	                O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (d == NULL && fd >= 0)
		close(fd);
	while (d != NULL) {
		struct dirent *e = readdir(d);
		if (e == NULL)
			break;
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			remove_tree(dirfd(d), e->d_name, depth + 1);
	}
	if (d != NULL)
		closedir(d);
	(void)unlinkat(dir_fd, name, AT_REMOVEDIR);
}

static void remove_state_dir(struct state_dir *sd)
{
	if (sd->made)
		remove_tree(AT_FDCWD, sd->dir, 0);
	sd->made = 0;
}

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
static int child_env(const lr_exec_opts *o, const struct state_dir *sd,
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

static void bad_state(lr_exec_result *res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void bad_state(lr_exec_result *res, const char *fmt, ...)
{
	va_list ap;

	res->outcome = LR_EXEC_BAD_STATE;
	va_start(ap, fmt);
	vsnprintf(res->msg, sizeof(res->msg), fmt, ap);
	va_end(ap);
}

/* Read at most STATE_READ_MAX bytes of the file. *text is NULL when the
 * step removed the file (state unchanged, like an empty file). Returns 0,
 * or -1 with res marked BAD_STATE. */
static int load_state_out(const char *path, char **text, size_t *len,
                          lr_exec_result *res)
{
	struct stat st;
	size_t n = 0;
	char *buf = NULL;
	/* Non-blocking: the step may have put a FIFO there. */
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);

	*text = NULL;
	if (fd < 0 && errno == ENOENT)
		return 0;
	if (fd < 0 || fstat(fd, &st) != 0) {
		bad_state(res, "LEASERUN_STATE_OUT: %s", strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		bad_state(res, "LEASERUN_STATE_OUT: not a regular file");
		goto fail;
	}
	if (st.st_size > STATE_READ_MAX) {
		bad_state(res, "LEASERUN_STATE_OUT: file of %lld bytes, over the "
		          "512 KiB state limit", (long long)st.st_size);
		goto fail;
	}
	buf = malloc(STATE_READ_MAX + 1);
	if (buf == NULL) {
		bad_state(res, "LEASERUN_STATE_OUT: out of memory");
		goto fail;
	}
	/* One byte more than allowed tells a file over the limit, even one
	 * still growing after fstat. */
	while (n <= STATE_READ_MAX) {
		ssize_t r = read(fd, buf + n, STATE_READ_MAX + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			bad_state(res, "LEASERUN_STATE_OUT: %s", strerror(errno));
			goto fail;
		}
		if (r == 0)
			break;
		n += (size_t)r;
	}
	if (n > STATE_READ_MAX) {
		bad_state(res, "LEASERUN_STATE_OUT: more than %d bytes, over the "
		          "512 KiB state limit", STATE_READ_MAX);
		goto fail;
	}
	close(fd);
	*text = buf;
	*len = n;
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	free(buf);
	return -1;
}

static int blank(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r')
			return 0;
	return 1;
}

/* After exit 0: the new state, if the step wrote one. */
static void read_state_out(const char *path, lr_exec_result *res)
{
	json_error_t je;
	lr_err e;
	char *text;
	size_t len;

	if (load_state_out(path, &text, &len, res) != 0)
		return;
	if (text == NULL || blank(text, len)) {
		free(text);
		return; /* state unchanged */
	}
	json_t *v = json_loadb(text, len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES,
	                       &je);
	free(text);
	if (v == NULL) {
		bad_state(res, "LEASERUN_STATE_OUT: line %d, column %d: %s",
		          je.line, je.column, je.text);
		return;
	}
	if (lr_json_check_state(v, "LEASERUN_STATE_OUT", &e) != 0) {
		bad_state(res, "%s", e.msg);
		goto out;
	}
	/* Our own buffer, so that the caller can free() it whatever
	 * allocator jansson was given. */
	size_t n = json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
	res->state_out = malloc(n + 1);
	if (res->state_out == NULL) {
		bad_state(res, "LEASERUN_STATE_OUT: out of memory");
		goto out;
	}
	json_dumpb(v, res->state_out, n, JSON_COMPACT | JSON_ENCODE_ANY);
	res->state_out[n] = '\0';
out:
	json_decref(v);
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
	struct state_dir *sd = NULL;
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
	rc = make_state_dir(o, sd, err);
	if (rc == 0)
		rc = child_env(o, sd, &envp, err);
	if (rc == 0)
		rc = run_child(o, envp, res, err);
	if (rc != 0)
		goto fail;
	if (res->outcome == LR_EXEC_OK)
		read_state_out(sd->out, res);
	goto out;
fail:
	res->outcome = LR_EXEC_SPAWN;
	snprintf(res->msg, sizeof(res->msg), "%s", err->msg);
out:
	lr_exec_env_free(envp);
	if (sd != NULL)
		remove_state_dir(sd);
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
