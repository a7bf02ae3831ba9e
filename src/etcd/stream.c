/* stream.c - bidi streams on one thread: the stream thread of a client
 * serves the long-lived streams (LeaseKeepAlive, Watch) and completes the
 * unary calls other threads start on its queue: a caller then waits
 * (lr_wake: its thread sleeps, or its fiber lets others run) instead of
 * each caller polling gRPC on a queue of its own, which cost a handful of
 * thread hand-offs per call.
 *
 * Locking: st->mu guards the stream table, each stream's send queue and
 * each call's bookkeeping. It is never held while an owner callback or an
 * auth hook runs (except `token`, which only copies). Owner callbacks run
 * on the stream thread only, one at a time. Streams carry the `hasleader`
 * metadata so that a member cut off from the leader refuses them; each
 * call goes to the member route.c picks, and a reset (a reply overdue)
 * leaves that member out. The thread also probes the members left out,
 * every second, until one answers. */
#include "etcd/stream.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/support/alloc.h>

#include "base/backoff.h"
#include "base/clock.h"
#include "base/error.h"
#include "etcd/route.h"
#include "etcd/rpc.h"

#define LR_STREAM_BACKOFF_MIN_MS 50
#define LR_STREAM_BACKOFF_MAX_MS 2000
/* The longest the stream thread waits in gRPC at a time (see stream_thread). */
#define LR_STREAM_WAIT_SLICE_MS 100
/* A member left out is asked this often whether it answers again. */
#define LR_PROBE_EVERY_MS 1000

enum tag_kind { TAG_START, TAG_SEND, TAG_RECV, TAG_STATUS, TAG_WAKE, TAG_UNARY, TAG_PROBE };

struct scall;

/* What the stream thread's queue hands back; lr_unary_wait starts with the
 * same int. */
struct tag {
	int kind; /* enum tag_kind */
	struct scall *call;
};

/* A Status call to a member left out: any answer takes it back. */
struct probe {
	struct tag t; /* first: the queue hands back &t */
	int member;
	bool busy;
	int64_t next_ms;
	grpc_call *call;
	lr_unary_io io;
	grpc_metadata md[1];
	char *token;
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
	int member;        /* its index in the channel's members */
	struct tag t_start, t_send, t_recv, t_status;
	int outstanding;
	bool send_busy;
	bool ended;
	bool answered;     /* a message came on it */
	grpc_byte_buffer *send_buf;
	grpc_byte_buffer *recv_buf;
	grpc_metadata_array md_in, md_trail;
	grpc_status_code status;
	grpc_slice details;
	const char *error_string;
	grpc_metadata md_out[2];
	char *token; /* copy sent as metadata; never changes */
};

struct lr_stream {
	lr_streams *st;
	const char *method;
	const lr_stream_ops *ops;
	void *owner;
	lr_call_slot *stats;
	struct scall *cur; /* NULL while down */
	bool had_call;     /* a call was open before: the next one is a reopen */
	int64_t reopen_at;
	int64_t next_tick;
	lr_backoff backoff;
	bool auth_failed;  /* a token renewal failed: reopen with growing backoff */
	struct sendq *q_head, *q_tail;
	bool removed;
	lr_stream *next;
};

struct lr_streams {
	lr_channel *chan;       /* borrowed */
	lr_call_stats *stats;   /* borrowed */
	lr_stream_auth auth;

	pthread_mutex_t mu;
	pthread_cond_t cond;    /* in_callback went back to NULL */
	lr_rng rng;             /* reopen jitter, under mu */
	grpc_completion_queue *cq;
	pthread_t thread;
	bool thread_started;
	bool closing;
	bool queue_down;        /* the thread left its loop: post nothing more */
	lr_stream *streams;
	struct probe *probes;   /* one per member when there are several */
	int wakes_pending;
	struct tag t_wake;
	lr_stream *in_callback; /* stream whose owner runs now */
};

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

/* ---- one call of a stream ------------------------------------------------ */

