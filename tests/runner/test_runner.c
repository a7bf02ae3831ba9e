/* test_runner.c - the runner and `leaserun worker` against a real etcd:
 * real runner processes, killed, paused and stopped, with TTL 2 s. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd/member.h"
#include "etcd_harness.h"
#include "fleet.h"
#include "history.h"
#include "marks.h"
#include "test.h"

static etcdh_cluster *cluster;
static lr_err err;

/* A step that leaves a line "run <task> <step> <attempt>" in the marks. */
#define MARK "echo run $LEASERUN_TASK_ID $LEASERUN_STEP $LEASERUN_ATTEMPT >> $MARKS/marks"
#define STEP(name, run) "{\"name\":\"" name "\",\"run\":\"" run "\"}"

static int other_than(int i) { return i == 0 ? 1 : 0; }

/* A step's parent is its guard; the guard's parent is the runner. */
#define KILL_RUNNER "kill -9 $(cut -d' ' -f4 /proc/$PPID/stat)"

TEST(three_runners_run_thirty_tasks_and_commit_each_step_once)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "thirty");
	const char *extra[] = { "--concurrency", "2", NULL };
	for (int i = 0; i < 3; i++)
		fleet_start(&f, i, extra);
	for (int t = 0; t < 30; t++) {
		char id[16];
		snprintf(id, sizeof(id), "t%02d", t);
		fleet_submit(&f, id, "{\"id\":\"%s\",\"steps\":[" STEP("a", MARK) "," STEP("b", MARK)
		                     "," STEP("c", MARK) "]}");
	}
	for (int t = 0; t < 30; t++) {
		char id[16];
		snprintf(id, sizeof(id), "t%02d", t);
		CHECK(fleet_wait_state(&f, id, LR_TASK_SUCCEEDED, 60000) >= 0);
		for (int s = 0; s < 3; s++) {
			char want[32];
			snprintf(want, sizeof(want), "run %s %d ", id, s);
			CHECK_INT(fleet_count_marks(&f, want), ==, 1);
		}
	}
	fleet_check_history(&f, 30);
	fleet_destroy(&f);
}

TEST(sigkill_of_the_holder_mid_step_reruns_that_step_elsewhere)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "sigkill");
	for (int i = 0; i < 3; i++)
		fleet_start(&f, i, NULL);
	fleet_submit(&f, "k1", "{\"id\":\"%s\",\"steps\":[" STEP("a", MARK) ","
	                       STEP("b", MARK "; " MARK_SLEEP_FIRST("4", "0.2")) "," STEP("c", MARK) "]}");
	CHECK_INT(fleet_wait_marks(&f, "run k1 1 ", 1, 10000), ==, 0);
	int holder = fleet_holder(&f, "k1");
	CHECK(holder >= 0);
	kill(f.pids[holder], SIGKILL);
	int64_t t0 = lr_mono_ms();
	fleet_wait(&f, holder, 5000);
	int64_t took = -1;
	while (lr_mono_ms() - t0 < 6000) {
		int h = fleet_holder(&f, "k1");
		if (h >= 0 && h != holder) {
			took = lr_mono_ms() - t0;
			break;
		}
		lr_sleep_ms(10);
	}
	printf("# takeover after SIGKILL: %lld ms (TTL 2 s)\n", (long long)took);
	/* The target is TTL + 1 s (scripts/bench-failover measures it); the
	 * check only catches a takeover that waits for something else. */
	CHECK(took >= 0);
	CHECK_INT(took, <=, 5000);
	CHECK(fleet_wait_state(&f, "k1", LR_TASK_SUCCEEDED, 20000) >= 0);
	CHECK_INT(fleet_count_marks(&f, "run k1 0 "), ==, 1); /* not re-run */
	CHECK_INT(fleet_count_marks(&f, "run k1 1 "), ==, 2); /* re-run */
	CHECK_INT(fleet_count_marks(&f, "run k1 2 "), ==, 1);
	fleet_check_history(&f, 1);
	fleet_destroy(&f);
}

