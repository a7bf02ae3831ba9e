/* spec.c - validating a task spec and building its normalised, stored form.
 * Pure functions on JSON values owned by the caller; any thread. */
#include "records/spec.h"
#include "records/schedule.h"

#include "records/lockset.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/backoff.h"
#include "base/error.h"
#include "base/utf8.h"

#define DEFAULT_MAX_ATTEMPTS 5
#define DEFAULT_BACKOFF_MS 1000
#define DESCRIBE_BYTES 40 /* of a string quoted in a message */
#define DESCRIBE_BUF 128
#define PATH_BUF 256

static const char *const top_fields[] = {
	"id", "steps", "state", "max_attempts", "retry_backoff_ms", "env", "locks",
	"limits", "not_before", "priority", "after", NULL,
};
static const char *const step_fields[] = { "name", "run", "timeout_s", NULL };

/* ---- checks of one JSON value, shared with record.c ---- */

/* s quoted, escaped by lr_utf8_escape; "..." before the closing quote
 * when cut. size: at least 6. */
static void describe_bytes(const char *s, size_t len, bool cut, char *buf, size_t size)
{
	if (size < 6) {
		buf[0] = '\0';
		return;
	}
	buf[0] = '"';
	cut |= lr_utf8_escape(s, len, SIZE_MAX, buf + 1, size - 5) < len;
	strcat(buf, cut ? "...\"" : "\"");
}

/* A string quoted as JSON (so control characters stay escaped and the
 * message stays on one line), cut at a character boundary. */
static void describe_string(const char *s, size_t len, char *buf, size_t size)
{
	size_t cut = len < DESCRIBE_BYTES ? len : DESCRIBE_BYTES;
	while (cut > 0 && cut < len && ((unsigned char)s[cut] & 0xC0) == 0x80)
		cut--;
	json_t *str = json_stringn(s, cut);
	char *quoted = str ? json_dumps(str, JSON_ENCODE_ANY) : NULL;
	size_t qlen = quoted ? strlen(quoted) : 0;

	if (qlen < 2)
		describe_bytes(s, cut, cut < len, buf, size);
	else if (cut < len) /* drop the closing quote, mark the cut inside */
		snprintf(buf, size, "%.*s...\"", (int)(qlen - 1), quoted);
	else
		snprintf(buf, size, "%s", quoted);
	free(quoted);
	json_decref(str);
}

/* 5.0 must not read "5": the message is about it not being an integer. */
static void describe_real(double d, char *buf, size_t size)
{
	snprintf(buf, size, "%g", d);
	if (strpbrk(buf, ".eni") == NULL)
		snprintf(buf + strlen(buf), size - strlen(buf), ".0");
}

void lr_json_describe(const json_t *v, char *buf, size_t size)
{
	if (size == 0)
		return;
	if (v == NULL) {
		snprintf(buf, size, "nothing");
		return;
	}
	switch (json_typeof(v)) {
	case JSON_OBJECT: snprintf(buf, size, "an object"); break;
	case JSON_ARRAY: snprintf(buf, size, "an array"); break;
	case JSON_STRING:
		describe_string(json_string_value(v), json_string_length(v),
		                buf, size);
		break;
	case JSON_INTEGER:
		snprintf(buf, size, "%" JSON_INTEGER_FORMAT,
		         json_integer_value(v));
		break;
	case JSON_REAL: describe_real(json_real_value(v), buf, size); break;
	case JSON_TRUE: snprintf(buf, size, "true"); break;
	case JSON_FALSE: snprintf(buf, size, "false"); break;
	case JSON_NULL: snprintf(buf, size, "null"); break;
	}
}

/* The length of the UTF-8 sequence at s (at most len bytes), 0 when s does
 * not start a complete, shortest-form sequence of a valid code point. */