/* Start a batch on a stream call and count it; st->mu held. */
static bool start_ops(struct scall *sc, grpc_op *ops, size_t n, struct tag *t)
{
	if (grpc_call_start_batch(sc->call, ops, n, t, NULL) != GRPC_CALL_OK)
		return false;
	sc->outstanding++;
	return true;
}

/* Send the next queued message if none is in flight; st->mu held. */
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

/* Open a new call for s; st->mu held. On failure s stays down. */
static void open_call(lr_streams *st, lr_stream *s)
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
	sc->member = lr__route_pick(st->chan);
	sc->call = grpc_channel_create_call(st->chan->members[sc->member].channel, NULL,
	                                    GRPC_PROPAGATE_DEFAULTS, st->cq,
	                                    grpc_slice_from_static_string(s->method), NULL,
	                                    gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
	size_t nmd = 0;
	lr__metadata(&sc->md_out[nmd++], "hasleader", "true");
	sc->token = st->auth.token != NULL ? st->auth.token(st->auth.ctx) : NULL;
	if (sc->token != NULL)
		lr__metadata(&sc->md_out[nmd++], "token", sc->token);
	grpc_op ops[2];
	memset(ops, 0, sizeof(ops));
	lr__op_send_metadata(&ops[0], sc->md_out, nmd);
	ops[1].op = GRPC_OP_RECV_INITIAL_METADATA;
	ops[1].data.recv_initial_metadata.recv_initial_metadata = &sc->md_in;
	bool ok = start_ops(sc, ops, 2, &sc->t_start);
	grpc_op op;
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	op.data.recv_status_on_client.trailing_metadata = &sc->md_trail;
	op.data.recv_status_on_client.status = &sc->status;
	op.data.recv_status_on_client.status_details = &sc->details;
	op.data.recv_status_on_client.error_string = &sc->error_string;
	ok = ok && start_ops(sc, &op, 1, &sc->t_status);
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
	if (s->had_call)
		lr__call_count_reopen(s->stats);
	s->had_call = true;
}

/* ---- what owners call ------------------------------------------------------ */

/* Post an event on the queue so that the stream thread looks at its timers
 * and streams again; st->mu held. Nothing once the thread is leaving: gRPC
 * aborts on an event posted to a queue that is shut down. */
static void wake_locked(lr_streams *st)
{
	if (st->queue_down || st->wakes_pending > 0)
		return;
	/* A connectivity watch whose deadline is now: the one portable way to
	 * post an event onto a completion queue from outside. */
	grpc_channel *ch = st->chan->members[0].channel;
	grpc_connectivity_state cs = grpc_channel_check_connectivity_state(ch, 0);
	grpc_channel_watch_connectivity_state(ch, cs, gpr_now(GPR_CLOCK_MONOTONIC), st->cq,
	                                      &st->t_wake);
	st->wakes_pending++;
}

static void wake(lr_streams *st)
{
	pthread_mutex_lock(&st->mu);
	wake_locked(st);
	pthread_mutex_unlock(&st->mu);
}

void lr__streams_token_renewed(lr_streams *st)
{
	pthread_mutex_lock(&st->mu);
	int64_t now = lr_mono_ms();
	for (lr_stream *s = st->streams; s != NULL; s = s->next)
		if (s->cur == NULL && s->auth_failed && s->reopen_at > now)
			s->reopen_at = now;
	wake_locked(st);
	pthread_mutex_unlock(&st->mu);
}

