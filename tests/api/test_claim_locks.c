/* test_claim_locks.c - a task's locks and slots against a real etcd, at the
 * level of the claim txn: taken with the claim or not at all, given back
 * with its end, fenced, and the compatibility matrix pair by pair. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "client/client.h"
#include "client/lock_keys.h"
#include "engine/claim.h"
#include "etcd/kv.h"
#include "etcd/lease.h"
#include "etcd_harness.h"
#include "locks/acquire.h"
#include "records/lockset.h"
#include "hosted.h"
#include "leaserun.h"
#include "test.h"

static lr_err err;

/* ---- helpers --------------------------------------------------------------- */

/* Submit task id of one step asking for locks and limits (JSON text of
 * the two objects, either NULL). */
static void submit_asking(lr_client *c, const char *id, const char *locks, const char *limits)
{
	char spec[8192];
	snprintf(spec, sizeof(spec),
	         "{\"id\":\"%s\",\"steps\":[{\"name\":\"one\",\"run\":\"-\"}]%s%s%s%s}", id,
	         locks != NULL ? ",\"locks\":" : "", locks != NULL ? locks : "",
	         limits != NULL ? ",\"limits\":" : "", limits != NULL ? limits : "");
	hosted_submit(c, spec);
}

static int64_t new_lease(lr_client *c, int64_t ttl)
{
	int64_t lease = 0;
	int64_t granted = 0;
	CHECK_OK(lr_lease_grant(lr_client_etcd(c), ttl, &lease, &granted, NULL, &err), &err);
	return lease;
}

/* Claim id for who, taking slots (n of them; none: pick at random). */
static enum lr_claim_outcome claim(const lr_claimant *who, const char *id, const int *slots,
                                   size_t n, lr_claimed_task *h)
{
	enum lr_claim_outcome oc;
	lr_task_state ended;
	char why[700];
	CHECK_OK(lr_claim(who, id, NULL, 0, 0, false, slots, n, h, &oc, &ended, why, sizeof(why),
	                  &err), &err);
	return oc;
}

/* The lease a key hangs on; -1 when it does not exist. */
static int64_t key_lease(lr_client *c, const char *key)
{
	lr_range_result r;
	CHECK_OK(lr_kv_get(lr_client_etcd(c), key, &r, &err), &err);
	int64_t lease = r.n == 1 ? r.kvs[0].lease : -1;
	lr_range_result_free(&r);
	return lease;
}

static int64_t lock_lease(lr_client *c, const char *path, lr_lock_mode m, const char *id)
{
	char holder[LR_HOLDER_SIZE];
	char key[LR_LOCK_KEY_SIZE];
	lr_holder_of_task(id, holder);
	lr_lock_key(c, path, m, holder, key);
	return key_lease(c, key);
}

static int64_t slot_lease(lr_client *c, const char *pool, int index)
{
	char key[LR_LOCK_KEY_SIZE];
	lr_slot_key(c, pool, index, key);
	return key_lease(c, key);
}

static int64_t wants_count(lr_client *c, const char *id)
{
	char holder[LR_HOLDER_SIZE];
	lr_holder_of_task(id, holder);
	return hosted_count(c, LR_K_WANTS, holder);
}

static void give_back(const lr_claimant *who, lr_claimed_task *h)
{
	CHECK_OK(lr_release(who, h, true, &err), &err);
	lr_claimed_task_clear(h);
}

/* ---- taken with the claim, given back with the end ------------------------- */

TEST(a_claim_takes_its_locks_and_slots_on_its_lease_and_the_end_gives_them_back)
{
	lr_client *c = hosted_client("/cl-take/");
	submit_asking(c, "t1", "{\"org/a\":\"X\"}", "{\"gpu\":4}");
	CHECK_INT(wants_count(c, "t1"), ==, 1); /* the request, with the task */
	int64_t lease = new_lease(c, 10);
	lr_claimant who = { .client = c, .runner = "box-1", .lease = lease };
	lr_claimed_task h;
	int slot = 2;
	CHECK_INT(claim(&who, "t1", &slot, 1, &h), ==, LR_CLAIM_WON);
	CHECK_INT(h.slots[0], ==, 2);
	/* The named node in X, its ancestor in IX, slot 2 of gpu: on the lease. */
	CHECK_INT(lock_lease(c, "org/a", LR_LOCK_X, "t1"), ==, lease);
	CHECK_INT(lock_lease(c, "org", LR_LOCK_IX, "t1"), ==, lease);
	CHECK_INT(slot_lease(c, "gpu", 2), ==, lease);
	CHECK_INT(hosted_count(c, LR_K_LOCKS, ""), ==, 2);
	CHECK_INT(hosted_count(c, LR_K_SLOTS, ""), ==, 1);
	CHECK_INT(hosted_count(c, LR_K_LIMITS, ""), ==, 1);

	CHECK_OK(lr_finish(&who, &h, LR_TASK_SUCCEEDED, NULL, NULL, &err), &err);
	lr_claimed_task_clear(&h);
	CHECK_INT(hosted_count(c, LR_K_LOCKS, ""), ==, 0);
	CHECK_INT(hosted_count(c, LR_K_SLOTS, ""), ==, 0);
	CHECK_INT(hosted_count(c, LR_K_LIMITS, ""), ==, 0);
	CHECK_INT(wants_count(c, "t1"), ==, 0);
	lr_lease_revoke(lr_client_etcd(c), lease, NULL);
	lr_client_close(c);
}

