/* guard.h - the guard of one shell step: a small process between the runner
 * and the step's shell that makes sure no process of the step is alive at
 * the lease deadline, whatever happens to the runner (killed, frozen, cut
 * off from etcd), and that nothing the step started outlives the step.
 *
 * The guard is forked from the runner without exec and runs only
 * async-signal-safe system calls (the runner has threads). It is a child
 * subreaper: processes that leave the step's process group (setsid, double
 * fork) become its children, and it kills them with the group.
 *
 * Its schedule, with D the latest lease deadline the runner sent and W the
 * time from when that deadline arrived to D (about the TTL):
 *   - SIGTERM to the step at D - K - T, where K = LR_GUARD_KILL_MARGIN_MS
 *     and T = min(grace, W / 4), unless a renewal moved D meanwhile;
 *   - SIGKILL at D - K, so that nothing of the step is alive at D;
 *   - when the runner asks (cancel, shutdown, timeout, lease lost):
 *     SIGTERM now, SIGKILL after the grace, and never after D - K;
 *   - when the runner's pipe closes (the runner died, SIGKILL included):
 *     the same as asked with the grace, never after D - K;
 *   - when the shell exits: SIGKILL to whatever it left, at once.
 * A healthy runner renews at TTL/3, so D moves long before D - K - T.
 *
 * Threads: lr_guard_* run on the step's worker thread; the guard itself is
 * another process. */
#ifndef LR_EXEC_GUARD_H
#define LR_EXEC_GUARD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "leaserun.h"

/* How long before the deadline SIGKILL is sent: the time a killed process
 * needs to be gone, with room for a busy machine. */
#define LR_GUARD_KILL_MARGIN_MS 200

/* The byte after the shell's status on the status pipe: no process of the
 * step is left. */
#define LR_GUARD_ALL_GONE 'E'
/* A byte that may come between the two: the guard stopped the step on its
 * own, because the lease deadline it knew was near (no renewal came in
 * time, whether the runner was frozen or etcd was). */
#define LR_GUARD_DEADLINE 'D'

/* When the guard sends SIGTERM and SIGKILL unless the deadline moves:
 * deadline and learnt_at (when it arrived) in monotonic ms. */
void lr_guard_schedule(int64_t deadline, int64_t learnt_at, int64_t grace_ms,
                       int64_t *term_at, int64_t *kill_at);

typedef struct lr_guard_spec {
	const char *path;      /* the program run (absolute); NULL: /bin/sh */
	char *const *argv;     /* its arguments: {"sh", "-c", run, NULL} */
	char *const *envp;     /* its environment */
	int out_fd, err_fd;    /* the write ends of its stdout and stderr */
	bool pass_stdin;       /* its stdin is the caller's; else /dev/null */
	bool take_terminal;    /* with pass_stdin, that stdin the caller's
	                          controlling terminal and the caller in its
	                          foreground: the command's process group takes
	                          the foreground (the caller takes it back) */
	int dir_fd;            /* its state directory, locked (flock) for as
	                          long as the guard lives; the guard removes
	                          the directory at its end. -1: none */
	const char *dir_path;  /* NULL with dir_fd -1 */
	int64_t deadline_ms;   /* the lease deadline now */
	int64_t grace_ms;      /* SIGTERM to SIGKILL when asked to stop */
} lr_guard_spec;

typedef struct lr_guard {
	pid_t pid;
	int ctl;      /* write end: deadlines and stop requests to the guard */
	int status;   /* read end (non-blocking): the shell's wait status (an
	                 int), LR_GUARD_DEADLINE when the deadline stopped
	                 it, then LR_GUARD_ALL_GONE and end of file once no
	                 process of the step is left; end of file without
	                 that byte: the guard was killed, and processes of
	                 the step may live on */
	int wstatus;  /* the guard's own wait status, once reaped */
} lr_guard;

/* Start the guard, which starts the shell. The spec's fds stay the
 * caller's (the guard has its own copies). */
int lr_guard_start(const lr_guard_spec *spec, lr_guard *g, lr_err *err);
/* The lease deadline moved (a renewal). */
void lr_guard_deadline(lr_guard *g, int64_t deadline_ms);
/* Stop the step: SIGTERM now, SIGKILL after grace_ms. */
void lr_guard_stop(lr_guard *g, int64_t grace_ms);

/* What the status pipe said so far; zeroed before the first read. */
typedef struct lr_guard_said {
	int wstatus;    /* the shell's wait status, once `exited` */
	size_t got;     /* bytes of it read */
	bool exited;    /* the whole status came */
	bool all_gone;  /* LR_GUARD_ALL_GONE came: no process of the step is left */
	bool deadline;  /* LR_GUARD_DEADLINE came: the guard stopped the step
	                   for the lease deadline */
} lr_guard_said;
/* Read what the status pipe has now, without waiting. True once it ended
 * (end of file, or an error). */
bool lr_guard_read(lr_guard *g, lr_guard_said *s);
/* After the pipe ended: whether the guard was killed before every process
 * of the step was gone (some may live on). Reaps the guard then. */
bool lr_guard_killed(lr_guard *g, const lr_guard_said *s);
/* After lr_guard_killed: whether the guard gave up before it started the
 * shell (exit status 126: out of descriptors or processes, say). Then no
 * process of the step ever ran. */
bool lr_guard_never_started(const lr_guard *g);
/* The step is over and its results are read: close the pipe (the guard
 * removes the state directory and exits) and reap the guard. */
void lr_guard_end(lr_guard *g);

#endif
