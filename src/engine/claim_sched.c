/* claim_sched.c - at claim time, whether a task may start now: its
 * "not_before" by this host's clock, and every task of its "after"
 * finished, read from etcd in one read-only txn. Blocking; called by a
 * worker thread from the claim. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/claim_sched.h"
#include "etcd/kv.h"
#include "records/record.h"
#include "records/schedule.h"

/* What the reads of one dependency say: done, its done/ record or NULL;
 * task, its tasks/ key or NULL; own_rev, the create revision of the
 * dependent's tasks/ key. */
static enum lr_sched_verdict judge(const char *dep, const lr_kv *done, const lr_kv *task,
                                   int64_t own_rev, lr_sched_check *out)
{
	/* Another task of that id (lr_sched_dep_resubmitted): waiting for it
	 * could make a cycle (it may name the dependent). Its result cannot be
	 * undone: the end holds while done/<dep> is as read. */
	if (task != NULL && lr_sched_dep_resubmitted(task->create_rev, own_rev)) {
		snprintf(out->why, sizeof(out->why), "dependency %s no longer exists (submitted "
		         "again after this task)", dep);
		out->guard_rev = done != NULL ? done->mod_rev : 0;
		return LR_SCHED_END;
	}
	if (done == NULL) {
		if (task != NULL) {
			if (out->wait_for[0] == '\0')
				snprintf(out->wait_for, sizeof(out->wait_for), "%s", dep);
			return LR_SCHED_WAIT;
		}
		snprintf(out->why, sizeof(out->why), "dependency %s no longer exists", dep);
		out->guard_rev = 0; /* guarded by done/<dep> still absent */
		return LR_SCHED_END;
	}
	lr_done_rec d;
	if (lr_done_decode(done->value, done->value_len, &d, NULL) != 0) {
		snprintf(out->why, sizeof(out->why), "dependency %s has an unreadable result", dep);
		out->guard_rev = done->mod_rev;
		return LR_SCHED_END;
	}
	enum lr_sched_verdict v = LR_SCHED_GO;
	if (strcmp(d.status, "succeeded") != 0) {
		snprintf(out->why, sizeof(out->why), "dependency %s ended %s%s%.300s", dep, d.status,
		         d.error != NULL ? ": " : "", d.error != NULL ? d.error : "");
		out->guard_rev = done->mod_rev;
		v = LR_SCHED_END;
	}
	lr_done_rec_clear(&d);
	return v;
}

int lr_claim_sched(lr_client *c, const json_t *spec, int64_t task_rev, lr_sched_check *out,
                   lr_err *err)
{
	memset(out, 0, sizeof(*out));
	out->verdict = LR_SCHED_GO;
	lr_sched sc;
	if (lr_sched_from_json(spec, &sc) != 0)
		return lr_err_set(err, LR_ENOMEM, "out of memory");
	int rc = 0;
	if (sc.not_before_ms > lr_wall_ms()) {
		out->verdict = LR_SCHED_WAIT;
		out->wait_until = sc.not_before_ms;
		goto done;
	}
	if (sc.n_after == 0)
		goto done;
	lr_txn *t = lr_txn_new();
	if (t == NULL) {
		rc = lr_err_set(err, LR_ENOMEM, "out of memory");
		goto done;
	}
	for (size_t i = 0; i < sc.n_after; i++) {
		char key[LR_KEY_SIZE];
		lr_key(c, LR_K_DONE, sc.after[i], key);
		lr_txn_get(t, LR_THEN, key, 0);
		lr_key(c, LR_K_TASKS, sc.after[i], key);
		lr_txn_get(t, LR_THEN, key, LR_RANGE_KEYS_ONLY);
	}
	lr_txn_result r;
	rc = lr_etcd_txn(lr_client_etcd(c), t, LR_CALL_RETRY, &r, err);
	lr_txn_free(t);
	if (rc != 0)
		goto done;
	for (size_t i = 0; i < sc.n_after && out->verdict != LR_SCHED_END; i++) {
		const lr_op_result *done = &r.ops[2 * i], *task = &r.ops[2 * i + 1];
		enum lr_sched_verdict v = judge(sc.after[i], done->n == 1 ? &done->kvs[0] : NULL,
		                                task->n == 1 ? &task->kvs[0] : NULL, task_rev, out);
		if (v == LR_SCHED_END)
			lr_key(c, LR_K_DONE, sc.after[i], out->guard_key);
		if (v != LR_SCHED_GO)
			out->verdict = v;
	}
	lr_txn_result_free(&r);
done:
	lr_sched_clear(&sc);
	return rc;
}
