/* txn_group.h - which txns may share one request (lr_etcd_txn_many): the
 * keys they write and compare, the op budget and the size. Any thread; one
 * group is used by one thread at a time. */
#ifndef LR_ETCD_TXN_GROUP_H
#define LR_ETCD_TXN_GROUP_H

#include <stdbool.h>
#include <stddef.h>

#include "etcd/kv.h"

/* etcd's --max-txn-ops default: the most compares, or ops of one branch, a
 * txn may have, less what the txns it is nested in use (etcd checks each
 * nested txn against 128 minus its parents' counts). */
#define LR_TXN_MAX_OPS 128
/* Requests stay well under etcd's limit (about 1.5 MiB by default). */
#define LR_TXN_GROUP_MAX_BYTES (1024 * 1024)

typedef struct lr_txn_group lr_txn_group;

/* A new empty group of at most max_txns txns (1 to LR_TXN_MAX_OPS - 1);
 * NULL when out of memory. Freed with lr_txn_group_free. */
lr_txn_group *lr_txn_group_new(size_t max_txns);
void lr_txn_group_free(lr_txn_group *g);

/* Empty the group for the next request. */
void lr_txn_group_clear(lr_txn_group *g);

/* The op budget and size that members may use together from now on
 * (defaults LR_TXN_MAX_OPS and LR_TXN_GROUP_MAX_BYTES; values over those
 * count as them): for an etcd set up with a lower --max-txn-ops or
 * --max-request-bytes. A lone txn goes whatever it needs. */
void lr_txn_group_limit(lr_txn_group *g, size_t max_ops, size_t max_bytes);
/* What the members use of the op budget (their count plus the most one
 * of them needs) and of the size, for a request etcd refused. */
size_t lr_txn_group_ops(const lr_txn_group *g);
size_t lr_txn_group_bytes(const lr_txn_group *g);

/* Add t (borrowed: it must live until the group is cleared) when it may
 * share the request with the members already in: the group has room;
 * together they stay within the op budget and the size; t writes no key
 * a member writes (etcd refuses a key written twice); and t compares no
 * key a member writes. etcd judges every compare of a request against the
 * store as it was before the request, so a member whose compares looked at
 * an earlier member's writes would decide on a state that no longer holds;
 * without such overlaps the request does what the members would do one
 * after another, in order. An empty group takes any txn. Returns whether
 * t was added. */
bool lr_txn_group_add(lr_txn_group *g, const lr_txn *t);

/* How many txns the group holds, and the i-th (in the order added). */
size_t lr_txn_group_size(const lr_txn_group *g);
const lr_txn *const *lr_txn_group_members(const lr_txn_group *g);

#endif
