/* step_int.h - the step context handed to a step handler, shared by the
 * files of the step API: step.c (the context, one attempt) and
 * step_shared.c (shared values written under the step's claim).
 * The worker thread running the step only. */
#ifndef LR_ENGINE_STEP_INT_H
#define LR_ENGINE_STEP_INT_H

#include <stdbool.h>

#include <jansson.h>

#include "engine/runner_int.h"

struct lr_step {
	lr_runner *r;
	struct lr_worker *w;
	const lr_claimant *who;
	lr_claimed_task *h;
	const json_t *step_spec;
	const char *name;
	json_t *state;          /* the handler's working state (owned) */
	json_t *slots;          /* {"pool": index} of the claim, or NULL (owned) */
	bool interrupted;       /* stopped as the lease deadline neared */
	bool not_started;       /* this runner could not start it */
	char error[2048];
};

/* The attempt did not fail: it was stopped (or not started) because the
 * lease deadline came near with no renewal (shell_step.c). The worker runs
 * it again once the lease is renewed, or drops the task if it is lost. */
void lr__step_interrupted(lr_step *s);

/* The attempt did not fail either: this runner could not start the step
 * (out of descriptors or processes, its state directory unusable), which
 * says nothing of the task (shell_step.c). The worker releases the task
 * with the attempt given back, and the runner holds off claiming. */
void lr__step_not_started(lr_step *s);

#endif
