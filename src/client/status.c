/* status.c - what a task looks like from outside: its state derived from the
 * records in etcd (done > claim > pending), one task or the whole list, and
 * the live runners. Runs on the caller's thread; no state of its own. */
#include "client/task_records.h"
#include "client/walk.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "etcd/lease.h"
#include "records/record.h"
#include "records/spec.h"

/* Keys per Range when walking a directory: small enough for one reply,
 * large enough that 100 000 tasks take a hundred calls. */
#define KEYS_PAGE 1000
#define RUNNERS_PAGE 200
/* Tasks whose records are read per txn: 5 gets each stays far below etcd's
 * default of 128 ops per txn, and a batch of large states (512 KiB per
 * checkpoint and per done record) stays well below the reply size limit.
 * An etcd run with a lower --max-txn-ops gets smaller batches. */
#define DETAIL_BATCH 8

/* ---- reading the records of a task ----------------------------------------- */

int lr_check_task_id(const char *what, const char *id, lr_err *err)
{
	if (id != NULL && lr_id_valid(id))
		return 0;
	if (id == NULL)
		return lr_err_set(err, LR_EINVAL, "%s: id must not be NULL", what);
	return lr_err_set(err, LR_EINVAL,
	                  "%s: invalid task id \"%.*s\": expected 1 to %d of "
	                  "A-Z a-z 0-9 . _ : -",
	                  what, 64, id != NULL ? id : "", LR_ID_SIZE - 1);
}

void lr_task_records_ops(const lr_client *c, lr_txn *t, enum lr_txn_branch b,
                         const char *id)
{
	static const char *const kinds[LR_TASK_RECORD_OPS] = {
		LR_K_TASKS, LR_K_CLAIMS, LR_K_CHECKPOINTS, LR_K_DONE,
	};
	char key[LR_KEY_SIZE];

	for (size_t i = 0; i < LR_TASK_RECORD_OPS; i++) {
		lr_key(c, kinds[i], id, key);
		lr_txn_get(t, b, key, 0);
	}
}

static const lr_kv *kv_of(const lr_op_result *op)
{
	return op->n > 0 ? &op->kvs[0] : NULL;
}

int lr_task_records_at(const lr_txn_result *r, size_t first,
                       lr_task_records *out, lr_err *err)
{
	if (r->n_ops < first + LR_TASK_RECORD_OPS)
		return lr_err_set(err, LR_EINTERNAL,
		                  "txn reply has %zu results, expected %zu",
		                  r->n_ops, first + LR_TASK_RECORD_OPS);
	for (size_t i = first; i < first + LR_TASK_RECORD_OPS; i++)
		if (r->ops[i].type != LR_OP_RANGE)
			return lr_err_set(err, LR_EINTERNAL,
			                  "txn reply: result %zu is not a range", i);
	out->task = kv_of(&r->ops[first]);
	out->claim = kv_of(&r->ops[first + 1]);
	out->checkpoint = kv_of(&r->ops[first + 2]);
	out->done = kv_of(&r->ops[first + 3]);
	return 0;
}

int lr_task_records_read(lr_client *c, const char *id, lr_txn_result *r,
                         lr_task_records *out, lr_err *err)
{
	lr_txn *t = lr_txn_new();
	int rc;

	memset(r, 0, sizeof(*r));
	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "read task %s: out of memory", id);
	/* A txn without compares: four reads at one revision, so the state
	 * never mixes a claim with a done record of another moment. */
	lr_task_records_ops(c, t, LR_THEN, id);
	rc = lr_etcd_txn(lr_client_etcd(c), t, LR_CALL_RETRY, r, err);
	lr_txn_free(t);
	if (rc != 0)
		return lr_err_wrap(err, rc, "read task %s", id);
	rc = lr_task_records_at(r, 0, out, err);
	if (rc != 0)
		lr_txn_result_free(r);
	return rc;
}

/* ---- deriving the status ------------------------------------------------- */

void lr_task_status_clear(lr_task_status *s)
{
	if (s == NULL)
		return;
	free(s->step_name);
	free(s->runner);
	free(s->error);
	free(s->updated_at);
	free(s->waiting);
	free(s->history);
	free(s->cancel_requested_at);
	memset(s, 0, sizeof(*s));
}

/* Add a reason to s->error ("; " between reasons); `first` puts it ahead
 * of the others (the task's own error before notes about records). */
