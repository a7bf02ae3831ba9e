/* cmd_runners.c - `leaserun runners`: the live runners and how long their
 * leases have left. Main thread. */
#include <stdio.h>
#include <stdlib.h>

#include "base/clock.h"
#include "options.h"
#include "output.h"

static const char usage[] =
    "Usage: leaserun runners [--json]\n"
    "\n"
    "List live runners: name, host, pid, concurrency, lease TTL left of the\n"
    "granted TTL, and when each started.\n"
    "\n"
    "  --json   a JSON array\n";

int cmd_runners(int argc, char **argv)
{
	int json = 0;
	const cli_flag flags[] = { { "json", NULL, &json },
		                   { NULL, NULL, NULL } };
	const cli_cmd cmd = { "runners", usage, flags, 0 };
	cli_common common = { 0 };
	lr_runner_info *v = NULL;
	size_t n = 0;
	int nargs;
	out_style st = out_style_stdout();
	lr_client *c = NULL;
	lr_err err = { 0 };

	int rc = cli_parse(&cmd, argc, argv, &common, NULL, &nargs);
	if (rc == CLI_CONTINUE)
		rc = cli_open(&common, &c);
	if (rc != CLI_CONTINUE)
		return rc;
	if (lr_runners_list(c, &v, &n, &err) != 0) {
		rc = cli_fail(&err);
	} else if (json) {
		rc = out_json_exit(out_runners_json(stdout, v, n), "runners --json");
	} else {
		out_runners_table(stdout, v, n, &st, lr_wall_ms());
		rc = EXIT_OK;
	}
	free(v);
	lr_client_close(c);
	return rc;
}
