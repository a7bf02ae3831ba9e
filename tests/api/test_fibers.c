/* test_fibers.c - runners whose workers share threads as fibers
 * (lr_runner_opts.threads), on a real etcd: many tasks through group
 * commits whose replies each wake many fibers, checkpoints from handlers,
 * and a lease pulled from under a runner in the middle of it. */
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "etcd/lease.h"
#include "fiber/fiber.h"
#include "hosted.h"
#include "leaserun.h"
#include "records/record.h"
#include "test.h"

static lr_err err;

#define TASKS 240
#define STEPS 3

struct ledger {
	atomic_int runs[TASKS][STEPS];  /* starts of each step */
	atomic_int wrong_state;          /* a step saw other than the steps before it */
	atomic_int checkpoints, refused;
	atomic_int seen_fiber;           /* handlers that ran in a fiber */
	int checkpoints_per_step;
};

static int task_index(const lr_step *s)
{
	return atoi(lr_step_task_id(s) + 1);
}

/* Checks that the state holds the steps before this one, each once, in
 * order (committed once, none skipped); checkpoints a few times (each a
 * wait for etcd in the middle of the handler); adds its own step. */
static lr_step_result ledger_step(lr_step *s, void *user)
{
	struct ledger *l = user;
	int t = task_index(s);
	int64_t k = lr_step_index(s);
	l->runs[t][k]++;
	if (lr_fiber_self() != NULL)
		l->seen_fiber++;
	json_t *state = lr_step_state(s);
	json_t *done = json_object_get(state, "done");
	bool right = json_is_array(done) && json_array_size(done) == (size_t)k;
	for (size_t i = 0; right && i < (size_t)k; i++)
		right = json_integer_value(json_array_get(done, i)) == (json_int_t)i;
	if (!right)
		l->wrong_state++;
	for (int i = 0; i < l->checkpoints_per_step; i++) {
		json_object_set_new(state, "ck", json_integer(i));
		lr_err e;
		if (lr_step_checkpoint(s, &e) != 0) {
			l->refused++;
			return LR_STEP_RETRY;
		}
		l->checkpoints++;
	}
	json_array_append_new(done, json_integer(k));
	return LR_STEP_OK;
}

static void submit_tasks(lr_client *c, int n)
{
	for (int t = 0; t < n; t++) {
		char spec[256];
		snprintf(spec, sizeof(spec),
		         "{\"id\":\"t%d\",\"steps\":[{\"name\":\"a\",\"run\":\"-\"},"
		         "{\"name\":\"b\",\"run\":\"-\"},{\"name\":\"c\",\"run\":\"-\"}],"
		         "\"state\":{\"done\":[]}}", t);
		hosted_submit(c, spec);
	}
}

/* The final state of task t: its steps in order, each once. */
static void check_final_state(lr_client *c, int t)
{
	char id[16], key[LR_KEY_SIZE];
	snprintf(id, sizeof(id), "t%d", t);
	CHECK_INT(hosted_wait_done(c, id, 60000), ==, LR_TASK_SUCCEEDED);
	lr_key(c, LR_K_DONE, id, key);
	lr_range_result r;
	CHECK_OK(lr_kv_get(lr_client_etcd(c), key, &r, &err), &err);
	CHECK_INT(r.n, ==, 1);
	lr_done_rec d;
	CHECK_OK(lr_done_decode(r.kvs[0].value, r.kvs[0].value_len, &d, &err), &err);
	lr_range_result_free(&r);
	json_t *done = json_object_get(d.state, "done");
	bool right = json_is_array(done) && json_array_size(done) == STEPS;
	for (size_t i = 0; right && i < STEPS; i++)
		right = json_integer_value(json_array_get(done, i)) == (json_int_t)i;
	if (!right) {
		char *text = json_dumps(d.state, JSON_COMPACT);
		fprintf(stderr, "  task %s ended with state %s\n", id, text);
		free(text);
	}
	lr_done_rec_clear(&d);
	CHECK(right);
}

