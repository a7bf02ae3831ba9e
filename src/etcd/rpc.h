/* rpc.h - plain gRPC helpers under every part of the etcd client:
 * deadlines, messages in byte buffers, initial metadata, statuses as
 * library codes. No state of their own: any thread. Internal to src/etcd/. */
#ifndef LR_ETCD_RPC_H
#define LR_ETCD_RPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/support/time.h>
#include <protobuf-c/protobuf-c.h>

/* Deadlines on gRPC's monotonic clock: in ms from now, or at a lr_mono_ms()
 * time. */
gpr_timespec lr__deadline_in_ms(int64_t ms);
gpr_timespec lr__mono_ms_to_timespec(int64_t at_ms);

/* "/etcdserverpb.KV/Range" -> "KV/Range", for messages and statistics. */
const char *lr__method_short(const char *method);

/* msg serialised into a new slice (one reference, the caller unrefs it):
 * what a call that may be attempted several times keeps. */
grpc_slice lr__pack_slice(const ProtobufCMessage *msg);
/* A byte buffer for one send of `bytes`. gRPC takes the bytes out of a
 * buffer it sends, so every attempt needs a buffer of its own. */
grpc_byte_buffer *lr__buffer_of(grpc_slice bytes);
/* A byte buffer holding msg (the caller destroys it). */
grpc_byte_buffer *lr__pack(const ProtobufCMessage *msg);
/* Flatten a received buffer; *out is malloc'd (caller frees). 0 or -1. */
int lr__unpack_bytes(grpc_byte_buffer *bb, uint8_t **out, size_t *len);
/* A message of d read from data, or NULL when malformed or out of memory.
 * Every reply is read this way and freed by lr_etcd_reply_free: its
 * fields come from one arena instead of a malloc call each. */
ProtobufCMessage *lr__unpack(const ProtobufCMessageDescriptor *d, size_t len,
                             const uint8_t *data);

/* op = SEND_INITIAL_METADATA of md[n], waiting for a connection. */
void lr__op_send_metadata(grpc_op *op, grpc_metadata *md, size_t n);
/* md = key: value, both strings that outlive the call. */
void lr__metadata(grpc_metadata *md, const char *key, const char *value);

/* What gRPC fills in for one unary call: the reply, its metadata and the
 * call's status. */
typedef struct lr_unary_io {
	grpc_metadata_array head, trail;
	grpc_byte_buffer *reply; /* NULL when none came */
	grpc_status_code status;
	grpc_slice details;
	const char *error_string;
} lr_unary_io;

/* The six ops of a unary call that sends md[n] and req and receives into
 * io (initialised here): started as one batch. lr__unary_io_free once the
 * batch completed, or failed to start. */
void lr__unary_ops(grpc_op ops[6], lr_unary_io *io, grpc_metadata *md, size_t n,
                   grpc_byte_buffer *req);
void lr__unary_io_free(lr_unary_io *io);

/* A finished call's status text into buf: gRPC's details, else its error
 * string, else `dflt`. */
void lr__status_text(grpc_slice details, const char *error_string, const char *dflt,
                     char *buf, size_t size);
/* A gRPC status as a library code; `write` marks calls whose effect may
 * have happened although the reply was lost. */
int lr__status_code(grpc_status_code st, const char *details, bool write);
/* Whether etcd refused the call for want of a leader, before looking at
 * it (calls carry the hasleader metadata): a write so refused was not
 * applied. */
bool lr__no_leader(grpc_status_code st, const char *details);
/* The connection dropped the call's HTTP/2 stream under it ("Stream
 * removed", which gRPC reports as UNKNOWN): like a lost connection, the
 * request may or may not have reached etcd. */
bool lr__stream_lost(grpc_status_code st, const char *details);

#endif
