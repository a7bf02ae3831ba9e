/* cancel.c - cancelling a task: a pending one ends cancelled at once, a
 * claimed one gets a cancel/<id> request that its holder acts on. Runs on
 * the caller's thread; no state of its own.
 *
 * The sequence, one round trip per step:
 *  1. Read tasks/, claims/, checkpoints/ and done/ of the task in one txn:
 *     the done record of a pending task needs the checkpoint's attempt and
 *     state, and the txn to send depends on whether the task is claimed.
 *  2. done/<id> exists: the task is over; report its status, write nothing.
 *     Not claimed: the "end" txn. Compares version(claims) == 0,
 *       version(done) == 0, mod_revision(checkpoints) and mod_revision(tasks)
 *       == what step 1 read (so the record is never built from a stale
 *       checkpoint); puts done/<id> = cancelled (and drops a stale cancel
 *       request).
 *     Claimed: the "request" txn. Compares version(done) == 0,
 *       version(claims) > 0 and mod_revision(tasks); puts cancel/<id>.
 *  Both txns read the four records again in their failure branch, so a lost
 *  race (a claim, a release, a completion in between) goes back to step 2
 *  with fresh records and no extra read. Both are safe to retry after a lost
 *  reply: a retried end txn finds its own done record (same bytes: the
 *  record carries its own timestamp); a retried request rewrites the same
 *  request, or finds the task done and reports that. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "client/lock_keys.h"
#include "client/task_records.h"
#include "records/record.h"
#include "records/spec.h"

/* Each round means the task changed between two of our txns; a task does
 * not change this often unless something is wrong. */
#define MAX_ROUNDS 32

static int64_t mod_of(const lr_kv *kv)
{
	return kv != NULL ? kv->mod_rev : 0;
}

/* The done record that ends a pending task: its progress so far, so that
 * `status` still shows where it stopped. Records that do not decode leave
 * attempts 0 and the state null rather than blocking the cancel. */
static char *cancelled_record(const char *id, const lr_task_records *rec)
{
	lr_checkpoint_rec cp = { .state = NULL };
	json_t *spec = NULL;
	lr_done_rec d = { .status = "cancelled",
		          .error = (char *)"cancelled while pending" };
	char *text;

	if (rec->checkpoint != NULL &&
	    lr_checkpoint_decode(rec->checkpoint->value,
	                         rec->checkpoint->value_len, &cp, NULL) == 0) {
		d.attempts = cp.attempt;
		d.state = cp.state;
	} else if (lr_spec_from_record(rec->task->value, rec->task->value_len,
	                               id, &spec, NULL) == 0) {
		d.state = lr_spec_state(spec);
	}
	lr_rfc3339_now(d.finished_at);
	text = lr_done_encode(&d);
	lr_checkpoint_rec_clear(&cp);
	json_decref(spec);
	return text;
}

static void cmp_mod(lr_txn *t, const lr_client *c, const char *kind,
                    const char *id, const lr_kv *seen)
{
	char key[LR_KEY_SIZE];

	lr_key(c, kind, id, key);
	lr_txn_cmp(t, key, 0, LR_CMP_MOD, LR_CMP_EQ, mod_of(seen));
}

static void cmp_version(lr_txn *t, const lr_client *c, const char *kind,
                        const char *id, enum lr_cmp_op op)
{
	char key[LR_KEY_SIZE];

	lr_key(c, kind, id, key);
	lr_txn_cmp(t, key, 0, LR_CMP_VERSION, op, 0);
}

static void delete_wants(const lr_client *c, lr_txn *t, const char *id)
{
	char holder[LR_HOLDER_SIZE], key[LR_LOCK_KEY_SIZE];
	lr_holder_of_task(id, holder);
	lr_wants_key(c, holder, key);
	lr_txn_delete(t, LR_THEN, key, 0);
}

/* The end txn (see the top of the file). *mine receives the done record it
 * tried to write. */
