/* worker.c - one worker: claims the task the loop handed it, runs its steps
 * through their handlers, commits each (fenced), retries failed attempts
 * with backoff, and ends, releases or drops the task.
 *
 * A worker never walks away from a claim it may still hold: a fenced write
 * whose outcome is open is sent again (its compares tell whether the first
 * applied) until it settles or the lease deadline passes, and a task it
 * still lets go of on a live lease is taken up again by this runner
 * (view.c). `attempt` counts starts of the step and nothing else: every
 * release gives back a start that was counted but did not happen.
 *
 * When the next job already waits, a task's end is put off and sent with
 * that job's claim (struct deferred): one request and one wait for both.
 *
 * Runs on its own thread; takes jobs from the job queue, talks to the loop
 * only through the inbox, and counts what it does in the runner's
 * statistics (atomics). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/fdtable.h"
#include "engine/runner_int.h"
#include "fiber/fiber.h"
#include "records/spec.h"

struct deferred;

/* One task in the hands of a worker. */
struct hold {
	struct lr_worker *w;
	lr_runner *r;
	const struct lr_job *job;
	lr_claimant who;
	lr_claimed_task t;       /* filled by the claim */
	lr_backoff write_retry;  /* between tries of one write */
	struct deferred *defer;  /* where its end may be put off; NULL: not */
	bool deferred;           /* its end was put off: d holds the rest */
	int restarts_given;      /* interrupted attempts run again uncounted */
};

/* The end of a task put off so that it rides with the claim of the
 * worker's next task: one request for both, one wait fewer per task. The
 * task's hold and job move here; nothing else is sent for it meanwhile. */
struct deferred {
	bool pending;
	struct lr_job job;
	struct hold h;
	lr_task_state st;
	char *error;
	json_t *state;
	int64_t t0;
	lr_rider rider;          /* the end's txn, once it rides (ride) */
	lr_txn *txn;
	char *val;               /* the done record it puts */
};

/* Count what a report says in the runner's statistics. */
static void count(lr_stats *s, enum lr_report rep, lr_task_state st)
{
	switch (rep) {
	case LR_REP_CLAIMED:
		lr_stats_inc(&s->claims_won);
		break;
	case LR_REP_LOST:
		lr_stats_inc(&s->claims_lost);
		break;
	case LR_REP_COMMITTED:
		lr_stats_inc(&s->steps_committed);
		break;
	case LR_REP_FINISHED:
		lr_stats_task_done(s, st);
		break;
	case LR_REP_LET_GO:
	case LR_REP_NOT_HERE:
		lr_stats_inc(&s->tasks_let_go);
		break;
	case LR_REP_GONE:
	case LR_REP_BLOCKED:
	case LR_REP_WAIT:
		break;
	}
}

struct report {
	lr_task_state state;
	int64_t step, attempt, fence;
	const char *text;
};

static void report(struct hold *h, enum lr_report rep, const struct report *what)
{
	static const struct report nothing;
	lr_runner *r = h->r;
	if (what == NULL)
		what = &nothing;
	count(&r->stats, rep, what->state);
	/* The loop only passes these on to callbacks: without one, spare it
	 * a wake-up per claim and per step. */
	bool progress = rep == LR_REP_CLAIMED || rep == LR_REP_COMMITTED;
	if ((rep == LR_REP_CLAIMED && r->cb.claimed == NULL) ||
	    (rep == LR_REP_COMMITTED && r->cb.step_committed == NULL))
		return;
	struct lr_msg *m = lr_msg_new(LR_MSG_REPORT);
	if (m == NULL)
		return; /* the loop re-reads after its next resync */
	/* A worker that finished takes a waiting job by itself: the loop
	 * need not refill the queue before it runs low. */
	m->lazy = !progress && rep != LR_REP_NOT_HERE && lr_jobq_waiting(&r->jobs) >= 2;
	m->u.report.what = rep;
	snprintf(m->u.report.id, sizeof(m->u.report.id), "%s", h->job->id);
	m->u.report.task_rev = h->job->create_rev;
	m->u.report.started = h->t.started;
	m->u.report.state = what->state;
	m->u.report.step = what->step;
	m->u.report.attempt = what->attempt;
	m->u.report.fence = what->fence;
	m->u.report.text = what->text != NULL ? strdup(what->text) : NULL;
	lr_inbox_post(&r->inbox, m);
}

static void log_err(struct hold *h, const lr_err *e)
{
	lr_runner_log(h->r, e->code == LR_ELEASE ? LR_LOG_WARN : LR_LOG_ERROR, h->job->id,
	              NULL, -1, "%s", e->msg);
}

/* A write of the task failed for good (after its retries): the claim is
 * gone, or the lease deadline passed while etcd did not answer. Let the
 * loop know; if the claim lives on with our lease, the loop has it taken
 * up again. */
