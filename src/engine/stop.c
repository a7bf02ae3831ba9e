/* stop.c - the stop request of a worker's step and its lease deadline, as
 * atomics for the checks and as fds for handlers that poll.
 * Any thread requests; the stream thread extends; the worker's thread
 * arms, reads and waits (see stop.h). */
#include "engine/stop.h"

#include <errno.h>
#include <poll.h>
#include <stdbool.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "base/clock.h"
#include "leaserun.h"

int lr_stop_init(lr_stop *s)
{
	memset(s, 0, sizeof(*s));
	s->request_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	s->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	s->fd = epoll_create1(EPOLL_CLOEXEC);
	s->moved_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	pthread_mutex_init(&s->mu, NULL);
	if (s->request_fd < 0 || s->timer_fd < 0 || s->fd < 0 || s->moved_fd < 0)
		return LR_ESYS;
	struct epoll_event ev = { .events = EPOLLIN };
	if (epoll_ctl(s->fd, EPOLL_CTL_ADD, s->request_fd, &ev) != 0 ||
	    epoll_ctl(s->fd, EPOLL_CTL_ADD, s->timer_fd, &ev) != 0)
		return LR_ESYS;
	return 0;
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

void lr_stop_free(lr_stop *s)
{
	close_fd(&s->request_fd);
	close_fd(&s->timer_fd);
	close_fd(&s->fd);
	close_fd(&s->moved_fd);
	pthread_mutex_destroy(&s->mu);
}

/* The timer fires at `at` (monotonic ms); 0 disarms it. s->mu held. */
static void set_timer(lr_stop *s, int64_t at)
{
	struct itimerspec its;
	memset(&its, 0, sizeof(its));
	if (at > 0) {
		its.it_value.tv_sec = at / 1000;
		its.it_value.tv_nsec = (at % 1000) * 1000000L;
	}
	(void)timerfd_settime(s->timer_fd, at > 0 ? TFD_TIMER_ABSTIME : 0, &its, NULL);
}

static void drain(int fd)
{
	uint64_t n;
	while (read(fd, &n, sizeof(n)) > 0)
		;
}

/* Empty the eventfds, if anything was written to them. s->mu held. */
static void drain_events(lr_stop *s)
{
	if (!atomic_exchange(&s->written, false))
		return;
	drain(s->request_fd);
	drain(s->moved_fd);
}

/* The eventfds are read only when written to, and the timer is set once
 * (timerfd_settime also drops expirations not read yet): a task costs one
 * system call here, not nine. */
void lr_stop_arm(lr_stop *s, int64_t lease, int64_t deadline)
{
	pthread_mutex_lock(&s->mu);
	atomic_store(&s->why, LR_STOP_NONE);
	atomic_store(&s->lost, false);
	drain_events(s);
	atomic_store(&s->deadline, deadline > 0 ? deadline : 1);
	atomic_store(&s->lease, lease);
	atomic_store(&s->fence, 0);
	atomic_store(&s->gone_rev, 0);
	set_timer(s, deadline > 0 ? deadline : 1);
	pthread_mutex_unlock(&s->mu);
}

/* The timer is left to the next arm, which sets it: nobody polls the fd
 * between tasks. */
void lr_stop_disarm(lr_stop *s)
{
	pthread_mutex_lock(&s->mu);
	atomic_store(&s->lease, 0);
	atomic_store(&s->why, LR_STOP_NONE);
	atomic_store(&s->lost, false);
	drain_events(s);
	pthread_mutex_unlock(&s->mu);
}

void lr_stop_extend(lr_stop *s, int64_t lease, int64_t deadline)
{
	if (lease == 0 || atomic_load(&s->lease) != lease)
		return;
	pthread_mutex_lock(&s->mu);
	/* A deadline that passed stays passed: the step was told to stop. */
	bool moved = atomic_load(&s->lease) == lease &&
	             atomic_load(&s->why) == LR_STOP_NONE &&
	             deadline > atomic_load(&s->deadline) &&
	             atomic_load(&s->deadline) > lr_mono_ms();
	if (moved) {
		atomic_store(&s->deadline, deadline);
		set_timer(s, deadline);
		uint64_t one = 1;
		ssize_t n = write(s->moved_fd, &one, sizeof(one));
		(void)n;
		atomic_store(&s->written, true);
	}
	pthread_mutex_unlock(&s->mu);
}

void lr_stop_set_fence(lr_stop *s, int64_t fence)
{
	atomic_store(&s->fence, fence);
	if (atomic_load(&s->gone_rev) > fence)
		lr_stop_request(s, LR_STOP_LEASE);
}

void lr_stop_claim_gone(lr_stop *s, int64_t rev)
{
	long long seen = atomic_load(&s->gone_rev);
	while (seen < rev && !atomic_compare_exchange_weak(&s->gone_rev, &seen, rev))
		;
	int64_t fence = atomic_load(&s->fence);
	if (fence != 0 && rev > fence)
		lr_stop_request(s, LR_STOP_LEASE);
}

/* A fiber waiting in lr_stop_wait: wake it. */
static void wake_sleeper(lr_stop *s)
{
	pthread_mutex_lock(&s->mu);
	if (s->sleeper != NULL) {
		s->sleeper_posts++;
		lr_wake_post(s->sleeper);
	}
	pthread_mutex_unlock(&s->mu);
}

void lr_stop_request(lr_stop *s, enum lr_stop_reason why)
{
	int expected = LR_STOP_NONE;
	uint64_t one = 1;
	if (atomic_compare_exchange_strong(&s->why, &expected, (int)why)) {
		ssize_t n = write(s->request_fd, &one, sizeof(one));
		(void)n;
		atomic_store(&s->written, true);
		wake_sleeper(s);
		return;
	}
	/* The claim went during a cancel's or a shutdown's grace: the task
	 * may run elsewhere at once. The reason stays (the worker acts on it
	 * once the step is over), the step learns of the loss, and moved_fd
	 * wakes its waiter, which ends the grace. */
	if (why == LR_STOP_LEASE && expected != LR_STOP_LEASE &&
	    !atomic_exchange(&s->lost, true)) {
		ssize_t n = write(s->moved_fd, &one, sizeof(one));
		(void)n;
		atomic_store(&s->written, true);
	}
}

bool lr_stop_lost(lr_stop *s)
{
	return lr_stop_reason(s) == LR_STOP_LEASE || atomic_load(&s->lost);
}

enum lr_stop_reason lr_stop_reason(lr_stop *s)
{
	int why = atomic_load(&s->why);
	if (why != LR_STOP_NONE)
		return (enum lr_stop_reason)why;
	/* From the clock, not from any thread having noticed: a process that
	 * was frozen past its deadline knows at its first check. */
	if (atomic_load(&s->deadline) <= lr_mono_ms()) {
		lr_stop_request(s, LR_STOP_LEASE);
		return (enum lr_stop_reason)atomic_load(&s->why);
	}
	return LR_STOP_NONE;
}

/* lr_stop_wait in a fiber: a timed wait on a wake that requests post,
 * until the end or the deadline, whichever comes first (a deadline moved
 * meanwhile is seen when the wait ends at the old one). */
static enum lr_stop_reason fiber_wait(lr_stop *s, int64_t end)
{
	lr_wake wake;
	lr_wake_init(&wake);
	pthread_mutex_lock(&s->mu);
	s->sleeper = &wake;
	s->sleeper_posts = 0;
	pthread_mutex_unlock(&s->mu);
	unsigned taken = 0;
	enum lr_stop_reason why;
	for (;;) {
		why = lr_stop_reason(s);
		int64_t now = lr_mono_ms();
		if (why != LR_STOP_NONE || now >= end)
			break;
		int64_t until = end < lr_stop_deadline(s) ? end : lr_stop_deadline(s);
		if (until < now)
			until = now;
		struct timespec ts = lr_mono_deadline_us((until - now) * 1000);
		if (lr_wake_wait_until(&wake, &ts))
			taken++;
	}
	pthread_mutex_lock(&s->mu);
	s->sleeper = NULL;
	unsigned given = s->sleeper_posts;
	pthread_mutex_unlock(&s->mu);
	for (; taken < given; taken++)
		lr_wake_wait(&wake); /* made already: no wait */
	lr_wake_destroy(&wake);
	return why;
}

enum lr_stop_reason lr_stop_wait(lr_stop *s, int64_t ms)
{
	int64_t end = lr_mono_ms() + ms;
	if (lr_fiber_self() != NULL)
		return fiber_wait(s, end);
	for (;;) {
		enum lr_stop_reason why = lr_stop_reason(s);
		int64_t now = lr_mono_ms();
		if (why != LR_STOP_NONE || now >= end)
			return why;
		/* s->fd wakes on a request and on the deadline's timer. */
		struct pollfd p = { .fd = s->fd, .events = POLLIN };
		int64_t wait = end - now;
		poll(&p, 1, wait > 1000000 ? 1000000 : (int)wait);
	}
}

int64_t lr_stop_deadline(lr_stop *s)
{
	return atomic_load(&s->deadline);
}
