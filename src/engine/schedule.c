/* schedule.c - tasks that may not start yet: a "not_before" still ahead,
 * woken by one timer for the earliest, or tasks of their "after" still in
 * the set, woken when those leave it (done, or gone). No polling: the
 * loop sleeps until the earliest time or an event. The claim checks both
 * again from etcd (claim_sched.c); this only spares useless claims.
 * Loop thread only. */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine/runner_int.h"

struct sched_timer {
	int64_t due;  /* unix ms */
	char *id;
};

struct sched_dep {
	char *dep;
	char **waiters;
	size_t n, cap;
	struct sched_dep *next;
};

#define DEP_BUCKETS 1024

struct lr_sched_gate {
	struct sched_timer *heap;   /* min-heap by due */
	size_t n, cap;
	struct sched_dep *deps[DEP_BUCKETS];
	size_t n_deps;              /* tasks waited for, in deps */
	uint32_t gen;               /* moved on by each reset, from 1 */
};

static size_t bucket_of(const char *id)
{
	uint64_t h = 1469598103934665603ULL;
	for (const unsigned char *p = (const unsigned char *)id; *p; p++)
		h = (h ^ *p) * 1099511628211ULL;
	return (size_t)(h % DEP_BUCKETS);
}

int lr_sched_init(lr_runner *r)
{
	r->sched = calloc(1, sizeof(*r->sched));
	if (r->sched == NULL)
		return LR_ENOMEM;
	r->sched->gen = 1;
	return 0;
}

void lr_sched_reset(lr_runner *r)
{
	struct lr_sched_gate *g = r->sched;
	if (g == NULL)
		return;
	for (size_t i = 0; i < g->n; i++)
		free(g->heap[i].id);
	g->n = 0;
	for (size_t b = 0; b < DEP_BUCKETS; b++) {
		for (struct sched_dep *d = g->deps[b], *next; d != NULL; d = next) {
			next = d->next;
			for (size_t i = 0; i < d->n; i++)
				free(d->waiters[i]);
			free(d->waiters);
			free(d->dep);
			free(d);
		}
		g->deps[b] = NULL;
	}
	g->n_deps = 0;
	g->gen = g->gen + 1 != 0 ? g->gen + 1 : 1;
}

void lr_sched_free(lr_runner *r)
{
	lr_sched_reset(r);
	if (r->sched != NULL)
		free(r->sched->heap);
	free(r->sched);
	r->sched = NULL;
}

/* ---- the timer heap ---------------------------------------------------------- */

static void timer_push(struct lr_sched_gate *g, int64_t due, const char *id)
{
	if (g->n == g->cap) {
		size_t cap = g->cap ? g->cap * 2 : 64;
		struct sched_timer *h = realloc(g->heap, cap * sizeof(*h));
		if (h == NULL)
			return; /* looked at again after the next re-read */
		g->heap = h;
		g->cap = cap;
	}
	char *copy = strdup(id);
	if (copy == NULL)
		return;
	size_t i = g->n++;
	while (i > 0 && g->heap[(i - 1) / 2].due > due) {
		g->heap[i] = g->heap[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	g->heap[i] = (struct sched_timer){ due, copy };
}

static struct sched_timer timer_pop(struct lr_sched_gate *g)
{
	struct sched_timer top = g->heap[0], last = g->heap[--g->n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= g->n)
			break;
		if (c + 1 < g->n && g->heap[c + 1].due < g->heap[c].due)
			c++;
		if (g->heap[c].due >= last.due)
			break;
		g->heap[i] = g->heap[c];
		i = c;
	}
	if (g->n > 0)
		g->heap[i] = last;
	return top;
}

/* ---- waiting ------------------------------------------------------------------- */

/* Entry e may be handed out again: it waits no more here. */
static void wake(lr_runner *r, const char *id, bool dep_ended)
{
	lr_entry *e = lr_taskset_find(&r->set, id);
	if (e == NULL)
		return;
	e->sched_waiting = false;
	e->sched_dep_ended = dep_ended;
	if (e->state == LR_ENTRY_BLOCKED)
		lr_taskset_set_state(&r->set, e, LR_ENTRY_PENDING);
}

static void dep_wait(struct lr_sched_gate *g, const char *dep, const char *id)
{
	size_t b = bucket_of(dep);
	struct sched_dep *d = g->deps[b];
	while (d != NULL && strcmp(d->dep, dep) != 0)
		d = d->next;
	if (d == NULL) {
		d = calloc(1, sizeof(*d));
		if (d == NULL || (d->dep = strdup(dep)) == NULL) {
			free(d);
			return;
		}
		d->next = g->deps[b];
		g->deps[b] = d;
		g->n_deps++;
	}
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 4;
		char **w = realloc(d->waiters, cap * sizeof(*w));
		if (w == NULL)
			return;
		d->waiters = w;
		d->cap = cap;
	}
	char *copy = strdup(id);
	if (copy != NULL)
		d->waiters[d->n++] = copy;
}

/* The first task of e's "after" still in the set, or NULL. One created
 * after e is not the task e named (that one was purged, and the id used
 * again): waiting for it could be waiting for e; the claim ends e. */
