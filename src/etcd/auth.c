/* auth.c - etcd auth: Authenticate, the client's token, and getting a new
 * one when etcd refuses it, for unary calls (unary.c) and streams (through
 * the hooks stream.c calls). One of the three parts of the client handle,
 * with unary.c and transport.c (transport_int.h).
 * Threads: any; a token renewed for a stream is fetched by a renewer
 * thread of the client's, never on the stream thread. c->mu guards the
 * token and the renewer's flags; it is taken after the streams' lock (the
 * `token` hook runs under it), never before, and never held across a
 * call. */
#include "etcd/auth.h"

#include <stdlib.h>
#include <string.h>

#include "rpc.pb-c.h"

#include "base/error.h"
#include "etcd/rpc.h"
#include "etcd/transport_int.h"

#define M_AUTHENTICATE "/etcdserverpb.Auth/Authenticate"

/* etcd's words for "this token will not do, get another one". */
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

char *lr__token_copy(lr_etcd *c)
{
	if (c->user == NULL)
		return NULL;
	pthread_mutex_lock(&c->mu);
	char *t = c->token != NULL ? strdup(c->token) : NULL;
	pthread_mutex_unlock(&c->mu);
	return t;
}

int lr__authenticate(lr_etcd *c, lr_err *err)
{
	Etcdserverpb__AuthenticateRequest req = ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
	req.name = c->user;
	req.password = c->password != NULL ? c->password : "";
	grpc_slice bytes = lr__pack_slice(&req.base);
	lr_call_slot *slot = lr__call_slot(c->stats, M_AUTHENTICATE, false);
	struct lr_attempt r;
	/* Retried like a read: a paused member or an election refuses it for
	 * a moment, and a failure here fails the call that needed a token. */
	lr__unary_tokenless(c, slot, M_AUTHENTICATE, bytes, &r);
	grpc_slice_unref(bytes);
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
		if (rc == LR_ETLS && lr__tls_error(&c->chan, r.details, M_AUTHENTICATE, false, err) != 0)
			goto out;
		/* Never echo the password; name the user only. */
		lr_err_set(err, rc, "etcd %s (Auth/Authenticate): authentication as "
		           "etcd user %s failed: %s", r.peer[0] ? r.peer : c->chan.endpoints,
		           c->user, r.details);
		goto out;
	}
	Etcdserverpb__AuthenticateResponse *resp =
	    (Etcdserverpb__AuthenticateResponse *)lr__unpack(
	        &etcdserverpb__authenticate_response__descriptor, r.len, r.data);
	if (resp == NULL) {
		rc = lr_err_set(err, LR_EETCD, "etcd %s (Auth/Authenticate): malformed reply",
		                c->chan.endpoints);
		goto out;
	}
	char *token = resp->token != NULL ? strdup(resp->token) : NULL;
	lr_etcd_reply_free(&resp->base);
	if (token == NULL) {
		rc = lr_err_set(err, LR_ENOMEM, "etcd %s (Auth/Authenticate): out of memory",
		                c->chan.endpoints);
		goto out;
	}
	pthread_mutex_lock(&c->mu);
	free(c->token);
	c->token = token;
	pthread_mutex_unlock(&c->mu);
out:
	lr__call_count_result(slot, rc);
	free(r.data);
	return rc;
}

/* ---- renewals for the streams ------------------------------------------------ */

/* The stream thread must not wait for Authenticate: keepalive replies,
 * watch events and every unary call's completion go through it, and an
 * Authenticate that waits for a paused member or an election would hold
 * them all, long enough to lose a short lease. */
static void *renewer_main(void *p)
{
	lr_etcd *c = p;
	pthread_mutex_lock(&c->mu);
	for (;;) {
		while (!c->renew_wanted && !c->closing)
			pthread_cond_wait(&c->renew_cond, &c->mu);
		if (c->closing)
			break;
		c->renew_wanted = false;
		c->renewing = true;
		pthread_mutex_unlock(&c->mu);
		bool renewed = lr__authenticate(c, NULL) == 0;
		if (renewed)
			lr__streams_token_renewed(c->streams);
		pthread_mutex_lock(&c->mu);
		c->renewing = false;
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

/* Have the renewer get a token newer than `sent` (NULL: any); never waits.
 * Nothing to do while it is at work already or once the token changed. */
static void want_renewal(lr_etcd *c, const char *sent)
{
	pthread_mutex_lock(&c->mu);
	bool replaced = sent != NULL && c->token != NULL && strcmp(sent, c->token) != 0;
	if (!c->closing && !c->renewing && !replaced) {
		c->renew_wanted = true;
		if (!c->renewer_started)
			c->renewer_started = pthread_create(&c->renewer, NULL, renewer_main, c) == 0;
		pthread_cond_signal(&c->renew_cond);
	}
	pthread_mutex_unlock(&c->mu);
}

void lr__auth_stop(lr_etcd *c)
{
	pthread_mutex_lock(&c->mu);
	c->closing = true;
	pthread_cond_signal(&c->renew_cond);
	bool started = c->renewer_started;
	pthread_mutex_unlock(&c->mu);
	if (started)
		pthread_join(c->renewer, NULL);
}

/* ---- hooks for the stream thread ------------------------------------------ */

static char *stream_token(void *ctx)
{
	return lr__token_copy(ctx);
}

static void stream_call_ended(void *ctx, const char *sent, grpc_status_code st,
                              const char *details)
{
	lr_etcd *c = ctx;
	if (c->user != NULL && lr__token_expired(st, details))
		want_renewal(c, sent);
}

/* etcd 3.4 checks a Watch stream's token on every watch create, not when
 * the stream opens, and refuses a create with an expired token in a reply
 * while the stream stays open: 0 when another call got a new token
 * already, else -1 and one is asked for (the stream reopens, backing off
 * until it has it). */
static int stream_renew(void *ctx, const char *sent)
{
	lr_etcd *c = ctx;
	if (c->user == NULL)
		return -1;
	pthread_mutex_lock(&c->mu);
	bool same = sent == NULL || c->token == NULL || strcmp(sent, c->token) == 0;
	pthread_mutex_unlock(&c->mu);
	if (!same)
		return 0;
	want_renewal(c, sent);
	return -1;
}

lr_stream_auth lr__stream_auth(lr_etcd *c)
{
	return (lr_stream_auth){
		.ctx = c,
		.token = stream_token,
		.call_ended = stream_call_ended,
		.renew = stream_renew,
	};
}
