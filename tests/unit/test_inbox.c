/* test_inbox.c - the runner loop's inbox: when posts wake the loop, and
 * that lazy messages cannot pile up unseen while it sleeps. No etcd. */
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "engine/inbox.h"
#include "test.h"

static bool woken(lr_inbox *in)
{
	struct pollfd p = { .fd = in->wake_fd, .events = POLLIN };
	return poll(&p, 1, 0) == 1;
}

static struct lr_msg *lazy_msg(int i)
{
	struct lr_msg *m = lr_msg_new(LR_MSG_WATCH);
	CHECK(m != NULL);
	m->lazy = true;
	m->u.watch.dir = LR_DIR_DONE;
	snprintf(m->u.watch.id, sizeof(m->u.watch.id), "t%06d", i);
	return m;
}

static size_t take_all(lr_inbox *in)
{
	size_t n = 0;
	struct lr_msg *m = lr_inbox_take(in);
	while (m != NULL) {
		struct lr_msg *next = m->next;
		lr_msg_free(m);
		m = next;
		n++;
	}
	return n;
}

TEST(a_lazy_message_waits_and_a_busy_one_wakes)
{
	lr_inbox in;
	CHECK(lr_inbox_init(&in) == 0);
	lr_inbox_post(&in, lazy_msg(0));
	CHECK(!woken(&in));
	struct lr_msg *m = lr_msg_new(LR_MSG_REPORT);
	CHECK(m != NULL);
	lr_inbox_post(&in, m);
	CHECK(woken(&in));
	CHECK_INT(take_all(&in), ==, 2);
	CHECK(!woken(&in));
	lr_inbox_free(&in);
}

/* An idle runner hears of every claim, result and purge of the other
 * runners' tasks, all lazy: they must not wait for a wake-up that may
 * not come for hours, holding memory for each task done elsewhere. */
TEST(lazy_messages_alone_wake_the_loop_before_they_pile_up)
{
	lr_inbox in;
	CHECK(lr_inbox_init(&in) == 0);
	int posted = 0;
	while (!woken(&in) && posted < 100000)
		lr_inbox_post(&in, lazy_msg(posted++));
	CHECK_INT(posted, <=, LR_INBOX_LAZY_MAX);
	CHECK_INT(take_all(&in), ==, (size_t)posted);
	/* And again after the loop took them: the count starts over. */
	for (int i = 0; i < LR_INBOX_LAZY_MAX - 1; i++)
		lr_inbox_post(&in, lazy_msg(i));
	CHECK(!woken(&in));
	lr_inbox_post(&in, lazy_msg(0));
	CHECK(woken(&in));
	CHECK_INT(take_all(&in), ==, (size_t)LR_INBOX_LAZY_MAX);
	lr_inbox_free(&in);
}

TEST_LIST(
	TEST_CASE(a_lazy_message_waits_and_a_busy_one_wakes),
	TEST_CASE(lazy_messages_alone_wake_the_loop_before_they_pile_up),
);
TEST_MAIN(NULL, NULL)
