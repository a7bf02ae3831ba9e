/* test_locks.c - tasks' locks and slots with real `leaserun worker`
 * processes (TTL 2 s): given back on every way a task or its runner ends,
 * a limit never exceeded, an X task not starved by a stream of S tasks, and
 * a random workload on three runners, one killed midway, proven from the
 * steps' heartbeats: no conflicting executions overlapped, compatible ones
 * did, and every task finished. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "etcd/lease.h"
#include "etcd_harness.h"
#include "fleet.h"
#include "history.h"
#include "marks.h"
#include "records/lockset.h"
#include "test.h"

static etcdh_cluster *cluster;
static lr_err err;

/* A task of one step that heartbeats `loops` times, 50 ms apart. */
#define BEATING(loops) MARK_START "; " MARK_BEATS(loops) "; " MARK_END

static void submit(fleet *f, const char *id, const char *locks, const char *limits,
                   const char *run, const char *more)
{
	char spec[4096];
	snprintf(spec, sizeof(spec),
	         "{\"id\":\"%s\",\"steps\":[{\"name\":\"one\",\"run\":\"%s\"}]%s%s%s%s%s}", id,
	         run, locks ? ",\"locks\":" : "", locks ? locks : "", limits ? ",\"limits\":" : "",
	         limits ? limits : "", more ? more : "");
	fleet_submit(f, id, spec);
}

static bool nothing_held(fleet *f)
{
	return fleet_count_keys(f, LR_K_LOCKS) == 0 && fleet_count_keys(f, LR_K_SLOTS) == 0 &&
	       fleet_count_keys(f, LR_K_LIMITS) == 0;
}

/* Poll until nothing is held; the time it took in ms, -1 after timeout. */
static int64_t wait_nothing_held(fleet *f, int timeout_ms)
{
	int64_t t0 = lr_mono_ms();
	while (!nothing_held(f)) {
		if (lr_mono_ms() - t0 > timeout_ms)
			return -1;
		lr_sleep_ms(20);
	}
	return lr_mono_ms() - t0;
}

/* ---- executions from the marks ------------------------------------------------ */

/* One execution of a task's step: the marks of one shell, first to last. */
struct exec {
	char task[64];
	long pid;
	int64_t from, to;
};

static size_t executions(fleet *f, struct exec **out)
{
	mark *m = NULL;
	size_t n = 0;
	CHECK_INT(marks_read(f->dir, &m, &n), ==, 0);
	struct exec *e = calloc(n + 1, sizeof(*e));
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		size_t j = 0;
		while (j < k && !(e[j].pid == m[i].pid && strcmp(e[j].task, m[i].task) == 0))
			j++;
		if (j == k) {
			snprintf(e[k].task, sizeof(e[k].task), "%s", m[i].task);
			e[k].pid = m[i].pid;
			e[k].from = m[i].ns;
			k++;
		}
		e[j].to = m[i].ns;
	}
	free(m);
	*out = e;
	return k;
}

static bool overlap(const struct exec *a, const struct exec *b)
{
	return a->from <= b->to && b->from <= a->to;
}

/* ---- given back ---------------------------------------------------------------- */

TEST(locks_go_back_on_success_failure_and_cancel)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "lk-end");
	fleet_start(&f, 0, NULL);
	submit(&f, "ok", "{\"r\":\"X\"}", "{\"gpu\":2}", MARK_START, NULL);
	CHECK(fleet_wait_state(&f, "ok", LR_TASK_SUCCEEDED, 10000) >= 0);
	CHECK(nothing_held(&f));
	submit(&f, "bad", "{\"r\":\"X\"}", "{\"gpu\":2}", "exit 3", ",\"max_attempts\":1");
	CHECK(fleet_wait_state(&f, "bad", LR_TASK_FAILED, 10000) >= 0);
	CHECK(nothing_held(&f));
	submit(&f, "long", "{\"r\":\"X\"}", "{\"gpu\":2}", BEATING("60"), NULL);
	CHECK_INT(fleet_wait_marks(&f, "hb long", 2, 10000), ==, 0);
	CHECK(!nothing_held(&f));
	int already = 0;
	CHECK_OK(lr_cancel(f.client, "long", &already, &err), &err);
	CHECK(fleet_wait_state(&f, "long", LR_TASK_CANCELLED, 10000) >= 0);
	CHECK(nothing_held(&f));
	/* Requests go with their tasks. */
	CHECK_INT(fleet_count_keys(&f, LR_K_WANTS), ==, 0);
	fleet_destroy(&f);
}