static void new_fiber_runner(struct hosted *h, lr_client *c, const char *name, int conc,
                             int threads, struct ledger *l)
{
	lr_runner_opts o = { .name = name, .concurrency = conc, .threads = threads, .ttl_s = 2,
		             .grace_s = 1, .log = hosted_quiet };
	memset(h, 0, sizeof(*h));
	CHECK_OK(lr_runner_new(c, &o, &h->r, &err), &err);
	CHECK_OK(lr_runner_handle(h->r, NULL, ledger_step, l), &err);
}

TEST(workers_sharing_threads_run_every_step_once_and_commit_it_once)
{
	lr_client *c = hosted_client("/fibers-many/");
	static struct ledger l;
	memset(&l, 0, sizeof(l));
	l.checkpoints_per_step = 1;
	struct hosted a, b;
	new_fiber_runner(&a, c, "one-thread", 16, 1, &l);
	new_fiber_runner(&b, c, "two-threads", 16, 2, &l);
	submit_tasks(c, TASKS);
	hosted_start(&a);
	hosted_start(&b);
	for (int t = 0; t < TASKS; t++)
		check_final_state(c, t);
	lr_runner_stats sa, sb;
	lr_runner_get_stats(a.r, &sa);
	lr_runner_get_stats(b.r, &sb);
	hosted_end(&a);
	hosted_end(&b);
	for (int t = 0; t < TASKS; t++)
		for (int k = 0; k < STEPS; k++)
			CHECK_INT(l.runs[t][k], ==, 1);
	CHECK_INT(l.wrong_state, ==, 0);
	CHECK_INT(l.checkpoints, ==, TASKS * STEPS);
	CHECK_INT(l.seen_fiber, ==, TASKS * STEPS);
	printf("# tasks: %llu on one thread, %llu on two\n",
	       (unsigned long long)sa.tasks_succeeded, (unsigned long long)sb.tasks_succeeded);
	CHECK_INT(sa.tasks_succeeded + sb.tasks_succeeded, ==, TASKS);
	lr_client_close(c);
}

TEST(a_runner_on_fibers_that_loses_its_lease_commits_nothing_more_and_another_finishes)
{
	lr_client *c = hosted_client("/fibers-lost/");
	static struct ledger l;
	memset(&l, 0, sizeof(l));
	l.checkpoints_per_step = 20; /* steps in the middle of their checkpoints */
	struct hosted a, b;
	new_fiber_runner(&a, c, "loses", 16, 1, &l);
	submit_tasks(c, 48);
	hosted_start(&a);
	while (l.checkpoints < 200)
		lr_sleep_ms(5);
	int64_t lease = hosted_claim_lease(c, NULL);
	CHECK(lease != 0);
	CHECK_OK(lr_lease_revoke(lr_client_etcd(c), lease, &err), &err);
	int refused_before = l.refused;
	/* A would go on with a new lease: hand the rest to b. */
	hosted_end(&a);
	printf("# checkpoints refused after the revoke: %d\n", l.refused - refused_before);
	new_fiber_runner(&b, c, "finishes", 16, 1, &l);
	hosted_start(&b);
	for (int t = 0; t < 48; t++)
		check_final_state(c, t);
	hosted_end(&b);
	CHECK_INT(l.wrong_state, ==, 0);
	lr_client_close(c);
}

/* ---- a process of fibers paused past its TTL, then killed ----------------------- */

#define CHAOS_CHILD "LR_TEST_FIBERS_CHILD"
#define CHAOS_TASKS 160

/* In the child: a runner of 16 fibers on one thread, until killed. */
static void chaos_child(void)
{
	lr_client *c = hosted_client("/fibers-chaos/");
	static struct ledger l;
	l.checkpoints_per_step = 5;
	struct hosted h;
	new_fiber_runner(&h, c, "child", 16, 1, &l);
	hosted_start(&h);
	for (;;)
		pause();
}