static size_t utf8_char(const unsigned char *s, size_t len)
{
	size_t n;
	unsigned char lo = 0x80, hi = 0xBF;
	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xC2 && s[0] <= 0xDF)
		n = 2;
	else if (s[0] >= 0xE0 && s[0] <= 0xEF)
		n = 3;
	else if (s[0] >= 0xF0 && s[0] <= 0xF4)
		n = 4;
	else
		return 0;
	if (s[0] == 0xE0)
		lo = 0xA0; /* overlong */
	else if (s[0] == 0xED)
		hi = 0x9F; /* surrogates */
	else if (s[0] == 0xF0)
		lo = 0x90; /* overlong */
	else if (s[0] == 0xF4)
		hi = 0x8F; /* over U+10FFFF */
	if (len < n || s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < n; i++)
		if (s[i] < 0x80 || s[i] > 0xBF)
			return 0;
	return n;
}

/* text (len bytes, or up to a NUL) as valid UTF-8 on one line in buf: a
 * byte that starts no complete UTF-8 sequence, and a control character,
 * become '?'; a cut falls between characters. The parser quotes its input
 * byte for byte in its messages ("invalid escape near '...'"), and the
 * messages go to logs and into done/<id> records, which must be valid
 * UTF-8: a message that is not would keep the failure from being stored. */
static void printable(const char *text, size_t len, char *buf, size_t size)
{
	const unsigned char *s = (const unsigned char *)text;
	size_t o = 0;
	for (size_t i = 0; i < len && s[i] != '\0';) {
		size_t n = utf8_char(s + i, len - i);
		if (n == 0 || (n == 1 && (s[i] < 0x20 || s[i] == 0x7F))) {
			if (o + 1 >= size)
				break;
			buf[o++] = '?';
			i++;
			continue;
		}
		if (o + n >= size)
			break;
		memcpy(buf + o, s + i, n);
		o += n;
		i += n;
	}
	buf[o] = '\0';
}

static int type_error(const char *path, const char *expected, const json_t *v,
                      lr_err *err)
{
	char got[DESCRIBE_BUF];
	lr_json_describe(v, got, sizeof(got));
	return lr_err_set(err, LR_EINVAL, "%s: expected %s, got %s", path,
	                  expected, got);
}

static int nomem(lr_err *err)
{
	return lr_err_set(err, LR_ENOMEM, "out of memory");
}

void lr_json_syntax_error(const json_error_t *je, char *buf, size_t size)
{
	char why[JSON_ERROR_TEXT_LENGTH];
	printable(je->text, sizeof(je->text), why, sizeof(why));
	/* jansson names its own flag: "\u0000 is not allowed without
	 * JSON_ALLOW_NUL". Nothing leaserun reads allows one. */
	static const char flag[] = " without JSON_ALLOW_NUL";
	char *at = strstr(why, flag);
	if (at != NULL)
		memmove(at, at + sizeof(flag) - 1, strlen(at + sizeof(flag) - 1) + 1);
	if (je->line > 0)
		snprintf(buf, size, "line %d, column %d: %s", je->line, je->column, why);
	else
		snprintf(buf, size, "%s", why);
}

int lr_json_load_object(const char *text, size_t len, json_t **out,
                        lr_err *err)
{
	json_error_t je;
	size_t blank = 0;

	if (text == NULL)
		len = 0;
	while (blank < len && text[blank] != '\0' &&
	       strchr(" \t\r\n", text[blank]) != NULL)
		blank++;
	if (blank == len)
		return lr_err_set(err, LR_EINVAL, "empty, expected a JSON object");
	/* DECODE_ANY so that "[]" or "42" get "expected a JSON object, got
	 * an array" instead of jansson's terser complaint. */
	json_t *v = json_loadb(text, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY,
	                       &je);
	if (v == NULL) {
		char why[LR_JSON_SYNTAX_ERROR_SIZE];
		if (json_error_code(&je) == json_error_out_of_memory)
			return nomem(err);
		lr_json_syntax_error(&je, why, sizeof(why));
		return lr_err_set(err, LR_EINVAL, "%s", why);
	}
	if (!json_is_object(v)) {
		char got[DESCRIBE_BUF];
		lr_json_describe(v, got, sizeof(got));
		json_decref(v);
		return lr_err_set(err, LR_EINVAL,
		                  "expected a JSON object, got %s", got);
	}
	*out = v;
	return 0;
}

