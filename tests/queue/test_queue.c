/* test_queue.c - priorities, delayed tasks, dependencies and retry, with
 * real `leaserun worker` processes against a real etcd (TTL 2 s). */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "etcd_harness.h"
#include "fleet.h"
#include "test.h"

static etcdh_cluster *cluster;
static lr_err err;

/* A step that leaves "run <task> <step> <wall ns>" in the marks. */
#define MARK "echo run $LEASERUN_TASK_ID $LEASERUN_STEP $(date +%%s%%N) >> $MARKS/marks"
#define STEP(name, run) "{\"name\":\"" name "\",\"run\":\"" run "\"}"

/* The marks file's lines starting with "run ", in order: task ids and
 * times. Returns how many. */
static int read_runs(fleet *f, char ids[][LR_ID_SIZE], long long *ns, int max)
{
	char path[320], line[512];
	snprintf(path, sizeof(path), "%s/marks", f->dir);
	FILE *fp = fopen(path, "r");
	int n = 0;
	while (fp != NULL && n < max && fgets(line, sizeof(line), fp) != NULL) {
		int step;
		long long t;
		if (sscanf(line, "run %199s %d %lld", ids[n], &step, &t) == 3) {
			if (ns != NULL)
				ns[n] = t;
			n++;
		}
	}
	if (fp != NULL)
		fclose(fp);
	return n;
}

static int index_of(char ids[][LR_ID_SIZE], int n, const char *id)
{
	for (int i = 0; i < n; i++)
		if (strcmp(ids[i], id) == 0)
			return i;
	return -1;
}

/* How many keys the task has left under the prefix, of any kind. */
static int64_t keys_of(fleet *f, const char *kind, const char *id)
{
	char key[LR_KEY_SIZE];
	lr_key(f->client, kind, id, key);
	lr_range_result r = { 0 };
	CHECK_OK(lr_kv_get(lr_client_etcd(f->client), key, &r, &err), &err);
	int64_t n = (int64_t)r.n;
	lr_range_result_free(&r);
	return n;
}

static const char *error_of(fleet *f, const char *id, char *buf, size_t size)
{
	lr_task_status s;
	CHECK_OK(lr_task_get(f->client, id, &s, &err), &err);
	snprintf(buf, size, "%s", s.error != NULL ? s.error : "");
	lr_task_status_clear(&s);
	return buf;
}

/* ---- priority ------------------------------------------------------------- */

TEST(priorities_order_a_backlog_higher_first)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "prio");
	static const int prio[] = { 0, -5, 10, 0, 100, -100, 10, 3 };
	enum { N = sizeof(prio) / sizeof(prio[0]) };
	for (int i = 0; i < N; i++) {
		char spec[512], out[LR_ID_SIZE];
		/* MARK's own %% signs go through one snprintf, not two. */
		snprintf(spec, sizeof(spec),
		         "{\"id\":\"p%d\",\"priority\":%d,\"steps\":[" STEP("a", MARK) "]}",
		         i, prio[i]);
		CHECK_OK(lr_submit_text(f.client, spec, strlen(spec), NULL, out, NULL, &err),
		         &err);
	}
	const char *extra[] = { "--concurrency", "1", NULL };
	fleet_start(&f, 0, extra);
	CHECK_INT(fleet_wait_marks(&f, "run ", N, 30000), ==, 0);
	char ids[N][LR_ID_SIZE];
	CHECK_INT(read_runs(&f, ids, NULL, N), ==, N);
	int last = 1000;
	for (int i = 0; i < N; i++) {
		int p = prio[atoi(ids[i] + 1)];
		printf("# %d: %s (priority %d)\n", i, ids[i], p);
		CHECK_INT(p, <=, last);
		last = p;
	}
	fleet_destroy(&f);
}

/* ---- not_before ------------------------------------------------------------- */

static void submit_at(fleet *f, const char *id, int64_t at_ms, const char *steps)
{
	char when[LR_TIME_BUF], spec[1024];
	lr_rfc3339_format(at_ms, when);
	snprintf(spec, sizeof(spec), "{\"id\":\"%%s\",\"not_before\":\"%s\",\"steps\":[%s]}",
	         when, steps);
	fleet_submit(f, id, spec);
}

/* A fleet of two idle runners. */
static void two_runners(fleet *f, const char *name)
{
	fleet_init(f, etcdh_endpoints(cluster), name);
	fleet_start(f, 0, NULL);
	fleet_start(f, 1, NULL);
}

