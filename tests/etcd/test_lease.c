/* test_lease.c - leases and the keepalive service against a real etcd. */
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#include "base/clock.h"
#include "common.h"
#include "etcd/lease.h"
#include "test.h"

static lr_err err;

/* CPU time of this process so far, in ms. */
static int64_t cpu_ms(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000 +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1000;
}

static bool key_exists(lr_etcd *c, const char *k)
{
	lr_range_result r;
	CHECK_OK(lr_kv_get(c, k, &r, &err), &err);
	bool found = r.n == 1;
	lr_range_result_free(&r);
	return found;
}

struct lost {
	atomic_int count;
	atomic_llong at_ms;
	char why[512];
};

static void on_lost(void *user, int64_t id, const char *why)
{
	struct lost *l = user;
	snprintf(l->why, sizeof(l->why), "%s", why);
	l->at_ms = lr_mono_ms();
	l->count++;
}

TEST(grant_gives_at_least_the_minimum_ttl_and_ttl_reports_it)
{
	lr_etcd *c = client_open(NULL);
	int64_t id, granted, sent;
	CHECK_OK(lr_lease_grant(c, 1, &id, &granted, &sent, &err), &err);
	CHECK(id != 0);
	CHECK_INT(granted, >=, 1);
	int64_t ttl, g2;
	CHECK_OK(lr_lease_ttl(c, id, &ttl, &g2, &err), &err);
	CHECK_INT(g2, ==, granted);
	CHECK_INT(ttl, <=, granted);
	CHECK_OK(lr_lease_revoke(c, id, &err), &err);
	CHECK_OK(lr_lease_ttl(c, id, &ttl, NULL, &err), &err);
	CHECK_INT(ttl, ==, -1);
	lr_etcd_close(c);
}

TEST(key_on_a_lease_disappears_after_expiry)
{
	lr_etcd *c = client_open(NULL);
	char k[256];
	snprintf(k, sizeof(k), "%sx", test_prefix("expire"));
	int64_t id, granted, sent;
	CHECK_OK(lr_lease_grant(c, 2, &id, &granted, &sent, &err), &err);
	CHECK_OK(lr_kv_put(c, k, "v", 1, id, NULL, NULL, &err), &err);
	CHECK(key_exists(c, k));
	lr_sleep_ms(granted * 1000 + 1500);
	CHECK(!key_exists(c, k));
	lr_etcd_close(c);
}

TEST(keepalive_keeps_the_key_past_three_ttls)
{
	lr_etcd *c = client_open(NULL);
	lr_keepalive *k;
	CHECK_OK(lr_keepalive_new(c, &k, &err), &err);
	char key[256];
	snprintf(key, sizeof(key), "%sx", test_prefix("keep"));
	int64_t id, granted, sent;
	CHECK_OK(lr_lease_grant(c, 2, &id, &granted, &sent, &err), &err);
	CHECK_OK(lr_kv_put(c, key, "v", 1, id, NULL, NULL, &err), &err);
	struct lost lost = {0};
	CHECK_OK(lr_keepalive_add(k, id, granted, sent, on_lost, NULL, &lost, &err), &err);
	for (int i = 0; i < 7; i++) {
		lr_sleep_ms(granted * 1000 / 2);
		CHECK(key_exists(c, key));
		int64_t left = lr_keepalive_deadline(k, id) - lr_mono_ms();
		CHECK_INT(left, >, 0);
		CHECK_INT(left, <=, granted * 1000);
	}
	CHECK_INT(lost.count, ==, 0);
	lr_keepalive_remove(k, id);
	lr_keepalive_free(k);
	lr_lease_revoke(c, id, NULL);
	lr_etcd_close(c);
}

TEST(several_leases_share_one_keepalive_stream)
{
	lr_etcd *c = client_open(NULL);
	lr_keepalive *k;
	CHECK_OK(lr_keepalive_new(c, &k, &err), &err);
	int64_t ids[5];
	struct lost lost = {0};
	for (int i = 0; i < 5; i++) {
		int64_t granted, sent;
		CHECK_OK(lr_lease_grant(c, 2, &ids[i], &granted, &sent, &err), &err);
		CHECK_OK(lr_keepalive_add(k, ids[i], granted, sent, on_lost, NULL, &lost, &err), &err);
	}
	lr_sleep_ms(5000);
	for (int i = 0; i < 5; i++) {
		int64_t ttl;
		CHECK_OK(lr_lease_ttl(c, ids[i], &ttl, NULL, &err), &err);
		CHECK_INT(ttl, >, 0);
	}
	CHECK_INT(lost.count, ==, 0);
	lr_keepalive_free(k);
	for (int i = 0; i < 5; i++)
		lr_lease_revoke(c, ids[i], NULL);
	lr_etcd_close(c);
}