static void write_failed(struct hold *h, const lr_err *e)
{
	log_err(h, e);
	report(h, LR_REP_LET_GO, NULL);
}

/* lr_stop_wait on w's stop, with w's seat in the batch given up meanwhile:
 * no write of its comes until it ends. */
static enum lr_stop_reason pause_for(struct lr_worker *w, int64_t ms)
{
	lr_batch_away(w->r->batch);
	enum lr_stop_reason why = lr_stop_wait(&w->stop, ms);
	lr_batch_back(w->r->batch);
	return why;
}

/* lr_claimant.again: a write's outcome is open. Wait, then send it again,
 * as long as the lease may still be ours and no shutdown ended the grace
 * period. */
static bool write_again(void *user, int code)
{
	struct hold *h = user;
	int64_t deadline = lr_runner_deadline(h->r, h->who.lease);
	int64_t now = lr_mono_ms();
	if (deadline <= now || atomic_load(&h->w->stop.why) == LR_STOP_SHUTDOWN ||
	    atomic_load(&h->w->stop.why) == LR_STOP_LEASE)
		return false;
	int64_t wait = lr_backoff_next(&h->write_retry, &h->w->rng);
	if (wait > deadline - now)
		wait = deadline - now;
	lr_runner_log(h->r, LR_LOG_WARN, h->job->id, NULL, -1,
	              "etcd did not settle a write (%s): sending it again in %lld ms",
	              lr_strerror(code), (long long)wait);
	lr_batch_away(h->r->batch);
	lr_fiber_sleep_ms(wait); /* not cut short by a stop: the write must settle */
	lr_batch_back(h->r->batch);
	return lr_runner_deadline(h->r, h->who.lease) > lr_mono_ms();
}

/* lr_claimant.stray: a key on no lease was in the way of a claim. */
static void stray_deleted(void *user, const char *id, const char *key)
{
	struct hold *h = user;
	lr_runner_log(h->r, LR_LOG_WARN, id, NULL, -1,
	              "deleted %s, in the way of its locks or slots: it hung on no lease (no "
	              "holder writes one), so it would never have expired", key);
}

static char *failure_text(const lr_claimed_task *h, const char *name, int64_t attempts,
                          bool permanent, const char *error);

/* The task's end was written (rc 0) or not, after its retries: report
 * and log. A success whose final state etcd refused as too large (its
 * --max-request-bytes) ends failed instead, with the state of the last
 * commit, as a commit refused so does: sending it again cannot help, and
 * letting the task go would run its last step again. */
static void report_end(struct hold *h, lr_task_state st, const char *error, int rc,
                  const lr_err *e, int64_t t0)
{
	lr_claimed_task *t = &h->t;
	if (rc == LR_ETOOLARGE && st == LR_TASK_SUCCEEDED) {
		char *why = failure_text(t, lr_spec_step_name(t->spec, (size_t)t->next_step),
		                         t->attempt, true, e->msg);
		lr_err again = {0};
		rc = why != NULL ? lr_finish(&h->who, t, LR_TASK_FAILED, why, NULL, &again)
		                 : lr_err_set(&again, LR_ENOMEM, "finish %s: out of memory", t->id);
		report_end(h, LR_TASK_FAILED, why, rc, &again, t0);
		free(why);
		return;
	}
	if (rc != 0) {
		write_failed(h, e);
		return;
	}
	lr_hist_record(&h->r->stats.completion, lr_mono_us() - t0);
	lr_runner_log(h->r, st == LR_TASK_SUCCEEDED ? LR_LOG_INFO : LR_LOG_WARN, t->id, NULL, -1,
	              "task %s%s%s", lr_task_state_name(st), error ? ": " : "", error ? error : "");
	struct report what = { .state = st, .step = t->next_step, .attempt = t->attempt,
	                       .fence = t->fence, .text = error };
	report(h, LR_REP_FINISHED, &what);
}

/* Put the end off (struct deferred) when a next job waits and nothing
 * stops this task; false: end it now. */
static bool defer_end(struct hold *h, lr_task_state st, const char *error, json_t *state)
{
	struct deferred *d = h->defer;
	if (d == NULL || h->r->batch == NULL || atomic_load(&h->r->draining) ||
	    lr_stop_reason(&h->w->stop) != LR_STOP_NONE || lr_jobq_waiting(&h->r->jobs) == 0)
		return false;
	char *copy = error != NULL ? strdup(error) : NULL;
	if (error != NULL && copy == NULL)
		return false;
	d->st = st;
	d->error = copy;
	d->state = state != NULL ? json_incref(state) : NULL;
	d->t0 = lr_mono_us();
	d->pending = true;
	h->deferred = true;
	return true;
}

