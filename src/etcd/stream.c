/* stream.c - the stream thread: one completion queue per client, served by
 * one thread that sleeps in grpc_completion_queue_next until an event or
 * the earliest timer a stream owner asked for (an idle client uses no CPU).
 * It serves the long-lived bidi streams (LeaseKeepAlive, Watch) and
 * completes the unary calls other threads start on its queue: a caller
 * then sleeps on a semaphore instead of each caller polling gRPC on a queue
 * of its own, which cost a handful of thread hand-offs per call.
 *
 * Locking: c->mu guards the stream table, each stream's send queue and each
 * call's bookkeeping. It is never held while an owner callback runs. Owner
 * callbacks run on the stream thread only, one at a time. Streams carry the
 * `hasleader` metadata so that a member cut off from the leader refuses them. */
#include "etcd/transport_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/support/alloc.h>

#include "rpc.pb-c.h"

#include "base/clock.h"
#include "base/error.h"

static void free_sendq(lr_stream *s)
{
	while (s->q_head != NULL) {
		struct sendq *q = s->q_head;
		s->q_head = q->next;
		grpc_byte_buffer_destroy(q->buf);
		free(q);
	}
	s->q_tail = NULL;
}

/* ---- streams ------------------------------------------------------------ */

/* Start a batch on a stream call and count it; c->mu held. */
static bool start_ops(struct scall *sc, grpc_op *ops, size_t n, struct tag *t)
{
	if (grpc_call_start_batch(sc->call, ops, n, t, NULL) != GRPC_CALL_OK)
		return false;
	sc->outstanding++;
	return true;
}

/* Send the next queued message if none is in flight; c->mu held. */
static void pump_send(lr_stream *s)
{
	struct scall *sc = s->cur;
	if (sc == NULL || sc->ended || sc->send_busy || s->q_head == NULL)
		return;
	struct sendq *q = s->q_head;
	s->q_head = q->next;
	if (s->q_head == NULL)
		s->q_tail = NULL;
	sc->send_buf = q->buf;
	free(q);
	grpc_op op;
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_SEND_MESSAGE;
	op.data.send_message.send_message = sc->send_buf;
	if (start_ops(sc, &op, 1, &sc->t_send)) {
		sc->send_busy = true;
	} else {
		grpc_byte_buffer_destroy(sc->send_buf);
		sc->send_buf = NULL;
	}
}

static void arm_recv(struct scall *sc)
{
	grpc_op op;
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_MESSAGE;
	op.data.recv_message.recv_message = &sc->recv_buf;
	start_ops(sc, &op, 1, &sc->t_recv);
}

static void free_scall(struct scall *sc)
{
	if (sc->send_buf != NULL)
		grpc_byte_buffer_destroy(sc->send_buf);
	if (sc->recv_buf != NULL)
		grpc_byte_buffer_destroy(sc->recv_buf);
	grpc_metadata_array_destroy(&sc->md_in);
	grpc_metadata_array_destroy(&sc->md_trail);
	grpc_slice_unref(sc->details);
	if (sc->error_string != NULL)
		gpr_free((void *)sc->error_string);
	grpc_call_unref(sc->call);
	free(sc->token);
	free(sc);
}

/* Open a new call for s; c->mu held. On failure s stays down. */
static void open_call(lr_etcd *c, lr_stream *s)
{
	struct scall *sc = calloc(1, sizeof(*sc));
	if (sc == NULL)
		return;
	sc->stream = s;
	sc->t_start = (struct tag){ TAG_START, sc };
	sc->t_send = (struct tag){ TAG_SEND, sc };
	sc->t_recv = (struct tag){ TAG_RECV, sc };
	sc->t_status = (struct tag){ TAG_STATUS, sc };
	grpc_metadata_array_init(&sc->md_in);
	grpc_metadata_array_init(&sc->md_trail);
	sc->details = grpc_empty_slice();
	sc->call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq,
	                                    grpc_slice_from_static_string(s->method), NULL,
	                                    gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
	size_t nmd = 0;
	sc->md_out[nmd].key = grpc_slice_from_static_string("hasleader");
	sc->md_out[nmd].value = grpc_slice_from_static_string("true");
	nmd++;
	if (c->token != NULL) {
		sc->token = strdup(c->token);
		sc->md_out[nmd].key = grpc_slice_from_static_string("token");
		sc->md_out[nmd].value = grpc_slice_from_static_string(sc->token);
		nmd++;
	}
	grpc_op ops[2];
	memset(ops, 0, sizeof(ops));
	lr__op_send_metadata(&ops[0], sc->md_out, nmd);
	ops[1].op = GRPC_OP_RECV_INITIAL_METADATA;
	ops[1].data.recv_initial_metadata.recv_initial_metadata = &sc->md_in;
	bool ok = start_ops(sc, ops, 2, &sc->t_start);
	grpc_op st;
	memset(&st, 0, sizeof(st));
	st.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	st.data.recv_status_on_client.trailing_metadata = &sc->md_trail;
	st.data.recv_status_on_client.status = &sc->status;
	st.data.recv_status_on_client.status_details = &sc->details;
	st.data.recv_status_on_client.error_string = &sc->error_string;
	ok = ok && start_ops(sc, &st, 1, &sc->t_status);
	if (!ok) {
		/* Nothing was accepted that could complete: give up this try. */
		grpc_call_cancel(sc->call, NULL);
		if (sc->outstanding == 0) {
			free_scall(sc);
			return;
		}
	}
	arm_recv(sc);
	s->cur = sc;
}