TEST(a_task_needing_two_locks_one_of_them_taken_takes_neither)
{
	lr_client *c = hosted_client("/cl-atomic/");
	submit_asking(c, "t1", "{\"a\":\"X\"}", NULL);
	submit_asking(c, "t2", "{\"b\":\"X\",\"a\":\"S\"}", "{\"pool\":3}");
	int64_t lease = new_lease(c, 10);
	lr_claimant who = { .client = c, .runner = "box-1", .lease = lease };
	lr_claimed_task h1, h2;
	CHECK_INT(claim(&who, "t1", NULL, 0, &h1), ==, LR_CLAIM_WON);
	CHECK_INT(claim(&who, "t2", NULL, 0, &h2), ==, LR_CLAIM_BLOCKED);
	/* Nothing of t2 was written: no lock on b, no slot, no claim. */
	CHECK_INT(lock_lease(c, "b", LR_LOCK_X, "t2"), ==, -1);
	CHECK_INT(hosted_count(c, LR_K_SLOTS, ""), ==, 0);
	CHECK_INT(hosted_count(c, LR_K_CLAIMS, "t2"), ==, 0);
	CHECK_INT(hosted_count(c, LR_K_CHECKPOINTS, "t2"), ==, 0);
	CHECK_INT(hosted_count(c, LR_K_LOCKS, ""), ==, 1);

	give_back(&who, &h1);
	CHECK_INT(claim(&who, "t2", NULL, 0, &h2), ==, LR_CLAIM_WON);
	CHECK_INT(lock_lease(c, "b", LR_LOCK_X, "t2"), ==, lease);
	CHECK_INT(lock_lease(c, "a", LR_LOCK_S, "t2"), ==, lease);
	CHECK_INT(hosted_count(c, LR_K_SLOTS, "pool/"), ==, 1);
	give_back(&who, &h2);
	CHECK_INT(hosted_count(c, LR_K_LOCKS, ""), ==, 0);
	CHECK_INT(hosted_count(c, LR_K_SLOTS, ""), ==, 0);
	lr_lease_revoke(lr_client_etcd(c), lease, NULL);
	lr_client_close(c);
}

/* ---- the compatibility matrix ------------------------------------------------ */

static const char *const mode_names[5] = { "IS", "IX", "S", "SIX", "X" };

/* Whether a request (column) may run beside a holder (row). */
static const char same_node[5][6] = {
	/*          IS IX S SIX X */
	/* IS  */ "11110",
	/* IX  */ "11000",
	/* S   */ "10100",
	/* SIX */ "10000",
	/* X   */ "00000",
};
/* The holder locks the parent, the request a child. */
static const char holder_parent[5][6] = {
	/* IS  */ "11111",
	/* IX  */ "11111",
	/* S   */ "10100",
	/* SIX */ "10100",
	/* X   */ "00000",
};
/* The holder locks a child, the request the parent. */
static const char holder_child[5][6] = {
	/* IS  */ "11110",
	/* IX  */ "11000",
	/* S   */ "11110",
	/* SIX */ "11000",
	/* X   */ "11000",
};

static int matrix_case;

/* Whether a task asking `want` on want_path runs while another holds
 * `held` on held_path. */
