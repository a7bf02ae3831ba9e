/* runner.c - the runner handle: options, step handlers, lifecycle
 * callbacks, statistics, and the services every part of the runner uses
 * (logging, handler lookup, the lease deadline). lr_runner_run itself is
 * in loop.c.
 *
 * Threads: creation and configuration happen while lr_runner_run is not
 * running (config_mu keeps them apart from its start), on any one thread
 * at a time; lr_runner_stop and the statistics are for any thread;
 * the services are called from the loop and the workers (log_mu keeps one
 * record at a time). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "engine/runner_int.h"

/* ---- services ---------------------------------------------------------------- */

void lr_runner_vlog(lr_runner *r, lr_log_level level, const char *task,
                    const char *step, int64_t index, const char *fmt, va_list ap)
{
	if (level < r->log_level)
		return;
	char msg[8192];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	lr_log_record rec = { .level = level, .runner = r->name, .task = task,
	                      .step = step, .step_index = index, .msg = msg };
	pthread_mutex_lock(&r->log_mu);
	r->log(r->log_user, &rec);
	pthread_mutex_unlock(&r->log_mu);
}

void lr_runner_log(lr_runner *r, lr_log_level level, const char *task,
                   const char *step, int64_t index, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	lr_runner_vlog(r, level, task, step, index, fmt, ap);
	va_end(ap);
}

const struct lr_handler *lr_runner_handler(const lr_runner *r, const char *step)
{
	const struct lr_handler *dflt = NULL;
	for (const struct lr_handler *h = r->handlers; h != NULL; h = h->next) {
		if (h->name == NULL)
			dflt = h;
		else if (strcmp(h->name, step) == 0)
			return h;
	}
	return dflt;
}

int64_t lr_runner_deadline(lr_runner *r, int64_t lease)
{
	if (lease == 0 || lease != atomic_load(&r->lease))
		return 0;
	return lr_keepalive_deadline(r->ka, lease);
}

/* ---- the handle ------------------------------------------------------------- */

int lr_runner_new(lr_client *c, const lr_runner_opts *o, lr_runner **out, lr_err *err)
{
	if (LR_NULL_ARG(err, c) || LR_NULL_ARG(err, out))
		return LR_EINVAL;
	lr_runner_opts dflt = {0};
	if (o == NULL)
		o = &dflt;
	char name[LR_ID_SIZE];
	if (o->name != NULL && strlen(o->name) >= LR_ID_SIZE)
		return lr_err_set(err, LR_EINVAL, "runner name \"%.64s...\": over %d characters",
		                  o->name, LR_ID_SIZE - 1);
	if (o->name != NULL) {
		snprintf(name, sizeof(name), "%s", o->name);
	} else {
		char host[128] = "localhost";
		gethostname(host, sizeof(host) - 1);
		host[sizeof(host) - 1] = '\0';
		snprintf(name, sizeof(name), "%s-%d", host, (int)getpid());
	}
	if (!lr_id_valid(name))
		return lr_err_set(err, LR_EINVAL,
		                  "runner name \"%s\": use 1 to %d of A-Z a-z 0-9 . _ : -", name,
		                  LR_ID_SIZE - 1);
	if (o->concurrency < 0 || o->concurrency > LR_CONCURRENCY_MAX)
		return lr_err_set(err, LR_EINVAL, "concurrency %d: must be 1..%d", o->concurrency,
		                  LR_CONCURRENCY_MAX);
	if (o->threads < 0 || o->threads > (o->concurrency > 0 ? o->concurrency : 1))
		return lr_err_set(err, LR_EINVAL,
		                  "threads %d: must be 0 (a thread per worker) to concurrency (%d)",
		                  o->threads, o->concurrency > 0 ? o->concurrency : 1);
	if (o->ttl_s < 0)
		return lr_err_set(err, LR_EINVAL, "ttl %d: must be at least 1 second", o->ttl_s);
	if (o->grace_s < -1)
		return lr_err_set(err, LR_EINVAL, "grace %d: must be 0 (10 s), -1 (none) or more "
		                  "seconds", o->grace_s);
	if (o->log_level < LR_LOG_DEBUG || o->log_level > LR_LOG_ERROR)
		return lr_err_set(err, LR_EINVAL, "log_level %d: must be LR_LOG_DEBUG (0) to "
		                  "LR_LOG_ERROR (3)", (int)o->log_level);
	lr_runner *r = calloc(1, sizeof(*r));
	if (r == NULL)
		return lr_err_set(err, LR_ENOMEM, "runner: out of memory");
	r->client = c;
	snprintf(r->name, sizeof(r->name), "%s", name);
	r->concurrency = o->concurrency > 0 ? o->concurrency : 1;
	r->threads = o->threads;
	r->ttl_s = o->ttl_s > 0 ? o->ttl_s : 10;
	r->grace_ms = o->grace_s < 0 ? 0 : (o->grace_s == 0 ? 10000 : (int64_t)o->grace_s * 1000);
	r->exit_when_idle = o->exit_when_idle != 0;
	r->log = o->log != NULL ? o->log : lr_log_stderr;
	r->log_user = o->log_user;
	r->log_level = o->log_level;
	pthread_mutex_init(&r->config_mu, NULL);
	pthread_mutex_init(&r->log_mu, NULL);
	pthread_mutex_init(&r->workers_mu, NULL);
	lr_rng_init(&r->rng, NULL);
	r->spec_avg = LR_SPEC_CACHE_ONE; /* unknown yet: a first prefetch of 16 */
	r->inbox.wake_fd = -1;
	if (lr_inbox_init(&r->inbox) != 0 || lr_taskset_init(&r->set) != 0 ||
	    lr_gate_init(r) != 0 || lr_sched_init(r) != 0) {
		lr_runner_free(r);
		return lr_err_set(err, LR_ESYS, "runner: %s", strerror(errno));
	}
	*out = r;
	return 0;
}

