/* runner_int.h - the runner: its state and the services its parts share.
 *
 * The parts, each in its own file: runner.c (the handle: options,
 * handlers, callbacks, logging, statistics), loop.c (lr_runner_run: the
 * lease, dispatch, messages, shutdown), view.c (the task set kept current
 * from etcd: keys read at start, then watches), worker.c (one thread per
 * worker slot: claim, steps, commits), step.c (the context a step handler
 * gets). They are halves of one concept and share this header; the loop
 * and the workers talk only through the inbox (inbox.h) and the job queue
 * (jobq.h), never through each other's data.
 *
 * Threads and owners: options, handlers and callbacks are set while
 * lr_runner_run is not running (`running`, under config_mu, refuses them
 * otherwise) and read-only while it runs; the loop thread owns `set`, `busy`,
 * `rng`, `spec_avg`, the watchers and the lease life cycle; each worker
 * owns its struct lr_worker but its `stop`, which anyone may request;
 * `lease`, `stop_requested` and `draining` are atomics; statistics are
 * lock-free. */
#ifndef LR_ENGINE_RUNNER_INT_H
#define LR_ENGINE_RUNNER_INT_H

#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <jansson.h>

#include "base/backoff.h"
#include "base/stats.h"
#include "client/client.h"
#include "engine/batch.h"
#include "engine/claim.h"
#include "engine/inbox.h"
#include "engine/jobq.h"
#include "engine/stop.h"
#include "engine/taskset.h"
#include "etcd/lease.h"
#include "etcd/watch.h"
#include "fiber/fiber.h"
#include "locks/table.h"

/* Specs of pending tasks are read ahead in one txn each, of up to
 * LR_READ_AHEAD_MAX tasks, fewer when specs are large: about this many
 * bytes per read at most (loop.c add_prefetch). */
#define LR_PREFETCH_BYTES (1024 * 1024)

/* Jobs the loop hands out beyond its idle workers: a worker that finishes
 * a task takes the next one at once instead of waiting for the loop to
 * hear of it, and the task's end rides with that claim (worker.c
 * defer_end). One reply often ends many tasks at once, so up to 16 wait:
 * at concurrency 16, 17 instead of 3 made 0.28 etcd txns per task instead
 * of 0.30 and about a fifth more tasks/s (docs/performance.md). */
#define LR_READY_AHEAD(concurrency) (1 + ((concurrency) < 16 ? (concurrency) : 16))

/* Group commit (batch.h): requests in flight at once, txns in each, and
 * the txns that make a group: the workers that one reply woke go on in
 * one request up to this many txns; more take turns in requests of about
 * this size, two in flight (at concurrency 16 one group was 5 % faster
 * and took 17 % less CPU per task than two groups taking turns; at 64,
 * one group of all was 12 % slower, as 64 threads waking on two cores
 * left etcd idle: docs/performance.md). */
#define LR_BATCH_IN_FLIGHT 2
#define LR_BATCH_TXNS 64
#define LR_BATCH_GROUP_TXNS (LR_BATCH_TXNS / 2)

struct lr_worker {
	lr_runner *r;
	int slot;
	pthread_t thread;       /* without hosts */
	lr_stop stop;           /* the running step's stop request */
	/* While a handler's call runs: since when (monotonic ms) and which
	 * step; 0 outside. Read by the loop's warning of stuck handlers. */
	atomic_llong handler_since;
	atomic_llong handler_step;
	lr_rng rng;             /* worker thread only */
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
	/* Set before lr_runner_run; read-only while it runs. */
	lr_client *client;
	char name[LR_ID_SIZE];
	int concurrency;
	int threads;                        /* 0: a thread per worker; else
	                                       fibers on this many hosts */
	int ttl_s;
	int64_t grace_ms;
	bool exit_when_idle;
	lr_log_fn log;
	void *log_user;
	lr_log_level log_level;
	struct lr_handler *handlers;
	lr_runner_callbacks cb;
	void *cb_user;

	/* lr_runner_run is running: a second run, new handlers and
	 * callbacks are refused, and lr_runner_free aborts. Set and
	 * cleared under config_mu, which the configuration calls hold, so
	 * that none of them can slip in as a run starts. */
	pthread_mutex_t config_mu;
	atomic_bool running;

