/* history.h - reads the whole history of a prefix back from etcd (a watch
 * from revision 1) and checks the guarantees of the contract on it. */
#ifndef LR_TEST_HISTORY_H
#define LR_TEST_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "etcd/transport.h"

typedef struct history_report {
	size_t tasks;          /* tasks with a done record */
	size_t claims;         /* claims created */
	size_t commits;        /* step commits (checkpoint next_step + 1) */
	size_t finals;         /* done records */
	size_t violations;
	char first[512];       /* the first violation, in words */
} history_report;

/* Check every task under prefix: a claim is never overwritten while held;
 * every checkpoint is written under the live claim's fence (fence 0 only in
 * the claim's own revision); next_step only moves by +1 and each step is
 * committed at most once; one done record per task; a task succeeds only
 * after every step but the last (committed by the done txn) was committed. */
int history_check(lr_etcd *c, const char *prefix, history_report *out);

/* One write of the history, as history_replay hands it over. */
typedef enum history_kind {
	HISTORY_CLAIM,       /* a claim created */
	HISTORY_CHECKPOINT,  /* a checkpoint written (by a claim txn or a holder) */
	HISTORY_DONE,        /* the done record */
} history_kind;

typedef struct history_event {
	history_kind kind;
	const char *task;
	int64_t revision;    /* the revision of the write */
	const char *runner;  /* the writer: the checkpoint's or the claim's
	                        runner; NULL for a done record written with no
	                        claim (cancel, too many attempts) */
	int64_t fence;       /* create revision of the claim it was written
	                        under; 0 when none */
	int64_t committed;   /* the step this write committed, -1 for none */
} history_event;

/* Called for every claim, checkpoint and done record, in revision order, on
 * the watch's thread, one call at a time. Strings live during the call. */
typedef void (*history_fn)(void *user, const history_event *e);

/* history_check, also handing every write to fn (may be NULL). */
int history_replay(lr_etcd *c, const char *prefix, history_fn fn, void *user,
                   history_report *out);

#endif
