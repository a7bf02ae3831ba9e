/* metrics.c - a runner's statistics as Prometheus metrics (lr_metrics_text)
 * and the server of /metrics (lr_metrics_serve), on the public API only.
 * Threads: the text is made on the caller's thread, the server's on its
 * polling thread; both only read the runners' atomics. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "http/expo.h"
#include "http/server.h"
#include "leaserun.h"

#define STAT(field) offsetof(lr_runner_stats, field)

static uint64_t u64_at(const lr_runner_stats *s, size_t off)
{
	uint64_t v;

	memcpy(&v, (const char *)s + off, sizeof(v));
	return v;
}

/* A family of one or more samples, each a field of lr_runner_stats with
 * at most one label. */
struct series {
	const char *label_value; /* NULL: no label */
	size_t field;
};

struct family {
	const char *name, *type, *help;
	const char *label;       /* the label's name, NULL for none */
	struct series s[5];      /* ends with a NULL label_value after the
	                            first, or at 5 */
};

static const struct family families[] = {
	{ "leaserun_claims_won_total", "counter",
	  "Claims that gave this runner a task.", NULL,
	  { { NULL, STAT(claims_won) } } },
	{ "leaserun_claims_lost_total", "counter",
	  "Claim txns another runner's claim beat (one txn, not an error).", NULL,
	  { { NULL, STAT(claims_lost) } } },
	{ "leaserun_step_executions_total", "counter",
	  "Step executions by how they ended: ok, retry, fail (as the handler "
	  "returned), stopped (cancel, lease loss or shutdown came first), "
	  "not_started (this runner could not start a shell step: the task was "
	  "released, no attempt spent, and the runner holds off claiming).",
	  "result",
	  { { "ok", STAT(steps_ok) }, { "retry", STAT(steps_retry) },
	    { "fail", STAT(steps_fail) }, { "stopped", STAT(steps_stopped) },
	    { "not_started", STAT(steps_not_started) } } },
	{ "leaserun_step_commits_total", "counter",
	  "Fenced step-commit txns (a task's last step is committed by its "
	  "completion, counted in leaserun_tasks_finished_total).", NULL,
	  { { NULL, STAT(steps_committed) } } },
	{ "leaserun_tasks_finished_total", "counter",
	  "Tasks this runner ended (done record written), by final state.",
	  "state",
	  { { "succeeded", STAT(tasks_succeeded) },
	    { "failed", STAT(tasks_failed) },
	    { "cancelled", STAT(tasks_cancelled) } } },
	{ "leaserun_tasks_let_go_total", "counter",
	  "Tasks given up unfinished (released on shutdown, dropped on lease "
	  "loss or an etcd error); another runner resumes them.", NULL,
	  { { NULL, STAT(tasks_let_go) } } },
	{ "leaserun_lease_losses_total", "counter",
	  "Times this runner's lease was lost.", NULL,
	  { { NULL, STAT(lease_losses) } } },
	{ "leaserun_watch_reconnects_total", "counter",
	  "Times the etcd Watch stream was opened again after it ended.", NULL,
	  { { NULL, STAT(watch_reconnects) } } },
	{ "leaserun_lease_keepalive_reconnects_total", "counter",
	  "Times the etcd LeaseKeepAlive stream was opened again after it "
	  "ended.", NULL,
	  { { NULL, STAT(keepalive_reconnects) } } },
	{ "leaserun_etcd_members_left_out", "gauge",
	  "etcd members that let a call or a stream go unanswered (frozen, "
	  "their host silent): calls go to the other members until they answer "
	  "again.", NULL,
	  { { NULL, STAT(etcd_members_left_out) } } },
	{ "leaserun_tasks_running", "gauge",
	  "Tasks whose claim this runner holds.", NULL,
	  { { NULL, STAT(tasks_running) } } },
	{ "leaserun_worker_slots", "gauge",
	  "Workers of this runner (its concurrency).", NULL,
	  { { NULL, STAT(slots) } } },
	{ "leaserun_worker_slots_free", "gauge",
	  "Workers with no task.", NULL,
	  { { NULL, STAT(slots_free) } } },
	{ "leaserun_tasks_pending", "gauge",
	  "Unclaimed tasks this runner sees (pending, or queued for one of its "
	  "workers).", NULL,
	  { { NULL, STAT(tasks_pending) } } },
};

struct histogram {
	const char *name, *help;
	size_t field;
};

