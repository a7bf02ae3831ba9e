/* cmd_submit.c - `leaserun submit`: read specs from files or standard input
 * (one spec a file, or JSON Lines), store them, print their ids in input
 * order. Main thread; lr_submit_many calls back on it. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/readall.h"
#include "client/spec_reader.h"
#include "client/submit.h"
#include "options.h"
#include "records/schedule.h"
#include "records/spec.h"

/* 9999-12-31T23:59:59.999Z, in unix ms: the last start time a spec holds. */
#define LAST_START_MS 253402300799999LL

static const char usage[] =
    "Usage: leaserun submit [FILE|-]... [--jsonl] [--id ID] [--in-flight N]\n"
    "                       [--in DURATION]\n"
    "\n"
    "Validate task specs (JSON) and store them; prints the id of each task\n"
    "stored, one a line, in input order. Each FILE holds one spec; with\n"
    "--jsonl each holds JSON Lines, one spec a line. Without FILE, or with\n"
    "'-', specs are read from standard input. Submitting a spec identical\n"
    "to the stored one is a success, so a submit may be retried (specs\n"
    "without an id get a new one each time). With several specs, each is\n"
    "stored or rejected on its own: a rejected spec prints a message naming\n"
    "its file or line and nothing on standard output.\n"
    "\n"
    "  --jsonl          the input is JSON Lines: one spec a line\n"
    "  --id ID          the task's id, when the spec does not have one\n"
    "                   (one spec only: not with several files or --jsonl)\n"
    "  --in-flight N    creates sent at once (1-256, default 16)\n"
    "  --in DURATION    not before DURATION from now (\"90s\", \"2h\"), for\n"
    "                   specs without \"not_before\"\n"
    "\n"
    "Exit status, the worst outcome of any spec: 1 etcd error (the submit\n"
    "stops; running it again is safe), else 2 invalid spec or unreadable\n"
    "file, else 4 a task named in \"after\" does not exist, else 3 an id\n"
    "exists with a different spec, else 0.\n";

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
	rc = lr_read_all(f, LR_SPEC_MAX_BYTES, text, len);
	if (rc != 0)
		fprintf(stderr, "leaserun: cannot read %s: %s\n",
		        use_stdin ? "standard input" : path, strerror(errno));
	if (!use_stdin)
		fclose(f);
	if (rc == 0 && *len > LR_SPEC_MAX_BYTES) {
		/* Not read to its end: its size is not known. */
		fprintf(stderr, "leaserun: %s: invalid spec: more than the 1 MiB limit\n",
		        use_stdin ? "<stdin>" : path);
		free(*text);
		*text = NULL;
		return EXIT_USAGE;
	}
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

/* One spec from one file (or standard input), as submit always did. */
static int submit_one(const cli_common *common, const char *path,
                      const char *id, int64_t not_before_ms)
{
	char *text = NULL, *value = NULL;
	size_t len = 0;
	json_t *spec = NULL;
	lr_client *c = NULL;
	char out_id[LR_ID_SIZE];
	int created = 0;
	bool start_added = false;
	lr_err err = { 0 };

	int rc = read_spec(path, &text, &len);
	if (rc == CLI_CONTINUE)
		rc = validate(strcmp(path, "-") == 0 ? "<stdin>" : path, text, len,
		              id, &spec);
	/* The stored form, with the start time of --in, validated again; the
	 * id as validation gave it (generated when the spec has none). */
	if (rc == CLI_CONTINUE &&
	    lr_submit_prepare_at(text, len, lr_spec_id(spec), not_before_ms, out_id, &value,
	                         &start_added, &err) != 0)
		rc = cli_fail(&err);
	if (rc == CLI_CONTINUE)
		rc = cli_open(common, &c);
	if (rc != CLI_CONTINUE)
		goto cleanup;
	cli_within within;
	cli_made_within(&within);
	if (lr_submit_store(c, out_id, value, start_added, within.holders, &created, &err) != 0) {
		rc = cli_fail(&err);
		goto cleanup;
	}
	printf("%s\n", out_id);
	rc = EXIT_OK;
cleanup:
	lr_client_close(c);
	json_decref(spec);
	free(value);
	free(text);
	return rc;
}

/* ---- many specs ------------------------------------------------------- */

/* The inputs of a bulk submit, read one after the other, and what the
 * outcomes told. */
struct bulk_input {
	const char *const *paths;
	int n_paths, at;
	lr_spec_format format;
	int fd;            /* the input being read; -1 between inputs */
	const char *name;  /* its name in messages */
	lr_spec_reader reader;
	char error[400];   /* an input that cannot be opened */
	uint64_t not_sent; /* specs read but not sent after an etcd error */
	bool write_failed; /* standard output could not take an id */
};

static void close_input(struct bulk_input *in)
{
	lr_spec_reader_free(&in->reader);
	if (in->fd != STDIN_FILENO)
		close(in->fd);
	in->fd = -1;
}

/* The next input's stream, or an item saying why it cannot be read. */
static int open_input(struct bulk_input *in, lr_submit_item *item, lr_err *err)
{
	const char *path = in->paths[in->at++];
	bool use_stdin = strcmp(path, "-") == 0;

	in->name = use_stdin ? "<stdin>" : path;
	int fd = use_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(in->error, sizeof(in->error), "cannot read %s: %s", path,
		         strerror(errno));
		item->origin = path;
		item->error = in->error;
		return 1;
	}
	if (lr_spec_reader_init(&in->reader, fd, in->name, in->format) != 0) {
		if (!use_stdin)
			close(fd);
		return lr_err_set(err, LR_ENOMEM, "reading %s: out of memory",
		                  in->name);
	}
	in->fd = fd;
	return 0;
}

