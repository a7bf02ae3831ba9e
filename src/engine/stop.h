/* stop.h - why the step a worker runs must stop now: a request (cancel,
 * shutdown, lease lost) or its lease deadline passing, and an fd that
 * becomes readable once a request was made.
 *
 * Threads: any thread requests a stop (the loop, the worker itself); the
 * worker's own thread (its step handler included) reads and waits. */
#ifndef LR_ENGINE_STOP_H
#define LR_ENGINE_STOP_H

#include <stdatomic.h>
#include <stdint.h>

enum lr_stop_reason {
	LR_STOP_NONE = 0,
	LR_STOP_CANCEL,   /* cancel/<id> was put: end the task cancelled */
	LR_STOP_LEASE,    /* our lease is gone: drop the task, write nothing */
	LR_STOP_SHUTDOWN, /* the grace period is over: release the claim */
};

typedef struct lr_stop {
	atomic_int why; /* enum lr_stop_reason; the first request wins */
	int fd;         /* eventfd: readable once why was set */
} lr_stop;

int lr_stop_init(lr_stop *s);
void lr_stop_free(lr_stop *s);

/* Ask for a stop (once: later requests are ignored until a reset). */
void lr_stop_request(lr_stop *s, enum lr_stop_reason why);
/* Forget the last request, for the worker's next task. Only when nobody
 * can request a stop of the previous task any more. */
void lr_stop_reset(lr_stop *s);

/* Why to stop now, if at all: the request, or LR_STOP_LEASE once the
 * monotonic time reached deadline_ms (0: the lease is already lost). */
enum lr_stop_reason lr_stop_reason(lr_stop *s, int64_t deadline_ms);

/* Wait up to ms, unless a stop is due first; the reason to stop, if any.
 * deadline(user) gives the current lease deadline, which may move while
 * waiting. */
enum lr_stop_reason lr_stop_wait(lr_stop *s, int64_t (*deadline)(void *user),
                                 void *user, int64_t ms);

#endif
