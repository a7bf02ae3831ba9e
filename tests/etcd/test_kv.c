/* test_kv.c - KV calls and txns against a real one-member etcd. */
#include <stdio.h>
#include <string.h>

#include "rpc.pb-c.h"

#include "common.h"
#include "test.h"

static lr_err err;

static void key(char *buf, const char *prefix, const char *name)
{
	snprintf(buf, 256, "%.200s%.50s", prefix, name);
}

TEST(put_then_range_returns_value_and_revisions)
{
	lr_etcd *c = client_open(NULL);
	const char *p = test_prefix("put");
	char k[256];
	key(k, p, "a");
	int64_t rev = 0;
	CHECK_OK(lr_kv_put(c, k, "hello", 5, 0, &rev, NULL, &err), &err);
	CHECK(rev > 0);
	lr_range_result r;
	CHECK_OK(lr_kv_get(c, k, &r, &err), &err);
	CHECK_INT(r.n, ==, 1);
	CHECK_STR(r.kvs[0].key, k);
	CHECK_INT(r.kvs[0].value_len, ==, 5);
	CHECK(memcmp(r.kvs[0].value, "hello", 5) == 0);
	CHECK_INT(r.kvs[0].create_rev, ==, rev);
	CHECK_INT(r.kvs[0].version, ==, 1);
	lr_range_result_free(&r);
	lr_etcd_close(c);
}

TEST(put_with_prev_kv_returns_the_old_value)
{
	lr_etcd *c = client_open(NULL);
	char k[256];
	key(k, test_prefix("prev"), "a");
	CHECK_OK(lr_kv_put(c, k, "one", 3, 0, NULL, NULL, &err), &err);
	lr_range_result prev;
	CHECK_OK(lr_kv_put(c, k, "two", 3, 0, NULL, &prev, &err), &err);
	CHECK_INT(prev.n, ==, 1);
	CHECK(memcmp(prev.kvs[0].value, "one", 3) == 0);
	lr_range_result_free(&prev);
	lr_etcd_close(c);
}

TEST(range_prefix_limit_keys_only_count_only_sort_and_revision)
{
	lr_etcd *c = client_open(NULL);
	const char *p = test_prefix("range");
	char k[256];
	int64_t first_rev = 0;
	for (int i = 4; i >= 0; i--) { /* created in reverse key order */
		char name[8];
		snprintf(name, sizeof(name), "k%d", i);
		key(k, p, name);
		int64_t rev;
		CHECK_OK(lr_kv_put(c, k, "v", 1, 0, &rev, NULL, &err), &err);
		if (first_rev == 0)
			first_rev = rev;
	}
	lr_range_result r;
	lr_range_opts o = { .key = p, .flags = LR_KEY_PREFIX };
	CHECK_OK(lr_kv_range(c, &o, &r, &err), &err);
	CHECK_INT(r.n, ==, 5);
	CHECK_HAS(r.kvs[0].key, "k0"); /* sorted by key by default */
	lr_range_result_free(&r);

	o.limit = 2;
	CHECK_OK(lr_kv_range(c, &o, &r, &err), &err);
	CHECK_INT(r.n, ==, 2);
	CHECK(r.more);
	CHECK_INT(r.count, ==, 5);
	lr_range_result_free(&r);

	o.limit = 0;
	o.flags = LR_KEY_PREFIX | LR_RANGE_KEYS_ONLY | LR_RANGE_SORT_CREATE;
	CHECK_OK(lr_kv_range(c, &o, &r, &err), &err);
	CHECK_INT(r.n, ==, 5);
	CHECK_HAS(r.kvs[0].key, "k4"); /* oldest first */
	CHECK_INT(r.kvs[0].value_len, ==, 0);
	lr_range_result_free(&r);

	o.flags = LR_KEY_PREFIX | LR_RANGE_COUNT_ONLY;
	CHECK_OK(lr_kv_range(c, &o, &r, &err), &err);
	CHECK_INT(r.n, ==, 0);
	CHECK_INT(r.count, ==, 5);
	lr_range_result_free(&r);

	o.flags = LR_KEY_PREFIX;
	o.revision = first_rev; /* only the first key existed then */
	CHECK_OK(lr_kv_range(c, &o, &r, &err), &err);
	CHECK_INT(r.n, ==, 1);
	lr_range_result_free(&r);
	lr_etcd_close(c);
}

