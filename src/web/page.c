/* page.c - the routes of `leaserun web`: the page's files, the event
 * stream, one task's detail (read from etcd, without env values) and, when
 * allowed, cancel. Threads: the HTTP server's connection threads; each
 * request blocks only its own connection. */
#include "web/web_int.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client/task_records.h"
#include "records/record.h"
#include "records/spec.h"
#include "web/assets.h"

/* The state shown in a task's detail is cut here (it may be 512 KiB). */
#define STATE_SHOWN_MAX (64 * 1024)

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

static void reply_json(lr_http_req *req, unsigned status, json_t *o)
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

static void reply_message(lr_http_req *req, unsigned status, const char *msg)
{
	json_t *o = json_object();

	json_object_set_new(o, "message", json_string(msg));
	reply_json(req, status, o);
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

/* ---- one task's detail ------------------------------------------------------ */

/* The spec as the page shows it: steps and limits, and the names of env
 * variables only (their values may be secrets). */
static json_t *spec_json(const json_t *spec)
{
	json_t *o = json_object(), *steps = json_array(), *env = json_array();
	const char *name;
	json_t *v;

	static const char *const fields[] = { "name", "run", "timeout_s" };

	for (size_t i = 0; i < lr_spec_steps(spec); i++) {
		const json_t *step = lr_spec_step(spec, i);
		json_t *s = json_object();
		for (size_t k = 0; k < sizeof(fields) / sizeof(fields[0]); k++)
			json_object_set(s, fields[k], json_object_get(step, fields[k]));
		json_array_append_new(steps, s);
	}
	json_object_foreach(lr_spec_env(spec), name, v)
		json_array_append_new(env, json_string(name));
	json_object_set_new(o, "steps", steps);
	json_object_set_new(o, "env_names", env);
	json_object_set_new(o, "max_attempts", json_integer(lr_spec_max_attempts(spec)));
	json_object_set_new(o, "retry_backoff_ms", json_integer(lr_spec_backoff_ms(spec)));
	return o;
}

/* The state, indented, cut at STATE_SHOWN_MAX bytes (on a character). */
static json_t *state_json(const json_t *state)
{
	json_t *o = json_object();
	char *text = json_dumps(state, JSON_INDENT(2) | JSON_ENCODE_ANY);
	size_t len = text != NULL ? strlen(text) : 0, shown = len;

	if (shown > STATE_SHOWN_MAX) {
		shown = STATE_SHOWN_MAX;
		while (shown > 0 && ((unsigned char)text[shown] & 0xC0) == 0x80)
			shown--;
	}
	json_object_set_new(o, "text", text != NULL ? json_stringn(text, shown)
	                                            : json_null());
	json_object_set_new(o, "bytes", json_integer((json_int_t)len));
	json_object_set_new(o, "truncated", json_boolean(shown < len));
	free(text);
	return o;
}

/* What etcd holds for the task beyond the view: spec, fence, state. */
static void add_records(json_t *o, const char *id, const lr_task_records *rec)
{
	json_t *spec = NULL;
	lr_checkpoint_rec cp = { 0 };
	lr_done_rec d = { 0 };
	const json_t *state = NULL;
	bool have_cp = false, have_done = false;

	if (lr_spec_from_record(rec->task->value, rec->task->value_len, id, &spec,
	                        NULL) == 0) {
		json_object_set_new(o, "spec", spec_json(spec));
		state = lr_spec_state(spec);
	}
	if (rec->checkpoint != NULL &&
	    lr_checkpoint_decode(rec->checkpoint->value, rec->checkpoint->value_len,
	                         &cp, NULL) == 0) {
		have_cp = true;
		json_object_set_new(o, "fence", json_integer(lr_checkpoint_fence(
		                        &cp, rec->checkpoint->mod_rev)));
		state = cp.state;
	}
	if (rec->done != NULL &&
	    lr_done_decode(rec->done->value, rec->done->value_len, &d, NULL) == 0) {
		have_done = true;
		if (d.error != NULL)
			json_object_set_new(o, "error", json_string(d.error));
		state = d.state;
	}
	if (state != NULL)
		json_object_set_new(o, "state", state_json(state));
	if (have_cp)
		lr_checkpoint_rec_clear(&cp);
	if (have_done)
		lr_done_rec_clear(&d);
	json_decref(spec);
}

static void task_detail(lr_web *w, lr_http_req *req, const char *id)
{
	lr_txn_result r;
	lr_task_records rec;
	lr_err err = { 0 };
	json_t *o = lr_fleet_task_detail(w->fleet, id);

	if (o == NULL) {
		reply_message(req, 404, "no such task");
		return;
	}
	if (lr_task_records_read(w->client, id, &r, &rec, &err) != 0) {
		json_decref(o);
		reply_message(req, 502, err.msg);
		return;
	}
	if (rec.task != NULL)
		add_records(o, id, &rec);
	lr_txn_result_free(&r);
	reply_json(req, 200, o);
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
		reply_message(req, 403, "this server is read-only (start it with "
		                        "--allow-cancel)");
		return;
	}
	if (!same_origin(req)) {
		reply_message(req, 403, "cancel comes from the page only");
		return;
	}
	int rc = lr_cancel(w->client, id, &already, &err);
	if (rc == LR_ENOTFOUND) {
		reply_message(req, 404, "no such task");
		return;
	}
	if (rc != 0) {
		reply_message(req, 502, err.msg);
		return;
	}
	if (already >= 0)
		snprintf(msg, sizeof(msg), "already %s",
		         lr_task_state_name((lr_task_state)already));
	else
		snprintf(msg, sizeof(msg), "cancel requested");
	reply_message(req, 200, msg);
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
		reply_message(req, 403, "this server does not answer to the name in Host: "
		                        "start it with --allow-host NAME to serve the page "
		                        "under that name");
		return;
	}
	if (task_path(req, path, id, &cancel)) {
		if (cancel && strcmp(lr_http_method(req), "POST") == 0)
			task_cancel(w, req, id);
		else if (!cancel && is_get(req))
			task_detail(w, req, id);
		else
			reply_message(req, 405, "method not allowed");
		return;
	}
	if (!is_get(req)) {
		reply_message(req, 405, "method not allowed");
		return;
	}
	if (strcmp(path, "/events") == 0)
		web_events_open(w, req);
	else if (!serve_asset(req, path))
		lr_http_reply_text(req, 404, "not found\n");
}
