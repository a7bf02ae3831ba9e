/* proc.c - running programs from a test with a controlled environment.
 * Called from the test's main thread. */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "test.h"

extern char **environ;

/* The test's environment minus LEASERUN_*, plus env. Only the array is
 * allocated: the strings are borrowed. */
static char **child_env(const char *const env[])
{
	size_t n = 0, k = 0, extra = 0;
	while (environ[n] != NULL)
		n++;
	while (env != NULL && env[extra] != NULL)
		extra++;
	char **out = calloc(n + extra + 1, sizeof(*out));
	CHECK(out != NULL);
	for (size_t i = 0; i < n; i++)
		if (strncmp(environ[i], "LEASERUN_", 9) != 0)
			out[k++] = environ[i];
	for (size_t i = 0; i < extra; i++)
		out[k++] = (char *)env[i];
	out[k] = NULL;
	return out;
}

/* In the child: never outlive the test, then exec. */
static void exec_child(char *const argv[], char **envp, pid_t parent)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	signal(SIGPIPE, SIG_DFL);
	execve(argv[0], argv, envp);
	_exit(127);
}

static int wait_status(int st)
{
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

struct buf {
	char *data;
	size_t len, cap;
};

static void buf_add(struct buf *b, const char *p, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		b->cap = (b->len + n + 1) * 2;
		b->data = realloc(b->data, b->cap);
		CHECK(b->data != NULL);
	}
	memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
}

proc_result proc_run(char *const argv[], const char *const env[],
                     const char *input, int timeout_ms)
{
	int pin[2], pout[2], perr[2];
	CHECK(pipe2(pin, O_CLOEXEC) == 0 && pipe2(pout, O_CLOEXEC) == 0 &&
	      pipe2(perr, O_CLOEXEC) == 0);
	char **envp = child_env(env);
	pid_t parent = getpid();
	int64_t t0 = lr_mono_ms();
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		dup2(pin[0], 0);
		dup2(pout[1], 1);
		dup2(perr[1], 2);
		exec_child(argv, envp, parent);
	}
	free(envp);
	close(pin[0]);
	close(pout[1]);
	close(perr[1]);

	struct buf bo = { 0 }, be = { 0 };
	buf_add(&bo, "", 0);
	buf_add(&be, "", 0);
	size_t len = input != NULL ? strlen(input) : 0, sent = 0;
	struct pollfd p[3] = { { pin[1], POLLOUT, 0 }, { pout[0], POLLIN, 0 },
		               { perr[0], POLLIN, 0 } };
	if (len == 0) {
		close(pin[1]);
		p[0].fd = -1;
	}
	bool killed = false;
	while (p[1].fd >= 0 || p[2].fd >= 0) {
		int left = timeout_ms - (int)(lr_mono_ms() - t0);
		if (left <= 0 && !killed) {
			kill(pid, SIGKILL);
			killed = true;
		}
		int n = poll(p, 3, left > 0 ? left : 100);
		CHECK(n >= 0 || errno == EINTR);
		if (p[0].fd >= 0 && p[0].revents) {
			ssize_t w = write(p[0].fd, input + sent, len - sent);
			if (w > 0)
				sent += (size_t)w;
			if (w < 0 || sent == len) {
				close(p[0].fd);
				p[0].fd = -1;
			}
		}
		for (int i = 1; i < 3; i++) {
			if (p[i].fd < 0 || !p[i].revents)
				continue;
			char chunk[65536];
			ssize_t r = read(p[i].fd, chunk, sizeof(chunk));
			if (r <= 0) {
				close(p[i].fd);
				p[i].fd = -1;
			} else {
				buf_add(i == 1 ? &bo : &be, chunk, (size_t)r);
			}
		}
	}
	if (p[0].fd >= 0)
		close(p[0].fd);
	int st = 0;
	struct rusage ru;
	memset(&ru, 0, sizeof(ru));
	CHECK(wait4(pid, &st, 0, &ru) == pid);
	proc_result r = { .status = wait_status(st), .out = bo.data,
		          .err = be.data, .took_ms = (int)(lr_mono_ms() - t0),
		          .max_rss_kb = ru.ru_maxrss };
	fprintf(stderr, "   %s %s%s... -> %d in %d ms\n   stdout: %.400s\n   stderr: %.600s\n",
	        strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0],
	        argv[1] ? argv[1] : "", argv[1] ? " " : "", r.status, r.took_ms,
	        r.out, r.err);
	return r;
}

void proc_result_free(proc_result *r)
{
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
}

void proc_start(proc_bg *p, char *const argv[], const char *const env[],
                const char *log_path)
{
	memset(p, 0, sizeof(*p));
	p->status = -1;
	snprintf(p->log, sizeof(p->log), "%s", log_path);
	int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0 && null_fd >= 0);
	char **envp = child_env(env);
	pid_t parent = getpid();
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		dup2(null_fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		exec_child(argv, envp, parent);
	}
	free(envp);
	close(fd);
	close(null_fd);
	p->pid = pid;
}

static bool reap(proc_bg *p, int flags)
{
	if (p->status >= 0)
		return true;
	int st = 0;
	pid_t r = waitpid(p->pid, &st, flags);
	if (r == p->pid) {
		p->status = wait_status(st);
		return true;
	}
	return false;
}

bool proc_alive(proc_bg *p)
{
	return p->pid > 0 && !reap(p, WNOHANG);
}

int proc_wait(proc_bg *p, int timeout_ms)
{
	int64_t end = lr_mono_ms() + timeout_ms;
	while (!reap(p, WNOHANG)) {
		if (lr_mono_ms() >= end)
			return -1;
		lr_sleep_ms(10);
	}
	return p->status;
}

int proc_stop(proc_bg *p, int sig, int timeout_ms)
{
	if (p->pid <= 0)
		return -1;
	if (p->status < 0)
		kill(p->pid, sig);
	if (proc_wait(p, timeout_ms) < 0) {
		kill(p->pid, SIGKILL);
		reap(p, 0);
	}
	return p->status;
}

char *proc_slurp(const char *path)
{
	struct buf b = { 0 };
	buf_add(&b, "", 0);
	FILE *f = fopen(path, "rb");
	if (f == NULL)
		return b.data;
	char chunk[65536];
	size_t n;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		buf_add(&b, chunk, n);
	fclose(f);
	return b.data;
}

const char *proc_leaserun(void)
{
	const char *bin = getenv("LEASERUN_BIN");
	if (bin == NULL || bin[0] == '\0')
		TEST_FAIL("LEASERUN_BIN is not set");
	return bin;
}

void proc_cli_argv(char **argv, int n, const char *const *args)
{
	int k = 0;
	argv[k++] = (char *)proc_leaserun();
	for (; *args != NULL; args++) {
		CHECK(k < n - 1);
		argv[k++] = (char *)*args;
	}
	argv[k] = NULL;
}

proc_result proc_cli_v(const char *const env[], const char *input, va_list ap)
{
	const char *args[32];
	char *argv[34];
	int n = 0;
	for (const char *a = va_arg(ap, const char *); a != NULL;
	     a = va_arg(ap, const char *)) {
		CHECK(n < 31);
		args[n++] = a;
	}
	args[n] = NULL;
	proc_cli_argv(argv, 34, args);
	return proc_run(argv, env, input, 60000);
}

proc_result proc_cli(const char *const env[], const char *input, ...)
{
	va_list ap;
	va_start(ap, input);
	proc_result r = proc_cli_v(env, input, ap);
	va_end(ap);
	return r;
}