TEST(a_process_of_fibers_paused_past_its_ttl_then_killed_loses_and_repeats_no_commit)
{
	if (getenv(CHAOS_CHILD) != NULL)
		chaos_child();
	lr_client *c = hosted_client("/fibers-chaos/");
	static struct ledger l;
	memset(&l, 0, sizeof(l));
	l.checkpoints_per_step = 5;
	submit_tasks(c, CHAOS_TASKS);
	char exe[4096];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	CHECK(len > 0);
	exe[len] = '\0';
	char *argv[] = { exe, "a_process_of_fibers_paused_past_its_ttl_then_killed_loses_and_repeats_no_commit",
		         NULL };
	setenv(CHAOS_CHILD, "1", 1);
	setenv(HOSTED_ENDPOINTS, hosted_endpoints(), 1);
	extern char **environ;
	pid_t pid;
	int rc = posix_spawn(&pid, exe, NULL, NULL, argv, environ);
	unsetenv(CHAOS_CHILD);
	unsetenv(HOSTED_ENDPOINTS);
	CHECK_INT(rc, ==, 0);
	int64_t end = lr_mono_ms() + 20000;
	while (hosted_count(c, LR_K_DONE, "") < CHAOS_TASKS / 8 && lr_mono_ms() < end)
		lr_sleep_ms(10);
	/* Frozen in the middle of its steps, past its lease: another
	 * runner takes its tasks over while it sleeps. */
	kill(pid, SIGSTOP);
	int64_t done_at_stop = hosted_count(c, LR_K_DONE, "");
	struct hosted b;
	new_fiber_runner(&b, c, "takes-over", 16, 1, &l);
	hosted_start(&b);
	lr_sleep_ms(3000);
	/* It wakes with its deadlines passed, then dies. */
	kill(pid, SIGCONT);
	lr_sleep_ms(300);
	kill(pid, SIGKILL);
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	for (int t = 0; t < CHAOS_TASKS; t++)
		check_final_state(c, t);
	hosted_end(&b);
	printf("# %lld of %d tasks done when the child froze; its survivor saw no wrong state: %d\n",
	       (long long)done_at_stop, CHAOS_TASKS, (int)l.wrong_state);
	CHECK_INT(done_at_stop, <, CHAOS_TASKS);
	CHECK_INT(l.wrong_state, ==, 0);
	lr_client_close(c);
}

/* A runner of o whose two handlers, named a and b, share user. */
static void new_runner_with(struct hosted *h, lr_client *c, const lr_runner_opts *o,
                            const char *a, lr_step_fn fa, const char *b, lr_step_fn fb,
                            void *user)
{
	memset(h, 0, sizeof(*h));
	CHECK_OK(lr_runner_new(c, o, &h->r, &err), &err);
	CHECK_OK(lr_runner_handle(h->r, a, fa, user), &err);
	CHECK_OK(lr_runner_handle(h->r, b, fb, user), &err);
}

/* Submit task id of one step, named step. */
static void submit_one_step(lr_client *c, const char *id, const char *step)
{
	char spec[160];
	snprintf(spec, sizeof(spec), "{\"id\":\"%s\",\"steps\":[{\"name\":\"%s\",\"run\":\"-\"}]}",
	         id, step);
	hosted_submit(c, spec);
}

/* ---- a handler that sleeps --------------------------------------------------- */

struct sleepy {
	atomic_int quick_done;
	atomic_int quick_done_while_asleep; /* counted when the sleeper wakes */
	atomic_bool asleep;
	atomic_llong woke_ms;
	atomic_int woke_cancelled;
};

static lr_step_result sleep_step(lr_step *s, void *user)
{
	struct sleepy *z = user;
	atomic_store(&z->asleep, true);
	int stopped = lr_step_sleep(s, 20000);
	z->woke_ms = lr_mono_ms();
	z->quick_done_while_asleep = z->quick_done;
	z->woke_cancelled = stopped && lr_step_stop_reason(s) == LR_STEP_CANCELLED;
	return LR_STEP_OK;
}

static lr_step_result quick_step(lr_step *s, void *user)
{
	(void)s;
	struct sleepy *z = user;
	z->quick_done++;
	return LR_STEP_OK;
}

