/* test_recovery.c - a holder never abandons a claim it holds, `attempt`
 * counts starts of a step and nothing else, and hostile keys stall no
 * runner: real `leaserun worker` processes against a real etcd that the
 * tests pause (SIGSTOP) across the runners' writes. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "etcd_harness.h"
#include "fleet.h"
#include "history.h"
#include "test.h"

static etcdh_cluster *cluster;
static lr_err err;

#define MARK "echo run $LEASERUN_TASK_ID $LEASERUN_STEP $LEASERUN_ATTEMPT >> $MARKS/marks"
#define STEP(name, run) "{\"name\":\"" name "\",\"run\":\"" run "\"}"

/* etcd answers nothing for ms (longer than a call's 5 s deadline), then
 * comes back. */
static void pause_etcd(int64_t ms)
{
	CHECK(etcdh_pause(cluster, 0) == 0);
	lr_sleep_ms(ms);
	CHECK(etcdh_resume(cluster, 0) == 0);
}

/* Worker A (TTL 15 s) runs the task; etcd is paused while A writes, for
 * longer than a call's deadline; a second worker stands by. The task must
 * finish, by A, soon after etcd is back. */
static void survive_a_pause(const char *name, const char *spec, int64_t pause_after_ms)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), name);
	const char *slow[] = { "--ttl", "15", NULL };
	fleet_start(&f, 0, slow);
	fleet_start(&f, 1, slow);
	fleet_submit(&f, "p1", spec);
	CHECK_INT(fleet_wait_marks(&f, "run p1 0 ", 1, 10000), ==, 0);
	lr_sleep_ms(pause_after_ms);
	pause_etcd(6600);
	int64_t took = fleet_wait_state(&f, "p1", LR_TASK_SUCCEEDED, 12000);
	printf("# %s: done %lld ms after etcd came back\n", name, (long long)took);
	CHECK(took >= 0);
	CHECK_INT(fleet_count_marks(&f, "run p1 1 "), <=, 1);
	fleet_check_history(&f, 1);
	fleet_destroy(&f);
}

TEST(a_commit_cut_off_by_an_etcd_pause_is_sent_again_and_the_task_goes_on)
{
	/* Step 0 ends 1 s into the pause: its commit meets a silent etcd. */
	survive_a_pause("pause-commit",
	                "{\"id\":\"%s\",\"steps\":[" STEP("a", MARK "; sleep 2") ","
	                STEP("b", MARK) "]}", 1000);
}

TEST(a_completion_cut_off_by_an_etcd_pause_is_sent_again)
{
	survive_a_pause("pause-finish",
	                "{\"id\":\"%s\",\"steps\":[" STEP("a", MARK "; sleep 2") "]}", 1000);
}

TEST(an_attempt_bump_cut_off_by_an_etcd_pause_is_sent_again)
{
	/* Step 0 fails once, and its retry's bump meets the paused etcd. */
	survive_a_pause("pause-bump",
	                "{\"id\":\"%s\",\"max_attempts\":3,\"retry_backoff_ms\":1500,\"steps\":["
	                STEP("a", MARK "; test $LEASERUN_ATTEMPT -gt 1") "]}", 200);
}

/* The state a claim whose reply was lost leaves: a claim on the runner's
 * own lease that none of its workers runs. */
TEST(a_claim_of_ours_that_no_worker_runs_is_taken_up_again)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "orphan");
	fleet_start(&f, 0, NULL);
	int64_t lease = fleet_runner_lease(&f, f.names[0]);
	CHECK(lease != 0);
	lr_etcd *etcd = lr_client_etcd(f.client);
	char key[LR_KEY_SIZE], val[256];
	lr_key(f.client, LR_K_CLAIMS, "o1", key);
	snprintf(val, sizeof(val),
	         "{\"runner\":\"%s\",\"lease\":%lld,\"claimed_at\":\"2026-11-22T00:00:00.000Z\"}",
	         f.names[0], (long long)lease);
	CHECK_OK(lr_kv_put(etcd, key, val, strlen(val), lease, NULL, NULL, &err), &err);
	lr_key(f.client, LR_K_CHECKPOINTS, "o1", key);
	snprintf(val, sizeof(val),
	         "{\"next_step\":0,\"attempt\":1,\"state\":{},\"runner\":\"%s\",\"fence\":0,"
	         "\"updated_at\":\"2026-11-22T00:00:00.000Z\"}", f.names[0]);
	CHECK_OK(lr_kv_put(etcd, key, val, strlen(val), 0, NULL, NULL, &err), &err);
	fleet_submit(&f, "o1", "{\"id\":\"%s\",\"steps\":[" STEP("a", MARK) "]}");
	int64_t took = fleet_wait_state(&f, "o1", LR_TASK_SUCCEEDED, 8000);
	printf("# our own claim taken up in %lld ms\n", (long long)took);
	CHECK(took >= 0);
	CHECK_INT(fleet_count_marks(&f, "run o1 0 1"), ==, 1); /* no start counted twice */
	fleet_destroy(&f);
}

