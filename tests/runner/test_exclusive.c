/* test_exclusive.c - a step's execution never outlives its claim: real
 * `leaserun worker` processes (TTL 2 s) killed, frozen past their TTL and
 * stopped, with steps that heartbeat every 50 ms; from the heartbeats, the
 * old execution's last sign of life comes before the new one's first, and
 * nothing a step started (setsid'd loops included) outlives it. */
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "etcd/lease.h"
#include "etcd_harness.h"
#include "fleet.h"
#include "history.h"
#include "marks.h"
#include "test.h"

static etcdh_cluster *cluster;

#define STEP(name, run) "{\"name\":\"" name "\",\"run\":\"" run "\"}"
/* Step 0 heartbeats for about 6 s, long after a takeover, and for 0.5 s
 * when it runs again (ten heartbeats: an old execution still alive would
 * show at the new one's first); step 1 only marks. */
#define BEATING MARK_START "; " MARK_BEATS_FIRST("120", "10") "; " MARK_END
#define TASK "{\"id\":\"%s\",\"steps\":[" STEP("beat", BEATING) "," \
             STEP("after", MARK_START "; " MARK_END) "]}"
/* The same with a loop that leaves the step's group and session, writing
 * heartbeats in the step's name (the shell's pid) until it is killed. */
#define ESCAPING "export P=$$; setsid sh -c 'while :; do echo hb $LEASERUN_TASK_ID " \
                 "$LEASERUN_STEP $LEASERUN_ATTEMPT $LEASERUN_RUNNER $LEASERUN_FENCE $P " \
                 "$($MARKS/now) >> $MARKS/marks; sleep 0.05; done' & "
#define TASK_ESCAPING "{\"id\":\"%s\",\"steps\":[" STEP("beat", MARK_START "; " ESCAPING \
                      MARK_BEATS_FIRST("120", "10") "; " MARK_END) "," \
                      STEP("after", MARK_START "; " MARK_END) "]}"

/* No two executions of one step overlapped: fail otherwise. Returns the
 * old execution's last heartbeat minus the new one's first, in ms. */
static double check_no_overlap(fleet *f, const char *scenario)
{
	mark *m = NULL;
	size_t n = 0;
	CHECK_INT(marks_read(f->dir, &m, &n), ==, 0);
	char why[512];
	int64_t gap = 0;
	size_t overlaps = marks_overlaps(m, n, &gap, why, sizeof(why));
	free(m);
	CHECK(gap != INT64_MAX); /* the step did run twice */
	double ms = -(double)gap / 1e6;
	printf("# %s: the old execution's last heartbeat minus the new one's first: "
	       "%.1f ms\n", scenario, ms);
	if (overlaps > 0)
		TEST_FAIL("%s: %s", scenario, why);
	return ms;
}

/* Every shell that wrote a mark is gone, and no state directory is left
 * in the runners' TMPDIR. */
static void check_nothing_left(fleet *f)
{
	mark *m = NULL;
	size_t n = 0;
	CHECK_INT(marks_read(f->dir, &m, &n), ==, 0);
	for (size_t i = 0; i < n; i++)
		if (kill((pid_t)m[i].pid, 0) == 0)
			TEST_FAIL("pid %ld of step %lld of %s is still alive", m[i].pid,
			          (long long)m[i].step, m[i].task);
	free(m);
	DIR *d = opendir(f->dir);
	CHECK(d != NULL);
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		if (strncmp(e->d_name, "leaserun-", 9) == 0) {
			closedir(d);
			TEST_FAIL("state directory %s/%s left behind", f->dir, e->d_name);
		}
	closedir(d);
}

/* The first heartbeat of the step's first execution, then the holder. */
static int holder_once_beating(fleet *f, const char *id)
{
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "hb %s 0 ", id);
	CHECK_INT(fleet_wait_marks(f, prefix, 3, 10000), ==, 0);
	int holder = fleet_holder(f, id);
	CHECK(holder >= 0);
	return holder;
}

TEST(a_killed_holders_step_stops_before_the_next_holder_starts_it)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "ex-kill");
	for (int i = 0; i < 2; i++)
		fleet_start(&f, i, NULL);
	fleet_submit(&f, "k1", TASK);
	int holder = holder_once_beating(&f, "k1");
	kill(f.pids[holder], SIGKILL);
	fleet_wait(&f, holder, 5000);
	CHECK(fleet_wait_state(&f, "k1", LR_TASK_SUCCEEDED, 30000) >= 0);
	check_no_overlap(&f, "SIGKILL of the holder");
	fleet_check_history(&f, -1);
	check_nothing_left(&f);
	fleet_destroy(&f);
}

