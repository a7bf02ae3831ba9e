/* view.c - the runner's view of the tasks under the prefix: the keys of
 * tasks/, claims/ and done/ read once (keys only, paged, at one revision),
 * then kept current by watches, into the task set the loop dispatches from.
 *
 * Threads: the watch callbacks run on the etcd client's stream thread and
 * only copy events into the inbox; everything else runs on the loop
 * thread, which owns the task set. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "client/walk.h"
#include "engine/runner_int.h"
#include "records/schedule.h"

#define LR_PAGE 1000

static const char *const dir_kinds[LR_DIR_COUNT] = { LR_K_TASKS, LR_K_CLAIMS, LR_K_DONE,
                                                     LR_K_CANCEL, LR_K_QUEUE, LR_K_LOCKS,
                                                     LR_K_SLOTS, LR_K_WANTS };

/* e leaves the set: whoever waits for it is looked at again. */
static void remove_entry(lr_runner *r, lr_entry *e)
{
	char id[LR_ID_SIZE];
	snprintf(id, sizeof(id), "%s", e->id);
	lr_taskset_remove(&r->set, e);
	lr_sched_settled(r, id);
}

/* ---- claims ------------------------------------------------------------------ */

/* Put an entry that is not handed out where its claim says: claimed by
 * another runner, or pending. A claim on our own current lease that no
 * worker of ours runs (a worker let go of it while the lease lived on, or
 * a claim whose reply was lost) is ours: pending, to be taken up again by
 * a worker, which adopts it instead of racing for it. A claim on no lease
 * was written by something else (a runner's claims hang on its lease) and
 * would never expire: pending too, and its claimer deletes it
 * (lr_claim). */
static void place(lr_runner *r, lr_entry *e)
{
	if (e->state == LR_ENTRY_LOCAL)
		return;
	bool ours = e->claim_present && e->claim_lease > 0 &&
	            e->claim_lease == atomic_load(&r->lease);
	bool foreign = e->claim_present && e->claim_lease == 0;
	bool claimed = e->claim_present && !ours && !foreign;
	lr_taskset_set_state(&r->set, e, claimed ? LR_ENTRY_CLAIMED : LR_ENTRY_PENDING);
}

/* ---- reading the keys ---------------------------------------------------- */

struct load {
	lr_runner *r;
	size_t skipped; /* keys whose id part is not a task id */
	json_t *queue;  /* queue/ records by id, read first */
};

/* The entry of a key read at load, NULL for a key that is no task's. */
static lr_entry *loaded_entry(struct load *l, const char *id, bool add, int64_t rev)
{
	if (id == NULL || !lr_id_valid(id)) {
		l->skipped++;
		return NULL;
	}
	if (add)
		return lr_taskset_add(&l->r->set, id, rev, LR_ENTRY_PENDING);
	return lr_taskset_find(&l->r->set, id);
}

/* Each record with the revision it was written at: {"record", "rev"}. */
static int page_queue(void *user, const lr_kv *kv, const char *id, lr_err *err)
{
	struct load *l = user;
	json_t *rec = json_loadb(kv->value, kv->value_len, 0, NULL);
	if (json_is_object(rec) && id != NULL && lr_id_valid(id))
		json_object_set_new(l->queue, id, json_pack("{s:o,s:I}", "record", rec, "rev",
		                                            (json_int_t)kv->mod_rev));
	else
		json_decref(rec);
	return 0;
}

/* A queue record that is no schedule, or not the one written with the
 * task (changed by hand): the task is dispatched in submit order, and its
 * claim checks its spec's start time and dependencies all the same (the
 * spec is what holds; the record only orders dispatch). Said once, not
 * left pending unseen. */
static void distrusted_queue(lr_runner *r, lr_entry *e, const char *why)
{
	e->sched_unknown_said = true;
	lr_runner_log(r, LR_LOG_WARN, e->id, NULL, -1,
	              "its queue record %s: dispatched in submit order, its spec's not_before "
	              "and after still hold", why);
}

