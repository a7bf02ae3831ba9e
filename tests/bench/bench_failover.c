/* bench_failover.c - takeover time after SIGKILL of the holder mid-step
 * (TTL 2 s and 5 s) and handoff time after SIGTERM, with real runner
 * processes on a local one-member etcd. Prints numbers; asserts nothing.
 *
 * usage: bench_failover [TRIALS] [RUNNERS]   (defaults 10 and 3)
 * Takeover is measured from the kill to the new claim's PUT event. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd/watch.h"
#include "etcd_harness.h"
#include "fleet.h"
#include "test.h"

TEST_GLOBALS;

struct claims_seen {
	pthread_mutex_t mu;
	char task[64];
	int64_t at_ms;       /* mono time of the latest claim PUT of `task` */
	int64_t released_ms; /* mono time of its latest DELETE */
};

static void on_claim(void *user, const lr_watch_batch *b)
{
	struct claims_seen *cs = user;
	int64_t now = lr_mono_ms();
	pthread_mutex_lock(&cs->mu);
	for (size_t i = 0; i < b->n; i++) {
		const char *slash = strrchr(b->events[i].kv.key, '/');
		if (slash == NULL || strcmp(slash + 1, cs->task) != 0)
			continue;
		if (b->events[i].type == LR_EV_PUT)
			cs->at_ms = now;
		else
			cs->released_ms = now;
	}
	pthread_mutex_unlock(&cs->mu);
}

static int64_t seen(struct claims_seen *cs)
{
	pthread_mutex_lock(&cs->mu);
	int64_t v = cs->at_ms;
	pthread_mutex_unlock(&cs->mu);
	return v;
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static void print_stats(const char *what, int64_t *v, int n)
{
	if (n == 0) {
		printf("%-34s no sample\n", what);
		return;
	}
	qsort(v, n, sizeof(*v), cmp64);
	printf("%-34s n=%d min=%lld median=%lld p95=%lld max=%lld ms\n", what, n,
	       (long long)v[0], (long long)v[n / 2], (long long)v[(n * 95 + 99) / 100 - 1],
	       (long long)v[n - 1]);
}

/* One trial: a task whose second step is long; when it runs, signal the
 * holder; returns ms from the signal (or the holder's exit, for SIGTERM)
 * to the next claim, -1 on failure. */
static int64_t trial(fleet *f, struct claims_seen *cs, int runners, int sig, int n,
                     const char *const *extra)
{
	char id[32];
	snprintf(id, sizeof(id), "trial%d", n);
	pthread_mutex_lock(&cs->mu);
	snprintf(cs->task, sizeof(cs->task), "%s", id);
	cs->at_ms = 0;
	pthread_mutex_unlock(&cs->mu);
	fleet_submit(f, id, "{\"id\":\"%s\",\"steps\":[{\"name\":\"a\",\"run\":\"true\"},"
	                    "{\"name\":\"b\",\"run\":\"echo run $LEASERUN_TASK_ID >> $MARKS/marks; sleep 30\"}]}");
	char mark[48];
	snprintf(mark, sizeof(mark), "run %s", id);
	if (fleet_wait_marks(f, mark, 1, 15000) != 0)
		return -1;
	int holder = fleet_holder(f, id);
	if (holder < 0)
		return -1;
	int64_t first = seen(cs);
	kill(f->pids[holder], sig);
	int64_t t0 = lr_mono_ms();
	if (sig == SIGTERM) {
		fleet_wait(f, holder, 15000);
		t0 = lr_mono_ms();
	}
	int64_t end = lr_mono_ms() + 15000;
	while (seen(cs) == first && lr_mono_ms() < end)
		lr_sleep_ms(1);
	int64_t took = seen(cs) != first ? seen(cs) - t0 : -1;
	if (seen(cs) != first && took < 0)
		took = 0; /* taken over before the released runner had even exited */
	if (sig == SIGKILL)
		fleet_wait(f, holder, 5000);
	lr_cancel(f->client, id, NULL, NULL); /* free the runner for the next trial */
	fleet_wait_state(f, id, LR_TASK_CANCELLED, 15000);
	fleet_start(f, holder, extra); /* replace the dead runner */
	(void)runners;
	return took < 0 ? -1 : took;
}

static void series(const char *endpoints, const char *name, const char *ttl, int sig,
                   int trials, int runners)
{
	fleet f;
	fleet_init(&f, endpoints, name);
	const char *extra[] = { "--ttl", ttl, "--grace", "1", NULL };
	for (int i = 0; i < runners; i++)
		fleet_start(&f, i, extra);
	struct claims_seen cs = { .mu = PTHREAD_MUTEX_INITIALIZER };
	lr_watch *w;
	lr_watcher *wr;
	lr_err err;
	char key[LR_KEY_SIZE];
	lr_key(f.client, LR_K_CLAIMS, "", key);
	if (lr_watch_new(lr_client_etcd(f.client), &w, &err) != 0 ||
	    lr_watch_add(w, key, LR_KEY_PREFIX, 0, on_claim, &cs, &wr, &err) != 0) {
		fprintf(stderr, "%s\n", err.msg);
		exit(1);
	}
	int64_t v[64];
	int n = 0;
	for (int t = 0; t < trials && t < 64; t++) {
		int64_t took = trial(&f, &cs, runners, sig, t, extra);
		if (took >= 0)
			v[n++] = took;
		else
			fprintf(stderr, "trial %d of %s failed\n", t, name);
	}
	char what[80];
	snprintf(what, sizeof(what), "%s, TTL %s s", sig == SIGKILL ? "takeover after SIGKILL"
	                                           : "handoff after SIGTERM (from exit)", ttl);
	print_stats(what, v, n);
	lr_watch_free(w);
	fleet_destroy(&f);
}

int main(int argc, char **argv)
{
	int trials = argc > 1 ? atoi(argv[1]) : 10;
	int runners = argc > 2 ? atoi(argv[2]) : 3;
	etcdh_cluster *cluster;
	etcdh_opts o = { .members = 1 };
	if (getenv("LEASERUN_BIN") == NULL || etcdh_start(&o, &cluster) != 0) {
		fprintf(stderr, "bench_failover: needs LEASERUN_BIN and etcd\n");
		return 1;
	}
	printf("%d trials, %d runners, holder killed in the middle of a step\n", trials, runners);
	series(etcdh_endpoints(cluster), "ttl2", "2", SIGKILL, trials, runners);
	series(etcdh_endpoints(cluster), "ttl5", "5", SIGKILL, trials, runners);
	series(etcdh_endpoints(cluster), "term", "2", SIGTERM, trials, runners);
	etcdh_destroy(cluster);
	return 0;
}
