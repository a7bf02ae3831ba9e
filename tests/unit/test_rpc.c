/* test_rpc.c - gRPC statuses as the library's codes: which failures are
 * retried, which may have applied, and which are about size. etcd's own
 * texts for each case. And the etcd versions known to revoke live leases.
 * No etcd. */
#include <stdbool.h>

#include "etcd/member.h"
#include "etcd/rpc.h"
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

TEST_LIST(
	TEST_CASE(etcd_versions_before_the_fix_of_stale_leader_revokes_are_named),
	TEST_CASE(a_lost_reply_is_ambiguous_only_for_a_write),
	TEST_CASE(a_read_at_a_compacted_revision_is_worth_another_try),
	TEST_CASE(only_a_size_limit_reads_as_too_large),
	TEST_CASE(refusals_name_their_cause),
);

TEST_MAIN(NULL, NULL)
