/* transport.h - the etcd client's connection: one gRPC channel, blocking
 * unary calls, and long-lived bidi streams driven by one background thread.
 *
 * Layering: kv.c, lease.c and watch.c build requests and read replies; this
 * file moves bytes and turns gRPC statuses into lr_err messages that name the
 * endpoint, the etcd method and gRPC's status text. */
#ifndef LR_ETCD_TRANSPORT_H
#define LR_ETCD_TRANSPORT_H

#include <stdbool.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "leaserun.h"

typedef struct lr_etcd lr_etcd;

typedef struct lr_etcd_opts {
	const char *endpoints;       /* "host:port[,host:port...]"; required */
	double dial_timeout_s;       /* 0 means 5 */
	double call_timeout_s;       /* 0 means 5: deadline of one unary call */
	const char *cacert;          /* PEM file: TLS when set */
	const char *cert, *key;      /* PEM files: client certificate (mTLS) */
	const char *tls_server_name; /* name checked against the certificate */
	const char *user;            /* etcd auth; NULL for none */
	const char *password;
} lr_etcd_opts;

/* Connect to the cluster. Fails with LR_EUNAVAILABLE naming the endpoints
 * when none becomes reachable within the dial timeout, LR_EINVAL for a
 * malformed endpoint list, LR_EAUTH when the credentials are refused.
 * On success *out is a new client, freed by lr_etcd_close. */
int lr_etcd_open(const lr_etcd_opts *opts, lr_etcd **out, lr_err *err);

/* Stops the stream thread (no stream callback runs after it returns), cancels
 * every call and frees the client. Leases are not revoked. */
void lr_etcd_close(lr_etcd *c);

/* The endpoint list as given, for messages. Borrowed. */
const char *lr_etcd_endpoints(const lr_etcd *c);

/* Flags of lr_etcd_unary. */
enum {
	/* Retry UNAVAILABLE replies with backoff until the call's deadline.
	 * Only for calls that are safe to repeat: reads, and txns whose
	 * compares make a second application fail visibly. Without it a lost
	 * write reply is reported as LR_EAMBIGUOUS: re-read, then decide. */
	LR_CALL_RETRY = 1 << 0,
};

/* One unary call. `method` is the gRPC path ("/etcdserverpb.KV/Range").
 * On success *resp is a new message of resp_desc, freed by
 * protobuf_c_message_free_unpacked(*resp, NULL). Any thread. */
int lr_etcd_unary(lr_etcd *c, const char *method, const ProtobufCMessage *req,
                  const ProtobufCMessageDescriptor *resp_desc,
                  ProtobufCMessage **resp, int flags, lr_err *err);

/* ---- streams (used by lease.c and watch.c) ---------------------------- */

typedef struct lr_stream lr_stream;

/* What a stream's owner does. Every function runs on the client's stream
 * thread, one at a time. */
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

/* Register a stream on the client; it opens at once and reopens after every
 * failure until lr_stream_remove. The owner must outlive the stream. */
int lr_stream_add(lr_etcd *c, const char *method, const lr_stream_ops *ops,
                  void *owner, lr_stream **out, lr_err *err);

/* Unregister: cancels the call; returns once no callback of this stream runs
 * and none will. Not callable from the stream's own callbacks. */
void lr_stream_remove(lr_stream *s);

/* Queue a message; sent when the call is open (one send in flight at a
 * time). Messages queued while the stream is down are dropped: the owner
 * re-sends its state in `opened`. Any thread. */
int lr_stream_send(lr_stream *s, const ProtobufCMessage *msg);

/* Cancel the current call so that the stream reconnects (for example when
 * replies stop arriving). Any thread. */
void lr_stream_reset(lr_stream *s, const char *why);

/* Run the stream's tick function soon (a timer became earlier). Any thread. */
void lr_stream_kick(lr_stream *s);

/* Post an event on the stream queue so that the stream thread looks at its
 * timers and streams again. Any thread. */
void lr_etcd_wake(lr_etcd *c);

/* True on the client's stream thread. */
bool lr_etcd_on_stream_thread(const lr_etcd *c);

#endif
