/* test_watch.c - watches against real etcd: order, resumption across a
 * member restart in a three-member cluster, compaction. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.pb-c.h"

#include "base/clock.h"
#include "common.h"
#include "etcd/watch.h"
#include "test.h"

static lr_err err;

/* What a watcher saw, in order. */
struct seen {
	pthread_mutex_t mu;
	int n;
	int cap;
	int64_t *revs;
	int *types;
	char (*keys)[64];
	int created;
	int compacted;
	int64_t compact_rev;
};

static void seen_init(struct seen *s, int cap)
{
	memset(s, 0, sizeof(*s));
	pthread_mutex_init(&s->mu, NULL);
	s->cap = cap;
	s->revs = calloc(cap, sizeof(*s->revs));
	s->types = calloc(cap, sizeof(*s->types));
	s->keys = calloc(cap, sizeof(*s->keys));
}

static void seen_free(struct seen *s)
{
	free(s->revs);
	free(s->types);
	free(s->keys);
	pthread_mutex_destroy(&s->mu);
}

static int seen_count(struct seen *s)
{
	pthread_mutex_lock(&s->mu);
	int n = s->n;
	pthread_mutex_unlock(&s->mu);
	return n;
}

static void on_batch(void *user, const lr_watch_batch *b)
{
	struct seen *s = user;
	pthread_mutex_lock(&s->mu);
	if (b->kind == LR_WATCH_CREATED)
		s->created++;
	if (b->kind == LR_WATCH_COMPACTED) {
		s->compacted++;
		s->compact_rev = b->compact_revision;
	}
	for (size_t i = 0; i < b->n && s->n < s->cap; i++) {
		s->revs[s->n] = b->events[i].kv.mod_rev;
		s->types[s->n] = b->events[i].type;
		snprintf(s->keys[s->n], 64, "%s", b->events[i].kv.key);
		s->n++;
	}
	pthread_mutex_unlock(&s->mu);
}

static void wait_count(struct seen *s, int n, int timeout_ms)
{
	int64_t end = lr_mono_ms() + timeout_ms;
	while (seen_count(s) < n && lr_mono_ms() < end)
		lr_sleep_ms(10);
}

TEST(puts_and_deletes_arrive_in_revision_order)
{
	lr_etcd *c = client_open(NULL);
	lr_watch *w;
	CHECK_OK(lr_watch_new(c, &w, &err), &err);
	const char *p = test_prefix("order");
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "%s", p);
	struct seen s;
	seen_init(&s, 200);
	lr_watcher *wr;
	CHECK_OK(lr_watch_add(w, prefix, LR_KEY_PREFIX | LR_WATCH_PREV_KV, 0, on_batch, &s, &wr, &err), &err);
	while (s.created == 0)
		lr_sleep_ms(5);
	int64_t revs[60];
	for (int i = 0; i < 50; i++) {
		char k[160];
		snprintf(k, sizeof(k), "%sk%02d", prefix, i % 10);
		CHECK_OK(lr_kv_put(c, k, "v", 1, 0, &revs[i], NULL, &err), &err);
	}
	for (int i = 0; i < 10; i++) {
		char k[160];
		snprintf(k, sizeof(k), "%sk%02d", prefix, i);
		CHECK_OK(lr_kv_delete(c, k, 0, NULL, &revs[50 + i], &err), &err);
	}
	wait_count(&s, 60, 5000);
	CHECK_INT(seen_count(&s), ==, 60);
	for (int i = 0; i < 60; i++) {
		CHECK_INT(s.revs[i], ==, revs[i]);
		CHECK_INT(s.types[i], ==, i < 50 ? LR_EV_PUT : LR_EV_DELETE);
	}
	lr_watcher_cancel(wr);
	/* No callback after cancel: a write now is not seen. */
	char k[160];
	snprintf(k, sizeof(k), "%safter", prefix);
	CHECK_OK(lr_kv_put(c, k, "v", 1, 0, NULL, NULL, &err), &err);
	lr_sleep_ms(200);
	CHECK_INT(seen_count(&s), ==, 60);
	lr_watch_free(w);
	lr_etcd_close(c);
	seen_free(&s);
}

