/* inbox.h - what reaches the runner's loop from other threads: watch
 * events, lease loss and the workers' reports, queued in order and
 * announced on an eventfd the loop sleeps on.
 *
 * Threads: any thread posts (the etcd stream thread, workers); only the
 * loop takes. One mutex inside, never held across anything but the queue. */
#ifndef LR_ENGINE_INBOX_H
#define LR_ENGINE_INBOX_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/claim.h"
#include "leaserun.h"

/* The watched directories of the prefix. wants/ comes with tasks/ (one
 * watcher: a task and its request arrive together), done/ with claims/. */
enum lr_dir {
	LR_DIR_TASKS, LR_DIR_CLAIMS, LR_DIR_DONE, LR_DIR_CANCEL, LR_DIR_QUEUE,
	LR_DIR_LOCKS, LR_DIR_SLOTS, LR_DIR_WANTS,
	LR_DIR_COUNT,
};

/* What a worker tells the loop about its task. */
enum lr_report {
	LR_REP_CLAIMED,   /* claim won: running */
	LR_REP_COMMITTED, /* a step was committed */
	LR_REP_FINISHED,  /* done/<id> written (by us) */
	LR_REP_LET_GO,    /* not ours any more (dropped, released, error) */
	LR_REP_NOT_HERE,  /* released: this runner could not start its step */
	LR_REP_LOST,      /* another runner's claim (revision in `fence`) won */
	LR_REP_GONE,      /* the task no longer exists */
	LR_REP_BLOCKED,   /* its locks or slots were taken: wait for a change */
	LR_REP_WAIT,      /* not yet (its start time, or a task it waits for):
	                     `fence` holds the start time (unix ms), or 0 and
	                     `text` the id of that task */
};

enum lr_msg_kind {
	LR_MSG_WATCH,      /* a change under one of the watched directories */
	LR_MSG_RESYNC,     /* a watch was compacted or cancelled: re-read */
	LR_MSG_LEASE_LOST, /* the keepalive gave up on a lease */
	LR_MSG_REPORT,     /* from a worker */
	LR_MSG_PREFETCHED, /* specs a worker read for the loop's cache */
};

/* One message; the member of `u` named like its kind is the one in use. */
struct lr_msg {
	enum lr_msg_kind kind;
	bool lazy;               /* can only take work away: no need to wake */
	bool result;             /* a task finished (a done/ put) or went (a
	                            tasks/ delete): work for tasks that wait
	                            for it, if any do (lr_inbox_results_wake) */
	struct lr_msg *next;
	union {
		struct {
			enum lr_dir dir;
			bool deleted;
			char id[LR_ID_SIZE];
			int64_t create_rev, mod_rev, version, lease;
			char *value;     /* tasks/ puts when small, queue/ puts, and
			                    every put under locks/ slots/ wants/ (owned) */
			size_t len;      /* of the value, also when not kept */
			char *sched;     /* tasks/ puts too large to keep: when the
			                    task may start, as a queue record, or
			                    NULL when it says nothing of it (owned) */
			char *key;       /* locks/ slots/ wants/ only (owned) */
		} watch;
		struct {
			char *reason;    /* owned, may be NULL */
		} resync;
		struct {
			int64_t lease;
			char *why;       /* owned, may be NULL */
		} lease_lost;
		struct {
			enum lr_report what;
			char id[LR_ID_SIZE];
			int64_t task_rev; /* of the tasks/<id> the job was for */
			bool started;     /* LET_GO: the step had started */
			lr_task_state state;
			int64_t step, attempt, fence;
			char *text;      /* step name, error or reason (owned) */
		} report;
		struct {
			lr_prefetched *pre; /* owned */
			size_t n;
		} prefetched;
	} u;
};

/* A zeroed message of kind, or NULL when out of memory. */
struct lr_msg *lr_msg_new(enum lr_msg_kind kind);
/* Free one message and what it owns (not the ones chained after it). */
void lr_msg_free(struct lr_msg *m);

/* Lazy messages queued that wake the loop all the same: a runner that
 * sleeps while other runners finish and purge tasks would otherwise keep
 * a message for each of their events until its next wake-up. */
#define LR_INBOX_LAZY_MAX 1024

typedef struct lr_inbox {
	pthread_mutex_t mu;
	struct lr_msg *head, *tail;
	bool wake_sent;  /* wake_fd written since the loop last took */
	bool results_wake;   /* results wake the loop, lazy or not */
	bool results_queued; /* a result is queued, not taken yet */
	size_t queued;   /* messages queued, not taken yet */
	int wake_fd;     /* eventfd, readable while a wake-up is pending */
} lr_inbox;

int lr_inbox_init(lr_inbox *in);
/* Frees the messages left. */
void lr_inbox_free(lr_inbox *in);

/* Queue m and the messages chained after it (the inbox takes them), and
 * wake the loop unless all are lazy: a lazy message waits for the next
 * wake-up, which comes before the loop dispatches again. Any thread. */
void lr_inbox_post(lr_inbox *in, struct lr_msg *m);
/* Whether a result (lr_msg.result) wakes the loop although it is lazy:
 * while tasks wait for others to finish. Turned on with a result queued
 * already, it wakes the loop at once. Loop thread. */
void lr_inbox_results_wake(lr_inbox *in, bool on);
/* Wake the loop without a message (async-signal-safe). */
void lr_inbox_wake(lr_inbox *in);
/* Everything queued so far, oldest first (the caller frees each). */
struct lr_msg *lr_inbox_take(lr_inbox *in);

#endif
