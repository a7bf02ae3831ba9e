/* etcd_harness.c - start, break and tear down real etcd servers for tests.
 *
 * Members are `etcd` child processes on free loopback ports (pick_ports);
 * health and leadership are asked of `etcdctl`, so the harness shares no
 * code with the client under test.
 *
 * Threads: cluster functions run on the caller's thread, one call at a time.
 * The process-wide guards (child pid table, live cluster list) are the only
 * shared state: the pid table is lock-free so that signal handlers may read
 * it, the live list is under live_lock. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "etcd_harness.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_MEMBERS 3
#define MAX_CHILDREN 64
#define START_TRIES 3
#define START_TIMEOUT_S 30.0
#define STOP_TIMEOUT_S 10.0
#define CTL_TIMEOUT_S 5.0
#define POLL_MS 50
#define LOG_TAIL_BYTES 4096

extern char **environ;

enum member_state { MEMBER_DOWN, MEMBER_RUNNING, MEMBER_PAUSED };

struct member {
	pid_t pid;
	enum member_state state;
	int client_port;
	int peer_port;
	char name[16];
	char endpoint[32];
	char dir[PATH_MAX];
	char data_dir[PATH_MAX];
	char log_path[PATH_MAX];
};

struct etcdh_cluster {
	int n;
	struct member m[MAX_MEMBERS];
	char endpoints[MAX_MEMBERS * 32];
	char initial_cluster[MAX_MEMBERS * 64];
	char token[64];
	char **extra; /* NULL-terminated copy of etcdh_opts.extra_args */
	/* Copies of etcdh_opts' TLS files; NULL when not given. */
	char *tls_cert, *tls_key, *client_ca, *ctl_cert, *ctl_key;
	struct etcdh_cluster *next_live;
};

/* ---- process-wide guards ------------------------------------------------ */

static _Atomic pid_t child_pids[MAX_CHILDREN];
static pid_t guard_owner; /* a fork()ed copy of the test must not kill */
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static etcdh_cluster *live_clusters;

static const int fatal_signals[] = { SIGINT, SIGTERM, SIGABRT, SIGSEGV };
#define N_FATAL (sizeof(fatal_signals) / sizeof(fatal_signals[0]))
static struct sigaction previous_actions[N_FATAL];

static int registry_add(pid_t pid)
{
	for (int i = 0; i < MAX_CHILDREN; i++) {
		pid_t empty = 0;
		if (atomic_compare_exchange_strong(&child_pids[i], &empty, pid))
			return 0;
	}
	return -1;
}

static void registry_remove(pid_t pid)
{
	for (int i = 0; i < MAX_CHILDREN; i++) {
		pid_t expected = pid;
		if (atomic_compare_exchange_strong(&child_pids[i], &expected, 0))
			return;
	}
}

/* Async-signal-safe. */
static void kill_registered_children(void)
{
	if (getpid() != guard_owner)
		return;
	for (int i = 0; i < MAX_CHILDREN; i++) {
		pid_t pid = atomic_load(&child_pids[i]);
		if (pid > 0)
			kill(pid, SIGKILL);
	}
}

/* Kill the members, then let the signal do what it would have done. */
static void on_fatal_signal(int sig, siginfo_t *info, void *uctx)
{
	int saved_errno = errno;
	struct sigaction *prev = NULL;

	kill_registered_children();
	for (size_t i = 0; i < N_FATAL; i++)
		if (fatal_signals[i] == sig)
			prev = &previous_actions[i];
	if (prev != NULL && (prev->sa_flags & SA_SIGINFO)) {
		prev->sa_sigaction(sig, info, uctx);
	} else if (prev != NULL && prev->sa_handler != SIG_DFL &&
	           prev->sa_handler != SIG_IGN) {
		prev->sa_handler(sig);
	} else {
		/* Blocked while we run: delivered with the default action on
		 * return. */
		signal(sig, SIG_DFL);
		raise(sig);
	}
	errno = saved_errno;
}

static void destroy_live_clusters(void)
{
	if (getpid() != guard_owner)
		return;
	for (;;) {
		pthread_mutex_lock(&live_lock);
		etcdh_cluster *c = live_clusters;
		pthread_mutex_unlock(&live_lock);
		if (c == NULL)
			break;
		etcdh_destroy(c);
	}
	kill_registered_children();
}