static const char *int_kind(int64_t lo)
{
	if (lo == 0)
		return "a non-negative integer";
	if (lo == 1)
		return "a positive integer";
	return "an integer";
}

int lr_json_int(const json_t *v, int64_t lo, int64_t hi, const char *path,
                int64_t *out, lr_err *err)
{
	if (v == NULL)
		return lr_err_set(err, LR_EINVAL, "%s: missing", path);
	/* json_is_integer is false for 1.5, 5.0 and true alike. */
	if (!json_is_integer(v))
		return type_error(path, int_kind(lo), v, err);
	int64_t n = json_integer_value(v);
	if (n >= lo && n <= hi) {
		*out = n;
		return 0;
	}
	if (hi == INT64_MAX)
		return lr_err_set(err, LR_EINVAL,
		                  "%s: %" PRId64 " is out of range (at least %" PRId64 ")",
		                  path, n, lo);
	return lr_err_set(err, LR_EINVAL,
	                  "%s: %" PRId64 " is out of range %" PRId64 "..%" PRId64,
	                  path, n, lo, hi);
}

int lr_json_string(const json_t *v, size_t min_len, size_t max_len,
                   const char *path, const char **out, lr_err *err)
{
	if (v == NULL)
		return lr_err_set(err, LR_EINVAL, "%s: missing", path);
	if (!json_is_string(v))
		return type_error(path, "a string", v, err);
	const char *s = json_string_value(v);
	size_t len = json_string_length(v);
	/* The parser refuses \u0000, but a value built in code may hold one,
	 * and every user of these strings treats them as C strings. */
	if (strlen(s) != len)
		return lr_err_set(err, LR_EINVAL, "%s: contains a NUL character",
		                  path);
	if (len < min_len && min_len == 1)
		return lr_err_set(err, LR_EINVAL, "%s: must not be empty", path);
	if (len < min_len)
		return lr_err_set(err, LR_EINVAL,
		                  "%s: %zu bytes, under the minimum of %zu",
		                  path, len, min_len);
	if (len > max_len)
		return lr_err_set(err, LR_EINVAL,
		                  "%s: %zu bytes, over the limit of %zu", path,
		                  len, max_len);
	*out = s;
	return 0;
}

bool lr_json_nests_over(const json_t *v, int left)
{
	if (!json_is_array(v) && !json_is_object(v))
		return false;
	if (left == 0)
		return true;
	size_t i;
	const char *k;
	json_t *e;
	if (json_is_array(v)) {
		json_array_foreach(v, i, e)
			if (lr_json_nests_over(e, left - 1))
				return true;
	} else {
		json_object_foreach((json_t *)v, k, e)
			if (lr_json_nests_over(e, left - 1))
				return true;
	}
	return false;
}

int lr_json_check_state(const json_t *v, const char *path, lr_err *err)
{
	if (lr_json_nests_over(v, LR_STATE_MAX_DEPTH))
		return lr_err_set(err, LR_EINVAL, "%s: arrays and objects nested over %d deep",
		                  path, LR_STATE_MAX_DEPTH);
	/* With no buffer, json_dumpb only measures. */
	size_t n = json_dumpb(v, NULL, 0, JSON_COMPACT | JSON_ENCODE_ANY);
	if (n == 0)
		return lr_err_set(err, LR_EINVAL, "%s: cannot be encoded as JSON",
		                  path);
	if (n > LR_STATE_MAX_BYTES)
		return lr_err_set(err, LR_ETOOLARGE,
		                  "%s: %zu bytes encoded, over the %d KiB limit (%d bytes)",
		                  path, n, LR_STATE_MAX_BYTES / 1024, LR_STATE_MAX_BYTES);
	return 0;
}

