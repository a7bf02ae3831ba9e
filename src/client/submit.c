/* submit.c - storing a task: validate the spec, encode it canonically, and
 * create tasks/<id> once. Runs on the caller's thread; no state of its own. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "client/submit.h"
#include "etcd/kv.h"
#include "client/lock_keys.h"
#include "records/schedule.h"
#include "records/spec.h"

/* Whether the stored form, normalised as a submit now does, is the new
 * one: a spec stored by an earlier version, which kept fields given at
 * their defaults ("priority": 0, "after": []) that are now left out. */
static bool same_when_normalised(const char *stored, size_t slen, const char *value,
                                 size_t vlen)
{
	json_t *norm = NULL;
	lr_err ignored;
	if (lr_spec_parse_with_id(stored, slen, NULL, &norm, &ignored) != 0)
		return false;
	char *again = lr_spec_encode(norm);
	json_decref(norm);
	bool same = again != NULL && strlen(again) == vlen && memcmp(again, value, vlen) == 0;
	free(again);
	return same;
}

/* Whether the stored form is the new one but for its not_before, which is
 * no later than the new one's: an earlier run of the same submit, which
 * computed its start time earlier. */
static bool same_but_start(const char *stored, size_t slen, const char *value, size_t vlen)
{
	json_t *x = json_loadb(stored, slen, 0, NULL);
	json_t *y = json_loadb(value, vlen, 0, NULL);
	lr_sched a, b;
	bool read = lr_sched_from_json(x, &a) == 0;
	read = lr_sched_from_json(y, &b) == 0 && read;
	bool earlier = read && a.not_before_ms > 0 && a.not_before_ms <= b.not_before_ms;
	lr_sched_clear(&a);
	lr_sched_clear(&b);
	bool same = earlier && json_object_del(x, "not_before") == 0 &&
	            json_object_del(y, "not_before") == 0 && json_equal(x, y);
	json_decref(x);
	json_decref(y);
	return same;
}

/* Create tasks/<id> with one txn: version == 0 puts the spec, otherwise the
 * failure branch reads what is stored. Equal bytes (the encoding is
 * canonical) are this very submit retried, or the same spec sent twice:
 * both are a success, which is what makes the txn safe to retry when a
 * reply is lost. A start time given with the submit differs at each
 * retry, so then only the rest of the spec is compared. */
int lr_submit_store(lr_client *c, const char *id, const char *value, bool start_added,
                    const char *const *within, int *created, lr_err *err)
{
	char key[LR_KEY_SIZE];
	size_t len = strlen(value);
	lr_txn_result r = { 0 };
	lr_txn *t = lr_txn_new();
	int rc;

	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "submit %s: out of memory", id);
	lr_key(c, LR_K_TASKS, id, key);
	lr_txn_cmp(t, key, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_txn_put(t, LR_THEN, key, value, len, 0);
	lr_txn_get(t, LR_ELSE, key, 0);
	/* The tasks it waits for exist: compared, and read when one does not. */
	lr_sched sc;
	bool scheduled = lr_sched_from_text(value, len, &sc);
	for (size_t i = 0; i < sc.n_after; i++) {
		char dep[LR_KEY_SIZE];
		lr_key(c, LR_K_TASKS, sc.after[i], dep);
		lr_txn_cmp(t, dep, 0, LR_CMP_VERSION, LR_CMP_GT, 0);
		lr_txn_get(t, LR_ELSE, dep, LR_RANGE_KEYS_ONLY);
	}
	/* When it may start, readable without the spec: P queue/<id>. */
	char *queued = scheduled ? lr_sched_record_of_text(value, len) : NULL;
	if (queued != NULL) {
		char qkey[LR_KEY_SIZE];
		lr_key(c, LR_K_QUEUE, id, qkey);
		lr_txn_put(t, LR_THEN, qkey, queued, strlen(queued), 0);
		free(queued);
	}
	/* A task that takes locks or slots queues for them from now on. */
	char *wants = lr_wants_of_spec(value, len, within);
	if (wants != NULL) {
		char holder[LR_HOLDER_SIZE], wkey[LR_LOCK_KEY_SIZE];
		lr_holder_of_task(id, holder);
		lr_wants_key(c, holder, wkey);
		lr_txn_put(t, LR_THEN, wkey, wants, strlen(wants), 0);
		free(wants);
	}
	rc = lr_etcd_txn(lr_client_etcd(c), t, LR_CALL_RETRY, &r, err);
	if (rc != 0) {
		lr_err_wrap(err, rc, "submit %s", id);
		goto cleanup;
	}
	if (r.succeeded) {
		*created = 1;
		goto cleanup;
	}
	if (r.n_ops == 1 + sc.n_after && r.ops[0].n == 0) {
		for (size_t i = 0; i < sc.n_after; i++)
			if (r.ops[1 + i].n == 0) {
				rc = lr_err_set(err, LR_ENOTFOUND,
				                "submit %s: after: no such task %s", id, sc.after[i]);
				goto cleanup;
			}
	}
	if (r.n_ops < 1 || r.ops[0].n != 1) {
		rc = lr_err_set(err, LR_EINTERNAL,
		                "submit %s: the txn failed but read no task", id);
		goto cleanup;
	}
	const lr_kv *stored = &r.ops[0].kvs[0];
	if ((stored->value_len != len || memcmp(stored->value, value, len) != 0) &&
	    !same_when_normalised(stored->value, stored->value_len, value, len) &&
	    !(start_added && same_but_start(stored->value, stored->value_len, value, len))) {
		rc = lr_err_set(err, LR_EEXIST,
		                "task %s already exists with a different spec", id);
		goto cleanup;
	}
	*created = 0;
cleanup:
	lr_sched_clear(&sc);
	lr_txn_result_free(&r);
	lr_txn_free(t);
	return rc;
}

