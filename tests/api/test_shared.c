/* test_shared.c - shared values against a real etcd: listings by name
 * prefix and deletion. */
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

static void check_shared(lr_client *c, const char *name, const char *want)
{
	char *text = shared_text(c, name);
	CHECK_STR(text, want);
	free(text);
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
	TEST_CASE(shared_values_are_listed_by_name_prefix_and_deleted),
);
TEST_MAIN(hosted_setup, hosted_teardown)