static int page_task(void *user, const lr_kv *kv, const char *id, lr_err *err)
{
	struct load *l = user;
	const json_t *q = id != NULL ? json_object_get(l->queue, id) : NULL;
	if (q == NULL) {
		loaded_entry(l, id, true, kv->create_rev);
		return 0;
	}
	/* Submit writes the record in the txn that creates the task; retry
	 * writes the task's revision in it. Any other was changed since. */
	const json_t *rec = json_object_get(q, "record");
	bool as_written = json_integer_value(json_object_get(q, "rev")) == kv->create_rev ||
	                  json_object_get(rec, "task_rev") != NULL;
	/* When it may start, known before it enters the dispatch order. */
	lr_sched sc = { 0 };
	if (as_written && lr_sched_from_json(rec, &sc) == 0) {
		lr_taskset_add_sched(&l->r->set, id, kv->create_rev, LR_ENTRY_PENDING, &sc);
	} else {
		lr_entry *e = loaded_entry(l, id, true, kv->create_rev);
		if (e != NULL)
			distrusted_queue(l->r, e, as_written ? "is unreadable"
			                                     : "was changed after submit");
	}
	lr_sched_clear(&sc);
	return 0;
}

/* Say so when a claim on no lease appears: it is no runner's, and the
 * task's next claimer deletes it (place). */
static void foreign_claim(lr_runner *r, const lr_entry *e, int64_t lease)
{
	if (lease != 0)
		return;
	lr_runner_log(r, LR_LOG_WARN, e->id, NULL, -1,
	              "its claim record hangs on no lease: no runner wrote it, and it would "
	              "never expire; the task's next claimer deletes it");
}

static int page_claim(void *user, const lr_kv *kv, const char *id, lr_err *err)
{
	struct load *l = user;
	lr_entry *e = loaded_entry(l, id, false, 0);
	if (e != NULL) {
		foreign_claim(l->r, e, kv->lease);
		e->claim_present = true;
		e->claim_ev_rev = kv->mod_rev;
		e->claim_lease = kv->lease;
		e->fresh = false;
		place(l->r, e);
	}
	return 0;
}

static int page_done(void *user, const lr_kv *kv, const char *id, lr_err *err)
{
	struct load *l = user;
	lr_entry *e = loaded_entry(l, id, false, 0);
	if (e != NULL && e->state != LR_ENTRY_LOCAL)
		remove_entry(l->r, e);
	else if (e != NULL)
		e->done_seen = true;
	return 0;
}

/* A cancel request read at load: only a task a worker of ours runs needs
 * it now (claimers read cancel/ themselves). One put while the watches
 * were down is seen here. */
static int page_cancel(void *user, const lr_kv *kv, const char *id, lr_err *err)
{
	struct load *l = user;
	lr_entry *e = loaded_entry(l, id, false, 0);
	if (e != NULL && e->state == LR_ENTRY_LOCAL)
		lr_workers_signal(l->r, id, LR_STOP_CANCEL);
	return 0;
}

static void on_watch(void *user, const lr_watch_batch *b);

void lr_view_stop(lr_runner *r)
{
	for (int d = 0; d < LR_DIR_COUNT; d++)
		if (r->watchers[d] != NULL) {
			lr_watcher_cancel(r->watchers[d]);
			r->watchers[d] = NULL;
		}
}

/* claims/ and done/ are next to each other in key order and share one
 * watcher, so that a task's last txn (done put, claim delete) arrives as
 * one batch. */
