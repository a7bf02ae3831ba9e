/* main.c - the `leaserun` command: finds the subcommand and runs it.
 * Main thread. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include "cli.h"
#include "options.h"

struct subcommand {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *summary;
};

static const struct subcommand subcommands[] = {
	{ "submit", cmd_submit, "validate and store tasks; prints their ids" },
	{ "worker", cmd_worker, "run a runner until SIGTERM/SIGINT" },
	{ "status", cmd_status, "tasks with state, step, attempt and runner" },
	{ "cancel", cmd_cancel, "cancel a pending or running task" },
	{ "runners", cmd_runners, "live runners and their lease TTL left" },
	{ "purge", cmd_purge, "delete the keys of finished tasks" },
	{ "retry", cmd_retry, "make a failed or cancelled task pending again" },
	{ "run", cmd_run, "hold locks and slots while a command runs" },
	{ "locks", cmd_locks, "who holds and who waits for locks and slots" },
	{ "web", cmd_web, "a live web page of tasks, runners, locks and limits" },
	{ "bench", cmd_bench, "measure etcd and the runner: throughput, latency, cost" },
};

#define N_SUBCOMMANDS (sizeof(subcommands) / sizeof(subcommands[0]))

static void usage(FILE *f)
{
	fputs("Usage: leaserun COMMAND [OPTIONS] [ARGS]\n\n"
	      "Runs long multi-step tasks on runners that share an etcd "
	      "cluster.\n\nCommands:\n", f);
	for (size_t i = 0; i < N_SUBCOMMANDS; i++)
		fprintf(f, "  %-8s %s\n", subcommands[i].name,
		        subcommands[i].summary);
	fprintf(f, "\n%s\n"
	        "Exit status: 0 ok, 1 etcd or runtime error, 2 usage or invalid "
	        "input,\n3 the task id exists with a different spec, 4 no such "
	        "task, 5 `run --wait`\nran out ('run' otherwise exits with its "
	        "command's status).\n'leaserun COMMAND --help' describes a command.\n",
	        cli_common_help);
}

/* Index of the subcommand word: the first argument that is neither an
 * option nor the value of a common option written as "--flag value", or
 * the one after a "--" that ends the options before it (its index then in
 * *dash, else -1: that "--" is not the subcommand's to see). */
static int find_subcommand(int argc, char **argv, int *dash)
{
	*dash = -1;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			*dash = i;
			return i + 1 < argc ? i + 1 : -1;
		}
		if (argv[i][0] != '-')
			return i;
		if (cli_common_takes_value(argv[i]))
			i++;
	}
	return -1;
}

static int only_global_flag(int argc, char **argv, const char *flag)
{
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], flag) == 0)
			return 1;
	return 0;
}

/* What the command printed must have arrived: a full disk or a closed
 * standard output fails a command that thought it succeeded (exit 1). One
 * that failed already keeps its status and its own message. A reader that
 * went away (EPIPE, where SIGPIPE is ignored) wanted no more, as after
 * `| head -1`: exit 1 without a word, as quietly as SIGPIPE would. */
static int output_written(int rc)
{
	errno = 0;
	if (fflush(stdout) == 0 && !ferror(stdout))
		return rc;
	if (rc != EXIT_OK)
		return rc;
	return cli_output_failed(errno);
}

static int run_command(int argc, char **argv)
{
	/* gRPC's own log lines would break the one-JSON-object-per-line logs;
	 * everything they say reaches the user through the library's errors.
	 * GRPC_VERBOSITY set by the user still wins. */
	setenv("GRPC_VERBOSITY", "NONE", 0);
	int dash;
	int at = find_subcommand(argc, argv, &dash);

	if (at < 0) {
		if (only_global_flag(argc, argv, "--help") ||
		    only_global_flag(argc, argv, "-h")) {
			usage(stdout);
			return EXIT_OK;
		}
		if (only_global_flag(argc, argv, "--version")) {
			printf("leaserun %s\n", lr_version());
			return EXIT_OK;
		}
		char names[256] = "";
		for (size_t i = 0; i < N_SUBCOMMANDS; i++) {
			strncat(names, i > 0 ? ", " : "", sizeof(names) - strlen(names) - 1);
			strncat(names, subcommands[i].name, sizeof(names) - strlen(names) - 1);
		}
		return cli_usage_error("missing command (one of %s)", names);
	}
	for (size_t i = 0; i < N_SUBCOMMANDS; i++) {
		if (strcmp(argv[at], subcommands[i].name) != 0)
			continue;
		/* The subcommand sees every other argument, so that common
		 * options may come before or after its name. */
		char **rest = malloc(sizeof(char *) * (size_t)argc);
		if (rest == NULL) {
			fputs("leaserun: out of memory\n", stderr);
			return EXIT_RUNTIME;
		}
		int n = 0;
		for (int j = 1; j < argc; j++)
			if (j != at && j != dash)
				rest[n++] = argv[j];
		int rc = subcommands[i].run(n, rest);
		free(rest);
		return rc;
	}
	char q[CLI_QUOTE_SIZE];
	return cli_usage_error("unknown command \"%s\"", cli_quote(argv[at], q));
}

/* A standard stream started closed is opened on /dev/null: else the next
 * file opened (a socket of the etcd connection, a step's pipe) would take
 * its number, and what is printed would go there. Standard output is
 * opened read-only, so that output lost is still reported. The lowest
 * one closed is gRPC's eventfd by now, opened before main(): it is left
 * alone, and recognised where it matters (base/stdfd.h). */
static void standard_streams_open(void)
{
	for (int fd = 0; fd <= 2; fd++)
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF &&
		    open("/dev/null", fd == 2 ? O_WRONLY : O_RDONLY) != fd)
			_exit(EXIT_RUNTIME);
}

/* Steps run as the runner's user, so a dumpable runner would let them read
 * its memory (/proc/<pid>/mem: the etcd password, tokens), and its guards'
 * too, which are forks of it and inherit this. Before anything secret is
 * read. No core dumps either, for the same reason. */
static void memory_closed(void)
{
	if (prctl(PR_SET_DUMPABLE, 0) != 0) {
		fprintf(stderr, "leaserun: cannot make the process undumpable: %s\n",
		        strerror(errno));
		_exit(EXIT_RUNTIME);
	}
}

int main(int argc, char **argv)
{
	memory_closed();
	standard_streams_open();
	return output_written(run_command(argc, argv));
}
