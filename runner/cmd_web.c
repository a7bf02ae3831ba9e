/* cmd_web.c - `leaserun web`: serve the live page until SIGINT or SIGTERM.
 * Main thread; it waits for the signals on a signalfd while the library's
 * threads serve. */
#include <malloc.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "http/server.h"
#include "options.h"
#include "web/web.h"

static const char usage[] =
    "Usage: leaserun web [--listen ADDR:PORT] [--allow-cancel] [--allow-host NAMES]\n"
    "\n"
    "Serve a live web page of the tasks (state, step, attempt, runner, age,\n"
    "error, and each task's steps, state and history), the live runners and\n"
    "their lease TTL, and the locks and limits held and waited for. Changes\n"
    "reach the page as they happen in etcd (server-sent events). Read-only\n"
    "unless --allow-cancel. Runs until SIGINT or SIGTERM.\n"
    "\n"
    "  --listen ADDR:PORT  where to listen (default 127.0.0.1:8080; a value\n"
    "                      without address, \":8080\", means 127.0.0.1;\n"
    "                      port 0 picks a free one). The page has no login\n"
    "                      and no TLS: to show it beyond this machine, put\n"
    "                      it behind a TLS proxy (docs/observability.md)\n"
    "  --allow-cancel      let the page cancel tasks\n"
    "  --allow-host NAMES  names (comma-separated) the page is served under\n"
    "                      besides IP addresses, localhost and the listen\n"
    "                      address's name: a proxy's public name. Requests\n"
    "                      naming another host in Host get 403\n"
    "\n"
    "It prints the page's address (http://ADDR:PORT/) on a line of its own.\n"
    "Exit status: 0 after SIGINT/SIGTERM, 1 etcd error or the address\n"
    "cannot be listened on, 2 bad flags.\n";

/* Whether list is names separated by commas, each a host name. */
static bool host_names(const char *list)
{
	for (const char *p = list;; p++) {
		size_t n = strspn(p, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		                     "0123456789.-");
		if (n == 0 || n > 253 || (p[n] != ',' && p[n] != '\0'))
			return false;
		p += n;
		if (*p == '\0')
			return true;
	}
}

/* Block until SIGINT or SIGTERM arrives on fd. */
static void wait_for_stop(int fd)
{
	struct signalfd_siginfo si;

	while (read(fd, &si, sizeof(si)) != (ssize_t)sizeof(si))
		;
}

int cmd_web(int argc, char **argv)
{
	const char *listen = NULL, *allow_hosts = NULL;
	int allow_cancel = 0;
	const cli_flag flags[] = {
		{ "listen", &listen, NULL },
		{ "allow-cancel", NULL, &allow_cancel },
		{ "allow-host", &allow_hosts, NULL },
		{ NULL, NULL, NULL },
	};
	const cli_cmd cmd = { "web", usage, flags, 0 };
	cli_common common = { 0 };
	lr_client *c = NULL;
	lr_web *w = NULL;
	lr_err err = { 0 };
	int nargs, sfd = -1;
	char q[CLI_QUOTE_SIZE];

	int rc = cli_parse(&cmd, argc, argv, &common, NULL, &nargs);
	if (rc != CLI_CONTINUE)
		return rc;
	if (listen != NULL) {
		/* A bad address is a usage error, found before connecting. */
		struct sockaddr_storage sa;
		socklen_t sa_len;
		if (lr_http_parse_address(listen, &sa, &sa_len, &err) != 0)
			return cli_usage_error("--listen: %s", err.msg);
	}
	if (allow_hosts != NULL && !host_names(allow_hosts))
		return cli_usage_error("--allow-host: expected host names separated by "
		                       "commas, got \"%s\"", cli_quote(allow_hosts, q));
	/* Each page's thread builds its snapshot (megabytes for thousands of
	 * tasks); glibc would keep the memory freed in a pool per thread. */
	mallopt(M_ARENA_MAX, 2);
	sfd = cli_stop_signal_fd();
	if (sfd < 0) {
		fputs("leaserun: web: cannot wait for signals\n", stderr);
		return EXIT_RUNTIME;
	}
	rc = cli_open(&common, &c);
	if (rc != CLI_CONTINUE)
		goto out;
	lr_web_opts o = { .listen = listen, .allow_cancel = allow_cancel != 0,
		          .allow_hosts = allow_hosts };
	if (lr_web_start(c, &o, &w, &err) != 0) {
		rc = cli_fail(&err);
		goto out;
	}
	printf("http://%s/\n", lr_web_address(w));
	fflush(stdout);
	wait_for_stop(sfd);
	rc = EXIT_OK;
out:
	lr_web_stop(w);
	lr_client_close(c);
	close(sfd);
	return rc;
}