/* ---- ids ---- */

int lr_id_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
	       (c >= '0' && c <= '9') || c == '.' || c == '_' || c == ':' ||
	       c == '-';
}

int lr_id_valid(const char *id)
{
	if (id == NULL)
		return 0;
	size_t len = strlen(id);
	if (len < 1 || len >= LR_ID_SIZE)
		return 0;
	for (size_t i = 0; i < len; i++)
		if (!lr_id_char(id[i]))
			return 0;
	return 1;
}

static int check_id(const char *id, lr_err *err)
{
	size_t len = strlen(id);
	char shown[DESCRIBE_BUF];

	if (len == 0)
		return lr_err_set(err, LR_EINVAL, "id: must not be empty");
	if (len >= LR_ID_SIZE)
		return lr_err_set(err, LR_EINVAL,
		                  "id: %zu characters, over the limit of %d", len,
		                  LR_ID_SIZE - 1);
	if (lr_id_valid(id))
		return 0;
	describe_string(id, len, shown, sizeof(shown));
	return lr_err_set(err, LR_EINVAL,
	                  "id: %s may only contain letters, digits, '.', '_', ':' and '-'",
	                  shown);
}

int lr_id_generate(char *buf, size_t size, lr_err *err)
{
	struct timespec ts;
	struct tm tm;
	unsigned char r[6];
	int rc;

	if (size < LR_ID_GEN_BUF)
		return lr_err_set(err, LR_EINVAL, "id buffer of %zu bytes is too small",
		                  size);
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0 ||
	    gmtime_r(&ts.tv_sec, &tm) == NULL)
		return lr_err_set(err, LR_ESYS, "reading the clock failed");
	rc = lr_random_bytes(r, sizeof(r), err);
	if (rc != 0)
		return rc;
	snprintf(buf, size, "%04d%02d%02d-%02d%02d%02d-%03ld-%02x%02x%02x%02x%02x%02x",
	         tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
	         tm.tm_min, tm.tm_sec, ts.tv_nsec / 1000000L, r[0], r[1], r[2],
	         r[3], r[4], r[5]);
	return 0;
}

/* ---- normalisation ---- */

/* Add value to obj under key; value is stolen even on failure, and NULL
 * (a failed constructor) counts as out of memory. */
static int put(json_t *obj, const char *key, json_t *value, lr_err *err)
{
	if (json_object_set_new(obj, key, value) != 0)
		return nomem(err);
	return 0;
}

/* "a, b, c" of a NULL-terminated list, for "known fields" hints. */
static void join(const char *const *names, char *buf, size_t size)
{
	size_t used = 0;
	buf[0] = '\0';
	for (size_t i = 0; names[i] != NULL && used < size; i++)
		used += (size_t)snprintf(buf + used, size - used, "%s%s",
		                         i ? ", " : "", names[i]);
}

static int check_known_fields(json_t *obj, const char *const *known,
                              const char *where, lr_err *err)
{
	const char *key;
	json_t *v;

	json_object_foreach(obj, key, v) {
		size_t i = 0;
		while (known[i] != NULL && strcmp(known[i], key) != 0)
			i++;
		if (known[i] != NULL)
			continue;
		char shown[DESCRIBE_BUF], list[DESCRIBE_BUF];
		describe_string(key, strlen(key), shown, sizeof(shown));
		join(known, list, sizeof(list));
		return lr_err_set(err, LR_EINVAL,
		                  "%s%sunknown field %s (known fields: %s)",
		                  where ? where : "", where ? ": " : "", shown,
		                  list);
	}
	return 0;
}