/* End the task with st, now or with the next claim; reports and logs. */
static void finish(struct hold *h, lr_task_state st, const char *error, json_t *state)
{
	if (defer_end(h, st, error, state))
		return;
	lr_err e = {0};
	int64_t t0 = lr_mono_us();
	int rc = lr_finish(&h->who, &h->t, st, error, state, &e);
	report_end(h, st, error, rc, &e, t0);
}

/* The hold of a task whose end was put off moves into d, with its job. */
static void keep_deferred(struct deferred *d, struct hold *h, struct lr_job *job)
{
	d->job = *job;
	memset(job, 0, sizeof(*job));
	d->h = *h;
	d->h.job = &d->job;
	d->h.who.again_user = &d->h;
	d->h.defer = NULL;
}

/* The rider for the next claim: the end put off, as a txn; NULL when
 * nothing is put off (or no memory to build it: then it goes alone). */
static lr_rider *ride(struct deferred *d)
{
	if (!d->pending)
		return NULL;
	lr_err e = {0}; /* out of memory: lr_finish in settle says it again */
	d->txn = lr_finish_txn(&d->h.who, &d->h.t, d->st, d->error, d->state, &d->val, &e);
	if (d->txn == NULL)
		return NULL;
	d->rider = (lr_rider){ .t = d->txn };
	return &d->rider;
}

/* Write the end put off: its outcome from the ride, or, when its request
 * failed, the same txn sent alone (a ride that applied although its reply
 * was lost is recognised by its record); built now when it did not ride. */
static void settle(struct deferred *d)
{
	if (!d->pending)
		return;
	struct hold *h = &d->h;
	lr_err e = {0};
	int rc;
	if (d->rider.sent && d->rider.rc == 0)
		rc = lr_finish_outcome(&h->t, &d->rider.r, d->val, &e);
	else if (d->txn != NULL)
		rc = lr_finish_send(&h->who, &h->t, d->txn, d->val, &e);
	else
		rc = lr_finish(&h->who, &h->t, d->st, d->error, d->state, &e);
	report_end(h, d->st, d->error, rc, &e, d->t0);
	if (d->rider.sent)
		lr_txn_result_free(&d->rider.r);
	lr_txn_free(d->txn);
	free(d->val);
	lr_claimed_task_clear(&h->t);
	lr_job_clear(&d->job);
	free(d->error);
	json_decref(d->state);
	memset(d, 0, sizeof(*d));
}

/* The step stopped because of `why`: act on it. interrupted: a step was
 * running when the stop came. */
static void stopped(struct hold *h, enum lr_stop_reason why, bool interrupted)
{
	lr_claimed_task *t = &h->t;
	lr_err e = {0};
	switch (why) {
	case LR_STOP_CANCEL:
		finish(h, LR_TASK_CANCELLED, "cancelled on request", NULL);
		return;
	case LR_STOP_SHUTDOWN:
		/* The count goes back by one unless it holds a start that ran
		 * to its end (a failed attempt waiting for its retry). */
		if (lr_release(&h->who, t, interrupted || !t->started, &e) != 0) {
			write_failed(h, &e);
			return;
		}
		lr_runner_log(h->r, LR_LOG_INFO, t->id, NULL, -1,
		              "released at step %lld/%lld on shutdown", (long long)t->next_step + 1,
		              (long long)t->steps);
		break;
	case LR_STOP_LEASE:
	case LR_STOP_NONE:
		/* The claim counted a start that did not happen (the lease
		 * deadline passed between the claim, or a commit, and the
		 * step): while etcd still keeps the lease, the fenced release
		 * gives the attempt back, as a graceful one does. */
		if (!t->started && lr_release(&h->who, t, true, &e) == 0) {
			lr_runner_log(h->r, LR_LOG_WARN, t->id, NULL, -1,
			              "released at step %lld/%lld before it started, its attempt "
			              "given back: the lease deadline passed",
			              (long long)t->next_step + 1, (long long)t->steps);
			break;
		}
		if (lr_runner_deadline(h->r, h->who.lease) > lr_mono_ms())
			lr_runner_log(h->r, LR_LOG_WARN, t->id, NULL, -1,
			              "dropped at step %lld/%lld: its claim (fence %lld) is gone from "
			              "etcd although the lease lives; nothing more is committed",
			              (long long)t->next_step + 1, (long long)t->steps,
			              (long long)t->fence);
		else
			lr_runner_log(h->r, LR_LOG_WARN, t->id, NULL, -1,
			              "dropped at step %lld/%lld: the lease is lost, nothing more is "
			              "committed", (long long)t->next_step + 1, (long long)t->steps);
		break;
	}
	report(h, LR_REP_LET_GO, NULL);
}

