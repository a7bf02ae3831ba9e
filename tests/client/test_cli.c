/* test_cli.c - the `leaserun` command as a user runs it: the built binary
 * (LEASERUN_BIN) against a real etcd, checking exit statuses, what it
 * prints, and that rejected input stores nothing. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/clock.h"
#include "base/utf8.h"
#include "cli_run.h"
#include "records/record.h"
#include "test.h"

static const char spec_a[] =
    "{\"id\":\"a\",\"steps\":[{\"name\":\"one\",\"run\":\"true\"},"
    "{\"name\":\"two\",\"run\":\"true\"}]}";

/* ---- submit ---- */

TEST(submit_prints_the_id_and_an_identical_resubmit_is_a_success)
{
	lr_client *c = fixture_client("cli_submit");
	cli_use_client(c);
	const char *path = cli_write_file("a.json", spec_a);
	proc_result r = RUN("submit", path);
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "a\n");
	proc_result_free(&r);
	r = RUN("submit", path);
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "a\n");
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 1);
	lr_client_close(c);
}

TEST(submit_reads_standard_input_and_takes_an_id)
{
	lr_client *c = fixture_client("cli_stdin");
	cli_use_client(c);
	const char *spec = "{\"steps\":[{\"name\":\"x\",\"run\":\"true\"}]}";
	proc_result r = RUN_STDIN(spec, "submit", "-", "--id", "from-flag");
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "from-flag\n");
	proc_result_free(&r);
	r = RUN_STDIN(spec, "submit", "--id=other");
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "other\n");
	proc_result_free(&r);
	r = RUN_STDIN(spec, "submit"); /* a generated id */
	CHECK_INT(r.status, ==, 0);
	CHECK(strlen(r.out) > 10);
	proc_result_free(&r);
	r = RUN_STDIN(spec, "submit", "-", "-"); /* read once, it would be empty once */
	CHECK_INT(r.status, ==, 2);
	CHECK_HAS(r.err, "standard input (-) is named twice");
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 3);
	lr_client_close(c);
}

/* Started with standard input closed, submit says so (exit 2) before
 * reading or connecting, whether it reads one spec or JSON Lines; a FILE
 * is read as usual. */
TEST(submit_with_standard_input_closed_exits_2_saying_so)
{
	lr_client *c = fixture_client("cli_stdin_closed");
	cli_use_client(c);
	const char *const cases[][3] = { { "submit" }, { "submit", "-" }, { "submit", "--jsonl" } };
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		proc_result r = cli_run_stdin_closed(cases[i]);
		CHECK_INT(r.status, ==, 2);
		CHECK_HAS(r.err, "leaserun: submit: standard input is closed");
		proc_result_free(&r);
	}
	CHECK_INT(fixture_count(c, ""), ==, 0);
	const char *const from_file[] = { "submit", cli_write_file("c.json", spec_a), NULL };
	proc_result r = cli_run_stdin_closed(from_file);
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "a\n");
	proc_result_free(&r);
	lr_client_close(c);
}

TEST(submit_of_a_different_spec_under_a_taken_id_exits_3)
{
	lr_client *c = fixture_client("cli_exists");
	cli_use_client(c);
	proc_result r = RUN_STDIN(spec_a, "submit");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	r = RUN_STDIN("{\"id\":\"a\",\"steps\":[{\"name\":\"o\",\"run\":\"x\"}]}",
	              "submit");
	CHECK_INT(r.status, ==, 3);
	CHECK_HAS(r.err, "leaserun: ");
	CHECK_HAS(r.err, "already exists with a different spec");
	CHECK_STR(r.out, "");
	proc_result_free(&r);
	lr_client_close(c);
}

/* Each invalid spec exits 2 with a message naming the problem, and leaves
 * etcd untouched. */
static void check_rejected(lr_client *c, const char *spec, const char *want)
{
	proc_result r = RUN_STDIN(spec, "submit");
	CHECK_INT(r.status, ==, 2);
	CHECK_HAS(r.err, "invalid spec");
	CHECK_HAS(r.err, want);
	CHECK_STR(r.out, "");
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, ""), ==, 0);
}

TEST(submit_rejects_invalid_specs_and_stores_nothing)
{
	lr_client *c = fixture_client("cli_invalid");
	cli_use_client(c);
	check_rejected(c, "{\"steps\": [\n  {\"name\": \"a\" \"run\": \"b\"}]}",
	               "line 2, column");
	check_rejected(c, "{\"steps\":[{\"name\":\"a\",\"run\":\"b\"}],\"retries\":3}",
	               "retries");
	check_rejected(c, "{\"steps\":[{\"name\":\"a\",\"run\":\"b\",\"shell\":1}]}",
	               "shell");
	check_rejected(c, "{\"id\":\"x\"}", "steps");
	check_rejected(c, "{\"steps\":[]}", "steps");
	check_rejected(c, "{\"id\":\"a/b\",\"steps\":[{\"name\":\"a\",\"run\":\"b\"}]}",
	               "id");
	check_rejected(c, "{\"steps\":[{\"name\":\"a\",\"run\":\"b\"}],\"max_attempts\":\"many\"}",
	               "max_attempts");
	check_rejected(c, "{\"steps\":[{\"name\":\"a\",\"run\":\"b\",\"timeout_s\":-1}]}",
	               "timeout_s");
	check_rejected(c, "{\"steps\":[{\"name\":\"a\",\"run\":5}]}", "run");
	check_rejected(c, "{\"steps\":[{\"name\":\"a\",\"run\":\"b\"}],"
	                  "\"locks\":{\"org/a\":\"W\"}}", "locks.org/a: expected one of");
	check_rejected(c, "{\"steps\":[{\"name\":\"a\",\"run\":\"b\"}],"
	                  "\"locks\":{\"org//a\":\"X\"}}", "locks.org//a: a path is");
	check_rejected(c, "{\"steps\":[{\"name\":\"a\",\"run\":\"b\"}],"
	                  "\"limits\":{\"gpu\":0}}", "limits.gpu");
	check_rejected(c, "{\"steps\":[{\"name\":\"a\",\"run\":\"b\"}],"
	                  "\"limits\":{\"a/b\":2}}", "limits.a/b");
	check_rejected(c, "{\"steps\":[{\"name\":\"a\",\"run\":\"b\"}],\"priority\":101}",
	               "priority");
	check_rejected(c, "{\"steps\":[{\"name\":\"a\",\"run\":\"b\"}],"
	                  "\"not_before\":\"tomorrow\"}", "not_before: expected an RFC 3339 time");
	check_rejected(c, "{\"steps\":[{\"name\":\"a\",\"run\":\"b\"}],\"after\":\"x\"}",
	               "after: expected an array");
	check_rejected(c, "{\"id\":\"me\",\"steps\":[{\"name\":\"a\",\"run\":\"b\"}],"
	                  "\"after\":[\"me\"]}", "after[0]: a task cannot wait for itself");
	check_rejected(c, "", "empty");
	lr_client_close(c);
}

TEST(submit_refuses_unknown_after_with_status_4_and_takes_in)
{
	lr_client *c = fixture_client("cli_after");
	cli_use_client(c);
	proc_result r = RUN_STDIN("{\"id\":\"late\",\"steps\":[{\"name\":\"a\",\"run\":\"b\"}],"
	                          "\"after\":[\"ghost\"]}", "submit");
	CHECK_INT(r.status, ==, 4);
	CHECK_HAS(r.err, "after: no such task ghost");
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, ""), ==, 0);
	/* --in gives a start time to a spec without one. */
	r = RUN_STDIN("{\"id\":\"soon\",\"steps\":[{\"name\":\"a\",\"run\":\"b\"}]}",
	              "submit", "--in", "1h");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	r = RUN("status", "soon");
	CHECK_HAS(r.out, "waiting: not before ");
	proc_result_free(&r);
	r = RUN_STDIN("{\"steps\":[{\"name\":\"a\",\"run\":\"b\"}]}", "submit", "--in", "soon");
	CHECK_INT(r.status, ==, 2);
	proc_result_free(&r);
	/* retry: refused for a pending task (2) and an unknown one (4). */
	r = RUN("retry", "soon");
	CHECK_INT(r.status, ==, 2);
	CHECK_HAS(r.err, "only a failed or cancelled task can be retried");
	proc_result_free(&r);
	r = RUN("retry", "ghost");
	CHECK_INT(r.status, ==, 4);
	proc_result_free(&r);
	r = RUN("cancel", "soon");
	proc_result_free(&r);
	r = RUN("retry", "soon");
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.out, "soon pending again from step 1/1 a\n"); /* as status counts */
	proc_result_free(&r);
	r = RUN("status", "soon", "--json");
	CHECK_HAS(r.out, "\"history\"");
	CHECK_HAS(r.out, "cancelled");
	proc_result_free(&r);
	lr_client_close(c);
}

