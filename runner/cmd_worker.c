/* cmd_worker.c - `leaserun worker`: one runner with the shell step handler,
 * stopped gracefully by SIGTERM or SIGINT. Main thread; the signal handler
 * only calls lr_runner_stop, which is async-signal-safe. Its own log lines
 * go through the runner's log (lr_runner_log), so that each names it. */
#include <signal.h>
#include <unistd.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/resource.h>

#include "base/fdtable.h"
#include "engine/runner_int.h"
#include "exec/orphans.h"
#include "http/server.h"
#include "options.h"

static const char usage[] =
    "Usage: leaserun worker [--name N] [--concurrency C] [--ttl S] "
    "[--grace S]\n"
    "                       [--exit-when-idle] [--metrics ADDR:PORT]\n"
    "\n"
    "Run a runner: claim pending tasks and run their steps with /bin/sh,\n"
    "until SIGTERM or SIGINT (then running steps get --grace seconds to\n"
    "finish, the rest are stopped and their tasks released at once).\n"
    "\n"
    "  --name N            runner name (default <hostname>-<pid>)\n"
    "  --concurrency C     tasks run at once, >= 1 (default 1)\n"
    "  --ttl S             lease TTL in seconds, >= 1 (default 10)\n"
    "  --grace S           seconds steps get to finish on stop (default 10)\n"
    "  --exit-when-idle    exit once no task is pending or claimed\n"
    "  --metrics ADDR:PORT serve Prometheus metrics on http://ADDR:PORT/metrics\n"
    "                      (\":9464\" means 127.0.0.1:9464; off by default)\n"
    "\n"
    "Exit status: 0 after a graceful stop, 1 etcd error or name in use,\n"
    "2 bad flags.\n";

/* The runner a signal stops; the process-wide signal disposition is the
 * command's business, never the library's. */
static lr_runner *volatile signalled;

static void on_stop_signal(int sig)
{
	(void)sig;
	lr_runner *r = signalled;
	if (r != NULL)
		lr_runner_stop(r);
	else
		_exit(EXIT_OK); /* still connecting: nothing is held yet */
}

/* Installed before connecting, so that a SIGTERM while the connection is
 * being made is a clean exit 0 too; the runner is set once it exists. */
static void catch_stop_signals(void)
{
	struct sigaction sa = { .sa_handler = on_stop_signal };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	/* A log reader that goes away (worker 2>&1 | head) must not kill the
	 * runner and its claims with it; steps get SIGPIPE back by default. */
	signal(SIGPIPE, SIG_IGN);
}

/* Block the signals before the runner goes, so that no handler is halfway
 * through using it. */
static void release_stop_signals(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signalled = NULL;
}

struct worker_flags {
	const char *name, *concurrency, *ttl, *grace, *metrics;
	int exit_when_idle;
};

static int runner_opts(const struct worker_flags *f, lr_runner_opts *o)
{
	long conc = 1, ttl = 10, grace = 10;
	int rc = CLI_CONTINUE;

	char q[CLI_QUOTE_SIZE];
	if (f->name != NULL && !lr_id_valid(f->name))
		return cli_usage_error("--name: \"%s\" is not a valid runner name "
		                       "(1 to %d of A-Z a-z 0-9 . _ : -)",
		                       cli_quote(f->name, q), LR_ID_SIZE - 1);
	if (f->concurrency != NULL)
		rc = cli_int("--concurrency", f->concurrency, 1, LR_CONCURRENCY_MAX, &conc);
	if (rc == CLI_CONTINUE && f->ttl != NULL)
		rc = cli_int("--ttl", f->ttl, 1, CLI_TTL_MAX_S, &ttl);
	if (rc == CLI_CONTINUE && f->grace != NULL)
		rc = cli_int("--grace", f->grace, 0, CLI_GRACE_MAX_S, &grace);
	if (rc == CLI_CONTINUE && f->metrics != NULL) {
		/* A bad address is a usage error, found before connecting. */
		struct sockaddr_storage sa;
		socklen_t sa_len;
		lr_err err = { 0 };
		if (lr_http_parse_address(f->metrics, &sa, &sa_len, &err) != 0)
			rc = cli_usage_error("--metrics: %s", err.msg);
	}
	*o = (lr_runner_opts){
		.name = f->name,
		.concurrency = (int)conc,
		.ttl_s = (int)ttl,
		.grace_s = grace == 0 ? -1 : (int)grace, /* 0 means "default" */
		.exit_when_idle = f->exit_when_idle,
	};
	return rc;
}

/* As many descriptors as the hard limit allows (the soft one is often far
 * below it). EXIT_RUNTIME, said, when not even the slots' own fit and one
 * step: the worker would claim tasks only to give them back. *short_of
 * gets the descriptors all slots running a step need when the limit
 * (*limit) is below that (a step that cannot start is given back, its
 * attempt uncounted), 0 otherwise. */
