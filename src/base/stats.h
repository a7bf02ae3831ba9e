/* stats.h - what a runner counts about its own work (claims, commits,
 * completions) and how long each took, in fixed-bucket histograms.
 *
 * Threads: recording is lock-free (relaxed atomics), from any worker
 * thread; a snapshot may be taken from any thread at any time. A snapshot
 * taken while workers record is not one instant: each counter and bucket
 * is read once, so the totals may differ by the events in flight. */
#ifndef LR_STATS_H
#define LR_STATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "leaserun.h"

/* Buckets in microseconds: values below 8 exactly, then 8 buckets per
 * power of two (a relative width of 12.5 %, reported at the middle: within
 * about 6 %), up to 2^40 us (12 days); larger values go in the last. */
#define LR_HIST_SUB_BITS 3
#define LR_HIST_SUB (1 << LR_HIST_SUB_BITS)
#define LR_HIST_BUCKETS (LR_HIST_SUB + (40 - LR_HIST_SUB_BITS) * LR_HIST_SUB)

typedef struct lr_hist {
	atomic_uint_least64_t n[LR_HIST_BUCKETS];
	atomic_uint_least64_t count;
	atomic_uint_least64_t sum_us;
	atomic_uint_least64_t max_us;
} lr_hist;

/* Zeroed memory is an empty histogram. */
void lr_hist_record(lr_hist *h, int64_t us);

/* A plain copy of a histogram, for merging and reading. */
typedef struct lr_hist_snap {
	uint64_t n[LR_HIST_BUCKETS];
	uint64_t count, sum_us, max_us;
} lr_hist_snap;

/* Add h's contents into *s (zero *s first for a plain copy). */
void lr_hist_add_to(const lr_hist *h, lr_hist_snap *s);
/* Add snapshot `from` into *into (histograms of several sources). */
void lr_hist_snap_add(lr_hist_snap *into, const lr_hist_snap *from);
/* The value below which a fraction q (0..1) of the samples lie, in ms:
 * the middle of that sample's bucket, never above the largest sample.
 * 0 when there is none. */
double lr_hist_quantile_ms(const lr_hist_snap *s, double q);
/* count, mean, p50, p90, p99, max of a snapshot. */
void lr_hist_summary(const lr_hist_snap *s, lr_latency *out);

/* The counters of one runner (embedded in struct lr_runner). */
typedef struct lr_stats {
	atomic_uint_least64_t claims_won, claims_lost, steps_committed,
	    attempts_failed, tasks_succeeded, tasks_failed,
	    tasks_cancelled, tasks_let_go, lease_losses;
	/* Step executions by how they ended (lr_runner_stats.steps_*). */
	atomic_uint_least64_t steps_ok, steps_retry, steps_fail, steps_stopped,
	    steps_not_started;
	/* Gauges: claims held, workers busy with a job, pending tasks seen. */
	atomic_uint_least64_t tasks_running, slots_busy, tasks_pending;
	lr_hist claim, commit, completion;
} lr_stats;

/* One more of a counter (relaxed: counters order nothing). */
static inline void lr_stats_inc(atomic_uint_least64_t *c)
{
	atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
}

/* One less of a gauge. */
static inline void lr_stats_dec(atomic_uint_least64_t *c)
{
	atomic_fetch_sub_explicit(c, 1, memory_order_relaxed);
}

/* Count a step execution: stopped (cancel, lease loss, shutdown came
 * first), else by the handler's result. */
void lr_stats_step(lr_stats *s, bool stopped, lr_step_result res);

/* Count a task this runner ended with state st (succeeded, failed,
 * cancelled). */
void lr_stats_task_done(lr_stats *s, lr_task_state st);

/* The public figures of n runners' counters together: counters and
 * gauges summed, histograms merged (lr_runner_get_stats_sum). The figures
 * a runner keeps outside lr_stats (slots, slots_free, lease_remaining_s)
 * are left 0. */
void lr_stats_snapshot(const lr_stats *const *ss, size_t n, lr_runner_stats *out);

#endif
