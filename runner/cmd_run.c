/* cmd_run.c - `leaserun run [--lock PATH[=MODE]]... [--limit KEY=N]...
 * [--ttl S] [--wait S] -- COMMAND [ARG...]`: hold locks and slots while a
 * command runs under a guard, and exit with its status. Main thread. */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "client/lock_keys.h"
#include "exec/orphans.h"
#include "options.h"
#include "output.h"

static const char usage[] =
    "Usage: leaserun run [--lock PATH[=MODE]]... [--limit KEY=N]... [--ttl S]\n"
    "                    [--wait S] [--grace S] -- COMMAND [ARG...]\n"
    "\n"
    "Take every lock and slot at once, on a lease of its own, waiting for\n"
    "them first come, first served; run COMMAND while they are held; give\n"
    "them back when it ends, and exit with its status (128 + N when signal N\n"
    "ended it). If the lease is lost, COMMAND is stopped before it can\n"
    "expire. COMMAND gets LEASERUN_FENCE (the hold's fencing token),\n"
    "LEASERUN_LOCKS, LEASERUN_SLOTS (JSON) and LEASERUN_HOLD (its id).\n"
    "\n"
    "  --lock PATH[=MODE]  lock PATH (segments of A-Z a-z 0-9 . _ : - joined\n"
    "                      by /) in MODE: IS, IX, S, SIX or X (default X)\n"
    "  --limit KEY=N       take one of N slots of the pool KEY\n"
    "  --ttl S             the lease's TTL in seconds (default 10)\n"
    "  --wait S            give up after S seconds (default: wait forever)\n"
    "  --grace S           SIGTERM to SIGKILL when COMMAND must stop (default 5)\n"
    "\n"
    "Exit status: COMMAND's; 5 when --wait ran out (naming a holder); 2 an\n"
    "invalid lock, limit or option; 1 etcd error or a lost lease; 127 COMMAND\n"
    "not found; 126 COMMAND found but not runnable.\n";

/* A year: beyond, nobody is waiting any more. */
#define MAX_WAIT_S 31536000.0

/* One --lock PATH[=MODE] or --limit KEY=N (v) into the request. Each is
 * checked here, since jansson takes no text that is not UTF-8: a value it
 * refused would otherwise be left out of the request without a word. */
static int add_request(bool lock, const char *v, json_t *locks, json_t *limits)
{
	const char *flag = lock ? "--lock" : "--limit";
	char q[CLI_QUOTE_SIZE];
	if (!cli_utf8_valid(v))
		return cli_usage_error("run: %s \"%s\": not valid UTF-8", flag, cli_quote(v, q));
	const char *eq = strrchr(v, '=');
	char *key = strndup(v, eq != NULL ? (size_t)(eq - v) : strlen(v));
	json_t *value = NULL;
	int rc = CLI_CONTINUE;
	if (key == NULL)
		goto nomem;
	if (json_object_get(lock ? locks : limits, key) != NULL) {
		rc = cli_usage_error("run: %s %s given twice", flag, cli_quote(key, q));
		goto out;
	}
	if (lock) {
		value = json_string(eq != NULL ? eq + 1 : "X");
	} else {
		/* Digits alone, as a spec's limit is a JSON number. Too many
		 * digits saturate, and lr_hold_check names the limit as out
		 * of range. */
		const char *n = eq != NULL ? eq + 1 : "";
		if (!cli_digits(n)) {
			rc = cli_usage_error("run: --limit %s: expected KEY=N", cli_quote(v, q));
			goto out;
		}
		value = json_integer(strtol(n, NULL, 10));
	}
	if (value == NULL || json_object_set_new(lock ? locks : limits, key, value) != 0)
		goto nomem;
out:
	free(key);
	return rc;
nomem:
	free(key);
	fputs("leaserun: run: out of memory\n", stderr);
	return EXIT_RUNTIME;
}

/* Take --lock and --limit out of args (they repeat), into the request. */
static int take_request(int *argc, char **argv, json_t *locks, json_t *limits)
{
	int out = 0;
	for (int i = 0; i < *argc; i++) {
		const char *a = argv[i], *v = NULL;
		bool lock = false, limit = false;
		if (strcmp(a, "--") == 0) {
			while (i < *argc)
				argv[out++] = argv[i++];
			break;
		}
		if ((lock = strcmp(a, "--lock") == 0) || (limit = strcmp(a, "--limit") == 0)) {
			if (i + 1 >= *argc)
				return cli_usage_error("run: %s needs a value", a);
			v = argv[++i];
		} else if ((lock = strncmp(a, "--lock=", 7) == 0)) {
			v = a + 7;
		} else if ((limit = strncmp(a, "--limit=", 8) == 0)) {
			v = a + 8;
		} else {
			argv[out++] = argv[i];
			continue;
		}
		int rc = add_request(lock, v, locks, limits);
		if (rc != CLI_CONTINUE)
			return rc;
	}
	argv[out] = NULL; /* COMMAND's argv ends here */
	*argc = out;
	return CLI_CONTINUE;
}

