/* test_web_api.c - what `leaserun web` answers besides the page: the event
 * stream and a task's detail never carry env values; cancel only when
 * allowed, and only from the page itself; unknown paths and methods. */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "fleet.h"
#include "httpc.h"
#include "servers.h"
#include "test.h"
#include "web/web_int.h"


#define SECRET_SPEC "{\"id\":\"%s\",\"env\":{\"API_TOKEN\":\"hunter2-value\"}," \
                    "\"steps\":[{\"name\":\"a\",\"run\":\"sleep 30\"}]}"

static int status_of(const char *addr, const char *method, const char *path,
                     const char *extra, char **body)
{
	http_resp r = http_method(addr, method, path, extra, 5000);
	int st = r.status;
	if (body != NULL) {
		*body = r.body;
		r.body = NULL;
	}
	http_resp_free(&r);
	return st;
}

TEST(neither_the_stream_nor_the_detail_carries_env_values)
{
	fleet f;
	proc_bg web;
	char addr[ADDR_SIZE], *body = NULL;
	fleet_init(&f, etcdh_endpoints(web_etcd), "noenv");
	fleet_submit(&f, "s1", SECRET_SPEC);
	web_start(&web, &f, false, addr);
	CHECK_INT(status_of(addr, "GET", "/api/tasks/s1", NULL, &body), ==, 200);
	CHECK_HAS(body, "\"API_TOKEN\"");
	CHECK(strstr(body, "hunter2") == NULL);
	free(body);
	/* The stream's first event, read until the server is stopped. */
	http_resp r = http_get(addr, "/events", NULL, 1500);
	CHECK_HAS(r.head, "text/event-stream");
	CHECK_HAS(r.body, "event: snapshot\ndata: {");
	CHECK_HAS(r.body, "\"s1\"");
	CHECK(strstr(r.body, "hunter2") == NULL);
	http_resp_free(&r);
	proc_stop(&web, SIGTERM, 5000);
	CHECK_INT(web.status, ==, 0);
	fleet_destroy(&f);
}

/* The checkpoint the claim txn writes says fence 0, "this claim"; the
 * detail says which claim: its create revision, as LEASERUN_FENCE does. */
TEST(the_detail_of_a_claimed_task_gives_the_claims_fence)
{
	fleet f;
	proc_bg web;
	char addr[ADDR_SIZE], key[LR_KEY_SIZE], *body = NULL;
	lr_range_result claim;
	lr_err err = { 0 };
	fleet_init(&f, etcdh_endpoints(web_etcd), "fence");
	fleet_start(&f, 0, NULL);
	fleet_submit(&f, "held", SECRET_SPEC);
	CHECK(fleet_wait_state(&f, "held", LR_TASK_RUNNING, 10000) >= 0);
	web_start(&web, &f, false, addr);
	lr_key(f.client, LR_K_CLAIMS, "held", key);
	CHECK_OK(lr_kv_get(lr_client_etcd(f.client), key, &claim, &err), &err);
	CHECK_INT(claim.n, ==, 1);
	CHECK_INT(status_of(addr, "GET", "/api/tasks/held", NULL, &body), ==, 200);
	json_t *detail = json_loads(body, 0, NULL);
	CHECK(detail != NULL);
	printf("# claims/held created at revision %lld; the detail says fence %lld\n",
	       (long long)claim.kvs[0].create_rev,
	       (long long)json_integer_value(json_object_get(detail, "fence")));
	CHECK(json_is_integer(json_object_get(detail, "fence")));
	CHECK_INT(json_integer_value(json_object_get(detail, "fence")), ==, claim.kvs[0].create_rev);
	json_decref(detail);
	free(body);
	lr_range_result_free(&claim);
	proc_stop(&web, SIGTERM, 5000);
	fleet_destroy(&f);
}

