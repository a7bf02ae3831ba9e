/* worker.c - one worker: claims the task the loop handed it, runs its steps
 * through their handlers, commits each (fenced), retries failed attempts
 * with backoff, and ends, releases or drops the task.
 * Runs on its own thread; takes jobs from the job queue, talks to the loop
 * only through the inbox, and counts what it does in the runner's
 * statistics (atomics). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/runner_int.h"
#include "records/spec.h"

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
		lr_stats_inc(&s->tasks_let_go);
		break;
	case LR_REP_GONE:
		break;
	}
}

static void report(struct lr_worker *w, enum lr_report rep, const char *id,
                   lr_task_state st, int64_t step, int64_t attempt, int64_t fence,
                   const char *text)
{
	lr_runner *r = w->r;
	count(&r->stats, rep, st);
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
	m->lazy = !progress && lr_jobq_waiting(&r->jobs) >= 2;
	m->u.report.what = rep;
	snprintf(m->u.report.id, sizeof(m->u.report.id), "%s", id);
	m->u.report.state = st;
	m->u.report.step = step;
	m->u.report.attempt = attempt;
	m->u.report.fence = fence;
	m->u.report.text = text != NULL ? strdup(text) : NULL;
	lr_inbox_post(&r->inbox, m);
}

static void log_err(struct lr_worker *w, const lr_claimed_task *h, const lr_err *e)
{
	lr_runner_log(w->r, e->code == LR_ELEASE ? LR_LOG_WARN : LR_LOG_ERROR, h->id,
	              NULL, -1, "%s", e->msg);
}

/* End the task with st; reports and logs. */
static void finish(struct lr_worker *w, const lr_claimant *who, lr_claimed_task *h,
                   lr_task_state st, const char *error, json_t *state)
{
	lr_err e = {0};
	int64_t t0 = lr_mono_us();
	if (lr_finish(who, h, st, error, state, &e) != 0) {
		log_err(w, h, &e);
		report(w, LR_REP_LET_GO, h->id, 0, 0, 0, 0, NULL);
		return;
	}
	lr_hist_record(&w->r->stats.completion, lr_mono_us() - t0);
	lr_runner_log(w->r, st == LR_TASK_SUCCEEDED ? LR_LOG_INFO : LR_LOG_WARN, h->id, NULL, -1,
	              "task %s%s%s", lr_task_state_name(st), error ? ": " : "", error ? error : "");
	report(w, LR_REP_FINISHED, h->id, st, h->next_step, h->attempt, h->fence, error);
}

/* The step stopped because of `why`: act on it. interrupted: a step was
 * running (its attempt is given back on a graceful release). */
static void stopped(struct lr_worker *w, const lr_claimant *who, lr_claimed_task *h,
                    enum lr_stop_reason why, bool interrupted)
{
	lr_err e = {0};
	switch (why) {
	case LR_STOP_CANCEL:
		finish(w, who, h, LR_TASK_CANCELLED, "cancelled on request", NULL);
		return;
	case LR_STOP_SHUTDOWN:
		if (lr_release(who, h, interrupted, &e) != 0)
			log_err(w, h, &e);
		else
			lr_runner_log(w->r, LR_LOG_INFO, h->id, NULL, -1,
			              "released at step %lld on shutdown",
			              (long long)h->next_step);
		break;
	case LR_STOP_LEASE:
	case LR_STOP_NONE:
		lr_runner_log(w->r, LR_LOG_WARN, h->id, NULL, -1,
		              "dropped at step %lld: the lease is lost, nothing more is committed",
		              (long long)h->next_step);
		break;
	}
	report(w, LR_REP_LET_GO, h->id, 0, 0, 0, 0, NULL);
}

enum lr_stop_reason lr_worker_stop_reason(struct lr_worker *w, int64_t lease)
{
	return lr_stop_reason(&w->stop, lr_runner_deadline(w->r, lease));
}

struct deadline_of {
	lr_runner *r;
	int64_t lease;
};

static int64_t lease_deadline(void *user)
{
	struct deadline_of *d = user;
	return lr_runner_deadline(d->r, d->lease);
}

enum lr_stop_reason lr_worker_wait(struct lr_worker *w, int64_t lease, int64_t ms)
{
	struct deadline_of d = { w->r, lease };
	return lr_stop_wait(&w->stop, lease_deadline, &d, ms);
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
		n = asprintf(&out, "step %s (%lld) failed after %lld attempts: %s", name,
		             (long long)h->next_step, (long long)attempts,
		             error ? error : "the handler reported a failure");
	return n < 0 ? NULL : out;
}

/* Commit a succeeded step, or end the task when it was the last. Returns
 * false when the task is no longer ours. */
