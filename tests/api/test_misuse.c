/* test_misuse.c - what the embedding API does when an embedder gets it
 * wrong, against a real etcd: out-of-range options, step handlers that
 * misbehave, calls without an lr_err when etcd stalls. Each gets the
 * documented code and a message naming what is wrong, never a crash, a
 * hang or something invalid stored. */
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "etcd_harness.h"
#include "hosted.h"
#include "leaserun.h"
#include "test.h"

static lr_err err;

/* ---- step handlers ---------------------------------------------------------- */

static atomic_int garbage_runs;

static lr_step_result returns_garbage(lr_step *s, void *user)
{
	atomic_fetch_add(&garbage_runs, 1);
	return (lr_step_result)7;
}

/* A handler that returns no lr_step_result fails its task at once, with
 * an error that says what it returned, and is counted as the failure it
 * is treated as. */
TEST(a_handler_returning_no_step_result_fails_the_task_naming_the_value)
{
	lr_client *c = hosted_client("/misuse-garbage/");
	atomic_store(&garbage_runs, 0);
	struct hosted h;
	hosted_new(&h, c, "garbage", 1);
	CHECK_OK(lr_runner_handle(h.r, NULL, returns_garbage, NULL), &err);
	hosted_start(&h);
	hosted_submit(c, "{\"id\":\"g\",\"max_attempts\":3,\"retry_backoff_ms\":1,"
	                 "\"steps\":[{\"name\":\"a\",\"run\":\"-\"}]}");
	CHECK_INT(hosted_wait_done(c, "g", 10000), ==, LR_TASK_FAILED);
	hosted_stop(&h);
	lr_runner_stats st;
	lr_runner_get_stats(h.r, &st);
	lr_runner_free(h.r);
	CHECK_INT(atomic_load(&garbage_runs), ==, 1);
	CHECK_INT((int64_t)st.steps_fail, ==, 1);
	CHECK_INT((int64_t)st.steps_retry, ==, 0);
	lr_task_status ts;
	CHECK_OK(lr_task_get(c, "g", &ts, &err), &err);
	CHECK(ts.error != NULL);
	CHECK_HAS(ts.error, "returned 7");
	lr_task_status_clear(&ts);
	lr_client_close(c);
}

static atomic_int long_sleep_result = -1;

/* Sleeps "for ever": until the task is cancelled. */
static lr_step_result sleeps_for_ever(lr_step *s, void *user)
{
	atomic_store(&long_sleep_result, lr_step_sleep(s, INT64_MAX));
	return LR_STEP_OK;
}

/* A sleep too long for the clock is a sleep until the step must stop, not
 * none at all. */
TEST(a_step_sleep_too_long_for_the_clock_lasts_until_the_step_is_stopped)
{
	lr_client *c = hosted_client("/misuse-sleep/");
	atomic_store(&long_sleep_result, -1);
	struct hosted h;
	hosted_new(&h, c, "sleeper", 1);
	CHECK_OK(lr_runner_handle(h.r, NULL, sleeps_for_ever, NULL), &err);
	hosted_start(&h);
	hosted_submit(c, "{\"id\":\"zz\",\"steps\":[{\"name\":\"a\",\"run\":\"-\"}]}");
	lr_task_status ts;
	for (int64_t end = lr_mono_ms() + 10000;;) {
		CHECK_OK(lr_task_get(c, "zz", &ts, &err), &err);
		lr_task_state s = ts.state;
		lr_task_status_clear(&ts);
		if (s != LR_TASK_PENDING)
			break;
		CHECK(lr_mono_ms() < end);
		lr_sleep_ms(10);
	}
	lr_sleep_ms(200);
	CHECK_OK(lr_cancel(c, "zz", NULL, &err), &err);
	CHECK_INT(hosted_wait_done(c, "zz", 10000), ==, LR_TASK_CANCELLED);
	hosted_end(&h);
	CHECK_INT(atomic_load(&long_sleep_result), ==, 1);
	lr_client_close(c);
}