TEST(the_page_is_served_with_a_strict_content_security_policy)
{
	fleet f;
	proc_bg web;
	char addr[ADDR_SIZE], csp[512];
	fleet_init(&f, etcdh_endpoints(web_etcd), "csp");
	web_start(&web, &f, false, addr);
	const char *paths[] = { "/", "/app.js", "/style.css" };
	for (int i = 0; i < 3; i++) {
		http_resp r = http_get(addr, paths[i], NULL, 5000);
		CHECK_INT(r.status, ==, 200);
		CHECK(http_header(&r, "Content-Security-Policy", csp, sizeof(csp)));
		CHECK_HAS(csp, "default-src 'none'");
		CHECK_HAS(csp, "script-src 'self'");
		/* Nothing is fetched from elsewhere. */
		CHECK(strstr(r.body, "http://") == NULL && strstr(r.body, "https://") == NULL);
		http_resp_free(&r);
	}
	CHECK_INT(status_of(addr, "GET", "/nothing", NULL, NULL), ==, 404);
	CHECK_INT(status_of(addr, "GET", "/api/tasks/no-such-task", NULL, NULL), ==, 404);
	CHECK_INT(status_of(addr, "GET", "/api/tasks/bad%20id", NULL, NULL), ==, 404);
	CHECK_INT(status_of(addr, "POST", "/", NULL, NULL), ==, 405);
	CHECK_INT(status_of(addr, "DELETE", "/api/tasks/x", NULL, NULL), ==, 405);
	proc_stop(&web, SIGTERM, 5000);
	fleet_destroy(&f);
}

TEST(cancel_is_refused_by_a_read_only_server)
{
	fleet f;
	proc_bg web;
	char addr[ADDR_SIZE];
	fleet_init(&f, etcdh_endpoints(web_etcd), "readonly");
	fleet_submit(&f, "keep", SECRET_SPEC);
	web_start(&web, &f, false, addr);
	CHECK_INT(status_of(addr, "POST", "/api/tasks/keep/cancel", "X-Leaserun: cancel\r\n", NULL),
	          ==, 403);
	CHECK_INT(fleet_state(&f, "keep", NULL, 0, NULL, NULL), ==, LR_TASK_PENDING);
	proc_stop(&web, SIGTERM, 5000);
	fleet_destroy(&f);
}

TEST(cancel_with_allow_cancel_comes_from_the_page_only)
{
	fleet f;
	proc_bg web;
	char addr[ADDR_SIZE], *body = NULL, origin[128];
	fleet_init(&f, etcdh_endpoints(web_etcd), "cancel");
	fleet_start(&f, 0, NULL);
	fleet_submit(&f, "stop-me", SECRET_SPEC);
	CHECK(fleet_wait_state(&f, "stop-me", LR_TASK_RUNNING, 10000) >= 0);
	web_start(&web, &f, true, addr);
	/* A form or another site's script cannot set the header. */
	CHECK_INT(status_of(addr, "POST", "/api/tasks/stop-me/cancel", NULL, NULL), ==, 403);
	CHECK_INT(status_of(addr, "POST", "/api/tasks/stop-me/cancel",
	                    "X-Leaserun: cancel\r\nOrigin: http://evil.example\r\n", NULL), ==, 403);
	CHECK_INT(status_of(addr, "GET", "/api/tasks/stop-me/cancel", "X-Leaserun: cancel\r\n", NULL),
	          ==, 405);
	CHECK_INT(fleet_state(&f, "stop-me", NULL, 0, NULL, NULL), ==, LR_TASK_RUNNING);
	snprintf(origin, sizeof(origin), "X-Leaserun: cancel\r\nOrigin: http://%s\r\n", addr);
	CHECK_INT(status_of(addr, "POST", "/api/tasks/stop-me/cancel", origin, &body), ==, 200);
	CHECK_HAS(body, "cancel requested");
	free(body);
	CHECK(fleet_wait_state(&f, "stop-me", LR_TASK_CANCELLED, 15000) >= 0);
	CHECK_INT(status_of(addr, "POST", "/api/tasks/stop-me/cancel", origin, &body), ==, 200);
	CHECK_HAS(body, "already cancelled");
	free(body);
	CHECK_INT(status_of(addr, "POST", "/api/tasks/ghost/cancel", origin, NULL), ==, 404);
	proc_stop(&web, SIGTERM, 5000);
	fleet_destroy(&f);
}

