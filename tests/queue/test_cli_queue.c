/* test_cli_queue.c - the queue features as a user meets them on the command
 * line: the built binary (LEASERUN_BIN) against a real etcd, exit statuses,
 * messages, and that rejected input stores nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/clock.h"
#include "cli_run.h"
#include "test.h"

#define ONE_STEP "\"steps\":[{\"name\":\"one\",\"run\":\"true\"},{\"name\":\"two\",\"run\":\"true\"}]"
/* Task f: step one passes, step two fails on its only attempt. */
#define FAILS_AT_TWO "{\"id\":\"f\",\"max_attempts\":1,\"steps\":[{\"name\":\"one\"," \
                     "\"run\":\"true\"},{\"name\":\"two\",\"run\":\"exit 3\"}]}"

/* r exited with status and said err_has on stderr (NULL: anything). */
static void check_exit(proc_result r, int status, const char *err_has)
{
	CHECK_INT(r.status, ==, status);
	if (err_has != NULL)
		CHECK_HAS(r.err, err_has);
	proc_result_free(&r);
}

/* r exited 0 and printed out_has on stdout. */
static void check_out(proc_result r, const char *out_has)
{
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.out, out_has);
	proc_result_free(&r);
}

TEST(invalid_queue_fields_exit_2_naming_the_field_and_store_nothing)
{
	lr_client *c = fixture_client("cli_queue_bad");
	cli_use_client(c);
	static const char *const bad[][2] = {
		{ "{\"priority\":500," ONE_STEP "}", "priority" },
		{ "{\"not_before\":\"soon\"," ONE_STEP "}", "not_before" },
		{ "{\"after\":[\"a\",\"a\"]," ONE_STEP "}", "after[1]" },
		{ "{\"after\":\"a\"," ONE_STEP "}", "after" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		check_exit(RUN_STDIN(bad[i][0], "submit"), 2, bad[i][1]);
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 0);
	CHECK_INT(fixture_count(c, LR_K_QUEUE), ==, 0);
	check_exit(RUN_STDIN("{\"id\":\"x\"," ONE_STEP "}", "submit", "--in", "soon"), 2, "--in");
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 0);
	lr_client_close(c);
}

TEST(submit_after_an_unknown_task_exits_4_and_status_says_what_one_waits_for)
{
	lr_client *c = fixture_client("cli_after_unknown");
	cli_use_client(c);
	check_exit(RUN_STDIN("{\"id\":\"d\",\"after\":[\"ghost\"]," ONE_STEP "}", "submit"), 4,
	           "ghost");
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 0);
	CHECK_INT(fixture_count(c, LR_K_QUEUE), ==, 0);
	check_exit(RUN_STDIN("{\"id\":\"a\"," ONE_STEP "}", "submit"), 0, NULL);
	check_out(RUN_STDIN("{\"id\":\"d\",\"after\":[\"a\"]," ONE_STEP "}", "submit"), "d\n");
	check_out(RUN("status", "d"), "after a, which is pending");
	check_exit(RUN("cancel", "a"), 0, NULL);
	check_out(RUN("status", "d"), "after a, which ended cancelled: it will end failed");
	check_exit(RUN("purge", "--older-than", "0s"), 0, NULL);
	check_out(RUN("status", "d"), "after a, which no longer exists: it will end failed");
	/* Another a, submitted after d: not the one d named (a claim of d
	 * ends it failed, as for one purged). */
	check_exit(RUN_STDIN("{\"id\":\"a\",\"after\":[\"d\"]," ONE_STEP "}", "submit"), 0, NULL);
	check_out(RUN("status", "d"), "after a, which no longer exists (submitted again after "
	                              "this task): it will end failed");
	lr_client_close(c);
}

/* 64 dependencies, the most a spec may name, are three reads each: more
 * than etcd takes in one txn. All but the last have succeeded. */
