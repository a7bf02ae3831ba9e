/* web.h - `leaserun web`: one page of tasks, runners, locks and limits,
 * kept live by server-sent events from an etcd watch, and a read-only
 * JSON API behind it (cancel only when allowed).
 *
 * Threads: the HTTP server's (a thread per connection), one publisher
 * thread that pushes the view's changes to every open page, and the etcd
 * client's stream thread that applies the watch. */
#ifndef LR_WEB_H
#define LR_WEB_H

#include <stdbool.h>

#include "leaserun.h"

typedef struct lr_web lr_web;

typedef struct lr_web_opts {
	const char *listen;     /* as lr_http_opts.listen; default
	                           "127.0.0.1:8080" */
	bool allow_cancel;      /* POST /api/tasks/ID/cancel */
	unsigned max_connections; /* default 64 (pages, API calls, events);
	                             event streams take half at most */
	/* Names, comma-separated, that requests may carry in Host besides IP
	 * addresses, "localhost" and the listen address's own name: the page
	 * under any other name is refused (403), so that a site whose name
	 * points here cannot read or use it (DNS rebinding). NULL: none. */
	const char *allow_hosts;
} lr_web_opts;

/* Read the prefix of c, watch it, and serve the page. c must outlive the
 * server. Errors: etcd errors (the first read), LR_EINVAL / LR_ESYS (the
 * listen address). On success *out runs until lr_web_stop. */
int lr_web_start(lr_client *c, const lr_web_opts *o, lr_web **out, lr_err *err);

/* The address listened on ("127.0.0.1:8080"). Borrowed. */
const char *lr_web_address(const lr_web *w);

/* Close every page's stream, stop the threads and the watch, free. */
void lr_web_stop(lr_web *w);

#endif
