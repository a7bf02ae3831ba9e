/* step.c - the step context handed to a step handler, and one attempt.
 * Runs on a worker thread; the context is used by that thread only. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/runner_int.h"
#include "engine/step_int.h"
#include "records/spec.h"

const char *lr_step_task_id(const lr_step *s) { return s->h->id; }
int64_t lr_step_index(const lr_step *s) { return s->h->next_step; }
int64_t lr_step_count(const lr_step *s) { return s->h->steps; }
const char *lr_step_name(const lr_step *s) { return s->name; }
int64_t lr_step_attempt(const lr_step *s) { return s->h->attempt; }
int64_t lr_step_fence(const lr_step *s) { return s->h->fence; }
const char *lr_step_runner(const lr_step *s) { return s->r->name; }
const void *lr_step_spec(const lr_step *s) { return s->step_spec; }
const void *lr_step_env(const lr_step *s) { return lr_spec_env(s->h->spec); }
void *lr_step_state(lr_step *s) { return s->state; }
const void *lr_step_locks(const lr_step *s) { return json_object_get(s->h->spec, "locks"); }
const void *lr_step_slots(const lr_step *s) { return s->slots; }

/* {"pool": index} of the slots the claim took; NULL when none. */
static json_t *slots_held(const lr_claimed_task *h)
{
	if (h->locks == NULL || h->locks->n_limits == 0)
		return NULL;
	json_t *o = json_object();
	for (size_t i = 0; o != NULL && i < h->locks->n_limits; i++)
		if (h->slots[i] >= 0)
			json_object_set_new(o, h->locks->limits[i].key, json_integer(h->slots[i]));
	return o;
}
int lr_step_cancel_fd(const lr_step *s) { return s->w->stop.fd; }

lr_step_stop lr_step_stop_reason(const lr_step *s)
{
	/* A claim lost during a cancel's or a shutdown's grace: the step has
	 * no right to run any more. */
	if (lr_stop_lost(&s->w->stop))
		return LR_STEP_LEASE_LOST;
	switch (lr_stop_reason(&s->w->stop)) {
	case LR_STOP_NONE:
		return LR_STEP_GOES_ON;
	case LR_STOP_CANCEL:
		return LR_STEP_CANCELLED;
	case LR_STOP_LEASE:
		return LR_STEP_LEASE_LOST;
	case LR_STOP_SHUTDOWN:
		break;
	}
	return LR_STEP_SHUTDOWN;
}
int lr_step_deadline_fd(const lr_step *s) { return s->w->stop.moved_fd; }
int64_t lr_step_grace_ms(const lr_step *s) { return s->r->grace_ms; }

void lr_step_set_state(lr_step *s, void *state)
{
	if (state == NULL)
		state = json_null();
	/* lr_step_state's own (borrowed) object given back after changing
	 * it: it is the state already, and taking its one reference would
	 * free it under the step. */
	if (state == s->state)
		return;
	json_decref(s->state);
	s->state = state;
}

int lr_step_cancelled(const lr_step *s)
{
	return lr_stop_reason(&s->w->stop) != LR_STOP_NONE;
}

int64_t lr_step_deadline_ms(const lr_step *s)
{
	return lr_stop_deadline(&s->w->stop);
}

/* Longer than any deadline on the monotonic clock: a wait till the step
 * must stop, and small enough to add to the clock (a year of ms). */
#define SLEEP_MAX_MS ((int64_t)366 * 24 * 3600 * 1000)

int lr_step_sleep(lr_step *s, int64_t timeout_ms)
{
	if (timeout_ms > SLEEP_MAX_MS)
		timeout_ms = SLEEP_MAX_MS;
	return lr_stop_wait(&s->w->stop, timeout_ms) != LR_STOP_NONE;
}

int lr_step_checkpoint(lr_step *s, lr_err *err)
{
	if (LR_NULL_ARG(err, s))
		return LR_EINVAL;
	if (lr_step_cancelled(s))
		return lr_err_set(err, LR_ECANCELLED, "checkpoint %s step %s: the step was stopped",
		                  s->h->id, s->name);
	int rc = lr_json_check_state(s->state, "state", err);
	if (rc != 0)
		return lr_err_wrap(err, rc, "checkpoint %s step %s", s->h->id, s->name);
	rc = lr_checkpoint_progress(s->who, s->h, s->state, err);
	if (rc == LR_ELEASE)
		lr_stop_request(&s->w->stop, LR_STOP_LEASE); /* the claim is gone: drop it */
	return rc;
}

void lr_step_set_error(lr_step *s, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(s->error, sizeof(s->error), fmt, ap);
	va_end(ap);
}

void lr_step_log(lr_step *s, lr_log_level level, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	lr_runner_vlog(s->r, level, s->h->id, s->name, s->h->next_step, fmt, ap);
	va_end(ap);
}

void lr__step_interrupted(lr_step *s)
{
	s->interrupted = true;
}

void lr__step_not_started(lr_step *s)
{
	s->not_started = true;
}

lr_step_result lr_step_run(struct lr_worker *w, const lr_claimant *who, lr_claimed_task *h,
                           const struct lr_handler *hd, json_t **state_out,
                           char **error, enum lr_attempt_end *end)
{
	lr_step s = {
		.r = w->r,
		.w = w,
		.who = who,
		.h = h,
		.step_spec = lr_spec_step(h->spec, (size_t)h->next_step),
		.name = lr_spec_step_name(h->spec, (size_t)h->next_step),
		/* A failed attempt must not leak its changes into the next. */
		.state = json_deep_copy(h->state),
		.slots = slots_held(h),
	};
	*state_out = NULL;
	*error = NULL;
	*end = LR_ATTEMPT_RAN;
	if (s.state == NULL) {
		*error = strdup("out of memory copying the state");
		return LR_STEP_RETRY;
	}
	atomic_store(&w->handler_step, h->next_step);
	atomic_store(&w->handler_since, lr_mono_ms());
	lr_batch_away(w->r->batch); /* no write of its comes until it returns */
	lr_step_result res = hd->fn(&s, hd->user);
	lr_batch_back(w->r->batch);
	atomic_store(&w->handler_since, 0);
	if (res != LR_STEP_OK && res != LR_STEP_RETRY && res != LR_STEP_FAIL) {
		/* Not a result (an uninitialised variable, a code of another
		 * API): a bug of the handler's, which running it again would
		 * repeat. */
		snprintf(s.error, sizeof(s.error),
		         "the handler returned %d, which is no lr_step_result "
		         "(LR_STEP_OK, LR_STEP_RETRY or LR_STEP_FAIL)", (int)res);
		res = LR_STEP_FAIL;
	}
	if (res == LR_STEP_OK) {
		lr_err e = {0};
		if (lr_json_check_state(s.state, "state", &e) != 0) {
			snprintf(s.error, sizeof(s.error), "%s", e.msg);
			res = LR_STEP_RETRY;
		}
	}
	if (s.error[0] != '\0')
		*error = strdup(s.error);
	if (res != LR_STEP_OK)
		*end = s.interrupted   ? LR_ATTEMPT_INTERRUPTED
		       : s.not_started ? LR_ATTEMPT_NOT_STARTED
		                       : LR_ATTEMPT_RAN;
	if (res == LR_STEP_OK)
		*state_out = s.state;
	else
		json_decref(s.state);
	json_decref(s.slots);
	return res;
}
