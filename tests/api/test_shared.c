/* test_shared.c - shared values against a real etcd: a step's fenced writes
 * (lr_step_shared_put), listings by name prefix and deletion. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "etcd/lease.h"
#include "etcd_harness.h"
#include "hosted.h"
#include "leaserun.h"
#include "test.h"

static lr_err err;

/* The shared value `name` as compact JSON text (malloc'd), NULL if absent. */
static char *shared_text(lr_client *c, const char *name)
{
	void *v = NULL;
	CHECK_OK(lr_shared_get(c, name, &v, &err), &err);
	char *text = v != NULL ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY)
	                       : NULL;
	json_decref(v);
	return text;
}

static void check_absent(lr_client *c, const char *name)
{
	char *text = shared_text(c, name);
	if (text != NULL)
		TEST_FAIL("%s holds %s: nothing should be stored", name, text);
}

static void check_shared(lr_client *c, const char *name, const char *want)
{
	char *text = shared_text(c, name);
	CHECK_STR(text, want);
	free(text);
}

/* ---- a step's writes --------------------------------------------------------- */

/* Writes its fence under two names in one call. */
static lr_step_result write_two(lr_step *s, void *user)
{
	json_t *a = json_pack("{sI}", "fence", (json_int_t)lr_step_fence(s));
	json_t *b = json_pack("[ss]", lr_step_task_id(s), lr_step_name(s));
	const char *names[] = { "thread.t1.a", "thread.t1.b" };
	const void *values[] = { a, b };
	lr_err e;
	int rc = lr_step_shared_put_many(s, 2, names, values, &e);
	json_decref(a);
	json_decref(b);
	if (rc != 0) {
		lr_step_set_error(s, "%s", e.msg);
		return LR_STEP_FAIL;
	}
	return LR_STEP_OK;
}

TEST(a_step_writes_shared_values_in_one_fenced_txn)
{
	lr_client *c = hosted_client("/shared-put/");
	CHECK_INT(hosted_run_one(c, "writer", write_two, NULL, "w1"), ==, LR_TASK_SUCCEEDED);

	check_shared(c, "thread.t1.b", "[\"w1\",\"one\"]");
	/* Both came from one txn: one revision. */
	lr_shared_entry *list;
	size_t n;
	CHECK_OK(lr_shared_list(c, "thread.t1.", 0, &list, &n, &err), &err);
	CHECK_INT(n, ==, 2);
	CHECK_STR(list[0].name, "thread.t1.a");
	CHECK_STR(list[1].name, "thread.t1.b");
	CHECK_INT(list[0].mod_revision, ==, list[1].mod_revision);
	CHECK(json_integer_value(json_object_get(list[0].value, "fence")) > 0);
	lr_shared_list_free(list, n);
	lr_client_close(c);
}

/* ---- a stale holder ------------------------------------------------------------ */

struct stale {
	atomic_int started;   /* attempts begun */
	atomic_int go;        /* the test moved the claim: write now */
	atomic_int first_rc;  /* what the first attempt's write returned */
	atomic_int cancelled_after; /* the first attempt saw itself stopped */
};

static lr_step_result write_when_told(lr_step *s, void *user)
{
	struct stale *st = user;
	int attempt = ++st->started;
	while (!st->go)
		lr_sleep_ms(5);
	json_t *v = json_pack("{sI}", "fence", (json_int_t)lr_step_fence(s));
	lr_err e;
	int rc = lr_step_shared_put(s, "stale.value", v, &e);
	json_decref(v);
	if (attempt == 1) {
		st->first_rc = rc;
		st->cancelled_after = lr_step_cancelled(s);
	}
	return rc == 0 ? LR_STEP_OK : LR_STEP_RETRY;
}

