/* batch.c - group commit of a runner's txns (see batch.h): a queue of
 * waiting callers, one of whom leads each request. Worker threads; the
 * mutex guards the queue, the free groups and the count in flight. */
#include "engine/batch.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/claim.h"
#include "etcd/txn_group.h"
#include "fiber/fiber.h"

/* The worker a thread or fiber is (lr_batch_seat), and whether it holds
 * credit: its last write came back and it is doing the runner's own work
 * before the next. Away: it said it is gone (a handler, a wait) until it
 * is back; a write it makes meanwhile earns no credit. Guarded by the
 * batch's mutex once seated. */
struct seat {
	lr_batch *b;
	bool credit;
	bool away;
};

/* One txn of a caller, on its stack while it waits. */
struct entry {
	const lr_txn *t;
	lr_txn_result *r;
	lr_err *err;
	int rc;
	bool taken;          /* a leader has it, or looks at it (under mu) */
	bool led;            /* its own caller led its request: no post of done */
	int lead_posts;      /* posts of `wake` to let it lead (under mu) */
	atomic_bool done;    /* r, err and rc are filled: final */
	struct seat *seat;   /* its caller's (lr_batch_seat), or NULL */
	lr_wake *wake;       /* its caller's: posted once when it is done by
	                        another caller, and under mu whenever it may
	                        lead; the caller takes every post before it
	                        returns, so no post reaches a gone semaphore */
	struct entry *next;
};

/* What one leader needs for its request. */
struct lead {
	lr_txn_group *g;
	struct entry **members;
	lr_txn_result *results;
	struct lead *next_free;
};

struct lr_batch {
	lr_etcd *c;
	size_t max_txns;
	size_t group_txns;         /* waiting txns that make a request go at once */
	int max_in_flight;
	pthread_mutex_t mu;
	struct entry *head, *tail; /* waiting, not taken */
	size_t queued;             /* entries from head to tail */
	int in_flight;
	int expected;              /* seated callers with credit (lr_batch_seat) */
	bool left_out;             /* the queue holds txns a full request left */
	int peak_in_flight;        /* the most in flight at once so far */
	struct lead *leads;        /* max_in_flight of them */
	struct lead *free_leads;
	size_t max_ops, max_bytes; /* what a request may use (lr_batch_limits) */
	lr_batch_note_fn note;     /* told when they shrink */
	void *note_user;
	atomic_uint_fast64_t requests, txns;
	atomic_int_fast64_t last_rtt_us; /* the last request's round trip */
};

static _Thread_local struct seat thread_seat;

/* The calling worker's seat: its fiber's, or its thread's. */
static struct seat *my_seat(void)
{
	_Static_assert(sizeof(struct seat) <= LR_FIBER_LOCAL, "a seat fits a fiber's own bytes");
	struct seat *own = lr_fiber_local();
	return own != NULL ? own : &thread_seat;
}

/* How long a caller that could lead waits for callers holding credit, at
 * most: one round trip, within these bounds. Only a caller that holds
 * credit and blocks somewhere unforeseen makes this matter. */
#define HOLD_MIN_US 100
#define HOLD_MAX_US 20000

lr_batch *lr_batch_new(lr_etcd *c, int max_in_flight, size_t max_txns, size_t group_txns)
{
	lr_batch *b = calloc(1, sizeof(*b));
	if (b == NULL)
		return NULL;
	b->c = c;
	b->max_txns = max_txns;
	b->group_txns = group_txns < 1 ? 1 : group_txns > max_txns ? max_txns : group_txns;
	b->max_in_flight = max_in_flight;
	b->max_ops = LR_TXN_MAX_OPS;
	b->max_bytes = LR_TXN_GROUP_MAX_BYTES;
	b->leads = calloc((size_t)max_in_flight, sizeof(*b->leads));
	if (b->leads == NULL || pthread_mutex_init(&b->mu, NULL) != 0) {
		free(b->leads);
		free(b);
		return NULL;
	}
	for (int i = 0; i < max_in_flight; i++) {
		struct lead *l = &b->leads[i];
		l->g = lr_txn_group_new(max_txns);
		l->members = calloc(max_txns, sizeof(*l->members));
		l->results = calloc(max_txns, sizeof(*l->results));
		if (l->g == NULL || l->members == NULL || l->results == NULL) {
			lr_batch_free(b);
			return NULL;
		}
		l->next_free = b->free_leads;
		b->free_leads = l;
	}
	atomic_init(&b->requests, 0);
	atomic_init(&b->last_rtt_us, HOLD_MIN_US);
	atomic_init(&b->txns, 0);
	return b;
}

