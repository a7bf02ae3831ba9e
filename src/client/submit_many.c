/* submit_many.c - bulk submit: specs read and validated on the caller's
 * thread, created by a pool of threads making blocking txns on the client's
 * one connection, outcomes handed back in input order.
 *
 * Threads: the caller's thread runs the input and outcome callbacks and
 * fills the window; the pool threads only run lr_submit_store. One mutex
 * guards the window; a slot being created or reported is touched by one
 * thread only, outside the lock. */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "client/submit.h"

#define DEFAULT_IN_FLIGHT 16
#define MAX_IN_FLIGHT 256
/* Slots per create in flight: room to read and validate ahead while the
 * creates run, and to hold finished outcomes until the ones before them
 * are done. */
#define SLOTS_PER_CREATE 4
/* Spec bytes held in the window at once (one spec is always let in). */
#define WINDOW_BYTES ((size_t)16 << 20)

enum slot_state { SLOT_QUEUED, SLOT_RUNNING, SLOT_DONE };

/* One item of the input from the moment it is read until it is reported. */
struct slot {
	uint64_t index;
	enum slot_state state;
	char *origin;      /* malloc'd; NULL when none (or out of memory) */
	char id[LR_ID_SIZE];
	uint64_t id_hash;
	char *value;       /* the stored form; freed once the create is over */
	bool start_added;  /* its not_before is the submit's (not_before_ms) */
	bool after;        /* it names tasks to come after: sent alone, once
	                      every create before it has finished */
	size_t bytes;      /* its length, counted in the window until then */
	int code, created;
	lr_err err;
};

/* The window: slots [head, tail) in input order, at ring[i % cap]. Slots
 * before next have been taken by a pool thread (or were done when they
 * came); slots from next on wait for one. */
struct bulk {
	lr_client *c;
	pthread_mutex_t mu;
	pthread_cond_t queued; /* pool: a slot to create, or closing */
	pthread_cond_t done;   /* caller: a slot is done */
	struct slot *ring;
	size_t cap;
	uint64_t head, next, tail;
	size_t bytes;
	bool closing;          /* no more slots will come: the pool ends */
	bool stopping;         /* an etcd error: read no more, send no more */
	int stop_code;
	lr_err stop_err;
	pthread_t *threads;
	int n_threads;
	lr_submit_outcome_fn outcome;
	void *user;
	lr_submit_summary *sum;
	int64_t not_before_ms; /* given to specs without not_before */
	const char *const *within; /* lr_submit_opts.within */
};

static int rank(int code)
{
	switch (code) {
	case LR_OK:
		return 0;
	case LR_EEXIST:
		return 1;
	case LR_ENOTFOUND:
		return 2;
	case LR_EINVAL:
		return 3;
	default:
		return 4;
	}
}

int lr_submit_worse(int a, int b)
{
	return rank(b) > rank(a) ? b : a;
}

/* Errors of the cluster or of this process stop the submit: the next
 * creates would meet them too. A spec too large for the cluster's request
 * limit is about that spec only. */
static bool stops_submit(int code)
{
	return code != LR_OK && code != LR_EINVAL && code != LR_EEXIST &&
	       code != LR_ETOOLARGE && code != LR_ENOTFOUND;
}

static struct slot *slot_at(struct bulk *b, uint64_t i)
{
	return &b->ring[i % b->cap];
}

/* FNV-1a: a cheap first test before comparing ids in the window. */
static uint64_t hash_id(const char *id)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *id != '\0'; id++)
		h = (h ^ (unsigned char)*id) * 1099511628211ULL;
	return h;
}

/* Lock held. The slot's create is over (or never happens). */
static void finish(struct bulk *b, struct slot *s)
{
	if (stops_submit(s->code) && !b->stopping) {
		b->stopping = true;
		b->stop_code = s->code;
		b->stop_err = s->err;
	}
	free(s->value);
	s->value = NULL;
	b->bytes -= s->bytes;
	s->bytes = 0;
	s->state = SLOT_DONE;
	pthread_cond_signal(&b->done);
}

static void *pool_thread(void *arg)
{
	struct bulk *b = arg;

	pthread_mutex_lock(&b->mu);
	for (;;) {
		while (b->next < b->tail && slot_at(b, b->next)->state == SLOT_DONE)
			b->next++;
		if (b->next == b->tail) {
			if (b->closing)
				break;
			pthread_cond_wait(&b->queued, &b->mu);
			continue;
		}
		struct slot *s = slot_at(b, b->next++);
		if (b->stopping) {
			s->code = lr_err_set(&s->err, LR_ECANCELLED,
			                     "not submitted: stopped by an earlier error");
			finish(b, s);
			continue;
		}
		s->state = SLOT_RUNNING;
		pthread_mutex_unlock(&b->mu);
		s->code = lr_submit_store(b->c, s->id, s->value, s->start_added, b->within,
		                          &s->created, &s->err);
		pthread_mutex_lock(&b->mu);
		finish(b, s);
	}
	pthread_mutex_unlock(&b->mu);
	return NULL;
}

