/* cmd_status.c - `leaserun status`: one task or the task list, as a table or
 * JSON, once or redrawn on every change (--watch, from an etcd watch). Main
 * thread; with --watch it waits for changes and for SIGINT/SIGTERM on file
 * descriptors. */
#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "client/changes.h"
#include "options.h"
#include "output.h"

static const char usage[] =
    "Usage: leaserun status [ID] [--state S] [--limit N] [--json] [--watch]\n"
    "\n"
    "Show tasks, oldest first: state, step k/n (with a progress bar on a\n"
    "terminal), attempt, runner, time since the last change, and the error\n"
    "or, for a pending task, what it waits for (\"waiting: X org/a held by\n"
    "task t-12 on box-1\"). On a terminal, a last line counts them by state.\n"
    "\n"
    "  ID           only this task (exit 4 when there is no such task)\n"
    "  --state S    only tasks in state S: pending, running, succeeded,\n"
    "               failed or cancelled\n"
    "  --limit N    at most N tasks (the oldest)\n"
    "  --json       JSON: an object with ID, otherwise an array\n"
    "  --watch      redraw whenever a task changes, until interrupted; while\n"
    "               etcd does not answer, say so above the last tasks read\n";

/* Changes in a burst are drawn together: at most one redraw this often,
 * and, where a redraw takes long (it reads every task shown), no sooner
 * than WATCH_COST times what the last one took, up to WATCH_MAX_REDRAW_MS:
 * a screen of thousands of tasks that change all the time keeps the
 * command (and etcd, which serves the reads) at about a tenth of a core. */
#define WATCH_MIN_REDRAW_MS 100
#define WATCH_MAX_REDRAW_MS 2000
#define WATCH_COST 10

struct query {
	const char *id;
	int filter; /* -1: any state */
	size_t limit;
	int json;
};

/* Print the tasks of q to f. A write to f that failed is no library
 * error: *write_errno is then its errno (0 when every write went). stdio
 * drops what it could not write, so the reason is gone by the last
 * flush. */
static int show(FILE *f, lr_client *c, const struct query *q,
                const out_style *st, int *write_errno, lr_err *err)
{
	lr_task_status one, *v = NULL;
	size_t n = 0;
	int rc;

	*write_errno = 0;
	if (q->id != NULL) {
		rc = lr_task_get(c, q->id, &one, err);
		v = &one;
		n = 1;
	} else {
		rc = lr_task_list(c, q->filter, q->limit, &v, &n, err);
	}
	if (rc != 0)
		return rc;
	rc = lr_task_waits(c, v, n, err);
	if (rc == 0 && q->json) {
		int out = out_status_json(f, v, n, q->id != NULL);
		if (out == OUT_EWRITE)
			*write_errno = errno;
		else if (out != 0)
			rc = lr_err_set(err, LR_ENOMEM, "status --json: out of memory");
	} else if (rc == 0) {
		out_status_table(f, v, n, q->limit > 0 && n >= q->limit, st,
		                 lr_wall_ms());
	}
	if (rc == 0 && !q->json && q->id != NULL && st->tty)
		out_status_reason(f, &one);
	if (rc == 0 && !q->json && q->id != NULL)
		out_status_history(f, &one);
	if (q->id != NULL)
		lr_task_status_clear(&one);
	else
		lr_task_list_free(v, n);
	return rc;
}

/* The tasks as last read, shown again while etcd does not answer. */
struct last_read {
	char *text;
	size_t len;
};

/* The tasks read now, to f; kept in *last when the read worked. */
static int read_tasks(FILE *f, lr_client *c, const struct query *q,
                      const out_style *st, struct last_read *last, lr_err *err)
{
	char *text = NULL;
	size_t len = 0;
	FILE *m = open_memstream(&text, &len);

	if (m == NULL)
		return lr_err_set(err, LR_ENOMEM, "status: out of memory");
	int write_errno;
	int rc = show(m, c, q, st, &write_errno, err);
	fclose(m);
	if (rc == 0 && write_errno != 0) /* memory streams fail for want of it */
		rc = lr_err_set(err, LR_ENOMEM, "status: out of memory");
	if (rc == 0) {
		fwrite(text, 1, len, f);
		free(last->text);
		last->text = text;
		last->len = len;
	} else {
		free(text);
	}
	return rc;
}

/* While etcd does not answer, reading would only wait for the call
 * timeout: the frame says since when, and shows the last read again
 * (JSON, which a program reads, is not repeated off a terminal). */
static void tell_unreachable(FILE *f, int64_t heard_ms, const char *why,
                             const struct query *q, const out_style *st,
                             const struct last_read *last)
{
	char at[LR_TIME_BUF];
	bool plain_json = q->json && !st->tty;

	lr_rfc3339_format(heard_ms, at);
	/* "2026-11-21T05:29:17.123Z": the time of day, UTC. */
	fprintf(plain_json ? stderr : f, "etcd unreachable since %.8s UTC (%s)\n",
	        at + 11, why);
	if (!plain_json && last->text != NULL)
		fwrite(last->text, 1, last->len, f);
}

