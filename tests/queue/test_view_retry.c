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
#include "etcd/kv.h"
#include "etcd/watch.h"
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

/* The runner, and the watch a re-read of its view starts. */
static void free_runner(void)
{
	if (runner == NULL)
		return;
	lr_view_stop(runner);
	lr_watch_free(runner->watch);
	runner->watch = NULL;
	lr_runner_free(runner);
	runner = NULL;
}

static void fresh_runner(void)
{
	lr_err err = { 0 };
	free_runner();
	lr_runner_opts o = { .name = "viewer", .log_level = LR_LOG_ERROR };
	CHECK_OK(lr_runner_new(client, &o, &runner, &err), &err);
	CHECK_OK(lr_watch_new(lr_client_etcd(client), &runner->watch, &err), &err);
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

/* ---- a re-read while a worker of ours holds the task ---------------------- */

static void put(const char *kind, const char *id, const char *value, int64_t *rev)
{
	char key[LR_KEY_SIZE];
	lr_err err = { 0 };
	lr_key(client, kind, id, key);
	CHECK_OK(lr_kv_put(lr_client_etcd(client), key, value, strlen(value), 0, rev, NULL, &err),
	         &err);
}

static void del(const char *kind, const char *id)
{
	char key[LR_KEY_SIZE];
	lr_err err = { 0 };
	lr_key(client, kind, id, key);
	CHECK_OK(lr_kv_delete(lr_client_etcd(client), key, 0, NULL, NULL, &err), &err);
}

/* Task id stored, read by a re-read of the view, and handed to a worker. */
static lr_entry *stored_and_handed_out(const char *id)
{
	char spec[128];
	lr_err err = { 0 };
	snprintf(spec, sizeof(spec), "{\"id\":\"%s\",\"steps\":[{\"name\":\"s\",\"run\":"
	         "\"true\"}]}", id);
	put(LR_K_TASKS, id, spec, NULL);
	CHECK_OK(lr_view_load(runner, &err), &err);
	lr_entry *e = lr_taskset_find(&runner->set, id);
	CHECK(e != NULL);
	lr_taskset_set_state(&runner->set, e, LR_ENTRY_LOCAL);
	return e;
}

/* Our worker lost the claim to another runner's (revision F), whose claim
 * is gone by the time a re-read reads the view; the report comes after.
 * The task is pending, not held by a claim nobody will delete again. */
TEST(a_report_of_a_claim_older_than_a_re_read_is_stale)
{
	fresh_runner();
	lr_entry *e = stored_and_handed_out("u1");
	int64_t task_rev = e->create_rev, other = 0;
	put(LR_K_CLAIMS, "u1", "{}", &other);
	del(LR_K_CLAIMS, "u1");
	lr_err err = { 0 };
	CHECK_OK(lr_view_load(runner, &err), &err);
	lr_view_settle(runner, "u1", task_rev, false, other, false); /* LOST */
	CHECK_INT(state_of("u1"), ==, LR_ENTRY_PENDING);
}

/* Our worker ended the task, and it was retried (its done record gone)
 * before a re-read; the worker's FINISHED report comes after: pending. */
TEST(a_task_retried_before_a_re_read_stays_pending_after_its_end_is_reported)
{
	fresh_runner();
	lr_entry *e = stored_and_handed_out("u2");
	int64_t task_rev = e->create_rev;
	put(LR_K_DONE, "u2", "{\"status\":\"failed\"}", NULL);
	del(LR_K_DONE, "u2");
	lr_err err = { 0 };
	CHECK_OK(lr_view_load(runner, &err), &err);
	lr_view_settle(runner, "u2", task_rev, true, 0, false); /* FINISHED */
	CHECK_INT(state_of("u2"), ==, LR_ENTRY_PENDING);
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
	free_runner();
	lr_client_close(client);
	etcdh_destroy(cluster);
}

TEST_LIST(
	TEST_CASE(a_retry_seen_before_our_workers_report_of_the_end_keeps_the_task),
	TEST_CASE(a_retry_seen_before_another_runners_end_keeps_the_task),
	TEST_CASE(a_retry_of_a_task_gone_from_the_view_brings_it_back),
	TEST_CASE(a_report_of_a_claim_older_than_a_re_read_is_stale),
	TEST_CASE(a_task_retried_before_a_re_read_stays_pending_after_its_end_is_reported),
);
TEST_MAIN(setup, teardown)