static void report(struct bulk *b, const struct slot *s)
{
	lr_submit_summary *sum = b->sum;
	lr_submit_outcome o = {
		.index = s->index,
		.origin = s->origin != NULL ? s->origin : "",
		.id = s->id,
		.code = s->code,
		.created = s->code == LR_OK && s->created,
		.msg = s->code == LR_OK ? ""
		       : s->err.msg[0] != '\0' ? s->err.msg : lr_strerror(s->code),
	};

	sum->items++;
	if (s->code == LR_OK && s->created)
		sum->created++;
	else if (s->code == LR_OK)
		sum->identical++;
	else if (s->code == LR_EINVAL || s->code == LR_ENOTFOUND)
		sum->invalid++;
	else if (s->code == LR_EEXIST)
		sum->conflicting++;
	else
		sum->failed++;
	sum->worst = lr_submit_worse(sum->worst, s->code);
	b->outcome(b->user, &o);
}

/* Lock held (released around the callbacks). Report the done slots at the
 * head of the window, in order. */
static void deliver(struct bulk *b)
{
	while (b->head < b->tail && slot_at(b, b->head)->state == SLOT_DONE) {
		struct slot *s = slot_at(b, b->head);
		/* No pool thread touches a done slot: safe to read unlocked. */
		pthread_mutex_unlock(&b->mu);
		report(b, s);
		free(s->origin);
		s->origin = NULL;
		pthread_mutex_lock(&b->mu);
		b->head++;
		if (b->next < b->head)
			b->next = b->head;
	}
}

/* Lock held. Whether s must wait before it is sent: a later spec of an id
 * waits for the create of that id under way, so that the earlier one wins;
 * and a spec with "after" is a barrier both ways: it waits for every
 * create before it (it may name them), and nothing after it is sent until
 * it is done (it must never find a task that comes later in the input). */
static bool must_wait(struct bulk *b, const struct slot *s)
{
	for (uint64_t i = b->head; i < b->tail; i++) {
		const struct slot *o = slot_at(b, i);
		if (o->state == SLOT_DONE)
			continue;
		if (s->after || o->after)
			return true;
		if (o->id_hash == s->id_hash && strcmp(o->id, s->id) == 0)
			return true;
	}
	return false;
}

static bool has_room(const struct bulk *b, size_t bytes)
{
	return b->tail - b->head < b->cap &&
	       (b->bytes == 0 || b->bytes + bytes <= WINDOW_BYTES);
}

/* Put a read slot at the tail of the window, once there is room and it
 * need not wait (must_wait), reporting outcomes meanwhile. */
static void place(struct bulk *b, const struct slot *s)
{
	bool to_send = s->state == SLOT_QUEUED;

	pthread_mutex_lock(&b->mu);
	for (;;) {
		deliver(b);
		if (has_room(b, s->bytes) && !(to_send && must_wait(b, s)))
			break;
		pthread_cond_wait(&b->done, &b->mu);
	}
	struct slot *at = slot_at(b, b->tail);
	*at = *s;
	b->tail++;
	if (to_send) {
		b->bytes += s->bytes;
		pthread_cond_signal(&b->queued);
	} else {
		/* Rejected before sending: done at once (out of memory
		 * stops the submit there). */
		finish(b, at);
	}
	pthread_mutex_unlock(&b->mu);
}

/* A slot for one item: validated, with its id and stored form, or done
 * with the reason it is rejected. */
static void read_slot(const lr_submit_item *item, uint64_t index, int64_t not_before_ms,
                      struct slot *s)
{
	memset(s, 0, sizeof(*s));
	s->index = index;
	s->state = SLOT_QUEUED;
	s->origin = item->origin != NULL ? strdup(item->origin) : NULL;
	if (item->error != NULL) {
		s->code = lr_err_set(&s->err, LR_EINVAL, "%s", item->error);
	} else {
		s->code = lr_submit_prepare_at(item->text != NULL ? item->text : "",
		                               item->len, NULL, not_before_ms, s->id,
		                               &s->value, &s->start_added, &s->err);
	}
	if (s->code != LR_OK) {
		s->state = SLOT_DONE;
		return;
	}
	s->id_hash = hash_id(s->id);
	s->bytes = strlen(s->value);
	/* The stored form is compact JSON in which every quote inside a
	 * string is escaped, so this finds the field (or, harmlessly, a key
	 * of that name in env or state). */
	s->after = strstr(s->value, "\"after\":") != NULL;
}