int lr_stream_send(lr_stream *s, const ProtobufCMessage *msg)
{
	lr_streams *st = s->st;
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
	pthread_mutex_lock(&st->mu);
	if (s->cur == NULL || s->cur->ended || s->removed) {
		pthread_mutex_unlock(&st->mu);
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
	pthread_mutex_unlock(&st->mu);
	return 0;
}

void lr_stream_reset(lr_stream *s, const char *why)
{
	(void)why;
	lr_streams *st = s->st;
	pthread_mutex_lock(&st->mu);
	if (s->cur != NULL && !s->cur->ended) {
		lr__route_unanswered(st->chan, s->cur->member);
		grpc_call_cancel(s->cur->call, NULL);
	}
	pthread_mutex_unlock(&st->mu);
}

void lr_stream_kick(lr_stream *s)
{
	lr_streams *st = s->st;
	pthread_mutex_lock(&st->mu);
	s->next_tick = 0;
	pthread_mutex_unlock(&st->mu);
	wake(st);
}

static bool on_thread(const lr_streams *st)
{
	return st->thread_started && pthread_equal(pthread_self(), st->thread);
}

bool lr_stream_on_thread(const lr_stream *s)
{
	return on_thread(s->st);
}

void lr_stream_count_round_trip(lr_stream *s, int64_t us)
{
	lr__call_count_round_trip(s->stats, us);
}

/* The call cannot be freed meanwhile: this runs in its stream's message
 * callback, on the stream thread, and the call's status is outstanding. */
void lr_stream_renew_token(lr_stream *s)
{
	lr_streams *st = s->st;
	pthread_mutex_lock(&st->mu);
	struct scall *sc = s->cur;
	bool live = sc != NULL && !sc->ended && st->auth.renew != NULL;
	pthread_mutex_unlock(&st->mu);
	if (!live)
		return;
	int rc = st->auth.renew(st->auth.ctx, sc->token);
	pthread_mutex_lock(&st->mu);
	/* Reopened whether or not a token came: a stream left open would keep
	 * its refused watchers waiting for good. After a failed renewal the
	 * reopens back off until one works (lr_stream_healthy). sc->stream is
	 * NULL once the owner removed the stream. */
	if (sc->stream != NULL && !sc->ended) {
		s->auth_failed = rc != 0;
		grpc_call_cancel(sc->call, NULL);
	}
	pthread_mutex_unlock(&st->mu);
}

void lr_stream_healthy(lr_stream *s)
{
	lr_streams *st = s->st;
	pthread_mutex_lock(&st->mu);
	if (s->auth_failed) {
		s->auth_failed = false;
		lr_backoff_reset(&s->backoff);
	}
	pthread_mutex_unlock(&st->mu);
}

/* ---- members left out, probed ----------------------------------------------- */

/* Ask p's member for its status, at most a probe period; st->mu held. */
static void probe_start(lr_streams *st, struct probe *p)
{
	static uint8_t none; /* StatusRequest has no fields: zero bytes */
	p->call = grpc_channel_create_call(st->chan->members[p->member].channel, NULL,
	                                   GRPC_PROPAGATE_DEFAULTS, st->cq,
	                                   grpc_slice_from_static_string(
	                                       "/etcdserverpb.Maintenance/Status"),
	                                   NULL, lr__deadline_in_ms(LR_PROBE_EVERY_MS), NULL);
	size_t nmd = 0;
	p->token = st->auth.token != NULL ? st->auth.token(st->auth.ctx) : NULL;
	if (p->token != NULL)
		lr__metadata(&p->md[nmd++], "token", p->token);
	grpc_byte_buffer *req = lr__buffer_of(grpc_slice_from_static_buffer(&none, 0));
	grpc_op ops[6];
	lr__unary_ops(ops, &p->io, p->md, nmd, req);
	p->busy = grpc_call_start_batch(p->call, ops, 6, &p->t, NULL) == GRPC_CALL_OK;
	grpc_byte_buffer_destroy(req); /* gRPC took its own reference */
	if (!p->busy) {
		grpc_call_unref(p->call);
		lr__unary_io_free(&p->io);
		free(p->token);
	}
}

/* p's call ended: its member is back if it answered; st->mu held. */
static void probe_done(lr_streams *st, struct probe *p)
{
	grpc_status_code status = p->io.status;
	if (status != GRPC_STATUS_DEADLINE_EXCEEDED && status != GRPC_STATUS_UNAVAILABLE &&
	    status != GRPC_STATUS_CANCELLED)
		lr__route_answered(st->chan, p->member);
	grpc_call_unref(p->call);
	lr__unary_io_free(&p->io);
	free(p->token);
	p->busy = false;
}

/* Probe the members left out whose time came; the time of the next probe
 * due. st->mu held. */
static int64_t probe_members(lr_streams *st, int64_t now)
{
	int64_t next = INT64_MAX;
	for (int i = 0; st->probes != NULL && !st->closing && i < st->chan->n_members; i++) {
		struct probe *p = &st->probes[i];

		if (p->busy || !lr__route_left_out(st->chan, i))
			continue;
		if (now >= p->next_ms) {
			probe_start(st, p);
			p->next_ms = now + LR_PROBE_EVERY_MS;
		}
		if (p->next_ms < next)
			next = p->next_ms;
	}
	return next;
}

/* ---- the stream thread ----------------------------------------------------- */

/* Run a callback for s (its owner's, or an auth hook for its call) with the
 * lock released; st->mu held on entry and exit. lr_stream_remove waits for
 * it to return. */
#define OWNER_CALL(st, s, expr)                                               \
	do {                                                                  \
		(st)->in_callback = (s);                                      \
		pthread_mutex_unlock(&(st)->mu);                              \
		expr;                                                         \
		pthread_mutex_lock(&(st)->mu);                                \
		(st)->in_callback = NULL;                                     \
		pthread_cond_broadcast(&(st)->cond);                          \
	} while (0)

/* The current call of s ended; st->mu held, released while the auth hook
 * and the owner run. */
static void call_ended(lr_streams *st, lr_stream *s, struct scall *sc)
{
	s->cur = NULL;
	free_sendq(s);
	char why[256];
	lr__status_text(sc->details, sc->error_string, "stream ended", why, sizeof(why));
	int code = lr__status_code(sc->status, why, false);
	if (st->auth.call_ended != NULL) {
		OWNER_CALL(st, s, st->auth.call_ended(st->auth.ctx, sc->token, sc->status, why));
		if (s->removed)
			return; /* while the hook ran */
	}
	s->reopen_at = lr_mono_ms() + lr_backoff_next(&s->backoff, &st->rng);
	OWNER_CALL(st, s, s->ops->closed(s->owner, code, why));
}

static void on_event(lr_streams *st, struct tag *t, bool ok)
{
	if (t->kind == TAG_WAKE) {
		st->wakes_pending--;
		return;
	}
	if (t->kind == TAG_PROBE) {
		probe_done(st, (struct probe *)t);
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
			/* A stream is back when etcd answers on it, not when its
			 * headers come: a refusal (no leader) has headers too. */
			if (urc == 0 && current && !sc->answered && !s->auth_failed)
				lr_backoff_reset(&s->backoff);
			sc->answered = true;
			lr__route_answered(st->chan, sc->member);
			if (urc == 0 && current)
				OWNER_CALL(st, s, s->ops->message(s->owner, data, len));
			free(data);
		}
		break;
	case TAG_STATUS:
		sc->ended = true;
		if (current)
			call_ended(st, s, sc);
		break;
	case TAG_START:
		break;
	default: /* TAG_WAKE and TAG_UNARY are handled before */
		break;
	}
	if (sc->outstanding == 0 && sc->ended)
		free_scall(sc);
}

