/* test_lock_table.c - the lock table's decisions (locks/table.h), fed keys
 * made up in the test: which modes a held lock keeps out, which slot a
 * pool gives under mixed limits, first come first served among waiters,
 * and keys and values that are not what they should be. The client is
 * opened on a real etcd only for its prefix; nothing is written there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "client/client.h"
#include "client/lock_keys.h"
#include "etcd/kv.h"
#include "hosted.h"
#include "locks/table.h"
#include "records/lockset.h"
#include "test.h"

static lr_client *c;
static lr_lock_table *t;
static int64_t next_rev = 100;

static void setup_table(void)
{
	if (c == NULL)
		c = hosted_client("/lock-table/");
	lr_lock_table_free(t);
	t = lr_lock_table_new(c);
	CHECK(t != NULL);
}

/* The lease a holder's keys hang on, as every holder's do. */
#define HOLDER_LEASE 77

static lr_kv kv_of(const char *key, const char *value, int64_t create_rev)
{
	lr_kv kv = { .key = key, .key_len = strlen(key), .value = value,
	             .value_len = strlen(value), .create_rev = create_rev,
	             .mod_rev = create_rev, .version = 1 };
	return kv;
}

/* A request of locks and limits, both JSON text (either NULL). */
static lr_lockset *request(const char *locks, const char *limits)
{
	json_t *l = locks != NULL ? json_loads(locks, 0, NULL) : NULL;
	json_t *n = limits != NULL ? json_loads(limits, 0, NULL) : NULL;
	lr_lockset *set = NULL;
	lr_err err;
	CHECK_OK(lr_lockset_parse(l, n, &set, &err), &err);
	json_decref(l);
	json_decref(n);
	CHECK(set != NULL);
	return set;
}

/* holder holds every node of locks (JSON text) as a runner would. */
static void hold(const char *holder, const char *locks)
{
	lr_lockset *set = request(locks, NULL);
	for (size_t i = 0; i < set->n_nodes; i++) {
		char key[LR_LOCK_KEY_SIZE];
		lr_lock_key(c, set->nodes[i].path, set->nodes[i].mode, holder, key);
		lr_kv kv = kv_of(key, "{\"runner\":\"box-1\"}", next_rev++);
		kv.lease = HOLDER_LEASE;
		CHECK(lr_lock_table_put(t, &kv));
	}
	free(set);
}

/* holder holds slot index of pool, running under limit (0: not said). */
static void hold_slot(const char *holder, const char *pool, int index, int limit)
{
	char key[LR_LOCK_KEY_SIZE], value[300];
	lr_slot_key(c, pool, index, key);
	if (limit > 0)
		snprintf(value, sizeof(value), "{\"holder\":\"%s\",\"limit\":%d}", holder, limit);
	else
		snprintf(value, sizeof(value), "{\"holder\":\"%s\"}", holder);
	lr_kv kv = kv_of(key, value, next_rev++);
	kv.lease = HOLDER_LEASE;
	CHECK(lr_lock_table_put(t, &kv));
}

/* holder asks (wants/) for value, at revision rev. */
static bool want(const char *holder, const char *value, int64_t rev)
{
	char key[LR_LOCK_KEY_SIZE];
	lr_wants_key(c, holder, key);
	lr_kv kv = kv_of(key, value, rev);
	return lr_lock_table_put(t, &kv);
}

static bool everyone_alive(void *user, const char *holder)
{
	(void)user;
	(void)holder;
	return true;
}

static bool only_task_b_dead(void *user, const char *holder)
{
	(void)user;
	return strcmp(holder, "task:b") != 0;
}

/* Whether holder could take locks and limits (JSON text) now, asked at
 * request_rev; slots and why for the caller (either may be NULL). */
static bool can_take(const char *holder, const char *locks, const char *limits,
                     int64_t request_rev, int *slots, char *why, size_t size,
                     lr_waiter_alive_fn alive)
{
	lr_lockset *set = request(locks, limits);
	int own[LR_LIMITS_MAX];
	bool ok = lr_lock_table_can_take(t, set, holder, request_rev, slots != NULL ? slots : own,
	                                 alive, NULL, why, size);
	free(set);
	return ok;
}

static bool can_take_now(const char *holder, const char *locks, const char *limits)
{
	return can_take(holder, locks, limits, 0, NULL, NULL, 0, everyone_alive);
}

/* ---- cases ----------------------------------------------------------------- */

