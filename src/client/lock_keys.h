/* lock_keys.h - where locks, slots and requests live in etcd, all readable with
 * etcdctl:
 *   P locks/<path>/#<rank><MODE>/<holder>  a node held in a mode (rank: 0
 *                                          IS .. 4 X, so that conflicting
 *                                          modes are one or two ranges)
 *   P slots/<key>/<index>                  a slot of a pool (00000..09999)
 *   P limits/<key>/<N>/<index>             the limit N the holder of that
 *                                          slot runs under (5 digits each)
 *   P wants/<holder>                       what a holder or waiter asks for
 * Holders are "task:<id>" or "run:<id>". Locks and slots hang on the
 * holder's lease; a task's request stays until the task is done, a run's
 * goes with its lease. Pure functions; any thread. */
#ifndef LR_CLIENT_LOCK_KEYS_H
#define LR_CLIENT_LOCK_KEYS_H

#include <stdbool.h>

#include <jansson.h>

#include "client/client.h"
#include "records/lockset.h"

/* Room for any of these keys: prefix, path (8 x 65), mode, holder. */
#define LR_LOCK_KEY_SIZE 1024
/* A holder: "task:" or "run:" and an id. */
#define LR_HOLDER_SIZE (LR_ID_SIZE + 8)

void lr_holder_of_task(const char *id, char holder[LR_HOLDER_SIZE]);

/* P locks/<path>/#<rank><MODE>/<holder> */
void lr_lock_key(const lr_client *c, const char *path, lr_lock_mode m, const char *holder,
                 char key[LR_LOCK_KEY_SIZE]);
/* The keys of the modes of ranks lo..hi held on path: [from, to). */
void lr_lock_mode_range(const lr_client *c, const char *path, int lo, int hi,
                        char from[LR_LOCK_KEY_SIZE], char to[LR_LOCK_KEY_SIZE]);
/* A lock key read back: its path (into path), mode and holder (borrowed
 * from key). False for a key that is not one. */
bool lr_lock_key_parse(const lr_client *c, const char *key, char path[LR_LOCK_PATH_SIZE],
                       lr_lock_mode *m, const char **holder);

/* P slots/<key>/<index, 5 digits> */
void lr_slot_key(const lr_client *c, const char *pool, int index, char key[LR_LOCK_KEY_SIZE]);
/* The slots of pool from index `from` on: [from, to). */
void lr_slot_range(const lr_client *c, const char *pool, int from, char lo[LR_LOCK_KEY_SIZE],
                   char hi[LR_LOCK_KEY_SIZE]);
/* P limits/<key>/<N, 5 digits>/<index, 5 digits> */
void lr_limit_key(const lr_client *c, const char *pool, int n, int index,
                  char key[LR_LOCK_KEY_SIZE]);
/* The holders of pool whose limit is below `below`: [lo, hi). */
void lr_limit_range(const lr_client *c, const char *pool, int below, char lo[LR_LOCK_KEY_SIZE],
                    char hi[LR_LOCK_KEY_SIZE]);
bool lr_slot_key_parse(const lr_client *c, const char *key,
                       char pool[LR_LOCK_SEG_MAX + 1], int *index);

/* P wants/<holder> */
void lr_wants_key(const lr_client *c, const char *holder, char key[LR_LOCK_KEY_SIZE]);
/* The wants/ value of a request: {"locks","limits","since"} (either may
 * be absent). New string; NULL when out of memory or for no request. */
char *lr_wants_value(const json_t *locks, const json_t *limits);
/* The same for a stored spec's text, with its "not_before" and "after"
 * when it has them (a request that holds back nobody before then, nor
 * while a task it waits for is unfinished), and "within": the holders
 * ("task:<id>", "run:<id>"; NULL-terminated, may be NULL) whose step or
 * command submits it, which an older waiter waiting for them does not
 * hold it back behind. NULL when it asks for nothing. */
char *lr_wants_of_spec(const char *spec, size_t len, const char *const *within);

#endif