/* A unary call's batch completed: wake its caller. */
static bool unary_done(void *tag)
{
	if (*(int *)tag != TAG_UNARY)
		return false;
	lr_wake_post(&((lr_unary_wait *)tag)->done);
	return true;
}

/* Open what is down and due, run what timers are due, probe the members
 * left out; the time of the next one. st->mu held. */
static int64_t visit_streams(lr_streams *st)
{
	int64_t now = lr_mono_ms();
	int64_t next = INT64_MAX;
	for (lr_stream *s = st->streams; s != NULL; s = s->next) {
		if (s->removed)
			continue;
		if (s->cur == NULL && !st->closing && now >= s->reopen_at) {
			open_call(st, s);
			if (s->cur != NULL)
				OWNER_CALL(st, s, s->ops->opened(s->owner, s));
			else
				s->reopen_at = now + lr_backoff_next(&s->backoff, &st->rng);
		}
		if (s->cur == NULL && s->reopen_at < next)
			next = s->reopen_at;
		if (!st->closing && s->next_tick <= now) {
			int64_t when = INT64_MAX;
			OWNER_CALL(st, s, when = s->ops->tick(s->owner, lr_mono_ms()));
			s->next_tick = when;
		}
		if (s->next_tick < next)
			next = s->next_tick;
	}
	int64_t probe = probe_members(st, now);
	return probe < next ? probe : next;
}