static bool runs_beside(lr_client *c, const lr_claimant *who, const char *held_path, int held,
                        const char *want_path, int want)
{
	char a[32], b[32], locks[256];
	snprintf(a, sizeof(a), "h%d", matrix_case);
	snprintf(b, sizeof(b), "w%d", matrix_case++);
	snprintf(locks, sizeof(locks), "{\"%s\":\"%s\"}", held_path, mode_names[held]);
	submit_asking(c, a, locks, NULL);
	snprintf(locks, sizeof(locks), "{\"%s\":\"%s\"}", want_path, mode_names[want]);
	submit_asking(c, b, locks, NULL);
	lr_claimed_task ha, hb;
	CHECK_INT(claim(who, a, NULL, 0, &ha), ==, LR_CLAIM_WON);
	enum lr_claim_outcome oc = claim(who, b, NULL, 0, &hb);
	CHECK(oc == LR_CLAIM_WON || oc == LR_CLAIM_BLOCKED);
	if (oc == LR_CLAIM_WON)
		give_back(who, &hb);
	give_back(who, &ha);
	CHECK_INT(hosted_count(c, LR_K_LOCKS, ""), ==, 0);
	return oc == LR_CLAIM_WON;
}

TEST(the_compatibility_matrix_holds_pair_by_pair_on_a_node_its_parent_and_its_child)
{
	lr_client *c = hosted_client("/cl-matrix/");
	int64_t lease = new_lease(c, 30);
	lr_claimant who = { .client = c, .runner = "box-1", .lease = lease };
	for (int held = 0; held < 5; held++) {
		for (int want = 0; want < 5; want++) {
			bool got = runs_beside(c, &who, "r/n", held, "r/n", want);
			if (got != (same_node[held][want] == '1'))
				TEST_FAIL("%s held, %s asked on the same node: %s", mode_names[held],
				          mode_names[want], got ? "ran" : "blocked");
			got = runs_beside(c, &who, "r/n", held, "r/n/c", want);
			if (got != (holder_parent[held][want] == '1'))
				TEST_FAIL("%s held on r/n, %s asked on r/n/c: %s", mode_names[held],
				          mode_names[want], got ? "ran" : "blocked");
			got = runs_beside(c, &who, "r/n/c", held, "r/n", want);
			if (got != (holder_child[held][want] == '1'))
				TEST_FAIL("%s held on r/n/c, %s asked on r/n: %s", mode_names[held],
				          mode_names[want], got ? "ran" : "blocked");
		}
	}
	/* Siblings never conflict, whatever their modes. */
	CHECK(runs_beside(c, &who, "r/a", 4, "r/b", 4));
	lr_lease_revoke(lr_client_etcd(c), lease, NULL);
	lr_client_close(c);
}

/* ---- slot pools ---------------------------------------------------------------- */

/* Claims at a chosen slot, whatever the runner's view would pick: what
 * etcd's compares alone let through. */
TEST(a_pool_runs_no_more_tasks_than_the_smallest_limit_among_them)
{
	lr_client *c = hosted_client("/cl-pool/");
	int64_t lease = new_lease(c, 10);
	lr_claimant who = { .client = c, .runner = "box-1", .lease = lease };
	lr_claimed_task h[3], got;
	for (int i = 0; i < 4; i++) {
		char id[16];
		snprintf(id, sizeof(id), "p%d", i);
		submit_asking(c, id, NULL, "{\"gpu\":3}");
	}
	submit_asking(c, "big", NULL, "{\"gpu\":5}");
	submit_asking(c, "one", NULL, "{\"gpu\":1}");
	for (int i = 0; i < 3; i++) {
		char id[16];
		snprintf(id, sizeof(id), "p%d", i);
		CHECK_INT(claim(&who, id, &i, 1, &h[i]), ==, LR_CLAIM_WON);
	}
	/* Full: whichever slot below 3 it tries. */
	for (int s = 0; s < 3; s++)
		CHECK_INT(claim(&who, "p3", &s, 1, &got), ==, LR_CLAIM_BLOCKED);
	CHECK_INT(hosted_count(c, LR_K_SLOTS, ""), ==, 3);
	CHECK_INT(hosted_count(c, LR_K_LIMITS, "gpu/00003/"), ==, 3);
	/* A larger limit does not join three that run under a limit of 3. */
	for (int s = 3; s < 5; s++)
		CHECK_INT(claim(&who, "big", &s, 1, &got), ==, LR_CLAIM_BLOCKED);
	for (int i = 0; i < 3; i++)
		give_back(&who, &h[i]);
	CHECK_INT(hosted_count(c, LR_K_LIMITS, ""), ==, 0);

	/* While it holds slot 4, a task with limit 3 or 1 waits even for a
	 * free slot below its limit. */
	int four = 4, zero = 0, one = 1;
	CHECK_INT(claim(&who, "big", &four, 1, &h[0]), ==, LR_CLAIM_WON);
	CHECK_INT(claim(&who, "p3", &zero, 1, &got), ==, LR_CLAIM_BLOCKED);
	CHECK_INT(claim(&who, "one", &zero, 1, &got), ==, LR_CLAIM_BLOCKED);
	give_back(&who, &h[0]);
	/* While a task with limit 1 runs, nobody runs beside it. */
	CHECK_INT(claim(&who, "one", &zero, 1, &h[0]), ==, LR_CLAIM_WON);
	CHECK_INT(claim(&who, "p3", &one, 1, &got), ==, LR_CLAIM_BLOCKED);
	CHECK_INT(claim(&who, "big", &four, 1, &got), ==, LR_CLAIM_BLOCKED);
	give_back(&who, &h[0]);
	CHECK_INT(claim(&who, "big", &one, 1, &h[0]), ==, LR_CLAIM_WON);
	CHECK_INT(claim(&who, "p3", &zero, 1, &h[1]), ==, LR_CLAIM_WON);
	give_back(&who, &h[0]);
	give_back(&who, &h[1]);
	CHECK_INT(hosted_count(c, LR_K_SLOTS, ""), ==, 0);
	CHECK_INT(hosted_count(c, LR_K_LIMITS, ""), ==, 0);
	lr_lease_revoke(lr_client_etcd(c), lease, NULL);
	lr_client_close(c);
}