/* Why a failed task failed, for done/<id>. */
static char *failure_text(const lr_claimed_task *h, const char *name, int64_t attempts,
                          bool permanent, const char *error)
{
	char *out = NULL;
	int n;
	if (permanent)
		n = asprintf(&out, "step %s (%lld) failed: %s", name, (long long)h->next_step,
		             error ? error : "the handler gave up");
	else
		n = asprintf(&out, "step %s (%lld) failed after %lld attempt%s: %s", name,
		             (long long)h->next_step, (long long)attempts,
		             attempts == 1 ? "" : "s",
		             error ? error : "the handler reported a failure");
	return n < 0 ? NULL : out;
}

/* Commit a succeeded step, or end the task when it was the last. Returns
 * false when the task is no longer ours. */
static bool commit(struct hold *h, json_t *state, const char *name)
{
	lr_claimed_task *t = &h->t;
	if (t->next_step + 1 == t->steps) {
		finish(h, LR_TASK_SUCCEEDED, NULL, state);
		return false;
	}
	lr_err e = {0};
	int64_t t0 = lr_mono_us();
	int rc = lr_commit_step(&h->who, t, state, &e);
	if (rc == LR_ETOOLARGE) {
		/* Sending it again cannot help: end the task with the error. */
		char *why = failure_text(t, name, t->attempt, true, e.msg);
		finish(h, LR_TASK_FAILED, why, NULL);
		free(why);
		return false;
	}
	if (rc != 0) {
		write_failed(h, &e);
		return false;
	}
	lr_hist_record(&h->r->stats.commit, lr_mono_us() - t0);
	struct report what = { .step = t->next_step - 1, .attempt = t->attempt,
	                       .fence = t->fence, .text = name };
	report(h, LR_REP_COMMITTED, &what);
	return true;
}

/* Handle a failed attempt; returns true to run the step again. */
static bool failed_attempt(struct hold *h, const char *name, lr_step_result res,
                           const char *error)
{
	lr_claimed_task *t = &h->t;
	lr_stats_inc(&h->r->stats.attempts_failed);
	if (res == LR_STEP_FAIL || t->attempt >= t->max_attempts) {
		char *why = failure_text(t, name, t->attempt, res == LR_STEP_FAIL, error);
		finish(h, LR_TASK_FAILED, why, NULL);
		free(why);
		return false;
	}
	int64_t wait = lr_retry_backoff_ms(lr_spec_backoff_ms(t->spec), t->attempt, &h->w->rng);
	lr_runner_log(h->r, LR_LOG_WARN, t->id, name, t->next_step,
	              "attempt %lld of %lld failed: %s; retrying in %lld ms",
	              (long long)t->attempt, (long long)t->max_attempts,
	              error ? error : "no reason given", (long long)wait);
	enum lr_stop_reason why = pause_for(h->w, wait);
	if (why != LR_STOP_NONE) {
		stopped(h, why, false);
		return false;
	}
	return true;
}

/* Interrupted attempts of one claim that run again under the same attempt
 * number; later ones count as starts, so that a step that keeps its
 * runner from renewing (starving the machine, say) cannot loop for ever. */
#define LR_RESTARTS_GIVEN 3

/* The step was stopped, or not started, as the lease deadline came near
 * with no renewal (etcd or this process stalled): not a failed attempt.
 * Wait for a renewal, then run it again; or, when the lease is lost, drop
 * the task as for any stop. Returns true to run it again. */
static bool interrupted_attempt(struct hold *h, const char *name, const char *error)
{
	lr_claimed_task *t = &h->t;
	lr_runner_log(h->r, LR_LOG_WARN, t->id, name, t->next_step,
	              "attempt %lld of %lld interrupted (%s): no lease renewal came in time, so "
	              "the step was stopped before the lease could expire; it runs again once "
	              "a renewal comes", (long long)t->attempt, (long long)t->max_attempts,
	              error != NULL ? error : "stopped");
	/* Until a renewal moves the deadline (one that came before this
	 * look costs a wait for the next), or the lease is lost (the clock
	 * reaching the deadline included). A shutdown meanwhile releases the
	 * task with the attempt given back, as for any interrupted step. */
	int64_t stopped_under = lr_stop_deadline(&h->w->stop);
	enum lr_stop_reason why;
	while ((why = pause_for(h->w, 50)) == LR_STOP_NONE &&
	       lr_stop_deadline(&h->w->stop) <= stopped_under) {
		if (atomic_load(&h->r->draining)) {
			why = LR_STOP_SHUTDOWN;
			break;
		}
	}
	if (why != LR_STOP_NONE) {
		stopped(h, why, true);
		return false;
	}
	if (h->restarts_given < LR_RESTARTS_GIVEN) {
		h->restarts_given++;
		t->started = false; /* the attempt is given back: it runs again as it was */
	}
	return true;
}

