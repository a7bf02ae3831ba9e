/* table.h - who holds which lock and slot, and who waits, as read from
 * locks/, slots/ and wants/ (client/lock_keys.h) and kept current by their watch
 * events; and whether a request can be taken now, fairly: a request never
 * overtakes an older one it conflicts with.
 *
 * Threads: one owner thread (a runner's loop, a `leaserun run`, a page);
 * no locking. */
#ifndef LR_LOCKS_TABLE_H
#define LR_LOCKS_TABLE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "etcd/kv.h"
#include "client/lock_keys.h"

typedef struct lr_lock_table lr_lock_table;

lr_lock_table *lr_lock_table_new(const lr_client *c);
void lr_lock_table_free(lr_lock_table *t);
/* Forget everything (before a re-read). */
void lr_lock_table_clear(lr_lock_table *t);
/* Forget everything and read locks/, slots/ and wants/ afresh, all at
 * *rev (0: the latest, stored back), paged; stop (may be NULL) ends a long
 * read early with LR_ECANCELLED. Runs on the caller's thread. */
int lr_lock_table_load(lr_lock_table *t, lr_client *c, int64_t *rev, atomic_int *stop,
                       lr_err *err);

/* A key under locks/, slots/ or wants/ (or tasks/ and done/ of a known
 * dependency, lr_lock_table_load_deps) that exists now (read, or a watch
 * PUT), or was deleted. Returns true when the key was one of them (the
 * table changed); anything that does not parse is ignored, and so is a
 * lock or slot key on no lease (no holder's: its claimer deletes it) or a
 * request on no lease that is not a task's. */
bool lr_lock_table_put(lr_lock_table *t, const lr_kv *kv);
bool lr_lock_table_delete(lr_lock_table *t, const char *key, int64_t mod_rev);

/* Whether the tasks that requests wait for (their "after") have
 * finished: tasks/<id> and done/<id> of each, read once; afterwards
 * lr_lock_table_put and _delete keep them current from watch events on
 * those keys. A request with a task of its "after" that exists and has no
 * result holds back nobody; a dependency never read counts as finished,
 * so that an owner that reads none (a runner, which judges dependencies
 * by its own view through lr_waiter_alive_fn) decides as before. A
 * task's own keys are read too: the request of a task known to be gone
 * (tasks/<id> deleted by hand) or finished is left over and holds back
 * nobody. Only the requests older than request_rev (0: all) that conflict
 * with set (NULL: any) are read for. Runs on the caller's thread. */
int lr_lock_table_load_deps(lr_lock_table *t, lr_client *c, const lr_lockset *set,
                            int64_t request_rev, lr_err *err);
/* What is known of dependency id (for tests, and the reads above): its
 * tasks/ and done/ keys exist or not. */
void lr_lock_table_dep_seen(lr_lock_table *t, const char *id, bool task, bool done);
/* Every dependency known, by id; stops at the first nonzero return. */
typedef int (*lr_dep_fn)(void *user, const char *id);
int lr_lock_table_each_dep(const lr_lock_table *t, lr_dep_fn fn, void *user);
/* Whether holder's request waits for its start time or for a known
 * unfinished task of its "after" before it waits for locks; why (size
 * bytes, may be NULL) says which: "after t-3, which has not finished". */
bool lr_lock_table_waits_first(const lr_lock_table *t, const char *holder, char *why,
                               size_t size);

/* Whether `holder` holds any lock or slot. */
bool lr_lock_table_holds(const lr_lock_table *t, const char *holder);
/* The request of holder (from wants/), NULL when none is known; *rev its
 * create revision: the order of requests. Borrowed. */
const lr_lockset *lr_lock_table_wants(const lr_lock_table *t, const char *holder,
                                      int64_t *rev);

/* The holders the owner's requests are made within ("task:<id>",
 * "run:<id>"; NULL-terminated, borrowed; NULL: none): the task whose step
 * makes them, or the run whose command does. An older waiter that waits
 * for one of them holds the owner's request back no longer (see
 * lr_lock_table_can_take). */
void lr_lock_table_within(lr_lock_table *t, const char *const *holders);

/* Decides whether a waiter still waits: a task's request outlives nothing
 * but its task. NULL: every request in wants/ counts. */
typedef bool (*lr_waiter_alive_fn)(void *user, const char *holder);

/* Whether set can be taken now by holder, whose request was made at
 * request_rev (0: just now): no conflicting lock held by another holder, a
 * free slot under each pool's limit and none held beyond it, and no older
 * live request it conflicts with that is still waiting (a task's request
 * whose start time is still to come, or with a task of its "after" known
 * to be unfinished, waits for nothing yet; nor does one whose way only
 * holds taken before it asked block, of what set does not touch, or a
 * holder the request is made within: lr_lock_table_within, or the
 * "within" its wants/ entry names). On true,
 * slots[i] is the slot to take in pool i. On false, why (size bytes, may
 * be NULL) names what it waits for: "X org/a held by task t-12 on box-1". */
bool lr_lock_table_can_take(const lr_lock_table *t, const lr_lockset *set,
                            const char *holder, int64_t request_rev, int *slots,
                            lr_waiter_alive_fn alive, void *user, char *why, size_t size);

/* Every lock held: path, mode, holder, and the key's JSON value (runner,
 * host, since). */
typedef void (*lr_hold_fn)(void *user, const char *path, lr_lock_mode mode,
                           const char *holder, const char *value);
void lr_lock_table_each_lock(const lr_lock_table *t, lr_hold_fn fn, void *user);
/* Every slot held. */
typedef void (*lr_slot_fn)(void *user, const char *pool, int index, const char *holder,
                           const char *value);
void lr_lock_table_each_slot(const lr_lock_table *t, lr_slot_fn fn, void *user);
/* Every request, oldest first, and whether its holder holds. */
typedef void (*lr_want_fn)(void *user, const char *holder, const lr_lockset *set,
                           int64_t rev, bool holding, const char *value);
void lr_lock_table_each_want(const lr_lock_table *t, lr_want_fn fn, void *user);

/* Who holds and who waits, as lr_locks_read gives it (leaserun.h):
 * {"held": [...], "waiting": [...]}. New reference; NULL when out of
 * memory. Implemented in list.c. */
json_t *lr_lock_table_doc(const lr_lock_table *t);

#endif