/* Wait for task id's step to start; how late (ms) it started after at. */
static long long started_late(fleet *f, const char *id, int64_t at)
{
	char mark[64], ids[1][LR_ID_SIZE];
	long long ns[1];
	snprintf(mark, sizeof(mark), "run %s ", id);
	CHECK_INT(fleet_wait_marks(f, mark, 1, 15000), ==, 0);
	CHECK_INT(read_runs(f, ids, ns, 1), ==, 1);
	return ns[0] / 1000000 - at;
}

TEST(a_delayed_task_starts_on_time_with_idle_runners)
{
	fleet f;
	two_runners(&f, "delay");
	/* Whole milliseconds: not_before is stored to the millisecond. */
	int64_t at = lr_wall_ms() + 1500;
	submit_at(&f, "d1", at, STEP("a", MARK));
	lr_sleep_ms(500);
	CHECK_INT(fleet_count_marks(&f, "run d1 "), ==, 0);
	long long late_ms = started_late(&f, "d1", at);
	printf("# delayed task started %lld ms after its not_before (step start, "
	       "shell and guard included)\n", late_ms);
	CHECK_INT(late_ms, >=, 0); /* never early */
	CHECK(fleet_wait_state(&f, "d1", LR_TASK_SUCCEEDED, 10000) >= 0);
	fleet_destroy(&f);
}

TEST(a_delayed_task_survives_the_restart_of_every_runner)
{
	fleet f;
	two_runners(&f, "restart");
	int64_t at = lr_wall_ms() + 3000;
	submit_at(&f, "s1", at, STEP("a", MARK));
	lr_sleep_ms(500);
	kill(f.pids[0], SIGKILL);
	kill(f.pids[1], SIGTERM);
	CHECK_INT(fleet_wait(&f, 0, 5000), ==, -1);
	CHECK_INT(fleet_wait(&f, 1, 5000), ==, 0);
	CHECK_INT(fleet_state(&f, "s1", NULL, 0, NULL, NULL), ==, LR_TASK_PENDING);
	fleet_start(&f, 2, NULL);
	fleet_start(&f, 3, NULL);
	long long late_ms = started_late(&f, "s1", at);
	printf("# after a restart of every runner, started %lld ms after not_before\n",
	       late_ms);
	CHECK_INT(late_ms, >=, 0);
	CHECK(fleet_wait_state(&f, "s1", LR_TASK_SUCCEEDED, 10000) >= 0);
	CHECK_INT(fleet_count_marks(&f, "run s1 "), ==, 1);
	fleet_destroy(&f);
}

TEST(status_says_a_delayed_task_waits_for_its_time)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "waitstatus");
	submit_at(&f, "w1", lr_wall_ms() + 3600 * 1000, STEP("a", MARK));
	lr_task_status s;
	CHECK_OK(lr_task_get(f.client, "w1", &s, &err), &err);
	CHECK_OK(lr_task_waits(f.client, &s, 1, &err), &err);
	CHECK(s.waiting != NULL);
	CHECK_HAS(s.waiting, "not before ");
	lr_task_status_clear(&s);
	/* A long list reads turn/ in one walk: the same answers. */
	for (int i = 0; i < 20; i++) {
		char id[16];
		snprintf(id, sizeof(id), "w%02d", i + 2);
		submit_at(&f, id, lr_wall_ms() + 3600 * 1000, STEP("a", MARK));
	}
	fleet_submit(&f, "plain", "{\"id\":\"%s\",\"steps\":[" STEP("a", "true") "]}");
	lr_task_status *list;
	size_t n;
	CHECK_OK(lr_task_list(f.client, -1, 0, &list, &n, &err), &err);
	CHECK_OK(lr_task_waits(f.client, list, n, &err), &err);
	CHECK_INT(n, ==, 22);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(list[i].id, "plain") == 0) {
			CHECK(list[i].waiting == NULL);
		} else {
			CHECK(list[i].waiting != NULL);
			CHECK_HAS(list[i].waiting, "not before ");
		}
	}
	lr_task_list_free(list, n);
	fleet_destroy(&f);
}

/* ---- after ---------------------------------------------------------------- */

