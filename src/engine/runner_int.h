/* runner_int.h - what the runner's loop (runner.c), its workers (worker.c)
 * and the step context (step.c) share.
 *
 * Threads: the loop thread (inside lr_runner_run) owns the task set and
 * dispatches into a queue of ready jobs; each worker thread takes a job
 * from it and runs one held task at a time; the etcd client's stream
 * thread delivers watch events and lease loss, which are queued for the
 * loop. r->mu guards the event queue, the ready jobs and which task each
 * worker runs; it is never held across an etcd call or a callback. */
#ifndef LR_RUNNER_INT_H
#define LR_RUNNER_INT_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <jansson.h>

#include "base/backoff.h"
#include "base/stats.h"
#include "client/client.h"
#include "engine/claim.h"
#include "engine/taskset.h"
#include "etcd/lease.h"
#include "etcd/watch.h"

enum lr_stop_reason {
	LR_STOP_NONE = 0,
	LR_STOP_CANCEL,   /* cancel/<id> was put: end the task cancelled */
	LR_STOP_LEASE,    /* our lease is gone: drop the task, write nothing */
	LR_STOP_SHUTDOWN, /* the grace period is over: release the claim */
};

/* What a worker tells the loop. */
enum lr_report {
	LR_REP_CLAIMED,   /* claim won: running */
	LR_REP_COMMITTED, /* a step was committed */
	LR_REP_FINISHED,  /* done/<id> written (by us) */
	LR_REP_LET_GO,    /* not ours any more (dropped, released, error) */
	LR_REP_LOST,      /* another runner's claim (revision in `fence`) won */
	LR_REP_GONE,      /* the task no longer exists */
};

struct lr_job {
	char id[LR_ID_SIZE];
	char *spec;        /* spec text from the watch (owned), or NULL */
	size_t spec_len;
	bool fresh;
	int64_t create_rev; /* of tasks/<id>, as the loop knows it */
	int64_t lease;
	/* Tasks whose specs the worker reads along with its own, for the
	 * loop's cache (owned; see LR_PREFETCH_MAX). */
	char (*prefetch)[LR_ID_SIZE];
	size_t n_prefetch;
};

/* A worker that must read its task's spec reads the specs of up to this
 * many of the next pending tasks in the same txn (fewer when specs are
 * large: about LR_PREFETCH_BYTES per read at most). */
#define LR_PREFETCH_MAX 32
#define LR_PREFETCH_BYTES (1024 * 1024)

struct lr_worker {
	lr_runner *r;
	int slot;
	pthread_t thread;
	char task[LR_ID_SIZE];  /* the task it runs, "" between jobs; under r->mu */
	atomic_int stop;        /* enum lr_stop_reason */
	int cancel_fd;          /* eventfd: readable once stop is set */
	lr_rng rng;             /* worker thread only */
};

/* Jobs the loop handed out beyond its idle workers: a worker that finishes
 * a task takes the next one at once instead of waiting for the loop to
 * hear of it. A job not yet taken holds no claim; another runner may still
 * win the task, which costs the claim txn that finds out. */
#define LR_READY_AHEAD(concurrency) (1 + (concurrency) / 8)

enum lr_event_kind {
	LR_EV_WATCH,      /* a change under one of the watched directories */
	LR_EV_RESYNC,     /* a watch was compacted or cancelled: re-read */
	LR_EV_LEASE_LOST,
	LR_EV_REPORT,     /* from a worker */
	LR_EV_PREFETCHED, /* specs a worker read for the cache */
};

enum lr_dir { LR_DIR_TASKS, LR_DIR_CLAIMS, LR_DIR_DONE, LR_DIR_CANCEL, LR_DIR_COUNT };

struct lr_event {
	enum lr_event_kind kind;
	enum lr_dir dir;
	bool deleted;
	char id[LR_ID_SIZE];
	int64_t create_rev, mod_rev, version, lease;
	char *value;            /* tasks/ puts only, when small (owned) */
	size_t len;
	int slot;               /* LR_EV_REPORT */
	enum lr_report report;
	lr_task_state state;
	int64_t step, attempt, fence;
	char *text;             /* step name, error or reason (owned) */
	lr_prefetched *pre;     /* LR_EV_PREFETCHED (owned) */
	size_t n_pre;
	bool lazy;              /* can only take work away: no need to wake */
	struct lr_event *next;
};

