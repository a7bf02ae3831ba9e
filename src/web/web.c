/* web.c - starting and stopping `leaserun web`: the fleet view read and
 * watched, the publisher thread, the HTTP server (a thread per connection,
 * so that event streams may wait). Threads: the caller's. */
#include "web/web_int.h"

#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define DEFAULT_LISTEN "127.0.0.1:8080"
#define DEFAULT_MAX_CONNECTIONS 64

/* The names Host may carry: those given, and the listen address's host
 * when it is a name ("box-1:8080"). A new string, "" for none; NULL when
 * out of memory. */
static char *allowed_names(const lr_web_opts *o)
{
	const char *given = o->allow_hosts != NULL ? o->allow_hosts : "";
	const char *listen = o->listen != NULL ? o->listen : DEFAULT_LISTEN;
	size_t len = strcspn(listen, ":");
	char *out = NULL;
	int n;
	if (listen[0] != '[' && len > 0 && !web_ip_literal(listen, len))
		n = asprintf(&out, "%s%s%.*s", given, given[0] ? "," : "", (int)len, listen);
	else
		n = asprintf(&out, "%s", given);
	return n < 0 ? NULL : out;
}

int lr_web_start(lr_client *c, const lr_web_opts *o, lr_web **out, lr_err *err)
{
	lr_web *w = calloc(1, sizeof(*w));
	pthread_condattr_t ca;
	int rc;

	*out = NULL;
	if (w == NULL)
		return lr_err_set(err, LR_ENOMEM, "web: out of memory");
	w->client = c;
	w->allow_cancel = o->allow_cancel;
	unsigned max_conn = o->max_connections ? o->max_connections : DEFAULT_MAX_CONNECTIONS;
	/* Pages that keep their stream open leave room for requests. */
	w->max_streams = max_conn / 2 > 0 ? max_conn / 2 : 1;
	w->allow_hosts = allowed_names(o);
	w->details = web_details_new();
	if (w->allow_hosts == NULL || w->details == NULL) {
		web_details_free(w->details);
		free(w->allow_hosts);
		free(w);
		return lr_err_set(err, LR_ENOMEM, "web: out of memory");
	}
	pthread_mutex_init(&w->mu, NULL);
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&w->cond, &ca);
	pthread_condattr_destroy(&ca);
	pthread_cond_init(&w->built, NULL);

	rc = lr_fleet_new(c, web_changed, w, &w->fleet, err);
	if (rc == 0)
		rc = lr_fleet_start(w->fleet, err);
	if (rc != 0)
		goto fail;
	if (pthread_create(&w->publisher, NULL, web_publisher_main, w) != 0) {
		rc = lr_err_set(err, LR_ESYS, "web: cannot start a thread");
		goto fail;
	}
	w->publisher_running = true;
	lr_http_opts ho = {
		.listen = o->listen != NULL ? o->listen : DEFAULT_LISTEN,
		.what = "web",
		.flags = LR_HTTP_STREAMS,
		.max_connections = max_conn,
		/* One client (slow on purpose, or a browser gone wild) cannot
		 * take every connection. Behind a proxy every page comes from
		 * the proxy's address: it may still take three quarters. */
		.max_per_ip = max_conn * 3 / 4 > 0 ? max_conn * 3 / 4 : 1,
		.idle_timeout_s = 10,
		.handler = web_route,
		.user = w,
	};
	rc = lr_http_start(&ho, &w->http, err);
	if (rc != 0)
		goto fail;
	*out = w;
	return 0;
fail:
	lr_web_stop(w);
	return rc;
}

const char *lr_web_address(const lr_web *w)
{
	return lr_http_address(w->http);
}

void lr_web_stop(lr_web *w)
{
	if (w == NULL)
		return;
	/* Streams end so that the server's threads can be joined; then no
	 * page is left to publish to. */
	web_events_close_all(w);
	lr_http_stop(w->http);
	pthread_mutex_lock(&w->mu);
	w->stop = true;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->mu);
	if (w->publisher_running)
		pthread_join(w->publisher, NULL);
	web_events_close_all(w); /* any that joined while stopping */
	lr_fleet_free(w->fleet);
	web_details_free(w->details);
	pthread_cond_destroy(&w->cond);
	pthread_cond_destroy(&w->built);
	pthread_mutex_destroy(&w->mu);
	free(w->allow_hosts);
	free(w);
}