static const struct histogram histograms[] = {
	{ "leaserun_claim_duration_seconds",
	  "A won claim: from the worker taking the task to the claim txn's "
	  "reply.", STAT(claim) },
	{ "leaserun_commit_duration_seconds", "One step-commit txn.",
	  STAT(commit) },
	{ "leaserun_completion_duration_seconds",
	  "The completion txn (done record written, claim deleted).",
	  STAT(completion) },
	{ "leaserun_lease_renewal_duration_seconds",
	  "Lease renewals: a keepalive request sent to etcd's answer.",
	  STAT(lease_renewal) },
};

static void write_family(lr_expo *e, const lr_runner_stats *st,
                         const struct family *f)
{
	lr_expo_family(e, f->name, f->type, f->help);
	for (size_t i = 0; i < sizeof(f->s) / sizeof(f->s[0]); i++) {
		if (i > 0 && f->s[i].label_value == NULL)
			break;
		lr_label l[2] = { { f->label, f->s[i].label_value }, { NULL, NULL } };
		lr_expo_count(e, f->name, f->label != NULL ? l : NULL,
		              u64_at(st, f->s[i].field));
	}
}

/* A latency as a histogram in seconds. The bucket counts and the total
 * are read at slightly different moments: the total is never shown below
 * the buckets, as the format requires. */
static void write_latency(lr_expo *e, const char *name, const lr_label *labels,
                          const lr_latency *l)
{
	double le[LR_LATENCY_BUCKETS];
	uint64_t count = l->count;

	for (int i = 0; i < LR_LATENCY_BUCKETS; i++)
		le[i] = lr_latency_bucket_s(i);
	if (l->le[LR_LATENCY_BUCKETS - 1] > count)
		count = l->le[LR_LATENCY_BUCKETS - 1];
	lr_expo_histogram(e, name, labels, le, l->le, LR_LATENCY_BUCKETS, count,
	                  l->sum_ms / 1000.0);
}

/* One counter of the unary methods' figures (field of
 * lr_etcd_method_stats), a sample per method. */
static void write_method_counts(lr_expo *e, const lr_runner_stats *st,
                                const char *name, const char *help, size_t field)
{
	lr_expo_family(e, name, "counter", help);
	for (size_t i = 0; i < st->n_etcd; i++) {
		const lr_etcd_method_stats *m = &st->etcd[i];
		lr_label l[] = { { "method", m->method }, { NULL, NULL } };
		uint64_t v;
		memcpy(&v, (const char *)m + field, sizeof(v));
		if (!m->stream)
			lr_expo_count(e, name, l, v);
	}
}

/* The etcd calls of the runners' clients, by method: unary calls only
 * (the streams are the reconnect counters and the renewal histogram). */
static void write_etcd(lr_expo *e, const lr_runner_stats *st)
{
	static const char errors[] = "leaserun_etcd_request_errors_total";
	static const char duration[] = "leaserun_etcd_request_duration_seconds";

	write_method_counts(e, st, "leaserun_etcd_requests_total",
	                    "etcd calls by method (each one attempt or more).",
	                    offsetof(lr_etcd_method_stats, calls));
	write_method_counts(e, st, "leaserun_etcd_request_attempts_total",
	                    "etcd call attempts by method, retries of "
	                    "UNAVAILABLE replies included.",
	                    offsetof(lr_etcd_method_stats, attempts));
	lr_expo_family(e, errors, "counter", "etcd calls that failed, by method "
	               "and error (errors never met are not shown).");
	for (size_t i = 0; i < st->n_etcd; i++) {
		for (int k = 0; k < LR_ETCD_ERROR_CODES; k++) {
			if (st->etcd[i].errors_by_code[k] == 0)
				continue;
			lr_label l[] = { { "method", st->etcd[i].method },
				         { "error", k == 0 ? "other" : lr_strerror(-k) },
				         { NULL, NULL } };
			lr_expo_count(e, errors, l, st->etcd[i].errors_by_code[k]);
		}
	}
	lr_expo_family(e, duration, "histogram", "etcd call attempts by method, "
	               "from the request to the reply or the failure.");
	for (size_t i = 0; i < st->n_etcd; i++) {
		lr_label l[] = { { "method", st->etcd[i].method }, { NULL, NULL } };
		if (!st->etcd[i].stream)
			write_latency(e, duration, l, &st->etcd[i].latency);
	}
}

