/* lease.c - lease calls and the keepalive service, which times each
 * renewal's round trip for the client's call counts.
 *
 * Renewals go out every TTL/3 whether or not the one before was answered,
 * a few at most in flight: etcd answers them in order on the stream, so
 * each reply is matched with its own send time, and a link whose round
 * trip is longer than TTL/3 still keeps the lease. A renewal unanswered for
 * TTL/3 plus the last round trip means the member may be cut off or
 * frozen: the stream is opened again on another member (route.h leaves
 * the silent one out until it answers).
 *
 * Threads: grant/revoke/ttl block their caller. The keepalive's stream
 * callbacks (opened, message, closed, tick) run on the client's stream
 * thread; add/remove/deadline run on any thread. k->mu guards the lease
 * table; it is taken before the stream thread's lock, never after, and is
 * not held while a lost-lease callback runs. */
#include "etcd/lease.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.pb-c.h"

#include "base/clock.h"
#include "base/error.h"
#include "etcd/rpc.h"
#include "etcd/stream.h"
#include "etcd/transport.h"

/* Renewals of one lease in flight at most: TTL/3 apart, so three cover a
 * round trip as long as the TTL. */
#define KA_IN_FLIGHT 3

struct lease {
	int64_t id;
	int64_t ttl_ms;
	int64_t deadline;  /* monotonic ms */
	int64_t next_send; /* when to renew next */
	/* Renewals in flight on the current stream, oldest first: when
	 * each was sent, in ms and in microseconds (for its round trip). */
	struct sent {
		int64_t ms, us;
	} sent[KA_IN_FLIGHT];
	int n_sent;
	int64_t rtt_ms;    /* the last round trip (first: the grant's) */
	lr_lease_lost_fn fn;
	lr_lease_renewed_fn renewed;
	void *user;
	struct lease *next;
};

struct lr_keepalive {
	lr_stream *stream;
	pthread_mutex_t mu;
	pthread_cond_t cond;
	struct lease *leases;
	int64_t delivering; /* id whose lost callback runs now, 0: none */
	const char *endpoints; /* the client's, for messages */
	char trouble[160];  /* what went wrong last since a renewal */
};

int lr_lease_grant(lr_etcd *c, int64_t ttl_s, int64_t *id, int64_t *granted_s,
                   int64_t *sent_ms, lr_err *err)
{
	Etcdserverpb__LeaseGrantRequest req = ETCDSERVERPB__LEASE_GRANT_REQUEST__INIT;
	req.ttl = ttl_s;
	ProtobufCMessage *resp = NULL;
	/* An unused lease from a lost reply expires on its own: safe to retry.
	 * The lease granted is the answered attempt's: its TTL counts from
	 * that attempt's sending, not from the first's. */
	int64_t sent = 0;
	int rc = lr_etcd_unary_sent(c, "/etcdserverpb.Lease/LeaseGrant", &req.base,
	                            &etcdserverpb__lease_grant_response__descriptor, &resp,
	                            LR_CALL_RETRY, &sent, err);
	if (rc != 0)
		return lr_err_wrap(err, rc, "lease grant");
	Etcdserverpb__LeaseGrantResponse *gr = (Etcdserverpb__LeaseGrantResponse *)resp;
	if (gr->error != NULL && gr->error[0] != '\0') {
		rc = lr_err_set(err, LR_EETCD, "lease grant: etcd %s: %s",
		                lr_etcd_endpoints(c), gr->error);
	} else {
		*id = gr->id;
		*granted_s = gr->ttl;
		if (sent_ms != NULL)
			*sent_ms = sent;
	}
	lr_etcd_reply_free(resp);
	return rc;
}

