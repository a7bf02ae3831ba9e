/* transport.c - the etcd client's connection: gRPC statuses as library
 * errors, blocking unary calls with retries, authentication, open and close.
 *
 * Threads: any number of threads may call at once. A unary call is started
 * on the stream thread's queue and its caller sleeps until that thread
 * sees it complete; only calls made on the stream thread itself (a token
 * renewed for a stream) block on a queue of their own. Streams live in
 * stream.c. c->mu guards the token and the client's random source.
 *
 * Balancing: round_robin over every endpoint (channel.c), so a retried call
 * goes to another member when one is down. */
#include "etcd/transport_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/byte_buffer_reader.h>
#include <grpc/support/alloc.h>

#include "rpc.pb-c.h"

#include "base/clock.h"
#include "base/error.h"

/* ---- helpers ------------------------------------------------------------ */

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
	/* "/etcdserverpb.KV/Range" -> "KV/Range" */
	const char *dot = strchr(method, '.');
	return dot != NULL ? dot + 1 : method;
}

/* Serialise msg into a slice (one reference, caller unrefs). */
static int pack_slice(const ProtobufCMessage *msg, grpc_slice *out)
{
	size_t n = protobuf_c_message_get_packed_size(msg);
	*out = grpc_slice_malloc(n);
	protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(*out));
	return 0;
}

/* A byte buffer for one send. gRPC takes the bytes out of a buffer it
 * sends, so a retried call needs a new buffer over the same slice. */
static grpc_byte_buffer *buffer_of(grpc_slice slice)
{
	return grpc_raw_byte_buffer_create(&slice, 1);
}

grpc_byte_buffer *lr__pack(const ProtobufCMessage *msg)
{
	grpc_slice slice;
	pack_slice(msg, &slice);
	grpc_byte_buffer *bb = buffer_of(slice);
	grpc_slice_unref(slice);
	return bb;
}

/* Flatten a received buffer; *out is malloc'd (caller frees). */
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

/* Map a gRPC status to a library code. `write` marks calls whose effect may
 * have happened although the reply was lost. */
int lr__status_code(grpc_status_code st, const char *details, bool write)
{
	switch (st) {
	case GRPC_STATUS_OK:
		return LR_OK;
	case GRPC_STATUS_UNAVAILABLE:
		if (strstr(details, "ssl") != NULL || strstr(details, "SSL") != NULL ||
		    strstr(details, "handshake") != NULL ||
		    strstr(details, "certificate") != NULL)
			return LR_ETLS;
		return write ? LR_EAMBIGUOUS : LR_EUNAVAILABLE;
	case GRPC_STATUS_DEADLINE_EXCEEDED:
		return write ? LR_EAMBIGUOUS : LR_ETIMEDOUT;
	case GRPC_STATUS_PERMISSION_DENIED:
		return LR_EPERM;
	case GRPC_STATUS_UNAUTHENTICATED:
		return LR_EAUTH;
	case GRPC_STATUS_RESOURCE_EXHAUSTED:
		return LR_ETOOLARGE;
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
	default:
		return LR_EETCD;
	}
}

/* etcd's words for "this token will not do, get another one": an expired or
 * unknown token, or one minted before the last change of users and roles.
 * Each means the request was refused before it did anything. */
static const char *const token_refusals[] = {
	"invalid auth token",
	"revision of auth store is old",
	"user name is empty",
	NULL,
};

bool lr__token_refused_text(const char *text, size_t len)
{
	for (size_t i = 0; token_refusals[i] != NULL; i++)
		if (memmem(text, len, token_refusals[i], strlen(token_refusals[i])) != NULL)
			return true;
	return false;
}

bool lr__token_expired(grpc_status_code st, const char *details)
{
	return (st == GRPC_STATUS_INVALID_ARGUMENT ||
	        st == GRPC_STATUS_UNAUTHENTICATED) &&
	       lr__token_refused_text(details, strlen(details));
}

/* ---- unary calls -------------------------------------------------------- */

struct unary_result {
	grpc_status_code status;
	char details[256];
	char peer[128];
	uint8_t *data;
	size_t len;
};

