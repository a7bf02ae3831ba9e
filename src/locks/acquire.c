/* acquire.c - the compares and writes that take and give back a request's
 * locks and slots (see acquire.h). Pure building; any thread. */
#include "locks/acquire.h"

#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/clock.h"
#include "base/error.h"

/* A slot's value: value with the limit its holder runs under, which
 * waiters read to know where they may go. NULL when out of memory (the
 * compares hold all the same). */
static char *slot_value(const char *value, int n)
{
	json_t *v = json_loads(value, 0, NULL);
	char *text = NULL;
	if (v != NULL && json_object_set_new(v, "limit", json_integer(n)) == 0)
		text = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(v);
	return text;
}

lr_txn *lr_locks_acquire(lr_txn *t, const lr_lock_writes *w, int *depth)
{
	/* Nested, so that the caller's compares and ours fail apart: a
	 * request that waits is told from a claim that lost its race. */
	lr_txn *in = lr_txn_nest(t, LR_THEN);
	char from[LR_LOCK_KEY_SIZE], to[LR_LOCK_KEY_SIZE];
	*depth = 1;
	for (size_t i = 0; i < w->set->n_nodes; i++) {
		const lr_lock_node *n = &w->set->nodes[i];
		int lo[2], hi[2];
		int ranges = lr_lock_conflicts(n->mode, lo, hi);
		for (int r = 0; r < ranges; r++) {
			lr_lock_mode_range(w->c, n->path, lo[r], hi[r], from, to);
			lr_txn_cmp_range(in, from, to, LR_CMP_VERSION, LR_CMP_EQ, 0);
			lr_txn_get_range(in, LR_ELSE, from, to, LR_RANGE_KEYS_ONLY);
		}
	}
	/* Every holder of a pool sits in a slot below every holder's limit,
	 * its own included: so no more run than the smallest limit among
	 * them, whatever limits the tasks name. */
	for (size_t i = 0; i < w->set->n_limits; i++) {
		const lr_limit *l = &w->set->limits[i];
		lr_slot_key(w->c, l->key, w->slots[i], from);
		lr_txn_cmp(in, from, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
		lr_txn_get(in, LR_ELSE, from, LR_RANGE_KEYS_ONLY);
		/* Nobody holds a slot at or beyond our limit... */
		lr_slot_range(w->c, l->key, l->n, from, to);
		lr_txn_cmp_range(in, from, to, LR_CMP_VERSION, LR_CMP_EQ, 0);
		lr_txn_get_range(in, LR_ELSE, from, to, LR_RANGE_KEYS_ONLY);
		/* ...nor runs under a limit at or below our slot. */
		lr_limit_range(w->c, l->key, w->slots[i] + 1, from, to);
		lr_txn_cmp_range(in, from, to, LR_CMP_VERSION, LR_CMP_EQ, 0);
		lr_txn_get_range(in, LR_ELSE, from, to, LR_RANGE_KEYS_ONLY);
	}
	/* Each compare's keys, read when one fails (no larger a list than
	 * the compares): the caller finds there a key on no lease in its
	 * way (lr_locks_clear_strays). */
	size_t len = strlen(w->value);
	for (size_t i = 0; i < w->set->n_nodes; i++) {
		const lr_lock_node *n = &w->set->nodes[i];
		lr_lock_key(w->c, n->path, n->mode, w->holder, from);
		lr_txn_put(in, LR_THEN, from, w->value, len, w->lease);
	}
	for (size_t i = 0; i < w->set->n_limits; i++) {
		const lr_limit *l = &w->set->limits[i];
		char *slot = slot_value(w->value, l->n);
		const char *v = slot != NULL ? slot : w->value;
		lr_slot_key(w->c, l->key, w->slots[i], from);
		lr_txn_put(in, LR_THEN, from, v, strlen(v), w->lease);
		lr_limit_key(w->c, l->key, l->n, w->slots[i], from);
		lr_txn_put(in, LR_THEN, from, w->value, len, w->lease);
		free(slot);
	}
	return in;
}

int lr_locks_txn_ops(const lr_lockset *set)
{
	int compares = 0;
	for (size_t i = 0; i < set->n_nodes; i++) {
		int lo[2], hi[2];
		compares += lr_lock_conflicts(set->nodes[i].mode, lo, hi);
	}
	compares += 3 * (int)set->n_limits;
	int writes = (int)(set->n_nodes + 2 * set->n_limits) + LR_LOCK_CALLER_OPS;
	return compares > writes ? compares : writes;
}

bool lr_locks_acquired(const lr_txn_result *r, int depth)
{
	for (int d = 0; r != NULL && d < depth; d++) {
		if (!r->succeeded || r->n_ops == 0 || r->ops[0].type != LR_OP_TXN)
			return false;
		r = r->ops[0].txn;
	}
	return r != NULL && r->succeeded;
}

lr_txn *lr_locks_stray_txn(const lr_kv *kv)
{
	lr_txn *t = lr_txn_new();
	if (t == NULL)
		return NULL;
	/* The very key read, still on no lease: one put again since, on a
	 * live holder's lease or not, stays. */
	lr_txn_cmp(t, kv->key, 0, LR_CMP_MOD, LR_CMP_EQ, kv->mod_rev);
	lr_txn_cmp(t, kv->key, 0, LR_CMP_LEASE, LR_CMP_EQ, 0);
	lr_txn_delete(t, LR_THEN, kv->key, 0);
	return t;
}

static int clear_stray(const lr_kv *kv, const lr_stray_ops *ops, lr_err *err)
{
	lr_txn *t = lr_locks_stray_txn(kv);
	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "out of memory");
	lr_txn_result r;
	int rc = ops->send(ops->user, t, &r, err);
	lr_txn_free(t);
	if (rc != 0)
		return lr_err_wrap(err, rc, "deleting %s, on no lease", kv->key);
	if (r.succeeded && ops->deleted != NULL)
		ops->deleted(ops->user, kv->key);
	lr_txn_result_free(&r);
	return 0;
}

