/* watch.c - many watchers on one Watch stream: requests built and replies
 * read here, including etcd's refusal of the stream's token; an outage of
 * the stream told to every watcher (DOWN, then UP).
 *
 * Threads: stream callbacks run on the client's stream thread; add/cancel on
 * any thread. w->mu guards the watcher table; it is taken before the
 * stream thread's lock and released while a watcher's callback runs. Watch
 * ids are chosen here (etcd >= 3.4 accepts them), so a re-created watcher
 * keeps its id across reconnects. */
#include "etcd/watch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.pb-c.h"

#include "base/clock.h"
#include "base/error.h"
#include "etcd/auth.h"
#include "etcd/rpc.h"
#include "etcd/stream.h"
#include "etcd/transport.h"

enum wstate {
	W_UNSENT,  /* to be created when the stream is (re)opened */
	W_PENDING, /* create sent, awaiting `created` */
	W_ACTIVE,
	W_DEAD,    /* compacted or cancelled by etcd */
};

struct lr_watcher {
	lr_watch *w;
	int64_t id;
	char *key;
	char *end;        /* explicit range end, or NULL: from flags */
	int flags;
	int64_t next_rev; /* 0: "from now", until the created reply */
	uint64_t sent;    /* order of its create on the current call */
	enum wstate state;
	bool told_down;   /* got DOWN, not yet UP */
	lr_watch_fn fn;
	void *user;
	lr_watcher *next;
};

/* A member that is paused or cut off keeps its connection but says nothing,
 * and gRPC's own keepalive takes about 15 s to notice. So while watchers
 * exist, the stream asks for a progress report every LR_WATCH_PROBE_MS and
 * reconnects (to another member) when nothing at all arrived for
 * LR_WATCH_SILENCE_MS after a probe. */
#define LR_WATCH_PROBE_MS 1000
#define LR_WATCH_SILENCE_MS 3000

struct lr_watch {
	lr_stream *stream;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	lr_watcher *watchers;
	int64_t next_id;
	uint64_t creates;    /* creates sent: etcd answers them in order */
	lr_watcher *delivering;
	int64_t last_rx;     /* when the stream last said anything */
	int64_t probe_at;    /* next progress request */
	int64_t probe_sent;  /* first unanswered probe, 0: none */
	/* Outages: the stream ended at down_at (monotonic, 0: up) and no
	 * reply came since; DOWN goes out LR_WATCH_DOWN_AFTER_MS later. */
	const char *endpoints; /* the client's, borrowed */
	int64_t heard_wall;    /* wall clock of the last reply */
	int64_t down_at;
	bool silenced;         /* the last end was our reset for silence */
	char down_why[256];
};

static int send_create(lr_watch *w, lr_watcher *wr)
{
	Etcdserverpb__WatchCreateRequest cr = ETCDSERVERPB__WATCH_CREATE_REQUEST__INIT;
	size_t klen = strlen(wr->key);
	char *end = malloc(klen + 2);
	if (end == NULL)
		return LR_ENOMEM;
	cr.key = (ProtobufCBinaryData){ klen, (uint8_t *)wr->key };
	size_t n = wr->end != NULL ? strlen(wr->end)
	                           : lr_range_end(wr->key, wr->flags & LR_KEY_PREFIX, end);
	if (wr->end != NULL)
		cr.range_end = (ProtobufCBinaryData){ n, (uint8_t *)wr->end };
	else if (n > 0)
		cr.range_end = (ProtobufCBinaryData){ n, (uint8_t *)end };
	cr.start_revision = wr->next_rev;
	cr.prev_kv = (wr->flags & LR_WATCH_PREV_KV) != 0;
	cr.watch_id = wr->id;
	Etcdserverpb__WatchRequest req = ETCDSERVERPB__WATCH_REQUEST__INIT;
	req.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
	req.create_request = &cr;
	int rc = lr_stream_send(w->stream, &req.base);
	free(end);
	if (rc == 0) {
		wr->state = W_PENDING;
		wr->sent = ++w->creates;
	}
	return rc;
}

