/* test_partition.c - a runner cut off from etcd while its step runs, by a
 * TCP proxy that the test controls: the runner stops its step by its lease
 * deadline and commits nothing, another runner finishes the task, and once
 * the network heals the cut runner comes back with a new lease and works.
 * And a runner behind a slow link (round trips over a third of its TTL)
 * keeps its lease, and a retry whose reply is lost knows its own write.
 *
 * Threads: the test runs on the main thread (which starts the runners, so
 * they die with it); the proxy forwards on a thread of its own, told what to
 * do through its mutex and woken through a pipe. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "etcd_harness.h"
#include "fleet.h"
#include "history.h"
#include "marks.h"
#include "proc.h"
#include "test.h"

static etcdh_cluster *cluster;
static lr_err err;
/* The long step's process group, killed at teardown should the test fail
 * before its runner stopped it. */
static long step_group;

/* ---- a TCP proxy that can cut the network --------------------------------
 *
 * Forwarding: every accepted connection gets its own connection to the
 * upstream member, and bytes are copied both ways. Cut: every forwarded
 * connection is closed, and new ones are accepted but never forwarded (a
 * black hole: the client's handshake hangs). Heal: the held connections are
 * closed and new ones are forwarded again. A proxy may also delay every
 * byte by a fixed time each way (a slow link): bytes read are queued with
 * the time they may go on. And it may lose a reply: the connection that
 * carries the start of the n-th gRPC reply from now is closed instead of
 * passing it on, so that the call's request reached etcd and its reply
 * never came. */

#define PROXY_LINKS 32
#define PROXY_BUF 65536

enum proxy_mode { PROXY_FORWARD, PROXY_CUT, PROXY_QUIT };

struct chunk {              /* bytes held back by a slow link */
	struct chunk *next;
	int64_t at;             /* when they may go on (monotonic ms) */
	size_t len, off;
	char data[];
};

struct half {               /* one direction of a link */
	char buf[PROXY_BUF];
	size_t len, off;        /* bytes read and not yet written: [off, len) */
	struct chunk *head, *tail; /* a slow link's queue, oldest first */
};

struct link {
	int client, upstream;   /* -1 when the slot is free */
	struct half up, down;   /* client -> upstream, upstream -> client */
};

struct proxy {
	int listen_fd, port;
	struct sockaddr_in upstream;
	int wake[2];
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t changed;
	enum proxy_mode want;   /* under mu */
	enum proxy_mode mode;   /* under mu: what the thread applies now */
	int delay_ms;           /* each way; 0: none */
	int lose_reply;         /* under mu: the n-th reply from now is lost;
	                           0: none */
	bool lose_rest;         /* under mu: and every reply after it */
	uint32_t last_stream;   /* the last reply's HTTP/2 stream, counted */
	struct link links[PROXY_LINKS];
	int held[PROXY_LINKS];
	char endpoint[32];
};

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void half_clear(struct half *h)
{
	while (h->head != NULL) {
		struct chunk *c = h->head;
		h->head = c->next;
		free(c);
	}
	h->tail = NULL;
	h->len = h->off = 0;
}

static void link_close(struct link *l)
{
	close_fd(&l->client);
	close_fd(&l->upstream);
	half_clear(&l->up);
	half_clear(&l->down);
}

static void links_close_all(struct proxy *p)
{
	for (int i = 0; i < PROXY_LINKS; i++)
		link_close(&p->links[i]);
}

static void held_close_all(struct proxy *p)
{
	for (int i = 0; i < PROXY_LINKS; i++)
		close_fd(&p->held[i]);
}

static int free_held(const struct proxy *p)
{
	for (int i = 0; i < PROXY_LINKS; i++)
		if (p->held[i] < 0)
			return i;
	return -1;
}

static int free_link(const struct proxy *p)
{
	for (int i = 0; i < PROXY_LINKS; i++)
		if (p->links[i].client < 0)
			return i;
	return -1;
}