static void install_guards(void)
{
	guard_owner = getpid();
	atexit(destroy_live_clusters);
	for (size_t i = 0; i < N_FATAL; i++) {
		struct sigaction sa;
		sigaction(fatal_signals[i], NULL, &previous_actions[i]);
		if (!(previous_actions[i].sa_flags & SA_SIGINFO) &&
		    previous_actions[i].sa_handler == SIG_IGN)
			continue;
		memset(&sa, 0, sizeof(sa));
		sa.sa_sigaction = on_fatal_signal;
		sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
		sigemptyset(&sa.sa_mask);
		sigaction(fatal_signals[i], &sa, NULL);
	}
}

static void live_add(etcdh_cluster *c)
{
	pthread_mutex_lock(&live_lock);
	c->next_live = live_clusters;
	live_clusters = c;
	pthread_mutex_unlock(&live_lock);
}

static void live_remove(etcdh_cluster *c)
{
	pthread_mutex_lock(&live_lock);
	for (etcdh_cluster **p = &live_clusters; *p != NULL;
	     p = &(*p)->next_live) {
		if (*p == c) {
			*p = c->next_live;
			break;
		}
	}
	pthread_mutex_unlock(&live_lock);
}

/* ---- small utilities ---------------------------------------------------- */

static void fail(const char *fmt, ...)
{
	va_list ap;
	fputs("etcdh: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

/* The program `name`, from $override or else $PATH, into out. */
static int find_program(const char *name, const char *override, char *out,
                        size_t outsz)
{
	const char *env = getenv(override);
	const char *path = getenv("PATH");

	if (env != NULL && env[0] != '\0') {
		snprintf(out, outsz, "%s", env);
		return access(out, X_OK);
	}
	if (path == NULL)
		path = "/usr/bin:/bin";
	while (*path != '\0') {
		size_t len = strcspn(path, ":");
		if (len > 0 && (int)len < (int)outsz) {
			snprintf(out, outsz, "%.*s/%s", (int)len, path, name);
			if (access(out, X_OK) == 0)
				return 0;
		}
		path += len;
		if (*path == ':')
			path++;
	}
	return -1;
}

static int locate(const char *name, const char *override,
                  const char *package, char *out, size_t outsz)
{
	if (find_program(name, override, out, outsz) == 0)
		return 0;
	fail("%s not found in $%s or PATH (Debian package %s)", name, override,
	     package);
	return -1;
}

static int etcd_program(char *out, size_t outsz)
{
	return locate("etcd", "ETCDH_ETCD", "etcd-server", out, outsz);
}

static int etcdctl_program(char *out, size_t outsz)
{
	return locate("etcdctl", "ETCDH_ETCDCTL", "etcd-client", out, outsz);
}

/* out = dir + "/" + name. */
static int join_path(char *out, size_t outsz, const char *dir,
                     const char *name)
{
	size_t dlen = strlen(dir);
	size_t nlen = strlen(name);

	if (dlen + 1 + nlen + 1 > outsz)
		return -1;
	memcpy(out, dir, dlen);
	out[dlen] = '/';
	memcpy(out + dlen + 1, name, nlen + 1);
	return 0;
}

static int remove_entry(const char *path, const struct stat *st, int type,
                        struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	if (remove(path) != 0 && errno != ENOENT)
		fail("cannot remove %s: %s", path, strerror(errno));
	return 0;
}

static void remove_tree(const char *dir)
{
	if (dir[0] != '\0')
		nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Ports below the kernel's range for outgoing connections (or above it),
 * where no connection of a member's peers can take a stopped member's port
 * as its own source port (a TCP self-connect) and keep it from coming
 * back; false when the range leaves no room. */
static bool own_port_range(int *lo, int *hi)
{
	int first = 32768, last = 60999;
	FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	if (f != NULL) {
		if (fscanf(f, "%d %d", &first, &last) != 2)
			first = 32768, last = 60999;
		fclose(f);
	}
	if (first > 12000) {
		*lo = 10000, *hi = first - 1;
		return true;
	}
	if (last < 63000) {
		*lo = last + 1, *hi = 65000;
		return true;
	}
	return false;
}

/* Bind fd to a free loopback port: one of the range when there is one,
 * else one the kernel picks; 0 or -1 (errno set). */
static int bind_free(int fd, unsigned *seed)
{
	struct sockaddr_in sa;
	int lo, hi;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (own_port_range(&lo, &hi))
		for (int tries = 0; tries < 200; tries++) {
			sa.sin_port = htons((uint16_t)(lo + rand_r(seed) % (hi - lo + 1)));
			if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
				return 0;
			if (errno != EADDRINUSE)
				return -1;
		}
	sa.sin_port = 0;
	return bind(fd, (struct sockaddr *)&sa, sizeof(sa));
}

/* Free loopback ports (see bind_free), holding every socket until all are
 * picked so that the set has no duplicates. */
static int pick_ports(int *ports, int count)
{
	int fds[2 * MAX_MEMBERS];
	int opened = 0;
	int rc = 0;
	unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL) ^ (unsigned)(uintptr_t)&seed;

	for (; opened < count; opened++) {
		struct sockaddr_in sa;
		socklen_t len = sizeof(sa);
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (fd < 0) {
			rc = -1;
			break;
		}
		fds[opened] = fd;
		if (bind_free(fd, &seed) != 0 ||
		    getsockname(fd, (struct sockaddr *)&sa, &len) != 0) {
			opened++;
			rc = -1;
			break;
		}
		ports[opened] = ntohs(sa.sin_port);
	}
	if (rc != 0)
		fail("cannot pick a free loopback port: %s", strerror(errno));
	for (int i = 0; i < opened; i++)
		close(fds[i]);
	return rc;
}

/* ---- child processes ---------------------------------------------------- */

struct argv_buf {
	char *argv[64];
	int argc;
	char store[8192];
	size_t used;
};

static int argv_add(struct argv_buf *a, const char *fmt, ...)
{
	va_list ap;
	size_t room = sizeof(a->store) - a->used;
	int len;

	if (a->argc + 1 >= (int)(sizeof(a->argv) / sizeof(a->argv[0])))
		return -1;
	va_start(ap, fmt);
	len = vsnprintf(a->store + a->used, room, fmt, ap);
	va_end(ap);
	if (len < 0 || (size_t)len >= room)
		return -1;
	a->argv[a->argc++] = a->store + a->used;
	a->argv[a->argc] = NULL;
	a->used += (size_t)len + 1;
	return 0;
}

/* The test's environment without ETCD_* / ETCDCTL_* (etcd reads its flags
 * from there too), plus ETCDCTL_API=3. The strings are borrowed from
 * environ; free only the array. */
static char **child_environment(void)
{
	static char api[] = "ETCDCTL_API=3";
	size_t n = 0;
	size_t k = 0;
	char **env;

	while (environ != NULL && environ[n] != NULL)
		n++;
	env = calloc(n + 2, sizeof(*env));
	if (env == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "ETCD_", 5) != 0 &&
		    strncmp(environ[i], "ETCDCTL_", 8) != 0)
			env[k++] = environ[i];
	env[k++] = api;
	env[k] = NULL;
	return env;
}

/* fork + exec with stdin from /dev/null and stdout and stderr on out_fd.
 * The child dies with the thread that forked it (PR_SET_PDEATHSIG). Only
 * async-signal-safe calls between fork and exec: the test may have
 * threads. */
static pid_t spawn(const char *path, char *const argv[], int out_fd)
{
	char **envp = child_environment();
	int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
	pid_t parent = getpid();
	pid_t pid;

	if (envp == NULL || null_fd < 0) {
		fail("cannot prepare to start %s: %s", path, strerror(errno));
		free(envp);
		if (null_fd >= 0)
			close(null_fd);
		return -1;
	}
	pid = fork();
	if (pid == 0) {
		static const int reset[] = { SIGINT, SIGTERM, SIGPIPE, SIGHUP,
			                     SIGQUIT };
		sigset_t none;

		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		for (size_t i = 0; i < sizeof(reset) / sizeof(reset[0]); i++)
			signal(reset[i], SIG_DFL);
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		if (dup2(null_fd, 0) < 0 || dup2(out_fd, 1) < 0 ||
		    dup2(out_fd, 2) < 0)
			_exit(127);
		/* Hold none of the test's pipes or sockets open. */
		close_range(3, ~0U, 0);
		execve(path, argv, envp);
		_exit(127);
	}
	if (pid < 0)
		fail("fork: %s", strerror(errno));
	free(envp);
	close(null_fd);
	return pid;
}

/* Reap pid, waiting at most timeout_s (< 0: forever). 1 when it is gone,
 * 0 when it is still running. *status gets the wait status, or -1 when
 * someone else reaped it. */
static int reap(pid_t pid, double timeout_s, int *status)
{
	double deadline = now_s() + timeout_s;
	int st = 0;

	for (;;) {
		pid_t r = waitpid(pid, &st, timeout_s < 0 ? 0 : WNOHANG);
		if (r == pid) {
			if (status != NULL)
				*status = st;
			return 1;
		}
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			if (status != NULL)
				*status = -1;
			return 1;
		}
		if (now_s() >= deadline)
			return 0;
		sleep_ms(10);
	}
}