TEST(a_holder_frozen_past_its_ttl_has_its_step_stopped_by_the_deadline)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "ex-stop");
	for (int i = 0; i < 2; i++)
		fleet_start(&f, i, NULL);
	fleet_submit(&f, "s1", TASK);
	int holder = holder_once_beating(&f, "s1");
	kill(f.pids[holder], SIGSTOP);
	/* Frozen well past the TTL, while the other runner takes over. */
	int64_t t0 = lr_mono_ms();
	while (fleet_holder(&f, "s1") != 1 - holder && lr_mono_ms() - t0 < 8000)
		lr_sleep_ms(20);
	CHECK_INT(fleet_holder(&f, "s1"), ==, 1 - holder);
	lr_sleep_ms(1500);
	kill(f.pids[holder], SIGCONT);
	CHECK(fleet_wait_state(&f, "s1", LR_TASK_SUCCEEDED, 30000) >= 0);
	check_no_overlap(&f, "SIGSTOP of the holder past its TTL");
	fleet_check_history(&f, -1);
	fleet_destroy(&f);
}

TEST(a_loop_that_left_the_steps_session_dies_with_the_step)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "ex-setsid");
	for (int i = 0; i < 2; i++)
		fleet_start(&f, i, NULL);
	fleet_submit(&f, "b1", TASK_ESCAPING);
	int holder = holder_once_beating(&f, "b1");
	kill(f.pids[holder], SIGKILL);
	fleet_wait(&f, holder, 5000);
	CHECK(fleet_wait_state(&f, "b1", LR_TASK_SUCCEEDED, 30000) >= 0);
	check_no_overlap(&f, "a setsid'd loop of the killed holder's step");
	/* The new execution's own loop stopped with its step too: nothing
	 * writes heartbeats any more. */
	mark *m = NULL;
	size_t before = 0, after = 0;
	CHECK_INT(marks_read(f.dir, &m, &before), ==, 0);
	free(m);
	lr_sleep_ms(300);
	CHECK_INT(marks_read(f.dir, &m, &after), ==, 0);
	free(m);
	CHECK_INT(after, ==, before);
	check_nothing_left(&f);
	fleet_destroy(&f);
}

TEST(a_graceful_handoff_overlaps_nothing_and_is_immediate)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "ex-term");
	const char *extra[] = { "--grace", "1", NULL };
	for (int i = 0; i < 2; i++)
		fleet_start(&f, i, extra);
	fleet_submit(&f, "g1", TASK);
	int holder = holder_once_beating(&f, "g1");
	kill(f.pids[holder], SIGTERM);
	CHECK_INT(fleet_wait(&f, holder, 10000), ==, 0);
	int64_t exited = lr_mono_ms();
	while (fleet_holder(&f, "g1") != 1 - holder && lr_mono_ms() - exited < 3000)
		lr_sleep_ms(2);
	printf("# handoff after SIGTERM: %lld ms after the runner exited\n",
	       (long long)(lr_mono_ms() - exited));
	CHECK_INT(fleet_holder(&f, "g1"), ==, 1 - holder);
	CHECK(fleet_wait_state(&f, "g1", LR_TASK_SUCCEEDED, 30000) >= 0);
	check_no_overlap(&f, "graceful SIGTERM handoff");
	fleet_check_history(&f, -1);
	check_nothing_left(&f);
	fleet_destroy(&f);
}

/* etcd drops a live holder's lease while its keepalive is fine (an old
 * leader's late revoke does this on etcd 3.4.23; here a revoke from
 * outside). The holder learns it from its watch at once, not at its next
 * renewal (TTL 6 s: up to 2 s away), and kills the step without the grace
 * (5 s): another runner could start it any moment. Then, told TTL 0, it
 * takes a new lease, claims the task again and runs the step anew, the
 * old execution gone before. */