static void on_accept(struct proxy *p, enum proxy_mode mode)
{
	int fd = accept4(p->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
	if (fd < 0)
		return;
	if (mode == PROXY_CUT) {
		int i = free_held(p);
		if (i < 0)
			close(fd);
		else
			p->held[i] = fd;
		return;
	}
	int i = free_link(p);
	int up = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (i < 0 || up < 0 ||
	    connect(up, (const struct sockaddr *)&p->upstream, sizeof(p->upstream)) != 0) {
		close(fd);
		if (up >= 0)
			close(up);
		return;
	}
	fcntl(up, F_SETFL, fcntl(up, F_GETFL) | O_NONBLOCK);
	struct link *l = &p->links[i];
	l->client = fd;
	l->upstream = up;
	half_clear(&l->up);
	half_clear(&l->down);
}

/* pump() for a slow link: what `from` has is queued for delay_ms, and what
 * is due is written to `to` (non-blocking, so tried whenever due). */
static bool pump_late(struct half *h, int from, short from_ev, int to, int delay_ms)
{
	if (from_ev & (POLLIN | POLLHUP | POLLERR)) {
		ssize_t n = read(from, h->buf, sizeof(h->buf));
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return false;
		if (n > 0) {
			struct chunk *c = malloc(sizeof(*c) + (size_t)n);
			CHECK(c != NULL);
			*c = (struct chunk){ .at = lr_mono_ms() + delay_ms, .len = (size_t)n };
			memcpy(c->data, h->buf, (size_t)n);
			if (h->tail != NULL)
				h->tail->next = c;
			else
				h->head = c;
			h->tail = c;
		}
	}
	while (h->head != NULL && h->head->at <= lr_mono_ms()) {
		struct chunk *c = h->head;
		ssize_t n = write(to, c->data + c->off, c->len - c->off);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR;
		c->off += (size_t)n;
		if (c->off < c->len)
			return true;
		h->head = c->next;
		if (h->head == NULL)
			h->tail = NULL;
		free(c);
	}
	return true;
}

/* For poll: ms until the first queued chunk of any link is due, -1: none. */
static int next_due(const struct proxy *p)
{
	int64_t first = INT64_MAX;
	for (int i = 0; i < PROXY_LINKS; i++) {
		const struct link *l = &p->links[i];
		if (l->client < 0)
			continue;
		if (l->up.head != NULL && l->up.head->at < first)
			first = l->up.head->at;
		if (l->down.head != NULL && l->down.head->at < first)
			first = l->down.head->at;
	}
	if (first == INT64_MAX)
		return -1;
	int64_t wait = first - lr_mono_ms();
	return wait > 0 ? (int)wait : 0;
}

/* Whether the bytes just read from upstream start the reply that is to be
 * lost: each reply starts with a HEADERS frame (type 1) on a stream of its
 * own. Whole frames only: a frame cut by the read ends the scan. */
static bool reply_lost(struct proxy *p, const unsigned char *b, size_t n)
{
	pthread_mutex_lock(&p->mu);
	bool lost = false;
	for (size_t off = 0; (p->lose_reply > 0 || p->lose_rest) && off + 9 <= n;) {
		size_t len = (size_t)b[off] << 16 | (size_t)b[off + 1] << 8 | b[off + 2];
		uint32_t stream = ((uint32_t)b[off + 5] << 24 | (uint32_t)b[off + 6] << 16 |
		                   (uint32_t)b[off + 7] << 8 | b[off + 8]) & 0x7fffffffu;
		if (b[off + 3] == 1 && stream != 0 && stream != p->last_stream) {
			p->last_stream = stream;
			if (p->lose_reply == 0 || --p->lose_reply == 0) {
				lost = true;
				p->last_stream = 0; /* the next link numbers from 1 */
				break;
			}
		}
		off += 9 + len;
	}
	pthread_mutex_unlock(&p->mu);
	return lost;
}

/* Move bytes from `from` into h, or from h to `to`; false when the link
 * is finished (end of stream or an error), or the bytes read from upstream
 * (replies: when `replies` is the proxy) start the reply to lose. */
static bool pump(struct half *h, int from, short from_ev, int to, short to_ev,
                 struct proxy *replies)
{
	if (h->len == 0 && (from_ev & (POLLIN | POLLHUP | POLLERR))) {
		ssize_t n = read(from, h->buf, sizeof(h->buf));
		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
			return false;
		if (n > 0 && replies != NULL &&
		    reply_lost(replies, (const unsigned char *)h->buf, (size_t)n))
			return false;
		if (n > 0) {
			h->len = (size_t)n;
			h->off = 0;
		}
	}
	if (h->len > 0 && (to_ev & (POLLOUT | POLLERR))) {
		ssize_t n = write(to, h->buf + h->off, h->len - h->off);
		if (n < 0 && errno != EAGAIN && errno != EINTR)
			return false;
		if (n > 0)
			h->off += (size_t)n;
		if (h->off == h->len)
			h->len = h->off = 0;
	}
	return true;
}

/* Apply a mode change asked for by the test; returns the mode in force. */
static enum proxy_mode apply_mode(struct proxy *p, enum proxy_mode current)
{
	pthread_mutex_lock(&p->mu);
	enum proxy_mode want = p->want;
	pthread_mutex_unlock(&p->mu);
	if (want == current)
		return current;
	if (want == PROXY_CUT || want == PROXY_QUIT)
		links_close_all(p);
	if (want == PROXY_FORWARD || want == PROXY_QUIT)
		held_close_all(p);
	pthread_mutex_lock(&p->mu);
	p->mode = want;
	pthread_cond_broadcast(&p->changed);
	pthread_mutex_unlock(&p->mu);
	return want;
}

static void *proxy_main(void *arg)
{
	struct proxy *p = arg;
	enum proxy_mode mode = PROXY_FORWARD;
	struct pollfd fds[2 + 2 * PROXY_LINKS];
	for (;;) {
		mode = apply_mode(p, mode);
		if (mode == PROXY_QUIT)
			return NULL;
		nfds_t n = 0;
		fds[n++] = (struct pollfd){ .fd = p->wake[0], .events = POLLIN };
		fds[n++] = (struct pollfd){ .fd = p->listen_fd, .events = POLLIN };
		for (int i = 0; i < PROXY_LINKS; i++) {
			struct link *l = &p->links[i];
			if (l->client < 0)
				continue;
			fds[n++] = (struct pollfd){ .fd = l->client,
				.events = (short)((l->up.len ? 0 : POLLIN) | (l->down.len ? POLLOUT : 0)) };
			fds[n++] = (struct pollfd){ .fd = l->upstream,
				.events = (short)((l->down.len ? 0 : POLLIN) | (l->up.len ? POLLOUT : 0)) };
		}
		if (poll(fds, n, p->delay_ms > 0 ? next_due(p) : -1) < 0)
			continue;
		char drain[64];
		while (read(p->wake[0], drain, sizeof(drain)) > 0)
			;
		if (fds[1].revents & POLLIN)
			on_accept(p, mode);
		/* Links in the same order as they were added to fds; a link
		 * accepted just now was not polled and waits for the next round. */
		nfds_t k = 2;
		for (int i = 0; i < PROXY_LINKS && k < n; i++) {
			struct link *l = &p->links[i];
			if (l->client < 0 || fds[k].fd != l->client)
				continue;
			short c = fds[k].revents, u = fds[k + 1].revents;
			k += 2;
			bool open = p->delay_ms > 0
			            ? pump_late(&l->up, l->client, c, l->upstream, p->delay_ms) &&
			              pump_late(&l->down, l->upstream, u, l->client, p->delay_ms)
			            : pump(&l->up, l->client, c, l->upstream, u, NULL) &&
			              pump(&l->down, l->upstream, u, l->client, c, p);
			if (!open)
				link_close(l);
		}
	}
}

static void proxy_set(struct proxy *p, enum proxy_mode want)
{
	pthread_mutex_lock(&p->mu);
	p->want = want;
	pthread_mutex_unlock(&p->mu);
	CHECK(write(p->wake[1], "x", 1) == 1);
	pthread_mutex_lock(&p->mu);
	while (p->mode != want)
		pthread_cond_wait(&p->changed, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

/* A proxy on a free loopback port to upstream ("127.0.0.1:PORT"), which
 * delays bytes by delay_ms each way (0: none). */
static void proxy_start(struct proxy *p, const char *upstream, int delay_ms)
{
	memset(p, 0, sizeof(*p));
	p->delay_ms = delay_ms;
	for (int i = 0; i < PROXY_LINKS; i++) {
		p->links[i].client = p->links[i].upstream = -1;
		p->held[i] = -1;
	}
	int port = 0;
	CHECK(sscanf(upstream, "127.0.0.1:%d", &port) == 1);
	p->upstream = (struct sockaddr_in){ .sin_family = AF_INET,
	                                    .sin_port = htons((uint16_t)port),
	                                    .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	p->listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	CHECK(p->listen_fd >= 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	CHECK(bind(p->listen_fd, (struct sockaddr *)&a, sizeof(a)) == 0);
	CHECK(listen(p->listen_fd, 64) == 0);
	CHECK(getsockname(p->listen_fd, (struct sockaddr *)&a, &alen) == 0);
	p->port = ntohs(a.sin_port);
	snprintf(p->endpoint, sizeof(p->endpoint), "127.0.0.1:%d", p->port);
	CHECK(pipe2(p->wake, O_NONBLOCK | O_CLOEXEC) == 0);
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->changed, NULL);
	p->want = p->mode = PROXY_FORWARD;
	CHECK(pthread_create(&p->thread, NULL, proxy_main, p) == 0);
}

static void proxy_stop(struct proxy *p)
{
	proxy_set(p, PROXY_QUIT);
	pthread_join(p->thread, NULL);
	links_close_all(p);
	close(p->listen_fd);
	close(p->wake[0]);
	close(p->wake[1]);
	pthread_mutex_destroy(&p->mu);
	pthread_cond_destroy(&p->changed);
}

/* ---- helpers ------------------------------------------------------------ */

/* True while a live (not zombie) process is in process group pgid. */
static bool group_alive(long pgid)
{
	DIR *d = opendir("/proc");
	if (d == NULL)
		return false;
	bool alive = false;
	struct dirent *e;
	while (!alive && (e = readdir(d)) != NULL) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		char path[300], buf[512];
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		FILE *fp = fopen(path, "r");
		if (fp == NULL)
			continue;
		size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
		fclose(fp);
		buf[n] = '\0';
		/* "pid (comm) state ppid pgrp ...": comm may hold anything. */
		char *rp = strrchr(buf, ')');
		char state;
		long ppid, pgrp;
		if (rp != NULL && sscanf(rp + 1, " %c %ld %ld", &state, &ppid, &pgrp) == 3 &&
		    pgrp == pgid && state != 'Z')
			alive = true;
	}
	closedir(d);
	return alive;
}

/* The first mark of kind `end` for step `step` of `task`, by runner
 * (NULL: any); false when there is none. */
static bool find_mark(fleet *f, bool end, const char *task, int64_t step,
                      const char *runner, mark *out)
{
	mark *m = NULL;
	size_t n = 0;
	bool found = false;
	CHECK_INT(marks_read(f->dir, &m, &n), ==, 0);
	for (size_t i = 0; i < n && !found; i++)
		if (m[i].end == end && strcmp(m[i].task, task) == 0 && m[i].step == step &&
		    (runner == NULL || strcmp(m[i].runner, runner) == 0)) {
			*out = m[i];
			found = true;
		}
	free(m);
	return found;
}

static int64_t current_revision(fleet *f)
{
	lr_range_result r;
	CHECK_OK(lr_kv_get(lr_client_etcd(f->client), f->prefix, &r, &err), &err);
	int64_t rev = r.revision;
	lr_range_result_free(&r);
	return rev;
}

/* Writes of the cut runner for the task it lost, after the cut. */
struct late_writes {
	const char *runner, *task;
	int64_t after;
	int count;
	char first[200];
};

static void on_write(void *user, const history_event *e)
{
	struct late_writes *lw = user;
	if (e->kind == HISTORY_CLAIM || e->runner == NULL || e->revision <= lw->after ||
	    strcmp(e->runner, lw->runner) != 0 || strcmp(e->task, lw->task) != 0)
		return;
	if (lw->count++ == 0)
		snprintf(lw->first, sizeof(lw->first), "%s of %s at revision %" PRId64,
		         e->kind == HISTORY_DONE ? "done" : "checkpoint", e->task, e->revision);
}

/* ---- the test ----------------------------------------------------------- */

#define STEP(name, run) "{\"name\":\"" name "\",\"run\":\"" run "\"}"
/* The first attempt takes a minute, a takeover's a moment. */
#define LONG_FIRST "case $LEASERUN_ATTEMPT in 1) sleep 60;; *) sleep 0.2;; esac"

TEST(a_runner_cut_off_stops_its_step_by_its_lease_deadline_and_rejoins_with_a_new_lease)
{
	static struct proxy px;
	proxy_start(&px, etcdh_endpoint(cluster, 0), 0);
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "partition");
	const char *flags[] = { "--grace", "1", NULL };
	enum { CUT = 0, DIRECT = 1 };
	fleet_start_named(&f, CUT, "cut", px.endpoint, flags);
	int64_t old_lease = fleet_runner_lease(&f, "cut");
	CHECK(old_lease != 0);

	fleet_submit(&f, "held", "{\"id\":\"%s\",\"steps\":["
	             STEP("long", MARK_START "; " LONG_FIRST "; " MARK_END) ","
	             STEP("short", MARK_START "; " MARK_END) "]}");
	CHECK_INT(fleet_wait_marks(&f, "start held 0 ", 1, 10000), ==, 0);
	mark started;
	CHECK(find_mark(&f, false, "held", 0, "cut", &started));
	step_group = started.pid;
	CHECK(group_alive(started.pid));
	fleet_start_named(&f, DIRECT, "direct", NULL, flags);

	/* Cut. The cut runner's last renewal was sent before this moment, so
	 * its lease deadline is at most TTL (2 s) away. */
	int64_t cut_rev = current_revision(&f);
	int64_t cut = lr_mono_ms();
	proxy_set(&px, PROXY_CUT);
	int64_t stopped = -1, taken = -1;
	while ((stopped < 0 || taken < 0) && lr_mono_ms() - cut < 15000) {
		if (stopped < 0 && !group_alive(started.pid))
			stopped = lr_mono_ms() - cut;
		if (taken < 0 && fleet_holder(&f, "held") == DIRECT)
			taken = lr_mono_ms() - cut;
		lr_sleep_ms(5);
	}
	CHECK(stopped >= 0);
	CHECK(taken >= 0);
	CHECK(fleet_wait_state(&f, "held", LR_TASK_SUCCEEDED, 20000) >= 0);
	mark m;
	CHECK(!find_mark(&f, true, "held", 0, "cut", &m));  /* killed mid-step */
	CHECK(find_mark(&f, true, "held", 0, "direct", &m));
	CHECK(find_mark(&f, true, "held", 1, "direct", &m));
	CHECK_INT(waitpid(f.pids[CUT], NULL, WNOHANG), ==, 0); /* cut off, not dead */
	CHECK(!fleet_registered(&f, "cut"));                   /* its lease expired */

	/* Heal: the cut runner takes a new lease and registers again. */
	int64_t heal = lr_mono_ms();
	proxy_set(&px, PROXY_FORWARD);
	int64_t new_lease = 0;
	while ((new_lease == 0 || new_lease == old_lease) && lr_mono_ms() - heal < 20000) {
		new_lease = fleet_runner_lease(&f, "cut");
		lr_sleep_ms(10);
	}
	int64_t rejoined = lr_mono_ms() - heal;
	printf("# partition: cut -> step stopped %" PRId64 " ms, cut -> taken over %" PRId64
	       " ms, heal -> new lease %" PRId64 " ms (TTL 2 s, grace 1 s)\n",
	       stopped, taken, rejoined);
	printf("# leases of the cut runner: %" PRId64 " before, %" PRId64 " after\n", old_lease,
	       new_lease);
	CHECK(new_lease != 0 && new_lease != old_lease);
	/* Stopped by the lease deadline (TTL after the last renewal sent),
	 * and so never after the claim could be taken over. */
	CHECK_INT(stopped, <=, 2000 + 250);
	CHECK_INT(stopped, <=, taken + 50);
	CHECK_INT(taken, <=, 5000); /* TTL + 1 s is the target: printed above */

	/* With the other runner gone, the healed one runs a new task. */
	kill(f.pids[DIRECT], SIGTERM);
	CHECK_INT(fleet_wait(&f, DIRECT, 10000), ==, 0);
	fleet_submit(&f, "after", "{\"id\":\"%s\",\"steps\":["
	             STEP("one", MARK_START "; " MARK_END) "," STEP("two", MARK_START "; " MARK_END) "]}");
	CHECK(fleet_wait_state(&f, "after", LR_TASK_SUCCEEDED, 15000) >= 0);
	CHECK(find_mark(&f, true, "after", 1, "cut", &m));

	struct late_writes lw = { .runner = "cut", .task = "held", .after = cut_rev };
	history_report rep;
	CHECK_INT(history_replay(lr_client_etcd(f.client), f.prefix, on_write, &lw, &rep), ==, 0);
	printf("# history of %s: %zu claims, %zu commits, %zu done, %zu violations\n", f.prefix,
	       rep.claims, rep.commits, rep.finals, rep.violations);
	if (rep.violations > 0)
		TEST_FAIL("%s", rep.first);
	if (lw.count > 0)
		TEST_FAIL("the cut runner wrote %d times for the task it lost; first: %s",
		          lw.count, lw.first);
	CHECK_INT(rep.finals, ==, 2);

	kill(f.pids[CUT], SIGTERM);
	CHECK_INT(fleet_wait(&f, CUT, 10000), ==, 0);
	fleet_destroy(&f);
	proxy_stop(&px);
}

/* SIGTERM to a runner cut off from etcd after it lost its lease: its steps
 * are stopped already, and it is trying for a new lease, each call of
 * which waits out its timeout (5 s) while etcd cannot be reached. It acts
 * on the stop after the call under way, not after all of them. */
TEST(a_runner_cut_off_past_its_lease_deadline_acts_on_sigterm_after_one_call)
{
	static struct proxy px;
	proxy_start(&px, etcdh_endpoint(cluster, 0), 0);
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "cutexit");
	const char *flags[] = { "--grace", "1", "--concurrency", "2", NULL };
	fleet_start_named(&f, 0, "cutexit", px.endpoint, flags);
	for (int i = 0; i < 2; i++)
		fleet_submit(&f, i == 0 ? "ce0" : "ce1", "{\"id\":\"%s\",\"steps\":["
		             STEP("long", MARK_START "; sleep 60; " MARK_END) "]}");
	CHECK_INT(fleet_wait_marks(&f, "start ce", 2, 10000), ==, 0);
	proxy_set(&px, PROXY_CUT);
	lr_sleep_ms(2000 + 500); /* past the TTL: the lease is lost, the steps stopped */
	int64_t t0 = lr_mono_ms();
	kill(f.pids[0], SIGTERM);
	int st = fleet_wait(&f, 0, 20000);
	int64_t took = lr_mono_ms() - t0;
	printf("# cut off past its lease deadline: SIGTERM -> exit %" PRId64 " ms (status %d)\n",
	       took, st);
	CHECK_INT(st, ==, 0);
	/* One call's 5 s timeout at most, not the two (revoke, then grant)
	 * of a new lease's attempt, with some room. */
	CHECK_INT(took, <, 7500);
	fleet_destroy(&f);
	proxy_stop(&px);
}

/* Stop pid (SIGSTOP) as soon as etcd lists more than `leases` leases: the
 * grant it asked for is made, and over the slow link the answer has not
 * reached it yet. */
static void stop_once_granted(pid_t pid, int leases)
{
	for (int64_t end = lr_mono_ms() + 15000;
	     etcdh_lease_count(cluster) <= leases && lr_mono_ms() < end;)
		;
	kill(pid, SIGSTOP);
}

/* `leaserun run` through the slow link, stopped as soon as etcd lists its
 * lease, past the TTL: the lease is gone before its request is put on it.
 * It takes another and runs the command. */
static void run_stopped_after_its_grant(fleet *f, const char *endpoint)
{
	int leases = etcdh_lease_count(cluster);
	CHECK(leases >= 0);
	char log[300];
	snprintf(log, sizeof(log), "%s/run.log", f->dir);
	char *const argv[] = { (char *)proc_leaserun(), "run", "--endpoints", (char *)endpoint,
		               "--prefix", f->prefix, "--ttl", "2", "--dial-timeout", "20",
		               "--lock", "gx", "--", "true", NULL };
	proc_bg run;
	proc_start(&run, argv, NULL, log);
	stop_once_granted(run.pid, leases);
	bool early = fleet_count_keys(f, LR_K_WANTS) > 0;
	lr_sleep_ms(3000);
	kill(run.pid, SIGCONT);
	int st = proc_wait(&run, 20000);
	if (early)
		TEST_FAIL("run put its request before it was stopped: no lease expired under it");
	if (st != 0)
		TEST_FAIL("run stopped after its grant exited %d; its output: %s", st, log);
}

/* A round trip of 0.8 s to etcd, more than a third of the TTL (2 s): the
 * renewals go out every TTL/3 without waiting for the one before, and each
 * reply counts from its own renewal's sending, so the lease holds.
 *
 * Before that, the runner is stopped (SIGSTOP) as soon as etcd lists its
 * first lease, while etcd's answer to the grant is still on the slow link,
 * for longer than the TTL: that lease expires before the name is put on
 * it, and the runner takes another instead of exiting. And while its task
 * runs, `leaserun run` over the same link is stopped likewise and takes
 * another lease too (run_stopped_after_its_grant). */
TEST(a_runner_whose_round_trip_to_etcd_is_over_a_third_of_its_ttl_keeps_its_lease)
{
	static struct proxy px;
	proxy_start(&px, etcdh_endpoint(cluster, 0), 400);
	int leases = etcdh_lease_count(cluster);
	CHECK(leases >= 0);
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "slow-link");
	/* Calls that outlast the stop: the grant's answer is read after it,
	 * not given up for a new grant. */
	const char *flags[] = { "--grace", "1", "--dial-timeout", "20", NULL };
	pid_t pid = fleet_spawn(&f, 0, "far", px.endpoint, flags);
	stop_once_granted(pid, leases);
	bool early = fleet_registered(&f, "far");
	lr_sleep_ms(3000);
	kill(pid, SIGCONT);
	if (early)
		TEST_FAIL("the runner registered before it was stopped: no lease expired "
		          "under it");
	/* Its start alone (seconds of round trips) outlasts the TTL. */
	fleet_submit(&f, "far", "{\"id\":\"%s\",\"max_attempts\":1,\"steps\":["
	             STEP("one", MARK_START "; sleep 0.5; " MARK_END) "]}");
	int64_t submitted = lr_wall_ms();
	/* Registered, the runner takes no other lease (that it keeps this one
	 * is checked below): `leaserun run`, whose grant is told by the count
	 * of leases, goes over the same link while the task makes its way. */
	for (int64_t end = lr_mono_ms() + 30000;
	     !fleet_registered(&f, "far") && lr_mono_ms() < end;)
		lr_sleep_ms(20);
	int status = 0;
	if (!fleet_registered(&f, "far") && waitpid(pid, &status, WNOHANG) == pid) {
		f.pids[0] = 0;
		TEST_FAIL("the runner exited (status %d); its log: %s/far.log", status, f.dir);
	}
	if (!fleet_registered(&f, "far"))
		TEST_FAIL("the runner did not register within 30 s; its log: %s/far.log", f.dir);
	run_stopped_after_its_grant(&f, px.endpoint);
	int64_t took = fleet_wait_state(&f, "far", LR_TASK_SUCCEEDED, 30000);
	mark ended;
	if (took >= 0 && find_mark(&f, true, "far", 0, "far", &ended))
		printf("# over a link of 0.8 s round trips: the task's step ended %" PRId64
		       " ms after its submit\n", ended.ns / 1000000 - submitted);
	if (took < 0 && waitpid(pid, &status, WNOHANG) == pid) {
		f.pids[0] = 0;
		TEST_FAIL("the runner exited (status %d); its log: %s/far.log", status, f.dir);
	}
	if (!fleet_log_has(&f, 0, "lease not found"))
		TEST_FAIL("the registration did not meet an expired lease; its log: "
		          "%s/far.log", f.dir);
	if (fleet_log_has(&f, 0, " lost ("))
		TEST_FAIL("the runner lost its lease; its log: %s/far.log", f.dir);
	CHECK(took >= 0);
	if (!fleet_log_has(&f, 0, "over a quarter of the TTL"))
		TEST_FAIL("no warning of the slow grant; its log: %s/far.log", f.dir);
	kill(pid, SIGTERM);
	CHECK_INT(fleet_wait(&f, 0, 15000), ==, 0);
	fleet_destroy(&f);
	proxy_stop(&px);
}

