/* cdp.c - a minimal DevTools protocol client for the page tests: launch,
 * one flat session on one page, evaluate, screenshot. Test thread only. */
#define _XOPEN_SOURCE 700
#include "cdp.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "exec/exec.h"
#include "test.h"

#define CALL_TIMEOUT_MS 20000

static const char *chromium_path(void)
{
	const char *p = getenv("CHROMIUM");

	return p != NULL && p[0] != '\0' ? p : "/usr/bin/chromium";
}

/* Exec the browser with its DevTools pipe on fds 3 (in) and 4 (out). */
/* In the forked child: only async-signal-safe calls until the exec (a
 * thread of the parent may have held a lock at the fork). path, profile_flag
 * and env are made before the fork. */
static void exec_browser(cdp *b, int in, int out, const char *path,
                         const char *profile_flag, char *const *env)
{
	int log = open(b->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* Out of the way of 3 and 4 first, then onto them (dup2 clears
	 * close-on-exec). */
	in = fcntl(in, F_DUPFD, 10);
	out = fcntl(out, F_DUPFD, 10);
	if (in < 0 || out < 0 || dup2(in, 3) != 3 || dup2(out, 4) != 4)
		_exit(126);
	if (log >= 0) {
		dup2(log, 1);
		dup2(log, 2);
	}
	execle(path, "chromium", "--headless", "--no-sandbox", "--disable-gpu",
	       "--disable-quic", "--no-first-run", "--disable-background-networking",
	       "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
	       "--no-default-browser-check", "--hide-scrollbars", "--mute-audio",
	       profile_flag, "--remote-debugging-pipe", "about:blank", (char *)NULL, env);
	_exit(127);
}

/* ---- messages ------------------------------------------------------------ */

static void send_message(cdp *b, json_t *msg)
{
	char *text = json_dumps(msg, JSON_COMPACT);
	size_t len = strlen(text) + 1; /* with its NUL: the separator */
	const char *p = text;

	json_decref(msg);
	while (len > 0) {
		ssize_t w = write(b->to, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			free(text);
			TEST_FAIL("DevTools pipe closed (see %s)", b->log);
		}
		p += w;
		len -= (size_t)w;
	}
	free(text);
}

/* The next whole message, or NULL at the deadline. New reference. */
static json_t *read_message(cdp *b, int64_t deadline)
{
	for (;;) {
		char *nul = b->len > 0 ? memchr(b->buf, '\0', b->len) : NULL;
		if (nul != NULL) {
			size_t n = (size_t)(nul - b->buf);
			json_t *m = json_loadb(b->buf, n, 0, NULL);
			memmove(b->buf, nul + 1, b->len - n - 1);
			b->len -= n + 1;
			if (m != NULL)
				return m;
			continue;
		}
		int64_t wait = deadline - lr_mono_ms();
		struct pollfd p = { .fd = b->from, .events = POLLIN };
		if (wait <= 0 || poll(&p, 1, (int)wait) <= 0)
			return NULL;
		if (b->len + 65536 > b->cap) {
			b->cap = (b->len + 65536) * 2;
			b->buf = realloc(b->buf, b->cap);
		}
		ssize_t got = read(b->from, b->buf + b->len, b->cap - b->len);
		if (got <= 0)
			TEST_FAIL("the browser closed its DevTools pipe (see %s)", b->log);
		b->len += (size_t)got;
	}
}

/* Send a command (steals params) and wait for its reply; its "result"
 * (new reference). Events in between are dropped. */
static json_t *call(cdp *b, bool on_page, const char *method, json_t *params)
{
	int id = ++b->next_id;
	json_t *msg = json_pack("{s:i, s:s, s:o}", "id", id, "method", method, "params",
	                        params != NULL ? params : json_object());
	int64_t deadline = lr_mono_ms() + CALL_TIMEOUT_MS;

	if (on_page)
		json_object_set_new(msg, "sessionId", json_string(b->session));
	send_message(b, msg);
	for (;;) {
		json_t *m = read_message(b, deadline);
		if (m == NULL)
			TEST_FAIL("no reply to %s within %d ms (see %s)", method,
			          CALL_TIMEOUT_MS, b->log);
		if (json_integer_value(json_object_get(m, "id")) != id) {
			json_decref(m);
			continue;
		}
		json_t *error = json_object_get(m, "error");
		if (error != NULL) {
			char *e = json_dumps(error, JSON_COMPACT);
			fprintf(stderr, "  %s: %s\n", method, e);
			free(e);
			json_decref(m);
			TEST_FAIL("%s failed", method);
		}
		json_t *result = json_incref(json_object_get(m, "result"));
		json_decref(m);
		return result != NULL ? result : json_object();
	}
}

/* ---- the browser ----------------------------------------------------------- */

void cdp_launch(cdp *b, const char *dir, int width, int height)
{
	int in[2], out[2];

	memset(b, 0, sizeof(*b));
	if (access(chromium_path(), X_OK) != 0)
		TEST_FAIL("%s not found: scripts/bootstrap installs Debian's chromium "
		          "(or set CHROMIUM)", chromium_path());
	snprintf(b->profile, sizeof(b->profile), "%s/chromium-XXXXXX", dir);
	CHECK(mkdtemp(b->profile) != NULL);
	snprintf(b->log, sizeof(b->log), "%s.log", b->profile);
	CHECK(pipe2(in, O_CLOEXEC) == 0 && pipe2(out, O_CLOEXEC) == 0);
	/* Whatever the browser writes under $HOME goes with the profile. */
	char home[300], profile_flag[300];
	snprintf(home, sizeof(home), "HOME=%s", b->profile);
	snprintf(profile_flag, sizeof(profile_flag), "--user-data-dir=%s", b->profile);
	const char *const add[] = { home, NULL };
	char **env = lr_exec_env_build(environ, NULL, add);
	CHECK(env != NULL);
	const char *path = chromium_path();
	b->pid = fork();
	if (b->pid == 0)
		exec_browser(b, in[0], out[1], path, profile_flag, env);
	lr_exec_env_free(env);
	CHECK(b->pid >= 0);
	close(in[0]);
	close(out[1]);
	b->to = in[1];
	b->from = out[0];

	json_t *r = call(b, false, "Target.createTarget",
	                 json_pack("{s:s}", "url", "about:blank"));
	char target[128];
	snprintf(target, sizeof(target), "%s",
	         json_string_value(json_object_get(r, "targetId")));
	json_decref(r);
	r = call(b, false, "Target.attachToTarget",
	         json_pack("{s:s, s:b}", "targetId", target, "flatten", 1));
	snprintf(b->session, sizeof(b->session), "%s",
	         json_string_value(json_object_get(r, "sessionId")));
	json_decref(r);
	json_decref(call(b, true, "Emulation.setDeviceMetricsOverride",
	                 json_pack("{s:i, s:i, s:i, s:b}", "width", width, "height",
	                           height, "deviceScaleFactor", 1, "mobile", 0)));
	json_decref(call(b, true, "Page.enable", NULL));
	/* In front and focused, as a person's page would be: hidden pages
	 * get no animation frames. */
	json_decref(call(b, true, "Page.bringToFront", NULL));
	json_decref(call(b, true, "Emulation.setFocusEmulationEnabled",
	                 json_pack("{s:b}", "enabled", 1)));
}

void cdp_navigate(cdp *b, const char *url)
{
	json_decref(call(b, true, "Page.navigate", json_pack("{s:s}", "url", url)));
	if (cdp_wait_for(b, 10000, "document.readyState === 'complete'") < 0)
		TEST_FAIL("%s did not load within 10 s", url);
}

static json_t *veval(cdp *b, const char *fmt, va_list ap)
{
	char *expr = NULL;

	CHECK(vasprintf(&expr, fmt, ap) >= 0);
	json_t *r = call(b, true, "Runtime.evaluate",
	                 json_pack("{s:s, s:b, s:b}", "expression", expr,
	                           "returnByValue", 1, "awaitPromise", 1));
	json_t *exc = json_object_get(r, "exceptionDetails");
	if (exc != NULL) {
		json_t *d = json_object_get(json_object_get(exc, "exception"), "description");
		fprintf(stderr, "  %s\n  threw: %s\n", expr,
		        d != NULL ? json_string_value(d)
		                  : json_string_value(json_object_get(exc, "text")));
		free(expr);
		json_decref(r);
		TEST_FAIL("a script in the page threw");
	}
	free(expr);
	json_t *v = json_incref(json_object_get(json_object_get(r, "result"), "value"));
	json_decref(r);
	return v != NULL ? v : json_null();
}

json_t *cdp_eval(cdp *b, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	json_t *v = veval(b, fmt, ap);
	va_end(ap);
	return v;
}

void cdp_run(cdp *b, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	json_decref(veval(b, fmt, ap));
	va_end(ap);
}

int cdp_eval_bool(cdp *b, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	json_t *v = veval(b, fmt, ap);
	va_end(ap);
	int r = json_is_true(v);
	json_decref(v);
	return r;
}

long long cdp_eval_int(cdp *b, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	json_t *v = veval(b, fmt, ap);
	va_end(ap);
	long long r = (long long)json_number_value(v);
	json_decref(v);
	return r;
}

char *cdp_eval_str(cdp *b, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	json_t *v = veval(b, fmt, ap);
	va_end(ap);
	char *s = strdup(json_is_string(v) ? json_string_value(v) : "");
	json_decref(v);
	return s;
}

long long cdp_wait_for(cdp *b, int timeout_ms, const char *fmt, ...)
{
	char *expr = NULL;
	va_list ap;
	int64_t t0 = lr_mono_ms();

	va_start(ap, fmt);
	CHECK(vasprintf(&expr, fmt, ap) >= 0);
	va_end(ap);
	for (;;) {
		if (cdp_eval_bool(b, "!!(%s)", expr)) {
			free(expr);
			return lr_mono_ms() - t0;
		}
		if (lr_mono_ms() - t0 > timeout_ms) {
			free(expr);
			return -1;
		}
		lr_sleep_ms(20);
	}
}

/* Decode base64 (as the protocol sends it) into out; its length. */
static size_t unbase64(const char *in, unsigned char *out)
{
	static const char alphabet[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	uint32_t acc = 0;
	int bits = 0;
	size_t n = 0;

	for (; *in != '\0' && *in != '='; in++) {
		const char *p = strchr(alphabet, *in);
		if (p == NULL)
			continue;
		acc = acc << 6 | (uint32_t)(p - alphabet);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[n++] = (unsigned char)(acc >> bits);
		}
	}
	return n;
}

char *cdp_screenshot(cdp *b, const char *png_path)
{
	json_t *r = call(b, true, "Page.captureScreenshot", json_pack("{s:s}", "format", "png"));
	const char *data = json_string_value(json_object_get(r, "data"));
	CHECK(data != NULL);
	char *copy = strdup(data);
	json_decref(r);
	if (png_path != NULL) {
		unsigned char *png = malloc(strlen(copy));
		size_t n = unbase64(copy, png);
		FILE *f = fopen(png_path, "wb");
		CHECK(f != NULL);
		CHECK(fwrite(png, 1, n, f) == n);
		fclose(f);
		free(png);
	}
	return copy;
}

static int remove_entry(const char *path, const struct stat *st, int flag,
                        struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

void cdp_close(cdp *b)
{
	int status;

	if (b->pid <= 0)
		return;
	/* Closing the pipe ends the browser; SIGKILL if it lingers. */
	close(b->to);
	close(b->from);
	int64_t t0 = lr_mono_ms();
	while (waitpid(b->pid, &status, WNOHANG) == 0) {
		if (lr_mono_ms() - t0 > 5000) {
			kill(b->pid, SIGKILL);
			waitpid(b->pid, &status, 0);
			break;
		}
		lr_sleep_ms(20);
	}
	b->pid = 0;
	nftw(b->profile, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(b->buf);
	b->buf = NULL;
}