static void unary_once(lr_etcd *c, const char *method, grpc_slice req_bytes,
                       gpr_timespec deadline, const char *token,
                       struct unary_result *r)
{
	grpc_byte_buffer *req = buffer_of(req_bytes);
	bool shared = c->thread_started && !lr_etcd_on_stream_thread(c);
	struct unary_wait w = { .t.kind = TAG_UNARY };
	grpc_completion_queue *cq = shared ? c->cq : grpc_completion_queue_create_for_pluck(NULL);
	if (shared)
		sem_init(&w.done, 0, 0);
	grpc_slice mslice = grpc_slice_from_static_string(method);
	grpc_call *call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS,
	                                           cq, mslice, NULL, deadline, NULL);
	grpc_metadata md[1];
	size_t nmd = 0;
	if (token != NULL) {
		md[0].key = grpc_slice_from_static_string("token");
		md[0].value = grpc_slice_from_static_string(token);
		nmd = 1;
	}
	grpc_metadata_array md_in, md_trail;
	grpc_metadata_array_init(&md_in);
	grpc_metadata_array_init(&md_trail);
	grpc_byte_buffer *resp = NULL;
	grpc_slice details = grpc_empty_slice();
	const char *error_string = NULL;

	grpc_op ops[6];
	memset(ops, 0, sizeof(ops));
	lr__op_send_metadata(&ops[0], md, nmd);
	ops[1].op = GRPC_OP_SEND_MESSAGE;
	ops[1].data.send_message.send_message = req;
	ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
	ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
	ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_in;
	ops[4].op = GRPC_OP_RECV_MESSAGE;
	ops[4].data.recv_message.recv_message = &resp;
	ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	ops[5].data.recv_status_on_client.trailing_metadata = &md_trail;
	ops[5].data.recv_status_on_client.status = &r->status;
	ops[5].data.recv_status_on_client.status_details = &details;
	ops[5].data.recv_status_on_client.error_string = &error_string;

	grpc_call_error ce = grpc_call_start_batch(call, ops, 6, shared ? (void *)&w : call, NULL);
	if (ce != GRPC_CALL_OK) {
		r->status = GRPC_STATUS_INTERNAL;
		snprintf(r->details, sizeof(r->details), "grpc_call_start_batch: %d", ce);
	} else {
		if (shared)
			while (sem_wait(&w.done) != 0)
				;
		else
			grpc_completion_queue_pluck(cq, call, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
		/* The texts are for error messages only: not made for calls
		 * that succeed (most of them). */
		r->details[0] = '\0';
		if (r->status != GRPC_STATUS_OK) {
			char *d = grpc_slice_to_c_string(details);
			snprintf(r->details, sizeof(r->details), "%s",
			         d[0] == '\0' && error_string != NULL ? error_string : d);
			gpr_free(d);
		}
	}
	r->peer[0] = '\0';
	if (r->status != GRPC_STATUS_OK) {
		char *peer = grpc_call_get_peer(call);
		const char *p = peer;
		if (strncmp(p, "ipv4:", 5) == 0 || strncmp(p, "ipv6:", 5) == 0)
			p += 5;
		snprintf(r->peer, sizeof(r->peer), "%s", p);
		gpr_free(peer);
	}

	r->data = NULL;
	r->len = 0;
	if (r->status == GRPC_STATUS_OK && resp != NULL &&
	    lr__unpack_bytes(resp, &r->data, &r->len) != 0) {
		r->status = GRPC_STATUS_RESOURCE_EXHAUSTED;
		snprintf(r->details, sizeof(r->details), "out of memory reading reply");
	}
	if (resp != NULL)
		grpc_byte_buffer_destroy(resp);
	grpc_byte_buffer_destroy(req);
	if (error_string != NULL)
		gpr_free((void *)error_string);
	grpc_slice_unref(details);
	grpc_metadata_array_destroy(&md_in);
	grpc_metadata_array_destroy(&md_trail);
	grpc_call_unref(call);
	if (shared) {
		sem_destroy(&w.done);
	} else {
		grpc_completion_queue_shutdown(cq);
		grpc_completion_queue_destroy(cq);
	}
}


/* The current token (a copy the caller frees), NULL without auth. */
static char *token_copy(lr_etcd *c)
{
	if (c->user == NULL)
		return NULL;
	pthread_mutex_lock(&c->mu);
	char *t = c->token != NULL ? strdup(c->token) : NULL;
	pthread_mutex_unlock(&c->mu);
	return t;
}

