/* sched_waits.c - what pending tasks wait for besides locks: their start
 * time, and the tasks of their "after" that have not succeeded yet, for
 * `leaserun status` (through lr_task_waits). Runs on the caller's thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "client/client.h"
#include "client/sched_waits.h"
#include "client/walk.h"
#include "etcd/kv.h"
#include "records/record.h"
#include "records/schedule.h"

static int page_queue(void *user, const lr_kv *kv, const char *id, lr_err *err)
{
	(void)err;
	json_t *rec = json_loadb(kv->value, kv->value_len, 0, NULL);
	if (json_is_object(rec) && id != NULL)
		json_object_set_new(user, id, rec);
	else
		json_decref(rec);
	return 0;
}

/* Dependencies read in one txn: three reads each, within etcd's default
 * --max-txn-ops of 128. An etcd run with a lower one gets fewer. */
#define AFTER_PER_TXN 32

/* Why dependency `id` still holds its dependent (its tasks/ key created
 * at own_rev) back, from its done/, claims/ and tasks/ keys as read; ""
 * when it succeeded. As the claim judges it (claim_sched.c). */
static void why_waiting(const char *id, int64_t own_rev, const lr_op_result *done,
                        const lr_op_result *claim, const lr_op_result *task, char *why,
                        size_t size)
{
	if (task->n == 1 && lr_sched_dep_resubmitted(task->kvs[0].create_rev, own_rev)) {
		snprintf(why, size, "after %s, which no longer exists (submitted again after "
		         "this task): it will end failed", id);
		return;
	}
	if (done->n == 0 && task->n == 0) {
		/* Purged: the claim will fail its dependents. */
		snprintf(why, size, "after %s, which no longer exists: it will end failed", id);
		return;
	}
	if (done->n == 0) {
		snprintf(why, size, "after %s, which is %s", id,
		         claim->n == 1 ? "running" : "pending");
		return;
	}
	lr_done_rec d;
	const lr_kv *kv = &done->kvs[0];
	if (lr_done_decode(kv->value, kv->value_len, &d, NULL) == 0) {
		if (strcmp(d.status, "succeeded") != 0)
			snprintf(why, size, "after %s, which ended %s: it will end failed", id,
			         d.status);
		lr_done_rec_clear(&d);
	}
}

/* Judge sc->after[from, from + n) in one txn (see first_unfinished). */
static int judge_after(lr_client *c, const lr_sched *sc, size_t from, size_t n, int64_t own_rev,
                       char *why, size_t size, lr_err *err)
{
	static const char *const kinds[] = { LR_K_DONE, LR_K_CLAIMS, LR_K_TASKS };
	lr_txn *t = lr_txn_new();
	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "out of memory");
	for (size_t i = from; i < from + n; i++)
		for (int k = 0; k < 3; k++) {
			char key[LR_KEY_SIZE];
			lr_key(c, kinds[k], sc->after[i], key);
			lr_txn_get(t, LR_THEN, key, k == 0 ? 0 : LR_RANGE_KEYS_ONLY);
		}
	lr_txn_result r;
	int rc = lr_etcd_txn(lr_client_etcd(c), t, LR_CALL_RETRY, &r, err);
	lr_txn_free(t);
	if (rc != 0)
		return rc;
	if (r.n_ops < 3 * n)
		rc = lr_err_set(err, LR_EINTERNAL, "txn reply has %zu results, expected %zu",
		                r.n_ops, 3 * n);
	for (size_t i = 0; rc == 0 && i < n && why[0] == '\0'; i++) {
		const lr_op_result *op = &r.ops[3 * i];
		why_waiting(sc->after[from + i], own_rev, &op[0], &op[1], &op[2], why, size);
	}
	lr_txn_result_free(&r);
	return rc;
}

/* The first task of sc's "after" that has not succeeded: "after t-3,
 * which is running" into why; own_rev: the dependent's tasks/ key's create
 * revision. *per_txn: dependencies read in one txn; halved (for the
 * later reads too) while etcd refuses that many ops (--max-txn-ops). */
static int first_unfinished(lr_client *c, const lr_sched *sc, int64_t own_rev, char *why,
                            size_t size, size_t *per_txn, lr_err *err)
{
	int rc = 0;
	for (size_t from = 0; rc == 0 && why[0] == '\0' && from < sc->n_after;) {
		size_t n = sc->n_after - from < *per_txn ? sc->n_after - from : *per_txn;
		rc = judge_after(c, sc, from, n, own_rev, why, size, err);
		if (rc != 0 && n > 1 && lr_etcd_too_many_ops(rc, err)) {
			*per_txn = n / 2;
			rc = 0;
			continue;
		}
		from += n;
	}
	return rc;
}

/* Above this many pending tasks, one walk of queue/ costs less than a
 * read each. queue/ keeps the records of finished tasks until they are
 * purged, so `status ID` must not walk it. */
#define POINT_READS 16

/* The queue records of the pending tasks of list, by id, into queue. */
static int read_queue(lr_client *c, const lr_task_status *list, size_t n, json_t *queue,
                      lr_err *err)
{
	size_t pending = 0;
	for (size_t i = 0; i < n; i++)
		pending += list[i].state == LR_TASK_PENDING;
	if (pending > POINT_READS) {
		lr_walk_opts o = { .kind = LR_K_QUEUE, .page = 500 };
		return lr_walk(c, &o, page_queue, queue, err);
	}
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		if (list[i].state != LR_TASK_PENDING)
			continue;
		char key[LR_KEY_SIZE];
		lr_range_result r = { 0 };
		lr_key(c, LR_K_QUEUE, list[i].id, key);
		rc = lr_kv_get(lr_client_etcd(c), key, &r, err);
		if (rc == 0 && r.n > 0)
			rc = page_queue(queue, &r.kvs[0], list[i].id, err);
		lr_range_result_free(&r);
	}
	return rc;
}

int lr_sched_waits(lr_client *c, lr_task_status *list, size_t n, lr_err *err)
{
	json_t *queue = json_object();
	size_t per_txn = AFTER_PER_TXN;
	int rc = queue != NULL ? read_queue(c, list, n, queue, err)
	                       : lr_err_set(err, LR_ENOMEM, "out of memory");
	for (size_t i = 0; rc == 0 && i < n; i++) {
		lr_task_status *s = &list[i];
		const json_t *rec = json_object_get(queue, s->id);
		lr_sched sc;
		if (s->state != LR_TASK_PENDING || rec == NULL || lr_sched_from_json(rec, &sc) != 0)
			continue;
		char why[600] = "";
		if (sc.not_before_ms > lr_wall_ms()) {
			char at[LR_TIME_BUF];
			lr_rfc3339_format(sc.not_before_ms, at);
			snprintf(why, sizeof(why), "not before %s", at);
		} else if (sc.n_after > 0) {
			rc = first_unfinished(c, &sc, s->create_revision, why, sizeof(why),
			                      &per_txn, err);
		}
		lr_sched_clear(&sc);
		if (why[0] != '\0' && (s->waiting = strdup(why)) == NULL)
			rc = lr_err_set(err, LR_ENOMEM, "out of memory");
	}
	json_decref(queue);
	return rc;
}