/* The stored not_before of task id (fails the test when it has none). */
static char *stored_not_before(lr_client *c, const char *id)
{
	char *value = fixture_get(c, LR_K_TASKS, id);
	CHECK(value != NULL);
	json_t *v = json_loads(value, 0, NULL);
	free(value);
	const char *at = json_string_value(json_object_get(v, "not_before"));
	CHECK(at != NULL);
	char *copy = strdup(at);
	json_decref(v);
	return copy;
}

/* A submit with --in computes its start time anew at each run: run again
 * (say after a lost reply), it is the same submit, as for any spec. */
TEST(submit_with_in_run_again_is_a_success_keeping_the_first_start_time)
{
	lr_client *c = fixture_client("cli_in_again");
	cli_use_client(c);
	const char *spec = "{\"id\":\"later\",\"steps\":[{\"name\":\"a\",\"run\":\"b\"}]}";
	proc_result r = RUN_STDIN(spec, "submit", "--in", "2h");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	char *first = stored_not_before(c, "later");
	lr_sleep_ms(1100); /* a later start time, to the second */
	r = RUN_STDIN(spec, "submit", "--in", "2h");
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "later\n");
	proc_result_free(&r);
	const char *path = cli_write_file("later.jsonl", "{\"id\":\"later\",\"steps\":"
	                                  "[{\"name\":\"a\",\"run\":\"b\"}]}\n");
	r = RUN("submit", "--jsonl", "--in", "2h", path);
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	char *now = stored_not_before(c, "later");
	CHECK_STR(now, first);
	free(now);
	free(first);
	/* Anything else different is still a different spec. */
	r = RUN_STDIN("{\"id\":\"later\",\"steps\":[{\"name\":\"a\",\"run\":\"c\"}]}",
	              "submit", "--in", "2h");
	CHECK_INT(r.status, ==, 3);
	proc_result_free(&r);
	/* So is a start time the spec itself gives. */
	r = RUN_STDIN("{\"id\":\"later\",\"steps\":[{\"name\":\"a\",\"run\":\"b\"}],"
	              "\"not_before\":\"2999-01-01T00:00:00Z\"}", "submit", "--in", "2h");
	CHECK_INT(r.status, ==, 3);
	proc_result_free(&r);
	/* And a stored start time later than this run's: not an earlier run. */
	r = RUN_STDIN("{\"id\":\"fixed\",\"steps\":[{\"name\":\"a\",\"run\":\"b\"}],"
	              "\"not_before\":\"2999-01-01T00:00:00Z\"}", "submit");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	r = RUN_STDIN("{\"id\":\"fixed\",\"steps\":[{\"name\":\"a\",\"run\":\"b\"}]}", "submit",
	              "--in", "60s");
	CHECK_INT(r.status, ==, 3);
	proc_result_free(&r);
	lr_client_close(c);
}

TEST(submit_rejects_a_spec_over_1_mib_and_over_1000_steps)
{
	lr_client *c = fixture_client("cli_limits");
	cli_use_client(c);
	size_t big = (1 << 20) + 100;
	char *huge = malloc(big + 64);
	CHECK(huge != NULL);
	int n = snprintf(huge, big + 64, "{\"steps\":[{\"name\":\"a\",\"run\":\"");
	memset(huge + n, 'x', big - (size_t)n);
	strcpy(huge + big, "\"}]}");
	check_rejected(c, huge, "1 MiB");
	free(huge);
	char *many = fixture_spec("many", 1001);
	check_rejected(c, many, "steps");
	free(many);
	/* An endless input is refused once past the limit, not read whole. */
	proc_result r = RUN("submit", "/dev/zero");
	CHECK_INT(r.status, ==, 2);
	CHECK_HAS(r.err, "/dev/zero: invalid spec: more than the 1 MiB limit");
	proc_result_free(&r);
	lr_client_close(c);
}

TEST(submit_of_an_unreadable_file_exits_2_naming_it)
{
	lr_client *c = fixture_client("cli_unreadable");
	cli_use_client(c);
	char missing[128];
	snprintf(missing, sizeof(missing), "%s/no-such.json", cli_tmpdir);
	proc_result r = RUN("submit", missing);
	CHECK_INT(r.status, ==, 2);
	CHECK_HAS(r.err, missing);
	proc_result_free(&r);
	r = RUN("submit", cli_tmpdir); /* a directory */
	CHECK_INT(r.status, ==, 2);
	CHECK_HAS(r.err, cli_tmpdir);
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, ""), ==, 0);
	lr_client_close(c);
}

/* ---- status, cancel, runners, purge ---- */

TEST(status_json_has_the_documented_shape)
{
	lr_client *c = fixture_client("cli_json");
	cli_use_client(c);
	proc_result r = RUN_STDIN(spec_a, "submit");
	proc_result_free(&r);
	r = RUN("status", "a", "--json");
	CHECK_INT(r.status, ==, 0);
	json_t *o = json_loads(r.out, 0, NULL);
	CHECK(json_is_object(o));
	CHECK_STR(json_string_value(json_object_get(o, "id")), "a");
	CHECK_STR(json_string_value(json_object_get(o, "state")), "pending");
	CHECK_INT(json_integer_value(json_object_get(o, "next_step")), ==, 0);
	CHECK_INT(json_integer_value(json_object_get(o, "steps")), ==, 2);
	CHECK_INT(json_integer_value(json_object_get(o, "attempt")), ==, 0);
	CHECK_INT(json_integer_value(json_object_get(o, "max_attempts")), ==, 5);
	CHECK_STR(json_string_value(json_object_get(o, "step_name")), "one");
	CHECK(json_is_null(json_object_get(o, "runner")));
	CHECK(json_is_null(json_object_get(o, "error")));
	CHECK(json_object_get(o, "updated_at") != NULL);
	json_decref(o);
	proc_result_free(&r);

	r = RUN("--json", "status"); /* flags may come before the command */
	CHECK_INT(r.status, ==, 0);
	o = json_loads(r.out, 0, NULL);
	CHECK(json_is_array(o));
	CHECK_INT(json_array_size(o), ==, 1);
	json_decref(o);
	proc_result_free(&r);

	r = RUN("status", "--json", "--state=running");
	CHECK_INT(r.status, ==, 0);
	o = json_loads(r.out, 0, NULL);
	CHECK(json_is_array(o));
	CHECK_INT(json_array_size(o), ==, 0);
	json_decref(o);
	proc_result_free(&r);
	lr_client_close(c);
}

TEST(status_table_names_each_column)
{
	lr_client *c = fixture_client("cli_table");
	cli_use_client(c);
	proc_result r = RUN_STDIN(spec_a, "submit");
	proc_result_free(&r);
	r = RUN("status");
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.out, "ID");
	CHECK_HAS(r.out, "STATE");
	CHECK_HAS(r.out, "STEP");
	CHECK_HAS(r.out, "ATTEMPT");
	CHECK_HAS(r.out, "RUNNER");
	CHECK_HAS(r.out, "pending");
	CHECK_HAS(r.out, "1/2 one");
	CHECK(strstr(r.out, "[") == NULL); /* no progress bar in a pipe */
	proc_result_free(&r);
	lr_client_close(c);
}

