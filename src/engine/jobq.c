/* jobq.c - the runner's ready jobs and which worker runs which task.
 * Loop and worker threads; one mutex (see jobq.h). */
#include "engine/jobq.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lr_job_clear(struct lr_job *job)
{
	free(job->spec);
	free(job->prefetch);
	memset(job, 0, sizeof(*job));
}

int lr_jobq_init(lr_jobq *q, size_t cap, int slots)
{
	memset(q, 0, sizeof(*q));
	q->ready = calloc(cap > 0 ? cap : 1, sizeof(*q->ready));
	q->running = calloc(slots > 0 ? (size_t)slots : 1, sizeof(*q->running));
	if (q->ready == NULL || q->running == NULL) {
		free(q->ready);
		free(q->running);
		return LR_ENOMEM;
	}
	q->cap = cap;
	q->slots = slots;
	pthread_mutex_init(&q->mu, NULL);
	return 0;
}

void lr_jobq_free(lr_jobq *q)
{
	if (q->ready == NULL)
		return;
	lr_jobq_take_back(q, NULL, NULL);
	pthread_mutex_destroy(&q->mu);
	free(q->ready);
	free(q->running);
	memset(q, 0, sizeof(*q));
}

/* Wake the worker that waited last, if any. Under the mutex, which its
 * wait takes again before its wake goes. */
static void wake_one(lr_jobq *q)
{
	struct lr_jobq_waiter *w = q->waiters;
	if (w == NULL)
		return;
	q->waiters = w->next;
	lr_wake_post(&w->wake);
}

bool lr_jobq_push(lr_jobq *q, struct lr_job *job)
{
	pthread_mutex_lock(&q->mu);
	bool ok = q->n_ready < q->cap && !q->closed;
	if (ok) {
		q->ready[q->n_ready++] = *job;
		memset(job, 0, sizeof(*job));
		wake_one(q);
	}
	pthread_mutex_unlock(&q->mu);
	return ok;
}

bool lr_jobq_lowest_priority(lr_jobq *q, int *lowest)
{
	pthread_mutex_lock(&q->mu);
	bool any = q->n_ready > 0;
	for (size_t i = 0; i < q->n_ready; i++)
		if (i == 0 || q->ready[i].priority < *lowest)
			*lowest = q->ready[i].priority;
	pthread_mutex_unlock(&q->mu);
	return any;
}

size_t lr_jobq_waiting(lr_jobq *q)
{
	pthread_mutex_lock(&q->mu);
	size_t n = q->n_ready;
	pthread_mutex_unlock(&q->mu);
	return n;
}

/* Hand the oldest job to slot. q->mu held; a job waits. */
static void take_first(lr_jobq *q, int slot, struct lr_job *out)
{
	*out = q->ready[0];
	q->n_ready--;
	memmove(q->ready, q->ready + 1, q->n_ready * sizeof(*q->ready));
	snprintf(q->running[slot], LR_ID_SIZE, "%s", out->id);
}

bool lr_jobq_take(lr_jobq *q, int slot, struct lr_job *out)
{
	pthread_mutex_lock(&q->mu);
	while (q->n_ready == 0 && !q->closed) {
		struct lr_jobq_waiter me = { .next = q->waiters };
		lr_wake_init(&me.wake);
		q->waiters = &me;
		pthread_mutex_unlock(&q->mu);
		lr_wake_wait(&me.wake);
		pthread_mutex_lock(&q->mu); /* the post is over once we have it */
		lr_wake_destroy(&me.wake);
	}
	bool got = !q->closed;
	if (got)
		take_first(q, slot, out);
	pthread_mutex_unlock(&q->mu);
	return got;
}

bool lr_jobq_try_take(lr_jobq *q, int slot, struct lr_job *out)
{
	pthread_mutex_lock(&q->mu);
	bool got = q->n_ready > 0 && !q->closed;
	if (got)
		take_first(q, slot, out);
	pthread_mutex_unlock(&q->mu);
	return got;
}

void lr_jobq_finish(lr_jobq *q, int slot)
{
	pthread_mutex_lock(&q->mu);
	q->running[slot][0] = '\0';
	pthread_mutex_unlock(&q->mu);
}

void lr_jobq_take_back(lr_jobq *q, void (*fn)(void *user, const struct lr_job *job),
                       void *user)
{
	pthread_mutex_lock(&q->mu);
	size_t n = q->n_ready;
	q->n_ready = 0;
	pthread_mutex_unlock(&q->mu);
	/* Workers no longer see these slots, and only the loop pushes: fn
	 * runs without the mutex. */
	for (size_t i = 0; i < n; i++) {
		if (fn != NULL)
			fn(user, &q->ready[i]);
		lr_job_clear(&q->ready[i]);
	}
}

void lr_jobq_running(lr_jobq *q, const char *id,
                     void (*fn)(void *user, int slot, const char *id), void *user)
{
	pthread_mutex_lock(&q->mu);
	for (int i = 0; i < q->slots; i++) {
		if (q->running[i][0] == '\0')
			continue;
		if (id == NULL || strcmp(q->running[i], id) == 0)
			fn(user, i, q->running[i]);
	}
	pthread_mutex_unlock(&q->mu);
}

void lr_jobq_close(lr_jobq *q)
{
	pthread_mutex_lock(&q->mu);
	q->closed = true;
	while (q->waiters != NULL)
		wake_one(q);
	pthread_mutex_unlock(&q->mu);
}
