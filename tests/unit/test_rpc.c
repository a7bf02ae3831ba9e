/* test_rpc.c - gRPC statuses as the library's codes: which failures are
 * retried, which may have applied, and which are about size. etcd's own
 * texts for each case. The etcd versions known to revoke live leases.
 * Replies read into an arena, and the arena itself. No etcd. */
#include <stdbool.h>
#include <stdint.h>

#include "rpc.pb-c.h"

#include "base/arena.h"
#include "etcd/member.h"
#include "etcd/rpc.h"
#include "etcd/transport.h"
#include "leaserun.h"
#include "test.h"

TEST(a_lost_reply_is_ambiguous_only_for_a_write)
{
	CHECK_INT(lr__status_code(GRPC_STATUS_UNAVAILABLE, "connection reset", true), ==,
	          LR_EAMBIGUOUS);
	CHECK_INT(lr__status_code(GRPC_STATUS_UNAVAILABLE, "connection reset", false), ==,
	          LR_EUNAVAILABLE);
	CHECK_INT(lr__status_code(GRPC_STATUS_DEADLINE_EXCEEDED, "", true), ==, LR_EAMBIGUOUS);
	/* Refused before etcd looked at it: not applied. */
	CHECK_INT(lr__status_code(GRPC_STATUS_UNAVAILABLE, "etcdserver: no leader", true), ==,
	          LR_EUNAVAILABLE);
	CHECK_INT(lr__status_code(GRPC_STATUS_DEADLINE_EXCEEDED, "", false), ==, LR_ETIMEDOUT);
	/* The stream dropped under the call (gRPC says UNKNOWN): a write may
	 * have applied, a read is worth another try. */
	CHECK_INT(lr__status_code(GRPC_STATUS_UNKNOWN, "Stream removed", true), ==,
	          LR_EAMBIGUOUS);
	CHECK_INT(lr__status_code(GRPC_STATUS_UNKNOWN, "Stream removed", false), ==,
	          LR_EUNAVAILABLE);
	CHECK(lr__stream_lost(GRPC_STATUS_UNKNOWN, "Stream removed"));
	CHECK(!lr__stream_lost(GRPC_STATUS_INTERNAL, "Stream removed"));
	/* Any other UNKNOWN is etcd's own answer. */
	CHECK_INT(lr__status_code(GRPC_STATUS_UNKNOWN, "etcdserver: unknown method", true), ==,
	          LR_EETCD);
}

/* A listing in pages at one revision that etcd compacted meanwhile: read
 * again, from the current revision (a runner starting up retries). */
TEST(a_read_at_a_compacted_revision_is_worth_another_try)
{
	CHECK_INT(lr__status_code(GRPC_STATUS_OUT_OF_RANGE,
	                          "etcdserver: mvcc: required revision has been compacted",
	                          false), ==, LR_EUNAVAILABLE);
	CHECK_INT(lr__status_code(GRPC_STATUS_OUT_OF_RANGE,
	                          "etcdserver: mvcc: required revision is a future revision",
	                          false), ==, LR_EETCD);
}

TEST(only_a_size_limit_reads_as_too_large)
{
	/* etcd's --max-request-bytes, and gRPC's message limits. */
	CHECK_INT(lr__status_code(GRPC_STATUS_INVALID_ARGUMENT,
	                          "etcdserver: request is too large", true), ==, LR_ETOOLARGE);
	CHECK_INT(lr__status_code(GRPC_STATUS_RESOURCE_EXHAUSTED,
	                          "Received message larger than max (3145800 vs. 2621440)",
	                          true), ==, LR_ETOOLARGE);
	CHECK_INT(lr__status_code(GRPC_STATUS_RESOURCE_EXHAUSTED,
	                          "Sent message larger than max (5000000 vs. 4194304)", false),
	          ==, LR_ETOOLARGE);
	/* etcd refuses a proposal while its apply lags: nothing was written,
	 * and the same request goes through later. */
	CHECK_INT(lr__status_code(GRPC_STATUS_RESOURCE_EXHAUSTED,
	                          "etcdserver: too many requests", true), ==, LR_EUNAVAILABLE);
	/* A full space quota needs its operator, whatever the request's size. */
	CHECK_INT(lr__status_code(GRPC_STATUS_RESOURCE_EXHAUSTED,
	                          "etcdserver: mvcc: database space exceeded", true), ==,
	          LR_EETCD);
}