TEST(status_says_what_a_task_of_64_dependencies_waits_for)
{
	lr_client *c = fixture_client("cli_after_64");
	cli_use_client(c);
	char lines[64 * 120] = "", deps[64 * 8] = "", spec[64 * 8 + 200];
	for (int i = 0; i < 63; i++)
		snprintf(lines + strlen(lines), sizeof(lines) - strlen(lines),
		         "{\"id\":\"p%d\"," ONE_STEP "}\n", i);
	check_exit(RUN_STDIN(lines, "submit", "--jsonl"), 0, NULL);
	check_exit(RUN("worker", "--exit-when-idle", "--ttl", "2", "--concurrency", "8"), 0,
	           NULL);
	check_exit(RUN_STDIN("{\"id\":\"p63\"," ONE_STEP "}", "submit"), 0, NULL);
	for (int i = 0; i < 64; i++)
		snprintf(deps + strlen(deps), sizeof(deps) - strlen(deps), "%s\"p%d\"",
		         i > 0 ? "," : "", i);
	snprintf(spec, sizeof(spec), "{\"id\":\"d\",\"after\":[%s]," ONE_STEP "}", deps);
	check_exit(RUN_STDIN(spec, "submit"), 0, NULL);
	check_out(RUN("status", "d"), "after p63, which is pending");
	lr_client_close(c);
}

/* An etcd run with a low --max-txn-ops (16): the reads of a task's 12
 * dependencies (three each for status, two each for its lock request)
 * are split into txns it takes, instead of failing with "too many
 * operations in txn request". All but the last have succeeded. */
TEST(status_and_locks_read_many_dependencies_from_an_etcd_with_a_low_max_txn_ops)
{
	static const char *const low[] = { "--max-txn-ops=16", NULL };
	etcdh_opts opts = { .members = 1, .extra_args = low };
	etcdh_cluster *small = NULL;
	CHECK(etcdh_start(&opts, &small) == 0);
	snprintf(cli_env_endpoints, sizeof(cli_env_endpoints), "%s", etcdh_endpoint(small, 0));
	snprintf(cli_env_prefix, sizeof(cli_env_prefix), "/leaserun/");
	char lines[12 * 120] = "", deps[12 * 8] = "", spec[12 * 8 + 200];
	for (int i = 0; i < 11; i++)
		snprintf(lines + strlen(lines), sizeof(lines) - strlen(lines),
		         "{\"id\":\"p%d\"," ONE_STEP "}\n", i);
	check_exit(RUN_STDIN(lines, "submit", "--jsonl"), 0, NULL);
	check_exit(RUN("worker", "--exit-when-idle", "--ttl", "2", "--concurrency", "4"), 0,
	           NULL);
	check_exit(RUN_STDIN("{\"id\":\"p11\"," ONE_STEP "}", "submit"), 0, NULL);
	for (int i = 0; i < 12; i++)
		snprintf(deps + strlen(deps), sizeof(deps) - strlen(deps), "%s\"p%d\"",
		         i > 0 ? "," : "", i);
	snprintf(spec, sizeof(spec), "{\"id\":\"d\",\"after\":[%s],\"locks\":{\"x\":\"X\"},"
	         ONE_STEP "}", deps);
	check_exit(RUN_STDIN(spec, "submit"), 0, NULL);
	check_out(RUN("status", "d"), "after p11, which is pending");
	check_out(RUN("status", "--state", "pending"), "after p11, which is pending");
	check_out(RUN("locks"), "after p11, which has not finished");
	etcdh_destroy(small);
}

/* A chain in one input: each spec names the one before it, which a bulk
 * submit must have created first, however many creates are in flight. */
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
	CHECK_HAS(r.err, "nowhere");
	CHECK(strstr(r.err, "<stdin>:2:") == NULL); /* no link of the chain refused */
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, LR_K_TASKS), ==, 40);
	CHECK_INT(fixture_count(c, LR_K_QUEUE), ==, 39);
	lr_client_close(c);
}

/* Few pending tasks: their queue records are read one by one; many: in
 * one walk. Both say the same. */
TEST(status_says_what_delayed_tasks_wait_for_in_short_and_long_lists)
{
	lr_client *c = fixture_client("cli_waits");
	cli_use_client(c);
	char input[4096];
	size_t n = 0;
	for (int i = 0; i < 20; i++)
		n += (size_t)snprintf(input + n, sizeof(input) - n,
		                      "{\"id\":\"w%02d\"," ONE_STEP "}\n", i);
	check_exit(RUN_STDIN(input, "submit", "--jsonl", "--in", "1h"), 0, NULL);
	check_out(RUN("status", "w07"), "not before ");
	proc_result r = RUN("status", "--json");
	CHECK_INT(r.status, ==, 0);
	json_t *all = json_loads(r.out, 0, NULL);
	CHECK_INT(json_array_size(all), ==, 20);
	for (size_t i = 0; i < 20; i++) {
		const char *w = json_string_value(json_object_get(json_array_get(all, i), "waiting"));
		CHECK(w != NULL);
		CHECK_HAS(w, "not before ");
	}
	json_decref(all);
	proc_result_free(&r);
	lr_client_close(c);
}

