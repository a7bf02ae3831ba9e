/* test_http.c - the HTTP server on its own (no etcd): listen addresses,
 * replies and their headers, streams, and clients that send garbage, huge
 * headers or nothing at all. */
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "http/server.h"
#include "httpc.h"
#include "test.h"

static lr_err err;

/* ---- addresses ----------------------------------------------------------- */

static int port_of(const struct sockaddr_storage *sa)
{
	if (sa->ss_family == AF_INET6)
		return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
	return ntohs(((const struct sockaddr_in *)sa)->sin_port);
}

TEST(a_listen_address_without_host_means_loopback)
{
	struct sockaddr_storage sa;
	socklen_t len;
	CHECK_OK(lr_http_parse_address(":9464", &sa, &len, &err), &err);
	CHECK_INT(sa.ss_family, ==, AF_INET);
	CHECK_INT(port_of(&sa), ==, 9464);
	CHECK(((struct sockaddr_in *)&sa)->sin_addr.s_addr == htonl(INADDR_LOOPBACK));
	CHECK_OK(lr_http_parse_address("[::1]:80", &sa, &len, &err), &err);
	CHECK_INT(sa.ss_family, ==, AF_INET6);
	CHECK_INT(port_of(&sa), ==, 80);
	CHECK_OK(lr_http_parse_address("0.0.0.0:0", &sa, &len, &err), &err);
	CHECK_INT(port_of(&sa), ==, 0);
}

