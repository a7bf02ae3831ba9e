/* shell_step.c - the handler behind `leaserun worker`: a step's "run" as a
 * shell command, built on the public step API like any embedded handler.
 * Runs on a worker thread. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "engine/step_int.h"
#include "exec/exec.h"
#include "exec/exec_files.h"
#include "records/spec.h"

extern char **environ;

/* Credentials of the runner never reach a step: its etcd user and password,
 * and its client certificate and key, as leaserun and etcdctl read them.
 * The CA and the endpoints are no secret: a step may use them to reach
 * etcd with credentials of its own. */
static const char *const dropped[] = {
	"LEASERUN_PASSWORD", "LEASERUN_USER", "LEASERUN_CERT", "LEASERUN_KEY",
	"ETCDCTL_PASSWORD", "ETCDCTL_USER", "ETCDCTL_CERT", "ETCDCTL_KEY", NULL,
};

static void on_line(void *user, int fd, const char *line)
{
	lr_step *s = user;
	lr_step_log(s, fd == 2 ? LR_LOG_WARN : LR_LOG_INFO, "%s", line);
}

static int64_t deadline_of(void *user)
{
	return lr_step_deadline_ms(user);
}

/* A step whose claim is gone (the lease lost, or etcd deleted the claim)
 * may already run elsewhere: it gets no grace. Cancel and shutdown do. */
static int64_t grace_now(void *user)
{
	return lr_step_stop_reason(user) == LR_STEP_LEASE_LOST ? 0 : lr_step_grace_ms(user);
}

/* The step's variables, then the spec's env: "K=V" strings, NULL-ended. */
static char **step_vars(lr_step *s)
{
	const json_t *env = lr_step_env(s);
	size_t n = 10 + json_object_size(env) + 1;
	char **vars = calloc(n, sizeof(*vars));
	if (vars == NULL)
		return NULL;
	size_t i = 0;
	int ok = 1;
	ok &= asprintf(&vars[i++], "LEASERUN_TASK_ID=%s", lr_step_task_id(s)) > 0;
	ok &= asprintf(&vars[i++], "LEASERUN_STEP=%lld", (long long)lr_step_index(s)) > 0;
	ok &= asprintf(&vars[i++], "LEASERUN_STEPS=%lld", (long long)lr_step_count(s)) > 0;
	ok &= asprintf(&vars[i++], "LEASERUN_STEP_NAME=%s", lr_step_name(s)) > 0;
	ok &= asprintf(&vars[i++], "LEASERUN_ATTEMPT=%lld", (long long)lr_step_attempt(s)) > 0;
	ok &= asprintf(&vars[i++], "LEASERUN_FENCE=%lld", (long long)lr_step_fence(s)) > 0;
	ok &= asprintf(&vars[i++], "LEASERUN_RUNNER=%s", lr_step_runner(s)) > 0;
	ok &= lr_exec_json_var(&vars[i++], "LEASERUN_LOCKS", lr_step_locks(s));
	ok &= lr_exec_json_var(&vars[i++], "LEASERUN_SLOTS", lr_step_slots(s));
	const char *k;
	json_t *v;
	json_object_foreach((json_t *)env, k, v)
		ok &= asprintf(&vars[i++], "%s=%s", k, json_string_value(v)) > 0;
	if (!ok) {
		lr_exec_env_free(vars);
		return NULL;
	}
	return vars;
}

/* A failed run as the error recorded with the task. */
static void describe_failure(lr_step *s, const lr_exec_result *res)
{
	if (res->stderr_tail[0] != '\0')
		lr_step_set_error(s, "%s; stderr: %s", res->msg, res->stderr_tail);
	else
		lr_step_set_error(s, "%s", res->msg);
}

static lr_step_result take_state(lr_step *s, const lr_exec_result *res)
{
	if (res->state_out == NULL)
		return LR_STEP_OK; /* unchanged */
	json_error_t je;
	json_t *state = json_loads(res->state_out, JSON_DECODE_ANY, &je);
	if (state == NULL) {
		lr_step_set_error(s, "LEASERUN_STATE_OUT: %s", je.text);
		return LR_STEP_RETRY;
	}
	lr_step_set_state(s, state);
	return LR_STEP_OK;
}

/* Where the state directories go: $TMPDIR, else /tmp. */
static const char *work_dir_base(void)
{
	const char *tmp = getenv("TMPDIR");
	return tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp";
}

int lr_shell_step_sweep(const char *dir, size_t *removed, lr_err *err)
{
	return lr_state_dir_sweep(dir != NULL ? dir : work_dir_base(), removed, err);
}

lr_step_result lr_shell_step(lr_step *s, void *user)
{
	(void)user;
	const char *run = json_string_value(json_object_get(lr_step_spec(s), "run"));
	int64_t timeout_s = json_integer_value(json_object_get(lr_step_spec(s), "timeout_s"));
	char *state_in = json_dumps(lr_step_state(s), JSON_COMPACT | JSON_ENCODE_ANY);
	char **vars = step_vars(s);
	char **env = vars != NULL ? lr_exec_env_build(environ, dropped, (const char *const *)vars)
	                          : NULL;
	lr_step_result out = LR_STEP_RETRY;
	if (run == NULL || state_in == NULL || env == NULL) {
		lr_step_set_error(s, "out of memory preparing the step");
		goto done;
	}
	lr_exec_opts o = {
		.run = run,
		.env = env,
		.state_in = state_in,
		.work_dir_base = work_dir_base(),
		.task_id = lr_step_task_id(s),
		.fence = lr_step_fence(s),
		.attempt = lr_step_attempt(s),
		.timeout_ms = timeout_s * 1000,
		.grace_ms = lr_step_grace_ms(s),
		.grace_now = grace_now,
		.cancel_fd = lr_step_cancel_fd(s),
		.deadline_fd = lr_step_deadline_fd(s),
		.deadline = deadline_of,
		.line = on_line,
		.user = s,
	};
	lr_exec_result res;
	memset(&res, 0, sizeof(res));
	lr_err e = {0};
	if (lr_exec_run(&o, &res, &e) != 0) {
		/* Nothing of the step ran: the trouble is this runner's. */
		lr_step_set_error(s, "%s", e.msg);
		lr__step_not_started(s);
	} else if (res.outcome == LR_EXEC_OK) {
		out = take_state(s, &res);
	} else {
		describe_failure(s, &res);
		/* Another execution could overlap what the first left running. */
		if (res.outcome == LR_EXEC_GUARD_LOST)
			out = LR_STEP_FAIL;
		else if (res.outcome == LR_EXEC_DEADLINE)
			lr__step_interrupted(s);
		else if (res.outcome == LR_EXEC_SPAWN)
			lr__step_not_started(s);
	}
	lr_exec_result_clear(&res);
done:
	free(state_in);
	lr_exec_env_free(vars);
	lr_exec_env_free(env);
	return out;
}