void lr_runner_free(lr_runner *r)
{
	if (r == NULL)
		return;
	if (atomic_load(&r->running)) {
		/* Its threads would go on using the memory freed here: stop
		 * at the caller's mistake rather than corrupt the heap. */
		fprintf(stderr, "leaserun: lr_runner_free(%s) called while lr_runner_run runs; "
		        "call lr_runner_stop and wait for lr_runner_run to return first\n",
		        r->name);
		abort();
	}
	while (r->handlers != NULL) {
		struct lr_handler *h = r->handlers;
		r->handlers = h->next;
		free(h->name);
		free(h);
	}
	lr_inbox_free(&r->inbox);
	lr_taskset_free(&r->set);
	lr_gate_free(r);
	lr_sched_free(r);
	pthread_mutex_destroy(&r->config_mu);
	pthread_mutex_destroy(&r->log_mu);
	pthread_mutex_destroy(&r->workers_mu);
	free(r);
}

/* Take config_mu for a change of r's configuration, unless lr_runner_run
 * is running: then LR_EINVAL, logged, as these calls have no lr_err. */
static int config_begin(lr_runner *r, const char *what)
{
	pthread_mutex_lock(&r->config_mu);
	if (!atomic_load(&r->running))
		return 0;
	pthread_mutex_unlock(&r->config_mu);
	lr_runner_log(r, LR_LOG_ERROR, NULL, NULL, -1,
	              "%s: not while lr_runner_run runs (handlers and callbacks are set "
	              "before it)", what);
	return LR_EINVAL;
}

/* LR_EINVAL, logged through r's sink when there is an r, for a NULL
 * argument of a call that has no lr_err. */
static int null_arg(lr_runner *r, const char *what, const char *arg)
{
	if (r != NULL)
		lr_runner_log(r, LR_LOG_ERROR, NULL, NULL, -1, "%s: %s must not be NULL", what,
		              arg);
	return LR_EINVAL;
}

int lr_runner_handle(lr_runner *r, const char *step_name, lr_step_fn fn, void *user)
{
	if (r == NULL || fn == NULL)
		return null_arg(r, "lr_runner_handle", r == NULL ? "r" : "fn");
	if (step_name != NULL && step_name[0] == '\0') {
		/* Every step has a name: the handler would never run. */
		lr_runner_log(r, LR_LOG_ERROR, NULL, NULL, -1,
		              "lr_runner_handle: step_name must not be empty (NULL handles "
		              "every step without a handler of its own)");
		return LR_EINVAL;
	}
	struct lr_handler *h = calloc(1, sizeof(*h));
	if (h == NULL)
		return LR_ENOMEM;
	if (step_name != NULL && (h->name = strdup(step_name)) == NULL) {
		free(h);
		return LR_ENOMEM;
	}
	h->fn = fn;
	h->user = user;
	if (config_begin(r, "lr_runner_handle") != 0) {
		free(h->name);
		free(h);
		return LR_EINVAL;
	}
	h->next = r->handlers;
	r->handlers = h;
	pthread_mutex_unlock(&r->config_mu);
	return 0;
}

int lr_runner_set_callbacks(lr_runner *r, const lr_runner_callbacks *cb, void *user)
{
	if (r == NULL || cb == NULL)
		return null_arg(r, "lr_runner_set_callbacks", r == NULL ? "r" : "cb");
	if (config_begin(r, "lr_runner_set_callbacks") != 0)
		return LR_EINVAL;
	r->cb = *cb;
	r->cb_user = user;
	pthread_mutex_unlock(&r->config_mu);
	return 0;
}

int lr_runner_run_begin(lr_runner *r, lr_err *err)
{
	pthread_mutex_lock(&r->config_mu);
	bool already = atomic_load(&r->running);
	if (!already)
		atomic_store(&r->running, true);
	pthread_mutex_unlock(&r->config_mu);
	if (already)
		return lr_err_set(err, LR_EINVAL, "runner %s: the runner is running already",
		                  r->name);
	return 0;
}

void lr_runner_run_end(lr_runner *r)
{
	pthread_mutex_lock(&r->config_mu);
	atomic_store(&r->running, false);
	pthread_mutex_unlock(&r->config_mu);
}

void lr_runner_stop(lr_runner *r)
{
	if (r == NULL)
		return; /* like free(NULL) */
	/* Only async-signal-safe calls: an atomic store and write(2). */
	atomic_store(&r->stop_requested, 1);
	lr_inbox_wake(&r->inbox);
}