static int add_error(lr_task_status *s, const char *text, int first)
{
	const char *old = s->error != NULL ? s->error : "";
	const char *sep = s->error != NULL ? "; " : "";
	char *e = NULL;
	int n = first ? asprintf(&e, "%s%s%s", text, sep, old)
	              : asprintf(&e, "%s%s%s", old, sep, text);

	if (n < 0)
		return LR_ENOMEM;
	free(s->error);
	s->error = e;
	return 0;
}

static int set_string(char **field, const char *value)
{
	char *copy = strdup(value);

	if (copy == NULL)
		return LR_ENOMEM;
	free(*field);
	*field = copy;
	return 0;
}

/* Keep the later of the times seen as updated_at; times that do not parse
 * (written by another clock or tool) are not shown rather than guessed. */
static int consider_time(lr_task_status *s, int64_t *best_ms, const char *t)
{
	int64_t ms;

	if (t == NULL || lr_rfc3339_parse(t, &ms) != 0)
		return 0;
	if (s->updated_at != NULL && ms <= *best_ms)
		return 0;
	*best_ms = ms;
	return set_string(&s->updated_at, t);
}

static int note_unreadable(lr_task_status *s, const lr_err *why)
{
	char text[sizeof(why->msg) + 16];

	snprintf(text, sizeof(text), "unreadable %s", why->msg);
	return add_error(s, text, 0);
}

/* The spec's fields; *spec NULL and its reason in *why when it does not
 * validate (noted by note_spec once the done record is known). */
static void from_spec(const char *id, const lr_kv *task, lr_task_status *s,
                      json_t **spec, lr_err *why)
{
	if (lr_spec_from_record(task->value, task->value_len, id, spec,
	                        why) != 0) {
		*spec = NULL;
		return;
	}
	s->steps = (int64_t)lr_spec_steps(*spec);
	s->max_attempts = lr_spec_max_attempts(*spec);
}

/* The task's stored error says why already (a runner ended it "invalid
 * spec: ...", "unreadable checkpoint: ..."). */
static bool said(const lr_task_status *s, const lr_err *why)
{
	return s->error != NULL && strstr(s->error, why->msg) != NULL;
}

/* A checkpoint that did not read (why says something), unless said. */
static int note_checkpoint(lr_task_status *s, const lr_err *why)
{
	if (why->msg[0] == '\0' || said(s, why))
		return 0;
	return note_unreadable(s, why);
}

/* A spec that did not validate (spec NULL), unless said. */
static int note_spec(lr_task_status *s, const json_t *spec, lr_err *why)
{
	if (spec != NULL || said(s, why))
		return 0;
	lr_err_wrap(why, why->code, "spec");
	return note_unreadable(s, why);
}

/* An unreadable checkpoint leaves its reason in *why, noted once the done
 * record is known. */
static int from_checkpoint(const lr_kv *kv, lr_task_status *s, int64_t *best, lr_err *why)
{
	lr_checkpoint_rec cp;
	int rc;

	if (kv == NULL)
		return 0;
	if (lr_checkpoint_decode(kv->value, kv->value_len, &cp, why) != 0)
		return 0;
	s->next_step = cp.next_step;
	s->attempt = cp.attempt;
	/* "": retried before any runner ran it; nobody to show. */
	rc = cp.runner[0] != '\0' ? set_string(&s->runner, cp.runner) : 0;
	if (rc == 0)
		rc = consider_time(s, best, cp.updated_at);
	lr_checkpoint_rec_clear(&cp);
	return rc;
}

static int from_claim(const lr_kv *kv, lr_task_status *s, int64_t *best)
{
	lr_claim_rec cl;
	lr_err why = { 0 };
	int rc;

	if (kv == NULL)
		return 0;
	s->state = LR_TASK_RUNNING;
	if (lr_claim_decode(kv->value, kv->value_len, &cl, &why) != 0) {
		/* The last runner of the checkpoint is not the holder. */
		free(s->runner);
		s->runner = NULL;
		return note_unreadable(s, &why);
	}
	rc = set_string(&s->runner, cl.runner);
	if (rc == 0)
		rc = consider_time(s, best, cl.claimed_at);
	return rc;
}

static lr_task_state state_of_status(const char *status)
{
	int st = lr_task_state_parse(status);

	return st >= LR_TASK_SUCCEEDED ? (lr_task_state)st : LR_TASK_FAILED;
}