int lr_etcd_unary(lr_etcd *c, const char *method, const ProtobufCMessage *req,
                  const ProtobufCMessageDescriptor *resp_desc,
                  ProtobufCMessage **resp, int flags, lr_err *err)
{
	grpc_slice bb;
	pack_slice(req, &bb);
	int64_t start = lr_mono_ms();
	int64_t deadline_ms = start + c->call_timeout_ms;
	lr_backoff bo;
	lr_backoff_init(&bo, 25, 1000);
	bool reauthed = false;
	bool write = (flags & LR_CALL_RETRY) == 0;
	struct unary_result r;
	int rc;

	/* A retryable call gets several attempts within its deadline: a
	 * request forwarded to a leader that just died hangs on the server
	 * for etcd's own request timeout (7 s by default), longer than ours. */
	int64_t attempt_ms = write ? c->call_timeout_ms : c->call_timeout_ms / 3;
	if (attempt_ms < 1000)
		attempt_ms = c->call_timeout_ms < 1000 ? c->call_timeout_ms : 1000;
	for (;;) {
		char *token = token_copy(c);
		int64_t now = lr_mono_ms();
		int64_t attempt_end = now + attempt_ms < deadline_ms ? now + attempt_ms : deadline_ms;
		unary_once(c, method, bb, lr__mono_ms_to_timespec(attempt_end), token, &r);
		free(token);
		if (r.status == GRPC_STATUS_OK)
			break;
		if (lr__token_expired(r.status, r.details) && !reauthed && c->user != NULL) {
			/* The server refused the token before doing anything. */
			reauthed = true;
			rc = lr__authenticate(c, err);
			if (rc != 0)
				goto fail_noresult;
			continue;
		}
		bool transient = r.status == GRPC_STATUS_UNAVAILABLE ||
		                 r.status == GRPC_STATUS_DEADLINE_EXCEEDED;
		if (transient && !write && lr__status_code(r.status, r.details, false) != LR_ETLS) {
			pthread_mutex_lock(&c->mu);
			int64_t wait = lr_backoff_next(&bo, &c->rng);
			pthread_mutex_unlock(&c->mu);
			if (r.status == GRPC_STATUS_DEADLINE_EXCEEDED)
				wait = 0;
			if (lr_mono_ms() + wait < deadline_ms) {
				free(r.data);
				lr_sleep_ms(wait);
				continue;
			}
		}
		break;
	}

	if (r.status != GRPC_STATUS_OK) {
		rc = lr__status_code(r.status, r.details, write);
		const char *where = r.peer[0] != '\0' && strcmp(r.peer, "unknown") != 0
		                        ? r.peer : c->endpoints;
		if (r.status == GRPC_STATUS_DEADLINE_EXCEEDED &&
		    grpc_channel_check_connectivity_state(c->channel, 0) != GRPC_CHANNEL_READY) {
			/* The call waited for a connection that never came. */
			char last[256];
			lr__connect_failure(c, last, sizeof(last));
			rc = write ? LR_EAMBIGUOUS : LR_EUNAVAILABLE;
			if (write || lr__tls_error(c, last, method, true, err) == 0)
				lr__unreachable_error(c, method, last, c->call_timeout_ms, rc, err);
			else
				rc = LR_ETLS;
		} else if (rc != LR_ETLS || lr__tls_error(c, r.details, method, false, err) == 0) {
			char hint[160];
			lr__auth_hint(c, rc, r.details, hint, sizeof(hint));
			lr_err_set(err, rc, "etcd %s (%s): %s%s%s%s", where, lr__method_short(method),
			           rc == LR_ETOOLARGE ? "request too large for etcd: " : "",
			           r.details[0] ? r.details : "call failed", hint,
			           rc == LR_EAMBIGUOUS ? " (the write may have applied)" : "");
		}
		goto out;
	}
	*resp = protobuf_c_message_unpack(resp_desc, NULL, r.len, r.data);
	if (*resp == NULL) {
		rc = lr_err_set(err, LR_EETCD, "etcd %s (%s): malformed reply",
		                c->endpoints, lr__method_short(method));
		goto out;
	}
	rc = 0;
out:
	free(r.data);
fail_noresult:
	grpc_slice_unref(bb);
	return rc;
}

