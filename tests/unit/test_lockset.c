/* test_lockset.c - lock and pool requests: the compatibility matrix, the
 * lattice, conflict ranges, validation messages, the nodes a request locks
 * and when two requests conflict. No etcd. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "records/lockset.h"
#include "records/spec.h"
#include "test.h"

static lr_err err;

static lr_lockset *parse(const char *locks, const char *limits)
{
	json_t *l = locks != NULL ? json_loads(locks, JSON_DECODE_ANY, NULL) : NULL;
	json_t *m = limits != NULL ? json_loads(limits, JSON_DECODE_ANY, NULL) : NULL;
	lr_lockset *s = NULL;
	CHECK_OK(lr_lockset_parse(l, m, &s, &err), &err);
	json_decref(l);
	json_decref(m);
	return s;
}

static void refused(const char *locks, const char *limits, const char *why)
{
	json_t *l = locks != NULL ? json_loads(locks, JSON_DECODE_ANY, NULL) : NULL;
	json_t *m = limits != NULL ? json_loads(limits, JSON_DECODE_ANY, NULL) : NULL;
	lr_lockset *s = NULL;
	CHECK_INT(lr_lockset_parse(l, m, &s, &err), ==, LR_EINVAL);
	CHECK(s == NULL);
	CHECK_HAS(err.msg, why);
	json_decref(l);
	json_decref(m);
}

TEST(the_compatibility_matrix_is_the_usual_one)
{
	/* IS with all but X; IX with IS and IX; S with IS and S; SIX with IS;
	 * X with none. */
	static const char *const ok[] = { "IS IS", "IS IX", "IS S", "IS SIX", "IX IX",
	                                  "S S", NULL };
	for (int a = 0; a < LR_LOCK_MODES; a++)
		for (int b = 0; b < LR_LOCK_MODES; b++) {
			char pair[16];
			snprintf(pair, sizeof(pair), "%s %s", lr_lock_mode_name(a < b ? a : b),
			         lr_lock_mode_name(a < b ? b : a));
			bool want = false;
			for (int i = 0; ok[i] != NULL; i++)
				want = want || strcmp(ok[i], pair) == 0;
			if (lr_lock_compatible(a, b) != want)
				TEST_FAIL("%s: compatible is %d", pair, !want);
		}
}

TEST(conflicting_modes_form_one_rank_range_one_compare_per_node)
{
	for (int m = 0; m < LR_LOCK_MODES; m++) {
		int lo[2], hi[2];
		int n = lr_lock_conflicts(m, lo, hi);
		CHECK_INT(n, ==, 1);
		for (int r = 0; r < LR_LOCK_MODES; r++) {
			bool in = false;
			for (int i = 0; i < n; i++)
				in = in || (r >= lo[i] && r <= hi[i]);
			CHECK(in == !lr_lock_compatible(m, r));
		}
	}
}

TEST(joining_modes_gives_the_weakest_that_grants_both)
{
	CHECK_INT(lr_lock_join(LR_LOCK_IS, LR_LOCK_IX), ==, LR_LOCK_IX);
	CHECK_INT(lr_lock_join(LR_LOCK_IX, LR_LOCK_S), ==, LR_LOCK_SIX);
	CHECK_INT(lr_lock_join(LR_LOCK_S, LR_LOCK_IS), ==, LR_LOCK_S);
	CHECK_INT(lr_lock_join(LR_LOCK_SIX, LR_LOCK_X), ==, LR_LOCK_X);
	CHECK_INT(lr_lock_intention(LR_LOCK_S), ==, LR_LOCK_IS);
	CHECK_INT(lr_lock_intention(LR_LOCK_SIX), ==, LR_LOCK_IX);
}

TEST(a_request_locks_its_paths_and_their_ancestors_in_intention)
{
	lr_lockset *s = parse("{\"org/a/b\":\"X\",\"org/c\":\"S\",\"org\":\"S\"}", NULL);
	CHECK_INT(s->n_nodes, ==, 4);
	CHECK_STR(s->nodes[0].path, "org");
	CHECK_INT(s->nodes[0].mode, ==, LR_LOCK_SIX); /* S joined with IX */
	CHECK(s->nodes[0].named);
	CHECK_STR(s->nodes[1].path, "org/a");
	CHECK_INT(s->nodes[1].mode, ==, LR_LOCK_IX);
	CHECK(!s->nodes[1].named);
	CHECK_STR(s->nodes[2].path, "org/a/b");
	CHECK_INT(s->nodes[2].mode, ==, LR_LOCK_X);
	CHECK_STR(s->nodes[3].path, "org/c");
	CHECK_INT(s->nodes[3].mode, ==, LR_LOCK_S);
	free(s);
}

TEST(requests_conflict_exactly_when_they_cannot_run_together)
{
	lr_lockset *xa = parse("{\"t/a\":\"X\"}", NULL);
	lr_lockset *xb = parse("{\"t/b\":\"X\"}", NULL);
	lr_lockset *st = parse("{\"t\":\"S\"}", NULL);
	lr_lockset *sa = parse("{\"t/a/deep\":\"S\"}", NULL);
	lr_lockset *is = parse("{\"t\":\"IS\"}", NULL);
	lr_lockset *gpu1 = parse(NULL, "{\"gpu\":4}");
	lr_lockset *gpu2 = parse(NULL, "{\"gpu\":2}");
	CHECK(!lr_locksets_conflict(xa, xb)); /* siblings */
	CHECK(lr_locksets_conflict(xa, st));  /* the parent read whole */
	CHECK(lr_locksets_conflict(xa, sa));  /* below the written node */
	CHECK(!lr_locksets_conflict(st, is));
	CHECK(!lr_locksets_conflict(st, sa)); /* readers together */
	CHECK(lr_locksets_conflict(gpu1, gpu2)); /* one pool: one queue */
	CHECK(!lr_locksets_conflict(xa, gpu1));
	free(xa); free(xb); free(st); free(sa); free(is); free(gpu1); free(gpu2);
}

