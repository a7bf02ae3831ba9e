/* shared.c - shared JSON values under P"shared/<name>": lock-free
 * read-modify-write guarded by the key's mod revision, reads, listings by
 * name prefix and deletion. Runs on the caller's thread (the update
 * function too); no state of its own. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/backoff.h"
#include "base/clock.h"
#include "base/error.h"
#include "client/shared.h"
#include "client/task_records.h"
#include "client/walk.h"
#include "etcd/kv.h"
#include "fiber/fiber.h"
#include "records/spec.h"

/* A value this many writers keep beating is contended beyond reason. */
#define MAX_TRIES 1000
/* Waits after a lost race: short (a txn takes about a millisecond) and
 * jittered, so that writers that collided spread out. */
#define BACKOFF_MIN_MS 1
#define BACKOFF_MAX_MS 50

/* The value as last read: bytes and revisions (copied out of the reply). */
struct current {
	bool exists;
	int64_t mod_rev;
	char *bytes;
	size_t len;
};

static void current_clear(struct current *cur)
{
	free(cur->bytes);
	memset(cur, 0, sizeof(*cur));
}

static int current_set(struct current *cur, const lr_kv *kv, lr_err *err)
{
	current_clear(cur);
	if (kv == NULL)
		return 0;
	cur->bytes = lr_kv_value_dup(kv);
	if (cur->bytes == NULL)
		return lr_err_set(err, LR_ENOMEM, "out of memory");
	cur->len = kv->value_len;
	cur->exists = true;
	cur->mod_rev = kv->mod_rev;
	return 0;
}

static int read_current(lr_client *c, const char *key, struct current *cur,
                        lr_err *err)
{
	lr_range_result r;
	int rc = lr_kv_get(lr_client_etcd(c), key, &r, err);

	if (rc != 0)
		return rc;
	rc = current_set(cur, r.n > 0 ? &r.kvs[0] : NULL, err);
	lr_range_result_free(&r);
	return rc;
}

/* Any JSON value, not only objects: a counter is a number. */
static int decode(const struct current *cur, json_t **out, lr_err *err)
{
	json_error_t je;

	*out = NULL;
	if (!cur->exists)
		return 0;
	*out = json_loadb(cur->bytes, cur->len, JSON_DECODE_ANY, &je);
	if (*out == NULL) {
		char why[LR_JSON_SYNTAX_ERROR_SIZE];
		lr_json_syntax_error(&je, why, sizeof(why));
		return lr_err_set(err, LR_EINVAL, "stored value is not JSON: %s", why);
	}
	return 0;
}

int lr_shared_encode(const json_t *v, char **text, lr_err *err)
{
	*text = NULL;
	if (v == NULL)
		return lr_err_set(err, LR_EINVAL, "no value");
	/* Deeper than JSON is parsed back, it would be stored unreadable. */
	if (lr_json_nests_over(v, LR_STATE_MAX_DEPTH))
		return lr_err_set(err, LR_EINVAL, "value: arrays and objects nested over %d deep",
		                  LR_STATE_MAX_DEPTH);
	*text = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
	if (*text == NULL)
		return lr_err_set(err, LR_EINVAL, "value: cannot be encoded as JSON (a string "
		                  "that is not UTF-8?)");
	if (strlen(*text) > LR_SPEC_MAX_BYTES) {
		free(*text);
		*text = NULL;
		return lr_err_set(err, LR_ETOOLARGE, "value over the 1 MiB limit");
	}
	return 0;
}

/* Ask fn for the next value and encode it. */
static int next_value(const struct current *cur, lr_update_fn fn, void *user,
                      char **text, lr_err *err)
{
	json_t *now = NULL, *next = NULL;
	int rc = decode(cur, &now, err);

	*text = NULL;
	if (rc != 0)
		return rc;
	rc = fn(user, now, (void **)&next);
	json_decref(now);
	if (rc > 0)
		rc = LR_EINVAL; /* not a code of ours: a misbehaving function */
	if (rc == LR_ECANCELLED)
		rc = lr_err_set(err, rc, "stopped by the update function");
	else if (rc != 0)
		rc = lr_err_set(err, rc, "the update function failed: %s",
		                lr_strerror(rc));
	else if (next == NULL)
		rc = lr_err_set(err, LR_EINVAL,
		                "the update function gave no value");
	if (rc == 0)
		rc = lr_shared_encode(next, text, err);
	json_decref(next);
	return rc;
}

