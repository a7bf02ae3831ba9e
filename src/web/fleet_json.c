/* fleet_json.c - the fleet view as the page receives it: a snapshot of
 * everything, the changes since the last publication, one task's history.
 * Threads: any; each function takes f->mu while it encodes. */
#include "web/fleet_int.h"

#include <stdlib.h>
#include <string.h>

#include "base/utf8.h"

/* The later of two RFC 3339 times ("" for none). */
static const char *later(const char *a, const char *b)
{
	int64_t ma, mb;

	if (a[0] == '\0' || lr_rfc3339_parse(a, &ma) != 0)
		return b;
	if (b[0] == '\0' || lr_rfc3339_parse(b, &mb) != 0)
		return a;
	return mb > ma ? b : a;
}

static lr_task_state state_of(const struct fleet_task *t)
{
	if (t->has[FK_DONE])
		return t->final;
	return t->has[FK_CLAIM] ? LR_TASK_RUNNING : LR_TASK_PENDING;
}

/* A string, or null when there is none (or it is not valid UTF-8, which
 * the records' own decoding already refuses). */
static json_t *str_or_null(const char *s)
{
	json_t *v = s != NULL && s[0] != '\0' ? json_string(s) : NULL;

	return v != NULL ? v : json_null();
}

static json_t *task_json(const struct fleet_task *t)
{
	lr_task_state st = state_of(t);
	bool done = t->has[FK_DONE];
	int64_t next = st == LR_TASK_SUCCEEDED ? t->steps : t->next_step;
	const char *step = NULL, *updated;
	const char *runner = t->holder != NULL ? t->holder : t->last_runner;
	const char *error = t->error != NULL ? t->error : t->spec_error;

	if (!done && t->step_names != NULL && next >= 0 && next < t->steps)
		step = t->step_names[next];
	updated = done ? t->finished_at : later(t->claimed_at, t->cp_updated);
	json_t *o = json_object();
	json_object_set_new(o, "id", json_string(t->id));
	json_object_set_new(o, "state", json_string(lr_task_state_name(st)));
	json_object_set_new(o, "rev", json_integer(t->create_rev));
	json_object_set_new(o, "next_step", json_integer(next));
	json_object_set_new(o, "steps", json_integer(t->steps));
	json_object_set_new(o, "step_name", str_or_null(step));
	json_object_set_new(o, "attempt",
	                    json_integer(done ? t->done_attempts : t->attempt));
	json_object_set_new(o, "max_attempts", json_integer(t->max_attempts));
	json_object_set_new(o, "runner", str_or_null(runner));
	json_object_set_new(o, "error", str_or_null(error));
	json_object_set_new(o, "updated_at", str_or_null(updated));
	json_object_set_new(o, "cancel_requested", json_boolean(t->has[FK_CANCEL]));
	return o;
}

static json_t *runners_json(const lr_fleet *f)
{
	json_t *a = json_array();

	for (size_t i = 0; i < f->n_runners; i++) {
		const lr_runner_info *r = &f->runners[i].info;
		json_t *o = json_object();
		json_object_set_new(o, "name", json_string(r->name));
		json_object_set_new(o, "host", str_or_null(r->host));
		json_object_set_new(o, "pid", json_integer(r->pid));
		json_object_set_new(o, "concurrency", json_integer(r->concurrency));
		json_object_set_new(o, "ttl", json_integer(r->ttl));
		json_object_set_new(o, "ttl_left", json_integer(r->ttl_left));
		json_object_set_new(o, "started_at", str_or_null(r->started_at));
		json_object_set_new(o, "version", str_or_null(r->version));
		json_array_append_new(a, o);
	}
	return a;
}

/* Forget what was marked changed: the caller publishes everything or
 * what it took. */
static void clear_dirty(lr_fleet *f)
{
	for (size_t i = 0; i < f->dirty.n; i++) {
		struct fleet_task *t = fleet_task_find(f, f->dirty.v[i]);
		if (t != NULL)
			t->dirty = false;
		free(f->dirty.v[i]);
	}
	f->dirty.n = 0;
	f->runners_dirty = false;
	f->locks_dirty = false;
}

