/* test_stats.c - a runner's statistics (lr_runner_get_stats): counters and
 * latency summaries after known work, against a real etcd, and the
 * histogram behind the latencies. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/clock.h"
#include "base/stats.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "records/record.h"
#include "etcd_harness.h"
#include "hosted.h"
#include "leaserun.h"
#include "test.h"

static lr_err err;

/* A task of `steps` steps named "<step_name>-<index>". */
static void submit_steps(lr_client *c, const char *id, int steps, const char *step_name)
{
	char spec[1024];
	int n = snprintf(spec, sizeof(spec), "{\"id\":\"%s\",\"retry_backoff_ms\":10,\"steps\":[", id);
	for (int i = 0; i < steps; i++)
		n += snprintf(spec + n, sizeof(spec) - (size_t)n,
		              "%s{\"name\":\"%s-%d\",\"run\":\"-\"}", i ? "," : "",
		              step_name, i);
	snprintf(spec + n, sizeof(spec) - (size_t)n, "]}");
	hosted_submit(c, spec);
}

/* Tasks <stem>0 .. <stem>n-1, of `steps` steps each. */
static void submit_queue(lr_client *c, const char *stem, int n, int steps,
                         const char *step_name)
{
	for (int i = 0; i < n; i++) {
		char id[32];
		snprintf(id, sizeof(id), "%s%d", stem, i);
		submit_steps(c, id, steps, step_name);
	}
}

static lr_step_result noop(lr_step *s, void *user)
{
	return LR_STEP_OK;
}

static lr_step_result flaky(lr_step *s, void *user)
{
	if (lr_step_attempt(s) < 3) {
		lr_step_set_error(s, "not yet");
		return LR_STEP_RETRY;
	}
	return LR_STEP_OK;
}

static lr_step_result hopeless(lr_step *s, void *user)
{
	lr_step_set_error(s, "never");
	return LR_STEP_FAIL;
}

static void check_latency(const lr_latency *l, uint64_t count)
{
	CHECK_INT(l->count, ==, count);
	CHECK(l->p50_ms > 0);
	CHECK(l->p50_ms <= l->p90_ms && l->p90_ms <= l->p99_ms);
	CHECK(l->p99_ms <= l->max_ms);
	CHECK(l->mean_ms > 0 && l->mean_ms <= l->max_ms);
	CHECK(l->max_ms < 5000); /* one txn on a local etcd */
}

TEST(five_tasks_of_three_steps_count_five_claims_ten_commits_five_completions)
{
	lr_client *c = hosted_client("/stats-five/");
	struct hosted h;
	hosted_new(&h, c, "counter", 2);
	CHECK_OK(lr_runner_handle(h.r, NULL, noop, NULL), &err);
	lr_runner_stats st;
	lr_runner_get_stats(h.r, &st);
	CHECK_INT(st.claims_won + st.steps_committed + st.tasks_finished, ==, 0);
	CHECK_INT(st.claim.count, ==, 0);
	CHECK(st.claim.p50_ms == 0 && st.claim.max_ms == 0);
	hosted_start(&h);
	for (int i = 0; i < 5; i++) {
		char id[16];
		snprintf(id, sizeof(id), "five%d", i);
		submit_steps(c, id, 3, "work");
	}
	for (int i = 0; i < 5; i++) {
		char id[16];
		snprintf(id, sizeof(id), "five%d", i);
		CHECK_INT(hosted_wait_done(c, id, 20000), ==, LR_TASK_SUCCEEDED);
	}
	hosted_stop(&h);
	lr_runner_get_stats(h.r, &st);
	printf("# claim p50 %.3f ms, commit p50 %.3f ms, completion p50 %.3f ms\n",
	       st.claim.p50_ms, st.commit.p50_ms, st.completion.p50_ms);
	CHECK_INT(st.claims_won, ==, 5);
	CHECK_INT(st.claims_lost, ==, 0);
	CHECK_INT(st.steps_committed, ==, 10); /* the last step goes with the completion */
	CHECK_INT(st.tasks_finished, ==, 5);
	CHECK_INT(st.tasks_succeeded, ==, 5);
	CHECK_INT(st.tasks_failed + st.tasks_cancelled + st.tasks_let_go, ==, 0);
	CHECK_INT(st.attempts_failed, ==, 0);
	CHECK_INT(st.lease_losses, ==, 0);
	check_latency(&st.claim, 5);
	check_latency(&st.commit, 10);
	check_latency(&st.completion, 5);
	lr_runner_free(h.r);
	lr_client_close(c);
}

