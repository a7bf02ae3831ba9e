/* lease.h - etcd leases: grant, revoke, time-to-live, and the keepalive
 * service that renews any number of leases on one LeaseKeepAlive stream. */
#ifndef LR_ETCD_LEASE_H
#define LR_ETCD_LEASE_H

#include <stdint.h>

#include "etcd/transport.h"

/* Grant a lease of ttl_s seconds. etcd may raise the TTL (its minimum is
 * 1.5 x the election timeout): *granted_s is the TTL to use. *sent_ms is the
 * monotonic time the request was sent: the lease cannot expire before
 * sent_ms + granted. Blocking; any thread. */
int lr_lease_grant(lr_etcd *c, int64_t ttl_s, int64_t *id, int64_t *granted_s,
                   int64_t *sent_ms, lr_err *err);

/* Revoke: every key attached to the lease is deleted at once. A lease that
 * is already gone is not an error. */
int lr_lease_revoke(lr_etcd *c, int64_t id, lr_err *err);

/* The TTL left in seconds (-1: the lease does not exist) and the granted
 * TTL. */
int lr_lease_ttl(lr_etcd *c, int64_t id, int64_t *ttl_s, int64_t *granted_s,
                 lr_err *err);

/* ---- keepalive ---------------------------------------------------------- */

typedef struct lr_keepalive lr_keepalive;

/* Called once when a lease is lost: etcd answered TTL <= 0, or no renewal
 * succeeded before the lease's deadline. Runs on the client's stream thread;
 * must not block for long. `why` is valid during the call. */
typedef void (*lr_lease_lost_fn)(void *user, int64_t id, const char *why);

/* Called after each renewal of a lease with its new deadline (monotonic
 * ms). Runs on the client's stream thread; must not block, nor call the
 * keepalive service. */
typedef void (*lr_lease_renewed_fn)(void *user, int64_t id, int64_t deadline);

/* A keepalive service with its own LeaseKeepAlive stream on c. */
int lr_keepalive_new(lr_etcd *c, lr_keepalive **out, lr_err *err);
/* Stops the stream; no callback runs after it returns. */
void lr_keepalive_free(lr_keepalive *k);

/* Keep lease id (granted ttl_s, granted by a request sent at sent_ms) alive
 * from now on: renewed about every TTL/3. renewed may be NULL. */
int lr_keepalive_add(lr_keepalive *k, int64_t id, int64_t ttl_s, int64_t sent_ms,
                     lr_lease_lost_fn fn, lr_lease_renewed_fn renewed, void *user,
                     lr_err *err);
/* Stop renewing; no callback for this lease runs after it returns (unless
 * called from that callback itself). */
void lr_keepalive_remove(lr_keepalive *k, int64_t id);

/* The lease's deadline on the monotonic clock (ms): the send time of the
 * last successful renewal plus the TTL. 0 when the lease is lost or unknown.
 * Any thread. */
int64_t lr_keepalive_deadline(lr_keepalive *k, int64_t id);

#endif
