/* exec_files.c - what a shell step sees besides its command: its
 * environment and its private state directory, with the state files in and
 * out. Runs on the calling thread (a step worker); no shared state. */
#include "exec/exec_files.h"
#include "exec/exec.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/error.h"
#include "records/spec.h"

/* A pretty-printed state may be several times its compact size; beyond this
 * the file is refused unread, so that a runaway step cannot make the runner
 * load gigabytes. */
#define STATE_READ_MAX (4 * LR_STATE_MAX_BYTES)
#define REMOVE_DEPTH_MAX 32
/* A state directory is named leaserun-<task>.<fence>.<attempt>.XXXXXX, by
 * lr_state_dir_make; the sweep removes nothing else (is_state_dir_name). */
#define STATE_DIR_PREFIX "leaserun-"
#define TASK_CHARS_MAX 100   /* of the task id kept in the directory name */
#define SUFFIX_CHARS 6       /* mkdtemp's XXXXXX */
#define STALE_AFTER_S 60     /* made but maybe not locked yet before that */
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

int lr_exec_json_var(char **var, const char *name, const void *v)
{
	char *text = v != NULL ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	int ok = asprintf(var, "%s=%s", name, text != NULL ? text : "{}") > 0;
	free(text);
	return ok;
}

/* ======================================================================
 * The private state directory
 * ==================================================================== */


/* The directory name must not reach outside the base ('/'), nor surprise a
 * shell or a person listing $TMPDIR. */