int lr_view_load(lr_runner *r, lr_err *err)
{
	lr_view_stop(r);
	lr_taskset_clear_remote(&r->set);
	lr_sched_reset(r);
	int64_t rev = 0;
	/* queue/ first, with values: when tasks may start, by id. */
	static const struct { const char *kind; lr_walk_fn fn; int flags; } reads[] = {
		{ LR_K_QUEUE, page_queue, 0 },
		{ LR_K_TASKS, page_task, LR_RANGE_KEYS_ONLY },
		{ LR_K_CLAIMS, page_claim, LR_RANGE_KEYS_ONLY },
		{ LR_K_DONE, page_done, LR_RANGE_KEYS_ONLY },
		{ LR_K_CANCEL, page_cancel, LR_RANGE_KEYS_ONLY },
	};
	struct load l = { .r = r, .queue = json_object() };
	int rc = l.queue != NULL ? 0 : lr_err_set(err, LR_ENOMEM, "out of memory");
	for (size_t i = 0; rc == 0 && i < sizeof(reads) / sizeof(reads[0]); i++) {
		lr_walk_opts o = { .kind = reads[i].kind, .flags = reads[i].flags,
		                   .page = LR_PAGE, .revision = &rev,
		                   .stop = &r->stop_requested };
		rc = lr_walk(r->client, &o, reads[i].fn, &l, err);
	}
	json_decref(l.queue);
	if (rc == 0)
		rc = lr_gate_load(r, &rev, err);
	if (l.skipped > 0)
		lr_runner_log(r, LR_LOG_WARN, NULL, NULL, -1,
		              "skipped %zu keys under %s whose names are not task ids",
		              l.skipped, lr_client_prefix(r->client));
	if (rc == 0) {
		r->view_rev = rev;
		lr_taskset_local_read(&r->set, rev);
	}
	/* Each watcher: the keys from one directory through another. */
	static const struct { enum lr_dir dir; const char *first, *last; } watched[] = {
		{ LR_DIR_TASKS, LR_K_TASKS, LR_K_WANTS },
		{ LR_DIR_CLAIMS, LR_K_CLAIMS, LR_K_DONE },
		{ LR_DIR_CANCEL, LR_K_CANCEL, LR_K_CANCEL },
		{ LR_DIR_QUEUE, LR_K_QUEUE, LR_K_QUEUE },
		{ LR_DIR_LOCKS, LR_K_LOCKS, LR_K_LOCKS },
		{ LR_DIR_SLOTS, LR_K_SLOTS, LR_K_SLOTS },
	};
	for (int d = 0; d < LR_DIR_COUNT; d++)
		r->wctx[d] = (struct lr_watch_ctx){ r, (enum lr_dir)d };
	for (size_t i = 0; rc == 0 && i < sizeof(watched) / sizeof(watched[0]); i++) {
		char key[LR_KEY_SIZE], last[LR_KEY_SIZE], end[LR_KEY_SIZE];
		enum lr_dir d = watched[i].dir;
		lr_key(r->client, watched[i].first, "", key);
		lr_key(r->client, watched[i].last, "", last);
		end[lr_prefix_end(last, end)] = '\0';
		rc = lr_watch_add_range(r->watch, key, end, 0, rev + 1, on_watch, &r->wctx[d],
		                        &r->watchers[d], err);
	}
	if (rc == 0)
		lr_runner_log(r, LR_LOG_INFO, NULL, NULL, -1,
		              "%zu tasks pending, %zu claimed, watching from revision %lld",
		              r->set.pending, r->set.claimed, (long long)rev + 1);
	return rc;
}

/* ---- watch events, on the stream thread ---------------------------------- */

/* The directory of a watched key and the task id in it, or NULL. The
 * claims/ watcher also sees done/, the tasks/ one wants/; keys of locks/,
 * slots/ and wants/ are passed whole (their "id" is the rest of the key). */
static const char *event_id(const lr_runner *r, enum lr_dir watched, const char *key,
                            enum lr_dir *dir)
{
	*dir = watched;
	const char *id = lr_key_id(r->client, dir_kinds[watched], key);
	if (id == NULL && watched == LR_DIR_CLAIMS) {
		*dir = LR_DIR_DONE;
		id = lr_key_id(r->client, LR_K_DONE, key);
	} else if (id == NULL && watched == LR_DIR_TASKS) {
		*dir = LR_DIR_WANTS;
		id = lr_key_id(r->client, LR_K_WANTS, key);
	}
	if (*dir >= LR_DIR_LOCKS)
		return id;
	return id != NULL && lr_id_valid(id) ? id : NULL;
}

