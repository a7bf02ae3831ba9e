/* changes.c - "something changed" for a task or all tasks, as an eventfd
 * set by watchers of tasks/, claims/, checkpoints/, done/ and cancel/, and of
 * locks/ and slots/ for what pending tasks wait for; and whether etcd
 * answers them.
 * Threads: see changes.h; `dead` is an atomic shared with the watch, `mu`
 * guards the outage, set by the watch. */
#include "client/changes.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "base/error.h"
#include "etcd/watch.h"

static const char *const kinds[] = {
	LR_K_TASKS, LR_K_CLAIMS, LR_K_CHECKPOINTS, LR_K_DONE, LR_K_CANCEL,
	/* what pending tasks wait for: watched whole, whatever the id */
	LR_K_LOCKS, LR_K_SLOTS,
};
#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))
#define FIRST_WHOLE 5

struct lr_changes {
	lr_client *client;
	char *id;                /* NULL: every task */
	int fd;
	lr_watch *watch;
	lr_watcher *watchers[N_KINDS];
	atomic_bool dead;        /* a watcher was ended by etcd */
	pthread_mutex_t mu;
	bool down;               /* the watch's stream is down */
	int64_t heard_ms;
	char why[400];
};

/* Every watcher hears of an outage: the first tells. Under no lock. */
static void note_link(lr_changes *ch, const lr_watch_batch *b)
{
	pthread_mutex_lock(&ch->mu);
	if (b->kind == LR_WATCH_DOWN && !ch->down) {
		ch->heard_ms = b->heard_ms;
		snprintf(ch->why, sizeof(ch->why), "%s: %s", b->endpoint, b->reason);
	}
	ch->down = b->kind == LR_WATCH_DOWN;
	pthread_mutex_unlock(&ch->mu);
}

static void on_change(void *user, const lr_watch_batch *b)
{
	lr_changes *ch = user;
	uint64_t one = 1;

	if (b->kind == LR_WATCH_CREATED || b->kind == LR_WATCH_PROGRESS)
		return;
	if (b->kind == LR_WATCH_DOWN || b->kind == LR_WATCH_UP)
		note_link(ch, b);
	else if (b->kind != LR_WATCH_EVENTS)
		atomic_store(&ch->dead, true);
	/* An eventfd counter cannot fill up from this: ignore the result. */
	ssize_t n = write(ch->fd, &one, sizeof(one));
	(void)n;
}

static int add_watchers(lr_changes *ch, lr_err *err)
{
	char key[LR_KEY_SIZE];

	for (size_t i = 0; i < N_KINDS; i++) {
		if (ch->watchers[i] != NULL)
			continue;
		const char *id = i < FIRST_WHOLE ? ch->id : NULL;
		lr_key(ch->client, kinds[i], id != NULL ? id : "", key);
		int rc = lr_watch_add(ch->watch, key, id != NULL ? 0 : LR_KEY_PREFIX, 0,
		                      on_change, ch, &ch->watchers[i], err);
		if (rc != 0)
			return lr_err_wrap(err, rc, "watch %s", key);
	}
	return 0;
}

static void cancel_watchers(lr_changes *ch)
{
	for (size_t i = 0; i < N_KINDS; i++) {
		if (ch->watchers[i] != NULL)
			lr_watcher_cancel(ch->watchers[i]);
		ch->watchers[i] = NULL;
	}
}

int lr_changes_open(lr_client *c, const char *id, lr_changes **out, lr_err *err)
{
	lr_changes *ch = calloc(1, sizeof(*ch));
	int rc;

	*out = NULL;
	if (ch == NULL || (id != NULL && (ch->id = strdup(id)) == NULL)) {
		free(ch);
		return lr_err_set(err, LR_ENOMEM, "watch: out of memory");
	}
	ch->client = c;
	pthread_mutex_init(&ch->mu, NULL);
	ch->fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (ch->fd < 0) {
		lr_changes_close(ch);
		return lr_err_set(err, LR_ESYS, "watch: eventfd failed");
	}
	rc = lr_watch_new(lr_client_etcd(c), &ch->watch, err);
	if (rc == 0)
		rc = add_watchers(ch, err);
	if (rc != 0) {
		lr_changes_close(ch);
		return rc;
	}
	*out = ch;
	return 0;
}

int lr_changes_fd(const lr_changes *ch)
{
	return ch->fd;
}

void lr_changes_clear(lr_changes *ch)
{
	uint64_t n;

	if (read(ch->fd, &n, sizeof(n)) < 0)
		n = 0; /* nothing was pending */
	if (atomic_exchange(&ch->dead, false)) {
		/* Start the dead watchers again; one that fails now is
		 * retried at the next clear. */
		cancel_watchers(ch);
		if (add_watchers(ch, NULL) != 0)
			atomic_store(&ch->dead, true);
	}
}

bool lr_changes_down(lr_changes *ch, int64_t *heard_ms, char *why, size_t size)
{
	pthread_mutex_lock(&ch->mu);
	bool down = ch->down;
	if (down) {
		*heard_ms = ch->heard_ms;
		snprintf(why, size, "%s", ch->why);
	}
	pthread_mutex_unlock(&ch->mu);
	return down;
}

void lr_changes_close(lr_changes *ch)
{
	if (ch == NULL)
		return;
	cancel_watchers(ch);
	lr_watch_free(ch->watch);
	if (ch->fd >= 0)
		close(ch->fd);
	pthread_mutex_destroy(&ch->mu);
	free(ch->id);
	free(ch);
}