static void write_metrics(lr_expo *e, const lr_runner_stats *st)
{
	lr_label version[] = { { "version", lr_version() }, { NULL, NULL } };

	lr_expo_family(e, "leaserun_build_info", "gauge",
	               "Always 1; the labels name the build.");
	lr_expo_sample(e, "leaserun_build_info", version, 1);
	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++)
		write_family(e, st, &families[i]);
	lr_expo_family(e, "leaserun_lease_remaining_seconds", "gauge",
	               "Seconds until the lease deadline (last renewal's send "
	               "time plus the TTL); 0 without a lease.");
	lr_expo_sample(e, "leaserun_lease_remaining_seconds", NULL,
	               st->lease_remaining_s);
	for (size_t i = 0; i < sizeof(histograms) / sizeof(histograms[0]); i++) {
		const struct histogram *h = &histograms[i];
		lr_latency l;
		memcpy(&l, (const char *)st + h->field, sizeof(l));
		lr_expo_family(e, h->name, "histogram", h->help);
		write_latency(e, h->name, NULL, &l);
	}
	write_etcd(e, st);
}

int lr_metrics_text(lr_runner *const *rs, size_t n, char **text, size_t *len,
                    lr_err *err)
{
	if (LR_NULL_ARG(err, text) || LR_NULL_ARG(err, len) ||
	    (n > 0 && LR_NULL_ARG(err, rs)))
		return LR_EINVAL;
	lr_runner_stats *st = malloc(sizeof(*st));
	lr_expo e = { 0 };

	*text = NULL;
	*len = 0;
	if (st == NULL)
		return lr_err_set(err, LR_ENOMEM, "metrics: out of memory");
	lr_runner_get_stats_sum(rs, n, st);
	write_metrics(&e, st);
	free(st);
	if (e.oom || e.buf == NULL) {
		lr_expo_free(&e);
		return lr_err_set(err, LR_ENOMEM, "metrics: out of memory");
	}
	*text = e.buf;
	*len = e.len;
	return 0;
}

/* ---- the server --------------------------------------------------------- */

struct lr_metrics_server {
	lr_http *http;
	size_t n;
	lr_runner **rs;
};

static void serve(void *user, lr_http_req *req)
{
	lr_metrics_server *s = user;
	const char *method = lr_http_method(req);
	char *text;
	size_t len;
	lr_err err = { 0 };

	if (strcmp(lr_http_path(req), "/metrics") != 0) {
		lr_http_reply_text(req, 404, "not found: the metrics are at "
		                             "/metrics\n");
		return;
	}
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
		lr_http_header_kv allow[] = { { "Allow", "GET, HEAD" }, { NULL, NULL } };
		lr_http_reply(req, 405, "text/plain; charset=utf-8",
		              "method not allowed\n", 19, LR_HTTP_STATIC, allow);
		return;
	}
	if (lr_metrics_text(s->rs, s->n, &text, &len, &err) != 0) {
		lr_http_reply_text(req, 503, "out of memory\n");
		return;
	}
	lr_http_reply(req, 200, LR_EXPO_CONTENT_TYPE, text, len, 0, NULL);
	free(text);
}

int lr_metrics_serve(lr_runner *const *rs, size_t n, const char *listen,
                     lr_metrics_server **out, lr_err *err)
{
	if (LR_NULL_ARG(err, out) || LR_NULL_ARG(err, listen) ||
	    (n > 0 && LR_NULL_ARG(err, rs)))
		return LR_EINVAL;
	lr_metrics_server *s = calloc(1, sizeof(*s));
	int rc;

	*out = NULL;
	if (s == NULL || (s->rs = calloc(n ? n : 1, sizeof(*rs))) == NULL) {
		free(s);
		return lr_err_set(err, LR_ENOMEM, "metrics: out of memory");
	}
	if (n > 0) /* rs may be NULL then */
		memcpy(s->rs, rs, n * sizeof(*rs));
	s->n = n;
	lr_http_opts o = {
		.listen = listen,
		.what = "metrics",
		/* A scraper or two; anything beyond is refused at once, and
		 * one address cannot take every connection. */
		.max_connections = 16,
		.max_per_ip = 8,
		.idle_timeout_s = 10,
		.handler = serve,
		.user = s,
	};
	rc = lr_http_start(&o, &s->http, err);
	if (rc != 0) {
		free(s->rs);
		free(s);
		return rc;
	}
	*out = s;
	return 0;
}

const char *lr_metrics_server_address(const lr_metrics_server *s)
{
	return lr_http_address(s->http);
}

void lr_metrics_server_free(lr_metrics_server *s)
{
	if (s == NULL)
		return;
	lr_http_stop(s->http);
	free(s->rs);
	free(s);
}