int lr_stream_send(lr_stream *s, const ProtobufCMessage *msg)
{
	lr_etcd *c = s->client;
	grpc_byte_buffer *bb = lr__pack(msg);
	struct sendq *q = malloc(sizeof(*q));
	if (bb == NULL || q == NULL) {
		if (bb != NULL)
			grpc_byte_buffer_destroy(bb);
		free(q);
		return LR_ENOMEM;
	}
	q->buf = bb;
	q->next = NULL;
	pthread_mutex_lock(&c->mu);
	if (s->cur == NULL || s->cur->ended || s->removed) {
		pthread_mutex_unlock(&c->mu);
		grpc_byte_buffer_destroy(bb);
		free(q);
		return LR_EUNAVAILABLE;
	}
	if (s->q_tail != NULL)
		s->q_tail->next = q;
	else
		s->q_head = q;
	s->q_tail = q;
	pump_send(s);
	pthread_mutex_unlock(&c->mu);
	return 0;
}

void lr_stream_reset(lr_stream *s, const char *why)
{
	(void)why;
	lr_etcd *c = s->client;
	pthread_mutex_lock(&c->mu);
	if (s->cur != NULL && !s->cur->ended)
		grpc_call_cancel(s->cur->call, NULL);
	pthread_mutex_unlock(&c->mu);
}

void lr_etcd_wake(lr_etcd *c)
{
	pthread_mutex_lock(&c->mu);
	if (c->cq != NULL && c->wakes_pending == 0) {
		/* A connectivity watch whose deadline is now: the one portable way
		 * to post an event onto a completion queue from outside. */
		grpc_connectivity_state st = grpc_channel_check_connectivity_state(c->channel, 0);
		grpc_channel_watch_connectivity_state(c->channel, st, gpr_now(GPR_CLOCK_MONOTONIC),
		                                      c->cq, &c->t_wake);
		c->wakes_pending++;
	}
	pthread_mutex_unlock(&c->mu);
}

void lr_stream_kick(lr_stream *s)
{
	lr_etcd *c = s->client;
	pthread_mutex_lock(&c->mu);
	s->next_tick = 0;
	pthread_mutex_unlock(&c->mu);
	lr_etcd_wake(c);
}

bool lr_etcd_on_stream_thread(const lr_etcd *c)
{
	return c->thread_started && pthread_equal(pthread_self(), c->thread);
}

/* etcd 3.4 checks a Watch stream's token on every watch create, not when
 * the stream opens, and refuses a create with an expired token in a reply
 * (watch id -1, canceled, the reason as text) while the stream stays open.
 * That reply, once the stream's token expired: say so. */
static bool watch_token_refused(const lr_stream *s, const uint8_t *data, size_t len)
{
	if (strcmp(s->method, "/etcdserverpb.Watch/Watch") != 0 ||
	    !lr__token_refused_text((const char *)data, len))
		return false; /* the cheap test first: events pass here */
	Etcdserverpb__WatchResponse *r = etcdserverpb__watch_response__unpack(NULL, len, data);
	bool refused = r != NULL && r->canceled && r->cancel_reason != NULL &&
	               lr__token_refused_text(r->cancel_reason, strlen(r->cancel_reason));
	if (r != NULL)
		etcdserverpb__watch_response__free_unpacked(r, NULL);
	return refused;
}

/* A stream call carried a token that etcd no longer takes: get a new one,
 * unless another call already did, and end the call so that the stream
 * opens again with it (its owner then re-sends what the server must know).
 * c->mu held; released during Authenticate. The call cannot be freed
 * meanwhile: its status is still outstanding. */