/* This runner could not start the step (lr__step_not_started): nothing of
 * the task's doing, so no attempt of its is spent. The task is released
 * with the attempt given back, for any runner to take, and the loop holds
 * off claiming for a while (so that one runner short of descriptors, or
 * with a TMPDIR gone, does not use up the attempts of every task). */
static void not_started_here(struct hold *h, const char *name, const char *error)
{
	lr_claimed_task *t = &h->t;
	lr_err e = {0};
	if (lr_release(&h->who, t, true, &e) != 0) {
		write_failed(h, &e);
		return;
	}
	lr_runner_log(h->r, LR_LOG_ERROR, t->id, name, t->next_step,
	              "step %lld/%lld could not start on this runner: %s; released with its "
	              "attempt given back, and this runner claims nothing for a while",
	              (long long)t->next_step + 1, (long long)t->steps,
	              error != NULL ? error : "no reason given");
	report(h, LR_REP_NOT_HERE, NULL);
}

/* Count the start about to happen, unless the count already holds it.
 * False when the task is no longer ours to run. */
static bool count_start(struct hold *h, const char *name)
{
	lr_claimed_task *t = &h->t;
	if (!t->started)
		return true;
	if (t->attempt >= t->max_attempts) {
		char why[LR_ID_SIZE + 128];
		snprintf(why, sizeof(why), "step %s started %lld time%s without finishing", name,
		         (long long)t->attempt, t->attempt == 1 ? "" : "s");
		finish(h, LR_TASK_FAILED, why, NULL);
		return false;
	}
	lr_err e = {0};
	if (lr_bump_attempt(&h->who, t, &e) != 0) {
		write_failed(h, &e);
		return false;
	}
	return true;
}

/* Run step next_step once; false when the task is no longer ours. */
static bool run_step(struct hold *h)
{
	lr_claimed_task *t = &h->t;
	const char *name = lr_spec_step_name(t->spec, (size_t)t->next_step);
	const struct lr_handler *hd = lr_runner_handler(h->r, name);
	if (hd == NULL) {
		char *msg = NULL;
		if (asprintf(&msg, "step %s (%lld): no handler for this step", name,
		             (long long)t->next_step) < 0)
			msg = NULL;
		finish(h, LR_TASK_FAILED, msg, NULL);
		free(msg);
		return false;
	}
	if (!count_start(h, name))
		return false;
	lr_runner_log(h->r, LR_LOG_INFO, t->id, name, t->next_step,
	              "step %lld/%lld started (attempt %lld, fence %lld)",
	              (long long)t->next_step + 1, (long long)t->steps,
	              (long long)t->attempt, (long long)t->fence);
	t->started = true;
	json_t *state = NULL;
	char *error = NULL;
	enum lr_attempt_end end;
	lr_step_result res = lr_step_run(h->w, &h->who, t, hd, &state, &error, &end);
	enum lr_stop_reason why = lr_stop_reason(&h->w->stop);
	bool go_on;
	if (why == LR_STOP_NONE && res != LR_STEP_OK && end == LR_ATTEMPT_NOT_STARTED)
		lr_stats_inc(&h->r->stats.steps_not_started);
	else
		lr_stats_step(&h->r->stats, why != LR_STOP_NONE, res);
	if (why != LR_STOP_NONE) {
		/* Whatever the handler returned, nothing is committed. */
		stopped(h, why, true);
		go_on = false;
	} else if (res == LR_STEP_OK) {
		go_on = commit(h, state, name);
	} else if (end == LR_ATTEMPT_INTERRUPTED) {
		go_on = interrupted_attempt(h, name, error);
	} else if (end == LR_ATTEMPT_NOT_STARTED) {
		not_started_here(h, name, error);
		go_on = false;
	} else {
		go_on = failed_attempt(h, name, res, error);
	}
	json_decref(state);
	free(error);
	return go_on;
}

static void run_steps(struct hold *h)
{
	while (h->t.next_step < h->t.steps) {
		enum lr_stop_reason why = lr_stop_reason(&h->w->stop);
		if (why == LR_STOP_NONE && atomic_load(&h->r->draining))
			why = LR_STOP_SHUTDOWN;
		if (why != LR_STOP_NONE) {
			stopped(h, why, false);
			return;
		}
		if (!run_step(h))
			return;
	}
}

/* Read the specs the loop asked for (one txn), with this job's own when it
 * has none, and hand the others to the loop's cache: with no checkpoint,
 * the claim is then one round trip. On failure the claim reads as usual. */
