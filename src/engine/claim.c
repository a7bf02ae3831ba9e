/* claim.c - the claim txn and the holder's fenced writes.
 *
 * Every write after the claim compares create_revision(claims/<id>) with the
 * fence and lease(claims/<id>) with our lease, so a runner that lost its
 * lease (paused, partitioned) can never write again. Checkpoint writes also
 * compare the checkpoint's mod revision: a write retried after a lost reply
 * then fails visibly, and the failure branch shows whether our first try
 * applied (the stored bytes are ours). Called by worker threads; no shared
 * state. A prefetch reads the specs of the tasks a runner is about to claim
 * in one txn, so that each claim is one round trip. */
#include "engine/claim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/backoff.h"
#include "base/clock.h"
#include "base/error.h"
#include "engine/batch.h"
#include "etcd/kv.h"
#include "engine/claim_sched.h"
#include "locks/acquire.h"
#include "records/record.h"
#include "records/spec.h"

static void task_keys(const lr_client *c, const char *id, lr_task_keys *k)
{
	lr_key(c, LR_K_TASKS, id, k->task);
	lr_key(c, LR_K_CLAIMS, id, k->claim);
	lr_key(c, LR_K_CHECKPOINTS, id, k->ckpt);
	lr_key(c, LR_K_DONE, id, k->done);
	lr_key(c, LR_K_CANCEL, id, k->cancel);
	lr_holder_of_task(id, k->holder);
	lr_wants_key(c, k->holder, k->wants);
}

void lr_claimed_task_clear(lr_claimed_task *h)
{
	json_decref(h->spec);
	json_decref(h->state);
	free(h->locks);
	memset(h, 0, sizeof(*h));
}

static const lr_kv *op_kv(const lr_txn_result *r, size_t i)
{
	if (i >= r->n_ops || r->ops[i].type != LR_OP_RANGE || r->ops[i].n == 0)
		return NULL;
	return &r->ops[i].kvs[0];
}

static bool same_bytes(const lr_kv *kv, const char *v)
{
	return kv != NULL && kv->value_len == strlen(v) &&
	       memcmp(kv->value, v, kv->value_len) == 0;
}

static char *checkpoint_value(const lr_claimant *who, int64_t next_step,
                              int64_t attempt, json_t *state, int64_t fence)
{
	lr_checkpoint_rec rec = { .next_step = next_step, .attempt = attempt,
	                          .state = state, .fence = fence };
	snprintf(rec.runner, sizeof(rec.runner), "%s", who->runner);
	lr_rfc3339_now(rec.updated_at);
	return lr_checkpoint_encode(&rec);
}

static char *done_value(lr_task_state st, int64_t attempts, const char *error,
                        json_t *state)
{
	lr_done_rec rec = { .attempts = attempts, .error = (char *)error, .state = state };
	snprintf(rec.status, sizeof(rec.status), "%s", lr_task_state_name(st));
	lr_rfc3339_now(rec.finished_at);
	return lr_done_encode(&rec);
}

static void fence_compares(lr_txn *t, const lr_task_keys *k,
                           const lr_claimant *who, const lr_claimed_task *h)
{
	lr_txn_cmp(t, k->claim, 0, LR_CMP_CREATE, LR_CMP_EQ, h->fence);
	lr_txn_cmp(t, k->claim, 0, LR_CMP_LEASE, LR_CMP_EQ, who->lease);
}

static int claim_gone(const lr_claimed_task *h, lr_err *err)
{
	return lr_err_set(err, LR_ELEASE,
	                  "task %s: the claim (fence %lld) is gone: its lease "
	                  "expired or another runner holds the task",
	                  h->id, (long long)h->fence);
}

/* ---- sending a holder's txn ----------------------------------------------- */

bool lr_claim_transient(int code)
{
	return code == LR_EUNAVAILABLE || code == LR_ETIMEDOUT || code == LR_EAMBIGUOUS;
}

/* t and the rider together through the batch (lr_batch_txns); the
 * rider keeps its own outcome. Returns t's. */
static int send_with_rider(const lr_claimant *who, lr_rider *rd, const lr_txn *t,
                           lr_txn_result *r, lr_err *err)
{
	const lr_txn *ts[2] = { t, rd->t };
	lr_txn_result rs[2];
	lr_err errs[2] = { *err, rd->err };
	int rcs[2];
	lr_batch_txns(who->batch, 2, ts, rs, errs, rcs);
	rd->sent = true;
	rd->rc = rcs[1];
	rd->r = rs[1];
	rd->err = errs[1];
	*r = rs[0];
	*err = errs[0];
	return rcs[0];
}

/* Send t; while its outcome is open, ask who->again whether to send the
 * same txn once more. Every txn sent here is built so that a second try
 * tells whether the first applied (its compares, and its failure branch
 * reading what the first would have written). */