static int normalise_id(json_t *spec, const char *id_override, json_t *norm,
                        lr_err *err)
{
	json_t *v = json_object_get(spec, "id");
	const char *id = NULL;
	char generated[LR_ID_GEN_BUF];
	int rc;

	if (v != NULL) {
		rc = lr_json_string(v, 0, SIZE_MAX, "id", &id, err);
		if (rc == 0)
			rc = check_id(id, err);
		if (rc != 0)
			return rc;
	}
	if (id_override != NULL) {
		rc = check_id(id_override, err);
		if (rc != 0)
			return rc;
		if (id != NULL && strcmp(id, id_override) != 0) {
			char a[DESCRIBE_BUF], b[DESCRIBE_BUF];
			describe_string(id, strlen(id), a, sizeof(a));
			describe_string(id_override, strlen(id_override), b,
			                sizeof(b));
			return lr_err_set(err, LR_EINVAL,
			                  "id: the spec says %s but the id given is %s",
			                  a, b);
		}
		id = id_override;
	}
	if (id == NULL) {
		rc = lr_id_generate(generated, sizeof(generated), err);
		if (rc != 0)
			return rc;
		id = generated;
	}
	return put(norm, "id", json_string(id), err);
}

/* "steps[i]" or "steps[i].field" into buf (PATH_BUF bytes), for messages.
 * Made for every field of every step a claim reads, so without printf. */
static const char *step_path(char *buf, size_t i, const char *field)
{
	char digits[24];
	size_t nd = 0;
	do {
		digits[nd++] = (char)('0' + i % 10);
		i /= 10;
	} while (i > 0);
	size_t n = 0;
	memcpy(buf, "steps[", 6);
	n += 6;
	while (nd > 0)
		buf[n++] = digits[--nd];
	buf[n++] = ']';
	if (field != NULL) {
		size_t fl = strlen(field); /* field names are short literals */
		buf[n++] = '.';
		memcpy(buf + n, field, fl);
		n += fl;
	}
	buf[n] = '\0';
	return buf;
}

/* Step i of the input, checked, appended to out; seen maps the names so far
 * to their index (handlers and logs find steps by name, so two steps may not
 * share one). */
static int normalise_step(json_t *steps, size_t i, json_t *out, json_t *seen,
                          lr_err *err)
{
	json_t *in = json_array_get(steps, i);
	char path[PATH_BUF];
	const char *name, *run;
	int64_t timeout_s = 0;
	int rc;

	if (!json_is_object(in))
		return type_error(step_path(path, i, NULL), "an object", in, err);
	rc = check_known_fields(in, step_fields, step_path(path, i, NULL), err);
	if (rc != 0)
		return rc;

	rc = lr_json_string(json_object_get(in, "name"), 1, LR_STEP_NAME_MAX_BYTES,
	                    step_path(path, i, "name"), &name, err);
	if (rc != 0)
		return rc;
	json_t *prev = json_object_get(seen, name);
	if (prev != NULL) {
		char shown[DESCRIBE_BUF];
		describe_string(name, strlen(name), shown, sizeof(shown));
		return lr_err_set(err, LR_EINVAL,
		                  "%s: %s is already the name of steps[%" JSON_INTEGER_FORMAT "]",
		                  path, shown, json_integer_value(prev));
	}
	rc = put(seen, name, json_integer((json_int_t)i), err);
	if (rc != 0)
		return rc;

	rc = lr_json_string(json_object_get(in, "run"), 1, LR_EXEC_STRING_MAX_BYTES,
	                    step_path(path, i, "run"), &run, err);
	if (rc != 0)
		return rc;

	json_t *t = json_object_get(in, "timeout_s");
	if (t != NULL) {
		rc = lr_json_int(t, 0, LR_STEP_TIMEOUT_MAX_S,
		                 step_path(path, i, "timeout_s"), &timeout_s, err);
		if (rc != 0)
			return rc;
	}

	json_t *step = json_object();
	if (step == NULL || json_array_append_new(out, step) != 0 ||
	    put(step, "name", json_string(name), err) != 0 ||
	    put(step, "run", json_string(run), err) != 0 ||
	    put(step, "timeout_s", json_integer((json_int_t)timeout_s), err) != 0)
		return nomem(err);
	return 0;
}

