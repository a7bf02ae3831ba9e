/* runner.c - the runner's loop: one lease kept alive on one stream, the
 * name registered on it, the task set read once (keys only, paged) and then
 * kept current by watches, and dispatch of pending tasks to idle workers.
 *
 * Threads: lr_runner_run's thread runs the loop and every lifecycle
 * callback; it sleeps in poll() on an eventfd that the watch callbacks, the
 * keepalive and the workers write after queueing an event, with a timeout
 * only while a timer is due (grace period, lease re-acquisition). No
 * polling of etcd. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/runner_int.h"
#include "records/record.h"
#include "records/spec.h"

#define LR_PAGE 1000

/* ---- small shared services ---------------------------------------------- */

/* Whether the loop must wake for ev now; r->mu held. */
static bool urgent(const lr_runner *r, const struct lr_event *ev)
{
	if (ev->lazy)
		return false;
	/* A worker that finished takes a waiting job by itself: the loop
	 * need not refill the queue before it runs low. */
	if (ev->kind == LR_EV_REPORT && ev->report != LR_REP_CLAIMED &&
	    ev->report != LR_REP_COMMITTED && r->n_ready >= 2)
		return false;
	return true;
}

void lr_runner_post(lr_runner *r, struct lr_event *ev)
{
	if (ev == NULL)
		return;
	pthread_mutex_lock(&r->mu);
	bool wake = false;
	struct lr_event *tail = ev;
	for (;; tail = tail->next) {
		wake = wake || urgent(r, tail);
		if (tail->next == NULL)
			break;
	}
	if (r->ev_tail != NULL)
		r->ev_tail->next = ev;
	else
		r->ev_head = ev;
	r->ev_tail = tail;
	/* One wake-up per batch: a write per event cost a system call and
	 * often a context switch. Events that are not urgent (our own claims
	 * and results coming back through the watch) wait for the next one. */
	wake = wake && !r->wake_sent;
	if (wake)
		r->wake_sent = true;
	pthread_mutex_unlock(&r->mu);
	if (wake) {
		uint64_t one = 1;
		ssize_t n = write(r->wake_fd, &one, sizeof(one));
		(void)n;
	}
}

void lr_runner_vlog(lr_runner *r, lr_log_level level, const char *task,
                    const char *step, int64_t index, const char *fmt, va_list ap)
{
	if (level < r->log_level)
		return;
	char msg[8192];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	lr_log_record rec = { .level = level, .runner = r->name, .task = task,
	                      .step = step, .step_index = index, .msg = msg };
	pthread_mutex_lock(&r->log_mu);
	r->log(r->log_user, &rec);
	pthread_mutex_unlock(&r->log_mu);
}

void lr_runner_log(lr_runner *r, lr_log_level level, const char *task,
                   const char *step, int64_t index, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	lr_runner_vlog(r, level, task, step, index, fmt, ap);
	va_end(ap);
}

const struct lr_handler *lr_runner_handler(const lr_runner *r, const char *step)
{
	const struct lr_handler *dflt = NULL;
	for (const struct lr_handler *h = r->handlers; h != NULL; h = h->next) {
		if (h->name == NULL)
			dflt = h;
		else if (strcmp(h->name, step) == 0)
			return h;
	}
	return dflt;
}

int64_t lr_runner_deadline(lr_runner *r, int64_t lease)
{
	if (lease == 0 || lease != atomic_load(&r->lease))
		return 0;
	return lr_keepalive_deadline(r->ka, lease);
}

static void free_event(struct lr_event *ev)
{
	free(ev->value);
	free(ev->text);
	lr_prefetched_clear(ev->pre, ev->n_pre);
	free(ev->pre);
	free(ev);
}

/* ---- creation ------------------------------------------------------------- */

int lr_runner_new(lr_client *c, const lr_runner_opts *o, lr_runner **out, lr_err *err)
{
	lr_runner_opts dflt = {0};
	if (o == NULL)
		o = &dflt;
	char name[LR_NAME_MAX + 1];
	if (o->name != NULL) {
		snprintf(name, sizeof(name), "%s", o->name);
	} else {
		char host[128] = "localhost";
		gethostname(host, sizeof(host) - 1);
		host[sizeof(host) - 1] = '\0';
		snprintf(name, sizeof(name), "%s-%d", host, (int)getpid());
	}
	if (!lr_name_valid(name) || (o->name != NULL && strlen(o->name) > LR_NAME_MAX))
		return lr_err_set(err, LR_EINVAL,
		                  "runner name \"%s\": use 1 to 200 of A-Z a-z 0-9 . _ : -", name);
	if (o->concurrency < 0 || o->concurrency > 1024)
		return lr_err_set(err, LR_EINVAL, "concurrency %d: must be 1..1024", o->concurrency);
	if (o->ttl_s < 0)
		return lr_err_set(err, LR_EINVAL, "ttl %d: must be at least 1 second", o->ttl_s);
	lr_runner *r = calloc(1, sizeof(*r));
	if (r == NULL)
		return lr_err_set(err, LR_ENOMEM, "runner: out of memory");
	r->client = c;
	snprintf(r->name, sizeof(r->name), "%s", name);
	r->concurrency = o->concurrency > 0 ? o->concurrency : 1;
	r->ttl_s = o->ttl_s > 0 ? o->ttl_s : 10;
	r->grace_ms = o->grace_s < 0 ? 0 : (o->grace_s == 0 ? 10000 : (int64_t)o->grace_s * 1000);
	r->exit_when_idle = o->exit_when_idle != 0;
	r->log = o->log != NULL ? o->log : lr_log_stderr;
	r->log_user = o->log_user;
	r->log_level = o->log_level;
	pthread_mutex_init(&r->mu, NULL);
	pthread_cond_init(&r->work_cond, NULL);
	pthread_mutex_init(&r->log_mu, NULL);
	lr_rng_init(&r->rng, NULL);
	r->spec_avg = LR_SPEC_CACHE_ONE; /* unknown yet: a first prefetch of 16 */
	r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->wake_fd < 0 || lr_taskset_init(&r->set) != 0) {
		lr_runner_free(r);
		return lr_err_set(err, LR_ESYS, "runner: %s", strerror(errno));
	}
	*out = r;
	return 0;
}

