/* transport_int.h - the etcd client handle's insides, shared by its three
 * files: transport.c (open, close), unary.c (unary calls: one attempt, the
 * retry policy, the failure in words) and auth.c (tokens). Internal to
 * src/etcd/; the layers below know nothing of it. */
#ifndef LR_ETCD_TRANSPORT_INT_H
#define LR_ETCD_TRANSPORT_INT_H

#include <pthread.h>

#include <grpc/grpc.h>

#include "base/backoff.h"
#include "etcd/callstats.h"
#include "etcd/channel.h"
#include "etcd/stream.h"
#include "etcd/transport.h"

struct lr_etcd {
	lr_channel chan;
	lr_streams *streams;
	lr_call_stats *stats;
	int64_t call_timeout_ms;
	char *user, *password; /* etcd auth; user NULL for none */

	pthread_mutex_t mu;    /* guards token, rng and the renewer; taken
	                        * after st->mu of the streams, never before */
	char *token;           /* auth token */
	lr_rng rng;            /* unary retry jitter */
	/* Tokens for the streams come from a thread of their own, so that the
	 * stream thread never waits for etcd (auth.c). */
	pthread_t renewer;
	pthread_cond_t renew_cond;
	bool renewer_started, renew_wanted, renewing, closing;
};

/* What one unary attempt left behind (unary.c). */
struct lr_attempt {
	grpc_status_code status;
	char details[256]; /* "" when status is OK */
	char peer[128];    /* the member that answered, "" when OK */
	uint8_t *data;     /* the reply, when OK (malloc'd) */
	size_t len;
	int64_t sent_ms;   /* when the attempt began (monotonic ms) */
};

/* One attempt of a unary call of `req` (packed) until `deadline`, sending
 * `token` (may be NULL), counted in `slot` (may be NULL). Any thread;
 * blocks. The caller frees r->data. */
void lr__unary_attempt(lr_etcd *c, lr_call_slot *slot, const char *method,
                       grpc_slice req, gpr_timespec deadline, const char *token,
                       struct lr_attempt *r);
/* A call safe to repeat, without the client's token (Authenticate): its
 * attempts within the call timeout, retried on UNAVAILABLE and
 * DEADLINE_EXCEEDED as reads are; *r is the last one's. */
void lr__unary_tokenless(lr_etcd *c, lr_call_slot *slot, const char *method, grpc_slice req,
                         struct lr_attempt *r);

#endif