	pthread_mutex_t log_mu;             /* one record at a time */
	lr_inbox inbox;                     /* to the loop */
	lr_jobq jobs;                       /* from the loop to the workers */
	lr_batch *batch;                    /* the workers' txns, grouped
	                                       (while lr_runner_run runs) */
	lr_host **hosts;                    /* `threads` of them, if any */
	struct lr_worker *workers;          /* `concurrency` of them; NULL
	                                       outside lr_runner_run (under
	                                       workers_mu for renewals) */
	pthread_mutex_t workers_mu;
	atomic_int stop_requested;
	atomic_bool draining;               /* no new step: finish, release */
	atomic_llong lease;                 /* current lease, 0 while none */
	lr_stats stats;                     /* any thread (atomics) */
	/* r->ka may be read by a stats reader (runner_stats.c) while
	 * ka_open; lr_runner_run frees it only after lr_runner_ka_close. */
	atomic_bool ka_open;
	atomic_int ka_readers;

	/* The loop thread's. */
	int64_t granted_ttl;
	lr_keepalive *ka;
	lr_watch *watch;
	lr_watcher *watchers[LR_DIR_COUNT];
	struct lr_watch_ctx wctx[LR_DIR_COUNT];
	lr_taskset set;
	lr_lock_table *locks;   /* who holds and waits for locks and slots */
	char **blocked;         /* ids of tasks waiting for a change of it */
	size_t n_blocked, cap_blocked;
	uint64_t gate_changes;  /* changes of it so far (a task's gate_seq) */
	struct lr_sched_gate *sched; /* tasks waiting for a time or for tasks */
	int64_t view_rev;       /* the revision the task set was read at:
	                           watch events up to it are already in */
	size_t spec_avg;        /* running mean of spec sizes seen */
	size_t since_prefetch;  /* jobs handed out since the last look ahead */
	lr_rng rng;
	int busy;               /* jobs handed out, not reported back */
	/* A step this runner could not start (LR_REP_NOT_HERE): no claims
	 * until hold_off_until (monotonic ms), longer at each in a row. */
	int64_t hold_off_until, not_here_at;
	lr_backoff hold_off;
};

/* ---- runner.c: services for every part --------------------------------- */

