/* stream.h - long-lived bidi streams (LeaseKeepAlive, Watch) driven by one
 * background thread per client, which also completes the blocking unary
 * calls of other threads. Internal to src/etcd/: used by lease.c and
 * watch.c (streams) and by the unary calls (their completion). */
#ifndef LR_ETCD_STREAM_H
#define LR_ETCD_STREAM_H

#include <stdbool.h>
#include <stdint.h>

#include <grpc/grpc.h>
#include <protobuf-c/protobuf-c.h>

#include "etcd/callstats.h"
#include "etcd/channel.h"
#include "fiber/fiber.h"
#include "leaserun.h"

typedef struct lr_streams lr_streams; /* the thread and its streams */
typedef struct lr_stream lr_stream;

/* What a stream's owner does. Every function runs on the stream thread,
 * one at a time over every stream of the client. */
typedef struct lr_stream_ops {
	/* A new call is open: queue with lr_stream_send what the server must
	 * hear again (keepalives of every lease, a create of every watcher). */
	void (*opened)(void *owner, lr_stream *s);
	/* One message arrived; data is valid during the call only. */
	void (*message)(void *owner, const uint8_t *data, size_t len);
	/* The call ended; the stream opens again after a backoff. */
	void (*closed)(void *owner, int code, const char *why);
	/* Timers: do what is due at now_ms (monotonic) and return when to be
	 * called next (INT64_MAX for never). */
	int64_t (*tick)(void *owner, int64_t now_ms);
} lr_stream_ops;

/* The credentials of stream calls, from the layer above (auth.c): the
 * stream thread sends a token and asks for a new one, and knows nothing
 * else of etcd's auth. Every hook may be NULL. */
typedef struct lr_stream_auth {
	void *ctx;
	/* The token a new call sends: a copy the caller frees, NULL for
	 * none. Called with the streams' lock held: must not call back. */
	char *(*token)(void *ctx);
	/* A call that sent `sent` (may be NULL) ended with st and details:
	 * if etcd refused the token, have a new one got (the stream reopens
	 * with a backoff meanwhile). Stream thread, no lock held; must not
	 * wait for etcd, whose replies come on this thread. */
	void (*call_ended)(void *ctx, const char *sent, grpc_status_code st,
	                   const char *details);
	/* The owner saw etcd refuse `sent` in a reply: 0 when a new token
	 * replaced it already, else have one got and -1. Stream thread, no
	 * lock held; must not wait for etcd. */
	int (*renew)(void *ctx, const char *sent);
} lr_stream_auth;

/* Start the stream thread on the members of `chan` (borrowed, outlives
 * the thread). Reopened streams are counted in `stats` (borrowed, may be
 * NULL). */
int lr__streams_start(lr_channel *chan, lr_call_stats *stats,
                      const lr_stream_auth *auth, lr_streams **out, lr_err *err);
/* Cancel every call, stop the thread (no stream callback runs after it
 * returns) and free the streams left. NULL is a no-op. */
void lr__streams_stop(lr_streams *st);
/* A new token came: the streams down for want of one reopen now rather
 * than at the end of their backoff. Any thread that holds no lock of a
 * stream's owner; takes the streams' lock. */
void lr__streams_token_renewed(lr_streams *st);

/* Register a stream; it opens at once and reopens after every failure
 * until lr_stream_remove. The owner must outlive the stream. `method` is
 * a gRPC path of static storage. Any thread. */
int lr_stream_add(lr_streams *st, const char *method, const lr_stream_ops *ops,
                  void *owner, lr_stream **out, lr_err *err);

/* Unregister: cancels the call; returns once no callback of this stream runs
 * and none will. Not callable from the stream's own callbacks. */
void lr_stream_remove(lr_stream *s);

/* Queue a message; sent when the call is open (one send in flight at a
 * time). Messages queued while the stream is down are dropped: the owner
 * re-sends its state in `opened`. Any thread. */
int lr_stream_send(lr_stream *s, const ProtobufCMessage *msg);

/* Replies stopped arriving: cancel the current call so that the stream
 * reconnects, to another member when there is one (its member is left out
 * for a while, route.h). Any thread. */
void lr_stream_reset(lr_stream *s, const char *why);

/* Run the stream's tick function soon (a timer became earlier). Any thread. */
void lr_stream_kick(lr_stream *s);

/* etcd refused the current call's token in a reply (the call stays open):
 * have the auth hooks renew it and start the call over, with a growing
 * backoff while renewals fail. Only from s's own `message` callback. */
void lr_stream_renew_token(lr_stream *s);
/* The owner got what it asked for on s (a watch created): a backoff grown
 * by failed renewals starts afresh. Any thread but under no owner lock
 * that the stream thread takes. */
void lr_stream_healthy(lr_stream *s);

/* A request-to-reply round trip on s, timed by its owner, for the call
 * statistics. Any thread. */
void lr_stream_count_round_trip(lr_stream *s, int64_t us);

/* True on the thread that runs s's callbacks. */
bool lr_stream_on_thread(const lr_stream *s);

/* ---- unary calls completed by the stream thread ---------------------------
 *
 * A blocking unary call started by another thread completes on the stream
 * thread's queue, which then wakes its caller: cheaper than a queue per
 * call polled by its caller. On the stream thread itself, or before it
 * runs, the call gets a queue of its own. Use: lr__unary_wait_begin, make
 * the call on w->cq and start its batch with tag w, lr__unary_wait (only
 * when the batch was accepted), lr__unary_wait_end after the call's
 * unref. */
typedef struct lr_unary_wait {
	int tag_kind; /* first: how the stream thread tells it from its own */
	grpc_completion_queue *cq;
	bool shared;
	lr_wake done;
} lr_unary_wait;

void lr__unary_wait_begin(lr_streams *st, lr_unary_wait *w);
void lr__unary_wait(lr_unary_wait *w);
void lr__unary_wait_end(lr_unary_wait *w);

#endif
