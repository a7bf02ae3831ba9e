/* rpc.c - plain gRPC helpers of the etcd client: deadlines, byte buffers,
 * metadata, statuses as library codes. No state, no locks: any thread. */
#include "etcd/rpc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/support/alloc.h>

#include "base/arena.h"
#include "base/clock.h"
#include "leaserun.h"

gpr_timespec lr__deadline_in_ms(int64_t ms)
{
	return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
	                    gpr_time_from_millis(ms, GPR_TIMESPAN));
}

gpr_timespec lr__mono_ms_to_timespec(int64_t at_ms)
{
	int64_t now = lr_mono_ms();
	return lr__deadline_in_ms(at_ms > now ? at_ms - now : 0);
}

const char *lr__method_short(const char *method)
{
	const char *dot = strchr(method, '.');
	return dot != NULL ? dot + 1 : method;
}

grpc_slice lr__pack_slice(const ProtobufCMessage *msg)
{
	size_t n = protobuf_c_message_get_packed_size(msg);
	grpc_slice s = grpc_slice_malloc(n);
	protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(s));
	return s;
}

grpc_byte_buffer *lr__buffer_of(grpc_slice bytes)
{
	return grpc_raw_byte_buffer_create(&bytes, 1);
}

grpc_byte_buffer *lr__pack(const ProtobufCMessage *msg)
{
	grpc_slice slice = lr__pack_slice(msg);
	grpc_byte_buffer *bb = lr__buffer_of(slice);
	grpc_slice_unref(slice);
	return bb;
}

int lr__unpack_bytes(grpc_byte_buffer *bb, uint8_t **out, size_t *len)
{
	grpc_byte_buffer_reader r;
	if (!grpc_byte_buffer_reader_init(&r, bb))
		return -1;
	grpc_slice s = grpc_byte_buffer_reader_readall(&r);
	grpc_byte_buffer_reader_destroy(&r);
	*len = GRPC_SLICE_LENGTH(s);
	*out = malloc(*len ? *len : 1);
	if (*out == NULL) {
		grpc_slice_unref(s);
		return -1;
	}
	memcpy(*out, GRPC_SLICE_START_PTR(s), *len);
	grpc_slice_unref(s);
	return 0;
}

/* A reply's arena sits in its own first chunk. Each piece it gives
 * protobuf-c starts with a pointer to it, so that the message (whichever
 * piece it is) leads back to it; protobuf-c's frees are no-ops. */
#define PIECE_HEAD _Alignof(max_align_t)

static void *reply_alloc(void *user, size_t n)
{
	lr_arena *a = user;
	if (n > (size_t)-1 - PIECE_HEAD)
		return NULL;
	char *p = lr_arena_alloc(a, PIECE_HEAD + n, 0);
	if (p == NULL)
		return NULL;
	memcpy(p, &a, sizeof(a));
	return p + PIECE_HEAD;
}

static void reply_free_piece(void *user, void *p)
{
	(void)user;
	(void)p;
}

static void reply_drop(lr_arena *in_itself)
{
	lr_arena a = *in_itself; /* it lives in one of its chunks */
	lr_arena_clear(&a);
}

ProtobufCMessage *lr__unpack(const ProtobufCMessageDescriptor *d, size_t len,
                             const uint8_t *data)
{
	/* The pieces take about twice the bytes on the wire, or more for
	 * small replies full of empty fields. */
	size_t chunk = len < 512 * 1024 ? 2 * len + 1024 : 1024 * 1024 + 1024;
	lr_arena a;
	lr_arena_init(&a, chunk);
	lr_arena *own = lr_arena_alloc(&a, sizeof(*own), 0);
	if (own == NULL)
		return NULL;
	*own = a;
	ProtobufCAllocator al = { .alloc = reply_alloc, .free = reply_free_piece,
	                          .allocator_data = own };
	ProtobufCMessage *m = protobuf_c_message_unpack(d, &al, len, data);
	if (m == NULL)
		reply_drop(own);
	return m;
}

void lr_etcd_reply_free(ProtobufCMessage *m)
{
	if (m == NULL)
		return;
	lr_arena *a;
	memcpy(&a, (char *)m - PIECE_HEAD, sizeof(a));
	reply_drop(a);
}

void lr__op_send_metadata(grpc_op *op, grpc_metadata *md, size_t n)
{
	op->op = GRPC_OP_SEND_INITIAL_METADATA;
	/* Wait for a connection instead of failing at once while members
	 * restart; the call's deadline still bounds the wait. */
	op->flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY |
	            GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
	op->data.send_initial_metadata.count = n;
	op->data.send_initial_metadata.metadata = md;
}