lr_task_state lr_done_state(const lr_kv *done)
{
	lr_done_rec d;

	if (lr_done_decode(done->value, done->value_len, &d, NULL) != 0)
		return LR_TASK_FAILED;
	lr_task_state st = state_of_status(d.status);
	lr_done_rec_clear(&d);
	return st;
}

static int from_done(const lr_kv *kv, lr_task_status *s, int64_t *best)
{
	lr_done_rec d;
	lr_err why = { 0 };
	int rc = 0;

	if (kv == NULL)
		return 0;
	if (lr_done_decode(kv->value, kv->value_len, &d, &why) != 0) {
		/* A done record ends the task for every runner, readable or
		 * not; failed is the honest name for an end we cannot read. */
		s->state = LR_TASK_FAILED;
		return note_unreadable(s, &why);
	}
	s->state = state_of_status(d.status);
	s->attempt = d.attempts;
	if (s->state == LR_TASK_SUCCEEDED)
		s->next_step = s->steps;
	if (d.error != NULL)
		rc = add_error(s, d.error, 1);
	/* The end is the last change, whatever the clocks of the records
	 * before it said. */
	free(s->updated_at);
	s->updated_at = NULL;
	if (rc == 0)
		rc = consider_time(s, best, d.finished_at);
	lr_done_rec_clear(&d);
	return rc;
}

/* A cancel request (cancel/<id>) outlives the claim it was made under:
 * after its holder died, the task is pending with it until a runner
 * claims it (and ends it cancelled) or cancel is asked again. Over once
 * the task has ended. */
static int from_cancel(const lr_kv *kv, lr_task_status *s)
{
	lr_cancel_rec rec;

	if (kv == NULL || s->state >= LR_TASK_SUCCEEDED)
		return 0;
	if (lr_cancel_decode(kv->value, kv->value_len, &rec, NULL) != 0)
		rec.requested_at[0] = '\0'; /* asked all the same */
	return set_string(&s->cancel_requested_at, rec.requested_at);
}

static int step_name_of(const json_t *spec, lr_task_status *s)
{
	if (spec == NULL || s->state >= LR_TASK_SUCCEEDED ||
	    s->next_step >= s->steps)
		return 0;
	return set_string(&s->step_name,
	                  lr_spec_step_name(spec, (size_t)s->next_step));
}

/* The status of the records and of a cancel request (cancel NULL: none). */
static int status_from(const char *id, const lr_task_records *rec, const lr_kv *cancel,
                       lr_task_status *out, lr_err *err)
{
	json_t *spec = NULL;
	lr_err spec_why = { 0 }, ckpt_why = { 0 };
	int64_t best_ms = 0;
	int rc;

	memset(out, 0, sizeof(*out));
	snprintf(out->id, sizeof(out->id), "%s", id);
	out->state = LR_TASK_PENDING;
	out->create_revision = rec->task->create_rev;
	from_spec(id, rec->task, out, &spec, &spec_why);
	rc = from_checkpoint(rec->checkpoint, out, &best_ms, &ckpt_why);
	if (rc == 0)
		rc = from_claim(rec->claim, out, &best_ms);
	if (rc == 0)
		rc = from_done(rec->done, out, &best_ms);
	if (rc == 0)
		rc = note_checkpoint(out, &ckpt_why);
	if (rc == 0)
		rc = note_spec(out, spec, &spec_why);
	if (rc == 0)
		rc = step_name_of(spec, out);
	if (rc == 0)
		rc = from_cancel(cancel, out);
	json_decref(spec);
	if (rc != 0) {
		lr_task_status_clear(out);
		return lr_err_set(err, LR_ENOMEM, "status %s: out of memory", id);
	}
	return 0;
}

int lr_task_status_from(const char *id, const lr_task_records *rec,
                        lr_task_status *out, lr_err *err)
{
	return status_from(id, rec, NULL, out, err);
}

/* What status reads of a task, in one txn with the others: its records,
 * then its cancel request. */
#define STATUS_OPS (LR_TASK_RECORD_OPS + 1)

static void status_ops(const lr_client *c, lr_txn *t, const char *id)
{
	char key[LR_KEY_SIZE];

	lr_task_records_ops(c, t, LR_THEN, id);
	lr_key(c, LR_K_CANCEL, id, key);
	lr_txn_get(t, LR_THEN, key, 0);
}

/* The status of the task whose STATUS_OPS start at op `first` of r; a
 * task purged since its key was listed leaves out->id empty. */