TEST(a_stale_holder_cannot_write_shared_values)
{
	lr_client *c = hosted_client("/shared-stale/");
	static struct stale st;
	memset(&st, 0, sizeof(st));
	st.first_rc = 1;
	struct hosted h;
	hosted_new(&h, c, "stale", 1);
	CHECK_OK(lr_runner_handle(h.r, "write", write_when_told, &st), &err);
	hosted_start(&h);
	hosted_submit(c, "{\"id\":\"s1\",\"steps\":[{\"name\":\"write\",\"run\":\"-\"}]}");
	while (st.started == 0)
		lr_sleep_ms(5);

	/* Behind the runner's back, the claim passes to another holder (a
	 * lease of the test's own), as after an expiry and a takeover the
	 * runner has not heard of yet. */
	char claim[LR_KEY_SIZE];
	lr_key(c, LR_K_CLAIMS, "s1", claim);
	lr_range_result old;
	CHECK_OK(lr_kv_get(lr_client_etcd(c), claim, &old, &err), &err);
	CHECK_INT(old.n, ==, 1);
	int64_t lease, granted, sent;
	CHECK_OK(lr_lease_grant(lr_client_etcd(c), 30, &lease, &granted, &sent, &err), &err);
	CHECK_OK(lr_kv_delete(lr_client_etcd(c), claim, 0, NULL, NULL, &err), &err);
	CHECK_OK(lr_kv_put(lr_client_etcd(c), claim, old.kvs[0].value, old.kvs[0].value_len,
	                   lease, NULL, NULL, &err), &err);
	lr_range_result_free(&old);
	st.go = 1;
	while (st.first_rc == 1)
		lr_sleep_ms(5);
	/* Refused by its fence, or, when the runner's watch saw the claim
	 * deleted first, not even tried: the step was stopped already. */
	CHECK(st.first_rc == LR_ELEASE || st.first_rc == LR_ECANCELLED);
	CHECK(st.cancelled_after); /* and the step was told to stop */
	check_absent(c, "stale.value");

	/* The other holder goes away: the runner takes the task again and its
	 * write, under the new fence, goes through. */
	CHECK_OK(lr_lease_revoke(lr_client_etcd(c), lease, &err), &err);
	CHECK_INT(hosted_wait_done(c, "s1", 15000), ==, LR_TASK_SUCCEEDED);
	CHECK_INT(st.started, ==, 2);
	char *text = shared_text(c, "stale.value");
	CHECK(text != NULL);
	free(text);
	hosted_end(&h);
	lr_client_close(c);
}

/* ---- refused writes --------------------------------------------------------------- */

static atomic_int refusals;

static void expect_refused(lr_step *s, size_t n, const char *const names[],
                           const void *const values[], int code, const char *what)
{
	lr_err e = {0};
	int rc = lr_step_shared_put_many(s, n, names, values, &e);
	if (rc == code)
		refusals++;
	else
		fprintf(stderr, "  %s: got %d (%s), expected %d\n", what, rc, e.msg, code);
}

static lr_step_result write_badly(lr_step *s, void *user)
{
	json_t *small = json_integer(1);
	/* Two values of 600 KiB: each within the limit, not together. */
	char *big_text = malloc(600 * 1024 + 1);
	memset(big_text, 'x', 600 * 1024);
	big_text[600 * 1024] = '\0';
	json_t *big = json_string(big_text);
	free(big_text);
	const char *bad_name[] = { "has/slash" };
	const char *two[] = { "big.1", "big.2" };
	const void *one_small[] = { small };
	const void *two_big[] = { big, big };
	const void *null_value[] = { NULL };
	const char *ok_name[] = { "ok" };
	static const char *many[LR_SHARED_PUT_MAX + 1];
	static const void *many_values[LR_SHARED_PUT_MAX + 1];
	for (int i = 0; i <= LR_SHARED_PUT_MAX; i++) {
		many[i] = "many";
		many_values[i] = small;
	}
	expect_refused(s, 1, bad_name, one_small, LR_EINVAL, "a name with a slash");
	expect_refused(s, 1, ok_name, null_value, LR_EINVAL, "a NULL value");
	expect_refused(s, 0, ok_name, one_small, LR_EINVAL, "no value");
	expect_refused(s, LR_SHARED_PUT_MAX + 1, many, many_values, LR_EINVAL, "too many");
	expect_refused(s, 2, two, two_big, LR_ETOOLARGE, "1.2 MiB together");
	json_decref(small);
	json_decref(big);
	return LR_STEP_OK;
}

TEST(invalid_shared_writes_are_refused_and_store_nothing)
{
	lr_client *c = hosted_client("/shared-bad/");
	refusals = 0;
	CHECK_INT(hosted_run_one(c, "bad", write_badly, NULL, "b1"), ==, LR_TASK_SUCCEEDED);
	CHECK_INT(refusals, ==, 5);
	lr_shared_entry *list;
	size_t n;
	CHECK_OK(lr_shared_list(c, "", LR_SHARED_KEYS_ONLY, &list, &n, &err), &err);
	CHECK_INT(n, ==, 0);
	lr_shared_list_free(list, n);
	lr_client_close(c);
}