TEST(refusals_name_their_cause)
{
	CHECK_INT(lr__status_code(GRPC_STATUS_PERMISSION_DENIED, "", true), ==, LR_EPERM);
	CHECK_INT(lr__status_code(GRPC_STATUS_FAILED_PRECONDITION,
	                          "etcdserver: permission denied", false), ==, LR_EPERM);
	CHECK_INT(lr__status_code(GRPC_STATUS_INVALID_ARGUMENT,
	                          "etcdserver: authentication failed, invalid user ID or "
	                          "password", false), ==, LR_EAUTH);
	CHECK_INT(lr__status_code(GRPC_STATUS_NOT_FOUND,
	                          "etcdserver: requested lease not found", true), ==, LR_ELEASE);
	CHECK_INT(lr__status_code(GRPC_STATUS_OK, "", true), ==, LR_OK);
}

TEST(etcd_versions_before_the_fix_of_stale_leader_revokes_are_named)
{
	static const char *const affected[] = { "3.4.0", "3.4.23", "3.4.30", "3.5.0",
		                                "3.5.12", "3.3.25", "3.4.9-rc.1" };
	static const char *const fixed[] = { "3.4.31", "3.4.35", "3.5.13", "3.5.21", "3.6.0",
		                             "3.10.1", "4.0.0" };
	static const char *const unreadable[] = { "", "3", "3.4", "3.4.", "v3.4.23", "x.y.z",
		                                  "3..4", NULL };
	for (size_t i = 0; i < sizeof(affected) / sizeof(affected[0]); i++)
		if (!lr_etcd_version_revokes_live_leases(affected[i]))
			TEST_FAIL("%s not named", affected[i]);
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		if (lr_etcd_version_revokes_live_leases(fixed[i]))
			TEST_FAIL("%s named", fixed[i]);
	for (size_t i = 0; i < sizeof(unreadable) / sizeof(unreadable[0]); i++)
		CHECK(!lr_etcd_version_revokes_live_leases(unreadable[i]));
}

TEST(an_arena_aligns_zeroes_and_gives_big_pieces_their_own_chunk)
{
	lr_arena a;
	lr_arena_init(&a, 256);
	for (int round = 0; round < 2; round++) { /* used again after a clear */
		unsigned char *small[40];
		for (size_t i = 0; i < 40; i++) {
			small[i] = lr_arena_alloc(&a, i + 1, 1);
			CHECK(small[i] != NULL);
			CHECK_INT((uintptr_t)small[i] % _Alignof(max_align_t), ==, 0);
			for (size_t j = 0; j <= i; j++)
				CHECK_INT(small[i][j], ==, 0);
			memset(small[i], (int)i + 1, i + 1);
		}
		unsigned char *big = lr_arena_alloc(&a, 4000, 0);
		CHECK(big != NULL);
		memset(big, 0xab, 4000);
		CHECK(lr_arena_alloc(&a, 8, 1) != NULL);
		/* Nothing overlaps: every piece still holds what was put in it. */
		for (size_t i = 0; i < 40; i++)
			for (size_t j = 0; j <= i; j++)
				CHECK_INT(small[i][j], ==, (int)i + 1);
		CHECK_INT(big[0], ==, 0xab);
		CHECK_INT(big[3999], ==, 0xab);
		CHECK(lr_arena_alloc(&a, SIZE_MAX - 4, 0) == NULL);
		CHECK(lr_arena_alloc(&a, SIZE_MAX - 20, 0) == NULL); /* its chunk's size */
		lr_arena_clear(&a);
		CHECK(a.chunks == NULL);
	}
}

/* A txn reply of many results, one of them with a value bigger than the
 * arena's chunks, read back whole; cut short, it is refused. Nothing leaks
 * either way (the sanitizer run checks). */
