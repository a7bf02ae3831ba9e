/* test_bad_input.c - the client's answers to bad endpoints: clear errors,
 * within the dial timeout, never a hang or a crash. */
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "common.h"
#include "test.h"

static lr_err err;

static int open_with(const char *endpoints, double dial_s, lr_etcd **c)
{
	lr_etcd_opts o = { .endpoints = endpoints, .dial_timeout_s = dial_s };
	return lr_etcd_open(&o, c, &err);
}

TEST(empty_endpoint_list_is_invalid)
{
	lr_etcd *c = NULL;
	CHECK_INT(open_with("", 1, &c), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "empty");
	CHECK_INT(open_with(" , ,", 1, &c), ==, LR_EINVAL);
	CHECK(c == NULL);
}

TEST(malformed_endpoints_are_named)
{
	const char *bad[] = { "localhost", "127.0.0.1:", ":2379", "127.0.0.1:abc",
	                      "127.0.0.1:70000", "127.0.0.1:0" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		lr_etcd *c = NULL;
		int rc = open_with(bad[i], 1, &c);
		if (rc != LR_EINVAL)
			TEST_FAIL("%s: rc %d (%s)", bad[i], rc, err.msg);
		CHECK_HAS(err.msg, bad[i]);
	}
}

TEST(unresolvable_host_is_named)
{
	lr_etcd *c = NULL;
	CHECK_INT(open_with("no-such-host.invalid:2379", 1, &c), ==, LR_EUNAVAILABLE);
	CHECK_HAS(err.msg, "no-such-host.invalid");
}

/* A loopback port nobody listens on. */
static int closed_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	bind(fd, (struct sockaddr *)&a, sizeof(a));
	socklen_t len = sizeof(a);
	getsockname(fd, (struct sockaddr *)&a, &len);
	close(fd);
	return ntohs(a.sin_port);
}

TEST(unreachable_endpoint_fails_within_the_dial_timeout)
{
	char ep[64];
	snprintf(ep, sizeof(ep), "127.0.0.1:%d", closed_port());
	lr_etcd *c = NULL;
	int64_t t0 = lr_mono_ms();
	int rc = open_with(ep, 1.0, &c);
	int64_t took = lr_mono_ms() - t0;
	CHECK_INT(rc, ==, LR_EUNAVAILABLE);
	CHECK_HAS(err.msg, ep);
	CHECK_INT(took, <=, 1500);
	printf("# unreachable reported in %lld ms: %s\n", (long long)took, err.msg);
}

TEST(calls_on_a_cluster_that_went_away_fail_within_the_call_timeout)
{
	etcdh_cluster *one;
	etcdh_opts o = { .members = 1 };
	CHECK_INT(etcdh_start(&o, &one), ==, 0);
	lr_etcd_opts co = { .endpoints = etcdh_endpoint(one, 0), .dial_timeout_s = 2, .call_timeout_s = 1 };
	lr_etcd *c;
	CHECK_OK(lr_etcd_open(&co, &c, &err), &err);
	etcdh_destroy(one);
	lr_range_result r;
	int64_t t0 = lr_mono_ms();
	int rc = lr_kv_get(c, "/x", &r, &err);
	int64_t took = lr_mono_ms() - t0;
	CHECK(rc == LR_EUNAVAILABLE || rc == LR_ETIMEDOUT);
	CHECK_INT(took, <=, 1500);
	rc = lr_kv_put(c, "/x", "v", 1, 0, NULL, NULL, &err);
	CHECK(rc == LR_EAMBIGUOUS || rc == LR_EUNAVAILABLE);
	CHECK_HAS(err.msg, "/x");
	lr_etcd_close(c);
}

TEST_LIST(
	TEST_CASE(empty_endpoint_list_is_invalid),
	TEST_CASE(malformed_endpoints_are_named),
	TEST_CASE(unresolvable_host_is_named),
	TEST_CASE(unreachable_endpoint_fails_within_the_dial_timeout),
	TEST_CASE(calls_on_a_cluster_that_went_away_fail_within_the_call_timeout),
);
TEST_MAIN(NULL, NULL)