/* The guard: the key is as last read (absent, or at its mod revision). */
static void guard(lr_txn *t, const char *key, const struct current *cur)
{
	if (cur->exists)
		lr_txn_cmp(t, key, 0, LR_CMP_MOD, LR_CMP_EQ, cur->mod_rev);
	else
		lr_txn_cmp(t, key, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
}

/* Write value if the key is still as read (then cur->mod_rev becomes the
 * write's revision); otherwise *cur becomes what the failure branch read.
 * *written tells which. Sent without retries: a txn
 * retried after its lost reply applied would fail its guard and look like
 * a lost race, and the update would be applied twice. */
static int try_write(lr_client *c, const char *key, const void *value,
                     size_t len, struct current *cur, bool *written,
                     lr_err *err)
{
	lr_txn_result r;
	lr_txn *t = lr_txn_new();
	int rc;

	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "out of memory");
	guard(t, key, cur);
	lr_txn_put(t, LR_THEN, key, value, len, 0);
	lr_txn_get(t, LR_ELSE, key, 0);
	rc = lr_etcd_txn(lr_client_etcd(c), t, 0, &r, err);
	lr_txn_free(t);
	if (rc != 0)
		return rc;
	*written = r.succeeded;
	if (r.succeeded)
		cur->mod_rev = r.revision;
	else if (r.n_ops == 1)
		rc = current_set(cur, r.ops[0].n > 0 ? &r.ops[0].kvs[0] : NULL,
		                 err);
	lr_txn_result_free(&r);
	return rc;
}

/* After a lost reply: rewrite the value as read, under the same guard. If
 * that succeeds, the lost write had not applied and now never can (the mod
 * revision moved), so the update may be tried again. If the guard fails,
 * the key changed, perhaps by the lost write itself: nobody can tell, so
 * the caller hears LR_EAMBIGUOUS instead of risking a double update. */
static int settle_lost_write(lr_client *c, const char *key,
                             struct current *cur, lr_err *err)
{
	bool written = false;
	int rc;

	if (!cur->exists)
		return lr_err_set(err, LR_EAMBIGUOUS,
		                  "the reply to the write was lost; it may have "
		                  "applied (read the value to see)");
	rc = try_write(c, key, cur->bytes, cur->len, cur, &written, err);
	if (rc == 0 && !written)
		rc = lr_err_set(err, LR_EAMBIGUOUS,
		                "the reply to the write was lost and the value "
		                "changed since; the update may have applied");
	return rc;
}

int lr_shared_key(lr_client *c, const char *name, char key[LR_KEY_SIZE],
                  lr_err *err)
{
	if (!lr_id_valid(name))
		return lr_err_set(err, LR_EINVAL,
		                  "shared value: invalid name \"%.64s\": expected 1 to %d "
		                  "of A-Z a-z 0-9 . _ : -", name ? name : "",
		                  LR_ID_SIZE - 1);
	lr_key(c, LR_K_SHARED, name, key);
	return 0;
}

int lr_update(lr_client *c, const char *name, lr_update_fn fn, void *user,
              lr_err *err)
{
	char key[LR_KEY_SIZE];
	struct current cur = { .exists = false };
	lr_backoff bo;
	lr_rng rng;
	int rc;

	if (LR_NULL_ARG(err, c) || LR_NULL_ARG(err, fn))
		return LR_EINVAL;
	rc = lr_shared_key(c, name, key, err);
	if (rc != 0)
		return lr_err_wrap(err, rc, "update");
	lr_backoff_init(&bo, BACKOFF_MIN_MS, BACKOFF_MAX_MS);
	lr_rng_init(&rng, NULL);
	rc = read_current(c, key, &cur, err);
	for (int tries = 0; rc == 0; tries++) {
		char *text = NULL;
		bool written = false;
		if (tries == MAX_TRIES) {
			rc = lr_err_set(err, LR_ECONFLICT,
			                "%d writers came first in a row", tries);
			break;
		}
		rc = next_value(&cur, fn, user, &text, err);
		if (rc == 0)
			rc = try_write(c, key, text, strlen(text), &cur, &written,
			               err);
		if (rc == LR_EAMBIGUOUS)
			rc = settle_lost_write(c, key, &cur, err);
		free(text);
		if (rc != 0 || written)
			break;
		lr_fiber_sleep_ms(lr_backoff_next(&bo, &rng));
	}
	current_clear(&cur);
	return rc != 0 ? lr_err_wrap(err, rc, "update %s", key) : 0;
}

int lr_shared_get(lr_client *c, const char *name, void **value, lr_err *err)
{
	char key[LR_KEY_SIZE];
	struct current cur = { .exists = false };
	json_t *v = NULL;
	int rc;

	if (LR_NULL_ARG(err, c) || LR_NULL_ARG(err, value))
		return LR_EINVAL;
	*value = NULL;
	rc = lr_shared_key(c, name, key, err);
	if (rc != 0)
		return rc;
	rc = read_current(c, key, &cur, err);
	if (rc == 0)
		rc = decode(&cur, &v, err);
	current_clear(&cur);
	if (rc != 0)
		return lr_err_wrap(err, rc, "read %s", key);
	*value = v;
	return 0;
}

/* ---- listing and deletion by name prefix ------------------------------------ */

/* LR_EINVAL for a flag that is none of ours: 999 would otherwise mean
 * "delete by prefix". */
