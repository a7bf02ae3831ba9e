/* loop.c - lr_runner_run: one lease kept alive on one stream with the
 * runner's name registered on it, the task set loaded and watched
 * (view.c), pending tasks dispatched to the workers, their reports and the
 * watch events applied, and the graceful stop.
 *
 * Threads: the thread inside lr_runner_run runs the loop and every
 * lifecycle callback; it sleeps in poll() on the inbox's eventfd, with a
 * timeout only while a timer is due (grace period, lease re-acquisition,
 * a failed re-read). No polling of etcd. */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/runner_int.h"
#include "etcd/member.h"
#include "records/record.h"

/* ---- lease and registration ------------------------------------------------ */

static void on_lease_lost(void *user, int64_t id, const char *why)
{
	lr_runner *r = user;
	struct lr_msg *m = lr_msg_new(LR_MSG_LEASE_LOST);
	if (m == NULL)
		return;
	m->u.lease_lost.lease = id;
	m->u.lease_lost.why = strdup(why);
	lr_inbox_post(&r->inbox, m);
}

static void on_lease_renewed(void *user, int64_t id, int64_t deadline)
{
	lr_workers_extend(user, id, deadline);
}

/* Who holds a runner name, for the message that refuses it: only what its
 * record says. A record that does not decode was written by something
 * else, so nothing of it is shown as a host or a pid. */