void lr_runner_free(lr_runner *r)
{
	if (r == NULL)
		return;
	while (r->handlers != NULL) {
		struct lr_handler *h = r->handlers;
		r->handlers = h->next;
		free(h->name);
		free(h);
	}
	while (r->ev_head != NULL) {
		struct lr_event *ev = r->ev_head;
		r->ev_head = ev->next;
		free_event(ev);
	}
	lr_taskset_free(&r->set);
	if (r->wake_fd >= 0)
		close(r->wake_fd);
	pthread_mutex_destroy(&r->mu);
	pthread_cond_destroy(&r->work_cond);
	pthread_mutex_destroy(&r->log_mu);
	free(r);
}

int lr_runner_handle(lr_runner *r, const char *step_name, lr_step_fn fn, void *user)
{
	struct lr_handler *h = calloc(1, sizeof(*h));
	if (h == NULL)
		return LR_ENOMEM;
	if (step_name != NULL && (h->name = strdup(step_name)) == NULL) {
		free(h);
		return LR_ENOMEM;
	}
	h->fn = fn;
	h->user = user;
	h->next = r->handlers;
	r->handlers = h;
	return 0;
}

void lr_runner_get_stats_sum(lr_runner *const *rs, size_t n, lr_runner_stats *out)
{
	const lr_stats **ss = calloc(n > 0 ? n : 1, sizeof(*ss));
	if (ss == NULL) {
		memset(out, 0, sizeof(*out));
		return;
	}
	for (size_t i = 0; i < n; i++)
		ss[i] = &rs[i]->stats;
	lr_stats_snapshot(ss, n, out);
	free(ss);
}

void lr_runner_get_stats(const lr_runner *r, lr_runner_stats *out)
{
	const lr_stats *ss = &r->stats;
	lr_stats_snapshot(&ss, 1, out);
}

void lr_runner_set_callbacks(lr_runner *r, const lr_runner_callbacks *cb, void *user)
{
	r->cb = *cb;
	r->cb_user = user;
}

void lr_runner_stop(lr_runner *r)
{
	/* Only async-signal-safe calls: an atomic store and write(2). */
	atomic_store(&r->stop_requested, 1);
	uint64_t one = 1;
	ssize_t n = write(r->wake_fd, &one, sizeof(one));
	(void)n;
}

/* ---- lease and registration ------------------------------------------------ */

static void on_lease_lost(void *user, int64_t id, const char *why)
{
	lr_runner *r = user;
	struct lr_event *ev = calloc(1, sizeof(*ev));
	if (ev == NULL)
		return;
	ev->kind = LR_EV_LEASE_LOST;
	ev->lease = id;
	ev->text = strdup(why);
	lr_runner_post(r, ev);
}

/* Create runners/<name> on the lease, unless a live runner holds it.
 * old_lease: a lease of ours that may still hold the name (after a loss). */
