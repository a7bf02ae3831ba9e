/* Fibers and their wait: posts between fibers of one host, from other
 * threads and other hosts, timed waits, each fiber's own bytes. A check
 * must not fail inside a fiber (it would jump off the fiber's stack):
 * fibers record what they saw, and the case checks it after the join. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "base/clock.h"
#include "fiber/fiber.h"
#include "test.h"

/* ---- two fibers of one host take turns ---------------------------------------- */

#define ROUNDS 10000

struct pingpong {
	lr_wake *mine, *other;     /* other: set before the first post */
	lr_wake wake;
	lr_wake *ready;            /* posted once `wake` exists (thread's) */
	int turns;
	int *shared;               /* both increment it, in turns */
	bool out_of_turn;
	bool first;
};

static void pingpong_main(void *arg)
{
	struct pingpong *p = arg;
	lr_wake_init(&p->wake);
	p->mine = &p->wake;
	lr_wake_post(p->ready);
	lr_wake_wait(&p->wake); /* the go: both exist */
	for (int i = 0; i < ROUNDS; i++) {
		if (!p->first || i > 0)
			lr_wake_wait(&p->wake);
		/* Alternating: the other one's count is ours, or one ahead. */
		if (*p->shared % 2 != (p->first ? 0 : 1))
			p->out_of_turn = true;
		(*p->shared)++;
		p->turns++;
		lr_wake_post(p->other);
	}
	if (!p->first)
		return;
	lr_wake_wait(&p->wake); /* the second one's last post */
}

TEST(two_fibers_of_one_host_take_turns_through_their_wakes)
{
	struct pingpong a = { .first = true }, b = { 0 };
	int shared = 0;
	lr_wake ready;
	lr_wake_init(&ready);
	a.ready = b.ready = &ready;
	a.shared = b.shared = &shared;
	void *args[] = { &a, &b };
	lr_host *h = lr_host_start(2, pingpong_main, args, 0);
	CHECK(h != NULL);
	lr_wake_wait(&ready);
	lr_wake_wait(&ready);
	a.other = b.mine;
	b.other = a.mine;
	lr_wake_post(a.mine);
	lr_wake_post(b.mine);
	lr_host_join(h);
	lr_wake_destroy(&ready);
	CHECK_INT(a.turns, ==, ROUNDS);
	CHECK_INT(b.turns, ==, ROUNDS);
	CHECK_INT(shared, ==, 2 * ROUNDS);
	CHECK(!a.out_of_turn);
	CHECK(!b.out_of_turn);
}

/* ---- posts from threads, and to threads --------------------------------------- */

#define FIBERS 8
#define POSTS 2000

struct counted {
	lr_wake wake;
	lr_wake *ready;          /* a thread's: posted when wake exists, and
	                            once per post taken */
	atomic_int taken;
};

static void counted_main(void *arg)
{
	struct counted *c = arg;
	lr_wake_init(&c->wake);
	lr_wake_post(c->ready);
	for (int i = 0; i < 2 * POSTS; i++) { /* from two threads */
		lr_wake_wait(&c->wake);
		atomic_fetch_add(&c->taken, 1);
	}
	lr_wake_destroy(&c->wake);
	lr_wake_post(c->ready);
}

struct poster {
	struct counted *c;
	int n;
};

static void *poster_main(void *arg)
{
	struct poster *p = arg;
	for (int i = 0; i < POSTS; i++)
		for (int j = 0; j < p->n; j++)
			lr_wake_post(&p->c[j].wake);
	return NULL;
}

TEST(posts_from_other_threads_each_wake_a_fiber_once_and_none_is_lost)
{
	static struct counted c[FIBERS];
	lr_wake ready;
	lr_wake_init(&ready);
	void *args[FIBERS];
	for (int i = 0; i < FIBERS; i++) {
		c[i] = (struct counted){ .ready = &ready };
		atomic_init(&c[i].taken, 0);
		args[i] = &c[i];
	}
	/* Two hosts of four. */
	lr_host *h1 = lr_host_start(FIBERS / 2, counted_main, args, 0);
	lr_host *h2 = lr_host_start(FIBERS / 2, counted_main, args + FIBERS / 2, 64 * 1024);
	CHECK(h1 != NULL && h2 != NULL);
	for (int i = 0; i < FIBERS; i++)
		lr_wake_wait(&ready);
	/* Two threads post each fiber POSTS times between them. */
	struct poster p = { c, FIBERS };
	pthread_t t1, t2;
	pthread_create(&t1, NULL, poster_main, &p);
	pthread_create(&t2, NULL, poster_main, &p);
	pthread_join(t1, NULL);
	pthread_join(t2, NULL);
	for (int i = 0; i < FIBERS; i++)
		lr_wake_wait(&ready); /* one has taken all its posts */
	lr_host_join(h1);
	lr_host_join(h2);
	lr_wake_destroy(&ready);
	for (int i = 0; i < FIBERS; i++)
		CHECK_INT(atomic_load(&c[i].taken), ==, 2 * POSTS);
}