/* The revision of key kind+id: its checkpoint's fence (the claim's
 * revision) or its mod revision; 0 when missing. */
static int64_t rev_of(lr_client *c, const char *kind, const char *id, bool fence)
{
	char key[LR_KEY_SIZE];
	lr_key(c, kind, id, key);
	lr_range_result r;
	CHECK_OK(lr_kv_get(lr_client_etcd(c), key, &r, &err), &err);
	int64_t rev = 0;
	if (r.n == 1 && !fence) {
		rev = r.kvs[0].mod_rev;
	} else if (r.n == 1) {
		lr_checkpoint_rec ck;
		CHECK_OK(lr_checkpoint_decode(r.kvs[0].value, r.kvs[0].value_len, &ck, &err), &err);
		rev = ck.fence;
		lr_checkpoint_rec_clear(&ck);
	}
	lr_range_result_free(&r);
	return rev;
}

/* One worker and a queue of tasks: each task's end goes in the revision
 * of the next task's claim (one request, one wait), yet each is its own
 * txn: every task succeeds, and writes are still one per step and claim. */
TEST(a_task_s_end_rides_with_the_claim_of_the_next_one)
{
	enum { N = 6 };
	lr_client *c = hosted_client("/stats-ride/");
	submit_queue(c, "ride", N, 2, "work");
	struct hosted h;
	hosted_new(&h, c, "rider", 1);
	CHECK_OK(lr_runner_handle(h.r, NULL, noop, NULL), &err);
	hosted_start(&h);
	int64_t claimed[N], ended[N];
	for (int i = 0; i < N; i++) {
		char id[16];
		snprintf(id, sizeof(id), "ride%d", i);
		CHECK_INT(hosted_wait_done(c, id, 20000), ==, LR_TASK_SUCCEEDED);
	}
	hosted_stop(&h);
	for (int i = 0; i < N; i++) {
		char id[16];
		snprintf(id, sizeof(id), "ride%d", i);
		claimed[i] = rev_of(c, LR_K_CHECKPOINTS, id, true);
		ended[i] = rev_of(c, LR_K_DONE, id, false);
		CHECK(claimed[i] > 0 && ended[i] > claimed[i]);
	}
	int rides = 0;
	for (int i = 0; i < N; i++)
		for (int j = 0; j < N; j++)
			rides += i != j && claimed[i] == ended[j];
	printf("# %d of %d claims shared their revision with the end before\n", rides, N - 1);
	CHECK_INT(rides, >=, 2); /* 4 of 5 here; 0 when ends go alone */
	lr_runner_stats st;
	lr_runner_get_stats(h.r, &st);
	CHECK_INT(st.claims_won, ==, N);
	CHECK_INT(st.steps_committed, ==, N);
	CHECK_INT(st.tasks_succeeded, ==, N);
	lr_runner_free(h.r);
	lr_client_close(c);
}

TEST(failed_attempts_and_failed_tasks_are_counted_apart_from_successes)
{
	lr_client *c = hosted_client("/stats-fail/");
	struct hosted h;
	hosted_new(&h, c, "failures", 2);
	CHECK_OK(lr_runner_handle(h.r, "flaky-0", flaky, NULL), &err);
	CHECK_OK(lr_runner_handle(h.r, "hopeless-0", hopeless, NULL), &err);
	hosted_start(&h);
	submit_steps(c, "retried", 1, "flaky");
	submit_steps(c, "doomed", 2, "hopeless");
	CHECK_INT(hosted_wait_done(c, "retried", 20000), ==, LR_TASK_SUCCEEDED);
	CHECK_INT(hosted_wait_done(c, "doomed", 20000), ==, LR_TASK_FAILED);
	hosted_stop(&h);
	lr_runner_stats st;
	lr_runner_get_stats(h.r, &st);
	CHECK_INT(st.claims_won, ==, 2);
	CHECK_INT(st.attempts_failed, ==, 3); /* two retries, one permanent failure */
	CHECK_INT(st.steps_committed, ==, 0);
	CHECK_INT(st.tasks_finished, ==, 2);
	CHECK_INT(st.tasks_succeeded, ==, 1);
	CHECK_INT(st.tasks_failed, ==, 1);
	CHECK_INT(st.completion.count, ==, 2);
	lr_runner_free(h.r);
	lr_client_close(c);
}

