/* turns.h - tasks that wait for their turn at the runner: a timer heap of
 * not_before times and, for tasks that come after others, the index from a
 * dependency to the tasks waiting for it to end.
 * Owned and used by the runner's loop thread only: no locking. */
#ifndef LR_ENGINE_TURNS_H
#define LR_ENGINE_TURNS_H

#include <stddef.h>
#include <stdint.h>

struct lr_turn_timer {
	int64_t due;         /* wall clock ms */
	char *id;            /* the task (owned): looked up when due */
};

struct lr_dependents {
	char *dep;           /* a task others wait for (owned) */
	char **ids;          /* the tasks waiting for it to end (owned) */
	size_t n, cap;
	struct lr_dependents *next;
};

typedef struct lr_turns {
	struct lr_turn_timer *timers;   /* min-heap by due */
	size_t n_timers, cap_timers;
	struct lr_dependents **buckets; /* by dep */
	size_t nbuckets;
} lr_turns;

#endif
