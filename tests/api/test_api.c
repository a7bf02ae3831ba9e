/* test_api.c - the embedding API against a real etcd: runners hosted in
 * this process with in-process step handlers. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/clock.h"
#include "client/client.h"
#include "engine/claim.h"
#include "etcd/kv.h"
#include "etcd/lease.h"
#include "etcd_harness.h"
#include "hosted.h"
#include "leaserun.h"
#include "records/spec.h"
#include "test.h"

static lr_err err;

/* ---- two runners in one process -------------------------------------------- */

struct counts {
	atomic_int runs[2];
	atomic_int per_task[40][2];
};

struct tagged {
	struct counts *cnt;
	int runner;
};

static lr_step_result count_step(lr_step *s, void *user)
{
	struct tagged *t = user;
	int task = atoi(lr_step_task_id(s) + 1);
	t->cnt->runs[t->runner]++;
	t->cnt->per_task[task][lr_step_index(s)]++;
	json_t *state = json_object();
	json_object_set_new(state, "by", json_integer(t->runner));
	lr_step_set_state(s, state);
	return LR_STEP_OK;
}

TEST(two_runners_in_one_process_share_the_work_without_global_state)
{
	lr_client *c = hosted_client("/api-two/");
	static struct counts cnt;
	memset(&cnt, 0, sizeof(cnt));
	struct tagged tags[2] = { { &cnt, 0 }, { &cnt, 1 } };
	struct hosted h[2];
	hosted_new(&h[0], c, "alpha", 2);
	hosted_new(&h[1], c, "beta", 2);
	for (int i = 0; i < 2; i++) {
		CHECK_OK(lr_runner_handle(h[i].r, NULL, count_step, &tags[i]), &err);
		hosted_start(&h[i]);
	}
	for (int t = 0; t < 40; t++) {
		char spec[256];
		snprintf(spec, sizeof(spec),
		         "{\"id\":\"t%d\",\"steps\":[{\"name\":\"a\",\"run\":\"-\"},{\"name\":\"b\",\"run\":\"-\"}]}", t);
		hosted_submit(c, spec);
	}
	for (int t = 0; t < 40; t++) {
		char id[8];
		snprintf(id, sizeof(id), "t%d", t);
		CHECK_INT(hosted_wait_done(c, id, 30000), ==, LR_TASK_SUCCEEDED);
		CHECK_INT(cnt.per_task[t][0], ==, 1);
		CHECK_INT(cnt.per_task[t][1], ==, 1);
	}
	printf("# alpha ran %d steps, beta %d\n", cnt.runs[0], cnt.runs[1]);
	CHECK_INT(cnt.runs[0] + cnt.runs[1], ==, 80);
	hosted_end(&h[0]);
	hosted_end(&h[1]);
	lr_client_close(c);
}

/* ---- intermediate checkpoints ------------------------------------------------ */

struct progress {
	atomic_int checkpoints;
	atomic_int failed_checkpoints;
	atomic_int first_i_seen; /* the counter a (re)started step began from */
	atomic_int starts;
};

/* "act": counts up, checkpointing each value, until cancelled or 30. */
static lr_step_result act(lr_step *s, void *user)
{
	struct progress *p = user;
	json_t *state = lr_step_state(s);
	int i = (int)json_integer_value(json_object_get(state, "i"));
	if (p->starts++ == 0 || p->first_i_seen == 0)
		p->first_i_seen = i;
	while (i < 30 && !lr_step_cancelled(s)) {
		i++;
		json_object_set_new(state, "i", json_integer(i));
		lr_err e;
		if (lr_step_checkpoint(s, &e) != 0) {
			p->failed_checkpoints++;
			return LR_STEP_RETRY;
		}
		p->checkpoints++;
		lr_step_sleep(s, 40);
	}
	return LR_STEP_OK;
}

static int64_t checkpoint_i(lr_client *c, const char *id, int64_t *mod_rev)
{
	char key[LR_KEY_SIZE];
	lr_key(c, LR_K_CHECKPOINTS, id, key);
	lr_range_result r;
	CHECK_OK(lr_kv_get(lr_client_etcd(c), key, &r, &err), &err);
	CHECK_INT(r.n, ==, 1);
	json_t *v = json_loadb(r.kvs[0].value, r.kvs[0].value_len, 0, NULL);
	int64_t i = json_integer_value(json_object_get(json_object_get(v, "state"), "i"));
	*mod_rev = r.kvs[0].mod_rev;
	json_decref(v);
	lr_range_result_free(&r);
	return i;
}