TEST(a_claim_that_etcd_drops_under_a_live_holder_stops_its_step_at_once)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "ex-gone");
	const char *const extra[] = { "--ttl", "6", "--grace", "5", NULL };
	fleet_start(&f, 0, extra);
	fleet_submit(&f, "d1", TASK);
	CHECK_INT(holder_once_beating(&f, "d1"), ==, 0);
	int64_t lease = fleet_runner_lease(&f, f.names[0]);
	CHECK(lease != 0);
	lr_err err;
	CHECK_OK(lr_lease_revoke(lr_client_etcd(f.client), lease, &err), &err);
	CHECK(fleet_wait_state(&f, "d1", LR_TASK_SUCCEEDED, 30000) >= 0);
	check_no_overlap(&f, "the claim dropped by etcd");
	if (!fleet_log_has(&f, 0, "is gone from etcd although the lease lives"))
		TEST_FAIL("the holder did not stop the step when its claim was deleted; its log: "
		          "%s/%s.log", f.dir, f.names[0]);
	fleet_check_history(&f, -1);
	check_nothing_left(&f);
	fleet_destroy(&f);
}

/* A step kills its own guard: what it started outside its process group
 * comes back to the runner, which stops it before the step runs again, so
 * that the second execution does not overlap what the first left. */
TEST(a_step_that_kills_its_guard_runs_again_once_its_leftovers_are_stopped)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "ex-guard");
	fleet_start(&f, 0, NULL);
	fleet_submit(&f, "k1", "{\"id\":\"%s\",\"max_attempts\":2,\"retry_backoff_ms\":100,"
	                       "\"steps\":[" STEP("rogue", MARK_START "; " ESCAPING
	                       "sleep 0.3; kill -9 $PPID; sleep 5") "]}");
	CHECK(fleet_wait_state(&f, "k1", LR_TASK_FAILED, 20000) >= 0);
	lr_task_status st;
	lr_err err;
	CHECK_OK(lr_task_get(f.client, "k1", &st, &err), &err);
	CHECK_HAS(st.error, "guard was killed; what the step left running was stopped");
	CHECK_INT(st.attempt, ==, 2);
	lr_task_status_clear(&st);
	check_no_overlap(&f, "a step that killed its guard, and ran again");
	check_nothing_left(&f);
	fleet_destroy(&f);
}

/* A cancel's grace (20 s, the step ignoring SIGTERM; a TTL of 30 s, as a
 * grace never outlasts the lease deadline), and the claim deleted during
 * it: the task may run elsewhere at once, so the grace ends then. The
 * runner then finds the cancel request and ends the task. */
TEST(a_claim_lost_during_a_cancels_grace_ends_the_grace)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "ex-regrace");
	const char *const extra[] = { "--ttl", "30", "--grace", "20", NULL };
	fleet_start(&f, 0, extra);
	fleet_submit(&f, "r1", "{\"id\":\"%s\",\"steps\":[" STEP("beat", "trap '' TERM; "
	             MARK_START "; " MARK_BEATS("600") "; " MARK_END) "]}");
	CHECK_INT(holder_once_beating(&f, "r1"), ==, 0);
	lr_err err;
	int already = 0;
	CHECK_OK(lr_cancel(f.client, "r1", &already, &err), &err);
	lr_sleep_ms(500); /* in the grace, beating on */
	char key[LR_KEY_SIZE];
	lr_key(f.client, LR_K_CLAIMS, "r1", key);
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t deleted_ns = (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
	CHECK_OK(lr_kv_delete(lr_client_etcd(f.client), key, 0, NULL, NULL, &err), &err);
	CHECK(fleet_wait_state(&f, "r1", LR_TASK_CANCELLED, 30000) >= 0);
	mark *m = NULL;
	size_t n = 0;
	CHECK_INT(marks_read(f.dir, &m, &n), ==, 0);
	int64_t last_ns = 0;
	for (size_t i = 0; i < n; i++)
		if (m[i].kind == MARK_KIND_HB && m[i].ns > last_ns)
			last_ns = m[i].ns;
	free(m);
	printf("# last heartbeat %.0f ms after the claim was deleted\n",
	       (double)(last_ns - deleted_ns) / 1e6);
	CHECK(last_ns - deleted_ns < 3000000000LL);
	check_nothing_left(&f);
	fleet_destroy(&f);
}

static int setup(void)
{
	etcdh_opts o = { .members = 1 };
	return etcdh_start(&o, &cluster);
}

static void teardown(void) { etcdh_destroy(cluster); }