TEST(a_held_lock_keeps_out_exactly_the_modes_it_conflicts_with)
{
	static const char *const modes[] = { "IS", "IX", "S", "SIX", "X" };
	static const char compatible[5][6] = {
		/*          IS IX S SIX X */
		/* IS  */ "11110",
		/* IX  */ "11000",
		/* S   */ "10100",
		/* SIX */ "10000",
		/* X   */ "00000",
	};
	for (int h = 0; h < 5; h++)
		for (int w = 0; w < 5; w++) {
			setup_table();
			char held[100], wanted[100];
			snprintf(held, sizeof(held), "{\"org/a\":\"%s\"}", modes[h]);
			snprintf(wanted, sizeof(wanted), "{\"org/a\":\"%s\"}", modes[w]);
			hold("task:a", held);
			bool ok = can_take_now("task:b", wanted, NULL);
			if (ok != (compatible[w][h] == '1'))
				TEST_FAIL("%s wanted beside %s held: can_take says %d", modes[w], modes[h],
				          ok);
		}
}

TEST(a_lock_below_or_above_a_held_one_is_kept_out_through_the_intention)
{
	setup_table();
	hold("task:a", "{\"org/a\":\"X\"}");
	char why[400];
	CHECK(!can_take("task:b", "{\"org\":\"S\"}", NULL, 0, NULL, why, sizeof(why),
	                everyone_alive));
	CHECK_STR(why, "IX org held by task a on box-1");
	CHECK(!can_take_now("task:b", "{\"org/a/b\":\"IS\"}", NULL));
	CHECK(can_take_now("task:b", "{\"org/c\":\"X\"}", NULL));
	CHECK(can_take_now("task:b", "{\"org\":\"IX\"}", NULL));
}

TEST(a_holders_own_locks_and_slots_do_not_keep_it_out)
{
	setup_table();
	hold("task:a", "{\"org/a\":\"X\"}");
	hold_slot("task:a", "gpu", 0, 1);
	int slots[LR_LIMITS_MAX];
	CHECK(can_take("task:a", "{\"org/a\":\"X\"}", "{\"gpu\":1}", 0, slots, NULL, 0,
	               everyone_alive));
	CHECK_INT(slots[0], ==, 0);
	CHECK(lr_lock_table_holds(t, "task:a"));
	CHECK(!lr_lock_table_holds(t, "task:b"));
}

TEST(a_pool_gives_the_lowest_free_slot_below_its_limit)
{
	setup_table();
	int slots[LR_LIMITS_MAX];
	CHECK(can_take("task:x", NULL, "{\"gpu\":3}", 0, slots, NULL, 0, everyone_alive));
	CHECK_INT(slots[0], ==, 0);
	hold_slot("task:a", "gpu", 0, 3);
	hold_slot("task:b", "gpu", 2, 3);
	CHECK(can_take("task:x", NULL, "{\"gpu\":3}", 0, slots, NULL, 0, everyone_alive));
	CHECK_INT(slots[0], ==, 1);
	hold_slot("task:c", "gpu", 1, 3);
	char why[400];
	CHECK(!can_take("task:x", NULL, "{\"gpu\":3}", 0, slots, why, sizeof(why),
	                everyone_alive));
	CHECK_STR(why, "pool gpu full: 3 of 3 slots held");
	/* Another pool is not this one. */
	CHECK(can_take("task:x", NULL, "{\"cpu\":1}", 0, slots, NULL, 0, everyone_alive));
	CHECK_INT(slots[0], ==, 0);
}

TEST(a_pool_gives_no_slot_beside_a_holder_under_a_smaller_limit)
{
	setup_table();
	hold_slot("task:a", "api", 0, 1);
	char why[400];
	CHECK(!can_take("task:x", NULL, "{\"api\":3}", 0, NULL, why, sizeof(why),
	                everyone_alive));
	CHECK_STR(why, "pool api full: 1 held, and task a runs under a limit of 1");

	/* A holder at a slot at or beyond a smaller limit keeps it out too. */
	setup_table();
	hold_slot("task:a", "api", 1, 3);
	CHECK(!can_take("task:x", NULL, "{\"api\":1}", 0, NULL, why, sizeof(why),
	                everyone_alive));
	CHECK_HAS(why, "slot 1 held by task a, beyond this limit of 1");

	/* Under a limit of 2 beside a holder of 3 at slot 0: slot 1. */
	setup_table();
	hold_slot("task:a", "api", 0, 3);
	int slots[LR_LIMITS_MAX];
	CHECK(can_take("task:x", NULL, "{\"api\":2}", 0, slots, NULL, 0, everyone_alive));
	CHECK_INT(slots[0], ==, 1);

	/* A slot whose limit is not known (an older holder) counts only as a slot. */
	setup_table();
	hold_slot("task:a", "api", 0, 0);
	CHECK(can_take("task:x", NULL, "{\"api\":2}", 0, slots, NULL, 0, everyone_alive));
	CHECK_INT(slots[0], ==, 1);
}