TEST(intermediate_checkpoints_are_fenced_and_a_resumed_step_starts_from_them)
{
	lr_client *c = hosted_client("/api-fence/");
	static struct progress p;
	memset(&p, 0, sizeof(p));
	struct hosted a;
	hosted_new(&a, c, "first", 1);
	CHECK_OK(lr_runner_handle(a.r, "act", act, &p), &err);
	hosted_start(&a);
	hosted_submit(c, "{\"id\":\"agent\",\"steps\":[{\"name\":\"act\",\"run\":\"-\"}],\"state\":{\"i\":0}}");
	while (p.checkpoints < 5)
		lr_sleep_ms(10);
	/* Pull the lease from under the runner, as a partition would. */
	int64_t lease = hosted_claim_lease(c, "agent");
	CHECK(lease != 0);
	CHECK_OK(lr_lease_revoke(lr_client_etcd(c), lease, &err), &err);
	int64_t rev_after_revoke;
	int64_t i_after_revoke = checkpoint_i(c, "agent", &rev_after_revoke);
	lr_sleep_ms(300);
	int64_t rev_later;
	int64_t i_later = checkpoint_i(c, "agent", &rev_later);
	/* No checkpoint from the runner that lost its claim. */
	CHECK_INT(rev_later, ==, rev_after_revoke);
	CHECK_INT(i_later, ==, i_after_revoke);
	printf("# checkpoints before the revoke: %d, refused after it: %d\n",
	       p.checkpoints, p.failed_checkpoints);

	/* Another runner resumes the step from the last checkpoint. */
	struct hosted b;
	hosted_new(&b, c, "second", 1);
	CHECK_OK(lr_runner_handle(b.r, "act", act, &p), &err);
	hosted_end(&a); /* a would take it again with a new lease: leave it to b */
	p.first_i_seen = 0;
	hosted_start(&b);
	CHECK_INT(hosted_wait_done(c, "agent", 20000), ==, LR_TASK_SUCCEEDED);
	printf("# the resumed step started from i=%d (last checkpoint %lld)\n", p.first_i_seen,
	       (long long)i_later);
	CHECK_INT(p.first_i_seen, ==, i_later);
	hosted_end(&b);
	lr_client_close(c);
}

/* ---- cancellation ------------------------------------------------------------- */

static atomic_llong cancel_seen_ms;

static lr_step_result wait_for_cancel(lr_step *s, void *user)
{
	(void)user;
	atomic_store((atomic_int *)user, 1);
	lr_step_sleep(s, 30000);
	cancel_seen_ms = lr_mono_ms();
	return LR_STEP_OK;
}

TEST(a_handler_sees_cancellation_at_once)
{
	lr_client *c = hosted_client("/api-cancel/");
	static atomic_int started;
	started = 0;
	cancel_seen_ms = 0;
	struct hosted h;
	hosted_new(&h, c, "canceller", 1);
	CHECK_OK(lr_runner_handle(h.r, NULL, wait_for_cancel, (void *)&started), &err);
	hosted_start(&h);
	hosted_submit(c, "{\"id\":\"long\",\"steps\":[{\"name\":\"wait\",\"run\":\"-\"}]}");
	while (!started)
		lr_sleep_ms(5);
	int already;
	int64_t t0 = lr_mono_ms();
	CHECK_OK(lr_cancel(c, "long", &already, &err), &err);
	while (cancel_seen_ms == 0 && lr_mono_ms() - t0 < 5000)
		lr_sleep_ms(1);
	int64_t took = cancel_seen_ms - t0;
	printf("# the handler saw the cancel %lld ms after the request\n", (long long)took);
	CHECK(cancel_seen_ms != 0);
	/* Milliseconds normally (printed above); the bound only catches a
	 * handler that learns of it late, from polling or a timeout. */
	CHECK_INT(took, <, 1000);
	CHECK_INT(hosted_wait_done(c, "long", 5000), ==, LR_TASK_CANCELLED);
	hosted_end(&h);
	lr_client_close(c);
}

/* ---- failures ------------------------------------------------------------------ */

