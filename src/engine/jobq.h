/* jobq.h - the runner's ready jobs and which worker runs which task: the
 * loop pushes jobs, each worker takes one at a time, and the loop takes
 * back those no worker took yet.
 *
 * Threads: only the loop thread pushes and takes back (lr_jobq_free too)
 * and looks up running tasks; worker threads take and finish. One mutex inside guards everything, and
 * no callback runs under it except the `fn` of lr_jobq_running, which must
 * be short and must not call back into the queue. */
#ifndef LR_ENGINE_JOBQ_H
#define LR_ENGINE_JOBQ_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fiber/fiber.h"
#include "leaserun.h"
#include "records/lockset.h"

/* One task handed to a worker. A job holds no claim: another runner may
 * still take the task, which costs the claim txn that finds out. */
struct lr_job {
	char id[LR_ID_SIZE];
	char *spec;         /* spec text from the watch (owned), or NULL */
	size_t spec_len;
	bool fresh;         /* never claimed as far as the loop knows */
	int64_t create_rev; /* of tasks/<id>, as the loop knows it */
	int priority;       /* its place in the dispatch order */
	int64_t lease;      /* the lease to claim it on */
	bool started;       /* a claim of ours is to be taken up again, and its
	                       step started under it already */
	size_t n_slots;     /* the slot to take in each pool of its limits */
	int slots[LR_LIMITS_MAX];
	/* Tasks whose specs the worker reads along with its own, for the
	 * loop's cache (owned). */
	char (*prefetch)[LR_ID_SIZE];
	size_t n_prefetch;
};

/* Free what a job owns (not the struct) and zero it. */
void lr_job_clear(struct lr_job *job);

/* A worker waiting in lr_jobq_take (on its stack), a thread or a fiber. */
struct lr_jobq_waiter {
	lr_wake wake;
	struct lr_jobq_waiter *next;
};

typedef struct lr_jobq {
	pthread_mutex_t mu;
	struct lr_jobq_waiter *waiters; /* to post when a job is ready, or all
	                                   when the queue closes; posted ones
	                                   leave the list */
	struct lr_job *ready;   /* FIFO of jobs no worker took yet */
	size_t n_ready, cap;
	char (*running)[LR_ID_SIZE]; /* per worker slot; "" between jobs */
	int slots;
	bool closed;
} lr_jobq;

/* Room for cap waiting jobs and `slots` workers. LR_ENOMEM or 0. */
int lr_jobq_init(lr_jobq *q, size_t cap, int slots);
/* Frees the jobs still waiting. No worker may be using the queue. */
void lr_jobq_free(lr_jobq *q);

/* Queue a job (the queue takes what it owns). False when full: the
 * caller keeps it. */
bool lr_jobq_push(lr_jobq *q, struct lr_job *job);
/* Jobs waiting for a worker. */
size_t lr_jobq_waiting(lr_jobq *q);
/* The lowest priority among the jobs no worker took yet; false when none
 * waits. */
bool lr_jobq_lowest_priority(lr_jobq *q, int *lowest);

/* Wait for a job for the worker in `slot`; the slot then runs it until
 * lr_jobq_finish. False once the queue is closed (no job taken). */
bool lr_jobq_take(lr_jobq *q, int slot, struct lr_job *out);
/* lr_jobq_take without waiting: false also when no job waits. */
bool lr_jobq_try_take(lr_jobq *q, int slot, struct lr_job *out);
/* The worker in slot is done with its task. */
void lr_jobq_finish(lr_jobq *q, int slot);

/* Take back every waiting job: fn (may be NULL) sees each, then it is
 * cleared. */
void lr_jobq_take_back(lr_jobq *q, void (*fn)(void *user, const struct lr_job *job),
                       void *user);
/* Call fn for each slot running task id (NULL: every busy slot), with the
 * slot's task id, under the queue's mutex, so that the slot cannot move on
 * to another task meanwhile. */
void lr_jobq_running(lr_jobq *q, const char *id,
                     void (*fn)(void *user, int slot, const char *id), void *user);

/* Wake every worker waiting in lr_jobq_take; they get false from then on. */
void lr_jobq_close(lr_jobq *q);

#endif
