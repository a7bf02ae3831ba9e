/* record.c - encoding the records leaserun stores in etcd and decoding them
 * defensively. Pure functions on caller-owned structs; any thread. */
#include "records/record.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/utf8.h"
#include "records/spec.h"

#define ENCODE_FLAGS (JSON_COMPACT | JSON_SORT_KEYS)

/* Encode and release doc (stolen; NULL after a failed json_pack gives NULL). */
static char *encode_new(json_t *doc)
{
	char *text = doc ? json_dumps(doc, ENCODE_FLAGS) : NULL;
	json_decref(doc);
	return text;
}

/* ---- the records a runner writes for every task, without a document ----
 *
 * A claim, a checkpoint and a done record are written at every claim,
 * step and end.
 * Built as a jansson object and dumped with sorted keys, one costs a
 * handful of allocations and a sort; its fixed fields are written here
 * instead, in the bytes json_dumps(ENCODE_FLAGS) gives, and only the
 * state goes through jansson. Strings that jansson would escape take the
 * document path. */

/* Printable ASCII without '"' or '\\': written by jansson as it is. */
static bool plain(const char *s)
{
	for (; *s != '\0'; s++)
		if (*s < 0x20 || *s > 0x7e || *s == '"' || *s == '\\')
			return false;
	return true;
}

/* v as compact JSON with sorted keys, "null" for NULL; NULL when out of
 * memory. */
static char *dump_any(const json_t *v)
{
	return v != NULL ? json_dumps(v, ENCODE_FLAGS | JSON_ENCODE_ANY) : strdup("null");
}

/* Every decoder failure goes through here so the record is always named;
 * err may be NULL, in which case only the code travels. */
static int fail(int rc, const char *record, lr_err *err)
{
	return lr_err_wrap(err, rc, "%s record", record);
}

static int load(const char *v, size_t len, json_t **doc, lr_err *err)
{
	if (len > LR_RECORD_MAX_BYTES)
		return lr_err_set(err, LR_EINVAL,
		                  "%zu bytes, over the limit of %d", len,
		                  LR_RECORD_MAX_BYTES);
	return lr_json_load_object(v, len, doc, err);
}

/* Copy doc[key] into a fixed buffer; too long is an error, never a cut. */
static int get_string(json_t *doc, const char *key, size_t min_len,
                      char *buf, size_t size, lr_err *err)
{
	const char *s;
	int rc = lr_json_string(json_object_get(doc, key), min_len, size - 1,
	                        key, &s, err);
	if (rc != 0)
		return rc;
	memcpy(buf, s, strlen(s) + 1);
	return 0;
}

static int get_int(json_t *doc, const char *key, int64_t lo, int64_t hi,
                   int64_t *out, lr_err *err)
{
	return lr_json_int(json_object_get(doc, key), lo, hi, key, out, err);
}

/* doc["state"]: any JSON value within the state limit; *out a new reference. */
static int get_state(json_t *doc, json_t **out, lr_err *err)
{
	json_t *v = json_object_get(doc, "state");
	if (v == NULL)
		return lr_err_set(err, LR_EINVAL, "state: missing");
	/* A state over the limit makes the record invalid, as any bad field. */
	if (lr_json_check_state(v, "state", err) != 0)
		return lr_err_set_code(err, LR_EINVAL);
	*out = json_incref(v);
	return 0;
}

/* ---- claims ---- */

char *lr_claim_encode(const lr_claim_rec *c)
{
	if (c->n_slots == 0 && plain(c->runner) && plain(c->claimed_at)) {
		char *text = NULL;
		if (asprintf(&text, "{\"claimed_at\":\"%s\",\"lease\":%" PRId64 ",\"runner\":\"%s\"}",
		             c->claimed_at, c->lease, c->runner) < 0)
			text = NULL;
		return text;
	}
	json_t *slots = NULL;
	for (size_t i = 0; i < c->n_slots; i++) {
		if (slots == NULL && (slots = json_object()) == NULL)
			return NULL;
		json_object_set_new(slots, c->slots[i].pool, json_integer(c->slots[i].index));
	}
	return encode_new(json_pack("{s:s, s:I, s:s, s:o*}", "runner", c->runner,
	                            "lease", (json_int_t)c->lease, "claimed_at",
	                            c->claimed_at, "slots", slots));
}

