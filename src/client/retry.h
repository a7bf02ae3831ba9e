/* retry.h - lr_retry telling where the task resumes in full (index, count
 * and name), for a message people read. Implemented in retry.c. Caller's
 * thread. */
#ifndef LR_CLIENT_RETRY_H
#define LR_CLIENT_RETRY_H

#include <stdint.h>

#include "leaserun.h"

typedef struct lr_retry_at {
	int64_t step;    /* 0-based index of the step it resumes at */
	int64_t steps;   /* the task's number of steps */
	char *step_name; /* owned: free with lr_retry_at_clear; NULL when out
	                    of memory (the retry is done all the same) */
} lr_retry_at;

/* lr_retry, with *at filled in on success (cleared otherwise). */
int lr_retry_to(lr_client *c, const char *id, const lr_retry_opts *o, lr_retry_at *at,
                lr_err *err);
void lr_retry_at_clear(lr_retry_at *at);

#endif