TEST(a_malformed_listen_address_says_what_is_wrong)
{
	struct sockaddr_storage sa;
	socklen_t len;
	CHECK_INT(lr_http_parse_address("9464", &sa, &len, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, ":PORT");
	CHECK_INT(lr_http_parse_address(":65536", &sa, &len, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "0 to 65535");
	CHECK_INT(lr_http_parse_address("127.0.0.1:", &sa, &len, &err), ==, LR_EINVAL);
	CHECK_INT(lr_http_parse_address(":-1", &sa, &len, &err), ==, LR_EINVAL);
	CHECK_INT(lr_http_parse_address("::1:80", &sa, &len, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "brackets");
	CHECK_INT(lr_http_parse_address("[::1:80", &sa, &len, &err), ==, LR_EINVAL);
	CHECK_INT(lr_http_parse_address("no.such.host.invalid:80", &sa, &len, &err), ==,
	          LR_EINVAL);
	CHECK_INT(lr_http_parse_address("", &sa, &len, &err), ==, LR_EINVAL);
}

/* ---- a server ------------------------------------------------------------- */

/* What the test handler does with a request. */
struct fixture {
	pthread_mutex_t mu;
	lr_http_stream *stream;   /* the last stream opened */
	int requests;
};

static struct fixture fx = { .mu = PTHREAD_MUTEX_INITIALIZER };

static void handle(void *user, lr_http_req *req)
{
	(void)user;
	pthread_mutex_lock(&fx.mu);
	fx.requests++;
	pthread_mutex_unlock(&fx.mu);
	if (strcmp(lr_http_path(req), "/stream") == 0) {
		lr_http_stream *s = lr_http_reply_stream(req, "text/plain", NULL);
		pthread_mutex_lock(&fx.mu);
		fx.stream = s;
		pthread_mutex_unlock(&fx.mu);
		return;
	}
	if (strcmp(lr_http_path(req), "/") != 0) {
		lr_http_reply_text(req, 404, "not found\n");
		return;
	}
	lr_http_header_kv h[] = { { "X-Test", "yes" }, { NULL, NULL } };
	lr_http_reply(req, 200, "text/plain", "hello\n", 6, LR_HTTP_STATIC, h);
}

static lr_http *start(int flags, unsigned max_conn, unsigned idle_s)
{
	lr_http *h = NULL;
	lr_http_opts o = { .listen = "127.0.0.1:0", .what = "test", .flags = flags,
		           .max_connections = max_conn, .idle_timeout_s = idle_s,
		           .handler = handle };
	CHECK_OK(lr_http_start(&o, &h, &err), &err);
	fx.stream = NULL;
	return h;
}

static void check_serves(lr_http *h)
{
	http_resp r = http_get(lr_http_address(h), "/", NULL, 5000);
	CHECK_INT(r.status, ==, 200);
	CHECK_STR(r.body, "hello\n");
	http_resp_free(&r);
}

TEST(a_server_on_port_zero_answers_with_safe_headers)
{
	lr_http *h = start(0, 0, 0);
	const char *addr = lr_http_address(h);
	CHECK(strncmp(addr, "127.0.0.1:", 10) == 0);
	CHECK(atoi(addr + 10) > 0);
	http_resp r = http_get(addr, "/", NULL, 5000);
	char v[64];
	CHECK_INT(r.status, ==, 200);
	CHECK_STR(r.body, "hello\n");
	CHECK(http_header(&r, "X-Content-Type-Options", v, sizeof(v)));
	CHECK_STR(v, "nosniff");
	CHECK(http_header(&r, "X-Test", v, sizeof(v)));
	http_resp_free(&r);
	r = http_get(addr, "/nothing", NULL, 5000);
	CHECK_INT(r.status, ==, 404);
	http_resp_free(&r);
	lr_http_stop(h);
}

TEST(an_address_in_use_is_an_error_naming_it)
{
	lr_http *h = start(0, 0, 0);
	lr_http *h2 = NULL;
	lr_http_opts o = { .listen = lr_http_address(h), .what = "test",
		           .handler = handle };
	CHECK_INT(lr_http_start(&o, &h2, &err), ==, LR_ESYS);
	CHECK_HAS(err.msg, lr_http_address(h));
	CHECK(h2 == NULL);
	lr_http_stop(h);
}

TEST(huge_headers_are_refused_and_the_server_goes_on)
{
	lr_http *h = start(0, 0, 0);
	size_t big = 256 * 1024;
	char *req = malloc(big + 128);
	int n = sprintf(req, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: ");
	memset(req + n, 'a', big);
	memcpy(req + n + big, "\r\n\r\n", 4);
	http_resp r = http_raw(lr_http_address(h), req, (size_t)n + big + 4, 5000);
	printf("# a %zu KiB header: status %d\n", big / 1024, r.status);
	CHECK(r.status != 200);
	http_resp_free(&r);
	free(req);
	check_serves(h);
	lr_http_stop(h);
}

TEST(garbage_is_refused_and_the_server_goes_on)
{
	static const char *const junk[] = {
		"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03 TLS hello\r\n\r\n",
		"GET\r\n\r\n",
		"GET / HTTP/9.9\r\n\r\n",
		"BREW /pot HTTP/1.1\r\nHost: x\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
		"GET / HTTP/1.1\r\nHost x\r\nno colon here\r\n\r\n",
		"GET /%zz%00 HTTP/1.0\r\n\r\n",
		"\r\n\r\n\r\n",
	};
	lr_http *h = start(0, 0, 0);
	for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++) {
		http_resp r = http_raw(lr_http_address(h), junk[i], strlen(junk[i]), 3000);
		printf("# junk %zu: status %d\n", i, r.status);
		http_resp_free(&r);
	}
	char noise[4096];
	for (size_t i = 0; i < sizeof(noise); i++)
		noise[i] = (char)(i * 7919 % 251);
	http_resp r = http_raw(lr_http_address(h), noise, sizeof(noise), 3000);
	CHECK(r.status != 200);
	http_resp_free(&r);
	check_serves(h);
	lr_http_stop(h);
}

TEST(silent_connections_are_cut_off_after_the_idle_timeout)
{
	enum { LIMIT = 8 };
	lr_http *h = start(0, LIMIT, 1);
	int fds[LIMIT * 2];
	for (int i = 0; i < LIMIT * 2; i++) {
		fds[i] = http_connect(lr_http_address(h));
		CHECK(fds[i] >= 0);
		/* Half a request line, then nothing. */
		CHECK(send(fds[i], "GET / HT", 8, MSG_NOSIGNAL) == 8);
	}
	int64_t t0 = lr_mono_ms();
	http_resp r = { .status = -1 };
	while (r.status != 200 && lr_mono_ms() - t0 < 5000) {
		http_resp_free(&r);
		r = http_get(lr_http_address(h), "/", NULL, 1000);
	}
	printf("# served again %lld ms after %d silent connections\n",
	       (long long)(lr_mono_ms() - t0), LIMIT * 2);
	CHECK_INT(r.status, ==, 200);
	http_resp_free(&r);
	for (int i = 0; i < LIMIT * 2; i++)
		close(fds[i]);
	lr_http_stop(h);
}

static lr_http_stream *wait_stream(void)
{
	int64_t t0 = lr_mono_ms();
	for (;;) {
		pthread_mutex_lock(&fx.mu);
		lr_http_stream *s = fx.stream;
		pthread_mutex_unlock(&fx.mu);
		if (s != NULL)
			return s;
		if (lr_mono_ms() - t0 > 5000)
			TEST_FAIL("no stream was opened");
		lr_sleep_ms(10);
	}
}

/* Reads the stream's reply on its own thread. */
struct reader {
	pthread_t t;
	char addr[64];
	http_resp r;
};

static void *read_stream(void *arg)
{
	struct reader *rd = arg;
	rd->r = http_get(rd->addr, "/stream", NULL, 10000);
	return NULL;
}

TEST(a_stream_carries_what_is_written_until_it_is_closed)
{
	lr_http *h = start(LR_HTTP_STREAMS, 0, 0);
	struct reader rd;
	snprintf(rd.addr, sizeof(rd.addr), "%s", lr_http_address(h));
	CHECK(pthread_create(&rd.t, NULL, read_stream, &rd) == 0);
	lr_http_stream *s = wait_stream();
	CHECK(lr_http_stream_write(s, "one ", 4, 1024));
	lr_sleep_ms(50);
	CHECK(lr_http_stream_write(s, "two", 3, 1024));
	CHECK(!lr_http_stream_write(s, "x", 2000, 1024)); /* over the limit */
	lr_http_stream_close(s);
	pthread_join(rd.t, NULL);
	CHECK_INT(rd.r.status, ==, 200);
	CHECK_STR(rd.r.body, "one two");
	http_resp_free(&rd.r);
	lr_http_stop(h);
}

TEST(a_stream_notices_that_its_client_went_away)
{
	lr_http *h = start(LR_HTTP_STREAMS, 0, 0);
	int fd = http_connect(lr_http_address(h));
	CHECK(fd >= 0);
	const char *req = "GET /stream HTTP/1.0\r\n\r\n";
	CHECK(send(fd, req, strlen(req), MSG_NOSIGNAL) == (ssize_t)strlen(req));
	lr_http_stream *s = wait_stream();
	close(fd);
	int64_t t0 = lr_mono_ms();
	while (!lr_http_stream_gone(s) && lr_mono_ms() - t0 < 5000)
		lr_sleep_ms(20);
	printf("# gone noticed after %lld ms\n", (long long)(lr_mono_ms() - t0));
	CHECK(lr_http_stream_gone(s));
	CHECK(!lr_http_stream_write(s, "late", 4, 1024));
	lr_http_stream_close(s);
	lr_http_stop(h);
}

TEST(stopping_the_server_ends_open_streams)
{
	lr_http *h = start(LR_HTTP_STREAMS, 0, 0);
	struct reader rd;
	snprintf(rd.addr, sizeof(rd.addr), "%s", lr_http_address(h));
	CHECK(pthread_create(&rd.t, NULL, read_stream, &rd) == 0);
	lr_http_stream *s = wait_stream();
	CHECK(lr_http_stream_write(s, "hi", 2, 1024));
	int64_t t0 = lr_mono_ms();
	lr_http_stop(h);
	CHECK_INT(lr_mono_ms() - t0, <, 3000);
	CHECK(!lr_http_stream_write(s, "late", 4, 1024));
	lr_http_stream_close(s);
	pthread_join(rd.t, NULL);
	CHECK_STR(rd.r.body, "hi");
	http_resp_free(&rd.r);
}

TEST_LIST(TEST_CASE(a_listen_address_without_host_means_loopback),
          TEST_CASE(a_malformed_listen_address_says_what_is_wrong),
          TEST_CASE(a_server_on_port_zero_answers_with_safe_headers),
          TEST_CASE(an_address_in_use_is_an_error_naming_it),
          TEST_CASE(huge_headers_are_refused_and_the_server_goes_on),
          TEST_CASE(garbage_is_refused_and_the_server_goes_on),
          TEST_CASE(silent_connections_are_cut_off_after_the_idle_timeout),
          TEST_CASE(a_stream_carries_what_is_written_until_it_is_closed),
          TEST_CASE(a_stream_notices_that_its_client_went_away),
          TEST_CASE(stopping_the_server_ends_open_streams));

TEST_MAIN(NULL, NULL)
