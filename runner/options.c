/* options.c - parsing the flags of a subcommand, and turning the common
 * options into a connected client. Main thread, before any other starts. */
#include "options.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#include "base/stdfd.h"

#define DEFAULT_DIAL_TIMEOUT_S 5.0
/* The library takes a millisecond at least: below, every call would fail
 * at once. */
#define MIN_DIAL_TIMEOUT_S 0.001
#define MAX_DIAL_TIMEOUT_S 3600.0

const char cli_common_help[] =
    "Common options (flag, else environment, else default):\n"
    "  --endpoints H:P[,H:P...]  etcd endpoints (LEASERUN_ENDPOINTS; "
    "127.0.0.1:2379)\n"
    "  --prefix P                key prefix (LEASERUN_PREFIX; /leaserun/)\n"
    "  --cacert FILE             CA certificate: use TLS (LEASERUN_CACERT)\n"
    "  --cert FILE, --key FILE   client certificate and key (LEASERUN_CERT,\n"
    "                            LEASERUN_KEY)\n"
    "  --tls-server-name NAME    name checked against the server certificate:\n"
    "                            use TLS\n"
    "  --user NAME[:PASSWORD]    etcd user (LEASERUN_USER, LEASERUN_PASSWORD;\n"
    "                            asked for on a terminal when missing)\n"
    "  --dial-timeout SECONDS    give up connecting after this (5)\n"
    "  -h, --help                this help\n";

/* The common options as flags writing into *c; `table` has room for 9. */
static void common_flags(cli_common *c, cli_flag *table)
{
	const cli_flag flags[] = {
		{ "endpoints", &c->endpoints, NULL },
		{ "prefix", &c->prefix, NULL },
		{ "cacert", &c->cacert, NULL },
		{ "cert", &c->cert, NULL },
		{ "key", &c->key, NULL },
		{ "tls-server-name", &c->tls_server_name, NULL },
		{ "user", &c->user, NULL },
		{ "dial-timeout", &c->dial_timeout, NULL },
		{ NULL, NULL, NULL },
	};
	memcpy(table, flags, sizeof(flags));
}

static const cli_flag *find_flag(const cli_flag *flags, const char *name,
                                 size_t len)
{
	for (; flags != NULL && flags->name != NULL; flags++)
		if (strlen(flags->name) == len &&
		    strncmp(flags->name, name, len) == 0)
			return flags;
	return NULL;
}

int cli_common_takes_value(const char *arg)
{
	cli_common c;
	cli_flag table[9];

	if (strncmp(arg, "--", 2) != 0 || strchr(arg, '=') != NULL)
		return 0;
	common_flags(&c, table);
	return find_flag(table, arg + 2, strlen(arg + 2)) != NULL;
}

static void print_help(const cli_cmd *cmd)
{
	printf("%s\n%s", cmd->usage, cli_common_help);
}

static int unknown_option(const cli_cmd *cmd, const char *name, size_t len)
{
	char q[CLI_QUOTE_SIZE], *n = strndup(name, len);
	int rc = cli_usage_error("%s: unknown option --%s", cmd->name,
	                         n != NULL ? cli_quote(n, q) : "");
	free(n);
	return rc;
}

/* One "--name[=value]" at argv[*i]; may consume the next argument. */
static int parse_flag(const cli_cmd *cmd, const cli_flag *common, int argc,
                      char **argv, int *i)
{
	const char *arg = argv[*i];
	const char *name = arg + 2;
	const char *eq = strchr(name, '=');
	size_t len = eq != NULL ? (size_t)(eq - name) : strlen(name);
	const cli_flag *f = find_flag(cmd->flags, name, len);
	const char *value;

	if (f == NULL)
		f = find_flag(common, name, len);
	if (f == NULL)
		return unknown_option(cmd, name, len);
	if (f->value == NULL) {
		if (eq != NULL)
			return cli_usage_error("%s: --%s takes no value",
			                       cmd->name, f->name);
		*f->on = 1;
		return CLI_CONTINUE;
	}
	if (eq != NULL) {
		value = eq + 1;
	} else if (*i + 1 < argc) {
		value = argv[++*i];
	} else {
		return cli_usage_error("%s: --%s needs a value", cmd->name,
		                       f->name);
	}
	if (value[0] == '\0')
		return cli_usage_error("%s: --%s: empty value", cmd->name,
		                       f->name);
	/* The last one silently winning would hide a mistake: which did the
	 * user mean? */
	if (*f->value != NULL)
		return cli_usage_error("%s: --%s given twice", cmd->name, f->name);
	*f->value = value;
	return CLI_CONTINUE;
}