/* doc["slots"]: {"POOL": index}, absent when the claim took none. */
static int get_slots(json_t *doc, lr_claim_rec *c, lr_err *err)
{
	json_t *slots = json_object_get(doc, "slots");
	if (slots == NULL)
		return 0;
	if (!json_is_object(slots) || json_object_size(slots) > LR_LIMITS_MAX)
		return lr_err_set(err, LR_EINVAL, "slots: not an object of at most %d pools",
		                  LR_LIMITS_MAX);
	const char *pool;
	json_t *v;
	json_object_foreach(slots, pool, v) {
		int64_t index;
		if (strlen(pool) > LR_LOCK_SEG_MAX || strchr(pool, '/') != NULL ||
		    !lr_lock_path_valid(pool))
			return lr_err_set(err, LR_EINVAL, "slots: not a pool name: %.80s", pool);
		int rc = lr_json_int(v, 0, LR_LIMIT_N_MAX - 1, "slots", &index, err);
		if (rc != 0)
			return rc;
		lr_claim_slot *s = &c->slots[c->n_slots++];
		memcpy(s->pool, pool, strlen(pool) + 1);
		s->index = (int)index;
	}
	return 0;
}

int lr_claim_decode(const char *v, size_t len, lr_claim_rec *out, lr_err *err)
{
	json_t *doc = NULL;
	lr_claim_rec c = { .lease = 0 };
	int rc;

	rc = load(v, len, &doc, err);
	if (rc != 0)
		goto cleanup;
	rc = get_string(doc, "runner", 1, c.runner, sizeof(c.runner), err);
	if (rc != 0)
		goto cleanup;
	/* Lease 0 is etcd's "no lease": a claim on it would never expire. */
	rc = get_int(doc, "lease", 1, INT64_MAX, &c.lease, err);
	if (rc != 0)
		goto cleanup;
	rc = get_string(doc, "claimed_at", 0, c.claimed_at,
	                sizeof(c.claimed_at), err);
	if (rc != 0)
		goto cleanup;
	rc = get_slots(doc, &c, err);
	if (rc != 0)
		goto cleanup;
	*out = c;
cleanup:
	json_decref(doc);
	return rc ? fail(rc, "claim", err) : 0;
}

/* ---- checkpoints ---- */

/* A record's text as it grows: room for a small state from the start,
 * doubled as a larger one needs it. */
struct text {
	char *p;
	size_t n, cap;
};

static int text_add(const char *s, size_t n, void *user)
{
	struct text *t = user;
	if (t->cap - t->n <= n) {
		size_t cap = t->cap * 2 > t->n + n + 1 ? t->cap * 2 : t->n + n + 1;
		char *p = realloc(t->p, cap);
		if (p == NULL)
			return -1;
		t->p = p;
		t->cap = cap;
	}
	memcpy(t->p + t->n, s, n);
	t->n += n;
	return 0;
}

/* head, the state as JSON ("null" for NULL), then tail: one allocation
 * for a state of up to a few hundred bytes, and the state dumped straight
 * into place. NULL when out of memory. */
static char *around_state(const char *head, size_t hn, const json_t *state,
                          const char *tail, size_t tn)
{
	struct text t = { .cap = hn + 256 + tn + 1 };
	t.p = malloc(t.cap);
	if (t.p == NULL || text_add(head, hn, &t) != 0 ||
	    (state != NULL ? json_dump_callback(state, text_add, &t,
	                                        ENCODE_FLAGS | JSON_ENCODE_ANY)
	                   : text_add("null", 4, &t)) != 0 ||
	    text_add(tail, tn + 1, &t) != 0) { /* with its '\0' */
		free(t.p);
		return NULL;
	}
	return t.p;
}

