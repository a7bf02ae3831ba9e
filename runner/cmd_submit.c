/* cmd_submit.c - `leaserun submit`: read a spec from a file or standard
 * input, validate it, store it, print its id. Main thread. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/readall.h"
#include "options.h"
#include "records/spec.h"

static const char usage[] =
    "Usage: leaserun submit [FILE|-] [--id ID]\n"
    "\n"
    "Validate a task spec (JSON) and store it; prints the task's id.\n"
    "Without FILE, or with '-', the spec is read from standard input.\n"
    "Submitting a spec identical to the stored one is a success, so a\n"
    "submit may be retried.\n"
    "\n"
    "  --id ID   the task's id, when the spec does not have one\n"
    "\n"
    "Exit status: 0 stored (or identical), 2 invalid spec or unreadable\n"
    "file, 3 the id exists with a different spec, 1 etcd error.\n";

static int read_spec(const char *path, char **text, size_t *len)
{
	int use_stdin = strcmp(path, "-") == 0;
	FILE *f;
	int rc;

	errno = 0;
	f = use_stdin ? stdin : fopen(path, "r");
	if (f == NULL) {
		fprintf(stderr, "leaserun: cannot read %s: %s\n", path,
		        strerror(errno));
		return EXIT_USAGE;
	}
	rc = lr_read_all(f, text, len);
	if (rc != 0)
		fprintf(stderr, "leaserun: cannot read %s: %s\n",
		        use_stdin ? "standard input" : path, strerror(errno));
	if (!use_stdin)
		fclose(f);
	return rc != 0 ? EXIT_USAGE : CLI_CONTINUE;
}

/* Validate before connecting: an invalid spec is exit 2 whether etcd is
 * up or not, and costs no connection. *spec: the normalised spec. */
static int validate(const char *name, const char *text, size_t len,
                    const char *id, json_t **spec)
{
	lr_err err = { 0 };

	if (lr_spec_parse_with_id(text, len, id, spec, &err) == 0)
		return CLI_CONTINUE;
	fprintf(stderr, "leaserun: %s: invalid spec: %s\n", name, err.msg);
	return cli_exit_code(err.code);
}

int cmd_submit(int argc, char **argv)
{
	const char *id = NULL;
	const cli_flag flags[] = { { "id", &id, NULL }, { NULL, NULL, NULL } };
	const cli_cmd cmd = { "submit", usage, flags, 1 };
	cli_common common = { 0 };
	const char *args[1];
	int nargs = 0, created = 0;
	char *text = NULL;
	size_t len = 0;
	json_t *spec = NULL;
	lr_client *c = NULL;
	char out_id[LR_ID_SIZE];
	lr_err err = { 0 };

	int rc = cli_parse(&cmd, argc, argv, &common, args, &nargs);
	const char *path = nargs > 0 ? args[0] : "-";
	if (rc == CLI_CONTINUE)
		rc = read_spec(path, &text, &len);
	if (rc == CLI_CONTINUE)
		rc = validate(strcmp(path, "-") == 0 ? "<stdin>" : path, text, len,
		              id, &spec);
	if (rc == CLI_CONTINUE)
		rc = cli_open(&common, &c);
	if (rc != CLI_CONTINUE)
		goto cleanup;
	/* The normalised spec carries its id, generated or not. */
	if (lr_submit_json(c, spec, NULL, out_id, &created, &err) != 0) {
		rc = cli_fail(&err);
		goto cleanup;
	}
	printf("%s\n", out_id);
	rc = EXIT_OK;
cleanup:
	lr_client_close(c);
	json_decref(spec);
	free(text);
	return rc;
}