/* A step name with escape sequences (clear the screen, set the title) is
 * shown with its control characters replaced, never sent raw to the
 * operator's terminal. */
TEST(status_shows_no_control_characters_of_a_spec)
{
	lr_client *c = fixture_client("cli_ctl");
	cli_use_client(c);
	proc_result r = RUN_STDIN("{\"id\":\"ctl\",\"steps\":[{\"name\":"
	                          "\"a\\u001b[2J\\u001b]0;owned\\u0007\\u009bb\\u202ec\\u2028d\",\"run\":\"true\"}]}",
	                          "submit");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	r = RUN("status");
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.out, "1/1 a?[2J?]0;owned??b?c?d");
	CHECK(strchr(r.out, '\033') == NULL && strchr(r.out, '\007') == NULL);
	proc_result_free(&r);
	lr_client_close(c);
}

/* The display column where the cell after the STEP cell starts on the
 * line of task id: bytes, less one column for each 3-byte (wide) character
 * before it. */
static long column_after_step(const char *out, const char *id, const char *step)
{
	char start[64];
	snprintf(start, sizeof(start), "\n%s ", id);
	const char *line = strstr(out, start);
	CHECK(line != NULL);
	line++;
	const char *at = strstr(line, step);
	CHECK(at != NULL);
	at += strlen(step);
	while (*at == ' ')
		at++;
	long wide = 0;
	for (const char *p = line; p < at; p++)
		if (((unsigned char)*p & 0xF0) == 0xE0)
			wide++;
	return (long)(at - line) - wide;
}

TEST(status_columns_line_up_with_wide_characters)
{
	lr_client *c = fixture_client("cli_wide");
	cli_use_client(c);
	proc_result r = RUN_STDIN("{\"id\":\"wide\",\"steps\":[{\"name\":"
	                          "\"\\u65e5\\u672c\\u8a9e\",\"run\":\"true\"}]}", "submit");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	r = RUN_STDIN("{\"id\":\"flat\",\"steps\":[{\"name\":\"abcdef\",\"run\":\"true\"}]}",
	              "submit");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	r = RUN("status");
	CHECK_INT(r.status, ==, 0);
	CHECK_INT(column_after_step(r.out, "wide", "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e"), ==,
	          column_after_step(r.out, "flat", "abcdef"));
	proc_result_free(&r);
	lr_client_close(c);
}

TEST(status_on_a_terminal_adds_progress_bars_and_totals)
{
	lr_client *c = fixture_client("cli_tty");
	cli_use_client(c);
	/* One by one: the listing is in the order they were stored. */
	static const char *const specs[] = {
		"{\"id\":\"t1\",\"steps\":[{\"name\":\"one\",\"run\":\"true\"}]}",
		"{\"id\":\"t2\",\"steps\":[{\"name\":\"one\",\"run\":\"true\"}]}",
		"{\"id\":\"t3\",\"steps\":[{\"name\":\"one\",\"run\":\"true\"}]}",
	};
	proc_result r;
	for (size_t i = 0; i < 3; i++) {
		r = RUN_STDIN(specs[i], "submit");
		CHECK_INT(r.status, ==, 0);
		proc_result_free(&r);
	}
	r = RUN("cancel", "t2");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);

	const char *all[] = { "status", NULL };
	r = cli_run_tty(all);
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.out, "PROGRESS");
	CHECK_HAS(r.out, "[----------]");
	CHECK_HAS(r.out, "\r\n3 tasks: 2 pending, 1 cancelled\r\n");
	proc_result_free(&r);

	const char *two[] = { "status", "--limit", "2", NULL };
	r = cli_run_tty(two);
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.out, "\r\nthe oldest 2 tasks: 1 pending, 1 cancelled\r\n");
	proc_result_free(&r);

	const char *one[] = { "status", "t1", NULL };
	r = cli_run_tty(one);
	CHECK_INT(r.status, ==, 0);
	CHECK(strstr(r.out, "1 task") == NULL); /* no totals under a single row */
	proc_result_free(&r);

	/* A pipe gets the rows alone, for scripts. */
	r = RUN("status");
	CHECK_INT(r.status, ==, 0);
	CHECK(strstr(r.out, "tasks:") == NULL);
	proc_result_free(&r);
	lr_client_close(c);
}

/* The widest line of terminal output (\r\n line ends), in columns; every
 * character here takes one. */
static size_t widest_line(const char *out)
{
	size_t widest = 0, w = 0;
	for (const unsigned char *p = (const unsigned char *)out; *p != '\0'; p++) {
		if (*p == '\r' || *p == '\n') {
			w = 0;
			continue;
		}
		if ((*p & 0xC0) != 0x80 && ++w > widest)
			widest = w;
	}
	return widest;
}

/* On a 100- or 120-column terminal a row fits its line, progress bar
 * included, even with a generated id, a failed step's long error, an id
 * of 200 characters and a long step name: those are cut ("...") before
 * the error is, and the error is cut last. `status ID` shows the error in
 * full on a line of its own; a pipe keeps every row whole. */
TEST(status_on_a_narrow_terminal_fits_each_row_and_status_id_shows_the_error)
{
	lr_client *c = fixture_client("cli_narrow");
	cli_use_client(c);
	proc_result r = RUN_STDIN("{\"steps\":[{\"name\":\"ingest\",\"run\":\"echo disk quota "
	                          "exceeded >&2; exit 1\"}],\"max_attempts\":1}", "submit");
	CHECK_INT(r.status, ==, 0);
	char id[64];
	snprintf(id, sizeof(id), "%.*s", (int)strcspn(r.out, "\n"), r.out);
	proc_result_free(&r);
	r = RUN("worker", "--exit-when-idle", "--ttl", "2");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	char long_id[201], spec[2048], step[121];
	memset(long_id, 'i', 200);
	long_id[200] = '\0';
	memset(step, 's', 120);
	step[120] = '\0';
	snprintf(spec, sizeof(spec), "{\"id\":\"%s\",\"steps\":[{\"name\":\"%s\",\"run\":\"true\"}]}",
	         long_id, step);
	r = RUN_STDIN(spec, "submit");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);

	const char *const list[] = { "status", NULL };
	for (int cols = 100; cols <= 120; cols += 20) {
		r = cli_run_tty_cols(list, cols);
		CHECK_INT(r.status, ==, 0);
		CHECK_INT(widest_line(r.out), <=, cols);
		CHECK_HAS(r.out, "failed");
		CHECK_HAS(r.out, "[----------]"); /* the bar stays */
		CHECK_HAS(r.out, cols == 100 ? "  step ing" : "  step ingest (0) failed");
		/* the start and the end of an id, which tell generated ones apart */
		char ends[32];
		snprintf(ends, sizeof(ends), "%.6s...%s", id, id + strlen(id) - 7);
		CHECK_HAS(r.out, ends);
		CHECK_HAS(r.out, "\r\n2 tasks: 1 pending, 1 failed\r\n");
		proc_result_free(&r);
	}

	const char *const one[] = { "status", id, NULL };
	r = cli_run_tty_cols(one, 80);
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.out, "\r\nerror: step ingest (0) failed after 1 attempt: exit status 1; "
	                 "stderr: disk quota exceeded\r\n");
	proc_result_free(&r);

	r = RUN("status");
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.out, long_id);
	CHECK_HAS(r.out, step);
	CHECK_HAS(r.out, "stderr: disk quota exceeded\n");
	CHECK(strstr(r.out, "...") == NULL);
	proc_result_free(&r);
	r = RUN("status", id);
	CHECK_INT(r.status, ==, 0);
	CHECK(strstr(r.out, "error: ") == NULL); /* the row has it whole */
	proc_result_free(&r);
	lr_client_close(c);
}

/* Whether s is valid UTF-8 through and through. */
static bool valid_utf8(const char *s)
{
	size_t n = strlen(s);
	for (size_t i = 0, len; i < n; i += len) {
		len = lr_utf8_char_len((const unsigned char *)s + i, n - i);
		if (len == 0)
			return false;
	}
	return true;
}

/* A step name may take up to 1024 bytes: a pipe shows it whole, a
 * terminal cuts it between characters, never inside one. */
