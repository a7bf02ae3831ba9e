/* walk.h - every key of one directory under the prefix (tasks/, claims/,
 * ...), page by page, in key order: the one pager of the library.
 * Runs on the caller's thread; no state of its own. */
#ifndef LR_CLIENT_WALK_H
#define LR_CLIENT_WALK_H

#include <stdatomic.h>
#include <stdint.h>

#include "client/client.h"
#include "etcd/kv.h"

/* Called for each key with the part of the key after prefix+kind, which may
 * be anything (a key written by something else): check it before use. A
 * non-zero return stops the walk and is passed back. */
typedef int (*lr_walk_fn)(void *user, const lr_kv *kv, const char *id, lr_err *err);

typedef struct lr_walk_opts {
	const char *kind;       /* LR_K_TASKS, ... */
	int flags;              /* 0 or LR_RANGE_KEYS_ONLY */
	int64_t page;           /* keys per Range */
	/* NULL: every page is read at the latest revision (key order keeps
	 * the walk exact: no key twice, none that existed throughout missed,
	 * and no revision pinned that compaction could remove). Otherwise
	 * every page is read at *revision; 0 there means the first page's,
	 * which is stored back, so that several walks share one revision. */
	int64_t *revision;
	/* May be NULL. Once non-zero, the walk ends between two pages with
	 * LR_ECANCELLED, so that a stop request never waits for a long read. */
	atomic_int *stop;
} lr_walk_opts;

/* Walk every key of the directory. Keys of any length are handled. */
int lr_walk(lr_client *c, const lr_walk_opts *o, lr_walk_fn fn, void *user, lr_err *err);

#endif
