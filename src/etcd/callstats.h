/* callstats.h - what an etcd client counts about its own calls, per gRPC
 * method: attempts, errors and latency of unary calls, reopened streams,
 * and round trips that a stream's owner times (keepalive renewals).
 *
 * Threads: counting is lock-free (relaxed atomics) from any thread; only
 * the first call of a method takes the table's mutex, to add its slot.
 * Reading is from any thread at any time and is not one instant: each
 * counter is read once, so totals may differ by the calls in flight. */
#ifndef LR_ETCD_CALLSTATS_H
#define LR_ETCD_CALLSTATS_H

#include <stdbool.h>
#include <stdint.h>

#include "base/stats.h"

/* Methods counted per client (leaserun calls about a dozen of etcd's);
 * calls of a method beyond them are not counted. */
#define LR_CALL_METHODS 16
/* errors[-code] for the codes LR_EINVAL (-1) .. -(LR_CALL_CODES - 1);
 * errors[0] counts any code outside them. */
#define LR_CALL_CODES 24

/* The figures of one method as lr_etcd_call_stats hands them out. */
typedef struct lr_etcd_call_stat {
	const char *method;   /* "KV/Txn", "Watch/Watch" (etcdserverpb's) */
	bool stream;          /* a bidi stream, else a unary method */
	uint64_t calls;       /* unary: calls made (each one attempt or more) */
	uint64_t attempts;    /* unary: attempts, retries included */
	uint64_t errors[LR_CALL_CODES]; /* unary: failed calls by code */
	uint64_t reopens;     /* stream: calls opened after the one before ended */
	/* unary: each attempt, from its start to its reply or failure;
	 * stream: request-to-reply round trips its owner timed (on
	 * LeaseKeepAlive, a renewal sent to etcd's answer). */
	lr_hist_snap latency;
} lr_etcd_call_stat;

/* Called once per method in use; `st` is valid during the call only. */
typedef void (*lr_etcd_call_stat_fn)(void *user, const lr_etcd_call_stat *st);

/* ---- the table (internal to src/etcd/) ------------------------------------ */

typedef struct lr_call_stats lr_call_stats;
typedef struct lr_call_slot lr_call_slot; /* the counts of one method */

/* A new, empty table (freed with lr__call_stats_free); NULL when out of
 * memory, and every lr__call_count_* takes a NULL slot. */
lr_call_stats *lr__call_stats_new(void);
void lr__call_stats_free(lr_call_stats *s);

/* The slot of `method` (a gRPC path), added on its first use; NULL when s
 * is NULL or the table is full. */
lr_call_slot *lr__call_slot(lr_call_stats *s, const char *method, bool stream);

/* A unary attempt that took `us` microseconds. */
void lr__call_count_attempt(lr_call_slot *sl, int64_t us);
/* A unary call ended with rc (0 or a library error code). */
void lr__call_count_result(lr_call_slot *sl, int rc);
/* A stream opened a new call after its previous one ended. */
void lr__call_count_reopen(lr_call_slot *sl);
/* A request-to-reply round trip on a stream, timed by its owner. */
void lr__call_count_round_trip(lr_call_slot *sl, int64_t us);

/* fn once for each method counted so far, in the order first used. */
void lr__call_stats_each(lr_call_stats *s, lr_etcd_call_stat_fn fn, void *user);

#endif
