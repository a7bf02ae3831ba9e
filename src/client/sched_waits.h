/* sched_waits.h - what pending tasks wait for besides locks (start time,
 * "after"): filled into lr_task_status.waiting. Caller's thread. */
#ifndef LR_CLIENT_SCHED_WAITS_H
#define LR_CLIENT_SCHED_WAITS_H

#include "leaserun.h"

int lr_sched_waits(lr_client *c, lr_task_status *list, size_t n, lr_err *err);

#endif