TEST(a_paused_holder_commits_nothing_after_waking_and_keeps_serving)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "sigstop");
	for (int i = 0; i < 2; i++)
		fleet_start(&f, i, NULL);
	fleet_submit(&f, "p1", "{\"id\":\"%s\",\"steps\":[" STEP("a", MARK) ","
	                       STEP("b", MARK "; sleep 3") "," STEP("c", MARK) "]}");
	CHECK_INT(fleet_wait_marks(&f, "run p1 1 ", 1, 10000), ==, 0);
	int paused = fleet_holder(&f, "p1");
	CHECK(paused >= 0);
	kill(f.pids[paused], SIGSTOP);
	int64_t t0 = lr_mono_ms();
	while (fleet_holder(&f, "p1") != other_than(paused) && lr_mono_ms() - t0 < 8000)
		lr_sleep_ms(20);
	CHECK_INT(fleet_holder(&f, "p1"), ==, other_than(paused));
	printf("# takeover from a paused runner: %lld ms\n", (long long)(lr_mono_ms() - t0));
	lr_sleep_ms(1500); /* the paused runner's own step finishes meanwhile */
	kill(f.pids[paused], SIGCONT);
	CHECK(fleet_wait_state(&f, "p1", LR_TASK_SUCCEEDED, 20000) >= 0);
	fleet_check_history(&f, 1);
	/* It woke up, lost nothing but its lease, and serves again. */
	CHECK_INT(waitpid(f.pids[paused], NULL, WNOHANG), ==, 0);
	kill(f.pids[other_than(paused)], SIGKILL);
	fleet_wait(&f, other_than(paused), 5000);
	fleet_submit(&f, "p2", "{\"id\":\"%s\",\"steps\":[" STEP("a", MARK) "]}");
	CHECK(fleet_wait_state(&f, "p2", LR_TASK_SUCCEEDED, 15000) >= 0);
	fleet_check_history(&f, 2);
	fleet_destroy(&f);
}

TEST(sigterm_hands_the_task_over_at_once_not_at_lease_expiry)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "sigterm");
	const char *extra[] = { "--grace", "1", NULL };
	for (int i = 0; i < 2; i++)
		fleet_start(&f, i, extra);
	fleet_submit(&f, "g1", "{\"id\":\"%s\",\"steps\":[" STEP("a", MARK) ","
	                       STEP("b", MARK "; " MARK_SLEEP_FIRST("5", "0.2")) "," STEP("c", MARK) "]}");
	CHECK_INT(fleet_wait_marks(&f, "run g1 1 ", 1, 10000), ==, 0);
	int holder = fleet_holder(&f, "g1");
	CHECK(holder >= 0);
	kill(f.pids[holder], SIGTERM);
	CHECK_INT(fleet_wait(&f, holder, 10000), ==, 0);
	int64_t exited = lr_mono_ms();
	while (fleet_holder(&f, "g1") != other_than(holder) && lr_mono_ms() - exited < 3000)
		lr_sleep_ms(2);
	int64_t took = lr_mono_ms() - exited;
	printf("# handoff after SIGTERM: %lld ms after the runner exited\n", (long long)took);
	/* The target is 200 ms (a benchmark figure, printed above); the
	 * check only catches a handoff left to the lease's expiry (2 s). */
	CHECK_INT(took, <, 1500);
	/* The interrupted attempt was given back: the new holder is at 1. */
	int64_t next = -1, attempt = -1;
	fleet_state(&f, "g1", NULL, 0, &next, &attempt);
	CHECK_INT(next, ==, 1);
	CHECK_INT(attempt, ==, 1);
	CHECK(fleet_wait_state(&f, "g1", LR_TASK_SUCCEEDED, 20000) >= 0);
	fleet_check_history(&f, 1);
	fleet_destroy(&f);
}

