/* test_batch.c - group commit (engine/batch.h) against a real etcd: many
 * threads' txns share requests, yet each decides by its own compares as if
 * it had run alone, and a txn etcd refuses fails alone. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "base/clock.h"
#include "engine/batch.h"
#include "etcd/txn_group.h"
#include "test.h"

#define THREADS 16
#define EACH 40

struct racer {
	lr_etcd *c;
	lr_batch *b;
	const char *prefix;
	int index;
	size_t value_len;       /* of what create_once puts; 0: "new" */
	bool seated;            /* takes a seat in b (a runner's worker) */
	int won, lost, failed;  /* counts of this thread's txns */
	bool bad_reply;         /* a result that contradicts its own compares */
	char why[600];
};

/* Send t through the batch; false (the failure noted) when it failed. */
static bool send_txn(struct racer *x, const lr_txn *t, lr_txn_result *r)
{
	lr_err e = {0};
	if (lr_batch_txn(x->b, t, r, &e) == 0)
		return true;
	x->failed++;
	snprintf(x->why, sizeof(x->why), "%s", e.msg);
	return false;
}

/* Create-once of keys k<thread>-<i>; those with i even exist already. */
static void *create_once(void *arg)
{
	struct racer *x = arg;
	if (x->seated)
		lr_batch_seat(x->b);
	for (int i = 0; i < EACH; i++) {
		char k[256];
		snprintf(k, sizeof(k), "%sk%d-%d", x->prefix, x->index, i);
		char value[1024] = "new";
		size_t len = x->value_len > 0 && x->value_len < sizeof(value) ? x->value_len : 3;
		if (x->value_len > 0)
			memset(value, 'v', len);
		lr_txn *t = lr_txn_new();
		lr_txn_cmp(t, k, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
		lr_txn_put(t, LR_THEN, k, value, len, 0);
		lr_txn_get(t, LR_ELSE, k, 0);
		lr_txn_result r;
		if (send_txn(x, t, &r)) {
			bool existed = i % 2 == 0;
			if (r.succeeded == existed || r.revision <= 0)
				x->bad_reply = true;
			if (!r.succeeded && (r.n_ops != 1 || r.ops[0].n != 1 ||
			                     r.ops[0].kvs[0].value_len != 3))
				x->bad_reply = true; /* its own failure read */
			r.succeeded ? x->won++ : x->lost++;
			lr_txn_result_free(&r);
		}
		lr_txn_free(t);
	}
	if (x->seated)
		lr_batch_unseat(x->b);
	return NULL;
}

static void race(struct racer *x, void *(*fn)(void *))
{
	pthread_t th[THREADS];
	for (int i = 0; i < THREADS; i++)
		CHECK(pthread_create(&th[i], NULL, fn, &x[i]) == 0);
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
}

/* THREADS x EACH create-once txns (of values value_len long; 0: short)
 * through b, on a fresh prefix where half the keys exist: each keeps its
 * own outcome, and some requests were shared. Returns the requests sent. */
static uint64_t create_many(lr_etcd *c, lr_batch *b, const char *name, size_t value_len,
                            bool seated)
{
	const char *p = test_prefix(name);
	lr_err e = {0};
	uint64_t requests0, txns0; /* the batch's earlier work */
	lr_batch_counts(b, &requests0, &txns0);
	for (int t = 0; t < THREADS; t++)
		for (int i = 0; i < EACH; i += 2) {
			char k[256];
			snprintf(k, sizeof(k), "%sk%d-%d", p, t, i);
			CHECK_OK(lr_kv_put(c, k, "old", 3, 0, NULL, NULL, &e), &e);
		}
	struct racer x[THREADS];
	for (int i = 0; i < THREADS; i++)
		x[i] = (struct racer){ .c = c, .b = b, .prefix = p, .index = i,
		                       .value_len = value_len, .seated = seated };
	race(x, create_once);
	for (int i = 0; i < THREADS; i++) {
		if (x[i].failed > 0)
			TEST_FAIL("thread %d: %s", i, x[i].why);
		CHECK(!x[i].bad_reply);
		CHECK_INT(x[i].won, ==, EACH / 2);
		CHECK_INT(x[i].lost, ==, EACH / 2);
	}
	uint64_t requests, txns;
	lr_batch_counts(b, &requests, &txns);
	requests -= requests0;
	txns -= txns0;
	CHECK_INT(txns, ==, THREADS * EACH);
	printf("  %llu txns in %llu requests\n", (unsigned long long)txns,
	       (unsigned long long)requests);
	CHECK(requests < txns); /* 16 threads at once: some went together */
	return requests;
}

/* THREADS x EACH create-once txns through a batch of at most
 * max_in_flight requests of max_txns txns: each keeps its own outcome,
 * and requests are shared but never over the cap. Returns the requests. */
static uint64_t share(const char *name, int max_in_flight, size_t max_txns, bool seated)
{
	lr_etcd *c = client_open(NULL);
	lr_batch *b = lr_batch_new(c, max_in_flight, max_txns, max_txns / 2);
	uint64_t requests = create_many(c, b, name, 0, seated);
	uint64_t txns = THREADS * EACH;
	CHECK_INT(requests * max_txns, >=, txns);
	CHECK_INT(lr_batch_peak_in_flight(b), <=, max_in_flight);
	lr_batch_free(b);
	lr_etcd_close(c);
	return requests;
}

TEST(txns_sent_at_once_share_requests_and_each_keeps_its_own_outcome)
{
	share("share", 1, 64, false);
}

/* 16 callers and room for 4 txns per request: full requests go beside
 * each other, and those left out of a full one go in the next. */
TEST(a_full_request_goes_beside_the_one_in_flight)
{
	share("full", 2, 4, false);
}

/* Seated callers (a runner's workers) that one reply woke go on in one
 * request: 16 of them writing one txn after another keep to few, large
 * requests, each outcome still its own. (How many fewer than without
 * seats depends on the machine's timing: printed, not checked.) */
TEST(seated_callers_that_one_reply_woke_go_on_together)
{
	uint64_t seated = share("seated", 2, 64, true);
	uint64_t unseated = share("unseated", 2, 64, false);
	printf("  requests: %llu seated, %llu without seats\n", (unsigned long long)seated,
	       (unsigned long long)unseated);
	CHECK_INT(seated * 4, <=, (uint64_t)THREADS * EACH); /* 4 txns or more each */
}

/* One create-once txn of key <prefix><name> through b; its time in ms. */
static int64_t timed_create(lr_batch *b, const char *prefix, const char *name)
{
	char k[256];
	snprintf(k, sizeof(k), "%s%s", prefix, name);
	lr_txn *t = lr_txn_new();
	lr_txn_cmp(t, k, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_txn_put(t, LR_THEN, k, "v", 1, 0);
	lr_txn_result r;
	lr_err e = {0};
	int64_t t0 = lr_mono_ms();
	int rc = lr_batch_txn(b, t, &r, &e);
	int64_t took = lr_mono_ms() - t0;
	CHECK_OK(rc, &e);
	CHECK(r.succeeded);
	lr_txn_result_free(&r);
	lr_txn_free(t);
	return took;
}

/* A seated caller whose write came back, then sleeps for 1.5 s, having
 * said it goes away (away) or not. */
struct sleeper {
	lr_batch *b;
	const char *prefix;
	bool away;
	atomic_bool wrote;
};

static void *write_then_sleep(void *arg)
{
	struct sleeper *sl = arg;
	lr_batch_seat(sl->b);
	timed_create(sl->b, sl->prefix, sl->away ? "sleeper-away" : "sleeper-stays");
	if (sl->away)
		lr_batch_away(sl->b);
	atomic_store(&sl->wrote, true);
	lr_sleep_ms(1500);
	lr_batch_unseat(sl->b);
	return NULL;
}

/* While a seated caller holds credit (its write came back and it has not
 * written again), others' writes wait for it, but not for long: not at
 * all once it said it went away, and a round trip at most when it blocks
 * without a word. */
TEST(a_caller_holding_credit_never_holds_the_others_for_long)
{
	lr_etcd *c = client_open(NULL);
	lr_batch *b = lr_batch_new(c, 2, 64, 32);
	const char *p = test_prefix("credit");
	for (int away = 1; away >= 0; away--) {
		struct sleeper sl = { .b = b, .prefix = p, .away = away };
		atomic_init(&sl.wrote, false);
		pthread_t th;
		CHECK(pthread_create(&th, NULL, write_then_sleep, &sl) == 0);
		while (!atomic_load(&sl.wrote))
			lr_sleep_ms(1);
		int64_t took = timed_create(b, p, away ? "other-1" : "other-2");
		printf("  %s: another write took %lld ms\n", away ? "gone away" : "blocked",
		       (long long)took);
		CHECK_INT(took, <, 1000); /* the sleeper sleeps 1500 ms */
		pthread_join(th, NULL);
	}
	lr_batch_free(b);
	lr_etcd_close(c);
}

/* Each thread tries to take "the lock": no key under L/ may exist, then it
 * puts its own key under L/. etcd judges the compares of one request
 * before its writes, so two such txns in one request would both win: the
 * group keeps them apart, and exactly one wins, every round. Fillers keep
 * the requests in flight busy, so that the takers of a round queue up
 * together. */
static pthread_barrier_t round_start;
static atomic_bool fill;

static void *filler(void *arg)
{
	struct racer *x = arg;
	static char big[200 * 1024];
	for (int i = 0; atomic_load(&fill); i++) {
		char k[256];
		snprintf(k, sizeof(k), "%sfill%d-%d", x->prefix, x->index, i % 8);
		lr_txn *t = lr_txn_new();
		lr_txn_put(t, LR_THEN, k, big, sizeof(big), 0);
		lr_txn_result r;
		lr_err e = {0};
		if (lr_batch_txn(x->b, t, &r, &e) == 0)
			lr_txn_result_free(&r);
		lr_txn_free(t);
	}
	return NULL;
}

static void *take_lock(void *arg)
{
	struct racer *x = arg;
	for (int round = 0; round < 10; round++) {
		pthread_barrier_wait(&round_start);
		char lock[256], mine[300];
		snprintf(lock, sizeof(lock), "%sL%d/", x->prefix, round);
		snprintf(mine, sizeof(mine), "%s%d", lock, x->index);
		lr_txn *t = lr_txn_new();
		lr_txn_cmp(t, lock, LR_KEY_PREFIX, LR_CMP_VERSION, LR_CMP_EQ, 0);
		lr_txn_put(t, LR_THEN, mine, "held", 4, 0);
		lr_txn_result r;
		if (send_txn(x, t, &r)) {
			r.succeeded ? x->won++ : x->lost++;
			lr_txn_result_free(&r);
		}
		lr_txn_free(t);
	}
	return NULL;
}

TEST(txns_racing_for_one_lock_in_one_moment_let_exactly_one_win)
{
	lr_etcd *c = client_open(NULL);
	lr_batch *b = lr_batch_new(c, 2, 64, 32);
	const char *p = test_prefix("lock");
	struct racer x[THREADS], f[2];
	pthread_t fillers[2];
	atomic_store(&fill, true);
	for (int i = 0; i < 2; i++) {
		f[i] = (struct racer){ .c = c, .b = b, .prefix = p, .index = i };
		CHECK(pthread_create(&fillers[i], NULL, filler, &f[i]) == 0);
	}
	pthread_barrier_init(&round_start, NULL, THREADS);
	for (int i = 0; i < THREADS; i++)
		x[i] = (struct racer){ .c = c, .b = b, .prefix = p, .index = i };
	race(x, take_lock);
	atomic_store(&fill, false);
	for (int i = 0; i < 2; i++)
		pthread_join(fillers[i], NULL);
	pthread_barrier_destroy(&round_start);
	int won = 0;
	for (int i = 0; i < THREADS; i++) {
		if (x[i].failed > 0)
			TEST_FAIL("thread %d: %s", i, x[i].why);
		won += x[i].won;
	}
	CHECK_INT(won, ==, 10); /* one per round */
	lr_batch_free(b);
	lr_etcd_close(c);
}

/* A txn that etcd refuses (an empty key) fails alone: the others that
 * shared its request are sent again each alone and apply. */
static void *bad_or_good(void *arg)
{
	struct racer *x = arg;
	for (int i = 0; i < EACH; i++) {
		char k[256];
		snprintf(k, sizeof(k), "%sk%d-%d", x->prefix, x->index, i);
		bool bad = x->index == 0 && i % 4 == 0;
		lr_txn *t = lr_txn_new();
		lr_txn_put(t, LR_THEN, bad ? "" : k, "v", 1, 0);
		lr_txn_result r;
		lr_err e = {0};
		int rc = lr_batch_txn(x->b, t, &r, &e);
		if (rc == 0) {
			r.succeeded && !bad ? x->won++ : (x->bad_reply = true);
			lr_txn_result_free(&r);
		} else if (bad && strstr(e.msg, "key is not provided") != NULL) {
			x->lost++;
		} else {
			x->failed++;
			snprintf(x->why, sizeof(x->why), "%s", e.msg);
		}
		lr_txn_free(t);
	}
	return NULL;
}

TEST(a_txn_etcd_refuses_fails_alone)
{
	lr_etcd *c = client_open(NULL);
	lr_batch *b = lr_batch_new(c, 1, 64, 32);
	struct racer x[THREADS];
	for (int i = 0; i < THREADS; i++)
		x[i] = (struct racer){ .c = c, .b = b, .prefix = test_prefix("bad"), .index = i };
	race(x, bad_or_good);
	for (int i = 0; i < THREADS; i++) {
		if (x[i].failed > 0)
			TEST_FAIL("thread %d: %s", i, x[i].why);
		CHECK(!x[i].bad_reply);
		CHECK_INT(x[i].won + x[i].lost, ==, EACH);
	}
	CHECK_INT(x[0].lost, ==, EACH / 4);
	lr_batch_free(b);
	lr_etcd_close(c);
}

static int setup(void) { return cluster_up(1, NULL); }

/* What a batch said about its limits. */
struct notes {
	pthread_mutex_t mu;
	int n;
	char last[1024];
};

static void note(void *user, const char *msg)
{
	struct notes *ns = user;
	pthread_mutex_lock(&ns->mu);
	ns->n++;
	snprintf(ns->last, sizeof(ns->last), "%s", msg);
	pthread_mutex_unlock(&ns->mu);
}

/* create_many through b, whose limits etcd refuses: b says so, in etcd's
 * words (refusal) and naming the flag. */
static void shrinks(lr_etcd *c, lr_batch *b, const char *name, size_t value_len,
                    const char *refusal, const char *flag)
{
	static struct notes ns = { .mu = PTHREAD_MUTEX_INITIALIZER };
	ns.n = 0;
	lr_batch_on_limit(b, note, &ns);
	create_many(c, b, name, value_len, false);
	printf("  %d notes; last: %s\n", ns.n, ns.last);
	CHECK_INT(ns.n, >=, 1);
	CHECK(strstr(ns.last, refusal) != NULL);
	CHECK(strstr(ns.last, flag) != NULL);
}

/* An etcd set up with lower limits than its defaults refuses requests cut
 * for those: the batch makes its requests smaller, says so once per step
 * down, and the txns still share requests (with no shrinking, every
 * refused request would go again txn by txn, and no request would be
 * shared). */
TEST(requests_shrink_to_an_etcd_with_lower_limits_and_still_share)
{
	static const char *const extra[] = { "--max-txn-ops=8", "--max-request-bytes=3000",
	                                     NULL };
	etcdh_opts o = { .members = 1, .extra_args = extra };
	etcdh_cluster *small = NULL;
	CHECK_INT(etcdh_start(&o, &small), ==, 0);
	lr_etcd *c = client_open(etcdh_endpoints(small));
	size_t ops, bytes;
	lr_batch *b = lr_batch_new(c, 2, 64, 32);
	/* Short values: only the op count is over. */
	shrinks(c, b, "few-ops", 0, "too many operations", "--max-txn-ops");
	lr_batch_limits(b, &ops, &bytes);
	CHECK_INT(ops, <=, 8);
	CHECK_INT(ops, >=, 2);
	/* Then 900-byte values: 4 of them are over 3000 bytes. */
	shrinks(c, b, "few-bytes", 900, "too large", "--max-request-bytes");
	lr_batch_limits(b, &ops, &bytes);
	CHECK_INT(bytes, <, LR_TXN_GROUP_MAX_BYTES); /* shrunk from the default */
	lr_batch_free(b);
	lr_etcd_close(c);
	etcdh_destroy(small);
}

/* Create-once of key k, and its outcome as sent. */
static lr_txn *create_txn(const char *k, const char *v)
{
	lr_txn *t = lr_txn_new();
	lr_txn_cmp(t, k, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_txn_put(t, LR_THEN, k, v, strlen(v), 0);
	return t;
}

/* Two txns of one caller (a task's end and the next task's claim) go in
 * one request, each with its own outcome; two that write one key go in
 * two, in order. */
TEST(one_callers_two_txns_share_a_request_unless_they_write_one_key)
{
	lr_etcd *c = client_open(NULL);
	lr_batch *b = lr_batch_new(c, 2, 64, 32);
	/* Seated, as a worker is: the first of two txns split apart comes
	 * back while the second still waits. */
	lr_batch_seat(b);
	const char *p = test_prefix("own");
	char k1[256], k2[256];
	snprintf(k1, sizeof(k1), "%sa", p);
	snprintf(k2, sizeof(k2), "%sb", p);
	lr_err e = {0};
	CHECK_OK(lr_kv_put(c, k2, "old", 3, 0, NULL, NULL, &e), &e);
	const lr_txn *ts[2] = { create_txn(k1, "1"), create_txn(k2, "2") };
	lr_txn_result rs[2];
	lr_err errs[2] = { { 0 }, { 0 } };
	int rcs[2];
	lr_batch_txns(b, 2, ts, rs, errs, rcs);
	CHECK_OK(rcs[0], &errs[0]);
	CHECK_OK(rcs[1], &errs[1]);
	CHECK(rs[0].succeeded);
	CHECK(!rs[1].succeeded); /* k2 existed */
	uint64_t requests, txns;
	lr_batch_counts(b, &requests, &txns);
	CHECK_INT(requests, ==, 1);
	CHECK_INT(txns, ==, 2);
	for (int i = 0; i < 2; i++) {
		lr_txn_result_free(&rs[i]);
		lr_txn_free((lr_txn *)ts[i]);
	}

	/* Both create k3: the second in its own request, after the first. */
	char k3[256];
	snprintf(k3, sizeof(k3), "%sc", p);
	const lr_txn *same[2] = { create_txn(k3, "first"), create_txn(k3, "second") };
	lr_batch_txns(b, 2, same, rs, errs, rcs);
	CHECK_OK(rcs[0], &errs[0]);
	CHECK_OK(rcs[1], &errs[1]);
	CHECK(rs[0].succeeded);
	CHECK(!rs[1].succeeded);
	lr_batch_counts(b, &requests, &txns);
	CHECK_INT(requests, ==, 3);
	for (int i = 0; i < 2; i++) {
		lr_txn_result_free(&rs[i]);
		lr_txn_free((lr_txn *)same[i]);
	}
	lr_batch_unseat(b);
	lr_batch_free(b);
	lr_etcd_close(c);
}

TEST_LIST(
	TEST_CASE(txns_sent_at_once_share_requests_and_each_keeps_its_own_outcome),
	TEST_CASE(a_full_request_goes_beside_the_one_in_flight),
	TEST_CASE(seated_callers_that_one_reply_woke_go_on_together),
	TEST_CASE(a_caller_holding_credit_never_holds_the_others_for_long),
	TEST_CASE(txns_racing_for_one_lock_in_one_moment_let_exactly_one_win),
	TEST_CASE(a_txn_etcd_refuses_fails_alone),
	TEST_CASE(one_callers_two_txns_share_a_request_unless_they_write_one_key),
	TEST_CASE(requests_shrink_to_an_etcd_with_lower_limits_and_still_share),
);
TEST_MAIN(setup, cluster_down)