/* Whether the event at i can only take work away, so that the loop need
 * not wake for it: a claim, a result (unless tasks wait for one: see
 * lr_msg.result), a task deleted, a cancel withdrawn, and a claim deleted
 * by the txn that wrote the task's result. */
static bool lazy_event(const lr_runner *r, const lr_watch_batch *b, size_t i,
                       enum lr_dir dir, const char *id)
{
	const lr_watch_event *we = &b->events[i];
	bool deleted = we->type == LR_EV_DELETE;
	if (r->exit_when_idle)
		return false; /* idleness is decided on these */
	switch (dir) {
	case LR_DIR_TASKS:
	case LR_DIR_CANCEL:
	case LR_DIR_QUEUE:
		return deleted;
	case LR_DIR_LOCKS:
	case LR_DIR_SLOTS:
		return !deleted; /* taken: nothing to start; let go: waiters may */
	case LR_DIR_WANTS:
		return false;
	case LR_DIR_DONE:
		return true;
	case LR_DIR_CLAIMS:
		if (!deleted)
			return true;
		/* Events come in revision order: the txn's own are next to it. */
		size_t lo = i, hi = i + 1;
		while (lo > 0 && b->events[lo - 1].kv.mod_rev == we->kv.mod_rev)
			lo--;
		while (hi < b->n && b->events[hi].kv.mod_rev == we->kv.mod_rev)
			hi++;
		for (size_t j = lo; j < hi; j++) {
			const lr_watch_event *o = &b->events[j];
			enum lr_dir odir;
			const char *oid;
			if (o->type == LR_EV_PUT &&
			    (oid = event_id(r, LR_DIR_CLAIMS, o->kv.key, &odir)) != NULL &&
			    odir == LR_DIR_DONE && strcmp(oid, id) == 0)
				return true;
		}
		return false;
	case LR_DIR_COUNT:
		break;
	}
	return false;
}

/* One watch event as a message for the loop; NULL to skip it. */
static struct lr_msg *watch_msg(const lr_runner *r, const lr_watch_batch *b, size_t i,
                                enum lr_dir watched)
{
	const lr_watch_event *we = &b->events[i];
	enum lr_dir dir;
	const char *id = event_id(r, watched, we->kv.key, &dir);
	if (id == NULL)
		return NULL;
	struct lr_msg *m = lr_msg_new(LR_MSG_WATCH);
	if (m == NULL)
		return NULL;
	m->lazy = lazy_event(r, b, i, dir, id);
	m->result = (dir == LR_DIR_DONE && we->type != LR_EV_DELETE) ||
	            (dir == LR_DIR_TASKS && we->type == LR_EV_DELETE);
	m->u.watch.dir = dir;
	m->u.watch.deleted = we->type == LR_EV_DELETE;
	if (dir >= LR_DIR_LOCKS) {
		m->u.watch.key = strdup(we->kv.key);
		if (!m->u.watch.deleted) {
			m->u.watch.value = lr_kv_value_dup(&we->kv);
			m->u.watch.len = we->kv.value_len;
		}
	} else {
		snprintf(m->u.watch.id, sizeof(m->u.watch.id), "%s", id);
	}
	m->u.watch.create_rev = we->kv.create_rev;
	m->u.watch.mod_rev = we->kv.mod_rev;
	m->u.watch.version = we->kv.version;
	m->u.watch.lease = we->kv.lease;
	if (dir == LR_DIR_TASKS && !m->u.watch.deleted) {
		m->u.watch.len = we->kv.value_len;
		if (we->kv.value_len <= LR_SPEC_CACHE_ONE)
			m->u.watch.value = lr_kv_value_dup(&we->kv);
		else /* only the copy is capped: when it may start is kept */
			m->u.watch.sched = lr_sched_record_of_text(we->kv.value, we->kv.value_len);
	}
	if (dir == LR_DIR_QUEUE && !m->u.watch.deleted) {
		m->u.watch.len = we->kv.value_len;
		m->u.watch.value = lr_kv_value_dup(&we->kv);
	}
	return m;
}