int lr_lease_revoke(lr_etcd *c, int64_t id, lr_err *err)
{
	Etcdserverpb__LeaseRevokeRequest req = ETCDSERVERPB__LEASE_REVOKE_REQUEST__INIT;
	req.id = id;
	ProtobufCMessage *resp = NULL;
	int rc = lr_etcd_unary(c, "/etcdserverpb.Lease/LeaseRevoke", &req.base,
	                       &etcdserverpb__lease_revoke_response__descriptor, &resp,
	                       LR_CALL_RETRY, err);
	if (rc == LR_ELEASE)
		return 0;
	if (rc != 0)
		return lr_err_wrap(err, rc, "lease revoke %llx", (unsigned long long)id);
	lr_etcd_reply_free(resp);
	return 0;
}

int lr_lease_ttl(lr_etcd *c, int64_t id, int64_t *ttl_s, int64_t *granted_s,
                 lr_err *err)
{
	Etcdserverpb__LeaseTimeToLiveRequest req = ETCDSERVERPB__LEASE_TIME_TO_LIVE_REQUEST__INIT;
	req.id = id;
	ProtobufCMessage *resp = NULL;
	int rc = lr_etcd_unary(c, "/etcdserverpb.Lease/LeaseTimeToLive", &req.base,
	                       &etcdserverpb__lease_time_to_live_response__descriptor,
	                       &resp, LR_CALL_RETRY, err);
	if (rc != 0)
		return lr_err_wrap(err, rc, "lease ttl %llx", (unsigned long long)id);
	Etcdserverpb__LeaseTimeToLiveResponse *tr = (Etcdserverpb__LeaseTimeToLiveResponse *)resp;
	*ttl_s = tr->ttl;
	if (granted_s != NULL)
		*granted_s = tr->grantedttl;
	lr_etcd_reply_free(resp);
	return 0;
}

/* ---- keepalive ---------------------------------------------------------- */

static void send_renewal(lr_keepalive *k, struct lease *l, int64_t now)
{
	Etcdserverpb__LeaseKeepAliveRequest req = ETCDSERVERPB__LEASE_KEEP_ALIVE_REQUEST__INIT;
	req.id = l->id;
	if (l->n_sent < KA_IN_FLIGHT && lr_stream_send(k->stream, &req.base) == 0) {
		l->sent[l->n_sent++] = (struct sent){ now, lr_mono_us() };
		l->next_send = now + l->ttl_ms / 3;
	}
}

/* The oldest renewal in flight answered: forget it, give its send time. */
static struct sent answered(struct lease *l)
{
	struct sent oldest = l->sent[0];
	l->n_sent--;
	memmove(l->sent, l->sent + 1, (size_t)l->n_sent * sizeof(l->sent[0]));
	return oldest;
}

static struct lease *find(lr_keepalive *k, int64_t id)
{
	for (struct lease *l = k->leases; l != NULL; l = l->next)
		if (l->id == id)
			return l;
	return NULL;
}

static void unlink_lease(lr_keepalive *k, struct lease *dead)
{
	for (struct lease **pp = &k->leases; *pp != NULL; pp = &(*pp)->next)
		if (*pp == dead) {
			*pp = dead->next;
			return;
		}
}

/* Drop the lease from the table and tell its owner; k->mu held on entry and
 * on return, released during the callback. */
static void lose(lr_keepalive *k, struct lease *l, const char *why)
{
	unlink_lease(k, l);
	k->delivering = l->id;
	pthread_mutex_unlock(&k->mu);
	l->fn(l->user, l->id, why);
	pthread_mutex_lock(&k->mu);
	k->delivering = 0;
	pthread_cond_broadcast(&k->cond);
	free(l);
}

static void ka_opened(void *owner, lr_stream *s)
{
	lr_keepalive *k = owner;
	int64_t now = lr_mono_ms();
	pthread_mutex_lock(&k->mu);
	for (struct lease *l = k->leases; l != NULL; l = l->next)
		if (l->n_sent == 0)
			send_renewal(k, l, now);
	pthread_mutex_unlock(&k->mu);
}

