/* orphans.h - what a killed guard leaves behind. A guard owns every
 * process its step starts; if the guard itself is killed (a step that
 * kills its $PPID, the OOM killer), those processes are orphans. In a
 * process that adopts orphans (a child subreaper, lr_orphans_adopt), they
 * become its children, and lr_orphans_kill stops them: then the step may
 * run again without overlapping what its first execution left.
 *
 * Threads: any; one mutex orders guards' forks with the search for
 * orphans, so that a guard just forked is never taken for one. */
#ifndef LR_EXEC_ORPHANS_H
#define LR_EXEC_ORPHANS_H

#include <stdbool.h>
#include <sys/types.h>

/* From now on this process adopts the orphans of its guards' steps
 * (PR_SET_CHILD_SUBREAPER): for a process whose only children are guards,
 * such as `leaserun worker`. False when the system refuses. */
bool lr_orphans_adopt(void);

/* Around a guard's fork: lock, fork, then lr_orphans_forked with the new
 * pid (-1 when the fork failed), which unlocks. */
void lr_orphans_lock(void);
void lr_orphans_forked(pid_t guard);
/* A guard was reaped: it is one no more. */
void lr_orphans_reaped(pid_t guard);

/* Kill and reap every child of this process that is not a live guard,
 * until none is left (their own children come back to this process as
 * their parents die). True when done; false when this process does not
 * adopt orphans, or they could not be listed: then they may live on. */
bool lr_orphans_kill(void);

#endif