struct lr_handler {
	char *name;             /* NULL: the default handler */
	lr_step_fn fn;
	void *user;
	struct lr_handler *next;
};

struct lr_watch_ctx {
	lr_runner *r;
	enum lr_dir dir;
};

struct lr_runner {
	lr_client *client;
	char name[LR_NAME_MAX + 1];
	int concurrency;
	int ttl_s;
	int64_t grace_ms;
	bool exit_when_idle;
	lr_log_fn log;
	void *log_user;
	lr_log_level log_level;
	pthread_mutex_t log_mu;
	struct lr_handler *handlers;
	lr_runner_callbacks cb;
	void *cb_user;

	pthread_mutex_t mu;
	struct lr_event *ev_head, *ev_tail; /* under mu */
	bool wake_sent;                     /* under mu: wake_fd written */
	bool workers_exit;                  /* under mu */
	struct lr_job *ready;               /* under mu: jobs no worker took yet */
	size_t n_ready;                     /* under mu */
	pthread_cond_t work_cond;           /* a job is ready, or workers_exit */
	int wake_fd;                        /* eventfd waking the loop */
	atomic_int stop_requested;
	atomic_bool draining;               /* no new step: finish, release */
	atomic_llong lease;                 /* current lease, 0 while none */
	int64_t granted_ttl;

	lr_keepalive *ka;
	lr_watch *watch;
	lr_watcher *watchers[LR_DIR_COUNT];
	struct lr_watch_ctx wctx[LR_DIR_COUNT];
	lr_taskset set;
	size_t spec_avg;        /* running mean of spec sizes seen; loop only */
	lr_rng rng;
	struct lr_worker *workers;
	int busy;               /* jobs handed out, not reported back; loop only */
	lr_stats stats;                     /* any thread (atomics) */
};

/* ---- runner.c, for the workers ------------------------------------------- */

/* Queue events for the loop (ev and those chained by `next`; takes
 * ownership), and wake the loop unless all are lazy: a lazy event waits for
 * the next wake-up, which comes before the loop dispatches again. Any
 * thread. */
void lr_runner_post(lr_runner *r, struct lr_event *ev);
/* Log with the runner's sink; task/step may be NULL, index -1. Any thread. */
void lr_runner_log(lr_runner *r, lr_log_level level, const char *task,
                   const char *step, int64_t index, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
void lr_runner_vlog(lr_runner *r, lr_log_level level, const char *task,
                    const char *step, int64_t index, const char *fmt, va_list ap)
    __attribute__((format(printf, 6, 0)));
/* The handler for a step name (or the default), NULL if none. */
const struct lr_handler *lr_runner_handler(const lr_runner *r, const char *step);
/* Monotonic ms by which everything done under `lease` must have stopped;
 * 0 when that lease is lost. */
int64_t lr_runner_deadline(lr_runner *r, int64_t lease);

/* ---- worker.c ---------------------------------------------------------------- */

void *lr_worker_main(void *arg);
/* Why the worker must stop now (LR_STOP_NONE: carry on); a passed
 * deadline of `lease` counts as a lost lease. */
enum lr_stop_reason lr_worker_stop_reason(struct lr_worker *w, int64_t lease);
/* Wait ms unless stopped first; the reason to stop, if any. */
enum lr_stop_reason lr_worker_wait(struct lr_worker *w, int64_t lease, int64_t ms);
/* Ask a worker to stop its step (sets stop once, wakes cancel_fd). */
void lr_worker_signal(struct lr_worker *w, enum lr_stop_reason why);

/* ---- step.c ------------------------------------------------------------------ */

struct lr_step {
	lr_runner *r;
	struct lr_worker *w;
	const lr_holder *who;
	lr_held *h;
	const json_t *step_spec;
	const char *name;
	json_t *state;          /* the handler's working state (owned) */
	char error[2048];
};

/* Run one attempt of step h->next_step through its handler. *error gets the
 * handler's message (malloc'd, may be NULL). */
lr_step_result lr_step_run(struct lr_worker *w, const lr_holder *who, lr_held *h,
                           const struct lr_handler *hd, json_t **state_out,
                           char **error);

#endif
