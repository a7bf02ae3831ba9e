/* member.h - what the etcd member that answers says of itself
 * (Maintenance.Status), and what its version is known to get wrong. */
#ifndef LR_ETCD_MEMBER_H
#define LR_ETCD_MEMBER_H

#include <stdbool.h>
#include <stddef.h>

#include "etcd/transport.h"

/* The server version of whichever member answers ("3.4.23"), into buf.
 * One read, retried while the call's deadline allows. Blocking; any
 * thread. */
int lr_etcd_member_version(lr_etcd *c, char *buf, size_t size, lr_err *err);

/* Whether an etcd of this version can revoke a lease that was renewed in
 * time: a leader paused for seconds, on waking, still sends the revokes of
 * the leases its stale view says expired, and they are applied (etcd issue
 * 15247; fixed in 3.4.31 and 3.5.13). False for a version it cannot read. */
bool lr_etcd_version_revokes_live_leases(const char *version);

#endif