static void sanitise_name(const char *name, char *out, size_t size)
{
	size_t n = 0;

	if (name == NULL || *name == '\0')
		name = "step";
	for (; *name != '\0' && n + 1 < size; name++)
		out[n++] = lr_id_char(*name) ? *name : '_';
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

/* <base>/leaserun-<task>.<fence>.<attempt>.XXXXXX (0700) holding
 * state-in.json and an empty state-out.json. A random suffix, so that an
 * orphaned older execution of the same step never shares files with this
 * one. */
int lr_state_dir_make(const lr_exec_opts *o, struct lr_state_dir *sd,
                          lr_err *err)
{
	const char *base = o->work_dir_base != NULL ? o->work_dir_base : "/tmp";
	char task[TASK_CHARS_MAX + 1], leaf[TASK_CHARS_MAX + 64];

	sd->fd = -1;
	sanitise_name(o->task_id, task, sizeof(task));
	snprintf(leaf, sizeof(leaf), STATE_DIR_PREFIX "%s.%lld.%lld.XXXXXX", task,
	         (long long)o->fence, (long long)o->attempt);
	if (path_join(sd->dir, base, leaf) != 0)
		return lr_err_set(err, LR_EINVAL,
		                  "state directory under %s: path too long", base);
	if (mkdtemp(sd->dir) == NULL)
		return lr_err_set(err, LR_ESYS, "state directory under %s: %s",
		                  base, strerror(errno));
	sd->made = 1;
	/* Locked for as long as the execution lives: a sweep knows a
	 * directory in use from one left behind. */
	sd->fd = open(sd->dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sd->fd < 0 || flock(sd->fd, LOCK_EX | LOCK_NB) != 0)
		return lr_err_set(err, LR_ESYS, "lock %s: %s", sd->dir, strerror(errno));
	/* mkdtemp's 0700 is cut by the umask; the step must be able to write
	 * here, and nobody else may read the state. */
	if (fchmod(sd->fd, 0700) != 0)
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

/* The directory name (relative to dir_fd) opened for reading and made ours
 * to empty (the step may have left it read-only), or -1: a symbolic link is
 * never followed, and a directory of another user is left as it is. The
 * mode is changed through the descriptor, never by name: a step (or, in
 * $TMPDIR, another user) could put a link there meanwhile. O_PATH needs no
 * permission; fchmod refuses such a descriptor, but its /proc/self/fd link
 * reaches the directory opened, whatever the name holds by then. */
static int open_own_dir(int dir_fd, const char *name)
{
	int path_fd = openat(dir_fd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (path_fd < 0)
		return -1;
	char self[48];
	struct stat st;
	int fd = -1;
	snprintf(self, sizeof(self), "/proc/self/fd/%d", path_fd);
	if (fstat(path_fd, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
	    ((st.st_mode & 0700) == 0700 || chmod(self, 0700) == 0))
		fd = openat(path_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	close(path_fd);
	return fd;
}

/* Remove name (relative to dir_fd) and everything under it, never following
 * symbolic links nor touching what another user owns. Best effort: a
 * leftover directory is not worth failing a step for. */
static void remove_tree(int dir_fd, const char *name, int depth)
{
	if (unlinkat(dir_fd, name, 0) == 0 || errno != EISDIR)
		return; /* gone, or not a directory we could empty */
	if (depth > REMOVE_DEPTH_MAX)
		return;
	int fd = open_own_dir(dir_fd, name);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (d == NULL) {
		if (fd >= 0)
			close(fd);
		return;
	}
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			remove_tree(dirfd(d), e->d_name, depth + 1);
	closedir(d);
	(void)unlinkat(dir_fd, name, AT_REMOVEDIR);
}

void lr_state_dir_remove(struct lr_state_dir *sd)
{
	if (sd->made)
		remove_tree(AT_FDCWD, sd->dir, 0);
	sd->made = 0;
	if (sd->fd >= 0)
		close(sd->fd);
	sd->fd = -1;
}

static int ascii_digit(char c)
{
	return c >= '0' && c <= '9';
}

static int ascii_alnum(char c)
{
	return ascii_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* The '.' before the digits that end at end (not before start), or NULL
 * when there are no digits or no '.' before them. */
static const char *dot_before_digits(const char *start, const char *end)
{
	const char *p = end;
	while (p > start && ascii_digit(p[-1]))
		p--;
	return p < end && p > start && p[-1] == '.' ? p - 1 : NULL;
}

/* A name lr_state_dir_make gives, and nothing else: other programs put
 * leaserun-something in $TMPDIR too (scripts/cluster's etcd data, test
 * runs). Read from the end, as the task id may hold dots and digits. */
static int is_state_dir_name(const char *name)
{
	size_t pre = strlen(STATE_DIR_PREFIX), len = strlen(name);
	if (len < pre + SUFFIX_CHARS + 2 || strncmp(name, STATE_DIR_PREFIX, pre) != 0)
		return 0;
	const char *task = name + pre, *suffix = name + len - SUFFIX_CHARS;
	for (const char *c = suffix; *c != '\0'; c++)
		if (!ascii_alnum(*c))
			return 0;
	if (suffix[-1] != '.')
		return 0;
	const char *attempt = dot_before_digits(task, suffix - 1);
	const char *fence = attempt != NULL ? dot_before_digits(task, attempt) : NULL;
	if (fence == NULL || fence == task || fence - task > TASK_CHARS_MAX)
		return 0;
	for (const char *c = task; c < fence; c++)
		if (!lr_id_char(*c))
			return 0;
	return 1;
}

/* Left behind by one of our steps: a directory (not a symbolic link) with
 * the name and the mode lr_state_dir_make gives, owned by this user, older
 * than a minute, and nobody holds its lock. */
static int stale(int base_fd, const char *name)
{
	if (!is_state_dir_name(name))
		return 0;
	int fd = openat(base_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return 0;
	struct stat st;
	int ours = fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) &&
	           st.st_uid == geteuid() && (st.st_mode & 07777) == 0700;
	int old = ours && time(NULL) - st.st_mtime > STALE_AFTER_S;
	int unlocked = old && flock(fd, LOCK_EX | LOCK_NB) == 0;
	close(fd);
	return unlocked;
}

int lr_state_dir_sweep(const char *base, size_t *removed, lr_err *err)
{
	if (removed != NULL)
		*removed = 0;
	int base_fd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = base_fd >= 0 ? fdopendir(base_fd) : NULL;
	if (d == NULL) {
		int saved = errno;
		if (base_fd >= 0)
			close(base_fd);
		return lr_err_set(err, LR_ESYS, "state directories in %s: %s", base,
		                  strerror(saved));
	}
	/* Steps make theirs here: a base they cannot write is no use. */
	if (faccessat(base_fd, ".", W_OK | X_OK, AT_EACCESS) != 0) {
		int saved = errno;
		closedir(d);
		return lr_err_set(err, LR_ESYS, "state directories in %s: cannot create any: %s",
		                  base, strerror(saved));
	}
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (!stale(base_fd, e->d_name))
			continue;
		remove_tree(base_fd, e->d_name, 0);
		if (removed != NULL)
			(*removed)++;
	}
	closedir(d);
	return 0;
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
		          "%d KiB state limit", (long long)st.st_size,
		          LR_STATE_MAX_BYTES / 1024);
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
		          "%d KiB state limit", STATE_READ_MAX, LR_STATE_MAX_BYTES / 1024);
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
void lr_state_out_read(const char *path, lr_exec_result *res)
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
		char why[LR_JSON_SYNTAX_ERROR_SIZE];
		lr_json_syntax_error(&je, why, sizeof(why));
		bad_state(res, "LEASERUN_STATE_OUT: %s", why);
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