static void prefetch(struct lr_worker *w, struct lr_job *job)
{
	size_t own = job->spec == NULL ? 1 : 0;
	size_t n = job->n_prefetch + own;
	char (*ids)[LR_ID_SIZE] = malloc(n * sizeof(*ids));
	lr_prefetched *got = calloc(n, sizeof(*got));
	struct lr_msg *m = lr_msg_new(LR_MSG_PREFETCHED);
	if (ids == NULL || got == NULL || m == NULL)
		goto out;
	if (own)
		snprintf(ids[0], LR_ID_SIZE, "%s", job->id);
	memcpy(ids + own, job->prefetch, job->n_prefetch * sizeof(*ids));
	lr_err e = {0};
	if (lr_claim_prefetch(w->r->client, (const char (*)[LR_ID_SIZE])ids, n,
	                      LR_SPEC_CACHE_ONE, got, &e) != 0) {
		lr_runner_log(w->r, LR_LOG_DEBUG, job->id, NULL, -1, "%s", e.msg);
		for (size_t i = 0; i < n; i++)
			snprintf(got[i].id, sizeof(got[i].id), "%s", ids[i]);
	} else if (own && got[0].spec != NULL && !got[0].has_ckpt &&
	           got[0].create_rev == job->create_rev) {
		job->spec = got[0].spec;
		job->spec_len = got[0].spec_len;
		job->fresh = true;
		got[0].spec = NULL;
	}
	m->lazy = true; /* for the cache: read before the next dispatch */
	m->u.prefetched.pre = got;
	m->u.prefetched.n = n;
	lr_inbox_post(&w->r->inbox, m);
	got = NULL;
	m = NULL;
out:
	lr_prefetched_clear(got, got != NULL ? n : 0);
	free(got);
	free(m);
	free(ids);
}

static void run_job(struct lr_worker *w, struct lr_job *job, struct deferred *d)
{
	lr_runner *r = w->r;
	struct hold h = { .w = w, .r = r, .job = job, .defer = d };
	h.who = (lr_claimant){ .client = r->client, .runner = r->name, .lease = job->lease,
	                       .again = write_again, .again_user = &h, .batch = r->batch,
	                       .stray = stray_deleted, .stray_user = &h };
	lr_backoff_init(&h.write_retry, 200, 5000);
	/* A stop asked for since the job was taken stays asked for. */
	lr_stop_arm(&w->stop, job->lease, lr_runner_deadline(r, job->lease));
	enum lr_claim_outcome oc;
	lr_task_state ended = LR_TASK_FAILED;
	char ended_error[700] = "";
	lr_err e = {0};
	int64_t t0 = lr_mono_us();
	if (job->n_prefetch > 0) {
		lr_batch_away(r->batch); /* a read outside the batch */
		prefetch(w, job);
		lr_batch_back(r->batch);
	}
	/* The end of the task before, put off, rides with this claim. */
	h.who.rider = ride(d);
	int rc = lr_claim(&h.who, job->id, job->spec, job->spec_len, job->create_rev, job->fresh,
	                  job->n_slots > 0 ? job->slots : NULL, job->n_slots, &h.t, &oc, &ended,
	                  ended_error, sizeof(ended_error), &e);
	h.who.rider = NULL;
	settle(d);
	if (rc != 0) {
		/* The loop learns from the watch whether the claim applied;
		 * if it did, the task is taken up again. */
		lr_runner_log(r, LR_LOG_WARN, job->id, NULL, -1, "%s", e.msg);
		pause_for(w, 500); /* do not spin while etcd is down */
		report(&h, LR_REP_LET_GO, NULL);
		return;
	}
	switch (oc) {
	case LR_CLAIM_LOST: {
		/* fence: the winner's claim revision, so that the loop can tell
		 * whether its watch has seen that claim yet. */
		struct report what = { .fence = h.t.fence };
		report(&h, LR_REP_LOST, &what);
		return;
	}
	case LR_CLAIM_GONE:
		report(&h, LR_REP_GONE, NULL);
		return;
	case LR_CLAIM_BLOCKED:
		report(&h, LR_REP_BLOCKED, NULL);
		return;
	case LR_CLAIM_WAIT: {
		struct report what = { .fence = h.t.wait_until,
		                       .text = h.t.wait_for[0] != '\0' ? h.t.wait_for : NULL };
		report(&h, LR_REP_WAIT, &what);
		return;
	}
	case LR_CLAIM_ENDED: {
		lr_runner_log(r, LR_LOG_WARN, job->id, NULL, -1, "task %s: %s",
		              lr_task_state_name(ended), ended_error);
		struct report what = { .state = ended, .text = ended_error };
		report(&h, LR_REP_FINISHED, &what);
		return;
	}
	case LR_CLAIM_WON:
		break;
	}
	lr_hist_record(&r->stats.claim, lr_mono_us() - t0);
	lr_claimed_task *t = &h.t;
	lr_stop_set_fence(&w->stop, t->fence);
	if (t->adopted)
		t->started = job->started;
	lr_runner_log(r, LR_LOG_INFO, t->id, NULL, -1,
	              "%s at step %lld/%lld, attempt %lld, fence %lld",
	              t->adopted ? "taken up again (a claim of ours)" : "claimed",
	              (long long)t->next_step + 1, (long long)t->steps, (long long)t->attempt,
	              (long long)t->fence);
	struct report what = { .step = t->next_step, .attempt = t->attempt, .fence = t->fence };
	report(&h, LR_REP_CLAIMED, &what);
	if (t->cancel_requested)
		lr_stop_request(&w->stop, LR_STOP_CANCEL);
	lr_stats_inc(&r->stats.tasks_running);
	run_steps(&h);
	lr_stats_dec(&r->stats.tasks_running);
	if (h.deferred)
		keep_deferred(d, &h, job);
	else
		lr_claimed_task_clear(t);
}