/* ---- a token passed around fibers of several hosts ----------------------------- */

#define RING 24
#define LAPS 300

struct ring_node {
	lr_wake wake;
	struct ring_node *next;
	lr_wake *ready;
	int *token;              /* only the holder of the turn touches it */
	int seen;
	int index;
	bool wrong;
};

static void ring_main(void *arg)
{
	struct ring_node *n = arg;
	lr_wake_init(&n->wake);
	lr_wake_post(n->ready);
	lr_wake_wait(&n->wake); /* the go */
	for (int lap = 0; lap < LAPS; lap++) {
		if (n->index != 0 || lap > 0)
			lr_wake_wait(&n->wake);
		if (*n->token != lap * RING + n->index)
			n->wrong = true;
		(*n->token)++;
		n->seen++;
		lr_wake_post(&n->next->wake);
	}
	if (n->index == 0)
		lr_wake_wait(&n->wake); /* the last node's last post */
}

TEST(a_token_goes_round_fibers_of_three_hosts_in_order)
{
	static struct ring_node nodes[RING];
	int token = 0;
	lr_wake ready;
	lr_wake_init(&ready);
	void *args[3][RING / 3];
	for (int i = 0; i < RING; i++) {
		nodes[i] = (struct ring_node){ .next = &nodes[(i + 1) % RING], .ready = &ready,
			                       .token = &token, .index = i };
		args[i % 3][i / 3] = &nodes[i]; /* neighbours on different hosts */
	}
	lr_host *h[3];
	for (int i = 0; i < 3; i++) {
		h[i] = lr_host_start(RING / 3, ring_main, args[i], 0);
		CHECK(h[i] != NULL);
	}
	for (int i = 0; i < RING; i++)
		lr_wake_wait(&ready);
	for (int i = 0; i < RING; i++)
		lr_wake_post(&nodes[i].wake);
	for (int i = 0; i < 3; i++)
		lr_host_join(h[i]);
	lr_wake_destroy(&ready);
	CHECK_INT(token, ==, RING * LAPS);
	for (int i = 0; i < RING; i++) {
		CHECK_INT(nodes[i].seen, ==, LAPS);
		CHECK(!nodes[i].wrong);
	}
}

/* ---- timed waits ------------------------------------------------------------------ */

struct timed {
	int64_t waited_ms;
	bool got;
	bool posted_got;
	lr_wake wake;
	lr_wake *ready;
	atomic_bool *stop;       /* set when it is done */
};

static void timed_main(void *arg)
{
	struct timed *t = arg;
	lr_wake_init(&t->wake);
	lr_wake_post(t->ready);
	int64_t t0 = lr_mono_ms();
	struct timespec until = lr_mono_deadline_us(60000);
	t->got = lr_wake_wait_until(&t->wake, &until);
	t->waited_ms = lr_mono_ms() - t0;
	/* A post that came before the limit is taken, even at the limit. */
	lr_wake_post(&t->wake);
	until = lr_mono_deadline_us(0);
	t->posted_got = lr_wake_wait_until(&t->wake, &until);
	atomic_store(t->stop, true);
}

/* One of two fibers that are never idle together: each posts the other
 * and waits for it, until `stop`. */
struct busy {
	lr_wake wake;
	lr_wake *partner;
	lr_wake *ready;          /* a thread's: posted once wake exists */
	atomic_bool *stop;
	int64_t spins;
};

static void busy_main(void *arg)
{
	struct busy *b = arg;
	lr_wake_init(&b->wake);
	lr_wake_post(b->ready);
	lr_wake_wait(&b->wake); /* the go */
	while (!atomic_load(b->stop)) {
		lr_wake_post(b->partner);
		lr_wake_wait(&b->wake);
		b->spins++;
	}
	lr_wake_post(b->partner); /* it may be waiting: let it see the stop */
}

static void short_main(void *arg)
{
	struct timed *t = arg;
	lr_wake_init(&t->wake);
	int64_t t0 = lr_mono_ms();
	struct timespec until = lr_mono_deadline_us(50000);
	t->got = lr_wake_wait_until(&t->wake, &until);
	t->waited_ms = lr_mono_ms() - t0;
	atomic_store(t->stop, true);
}

TEST(a_timed_wait_without_a_post_ends_at_its_limit)
{
	atomic_bool stop;
	atomic_init(&stop, false);
	struct timed waiter = { .stop = &stop };
	void *args[] = { &waiter };
	lr_host *h = lr_host_start(1, short_main, args, 0);
	CHECK(h != NULL);
	lr_host_join(h);
	CHECK(!waiter.got);
	CHECK_INT(waiter.waited_ms, >=, 50);
	CHECK_INT(waiter.waited_ms, <, 5000);
}