/* "what: rc message" appended to notes (of NOTES_SIZE). */
#define NOTES_SIZE 2048
static void note_in(char *notes, const char *what, int rc, const lr_err *e)
{
	size_t used = strlen(notes);
	snprintf(notes + used, NOTES_SIZE - used, "%s: %d %s\n", what, rc, e->msg);
}

static char bad_calls[NOTES_SIZE];

static void note(const char *what, int rc, const lr_err *e)
{
	note_in(bad_calls, what, rc, e);
}

/* Calls the step's writes with what they must refuse, noting each. */
static lr_step_result bad_writes(lr_step *s, void *user)
{
	lr_err e;
	json_t *v = json_integer(1);
	const char *names[] = { "fine" };
	const void *values[] = { v };
	const char *no_names[] = { NULL };
	const void *no_values[] = { NULL };
	memset(&e, 0, sizeof(e));
	note("checkpoint(NULL)", lr_step_checkpoint(NULL, &e), &e);
	memset(&e, 0, sizeof(e));
	note("put(NULL)", lr_step_shared_put(NULL, "fine", v, &e), &e);
	memset(&e, 0, sizeof(e));
	note("put_many(names NULL)", lr_step_shared_put_many(s, 1, NULL, values, &e), &e);
	memset(&e, 0, sizeof(e));
	note("put_many(values NULL)", lr_step_shared_put_many(s, 1, names, NULL, &e), &e);
	memset(&e, 0, sizeof(e));
	note("put_many(names[0] NULL)", lr_step_shared_put_many(s, 1, no_names, values, &e), &e);
	memset(&e, 0, sizeof(e));
	note("put_many(values[0] NULL)", lr_step_shared_put_many(s, 1, names, no_values, &e),
	     &e);
	memset(&e, 0, sizeof(e));
	json_t *bad = json_stringn_nocheck("\xff\xfe", 2);
	note("put(invalid utf-8)", lr_step_shared_put(s, "fine", bad, &e), &e);
	json_decref(bad);
	json_decref(v);
	return LR_STEP_OK;
}

/* Every write a step makes refuses a NULL step, NULL names or values and
 * a value that is not JSON with LR_EINVAL naming what is wrong. */
TEST(step_writes_refuse_null_arguments_and_values_that_are_not_json)
{
	lr_client *c = hosted_client("/misuse-writes/");
	bad_calls[0] = '\0';
	CHECK_INT(hosted_run_one(c, "writer", bad_writes, NULL, "w"), ==, LR_TASK_SUCCEEDED);
	printf("%s", bad_calls);
	CHECK_HAS(bad_calls, "checkpoint(NULL): -1 lr_step_checkpoint: s must not be NULL");
	CHECK_HAS(bad_calls, "put(NULL): -1 lr_step_shared_put: s must not be NULL");
	CHECK_HAS(bad_calls, "put_many(names NULL): -1 lr_step_shared_put_many: names must "
	                     "not be NULL");
	CHECK_HAS(bad_calls, "put_many(values NULL): -1 lr_step_shared_put_many: values must "
	                     "not be NULL");
	CHECK_HAS(bad_calls, "put_many(names[0] NULL): -1");
	CHECK_HAS(bad_calls, "put_many(values[0] NULL): -1");
	CHECK_HAS(bad_calls, "put(invalid utf-8): -1");
	void *got = NULL;
	CHECK_OK(lr_shared_get(c, "fine", &got, &err), &err);
	CHECK(got == NULL);
	lr_client_close(c);
}

/* ---- shared values that could not be read back ------------------------------ */

static json_t *nested(int depth)
{
	json_t *v = json_integer(0);
	for (int i = 0; i < depth; i++)
		v = json_pack("[o]", v);
	return v;
}

static int give_one(void *user, const void *current, void **next)
{
	*next = json_integer(1);
	return 0;
}

static int give_deep(void *user, const void *current, void **next)
{
	*next = nested(5000);
	return 0;
}

static int give_bad_utf8(void *user, const void *current, void **next)
{
	*next = json_pack("{s:o}", "text", json_stringn_nocheck("\xc3", 1));
	return 0;
}