/* The id and canonical value of a normalised spec (borrowed). */
static int encode(const json_t *norm, char id[LR_ID_SIZE], char **value,
                  lr_err *err)
{
	snprintf(id, LR_ID_SIZE, "%s", lr_spec_id(norm));
	*value = lr_spec_encode(norm);
	if (*value == NULL)
		return lr_err_set(err, LR_ENOMEM, "submit %s: out of memory", id);
	return 0;
}

int lr_submit_prepare(const char *text, size_t len, const char *id_override,
                      char id[LR_ID_SIZE], char **value, lr_err *err)
{
	return lr_submit_prepare_at(text, len, id_override, 0, id, value, NULL, err);
}

int lr_submit_prepare_at(const char *text, size_t len, const char *id_override,
                         int64_t not_before_ms, char id[LR_ID_SIZE], char **value,
                         bool *added_out, lr_err *err)
{
	json_t *norm = NULL;
	int rc = lr_spec_parse_with_id(text, len, id_override, &norm, err);

	if (rc != 0)
		return rc == LR_EINVAL ? lr_err_wrap(err, rc, "invalid spec") : rc;
	bool added = lr_sched_start_at(norm, not_before_ms);
	if (added_out != NULL)
		*added_out = added;
	rc = encode(norm, id, value, err);
	json_decref(norm);
	if (rc != 0 || !added)
		return rc;
	/* Validated again as it is stored: a start time out of range, or a
	 * spec the addition takes over the size limit, is refused like any
	 * other invalid spec. */
	json_t *again = NULL;
	rc = lr_spec_parse_with_id(*value, strlen(*value), NULL, &again, err);
	json_decref(again);
	if (rc != 0) {
		free(*value);
		*value = NULL;
		return rc == LR_EINVAL ? lr_err_wrap(err, rc, "invalid spec") : rc;
	}
	return 0;
}

/* Store what lr_submit_prepare or encode made, and free it. */
static int store_prepared(lr_client *c, const char *id, char *value,
                          char id_out[LR_ID_SIZE], int *created, lr_err *err)
{
	int was_created = 0;
	int rc = lr_submit_store(c, id, value, false, NULL, &was_created, err);

	free(value);
	if (rc != 0)
		return rc;
	if (id_out != NULL)
		snprintf(id_out, LR_ID_SIZE, "%s", id);
	if (created != NULL)
		*created = was_created;
	return 0;
}

int lr_submit_text(lr_client *c, const char *text, size_t len,
                   const char *id_override, char id_out[LR_ID_SIZE],
                   int *created, lr_err *err)
{
	char id[LR_ID_SIZE];
	char *value = NULL;
	int rc;

	if (LR_NULL_ARG(err, c) || LR_NULL_ARG(err, text))
		return LR_EINVAL;
	rc = lr_submit_prepare(text, len, id_override, id, &value, err);
	if (rc != 0)
		return rc;
	return store_prepared(c, id, value, id_out, created, err);
}

int lr_submit_json(lr_client *c, const void *spec, const char *id_override,
                   char id_out[LR_ID_SIZE], int *created, lr_err *err)
{
	char id[LR_ID_SIZE];
	char *value = NULL;
	json_t *norm = NULL;
	int rc;

	if (LR_NULL_ARG(err, c) || LR_NULL_ARG(err, spec))
		return LR_EINVAL;
	/* lr_spec_validate does not modify its input; the cast only drops
	 * the const of the public signature. */
	rc = lr_spec_validate((json_t *)spec, id_override, &norm, err);
	if (rc != 0)
		return rc == LR_EINVAL ? lr_err_wrap(err, rc, "invalid spec") : rc;
	rc = encode(norm, id, &value, err);
	json_decref(norm);
	if (rc != 0)
		return rc;
	return store_prepared(c, id, value, id_out, created, err);
}
