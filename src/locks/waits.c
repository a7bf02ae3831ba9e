/* waits.c - what pending tasks wait for, for `leaserun status`: their locks
 * or slots held by others, or an older request they must not overtake.
 * Runs on the caller's thread. */
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "client/sched_waits.h"
#include "locks/table.h"

int lr_task_waits(lr_client *c, lr_task_status *list, size_t n, lr_err *err)
{
	if (LR_NULL_ARG(err, c))
		return LR_EINVAL;
	if (n > 0 && LR_NULL_ARG(err, list))
		return LR_EINVAL;
	bool any = false;
	for (size_t i = 0; i < n && !any; i++)
		any = list[i].state == LR_TASK_PENDING;
	if (!any)
		return 0; /* nothing to read */
	/* Its start time or the tasks it waits for come before its locks. */
	int src = lr_sched_waits(c, list, n, err);
	if (src != 0)
		return lr_err_wrap(err, src, "what pending tasks wait for");
	lr_lock_table *t = lr_lock_table_new(c);
	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "waits: out of memory");
	int64_t rev = 0;
	int rc = lr_lock_table_load(t, c, &rev, NULL, err);
	if (rc == 0)
		rc = lr_lock_table_load_deps(t, c, NULL, 0, err);
	for (size_t i = 0; rc == 0 && i < n; i++) {
		lr_task_status *s = &list[i];
		char holder[LR_HOLDER_SIZE], why[1024];
		int64_t asked;
		int slots[LR_LIMITS_MAX];
		if (s->state != LR_TASK_PENDING || s->waiting != NULL)
			continue;
		lr_holder_of_task(s->id, holder);
		const lr_lockset *set = lr_lock_table_wants(t, holder, &asked);
		if (set == NULL || lr_lock_table_can_take(t, set, holder, asked, slots, NULL, NULL,
		                                          why, sizeof(why)))
			continue;
		free(s->waiting);
		if ((s->waiting = strdup(why)) == NULL)
			rc = lr_err_set(err, LR_ENOMEM, "waits: out of memory");
	}
	lr_lock_table_free(t);
	return rc != 0 ? lr_err_wrap(err, rc, "what pending tasks wait for") : 0;
}
