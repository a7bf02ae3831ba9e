/* step_shared.c - shared values written by a step, fenced by its claim, so
 * that only the task's current holder can change them.
 * Runs on the step's worker thread, like the rest of the step context. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "client/shared.h"
#include "engine/runner_int.h"
#include "engine/step_int.h"
#include "records/spec.h"

/* Keys and encoded values of the n writes (*keys and *vals: n entries,
 * malloc'd; free with free_encoded). */
static int encode_all(lr_step *s, size_t n, const char *const names[],
                      const void *const values[], char (**keys)[LR_KEY_SIZE],
                      char ***vals, lr_err *err)
{
	size_t total = 0;
	*keys = calloc(n, sizeof(**keys));
	*vals = calloc(n, sizeof(**vals));
	if (*keys == NULL || *vals == NULL)
		return lr_err_set(err, LR_ENOMEM, "out of memory");
	for (size_t i = 0; i < n; i++) {
		int rc = lr_shared_key(s->who->client, names[i], (*keys)[i], err);
		if (rc == 0)
			rc = lr_shared_encode(values[i], &(*vals)[i], err);
		if (rc != 0)
			return lr_err_wrap(err, rc, "value %zu", i);
		total += strlen((*vals)[i]);
	}
	if (total > LR_SPEC_MAX_BYTES)
		return lr_err_set(err, LR_ETOOLARGE,
		                  "%zu values of %zu bytes together: over the 1 MiB "
		                  "limit of one write", n, total);
	return 0;
}

static void free_encoded(size_t n, char (*keys)[LR_KEY_SIZE], char **vals)
{
	for (size_t i = 0; vals != NULL && i < n; i++)
		free(vals[i]);
	free(vals);
	free(keys);
}

int lr_step_shared_put_many(lr_step *s, size_t n, const char *const names[],
                            const void *const values[], lr_err *err)
{
	char (*keys)[LR_KEY_SIZE] = NULL;
	char **vals = NULL;
	const char **key_ptrs = NULL;
	int rc;

	if (LR_NULL_ARG(err, s) || LR_NULL_ARG(err, names) || LR_NULL_ARG(err, values))
		return LR_EINVAL;
	if (n < 1 || n > LR_SHARED_PUT_MAX) {
		rc = lr_err_set(err, LR_EINVAL, "%zu values: write 1 to %d at once",
		                n, LR_SHARED_PUT_MAX);
		goto out;
	}
	if (lr_step_cancelled(s)) {
		rc = lr_err_set(err, LR_ECANCELLED, "the step was stopped");
		goto out;
	}
	rc = encode_all(s, n, names, values, &keys, &vals, err);
	if (rc == 0 && (key_ptrs = calloc(n, sizeof(*key_ptrs))) == NULL)
		rc = lr_err_set(err, LR_ENOMEM, "out of memory");
	for (size_t i = 0; rc == 0 && i < n; i++)
		key_ptrs[i] = keys[i];
	if (rc == 0)
		rc = lr_fenced_put(s->who, s->h, n, key_ptrs, vals, err);
	if (rc == LR_ELEASE)
		lr_stop_request(&s->w->stop, LR_STOP_LEASE); /* the claim is gone: drop it */
out:
	free(key_ptrs);
	free_encoded(n, keys, vals);
	if (rc != 0)
		lr_err_wrap(err, rc, "shared put %s step %s", s->h->id, s->name);
	return rc;
}

int lr_step_shared_put(lr_step *s, const char *name, const void *value,
                       lr_err *err)
{
	if (LR_NULL_ARG(err, s))
		return LR_EINVAL;
	return lr_step_shared_put_many(s, 1, &name, &value, err);
}
