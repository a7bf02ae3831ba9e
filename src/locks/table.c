/* table.c - holders and waiters of locks and slots, and the fair decision
 * whether a request can be taken (see table.h). Plain arrays searched in
 * order: holders are few (one per running task or run), and requests are
 * kept oldest first; the tasks waiters wait for are kept by id. A lock or
 * slot key on no lease is no holder's (every holder's hang on its lease):
 * put by hand, it would never go, so it is left out, and the claimer it
 * is in the way of deletes it (lr_locks_clear_strays). One owner thread. */
#include "locks/table.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/utf8.h"
#include "client/walk.h"
#include "records/schedule.h"

#define LR_LOCK_PAGE 500

struct hold {
	char *key;
	char path[LR_LOCK_PATH_SIZE];
	lr_lock_mode mode;
	char *holder;   /* in key */
	int64_t rev;    /* its create revision: when it was taken */
	char *value;
};

struct slot {
	char *key;
	char pool[LR_LOCK_SEG_MAX + 1];
	int index;
	int limit;      /* the limit its holder runs under; 0: not known */
	char *holder;
	int64_t rev;    /* its create revision: when it was taken */
	char *value;
};

struct want {
	char *key;
	char *holder;   /* in key */
	int64_t rev;
	int64_t not_before_ms; /* a task's start time (unix ms); 0: none */
	char (*after)[LR_ID_SIZE]; /* the tasks a task waits for */
	size_t n_after;
	lr_lockset *set;
	char **within;  /* NULL-terminated: the holders it is made within */
	char *value;
};

/* A task that a waiter waits for, as read from tasks/ and done/: it is
 * unfinished while it exists and has no result. Only the ones an owner
 * read (lr_lock_table_load_deps) are here: one not known holds back as
 * if finished. */
struct dep {
	char id[LR_ID_SIZE];
	bool task, done;
};

struct lr_lock_table {
	const lr_client *c;
	struct hold *holds;
	size_t n_holds, cap_holds;
	struct slot *slots;
	size_t n_slots, cap_slots;
	struct want *wants;     /* oldest first */
	size_t n_wants, cap_wants;
	struct dep *deps;       /* by id */
	size_t n_deps, cap_deps;
	const char *const *within; /* lr_lock_table_within (borrowed) */
};

lr_lock_table *lr_lock_table_new(const lr_client *c)
{
	lr_lock_table *t = calloc(1, sizeof(*t));
	if (t != NULL)
		t->c = c;
	return t;
}

static void drop_hold(struct hold *h)
{
	free(h->key);
	free(h->value);
}

static void drop_slot(struct slot *s)
{
	free(s->key);
	free(s->holder);
	free(s->value);
}

static void drop_want(struct want *w)
{
	free(w->key);
	free(w->set);
	free(w->after);
	for (char **h = w->within; h != NULL && *h != NULL; h++)
		free(*h);
	free(w->within);
	free(w->value);
}

void lr_lock_table_clear(lr_lock_table *t)
{
	for (size_t i = 0; i < t->n_holds; i++)
		drop_hold(&t->holds[i]);
	for (size_t i = 0; i < t->n_slots; i++)
		drop_slot(&t->slots[i]);
	for (size_t i = 0; i < t->n_wants; i++)
		drop_want(&t->wants[i]);
	t->n_holds = t->n_slots = t->n_wants = t->n_deps = 0;
}

static int load_one(void *user, const lr_kv *kv, const char *rest, lr_err *err)
{
	(void)rest;
	(void)err;
	lr_lock_table_put(user, kv);
	return 0;
}

int lr_lock_table_load(lr_lock_table *t, lr_client *c, int64_t *rev, atomic_int *stop,
                       lr_err *err)
{
	lr_lock_table_clear(t);
	static const char *const dirs[] = { LR_K_LOCKS, LR_K_SLOTS, LR_K_WANTS };
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		lr_walk_opts o = { .kind = dirs[i], .page = LR_LOCK_PAGE, .revision = rev,
		                   .stop = stop };
		rc = lr_walk(c, &o, load_one, t, err);
	}
	return rc;
}

void lr_lock_table_free(lr_lock_table *t)
{
	if (t == NULL)
		return;
	lr_lock_table_clear(t);
	free(t->holds);
	free(t->slots);
	free(t->wants);
	free(t->deps);
	free(t);
}

