/* test_errors.c - the error codes the embedding API reports, against a real
 * etcd: the real code whether or not the caller passes an lr_err, the
 * documented code of each limit, and the misuses it refuses (NULL
 * arguments, a runner configured, run or freed while it runs). */
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "base/clock.h"
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

static atomic_int wide_runs;

/* Ends with a state of 30 KB, more than an etcd of 20,000-byte requests
 * takes. */
static lr_step_result wide_state(lr_step *s, void *user)
{
	atomic_fetch_add(&wide_runs, 1);
	char text[30001];
	memset(text, 'y', sizeof(text) - 1);
	text[sizeof(text) - 1] = '\0';
	lr_step_set_state(s, json_pack("{s:s}", "blob", text));
	return LR_STEP_OK;
}

/* A last step whose final state etcd refuses (--max-request-bytes) ends
 * its task failed, naming the step, after one run: the step is not run
 * again until its attempts are spent. Two tasks, so that one end also
 * goes with the next claim. */
TEST(a_last_step_whose_state_etcd_refuses_fails_once_naming_the_step)
{
	static const char *const extra[] = { "--max-request-bytes=20000", NULL };
	etcdh_opts eo = { .members = 1, .extra_args = extra };
	etcdh_cluster *tight;
	CHECK(etcdh_start(&eo, &tight) == 0);
	lr_client_opts co = { .endpoints = etcdh_endpoints(tight), .prefix = "/errors-wide/" };
	lr_client *c;
	CHECK_OK(lr_client_open(&co, &c, &err), &err);
	atomic_store(&wide_runs, 0);
	struct hosted h;
	hosted_new(&h, c, "wide", 1);
	CHECK_OK(lr_runner_handle(h.r, NULL, wide_state, NULL), &err);
	hosted_submit(c, "{\"id\":\"wide1\",\"max_attempts\":3,"
	                 "\"steps\":[{\"name\":\"last\",\"run\":\"-\"}]}");
	hosted_submit(c, "{\"id\":\"wide2\",\"max_attempts\":3,"
	                 "\"steps\":[{\"name\":\"last\",\"run\":\"-\"}]}");
	hosted_start(&h);
	CHECK_INT(hosted_wait_done(c, "wide1", 10000), ==, LR_TASK_FAILED);
	CHECK_INT(hosted_wait_done(c, "wide2", 10000), ==, LR_TASK_FAILED);
	hosted_end(&h);
	CHECK_INT(atomic_load(&wide_runs), ==, 2);
	lr_task_status st;
	CHECK_OK(lr_task_get(c, "wide1", &st, &err), &err);
	CHECK(st.error != NULL);
	CHECK_HAS(st.error, "step last (0) failed");
	CHECK_HAS(st.error, "too large");
	lr_task_status_clear(&st);
	lr_client_close(c);
	etcdh_destroy(tight);
}

/* A shell step its runner cannot start (here: TMPDIR gone, where its state
 * files go) is counted as not started, spends no attempt of the task's,
 * and the task runs once the runner can start it. */