static void renew_stream_token(lr_etcd *c, struct scall *sc)
{
	bool same = sc->token == NULL || c->token == NULL ||
	            strcmp(sc->token, c->token) == 0;
	int rc = 0;
	if (same) {
		pthread_mutex_unlock(&c->mu);
		rc = lr__authenticate(c, NULL);
		pthread_mutex_lock(&c->mu);
	}
	if (rc == 0 && sc->stream != NULL && !sc->ended)
		grpc_call_cancel(sc->call, NULL);
}

/* Run an owner callback with the lock released; c->mu held on entry/exit. */
#define OWNER_CALL(c, s, expr)                                                \
	do {                                                                  \
		(c)->in_callback = (s);                                       \
		pthread_mutex_unlock(&(c)->mu);                               \
		expr;                                                         \
		pthread_mutex_lock(&(c)->mu);                                 \
		(c)->in_callback = NULL;                                      \
		pthread_cond_broadcast(&(c)->cond);                           \
	} while (0)

static void on_event(lr_etcd *c, struct tag *t, bool ok)
{
	if (t->kind == TAG_WAKE) {
		c->wakes_pending--;
		return;
	}
	struct scall *sc = t->call;
	sc->outstanding--;
	lr_stream *s = sc->stream;
	bool current = s != NULL && s->cur == sc && !s->removed;

	switch (t->kind) {
	case TAG_SEND:
		sc->send_busy = false;
		grpc_byte_buffer_destroy(sc->send_buf);
		sc->send_buf = NULL;
		if (ok && current)
			pump_send(s);
		break;
	case TAG_RECV:
		if (ok && sc->recv_buf != NULL) {
			uint8_t *data = NULL;
			size_t len = 0;
			int urc = lr__unpack_bytes(sc->recv_buf, &data, &len);
			grpc_byte_buffer_destroy(sc->recv_buf);
			sc->recv_buf = NULL;
			if (current && !sc->ended)
				arm_recv(sc);
			bool refused = urc == 0 && current && c->user != NULL &&
			               watch_token_refused(s, data, len);
			if (urc == 0 && current)
				OWNER_CALL(c, s, s->ops->message(s->owner, data, len));
			free(data);
			/* sc->stream is NULL once the owner removed the stream. */
			if (refused && sc->stream != NULL)
				renew_stream_token(c, sc);
		}
		break;
	case TAG_STATUS: {
		sc->ended = true;
		if (current) {
			s->cur = NULL;
			free_sendq(s);
			char *d = grpc_slice_to_c_string(sc->details);
			char why[256];
			snprintf(why, sizeof(why), "%s", d[0] ? d
			         : sc->error_string ? sc->error_string : "stream ended");
			gpr_free(d);
			int code = lr__status_code(sc->status, why, false);
			if (lr__token_expired(sc->status, why) && c->user != NULL) {
				pthread_mutex_unlock(&c->mu);
				lr__authenticate(c, NULL);
				pthread_mutex_lock(&c->mu);
			}
			s->reopen_at = lr_mono_ms() + lr_backoff_next(&s->backoff, &c->rng);
			OWNER_CALL(c, s, s->ops->closed(s->owner, code, why));
		}
		break;
	}
	case TAG_START:
		if (ok && current)
			lr_backoff_reset(&s->backoff);
		break;
	case TAG_WAKE:
	case TAG_UNARY: /* handled before: never here */
		break;
	}
	if (sc->outstanding == 0 && sc->ended)
		free_scall(sc);
}

/* A unary call's batch completed: wake its caller. */
static bool unary_done(void *tag)
{
	if (((struct tag *)tag)->kind != TAG_UNARY)
		return false;
	sem_post(&((struct unary_wait *)tag)->done);
	return true;
}