/* The watcher whose create etcd answers next: the pending one sent
 * first. A create etcd refuses (no permission on its keys) comes back
 * with watch id -1, not its own. */
static lr_watcher *oldest_pending(lr_watch *w)
{
	lr_watcher *oldest = NULL;
	for (lr_watcher *wr = w->watchers; wr != NULL; wr = wr->next)
		if (wr->state == W_PENDING && (oldest == NULL || wr->sent < oldest->sent))
			oldest = wr;
	return oldest;
}

static void send_cancel(lr_watch *w, int64_t id)
{
	Etcdserverpb__WatchCancelRequest cr = ETCDSERVERPB__WATCH_CANCEL_REQUEST__INIT;
	cr.watch_id = id;
	Etcdserverpb__WatchRequest req = ETCDSERVERPB__WATCH_REQUEST__INIT;
	req.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_CANCEL_REQUEST;
	req.cancel_request = &cr;
	lr_stream_send(w->stream, &req.base);
}

static lr_watcher *find(lr_watch *w, int64_t id)
{
	for (lr_watcher *wr = w->watchers; wr != NULL; wr = wr->next)
		if (wr->id == id)
			return wr;
	return NULL;
}

static void w_opened(void *owner, lr_stream *s)
{
	lr_watch *w = owner;
	pthread_mutex_lock(&w->mu);
	w->last_rx = lr_mono_ms();
	w->probe_sent = 0;
	w->probe_at = w->last_rx + LR_WATCH_PROBE_MS;
	for (lr_watcher *wr = w->watchers; wr != NULL; wr = wr->next)
		if (wr->state == W_UNSENT)
			send_create(w, wr);
	pthread_mutex_unlock(&w->mu);
	lr_stream_kick(s); /* the probe starts over on the new call */
}

static void w_closed(void *owner, int code, const char *why)
{
	lr_watch *w = owner;
	(void)code;
	pthread_mutex_lock(&w->mu);
	for (lr_watcher *wr = w->watchers; wr != NULL; wr = wr->next)
		if (wr->state == W_PENDING || wr->state == W_ACTIVE)
			wr->state = W_UNSENT;
	if (w->down_at == 0)
		w->down_at = lr_mono_ms();
	/* Our own reset ends the call as cancelled: what led to it says more. */
	if (w->silenced)
		snprintf(w->down_why, sizeof(w->down_why), "no reply for %d s",
		         LR_WATCH_SILENCE_MS / 1000);
	else
		snprintf(w->down_why, sizeof(w->down_why), "%s", why);
	w->silenced = false;
	pthread_mutex_unlock(&w->mu);
	lr_stream_kick(w->stream); /* DOWN is due at a tick */
}

/* Watchers that need the stream, now or once it is open again. */
static bool any_live(const lr_watch *w)
{
	for (const lr_watcher *wr = w->watchers; wr != NULL; wr = wr->next)
		if (wr->state != W_DEAD)
			return true;
	return false;
}

static void deliver(lr_watch *w, lr_watcher *wr, const lr_watch_batch *b);

/* The next watcher to tell DOWN (up false) or UP (up true), or NULL. */
static lr_watcher *to_tell(lr_watch *w, bool up)
{
	for (lr_watcher *wr = w->watchers; wr != NULL; wr = wr->next)
		if (up ? wr->told_down : !wr->told_down && wr->state != W_DEAD)
			return wr;
	return NULL;
}

/* Tell every live watcher not told yet that the stream is down; w->mu
 * held. The list is searched again after each call: it may change while
 * w->mu is released. */
static void tell_down(lr_watch *w)
{
	lr_watch_batch b = { .kind = LR_WATCH_DOWN, .reason = w->down_why,
		             .endpoint = w->endpoints, .heard_ms = w->heard_wall };
	for (lr_watcher *wr; (wr = to_tell(w, false)) != NULL;) {
		wr->told_down = true;
		deliver(w, wr, &b);
	}
}

