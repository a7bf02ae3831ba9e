/* hold.c - locks and slots held by any process (leaserun.h, "holding locks
 * and slots"): a lease of its own kept alive, the request queued in
 * wants/, a wait driven by watch events on locks/, slots/ and wants/, and
 * the txn that takes everything at once (deleting first a key on no lease
 * in its way: no holder's). A request ahead of ours whose
 * task waits for another task holds us back only once that one finished:
 * its tasks/ and done/ keys are watched too. lr_hold_acquire runs on the
 * caller's thread; the keepalive and watch callbacks on the client's
 * stream threads, sharing the table under a mutex. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <jansson.h>

#include "base/backoff.h"
#include "base/clock.h"
#include "base/error.h"
#include "client/client.h"
#include "client/lock_keys.h"
#include "etcd/kv.h"
#include "etcd/lease.h"
#include "etcd/watch.h"
#include "locks/acquire.h"
#include "locks/hold.h"
#include "locks/table.h"
#include "records/lockset.h"
#include "records/spec.h"

#define HOLD_DEFAULT_TTL_S 10

struct lr_hold {
	lr_client *c;
	lr_lockset *set;
	json_t *slots_json, *locks_json;
	char id[LR_ID_SIZE];
	char holder[LR_HOLDER_SIZE];
	char wants[LR_LOCK_KEY_SIZE];
	int64_t lease, asked, fence;
	int slots[LR_LIMITS_MAX];
	lr_keepalive *ka;
	_Atomic int64_t deadline;
	int renewed_fd, lost_fd;
	bool leave_lease; /* lr_hold_leave_lease: release lets it expire */
	lr_log_fn log;    /* warnings while waiting, or NULL */
	void *log_user;
	const char *const *within; /* lr_hold_opts.within, while waiting */
	/* Once held: the request's key, whose deletion (the lease revoked)
	 * is a loss known at once, not at the next renewal. */
	lr_watch *own;
	/* While waiting: the table, kept by watch events. */
	pthread_mutex_t mu;
	lr_lock_table *table;
	bool reload;
	int wake_fd;
};

static void poke(int fd)
{
	uint64_t one = 1;
	ssize_t n = write(fd, &one, sizeof(one));
	(void)n;
}

static void drain(int fd)
{
	uint64_t v;
	ssize_t n = read(fd, &v, sizeof(v));
	(void)n;
}

static void on_lost(void *user, int64_t id, const char *why)
{
	(void)id;
	(void)why;
	lr_hold *h = user;
	atomic_store(&h->deadline, 0);
	poke(h->lost_fd);
}

static void on_renewed(void *user, int64_t id, int64_t deadline)
{
	(void)id;
	lr_hold *h = user;
	atomic_store(&h->deadline, deadline);
	poke(h->renewed_fd);
}

static void on_event(void *user, const lr_watch_batch *b)
{
	lr_hold *h = user;
	pthread_mutex_lock(&h->mu);
	if (b->kind == LR_WATCH_COMPACTED || b->kind == LR_WATCH_CANCELLED)
		h->reload = true;
	for (size_t i = 0; b->kind == LR_WATCH_EVENTS && i < b->n; i++) {
		const lr_watch_event *e = &b->events[i];
		if (e->type == LR_EV_PUT)
			lr_lock_table_put(h->table, &e->kv);
		else
			lr_lock_table_delete(h->table, e->kv.key, e->kv.mod_rev);
	}
	pthread_mutex_unlock(&h->mu);
	poke(h->wake_fd);
}

/* The hold's own request deleted: its lease was revoked (by hand, or by
 * etcd), and the locks may be another holder's already. */
static void on_own_event(void *user, const lr_watch_batch *b)
{
	lr_hold *h = user;
	for (size_t i = 0; b->kind == LR_WATCH_EVENTS && i < b->n; i++)
		if (b->events[i].type != LR_EV_PUT)
			on_lost(h, h->lease, "the hold's request was deleted");
}

/* Best effort: without the watch, the next renewal tells of a revoke. */
static void watch_own(lr_hold *h)
{
	lr_watcher *wr; /* freed with h->own */
	if (lr_watch_new(lr_client_etcd(h->c), &h->own, NULL) == 0 &&
	    lr_watch_add(h->own, h->wants, 0, h->fence + 1, on_own_event, h, &wr, NULL) != 0) {
		lr_watch_free(h->own);
		h->own = NULL;
	}
}

