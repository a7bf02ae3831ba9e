/* after.c - whether the tasks a task comes after have all succeeded: their
 * done records (and, for those not done, whether they exist), read at one
 * revision. Runs on the caller's thread (a runner's worker). */
#include "client/after.h"

#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "etcd/kv.h"
#include "records/record.h"

/* The verdict for one dependency, from its done record and task key. */
static enum lr_after_verdict judge(const char *dep, const lr_kv *done, const lr_kv *task,
                                   char *why, size_t why_size)
{
	if (done == NULL && task != NULL)
		return LR_AFTER_WAIT;
	if (done == NULL) {
		snprintf(why, why_size, "after: task %s no longer exists (purged before it ran)",
		         dep);
		return LR_AFTER_FAILED;
	}
	lr_done_rec d;
	lr_err e = { 0 };
	if (lr_done_decode(done->value, done->value_len, &d, &e) != 0) {
		snprintf(why, why_size, "after: task %s ended with an unreadable record: %s", dep,
		         e.msg);
		return LR_AFTER_FAILED;
	}
	enum lr_after_verdict v = LR_AFTER_READY;
	if (strcmp(d.status, "succeeded") != 0) {
		snprintf(why, why_size, "after: task %s %s%s%.400s", dep, d.status,
		         d.error != NULL ? ": " : "", d.error != NULL ? d.error : "");
		v = LR_AFTER_FAILED;
	}
	lr_done_rec_clear(&d);
	return v;
}

int lr_after_check(lr_client *c, const char (*after)[LR_ID_SIZE], size_t n,
                   enum lr_after_verdict *verdict, char *why, size_t why_size,
                   lr_err *err)
{
	char key[LR_KEY_SIZE];
	lr_txn_result r = { 0 };
	lr_txn *t = lr_txn_new();
	*verdict = LR_AFTER_READY;
	why[0] = '\0';
	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "after: out of memory");
	for (size_t i = 0; i < n; i++) {
		lr_key(c, LR_K_DONE, after[i], key);
		lr_txn_get(t, LR_THEN, key, 0);
		lr_key(c, LR_K_TASKS, after[i], key);
		lr_txn_get(t, LR_THEN, key, LR_RANGE_KEYS_ONLY);
	}
	int rc = lr_etcd_txn(lr_client_etcd(c), t, LR_CALL_RETRY, &r, err);
	lr_txn_free(t);
	if (rc != 0)
		return lr_err_wrap(err, rc, "read the tasks it comes after");
	if (r.n_ops != 2 * n) {
		lr_txn_result_free(&r);
		return lr_err_set(err, LR_EINTERNAL, "after: txn reply has %zu results", r.n_ops);
	}
	/* A failure anywhere decides, even while others still run. */
	for (size_t i = 0; i < n && *verdict != LR_AFTER_FAILED; i++) {
		const lr_kv *done = r.ops[2 * i].n > 0 ? &r.ops[2 * i].kvs[0] : NULL;
		const lr_kv *task = r.ops[2 * i + 1].n > 0 ? &r.ops[2 * i + 1].kvs[0] : NULL;
		enum lr_after_verdict v = judge(after[i], done, task, why, why_size);
		if (v != LR_AFTER_READY)
			*verdict = v;
	}
	lr_txn_result_free(&r);
	return 0;
}