/* The caller's loop: take items until the input ends or asks to stop, or
 * the submit is stopping. Returns 0 or the input's code. */
static int feed(struct bulk *b, lr_submit_input_fn input, lr_err *err)
{
	for (uint64_t index = 0;; index++) {
		pthread_mutex_lock(&b->mu);
		deliver(b);
		bool stopping = b->stopping;
		pthread_mutex_unlock(&b->mu);
		if (stopping)
			return 0;

		lr_submit_item item;
		lr_err ierr;
		memset(&item, 0, sizeof(item));
		memset(&ierr, 0, sizeof(ierr));
		int rc = input(b->user, &item, &ierr);
		if (rc == 0)
			return 0;
		if (rc < 0) {
			if (ierr.msg[0] == '\0')
				lr_err_set(&ierr, rc, "reading the input: %s",
				           lr_strerror(rc));
			ierr.code = rc;
			if (err != NULL)
				*err = ierr;
			return rc;
		}
		struct slot s;
		read_slot(&item, index, b->not_before_ms, &s);
		place(b, &s);
	}
}

/* Start up to n pool threads; fails only when none starts. */
static int start_pool(struct bulk *b, int n, lr_err *err)
{
	b->threads = calloc((size_t)n, sizeof(*b->threads));
	if (b->threads == NULL)
		return lr_err_set(err, LR_ENOMEM, "submit: out of memory");
	for (int i = 0; i < n; i++) {
		if (pthread_create(&b->threads[i], NULL, pool_thread, b) != 0)
			break;
		b->n_threads++;
	}
	if (b->n_threads == 0)
		return lr_err_set(err, LR_ESYS, "submit: cannot start a thread");
	return 0;
}

/* Let the pool finish what is queued, report it, and join the pool. */
static void drain(struct bulk *b)
{
	pthread_mutex_lock(&b->mu);
	b->closing = true;
	pthread_cond_broadcast(&b->queued);
	for (;;) {
		deliver(b);
		if (b->head == b->tail)
			break;
		pthread_cond_wait(&b->done, &b->mu);
	}
	pthread_mutex_unlock(&b->mu);
	for (int i = 0; i < b->n_threads; i++)
		pthread_join(b->threads[i], NULL);
}

int lr_submit_many(lr_client *c, const lr_submit_opts *opts,
                   lr_submit_input_fn input, lr_submit_outcome_fn outcome,
                   void *user, lr_submit_summary *summary, lr_err *err)
{
	lr_submit_summary local_sum;
	int in_flight = opts != NULL && opts->in_flight != 0 ? opts->in_flight
	                                                     : DEFAULT_IN_FLIGHT;
	struct bulk b;
	int rc;

	if (summary == NULL)
		summary = &local_sum;
	memset(summary, 0, sizeof(*summary));
	if (LR_NULL_ARG(err, c) || LR_NULL_ARG(err, input) || LR_NULL_ARG(err, outcome))
		rc = LR_EINVAL;
	else if (in_flight < 1 || in_flight > MAX_IN_FLIGHT)
		rc = lr_err_set(err, LR_EINVAL, "submit: in_flight must be 1 to %d, "
		                "got %d", MAX_IN_FLIGHT, in_flight);
	else
		rc = 0;
	if (rc != 0) {
		summary->worst = rc;
		return rc;
	}

	memset(&b, 0, sizeof(b));
	b.c = c;
	b.outcome = outcome;
	b.user = user;
	b.sum = summary;
	b.not_before_ms = opts != NULL ? opts->not_before_ms : 0;
	b.within = opts != NULL ? opts->within : NULL;
	b.cap = (size_t)in_flight * SLOTS_PER_CREATE;
	pthread_mutex_init(&b.mu, NULL);
	pthread_cond_init(&b.queued, NULL);
	pthread_cond_init(&b.done, NULL);
	b.ring = calloc(b.cap, sizeof(*b.ring));
	rc = b.ring == NULL ? lr_err_set(err, LR_ENOMEM, "submit: out of memory")
	                    : start_pool(&b, in_flight, err);
	if (rc == 0) {
		rc = feed(&b, input, err);
		drain(&b);
		if (rc == 0 && b.stopping) {
			rc = b.stop_code;
			if (err != NULL)
				*err = b.stop_err;
		}
	}
	summary->worst = lr_submit_worse(summary->worst, rc);
	free(b.threads);
	free(b.ring);
	pthread_cond_destroy(&b.done);
	pthread_cond_destroy(&b.queued);
	pthread_mutex_destroy(&b.mu);
	return rc;
}
