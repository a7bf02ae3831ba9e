/* runner_stats.c - lr_runner_get_stats: a runner's counters (base/stats),
 * its gauges (slots, lease deadline), and the calls of its etcd client by
 * method. Threads: any, at any time; reads atomics and the client's
 * lock-free call counts, never the runner's mutex. */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "engine/runner_int.h"
#include "etcd/callstats.h"

_Static_assert(LR_ETCD_ERROR_CODES == LR_CALL_CODES,
               "lr_etcd_method_stats.errors_by_code mirrors the client's codes");
_Static_assert(LR_ETCD_METHODS >= LR_CALL_METHODS,
               "lr_runner_stats.etcd holds every method the client counts");

#define M_KEEPALIVE "Lease/LeaseKeepAlive"
#define M_WATCH "Watch/Watch"

/* ---- the keepalive, which lr_runner_run creates and frees ---------------- */

void lr_runner_ka_open(lr_runner *r)
{
	atomic_store(&r->ka_open, true);
}

void lr_runner_ka_close(lr_runner *r)
{
	atomic_store(&r->ka_open, false);
	/* A reader that saw it open is still reading: wait (a lookup). */
	while (atomic_load(&r->ka_readers) > 0)
		sched_yield();
}

/* Seconds until r's lease deadline; 0 without a lease. */
static double lease_remaining(lr_runner *r)
{
	int64_t lease = atomic_load(&r->lease), deadline = 0;

	atomic_fetch_add(&r->ka_readers, 1);
	if (lease != 0 && atomic_load(&r->ka_open))
		deadline = lr_keepalive_deadline(r->ka, lease);
	atomic_fetch_sub(&r->ka_readers, 1);
	int64_t left = deadline - lr_mono_ms();
	return deadline != 0 && left > 0 ? (double)left / 1000.0 : 0;
}

/* ---- etcd calls, merged by method over the runners' clients --------------- */

struct calls {
	lr_runner_stats *out;
	lr_hist_snap *hist;   /* one per entry of out->etcd */
};

static void add_call(void *user, const lr_etcd_call_stat *st)
{
	struct calls *c = user;
	lr_runner_stats *out = c->out;
	size_t i = 0;

	while (i < out->n_etcd && strcmp(out->etcd[i].method, st->method) != 0)
		i++;
	if (i == out->n_etcd) {
		if (i == LR_ETCD_METHODS)
			return;
		out->n_etcd++;
		snprintf(out->etcd[i].method, sizeof(out->etcd[i].method), "%s", st->method);
		out->etcd[i].stream = st->stream;
	}
	lr_etcd_method_stats *m = &out->etcd[i];
	m->calls += st->calls;
	m->attempts += st->attempts;
	for (int k = 0; k < LR_ETCD_ERROR_CODES; k++) {
		m->errors_by_code[k] += st->errors[k];
		m->errors += st->errors[k];
	}
	m->reopens += st->reopens;
	lr_hist_snap_add(&c->hist[i], &st->latency);
}

/* Each client once, however many runners share it. */
static void add_clients(lr_runner *const *rs, size_t n, lr_runner_stats *out)
{
	struct calls c = { out, calloc(LR_ETCD_METHODS, sizeof(lr_hist_snap)) };

	if (c.hist == NULL)
		return; /* the runner's own figures only */
	for (size_t i = 0; i < n; i++) {
		bool seen = false;
		for (size_t j = 0; j < i && !seen; j++)
			seen = rs[j]->client == rs[i]->client;
		if (seen)
			continue;
		lr_etcd_call_stats(lr_client_etcd(rs[i]->client), add_call, &c);
		out->etcd_members_left_out +=
		    (uint64_t)lr_etcd_members_left_out(lr_client_etcd(rs[i]->client));
	}
	for (size_t i = 0; i < out->n_etcd; i++) {
		lr_etcd_method_stats *m = &out->etcd[i];
		lr_hist_summary(&c.hist[i], &m->latency);
		if (strcmp(m->method, M_KEEPALIVE) == 0) {
			out->lease_renewal = m->latency;
			out->keepalive_reconnects = m->reopens;
		} else if (strcmp(m->method, M_WATCH) == 0) {
			out->watch_reconnects = m->reopens;
		}
	}
	free(c.hist);
}

void lr_runner_get_stats_sum(lr_runner *const *rs, size_t n, lr_runner_stats *out)
{
	const lr_stats **ss = calloc(n > 0 ? n : 1, sizeof(*ss));

	memset(out, 0, sizeof(*out));
	if (ss == NULL)
		return;
	for (size_t i = 0; i < n; i++)
		ss[i] = &rs[i]->stats;
	lr_stats_snapshot(ss, n, out);
	free(ss);
	for (size_t i = 0; i < n; i++) {
		lr_runner *r = rs[i];
		uint64_t busy = atomic_load_explicit(&r->stats.slots_busy, memory_order_relaxed);
		uint64_t slots = (uint64_t)r->concurrency;
		out->slots += slots;
		out->slots_free += busy < slots ? slots - busy : 0;
		double left = lease_remaining(r);
		if (i == 0 || left < out->lease_remaining_s)
			out->lease_remaining_s = left;
	}
	add_clients(rs, n, out);
}

void lr_runner_get_stats(const lr_runner *r, lr_runner_stats *out)
{
	/* Only read: the sum takes the array of its callers' runners. */
	lr_runner *one = (lr_runner *)r;
	lr_runner_get_stats_sum(&one, 1, out);
}