static void worker_main(void *arg)
{
	struct lr_worker *w = arg;
	lr_runner *r = w->r;
	struct lr_job job;
	struct deferred d;
	memset(&d, 0, sizeof(d));
	lr_batch_seat(r->batch);
	bool have = lr_jobq_take(&r->jobs, w->slot, &job);
	while (have) {
		lr_stats_inc(&r->stats.slots_busy);
		run_job(w, &job, &d);
		lr_stats_dec(&r->stats.slots_busy);
		lr_job_clear(&job);
		lr_jobq_finish(&r->jobs, w->slot);
		/* Nobody can ask this slot to stop any more: the loop finds
		 * workers by the task they run, and this one runs none. */
		lr_stop_disarm(&w->stop);
		/* An end put off goes with the next claim, if a job is still
		 * there to take, or alone before this worker waits for one. */
		if (d.pending && lr_jobq_try_take(&r->jobs, w->slot, &job))
			continue;
		settle(&d);
		lr_batch_away(r->batch); /* the queue may keep it waiting */
		have = lr_jobq_take(&r->jobs, w->slot, &job);
		if (have)
			lr_batch_back(r->batch);
	}
	lr_batch_unseat(r->batch);
}

static void *worker_thread(void *arg)
{
	worker_main(arg);
	return NULL;
}

/* ---- the worker threads ---------------------------------------------------- */

/* The group commit made its requests smaller for etcd's limits. */
static void note_limit(void *user, const char *msg)
{
	lr_runner_log(user, LR_LOG_WARN, NULL, NULL, -1, "%s", msg);
}

/* The workers as fibers, spread over r->threads hosts. */
static int start_hosts(lr_runner *r, lr_err *err)
{
	int n = r->threads;
	void **args = calloc((size_t)r->concurrency, sizeof(*args));
	r->hosts = calloc((size_t)n, sizeof(*r->hosts));
	if (args == NULL || r->hosts == NULL) {
		free(args);
		free(r->hosts);
		r->hosts = NULL;
		return lr_err_set(err, LR_ENOMEM, "runner: out of memory");
	}
	for (int i = 0; i < r->concurrency; i++)
		args[i] = &r->workers[i];
	int started = lr_hosts_start(r->hosts, n, worker_main, args, (size_t)r->concurrency);
	free(args);
	if (started < n) {
		lr_jobq_close(&r->jobs);
		for (int i = 0; i < started; i++)
			lr_host_join(r->hosts[i]);
		free(r->hosts);
		r->hosts = NULL;
		return lr_err_set(err, LR_ESYS,
		                  "runner: cannot start worker thread %d of %d or map its "
		                  "fibers' stacks", started + 1, n);
	}
	return 0;
}

/* The first n workers stop once their jobs are done (none while
 * starting), and their queue and stop fds go. */
static void workers_end(lr_runner *r, int n)
{
	lr_jobq_close(&r->jobs);
	if (r->hosts != NULL) {
		for (int i = 0; i < r->threads; i++)
			lr_host_join(r->hosts[i]);
		free(r->hosts);
		r->hosts = NULL;
	} else if (r->threads == 0) { /* (hosts that failed to start: none) */
		for (int i = 0; i < n; i++)
			pthread_join(r->workers[i].thread, NULL);
	}
	pthread_mutex_lock(&r->workers_mu);
	struct lr_worker *workers = r->workers;
	r->workers = NULL; /* no renewal reaches them any more */
	pthread_mutex_unlock(&r->workers_mu);
	for (int i = 0; i < n; i++)
		lr_stop_free(&workers[i].stop);
	lr_jobq_free(&r->jobs);
	free(workers);
}

