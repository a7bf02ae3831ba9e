/* walk.c - every key of one directory under the prefix, page by page.
 * Runs on the caller's thread; no state of its own. */
#include "client/walk.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* One page: the keys after `after` (NULL: from the start), each passed to
 * fn. *more tells whether another page may follow; *after becomes the last
 * key read (malloc'd). */
static int walk_page(lr_client *c, const lr_walk_opts *o, const char *dir,
                     const char *end, char **after, bool *more, lr_walk_fn fn,
                     void *user, lr_err *err)
{
	/* A page starts at the last key seen (inclusive: a key of its own
	 * plus "\0" cannot be written as a C string) and skips it. */
	lr_range_opts ro = { .key = *after != NULL ? *after : dir, .range_end = end,
	                     .flags = o->flags,
	                     .limit = *after != NULL ? o->page + 1 : o->page,
	                     .revision = o->revision != NULL ? *o->revision : 0 };
	lr_range_result r;
	int rc = lr_kv_range(lr_client_etcd(c), &ro, &r, err);
	if (rc != 0)
		return lr_err_wrap(err, rc, "list %s", dir);
	if (o->revision != NULL && *o->revision == 0)
		*o->revision = r.revision;
	for (size_t i = 0; i < r.n && rc == 0; i++) {
		const lr_kv *kv = &r.kvs[i];
		if (*after != NULL && strcmp(kv->key, *after) == 0)
			continue;
		rc = fn(user, kv, lr_key_id(c, o->kind, kv->key), err);
	}
	*more = rc == 0 && r.more && r.n > 0;
	free(*after);
	*after = NULL;
	if (*more && (*after = strdup(r.kvs[r.n - 1].key)) == NULL)
		rc = lr_err_set(err, LR_ENOMEM, "list %s: out of memory", dir);
	lr_range_result_free(&r);
	return rc;
}

int lr_walk(lr_client *c, const lr_walk_opts *o, lr_walk_fn fn, void *user, lr_err *err)
{
	char dir[LR_KEY_SIZE], end[LR_KEY_SIZE];
	lr_key(c, o->kind, "", dir);
	/* The prefix has a '/', so its end is never "every key". */
	end[lr_prefix_end(dir, end)] = '\0';
	char *after = NULL; /* last key seen; NULL on the first page */
	bool more = true;
	int rc = 0;
	while (rc == 0 && more) {
		if (o->stop != NULL && atomic_load(o->stop))
			rc = lr_err_set(err, LR_ECANCELLED, "list %s: stopped", dir);
		else
			rc = walk_page(c, o, dir, end, &after, &more, fn, user, err);
	}
	free(after);
	return rc;
}
