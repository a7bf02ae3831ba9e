/* task_history.h - history/<id>: the earlier outcomes of a retried task,
 * written by lr_retry and shown by status. Implemented in retry.c. Any
 * thread. */
#ifndef LR_TASK_HISTORY_H
#define LR_TASK_HISTORY_H

#include <stddef.h>

#include "leaserun.h"

/* Fill s->history from a history/<id> value; entries that do not decode
 * are skipped. LR_EINVAL when the value is not a JSON object. */
int lr_history_decode(const char *value, size_t len, lr_task_status *s);
/* Free s->history. */
void lr_history_clear(lr_task_status *s);

#endif
