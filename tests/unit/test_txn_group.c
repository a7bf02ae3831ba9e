/* test_txn_group.c - which txns may share one request: keys written twice,
 * compares on keys another member writes, ranges, the op budget down the
 * nesting, the size and the count. No etcd. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd/txn_group.h"
#include "test.h"

/* A claim-like txn on task id: compares its claim, puts claim and
 * checkpoint, reads them back on failure. */
static lr_txn *claim_of(const char *id)
{
	char claim[64], ckpt[64];
	snprintf(claim, sizeof(claim), "/p/claims/%s", id);
	snprintf(ckpt, sizeof(ckpt), "/p/checkpoints/%s", id);
	lr_txn *t = lr_txn_new();
	lr_txn_cmp(t, claim, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_txn_put(t, LR_THEN, claim, "c", 1, 7);
	lr_txn_put(t, LR_THEN, ckpt, "k", 1, 0);
	lr_txn_get(t, LR_ELSE, claim, 0);
	return t;
}

TEST(txns_of_different_tasks_share_a_request)
{
	lr_txn_group *g = lr_txn_group_new(64);
	lr_txn *a = claim_of("a"), *b = claim_of("b"), *c = claim_of("c");
	CHECK(lr_txn_group_add(g, a));
	CHECK(lr_txn_group_add(g, b));
	CHECK(lr_txn_group_add(g, c));
	CHECK(lr_txn_group_size(g) == 3);
	CHECK(lr_txn_group_members(g)[1] == b);
	lr_txn_group_clear(g);
	CHECK(lr_txn_group_size(g) == 0);
	CHECK(lr_txn_group_add(g, b));
	lr_txn_group_free(g);
	lr_txn_free(a);
	lr_txn_free(b);
	lr_txn_free(c);
}

TEST(a_key_written_by_a_member_is_written_by_no_other)
{
	lr_txn_group *g = lr_txn_group_new(64);
	lr_txn *a = claim_of("a"), *again = claim_of("a");
	lr_txn *del = lr_txn_new();
	lr_txn_delete(del, LR_ELSE, "/p/checkpoints/a", 0);
	CHECK(lr_txn_group_add(g, a));
	CHECK(!lr_txn_group_add(g, again));
	CHECK(!lr_txn_group_add(g, del));
	CHECK(lr_txn_group_size(g) == 1);
	lr_txn_group_free(g);
	lr_txn_free(a);
	lr_txn_free(again);
	lr_txn_free(del);
}

/* etcd judges a member's compares before any member writes: a txn that
 * compares what another writes must wait for the next request. */
TEST(a_compare_on_a_key_a_member_writes_waits_for_the_next_request)
{
	lr_txn_group *g = lr_txn_group_new(64);
	lr_txn *a = claim_of("a");
	lr_txn *looks = lr_txn_new();
	lr_txn_cmp(looks, "/p/checkpoints/a", 0, LR_CMP_MOD, LR_CMP_EQ, 3);
	lr_txn_put(looks, LR_THEN, "/p/other", "v", 1, 0);
	lr_txn *reads = lr_txn_new(); /* a read sees earlier writes: fine */
	lr_txn_get(reads, LR_THEN, "/p/claims/a", 0);
	CHECK(lr_txn_group_add(g, a));
	CHECK(!lr_txn_group_add(g, looks));
	CHECK(lr_txn_group_add(g, reads));
	lr_txn_group_free(g);
	lr_txn_free(a);
	lr_txn_free(looks);
	lr_txn_free(reads);
}

/* Lock compares cover ranges: a range that holds a key a member writes
 * (a lock taken in the same request) keeps its txn out, one that does not
 * lets it in; the same for a member's written key nested in a chain. */
TEST(range_compares_and_range_deletes_against_written_keys)
{
	lr_txn_group *g = lr_txn_group_new(64);
	lr_txn *x = lr_txn_new();
	lr_txn *chain = lr_txn_nest(x, LR_THEN);
	lr_txn_cmp_range(chain, "/p/locks/db/S", "/p/locks/db/T", LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_txn_put(chain, LR_THEN, "/p/locks/db/X/task:a", "v", 1, 0);
	lr_txn *s = lr_txn_new();
	lr_txn_cmp_range(s, "/p/locks/db/X", "/p/locks/db/Y", LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_txn *far = lr_txn_new();
	lr_txn_cmp_range(far, "/p/locks/dc/X", "/p/locks/dc/Y", LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_txn *wipe = lr_txn_new();
	lr_txn_delete(wipe, LR_THEN, "/p/locks/", LR_KEY_PREFIX);
	lr_txn *under = lr_txn_new(); /* a prefix compare over the lock */
	lr_txn_cmp(under, "/p/locks/db/", LR_KEY_PREFIX, LR_CMP_VERSION, LR_CMP_EQ, 0);
	CHECK(lr_txn_group_add(g, x));
	CHECK(!lr_txn_group_add(g, s));
	CHECK(lr_txn_group_add(g, far));
	CHECK(!lr_txn_group_add(g, wipe));
	CHECK(!lr_txn_group_add(g, under));
	/* And the other way round: a range delete in, then a key in it. */
	lr_txn_group_clear(g);
	CHECK(lr_txn_group_add(g, wipe));
	CHECK(!lr_txn_group_add(g, x));
	lr_txn *elsewhere = claim_of("b");
	CHECK(lr_txn_group_add(g, elsewhere));
	lr_txn_group_free(g);
	lr_txn_free(x);
	lr_txn_free(s);
	lr_txn_free(far);
	lr_txn_free(wipe);
	lr_txn_free(under);
	lr_txn_free(elsewhere);
}

/* n members of budget k fit while n + k <= 128. */
TEST(members_and_their_nesting_share_the_op_budget)
{
	lr_txn_group *g = lr_txn_group_new(100);
	lr_txn *big = lr_txn_new(); /* 1 level of 30 compares, then 40 */
	for (int i = 0; i < 30; i++) {
		char k[32];
		snprintf(k, sizeof(k), "/p/big/%d", i);
		lr_txn_cmp(big, k, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
	}
	lr_txn *in = lr_txn_nest(big, LR_THEN);
	for (int i = 0; i < 40; i++) {
		char k[32];
		snprintf(k, sizeof(k), "/p/in/%d", i);
		lr_txn_cmp(in, k, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
	}
	lr_txn *small[100];
	CHECK(lr_txn_group_add(g, big)); /* needs 70: 58 members at most */
	size_t added = 1;
	for (int i = 0; i < 100; i++) {
		char id[16];
		snprintf(id, sizeof(id), "t%d", i);
		small[i] = claim_of(id);
		added += lr_txn_group_add(g, small[i]);
	}
	CHECK(added == 58);
	lr_txn_group_free(g);
	/* The count cap. */
	g = lr_txn_group_new(4);
	added = 0;
	for (int i = 0; i < 10; i++)
		added += lr_txn_group_add(g, small[i]);
	CHECK(added == 4);
	lr_txn_group_free(g);
	for (int i = 0; i < 100; i++)
		lr_txn_free(small[i]);
	lr_txn_free(big);
	CHECK(lr_txn_group_new(0) == NULL);
	CHECK(lr_txn_group_new(LR_TXN_MAX_OPS) == NULL);
}

/* Requests stay under the size cap; a large txn alone is taken. */
TEST(members_stay_under_the_size_cap_but_one_alone_always_fits)
{
	size_t len = 600 * 1024;
	char *v = malloc(len);
	memset(v, 'x', len);
	lr_txn *a = lr_txn_new(), *b = lr_txn_new();
	lr_txn_put(a, LR_THEN, "/p/a", v, len, 0);
	lr_txn_put(b, LR_THEN, "/p/b", v, len, 0);
	lr_txn_group *g = lr_txn_group_new(8);
	CHECK(lr_txn_group_add(g, a));
	CHECK(!lr_txn_group_add(g, b));
	lr_txn_group_clear(g);
	CHECK(lr_txn_group_add(g, b));
	lr_txn_group_free(g);
	lr_txn_free(a);
	lr_txn_free(b);
	free(v);
}

TEST_LIST(
	TEST_CASE(txns_of_different_tasks_share_a_request),
	TEST_CASE(a_key_written_by_a_member_is_written_by_no_other),
	TEST_CASE(a_compare_on_a_key_a_member_writes_waits_for_the_next_request),
	TEST_CASE(range_compares_and_range_deletes_against_written_keys),
	TEST_CASE(members_and_their_nesting_share_the_op_budget),
	TEST_CASE(members_stay_under_the_size_cap_but_one_alone_always_fits),
);
TEST_MAIN(NULL, NULL)