void lr_batch_free(lr_batch *b)
{
	if (b == NULL)
		return;
	for (int i = 0; i < b->max_in_flight; i++) {
		lr_txn_group_free(b->leads[i].g);
		free(b->leads[i].members);
		free(b->leads[i].results);
	}
	free(b->leads);
	pthread_mutex_destroy(&b->mu);
	free(b);
}

void lr_batch_counts(lr_batch *b, uint64_t *requests, uint64_t *txns)
{
	*requests = atomic_load(&b->requests);
	*txns = atomic_load(&b->txns);
}

void lr_batch_on_limit(lr_batch *b, lr_batch_note_fn fn, void *user)
{
	b->note = fn;
	b->note_user = user;
}

void lr_batch_limits(lr_batch *b, size_t *max_ops, size_t *max_bytes)
{
	pthread_mutex_lock(&b->mu);
	*max_ops = b->max_ops;
	*max_bytes = b->max_bytes;
	pthread_mutex_unlock(&b->mu);
}

int lr_batch_peak_in_flight(lr_batch *b)
{
	pthread_mutex_lock(&b->mu);
	int peak = b->peak_in_flight;
	pthread_mutex_unlock(&b->mu);
	return peak;
}

/* ---- leading a request ----------------------------------------------------- */

/* Take into l's group self first, then whatever of `queue` may go with
 * it, oldest first. Returns the members' count; *rest gets the others, in
 * order. Without the mutex: the queue was taken off the batch. */
static size_t gather(lr_batch *b, struct lead *l, struct entry *self, struct entry *queue,
                     struct entry **rest, size_t max_ops, size_t max_bytes)
{
	lr_txn_group_clear(l->g);
	lr_txn_group_limit(l->g, max_ops, max_bytes);
	/* Not in the group (out of memory there): self goes alone. */
	bool grouped = lr_txn_group_add(l->g, self->t);
	size_t n = 0;
	l->members[n++] = self;
	struct entry **link = rest;
	for (struct entry *e = queue, *next; e != NULL; e = next) {
		next = e->next;
		if (e == self)
			continue;
		if (grouped && n < b->max_txns && lr_txn_group_add(l->g, e->t)) {
			l->members[n++] = e;
			continue;
		}
		*link = e;
		link = &e->next;
	}
	*link = NULL;
	return n;
}

/* Smallest limits a refusal brings requests down to: two txns of one op
 * each, and a few small txns. */
#define MIN_OPS 2
#define MIN_BYTES 1024

/* etcd refused a request of several txns, e (code rc): when it said the
 * request had too many operations or was too large, its --max-txn-ops or
 * --max-request-bytes is lower than the defaults that requests are cut
 * for. Requests from now on use at most three quarters of what the
 * refused one did: a few refusals find the limit, and requests end at
 * most a quarter under it. Without the mutex. */
static void shrink(lr_batch *b, const lr_txn_group *g, int rc, const lr_err *e)
{
	bool ops = lr_etcd_too_many_ops(rc, e);
	if (!ops && rc != LR_ETOOLARGE)
		return;
	size_t used = ops ? lr_txn_group_ops(g) : lr_txn_group_bytes(g);
	size_t floor = ops ? MIN_OPS : MIN_BYTES;
	size_t want = used - used / 4 > floor ? used - used / 4 : floor;
	pthread_mutex_lock(&b->mu);
	size_t *limit = ops ? &b->max_ops : &b->max_bytes;
	bool lower = want < *limit;
	if (lower)
		*limit = want;
	pthread_mutex_unlock(&b->mu);
	if (!lower || b->note == NULL)
		return;
	char msg[sizeof(e->msg) + 200];
	snprintf(msg, sizeof(msg),
	         "%s; group commit: a request of several txns now uses at most %zu %s "
	         "(etcd's %s is lower than its default)",
	         e->msg, want, ops ? "operations" : "bytes",
	         ops ? "--max-txn-ops" : "--max-request-bytes");
	b->note(b->note_user, msg);
}