/* A reply came: the stream is up. Tell those that were told DOWN; w->mu
 * held. */
static void tell_up(lr_watch *w)
{
	lr_watch_batch b = { .kind = LR_WATCH_UP };
	w->down_at = 0;
	for (lr_watcher *wr; (wr = to_tell(w, true)) != NULL;) {
		wr->told_down = false;
		deliver(w, wr, &b);
	}
}

static void send_progress(lr_watch *w)
{
	Etcdserverpb__WatchProgressRequest pr = ETCDSERVERPB__WATCH_PROGRESS_REQUEST__INIT;
	Etcdserverpb__WatchRequest req = ETCDSERVERPB__WATCH_REQUEST__INIT;
	req.request_union_case = ETCDSERVERPB__WATCH_REQUEST__REQUEST_UNION_PROGRESS_REQUEST;
	req.progress_request = &pr;
	lr_stream_send(w->stream, &req.base);
}

static int64_t w_tick(void *owner, int64_t now)
{
	lr_watch *w = owner;
	bool reset = false;
	int64_t next = INT64_MAX;
	pthread_mutex_lock(&w->mu);
	if (w->down_at != 0 && now - w->down_at >= LR_WATCH_DOWN_AFTER_MS)
		tell_down(w);
	else if (w->down_at != 0)
		next = w->down_at + LR_WATCH_DOWN_AFTER_MS;
	if (any_live(w)) {
		if (w->probe_sent != 0 && w->last_rx < w->probe_sent &&
		    now - w->last_rx >= LR_WATCH_SILENCE_MS) {
			reset = true;
			w->silenced = true;
			w->probe_sent = 0;
		} else if (now >= w->probe_at) {
			send_progress(w);
			if (w->probe_sent == 0 || w->last_rx >= w->probe_sent)
				w->probe_sent = now;
			w->probe_at = now + LR_WATCH_PROBE_MS;
		}
		if (w->probe_at < next)
			next = w->probe_at;
		if (w->probe_sent != 0 && w->last_rx + LR_WATCH_SILENCE_MS < next)
			next = w->last_rx + LR_WATCH_SILENCE_MS;
	}
	pthread_mutex_unlock(&w->mu);
	if (reset)
		lr_stream_reset(w->stream, "watch stream silent");
	return next;
}

/* Build the events of r not yet delivered (mod_rev >= next_rev). The key
 * copies live in *keys, freed by the caller. */
static size_t build_events(const Etcdserverpb__WatchResponse *r, int64_t next_rev,
                           lr_watch_event *ev, char **keys)
{
	size_t total = 0;
	for (size_t i = 0; i < r->n_events; i++) {
		total += r->events[i]->kv != NULL ? r->events[i]->kv->key.len + 1 : 1;
		if (r->events[i]->prev_kv != NULL)
			total += r->events[i]->prev_kv->key.len + 1;
	}
	char *p = malloc(total + 1);
	*keys = p;
	if (p == NULL)
		return 0;
	size_t n = 0;
	for (size_t i = 0; i < r->n_events; i++) {
		const Mvccpb__Event *e = r->events[i];
		if (e->kv == NULL || e->kv->mod_revision < next_rev)
			continue; /* already delivered before a reconnect */
		memset(&ev[n], 0, sizeof(ev[n]));
		ev[n].type = e->type == MVCCPB__EVENT__EVENT_TYPE__DELETE ? LR_EV_DELETE : LR_EV_PUT;
		lr_kv_view(&ev[n].kv, e->kv, p);
		p += e->kv->key.len + 1;
		if (e->prev_kv != NULL) {
			ev[n].has_prev = true;
			lr_kv_view(&ev[n].prev, e->prev_kv, p);
			p += e->prev_kv->key.len + 1;
		}
		n++;
	}
	return n;
}