static int holder_txn(const lr_claimant *who, const lr_txn *t, lr_txn_result *r,
                      lr_err *err)
{
	for (;;) {
		int rc;
		if (who->rider != NULL && !who->rider->sent && who->batch != NULL)
			rc = send_with_rider(who, who->rider, t, r, err);
		else if (who->batch != NULL)
			rc = lr_batch_txn(who->batch, t, r, err);
		else
			rc = lr_etcd_txn(lr_client_etcd(who->client), t, LR_CALL_RETRY, r, err);
		if (rc == 0 || !lr_claim_transient(rc) || who->again == NULL ||
		    !who->again(who->again_user, rc))
			return rc;
	}
}

/* ---- claiming ------------------------------------------------------------- */

/* What the claimer knows before its txn. */
struct view {
	json_t *spec;           /* NULL when missing or invalid */
	char spec_error[sizeof(((lr_err *)0)->msg)];   /* why the stored spec is invalid */
	lr_checkpoint_rec ckpt;
	bool has_ckpt;
	char ckpt_error[sizeof(((lr_err *)0)->msg)];
	int64_t ckpt_rev;       /* 0 when absent */
	int64_t task_rev;       /* create revision of the tasks/ key read */
	int64_t cancel_rev;     /* mod revision of cancel/<id>; 0 when absent */
	lr_lockset *locks;      /* the spec's locks and limits, or NULL */
	const lr_sched_check *sched; /* a dependency that ends it, or NULL */
};

static void view_clear(struct view *v)
{
	json_decref(v->spec);
	free(v->locks);
	lr_checkpoint_rec_clear(&v->ckpt);
	memset(v, 0, sizeof(*v));
}

static void view_set_spec(struct view *v, const char *id, const char *text, size_t len,
                          int64_t task_rev)
{
	lr_err e = {0};
	v->task_rev = task_rev;
	json_decref(v->spec);
	v->spec = NULL;
	v->spec_error[0] = '\0';
	free(v->locks);
	v->locks = NULL;
	if (lr_spec_from_record(text, len, id, &v->spec, &e) != 0)
		snprintf(v->spec_error, sizeof(v->spec_error), "%s", e.msg);
	else if (lr_spec_lockset(v->spec, &v->locks, &e) != 0)
		snprintf(v->spec_error, sizeof(v->spec_error), "%s", e.msg);
}

static void view_set_ckpt(struct view *v, const lr_kv *kv)
{
	lr_checkpoint_rec_clear(&v->ckpt);
	v->has_ckpt = false;
	v->ckpt_error[0] = '\0';
	v->ckpt_rev = kv != NULL ? kv->mod_rev : 0;
	if (kv == NULL)
		return;
	lr_err e = {0};
	if (lr_checkpoint_decode(kv->value, kv->value_len, &v->ckpt, &e) == 0)
		v->has_ckpt = true;
	else
		snprintf(v->ckpt_error, sizeof(v->ckpt_error), "%s", e.msg);
}

/* Indexes of the reads of a task's keys, in read_view and in the failure
 * branch of every claim txn; a claim txn that ends the task reads its done
 * record's value too (F_DONE_VALUE). */
enum { F_CLAIM, F_DONE, F_CKPT, F_TASK, F_CANCEL, F_DONE_VALUE };

static void add_reads(lr_txn *t, enum lr_txn_branch b, const lr_task_keys *k)
{
	lr_txn_get(t, b, k->claim, 0); /* its record: the slots it took */
	lr_txn_get(t, b, k->done, LR_RANGE_KEYS_ONLY);
	lr_txn_get(t, b, k->ckpt, 0);
	lr_txn_get(t, b, k->task, 0);
	lr_txn_get(t, b, k->cancel, LR_RANGE_KEYS_ONLY);
}

/* The view as the reads at `first` show it: spec, checkpoint, cancel. */
static void view_from_reads(struct view *v, const char *id, const lr_txn_result *r)
{
	const lr_kv *task = op_kv(r, F_TASK);
	if (task != NULL)
		view_set_spec(v, id, task->value, task->value_len, task->create_rev);
	view_set_ckpt(v, op_kv(r, F_CKPT));
	const lr_kv *cancel = op_kv(r, F_CANCEL);
	v->cancel_rev = cancel != NULL ? cancel->mod_rev : 0;
}

/* Why the task must end instead of being run ("" if not). A claimer also
 * ends it when the claim would start its step once too often; a holder
 * adopting its own claim counts its starts itself (count_starts false). */
