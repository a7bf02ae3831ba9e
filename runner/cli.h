/* cli.h - what the parts of the `leaserun` command share: exit statuses,
 * error reporting (fail.c) and the subcommands. Main thread only. */
#ifndef LR_CLI_H
#define LR_CLI_H

#include "leaserun.h"

/* Exit statuses (docs/commands.md, "Commands"). */
enum {
	EXIT_OK = 0,
	EXIT_RUNTIME = 1,
	EXIT_USAGE = 2,
	EXIT_EXISTS = 3,
	EXIT_NOTFOUND = 4,
	EXIT_BUSY = 5,      /* `run --wait` ran out before the locks were free */
};

/* Descriptors a worker keeps open: its own (etcd, its loop, metrics) and,
 * for each slot, those of its stop (4), and of a running shell step (its
 * guard's pipes and its state directory: 5 more). */
#define FDS_OWN 64
#define FDS_SLOT_IDLE 4
#define FDS_SLOT_BUSY 10

/* The longest lease TTL and stop grace a command takes (`worker`, `run`):
 * a day. */
#define CLI_TTL_MAX_S 86400
#define CLI_GRACE_MAX_S 86400

/* Returned by helpers when the command should go on (any exit status is
 * >= 0). */
#define CLI_CONTINUE (-1)

/* The exit status of a library error code: the one place that maps them. */
int cli_exit_code(int code);

/* Print "leaserun: <message>" for a failed library call; returns its exit
 * status. */
int cli_fail(const lr_err *err);

/* Output that could not be written (errnum: the failed write's errno)
 * fails the command: "leaserun: writing the output: <reason>", or nothing
 * for a reader that went away (EPIPE); returns EXIT_RUNTIME. */
int cli_output_failed(int errnum);

/* Print "leaserun: <reason>" and the pointer to --help; returns EXIT_USAGE. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A value from the command line as a message may show it: each byte that
 * is not part of a printable UTF-8 character written \xNN, and at most
 * CLI_QUOTE_MAX characters of it, "..." marking a cut, so that the reason
 * after it is never lost to the message's length. Returns buf. */
#define CLI_QUOTE_MAX 64
#define CLI_QUOTE_SIZE (CLI_QUOTE_MAX * 8 + 4) /* "\xc2\x9b" each, and "..." */
const char *cli_quote(const char *s, char buf[CLI_QUOTE_SIZE]);

/* Whether s is valid UTF-8 (JSON, and so etcd's records, hold no other). */
int cli_utf8_valid(const char *s);

/* Block SIGINT and SIGTERM in the calling thread and in every thread
 * started after, and return a signalfd that reads them; -1 on failure.
 * Call before the first thread starts (before connecting). */
int cli_stop_signal_fd(void);
/* The signal that made fd readable (SIGTERM when it cannot tell). */
int cli_stop_signal_read(int fd);

/* The subcommands: argv holds the arguments after the subcommand word.
 * Each returns the exit status. */
int cmd_submit(int argc, char **argv);
int cmd_worker(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_cancel(int argc, char **argv);
int cmd_runners(int argc, char **argv);
int cmd_purge(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_web(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_retry(int argc, char **argv);
int cmd_locks(int argc, char **argv);

#endif