TEST(delete_prefix_removes_every_key_under_it)
{
	lr_etcd *c = client_open(NULL);
	const char *p = test_prefix("del");
	char k[256];
	for (int i = 0; i < 3; i++) {
		char name[8];
		snprintf(name, sizeof(name), "k%d", i);
		key(k, p, name);
		CHECK_OK(lr_kv_put(c, k, "v", 1, 0, NULL, NULL, &err), &err);
	}
	int64_t deleted = 0;
	CHECK_OK(lr_kv_delete(c, p, LR_KEY_PREFIX, &deleted, NULL, &err), &err);
	CHECK_INT(deleted, ==, 3);
	lr_range_result r;
	lr_range_opts o = { .key = p, .flags = LR_KEY_PREFIX | LR_RANGE_COUNT_ONLY };
	CHECK_OK(lr_kv_range(c, &o, &r, &err), &err);
	CHECK_INT(r.count, ==, 0);
	lr_range_result_free(&r);
	lr_etcd_close(c);
}

/* The create-once pattern every record of leaserun relies on. */
static int create_once(lr_etcd *c, const char *k, const char *v, bool *won)
{
	lr_txn *t = lr_txn_new();
	lr_txn_cmp(t, k, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_txn_put(t, LR_THEN, k, v, strlen(v), 0);
	lr_txn_get(t, LR_ELSE, k, 0);
	lr_txn_result r;
	int rc = lr_etcd_txn(c, t, LR_CALL_RETRY, &r, &err);
	lr_txn_free(t);
	if (rc != 0)
		return rc;
	*won = r.succeeded;
	if (!r.succeeded) {
		/* The failure branch's Range reads the winner's value. */
		if (r.n_ops != 1 || r.ops[0].type != LR_OP_RANGE || r.ops[0].n != 1 ||
		    r.ops[0].kvs[0].value_len != 5)
			rc = -100;
	}
	lr_txn_result_free(&r);
	return rc;
}

TEST(txn_version_zero_creates_once_and_the_second_sees_the_winner)
{
	lr_etcd *c = client_open(NULL);
	char k[256];
	key(k, test_prefix("once"), "x");
	bool won = false;
	CHECK_OK(create_once(c, k, "first", &won), &err);
	CHECK(won);
	CHECK_OK(create_once(c, k, "other", &won), &err);
	CHECK(!won);
	lr_range_result r;
	CHECK_OK(lr_kv_get(c, k, &r, &err), &err);
	CHECK(memcmp(r.kvs[0].value, "first", 5) == 0);
	lr_range_result_free(&r);
	lr_etcd_close(c);
}

/* protobuf-c leaves an unset oneof off the wire: "version == 0" must be
 * encoded with its case, or it would vanish for any value. */
TEST(txn_zero_valued_oneof_compare_is_on_the_wire)
{
	lr_txn *t = lr_txn_new();
	lr_txn_cmp(t, "/k", 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_txn_cmp(t, "/k", 0, LR_CMP_CREATE, LR_CMP_EQ, 0);
	lr_txn_cmp(t, "/k", 0, LR_CMP_MOD, LR_CMP_EQ, 0);
	lr_txn_cmp(t, "/k", 0, LR_CMP_LEASE, LR_CMP_EQ, 0);
	const ProtobufCMessage *m = lr_txn_request(t);
	size_t n = protobuf_c_message_get_packed_size(m);
	uint8_t buf[512];
	CHECK(n <= sizeof(buf));
	protobuf_c_message_pack(m, buf);
	Etcdserverpb__TxnRequest *back = etcdserverpb__txn_request__unpack(NULL, n, buf);
	CHECK(back != NULL);
	CHECK_INT(back->n_compare, ==, 4);
	CHECK_INT(back->compare[0]->target_union_case, ==, ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION);
	CHECK_INT(back->compare[1]->target_union_case, ==, ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION);
	CHECK_INT(back->compare[2]->target_union_case, ==, ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION);
	CHECK_INT(back->compare[3]->target_union_case, ==, ETCDSERVERPB__COMPARE__TARGET_UNION_LEASE);
	etcdserverpb__txn_request__free_unpacked(back, NULL);
	lr_txn_free(t);
}

TEST(txn_compares_on_create_revision_mod_revision_and_value)
{
	lr_etcd *c = client_open(NULL);
	char k[256];
	key(k, test_prefix("cmp"), "x");
	int64_t created;
	CHECK_OK(lr_kv_put(c, k, "v1", 2, 0, &created, NULL, &err), &err);
	int64_t modified;
	CHECK_OK(lr_kv_put(c, k, "v2", 2, 0, &modified, NULL, &err), &err);

	struct { enum lr_cmp_target tgt; int64_t v; bool want; } cases[] = {
		{ LR_CMP_CREATE, created, true },
		{ LR_CMP_CREATE, modified, false },
		{ LR_CMP_MOD, modified, true },
		{ LR_CMP_MOD, created, false },
		{ LR_CMP_VERSION, 2, true },
		{ LR_CMP_VERSION, 0, false },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		lr_txn *t = lr_txn_new();
		lr_txn_cmp(t, k, 0, cases[i].tgt, LR_CMP_EQ, cases[i].v);
		lr_txn_result r;
		CHECK_OK(lr_etcd_txn(c, t, LR_CALL_RETRY, &r, &err), &err);
		if (r.succeeded != cases[i].want)
			TEST_FAIL("case %zu: succeeded=%d", i, r.succeeded);
		lr_txn_result_free(&r);
		lr_txn_free(t);
	}
	lr_txn *t = lr_txn_new();
	lr_txn_cmp_value(t, k, LR_CMP_EQ, "v2", 2);
	lr_txn_cmp(t, k, 0, LR_CMP_CREATE, LR_CMP_LT, modified);
	lr_txn_result r;
	CHECK_OK(lr_etcd_txn(c, t, LR_CALL_RETRY, &r, &err), &err);
	CHECK(r.succeeded);
	lr_txn_result_free(&r);
	lr_txn_free(t);
	lr_etcd_close(c);
}

TEST(txn_compare_on_lease_tells_which_lease_holds_the_key)
{
	lr_etcd *c = client_open(NULL);
	char k[256];
	key(k, test_prefix("lease"), "x");
	Etcdserverpb__LeaseGrantRequest g = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
	g.ttl = 30;
	ProtobufCMessage *resp;
	CHECK_OK(lr_etcd_unary(c, "/etcdserverpb.Lease/LeaseGrant", &g.base,
	                       &etcdserverpb__lease_grant_response__descriptor, &resp, 0, &err), &err);
	int64_t lease = ((Etcdserverpb__LeaseGrantResponse *)resp)->id;
	lr_etcd_reply_free(resp);
	CHECK_OK(lr_kv_put(c, k, "v", 1, lease, NULL, NULL, &err), &err);

	int64_t values[] = { lease, lease + 1, 0 };
	bool want[] = { true, false, false };
	for (int i = 0; i < 3; i++) {
		lr_txn *t = lr_txn_new();
		lr_txn_cmp(t, k, 0, LR_CMP_LEASE, LR_CMP_EQ, values[i]);
		lr_txn_result r;
		CHECK_OK(lr_etcd_txn(c, t, LR_CALL_RETRY, &r, &err), &err);
		CHECK_INT(r.succeeded, ==, want[i]);
		lr_txn_result_free(&r);
		lr_txn_free(t);
	}
	lr_etcd_close(c);
}

TEST(txn_prefix_compare_version_zero_means_no_key_under_it)
{
	lr_etcd *c = client_open(NULL);
	const char *p = test_prefix("pfx");
	char dir[256], k[256];
	snprintf(dir, sizeof(dir), "%sdir/", p);
	key(k, dir, "a");
	bool results[2];
	for (int i = 0; i < 2; i++) {
		lr_txn *t = lr_txn_new();
		lr_txn_cmp(t, dir, LR_KEY_PREFIX, LR_CMP_VERSION, LR_CMP_EQ, 0);
		lr_txn_result r;
		CHECK_OK(lr_etcd_txn(c, t, LR_CALL_RETRY, &r, &err), &err);
		results[i] = r.succeeded;
		lr_txn_result_free(&r);
		lr_txn_free(t);
		if (i == 0)
			CHECK_OK(lr_kv_put(c, k, "v", 1, 0, NULL, NULL, &err), &err);
	}
	CHECK(results[0]);
	CHECK(!results[1]);
	lr_etcd_close(c);
}

TEST(txn_with_ranges_puts_and_deletes_in_one_revision)
{
	lr_etcd *c = client_open(NULL);
	const char *p = test_prefix("multi");
	char a[256], b[256];
	key(a, p, "a");
	key(b, p, "b");
	CHECK_OK(lr_kv_put(c, a, "old", 3, 0, NULL, NULL, &err), &err);
	lr_txn *t = lr_txn_new();
	lr_txn_get(t, LR_THEN, a, 0);
	lr_txn_put(t, LR_THEN, b, "new", 3, 0);
	lr_txn_delete(t, LR_THEN, a, 0);
	lr_txn_get(t, LR_THEN, p, LR_KEY_PREFIX);
	lr_txn_result r;
	CHECK_OK(lr_etcd_txn(c, t, 0, &r, &err), &err);
	CHECK(r.succeeded);
	CHECK_INT(r.n_ops, ==, 4);
	CHECK_INT(r.ops[0].type, ==, LR_OP_RANGE);
	CHECK_INT(r.ops[0].n, ==, 1);
	CHECK_INT(r.ops[1].type, ==, LR_OP_PUT);
	CHECK_INT(r.ops[2].type, ==, LR_OP_DELETE);
	CHECK_INT(r.ops[2].deleted, ==, 1);
	CHECK_INT(r.ops[3].n, ==, 1);
	CHECK_STR(r.ops[3].kvs[0].key, b);
	CHECK_INT(r.ops[3].kvs[0].mod_rev, ==, r.revision);
	lr_txn_result_free(&r);
	lr_txn_free(t);
	lr_etcd_close(c);
}

TEST(value_over_the_request_limit_is_a_clear_error)
{
	lr_etcd *c = client_open(NULL);
	char k[256];
	key(k, test_prefix("big"), "x");
	size_t n = 3 * 1024 * 1024;
	char *big = malloc(n);
	memset(big, 'x', n);
	int rc = lr_kv_put(c, k, big, n, 0, NULL, NULL, &err);
	free(big);
	CHECK_INT(rc, ==, LR_ETOOLARGE);
	CHECK_HAS(err.msg, k);
	CHECK_HAS(err.msg, "too large");
	/* The client is still usable. */
	CHECK_OK(lr_kv_put(c, k, "small", 5, 0, NULL, NULL, &err), &err);
	lr_etcd_close(c);
}

/* Three inner txns in one outer: each decides by its own compares, all
 * cost one revision. */
TEST(nested_txns_decide_each_by_its_own_compares_in_one_revision)
{
	lr_etcd *c = client_open(NULL);
	const char *p = test_prefix("nested");
	char a[256], b[256], d[256];
	key(a, p, "a");
	key(b, p, "b");
	key(d, p, "d");
	CHECK_OK(lr_kv_put(c, b, "taken", 5, 0, NULL, NULL, &err), &err);
	lr_txn *t = lr_txn_new();
	const char *keys[3] = { a, b, d };
	for (int i = 0; i < 3; i++) {
		lr_txn *in = lr_txn_nest(t, LR_THEN);
		lr_txn_cmp(in, keys[i], 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
		lr_txn_put(in, LR_THEN, keys[i], "mine", 4, 0);
		lr_txn_get(in, LR_ELSE, keys[i], 0);
	}
	lr_txn_result r;
	CHECK_OK(lr_etcd_txn(c, t, 0, &r, &err), &err);
	CHECK(r.succeeded); /* no compares: the outer always succeeds */
	CHECK_INT(r.n_ops, ==, 3);
	bool want[3] = { true, false, true };
	for (int i = 0; i < 3; i++) {
		CHECK_INT(r.ops[i].type, ==, LR_OP_TXN);
		CHECK(r.ops[i].txn->succeeded == want[i]);
	}
	CHECK_INT(r.ops[1].txn->ops[0].n, ==, 1); /* the failure branch's read */
	int64_t rev = r.revision;
	lr_txn_result_free(&r);
	lr_txn_free(t);
	lr_range_result rr;
	CHECK_OK(lr_kv_get(c, a, &rr, &err), &err);
	CHECK_INT(rr.kvs[0].mod_rev, ==, rev);
	lr_range_result_free(&rr);
	CHECK_OK(lr_kv_get(c, d, &rr, &err), &err);
	CHECK_INT(rr.kvs[0].mod_rev, ==, rev); /* the same revision */
	lr_range_result_free(&rr);
	CHECK_OK(lr_kv_get(c, b, &rr, &err), &err);
	CHECK(rr.kvs[0].value_len == 5); /* untouched */
	lr_range_result_free(&rr);
	lr_etcd_close(c);
}

/* etcd refuses a request that writes one key twice, even in two branches
 * of nested txns: batches must keep their keys apart. */
TEST(nested_txns_may_not_write_one_key_twice)
{
	lr_etcd *c = client_open(NULL);
	char k[256];
	key(k, test_prefix("twice"), "k");
	lr_txn *t = lr_txn_new();
	for (int i = 0; i < 2; i++) {
		lr_txn *in = lr_txn_nest(t, LR_THEN);
		lr_txn_put(in, LR_THEN, k, "v", 1, 0);
	}
	lr_txn_result r;
	int rc = lr_etcd_txn(c, t, 0, &r, &err);
	CHECK(rc != 0);
	CHECK_HAS(err.msg, "duplicate key");
	lr_txn_free(t);
	/* A txn nested in a branch that is not taken writes nothing. */
	t = lr_txn_new();
	lr_txn_cmp(t, k, 0, LR_CMP_VERSION, LR_CMP_GT, 0); /* false: k absent */
	lr_txn *in = lr_txn_nest(t, LR_THEN);
	lr_txn_put(in, LR_THEN, k, "v", 1, 0);
	CHECK_OK(lr_etcd_txn(c, t, 0, &r, &err), &err);
	CHECK(!r.succeeded);
	lr_txn_result_free(&r);
	lr_txn_free(t);
	lr_range_result rr;
	CHECK_OK(lr_kv_get(c, k, &rr, &err), &err);
	CHECK_INT(rr.n, ==, 0);
	lr_range_result_free(&rr);
	lr_etcd_close(c);
}

/* etcd judges every compare of a request, nested ones included, against
 * the store as it was before the request, yet a read runs in order and
 * sees what the ops before it wrote. So a batch must never hold a txn
 * whose compares look at a key that another txn of the batch writes. */
TEST(nested_compares_see_the_store_before_the_request_and_reads_see_earlier_writes)
{
	lr_etcd *c = client_open(NULL);
	char k[256];
	key(k, test_prefix("before"), "k");
	lr_txn *t = lr_txn_new();
	lr_txn *first = lr_txn_nest(t, LR_THEN);
	lr_txn_cmp(first, k, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_txn_put(first, LR_THEN, k, "first", 5, 0);
	lr_txn *second = lr_txn_nest(t, LR_THEN);
	lr_txn_cmp(second, k, 0, LR_CMP_VERSION, LR_CMP_EQ, 0); /* true: judged before */
	lr_txn_get(second, LR_THEN, k, 0);                      /* sees "first" */
	lr_txn_result r;
	CHECK_OK(lr_etcd_txn(c, t, 0, &r, &err), &err);
	CHECK(r.ops[0].txn->succeeded);
	CHECK(r.ops[1].txn->succeeded);
	CHECK_INT(r.ops[1].txn->ops[0].n, ==, 1);
	CHECK(r.ops[1].txn->ops[0].kvs[0].value_len == 5);
	/* A nested reply carries no revision of its own: the request's is
	 * every nested txn's. */
	CHECK_INT(r.ops[0].txn->revision, ==, 0);
	CHECK(r.revision > 0);
	lr_txn_result_free(&r);
	lr_txn_free(t);
	lr_etcd_close(c);
}

/* Which writes of one key in two nested txns etcd refuses (checked before
 * anything applies): two puts, even in the THEN of one and the ELSE of the
 * other, and a delete followed by a put; a put followed by a delete, and
 * two deletes, pass. A batch keeps every written key to one member. */
TEST(nested_txns_writing_one_key_refused_or_not_by_kind_and_order)
{
	lr_etcd *c = client_open(NULL);
	char k[256];
	key(k, test_prefix("putdel"), "k");
	enum { DEL_DEL, PUT_DEL, DEL_PUT, PUT_PUT_ELSE };
	for (int shape = DEL_DEL; shape <= PUT_PUT_ELSE; shape++) {
		lr_txn *t = lr_txn_new();
		lr_txn *a = lr_txn_nest(t, LR_THEN);
		lr_txn *b = lr_txn_nest(t, LR_THEN);
		if (shape == DEL_DEL || shape == DEL_PUT)
			lr_txn_delete(a, LR_THEN, k, 0);
		else
			lr_txn_put(a, LR_THEN, k, "v", 1, 0);
		if (shape == DEL_DEL || shape == PUT_DEL)
			lr_txn_delete(b, LR_ELSE, k, 0);
		else
			lr_txn_put(b, shape == DEL_PUT ? LR_THEN : LR_ELSE, k, "v", 1, 0);
		lr_txn_result r;
		int rc = lr_etcd_txn(c, t, 0, &r, &err);
		if (shape == DEL_DEL || shape == PUT_DEL) {
			CHECK_OK(rc, &err);
			lr_txn_result_free(&r);
		} else {
			CHECK(rc != 0);
			CHECK_HAS(err.msg, "duplicate key");
		}
		lr_txn_free(t);
	}
	lr_etcd_close(c);
}

/* --max-txn-ops (128 by default) is a budget down the nesting: a txn
 * nested in one of n ops (the most of its compares and each branch) may
 * have at most 128 - n of its own. An outer txn of 100 nested txns of 28
 * compares passes, of 29 does not. */
static int nested_of(lr_etcd *c, const char *p, int inner_compares)
{
	lr_txn *t = lr_txn_new();
	for (int i = 0; i < 100; i++) {
		lr_txn *in = lr_txn_nest(t, LR_THEN);
		for (int j = 0; j < inner_compares; j++) {
			char k[256], name[32];
			snprintf(name, sizeof(name), "%d-%d", i, j);
			key(k, p, name);
			lr_txn_cmp(in, k, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
		}
	}
	lr_txn_result r;
	int rc = lr_etcd_txn(c, t, 0, &r, &err);
	if (rc == 0)
		lr_txn_result_free(&r);
	lr_txn_free(t);
	return rc;
}

TEST(nested_txns_share_the_op_limit_with_their_parents)
{
	lr_etcd *c = client_open(NULL);
	const char *p = test_prefix("opcap");
	CHECK_OK(nested_of(c, p, 28), &err);
	CHECK(nested_of(c, p, 29) != 0);
	CHECK_HAS(err.msg, "too many operations");
	lr_etcd_close(c);
}

/* lr_etcd_txn_many: each txn's own result, the request's revision in
 * each, results freed one by one in any order. */
TEST(txns_sent_together_each_get_their_own_result_and_the_one_revision)
{
	lr_etcd *c = client_open(NULL);
	const char *p = test_prefix("many");
	char a[256], b[256];
	key(a, p, "a");
	key(b, p, "b");
	CHECK_OK(lr_kv_put(c, b, "taken", 5, 0, NULL, NULL, &err), &err);
	lr_txn *ts[2];
	const char *keys[2] = { a, b };
	for (int i = 0; i < 2; i++) {
		ts[i] = lr_txn_new();
		lr_txn_cmp(ts[i], keys[i], 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
		lr_txn_put(ts[i], LR_THEN, keys[i], "mine", 4, 0);
		lr_txn_get(ts[i], LR_ELSE, keys[i], 0);
	}
	lr_txn_result rs[2];
	CHECK_OK(lr_etcd_txn_many(c, (const lr_txn *const *)ts, 2, LR_CALL_RETRY, rs, &err),
	         &err);
	CHECK(rs[0].succeeded);
	CHECK(!rs[1].succeeded);
	CHECK_INT(rs[0].revision, ==, rs[1].revision);
	lr_txn_result_free(&rs[0]);
	CHECK_INT(rs[1].n_ops, ==, 1);
	CHECK(rs[1].ops[0].n == 1 && rs[1].ops[0].kvs[0].value_len == 5);
	int64_t rev = rs[1].revision;
	lr_txn_result_free(&rs[1]);
	lr_range_result rr;
	CHECK_OK(lr_kv_get(c, a, &rr, &err), &err);
	CHECK_INT(rr.kvs[0].mod_rev, ==, rev);
	lr_range_result_free(&rr);
	/* One alone is sent as itself. */
	CHECK_OK(lr_etcd_txn_many(c, (const lr_txn *const *)ts, 1, LR_CALL_RETRY, rs, &err),
	         &err);
	CHECK(!rs[0].succeeded);
	CHECK_INT(rs[0].revision, ==, rev);
	lr_txn_result_free(&rs[0]);
	for (int i = 0; i < 2; i++)
		lr_txn_free(ts[i]);
	lr_etcd_close(c);
}

static int setup(void) { return cluster_up(1, NULL); }

TEST_LIST(
	TEST_CASE(put_then_range_returns_value_and_revisions),
	TEST_CASE(put_with_prev_kv_returns_the_old_value),
	TEST_CASE(range_prefix_limit_keys_only_count_only_sort_and_revision),
	TEST_CASE(delete_prefix_removes_every_key_under_it),
	TEST_CASE(txn_version_zero_creates_once_and_the_second_sees_the_winner),
	TEST_CASE(txn_zero_valued_oneof_compare_is_on_the_wire),
	TEST_CASE(txn_compares_on_create_revision_mod_revision_and_value),
	TEST_CASE(txn_compare_on_lease_tells_which_lease_holds_the_key),
	TEST_CASE(txn_prefix_compare_version_zero_means_no_key_under_it),
	TEST_CASE(nested_txns_decide_each_by_its_own_compares_in_one_revision),
	TEST_CASE(nested_txns_may_not_write_one_key_twice),
	TEST_CASE(nested_compares_see_the_store_before_the_request_and_reads_see_earlier_writes),
	TEST_CASE(nested_txns_writing_one_key_refused_or_not_by_kind_and_order),
	TEST_CASE(nested_txns_share_the_op_limit_with_their_parents),
	TEST_CASE(txns_sent_together_each_get_their_own_result_and_the_one_revision),
	TEST_CASE(txn_with_ranges_puts_and_deletes_in_one_revision),
	TEST_CASE(value_over_the_request_limit_is_a_clear_error),
);
TEST_MAIN(setup, cluster_down)