static int setup(void)
{
	etcdh_opts o = { .members = 1 };
	return etcdh_start(&o, &cluster);
}

static void teardown(void)
{
	if (step_group > 1 && group_alive(step_group))
		kill((pid_t)-step_group, SIGKILL);
	etcdh_destroy(cluster);
}

/* A retry whose reply is lost after etcd applied it: the client sends it
 * again, its compares fail (the result is gone), and it knows its own
 * history record: the task is pending once, with one entry of history. */
TEST(a_retry_whose_reply_is_lost_knows_its_own_write_when_sent_again)
{
	static struct proxy px;
	proxy_start(&px, etcdh_endpoint(cluster, 0), 0);
	fleet f;
	fleet_init(&f, px.endpoint, "lost-retry");
	fleet_submit(&f, "again", "{\"id\":\"%s\",\"steps\":[" STEP("s", "true") "]}");
	int already = -1;
	CHECK_OK(lr_cancel(f.client, "again", &already, &err), &err);
	CHECK_INT(already, ==, -1); /* it was pending: cancelled now */
	/* The retry reads the task (the first reply), then writes (the second,
	 * which is lost). */
	pthread_mutex_lock(&px.mu);
	px.lose_reply = 2;
	px.last_stream = 0;
	pthread_mutex_unlock(&px.mu);
	int64_t step = -1;
	CHECK_OK(lr_retry(f.client, "again", NULL, &step, &err), &err);
	pthread_mutex_lock(&px.mu);
	int left = px.lose_reply;
	pthread_mutex_unlock(&px.mu);
	CHECK_INT(left, ==, 0); /* the write's reply was the one lost */
	CHECK_INT(step, ==, 0);
	lr_task_status s;
	CHECK_OK(lr_task_get(f.client, "again", &s, &err), &err);
	CHECK_INT(s.state, ==, LR_TASK_PENDING);
	json_t *h = json_loads(s.history != NULL ? s.history : "", 0, NULL);
	CHECK_INT(json_array_size(h), ==, 1);
	CHECK_STR(json_string_value(json_object_get(json_array_get(h, 0), "status")),
	          "cancelled");
	json_decref(h);
	lr_task_status_clear(&s);
	fleet_destroy(&f);
	proxy_stop(&px);
}

