/* hosted.c - runners hosted in the test process, on one real etcd. */
#include "hosted.h"

#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "client/client.h"
#include "client/lock_keys.h"
#include "etcd/kv.h"
#include "etcd_harness.h"
#include "test.h"

static etcdh_cluster *cluster;
static const char *endpoints;

int hosted_setup(void)
{
	/* A child process of a test uses its parent's etcd. */
	endpoints = getenv(HOSTED_ENDPOINTS);
	if (endpoints != NULL)
		return 0;
	etcdh_opts o = { .members = 1 };
	int rc = etcdh_start(&o, &cluster);
	if (rc == 0)
		endpoints = etcdh_endpoints(cluster);
	return rc;
}

void hosted_teardown(void)
{
	etcdh_destroy(cluster);
}

const char *hosted_endpoints(void)
{
	return endpoints;
}

etcdh_cluster *hosted_cluster(void)
{
	return cluster;
}

lr_client *hosted_client(const char *prefix)
{
	lr_client_opts o = { .endpoints = endpoints, .prefix = prefix };
	lr_client *c;
	lr_err err;
	CHECK_OK(lr_client_open(&o, &c, &err), &err);
	return c;
}

void hosted_quiet(void *user, const lr_log_record *rec)
{
	if (rec->level >= LR_LOG_WARN || getenv("TEST_VERBOSE") != NULL)
		lr_log_stderr(NULL, rec);
}

static void *run_thread(void *arg)
{
	struct hosted *h = arg;
	h->rc = lr_runner_run(h->r, &h->err);
	return NULL;
}

/* With HOSTED_THREADS=T in the environment, the runner's workers share
 * T threads as fibers (at most one per worker): the same cases then run
 * on fibers. */
static void new_runner(struct hosted *h, lr_client *c, const lr_runner_opts *o)
{
	lr_err err;
	lr_runner_opts with = *o;
	const char *threads = getenv(HOSTED_THREADS);
	if (threads != NULL) {
		int conc = o->concurrency > 0 ? o->concurrency : 1;
		with.threads = atoi(threads) < conc ? atoi(threads) : conc;
	}
	memset(h, 0, sizeof(*h));
	CHECK_OK(lr_runner_new(c, &with, &h->r, &err), &err);
}

void hosted_new(struct hosted *h, lr_client *c, const char *name, int concurrency)
{
	lr_runner_opts o = { .name = name, .concurrency = concurrency, .ttl_s = 2,
	                     .grace_s = 1, .log = hosted_quiet };
	new_runner(h, c, &o);
}

void hosted_new_logged(struct hosted *h, lr_client *c, const char *name, lr_log_fn sink)
{
	lr_runner_opts o = { .name = name, .ttl_s = 2, .grace_s = 1, .log = sink,
	                     .log_level = LR_LOG_WARN };
	new_runner(h, c, &o);
}

void hosted_start(struct hosted *h)
{
	pthread_create(&h->th, NULL, run_thread, h);
}

void hosted_stop(struct hosted *h)
{
	lr_runner_stop(h->r);
	pthread_join(h->th, NULL);
	if (h->rc != 0)
		TEST_FAIL("runner ended with %d: %s", h->rc, h->err.msg);
}

void hosted_end(struct hosted *h)
{
	hosted_stop(h);
	lr_runner_free(h->r);
	h->r = NULL;
}

lr_task_state hosted_wait_done(lr_client *c, const char *id, int timeout_ms)
{
	int64_t end = lr_mono_ms() + timeout_ms;
	lr_err err;
	for (;;) {
		lr_task_status st;
		CHECK_OK(lr_task_get(c, id, &st, &err), &err);
		lr_task_state s = st.state;
		lr_task_status_clear(&st);
		if (s >= LR_TASK_SUCCEEDED)
			return s;
		if (lr_mono_ms() > end)
			TEST_FAIL("task %s not done after %d ms", id, timeout_ms);
		lr_sleep_ms(10);
	}
}

void hosted_submit(lr_client *c, const char *json)
{
	char id[LR_ID_SIZE];
	lr_err err;
	CHECK_OK(lr_submit_text(c, json, strlen(json), NULL, id, NULL, &err), &err);
}

lr_task_state hosted_run_one(lr_client *c, const char *runner, lr_step_fn fn, void *user,
                             const char *id)
{
	char spec[LR_ID_SIZE + 64];
	lr_err err;
	struct hosted h;
	hosted_new(&h, c, runner, 1);
	CHECK_OK(lr_runner_handle(h.r, NULL, fn, user), &err);
	hosted_start(&h);
	snprintf(spec, sizeof(spec), "{\"id\":\"%s\",\"steps\":[{\"name\":\"one\",\"run\":\"-\"}]}", id);
	hosted_submit(c, spec);
	lr_task_state st = hosted_wait_done(c, id, 10000);
	hosted_end(&h);
	return st;
}

int64_t hosted_count(lr_client *c, const char *kind, const char *rest)
{
	char key[LR_LOCK_KEY_SIZE];
	lr_err err;
	lr_key(c, kind, "", key);
	strncat(key, rest, sizeof(key) - strlen(key) - 1);
	lr_range_opts o = { .key = key, .flags = LR_KEY_PREFIX | LR_RANGE_COUNT_ONLY };
	lr_range_result r;
	CHECK_OK(lr_kv_range(lr_client_etcd(c), &o, &r, &err), &err);
	int64_t n = r.count;
	lr_range_result_free(&r);
	return n;
}

int64_t hosted_claim_lease(lr_client *c, const char *id)
{
	char key[LR_KEY_SIZE];
	lr_err err;
	lr_key(c, LR_K_CLAIMS, id != NULL ? id : "", key);
	lr_range_opts o = { .key = key, .flags = id != NULL ? 0 : LR_KEY_PREFIX, .limit = 1 };
	lr_range_result r;
	CHECK_OK(lr_kv_range(lr_client_etcd(c), &o, &r, &err), &err);
	int64_t lease = r.n >= 1 ? r.kvs[0].lease : 0;
	lr_range_result_free(&r);
	return lease;
}