/* Log with the runner's sink; task/step may be NULL, index -1. Any thread. */
void lr_runner_log(lr_runner *r, lr_log_level level, const char *task,
                   const char *step, int64_t index, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
void lr_runner_vlog(lr_runner *r, lr_log_level level, const char *task,
                    const char *step, int64_t index, const char *fmt, va_list ap)
    __attribute__((format(printf, 6, 0)));
/* The handler for a step name (or the default), NULL if none. */
const struct lr_handler *lr_runner_handler(const lr_runner *r, const char *step);
/* lr_runner_run starts: LR_EINVAL when it is running already; else it is
 * running from now on, until lr_runner_run_end. */
int lr_runner_run_begin(lr_runner *r, lr_err *err);
void lr_runner_run_end(lr_runner *r);
/* Monotonic ms by which everything done under `lease` must have stopped;
 * 0 when that lease is lost. Any thread. */
int64_t lr_runner_deadline(lr_runner *r, int64_t lease);

/* ---- runner_stats.c, for the loop ----------------------------------------- */

/* r->ka exists (after lr_keepalive_new) / is about to be freed: the
 * close waits for a stats reader that is looking at it. */
void lr_runner_ka_open(lr_runner *r);
void lr_runner_ka_close(lr_runner *r);

/* ---- view.c: the task set kept current from etcd (loop thread) ----------- */

/* Read which tasks exist, are claimed and are done (keys only, at one
 * revision), then watch for changes from the next revision on. */
int lr_view_load(lr_runner *r, lr_err *err);
/* Stop the watches (events already queued stay in the inbox). */
void lr_view_stop(lr_runner *r);
/* Apply one LR_MSG_WATCH or LR_MSG_PREFETCHED message to the task set. */
void lr_view_apply(lr_runner *r, const struct lr_msg *m);
/* A task the loop handed out is back (job for the tasks/<id> created at
 * task_rev): put it where the watch says it is. gone: that task is
 * finished or no longer exists. claim_rev > 0: a worker saw another
 * runner's claim of that revision. started: the worker had started its
 * step (for a claim of ours that it let go of, to be taken up again). */
void lr_view_settle(lr_runner *r, const char *id, int64_t task_rev, bool gone,
                    int64_t claim_rev, bool started);

/* ---- gate.c: locks and slots at the door (loop thread) -------------------- */

int lr_gate_init(lr_runner *r);
void lr_gate_free(lr_runner *r);
/* Read locks/ slots/ wants/ at *rev (0: the latest, stored back). */
int lr_gate_load(lr_runner *r, int64_t *rev, lr_err *err);
/* A watch event under locks/ slots/ wants/: any change lets every blocked
 * task be looked at again. */
void lr_gate_event(lr_runner *r, const struct lr_msg *m);
/* Whether task e may be handed out now; job->slots are the slots to take.
 * False: e is blocked until the next change. */
bool lr_gate_pass(lr_runner *r, lr_entry *e, struct lr_job *job);
/* e's claim found its locks or slots taken: wait for a change. */
void lr_gate_block(lr_runner *r, lr_entry *e);

/* ---- schedule.c: start times and dependencies (loop thread) ---------------- */

int lr_sched_init(lr_runner *r);
void lr_sched_free(lr_runner *r);
/* Forget who waits (before a re-read: dispatch registers them again). */
void lr_sched_reset(lr_runner *r);
/* Whether e's start time has come and every task of its "after" left the
 * set (finished or gone). */
bool lr_sched_ready(lr_runner *r, const lr_entry *e);
/* Whether e may be handed out now. False: e is blocked until its time or
 * until the task it waits for leaves the set. */
bool lr_sched_pass(lr_runner *r, lr_entry *e);
/* e's claimer said not yet: look again at until (unix ms), or when task
 * dep (until 0) leaves the set; in a second when the set does not have
 * dep, or has it finished (the claimer read before it ended). */
void lr_sched_defer(lr_runner *r, lr_entry *e, int64_t until, const char *dep);
/* Task id left the set: the tasks waiting for it are looked at again. */
void lr_sched_settled(lr_runner *r, const char *id);
/* Whether some task waits for another to finish (lr_sched_settled). */
bool lr_sched_waits_for_tasks(const lr_runner *r);
/* When the earliest start time comes (monotonic ms), INT64_MAX: none. */
int64_t lr_sched_next_ms(lr_runner *r);
/* Wake the tasks whose start time has come. */
void lr_sched_tick(lr_runner *r);

/* ---- worker.c: the worker threads ---------------------------------------- */

int lr_workers_start(lr_runner *r, lr_err *err);
/* Close the job queue and join every worker. */
void lr_workers_join(lr_runner *r);
/* Ask the worker running task id (NULL: every busy worker) to stop its
 * step. */
void lr_workers_signal(lr_runner *r, const char *id, enum lr_stop_reason why);
/* The watch saw task id's claim deleted at revision rev: the worker
 * running it under an older claim stops at once (lr_stop_claim_gone). */
void lr_workers_claim_gone(lr_runner *r, const char *id, int64_t rev);
/* Every worker's task held on `lease` may run until `deadline` now (a
 * renewal). Any thread (the etcd stream thread). */
void lr_workers_extend(lr_runner *r, int64_t lease, int64_t deadline);
/* The step handlers whose call is running, as "t-1 (step 2), t-7 (step 1)"
 * in out (cut short to fit); returns how many. */
int lr_workers_in_handlers(lr_runner *r, char *out, size_t size);

/* ---- step.c: the step context ---------------------------------------------- */

/* How an attempt that did not succeed ended (step_int.h). */
enum lr_attempt_end {
	LR_ATTEMPT_RAN,         /* it ran: its result counts */
	LR_ATTEMPT_INTERRUPTED, /* cut short by the lease deadline */
	LR_ATTEMPT_NOT_STARTED, /* this runner could not start it */
};

/* Run one attempt of step t->next_step through its handler. *state_out
 * gets the state to commit (LR_STEP_OK only), *error the handler's
 * message (malloc'd, may be NULL); *end how an attempt that did not
 * succeed ended. */
lr_step_result lr_step_run(struct lr_worker *w, const lr_claimant *who,
                           lr_claimed_task *t, const struct lr_handler *hd,
                           json_t **state_out, char **error, enum lr_attempt_end *end);

#endif
