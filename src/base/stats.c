/* stats.c - a runner's counters and latency histograms, and the public
 * public snapshot of them (behind lr_runner_get_stats).
 * Recording: any worker thread, lock-free; snapshots: any thread. */
#include "base/stats.h"

#include <stdlib.h>
#include <string.h>

#define RLX memory_order_relaxed

/* Bucket of a value in microseconds (see LR_HIST_SUB_BITS). */
static int bucket_of(uint64_t us)
{
	if (us < LR_HIST_SUB)
		return (int)us;
	int e = 63 - __builtin_clzll(us); /* >= LR_HIST_SUB_BITS */
	int i = LR_HIST_SUB + (e - LR_HIST_SUB_BITS) * LR_HIST_SUB +
	        (int)((us >> (e - LR_HIST_SUB_BITS)) & (LR_HIST_SUB - 1));
	return i < LR_HIST_BUCKETS ? i : LR_HIST_BUCKETS - 1;
}

/* The middle of bucket i, in microseconds. */
static double bucket_mid(int i)
{
	if (i < LR_HIST_SUB)
		return (double)i;
	int e = (i - LR_HIST_SUB) / LR_HIST_SUB + LR_HIST_SUB_BITS;
	int sub = (i - LR_HIST_SUB) % LR_HIST_SUB;
	double width = (double)(1ULL << (e - LR_HIST_SUB_BITS));
	return (double)(1ULL << e) + (sub + 0.5) * width;
}


void lr_hist_record(lr_hist *h, int64_t us)
{
	uint64_t v = us > 0 ? (uint64_t)us : 0;
	atomic_fetch_add_explicit(&h->n[bucket_of(v)], 1, RLX);
	atomic_fetch_add_explicit(&h->count, 1, RLX);
	atomic_fetch_add_explicit(&h->sum_us, v, RLX);
	uint64_t max = atomic_load_explicit(&h->max_us, RLX);
	while (v > max &&
	       !atomic_compare_exchange_weak_explicit(&h->max_us, &max, v, RLX, RLX))
		;
}

void lr_hist_add_to(const lr_hist *h, lr_hist_snap *s)
{
	/* Only read: C11's atomic_load takes no pointer to const. */
	lr_hist *m = (lr_hist *)h;
	for (int i = 0; i < LR_HIST_BUCKETS; i++)
		s->n[i] += atomic_load_explicit(&m->n[i], RLX);
	s->count += atomic_load_explicit(&m->count, RLX);
	s->sum_us += atomic_load_explicit(&m->sum_us, RLX);
	uint64_t max = atomic_load_explicit(&m->max_us, RLX);
	if (max > s->max_us)
		s->max_us = max;
}

void lr_hist_snap_add(lr_hist_snap *into, const lr_hist_snap *from)
{
	for (int i = 0; i < LR_HIST_BUCKETS; i++)
		into->n[i] += from->n[i];
	into->count += from->count;
	into->sum_us += from->sum_us;
	if (from->max_us > into->max_us)
		into->max_us = from->max_us;
}

double lr_hist_quantile_ms(const lr_hist_snap *s, double q)
{
	uint64_t total = 0;
	for (int i = 0; i < LR_HIST_BUCKETS; i++)
		total += s->n[i];
	if (total == 0)
		return 0;
	if (q < 0)
		q = 0;
	if (q > 1)
		q = 1;
	/* The rank of the sample wanted, 1-based: ceil(q * total). */
	uint64_t rank = (uint64_t)(q * (double)total);
	if ((double)rank < q * (double)total || rank == 0)
		rank++;
	uint64_t seen = 0;
	for (int i = 0; i < LR_HIST_BUCKETS; i++) {
		seen += s->n[i];
		if (seen >= rank) {
			if (i == LR_HIST_BUCKETS - 1)
				return (double)s->max_us / 1000.0; /* open-ended */
			double mid = bucket_mid(i);
			if (s->max_us > 0 && mid > (double)s->max_us)
				mid = (double)s->max_us;
			return mid / 1000.0;
		}
	}
	return (double)s->max_us / 1000.0;
}

/* The public buckets' bounds: 2^(i + LR_LE_FIRST_EXP) microseconds. */
#define LR_LE_FIRST_EXP 7

double lr_latency_bucket_s(int i)
{
	if (i < 0 || i >= LR_LATENCY_BUCKETS)
		return 0;
	return (double)(1ULL << (i + LR_LE_FIRST_EXP)) / 1e6;
}