/* Room for one more element of size `size` in *arr. */
static bool grow(void **arr, size_t n, size_t *cap, size_t size)
{
	if (n < *cap)
		return true;
	size_t nc = *cap ? *cap * 2 : 8;
	void *na = realloc(*arr, nc * size);
	if (na == NULL)
		return false;
	*arr = na;
	*cap = nc;
	return true;
}

/* Remove element i of an array of n, keeping the order. */
static void remove_at(void *arr, size_t *n, size_t i, size_t size)
{
	char *a = arr;
	memmove(a + i * size, a + (i + 1) * size, (*n - i - 1) * size);
	(*n)--;
}

static char *value_of(const lr_kv *kv)
{
	return lr_kv_value_dup(kv);
}

static bool put_hold(lr_lock_table *t, const lr_kv *kv)
{
	struct hold h;
	memset(&h, 0, sizeof(h));
	const char *holder;
	if (!lr_lock_key_parse(t->c, kv->key, h.path, &h.mode, &holder))
		return false;
	if (kv->lease == 0)
		return lr_lock_table_delete(t, kv->key, kv->mod_rev); /* no holder (stray) */
	lr_lock_table_delete(t, kv->key, kv->mod_rev); /* a repeated PUT */
	if (!grow((void **)&t->holds, t->n_holds, &t->cap_holds, sizeof(h)))
		return false;
	h.key = strdup(kv->key);
	h.value = value_of(kv);
	if (h.key == NULL || h.value == NULL) {
		drop_hold(&h);
		return false;
	}
	h.holder = h.key + (holder - kv->key);
	h.rev = kv->create_rev;
	t->holds[t->n_holds++] = h;
	return true;
}

static bool put_slot(lr_lock_table *t, const lr_kv *kv)
{
	struct slot s;
	memset(&s, 0, sizeof(s));
	if (!lr_slot_key_parse(t->c, kv->key, s.pool, &s.index))
		return false;
	if (kv->lease == 0)
		return lr_lock_table_delete(t, kv->key, kv->mod_rev); /* no holder (stray) */
	lr_lock_table_delete(t, kv->key, kv->mod_rev);
	if (!grow((void **)&t->slots, t->n_slots, &t->cap_slots, sizeof(s)))
		return false;
	s.key = strdup(kv->key);
	s.value = value_of(kv);
	s.rev = kv->create_rev;
	json_t *v = s.value != NULL ? json_loads(s.value, 0, NULL) : NULL;
	const char *holder = json_string_value(json_object_get(v, "holder"));
	s.holder = strdup(holder != NULL ? holder : "?");
	json_int_t limit = json_integer_value(json_object_get(v, "limit"));
	s.limit = limit > 0 && limit <= LR_LIMIT_N_MAX ? (int)limit : 0;
	json_decref(v);
	if (s.key == NULL || s.value == NULL || s.holder == NULL) {
		drop_slot(&s);
		return false;
	}
	t->slots[t->n_slots++] = s;
	return true;
}

/* A request's "within": at most this many holders, each "task:<id>" or
 * "run:<id>"; anything else in it is left out. */
#define LR_WITHIN_MAX 4

static char **within_of(const json_t *v)
{
	char **out = calloc(LR_WITHIN_MAX + 1, sizeof(*out));
	size_t i, n = 0;
	const json_t *h;
	json_array_foreach(json_object_get(v, "within"), i, h) {
		const char *s = json_string_value(h);
		const char *id = s == NULL                  ? NULL
		                 : strncmp(s, "task:", 5) == 0 ? s + 5
		                 : strncmp(s, "run:", 4) == 0  ? s + 4
		                                               : NULL;
		if (out == NULL || n == LR_WITHIN_MAX)
			break;
		if (id != NULL && lr_id_valid(id) && (out[n] = strdup(s)) != NULL)
			n++;
	}
	return out;
}