/* lr_submit_input_fn over every input in turn. */
static int next_spec(void *user, lr_submit_item *item, lr_err *err)
{
	struct bulk_input *in = user;

	for (;;) {
		if (in->fd < 0) {
			if (in->at == in->n_paths)
				return 0;
			int rc = open_input(in, item, err);
			if (rc != 0)
				return rc;
		}
		int rc = lr_spec_reader_next(&in->reader, item);
		if (rc == 1)
			return 1;
		close_input(in);
		if (rc < 0)
			return lr_err_set(err, LR_ENOMEM, "reading %s: out of memory",
			                  in->name);
	}
}

/* lr_submit_outcome_fn: the id on stdout, or the reason on stderr. */
static void print_outcome(void *user, const lr_submit_outcome *o)
{
	struct bulk_input *in = user;

	if (o->code == LR_OK) {
		if (printf("%s\n", o->id) < 0)
			in->write_failed = true;
	} else if (o->code == LR_ECANCELLED) {
		in->not_sent++;
	} else {
		fprintf(stderr, "leaserun: %s: %s\n", o->origin, o->msg);
	}
}

static int submit_many(const cli_common *common, const char *const *paths,
                       int n_paths, lr_spec_format format, long in_flight,
                       int64_t not_before_ms)
{
	static const char *const from_stdin[] = { "-" };
	struct bulk_input in = {
		.paths = n_paths > 0 ? paths : from_stdin,
		.n_paths = n_paths > 0 ? n_paths : 1,
		.format = format,
		.fd = -1,
	};
	cli_within within;
	cli_made_within(&within);
	lr_submit_opts opts = { .in_flight = (int)in_flight, .not_before_ms = not_before_ms,
		                .within = within.holders };
	lr_submit_summary sum;
	lr_client *c = NULL;
	lr_err err = { 0 };

	int rc = cli_open(common, &c);
	if (rc != CLI_CONTINUE)
		return rc;
	rc = lr_submit_many(c, &opts, next_spec, print_outcome, &in, &sum, &err);
	if (in.fd >= 0)
		close_input(&in);
	lr_client_close(c);
	if (rc != 0)
		fprintf(stderr, "leaserun: submit stopped: %s; %" PRIu64 " specs "
		        "read were not sent and the rest of the input was not "
		        "read (submitting it again is safe for specs with an id)\n",
		        err.msg[0] != '\0' ? err.msg : lr_strerror(rc), in.not_sent);
	int worst = sum.worst;
	if (fflush(stdout) != 0 || in.write_failed) {
		fprintf(stderr, "leaserun: writing the ids: %s\n", strerror(errno));
		worst = lr_submit_worse(worst, LR_ESYS);
	}
	return cli_exit_code(worst);
}

int cmd_submit(int argc, char **argv)
{
	const char *id = NULL, *in_flight_s = NULL, *in_s = NULL;
	int jsonl = 0;
	const cli_flag flags[] = {
		{ "id", &id, NULL },
		{ "jsonl", NULL, &jsonl },
		{ "in-flight", &in_flight_s, NULL },
		{ "in", &in_s, NULL },
		{ NULL, NULL, NULL },
	};
	const cli_cmd cmd = { "submit", usage, flags, argc };
	cli_common common = { 0 };
	const char **args = calloc((size_t)argc + 1, sizeof(*args));
	long in_flight = 16;
	int nargs = 0;

	if (args == NULL) {
		fputs("leaserun: out of memory\n", stderr);
		return EXIT_RUNTIME;
	}
	int rc = cli_parse(&cmd, argc, argv, &common, args, &nargs);
	if (rc == CLI_CONTINUE && in_flight_s != NULL)
		rc = cli_int("--in-flight", in_flight_s, 1, 256, &in_flight);
	int64_t not_before_ms = 0;
	if (rc == CLI_CONTINUE && in_s != NULL) {
		int64_t d = 0;
		lr_err e = { 0 };
		int64_t now = lr_wall_ms();
		if (lr_duration_parse(in_s, &d, &e) != 0)
			rc = cli_usage_error("submit: --in %s: %s", in_s, e.msg);
		else if (d > LAST_START_MS - now)
			rc = cli_usage_error("submit: --in %s: too far ahead (a start time "
			                     "goes up to 9999-12-31)", in_s);
		else
			not_before_ms = now + d;
	}
	int dashes = nargs == 0; /* no FILE: standard input */
	for (int i = 0; rc == CLI_CONTINUE && i < nargs; i++)
		if (strcmp(args[i], "-") == 0 && ++dashes == 2)
			rc = cli_usage_error("submit: standard input (-) is named twice");
	if (rc == CLI_CONTINUE && dashes > 0)
		rc = cli_check_stdin("submit");
	bool many = jsonl || nargs > 1;
	if (rc == CLI_CONTINUE && many && id != NULL)
		rc = cli_usage_error("submit: --id names one task: it cannot be "
		                     "used with several files or --jsonl");
	if (rc == CLI_CONTINUE && !many)
		rc = submit_one(&common, nargs > 0 ? args[0] : "-", id, not_before_ms);
	else if (rc == CLI_CONTINUE)
		rc = submit_many(&common, args, nargs,
		                 jsonl ? LR_SPEC_LINES : LR_SPEC_WHOLE, in_flight, not_before_ms);
	free(args);
	return rc;
}