TEST(the_sum_over_two_runners_adds_their_counters_and_merges_their_latencies)
{
	lr_client *c = hosted_client("/stats-two/");
	struct hosted h[2];
	hosted_new(&h[0], c, "left", 2);
	hosted_new(&h[1], c, "right", 2);
	for (int i = 0; i < 2; i++) {
		CHECK_OK(lr_runner_handle(h[i].r, NULL, noop, NULL), &err);
		hosted_start(&h[i]);
	}
	for (int i = 0; i < 20; i++) {
		char id[16];
		snprintf(id, sizeof(id), "two%d", i);
		submit_steps(c, id, 2, "work");
	}
	for (int i = 0; i < 20; i++) {
		char id[16];
		snprintf(id, sizeof(id), "two%d", i);
		CHECK_INT(hosted_wait_done(c, id, 20000), ==, LR_TASK_SUCCEEDED);
	}
	hosted_stop(&h[0]);
	hosted_stop(&h[1]);
	lr_runner_stats a, b, sum;
	lr_runner_get_stats(h[0].r, &a);
	lr_runner_get_stats(h[1].r, &b);
	lr_runner *rs[2] = { h[0].r, h[1].r };
	lr_runner_get_stats_sum(rs, 2, &sum);
	printf("# left won %llu claims (lost %llu), right %llu (lost %llu)\n",
	       (unsigned long long)a.claims_won, (unsigned long long)a.claims_lost,
	       (unsigned long long)b.claims_won, (unsigned long long)b.claims_lost);
	CHECK_INT(sum.claims_won, ==, 20);
	CHECK_INT(sum.claims_won, ==, a.claims_won + b.claims_won);
	CHECK_INT(sum.claims_lost, ==, a.claims_lost + b.claims_lost);
	CHECK_INT(sum.steps_committed, ==, 20);
	CHECK_INT(sum.tasks_finished, ==, 20);
	CHECK_INT(sum.claim.count, ==, 20);
	CHECK_INT(sum.commit.count, ==, a.commit.count + b.commit.count);
	CHECK(sum.claim.max_ms == (a.claim.max_ms > b.claim.max_ms ? a.claim.max_ms
	                                                           : b.claim.max_ms));
	lr_runner_free(h[0].r);
	lr_runner_free(h[1].r);
	lr_client_close(c);
}

/* Step 0 of every task is quick; step 1 of "held" waits until the runner
 * stops it. Counts how often each step of each task started. */
static atomic_int held_started;
static atomic_int queued_runs[64][2];

static lr_step_result queued_step(lr_step *s, void *user)
{
	const char *id = lr_step_task_id(s);
	int64_t i = lr_step_index(s);
	if (strcmp(id, "held") == 0) {
		queued_runs[63][i]++;
		if (i == 1 && user != NULL) {
			held_started = 1;
			lr_step_sleep(s, 30000);
			return LR_STEP_RETRY; /* stopped: nothing is committed */
		}
		return LR_STEP_OK;
	}
	queued_runs[atoi(id + 1)][i]++;
	return LR_STEP_OK;
}