/* ---- listing and deleting --------------------------------------------------------- */

static int set_to(void *user, const void *current, void **next)
{
	*next = json_loads(user, JSON_DECODE_ANY, NULL);
	return 0;
}

TEST(shared_values_are_listed_by_name_prefix_and_deleted)
{
	lr_client *c = hosted_client("/shared-list/");
	/* Written in another order than listed. */
	CHECK_OK(lr_update(c, "a.2", set_to, "[2]", &err), &err);
	CHECK_OK(lr_update(c, "b.1", set_to, "\"b\"", &err), &err);
	CHECK_OK(lr_update(c, "a.1", set_to, "{\"one\":1}", &err), &err);
	CHECK_OK(lr_update(c, "a", set_to, "0", &err), &err);

	lr_shared_entry *list;
	size_t n;
	CHECK_OK(lr_shared_list(c, "a.", 0, &list, &n, &err), &err);
	CHECK_INT(n, ==, 2);
	CHECK_STR(list[0].name, "a.1");
	CHECK_INT(json_integer_value(json_object_get(list[0].value, "one")), ==, 1);
	CHECK_STR(list[1].name, "a.2");
	CHECK(json_is_array((json_t *)list[1].value));
	CHECK(list[0].mod_revision > list[1].mod_revision);
	lr_shared_list_free(list, n);

	CHECK_OK(lr_shared_list(c, "", LR_SHARED_KEYS_ONLY, &list, &n, &err), &err);
	CHECK_INT(n, ==, 4);
	CHECK_STR(list[0].name, "a");
	CHECK_STR(list[3].name, "b.1");
	CHECK(list[0].value == NULL);
	lr_shared_list_free(list, n);

	CHECK_INT(lr_shared_list(c, "a/", 0, &list, &n, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "invalid name prefix");

	/* A value that is not JSON (written by something else) is named. */
	char key[LR_KEY_SIZE];
	lr_key(c, LR_K_SHARED, "z.bad", key);
	CHECK_OK(lr_kv_put(lr_client_etcd(c), key, "{oops", 5, 0, NULL, NULL, &err), &err);
	CHECK_INT(lr_shared_list(c, "z.", 0, &list, &n, &err), ==, LR_EINVAL);
	CHECK_HAS(err.msg, "z.bad");
	CHECK_OK(lr_shared_list(c, "z.", LR_SHARED_KEYS_ONLY, &list, &n, &err), &err);
	CHECK_INT(n, ==, 1);
	lr_shared_list_free(list, n);

	int64_t deleted;
	CHECK_OK(lr_shared_delete(c, "a.", LR_SHARED_PREFIX, &deleted, &err), &err);
	CHECK_INT(deleted, ==, 2);
	check_shared(c, "a", "0"); /* a name, not under the prefix "a." */
	CHECK_OK(lr_shared_delete(c, "a", 0, &deleted, &err), &err);
	CHECK_INT(deleted, ==, 1);
	CHECK_INT(lr_shared_delete(c, "a/", LR_SHARED_PREFIX, &deleted, &err), ==, LR_EINVAL);
	CHECK_INT(lr_shared_delete(c, "", 0, &deleted, &err), ==, LR_EINVAL);
	CHECK_OK(lr_shared_delete(c, "", LR_SHARED_PREFIX, &deleted, &err), &err);
	CHECK_INT(deleted, ==, 2);
	CHECK_OK(lr_shared_list(c, "", 0, &list, &n, &err), &err);
	CHECK_INT(n, ==, 0);
	lr_shared_list_free(list, n);
	lr_client_close(c);
}

TEST_LIST(
	TEST_CASE(a_step_writes_shared_values_in_one_fenced_txn),
	TEST_CASE(a_stale_holder_cannot_write_shared_values),
	TEST_CASE(invalid_shared_writes_are_refused_and_store_nothing),
	TEST_CASE(shared_values_are_listed_by_name_prefix_and_deleted),
);
TEST_MAIN(hosted_setup, hosted_teardown)