/* Runs etcdctl on one endpoint; returns its exit status, or -1 when it
 * could not run or took longer than CTL_TIMEOUT_S. With out, its stdout is
 * captured there (NUL-terminated, truncated to outsz). */
static int run_etcdctl(const etcdh_cluster *c, const char *endpoint,
                       const char *const *args, char *out, size_t outsz)
{
	char path[PATH_MAX];
	struct argv_buf a = { .argc = 0 };
	int pipe_fds[2] = { -1, -1 };
	size_t got = 0;
	double deadline = now_s() + CTL_TIMEOUT_S;
	int status = -1;
	pid_t pid;

	if (etcdctl_program(path, sizeof(path)) != 0)
		return -1;
	argv_add(&a, "%s", path);
	argv_add(&a, "--endpoints=%s://%s", c->tls_cert ? "https" : "http",
	         endpoint);
	if (c->tls_cert != NULL) {
		/* Without CA or client certificate etcdctl talks plain
		 * text unless told otherwise. */
		argv_add(&a, "--insecure-transport=false");
		argv_add(&a, "--insecure-skip-tls-verify");
	}
	if (c->ctl_cert != NULL && c->ctl_key != NULL) {
		argv_add(&a, "--cert=%s", c->ctl_cert);
		argv_add(&a, "--key=%s", c->ctl_key);
	}
	argv_add(&a, "--dial-timeout=1s");
	argv_add(&a, "--command-timeout=1s");
	for (; *args != NULL; args++)
		if (argv_add(&a, "%s", *args) != 0)
			return -1;
	if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
		fail("pipe: %s", strerror(errno));
		return -1;
	}
	pid = spawn(path, a.argv, pipe_fds[1]);
	close(pipe_fds[1]);
	if (pid < 0) {
		close(pipe_fds[0]);
		return -1;
	}
	for (;;) {
		struct pollfd pfd = { .fd = pipe_fds[0], .events = POLLIN };
		char scratch[512];
		int wait_ms = (int)((deadline - now_s()) * 1000);
		ssize_t r;

		if (wait_ms <= 0 || poll(&pfd, 1, wait_ms) == 0)
			break;
		if (out != NULL && got + 1 < outsz)
			r = read(pipe_fds[0], out + got, outsz - 1 - got);
		else
			r = read(pipe_fds[0], scratch, sizeof(scratch));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		if (out != NULL && got + 1 < outsz)
			got += (size_t)r;
	}
	close(pipe_fds[0]);
	if (out != NULL && outsz > 0)
		out[got] = '\0';
	if (reap(pid, deadline - now_s(), &status) == 0) {
		kill(pid, SIGKILL);
		reap(pid, -1, NULL);
		return -1;
	}
	return status >= 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* ---- members ------------------------------------------------------------ */

