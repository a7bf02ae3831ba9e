/* orphans.c - the orphans of a killed guard (see orphans.h): the live
 * guards' pids, and the search of this process's children for others. */
#include "exec/orphans.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"

/* Orphans stopped per round of the search; more wait for the next. */
#define ROUND_MAX 256
/* How long the search goes on while orphans keep coming. */
#define KILL_WITHIN_MS 5000

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pid_t *guards;        /* live guards (under mu) */
static size_t n_guards, cap_guards;
static bool untracked;       /* a guard could not be noted: none is safe */
static atomic_bool adopting;

bool lr_orphans_adopt(void)
{
	/* The search reads each thread's children from /proc. */
	if (access("/proc/thread-self/children", R_OK) != 0 ||
	    prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
		return false;
	atomic_store(&adopting, true);
	return true;
}

void lr_orphans_lock(void)
{
	pthread_mutex_lock(&mu);
	if (n_guards == cap_guards) {
		size_t cap = cap_guards ? cap_guards * 2 : 16;
		pid_t *g = realloc(guards, cap * sizeof(*g));
		if (g != NULL) {
			guards = g;
			cap_guards = cap;
		}
	}
}

void lr_orphans_forked(pid_t guard)
{
	if (guard > 0 && n_guards < cap_guards)
		guards[n_guards++] = guard;
	else if (guard > 0)
		untracked = true;
	pthread_mutex_unlock(&mu);
}

void lr_orphans_reaped(pid_t guard)
{
	pthread_mutex_lock(&mu);
	for (size_t i = 0; i < n_guards; i++)
		if (guards[i] == guard) {
			guards[i] = guards[--n_guards];
			break;
		}
	pthread_mutex_unlock(&mu);
}

static bool is_guard(pid_t pid)
{
	for (size_t i = 0; i < n_guards; i++)
		if (guards[i] == pid)
			return true;
	return false;
}

/* Children of this process listed in one thread's children file (path)
 * that are not guards, added to out (at most ROUND_MAX). False when the
 * file cannot be read for another reason than the thread being gone. */
static bool thread_children(const char *path, pid_t *out, size_t *n)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT || errno == ESRCH;
	char buf[4096];
	long pid = 0;
	bool in_num = false, ok = true;
	for (;;) {
		ssize_t r = read(fd, buf, sizeof(buf));
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			ok = false;
		if (r <= 0)
			break;
		/* "12 34 ": a number may go on in the next read. */
		for (ssize_t i = 0; i < r; i++) {
			if (buf[i] >= '0' && buf[i] <= '9') {
				pid = pid * 10 + (buf[i] - '0');
				in_num = true;
				continue;
			}
			if (in_num && !is_guard((pid_t)pid) && *n < ROUND_MAX)
				out[(*n)++] = (pid_t)pid;
			pid = 0;
			in_num = false;
		}
	}
	if (in_num && !is_guard((pid_t)pid) && *n < ROUND_MAX)
		out[(*n)++] = (pid_t)pid;
	close(fd);
	return ok;
}

/* Kill the children that are not guards: their pids into out. Under mu,
 * so that no guard is forked meanwhile. */
static bool kill_round(pid_t *out, size_t *n)
{
	DIR *d = opendir("/proc/self/task");
	if (d == NULL)
		return false;
	bool ok = true;
	struct dirent *e;
	while (ok && (e = readdir(d)) != NULL) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		char path[300];
		snprintf(path, sizeof(path), "/proc/self/task/%.255s/children", e->d_name);
		ok = thread_children(path, out, n);
	}
	closedir(d);
	for (size_t i = 0; i < *n; i++)
		kill(out[i], SIGKILL);
	return ok;
}

bool lr_orphans_kill(void)
{
	if (!atomic_load(&adopting))
		return false;
	int64_t end = lr_mono_ms() + KILL_WITHIN_MS;
	int quiet = 0;
	while (quiet < 2) {
		pid_t found[ROUND_MAX];
		size_t n = 0;
		pthread_mutex_lock(&mu);
		bool ok = !untracked && kill_round(found, &n);
		pthread_mutex_unlock(&mu);
		if (!ok)
			return false;
		/* Reaped, their own children are this process's now. */
		for (size_t i = 0; i < n; i++)
			while (waitpid(found[i], NULL, 0) < 0 && errno == EINTR)
				;
		quiet = n == 0 ? quiet + 1 : 0;
		if (quiet == 0 && lr_mono_ms() >= end)
			return false;
		if (n == 0)
			lr_sleep_ms(10);
	}
	return true;
}