TEST(an_older_waiter_that_conflicts_goes_first)
{
	setup_table();
	CHECK(want("task:b", "{\"locks\":{\"org/a\":\"X\"}}", 10));
	char why[400];
	/* Asked after it (20) or just now (0): behind it. */
	CHECK(!can_take("task:c", "{\"org/a\":\"S\"}", NULL, 20, NULL, why, sizeof(why),
	                everyone_alive));
	CHECK_STR(why, "behind task b, which asked first");
	CHECK(!can_take_now("task:c", "{\"org/a\":\"S\"}", NULL));
	/* Asked before it: not behind it. */
	CHECK(can_take("task:c", "{\"org/a\":\"S\"}", NULL, 5, NULL, NULL, 0, everyone_alive));
	/* Not in conflict with it, its own request, or a waiter that is gone:
	 * not held back. */
	CHECK(can_take("task:c", "{\"org/b\":\"X\"}", NULL, 20, NULL, NULL, 0, everyone_alive));
	CHECK(can_take("task:b", "{\"org/a\":\"X\"}", NULL, 10, NULL, NULL, 0, everyone_alive));
	CHECK(can_take("task:c", "{\"org/a\":\"S\"}", NULL, 20, NULL, NULL, 0, only_task_b_dead));
	/* NULL counts every request. */
	CHECK(!can_take("task:c", "{\"org/a\":\"S\"}", NULL, 20, NULL, NULL, 0, NULL));
	/* A waiter that holds already is running, not waiting. */
	hold("task:b", "{\"org/z\":\"S\"}");
	CHECK(can_take("task:c", "{\"org/a\":\"S\"}", NULL, 20, NULL, NULL, 0, everyone_alive));
}

TEST(a_waiter_for_the_same_pool_goes_first)
{
	setup_table();
	CHECK(want("task:b", "{\"limits\":{\"gpu\":4}}", 10));
	CHECK(!can_take("task:c", NULL, "{\"gpu\":4}", 20, NULL, NULL, 0, everyone_alive));
	CHECK(can_take("task:c", NULL, "{\"cpu\":4}", 20, NULL, NULL, 0, everyone_alive));
}

/* An older waiter that cannot be granted anyway does not hold a request
 * back when it waits for the very task (or run) the request is made
 * within: that task's step makes the request, and waiting for the waiter
 * would be waiting for ever. Nor when only holds taken before it asked
 * keep it out, of what the request does not touch. One blocked on what
 * the request touches still does (no starving an X by S). */