/* A retry applied whose every reply, and every resend's, is lost: it
 * cannot tell, and says that its outcome is unknown (it did apply). */
TEST(a_retry_that_hears_no_reply_in_time_says_its_outcome_is_unknown)
{
	static struct proxy px;
	proxy_start(&px, etcdh_endpoint(cluster, 0), 0);
	fleet f;
	fleet_init(&f, etcdh_endpoint(cluster, 0), "unheard-retry");
	fleet_submit(&f, "again", "{\"id\":\"%s\",\"steps\":[" STEP("s", "true") "]}");
	int already = -1;
	CHECK_OK(lr_cancel(f.client, "again", &already, &err), &err);
	lr_client_opts o = { .endpoints = px.endpoint, .prefix = f.prefix, .call_timeout_s = 1 };
	lr_client *c;
	CHECK_OK(lr_client_open(&o, &c, &err), &err);
	pthread_mutex_lock(&px.mu);
	px.lose_reply = 2; /* the read is answered; the write and the rest are not */
	px.lose_rest = true;
	px.last_stream = 0;
	pthread_mutex_unlock(&px.mu);
	lr_err e = { 0 };
	CHECK_INT(lr_retry(c, "again", NULL, NULL, &e), ==, LR_EAMBIGUOUS);
	CHECK_HAS(e.msg, "retry again: outcome unknown, see leaserun status again");
	lr_client_close(c);
	lr_task_status s;
	CHECK_OK(lr_task_get(f.client, "again", &s, &err), &err);
	CHECK_INT(s.state, ==, LR_TASK_PENDING);
	lr_task_status_clear(&s);
	fleet_destroy(&f);
	proxy_stop(&px);
}

TEST_LIST(
	TEST_CASE(a_runner_cut_off_stops_its_step_by_its_lease_deadline_and_rejoins_with_a_new_lease),
	TEST_CASE(a_runner_whose_round_trip_to_etcd_is_over_a_third_of_its_ttl_keeps_its_lease),
	TEST_CASE(a_runner_cut_off_past_its_lease_deadline_acts_on_sigterm_after_one_call),
	TEST_CASE(a_retry_whose_reply_is_lost_knows_its_own_write_when_sent_again),
	TEST_CASE(a_retry_that_hears_no_reply_in_time_says_its_outcome_is_unknown),
);
TEST_MAIN(setup, teardown)