TEST(status_shows_a_long_step_name_whole_or_cut_between_characters)
{
	lr_client *c = fixture_client("cli_long_step");
	cli_use_client(c);
	char spec[4096], name[601];
	size_t o = (size_t)snprintf(spec, sizeof(spec), "{\"id\":\"accents\",\"steps\":[{\"name\":\"");
	for (int i = 0; i < 300; i++) {
		o += (size_t)snprintf(spec + o, sizeof(spec) - o, "\\u00e9");
		memcpy(name + 2 * i, "\xc3\xa9", 2);
	}
	name[600] = '\0';
	snprintf(spec + o, sizeof(spec) - o, "\",\"run\":\"true\"}]}");
	proc_result r = RUN_STDIN(spec, "submit");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);

	r = RUN("status");
	CHECK_INT(r.status, ==, 0);
	CHECK(valid_utf8(r.out));
	CHECK_HAS(r.out, name);
	proc_result_free(&r);
	const char *const list[] = { "status", NULL };
	r = cli_run_tty_cols(list, 100);
	CHECK_INT(r.status, ==, 0);
	CHECK(valid_utf8(r.out));
	CHECK_HAS(r.out, "1/1 \xc3\xa9\xc3\xa9");
	CHECK_HAS(r.out, "\xc3\xa9...");
	proc_result_free(&r);
	lr_client_close(c);
}

/* A lock's holder and host are whatever its key and value hold: long
 * ones are shown whole to a pipe and in JSON, cut between characters on
 * a terminal, and what a request waits for names them without cutting
 * inside a character (the JSON keeps it, the table does not say "free
 * now"). No output holds invalid UTF-8. */
TEST(locks_shows_long_holders_whole_or_cut_between_characters)
{
	lr_client *c = fixture_client("cli_locks_utf8");
	cli_use_client(c);
	char name[361], host[602], key[800], value[700], shown[400];
	for (int i = 0; i < 180; i++)
		memcpy(name + 2 * i, "\xc3\xa9", 2);
	name[360] = '\0';
	host[0] = 'h';
	for (int i = 0; i < 300; i++)
		memcpy(host + 1 + 2 * i, "\xc3\xbc", 2);
	host[601] = '\0';
	int64_t lease = fixture_lease(c, 30);
	lr_err e = { 0 }; /* keys longer than fixture_put takes */
	snprintf(key, sizeof(key), "%slocks/x/#3X/run:%s", lr_client_prefix(c), name);
	snprintf(value, sizeof(value), "{\"host\":\"%s\",\"since\":\"2026-11-24T00:00:00Z\"}",
	         host);
	CHECK_OK(lr_kv_put(lr_client_etcd(c), key, value, strlen(value), lease, NULL, NULL, &e),
	         &e);
	snprintf(key, sizeof(key), "%swants/run:w%s", lr_client_prefix(c), name);
	snprintf(value, sizeof(value), "{\"locks\":{\"x\":\"X\"},\"host\":\"box-2\"}");
	CHECK_OK(lr_kv_put(lr_client_etcd(c), key, value, strlen(value), lease, NULL, NULL, &e),
	         &e);

	/* A holder with a byte that is no character (put by hand). */
	snprintf(key, sizeof(key), "%slocks/y/#0IS/run:bad\xff", lr_client_prefix(c));
	CHECK_OK(lr_kv_put(lr_client_etcd(c), key, "{}", 2, lease, NULL, NULL, &e), &e);

	proc_result r = RUN("locks");
	CHECK_INT(r.status, ==, 0);
	CHECK(valid_utf8(r.out));
	CHECK_HAS(r.out, "run bad\xef\xbf\xbd");
	snprintf(shown, sizeof(shown), "run %s", name);
	CHECK_HAS(r.out, shown);
	snprintf(shown, sizeof(shown), "run w%s", name);
	CHECK_HAS(r.out, shown);
	CHECK(strstr(r.out, "free now") == NULL);
	CHECK_HAS(r.out, "X x held by run \xc3\xa9");
	proc_result_free(&r);
	const char *const table[] = { "locks", NULL };
	r = cli_run_tty_cols(table, 120);
	CHECK_INT(r.status, ==, 0);
	CHECK(valid_utf8(r.out));
	proc_result_free(&r);
	r = RUN("locks", "--json");
	CHECK_INT(r.status, ==, 0);
	CHECK(valid_utf8(r.out));
	json_t *doc = json_loads(r.out, 0, NULL);
	json_t *held = json_array_get(json_object_get(doc, "held"), 0);
	json_t *want = json_array_get(json_object_get(doc, "waiting"), 0);
	snprintf(shown, sizeof(shown), "run:%s", name);
	CHECK_STR(json_string_value(json_object_get(held, "holder")), shown);
	const char *why = json_string_value(json_object_get(want, "waiting_for"));
	CHECK(why != NULL && strncmp(why, "X x held by run \xc3\xa9", 18) == 0);
	json_decref(doc);
	proc_result_free(&r);
	CHECK_OK(lr_lease_revoke(lr_client_etcd(c), lease, &e), &e);
	lr_client_close(c);
}

TEST(unknown_task_ids_exit_4)
{
	lr_client *c = fixture_client("cli_unknown");
	cli_use_client(c);
	proc_result r = RUN("status", "ghost");
	CHECK_INT(r.status, ==, 4);
	CHECK_HAS(r.err, "no such task ghost");
	proc_result_free(&r);
	r = RUN("cancel", "ghost");
	CHECK_INT(r.status, ==, 4);
	CHECK_HAS(r.err, "no such task");
	proc_result_free(&r);
	lr_client_close(c);
}

/* A claim of task id put by hand, as runner box-1 would, on a lease of
 * 30 s of its own: the lease. */
static int64_t claim_by_hand(lr_client *c, const char *id)
{
	lr_claim_rec cl = { .runner = "box-1", .lease = fixture_lease(c, 30) };
	lr_rfc3339_now(cl.claimed_at);
	char *v = lr_claim_encode(&cl);
	fixture_put(c, LR_K_CLAIMS, id, v, cl.lease);
	free(v);
	return cl.lease;
}

TEST(cancel_says_what_it_did)
{
	lr_client *c = fixture_client("cli_cancel");
	cli_use_client(c);
	proc_result r = RUN_STDIN(spec_a, "submit");
	proc_result_free(&r);
	r = RUN("cancel", "a");
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "cancelled a\n");
	proc_result_free(&r);
	r = RUN("cancel", "a");
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "already cancelled\n");
	proc_result_free(&r);

	r = RUN_STDIN("{\"id\":\"b\",\"steps\":[{\"name\":\"s\",\"run\":\"true\"}]}",
	              "submit");
	proc_result_free(&r);
	claim_by_hand(c, "b");
	r = RUN("cancel", "b");
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "cancel requested for b (running on box-1)\n");
	proc_result_free(&r);
	lr_client_close(c);
}

/* A cancel request outlives a holder that died: once its claim is gone
 * the task is pending again, and status says that a cancel is asked for
 * (in the table's STATE and in --json) until the task ends. */
