/* test_errors.c - the error codes the embedding API reports, against a real
 * etcd: the real code whether or not the caller passes an lr_err, the
 * documented code of each limit, and the misuses it refuses (NULL
 * arguments). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "etcd_harness.h"
#include "hosted.h"
#include "leaserun.h"
#include "test.h"

static lr_err err;

TEST(client_calls_without_an_lr_err_return_the_real_code)
{
	lr_client *c = hosted_client("/errors-null/");
	lr_task_status st;
	memset(&st, 0, sizeof(st));
	CHECK_INT(lr_task_get(c, "no-such-task", &st, NULL), ==, LR_ENOTFOUND);
	char id[LR_ID_SIZE];
	CHECK_INT(lr_submit_text(c, "{", 1, NULL, id, NULL, NULL), ==, LR_EINVAL);
	CHECK_INT(lr_cancel(c, "no-such-task", NULL, NULL), ==, LR_ENOTFOUND);
	CHECK_INT(lr_submit_text(c, "{\"id\":\"a b\",\"steps\":[]}", 22, NULL, id, NULL,
	                         NULL), ==, LR_EINVAL);
	lr_client_close(c);
}

static lr_step_result never_runs(lr_step *s, void *user)
{
	return LR_STEP_OK;
}

/* A runner started against an etcd that has gone reports why, with or
 * without an lr_err to fill. */
TEST(a_runner_without_an_lr_err_reports_an_unreachable_etcd)
{
	etcdh_opts eo = { .members = 1 };
	etcdh_cluster *gone;
	CHECK(etcdh_start(&eo, &gone) == 0);
	lr_client_opts co = { .endpoints = etcdh_endpoints(gone), .prefix = "/errors-down/",
	                      .call_timeout_s = 1 };
	lr_client *c;
	CHECK_OK(lr_client_open(&co, &c, &err), &err);
	CHECK(etcdh_stop(gone, 0) == 0);

	int codes[2];
	for (int with_err = 0; with_err < 2; with_err++) {
		lr_runner_opts o = { .name = "lonely", .ttl_s = 2, .log = hosted_quiet };
		lr_runner *r;
		CHECK_OK(lr_runner_new(c, &o, &r, &err), &err);
		CHECK_OK(lr_runner_handle(r, NULL, never_runs, NULL), &err);
		lr_err e = { 0 };
		codes[with_err] = lr_runner_run(r, with_err ? &e : NULL);
		if (with_err) {
			CHECK_INT(e.code, ==, codes[with_err]);
			CHECK_HAS(e.msg, etcdh_endpoint(gone, 0));
		}
		lr_runner_free(r);
	}
	printf("# without an lr_err: %s; with one: %s\n", lr_strerror(codes[0]),
	       lr_strerror(codes[1]));
	CHECK(codes[0] == LR_EUNAVAILABLE || codes[0] == LR_ETIMEDOUT);
	CHECK_INT(codes[0], ==, codes[1]);
	lr_client_close(c);
	etcdh_destroy(gone);
}

static int big_checkpoint_rc, big_checkpoint_code;

/* Checkpoints a state of 600 KiB, then returns a small one. */
static lr_step_result big_state(lr_step *s, void *user)
{
	size_t n = 600 * 1024;
	char *text = malloc(n + 1);
	memset(text, 'x', n);
	text[n] = '\0';
	lr_step_set_state(s, json_pack("{s:s}", "blob", text));
	free(text);
	lr_err e = { 0 };
	big_checkpoint_rc = lr_step_checkpoint(s, &e);
	big_checkpoint_code = e.code; /* checked by the test's own thread */
	lr_step_set_state(s, json_object());
	return LR_STEP_OK;
}

TEST(a_checkpoint_over_512_kib_is_too_large)
{
	lr_client *c = hosted_client("/errors-large/");
	struct hosted h;
	hosted_new(&h, c, "large", 1);
	CHECK_OK(lr_runner_handle(h.r, NULL, big_state, NULL), &err);
	hosted_start(&h);
	hosted_submit(c, "{\"id\":\"big\",\"steps\":[{\"name\":\"a\",\"run\":\"-\"}]}");
	CHECK_INT(hosted_wait_done(c, "big", 10000), ==, LR_TASK_SUCCEEDED);
	hosted_end(&h);
	CHECK_INT(big_checkpoint_rc, ==, LR_ETOOLARGE);
	CHECK_INT(big_checkpoint_code, ==, LR_ETOOLARGE);
	lr_client_close(c);
}

/* Timeouts that would not fit the clocks' milliseconds are refused. */
TEST(timeouts_beyond_a_day_or_not_numbers_are_refused)
{
	const double bad[] = { -1, 0.0001, 86401, 1e300, 1.0 / 0.0, 0.0 / 0.0 };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		for (int which = 0; which < 2; which++) {
			lr_client_opts o = { .endpoints = "127.0.0.1:1" };
			if (which == 0)
				o.dial_timeout_s = bad[i];
			else
				o.call_timeout_s = bad[i];
			lr_client *c = NULL;
			CHECK_INT(lr_client_open(&o, &c, &err), ==, LR_EINVAL);
			CHECK(c == NULL);
			CHECK_HAS(err.msg, "expected seconds from 0.001 to 86400");
		}
}

