/* test_view_retry.c - a runner's view of a task retried while the end of
 * its last run is still on its way to that view: the retry's queue/ event
 * may come before the FINISHED report of a worker of ours, or before the
 * done/ and claims/ events of another runner's end (their own watcher).
 * Either way the task stays pending. Messages are applied to the view of
 * a runner that is not running (its client talks to a real etcd only to
 * connect). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/runner_int.h"
#include "etcd_harness.h"
#include "test.h"

static etcdh_cluster *cluster;
static lr_client *client;
static lr_runner *runner;

static void apply(enum lr_dir dir, const char *id, bool deleted, int64_t create_rev,
                  int64_t mod_rev, const char *value)
{
	struct lr_msg *m = lr_msg_new(LR_MSG_WATCH);
	CHECK(m != NULL);
	m->u.watch.dir = dir;
	m->u.watch.deleted = deleted;
	snprintf(m->u.watch.id, sizeof(m->u.watch.id), "%s", id);
	m->u.watch.create_rev = create_rev;
	m->u.watch.mod_rev = mod_rev;
	m->u.watch.version = 1;
	m->u.watch.lease = dir == LR_DIR_CLAIMS && !deleted ? 0x77 : 0;
	if (value != NULL) {
		m->u.watch.value = strdup(value);
		m->u.watch.len = strlen(value);
	}
	lr_view_apply(runner, m);
	lr_msg_free(m);
}

static void fresh_runner(void)
{
	lr_err err = { 0 };
	lr_runner_free(runner);
	lr_runner_opts o = { .name = "viewer", .log_level = LR_LOG_ERROR };
	CHECK_OK(lr_runner_new(client, &o, &runner, &err), &err);
	/* Task t, created at revision 10. */
	apply(LR_DIR_TASKS, "t", false, 10, 10,
	      "{\"id\":\"t\",\"steps\":[{\"name\":\"s\",\"run\":\"true\"}]}");
	CHECK(lr_taskset_find(&runner->set, "t") != NULL);
}

static enum lr_entry_state state_of(const char *id)
{
	lr_entry *e = lr_taskset_find(&runner->set, id);
	CHECK(e != NULL); /* still in the view */
	return e->state;
}

TEST(a_retry_seen_before_our_workers_report_of_the_end_keeps_the_task)
{
	fresh_runner();
	lr_entry *e = lr_taskset_find(&runner->set, "t");
	lr_taskset_set_state(&runner->set, e, LR_ENTRY_LOCAL); /* handed out */
	/* Our worker ended it (done at 20); the retry (30) is seen first. */
	apply(LR_DIR_QUEUE, "t", false, 30, 30, "{\"task_rev\":10}");
	apply(LR_DIR_DONE, "t", false, 20, 20, "{}");
	lr_view_settle(runner, "t", 10, true, 0, false); /* FINISHED */
	CHECK_INT(state_of("t"), ==, LR_ENTRY_PENDING);
}

TEST(a_retry_seen_before_another_runners_end_keeps_the_task)
{
	fresh_runner();
	apply(LR_DIR_CLAIMS, "t", false, 12, 12, "{}"); /* another runner */
	CHECK_INT(state_of("t"), ==, LR_ENTRY_CLAIMED);
	apply(LR_DIR_QUEUE, "t", false, 30, 30, "{\"task_rev\":10}");
	CHECK_INT(state_of("t"), ==, LR_ENTRY_PENDING);
	/* Its end, late on the claims/ and done/ watcher. */
	apply(LR_DIR_DONE, "t", false, 20, 20, "{}");
	apply(LR_DIR_CLAIMS, "t", true, 0, 20, NULL);
	CHECK_INT(state_of("t"), ==, LR_ENTRY_PENDING);
	/* A claim after the retry counts again. */
	apply(LR_DIR_CLAIMS, "t", false, 31, 31, "{}");
	CHECK_INT(state_of("t"), ==, LR_ENTRY_CLAIMED);
}

TEST(a_retry_of_a_task_gone_from_the_view_brings_it_back)
{
	fresh_runner();
	apply(LR_DIR_DONE, "t", false, 20, 20, "{}");
	CHECK(lr_taskset_find(&runner->set, "t") == NULL);
	apply(LR_DIR_QUEUE, "t", false, 30, 30, "{\"task_rev\":10,\"priority\":3}");
	CHECK_INT(state_of("t"), ==, LR_ENTRY_PENDING);
	CHECK_INT(lr_taskset_find(&runner->set, "t")->priority, ==, 3);
}

static int setup(void)
{
	etcdh_opts o = { .members = 1 };
	if (etcdh_start(&o, &cluster) != 0)
		return -1;
	lr_client_opts co = { .endpoints = etcdh_endpoints(cluster), .prefix = "/view-retry/" };
	lr_err err = { 0 };
	return lr_client_open(&co, &client, &err);
}

static void teardown(void)
{
	lr_runner_free(runner);
	lr_client_close(client);
	etcdh_destroy(cluster);
}

TEST_LIST(
	TEST_CASE(a_retry_seen_before_our_workers_report_of_the_end_keeps_the_task),
	TEST_CASE(a_retry_seen_before_another_runners_end_keeps_the_task),
	TEST_CASE(a_retry_of_a_task_gone_from_the_view_brings_it_back),
);
TEST_MAIN(setup, teardown)
