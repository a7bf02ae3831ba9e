/* retry.c - a failed or cancelled task made pending again (lr_retry in
 * leaserun.h, lr_retry_to in retry.h): one txn guarded by the done record
 * as read and no claim, which deletes the result, rewinds the checkpoint,
 * keeps the outcome in the task's history and tells runners (P
 * queue/<id>); sent again after a lost reply, it knows its own history
 * record. Runs on the caller's thread. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/backoff.h"
#include "base/clock.h"
#include "base/error.h"
#include "client/client.h"
#include "client/lock_keys.h"
#include "client/retry.h"
#include "etcd/kv.h"
#include "records/record.h"
#include "records/schedule.h"
#include "records/spec.h"

/* Outcomes kept in P history/<id>, newest first. */
#define HISTORY_KEEP 10

enum { R_TASK, R_DONE, R_CLAIM, R_CKPT, R_HISTORY, R_COUNT };

struct reads {
	lr_txn_result r;
	const lr_kv *kv[R_COUNT];
	char key[R_COUNT][LR_KEY_SIZE];
};

static int read_all(lr_client *c, const char *id, struct reads *rd, lr_err *err)
{
	static const char *const kinds[R_COUNT] = { LR_K_TASKS, LR_K_DONE, LR_K_CLAIMS,
		                                    LR_K_CHECKPOINTS, LR_K_HISTORY };
	lr_txn *t = lr_txn_new();
	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "out of memory");
	for (int i = 0; i < R_COUNT; i++) {
		lr_key(c, kinds[i], id, rd->key[i]);
		lr_txn_get(t, LR_THEN, rd->key[i], i == R_CLAIM ? LR_RANGE_KEYS_ONLY : 0);
	}
	int rc = lr_etcd_txn(lr_client_etcd(c), t, LR_CALL_RETRY, &rd->r, err);
	lr_txn_free(t);
	for (int i = 0; rc == 0 && i < R_COUNT; i++)
		rd->kv[i] = rd->r.ops[i].n == 1 ? &rd->r.ops[i].kvs[0] : NULL;
	return rc;
}

/* The step to resume at: the one given (by name, or by 0-based index in
 * digits alone), else next. Digits that are both an index and the name of
 * another step are refused: either reading could be the one meant. */
static int from_step(const json_t *spec, const lr_retry_opts *o, int64_t next, int64_t *out,
                     lr_err *err)
{
	int64_t steps = (int64_t)lr_spec_steps(spec);
	*out = next < steps ? next : 0;
	if (o == NULL || o->from_step == NULL)
		return 0;
	const char *s = o->from_step;
	int64_t named = -1, indexed = -1;
	for (int64_t i = 0; i < steps && named < 0; i++)
		if (strcmp(lr_spec_step_name(spec, (size_t)i), s) == 0)
			named = i;
	/* strtoll would also take "+1", " 1" and "-0". */
	bool digits = s[0] != '\0' && s[strspn(s, "0123456789")] == '\0';
	errno = 0;
	long long n = digits ? strtoll(s, NULL, 10) : -1;
	if (digits && errno == 0 && n < steps)
		indexed = n;
	if (named >= 0 && indexed >= 0 && named != indexed)
		return lr_err_set(err, LR_EINVAL, "--from-step %s: ambiguous: step index %lld "
		                  "(\"%s\") or the step named \"%s\" (index %lld)", s,
		                  (long long)indexed, lr_spec_step_name(spec, (size_t)indexed), s,
		                  (long long)named);
	if (named >= 0 || indexed >= 0) {
		*out = named >= 0 ? named : indexed;
		return 0;
	}
	return lr_err_set(err, LR_EINVAL, "--from-step %s: no step of that name or index "
	                  "(0 to %lld)", s, (long long)steps - 1);
}

/* The history with the outcome being retried in front, at most
 * HISTORY_KEEP entries; the entry names this retry by a random retry_id,
 * so that a retry finding it there after its own txn failed knows it for
 * its own write, not a concurrent retry's of the same outcome. New string. */
static char *history_with(const lr_kv *old, const lr_done_rec *d, const char *runner)
{
	lr_rng rng;
	lr_rng_init(&rng, NULL); /* seeded from the clock if need be */
	char retry_id[17];
	snprintf(retry_id, sizeof(retry_id), "%016llx", (unsigned long long)lr_rng_next(&rng));
	json_t *h = old != NULL ? json_loadb(old->value, old->value_len, 0, NULL) : NULL;
	if (!json_is_array(h)) {
		json_decref(h);
		h = json_array();
	}
	json_t *e = json_pack("{s:s, s:I, s:s?, s:s?, s:s?, s:s}", "status", d->status,
	                      "attempts", (json_int_t)d->attempts, "error", d->error, "runner",
	                      runner, "finished_at", d->finished_at[0] ? d->finished_at : NULL,
	                      "retry_id", retry_id);
	json_array_insert_new(h, 0, e);
	while (json_array_size(h) > HISTORY_KEEP)
		json_array_remove(h, json_array_size(h) - 1);
	char *text = json_dumps(h, JSON_COMPACT);
	json_decref(h);
	return text;
}

