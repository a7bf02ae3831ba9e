/* cmd_retry.c - `leaserun retry ID`: make a failed or cancelled task
 * pending again, at the step it stopped at or one given. Main thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "options.h"

static const char usage[] =
    "Usage: leaserun retry ID [--from-step N|NAME] [--reset-state]\n"
    "\n"
    "Make a failed or cancelled task pending again, in one txn: it resumes\n"
    "at the step it stopped at, with its state as last checkpointed and\n"
    "its attempts counted afresh. The outcome it had stays in its history\n"
    "(leaserun status ID).\n"
    "\n"
    "  --from-step N|NAME  start at step N (0-based) or the step named NAME,\n"
    "                      at most the step it stopped at\n"
    "  --reset-state       start with the spec's state\n"
    "\n"
    "Exit status: 0 pending again, 2 bad option or step, 4 no such task,\n"
    "6 the task is pending, running or succeeded (nothing changed), 1 etcd\n"
    "error or the task changed meanwhile.\n";

int cmd_retry(int argc, char **argv)
{
	const char *from = NULL;
	int reset = 0;
	const cli_flag flags[] = {
		{ "from-step", &from, NULL },
		{ "reset-state", NULL, &reset },
		{ NULL, NULL, NULL },
	};
	const cli_cmd cmd = { "retry", usage, flags, 1 };
	cli_common common = { 0 };
	const char *args[1] = { NULL };
	int nargs = 0;
	lr_client *c = NULL;
	lr_err err = { 0 };
	lr_retry_opts o = { .reset_state = reset };

	int rc = cli_parse(&cmd, argc, argv, &common, args, &nargs);
	if (rc != CLI_CONTINUE)
		return rc;
	if (nargs == 0)
		return cli_usage_error("retry: missing task ID");
	if (!lr_id_valid(args[0]))
		return cli_usage_error("retry: \"%s\" is not a valid task id", args[0]);
	o.reset_state = reset;
	if (from != NULL && from[0] != '\0' && strspn(from, "0123456789") == strlen(from)) {
		long n;
		rc = cli_int("--from-step", from, 0, 999999, &n);
		if (rc != CLI_CONTINUE)
			return rc;
		o.from_step_set = 1;
		o.from_step = n;
	} else if (from != NULL) {
		o.from_name = from;
	}
	rc = cli_open(&common, &c);
	if (rc != CLI_CONTINUE)
		return rc;
	if (lr_retry(c, args[0], &o, &err) != 0)
		rc = cli_fail(&err);
	else
		printf("%s is pending again\n", args[0]);
	lr_client_close(c);
	return rc == CLI_CONTINUE ? EXIT_OK : rc;
}
