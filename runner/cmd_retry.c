/* cmd_retry.c - `leaserun retry ID [--from-step N|NAME] [--reset-state]`:
 * make a failed or cancelled task pending again. Main thread. */
#include <stdio.h>
#include <stdlib.h>

#include "client/retry.h"
#include "options.h"
#include "output.h"

static const char usage[] =
    "Usage: leaserun retry ID [--from-step N|NAME] [--reset-state]\n"
    "\n"
    "Make a failed or cancelled task pending again: it resumes at the step\n"
    "it ended at, with its state as last checkpointed, and its attempts\n"
    "counted afresh. Its earlier outcome is kept: `leaserun status ID`\n"
    "shows it.\n"
    "\n"
    "  --from-step N|NAME  resume at this step (0-based index or name; digits\n"
    "                      that are an index and another step's name are\n"
    "                      refused)\n"
    "  --reset-state       start from the spec's state\n"
    "\n"
    "Exit status: 0 pending again; 2 the task is pending, running or\n"
    "succeeded, or no such step (or an ambiguous one); 4 no such task;\n"
    "1 etcd error, or the task changed meanwhile (nothing was done).\n";

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
	lr_retry_at at;
	if (lr_retry_to(c, args[0], &o, &at, &err) != 0) {
		rc = cli_fail(&err);
	} else {
		/* "step 2/3 analyse", 1-based as status shows it: the name tells
		 * apart the 0-based index --from-step takes. */
		char *name = at.step_name != NULL ? out_one_line(at.step_name) : NULL;
		printf("%s pending again from step %lld/%lld%s%s\n", args[0],
		       (long long)at.step + 1, (long long)at.steps, name != NULL ? " " : "",
		       name != NULL ? name : "");
		free(name);
		rc = EXIT_OK;
	}
	lr_retry_at_clear(&at);
	lr_client_close(c);
	return rc;
}