TEST(a_step_that_always_fails_ends_failed_after_max_attempts)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "failing");
	fleet_start(&f, 0, NULL);
	fleet_submit(&f, "f1", "{\"id\":\"%s\",\"max_attempts\":3,\"retry_backoff_ms\":10,"
	                       "\"steps\":[" STEP("flaky", MARK "; printf 'oops \\\\377\\\\n' >&2; exit 3")
	                       "]}");
	CHECK(fleet_wait_state(&f, "f1", -1, 20000) >= 0);
	lr_task_status st;
	CHECK_OK(lr_task_get(f.client, "f1", &st, &err), &err);
	CHECK_INT(st.state, ==, LR_TASK_FAILED);
	CHECK_HAS(st.error, "step flaky");
	CHECK_HAS(st.error, "exit status 3");
	CHECK_HAS(st.error, "oops \xEF\xBF\xBD"); /* a byte that is no UTF-8 */
	CHECK_HAS(st.error, "3 attempts");
	lr_task_status_clear(&st);
	CHECK_INT(fleet_count_marks(&f, "run f1 0 "), ==, 3);
	fleet_check_history(&f, 1);
	fleet_destroy(&f);
}

TEST(a_step_that_kills_its_runner_ends_failed_after_max_attempts_claims)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "killer");
	for (int i = 0; i < 3; i++)
		fleet_start(&f, i, NULL);
	fleet_submit(&f, "x1", "{\"id\":\"%s\",\"max_attempts\":2,"
	                       "\"steps\":[" STEP("boom", MARK "; " KILL_RUNNER "; sleep 5") "]}");
	CHECK(fleet_wait_state(&f, "x1", -1, 30000) >= 0);
	lr_task_status st;
	CHECK_OK(lr_task_get(f.client, "x1", &st, &err), &err);
	CHECK_INT(st.state, ==, LR_TASK_FAILED);
	CHECK_HAS(st.error, "step boom started 2 times without finishing");
	lr_task_status_clear(&st);
	CHECK_INT(fleet_count_marks(&f, "run x1 0 "), ==, 2);
	fleet_check_history(&f, 1);
	fleet_destroy(&f);
}

TEST(cancel_of_a_pending_task_ends_it_at_once)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "cancelp");
	fleet_submit(&f, "c1", "{\"id\":\"%s\",\"steps\":[" STEP("a", MARK) "]}");
	int already = 0;
	CHECK_OK(lr_cancel(f.client, "c1", &already, &err), &err);
	CHECK_INT(already, ==, -1);
	CHECK_INT(fleet_state(&f, "c1", NULL, 0, NULL, NULL), ==, LR_TASK_CANCELLED);
	fleet_start(&f, 0, NULL); /* a runner now has nothing to do */
	lr_sleep_ms(300);
	CHECK_INT(fleet_count_marks(&f, "run c1"), ==, 0);
	fleet_destroy(&f);
}

TEST(cancel_of_a_running_task_stops_its_step_and_records_cancelled)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "cancelr");
	const char *extra[] = { "--grace", "1", NULL };
	fleet_start(&f, 0, extra);
	fleet_submit(&f, "c2", "{\"id\":\"%s\",\"steps\":[" STEP("long", MARK "; sleep 30") ","
	                       STEP("never", MARK) "]}");
	CHECK_INT(fleet_wait_marks(&f, "run c2 0 ", 1, 10000), ==, 0);
	int already = 0;
	CHECK_OK(lr_cancel(f.client, "c2", &already, &err), &err);
	int64_t took = fleet_wait_state(&f, "c2", LR_TASK_CANCELLED, 5000);
	printf("# running task cancelled in %lld ms\n", (long long)took);
	CHECK(took >= 0);
	CHECK_INT(fleet_count_marks(&f, "run c2 1 "), ==, 0);
	CHECK_OK(lr_cancel(f.client, "c2", &already, &err), &err);
	CHECK_INT(already, ==, LR_TASK_CANCELLED);
	fleet_check_history(&f, 1);
	fleet_destroy(&f);
}

