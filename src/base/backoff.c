/* backoff.c - retry and reconnect waits with equal jitter, and the PRNG behind it.
 * No shared state: each lr_rng / lr_backoff is used by the one thread owning it. */
#include "base/backoff.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "base/clock.h"
#include "base/error.h"

int lr_random_bytes(void *buf, size_t n, lr_err *err)
{
	unsigned char *p = buf;
	size_t got = 0;

	/* getrandom may return short or be interrupted before the pool is
	 * ready; keep asking until all bytes are there. */
	while (got < n) {
		ssize_t r = getrandom(p + got, n - got, 0);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return lr_err_set(err, LR_ESYS, "getrandom: %s",
			                  strerror(errno));
		}
		got += (size_t)r;
	}
	return 0;
}

int lr_rng_init(lr_rng *rng, lr_err *err)
{
	uint64_t seed;
	int rc = lr_random_bytes(&seed, sizeof(seed), err);
	/* Jitter must work even then: a clock- and address-based seed still
	 * keeps runners apart, so the generator is always usable. */
	if (rc != 0)
		seed = (uint64_t)lr_mono_us() ^ (uint64_t)(uintptr_t)rng;
	lr_rng_seed(rng, seed);
	return rc;
}

void lr_rng_seed(lr_rng *rng, uint64_t seed)
{
	rng->state = seed;
}

uint64_t lr_rng_next(lr_rng *rng)
{
	uint64_t z = (rng->state += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

uint64_t lr_rng_below(lr_rng *rng, uint64_t n)
{
	if (n == 0)
		return 0;
	/* Reject the low values that would make r % n favour small results:
	 * 2^64 mod n of them. */
	uint64_t threshold = (0 - n) % n;
	for (;;) {
		uint64_t r = lr_rng_next(rng);
		if (r >= threshold)
			return r % n;
	}
}

/* A uniform value in [d/2, d]: half the wait is fixed so a retry never comes
 * much sooner than asked, the other half spreads competing waiters apart. */
static int64_t equal_jitter(int64_t d, lr_rng *rng)
{
	int64_t half = d / 2;
	if (rng == NULL)
		return d;
	return half + (int64_t)lr_rng_below(rng, (uint64_t)(d - half) + 1);
}

int64_t lr_retry_backoff_ms(int64_t base_ms, int64_t k, lr_rng *rng)
{
	if (base_ms <= 0)
		return 0;
	int64_t d = base_ms < LR_RETRY_MAX_MS ? base_ms : LR_RETRY_MAX_MS;
	/* Doubling stops at the cap, so this runs at most ~19 times and d
	 * never exceeds 2 * LR_RETRY_MAX_MS, whatever k is. */
	for (int64_t i = 1; i < k && d < LR_RETRY_MAX_MS; i++)
		d *= 2;
	if (d > LR_RETRY_MAX_MS)
		d = LR_RETRY_MAX_MS;
	return equal_jitter(d, rng);
}

void lr_backoff_init(lr_backoff *b, int64_t initial_ms, int64_t max_ms)
{
	if (initial_ms < 0)
		initial_ms = 0;
	if (max_ms < initial_ms)
		max_ms = initial_ms;
	b->initial_ms = initial_ms;
	b->max_ms = max_ms;
	b->cur_ms = initial_ms;
}

int64_t lr_backoff_next(lr_backoff *b, lr_rng *rng)
{
	int64_t d = b->cur_ms;
	/* Compare against half the maximum instead of doubling first: the
	 * doubling itself could overflow for a maximum near INT64_MAX. */
	b->cur_ms = d > b->max_ms / 2 ? b->max_ms : d * 2;
	return equal_jitter(d, rng);
}

void lr_backoff_reset(lr_backoff *b)
{
	b->cur_ms = b->initial_ms;
}