/* Samples below 2^exp us: every bucket before the one that starts there.
 * A sample is recorded in whole microseconds, rounded down, so one
 * recorded as exactly 2^exp took at least that long: "below" is "at or
 * below the bound" for the durations measured. */
static void cumulative_le(const lr_hist_snap *s, uint64_t le[LR_LATENCY_BUCKETS])
{
	uint64_t seen = 0;
	int from = 0;

	for (int i = 0; i < LR_LATENCY_BUCKETS; i++) {
		int upto = bucket_of(1ULL << (i + LR_LE_FIRST_EXP));
		for (; from < upto; from++)
			seen += s->n[from];
		le[i] = seen;
	}
}

void lr_hist_summary(const lr_hist_snap *s, lr_latency *out)
{
	memset(out, 0, sizeof(*out));
	out->count = s->count;
	if (s->count == 0)
		return;
	out->sum_ms = (double)s->sum_us / 1000.0;
	cumulative_le(s, out->le);
	out->mean_ms = (double)s->sum_us / (double)s->count / 1000.0;
	out->p50_ms = lr_hist_quantile_ms(s, 0.50);
	out->p90_ms = lr_hist_quantile_ms(s, 0.90);
	out->p99_ms = lr_hist_quantile_ms(s, 0.99);
	out->max_ms = (double)s->max_us / 1000.0;
}

void lr_stats_step(lr_stats *s, bool stopped, lr_step_result res)
{
	if (stopped)
		lr_stats_inc(&s->steps_stopped);
	else if (res == LR_STEP_OK)
		lr_stats_inc(&s->steps_ok);
	else if (res == LR_STEP_RETRY)
		lr_stats_inc(&s->steps_retry);
	else
		lr_stats_inc(&s->steps_fail);
}

void lr_stats_task_done(lr_stats *s, lr_task_state st)
{
	switch (st) {
	case LR_TASK_SUCCEEDED:
		lr_stats_inc(&s->tasks_succeeded);
		break;
	case LR_TASK_CANCELLED:
		lr_stats_inc(&s->tasks_cancelled);
		break;
	default:
		lr_stats_inc(&s->tasks_failed);
		break;
	}
}

/* ---- the public snapshot ---------------------------------------------------- */

static uint64_t get(const atomic_uint_least64_t *c)
{
	return atomic_load_explicit((atomic_uint_least64_t *)c, RLX);
}

void lr_stats_snapshot(const lr_stats *const *ss, size_t n, lr_runner_stats *out)
{
	memset(out, 0, sizeof(*out));
	for (size_t i = 0; i < n; i++) {
		const lr_stats *s = ss[i];
		out->claims_won += get(&s->claims_won);
		out->claims_lost += get(&s->claims_lost);
		out->steps_committed += get(&s->steps_committed);
		out->attempts_failed += get(&s->attempts_failed);
		out->tasks_succeeded += get(&s->tasks_succeeded);
		out->tasks_failed += get(&s->tasks_failed);
		out->tasks_cancelled += get(&s->tasks_cancelled);
		out->tasks_let_go += get(&s->tasks_let_go);
		out->lease_losses += get(&s->lease_losses);
		out->steps_ok += get(&s->steps_ok);
		out->steps_retry += get(&s->steps_retry);
		out->steps_fail += get(&s->steps_fail);
		out->steps_stopped += get(&s->steps_stopped);
		out->steps_not_started += get(&s->steps_not_started);
		out->tasks_running += get(&s->tasks_running);
		out->tasks_pending += get(&s->tasks_pending);
	}
	out->tasks_finished = out->tasks_succeeded + out->tasks_failed + out->tasks_cancelled;
	lr_hist_snap *h = calloc(3, sizeof(*h)); /* 7.5 KiB: not on the stack */
	if (h == NULL)
		return; /* counters only */
	for (size_t i = 0; i < n; i++) {
		lr_hist_add_to(&ss[i]->claim, &h[0]);
		lr_hist_add_to(&ss[i]->commit, &h[1]);
		lr_hist_add_to(&ss[i]->completion, &h[2]);
	}
	lr_hist_summary(&h[0], &out->claim);
	lr_hist_summary(&h[1], &out->commit);
	lr_hist_summary(&h[2], &out->completion);
	free(h);
}