int lr_workers_start(lr_runner *r, lr_err *err)
{
	int cap = r->concurrency + LR_READY_AHEAD(r->concurrency);
	r->workers = calloc((size_t)r->concurrency, sizeof(*r->workers));
	r->batch = lr_batch_new(lr_client_etcd(r->client), LR_BATCH_IN_FLIGHT, LR_BATCH_TXNS,
	                        LR_BATCH_GROUP_TXNS);
	if (r->workers == NULL || r->batch == NULL ||
	    lr_jobq_init(&r->jobs, (size_t)cap, r->concurrency) != 0) {
		free(r->workers);
		r->workers = NULL;
		lr_batch_free(r->batch);
		r->batch = NULL;
		return lr_err_set(err, LR_ENOMEM, "runner: out of memory");
	}
	lr_batch_on_limit(r->batch, note_limit, r);
	/* The stops' descriptors, with room for the gRPC calls and files
	 * that come with the first tasks: one growth of the table. */
	lr_fd_table_reserve(LR_STOP_FDS * r->concurrency + 64);
	for (int i = 0; i < r->concurrency; i++) {
		struct lr_worker *w = &r->workers[i];
		w->r = r;
		w->slot = i;
		lr_rng_init(&w->rng, NULL);
		if (lr_stop_init(&w->stop) != 0 ||
		    (r->threads == 0 && pthread_create(&w->thread, NULL, worker_thread, w) != 0)) {
			lr_stop_free(&w->stop);
			/* Those started end now; the runner can be run again
			 * with its concurrency as it was. */
			workers_end(r, i);
			lr_batch_free(r->batch);
			r->batch = NULL;
			return lr_err_set(err, LR_ESYS, "runner: cannot start worker %d of %d "
			                  "(its stop fds or thread)", i + 1, r->concurrency);
		}
	}
	return r->threads > 0 ? start_hosts(r, err) : 0;
}

void lr_workers_join(lr_runner *r)
{
	if (r->workers == NULL)
		return;
	workers_end(r, r->concurrency);
	uint64_t requests, txns;
	lr_batch_counts(r->batch, &requests, &txns);
	lr_runner_log(r, LR_LOG_INFO, NULL, NULL, -1,
	              "group commit: %llu txns in %llu requests", (unsigned long long)txns,
	              (unsigned long long)requests);
	lr_batch_free(r->batch);
	r->batch = NULL;
}

void lr_workers_extend(lr_runner *r, int64_t lease, int64_t deadline)
{
	pthread_mutex_lock(&r->workers_mu);
	for (int i = 0; r->workers != NULL && i < r->concurrency; i++)
		lr_stop_extend(&r->workers[i].stop, lease, deadline);
	pthread_mutex_unlock(&r->workers_mu);
}

struct signal {
	lr_runner *r;
	enum lr_stop_reason why;
};

static void signal_slot(void *user, int slot, const char *id)
{
	(void)id;
	struct signal *s = user;
	lr_stop_request(&s->r->workers[slot].stop, s->why);
}

struct gone {
	lr_runner *r;
	int64_t rev;
};

static void gone_slot(void *user, int slot, const char *id)
{
	(void)id;
	struct gone *g = user;
	lr_stop_claim_gone(&g->r->workers[slot].stop, g->rev);
}

void lr_workers_claim_gone(lr_runner *r, const char *id, int64_t rev)
{
	struct gone g = { r, rev };
	if (r->workers != NULL)
		lr_jobq_running(&r->jobs, id, gone_slot, &g);
}

struct in_handlers {
	lr_runner *r;
	int n;
	char *out;
	size_t size, len;
};

static void in_handler_slot(void *user, int slot, const char *id)
{
	struct in_handlers *ih = user;
	struct lr_worker *w = &ih->r->workers[slot];
	if (atomic_load(&w->handler_since) == 0)
		return;
	int wrote = snprintf(ih->out + ih->len, ih->size - ih->len, "%s%s (step %lld)",
	                     ih->n > 0 ? ", " : "", id,
	                     (long long)atomic_load(&w->handler_step) + 1);
	if (wrote > 0)
		ih->len += (size_t)wrote < ih->size - ih->len ? (size_t)wrote
		                                               : ih->size - ih->len - 1;
	ih->n++;
}

int lr_workers_in_handlers(lr_runner *r, char *out, size_t size)
{
	struct in_handlers ih = { r, 0, out, size, 0 };
	out[0] = '\0';
	if (r->workers != NULL)
		lr_jobq_running(&r->jobs, NULL, in_handler_slot, &ih);
	return ih.n;
}

void lr_workers_signal(lr_runner *r, const char *id, enum lr_stop_reason why)
{
	struct signal s = { r, why };
	if (r->workers != NULL)
		lr_jobq_running(&r->jobs, id, signal_slot, &s);
}