static void *stream_thread(void *arg)
{
	lr_etcd *c = arg;
	pthread_mutex_lock(&c->mu);
	for (;;) {
		int64_t now = lr_mono_ms();
		int64_t next = INT64_MAX;
		bool calls_left = c->wakes_pending > 0;
		for (lr_stream *s = c->streams; s != NULL; s = s->next) {
			if (s->removed)
				continue;
			if (s->cur == NULL && !c->closing && now >= s->reopen_at) {
				open_call(c, s);
				if (s->cur != NULL)
					OWNER_CALL(c, s, s->ops->opened(s->owner, s));
				else
					s->reopen_at = now + lr_backoff_next(&s->backoff, &c->rng);
			}
			if (s->cur == NULL && s->reopen_at < next)
				next = s->reopen_at;
			if (!c->closing && s->next_tick <= now) {
				int64_t when = INT64_MAX;
				OWNER_CALL(c, s, when = s->ops->tick(s->owner, lr_mono_ms()));
				s->next_tick = when;
			}
			if (s->next_tick < next)
				next = s->next_tick;
		}
		/* Closing: wait for the cancelled calls' statuses; whatever else
		 * is left drains after the queue's shutdown below. */
		if (c->closing) {
			bool open_calls = false;
			for (lr_stream *s = c->streams; s != NULL; s = s->next)
				if (s->cur != NULL)
					open_calls = true;
			if (!open_calls && !calls_left)
				break;
		}
		gpr_timespec dl = next == INT64_MAX ? gpr_inf_future(GPR_CLOCK_MONOTONIC)
		                                    : lr__mono_ms_to_timespec(next);
		pthread_mutex_unlock(&c->mu);
		grpc_event ev = grpc_completion_queue_next(c->cq, dl, NULL);
		if (ev.type == GRPC_OP_COMPLETE && unary_done(ev.tag)) {
			pthread_mutex_lock(&c->mu);
			continue;
		}
		pthread_mutex_lock(&c->mu);
		if (ev.type == GRPC_OP_COMPLETE)
			on_event(c, ev.tag, ev.success != 0);
		else if (ev.type == GRPC_QUEUE_SHUTDOWN)
			break;
	}
	pthread_mutex_unlock(&c->mu);
	/* Drain whatever is left (cancelled calls of removed streams). */
	grpc_completion_queue_shutdown(c->cq);
	for (;;) {
		grpc_event ev = grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
		if (ev.type == GRPC_QUEUE_SHUTDOWN)
			break;
		if (unary_done(ev.tag))
			continue;
		pthread_mutex_lock(&c->mu);
		on_event(c, ev.tag, ev.success != 0);
		pthread_mutex_unlock(&c->mu);
	}
	return NULL;
}

int lr_stream_add(lr_etcd *c, const char *method, const lr_stream_ops *ops,
                  void *owner, lr_stream **out, lr_err *err)
{
	lr_stream *s = calloc(1, sizeof(*s));
	if (s == NULL)
		return lr_err_set(err, LR_ENOMEM, "etcd: out of memory");
	s->client = c;
	s->method = method;
	s->ops = ops;
	s->owner = owner;
	lr_backoff_init(&s->backoff, LR_STREAM_BACKOFF_MIN_MS, LR_STREAM_BACKOFF_MAX_MS);
	pthread_mutex_lock(&c->mu);
	if (c->closing) {
		pthread_mutex_unlock(&c->mu);
		free(s);
		return lr_err_set(err, LR_ECLOSED, "etcd: client is closing");
	}
	s->next = c->streams;
	c->streams = s;
	pthread_mutex_unlock(&c->mu);
	lr_etcd_wake(c);
	*out = s;
	return 0;
}

void lr_stream_remove(lr_stream *s)
{
	lr_etcd *c = s->client;
	pthread_mutex_lock(&c->mu);
	s->removed = true;
	if (s->cur != NULL) {
		grpc_call_cancel(s->cur->call, NULL);
		s->cur->stream = NULL; /* the call drains on its own */
		if (s->cur->outstanding == 0)
			free_scall(s->cur);
		s->cur = NULL;
	}
	while (c->in_callback == s && !lr_etcd_on_stream_thread(c))
		pthread_cond_wait(&c->cond, &c->mu);
	for (lr_stream **pp = &c->streams; *pp != NULL; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	free_sendq(s);
	pthread_mutex_unlock(&c->mu);
	free(s);
}

int lr__stream_thread_start(lr_etcd *c, lr_err *err)
{
	c->cq = grpc_completion_queue_create_for_next(NULL);
	if (pthread_create(&c->thread, NULL, stream_thread, c) != 0)
		return lr_err_set(err, LR_ESYS, "etcd: cannot start the stream thread");
	c->thread_started = true;
	return 0;
}

/* Stop the stream thread (cancelling every call and draining its queue)
 * and free the streams left; lr_etcd_close's part. */
void lr__streams_close(lr_etcd *c)
{
	if (c->thread_started) {
		pthread_mutex_lock(&c->mu);
		c->closing = true;
		for (lr_stream *s = c->streams; s != NULL; s = s->next)
			if (s->cur != NULL)
				grpc_call_cancel(s->cur->call, NULL);
		pthread_mutex_unlock(&c->mu);
		lr_etcd_wake(c);
		pthread_join(c->thread, NULL);
	}
	while (c->streams != NULL) {
		lr_stream *s = c->streams;
		c->streams = s->next;
		free_sendq(s);
		free(s);
	}
	if (c->cq != NULL)
		grpc_completion_queue_destroy(c->cq);
}