static int normalise_steps(json_t *spec, json_t *norm, lr_err *err)
{
	json_t *steps = json_object_get(spec, "steps");
	json_t *out = json_array();
	json_t *seen = json_object();
	size_t n = json_array_size(steps);
	int rc = 0;

	if (steps == NULL) {
		rc = lr_err_set(err, LR_EINVAL,
		                "steps: missing (a task has 1 to %d steps)",
		                LR_MAX_STEPS);
		goto cleanup;
	}
	if (!json_is_array(steps)) {
		rc = type_error("steps", "an array", steps, err);
		goto cleanup;
	}
	if (n == 0 || n > LR_MAX_STEPS) {
		rc = lr_err_set(err, LR_EINVAL,
		                "steps: %zu steps, a task has 1 to %d", n,
		                LR_MAX_STEPS);
		goto cleanup;
	}
	if (out == NULL || seen == NULL) {
		rc = nomem(err);
		goto cleanup;
	}
	for (size_t i = 0; i < n && rc == 0; i++)
		rc = normalise_step(steps, i, out, seen, err);
	if (rc == 0)
		rc = put(norm, "steps", json_incref(out), err);
cleanup:
	json_decref(out);
	json_decref(seen);
	return rc;
}

static int normalise_state(json_t *spec, json_t *norm, lr_err *err)
{
	json_t *v = json_object_get(spec, "state");
	if (v == NULL)
		return put(norm, "state", json_object(), err);
	/* Any JSON value is a state; only its size is limited. A spec with
	 * too large a state is an invalid spec, whatever the reason. */
	if (lr_json_check_state(v, "state", err) != 0)
		return lr_err_set_code(err, LR_EINVAL);
	return put(norm, "state", json_deep_copy(v), err);
}

/* An optional integer field with a default. */
static int normalise_int(json_t *spec, const char *key, int64_t lo,
                         int64_t hi, int64_t dflt, json_t *norm, lr_err *err)
{
	json_t *v = json_object_get(spec, key);
	int64_t n = dflt;
	if (v != NULL) {
		int rc = lr_json_int(v, lo, hi, key, &n, err);
		if (rc != 0)
			return rc;
	}
	return put(norm, key, json_integer((json_int_t)n), err);
}