/* Whether etcd answers, for the page. Under f->mu. */
static json_t *etcd_json(const lr_fleet *f)
{
	json_t *o = json_object();
	char as_of[LR_TIME_BUF];

	json_object_set_new(o, "reachable", json_boolean(!f->etcd_down));
	if (f->etcd_down) {
		lr_rfc3339_format(f->etcd_heard_ms, as_of);
		json_object_set_new(o, "as_of", json_string(as_of));
		json_object_set_new(o, "error", lr_json_string_lossy(f->etcd_why));
	}
	return o;
}

json_t *lr_fleet_take_etcd(lr_fleet *f)
{
	json_t *o = NULL;

	pthread_mutex_lock(&f->mu);
	if (f->etcd_dirty)
		o = etcd_json(f);
	f->etcd_dirty = false;
	pthread_mutex_unlock(&f->mu);
	return o;
}

json_t *lr_fleet_snapshot(lr_fleet *f)
{
	json_t *o = json_object(), *tasks = json_array();

	pthread_mutex_lock(&f->mu);
	for (size_t i = 0; i < f->n_buckets; i++)
		for (const struct fleet_task *t = f->buckets[i]; t != NULL; t = t->hnext)
			if (t->has[FK_TASK])
				json_array_append_new(tasks, task_json(t));
	json_object_set_new(o, "revision", json_integer(f->revision));
	json_object_set_new(o, "tasks", tasks);
	json_object_set_new(o, "runners", runners_json(f));
	json_object_set_new(o, "locks", lr_lock_table_doc(f->locks));
	json_object_set_new(o, "etcd", etcd_json(f));
	pthread_mutex_unlock(&f->mu);
	return o;
}

json_t *lr_fleet_take_changes(lr_fleet *f)
{
	json_t *o = NULL, *tasks, *removed;

	pthread_mutex_lock(&f->mu);
	if (f->dirty.n == 0 && !f->runners_dirty && !f->locks_dirty)
		goto out;
	o = json_object();
	tasks = json_array();
	removed = json_array();
	for (size_t i = 0; i < f->dirty.n; i++) {
		const struct fleet_task *t = fleet_task_find(f, f->dirty.v[i]);
		if (t != NULL && t->has[FK_TASK])
			json_array_append_new(tasks, task_json(t));
		else
			json_array_append_new(removed, json_string(f->dirty.v[i]));
	}
	json_object_set_new(o, "revision", json_integer(f->revision));
	json_object_set_new(o, "tasks", tasks);
	json_object_set_new(o, "removed", removed);
	if (f->runners_dirty)
		json_object_set_new(o, "runners", runners_json(f));
	if (f->locks_dirty)
		json_object_set_new(o, "locks", lr_lock_table_doc(f->locks));
	clear_dirty(f);
out:
	pthread_mutex_unlock(&f->mu);
	return o;
}

json_t *lr_fleet_task_detail(lr_fleet *f, const char *id, lr_fleet_revs *revs)
{
	json_t *o = NULL, *hist, *names;
	char at[LR_TIME_BUF];

	pthread_mutex_lock(&f->mu);
	const struct fleet_task *t = fleet_task_find(f, id);
	if (t == NULL || !t->has[FK_TASK])
		goto out;
	*revs = (lr_fleet_revs){
		.task = t->has[FK_TASK] ? t->rev[FK_TASK] : 0,
		.checkpoint = t->has[FK_CHECKPOINT] ? t->rev[FK_CHECKPOINT] : 0,
		.done = t->has[FK_DONE] ? t->rev[FK_DONE] : 0,
	};
	o = json_object();
	json_object_set_new(o, "task", task_json(t));
	names = json_array();
	for (int64_t i = 0; t->step_names != NULL && i < t->steps; i++)
		json_array_append_new(names, json_string(t->step_names[i]));
	json_object_set_new(o, "step_names", names);
	hist = json_array();
	for (int i = 0; i < t->hist_n; i++) {
		const struct fleet_event *e = &t->hist[(t->hist_first + i) % FLEET_HISTORY];
		json_t *h = json_object();
		lr_rfc3339_format(e->at_ms, at);
		json_object_set_new(h, "at", json_string(at));
		json_object_set_new(h, "what", json_string(e->what));
		json_array_append_new(hist, h);
	}
	json_object_set_new(o, "history", hist);
out:
	pthread_mutex_unlock(&f->mu);
	return o;
}