TEST(watch_from_a_past_revision_replays_history)
{
	lr_etcd *c = client_open(NULL);
	const char *p = test_prefix("replay");
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "%s", p);
	int64_t first = 0, last = 0;
	for (int i = 0; i < 5; i++) {
		char k[160];
		snprintf(k, sizeof(k), "%sk%d", prefix, i);
		CHECK_OK(lr_kv_put(c, k, "v", 1, 0, &last, NULL, &err), &err);
		if (i == 0)
			first = last;
	}
	lr_watch *w;
	CHECK_OK(lr_watch_new(c, &w, &err), &err);
	struct seen s;
	seen_init(&s, 10);
	lr_watcher *wr;
	CHECK_OK(lr_watch_add(w, prefix, LR_KEY_PREFIX, first, on_batch, &s, &wr, &err), &err);
	wait_count(&s, 5, 5000);
	CHECK_INT(seen_count(&s), ==, 5);
	CHECK_INT(s.revs[0], ==, first);
	CHECK_INT(s.revs[4], ==, last);
	lr_watch_free(w);
	lr_etcd_close(c);
	seen_free(&s);
}

/* Key k (of `name`, under the test's prefix) written 1 + puts times, then
 * compacted at the last revision (returned); *first: the first one. */
static int64_t written_then_compacted(lr_etcd *c, const char *name, char k[160], int puts,
                                      bool physical, int64_t *first)
{
	snprintf(k, 160, "%sx", test_prefix(name));
	int64_t last = 0;
	CHECK_OK(lr_kv_put(c, k, "v", 1, 0, first, NULL, &err), &err);
	for (int i = 0; i < puts; i++)
		CHECK_OK(lr_kv_put(c, k, "v", 1, 0, &last, NULL, &err), &err);
	Etcdserverpb__CompactionRequest cr = ETCDSERVERPB__COMPACTION_REQUEST__INIT;
	cr.revision = last;
	cr.physical = physical;
	ProtobufCMessage *resp;
	CHECK_OK(lr_etcd_unary(c, "/etcdserverpb.KV/Compact", &cr.base,
	                       &etcdserverpb__compaction_response__descriptor, &resp, 0, &err), &err);
	lr_etcd_reply_free(resp);
	return last;
}

TEST(compaction_is_reported_to_the_watcher)
{
	lr_etcd *c = client_open(NULL);
	char k[160];
	int64_t first;
	int64_t last = written_then_compacted(c, "compact", k, 5, true, &first);

	lr_watch *w;
	CHECK_OK(lr_watch_new(c, &w, &err), &err);
	struct seen s;
	seen_init(&s, 10);
	lr_watcher *wr;
	CHECK_OK(lr_watch_add(w, k, 0, first, on_batch, &s, &wr, &err), &err);
	int64_t end = lr_mono_ms() + 5000;
	while (s.compacted == 0 && lr_mono_ms() < end)
		lr_sleep_ms(10);
	CHECK_INT(s.compacted, ==, 1);
	CHECK_INT(s.compact_rev, ==, last);
	CHECK_INT(seen_count(&s), ==, 0);
	lr_watcher_cancel(wr);
	lr_watch_free(w);
	lr_etcd_close(c);
	seen_free(&s);
}

/* etcd keeps a compacted watcher on its stream until the client cancels
 * it: a client that only forgets it leaves one behind on the server, for
 * as long as the stream lives, each time a watcher is compacted. */