/* A request as a browser sends it, naming host in Host. */
static int status_as(const char *addr, const char *host, const char *method, const char *path,
                     const char *extra)
{
	char *req = NULL;
	int n = asprintf(&req, "%s %s HTTP/1.0\r\nHost: %s\r\n%s\r\n", method, path, host,
	                 extra != NULL ? extra : "");
	CHECK(n > 0);
	http_resp r = http_raw(addr, req, (size_t)n, 5000);
	free(req);
	int st = r.status;
	http_resp_free(&r);
	return st;
}

/* A site whose name was made to point at this server (DNS rebinding) is
 * the page's own origin in the browser: the server answers only to IP
 * addresses, localhost and the names it was given. */
TEST(only_the_names_it_was_given_reach_the_page_and_the_api)
{
	fleet f;
	proc_bg web;
	char addr[ADDR_SIZE], host[96], origin[256];
	fleet_init(&f, etcdh_endpoints(web_etcd), "rebind");
	fleet_submit(&f, "keep", SECRET_SPEC);
	const char *extra[] = { "--allow-cancel", "--allow-host", "lr.example.com,other.example",
		                NULL };
	web_start_with(&web, &f, extra, addr);
	const char *port = strrchr(addr, ':');
	snprintf(host, sizeof(host), "evil.example%s", port);
	snprintf(origin, sizeof(origin), "X-Leaserun: cancel\r\nOrigin: http://%s\r\n", host);
	CHECK_INT(status_as(addr, host, "GET", "/", NULL), ==, 403);
	CHECK_INT(status_as(addr, host, "GET", "/api/tasks/keep", NULL), ==, 403);
	CHECK_INT(status_as(addr, host, "GET", "/events", NULL), ==, 403);
	CHECK_INT(status_as(addr, host, "POST", "/api/tasks/keep/cancel", origin), ==, 403);
	CHECK_INT(fleet_state(&f, "keep", NULL, 0, NULL, NULL), ==, LR_TASK_PENDING);
	/* IP addresses, localhost and the names given. */
	snprintf(host, sizeof(host), "localhost%s", port);
	CHECK_INT(status_as(addr, host, "GET", "/", NULL), ==, 200);
	snprintf(host, sizeof(host), "[::1]%s", port);
	CHECK_INT(status_as(addr, host, "GET", "/", NULL), ==, 200);
	CHECK_INT(status_as(addr, "LR.example.com", "GET", "/api/tasks/keep", NULL), ==, 200);
	CHECK_INT(status_as(addr, "other.example:8443", "GET", "/", NULL), ==, 200);
	CHECK_INT(status_as(addr, "example.com", "GET", "/", NULL), ==, 403);
	proc_stop(&web, SIGTERM, 5000);
	/* A name that is no host name is a usage error. */
	proc_result r = proc_cli(NULL, NULL, "web", "--endpoints", f.endpoints, "--allow-host",
	                         "a b", NULL);
	CHECK_INT(r.status, ==, 2);
	CHECK_HAS(r.err, "--allow-host");
	proc_result_free(&r);
	fleet_destroy(&f);
}

/* Pages that keep their event stream open and never read take half the
 * connections at most: the page and the API still answer, and the
 * streams beyond get 503. */
