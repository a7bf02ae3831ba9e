/* fleet.h - the live view of a prefix that the web page shows: every task
 * (state, step k/n, attempt, holder, error, what happened to it lately)
 * and every live runner, read once and then kept by an etcd watch; which
 * of them changed since the page was last told.
 *
 * Threads: the watch applies changes on the etcd client's stream thread;
 * the page's threads read and encode. f->mu guards the whole view and is
 * held only while applying or encoding, never across an etcd call. */
#ifndef LR_WEB_FLEET_H
#define LR_WEB_FLEET_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "client/client.h"
#include "etcd/kv.h"

typedef struct lr_fleet lr_fleet;

/* Something changed (or the view was read again): called after the change
 * was applied, without f->mu, on the thread that applied it. Must be
 * quick: it should only wake whoever publishes. */
typedef void (*lr_fleet_changed_fn)(void *user);

/* ---- the model (fleet.c) ------------------------------------------------- */

/* An empty view of c's prefix. *out is freed by lr_fleet_free. */
int lr_fleet_new(lr_client *c, lr_fleet_changed_fn changed, void *user,
                 lr_fleet **out, lr_err *err);
/* Stops the watch first (lr_fleet_stop) if it runs. */
void lr_fleet_free(lr_fleet *f);

/* Apply one key as read or as a watch event: kv's key says what it is
 * (tasks/, claims/, checkpoints/, done/, cancel/, runners/ under the
 * prefix; other keys are ignored). A change older than what the view
 * already holds for that key (by mod revision) is ignored, so a watch may
 * replay events the initial read already saw. `live` says the change
 * happened now (a watch event), so it goes into the task's history.
 * Takes f->mu. */
void lr_fleet_apply(lr_fleet *f, const lr_kv *kv, bool deleted, bool live);

/* Forget everything (before reading again). Takes f->mu. */
void lr_fleet_clear(lr_fleet *f);

/* Call the changed callback (after a batch of lr_fleet_apply). */
void lr_fleet_notify(lr_fleet *f);

/* ---- reading and watching etcd (fleet_sync.c) -------------------------- */

/* Read every key of the prefix and watch it from then on. Blocking. After
 * a compaction or a cancelled watch the view is read again by
 * lr_fleet_resync (lr_fleet_needs_resync tells when). */
int lr_fleet_start(lr_fleet *f, lr_err *err);
/* Stop the watch; no change is applied after it returns. */
void lr_fleet_stop(lr_fleet *f);
bool lr_fleet_needs_resync(lr_fleet *f);
int lr_fleet_resync(lr_fleet *f, lr_err *err);

/* Ask etcd how long each runner's lease has left (one LeaseTimeToLive per
 * runner: etcd has no watch for it). Blocking; from one thread at a time. */
void lr_fleet_refresh_ttls(lr_fleet *f);

/* Whether etcd has stopped answering the watch (for a second or more):
 * the view is then as of when it last did. Takes f->mu. */
bool lr_fleet_etcd_down(lr_fleet *f);

/* ---- what the page gets (fleet_json.c) --------------------------------- */

/* Everything: {"revision","tasks":[...],"runners":[...],"locks":{...},
 * "etcd":{...}}. New reference. */
json_t *lr_fleet_snapshot(lr_fleet *f);
/* What changed since the last call (or the snapshot): {"tasks":[changed
 * tasks], "removed":[ids], "runners":[all runners] (only when they
 * changed)}, or NULL when nothing did. New reference. */
json_t *lr_fleet_take_changes(lr_fleet *f);
/* Whether etcd answers: {"reachable":true}, or {"reachable":false,
 * "as_of": RFC 3339, when it last answered (the view is as of then),
 * "error": "ENDPOINTS: REASON"}, when that changed since the last call;
 * NULL otherwise. New reference. */
json_t *lr_fleet_take_etcd(lr_fleet *f);
/* The mod revisions of a task's records (0: none): what the view holds,
 * or what a read from etcd found. */
typedef struct lr_fleet_revs {
	int64_t task, checkpoint, done;
} lr_fleet_revs;

/* One task with its history, {"task":{...},"history":[{"at","what"}]},
 * or NULL when there is no such task; *revs: the revisions of its
 * records in the view. New reference. */
json_t *lr_fleet_task_detail(lr_fleet *f, const char *id, lr_fleet_revs *revs);

#endif