/* Send the members, one request; fill each member's result. Without the
 * mutex. */
static void send(lr_batch *b, struct lead *l, size_t n)
{
	lr_err err = {0};
	const lr_txn **ts = (const lr_txn **)lr_txn_group_members(l->g);
	const lr_txn *alone[1];
	if (lr_txn_group_size(l->g) != n) { /* self alone (see gather) */
		alone[0] = l->members[0]->t;
		ts = alone;
	}
	int64_t t0 = lr_mono_us();
	int rc = lr_etcd_txn_many(b->c, ts, n, LR_CALL_RETRY, l->results, &err);
	if (rc == 0)
		atomic_store(&b->last_rtt_us, lr_mono_us() - t0);
	atomic_fetch_add(&b->requests, 1);
	atomic_fetch_add(&b->txns, n);
	if (rc != 0 && n > 1 && !lr_claim_transient(rc)) {
		shrink(b, l->g, rc, &err);
		/* Something in it was refused: each alone, so it fails alone. */
		for (size_t i = 0; i < n; i++) {
			struct entry *e = l->members[i];
			e->rc = lr_etcd_txn(b->c, e->t, LR_CALL_RETRY, e->r, e->err);
			atomic_fetch_add(&b->requests, 1);
		}
		return;
	}
	for (size_t i = 0; i < n; i++) {
		struct entry *e = l->members[i];
		e->rc = rc;
		if (rc == 0)
			*e->r = l->results[i];
		else
			*e->err = err;
	}
}

/* Whether a request may start now: room(), and either group_txns txns
 * wait or no caller holds credit (none is about to queue a write: those
 * whose writes came back have queued again, or gone off to run a handler
 * or to wait). So the callers that one reply woke go on together in one
 * request, instead of the first of them going alone and the others
 * waiting a whole round trip behind it; a caller alone goes at once.
 *
 * Room: fewer than max_in_flight requests out, and a request beside one
 * in flight only for what a full one left out or for group_txns txns
 * waiting. Smaller requests beside each other would split the workers
 * into groups taking turns, each request smaller, for no shorter wait
 * (etcd writes its log one request after the other); groups of
 * group_txns take turns, as the time their callers take to wake and
 * write again (on a few cores) would leave etcd idle if they all went
 * together. Under the mutex. */
static bool room(const lr_batch *b)
{
	return b->in_flight < b->max_in_flight &&
	       (b->in_flight == 0 || b->left_out || b->queued >= b->group_txns);
}

/* Room, and a full request or no caller with credit. */
static bool may_send(const lr_batch *b)
{
	return room(b) && (b->expected == 0 || b->queued >= b->group_txns);
}

/* A request could go but for callers holding credit. Under the mutex. */
static bool held_back(const lr_batch *b)
{
	return room(b) && !may_send(b);
}

/* Let the queue's head lead the next request, if one may start. Under the
 * mutex: a queued entry's caller is waiting. */
static void wake_head(lr_batch *b)
{
	if (b->head == NULL || !may_send(b))
		return;
	b->head->lead_posts++;
	lr_wake_post(b->head->wake);
}

/* wake_head, or when only callers with credit hold a request back, have
 * the head wait for them, not for ever (it may be asleep untimed, having
 * waited for room): whenever there is room. Under the mutex. */
static void nudge_head(lr_batch *b)
{
	if (b->head == NULL || !room(b))
		return;
	b->head->lead_posts++;
	lr_wake_post(b->head->wake);
}

/* ---- seats: the callers that are a runner's workers ---------------------- */