/* Watch events, on the client's stream thread: copy what the loop needs. */
static void on_watch(void *user, const lr_watch_batch *b)
{
	struct lr_watch_ctx *ctx = user;
	lr_runner *r = ctx->r;
	/* An outage of the stream changes nothing here: the watch resumes
	 * where it stopped, and the lease and the calls tell of etcd's
	 * trouble. */
	if (b->kind == LR_WATCH_DOWN || b->kind == LR_WATCH_UP)
		return;
	if (b->kind == LR_WATCH_COMPACTED || b->kind == LR_WATCH_CANCELLED) {
		struct lr_msg *m = lr_msg_new(LR_MSG_RESYNC);
		if (m != NULL) {
			m->u.resync.reason = strdup(b->reason != NULL ? b->reason : "compacted");
			lr_inbox_post(&r->inbox, m);
		}
		return;
	}
	/* The batch goes to the loop in one piece: a txn's events are applied
	 * together. */
	struct lr_msg *head = NULL, **tail = &head;
	for (size_t i = 0; i < b->n; i++) {
		struct lr_msg *m = watch_msg(r, b, i, ctx->dir);
		if (m == NULL)
			continue;
		*tail = m;
		tail = &m->next;
	}
	lr_inbox_post(&r->inbox, head);
}

/* ---- applying them, on the loop thread ----------------------------------- */

/* Spec sizes seen lately, to size prefetches. */
static void note_spec_size(lr_runner *r, size_t len)
{
	r->spec_avg = (r->spec_avg * 7 + len) / 8;
}

static void apply_task(lr_runner *r, lr_entry *e, const struct lr_msg *m)
{
	if (m->u.watch.deleted) {
		if (e != NULL && e->state != LR_ENTRY_LOCAL)
			remove_entry(r, e);
		return;
	}
	if (e != NULL && e->create_rev < m->u.watch.create_rev &&
	    e->state != LR_ENTRY_LOCAL) {
		/* The task was purged and submitted again, and the events of
		 * the old one's end are late (another watcher): a new task. */
		remove_entry(r, e);
		e = NULL;
	}
	/* When it may start, from the spec the event carries (or, for a spec
	 * too large to keep, from what was taken of it on the way). */
	lr_sched sc;
	if (m->u.watch.value != NULL)
		lr_sched_from_text(m->u.watch.value, m->u.watch.len, &sc);
	else
		lr_sched_from_text(m->u.watch.sched,
		                   m->u.watch.sched != NULL ? strlen(m->u.watch.sched) : 0, &sc);
	if (e == NULL) {
		e = lr_taskset_add_sched(&r->set, m->u.watch.id, m->u.watch.create_rev,
		                         LR_ENTRY_PENDING, &sc);
		if (e == NULL) {
			lr_sched_clear(&sc);
			return;
		}
		e->fresh = m->u.watch.version == 1;
	} else if (e->state == LR_ENTRY_LOCAL && e->create_rev < m->u.watch.create_rev) {
		/* Submitted again while a worker still reports on the old one:
		 * lr_view_settle tells the two apart by this revision. */
		e->create_rev = m->u.watch.create_rev;
		e->done_seen = false;
		e->claim_present = false;
		e->fresh = m->u.watch.version == 1;
	} else {
		/* Its claim's event came first: it entered knowing nothing of
		 * when it may start. */
		lr_taskset_set_create_rev(&r->set, e, m->u.watch.create_rev);
		lr_taskset_set_sched(&r->set, e, &sc);
	}
	lr_sched_clear(&sc);
	note_spec_size(r, m->u.watch.len);
	if (m->u.watch.value != NULL)
		lr_taskset_cache_spec(&r->set, e, m->u.watch.value, m->u.watch.len);
}