static lr_step_result flaky(lr_step *s, void *user)
{
	if (lr_step_attempt(s) < 3) {
		lr_step_set_error(s, "not yet (attempt %lld)", (long long)lr_step_attempt(s));
		return LR_STEP_RETRY;
	}
	return LR_STEP_OK;
}

static lr_step_result hopeless(lr_step *s, void *user)
{
	atomic_fetch_add((atomic_int *)user, 1);
	lr_step_set_error(s, "the input is malformed");
	return LR_STEP_FAIL;
}

TEST(retryable_failures_are_retried_and_permanent_ones_end_the_task)
{
	lr_client *c = hosted_client("/api-fail/");
	static atomic_int hopeless_runs;
	hopeless_runs = 0;
	struct hosted h;
	hosted_new(&h, c, "failures", 2);
	CHECK_OK(lr_runner_handle(h.r, "flaky", flaky, NULL), &err);
	CHECK_OK(lr_runner_handle(h.r, "hopeless", hopeless, (void *)&hopeless_runs), &err);
	hosted_start(&h);
	hosted_submit(c, "{\"id\":\"retry\",\"retry_backoff_ms\":10,\"steps\":[{\"name\":\"flaky\",\"run\":\"-\"}]}");
	hosted_submit(c, "{\"id\":\"perm\",\"steps\":[{\"name\":\"hopeless\",\"run\":\"-\"}]}");
	hosted_submit(c, "{\"id\":\"nohandler\",\"steps\":[{\"name\":\"unknown\",\"run\":\"-\"}]}");
	CHECK_INT(hosted_wait_done(c, "retry", 10000), ==, LR_TASK_SUCCEEDED);
	CHECK_INT(hosted_wait_done(c, "perm", 10000), ==, LR_TASK_FAILED);
	CHECK_INT(hosted_wait_done(c, "nohandler", 10000), ==, LR_TASK_FAILED);
	lr_task_status st;
	CHECK_OK(lr_task_get(c, "perm", &st, &err), &err);
	CHECK_HAS(st.error, "step hopeless (0) failed: the input is malformed");
	lr_task_status_clear(&st);
	CHECK_INT(hopeless_runs, ==, 1);
	CHECK_OK(lr_task_get(c, "nohandler", &st, &err), &err);
	CHECK_HAS(st.error, "no handler");
	lr_task_status_clear(&st);
	hosted_end(&h);
	lr_client_close(c);
}

/* ---- guarded update -------------------------------------------------------------- */

static int increment(void *user, const void *current, void **next)
{
	(void)user;
	json_int_t n = current != NULL ? json_integer_value(json_object_get(current, "n")) : 0;
	*next = json_pack("{sI}", "n", n + 1);
	return 0;
}

static void *writer(void *arg)
{
	lr_client *c = hosted_client("/api-update/");
	for (int i = 0; i < 100; i++) {
		lr_err e;
		if (lr_update(c, "counter", increment, NULL, &e) != 0) {
			fprintf(stderr, "update: %s\n", e.msg);
			atomic_fetch_add((atomic_int *)arg, 1);
		}
	}
	lr_client_close(c);
	return NULL;
}

TEST(guarded_update_by_8_writers_loses_no_increment)
{
	static atomic_int failures;
	failures = 0;
	pthread_t th[8];
	for (int i = 0; i < 8; i++)
		pthread_create(&th[i], NULL, writer, (void *)&failures);
	for (int i = 0; i < 8; i++)
		pthread_join(th[i], NULL);
	CHECK_INT(failures, ==, 0);
	lr_client *c = hosted_client("/api-update/");
	void *value = NULL;
	CHECK_OK(lr_shared_get(c, "counter", &value, &err), &err);
	CHECK(value != NULL);
	CHECK_INT(json_integer_value(json_object_get(value, "n")), ==, 800);
	json_decref(value);
	lr_client_close(c);
}


/* ---- a claim on a spec read before the task was purged ------------------------ */

/* The create revision of <kind><id> under the client's prefix, 0 if none. */
static int64_t key_rev(lr_client *c, const char *kind, const char *id)
{
	char key[LR_KEY_SIZE];
	lr_key(c, kind, id, key);
	lr_range_result r;
	CHECK_OK(lr_kv_get(lr_client_etcd(c), key, &r, &err), &err);
	int64_t rev = r.n > 0 ? r.kvs[0].create_rev : 0;
	lr_range_result_free(&r);
	return rev;
}

