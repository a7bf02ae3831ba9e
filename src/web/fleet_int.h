/* fleet_int.h - what the parts of the fleet view share: one task, one
 * runner, the view itself. Everything here is guarded by lr_fleet.mu. */
#ifndef LR_WEB_FLEET_INT_H
#define LR_WEB_FLEET_INT_H

#include <pthread.h>

#include "base/clock.h"
#include "etcd/watch.h"
#include "locks/table.h"
#include "web/fleet.h"

/* The records of a task the view follows. */
enum fleet_kind { FK_TASK, FK_CLAIM, FK_CHECKPOINT, FK_DONE, FK_CANCEL, FK_COUNT };

/* Errors longer than this are cut in the view (the detail reads them
 * whole from etcd). */
#define FLEET_ERROR_MAX 1000
/* The last changes of a task kept for its history. */
#define FLEET_HISTORY 16

struct fleet_event {
	int64_t at_ms;    /* wall clock, when the view saw it */
	char what[120];
};

struct fleet_task {
	char *id;
	struct fleet_task *hnext;     /* hash chain */
	int64_t rev[FK_COUNT];        /* mod revision last applied per record
	                                 (of the put, or of the delete) */
	bool has[FK_COUNT];
	bool dirty;                   /* in f->dirty, not yet published */
	int64_t create_rev;           /* of tasks/<id> */
	/* From the spec: step names only (never env values or state). */
	int64_t steps, max_attempts;
	char **step_names;
	char *spec_error;             /* the spec does not validate */
	/* From the checkpoint. */
	int64_t next_step, attempt;
	char *last_runner;
	char cp_updated[LR_TIME_BUF];
	/* From the claim. */
	char *holder;
	char claimed_at[LR_TIME_BUF];
	/* From the done record. */
	lr_task_state final;
	int64_t done_attempts;
	char *error;
	char finished_at[LR_TIME_BUF];
	/* What the view saw happen, oldest first from hist_first. */
	struct fleet_event *hist;     /* FLEET_HISTORY entries, or NULL */
	int hist_n, hist_first;
};

struct fleet_runner {
	lr_runner_info info;          /* ttl_left -1 until asked */
	int64_t rev;                  /* mod revision of runners/<name> */
};

/* Task ids to tell the page about, each once (fleet_task.dirty). */
struct fleet_ids {
	char **v;
	size_t n, cap;
};

struct lr_fleet {
	lr_client *client;
	lr_fleet_changed_fn changed;
	void *user;
	pthread_mutex_t mu;
	/* Tasks by id: a chained hash table that doubles as it fills. */
	struct fleet_task **buckets;
	size_t n_buckets, n_tasks;
	struct fleet_runner *runners; /* by name */
	size_t n_runners, cap_runners;
	struct fleet_ids dirty;       /* changed tasks, not yet published */
	bool runners_dirty;
	lr_lock_table *locks;         /* locks/, slots/ and wants/ */
	bool locks_dirty;
	int64_t revision;             /* the latest revision applied */
	/* fleet_sync.c */
	lr_watch *watch;
	lr_watcher *watcher;
	bool resync;                  /* the watch died: read again */
	/* Whether etcd answers the watch. */
	bool etcd_down;
	bool etcd_dirty;              /* changed since the page was told */
	int64_t etcd_heard_ms;        /* wall clock: when it last answered */
	char etcd_why[400];           /* "ENDPOINTS: REASON" */
};

/* The task of id, or NULL (under f->mu). */
struct fleet_task *fleet_task_find(lr_fleet *f, const char *id);

#endif