int lr_locks_clear_strays(const lr_txn_result *r, int depth, const lr_stray_ops *ops,
                          bool *found, lr_err *err)
{
	*found = false;
	for (int d = 0; r != NULL && d < depth; d++) {
		if (!r->succeeded || r->n_ops == 0 || r->ops[0].type != LR_OP_TXN)
			return 0; /* the caller's own compares failed: nothing read */
		r = r->ops[0].txn;
	}
	if (r == NULL || r->succeeded)
		return 0;
	for (size_t i = 0; i < r->n_ops; i++) {
		const lr_op_result *op = &r->ops[i];
		for (size_t j = 0; op->type == LR_OP_RANGE && j < op->n; j++) {
			if (op->kvs[j].lease != 0)
				continue;
			*found = true;
			int rc = clear_stray(&op->kvs[j], ops, err);
			if (rc != 0)
				return rc;
		}
	}
	return 0;
}

void lr_locks_release(lr_txn *t, enum lr_txn_branch b, const lr_lock_writes *w)
{
	char key[LR_LOCK_KEY_SIZE];
	for (size_t i = 0; i < w->set->n_nodes; i++) {
		const lr_lock_node *n = &w->set->nodes[i];
		lr_lock_key(w->c, n->path, n->mode, w->holder, key);
		lr_txn_delete(t, b, key, 0);
	}
	for (size_t i = 0; i < w->set->n_limits; i++) {
		if (w->slots[i] < 0)
			continue; /* not known: the lease takes it */
		lr_slot_key(w->c, w->set->limits[i].key, w->slots[i], key);
		lr_txn_delete(t, b, key, 0);
		lr_limit_key(w->c, w->set->limits[i].key, w->set->limits[i].n, w->slots[i], key);
		lr_txn_delete(t, b, key, 0);
	}
}

char *lr_lock_value(const char *holder, const char *runner, const char *host)
{
	char since[LR_TIME_BUF];
	lr_rfc3339_now(since);
	json_t *v = json_pack("{s:s, s:s?, s:s?, s:s}", "holder", holder, "runner", runner,
	                      "host", host, "since", since);
	char *text = v != NULL ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	json_decref(v);
	return text;
}
