/* fiber.c - hosts and their fibers, and the wait (see fiber.h).
 *
 * A host's thread runs a scheduler: it takes the oldest ready fiber and
 * switches to it (ucontext); the fiber switches back when it waits or
 * returns. The host's mutex guards its ready list, every fiber's state
 * and every fiber's lr_wake counts. A fiber switches back with the mutex
 * held, so that no post can slip between its look at its count and its
 * sleep; the scheduler lets go of the mutex before it runs the next one. */
#include "fiber/fiber.h"

#include "base/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define LR_ASAN_FIBERS 1
#endif

/* A fiber's stack holds what a worker's thread would: jansson recursing
 * through a state nested as deep as the records allow (1000: parsed,
 * copied and dumped, 256-512 KiB, also under AddressSanitizer) or as deep
 * as it parses from a record anyone can put in etcd (2048: under 256 KiB),
 * with a handler's own frames on top. Pages are used only as touched. */
#define DEFAULT_STACK (2 * 1024 * 1024)

enum fiber_state { READY, RUNNING, WAITING, RETURNED };

struct lr_fiber {
	ucontext_t ctx;
	lr_host *host;
	void (*fn)(void *arg);
	void *arg;
	void *stack;             /* mmap'd, its lowest page a guard */
	size_t stack_size;       /* with the guard page */
	enum fiber_state state;
	lr_wake *waits_on;       /* WAITING: the wake a post of which readies it */
	bool timed;              /* WAITING: until `until` at most */
	struct timespec until;
	struct lr_fiber *next_ready;
	void *fake_stack;        /* the address sanitizer's, while switched out */
	_Alignas(max_align_t) unsigned char local[LR_FIBER_LOCAL];
};

struct lr_host {
	pthread_t thread;
	pthread_mutex_t mu;
	pthread_cond_t cond;     /* the scheduler sleeps: nothing is ready */
	bool sleeping;
	ucontext_t sched;
	struct lr_fiber *fibers;
	size_t n, live;
	struct lr_fiber *ready, *ready_tail;
	size_t timed;            /* fibers in a wait with a time limit */
	const void *thread_stack; /* the thread's own stack (sanitizer) */
	size_t thread_stack_size;
	void *fake_stack;
};

static _Thread_local struct lr_fiber *current;

struct lr_fiber *lr_fiber_self(void)
{
	return current;
}

void *lr_fiber_local(void)
{
	return current != NULL ? current->local : NULL;
}

/* ---- switching ----------------------------------------------------------------- */

/* From the scheduler to f. */
static void run(lr_host *h, struct lr_fiber *f)
{
	current = f;
#ifdef LR_ASAN_FIBERS
	__sanitizer_start_switch_fiber(&h->fake_stack, (char *)f->stack + getpagesize(),
	                               f->stack_size - (size_t)getpagesize());
#endif
	swapcontext(&h->sched, &f->ctx);
#ifdef LR_ASAN_FIBERS
	__sanitizer_finish_switch_fiber(h->fake_stack, NULL, NULL);
#endif
	current = NULL;
}

/* Back from f (running) to its scheduler, the host's mutex held. */
static void yield(struct lr_fiber *f)
{
	lr_host *h = f->host;
#ifdef LR_ASAN_FIBERS
	__sanitizer_start_switch_fiber(f->state == RETURNED ? NULL : &f->fake_stack,
	                               h->thread_stack, h->thread_stack_size);
#endif
	swapcontext(&f->ctx, &h->sched);
#ifdef LR_ASAN_FIBERS
	__sanitizer_finish_switch_fiber(f->fake_stack, NULL, NULL);
#endif
}

static void fiber_main(void)
{
	struct lr_fiber *f = current;
	lr_host *h = f->host;
#ifdef LR_ASAN_FIBERS
	__sanitizer_finish_switch_fiber(NULL, &h->thread_stack, &h->thread_stack_size);
#endif
	f->fn(f->arg);
	pthread_mutex_lock(&h->mu);
	f->state = RETURNED;
	yield(f); /* never comes back */
}