/* Worker A gets SIGTERM during step 0 of a task allowed one start per
 * step; step 0 finishes within the grace and commits. Step 1 never
 * started: worker B must be able to run it. */
TEST(a_graceful_stop_between_steps_spends_no_attempt)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "drain-commit");
	fleet_start(&f, 0, NULL);
	fleet_submit(&f, "d1", "{\"id\":\"%s\",\"max_attempts\":1,\"steps\":["
	                       STEP("s0", MARK "; sleep 1.5") "," STEP("s1", MARK) "]}");
	CHECK_INT(fleet_wait_marks(&f, "run d1 0 ", 1, 10000), ==, 0);
	kill(f.pids[0], SIGTERM);
	CHECK_INT(fleet_wait(&f, 0, 10000), ==, 0);
	fleet_start(&f, 1, NULL);
	CHECK(fleet_wait_state(&f, "d1", -1, 10000) >= 0);
	CHECK_INT(fleet_state(&f, "d1", NULL, 0, NULL, NULL), ==, LR_TASK_SUCCEEDED);
	CHECK_INT(fleet_count_marks(&f, "run d1 0 "), ==, 1);
	CHECK_INT(fleet_count_marks(&f, "run d1 1 1"), ==, 1);
	fleet_check_history(&f, 1);
	fleet_destroy(&f);
}

/* A failed attempt's backoff ends during the grace period: the retry's
 * start is counted, then given back when the runner releases instead. */
TEST(a_retry_counted_during_the_grace_period_is_given_back)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "drain-bump");
	fleet_start(&f, 0, NULL);
	fleet_submit(&f, "d2", "{\"id\":\"%s\",\"max_attempts\":2,\"retry_backoff_ms\":1500,"
	                       "\"steps\":[" STEP("s0", MARK "; test $LEASERUN_ATTEMPT -gt 1") "]}");
	CHECK_INT(fleet_wait_marks(&f, "run d2 0 1", 1, 10000), ==, 0);
	lr_sleep_ms(200); /* in the backoff wait */
	kill(f.pids[0], SIGTERM);
	CHECK_INT(fleet_wait(&f, 0, 10000), ==, 0);
	fleet_start(&f, 1, NULL);
	CHECK(fleet_wait_state(&f, "d2", -1, 10000) >= 0);
	CHECK_INT(fleet_state(&f, "d2", NULL, 0, NULL, NULL), ==, LR_TASK_SUCCEEDED);
	CHECK_INT(fleet_count_marks(&f, "run d2 0 2"), ==, 1);
	fleet_destroy(&f);
}

/* A holder killed with attempts spent; a cancel request waits for the next
 * claimer, which must end the task cancelled, not failed. */
TEST(a_cancel_found_by_a_claimer_ends_the_task_cancelled_even_with_attempts_spent)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "cancel-spent");
	fleet_start(&f, 0, NULL);
	fleet_submit(&f, "x1", "{\"id\":\"%s\",\"max_attempts\":1,\"steps\":["
	                       STEP("s0", MARK "; sleep 30") "]}");
	CHECK_INT(fleet_wait_marks(&f, "run x1 0 ", 1, 10000), ==, 0);
	kill(f.pids[0], SIGKILL);
	fleet_wait(&f, 0, 5000);
	int already = 0;
	CHECK_OK(lr_cancel(f.client, "x1", &already, &err), &err);
	CHECK_INT(already, ==, -1);
	fleet_start(&f, 1, NULL);
	CHECK(fleet_wait_state(&f, "x1", -1, 10000) >= 0);
	CHECK_INT(fleet_state(&f, "x1", NULL, 0, NULL, NULL), ==, LR_TASK_CANCELLED);
	CHECK_INT(fleet_count_marks(&f, "run x1 0 "), ==, 1);
	fleet_destroy(&f);
}

