/* stop.h - why the step a worker runs must stop now: a request (cancel,
 * shutdown, lease lost) or its lease deadline passing, read from the clock
 * so that a process that was frozen sees a passed deadline at its first
 * check, before any other thread has run. Also an fd that becomes readable
 * once the step must stop (a request, or the deadline passing: a timer),
 * and one that becomes readable whenever a renewal moved the deadline.
 *
 * Threads: any thread requests a stop (the loop, the worker itself); the
 * etcd stream thread extends the deadline after each renewal; the worker's
 * own thread (its step handler included) arms, reads and waits. `mu`
 * orders the deadline's updates with the timer's; it is held only around
 * them. */
#ifndef LR_ENGINE_STOP_H
#define LR_ENGINE_STOP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "fiber/fiber.h"

enum lr_stop_reason {
	LR_STOP_NONE = 0,
	LR_STOP_CANCEL,   /* cancel/<id> was put: end the task cancelled */
	LR_STOP_LEASE,    /* our lease is gone: drop the task, write nothing */
	LR_STOP_SHUTDOWN, /* the grace period is over: release the claim */
};

typedef struct lr_stop {
	atomic_int why;         /* enum lr_stop_reason; the first one wins */
	atomic_llong lease;     /* the lease the armed task is held on; 0: none */
	atomic_llong deadline;  /* its deadline, monotonic ms */
	atomic_llong fence;     /* the armed task's claim revision; 0: none yet */
	atomic_llong gone_rev;  /* the latest revision at which the watch saw
	                           the task's claim deleted; 0: none */
	atomic_bool lost;       /* the claim went while another stop was
	                           under way (the reason stays) */
	atomic_bool written;    /* request_fd or moved_fd written since they
	                           were last drained */
	pthread_mutex_t mu;
	int request_fd;         /* eventfd: written once `why` was set */
	int timer_fd;           /* timerfd at the deadline (CLOCK_MONOTONIC) */
	int fd;                 /* epoll over both: readable once to stop */
	int moved_fd;           /* eventfd: written when the deadline moved */
	lr_wake *sleeper;       /* a fiber in lr_stop_wait (under mu) */
	unsigned sleeper_posts; /* posts of it made by requests (under mu) */
} lr_stop;

/* The descriptors lr_stop_init opens. */
#define LR_STOP_FDS 4

int lr_stop_init(lr_stop *s);
void lr_stop_free(lr_stop *s);

/* For a task held on `lease` until `deadline` (monotonic ms): no request,
 * the timer at the deadline. */
void lr_stop_arm(lr_stop *s, int64_t lease, int64_t deadline);
/* Between tasks: nothing armed, no request pending (the timer may still
 * fire; the next arm sets it again). Only when nobody can request a stop
 * of the previous task any more. */
void lr_stop_disarm(lr_stop *s);
/* A renewal of `lease` moved its deadline: later, never earlier, and only
 * while no stop is due. */
void lr_stop_extend(lr_stop *s, int64_t lease, int64_t deadline);

/* The armed task is held under the claim of revision `fence`. */
void lr_stop_set_fence(lr_stop *s, int64_t fence);
/* The watch saw the armed task's claim key deleted at revision `rev`.
 * Later than the claim: it is gone (not by this runner's hand while a step
 * runs: etcd dropped it, or someone deleted it), and the step stops with
 * LR_STOP_LEASE. Either order of this and lr_stop_set_fence works. */
void lr_stop_claim_gone(lr_stop *s, int64_t rev);

/* Ask for a stop (once: later requests are ignored until the next arm),
 * except that LR_STOP_LEASE after another reason marks the claim lost and
 * writes moved_fd: a claim lost during a grace ends the grace. */
void lr_stop_request(lr_stop *s, enum lr_stop_reason why);

/* Why to stop now, if at all: the request, or LR_STOP_LEASE once the
 * clock reached the deadline (which then stays the reason). */
enum lr_stop_reason lr_stop_reason(lr_stop *s);
/* Whether the armed task's claim is gone (its lease lost, or the claim
 * deleted), whatever the first reason to stop was. */
bool lr_stop_lost(lr_stop *s);
/* Wait up to ms, unless a stop is due first; the reason to stop, if any.
 * In a fiber, the others of its thread run meanwhile. */
enum lr_stop_reason lr_stop_wait(lr_stop *s, int64_t ms);
int64_t lr_stop_deadline(lr_stop *s);

#endif