static lr_txn *end_txn(const lr_client *c, const char *id,
                       const lr_task_records *rec, char **mine)
{
	char key[LR_KEY_SIZE];
	lr_txn *t;

	*mine = cancelled_record(id, rec);
	t = lr_txn_new();
	if (*mine == NULL || t == NULL) {
		lr_txn_free(t);
		return NULL;
	}
	cmp_version(t, c, LR_K_CLAIMS, id, LR_CMP_EQ);
	cmp_version(t, c, LR_K_DONE, id, LR_CMP_EQ);
	cmp_mod(t, c, LR_K_CHECKPOINTS, id, rec->checkpoint);
	cmp_mod(t, c, LR_K_TASKS, id, rec->task);
	lr_key(c, LR_K_DONE, id, key);
	lr_txn_put(t, LR_THEN, key, *mine, strlen(*mine), 0);
	lr_key(c, LR_K_CANCEL, id, key);
	lr_txn_delete(t, LR_THEN, key, 0);
	delete_wants(c, t, id); /* it waits for no lock any more */
	lr_task_records_ops(c, t, LR_ELSE, id);
	return t;
}

/* The request txn (see the top of the file). */
static lr_txn *request_txn(const lr_client *c, const char *id,
                           const lr_task_records *rec)
{
	char key[LR_KEY_SIZE], now[LR_TIME_BUF];
	char *value;
	lr_txn *t;

	lr_rfc3339_now(now);
	value = lr_cancel_encode(now);
	t = lr_txn_new();
	if (value == NULL || t == NULL) {
		free(value);
		lr_txn_free(t);
		return NULL;
	}
	cmp_version(t, c, LR_K_DONE, id, LR_CMP_EQ);
	cmp_version(t, c, LR_K_CLAIMS, id, LR_CMP_GT);
	cmp_mod(t, c, LR_K_TASKS, id, rec->task);
	lr_key(c, LR_K_CANCEL, id, key);
	lr_txn_put(t, LR_THEN, key, value, strlen(value), 0);
	lr_task_records_ops(c, t, LR_ELSE, id);
	free(value);
	return t;
}

static bool is_mine(const lr_kv *done, const char *mine)
{
	return mine != NULL && done->value_len == strlen(mine) &&
	       memcmp(done->value, mine, done->value_len) == 0;
}

/* One round of step 2: send the txn the records call for. *r is replaced
 * by its reply; *finished tells that the cancel took effect. */
static int cancel_round(lr_client *c, const char *id, lr_txn_result *r,
                        lr_task_records *rec, char **mine, bool *finished,
                        lr_err *err)
{
	lr_txn *t;
	int rc;

	free(*mine);
	*mine = NULL;
	if (rec->claim != NULL)
		t = request_txn(c, id, rec);
	else
		t = end_txn(c, id, rec, mine);
	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "cancel %s: out of memory", id);
	lr_txn_result_free(r);
	rc = lr_etcd_txn(lr_client_etcd(c), t, LR_CALL_RETRY, r, err);
	lr_txn_free(t);
	if (rc != 0)
		return lr_err_wrap(err, rc, "cancel %s", id);
	*finished = r->succeeded;
	if (r->succeeded)
		return 0;
	return lr_task_records_at(r, 0, rec, err);
}

int lr_cancel(lr_client *c, const char *id, int *already, lr_err *err)
{
	lr_txn_result r = { 0 };
	lr_task_records rec;
	char *mine = NULL;
	bool finished = false;
	int rc;

	if (already != NULL)
		*already = -1;
	if (LR_NULL_ARG(err, c))
		return LR_EINVAL;
	rc = lr_check_task_id("cancel", id, err);
	if (rc != 0)
		return rc;
	rc = lr_task_records_read(c, id, &r, &rec, err);
	for (int round = 0; rc == 0 && !finished; round++) {
		if (rec.task == NULL) {
			rc = lr_err_set(err, LR_ENOTFOUND, "cancel %s: no such task",
			                id);
		} else if (rec.done != NULL) {
			if (!is_mine(rec.done, mine) && already != NULL)
				*already = (int)lr_done_state(rec.done);
			finished = true;
		} else if (round == MAX_ROUNDS) {
			rc = lr_err_set(err, LR_ECONFLICT,
			                "cancel %s: the task changed %d times "
			                "while cancelling; try again", id, round);
		} else {
			rc = cancel_round(c, id, &r, &rec, &mine, &finished, err);
		}
	}
	free(mine);
	lr_txn_result_free(&r);
	return rc;
}