TEST(a_diamond_of_dependencies_runs_in_a_valid_order_despite_a_killed_runner)
{
	fleet f;
	two_runners(&f, "diamond");
	fleet_submit(&f, "a", "{\"id\":\"%s\",\"steps\":[" STEP("x", MARK) "]}");
	fleet_submit(&f, "b", "{\"id\":\"%s\",\"after\":[\"a\"],\"steps\":["
	                      STEP("x", MARK "; sleep 2") "]}");
	fleet_submit(&f, "c", "{\"id\":\"%s\",\"after\":[\"a\"],\"steps\":[" STEP("x", MARK) "]}");
	fleet_submit(&f, "d", "{\"id\":\"%s\",\"after\":[\"b\",\"c\"],\"steps\":["
	                      STEP("x", MARK) "]}");
	/* The holder of b dies mid-step: b runs again elsewhere, d waits. */
	CHECK_INT(fleet_wait_marks(&f, "run b ", 1, 10000), ==, 0);
	int holder = fleet_holder(&f, "b");
	CHECK(holder >= 0);
	kill(f.pids[holder], SIGKILL);
	fleet_wait(&f, holder, 5000);
	CHECK(fleet_wait_state(&f, "d", LR_TASK_SUCCEEDED, 30000) >= 0);
	char ids[8][LR_ID_SIZE];
	int n = read_runs(&f, ids, NULL, 8);
	CHECK_INT(n, ==, 5); /* b twice */
	int a = index_of(ids, n, "a"), b = index_of(ids, n, "b"), c = index_of(ids, n, "c");
	int d = index_of(ids, n, "d");
	CHECK(a == 0);
	CHECK(b > a && c > a);
	CHECK_INT(d, ==, n - 1);
	for (int i = 0; i < 4; i++)
		CHECK_INT(fleet_state(&f, (const char *[]){ "a", "b", "c", "d" }[i], NULL, 0, NULL,
		                      NULL), ==, LR_TASK_SUCCEEDED);
	fleet_destroy(&f);
}

TEST(a_failed_dependency_fails_its_dependents_without_running_them)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "depfail");
	fleet_submit(&f, "a", "{\"id\":\"%s\",\"max_attempts\":1,\"steps\":["
	                      STEP("x", MARK "; exit 3") "]}");
	fleet_submit(&f, "b", "{\"id\":\"%s\",\"after\":[\"a\"],\"steps\":[" STEP("x", MARK) "]}");
	fleet_submit(&f, "c", "{\"id\":\"%s\",\"after\":[\"b\"],\"steps\":[" STEP("x", MARK) "]}");
	fleet_start(&f, 0, NULL);
	CHECK(fleet_wait_state(&f, "c", LR_TASK_FAILED, 20000) >= 0);
	CHECK_INT(fleet_state(&f, "a", NULL, 0, NULL, NULL), ==, LR_TASK_FAILED);
	CHECK_INT(fleet_state(&f, "b", NULL, 0, NULL, NULL), ==, LR_TASK_FAILED);
	char e[1024];
	CHECK_HAS(error_of(&f, "b", e, sizeof(e)), "after: task a failed");
	CHECK_HAS(error_of(&f, "c", e, sizeof(e)), "after: task b failed");
	CHECK_INT(fleet_count_marks(&f, "run b "), ==, 0);
	CHECK_INT(fleet_count_marks(&f, "run c "), ==, 0);
	fleet_destroy(&f);
}

TEST(an_unknown_dependency_is_refused_at_submit_and_nothing_is_stored)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "depunknown");
	const char *spec = "{\"id\":\"u1\",\"after\":[\"nope\"],\"steps\":[" STEP("x", "true") "]}";
	char out[LR_ID_SIZE];
	CHECK_INT(lr_submit_text(f.client, spec, strlen(spec), NULL, out, NULL, &err), ==,
	          LR_ENOTFOUND);
	CHECK_HAS(err.msg, "after[0]: no such task \"nope\"");
	CHECK_INT(keys_of(&f, LR_K_TASKS, "u1"), ==, 0);
	CHECK_INT(keys_of(&f, LR_K_TURN, "u1"), ==, 0);
	fleet_destroy(&f);
}

/* ---- retry ------------------------------------------------------------------ */

/* Step 0 puts {"n":1} in the state; step 1 records the state it got and
 * fails until $MARKS/fix exists. */
#define RETRY_SPEC                                                                  \
	"{\"id\":\"%s\",\"max_attempts\":1,\"state\":{\"n\":0},\"steps\":["          \
	STEP("one", MARK "; echo '{\\\"n\\\":1}' > $LEASERUN_STATE_OUT") ","        \
	STEP("two", MARK "; echo state $(cat $LEASERUN_STATE_IN) >> $MARKS/marks; " \
	            "test -e $MARKS/fix") "]}"