TEST(a_shell_step_its_runner_cannot_start_is_counted_and_costs_no_attempt)
{
	lr_client *c = hosted_client("/errors-not-started/");
	const char *saved = getenv("TMPDIR");
	char *old = saved != NULL ? strdup(saved) : NULL;
	setenv("TMPDIR", "/nonexistent/leaserun-test", 1);
	struct hosted h;
	hosted_new(&h, c, "not-started", 1);
	CHECK_OK(lr_runner_handle(h.r, NULL, lr_shell_step, NULL), &err);
	hosted_start(&h);
	hosted_submit(c, "{\"id\":\"ns\",\"max_attempts\":1,"
	                 "\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]}");
	lr_runner_stats st;
	int64_t t0 = lr_mono_ms();
	do {
		lr_sleep_ms(20);
		lr_runner_get_stats(h.r, &st);
	} while (st.steps_not_started == 0 && lr_mono_ms() - t0 < 10000);
	CHECK(st.steps_not_started >= 1);
	lr_task_status ts;
	CHECK_OK(lr_task_get(c, "ns", &ts, &err), &err);
	CHECK(ts.state == LR_TASK_PENDING || ts.state == LR_TASK_RUNNING);
	lr_task_status_clear(&ts);
	if (old != NULL)
		setenv("TMPDIR", old, 1);
	else
		unsetenv("TMPDIR");
	free(old);
	CHECK_INT(hosted_wait_done(c, "ns", 40000), ==, LR_TASK_SUCCEEDED);
	hosted_stop(&h);
	lr_runner_get_stats(h.r, &st);
	CHECK(st.steps_retry == 0 && st.steps_fail == 0 && st.attempts_failed == 0);
	CHECK(st.steps_ok == 1);
	CHECK_OK(lr_task_get(c, "ns", &ts, &err), &err);
	CHECK_INT(ts.attempt, ==, 1); /* its one attempt, spent once */
	lr_task_status_clear(&ts);
	lr_runner_free(h.r);
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
	CHECK_INT(lr_runner_run(NULL, &e), ==, LR_EINVAL);
	CHECK_INT(lr_runner_handle(NULL, "x", never_runs, NULL), ==, LR_EINVAL);
	CHECK_INT(lr_runner_set_callbacks(NULL, NULL, NULL), ==, LR_EINVAL);
	lr_runner_stop(NULL); /* nothing, as free(NULL) */
	lr_runner_free(NULL);

	/* The id is optional by nature: the caller may not need it. */
	CHECK_OK(lr_submit_text(c, spec, strlen(spec), "optional-id-out", NULL, NULL, &e), &e);
	lr_client_close(c);
}

/* What a runner logged at LR_LOG_ERROR, for calls that have no lr_err. */
static char runner_error[512];

static void keep_errors(void *user, const lr_log_record *rec)
{
	if (rec->level == LR_LOG_ERROR)
		snprintf(runner_error, sizeof(runner_error), "%s", rec->msg);
	hosted_quiet(user, rec);
}

static atomic_int held_in_step, release_step;

/* Stays in its step until the test lets it go. */
static lr_step_result hold_step(lr_step *s, void *user)
{
	atomic_store(&held_in_step, 1);
	while (!atomic_load(&release_step) && !lr_step_cancelled(s))
		lr_sleep_ms(5);
	return LR_STEP_OK;
}

struct run_arg {
	lr_runner *r;
	int rc;
	lr_err err;
};

static void *run_thread(void *arg)
{
	struct run_arg *a = arg;
	a->rc = lr_runner_run(a->r, &a->err);
	return NULL;
}

/* A runner is configured and run from one thread at a time: a handler, a
 * callback or a second lr_runner_run while it runs is refused, and once
 * it has returned it may run again. */
TEST(a_running_runner_refuses_configuration_and_a_second_run)
{
	lr_client *c = hosted_client("/errors-running/");
	lr_runner_opts o = { .name = "busy", .ttl_s = 2, .grace_s = 1, .exit_when_idle = 1,
	                     .log = keep_errors };
	lr_runner *r;
	lr_err e;
	CHECK_OK(lr_runner_new(c, &o, &r, &e), &e);
	runner_error[0] = '\0';
	CHECK_INT(lr_runner_handle(r, "x", NULL, NULL), ==, LR_EINVAL);
	CHECK_HAS(runner_error, "lr_runner_handle: fn must not be NULL");
	CHECK_INT(lr_runner_set_callbacks(r, NULL, NULL), ==, LR_EINVAL);
	CHECK_HAS(runner_error, "lr_runner_set_callbacks: cb must not be NULL");
	CHECK_OK(lr_runner_handle(r, NULL, hold_step, NULL), &e);

	atomic_store(&held_in_step, 0);
	atomic_store(&release_step, 0);
	hosted_submit(c, "{\"id\":\"held\",\"steps\":[{\"name\":\"a\",\"run\":\"-\"}]}");
	struct run_arg a = { .r = r };
	pthread_t th;
	pthread_create(&th, NULL, run_thread, &a);
	for (int64_t end = lr_mono_ms() + 10000; !atomic_load(&held_in_step);) {
		if (lr_mono_ms() > end) {
			atomic_store(&release_step, 1);
			lr_runner_stop(r);
			pthread_join(th, NULL);
			TEST_FAIL("the step did not start: %s", a.err.msg);
		}
		lr_sleep_ms(5);
	}
	int second = lr_runner_run(r, &e);
	char second_msg[sizeof(e.msg)];
	snprintf(second_msg, sizeof(second_msg), "%s", e.msg);
	int handle_rc = lr_runner_handle(r, "late", never_runs, NULL);
	char handle_msg[sizeof(runner_error)];
	snprintf(handle_msg, sizeof(handle_msg), "%s", runner_error);
	lr_runner_callbacks cb = { 0 };
	int callbacks_rc = lr_runner_set_callbacks(r, &cb, NULL);
	atomic_store(&release_step, 1);
	pthread_join(th, NULL);
	CHECK_INT(second, ==, LR_EINVAL);
	CHECK_HAS(second_msg, "the runner is running already");
	CHECK_INT(handle_rc, ==, LR_EINVAL);
	CHECK_HAS(handle_msg, "lr_runner_handle: not while lr_runner_run runs");
	CHECK_INT(callbacks_rc, ==, LR_EINVAL);
	CHECK_OK(a.rc, &a.err);
	CHECK_INT(hosted_wait_done(c, "held", 1000), ==, LR_TASK_SUCCEEDED);

	/* Returned (idle): it runs again, and takes the next task. */
	hosted_submit(c, "{\"id\":\"again\",\"steps\":[{\"name\":\"a\",\"run\":\"-\"}]}");
	CHECK_OK(lr_runner_run(r, &e), &e);
	CHECK_INT(hosted_wait_done(c, "again", 1000), ==, LR_TASK_SUCCEEDED);
	lr_runner_free(r);
	lr_client_close(c);
}

