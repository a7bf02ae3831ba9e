/* run.c - any command run while a hold keeps its locks (lr_hold_exec in
 * leaserun.h): the shell steps' guard around it, fed the hold's lease
 * deadline. Runs on the caller's thread. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/stdfd.h"
#include "exec/exec.h"
#include "exec/guard.h"
#include "exec/orphans.h"
#include "locks/hold.h"

extern char **environ;

/* argv0 as a path execve can take: as given when it has a '/' and exists
 * (execve then says why it cannot run it, exit 126 as in the shell), else
 * the first executable file of that name on PATH. */
static char *find_program(const char *argv0)
{
	if (strchr(argv0, '/') != NULL)
		return access(argv0, F_OK) == 0 ? strdup(argv0) : NULL;
	const char *path = getenv("PATH");
	if (path == NULL || path[0] == '\0')
		path = "/usr/local/bin:/usr/bin:/bin";
	for (const char *p = path; *p != '\0';) {
		size_t len = strcspn(p, ":");
		char *full = NULL;
		struct stat st;
		if (asprintf(&full, "%.*s/%s", (int)len, len ? p : ".", argv0) < 0)
			return NULL;
		if (stat(full, &st) == 0 && S_ISREG(st.st_mode) && access(full, X_OK) == 0)
			return full;
		free(full);
		p += len + (p[len] == ':');
	}
	return NULL;
}

/* The command's environment: ours, with the hold's variables. */
static char **hold_env(lr_hold *h)
{
	char *vars[5] = { NULL };
	int ok = asprintf(&vars[0], "LEASERUN_FENCE=%lld", (long long)lr_hold_fence(h)) > 0;
	ok &= asprintf(&vars[1], "LEASERUN_HOLD=%s", lr_hold_id(h)) > 0;
	ok &= lr_exec_json_var(&vars[2], "LEASERUN_LOCKS", lr_hold_locks(h));
	ok &= lr_exec_json_var(&vars[3], "LEASERUN_SLOTS", lr_hold_slots(h));
	char **env = ok ? lr_exec_env_build(environ, NULL, (const char *const *)vars) : NULL;
	for (int i = 0; i < 4; i++)
		free(vars[i]);
	return env;
}

/* Whether stdin is our controlling terminal, with us in its foreground:
 * the command then takes the foreground, so that it can read the terminal
 * and gets the keyboard's signals itself. */
static bool own_terminal(void)
{
	pid_t fg = tcgetpgrp(0);
	return fg >= 0 && fg == getpgrp();
}