TEST(a_compacted_watcher_is_not_left_on_the_server)
{
	lr_etcd *c = client_open(NULL);
	char k[160];
	int64_t first;
	written_then_compacted(c, "compact-left", k, 3, false, &first);

	lr_watch *w;
	CHECK_OK(lr_watch_new(c, &w, &err), &err);
	/* A live watcher keeps the stream open after the others are gone. */
	struct seen live, s[3];
	seen_init(&live, 10);
	lr_watcher *lw, *wr[3];
	CHECK_OK(lr_watch_add(w, k, 0, 0, on_batch, &live, &lw, &err), &err);
	int64_t end = lr_mono_ms() + 5000;
	while (live.created == 0 && lr_mono_ms() < end)
		lr_sleep_ms(10);
	long before = etcd_watcher_count(0);
	CHECK_INT(before, >=, 1);
	for (int i = 0; i < 3; i++) {
		seen_init(&s[i], 10);
		CHECK_OK(lr_watch_add(w, k, 0, first, on_batch, &s[i], &wr[i], &err), &err);
	}
	for (int i = 0; i < 3; i++) {
		while (s[i].compacted == 0 && lr_mono_ms() < end)
			lr_sleep_ms(10);
		CHECK_INT(s[i].compacted, ==, 1);
		lr_watcher_cancel(wr[i]);
	}
	long after = etcd_watcher_count(0);
	while (after > before && lr_mono_ms() < end) {
		lr_sleep_ms(20);
		after = etcd_watcher_count(0);
	}
	CHECK_INT(after, ==, before);
	lr_watcher_cancel(lw);
	lr_watch_free(w);
	lr_etcd_close(c);
	seen_free(&live);
	for (int i = 0; i < 3; i++)
		seen_free(&s[i]);
}

/* ---- three members: nothing lost or repeated across restarts ---------- */

struct writer {
	lr_etcd *c;
	const char *prefix;
	int n;
	atomic_int done;
	int failures;
};

/* Each key is created exactly once (version == 0 guard), so a retried
 * write whose first reply was lost cannot produce a second event. */
