/* unary.c - blocking unary calls, in three parts: one attempt; the retry
 * policy (which statuses are retried, backoff, deadline, token refresh,
 * lost write replies as LR_EAMBIGUOUS); and the failure in words.
 * With auth.c and transport.c, one of the three parts of the client handle
 * (their shared struct is in transport_int.h).
 *
 * Threads: any number of threads call at once. An attempt completes on the
 * stream thread's queue, which wakes its caller (stream.h); an attempt
 * made on the stream thread itself would block on a queue of its own (none
 * is: tokens for streams come from the renewer thread, auth.c). c->mu
 * guards the token, the retry jitter and the closing flag, and is held
 * only to read or draw them. Every attempt and call is counted in
 * c->stats.
 *
 * Balancing: each attempt goes to the member route.c picks (in turn, but
 * not one down or lately unanswered), so a retried call goes to another
 * member when one is down or frozen. */
#include "etcd/transport_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/support/alloc.h>

#include "base/clock.h"
#include "base/error.h"
#include "etcd/auth.h"
#include "etcd/route.h"
#include "etcd/rpc.h"
#include "fiber/fiber.h"

#define LR_RETRY_BACKOFF_MIN_MS 25
#define LR_RETRY_BACKOFF_MAX_MS 1000
/* A retryable call's attempts last a third of its deadline, at least this
 * (or the whole deadline when it is shorter). */
#define LR_ATTEMPT_MIN_MS 1000

/* ---- one attempt -------------------------------------------------------- */

/* The member that answered, without gRPC's "ipv4:"/"ipv6:". */
static void peer_of(grpc_call *call, char *buf, size_t size)
{
	char *peer = grpc_call_get_peer(call);
	const char *p = peer;
	if (strncmp(p, "ipv4:", 5) == 0 || strncmp(p, "ipv6:", 5) == 0)
		p += 5;
	snprintf(buf, size, "%s", p);
	gpr_free(peer);
}

void lr__unary_attempt(lr_etcd *c, lr_call_slot *slot, const char *method,
                       grpc_slice req_bytes, gpr_timespec deadline, const char *token,
                       struct lr_attempt *r)
{
	int64_t t0 = lr_mono_us();
	grpc_byte_buffer *req = lr__buffer_of(req_bytes);
	lr_unary_wait w;
	lr__unary_wait_begin(c->streams, &w);
	int member = lr__route_pick(&c->chan);
	grpc_call *call = grpc_channel_create_call(c->chan.members[member].channel, NULL,
	                                           GRPC_PROPAGATE_DEFAULTS,
	                                           w.cq, grpc_slice_from_static_string(method),
	                                           NULL, deadline, NULL);
	grpc_metadata md[2];
	size_t nmd = 0;
	/* A member without a leader refuses at once ("etcdserver: no
	 * leader"), rather than holding the call until its deadline: a read
	 * then tries another member, a write hears so within milliseconds. */
	lr__metadata(&md[nmd++], "hasleader", "true");
	if (token != NULL)
		lr__metadata(&md[nmd++], "token", token);
	lr_unary_io io;
	grpc_op ops[6];
	lr__unary_ops(ops, &io, md, nmd, req);

	r->details[0] = '\0';
	grpc_call_error ce = grpc_call_start_batch(call, ops, 6, &w, NULL);
	if (ce != GRPC_CALL_OK) {
		r->status = GRPC_STATUS_INTERNAL;
		snprintf(r->details, sizeof(r->details), "grpc_call_start_batch: %d", ce);
	} else {
		lr__unary_wait(&w);
		r->status = io.status;
		if (r->status == GRPC_STATUS_DEADLINE_EXCEEDED)
			lr__route_unanswered(&c->chan, member);
		else if (r->status != GRPC_STATUS_UNAVAILABLE)
			lr__route_answered(&c->chan, member);
		/* The texts are for error messages only: not made for calls
		 * that succeed (most of them). */
		if (r->status != GRPC_STATUS_OK)
			lr__status_text(io.details, io.error_string, "", r->details,
			                sizeof(r->details));
	}
	r->peer[0] = '\0';
	if (r->status != GRPC_STATUS_OK)
		peer_of(call, r->peer, sizeof(r->peer));