TEST(exit_when_idle_exits_zero_once_nothing_is_pending_or_claimed)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "idle");
	for (int t = 0; t < 3; t++) {
		char id[8];
		snprintf(id, sizeof(id), "i%d", t);
		fleet_submit(&f, id, "{\"id\":\"%s\",\"steps\":[" STEP("a", MARK "; sleep 0.5") "]}");
	}
	const char *extra[] = { "--exit-when-idle", NULL };
	fleet_start(&f, 0, extra);
	CHECK_INT(fleet_wait(&f, 0, 20000), ==, 0);
	for (int t = 0; t < 3; t++) {
		char id[8];
		snprintf(id, sizeof(id), "i%d", t);
		CHECK_INT(fleet_state(&f, id, NULL, 0, NULL, NULL), ==, LR_TASK_SUCCEEDED);
	}
	/* An etcd that can revoke a renewed lease is named at start, and only
	 * such an etcd. */
	char version[64];
	CHECK_OK(lr_etcd_member_version(lr_client_etcd(f.client), version, sizeof(version), &err),
	         &err);
	bool warned = fleet_log_has(&f, 0, "can revoke a lease that was renewed in time");
	fprintf(stderr, "   etcd %s: %s\n", version, warned ? "warned of" : "not warned of");
	CHECK(warned == lr_etcd_version_revokes_live_leases(version));
	CHECK(!warned || fleet_log_has(&f, 0, version));
	fleet_destroy(&f);
}

TEST(a_runner_name_held_by_a_live_runner_cannot_be_taken)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "names");
	fleet_start(&f, 0, NULL);
	/* A second process asking for the same name gives up with exit 1. */
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "'%s' worker --endpoints %s --prefix %s --name %s 2>%s/dup.err",
	         getenv("LEASERUN_BIN"), f.endpoints, f.prefix, f.names[0], f.dir);
	int status = system(cmd);
	CHECK(WIFEXITED(status));
	CHECK_INT(WEXITSTATUS(status), ==, 1);
	char path[320], msg[1024] = "";
	snprintf(path, sizeof(path), "%s/dup.err", f.dir);
	FILE *fp = fopen(path, "r");
	CHECK(fp != NULL);
	size_t n = fread(msg, 1, sizeof(msg) - 1, fp);
	msg[n] = '\0';
	fclose(fp);
	CHECK_HAS(msg, "runner name r0 is in use");
	CHECK_HAS(msg, f.endpoints);
	/* When it frees, should that runner have died. */
	CHECK_HAS(msg, "s left; if that runner has died, the name is free once the lease expires");
	/* The first runner is unharmed. */
	fleet_submit(&f, "n1", "{\"id\":\"%s\",\"steps\":[" STEP("a", MARK) "]}");
	CHECK(fleet_wait_state(&f, "n1", LR_TASK_SUCCEEDED, 10000) >= 0);
	fleet_destroy(&f);
}

static int setup(void)
{
	etcdh_opts o = { .members = 1 };
	return etcdh_start(&o, &cluster);
}

static void teardown(void) { etcdh_destroy(cluster); }

TEST_LIST(
	TEST_CASE(three_runners_run_thirty_tasks_and_commit_each_step_once),
	TEST_CASE(sigkill_of_the_holder_mid_step_reruns_that_step_elsewhere),
	TEST_CASE(a_paused_holder_commits_nothing_after_waking_and_keeps_serving),
	TEST_CASE(sigterm_hands_the_task_over_at_once_not_at_lease_expiry),
	TEST_CASE(a_step_that_always_fails_ends_failed_after_max_attempts),
	TEST_CASE(a_step_that_kills_its_runner_ends_failed_after_max_attempts_claims),
	TEST_CASE(cancel_of_a_pending_task_ends_it_at_once),
	TEST_CASE(cancel_of_a_running_task_stops_its_step_and_records_cancelled),
	TEST_CASE(exit_when_idle_exits_zero_once_nothing_is_pending_or_claimed),
	TEST_CASE(a_runner_name_held_by_a_live_runner_cannot_be_taken),
);
TEST_MAIN(setup, teardown)
