/* gate.c - locks and slots at the runner's door: the table of who holds
 * and waits (read with the task set, then kept by watches), whether a
 * pending task's locks can be taken now, fairly, and the tasks waiting for
 * a change. A task without locks or limits passes at no cost.
 *
 * Threads: the loop thread only (it owns the table and the waiting list). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "engine/runner_int.h"

int lr_gate_init(lr_runner *r)
{
	r->locks = lr_lock_table_new(r->client);
	return r->locks != NULL ? 0 : LR_ENOMEM;
}

void lr_gate_free(lr_runner *r)
{
	lr_lock_table_free(r->locks);
	r->locks = NULL;
	for (size_t i = 0; i < r->n_blocked; i++)
		free(r->blocked[i]);
	free(r->blocked);
	r->blocked = NULL;
	r->n_blocked = r->cap_blocked = 0;
}

int lr_gate_load(lr_runner *r, int64_t *rev, lr_err *err)
{
	for (size_t i = 0; i < r->n_blocked; i++)
		free(r->blocked[i]);
	r->n_blocked = 0; /* the task set is read again too */
	r->gate_changes++; /* a claim blocked before may pass now */
	return lr_lock_table_load(r->locks, r->client, rev, &r->stop_requested, err);
}

/* Every task waiting for a change is pending again: the loop looks at
 * them anew at its next dispatch. */
static void unblock_all(lr_runner *r)
{
	for (size_t i = 0; i < r->n_blocked; i++) {
		lr_entry *e = lr_taskset_find(&r->set, r->blocked[i]);
		if (e != NULL && e->state == LR_ENTRY_BLOCKED)
			lr_taskset_set_state(&r->set, e, LR_ENTRY_PENDING);
		free(r->blocked[i]);
	}
	r->n_blocked = 0;
}

void lr_gate_event(lr_runner *r, const struct lr_msg *m)
{
	bool changed;
	if (m->u.watch.deleted) {
		changed = lr_lock_table_delete(r->locks, m->u.watch.key, m->u.watch.mod_rev);
	} else {
		lr_kv kv = { .key = m->u.watch.key, .key_len = strlen(m->u.watch.key),
		             .value = m->u.watch.value, .value_len = m->u.watch.len,
		             .create_rev = m->u.watch.create_rev, .mod_rev = m->u.watch.mod_rev,
		             .version = m->u.watch.version, .lease = m->u.watch.lease };
		changed = lr_lock_table_put(r->locks, &kv);
	}
	/* Any delete, even of a key the table does not know (written by
	 * hand, unreadable), may free a claim's compares, which take whole
	 * ranges. */
	if (changed || m->u.watch.deleted) {
		r->gate_changes++;
		unblock_all(r);
	}
}

void lr_gate_block(lr_runner *r, lr_entry *e)
{
	lr_taskset_set_state(&r->set, e, LR_ENTRY_BLOCKED);
	if (r->n_blocked == r->cap_blocked) {
		size_t cap = r->cap_blocked ? r->cap_blocked * 2 : 16;
		char **b = realloc(r->blocked, cap * sizeof(*b));
		if (b == NULL)
			return; /* stays blocked until a re-read: not lost */
		r->blocked = b;
		r->cap_blocked = cap;
	}
	char *id = strdup(e->id);
	if (id != NULL)
		r->blocked[r->n_blocked++] = id;
}

/* A task's request waits only while the task lives; a run's goes with
 * its lease. */
static bool waiter_alive(void *user, const char *holder)
{
	lr_runner *r = user;
	if (strncmp(holder, "task:", 5) != 0)
		return true;
	const lr_entry *e = lr_taskset_find(&r->set, holder + 5);
	/* Not before its time, nor before the tasks it waits for: it holds
	 * back nobody meanwhile. */
	return e != NULL && !e->done_seen && lr_sched_ready(r, e);
}

bool lr_gate_pass(lr_runner *r, lr_entry *e, struct lr_job *job)
{
	e->gate_seq = r->gate_changes;
	char holder[LR_HOLDER_SIZE];
	lr_holder_of_task(e->id, holder);
	int64_t rev = 0;
	const lr_lockset *set = lr_lock_table_wants(r->locks, holder, &rev);
	if (set == NULL)
		return true; /* no locks, no limits */
	if (e->claim_present && e->claim_lease == atomic_load(&r->lease))
		return true; /* our own claim, to be taken up again: it holds them */
	if (lr_lock_table_can_take(r->locks, set, holder, rev, job->slots, waiter_alive, r,
	                           NULL, 0)) {
		job->n_slots = set->n_limits;
		return true;
	}
	lr_gate_block(r, e);
	return false;
}