/* ---- the largest request in one claim txn -------------------------------------- */

/* The largest request: 8 paths of 8 segments, none shared (64 nodes, the
 * most a request may lock), and 8 pools, each path in `mode`; into the
 * texts of "locks" and "limits". */
static void largest_request(const char *mode, char *locks, size_t lsize, char *limits,
                            size_t msize)
{
	size_t n = (size_t)snprintf(locks, lsize, "{");
	for (int p = 0; p < 8; p++) {
		n += (size_t)snprintf(locks + n, lsize - n, "%s\"", p ? "," : "");
		for (int d = 0; d < 8; d++)
			n += (size_t)snprintf(locks + n, lsize - n, "%sseg-%02d-%d", d ? "/" : "", p,
			                      d);
		n += (size_t)snprintf(locks + n, lsize - n, "\":\"%s\"", mode);
	}
	snprintf(locks + n, lsize - n, "}");
	n = (size_t)snprintf(limits, msize, "{");
	for (int k = 0; k < 8; k++)
		n += (size_t)snprintf(limits + n, msize - n, "%s\"pool%d\":%d", k ? "," : "", k,
		                      10000);
	snprintf(limits + n, msize - n, "}");
}

TEST(the_largest_request_fits_one_claim_under_etcds_default_max_txn_ops)
{
	lr_client *c = hosted_client("/cl-large/");
	char locks[4096], limits[512];
	largest_request("S", locks, sizeof(locks), limits, sizeof(limits));
	/* Room to spare in etcd's budget of 128 (the harness keeps the
	 * default): the claim's own compares, a batch around it. */
	json_t *lj = json_loads(locks, 0, NULL), *mj = json_loads(limits, 0, NULL);
	lr_lockset *set = NULL;
	CHECK_OK(lr_lockset_parse(lj, mj, &set, &err), &err);
	CHECK_INT(set->n_nodes, ==, LR_LOCK_NODES_TXN);
	CHECK_INT(lr_locks_txn_ops(set), <=, 88);
	free(set);
	json_decref(lj);
	json_decref(mj);
	submit_asking(c, "big-s", locks, limits);
	largest_request("X", locks, sizeof(locks), limits, sizeof(limits));
	submit_asking(c, "big-x", locks, limits);
	/* Conflicting with big-s on one node only: the deepest of the last path. */
	submit_asking(c, "one-x",
	              "{\"seg-07-0/seg-07-1/seg-07-2/seg-07-3/seg-07-4/seg-07-5/seg-07-6/"
	              "seg-07-7\":\"X\"}",
	              NULL);
	int64_t lease = new_lease(c, 10);
	lr_claimant who = { .client = c, .runner = "box-1", .lease = lease };
	lr_claimed_task h, other;
	CHECK_INT(claim(&who, "big-s", NULL, 0, &h), ==, LR_CLAIM_WON);
	CHECK_INT(hosted_count(c, LR_K_LOCKS, ""), ==, 64);
	CHECK_INT(hosted_count(c, LR_K_SLOTS, ""), ==, 8);
	CHECK_INT(claim(&who, "big-x", NULL, 0, &other), ==, LR_CLAIM_BLOCKED);
	CHECK_INT(claim(&who, "one-x", NULL, 0, &other), ==, LR_CLAIM_BLOCKED);
	CHECK_INT(hosted_count(c, LR_K_LOCKS, ""), ==, 64);
	CHECK_INT(hosted_count(c, LR_K_SLOTS, ""), ==, 8);
	CHECK_INT(hosted_count(c, LR_K_CLAIMS, ""), ==, 1);

	CHECK_OK(lr_finish(&who, &h, LR_TASK_SUCCEEDED, NULL, NULL, &err), &err);
	lr_claimed_task_clear(&h);
	CHECK_INT(hosted_count(c, LR_K_LOCKS, ""), ==, 0);
	CHECK_INT(hosted_count(c, LR_K_SLOTS, ""), ==, 0);
	CHECK_INT(claim(&who, "big-x", NULL, 0, &other), ==, LR_CLAIM_WON);
	CHECK_INT(hosted_count(c, LR_K_LOCKS, ""), ==, 64);
	give_back(&who, &other);
	lr_lease_revoke(lr_client_etcd(c), lease, NULL);
	lr_client_close(c);
}

