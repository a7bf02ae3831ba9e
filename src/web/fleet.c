/* fleet.c - the fleet view's model: tasks by id and runners by name, each
 * record applied at most once (by mod revision), the state derived as
 * status does (done > claim > pending), and a short history per task.
 * Threads: any; every function here takes f->mu (see fleet.h). */
#include "web/fleet_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "client/task_records.h"
#include "records/record.h"
#include "records/spec.h"

static const char *const kind_dirs[FK_COUNT] = {
	[FK_TASK] = LR_K_TASKS,
	[FK_CLAIM] = LR_K_CLAIMS,
	[FK_CHECKPOINT] = LR_K_CHECKPOINTS,
	[FK_DONE] = LR_K_DONE,
	[FK_CANCEL] = LR_K_CANCEL,
};

/* Texts here are cut to fit (an error at FLEET_ERROR_MAX bytes, a name in
 * a history line), which may split a UTF-8 sequence: every byte that does
 * not start or continue a whole sequence becomes '?', so that the text
 * stays valid for JSON. */
static void utf8_sanitize(char *s)
{
	unsigned char *p = (unsigned char *)s;

	while (*p != '\0') {
		int need = *p < 0x80 ? 0 : (*p & 0xE0) == 0xC0 ? 1
		         : (*p & 0xF0) == 0xE0 ? 2 : (*p & 0xF8) == 0xF0 ? 3 : -1;
		bool ok = need >= 0;
		/* A NUL is no continuation byte: this stops at the end. */
		for (int i = 1; ok && i <= need; i++)
			ok = (p[i] & 0xC0) == 0x80;
		if (!ok)
			*p++ = '?';
		else
			p += need + 1;
	}
}

int lr_fleet_new(lr_client *c, lr_fleet_changed_fn changed, void *user,
                 lr_fleet **out, lr_err *err)
{
	lr_fleet *f = calloc(1, sizeof(*f));

	*out = NULL;
	if (f != NULL) {
		f->buckets = calloc(256, sizeof(*f->buckets));
		f->locks = lr_lock_table_new(c);
	}
	if (f == NULL || f->buckets == NULL || f->locks == NULL) {
		if (f != NULL) {
			free(f->buckets);
			lr_lock_table_free(f->locks);
		}
		free(f);
		return lr_err_set(err, LR_ENOMEM, "web: out of memory");
	}
	f->n_buckets = 256;
	f->client = c;
	f->changed = changed;
	f->user = user;
	pthread_mutex_init(&f->mu, NULL);
	*out = f;
	return 0;
}

/* ---- tasks by id ------------------------------------------------------- */

static size_t hash_id(const char *id)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */

	for (; *id != '\0'; id++)
		h = (h ^ (unsigned char)*id) * 1099511628211ULL;
	return (size_t)h;
}

struct fleet_task *fleet_task_find(lr_fleet *f, const char *id)
{
	struct fleet_task *t = f->buckets[hash_id(id) & (f->n_buckets - 1)];

	while (t != NULL && strcmp(t->id, id) != 0)
		t = t->hnext;
	return t;
}

static void grow_buckets(lr_fleet *f)
{
	size_t n = f->n_buckets * 2;
	struct fleet_task **nb = calloc(n, sizeof(*nb));

	if (nb == NULL)
		return; /* longer chains, still correct */
	for (size_t i = 0; i < f->n_buckets; i++) {
		for (struct fleet_task *t = f->buckets[i], *next; t != NULL; t = next) {
			next = t->hnext;
			size_t b = hash_id(t->id) & (n - 1);
			t->hnext = nb[b];
			nb[b] = t;
		}
	}
	free(f->buckets);
	f->buckets = nb;
	f->n_buckets = n;
}

static struct fleet_task *task_add(lr_fleet *f, const char *id)
{
	struct fleet_task *t = calloc(1, sizeof(*t));

	if (t == NULL || (t->id = strdup(id)) == NULL) {
		free(t);
		return NULL;
	}
	if (f->n_tasks >= f->n_buckets)
		grow_buckets(f);
	size_t b = hash_id(id) & (f->n_buckets - 1);
	t->hnext = f->buckets[b];
	f->buckets[b] = t;
	f->n_tasks++;
	return t;
}