/* The foreground back from the command's process group. */
static void take_back_terminal(void)
{
	sigset_t ttou, old;
	sigemptyset(&ttou);
	sigaddset(&ttou, SIGTTOU);
	pthread_sigmask(SIG_BLOCK, &ttou, &old);
	(void)tcsetpgrp(0, getpgrp());
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

int lr_hold_exec(lr_hold *h, char *const argv[], int stop_fd, int64_t grace_ms,
                 int *wstatus, lr_err *err)
{
	if (LR_NULL_ARG(err, h) || LR_NULL_ARG(err, wstatus))
		return LR_EINVAL;
	*wstatus = 0;
	if (argv == NULL || argv[0] == NULL)
		return lr_err_set(err, LR_EINVAL, "run: no command");
	char *path = find_program(argv[0]);
	if (path == NULL)
		return lr_err_set(err, LR_ENOTFOUND, "run: %s: no such program on PATH, or not "
		                  "executable", argv[0]);
	/* Lost already (0), or frozen past the deadline since the locks were
	 * taken: they may be another holder's now, so the command never
	 * starts. (A guard reads a deadline of 0 as none at all.) */
	int64_t deadline = lr_hold_deadline_ms(h);
	if (deadline <= lr_mono_ms()) {
		free(path);
		return lr_err_set(err, LR_ELEASE, "run %s: the hold's lease %lld was lost before "
		                  "the command started: it did not start", lr_hold_id(h),
		                  (long long)lr_hold_lease(h));
	}
	char **env = hold_env(h);
	if (env == NULL) {
		free(path);
		return lr_err_set(err, LR_ENOMEM, "run: out of memory");
	}
	/* A standard descriptor that was closed when this process started is
	 * gRPC's now (base/stdfd.h): the command gets /dev/null there. */
	bool in_closed = lr_fd_is_anon(0), out_closed = lr_fd_is_anon(1),
	     err_closed = lr_fd_is_anon(2);
	int null_out = out_closed || err_closed ? open("/dev/null", O_WRONLY | O_CLOEXEC) : -1;
	lr_guard_spec spec = { .path = path, .argv = argv, .envp = env,
	                       .out_fd = out_closed ? null_out : 1,
	                       .err_fd = err_closed ? null_out : 2, .pass_stdin = !in_closed,
	                       .take_terminal = !in_closed && own_terminal(),
	                       .dir_fd = -1, .deadline_ms = deadline, .grace_ms = grace_ms };
	lr_guard g;
	int rc = lr_guard_start(&spec, &g, err);
	if (null_out >= 0)
		close(null_out);
	free(path);
	lr_exec_env_free(env);
	if (rc != 0)
		return rc;
	bool lost = false, stopping = false, ended = false;
	lr_guard_said said = { 0 };
	for (;;) {
		struct pollfd p[4] = { { g.status, POLLIN, 0 },
		                       { lr_hold_renewed_fd(h), POLLIN, 0 },
		                       { lost ? -1 : lr_hold_lost_fd(h), POLLIN, 0 },
		                       { stopping ? -1 : stop_fd, POLLIN, 0 } };
		if (poll(p, 4, -1) < 0) {
			if (errno == EINTR)
				continue;
			rc = lr_err_set(err, LR_ESYS, "run: poll: %s", strerror(errno));
			lr_guard_stop(&g, 0);
			break;
		}
		if (p[1].revents != 0) {
			uint64_t n;
			ssize_t r = read(lr_hold_renewed_fd(h), &n, sizeof(n));
			(void)r;
			if (!lost)
				lr_guard_deadline(&g, lr_hold_deadline_ms(h));
		}
		if (p[2].revents != 0) {
			/* The locks may be another holder's at once (a revoked
			 * lease): no grace, as for a step whose claim is gone. */
			lost = true;
			lr_guard_stop(&g, 0);
		}
		if (p[3].revents != 0) {
			stopping = true;
			lr_guard_stop(&g, grace_ms);
		}
		if (p[0].revents != 0 && lr_guard_read(&g, &said)) {
			ended = true;
			break;
		}
	}
	bool guard_killed = ended && lr_guard_killed(&g, &said);
	/* What the command started outside its process group outlived its
	 * guard: in a process that adopts orphans (`leaserun run`), they are
	 * this process's children now, and are stopped here. */
	bool orphans_stopped = guard_killed && lr_orphans_kill();
	lr_guard_end(&g);
	if (spec.take_terminal)
		take_back_terminal();
	/* The guard ended without the status: killed. */
	*wstatus = said.exited ? said.wstatus : SIGKILL;
	/* Frozen or cut off past the deadline, this process hears of the loss
	 * only after the guard stopped the command: the clock tells at once.
	 * The guard stops it ahead of the deadline (SIGTERM at deadline - 200
	 * ms - lead), so a command that obeys SIGTERM may end before it: the
	 * guard's word that it stopped it for the deadline tells then. */
	if (said.deadline || lr_mono_ms() >= lr_hold_deadline_ms(h))
		lost = true;
	if (rc == 0 && guard_killed && orphans_stopped)
		rc = lr_err_set(err, LR_ESYS, "run %s: the command's guard was killed; what the "
		                "command left running was stopped", lr_hold_id(h));
	if (guard_killed && !orphans_stopped) {
		/* Revoked, the lease would hand the locks over at once, beside
		 * what is left; expiring, it gives that the TTL to end. */
		lr_hold_leave_lease(h);
		if (rc == 0)
			rc = lr_err_set(err, LR_ESYS, "run %s: the command's guard was killed before "
			                "every process of the command had ended: some may still run, "
			                "so the hold's lease %lld is left to expire rather than "
			                "revoked", lr_hold_id(h), (long long)lr_hold_lease(h));
	}
	if (rc == 0 && lost)
		rc = lr_err_set(err, LR_ELEASE, "run %s: the hold's lease %lld was lost: the "
		                "command was stopped", lr_hold_id(h), (long long)lr_hold_lease(h));
	return rc;
}