/* An etcd whose --max-txn-ops is below what a task's claim needs refuses
 * that claim however often it is tried: the task fails at once, naming
 * the limit, and takes nothing; smaller tasks are claimed as usual. */
TEST(a_claim_too_large_for_etcds_max_txn_ops_fails_the_task_naming_the_limit)
{
	static const char *const extra[] = { "--max-txn-ops=24", NULL };
	etcdh_opts o = { .members = 1, .extra_args = extra };
	etcdh_cluster *small = NULL;
	CHECK_INT(etcdh_start(&o, &small), ==, 0);
	lr_client_opts co = { .endpoints = etcdh_endpoints(small), .prefix = "/cl-refused/" };
	lr_client *c = NULL;
	CHECK_OK(lr_client_open(&co, &c, &err), &err);
	char locks[4096], limits[512];
	largest_request("S", locks, sizeof(locks), limits, sizeof(limits));
	submit_asking(c, "big", locks, limits);
	submit_asking(c, "small", "{\"db/users\":\"X\"}", "{\"gpu\":2}");
	lr_claimant who = { .client = c, .runner = "box-1", .lease = new_lease(c, 10) };
	lr_claimed_task h;
	enum lr_claim_outcome oc;
	lr_task_state ended = LR_TASK_SUCCEEDED;
	char why[700] = "";
	CHECK_OK(lr_claim(&who, "big", NULL, 0, 0, false, NULL, 0, &h, &oc, &ended, why,
	                  sizeof(why), &err), &err);
	CHECK_INT(oc, ==, LR_CLAIM_ENDED);
	CHECK_INT(ended, ==, LR_TASK_FAILED);
	CHECK(strstr(why, "--max-txn-ops") != NULL);
	CHECK(strstr(why, "too many operations") != NULL);
	lr_task_status st;
	CHECK_OK(lr_task_get(c, "big", &st, &err), &err);
	CHECK_INT(st.state, ==, LR_TASK_FAILED);
	CHECK(st.error != NULL && strstr(st.error, "64 lock nodes") != NULL);
	lr_task_status_clear(&st);
	CHECK_INT(hosted_count(c, LR_K_LOCKS, ""), ==, 0);
	CHECK_INT(hosted_count(c, LR_K_SLOTS, ""), ==, 0);
	CHECK_INT(hosted_count(c, LR_K_CLAIMS, ""), ==, 0);
	CHECK_INT(claim(&who, "small", NULL, 0, &h), ==, LR_CLAIM_WON);
	CHECK_INT(hosted_count(c, LR_K_LOCKS, ""), ==, 2); /* db, db/users */
	give_back(&who, &h);
	lr_lease_revoke(lr_client_etcd(c), who.lease, NULL);
	lr_client_close(c);
	etcdh_destroy(small);
}

/* ---- fenced ------------------------------------------------------------------------ */