int lr_retry_to(lr_client *c, const char *id, const lr_retry_opts *o, lr_retry_at *at,
                lr_err *err)
{
	memset(at, 0, sizeof(*at));
	if (LR_NULL_ARG(err, c) || LR_NULL_ARG(err, id))
		return LR_EINVAL;
	if (!lr_id_valid(id))
		return lr_err_set(err, LR_EINVAL, "retry: \"%.64s\" is not a task id", id);
	struct reads rd;
	memset(&rd, 0, sizeof(rd));
	int rc = read_all(c, id, &rd, err);
	if (rc != 0)
		return lr_err_wrap(err, rc, "retry %s", id);
	json_t *spec = NULL;
	lr_done_rec d = { .status = "" };
	lr_checkpoint_rec ck = { 0 };
	char *vals[4] = { NULL, NULL, NULL, NULL };
	lr_txn *t = NULL;
	if (rd.kv[R_TASK] == NULL) {
		rc = lr_err_set(err, LR_ENOTFOUND, "retry %s: no such task", id);
		goto out;
	}
	if (rd.kv[R_DONE] == NULL) {
		rc = lr_err_set(err, LR_EINVAL, "retry %s: the task is %s: only a failed or "
		                "cancelled task can be retried", id,
		                rd.kv[R_CLAIM] != NULL ? "running" : "pending");
		goto out;
	}
	/* What is stored, not what the caller gave: say so. */
	if ((rc = lr_done_decode(rd.kv[R_DONE]->value, rd.kv[R_DONE]->value_len, &d, err)) != 0) {
		lr_err_wrap(err, rc, "retry %s: its result (done/%s) is unreadable", id, id);
		goto out;
	}
	if ((rc = lr_spec_from_record(rd.kv[R_TASK]->value, rd.kv[R_TASK]->value_len, id, &spec,
	                              err)) != 0) {
		lr_err_wrap(err, rc, "retry %s: its stored spec is invalid, so it cannot run again",
		            id);
		goto out;
	}
	if (strcmp(d.status, "succeeded") == 0) {
		rc = lr_err_set(err, LR_EINVAL, "retry %s: the task succeeded: only a failed or "
		                "cancelled task can be retried", id);
		goto out;
	}
	int64_t next = 0;
	if (rd.kv[R_CKPT] != NULL &&
	    lr_checkpoint_decode(rd.kv[R_CKPT]->value, rd.kv[R_CKPT]->value_len, &ck, NULL) == 0)
		next = ck.next_step;
	int64_t step;
	if ((rc = from_step(spec, o, next, &step, err)) != 0) {
		lr_err_wrap(err, rc, "retry %s", id);
		goto out;
	}
	/* Resumed with the state as the task ended with it (the last
	 * checkpoint), or the spec's; attempts counted afresh. */
	bool reset = o != NULL && o->reset_state;
	lr_checkpoint_rec fresh = { .next_step = step, .attempt = 0,
		                    .state = reset || d.state == NULL ? lr_spec_state(spec) : d.state };
	lr_rfc3339_now(fresh.updated_at);
	/* The checkpoint's runner is the last runner that ran the task, which
	 * status shows for a task not held: a retry is not one, so the last
	 * holder's name stays. A task no runner ever claimed has no
	 * checkpoint, which means step 0 with the spec's state: resumed
	 * there, it is left without one; resumed at a later step, its
	 * checkpoint names no runner (""). */
	snprintf(fresh.runner, sizeof(fresh.runner), "%s", ck.runner);
	bool as_never_run = ck.runner[0] == '\0' && step == 0 &&
	                    json_equal(fresh.state, lr_spec_state(spec));
	vals[0] = as_never_run ? NULL : lr_checkpoint_encode(&fresh);
	vals[1] = history_with(rd.kv[R_HISTORY], &d, ck.runner[0] ? ck.runner : NULL);
	json_t *extra = json_pack("{s:I}", "task_rev", (json_int_t)rd.kv[R_TASK]->create_rev);
	vals[2] = lr_sched_record(spec, extra);
	json_decref(extra);
	vals[3] = lr_wants_of_spec(rd.kv[R_TASK]->value, rd.kv[R_TASK]->value_len, NULL);
	t = lr_txn_new();
	if ((vals[0] == NULL && !as_never_run) || vals[1] == NULL || vals[2] == NULL ||
	    t == NULL) {
		rc = lr_err_set(err, LR_ENOMEM, "retry %s: out of memory", id);
		goto out;
	}
	/* The task as read: done as read, no claim, the same incarnation, and
	 * no other retry (history) in between. */
	lr_txn_cmp(t, rd.key[R_DONE], 0, LR_CMP_MOD, LR_CMP_EQ, rd.kv[R_DONE]->mod_rev);
	lr_txn_cmp(t, rd.key[R_CLAIM], 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_txn_cmp(t, rd.key[R_TASK], 0, LR_CMP_CREATE, LR_CMP_EQ, rd.kv[R_TASK]->create_rev);
	lr_txn_cmp(t, rd.key[R_HISTORY], 0, LR_CMP_MOD, LR_CMP_EQ,
	           rd.kv[R_HISTORY] != NULL ? rd.kv[R_HISTORY]->mod_rev : 0);
	lr_txn_delete(t, LR_THEN, rd.key[R_DONE], 0);
	if (as_never_run)
		lr_txn_delete(t, LR_THEN, rd.key[R_CKPT], 0);
	else
		lr_txn_put(t, LR_THEN, rd.key[R_CKPT], vals[0], strlen(vals[0]), 0);
	lr_txn_put(t, LR_THEN, rd.key[R_HISTORY], vals[1], strlen(vals[1]), 0);
	char key[LR_LOCK_KEY_SIZE];
	lr_key(c, LR_K_QUEUE, id, key);
	lr_txn_put(t, LR_THEN, key, vals[2], strlen(vals[2]), 0);
	lr_key(c, LR_K_CANCEL, id, key);
	lr_txn_delete(t, LR_THEN, key, 0);
	if (vals[3] != NULL) {
		char holder[LR_HOLDER_SIZE];
		lr_holder_of_task(id, holder);
		lr_wants_key(c, holder, key);
		lr_txn_put(t, LR_THEN, key, vals[3], strlen(vals[3]), 0);
	}
	/* Sent again after a lost reply: once applied, its compares fail (the
	 * result is gone), and the history it wrote, read back here, tells
	 * that this outcome was retried. */
	lr_txn_get(t, LR_ELSE, rd.key[R_HISTORY], 0);
	lr_txn_result r;
	rc = lr_etcd_txn(lr_client_etcd(c), t, LR_CALL_RETRY, &r, err);
	if (rc == LR_EUNAVAILABLE || rc == LR_ETIMEDOUT) {
		/* Sent again until the deadline; any of those may have applied. */
		rc = lr_err_wrap(err, LR_EAMBIGUOUS, "retry %s: outcome unknown, see leaserun "
		                 "status %s", id, id);
		goto out;
	}
	if (rc != 0) {
		lr_err_wrap(err, rc, "retry %s", id);
		goto out;
	}
	const lr_kv *h = !r.succeeded && r.n_ops == 1 && r.ops[0].n == 1 ? &r.ops[0].kvs[0] : NULL;
	bool applied = r.succeeded || (h != NULL && h->value_len == strlen(vals[1]) &&
	                               memcmp(h->value, vals[1], h->value_len) == 0);
	if (!applied)
		rc = lr_err_set(err, LR_ECONFLICT, "retry %s: the task changed meanwhile (retried, "
		                "purged or submitted again): nothing was done", id);
	else
		*at = (lr_retry_at){ .step = step, .steps = (int64_t)lr_spec_steps(spec),
			             .step_name = strdup(lr_spec_step_name(spec, (size_t)step)) };
	lr_txn_result_free(&r);
out:
	for (int i = 0; i < 4; i++)
		free(vals[i]);
	lr_txn_free(t);
	lr_checkpoint_rec_clear(&ck);
	lr_done_rec_clear(&d);
	json_decref(spec);
	lr_txn_result_free(&rd.r);
	return rc;
}

void lr_retry_at_clear(lr_retry_at *at)
{
	free(at->step_name);
	at->step_name = NULL;
}

int lr_retry(lr_client *c, const char *id, const lr_retry_opts *o, int64_t *step,
             lr_err *err)
{
	/* Its own check, so that the message names the function called. */
	if (LR_NULL_ARG(err, c) || LR_NULL_ARG(err, id))
		return LR_EINVAL;
	lr_retry_at at;
	int rc = lr_retry_to(c, id, o, &at, err);
	if (rc == 0 && step != NULL)
		*step = at.step;
	lr_retry_at_clear(&at);
	return rc;
}
