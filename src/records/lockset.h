/* lockset.h - what a task (or a `leaserun run`) asks to hold while it runs:
 * multi-granularity locks on a tree of resources (IS, IX, S, SIX, X) and
 * slots of concurrency pools; their validation, the lock lattice, and the
 * nodes a request locks (the named paths and, implicitly, their ancestors).
 * Pure functions on caller-owned values; any thread. */
#ifndef LR_RECORDS_LOCKSET_H
#define LR_RECORDS_LOCKSET_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "leaserun.h"

#define LR_LOCKS_MAX 16        /* entries of "locks" */
#define LR_LOCK_DEPTH_MAX 8    /* segments of a path */
#define LR_LOCK_SEG_MAX 64     /* characters of a segment */
#define LR_LIMITS_MAX 8        /* entries of "limits" */
#define LR_LIMIT_N_MAX 10000   /* slots of a pool */
/* A path and its NUL: 8 segments of 64 and their slashes. */
#define LR_LOCK_PATH_SIZE (LR_LOCK_DEPTH_MAX * (LR_LOCK_SEG_MAX + 1))
/* Nodes a request can name: each entry's path and its ancestors. */
#define LR_LOCK_NODES_MAX (LR_LOCKS_MAX * LR_LOCK_DEPTH_MAX)
/* Nodes a request may lock: each costs a compare and a write in the claim
 * txn, and etcd counts the ops of nested txns against one budget
 * (--max-txn-ops, 128 by default); 64 nodes and 8 pools take 88 of it,
 * the claim's own ops 5 more. */
#define LR_LOCK_NODES_TXN 64

/* The modes, in the order of their rank in keys: lock keys in etcd sort
 * by it, and in this order the modes conflicting with any mode form one
 * range, so that one compare per node checks it. */
typedef enum lr_lock_mode {
	LR_LOCK_IS = 0,  /* intention to read below */
	LR_LOCK_S = 1,   /* read the whole subtree */
	LR_LOCK_SIX = 2, /* read the whole subtree, write below */
	LR_LOCK_X = 3,   /* write the whole subtree */
	LR_LOCK_IX = 4,  /* intention to write below */
	LR_LOCK_MODES = 5,
} lr_lock_mode;

/* "IS", ...; -1 for anything else (exact, upper case). */
int lr_lock_mode_parse(const char *s);
const char *lr_lock_mode_name(lr_lock_mode m);
/* The usual compatibility matrix. */
bool lr_lock_compatible(lr_lock_mode a, lr_lock_mode b);
/* The mode an ancestor is locked in for m: IS for IS and S, IX else. */
lr_lock_mode lr_lock_intention(lr_lock_mode m);
/* The weakest mode granting both. */
lr_lock_mode lr_lock_join(lr_lock_mode a, lr_lock_mode b);
/* The modes conflicting with m as ranges of ranks [lo[i], hi[i]]; returns
 * how many ranges (always 1 with the ranks above). */
int lr_lock_conflicts(lr_lock_mode m, int lo[2], int hi[2]);

/* One node of the tree that a request locks, in one mode. */
typedef struct lr_lock_node {
	const char *path;         /* in the lockset's own memory */
	lr_lock_mode mode;
	bool named;               /* named in the request (not only implied) */
} lr_lock_node;

typedef struct lr_limit {
	char key[LR_LOCK_SEG_MAX + 1];
	int n;
} lr_limit;

/* A request: the nodes (sorted by path, each once, modes joined) and the
 * pools (sorted by key). One allocation, freed with free(). */
typedef struct lr_lockset {
	size_t n_nodes;
	lr_lock_node *nodes;
	size_t n_limits;
	lr_limit *limits;
} lr_lockset;

/* Validate "locks" ({"PATH": "MODE"}) and "limits" ({"KEY": N}); either
 * may be NULL (absent). Messages name the field ("locks.org/a: ..."). On
 * success *out (may be NULL: only validate) is a new lockset, NULL when
 * the request is empty. LR_EINVAL or LR_ENOMEM otherwise. */
int lr_lockset_parse(const json_t *locks, const json_t *limits, lr_lockset **out,
                     lr_err *err);

/* Whether two requests cannot run side by side: a node both lock in
 * incompatible modes (a node one locks and the other only implies is
 * compared with the implied mode), or a pool both take a slot of (each
 * waits its turn for a pool). */
bool lr_locksets_conflict(const lr_lockset *a, const lr_lockset *b);
/* Whether set has a node at path (named or implied), a slot of pool key. */
bool lr_lockset_has_node(const lr_lockset *set, const char *path);
bool lr_lockset_has_pool(const lr_lockset *set, const char *key);

/* A path is 1 to 8 segments of [A-Za-z0-9._:-]{1,64} joined by '/'. */
bool lr_lock_path_valid(const char *path);

#endif