/* Call the watcher's function with w->mu released; w->mu held on entry and
 * return. */
static void deliver(lr_watch *w, lr_watcher *wr, const lr_watch_batch *b)
{
	w->delivering = wr;
	pthread_mutex_unlock(&w->mu);
	wr->fn(wr->user, b);
	pthread_mutex_lock(&w->mu);
	w->delivering = NULL;
	pthread_cond_broadcast(&w->cond);
}

/* etcd 3.4 checks a Watch stream's token on every watch create, not when
 * the stream opens, and refuses a create with an expired token in a reply
 * (watch id -1, canceled, the reason as text) while the stream stays open.
 * Then the stream must start over with a new token: the watchers are
 * created again when it reopens. */
static bool token_refused(const Etcdserverpb__WatchResponse *r)
{
	return r->canceled && r->cancel_reason != NULL &&
	       lr__token_refused_text(r->cancel_reason, strlen(r->cancel_reason));
}

static void w_message(void *owner, const uint8_t *data, size_t len)
{
	lr_watch *w = owner;
	Etcdserverpb__WatchResponse *r = (Etcdserverpb__WatchResponse *)lr__unpack(
	    &etcdserverpb__watch_response__descriptor, len, data);
	if (r == NULL)
		return;
	bool refused = token_refused(r), created = r->created && !r->canceled;
	int64_t rev = r->header != NULL ? r->header->revision : 0;
	lr_watch_event *ev = NULL;
	char *keys = NULL;
	pthread_mutex_lock(&w->mu);
	w->last_rx = lr_mono_ms();
	w->heard_wall = lr_wall_ms();
	if (w->down_at != 0)
		tell_up(w);
	lr_watcher *wr = find(w, r->watch_id);
	if (wr == NULL && r->watch_id == -1 && r->canceled && !refused)
		wr = oldest_pending(w);
	if (wr == NULL || wr->state == W_DEAD)
		goto out;
	lr_watch_batch b = { .revision = rev };
	if (r->compact_revision > 0 || r->canceled) {
		/* etcd (3.4, 3.5) keeps a compacted watcher on the stream, and
		 * counts it, until the client cancels it or the stream ends:
		 * without this, each compacted watcher stays there for the
		 * stream's life. A cancelled one is gone already. */
		if (r->compact_revision > 0)
			send_cancel(w, wr->id);
		wr->state = W_DEAD;
		b.kind = r->compact_revision > 0 ? LR_WATCH_COMPACTED : LR_WATCH_CANCELLED;
		b.compact_revision = r->compact_revision;
		b.reason = r->cancel_reason != NULL && r->cancel_reason[0] ? r->cancel_reason
		                                                          : "cancelled by etcd";
		deliver(w, wr, &b);
		goto out;
	}
	if (r->created) {
		wr->state = W_ACTIVE;
		if (wr->next_rev == 0)
			wr->next_rev = rev + 1;
		b.kind = LR_WATCH_CREATED;
		deliver(w, wr, &b);
		goto out;
	}
	if (r->n_events == 0) {
		if (rev + 1 > wr->next_rev)
			wr->next_rev = rev + 1;
		b.kind = LR_WATCH_PROGRESS;
		deliver(w, wr, &b);
		goto out;
	}
	ev = calloc(r->n_events, sizeof(*ev));
	if (ev == NULL)
		goto out;
	b.kind = LR_WATCH_EVENTS;
	b.n = build_events(r, wr->next_rev, ev, &keys);
	b.events = ev;
	if (b.n == 0)
		goto out;
	wr->next_rev = ev[b.n - 1].kv.mod_rev + 1;
	deliver(w, wr, &b);
out:
	pthread_mutex_unlock(&w->mu);
	free(ev);
	free(keys);
	lr_etcd_reply_free(&r->base);
	if (refused)
		lr_stream_renew_token(w->stream);
	else if (created)
		lr_stream_healthy(w->stream);
}