/* A stop asked for before the run is a clean return: no leftover message
 * from the listing it cut short. */
TEST(a_runner_stopped_before_it_runs_returns_0_with_no_error)
{
	lr_client *c = hosted_client("/errors-stopped/");
	lr_runner_opts o = { .name = "early", .ttl_s = 2, .log = hosted_quiet };
	lr_runner *r;
	lr_err e;
	CHECK_OK(lr_runner_new(c, &o, &r, &e), &e);
	CHECK_OK(lr_runner_handle(r, NULL, never_runs, NULL), &e);
	lr_runner_stop(r);
	memset(&e, 'x', sizeof(e));
	CHECK_OK(lr_runner_run(r, &e), &e);
	CHECK_INT(e.code, ==, 0);
	CHECK_STR(e.msg, "");
	lr_runner_free(r);
	lr_client_close(c);
}

/* The fd limit that leaves this process `room` more fds than it has. */
static rlim_t fds_with_room(int room)
{
	int fd = 0;
	for (; room > 0; fd++)
		if (fcntl(fd, F_GETFD) == -1)
			room--;
	return (rlim_t)fd;
}

/* A runner whose workers cannot all start (out of fds: each worker's stop
 * takes four) fails with LR_ESYS, and runs again later with all of its
 * workers, not only those that had started. */
TEST(a_runner_whose_workers_cannot_start_runs_again_with_all_of_them)
{
	lr_client *c = hosted_client("/errors-fds/");
	for (int threads = 0; threads <= 4; threads += 4) { /* a thread each; fibers */
		lr_runner_opts o = { .name = "fdless", .ttl_s = 2, .concurrency = 64,
		                     .threads = threads, .exit_when_idle = 1,
		                     .log = hosted_quiet };
		lr_runner *r;
		lr_err e;
		CHECK_OK(lr_runner_new(c, &o, &r, &e), &e);
		CHECK_OK(lr_runner_handle(r, NULL, never_runs, NULL), &e);
		struct rlimit was;
		CHECK(getrlimit(RLIMIT_NOFILE, &was) == 0);
		/* Room for the runner's streams and a few workers, not for 64. */
		struct rlimit low = { .rlim_cur = fds_with_room(48), .rlim_max = was.rlim_max };
		CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
		int rc = lr_runner_run(r, &e);
		CHECK(setrlimit(RLIMIT_NOFILE, &was) == 0);
		CHECK_INT(rc, ==, LR_ESYS);
		CHECK_HAS(e.msg, "cannot start worker");
		CHECK_HAS(e.msg, "of 64");

		lr_runner_stats st;
		lr_runner_get_stats(r, &st);
		CHECK_INT((int64_t)st.slots, ==, 64);
		char spec[128], id[16];
		snprintf(id, sizeof(id), "later-%d", threads);
		snprintf(spec, sizeof(spec),
		         "{\"id\":\"%s\",\"steps\":[{\"name\":\"a\",\"run\":\"-\"}]}", id);
		hosted_submit(c, spec);
		CHECK_OK(lr_runner_run(r, &e), &e);
		CHECK_INT(hosted_wait_done(c, id, 1000), ==, LR_TASK_SUCCEEDED);
		lr_runner_get_stats(r, &st);
		CHECK_INT((int64_t)st.slots, ==, 64);
		lr_runner_free(r);
	}
	lr_client_close(c);
}

