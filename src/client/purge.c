/* purge.c - housekeeping: delete the keys of tasks that finished long
 * enough ago. Runs on the caller's thread; no state of its own. */
#include <stdbool.h>
#include <string.h>

#include "base/error.h"
#include "client/lock_keys.h"
#include "client/task_records.h"
#include "client/walk.h"
#include "records/record.h"
#include "records/spec.h"

/* done records carry the final state (up to 512 KiB): a modest page keeps
 * one Range reply small whatever the states hold. */
#define DONE_PAGE 64

struct purge {
	lr_client *c;
	int64_t older_than_ms;
	int filter;
	int64_t now_ms;
	size_t purged;
};

/* Is this done record one to purge? Ages come from finished_at, a wall
 * clock time: purging is housekeeping for people, and a clock that is off
 * only purges a little early or late. A record that does not decode has no
 * trustworthy age and is left alone. */
static bool wanted(const struct purge *p, const lr_kv *kv)
{
	lr_done_rec d;
	int64_t finished_ms;
	bool ok = false;

	if (lr_done_decode(kv->value, kv->value_len, &d, NULL) != 0)
		return false;
	if (lr_rfc3339_parse(d.finished_at, &finished_ms) == 0 &&
	    p->now_ms - finished_ms >= p->older_than_ms)
		ok = p->filter < 0 || lr_task_state_parse(d.status) == p->filter;
	lr_done_rec_clear(&d);
	return ok;
}

/* One txn per task: only a finished task with no claim goes, and only the
 * done record that was judged (its mod revision), so a task purged and
 * submitted again meanwhile is not caught by an old verdict. Safe to retry:
 * once applied, the compares fail. */
static int purge_task(struct purge *p, const char *id, const lr_kv *done,
                      lr_err *err)
{
	static const char *const kinds[] = { LR_K_TASKS, LR_K_CHECKPOINTS, LR_K_DONE,
		                             LR_K_CANCEL, LR_K_QUEUE, LR_K_HISTORY };
	char key[LR_KEY_SIZE];
	lr_txn_result r;
	lr_txn *t = lr_txn_new();
	int rc;

	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "purge %s: out of memory", id);
	lr_key(p->c, LR_K_CLAIMS, id, key);
	lr_txn_cmp(t, key, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_key(p->c, LR_K_DONE, id, key);
	lr_txn_cmp(t, key, 0, LR_CMP_VERSION, LR_CMP_GT, 0);
	lr_txn_cmp(t, key, 0, LR_CMP_MOD, LR_CMP_EQ, done->mod_rev);
	for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		lr_key(p->c, kinds[i], id, key);
		lr_txn_delete(t, LR_THEN, key, 0);
	}
	char holder[LR_HOLDER_SIZE], wants[LR_LOCK_KEY_SIZE];
	lr_holder_of_task(id, holder);
	lr_wants_key(p->c, holder, wants);
	lr_txn_delete(t, LR_THEN, wants, 0); /* one a task left behind */
	rc = lr_etcd_txn(lr_client_etcd(p->c), t, LR_CALL_RETRY, &r, err);
	lr_txn_free(t);
	if (rc != 0)
		return lr_err_wrap(err, rc, "purge %s", id);
	if (r.succeeded)
		p->purged++;
	lr_txn_result_free(&r);
	return 0;
}

static int visit_done(void *user, const lr_kv *kv, const char *id, lr_err *err)
{
	struct purge *p = user;

	if (id == NULL || !lr_id_valid(id) || !wanted(p, kv))
		return 0;
	return purge_task(p, id, kv, err);
}

int lr_purge(lr_client *c, int64_t older_than_ms, int state_filter,
             size_t *purged, lr_err *err)
{
	struct purge p = { .c = c, .older_than_ms = older_than_ms,
		           .filter = state_filter, .now_ms = lr_wall_ms() };
	int rc;

	if (purged != NULL)
		*purged = 0;
	if (LR_NULL_ARG(err, c))
		return LR_EINVAL;
	if (older_than_ms < 0)
		return lr_err_set(err, LR_EINVAL,
		                  "purge: the age must not be negative");
	if (state_filter != -1 && state_filter < LR_TASK_SUCCEEDED)
		return lr_err_set(err, LR_EINVAL,
		                  "purge: status must be succeeded, failed or "
		                  "cancelled (only finished tasks are purged)");
	if (state_filter > LR_TASK_CANCELLED)
		return lr_err_set(err, LR_EINVAL, "purge: unknown status %d",
		                  state_filter);
	lr_walk_opts done = { .kind = LR_K_DONE, .page = DONE_PAGE };
	rc = lr_walk(c, &done, visit_done, &p, err);
	/* Report what was purged before an error too: those keys are gone. */
	if (purged != NULL)
		*purged = p.purged;
	return rc;
}
