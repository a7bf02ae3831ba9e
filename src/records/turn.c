/* turn.c - the spec fields priority, not_before and after: validation, the
 * normalised form, and the turn/<id> record. Pure functions; any thread. */
#include "records/turn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "records/spec.h"

#define PATH_BUF 32

void lr_turn_clear(lr_turn *t)
{
	free(t->after);
	memset(t, 0, sizeof(*t));
}

bool lr_turn_any(const lr_turn *t)
{
	return t->priority != 0 || t->not_before_ms != 0 || t->n_after > 0;
}

static int priority_of(const json_t *v, lr_turn *out, lr_err *err)
{
	int64_t p = 0;
	int rc = lr_json_int(v, LR_PRIORITY_MIN, LR_PRIORITY_MAX, "priority", &p, err);
	out->priority = (int)p;
	return rc;
}

static int not_before_of(const json_t *v, lr_turn *out, lr_err *err)
{
	const char *s;
	int rc = lr_json_string(v, 1, 64, "not_before", &s, err);
	if (rc != 0)
		return rc;
	int64_t ms;
	/* 0 means "none": the epoch itself is as good as any past time. */
	if (lr_rfc3339_parse(s, &ms) != 0)
		return lr_err_set(err, LR_EINVAL,
		                  "not_before: \"%s\" is not an RFC 3339 time "
		                  "(like 2026-11-21T05:30:00Z)", s);
	out->not_before_ms = ms > 0 ? ms : 1;
	return 0;
}

static int after_of(const json_t *v, const char *self, lr_turn *out, lr_err *err)
{
	if (!json_is_array(v)) {
		char got[128];
		lr_json_describe(v, got, sizeof(got));
		return lr_err_set(err, LR_EINVAL, "after: expected an array of task ids, got %s",
		                  got);
	}
	size_t n = json_array_size(v);
	if (n > LR_AFTER_MAX)
		return lr_err_set(err, LR_EINVAL, "after: %zu tasks, at most %d", n, LR_AFTER_MAX);
	if (n > 0 && (out->after = calloc(n, sizeof(*out->after))) == NULL)
		return lr_err_set(err, LR_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		char path[PATH_BUF];
		const char *id;
		snprintf(path, sizeof(path), "after[%zu]", i);
		int rc = lr_json_string(json_array_get(v, i), 1, LR_ID_SIZE - 1, path, &id, err);
		if (rc != 0)
			return rc;
		if (!lr_id_valid(id))
			return lr_err_set(err, LR_EINVAL, "%s: \"%s\" is not a task id", path, id);
		if (self != NULL && strcmp(id, self) == 0)
			return lr_err_set(err, LR_EINVAL, "%s: a task cannot wait for itself", path);
		for (size_t j = 0; j < i; j++)
			if (strcmp(out->after[j], id) == 0)
				return lr_err_set(err, LR_EINVAL, "%s: \"%s\" is listed twice", path,
				                  id);
		snprintf(out->after[i], LR_ID_SIZE, "%s", id);
		out->n_after = i + 1;
	}
	return 0;
}

/* The three fields of obj (a spec or a turn record) into out. */
static int turn_of(const json_t *obj, const char *self, lr_turn *out, lr_err *err)
{
	memset(out, 0, sizeof(*out));
	const json_t *v;
	int rc = 0;
	if ((v = json_object_get(obj, "priority")) != NULL)
		rc = priority_of(v, out, err);
	if (rc == 0 && (v = json_object_get(obj, "not_before")) != NULL)
		rc = not_before_of(v, out, err);
	if (rc == 0 && (v = json_object_get(obj, "after")) != NULL)
		rc = after_of(v, self, out, err);
	if (rc != 0)
		lr_turn_clear(out);
	return rc;
}

/* Set the fields of t that are present in `given` (or all set ones when
 * given is NULL) on obj. */
static int put_turn(json_t *obj, const lr_turn *t, const json_t *given)
{
	int bad = 0;
	if (given == NULL ? t->priority != 0 : json_object_get(given, "priority") != NULL)
		bad |= json_object_set_new(obj, "priority", json_integer(t->priority));
	if (t->not_before_ms != 0) {
		char when[LR_TIME_BUF];
		lr_rfc3339_format(t->not_before_ms, when);
		bad |= json_object_set_new(obj, "not_before", json_string(when));
	}
	if (given == NULL ? t->n_after > 0 : json_object_get(given, "after") != NULL) {
		json_t *a = json_array();
		for (size_t i = 0; i < t->n_after; i++)
			bad |= json_array_append_new(a, json_string(t->after[i]));
		bad |= json_object_set_new(obj, "after", a);
	}
	return bad != 0 ? LR_ENOMEM : 0;
}

int lr_turn_normalise(const json_t *spec, const char *id, json_t *norm, lr_err *err)
{
	lr_turn t;
	int rc = turn_of(spec, id, &t, err);
	if (rc != 0)
		return rc;
	/* Left out when absent, so that a spec without them is stored (and
	 * costs) as before. */
	rc = put_turn(norm, &t, spec);
	lr_turn_clear(&t);
	return rc != 0 ? lr_err_set(err, LR_ENOMEM, "out of memory") : 0;
}

int lr_turn_of_spec(const json_t *norm, lr_turn *out, lr_err *err)
{
	return turn_of(norm, lr_spec_id(norm), out, err);
}

char *lr_turn_encode(const lr_turn *t)
{
	json_t *obj = json_object();
	char *text = NULL;
	if (obj != NULL && put_turn(obj, t, NULL) == 0)
		text = json_dumps(obj, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(obj);
	return text;
}

int lr_turn_decode(const char *value, size_t len, lr_turn *out, lr_err *err)
{
	static const char *const known[] = { "priority", "not_before", "after" };
	json_t *doc = NULL;
	memset(out, 0, sizeof(*out));
	int rc = lr_json_load_object(value, len, &doc, err);
	if (rc != 0)
		return lr_err_wrap(err, rc, "turn record");
	const char *key;
	json_t *v;
	json_object_foreach(doc, key, v) {
		size_t i = 0;
		while (i < 3 && strcmp(known[i], key) != 0)
			i++;
		if (i == 3) {
			rc = lr_err_set(err, LR_EINVAL, "turn record: unknown field \"%.64s\"",
			                key);
			json_decref(doc); /* key is its */
			return rc;
		}
	}
	rc = turn_of(doc, NULL, out, err);
	json_decref(doc);
	return rc != 0 ? lr_err_wrap(err, rc, "turn record") : 0;
}

char *lr_turn_of_spec_text(const char *spec, size_t len)
{
	json_t *doc = NULL;
	lr_turn t;
	char *text = NULL;
	if (lr_json_load_object(spec, len, &doc, NULL) != 0)
		return NULL;
	if (turn_of(doc, NULL, &t, NULL) == 0) {
		if (lr_turn_any(&t))
			text = lr_turn_encode(&t);
		lr_turn_clear(&t);
	}
	json_decref(doc);
	return text;
}