static bool put_want(lr_lock_table *t, const lr_kv *kv)
{
	const char *holder = lr_key_id(t->c, LR_K_WANTS, kv->key);
	if (holder == NULL || holder[0] == '\0')
		return false;
	/* Only a task's request outlives a lease (it waits while its task
	 * lives); any other on no lease was put by hand and would hold
	 * others back for ever: no request. */
	if (kv->lease == 0 && strncmp(holder, "task:", 5) != 0)
		return lr_lock_table_delete(t, kv->key, kv->mod_rev);
	struct want w;
	memset(&w, 0, sizeof(w));
	json_t *v = json_loadb(kv->value, kv->value_len, 0, NULL);
	lr_err ignore;
	int rc = lr_lockset_parse(json_object_get(v, "locks"), json_object_get(v, "limits"),
	                          &w.set, &ignore);
	lr_sched sc; /* a task's start time and tasks it waits for, as in its spec */
	if (lr_sched_from_json(v, &sc) == 0) {
		w.not_before_ms = sc.not_before_ms;
		w.after = sc.after; /* taken over */
		w.n_after = sc.n_after;
		sc.after = NULL;
	}
	lr_sched_clear(&sc);
	w.within = within_of(v);
	json_decref(v);
	if (rc != 0 || w.set == NULL || w.within == NULL) {
		drop_want(&w);
		return false; /* not a request: nothing to wait for */
	}
	lr_lock_table_delete(t, kv->key, kv->mod_rev);
	w.key = strdup(kv->key);
	w.value = value_of(kv);
	w.rev = kv->create_rev;
	if (w.key == NULL || w.value == NULL ||
	    !grow((void **)&t->wants, t->n_wants, &t->cap_wants, sizeof(w))) {
		drop_want(&w);
		return false;
	}
	w.holder = w.key + (holder - kv->key);
	size_t at = t->n_wants;
	while (at > 0 && t->wants[at - 1].rev > w.rev)
		at--;
	memmove(&t->wants[at + 1], &t->wants[at], (t->n_wants - at) * sizeof(w));
	t->wants[at] = w;
	t->n_wants++;
	return true;
}

/* snprintf into buf that never ends inside a character: holders and
 * hosts come from keys and values of any length, and a cut must leave
 * text that JSON and a terminal take. */