TEST(a_holder_that_lost_its_lease_deletes_none_of_the_next_holders_locks)
{
	lr_client *c = hosted_client("/cl-fence/");
	submit_asking(c, "t1", "{\"doc/1\":\"X\"}", "{\"api\":1}");
	int64_t old_lease = new_lease(c, 10);
	lr_claimant old = { .client = c, .runner = "old", .lease = old_lease };
	lr_claimed_task stale, fresh;
	CHECK_INT(claim(&old, "t1", NULL, 0, &stale), ==, LR_CLAIM_WON);
	/* The lease ends (as on expiry): claim, locks and slot go with it. */
	CHECK_OK(lr_lease_revoke(lr_client_etcd(c), old_lease, &err), &err);
	CHECK_INT(hosted_count(c, LR_K_LOCKS, ""), ==, 0);

	int64_t new_lease_id = new_lease(c, 10);
	lr_claimant now = { .client = c, .runner = "new", .lease = new_lease_id };
	CHECK_INT(claim(&now, "t1", NULL, 0, &fresh), ==, LR_CLAIM_WON);
	/* The same keys, taken again: the stale holder's writes must miss them. */
	CHECK_INT(lr_finish(&old, &stale, LR_TASK_SUCCEEDED, NULL, NULL, &err), ==, LR_ELEASE);
	CHECK_INT(lr_release(&old, &stale, true, &err), ==, LR_ELEASE);
	lr_claimed_task_clear(&stale);
	CHECK_INT(lock_lease(c, "doc/1", LR_LOCK_X, "t1"), ==, new_lease_id);
	CHECK_INT(lock_lease(c, "doc", LR_LOCK_IX, "t1"), ==, new_lease_id);
	CHECK_INT(slot_lease(c, "api", 0), ==, new_lease_id);
	CHECK_INT(wants_count(c, "t1"), ==, 1);
	give_back(&now, &fresh);
	lr_lease_revoke(lr_client_etcd(c), new_lease_id, NULL);
	lr_client_close(c);
}

TEST(a_claim_taken_up_again_on_its_own_lease_keeps_the_slots_it_took)
{
	lr_client *c = hosted_client("/cl-adopt/");
	submit_asking(c, "t1", NULL, "{\"gpu\":4,\"key\":2}");
	int64_t lease = new_lease(c, 10);
	lr_claimant who = { .client = c, .runner = "box-1", .lease = lease };
	lr_claimed_task h;
	int slots[2] = { 3, 1 };
	CHECK_INT(claim(&who, "t1", slots, 2, &h), ==, LR_CLAIM_WON);
	lr_claimed_task_clear(&h);
	/* Claimed again (a lost reply, a worker that let go): other slots asked. */
	int others[2] = { 0, 0 };
	CHECK_INT(claim(&who, "t1", others, 2, &h), ==, LR_CLAIM_WON);
	CHECK(h.adopted);
	CHECK_INT(h.slots[0], ==, 3);
	CHECK_INT(h.slots[1], ==, 1);
	CHECK_INT(hosted_count(c, LR_K_SLOTS, ""), ==, 2);
	/* And giving back frees the ones held. */
	give_back(&who, &h);
	CHECK_INT(hosted_count(c, LR_K_SLOTS, ""), ==, 0);
	lr_lease_revoke(lr_client_etcd(c), lease, NULL);
	lr_client_close(c);
}

/* Our own claim taken up again, but its checkpoint cannot be read: the
 * task ends failed, and that end gives back the locks and slots the claim
 * took, as every end does. */
TEST(a_claim_of_ours_that_cannot_be_taken_up_ends_and_gives_back_its_locks)
{
	lr_client *c = hosted_client("/cl-adopt-end/");
	submit_asking(c, "t1", "{\"doc/1\":\"X\"}", "{\"api\":2}");
	int64_t lease = new_lease(c, 10);
	lr_claimant who = { .client = c, .runner = "box-1", .lease = lease };
	lr_claimed_task h;
	CHECK_INT(claim(&who, "t1", NULL, 0, &h), ==, LR_CLAIM_WON);
	lr_claimed_task_clear(&h);
	CHECK_INT(lock_lease(c, "doc/1", LR_LOCK_X, "t1"), ==, lease);
	CHECK_INT(hosted_count(c, LR_K_SLOTS, ""), ==, 1);
	char key[LR_KEY_SIZE];
	lr_key(c, LR_K_CHECKPOINTS, "t1", key);
	CHECK_OK(lr_kv_put(lr_client_etcd(c), key, "garbage", 7, 0, NULL, NULL, &err), &err);
	CHECK_INT(claim(&who, "t1", NULL, 0, &h), ==, LR_CLAIM_ENDED);
	lr_claimed_task_clear(&h);
	CHECK_INT(lock_lease(c, "doc/1", LR_LOCK_X, "t1"), ==, -1);
	CHECK_INT(lock_lease(c, "doc", LR_LOCK_IX, "t1"), ==, -1);
	CHECK_INT(hosted_count(c, LR_K_SLOTS, ""), ==, 0);
	CHECK_INT(hosted_count(c, LR_K_LIMITS, ""), ==, 0);
	lr_lease_revoke(lr_client_etcd(c), lease, NULL);
	lr_client_close(c);
}

/* ---- keys on no lease ------------------------------------------------------------- */

