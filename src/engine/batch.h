/* batch.h - group commit: the claims and fenced writes that a runner's
 * workers have ready at the same moment go to etcd as one request.
 *
 * No timers: a txn goes at once, with whatever else is queued, when there
 * is room for a request in flight and no other caller is about to queue
 * (see the seats below) or a group's worth waits; otherwise it waits, and
 * the next request carries everything that queued meanwhile. Each txn keeps its own compares
 * and result (nested txns, lr_etcd_txn_many), and lr_txn_group keeps out
 * of one request any two txns whose keys would make one's outcome depend
 * on the other's.
 *
 * Threads: any thread may call lr_batch_txn, which blocks; the callers
 * themselves send the requests (one leads each), so no thread of its own.
 * One mutex guards the queue; nothing is sent under it. */
#ifndef LR_ENGINE_BATCH_H
#define LR_ENGINE_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "etcd/kv.h"

typedef struct lr_batch lr_batch;

/* A queue sending on c (borrowed; outlives the batch) with at most
 * max_in_flight requests in flight and max_txns txns in each. A request
 * goes at once, callers with credit or not, when group_txns txns (1 to
 * max_txns) wait; it goes beside others in flight only then, or for what
 * a full one left out. NULL when out of memory. */
lr_batch *lr_batch_new(lr_etcd *c, int max_in_flight, size_t max_txns, size_t group_txns);
/* No call may be in lr_batch_txn any more. */
void lr_batch_free(lr_batch *b);

/* lr_etcd_txn(c, t, LR_CALL_RETRY, r, err), but t may share its request
 * with the txns of other callers: only for txns whose compares make a
 * second application fail visibly. A request that fails for a reason other
 * than a lost connection or reply is sent again txn by txn, so that one
 * txn etcd refuses fails alone. Blocks; t is borrowed until it returns. */
int lr_batch_txn(lr_batch *b, const lr_txn *t, lr_txn_result *r, lr_err *err);

/* Seats. A runner's worker threads take one each: a seated caller whose
 * write comes back holds credit until it queues its next write or says
 * it is going away (lr_batch_away: before a handler, a wait, a sleep, a
 * call to etcd outside the batch), and no request goes, unless full,
 * while any caller holds credit (for a round trip at most: a caller may
 * block where it did not say so). Any other
 * thread may call without a seat, and holds none. Each from the thread
 * concerned, which is seated in one batch at a time. */
void lr_batch_seat(lr_batch *b);
void lr_batch_unseat(lr_batch *b);
void lr_batch_away(lr_batch *b);
/* Back from it: about to write again, or to go away once more. */
void lr_batch_back(lr_batch *b);

/* Txns one caller sends at once, at most this many. */
#define LR_BATCH_OWN_MAX 2

/* lr_batch_txn for n txns of one caller (n <= LR_BATCH_OWN_MAX), queued
 * together so that they share a request when they may: rcs[i], rs[i] and
 * errs[i] are the outcome of ts[i] alone. Blocks until all are done. */
void lr_batch_txns(lr_batch *b, size_t n, const lr_txn *const ts[], lr_txn_result rs[],
                   lr_err errs[], int rcs[]);

/* Told, with etcd's words, when etcd refused a request of several txns as
 * having too many operations or being too large, and requests were made
 * smaller for it (etcd runs with a lower --max-txn-ops or
 * --max-request-bytes than its defaults). From any caller's thread. */
typedef void (*lr_batch_note_fn)(void *user, const char *msg);
/* Set before the first lr_batch_txn. */
void lr_batch_on_limit(lr_batch *b, lr_batch_note_fn fn, void *user);
/* The op budget and size a request of several txns may use now. */
void lr_batch_limits(lr_batch *b, size_t *max_ops, size_t *max_bytes);

/* Requests sent and txns carried so far. Any thread. */
void lr_batch_counts(lr_batch *b, uint64_t *requests, uint64_t *txns);
/* The most requests that were in flight at once so far. Any thread. */
int lr_batch_peak_in_flight(lr_batch *b);

#endif
