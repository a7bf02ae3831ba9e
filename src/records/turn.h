/* turn.h - when a task may run and ahead of which others: the spec fields
 * priority, not_before and after, and the turn/<id> record runners read them
 * from without reading specs. Pure functions; any thread. */
#ifndef LR_TURN_H
#define LR_TURN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "leaserun.h"

#define LR_PRIORITY_MIN (-100)
#define LR_PRIORITY_MAX 100
#define LR_AFTER_MAX 64

/* A task's turn. A task without any of the three fields has the zero turn
 * and no turn/ record. */
typedef struct lr_turn {
	int priority;               /* higher first; 0 by default */
	int64_t not_before_ms;      /* wall clock, ms since the epoch; 0: none */
	size_t n_after;
	char (*after)[LR_ID_SIZE];  /* the tasks that must succeed first (owned) */
} lr_turn;

void lr_turn_clear(lr_turn *t);

/* Whether t differs from the zero turn: the task needs a turn/ record. */
bool lr_turn_any(const lr_turn *t);

/* Check the spec's priority, not_before and after (spec borrowed) and put
 * them in the normalised form norm when present: not_before as UTC to the
 * millisecond, the rest as given. id: the task's own id, which after may
 * not name. Messages name the field ("after[2]: ..."). */
int lr_turn_normalise(const json_t *spec, const char *id, json_t *norm, lr_err *err);

/* The turn of a normalised spec (borrowed). */
int lr_turn_of_spec(const json_t *norm, lr_turn *out, lr_err *err);

/* The turn/<id> value: {"after","not_before","priority"}, only those set,
 * keys sorted. malloc'd; NULL when out of memory. */
char *lr_turn_encode(const lr_turn *t);

/* A turn/<id> value read back (len bytes), checked like the spec fields. */
int lr_turn_decode(const char *value, size_t len, lr_turn *out, lr_err *err);

/* The turn/ value for a stored spec (canonical text), NULL when the task
 * needs none (or the text does not parse: such a spec is never stored). */
char *lr_turn_of_spec_text(const char *spec, size_t len);

#endif