TEST(retry_refuses_what_it_cannot_retry_and_status_shows_the_history)
{
	lr_client *c = fixture_client("cli_retry");
	cli_use_client(c);
	check_exit(RUN_STDIN("{\"id\":\"a\"," ONE_STEP "}", "submit"), 0, NULL);
	check_exit(RUN("retry", "a"), 2, "pending");
	check_exit(RUN("retry", "nope"), 4, "no such task");
	/* A task whose stored spec is invalid (written by something else)
	 * ended failed: the refusal says it is the stored spec. */
	fixture_put(c, LR_K_TASKS, "bad", "{\"id\":\"bad\",\"steps\":[]}", 0);
	fixture_put(c, LR_K_DONE, "bad", "{\"status\":\"failed\",\"attempts\":0,\"error\":"
	            "\"invalid spec\",\"state\":{},\"finished_at\":\"2026-11-24T00:00:00Z\"}", 0);
	check_exit(RUN("retry", "bad"), 2, "retry bad: its stored spec is invalid, so it cannot "
	                                   "run again: steps");
	check_exit(RUN("cancel", "a"), 0, NULL);
	check_exit(RUN("retry", "a", "--from-step", "zzz"), 2, "zzz");
	/* An index is digits alone: strtoll would take these as 1. */
	check_exit(RUN("retry", "a", "--from-step", "+1"), 2, "--from-step +1");
	check_exit(RUN("retry", "a", "--from-step", " 1"), 2, "--from-step  1");
	check_exit(RUN("retry", "a"), 0, NULL);
	check_out(RUN("status", "a"), "cancelled"); /* its earlier outcome */
	proc_result r = RUN("status", "a", "--json");
	CHECK_HAS(r.out, "\"state\": \"pending\"");
	CHECK_HAS(r.out, "\"history\": [");
	CHECK_HAS(r.out, "\"error\": null"); /* no record left unreadable */
	proc_result_free(&r);
	check_exit(RUN("retry", "a"), 2, "pending");
	lr_client_close(c);
}

/* A retry is not a runner: a task pending again shows the last runner
 * that ran it, or none when none has, never "retry". */
TEST(retry_names_no_runner_of_its_own)
{
	lr_client *c = fixture_client("cli_retry_runner");
	cli_use_client(c);
	check_exit(RUN_STDIN("{\"id\":\"p\"," ONE_STEP "}", "submit"), 0, NULL);
	check_exit(RUN("cancel", "p"), 0, NULL);
	check_exit(RUN("retry", "p"), 0, NULL);
	proc_result r = RUN("status", "p");
	CHECK_INT(r.status, ==, 0);
	CHECK(strstr(r.out, "retry") == NULL);
	proc_result_free(&r);
	r = RUN("status", "p", "--json");
	CHECK_HAS(r.out, "\"state\": \"pending\"");
	CHECK_HAS(r.out, "\n  \"runner\": null");
	proc_result_free(&r);
	/* Resumed past a step no runner ran: still no runner. */
	check_exit(RUN("cancel", "p"), 0, NULL);
	check_exit(RUN("retry", "p", "--from-step", "1"), 0, NULL);
	r = RUN("status", "p", "--json");
	CHECK_HAS(r.out, "\"next_step\": 1");
	CHECK_HAS(r.out, "\n  \"runner\": null");
	proc_result_free(&r);
	/* A task that ran keeps the name of the runner that ran it last. */
	check_exit(RUN_STDIN(FAILS_AT_TWO, "submit"), 0, NULL);
	check_exit(RUN("worker", "--name", "box-1", "--exit-when-idle", "--ttl", "2"), 0, NULL);
	check_exit(RUN("retry", "f"), 0, NULL);
	r = RUN("status", "f", "--json");
	CHECK_HAS(r.out, "\"state\": \"pending\"");
	CHECK_HAS(r.out, "\n  \"runner\": \"box-1\"");
	proc_result_free(&r);
	lr_client_close(c);
}