static void end_reason(const struct view *v, bool count_starts, char *why, size_t size)
{
	why[0] = '\0';
	if (v->spec == NULL) {
		snprintf(why, size, "invalid spec: %s", v->spec_error);
		return;
	}
	if (v->ckpt_error[0] != '\0') {
		snprintf(why, size, "unreadable checkpoint: %s", v->ckpt_error);
		return;
	}
	int64_t next = v->has_ckpt ? v->ckpt.next_step : 0;
	int64_t attempt = v->has_ckpt ? v->ckpt.attempt : 0;
	int64_t steps = (int64_t)lr_spec_steps(v->spec);
	if (next >= steps) {
		snprintf(why, size, "checkpoint says step %lld of %lld steps",
		         (long long)next, (long long)steps);
		return;
	}
	if (count_starts && attempt + 1 > lr_spec_max_attempts(v->spec))
		snprintf(why, size, "step %s started %lld time%s without finishing",
		         lr_spec_step_name(v->spec, (size_t)next), (long long)attempt,
		         attempt == 1 ? "" : "s");
}

/* The state a task ends with when its claimer ends it. */
static json_t *view_state(const struct view *v)
{
	return v->has_ckpt ? v->ckpt.state : v->spec != NULL ? lr_spec_state(v->spec) : NULL;
}

/* The txn for one try. It holds only while nobody holds the task, it is
 * not done, its checkpoint and spec are the ones read, and a cancel
 * request is as read. Then either the claim, or the task's end: failed
 * (`why` set) or cancelled (a cancel request was waiting for a holder;
 * no attempt is spent on it). */
