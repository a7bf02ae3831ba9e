/* agent.c - a small agent executor on libleaserun.
 *
 * A task has three steps, handled in this process (no shell):
 *   plan    writes a plan of N actions into the state;
 *   act     carries them out one by one, checkpointing after each, so a
 *           runner that dies mid-act is resumed by another runner from the
 *           last finished action, not from the start of the step;
 *   report  sums up what was done.
 * The state grows across the steps: {"goal", "plan": [...], "done": [...],
 * "report"}.
 *
 * Usage:
 *   agent submit GOAL [N]     store a task for GOAL with N actions (default 8)
 *   agent run                 run as a runner until SIGINT/SIGTERM
 * Connection options come from the environment as for `leaserun`:
 * LEASERUN_ENDPOINTS, LEASERUN_PREFIX. AGENT_ACTION_MS sets how long one
 * action takes (default 500). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <leaserun.h>

static lr_runner *runner;

static lr_step_result plan(lr_step *s, void *user)
{
	json_t *state = lr_step_state(s);
	json_int_t n = json_integer_value(json_object_get(state, "actions"));
	json_t *steps = json_array();
	for (json_int_t i = 0; i < n; i++)
		json_array_append_new(steps, json_sprintf("action %lld towards %s", (long long)i + 1,
		                                          json_string_value(json_object_get(state, "goal"))));
	json_object_set_new(state, "plan", steps);
	json_object_set_new(state, "done", json_array());
	lr_step_log(s, LR_LOG_INFO, "planned %lld actions", (long long)n);
	return LR_STEP_OK;
}

static lr_step_result act(lr_step *s, void *user)
{
	int action_ms = *(int *)user;
	json_t *state = lr_step_state(s);
	json_t *todo = json_object_get(state, "plan");
	json_t *done = json_object_get(state, "done");
	/* A resumed step starts after the last checkpointed action. */
	if (json_array_size(done) > 0)
		lr_step_log(s, LR_LOG_INFO, "resuming after %zu finished actions",
		            json_array_size(done));
	while (json_array_size(done) < json_array_size(todo)) {
		if (lr_step_sleep(s, action_ms)) /* the "work"; stops early when cancelled */
			return LR_STEP_RETRY;        /* nothing is committed anyway */
		json_t *next = json_array_get(todo, json_array_size(done));
		json_array_append(done, next);
		lr_err err;
		if (lr_step_checkpoint(s, &err) != 0) {
			lr_step_set_error(s, "%s", err.msg);
			return LR_STEP_RETRY;
		}
		lr_step_log(s, LR_LOG_INFO, "%s (%zu/%zu, fence %lld)", json_string_value(next),
		            json_array_size(done), json_array_size(todo),
		            (long long)lr_step_fence(s));
	}
	return LR_STEP_OK;
}

static lr_step_result report(lr_step *s, void *user)
{
	json_t *state = lr_step_state(s);
	size_t n = json_array_size(json_object_get(state, "done"));
	json_object_set_new(state, "report",
	                    json_sprintf("%zu actions done for %s by %s", n,
	                                 json_string_value(json_object_get(state, "goal")),
	                                 lr_step_runner(s)));
	return LR_STEP_OK;
}

static void on_signal(int sig)
{
	(void)sig;
	if (runner != NULL)
		lr_runner_stop(runner); /* async-signal-safe */
}

static int fail(const lr_err *err)
{
	fprintf(stderr, "agent: %s\n", err->msg);
	return 1;
}

static int submit(lr_client *c, const char *goal, int actions)
{
	json_t *spec = json_pack("{s:[{s:s,s:s},{s:s,s:s},{s:s,s:s}],s:{s:s,s:i}}",
	                         "steps", "name", "plan", "run", "builtin:plan",
	                         "name", "act", "run", "builtin:act",
	                         "name", "report", "run", "builtin:report",
	                         "state", "goal", goal, "actions", actions);
	char id[LR_ID_SIZE];
	lr_err err;
	int rc = lr_submit_json(c, spec, NULL, id, NULL, &err);
	json_decref(spec);
	if (rc != 0)
		return fail(&err);
	printf("%s\n", id);
	return 0;
}

static int run(lr_client *c)
{
	static int action_ms = 500;
	if (getenv("AGENT_ACTION_MS") != NULL)
		action_ms = atoi(getenv("AGENT_ACTION_MS"));
	lr_runner_opts o = { .name = getenv("AGENT_NAME"), .ttl_s = 2, .grace_s = 2 };
	lr_err err;
	if (lr_runner_new(c, &o, &runner, &err) != 0)
		return fail(&err);
	lr_runner_handle(runner, "plan", plan, NULL);
	lr_runner_handle(runner, "act", act, &action_ms);
	lr_runner_handle(runner, "report", report, NULL);
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	int rc = lr_runner_run(runner, &err);
	lr_runner_free(runner);
	return rc != 0 ? fail(&err) : 0;
}

int main(int argc, char **argv)
{
	if (argc < 2 || (strcmp(argv[1], "submit") == 0 && argc < 3)) {
		fprintf(stderr, "usage: agent submit GOAL [N] | agent run\n");
		return 2;
	}
	lr_client_opts o = { .endpoints = getenv("LEASERUN_ENDPOINTS"),
	                     .prefix = getenv("LEASERUN_PREFIX") };
	lr_client *c;
	lr_err err;
	if (lr_client_open(&o, &c, &err) != 0)
		return fail(&err);
	int rc = strcmp(argv[1], "submit") == 0 ? submit(c, argv[2], argc > 3 ? atoi(argv[3]) : 8)
	         : strcmp(argv[1], "run") == 0 ? run(c) : 2;
	lr_client_close(c);
	return rc;
}
