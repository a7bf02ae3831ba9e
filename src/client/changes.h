/* changes.h - a file descriptor that becomes readable when the records of
 * one task, or of every task, change in etcd (a watch), or when etcd stops
 * or starts answering: for displays that redraw when something happened
 * instead of on a timer.
 * Threads: open/clear/close on the caller's thread; the watch sets the
 * descriptor from the etcd client's stream thread. */
#ifndef LR_CLIENT_CHANGES_H
#define LR_CLIENT_CHANGES_H

#include "client/client.h"

typedef struct lr_changes lr_changes;

/* Watch tasks/, claims/, checkpoints/ and done/ of task id, or of every
 * task when id is NULL, from now on. *out is freed by lr_changes_close. */
int lr_changes_open(lr_client *c, const char *id, lr_changes **out, lr_err *err);

/* Readable (poll POLLIN) once something changed since the last clear.
 * Owned by ch. */
int lr_changes_fd(const lr_changes *ch);

/* Take the notification: the caller is about to read the records again.
 * A watch that etcd ended (compaction) is started again from now, which
 * loses nothing since the records are read after this. */
void lr_changes_clear(lr_changes *ch);

/* Whether etcd has stopped answering the watch (for a second or more);
 * then *heard_ms is when it last answered (wall clock, ms since the
 * epoch: what was read is as of then) and why says where and what
 * ("ENDPOINTS: REASON"). The descriptor becomes readable when this
 * changes either way. */
bool lr_changes_down(lr_changes *ch, int64_t *heard_ms, char *why, size_t size);

void lr_changes_close(lr_changes *ch);

#endif