/* A key written by hand inside a lock's range, on a lease (one on no
 * lease is deleted by the claim), which the runner cannot read, blocks
 * the claim (its compares take the whole range); its deletion must wake
 * the task, although the runner's table of holders never knew the key. */
TEST(deleting_an_unreadable_key_in_a_locks_range_wakes_the_task_it_blocked)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "lk-junk");
	char junk[LR_KEY_SIZE];
	snprintf(junk, sizeof(junk), "%slocks/g/#3zz/junk", f.prefix);
	lr_etcd *c = lr_client_etcd(f.client);
	int64_t lease = 0, granted = 0;
	CHECK_OK(lr_lease_grant(c, 60, &lease, &granted, NULL, &err), &err);
	CHECK_OK(lr_kv_put(c, junk, "not json", 8, lease, NULL, NULL, &err), &err);
	fleet_start(&f, 0, NULL);
	submit(&f, "g1", "{\"g\":\"X\"}", NULL, MARK_START, NULL);
	lr_sleep_ms(1000);
	CHECK_INT(fleet_state(&f, "g1", NULL, 0, NULL, NULL), ==, LR_TASK_PENDING);
	CHECK_OK(lr_kv_delete(c, junk, 0, NULL, NULL, &err), &err);
	CHECK(fleet_wait_state(&f, "g1", LR_TASK_SUCCEEDED, 5000) >= 0);
	lr_lease_revoke(c, lease, NULL);
	fleet_destroy(&f);
}

/* Lock and slot keys put by hand on no lease: no holder writes one (they
 * hang on its lease), so they would never expire. A task they are in the
 * way of deletes them, logs it, and runs, as a task blocked by nothing. */
TEST(a_task_kept_out_by_lock_or_slot_keys_on_no_lease_deletes_them_and_runs)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "lk-stray");
	lr_etcd *c = lr_client_etcd(f.client);
	static const char *const strays[] = {
		"locks/doc/#3X/task:ghost",             /* X on the lock asked for */
		"locks/doc/#0IS/run:gone",              /* a reader, as kept out */
		"slots/api/00000", "slots/api/00001",   /* every slot of the pool */
		"limits/api/00001/00000",               /* a holder under a limit of 1 */
	};
	char key[LR_KEY_SIZE];
	for (size_t i = 0; i < sizeof(strays) / sizeof(strays[0]); i++) {
		snprintf(key, sizeof(key), "%s%s", f.prefix, strays[i]);
		const char *value = "{\"holder\":\"task:ghost\",\"limit\":2}";
		CHECK_OK(lr_kv_put(c, key, value, strlen(value), 0, NULL, NULL, &err), &err);
	}
	fleet_start(&f, 0, NULL);
	submit(&f, "x", "{\"doc\":\"X\"}", NULL, MARK_START, NULL);
	CHECK(fleet_wait_state(&f, "x", LR_TASK_SUCCEEDED, 10000) >= 0);
	CHECK_INT(fleet_count_keys(&f, LR_K_LOCKS), ==, 0);
	submit(&f, "p", NULL, "{\"api\":2}", MARK_START, NULL);
	CHECK(fleet_wait_state(&f, "p", LR_TASK_SUCCEEDED, 10000) >= 0);
	/* The slot it took and those in its way are gone; what was in
	 * nobody's way stays. */
	CHECK_INT(fleet_count_keys(&f, LR_K_SLOTS), ==, 1);
	CHECK(fleet_log_has(&f, 0, "hung on no lease"));
	CHECK(fleet_log_has(&f, 0, "locks/doc/#3X/task:ghost"));
	fleet_destroy(&f);
}

/* A step of a task holding thread/1 takes a slot with `leaserun run`,
 * while a later task waits for thread/1 and the same pool: the run must
 * not wait behind that task, which waits for the run's own task. */
TEST(a_step_taking_a_slot_with_run_does_not_wait_behind_a_task_waiting_for_its_own)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "lk-nest");
	const char *const flags[] = { "--concurrency", "2", NULL };
	fleet_start(&f, 0, flags);
	char run[1024];
	snprintf(run, sizeof(run), "sleep 1; $LEASERUN_BIN run --endpoints %s --prefix %s "
	         "--limit api=8 --wait 10 -- true", etcdh_endpoints(cluster), f.prefix);
	submit(&f, "pt", "{\"thread/1\":\"X\"}", NULL, run, ",\"max_attempts\":1");
	CHECK_INT(fleet_wait_state(&f, "pt", LR_TASK_RUNNING, 5000) >= 0, ==, 1);
	submit(&f, "pu", "{\"thread/1\":\"X\"}", "{\"api\":8}", "true", NULL);
	CHECK(fleet_wait_state(&f, "pt", LR_TASK_SUCCEEDED, 15000) >= 0);
	CHECK(fleet_wait_state(&f, "pu", LR_TASK_SUCCEEDED, 10000) >= 0);
	fleet_destroy(&f);
}