static void ka_message(void *owner, const uint8_t *data, size_t len)
{
	lr_keepalive *k = owner;
	Etcdserverpb__LeaseKeepAliveResponse *r =
	    (Etcdserverpb__LeaseKeepAliveResponse *)lr__unpack(
	        &etcdserverpb__lease_keep_alive_response__descriptor, len, data);
	if (r == NULL)
		return;
	int64_t now = lr_mono_ms();
	lr_lease_renewed_fn renewed = NULL;
	void *user = NULL;
	int64_t deadline = 0;
	pthread_mutex_lock(&k->mu);
	struct lease *l = find(k, r->id);
	int64_t sent = 0;
	if (l != NULL && l->n_sent > 0) {
		struct sent s = answered(l);
		lr_stream_count_round_trip(k->stream, lr_mono_us() - s.us);
		sent = s.ms;
		l->rtt_ms = now - sent;
	}
	if (l != NULL) {
		if (r->ttl <= 0) {
			char why[300];
			snprintf(why, sizeof(why), "etcd %s answered TTL 0: the lease expired or "
			         "was revoked", k->endpoints);
			lose(k, l, why);
		} else if (sent != 0) {
			l->ttl_ms = r->ttl * 1000;
			if (sent + l->ttl_ms > l->deadline)
				l->deadline = sent + l->ttl_ms;
			k->trouble[0] = '\0';
			renewed = l->renewed;
			user = l->user;
			deadline = l->deadline;
			k->delivering = l->id;
		}
	}
	pthread_mutex_unlock(&k->mu);
	if (renewed != NULL)
		renewed(user, r->id, deadline);
	if (deadline != 0) {
		pthread_mutex_lock(&k->mu);
		k->delivering = 0;
		pthread_cond_broadcast(&k->cond);
		pthread_mutex_unlock(&k->mu);
	}
	lr_etcd_reply_free(&r->base);
}

static void ka_closed(void *owner, int code, const char *why)
{
	lr_keepalive *k = owner;
	pthread_mutex_lock(&k->mu);
	(void)code;
	/* Our own reset ends it as cancelled: what led to it says more. */
	if (k->trouble[0] == '\0' || strcasestr(why, "cancel") == NULL)
		snprintf(k->trouble, sizeof(k->trouble), "the stream ended: %s", why);
	for (struct lease *l = k->leases; l != NULL; l = l->next)
		l->n_sent = 0; /* resent as soon as the stream is back */
	pthread_mutex_unlock(&k->mu);
}

static int64_t ka_tick(void *owner, int64_t now)
{
	lr_keepalive *k = owner;
	int64_t next = INT64_MAX;
	bool reset = false;
	pthread_mutex_lock(&k->mu);
restart:
	for (struct lease *l = k->leases; l != NULL; l = l->next) {
		if (now >= l->deadline) {
			char why[500], pending[80] = "";
			if (l->n_sent > 0)
				snprintf(pending, sizeof(pending), ", and the one sent %lld ms ago has "
				         "no answer", (long long)(now - l->sent[0].ms));
			snprintf(why, sizeof(why), "no renewal succeeded within the TTL (%llds) "
			         "from etcd %s: the last one answered was sent %lld ms ago%s%s%s",
			         (long long)(l->ttl_ms / 1000), k->endpoints,
			         (long long)(now - (l->deadline - l->ttl_ms)), pending,
			         k->trouble[0] ? "; last: " : "", k->trouble);
			lose(k, l, why);
			goto restart; /* the table may have changed meanwhile */
		}
		/* The oldest renewal in flight is overdue when unanswered for
		 * a third of the TTL beyond the last round trip (counted up to
		 * a third of the TTL: one slow reply must not hide a member cut
		 * off later). */
		int64_t rtt = l->rtt_ms < l->ttl_ms / 3 ? l->rtt_ms : l->ttl_ms / 3;
		int64_t overdue = l->n_sent > 0 ? l->sent[0].ms + l->ttl_ms / 3 + rtt : INT64_MAX;
		int64_t due;
		if (now >= overdue) {
			/* The member may be cut off. Reconnect (to another
			 * member, route.h), and renew there at once. */
			reset = true;
			snprintf(k->trouble, sizeof(k->trouble), "no reply for %lld ms",
			         (long long)(now - l->sent[0].ms));
			l->n_sent = 0;
			l->next_send = now;
			due = now + 50;
		} else {
			if (now >= l->next_send)
				send_renewal(k, l, now);
			/* Not sent (the stream is down, or too many in flight):
			 * again in a while, not at once, which would spin. */
			due = l->next_send > now ? l->next_send : now + 50;
			if (l->n_sent > 0 && overdue < due)
				due = overdue;
		}
		if (due < next)
			next = due;
		if (l->deadline < next)
			next = l->deadline;
	}
	pthread_mutex_unlock(&k->mu);
	if (reset)
		lr_stream_reset(k->stream, "keepalive reply overdue");
	return next;
}