TEST(a_waiter_blocked_by_what_the_request_does_not_touch_holds_it_not_back)
{
	setup_table();
	hold("task:t", "{\"thread/1\":\"X\"}");
	CHECK(want("task:u", "{\"locks\":{\"thread/1\":\"X\"},\"limits\":{\"api\":8}}", 10));
	/* t took its lock after u asked: not a request's to go ahead... */
	char why[400];
	CHECK(!can_take("run:other", NULL, "{\"api\":8}", 20, NULL, why, sizeof(why),
	                everyone_alive));
	CHECK_STR(why, "behind task u, which asked first");
	/* ...unless made within t. */
	static const char *const in_t[] = { "task:t", NULL };
	lr_lock_table_within(t, in_t);
	CHECK(can_take("run:step-of-t", NULL, "{\"api\":8}", 20, NULL, NULL, 0, everyone_alive));
	CHECK(can_take("run:step-of-t", "{\"b\":\"X\"}", NULL, 20, NULL, NULL, 0,
	               everyone_alive));
	/* Even one touching what u waits for: u cannot go before t ends. */
	CHECK(can_take("run:step-of-t", "{\"c\":\"X\"}", "{\"api\":8}", 20, NULL, NULL, 0,
	               everyone_alive));
	lr_lock_table_within(t, NULL);
	/* A hold taken before u asked: any request of what it does not
	 * touch goes ahead. */
	setup_table();
	hold("task:t", "{\"thread/1\":\"X\"}");
	CHECK(want("task:u", "{\"locks\":{\"thread/1\":\"X\"},\"limits\":{\"api\":8}}",
	           next_rev++));
	CHECK(can_take("run:other", NULL, "{\"api\":8}", 0, NULL, NULL, 0, everyone_alive));
	/* Touching its blocker: behind it. */
	CHECK(!can_take("task:v", "{\"thread/1/x\":\"S\"}", "{\"api\":8}", 20, NULL, why,
	                sizeof(why), everyone_alive)); /* IS on thread/1 is kept out anyway */
	setup_table();
	hold("task:h", "{\"org/a\":\"S\"}");
	CHECK(want("task:w", "{\"locks\":{\"org/a\":\"X\"}}", 10));
	CHECK(!can_take("task:s", "{\"org/a\":\"S\"}", NULL, 20, NULL, why, sizeof(why),
	                everyone_alive));
	CHECK_STR(why, "behind task w, which asked first");
	/* Blocked by a full pool the request uses: behind it too. */
	setup_table();
	hold_slot("task:h", "gpu", 0, 1);
	CHECK(want("task:w", "{\"limits\":{\"gpu\":1}}", 10));
	CHECK(!can_take("task:s", NULL, "{\"gpu\":2}", 20, NULL, NULL, 0, everyone_alive));
	/* A waiter that could be granted now (being taken) still goes first. */
	setup_table();
	CHECK(want("task:w", "{\"locks\":{\"org/a\":\"X\"}}", 10));
	CHECK(!can_take("task:s", "{\"org/a\":\"S\"}", NULL, 20, NULL, NULL, 0,
	                everyone_alive));
}

/* Newcomers taking turns, each going ahead of an older waiter while the
 * other holds it up, would keep it waiting as long as they come: a hold
 * taken after the waiter asked puts the next newcomer behind it. */
TEST(newcomers_cannot_keep_an_older_waiter_waiting_by_taking_turns)
{
	setup_table();
	hold("run:c0", "{\"g\":\"S\"}");
	CHECK(want("task:w", "{\"locks\":{\"g\":\"X\"},\"limits\":{\"p\":1}}", next_rev++));
	/* w waits for c0, which came first: b1, using only the pool, goes. */
	CHECK(can_take("run:b1", NULL, "{\"p\":1}", 0, NULL, NULL, 0, everyone_alive));
	hold_slot("run:b1", "p", 0, 1);
	/* c1 touches what keeps w out: behind it. */
	char why[400];
	CHECK(!can_take("run:c1", "{\"g\":\"S\"}", NULL, 0, NULL, why, sizeof(why),
	                everyone_alive));
	CHECK_STR(why, "behind task w, which asked first");
	/* c0 ends: only b1 keeps w out, and b1 came after w asked, so c1
	 * still waits, and w is next once b1 ends. */
	char key[LR_LOCK_KEY_SIZE];
	lr_lock_key(c, "g", LR_LOCK_S, "run:c0", key);
	CHECK(lr_lock_table_delete(t, key, next_rev++));
	CHECK(!can_take("run:c1", "{\"g\":\"S\"}", NULL, 0, NULL, why, sizeof(why),
	                everyone_alive));
	CHECK_STR(why, "behind task w, which asked first");
	char slot_key[LR_LOCK_KEY_SIZE];
	lr_slot_key(c, "p", 0, slot_key);
	CHECK(lr_lock_table_delete(t, slot_key, next_rev++));
	CHECK(can_take("task:w", "{\"g\":\"X\"}", "{\"p\":1}", 1, NULL, NULL, 0,
	               everyone_alive));
}

/* A task submitted by a step of p (its request says "within") does not
 * wait behind an older waiter that waits for p: p waits for it. Entries
 * of "within" that name no holder are left out. */