TEST(sigterm_gives_locks_back_and_sigkill_frees_them_when_the_lease_expires)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "lk-kill");
	const char *extra[] = { "--grace", "0", NULL };
	fleet_start(&f, 0, extra);
	submit(&f, "t", "{\"doc/1\":\"X\"}", "{\"api\":1}", BEATING("60"), NULL);
	CHECK_INT(fleet_wait_marks(&f, "hb t", 2, 10000), ==, 0);
	kill(f.pids[0], SIGTERM);
	CHECK_INT(fleet_wait(&f, 0, 10000), ==, 0);
	CHECK(nothing_held(&f)); /* with the release, before the exit */
	CHECK_INT(fleet_count_keys(&f, LR_K_WANTS), ==, 1); /* still asked for */

	fleet_start(&f, 1, extra);
	CHECK(fleet_wait_state(&f, "t", LR_TASK_RUNNING, 10000) >= 0);
	CHECK_INT(fleet_wait_marks(&f, "start t", 2, 10000), ==, 0);
	kill(f.pids[1], SIGKILL);
	fleet_wait(&f, 1, 5000);
	CHECK(!nothing_held(&f)); /* the lease holds them a while */
	int64_t ms = wait_nothing_held(&f, 4000);
	printf("# locks of a SIGKILLed runner free %lld ms after the kill (TTL 2 s)\n",
	       (long long)ms);
	CHECK(ms >= 0);

	fleet_start(&f, 2, NULL);
	CHECK(fleet_wait_state(&f, "t", LR_TASK_SUCCEEDED, 40000) >= 0);
	CHECK(nothing_held(&f));
	fleet_destroy(&f);
}

TEST(steps_see_the_locks_and_slots_they_hold)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "lk-env");
	fleet_start(&f, 0, NULL);
	submit(&f, "e", "{\"a/b\":\"S\"}", "{\"gpu\":3}",
	       "echo \\\"$LEASERUN_LOCKS|$LEASERUN_SLOTS\\\" > $MARKS/env", NULL);
	CHECK(fleet_wait_state(&f, "e", LR_TASK_SUCCEEDED, 10000) >= 0);
	char path[512], line[512] = "";
	snprintf(path, sizeof(path), "%s/env", f.dir);
	FILE *fp = fopen(path, "r");
	CHECK(fp != NULL);
	CHECK(fgets(line, sizeof(line), fp) != NULL);
	fclose(fp);
	line[strcspn(line, "\n")] = '\0';
	char *bar = strchr(line, '|');
	CHECK(bar != NULL);
	*bar = '\0';
	CHECK_STR(line, "{\"a/b\":\"S\"}");
	json_t *slots = json_loads(bar + 1, 0, NULL);
	CHECK(json_is_object(slots) && json_object_size(slots) == 1);
	json_int_t idx = json_integer_value(json_object_get(slots, "gpu"));
	CHECK(json_is_integer(json_object_get(slots, "gpu")) && idx >= 0 && idx < 3);
	json_decref(slots);
	fleet_destroy(&f);
}

/* ---- limits and fairness -------------------------------------------------------- */

TEST(a_limit_is_never_exceeded_by_several_runners)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "lk-limit");
	const char *extra[] = { "--concurrency", "3", NULL };
	for (int i = 0; i < 3; i++)
		fleet_start(&f, i, extra);
	char ids[12][8];
	for (int i = 0; i < 12; i++) {
		snprintf(ids[i], sizeof(ids[i]), "g%d", i);
		submit(&f, ids[i], NULL, "{\"gpu\":2}", BEATING("6"), NULL);
	}
	for (int i = 0; i < 12; i++)
		CHECK(fleet_wait_state(&f, ids[i], LR_TASK_SUCCEEDED, 30000) >= 0);
	struct exec *e = NULL;
	size_t n = executions(&f, &e);
	CHECK_INT(n, ==, 12);
	int most = 0;
	for (size_t i = 0; i < n; i++) {
		int at_once = 0; /* running when e[i] started */
		for (size_t j = 0; j < n; j++)
			at_once += e[j].from <= e[i].from && e[i].from <= e[j].to;
		most = at_once > most ? at_once : most;
	}
	free(e);
	printf("# pool of 2, 9 workers: at most %d ran at once\n", most);
	CHECK_INT(most, ==, 2);
	CHECK(nothing_held(&f));
	fleet_destroy(&f);
}