TEST(a_handler_asleep_in_lr_step_sleep_lets_the_other_fibers_of_its_thread_run)
{
	lr_client *c = hosted_client("/fibers-sleep/");
	static struct sleepy z;
	memset(&z, 0, sizeof(z));
	lr_runner_opts o = { .name = "sleepy", .concurrency = 4, .threads = 1, .ttl_s = 2,
		             .grace_s = 1, .log = hosted_quiet };
	struct hosted h;
	new_runner_with(&h, c, &o, "sleep", sleep_step, "quick", quick_step, &z);
	hosted_start(&h);
	submit_one_step(c, "zz", "sleep");
	while (!atomic_load(&z.asleep))
		lr_sleep_ms(5);
	for (int i = 0; i < 20; i++) {
		char id[8];
		snprintf(id, sizeof(id), "q%d", i);
		submit_one_step(c, id, "quick");
	}
	for (int i = 0; i < 20; i++) {
		char id[8];
		snprintf(id, sizeof(id), "q%d", i);
		CHECK_INT(hosted_wait_done(c, id, 15000), ==, LR_TASK_SUCCEEDED);
	}
	/* All ran on the sleeper's thread while it slept; a cancel wakes it. */
	CHECK_INT(z.woke_ms, ==, 0);
	int64_t t0 = lr_mono_ms();
	CHECK_OK(lr_cancel(c, "zz", NULL, &err), &err);
	CHECK_INT(hosted_wait_done(c, "zz", 10000), ==, LR_TASK_CANCELLED);
	hosted_end(&h);
	CHECK(z.woke_cancelled);
	CHECK_INT(z.quick_done_while_asleep, ==, 20);
	printf("# the sleeper woke %lld ms after the cancel\n", (long long)(z.woke_ms - t0));
	CHECK_INT(z.woke_ms - t0, <, 5000);
	lr_client_close(c);
}

/* ---- backoffs while etcd is paused ------------------------------------------------- */

struct paused {
	atomic_bool stop;
	atomic_int running;
	atomic_llong max_gap_ms;   /* the longest a 20 ms sleep took */
	atomic_int checkpoints;
};

/* Sleeps 20 ms at a time, noting the longest sleep, until told to stop. */
static lr_step_result nap_step(lr_step *s, void *user)
{
	struct paused *p = user;
	p->running++;
	while (!atomic_load(&p->stop)) {
		int64_t t0 = lr_mono_ms();
		lr_step_sleep(s, 20);
		int64_t gap = lr_mono_ms() - t0;
		if (gap > p->max_gap_ms)
			p->max_gap_ms = gap;
	}
	return LR_STEP_OK;
}

/* Checkpoints as fast as etcd takes them: while etcd is paused, its
 * writes time out and are tried again after a backoff. */
static lr_step_result write_step(lr_step *s, void *user)
{
	struct paused *p = user;
	p->running++;
	while (!atomic_load(&p->stop)) {
		lr_err e;
		if (lr_step_checkpoint(s, &e) == 0)
			p->checkpoints++;
	}
	return LR_STEP_OK;
}

TEST(a_fiber_backing_off_from_a_paused_etcd_lets_the_others_of_its_thread_run)
{
	lr_client_opts co = { .endpoints = hosted_endpoints(), .prefix = "/fibers-paused/",
		              .call_timeout_s = 1 };
	lr_client *c;
	CHECK_OK(lr_client_open(&co, &c, &err), &err);
	static struct paused p;
	memset(&p, 0, sizeof(p));
	lr_runner_opts o = { .name = "patient", .concurrency = 16, .threads = 1, .ttl_s = 10,
		             .grace_s = 1, .log = hosted_quiet };
	struct hosted h;
	new_runner_with(&h, c, &o, "nap", nap_step, "write", write_step, &p);
	hosted_start(&h);
	for (int i = 0; i < 16; i++) { /* 4 nap, 12 write */
		char id[8];
		snprintf(id, sizeof(id), "p%d", i);
		submit_one_step(c, id, i % 4 ? "write" : "nap");
	}
	while (p.running < 16)
		lr_sleep_ms(5);
	lr_sleep_ms(500);
	CHECK_OK(etcdh_pause(hosted_cluster(), 0), &err);
	lr_sleep_ms(3000);
	CHECK_OK(etcdh_resume(hosted_cluster(), 0), &err);
	lr_sleep_ms(1000);
	atomic_store(&p.stop, true);
	for (int i = 0; i < 16; i++) {
		char id[8];
		snprintf(id, sizeof(id), "p%d", i);
		CHECK_INT(hosted_wait_done(c, id, 20000), ==, LR_TASK_SUCCEEDED);
	}
	hosted_end(&h);
	printf("# the longest 20 ms sleep took %lld ms; %d checkpoints\n",
	       (long long)p.max_gap_ms, (int)p.checkpoints);
	/* Before backoffs yielded, the writers' backoffs took turns on the
	 * thread: 1 to 2 s. */
	CHECK_INT(p.max_gap_ms, <, 500);
	lr_client_close(c);
}