static const char *unfinished_dep(lr_runner *r, const lr_entry *e)
{
	for (size_t i = 0; i < e->n_after; i++) {
		const lr_entry *d = lr_taskset_find(&r->set, e->after[i]);
		if (d != NULL && !d->done_seen && d->create_rev < e->create_rev)
			return e->after[i];
	}
	return NULL;
}

bool lr_sched_ready(lr_runner *r, const lr_entry *e)
{
	return (e->not_before_ms == 0 || e->not_before_ms <= lr_wall_ms()) &&
	       unfinished_dep(r, e) == NULL;
}

/* Block e until due (unix ms), or until dep or another unfinished task of
 * its "after" leaves the set: e waits for each of them, once per
 * generation of the gate, so that a failed one ends it at once. */
static void wait_for(lr_runner *r, lr_entry *e, int64_t due, const char *dep)
{
	struct lr_sched_gate *g = r->sched;
	lr_taskset_set_state(&r->set, e, LR_ENTRY_BLOCKED);
	if (e->sched_waiting)
		return; /* already registered: blocked again by another path */
	e->sched_waiting = true;
	if (dep == NULL) {
		timer_push(g, due, e->id);
		return;
	}
	if (e->sched_deps_gen == g->gen)
		return; /* each of them still wakes it as it ends */
	e->sched_deps_gen = g->gen;
	dep_wait(g, dep, e->id);
	for (size_t i = 0; i < e->n_after; i++) {
		const lr_entry *d = lr_taskset_find(&r->set, e->after[i]);
		if (strcmp(e->after[i], dep) != 0 && d != NULL && !d->done_seen &&
		    d->create_rev < e->create_rev)
			dep_wait(g, e->after[i], e->id);
	}
}

bool lr_sched_pass(lr_runner *r, lr_entry *e)
{
	if (e->not_before_ms == 0 && e->n_after == 0)
		return true;
	if (e->not_before_ms > lr_wall_ms()) {
		wait_for(r, e, e->not_before_ms, NULL);
		return false;
	}
	/* A task of its "after" ended: if it failed, the task ends failed
	 * now, without waiting for the others. The view knows of ends, not
	 * how they went: the claimer reads that (and waits again if none
	 * failed). */
	if (e->sched_dep_ended) {
		e->sched_dep_ended = false;
		return true;
	}
	const char *dep = unfinished_dep(r, e);
	if (dep != NULL) {
		wait_for(r, e, 0, dep);
		return false;
	}
	return true;
}

/* The claimer knew e waits, and this view did not: its schedule never
 * reached the view (queue/<id> missing at start-up, or changed by hand).
 * Said once per task. */
static void say_unknown(lr_runner *r, lr_entry *e, int64_t until)
{
	bool knew = until > 0 ? e->not_before_ms > 0 : e->n_after > 0;
	if (knew || e->sched_unknown_said)
		return;
	e->sched_unknown_said = true;
	lr_runner_log(r, LR_LOG_WARN, e->id, NULL, -1,
	              "its queue record is missing or out of date: dispatched in submit order, "
	              "its spec's not_before and after still hold");
}

void lr_sched_defer(lr_runner *r, lr_entry *e, int64_t until, const char *dep)
{
	say_unknown(r, e, until);
	if (until > 0)
		e->not_before_ms = until; /* the spec's, which holds */
	if (until <= 0 && dep != NULL) {
		/* Woken like any dependent when dep leaves the set, not by a
		 * timer: it may run for hours. */
		const lr_entry *d = lr_taskset_find(&r->set, dep);
		if (d != NULL && !d->done_seen) {
			wait_for(r, e, 0, dep);
			return;
		}
	}
	/* Early by this host's clock; or dep unknown here or already ended
	 * (the claimer read before its end): look again then. */
	int64_t at = until > 0 ? until : lr_wall_ms() + 1000;
	wait_for(r, e, at, NULL);
}

void lr_sched_settled(lr_runner *r, const char *id)
{
	struct lr_sched_gate *g = r->sched;
	struct sched_dep **pp = &g->deps[bucket_of(id)];
	while (*pp != NULL && strcmp((*pp)->dep, id) != 0)
		pp = &(*pp)->next;
	struct sched_dep *d = *pp;
	if (d == NULL)
		return;
	*pp = d->next;
	g->n_deps--;
	for (size_t i = 0; i < d->n; i++) {
		wake(r, d->waiters[i], true);
		free(d->waiters[i]);
	}
	free(d->waiters);
	free(d->dep);
	free(d);
}

bool lr_sched_waits_for_tasks(const lr_runner *r)
{
	return r->sched != NULL && r->sched->n_deps > 0;
}

int64_t lr_sched_next_ms(lr_runner *r)
{
	struct lr_sched_gate *g = r->sched;
	if (g == NULL || g->n == 0)
		return INT64_MAX;
	/* From the wall clock's due time to the monotonic clock's. */
	int64_t in = g->heap[0].due - lr_wall_ms();
	return lr_mono_ms() + (in > 0 ? in : 0);
}

void lr_sched_tick(lr_runner *r)
{
	struct lr_sched_gate *g = r->sched;
	int64_t now = lr_wall_ms();
	while (g != NULL && g->n > 0 && g->heap[0].due <= now) {
		struct sched_timer t = timer_pop(g);
		wake(r, t.id, false);
		free(t.id);
	}
}