TEST(a_queue_read_at_start_is_claimed_once_per_task_and_a_released_task_resumes)
{
	lr_client *c = hosted_client("/stats-queue/");
	memset(queued_runs, 0, sizeof(queued_runs));
	held_started = 0;
	/* A runner takes "held", commits its step 0, and is stopped in step 1:
	 * the task is released with a checkpoint at step 1. */
	struct hosted a;
	hosted_new(&a, c, "first", 1);
	CHECK_OK(lr_runner_handle(a.r, NULL, queued_step, (void *)1), &err);
	hosted_start(&a);
	submit_steps(c, "held", 2, "s");
	while (!held_started)
		lr_sleep_ms(5);
	hosted_stop(&a);
	lr_runner_free(a.r);
	/* Tasks queued while no runner runs: the next one reads them at start
	 * (keys only), then claims them. */
	submit_queue(c, "q", 40, 2, "s");
	struct hosted b;
	hosted_new(&b, c, "second", 4);
	CHECK_OK(lr_runner_handle(b.r, NULL, queued_step, NULL), &err);
	hosted_start(&b);
	CHECK_INT(hosted_wait_done(c, "held", 20000), ==, LR_TASK_SUCCEEDED);
	for (int i = 0; i < 40; i++) {
		char id[16];
		snprintf(id, sizeof(id), "q%d", i);
		CHECK_INT(hosted_wait_done(c, id, 20000), ==, LR_TASK_SUCCEEDED);
		CHECK_INT(queued_runs[i][0], ==, 1);
		CHECK_INT(queued_runs[i][1], ==, 1);
	}
	hosted_stop(&b);
	CHECK_INT(queued_runs[63][0], ==, 1); /* committed before: not run again */
	CHECK_INT(queued_runs[63][1], ==, 2); /* interrupted once, then run */
	lr_runner_stats st;
	lr_runner_get_stats(b.r, &st);
	CHECK_INT(st.claims_won, ==, 41);
	CHECK_INT(st.claims_lost, ==, 0);
	CHECK_INT(st.tasks_finished, ==, 41);
	CHECK_INT(st.steps_committed, ==, 40); /* held resumed at its last step */
	lr_runner_free(b.r);
	lr_client_close(c);
}

/* Relative error of a histogram quantile against the true value. */
static double off(double got, double want)
{
	return got > want ? (got - want) / want : (want - got) / want;
}

TEST(histogram_quantiles_are_within_7_percent_and_max_and_mean_are_exact)
{
	lr_hist *h = calloc(1, sizeof(*h));
	lr_hist_snap *s = calloc(1, sizeof(*s));
	CHECK(h != NULL && s != NULL);
	lr_latency l;
	lr_hist_summary(s, &l);
	CHECK(l.count == 0 && l.p50_ms == 0 && l.max_ms == 0 && l.mean_ms == 0);
	for (int us = 1; us <= 10000; us++)
		lr_hist_record(h, us);
	lr_hist_add_to(h, s);
	lr_hist_summary(s, &l);
	CHECK_INT(l.count, ==, 10000);
	CHECK(off(l.p50_ms, 5.0) < 0.07);
	CHECK(off(l.p90_ms, 9.0) < 0.07);
	CHECK(off(l.p99_ms, 9.9) < 0.07);
	CHECK(l.max_ms == 10.0);
	CHECK(off(l.mean_ms, 5.0005) < 1e-9);
	/* Small values are exact; huge ones land in the last bucket, capped by
	 * the max. */
	memset(h, 0, sizeof(*h));
	memset(s, 0, sizeof(*s));
	lr_hist_record(h, 3);
	lr_hist_add_to(h, s);
	CHECK(lr_hist_quantile_ms(s, 0.5) == 0.003);
	lr_hist_record(h, -5); /* a clock step: counted as 0 */
	lr_hist_record(h, INT64_C(1) << 50);
	memset(s, 0, sizeof(*s));
	lr_hist_add_to(h, s);
	CHECK_INT(s->count, ==, 3);
	CHECK(lr_hist_quantile_ms(s, 1.0) == (double)(INT64_C(1) << 50) / 1000.0);
	CHECK(lr_hist_quantile_ms(s, 0.0) == 0);
	free(h);
	free(s);
}


TEST_LIST(
	TEST_CASE(five_tasks_of_three_steps_count_five_claims_ten_commits_five_completions),
	TEST_CASE(a_task_s_end_rides_with_the_claim_of_the_next_one),
	TEST_CASE(failed_attempts_and_failed_tasks_are_counted_apart_from_successes),
	TEST_CASE(the_sum_over_two_runners_adds_their_counters_and_merges_their_latencies),
	TEST_CASE(a_queue_read_at_start_is_claimed_once_per_task_and_a_released_task_resumes),
	TEST_CASE(histogram_quantiles_are_within_7_percent_and_max_and_mean_are_exact),
);
TEST_MAIN(hosted_setup, hosted_teardown)