static bool commit(struct lr_worker *w, const lr_claimant *who, lr_claimed_task *h, json_t *state,
                   const char *name)
{
	if (h->next_step + 1 == h->steps) {
		finish(w, who, h, LR_TASK_SUCCEEDED, NULL, state);
		return false;
	}
	lr_err e = {0};
	int64_t t0 = lr_mono_us();
	int rc = lr_commit_step(who, h, state, &e);
	if (rc != 0) {
		log_err(w, h, &e);
		report(w, LR_REP_LET_GO, h->id, 0, 0, 0, 0, NULL);
		return false;
	}
	lr_hist_record(&w->r->stats.commit, lr_mono_us() - t0);
	report(w, LR_REP_COMMITTED, h->id, 0, h->next_step - 1, h->attempt, h->fence, name);
	return true;
}

/* Handle a failed attempt; returns true to run the step again. */
static bool failed_attempt(struct lr_worker *w, const lr_claimant *who, lr_claimed_task *h,
                           const char *name, lr_step_result res, const char *error)
{
	lr_stats_inc(&w->r->stats.attempts_failed);
	if (res == LR_STEP_FAIL || h->attempt >= h->max_attempts) {
		char *why = failure_text(h, name, h->attempt, res == LR_STEP_FAIL, error);
		finish(w, who, h, LR_TASK_FAILED, why, NULL);
		free(why);
		return false;
	}
	int64_t wait = lr_retry_backoff_ms(lr_spec_backoff_ms(h->spec), h->attempt, &w->rng);
	lr_runner_log(w->r, LR_LOG_WARN, h->id, name, h->next_step,
	              "attempt %lld of %lld failed: %s; retrying in %lld ms",
	              (long long)h->attempt, (long long)h->max_attempts,
	              error ? error : "no reason given", (long long)wait);
	enum lr_stop_reason why = lr_worker_wait(w, who->lease, wait);
	if (why != LR_STOP_NONE) {
		stopped(w, who, h, why, false);
		return false;
	}
	lr_err e = {0};
	if (lr_bump_attempt(who, h, &e) != 0) {
		log_err(w, h, &e);
		report(w, LR_REP_LET_GO, h->id, 0, 0, 0, 0, NULL);
		return false;
	}
	return true;
}

static void run_steps(struct lr_worker *w, const lr_claimant *who, lr_claimed_task *h)
{
	while (h->next_step < h->steps) {
		enum lr_stop_reason why = lr_worker_stop_reason(w, who->lease);
		if (why != LR_STOP_NONE) {
			stopped(w, who, h, why, false);
			return;
		}
		if (atomic_load(&w->r->draining)) {
			stopped(w, who, h, LR_STOP_SHUTDOWN, false);
			return;
		}
		const char *name = lr_spec_step_name(h->spec, (size_t)h->next_step);
		const struct lr_handler *hd = lr_runner_handler(w->r, name);
		if (hd == NULL) {
			char *msg = NULL;
			if (asprintf(&msg, "step %s (%lld): no handler for this step", name,
			             (long long)h->next_step) < 0)
				msg = NULL;
			finish(w, who, h, LR_TASK_FAILED, msg, NULL);
			free(msg);
			return;
		}
		lr_runner_log(w->r, LR_LOG_INFO, h->id, name, h->next_step,
		              "step %lld/%lld started (attempt %lld, fence %lld)",
		              (long long)h->next_step + 1, (long long)h->steps,
		              (long long)h->attempt, (long long)h->fence);
		json_t *state = NULL;
		char *error = NULL;
		lr_step_result res = lr_step_run(w, who, h, hd, &state, &error);
		why = lr_worker_stop_reason(w, who->lease);
		bool go_on;
		if (why != LR_STOP_NONE) {
			/* Whatever the handler returned, nothing is committed. */
			stopped(w, who, h, why, true);
			go_on = false;
		} else if (res == LR_STEP_OK) {
			go_on = commit(w, who, h, state, name);
		} else {
			go_on = failed_attempt(w, who, h, name, res, error);
		}
		json_decref(state);
		free(error);
		if (!go_on)
			return;
	}
}

/* Read this job's spec together with those the loop asked for (one txn),
 * hand the others to the loop's cache, and keep ours: with no checkpoint,
 * the claim is then one round trip. On failure the claim reads as usual. */