static void free_step_names(struct fleet_task *t)
{
	for (int64_t i = 0; t->step_names != NULL && i < t->steps; i++)
		free(t->step_names[i]);
	free(t->step_names);
	t->step_names = NULL;
	free(t->spec_error);
	t->spec_error = NULL;
	t->steps = 0;
}

static void task_free(struct fleet_task *t)
{
	free_step_names(t);
	free(t->last_runner);
	free(t->holder);
	free(t->error);
	free(t->hist);
	free(t->id);
	free(t);
}

static void task_remove(lr_fleet *f, struct fleet_task *t)
{
	struct fleet_task **p = &f->buckets[hash_id(t->id) & (f->n_buckets - 1)];

	while (*p != t)
		p = &(*p)->hnext;
	*p = t->hnext;
	f->n_tasks--;
	task_free(t);
}

/* The page hears of t at the next publication. */
static void mark_dirty(lr_fleet *f, struct fleet_task *t)
{
	struct fleet_ids *d = &f->dirty;

	if (t->dirty)
		return;
	if (d->n == d->cap) {
		size_t cap = d->cap ? d->cap * 2 : 64;
		char **nv = realloc(d->v, cap * sizeof(*nv));
		if (nv == NULL)
			return;
		d->v = nv;
		d->cap = cap;
	}
	d->v[d->n] = strdup(t->id);
	if (d->v[d->n] != NULL) {
		d->n++;
		t->dirty = true;
	}
}

/* ---- history ----------------------------------------------------------- */

