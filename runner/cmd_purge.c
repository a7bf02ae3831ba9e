/* cmd_purge.c - `leaserun purge`: delete the keys of tasks that finished
 * long enough ago. Main thread. */
#include <stdio.h>

#include "base/clock.h"
#include "options.h"

static const char usage[] =
    "Usage: leaserun purge --older-than DURATION [--status S]\n"
    "\n"
    "Delete every key of tasks that finished at least DURATION ago (by\n"
    "their finish time): spec, checkpoint, done record, cancel request,\n"
    "queue record, retry history and lock request. Running and pending\n"
    "tasks are never touched.\n"
    "\n"
    "  --older-than DURATION   e.g. 90s, 30m, 12h, 7d, 1h30m\n"
    "  --status S              only succeeded, failed or cancelled tasks\n";

static int purge_args(const char *older, const char *status, int64_t *ms,
                      int *filter)
{
	lr_err err = { 0 };

	if (older == NULL)
		return cli_usage_error("purge: --older-than is required");
	if (lr_duration_parse(older, ms, &err) != 0)
		return cli_usage_error("--older-than: %s", err.msg);
	*filter = -1;
	if (status == NULL)
		return CLI_CONTINUE;
	*filter = lr_task_state_parse(status);
	char q[CLI_QUOTE_SIZE];
	if (*filter < LR_TASK_SUCCEEDED)
		return cli_usage_error("--status: \"%s\" is not a final state "
		                       "(succeeded, failed, cancelled)", cli_quote(status, q));
	return CLI_CONTINUE;
}

int cmd_purge(int argc, char **argv)
{
	const char *older = NULL, *status = NULL;
	const cli_flag flags[] = {
		{ "older-than", &older, NULL },
		{ "status", &status, NULL },
		{ NULL, NULL, NULL },
	};
	const cli_cmd cmd = { "purge", usage, flags, 0 };
	cli_common common = { 0 };
	int64_t ms = 0;
	int filter = -1, nargs;
	size_t purged = 0;
	lr_client *c = NULL;
	lr_err err = { 0 };

	int rc = cli_parse(&cmd, argc, argv, &common, NULL, &nargs);
	if (rc == CLI_CONTINUE)
		rc = purge_args(older, status, &ms, &filter);
	if (rc == CLI_CONTINUE)
		rc = cli_open(&common, &c);
	if (rc != CLI_CONTINUE)
		return rc;
	rc = lr_purge(c, ms, filter, &purged, &err);
	/* After a failure, say only what was done before it, if anything. */
	if (rc == 0 || purged > 0)
		printf("purged %zu task%s\n", purged, purged == 1 ? "" : "s");
	rc = rc != 0 ? cli_fail(&err) : EXIT_OK;
	lr_client_close(c);
	return rc;
}
