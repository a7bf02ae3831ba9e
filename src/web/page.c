/* page.c - the routes of `leaserun web`: the page's files, the event
 * stream, one task's detail (detail.c) and, when allowed, cancel. Threads: the HTTP server's connection threads; each
 * request blocks only its own connection. */
#include "web/web_int.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "web/assets.h"

/* Nothing but the page's own files, no framing, no referrer. */
static const lr_http_header_kv page_headers[] = {
	{ "Content-Security-Policy",
	  "default-src 'none'; script-src 'self'; style-src 'self'; "
	  "connect-src 'self'; img-src 'self' data:; base-uri 'none'; "
	  "form-action 'none'; frame-ancestors 'none'" },
	{ "X-Frame-Options", "DENY" },
	{ "Referrer-Policy", "no-referrer" },
	{ NULL, NULL },
};

void web_reply_json(lr_http_req *req, unsigned status, json_t *o)
{
	char *text = o != NULL ? json_dumps(o, JSON_COMPACT) : NULL;

	json_decref(o);
	if (text == NULL) {
		lr_http_reply_text(req, 503, "out of memory\n");
		return;
	}
	lr_http_reply(req, status, "application/json", text, strlen(text), 0,
	              page_headers);
	free(text);
}

void web_reply_message(lr_http_req *req, unsigned status, const char *msg)
{
	json_t *o = json_object();

	json_object_set_new(o, "message", json_string(msg));
	web_reply_json(req, status, o);
}

static bool is_get(const lr_http_req *req)
{
	return strcmp(lr_http_method(req), "GET") == 0 ||
	       strcmp(lr_http_method(req), "HEAD") == 0;
}

static bool serve_asset(lr_http_req *req, const char *path)
{
	if (strcmp(path, "/") == 0)
		path = "/index.html";
	for (size_t i = 0; i < lr_web_n_assets; i++) {
		const lr_web_asset *a = &lr_web_assets[i];
		if (strcmp(a->path, path) != 0)
			continue;
		lr_http_reply(req, 200, a->content_type, a->data, a->len,
		              LR_HTTP_STATIC, page_headers);
		return true;
	}
	return false;
}

/* ---- the names this server answers to -------------------------------------- */

bool web_ip_literal(const char *name, size_t len)
{
	char buf[INET_ADDRSTRLEN];
	struct in_addr a;
	if (len == 0 || len >= sizeof(buf))
		return false;
	memcpy(buf, name, len);
	buf[len] = '\0';
	return inet_pton(AF_INET, buf, &a) == 1;
}

/* Whether name[0..len) is one of the comma-separated names in list. */
static bool listed(const char *list, const char *name, size_t len)
{
	for (const char *p = list; *p != '\0';) {
		size_t n = strcspn(p, ",");
		if (n == len && strncasecmp(p, name, len) == 0)
			return true;
		p += n + (p[n] == ',');
	}
	return false;
}

/* A browser names in Host the name it looked up. An IP address, localhost
 * or a name this server was given is ours; any other name may be a site
 * that made its own name point here (DNS rebinding), which would make the
 * page and the API its own origin. A request without Host comes from no
 * browser. */
static bool host_allowed(const lr_web *w, const char *host)
{
	if (host == NULL)
		return true;
	if (host[0] == '[') /* an IPv6 address */
		return strchr(host, ']') != NULL;
	size_t len = strcspn(host, ":");
	if (web_ip_literal(host, len) ||
	    (len == 9 && strncasecmp(host, "localhost", 9) == 0))
		return true;
	return listed(w->allow_hosts, host, len);
}

/* ---- cancel ----------------------------------------------------------------- */

/* A cancel must come from the page itself: a custom header (which a form
 * or a cross-site script cannot send without the server's consent, never
 * given) and, when the browser names an origin, this server's own. */