static lr_txn *claim_txn(const lr_claimant *who, const lr_task_keys *k,
                         const struct view *v, const int *slots, const char *why,
                         char **vals, int *depth)
{
	*depth = 0;
	lr_txn *t = lr_txn_new();
	if (t == NULL)
		return NULL;
	lr_txn_cmp(t, k->claim, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_txn_cmp(t, k->done, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_txn_cmp(t, k->ckpt, 0, LR_CMP_MOD, LR_CMP_EQ, v->ckpt_rev);
	/* The task the spec came from, not one purged or submitted again. */
	lr_txn_cmp(t, k->task, 0, LR_CMP_CREATE, LR_CMP_EQ, v->task_rev);
	lr_txn_cmp(t, k->cancel, 0, LR_CMP_MOD, LR_CMP_EQ, v->cancel_rev);
	int64_t attempts = v->has_ckpt ? v->ckpt.attempt : 0;
	if (v->cancel_rev != 0 || why[0] != '\0') {
		bool cancel = v->cancel_rev != 0;
		vals[0] = done_value(cancel ? LR_TASK_CANCELLED : LR_TASK_FAILED, attempts,
		                     cancel ? "cancelled on request" : why, view_state(v));
		if (vals[0] == NULL) {
			lr_txn_free(t);
			return NULL;
		}
		if (!cancel && v->sched != NULL) /* ended for a dependency as read */
			lr_txn_cmp(t, v->sched->guard_key, 0, LR_CMP_MOD, LR_CMP_EQ,
			           v->sched->guard_rev);
		lr_txn_put(t, LR_THEN, k->done, vals[0], strlen(vals[0]), 0);
		lr_txn_delete(t, LR_THEN, k->cancel, 0);
		lr_txn_delete(t, LR_THEN, k->wants, 0);
	} else {
		lr_claim_rec rec = { .lease = who->lease };
		snprintf(rec.runner, sizeof(rec.runner), "%s", who->runner);
		for (size_t i = 0; v->locks != NULL && i < v->locks->n_limits; i++) {
			lr_claim_slot *cs = &rec.slots[rec.n_slots++];
			snprintf(cs->pool, sizeof(cs->pool), "%s", v->locks->limits[i].key);
			cs->index = slots[i];
		}
		lr_rfc3339_now(rec.claimed_at);
		vals[0] = lr_claim_encode(&rec);
		int64_t next = v->has_ckpt ? v->ckpt.next_step : 0;
		vals[1] = checkpoint_value(who, next, attempts + 1, view_state(v), 0);
		if (v->locks != NULL)
			vals[2] = lr_lock_value(k->holder, who->runner, NULL);
		if (vals[0] == NULL || vals[1] == NULL || (v->locks != NULL && vals[2] == NULL)) {
			lr_txn_free(t);
			return NULL;
		}
		/* The locks and slots with the claim, all or nothing. */
		lr_txn *in = t;
		if (v->locks != NULL) {
			lr_lock_writes w = { .c = who->client, .set = v->locks, .slots = slots,
			                     .holder = k->holder, .value = vals[2],
			                     .lease = who->lease };
			in = lr_locks_acquire(t, &w, depth);
		}
		lr_txn_put(in, LR_THEN, k->claim, vals[0], strlen(vals[0]), who->lease);
		lr_txn_put(in, LR_THEN, k->ckpt, vals[1], strlen(vals[1]), 0);
	}
	add_reads(t, LR_ELSE, k);
	/* An end sent again after a lost reply knows its own record by it. */
	if (v->cancel_rev != 0 || why[0] != '\0')
		lr_txn_get(t, LR_ELSE, k->done, 0);
	return t;
}

/* Fill h from a claim of ours: the view as it now stands in etcd. The
 * spec moves from the view to h. */
static int held_from_view(lr_claimed_task *h, const char *id, struct view *v, int64_t fence,
                          int64_t ckpt_rev, bool adopted)
{
	memset(h, 0, sizeof(*h));
	snprintf(h->id, sizeof(h->id), "%s", id);
	h->spec = v->spec;
	v->spec = NULL;
	h->steps = (int64_t)lr_spec_steps(h->spec);
	h->max_attempts = lr_spec_max_attempts(h->spec);
	h->fence = fence;
	h->ckpt_rev = ckpt_rev;
	h->next_step = v->has_ckpt ? v->ckpt.next_step : 0;
	/* Adopted: the checkpoint read back is the one our claim wrote. */
	h->attempt = (v->has_ckpt ? v->ckpt.attempt : 0) + (adopted ? 0 : 1);
	h->adopted = adopted;
	h->cancel_requested = v->cancel_rev != 0;
	h->locks = v->locks;
	v->locks = NULL;
	json_t *state = v->has_ckpt ? v->ckpt.state : lr_spec_state(h->spec);
	h->state = json_deep_copy(state);
	return h->state != NULL ? 0 : LR_ENOMEM;
}

/* The slots our own claim took, as its record says (-1 where it says
 * nothing: the lease gives those back). */
static void claimed_slots(const lr_kv *claim, const lr_lockset *set, int *slots)
{
	lr_claim_rec rec;
	bool known = lr_claim_decode(claim->value, claim->value_len, &rec, NULL) == 0;
	for (size_t i = 0; set != NULL && i < set->n_limits; i++) {
		slots[i] = -1;
		for (size_t j = 0; known && j < rec.n_slots; j++)
			if (strcmp(rec.slots[j].pool, set->limits[i].key) == 0)
				slots[i] = rec.slots[j].index;
	}
}

/* Our own claim, found on our own lease: the claim txn of an earlier try
 * applied although its reply was lost, or this runner's worker let go of
 * the task while the lease lived on. It is ours: take it up again. A view
 * that cannot be run (invalid spec, unreadable checkpoint) ends the task
 * failed with a fenced txn instead. */
static int adopt(const lr_claimant *who, const lr_task_keys *k, const char *id,
                 struct view *v, const lr_kv *claim, lr_claimed_task *h,
                 enum lr_claim_outcome *outcome, lr_task_state *ended_state,
                 char *ended_error, size_t ended_error_size, lr_err *err)
{
	char why[600];
	end_reason(v, false, why, sizeof(why));
	if (why[0] == '\0') {
		*outcome = LR_CLAIM_WON;
		int rc = held_from_view(h, id, v, claim->create_rev, v->ckpt_rev, true);
		h->keys = *k;
		return rc;
	}
	memset(h, 0, sizeof(*h));
	snprintf(h->id, sizeof(h->id), "%s", id);
	h->keys = *k;
	h->fence = claim->create_rev;
	h->attempt = v->has_ckpt ? v->ckpt.attempt : 0;
	/* The end gives back the locks and slots the claim took, as any end
	 * of a held task does. */
	h->locks = v->locks;
	v->locks = NULL;
	claimed_slots(claim, h->locks, h->slots);
	int rc = lr_finish(who, h, LR_TASK_FAILED, why, view_state(v), err);
	if (rc == 0) {
		*outcome = LR_CLAIM_ENDED;
		*ended_state = LR_TASK_FAILED;
		snprintf(ended_error, ended_error_size, "%s", why);
	} else if (rc == LR_ELEASE) {
		*outcome = LR_CLAIM_LOST; /* it went meanwhile */
		rc = 0;
	}
	h->spec = NULL;
	lr_claimed_task_clear(h);
	return rc;
}

/* A claim on no lease in what the reads show: something other than a
 * runner wrote it (a runner's claims hang on its lease), and it would
 * never expire. Deleted, as long as it is the one read; the claim txn
 * that follows finds the task free, or its failure branch shows who came
 * first. */
static int clear_foreign_claim(const lr_claimant *who, const lr_task_keys *k,
                               const lr_txn_result *reads, lr_err *err)
{
	const lr_kv *claim = op_kv(reads, F_CLAIM);
	if (claim == NULL || claim->lease != 0)
		return 0;
	lr_txn *t = lr_txn_new();
	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "out of memory");
	lr_txn_cmp(t, k->claim, 0, LR_CMP_MOD, LR_CMP_EQ, claim->mod_rev);
	lr_txn_cmp(t, k->claim, 0, LR_CMP_LEASE, LR_CMP_EQ, 0);
	lr_txn_delete(t, LR_THEN, k->claim, 0);
	lr_txn_result r;
	int rc = holder_txn(who, t, &r, err);
	lr_txn_free(t);
	if (rc != 0)
		return lr_err_wrap(err, rc, "deleting a claim record on no lease");
	lr_txn_result_free(&r);
	return 0;
}

/* Keys on no lease in the way of a claim's locks and slots: sent like
 * the claimant's other writes, and told to it. */
struct strays {
	const lr_claimant *who;
	const char *id;
};

static int send_stray(void *user, const lr_txn *t, lr_txn_result *r, lr_err *err)
{
	const struct strays *s = user;
	return holder_txn(s->who, t, r, err);
}

static void stray_deleted(void *user, const char *key)
{
	const struct strays *s = user;
	if (s->who->stray != NULL)
		s->who->stray(s->who->stray_user, s->id, key);
}

/* What the reads show, as far as it decides the outcome by itself: gone,
 * or held by another runner (*other_claim its revision). NULL when the
 * claim (or the end) is to be tried; the claim of ours to adopt otherwise
 * in *ours. */
static bool decided(const lr_claimant *who, const lr_txn_result *r,
                    enum lr_claim_outcome *outcome, int64_t *other_claim,
                    const lr_kv **ours)
{
	const lr_kv *claim = op_kv(r, F_CLAIM);
	*ours = NULL;
	if (claim != NULL && claim->lease == 0)
		claim = NULL; /* deleted just now (clear_foreign_claim) */
	if (claim != NULL && claim->lease == who->lease) {
		*ours = claim;
		return false;
	}
	if (claim != NULL) {
		*outcome = LR_CLAIM_LOST;
		*other_claim = claim->create_rev;
		return true;
	}
	if (op_kv(r, F_DONE) != NULL || op_kv(r, F_TASK) == NULL) {
		*outcome = LR_CLAIM_GONE;
		return true;
	}
	return false;
}

int lr_claim_prefetch(lr_client *c, const char (*ids)[LR_ID_SIZE], size_t n,
                      size_t max_spec, lr_prefetched *out, lr_err *err)
{
	memset(out, 0, n * sizeof(*out));
	lr_txn *t = lr_txn_new();
	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "prefetch: out of memory");
	for (size_t i = 0; i < n; i++) {
		char task[LR_KEY_SIZE], ckpt[LR_KEY_SIZE];
		lr_key(c, LR_K_TASKS, ids[i], task);
		lr_key(c, LR_K_CHECKPOINTS, ids[i], ckpt);
		snprintf(out[i].id, sizeof(out[i].id), "%s", ids[i]);
		lr_txn_get(t, LR_THEN, task, LR_RANGE_SERIALIZABLE);
		lr_txn_get(t, LR_THEN, ckpt, LR_RANGE_SERIALIZABLE | LR_RANGE_KEYS_ONLY);
	}
	lr_txn_result r;
	int rc = lr_etcd_txn(lr_client_etcd(c), t, LR_CALL_RETRY, &r, err);
	lr_txn_free(t);
	if (rc != 0)
		return lr_err_wrap(err, rc, "prefetch %zu specs", n);
	for (size_t i = 0; i < n; i++) {
		const lr_kv *task = op_kv(&r, 2 * i);
		out[i].found = task != NULL;
		out[i].has_ckpt = op_kv(&r, 2 * i + 1) != NULL;
		if (task == NULL)
			continue;
		out[i].spec_len = task->value_len;
		out[i].create_rev = task->create_rev;
		if (task->value_len <= max_spec)
			out[i].spec = lr_kv_value_dup(task);
	}
	lr_txn_result_free(&r);
	return 0;
}