char *lr_checkpoint_encode(const lr_checkpoint_rec *c)
{
	if (plain(c->runner) && plain(c->updated_at)) {
		char head[sizeof(c->runner) + 128], tail[sizeof(c->updated_at) + 32];
		int hn = snprintf(head, sizeof(head),
		                  "{\"attempt\":%" PRId64 ",\"fence\":%" PRId64
		                  ",\"next_step\":%" PRId64 ",\"runner\":\"%s\",\"state\":",
		                  c->attempt, c->fence, c->next_step, c->runner);
		int tn = snprintf(tail, sizeof(tail), ",\"updated_at\":\"%s\"}", c->updated_at);
		if (hn > 0 && (size_t)hn < sizeof(head) && tn > 0 && (size_t)tn < sizeof(tail))
			return around_state(head, (size_t)hn, c->state, tail, (size_t)tn);
	}
	return encode_new(json_pack("{s:I, s:I, s:O?, s:s, s:I, s:s}",
	                            "next_step", (json_int_t)c->next_step,
	                            "attempt", (json_int_t)c->attempt,
	                            "state", c->state, "runner", c->runner,
	                            "fence", (json_int_t)c->fence,
	                            "updated_at", c->updated_at));
}

int lr_checkpoint_decode(const char *v, size_t len, lr_checkpoint_rec *out,
                         lr_err *err)
{
	json_t *doc = NULL;
	lr_checkpoint_rec c = { .state = NULL };
	int rc;

	rc = load(v, len, &doc, err);
	if (rc != 0)
		goto cleanup;
	rc = get_int(doc, "next_step", 0, LR_MAX_STEPS, &c.next_step, err);
	if (rc != 0)
		goto cleanup;
	rc = get_int(doc, "attempt", 0, INT32_MAX, &c.attempt, err);
	if (rc != 0)
		goto cleanup;
	/* Empty when no runner has run the task yet (a retry wrote it). */
	rc = get_string(doc, "runner", 0, c.runner, sizeof(c.runner), err);
	if (rc != 0)
		goto cleanup;
	rc = get_int(doc, "fence", 0, INT64_MAX, &c.fence, err);
	if (rc != 0)
		goto cleanup;
	rc = get_string(doc, "updated_at", 0, c.updated_at,
	                sizeof(c.updated_at), err);
	if (rc != 0)
		goto cleanup;
	rc = get_state(doc, &c.state, err);
	if (rc != 0)
		goto cleanup;
	*out = c;
	c.state = NULL; /* now owned by out */
cleanup:
	json_decref(c.state);
	json_decref(doc);
	return rc ? fail(rc, "checkpoint", err) : 0;
}

void lr_checkpoint_rec_clear(lr_checkpoint_rec *c)
{
	json_decref(c->state);
	c->state = NULL;
}

int64_t lr_checkpoint_fence(const lr_checkpoint_rec *c, int64_t mod_rev)
{
	return c->fence != 0 ? c->fence : mod_rev;
}

/* ---- done ---- */

static const char *const done_statuses[] = { "succeeded", "failed",
	                                      "cancelled", NULL };

char *lr_done_encode(const lr_done_rec *d)
{
	/* An error quotes a step's stderr, or a name cut short: whatever its
	 * bytes, the record is written. */
	if ((d->error == NULL || plain(d->error)) && plain(d->status) && plain(d->finished_at)) {
		char *state = dump_any(d->state), *text = NULL;
		if (state != NULL &&
		    asprintf(&text, "{\"attempts\":%" PRId64 ",\"error\":%s%s%s"
		             ",\"finished_at\":\"%s\",\"state\":%s,\"status\":\"%s\"}",
		             d->attempts, d->error != NULL ? "\"" : "",
		             d->error != NULL ? d->error : "null", d->error != NULL ? "\"" : "",
		             d->finished_at, state, d->status) < 0)
			text = NULL;
		free(state);
		return text;
	}
	json_t *error = d->error != NULL ? lr_json_string_lossy(d->error) : NULL;
	if (d->error != NULL && error == NULL)
		return NULL;
	return encode_new(json_pack("{s:s, s:I, s:o?, s:O?, s:s}", "status",
	                            d->status, "attempts",
	                            (json_int_t)d->attempts, "error", error,
	                            "state", d->state, "finished_at",
	                            d->finished_at));
}

static int get_status(json_t *doc, char *buf, size_t size, lr_err *err)
{
	int rc = get_string(doc, "status", 1, buf, size, err);
	if (rc != 0)
		return rc;
	for (size_t i = 0; done_statuses[i] != NULL; i++)
		if (strcmp(buf, done_statuses[i]) == 0)
			return 0;
	char shown[128];
	lr_json_describe(json_object_get(doc, "status"), shown, sizeof(shown));
	return lr_err_set(err, LR_EINVAL,
	                  "status: %s is not one of succeeded, failed, cancelled",
	                  shown);
}

