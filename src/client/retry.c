/* retry.c - making a failed or cancelled task pending again, and the
 * history of its earlier outcomes (history/<id>) that status shows. Runs on
 * the caller's thread; no state of its own.
 *
 * One read, then one txn. The read: tasks/, claims/, checkpoints/, done/
 * and history/ of the task at one revision. The txn compares the done
 * record's and the checkpoint's mod revisions, the history's, the spec's
 * create revision and that nobody holds a claim; then it deletes done/<id>,
 * puts the checkpoint at the chosen step with attempt 0 (the claim counts
 * the first start), appends the outcome to the history, and puts turn/<id>
 * (and wants/ for a task with locks) again, so that runners, which dropped
 * the task when it ended, see it pending on their watch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "client/lock_keys.h"
#include "client/task_records.h"
#include "client/task_history.h"
#include "records/record.h"
#include "records/spec.h"
#include "records/turn.h"

/* Outcomes kept per task: enough to see a pattern, small in etcd. */
#define HISTORY_KEEP 10

/* ---- history/<id> --------------------------------------------------------- */

static char *dup_or_null(const json_t *v)
{
	return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

int lr_history_decode(const char *value, size_t len, lr_task_status *s)
{
	json_t *doc = NULL;
	if (lr_json_load_object(value, len, &doc, NULL) != 0)
		return LR_EINVAL;
	json_t *list = json_object_get(doc, "outcomes");
	size_t n = json_array_size(list);
	s->history = n > 0 ? calloc(n, sizeof(*s->history)) : NULL;
	for (size_t i = 0; s->history != NULL && i < n; i++) {
		json_t *o = json_array_get(list, i);
		lr_task_outcome *h = &s->history[s->n_history];
		int st = lr_task_state_parse(json_string_value(json_object_get(o, "status")));
		if (!json_is_object(o) || st < LR_TASK_SUCCEEDED)
			continue; /* not ours: skipped, not guessed */
		h->state = (lr_task_state)st;
		h->error = dup_or_null(json_object_get(o, "error"));
		h->runner = dup_or_null(json_object_get(o, "runner"));
		h->finished_at = dup_or_null(json_object_get(o, "finished_at"));
		h->step = json_integer_value(json_object_get(o, "step"));
		h->attempts = json_integer_value(json_object_get(o, "attempts"));
		s->n_history++;
	}
	json_decref(doc);
	return 0;
}

void lr_history_clear(lr_task_status *s)
{
	for (size_t i = 0; i < s->n_history; i++) {
		free(s->history[i].error);
		free(s->history[i].runner);
		free(s->history[i].finished_at);
	}
	free(s->history);
	s->history = NULL;
	s->n_history = 0;
}

/* The history with the outcome of done (and where it stopped) appended,
 * the oldest dropped beyond HISTORY_KEEP. */
static char *history_append(const lr_kv *old, const lr_done_rec *d, int64_t step,
                            const char *runner)
{
	json_t *doc = NULL, *list = NULL;
	if (old != NULL && lr_json_load_object(old->value, old->value_len, &doc, NULL) == 0)
		list = json_incref(json_object_get(doc, "outcomes"));
	json_decref(doc);
	if (!json_is_array(list)) {
		json_decref(list);
		list = json_array();
	}
	json_t *o = json_pack("{s:s, s:s?, s:s?, s:s, s:I, s:I}", "status", d->status,
	                      "error", d->error, "runner", runner[0] ? runner : NULL,
	                      "finished_at", d->finished_at, "step", (json_int_t)step,
	                      "attempts", (json_int_t)d->attempts);
	json_array_append_new(list, o);
	while (json_array_size(list) > HISTORY_KEEP)
		json_array_remove(list, 0);
	json_t *top = json_pack("{s:o}", "outcomes", list);
	char *text = top != NULL ? json_dumps(top, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	json_decref(top);
	return text;
}

/* ---- the retry ------------------------------------------------------------ */

struct seen {
	lr_txn_result r;
	lr_task_records rec;
	const lr_kv *history;
	json_t *spec;
	lr_checkpoint_rec ckpt;
	bool has_ckpt;
	lr_done_rec done;
};

static void seen_clear(struct seen *s)
{
	lr_txn_result_free(&s->r);
	json_decref(s->spec);
	lr_checkpoint_rec_clear(&s->ckpt);
	lr_done_rec_clear(&s->done);
}

static int read_task(lr_client *c, const char *id, struct seen *s, lr_err *err)
{
	char key[LR_KEY_SIZE];
	lr_txn *t = lr_txn_new();
	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "retry %s: out of memory", id);
	lr_task_records_ops(c, t, LR_THEN, id);
	lr_key(c, LR_K_HISTORY, id, key);
	lr_txn_get(t, LR_THEN, key, 0);
	int rc = lr_etcd_txn(lr_client_etcd(c), t, LR_CALL_RETRY, &s->r, err);
	lr_txn_free(t);
	if (rc != 0)
		return lr_err_wrap(err, rc, "retry %s", id);
	rc = lr_task_records_at(&s->r, 0, &s->rec, err);
	if (rc != 0)
		return rc;
	const lr_op_result *h = &s->r.ops[LR_TASK_RECORD_OPS];
	s->history = h->n > 0 ? &h->kvs[0] : NULL;
	return 0;
}

/* Whether the task may be retried, and its records decoded. */
static int check_state(const char *id, struct seen *s, lr_err *err)
{
	const lr_task_records *rec = &s->rec;
	if (rec->task == NULL)
		return lr_err_set(err, LR_ENOTFOUND, "retry %s: no such task", id);
	if (rec->done == NULL)
		return lr_err_set(err, LR_ESTATE,
		                  "retry %s: the task is %s, not failed or cancelled", id,
		                  rec->claim != NULL ? "running" : "pending");
	lr_err why = { 0 };
	if (lr_done_decode(rec->done->value, rec->done->value_len, &s->done, &why) != 0)
		snprintf(s->done.status, sizeof(s->done.status), "failed");
	if (strcmp(s->done.status, "succeeded") == 0)
		return lr_err_set(err, LR_ESTATE,
		                  "retry %s: the task succeeded; only a failed or cancelled "
		                  "task can be retried", id);
	if (lr_spec_from_record(rec->task->value, rec->task->value_len, id, &s->spec,
	                        &why) != 0)
		return lr_err_set(err, LR_EINVAL, "retry %s: invalid spec: %s", id, why.msg);
	if (rec->checkpoint != NULL) {
		if (lr_checkpoint_decode(rec->checkpoint->value, rec->checkpoint->value_len,
		                         &s->ckpt, &why) != 0)
			return lr_err_set(err, LR_EINVAL, "retry %s: unreadable checkpoint: %s",
			                  id, why.msg);
		s->has_ckpt = true;
	}
	return 0;
}

/* The step to start at: the one it stopped at, or the one asked for,
 * which may not lie beyond it (the steps between never ran). */
static int start_step(const char *id, const struct seen *s, const lr_retry_opts *o,
                      int64_t *step, lr_err *err)
{
	int64_t steps = (int64_t)lr_spec_steps(s->spec);
	int64_t stopped = s->has_ckpt ? s->ckpt.next_step : 0;
	if (stopped >= steps)
		stopped = steps - 1;
	*step = stopped;
	if (o->from_name != NULL) {
		int64_t i = 0;
		while (i < steps && strcmp(lr_spec_step_name(s->spec, (size_t)i), o->from_name) != 0)
			i++;
		if (i == steps)
			return lr_err_set(err, LR_EINVAL, "retry %s: --from-step: no step named \"%s\"",
			                  id, o->from_name);
		*step = i;
	} else if (o->from_step_set) {
		*step = o->from_step;
	}
	if (*step < 0 || *step >= steps)
		return lr_err_set(err, LR_EINVAL,
		                  "retry %s: --from-step %lld: the task has steps 0 to %lld", id,
		                  (long long)*step, (long long)steps - 1);
	if (*step > stopped)
		return lr_err_set(err, LR_EINVAL,
		                  "retry %s: --from-step %lld: the task stopped at step %lld; "
		                  "later steps never ran", id, (long long)*step,
		                  (long long)stopped);
	return 0;
}

static void cmp_rev(lr_txn *t, const lr_client *c, const char *kind, const char *id,
                    int target, const lr_kv *seen, int64_t rev)
{
	char key[LR_KEY_SIZE];
	lr_key(c, kind, id, key);
	lr_txn_cmp(t, key, 0, target, LR_CMP_EQ, seen != NULL ? rev : 0);
}

static void put_key(lr_txn *t, const lr_client *c, const char *kind, const char *id,
                    const char *value)
{
	char key[LR_KEY_SIZE];
	lr_key(c, kind, id, key);
	lr_txn_put(t, LR_THEN, key, value, strlen(value), 0);
}

/* vals[0..3]: checkpoint, history, turn, wants (owned by the caller). */
static lr_txn *retry_txn(const lr_client *c, const char *id, const struct seen *s,
                         int64_t step, bool reset, char *vals[4])
{
	const lr_task_records *rec = &s->rec;
	lr_checkpoint_rec cp = { .next_step = step, .attempt = 0 };
	cp.state = reset || !s->has_ckpt ? lr_spec_state(s->spec) : s->ckpt.state;
	if (s->has_ckpt) {
		snprintf(cp.runner, sizeof(cp.runner), "%s", s->ckpt.runner);
		cp.fence = s->ckpt.fence;
	}
	lr_rfc3339_now(cp.updated_at);
	lr_turn turn;
	if (lr_turn_of_spec(s->spec, &turn, NULL) != 0)
		memset(&turn, 0, sizeof(turn));
	vals[0] = lr_checkpoint_encode(&cp);
	vals[1] = history_append(s->history, &s->done, s->has_ckpt ? s->ckpt.next_step : 0,
	                         cp.runner);
	vals[2] = lr_turn_encode(&turn);
	vals[3] = lr_wants_of_spec(rec->task->value, rec->task->value_len);
	lr_turn_clear(&turn);
	lr_txn *t = lr_txn_new();
	if (t == NULL || vals[0] == NULL || vals[1] == NULL || vals[2] == NULL) {
		lr_txn_free(t);
		return NULL;
	}
	cmp_rev(t, c, LR_K_DONE, id, LR_CMP_MOD, rec->done, rec->done->mod_rev);
	cmp_rev(t, c, LR_K_CLAIMS, id, LR_CMP_VERSION, NULL, 0);
	cmp_rev(t, c, LR_K_CHECKPOINTS, id, LR_CMP_MOD, rec->checkpoint,
	        rec->checkpoint != NULL ? rec->checkpoint->mod_rev : 0);
	cmp_rev(t, c, LR_K_TASKS, id, LR_CMP_CREATE, rec->task, rec->task->create_rev);
	cmp_rev(t, c, LR_K_HISTORY, id, LR_CMP_MOD, s->history,
	        s->history != NULL ? s->history->mod_rev : 0);
	char key[LR_KEY_SIZE];
	lr_key(c, LR_K_DONE, id, key);
	lr_txn_delete(t, LR_THEN, key, 0);
	lr_key(c, LR_K_CANCEL, id, key);
	lr_txn_delete(t, LR_THEN, key, 0);
	if (s->has_ckpt) /* else none is needed: step 0, the spec's state */
		put_key(t, c, LR_K_CHECKPOINTS, id, vals[0]);
	put_key(t, c, LR_K_HISTORY, id, vals[1]);
	put_key(t, c, LR_K_TURN, id, vals[2]);
	if (vals[3] != NULL) {
		char holder[LR_HOLDER_SIZE], wkey[LR_LOCK_KEY_SIZE];
		lr_holder_of_task(id, holder);
		lr_wants_key(c, holder, wkey);
		lr_txn_put(t, LR_THEN, wkey, vals[3], strlen(vals[3]), 0);
	}
	return t;
}

int lr_retry(lr_client *c, const char *id, const lr_retry_opts *opts, lr_err *err)
{
	static const lr_retry_opts none;
	const lr_retry_opts *o = opts != NULL ? opts : &none;
	struct seen s = { 0 };
	char *vals[4] = { NULL };
	lr_txn *t = NULL;
	lr_txn_result res = { 0 };
	int64_t step = 0;
	int rc = lr_check_task_id("retry", id, err);
	if (rc == 0)
		rc = read_task(c, id, &s, err);
	if (rc == 0)
		rc = check_state(id, &s, err);
	if (rc == 0)
		rc = start_step(id, &s, o, &step, err);
	if (rc == 0 && (t = retry_txn(c, id, &s, step, o->reset_state != 0, vals)) == NULL)
		rc = lr_err_set(err, LR_ENOMEM, "retry %s: out of memory", id);
	if (rc == 0)
		rc = lr_etcd_txn(lr_client_etcd(c), t, LR_CALL_RETRY, &res, err);
	if (rc != 0 && t != NULL)
		lr_err_wrap(err, rc, "retry %s", id);
	/* A lost reply that applied reads back as a pending task: the caller
	 * sees a conflict and `status` shows the retry happened. */
	if (rc == 0 && !res.succeeded)
		rc = lr_err_set(err, LR_ECONFLICT,
		                "retry %s: the task changed meanwhile (purged, retried or "
		                "claimed); nothing was changed", id);
	lr_txn_result_free(&res);
	lr_txn_free(t);
	for (int i = 0; i < 4; i++)
		free(vals[i]);
	seen_clear(&s);
	return rc;
}