/* Put key (built by the caller) by hand, on lease (0: none). */
static void put_by_hand(lr_client *c, const char *key, const char *value, int64_t lease)
{
	CHECK_OK(lr_kv_put(lr_client_etcd(c), key, value, strlen(value), lease, NULL, NULL, &err),
	         &err);
}

/* lr_claimant.stray: the keys deleted, one a line. */
static char strays_told[4096];

static void note_stray(void *user, const char *id, const char *key)
{
	(void)user;
	size_t len = strlen(strays_told);
	snprintf(strays_told + len, sizeof(strays_told) - len, "%s %s\n", id, key);
}

/* No holder writes a lock or slot key on no lease (they hang on the
 * holder's lease): one put by hand would never expire and keep its
 * claimers out for ever. The claim it is in the way of deletes it, says
 * so, and takes what it asked for. */
TEST(a_lock_or_slot_key_on_no_lease_in_a_claims_way_is_deleted_and_the_claim_wins)
{
	lr_client *c = hosted_client("/cl-stray/");
	submit_asking(c, "t1", "{\"org/a\":\"X\"}", "{\"gpu\":2}");
	submit_asking(c, "t2", NULL, "{\"api\":2}");
	char lock[LR_LOCK_KEY_SIZE], slot0[LR_LOCK_KEY_SIZE], slot1[LR_LOCK_KEY_SIZE];
	char limit[LR_LOCK_KEY_SIZE];
	/* The lock, and every slot of the pool. */
	lr_lock_key(c, "org/a", LR_LOCK_S, "task:ghost", lock);
	lr_slot_key(c, "gpu", 0, slot0);
	lr_slot_key(c, "gpu", 1, slot1);
	put_by_hand(c, lock, "{\"holder\":\"task:ghost\"}", 0);
	put_by_hand(c, slot0, "{\"holder\":\"task:ghost\",\"limit\":2}", 0);
	put_by_hand(c, slot1, "not json", 0);
	/* A holder under a limit of 1, at slot 0: no slot from 1 up is free. */
	lr_limit_key(c, "api", 1, 0, limit);
	put_by_hand(c, limit, "{}", 0);

	int64_t lease = new_lease(c, 10);
	strays_told[0] = '\0';
	lr_claimant who = { .client = c, .runner = "box-1", .lease = lease,
	                    .stray = note_stray };
	lr_claimed_task h;
	int slot = 1;
	CHECK_INT(claim(&who, "t1", &slot, 1, &h), ==, LR_CLAIM_WON);
	CHECK_INT(key_lease(c, lock), ==, -1);
	CHECK_INT(key_lease(c, slot1), ==, lease); /* ours now */
	CHECK(strstr(strays_told, slot1) != NULL);
	CHECK_INT(lock_lease(c, "org/a", LR_LOCK_X, "t1"), ==, lease);
	CHECK(strstr(strays_told, lock) != NULL);
	CHECK(strstr(strays_told, "t1 ") == strays_told);
	/* Slot 0 was in nobody's way: left alone. */
	CHECK_INT(key_lease(c, slot0), ==, 0);
	give_back(&who, &h);

	CHECK_INT(claim(&who, "t2", &slot, 1, &h), ==, LR_CLAIM_WON);
	CHECK_INT(key_lease(c, limit), ==, -1);
	CHECK(strstr(strays_told, limit) != NULL);
	CHECK_INT(slot_lease(c, "api", 1), ==, lease);
	give_back(&who, &h);
	lr_lease_revoke(lr_client_etcd(c), lease, NULL);
	lr_client_close(c);
}

/* The delete compares the key's mod revision and its lease: a key put
 * again since it was read, on a live holder's lease, stays, and keeps
 * the claim out as any holder's does. */