void lr_batch_seat(lr_batch *b)
{
	struct seat *seat = my_seat();
	pthread_mutex_lock(&b->mu);
	*seat = (struct seat){ .b = b };
	pthread_mutex_unlock(&b->mu);
}

/* Give up the calling thread's credit, if it holds some. Under the mutex. */
static void drop_credit(lr_batch *b)
{
	struct seat *seat = my_seat();
	if (seat->b != b || !seat->credit)
		return;
	seat->credit = false;
	b->expected--;
}

void lr_batch_away(lr_batch *b)
{
	struct seat *seat = my_seat();
	if (b == NULL || seat->b != b)
		return;
	pthread_mutex_lock(&b->mu);
	seat->away = true;
	drop_credit(b);
	wake_head(b); /* it may have been waiting for this caller */
	pthread_mutex_unlock(&b->mu);
}

void lr_batch_back(lr_batch *b)
{
	struct seat *seat = my_seat();
	if (b == NULL || seat->b != b)
		return;
	pthread_mutex_lock(&b->mu);
	seat->away = false;
	if (!seat->credit) {
		seat->credit = true;
		b->expected++;
	}
	pthread_mutex_unlock(&b->mu);
}

void lr_batch_unseat(lr_batch *b)
{
	struct seat *seat = my_seat();
	if (b == NULL || seat->b != b)
		return;
	pthread_mutex_lock(&b->mu);
	drop_credit(b);
	wake_head(b); /* it may have been waiting for this caller */
	seat->b = NULL;
	pthread_mutex_unlock(&b->mu);
}

/* ---- leading ------------------------------------------------------------- */

/* Lead one request that carries self: called under the mutex, returns
 * without it. The queue is taken off the batch while the request is
 * gathered, so that callers arriving meanwhile are not held up; those
 * left out go back to its head, in order. Members are told they are done
 * outside the mutex, so that they do not wake only to wait for it. */
static void lead(lr_batch *b, struct entry *self)
{
	struct lead *l = b->free_leads;
	b->free_leads = l->next_free;
	if (++b->in_flight > b->peak_in_flight)
		b->peak_in_flight = b->in_flight;
	size_t max_ops = b->max_ops, max_bytes = b->max_bytes;
	struct entry *queue = b->head;
	for (struct entry *e = queue; e != NULL; e = e->next)
		e->taken = true;
	b->head = b->tail = NULL;
	b->queued = 0;
	b->left_out = false;
	pthread_mutex_unlock(&b->mu);

	struct entry *rest = NULL;
	size_t n = gather(b, l, self, queue, &rest, max_ops, max_bytes);
	if (rest != NULL) {
		pthread_mutex_lock(&b->mu);
		struct entry *last = rest;
		for (struct entry *e = rest; e != NULL; e = e->next) {
			e->taken = false;
			last = e;
			b->queued++;
		}
		last->next = b->head;
		if (b->head == NULL)
			b->tail = last;
		b->head = rest;
		b->left_out = true;
		nudge_head(b); /* another request, if a full one waits */
		pthread_mutex_unlock(&b->mu);
	}

	send(b, l, n);

	/* Its seated members get credit before they wake: they are about to
	 * write again, and the next request waits for them. */
	pthread_mutex_lock(&b->mu);
	for (size_t i = 0; i < n; i++) {
		struct seat *st = l->members[i]->seat;
		if (st != NULL && !st->credit && !st->away) {
			st->credit = true;
			b->expected++;
		}
	}
	pthread_mutex_unlock(&b->mu);
	/* Members left the queue: no lead post can reach them any more. */
	for (size_t i = 1; i < n; i++) {
		struct entry *e = l->members[i];
		atomic_store(&e->done, true);
		lr_wake_post(e->wake); /* the last touch of a member */
	}
	pthread_mutex_lock(&b->mu);
	b->in_flight--;
	l->next_free = b->free_leads; /* another leader may take it now */
	b->free_leads = l;
	nudge_head(b); /* it leads the next request */
	pthread_mutex_unlock(&b->mu);
}