/* One screen: built in memory first so that clearing and redrawing the
 * terminal happens in one write, without flicker. A failed first refresh
 * ends the command like a plain status would; a later one is shown and the
 * watch goes on: etcd may come back. */
static int watch_frame(lr_client *c, lr_changes *ch, const struct query *q,
                       const out_style *st, int first, struct last_read *last)
{
	char *frame = NULL, now[LR_TIME_BUF], why[512];
	size_t len = 0;
	int64_t heard_ms = 0;
	lr_err err = { 0 };
	FILE *f = open_memstream(&frame, &len);
	int rc = CLI_CONTINUE;

	if (f == NULL)
		return CLI_CONTINUE;
	if (st->tty) {
		lr_rfc3339_now(now);
		fprintf(f, "\033[H\033[2Jleaserun status, redrawn on every "
		        "change    %s\n\n", now);
	}
	if (!first && lr_changes_down(ch, &heard_ms, why, sizeof(why))) {
		tell_unreachable(f, heard_ms, why, q, st, last);
	} else if (read_tasks(f, c, q, st, last, &err) != 0) {
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

/* Wait until the records changed (true) or a stop signal came (false). A
 * change before `next_at` (monotonic ms) waits until then, for the rest of
 * its burst. */
static bool wait_change(lr_changes *ch, int sfd, int64_t next_at)
{
	struct pollfd p[2] = { { .fd = lr_changes_fd(ch), .events = POLLIN },
		               { .fd = sfd, .events = POLLIN } };

	for (;;) {
		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return false;
		}
		if (p[1].revents != 0)
			return false;
		if (p[0].revents != 0)
			break;
	}
	int64_t wait = next_at - lr_mono_ms();
	if (wait > 0 && poll(&p[1], 1, (int)wait) > 0)
		return false;
	lr_changes_clear(ch);
	return true;
}

/* Redraw whenever etcd reports a change of the records shown (a watch),
 * or stops or starts answering it, never on a timer; until SIGINT or
 * SIGTERM. */
static int watch(const cli_common *common, const struct query *q,
                 const out_style *st)
{
	int sfd = cli_stop_signal_fd();
	lr_client *c = NULL;
	lr_changes *ch = NULL;
	struct last_read last = { NULL, 0 };
	lr_err err = { 0 };
	int rc;

	if (sfd < 0) {
		fputs("leaserun: status: cannot wait for signals\n", stderr);
		return EXIT_RUNTIME;
	}
	rc = cli_open(common, &c);
	if (rc != CLI_CONTINUE)
		goto out;
	/* Watching first: a change made while the first screen is read
	 * brings a second one. */
	if (lr_changes_open(c, q->id, &ch, &err) != 0) {
		rc = cli_fail(&err);
		goto out;
	}
	for (int first = 1; rc == CLI_CONTINUE; first = 0) {
		int64_t drawn = lr_mono_ms();
		rc = watch_frame(c, ch, q, st, first, &last);
		int64_t gap = (lr_mono_ms() - drawn) * WATCH_COST;
		gap = gap < WATCH_MIN_REDRAW_MS ? WATCH_MIN_REDRAW_MS
		      : gap > WATCH_MAX_REDRAW_MS ? WATCH_MAX_REDRAW_MS : gap;
		if (rc == CLI_CONTINUE && !wait_change(ch, sfd, drawn + gap))
			rc = EXIT_OK;
	}
out:
	free(last.text);
	lr_changes_close(ch);
	lr_client_close(c);
	close(sfd);
	return rc == CLI_CONTINUE ? EXIT_OK : rc;
}

static int make_query(const char *id, const char *state, const char *limit,
                      int json, struct query *q)
{
	long lim = 0;

	*q = (struct query){ .id = id, .filter = -1, .json = json };
	if (id != NULL && cli_check_id("status", id) != CLI_CONTINUE)
		return EXIT_USAGE;
	if (id != NULL && (state != NULL || limit != NULL))
		return cli_usage_error("status: --state and --limit apply to the "
		                       "list, not to one task");
	if (state != NULL) {
		q->filter = lr_task_state_parse(state);
		char quoted[CLI_QUOTE_SIZE];
		if (q->filter < 0)
			return cli_usage_error("--state: unknown state \"%s\" "
			                       "(pending, running, succeeded, "
			                       "failed, cancelled)", cli_quote(state, quoted));
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
	if (rc != CLI_CONTINUE)
		return rc;
	if (watching)
		return watch(&common, &q, &st);
	rc = cli_open(&common, &c);
	if (rc != CLI_CONTINUE)
		return rc;
	int write_errno;
	if (show(stdout, c, &q, &st, &write_errno, &err) != 0)
		rc = cli_fail(&err);
	else if (write_errno != 0)
		rc = cli_output_failed(write_errno);
	else
		rc = EXIT_OK;
	lr_client_close(c);
	return rc;
}