int cli_parse(const cli_cmd *cmd, int argc, char **argv, cli_common *common,
              const char **args, int *nargs)
{
	cli_flag table[9];
	char q[CLI_QUOTE_SIZE];
	int only_args = 0;

	common_flags(common, table);
	*nargs = 0;
	for (int i = 0; i < argc; i++) {
		const char *a = argv[i];
		int rc;
		if (!only_args && strcmp(a, "--") == 0) {
			only_args = 1;
		} else if (!only_args &&
		           (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0)) {
			print_help(cmd);
			return EXIT_OK;
		} else if (!only_args && strncmp(a, "--", 2) == 0) {
			rc = parse_flag(cmd, table, argc, argv, &i);
			if (rc != CLI_CONTINUE)
				return rc;
		} else if (!only_args && a[0] == '-' && a[1] != '\0') {
			/* "-" alone is an argument: standard input. */
			return cli_usage_error("%s: unknown option %s", cmd->name,
			                       cli_quote(a, q));
		} else if (*nargs == cmd->max_args) {
			return cli_usage_error("%s: unexpected argument \"%s\"",
			                       cmd->name, cli_quote(a, q));
		} else {
			args[(*nargs)++] = a;
		}
	}
	return CLI_CONTINUE;
}

bool cli_digits(const char *s)
{
	return s[0] != '\0' && s[strspn(s, "0123456789")] == '\0';
}

int cli_int(const char *flag, const char *s, long lo, long hi, long *out)
{
	char q[CLI_QUOTE_SIZE];
	long v = 0;
	bool digits = cli_digits(s);

	errno = 0;
	if (digits)
		v = strtol(s, NULL, 10);
	if (!digits || errno != 0 || v < lo || v > hi)
		return cli_usage_error("%s: expected a whole number from %ld to "
		                       "%ld, got \"%s\"", flag, lo, hi, cli_quote(s, q));
	*out = v;
	return CLI_CONTINUE;
}

int cli_check_id(const char *cmd, const char *id)
{
	char q[CLI_QUOTE_SIZE];

	if (lr_id_valid(id))
		return CLI_CONTINUE;
	return cli_usage_error("%s: \"%s\" is not a valid task id (1 to %d of A-Z a-z "
	                       "0-9 . _ : -)", cmd, cli_quote(id, q), LR_ID_SIZE - 1);
}

int cli_check_stdin(const char *cmd)
{
	/* Closed when the command started: its number is gRPC's now
	 * (base/stdfd.h). */
	if (!lr_fd_is_anon(0))
		return CLI_CONTINUE;
	fprintf(stderr, "leaserun: %s: standard input is closed\n", cmd);
	return EXIT_USAGE;
}

/* lo or hi in a message: whole seconds without a fraction. */
static int seconds_digits(double s)
{
	return s == floor(s) ? 0 : 3;
}

int cli_seconds(const char *flag, const char *s, double lo, double hi, double *out)
{
	static const char digits[] = "0123456789";
	size_t whole = strspn(s, digits);
	size_t point = s[whole] == '.';
	size_t frac = point ? strspn(s + whole + 1, digits) : 0;
	/* Decimal alone: strtod would take 0x10 as 16, and 1e3, inf, nan. */
	bool decimal = s[whole + point + frac] == '\0' && whole + frac > 0;
	double v = decimal ? strtod(s, NULL) : 0;

	if (!decimal || v < lo || v > hi) {
		char q[CLI_QUOTE_SIZE];
		return cli_usage_error("%s: expected seconds from %.*f to %.*f, got \"%s\"", flag,
		                       seconds_digits(lo), lo, seconds_digits(hi), hi,
		                       cli_quote(s, q));
	}
	*out = v;
	return CLI_CONTINUE;
}

/* ---- connecting ---------------------------------------------------------- */

/* The flag, else the environment variable (empty counts as unset). */
static const char *pick(const char *flag, const char *env)
{
	const char *v = flag != NULL ? flag : getenv(env);

	return v != NULL && v[0] != '\0' ? v : NULL;
}

