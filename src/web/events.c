/* events.c - server-sent events: each open page gets the whole view once,
 * then every change the etcd watch brought, and whether etcd answers,
 * pushed by one publisher thread (changes in a burst go out together, at
 * most COALESCE_MS late). Each event's text is built once and queued on
 * every stream by reference; so is the snapshot, which pages that open
 * share: it is built again only once the events sent since it weigh half
 * as much as it does, and until then a page that opens gets it and those
 * events after it.
 * Threads: web_events_open on a connection's thread, web_changed on the
 * etcd stream thread, the publisher on its own; all under w->mu, except
 * while building the shared snapshot (w->building). */
#include "web/web_int.h"

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"

/* Changes that come in a burst are sent together. */
#define COALESCE_MS 100
/* A comment line keeps proxies from closing a quiet stream. */
#define HEARTBEAT_MS 15000
/* How often runners' lease TTLs are asked while a page is open. */
#define TTL_REFRESH_MS 2000
/* A view that could not be read again is retried this often. */
#define RESYNC_RETRY_MS 1000
/* A page that stops reading is dropped past its share of this much queued
 * for all pages, and never below QUEUED_MIN nor three snapshots (room for
 * the snapshot and what follows it); when it comes back (EventSource
 * reconnects by itself) it gets a snapshot again. What is queued counts
 * whole, though shared: the bound is on what a page holds back. */
#define QUEUED_TOTAL ((size_t)64 * 1024 * 1024)
#define QUEUED_MIN ((size_t)4 * 1024 * 1024)
/* The shared snapshot is built again once the events since it pass half
 * its size (and this), or this many events. */
#define SINCE_MIN_BYTES ((size_t)64 * 1024)
#define SINCE_MAX 4096

struct web_text {
	atomic_size_t refs;
	size_t len;
	char data[];
};

/* "event: NAME\ndata: JSON\n\n" with one reference; NULL when out of
 * memory. Steals msg. */
static struct web_text *text_new(const char *name, json_t *msg)
{
	char *data = json_dumps(msg, JSON_COMPACT);
	struct web_text *t = NULL;

	json_decref(msg);
	if (data == NULL)
		return NULL;
	/* JSON_COMPACT escapes newlines in strings: the data is one line. */
	size_t len = strlen("event: \ndata: \n\n") + strlen(name) + strlen(data);
	t = malloc(sizeof(*t) + len + 1);
	if (t != NULL) {
		atomic_init(&t->refs, 1);
		t->len = len;
		snprintf(t->data, len + 1, "event: %s\ndata: %s\n\n", name, data);
	}
	free(data);
	return t;
}

/* Drop a reference (the release of lr_http_stream_write_shared). */
static void text_unref(void *arg)
{
	struct web_text *t = arg;

	if (t != NULL && atomic_fetch_sub(&t->refs, 1) == 1)
		free(t);
}

/* Queue t on st with a reference of the stream's own. */
static bool queue_text(lr_http_stream *st, struct web_text *t, size_t cap)
{
	atomic_fetch_add(&t->refs, 1);
	if (lr_http_stream_write_shared(st, t->data, t->len, text_unref, t, cap))
		return true;
	text_unref(t);
	return false;
}

/* What one stream may hold queued now: its share, and never less than
 * three snapshots (a page must be able to take one in, with the events
 * since it and those that come while it reads). Under w->mu. */
static size_t max_queued(const lr_web *w)
{
	size_t share = QUEUED_TOTAL / (w->n_clients > 0 ? w->n_clients : 1);
	size_t floor = w->snapshot_len < QUEUED_MIN / 3 ? QUEUED_MIN : 3 * w->snapshot_len;
	return share > floor ? share : floor;
}

/* Close the streams that `keep` refuses. Under w->mu. */
static void prune(lr_web *w, bool (*keep)(lr_http_stream *st, const void *arg), const void *arg)
{
	struct web_client **p = &w->clients;
	while (*p != NULL) {
		struct web_client *cl = *p;
		if (keep(cl->stream, arg)) {
			p = &cl->next;
			continue;
		}
		*p = cl->next;
		lr_http_stream_close(cl->stream);
		free(cl);
		w->n_clients--;
	}
}

static bool still_there(lr_http_stream *st, const void *arg)
{
	(void)arg;
	return !lr_http_stream_gone(st);
}

/* Close the streams whose page has gone: a page that is reloaded takes
 * its place back at once. Under w->mu. */
static void drop_gone(lr_web *w)
{
	prune(w, still_there, NULL);
}

static const lr_http_header_kv stream_headers[] = {
	{ "X-Accel-Buffering", "no" }, /* nginx: pass events on at once */
	{ NULL, NULL },
};

/* An event for every stream: a shared text, or a few bytes copied. */
struct event {
	struct web_text *text;
	const char *bytes;
	size_t len, cap;
};