	r->data = NULL;
	r->len = 0;
	if (r->status == GRPC_STATUS_OK && io.reply != NULL &&
	    lr__unpack_bytes(io.reply, &r->data, &r->len) != 0) {
		r->status = GRPC_STATUS_RESOURCE_EXHAUSTED;
		snprintf(r->details, sizeof(r->details), "out of memory reading reply");
	}
	grpc_byte_buffer_destroy(req);
	lr__unary_io_free(&io);
	grpc_call_unref(call);
	lr__unary_wait_end(&w);
	lr__call_count_attempt(slot, lr_mono_us() - t0);
}

/* ---- the retry policy --------------------------------------------------- */

/* Attempts of one call until one succeeds, fails for good, or the call's
 * deadline leaves no room for another; *r is the last one's.
 *  - A refused token (etcd refused before doing anything) is renewed once
 *    and the call made again, retryable or not.
 *  - UNAVAILABLE and DEADLINE_EXCEEDED are retried only for a call that
 *    is safe to repeat (!write), with backoff (none after a deadline, which
 *    took long enough), unless gRPC's text says TLS failed.
 * Without `token`, the call goes without the client's token (Authenticate
 * itself). 0, or the error of a failed re-authentication (then *r holds
 * no data). */
static int attempts(lr_etcd *c, lr_call_slot *slot, const char *method, grpc_slice req,
                    bool write, bool token_sent, struct lr_attempt *r, lr_err *err)
{
	int64_t deadline_ms = lr_mono_ms() + c->call_timeout_ms;
	lr_backoff bo;
	lr_backoff_init(&bo, LR_RETRY_BACKOFF_MIN_MS, LR_RETRY_BACKOFF_MAX_MS);
	bool reauthed = false;

	/* A retryable call gets several attempts within its deadline: a
	 * request forwarded to a leader that just died hangs on the server
	 * for etcd's own request timeout (7 s by default), longer than ours. */
	int64_t attempt_ms = write ? c->call_timeout_ms : c->call_timeout_ms / 3;
	if (attempt_ms < LR_ATTEMPT_MIN_MS)
		attempt_ms = c->call_timeout_ms < LR_ATTEMPT_MIN_MS ? c->call_timeout_ms
		                                                    : LR_ATTEMPT_MIN_MS;
	for (;;) {
		char *token = token_sent ? lr__token_copy(c) : NULL;
		int64_t now = lr_mono_ms();
		int64_t attempt_end = now + attempt_ms < deadline_ms ? now + attempt_ms : deadline_ms;
		r->sent_ms = now;
		lr__unary_attempt(c, slot, method, req, lr__mono_ms_to_timespec(attempt_end), token, r);
		free(token);
		if (r->status == GRPC_STATUS_OK)
			return 0;
		if (token_sent && lr__token_expired(r->status, r->details) && !reauthed &&
		    c->user != NULL) {
			reauthed = true;
			int rc = lr__authenticate(c, err);
			if (rc != 0)
				return rc;
			continue;
		}
		bool transient = r->status == GRPC_STATUS_UNAVAILABLE ||
		                 r->status == GRPC_STATUS_DEADLINE_EXCEEDED ||
		                 lr__stream_lost(r->status, r->details);
		/* A write refused for want of a leader was not applied: another
		 * member may have one. */
		bool again = write ? lr__no_leader(r->status, r->details) : transient;
		if (!again || lr__status_code(r->status, r->details, false) == LR_ETLS)
			return 0;
		pthread_mutex_lock(&c->mu);
		int64_t wait = lr_backoff_next(&bo, &c->rng);
		bool closing = c->closing; /* the renewer, stopped by a close */
		pthread_mutex_unlock(&c->mu);
		if (closing)
			return 0;
		if (r->status == GRPC_STATUS_DEADLINE_EXCEEDED)
			wait = 0;
		if (lr_mono_ms() + wait >= deadline_ms)
			return 0;
		free(r->data);
		lr_fiber_sleep_ms(wait); /* a fiber lets the others run */
	}
}

