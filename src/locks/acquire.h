/* acquire.h - taking a request's locks and slots in a txn, atomically with
 * whatever else the txn writes (a task's claim), and giving them back.
 *
 * The compares hold only while nobody holds a lock that conflicts with the
 * request (one key range per node) and while the chosen slot of each pool
 * is free, with no holder at or beyond the request's limit and none whose
 * own limit is at or below the chosen slot. They sit in a
 * txn nested in the caller's THEN branch, with the writes: the caller's
 * own compares decide whether anything is tried, ours whether the request
 * is taken, in one request and one revision, all or nothing; when it is
 * not, the nested txn's failure branch reads the keys in the way. etcd counts
 * a nested txn's ops against its parent's budget (--max-txn-ops, 128 by
 * default, minus the parent's largest list): lr_locks_txn_ops says what a
 * request costs. Pure building; any thread. */
#ifndef LR_LOCKS_ACQUIRE_H
#define LR_LOCKS_ACQUIRE_H

#include <stdbool.h>
#include <stdint.h>

#include "etcd/kv.h"
#include "client/lock_keys.h"

/* Writes the caller adds beside ours in the nested THEN branch (a claim
 * and its checkpoint), counted by lr_locks_txn_ops. */
#define LR_LOCK_CALLER_OPS 2

typedef struct lr_lock_writes {
	const lr_client *c;
	const lr_lockset *set;
	const int *slots;     /* the slot index taken in each pool of set */
	const char *holder;   /* "task:<id>" or "run:<id>" */
	const char *value;    /* JSON put in every lock, slot and limit key */
	int64_t lease;
} lr_lock_writes;

/* Add the compares and the writes of w to t, which holds the caller's own
 * compares (at most a few) and no THEN op yet, in a txn nested as t's
 * first THEN op. Returns that txn, whose THEN branch takes the caller's
 * own writes (at most LR_LOCK_CALLER_OPS). *depth: the nested levels
 * that carry compares (1). */
lr_txn *lr_locks_acquire(lr_txn *t, const lr_lock_writes *w, int *depth);
/* What the nested txn of set costs in etcd's --max-txn-ops budget: its
 * largest list (88 at most: 64 nodes and 8 pools). */
int lr_locks_txn_ops(const lr_lockset *set);
/* Whether the whole chain took its THEN branches (r is t's result). */
bool lr_locks_acquired(const lr_txn_result *r, int depth);
/* The txn that deletes a key kv on no lease, only while it is the one
 * read (its mod revision) and on no lease: a key put again since, on a
 * live holder's lease, is never deleted. Succeeds when it deleted it. New
 * (lr_txn_free); NULL when out of memory. */
lr_txn *lr_locks_stray_txn(const lr_kv *kv);
/* How the caller sends a txn (its retries included), and what it is told
 * of each key deleted. */
typedef struct lr_stray_ops {
	int (*send)(void *user, const lr_txn *t, lr_txn_result *r, lr_err *err);
	void (*deleted)(void *user, const char *key);
	void *user;
} lr_stray_ops;
/* Delete, each with its own lr_locks_stray_txn sent by ops->send, every
 * key on no lease among the keys that kept the nested txn of t (r: t's
 * result, depth from lr_locks_acquire) from taking the request: no claim
 * txn or hold writes one (they are on the holder's lease), so it was put
 * by hand, has no live holder and would never expire. *found: there was
 * one (deleted now, or changed since the read: the next try shows it);
 * nothing is sent when the request was taken, or when the caller's own
 * compares failed. */
int lr_locks_clear_strays(const lr_txn_result *r, int depth, const lr_stray_ops *ops,
                          bool *found, lr_err *err);
/* Delete w's lock and slot keys in branch b of t (80 at most). */
void lr_locks_release(lr_txn *t, enum lr_txn_branch b, const lr_lock_writes *w);
/* The JSON put in lock and slot keys: who holds them, since when. New
 * string (free()); NULL when out of memory. */
char *lr_lock_value(const char *holder, const char *runner, const char *host);

#endif
