/* callstats.c - the table of an etcd client's call counts, per method.
 * Counting: any thread, lock-free; adding a method: under the table's
 * mutex, once per method; reading: any thread. */
#include "etcd/callstats.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd/rpc.h"

#define RLX memory_order_relaxed
#define LR_CALL_NAME 40 /* room for a short method name */

struct lr_call_slot {
	char method[LR_CALL_NAME]; /* short name; written once, before n grows */
	bool stream;
	atomic_uint_least64_t calls, attempts, reopens;
	atomic_uint_least64_t errors[LR_CALL_CODES];
	lr_hist latency;
};

struct lr_call_stats {
	pthread_mutex_t mu;  /* adding a slot */
	atomic_size_t n;     /* slots in use; slot[i < n] is read without mu */
	lr_call_slot slot[LR_CALL_METHODS];
};

lr_call_stats *lr__call_stats_new(void)
{
	lr_call_stats *s = calloc(1, sizeof(*s));
	if (s != NULL)
		pthread_mutex_init(&s->mu, NULL);
	return s;
}

void lr__call_stats_free(lr_call_stats *s)
{
	if (s == NULL)
		return;
	pthread_mutex_destroy(&s->mu);
	free(s);
}

/* The slot named `name` among the first n; NULL when none is. */
static lr_call_slot *find(lr_call_stats *s, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(s->slot[i].method, name) == 0)
			return &s->slot[i];
	return NULL;
}

lr_call_slot *lr__call_slot(lr_call_stats *s, const char *method, bool stream)
{
	if (s == NULL)
		return NULL;
	const char *name = lr__method_short(method);
	/* A slot is filled in before n counts it (release), so that a
	 * reader who sees it in n (acquire) sees its name too. */
	lr_call_slot *sl = find(s, atomic_load_explicit(&s->n, memory_order_acquire), name);
	if (sl != NULL)
		return sl;
	pthread_mutex_lock(&s->mu);
	size_t n = atomic_load_explicit(&s->n, RLX);
	sl = find(s, n, name);
	if (sl == NULL && n < LR_CALL_METHODS) {
		sl = &s->slot[n];
		snprintf(sl->method, sizeof(sl->method), "%s", name);
		sl->stream = stream;
		atomic_store_explicit(&s->n, n + 1, memory_order_release);
	}
	pthread_mutex_unlock(&s->mu);
	return sl;
}

void lr__call_count_attempt(lr_call_slot *sl, int64_t us)
{
	if (sl == NULL)
		return;
	atomic_fetch_add_explicit(&sl->attempts, 1, RLX);
	lr_hist_record(&sl->latency, us);
}

void lr__call_count_result(lr_call_slot *sl, int rc)
{
	if (sl == NULL)
		return;
	atomic_fetch_add_explicit(&sl->calls, 1, RLX);
	if (rc == 0)
		return;
	int i = -rc > 0 && -rc < LR_CALL_CODES ? -rc : 0;
	atomic_fetch_add_explicit(&sl->errors[i], 1, RLX);
}

void lr__call_count_reopen(lr_call_slot *sl)
{
	if (sl != NULL)
		atomic_fetch_add_explicit(&sl->reopens, 1, RLX);
}

void lr__call_count_round_trip(lr_call_slot *sl, int64_t us)
{
	if (sl != NULL)
		lr_hist_record(&sl->latency, us);
}

void lr__call_stats_each(lr_call_stats *s, lr_etcd_call_stat_fn fn, void *user)
{
	if (s == NULL)
		return;
	size_t n = atomic_load_explicit(&s->n, memory_order_acquire);
	lr_etcd_call_stat *st = malloc(sizeof(*st)); /* a few KiB: not on the stack */
	if (st == NULL)
		return;
	for (size_t i = 0; i < n; i++) {
		lr_call_slot *sl = &s->slot[i];
		memset(st, 0, sizeof(*st));
		st->method = sl->method;
		st->stream = sl->stream;
		st->calls = atomic_load_explicit(&sl->calls, RLX);
		st->attempts = atomic_load_explicit(&sl->attempts, RLX);
		st->reopens = atomic_load_explicit(&sl->reopens, RLX);
		for (int c = 0; c < LR_CALL_CODES; c++)
			st->errors[c] = atomic_load_explicit(&sl->errors[c], RLX);
		lr_hist_add_to(&sl->latency, &st->latency);
		fn(user, st);
	}
	free(st);
}