/* ---- misuse --------------------------------------------------------------- */

/* Every required pointer: LR_EINVAL naming it, never a crash. */
TEST(null_handles_and_out_pointers_are_refused_with_their_name)
{
	lr_client *c = hosted_client("/errors-nulls/");
	lr_client *no_client = NULL;
	lr_err e;
	void *doc;
	size_t n;

	CHECK_INT(lr_client_open(NULL, NULL, &e), ==, LR_EINVAL);
	CHECK_HAS(e.msg, "lr_client_open: out must not be NULL");
	char id[LR_ID_SIZE];
	const char *spec = "{\"steps\":[{\"name\":\"a\",\"run\":\"-\"}]}";
	CHECK_INT(lr_submit_text(no_client, spec, strlen(spec), NULL, id, NULL, &e), ==,
	          LR_EINVAL);
	CHECK_HAS(e.msg, "lr_submit_text: c must not be NULL");
	CHECK_INT(lr_submit_text(c, NULL, 3, NULL, id, NULL, &e), ==, LR_EINVAL);
	CHECK_HAS(e.msg, "text must not be NULL");
	lr_task_status st;
	CHECK_INT(lr_task_get(no_client, "t", &st, &e), ==, LR_EINVAL);
	CHECK_INT(lr_task_get(c, "t", NULL, &e), ==, LR_EINVAL);
	CHECK_HAS(e.msg, "lr_task_get: out must not be NULL");
	lr_task_status *list;
	CHECK_INT(lr_task_list(c, -1, 0, NULL, &n, &e), ==, LR_EINVAL);
	CHECK_HAS(e.msg, "lr_task_list: out must not be NULL");
	CHECK_INT(lr_task_list(c, -1, 0, &list, NULL, &e), ==, LR_EINVAL);
	CHECK_HAS(e.msg, "lr_task_list: n must not be NULL");
	lr_runner_info *runners;
	CHECK_INT(lr_runners_list(c, NULL, &n, &e), ==, LR_EINVAL);
	CHECK_INT(lr_runners_list(c, &runners, NULL, &e), ==, LR_EINVAL);
	CHECK_HAS(e.msg, "lr_runners_list: n must not be NULL");
	CHECK_INT(lr_locks_read(c, NULL, &e), ==, LR_EINVAL);
	CHECK_HAS(e.msg, "lr_locks_read: doc must not be NULL");
	CHECK_INT(lr_locks_read(no_client, &doc, NULL), ==, LR_EINVAL);
	CHECK_INT(lr_update(c, "x", NULL, NULL, &e), ==, LR_EINVAL);
	CHECK_HAS(e.msg, "lr_update: fn must not be NULL");
	CHECK_INT(lr_shared_get(c, "x", NULL, &e), ==, LR_EINVAL);
	CHECK_INT(lr_cancel(no_client, "t", NULL, &e), ==, LR_EINVAL);
	CHECK_INT(lr_retry(c, NULL, NULL, NULL, &e), ==, LR_EINVAL);
	CHECK_HAS(e.msg, "lr_retry: id must not be NULL");

	CHECK_INT(lr_hold_check(NULL, &e), ==, LR_EINVAL);
	CHECK_HAS(e.msg, "lr_hold_check: o must not be NULL");
	lr_hold *hold;
	CHECK_INT(lr_hold_acquire(c, NULL, &hold, &e), ==, LR_EINVAL);
	CHECK_HAS(e.msg, "lr_hold_acquire: o must not be NULL");

	lr_runner *r;
	CHECK_INT(lr_runner_new(no_client, NULL, &r, &e), ==, LR_EINVAL);
	CHECK_HAS(e.msg, "lr_runner_new: c must not be NULL");
	CHECK_INT(lr_runner_new(c, NULL, NULL, &e), ==, LR_EINVAL);
	CHECK_HAS(e.msg, "lr_runner_new: out must not be NULL");
	lr_runner_free(NULL);

	/* The id is optional by nature: the caller may not need it. */
	CHECK_OK(lr_submit_text(c, spec, strlen(spec), "optional-id-out", NULL, NULL, &e), &e);
	lr_client_close(c);
}

TEST_LIST(
	TEST_CASE(timeouts_beyond_a_day_or_not_numbers_are_refused),
	TEST_CASE(client_calls_without_an_lr_err_return_the_real_code),
	TEST_CASE(a_runner_without_an_lr_err_reports_an_unreachable_etcd),
	TEST_CASE(a_checkpoint_over_512_kib_is_too_large),
	TEST_CASE(null_handles_and_out_pointers_are_refused_with_their_name),
);
TEST_MAIN(hosted_setup, hosted_teardown)