static void hold_free(lr_hold *h)
{
	if (h->own != NULL)
		lr_watch_free(h->own);
	if (h->ka != NULL)
		lr_keepalive_free(h->ka);
	if (h->lease != 0)
		lr_lease_revoke(lr_client_etcd(h->c), h->lease, NULL);
	lr_lock_table_free(h->table);
	pthread_mutex_destroy(&h->mu);
	for (int fd = 0, *fds[] = { &h->renewed_fd, &h->lost_fd, &h->wake_fd }; fd < 3; fd++)
		if (*fds[fd] >= 0)
			close(*fds[fd]);
	json_decref(h->slots_json);
	json_decref(h->locks_json);
	free(h->set);
	free(h);
}

/* "<host>-<pid>-<random>", in id characters. */
static void make_id(const char *name, char id[LR_ID_SIZE])
{
	char host[128] = "";
	if (name == NULL) {
		gethostname(host, sizeof(host) - 1);
		name = host;
	}
	lr_rng rng;
	lr_rng_init(&rng, NULL);
	int n = snprintf(id, LR_ID_SIZE, "%.100s-%ld-%06llx", name[0] ? name : "host",
	                 (long)getpid(), (unsigned long long)lr_rng_below(&rng, 1u << 24));
	for (int i = 0; i < n && i < LR_ID_SIZE; i++)
		if (!lr_id_char(id[i]))
			id[i] = '_';
}