static int status_at(const lr_txn_result *r, size_t first, const char *id,
                     lr_task_status *out, lr_err *err)
{
	lr_task_records rec;
	int rc = lr_task_records_at(r, first, &rec, err);

	size_t at = first + LR_TASK_RECORD_OPS; /* the cancel request */
	memset(out, 0, sizeof(*out));
	if (rc == 0 && (r->n_ops <= at || r->ops[at].type != LR_OP_RANGE))
		rc = lr_err_set(err, LR_EINTERNAL, "txn reply: no range result %zu of %zu", at,
		                r->n_ops);
	if (rc != 0 || rec.task == NULL)
		return rc;
	return status_from(id, &rec, kv_of(&r->ops[at]), out, err);
}

int lr_task_get(lr_client *c, const char *id, lr_task_status *out, lr_err *err)
{
	lr_txn_result r;
	int rc;

	if (LR_NULL_ARG(err, c) || LR_NULL_ARG(err, out))
		return LR_EINVAL;
	memset(out, 0, sizeof(*out));
	rc = lr_check_task_id("status", id, err);
	if (rc != 0)
		return rc;
	lr_txn *t = lr_txn_new();
	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "read task %s: out of memory", id);
	/* A txn without compares: reads at one revision, so the state never
	 * mixes a claim with a done record of another moment. */
	status_ops(c, t, id);
	rc = lr_etcd_txn(lr_client_etcd(c), t, LR_CALL_RETRY, &r, err);
	lr_txn_free(t);
	if (rc != 0)
		return lr_err_wrap(err, rc, "read task %s", id);
	rc = status_at(&r, 0, id, out, err);
	if (rc == 0 && out->id[0] == '\0')
		rc = lr_err_set(err, LR_ENOTFOUND, "no such task %s", id);
	lr_txn_result_free(&r);
	/* Earlier outcomes of a retried task. */
	char key[LR_KEY_SIZE];
	lr_range_result h;
	lr_key(c, LR_K_HISTORY, id, key);
	if (rc == 0 && (rc = lr_kv_get(lr_client_etcd(c), key, &h, err)) == 0) {
		if (h.n == 1)
			out->history = lr_kv_value_dup(&h.kvs[0]);
		lr_range_result_free(&h);
	}
	if (rc != 0)
		lr_task_status_clear(out);
	return rc;
}

/* ---- the task list ------------------------------------------------------- */

struct task_ref {
	char *id;
	int64_t create_rev;
};

/* Ids of a directory, in key order (which is strcmp order, the prefix
 * being common), for membership tests by bsearch. */
struct id_set {
	char **ids;
	size_t n, cap;
};

struct task_refs {
	struct task_ref *v;
	size_t n, cap;
};

static int grow(void **arr, size_t elem, size_t n, size_t *cap)
{
	if (n < *cap)
		return 0;
	size_t nc = *cap ? *cap * 2 : 64;
	void *na = realloc(*arr, nc * elem);
	if (na == NULL)
		return LR_ENOMEM;
	*arr = na;
	*cap = nc;
	return 0;
}

static int collect_id(void *user, const lr_kv *kv, const char *id, lr_err *err)
{
	struct id_set *s = user;

	if (id == NULL || !lr_id_valid(id))
		return 0; /* not a key leaserun writes */
	if (grow((void **)&s->ids, sizeof(*s->ids), s->n, &s->cap) != 0)
		return lr_err_set(err, LR_ENOMEM, "list tasks: out of memory");
	s->ids[s->n] = strdup(id);
	if (s->ids[s->n] == NULL)
		return lr_err_set(err, LR_ENOMEM, "list tasks: out of memory");
	s->n++;
	return 0;
}

static int collect_task(void *user, const lr_kv *kv, const char *id,
                        lr_err *err)
{
	struct task_refs *t = user;

	if (id == NULL || !lr_id_valid(id))
		return 0;
	if (grow((void **)&t->v, sizeof(*t->v), t->n, &t->cap) != 0)
		return lr_err_set(err, LR_ENOMEM, "list tasks: out of memory");
	t->v[t->n].id = strdup(id);
	if (t->v[t->n].id == NULL)
		return lr_err_set(err, LR_ENOMEM, "list tasks: out of memory");
	t->v[t->n++].create_rev = kv->create_rev;
	return 0;
}

static void id_set_free(struct id_set *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->ids[i]);
	free(s->ids);
}