static void prefetch(struct lr_worker *w, struct lr_job *job)
{
	size_t n = job->n_prefetch + 1;
	char (*ids)[LR_ID_SIZE] = malloc(n * sizeof(*ids));
	lr_prefetched *got = calloc(n, sizeof(*got));
	struct lr_msg *m = lr_msg_new(LR_MSG_PREFETCHED);
	if (ids == NULL || got == NULL || m == NULL)
		goto out;
	snprintf(ids[0], LR_ID_SIZE, "%s", job->id);
	memcpy(ids + 1, job->prefetch, job->n_prefetch * sizeof(*ids));
	lr_err e = {0};
	if (lr_claim_prefetch(w->r->client, (const char (*)[LR_ID_SIZE])ids, n,
	                      LR_SPEC_CACHE_ONE, got, &e) != 0) {
		lr_runner_log(w->r, LR_LOG_DEBUG, job->id, NULL, -1, "%s", e.msg);
		for (size_t i = 0; i < n; i++)
			snprintf(got[i].id, sizeof(got[i].id), "%s", ids[i]);
	} else if (got[0].spec != NULL && !got[0].has_ckpt &&
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

static void run_job(struct lr_worker *w, struct lr_job *job)
{
	lr_runner *r = w->r;
	lr_claimant who = { .client = r->client, .runner = r->name, .lease = job->lease };
	lr_claimed_task h;
	memset(&h, 0, sizeof(h));
	enum lr_claim_outcome oc;
	lr_task_state ended = LR_TASK_FAILED;
	char ended_error[700] = "";
	lr_err e = {0};
	int64_t t0 = lr_mono_us();
	if (job->n_prefetch > 0 && job->spec == NULL)
		prefetch(w, job);
	int rc = lr_claim(&who, job->id, job->spec, job->spec_len, job->create_rev, job->fresh,
	                  &h, &oc, &ended, ended_error, sizeof(ended_error), &e);
	if (rc == 0 && oc == LR_CLAIM_WON)
		lr_hist_record(&r->stats.claim, lr_mono_us() - t0);
	if (rc != 0) {
		lr_runner_log(r, LR_LOG_WARN, job->id, NULL, -1, "%s", e.msg);
		lr_worker_wait(w, who.lease, 500); /* do not spin while etcd is down */
		report(w, LR_REP_LET_GO, job->id, 0, 0, 0, 0, NULL);
		return;
	}
	switch (oc) {
	case LR_CLAIM_LOST:
		/* fence: the winner's claim revision, so that the loop can tell
		 * whether its watch has seen that claim yet. */
		report(w, LR_REP_LOST, job->id, 0, 0, 0, h.fence, NULL);
		return;
	case LR_CLAIM_GONE:
		report(w, LR_REP_GONE, job->id, 0, 0, 0, 0, NULL);
		return;
	case LR_CLAIM_ENDED:
		lr_runner_log(r, LR_LOG_WARN, job->id, NULL, -1, "task %s: %s",
		              lr_task_state_name(ended), ended_error);
		report(w, LR_REP_FINISHED, job->id, ended, 0, 0, 0, ended_error);
		return;
	case LR_CLAIM_WON:
		break;
	}
	lr_runner_log(r, LR_LOG_INFO, h.id, NULL, -1,
	              "claimed at step %lld/%lld, attempt %lld, fence %lld",
	              (long long)h.next_step, (long long)h.steps, (long long)h.attempt,
	              (long long)h.fence);
	report(w, LR_REP_CLAIMED, h.id, 0, h.next_step, h.attempt, h.fence, NULL);
	if (h.cancel_requested)
		lr_stop_request(&w->stop, LR_STOP_CANCEL);
	run_steps(w, &who, &h);
	lr_claimed_task_clear(&h);
}

static void *worker_main(void *arg)
{
	struct lr_worker *w = arg;
	lr_runner *r = w->r;
	struct lr_job job;
	while (lr_jobq_take(&r->jobs, w->slot, &job)) {
		run_job(w, &job);
		lr_job_clear(&job);
		lr_jobq_finish(&r->jobs, w->slot);
		/* Nobody can ask this slot to stop any more: the loop finds
		 * workers by the task they run, and this one runs none. */
		lr_stop_reset(&w->stop);
	}
	return NULL;
}

/* ---- the worker threads ---------------------------------------------------- */

int lr_workers_start(lr_runner *r, lr_err *err)
{
	int cap = r->concurrency + LR_READY_AHEAD(r->concurrency);
	r->workers = calloc((size_t)r->concurrency, sizeof(*r->workers));
	if (r->workers == NULL || lr_jobq_init(&r->jobs, (size_t)cap, r->concurrency) != 0) {
		free(r->workers);
		r->workers = NULL;
		return lr_err_set(err, LR_ENOMEM, "runner: out of memory");
	}
	for (int i = 0; i < r->concurrency; i++) {
		struct lr_worker *w = &r->workers[i];
		w->r = r;
		w->slot = i;
		lr_rng_init(&w->rng, NULL);
		if (lr_stop_init(&w->stop) != 0 ||
		    pthread_create(&w->thread, NULL, worker_main, w) != 0) {
			lr_stop_free(&w->stop);
			r->concurrency = i; /* only those started are joined */
			return lr_err_set(err, LR_ESYS, "runner: cannot start worker %d", i);
		}
	}
	return 0;
}

void lr_workers_join(lr_runner *r)
{
	if (r->workers == NULL)
		return;
	lr_jobq_close(&r->jobs);
	for (int i = 0; i < r->concurrency; i++) {
		pthread_join(r->workers[i].thread, NULL);
		lr_stop_free(&r->workers[i].stop);
	}
	lr_jobq_free(&r->jobs);
	free(r->workers);
	r->workers = NULL;
}

struct signal {
	lr_runner *r;
	enum lr_stop_reason why;
};

static void signal_slot(void *user, int slot)
{
	struct signal *s = user;
	lr_stop_request(&s->r->workers[slot].stop, s->why);
}

void lr_workers_signal(lr_runner *r, const char *id, enum lr_stop_reason why)
{
	struct signal s = { r, why };
	if (r->workers != NULL)
		lr_jobq_running(&r->jobs, id, signal_slot, &s);
}