/* 16 paths of 8 segments of 64 characters; the first `shared` segments
 * are the same in all of them. */
static json_t *sixteen_deep_paths(int shared)
{
	json_t *locks = json_object();
	for (int i = 0; i < LR_LOCKS_MAX; i++) {
		char path[LR_LOCK_PATH_SIZE] = "";
		for (int d = 0; d < LR_LOCK_DEPTH_MAX; d++) {
			char seg[LR_LOCK_SEG_MAX + 1];
			memset(seg, d < shared ? 'z' : 'a' + i, LR_LOCK_SEG_MAX);
			seg[LR_LOCK_SEG_MAX] = '\0';
			seg[0] = (char)('0' + d);
			strcat(path, d ? "/" : "");
			strcat(path, seg);
		}
		json_object_set_new(locks, path, json_string("X"));
	}
	return locks;
}

TEST(the_largest_request_is_accepted)
{
	/* 5 shared ancestors and 16 x 3 nodes of their own: 53 nodes. */
	json_t *locks = sixteen_deep_paths(5);
	json_t *limits = json_object();
	for (int i = 0; i < LR_LIMITS_MAX; i++) {
		char key[8];
		snprintf(key, sizeof(key), "pool%d", i);
		json_object_set_new(limits, key, json_integer(LR_LIMIT_N_MAX));
	}
	lr_lockset *s = NULL;
	CHECK_OK(lr_lockset_parse(locks, limits, &s, &err), &err);
	CHECK_INT(s->n_nodes, ==, 5 + 16 * 3);
	CHECK_INT(s->n_limits, ==, LR_LIMITS_MAX);
	free(s);
	json_decref(locks);
	json_decref(limits);
}

TEST(a_request_of_more_nodes_than_one_claim_txn_holds_is_refused)
{
	/* 4 shared: 4 + 16 x 4 = 68 nodes, over 64. */
	json_t *locks = sixteen_deep_paths(4);
	lr_lockset *s = NULL;
	CHECK_INT(lr_lockset_parse(locks, NULL, &s, &err), ==, LR_EINVAL);
	CHECK(strstr(err.msg, "locks: 68 nodes") != NULL);
	CHECK(strstr(err.msg, "at most 64") != NULL);
	CHECK(s == NULL);
	json_decref(locks);
}

TEST(bad_requests_are_refused_naming_the_field)
{
	refused("[]", NULL, "locks: expected an object");
	refused("{\"a//b\":\"X\"}", NULL, "locks.a//b: a path is");
	refused("{\"a b\":\"X\"}", NULL, "locks.a b");
	refused("{\"a/b/c/d/e/f/g/h/i\":\"X\"}", NULL, "1 to 8 segments");
	refused("{\"a\":\"x\"}", NULL, "locks.a: expected one of");
	refused("{\"a\":5}", NULL, "locks.a: expected one of");
	refused(NULL, "{\"gpu\":0}", "limits.gpu: expected a whole number from 1 to 10000");
	refused(NULL, "{\"gpu\":10001}", "limits.gpu");
	refused(NULL, "{\"gpu\":2.0}", "limits.gpu");
	refused(NULL, "{\"a/b\":2}", "limits.a/b: a key is");
	refused(NULL, "5", "limits: expected an object");
}

TEST(a_spec_keeps_its_locks_and_refuses_bad_ones_naming_the_field)
{
	json_t *s = NULL;
	const char *ok = "{\"steps\":[{\"name\":\"a\",\"run\":\"true\"}],"
	                 "\"locks\":{\"agents/a\":\"X\"},\"limits\":{\"gpu\":4}}";
	CHECK_OK(lr_spec_parse(ok, strlen(ok), &s, &err), &err);
	CHECK_STR(json_string_value(json_object_get(json_object_get(s, "locks"), "agents/a")),
	          "X");
	lr_lockset *set = NULL;
	CHECK_OK(lr_spec_lockset(s, &set, &err), &err);
	CHECK_INT(set->n_nodes, ==, 2);
	CHECK_INT(set->limits[0].n, ==, 4);
	free(set);
	json_decref(s);
	const char *plain = "{\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]}";
	CHECK_OK(lr_spec_parse(plain, strlen(plain), &s, &err), &err);
	CHECK(json_object_get(s, "locks") == NULL); /* stored as before */
	CHECK_OK(lr_spec_lockset(s, &set, &err), &err);
	CHECK(set == NULL);
	json_decref(s);
	const char *bad = "{\"steps\":[{\"name\":\"a\",\"run\":\"true\"}],\"locks\":{\"a\":\"Y\"}}";
	CHECK_INT(lr_spec_parse(bad, strlen(bad), &s, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "locks.a");
}

TEST_LIST(
	TEST_CASE(the_compatibility_matrix_is_the_usual_one),
	TEST_CASE(conflicting_modes_form_one_rank_range_one_compare_per_node),
	TEST_CASE(joining_modes_gives_the_weakest_that_grants_both),
	TEST_CASE(a_request_locks_its_paths_and_their_ancestors_in_intention),
	TEST_CASE(requests_conflict_exactly_when_they_cannot_run_together),
	TEST_CASE(the_largest_request_is_accepted),
	TEST_CASE(a_request_of_more_nodes_than_one_claim_txn_holds_is_refused),
	TEST_CASE(bad_requests_are_refused_naming_the_field),
	TEST_CASE(a_spec_keeps_its_locks_and_refuses_bad_ones_naming_the_field),
);
TEST_MAIN(NULL, NULL)
