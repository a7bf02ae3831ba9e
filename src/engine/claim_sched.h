/* claim_sched.h - whether a task may start when a worker claims it: its
 * start time and the tasks it waits for, as etcd has them now (see
 * claim_sched.c). Blocking; worker threads. */
#ifndef LR_ENGINE_CLAIM_SCHED_H
#define LR_ENGINE_CLAIM_SCHED_H

#include <stdint.h>

#include <jansson.h>

#include "client/client.h"

enum lr_sched_verdict {
	LR_SCHED_GO,   /* claim it */
	LR_SCHED_WAIT, /* not yet: nothing is written */
	LR_SCHED_END,  /* a task it waits for failed, was cancelled or is gone:
	                  end it failed (why) */
};

typedef struct lr_sched_check {
	enum lr_sched_verdict verdict;
	int64_t wait_until;           /* WAIT: its not_before (unix ms), or 0
	                                 when a task it waits for is unfinished */
	char wait_for[LR_ID_SIZE];    /* WAIT (0): the first such task */
	char why[600];                /* END */
	/* END: the txn that ends it holds only while this done/ record is as
	 * read (mod revision; 0: still absent), so that a dependency retried
	 * meanwhile does not fail it. */
	char guard_key[LR_KEY_SIZE];
	int64_t guard_rev;
} lr_sched_check;

/* Check spec (a normalised spec, borrowed) now. task_rev is the create
 * revision of the task's tasks/ key: a dependency created after it is not
 * the one submit found (0: not known, not checked). */
int lr_claim_sched(lr_client *c, const json_t *spec, int64_t task_rev, lr_sched_check *out,
                   lr_err *err);

#endif
