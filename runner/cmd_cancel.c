/* cmd_cancel.c - `leaserun cancel ID`: end a pending task or ask the holder
 * of a running one to stop it, and say which happened. Main thread. */
#include <stdio.h>

#include "options.h"

static const char usage[] =
    "Usage: leaserun cancel ID\n"
    "\n"
    "Cancel a task: a pending task ends cancelled at once; a running task\n"
    "is stopped by its runner (SIGTERM to the step, SIGKILL after the\n"
    "grace period) and then ends cancelled. A task that already finished\n"
    "is left as it is (exit 0, \"already <status>\").\n"
    "\n"
    "Exit status: 0 done or requested, 4 no such task, 1 etcd error.\n";

/* Say what the cancel did, from the task as it is now: a pending task is
 * cancelled already; a running one shows who was asked to stop it. */
static void report(lr_client *c, const char *id)
{
	lr_task_status s;
	lr_err err = { 0 };

	if (lr_task_get(c, id, &s, &err) != 0) {
		printf("cancel requested for %s\n", id);
		return;
	}
	if (s.state == LR_TASK_CANCELLED)
		printf("cancelled %s\n", id);
	else if (s.state == LR_TASK_RUNNING && s.runner != NULL)
		printf("cancel requested for %s (running on %s)\n", id, s.runner);
	else if (s.state >= LR_TASK_SUCCEEDED)
		printf("cancel requested for %s, which ended %s meanwhile\n", id,
		       lr_task_state_name(s.state));
	else
		printf("cancel requested for %s\n", id);
	lr_task_status_clear(&s);
}

int cmd_cancel(int argc, char **argv)
{
	const cli_flag flags[] = { { NULL, NULL, NULL } };
	const cli_cmd cmd = { "cancel", usage, flags, 1 };
	const char *args[1] = { NULL };
	int already = -1;
	lr_client *c = NULL;
	lr_err err = { 0 };

	int rc = cli_parse_id_and_open(&cmd, argc, argv, &args[0], &c);
	if (rc != CLI_CONTINUE)
		return rc;
	if (lr_cancel(c, args[0], &already, &err) != 0)
		rc = cli_fail(&err);
	else if (already >= 0)
		printf("already %s\n", lr_task_state_name(already));
	else
		report(c, args[0]);
	lr_client_close(c);
	return rc == CLI_CONTINUE ? EXIT_OK : rc;
}