static int register_name(lr_runner *r, int64_t lease, int64_t old_lease, lr_err *err)
{
	char key[LR_KEY_SIZE];
	lr_key(r->client, LR_K_RUNNERS, r->name, key);
	lr_runner_rec rec = { .pid = getpid(), .concurrency = r->concurrency,
	                      .ttl = r->granted_ttl };
	gethostname(rec.host, sizeof(rec.host) - 1);
	lr_rfc3339_now(rec.started_at);
	snprintf(rec.version, sizeof(rec.version), "%s", lr_version());
	char *val = lr_runner_encode(&rec);
	if (val == NULL)
		return lr_err_set(err, LR_ENOMEM, "register %s: out of memory", r->name);
	lr_txn *t = lr_txn_new();
	lr_txn_cmp(t, key, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_txn_put(t, LR_THEN, key, val, strlen(val), lease);
	lr_txn_get(t, LR_ELSE, key, 0);
	lr_txn_result res;
	int rc = lr_etcd_txn(lr_client_etcd(r->client), t, LR_CALL_RETRY, &res, err);
	lr_txn_free(t);
	free(val);
	if (rc != 0)
		return lr_err_wrap(err, rc, "register runner %s", r->name);
	if (!res.succeeded) {
		const lr_kv *kv = res.n_ops > 0 && res.ops[0].n > 0 ? &res.ops[0].kvs[0] : NULL;
		if (kv == NULL || kv->lease == lease) {
			rc = 0; /* ours: a retried create whose reply was lost */
		} else if (old_lease != 0 && kv->lease == old_lease) {
			rc = lr_err_set(err, LR_EUNAVAILABLE,
			                "runner %s: the name is still held by our previous lease",
			                r->name);
		} else {
			lr_runner_rec other;
			lr_err ignore;
			bool known = lr_runner_decode(kv->value, kv->value_len, &other, &ignore) == 0;
			rc = lr_err_set(err, LR_EINUSE,
			                "runner name %s is in use by a live runner (%s%s%lld) on %s",
			                r->name, known ? other.host : "unknown host",
			                known ? ", pid " : "", known ? (long long)other.pid : 0LL,
			                lr_etcd_endpoints(lr_client_etcd(r->client)));
		}
	}
	lr_txn_result_free(&res);
	return rc;
}

/* Take a lease, keep it alive and register the name on it. */
static int acquire_lease(lr_runner *r, int64_t old_lease, lr_err *err)
{
	lr_etcd *c = lr_client_etcd(r->client);
	int64_t id, granted, sent;
	int rc = lr_lease_grant(c, r->ttl_s, &id, &granted, &sent, err);
	if (rc != 0)
		return rc;
	r->granted_ttl = granted;
	rc = lr_keepalive_add(r->ka, id, granted, sent, on_lease_lost, r, err);
	if (rc == 0)
		rc = register_name(r, id, old_lease, err);
	if (rc != 0) {
		lr_keepalive_remove(r->ka, id);
		lr_lease_revoke(c, id, NULL);
		return rc;
	}
	atomic_store(&r->lease, id);
	lr_runner_log(r, LR_LOG_INFO, NULL, NULL, -1,
	              "registered with lease %llx (TTL %llds), concurrency %d",
	              (unsigned long long)id, (long long)granted, r->concurrency);
	return 0;
}

/* ---- the task set --------------------------------------------------------- */

typedef void (*page_fn)(lr_runner *r, const lr_kv *kv);

/* Range every key under prefix+kind, keys only, page by page, at one
 * revision (*rev: 0 = latest, set by the first page). */
static int each_key(lr_runner *r, const char *kind, int64_t *rev, page_fn fn, lr_err *err)
{
	char start[LR_KEY_SIZE + 2], end[LR_KEY_SIZE];
	lr_key(r->client, kind, "", start);
	size_t n = lr_prefix_end(start, end);
	end[n] = '\0';
	for (;;) {
		lr_range_opts o = { .key = start, .range_end = end, .flags = LR_RANGE_KEYS_ONLY,
		                    .limit = LR_PAGE, .revision = *rev };
		lr_range_result res;
		int rc = lr_kv_range(lr_client_etcd(r->client), &o, &res, err);
		if (rc != 0)
			return lr_err_wrap(err, rc, "read %s", kind);
		if (*rev == 0)
			*rev = res.revision;
		for (size_t i = 0; i < res.n; i++)
			fn(r, &res.kvs[i]);
		bool more = res.more && res.n > 0;
		size_t klen = more ? strlen(res.kvs[res.n - 1].key) : 0;
		if (more && klen + 2 <= sizeof(start)) {
			/* The next page starts just after the last key: key + "\x01"
			 * (ids hold no control characters, and a C string cannot
			 * end in the true successor, key + "\0"). */
			memcpy(start, res.kvs[res.n - 1].key, klen);
			start[klen] = '\x01';
			start[klen + 1] = '\0';
		}
		lr_range_result_free(&res);
		if (!more)
			return 0;
	}
}

static void page_task(lr_runner *r, const lr_kv *kv)
{
	const char *id = lr_key_id(r->client, LR_K_TASKS, kv->key);
	if (id != NULL)
		lr_taskset_add(&r->set, id, kv->create_rev, LR_E_PENDING);
}

static void page_claim(lr_runner *r, const lr_kv *kv)
{
	const char *id = lr_key_id(r->client, LR_K_CLAIMS, kv->key);
	lr_entry *e = id != NULL ? lr_taskset_find(&r->set, id) : NULL;
	if (e != NULL) {
		e->claim_present = true;
		e->claim_ev_rev = kv->mod_rev;
		e->fresh = false;
		if (e->state == LR_E_PENDING)
			lr_taskset_set_state(&r->set, e, LR_E_CLAIMED);
	}
}

static void page_done(lr_runner *r, const lr_kv *kv)
{
	const char *id = lr_key_id(r->client, LR_K_DONE, kv->key);
	lr_entry *e = id != NULL ? lr_taskset_find(&r->set, id) : NULL;
	if (e != NULL && e->state != LR_E_LOCAL)
		lr_taskset_remove(&r->set, e);
	else if (e != NULL)
		e->done_seen = true;
}

static void on_watch(void *user, const lr_watch_batch *b);

static void stop_watches(lr_runner *r)
{
	for (int d = 0; d < LR_DIR_COUNT; d++)
		if (r->watchers[d] != NULL) {
			lr_watcher_cancel(r->watchers[d]);
			r->watchers[d] = NULL;
		}
}

/* Read which tasks exist, are claimed and are done (keys only, at one
 * revision), then watch for changes from the next revision on. claims/ and
 * done/ are next to each other in key order and share one watcher, so that
 * a task's last txn (done put, claim delete) arrives as one batch. */
static int load_and_watch(lr_runner *r, lr_err *err)
{
	stop_watches(r);
	lr_taskset_clear_remote(&r->set);
	int64_t rev = 0;
	int rc = each_key(r, LR_K_TASKS, &rev, page_task, err);
	if (rc == 0)
		rc = each_key(r, LR_K_CLAIMS, &rev, page_claim, err);
	if (rc == 0)
		rc = each_key(r, LR_K_DONE, &rev, page_done, err);
	/* Each watcher: the keys from one directory through another. */
	static const struct { enum lr_dir dir; const char *first, *last; } watched[] = {
		{ LR_DIR_TASKS, LR_K_TASKS, LR_K_TASKS },
		{ LR_DIR_CLAIMS, LR_K_CLAIMS, LR_K_DONE },
		{ LR_DIR_CANCEL, LR_K_CANCEL, LR_K_CANCEL },
	};
	for (int d = 0; d < LR_DIR_COUNT; d++)
		r->wctx[d] = (struct lr_watch_ctx){ r, (enum lr_dir)d };
	for (size_t i = 0; rc == 0 && i < sizeof(watched) / sizeof(watched[0]); i++) {
		char key[LR_KEY_SIZE], last[LR_KEY_SIZE], end[LR_KEY_SIZE];
		enum lr_dir d = watched[i].dir;
		lr_key(r->client, watched[i].first, "", key);
		lr_key(r->client, watched[i].last, "", last);
		end[lr_prefix_end(last, end)] = '\0';
		rc = lr_watch_add_range(r->watch, key, end, 0, rev + 1, on_watch, &r->wctx[d],
		                        &r->watchers[d], err);
	}
	if (rc == 0)
		lr_runner_log(r, LR_LOG_INFO, NULL, NULL, -1,
		              "%zu tasks pending, %zu claimed, watching from revision %lld",
		              r->set.pending, r->set.claimed, (long long)rev + 1);
	return rc;
}

/* The directory of a watched key and the task id in it, or NULL. The
 * claims/ watcher also sees done/. */
static const char *event_id(const lr_runner *r, enum lr_dir watched, const char *key,
                            enum lr_dir *dir)
{
	static const char *kinds[LR_DIR_COUNT] = { LR_K_TASKS, LR_K_CLAIMS, LR_K_DONE,
	                                           LR_K_CANCEL };
	*dir = watched;
	const char *id = lr_key_id(r->client, kinds[watched], key);
	if (id == NULL && watched == LR_DIR_CLAIMS) {
		*dir = LR_DIR_DONE;
		id = lr_key_id(r->client, LR_K_DONE, key);
	}
	return id != NULL && strlen(id) < LR_ID_SIZE ? id : NULL;
}

/* Whether the event at i can only take work away, so that the loop need
 * not wake for it: a claim, a result, a task deleted, a cancel withdrawn,
 * and a claim deleted by the txn that wrote the task's result. */
static bool lazy_event(const lr_runner *r, const lr_watch_batch *b, size_t i,
                       enum lr_dir dir, const char *id)
{
	const lr_watch_event *we = &b->events[i];
	bool deleted = we->type == LR_EV_DELETE;
	if (r->exit_when_idle)
		return false; /* idleness is decided on these */
	switch (dir) {
	case LR_DIR_TASKS:
	case LR_DIR_CANCEL:
		return deleted;
	case LR_DIR_DONE:
		return true;
	case LR_DIR_CLAIMS:
		if (!deleted)
			return true;
		/* Events come in revision order: the txn's own are next to it. */
		size_t lo = i, hi = i + 1;
		while (lo > 0 && b->events[lo - 1].kv.mod_rev == we->kv.mod_rev)
			lo--;
		while (hi < b->n && b->events[hi].kv.mod_rev == we->kv.mod_rev)
			hi++;
		for (size_t j = lo; j < hi; j++) {
			const lr_watch_event *o = &b->events[j];
			enum lr_dir odir;
			const char *oid;
			if (o->type == LR_EV_PUT &&
			    (oid = event_id(r, LR_DIR_CLAIMS, o->kv.key, &odir)) != NULL &&
			    odir == LR_DIR_DONE && strcmp(oid, id) == 0)
				return true;
		}
		return false;
	case LR_DIR_COUNT:
		break;
	}
	return false;
}

/* Watch events, on the client's stream thread: copy what the loop needs. */
static void on_watch(void *user, const lr_watch_batch *b)
{
	struct lr_watch_ctx *ctx = user;
	lr_runner *r = ctx->r;
	if (b->kind == LR_WATCH_COMPACTED || b->kind == LR_WATCH_CANCELLED) {
		struct lr_event *ev = calloc(1, sizeof(*ev));
		if (ev != NULL) {
			ev->kind = LR_EV_RESYNC;
			ev->text = strdup(b->reason != NULL ? b->reason : "compacted");
			lr_runner_post(r, ev);
		}
		return;
	}
	/* The batch goes to the loop in one piece: a txn's events are applied
	 * together. */
	struct lr_event *head = NULL, **tail = &head;
	for (size_t i = 0; i < b->n; i++) {
		const lr_watch_event *we = &b->events[i];
		enum lr_dir dir;
		const char *id = event_id(r, ctx->dir, we->kv.key, &dir);
		if (id == NULL)
			continue;
		struct lr_event *ev = calloc(1, sizeof(*ev));
		if (ev == NULL)
			continue;
		ev->kind = LR_EV_WATCH;
		ev->dir = dir;
		ev->deleted = we->type == LR_EV_DELETE;
		ev->lazy = lazy_event(r, b, i, dir, id);
		snprintf(ev->id, sizeof(ev->id), "%s", id);
		ev->create_rev = we->kv.create_rev;
		ev->mod_rev = we->kv.mod_rev;
		ev->version = we->kv.version;
		ev->lease = we->kv.lease;
		if (dir == LR_DIR_TASKS && !ev->deleted)
			ev->len = we->kv.value_len;
		if (dir == LR_DIR_TASKS && !ev->deleted &&
		    we->kv.value_len <= LR_SPEC_CACHE_ONE) {
			ev->value = malloc(we->kv.value_len + 1);
			if (ev->value != NULL) {
				memcpy(ev->value, we->kv.value, we->kv.value_len);
				ev->len = we->kv.value_len;
			}
		}
		*tail = ev;
		tail = &ev->next;
	}
	lr_runner_post(r, head);
}

/* Stop the step of the worker running task id, if one does. Under r->mu, so
 * that a worker cannot move on to another task in between. */
static void signal_task(lr_runner *r, const char *id, enum lr_stop_reason why)
{
	pthread_mutex_lock(&r->mu);
	for (int i = 0; i < r->concurrency; i++)
		if (strcmp(r->workers[i].task, id) == 0)
			lr_worker_signal(&r->workers[i], why);
	pthread_mutex_unlock(&r->mu);
}

/* Spec sizes seen lately, to size prefetches. */
static void note_spec_size(lr_runner *r, size_t len)
{
	r->spec_avg = (r->spec_avg * 7 + len) / 8;
}

static void apply_watch(lr_runner *r, struct lr_event *ev)
{
	lr_entry *e = lr_taskset_find(&r->set, ev->id);
	switch (ev->dir) {
	case LR_DIR_TASKS:
		if (ev->deleted) {
			if (e != NULL && e->state != LR_E_LOCAL)
				lr_taskset_remove(&r->set, e);
			return;
		}
		if (e == NULL) {
			e = lr_taskset_add(&r->set, ev->id, ev->create_rev, LR_E_PENDING);
			if (e == NULL)
				return;
			e->fresh = ev->version == 1;
		} else if (e->heap_refs == 0) {
			e->create_rev = ev->create_rev;
		}
		note_spec_size(r, ev->len);
		if (ev->value != NULL)
			lr_taskset_cache_spec(&r->set, e, ev->value, ev->len);
		return;
	case LR_DIR_CLAIMS:
		if (e == NULL) {
			/* The claim's event came before the task's: note it. */
			if (ev->deleted)
				return;
			e = lr_taskset_add(&r->set, ev->id, ev->create_rev, LR_E_CLAIMED);
			if (e == NULL)
				return;
		}
		e->claim_present = !ev->deleted;
		e->claim_ev_rev = ev->mod_rev;
		if (!ev->deleted) {
			e->fresh = false;
			if (e->state == LR_E_PENDING)
				lr_taskset_set_state(&r->set, e, LR_E_CLAIMED);
		} else if (e->state == LR_E_CLAIMED && !e->done_seen) {
			/* Its holder let go or its lease expired: take over. */
			lr_taskset_set_state(&r->set, e, LR_E_PENDING);
		}
		return;
	case LR_DIR_DONE:
		if (ev->deleted || e == NULL)
			return;
		e->done_seen = true;
		if (e->state != LR_E_LOCAL)
			lr_taskset_remove(&r->set, e);
		return;
	case LR_DIR_CANCEL:
		if (!ev->deleted && e != NULL && e->state == LR_E_LOCAL)
			signal_task(r, ev->id, LR_STOP_CANCEL);
		return;
	case LR_DIR_COUNT:
		return;
	}
}

/* Specs a worker read for tasks about to be claimed: cache them, and mark
 * as fresh (one-round-trip claim) those that had no checkpoint and whose
 * claim we never saw. Either guess being out of date costs one retry of
 * the claim txn at most: it compares the checkpoint's revision. */
static void apply_prefetched(lr_runner *r, struct lr_event *ev)
{
	for (size_t i = 0; i < ev->n_pre; i++) {
		const lr_prefetched *p = &ev->pre[i];
		if (p->found)
			note_spec_size(r, p->spec_len);
		lr_entry *e = lr_taskset_find(&r->set, p->id);
		if (e == NULL || e->state == LR_E_LOCAL || p->spec == NULL ||
		    p->create_rev != e->create_rev)
			continue; /* gone, taken, too large, or another incarnation */
		lr_taskset_cache_spec(&r->set, e, p->spec, p->spec_len);
		if (e->spec != NULL && !p->has_ckpt && e->claim_ev_rev == 0)
			e->fresh = true;
	}
}

/* A worker let go of its task: put the entry where the watch says it is.
 * claim_rev > 0: the worker saw another runner's claim of that revision,
 * which counts as present until a newer claims/ event says otherwise. */
static void settle(lr_runner *r, const char *id, bool gone, int64_t claim_rev)
{
	lr_entry *e = lr_taskset_find(&r->set, id);
	if (e == NULL)
		return;
	if (gone || e->done_seen) {
		lr_taskset_remove(&r->set, e);
		return;
	}
	bool claimed = e->claim_present || (claim_rev > 0 && e->claim_ev_rev < claim_rev);
	lr_taskset_set_state(&r->set, e, claimed ? LR_E_CLAIMED : LR_E_PENDING);
}

static void apply_report(lr_runner *r, struct lr_event *ev)
{
	void *u = r->cb_user;
	switch (ev->report) {
	case LR_REP_CLAIMED:
		if (r->cb.claimed != NULL)
			r->cb.claimed(u, ev->id, ev->step, ev->attempt, ev->fence);
		return; /* still busy */
	case LR_REP_COMMITTED:
		if (r->cb.step_committed != NULL)
			r->cb.step_committed(u, ev->id, ev->step, ev->text);
		return;
	case LR_REP_FINISHED:
		settle(r, ev->id, true, 0);
		if (r->cb.task_done != NULL)
			r->cb.task_done(u, ev->id, ev->state, ev->text);
		break;
	case LR_REP_LET_GO:
		settle(r, ev->id, false, 0);
		break;
	case LR_REP_LOST:
		settle(r, ev->id, false, ev->fence);
		break;
	case LR_REP_GONE:
		settle(r, ev->id, true, 0);
		break;
	}
	r->busy--;
}

/* ---- dispatch ------------------------------------------------------------- */

/* The worker must read this job's spec: have it read those of the next
 * pending tasks too (each at most once), so that their claims are one
 * round trip. As many as fit in about LR_PREFETCH_BYTES. */
static void add_prefetch(lr_runner *r, struct lr_job *job)
{
	size_t avg = r->spec_avg > 1024 ? r->spec_avg : 1024;
	size_t max = LR_PREFETCH_BYTES / avg;
	if (max > LR_PREFETCH_MAX)
		max = LR_PREFETCH_MAX;
	if (max == 0 || avg > LR_SPEC_CACHE_ONE)
		return; /* too large to cache anyway */
	lr_entry *cand[LR_PREFETCH_MAX];
	size_t n = lr_taskset_oldest(&r->set, max, cand);
	if (n == 0 || (job->prefetch = calloc(n, sizeof(*job->prefetch))) == NULL)
		return;
	for (size_t i = 0; i < n; i++) {
		if (cand[i]->spec != NULL || cand[i]->fresh || cand[i]->prefetched)
			continue;
		cand[i]->prefetched = true;
		snprintf(job->prefetch[job->n_prefetch++], LR_ID_SIZE, "%s", cand[i]->id);
	}
}

/* Hand pending tasks out as jobs: one per idle worker, and a few ahead. */
static void dispatch(lr_runner *r)
{
	int64_t lease = atomic_load(&r->lease);
	int cap = r->concurrency + LR_READY_AHEAD(r->concurrency);
	while (lease != 0 && r->busy < cap && r->set.pending > 0) {
		size_t spread = (size_t)(cap - r->busy) + 3;
		lr_entry *e = lr_taskset_pick(&r->set, spread, &r->rng);
		if (e == NULL)
			return;
		lr_taskset_set_state(&r->set, e, LR_E_LOCAL);
		r->busy++;
		struct lr_job job = { .spec = e->spec, .spec_len = e->spec_len,
		                      .fresh = e->fresh, .create_rev = e->create_rev,
		                      .lease = lease };
		snprintf(job.id, sizeof(job.id), "%s", e->id);
		e->spec = NULL; /* handed over: the worker frees it */
		r->set.spec_bytes -= e->spec_len;
		e->spec_len = 0;
		e->fresh = false; /* whatever happens next, it may have a checkpoint */
		if (job.spec == NULL && !job.fresh)
			add_prefetch(r, &job);
		pthread_mutex_lock(&r->mu);
		r->ready[r->n_ready++] = job;
		pthread_cond_signal(&r->work_cond);
		pthread_mutex_unlock(&r->mu);
	}
}

/* Take back the jobs no worker took: their tasks are where the watch says
 * they are. r->mu held. */
static void take_back_ready(lr_runner *r)
{
	for (size_t i = 0; i < r->n_ready; i++) {
		settle(r, r->ready[i].id, false, 0);
		r->busy--;
		free(r->ready[i].spec);
		free(r->ready[i].prefetch);
	}
	r->n_ready = 0;
}

/* Stop every running step (why); no job waiting is started. */
static void signal_all(lr_runner *r, enum lr_stop_reason why)
{
	pthread_mutex_lock(&r->mu);
	for (int i = 0; i < r->concurrency; i++)
		if (r->workers[i].task[0] != '\0')
			lr_worker_signal(&r->workers[i], why);
	take_back_ready(r);
	pthread_mutex_unlock(&r->mu);
}

/* ---- workers ---------------------------------------------------------------- */

static int start_workers(lr_runner *r, lr_err *err)
{
	r->workers = calloc((size_t)r->concurrency, sizeof(*r->workers));
	r->ready = calloc((size_t)(r->concurrency + LR_READY_AHEAD(r->concurrency)),
	                  sizeof(*r->ready));
	if (r->workers == NULL || r->ready == NULL)
		return lr_err_set(err, LR_ENOMEM, "runner: out of memory");
	for (int i = 0; i < r->concurrency; i++) {
		struct lr_worker *w = &r->workers[i];
		w->r = r;
		w->slot = i;
		w->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		lr_rng_init(&w->rng, NULL);
		if (w->cancel_fd < 0 || pthread_create(&w->thread, NULL, lr_worker_main, w) != 0) {
			if (w->cancel_fd >= 0)
				close(w->cancel_fd);
			r->concurrency = i; /* only those started are joined */
			return lr_err_set(err, LR_ESYS, "runner: cannot start worker %d", i);
		}
	}
	return 0;
}

static void stop_workers(lr_runner *r)
{
	if (r->workers == NULL) {
		free(r->ready);
		r->ready = NULL;
		return;
	}
	pthread_mutex_lock(&r->mu);
	r->workers_exit = true;
	pthread_cond_broadcast(&r->work_cond);
	pthread_mutex_unlock(&r->mu);
	for (int i = 0; i < r->concurrency; i++) {
		pthread_join(r->workers[i].thread, NULL);
		close(r->workers[i].cancel_fd);
	}
	for (size_t i = 0; i < r->n_ready; i++) {
		free(r->ready[i].spec);
		free(r->ready[i].prefetch);
	}
	r->n_ready = 0;
	free(r->ready);
	r->ready = NULL;
	free(r->workers);
	r->workers = NULL;
}

/* ---- the loop --------------------------------------------------------------- */

struct loop {
	int64_t grace_end;      /* 0 until the stop request */
	bool shutdown_sent;
	int64_t old_lease;      /* lost, waiting for its tasks to be dropped */
	int64_t retry_at;       /* next lease acquisition try, 0 none */
	lr_backoff retry;
	bool resync;
};

static void lease_lost(lr_runner *r, struct loop *l, struct lr_event *ev)
{
	if (ev->lease != atomic_load(&r->lease))
		return;
	lr_runner_log(r, LR_LOG_WARN, NULL, NULL, -1,
	              "lease %llx lost (%s): stopping every step, committing nothing",
	              (unsigned long long)ev->lease, ev->text ? ev->text : "");
	atomic_store(&r->lease, 0);
	lr_stats_inc(&r->stats.lease_losses);
	l->old_lease = ev->lease;
	l->retry_at = lr_mono_ms();
	signal_all(r, LR_STOP_LEASE);
	if (r->cb.lease_lost != NULL)
		r->cb.lease_lost(r->cb_user, ev->text ? ev->text : "lease lost");
}

/* Once every task of the lost lease is dropped: a new lease. */
static void reacquire(lr_runner *r, struct loop *l)
{
	if (l->retry_at == 0 || r->busy > 0 || lr_mono_ms() < l->retry_at)
		return;
	lr_etcd *c = lr_client_etcd(r->client);
	/* Free our old claims and name at once instead of at expiry. */
	lr_lease_revoke(c, l->old_lease, NULL);
	lr_err e = {0};
	if (acquire_lease(r, l->old_lease, &e) != 0) {
		int64_t wait = lr_backoff_next(&l->retry, &r->rng);
		lr_runner_log(r, LR_LOG_WARN, NULL, NULL, -1, "%s; trying again in %lld ms",
		              e.msg, (long long)wait);
		l->retry_at = lr_mono_ms() + wait;
		return;
	}
	lr_backoff_reset(&l->retry);
	l->retry_at = 0;
	l->old_lease = 0;
	l->resync = true; /* what happened meanwhile is in the watch anyway */
}

static void handle_events(lr_runner *r, struct loop *l)
{
	uint64_t drain;
	ssize_t n = read(r->wake_fd, &drain, sizeof(drain));
	(void)n;
	pthread_mutex_lock(&r->mu);
	struct lr_event *ev = r->ev_head;
	r->ev_head = r->ev_tail = NULL;
	r->wake_sent = false;
	pthread_mutex_unlock(&r->mu);
	while (ev != NULL) {
		struct lr_event *next = ev->next;
		switch (ev->kind) {
		case LR_EV_WATCH:
			apply_watch(r, ev);
			break;
		case LR_EV_REPORT:
			apply_report(r, ev);
			break;
		case LR_EV_PREFETCHED:
			apply_prefetched(r, ev);
			break;
		case LR_EV_LEASE_LOST:
			lease_lost(r, l, ev);
			break;
		case LR_EV_RESYNC:
			lr_runner_log(r, LR_LOG_WARN, NULL, NULL, -1,
			              "watch ended (%s): reading the task list again",
			              ev->text ? ev->text : "");
			l->resync = true;
			break;
		}
		free_event(ev);
		ev = next;
	}
}

static int poll_timeout(const lr_runner *r, const struct loop *l)
{
	int64_t now = lr_mono_ms();
	int64_t next = INT64_MAX;
	if (l->grace_end != 0 && !l->shutdown_sent)
		next = l->grace_end;
	/* While workers still stop their steps, their reports wake the loop. */
	if (l->retry_at != 0 && r->busy == 0 && l->retry_at < next)
		next = l->retry_at;
	if (l->resync && next > now + 1000)
		next = now + 1000; /* a failed re-read is tried again */
	if (next == INT64_MAX)
		return -1;
	return next <= now ? 0 : (int)(next - now > 60000 ? 60000 : next - now);
}

static bool idle(const lr_runner *r)
{
	return r->set.pending == 0 && r->set.claimed == 0 && r->busy == 0;
}

static void run_loop(lr_runner *r)
{
	struct loop l = {0};
	lr_backoff_init(&l.retry, 500, 5000);
	for (;;) {
		if (atomic_load(&r->stop_requested) && l.grace_end == 0) {
			lr_runner_log(r, LR_LOG_INFO, NULL, NULL, -1,
			              "stopping: %d task(s) get %lld ms to finish their step",
			              r->busy, (long long)r->grace_ms);
			atomic_store(&r->draining, true);
			l.grace_end = lr_mono_ms() + r->grace_ms;
			pthread_mutex_lock(&r->mu);
			take_back_ready(r); /* not started: nothing to hand over */
			pthread_mutex_unlock(&r->mu);
		}
		if (l.grace_end != 0 && !l.shutdown_sent && lr_mono_ms() >= l.grace_end) {
			signal_all(r, LR_STOP_SHUTDOWN);
			l.shutdown_sent = true;
		}
		if (l.grace_end != 0 && r->busy == 0)
			return;
		reacquire(r, &l);
		if (l.resync && atomic_load(&r->lease) != 0) {
			lr_err e = {0};
			if (load_and_watch(r, &e) == 0)
				l.resync = false;
			else
				lr_runner_log(r, LR_LOG_WARN, NULL, NULL, -1, "%s", e.msg);
		}
		if (l.grace_end == 0 && !l.resync)
			dispatch(r);
		if (r->exit_when_idle && l.grace_end == 0 && !l.resync && idle(r)) {
			lr_runner_log(r, LR_LOG_INFO, NULL, NULL, -1,
			              "no task pending or claimed: exiting");
			return;
		}
		struct pollfd p = { .fd = r->wake_fd, .events = POLLIN };
		int rc = poll(&p, 1, poll_timeout(r, &l));
		if (rc > 0)
			handle_events(r, &l);
	}
}

int lr_runner_run(lr_runner *r, lr_err *err)
{
	lr_etcd *c = lr_client_etcd(r->client);
	int rc = lr_keepalive_new(c, &r->ka, err);
	if (rc == 0)
		rc = lr_watch_new(c, &r->watch, err);
	if (rc == 0)
		rc = acquire_lease(r, 0, err);
	if (rc == 0)
		rc = load_and_watch(r, err);
	if (rc == 0)
		rc = start_workers(r, err);
	if (rc == 0)
		run_loop(r);
	stop_workers(r);
	stop_watches(r);
	int64_t lease = atomic_exchange(&r->lease, 0);
	if (lease != 0) {
		/* Claims and the name go with the lease, at once. */
		lr_keepalive_remove(r->ka, lease);
		lr_err e = {0};
		if (lr_lease_revoke(c, lease, &e) != 0)
			lr_runner_log(r, LR_LOG_WARN, NULL, NULL, -1, "%s", e.msg);
	}
	lr_watch_free(r->watch);
	r->watch = NULL;
	lr_keepalive_free(r->ka);
	r->ka = NULL;
	if (rc == 0)
		lr_runner_log(r, LR_LOG_INFO, NULL, NULL, -1, "stopped");
	return rc;
}
