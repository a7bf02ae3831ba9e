/* fleet_sync.c - filling the fleet view from etcd: every key of the prefix
 * read in pages at one revision, then one watch from the next, read again
 * after a compaction; the runners' lease TTLs on request.
 * Threads: start/resync/refresh block their caller (one at a time); the
 * watch callback runs on the etcd client's stream thread. */
#include "web/fleet_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "client/walk.h"
#include "etcd/lease.h"

/* Keys per Range: directories whose values may be large (specs, states)
 * in small pages, the others in larger ones. */
static const struct {
	const char *kind;
	int64_t page;
} dirs[] = {
	{ LR_K_TASKS, 50 },  { LR_K_CLAIMS, 500 }, { LR_K_CHECKPOINTS, 50 },
	{ LR_K_DONE, 50 },   { LR_K_CANCEL, 500 }, { LR_K_RUNNERS, 500 },
	{ LR_K_LOCKS, 500 }, { LR_K_SLOTS, 500 },  { LR_K_WANTS, 500 },
};

/* Every watcher hears of an outage (there is one here): the page is told
 * when the publisher next runs. */
static void note_etcd(lr_fleet *f, const lr_watch_batch *b)
{
	bool down = b->kind == LR_WATCH_DOWN;

	pthread_mutex_lock(&f->mu);
	if (down && !f->etcd_down) {
		f->etcd_heard_ms = b->heard_ms;
		snprintf(f->etcd_why, sizeof(f->etcd_why), "%s: %s", b->endpoint, b->reason);
	}
	f->etcd_dirty = f->etcd_dirty || f->etcd_down != down;
	f->etcd_down = down;
	pthread_mutex_unlock(&f->mu);
}

static void on_watch(void *user, const lr_watch_batch *b)
{
	lr_fleet *f = user;

	switch (b->kind) {
	case LR_WATCH_EVENTS:
		for (size_t i = 0; i < b->n; i++)
			lr_fleet_apply(f, &b->events[i].kv,
			               b->events[i].type == LR_EV_DELETE, true);
		break;
	case LR_WATCH_COMPACTED:
	case LR_WATCH_CANCELLED:
		pthread_mutex_lock(&f->mu);
		f->resync = true;
		pthread_mutex_unlock(&f->mu);
		break;
	case LR_WATCH_DOWN:
	case LR_WATCH_UP:
		note_etcd(f, b);
		break;
	case LR_WATCH_CREATED:
	case LR_WATCH_PROGRESS:
		return;
	}
	lr_fleet_notify(f);
}

static int load_key(void *user, const lr_kv *kv, const char *id, lr_err *err)
{
	(void)id;
	(void)err;
	lr_fleet_apply(user, kv, false, false);
	return 0;
}

/* Every directory read at one revision (the first page's), and the watch
 * from the next one: nothing missed, nothing twice. */
static int load_and_watch(lr_fleet *f, lr_err *err)
{
	int64_t rev = 0;
	int rc = 0;

	for (size_t i = 0; rc == 0 && i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		lr_walk_opts o = { .kind = dirs[i].kind, .page = dirs[i].page,
			           .revision = &rev };
		rc = lr_walk(f->client, &o, load_key, f, err);
	}
	if (rc != 0)
		return lr_err_wrap(err, rc, "web");
	pthread_mutex_lock(&f->mu);
	if (rev > f->revision)
		f->revision = rev;
	f->resync = false;
	f->runners_dirty = true;
	pthread_mutex_unlock(&f->mu);
	rc = lr_watch_add(f->watch, lr_client_prefix(f->client), LR_KEY_PREFIX,
	                  rev + 1, on_watch, f, &f->watcher, err);
	if (rc != 0)
		return lr_err_wrap(err, rc, "web: watch %s", lr_client_prefix(f->client));
	return 0;
}

int lr_fleet_start(lr_fleet *f, lr_err *err)
{
	int rc = lr_watch_new(lr_client_etcd(f->client), &f->watch, err);

	if (rc != 0)
		return lr_err_wrap(err, rc, "web: watch");
	return load_and_watch(f, err);
}

void lr_fleet_stop(lr_fleet *f)
{
	if (f->watcher != NULL)
		lr_watcher_cancel(f->watcher);
	f->watcher = NULL;
	lr_watch_free(f->watch);
	f->watch = NULL;
}

bool lr_fleet_needs_resync(lr_fleet *f)
{
	pthread_mutex_lock(&f->mu);
	bool r = f->resync;
	pthread_mutex_unlock(&f->mu);
	return r;
}

int lr_fleet_resync(lr_fleet *f, lr_err *err)
{
	if (f->watcher != NULL)
		lr_watcher_cancel(f->watcher);
	f->watcher = NULL;
	lr_fleet_clear(f);
	int rc = load_and_watch(f, err);
	if (rc != 0) {
		pthread_mutex_lock(&f->mu);
		f->resync = true; /* try again later */
		pthread_mutex_unlock(&f->mu);
	}
	return rc;
}

bool lr_fleet_etcd_down(lr_fleet *f)
{
	pthread_mutex_lock(&f->mu);
	bool down = f->etcd_down;
	pthread_mutex_unlock(&f->mu);
	return down;
}

/* ---- lease TTLs ----------------------------------------------------------- */

struct ttl_ask {
	char name[sizeof(((lr_runner_info *)0)->name)];
	int64_t lease, left;
};

void lr_fleet_refresh_ttls(lr_fleet *f)
{
	struct ttl_ask *ask = NULL;
	size_t n;

	pthread_mutex_lock(&f->mu);
	n = f->n_runners;
	if (n > 0)
		ask = calloc(n, sizeof(*ask));
	for (size_t i = 0; ask != NULL && i < n; i++) {
		memcpy(ask[i].name, f->runners[i].info.name, sizeof(ask[i].name));
		ask[i].lease = f->runners[i].info.lease;
	}
	pthread_mutex_unlock(&f->mu);
	if (ask == NULL)
		return;
	/* Without the lock: etcd calls take their time. */
	for (size_t i = 0; i < n; i++) {
		int64_t granted = 0;
		ask[i].left = -1;
		if (ask[i].lease != 0)
			lr_lease_ttl(lr_client_etcd(f->client), ask[i].lease,
			             &ask[i].left, &granted, NULL);
	}
	pthread_mutex_lock(&f->mu);
	for (size_t i = 0; i < n; i++) {
		for (size_t j = 0; j < f->n_runners; j++) {
			lr_runner_info *in = &f->runners[j].info;
			if (strcmp(in->name, ask[i].name) != 0 || in->lease != ask[i].lease)
				continue;
			if (in->ttl_left != ask[i].left)
				f->runners_dirty = true;
			in->ttl_left = ask[i].left;
		}
	}
	pthread_mutex_unlock(&f->mu);
	free(ask);
}