TEST(an_x_task_is_not_overtaken_by_a_stream_of_s_tasks)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "lk-fair");
	const char *extra[] = { "--concurrency", "4", NULL };
	fleet_start(&f, 0, extra);
	submit(&f, "s0", "{\"doc\":\"S\"}", NULL, BEATING("10"), NULL);
	CHECK_INT(fleet_wait_marks(&f, "start s0", 1, 10000), ==, 0);
	submit(&f, "x", "{\"doc\":\"X\"}", NULL, BEATING("4"), NULL);
	/* Readers keep coming, each overlapping the one before. */
	for (int i = 1; i <= 8; i++) {
		char id[8];
		snprintf(id, sizeof(id), "s%d", i);
		submit(&f, id, "{\"doc\":\"S\"}", NULL, BEATING("10"), NULL);
		lr_sleep_ms(150);
	}
	CHECK(fleet_wait_state(&f, "x", LR_TASK_SUCCEEDED, 30000) >= 0);
	for (int i = 1; i <= 8; i++) {
		char id[8];
		snprintf(id, sizeof(id), "s%d", i);
		CHECK(fleet_wait_state(&f, id, LR_TASK_SUCCEEDED, 30000) >= 0);
	}
	struct exec *e = NULL;
	size_t n = executions(&f, &e);
	const struct exec *x = NULL;
	for (size_t i = 0; i < n; i++)
		if (strcmp(e[i].task, "x") == 0)
			x = &e[i];
	CHECK(x != NULL);
	/* Every reader submitted after x started after x ended. */
	for (size_t i = 0; i < n; i++)
		if (strcmp(e[i].task, "s0") != 0 && e[i].task[0] == 's' && e[i].from < x->to)
			TEST_FAIL("%s, asked for after x, started before x ended", e[i].task);
	free(e);
	fleet_destroy(&f);
}

/* ---- a random workload ----------------------------------------------------------------- */

#define RANDOM_TASKS 36

static const char *const random_paths[] = { "a", "a/b", "a/c", "a/b/d", "e" };
static const char *const random_modes[] = { "IS", "IX", "S", "SIX", "X" };