static bool same_origin(lr_http_req *req)
{
	const char *mark = lr_http_header(req, "X-Leaserun");
	const char *origin = lr_http_header(req, "Origin");
	const char *host = lr_http_header(req, "Host");

	if (mark == NULL || strcmp(mark, "cancel") != 0)
		return false;
	if (origin == NULL)
		return true;
	const char *sep = strstr(origin, "://");
	return sep != NULL && host != NULL && strcmp(sep + 3, host) == 0;
}

static void task_cancel(lr_web *w, lr_http_req *req, const char *id)
{
	lr_err err = { 0 };
	char msg[64];
	int already = -1;

	if (!w->allow_cancel) {
		web_reply_message(req, 403, "this server is read-only (start it with "
		                        "--allow-cancel)");
		return;
	}
	if (!same_origin(req)) {
		web_reply_message(req, 403, "cancel comes from the page only");
		return;
	}
	int rc = lr_cancel(w->client, id, &already, &err);
	if (rc == LR_ENOTFOUND) {
		web_reply_message(req, 404, "no such task");
		return;
	}
	if (rc != 0) {
		web_reply_message(req, 502, err.msg);
		return;
	}
	if (already >= 0)
		snprintf(msg, sizeof(msg), "already %s",
		         lr_task_state_name((lr_task_state)already));
	else
		snprintf(msg, sizeof(msg), "cancel requested");
	web_reply_message(req, 200, msg);
}

/* ---- routing ------------------------------------------------------------------ */

/* "/api/tasks/ID" or "/api/tasks/ID/cancel", or the same with the id in
 * the query ("/api/task?id=ID", "/api/task/cancel?id=ID": the page's form,
 * as a browser takes the ids "." and ".." in a path, even escaped, as steps
 * of the path): the id into buf and whether it is the cancel. False for
 * anything else. */
static bool task_path(lr_http_req *req, const char *path, char buf[LR_ID_SIZE],
                      bool *cancel)
{
	static const char dir[] = "/api/tasks/";
	const char *id = path + sizeof(dir) - 1;
	const char *slash;
	size_t len;

	if (strcmp(path, "/api/task") == 0 || strcmp(path, "/api/task/cancel") == 0) {
		const char *q = lr_http_query(req, "id");
		*cancel = path[sizeof("/api/task") - 1] != '\0';
		if (q == NULL || strlen(q) >= LR_ID_SIZE)
			return false;
		strcpy(buf, q);
		return lr_id_valid(buf);
	}
	if (strncmp(path, dir, sizeof(dir) - 1) != 0)
		return false;
	slash = strchr(id, '/');
	*cancel = slash != NULL;
	if (slash != NULL && strcmp(slash, "/cancel") != 0)
		return false;
	len = slash != NULL ? (size_t)(slash - id) : strlen(id);
	if (len == 0 || len >= LR_ID_SIZE)
		return false;
	memcpy(buf, id, len);
	buf[len] = '\0';
	return lr_id_valid(buf);
}

void web_route(void *user, lr_http_req *req)
{
	lr_web *w = user;
	const char *path = lr_http_path(req);
	char id[LR_ID_SIZE];
	bool cancel;

	if (!host_allowed(w, lr_http_header(req, "Host"))) {
		web_reply_message(req, 403, "this server does not answer to the name in Host: "
		                        "start it with --allow-host NAME to serve the page "
		                        "under that name");
		return;
	}
	if (task_path(req, path, id, &cancel)) {
		if (cancel && strcmp(lr_http_method(req), "POST") == 0)
			task_cancel(w, req, id);
		else if (!cancel && is_get(req))
			web_task_detail(w, req, id);
		else
			web_reply_message(req, 405, "method not allowed");
		return;
	}
	if (!is_get(req)) {
		web_reply_message(req, 405, "method not allowed");
		return;
	}
	if (strcmp(path, "/events") == 0)
		web_events_open(w, req);
	else if (!serve_asset(req, path))
		lr_http_reply_text(req, 404, "not found\n");
}
