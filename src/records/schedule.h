/* schedule.h - when a task may start: "not_before" (a wall-clock time),
 * "priority" (-100..100, higher first) and "after" (tasks that must have
 * succeeded first); their validation, and the queue record that keeps them
 * readable without the spec (P queue/<id>). Pure functions; any thread. */
#ifndef LR_RECORDS_SCHEDULE_H
#define LR_RECORDS_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "leaserun.h"

#define LR_PRIORITY_MIN (-100)
#define LR_PRIORITY_MAX 100
#define LR_AFTER_MAX 64

typedef struct lr_sched {
	int priority;            /* 0 when not given */
	int64_t not_before_ms;   /* unix ms; 0: none */
	size_t n_after;
	char (*after)[LR_ID_SIZE]; /* malloc'd, n_after ids */
} lr_sched;

/* Validate "not_before", "priority" and "after" of spec and copy those
 * given into norm (absent ones stay absent: a spec without them is stored
 * as before). not_before is kept as RFC 3339 UTC to the millisecond;
 * after must not name id itself nor an id twice. Messages name the field
 * ("after[2]: ..."). */
int lr_sched_normalise(const json_t *spec, const char *id, json_t *norm, lr_err *err);
/* Give spec a start time (unix ms, submit --in) unless it has one; true
 * when it was given (the spec is to be validated again: the time may be
 * out of range, or take it over the size limit). */
bool lr_sched_start_at(json_t *spec, int64_t not_before_ms);

/* The fields of a normalised spec, or of a queue record (the same names).
 * Returns 0, LR_ENOMEM, or LR_EINVAL for a record that does not parse. */
int lr_sched_from_json(const json_t *obj, lr_sched *out);
/* The same from JSON text, which most specs do not need parsed for it:
 * false (and *out zeroed) when the text names none of the fields. */
bool lr_sched_from_text(const char *text, size_t len, lr_sched *out);
void lr_sched_clear(lr_sched *s);

/* Whether a dependency's tasks/ key, created at dep_rev, is not the task
 * its dependent (created at own_rev; 0: not known) named: submit stores a
 * task only after its dependencies, so one created later is another task
 * of that id, submitted again once the named one was purged. */
static inline bool lr_sched_dep_resubmitted(int64_t dep_rev, int64_t own_rev)
{
	return own_rev > 0 && dep_rev > own_rev;
}

/* The queue record of a normalised spec: {"priority","not_before","after"}
 * with the fields it gives, plus extra (may be NULL; borrowed) merged in.
 * New string (free()); NULL when the spec gives none and extra is NULL. */
char *lr_sched_record(const json_t *spec, const json_t *extra);

/* The queue record of a spec given as text; NULL when it gives none of
 * the fields. */
char *lr_sched_record_of_text(const char *text, size_t len);

#endif
