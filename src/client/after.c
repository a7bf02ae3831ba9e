/* after.c - whether the tasks a task comes after have all succeeded (their
 * done records, and for those not done whether they exist, read at one
 * revision), and what pending tasks wait for, for status. Runs on the
 * caller's thread (a runner's worker, or status). */
#include "client/after.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "client/walk.h"
#include "etcd/kv.h"
#include "records/record.h"
#include "records/turn.h"

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

/* ---- what pending tasks wait for, for status -------------------------------- */

/* "after a, b" for the tasks of tu not ended yet (one read), NULL when
 * none is left to wait for. */
static char *deps_text(lr_client *c, const lr_turn *tu)
{
	char key[LR_KEY_SIZE];
	lr_txn_result r = { 0 };
	lr_txn *t = lr_txn_new();
	if (t == NULL)
		return NULL;
	for (size_t i = 0; i < tu->n_after; i++) {
		lr_key(c, LR_K_DONE, tu->after[i], key);
		lr_txn_get(t, LR_THEN, key, LR_RANGE_KEYS_ONLY);
	}
	char *text = NULL;
	size_t len = 0;
	FILE *f = NULL;
	if (lr_etcd_txn(lr_client_etcd(c), t, LR_CALL_RETRY, &r, NULL) == 0 &&
	    r.n_ops == tu->n_after && (f = open_memstream(&text, &len)) != NULL) {
		int shown = 0;
		for (size_t i = 0; i < tu->n_after; i++)
			if (r.ops[i].n == 0)
				fprintf(f, "%s%s", shown++ ? ", " : "after ", tu->after[i]);
		fclose(f);
		if (shown == 0) {
			free(text);
			text = NULL;
		}
	}
	lr_txn_result_free(&r);
	lr_txn_free(t);
	return text;
}

/* What the turn value of a pending task holds it for, or NULL (also when
 * the read of its dependencies fails: status shows less, not nothing). */
static char *turn_text(lr_client *c, const lr_kv *kv)
{
	lr_turn tu;
	char *text = NULL;
	if (lr_turn_decode(kv->value, kv->value_len, &tu, NULL) != 0)
		return NULL;
	if (tu.not_before_ms > lr_wall_ms()) {
		char when[LR_TIME_BUF];
		lr_rfc3339_format(tu.not_before_ms, when);
		if (asprintf(&text, "not before %s", when) < 0)
			text = NULL;
	} else if (tu.n_after > 0) {
		text = deps_text(c, &tu);
	}
	lr_turn_clear(&tu);
	return text;
}

/* The turn of one pending task into its `waiting`. */
static int fill_waiting(lr_client *c, lr_task_status *s, const lr_kv *turn)
{
	char *text = turn_text(c, turn);
	if (text != NULL) {
		free(s->waiting);
		s->waiting = text;
	}
	return 0;
}

/* Pending tasks by id, for a walk of turn/. */
struct by_id {
	lr_client *c;
	lr_task_status **pending; /* sorted by id */
	size_t n;
};

static int cmp_status_id(const void *a, const void *b)
{
	return strcmp((*(lr_task_status *const *)a)->id, (*(lr_task_status *const *)b)->id);
}

static int cmp_key_status(const void *key, const void *elem)
{
	return strcmp(key, (*(lr_task_status *const *)elem)->id);
}

static int walked_turn(void *user, const lr_kv *kv, const char *id, lr_err *err)
{
	struct by_id *b = user;
	lr_task_status **s = bsearch(id, b->pending, b->n, sizeof(*b->pending), cmp_key_status);
	return s != NULL ? fill_waiting(b->c, *s, kv) : 0;
}

/* Above this many pending tasks, one walk of turn/ beats a read each. */
#define WAITS_POINT_READS 16

int lr_turn_waits(lr_client *c, lr_task_status *list, size_t n, lr_err *err)
{
	char key[LR_KEY_SIZE];
	struct by_id b = { .c = c };
	int rc = 0;
	for (size_t i = 0; i < n; i++)
		b.n += list[i].state == LR_TASK_PENDING;
	if (b.n > WAITS_POINT_READS) {
		b.pending = malloc(b.n * sizeof(*b.pending));
		if (b.pending == NULL)
			return lr_err_set(err, LR_ENOMEM, "out of memory");
		b.n = 0;
		for (size_t i = 0; i < n; i++)
			if (list[i].state == LR_TASK_PENDING)
				b.pending[b.n++] = &list[i];
		qsort(b.pending, b.n, sizeof(*b.pending), cmp_status_id);
		lr_walk_opts o = { .kind = LR_K_TURN, .page = 1000 };
		rc = lr_walk(c, &o, walked_turn, &b, err);
		free(b.pending);
		return rc;
	}
	for (size_t i = 0; rc == 0 && i < n; i++) {
		lr_task_status *s = &list[i];
		if (s->state != LR_TASK_PENDING)
			continue;
		lr_range_result r = { 0 };
		lr_key(c, LR_K_TURN, s->id, key);
		rc = lr_kv_get(lr_client_etcd(c), key, &r, err);
		if (rc == 0 && r.n > 0)
			rc = fill_waiting(c, s, &r.kvs[0]);
		lr_range_result_free(&r);
	}
	return rc != 0 ? lr_err_wrap(err, rc, "what pending tasks wait for") : 0;
}
