/* test_bad_input.c - the client's answers to bad endpoints: clear errors,
 * within the dial timeout, never a hang or a crash. */
#include <netinet/in.h>
#include <pthread.h>
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

/* A CA certificate in a file of its own, for the TLS cases below: any will
 * do, as no handshake gets as far as checking it. */
static const char some_ca_pem[] =
    "-----BEGIN CERTIFICATE-----\n"
    "MIIBmjCCAT+gAwIBAgIUM0P6M+FcXGxHLnMYinjv/WKfFCQwCgYIKoZIzj0EAwIw\n"
    "IjEgMB4GA1UEAwwXbGVhc2VydW4tdW51c2VkLXRlc3QtY2EwHhcNMjYxMTI1MDYw\n"
    "MDExWhcNMzYxMTIyMDYwMDExWjAiMSAwHgYDVQQDDBdsZWFzZXJ1bi11bnVzZWQt\n"
    "dGVzdC1jYTBZMBMGByqGSM49AgEGCCqGSM49AwEHA0IABOiLJ1y1EvXh8R7mFVGd\n"
    "8AarQa3wkwpGuq+pdNMWmaThP2o5YDyxNdm4cP7dyd4wSMCFgS/8Cu1Bruecqbh1\n"
    "yPKjUzBRMB0GA1UdDgQWBBRCQgXU0i4mMlhQ0JHWpSTYMvIkkzAfBgNVHSMEGDAW\n"
    "gBRCQgXU0i4mMlhQ0JHWpSTYMvIkkzAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49\n"
    "BAMCA0kAMEYCIQCrlv9FFbAHdItRXiVtPlfrdKjWepwgkwd+WmwUsRnGAAIhAK5U\n"
    "lMzH5NFYmw62CGwa4Too3yUdam55uJbJmKbOOhXt\n"
    "-----END CERTIFICATE-----\n";
static char some_ca[64];

static int write_some_ca(void)
{
	snprintf(some_ca, sizeof(some_ca), "/tmp/leaserun-ca-XXXXXX");
	int fd = mkstemp(some_ca);
	if (fd < 0)
		return -1;
	ssize_t n = write(fd, some_ca_pem, sizeof(some_ca_pem) - 1);
	close(fd);
	return n == (ssize_t)(sizeof(some_ca_pem) - 1) ? 0 : -1;
}

static void remove_some_ca(void)
{
	if (some_ca[0] != '\0')
		unlink(some_ca);
}
#define SOME_CA some_ca

/* Accepts connections on [::1] and closes them at once. */
static void *close_each(void *arg)
{
	int fd;
	while ((fd = accept(*(int *)arg, NULL, NULL)) >= 0)
		close(fd);
	return NULL;
}

/* An IPv6 member's address reads in messages as it is written, [::1]:port,
 * not as gRPC's URI text (%5B::1%5D:port). */
TEST(an_ipv6_member_is_named_as_written)
{
	int fd = socket(AF_INET6, SOCK_STREAM, 0);
	struct sockaddr_in6 a = { .sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT };
	socklen_t len = sizeof(a);
	if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		printf("# no IPv6 loopback here: skipped\n");
		if (fd >= 0)
			close(fd);
		return;
	}
	CHECK_INT(listen(fd, 16), ==, 0);
	getsockname(fd, (struct sockaddr *)&a, &len);
	pthread_t t;
	CHECK_INT(pthread_create(&t, NULL, close_each, &fd), ==, 0);
	char ep[64], eps[128];
	snprintf(ep, sizeof(ep), "[::1]:%d", ntohs(a.sin6_port));
	snprintf(eps, sizeof(eps), "https://%s", ep);
	lr_etcd_opts o = { .endpoints = eps, .dial_timeout_s = 3, .cacert = SOME_CA };
	lr_etcd *c = NULL;
	int rc = lr_etcd_open(&o, &c, &err);
	shutdown(fd, SHUT_RDWR);
	pthread_join(t, NULL);
	close(fd);
	printf("# %s\n", err.msg);
	CHECK_INT(rc, ==, LR_ETLS);
	CHECK_HAS(err.msg, ep);
}

/* A TLS failure on one member is reported as one, whichever place the
 * member has in the list: a member down before it does not hide it. A TLS
 * client on a plain etcd sees its connections closed in the handshake (a
 * likely TLS failure). */
TEST(a_tls_failure_behind_a_member_down_is_still_reported)
{
	etcdh_cluster *plain;
	etcdh_opts eo = { .members = 1 };
	CHECK_INT(etcdh_start(&eo, &plain), ==, 0);
	char ep[64], eps[160];
	snprintf(ep, sizeof(ep), "%s", etcdh_endpoint(plain, 0));
	snprintf(eps, sizeof(eps), "https://127.0.0.1:%d,https://%s", closed_port(), ep);
	lr_etcd_opts o = { .endpoints = eps, .dial_timeout_s = 3, .cacert = SOME_CA };
	lr_etcd *c = NULL;
	int rc = lr_etcd_open(&o, &c, &err);
	etcdh_destroy(plain);
	printf("# %s\n", err.msg);
	CHECK_INT(rc, ==, LR_ETLS);
	CHECK_HAS(err.msg, ep);
	CHECK_HAS(err.msg, "does not serve TLS on this port");
}

/* A member that takes connections and never answers (a listening socket
 * nobody reads: its TLS handshake hangs) stays CONNECTING for the whole
 * dial: the other member's TLS failure is still the reason given. */
TEST(a_tls_failure_beside_a_member_that_never_answers_is_still_reported)
{
	int stuck = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	CHECK_INT(bind(stuck, (struct sockaddr *)&a, sizeof(a)), ==, 0);
	CHECK_INT(listen(stuck, 16), ==, 0);
	getsockname(stuck, (struct sockaddr *)&a, &len);
	etcdh_cluster *plain;
	etcdh_opts eo = { .members = 1 };
	CHECK_INT(etcdh_start(&eo, &plain), ==, 0);
	char ep[64], eps[160];
	snprintf(ep, sizeof(ep), "%s", etcdh_endpoint(plain, 0));
	snprintf(eps, sizeof(eps), "https://127.0.0.1:%d,https://%s", ntohs(a.sin_port), ep);
	lr_etcd_opts o = { .endpoints = eps, .dial_timeout_s = 2, .cacert = SOME_CA };
	lr_etcd *c = NULL;
	int rc = lr_etcd_open(&o, &c, &err);
	etcdh_destroy(plain);
	close(stuck);
	printf("# %s\n", err.msg);
	CHECK_INT(rc, ==, LR_ETLS);
	CHECK_HAS(err.msg, ep);
	CHECK_HAS(err.msg, "does not serve TLS on this port");
}

TEST_LIST(
	TEST_CASE(empty_endpoint_list_is_invalid),
	TEST_CASE(malformed_endpoints_are_named),
	TEST_CASE(unresolvable_host_is_named),
	TEST_CASE(unreachable_endpoint_fails_within_the_dial_timeout),
	TEST_CASE(calls_on_a_cluster_that_went_away_fail_within_the_call_timeout),
	TEST_CASE(a_tls_failure_behind_a_member_down_is_still_reported),
	TEST_CASE(an_ipv6_member_is_named_as_written),
	TEST_CASE(a_tls_failure_beside_a_member_that_never_answers_is_still_reported),
);
TEST_MAIN(write_some_ca, remove_some_ca)