/* Whether something accepts connections on the loopback port. */
static bool port_open(int port)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	bool open_now;

	if (fd < 0)
		return false;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sa.sin_port = htons((uint16_t)port);
	open_now = connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0;
	close(fd);
	return open_now;
}

static bool member_healthy(const etcdh_cluster *c, const struct member *m)
{
	static const char *const args[] = { "endpoint", "health", NULL };

	/* etcdctl spends its whole dial timeout on a port not yet open. */
	if (!port_open(m->client_port))
		return false;
	return run_etcdctl(c, m->endpoint, args, NULL, 0) == 0;
}

/* The last LOG_TAIL_BYTES of the member's log, from a line start, into buf
 * (LOG_TAIL_BYTES + 1 bytes). -1 when there is no log. */
static int read_log_tail(const struct member *m, char *buf)
{
	FILE *f = fopen(m->log_path, "r");
	long size;
	size_t len;
	char *line;

	if (f == NULL)
		return -1;
	fseek(f, 0, SEEK_END);
	size = ftell(f);
	fseek(f, size > LOG_TAIL_BYTES ? size - LOG_TAIL_BYTES : 0, SEEK_SET);
	len = fread(buf, 1, LOG_TAIL_BYTES, f);
	fclose(f);
	buf[len] = '\0';
	line = strchr(buf, '\n');
	if (size > LOG_TAIL_BYTES && line != NULL)
		memmove(buf, line + 1, strlen(line + 1) + 1);
	return 0;
}