TEST(a_claim_on_a_spec_read_before_a_purge_claims_nothing_stale)
{
	static const char old_spec[] =
	    "{\"id\":\"p1\",\"steps\":[{\"name\":\"old\",\"run\":\"-\"}]}";
	lr_client *c = hosted_client("/api-stale/");
	hosted_submit(c, old_spec);
	int64_t rev = key_rev(c, LR_K_TASKS, "p1");
	CHECK(rev > 0);
	char key[LR_KEY_SIZE];
	lr_key(c, LR_K_TASKS, "p1", key);
	CHECK_OK(lr_kv_delete(lr_client_etcd(c), key, 0, NULL, NULL, &err), &err);

	int64_t lease = 0;
	int64_t granted = 0;
	CHECK_OK(lr_lease_grant(lr_client_etcd(c), 10, &lease, &granted, NULL, &err), &err);
	lr_claimant who = { .client = c, .runner = "stale", .lease = lease };
	lr_claimed_task h;
	enum lr_claim_outcome oc;
	lr_task_state ended;
	char why[700];
	/* Gone: the claim writes nothing for a task that no longer exists. */
	CHECK_OK(lr_claim(&who, "p1", old_spec, strlen(old_spec), rev, true, NULL, 0, &h, &oc,
	                  &ended, why, sizeof(why), &err), &err);
	CHECK_INT(oc, ==, LR_CLAIM_GONE);
	CHECK_INT(key_rev(c, LR_K_CLAIMS, "p1"), ==, 0); /* none */
	CHECK_INT(key_rev(c, LR_K_CHECKPOINTS, "p1"), ==, 0);

	/* Submitted again with other steps: the claim runs the new spec. */
	hosted_submit(c, "{\"id\":\"p1\",\"steps\":[{\"name\":\"new\",\"run\":\"-\"}]}");
	CHECK(key_rev(c, LR_K_TASKS, "p1") > rev);
	CHECK_OK(lr_claim(&who, "p1", old_spec, strlen(old_spec), rev, true, NULL, 0, &h, &oc,
	                  &ended, why, sizeof(why), &err), &err);
	CHECK_INT(oc, ==, LR_CLAIM_WON);
	CHECK_STR(lr_spec_step_name(h.spec, 0), "new");
	lr_claimed_task_clear(&h);
	lr_lease_revoke(lr_client_etcd(c), lease, NULL);
	lr_client_close(c);
}


/* ---- records below the runner's log level are not made ---------------------- */

static atomic_int below_warn, at_warn_or_more;

static void counting_sink(void *user, const lr_log_record *rec)
{
	(void)user;
	if (rec->level < LR_LOG_WARN)
		below_warn++;
	else
		at_warn_or_more++;
}

static lr_step_result logging_step(lr_step *s, void *user)
{
	(void)user;
	lr_step_log(s, LR_LOG_INFO, "an info line");
	lr_step_log(s, LR_LOG_WARN, "a warning");
	return LR_STEP_OK;
}

TEST(records_below_the_log_level_never_reach_the_sink)
{
	lr_client *c = hosted_client("/api-loglevel/");
	below_warn = at_warn_or_more = 0;
	struct hosted h;
	hosted_new_logged(&h, c, "quiet", counting_sink);
	CHECK_OK(lr_runner_handle(h.r, NULL, logging_step, NULL), &err);
	hosted_start(&h);
	hosted_submit(c, "{\"id\":\"l1\",\"steps\":[{\"name\":\"a\",\"run\":\"-\"}]}");
	CHECK_INT(hosted_wait_done(c, "l1", 10000), ==, LR_TASK_SUCCEEDED);
	hosted_end(&h);
	CHECK_INT(below_warn, ==, 0);
	CHECK_INT(at_warn_or_more, >=, 1); /* the step's warning */
	lr_client_close(c);
}

/* ---- a handler that does not stop ----------------------------------------- */

static atomic_int stuck_started, stuck_release;
static pthread_mutex_t stuck_mu = PTHREAD_MUTEX_INITIALIZER;
static char stuck_warning[1024];