void lr_batch_txns(lr_batch *b, size_t n, const lr_txn *const ts[], lr_txn_result rs[],
                   lr_err errs[], int rcs[])
{
	struct entry es[LR_BATCH_OWN_MAX];
	lr_wake wake;
	for (size_t i = 0; i < n; i++)
		memset(&rs[i], 0, sizeof(rs[i]));
	struct seat *own = my_seat();
	if (own->b != b)
		own = NULL;
	if (n > LR_BATCH_OWN_MAX) {
		pthread_mutex_lock(&b->mu);
		drop_credit(b);
		wake_head(b);
		pthread_mutex_unlock(&b->mu);
		for (size_t i = 0; i < n; i++)
			rcs[i] = lr_etcd_txn(b->c, ts[i], LR_CALL_RETRY, &rs[i], &errs[i]);
		return;
	}
	lr_wake_init(&wake);
	pthread_mutex_lock(&b->mu);
	for (size_t i = 0; i < n; i++) {
		struct entry *e = &es[i];
		*e = (struct entry){ .t = ts[i], .r = &rs[i], .err = &errs[i], .wake = &wake,
			             .seat = own };
		atomic_init(&e->done, false);
		if (b->tail != NULL)
			b->tail->next = e;
		else
			b->head = e;
		b->tail = e;
		b->queued++;
	}
	int taken_posts = 0;
	bool late = false;    /* waited for callers with credit long enough */
	bool holding = false; /* until: when that wait ends */
	struct timespec until;
	for (;;) {
		/* Under the mutex: lead with one not taken when a request may
		 * start; otherwise wait for a post (done, or may lead). */
		struct entry *self = NULL;
		size_t left = 0;
		for (size_t i = 0; i < n; i++) {
			if (atomic_load(&es[i].done))
				continue;
			left++;
			if (self == NULL && !es[i].taken)
				self = &es[i];
		}
		if (left == 0)
			break;
		/* With a txn queued (just now, or left out of a request),
		 * this caller is not about to write: it waits like the
		 * others. */
		if (self != NULL)
			drop_credit(b);
		else
			late = holding = false; /* taken: a wait starts afresh */
		if (self != NULL && (may_send(b) || (late && held_back(b)))) {
			self->led = true;
			late = holding = false;
			lead(b, self);
			atomic_store(&self->done, true);
		} else if (self != NULL && self == b->head && held_back(b)) {
			/* Only callers with credit hold it back: the queue's
			 * head waits for them, but no longer than a round trip
			 * from when it began to, in case one blocks where it
			 * did not say so (lr_batch_away). */
			pthread_mutex_unlock(&b->mu);
			if (!holding) {
				int64_t hold = atomic_load(&b->last_rtt_us);
				hold = hold < HOLD_MIN_US ? HOLD_MIN_US
				       : hold > HOLD_MAX_US ? HOLD_MAX_US : hold;
				until = lr_mono_deadline_us(hold);
				holding = true;
			}
			if (lr_wake_wait_until(&wake, &until))
				taken_posts++;
			else
				late = true;
		} else {
			pthread_mutex_unlock(&b->mu);
			lr_wake_wait(&wake);
			taken_posts++;
		}
		pthread_mutex_lock(&b->mu);
	}
	/* All done: no more lead posts can come (they left the queue). Take
	 * the ones still pending, and the posts of done, before the semaphore
	 * goes. */
	int due = 0;
	for (size_t i = 0; i < n; i++)
		due += es[i].lead_posts + (es[i].led ? 0 : 1);
	pthread_mutex_unlock(&b->mu);
	for (; taken_posts < due; taken_posts++)
		lr_wake_wait(&wake);
	lr_wake_destroy(&wake);
	for (size_t i = 0; i < n; i++)
		rcs[i] = es[i].rc;
}

int lr_batch_txn(lr_batch *b, const lr_txn *t, lr_txn_result *r, lr_err *err)
{
	int rc;
	lr_batch_txns(b, 1, &t, r, err, &rc);
	return rc;
}
