/* detail.c - one task's detail for the page: what the view knows (state,
 * history) and what only etcd holds (the spec without env values, the
 * fence, the state). The latter is kept for the last DETAIL_CACHE tasks
 * asked for, and served while the view (kept current by the watch) says
 * the task's records are still those read; etcd is read by at most
 * DETAIL_READS requests at once, and a request for a task being read
 * waits for that read.
 * Threads: the connection threads; d->mu guards the cache and is never
 * held across an etcd call. */
#include "web/web_int.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "client/task_records.h"
#include "records/record.h"
#include "records/spec.h"

/* The state shown in a task's detail is cut here (it may be 512 KiB). */
#define STATE_SHOWN_MAX (64 * 1024)
/* Tasks whose records are kept: a spec may be 1 MiB, its state is cut
 * at 64 KiB. */
#define DETAIL_CACHE 16
/* Requests that read etcd at once; others wait, at most DETAIL_WAIT_MS,
 * then get 503 with Retry-After. */
#define DETAIL_READS 2
#define DETAIL_WAIT_MS 5000

struct detail_entry {
	char id[LR_ID_SIZE];    /* "": free */
	lr_fleet_revs revs;     /* of the records read */
	json_t *records;        /* spec, fence, error, state; never changed
	                           once here (shared by the replies) */
	bool reading;           /* a request reads it now */
	uint64_t used;          /* when last asked for (a counter) */
};

struct web_details {
	pthread_mutex_t mu;
	pthread_cond_t cond;    /* a read ended (monotonic clock) */
	struct detail_entry e[DETAIL_CACHE];
	int reading;            /* reads of etcd under way */
	uint64_t clock;
};

web_details *web_details_new(void)
{
	web_details *d = calloc(1, sizeof(*d));
	pthread_condattr_t ca;

	if (d == NULL)
		return NULL;
	pthread_mutex_init(&d->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&d->cond, &ca);
	pthread_condattr_destroy(&ca);
	return d;
}

void web_details_free(web_details *d)
{
	if (d == NULL)
		return;
	for (int i = 0; i < DETAIL_CACHE; i++)
		json_decref(d->e[i].records);
	pthread_cond_destroy(&d->cond);
	pthread_mutex_destroy(&d->mu);
	free(d);
}

/* The spec as the page shows it: steps and limits, and the names of env
 * variables only (their values may be secrets). */
static json_t *spec_json(const json_t *spec)
{
	json_t *o = json_object(), *steps = json_array(), *env = json_array();
	const char *name;
	json_t *v;

	static const char *const fields[] = { "name", "run", "timeout_s" };

	for (size_t i = 0; i < lr_spec_steps(spec); i++) {
		const json_t *step = lr_spec_step(spec, i);
		json_t *s = json_object();
		for (size_t k = 0; k < sizeof(fields) / sizeof(fields[0]); k++)
			json_object_set(s, fields[k], json_object_get(step, fields[k]));
		json_array_append_new(steps, s);
	}
	json_object_foreach(lr_spec_env(spec), name, v)
		json_array_append_new(env, json_string(name));
	json_object_set_new(o, "steps", steps);
	json_object_set_new(o, "env_names", env);
	json_object_set_new(o, "max_attempts", json_integer(lr_spec_max_attempts(spec)));
	json_object_set_new(o, "retry_backoff_ms", json_integer(lr_spec_backoff_ms(spec)));
	return o;
}

/* The state, indented, cut at STATE_SHOWN_MAX bytes (on a character). */
static json_t *state_json(const json_t *state)
{
	json_t *o = json_object();
	char *text = json_dumps(state, JSON_INDENT(2) | JSON_ENCODE_ANY);
	size_t len = text != NULL ? strlen(text) : 0, shown = len;

	if (shown > STATE_SHOWN_MAX) {
		shown = STATE_SHOWN_MAX;
		while (shown > 0 && ((unsigned char)text[shown] & 0xC0) == 0x80)
			shown--;
	}
	json_object_set_new(o, "text", text != NULL ? json_stringn(text, shown)
	                                            : json_null());
	json_object_set_new(o, "bytes", json_integer((json_int_t)len));
	json_object_set_new(o, "truncated", json_boolean(shown < len));
	free(text);
	return o;
}

/* What etcd holds for the task beyond the view: spec, fence, state. */
static void add_records(json_t *o, const char *id, const lr_task_records *rec)
{
	json_t *spec = NULL;
	lr_checkpoint_rec cp = { 0 };
	lr_done_rec d = { 0 };
	const json_t *state = NULL;
	bool have_cp = false, have_done = false;

	if (lr_spec_from_record(rec->task->value, rec->task->value_len, id, &spec,
	                        NULL) == 0) {
		json_object_set_new(o, "spec", spec_json(spec));
		state = lr_spec_state(spec);
	}
	if (rec->checkpoint != NULL &&
	    lr_checkpoint_decode(rec->checkpoint->value, rec->checkpoint->value_len,
	                         &cp, NULL) == 0) {
		have_cp = true;
		json_object_set_new(o, "fence", json_integer(lr_checkpoint_fence(
		                        &cp, rec->checkpoint->mod_rev)));
		state = cp.state;
	}
	if (rec->done != NULL &&
	    lr_done_decode(rec->done->value, rec->done->value_len, &d, NULL) == 0) {
		have_done = true;
		if (d.error != NULL)
			json_object_set_new(o, "error", json_string(d.error));
		state = d.state;
	}
	if (state != NULL)
		json_object_set_new(o, "state", state_json(state));
	if (have_cp)
		lr_checkpoint_rec_clear(&cp);
	if (have_done)
		lr_done_rec_clear(&d);
	json_decref(spec);
}