static void note(struct fleet_task *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void note(struct fleet_task *t, const char *fmt, ...)
{
	va_list ap;

	if (t->hist == NULL) {
		t->hist = calloc(FLEET_HISTORY, sizeof(*t->hist));
		if (t->hist == NULL)
			return;
	}
	int at = (t->hist_first + t->hist_n) % FLEET_HISTORY;
	if (t->hist_n == FLEET_HISTORY)
		t->hist_first = (t->hist_first + 1) % FLEET_HISTORY;
	else
		t->hist_n++;
	t->hist[at].at_ms = lr_wall_ms();
	va_start(ap, fmt);
	vsnprintf(t->hist[at].what, sizeof(t->hist[at].what), fmt, ap);
	va_end(ap);
	utf8_sanitize(t->hist[at].what);
}

/* "2/3 analyse": step i (0-based) of t, for people. */
static void step_label(const struct fleet_task *t, int64_t i, char *buf,
                       size_t size)
{
	if (t->step_names != NULL && i >= 0 && i < t->steps)
		snprintf(buf, size, "%lld/%lld %.60s", (long long)i + 1,
		         (long long)t->steps, t->step_names[i]);
	else
		snprintf(buf, size, "%lld", (long long)i + 1);
}

/* ---- applying records -------------------------------------------------- */

static char *dup_cut(const char *s, size_t max)
{
	char *d = s != NULL ? strndup(s, max) : NULL;

	if (d != NULL)
		utf8_sanitize(d);
	return d;
}

/* `created`: the task was just submitted (not read at start). */
static void apply_spec(struct fleet_task *t, const lr_kv *kv, bool created)
{
	json_t *spec = NULL;
	lr_err why = { 0 };

	free_step_names(t);
	t->create_rev = kv->create_rev;
	if (lr_spec_from_record(kv->value, kv->value_len, t->id, &spec, &why) != 0) {
		t->spec_error = dup_cut(why.msg, FLEET_ERROR_MAX);
	} else {
		size_t n = lr_spec_steps(spec);
		t->step_names = calloc(n ? n : 1, sizeof(*t->step_names));
		for (size_t i = 0; t->step_names != NULL && i < n; i++)
			t->step_names[i] = strdup(lr_spec_step_name(spec, i));
		t->steps = t->step_names != NULL ? (int64_t)n : 0;
		t->max_attempts = lr_spec_max_attempts(spec);
		json_decref(spec);
	}
	if (created)
		note(t, "submitted: %lld steps", (long long)t->steps);
}

static void apply_claim(struct fleet_task *t, const lr_kv *kv, bool deleted,
                        bool live)
{
	lr_claim_rec c;

	if (deleted) {
		if (live && t->holder != NULL)
			note(t, "claim of %.60s ended", t->holder);
		free(t->holder);
		t->holder = NULL;
		t->claimed_at[0] = '\0';
		return;
	}
	free(t->holder);
	if (lr_claim_decode(kv->value, kv->value_len, &c, NULL) == 0) {
		t->holder = strdup(c.runner);
		memcpy(t->claimed_at, c.claimed_at, sizeof(t->claimed_at));
	} else {
		t->holder = strdup("?"); /* claimed, by a record we cannot read */
		t->claimed_at[0] = '\0';
	}
	if (live)
		note(t, "claimed by %.60s", t->holder != NULL ? t->holder : "?");
}

static void note_progress(struct fleet_task *t, int64_t old_step,
                          int64_t old_attempt)
{
	char label[160];

	if (t->next_step > old_step) {
		step_label(t, t->next_step - 1, label, sizeof(label));
		note(t, "step %s committed by %.40s", label,
		     t->last_runner != NULL ? t->last_runner : "?");
	} else if (t->next_step == old_step && t->attempt > old_attempt) {
		step_label(t, t->next_step, label, sizeof(label));
		note(t, "step %s: attempt %lld", label, (long long)t->attempt);
	} else if (t->next_step == old_step && t->attempt < old_attempt) {
		note(t, "interrupted attempt given back");
	} else {
		note(t, "state checkpointed");
	}
}

static void apply_checkpoint(struct fleet_task *t, const lr_kv *kv,
                             bool deleted, bool live)
{
	lr_checkpoint_rec cp;
	int64_t old_step = t->next_step, old_attempt = t->attempt;

	if (deleted || lr_checkpoint_decode(kv->value, kv->value_len, &cp, NULL) != 0) {
		t->next_step = t->attempt = 0;
		free(t->last_runner);
		t->last_runner = NULL;
		t->cp_updated[0] = '\0';
		return;
	}
	t->next_step = cp.next_step;
	t->attempt = cp.attempt;
	free(t->last_runner);
	/* "": retried before any runner ran it. */
	t->last_runner = cp.runner[0] != '\0' ? strdup(cp.runner) : NULL;
	memcpy(t->cp_updated, cp.updated_at, sizeof(t->cp_updated));
	lr_checkpoint_rec_clear(&cp);
	if (live)
		note_progress(t, old_step, old_attempt);
}

static void apply_done(struct fleet_task *t, const lr_kv *kv, bool deleted,
                       bool live)
{
	lr_done_rec d;
	lr_err why = { 0 };

	free(t->error);
	t->error = NULL;
	t->finished_at[0] = '\0';
	if (deleted)
		return;
	/* A done record ends the task, readable or not (as status says). */
	t->final = LR_TASK_FAILED;
	if (lr_done_decode(kv->value, kv->value_len, &d, &why) == 0) {
		int st = lr_task_state_parse(d.status);
		if (st >= LR_TASK_SUCCEEDED)
			t->final = (lr_task_state)st;
		t->done_attempts = d.attempts;
		t->error = dup_cut(d.error, FLEET_ERROR_MAX);
		memcpy(t->finished_at, d.finished_at, sizeof(t->finished_at));
		lr_done_rec_clear(&d);
	} else {
		t->error = dup_cut(why.msg, FLEET_ERROR_MAX);
	}
	if (live)
		note(t, "%s%s%.80s", lr_task_state_name(t->final),
		     t->error != NULL ? ": " : "", t->error != NULL ? t->error : "");
}

/* Which record of which task a key is; NULL when it is none of them. */
static const char *task_key(lr_fleet *f, const char *key, enum fleet_kind *k)
{
	for (int i = 0; i < FK_COUNT; i++) {
		const char *id = lr_key_id(f->client, kind_dirs[i], key);
		if (id != NULL) {
			*k = (enum fleet_kind)i;
			return lr_id_valid(id) ? id : NULL;
		}
	}
	return NULL;
}

static void apply_task_record(lr_fleet *f, const char *id, enum fleet_kind k,
                              const lr_kv *kv, bool deleted, bool live)
{
	struct fleet_task *t = fleet_task_find(f, id);

	if (t == NULL && deleted)
		return;
	if (t == NULL && (t = task_add(f, id)) == NULL)
		return;
	if (t->rev[k] >= kv->mod_rev)
		return; /* seen already (a watch replaying the initial read) */
	bool had = t->has[k];
	t->rev[k] = kv->mod_rev;
	t->has[k] = !deleted;
	switch (k) {
	case FK_TASK:
		if (!deleted)
			apply_spec(t, kv, live && !had);
		break;
	case FK_CLAIM:
		apply_claim(t, kv, deleted, live);
		break;
	case FK_CHECKPOINT:
		apply_checkpoint(t, kv, deleted, live);
		break;
	case FK_DONE:
		apply_done(t, kv, deleted, live);
		break;
	case FK_CANCEL:
		if (live && !deleted)
			note(t, "cancel requested");
		break;
	case FK_COUNT:
		break;
	}
	mark_dirty(f, t);
	/* A purged task: its records go in one txn; the last one takes it. */
	bool any = false;
	for (int i = 0; i < FK_COUNT; i++)
		any = any || t->has[i];
	if (!any)
		task_remove(f, t);
}

/* ---- runners ----------------------------------------------------------- */

static struct fleet_runner *runner_find(lr_fleet *f, const char *name, size_t *at)
{
	size_t lo = 0, hi = f->n_runners;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(f->runners[mid].info.name, name);
		if (c == 0) {
			*at = mid;
			return &f->runners[mid];
		}
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	*at = lo;
	return NULL;
}

static void apply_runner(lr_fleet *f, const char *name, const lr_kv *kv,
                         bool deleted)
{
	size_t at;
	struct fleet_runner *r = runner_find(f, name, &at);

	if (r != NULL && r->rev >= kv->mod_rev)
		return;
	if (deleted) {
		if (r == NULL)
			return;
		memmove(r, r + 1, (f->n_runners - at - 1) * sizeof(*r));
		f->n_runners--;
		f->runners_dirty = true;
		return;
	}
	if (r == NULL) {
		if (f->n_runners == f->cap_runners) {
			size_t cap = f->cap_runners ? f->cap_runners * 2 : 16;
			struct fleet_runner *nr =
			    realloc(f->runners, cap * sizeof(*nr));
			if (nr == NULL)
				return;
			f->runners = nr;
			f->cap_runners = cap;
		}
		r = &f->runners[at];
		memmove(r + 1, r, (f->n_runners - at) * sizeof(*r));
		f->n_runners++;
	}
	lr_runner_info_from(kv, name, &r->info);
	r->rev = kv->mod_rev;
	f->runners_dirty = true;
}

/* ---- the view ------------------------------------------------------------ */

void lr_fleet_apply(lr_fleet *f, const lr_kv *kv, bool deleted, bool live)
{
	enum fleet_kind k;
	const char *id, *name;

	pthread_mutex_lock(&f->mu);
	if (kv->mod_rev > f->revision)
		f->revision = kv->mod_rev;
	if ((id = task_key(f, kv->key, &k)) != NULL)
		apply_task_record(f, id, k, kv, deleted, live);
	else if ((name = lr_key_id(f->client, LR_K_RUNNERS, kv->key)) != NULL &&
	         lr_id_valid(name))
		apply_runner(f, name, kv, deleted);
	else if (deleted ? lr_lock_table_delete(f->locks, kv->key, kv->mod_rev)
	                 : lr_lock_table_put(f->locks, kv))
		f->locks_dirty = true;
	pthread_mutex_unlock(&f->mu);
}

void lr_fleet_notify(lr_fleet *f)
{
	if (f->changed != NULL)
		f->changed(f->user);
}

static void clear_locked(lr_fleet *f)
{
	for (size_t i = 0; i < f->n_buckets; i++) {
		for (struct fleet_task *t = f->buckets[i], *next; t != NULL; t = next) {
			next = t->hnext;
			task_free(t);
		}
		f->buckets[i] = NULL;
	}
	f->n_tasks = 0;
	f->n_runners = 0;
	for (size_t i = 0; i < f->dirty.n; i++)
		free(f->dirty.v[i]);
	f->dirty.n = 0;
	f->runners_dirty = false;
	lr_lock_table_clear(f->locks);
	f->locks_dirty = true;
}

void lr_fleet_clear(lr_fleet *f)
{
	pthread_mutex_lock(&f->mu);
	clear_locked(f);
	pthread_mutex_unlock(&f->mu);
}

void lr_fleet_free(lr_fleet *f)
{
	if (f == NULL)
		return;
	lr_fleet_stop(f);
	clear_locked(f);
	free(f->dirty.v);
	free(f->buckets);
	free(f->runners);
	lr_lock_table_free(f->locks);
	pthread_mutex_destroy(&f->mu);
	free(f);
}