/* "error" is a string or null (a task cancelled before it ran has none). */
static int get_error(json_t *doc, char **out, lr_err *err)
{
	json_t *v = json_object_get(doc, "error");
	const char *s;

	*out = NULL;
	if (json_is_null(v))
		return 0;
	int rc = lr_json_string(v, 0, SIZE_MAX, "error", &s, err);
	if (rc != 0)
		return rc;
	*out = strdup(s);
	if (*out == NULL)
		return lr_err_set(err, LR_ENOMEM, "out of memory");
	return 0;
}

int lr_done_decode(const char *v, size_t len, lr_done_rec *out, lr_err *err)
{
	json_t *doc = NULL;
	lr_done_rec d = { .error = NULL, .state = NULL };
	int rc;

	rc = load(v, len, &doc, err);
	if (rc != 0)
		goto cleanup;
	rc = get_status(doc, d.status, sizeof(d.status), err);
	if (rc != 0)
		goto cleanup;
	rc = get_int(doc, "attempts", 0, INT32_MAX, &d.attempts, err);
	if (rc != 0)
		goto cleanup;
	rc = get_error(doc, &d.error, err);
	if (rc != 0)
		goto cleanup;
	rc = get_state(doc, &d.state, err);
	if (rc != 0)
		goto cleanup;
	rc = get_string(doc, "finished_at", 0, d.finished_at,
	                sizeof(d.finished_at), err);
	if (rc != 0)
		goto cleanup;
	*out = d;
	d.error = NULL; /* now owned by out */
	d.state = NULL;
cleanup:
	lr_done_rec_clear(&d);
	json_decref(doc);
	return rc ? fail(rc, "done", err) : 0;
}

void lr_done_rec_clear(lr_done_rec *d)
{
	free(d->error);
	d->error = NULL;
	json_decref(d->state);
	d->state = NULL;
}

/* ---- runners ---- */

char *lr_runner_encode(const lr_runner_rec *r)
{
	return encode_new(json_pack("{s:I, s:s, s:I, s:I, s:s, s:s}", "pid",
	                            (json_int_t)r->pid, "host", r->host,
	                            "concurrency", (json_int_t)r->concurrency,
	                            "ttl", (json_int_t)r->ttl, "started_at",
	                            r->started_at, "version", r->version));
}

int lr_runner_decode(const char *v, size_t len, lr_runner_rec *out,
                     lr_err *err)
{
	json_t *doc = NULL;
	lr_runner_rec r = { .pid = 0 };
	int rc;

	rc = load(v, len, &doc, err);
	if (rc != 0)
		goto cleanup;
	rc = get_int(doc, "pid", 1, INT64_MAX, &r.pid, err);
	if (rc != 0)
		goto cleanup;
	rc = get_string(doc, "host", 0, r.host, sizeof(r.host), err);
	if (rc != 0)
		goto cleanup;
	rc = get_int(doc, "concurrency", 1, INT64_MAX, &r.concurrency, err);
	if (rc != 0)
		goto cleanup;
	rc = get_int(doc, "ttl", 1, INT64_MAX, &r.ttl, err);
	if (rc != 0)
		goto cleanup;
	rc = get_string(doc, "started_at", 0, r.started_at,
	                sizeof(r.started_at), err);
	if (rc != 0)
		goto cleanup;
	rc = get_string(doc, "version", 0, r.version, sizeof(r.version), err);
	if (rc != 0)
		goto cleanup;
	*out = r;
cleanup:
	json_decref(doc);
	return rc ? fail(rc, "runner", err) : 0;
}

/* ---- cancel requests ---- */

char *lr_cancel_encode(const char *requested_at)
{
	return encode_new(json_pack("{s:s}", "requested_at", requested_at));
}

int lr_cancel_decode(const char *v, size_t len, lr_cancel_rec *out,
                     lr_err *err)
{
	json_t *doc = NULL;
	lr_cancel_rec c = { .requested_at = "" };
	int rc;

	rc = load(v, len, &doc, err);
	if (rc != 0)
		goto cleanup;
	rc = get_string(doc, "requested_at", 0, c.requested_at,
	                sizeof(c.requested_at), err);
	if (rc != 0)
		goto cleanup;
	*out = c;
cleanup:
	json_decref(doc);
	return rc ? fail(rc, "cancel", err) : 0;
}
