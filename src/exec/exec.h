/* exec.h - running one shell step as a process under a guard, independent of
 * etcd: state files, output lines, stops, the lease deadline. Any thread
 * (step workers); no shared state. */
#ifndef LR_EXEC_H
#define LR_EXEC_H

#include <stdint.h>

#include "leaserun.h"

/* Output lines longer than this are delivered in pieces of at most this many
 * bytes (cut on a UTF-8 character boundary). */
#define LR_EXEC_LINE_MAX 4096

/* How a step is run. Everything is borrowed for the duration of lr_exec_run. */
typedef struct lr_exec_opts {
	const char *run;           /* passed to /bin/sh -c */
	char *const *env;          /* the child's complete environment
	                              (NULL-terminated "K=V"), usually from
	                              lr_exec_env_build; NULL: this process's
	                              environ. LEASERUN_STATE_IN/OUT are set
	                              by lr_exec_run itself. */
	const char *state_in;      /* JSON text of the current state, written to
	                              the file LEASERUN_STATE_IN; NULL: "null" */
	const char *work_dir_base; /* where the private state directory
	                              <base>/leaserun-<task>.<fence>.<attempt>.XXXXXX
	                              (0700, with state-in.json and
	                              state-out.json) is made, e.g. $TMPDIR;
	                              NULL: "/tmp" */
	/* What names that directory: characters of the task id outside
	 * [A-Za-z0-9._:-] become '_', and the first 100 are kept (NULL or
	 * "": "step"); fence and attempt are not negative. */
	const char *task_id;
	int64_t fence;
	int64_t attempt;
	int64_t timeout_ms;        /* from the start of the step; <= 0: none */
	int64_t grace_ms;          /* SIGTERM -> SIGKILL; < 0 counts as 0 */
	/* When non-NULL, the grace to give at the moment a stop through
	 * cancel_fd begins, instead of grace_ms: 0 when the step has no right
	 * to run any more (its claim is gone). Asked again whenever
	 * deadline_fd wakes during a stop: 0 then ends the grace. */
	int64_t (*grace_now)(void *user);
	int cancel_fd;             /* readable (or hung up) once the step must
	                              stop: lease lost, cancel, shutdown; -1:
	                              none. Only polled, never read. */
	int deadline_fd;           /* readable (and drained here) when the
	                              deadline moved, or the step lost its
	                              claim during a stop: the new deadline is
	                              passed to the guard at once, and
	                              grace_now asked; 0 or below: none (the
	                              guard then learns a move only when this
	                              side wakes, before the guard would act) */
	int64_t deadline_ms;       /* lr_mono_ms() time at which the step is
	                              stopped (the lease deadline); 0: none */
	/* When non-NULL, replaces deadline_ms: called (on the calling thread)
	 * every time the deadline is needed, so that a renewed lease moves it
	 * later. Returns 0 for none. */
	int64_t (*deadline)(void *user);
	/* Each output line without its '\n' (nor a '\r' before it); fd is 1
	 * for stdout, 2 for stderr. NUL bytes show as '?'. Called on the
	 * calling thread, in the order each stream was written; may be NULL. */
	void (*line)(void *user, int fd, const char *line);
	void *user;
} lr_exec_opts;

typedef enum lr_exec_outcome {
	LR_EXEC_OK = 0,     /* exit status 0 (state_out may be set) */
	LR_EXEC_EXIT,       /* non-zero exit status */
	LR_EXEC_SIGNAL,     /* the shell was killed by a signal */
	LR_EXEC_TIMEOUT,    /* stopped because timeout_ms passed */
	LR_EXEC_STOPPED,    /* stopped by cancel_fd */
	LR_EXEC_DEADLINE,   /* stopped (or not started) because the lease
	                       deadline came near with no renewal: the lease
	                       may well live on, and the step was interrupted,
	                       not failed */
	LR_EXEC_BAD_STATE,  /* exit 0, but LEASERUN_STATE_OUT holds invalid JSON
	                       or a state over LR_STATE_MAX_BYTES */
	LR_EXEC_SPAWN,      /* could not be started */
	LR_EXEC_GUARD_LOST, /* the guard was killed before every process of the
	                       step had ended: some may still run, out of
	                       reach (never run the step again) */
} lr_exec_outcome;

typedef struct lr_exec_result {
	lr_exec_outcome outcome;
	int exit_status;         /* LR_EXEC_EXIT (and 0 for LR_EXEC_OK) */
	int signal;              /* LR_EXEC_SIGNAL */
	char *state_out;         /* LR_EXEC_OK only: malloc'd compact JSON text
	                            of the new state; NULL when the step left
	                            LEASERUN_STATE_OUT empty (state unchanged) */
	char stderr_tail[2048];  /* the last lines of stderr (up to 20),
	                            '\n'-separated, for error messages */
	char msg[512];           /* "exit status 3", "killed by signal 9
	                            (SIGKILL)", "timed out after 5s", "stopped on
	                            request", "stopped: lease deadline reached"
	                            (+ " (SIGKILL after the 10s grace)"),
	                            "LEASERUN_STATE_OUT: line 1, column 5: ..." */
} lr_exec_result;

/* Run o->run with /bin/sh -c in its own process group, under a guard
 * process (guard.h), stdin from /dev/null, stdout and stderr read line by
 * line, until the shell exits or the step is stopped and no process of the
 * step is left.
 *
 * Stops: a timeout or cancel_fd makes the guard send SIGTERM to the step and
 * SIGKILL grace_ms later. The lease deadline is the guard's own business:
 * unless a renewal moves it, no process of the step is alive at the
 * deadline (guard.h has the schedule), whatever happens to this process,
 * which passes every move on (deadline_fd). A step that must stop already
 * is not started: LR_EXEC_STOPPED (cancel_fd readable) or LR_EXEC_DEADLINE
 * (deadline passed).
 *
 * The step is over when its shell exits: whatever it started is killed
 * then (SIGKILL), processes that left its group or double-forked too (the
 * guard is their subreaper), so a finished step leaves no process behind;
 * output still in the pipes is read for at most 250 ms more.
 * The private state directory is locked while the step runs, and removed
 * before returning; should this process die, the guard removes it.
 *
 * res is overwritten (no need to initialise it); release it with
 * lr_exec_result_clear. Returns 0 when the step ran or was stopped before
 * starting, whatever its outcome; a negative LR_E* code when it could not be
 * started (then res->outcome is LR_EXEC_SPAWN and res->msg repeats err).
 * Blocks the calling thread; o->line and o->deadline run on it. */
int lr_exec_run(const lr_exec_opts *o, lr_exec_result *res, lr_err *err);

/* Free res->state_out; res may be reused. */
void lr_exec_result_clear(lr_exec_result *res);

/* A child environment: the entries of base (usually environ) whose names are
 * not in drop (NULL-terminated names, may be NULL; applies to base only) nor
 * set by add, then the entries of add (NULL-terminated "K=V", may be NULL; a
 * later one beats an earlier one of the same name). Entries without '=' are
 * left out. Strings are copied. Returns a new NULL-terminated array, freed with
 * lr_exec_env_free, or NULL when out of memory. */
char **lr_exec_env_build(char *const *base, const char *const *drop,
                         const char *const *add);
void lr_exec_env_free(char **env);
/* *var = "NAME=<v as compact JSON>" ("{}" for NULL; v a json_t *), new
 * (free()). 1 on success, 0 when out of memory. */
int lr_exec_json_var(char **var, const char *name, const void *v);

#endif
