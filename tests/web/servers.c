/* servers.c - starting `leaserun web` and metrics workers for the tests,
 * and reading what they serve. Test thread only. */
#include "servers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "httpc.h"
#include "test.h"

etcdh_cluster *web_etcd;

int web_etcd_start(void)
{
	etcdh_opts o = { .members = 1 };
	return etcdh_start(&o, &web_etcd);
}

void web_etcd_stop(void)
{
	etcdh_destroy(web_etcd);
}

/* Wait for "<marker>HOST:PORT" in the file at path; into addr. */
static bool find_address(const char *path, const char *marker, char addr[ADDR_SIZE],
                         int timeout_ms)
{
	int64_t end = lr_mono_ms() + timeout_ms;

	do {
		char *text = proc_slurp(path);
		char *at = strstr(text, marker);
		if (at != NULL) {
			at += strlen(marker);
			size_t n = strcspn(at, "/\" \n");
			if (n > 0 && n < ADDR_SIZE && at[n] == '/') {
				memcpy(addr, at, n);
				addr[n] = '\0';
				free(text);
				return true;
			}
		}
		free(text);
		lr_sleep_ms(20);
	} while (lr_mono_ms() < end);
	return false;
}

void web_start(proc_bg *p, fleet *f, bool allow_cancel, char addr[ADDR_SIZE])
{
	const char *extra[] = { allow_cancel ? "--allow-cancel" : NULL, NULL };
	web_start_with(p, f, extra, addr);
}

void web_start_with(proc_bg *p, fleet *f, const char *const *extra, char addr[ADDR_SIZE])
{
	char log[320];
	const char *args[16] = { "web", "--endpoints", f->endpoints, "--prefix", f->prefix,
		                 "--listen", "127.0.0.1:0" };
	int n = 7;
	for (int k = 0; extra != NULL && extra[k] != NULL && n < 15; k++)
		args[n++] = extra[k];
	args[n] = NULL;
	char *argv[16];

	snprintf(log, sizeof(log), "%s/web.log", f->dir);
	proc_cli_argv(argv, 16, args);
	proc_start(p, argv, NULL, log);
	if (!find_address(log, "http://", addr, 10000))
		TEST_FAIL("leaserun web did not say where it listens (see %s)", log);
}

void metrics_worker_start(fleet *f, int i, const char *const *extra,
                          char addr[ADDR_SIZE])
{
	const char *flags[16] = { "--metrics", "127.0.0.1:0" };
	int n = 2;
	char log[320];

	for (int k = 0; extra != NULL && extra[k] != NULL && n < 15; k++)
		flags[n++] = extra[k];
	flags[n] = NULL;
	/* Killed with the test's thread, also when the test fails. */
	char name[32];
	snprintf(name, sizeof(name), "r%d", i);
	fleet_start_named(f, i, name, NULL, flags);
	snprintf(log, sizeof(log), "%s/%s.log", f->dir, f->names[i]);
	if (!find_address(log, "metrics on http://", addr, 10000))
		TEST_FAIL("runner %d did not say where its metrics are (see %s)", i, log);
}

double metric_value(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *line = text; line != NULL && *line != '\0';) {
		if (strncmp(line, series, n) == 0 && line[n] == ' ')
			return strtod(line + n + 1, NULL);
		line = strchr(line, '\n');
		if (line != NULL)
			line++;
	}
	return -1;
}

char *metrics_get(const char *addr)
{
	http_resp r = http_get(addr, "/metrics", NULL, 5000);
	if (r.status != 200)
		TEST_FAIL("GET http://%s/metrics: status %d", addr, r.status);
	char *text = r.body;
	r.body = NULL;
	http_resp_free(&r);
	return text;
}

void promtool_check(const char *text)
{
	const char *tool = getenv("PROMTOOL");
	if (tool == NULL || tool[0] == '\0')
		tool = "/usr/bin/promtool";
	if (access(tool, X_OK) != 0)
		TEST_FAIL("%s not found: scripts/bootstrap installs Debian's prometheus "
		          "(or set PROMTOOL)", tool);
	char *const argv[] = { (char *)tool, "check", "metrics", NULL };
	proc_result r = proc_run(argv, NULL, text, 30000);
	if (r.status != 0) {
		fprintf(stderr, "  promtool: %s%s\n", r.out, r.err);
		proc_result_free(&r);
		TEST_FAIL("promtool check metrics refused the metrics");
	}
	proc_result_free(&r);
}