void lr_prefetched_clear(lr_prefetched *p, size_t n)
{
	for (size_t i = 0; p != NULL && i < n; i++) {
		free(p[i].spec);
		p[i].spec = NULL;
	}
}

/* The slot to take in each pool of v's limits: the ones given, or chosen
 * at random when the caller did not know (a claim that finds one taken is
 * blocked, and tried again after a change). */
static void choose_slots(const struct view *v, const int *given, size_t n_given, int *slots)
{
	size_t n = v->locks != NULL ? v->locks->n_limits : 0;
	lr_rng rng;
	bool seeded = false;
	for (size_t i = 0; i < n; i++) {
		if (given != NULL && i < n_given && given[i] >= 0 &&
		    given[i] < v->locks->limits[i].n) { /* etcd checks no claimer's own */
			slots[i] = given[i];
			continue;
		}
		if (!seeded)
			lr_rng_init(&rng, NULL);
		seeded = true;
		slots[i] = (int)lr_rng_below(&rng, (uint64_t)v->locks->limits[i].n);
	}
}

int lr_claim(const lr_claimant *who, const char *id, const char *spec_text,
             size_t spec_len, int64_t spec_rev, bool fresh, const int *slots,
             size_t n_slots, lr_claimed_task *h, enum lr_claim_outcome *outcome,
             lr_task_state *ended_state, char *ended_error, size_t ended_error_size,
             lr_err *err)
{
	int chosen[LR_LIMITS_MAX];
	lr_sched_check sched = { .verdict = LR_SCHED_GO };
	bool sched_checked = false;
	lr_task_keys k;
	task_keys(who->client, id, &k);
	struct view v;
	memset(&v, 0, sizeof(v));
	memset(h, 0, sizeof(*h));
	*outcome = LR_CLAIM_LOST;
	int rc = 0;
	lr_txn_result r;
	const lr_kv *ours = NULL;
	bool have_reads = false;
	char refused[sizeof(err->msg) + 200] = ""; /* why etcd will never take its claim */
	if (spec_text != NULL && fresh && spec_rev > 0) {
		/* no checkpoint yet, and no claim to adopt */
		view_set_spec(&v, id, spec_text, spec_len, spec_rev);
	} else {
		lr_txn *t = lr_txn_new();
		if (t == NULL)
			return lr_err_set(err, LR_ENOMEM, "claim %s: out of memory", id);
		add_reads(t, LR_THEN, &k);
		rc = holder_txn(who, t, &r, err);
		lr_txn_free(t);
		if (rc != 0)
			return lr_err_wrap(err, rc, "claim %s", id);
		have_reads = true;
	}
	for (int tries = 0; tries < 5; tries++) {
		if (have_reads) {
			have_reads = false;
			rc = clear_foreign_claim(who, &k, &r, err);
			if (rc != 0) {
				lr_txn_result_free(&r);
				lr_err_wrap(err, rc, "claim %s", id);
				goto out;
			}
			bool done = decided(who, &r, outcome, &h->fence, &ours);
			if (!done)
				view_from_reads(&v, id, &r);
			choose_slots(&v, slots, n_slots, chosen);
			if (ours != NULL)
				rc = adopt(who, &k, id, &v, ours, h, outcome, ended_state,
				           ended_error, ended_error_size, err);
			if (ours != NULL && *outcome == LR_CLAIM_WON)
				claimed_slots(ours, h->locks, h->slots);
			lr_txn_result_free(&r);
			if (done || ours != NULL)
				goto out;
		}
		char why[sizeof(refused)];
		end_reason(&v, true, why, sizeof(why));
		if (why[0] == '\0' && refused[0] != '\0')
			snprintf(why, sizeof(why), "%s", refused);
		/* Its start time and the tasks it waits for, once per claim. */
		if (why[0] == '\0' && v.cancel_rev == 0 && v.spec != NULL && !sched_checked) {
			sched_checked = true;
			/* A read outside the batch: no write of this caller
			 * comes meanwhile. */
			if (who->batch != NULL)
				lr_batch_away(who->batch);
			rc = lr_claim_sched(who->client, v.spec, v.task_rev, &sched, err);
			if (who->batch != NULL)
				lr_batch_back(who->batch);
			if (rc != 0) {
				lr_err_wrap(err, rc, "claim %s", id);
				goto out;
			}
			if (sched.verdict == LR_SCHED_WAIT) {
				*outcome = LR_CLAIM_WAIT; /* nothing was written */
				h->wait_until = sched.wait_until;
				snprintf(h->wait_for, sizeof(h->wait_for), "%s", sched.wait_for);
				goto out;
			}
		}
		if (why[0] == '\0' && v.cancel_rev == 0 && sched.verdict == LR_SCHED_END) {
			snprintf(why, sizeof(why), "%s", sched.why);
			v.sched = &sched;
		}
		choose_slots(&v, slots, n_slots, chosen);
		char *vals[3] = { NULL, NULL, NULL };
		int depth;
		lr_txn *t = claim_txn(who, &k, &v, chosen, why, vals, &depth);
		rc = t != NULL ? holder_txn(who, t, &r, err)
		               : lr_err_set(err, LR_ENOMEM, "out of memory");
		lr_txn_free(t);
		bool ending = v.cancel_rev != 0 || why[0] != '\0';
		/* An end sent again after a lost reply finds its own record: it
		 * applied the first time. */
		bool ended_before = rc == 0 && !r.succeeded && ending &&
		                    same_bytes(op_kv(&r, F_DONE_VALUE), vals[0]);
		for (int i = 0; i < 3; i++)
			free(vals[i]);
		if (rc != 0 && why[0] == '\0' && v.cancel_rev == 0 && lr_etcd_too_many_ops(rc, err)) {
			/* More than this etcd takes in one txn, however often it is
			 * tried: the task fails, naming the limit (that txn is small). */
			snprintf(refused, sizeof(refused),
			         "etcd refused its claim, which takes its %zu lock nodes and %zu "
			         "slots in one txn: %s (etcd's --max-txn-ops is lower than this "
			         "task needs)", v.locks != NULL ? v.locks->n_nodes : 0,
			         v.locks != NULL ? v.locks->n_limits : 0, err->msg);
			memset(err, 0, sizeof(*err));
			rc = 0;
			continue;
		}
		if (rc != 0) {
			lr_err_wrap(err, rc, "claim %s", id);
			goto out;
		}
		if (!r.succeeded && !ended_before) {
			/* Someone came first, or something moved since the read:
			 * the failure branch shows which. */
			have_reads = true;
			continue;
		}
		if (!ending && !lr_locks_acquired(&r, depth)) {
			/* Nothing was written. A key on no lease in the way is
			 * no holder's: deleted, and the claim tried again. */
			struct strays s = { .who = who, .id = id };
			lr_stray_ops ops = { .send = send_stray, .deleted = stray_deleted, .user = &s };
			bool found;
			rc = lr_locks_clear_strays(&r, depth, &ops, &found, err);
			lr_txn_result_free(&r);
			if (rc != 0) {
				lr_err_wrap(err, rc, "claim %s", id);
				goto out;
			}
			if (found)
				continue;
			*outcome = LR_CLAIM_BLOCKED;
			goto out;
		}
		if (ending) {
			*outcome = LR_CLAIM_ENDED;
			*ended_state = v.cancel_rev != 0 ? LR_TASK_CANCELLED : LR_TASK_FAILED;
			snprintf(ended_error, ended_error_size, "%s",
			         v.cancel_rev != 0 ? "cancelled on request" : why);
		} else {
			*outcome = LR_CLAIM_WON;
			rc = held_from_view(h, id, &v, r.revision, r.revision, false);
			memcpy(h->slots, chosen, sizeof(chosen));
			h->keys = k;
		}
		lr_txn_result_free(&r);
		goto out;
	}
	if (have_reads)
		lr_txn_result_free(&r);
	*outcome = LR_CLAIM_LOST; /* kept moving under us: let others have it */
out:
	view_clear(&v);
	return rc;
}

