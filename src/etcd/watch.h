/* watch.h - etcd watches: many watchers on one Watch stream, each resuming
 * from its last seen revision + 1 after a reconnect, so that nothing is lost
 * or repeated; compaction is reported so the owner can re-read, and an
 * outage of the stream so that a display can say its data is old. */
#ifndef LR_ETCD_WATCH_H
#define LR_ETCD_WATCH_H

#include <stdbool.h>
#include <stdint.h>

#include "etcd/kv.h"

typedef struct lr_watch lr_watch;
typedef struct lr_watcher lr_watcher;

enum lr_event_type { LR_EV_PUT = 0, LR_EV_DELETE = 1 };

typedef struct lr_watch_event {
	enum lr_event_type type;
	lr_kv kv;      /* for a DELETE: the key and the deletion's mod_rev */
	bool has_prev;
	lr_kv prev;    /* with LR_WATCH_PREV_KV */
} lr_watch_event;

enum lr_watch_kind {
	LR_WATCH_EVENTS,    /* events in revision order */
	LR_WATCH_CREATED,   /* the watch is live as of `revision` */
	LR_WATCH_PROGRESS,  /* nothing changed up to `revision` */
	LR_WATCH_COMPACTED, /* events were compacted away: re-read, re-watch */
	LR_WATCH_CANCELLED, /* etcd refused or ended the watch (`reason`) */
	LR_WATCH_DOWN,      /* no etcd member has answered on the stream for
	                       LR_WATCH_DOWN_AFTER_MS (`endpoint`, `reason`,
	                       `heard_ms`); the watcher lives on */
	LR_WATCH_UP,        /* after a DOWN: etcd answers again; events resume
	                       where they stopped */
};

/* A stream that reconnects (to another member) within this long was not
 * down: DOWN comes only after it. */
#define LR_WATCH_DOWN_AFTER_MS 1000

typedef struct lr_watch_batch {
	enum lr_watch_kind kind;
	int64_t revision;          /* the response header's revision */
	int64_t compact_revision;  /* LR_WATCH_COMPACTED */
	const char *reason;        /* LR_WATCH_CANCELLED, LR_WATCH_DOWN */
	const char *endpoint;      /* LR_WATCH_DOWN: the endpoints it tries */
	int64_t heard_ms;          /* LR_WATCH_DOWN: wall clock (ms since the
	                              epoch) when etcd last said anything on
	                              the stream: the data is as of then */
	size_t n;
	const lr_watch_event *events;
} lr_watch_batch;

/* Runs on the client's stream thread, one call at a time over every watcher
 * of the client; the batch and everything it points to is valid during the
 * call only. After COMPACTED or CANCELLED the watcher is dead: cancel it and
 * add a new one. DOWN comes once per outage to every live watcher (also to
 * one added during it), and UP to each that got DOWN, before any other
 * batch of the stream; a watcher that only applies events may ignore
 * both. */
typedef void (*lr_watch_fn)(void *user, const lr_watch_batch *b);

/* Watcher flags (with LR_KEY_PREFIX from kv.h). */
enum {
	LR_WATCH_PREV_KV = 1 << 8,
};

/* A watch service with its own Watch stream on c; freed by lr_watch_free
 * (which cancels every watcher still there; no callback after it returns). */
int lr_watch_new(lr_etcd *c, lr_watch **out, lr_err *err);
void lr_watch_free(lr_watch *w);

/* Watch key (or every key under it with LR_KEY_PREFIX) from start_rev
 * (0: from now). */
int lr_watch_add(lr_watch *w, const char *key, int flags, int64_t start_rev,
                 lr_watch_fn fn, void *user, lr_watcher **out, lr_err *err);

/* Watch every key in [key, end), as one watcher: the changes of one txn
 * to keys in that range come in one batch. */
int lr_watch_add_range(lr_watch *w, const char *key, const char *end, int flags,
                       int64_t start_rev, lr_watch_fn fn, void *user, lr_watcher **out,
                       lr_err *err);

/* Stop watching; no callback of this watcher runs after it returns (unless
 * called from that callback). */
void lr_watcher_cancel(lr_watcher *wr);

#endif