/* What etcd holds for the task, for the detail, and the revisions of
 * the records it came from. */
static json_t *read_records(lr_web *w, const char *id, lr_fleet_revs *revs,
                            lr_err *err)
{
	lr_txn_result r;
	lr_task_records rec;
	json_t *o;

	if (lr_task_records_read(w->client, id, &r, &rec, err) != 0)
		return NULL;
	o = json_object();
	if (rec.task != NULL)
		add_records(o, id, &rec);
	*revs = (lr_fleet_revs){
		.task = rec.task != NULL ? rec.task->mod_rev : 0,
		.checkpoint = rec.checkpoint != NULL ? rec.checkpoint->mod_rev : 0,
		.done = rec.done != NULL ? rec.done->mod_rev : 0,
	};
	lr_txn_result_free(&r);
	return o;
}

static bool same_revs(const lr_fleet_revs *a, const lr_fleet_revs *b)
{
	return a->task == b->task && a->checkpoint == b->checkpoint && a->done == b->done;
}

static struct detail_entry *entry_of(web_details *d, const char *id)
{
	for (int i = 0; i < DETAIL_CACHE; i++)
		if (strcmp(d->e[i].id, id) == 0)
			return &d->e[i];
	return NULL;
}

/* The entry to read id into: its own, or the one asked for longest ago
 * that nobody reads; NULL when every one is being read. Under d->mu. */
static struct detail_entry *entry_for(web_details *d, const char *id)
{
	struct detail_entry *e = entry_of(d, id), *old = NULL;

	if (e != NULL)
		return e;
	for (int i = 0; i < DETAIL_CACHE; i++)
		if (!d->e[i].reading && (old == NULL || d->e[i].used < old->used))
			old = &d->e[i];
	if (old != NULL) {
		json_decref(old->records);
		old->records = NULL;
		snprintf(old->id, sizeof(old->id), "%s", id);
	}
	return old;
}

/* Wait for a read to end, until the monotonic time `until` (ms); false
 * once it has passed. Under d->mu. */
static bool wait_read(web_details *d, int64_t until)
{
	int64_t left = until - lr_mono_ms();
	struct timespec ts;

	if (left <= 0)
		return false;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	int64_t ns = ts.tv_nsec + left % 1000 * 1000000;
	ts.tv_sec += left / 1000 + ns / 1000000000;
	ts.tv_nsec = ns % 1000000000;
	pthread_cond_timedwait(&d->cond, &d->mu, &ts);
	return true;
}

/* The records of id for a view that has them at `revs`: kept ones, or
 * read now. A new reference; NULL with *status set (and err for 502). */
static json_t *records_for(lr_web *w, const char *id, const lr_fleet_revs *revs,
                           unsigned *status, lr_err *err)
{
	web_details *d = w->details;
	int64_t until = lr_mono_ms() + DETAIL_WAIT_MS;
	struct detail_entry *e;
	json_t *o = NULL;

	pthread_mutex_lock(&d->mu);
	for (;;) {
		e = entry_of(d, id);
		if (e != NULL && !e->reading && e->records != NULL &&
		    same_revs(&e->revs, revs)) {
			o = json_incref(e->records);
			e->used = ++d->clock;
			goto out;
		}
		/* One read per task at a time, DETAIL_READS in all. */
		bool can = (e == NULL || !e->reading) && d->reading < DETAIL_READS;
		if (can && (e = entry_for(d, id)) != NULL)
			break;
		if (!wait_read(d, until)) {
			*status = 503;
			goto out;
		}
	}
	e->reading = true;
	e->used = ++d->clock;
	d->reading++;
	pthread_mutex_unlock(&d->mu);
	lr_fleet_revs read_revs;
	json_t *rec = read_records(w, id, &read_revs, err);
	pthread_mutex_lock(&d->mu);
	e->reading = false;
	d->reading--;
	json_decref(e->records);
	e->records = rec != NULL ? json_incref(rec) : NULL;
	e->revs = read_revs;
	if (rec == NULL)
		e->id[0] = '\0';
	pthread_cond_broadcast(&d->cond);
	o = rec;
	if (rec == NULL)
		*status = 502;
out:
	pthread_mutex_unlock(&d->mu);
	return o;
}

static const lr_http_header_kv retry_later[] = {
	{ "Retry-After", "1" },
	{ NULL, NULL },
};

void web_task_detail(lr_web *w, lr_http_req *req, const char *id)
{
	lr_err err = { 0 };
	lr_fleet_revs revs;
	unsigned status = 0;
	json_t *o = lr_fleet_task_detail(w->fleet, id, &revs), *rec;

	if (o == NULL) {
		web_reply_message(req, 404, "no such task");
		return;
	}
	rec = records_for(w, id, &revs, &status, &err);
	if (rec == NULL) {
		static const char busy[] = "{\"message\":\"busy reading other tasks; "
		                           "try again in a second\"}";
		json_decref(o);
		if (status == 503)
			lr_http_reply(req, 503, "application/json", busy, sizeof(busy) - 1,
			              LR_HTTP_STATIC, retry_later);
		else
			web_reply_message(req, 502, err.msg);
		return;
	}
	json_object_update(o, rec);
	json_decref(rec);
	web_reply_json(req, 200, o);
}
