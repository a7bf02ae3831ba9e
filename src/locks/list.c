/* list.c - who holds which lock and slot and who waits, as one JSON
 * document for `leaserun locks`, the web page and bindings
 * (lr_locks_read in leaserun.h). Runs on the caller's thread. */
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/error.h"
#include "base/utf8.h"
#include "locks/table.h"

/* The key's value ({"holder","runner","host","since"}) with what is
 * held added in front. A holder is the rest of a key, which may hold any
 * bytes: it goes into JSON with U+FFFD for each that is no character,
 * rather than being left out. */
static json_t *entry(const char *value)
{
	json_t *v = value != NULL ? json_loads(value, 0, NULL) : NULL;
	return json_is_object(v) ? v : (json_decref(v), json_object());
}

static void on_lock(void *user, const char *path, lr_lock_mode mode, const char *holder,
                    const char *value)
{
	json_t *e = entry(value);
	json_object_set_new(e, "lock", json_string(path));
	json_object_set_new(e, "mode", json_string(lr_lock_mode_name(mode)));
	json_object_set_new(e, "holder", lr_json_string_lossy(holder));
	json_array_append_new(user, e);
}

static void on_slot(void *user, const char *pool, int index, const char *holder,
                    const char *value)
{
	json_t *e = entry(value);
	json_object_set_new(e, "pool", json_string(pool));
	json_object_set_new(e, "slot", json_integer(index));
	json_object_set_new(e, "holder", lr_json_string_lossy(holder));
	json_array_append_new(user, e);
}

struct waiters {
	const lr_lock_table *t;
	json_t *list;
};

static void on_want(void *user, const char *holder, const lr_lockset *set, int64_t rev,
                    bool holding, const char *value)
{
	struct waiters *w = user;
	if (holding)
		return;
	char why[600] = "";
	int slots[LR_LIMITS_MAX];
	/* A task not ready yet waits for its time or its dependencies first. */
	bool free_now = !lr_lock_table_waits_first(w->t, holder, why, sizeof(why)) &&
	                lr_lock_table_can_take(w->t, set, holder, rev, slots, NULL, NULL, why,
	                                       sizeof(why));
	json_t *e = entry(value);
	json_object_set_new(e, "holder", lr_json_string_lossy(holder));
	json_object_set_new(e, "waiting_for",
	                    free_now ? json_null() : lr_json_string_lossy(why));
	json_array_append_new(w->list, e);
}

json_t *lr_lock_table_doc(const lr_lock_table *t)
{
	json_t *held = json_array(), *waiting = json_array();
	if (held != NULL && waiting != NULL) {
		lr_lock_table_each_lock(t, on_lock, held);
		lr_lock_table_each_slot(t, on_slot, held);
		struct waiters w = { t, waiting };
		lr_lock_table_each_want(t, on_want, &w);
	}
	return json_pack("{s:o*, s:o*}", "held", held, "waiting", waiting);
}

int lr_locks_read(lr_client *c, void **doc, lr_err *err)
{
	if (LR_NULL_ARG(err, c) || LR_NULL_ARG(err, doc))
		return LR_EINVAL;
	*doc = NULL;
	lr_lock_table *t = lr_lock_table_new(c);
	int64_t rev = 0;
	int rc = t != NULL ? lr_lock_table_load(t, c, &rev, NULL, err)
	                   : lr_err_set(err, LR_ENOMEM, "out of memory");
	if (rc == 0)
		rc = lr_lock_table_load_deps(t, c, NULL, 0, err);
	json_t *d = rc == 0 ? lr_lock_table_doc(t) : NULL;
	if (rc == 0 && (d == NULL || json_object_set_new(d, "revision", json_integer(rev)) != 0))
		rc = lr_err_set(err, LR_ENOMEM, "out of memory");
	if (rc == 0)
		*doc = d;
	else
		json_decref(d);
	lr_lock_table_free(t);
	return rc != 0 ? lr_err_wrap(err, rc, "read locks") : 0;
}