static void *write_keys(void *arg)
{
	struct writer *wt = arg;
	for (int i = 0; i < wt->n; i++) {
		char k[160];
		snprintf(k, sizeof(k), "%s%04d", wt->prefix, i);
		lr_err e;
		int tries = 0;
		for (;;) {
			lr_txn *t = lr_txn_new();
			lr_txn_cmp(t, k, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
			lr_txn_put(t, LR_THEN, k, "v", 1, 0);
			lr_txn_result r;
			int rc = lr_etcd_txn(wt->c, t, LR_CALL_RETRY, &r, &e);
			lr_txn_free(t);
			if (rc == 0) {
				lr_txn_result_free(&r);
				break;
			}
			if (++tries > 50) {
				wt->failures++;
				break;
			}
			lr_sleep_ms(100);
		}
		lr_sleep_ms(10);
	}
	wt->done = 1;
	return NULL;
}

TEST(nothing_is_lost_or_repeated_across_member_restarts)
{
	etcdh_cluster *three;
	etcdh_opts o = { .members = 3 };
	CHECK_INT(etcdh_start(&o, &three), ==, 0);
	lr_etcd_opts co = { .endpoints = etcdh_endpoints(three), .dial_timeout_s = 5, .call_timeout_s = 10 };
	lr_etcd *wc, *c;
	CHECK_OK(lr_etcd_open(&co, &wc, &err), &err);
	CHECK_OK(lr_etcd_open(&co, &c, &err), &err);
	lr_watch *w;
	CHECK_OK(lr_watch_new(c, &w, &err), &err);
	struct seen s;
	int n = 300;
	seen_init(&s, n + 50);
	lr_watcher *wr;
	CHECK_OK(lr_watch_add(w, "/restart/", LR_KEY_PREFIX, 0, on_batch, &s, &wr, &err), &err);
	while (s.created == 0)
		lr_sleep_ms(5);
	struct writer wt = { .c = wc, .prefix = "/restart/", .n = n };
	pthread_t th;
	pthread_create(&th, NULL, write_keys, &wt);
	for (int m = 0; m < 3; m++) {
		lr_sleep_ms(800);
		CHECK_INT(etcdh_kill(three, m), ==, 0);
		lr_sleep_ms(500);
		CHECK_INT(etcdh_restart(three, m), ==, 0);
	}
	pthread_join(th, NULL);
	wait_count(&s, n, 15000);
	int got = seen_count(&s);
	printf("# %d keys written, %d events seen, %d writes failed\n", n, got, wt.failures);
	CHECK_INT(wt.failures, ==, 0);
	for (int i = 0; i < got; i++) {
		char want[64];
		snprintf(want, sizeof(want), "/restart/%04d", i);
		if (strcmp(s.keys[i], want) != 0) {
			printf("# first difference at event %d: got %s (rev %lld), want %s; previous rev %lld\n",
			       i, s.keys[i], (long long)s.revs[i], want,
			       (long long)(i > 0 ? s.revs[i - 1] : 0));
			break;
		}
	}
	CHECK_INT(got, ==, n);
	for (int i = 0; i < n; i++) {
		char want[64];
		snprintf(want, sizeof(want), "/restart/%04d", i);
		CHECK_STR(s.keys[i], want);
		if (i > 0)
			CHECK_INT(s.revs[i], >, s.revs[i - 1]);
	}
	lr_watch_free(w);
	lr_etcd_close(c);
	lr_etcd_close(wc);
	etcdh_destroy(three);
	seen_free(&s);
}

/* A member that is paused keeps its connections open but answers nothing;
 * a watch served by it must move to another member, not wait for TCP. */
TEST(a_paused_member_does_not_stall_a_watch)
{
	etcdh_cluster *three;
	etcdh_opts o = { .members = 3 };
	CHECK_INT(etcdh_start(&o, &three), ==, 0);
	lr_etcd_opts co = { .endpoints = etcdh_endpoints(three), .dial_timeout_s = 5, .call_timeout_s = 10 };
	lr_etcd *c, *wc;
	CHECK_OK(lr_etcd_open(&co, &c, &err), &err);
	CHECK_OK(lr_etcd_open(&co, &wc, &err), &err);
	lr_watch *w;
	CHECK_OK(lr_watch_new(c, &w, &err), &err);
	struct seen s;
	seen_init(&s, 10);
	lr_watcher *wr;
	CHECK_OK(lr_watch_add(w, "/paused/", LR_KEY_PREFIX, 0, on_batch, &s, &wr, &err), &err);
	while (s.created == 0)
		lr_sleep_ms(5);
	int64_t worst = 0;
	for (int m = 0; m < 3; m++) {
		CHECK_INT(etcdh_pause(three, m), ==, 0);
		char k[32];
		snprintf(k, sizeof(k), "/paused/%d", m);
		lr_txn *t = lr_txn_new();
		lr_txn_cmp(t, k, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
		lr_txn_put(t, LR_THEN, k, "v", 1, 0);
		lr_txn_result r;
		CHECK_OK(lr_etcd_txn(wc, t, LR_CALL_RETRY, &r, &err), &err);
		int64_t written = lr_mono_ms();
		lr_txn_result_free(&r);
		lr_txn_free(t);
		wait_count(&s, m + 1, 9000);
		int64_t delay = lr_mono_ms() - written;
		if (delay > worst)
			worst = delay;
		CHECK_INT(seen_count(&s), ==, m + 1);
		CHECK_INT(etcdh_resume(three, m), ==, 0);
		CHECK_INT(etcdh_wait_healthy(three, 10), ==, 0);
	}
	printf("# longest delay of an event while a member was paused: %lld ms\n", (long long)worst);
	lr_watch_free(w);
	lr_etcd_close(c);
	lr_etcd_close(wc);
	etcdh_destroy(three);
	seen_free(&s);
}

/* DOWN and UP as a watcher sees them, in order. */
struct link {
	pthread_mutex_t mu;
	char kinds[16];      /* 'D', 'U', 'C' (created), 'E' (events) */
	int64_t heard_ms;
	char endpoint[128], reason[256];
};

static void on_link(void *user, const lr_watch_batch *b)
{
	struct link *l = user;
	char k = b->kind == LR_WATCH_DOWN ? 'D' : b->kind == LR_WATCH_UP ? 'U'
	       : b->kind == LR_WATCH_CREATED ? 'C' : b->kind == LR_WATCH_EVENTS ? 'E' : 0;
	pthread_mutex_lock(&l->mu);
	size_t n = strlen(l->kinds);
	if (k != 0 && n + 1 < sizeof(l->kinds))
		l->kinds[n] = k;
	if (b->kind == LR_WATCH_DOWN) {
		l->heard_ms = b->heard_ms;
		snprintf(l->endpoint, sizeof(l->endpoint), "%s", b->endpoint);
		snprintf(l->reason, sizeof(l->reason), "%s", b->reason);
	}
	pthread_mutex_unlock(&l->mu);
}

/* ms until l->kinds ends with `last`, -1 after timeout_ms. */
static int64_t wait_kind(struct link *l, char last, int timeout_ms)
{
	int64_t t0 = lr_mono_ms();
	for (;;) {
		pthread_mutex_lock(&l->mu);
		size_t n = strlen(l->kinds);
		bool seen = n > 0 && l->kinds[n - 1] == last;
		pthread_mutex_unlock(&l->mu);
		if (seen)
			return lr_mono_ms() - t0;
		if (lr_mono_ms() - t0 > timeout_ms)
			return -1;
		lr_sleep_ms(10);
	}
}

/* The only member stops: every watcher hears DOWN, naming the endpoint and
 * why, once; when it is back, UP, and the watch goes on where it was. */
TEST(an_outage_is_told_to_the_watcher_and_so_is_the_end_of_it)
{
	lr_etcd *c = client_open(NULL);
	const char *pfx = test_prefix("outage");
	lr_watch *w;
	struct link l = { .kinds = "" };
	pthread_mutex_init(&l.mu, NULL);
	CHECK_OK(lr_watch_new(c, &w, &err), &err);
	lr_watcher *wr;
	CHECK_OK(lr_watch_add(w, pfx, LR_KEY_PREFIX, 0, on_link, &l, &wr, &err), &err);
	CHECK(wait_kind(&l, 'C', 5000) >= 0);
	int64_t before = lr_wall_ms();
	CHECK_INT(etcdh_stop(cluster, 0), ==, 0);
	int64_t took = wait_kind(&l, 'D', 10000);
	printf("# DOWN %lld ms after the stop: \"%s: %s\", heard %lld ms before the stop\n",
	       (long long)took, l.endpoint, l.reason, (long long)(before - l.heard_ms));
	CHECK(took >= 0);
	CHECK_STR(l.endpoint, etcdh_endpoints(cluster));
	CHECK(l.reason[0] != '\0');
	CHECK(l.heard_ms <= lr_wall_ms());
	CHECK(l.heard_ms >= before - 2 * 1000); /* a progress reply comes every second */
	lr_sleep_ms(2500); /* down all along: told once */
	CHECK_INT(etcdh_restart(cluster, 0), ==, 0);
	CHECK(wait_kind(&l, 'C', 10000) >= 0);
	CHECK_OK(lr_kv_put(c, pfx, "after", 5, 0, NULL, NULL, &err), &err);
	CHECK(wait_kind(&l, 'E', 5000) >= 0);
	pthread_mutex_lock(&l.mu);
	printf("# what the watcher saw: %s\n", l.kinds);
	CHECK_STR(l.kinds, "CDUCE");
	pthread_mutex_unlock(&l.mu);
	lr_watcher_cancel(wr);
	lr_watch_free(w);
	lr_etcd_close(c);
	pthread_mutex_destroy(&l.mu);
}

static int setup(void) { return cluster_up(1, NULL); }

TEST_LIST(
	TEST_CASE(puts_and_deletes_arrive_in_revision_order),
	TEST_CASE(watch_from_a_past_revision_replays_history),
	TEST_CASE(compaction_is_reported_to_the_watcher),
	TEST_CASE(a_compacted_watcher_is_not_left_on_the_server),
	TEST_CASE(nothing_is_lost_or_repeated_across_member_restarts),
	TEST_CASE(a_paused_member_does_not_stall_a_watch),
	TEST_CASE(an_outage_is_told_to_the_watcher_and_so_is_the_end_of_it),
);
TEST_MAIN(setup, cluster_down)
