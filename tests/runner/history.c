/* history.c - replay of a prefix's history from etcd, checking the
 * contract's guarantees event by event, in revision order. */
#include "history.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/clock.h"
#include "etcd/kv.h"
#include "etcd/watch.h"

struct task_hist {
	char id[256];
	int64_t steps;       /* from the spec; -1 when unknown */
	int64_t claim_rev;   /* create revision of the live claim, 0: none */
	char claim_runner[256];
	/* The claim deleted last: a done record written in the revision that
	 * deleted it was written under it, whatever the order of the ops. */
	int64_t dropped_rev, dropped_at;
	char dropped_runner[256];
	int64_t next_step;   /* as last committed */
	bool has_ckpt;
	int dones;
	int64_t retried_at;  /* revision of the last `retry` (done deleted) */
	struct task_hist *next;
};

struct replay {
	pthread_mutex_t mu;
	const char *prefix;
	int64_t seen_rev;     /* every event up to here was applied */
	struct task_hist *tasks;
	history_report *rep;
	history_fn fn;        /* may be NULL */
	void *user;
};

static struct task_hist *task_of(struct replay *rp, const char *id)
{
	for (struct task_hist *t = rp->tasks; t != NULL; t = t->next)
		if (strcmp(t->id, id) == 0)
			return t;
	struct task_hist *t = calloc(1, sizeof(*t));
	snprintf(t->id, sizeof(t->id), "%s", id);
	t->steps = -1;
	t->next = rp->tasks;
	rp->tasks = t;
	return t;
}

static void violation(struct replay *rp, const char *fmt, ...)
{
	if (rp->rep->violations++ == 0) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(rp->rep->first, sizeof(rp->rep->first), fmt, ap);
		va_end(ap);
	}
}

static int64_t json_int_of(json_t *o, const char *k)
{
	return json_integer_value(json_object_get(o, k));
}

static void emit(struct replay *rp, history_kind kind, const struct task_hist *t,
                 int64_t revision, const char *runner, int64_t fence, int64_t committed)
{
	if (rp->fn == NULL)
		return;
	history_event e = { .kind = kind, .task = t->id, .revision = revision,
	                    .runner = runner, .fence = fence, .committed = committed };
	rp->fn(rp->user, &e);
}

static json_t *json_of(const lr_kv *kv)
{
	return json_loadb(kv->value, kv->value_len, 0, NULL);
}

static void on_task(struct task_hist *t, const lr_kv *kv)
{
	json_t *spec = json_of(kv);
	json_t *steps = json_object_get(spec, "steps");
	if (json_is_array(steps))
		t->steps = (int64_t)json_array_size(steps);
	json_decref(spec);
}

static void on_claim(struct replay *rp, struct task_hist *t, const lr_watch_event *e)
{
	if (e->type == LR_EV_DELETE) {
		if (t->claim_rev != 0) {
			t->dropped_rev = t->claim_rev;
			t->dropped_at = e->kv.mod_rev;
			snprintf(t->dropped_runner, sizeof(t->dropped_runner), "%s",
			         t->claim_runner);
		}
		t->claim_rev = 0;
		return;
	}
	if (e->kv.version != 1 || t->claim_rev != 0) {
		violation(rp, "claim of %s overwritten at revision %lld", t->id,
		          (long long)e->kv.mod_rev);
		return;
	}
	t->claim_rev = e->kv.create_rev;
	rp->rep->claims++;
	json_t *v = json_of(&e->kv);
	const char *runner = json_string_value(json_object_get(v, "runner"));
	snprintf(t->claim_runner, sizeof(t->claim_runner), "%s", runner ? runner : "");
	json_decref(v);
	emit(rp, HISTORY_CLAIM, t, e->kv.mod_rev, t->claim_runner, t->claim_rev, -1);
}

static void on_done(struct replay *rp, struct task_hist *t, const lr_kv *kv)
{
	if (++t->dones > 1)
		violation(rp, "task %s has a second done record at revision %lld", t->id,
		          (long long)kv->mod_rev);
	rp->rep->finals++;
	/* The claim it was written under: live, or deleted by the same txn. */
	int64_t fence = t->claim_rev;
	const char *runner = t->claim_runner;
	if (fence == 0 && t->dropped_at == kv->mod_rev) {
		fence = t->dropped_rev;
		runner = t->dropped_runner;
	}
	if (fence == 0)
		runner = NULL;
	json_t *v = json_of(kv);
	const char *status = json_string_value(json_object_get(v, "status"));
	int64_t committed = -1;
	if (status != NULL && strcmp(status, "succeeded") == 0) {
		int64_t last = t->steps > 0 ? t->steps - 1 : t->next_step;
		if (t->next_step != last)
			violation(rp, "task %s succeeded at revision %lld with step %lld of %lld "
			          "not committed", t->id, (long long)kv->mod_rev,
			          (long long)t->next_step, (long long)t->steps);
		committed = last;
	}
	json_decref(v);
	emit(rp, HISTORY_DONE, t, kv->mod_rev, runner, fence, committed);
}