#define FREE_CHILD "LR_TEST_FREE_WHILE_RUNNING"

/* In the child: free a runner that runs. Does not return when refused. */
static void free_while_running(void)
{
	lr_client *c = hosted_client("/errors-free/");
	struct hosted h;
	hosted_new(&h, c, "freed", 1);
	CHECK_OK(lr_runner_handle(h.r, NULL, never_runs, NULL), &err);
	hosted_start(&h);
	lr_runner_info *list = NULL;
	size_t n = 0;
	for (int64_t end = lr_mono_ms() + 10000; n == 0 && lr_mono_ms() < end;) {
		free(list);
		CHECK_OK(lr_runners_list(c, &list, &n, &err), &err);
		lr_sleep_ms(10);
	}
	free(list);
	lr_runner_free(h.r);
	printf("# lr_runner_free returned\n");
	exit(0);
}

/* Freeing a runner inside lr_runner_run would be a use after free: the
 * process stops at once, saying why (run in a child process). */
TEST(freeing_a_running_runner_aborts_with_a_message)
{
	if (getenv(FREE_CHILD) != NULL)
		free_while_running();
	int out[2];
	CHECK(pipe2(out, O_CLOEXEC) == 0);
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, out[1], 2);
	char exe[4096];
	ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	CHECK(len > 0);
	exe[len] = '\0';
	char *argv[] = { exe, "freeing_a_running_runner_aborts_with_a_message", NULL };
	setenv(FREE_CHILD, "1", 1);
	setenv(HOSTED_ENDPOINTS, hosted_endpoints(), 1);
	extern char **environ;
	pid_t pid;
	int rc = posix_spawn(&pid, exe, &fa, NULL, argv, environ);
	unsetenv(FREE_CHILD);
	unsetenv(HOSTED_ENDPOINTS);
	posix_spawn_file_actions_destroy(&fa);
	close(out[1]);
	CHECK_INT(rc, ==, 0);
	static char text[65536];
	size_t got = 0;
	ssize_t k;
	while (got < sizeof(text) - 1 && (k = read(out[0], text + got, sizeof(text) - 1 - got)) > 0)
		got += (size_t)k;
	text[got] = '\0';
	close(out[0]);
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT)
		TEST_FAIL("the child was not aborted (status %#x); its stderr:\n%s", status, text);
	CHECK_HAS(text, "lr_runner_free(freed) called while lr_runner_run runs");
}

TEST_LIST(
	TEST_CASE(timeouts_beyond_a_day_or_not_numbers_are_refused),
	TEST_CASE(client_calls_without_an_lr_err_return_the_real_code),
	TEST_CASE(a_runner_without_an_lr_err_reports_an_unreachable_etcd),
	TEST_CASE(a_checkpoint_over_512_kib_is_too_large),
	TEST_CASE(a_last_step_whose_state_etcd_refuses_fails_once_naming_the_step),
	TEST_CASE(a_shell_step_its_runner_cannot_start_is_counted_and_costs_no_attempt),
	TEST_CASE(null_handles_and_out_pointers_are_refused_with_their_name),
	TEST_CASE(a_running_runner_refuses_configuration_and_a_second_run),
	TEST_CASE(a_runner_stopped_before_it_runs_returns_0_with_no_error),
	TEST_CASE(a_runner_whose_workers_cannot_start_runs_again_with_all_of_them),
	TEST_CASE(freeing_a_running_runner_aborts_with_a_message),
);
TEST_MAIN(hosted_setup, hosted_teardown)