TEST(status_shows_a_cancel_request_of_a_running_and_of_a_pending_task)
{
	lr_client *c = fixture_client("cli_cancel_req");
	cli_use_client(c);
	proc_result r = RUN_STDIN("{\"id\":\"b\",\"steps\":[{\"name\":\"s\",\"run\":\"true\"}]}",
	                          "submit");
	proc_result_free(&r);
	r = RUN("status", "b", "--json");
	json_t *o = json_loads(r.out, 0, NULL);
	CHECK(json_is_false(json_object_get(o, "cancel_requested")));
	CHECK(json_is_null(json_object_get(o, "cancel_requested_at")));
	json_decref(o);
	proc_result_free(&r);
	int64_t lease = claim_by_hand(c, "b");
	r = RUN("cancel", "b");
	CHECK_STR(r.out, "cancel requested for b (running on box-1)\n");
	proc_result_free(&r);
	r = RUN("status", "b");
	CHECK_HAS(r.out, "  running (cancel requested)  ");
	proc_result_free(&r);

	lr_err e = { 0 }; /* the holder died: its lease is gone */
	CHECK_OK(lr_lease_revoke(lr_client_etcd(c), lease, &e), &e);
	const char *const views[][3] = { { "status", "b" }, { "status" } };
	for (size_t i = 0; i < 2; i++) {
		r = cli_run(NULL, views[i][0], views[i][1], (char *)NULL);
		CHECK_INT(r.status, ==, 0);
		CHECK_HAS(r.out, "  pending (cancel requested)  ");
		proc_result_free(&r);
	}
	r = RUN("status", "--json");
	o = json_loads(r.out, 0, NULL);
	json_t *b = json_array_get(o, 0);
	CHECK_STR(json_string_value(json_object_get(b, "state")), "pending");
	CHECK(json_is_true(json_object_get(b, "cancel_requested")));
	CHECK(json_string_value(json_object_get(b, "cancel_requested_at")) != NULL);
	json_decref(o);
	proc_result_free(&r);
	r = RUN("status", "--state", "pending"); /* still a pending task */
	CHECK_HAS(r.out, "pending (cancel requested)");
	proc_result_free(&r);

	r = RUN("cancel", "b"); /* not claimed now: it ends at once */
	CHECK_STR(r.out, "cancelled b\n");
	proc_result_free(&r);
	r = RUN("status", "b", "--json");
	o = json_loads(r.out, 0, NULL);
	CHECK_STR(json_string_value(json_object_get(o, "state")), "cancelled");
	CHECK(json_is_false(json_object_get(o, "cancel_requested")));
	json_decref(o);
	proc_result_free(&r);
	lr_client_close(c);
}

TEST(runners_and_purge_print_their_results)
{
	lr_client *c = fixture_client("cli_runners");
	cli_use_client(c);
	proc_result r = RUN("runners", "--json");
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "[]\n");
	proc_result_free(&r);
	r = RUN("runners");
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.out, "TTL LEFT");
	proc_result_free(&r);
	/* A runner's lease, also in hex: exact for every JSON reader, and
	 * what etcdctl lease timetolive takes. */
	int64_t lease = fixture_lease(c, 30);
	fixture_put(c, "runners/", "box-1", "{\"pid\":7,\"host\":\"vm\",\"concurrency\":2,"
	            "\"ttl\":30,\"started_at\":\"2026-11-24T00:00:00Z\",\"version\":\"1\"}",
	            lease);
	r = RUN("runners", "--json");
	CHECK_INT(r.status, ==, 0);
	char hex[40];
	snprintf(hex, sizeof(hex), "\"lease_hex\": \"%llx\"", (unsigned long long)lease);
	CHECK_HAS(r.out, hex);
	proc_result_free(&r);
	lr_err e = {0};
	CHECK_OK(lr_lease_revoke(lr_client_etcd(c), lease, &e), &e); /* the record goes with it */

	r = RUN_STDIN(spec_a, "submit");
	proc_result_free(&r);
	r = RUN("cancel", "a");
	proc_result_free(&r);
	r = RUN("purge", "--older-than", "1h");
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "purged 0 tasks\n");
	proc_result_free(&r);
	r = RUN("purge", "--older-than=0s", "--status", "cancelled");
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "purged 1 task\n");
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, ""), ==, 0);
	lr_client_close(c);
}

/* bench deletes its keys when it is done, a hundred to a txn: several
 * hundred keys here, so that the deletes take several txns. */
TEST(bench_prints_its_figures_and_leaves_no_key_behind)
{
	lr_client *c = fixture_client("cli_bench");
	cli_use_client(c);
	proc_result r = RUN("bench", "--tasks", "60", "--steps", "2", "--concurrency", "4",
	                    "--raw-txns", "250", "--json");
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.out, "\"tasks_per_s\"");
	CHECK_HAS(r.out, "\"txns_per_task\"");
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, ""), ==, 0);
	lr_client_close(c);
}

/* Output that could not be written is a failure (exit 1, saying so), not
 * a success; a command that failed for its own reason keeps its status. */
TEST(output_that_cannot_be_written_exits_1)
{
	lr_client *c = fixture_client("cli_full");
	cli_use_client(c);
	const char *path = cli_write_file("f1.json", spec_a);
	const char *const cmds[][4] = {
		{ "submit", path },
		{ "status" },
		{ "status", "--json" },
		{ "status", "a" },
		{ "runners" },
		{ "runners", "--json" },
		{ "locks", "--json" },
		{ "status", "--help" },
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		proc_result r = cli_run_stdout_to("/dev/full", cmds[i]);
		if (r.status != 1 || strstr(r.err, "leaserun: writing the output: ") == NULL)
			TEST_FAIL("%s %s >/dev/full: exit %d, expected 1", cmds[i][0],
			          cmds[i][1] ? cmds[i][1] : "", r.status);
		proc_result_free(&r);
	}
	const char *const ghost[] = { "status", "ghost", NULL };
	proc_result r = cli_run_stdout_to("/dev/full", ghost);
	CHECK_INT(r.status, ==, 4);
	CHECK(strstr(r.err, "writing the output") == NULL);
	proc_result_free(&r);
	/* Started with standard output closed: what it prints goes nowhere
	 * (not into a file opened meanwhile, which takes the lowest number),
	 * and it says so. */
	const char *const list[] = { "status", NULL };
	r = cli_run_stdout_to(NULL, list);
	CHECK_INT(r.status, ==, 1);
	CHECK_HAS(r.err, "leaserun: writing the output: Bad file descriptor");
	proc_result_free(&r);
	lr_client_close(c);
}

/* A listing too long for stdout's buffer fails while it is written, not
 * only when it is flushed at the end: still a write error, with its
 * reason, not "out of memory". */
TEST(status_json_of_many_tasks_that_cannot_be_written_says_why)
{
	lr_client *c = fixture_client("cli_full_many");
	cli_use_client(c);
	size_t cap = 300 * 80, o = 0;
	char *lines = malloc(cap);
	CHECK(lines != NULL);
	for (int i = 0; i < 300; i++)
		o += (size_t)snprintf(lines + o, cap - o, "{\"id\":\"t-%03d\",\"steps\":[{\"name\":"
		                      "\"s\",\"run\":\"true\"}]}\n", i);
	proc_result r = RUN("submit", "--jsonl", cli_write_file("many.jsonl", lines));
	free(lines);
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	const char *const cmds[][4] = { { "status", "--json" }, { "status" } };
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		r = cli_run_stdout_to("/dev/full", cmds[i]);
		CHECK_INT(r.status, ==, 1);
		CHECK_HAS(r.err, "leaserun: writing the output: No space left on device");
		CHECK(strstr(r.err, "out of memory") == NULL);
		proc_result_free(&r);
	}
	lr_client_close(c);
}

/* runners --json and locks --json longer than stdout's buffer: the write
 * fails while the document is printed, and the command says why (exit 1),
 * as status --json does. */
TEST(runners_and_locks_json_that_cannot_be_written_say_why)
{
	lr_client *c = fixture_client("cli_full_json");
	cli_use_client(c);
	int64_t lease = fixture_lease(c, 30);
	char host[201], value[400], name[64];
	memset(host, 'h', sizeof(host) - 1);
	host[sizeof(host) - 1] = '\0';
	for (int i = 0; i < 40; i++) {
		snprintf(name, sizeof(name), "box-%02d", i);
		snprintf(value, sizeof(value), "{\"pid\":7,\"host\":\"%s\",\"concurrency\":1,"
		         "\"ttl\":30,\"started_at\":\"2026-11-24T00:00:00Z\",\"version\":\"1\"}",
		         host);
		fixture_put(c, "runners/", name, value, lease);
		snprintf(name, sizeof(name), "p/a%02d/#3X/run:box-%02d", i, i);
		snprintf(value, sizeof(value), "{\"host\":\"%s\",\"since\":"
		         "\"2026-11-24T00:00:00Z\"}", host);
		fixture_put(c, "locks/", name, value, lease);
	}
	const char *const cmds[][3] = { { "runners", "--json" }, { "locks", "--json" } };
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		proc_result r = RUN(cmds[i][0], cmds[i][1]);
		CHECK_INT(r.status, ==, 0);
		CHECK(strlen(r.out) > 8192);
		proc_result_free(&r);
		r = cli_run_stdout_to("/dev/full", cmds[i]);
		if (r.status != 1 ||
		    strstr(r.err, "leaserun: writing the output: No space left on device") == NULL)
			TEST_FAIL("%s --json >/dev/full: exit %d, stderr \"%s\"", cmds[i][0],
			          r.status, r.err);
		proc_result_free(&r);
	}
	lr_err e = { 0 };
	CHECK_OK(lr_lease_revoke(lr_client_etcd(c), lease, &e), &e);
	lr_client_close(c);
}