/* Under the mutex. */
static void make_ready(lr_host *h, struct lr_fiber *f)
{
	if (f->state == WAITING && f->timed)
		h->timed--;
	f->state = READY;
	f->waits_on = NULL;
	f->timed = false;
	f->next_ready = NULL;
	if (h->ready_tail != NULL)
		h->ready_tail->next_ready = f;
	else
		h->ready = f;
	h->ready_tail = f;
	if (h->sleeping)
		pthread_cond_signal(&h->cond);
}

static bool before(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec < b->tv_sec || (a->tv_sec == b->tv_sec && a->tv_nsec < b->tv_nsec);
}

/* Ready the fibers whose time to wait is up; *first: when the next one's
 * will be, if any waits with a limit. Under the mutex. */
static bool expire(lr_host *h, struct timespec *first)
{
	struct timespec now;
	bool any = false;
	clock_gettime(CLOCK_MONOTONIC, &now);
	for (size_t i = 0; i < h->n && h->timed > 0; i++) {
		struct lr_fiber *f = &h->fibers[i];
		if (f->state != WAITING || !f->timed)
			continue;
		if (!before(&now, &f->until)) {
			make_ready(h, f);
		} else if (!any || before(&f->until, first)) {
			*first = f->until;
			any = true;
		}
	}
	return any;
}

/* Nothing is ready: sleep until a post, or the first wait's limit. Under
 * the mutex. */
static void idle(lr_host *h)
{
	struct timespec first;
	bool timed = h->timed > 0 && expire(h, &first);
	if (h->ready != NULL)
		return;
	h->sleeping = true;
	if (timed)
		pthread_cond_timedwait(&h->cond, &h->mu, &first);
	else
		pthread_cond_wait(&h->cond, &h->mu);
	h->sleeping = false;
}

static void *host_main(void *arg)
{
	lr_host *h = arg;
	pthread_mutex_lock(&h->mu);
	while (h->live > 0) {
		struct timespec first;
		if (h->timed > 0) /* their limits pass also while others run */
			expire(h, &first);
		struct lr_fiber *f = h->ready;
		if (f == NULL) {
			idle(h);
			continue;
		}
		h->ready = f->next_ready;
		if (h->ready == NULL)
			h->ready_tail = NULL;
		f->state = RUNNING;
		pthread_mutex_unlock(&h->mu);
		run(h, f); /* back with the mutex */
		if (f->state == RETURNED)
			h->live--;
	}
	pthread_mutex_unlock(&h->mu);
	return NULL;
}

/* ---- hosts ----------------------------------------------------------------------- */

static void free_host(lr_host *h)
{
	for (size_t i = 0; i < h->n; i++)
		if (h->fibers[i].stack != NULL)
			munmap(h->fibers[i].stack, h->fibers[i].stack_size);
	free(h->fibers);
	pthread_cond_destroy(&h->cond);
	pthread_mutex_destroy(&h->mu);
	free(h);
}

/* f's stack (a guard page below it) and context, to start in fn(arg). */
static int make_fiber(lr_host *h, struct lr_fiber *f, size_t stack, void (*fn)(void *arg),
                      void *arg)
{
	size_t page = (size_t)getpagesize();
	size_t size = stack + page;
	void *s = mmap(NULL, size, PROT_READ | PROT_WRITE,
	               MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK | MAP_NORESERVE, -1, 0);
	if (s == MAP_FAILED)
		return -1;
	if (mprotect(s, page, PROT_NONE) != 0 || getcontext(&f->ctx) != 0) {
		munmap(s, size);
		return -1;
	}
	f->stack = s;
	f->stack_size = size;
	f->host = h;
	f->fn = fn;
	f->arg = arg;
	f->ctx.uc_stack.ss_sp = (char *)s + page;
	f->ctx.uc_stack.ss_size = stack;
	f->ctx.uc_link = NULL;
	makecontext(&f->ctx, fiber_main, 0);
	return 0;
}