static bool takes(lr_http_stream *st, const void *arg)
{
	const struct event *ev = arg;
	if (ev->text != NULL)
		return queue_text(st, ev->text, ev->cap);
	return lr_http_stream_write(st, ev->bytes, ev->len, ev->cap);
}

/* Drop the shared snapshot and the events since it. Under w->mu. */
static void forget_snapshot(lr_web *w)
{
	text_unref(w->snap);
	w->snap = NULL;
	for (size_t i = 0; i < w->n_since; i++)
		text_unref(w->since[i]);
	w->n_since = 0;
	w->since_bytes = 0;
}

/* Past this, the events since the shared snapshot are worth a new one. */
static size_t since_limit(const lr_web *w)
{
	size_t half = w->snapshot_len / 2;
	return half > SINCE_MIN_BYTES ? half : SINCE_MIN_BYTES;
}

/* t goes to pages that open later, after the shared snapshot. Under
 * w->mu. */
static void keep_since(lr_web *w, struct web_text *t)
{
	if (w->snap == NULL && !w->building)
		return;
	if (!w->building && (w->since_bytes + t->len > since_limit(w) ||
	                     w->n_since == SINCE_MAX)) {
		forget_snapshot(w); /* the next page builds a new one */
		return;
	}
	if (w->n_since == w->cap_since) {
		size_t cap = w->cap_since ? w->cap_since * 2 : 16;
		struct web_text **nv = realloc(w->since, cap * sizeof(*nv));
		if (nv == NULL) {
			/* A snapshot being built would miss t: it is not used. */
			forget_snapshot(w);
			w->since_lost = w->building;
			return;
		}
		w->since = nv;
		w->cap_since = cap;
	}
	atomic_fetch_add(&t->refs, 1);
	w->since[w->n_since++] = t;
	w->since_bytes += t->len;
}

/* The event t to every open stream; streams that cannot take it are
 * closed. Under w->mu. */
static void broadcast(lr_web *w, struct web_text *t)
{
	struct event ev = { .text = t, .cap = max_queued(w) };
	prune(w, takes, &ev);
	keep_since(w, t);
}

/* The whole view, and what the page needs to know about this server. */
static json_t *snapshot(lr_web *w)
{
	json_t *o = lr_fleet_snapshot(w->fleet);
	json_t *config = json_object();

	json_object_set_new(config, "prefix",
	                    json_string(lr_client_prefix(w->client)));
	json_object_set_new(config, "allow_cancel", json_boolean(w->allow_cancel));
	json_object_set_new(o, "config", config);
	return o;
}

/* The shared snapshot for a page that opens now (the events since it
 * follow in w->since): the one there is, unless the events since it have
 * grown past since_limit; then a new one, built by one page while those
 * that open meanwhile wait for it. NULL when out of memory. Under w->mu,
 * released while building. */
static struct web_text *shared_snapshot(lr_web *w)
{
	while (w->building)
		pthread_cond_wait(&w->built, &w->mu);
	if (w->snap != NULL)
		return w->snap;
	/* Events sent from now on may be missing from it: they follow it. */
	w->building = true;
	w->since_lost = false;
	pthread_mutex_unlock(&w->mu);
	struct web_text *t = text_new("snapshot", snapshot(w));
	pthread_mutex_lock(&w->mu);
	w->building = false;
	w->snapshots_built++;
	pthread_cond_broadcast(&w->built);
	if (t == NULL || w->since_lost) {
		text_unref(t);
		forget_snapshot(w);
		return NULL;
	}
	w->snap = t;
	w->snapshot_len = t->len;
	return t;
}

/* Queue the snapshot and what followed it on a stream that opens. Under
 * w->mu. */
static bool send_snapshot(lr_web *w, lr_http_stream *st)
{
	struct web_text *snap = shared_snapshot(w);
	size_t cap = max_queued(w);
	bool ok = snap != NULL && lr_http_stream_write(st, "retry: 2000\n\n", 13, cap) &&
	          queue_text(st, snap, cap);

	for (size_t i = 0; ok && i < w->n_since; i++)
		ok = queue_text(st, w->since[i], cap);
	return ok;
}

void web_events_open(lr_web *w, lr_http_req *req)
{
	struct web_client *cl = NULL;

	/* A place among the streams, taken before the reply starts: pages
	 * opening at once cannot take more than max_streams together. */
	pthread_mutex_lock(&w->mu);
	drop_gone(w);
	bool full = w->n_clients + w->n_opening >= w->max_streams;
	if (!full)
		w->n_opening++;
	pthread_mutex_unlock(&w->mu);
	if (full) {
		lr_http_reply_text(req, 503, "too many pages open at once\n");
		return;
	}
	cl = calloc(1, sizeof(*cl));
	if (cl == NULL)
		lr_http_reply_text(req, 503, "out of memory\n");
	else if ((cl->stream = lr_http_reply_stream(req, "text/event-stream",
	                                            stream_headers)) == NULL)
		free(cl), cl = NULL;
	/* Under w->mu: no change is published between the snapshot (and
	 * the events since it) and the stream joining the others (a change
	 * may come twice; each says the whole state of what it changed). */
	pthread_mutex_lock(&w->mu);
	if (cl != NULL && !send_snapshot(w, cl->stream)) {
		lr_http_stream_close(cl->stream);
		free(cl);
	} else if (cl != NULL) {
		cl->next = w->clients;
		w->clients = cl;
		w->n_clients++;
		/* The publisher asks for the runners' TTLs now that a page
		 * shows them. */
		w->kicked = true;
		pthread_cond_signal(&w->cond);
	}
	w->n_opening--;
	pthread_mutex_unlock(&w->mu);
}

