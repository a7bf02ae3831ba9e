/* taskset.h - what a runner knows of the tasks under the prefix: which are
 * pending, claimed by others, or being run here, oldest first.
 * Owned and used by the runner's loop thread only: no locking. */
#ifndef LR_TASKSET_H
#define LR_TASKSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/backoff.h"
#include "leaserun.h"

enum lr_entry_state {
	LR_ENTRY_PENDING,  /* no claim, not done: may be claimed */
	LR_ENTRY_CLAIMED,  /* claimed by another runner */
	LR_ENTRY_LOCAL,    /* handed to one of this runner's workers */
	LR_ENTRY_BLOCKED,  /* its locks or slots are taken: waits for a change
	                      (counted with the claimed ones) */
};

#define LR_LEASE_UNKNOWN (-1)

typedef struct lr_entry {
	int64_t create_rev;   /* of tasks/<id>: the dispatch order */
	enum lr_entry_state state;
	bool fresh;           /* never claimed as far as we know: no checkpoint */
	bool claim_present;   /* claims/<id> exists, by the latest event */
	int64_t claim_ev_rev; /* revision of that latest claims/ event */
	int64_t claim_lease;  /* the lease that claim hangs on: 0 none (a
	                         foreign claim), LR_LEASE_UNKNOWN not seen yet */
	bool adopt_started;   /* a claim of ours to take up again: its step
	                         had started under it */
	bool done_seen;       /* done/<id> exists */
	char *spec;           /* spec text from the watch or a prefetch, or NULL */
	bool prefetched;      /* its spec was asked for in a prefetch once */
	uint8_t passed_over;  /* picks that, with it the oldest, took another */
	size_t spec_len;
	int heap_refs;        /* times it sits in the heap (lazy deletion) */
	bool removed;
	/* When it may start (records/schedule.h), known when it is added. */
	int priority;         /* higher first */
	int64_t not_before_ms; /* unix ms; 0: none */
	uint8_t n_after;
	char (*after)[LR_ID_SIZE]; /* tasks that must have succeeded first */
	bool sched_waiting;   /* registered with the schedule gate */
	bool sched_dep_ended; /* woken by the end of a task of its "after":
	                         the claimer reads how they all ended */
	bool sched_unknown_said; /* warned that its claim knew more of when it
	                            may start than this view */
	uint32_t sched_deps_gen; /* the schedule gate's generation in which it
	                            waits for every unfinished task of its
	                            "after" (0: never) */
	int64_t retry_rev;    /* revision of the retry that made it pending
	                         again (its queue/ put), 0 none: claims/ and
	                         done/ events before it are of the run before */
	bool rerun;           /* retried while a worker of ours still reported
	                         on that run: pending again, not gone */
	uint64_t gate_seq;    /* the runner's gate_changes when it last passed
	                         the gate */
	struct lr_entry *next; /* hash chain */
	char id[];            /* as long as it is: a queue of 10,000 costs no
	                         10,000 ids of the longest size */
} lr_entry;

/* Callers read `count`, `pending` and `claimed`; the rest is internal. */
typedef struct lr_taskset {
	lr_entry **buckets;
	size_t nbuckets;
	size_t count;         /* live entries */
	size_t pending;       /* entries in LR_ENTRY_PENDING */
	size_t claimed;       /* entries in LR_ENTRY_CLAIMED or LR_ENTRY_LOCAL */
	lr_entry **heap;      /* by create_rev; may hold stale entries */
	size_t heap_len, heap_cap;
	size_t spec_bytes;    /* cached spec text, bounded */
} lr_taskset;

/* Specs cached from watch events: each at most this, all together at most
 * LR_SPEC_CACHE_TOTAL; larger ones are read when claimed. */
#define LR_SPEC_CACHE_ONE (64 * 1024)
#define LR_SPEC_CACHE_TOTAL (8 * 1024 * 1024)

int lr_taskset_init(lr_taskset *s);
void lr_taskset_free(lr_taskset *s);

lr_entry *lr_taskset_find(lr_taskset *s, const char *id);
/* Find or add; a new entry starts pending unless told otherwise. NULL when
 * out of memory. */
lr_entry *lr_taskset_add(lr_taskset *s, const char *id, int64_t create_rev,
                         enum lr_entry_state st);
/* The same, with when it may start: its priority sets its place in the
 * dispatch order; sc->after moves to the entry. sc may be NULL. */
struct lr_sched;
lr_entry *lr_taskset_add_sched(lr_taskset *s, const char *id, int64_t create_rev,
                               enum lr_entry_state st, struct lr_sched *sc);
void lr_taskset_set_state(lr_taskset *s, lr_entry *e, enum lr_entry_state st);
/* Keep (a copy of) the spec text if the cache has room. */
void lr_taskset_cache_spec(lr_taskset *s, lr_entry *e, const char *v, size_t len);
void lr_taskset_drop_spec(lr_taskset *s, lr_entry *e);
/* Hand the cached spec text over (*spec malloc'd, NULL when none): the
 * entry no longer holds it. */
void lr_taskset_take_spec(lr_taskset *s, lr_entry *e, char **spec, size_t *len);
/* The entry's create revision became known (a claim's event came first):
 * set it unless the entry already sits in the dispatch order. */
void lr_taskset_set_create_rev(lr_taskset *s, lr_entry *e, int64_t create_rev);
/* When e may start, learnt after it was added (its claim's event came
 * first): taken (sc->after moves to the entry) unless e knows already or
 * sits in the dispatch order, which a new priority would upset. */
void lr_taskset_set_sched(lr_taskset *s, lr_entry *e, struct lr_sched *sc);
void lr_taskset_remove(lr_taskset *s, lr_entry *e);
/* Remove every entry not in LR_ENTRY_LOCAL, and forget what the records
 * said of those (before a re-read; they are marked rerun). */
void lr_taskset_clear_remote(lr_taskset *s);
/* The re-read was at rev: a local entry found without a claim knows of no
 * claim before rev (a worker's report of an older one is stale). */
void lr_taskset_local_read(lr_taskset *s, int64_t rev);

/* Pick a pending task among the `spread` first in dispatch order (highest
 * priority, then oldest) that share the first one's priority, at random
 * with the older ones likelier, so that idle runners do not all race for
 * the same one; the oldest is passed over twice at most. NULL when none is
 * pending. */
lr_entry *lr_taskset_pick(lr_taskset *s, size_t spread, lr_rng *rng);

/* The up to max oldest pending tasks, oldest first, into out[]; they stay
 * pending. Returns how many. */
size_t lr_taskset_oldest(lr_taskset *s, size_t max, lr_entry **out);

/* The most specs one read ahead asks for. */
#define LR_READ_AHEAD_MAX 32

/* Specs to read ahead, a chunk at a time: of the 2 x max oldest pending
 * tasks, those whose spec is neither cached nor asked for yet (nor known
 * to be unneeded: fresh), oldest first, at most max (at most
 * LR_READ_AHEAD_MAX), into out[]; they are marked asked for. None unless
 * at least half a chunk (max/2, rounded up) is unread, or `now` (a worker
 * reads its own spec anyway: any number rides along). Returns how many. */
size_t lr_taskset_read_ahead(lr_taskset *s, size_t max, bool now, lr_entry **out);

#endif