static void task_refs_free(struct task_refs *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->v[i].id);
	free(t->v);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int id_set_has(const struct id_set *s, const char *id)
{
	return s->n > 0 &&
	       bsearch(&id, s->ids, s->n, sizeof(*s->ids), cmp_str) != NULL;
}

/* By create revision; tasks created by one txn share it and go by id, so
 * that the order is the same every time. */
static int cmp_create(const void *a, const void *b)
{
	const struct task_ref *x = a, *y = b;

	if (x->create_rev != y->create_rev)
		return x->create_rev < y->create_rev ? -1 : 1;
	return strcmp(x->id, y->id);
}

/* What a listing is being built. */
struct listing {
	lr_client *c;
	int filter;
	size_t limit;
	struct id_set claimed, done; /* filled only when filtering */
	lr_task_status *out;
	size_t n, cap;
	size_t batch; /* tasks read per txn: DETAIL_BATCH, or what etcd took */
};

/* Could the task be in the filter's state, judging by keys alone? Saves
 * reading the records of tasks that cannot match; the records decide. */
static int may_match(const struct listing *l, const char *id)
{
	if (l->filter < 0)
		return 1;
	int done = id_set_has(&l->done, id);
	if (l->filter >= LR_TASK_SUCCEEDED)
		return done;
	int claimed = id_set_has(&l->claimed, id);
	if (l->filter == LR_TASK_RUNNING)
		return claimed && !done;
	return !claimed && !done;
}

static int keep_status(struct listing *l, const char *id, const lr_txn_result *r,
                       size_t first, lr_err *err)
{
	lr_task_status s;
	int rc = status_at(r, first, id, &s, err);

	if (rc != 0 || s.id[0] == '\0')
		return rc; /* an error, or purged since the keys were listed */
	if ((l->filter >= 0 && (int)s.state != l->filter) ||
	    (l->limit > 0 && l->n >= l->limit)) {
		lr_task_status_clear(&s);
		return 0;
	}
	if (grow((void **)&l->out, sizeof(*l->out), l->n, &l->cap) != 0) {
		lr_task_status_clear(&s);
		return lr_err_set(err, LR_ENOMEM, "list tasks: out of memory");
	}
	l->out[l->n++] = s;
	return 0;
}

/* Read the records of ids[0..n) in one txn and keep those that match. */
static int read_batch(struct listing *l, struct task_ref *const *ids,
                      size_t n, lr_err *err)
{
	lr_txn *t = lr_txn_new();
	lr_txn_result r;
	int rc;

	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "list tasks: out of memory");
	for (size_t i = 0; i < n; i++)
		status_ops(l->c, t, ids[i]->id);
	rc = lr_etcd_txn(lr_client_etcd(l->c), t, LR_CALL_RETRY, &r, err);
	lr_txn_free(t);
	if (rc != 0 && n > 1 && lr_etcd_too_many_ops(rc, err)) {
		/* etcd's --max-txn-ops is lower: in halves (each halved again
		 * if need be), and every later batch of the listing as small. */
		l->batch = n / 2;
		rc = read_batch(l, ids, n / 2, err);
		return rc != 0 ? rc : read_batch(l, ids + n / 2, n - n / 2, err);
	}
	if (rc != 0)
		return lr_err_wrap(err, rc, "list tasks");
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = keep_status(l, ids[i]->id, &r, i * STATUS_OPS, err);
	lr_txn_result_free(&r);
	return rc;
}

static int read_details(struct listing *l, const struct task_refs *tasks,
                        lr_err *err)
{
	struct task_ref *batch[DETAIL_BATCH];
	size_t nb = 0;
	int rc = 0;

	for (size_t i = 0; i < tasks->n && rc == 0; i++) {
		if (l->limit > 0 && l->n >= l->limit)
			break;
		if (!may_match(l, tasks->v[i].id))
			continue;
		batch[nb++] = &tasks->v[i];
		if (nb >= l->batch) {
			rc = read_batch(l, batch, nb, err);
			nb = 0;
		}
	}
	if (rc == 0 && nb > 0)
		rc = read_batch(l, batch, nb, err);
	return rc;
}