/* Two kinds of fibers on one host: one function per host, so a
 * dispatcher. */
struct either {
	void (*fn)(void *);
	void *arg;
};

static void either_main(void *arg)
{
	struct either *e = arg;
	e->fn(e->arg);
}

TEST(fibers_that_are_always_ready_do_not_keep_a_timed_wait_from_ending)
{
	atomic_bool stop;
	atomic_init(&stop, false);
	lr_wake ready;
	lr_wake_init(&ready);
	struct timed waiter = { .stop = &stop };
	struct busy x = { .ready = &ready, .stop = &stop }, y = { .ready = &ready, .stop = &stop };
	x.partner = &y.wake;
	y.partner = &x.wake;
	struct either e[] = { { busy_main, &x }, { busy_main, &y }, { short_main, &waiter } };
	void *args[] = { &e[0], &e[1], &e[2] };
	lr_host *h = lr_host_start(3, either_main, args, 0);
	CHECK(h != NULL);
	lr_wake_wait(&ready);
	lr_wake_wait(&ready);
	lr_wake_post(&x.wake); /* from now on one of them is always ready */
	lr_host_join(h);
	lr_wake_destroy(&ready);
	CHECK(!waiter.got);
	CHECK_INT(waiter.waited_ms, >=, 50);
	CHECK_INT(waiter.waited_ms, <, 5000);
	CHECK_INT(x.spins + y.spins, >, 0);
}

TEST(a_post_before_the_limit_is_taken_by_a_timed_wait)
{
	atomic_bool stop;
	atomic_init(&stop, false);
	lr_wake ready;
	lr_wake_init(&ready);
	struct timed t = { .stop = &stop, .ready = &ready };
	void *args[] = { &t };
	lr_host *h = lr_host_start(1, timed_main, args, 0);
	CHECK(h != NULL);
	/* The fiber waits up to 60 s: post it from here. */
	lr_wake_wait(&ready);
	lr_sleep_ms(20);
	lr_wake_post(&t.wake);
	lr_host_join(h);
	lr_wake_destroy(&ready);
	CHECK(t.got);
	CHECK_INT(t.waited_ms, <, 30000);
	CHECK(t.posted_got);
}

/* ---- a fiber's own bytes ---------------------------------------------------------- */

struct local {
	bool zeroed, kept;
	lr_wake wake;
	lr_wake *others[4];
	int index;
};

static void local_main(void *arg)
{
	struct local *l = arg;
	unsigned char *mine = lr_fiber_local();
	l->zeroed = mine != NULL;
	for (int i = 0; mine != NULL && i < LR_FIBER_LOCAL; i++)
		if (mine[i] != 0)
			l->zeroed = false;
	if (mine == NULL)
		return;
	memset(mine, 0x40 + l->index, LR_FIBER_LOCAL);
	/* Let the others write theirs, then look again. */
	lr_wake_init(&l->wake);
	struct timespec soon = lr_mono_deadline_us(20000);
	lr_wake_wait_until(&l->wake, &soon);
	l->kept = lr_fiber_local() == mine;
	for (int i = 0; i < LR_FIBER_LOCAL; i++)
		if (mine[i] != 0x40 + l->index)
			l->kept = false;
}

TEST(each_fiber_has_bytes_of_its_own_and_a_thread_has_none)
{
	struct local l[4];
	void *args[4];
	for (int i = 0; i < 4; i++) {
		l[i] = (struct local){ .index = i };
		args[i] = &l[i];
	}
	CHECK(lr_fiber_local() == NULL);
	CHECK(lr_fiber_self() == NULL);
	lr_host *h = lr_host_start(4, local_main, args, 0);
	CHECK(h != NULL);
	lr_host_join(h);
	for (int i = 0; i < 4; i++) {
		CHECK(l[i].zeroed);
		CHECK(l[i].kept);
	}
}

TEST_LIST(
	TEST_CASE(two_fibers_of_one_host_take_turns_through_their_wakes),
	TEST_CASE(posts_from_other_threads_each_wake_a_fiber_once_and_none_is_lost),
	TEST_CASE(a_token_goes_round_fibers_of_three_hosts_in_order),
	TEST_CASE(a_timed_wait_without_a_post_ends_at_its_limit),
	TEST_CASE(fibers_that_are_always_ready_do_not_keep_a_timed_wait_from_ending),
	TEST_CASE(a_post_before_the_limit_is_taken_by_a_timed_wait),
	TEST_CASE(each_fiber_has_bytes_of_its_own_and_a_thread_has_none),
);
TEST_MAIN(NULL, NULL)