static void stuck_sink(void *user, const lr_log_record *rec)
{
	(void)user;
	pthread_mutex_lock(&stuck_mu);
	if (rec->level == LR_LOG_WARN && strstr(rec->msg, "still running") != NULL)
		snprintf(stuck_warning, sizeof(stuck_warning), "%s", rec->msg);
	pthread_mutex_unlock(&stuck_mu);
}

static lr_step_result ignores_stop(lr_step *s, void *user)
{
	(void)s;
	(void)user;
	stuck_started = 1;
	while (!stuck_release)
		lr_sleep_ms(10);
	return LR_STEP_OK;
}

/* lr_runner_run cannot return while a handler runs: the operator is told
 * which task's handler it waits for, rather than left with a silent hang. */
TEST(a_handler_that_ignores_a_stop_is_named_in_a_warning)
{
	lr_client *c = hosted_client("/api-stuck/");
	stuck_started = stuck_release = 0;
	stuck_warning[0] = '\0';
	struct hosted h;
	hosted_new_logged(&h, c, "stubborn", stuck_sink);
	CHECK_OK(lr_runner_handle(h.r, NULL, ignores_stop, NULL), &err);
	hosted_start(&h);
	hosted_submit(c, "{\"id\":\"stuck\",\"steps\":[{\"name\":\"a\",\"run\":\"-\"}]}");
	while (!stuck_started)
		lr_sleep_ms(5);
	lr_runner_stop(h.r);
	char seen[1024] = "";
	for (int64_t end = lr_mono_ms() + 15000; seen[0] == '\0' && lr_mono_ms() < end;) {
		lr_sleep_ms(50);
		pthread_mutex_lock(&stuck_mu);
		snprintf(seen, sizeof(seen), "%s", stuck_warning);
		pthread_mutex_unlock(&stuck_mu);
	}
	stuck_release = 1;
	printf("# %s\n", seen);
	CHECK(strstr(seen, "1 step handler still running") != NULL);
	CHECK(strstr(seen, "after the grace period: stuck (step 1)") != NULL);
	hosted_end(&h);
	lr_client_close(c);
}

/* ---- purge and submit again -------------------------------------------------- */

static atomic_int again_runs;

static lr_step_result count_run(lr_step *s, void *user)
{
	again_runs++;
	return LR_STEP_OK;
}

/* Each directory has its own watcher: the end of the purged task can reach
 * the runner after the new task with the same id. The new one must run. */
TEST(a_task_purged_and_submitted_again_at_once_runs_again)
{
	lr_client *c = hosted_client("/api-again/");
	again_runs = 0;
	struct hosted h;
	hosted_new(&h, c, "again", 2);
	CHECK_OK(lr_runner_handle(h.r, NULL, count_run, NULL), &err);
	hosted_start(&h);
	for (int round = 0; round < 15; round++) {
		char spec[128];
		snprintf(spec, sizeof(spec),
		         "{\"id\":\"same\",\"steps\":[{\"name\":\"a\",\"run\":\"%d\"}]}", round);
		hosted_submit(c, spec);
		CHECK_INT(hosted_wait_done(c, "same", 10000), ==, LR_TASK_SUCCEEDED);
		size_t purged = 0;
		CHECK_OK(lr_purge(c, 0, -1, &purged, &err), &err);
		CHECK_INT(purged, ==, 1);
	}
	CHECK_INT(again_runs, ==, 15);
	hosted_end(&h);
	lr_client_close(c);
}

TEST_LIST(
	TEST_CASE(two_runners_in_one_process_share_the_work_without_global_state),
	TEST_CASE(intermediate_checkpoints_are_fenced_and_a_resumed_step_starts_from_them),
	TEST_CASE(a_handler_sees_cancellation_at_once),
	TEST_CASE(retryable_failures_are_retried_and_permanent_ones_end_the_task),
	TEST_CASE(guarded_update_by_8_writers_loses_no_increment),
	TEST_CASE(a_claim_on_a_spec_read_before_a_purge_claims_nothing_stale),
	TEST_CASE(records_below_the_log_level_never_reach_the_sink),
	TEST_CASE(a_task_purged_and_submitted_again_at_once_runs_again),
	TEST_CASE(a_handler_that_ignores_a_stop_is_named_in_a_warning),
);
TEST_MAIN(hosted_setup, hosted_teardown)