static void *stream_thread(void *arg)
{
	lr_streams *st = arg;
	pthread_mutex_lock(&st->mu);
	for (;;) {
		bool calls_left = st->wakes_pending > 0;
		int64_t next = visit_streams(st);
		/* Closing: wait for the cancelled calls' statuses; whatever else
		 * is left drains after the queue's shutdown below. */
		if (st->closing) {
			bool open_calls = false;
			for (lr_stream *s = st->streams; s != NULL; s = s->next)
				if (s->cur != NULL)
					open_calls = true;
			for (int i = 0; st->probes != NULL && i < st->chan->n_members; i++)
				if (st->probes[i].busy)
					open_calls = true;
			if (!open_calls && !calls_left)
				break;
		}
		/* gRPC's poller, its epoll_wait interrupted by a stop signal
		 * (SIGSTOP, a debugger), waits its whole timeout again after
		 * SIGCONT: a process frozen for a second would renew its lease
		 * that much late, up to a third of the TTL. Waiting in slices
		 * bounds the delay to a slice. */
		int64_t slice_end = lr_mono_ms() + LR_STREAM_WAIT_SLICE_MS;
		if (next > slice_end)
			next = slice_end;
		gpr_timespec dl = lr__mono_ms_to_timespec(next);
		pthread_mutex_unlock(&st->mu);
		grpc_event ev = grpc_completion_queue_next(st->cq, dl, NULL);
		if (ev.type == GRPC_OP_COMPLETE && unary_done(ev.tag)) {
			pthread_mutex_lock(&st->mu);
			continue;
		}
		pthread_mutex_lock(&st->mu);
		if (ev.type == GRPC_OP_COMPLETE)
			on_event(st, ev.tag, ev.success != 0);
		else if (ev.type == GRPC_QUEUE_SHUTDOWN)
			break;
	}
	st->queue_down = true;
	pthread_mutex_unlock(&st->mu);
	/* Drain whatever is left (cancelled calls of removed streams). */
	grpc_completion_queue_shutdown(st->cq);
	for (;;) {
		grpc_event ev = grpc_completion_queue_next(st->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
		if (ev.type == GRPC_QUEUE_SHUTDOWN)
			break;
		if (unary_done(ev.tag))
			continue;
		pthread_mutex_lock(&st->mu);
		on_event(st, ev.tag, ev.success != 0);
		pthread_mutex_unlock(&st->mu);
	}
	return NULL;
}

/* ---- streams added and removed --------------------------------------------- */

int lr_stream_add(lr_streams *st, const char *method, const lr_stream_ops *ops,
                  void *owner, lr_stream **out, lr_err *err)
{
	lr_stream *s = calloc(1, sizeof(*s));
	if (s == NULL)
		return lr_err_set(err, LR_ENOMEM, "etcd: out of memory");
	s->st = st;
	s->method = method;
	s->ops = ops;
	s->owner = owner;
	s->stats = lr__call_slot(st->stats, method, true);
	lr_backoff_init(&s->backoff, LR_STREAM_BACKOFF_MIN_MS, LR_STREAM_BACKOFF_MAX_MS);
	pthread_mutex_lock(&st->mu);
	if (st->closing) {
		pthread_mutex_unlock(&st->mu);
		free(s);
		return lr_err_set(err, LR_ECLOSED, "etcd: client is closing");
	}
	s->next = st->streams;
	st->streams = s;
	pthread_mutex_unlock(&st->mu);
	wake(st);
	*out = s;
	return 0;
}

void lr_stream_remove(lr_stream *s)
{
	lr_streams *st = s->st;
	pthread_mutex_lock(&st->mu);
	s->removed = true;
	if (s->cur != NULL) {
		grpc_call_cancel(s->cur->call, NULL);
		s->cur->stream = NULL; /* the call drains on its own */
		if (s->cur->outstanding == 0)
			free_scall(s->cur);
		s->cur = NULL;
	}
	while (st->in_callback == s && !on_thread(st))
		pthread_cond_wait(&st->cond, &st->mu);
	for (lr_stream **pp = &st->streams; *pp != NULL; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	free_sendq(s);
	pthread_mutex_unlock(&st->mu);
	free(s);
}

/* ---- the thread started and stopped ---------------------------------------- */

int lr__streams_start(lr_channel *chan, lr_call_stats *stats,
                      const lr_stream_auth *auth, lr_streams **out, lr_err *err)
{
	*out = NULL;
	lr_streams *st = calloc(1, sizeof(*st));
	if (st == NULL)
		return lr_err_set(err, LR_ENOMEM, "etcd: out of memory");
	st->chan = chan;
	st->stats = stats;
	if (chan->n_members > 1) {
		st->probes = calloc((size_t)chan->n_members, sizeof(*st->probes));
		if (st->probes == NULL) {
			free(st);
			return lr_err_set(err, LR_ENOMEM, "etcd: out of memory");
		}
		for (int i = 0; i < chan->n_members; i++)
			st->probes[i] = (struct probe){ .t = { TAG_PROBE, NULL }, .member = i };
	}
	if (auth != NULL)
		st->auth = *auth;
	pthread_mutex_init(&st->mu, NULL);
	pthread_cond_init(&st->cond, NULL);
	lr_rng_init(&st->rng, NULL);
	st->t_wake.kind = TAG_WAKE;
	st->cq = grpc_completion_queue_create_for_next(NULL);
	*out = st; /* stopped by lr__streams_stop, started or not */
	if (pthread_create(&st->thread, NULL, stream_thread, st) != 0)
		return lr_err_set(err, LR_ESYS, "etcd: cannot start the stream thread");
	st->thread_started = true;
	return 0;
}

void lr__streams_stop(lr_streams *st)
{
	if (st == NULL)
		return;
	if (st->thread_started) {
		pthread_mutex_lock(&st->mu);
		st->closing = true;
		for (lr_stream *s = st->streams; s != NULL; s = s->next)
			if (s->cur != NULL)
				grpc_call_cancel(s->cur->call, NULL);
		for (int i = 0; st->probes != NULL && i < st->chan->n_members; i++)
			if (st->probes[i].busy)
				grpc_call_cancel(st->probes[i].call, NULL);
		/* Under the same lock as `closing`: the thread cannot see one
		 * without the other and leave before this event comes. */
		wake_locked(st);
		pthread_mutex_unlock(&st->mu);
		pthread_join(st->thread, NULL);
	}
	while (st->streams != NULL) {
		lr_stream *s = st->streams;
		st->streams = s->next;
		free_sendq(s);
		free(s);
	}
	if (st->cq != NULL && !st->thread_started) {
		grpc_completion_queue_shutdown(st->cq); /* the thread's part */
		while (grpc_completion_queue_next(st->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC),
		                                  NULL).type != GRPC_QUEUE_SHUTDOWN)
			;
	}
	if (st->cq != NULL)
		grpc_completion_queue_destroy(st->cq);
	pthread_cond_destroy(&st->cond);
	pthread_mutex_destroy(&st->mu);
	free(st->probes);
	free(st);
}

/* ---- unary calls completed by the stream thread ---------------------------- */

void lr__unary_wait_begin(lr_streams *st, lr_unary_wait *w)
{
	w->tag_kind = TAG_UNARY;
	w->shared = st != NULL && st->thread_started && !on_thread(st);
	if (w->shared) {
		lr_wake_init(&w->done);
		w->cq = st->cq;
	} else {
		w->cq = grpc_completion_queue_create_for_pluck(NULL);
	}
}

void lr__unary_wait(lr_unary_wait *w)
{
	if (w->shared)
		lr_wake_wait(&w->done);
	else
		grpc_completion_queue_pluck(w->cq, w, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
}

void lr__unary_wait_end(lr_unary_wait *w)
{
	if (w->shared) {
		lr_wake_destroy(&w->done);
	} else {
		grpc_completion_queue_shutdown(w->cq);
		grpc_completion_queue_destroy(w->cq);
	}
}