TEST(revoke_deletes_at_once_and_keepalive_reports_the_loss)
{
	lr_etcd *c = client_open(NULL);
	lr_keepalive *k;
	CHECK_OK(lr_keepalive_new(c, &k, &err), &err);
	char key[256];
	snprintf(key, sizeof(key), "%sx", test_prefix("revoke"));
	int64_t id, granted, sent;
	CHECK_OK(lr_lease_grant(c, 5, &id, &granted, &sent, &err), &err);
	CHECK_OK(lr_kv_put(c, key, "v", 1, id, NULL, NULL, &err), &err);
	struct lost lost = {0};
	CHECK_OK(lr_keepalive_add(k, id, granted, sent, on_lost, NULL, &lost, &err), &err);
	int64_t t0 = lr_mono_ms();
	CHECK_OK(lr_lease_revoke(c, id, &err), &err);
	CHECK(!key_exists(c, key));
	/* The next renewal (within TTL/3) is answered with TTL 0. */
	while (lost.count == 0 && lr_mono_ms() - t0 < granted * 1000)
		lr_sleep_ms(10);
	CHECK_INT(lost.count, ==, 1);
	CHECK_HAS(lost.why, "TTL 0");
	CHECK_INT(lr_keepalive_deadline(k, id), ==, 0);
	lr_keepalive_free(k);
	lr_etcd_close(c);
}

TEST(loss_is_reported_within_the_ttl_when_etcd_stops)
{
	lr_etcd *c = client_open(NULL);
	struct lost lost = {0};
	int64_t id, granted;
	lr_keepalive *k = kept_lease(c, 2, &id, &granted, on_lost, &lost);
	lr_sleep_ms(1000);
	int64_t deadline = lr_keepalive_deadline(k, id);
	int64_t stopped = lr_mono_ms(), cpu0 = cpu_ms();
	CHECK_INT(etcdh_kill(cluster, 0), ==, 0);
	while (lost.count == 0 && lr_mono_ms() - stopped < 5000)
		lr_sleep_ms(10);
	/* Waiting for a stream to come back costs next to nothing: no
	 * renewal is retried in a busy loop. */
	int64_t cpu = cpu_ms() - cpu0, wall = lr_mono_ms() - stopped;
	printf("# %lld ms of CPU in the %lld ms without etcd\n", (long long)cpu, (long long)wall);
	CHECK_INT(cpu, <, wall / 4);
	CHECK_INT(lost.count, ==, 1);
	CHECK_HAS(lost.why, "within the TTL");
	/* It names the endpoint and what went wrong last. */
	CHECK_HAS(lost.why, etcdh_endpoint(cluster, 0));
	CHECK_HAS(lost.why, "; last: ");
	printf("# %s\n", lost.why);
	/* Reported at the deadline (last good renewal + TTL), never later
	 * than TTL after the stop. */
	CHECK_INT(lost.at_ms, >=, deadline);
	CHECK_INT(lost.at_ms - stopped, <=, granted * 1000 + 100);
	printf("# loss reported %lld ms after etcd was killed (TTL %llds)\n",
	       (long long)(lost.at_ms - stopped), (long long)granted);
	lr_keepalive_free(k);
	lr_etcd_close(c);
	CHECK_INT(etcdh_restart(cluster, 0), ==, 0);
}

static int setup(void) { return cluster_up(1, NULL); }

TEST_LIST(
	TEST_CASE(grant_gives_at_least_the_minimum_ttl_and_ttl_reports_it),
	TEST_CASE(key_on_a_lease_disappears_after_expiry),
	TEST_CASE(keepalive_keeps_the_key_past_three_ttls),
	TEST_CASE(several_leases_share_one_keepalive_stream),
	TEST_CASE(revoke_deletes_at_once_and_keepalive_reports_the_loss),
	TEST_CASE(loss_is_reported_within_the_ttl_when_etcd_stops),
);
TEST_MAIN(setup, cluster_down)