void lr__unary_ops(grpc_op ops[6], lr_unary_io *io, grpc_metadata *md, size_t n,
                   grpc_byte_buffer *req)
{
	grpc_metadata_array_init(&io->head);
	grpc_metadata_array_init(&io->trail);
	io->reply = NULL;
	io->status = GRPC_STATUS_OK;
	io->details = grpc_empty_slice();
	io->error_string = NULL;
	memset(ops, 0, 6 * sizeof(*ops));
	lr__op_send_metadata(&ops[0], md, n);
	ops[1].op = GRPC_OP_SEND_MESSAGE;
	ops[1].data.send_message.send_message = req;
	ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
	/* The reply is read too: gRPC gives the status only after it. */
	ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
	ops[3].data.recv_initial_metadata.recv_initial_metadata = &io->head;
	ops[4].op = GRPC_OP_RECV_MESSAGE;
	ops[4].data.recv_message.recv_message = &io->reply;
	ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	ops[5].data.recv_status_on_client.trailing_metadata = &io->trail;
	ops[5].data.recv_status_on_client.status = &io->status;
	ops[5].data.recv_status_on_client.status_details = &io->details;
	ops[5].data.recv_status_on_client.error_string = &io->error_string;
}

void lr__unary_io_free(lr_unary_io *io)
{
	if (io->reply != NULL)
		grpc_byte_buffer_destroy(io->reply);
	if (io->error_string != NULL)
		gpr_free((void *)io->error_string);
	grpc_slice_unref(io->details);
	grpc_metadata_array_destroy(&io->head);
	grpc_metadata_array_destroy(&io->trail);
}

void lr__metadata(grpc_metadata *md, const char *key, const char *value)
{
	md->key = grpc_slice_from_static_string(key);
	md->value = grpc_slice_from_static_string(value);
}

void lr__status_text(grpc_slice details, const char *error_string, const char *dflt,
                     char *buf, size_t size)
{
	char *d = grpc_slice_to_c_string(details);
	snprintf(buf, size, "%s", d[0] ? d : error_string != NULL ? error_string : dflt);
	gpr_free(d);
}

bool lr__no_leader(grpc_status_code st, const char *details)
{
	return st == GRPC_STATUS_UNAVAILABLE && strstr(details, "etcdserver: no leader") != NULL;
}

bool lr__stream_lost(grpc_status_code st, const char *details)
{
	return st == GRPC_STATUS_UNKNOWN && strstr(details, "Stream removed") != NULL;
}

int lr__status_code(grpc_status_code st, const char *details, bool write)
{
	switch (st) {
	case GRPC_STATUS_OK:
		return LR_OK;
	case GRPC_STATUS_UNKNOWN:
		if (lr__stream_lost(st, details))
			return write ? LR_EAMBIGUOUS : LR_EUNAVAILABLE;
		return LR_EETCD;
	case GRPC_STATUS_UNAVAILABLE:
		if (strstr(details, "ssl") != NULL || strstr(details, "SSL") != NULL ||
		    strstr(details, "handshake") != NULL ||
		    strstr(details, "certificate") != NULL)
			return LR_ETLS;
		/* Refused for want of a leader (the hasleader metadata) before
		 * etcd looked at the request: not applied. */
		return write && !lr__no_leader(st, details) ? LR_EAMBIGUOUS : LR_EUNAVAILABLE;
	case GRPC_STATUS_DEADLINE_EXCEEDED:
		return write ? LR_EAMBIGUOUS : LR_ETIMEDOUT;
	case GRPC_STATUS_PERMISSION_DENIED:
		return LR_EPERM;
	case GRPC_STATUS_UNAUTHENTICATED:
		return LR_EAUTH;
	case GRPC_STATUS_RESOURCE_EXHAUSTED:
		/* etcd refuses a proposal while its apply lags behind, before
		 * anything is written: a retry is safe. */
		if (strstr(details, "too many requests") != NULL)
			return LR_EUNAVAILABLE;
		/* gRPC's message size limits ("larger than max"); etcd's space
		 * quota ("database space exceeded") and anything else are no
		 * matter of size. */
		if (strstr(details, "larger than max") != NULL ||
		    strstr(details, "too large") != NULL)
			return LR_ETOOLARGE;
		return LR_EETCD;
	case GRPC_STATUS_NOT_FOUND:
		if (strstr(details, "lease not found") != NULL)
			return LR_ELEASE;
		return LR_EETCD;
	case GRPC_STATUS_INVALID_ARGUMENT:
		if (strstr(details, "too large") != NULL)
			return LR_ETOOLARGE;
		if (strstr(details, "user name is empty") != NULL ||
		    strstr(details, "authentication failed") != NULL ||
		    strstr(details, "invalid auth token") != NULL)
			return LR_EAUTH;
		return LR_EETCD;
	case GRPC_STATUS_FAILED_PRECONDITION:
		if (strstr(details, "permission denied") != NULL)
			return LR_EPERM;
		return LR_EETCD;
	case GRPC_STATUS_OUT_OF_RANGE:
		/* A read at a revision compacted meanwhile (a listing in pages
		 * at one revision): read again from the current one. */
		if (strstr(details, "compacted") != NULL)
			return LR_EUNAVAILABLE;
		return LR_EETCD;
	default:
		return LR_EETCD;
	}
}