TEST(a_request_made_within_a_holder_passes_a_waiter_that_waits_for_it)
{
	setup_table();
	hold("run:q", "{\"c\":\"X\"}");
	CHECK(want("task:w", "{\"locks\":{\"a\":\"X\",\"b\":\"X\",\"c\":\"X\"}}", next_rev++));
	hold("task:p", "{\"a\":\"X\"}"); /* taken after w asked */
	/* Without "within", s waits behind w, which waits for p. */
	CHECK(want("task:s", "{\"locks\":{\"b\":\"X\"}}", next_rev++));
	char why[400];
	CHECK(!can_take("task:s", "{\"b\":\"X\"}", NULL, next_rev - 1, NULL, why, sizeof(why),
	                everyone_alive));
	CHECK_STR(why, "behind task w, which asked first");
	/* Made within holders that are not w's way, or within junk: the same. */
	CHECK(want("task:s", "{\"locks\":{\"b\":\"X\"},\"within\":[\"task:q\",\"p\",\"task:\","
	      "\"task:p/x\",7,null,\"run:\",\"task:p \"]}", next_rev++));
	CHECK(!can_take("task:s", "{\"b\":\"X\"}", NULL, next_rev - 1, NULL, NULL, 0,
	                everyone_alive));
	CHECK(want("task:s", "{\"locks\":{\"b\":\"X\"},\"within\":\"task:p\"}", next_rev++));
	CHECK(!can_take("task:s", "{\"b\":\"X\"}", NULL, next_rev - 1, NULL, NULL, 0,
	                everyone_alive));
	/* Made within p: it goes. */
	CHECK(want("task:s", "{\"locks\":{\"b\":\"X\"},\"within\":[\"run:h\",\"task:p\"]}",
	           next_rev++));
	CHECK(can_take("task:s", "{\"b\":\"X\"}", NULL, next_rev - 1, NULL, NULL, 0,
	               everyone_alive));
	/* A newcomer made within nothing still waits behind w. */
	CHECK(!can_take("task:n", "{\"b\":\"X\"}", NULL, 0, NULL, NULL, 0, everyone_alive));
}

TEST(a_waiter_whose_start_time_is_to_come_holds_back_nobody)
{
	setup_table();
	CHECK(want("task:b", "{\"locks\":{\"org/a\":\"X\"},\"not_before\":\"2999-01-01T00:00:00Z\"}",
	           10));
	CHECK(can_take("task:c", "{\"org/a\":\"X\"}", NULL, 20, NULL, NULL, 0, everyone_alive));
	CHECK(want("task:d", "{\"locks\":{\"org/a\":\"X\"},\"not_before\":\"2001-01-01T00:00:00Z\"}",
	           11));
	CHECK(!can_take("task:c", "{\"org/a\":\"X\"}", NULL, 20, NULL, NULL, 0, everyone_alive));
}

struct order {
	char holders[8][32];
	int n;
};

static int note_dep(void *user, const char *id)
{
	struct order *o = user;
	if (o->n < 8)
		snprintf(o->holders[o->n++], sizeof(o->holders[0]), "%s", id);
	return 0;
}

/* tasks/<id> or done/<id> of a dependency put (or deleted) by a watch. */
static bool dep_key(const char *kind, const char *id, bool present)
{
	char key[LR_KEY_SIZE];
	lr_key(c, kind, id, key);
	if (!present)
		return lr_lock_table_delete(t, key, next_rev++);
	lr_kv kv = kv_of(key, "{}", next_rev++);
	return lr_lock_table_put(t, &kv);
}

TEST(a_waiter_whose_dependency_is_unfinished_holds_back_nobody)
{
	setup_table();
	CHECK(want("task:t", "{\"locks\":{\"res\":\"X\"},\"after\":[\"d\",\"e\"]}", 10));
	char why[400];
	/* Nothing known of d and e yet: t counts, as a runner sees it. */
	CHECK(!can_take("run:u", "{\"res\":\"X\"}", NULL, 20, NULL, why, sizeof(why), NULL));
	CHECK_STR(why, "behind task t, which asked first");
	CHECK(!lr_lock_table_waits_first(t, "task:t", NULL, 0));
	/* e has finished, d exists without a result: t waits for d, not for
	 * the lock, and the run goes ahead. */
	lr_lock_table_dep_seen(t, "e", true, true);
	lr_lock_table_dep_seen(t, "d", true, false);
	CHECK(can_take("run:u", "{\"res\":\"X\"}", NULL, 20, NULL, NULL, 0, NULL));
	CHECK(lr_lock_table_waits_first(t, "task:t", why, sizeof(why)));
	CHECK_STR(why, "after d, which has not finished");
	/* d ends: t is next. */
	CHECK(dep_key(LR_K_DONE, "d", true));
	CHECK(!can_take("run:u", "{\"res\":\"X\"}", NULL, 20, NULL, why, sizeof(why), NULL));
	CHECK_STR(why, "behind task t, which asked first");
	CHECK(!lr_lock_table_waits_first(t, "task:t", NULL, 0));
	/* d retried (its result deleted): unfinished again. */
	CHECK(dep_key(LR_K_DONE, "d", false));
	CHECK(can_take("run:u", "{\"res\":\"X\"}", NULL, 20, NULL, NULL, 0, NULL));
	/* d purged (task and result gone): finished, t will fail, and is next. */
	CHECK(dep_key(LR_K_TASKS, "d", false));
	CHECK(!can_take("run:u", "{\"res\":\"X\"}", NULL, 20, NULL, NULL, 0, NULL));
	/* Keys of tasks nobody waits for are not the table's. */
	CHECK(!dep_key(LR_K_DONE, "x", true));
	CHECK(!dep_key(LR_K_TASKS, "x", false));
}

