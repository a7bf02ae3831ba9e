/* turns.c - tasks waiting for their turn at the runner: held until their
 * not_before (one timer heap: the loop sleeps until the earliest) or until
 * every task they come after has ended (an index from each dependency to its
 * waiting dependents, walked when it ends). A task without a turn passes
 * through lr_turns_state at the cost of one test.
 *
 * Threads: the loop thread only (it owns the task set and these). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/runner_int.h"
#include "records/turn.h"

#define TURN_BUCKETS 256

int lr_turns_init(lr_runner *r)
{
	memset(&r->turns, 0, sizeof(r->turns));
	r->turns.nbuckets = TURN_BUCKETS;
	r->turns.buckets = calloc(TURN_BUCKETS, sizeof(*r->turns.buckets));
	return r->turns.buckets != NULL ? 0 : LR_ENOMEM;
}

static void free_dependents(struct lr_dependents *d)
{
	for (size_t i = 0; i < d->n; i++)
		free(d->ids[i]);
	free(d->ids);
	free(d->dep);
	free(d);
}

void lr_turns_reset(lr_runner *r)
{
	lr_turns *t = &r->turns;
	/* Entries a worker still runs outlive a re-read: they are in no
	 * timer or list any more. */
	for (size_t i = 0; i < r->set.nbuckets; i++)
		for (lr_entry *e = r->set.buckets[i]; e != NULL; e = e->next)
			e->timer_set = e->waits_dep = false;
	for (size_t i = 0; i < t->n_timers; i++)
		free(t->timers[i].id);
	t->n_timers = 0;
	for (size_t i = 0; i < t->nbuckets; i++) {
		while (t->buckets[i] != NULL) {
			struct lr_dependents *d = t->buckets[i];
			t->buckets[i] = d->next;
			free_dependents(d);
		}
	}
}

void lr_turns_free(lr_runner *r)
{
	if (r->turns.buckets != NULL)
		lr_turns_reset(r);
	free(r->turns.timers);
	free(r->turns.buckets);
	memset(&r->turns, 0, sizeof(r->turns));
}

/* ---- the timer heap --------------------------------------------------------- */

