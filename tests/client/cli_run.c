/* cli_run.c - running the `leaserun` command from the client tests. Test
 * main thread only. */
#include "cli_run.h"

#include <errno.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"

#include "test.h"

char cli_env_endpoints[512], cli_env_prefix[300];
const char *cli_env_user, *cli_env_password;
char cli_tmpdir[64];

void cli_use_client(lr_client *c)
{
	snprintf(cli_env_endpoints, sizeof(cli_env_endpoints), "%s",
	         etcdh_endpoints(cluster));
	snprintf(cli_env_prefix, sizeof(cli_env_prefix), "%s", lr_client_prefix(c));
}

/* The environment of a run, in e (its strings live in e). */
struct run_env {
	char endpoints[600], prefix[320], user[300], password[300];
	const char *list[5];
};

static const char *const *run_env(struct run_env *e)
{
	int n = 0;
	snprintf(e->endpoints, sizeof(e->endpoints), "LEASERUN_ENDPOINTS=%s", cli_env_endpoints);
	snprintf(e->prefix, sizeof(e->prefix), "LEASERUN_PREFIX=%s", cli_env_prefix);
	e->list[n++] = e->endpoints;
	e->list[n++] = e->prefix;
	if (cli_env_user != NULL) {
		snprintf(e->user, sizeof(e->user), "LEASERUN_USER=%s", cli_env_user);
		e->list[n++] = e->user;
	}
	if (cli_env_password != NULL) {
		snprintf(e->password, sizeof(e->password), "LEASERUN_PASSWORD=%s",
		         cli_env_password);
		e->list[n++] = e->password;
	}
	e->list[n] = NULL;
	return e->list;
}

static void show(const proc_result *r)
{
	fprintf(stderr, "   leaserun -> %d\n   stdout: %.300s   stderr: %.300s\n",
	        r->status, r->out, r->err);
}

proc_result cli_run(const char *input, ...)
{
	struct run_env e;
	va_list ap;
	va_start(ap, input);
	proc_result r = proc_cli_v(run_env(&e), input, ap);
	va_end(ap);
	show(&r);
	return r;
}

proc_result cli_run_long(const char *const *args, int timeout_ms)
{
	struct run_env e;
	char *argv[34];
	proc_cli_argv(argv, 34, args);
	proc_result r = proc_run(argv, run_env(&e), NULL, timeout_ms);
	show(&r);
	return r;
}

/* args run through sh -c with a redirection after them (">&-", "<&-"). */
static proc_result run_redirected(const char *redirect, const char *const *args)
{
	struct run_env e;
	char script[300];
	char *argv[37] = { "/bin/sh", "-c", script };
	snprintf(script, sizeof(script), "exec \"$0\" \"$@\" %s", redirect);
	proc_cli_argv(argv + 3, 34, args);
	proc_result r = proc_run(argv, run_env(&e), NULL, 60000);
	show(&r);
	return r;
}

proc_result cli_run_stdout_to(const char *path, const char *const *args)
{
	char redirect[200];
	if (path == NULL)
		snprintf(redirect, sizeof(redirect), ">&-");
	else
		snprintf(redirect, sizeof(redirect), ">'%s'", path);
	return run_redirected(redirect, args);
}

proc_result cli_run_stdin_closed(const char *const *args)
{
	return run_redirected("<&-", args);
}

void cli_start(proc_bg *p, const char *log_path, const char *const *args)
{
	struct run_env e;
	char *argv[34];
	proc_cli_argv(argv, 34, args);
	proc_start(p, argv, run_env(&e), log_path);
}

proc_result cli_run_tty(const char *const *args)
{
	return cli_run_tty_cols(args, 200);
}

proc_result cli_run_tty_cols(const char *const *args, int cols)
{
	struct run_env e;
	char *argv[34];
	proc_cli_argv(argv, 34, args);
	const char *const *env = run_env(&e);
	proc_result r = { .status = -1 };
	size_t cap = 1 << 16, len = 0;
	r.out = calloc(1, cap);
	r.err = calloc(1, 1);
	CHECK(r.out != NULL && r.err != NULL);
	struct winsize ws = { .ws_row = 50, .ws_col = (unsigned short)cols };
	int fd = -1;
	int64_t t0 = lr_mono_ms();
	pid_t pid = forkpty(&fd, NULL, NULL, &ws);
	CHECK(pid >= 0);
	if (pid == 0) {
		for (size_t i = 0; env[i] != NULL; i++)
			putenv((char *)env[i]);
		execv(argv[0], argv);
		_exit(127);
	}
	/* Until the last of the terminal's writers is gone (EIO), 60 s at
	 * most; then killed. */
	bool ended = false;
	while (!ended && lr_mono_ms() - t0 < 60000) {
		struct pollfd p = { fd, POLLIN, 0 };
		if (poll(&p, 1, 100) <= 0)
			continue;
		if (len + 1 == cap)
			break; /* enough for any test */
		ssize_t n = read(fd, r.out + len, cap - 1 - len);
		if (n < 0 && errno == EINTR)
			continue;
		ended = n <= 0;
		if (n > 0)
			len += (size_t)n;
	}
	r.out[len] = '\0';
	close(fd);
	if (!ended)
		kill(pid, SIGKILL);
	while (waitpid(pid, &r.status, 0) < 0 && errno == EINTR)
		;
	r.status = WIFEXITED(r.status) ? WEXITSTATUS(r.status) : 128 + WTERMSIG(r.status);
	r.took_ms = (int)(lr_mono_ms() - t0);
	show(&r);
	return r;
}

int cli_setup(void)
{
	signal(SIGPIPE, SIG_IGN); /* a child that exits before reading */
	snprintf(cli_tmpdir, sizeof(cli_tmpdir), "/tmp/leaserun-cli-XXXXXX");
	if (mkdtemp(cli_tmpdir) == NULL)
		return -1;
	return cluster_up(1, NULL);
}

void cli_teardown(void)
{
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", cli_tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", cli_tmpdir);
	cluster_down();
}

const char *cli_write_file(const char *name, const char *content)
{
	static char paths[8][128];
	static unsigned next;
	char *path = paths[next++ % 8];
	snprintf(path, sizeof(paths[0]), "%s/%s", cli_tmpdir, name);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	fputs(content, f);
	fclose(f);
	return path;
}