static void say(char *buf, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void say(char *buf, size_t size, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(buf, size, fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n >= size) /* cut: not inside a character */
		buf[lr_utf8_whole(buf, strlen(buf))] = '\0';
}

/* Lower bound of id in the deps, kept sorted. */
static size_t dep_at(const lr_lock_table *t, const char *id)
{
	size_t lo = 0, hi = t->n_deps;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (strcmp(t->deps[mid].id, id) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

static struct dep *find_dep(const lr_lock_table *t, const char *id)
{
	size_t at = dep_at(t, id);
	return at < t->n_deps && strcmp(t->deps[at].id, id) == 0 ? &t->deps[at] : NULL;
}

void lr_lock_table_dep_seen(lr_lock_table *t, const char *id, bool task, bool done)
{
	struct dep *d = find_dep(t, id);
	if (d == NULL) {
		if (strlen(id) >= LR_ID_SIZE ||
		    !grow((void **)&t->deps, t->n_deps, &t->cap_deps, sizeof(*d)))
			return; /* stays unknown: holds back as before */
		size_t at = dep_at(t, id);
		memmove(&t->deps[at + 1], &t->deps[at], (t->n_deps - at) * sizeof(*d));
		t->n_deps++;
		d = &t->deps[at];
		snprintf(d->id, sizeof(d->id), "%s", id);
	}
	d->task = task;
	d->done = done;
}

/* tasks/<id> or done/<id> of a known dependency put or deleted. */
static bool dep_key(lr_lock_table *t, const char *key, bool present)
{
	const char *id = lr_key_id(t->c, LR_K_DONE, key);
	bool done = id != NULL;
	if (id == NULL)
		id = lr_key_id(t->c, LR_K_TASKS, key);
	struct dep *d = id != NULL ? find_dep(t, id) : NULL;
	if (d == NULL)
		return false;
	if (done)
		d->done = present;
	else
		d->task = present;
	return true;
}

bool lr_lock_table_put(lr_lock_table *t, const lr_kv *kv)
{
	if (lr_key_id(t->c, LR_K_LOCKS, kv->key) != NULL)
		return put_hold(t, kv);
	if (lr_key_id(t->c, LR_K_SLOTS, kv->key) != NULL)
		return put_slot(t, kv);
	if (lr_key_id(t->c, LR_K_WANTS, kv->key) != NULL)
		return put_want(t, kv);
	return dep_key(t, kv->key, true);
}

bool lr_lock_table_delete(lr_lock_table *t, const char *key, int64_t mod_rev)
{
	(void)mod_rev;
	for (size_t i = 0; i < t->n_holds; i++)
		if (strcmp(t->holds[i].key, key) == 0) {
			drop_hold(&t->holds[i]);
			remove_at(t->holds, &t->n_holds, i, sizeof(t->holds[0]));
			return true;
		}
	for (size_t i = 0; i < t->n_slots; i++)
		if (strcmp(t->slots[i].key, key) == 0) {
			drop_slot(&t->slots[i]);
			remove_at(t->slots, &t->n_slots, i, sizeof(t->slots[0]));
			return true;
		}
	for (size_t i = 0; i < t->n_wants; i++)
		if (strcmp(t->wants[i].key, key) == 0) {
			drop_want(&t->wants[i]);
			remove_at(t->wants, &t->n_wants, i, sizeof(t->wants[0]));
			return true;
		}
	return dep_key(t, key, false);
}

bool lr_lock_table_holds(const lr_lock_table *t, const char *holder)
{
	for (size_t i = 0; i < t->n_holds; i++)
		if (strcmp(t->holds[i].holder, holder) == 0)
			return true;
	for (size_t i = 0; i < t->n_slots; i++)
		if (strcmp(t->slots[i].holder, holder) == 0)
			return true;
	return false;
}

static const struct want *find_want(const lr_lock_table *t, const char *holder)
{
	for (size_t i = 0; i < t->n_wants; i++)
		if (strcmp(t->wants[i].holder, holder) == 0)
			return &t->wants[i];
	return NULL;
}

const lr_lockset *lr_lock_table_wants(const lr_lock_table *t, const char *holder,
                                      int64_t *rev)
{
	const struct want *w = find_want(t, holder);
	if (w != NULL && rev != NULL)
		*rev = w->rev;
	return w != NULL ? w->set : NULL;
}

/* w is a task's request and its task is known to be gone (tasks/<id>
 * deleted, by hand: purge deletes the request with it) or finished (its
 * completion deletes the request in the same txn, and this is its last
 * event before that one): a request left over, which holds back nobody. */
static bool left_over(const lr_lock_table *t, const struct want *w)
{
	if (strncmp(w->holder, "task:", 5) != 0)
		return false;
	const struct dep *d = find_dep(t, w->holder + 5);
	return d != NULL && (!d->task || d->done);
}

/* The first task of w's "after" known to be unfinished: it exists and has
 * no result yet (a purged one counts as finished: the waiter will fail).
 * NULL when none is, or none is known. */
static const char *unfinished_dep(const lr_lock_table *t, const struct want *w)
{
	for (size_t i = 0; i < w->n_after; i++) {
		const struct dep *d = find_dep(t, w->after[i]);
		if (d != NULL && d->task && !d->done)
			return w->after[i];
	}
	return NULL;
}

bool lr_lock_table_waits_first(const lr_lock_table *t, const char *holder, char *why,
                               size_t size)
{
	for (size_t i = 0; i < t->n_wants; i++) {
		const struct want *w = &t->wants[i];
		if (strcmp(w->holder, holder) != 0)
			continue;
		const char *dep = unfinished_dep(t, w);
		if (w->not_before_ms > lr_wall_ms()) {
			char at[LR_TIME_BUF];
			lr_rfc3339_format(w->not_before_ms, at);
			if (why != NULL)
				say(why, size, "not before %s", at);
			return true;
		}
		if (dep != NULL && why != NULL)
			say(why, size, "after %s, which has not finished", dep);
		return dep != NULL;
	}
	return false;
}

/* Up to this many dependencies read in one txn: two reads each, within
 * etcd's 128 operations a txn (--max-txn-ops). An etcd run with a lower
 * one gets fewer. */
#define DEP_READS 64

/* Read ids[0..n) in one txn. */
static int read_deps_once(lr_lock_table *t, lr_client *c, const char *const *ids, size_t n,
                          lr_err *err)
{
	lr_txn *txn = lr_txn_new();
	if (txn == NULL)
		return lr_err_set(err, LR_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		char key[LR_KEY_SIZE];
		lr_key(c, LR_K_TASKS, ids[i], key);
		lr_txn_get(txn, LR_THEN, key, LR_RANGE_KEYS_ONLY);
		lr_key(c, LR_K_DONE, ids[i], key);
		lr_txn_get(txn, LR_THEN, key, LR_RANGE_KEYS_ONLY);
	}
	lr_txn_result r;
	int rc = lr_etcd_txn(lr_client_etcd(c), txn, LR_CALL_RETRY, &r, err);
	lr_txn_free(txn);
	if (rc != 0)
		return rc;
	for (size_t i = 0; i < n && 2 * i + 1 < r.n_ops; i++)
		lr_lock_table_dep_seen(t, ids[i], r.ops[2 * i].n > 0, r.ops[2 * i + 1].n > 0);
	lr_txn_result_free(&r);
	return 0;
}

/* Read ids[0..n), *per_txn a txn; halved (for the later reads too) while
 * etcd refuses that many ops. */
static int read_deps(lr_lock_table *t, lr_client *c, const char *const *ids, size_t n,
                     size_t *per_txn, lr_err *err)
{
	int rc = 0;
	for (size_t from = 0; rc == 0 && from < n;) {
		size_t k = n - from < *per_txn ? n - from : *per_txn;
		rc = read_deps_once(t, c, ids + from, k, err);
		if (rc != 0 && k > 1 && lr_etcd_too_many_ops(rc, err)) {
			*per_txn = k / 2;
			rc = 0;
			continue;
		}
		from += k;
	}
	return rc;
}

static bool queued(const char *const *ids, size_t n, const char *id)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(ids[i], id) == 0)
			return true;
	return false;
}

int lr_lock_table_load_deps(lr_lock_table *t, lr_client *c, const lr_lockset *set,
                            int64_t request_rev, lr_err *err)
{
	const char *ids[DEP_READS];
	size_t n = 0, per_txn = DEP_READS;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < t->n_wants; i++) {
		const struct want *w = &t->wants[i];
		if (request_rev != 0 && w->rev >= request_rev)
			break;
		if (set != NULL && !lr_locksets_conflict(w->set, set))
			continue;
		/* A task's request: its own task too, whether it still lives. */
		bool own = strncmp(w->holder, "task:", 5) == 0 &&
		           strlen(w->holder + 5) < LR_ID_SIZE;
		for (size_t j = own ? 0 : 1; rc == 0 && j <= w->n_after; j++) {
			const char *id = j == 0 ? w->holder + 5 : w->after[j - 1];
			if (find_dep(t, id) != NULL || queued(ids, n, id))
				continue; /* read already, or about to be */
			ids[n++] = id;
			if (n == DEP_READS) {
				rc = read_deps(t, c, ids, n, &per_txn, err);
				n = 0;
			}
		}
	}
	if (rc == 0 && n > 0)
		rc = read_deps(t, c, ids, n, &per_txn, err);
	return rc;
}