TEST(event_streams_leave_room_for_requests)
{
	fleet f;
	proc_bg web;
	char addr[ADDR_SIZE];
	int fds[32];
	fleet_init(&f, etcdh_endpoints(web_etcd), "streams");
	web_start(&web, &f, false, addr);
	char req[128];
	int n = snprintf(req, sizeof(req), "GET /events HTTP/1.0\r\nHost: %s\r\n\r\n", addr);
	for (int i = 0; i < 32; i++) {
		fds[i] = http_connect(addr);
		CHECK(fds[i] >= 0);
		CHECK(write(fds[i], req, (size_t)n) == n);
	}
	/* Each has its place once its stream began ("retry:" comes first). */
	for (int i = 0; i < 32; i++) {
		char buf[512];
		size_t got = 0;
		int64_t t0 = lr_mono_ms();
		while (got < sizeof(buf) - 1 && lr_mono_ms() - t0 < 10000) {
			struct pollfd p = { fds[i], POLLIN, 0 };
			if (poll(&p, 1, 100) <= 0)
				continue;
			ssize_t r = read(fds[i], buf + got, sizeof(buf) - 1 - got);
			if (r <= 0)
				break;
			got += (size_t)r;
			buf[got] = '\0';
			if (strstr(buf, "retry:") != NULL)
				break;
		}
		buf[got] = '\0';
		CHECK_HAS(buf, "retry:");
	}
	CHECK_INT(status_of(addr, "GET", "/events", NULL, NULL), ==, 503);
	CHECK_INT(status_of(addr, "GET", "/", NULL, NULL), ==, 200);
	/* A page reloaded: its old stream's place is its new one's. */
	close(fds[0]);
	int st = -1;
	for (int64_t t0 = lr_mono_ms(); st != 200 && lr_mono_ms() - t0 < 5000;) {
		http_resp r = http_raw(addr, req, (size_t)n, 500);
		st = r.status;
		http_resp_free(&r);
	}
	CHECK_INT(st, ==, 200);
	for (int i = 1; i < 32; i++)
		close(fds[i]);
	proc_stop(&web, SIGTERM, 5000);
	CHECK_INT(web.status, ==, 0);
	fleet_destroy(&f);
}

/* A client that opens connections and sends nothing holds each until the
 * idle timeout: one address cannot take them all, another still gets the
 * page. */