/* A lease, kept alive, and the request (wants/) put on it. */
static int ask(lr_hold *h, const lr_hold_opts *o, const char *who, lr_err *err)
{
	lr_etcd *e = lr_client_etcd(h->c);
	int64_t ttl = o->ttl_s > 0 ? o->ttl_s : HOLD_DEFAULT_TTL_S, granted = 0, sent = 0;
	int rc = lr_lease_grant(e, ttl, &h->lease, &granted, &sent, err);
	if (rc == 0) {
		atomic_store(&h->deadline, sent + granted * 1000);
		rc = lr_keepalive_add(h->ka, h->lease, granted, sent, on_lost, on_renewed, h, err);
	}
	if (rc != 0)
		return rc;
	char *value = lr_wants_value(o->locks, o->limits);
	json_t *v = value != NULL ? json_loads(value, 0, NULL) : NULL;
	free(value);
	if (v == NULL)
		return lr_err_set(err, LR_ENOMEM, "out of memory");
	json_object_set_new(v, "host", json_string(who));
	value = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(v);
	if (value == NULL)
		return lr_err_set(err, LR_ENOMEM, "out of memory");
	lr_txn *t = lr_txn_new();
	if (t == NULL) {
		free(value);
		return lr_err_set(err, LR_ENOMEM, "out of memory");
	}
	lr_txn_cmp(t, h->wants, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_txn_put(t, LR_THEN, h->wants, value, strlen(value), h->lease);
	lr_txn_get(t, LR_ELSE, h->wants, LR_RANGE_KEYS_ONLY);
	free(value);
	lr_txn_result r;
	rc = lr_etcd_txn(e, t, LR_CALL_RETRY, &r, err);
	lr_txn_free(t);
	if (rc != 0)
		return rc;
	/* Our place in the queue; a retry finds the first try's request. */
	h->asked = r.revision;
	if (!r.succeeded && r.n_ops == 1 && r.ops[0].n == 1)
		h->asked = r.ops[0].kvs[0].create_rev;
	lr_txn_result_free(&r);
	return 0;
}

/* Give up a lease that was lost while nothing was held: revoked (deleting
 * the request, and whatever a take whose reply was lost put on it), or
 * left to expire when etcd does not answer. */
static void drop_lease(lr_hold *h)
{
	lr_keepalive_remove(h->ka, h->lease);
	lr_lease_revoke(lr_client_etcd(h->c), h->lease, NULL);
	h->lease = 0;
	drain(h->lost_fd);
}

/* The lease may expire before the request is put on it, when this process
 * is stopped (SIGSTOP, a starved machine) for longer than the TTL: nothing
 * is held yet, so another lease, a few times. */
static int start(lr_hold *h, const lr_hold_opts *o, const char *who, lr_err *err)
{
	int rc = 0;
	for (int tries = 1; rc == 0; tries++) {
		rc = ask(h, o, who, err);
		if (rc != LR_ELEASE || tries == 3)
			break;
		drop_lease(h);
		if (err != NULL)
			*err = (lr_err){0};
		rc = 0;
	}
	return rc;
}

static int note_dep(void *user, const char *id)
{
	return json_array_append_new(user, json_string(id));
}

/* Watch tasks/<id> and done/<id> of each dependency in deps (ids) from
 * rev: only the tasks that older requests in our way wait for, so that a
 * wait costs nothing more however many tasks finish meanwhile. They were
 * read after rev: the events in between only repeat what the read saw,
 * and the last one of each key is the key as it is. */
static int watch_deps(lr_hold *h, lr_watch *w, const json_t *deps, int64_t rev, lr_err *err)
{
	size_t i;
	json_t *id;
	int rc = 0;
	json_array_foreach(deps, i, id) {
		static const char *const kinds[] = { LR_K_TASKS, LR_K_DONE };
		for (size_t k = 0; rc == 0 && k < 2; k++) {
			char key[LR_KEY_SIZE];
			lr_key(h->c, kinds[k], json_string_value(id), key);
			lr_watcher *wr; /* freed with w */
			rc = lr_watch_add(w, key, 0, rev, on_event, h, &wr, err);
		}
		if (rc != 0)
			break;
	}
	return rc;
}

/* Read the table afresh, with whether the tasks that older conflicting
 * requests wait for have finished, and watch from there. The fresh table
 * is in place before the first watcher is added: its events may come at
 * once, on the stream's thread, and must land in it (the old watch, freed
 * first, sends nothing more). */
static int load_and_watch(lr_hold *h, lr_watch **w, lr_err *err)
{
	if (*w != NULL) {
		lr_watch_free(*w);
		*w = NULL;
	}
	lr_lock_table *fresh = lr_lock_table_new(h->c);
	if (fresh == NULL)
		return lr_err_set(err, LR_ENOMEM, "out of memory");
	lr_lock_table_within(fresh, h->within);
	int64_t rev = 0;
	int rc = lr_lock_table_load(fresh, h->c, &rev, NULL, err);
	if (rc == 0)
		rc = lr_lock_table_load_deps(fresh, h->c, h->set, h->asked, err);
	json_t *deps = json_array();
	if (rc == 0 && (deps == NULL || lr_lock_table_each_dep(fresh, note_dep, deps) != 0))
		rc = lr_err_set(err, LR_ENOMEM, "out of memory");
	pthread_mutex_lock(&h->mu);
	lr_lock_table_free(h->table);
	h->table = fresh;
	h->reload = false;
	pthread_mutex_unlock(&h->mu);
	if (rc == 0)
		rc = lr_watch_new(lr_client_etcd(h->c), w, err);
	static const char *const dirs[] = { LR_K_LOCKS, LR_K_SLOTS, LR_K_WANTS };
	for (size_t i = 0; rc == 0 && i < 3; i++) {
		char key[LR_KEY_SIZE];
		lr_key(h->c, dirs[i], "", key);
		lr_watcher *wr; /* freed with *w */
		rc = lr_watch_add(*w, key, LR_KEY_PREFIX, rev + 1, on_event, h, &wr, err);
	}
	if (rc == 0)
		rc = watch_deps(h, *w, deps, rev + 1, err);
	json_decref(deps);
	return rc;
}

/* A warning while waiting, to lr_hold_opts.log. */
static void warn(const lr_hold *h, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(const lr_hold *h, const char *fmt, ...)
{
	if (h->log == NULL)
		return;
	char msg[LR_LOCK_KEY_SIZE + sizeof(((lr_err *)0)->msg)];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	lr_log_record rec = { .level = LR_LOG_WARN, .step_index = -1, .msg = msg };
	h->log(h->log_user, &rec);
}

/* Keys on no lease in the way of a hold: sent as its other txns, and
 * logged. */
static int send_stray(void *user, const lr_txn *t, lr_txn_result *r, lr_err *err)
{
	const lr_hold *h = user;
	return lr_etcd_txn(lr_client_etcd(h->c), t, LR_CALL_RETRY, r, err);
}

static void stray_deleted(void *user, const char *key)
{
	warn(user, "deleted %s, in the way of the hold: it hung on no lease (no holder "
	     "writes one), so it would never have expired", key);
}

/* take_once: a key on no lease was in the way, and is gone: try again. */
#define TAKE_AGAIN 2

/* One try at the txn that takes everything. 1: taken; 0: someone came
 * first (wait for the next event); TAKE_AGAIN; negative: an error. */
static int take_once(lr_hold *h, const char *value, lr_err *err)
{
	lr_etcd *e = lr_client_etcd(h->c);
	lr_lock_writes w = { .c = h->c, .set = h->set, .slots = h->slots, .holder = h->holder,
	                     .value = value, .lease = h->lease };
	lr_txn *t = lr_txn_new();
	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "out of memory");
	/* Our request is still there: the lease lives, and it is our turn. */
	lr_txn_cmp(t, h->wants, 0, LR_CMP_LEASE, LR_CMP_EQ, h->lease);
	int depth;
	lr_locks_acquire(t, &w, &depth);
	lr_txn_result r;
	int rc = lr_etcd_txn(e, t, LR_CALL_RETRY, &r, err);
	lr_txn_free(t);
	if (rc != 0)
		return rc;
	bool lease_gone = !r.succeeded;
	bool taken = lr_locks_acquired(&r, depth);
	int64_t rev = r.revision;
	lr_stray_ops ops = { .send = send_stray, .deleted = stray_deleted, .user = h };
	bool found = false;
	if (!lease_gone && !taken)
		rc = lr_locks_clear_strays(&r, depth, &ops, &found, err);
	lr_txn_result_free(&r);
	if (rc != 0)
		return rc;
	if (lease_gone)
		return lr_err_set(err, LR_ELEASE, "hold %s: its lease %lld is gone", h->id,
		                  (long long)h->lease);
	if (taken) {
		h->fence = rev;
		return 1;
	}
	/* A retried txn whose first try applied finds our own keys: look. */
	char key[LR_LOCK_KEY_SIZE];
	if (h->set->n_nodes > 0)
		lr_lock_key(h->c, h->set->nodes[0].path, h->set->nodes[0].mode, h->holder, key);
	else
		lr_slot_key(h->c, h->set->limits[0].key, h->slots[0], key);
	lr_range_result got;
	if ((rc = lr_kv_get(e, key, &got, err)) != 0)
		return rc;
	if (got.n == 1 && got.kvs[0].lease == h->lease) {
		h->fence = got.kvs[0].create_rev;
		rc = 1;
	} else if (found) {
		rc = TAKE_AGAIN;
	}
	lr_range_result_free(&got);
	return rc;
}

/* Take everything if it is free, with a few tries more at once while
 * keys on no lease in the way are deleted: a limits/ key makes no event
 * that the wait would see. 1: taken; 0: wait for the next event. */
static int try_take(lr_hold *h, const char *value, lr_err *err)
{
	int rc = take_once(h, value, err);
	for (int tries = 1; rc == TAKE_AGAIN && tries < 4; tries++)
		rc = take_once(h, value, err);
	return rc == TAKE_AGAIN ? 0 : rc;
}

static int wait_and_take(lr_hold *h, const lr_hold_opts *o, const char *who, int64_t start,
                         lr_err *err)
{
	lr_watch *w = NULL;
	char *value = lr_lock_value(h->holder, NULL, who);
	/* A wait too long to add to the clock is as good as forever. */
	int64_t until = o->wait_ms >= 0 && o->wait_ms < INT64_MAX - start ? start + o->wait_ms
	                                                                  : INT64_MAX;
	int rc = value != NULL ? load_and_watch(h, &w, err)
	                       : lr_err_set(err, LR_ENOMEM, "out of memory");
	char why[600] = "";
	while (rc == 0) {
		pthread_mutex_lock(&h->mu);
		bool reload = h->reload;
		bool free_now = !reload && lr_lock_table_can_take(h->table, h->set, h->holder,
		                                                   h->asked, h->slots, NULL, NULL,
		                                                   why, sizeof(why));
		pthread_mutex_unlock(&h->mu);
		if (reload) {
			rc = load_and_watch(h, &w, err);
			continue;
		}
		if (free_now) {
			rc = try_take(h, value, err);
			if (rc == 1) {
				rc = 0;
				break;
			}
			if (rc != 0)
				break;
		}
		int64_t now = lr_mono_ms();
		if (now >= until) {
			rc = lr_err_set(err, LR_EBUSY, "waited %lld ms for the locks: %s",
			                (long long)o->wait_ms, why[0] ? why : "taken by another holder");
			break;
		}
		struct pollfd p[3] = { { h->wake_fd, POLLIN, 0 }, { h->lost_fd, POLLIN, 0 },
		                       { o->cancel_fd, POLLIN, 0 } };
		int64_t left = until - now;
		int n = poll(p, o->cancel_fd >= 0 ? 3 : 2, until == INT64_MAX ? -1
		                                    : left > 60000 ? 60000 : (int)left);
		if (n < 0 && errno != EINTR)
			rc = lr_err_set(err, LR_ESYS, "poll: %s", strerror(errno));
		else if (n > 0 && p[1].revents != 0)
			rc = lr_err_set(err, LR_ELEASE, "hold %s: its lease was lost while waiting",
			                h->id);
		else if (n > 0 && o->cancel_fd >= 0 && p[2].revents != 0)
			rc = lr_err_set(err, LR_ECANCELLED, "hold %s: cancelled while waiting", h->id);
		else if (n > 0)
			drain(h->wake_fd);
	}
	if (w != NULL)
		lr_watch_free(w);
	free(value);
	return rc;
}

/* etcd's longest lease (its MaxLeaseTTL). */
#define HOLD_MAX_TTL_S 9000000000LL

/* The numbers of o: each in its documented range, the fd open. */
static int check_numbers(const lr_hold_opts *o, lr_err *err)
{
	if (o->ttl_s < 0 || o->ttl_s > HOLD_MAX_TTL_S)
		return lr_err_set(err, LR_EINVAL, "hold: ttl_s %lld: must be 0 (10 s) to %lld "
		                  "seconds", (long long)o->ttl_s, HOLD_MAX_TTL_S);
	if (o->wait_ms < -1)
		return lr_err_set(err, LR_EINVAL, "hold: wait_ms %lld: must be -1 (for ever), 0 "
		                  "(try once) or more", (long long)o->wait_ms);
	/* A closed one would look like a cancel at the first wait. */
	if (o->cancel_fd < -1 || (o->cancel_fd >= 0 && fcntl(o->cancel_fd, F_GETFD) == -1))
		return lr_err_set(err, LR_EINVAL, "hold: cancel_fd %d: not an open descriptor "
		                  "(-1: none)", o->cancel_fd);
	return 0;
}

/* The request of o, parsed: *set is new, never NULL on success. */
static int parse_request(const lr_hold_opts *o, lr_lockset **set, lr_err *err)
{
	*set = NULL;
	int rc = check_numbers(o, err);
	if (rc != 0)
		return rc;
	rc = lr_lockset_parse(o->locks, o->limits, set, err);
	if (rc == 0 && *set == NULL)
		rc = lr_err_set(err, LR_EINVAL, "hold: no locks and no limits to hold");
	return rc;
}

int lr_hold_check(const lr_hold_opts *o, lr_err *err)
{
	if (LR_NULL_ARG(err, o))
		return LR_EINVAL;
	lr_lockset *set = NULL;
	int rc = parse_request(o, &set, err);
	free(set);
	return rc;
}

/* Requests a hold makes at most, each on a new lease after the one
 * before was lost while waiting. */
#define ASK_MAX 4

int lr_hold_acquire(lr_client *c, const lr_hold_opts *o, lr_hold **out, lr_err *err)
{
	if (LR_NULL_ARG(err, c) || LR_NULL_ARG(err, o) || LR_NULL_ARG(err, out))
		return LR_EINVAL;
	/* The wait reads the reason of a lost lease back, to say it. */
	lr_err local = {0};
	if (err == NULL)
		err = &local;
	*out = NULL;
	lr_lockset *set = NULL;
	int rc = parse_request(o, &set, err);
	if (rc != 0)
		return rc;
	lr_hold *h = calloc(1, sizeof(*h));
	if (h == NULL) {
		free(set);
		return lr_err_set(err, LR_ENOMEM, "hold: out of memory");
	}
	h->c = c;
	h->set = set;
	h->log = o->log;
	h->log_user = o->log_user;
	h->within = o->within;
	h->renewed_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	h->lost_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	h->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	pthread_mutex_init(&h->mu, NULL);
	char host[128] = "";
	gethostname(host, sizeof(host) - 1);
	const char *who = o->name != NULL ? o->name : host;
	make_id(o->name, h->id);
	snprintf(h->holder, sizeof(h->holder), "run:%s", h->id);
	lr_wants_key(c, h->holder, h->wants);
	if (h->renewed_fd < 0 || h->lost_fd < 0 || h->wake_fd < 0)
		rc = lr_err_set(err, LR_ESYS, "eventfd: %s", strerror(errno));
	if (rc == 0)
		rc = lr_keepalive_new(lr_client_etcd(c), &h->ka, err);
	int64_t began = lr_mono_ms();
	for (int asked = 1; rc == 0; asked++) {
		rc = start(h, o, who, err);
		if (rc == 0)
			rc = wait_and_take(h, o, who, began, err);
		if (rc != LR_ELEASE || asked == ASK_MAX)
			break;
		/* The lease was lost while waiting (etcd did not renew it in
		 * time, or this process was stopped): nothing is held, so ask
		 * again on a new lease, behind the requests made meanwhile. */
		warn(h, "%s: asking again on a new lease, behind the requests made meanwhile",
		     err->msg);
		drop_lease(h);
		*err = (lr_err){0};
		rc = 0;
	}
	if (rc == 0) {
		h->locks_json = o->locks != NULL ? json_deep_copy(o->locks) : json_object();
		h->slots_json = json_object();
		for (size_t i = 0; i < set->n_limits; i++)
			json_object_set_new(h->slots_json, set->limits[i].key,
			                    json_integer(h->slots[i]));
		lr_lock_table_free(h->table);
		h->table = NULL;
		watch_own(h);
		*out = h;
		return 0;
	}
	hold_free(h);
	return lr_err_wrap(err, rc, "hold");
}

int64_t lr_hold_fence(const lr_hold *h) { return h->fence; }
const char *lr_hold_id(const lr_hold *h) { return h->id; }
int64_t lr_hold_lease(const lr_hold *h) { return h->lease; }
const void *lr_hold_slots(const lr_hold *h) { return h->slots_json; }
const void *lr_hold_locks(const lr_hold *h) { return h->locks_json; }
int64_t lr_hold_deadline_ms(const lr_hold *h) { return atomic_load(&((lr_hold *)h)->deadline); }
int lr_hold_renewed_fd(const lr_hold *h) { return h->renewed_fd; }
int lr_hold_lost_fd(const lr_hold *h) { return h->lost_fd; }

void lr_hold_leave_lease(lr_hold *h) { h->leave_lease = true; }

int lr_hold_release(lr_hold *h, lr_err *err)
{
	if (h == NULL)
		return 0;
	if (h->own != NULL)
		lr_watch_free(h->own); /* the revoke below deletes the request */
	h->own = NULL;
	lr_keepalive_free(h->ka);
	h->ka = NULL;
	if (h->leave_lease) {
		h->lease = 0; /* not revoked by hold_free either */
		hold_free(h);
		return 0;
	}
	/* Every key of the hold is on its lease, and nothing else is: revoking
	 * it deletes them all in one revision, and can never touch a key that
	 * a later holder put on a lease of its own. */
	int rc = lr_lease_revoke(lr_client_etcd(h->c), h->lease, err);
	if (rc != 0)
		lr_err_wrap(err, rc, "release hold %s (lease %lld: it expires on its own)", h->id,
		            (long long)h->lease);
	else
		h->lease = 0;
	hold_free(h);
	return rc;
}
