/* bench_client.c - latency of the etcd client against a local one-member
 * etcd: Put and Txn p50/p99 over sequential calls, the keepalive round trip,
 * and the RSS of an idle client. Prints numbers; asserts nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "common.h"
#include "etcd/lease.h"
#include "etcd/watch.h"
#include "test.h"

TEST_GLOBALS;

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static void report(const char *what, int64_t *us, int n)
{
	qsort(us, n, sizeof(*us), cmp64);
	printf("%-28s n=%d p50=%.3f ms p99=%.3f ms max=%.3f ms\n", what, n,
	       us[n / 2] / 1000.0, us[n * 99 / 100] / 1000.0, us[n - 1] / 1000.0);
}

static long rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kb = -1;
	while (f != NULL && fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, "VmRSS:", 6) == 0)
			kb = strtol(line + 6, NULL, 10);
	if (f != NULL)
		fclose(f);
	return kb;
}

static void noop_lost(void *u, int64_t id, const char *why) {}
static void noop_watch(void *u, const lr_watch_batch *b) {}

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 1000;
	const char *endpoints = getenv("LEASERUN_ENDPOINTS");
	if (endpoints == NULL) {
		if (cluster_up(1, NULL) != 0)
			return 1;
		endpoints = etcdh_endpoints(cluster);
	}
	lr_err err;
	lr_etcd_opts o = { .endpoints = endpoints };
	lr_etcd *c;
	if (lr_etcd_open(&o, &c, &err) != 0) {
		fprintf(stderr, "%s\n", err.msg);
		return 1;
	}
	int64_t *us = calloc(n, sizeof(*us));
	for (int i = 0; i < n; i++) {
		char k[64];
		snprintf(k, sizeof(k), "/bench/put/%d", i);
		int64_t t0 = lr_mono_us();
		if (lr_kv_put(c, k, "value", 5, 0, NULL, NULL, &err) != 0) {
			fprintf(stderr, "%s\n", err.msg);
			return 1;
		}
		us[i] = lr_mono_us() - t0;
	}
	report("Put", us, n);
	for (int i = 0; i < n; i++) {
		char k[64];
		snprintf(k, sizeof(k), "/bench/txn/%d", i);
		int64_t t0 = lr_mono_us();
		lr_txn *t = lr_txn_new();
		lr_txn_cmp(t, k, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
		lr_txn_put(t, LR_THEN, k, "value", 5, 0);
		lr_txn_get(t, LR_ELSE, k, 0);
		lr_txn_result r;
		if (lr_etcd_txn(c, t, LR_CALL_RETRY, &r, &err) != 0) {
			fprintf(stderr, "%s\n", err.msg);
			return 1;
		}
		lr_txn_result_free(&r);
		lr_txn_free(t);
		us[i] = lr_mono_us() - t0;
	}
	report("Txn (create-once)", us, n);
	for (int i = 0; i < n; i++) {
		int64_t t0 = lr_mono_us();
		lr_range_result r;
		lr_kv_get(c, "/bench/put/0", &r, &err);
		lr_range_result_free(&r);
		us[i] = lr_mono_us() - t0;
	}
	report("Range (one key)", us, n);

	/* Keepalive round trip: time from a renewal's send to its reply,
	 * measured through the deadline moving (deadline = send + TTL). */
	lr_keepalive *k;
	lr_keepalive_new(c, &k, &err);
	int64_t id, granted, sent;
	lr_lease_grant(c, 3, &id, &granted, &sent, &err);
	lr_keepalive_add(k, id, granted, sent, noop_lost, NULL, NULL, &err);
	int m = 0;
	int64_t prev = lr_keepalive_deadline(k, id);
	int64_t end = lr_mono_ms() + 6000;
	while (lr_mono_ms() < end && m < n) {
		int64_t d = lr_keepalive_deadline(k, id);
		if (d != prev) {
			/* renewal observed: round trip = now - (d - TTL) */
			us[m++] = (lr_mono_ms() - (d - granted * 1000)) * 1000;
			prev = d;
		}
		lr_sleep_ms(1);
	}
	if (m > 0)
		report("Keepalive round trip (1ms res)", us, m);
	lr_watch *w;
	lr_watch_new(c, &w, &err);
	lr_watcher *wr;
	lr_watch_add(w, "/bench/", LR_KEY_PREFIX, 0, noop_watch, NULL, &wr, &err);
	lr_sleep_ms(1000);
	printf("%-28s %ld kB (client with a keepalive and a watch)\n", "Idle client RSS", rss_kb());
	lr_watch_free(w);
	lr_keepalive_free(k);
	lr_lease_revoke(c, id, NULL);
	lr_kv_delete(c, "/bench/", LR_KEY_PREFIX, NULL, NULL, &err);
	free(us);
	lr_etcd_close(c);
	cluster_down();
	return 0;
}