static const lr_stream_ops ka_ops = {
	.opened = ka_opened,
	.message = ka_message,
	.closed = ka_closed,
	.tick = ka_tick,
};

int lr_keepalive_new(lr_etcd *c, lr_keepalive **out, lr_err *err)
{
	lr_keepalive *k = calloc(1, sizeof(*k));
	if (k == NULL)
		return lr_err_set(err, LR_ENOMEM, "keepalive: out of memory");
	pthread_mutex_init(&k->mu, NULL);
	pthread_cond_init(&k->cond, NULL);
	k->endpoints = lr_etcd_endpoints(c);
	int rc = lr_stream_add(lr_etcd_streams(c), "/etcdserverpb.Lease/LeaseKeepAlive", &ka_ops, k,
	                       &k->stream, err);
	if (rc != 0) {
		pthread_cond_destroy(&k->cond);
		pthread_mutex_destroy(&k->mu);
		free(k);
		return rc;
	}
	*out = k;
	return 0;
}

void lr_keepalive_free(lr_keepalive *k)
{
	if (k == NULL)
		return;
	lr_stream_remove(k->stream);
	while (k->leases != NULL) {
		struct lease *l = k->leases;
		k->leases = l->next;
		free(l);
	}
	pthread_cond_destroy(&k->cond);
	pthread_mutex_destroy(&k->mu);
	free(k);
}

int lr_keepalive_add(lr_keepalive *k, int64_t id, int64_t ttl_s, int64_t sent_ms,
                     lr_lease_lost_fn fn, lr_lease_renewed_fn renewed, void *user,
                     lr_err *err)
{
	struct lease *l = calloc(1, sizeof(*l));
	if (l == NULL)
		return lr_err_set(err, LR_ENOMEM, "keepalive: out of memory");
	l->id = id;
	l->ttl_ms = ttl_s * 1000;
	l->deadline = sent_ms + l->ttl_ms;
	/* Counted from the grant's sending, as its deadline is: over a slow
	 * link the first renewal may be due at once. */
	l->next_send = sent_ms + l->ttl_ms / 3;
	int64_t now = lr_mono_ms();
	l->rtt_ms = now > sent_ms ? now - sent_ms : 0;
	l->fn = fn;
	l->renewed = renewed;
	l->user = user;
	pthread_mutex_lock(&k->mu);
	l->next = k->leases;
	k->leases = l;
	pthread_mutex_unlock(&k->mu);
	lr_stream_kick(k->stream);
	return 0;
}

void lr_keepalive_remove(lr_keepalive *k, int64_t id)
{
	pthread_mutex_lock(&k->mu);
	struct lease *l = find(k, id);
	if (l != NULL) {
		unlink_lease(k, l);
		free(l);
	}
	while (k->delivering == id && !lr_stream_on_thread(k->stream))
		pthread_cond_wait(&k->cond, &k->mu);
	pthread_mutex_unlock(&k->mu);
}

int64_t lr_keepalive_deadline(lr_keepalive *k, int64_t id)
{
	pthread_mutex_lock(&k->mu);
	struct lease *l = find(k, id);
	int64_t d = l != NULL ? l->deadline : 0;
	pthread_mutex_unlock(&k->mu);
	return d;
}
