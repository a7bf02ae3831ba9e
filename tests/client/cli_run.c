/* cli_run.c - running the `leaserun` command from the client tests. Test
 * main thread only. */
#include "cli_run.h"

#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void cli_start(proc_bg *p, const char *log_path, const char *const *args)
{
	struct run_env e;
	char *argv[34];
	proc_cli_argv(argv, 34, args);
	proc_start(p, argv, run_env(&e), log_path);
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
