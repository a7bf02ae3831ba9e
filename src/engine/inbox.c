/* inbox.c - messages to the runner's loop from other threads.
 * Any thread posts; the loop takes (see inbox.h). */
#include "engine/inbox.h"

#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

struct lr_msg *lr_msg_new(enum lr_msg_kind kind)
{
	struct lr_msg *m = calloc(1, sizeof(*m));
	if (m != NULL)
		m->kind = kind;
	return m;
}

void lr_msg_free(struct lr_msg *m)
{
	if (m == NULL)
		return;
	switch (m->kind) {
	case LR_MSG_WATCH:
		free(m->u.watch.value);
		free(m->u.watch.sched);
		free(m->u.watch.key);
		break;
	case LR_MSG_RESYNC:
		free(m->u.resync.reason);
		break;
	case LR_MSG_LEASE_LOST:
		free(m->u.lease_lost.why);
		break;
	case LR_MSG_REPORT:
		free(m->u.report.text);
		break;
	case LR_MSG_PREFETCHED:
		lr_prefetched_clear(m->u.prefetched.pre, m->u.prefetched.n);
		free(m->u.prefetched.pre);
		break;
	}
	free(m);
}

int lr_inbox_init(lr_inbox *in)
{
	in->head = in->tail = NULL;
	in->queued = 0;
	in->wake_sent = in->results_wake = in->results_queued = false;
	in->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (in->wake_fd < 0)
		return LR_ESYS;
	pthread_mutex_init(&in->mu, NULL);
	return 0;
}

void lr_inbox_free(lr_inbox *in)
{
	if (in->wake_fd < 0)
		return;
	struct lr_msg *m = in->head;
	while (m != NULL) {
		struct lr_msg *next = m->next;
		lr_msg_free(m);
		m = next;
	}
	in->head = in->tail = NULL;
	close(in->wake_fd);
	in->wake_fd = -1;
	pthread_mutex_destroy(&in->mu);
}

void lr_inbox_wake(lr_inbox *in)
{
	uint64_t one = 1;
	ssize_t n = write(in->wake_fd, &one, sizeof(one));
	(void)n;
}

void lr_inbox_post(lr_inbox *in, struct lr_msg *m)
{
	if (m == NULL)
		return;
	bool wake = false, result = false;
	size_t n = 0;
	struct lr_msg *tail = m;
	for (;; tail = tail->next) {
		n++;
		wake = wake || !tail->lazy;
		result = result || tail->result;
		if (tail->next == NULL)
			break;
	}
	pthread_mutex_lock(&in->mu);
	/* Decided under the mutex, so that none slips past the loop turning
	 * results_wake on. */
	in->results_queued = in->results_queued || result;
	wake = wake || (result && in->results_wake);
	in->queued += n;
	wake = wake || in->queued >= LR_INBOX_LAZY_MAX;
	if (in->tail != NULL)
		in->tail->next = m;
	else
		in->head = m;
	in->tail = tail;
	/* One wake-up per batch: a write per message cost a system call and
	 * often a context switch. */
	wake = wake && !in->wake_sent;
	if (wake)
		in->wake_sent = true;
	pthread_mutex_unlock(&in->mu);
	if (wake)
		lr_inbox_wake(in);
}

struct lr_msg *lr_inbox_take(lr_inbox *in)
{
	uint64_t drain;
	ssize_t n = read(in->wake_fd, &drain, sizeof(drain));
	(void)n;
	pthread_mutex_lock(&in->mu);
	struct lr_msg *m = in->head;
	in->head = in->tail = NULL;
	in->queued = 0;
	in->wake_sent = false;
	in->results_queued = false;
	pthread_mutex_unlock(&in->mu);
	return m;
}

void lr_inbox_results_wake(lr_inbox *in, bool on)
{
	pthread_mutex_lock(&in->mu);
	bool wake = on && !in->results_wake && in->results_queued && !in->wake_sent;
	in->results_wake = on;
	if (wake)
		in->wake_sent = true;
	pthread_mutex_unlock(&in->mu);
	if (wake)
		lr_inbox_wake(in);
}