static void fix(fleet *f)
{
	char path[320];
	snprintf(path, sizeof(path), "%s/fix", f->dir);
	FILE *fp = fopen(path, "w");
	CHECK(fp != NULL);
	fclose(fp);
}

TEST(retry_resumes_at_the_failed_step_with_its_state_and_keeps_history)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "retry");
	fleet_start(&f, 0, NULL);
	fleet_submit(&f, "r1", RETRY_SPEC);
	CHECK(fleet_wait_state(&f, "r1", LR_TASK_FAILED, 15000) >= 0);
	/* Refused for a task that is not failed or cancelled. */
	fleet_submit(&f, "ok", "{\"id\":\"%s\",\"steps\":[" STEP("x", "true") "]}");
	CHECK(fleet_wait_state(&f, "ok", LR_TASK_SUCCEEDED, 15000) >= 0);
	CHECK_INT(lr_retry(f.client, "ok", NULL, &err), ==, LR_ESTATE);
	CHECK_HAS(err.msg, "succeeded");
	CHECK_INT(lr_retry(f.client, "nope", NULL, &err), ==, LR_ENOTFOUND);
	lr_retry_opts beyond = { .from_step_set = 1, .from_step = 2 };
	CHECK_INT(lr_retry(f.client, "r1", &beyond, &err), ==, LR_EINVAL);

	fix(&f);
	CHECK_OK(lr_retry(f.client, "r1", NULL, &err), &err);
	CHECK(fleet_wait_state(&f, "r1", LR_TASK_SUCCEEDED, 15000) >= 0);
	CHECK_INT(fleet_count_marks(&f, "run r1 0 "), ==, 1); /* not run again */
	CHECK_INT(fleet_count_marks(&f, "run r1 1 "), ==, 2);
	CHECK_INT(fleet_count_marks(&f, "state {\"n\":1}"), ==, 2);
	lr_task_status s;
	CHECK_OK(lr_task_get(f.client, "r1", &s, &err), &err);
	CHECK_INT(s.n_history, ==, 1);
	CHECK_INT(s.history[0].state, ==, LR_TASK_FAILED);
	CHECK_INT(s.history[0].step, ==, 1);
	CHECK(s.history[0].error != NULL);
	CHECK_HAS(s.history[0].error, "two");
	CHECK_STR(s.history[0].runner, "r0");
	CHECK(s.history[0].finished_at != NULL);
	CHECK_INT(s.attempt, ==, 1); /* counted afresh */
	lr_task_status_clear(&s);
	CHECK_INT(lr_retry(f.client, "r1", NULL, &err), ==, LR_ESTATE);
	fleet_destroy(&f);
}

TEST(retry_from_step_zero_with_reset_state_starts_over)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "retryzero");
	fleet_start(&f, 0, NULL);
	fleet_submit(&f, "r2", RETRY_SPEC);
	CHECK(fleet_wait_state(&f, "r2", LR_TASK_FAILED, 15000) >= 0);
	fix(&f);
	lr_retry_opts o = { .from_name = "one", .reset_state = 1 };
	CHECK_OK(lr_retry(f.client, "r2", &o, &err), &err);
	CHECK(fleet_wait_state(&f, "r2", LR_TASK_SUCCEEDED, 15000) >= 0);
	CHECK_INT(fleet_count_marks(&f, "run r2 0 "), ==, 2);
	CHECK_INT(fleet_count_marks(&f, "run r2 1 "), ==, 2);
	fleet_destroy(&f);
}

TEST(a_retried_task_survives_the_kill_of_its_runner_mid_step)
{
	fleet f;
	two_runners(&f, "retrykill");
	/* Step 1 fails until fixed, then takes a while: long enough to kill
	 * its runner in the middle. */
	fleet_submit(&f, "r3", "{\"id\":\"%s\",\"max_attempts\":2,\"steps\":["
	                       STEP("one", MARK) ","
	                       STEP("two", MARK "; test -e $MARKS/fix && sleep 2") "]}");
	CHECK(fleet_wait_state(&f, "r3", LR_TASK_FAILED, 20000) >= 0);
	fix(&f);
	CHECK_OK(lr_retry(f.client, "r3", NULL, &err), &err);
	CHECK_INT(fleet_wait_marks(&f, "run r3 1 ", 3, 15000), ==, 0);
	int holder = fleet_holder(&f, "r3");
	CHECK(holder >= 0);
	kill(f.pids[holder], SIGKILL);
	fleet_wait(&f, holder, 5000);
	CHECK(fleet_wait_state(&f, "r3", LR_TASK_SUCCEEDED, 20000) >= 0);
	CHECK_INT(fleet_count_marks(&f, "run r3 0 "), ==, 1);
	CHECK_INT(fleet_count_marks(&f, "run r3 1 "), ==, 4); /* 2 failed, killed, done */
	lr_task_status s;
	CHECK_OK(lr_task_get(f.client, "r3", &s, &err), &err);
	CHECK_INT(s.n_history, ==, 1);
	CHECK_INT(s.history[0].attempts, ==, 2);
	lr_task_status_clear(&s);
	fleet_destroy(&f);
}

