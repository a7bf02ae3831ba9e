/* after.h - tasks that come after others: whether the tasks a task waits
 * for have all succeeded, and ending an unclaimed task without running it.
 * Blocking etcd calls on the caller's thread (a runner's worker). */
#ifndef LR_CLIENT_AFTER_H
#define LR_CLIENT_AFTER_H

#include <stdbool.h>
#include <stddef.h>

#include "client/client.h"

enum lr_after_verdict {
	LR_AFTER_READY,   /* every one succeeded */
	LR_AFTER_WAIT,    /* one has not ended yet */
	LR_AFTER_FAILED,  /* one failed, was cancelled or no longer exists:
	                     `why` names it and says how */
};

/* Read the done records of the n tasks in after (one txn; n <= 64) and
 * judge. A done record never changes once written, so a READY verdict
 * stays true until the claim. */
int lr_after_check(lr_client *c, const char (*after)[LR_ID_SIZE], size_t n,
                   enum lr_after_verdict *verdict, char *why, size_t why_size,
                   lr_err *err);

/* End task id with st and error, unless it is claimed or already done
 * (then *ended is false): the txn of `cancel` for a pending task, guarded
 * by the claim, the done record, the checkpoint and the spec as read.
 * Implemented in cancel.c. */
int lr_end_unclaimed(lr_client *c, const char *id, lr_task_state st,
                     const char *error, bool *ended, lr_err *err);

/* Fill in `waiting` for the pending tasks of list held by their turn: "not
 * before <time>", or "after a, b" (those not ended yet). One read per
 * pending task (one walk of turn/ for more than a few), and one more for
 * one that comes after others. */
int lr_turn_waits(lr_client *c, lr_task_status *list, size_t n, lr_err *err);

#endif