TEST(one_address_cannot_take_every_connection)
{
	fleet f;
	proc_bg web;
	char addr[ADDR_SIZE], req[128];
	int fds[64];
	fleet_init(&f, etcdh_endpoints(web_etcd), "perip");
	web_start(&web, &f, false, addr);
	for (int i = 0; i < 64; i++)
		fds[i] = http_connect_from("127.0.0.1", addr, 2000);
	lr_sleep_ms(300); /* the server takes them in */
	int n = snprintf(req, sizeof(req), "GET / HTTP/1.0\r\nHost: %s\r\n\r\n", addr);
	http_resp same = http_raw_from("127.0.0.1", addr, req, (size_t)n, 2000);
	http_resp other = http_raw_from("127.0.0.2", addr, req, (size_t)n, 2000);
	printf("# with 64 idle connections from 127.0.0.1: its next request %d, "
	       "127.0.0.2's %d (-1: refused)\n", same.status, other.status);
	CHECK_INT(same.status, ==, -1);
	CHECK_INT(other.status, ==, 200);
	http_resp_free(&same);
	http_resp_free(&other);
	for (int i = 0; i < 64; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	proc_stop(&web, SIGTERM, 5000);
	CHECK_INT(web.status, ==, 0);
	fleet_destroy(&f);
}

/* Read fd into *buf (from *len on) until `needle` is in what came after
 * `from` (an offset into *buf); where it starts, or -1 after timeout_ms. */
static long read_until(int fd, char **buf, size_t *len, size_t from, const char *needle,
                       int timeout_ms)
{
	int64_t end = lr_mono_ms() + timeout_ms;
	for (;;) {
		char *at = *buf != NULL ? strstr(*buf + from, needle) : NULL;
		if (at != NULL)
			return at - *buf;
		int64_t wait = end - lr_mono_ms();
		struct pollfd p = { fd, POLLIN, 0 };
		if (wait <= 0 || poll(&p, 1, (int)wait) <= 0)
			return -1;
		*buf = realloc(*buf, *len + 4097);
		ssize_t got = read(fd, *buf + *len, 4096);
		if (got <= 0)
			return -1;
		*len += (size_t)got;
		(*buf)[*len] = '\0';
	}
}

static size_t snapshots_built(lr_web *w)
{
	pthread_mutex_lock(&w->mu);
	size_t n = w->snapshots_built;
	pthread_mutex_unlock(&w->mu);
	return n;
}

/* Open an event stream on a new connection; -1 on failure. */
static int open_events(const char *addr)
{
	static const char req[] = "GET /events HTTP/1.0\r\n\r\n";
	int fd = http_connect(addr);
	if (fd >= 0 && write(fd, req, sizeof(req) - 1) != (ssize_t)sizeof(req) - 1) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Txn calls etcd has served (a task's detail is read with one). */
static double etcd_txns(void)
{
	char *text = metrics_get(etcdh_endpoints(web_etcd));
	double n = metric_value(text, "grpc_server_handled_total{grpc_code=\"OK\","
	                              "grpc_method=\"Txn\",grpc_service=\"etcdserverpb.KV\","
	                              "grpc_type=\"unary\"}");
	free(text);
	CHECK(n >= 0);
	return n;
}

struct asker {
	pthread_t t;
	const char *addr;
	int ok;
};

static void *ask_detail(void *arg)
{
	struct asker *a = arg;
	for (int i = 0; i < 5; i++)
		a->ok += status_of(a->addr, "GET", "/api/task?id=d1", NULL, NULL) == 200;
	return NULL;
}

/* 20 requests, then 8 clients asking 5 times each at once: how many Txns
 * etcd served meanwhile. */
static double txns_for_many_details(const char *addr)
{
	struct asker a[8];
	double before = etcd_txns();
	for (int i = 0; i < 20; i++)
		CHECK_INT(status_of(addr, "GET", "/api/tasks/d1", NULL, NULL), ==, 200);
	for (int i = 0; i < 8; i++) {
		a[i] = (struct asker){ .addr = addr };
		CHECK(pthread_create(&a[i].t, NULL, ask_detail, &a[i]) == 0);
	}
	for (int i = 0; i < 8; i++) {
		pthread_join(a[i].t, NULL);
		CHECK_INT(a[i].ok, ==, 5);
	}
	return etcd_txns() - before;
}

/* Pages asking for a task's detail in a loop (its spec may be 1 MiB) do
 * not make etcd read it each time: it is read again when the watch says
 * the task changed. */
TEST(a_task_detail_is_read_from_etcd_again_only_when_the_task_changed)
{
	fleet f;
	proc_bg web;
	char addr[ADDR_SIZE], *body = NULL;
	fleet_init(&f, etcdh_endpoints(web_etcd), "detail");
	fleet_submit(&f, "d1", "{\"id\":\"%s\",\"steps\":[{\"name\":\"a\",\"run\":\"echo '{\\\"n\\\":1}' "
	                       ">$LEASERUN_STATE_OUT\"},{\"name\":\"b\",\"run\":\"sleep 30\"}]}");
	web_start(&web, &f, false, addr);
	double txns = txns_for_many_details(addr);
	printf("# 60 requests for one task's detail: %.0f reads from etcd\n", txns);
	CHECK(txns <= 1);
	/* A runner commits the first step's state: the detail shows it. */
	fleet_start(&f, 0, NULL);
	int64_t t0 = lr_mono_ms();
	bool seen = false;
	while (!seen && lr_mono_ms() - t0 < 15000) {
		CHECK_INT(status_of(addr, "GET", "/api/tasks/d1", NULL, &body), ==, 200);
		seen = strstr(body, "\\\"n\\\": 1") != NULL;
		free(body);
		lr_sleep_ms(50);
	}
	CHECK(seen);
	txns = txns_for_many_details(addr);
	printf("# after the change, 60 more: %.0f reads\n", txns);
	CHECK(txns <= 1);
	proc_stop(&web, SIGTERM, 5000);
	fleet_destroy(&f);
}

/* Building the snapshot of a large fleet takes a while: pages that open
 * at once, or one after the other while nothing much changes, share one.
 * A page that opens after a change still sees it. */
TEST(pages_that_open_at_one_revision_share_one_snapshot)
{
	enum { PAGES = 8 };
	fleet f;
	lr_web *w = NULL;
	lr_err e = { 0 };
	char id[32], *buf[PAGES + 1] = { NULL };
	size_t len[PAGES + 1] = { 0 };
	int fds[PAGES + 1];
	fleet_init(&f, etcdh_endpoints(web_etcd), "share");
	for (int i = 0; i < 20; i++) {
		snprintf(id, sizeof(id), "t%02d", i);
		fleet_submit(&f, id, SECRET_SPEC);
	}
	lr_web_opts o = { .listen = "127.0.0.1:0" };
	CHECK_OK(lr_web_start(f.client, &o, &w, &e), &e);
	for (int i = 0; i < PAGES; i++)
		CHECK((fds[i] = open_events(lr_web_address(w))) >= 0);
	for (int i = 0; i < PAGES; i++) {
		long at = read_until(fds[i], &buf[i], &len[i], 0, "event: snapshot", 5000);
		CHECK(at >= 0);
		CHECK(read_until(fds[i], &buf[i], &len[i], (size_t)at, "\n\n", 5000) >= 0);
		CHECK_HAS(buf[i], "\"t19\"");
	}
	printf("# %d pages opened at once: %zu snapshots built\n", PAGES, snapshots_built(w));
	CHECK_INT(snapshots_built(w), ==, 1);
	/* A change, then a page: the shared snapshot and the change after
	 * it (or a new snapshot with it). */
	fleet_submit(&f, "late", SECRET_SPEC);
	CHECK(read_until(fds[0], &buf[0], &len[0], 0, "\"late\"", 5000) >= 0);
	CHECK((fds[PAGES] = open_events(lr_web_address(w))) >= 0);
	CHECK(read_until(fds[PAGES], &buf[PAGES], &len[PAGES], 0, "\"late\"", 5000) >= 0);
	printf("# one more page after a change: %zu snapshots built\n", snapshots_built(w));
	CHECK_INT(snapshots_built(w), ==, 1);
	for (int i = 0; i <= PAGES; i++) {
		close(fds[i]);
		free(buf[i]);
	}
	lr_web_stop(w);
	fleet_destroy(&f);
}

/* The page is told when etcd stops answering (with the time its data is
 * as of) and when it answers again: an event on the stream, and in the
 * snapshot of a page that opens meanwhile. */
TEST(the_event_stream_says_when_etcd_is_unreachable_and_when_it_is_back)
{
	fleet f;
	proc_bg web;
	char addr[ADDR_SIZE], req[128], *buf = NULL;
	size_t len = 0;
	fleet_init(&f, etcdh_endpoints(web_etcd), "outage");
	web_start(&web, &f, false, addr);
	int fd = http_connect(addr);
	CHECK(fd >= 0);
	int n = snprintf(req, sizeof(req), "GET /events HTTP/1.0\r\nHost: %s\r\n\r\n", addr);
	CHECK(write(fd, req, (size_t)n) == n);
	CHECK(read_until(fd, &buf, &len, 0, "\"etcd\":{\"reachable\":true}", 5000) >= 0);

	CHECK_INT(etcdh_stop(web_etcd, 0), ==, 0);
	int64_t t0 = lr_mono_ms();
	long down = read_until(fd, &buf, &len, 0, "event: etcd\ndata: {\"reachable\":false", 10000);
	printf("# told %lld ms after the stop: %.*s\n", (long long)(lr_mono_ms() - t0),
	       down >= 0 ? (int)strcspn(buf + down + 12, "\n") : 0, down >= 0 ? buf + down + 12 : "");
	CHECK(down >= 0);
	CHECK(read_until(fd, &buf, &len, (size_t)down, "\n\n", 1000) >= 0);
	CHECK_HAS(buf + down, "\"as_of\":\"20");
	CHECK_HAS(buf + down, etcdh_endpoints(web_etcd));
	/* A page opened now learns it from its snapshot. */
	http_resp r = http_get(addr, "/events", NULL, 1500);
	CHECK_HAS(r.body, "\"etcd\":{\"reachable\":false");
	http_resp_free(&r);

	CHECK_INT(etcdh_restart(web_etcd, 0), ==, 0);
	t0 = lr_mono_ms();
	long up = read_until(fd, &buf, &len, (size_t)down,
	                     "event: etcd\ndata: {\"reachable\":true}", 10000);
	printf("# told %lld ms after etcd was back\n", (long long)(lr_mono_ms() - t0));
	CHECK(up >= 0);
	close(fd);
	free(buf);
	proc_stop(&web, SIGTERM, 5000);
	CHECK_INT(web.status, ==, 0);
	fleet_destroy(&f);
}

/* libmicrohttpd keeps the request and the reply's headers in one memory
 * pool per connection: a request that nearly filled it used to get no
 * answer at all. Every size around the limit gets one: the page up to
 * 32 KiB of request line and headers, 431 beyond. */
TEST(every_request_around_the_size_limit_gets_an_answer)
{
	fleet f;
	proc_bg web;
	char addr[ADDR_SIZE];
	enum { FROM = 30000, TO = 34000, STEP = 20, LIMIT = 32 * 1024 };
	char *req = malloc(TO + 1);
	int silent = 0, wrong = 0;
	fleet_init(&f, etcdh_endpoints(web_etcd), "sizes");
	web_start(&web, &f, false, addr);
	for (int size = FROM; size <= TO; size += STEP) {
		int n = snprintf(req, TO, "GET / HTTP/1.1\r\nHost: %s\r\nX-Pad: ", addr);
		memset(req + n, 'p', (size_t)(size - n - 4));
		memcpy(req + size - 4, "\r\n\r\n", 4);
		http_resp r = http_raw(addr, req, (size_t)size, 3000);
		int want = size <= LIMIT ? 200 : 431;
		if (r.status == -1 && silent++ < 3)
			printf("# %d bytes: no answer\n", size);
		else if (r.status != -1 && r.status != want && wrong++ < 3)
			printf("# %d bytes: status %d, not %d\n", size, r.status, want);
		http_resp_free(&r);
	}
	printf("# %d sizes from %d to %d bytes: %d without an answer, %d with another status\n",
	       (TO - FROM) / STEP + 1, FROM, TO, silent, wrong);
	CHECK_INT(silent, ==, 0);
	CHECK_INT(wrong, ==, 0);
	CHECK_INT(status_of(addr, "GET", "/", NULL, NULL), ==, 200);
	free(req);
	proc_stop(&web, SIGTERM, 5000);
	CHECK_INT(web.status, ==, 0);
	fleet_destroy(&f);
}

TEST(a_listen_address_that_is_taken_ends_web_with_status_1)
{
	fleet f;
	proc_bg web;
	char addr[ADDR_SIZE];
	fleet_init(&f, etcdh_endpoints(web_etcd), "taken");
	web_start(&web, &f, false, addr);
	proc_result r = proc_cli(NULL, NULL, "web", "--endpoints", f.endpoints, "--prefix",
	                         f.prefix, "--listen", addr, NULL);
	CHECK_INT(r.status, ==, 1);
	CHECK_HAS(r.err, addr);
	proc_result_free(&r);
	r = proc_cli(NULL, NULL, "web", "--endpoints", f.endpoints, "--listen", "8080", NULL);
	CHECK_INT(r.status, ==, 2);
	CHECK_HAS(r.err, ":PORT");
	proc_result_free(&r);
	proc_stop(&web, SIGTERM, 5000);
	fleet_destroy(&f);
}

TEST_LIST(TEST_CASE(neither_the_stream_nor_the_detail_carries_env_values),
          TEST_CASE(the_detail_of_a_claimed_task_gives_the_claims_fence),
          TEST_CASE(the_page_is_served_with_a_strict_content_security_policy),
          TEST_CASE(cancel_is_refused_by_a_read_only_server),
          TEST_CASE(cancel_with_allow_cancel_comes_from_the_page_only),
          TEST_CASE(only_the_names_it_was_given_reach_the_page_and_the_api),
          TEST_CASE(event_streams_leave_room_for_requests),
          TEST_CASE(one_address_cannot_take_every_connection),
          TEST_CASE(every_request_around_the_size_limit_gets_an_answer),
          TEST_CASE(pages_that_open_at_one_revision_share_one_snapshot),
          TEST_CASE(a_task_detail_is_read_from_etcd_again_only_when_the_task_changed),
          TEST_CASE(a_listen_address_that_is_taken_ends_web_with_status_1),
          TEST_CASE(the_event_stream_says_when_etcd_is_unreachable_and_when_it_is_back));

TEST_MAIN(web_etcd_start, web_etcd_stop)