/* ---- fenced writes --------------------------------------------------------- */

/* Give back the locks and slots the claim took, in branch THEN of t. */
static void release_locks(const lr_claimant *who, const lr_claimed_task *h, lr_txn *t)
{
	if (h->locks == NULL)
		return;
	lr_lock_writes w = { .c = who->client, .set = h->locks, .slots = h->slots,
	                     .holder = h->keys.holder };
	lr_locks_release(t, LR_THEN, &w);
}

/* Put the checkpoint (and delete the claim when releasing), fenced and
 * guarded by the checkpoint's mod revision. */
static int fenced_checkpoint(const lr_claimant *who, lr_claimed_task *h, int64_t next_step,
                             int64_t attempt, json_t *state, bool release,
                             const char *what, lr_err *err)
{
	const lr_task_keys *k = &h->keys;
	char *val = checkpoint_value(who, next_step, attempt, state, h->fence);
	if (val == NULL)
		return lr_err_set(err, LR_ENOMEM, "%s %s: out of memory", what, h->id);
	if (strlen(val) > LR_STATE_MAX_BYTES + 4096) {
		free(val);
		return lr_err_set(err, LR_ETOOLARGE, "%s %s: state over the %d KiB limit",
		                  what, h->id, LR_STATE_MAX_BYTES / 1024);
	}
	lr_txn *t = lr_txn_new();
	if (t == NULL) {
		free(val);
		return lr_err_set(err, LR_ENOMEM, "%s %s: out of memory", what, h->id);
	}
	fence_compares(t, k, who, h);
	lr_txn_cmp(t, k->ckpt, 0, LR_CMP_MOD, LR_CMP_EQ, h->ckpt_rev);
	lr_txn_put(t, LR_THEN, k->ckpt, val, strlen(val), 0);
	if (release) {
		lr_txn_delete(t, LR_THEN, k->claim, 0);
		release_locks(who, h, t);
	}
	lr_txn_get(t, LR_ELSE, k->ckpt, 0);
	lr_txn_result r;
	int rc = holder_txn(who, t, &r, err);
	lr_txn_free(t);
	if (rc != 0) {
		free(val);
		return lr_err_wrap(err, rc, "%s %s step %lld", what, h->id, (long long)h->next_step);
	}
	const lr_kv *ck = op_kv(&r, 0);
	if (r.succeeded)
		h->ckpt_rev = r.revision;
	else if (same_bytes(ck, val))
		h->ckpt_rev = ck->mod_rev; /* our earlier try applied */
	else
		rc = claim_gone(h, err);
	lr_txn_result_free(&r);
	free(val);
	return rc;
}

