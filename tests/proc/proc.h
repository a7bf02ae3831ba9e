/* proc.h - running the `leaserun` command (or any program) from a test with
 * an environment the test controls: in the foreground with its output
 * captured, or in the background with its output in a file. */
#ifndef LR_TEST_PROC_H
#define LR_TEST_PROC_H

#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <sys/types.h>

/* What one foreground run did. */
typedef struct proc_result {
	int status; /* exit status; 128 + signal when killed */
	char *out;  /* stdout, NUL-terminated */
	char *err;  /* stderr, NUL-terminated */
	int took_ms;
	long max_rss_kb; /* its peak resident set size (getrusage's ru_maxrss) */
} proc_result;

/* The child's environment is the test's without any LEASERUN_* variable,
 * plus `env` ("NAME=value" strings, NULL-terminated; may be NULL). */

/* Run argv (NULL-terminated, argv[0] a path) with `input` on stdin (NULL:
 * none) and wait for it, killing it after timeout_ms. Fails the current
 * test when it cannot start. Free with proc_result_free. */
proc_result proc_run(char *const argv[], const char *const env[],
                     const char *input, int timeout_ms);
void proc_result_free(proc_result *r);

/* A program in the background, stdout and stderr into one file. It dies
 * with the test process (PR_SET_PDEATHSIG). */
typedef struct proc_bg {
	pid_t pid;
	int status; /* once reaped: as in proc_result; -1 before */
	char log[PATH_MAX];
} proc_bg;

/* Start argv with its output into log_path (created or truncated). */
void proc_start(proc_bg *p, char *const argv[], const char *const env[],
                const char *log_path);

/* True while it runs (reaps it when it has exited). */
bool proc_alive(proc_bg *p);

/* Wait up to timeout_ms for it to exit (-1 on timeout, else its status). */
int proc_wait(proc_bg *p, int timeout_ms);

/* Send sig, wait up to timeout_ms, then SIGKILL; returns its status. */
int proc_stop(proc_bg *p, int sig, int timeout_ms);

/* The whole content of a file as a new string ("" when unreadable). */
char *proc_slurp(const char *path);

/* The `leaserun` binary under test ($LEASERUN_BIN); fails the test when
 * unset. */
const char *proc_leaserun(void);

/* Run `leaserun` with the arguments that follow (NULL-terminated), env and
 * input as proc_run does, for 60 s at most. */
proc_result proc_cli(const char *const env[], const char *input, ...);
/* The same with the arguments in a va_list. */
proc_result proc_cli_v(const char *const env[], const char *input, va_list ap);

/* The argv of `leaserun` with the arguments of a NULL-terminated list, in
 * argv (room for n pointers, NULL-terminated). */
void proc_cli_argv(char **argv, int n, const char *const *args);

#endif