int lr_lock_table_each_dep(const lr_lock_table *t, lr_dep_fn fn, void *user)
{
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < t->n_deps; i++)
		rc = fn(user, t->deps[i].id);
	return rc;
}

/* A holder as people read it: "task t-12 on box-1" from "task:t-12" and
 * the runner (or host) in its key's value (NULL: none known). */
static void who(const char *holder, const char *value, char *buf, size_t size)
{
	json_t *v = value != NULL ? json_loads(value, 0, NULL) : NULL;
	const char *runner = json_string_value(json_object_get(v, "runner"));
	const char *host = json_string_value(json_object_get(v, "host"));
	const char *at = runner != NULL ? runner : host;
	const char *colon = strchr(holder, ':');
	int kind = colon != NULL ? (int)(colon - holder) : 0;
	const char *name = colon != NULL ? colon + 1 : holder;
	say(buf, size, "%.*s%s%s%s%s", kind, holder, kind > 0 ? " " : "", name,
	         at != NULL ? " on " : "", at != NULL ? at : "");
	json_decref(v);
}

static bool blocked_by_lock(const lr_lock_table *t, const lr_lock_node *n,
                            const char *holder, char *why, size_t size)
{
	for (size_t i = 0; i < t->n_holds; i++) {
		const struct hold *h = &t->holds[i];
		if (strcmp(h->path, n->path) != 0 || strcmp(h->holder, holder) == 0 ||
		    lr_lock_compatible(n->mode, h->mode))
			continue;
		if (why != NULL) {
			char by[LR_HOLDER_SIZE + 300];
			who(h->holder, h->value, by, sizeof(by));
			say(why, size, "%s %s held by %s", lr_lock_mode_name(h->mode), h->path,
			         by);
		}
		return true;
	}
	return false;
}