struct race {
	lr_client *c;
	int rc;
	size_t purged;
	lr_err e;
};

static void *do_retry(void *arg)
{
	struct race *r = arg;
	r->rc = lr_retry(r->c, "race", NULL, &r->e);
	return NULL;
}

static void *do_purge(void *arg)
{
	struct race *r = arg;
	r->rc = lr_purge(r->c, 0, -1, &r->purged, &r->e);
	return NULL;
}

TEST(a_retry_racing_a_purge_leaves_the_task_whole_or_gone)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "race");
	int retried = 0, purged = 0;
	for (int round = 0; round < 12; round++) {
		fleet_submit(&f, "race", "{\"id\":\"%s\",\"priority\":1,\"steps\":["
		                         STEP("x", "true") "]}");
		int already;
		CHECK_OK(lr_cancel(f.client, "race", &already, &err), &err);
		struct race a = { .c = f.client }, b = { .c = f.client };
		pthread_t ta, tb;
		pthread_create(&ta, NULL, round % 2 ? do_purge : do_retry, round % 2 ? &b : &a);
		pthread_create(&tb, NULL, round % 2 ? do_retry : do_purge, round % 2 ? &a : &b);
		pthread_join(ta, NULL);
		pthread_join(tb, NULL);
		CHECK_INT(b.rc, ==, 0);
		int64_t task = keys_of(&f, LR_K_TASKS, "race");
		if (a.rc == 0) {
			/* Pending again, whole: the purge found it not done. */
			retried++;
			CHECK_INT(task, ==, 1);
			CHECK_INT(b.purged, ==, 0);
			CHECK_INT(keys_of(&f, LR_K_DONE, "race"), ==, 0);
			CHECK_INT(keys_of(&f, LR_K_HISTORY, "race"), ==, 1);
			CHECK_INT(keys_of(&f, LR_K_TURN, "race"), ==, 1);
			int already2;
			CHECK_OK(lr_cancel(f.client, "race", &already2, &err), &err);
			size_t n;
			CHECK_OK(lr_purge(f.client, 0, -1, &n, &err), &err);
		} else {
			purged++;
			CHECK(a.rc == LR_ENOTFOUND || a.rc == LR_ECONFLICT);
			CHECK_INT(b.purged, ==, 1);
		}
		/* Either way, nothing of it is left behind. */
		static const char *const kinds[] = { LR_K_TASKS, LR_K_CHECKPOINTS, LR_K_DONE,
			                             LR_K_TURN, LR_K_HISTORY };
		for (size_t k = 0; k < 5; k++)
			CHECK_INT(keys_of(&f, kinds[k], "race"), ==, 0);
	}
	printf("# retry won %d rounds, purge %d\n", retried, purged);
	fleet_destroy(&f);
}

static int setup(void)
{
	etcdh_opts o = { .members = 1 };
	return etcdh_start(&o, &cluster);
}

static void teardown(void) { etcdh_destroy(cluster); }

TEST_LIST(
	TEST_CASE(priorities_order_a_backlog_higher_first),
	TEST_CASE(a_delayed_task_starts_on_time_with_idle_runners),
	TEST_CASE(a_delayed_task_survives_the_restart_of_every_runner),
	TEST_CASE(status_says_a_delayed_task_waits_for_its_time),
	TEST_CASE(a_diamond_of_dependencies_runs_in_a_valid_order_despite_a_killed_runner),
	TEST_CASE(a_failed_dependency_fails_its_dependents_without_running_them),
	TEST_CASE(an_unknown_dependency_is_refused_at_submit_and_nothing_is_stored),
	TEST_CASE(retry_resumes_at_the_failed_step_with_its_state_and_keeps_history),
	TEST_CASE(retry_from_step_zero_with_reset_state_starts_over),
	TEST_CASE(a_retried_task_survives_the_kill_of_its_runner_mid_step),
	TEST_CASE(a_retry_racing_a_purge_leaves_the_task_whole_or_gone),
);
TEST_MAIN(setup, teardown)