static void apply_claim(lr_runner *r, lr_entry *e, const struct lr_msg *m)
{
	bool deleted = m->u.watch.deleted;
	if (e == NULL) {
		/* The claim's event came before the task's: note it. */
		if (deleted)
			return;
		e = lr_taskset_add(&r->set, m->u.watch.id, m->u.watch.create_rev,
		                   LR_ENTRY_CLAIMED);
		if (e == NULL)
			return;
	}
	/* A claim deleted under a worker of ours: unless the worker's own
	 * last txn did it, the claim is gone while a step may run (etcd
	 * revoked the lease early, or someone deleted the key), and another
	 * runner may start it any moment. */
	if (deleted && e->state == LR_ENTRY_LOCAL)
		lr_workers_claim_gone(r, e->id, m->u.watch.mod_rev);
	if (!deleted)
		foreign_claim(r, e, m->u.watch.lease);
	e->claim_present = !deleted;
	e->claim_ev_rev = m->u.watch.mod_rev;
	e->claim_lease = deleted ? 0 : m->u.watch.lease;
	if (!deleted)
		e->fresh = false;
	/* Deleted: its holder let go or its lease expired: take over. */
	if (!e->done_seen)
		place(r, e);
}

/* A queue record put by `leaserun retry` ({"task_rev", ...}): the task,
 * done and out of the set, is pending again. Records put at submit come
 * with the task, whose spec the tasks/ event already carried. */
static void apply_queue(lr_runner *r, lr_entry *e, const struct lr_msg *m)
{
	if (m->u.watch.deleted || m->u.watch.value == NULL)
		return;
	json_t *rec = json_loadb(m->u.watch.value, m->u.watch.len, 0, NULL);
	json_int_t task_rev = json_integer_value(json_object_get(rec, "task_rev"));
	lr_sched sc;
	if (task_rev > 0 && e == NULL) {
		if (lr_sched_from_json(rec, &sc) == 0) {
			e = lr_taskset_add_sched(&r->set, m->u.watch.id, (int64_t)task_rev,
			                         LR_ENTRY_PENDING, &sc);
		} else {
			e = lr_taskset_add(&r->set, m->u.watch.id, (int64_t)task_rev,
			                   LR_ENTRY_PENDING);
			if (e != NULL)
				distrusted_queue(r, e, "is unreadable");
		}
		lr_sched_clear(&sc);
		if (e != NULL)
			e->retry_rev = m->u.watch.mod_rev;
	} else if (task_rev > 0 && e != NULL && e->create_rev == task_rev) {
		/* Still here: the end of its run not applied yet (claims/ and
		 * done/ have their own watcher), or a worker of ours still to
		 * report on it. The retry compared that no claim existed. */
		e->retry_rev = m->u.watch.mod_rev;
		e->done_seen = false;
		e->rerun = e->state == LR_ENTRY_LOCAL;
		if (e->claim_ev_rev < m->u.watch.mod_rev) {
			e->claim_present = false;
			e->claim_lease = 0;
		}
		place(r, e);
	}
	json_decref(rec);
}

