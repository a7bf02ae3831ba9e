/* test_taskset.c - the runner's view of tasks: states, dispatch order,
 * lazy deletion from the heap, and the spec cache's bounds. No etcd. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/taskset.h"
#include "records/schedule.h"
#include "test.h"

static lr_taskset set;
static lr_rng rng;

static void fresh_set(void)
{
	lr_taskset_free(&set);
	CHECK(lr_taskset_init(&set) == 0);
	lr_rng_seed(&rng, 42);
}

static lr_entry *add(const char *id, int64_t rev)
{
	lr_entry *e = lr_taskset_add(&set, id, rev, LR_ENTRY_PENDING);
	CHECK(e != NULL);
	return e;
}

/* Tasks t000 .. t099, oldest first. */
static void add_hundred(void)
{
	char id[16];
	for (int i = 0; i < 100; i++) {
		snprintf(id, sizeof(id), "t%03d", i);
		add(id, 1000 + i);
	}
}

/* Take the oldest pending task (spread 1) and mark it handed out. */
static const char *take_oldest(void)
{
	lr_entry *e = lr_taskset_pick(&set, 1, &rng);
	if (e == NULL)
		return NULL;
	lr_taskset_set_state(&set, e, LR_ENTRY_LOCAL);
	return e->id;
}

TEST(pending_tasks_are_taken_oldest_first)
{
	fresh_set();
	add("c", 30);
	add("a", 10);
	add("b", 20);
	CHECK_STR(take_oldest(), "a");
	CHECK_STR(take_oldest(), "b");
	CHECK_STR(take_oldest(), "c");
	CHECK(take_oldest() == NULL);
	CHECK_INT(set.pending, ==, 0);
	CHECK_INT(set.claimed, ==, 3);
}

TEST(a_pick_with_spread_stays_among_the_oldest)
{
	fresh_set();
	add_hundred();
	int seen[4] = { 0 };
	for (int round = 0; round < 200; round++) {
		lr_entry *e = lr_taskset_pick(&set, 4, &rng);
		CHECK(e != NULL);
		int n = atoi(e->id + 1);
		CHECK_INT(n, <, 4); /* one of the four oldest */
		seen[n]++;
		/* Handed out and given back: it is oldest again. */
		lr_taskset_set_state(&set, e, LR_ENTRY_LOCAL);
		lr_taskset_set_state(&set, e, LR_ENTRY_PENDING);
	}
	for (int i = 0; i < 4; i++)
		CHECK_INT(seen[i], >, 0); /* spread over all four */
	/* The oldest first at least half the time (it is passed over twice
	 * at most), and each one more often than the next younger. */
	CHECK_INT(seen[0], >, 80);
	CHECK_INT(seen[0], >, seen[1]);
	CHECK_INT(seen[1], >, seen[2] / 2 + seen[3] / 2);
	CHECK_INT(set.pending, ==, 100);
}

/* Ten tasks taken one at a time, as by a runner of one worker: each
 * starts within a few places of its turn, over many seeds. */
TEST(tasks_taken_one_by_one_keep_close_to_their_turn)
{
	int worst = 0;
	for (uint64_t seed = 1; seed <= 200; seed++) {
		fresh_set();
		lr_rng_seed(&rng, seed);
		for (int i = 0; i < 10; i++) {
			char id[8];
			snprintf(id, sizeof(id), "t%d", i);
			add(id, i + 1);
		}
		for (int turn = 0; turn < 10; turn++) {
			lr_entry *e = lr_taskset_pick(&set, 4, &rng);
			CHECK(e != NULL);
			int late = turn - atoi(e->id + 1);
			worst = late > worst ? late : worst;
			lr_taskset_set_state(&set, e, LR_ENTRY_LOCAL);
		}
	}
	printf("# 200 seeds: a task started at most %d places after its turn\n", worst);
	CHECK_INT(worst, <=, 5); /* a uniform pick: 9 */
}

TEST(claimed_and_removed_tasks_are_never_picked)
{
	fresh_set();
	lr_entry *a = add("a", 1);
	add("b", 2);
	lr_entry *c = add("c", 3);
	lr_taskset_set_state(&set, a, LR_ENTRY_CLAIMED);
	lr_taskset_remove(&set, c);
	CHECK(lr_taskset_find(&set, "c") == NULL);
	CHECK_STR(take_oldest(), "b");
	CHECK(take_oldest() == NULL);
	CHECK_INT(set.count, ==, 2);
}

TEST(a_task_pending_again_is_picked_once)
{
	fresh_set();
	lr_entry *a = add("a", 1);
	/* Pending, claimed and pending again: the heap must not hand it out
	 * twice although it was pushed twice. */
	lr_taskset_set_state(&set, a, LR_ENTRY_CLAIMED);
	lr_taskset_set_state(&set, a, LR_ENTRY_PENDING);
	lr_taskset_set_state(&set, a, LR_ENTRY_CLAIMED);
	lr_taskset_set_state(&set, a, LR_ENTRY_PENDING);
	CHECK_STR(take_oldest(), "a");
	CHECK(take_oldest() == NULL);
	CHECK_INT(set.pending, ==, 0);
}

