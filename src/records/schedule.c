/* schedule.c - "not_before", "priority" and "after" of task specs, and the
 * queue record (see schedule.h). Pure functions; any thread. */
#include "records/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "records/spec.h"

static int normalise_not_before(const json_t *spec, json_t *norm, lr_err *err)
{
	json_t *v = json_object_get(spec, "not_before");
	if (v == NULL)
		return 0;
	const char *s = NULL;
	int64_t ms = 0;
	int rc = lr_json_string(v, 1, 64, "not_before", &s, err);
	if (rc != 0)
		return rc;
	if (lr_rfc3339_parse(s, &ms) != 0)
		return lr_err_set(err, LR_EINVAL,
		                  "not_before: expected an RFC 3339 time such as "
		                  "\"2026-11-23T08:00:00Z\", got \"%.64s\"", s);
	/* Before 1970: long due, stored as the first millisecond after (0
	 * means no start time). */
	if (ms <= 0)
		ms = 1;
	/* A leap second or an offset can carry the last day past the year
	 * 9999, which the stored form cannot write. */
	if (ms > LR_TIME_MAX_MS)
		return lr_err_set(err, LR_EINVAL, "not_before: \"%.64s\" is after "
		                  "9999-12-31T23:59:59.999Z", s);
	char buf[LR_TIME_BUF];
	lr_rfc3339_format(ms, buf);
	return json_object_set_new(norm, "not_before", json_string(buf)) == 0
	           ? 0
	           : lr_err_set(err, LR_ENOMEM, "out of memory");
}

static int normalise_after(const json_t *spec, const char *id, json_t *norm, lr_err *err)
{
	json_t *v = json_object_get(spec, "after");
	if (v == NULL)
		return 0;
	if (!json_is_array(v))
		return lr_err_set(err, LR_EINVAL, "after: expected an array of task ids");
	if (json_array_size(v) > LR_AFTER_MAX)
		return lr_err_set(err, LR_EINVAL, "after: %zu ids, at most %d", json_array_size(v),
		                  LR_AFTER_MAX);
	size_t i;
	json_t *dep;
	json_array_foreach(v, i, dep) {
		char path[32];
		const char *s = NULL;
		snprintf(path, sizeof(path), "after[%zu]", i);
		int rc = lr_json_string(dep, 1, LR_ID_SIZE - 1, path, &s, err);
		if (rc != 0)
			return rc;
		if (!lr_id_valid(s))
			return lr_err_set(err, LR_EINVAL, "%s: \"%.64s\" is not a task id", path, s);
		if (id != NULL && strcmp(s, id) == 0)
			return lr_err_set(err, LR_EINVAL, "%s: a task cannot wait for itself", path);
		for (size_t j = 0; j < i; j++)
			if (strcmp(json_string_value(json_array_get(v, j)), s) == 0)
				return lr_err_set(err, LR_EINVAL, "%s: %s is named twice", path, s);
	}
	if (json_array_size(v) == 0)
		return 0; /* waits for nothing: the same spec as without */
	return json_object_set_new(norm, "after", json_deep_copy(v)) == 0
	           ? 0
	           : lr_err_set(err, LR_ENOMEM, "out of memory");
}

bool lr_sched_start_at(json_t *spec, int64_t not_before_ms)
{
	if (not_before_ms <= 0 || json_object_get(spec, "not_before") != NULL)
		return false;
	char at[LR_TIME_BUF];
	lr_rfc3339_format(not_before_ms, at);
	return json_object_set_new(spec, "not_before", json_string(at)) == 0;
}

int lr_sched_normalise(const json_t *spec, const char *id, json_t *norm, lr_err *err)
{
	json_t *p = json_object_get(spec, "priority");
	if (p != NULL) {
		int64_t n;
		int rc = lr_json_int(p, LR_PRIORITY_MIN, LR_PRIORITY_MAX, "priority", &n, err);
		if (rc != 0)
			return rc;
		/* 0 is what no priority means: left out, the same spec. */
		if (n != 0)
			json_object_set_new(norm, "priority", json_integer((json_int_t)n));
	}
	int rc = normalise_not_before(spec, norm, err);
	return rc != 0 ? rc : normalise_after(spec, id, norm, err);
}

int lr_sched_from_json(const json_t *obj, lr_sched *out)
{
	memset(out, 0, sizeof(*out));
	json_t *p = json_object_get(obj, "priority");
	json_t *nb = json_object_get(obj, "not_before");
	json_t *after = json_object_get(obj, "after");
	if (json_is_integer(p) && json_integer_value(p) >= LR_PRIORITY_MIN &&
	    json_integer_value(p) <= LR_PRIORITY_MAX)
		out->priority = (int)json_integer_value(p);
	if (json_is_string(nb) && lr_rfc3339_parse(json_string_value(nb), &out->not_before_ms) != 0)
		return LR_EINVAL;
	if (!json_is_array(after) || json_array_size(after) == 0)
		return 0;
	size_t n = json_array_size(after) < LR_AFTER_MAX ? json_array_size(after) : LR_AFTER_MAX;
	out->after = calloc(n, sizeof(*out->after));
	if (out->after == NULL)
		return LR_ENOMEM;
	for (size_t i = 0; i < n; i++) {
		const char *s = json_string_value(json_array_get(after, i));
		if (s != NULL && lr_id_valid(s))
			snprintf(out->after[out->n_after++], LR_ID_SIZE, "%s", s);
	}
	return 0;
}

/* Whether text may name one of the fields: most specs need no parse. */
static bool may_name_fields(const char *text, size_t len)
{
	return text != NULL && (memmem(text, len, "\"priority\"", 10) != NULL ||
	                        memmem(text, len, "\"not_before\"", 12) != NULL ||
	                        memmem(text, len, "\"after\"", 7) != NULL);
}

bool lr_sched_from_text(const char *text, size_t len, lr_sched *out)
{
	memset(out, 0, sizeof(*out));
	if (!may_name_fields(text, len))
		return false;
	json_t *doc = json_loadb(text, len, 0, NULL);
	bool ok = json_is_object(doc) && lr_sched_from_json(doc, out) == 0;
	json_decref(doc);
	if (!ok)
		lr_sched_clear(out);
	return ok && (out->priority != 0 || out->not_before_ms != 0 || out->n_after > 0);
}

void lr_sched_clear(lr_sched *s)
{
	free(s->after);
	memset(s, 0, sizeof(*s));
}

char *lr_sched_record_of_text(const char *text, size_t len)
{
	if (!may_name_fields(text, len))
		return NULL;
	json_t *doc = json_loadb(text, len, 0, NULL);
	char *rec = json_is_object(doc) ? lr_sched_record(doc, NULL) : NULL;
	json_decref(doc);
	return rec;
}

char *lr_sched_record(const json_t *spec, const json_t *extra)
{
	json_t *rec = json_object();
	static const char *const fields[] = { "priority", "not_before", "after" };
	for (size_t i = 0; rec != NULL && i < 3; i++) {
		json_t *v = json_object_get(spec, fields[i]);
		if (v != NULL)
			json_object_set(rec, fields[i], v);
	}
	if (rec != NULL && extra != NULL)
		json_object_update(rec, (json_t *)extra);
	char *text = rec != NULL && json_object_size(rec) > 0
	                 ? json_dumps(rec, JSON_COMPACT | JSON_SORT_KEYS)
	                 : NULL;
	json_decref(rec);
	return text;
}