/* 999 short keys, then a key with a 600-byte id exactly at the end of the
 * first page of 1000, then more: the runner pages past it, skips it, and
 * runs the valid task; SIGTERM still stops it. */
TEST(a_long_key_at_a_page_boundary_stalls_no_runner)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "longkey");
	lr_etcd *etcd = lr_client_etcd(f.client);
	char key[1024], id[700];
	for (int i = 0; i < 999; i++) {
		char small[16];
		snprintf(small, sizeof(small), "a%04d", i);
		lr_key(f.client, LR_K_TASKS, small, key);
		CHECK_OK(lr_kv_put(etcd, key, "x", 1, 0, NULL, NULL, &err), &err);
	}
	memset(id, 'b', 600);
	id[600] = '\0';
	snprintf(key, sizeof(key), "%s%s%s", lr_client_prefix(f.client), LR_K_TASKS, id);
	CHECK_OK(lr_kv_put(etcd, key, "x", 1, 0, NULL, NULL, &err), &err);
	lr_key(f.client, LR_K_TASKS, "c-more", key);
	CHECK_OK(lr_kv_put(etcd, key, "x", 1, 0, NULL, NULL, &err), &err);
	fleet_submit(&f, "z-valid", "{\"id\":\"%s\",\"steps\":[" STEP("a", MARK) "]}");
	const char *extra[] = { "--concurrency", "8", NULL };
	fleet_start(&f, 0, extra);
	int64_t took = fleet_wait_state(&f, "z-valid", LR_TASK_SUCCEEDED, 30000);
	printf("# the valid task finished %lld ms after the runner started\n", (long long)took);
	CHECK(took >= 0);
	kill(f.pids[0], SIGTERM);
	CHECK_INT(fleet_wait(&f, 0, 15000), ==, 0);
	fleet_destroy(&f);
}

static int setup(void)
{
	etcdh_opts o = { .members = 1 };
	return etcdh_start(&o, &cluster);
}

static void teardown(void) { etcdh_destroy(cluster); }

/* A runner frozen (SIGSTOP) between two renewals renews as soon as it
 * wakes if one fell due meanwhile: gRPC's poller, interrupted by the stop,
 * would otherwise wait its whole timeout again (1.7 s here, a third of
 * the TTL at most), which with a short TTL can lose the lease. TTL 6 s:
 * renewals every 2 s; frozen 300 ms after one for 2.5 s. (etcd tells the
 * TTL left in whole seconds: at TTL 3 s a renewal every second may not
 * show.) */
TEST(a_runner_frozen_past_a_renewal_renews_as_soon_as_it_wakes)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "rec-thaw");
	const char *const extra[] = { "--ttl", "6", NULL };
	fleet_start(&f, 0, extra);
	fleet_wait_renewal(&f, 0, -1);
	lr_sleep_ms(300);
	kill(f.pids[0], SIGSTOP);
	lr_sleep_ms(2500);
	int64_t before = fleet_lease_left(&f, 0);
	int64_t woke = lr_mono_ms();
	kill(f.pids[0], SIGCONT);
	fleet_wait_renewal(&f, 0, before);
	int64_t late = lr_mono_ms() - woke;
	printf("# renewed %lld ms after SIGCONT\n", (long long)late);
	CHECK_INT(late, <, 700);
	CHECK(!fleet_log_has(&f, 0, "lost"));
	fleet_destroy(&f);
}

TEST_LIST(
	TEST_CASE(a_commit_cut_off_by_an_etcd_pause_is_sent_again_and_the_task_goes_on),
	TEST_CASE(a_completion_cut_off_by_an_etcd_pause_is_sent_again),
	TEST_CASE(an_attempt_bump_cut_off_by_an_etcd_pause_is_sent_again),
	TEST_CASE(a_claim_of_ours_that_no_worker_runs_is_taken_up_again),
	TEST_CASE(a_graceful_stop_between_steps_spends_no_attempt),
	TEST_CASE(a_retry_counted_during_the_grace_period_is_given_back),
	TEST_CASE(a_cancel_found_by_a_claimer_ends_the_task_cancelled_even_with_attempts_spent),
	TEST_CASE(a_long_key_at_a_page_boundary_stalls_no_runner),
	TEST_CASE(a_runner_frozen_past_a_renewal_renews_as_soon_as_it_wakes),
);
TEST_MAIN(setup, teardown)