TEST(oldest_lists_without_taking)
{
	fresh_set();
	add("x", 5);
	add("y", 3);
	add("z", 4);
	lr_entry *out[2];
	CHECK_INT(lr_taskset_oldest(&set, 2, out), ==, 2);
	CHECK_STR(out[0]->id, "y");
	CHECK_STR(out[1]->id, "z");
	CHECK_INT(set.pending, ==, 3);
	CHECK_STR(take_oldest(), "y");
}

/* Asked for: the ids of out[0..n) as one string, "t000 t001 ...". */
static const char *ids_of(lr_entry **out, size_t n)
{
	static char buf[4096];
	size_t len = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < n; i++)
		len += (size_t)snprintf(buf + len, sizeof(buf) - len, "%s%s", i ? " " : "", out[i]->id);
	return buf;
}

TEST(specs_are_read_ahead_in_full_chunks_each_task_once)
{
	fresh_set();
	add_hundred();
	lr_entry *out[LR_READ_AHEAD_MAX];
	/* The oldest chunk first, then none until half a chunk is unread. */
	CHECK_INT(lr_taskset_read_ahead(&set, 8, false, out), ==, 8);
	CHECK_STR(ids_of(out, 8), "t000 t001 t002 t003 t004 t005 t006 t007");
	CHECK_INT(lr_taskset_read_ahead(&set, 8, false, out), ==, 8);
	CHECK_STR(ids_of(out, 8), "t008 t009 t010 t011 t012 t013 t014 t015");
	CHECK_INT(lr_taskset_read_ahead(&set, 8, false, out), ==, 0);
	for (int i = 0; i < 3; i++)
		take_oldest(); /* t016..t018 come into the look-ahead: 3 unread */
	CHECK_INT(lr_taskset_read_ahead(&set, 8, false, out), ==, 0);
	take_oldest();     /* 4: half a chunk */
	CHECK_INT(lr_taskset_read_ahead(&set, 8, false, out), ==, 4);
	CHECK_STR(ids_of(out, 4), "t016 t017 t018 t019");
	/* A worker reading its own spec takes whatever is unread along. */
	take_oldest();
	CHECK_INT(lr_taskset_read_ahead(&set, 8, true, out), ==, 1);
	CHECK_STR(out[0]->id, "t020");
	CHECK_INT(lr_taskset_read_ahead(&set, 8, true, out), ==, 0);
	/* Cached or fresh tasks need no read; a chunk is never over max. */
	lr_taskset_cache_spec(&set, lr_taskset_find(&set, "t025"), "{}", 2);
	lr_taskset_find(&set, "t026")->fresh = true;
	size_t n = lr_taskset_read_ahead(&set, 16, false, out); /* t005..t036 */
	CHECK_INT(n, ==, 14);
	for (size_t i = 0; i < n; i++) {
		CHECK(strcmp(out[i]->id, "t025") != 0 && strcmp(out[i]->id, "t026") != 0);
		CHECK(out[i]->prefetched);
	}
	CHECK_INT(lr_taskset_read_ahead(&set, 100, true, out), ==, LR_READ_AHEAD_MAX);
}

TEST(many_tasks_stay_findable_as_the_table_grows)
{
	fresh_set();
	char id[16];
	for (int i = 0; i < 5000; i++) {
		snprintf(id, sizeof(id), "n%d", i);
		add(id, i + 1);
	}
	for (int i = 0; i < 5000; i += 7) {
		snprintf(id, sizeof(id), "n%d", i);
		lr_entry *e = lr_taskset_find(&set, id);
		CHECK(e != NULL);
		CHECK_INT(e->create_rev, ==, i + 1);
	}
	CHECK_INT(set.count, ==, 5000);
	/* Adding an existing id returns the entry, unchanged. */
	CHECK_INT(lr_taskset_add(&set, "n7", 99999, LR_ENTRY_PENDING)->create_rev, ==, 8);
	CHECK_INT(set.count, ==, 5000);
}

TEST(clear_remote_keeps_only_the_tasks_handed_out)
{
	fresh_set();
	add("p", 1);
	lr_entry *c = add("c", 2);
	add("l", 3);
	lr_taskset_set_state(&set, c, LR_ENTRY_CLAIMED);
	CHECK_STR(take_oldest(), "p");
	lr_taskset_clear_remote(&set);
	CHECK(lr_taskset_find(&set, "p") != NULL);
	CHECK(lr_taskset_find(&set, "c") == NULL);
	CHECK(lr_taskset_find(&set, "l") == NULL);
	CHECK_INT(set.count, ==, 1);
	CHECK_INT(set.pending, ==, 0);
}