static int check_flags(const char *what, int flags, lr_err *err)
{
	if ((flags & ~(LR_SHARED_KEYS_ONLY | LR_SHARED_PREFIX)) == 0)
		return 0;
	return lr_err_set(err, LR_EINVAL, "%s: unknown flags %#x (LR_SHARED_KEYS_ONLY, "
	                  "LR_SHARED_PREFIX)", what, (unsigned)flags);
}

/* LR_EINVAL unless prefix is "" or the start of a valid name. */
static int check_prefix(const char *what, const char *prefix, lr_err *err)
{
	if (prefix != NULL && (prefix[0] == '\0' || lr_id_valid(prefix)))
		return 0;
	return lr_err_set(err, LR_EINVAL,
	                  "%s: invalid name prefix \"%.64s\": expected 0 to %d of "
	                  "A-Z a-z 0-9 . _ : -", what, prefix ? prefix : "",
	                  LR_ID_SIZE - 1);
}

struct listing {
	const char *prefix;
	bool keys_only;
	lr_shared_entry *items;
	size_t n, cap;
};

static int list_one(void *user, const lr_kv *kv, const char *rest, lr_err *err)
{
	struct listing *l = user;
	if (rest == NULL)
		return 0; /* not under the prefix: cannot happen with a range */
	if (l->n == l->cap) {
		size_t cap = l->cap ? 2 * l->cap : 16;
		lr_shared_entry *items = realloc(l->items, cap * sizeof(*items));
		if (items == NULL)
			return lr_err_set(err, LR_ENOMEM, "out of memory");
		l->items = items;
		l->cap = cap;
	}
	lr_shared_entry *e = &l->items[l->n];
	memset(e, 0, sizeof(*e));
	e->mod_revision = kv->mod_rev;
	if (asprintf(&e->name, "%s%s", l->prefix, rest) < 0) {
		e->name = NULL;
		return lr_err_set(err, LR_ENOMEM, "out of memory");
	}
	l->n++; /* from here on, freed with the list */
	if (l->keys_only)
		return 0;
	struct current cur = { .exists = false };
	int rc = current_set(&cur, kv, err);
	if (rc == 0)
		rc = decode(&cur, (json_t **)&e->value, err);
	current_clear(&cur);
	return rc != 0 ? lr_err_wrap(err, rc, "%s", kv->key) : 0;
}

/* Values are up to 1 MiB each: a page of them stays within what one reply
 * may carry. Names alone are small. */
#define PAGE_VALUES 64
#define PAGE_KEYS 1000

int lr_shared_list(lr_client *c, const char *name_prefix, int flags,
                   lr_shared_entry **out, size_t *n, lr_err *err)
{
	char kind[LR_KEY_SIZE];
	struct listing l = { .prefix = name_prefix,
	                     .keys_only = (flags & LR_SHARED_KEYS_ONLY) != 0 };
	int rc;

	if (LR_NULL_ARG(err, c) || LR_NULL_ARG(err, out) || LR_NULL_ARG(err, n))
		return LR_EINVAL;
	*out = NULL;
	*n = 0;
	rc = check_flags("list shared values", flags, err);
	if (rc == 0)
		rc = check_prefix("list shared values", name_prefix, err);
	if (rc != 0)
		return rc;
	snprintf(kind, sizeof(kind), "%s%s", LR_K_SHARED, name_prefix);
	lr_walk_opts o = { .kind = kind, .flags = l.keys_only ? LR_RANGE_KEYS_ONLY : 0,
	                   .page = l.keys_only ? PAGE_KEYS : PAGE_VALUES };
	rc = lr_walk(c, &o, list_one, &l, err);
	if (rc != 0) {
		lr_shared_list_free(l.items, l.n);
		return lr_err_wrap(err, rc, "list shared values %s*", name_prefix);
	}
	*out = l.items;
	*n = l.n;
	return 0;
}

void lr_shared_list_free(lr_shared_entry *list, size_t n)
{
	for (size_t i = 0; list != NULL && i < n; i++) {
		free(list[i].name);
		json_decref(list[i].value);
	}
	free(list);
}

int lr_shared_delete(lr_client *c, const char *name, int flags,
                     int64_t *deleted, lr_err *err)
{
	char key[LR_KEY_SIZE];
	bool prefix = (flags & LR_SHARED_PREFIX) != 0;
	int64_t count = 0;
	int rc;

	if (deleted != NULL)
		*deleted = 0;
	if (LR_NULL_ARG(err, c))
		return LR_EINVAL;
	rc = check_flags("delete shared values", flags, err);
	if (rc == 0)
		rc = prefix ? check_prefix("delete shared values", name, err)
		            : lr_shared_key(c, name, key, err);
	if (rc != 0)
		return rc;
	if (prefix) {
		char kind[LR_KEY_SIZE];
		snprintf(kind, sizeof(kind), "%s%s", LR_K_SHARED, name);
		lr_key(c, kind, "", key);
	}
	rc = lr_kv_delete(lr_client_etcd(c), key, prefix ? LR_KEY_PREFIX : 0,
	                  &count, NULL, err);
	if (rc != 0)
		return rc;
	if (deleted != NULL)
		*deleted = count;
	return 0;
}
