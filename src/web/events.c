/* events.c - server-sent events: each open page gets the whole view once,
 * then every change the etcd watch brought, and whether etcd answers,
 * pushed by one publisher thread (changes in a burst go out together, at
 * most COALESCE_MS late).
 * Threads: web_events_open on a connection's thread, web_changed on the
 * etcd stream thread, the publisher on its own; all under w->mu. */
#include "web/web_int.h"

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
 * for all pages, and never below QUEUED_MIN (room for a snapshot); when it
 * comes back (EventSource reconnects by itself) it gets a new snapshot. */
#define QUEUED_TOTAL ((size_t)64 * 1024 * 1024)
#define QUEUED_MIN ((size_t)4 * 1024 * 1024)

/* What one stream may hold queued now: its share, and never less than
 * twice the last snapshot (a page must be able to take one in). Under
 * w->mu. */
static size_t max_queued(const lr_web *w)
{
	size_t share = QUEUED_TOTAL / (w->n_clients > 0 ? w->n_clients : 1);
	size_t floor = w->snapshot_len < QUEUED_MIN / 2 ? QUEUED_MIN : 2 * w->snapshot_len;
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

struct event {
	const char *text;
	size_t len, cap;
};

static bool takes(lr_http_stream *st, const void *arg)
{
	const struct event *ev = arg;
	return lr_http_stream_write(st, ev->text, ev->len, ev->cap);
}

/* "event: NAME\ndata: JSON\n\n" for every open stream; streams that
 * cannot take it are closed. Under w->mu. */
static void broadcast(lr_web *w, const char *text, size_t len)
{
	struct event ev = { text, len, max_queued(w) };
	prune(w, takes, &ev);
}

/* The event as text; NULL when out of memory. Steals msg. */
static char *event_text(const char *name, json_t *msg, size_t *len)
{
	char *data = json_dumps(msg, JSON_COMPACT);
	char *text = NULL;
	int n;

	json_decref(msg);
	if (data == NULL)
		return NULL;
	/* JSON_COMPACT escapes newlines in strings: the data is one line. */
	n = asprintf(&text, "event: %s\ndata: %s\n\n", name, data);
	free(data);
	if (n < 0)
		return NULL;
	*len = (size_t)n;
	return text;
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

void web_events_open(lr_web *w, lr_http_req *req)
{
	struct web_client *cl = NULL;
	size_t len = 0;
	char *text;

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
	/* Under w->mu: no change is published between the snapshot and
	 * the stream joining the others (a change may come twice; each
	 * says the whole state of what it changed). */
	pthread_mutex_lock(&w->mu);
	w->n_opening--;
	if (cl == NULL) {
		pthread_mutex_unlock(&w->mu);
		return;
	}
	text = event_text("snapshot", snapshot(w), &len);
	if (text != NULL)
		w->snapshot_len = len;
	size_t cap = max_queued(w);
	lr_http_stream_write(cl->stream, "retry: 2000\n\n", 13, cap);
	if (text == NULL || !lr_http_stream_write(cl->stream, text, len, cap)) {
		lr_http_stream_close(cl->stream);
		free(cl);
	} else {
		cl->next = w->clients;
		w->clients = cl;
		w->n_clients++;
		/* The publisher asks for the runners' TTLs now that a page
		 * shows them. */
		w->kicked = true;
		pthread_cond_signal(&w->cond);
	}
	pthread_mutex_unlock(&w->mu);
	free(text);
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
static char *next_message(lr_web *w, bool ttls, size_t *len)
{
	lr_err err = { 0 };

	if (lr_fleet_needs_resync(w->fleet)) {
		if (lr_fleet_resync(w->fleet, &err) != 0)
			return NULL;
		/* The changes the read brought are in the snapshot. */
		json_decref(lr_fleet_take_changes(w->fleet));
		return event_text("snapshot", snapshot(w), len);
	}
	if (ttls)
		lr_fleet_refresh_ttls(w->fleet);
	json_t *changes = lr_fleet_take_changes(w->fleet);
	return changes != NULL ? event_text("update", changes, len) : NULL;
}

/* "etcd unreachable" or "etcd back" to every page, before the changes:
 * those may wait for etcd calls. Under w->mu. */
static void publish_etcd(lr_web *w)
{
	json_t *o = lr_fleet_take_etcd(w->fleet);
	size_t len = 0;
	char *text = o != NULL ? event_text("etcd", o, &len) : NULL;

	if (text != NULL)
		broadcast(w, text, len);
	free(text);
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
		size_t len = 0;
		char *text = next_message(w, ttls, &len);
		pthread_mutex_lock(&w->mu);
		if (text != NULL)
			broadcast(w, text, len);
		free(text);
		if (lr_mono_ms() >= next_beat) {
			broadcast(w, ": ping\n\n", 8);
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
	pthread_mutex_unlock(&w->mu);
}
