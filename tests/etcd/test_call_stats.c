/* test_call_stats.c - the etcd client counts its calls per method: unary
 * attempts, errors by code and latency; streams reopened after a failure;
 * keepalive round trips. Against a real etcd, but for the table itself. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "base/clock.h"
#include "common.h"
#include "etcd/callstats.h"
#include "etcd/lease.h"
#include "etcd/watch.h"
#include "test.h"

static lr_err err;

struct pick {
	const char *method;
	lr_etcd_call_stat st;
	int found;
};

static void pick_one(void *user, const lr_etcd_call_stat *st)
{
	struct pick *p = user;
	if (strcmp(st->method, p->method) == 0) {
		p->st = *st;
		p->found++;
	}
}

/* The counts of one method now; all zero when it was never called. */
static lr_etcd_call_stat stat_of(lr_etcd *c, const char *method)
{
	struct pick p = { .method = method };
	lr_etcd_call_stats(c, pick_one, &p);
	if (p.found > 1)
		TEST_FAIL("%s handed out %d times", method, p.found);
	return p.st;
}

static uint64_t all_errors(const lr_etcd_call_stat *st)
{
	uint64_t n = 0;
	for (int i = 0; i < LR_CALL_CODES; i++)
		n += st->errors[i];
	return n;
}

TEST(unary_calls_count_attempts_latency_and_errors_by_code)
{
	lr_etcd *c = client_open(NULL);
	const char *p = test_prefix("unary");
	char k[256];
	snprintf(k, sizeof(k), "%sk", p);
	for (int i = 0; i < 3; i++)
		CHECK_OK(lr_kv_put(c, k, "v", 1, 0, NULL, NULL, &err), &err);
	for (int i = 0; i < 2; i++) {
		lr_range_result r;
		CHECK_OK(lr_kv_get(c, k, &r, &err), &err);
		lr_range_result_free(&r);
	}
	/* A put on a lease etcd never granted fails, at once and for good. */
	CHECK_INT(lr_kv_put(c, k, "v", 1, 0x7e57, NULL, NULL, &err), ==, LR_ELEASE);

	lr_etcd_call_stat put = stat_of(c, "KV/Put");
	CHECK_STR(put.method, "KV/Put");
	CHECK(!put.stream);
	CHECK_INT(put.calls, ==, 4);
	CHECK_INT(put.attempts, ==, 4); /* writes are never attempted twice */
	CHECK_INT(put.errors[-LR_ELEASE], ==, 1);
	CHECK_INT(all_errors(&put), ==, 1);
	CHECK_INT(put.latency.count, ==, 4);
	CHECK(put.latency.sum_us > 0);
	CHECK_INT(put.reopens, ==, 0);

	lr_etcd_call_stat range = stat_of(c, "KV/Range");
	CHECK_INT(range.calls, ==, 2);
	CHECK_INT(range.attempts, ==, 2);
	CHECK_INT(all_errors(&range), ==, 0);
	CHECK_INT(range.latency.count, ==, 2);

	CHECK(stat_of(c, "KV/Txn").method == NULL); /* never called */
	lr_etcd_close(c);
}

static void ignore_loss(void *user, int64_t id, const char *why)
{
	atomic_fetch_add((atomic_int *)user, 1);
}

static void ignore_batch(void *user, const lr_watch_batch *b)
{
}

static int renewed(void *arg)
{
	return stat_of(arg, "Lease/LeaseKeepAlive").latency.count >= 1;
}

static int both_reopened(void *arg)
{
	return stat_of(arg, "Lease/LeaseKeepAlive").reopens >= 1 &&
	       stat_of(arg, "Watch/Watch").reopens >= 1;
}

TEST(streams_count_reopens_after_a_failure_and_keepalive_round_trips)
{
	lr_etcd *c = client_open(NULL);
	int64_t id, granted, sent;
	CHECK_OK(lr_lease_grant(c, 2, &id, &granted, &sent, &err), &err);
	lr_keepalive *k;
	CHECK_OK(lr_keepalive_new(c, &k, &err), &err);
	atomic_int lost = 0;
	CHECK_OK(lr_keepalive_add(k, id, granted, sent, ignore_loss, NULL, &lost, &err), &err);
	lr_watch *w;
	CHECK_OK(lr_watch_new(c, &w, &err), &err);
	lr_watcher *wr;
	CHECK_OK(lr_watch_add(w, test_prefix("streams"), LR_KEY_PREFIX, 0, ignore_batch,
	                      NULL, &wr, &err), &err);

	/* A renewal goes out at a third of the TTL; its reply is timed. */
	CHECK_INT(wait_until(renewed, c, granted * 1000 + 2000), ==, 0);
	lr_etcd_call_stat ka = stat_of(c, "Lease/LeaseKeepAlive");
	CHECK(ka.stream);
	CHECK_INT(ka.calls, ==, 0);
	CHECK_INT(ka.reopens, ==, 0);
	CHECK(ka.latency.max_us < (uint64_t)granted * 1000000);
	CHECK_INT(stat_of(c, "Watch/Watch").reopens, ==, 0);

	/* The member goes away and comes back: both streams open again. */
	CHECK_INT(etcdh_stop(cluster, 0), ==, 0);
	int reopened = wait_until(both_reopened, c, 10000);
	CHECK_INT(etcdh_restart(cluster, 0), ==, 0);
	CHECK_INT(reopened, ==, 0);

	lr_watcher_cancel(wr);
	lr_watch_free(w);
	lr_keepalive_free(k);
	lr_etcd_close(c);
}

/* The table alone: no etcd needed. */
TEST(the_table_keeps_one_slot_per_method_and_counts_odd_codes_apart)
{
	lr_call_stats *s = lr__call_stats_new();
	CHECK(s != NULL);
	lr_call_slot *a = lr__call_slot(s, "/etcdserverpb.KV/Range", false);
	CHECK(a != NULL);
	CHECK(lr__call_slot(s, "/etcdserverpb.KV/Range", false) == a);
	lr__call_count_result(a, LR_ETIMEDOUT);
	lr__call_count_result(a, -1000); /* no such code: errors[0] */
	lr__call_count_result(a, 0);
	char name[64];
	for (int i = 1; i < LR_CALL_METHODS; i++) {
		snprintf(name, sizeof(name), "/etcdserverpb.Test/M%d", i);
		CHECK(lr__call_slot(s, name, false) != NULL);
	}
	/* Full: a new method is not counted, the known ones still are. */
	lr_call_slot *none = lr__call_slot(s, "/etcdserverpb.Test/More", false);
	CHECK(none == NULL);
	lr__call_count_result(none, LR_EETCD);
	lr__call_count_attempt(none, 5);
	CHECK(lr__call_slot(s, "/etcdserverpb.KV/Range", false) == a);

	struct pick p = { .method = "KV/Range" };
	lr__call_stats_each(s, pick_one, &p);
	CHECK_INT(p.found, ==, 1);
	CHECK_INT(p.st.calls, ==, 3);
	CHECK_INT(p.st.errors[-LR_ETIMEDOUT], ==, 1);
	CHECK_INT(p.st.errors[0], ==, 1);
	CHECK_INT(all_errors(&p.st), ==, 2);
	lr__call_stats_free(s);
}

static int setup(void) { return cluster_up(1, NULL); }

TEST_LIST(
	TEST_CASE(unary_calls_count_attempts_latency_and_errors_by_code),
	TEST_CASE(streams_count_reopens_after_a_failure_and_keepalive_round_trips),
	TEST_CASE(the_table_keeps_one_slot_per_method_and_counts_odd_codes_apart),
);
TEST_MAIN(setup, cluster_down)