TEST(the_dependencies_read_are_those_of_older_conflicting_waiters)
{
	setup_table();
	CHECK(want("task:t", "{\"locks\":{\"res\":\"X\"},\"after\":[\"d\"]}", 10));
	CHECK(want("task:v", "{\"locks\":{\"other\":\"X\"},\"after\":[\"e\"]}", 11));
	CHECK(want("task:w", "{\"locks\":{\"res\":\"X\"},\"after\":[\"f\"]}", 30));
	lr_lockset *set = request("{\"res\":\"S\"}", NULL);
	lr_err err;
	/* Read from the test's etcd, where none of them exists: d finished,
	 * and t itself gone. */
	CHECK_OK(lr_lock_table_load_deps(t, c, set, 20, &err), &err);
	free(set);
	struct order o = { .n = 0 };
	CHECK_INT(lr_lock_table_each_dep(t, note_dep, &o), ==, 0);
	CHECK_INT(o.n, ==, 2);
	CHECK_STR(o.holders[0], "d");
	CHECK_STR(o.holders[1], "t");
	CHECK(can_take("run:u", "{\"res\":\"S\"}", NULL, 20, NULL, NULL, 0, NULL));
	/* t lives after all: it is next. */
	lr_lock_table_dep_seen(t, "t", true, false);
	CHECK(!can_take("run:u", "{\"res\":\"S\"}", NULL, 20, NULL, NULL, 0, NULL));
}

/* A task's request outlives its task only when tasks/<id> was deleted by
 * hand (purge deletes both; its completion deletes the request with the
 * result): once the owner knows, it holds back nobody. */
TEST(a_request_whose_task_is_gone_or_finished_holds_back_nobody)
{
	setup_table();
	CHECK(want("task:t", "{\"locks\":{\"res\":\"X\"}}", 10));
	CHECK(want("task:r", "{\"locks\":{\"res\":\"X\"}}", 11));
	char why[400];
	lr_lock_table_dep_seen(t, "t", true, false);
	lr_lock_table_dep_seen(t, "r", true, false);
	CHECK(!can_take("run:u", "{\"res\":\"X\"}", NULL, 20, NULL, why, sizeof(why), NULL));
	CHECK_STR(why, "behind task t, which asked first");
	CHECK(dep_key(LR_K_TASKS, "t", false));
	CHECK(!can_take("run:u", "{\"res\":\"X\"}", NULL, 20, NULL, why, sizeof(why), NULL));
	CHECK_STR(why, "behind task r, which asked first");
	CHECK(can_take("run:u", "{\"res\":\"X\"}", NULL, 11, NULL, NULL, 0, NULL));
	CHECK(dep_key(LR_K_TASKS, "t", true));
	CHECK(dep_key(LR_K_DONE, "t", true));
	CHECK(can_take("run:u", "{\"res\":\"X\"}", NULL, 11, NULL, NULL, 0, NULL));
}

static void note_want(void *user, const char *holder, const lr_lockset *set, int64_t rev,
                      bool holding, const char *value)
{
	(void)set;
	(void)rev;
	(void)holding;
	(void)value;
	struct order *o = user;
	if (o->n < 8)
		snprintf(o->holders[o->n++], sizeof(o->holders[0]), "%s", holder);
}