/* A stall shorter than the TTL, of the runner or of etcd, long enough
 * that no renewal comes before the guard must stop the step: the step is
 * interrupted, not failed. Once a renewal comes it runs again under the
 * same attempt, so a task allowed one attempt still succeeds. TTL 6 s:
 * renewals every 2 s, and the guard stops the step 1.7 s before the
 * deadline; the stall starts 0.3 s after a renewal and lasts 4.8 s, so the
 * guard has acted (0.8 s before its end) and the lease still lives (0.9 s
 * left) when it ends. The step beats
 * until the stall is over (file go). */
#define UNTIL_GO MARK_START "; i=0; while [ ! -e $MARKS/go ] && [ $i -lt 600 ]; do " MARK_HB \
                 "; sleep 0.05; i=$((i+1)); done; " MARK_END
#define ONE_ATTEMPT "{\"id\":\"%s\",\"max_attempts\":1,\"steps\":[" STEP("beat", UNTIL_GO) \
                    "," STEP("after", MARK_START "; " MARK_END) "]}"

static void check_ran_again_after_a_stall(fleet *f, const char *id, const char *scenario)
{
	char go[300];
	snprintf(go, sizeof(go), "%s/go", f->dir);
	FILE *g = fopen(go, "w");
	CHECK(g != NULL);
	fclose(g);
	CHECK(fleet_wait_state(f, id, LR_TASK_SUCCEEDED, 40000) >= 0);
	if (!fleet_log_has(f, 0, "interrupted"))
		TEST_FAIL("%s: the step was not interrupted; its log: %s/%s.log", scenario, f->dir,
		          f->names[0]);
	check_no_overlap(f, scenario);
	fleet_check_history(f, -1);
	check_nothing_left(f);
}

TEST(a_runner_frozen_for_less_than_its_ttl_runs_the_stopped_step_again)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "ex-freeze");
	const char *const extra[] = { "--ttl", "6", "--grace", "5", NULL };
	fleet_start(&f, 0, extra);
	fleet_submit(&f, "z1", ONE_ATTEMPT);
	CHECK_INT(holder_once_beating(&f, "z1"), ==, 0);
	fleet_wait_renewal(&f, 0, -1);
	lr_sleep_ms(300); /* its reply reached the runner */
	kill(f.pids[0], SIGSTOP);
	lr_sleep_ms(4800);
	kill(f.pids[0], SIGCONT);
	check_ran_again_after_a_stall(&f, "z1", "the runner frozen for 4.8 s of a 6 s TTL");
	fleet_destroy(&f);
}

TEST(an_etcd_stalled_for_less_than_the_ttl_costs_the_stopped_step_no_attempt)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "ex-stall");
	const char *const extra[] = { "--ttl", "6", "--grace", "5", NULL };
	fleet_start(&f, 0, extra);
	fleet_submit(&f, "z2", ONE_ATTEMPT);
	CHECK_INT(holder_once_beating(&f, "z2"), ==, 0);
	fleet_wait_renewal(&f, 0, -1);
	lr_sleep_ms(300); /* its reply reached the runner */
	CHECK_INT(etcdh_pause(cluster, 0), ==, 0);
	lr_sleep_ms(4800);
	CHECK_INT(etcdh_resume(cluster, 0), ==, 0);
	check_ran_again_after_a_stall(&f, "z2", "etcd stalled for 4.8 s of a 6 s TTL");
	fleet_destroy(&f);
}

TEST_LIST(
	TEST_CASE(a_claim_lost_during_a_cancels_grace_ends_the_grace),
	TEST_CASE(a_step_that_kills_its_guard_runs_again_once_its_leftovers_are_stopped),
	TEST_CASE(a_killed_holders_step_stops_before_the_next_holder_starts_it),
	TEST_CASE(a_holder_frozen_past_its_ttl_has_its_step_stopped_by_the_deadline),
	TEST_CASE(a_loop_that_left_the_steps_session_dies_with_the_step),
	TEST_CASE(a_graceful_handoff_overlaps_nothing_and_is_immediate),
	TEST_CASE(a_claim_that_etcd_drops_under_a_live_holder_stops_its_step_at_once),
	TEST_CASE(a_runner_frozen_for_less_than_its_ttl_runs_the_stopped_step_again),
	TEST_CASE(an_etcd_stalled_for_less_than_the_ttl_costs_the_stopped_step_no_attempt),
);
TEST_MAIN(setup, teardown)
