/* hold.h - what the library tells a hold beyond leaserun.h: that the
 * command lr_hold_exec ran under it may outlive it (exec/run.c). */
#ifndef LR_LOCKS_HOLD_H
#define LR_LOCKS_HOLD_H

#include "leaserun.h"

/* Some process of the command run under h may still run (its guard was
 * killed, and what it left could not be stopped): lr_hold_release then
 * stops renewing the lease but does not revoke it, so that the locks stay
 * taken until it expires (within the TTL) instead of going to the next
 * holder at once. Call before lr_hold_release, on its thread. */
void lr_hold_leave_lease(lr_hold *h);

#endif