static void print_log_tail(const struct member *m)
{
	char buf[LOG_TAIL_BYTES + 1];
	size_t len;

	if (read_log_tail(m, buf) != 0) {
		fail("%s: no log at %s", m->name, m->log_path);
		return;
	}
	len = strlen(buf);
	fprintf(stderr, "etcdh: --- last lines of %s ---\n%s%s", m->log_path,
	        buf, len > 0 && buf[len - 1] != '\n' ? "\n" : "");
	fprintf(stderr, "etcdh: --- end of %s ---\n", m->log_path);
}

static bool log_mentions(const struct member *m, const char *needle)
{
	char buf[LOG_TAIL_BYTES + 1];

	return read_log_tail(m, buf) == 0 && strstr(buf, needle) != NULL;
}

static void forget_child(struct member *m)
{
	registry_remove(m->pid);
	m->pid = 0;
	m->state = MEMBER_DOWN;
}

/* Notices a member that exited by itself. */
static bool member_exited(struct member *m)
{
	int status;

	if (m->state == MEMBER_DOWN)
		return true;
	if (reap(m->pid, 0, &status) == 0)
		return false;
	if (status >= 0 && WIFEXITED(status))
		fail("%s exited with status %d", m->name, WEXITSTATUS(status));
	else if (status >= 0 && WIFSIGNALED(status))
		fail("%s was killed by signal %d", m->name, WTERMSIG(status));
	forget_child(m);
	return true;
}

static int launch_member(etcdh_cluster *c, int i, const char *cluster_state)
{
	struct member *m = &c->m[i];
	struct argv_buf a = { .argc = 0 };
	char path[PATH_MAX];
	int log_fd;
	int rc = 0;

	if (etcd_program(path, sizeof(path)) != 0)
		return -1;
	rc |= argv_add(&a, "%s", path);
	rc |= argv_add(&a, "--name=%s", m->name);
	rc |= argv_add(&a, "--data-dir=%s", m->data_dir);
	rc |= argv_add(&a, "--listen-client-urls=%s://%s",
	               c->tls_cert ? "https" : "http", m->endpoint);
	rc |= argv_add(&a, "--advertise-client-urls=%s://%s",
	               c->tls_cert ? "https" : "http", m->endpoint);
	if (c->tls_cert != NULL) {
		rc |= argv_add(&a, "--cert-file=%s", c->tls_cert);
		rc |= argv_add(&a, "--key-file=%s", c->tls_key);
	}
	if (c->tls_cert != NULL && c->client_ca != NULL) {
		rc |= argv_add(&a, "--client-cert-auth");
		rc |= argv_add(&a, "--trusted-ca-file=%s", c->client_ca);
	}
	rc |= argv_add(&a, "--listen-peer-urls=http://127.0.0.1:%d",
	               m->peer_port);
	rc |= argv_add(&a, "--initial-advertise-peer-urls=http://127.0.0.1:%d",
	               m->peer_port);
	rc |= argv_add(&a, "--initial-cluster=%s", c->initial_cluster);
	rc |= argv_add(&a, "--initial-cluster-token=%s", c->token);
	rc |= argv_add(&a, "--initial-cluster-state=%s", cluster_state);
	rc |= argv_add(&a, "--heartbeat-interval=100");
	rc |= argv_add(&a, "--election-timeout=1000");
	rc |= argv_add(&a, "--snapshot-count=1000000");
	rc |= argv_add(&a, "--logger=zap");
	rc |= argv_add(&a, "--log-outputs=stderr");
	rc |= argv_add(&a, "--log-level=error");
	for (char **x = c->extra; x != NULL && *x != NULL; x++)
		rc |= argv_add(&a, "%s", *x);
	if (rc != 0) {
		fail("%s: too many or too long etcd arguments", m->name);
		return -1;
	}
	log_fd = open(m->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC,
	              0600);
	if (log_fd < 0) {
		fail("cannot open %s: %s", m->log_path, strerror(errno));
		return -1;
	}
	m->pid = spawn(path, a.argv, log_fd);
	close(log_fd);
	if (m->pid < 0) {
		m->pid = 0;
		return -1;
	}
	if (registry_add(m->pid) != 0)
		fail("more than %d etcd members at once: %s is not guarded",
		     MAX_CHILDREN, m->name);
	m->state = MEMBER_RUNNING;
	return 0;
}

/* Waits until every member in `wanted` (a bit mask) answers health. Gives
 * up at once when one of them exits. -1 leaves the culprits' bits in
 * *failed. */