static int raise_fd_limit(int concurrency, unsigned long long *short_of,
                          unsigned long long *limit)
{
	struct rlimit rl;
	*short_of = 0;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return CLI_CONTINUE;
	if (rl.rlim_cur < rl.rlim_max) {
		struct rlimit up = { .rlim_cur = rl.rlim_max, .rlim_max = rl.rlim_max };
		if (setrlimit(RLIMIT_NOFILE, &up) == 0)
			rl = up;
	}
	unsigned long long idle = FDS_OWN + (unsigned long long)FDS_SLOT_IDLE * concurrency;
	unsigned long long busy = FDS_OWN + (unsigned long long)FDS_SLOT_BUSY * concurrency;
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur >= busy)
		return CLI_CONTINUE;
	*limit = rl.rlim_cur;
	if (rl.rlim_cur < idle + FDS_SLOT_BUSY) {
		fprintf(stderr, "leaserun: worker: --concurrency %d needs about %llu open files, "
		        "and this process may open %llu (ulimit -n): raise the limit or lower "
		        "--concurrency\n", concurrency, busy, (unsigned long long)rl.rlim_cur);
		return EXIT_RUNTIME;
	}
	*short_of = busy;
	return CLI_CONTINUE;
}

/* Steps of a runner killed here before left their state directories.
 * Where no step could make one (TMPDIR missing or read-only), the worker
 * does not start: it would claim tasks only to give them back. */
static int sweep_state_dirs(lr_runner *r)
{
	size_t swept = 0;
	lr_err err = { 0 };
	if (lr_shell_step_sweep(NULL, &swept, &err) != 0) {
		fprintf(stderr, "leaserun: worker: %s (shell steps keep their state there: "
		        "set TMPDIR to a directory this user can write)\n", err.msg);
		return EXIT_RUNTIME;
	}
	if (swept > 0)
		lr_runner_log(r, LR_LOG_INFO, NULL, NULL, -1, "removed %zu state directories "
		              "left by steps whose runner was killed", swept);
	return CLI_CONTINUE;
}

/* /metrics on its own thread, before the runner claims anything: an
 * address that cannot be listened on ends the command at once. */
static int serve_metrics(lr_runner *r, const char *listen,
                         lr_metrics_server **out)
{
	lr_err err = { 0 };

	if (lr_metrics_serve(&r, 1, listen, out, &err) != 0)
		return cli_fail(&err);
	lr_runner_log(r, LR_LOG_INFO, NULL, NULL, -1, "metrics on http://%s/metrics",
	              lr_metrics_server_address(*out));
	return CLI_CONTINUE;
}

int cmd_worker(int argc, char **argv)
{
	struct worker_flags f = { 0 };
	const cli_flag flags[] = {
		{ "name", &f.name, NULL },
		{ "concurrency", &f.concurrency, NULL },
		{ "ttl", &f.ttl, NULL },
		{ "grace", &f.grace, NULL },
		{ "exit-when-idle", NULL, &f.exit_when_idle },
		{ "metrics", &f.metrics, NULL },
		{ NULL, NULL, NULL },
	};
	const cli_cmd cmd = { "worker", usage, flags, 0 };
	cli_common common = { 0 };
	lr_runner_opts o;
	lr_client *c = NULL;
	lr_runner *r = NULL;
	lr_metrics_server *metrics = NULL;
	lr_err err = { 0 };
	int nargs;

	unsigned long long fds_short = 0, fds_limit = 0;
	int rc = cli_parse(&cmd, argc, argv, &common, NULL, &nargs);
	if (rc == CLI_CONTINUE)
		rc = runner_opts(&f, &o);
	int slots = rc == CLI_CONTINUE && o.concurrency > 0 ? o.concurrency : 1;
	if (rc == CLI_CONTINUE)
		rc = raise_fd_limit(slots, &fds_short, &fds_limit);
	if (rc == CLI_CONTINUE) {
		/* While this is the only thread: growing the table is cheap. */
		lr_fd_table_reserve(FDS_OWN + FDS_SLOT_BUSY * slots);
		catch_stop_signals();
		rc = cli_open(&common, &c);
	}
	if (rc != CLI_CONTINUE)
		goto cleanup;
	if (lr_runner_new(c, &o, &r, &err) != 0) {
		rc = cli_fail(&err);
		goto cleanup;
	}
	if (lr_runner_handle(r, NULL, lr_shell_step, NULL) != 0) {
		fputs("leaserun: worker: cannot install the shell step handler\n",
		      stderr);
		rc = EXIT_RUNTIME;
		goto cleanup;
	}
	rc = sweep_state_dirs(r);
	if (rc != CLI_CONTINUE)
		goto cleanup;
	if (fds_short > 0)
		lr_runner_log(r, LR_LOG_WARN, NULL, NULL, -1,
		              "--concurrency %d may need about %llu open files, and this process "
		              "may open %llu (ulimit -n): a step that cannot start is given back "
		              "to be run elsewhere; raise the limit", o.concurrency, fds_short,
		              fds_limit);
	/* Its only children are guards: what a killed one leaves comes here
	 * and is stopped, so that the step may run again. */
	(void)lr_orphans_adopt();
	if (f.metrics != NULL) {
		rc = serve_metrics(r, f.metrics, &metrics);
		if (rc != CLI_CONTINUE)
			goto cleanup;
	}
	signalled = r;
	rc = lr_runner_run(r, &err) == 0 ? EXIT_OK : cli_fail(&err);
	release_stop_signals();
cleanup:
	lr_metrics_server_free(metrics);
	if (r != NULL)
		lr_runner_free(r);
	lr_client_close(c);
	return rc;
}
