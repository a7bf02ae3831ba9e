/* cli_run.h - running the `leaserun` command from the client tests: against
 * the test's cluster and prefix, with the credentials the test sets, and
 * files in a private temporary directory. Test main thread only. */
#ifndef LR_TEST_CLI_RUN_H
#define LR_TEST_CLI_RUN_H

#include "fixture.h"
#include "proc.h"

/* The environment a run gets: the cluster and the prefix of the test. */
extern char cli_env_endpoints[512], cli_env_prefix[300];
/* Credentials in the environment of a run; NULL: unset. */
extern const char *cli_env_user, *cli_env_password;

/* Runs go to the harness's cluster under c's prefix. */
void cli_use_client(lr_client *c);

/* Run leaserun with the arguments (NULL-terminated) and input on stdin
 * (NULL: none); prints what it did on stderr. */
proc_result cli_run(const char *input, ...);

/* The same with the arguments in a NULL-terminated array and no input,
 * killed after timeout_ms: for long runs. */
proc_result cli_run_long(const char *const *args, int timeout_ms);

/* The same with its standard output into the file at path (/dev/full:
 * every write fails), or closed (path NULL); `out` is then empty. */
proc_result cli_run_stdout_to(const char *path, const char *const *args);

/* The same with its standard input closed. */
proc_result cli_run_stdin_closed(const char *const *args);

/* The same on a terminal of 200 columns (a pseudo-terminal): what it
 * wrote there is `out`, with the terminal's line ends (\r\n). */
proc_result cli_run_tty(const char *const *args);
/* The same on a terminal `cols` columns wide. */
proc_result cli_run_tty_cols(const char *const *args, int cols);

/* Start leaserun with the arguments (NULL-terminated array) in the
 * background, its output into log_path. */
void cli_start(proc_bg *p, const char *log_path, const char *const *args);

#define RUN(...) cli_run(NULL, __VA_ARGS__, (char *)NULL)
#define RUN_STDIN(input, ...) cli_run(input, __VA_ARGS__, (char *)NULL)

/* The private temporary directory, made by cli_setup. */
extern char cli_tmpdir[64];

/* Set-up of a test program that runs the command: the temporary directory
 * and one etcd member (0 on success); cli_teardown removes both. */
int cli_setup(void);
void cli_teardown(void);

/* The path of a file in cli_tmpdir, made with the given content. The path
 * is valid until the eighth call after this one. */
const char *cli_write_file(const char *name, const char *content);

#endif