static int wait_members(etcdh_cluster *c, unsigned wanted, double timeout_s,
                        unsigned *failed)
{
	double deadline = now_s() + timeout_s;
	unsigned pending = wanted;

	for (;;) {
		for (int i = 0; i < c->n; i++) {
			unsigned bit = 1u << i;
			if (!(pending & bit))
				continue;
			if (member_exited(&c->m[i])) {
				*failed = bit;
				return -1;
			}
			if (member_healthy(c, &c->m[i]))
				pending &= ~bit;
		}
		if (pending == 0)
			return 0;
		if (now_s() >= deadline) {
			*failed = pending;
			return -1;
		}
		sleep_ms(POLL_MS);
	}
}

static void report_failed(etcdh_cluster *c, unsigned failed, double timeout_s)
{
	for (int i = 0; i < c->n; i++) {
		if (!(failed & (1u << i)))
			continue;
		if (c->m[i].state != MEMBER_DOWN)
			fail("%s (%s) not healthy within %.0f s", c->m[i].name,
			     c->m[i].endpoint, timeout_s);
		print_log_tail(&c->m[i]);
	}
}

static void kill_member(struct member *m)
{
	if (m->state == MEMBER_DOWN)
		return;
	kill(m->pid, SIGKILL);
	reap(m->pid, -1, NULL);
	forget_child(m);
}

/* Kills the members and removes their directories, keeping c. */
static void teardown_members(etcdh_cluster *c)
{
	for (int i = 0; i < c->n; i++) {
		kill_member(&c->m[i]);
		remove_tree(c->m[i].dir);
		c->m[i].dir[0] = '\0';
	}
}

/* Ports, directories and the flags that depend on them, for a new try. */
static int prepare_members(etcdh_cluster *c)
{
	int ports[2 * MAX_MEMBERS];
	const char *tmp = getenv("TMPDIR");
	size_t off = 0;

	if (tmp == NULL || tmp[0] == '\0')
		tmp = "/tmp";
	if (pick_ports(ports, 2 * c->n) != 0)
		return -1;
	c->endpoints[0] = '\0';
	c->initial_cluster[0] = '\0';
	for (int i = 0; i < c->n; i++) {
		struct member *m = &c->m[i];

		m->client_port = ports[2 * i];
		m->peer_port = ports[2 * i + 1];
		snprintf(m->name, sizeof(m->name), "m%d", i);
		snprintf(m->endpoint, sizeof(m->endpoint), "127.0.0.1:%d",
		         m->client_port);
		snprintf(m->dir, sizeof(m->dir), "%s/etcdh-XXXXXX", tmp);
		if (mkdtemp(m->dir) == NULL) {
			fail("mkdtemp %s: %s", m->dir, strerror(errno));
			m->dir[0] = '\0';
			return -1;
		}
		chmod(m->dir, 0700);
		if (join_path(m->data_dir, sizeof(m->data_dir), m->dir,
		              "data") != 0 ||
		    join_path(m->log_path, sizeof(m->log_path), m->dir,
		              "etcd.log") != 0) {
			fail("TMPDIR path too long: %s", m->dir);
			return -1;
		}
		snprintf(c->endpoints + off, sizeof(c->endpoints) - off,
		         "%s%s", i > 0 ? "," : "", m->endpoint);
		off = strlen(c->endpoints);
		snprintf(c->initial_cluster + strlen(c->initial_cluster),
		         sizeof(c->initial_cluster) - strlen(c->initial_cluster),
		         "%s%s=http://127.0.0.1:%d", i > 0 ? "," : "", m->name,
		         m->peer_port);
	}
	return 0;
}

/* One attempt at bringing the whole cluster up. 1 means "a port was taken
 * meanwhile, try again with others". */
static int try_start(etcdh_cluster *c)
{
	unsigned all = (1u << c->n) - 1;
	unsigned failed = 0;
	int rc = 0;

	if (prepare_members(c) != 0)
		return -1;
	for (int i = 0; i < c->n && rc == 0; i++)
		rc = launch_member(c, i, "new");
	if (rc == 0 && wait_members(c, all, START_TIMEOUT_S, &failed) == 0)
		return 0;
	for (int i = 0; i < c->n; i++)
		if (log_mentions(&c->m[i], "address already in use"))
			return 1;
	report_failed(c, failed, START_TIMEOUT_S);
	return -1;
}

