/* fiber.h - workers that share a thread. A host is one thread running
 * several fibers, each with a stack of its own; a fiber gives the thread
 * up only where it waits (lr_wake, below), never in the middle of
 * anything else, and runs again on the same thread once posted. One reply
 * that completes the writes of many workers then wakes one thread, not
 * one per worker, and the workers go on in turn with no system call
 * between them.
 *
 * What runs in a fiber must not block its thread for long: whatever it
 * blocks in (a sleep, a pipe, a lock held by another fiber of the host
 * that waits) holds up every fiber of the host. A fiber never waits on
 * lr_wake while it holds a mutex that another fiber of its host takes.
 *
 * lr_wake is the one wait: a counting semaphore for one waiter, which is
 * a fiber when made in one and a thread otherwise, and which any thread
 * may post. */
#ifndef LR_FIBER_H
#define LR_FIBER_H

#include <semaphore.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct lr_fiber;
typedef struct lr_host lr_host;

/* Start a thread running n fibers, the i-th calling fn(args[i]) on a stack
 * of `stack` bytes (0: a default). The host ends when all have returned.
 * NULL when out of memory or threads. */
lr_host *lr_host_start(size_t n, void (*fn)(void *arg), void *const args[], size_t stack);
/* Wait for the host's fibers to return and free it. */
void lr_host_join(lr_host *h);
/* Start up to n_hosts hosts into hs[], fn(args[j]) for each of the n
 * args shared out in order (the first n % n_hosts hosts take one more).
 * Returns how many started: n_hosts, or fewer when out of memory or
 * threads (those started run; join them). */
int lr_hosts_start(lr_host **hs, int n_hosts, void (*fn)(void *arg), void *const args[],
                   size_t n);

/* The fiber running on this thread; NULL outside fibers. */
struct lr_fiber *lr_fiber_self(void);
/* Zeroed bytes of the fiber's own (LR_FIBER_LOCAL of them), kept until it
 * returns: what a thread would keep in thread-local storage. NULL outside
 * fibers. */
#define LR_FIBER_LOCAL 64
void *lr_fiber_local(void);

typedef struct lr_wake {
	struct lr_fiber *fiber; /* the fiber that waits; NULL: a thread */
	unsigned posts;         /* in a fiber: posts not taken yet (under
	                           the host's mutex) */
	sem_t sem;              /* in a thread */
} lr_wake;

/* For the calling fiber or thread, which alone waits on it. */
void lr_wake_init(lr_wake *w);
/* Every post must have been taken by a wait before this. */
void lr_wake_destroy(lr_wake *w);
/* Any thread. Touches w no more once the waiter can have taken it. */
void lr_wake_post(lr_wake *w);
/* Take a post, waiting for one as long as needed. */
void lr_wake_wait(lr_wake *w);
/* Take a post, waiting until `until` (CLOCK_MONOTONIC) at most: false
 * when none came by then. */
bool lr_wake_wait_until(lr_wake *w, const struct timespec *until);

/* Sleep at least ms milliseconds: in a fiber, the others of its thread run
 * meanwhile; in a thread, lr_sleep_ms. For backoffs that may run in either. */
void lr_fiber_sleep_ms(int64_t ms);

#endif