TEST(a_reply_read_into_an_arena_is_whole_and_freed_at_once)
{
	enum { N = 200 };
	static Mvccpb__KeyValue kvs[N];
	static Mvccpb__KeyValue *kvp[N];
	static Etcdserverpb__RangeResponse ranges[N];
	static Etcdserverpb__ResponseOp ops[N];
	static Etcdserverpb__ResponseOp *opp[N];
	static char keys[N][32];
	static uint8_t big[100000];
	memset(big, 'v', sizeof(big));
	for (int i = 0; i < N; i++) {
		mvccpb__key_value__init(&kvs[i]);
		snprintf(keys[i], sizeof(keys[i]), "/leaserun/claims/t%d", i);
		kvs[i].key = (ProtobufCBinaryData){ strlen(keys[i]), (uint8_t *)keys[i] };
		kvs[i].value = i == 7 ? (ProtobufCBinaryData){ sizeof(big), big }
		                      : (ProtobufCBinaryData){ 2, (uint8_t *)"{}" };
		kvs[i].mod_revision = 1000 + i;
		kvp[i] = &kvs[i];
		etcdserverpb__range_response__init(&ranges[i]);
		ranges[i].n_kvs = 1;
		ranges[i].kvs = &kvp[i];
		ranges[i].count = 1;
		etcdserverpb__response_op__init(&ops[i]);
		ops[i].response_case = ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE;
		ops[i].response_range = &ranges[i];
		opp[i] = &ops[i];
	}
	Etcdserverpb__ResponseHeader hdr = ETCDSERVERPB__RESPONSE_HEADER__INIT;
	hdr.revision = 4242;
	Etcdserverpb__TxnResponse t = ETCDSERVERPB__TXN_RESPONSE__INIT;
	t.header = &hdr;
	t.succeeded = true;
	t.n_responses = N;
	t.responses = opp;
	size_t len = protobuf_c_message_get_packed_size(&t.base);
	uint8_t *wire = malloc(len);
	CHECK(wire != NULL);
	protobuf_c_message_pack(&t.base, wire);

	ProtobufCMessage *m = lr__unpack(&etcdserverpb__txn_response__descriptor, len, wire);
	CHECK(m != NULL);
	const Etcdserverpb__TxnResponse *back = (const Etcdserverpb__TxnResponse *)m;
	CHECK(back->succeeded);
	CHECK_INT(back->header->revision, ==, 4242);
	CHECK_INT(back->n_responses, ==, N);
	for (int i = 0; i < N; i++) {
		const Mvccpb__KeyValue *kv = back->responses[i]->response_range->kvs[0];
		CHECK_INT(kv->key.len, ==, strlen(keys[i]));
		CHECK(memcmp(kv->key.data, keys[i], kv->key.len) == 0);
		CHECK_INT(kv->mod_revision, ==, 1000 + i);
		CHECK_INT(kv->value.len, ==, i == 7 ? sizeof(big) : 2);
	}
	CHECK(memcmp(back->responses[7]->response_range->kvs[0]->value.data, big,
	             sizeof(big)) == 0);
	lr_etcd_reply_free(m);
	lr_etcd_reply_free(NULL);

	CHECK(lr__unpack(&etcdserverpb__txn_response__descriptor, len - 3, wire) == NULL);
	free(wire);
}

TEST_LIST(
	TEST_CASE(etcd_versions_before_the_fix_of_stale_leader_revokes_are_named),
	TEST_CASE(a_lost_reply_is_ambiguous_only_for_a_write),
	TEST_CASE(a_read_at_a_compacted_revision_is_worth_another_try),
	TEST_CASE(only_a_size_limit_reads_as_too_large),
	TEST_CASE(refusals_name_their_cause),
	TEST_CASE(an_arena_aligns_zeroes_and_gives_big_pieces_their_own_chunk),
	TEST_CASE(a_reply_read_into_an_arena_is_whole_and_freed_at_once),
);

TEST_MAIN(NULL, NULL)