int lr_task_list(lr_client *c, int state_filter, size_t limit,
                 lr_task_status **out, size_t *n, lr_err *err)
{
	struct listing l = { .c = c, .filter = state_filter, .limit = limit,
	                     .batch = DETAIL_BATCH };
	struct task_refs tasks = { 0 };
	int rc;

	if (LR_NULL_ARG(err, c) || LR_NULL_ARG(err, out) || LR_NULL_ARG(err, n))
		return LR_EINVAL;
	*out = NULL;
	*n = 0;
	if (state_filter < -1 || state_filter > LR_TASK_CANCELLED)
		return lr_err_set(err, LR_EINVAL, "list tasks: unknown state %d",
		                  state_filter);
	/* Keys only: a listing must not pull every spec and state. */
	lr_walk_opts keys = { .kind = LR_K_TASKS, .flags = LR_RANGE_KEYS_ONLY,
	                      .page = KEYS_PAGE };
	rc = lr_walk(c, &keys, collect_task, &tasks, err);
	keys.kind = LR_K_DONE;
	if (rc == 0 && state_filter >= 0)
		rc = lr_walk(c, &keys, collect_id, &l.done, err);
	keys.kind = LR_K_CLAIMS;
	if (rc == 0 && state_filter >= 0 && state_filter < LR_TASK_SUCCEEDED)
		rc = lr_walk(c, &keys, collect_id, &l.claimed, err);
	if (rc != 0)
		goto cleanup;
	/* Oldest first, as runners take them. */
	if (tasks.n > 1)
		qsort(tasks.v, tasks.n, sizeof(*tasks.v), cmp_create);
	rc = read_details(&l, &tasks, err);
	if (rc != 0)
		goto cleanup;
	*out = l.out;
	*n = l.n;
	l.out = NULL;
	l.n = 0;
cleanup:
	lr_task_list_free(l.out, l.n);
	id_set_free(&l.claimed);
	id_set_free(&l.done);
	task_refs_free(&tasks);
	return rc;
}

void lr_task_list_free(lr_task_status *list, size_t n)
{
	for (size_t i = 0; i < n; i++)
		lr_task_status_clear(&list[i]);
	free(list);
}

/* ---- runners ------------------------------------------------------------- */

struct runner_list {
	lr_client *c;
	lr_runner_info *v;
	size_t n, cap;
};

void lr_runner_info_from(const lr_kv *kv, const char *name,
                         lr_runner_info *info)
{
	lr_runner_rec rec;

	memset(info, 0, sizeof(*info));
	snprintf(info->name, sizeof(info->name), "%s", name);
	info->lease = kv->lease;
	info->ttl_left = -1;
	/* A record someone else wrote still names a live key on a lease:
	 * show the name and the lease, leave the rest empty. */
	if (lr_runner_decode(kv->value, kv->value_len, &rec, NULL) != 0)
		return;
	snprintf(info->host, sizeof(info->host), "%s", rec.host);
	info->pid = rec.pid;
	info->concurrency = rec.concurrency;
	info->ttl = rec.ttl;
	snprintf(info->started_at, sizeof(info->started_at), "%s",
	         rec.started_at);
	snprintf(info->version, sizeof(info->version), "%s", rec.version);
}

static int collect_runner(void *user, const lr_kv *kv, const char *name,
                          lr_err *err)
{
	struct runner_list *l = user;
	lr_runner_info *info;
	int64_t granted = 0;

	if (name == NULL || !lr_id_valid(name))
		return 0; /* not a key leaserun writes */
	if (grow((void **)&l->v, sizeof(*l->v), l->n, &l->cap) != 0)
		return lr_err_set(err, LR_ENOMEM, "list runners: out of memory");
	info = &l->v[l->n];
	lr_runner_info_from(kv, name, info);
	if (info->lease != 0) {
		int rc = lr_lease_ttl(lr_client_etcd(l->c), info->lease,
		                      &info->ttl_left, &granted, err);
		if (rc != 0)
			return lr_err_wrap(err, rc, "runner %s", info->name);
		if (info->ttl == 0)
			info->ttl = granted;
	}
	l->n++;
	return 0;
}

int lr_runners_list(lr_client *c, lr_runner_info **out, size_t *n, lr_err *err)
{
	struct runner_list l = { .c = c };
	int rc;

	if (LR_NULL_ARG(err, c) || LR_NULL_ARG(err, out) || LR_NULL_ARG(err, n))
		return LR_EINVAL;
	*out = NULL;
	*n = 0;
	lr_walk_opts runners = { .kind = LR_K_RUNNERS, .page = RUNNERS_PAGE };
	rc = lr_walk(c, &runners, collect_runner, &l, err);
	if (rc != 0) {
		free(l.v);
		return rc;
	}
	*out = l.v;
	*n = l.n;
	return 0;
}