static void on_checkpoint(struct replay *rp, struct task_hist *t, const lr_kv *kv)
{
	json_t *v = json_of(kv);
	if (v == NULL) {
		violation(rp, "checkpoint of %s at revision %lld is not JSON", t->id,
		          (long long)kv->mod_rev);
		return;
	}
	int64_t fence = json_int_of(v, "fence");
	int64_t next = json_int_of(v, "next_step");
	if (t->retried_at == kv->mod_rev) {
		/* A retry rewinds the checkpoint with the result it deletes. */
		t->next_step = next;
		t->has_ckpt = true;
		json_decref(v);
		return;
	}
	if (fence == 0 && t->claim_rev != kv->mod_rev)
		violation(rp, "checkpoint of %s at revision %lld has fence 0 outside a claim txn",
		          t->id, (long long)kv->mod_rev);
	if (fence != 0 && fence != t->claim_rev)
		violation(rp, "checkpoint of %s at revision %lld written under fence %lld, live claim %lld",
		          t->id, (long long)kv->mod_rev, (long long)fence, (long long)t->claim_rev);
	int64_t before = t->has_ckpt ? t->next_step : 0;
	int64_t committed = -1;
	if (next == before + 1) {
		rp->rep->commits++;
		committed = before;
	} else if (next != before) {
		violation(rp, "checkpoint of %s at revision %lld moves next_step %lld -> %lld",
		          t->id, (long long)kv->mod_rev, (long long)before, (long long)next);
	}
	t->next_step = next;
	t->has_ckpt = true;
	emit(rp, HISTORY_CHECKPOINT, t, kv->mod_rev,
	     json_string_value(json_object_get(v, "runner")),
	     fence != 0 ? fence : t->claim_rev, committed);
	json_decref(v);
}

static void apply(struct replay *rp, const lr_watch_event *e)
{
	const char *rest = e->kv.key + strlen(rp->prefix);
	const char *slash = strchr(rest, '/');
	if (slash == NULL)
		return;
	const char *id = slash + 1;
	size_t kind_len = (size_t)(slash - rest);
	if (strncmp(rest, "tasks", kind_len) == 0 && e->type == LR_EV_PUT)
		on_task(task_of(rp, id), &e->kv);
	else if (strncmp(rest, "claims", kind_len) == 0)
		on_claim(rp, task_of(rp, id), e);
	else if (strncmp(rest, "checkpoints", kind_len) == 0 && e->type == LR_EV_PUT)
		on_checkpoint(rp, task_of(rp, id), &e->kv);
	else if (strncmp(rest, "done", kind_len) == 0 && e->type == LR_EV_PUT)
		on_done(rp, task_of(rp, id), &e->kv);
	else if (strncmp(rest, "done", kind_len) == 0) {
		/* Deleted by a retry (or a purge): the task may end once more. */
		struct task_hist *t = task_of(rp, id);
		t->dones = 0;
		t->retried_at = e->kv.mod_rev;
	}
}

static void on_batch(void *user, const lr_watch_batch *b)
{
	struct replay *rp = user;
	pthread_mutex_lock(&rp->mu);
	for (size_t i = 0; i < b->n; i++) {
		apply(rp, &b->events[i]);
		rp->seen_rev = b->events[i].kv.mod_rev;
	}
	if (b->kind == LR_WATCH_COMPACTED)
		violation(rp, "history compacted at %lld: cannot check", (long long)b->compact_revision);
	pthread_mutex_unlock(&rp->mu);
}

int history_check(lr_etcd *c, const char *prefix, history_report *out)
{
	return history_replay(c, prefix, NULL, NULL, out);
}

int history_replay(lr_etcd *c, const char *prefix, history_fn fn, void *user,
                   history_report *out)
{
	memset(out, 0, sizeof(*out));
	lr_err err;
	lr_range_result now;
	if (lr_kv_get(c, prefix, &now, &err) != 0) {
		fprintf(stderr, "history: %s\n", err.msg);
		return -1;
	}
	int64_t until = now.revision;
	lr_range_result_free(&now);

	struct replay rp = { .prefix = prefix, .rep = out, .fn = fn, .user = user };
	pthread_mutex_init(&rp.mu, NULL);
	lr_watch *w;
	lr_watcher *wr;
	if (lr_watch_new(c, &w, &err) != 0 ||
	    lr_watch_add(w, prefix, LR_KEY_PREFIX, 1, on_batch, &rp, &wr, &err) != 0) {
		fprintf(stderr, "history: %s\n", err.msg);
		return -1;
	}
	/* The last event under the prefix may be older than `until`: wait for
	 * the watch to go quiet after catching up. */
	int64_t end = lr_mono_ms() + 20000, last_change = lr_mono_ms();
	int64_t last_seen = -1;
	for (;;) {
		pthread_mutex_lock(&rp.mu);
		int64_t seen = rp.seen_rev;
		pthread_mutex_unlock(&rp.mu);
		if (seen != last_seen) {
			last_seen = seen;
			last_change = lr_mono_ms();
		}
		if (seen >= until || lr_mono_ms() - last_change > 1000 || lr_mono_ms() > end)
			break;
		lr_sleep_ms(20);
	}
	lr_watch_free(w);
	for (struct task_hist *t = rp.tasks; t != NULL;) {
		struct task_hist *n = t->next;
		if (t->dones > 0)
			out->tasks++;
		free(t);
		t = n;
	}
	pthread_mutex_destroy(&rp.mu);
	return 0;
}
