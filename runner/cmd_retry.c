/* cmd_retry.c - `leaserun retry ID [--from-step N|NAME] [--reset-state]`:
 * make a failed or cancelled task pending again. Main thread. */
#include <stdio.h>

#include "options.h"

static const char usage[] =
    "Usage: leaserun retry ID [--from-step N|NAME] [--reset-state]\n"
    "\n"
    "Make a failed or cancelled task pending again: it resumes at the step\n"
    "it ended at, with its state as last checkpointed, and its attempts\n"
    "counted afresh. Its earlier outcome is kept: `leaserun status ID`\n"
    "shows it.\n"
    "\n"
    "  --from-step N|NAME  resume at this step (0-based index or name)\n"
    "  --reset-state       start from the spec's state\n"
    "\n"
    "Exit status: 0 pending again; 2 the task is pending, running or\n"
    "succeeded, or no such step; 4 no such task; 1 etcd error, or the task\n"
    "changed meanwhile (nothing was done).\n";

int cmd_retry(int argc, char **argv)
{
	const char *from = NULL;
	int reset = 0;
	const cli_flag flags[] = { { "from-step", &from, NULL }, { "reset-state", NULL, &reset },
		                   { NULL, NULL, NULL } };
	const cli_cmd cmd = { "retry", usage, flags, 1 };
	const char *args[1] = { NULL };
	lr_client *c = NULL;
	lr_err err = { 0 };

	int rc = cli_parse_id_and_open(&cmd, argc, argv, &args[0], &c);
	if (rc != CLI_CONTINUE)
		return rc;
	lr_retry_opts o = { .from_step = from, .reset_state = reset };
	int64_t step = 0;
	if (lr_retry(c, args[0], &o, &step, &err) != 0)
		rc = cli_fail(&err);
	else {
		printf("%s pending again from step %lld\n", args[0], (long long)step);
		rc = EXIT_OK;
	}
	lr_client_close(c);
	return rc;
}