/* ---- hostile records on a fiber's stack ------------------------------------------ */

TEST(a_spec_nested_as_deep_as_jansson_parses_fails_its_task_without_crashing_a_fiber)
{
	lr_client *c = hosted_client("/fibers-deep/");
	static struct ledger l;
	memset(&l, 0, sizeof(l));
	struct hosted h;
	new_fiber_runner(&h, c, "deep", 4, 1, &l);
	hosted_start(&h);
	/* Put by hand, past submit's checks: a state 2047 deep, which the
	 * claim parses (recursively) before it refuses the spec. */
	size_t depth = 2047;
	char *spec = malloc(2 * depth + 128);
	int n = sprintf(spec, "{\"id\":\"deep\",\"steps\":[{\"name\":\"a\",\"run\":\"-\"}],"
	                "\"state\":");
	for (size_t i = 0; i < depth; i++)
		spec[n++] = '[';
	for (size_t i = 0; i < depth; i++)
		spec[n++] = ']';
	strcpy(spec + n, "}");
	char key[LR_KEY_SIZE];
	lr_key(c, LR_K_TASKS, "deep", key);
	CHECK_OK(lr_kv_put(lr_client_etcd(c), key, spec, strlen(spec), 0, NULL, NULL, &err), &err);
	free(spec);
	CHECK_INT(hosted_wait_done(c, "deep", 10000), ==, LR_TASK_FAILED);
	/* And the runner goes on. */
	submit_tasks(c, 4);
	for (int t = 0; t < 4; t++)
		check_final_state(c, t);
	hosted_end(&h);
	lr_client_close(c);
}

TEST(threads_beyond_the_workers_are_refused)
{
	lr_client *c = hosted_client("/fibers-opts/");
	lr_runner *r = NULL;
	lr_runner_opts o = { .concurrency = 4, .threads = 5 };
	CHECK_INT(lr_runner_new(c, &o, &r, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "threads 5");
	o.threads = -1;
	CHECK_INT(lr_runner_new(c, &o, &r, &err), ==, LR_EINVAL);
	o.threads = 4;
	CHECK_OK(lr_runner_new(c, &o, &r, &err), &err);
	lr_runner_free(r);
	lr_client_close(c);
}

TEST_LIST(
	TEST_CASE(workers_sharing_threads_run_every_step_once_and_commit_it_once),
	TEST_CASE(a_runner_on_fibers_that_loses_its_lease_commits_nothing_more_and_another_finishes),
	TEST_CASE(a_process_of_fibers_paused_past_its_ttl_then_killed_loses_and_repeats_no_commit),
	TEST_CASE(a_handler_asleep_in_lr_step_sleep_lets_the_other_fibers_of_its_thread_run),
	TEST_CASE(a_fiber_backing_off_from_a_paused_etcd_lets_the_others_of_its_thread_run),
	TEST_CASE(a_spec_nested_as_deep_as_jansson_parses_fails_its_task_without_crashing_a_fiber),
	TEST_CASE(threads_beyond_the_workers_are_refused),
);
TEST_MAIN(hosted_setup, hosted_teardown)