TEST(the_spec_cache_is_bounded_per_spec_and_in_total)
{
	fresh_set();
	size_t big = LR_SPEC_CACHE_ONE + 1;
	char *text = malloc(big);
	memset(text, 'x', big);
	lr_entry *a = add("a", 1);
	lr_taskset_cache_spec(&set, a, text, big);
	CHECK(a->spec == NULL); /* over the limit of one */
	size_t one = LR_SPEC_CACHE_ONE;
	size_t fits = LR_SPEC_CACHE_TOTAL / one;
	char id[16];
	size_t cached = 0;
	for (size_t i = 0; i < fits + 3; i++) {
		snprintf(id, sizeof(id), "s%zu", i);
		lr_entry *e = add(id, (int64_t)i + 10);
		lr_taskset_cache_spec(&set, e, text, one);
		cached += e->spec != NULL;
	}
	CHECK_INT(cached, ==, fits);
	CHECK_INT(set.spec_bytes, ==, fits * one);
	/* Handing a spec over frees its room; removing an entry drops it. */
	lr_entry *s0 = lr_taskset_find(&set, "s0");
	char *spec;
	size_t len;
	lr_taskset_take_spec(&set, s0, &spec, &len);
	CHECK(spec != NULL);
	CHECK_INT(len, ==, one);
	CHECK(s0->spec == NULL);
	CHECK_INT(set.spec_bytes, ==, (fits - 1) * one);
	free(spec);
	lr_taskset_remove(&set, lr_taskset_find(&set, "s1"));
	CHECK_INT(set.spec_bytes, ==, (fits - 2) * one);
	free(text);
}

TEST(a_create_revision_learnt_late_is_kept_only_outside_the_order)
{
	fresh_set();
	/* A claim's event came first: the entry is claimed, outside the heap. */
	lr_entry *e = lr_taskset_add(&set, "late", 500, LR_ENTRY_CLAIMED);
	lr_taskset_set_create_rev(&set, e, 40);
	CHECK_INT(e->create_rev, ==, 40);
	lr_entry *p = add("early", 50);
	lr_taskset_set_create_rev(&set, p, 7); /* in the heap: unchanged */
	CHECK_INT(p->create_rev, ==, 50);
	lr_taskset_set_state(&set, e, LR_ENTRY_PENDING);
	CHECK_STR(take_oldest(), "late");
	CHECK_STR(take_oldest(), "early");
}

/* The schedule of a task submitted with priority 100, after dep. */
static lr_sched urgent_after(const char *dep)
{
	lr_sched sc = { .priority = 100, .n_after = 1 };
	sc.after = calloc(1, sizeof(*sc.after));
	CHECK(sc.after != NULL);
	snprintf(sc.after[0], LR_ID_SIZE, "%s", dep);
	return sc;
}

TEST(a_schedule_learnt_late_is_kept_only_outside_the_order)
{
	fresh_set();
	/* A claim's event came first; its task's, with its priority, next. */
	lr_entry *e = lr_taskset_add(&set, "late", 60, LR_ENTRY_CLAIMED);
	lr_sched sc = urgent_after("dep");
	lr_taskset_set_sched(&set, e, &sc);
	CHECK_INT(e->priority, ==, 100);
	CHECK_INT(e->n_after, ==, 1);
	CHECK_STR(e->after[0], "dep");
	CHECK(sc.after == NULL); /* moved */
	/* Known already, or in the heap: unchanged. */
	sc = urgent_after("other");
	sc.priority = -5;
	lr_taskset_set_sched(&set, e, &sc);
	CHECK_INT(e->priority, ==, 100);
	CHECK_STR(e->after[0], "dep");
	lr_entry *p = add("early", 50);
	lr_taskset_set_sched(&set, p, &sc);
	CHECK_INT(p->priority, ==, 0);
	CHECK_INT(p->n_after, ==, 0);
	lr_sched_clear(&sc);
	/* Pending again, its priority counts: it goes before the older one. */
	lr_taskset_set_state(&set, e, LR_ENTRY_PENDING);
	CHECK_STR(take_oldest(), "late");
	CHECK_STR(take_oldest(), "early");
}

static void cleanup(void)
{
	lr_taskset_free(&set);
}

TEST_LIST(
	TEST_CASE(pending_tasks_are_taken_oldest_first),
	TEST_CASE(a_pick_with_spread_stays_among_the_oldest),
	TEST_CASE(tasks_taken_one_by_one_keep_close_to_their_turn),
	TEST_CASE(claimed_and_removed_tasks_are_never_picked),
	TEST_CASE(a_task_pending_again_is_picked_once),
	TEST_CASE(oldest_lists_without_taking),
	TEST_CASE(specs_are_read_ahead_in_full_chunks_each_task_once),
	TEST_CASE(many_tasks_stay_findable_as_the_table_grows),
	TEST_CASE(clear_remote_keeps_only_the_tasks_handed_out),
	TEST_CASE(the_spec_cache_is_bounded_per_spec_and_in_total),
	TEST_CASE(a_create_revision_learnt_late_is_kept_only_outside_the_order),
	TEST_CASE(a_schedule_learnt_late_is_kept_only_outside_the_order),
);
TEST_MAIN(NULL, cleanup)
