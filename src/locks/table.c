/* table.c - holders and waiters of locks and slots, and the fair decision
 * whether a request can be taken (see table.h). Plain arrays searched in
 * order: holders are few (one per running task or run), and requests are
 * kept oldest first. One owner thread. */
#include "locks/table.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/clock.h"
#include "client/walk.h"
#include "records/schedule.h"

#define LR_LOCK_PAGE 500

struct hold {
	char *key;
	char path[LR_LOCK_PATH_SIZE];
	lr_lock_mode mode;
	char *holder;   /* in key */
	char *value;
};

struct slot {
	char *key;
	char pool[LR_LOCK_SEG_MAX + 1];
	int index;
	int limit;      /* the limit its holder runs under; 0: not known */
	char *holder;
	char *value;
};

struct want {
	char *key;
	char *holder;   /* in key */
	int64_t rev;
	int64_t not_before_ms; /* a task's start time (unix ms); 0: none */
	lr_lockset *set;
	char *value;
};

struct lr_lock_table {
	const lr_client *c;
	struct hold *holds;
	size_t n_holds, cap_holds;
	struct slot *slots;
	size_t n_slots, cap_slots;
	struct want *wants;     /* oldest first */
	size_t n_wants, cap_wants;
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
	t->n_holds = t->n_slots = t->n_wants = 0;
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
	t->holds[t->n_holds++] = h;
	return true;
}

static bool put_slot(lr_lock_table *t, const lr_kv *kv)
{
	struct slot s;
	memset(&s, 0, sizeof(s));
	if (!lr_slot_key_parse(t->c, kv->key, s.pool, &s.index))
		return false;
	lr_lock_table_delete(t, kv->key, kv->mod_rev);
	if (!grow((void **)&t->slots, t->n_slots, &t->cap_slots, sizeof(s)))
		return false;
	s.key = strdup(kv->key);
	s.value = value_of(kv);
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

static bool put_want(lr_lock_table *t, const lr_kv *kv)
{
	const char *holder = lr_key_id(t->c, LR_K_WANTS, kv->key);
	if (holder == NULL || holder[0] == '\0')
		return false;
	struct want w;
	memset(&w, 0, sizeof(w));
	json_t *v = json_loadb(kv->value, kv->value_len, 0, NULL);
	lr_err ignore;
	int rc = lr_lockset_parse(json_object_get(v, "locks"), json_object_get(v, "limits"),
	                          &w.set, &ignore);
	lr_sched sc; /* a task's start time, named as in its spec */
	if (lr_sched_from_json(v, &sc) == 0)
		w.not_before_ms = sc.not_before_ms;
	lr_sched_clear(&sc);
	json_decref(v);
	if (rc != 0 || w.set == NULL)
		return false; /* not a request: nothing to wait for */
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

bool lr_lock_table_put(lr_lock_table *t, const lr_kv *kv)
{
	if (lr_key_id(t->c, LR_K_LOCKS, kv->key) != NULL)
		return put_hold(t, kv);
	if (lr_key_id(t->c, LR_K_SLOTS, kv->key) != NULL)
		return put_slot(t, kv);
	if (lr_key_id(t->c, LR_K_WANTS, kv->key) != NULL)
		return put_want(t, kv);
	return false;
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
	return false;
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

const lr_lockset *lr_lock_table_wants(const lr_lock_table *t, const char *holder,
                                      int64_t *rev)
{
	for (size_t i = 0; i < t->n_wants; i++)
		if (strcmp(t->wants[i].holder, holder) == 0) {
			if (rev != NULL)
				*rev = t->wants[i].rev;
			return t->wants[i].set;
		}
	return NULL;
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
	snprintf(buf, size, "%.*s%s%s%s%s", kind, holder, kind > 0 ? " " : "", name,
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
			snprintf(why, size, "%s %s held by %s", lr_lock_mode_name(h->mode), h->path,
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
				snprintf(why, size, "pool %s: slot %d held by %s, beyond this limit of %d",
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
		snprintf(why, size, "pool %s full: %d held, and %s runs under a limit of %d",
		         l->key, held, by, tightest->limit);
	} else if (why != NULL) {
		snprintf(why, size, "pool %s full: %d of %d slots held", l->key, held, l->n);
	}
	return -1;
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
	 * waiting for its start time holds back nobody meanwhile. */
	int64_t now = lr_wall_ms();
	for (size_t i = 0; i < t->n_wants; i++) {
		const struct want *w = &t->wants[i];
		if (request_rev != 0 && w->rev >= request_rev)
			break;
		if (strcmp(w->holder, holder) == 0 || !lr_locksets_conflict(w->set, set) ||
		    w->not_before_ms > now || lr_lock_table_holds(t, w->holder) ||
		    (alive != NULL && !alive(user, w->holder)))
			continue;
		if (why != NULL) {
			char by[LR_HOLDER_SIZE + 300];
			who(w->holder, NULL, by, sizeof(by));
			snprintf(why, size, "behind %s, which asked first", by);
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