static int dial_timeout(const cli_common *o, double *out)
{
	*out = DEFAULT_DIAL_TIMEOUT_S;
	if (o->dial_timeout == NULL)
		return CLI_CONTINUE;
	return cli_seconds("--dial-timeout", o->dial_timeout, MIN_DIAL_TIMEOUT_S,
	                   MAX_DIAL_TIMEOUT_S, out);
}

/* The terminal a password prompt turned echo off on, to turn it back on if
 * a signal ends the command meanwhile. Main thread only. */
static int prompt_fd = -1;
static struct termios prompt_saved;
static const int prompt_signals[] = { SIGINT, SIGTERM, SIGHUP, SIGQUIT };
#define N_PROMPT_SIGNALS (sizeof(prompt_signals) / sizeof(prompt_signals[0]))

static void restore_echo_and_die(int sig)
{
	if (prompt_fd >= 0)
		tcsetattr(prompt_fd, TCSAFLUSH, &prompt_saved);
	signal(sig, SIG_DFL);
	raise(sig);
}

/* Echo off on the terminal fd; a signal that ends the command turns it
 * back on first. echo_on undoes both. */
static int echo_off(int fd, struct sigaction old[N_PROMPT_SIGNALS])
{
	struct sigaction quit = { .sa_handler = restore_echo_and_die };
	struct termios quiet;

	if (tcgetattr(fd, &prompt_saved) != 0)
		return -1;
	quiet = prompt_saved;
	quiet.c_lflag &= ~(tcflag_t)ECHO;
	quiet.c_lflag |= ECHONL;
	sigemptyset(&quit.sa_mask);
	prompt_fd = fd;
	for (size_t i = 0; i < N_PROMPT_SIGNALS; i++)
		sigaction(prompt_signals[i], &quit, &old[i]);
	tcsetattr(fd, TCSAFLUSH, &quiet);
	return 0;
}

static void echo_on(int fd, const struct sigaction old[N_PROMPT_SIGNALS])
{
	tcsetattr(fd, TCSAFLUSH, &prompt_saved);
	for (size_t i = 0; i < N_PROMPT_SIGNALS; i++)
		sigaction(prompt_signals[i], &old[i], NULL);
	prompt_fd = -1;
}

/* One line from fd without its newline, at most size - 1 bytes kept; -1 on
 * end of input before any newline. */
static int read_line(int fd, char *buf, size_t size)
{
	size_t len = 0;
	for (;;) {
		char ch;
		ssize_t n = read(fd, &ch, 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			buf[len] = '\0';
			return -1;
		}
		if (ch == '\n' || ch == '\r')
			break;
		if (len + 1 < size)
			buf[len++] = ch;
	}
	buf[len] = '\0';
	return 0;
}

/* Ask on the terminal without echo. Only when standard input is a terminal
 * (a command in a pipe or a test never waits for a person); the question
 * and the answer go through /dev/tty, so that a spec read from standard
 * input before does not get in the way. NULL when there is no terminal or
 * nothing was typed: the connection then goes without a password and etcd
 * says what it thinks of that. */