static int env_name_valid(const char *name)
{
	if (!((name[0] >= 'A' && name[0] <= 'Z') ||
	      (name[0] >= 'a' && name[0] <= 'z') || name[0] == '_'))
		return 0;
	for (const char *p = name + 1; *p != '\0'; p++)
		if (!((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
		      (*p >= '0' && *p <= '9') || *p == '_'))
			return 0;
	return 1;
}

static int check_env_entry(const char *name, json_t *value, lr_err *err)
{
	char shown[DESCRIBE_BUF], path[PATH_BUF];
	const char *s;

	describe_string(name, strlen(name), shown, sizeof(shown));
	if (!env_name_valid(name))
		return lr_err_set(err, LR_EINVAL,
		                  "env: %s is not a variable name (letters, digits and '_', not starting with a digit)",
		                  shown);
	/* The runner sets LEASERUN_* for each step; a spec must not be able
	 * to fake its task id, fence or state files. */
	if (strncmp(name, "LEASERUN_", 9) == 0)
		return lr_err_set(err, LR_EINVAL,
		                  "env: %s is reserved: LEASERUN_ variables are set by the runner",
		                  shown);
	if (strlen(name) > LR_STEP_NAME_MAX_BYTES)
		return lr_err_set(err, LR_EINVAL, "env: %s: a name over %d bytes", shown,
		                  LR_STEP_NAME_MAX_BYTES);
	snprintf(path, sizeof(path), "env.%.200s", name);
	size_t room = LR_EXEC_STRING_MAX_BYTES - strlen(name) - 1; /* NAME=value */
	return lr_json_string(value, 0, room, path, &s, err);
}

static int normalise_env(json_t *spec, json_t *norm, lr_err *err)
{
	json_t *env = json_object_get(spec, "env");
	const char *name;
	json_t *value;

	if (env == NULL)
		return put(norm, "env", json_object(), err);
	if (!json_is_object(env))
		return type_error("env", "an object", env, err);
	json_object_foreach(env, name, value) {
		int rc = check_env_entry(name, value, err);
		if (rc != 0)
			return rc;
	}
	return put(norm, "env", json_deep_copy(env), err);
}

/* "locks" and "limits", kept as given when valid, left out when absent or
 * empty (so that a spec without them is stored as before, and one that
 * names none is the same spec). */
static int normalise_locks(json_t *spec, json_t *norm, lr_err *err)
{
	json_t *locks = json_object_get(spec, "locks");
	json_t *limits = json_object_get(spec, "limits");
	int rc = lr_lockset_parse(locks, limits, NULL, err);
	if (rc == 0 && json_object_size(locks) > 0)
		rc = put(norm, "locks", json_deep_copy(locks), err);
	if (rc == 0 && json_object_size(limits) > 0)
		rc = put(norm, "limits", json_deep_copy(limits), err);
	return rc;
}

/* lr_spec_validate without the limit on the normalised size. */
static int normalise(json_t *spec, const char *id_override, json_t **out, lr_err *err)
{
	json_t *norm = NULL;
	int rc;

	if (!json_is_object(spec))
		return type_error("spec", "a JSON object", spec, err);
	norm = json_object();
	if (norm == NULL)
		return nomem(err);
	rc = check_known_fields(spec, top_fields, NULL, err);
	if (rc != 0)
		goto cleanup;
	rc = normalise_id(spec, id_override, norm, err);
	if (rc != 0)
		goto cleanup;
	rc = normalise_steps(spec, norm, err);
	if (rc != 0)
		goto cleanup;
	rc = normalise_state(spec, norm, err);
	if (rc != 0)
		goto cleanup;
	rc = normalise_int(spec, "max_attempts", 1, LR_MAX_ATTEMPTS,
	                   DEFAULT_MAX_ATTEMPTS, norm, err);
	if (rc != 0)
		goto cleanup;
	rc = normalise_int(spec, "retry_backoff_ms", 0, LR_RETRY_MAX_MS,
	                   DEFAULT_BACKOFF_MS, norm, err);
	if (rc != 0)
		goto cleanup;
	rc = normalise_env(spec, norm, err);
	if (rc != 0)
		goto cleanup;
	rc = normalise_locks(spec, norm, err);
	if (rc != 0)
		goto cleanup;
	rc = lr_sched_normalise(spec, lr_spec_id(norm), norm, err);
	if (rc != 0)
		goto cleanup;
	*out = norm;
	norm = NULL;
cleanup:
	json_decref(norm);
	return rc;
}

int lr_spec_validate(json_t *spec, const char *id_override, json_t **out,
                     lr_err *err)
{
	json_t *norm = NULL;
	int rc = normalise(spec, id_override, &norm, err);
	if (rc != 0)
		return rc;
	/* Filled defaults and a different layout can make the stored form
	 * longer than the text that passed the limit; the limit is on what
	 * reaches etcd. */
	size_t n = json_dumpb(norm, NULL, 0, JSON_COMPACT | JSON_SORT_KEYS);
	if (n > LR_SPEC_MAX_BYTES) {
		json_decref(norm);
		return lr_err_set(err, LR_EINVAL,
		                  "spec is %zu bytes once normalised, over the 1 MiB limit", n);
	}
	*out = norm;
	return 0;
}

int lr_spec_parse_with_id(const char *text, size_t len, const char *id_override,
                          json_t **out, lr_err *err)
{
	json_t *doc = NULL;
	int rc;

	/* Refused before parsing: a huge document costs memory and time to
	 * parse only to be refused anyway. */
	if (len > LR_SPEC_MAX_BYTES)
		return lr_err_set(err, LR_EINVAL,
		                  "spec is %zu bytes, over the 1 MiB limit", len);
	rc = lr_json_load_object(text, len, &doc, err);
	if (rc != 0)
		return rc;
	rc = lr_spec_validate(doc, id_override, out, err);
	json_decref(doc);
	return rc;
}

int lr_spec_parse(const char *text, size_t len, json_t **out, lr_err *err)
{
	return lr_spec_parse_with_id(text, len, NULL, out, err);
}

int lr_spec_from_record(const char *value, size_t len, const char *key_id,
                        json_t **out, lr_err *err)
{
	json_t *doc = NULL;
	json_t *id;
	int rc;

	if (key_id == NULL)
		return lr_err_set(err, LR_EINTERNAL, "stored spec read without its key");
	if (len > LR_SPEC_MAX_BYTES)
		return lr_err_set(err, LR_EINVAL,
		                  "stored spec is %zu bytes, over the 1 MiB limit",
		                  len);
	rc = lr_json_load_object(value, len, &doc, err);
	if (rc != 0)
		return rc;
	/* A stored spec always carries its id; one without would otherwise
	 * get a generated id and a confusing mismatch message. */
	id = json_object_get(doc, "id");
	if (id == NULL) {
		rc = lr_err_set(err, LR_EINVAL, "id: missing");
		goto cleanup;
	}
	if (json_is_string(id) && strcmp(json_string_value(id), key_id) != 0) {
		/* The key is as hostile as the value: anything may be in it. */
		char shown[DESCRIBE_BUF], key_shown[LR_ID_SIZE];
		lr_json_describe(id, shown, sizeof(shown));
		printable(key_id, strlen(key_id), key_shown, sizeof(key_shown));
		rc = lr_err_set(err, LR_EINVAL,
		                "id: %s does not match the key's id \"%s\"",
		                shown, key_shown);
		goto cleanup;
	}
	/* Not limited in its normalised size: that limit is on what reaches
	 * etcd, and a runner never writes a spec back. */
	rc = normalise(doc, NULL, out, err);
cleanup:
	json_decref(doc);
	return rc;
}

char *lr_spec_encode(const json_t *spec)
{
	return json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS);
}

