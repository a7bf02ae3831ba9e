/* spec.h - the task spec: parsing, validation into the normalised form that is
 * stored under tasks/<id>, and read-only accessors. Any thread; no shared state. */
#ifndef LR_SPEC_H
#define LR_SPEC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "leaserun.h"

#define LR_SPEC_MAX_BYTES (1 << 20)       /* spec text, and its stored form */
#define LR_STATE_MAX_BYTES (512 * 1024)   /* state, JSON_COMPACT-encoded */
/* Arrays and objects nested in a state: records hold it a level or two
 * down, and jansson parses 2048 levels at most. */
#define LR_STATE_MAX_DEPTH 1000
#define LR_MAX_STEPS 1000
/* A step's name: it names the step in records, errors and
 * LEASERUN_STEP_NAME. */
#define LR_STEP_NAME_MAX_BYTES 1024
/* A step's `run` and an env entry ("NAME=value"): the longest single
 * argument or environment string Linux's execve takes (MAX_ARG_STRLEN,
 * 128 KiB with its NUL). */
#define LR_EXEC_STRING_MAX_BYTES (128 * 1024 - 1)
#define LR_MAX_ATTEMPTS 1000              /* upper bound of max_attempts */
/* A step timeout is a guard against a hung step, not a schedule: a week is
 * longer than any step we expect, and the bound keeps timeout_s * 1000 far
 * from overflow wherever it is turned into a deadline. */
#define LR_STEP_TIMEOUT_MAX_S (7 * 24 * 3600)

/* A generated id and its NUL. (Any id fits LR_ID_SIZE, leaserun.h.) */
#define LR_ID_GEN_BUF 33

/* Parse spec text (len bytes, need not be NUL-terminated) and validate it as
 * lr_spec_validate does with no id override. Text over LR_SPEC_MAX_BYTES is
 * refused before parsing; a syntax error reads "line L, column C: <reason>".
 * On success *out is a new reference to the normalised spec. */
int lr_spec_parse(const char *text, size_t len, json_t **out, lr_err *err);

/* lr_spec_parse with an id given apart from the text (submit --id), which
 * must agree with the spec's own id if it has one. id_override may be NULL. */
int lr_spec_parse_with_id(const char *text, size_t len, const char *id_override,
                          json_t **out, lr_err *err);

/* Validate spec (borrowed, not modified) and build its normalised form: every
 * field present, defaults filled, no unknown field. id_override (may be NULL)
 * supplies the id when the spec has none; when both are given they must be
 * equal. With neither, an id is generated. On success *out is a new
 * reference sharing nothing with spec. Errors name the field path, e.g.
 * `steps[2].timeout_s: expected a non-negative integer, got "ten"`. */
int lr_spec_validate(json_t *spec, const char *id_override, json_t **out,
                     lr_err *err);

/* A spec read back from tasks/<key_id>: parsed and validated like a submitted
 * one (but for the limit on its normalised size, which is on what is written
 * to etcd); its id must be present and equal key_id. *out: new reference. */
int lr_spec_from_record(const char *value, size_t len, const char *key_id,
                        json_t **out, lr_err *err);

/* The canonical stored value of a normalised spec: compact, keys sorted, so
 * equal specs encode to identical bytes. Caller frees with free(); NULL when
 * out of memory. */
char *lr_spec_encode(const json_t *spec);

/* A new time-ordered task id, "YYYYMMDD-HHMMSS-mmm-<12 hex>" in UTC: ids sort
 * by creation time to the millisecond; 48 random bits keep ids made in the
 * same millisecond (by any runner anywhere) apart. size >= LR_ID_GEN_BUF. */
int lr_id_generate(char *buf, size_t size, lr_err *err);

/* The alphabet of the id rule (lr_id_valid, leaserun.h). */
int lr_id_char(char c);

/* Accessors of a normalised spec (as built by lr_spec_validate; anything else
 * is a bug). Strings and json_t values are borrowed from spec. */
const char *lr_spec_id(const json_t *spec);
size_t lr_spec_steps(const json_t *spec);
const char *lr_spec_step_name(const json_t *spec, size_t i);
/* The step object {"name","run","timeout_s"} at i (borrowed), NULL past
 * the end. */
const json_t *lr_spec_step(const json_t *spec, size_t i);
int64_t lr_spec_max_attempts(const json_t *spec);
int64_t lr_spec_backoff_ms(const json_t *spec);
json_t *lr_spec_env(const json_t *spec);   /* borrowed */
json_t *lr_spec_state(const json_t *spec);
/* The spec's locks and limits: *out a new lockset (free()), NULL when it
 * has neither. */
struct lr_lockset;
int lr_spec_lockset(const json_t *spec, struct lr_lockset **out, lr_err *err); /* borrowed */

/* Checks of one JSON value, shared by spec and record decoding so that every
 * message has the same shape: "<path>: <what is wrong>". v is borrowed and may
 * be NULL, which means the field is missing. */

/* Why jansson could not parse a text, for a message: "line L, column C:
 * <what>" (the position when known), with bytes that are not printable
 * UTF-8 shown as '?'. A buffer of LR_JSON_SYNTAX_ERROR_SIZE holds it all. */
#define LR_JSON_SYNTAX_ERROR_SIZE (JSON_ERROR_TEXT_LENGTH + 40)
void lr_json_syntax_error(const json_error_t *je, char *buf, size_t size);

/* Parse len bytes (need not be NUL-terminated) as one JSON object, rejecting
 * duplicate keys. *out: new reference. */
int lr_json_load_object(const char *text, size_t len, json_t **out,
                        lr_err *err);

/* A short rendering of v for "got ..." in messages: "ten" (quoted, cut at 40
 * bytes), -1, 1.5, true, null, an object, an array. */
void lr_json_describe(const json_t *v, char *buf, size_t size);

/* v is a JSON integer (not a real, not a boolean) in lo..hi. */
int lr_json_int(const json_t *v, int64_t lo, int64_t hi, const char *path,
                int64_t *out, lr_err *err);

/* v is a string of min_len..max_len bytes; *out is borrowed from v. */
int lr_json_string(const json_t *v, size_t min_len, size_t max_len,
                   const char *path, const char **out, lr_err *err);

/* v nests arrays and objects more than depth levels deep (looking no
 * deeper): a document that would not be read back. */
bool lr_json_nests_over(const json_t *v, int depth);

/* v encodes (JSON_COMPACT) to at most LR_STATE_MAX_BYTES and nests at
 * most LR_STATE_MAX_DEPTH deep: LR_ETOOLARGE when it is larger, LR_EINVAL
 * when it is deeper or cannot be encoded. */
int lr_json_check_state(const json_t *v, const char *path, lr_err *err);

#endif
