/* test_cli_queue.c - `leaserun retry`, `submit --in` and the turn fields as
 * a user meets them: the built binary (LEASERUN_BIN) against a real etcd,
 * exit statuses, messages, and that rejected input stores nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "cli_run.h"
#include "test.h"

#define ONE_STEP "\"steps\":[{\"name\":\"one\",\"run\":\"true\"},{\"name\":\"two\",\"run\":\"true\"}]"

/* r exited with status and said err_has (NULL: anything) on stderr. */
static void check_exit(proc_result r, int status, const char *err_has)
{
	CHECK_INT(r.status, ==, status);
	if (err_has != NULL)
		CHECK_HAS(r.err, err_has);
	proc_result_free(&r);
}

TEST(invalid_turn_fields_exit_2_naming_the_field_and_store_nothing)
{
	lr_client *c = fixture_client("cli_turn_bad");
	cli_use_client(c);
	static const char *const bad[][2] = {
		{ "{\"priority\":500," ONE_STEP "}", "priority: 500 is out of range -100..100" },
		{ "{\"not_before\":\"soon\"," ONE_STEP "}", "not_before: \"soon\" is not an RFC 3339 time" },
		{ "{\"after\":[\"a\",\"a\"]," ONE_STEP "}", "after[1]: \"a\" is listed twice" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		check_exit(RUN_STDIN(bad[i][0], "submit"), 2, bad[i][1]);
	}
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 0);
	CHECK_INT(fixture_count(c, LR_K_TURN), ==, 0);
	lr_client_close(c);
}

TEST(submit_after_an_unknown_task_exits_4)
{
	lr_client *c = fixture_client("cli_after_unknown");
	cli_use_client(c);
	check_exit(RUN_STDIN("{\"id\":\"d\",\"after\":[\"ghost\"]," ONE_STEP "}", "submit"), 4,
	           "no such task \"ghost\"");
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 0);
	check_exit(RUN_STDIN("{\"id\":\"a\"," ONE_STEP "}", "submit"), 0, NULL);
	proc_result r;
	r = RUN_STDIN("{\"id\":\"d\",\"after\":[\"a\"]," ONE_STEP "}", "submit");
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "d\n");
	proc_result_free(&r);
	r = RUN("status", "d");
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.out, "waiting: after a");
	proc_result_free(&r);
	lr_client_close(c);
}

TEST(bulk_submit_may_name_tasks_earlier_in_the_same_input)
{
	lr_client *c = fixture_client("cli_after_bulk");
	cli_use_client(c);
	char input[8192];
	size_t n = 0;
	for (int i = 0; i < 40; i++)
		n += (size_t)snprintf(input + n, sizeof(input) - n,
		                      i == 0 ? "{\"id\":\"c0\"," ONE_STEP "}\n"
		                             : "{\"id\":\"c%d\",\"after\":[\"c%d\"]," ONE_STEP "}\n",
		                      i, i - 1);
	snprintf(input + n, sizeof(input) - n,
	         "{\"id\":\"bad\",\"after\":[\"nowhere\"]," ONE_STEP "}\n");
	proc_result r = RUN_STDIN(input, "submit", "--jsonl", "--in-flight", "16");
	CHECK_INT(r.status, ==, 4);
	CHECK_HAS(r.err, "<stdin>:41:");
	CHECK_HAS(r.err, "no such task \"nowhere\"");
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 40);
	CHECK_INT(fixture_count(c, LR_K_TURN), ==, 39);
	lr_client_close(c);
}

TEST(submit_in_sets_not_before_from_now)
{
	lr_client *c = fixture_client("cli_submit_in");
	cli_use_client(c);
	int64_t before = lr_wall_ms();
	proc_result r = RUN_STDIN("{\"id\":\"later\"," ONE_STEP "}", "submit", "--in", "1h");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	lr_task_status s;
	lr_err err = { 0 };
	CHECK_OK(lr_task_get(c, "later", &s, &err), &err);
	CHECK_OK(lr_task_waits(c, &s, 1, &err), &err);
	CHECK(s.waiting != NULL);
	int64_t at;
	CHECK_INT(lr_rfc3339_parse(s.waiting + strlen("not before "), &at), ==, 0);
	CHECK(at >= before + 3600 * 1000 && at <= lr_wall_ms() + 3600 * 1000);
	lr_task_status_clear(&s);
	check_exit(RUN_STDIN("{\"id\":\"x\"," ONE_STEP "}", "submit", "--in", "soon"), 2, "--in");
	check_exit(RUN_STDIN("{\"id\":\"x\",\"not_before\":\"2030-01-01T00:00:00Z\"," ONE_STEP "}",
	                     "submit", "--in", "5m"),
	           2, "give one");
	lr_client_close(c);
}

TEST(retry_exits_6_for_a_pending_task_4_for_none_and_2_for_a_bad_step)
{
	lr_client *c = fixture_client("cli_retry");
	cli_use_client(c);
	check_exit(RUN_STDIN("{\"id\":\"a\"," ONE_STEP "}", "submit"), 0, NULL);
	check_exit(RUN("retry", "a"), 6, "the task is pending, not failed or cancelled");
	check_exit(RUN("retry", "nope"), 4, "no such task");
	check_exit(RUN("cancel", "a"), 0, NULL);
	check_exit(RUN("retry", "a", "--from-step", "zzz"), 2, "no step named \"zzz\"");
	check_exit(RUN("retry", "a", "--from-step", "1"), 2, "later steps never ran");
	proc_result r = RUN("retry", "a", "--from-step", "one");
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "a is pending again\n");
	proc_result_free(&r);
	r = RUN("status", "a");
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.out, "pending");
	CHECK_HAS(r.out, "earlier: cancelled at step 0");
	CHECK_HAS(r.out, "cancelled while pending");
	proc_result_free(&r);
	r = RUN("status", "a", "--json");
	CHECK_HAS(r.out, "\"history\": [");
	CHECK_HAS(r.out, "\"error\": null"); /* no record left unreadable */
	proc_result_free(&r);
	lr_client_close(c);
}

TEST_LIST(
	TEST_CASE(invalid_turn_fields_exit_2_naming_the_field_and_store_nothing),
	TEST_CASE(submit_after_an_unknown_task_exits_4),
	TEST_CASE(bulk_submit_may_name_tasks_earlier_in_the_same_input),
	TEST_CASE(submit_in_sets_not_before_from_now),
	TEST_CASE(retry_exits_6_for_a_pending_task_4_for_none_and_2_for_a_bad_step),
);
TEST_MAIN(cli_setup, cli_teardown)