/* Where the task resumes, as status shows steps: 1-based with the count
 * and the name, whatever --from-step (a 0-based index or a name) said. */
TEST(retry_says_where_the_task_resumes_as_status_counts_steps)
{
	lr_client *c = fixture_client("cli_retry_step");
	cli_use_client(c);
	check_exit(RUN_STDIN("{\"id\":\"p\"," ONE_STEP "}", "submit"), 0, NULL);
	check_exit(RUN("cancel", "p"), 0, NULL);
	check_out(RUN("retry", "p"), "p pending again from step 1/2 one\n");
	check_out(RUN("status", "p"), "1/2 one");
	check_exit(RUN("cancel", "p"), 0, NULL);
	check_out(RUN("retry", "p", "--from-step", "1"), "p pending again from step 2/2 two\n");
	check_exit(RUN("cancel", "p"), 0, NULL);
	check_out(RUN("retry", "p", "--from-step", "one"), "p pending again from step 1/2 one\n");
	check_exit(RUN_STDIN(FAILS_AT_TWO, "submit"), 0, NULL);
	check_exit(RUN("worker", "--exit-when-idle", "--ttl", "2"), 0, NULL);
	check_out(RUN("retry", "f"), "f pending again from step 2/2 two\n");
	lr_client_close(c);
}

/* Digits that are an index and the name of another step could mean
 * either: refused (exit 2) naming both, nothing stored. Digits that are
 * one of the two, or both for the same step, still resume there. */
TEST(retry_refuses_a_from_step_that_is_an_index_and_another_steps_name)
{
	lr_client *c = fixture_client("cli_retry_ambiguous");
	cli_use_client(c);
	check_exit(RUN_STDIN("{\"id\":\"n\",\"steps\":[{\"name\":\"1\",\"run\":\"true\"},"
	                     "{\"name\":\"0\",\"run\":\"true\"},{\"name\":\"x\",\"run\":"
	                     "\"true\"},{\"name\":\"3\",\"run\":\"true\"}]}",
	                     "submit"),
	           0, NULL);
	check_exit(RUN("cancel", "n"), 0, NULL);
	check_exit(RUN("retry", "n", "--from-step", "1"), 2,
	           "--from-step 1: ambiguous: step index 1 (\"0\") or the step named \"1\" "
	           "(index 0)");
	check_exit(RUN("retry", "n", "--from-step", "0"), 2,
	           "--from-step 0: ambiguous: step index 0 (\"1\") or the step named \"0\" "
	           "(index 1)");
	char *done = fixture_get(c, LR_K_DONE, "n");
	CHECK(done != NULL); /* still cancelled */
	free(done);
	CHECK_INT(fixture_count(c, LR_K_HISTORY), ==, 0);
	check_out(RUN("retry", "n", "--from-step", "3"), "n pending again from step 4/4 3\n");
	check_exit(RUN("cancel", "n"), 0, NULL);
	check_out(RUN("retry", "n", "--from-step", "2"), "n pending again from step 3/4 x\n");
	check_exit(RUN("cancel", "n"), 0, NULL);
	check_out(RUN("retry", "n", "--from-step", "x"), "n pending again from step 3/4 x\n");
	lr_client_close(c);
}

TEST_LIST(
	TEST_CASE(invalid_queue_fields_exit_2_naming_the_field_and_store_nothing),
	TEST_CASE(submit_after_an_unknown_task_exits_4_and_status_says_what_one_waits_for),
	TEST_CASE(status_says_what_a_task_of_64_dependencies_waits_for),
	TEST_CASE(status_and_locks_read_many_dependencies_from_an_etcd_with_a_low_max_txn_ops),
	TEST_CASE(bulk_submit_may_name_tasks_earlier_in_the_same_input),
	TEST_CASE(status_says_what_delayed_tasks_wait_for_in_short_and_long_lists),
	TEST_CASE(retry_refuses_what_it_cannot_retry_and_status_shows_the_history),
	TEST_CASE(retry_names_no_runner_of_its_own),
	TEST_CASE(retry_says_where_the_task_resumes_as_status_counts_steps),
	TEST_CASE(retry_refuses_a_from_step_that_is_an_index_and_another_steps_name),
);
TEST_MAIN(cli_setup, cli_teardown)