TEST(a_key_read_on_no_lease_then_put_again_on_a_live_lease_is_not_deleted)
{
	lr_client *c = hosted_client("/cl-stray-live/");
	char lock[LR_LOCK_KEY_SIZE];
	lr_lock_key(c, "org/a", LR_LOCK_X, "task:other", lock);
	put_by_hand(c, lock, "{}", 0);
	lr_range_result read;
	CHECK_OK(lr_kv_get(lr_client_etcd(c), lock, &read, &err), &err);
	CHECK_INT(read.n, ==, 1);
	int64_t live = new_lease(c, 10);
	put_by_hand(c, lock, "{\"holder\":\"task:other\"}", live);
	lr_txn *t = lr_locks_stray_txn(&read.kvs[0]);
	lr_txn_result r;
	CHECK_OK(lr_etcd_txn(lr_client_etcd(c), t, 0, &r, &err), &err);
	CHECK(!r.succeeded);
	lr_txn_result_free(&r);
	lr_txn_free(t);
	CHECK_INT(key_lease(c, lock), ==, live);
	/* Put again on no lease: another key than the one read, kept too. */
	put_by_hand(c, lock, "{}", 0);
	t = lr_locks_stray_txn(&read.kvs[0]);
	CHECK_OK(lr_etcd_txn(lr_client_etcd(c), t, 0, &r, &err), &err);
	CHECK(!r.succeeded);
	lr_txn_result_free(&r);
	lr_txn_free(t);
	CHECK_INT(key_lease(c, lock), ==, 0);
	lr_range_result_free(&read);

	/* On a live lease, it keeps a claim out, and nothing is deleted. */
	put_by_hand(c, lock, "{\"holder\":\"task:other\"}", live);
	submit_asking(c, "t1", "{\"org/a\":\"S\"}", NULL);
	int64_t lease = new_lease(c, 10);
	strays_told[0] = '\0';
	lr_claimant who = { .client = c, .runner = "box-1", .lease = lease,
	                    .stray = note_stray };
	lr_claimed_task h;
	CHECK_INT(claim(&who, "t1", NULL, 0, &h), ==, LR_CLAIM_BLOCKED);
	CHECK_INT(key_lease(c, lock), ==, live);
	CHECK_STR(strays_told, "");
	lr_lease_revoke(lr_client_etcd(c), lease, NULL);
	lr_lease_revoke(lr_client_etcd(c), live, NULL);
	lr_client_close(c);
}

/* ---- what a pending task waits for -------------------------------------------------- */

TEST(status_says_what_a_pending_task_waits_for)
{
	lr_client *c = hosted_client("/cl-waits/");
	submit_asking(c, "t-12", "{\"org/a\":\"X\"}", NULL);
	submit_asking(c, "t-13", "{\"org/a/b\":\"S\"}", NULL);
	submit_asking(c, "t-14", "{\"other\":\"X\"}", NULL);
	int64_t lease = new_lease(c, 10);
	lr_claimant who = { .client = c, .runner = "box-1", .lease = lease };
	lr_claimed_task h;
	CHECK_INT(claim(&who, "t-12", NULL, 0, &h), ==, LR_CLAIM_WON);

	lr_task_status *list = NULL;
	size_t n = 0;
	CHECK_OK(lr_task_list(c, -1, 0, &list, &n, &err), &err);
	CHECK_OK(lr_task_waits(c, list, n, &err), &err);
	int seen = 0;
	for (size_t i = 0; i < n; i++) {
		if (strcmp(list[i].id, "t-13") == 0) {
			seen++;
			CHECK(list[i].waiting != NULL);
			CHECK(strstr(list[i].waiting, "X org/a held by task t-12 on box-1") != NULL);
		} else {
			CHECK(list[i].waiting == NULL); /* running, or free to start */
		}
	}
	CHECK_INT(seen, ==, 1);
	lr_task_list_free(list, n);
	give_back(&who, &h);
	lr_lease_revoke(lr_client_etcd(c), lease, NULL);
	lr_client_close(c);
}

TEST_LIST(TEST_CASE(a_claim_takes_its_locks_and_slots_on_its_lease_and_the_end_gives_them_back),
          TEST_CASE(a_claim_of_ours_that_cannot_be_taken_up_ends_and_gives_back_its_locks),
          TEST_CASE(a_claim_too_large_for_etcds_max_txn_ops_fails_the_task_naming_the_limit),
          TEST_CASE(a_task_needing_two_locks_one_of_them_taken_takes_neither),
          TEST_CASE(the_compatibility_matrix_holds_pair_by_pair_on_a_node_its_parent_and_its_child),
          TEST_CASE(a_pool_runs_no_more_tasks_than_the_smallest_limit_among_them),
          TEST_CASE(the_largest_request_fits_one_claim_under_etcds_default_max_txn_ops),
          TEST_CASE(a_holder_that_lost_its_lease_deletes_none_of_the_next_holders_locks),
          TEST_CASE(a_claim_taken_up_again_on_its_own_lease_keeps_the_slots_it_took),
          TEST_CASE(status_says_what_a_pending_task_waits_for),
          TEST_CASE(a_lock_or_slot_key_on_no_lease_in_a_claims_way_is_deleted_and_the_claim_wins),
          TEST_CASE(a_key_read_on_no_lease_then_put_again_on_a_live_lease_is_not_deleted));
TEST_MAIN(hosted_setup, hosted_teardown)
