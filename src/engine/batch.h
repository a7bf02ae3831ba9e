/* batch.h - group commit: the claims and fenced writes that a runner's
 * workers have ready at the same moment go to etcd as one request.
 *
 * No timers: a txn that finds no request in flight goes at once, with
 * whatever else is queued; otherwise it waits, and the next request
 * carries everything that queued while the earlier one was in flight. A
 * further request (up to max_in_flight) starts only when second_at txns
 * wait (the runner: half its workers). Each txn keeps its own compares
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
 * max_in_flight requests in flight and max_txns txns in each, a further
 * one starting when second_at (1 to max_txns) txns wait. NULL when out of
 * memory. */
lr_batch *lr_batch_new(lr_etcd *c, int max_in_flight, size_t max_txns, size_t second_at);
/* No call may be in lr_batch_txn any more. */
void lr_batch_free(lr_batch *b);

/* lr_etcd_txn(c, t, LR_CALL_RETRY, r, err), but t may share its request
 * with the txns of other callers: only for txns whose compares make a
 * second application fail visibly. A request that fails for a reason other
 * than a lost connection or reply is sent again txn by txn, so that one
 * txn etcd refuses fails alone. Blocks; t is borrowed until it returns. */
int lr_batch_txn(lr_batch *b, const lr_txn *t, lr_txn_result *r, lr_err *err);

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
