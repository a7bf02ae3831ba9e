/* acquire.h - taking a request's locks and slots in a txn, atomically with
 * whatever else the txn writes (a task's claim), and giving them back.
 *
 * The compares hold only while nobody holds a lock that conflicts with the
 * request (one or two key ranges per node) and while the chosen slot of
 * each pool is free with no holder at or beyond the request's limit. A
 * large request needs more compares or writes than one txn may carry
 * (etcd's --max-txn-ops, 128 by default, per txn): they continue in txns
 * nested in the THEN branch, a chain taken only when every level's
 * compares hold, so that it stays one request, one revision, all or
 * nothing. Pure building; any thread. */
#ifndef LR_LOCKS_ACQUIRE_H
#define LR_LOCKS_ACQUIRE_H

#include <stdbool.h>
#include <stdint.h>

#include "etcd/kv.h"
#include "client/lock_keys.h"

/* Compares, or ops of a branch, put in one txn of a chain: room under
 * etcd's default of 128 for the caller's own. */
#define LR_LOCK_TXN_ROOM 96

typedef struct lr_lock_writes {
	const lr_client *c;
	const lr_lockset *set;
	const int *slots;     /* the slot index taken in each pool of set */
	const char *holder;   /* "task:<id>" or "run:<id>" */
	const char *value;    /* JSON put in every lock and slot key */
	int64_t lease;
} lr_lock_writes;

/* Add the compares and the writes of w to t, which holds the caller's own
 * compares (at most a few) and no THEN op yet. Returns the txn whose THEN
 * branch takes the caller's own writes: t, or the innermost of the chain.
 * *depth: how many nested levels carry compares (0: all in t). */
lr_txn *lr_locks_acquire(lr_txn *t, const lr_lock_writes *w, int *depth);
/* Whether the whole chain took its THEN branches (r is t's result). */
bool lr_locks_acquired(const lr_txn_result *r, int depth);
/* Delete w's lock and slot keys in branch b of t (nested as needed). */
void lr_locks_release(lr_txn *t, enum lr_txn_branch b, const lr_lock_writes *w);
/* The JSON put in lock and slot keys: who holds them, since when. New
 * string (free()); NULL when out of memory. */
char *lr_lock_value(const char *holder, const char *runner, const char *host);

#endif