int lr__authenticate(lr_etcd *c, lr_err *err)
{
	Etcdserverpb__AuthenticateRequest req = ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
	req.name = c->user;
	req.password = c->password != NULL ? c->password : "";
	grpc_slice bb;
	pack_slice(&req.base, &bb);
	struct unary_result r;
	unary_once(c, "/etcdserverpb.Auth/Authenticate", bb,
	           lr__deadline_in_ms(c->call_timeout_ms), NULL, &r);
	grpc_slice_unref(bb);
	int rc = 0;
	if (r.status == GRPC_STATUS_FAILED_PRECONDITION &&
	    strstr(r.details, "authentication is not enabled") != NULL) {
		/* As etcd's own client does: without auth, no token is needed. */
		goto out;
	}
	if (r.status != GRPC_STATUS_OK) {
		rc = lr__status_code(r.status, r.details, false);
		if (rc == LR_EETCD)
			rc = LR_EAUTH;
		if (rc == LR_ETLS && lr__tls_error(c, r.details, "Auth/Authenticate", false, err) != 0)
			goto out;
		/* Never echo the password; name the user only. */
		lr_err_set(err, rc, "etcd %s (Auth/Authenticate): authentication as "
		           "etcd user %s failed: %s", r.peer[0] ? r.peer : c->endpoints,
		           c->user, r.details);
		goto out;
	}
	Etcdserverpb__AuthenticateResponse *resp =
	    etcdserverpb__authenticate_response__unpack(NULL, r.len, r.data);
	if (resp == NULL) {
		rc = lr_err_set(err, LR_EETCD, "etcd %s (Auth/Authenticate): malformed reply",
		                c->endpoints);
		goto out;
	}
	pthread_mutex_lock(&c->mu);
	free(c->token);
	c->token = strdup(resp->token);
	pthread_mutex_unlock(&c->mu);
	etcdserverpb__authenticate_response__free_unpacked(resp, NULL);
out:
	free(r.data);
	return rc;
}

/* ---- open / close ------------------------------------------------------- */

int lr_etcd_open(const lr_etcd_opts *o, lr_etcd **out, lr_err *err)
{
	*out = NULL;
	if (o == NULL || o->endpoints == NULL)
		return lr_err_set(err, LR_EINVAL, "endpoints: the list is empty");
	lr_etcd *c = calloc(1, sizeof(*c));
	if (c == NULL)
		return lr_err_set(err, LR_ENOMEM, "etcd: out of memory");
	pthread_mutex_init(&c->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &ca);
	pthread_condattr_destroy(&ca);
	lr_rng_init(&c->rng, NULL);
	c->t_wake.kind = TAG_WAKE;
	c->endpoints = strdup(o->endpoints);
	c->dial_timeout_ms = (int64_t)((o->dial_timeout_s > 0 ? o->dial_timeout_s : 5.0) * 1000);
	c->call_timeout_ms = (int64_t)((o->call_timeout_s > 0 ? o->call_timeout_s : 5.0) * 1000);
	c->tls = o->cacert != NULL || o->cert != NULL ||
	         strstr(o->endpoints, "https://") != NULL;
	c->has_cacert = o->cacert != NULL;
	c->client_cert = o->cert != NULL;
	if (o->tls_server_name != NULL)
		c->tls_server_name = strdup(o->tls_server_name);
	if (o->user != NULL) {
		c->user = strdup(o->user);
		c->password = strdup(o->password != NULL ? o->password : "");
	}
	grpc_init();
	int rc = lr__build_target(o->endpoints, &c->target, err);
	if (rc == 0)
		rc = lr__create_channel(c, o, err);
	if (rc == 0)
		rc = lr__stream_thread_start(c, err);
	if (rc == 0)
		rc = lr__dial(c, err);
	if (rc == 0 && c->user != NULL)
		rc = lr__authenticate(c, err);
	if (rc != 0) {
		lr_etcd_close(c);
		return rc;
	}
	*out = c;
	return 0;
}


void lr_etcd_close(lr_etcd *c)
{
	if (c == NULL)
		return;
	lr__streams_close(c);
	if (c->channel != NULL)
		grpc_channel_destroy(c->channel);
	if (c->password != NULL) {
		memset(c->password, 0, strlen(c->password));
		free(c->password);
	}
	free(c->user);
	free(c->tls_server_name);
	free(c->token);
	free(c->target);
	free(c->endpoints);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->mu);
	free(c);
	grpc_shutdown();
}

const char *lr_etcd_endpoints(const lr_etcd *c)
{
	return c->endpoints;
}