static void apply_watch(lr_runner *r, const struct lr_msg *m)
{
	/* Queued before the last re-read, which already shows it. */
	if (m->u.watch.mod_rev <= r->view_rev)
		return;
	if (m->u.watch.dir >= LR_DIR_LOCKS) {
		if (m->u.watch.key != NULL)
			lr_gate_event(r, m);
		return;
	}
	lr_entry *e = lr_taskset_find(&r->set, m->u.watch.id);
	/* About an older task of the same id (purged since): each directory
	 * has its own watcher, so such events may come after the new task's
	 * creation. */
	if (e != NULL && m->u.watch.dir != LR_DIR_TASKS && m->u.watch.mod_rev < e->create_rev)
		return;
	/* About its run before a retry, late from another watcher. */
	if (e != NULL && m->u.watch.dir != LR_DIR_TASKS && m->u.watch.mod_rev < e->retry_rev)
		return;
	switch (m->u.watch.dir) {
	case LR_DIR_TASKS:
		apply_task(r, e, m);
		return;
	case LR_DIR_CLAIMS:
		apply_claim(r, e, m);
		return;
	case LR_DIR_DONE:
		if (m->u.watch.deleted || e == NULL)
			return;
		e->done_seen = true;
		if (e->state != LR_ENTRY_LOCAL)
			remove_entry(r, e);
		else
			lr_sched_settled(r, m->u.watch.id);
		return;
	case LR_DIR_CANCEL:
		if (!m->u.watch.deleted && e != NULL && e->state == LR_ENTRY_LOCAL)
			lr_workers_signal(r, m->u.watch.id, LR_STOP_CANCEL);
		return;
	case LR_DIR_QUEUE:
		apply_queue(r, e, m);
		return;
	case LR_DIR_LOCKS:
	case LR_DIR_SLOTS:
	case LR_DIR_WANTS:
	case LR_DIR_COUNT:
		return;
	}
}

/* Specs a worker read for tasks about to be claimed: cache them, and mark
 * as fresh (one-round-trip claim) those that had no checkpoint and whose
 * claim we never saw. Either guess being out of date costs one retry of
 * the claim txn at most: it compares the checkpoint's revision. */
static void apply_prefetched(lr_runner *r, const struct lr_msg *m)
{
	for (size_t i = 0; i < m->u.prefetched.n; i++) {
		const lr_prefetched *p = &m->u.prefetched.pre[i];
		if (p->found)
			note_spec_size(r, p->spec_len);
		lr_entry *e = lr_taskset_find(&r->set, p->id);
		if (e == NULL || e->state == LR_ENTRY_LOCAL || p->spec == NULL ||
		    p->create_rev != e->create_rev)
			continue; /* gone, taken, too large, or another incarnation */
		lr_taskset_cache_spec(&r->set, e, p->spec, p->spec_len);
		if (e->spec != NULL && !p->has_ckpt && e->claim_ev_rev == 0)
			e->fresh = true;
	}
}

void lr_view_apply(lr_runner *r, const struct lr_msg *m)
{
	if (m->kind == LR_MSG_WATCH)
		apply_watch(r, m);
	else if (m->kind == LR_MSG_PREFETCHED)
		apply_prefetched(r, m);
}

void lr_view_settle(lr_runner *r, const char *id, int64_t task_rev, bool gone,
                    int64_t claim_rev, bool started)
{
	lr_entry *e = lr_taskset_find(&r->set, id);
	if (e == NULL)
		return;
	/* A task submitted again under the same id meanwhile is a new one:
	 * what the worker says of the old one does not apply to it. */
	bool same = task_rev == 0 || e->create_rev == task_rev;
	if (e->rerun) /* what the worker says is of the run before a retry */
		gone = false;
	e->rerun = false;
	if (same && (gone || e->done_seen)) {
		remove_entry(r, e);
		return;
	}
	if (!same) {
		lr_taskset_set_state(&r->set, e, LR_ENTRY_CLAIMED); /* off LOCAL */
		place(r, e);
		return;
	}
	/* Another runner's claim the worker saw and the watch did not yet. */
	if (claim_rev > 0 && e->claim_ev_rev < claim_rev) {
		e->claim_present = true;
		e->claim_ev_rev = claim_rev;
		e->claim_lease = LR_LEASE_UNKNOWN;
	}
	e->adopt_started = started;
	lr_taskset_set_state(&r->set, e, LR_ENTRY_CLAIMED); /* off LOCAL */
	place(r, e);
}
