/* cdp.h - headless Chromium driven from a test over the DevTools protocol
 * on a pipe (--remote-debugging-pipe: commands on the browser's fd 3,
 * replies on its fd 4, each a JSON message ending with a NUL byte). The
 * browser is the Debian package's (/usr/bin/chromium, or $CHROMIUM); it
 * is never downloaded. One page per browser; the test's thread only. */
#ifndef LR_TEST_CDP_H
#define LR_TEST_CDP_H

#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

typedef struct cdp {
	pid_t pid;
	int to, from;            /* our ends of the two pipes */
	char *buf;               /* bytes read, not yet a whole message */
	size_t len, cap;
	int next_id;
	char session[128];       /* the page's session id */
	char profile[256];       /* a fresh --user-data-dir, removed at close */
	char log[300];           /* the browser's stderr */
} cdp;

/* Start the browser with a fresh profile under dir and open one page of
 * width x height CSS pixels. Fails the test when Chromium is missing or
 * does not answer. */
void cdp_launch(cdp *b, const char *dir, int width, int height);

/* Load url and wait until the document has loaded. */
void cdp_navigate(cdp *b, const char *url);

/* Evaluate a JavaScript expression in the page (promises are awaited);
 * its value as JSON (new reference). Fails the test when it throws. */
json_t *cdp_eval(cdp *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Evaluate for its effect; the value is dropped. */
void cdp_run(cdp *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The same for an expression whose value is a boolean, a number or a
 * string. */
int cdp_eval_bool(cdp *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
long long cdp_eval_int(cdp *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Caller frees. */
char *cdp_eval_str(cdp *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Poll expr (a boolean) every 20 ms until true; ms it took, or -1 after
 * timeout_ms. */
long long cdp_wait_for(cdp *b, int timeout_ms, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* A PNG of the viewport, base64-encoded as the protocol gives it (caller
 * frees), also written decoded to png_path (may be NULL). */
char *cdp_screenshot(cdp *b, const char *png_path);

/* Close the browser, wait for it and remove its profile. */
void cdp_close(cdp *b);

#endif