lr_host *lr_host_start(size_t n, void (*fn)(void *arg), void *const args[], size_t stack)
{
	size_t page = (size_t)getpagesize();
	stack = stack == 0 ? DEFAULT_STACK : (stack + page - 1) / page * page;
	lr_host *h = calloc(1, sizeof(*h));
	if (h == NULL)
		return NULL;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&h->mu, NULL);
	pthread_cond_init(&h->cond, &ca);
	pthread_condattr_destroy(&ca);
	h->fibers = calloc(n > 0 ? n : 1, sizeof(*h->fibers));
	if (h->fibers == NULL) {
		free_host(h);
		return NULL;
	}
	h->n = n;
	for (size_t i = 0; i < n; i++) {
		if (make_fiber(h, &h->fibers[i], stack, fn, args[i]) != 0) {
			free_host(h);
			return NULL;
		}
		make_ready(h, &h->fibers[i]);
	}
	h->live = n;
	if (pthread_create(&h->thread, NULL, host_main, h) != 0) {
		free_host(h);
		return NULL;
	}
	return h;
}

int lr_hosts_start(lr_host **hs, int n_hosts, void (*fn)(void *arg), void *const args[],
                   size_t n)
{
	size_t from = 0;
	int started = 0;
	for (; started < n_hosts; started++) {
		size_t k = n / (size_t)n_hosts + ((size_t)started < n % (size_t)n_hosts ? 1 : 0);
		if ((hs[started] = lr_host_start(k, fn, args + from, 0)) == NULL)
			break;
		from += k;
	}
	return started;
}

void lr_host_join(lr_host *h)
{
	if (h == NULL)
		return;
	pthread_join(h->thread, NULL);
	free_host(h);
}

/* ---- the wait -------------------------------------------------------------------- */

void lr_wake_init(lr_wake *w)
{
	w->fiber = current;
	w->posts = 0;
	if (w->fiber == NULL)
		sem_init(&w->sem, 0, 0); /* cannot fail: not shared, 0 */
}

void lr_wake_destroy(lr_wake *w)
{
	if (w->fiber == NULL)
		sem_destroy(&w->sem);
}

void lr_wake_post(lr_wake *w)
{
	struct lr_fiber *f = w->fiber;
	if (f == NULL) {
		sem_post(&w->sem);
		return;
	}
	lr_host *h = f->host;
	pthread_mutex_lock(&h->mu);
	w->posts++;
	if (f->state == WAITING && f->waits_on == w)
		make_ready(h, f);
	pthread_mutex_unlock(&h->mu);
}

static bool fiber_wait(lr_wake *w, const struct timespec *until)
{
	struct lr_fiber *f = w->fiber;
	lr_host *h = f->host;
	pthread_mutex_lock(&h->mu);
	for (;;) {
		if (w->posts > 0) {
			w->posts--;
			pthread_mutex_unlock(&h->mu);
			return true;
		}
		if (until != NULL) {
			struct timespec now;
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (!before(&now, until)) {
				pthread_mutex_unlock(&h->mu);
				return false;
			}
			f->until = *until;
		}
		f->timed = until != NULL;
		if (f->timed)
			h->timed++;
		f->state = WAITING;
		f->waits_on = w;
		yield(f);
		/* Running again, the mutex let go of by the scheduler. */
		pthread_mutex_lock(&h->mu);
	}
}

void lr_wake_wait(lr_wake *w)
{
	if (w->fiber != NULL) {
		fiber_wait(w, NULL);
		return;
	}
	while (sem_wait(&w->sem) != 0)
		; /* EINTR */
}

bool lr_wake_wait_until(lr_wake *w, const struct timespec *until)
{
	if (w->fiber != NULL)
		return fiber_wait(w, until);
	int rc;
	while ((rc = sem_clockwait(&w->sem, CLOCK_MONOTONIC, until)) != 0 && errno == EINTR)
		;
	return rc == 0;
}

void lr_fiber_sleep_ms(int64_t ms)
{
	if (current == NULL) {
		lr_sleep_ms(ms);
		return;
	}
	if (ms <= 0)
		return;
	lr_wake w;
	lr_wake_init(&w);
	struct timespec until = lr_mono_deadline_us(ms * 1000);
	while (lr_wake_wait_until(&w, &until)) /* nobody posts it */
		;
	lr_wake_destroy(&w);
}