static void timer_push(lr_turns *t, int64_t due, const char *id)
{
	if (t->n_timers == t->cap_timers) {
		size_t cap = t->cap_timers ? t->cap_timers * 2 : 64;
		struct lr_turn_timer *n = realloc(t->timers, cap * sizeof(*n));
		if (n == NULL)
			return; /* held until the next re-read */
		t->timers = n;
		t->cap_timers = cap;
	}
	char *copy = strdup(id);
	if (copy == NULL)
		return;
	size_t i = t->n_timers++;
	while (i > 0 && t->timers[(i - 1) / 2].due > due) {
		t->timers[i] = t->timers[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	t->timers[i] = (struct lr_turn_timer){ due, copy };
}

static struct lr_turn_timer timer_pop(lr_turns *t)
{
	struct lr_turn_timer top = t->timers[0];
	struct lr_turn_timer last = t->timers[--t->n_timers];
	size_t i = 0;
	for (;;) {
		size_t l = 2 * i + 1, m = i;
		int64_t best = last.due;
		if (l < t->n_timers && t->timers[l].due < best) {
			m = l;
			best = t->timers[l].due;
		}
		if (l + 1 < t->n_timers && t->timers[l + 1].due < best)
			m = l + 1;
		if (m == i)
			break;
		t->timers[i] = t->timers[m];
		i = m;
	}
	if (t->n_timers > 0)
		t->timers[i] = last;
	return top;
}

/* ---- dependents ---------------------------------------------------------- */

static struct lr_dependents **dependents_slot(lr_turns *t, const char *dep)
{
	struct lr_dependents **pp = &t->buckets[lr_taskset_hash(dep) % t->nbuckets];
	while (*pp != NULL && strcmp((*pp)->dep, dep) != 0)
		pp = &(*pp)->next;
	return pp;
}

/* Note that e waits for dep to end. False when out of memory (e is then
 * looked at again by the next re-read only). */
static bool dependents_add(lr_turns *t, const char *dep, lr_entry *e)
{
	struct lr_dependents **pp = dependents_slot(t, dep);
	if (*pp == NULL) {
		struct lr_dependents *d = calloc(1, sizeof(*d));
		if (d == NULL || (d->dep = strdup(dep)) == NULL) {
			free(d);
			return false;
		}
		*pp = d;
	}
	struct lr_dependents *d = *pp;
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 4;
		char **ids = realloc(d->ids, cap * sizeof(*ids));
		if (ids == NULL)
			return false;
		d->ids = ids;
		d->cap = cap;
	}
	if ((d->ids[d->n] = strdup(e->id)) == NULL)
		return false;
	d->n++;
	e->waits_dep = true;
	return true;
}

/* ---- the turn of an entry -------------------------------------------------- */

void lr_turns_apply(lr_runner *r, lr_entry *e, const char *value, size_t len)
{
	lr_turn t = { 0 };
	lr_err err = { 0 };
	if (value != NULL && lr_turn_decode(value, len, &t, &err) != 0)
		/* Dispatched as a task without a turn: its claim reads the
		 * spec, which is what counts. */
		lr_runner_log(r, LR_LOG_WARN, e->id, NULL, -1, "%s", err.msg);
	free(e->after);
	e->after = t.after;
	e->n_after = t.n_after;
	t.after = NULL;
	e->not_before = t.not_before_ms;
	e->has_turn = e->not_before != 0 || e->n_after > 0;
	lr_taskset_set_priority(&r->set, e, t.priority);
}

enum lr_entry_state lr_turns_state(lr_runner *r, lr_entry *e)
{
	if (!e->has_turn)
		return LR_ENTRY_PENDING;
	if (e->not_before != 0 && e->not_before > lr_wall_ms()) {
		if (!e->timer_set) {
			timer_push(&r->turns, e->not_before, e->id);
			e->timer_set = true;
		}
		return LR_ENTRY_HELD;
	}
	for (size_t i = 0; i < e->n_after; i++) {
		const lr_entry *d = lr_taskset_find(&r->set, e->after[i]);
		if (d == NULL || d->done_seen)
			continue; /* ended (its claimer checks how) */
		if (e->waits_dep || dependents_add(&r->turns, e->after[i], e))
			return LR_ENTRY_HELD;
	}
	return LR_ENTRY_PENDING;
}

/* Look at a held entry again. */
static void reconsider(lr_runner *r, lr_entry *e)
{
	if (e != NULL && e->state == LR_ENTRY_HELD)
		lr_taskset_set_state(&r->set, e, lr_turns_state(r, e));
}

void lr_turns_ended(lr_runner *r, const char *id)
{
	struct lr_dependents **pp = dependents_slot(&r->turns, id);
	struct lr_dependents *d = *pp;
	if (d == NULL)
		return;
	*pp = d->next;
	for (size_t i = 0; i < d->n; i++) {
		lr_entry *e = lr_taskset_find(&r->set, d->ids[i]);
		if (e == NULL)
			continue;
		e->waits_dep = false;
		reconsider(r, e);
	}
	free_dependents(d);
}

int64_t lr_turns_tick(lr_runner *r)
{
	lr_turns *t = &r->turns;
	int64_t now = lr_wall_ms();
	while (t->n_timers > 0 && t->timers[0].due <= now) {
		struct lr_turn_timer due = timer_pop(t);
		lr_entry *e = lr_taskset_find(&r->set, due.id);
		free(due.id);
		if (e == NULL || !e->timer_set)
			continue;
		e->timer_set = false;
		reconsider(r, e);
	}
	return t->n_timers > 0 ? t->timers[0].due - now : -1;
}

void lr_turns_recheck(lr_runner *r, lr_entry *e, int64_t in_ms)
{
	lr_taskset_set_state(&r->set, e, LR_ENTRY_HELD);
	if (!e->timer_set) {
		timer_push(&r->turns, lr_wall_ms() + in_ms, e->id);
		e->timer_set = true;
	}
}
