/* stop.c - the stop request of a worker's step and its lease deadline.
 * Any thread requests; the worker's thread reads and waits (see stop.h). */
#include "engine/stop.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/clock.h"
#include "leaserun.h"

int lr_stop_init(lr_stop *s)
{
	atomic_store(&s->why, LR_STOP_NONE);
	s->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	return s->fd >= 0 ? 0 : LR_ESYS;
}

void lr_stop_free(lr_stop *s)
{
	if (s->fd >= 0)
		close(s->fd);
	s->fd = -1;
}

void lr_stop_request(lr_stop *s, enum lr_stop_reason why)
{
	int expected = LR_STOP_NONE;
	if (atomic_compare_exchange_strong(&s->why, &expected, (int)why)) {
		uint64_t one = 1;
		ssize_t n = write(s->fd, &one, sizeof(one));
		(void)n;
	}
}

void lr_stop_reset(lr_stop *s)
{
	if (atomic_exchange(&s->why, LR_STOP_NONE) != LR_STOP_NONE) {
		/* Drained only when it was written: a read costs a system
		 * call per task otherwise. */
		uint64_t drain;
		ssize_t n = read(s->fd, &drain, sizeof(drain));
		(void)n;
	}
}

enum lr_stop_reason lr_stop_reason(lr_stop *s, int64_t deadline_ms)
{
	int why = atomic_load(&s->why);
	if (why != LR_STOP_NONE)
		return (enum lr_stop_reason)why;
	/* A deadline that passed while the keepalive had no chance to say so
	 * (the whole process was paused) counts as a lost lease. */
	if (deadline_ms <= lr_mono_ms())
		return LR_STOP_LEASE;
	return LR_STOP_NONE;
}

enum lr_stop_reason lr_stop_wait(lr_stop *s, int64_t (*deadline)(void *user),
                                 void *user, int64_t ms)
{
	int64_t end = lr_mono_ms() + ms;
	for (;;) {
		int64_t until = deadline(user);
		enum lr_stop_reason why = lr_stop_reason(s, until);
		int64_t now = lr_mono_ms();
		if (why != LR_STOP_NONE || now >= end)
			return why;
		if (until > end)
			until = end;
		struct pollfd p = { .fd = s->fd, .events = POLLIN };
		int64_t wait = until - now;
		poll(&p, 1, wait > 1000000 ? 1000000 : (int)(wait > 0 ? wait : 0));
	}
}
