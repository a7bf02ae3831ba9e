/* options.h - the command line of `leaserun`: flags of a subcommand and the
 * common connection options (flag > environment > default). Main thread. */
#ifndef LR_CLI_OPTIONS_H
#define LR_CLI_OPTIONS_H

#include <stdbool.h>

#include "cli.h"

/* One flag of a subcommand: `--name value`, `--name=value`, or `--name` for
 * a switch. */
typedef struct cli_flag {
	const char *name;  /* without the leading "--" */
	const char **value; /* where the value goes; NULL for a switch. It
	                     * starts NULL: a flag with a value is given once */
	int *on;            /* set to 1 by a switch */
} cli_flag;

typedef struct cli_cmd {
	const char *name;
	const char *usage;     /* the help text of the subcommand */
	const cli_flag *flags; /* ends with { NULL } */
	int max_args;          /* positional arguments allowed */
} cli_cmd;

/* The common options as given on the command line (NULL when absent). */
typedef struct cli_common {
	const char *endpoints, *prefix, *cacert, *cert, *key, *tls_server_name;
	const char *user, *dial_timeout;
} cli_common;

/* Whether `--name` (without "=value") is a common option that takes a value
 * in the next argument: main uses it to find the subcommand word. */
int cli_common_takes_value(const char *arg);

/* The text about common options, for the help pages. */
extern const char cli_common_help[];

/* Parse argv[0..argc) (the arguments after the subcommand word) against the
 * command's flags and the common ones. Positional arguments go to args[]
 * (room for cmd->max_args), their count to *nargs. Returns CLI_CONTINUE, or
 * an exit status when the command must end now: EXIT_OK after --help,
 * EXIT_USAGE after printing what is wrong. */
int cli_parse(const cli_cmd *cmd, int argc, char **argv, cli_common *common,
              const char **args, int *nargs);

/* Whether s is one or more ASCII digits and nothing else: strtol would
 * also take "+3", " 3" and "-0", and no option has a negative value. */
bool cli_digits(const char *s);
/* Parse an integer flag value, written as digits alone, in lo..hi (lo >= 0);
 * EXIT_USAGE (printed) otherwise. */
int cli_int(const char *flag, const char *s, long lo, long hi, long *out);

/* CLI_CONTINUE when id is a valid task id, else EXIT_USAGE (printed):
 * checked before connecting, so that it is exit 2 whether etcd answers or
 * not. */
int cli_check_id(const char *cmd, const char *id);

/* CLI_CONTINUE when standard input can be read, else EXIT_USAGE (printed
 * as "<cmd>: standard input is closed"): the command started with it
 * closed. Checked before reading it, and before connecting. */
int cli_check_stdin(const char *cmd);

/* Parse seconds in lo..hi, written as a decimal number (digits, maybe a
 * fraction); EXIT_USAGE (printed) otherwise. */
int cli_seconds(const char *flag, const char *s, double lo, double hi, double *out);

/* Parse a command that takes one task ID and connect: CLI_CONTINUE with
 * *id and *out set, or an exit status after printing the reason. */
int cli_parse_id_and_open(const cli_cmd *cmd, int argc, char **argv, const char **id,
                          lr_client **out);

/* Connect with the common options. Returns CLI_CONTINUE with *out set, or
 * an exit status after printing the reason. */
int cli_open(const cli_common *o, lr_client **out);

/* The holders a command is made within, from the environment a step or a
 * run's command gives it: the task (LEASERUN_TASK_ID, "task:<id>") and the
 * run (LEASERUN_HOLD, "run:<id>"). An older request waiting for either
 * must not hold back a request this command makes (`run`), nor one of a
 * task it submits (`submit`). Values that are no holder's are left out. */
typedef struct cli_within {
	char task[LR_ID_SIZE + 8], run[LR_ID_SIZE + 8];
	const char *holders[3]; /* NULL-terminated */
} cli_within;
void cli_made_within(cli_within *w);

#endif