/* The lowest slot free (or holder's own) below l's limit and below the
 * limit of every other holder of the pool, or -1 when there is none or
 * someone else holds a slot at or beyond l's limit. */
static int free_slot(const lr_lock_table *t, const lr_limit *l, const char *holder,
                     char *why, size_t size)
{
	int held = 0, below = l->n;
	const struct slot *tightest = NULL;
	char by[LR_HOLDER_SIZE + 300];
	for (size_t i = 0; i < t->n_slots; i++) {
		const struct slot *s = &t->slots[i];
		if (strcmp(s->pool, l->key) != 0 || strcmp(s->holder, holder) == 0)
			continue;
		held++;
		if (s->index >= l->n) {
			if (why != NULL) {
				who(s->holder, s->value, by, sizeof(by));
				say(why, size, "pool %s: slot %d held by %s, beyond this limit of %d",
				         l->key, s->index, by, l->n);
			}
			return -1;
		}
		if (s->limit > 0 && s->limit < below) {
			below = s->limit;
			tightest = s;
		}
	}
	for (int idx = 0; idx < below; idx++) {
		bool taken = false;
		for (size_t i = 0; i < t->n_slots && !taken; i++)
			taken = t->slots[i].index == idx && strcmp(t->slots[i].pool, l->key) == 0 &&
			        strcmp(t->slots[i].holder, holder) != 0;
		if (!taken)
			return idx;
	}
	if (why != NULL && tightest != NULL) {
		who(tightest->holder, tightest->value, by, sizeof(by));
		say(why, size, "pool %s full: %d held, and %s runs under a limit of %d",
		         l->key, held, by, tightest->limit);
	} else if (why != NULL) {
		say(why, size, "pool %s full: %d of %d slots held", l->key, held, l->n);
	}
	return -1;
}

void lr_lock_table_within(lr_lock_table *t, const char *const *holders)
{
	t->within = holders;
}

static bool listed(const char *const *holders, const char *holder)
{
	for (const char *const *h = holders; h != NULL && *h != NULL; h++)
		if (strcmp(*h, holder) == 0)
			return true;
	return false;
}

/* Whether the request (own: its wants/ entry, NULL when none is known) is
 * made within holder: the owner's (lr_lock_table_within) or, for a
 * task's, the holders its submit named. */
static bool is_within(const lr_lock_table *t, const struct want *own, const char *holder)
{
	return listed(t->within, holder) ||
	       (own != NULL && listed((const char *const *)own->within, holder));
}

/* What the holders in waiter w's way mean for a request, the strongest
 * of them counting: none yet (NONE); only holds taken before w asked, of
 * what the request does not touch (APART: it may go first); another
 * (BEHIND); or a holder the request is made within (PASS: w waits for
 * the request's own task or run, which cannot end before the request is
 * granted). */
enum blocker { NONE, APART, BEHIND, PASS };

/* so far, with one more holder (taken at rev) weighed in. */
static enum blocker judge(const lr_lock_table *t, const struct want *own, const struct want *w,
                          enum blocker so_far, const char *holder, int64_t rev, bool touched)
{
	enum blocker b = is_within(t, own, holder)    ? PASS
	                 : !touched && rev < w->rev ? APART
	                                            : BEHIND;
	return b > so_far ? b : so_far;
}

/* Whether waiter w cannot be granted now, and the request for set may go
 * first all the same:
 * - w waits for a holder the request is made within (lr_lock_table_within:
 *   the task whose step makes it, with `leaserun run`; or the "within" of
 *   own, the request's wants/ entry: the task whose step submitted it):
 *   holding the request back would be waiting for ever;
 * - or only holds taken before w asked keep w out, of locks at paths set
 *   does not name and pools set does not use. The request may then hold
 *   w up in turn, but a hold taken after w asked lets nobody else pass:
 *   otherwise newcomers, each going ahead of w while another holds it
 *   up, would keep w waiting as long as they come. */
