/* web_int.h - what the parts of the web server share: the server itself,
 * its open event streams, and the functions each file offers the others.
 * w->mu guards the streams and the publisher's flags; it is never held
 * across an etcd call. */
#ifndef LR_WEB_INT_H
#define LR_WEB_INT_H

#include <pthread.h>
#include <stdbool.h>

#include "client/client.h"
#include "http/server.h"
#include "web/fleet.h"
#include "web/web.h"

/* An event's text, shared by the streams it is queued on (events.c). */
struct web_text;

/* The records of the tasks whose detail was asked for (detail.c). */
typedef struct web_details web_details;

struct web_client {
	lr_http_stream *stream;
	struct web_client *next;
};

struct lr_web {
	lr_client *client;
	lr_fleet *fleet;
	web_details *details;
	lr_http *http;
	bool allow_cancel;
	char *allow_hosts;           /* comma-separated; NULL: none */
	size_t max_streams;          /* open event streams at most */
	pthread_t publisher;
	bool publisher_running;
	pthread_mutex_t mu;
	pthread_cond_t cond;         /* kicked or stop */
	bool kicked;                 /* the view changed */
	bool stop;
	struct web_client *clients;  /* open event streams */
	size_t n_clients;
	size_t n_opening;            /* streams being opened (places taken) */
	/* The snapshot pages get when they open, built once and shared (see
	 * events.c), and the events sent since it began to be built. */
	struct web_text *snap;
	bool building;               /* a page is building it (without w->mu) */
	bool since_lost;             /* an event could not be kept meanwhile */
	pthread_cond_t built;        /* it was built */
	struct web_text **since;
	size_t n_since, cap_since, since_bytes;
	size_t snapshot_len;         /* bytes of the last snapshot built */
	size_t snapshots_built;      /* how many (the tests read it) */
};

/* ---- page.c -------------------------------------------------------------- */

/* Whether name[0..len) is an IPv4 address ("127.0.0.1"). */
bool web_ip_literal(const char *name, size_t len);

/* ---- events.c ------------------------------------------------------------ */

/* GET /events: a stream that starts with the whole view ("snapshot") and
 * then carries its changes ("update"); 503 beyond max_streams. */
void web_events_open(lr_web *w, lr_http_req *req);
/* The view changed (lr_fleet_changed_fn). */
void web_changed(void *user);
/* The publisher thread: pushes changes, heartbeats, lease TTLs. */
void *web_publisher_main(void *arg);
/* Close every stream and drop the shared snapshot (the server is
 * stopping). */
void web_events_close_all(lr_web *w);

/* ---- page.c ---------------------------------------------------------------- */

/* Every request (lr_http_handler). */
void web_route(void *user, lr_http_req *req);
/* Reply with o (stolen) as JSON, or {"message": msg}, with the page's
 * headers. */
void web_reply_json(lr_http_req *req, unsigned status, json_t *o);
void web_reply_message(lr_http_req *req, unsigned status, const char *msg);

/* ---- detail.c -------------------------------------------------------------- */

/* NULL when out of memory. */
web_details *web_details_new(void);
void web_details_free(web_details *d);
/* GET /api/tasks/ID: the task's detail, 404 when the view has no such
 * task, 502 when etcd cannot be read, 503 when too many reads wait. */
void web_task_detail(lr_web *w, lr_http_req *req, const char *id);

#endif