TEST(a_random_workload_with_a_runner_killed_never_runs_conflicting_tasks_together)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "lk-rand");
	const char *extra[] = { "--concurrency", "3", NULL };
	for (int i = 0; i < 3; i++)
		fleet_start(&f, i, extra);
	unsigned seed = getenv("LOCKS_SEED") ? (unsigned)atol(getenv("LOCKS_SEED"))
	                                      : (unsigned)lr_mono_ms();
	printf("# seed %u\n", seed);
	srand(seed);
	lr_lockset *sets[RANDOM_TASKS];
	lr_lockset *locks_only[RANDOM_TASKS]; /* pools apart: two may share one */
	char ids[RANDOM_TASKS][8];
	int pool_n[RANDOM_TASKS]; /* the N a task names for the pool; 0: none */
	static char texts[RANDOM_TASKS][256];
	for (int i = 0; i < RANDOM_TASKS; i++) {
		char locks[256] = "{", limits[64] = "";
		int k = 1 + rand() % 2;
		int first = rand() % 5;
		for (int j = 0; j < k; j++) {
			/* Readers more often than writers, so that some run together. */
			int mode = rand() % 8;
			mode = mode < 3 ? 0 : mode < 5 ? 2 : mode < 6 ? 1 : mode < 7 ? 3 : 4;
			char one[64];
			snprintf(one, sizeof(one), "%s\"%s\":\"%s\"", j ? "," : "",
			         random_paths[(first + j * (1 + rand() % 4)) % 5], random_modes[mode]);
			strcat(locks, one);
		}
		strcat(locks, "}");
		/* One pool, with different limits for it. */
		pool_n[i] = rand() % 3 == 0 ? 1 + rand() % 3 : 0;
		if (pool_n[i] > 0)
			snprintf(limits, sizeof(limits), "{\"pool\":%d}", pool_n[i]);
		snprintf(ids[i], sizeof(ids[i]), "r%02d", i);
		snprintf(texts[i], sizeof(texts[i]), "%s%s", locks, limits);
		json_t *lj = json_loads(locks, 0, NULL);
		json_t *mj = limits[0] ? json_loads(limits, 0, NULL) : NULL;
		CHECK_OK(lr_lockset_parse(lj, mj, &sets[i], &err), &err);
		CHECK_OK(lr_lockset_parse(lj, NULL, &locks_only[i], &err), &err);
		json_decref(lj);
		json_decref(mj);
		submit(&f, ids[i], locks, limits[0] ? limits : NULL, BEATING("4"), NULL);
	}
	/* Kill one runner while it holds tasks. */
	int victim = -1;
	int64_t t0 = lr_mono_ms();
	while (victim < 0 && lr_mono_ms() - t0 < 15000) {
		for (int i = 0; i < RANDOM_TASKS && victim < 0; i++)
			victim = fleet_holder(&f, ids[i]);
		lr_sleep_ms(50);
	}
	CHECK(victim >= 0);
	lr_sleep_ms(300);
	kill(f.pids[victim], SIGKILL);
	fleet_wait(&f, victim, 5000);
	for (int i = 0; i < RANDOM_TASKS; i++)
		CHECK(fleet_wait_state(&f, ids[i], LR_TASK_SUCCEEDED, 90000) >= 0);

	struct exec *e = NULL;
	size_t n = executions(&f, &e);
	int compatible_together = 0;
	for (size_t i = 0; i < n; i++) {
		int a = atoi(e[i].task + 1);
		for (size_t j = i + 1; j < n; j++) {
			int b = atoi(e[j].task + 1);
			if (a == b || !overlap(&e[i], &e[j]))
				continue;
			if (lr_locksets_conflict(locks_only[a], locks_only[b]))
				TEST_FAIL("%s (%s, pid %ld, %lld..%lld ms) and %s (%s, pid %ld, "
				          "%lld..%lld ms) conflict, yet ran together", e[i].task,
				          texts[a], e[i].pid, (long long)(e[i].from / 1000000 % 100000),
				          (long long)(e[i].to / 1000000 % 100000), e[j].task, texts[b],
				          e[j].pid, (long long)(e[j].from / 1000000 % 100000),
				          (long long)(e[j].to / 1000000 % 100000));
			compatible_together++;
		}
		/* The pool: when a task starts, no more of its tasks run than
		 * the smallest limit among them allows. */
		int in_pool = 0, smallest = LR_LIMIT_N_MAX;
		for (size_t j = 0; pool_n[a] > 0 && j < n; j++) {
			int b = atoi(e[j].task + 1);
			if (pool_n[b] > 0 && e[j].from <= e[i].from && e[i].from <= e[j].to) {
				in_pool++;
				smallest = pool_n[b] < smallest ? pool_n[b] : smallest;
			}
		}
		if (in_pool > smallest)
			TEST_FAIL("%d tasks of the pool ran at once beside %s, one of them under "
			          "a limit of %d", in_pool, e[i].task, smallest);
	}
	printf("# %zu executions, %d pairs of compatible ones side by side\n", n,
	       compatible_together);
	CHECK(compatible_together > 0);
	free(e);
	for (int i = 0; i < RANDOM_TASKS; i++) {
		free(sets[i]);
		free(locks_only[i]);
	}
	CHECK(wait_nothing_held(&f, 5000) >= 0);
	fleet_check_history(&f, RANDOM_TASKS);
	fleet_destroy(&f);
}

static int setup(void)
{
	etcdh_opts o = { .members = 1 };
	return etcdh_start(&o, &cluster);
}

static void teardown(void) { etcdh_destroy(cluster); }

TEST_LIST(
	TEST_CASE(locks_go_back_on_success_failure_and_cancel),
	TEST_CASE(deleting_an_unreadable_key_in_a_locks_range_wakes_the_task_it_blocked),
	TEST_CASE(a_task_kept_out_by_lock_or_slot_keys_on_no_lease_deletes_them_and_runs),
	TEST_CASE(a_step_taking_a_slot_with_run_does_not_wait_behind_a_task_waiting_for_its_own),
	TEST_CASE(sigterm_gives_locks_back_and_sigkill_frees_them_when_the_lease_expires),
	TEST_CASE(steps_see_the_locks_and_slots_they_hold),
	TEST_CASE(a_limit_is_never_exceeded_by_several_runners),
	TEST_CASE(an_x_task_is_not_overtaken_by_a_stream_of_s_tasks),
	TEST_CASE(a_random_workload_with_a_runner_killed_never_runs_conflicting_tasks_together),
);
TEST_MAIN(setup, teardown)