static bool may_go_first(const lr_lock_table *t, const struct want *own, const struct want *w,
                         const lr_lockset *set)
{
	enum blocker v = NONE;
	for (size_t i = 0; i < w->set->n_nodes && v != PASS; i++) {
		const lr_lock_node *n = &w->set->nodes[i];
		bool touched = lr_lockset_has_node(set, n->path);
		for (size_t j = 0; j < t->n_holds; j++) {
			const struct hold *h = &t->holds[j];
			if (strcmp(h->path, n->path) != 0 || strcmp(h->holder, w->holder) == 0 ||
			    lr_lock_compatible(n->mode, h->mode))
				continue;
			v = judge(t, own, w, v, h->holder, h->rev, touched);
		}
	}
	for (size_t i = 0; i < w->set->n_limits && v != PASS; i++) {
		const lr_limit *l = &w->set->limits[i];
		if (free_slot(t, l, w->holder, NULL, 0) >= 0)
			continue;
		bool touched = lr_lockset_has_pool(set, l->key);
		for (size_t j = 0; j < t->n_slots; j++) {
			const struct slot *s = &t->slots[j];
			if (strcmp(s->pool, l->key) != 0 || strcmp(s->holder, w->holder) == 0)
				continue;
			v = judge(t, own, w, v, s->holder, s->rev, touched);
		}
	}
	return v == APART || v == PASS;
}

bool lr_lock_table_can_take(const lr_lock_table *t, const lr_lockset *set,
                            const char *holder, int64_t request_rev, int *slots,
                            lr_waiter_alive_fn alive, void *user, char *why, size_t size)
{
	for (size_t i = 0; i < set->n_nodes; i++)
		if (blocked_by_lock(t, &set->nodes[i], holder, why, size))
			return false;
	for (size_t i = 0; i < set->n_limits; i++)
		if ((slots[i] = free_slot(t, &set->limits[i], holder, why, size)) < 0)
			return false;
	/* First come, first served among requests that conflict; a task
	 * waiting for its start time, for a task of its "after" that has not
	 * finished, or for locks and pools this request does not touch,
	 * holds back nobody meanwhile. */
	int64_t now = lr_wall_ms();
	const struct want *own = find_want(t, holder);
	for (size_t i = 0; i < t->n_wants; i++) {
		const struct want *w = &t->wants[i];
		if (request_rev != 0 && w->rev >= request_rev)
			break;
		if (strcmp(w->holder, holder) == 0 || !lr_locksets_conflict(w->set, set) ||
		    left_over(t, w) || w->not_before_ms > now || unfinished_dep(t, w) != NULL ||
		    lr_lock_table_holds(t, w->holder) ||
		    (alive != NULL && !alive(user, w->holder)) || may_go_first(t, own, w, set))
			continue;
		if (why != NULL) {
			char by[LR_HOLDER_SIZE + 300];
			who(w->holder, NULL, by, sizeof(by));
			say(why, size, "behind %s, which asked first", by);
		}
		return false;
	}
	return true;
}

void lr_lock_table_each_lock(const lr_lock_table *t, lr_hold_fn fn, void *user)
{
	for (size_t i = 0; i < t->n_holds; i++)
		fn(user, t->holds[i].path, t->holds[i].mode, t->holds[i].holder, t->holds[i].value);
}

void lr_lock_table_each_slot(const lr_lock_table *t, lr_slot_fn fn, void *user)
{
	for (size_t i = 0; i < t->n_slots; i++)
		fn(user, t->slots[i].pool, t->slots[i].index, t->slots[i].holder, t->slots[i].value);
}

void lr_lock_table_each_want(const lr_lock_table *t, lr_want_fn fn, void *user)
{
	for (size_t i = 0; i < t->n_wants; i++)
		fn(user, t->wants[i].holder, t->wants[i].set, t->wants[i].rev,
		   lr_lock_table_holds(t, t->wants[i].holder), t->wants[i].value);
}