/* A value nested deeper than JSON is read back (or holding a string that
 * is not UTF-8) is refused as invalid, and nothing is stored: the key
 * stays readable. */
TEST(shared_values_too_deep_to_read_back_or_not_utf8_are_refused)
{
	lr_client *c = hosted_client("/misuse-deep/");
	CHECK_INT(lr_update(c, "deep", give_deep, NULL, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "nested");
	CHECK_INT(lr_update(c, "utf8", give_bad_utf8, NULL, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "cannot be encoded");
	void *got = NULL;
	CHECK_OK(lr_shared_get(c, "deep", &got, &err), &err);
	CHECK(got == NULL);
	lr_client_close(c);
}

/* ---- options out of range ----------------------------------------------------- */

static char last_error[512];

static void keep_error(void *user, const lr_log_record *rec)
{
	if (rec->level == LR_LOG_ERROR)
		snprintf(last_error, sizeof(last_error), "%s", rec->msg);
}

TEST(runner_options_out_of_range_are_refused_naming_the_field)
{
	lr_client *c = hosted_client("/misuse-opts/");
	struct {
		lr_runner_opts o;
		const char *msg;
	} bad[] = {
		{ { .grace_s = -2 }, "grace" },
		{ { .grace_s = INT32_MIN }, "grace" },
		{ { .log_level = (lr_log_level)9 }, "log_level" },
		{ { .log_level = (lr_log_level)-1 }, "log_level" },
		{ { .ttl_s = -1 }, "ttl" },
		{ { .concurrency = -1 }, "concurrency" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		lr_runner *r = NULL;
		bad[i].o.log = hosted_quiet;
		int rc = lr_runner_new(c, &bad[i].o, &r, &err);
		if (rc != LR_EINVAL) {
			lr_runner_free(r);
			TEST_FAIL("case %zu: %d instead of LR_EINVAL", i, rc);
		}
		CHECK(r == NULL);
		CHECK_HAS(err.msg, bad[i].msg);
	}
	/* A handler for an empty step name would never run: no step has one. */
	lr_runner_opts o = { .name = "opts", .log = keep_error };
	lr_runner *r;
	CHECK_OK(lr_runner_new(c, &o, &r, &err), &err);
	last_error[0] = '\0';
	CHECK_INT(lr_runner_handle(r, "", returns_garbage, NULL), ==, LR_EINVAL);
	CHECK_HAS(last_error, "step_name");
	lr_runner_free(r);
	lr_client_close(c);
}

static int never_input(void *user, lr_submit_item *item, lr_err *e)
{
	return 0;
}

static void no_outcome(void *user, const lr_submit_outcome *o)
{
}

TEST(submit_many_names_the_argument_that_is_null)
{
	lr_client *c = hosted_client("/misuse-many/");
	CHECK_INT(lr_submit_many(c, NULL, NULL, no_outcome, NULL, NULL, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "input must not be NULL");
	CHECK_INT(lr_submit_many(c, NULL, never_input, NULL, NULL, NULL, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "outcome must not be NULL");
	CHECK_INT(lr_submit_many(NULL, NULL, never_input, no_outcome, NULL, NULL, &err), ==,
	          LR_EINVAL);
	CHECK_HAS(err.msg, "c must not be NULL");
	lr_client_close(c);
}

/* ---- holds -------------------------------------------------------------------- */

TEST(hold_options_out_of_range_are_refused_naming_the_field)
{
	lr_client *c = hosted_client("/misuse-hold-opts/");
	json_t *locks = json_pack("{s:s}", "res/a", "X");
	int closed = open("/dev/null", O_RDONLY | O_CLOEXEC);
	close(closed);
	struct {
		lr_hold_opts o;
		const char *msg;
	} bad[] = {
		{ { .locks = locks, .ttl_s = -1, .cancel_fd = -1 }, "ttl_s" },
		{ { .locks = locks, .ttl_s = INT64_MAX, .cancel_fd = -1 }, "ttl_s" },
		{ { .locks = locks, .wait_ms = -2, .cancel_fd = -1 }, "wait_ms" },
		{ { .locks = locks, .wait_ms = INT64_MIN, .cancel_fd = -1 }, "wait_ms" },
		{ { .locks = locks, .cancel_fd = -2 }, "cancel_fd" },
		{ { .locks = locks, .cancel_fd = closed }, "cancel_fd" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		lr_hold *h = NULL;
		int rc = lr_hold_acquire(c, &bad[i].o, &h, &err);
		if (rc != LR_EINVAL) {
			lr_hold_release(h, NULL);
			TEST_FAIL("case %zu: %d instead of LR_EINVAL (%s)", i, rc, err.msg);
		}
		CHECK(h == NULL);
		CHECK_HAS(err.msg, bad[i].msg);
		CHECK_INT(lr_hold_check(&bad[i].o, &err), ==, LR_EINVAL);
		CHECK_HAS(err.msg, bad[i].msg);
	}
	CHECK_INT(hosted_count(c, LR_K_WANTS, ""), ==, 0);
	json_decref(locks);
	lr_client_close(c);
}

struct waiter {
	lr_client *c;
	const lr_hold_opts *o;
	lr_hold *h;
	int rc;
};

static void *acquire_without_err(void *arg)
{
	struct waiter *w = arg;
	w->rc = lr_hold_acquire(w->c, w->o, &w->h, NULL);
	return NULL;
}

/* etcd stopped (SIGSTOP) for longer than the TTL: the holder learns that
 * its hold is lost; a request that waited meanwhile, made without an
 * lr_err, asks again on a new lease and gets the lock. */
TEST(a_hold_lost_while_etcd_is_paused_frees_its_waiter_which_has_no_lr_err)
{
	etcdh_cluster *cl = hosted_cluster();
	if (cl == NULL)
		return;
	lr_client *c = hosted_client("/misuse-paused/");
	json_t *locks = json_pack("{s:s}", "res/p", "X");
	lr_hold_opts o = { .locks = locks, .ttl_s = 2, .wait_ms = 20000, .cancel_fd = -1 };
	lr_hold *first;
	CHECK_OK(lr_hold_acquire(c, &o, &first, &err), &err);
	struct waiter w = { .c = c, .o = &o };
	pthread_t th;
	pthread_create(&th, NULL, acquire_without_err, &w);
	for (int64_t end = lr_mono_ms() + 5000; hosted_count(c, LR_K_WANTS, "") < 2;) {
		CHECK(lr_mono_ms() < end);
		lr_sleep_ms(10);
	}
	CHECK(etcdh_pause(cl, 0) == 0);
	lr_sleep_ms(3500);
	CHECK(etcdh_resume(cl, 0) == 0);
	CHECK(etcdh_wait_healthy(cl, 10) == 0);
	/* The first hold knows it lost the locks. */
	uint64_t v;
	int64_t t0 = lr_mono_ms();
	while (read(lr_hold_lost_fd(first), &v, sizeof(v)) != sizeof(v) &&
	       lr_mono_ms() - t0 < 5000)
		lr_sleep_ms(20);
	CHECK(lr_mono_ms() - t0 < 5000);
	CHECK_INT(lr_hold_deadline_ms(first), ==, 0);
	pthread_join(th, NULL);
	CHECK_INT(w.rc, ==, 0);
	CHECK(lr_hold_fence(w.h) > lr_hold_fence(first));
	lr_err e;
	lr_hold_release(first, &e); /* its lease is gone: an error or not, no harm */
	CHECK_OK(lr_hold_release(w.h, &err), &err);
	CHECK_INT(hosted_count(c, LR_K_LOCKS, ""), ==, 0);
	json_decref(locks);
	lr_client_close(c);
}

/* ---- the step's state given back --------------------------------------------- */

/* Changes the state in place and gives lr_step_state's (borrowed) object
 * back to lr_step_set_state, as if it were a new one. */
static lr_step_result gives_state_back(lr_step *s, void *user)
{
	json_t *st = lr_step_state(s);
	json_object_set_new(st, "seen", json_integer(1));
	lr_step_set_state(s, st);
	lr_err e;
	if (lr_step_checkpoint(s, &e) != 0) {
		lr_step_set_error(s, "%s", e.msg);
		return LR_STEP_FAIL;
	}
	lr_step_set_state(s, lr_step_state(s));
	return LR_STEP_OK;
}

TEST(the_state_given_back_to_set_state_is_kept_not_freed)
{
	lr_client *c = hosted_client("/misuse-state/");
	CHECK_INT(hosted_run_one(c, "stateful", gives_state_back, NULL, "st"), ==,
	          LR_TASK_SUCCEEDED);
	lr_client_close(c);
}

/* ---- client calls ---------------------------------------------------------------- */

TEST(client_calls_refuse_bad_flags_ids_and_prefixes_naming_them)
{
	lr_client *c = hosted_client("/misuse-client/");
	lr_shared_entry *list;
	size_t n;
	int64_t deleted;
	CHECK_OK(lr_update(c, "xa", give_one, NULL, &err), &err);
	/* 999 has the bit of LR_SHARED_PREFIX: it must not delete "xa". */
	CHECK_INT(lr_shared_delete(c, "x", 999, &deleted, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "unknown flags");
	CHECK_INT(lr_shared_list(c, "", 1 << 8, &list, &n, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "unknown flags");
	void *got = NULL;
	CHECK_OK(lr_shared_get(c, "xa", &got, &err), &err);
	CHECK(got != NULL);
	json_decref(got);

	CHECK_INT(lr_cancel(c, NULL, NULL, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "id must not be NULL");
	lr_task_status st;
	CHECK_INT(lr_task_get(c, NULL, &st, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "id must not be NULL");

	lr_client_opts co = { .endpoints = hosted_endpoints(), .prefix = "/caf\xc3/" };
	lr_client *bad = NULL;
	CHECK_INT(lr_client_open(&co, &bad, &err), ==, LR_EINVAL);
	CHECK(bad == NULL);
	CHECK_HAS(err.msg, "must be valid UTF-8");
	co.prefix = "/caf\xc3\xa9/";
	CHECK_OK(lr_client_open(&co, &bad, &err), &err);
	lr_client_close(bad);

	/* No runners to serve is allowed (rs NULL with n 0). */
	lr_metrics_server *srv = NULL;
	CHECK_OK(lr_metrics_serve(NULL, 0, "127.0.0.1:0", &srv, &err), &err);
	lr_metrics_server_free(srv);
	lr_client_close(c);
}

/* ---- a runner used from inside its own handler --------------------------------- */

static lr_client *inner_client;
static lr_runner *inner_runner;
static char inner_notes[NOTES_SIZE];

static void inner_note(const char *what, int rc, const lr_err *e)
{
	note_in(inner_notes, what, rc, e);
}

/* Runs its runner again, submits, holds a lock, then stops its runner and
 * waits to be told to stop. */
static lr_step_result calls_back_in(lr_step *s, void *user)
{
	lr_err e = { 0 };
	inner_note("run", lr_runner_run(inner_runner, &e), &e);
	const char *spec = "{\"id\":\"inner-child\",\"steps\":[{\"name\":\"b\",\"run\":\"-\"}]}";
	char id[LR_ID_SIZE];
	memset(&e, 0, sizeof(e));
	inner_note("submit", lr_submit_text(inner_client, spec, strlen(spec), NULL, id, NULL, &e),
	           &e);
	json_t *locks = json_pack("{s:s}", "inner/x", "X");
	lr_hold_opts o = { .locks = locks, .ttl_s = 2, .wait_ms = 2000, .cancel_fd = -1 };
	lr_hold *h = NULL;
	memset(&e, 0, sizeof(e));
	inner_note("hold", lr_hold_acquire(inner_client, &o, &h, &e), &e);
	memset(&e, 0, sizeof(e));
	inner_note("release", lr_hold_release(h, &e), &e);
	json_decref(locks);
	lr_runner_stop(inner_runner);
	memset(&e, 0, sizeof(e));
	inner_note("stopped", lr_step_sleep(s, 10000), &e);
	memset(&e, 0, sizeof(e));
	inner_note("reason", lr_step_stop_reason(s), &e);
	return LR_STEP_OK;
}

TEST(a_handler_may_submit_hold_and_stop_its_runner_but_not_run_it)
{
	inner_client = hosted_client("/misuse-inner/");
	inner_notes[0] = '\0';
	struct hosted h;
	hosted_new(&h, inner_client, "inner", 1);
	inner_runner = h.r;
	CHECK_OK(lr_runner_handle(h.r, "a", calls_back_in, NULL), &err);
	hosted_submit(inner_client, "{\"id\":\"inner\",\"steps\":[{\"name\":\"a\",\"run\":\"-\"},"
	                            "{\"name\":\"b\",\"run\":\"-\"}]}");
	hosted_start(&h);
	pthread_join(h.th, NULL); /* it stops itself */
	printf("%s", inner_notes);
	CHECK_OK(h.rc, &h.err);
	CHECK_HAS(inner_notes, "run: -1 runner inner: the runner is running already");
	CHECK_HAS(inner_notes, "submit: 0");
	CHECK_HAS(inner_notes, "hold: 0");
	CHECK_HAS(inner_notes, "release: 0");
	CHECK_HAS(inner_notes, "stopped: 1");
	CHECK_HAS(inner_notes, "reason: 3"); /* LR_STEP_SHUTDOWN */
	/* Stopped mid-step: nothing committed, the task is free for another. */
	lr_task_status st;
	CHECK_OK(lr_task_get(inner_client, "inner", &st, &err), &err);
	CHECK_INT(st.state, ==, LR_TASK_PENDING);
	CHECK_INT(st.next_step, ==, 0);
	lr_task_status_clear(&st);
	lr_runner_free(h.r);
	lr_client_close(inner_client);
}

static void *stop_it(void *arg)
{
	lr_runner_stop(arg);
	return NULL;
}

/* lr_runner_stop racing the start of lr_runner_run: a stop is for good,
 * whichever comes first. */
TEST(a_stop_racing_the_start_of_a_run_ends_it_cleanly)
{
	lr_client *c = hosted_client("/misuse-race/");
	for (int i = 0; i < 10; i++) {
		lr_runner_opts o = { .name = "race", .ttl_s = 2, .log = hosted_quiet };
		lr_runner *r;
		CHECK_OK(lr_runner_new(c, &o, &r, &err), &err);
		pthread_t th;
		pthread_create(&th, NULL, stop_it, r);
		int rc = lr_runner_run(r, &err);
		pthread_join(th, NULL);
		CHECK_OK(rc, &err);
		CHECK_OK(lr_runner_run(r, &err), &err); /* stopped for good */
		lr_runner_free(r);
	}
	CHECK_INT(hosted_count(c, LR_K_RUNNERS, ""), ==, 0);
	lr_client_close(c);
}

TEST_LIST(
	TEST_CASE(a_handler_returning_no_step_result_fails_the_task_naming_the_value),
	TEST_CASE(a_step_sleep_too_long_for_the_clock_lasts_until_the_step_is_stopped),
	TEST_CASE(step_writes_refuse_null_arguments_and_values_that_are_not_json),
	TEST_CASE(shared_values_too_deep_to_read_back_or_not_utf8_are_refused),
	TEST_CASE(runner_options_out_of_range_are_refused_naming_the_field),
	TEST_CASE(submit_many_names_the_argument_that_is_null),
	TEST_CASE(hold_options_out_of_range_are_refused_naming_the_field),
	TEST_CASE(a_hold_lost_while_etcd_is_paused_frees_its_waiter_which_has_no_lr_err),
	TEST_CASE(the_state_given_back_to_set_state_is_kept_not_freed),
	TEST_CASE(client_calls_refuse_bad_flags_ids_and_prefixes_naming_them),
	TEST_CASE(a_handler_may_submit_hold_and_stop_its_runner_but_not_run_it),
	TEST_CASE(a_stop_racing_the_start_of_a_run_ends_it_cleanly),
);
TEST_MAIN(hosted_setup, hosted_teardown)
