/* transport_int.h - what the three files of the etcd client's connection
 * share: transport.c (status mapping, unary calls, auth, open/close),
 * channel.c (endpoints, credentials, dial, why a connection failed) and
 * stream.c (bidi streams on one thread). Internal to src/etcd/. */
#ifndef LR_ETCD_TRANSPORT_INT_H
#define LR_ETCD_TRANSPORT_INT_H

#include <pthread.h>
#include <semaphore.h>
#include <stdbool.h>
#include <stdint.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>

#include "base/backoff.h"
#include "etcd/transport.h"

#define LR_MAX_MESSAGE (64 * 1024 * 1024)
#define LR_STREAM_BACKOFF_MIN_MS 50
#define LR_STREAM_BACKOFF_MAX_MS 2000
#define LR_DIAL_POLL_MS 100      /* look at a failing channel's reason */
#define LR_TLS_LIKELY_MS 1000    /* of failures that read like TLS ones */

enum tag_kind { TAG_START, TAG_SEND, TAG_RECV, TAG_STATUS, TAG_WAKE, TAG_UNARY };

struct scall;

struct tag {
	enum tag_kind kind;
	struct scall *call;
};

/* A unary call started on the stream queue by another thread: the stream
 * thread posts `done` when the call's batch completes. */
struct unary_wait {
	struct tag t; /* TAG_UNARY */
	sem_t done;
};

struct sendq {
	grpc_byte_buffer *buf;
	struct sendq *next;
};

/* One gRPC call of a stream; a stream has a new one after every failure.
 * Freed once every batch started on it has completed. */
struct scall {
	lr_stream *stream; /* NULL once the stream was removed */
	grpc_call *call;
	struct tag t_start, t_send, t_recv, t_status;
	int outstanding;
	bool send_busy;
	bool ended;
	grpc_byte_buffer *send_buf;
	grpc_byte_buffer *recv_buf;
	grpc_metadata_array md_in, md_trail;
	grpc_status_code status;
	grpc_slice details;
	const char *error_string;
	grpc_metadata md_out[2];
	char *token; /* copy sent as metadata */
};

struct lr_stream {
	lr_etcd *client;
	const char *method;
	const lr_stream_ops *ops;
	void *owner;
	struct scall *cur; /* NULL while down */
	int64_t reopen_at;
	int64_t next_tick;
	lr_backoff backoff;
	struct sendq *q_head, *q_tail;
	bool removed;
	lr_stream *next;
};

struct lr_etcd {
	char *endpoints;
	char *target;
	grpc_channel *channel;
	int64_t dial_timeout_ms;
	int64_t call_timeout_ms;
	bool tls, has_cacert, client_cert; /* for messages about TLS failures */
	char *tls_server_name;
	char *user, *password;

	pthread_mutex_t mu;
	pthread_cond_t cond;
	char *token;          /* auth token, under mu */
	lr_rng rng;           /* under mu */

	grpc_completion_queue *cq; /* the stream thread's queue */
	pthread_t thread;
	bool thread_started;
	bool closing;
	lr_stream *streams;
	int wakes_pending;
	struct tag t_wake;
	lr_stream *in_callback; /* stream whose owner runs now */
};

/* ---- transport.c ---------------------------------------------------------- */

/* Deadlines on gRPC's monotonic clock: in ms from now, or at a lr_mono_ms()
 * time. */
gpr_timespec lr__deadline_in_ms(int64_t ms);
gpr_timespec lr__mono_ms_to_timespec(int64_t at_ms);
/* "/etcdserverpb.KV/Range" -> "KV/Range", for messages. */
const char *lr__method_short(const char *method);
/* A byte buffer holding msg (caller destroys it). */
grpc_byte_buffer *lr__pack(const ProtobufCMessage *msg);
/* Flatten a received buffer; *out is malloc'd (caller frees). */
int lr__unpack_bytes(grpc_byte_buffer *bb, uint8_t **out, size_t *len);
/* op = SEND_INITIAL_METADATA of md[n], waiting for a connection. */
void lr__op_send_metadata(grpc_op *op, grpc_metadata *md, size_t n);
/* A gRPC status as a library code; `write` marks calls whose effect may
 * have happened although the reply was lost. */
int lr__status_code(grpc_status_code st, const char *details, bool write);
/* etcd refused the token (expired, unknown, stale): get another one. */
bool lr__token_refused_text(const char *text, size_t len);
bool lr__token_expired(grpc_status_code st, const char *details);
/* Authenticate again; the new token goes to c->token. */
int lr__authenticate(lr_etcd *c, lr_err *err);

/* ---- channel.c -------------------------------------------------------------- */

/* Parse the endpoint list into gRPC's target ("ipv4:a:p,b:p"). */
int lr__build_target(const char *endpoints, char **out, lr_err *err);
/* The channel, with TLS credentials when asked for. */
int lr__create_channel(lr_etcd *c, const lr_etcd_opts *o, lr_err *err);
/* Wait until some endpoint is connected, at most the dial timeout; the
 * error says why not (TLS, refused, ...). */
int lr__dial(lr_etcd *c, lr_err *err);
/* gRPC's reason for the last failed connection, in words, into buf. */
void lr__connect_failure(lr_etcd *c, char *buf, size_t size);
/* A TLS failure as an lr_err (LR_ETLS) when details read like one (only
 * certain ones with sure_only); 0 otherwise. */
int lr__tls_error(lr_etcd *c, const char *details, const char *method,
                     bool sure_only, lr_err *err);
/* "no endpoint reachable within ..." with the last reason. */
int lr__unreachable_error(lr_etcd *c, const char *method, const char *last,
                             int64_t waited_ms, int code, lr_err *err);
/* A hint for auth and permission errors ("give --user"), into buf. */
void lr__auth_hint(const lr_etcd *c, int code, const char *details,
                      char *buf, size_t size);

/* ---- stream.c ----------------------------------------------------------------- */

/* Create the stream queue and start the thread that serves it. */
int lr__stream_thread_start(lr_etcd *c, lr_err *err);
/* Stop the stream thread (no stream callback runs after it returns) and
 * free the streams left. */
void lr__streams_close(lr_etcd *c);

#endif