static const lr_stream_ops watch_ops = {
	.opened = w_opened,
	.message = w_message,
	.closed = w_closed,
	.tick = w_tick,
};

int lr_watch_new(lr_etcd *c, lr_watch **out, lr_err *err)
{
	lr_watch *w = calloc(1, sizeof(*w));
	if (w == NULL)
		return lr_err_set(err, LR_ENOMEM, "watch: out of memory");
	w->next_id = 1;
	w->endpoints = lr_etcd_endpoints(c);
	w->heard_wall = lr_wall_ms();
	pthread_mutex_init(&w->mu, NULL);
	pthread_cond_init(&w->cond, NULL);
	int rc = lr_stream_add(lr_etcd_streams(c), "/etcdserverpb.Watch/Watch", &watch_ops, w, &w->stream, err);
	if (rc != 0) {
		pthread_cond_destroy(&w->cond);
		pthread_mutex_destroy(&w->mu);
		free(w);
		return rc;
	}
	*out = w;
	return 0;
}

static void free_watcher(lr_watcher *wr)
{
	free(wr->key);
	free(wr->end);
	free(wr);
}

void lr_watch_free(lr_watch *w)
{
	if (w == NULL)
		return;
	lr_stream_remove(w->stream);
	while (w->watchers != NULL) {
		lr_watcher *wr = w->watchers;
		w->watchers = wr->next;
		free_watcher(wr);
	}
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->mu);
	free(w);
}

static int add(lr_watch *w, const char *key, const char *end, int flags,
               int64_t start_rev, lr_watch_fn fn, void *user, lr_watcher **out,
               lr_err *err)
{
	lr_watcher *wr = calloc(1, sizeof(*wr));
	if (wr == NULL || (wr->key = strdup(key)) == NULL ||
	    (end != NULL && (wr->end = strdup(end)) == NULL)) {
		if (wr != NULL)
			free(wr->key);
		free(wr);
		return lr_err_set(err, LR_ENOMEM, "watch %s: out of memory", key);
	}
	wr->w = w;
	wr->flags = flags;
	wr->next_rev = start_rev;
	wr->fn = fn;
	wr->user = user;
	wr->state = W_UNSENT;
	pthread_mutex_lock(&w->mu);
	wr->id = w->next_id++;
	wr->next = w->watchers;
	w->watchers = wr;
	send_create(w, wr); /* when the stream is down, `opened` sends it */
	pthread_mutex_unlock(&w->mu);
	lr_stream_kick(w->stream); /* start probing if it was idle */
	*out = wr;
	return 0;
}

int lr_watch_add(lr_watch *w, const char *key, int flags, int64_t start_rev,
                 lr_watch_fn fn, void *user, lr_watcher **out, lr_err *err)
{
	return add(w, key, NULL, flags, start_rev, fn, user, out, err);
}

int lr_watch_add_range(lr_watch *w, const char *key, const char *end, int flags,
                       int64_t start_rev, lr_watch_fn fn, void *user, lr_watcher **out,
                       lr_err *err)
{
	return add(w, key, end, flags & ~LR_KEY_PREFIX, start_rev, fn, user, out, err);
}

void lr_watcher_cancel(lr_watcher *wr)
{
	lr_watch *w = wr->w;
	pthread_mutex_lock(&w->mu);
	for (lr_watcher **pp = &w->watchers; *pp != NULL; pp = &(*pp)->next)
		if (*pp == wr) {
			*pp = wr->next;
			break;
		}
	if (wr->state == W_PENDING || wr->state == W_ACTIVE)
		send_cancel(w, wr->id);
	while (w->delivering == wr && !lr_stream_on_thread(w->stream))
		pthread_cond_wait(&w->cond, &w->mu);
	pthread_mutex_unlock(&w->mu);
	free_watcher(wr);
}