static void describe_holder(const lr_kv *kv, char *buf, size_t size)
{
	lr_runner_rec other;
	lr_err ignore;
	if (lr_runner_decode(kv->value, kv->value_len, &other, &ignore) != 0)
		snprintf(buf, size, "(its record is unreadable)");
	else if (other.host[0] != '\0')
		snprintf(buf, size, "by a live runner (%s, pid %lld)", other.host,
		         (long long)other.pid);
	else
		snprintf(buf, size, "by a live runner (pid %lld)", (long long)other.pid);
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
	if (t == NULL) {
		free(val);
		return lr_err_set(err, LR_ENOMEM, "register %s: out of memory", r->name);
	}
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
			char holder[sizeof(((lr_runner_rec *)NULL)->host) + 64];
			describe_holder(kv, holder, sizeof(holder));
			/* A runner killed a moment ago holds it until its lease
			 * expires: say when, so that a restart knows to wait. */
			char left[128] = "";
			int64_t ttl = -1, granted = 0;
			if (lr_lease_ttl(lr_client_etcd(r->client), kv->lease, &ttl, &granted,
			                 NULL) == 0 && ttl >= 0)
				snprintf(left, sizeof(left), ": its lease has %llds left; if that "
				         "runner has died, the name is free once the lease expires",
				         (long long)ttl);
			rc = lr_err_set(err, LR_EINUSE, "runner name %s is in use %s on %s%s",
			                r->name, holder,
			                lr_etcd_endpoints(lr_client_etcd(r->client)), left);
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
	int64_t took = lr_mono_ms() - sent;
	if (took * 4 > granted * 1000)
		lr_runner_log(r, LR_LOG_WARN, NULL, NULL, -1,
		              "the lease grant took %lld ms from etcd %s, over a quarter of the "
		              "TTL (%llds): renewals may come too late to keep the lease or the "
		              "steps running; give a TTL of at least 4 round trips",
		              (long long)took, lr_etcd_endpoints(c), (long long)granted);
	r->granted_ttl = granted;
	rc = lr_keepalive_add(r->ka, id, granted, sent, on_lease_lost, on_lease_renewed, r,
	                      err);
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

/* ---- reports from the workers ------------------------------------------- */

/* The longest a runner claims nothing after a step it could not start. */
#define LR_HOLD_OFF_MAX_MS 30000

static void take_back(lr_runner *r);

/* A step this runner could not start: claim nothing for a while, so that
 * runners that can run it take it and this one does not claim and release
 * in a loop; jobs queued ahead go back. The wait doubles while it keeps
 * happening, from 1 s to LR_HOLD_OFF_MAX_MS. */
static void hold_off(lr_runner *r)
{
	int64_t now = lr_mono_ms();
	if (now - r->not_here_at > 2 * LR_HOLD_OFF_MAX_MS)
		lr_backoff_reset(&r->hold_off);
	r->not_here_at = now;
	int64_t until = now + lr_backoff_next(&r->hold_off, &r->rng);
	if (until > r->hold_off_until) {
		r->hold_off_until = until;
		lr_runner_log(r, LR_LOG_WARN, NULL, NULL, -1,
		              "claiming nothing for %lld ms: a step could not start here",
		              (long long)(until - now));
	}
	take_back(r);
}

static void apply_report(lr_runner *r, const struct lr_msg *m)
{
	void *u = r->cb_user;
	const char *id = m->u.report.id;
	int64_t rev = m->u.report.task_rev;
	switch (m->u.report.what) {
	case LR_REP_CLAIMED:
		if (r->cb.claimed != NULL)
			r->cb.claimed(u, id, m->u.report.step, m->u.report.attempt,
			              m->u.report.fence);
		return; /* still busy */
	case LR_REP_COMMITTED:
		if (r->cb.step_committed != NULL)
			r->cb.step_committed(u, id, m->u.report.step, m->u.report.text);
		return;
	case LR_REP_FINISHED:
		lr_view_settle(r, id, rev, true, 0, false);
		if (r->cb.task_done != NULL)
			r->cb.task_done(u, id, m->u.report.state, m->u.report.text);
		break;
	case LR_REP_LET_GO:
		lr_view_settle(r, id, rev, false, 0, m->u.report.started);
		break;
	case LR_REP_NOT_HERE:
		lr_view_settle(r, id, rev, false, 0, m->u.report.started);
		hold_off(r);
		break;
	case LR_REP_LOST:
		lr_view_settle(r, id, rev, false, m->u.report.fence, false);
		break;
	case LR_REP_GONE:
		lr_view_settle(r, id, rev, true, 0, false);
		break;
	case LR_REP_BLOCKED: {
		/* Our view of the locks was behind: wait for it to change. If
		 * it changed since the dispatch, the holder in the way may be
		 * gone already, its events seen: the gate looks again. */
		lr_entry *e = lr_taskset_find(&r->set, id);
		if (e != NULL && e->state == LR_ENTRY_LOCAL) {
			if (e->gate_seq != r->gate_changes)
				lr_taskset_set_state(&r->set, e, LR_ENTRY_PENDING);
			else
				lr_gate_block(r, e);
		}
		break;
	}
	case LR_REP_WAIT: {
		/* Not yet, says the claimer: look again when it may be. */
		lr_entry *e = lr_taskset_find(&r->set, id);
		if (e != NULL && e->state == LR_ENTRY_LOCAL)
			lr_sched_defer(r, e, m->u.report.fence, m->u.report.text);
		break;
	}
	}
	r->busy--;
}

/* ---- dispatch ------------------------------------------------------------- */

/* Specs of backlogged tasks are read ahead, a chunk at a time, by the
 * worker of a job before its claim: when the job's own spec is unknown
 * (the worker reads it anyway), and every half chunk of jobs otherwise,
 * once half a chunk is unread (lr_taskset_read_ahead). Tasks then have
 * their specs well before their turn: each claim is one round trip, and
 * the reads are few and full. */
static void add_prefetch(lr_runner *r, struct lr_job *job)
{
	bool own = job->spec == NULL && !job->fresh;
	size_t avg = r->spec_avg > 1024 ? r->spec_avg : 1024;
	size_t max = LR_PREFETCH_BYTES / avg;
	if (max > LR_READ_AHEAD_MAX)
		max = LR_READ_AHEAD_MAX;
	if (max == 0 || avg > LR_SPEC_CACHE_ONE)
		return; /* too large to cache anyway */
	if (!own && ++r->since_prefetch < (max + 1) / 2)
		return;
	r->since_prefetch = 0;
	lr_entry *cand[LR_READ_AHEAD_MAX];
	size_t n = lr_taskset_read_ahead(&r->set, max, own, cand);
	if (n == 0 || (job->prefetch = calloc(n, sizeof(*job->prefetch))) == NULL)
		return; /* (out of memory: those are read at their claims) */
	for (size_t i = 0; i < n; i++)
		snprintf(job->prefetch[job->n_prefetch++], LR_ID_SIZE, "%s", cand[i]->id);
}

/* A task of a higher priority than a job queued ahead came: the queued
 * jobs go back, to be handed out again in order. */
static void reprioritise(lr_runner *r)
{
	int lowest = 0;
	lr_entry *best = NULL;
	if (lr_jobq_lowest_priority(&r->jobs, &lowest) &&
	    lr_taskset_oldest(&r->set, 1, &best) == 1 && best->priority > lowest)
		take_back(r);
}

/* Hand pending tasks out as jobs: one per idle worker, and a few ahead. */
static void dispatch(lr_runner *r)
{
	reprioritise(r);
	int64_t lease = atomic_load(&r->lease);
	/* No lease, or one past its deadline, as good as lost (its message
	 * may not be here yet): a claim under it could only fail, or wait
	 * out its call when etcd cannot be reached. */
	if (lr_runner_deadline(r, lease) <= lr_mono_ms() || lr_mono_ms() < r->hold_off_until)
		return;
	int cap = r->concurrency + LR_READY_AHEAD(r->concurrency);
	while (r->busy < cap && r->set.pending > 0) {
		size_t spread = (size_t)(cap - r->busy) + 3;
		lr_entry *e = lr_taskset_pick(&r->set, spread, &r->rng);
		if (e == NULL)
			return;
		struct lr_job job = { .fresh = e->fresh, .create_rev = e->create_rev,
		                      .lease = lease, .started = e->adopt_started,
		                      .priority = e->priority };
		if (!lr_sched_pass(r, e))
			continue; /* not yet: its time, or a task it waits for */
		if (!lr_gate_pass(r, e, &job))
			continue; /* its locks or slots are taken: it waits */
		e->adopt_started = false;
		snprintf(job.id, sizeof(job.id), "%s", e->id);
		lr_taskset_take_spec(&r->set, e, &job.spec, &job.spec_len);
		e->fresh = false; /* whatever happens next, it may have a checkpoint */
		add_prefetch(r, &job);
		if (!lr_jobq_push(&r->jobs, &job)) {
			lr_job_clear(&job); /* cannot happen: busy < cap */
			lr_view_settle(r, e->id, 0, false, 0, false);
			return;
		}
		lr_taskset_set_state(&r->set, e, LR_ENTRY_LOCAL);
		r->busy++;
	}
}

static void taken_back(void *user, const struct lr_job *job)
{
	lr_runner *r = user;
	lr_view_settle(r, job->id, job->create_rev, false, 0, job->started);
	r->busy--;
}

/* Take back the jobs no worker took: their tasks are where the watch says
 * they are. */
static void take_back(lr_runner *r)
{
	lr_jobq_take_back(&r->jobs, taken_back, r);
}

/* ---- the loop --------------------------------------------------------------- */

/* A handler still running this long after its step was told to stop for
 * good (the grace period over, or the lease lost) is named in a warning,
 * and again every LR_STUCK_AGAIN_MS while it runs. */
#define LR_STUCK_FIRST_MS 2000
#define LR_STUCK_AGAIN_MS 30000

struct loop {
	int64_t grace_end;      /* 0 until the stop request */
	bool shutdown_sent;
	int64_t stop_sent;      /* when the steps were told to stop for good */
	int64_t stuck_check;    /* next look for handlers still running, 0 none */
	int64_t old_lease;      /* lost, waiting for its tasks to be dropped */
	int64_t retry_at;       /* next lease acquisition try, 0 none */
	lr_backoff retry;
	bool resync;
};

static void lease_lost(lr_runner *r, struct loop *l, const struct lr_msg *m)
{
	int64_t lease = m->u.lease_lost.lease;
	const char *why = m->u.lease_lost.why != NULL ? m->u.lease_lost.why : "lease lost";
	if (lease != atomic_load(&r->lease))
		return;
	lr_runner_log(r, LR_LOG_WARN, NULL, NULL, -1,
	              "lease %llx lost (%s): stopping every step, committing nothing",
	              (unsigned long long)lease, why);
	atomic_store(&r->lease, 0);
	lr_stats_inc(&r->stats.lease_losses);
	l->old_lease = lease;
	l->retry_at = lr_mono_ms();
	lr_workers_signal(r, NULL, LR_STOP_LEASE);
	l->stop_sent = lr_mono_ms();
	l->stuck_check = l->stop_sent + LR_STUCK_FIRST_MS;
	take_back(r); /* no job waiting is started */
	if (r->cb.lease_lost != NULL)
		r->cb.lease_lost(r->cb_user, why);
}

/* Once every task of the lost lease is dropped: a new lease. */
static void reacquire(lr_runner *r, struct loop *l)
{
	if (l->retry_at == 0 || r->busy > 0 || lr_mono_ms() < l->retry_at ||
	    atomic_load(&r->stop_requested))
		return;
	lr_etcd *c = lr_client_etcd(r->client);
	/* Free our old claims and name at once instead of at expiry. Each
	 * call may take its whole timeout when etcd cannot be reached, and
	 * the loop acts on a stop only between them. */
	lr_lease_revoke(c, l->old_lease, NULL);
	if (atomic_load(&r->stop_requested))
		return;
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

/* Handlers that do not return when told to: the run cannot end, nor a
 * new lease be taken, until they do. Shell steps are killed: this is about
 * in-process handlers that do not look at lr_step_cancelled(). */
static void warn_stuck(lr_runner *r, struct loop *l)
{
	int64_t now = lr_mono_ms();
	if (l->stuck_check == 0 || now < l->stuck_check)
		return;
	l->stuck_check = now + LR_STUCK_AGAIN_MS;
	char list[512];
	int n = lr_workers_in_handlers(r, list, sizeof(list));
	if (n == 0)
		return;
	bool lost = l->old_lease != 0;
	lr_runner_log(r, LR_LOG_WARN, NULL, NULL, -1,
	              "%d step handler%s still running %lld s after %s: %s; a handler must "
	              "return once lr_step_cancelled() is true, and until it does %s",
	              n, n == 1 ? "" : "s", (long long)((now - l->stop_sent) / 1000),
	              lost ? "the lease was lost" : "the grace period", list,
	              lost ? "no new lease is taken, while another runner may take its task"
	                   : "the runner cannot stop and its task stays claimed");
}

static void handle_messages(lr_runner *r, struct loop *l)
{
	struct lr_msg *m = lr_inbox_take(&r->inbox);
	while (m != NULL) {
		struct lr_msg *next = m->next;
		switch (m->kind) {
		case LR_MSG_WATCH:
		case LR_MSG_PREFETCHED:
			lr_view_apply(r, m);
			break;
		case LR_MSG_REPORT:
			apply_report(r, m);
			break;
		case LR_MSG_LEASE_LOST:
			lease_lost(r, l, m);
			break;
		case LR_MSG_RESYNC:
			lr_runner_log(r, LR_LOG_WARN, NULL, NULL, -1,
			              "watch ended (%s): reading the task list again",
			              m->u.resync.reason ? m->u.resync.reason : "");
			l->resync = true;
			break;
		}
		lr_msg_free(m);
		m = next;
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
	if (l->stuck_check != 0 && l->stuck_check < next)
		next = l->stuck_check;
	if (l->resync && next > now + 1000)
		next = now + 1000; /* a failed re-read is tried again */
	int64_t due = lr_sched_next_ms((lr_runner *)r);
	if (due < next)
		next = due; /* the earliest start time */
	if (r->hold_off_until > now && r->set.pending > 0 && r->hold_off_until < next)
		next = r->hold_off_until; /* claims again */
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
	lr_backoff_init(&r->hold_off, 1000, LR_HOLD_OFF_MAX_MS);
	r->hold_off_until = r->not_here_at = 0;
	for (;;) {
		if (atomic_load(&r->stop_requested) && l.grace_end == 0) {
			atomic_store(&r->draining, true);
			l.grace_end = lr_mono_ms() + r->grace_ms;
			take_back(r); /* not started: nothing to hand over */
			lr_runner_log(r, LR_LOG_INFO, NULL, NULL, -1,
			              "stopping: %d task(s) get %lld ms to finish their step",
			              r->busy, (long long)r->grace_ms);
		}
		if (l.grace_end != 0 && !l.shutdown_sent && lr_mono_ms() >= l.grace_end) {
			lr_workers_signal(r, NULL, LR_STOP_SHUTDOWN);
			l.shutdown_sent = true;
			l.stop_sent = lr_mono_ms();
			l.stuck_check = l.stop_sent + LR_STUCK_FIRST_MS;
		}
		if (l.grace_end != 0 && r->busy == 0)
			return;
		if (r->busy == 0)
			l.stuck_check = 0;
		warn_stuck(r, &l);
		reacquire(r, &l);
		if (l.resync && atomic_load(&r->lease) != 0) {
			lr_err e = {0};
			int rc = lr_view_load(r, &e);
			if (rc == 0)
				l.resync = false;
			else if (rc != LR_ECANCELLED)
				lr_runner_log(r, LR_LOG_WARN, NULL, NULL, -1, "%s", e.msg);
		}
		lr_sched_tick(r);
		if (l.grace_end == 0 && !l.resync)
			dispatch(r);
		/* A task's result is work while tasks wait for one to finish. */
		lr_inbox_results_wake(&r->inbox, lr_sched_waits_for_tasks(r));
		/* For the statistics, which other threads read: pending in
		 * the set, or queued for a worker but not yet claimed. */
		atomic_store_explicit(&r->stats.tasks_pending,
		                      r->set.pending + lr_jobq_waiting(&r->jobs),
		                      memory_order_relaxed);
		if (r->exit_when_idle && l.grace_end == 0 && !l.resync && idle(r)) {
			lr_runner_log(r, LR_LOG_INFO, NULL, NULL, -1,
			              "no task pending or claimed: exiting");
			return;
		}
		struct pollfd p = { .fd = r->inbox.wake_fd, .events = POLLIN };
		if (poll(&p, 1, poll_timeout(r, &l)) > 0)
			handle_messages(r, &l);
	}
}

/* The lease, the name and the first read of the task list. etcd may be
 * choosing a leader, have a member paused or have just lost the member we
 * used, and the runner itself may be paused past its TTL between the grant
 * and the registration: what fails for such a passing reason while a member
 * is connected (or connects within a call's timeout) is tried again, with
 * backoff, until it succeeds or the runner is asked to stop; anything else
 * (no member reachable, the name in use, access denied) ends the run. */
static int start_up(lr_runner *r, lr_err *err)
{
	lr_backoff bo;
	lr_backoff_init(&bo, 200, 2000);
	for (;;) {
		int rc = atomic_load(&r->lease) != 0 ? 0 : acquire_lease(r, 0, err);
		if (rc == 0)
			rc = lr_view_load(r, err);
		/* LR_ELEASE: the lease expired before the name was on it. */
		bool again = lr_claim_transient(rc) || rc == LR_ELEASE;
		if (rc == 0 || !again || atomic_load(&r->stop_requested) ||
		    !lr_etcd_connected(lr_client_etcd(r->client)))
			return rc;
		int64_t wait = lr_backoff_next(&bo, &r->rng);
		lr_runner_log(r, LR_LOG_WARN, NULL, NULL, -1, "%s; trying again in %lld ms",
		              err->msg, (long long)wait);
		for (int64_t end = lr_mono_ms() + wait;
		     lr_mono_ms() < end && !atomic_load(&r->stop_requested);)
			lr_sleep_ms(100);
	}
}

/* Say so when the etcd member that answers runs a version that can
 * revoke a lease renewed in time (member.h): exclusive execution then has
 * a gap that no runner can close. Once a run; a failed look says nothing. */
static void check_etcd_version(lr_runner *r)
{
	lr_etcd *c = lr_client_etcd(r->client);
	char v[64];
	lr_err ignore = {0};
	if (lr_etcd_member_version(c, v, sizeof(v), &ignore) != 0 ||
	    !lr_etcd_version_revokes_live_leases(v))
		return;
	lr_runner_log(r, LR_LOG_WARN, NULL, NULL, -1,
	              "etcd %s at %s can revoke a lease that was renewed in time when a paused "
	              "leader wakes (etcd issue 15247, fixed in 3.4.31 and 3.5.13): a claim can "
	              "then vanish under a running step, and another runner may start that "
	              "step before this one has stopped it; upgrade etcd",
	              v, lr_etcd_endpoints(c));
}

/* lr_runner_run once it is known to be the only run of r. */
static int run(lr_runner *r, lr_err *err)
{
	lr_err local = {0};
	if (err == NULL)
		err = &local; /* start_up logs its messages */
	lr_etcd *c = lr_client_etcd(r->client);
	int rc = lr_keepalive_new(c, &r->ka, err);
	if (rc == 0)
		lr_runner_ka_open(r);
	if (rc == 0)
		rc = lr_watch_new(c, &r->watch, err);
	if (rc == 0)
		rc = start_up(r, err);
	if (rc == 0)
		check_etcd_version(r);
	if (rc == LR_ECANCELLED && atomic_load(&r->stop_requested)) {
		rc = 0; /* stopped while reading: nothing was started */
		*err = (lr_err){0};
	} else if (rc == 0) {
		rc = lr_workers_start(r, err);
	}
	if (rc == 0 && r->workers != NULL)
		run_loop(r);
	lr_workers_join(r);
	lr_view_stop(r);
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
	lr_runner_ka_close(r);
	lr_keepalive_free(r->ka);
	r->ka = NULL;
	atomic_store(&r->stats.tasks_pending, 0);
	if (rc == 0)
		lr_runner_log(r, LR_LOG_INFO, NULL, NULL, -1, "stopped");
	return rc;
}

int lr_runner_run(lr_runner *r, lr_err *err)
{
	if (LR_NULL_ARG(err, r))
		return LR_EINVAL;
	int rc = lr_runner_run_begin(r, err);
	if (rc != 0)
		return rc;
	rc = run(r, err);
	lr_runner_run_end(r);
	return rc;
}