/* lr_hold_opts.log: a warning while waiting, on one line. */
static void warn_line(void *user, const lr_log_record *rec)
{
	(void)user;
	char *shown = out_one_line(rec->msg);
	fprintf(stderr, "leaserun: run: %s\n", shown != NULL ? shown : rec->msg);
	free(shown);
}

/* The library says "hold: ..." of its holds; here the user ran `run`.
 * The message may name a holder as its key in etcd has it, which anyone
 * with write access could have filled with escape sequences: shown on one
 * line, as `locks` and `status` show holders. */
static int acquire_failed(lr_err *err)
{
	static const char lib[] = "hold: ";
	char *shown = out_one_line(err->msg);
	if (shown != NULL) /* never longer than the message */
		snprintf(err->msg, sizeof(err->msg), "%s", shown);
	free(shown);
	if (strncmp(err->msg, lib, sizeof(lib) - 1) == 0) {
		fprintf(stderr, "leaserun: run: %s\n", err->msg + sizeof(lib) - 1);
		return cli_exit_code(err->code);
	}
	return cli_fail(err);
}

int cmd_run(int argc, char **argv)
{
	const char *ttl_s = NULL, *wait_s = NULL, *grace_s = NULL;
	const cli_flag flags[] = { { "ttl", &ttl_s, NULL }, { "wait", &wait_s, NULL },
	                           { "grace", &grace_s, NULL }, { NULL, NULL, NULL } };
	const cli_cmd cmd = { "run", usage, flags, 0 };
	cli_common common = { 0 };
	json_t *locks = json_object(), *limits = json_object();
	lr_client *c = NULL;
	lr_hold *h = NULL;
	lr_err err = { 0 };
	long ttl = 10, grace = 5;
	int nargs = 0;
	double wait = -1;

	int rc = take_request(&argc, argv, locks, limits);
	int dash = 0;
	while (dash < argc && strcmp(argv[dash], "--") != 0)
		dash++;
	if (rc == CLI_CONTINUE)
		rc = cli_parse(&cmd, dash, argv, &common, NULL, &nargs);
	if (rc == CLI_CONTINUE && dash + 1 >= argc)
		rc = cli_usage_error("run: missing -- COMMAND [ARG...]");
	if (rc == CLI_CONTINUE && json_object_size(locks) + json_object_size(limits) == 0)
		rc = cli_usage_error("run: nothing to hold: give --lock or --limit");
	if (rc == CLI_CONTINUE && ttl_s != NULL)
		rc = cli_int("--ttl", ttl_s, 1, CLI_TTL_MAX_S, &ttl);
	if (rc == CLI_CONTINUE && grace_s != NULL)
		rc = cli_int("--grace", grace_s, 0, CLI_GRACE_MAX_S, &grace);
	if (rc == CLI_CONTINUE && wait_s != NULL)
		rc = cli_seconds("--wait", wait_s, 0, MAX_WAIT_S, &wait);
	cli_within within;
	cli_made_within(&within);
	lr_hold_opts o = { .locks = json_object_size(locks) ? locks : NULL,
	                   .limits = json_object_size(limits) ? limits : NULL,
	                   .ttl_s = ttl, .wait_ms = wait < 0 ? -1 : (int64_t)(wait * 1000),
	                   .cancel_fd = -1, .log = warn_line, .within = within.holders };
	/* Bad input is exit 2 whether etcd answers or not. */
	if (rc == CLI_CONTINUE && lr_hold_check(&o, &err) != 0)
		rc = cli_usage_error("run: %s", err.msg);
	int stop_fd = rc == CLI_CONTINUE ? cli_stop_signal_fd() : -1;
	if (rc == CLI_CONTINUE)
		rc = cli_open(&common, &c);
	if (rc == CLI_CONTINUE) {
		o.cancel_fd = stop_fd;
		if (lr_hold_acquire(c, &o, &h, &err) != 0)
			rc = err.code == LR_ECANCELLED ? 128 + cli_stop_signal_read(stop_fd)
			                               : acquire_failed(&err);
	}
	if (rc == CLI_CONTINUE) {
		int ws = 0;
		/* Its only child is the guard: what a killed guard leaves
		 * comes here and is stopped before the locks are given back. */
		(void)lr_orphans_adopt();
		int erc = lr_hold_exec(h, argv + dash + 1, stop_fd, grace * 1000, &ws, &err);
		if (erc == LR_ENOTFOUND) {
			fprintf(stderr, "leaserun: %s\n", err.msg);
			rc = 127;
		} else if (erc != 0) {
			rc = cli_fail(&err);
		} else {
			rc = WIFEXITED(ws) ? WEXITSTATUS(ws) : 128 + WTERMSIG(ws);
		}
		lr_err rel = { 0 };
		if (lr_hold_release(h, &rel) != 0)
			cli_fail(&rel); /* said; the lease expires on its own */
	}
	if (c != NULL)
		lr_client_close(c);
	if (stop_fd >= 0)
		close(stop_fd);
	json_decref(locks);
	json_decref(limits);
	return rc;
}