int lr_commit_step(const lr_claimant *who, lr_claimed_task *h, json_t *state, lr_err *err)
{
	int rc = fenced_checkpoint(who, h, h->next_step + 1, 1, state, false, "commit", err);
	if (rc != 0)
		return rc;
	json_incref(state);
	json_decref(h->state);
	h->state = state;
	h->next_step++;
	h->attempt = 1;
	h->started = false;
	return 0;
}

int lr_checkpoint_progress(const lr_claimant *who, lr_claimed_task *h, json_t *state,
                           lr_err *err)
{
	int rc = fenced_checkpoint(who, h, h->next_step, h->attempt, state, false,
	                           "checkpoint", err);
	if (rc != 0)
		return rc;
	json_decref(h->state);
	h->state = json_deep_copy(state);
	return h->state != NULL ? 0 : LR_ENOMEM;
}

int lr_bump_attempt(const lr_claimant *who, lr_claimed_task *h, lr_err *err)
{
	int rc = fenced_checkpoint(who, h, h->next_step, h->attempt + 1, h->state, false,
	                           "retry", err);
	if (rc == 0) {
		h->attempt++;
		h->started = false;
	}
	return rc;
}

int lr_release(const lr_claimant *who, lr_claimed_task *h, bool give_back, lr_err *err)
{
	if (give_back) {
		int64_t attempt = h->attempt > 0 ? h->attempt - 1 : 0;
		return fenced_checkpoint(who, h, h->next_step, attempt, h->state, true,
		                         "release", err);
	}
	const lr_task_keys *k = &h->keys;
	lr_txn *t = lr_txn_new();
	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "release %s: out of memory", h->id);
	fence_compares(t, k, who, h);
	lr_txn_delete(t, LR_THEN, k->claim, 0);
	release_locks(who, h, t);
	lr_txn_result r;
	int rc = holder_txn(who, t, &r, err);
	lr_txn_free(t);
	if (rc != 0)
		return lr_err_wrap(err, rc, "release %s", h->id);
	/* A failed compare means the claim is gone already: released. */
	lr_txn_result_free(&r);
	return 0;
}

