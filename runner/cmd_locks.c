/* cmd_locks.c - `leaserun locks [--json]`: who holds which lock and slot,
 * and who waits for what. Main thread. */
#include <stdio.h>

#include <jansson.h>

#include "base/clock.h"
#include "options.h"
#include "output.h"

static const char usage[] =
    "Usage: leaserun locks [--json]\n"
    "\n"
    "Locks and slots held (path or pool[slot] of N, mode, holder: a task or a\n"
    "`leaserun run`, its runner or host, since when), then the requests\n"
    "still waiting, oldest first, with what each waits for.\n"
    "\n"
    "  --json   one object: {\"held\": [...], \"waiting\": [...], \"revision\"}\n";

int cmd_locks(int argc, char **argv)
{
	int json = 0, nargs = 0;
	const cli_flag flags[] = { { "json", NULL, &json }, { NULL, NULL, NULL } };
	const cli_cmd cmd = { "locks", usage, flags, 0 };
	cli_common common = { 0 };
	lr_client *c = NULL;
	lr_err err = { 0 };
	void *doc = NULL;

	int rc = cli_parse(&cmd, argc, argv, &common, NULL, &nargs);
	if (rc == CLI_CONTINUE)
		rc = cli_open(&common, &c);
	if (rc != CLI_CONTINUE)
		return rc;
	if (lr_locks_read(c, &doc, &err) != 0) {
		rc = cli_fail(&err);
	} else if (json) {
		rc = out_json_exit(out_locks_json(stdout, doc), "locks --json");
	} else {
		out_style st = out_style_stdout();
		out_locks_table(stdout, doc, &st, lr_wall_ms());
		rc = EXIT_OK;
	}
	json_decref(doc);
	lr_client_close(c);
	return rc;
}
