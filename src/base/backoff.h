/* backoff.h - how long to wait before a step retry or an etcd reconnect, with
 * jitter from a small per-owner PRNG. An lr_rng or lr_backoff belongs to one thread. */
#ifndef LR_BACKOFF_H
#define LR_BACKOFF_H

#include <stddef.h>
#include <stdint.h>

#include "leaserun.h"

/* No retry wait is longer than 5 minutes, whatever the base and attempt. */
#define LR_RETRY_MAX_MS (5 * 60 * 1000)

/* Fill buf with n bytes from the operating system's random source. */
int lr_random_bytes(void *buf, size_t n, lr_err *err);

/* A splitmix64 generator: fast, any seed is fine, good enough for jitter and
 * for picking among tasks; not for secrets. Each owner (runner, client) has
 * its own, so nothing is shared between threads. */
typedef struct lr_rng {
	uint64_t state;
} lr_rng;

/* Seed from the operating system, so that runners started together do not
 * jitter in step. If that fails the error is returned but rng is still seeded
 * (from the clock), so callers may ignore the result. */
int lr_rng_init(lr_rng *rng, lr_err *err);
/* A fixed seed, for reproducible tests. */
void lr_rng_seed(lr_rng *rng, uint64_t seed);
uint64_t lr_rng_next(lr_rng *rng);
/* Uniform in [0, n); 0 when n is 0. */
uint64_t lr_rng_below(lr_rng *rng, uint64_t n);

/* The wait before retry k (k >= 1; k < 1 counts as 1) of a failed step:
 * d = base_ms * 2^(k-1) capped at LR_RETRY_MAX_MS, then "equal jitter": a
 * uniform value in [d/2, d], so retries of many tasks spread out but never
 * come sooner than half the nominal wait. base_ms <= 0 gives 0. rng may be
 * NULL for no jitter (the wait is d). Never overflows, whatever k and base. */
int64_t lr_retry_backoff_ms(int64_t base_ms, int64_t k, lr_rng *rng);

/* A doubling wait for reconnect loops: next() returns the current wait with
 * equal jitter and doubles it up to max_ms; reset() after a success. */
typedef struct lr_backoff {
	int64_t initial_ms;
	int64_t max_ms;
	int64_t cur_ms;
} lr_backoff;

/* initial_ms < 0 counts as 0; max_ms < initial_ms counts as initial_ms. */
void lr_backoff_init(lr_backoff *b, int64_t initial_ms, int64_t max_ms);
/* rng may be NULL for no jitter. */
int64_t lr_backoff_next(lr_backoff *b, lr_rng *rng);
void lr_backoff_reset(lr_backoff *b);

#endif