static char *prompt_password(const char *user)
{
	struct sigaction old[N_PROMPT_SIGNALS];
	char buf[1024];
	char *line = NULL;

	if (!isatty(STDIN_FILENO))
		return NULL;
	int fd = open("/dev/tty", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		fd = dup(STDIN_FILENO);
	if (fd < 0)
		return NULL;
	/* Echo off before the question, so that no answer ever shows. */
	if (echo_off(fd, old) == 0) {
		dprintf(fd, "Password for etcd user %s: ", user);
		if (read_line(fd, buf, sizeof(buf)) == 0)
			line = strdup(buf);
		echo_on(fd, old);
		explicit_bzero(buf, sizeof(buf));
	}
	close(fd);
	return line;
}

static void free_secret(char *s)
{
	if (s != NULL)
		explicit_bzero(s, strlen(s));
	free(s);
}

/* Over a password where ps and /proc/<pid>/ show it (the command line, the
 * environment block): "*****" whatever its length, then NUL bytes. */
static void mask_secret(char *s)
{
	static const char mask[] = "*****";
	size_t len = strlen(s);
	size_t n = len < sizeof(mask) - 1 ? len : sizeof(mask) - 1;

	memcpy(s, mask, n);
	memset(s + n, '\0', len - n);
}

/* A copy of the environment variable's value (NULL when unset or empty),
 * which is then wiped where it was and removed: no step inherits it, and
 * /proc/<pid>/environ no longer shows it. */
static char *take_secret_env(const char *name)
{
	char *v = getenv(name);
	char *copy = v != NULL && v[0] != '\0' ? strdup(v) : NULL;

	if (v != NULL)
		explicit_bzero(v, strlen(v));
	unsetenv(name);
	return copy;
}

/* The etcd user and password: "--user name:password", else LEASERUN_USER
 * (which may also carry ":password"), LEASERUN_PASSWORD, else a prompt.
 * The password is then wiped from the command line (so `ps` does not show
 * it) and from the environment (so that no step inherits it). */
static int credentials(const cli_common *o, char **user, char **password)
{
	/* LEASERUN_USER's password leaves the environment block even when
	 * --user wins and nothing reads it. */
	char *env_user = getenv("LEASERUN_USER");
	char *env_colon = env_user != NULL && o->user != NULL ? strchr(env_user, ':') : NULL;
	if (env_colon != NULL)
		mask_secret(env_colon + 1);
	const char *given = pick(o->user, "LEASERUN_USER");
	char *from_env = take_secret_env("LEASERUN_PASSWORD");
	const char *colon;

	*user = NULL;
	*password = NULL;
	if (given == NULL) {
		free_secret(from_env);
		return CLI_CONTINUE;
	}
	colon = strchr(given, ':');
	*user = colon != NULL ? strndup(given, (size_t)(colon - given))
	                      : strdup(given);
	if (colon != NULL) {
		*password = strdup(colon + 1);
		mask_secret((char *)colon + 1);
	} else if (from_env != NULL) {
		*password = from_env;
		from_env = NULL;
	} else {
		*password = prompt_password(*user);
	}
	free_secret(from_env);
	if (getenv("LEASERUN_USER") != NULL && *user != NULL)
		setenv("LEASERUN_USER", *user, 1);
	if (*user == NULL || (*user)[0] == '\0')
		return cli_usage_error("--user: the user name is empty");
	return CLI_CONTINUE;
}

int cli_open(const cli_common *o, lr_client **out)
{
	lr_client_opts co = {
		.endpoints = pick(o->endpoints, "LEASERUN_ENDPOINTS"),
		.prefix = pick(o->prefix, "LEASERUN_PREFIX"),
		.cacert = pick(o->cacert, "LEASERUN_CACERT"),
		.cert = pick(o->cert, "LEASERUN_CERT"),
		.key = pick(o->key, "LEASERUN_KEY"),
		.tls_server_name = o->tls_server_name,
	};
	char *user = NULL, *password = NULL;
	lr_err err = { 0 };
	int rc;

	*out = NULL;
	if ((co.cert == NULL) != (co.key == NULL))
		return cli_usage_error("--cert and --key must be given together");
	rc = dial_timeout(o, &co.dial_timeout_s);
	/* A link slow enough to need a longer dial needs longer calls too. */
	if (co.dial_timeout_s > DEFAULT_DIAL_TIMEOUT_S)
		co.call_timeout_s = co.dial_timeout_s;
	if (rc == CLI_CONTINUE)
		rc = credentials(o, &user, &password);
	if (rc == CLI_CONTINUE) {
		co.user = user;
		co.password = password;
		if (lr_client_open(&co, out, &err) != 0)
			rc = cli_fail(&err);
	}
	free(user);
	free_secret(password);
	return rc;
}

int cli_parse_id_and_open(const cli_cmd *cmd, int argc, char **argv, const char **id,
                          lr_client **out)
{
	cli_common common = { 0 };
	const char *args[1] = { NULL };
	int nargs = 0;
	int rc = cli_parse(cmd, argc, argv, &common, args, &nargs);
	if (rc != CLI_CONTINUE)
		return rc;
	if (nargs == 0)
		return cli_usage_error("%s: missing task ID", cmd->name);
	rc = cli_check_id(cmd->name, args[0]);
	if (rc != CLI_CONTINUE)
		return rc;
	*id = args[0];
	return cli_open(&common, out);
}

void cli_made_within(cli_within *w)
{
	size_t n = 0;
	const char *id = getenv("LEASERUN_TASK_ID");
	if (id != NULL && lr_id_valid(id)) {
		snprintf(w->task, sizeof(w->task), "task:%s", id);
		w->holders[n++] = w->task;
	}
	id = getenv("LEASERUN_HOLD");
	if (id != NULL && lr_id_valid(id)) {
		snprintf(w->run, sizeof(w->run), "run:%s", id);
		w->holders[n++] = w->run;
	}
	w->holders[n] = NULL;
}