TEST(waiters_are_kept_oldest_first_whatever_order_they_come_in)
{
	setup_table();
	CHECK(want("task:c", "{\"locks\":{\"a\":\"X\"}}", 30));
	CHECK(want("task:a", "{\"locks\":{\"a\":\"X\"}}", 10));
	CHECK(want("task:b", "{\"locks\":{\"a\":\"X\"}}", 20));
	/* A repeated PUT replaces, and keeps the place of its create revision. */
	CHECK(want("task:a", "{\"locks\":{\"a\":\"S\"}}", 10));
	struct order o = { .n = 0 };
	lr_lock_table_each_want(t, note_want, &o);
	CHECK_INT(o.n, ==, 3);
	CHECK_STR(o.holders[0], "task:a");
	CHECK_STR(o.holders[1], "task:b");
	CHECK_STR(o.holders[2], "task:c");
	int64_t rev = 0;
	const lr_lockset *set = lr_lock_table_wants(t, "task:b", &rev);
	CHECK(set != NULL);
	CHECK_INT(rev, ==, 20);
	CHECK(lr_lock_table_wants(t, "task:z", NULL) == NULL);
}

TEST(a_deleted_key_is_forgotten_and_clear_forgets_all)
{
	setup_table();
	hold("task:a", "{\"org/a\":\"X\"}");
	hold_slot("task:a", "gpu", 0, 1);
	CHECK(want("task:b", "{\"locks\":{\"org/a\":\"X\"}}", 10));
	char key[LR_LOCK_KEY_SIZE];
	lr_lock_key(c, "org/a", LR_LOCK_X, "task:a", key);
	CHECK(lr_lock_table_delete(t, key, 50));
	CHECK(!lr_lock_table_delete(t, key, 51));
	/* IX on org is still held by a: X on org is kept out, S on org/a is
	 * behind b. */
	CHECK(!can_take_now("task:c", "{\"org\":\"X\"}", NULL));
	CHECK(can_take("task:c", "{\"org/a\":\"S\"}", NULL, 5, NULL, NULL, 0, everyone_alive));
	lr_slot_key(c, "gpu", 0, key);
	CHECK(lr_lock_table_delete(t, key, 52));
	CHECK(can_take_now("task:c", NULL, "{\"gpu\":1}"));
	lr_lock_table_clear(t);
	CHECK(!lr_lock_table_holds(t, "task:a"));
	CHECK(lr_lock_table_wants(t, "task:b", NULL) == NULL);
	CHECK(can_take_now("task:c", "{\"org\":\"X\"}", NULL));
}

TEST(keys_and_values_that_are_not_what_they_should_be_are_ignored)
{
	setup_table();
	static const char *const keys[] = {
		"/elsewhere/locks/org/#4X/task:a", /* another prefix */
		"/lock-table/locks/org/#9Q/task:a", /* no such mode */
		"/lock-table/locks/org",            /* no mode, no holder */
		"/lock-table/slots/gpu/notanumber",
		"/lock-table/slots/gpu/",
		"/lock-table/tasks/x",
		"",
	};
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		lr_kv kv = kv_of(keys[i], "{}", next_rev++);
		if (lr_lock_table_put(t, &kv))
			TEST_FAIL("%s was taken for a lock or slot", keys[i]);
	}
	/* A request that does not parse asks for nothing. */
	CHECK(!want("task:b", "not json", 10));
	CHECK(!want("task:b", "{\"locks\":{\"org\":\"WRITE\"}}", 10));
	CHECK(!want("task:b", "{\"limits\":{\"gpu\":0}}", 10));
	CHECK(!want("", "{\"locks\":{\"org\":\"X\"}}", 10));
	/* A request of anything but a task lives on its lease: one on no
	 * lease was put by hand and holds nobody back. */
	CHECK(!want("ghost", "{\"locks\":{\"org\":\"X\"}}", 10));
	CHECK(!want("run:r-1", "{\"locks\":{\"org\":\"X\"}}", 11));
	char wkey[LR_LOCK_KEY_SIZE];
	lr_wants_key(c, "run:r-2", wkey);
	lr_kv wkv = kv_of(wkey, "{\"locks\":{\"org\":\"X\"}}", 12);
	wkv.lease = 77;
	CHECK(lr_lock_table_put(t, &wkv));
	CHECK(!can_take("task:c", "{\"org\":\"S\"}", NULL, 20, NULL, NULL, 0, everyone_alive));
	CHECK(lr_lock_table_delete(t, wkey, 13));
	/* A slot whose value is not JSON is still a slot, held by "?". */
	char key[LR_LOCK_KEY_SIZE];
	lr_slot_key(c, "gpu", 0, key);
	lr_kv kv = kv_of(key, "\xff garbage", next_rev++);
	kv.lease = HOLDER_LEASE;
	CHECK(lr_lock_table_put(t, &kv));
	char why[400];
	CHECK(!can_take("task:c", NULL, "{\"gpu\":1}", 0, NULL, why, sizeof(why),
	                everyone_alive));
	CHECK_STR(why, "pool gpu full: 1 of 1 slots held");
	CHECK(can_take_now("task:c", "{\"org\":\"X\"}", NULL));
}