static int copy_extra(etcdh_cluster *c, const char *const *extra)
{
	size_t n = 0;

	if (extra == NULL)
		return 0;
	while (extra[n] != NULL)
		n++;
	c->extra = calloc(n + 1, sizeof(*c->extra));
	if (c->extra == NULL)
		return -1;
	for (size_t i = 0; i < n; i++) {
		c->extra[i] = strdup(extra[i]);
		if (c->extra[i] == NULL)
			return -1;
	}
	return 0;
}

/* A copy of s (NULL stays NULL); -1 when out of memory. */
static int copy_opt(char **out, const char *s)
{
	*out = s != NULL ? strdup(s) : NULL;
	return s != NULL && *out == NULL ? -1 : 0;
}

static int copy_tls(etcdh_cluster *c, const etcdh_opts *o)
{
	if ((o->tls_cert == NULL) != (o->tls_key == NULL)) {
		fail("tls_cert and tls_key go together");
		return -1;
	}
	if (copy_opt(&c->tls_cert, o->tls_cert) != 0 ||
	    copy_opt(&c->tls_key, o->tls_key) != 0 ||
	    copy_opt(&c->client_ca, o->client_ca) != 0 ||
	    copy_opt(&c->ctl_cert, o->ctl_cert) != 0 ||
	    copy_opt(&c->ctl_key, o->ctl_key) != 0) {
		fail("out of memory");
		return -1;
	}
	return 0;
}

static bool programs_found(void)
{
	char path[PATH_MAX];

	return etcd_program(path, sizeof(path)) == 0 &&
	       etcdctl_program(path, sizeof(path)) == 0;
}

/* ---- public API --------------------------------------------------------- */

int etcdh_start(const etcdh_opts *o, etcdh_cluster **out)
{
	static atomic_int clusters_started;
	etcdh_cluster *c;
	int rc = -1;

	*out = NULL;
	if (o == NULL || (o->members != 1 && o->members != 3)) {
		fail("members must be 1 or 3");
		return -1;
	}
	if (!programs_found())
		return -1;
	pthread_once(&guard_once, install_guards);
	c = calloc(1, sizeof(*c));
	if (c == NULL || copy_extra(c, o->extra_args) != 0) {
		fail("out of memory");
		etcdh_destroy(c);
		return -1;
	}
	if (copy_tls(c, o) != 0) {
		etcdh_destroy(c);
		return -1;
	}
	c->n = o->members;
	snprintf(c->token, sizeof(c->token), "etcdh-%d-%d", (int)getpid(),
	         atomic_fetch_add(&clusters_started, 1));
	live_add(c);
	for (int attempt = 0; attempt < START_TRIES; attempt++) {
		rc = try_start(c);
		if (rc != 1)
			break;
		fail("a port was taken meanwhile; trying other ports");
		teardown_members(c);
	}
	if (rc != 0) {
		if (rc == 1)
			fail("ports kept being taken; gave up after %d tries",
			     START_TRIES);
		etcdh_destroy(c);
		return -1;
	}
	*out = c;
	return 0;
}

const char *etcdh_endpoints(const etcdh_cluster *c)
{
	return c->endpoints;
}

const char *etcdh_endpoint(const etcdh_cluster *c, int i)
{
	return i >= 0 && i < c->n ? c->m[i].endpoint : NULL;
}

const char *etcdh_dir(const etcdh_cluster *c, int i)
{
	return i >= 0 && i < c->n ? c->m[i].dir : NULL;
}

int etcdh_members(const etcdh_cluster *c)
{
	return c->n;
}

long etcdh_pid_cpu_ms(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return -1;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* Fields after the parenthesised name: state is 3, utime 14, stime 15. */
	const char *p = strrchr(buf, ')');
	unsigned long ut = 0, st = 0;
	if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
	                        &ut, &st) != 2)
		return -1;
	return (long)((ut + st) * 1000 / (unsigned long)sysconf(_SC_CLK_TCK));
}

long etcdh_cpu_ms(const etcdh_cluster *c, int i)
{
	if (i < 0 || i >= c->n || c->m[i].pid <= 0)
		return -1;
	return etcdh_pid_cpu_ms(c->m[i].pid);
}

static struct member *member_at(etcdh_cluster *c, int i)
{
	if (c == NULL || i < 0 || i >= c->n) {
		fail("no member %d", i);
		return NULL;
	}
	return &c->m[i];
}

int etcdh_kill(etcdh_cluster *c, int i)
{
	struct member *m = member_at(c, i);

	if (m == NULL)
		return -1;
	kill_member(m);
	return 0;
}