/* design.md: a worker's log lines each have time, level and runner; its
 * own lines (the metrics address, the sweep of state directories) too. */
TEST(every_worker_log_line_names_the_runner)
{
	lr_client *c = fixture_client("cli_worker_log");
	cli_use_client(c);
	/* A state directory left by a killed step, for the sweep to remove. */
	char tmp[128], left[256];
	snprintf(tmp, sizeof(tmp), "%s/logs-tmp", cli_tmpdir);
	snprintf(left, sizeof(left), "%s/leaserun-t.7.1.AbC123", tmp);
	CHECK(mkdir(tmp, 0700) == 0 && mkdir(left, 0700) == 0);
	struct timeval old[2] = { { .tv_sec = time(NULL) - 600 }, { .tv_sec = time(NULL) - 600 } };
	CHECK(utimes(left, old) == 0);
	setenv("TMPDIR", tmp, 1);
	proc_result r = RUN("worker", "--name", "w-logs", "--exit-when-idle", "--metrics",
	                    "127.0.0.1:0");
	unsetenv("TMPDIR");
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.err, "metrics on http://");
	CHECK_HAS(r.err, "removed 1 state directories");
	CHECK(rmdir(tmp) == 0); /* the sweep took what it left */
	int lines = 0;
	for (char *line = strtok(r.err, "\n"); line != NULL; line = strtok(NULL, "\n")) {
		json_t *o = json_loads(line, 0, NULL);
		const char *runner = json_string_value(json_object_get(o, "runner"));
		if (runner == NULL || strcmp(runner, "w-logs") != 0 ||
		    json_object_get(o, "time") == NULL || json_object_get(o, "level") == NULL)
			TEST_FAIL("a log line without time, level or runner w-logs: %s", line);
		json_decref(o);
		lines++;
	}
	CHECK(lines >= 3);
	proc_result_free(&r);
	lr_client_close(c);
}

/* A name held by a record the worker cannot read (written by something
 * else) is refused, exit 1, saying so; nothing of it is shown as a host
 * or a pid. A record without a host says only the pid. */
TEST(a_runner_name_held_by_an_unreadable_record_is_refused_saying_so)
{
	lr_client *c = fixture_client("cli_name_garbage");
	cli_use_client(c);
	fixture_put(c, LR_K_RUNNERS, "garbage", "garbage", 0);
	proc_result r = RUN("worker", "--name", "garbage", "--exit-when-idle");
	CHECK_INT(r.status, ==, 1);
	CHECK_HAS(r.err, "runner name garbage is in use (its record is unreadable) on ");
	CHECK(strstr(r.err, "pid") == NULL);
	CHECK(strstr(r.err, "host") == NULL);
	proc_result_free(&r);
	fixture_put(c, LR_K_RUNNERS, "nohost",
	            "{\"pid\":7,\"host\":\"\",\"concurrency\":1,\"ttl\":5,"
	            "\"started_at\":\"2026-01-01T00:00:00Z\",\"version\":\"1\"}", 0);
	r = RUN("worker", "--name", "nohost", "--exit-when-idle");
	CHECK_INT(r.status, ==, 1);
	CHECK_HAS(r.err, "runner name nohost is in use by a live runner (pid 7) on ");
	proc_result_free(&r);
	lr_client_close(c);
}

/* ---- usage errors and connection failures ---- */

TEST(bad_flags_and_arguments_exit_2_with_a_reason)
{
	lr_client *c = fixture_client("cli_usage");
	cli_use_client(c);
	const char *const cases[][7] = {
		{ "frobnicate" },
		{ "status", "--bogus" },
		{ "status", "--state", "sleeping" },
		{ "status", "--limit", "ten" },
		{ "status", "--json=yes" },
		{ "status", "a", "b" },
		{ "status", "a", "--state", "pending" },
		{ "status", "--limit" },
		{ "cancel" },
		{ "worker", "--concurrency", "0" },
		{ "worker", "--concurrency", "1025" }, /* more than a runner can have */
		{ "worker", "--ttl", "0" },
		{ "worker", "--ttl", "86401" }, /* more than a day */
		{ "run", "--lock", "x", "--ttl", "86401", "--", "true" },
		{ "run", "--lock", "x", "--grace", "86401", "--", "true" },
		{ "worker", "--grace", "-1" },
		{ "worker", "--name", "bad name" },
		{ "purge" },
		{ "purge", "--older-than", "soon" },
		{ "purge", "--older-than", "1h", "--status", "running" },
		{ "runners", "extra" },
		{ "status", "--dial-timeout", "0" },
		{ "status", "--dial-timeout", "1e-9" },    /* below the library's millisecond */
		{ "status", "--dial-timeout", "0.0009" },
		{ "status", "--dial-timeout", "0x10" },
		{ "status", "-x" },
		/* a start time past 9999-12-31, or one that overflows */
		{ "submit", "--in", "3000000d", "-" },
		{ "submit", "--in", "9223372036854775000ms", "--jsonl", "-" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *const *a = cases[i];
		proc_result r = cli_run(NULL, a[0], a[1], a[2], a[3], a[4], a[5], a[6],
		                      (char *)NULL);
		if (r.status != 2)
			TEST_FAIL("case %zu (%s %s): exit %d", i, a[0],
			          a[1] ? a[1] : "", r.status);
		CHECK_HAS(r.err, "leaserun: ");
		CHECK_HAS(r.err, "--help");
		CHECK(strstr(r.err, "lr_client_opts") == NULL && strstr(r.err, "_s ") == NULL);
		proc_result_free(&r);
	}
	proc_result r = RUN(NULL);
	CHECK_INT(r.status, ==, 2);
	proc_result_free(&r);
	r = RUN("--help");
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.out, "submit");
	proc_result_free(&r);
	r = RUN("status", "-h");
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.out, "--watch");
	proc_result_free(&r);
	/* A "--" before the command ends the options before it, and is not
	 * the command's: its flags are still flags. */
	r = RUN("--", "status", "--limit", "1");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, ""), ==, 0);
	lr_client_close(c);
}

/* A whole-number flag takes digits alone (design: "--ttl S", "--limit N";
 * no option has a meaningful negative value): a sign, blanks, hex or an
 * exponent are refused, exit 2 naming the flag and the value as given,
 * and nothing is stored (before, strtol took "+3", " 3" and "-0"). */