/* Every holder's keys hang on its lease: a lock or slot key on no lease
 * was put by hand, would never go, and keeps nobody out (the claim it is
 * in the way of deletes it). */
TEST(a_lock_or_slot_key_on_no_lease_keeps_nobody_out)
{
	setup_table();
	char lock[LR_LOCK_KEY_SIZE], slot[LR_LOCK_KEY_SIZE];
	lr_lock_key(c, "org/a", LR_LOCK_X, "task:ghost", lock);
	lr_kv kv = kv_of(lock, "{\"runner\":\"box-1\"}", next_rev++);
	CHECK(!lr_lock_table_put(t, &kv));
	lr_slot_key(c, "gpu", 0, slot);
	kv = kv_of(slot, "{\"holder\":\"task:ghost\",\"limit\":1}", next_rev++);
	CHECK(!lr_lock_table_put(t, &kv));
	CHECK(!lr_lock_table_holds(t, "task:ghost"));
	int slots[LR_LIMITS_MAX];
	CHECK(can_take("task:c", "{\"org/a\":\"X\"}", "{\"gpu\":1}", 0, slots, NULL, 0,
	               everyone_alive));
	CHECK_INT(slots[0], ==, 0);
	/* A holder's key put again on no lease is no holder's any more. */
	hold("task:a", "{\"org/a\":\"X\"}");
	CHECK(!can_take_now("task:c", "{\"org/a\":\"S\"}", NULL));
	lr_lock_key(c, "org/a", LR_LOCK_X, "task:a", lock);
	kv = kv_of(lock, "{}", next_rev++);
	CHECK(lr_lock_table_put(t, &kv)); /* the table changed: forgotten */
	lr_lock_key(c, "org", LR_LOCK_IX, "task:a", lock);
	CHECK(lr_lock_table_delete(t, lock, next_rev++));
	CHECK(can_take_now("task:c", "{\"org/a\":\"S\"}", NULL));
}

static void teardown(void)
{
	lr_lock_table_free(t);
	lr_client_close(c);
	hosted_teardown();
}

TEST_LIST(TEST_CASE(a_held_lock_keeps_out_exactly_the_modes_it_conflicts_with),
          TEST_CASE(a_lock_below_or_above_a_held_one_is_kept_out_through_the_intention),
          TEST_CASE(a_holders_own_locks_and_slots_do_not_keep_it_out),
          TEST_CASE(a_pool_gives_the_lowest_free_slot_below_its_limit),
          TEST_CASE(a_pool_gives_no_slot_beside_a_holder_under_a_smaller_limit),
          TEST_CASE(an_older_waiter_that_conflicts_goes_first),
          TEST_CASE(a_waiter_for_the_same_pool_goes_first),
          TEST_CASE(a_waiter_blocked_by_what_the_request_does_not_touch_holds_it_not_back),
          TEST_CASE(newcomers_cannot_keep_an_older_waiter_waiting_by_taking_turns),
          TEST_CASE(a_request_made_within_a_holder_passes_a_waiter_that_waits_for_it),
          TEST_CASE(a_waiter_whose_start_time_is_to_come_holds_back_nobody),
          TEST_CASE(a_waiter_whose_dependency_is_unfinished_holds_back_nobody),
          TEST_CASE(the_dependencies_read_are_those_of_older_conflicting_waiters),
          TEST_CASE(a_request_whose_task_is_gone_or_finished_holds_back_nobody),
          TEST_CASE(waiters_are_kept_oldest_first_whatever_order_they_come_in),
          TEST_CASE(a_deleted_key_is_forgotten_and_clear_forgets_all),
          TEST_CASE(keys_and_values_that_are_not_what_they_should_be_are_ignored),
          TEST_CASE(a_lock_or_slot_key_on_no_lease_keeps_nobody_out));
TEST_MAIN(hosted_setup, teardown)