void web_changed(void *user)
{
	lr_web *w = user;

	pthread_mutex_lock(&w->mu);
	w->kicked = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->mu);
}

/* Wait on w->cond until the monotonic time `until` (ms), a kick, or stop.
 * Under w->mu. The condition variable uses the monotonic clock. */
static void wait_until(lr_web *w, int64_t until)
{
	struct timespec ts;
	int64_t now = lr_mono_ms();

	if (until <= now)
		return;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	int64_t ns = ts.tv_nsec + (until - now) % 1000 * 1000000;
	ts.tv_sec += (until - now) / 1000 + ns / 1000000000;
	ts.tv_nsec = ns % 1000000000;
	pthread_cond_timedwait(&w->cond, &w->mu, &ts);
}

/* What one round of the publisher sends: a new snapshot after the view
 * was read again, otherwise the changes. Without w->mu (etcd calls). */
static struct web_text *next_message(lr_web *w, bool ttls)
{
	lr_err err = { 0 };

	if (lr_fleet_needs_resync(w->fleet)) {
		if (lr_fleet_resync(w->fleet, &err) != 0)
			return NULL;
		/* The changes the read brought are in the snapshot. */
		json_decref(lr_fleet_take_changes(w->fleet));
		return text_new("snapshot", snapshot(w));
	}
	if (ttls)
		lr_fleet_refresh_ttls(w->fleet);
	json_t *changes = lr_fleet_take_changes(w->fleet);
	return changes != NULL ? text_new("update", changes) : NULL;
}

/* "etcd unreachable" or "etcd back" to every page, before the changes:
 * those may wait for etcd calls. Under w->mu. */
static void publish_etcd(lr_web *w)
{
	json_t *o = lr_fleet_take_etcd(w->fleet);
	struct web_text *t = o != NULL ? text_new("etcd", o) : NULL;

	if (t != NULL)
		broadcast(w, t);
	text_unref(t);
	/* A page that opens during an outage learns it from its snapshot
	 * (outages are rare: the rebuild costs little). */
	if (t != NULL && !w->building)
		forget_snapshot(w);
}

void *web_publisher_main(void *arg)
{
	lr_web *w = arg;
	int64_t next_beat = lr_mono_ms() + HEARTBEAT_MS, next_ttl = 0;

	pthread_mutex_lock(&w->mu);
	while (!w->stop) {
		int64_t now = lr_mono_ms();
		int64_t due = next_beat;
		bool resync = lr_fleet_needs_resync(w->fleet);
		if (w->n_clients > 0 && next_ttl < due)
			due = next_ttl;
		if (resync && now + RESYNC_RETRY_MS < due)
			due = now + RESYNC_RETRY_MS;
		if (!w->kicked && now < due) {
			wait_until(w, due);
			continue;
		}
		if (w->kicked) {
			int64_t until = lr_mono_ms() + COALESCE_MS;
			while (!w->stop && lr_mono_ms() < until)
				wait_until(w, until);
			w->kicked = false;
		}
		bool ttls = w->n_clients > 0 && lr_mono_ms() >= next_ttl;
		if (ttls)
			next_ttl = lr_mono_ms() + TTL_REFRESH_MS;
		/* Not while etcd is unreachable: each ask would wait for its
		 * timeout. */
		ttls = ttls && !lr_fleet_etcd_down(w->fleet);
		publish_etcd(w);
		pthread_mutex_unlock(&w->mu);
		struct web_text *t = next_message(w, ttls);
		pthread_mutex_lock(&w->mu);
		if (t != NULL)
			broadcast(w, t);
		text_unref(t);
		if (lr_mono_ms() >= next_beat) {
			struct event ping = { .bytes = ": ping\n\n", .len = 8,
				              .cap = max_queued(w) };
			prune(w, takes, &ping); /* no page needs it later */
			next_beat = lr_mono_ms() + HEARTBEAT_MS;
		}
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

void web_events_close_all(lr_web *w)
{
	pthread_mutex_lock(&w->mu);
	while (w->clients != NULL) {
		struct web_client *cl = w->clients;
		w->clients = cl->next;
		lr_http_stream_close(cl->stream);
		free(cl);
	}
	w->n_clients = 0;
	forget_snapshot(w);
	free(w->since);
	w->since = NULL;
	w->cap_since = 0;
	pthread_mutex_unlock(&w->mu);
}