int etcdh_stop(etcdh_cluster *c, int i)
{
	struct member *m = member_at(c, i);

	if (m == NULL)
		return -1;
	if (m->state == MEMBER_DOWN)
		return 0;
	kill(m->pid, SIGTERM);
	if (m->state == MEMBER_PAUSED)
		kill(m->pid, SIGCONT);
	if (reap(m->pid, STOP_TIMEOUT_S, NULL) == 0) {
		fail("%s ignored SIGTERM for %.0f s; killing it", m->name,
		     STOP_TIMEOUT_S);
		kill(m->pid, SIGKILL);
		reap(m->pid, -1, NULL);
	}
	forget_child(m);
	return 0;
}

int etcdh_restart(etcdh_cluster *c, int i)
{
	struct member *m = member_at(c, i);
	unsigned failed = 0;

	if (m == NULL)
		return -1;
	if (!member_exited(m)) {
		fail("%s is still running: kill or stop it first", m->name);
		return -1;
	}
	if (launch_member(c, i, "existing") != 0)
		return -1;
	if (wait_members(c, 1u << i, START_TIMEOUT_S, &failed) != 0) {
		report_failed(c, failed, START_TIMEOUT_S);
		return -1;
	}
	return 0;
}

int etcdh_pause(etcdh_cluster *c, int i)
{
	struct member *m = member_at(c, i);
	int status = 0;

	if (m == NULL)
		return -1;
	if (m->state != MEMBER_RUNNING) {
		fail("%s is not running", m->name);
		return -1;
	}
	kill(m->pid, SIGSTOP);
	/* Return only once it is really stopped. */
	while (waitpid(m->pid, &status, WUNTRACED) < 0 && errno == EINTR)
		;
	if (!WIFSTOPPED(status)) {
		fail("%s exited instead of pausing", m->name);
		forget_child(m);
		return -1;
	}
	m->state = MEMBER_PAUSED;
	return 0;
}

int etcdh_resume(etcdh_cluster *c, int i)
{
	struct member *m = member_at(c, i);

	if (m == NULL)
		return -1;
	if (m->state != MEMBER_PAUSED) {
		fail("%s is not paused", m->name);
		return -1;
	}
	kill(m->pid, SIGCONT);
	m->state = MEMBER_RUNNING;
	return 0;
}

/* The number after "key": in a JSON text, 0 when absent. The ids exceed
 * int64, hence no JSON library here. */
static unsigned long long json_number(const char *json, const char *key)
{
	const char *p = strstr(json, key);
	return p != NULL ? strtoull(p + strlen(key), NULL, 10) : 0;
}

int etcdh_leader(etcdh_cluster *c)
{
	static const char *const args[] = { "endpoint", "status", "-w", "json",
		                            NULL };
	char out[4096];

	for (int i = 0; i < c->n; i++) {
		unsigned long long self;
		unsigned long long leader;

		if (c->m[i].state != MEMBER_RUNNING ||
		    run_etcdctl(c, c->m[i].endpoint, args, out, sizeof(out)) != 0)
			continue;
		self = json_number(out, "\"member_id\":");
		leader = json_number(out, "\"leader\":");
		if (self != 0 && self == leader)
			return i;
	}
	return -1;
}

int etcdh_lease_count(etcdh_cluster *c)
{
	static const char *const args[] = { "lease", "list", NULL };
	char out[256];
	int n;

	for (int i = 0; i < c->n; i++)
		if (c->m[i].state == MEMBER_RUNNING &&
		    run_etcdctl(c, c->m[i].endpoint, args, out, sizeof(out)) == 0 &&
		    sscanf(out, "found %d leases", &n) == 1)
			return n;
	return -1;
}

int etcdh_wait_healthy(etcdh_cluster *c, double timeout_s)
{
	unsigned wanted = 0;
	unsigned failed = 0;

	for (int i = 0; i < c->n; i++)
		if (c->m[i].state == MEMBER_RUNNING)
			wanted |= 1u << i;
	if (wait_members(c, wanted, timeout_s, &failed) != 0) {
		report_failed(c, failed, timeout_s);
		return -1;
	}
	return 0;
}

void etcdh_destroy(etcdh_cluster *c)
{
	if (c == NULL)
		return;
	live_remove(c);
	teardown_members(c);
	for (char **x = c->extra; x != NULL && *x != NULL; x++)
		free(*x);
	free(c->extra);
	free(c->tls_cert);
	free(c->tls_key);
	free(c->client_ca);
	free(c->ctl_cert);
	free(c->ctl_key);
	free(c);
}