/* ---- accessors ---- */

static json_t *step_at(const json_t *spec, size_t i)
{
	return json_array_get(json_object_get(spec, "steps"), i);
}

const char *lr_spec_id(const json_t *spec)
{
	return json_string_value(json_object_get(spec, "id"));
}

size_t lr_spec_steps(const json_t *spec)
{
	return json_array_size(json_object_get(spec, "steps"));
}

const json_t *lr_spec_step(const json_t *spec, size_t i)
{
	return step_at(spec, i);
}

const char *lr_spec_step_name(const json_t *spec, size_t i)
{
	return json_string_value(json_object_get(step_at(spec, i), "name"));
}

int64_t lr_spec_max_attempts(const json_t *spec)
{
	return json_integer_value(json_object_get(spec, "max_attempts"));
}

int64_t lr_spec_backoff_ms(const json_t *spec)
{
	return json_integer_value(json_object_get(spec, "retry_backoff_ms"));
}

json_t *lr_spec_env(const json_t *spec)
{
	return json_object_get(spec, "env");
}

int lr_spec_lockset(const json_t *spec, lr_lockset **out, lr_err *err)
{
	return lr_lockset_parse(json_object_get(spec, "locks"),
	                        json_object_get(spec, "limits"), out, err);
}

json_t *lr_spec_state(const json_t *spec)
{
	return json_object_get(spec, "state");
}