void lr__unary_tokenless(lr_etcd *c, lr_call_slot *slot, const char *method, grpc_slice req,
                         struct lr_attempt *r)
{
	attempts(c, slot, method, req, false, false, r, NULL);
}

/* ---- the failure in words ----------------------------------------------- */

/* What to do about a refusal by etcd's access control: " (...)" or "". */
static void auth_hint(const lr_etcd *c, int code, const char *details, char *buf,
                      size_t size)
{
	buf[0] = '\0';
	if (code == LR_EAUTH && strstr(details, "user name is empty") != NULL)
		snprintf(buf, size, " (etcd has authentication enabled: give lr_client_opts.user)");
	else if (code == LR_EPERM && c->user != NULL)
		snprintf(buf, size, " (etcd user %.60s has no role granting this on "
		         "these keys)", c->user);
}

/* The error of a call whose last attempt r failed, with a message naming
 * the member (or the endpoints), the method and gRPC's text, and what to do
 * about TLS and auth failures. A deadline that passed while no member was
 * connected reads as "no endpoint reachable". */
static int describe_failure(lr_etcd *c, const char *method, const struct lr_attempt *r,
                            bool write, lr_err *err)
{
	int rc = lr__status_code(r->status, r->details, write);
	if (r->status == GRPC_STATUS_DEADLINE_EXCEEDED && !lr__route_connected(&c->chan)) {
		/* The call waited for a connection that never came. */
		char last[256];
		lr__connect_failure(&c->chan, last, sizeof(last));
		rc = write ? LR_EAMBIGUOUS : LR_EUNAVAILABLE;
		if (!write && lr__tls_error(&c->chan, last, method, true, err) != 0)
			return LR_ETLS;
		return lr__unreachable_error(&c->chan, method, last, c->call_timeout_ms, rc, err);
	}
	if (rc == LR_ETLS && lr__tls_error(&c->chan, r->details, method, false, err) != 0)
		return rc;
	const char *where = r->peer[0] != '\0' && strcmp(r->peer, "unknown") != 0
	                        ? r->peer : c->chan.endpoints;
	char hint[160];
	auth_hint(c, rc, r->details, hint, sizeof(hint));
	return lr_err_set(err, rc, "etcd %s (%s): %s%s%s%s", where, lr__method_short(method),
	                  rc == LR_ETOOLARGE ? "request too large for etcd: " : "",
	                  r->details[0] ? r->details : "call failed", hint,
	                  rc == LR_EAMBIGUOUS ? " (the write may have applied)" : "");
}

/* ---- the call ------------------------------------------------------------- */

int lr_etcd_unary(lr_etcd *c, const char *method, const ProtobufCMessage *req,
                  const ProtobufCMessageDescriptor *resp_desc,
                  ProtobufCMessage **resp, int flags, lr_err *err)
{
	return lr_etcd_unary_sent(c, method, req, resp_desc, resp, flags, NULL, err);
}

int lr_etcd_unary_sent(lr_etcd *c, const char *method, const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *resp_desc,
                       ProtobufCMessage **resp, int flags, int64_t *sent_ms, lr_err *err)
{
	bool write = (flags & LR_CALL_RETRY) == 0;
	lr_call_slot *slot = lr__call_slot(c->stats, method, false);
	grpc_slice bytes = lr__pack_slice(req);
	struct lr_attempt r = { 0 };
	int rc = attempts(c, slot, method, bytes, write, true, &r, err);
	grpc_slice_unref(bytes);
	if (rc != 0)
		goto out;
	if (r.status != GRPC_STATUS_OK) {
		rc = describe_failure(c, method, &r, write, err);
		goto out;
	}
	*resp = lr__unpack(resp_desc, r.len, r.data);
	if (*resp == NULL)
		rc = lr_err_set(err, LR_EETCD, "etcd %s (%s): malformed reply",
		                c->chan.endpoints, lr__method_short(method));
	if (sent_ms != NULL)
		*sent_ms = r.sent_ms;
out:
	free(r.data);
	lr__call_count_result(slot, rc);
	return rc;
}