lr_txn *lr_finish_txn(const lr_claimant *who, const lr_claimed_task *h, lr_task_state st,
                      const char *error, json_t *state, char **val, lr_err *err)
{
	const lr_task_keys *k = &h->keys;
	*val = done_value(st, h->attempt, error, state != NULL ? state : h->state);
	lr_txn *t = *val != NULL ? lr_txn_new() : NULL;
	if (t == NULL) {
		free(*val);
		*val = NULL;
		lr_err_set(err, LR_ENOMEM, "finish %s: out of memory", h->id);
		return NULL;
	}
	fence_compares(t, k, who, h);
	lr_txn_cmp(t, k->done, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_txn_put(t, LR_THEN, k->done, *val, strlen(*val), 0);
	lr_txn_delete(t, LR_THEN, k->claim, 0);
	lr_txn_delete(t, LR_THEN, k->cancel, 0);
	lr_txn_delete(t, LR_THEN, k->wants, 0);
	lr_txn_get(t, LR_ELSE, k->done, 0);
	release_locks(who, h, t);
	return t;
}

int lr_finish_outcome(lr_claimed_task *h, const lr_txn_result *r, const char *val,
                      lr_err *err)
{
	/* Failed compares with our record in place: an earlier try applied. */
	if (!r->succeeded && !same_bytes(op_kv(r, 0), val))
		return claim_gone(h, err);
	return 0;
}

int lr_finish_send(const lr_claimant *who, lr_claimed_task *h, const lr_txn *t,
                   const char *val, lr_err *err)
{
	lr_txn_result r;
	int rc = holder_txn(who, t, &r, err);
	if (rc != 0)
		return lr_err_wrap(err, rc, "finish %s", h->id);
	rc = lr_finish_outcome(h, &r, val, err);
	lr_txn_result_free(&r);
	return rc;
}

int lr_finish(const lr_claimant *who, lr_claimed_task *h, lr_task_state st,
              const char *error, json_t *state, lr_err *err)
{
	char *val;
	lr_txn *t = lr_finish_txn(who, h, st, error, state, &val, err);
	if (t == NULL)
		return LR_ENOMEM; /* the only way it fails */
	int rc = lr_finish_send(who, h, t, val, err);
	lr_txn_free(t);
	free(val);
	return rc;
}

int lr_fenced_put(const lr_claimant *who, const lr_claimed_task *h, size_t n,
                  const char *const keys[], char *const vals[], lr_err *err)
{
	lr_txn *t = lr_txn_new();
	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "put %s: out of memory", h->id);
	fence_compares(t, &h->keys, who, h);
	for (size_t i = 0; i < n; i++)
		lr_txn_put(t, LR_THEN, keys[i], vals[i], strlen(vals[i]), 0);
	lr_txn_result r;
	/* Retried after a lost reply: the same puts again change nothing. */
	int rc = holder_txn(who, t, &r, err);
	lr_txn_free(t);
	if (rc != 0)
		return lr_err_wrap(err, rc, "put %s", h->id);
	if (!r.succeeded)
		rc = claim_gone(h, err);
	lr_txn_result_free(&r);
	return rc;
}
