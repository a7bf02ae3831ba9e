/* cmd_status.c - `leaserun status`: one task or the task list, as a table or
 * JSON, once or refreshed every second (--watch). Main thread; the SIGINT
 * handler only sets a flag. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "options.h"
#include "output.h"

static const char usage[] =
    "Usage: leaserun status [ID] [--state S] [--limit N] [--json] [--watch]\n"
    "\n"
    "Show tasks, oldest first: state, step k/n (with a progress bar on a\n"
    "terminal), attempt, runner, time since the last change, error.\n"
    "\n"
    "  ID           only this task (exit 4 when there is no such task)\n"
    "  --state S    only tasks in state S: pending, running, succeeded,\n"
    "               failed or cancelled\n"
    "  --limit N    at most N tasks (the oldest)\n"
    "  --json       JSON: an object with ID, otherwise an array\n"
    "  --watch      refresh every second until interrupted\n";

#define WATCH_INTERVAL_MS 1000
#define WATCH_SLICE_MS 100

struct query {
	const char *id;
	int filter; /* -1: any state */
	size_t limit;
	int json;
};

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
	(void)sig;
	interrupted = 1;
}

/* Print the tasks of q to f. */
static int show(FILE *f, lr_client *c, const struct query *q,
                const out_style *st, lr_err *err)
{
	lr_task_status one, *v = NULL;
	size_t n = 0;
	int rc;

	if (q->id != NULL) {
		rc = lr_task_get(c, q->id, &one, err);
		v = &one;
		n = 1;
	} else {
		rc = lr_task_list(c, q->filter, q->limit, &v, &n, err);
	}
	if (rc != 0)
		return rc;
	if (q->json)
		out_status_json(f, v, n, q->id != NULL);
	else
		out_status_table(f, v, n, st, lr_wall_ms());
	if (q->id != NULL)
		lr_task_status_clear(&one);
	else
		lr_task_list_free(v, n);
	return 0;
}

/* Sleep until the next refresh or an interrupt. */
static void wait_refresh(void)
{
	struct timespec slice = { 0, WATCH_SLICE_MS * 1000000L };

	for (int t = 0; t < WATCH_INTERVAL_MS && !interrupted;
	     t += WATCH_SLICE_MS)
		nanosleep(&slice, NULL);
}

/* One screen: built in memory first so that clearing and redrawing the
 * terminal happens in one write, without flicker. A failed first refresh
 * ends the command like a plain status would; a later one is shown and the
 * watch goes on: etcd may come back. */
static int watch_frame(lr_client *c, const struct query *q,
                       const out_style *st, int first)
{
	char *frame = NULL, now[LR_TIME_BUF];
	size_t len = 0;
	lr_err err = { 0 };
	FILE *f = open_memstream(&frame, &len);
	int rc = CLI_CONTINUE;

	if (f == NULL)
		return CLI_CONTINUE;
	if (st->tty) {
		lr_rfc3339_now(now);
		fprintf(f, "\033[H\033[2JEvery %ds: leaserun status    %s\n\n",
		        WATCH_INTERVAL_MS / 1000, now);
	}
	if (show(f, c, q, st, &err) != 0) {
		if (first)
			rc = cli_fail(&err);
		else
			fprintf(st->tty ? f : stderr, "leaserun: %s\n", err.msg);
	}
	fclose(f);
	if (rc == CLI_CONTINUE)
		fwrite(frame, 1, len, stdout);
	fflush(stdout);
	free(frame);
	return rc;
}

static int watch(lr_client *c, const struct query *q, const out_style *st)
{
	struct sigaction sa = { .sa_handler = on_interrupt };
	int rc = CLI_CONTINUE;

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	for (int first = 1; !interrupted && rc == CLI_CONTINUE; first = 0) {
		rc = watch_frame(c, q, st, first);
		if (rc == CLI_CONTINUE)
			wait_refresh();
	}
	return rc == CLI_CONTINUE ? EXIT_OK : rc;
}

static int make_query(const char *id, const char *state, const char *limit,
                      int json, struct query *q)
{
	long lim = 0;

	*q = (struct query){ .id = id, .filter = -1, .json = json };
	if (id != NULL && (state != NULL || limit != NULL))
		return cli_usage_error("status: --state and --limit apply to the "
		                       "list, not to one task");
	if (state != NULL) {
		q->filter = lr_task_state_parse(state);
		if (q->filter < 0)
			return cli_usage_error("--state: unknown state \"%s\" "
			                       "(pending, running, succeeded, "
			                       "failed, cancelled)", state);
	}
	if (limit != NULL && cli_int("--limit", limit, 1, 1000000000L, &lim) !=
	                         CLI_CONTINUE)
		return EXIT_USAGE;
	q->limit = (size_t)lim;
	return CLI_CONTINUE;
}

int cmd_status(int argc, char **argv)
{
	const char *state = NULL, *limit = NULL;
	int json = 0, watching = 0;
	const cli_flag flags[] = {
		{ "state", &state, NULL },
		{ "limit", &limit, NULL },
		{ "json", NULL, &json },
		{ "watch", NULL, &watching },
		{ NULL, NULL, NULL },
	};
	const cli_cmd cmd = { "status", usage, flags, 1 };
	cli_common common = { 0 };
	const char *args[1] = { NULL };
	int nargs = 0;
	struct query q;
	out_style st = out_style_stdout();
	lr_client *c = NULL;
	lr_err err = { 0 };

	int rc = cli_parse(&cmd, argc, argv, &common, args, &nargs);
	if (rc == CLI_CONTINUE)
		rc = make_query(args[0], state, limit, json, &q);
	if (rc == CLI_CONTINUE)
		rc = cli_open(&common, &c);
	if (rc != CLI_CONTINUE)
		return rc;
	if (watching)
		rc = watch(c, &q, &st);
	else if (show(stdout, c, &q, &st, &err) != 0)
		rc = cli_fail(&err);
	else
		rc = EXIT_OK;
	lr_client_close(c);
	return rc;
}