TEST(whole_number_flags_take_digits_alone_and_store_nothing)
{
	lr_client *c = fixture_client("cli_digits");
	cli_use_client(c);
	/* The value as given, and as the message shows it. */
	static const char *const values[][2] = {
		{ "+3", "\"+3\"" }, { " 3", "\" 3\"" }, { "3 ", "\"3 \"" },
		{ "\t3", "\"\\x093\"" }, { "-0", "\"-0\"" }, { "0x10", "\"0x10\"" },
		{ "1e3", "\"1e3\"" }, { "3.0", "\"3.0\"" },
	};
	/* A flag, then the rest of its command; "V" is the value. */
	static const char *const cmds[][8] = {
		{ "--in-flight", "submit", "--in-flight", "V", "-" },
		{ "--ttl", "worker", "--ttl", "V", "--exit-when-idle" },
		{ "--grace", "worker", "--grace", "V", "--exit-when-idle" },
		{ "--concurrency", "worker", "--concurrency", "V", "--exit-when-idle" },
		{ "--limit", "status", "--limit", "V" },
		{ "--ttl", "run", "--lock", "x", "--ttl", "V", "--", "true" },
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		for (size_t j = 0; j < sizeof(values) / sizeof(values[0]); j++) {
			const char *a[7];
			for (int k = 0; k < 7; k++)
				a[k] = cmds[i][k + 1] != NULL && strcmp(cmds[i][k + 1], "V") == 0
				               ? values[j][0] : cmds[i][k + 1];
			proc_result r = cli_run(spec_a, a[0], a[1], a[2], a[3], a[4], a[5], a[6],
			                        (char *)NULL);
			if (r.status != 2 || strstr(r.err, cmds[i][0]) == NULL ||
			    strstr(r.err, values[j][1]) == NULL)
				TEST_FAIL("%s %s %s: exit %d, expected 2 naming %s and %s: %s", a[0],
				          cmds[i][0], values[j][1], r.status, cmds[i][0],
				          values[j][1], r.err);
			proc_result_free(&r);
		}
	CHECK_INT(fixture_count(c, ""), ==, 0);
	/* Leading zeros are still digits. */
	proc_result r = RUN("status", "--limit", "007");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	/* `run` takes the TTL and grace `worker` takes, up to a day. */
	r = RUN("run", "--lock", "cli_digits", "--ttl", "86400", "--grace", "86400", "--", "true");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	lr_client_close(c);
}

/* Which of the two would the user have meant? Neither wins: a flag with
 * one value given twice is refused, and nothing is stored. */
TEST(a_flag_with_one_value_given_twice_exits_2)
{
	lr_client *c = fixture_client("cli_twice");
	cli_use_client(c);
	const char *const cases[][7] = {
		{ "status", "--state", "failed", "--state", "pending", "--state" },
		{ "status", "--prefix", "/a/", "--prefix=/b/", NULL, "--prefix" },
		{ "--endpoints", "127.0.0.1:1", "status", "--endpoints", "127.0.0.1:1", "--endpoints" },
		{ "submit", "--id", "a", "--id=b", "-", "--id" },
		{ "worker", "--ttl=5", "--exit-when-idle", "--ttl", "6", "--ttl" },
		{ "run", "--lock", "x", "--ttl=5", "--ttl=6", "--ttl" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *const *a = cases[i];
		proc_result r = cli_run(spec_a, a[0], a[1], a[2], a[3], a[4],
		                        a[0][0] == 'r' ? "--" : NULL, "true", (char *)NULL);
		char want[64];
		snprintf(want, sizeof(want), "%s given twice", a[5]);
		if (r.status != 2 || strstr(r.err, want) == NULL)
			TEST_FAIL("case %zu (%s %s): exit %d, expected 2 and \"%s\"", i, a[0], a[1],
			          r.status, want);
		proc_result_free(&r);
	}
	CHECK_INT(fixture_count(c, ""), ==, 0);
	/* Flags meant to repeat still do. */
	proc_result r = RUN("run", "--lock", "x", "--lock", "y", "--limit", "p=1", "--", "true");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	lr_client_close(c);
}

/* A message shows a long value cut short, so that the reason after it is
 * never lost to the message's length. */
TEST(a_very_long_value_is_cut_short_in_messages)
{
	static char value[5001];
	memset(value, 'a', sizeof(value) - 1);
	const char *const cases[][4] = {
		{ "--endpoints", value, "expected host:port" },
		{ "--limit", value, "expected a whole number" },
		{ "--state", value, "unknown state" },
		{ "--dial-timeout", value, "expected seconds" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		proc_result r = RUN("status", cases[i][0], cases[i][1]);
		CHECK_INT(r.status, ==, 2);
		CHECK_HAS(r.err, cases[i][2]);
		CHECK(strlen(r.err) < 400);
		proc_result_free(&r);
	}
}

/* A loopback port with nobody listening. */
static int closed_port(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET,
		                 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	CHECK(bind(s, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(getsockname(s, (struct sockaddr *)&a, &len) == 0);
	close(s);
	return ntohs(a.sin_port);
}

TEST(unreachable_etcd_exits_1_naming_the_endpoint_within_the_dial_timeout)
{
	char ep[64];
	snprintf(ep, sizeof(ep), "127.0.0.1:%d", closed_port());
	const char *const cmds[][2] = { { "status", NULL }, { "cancel", "a" },
		                        { "runners", NULL } };
	for (int i = 0; i < 3; i++) {
		int64_t t0 = lr_mono_ms();
		proc_result r = cli_run(NULL, "--endpoints", ep, "--dial-timeout",
		                      "1", cmds[i][0], cmds[i][1], (char *)NULL);
		int64_t took = lr_mono_ms() - t0;
		CHECK_INT(r.status, ==, 1);
		CHECK_HAS(r.err, ep);
		CHECK(took < 3000);
		proc_result_free(&r);
	}
	/* The spec is checked first: invalid input is exit 2 even then. */
	proc_result r = cli_run("{", "submit", "--endpoints", ep, "--dial-timeout",
	                      "1", (char *)NULL);
	CHECK_INT(r.status, ==, 2);
	proc_result_free(&r);
	r = cli_run(spec_a, "submit", "--endpoints", ep, "--dial-timeout=1",
	           (char *)NULL);
	CHECK_INT(r.status, ==, 1);
	CHECK_HAS(r.err, ep);
	proc_result_free(&r);
	/* So is an invalid task id, whichever command takes it. */
	const char *const id_cmds[] = { "status", "cancel", "retry" };
	for (int i = 0; i < 3; i++) {
		r = cli_run(NULL, "--endpoints", ep, "--dial-timeout", "1", id_cmds[i], "a b",
		            (char *)NULL);
		CHECK_INT(r.status, ==, 2);
		CHECK_HAS(r.err, "\"a b\" is not a valid task id");
		proc_result_free(&r);
	}
}

/* A second etcd with authentication on: user root, password pw. */
static etcdh_cluster *secured_cluster(const char *pw)
{
	etcdh_opts o = { .members = 1 };
	etcdh_cluster *sc = NULL;
	char cmd[512];
	CHECK(etcdh_start(&o, &sc) == 0);
	const char *ep = etcdh_endpoint(sc, 0);
	snprintf(cmd, sizeof(cmd),
	         "etcdctl --endpoints=%s user add root --new-user-password=%s "
	         ">/dev/null 2>&1 && etcdctl --endpoints=%s auth enable "
	         ">/dev/null 2>&1", ep, pw, ep);
	CHECK(system(cmd) == 0);
	snprintf(cli_env_endpoints, sizeof(cli_env_endpoints), "%s", ep);
	snprintf(cli_env_prefix, sizeof(cli_env_prefix), "/leaserun/");
	return sc;
}

TEST(credentials_come_from_the_flag_or_the_environment_and_never_show)
{
	etcdh_cluster *sc = secured_cluster("Root-pw-1");
	proc_result r = RUN("status", "--user", "root:Root-pw-1");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);

	r = RUN("status", "--user=root:Wrong-pw-9");
	CHECK_INT(r.status, ==, 1);
	CHECK_HAS(r.err, "root");
	CHECK(strstr(r.err, "Wrong-pw-9") == NULL);
	CHECK(strstr(r.out, "Wrong-pw-9") == NULL);
	proc_result_free(&r);

	cli_env_user = "root";
	cli_env_password = "Root-pw-1";
	r = RUN("status");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);

	cli_env_user = "root:Root-pw-1";
	cli_env_password = NULL;
	r = RUN("runners");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);

	/* No password and no terminal to ask on: etcd refuses. */
	cli_env_user = "root";
	r = RUN("status");
	CHECK_INT(r.status, ==, 1);
	proc_result_free(&r);
	cli_env_user = NULL;
	etcdh_destroy(sc);
}

static int count_lines(const char *s)
{
	int n = 0;
	for (; *s != '\0'; s++)
		n += *s == '\n';
	return n;
}

/* An etcd run with --max-txn-ops below what one read of the list asks
 * (8 tasks of 4 records): the listing reads fewer tasks a txn, down to
 * one, instead of failing with "too many operations in txn request". */
TEST(status_lists_tasks_from_an_etcd_with_a_low_max_txn_ops)
{
	static const char *const low[] = { "--max-txn-ops=6", NULL };
	etcdh_opts opts = { .members = 1, .extra_args = low };
	etcdh_cluster *small = NULL;
	CHECK(etcdh_start(&opts, &small) == 0);
	snprintf(cli_env_endpoints, sizeof(cli_env_endpoints), "%s", etcdh_endpoint(small, 0));
	snprintf(cli_env_prefix, sizeof(cli_env_prefix), "/leaserun/");
	char lines[20 * 80];
	size_t o = 0;
	for (int i = 0; i < 20; i++)
		o += (size_t)snprintf(lines + o, sizeof(lines) - o, "{\"id\":\"t-%02d\",\"steps\":"
		                      "[{\"name\":\"s\",\"run\":\"true\"}]}\n", i);
	proc_result r = RUN("submit", "--jsonl", cli_write_file("twenty.jsonl", lines));
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);

	r = RUN("status", "--json");
	CHECK_INT(r.status, ==, 0);
	json_t *all = json_loads(r.out, 0, NULL);
	CHECK_INT(json_array_size(all), ==, 20);
	json_decref(all);
	for (int i = 0; i < 20; i++) {
		char row[16];
		snprintf(row, sizeof(row), "\"t-%02d\"", i);
		CHECK_HAS(r.out, row);
	}
	proc_result_free(&r);
	r = RUN("status", "--limit", "10");
	CHECK_INT(r.status, ==, 0);
	CHECK_INT(count_lines(r.out), ==, 1 + 10);
	proc_result_free(&r);
	r = RUN("status", "--state", "pending");
	CHECK_INT(r.status, ==, 0);
	CHECK_INT(count_lines(r.out), ==, 1 + 20);
	proc_result_free(&r);
	etcdh_destroy(small);
}

/* Whether the file at log comes to hold text within timeout_ms. */
static bool log_says(const char *log, const char *text, int timeout_ms)
{
	bool said = false;
	for (int64_t t0 = lr_mono_ms(); !said && lr_mono_ms() - t0 < timeout_ms; lr_sleep_ms(20)) {
		char *now = proc_slurp(log);
		said = strstr(now, text) != NULL;
		free(now);
	}
	return said;
}

/* A worker whose steps cannot keep their state (TMPDIR missing) does not
 * start; one whose TMPDIR goes away under it releases the tasks it cannot
 * start with their attempts given back, claims nothing for a while, and
 * runs them once it can: a runner's own trouble costs a task no attempt. */
TEST(a_step_its_runner_cannot_start_costs_the_task_no_attempt)
{
	lr_client *c = fixture_client("cli_not_here");
	cli_use_client(c);
	char dir[200], log[200];
	snprintf(dir, sizeof(dir), "%s/steps-tmp", cli_tmpdir);
	snprintf(log, sizeof(log), "%s/not-here.log", cli_tmpdir);
	const char *saved = getenv("TMPDIR");
	char *old = saved != NULL ? strdup(saved) : NULL;

	setenv("TMPDIR", dir, 1); /* not made yet */
	proc_result r = RUN("worker", "--exit-when-idle", "--ttl", "2");
	CHECK_INT(r.status, ==, 1);
	CHECK_HAS(r.err, dir);
	CHECK_HAS(r.err, "set TMPDIR to a directory this user can write");
	proc_result_free(&r);

	CHECK(mkdir(dir, 0700) == 0);
	proc_bg worker;
	const char *args[] = { "worker", "--ttl", "2", "--concurrency", "2", "--name", "nh",
		               NULL };
	cli_start(&worker, log, args);
	if (old != NULL)
		setenv("TMPDIR", old, 1);
	else
		unsetenv("TMPDIR");
	free(old);
	(void)log_says(log, "registered with lease", 10000); /* then as before */
	CHECK(rmdir(dir) == 0);
	r = RUN_STDIN("{\"id\":\"nh\",\"max_attempts\":1,\"steps\":[{\"name\":\"s\","
	              "\"run\":\"true\"}]}", "submit");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	CHECK(log_says(log, "could not start on this runner", 10000));
	char *done = fixture_get(c, "done/", "nh");
	CHECK(done == NULL); /* one attempt allowed, none spent */
	free(done);
	CHECK(mkdir(dir, 0700) == 0);
	for (int64_t t0 = lr_mono_ms(); done == NULL && lr_mono_ms() - t0 < 20000;
	     lr_sleep_ms(50))
		done = fixture_get(c, "done/", "nh");
	CHECK(done != NULL);
	CHECK_HAS(done, "\"status\":\"succeeded\"");
	CHECK_HAS(done, "\"attempts\":1");
	free(done);
	CHECK_INT(proc_stop(&worker, SIGTERM, 10000), ==, 0);
	CHECK(rmdir(dir) == 0);
	lr_client_close(c);
}

TEST_LIST(
	TEST_CASE(submit_refuses_unknown_after_with_status_4_and_takes_in),
	TEST_CASE(bench_prints_its_figures_and_leaves_no_key_behind),
	TEST_CASE(submit_with_in_run_again_is_a_success_keeping_the_first_start_time),
	TEST_CASE(submit_prints_the_id_and_an_identical_resubmit_is_a_success),
	TEST_CASE(submit_reads_standard_input_and_takes_an_id),
	TEST_CASE(submit_with_standard_input_closed_exits_2_saying_so),
	TEST_CASE(submit_of_a_different_spec_under_a_taken_id_exits_3),
	TEST_CASE(submit_rejects_invalid_specs_and_stores_nothing),
	TEST_CASE(submit_rejects_a_spec_over_1_mib_and_over_1000_steps),
	TEST_CASE(submit_of_an_unreadable_file_exits_2_naming_it),
	TEST_CASE(status_json_has_the_documented_shape),
	TEST_CASE(status_table_names_each_column),
	TEST_CASE(status_shows_no_control_characters_of_a_spec),
	TEST_CASE(status_columns_line_up_with_wide_characters),
	TEST_CASE(status_on_a_terminal_adds_progress_bars_and_totals),
	TEST_CASE(status_on_a_narrow_terminal_fits_each_row_and_status_id_shows_the_error),
	TEST_CASE(status_shows_a_long_step_name_whole_or_cut_between_characters),
	TEST_CASE(locks_shows_long_holders_whole_or_cut_between_characters),
	TEST_CASE(unknown_task_ids_exit_4),
	TEST_CASE(cancel_says_what_it_did),
	TEST_CASE(status_shows_a_cancel_request_of_a_running_and_of_a_pending_task),
	TEST_CASE(runners_and_purge_print_their_results),
	TEST_CASE(output_that_cannot_be_written_exits_1),
	TEST_CASE(status_json_of_many_tasks_that_cannot_be_written_says_why),
	TEST_CASE(runners_and_locks_json_that_cannot_be_written_say_why),
	TEST_CASE(every_worker_log_line_names_the_runner),
	TEST_CASE(a_runner_name_held_by_an_unreadable_record_is_refused_saying_so),
	TEST_CASE(bad_flags_and_arguments_exit_2_with_a_reason),
	TEST_CASE(whole_number_flags_take_digits_alone_and_store_nothing),
	TEST_CASE(a_flag_with_one_value_given_twice_exits_2),
	TEST_CASE(a_very_long_value_is_cut_short_in_messages),
	TEST_CASE(unreachable_etcd_exits_1_naming_the_endpoint_within_the_dial_timeout),
	TEST_CASE(credentials_come_from_the_flag_or_the_environment_and_never_show),
	TEST_CASE(status_lists_tasks_from_an_etcd_with_a_low_max_txn_ops),
	TEST_CASE(a_step_its_runner_cannot_start_costs_the_task_no_attempt),
);

TEST_MAIN(cli_setup, cli_teardown)
