/* cmd_bench.c - `leaserun bench`: how fast this etcd takes create-once txns
 * (the ceiling), and how close the runner's full path comes to it, in a
 * private prefix that is deleted afterwards.
 *
 * It measures the library from outside, as an embedder would: in-process
 * runners with a no-op handler, their statistics (lr_runner_get_stats_sum),
 * and etcd's own history of the prefix for the writes each task cost.
 * Threads: the main thread; pools of measuring threads (raw txns, submits)
 * that share one etcd client; one thread per runner. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/fdtable.h"
#include "base/stats.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "etcd/watch.h"
#include "fiber/fiber.h"
#include "options.h"

static const char usage[] =
    "Usage: leaserun bench [--tasks N] [--steps S] [--concurrency C]\n"
    "                      [--threads T] [--runners R] [--raw-txns N]\n"
    "                      [--raw-seconds S] [--json]\n"
    "\n"
    "Measure etcd and the runner on it, in a private prefix\n"
    "(<prefix>bench-<pid>-<random>/) deleted afterwards, also on failure:\n"
    "  raw    create-once txns (compare version 0, put) on unique keys from\n"
    "         R x C threads sharing one client (fibers on T threads with\n"
    "         --threads): the ceiling of this etcd\n"
    "  tasks  N tasks of S no-op steps, submitted first, then run through\n"
    "         the full path (claim, commits, completion) by R runners of\n"
    "         concurrency C in this process\n"
    "Efficiency is tasks/s x etcd writes per task / raw txn/s: 1 when the\n"
    "runner keeps etcd as busy as the raw txns did.\n"
    "etcd keeps deleted keys in its history until it compacts it, and\n"
    "writes get slower with each one kept: use a test etcd, or one with\n"
    "--auto-compaction-retention, when running this more than once. The\n"
    "bench deletes its keys a hundred to a txn at the end: one delete of\n"
    "them all would slow etcd 3.4 and 3.5 down until they restart.\n"
    "\n"
    "  --tasks N         tasks to run (default 2000)\n"
    "  --steps S         no-op steps per task (default 4)\n"
    "  --concurrency C   tasks each runner runs at once (default 16)\n"
    "  --threads T       threads each runner's workers share: 0 for a\n"
    "                    thread per worker (default 0)\n"
    "  --runners R       runners in this process (default 1)\n"
    "  --raw-txns N      raw txns (default: the task phase's writes,\n"
    "                    N x (S + 1), at least 2000)\n"
    "  --raw-seconds S   stop the raw phase after S seconds (or N txns)\n"
    "  --json            one JSON object instead of the table\n"
    "\n"
    "Exit status: 0 done, 1 etcd error or a stalled run, 2 bad flags.\n";

#define STALL_MS 60000  /* no task finished for this long: give up */
#define RAW_VALUE 128   /* bytes per raw put: about a checkpoint's size */

/* Set by SIGINT/SIGTERM: every phase stops, the prefix is deleted. */
static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	interrupted = 1;
}

struct bench_opts {
	long tasks, steps, conc, threads, runners, raw_txns;
	double raw_seconds;
	int json;
};

struct results {
	/* raw */
	int raw_threads;
	uint64_t raw_txns;
	double raw_s, raw_per_s, raw_cpu_us, raw_switches;
	lr_latency raw;
	/* tasks */
	double submit_per_s;
	double run_s, tasks_per_s, cpu_us_per_task, switches_per_task, rss_mb;
	lr_runner_stats st;
	uint64_t txns, writes, w_claims, w_commits, w_completions;
	double txns_per_task, writes_per_task, efficiency;
};

/* ---- a pool of threads over an index range ------------------------------ */

struct pool;
typedef int (*pool_fn)(struct pool *p, long i, lr_err *err);

struct pool {
	pool_fn fn;
	void *user;
	long total;
	int64_t end_ms;        /* 0: no time limit */
	atomic_long next;
	atomic_long done;
	atomic_int failed;
	lr_err err;            /* the first failure, under mu */
	pthread_mutex_t mu;
};

static void *pool_thread(void *arg)
{
	struct pool *p = arg;
	for (;;) {
		if (interrupted || atomic_load(&p->failed) ||
		    (p->end_ms != 0 && lr_mono_ms() >= p->end_ms))
			return NULL;
		long i = atomic_fetch_add(&p->next, 1);
		if (i >= p->total)
			return NULL;
		lr_err e = { 0 };
		if (p->fn(p, i, &e) != 0) {
			pthread_mutex_lock(&p->mu);
			if (!atomic_exchange(&p->failed, 1))
				p->err = e;
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		atomic_fetch_add(&p->done, 1);
	}
}

static void pool_fiber(void *arg)
{
	pool_thread(arg);
}

/* Start `workers` of the pool: threads, or with hosts > 0 fibers spread
 * over that many threads (as a runner's workers with --threads). The
 * number of threads started, to join; 0 when none could start. */
static int pool_start(struct pool *p, int workers, int hosts, pthread_t *th, lr_host **hs)
{
	int started = 0;
	if (hosts == 0) {
		for (; started < workers; started++)
			if (pthread_create(&th[started], NULL, pool_thread, p) != 0)
				break;
		return started;
	}
	void **args = calloc((size_t)workers, sizeof(*args));
	if (args == NULL)
		return 0;
	for (int i = 0; i < workers; i++)
		args[i] = p;
	started = lr_hosts_start(hs, hosts, pool_fiber, args, (size_t)workers);
	free(args);
	return started;
}

/* Run fn(0..total-1) on `workers` threads, or fibers on `hosts` threads;
 * 0, or the first failure. */
static int pool_run(struct pool *p, int workers, int hosts, lr_err *err)
{
	pthread_t *th = calloc((size_t)workers, sizeof(*th));
	lr_host **hs = calloc((size_t)(hosts > 0 ? hosts : 1), sizeof(*hs));
	if (th == NULL || hs == NULL) {
		free(th);
		free(hs);
		return lr_err_set(err, LR_ENOMEM, "bench: out of memory");
	}
	pthread_mutex_init(&p->mu, NULL);
	int started = pool_start(p, workers, hosts, th, hs);
	for (int i = 0; i < started; i++) {
		if (hosts > 0)
			lr_host_join(hs[i]);
		else
			pthread_join(th[i], NULL);
	}
	free(th);
	free(hs);
	pthread_mutex_destroy(&p->mu);
	if (started == 0)
		return lr_err_set(err, LR_ESYS, "bench: cannot start threads");
	if (atomic_load(&p->failed)) {
		*err = p->err;
		return err->code != 0 ? err->code : LR_EINTERNAL;
	}
	if (interrupted)
		return lr_err_set(err, LR_ECANCELLED, "interrupted");
	return 0;
}

/* CPU time of the whole process (every thread), and its context switches. */
struct usage {
	int64_t cpu_us;
	int64_t switches;
};

static struct usage usage_now(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (struct usage){
		.cpu_us = (int64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000 +
		          ru.ru_utime.tv_usec + ru.ru_stime.tv_usec,
		.switches = ru.ru_nvcsw + ru.ru_nivcsw,
	};
}

static double peak_rss_mb(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_maxrss / 1024.0; /* kB on Linux */
}

/* ---- raw: create-once txns ------------------------------------------------ */

struct raw {
	lr_etcd *etcd;
	char dir[LR_KEY_SIZE];
	char value[RAW_VALUE];
	lr_hist hist;
};

static int raw_one(struct pool *p, long i, lr_err *err)
{
	struct raw *w = p->user;
	char key[LR_KEY_SIZE + 24];
	snprintf(key, sizeof(key), "%s%ld", w->dir, i);
	int64_t t0 = lr_mono_us();
	lr_txn *t = lr_txn_new();
	if (t == NULL)
		return lr_err_set(err, LR_ENOMEM, "bench: out of memory");
	lr_txn_cmp(t, key, 0, LR_CMP_VERSION, LR_CMP_EQ, 0);
	lr_txn_put(t, LR_THEN, key, w->value, sizeof(w->value), 0);
	lr_txn_result r;
	int rc = lr_etcd_txn(w->etcd, t, LR_CALL_RETRY, &r, err);
	lr_txn_free(t);
	if (rc != 0)
		return lr_err_wrap(err, rc, "txn %s", key);
	bool ok = r.succeeded;
	lr_txn_result_free(&r);
	if (!ok)
		return lr_err_set(err, LR_ECONFLICT, "txn %s: the key exists", key);
	lr_hist_record(&w->hist, lr_mono_us() - t0);
	return 0;
}

static int run_raw(lr_client *c, const struct bench_opts *o, struct results *res,
                   lr_err *err)
{
	struct raw *w = calloc(1, sizeof(*w));
	lr_hist_snap *snap = calloc(1, sizeof(*snap));
	if (w == NULL || snap == NULL) {
		free(w);
		free(snap);
		return lr_err_set(err, LR_ENOMEM, "bench: out of memory");
	}
	w->etcd = lr_client_etcd(c);
	lr_key(c, "raw/", "", w->dir);
	memset(w->value, 'v', sizeof(w->value));
	res->raw_threads = (int)(o->runners * o->conc);
	struct pool p = { .fn = raw_one, .user = w, .total = o->raw_txns };
	struct usage u0 = usage_now();
	int64_t t0 = lr_mono_us();
	if (o->raw_seconds > 0)
		p.end_ms = lr_mono_ms() + (int64_t)(o->raw_seconds * 1000);
	int rc = pool_run(&p, res->raw_threads, (int)o->threads, err);
	if (rc != 0)
		lr_err_wrap(err, rc, "bench: raw txns");
	int64_t t1 = lr_mono_us();
	struct usage u1 = usage_now();
	if (rc == 0) {
		res->raw_txns = (uint64_t)atomic_load(&p.done);
		res->raw_s = (double)(t1 - t0) / 1e6;
		res->raw_per_s = res->raw_s > 0 ? (double)res->raw_txns / res->raw_s : 0;
		res->raw_cpu_us = res->raw_txns > 0
		                      ? (double)(u1.cpu_us - u0.cpu_us) / (double)res->raw_txns : 0;
		res->raw_switches = res->raw_txns > 0
		                        ? (double)(u1.switches - u0.switches) / (double)res->raw_txns : 0;
		lr_hist_add_to(&w->hist, snap);
		lr_hist_summary(snap, &res->raw);
		/* The raw keys stay until the end: deleting them now would slow
		 * the task phase down (etcd 3.4 writes get slower with every
		 * deleted key it keeps in its history, until a compaction). */
	}
	free(w);
	free(snap);
	return rc;
}

/* ---- submitting the tasks ---------------------------------------------------- */

struct submit {
	lr_client *c;
	long steps;
};

static int submit_one(struct pool *p, long i, lr_err *err)
{
	struct submit *s = p->user;
	size_t cap = 64 + (size_t)s->steps * 40;
	char *spec = malloc(cap);
	if (spec == NULL)
		return lr_err_set(err, LR_ENOMEM, "bench: out of memory");
	size_t n = (size_t)snprintf(spec, cap, "{\"id\":\"t%06ld\",\"steps\":[", i);
	for (long k = 0; k < s->steps; k++)
		n += (size_t)snprintf(spec + n, cap - n, "%s{\"name\":\"s%ld\",\"run\":\"noop\"}",
		                      k ? "," : "", k);
	snprintf(spec + n, cap - n, "]}");
	char id[LR_ID_SIZE];
	int rc = lr_submit_text(s->c, spec, strlen(spec), NULL, id, NULL, err);
	free(spec);
	return rc;
}

/* ---- counting etcd writes from the prefix's history ---------------------------- */

enum { W_CLAIM = 1, W_CKPT = 2, W_DONE = 4, W_OTHER = 8 };

/* Replays the prefix's events from one revision on. A revision is one
 * txn, which may carry the writes of several tasks (group commit): each
 * task's claim, checkpoint or done record written in it is one write for
 * that task, and a revision holding any of them is one txn (submits and
 * runner names are left out). */
struct touched {
	char id[LR_ID_SIZE];
	int kinds;           /* W_* of this task in the revision */
};

struct tally {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	lr_client *c;
	int64_t until;       /* the sentinel's revision: the end of the replay */
	bool reached, dead;
	int64_t rev;         /* revision being summed up */
	struct touched *tasks; /* the tasks it touched so far */
	size_t n_tasks, cap_tasks;
	uint64_t txns, writes, claims, commits, completions;
};

static int kind_of(lr_client *c, const lr_watch_event *ev, const char **id)
{
	bool put = ev->type == LR_EV_PUT;
	const char *kinds[] = { LR_K_CLAIMS, LR_K_CHECKPOINTS, LR_K_DONE, LR_K_CANCEL };
	const int w[] = { put ? W_CLAIM : W_OTHER, W_CKPT, W_DONE, W_OTHER };
	for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
		*id = lr_key_id(c, kinds[i], ev->kv.key);
		if (*id != NULL)
			return w[i];
	}
	return 0; /* tasks/, runners/, the sentinel */
}

/* Task id's kinds in the revision summed up; false when out of memory. */
static bool tally_touch(struct tally *t, const char *id, int kind)
{
	for (size_t i = 0; i < t->n_tasks; i++)
		if (strcmp(t->tasks[i].id, id) == 0) {
			t->tasks[i].kinds |= kind;
			return true;
		}
	if (t->n_tasks == t->cap_tasks) {
		size_t cap = t->cap_tasks ? 2 * t->cap_tasks : 64;
		struct touched *n = realloc(t->tasks, cap * sizeof(*n));
		if (n == NULL)
			return false;
		t->tasks = n;
		t->cap_tasks = cap;
	}
	struct touched *e = &t->tasks[t->n_tasks++];
	snprintf(e->id, sizeof(e->id), "%s", id);
	e->kinds = kind;
	return true;
}

/* The revision summed up so far is complete: count it. */
static void tally_close(struct tally *t)
{
	if (t->n_tasks > 0)
		t->txns++;
	for (size_t i = 0; i < t->n_tasks; i++) {
		int kinds = t->tasks[i].kinds;
		t->writes++;
		if (kinds & W_CLAIM)
			t->claims++;
		else if (kinds & W_DONE)
			t->completions++;
		else if (kinds & W_CKPT)
			t->commits++;
	}
	t->n_tasks = 0;
}

static void on_history(void *user, const lr_watch_batch *b)
{
	struct tally *t = user;
	pthread_mutex_lock(&t->mu);
	if (b->kind == LR_WATCH_COMPACTED || b->kind == LR_WATCH_CANCELLED)
		t->dead = true;
	for (size_t i = 0; i < b->n && !t->reached; i++) {
		const lr_watch_event *ev = &b->events[i];
		if (ev->kv.mod_rev != t->rev) {
			tally_close(t);
			t->rev = ev->kv.mod_rev;
		}
		if (ev->kv.mod_rev >= t->until) {
			t->reached = true;
			break;
		}
		const char *id = NULL;
		int kind = kind_of(t->c, ev, &id);
		if (kind != 0 && !tally_touch(t, id, kind))
			t->dead = true;
	}
	if (t->reached || t->dead)
		pthread_cond_broadcast(&t->cond);
	pthread_mutex_unlock(&t->mu);
}

/* Count the task writes between revisions from+1 and now. */
static int count_writes(lr_client *c, int64_t from, struct results *res, lr_err *err)
{
	char key[LR_KEY_SIZE], dir[LR_KEY_SIZE];
	lr_key(c, "bench-end", "", key);
	lr_key(c, "", "", dir);
	int64_t until = 0;
	int rc = lr_kv_put(lr_client_etcd(c), key, "1", 1, 0, &until, NULL, err);
	if (rc != 0)
		return rc;
	struct tally t = { .c = c, .until = until };
	pthread_mutex_init(&t.mu, NULL);
	pthread_cond_init(&t.cond, NULL);
	lr_watch *w = NULL;
	lr_watcher *wr = NULL;
	rc = lr_watch_new(lr_client_etcd(c), &w, err);
	if (rc == 0)
		rc = lr_watch_add(w, dir, LR_KEY_PREFIX, from + 1, on_history, &t, &wr, err);
	if (rc == 0) {
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_sec += 60;
		pthread_mutex_lock(&t.mu);
		while (!t.reached && !t.dead && !interrupted)
			if (pthread_cond_timedwait(&t.cond, &t.mu, &dl) == ETIMEDOUT)
				break;
		pthread_mutex_unlock(&t.mu);
		if (!t.reached)
			rc = lr_err_set(err, LR_ETIMEDOUT,
			                "bench: could not replay the prefix's history "
			                "(compacted, or etcd too slow)");
	}
	lr_watch_free(w); /* no callback after this */
	free(t.tasks);
	res->txns = t.txns;
	res->writes = t.writes;
	res->w_claims = t.claims;
	res->w_commits = t.commits;
	res->w_completions = t.completions;
	pthread_cond_destroy(&t.cond);
	pthread_mutex_destroy(&t.mu);
	return rc;
}

/* The store's revision now. */
static int store_revision(lr_client *c, int64_t *rev, lr_err *err)
{
	char key[LR_KEY_SIZE];
	lr_key(c, "bench-end", "", key);
	lr_range_opts o = { .key = key, .flags = LR_RANGE_COUNT_ONLY };
	lr_range_result r;
	int rc = lr_kv_range(lr_client_etcd(c), &o, &r, err);
	if (rc == 0) {
		*rev = r.revision;
		lr_range_result_free(&r);
	}
	return rc;
}

/* ---- the task phase ------------------------------------------------------------- */

struct finish_line {
	pthread_mutex_t mu;
	pthread_cond_t cond;
	long done, want;
	int64_t last_us;      /* when the latest task finished */
};

static void on_task_done(void *user, const char *task, lr_task_state st, const char *error)
{
	struct finish_line *f = user;
	pthread_mutex_lock(&f->mu);
	f->done++;
	f->last_us = lr_mono_us();
	if (f->done >= f->want)
		pthread_cond_broadcast(&f->cond);
	pthread_mutex_unlock(&f->mu);
}

static lr_step_result noop_step(lr_step *s, void *user)
{
	return LR_STEP_OK;
}

struct hosted {
	lr_runner *r;
	pthread_t th;
	bool started;
	int rc;               /* valid once `ended` */
	lr_err err;
	atomic_bool ended;
};

static void *runner_thread(void *arg)
{
	struct hosted *h = arg;
	h->rc = lr_runner_run(h->r, &h->err);
	atomic_store(&h->ended, true);
	return NULL;
}

/* Wait until every task finished; false when interrupted or stalled. */
static bool wait_finish(struct finish_line *f, struct hosted *hs, long n, lr_err *err)
{
	long seen = -1;
	int64_t progress_ms = lr_mono_ms();
	pthread_mutex_lock(&f->mu);
	while (f->done < f->want) {
		struct timespec dl;
		clock_gettime(CLOCK_REALTIME, &dl);
		dl.tv_nsec += 100 * 1000000;
		if (dl.tv_nsec >= 1000000000) {
			dl.tv_sec++;
			dl.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&f->cond, &f->mu, &dl);
		if (f->done != seen) {
			seen = f->done;
			progress_ms = lr_mono_ms();
		}
		const char *why = interrupted ? "interrupted"
		                  : lr_mono_ms() - progress_ms > STALL_MS ? "no task finished for 60 s"
		                                                          : NULL;
		for (long i = 0; why == NULL && i < n; i++)
			if (atomic_load(&hs[i].ended))
				why = hs[i].rc != 0 ? hs[i].err.msg : "a runner stopped";
		if (why != NULL) {
			pthread_mutex_unlock(&f->mu);
			lr_err_set(err, interrupted ? LR_ECANCELLED : LR_ETIMEDOUT,
			           "bench: %ld of %ld tasks finished: %s", seen, f->want, why);
			return false;
		}
	}
	pthread_mutex_unlock(&f->mu);
	return true;
}

static int run_tasks(lr_client *c, const struct bench_opts *o, struct results *res,
                     lr_err *err)
{
	struct submit sub = { .c = c, .steps = o->steps };
	struct pool p = { .fn = submit_one, .user = &sub, .total = o->tasks };
	int64_t t0 = lr_mono_us();
	int rc = pool_run(&p, (int)(o->runners * o->conc), 0, err);
	if (rc != 0)
		return lr_err_wrap(err, rc, "bench: submitting the tasks");
	res->submit_per_s = (double)o->tasks * 1e6 / (double)(lr_mono_us() - t0);
	int64_t from = 0;
	rc = store_revision(c, &from, err);
	if (rc != 0)
		return rc;

	size_t made = 0; /* runners created */
	struct finish_line f = { .want = o->tasks };
	pthread_mutex_init(&f.mu, NULL);
	pthread_cond_init(&f.cond, NULL);
	struct hosted *hs = calloc((size_t)o->runners, sizeof(*hs));
	lr_runner **rs = calloc((size_t)o->runners, sizeof(*rs));
	if (hs == NULL || rs == NULL) {
		rc = lr_err_set(err, LR_ENOMEM, "bench: out of memory");
		goto out;
	}
	lr_runner_callbacks cb = { .task_done = on_task_done };
	for (long i = 0; i < o->runners; i++, made++) {
		char name[64];
		snprintf(name, sizeof(name), "bench-%d-%ld", (int)getpid(), i);
		lr_runner_opts ro = { .name = name, .concurrency = (int)o->conc,
		                      .threads = (int)o->threads, .grace_s = 1,
		                      /* a line per step would measure stderr */
		                      .log_level = LR_LOG_WARN };
		rc = lr_runner_new(c, &ro, &hs[i].r, err);
		if (rc != 0)
			goto out;
		rs[i] = hs[i].r;
		if (lr_runner_handle(hs[i].r, NULL, noop_step, NULL) != 0) {
			rc = lr_err_set(err, LR_ENOMEM, "bench: out of memory");
			made++;
			goto out;
		}
		lr_runner_set_callbacks(hs[i].r, &cb, &f);
	}
	struct usage u0 = usage_now();
	t0 = lr_mono_us();
	for (long i = 0; i < o->runners; i++)
		hs[i].started = pthread_create(&hs[i].th, NULL, runner_thread, &hs[i]) == 0;
	bool all = wait_finish(&f, hs, o->runners, err);
	struct usage u1 = usage_now();
	if (all) {
		res->run_s = (double)(f.last_us - t0) / 1e6;
		res->tasks_per_s = res->run_s > 0 ? (double)o->tasks / res->run_s : 0;
		res->cpu_us_per_task = (double)(u1.cpu_us - u0.cpu_us) / (double)o->tasks;
		res->switches_per_task = (double)(u1.switches - u0.switches) / (double)o->tasks;
	} else {
		rc = err->code;
	}
out:
	for (size_t i = 0; i < made; i++) {
		if (hs[i].started) {
			lr_runner_stop(hs[i].r);
			pthread_join(hs[i].th, NULL);
		}
	}
	if (made > 0)
		lr_runner_get_stats_sum(rs, made, &res->st);
	for (size_t i = 0; i < made; i++)
		lr_runner_free(hs[i].r);
	free(hs);
	free(rs);
	pthread_cond_destroy(&f.cond);
	pthread_mutex_destroy(&f.mu);
	if (rc == 0)
		rc = count_writes(c, from, res, err);
	return rc;
}

/* ---- output ------------------------------------------------------------------------ */

static double round_to(double v, double unit)
{
	return round(v / unit) * unit;
}

static void print_json(const struct bench_opts *o, const struct results *r)
{
	json_t *j = json_object();
	json_object_set_new(j, "tasks_per_s", json_real(round_to(r->tasks_per_s, 0.1)));
	json_object_set_new(j, "raw_txn_per_s", json_real(round_to(r->raw_per_s, 0.1)));
	json_object_set_new(j, "writes_per_task", json_real(round_to(r->writes_per_task, 0.001)));
	json_object_set_new(j, "txns_per_task", json_real(round_to(r->txns_per_task, 0.001)));
	json_object_set_new(j, "claim_p50_ms", json_real(round_to(r->st.claim.p50_ms, 0.001)));
	json_object_set_new(j, "claim_p99_ms", json_real(round_to(r->st.claim.p99_ms, 0.001)));
	json_object_set_new(j, "commit_p50_ms", json_real(round_to(r->st.commit.p50_ms, 0.001)));
	json_object_set_new(j, "commit_p99_ms", json_real(round_to(r->st.commit.p99_ms, 0.001)));
	json_object_set_new(j, "cpu_us_per_task", json_real(round_to(r->cpu_us_per_task, 0.1)));
	json_object_set_new(j, "rss_mb", json_real(round_to(r->rss_mb, 0.1)));
	json_object_set_new(j, "efficiency", json_real(round_to(r->efficiency, 0.001)));
	json_object_set_new(j, "completion_p50_ms",
	                    json_real(round_to(r->st.completion.p50_ms, 0.001)));
	json_object_set_new(j, "completion_p99_ms",
	                    json_real(round_to(r->st.completion.p99_ms, 0.001)));
	json_object_set_new(j, "raw_p50_ms", json_real(round_to(r->raw.p50_ms, 0.001)));
	json_object_set_new(j, "raw_p99_ms", json_real(round_to(r->raw.p99_ms, 0.001)));
	json_object_set_new(j, "raw_txns", json_integer((json_int_t)r->raw_txns));
	json_object_set_new(j, "raw_threads", json_integer(r->raw_threads));
	json_object_set_new(j, "raw_cpu_us_per_txn", json_real(round_to(r->raw_cpu_us, 0.1)));
	json_object_set_new(j, "raw_context_switches_per_txn",
	                    json_real(round_to(r->raw_switches, 0.01)));
	json_object_set_new(j, "tasks", json_integer(o->tasks));
	json_object_set_new(j, "steps", json_integer(o->steps));
	json_object_set_new(j, "concurrency", json_integer(o->conc));
	json_object_set_new(j, "threads", json_integer(o->threads));
	json_object_set_new(j, "runners", json_integer(o->runners));
	json_object_set_new(j, "run_s", json_real(round_to(r->run_s, 0.001)));
	json_object_set_new(j, "context_switches_per_task",
	                    json_real(round_to(r->switches_per_task, 0.1)));
	json_object_set_new(j, "writes", json_integer((json_int_t)r->writes));
	json_object_set_new(j, "txns", json_integer((json_int_t)r->txns));
	json_object_set_new(j, "claims_lost", json_integer((json_int_t)r->st.claims_lost));
	json_object_set_new(j, "submit_per_s", json_real(round_to(r->submit_per_s, 0.1)));
	json_dumpf(j, stdout, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
	fputc('\n', stdout);
	json_decref(j);
}

/* One row: metric, value, and a note (may be empty). */
static void row(const char *metric, const char *value, const char *note)
{
	printf("%-26s %13s%s%s\n", metric, value, note[0] ? "  " : "", note);
}

static void print_table(const char *endpoints, const char *prefix,
                        const struct bench_opts *o, const struct results *r)
{
	char v[64], n[128];
	printf("etcd %s, prefix %s (deleted)\n\n", endpoints, prefix);
	row("metric", "value", "");
	snprintf(v, sizeof(v), "%.0f", r->raw_per_s);
	snprintf(n, sizeof(n), "%d threads, %llu create-once txns", r->raw_threads,
	         (unsigned long long)r->raw_txns);
	row("raw txn/s", v, n);
	snprintf(v, sizeof(v), "%.2f / %.2f", r->raw.p50_ms, r->raw.p99_ms);
	row("raw txn p50 / p99 ms", v, "");
	snprintf(v, sizeof(v), "%.0f", r->tasks_per_s);
	snprintf(n, sizeof(n), "%ld tasks x %ld no-op steps, %ld runner(s) x %ld", o->tasks,
	         o->steps, o->runners, o->conc);
	row("tasks/s", v, n);
	snprintf(v, sizeof(v), "%.2f / %.2f", r->st.claim.p50_ms, r->st.claim.p99_ms);
	row("claim p50 / p99 ms", v, "");
	snprintf(v, sizeof(v), "%.2f / %.2f", r->st.commit.p50_ms, r->st.commit.p99_ms);
	row("step commit p50 / p99 ms", v, "");
	snprintf(v, sizeof(v), "%.2f / %.2f", r->st.completion.p50_ms, r->st.completion.p99_ms);
	row("completion p50 / p99 ms", v, "");
	snprintf(v, sizeof(v), "%.3f", r->writes_per_task);
	snprintf(n, sizeof(n), "counted: %llu claims, %llu commits, %llu completions",
	         (unsigned long long)r->w_claims, (unsigned long long)r->w_commits,
	         (unsigned long long)r->w_completions);
	row("etcd writes per task", v, n);
	snprintf(v, sizeof(v), "%.3f", r->txns_per_task);
	snprintf(n, sizeof(n), "%llu etcd revisions (txns) for the tasks' writes",
	         (unsigned long long)r->txns);
	row("etcd txns per task", v, n);
	snprintf(v, sizeof(v), "%.3f", r->efficiency);
	row("efficiency", v, "tasks/s x writes per task / raw txn/s");
	snprintf(v, sizeof(v), "%.0f", r->cpu_us_per_task);
	snprintf(n, sizeof(n), "raw: %.0f us per txn", r->raw_cpu_us);
	row("runner CPU us per task", v, n);
	snprintf(v, sizeof(v), "%.1f", r->rss_mb);
	row("peak RSS MB", v, "");
	if (r->st.claims_lost > 0) {
		snprintf(v, sizeof(v), "%llu", (unsigned long long)r->st.claims_lost);
		row("claims lost", v, "to another runner of this bench");
	}
}

/* ---- the command -------------------------------------------------------------------- */

static int parse_opts(const char *const *v, int json, struct bench_opts *o)
{
	/* v: tasks, steps, concurrency, runners, raw-txns, raw-seconds, threads */
	long raw_s = 0;
	int rc = CLI_CONTINUE;
	*o = (struct bench_opts){ .tasks = 2000, .steps = 4, .conc = 16, .runners = 1,
	                          .json = json };
	if (v[0] != NULL)
		rc = cli_int("--tasks", v[0], 1, 1000000, &o->tasks);
	if (rc == CLI_CONTINUE && v[1] != NULL)
		rc = cli_int("--steps", v[1], 1, 1000, &o->steps);
	if (rc == CLI_CONTINUE && v[2] != NULL)
		rc = cli_int("--concurrency", v[2], 1, 1024, &o->conc);
	if (rc == CLI_CONTINUE && v[3] != NULL)
		rc = cli_int("--runners", v[3], 1, 64, &o->runners);
	if (rc == CLI_CONTINUE && v[4] != NULL)
		rc = cli_int("--raw-txns", v[4], 1, 100000000, &o->raw_txns);
	if (rc == CLI_CONTINUE && v[5] != NULL)
		rc = cli_int("--raw-seconds", v[5], 1, 86400, &raw_s);
	if (rc == CLI_CONTINUE && v[6] != NULL)
		rc = cli_int("--threads", v[6], 0, o->conc, &o->threads);
	if (rc == CLI_CONTINUE && o->runners * o->conc > 4096)
		rc = cli_usage_error("bench: --runners x --concurrency must be at most 4096");
	o->raw_seconds = (double)raw_s;
	if (v[4] == NULL) {
		o->raw_txns = o->tasks * (o->steps + 1);
		if (o->raw_txns < 2000)
			o->raw_txns = 2000;
	}
	return rc;
}

/* "<prefix>bench-<pid>-<random>/": the user's prefix as every command
 * takes it (flag, environment, default), normalised as the library does. */
static int bench_prefix(const char *given, char *out, size_t size)
{
	const char *env = getenv("LEASERUN_PREFIX");
	const char *base = given != NULL ? given
	                   : env != NULL && env[0] != '\0' ? env : "/leaserun/";
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	unsigned rnd = (unsigned)ts.tv_nsec ^ ((unsigned)ts.tv_sec << 8) ^
	               ((unsigned)getpid() << 16);
	size_t n = strlen(base);
	/* The library refuses the rest, on the whole prefix; a blank at the
	 * end would be inside it. */
	if (n > 0 && base[n - 1] == ' ')
		return cli_usage_error("prefix \"%.64s\": must not start or end with a blank",
		                       base);
	int w = snprintf(out, size, "%s%sbench-%d-%08x/", base,
	                 n > 0 && base[n - 1] == '/' ? "" : "/", (int)getpid(), rnd);
	if (w < 0 || (size_t)w >= size || (size_t)w > LR_PREFIX_MAX)
		return cli_usage_error("--prefix: too long to hold the bench prefix");
	return CLI_CONTINUE;
}

static void catch_signals(void)
{
	struct sigaction sa = { .sa_handler = on_signal };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

/* The bench's keys go a hundred to a txn, 4 ms apart, not in one
 * DeleteRange of the prefix. etcd 3.4 and 3.5 copy their buffer of writes
 * not yet committed to disk for every request they serve, and that buffer
 * keeps the size of the largest batch it ever held: one DeleteRange of tens
 * of thousands of keys would leave the etcd several times slower for
 * whatever runs on it next. At most 2,500 deletes per 100 ms (etcd's commit
 * interval) keep it no bigger than the run itself left it. */
static int delete_paced(lr_etcd *e, const char *dir, lr_err *err)
{
	char end[LR_KEY_SIZE], from[LR_KEY_SIZE];
	end[lr_prefix_end(dir, end)] = '\0';
	snprintf(from, sizeof(from), "%s", dir);
	for (bool more = true; more; lr_sleep_ms(4)) {
		/* From the last key deleted: it is gone, the next live one is first. */
		lr_range_opts o = { .key = from, .range_end = end, .flags = LR_RANGE_KEYS_ONLY,
		                    .limit = 100 };
		lr_range_result keys;
		int rc = lr_kv_range(e, &o, &keys, err);
		if (rc != 0)
			return rc;
		if (keys.n == 0) {
			lr_range_result_free(&keys);
			return 0;
		}
		lr_txn *t = lr_txn_new();
		for (size_t i = 0; t != NULL && i < keys.n; i++)
			lr_txn_delete(t, LR_THEN, keys.kvs[i].key, 0);
		snprintf(from, sizeof(from), "%s", keys.kvs[keys.n - 1].key);
		more = keys.more;
		lr_range_result_free(&keys);
		if (t == NULL)
			return lr_err_set(err, LR_ENOMEM, "delete %s: out of memory", dir);
		lr_txn_result r;
		rc = lr_etcd_txn(e, t, LR_CALL_RETRY, &r, err);
		lr_txn_free(t);
		if (rc != 0)
			return rc;
		lr_txn_result_free(&r);
	}
	return 0;
}

int cmd_bench(int argc, char **argv)
{
	const char *v[7] = { NULL };
	int json = 0;
	const cli_flag flags[] = {
		{ "tasks", &v[0], NULL },
		{ "steps", &v[1], NULL },
		{ "concurrency", &v[2], NULL },
		{ "runners", &v[3], NULL },
		{ "raw-txns", &v[4], NULL },
		{ "raw-seconds", &v[5], NULL },
		{ "threads", &v[6], NULL },
		{ "json", NULL, &json },
		{ NULL, NULL, NULL },
	};
	const cli_cmd cmd = { "bench", usage, flags, 0 };
	cli_common common = { 0 };
	struct bench_opts o;
	struct results res;
	char prefix[LR_PREFIX_MAX + 64];
	lr_client *c = NULL;
	lr_err err = { 0 };
	int nargs;

	memset(&res, 0, sizeof(res));
	int rc = cli_parse(&cmd, argc, argv, &common, NULL, &nargs);
	if (rc == CLI_CONTINUE)
		rc = parse_opts(v, json, &o);
	if (rc == CLI_CONTINUE)
		rc = bench_prefix(common.prefix, prefix, sizeof(prefix));
	if (rc == CLI_CONTINUE) {
		/* As `leaserun worker` does, while this is the only thread. */
		lr_fd_table_reserve(FDS_OWN + FDS_SLOT_IDLE * (int)(o.runners * o.conc));
		common.prefix = prefix;
		rc = cli_open(&common, &c);
	}
	if (rc != CLI_CONTINUE)
		return rc;
	catch_signals();
	int lrc = run_raw(c, &o, &res, &err);
	if (lrc == 0)
		lrc = run_tasks(c, &o, &res, &err);
	/* Whatever happened, the prefix goes. */
	char dir[LR_KEY_SIZE];
	lr_key(c, "", "", dir);
	lr_err derr = { 0 };
	if (delete_paced(lr_client_etcd(c), dir, &derr) != 0)
		fprintf(stderr, "leaserun: bench: could not delete %s: %s\n", dir, derr.msg);
	if (lrc == 0) {
		res.rss_mb = peak_rss_mb();
		res.writes_per_task = (double)res.writes / (double)o.tasks;
		res.txns_per_task = (double)res.txns / (double)o.tasks;
		res.efficiency = res.raw_per_s > 0
		                     ? res.tasks_per_s * res.writes_per_task / res.raw_per_s : 0;
		if (o.json)
			print_json(&o, &res);
		else
			print_table(lr_etcd_endpoints(lr_client_etcd(c)), dir, &o, &res);
		rc = EXIT_OK;
	} else {
		rc = cli_fail(&err);
	}
	lr_client_close(c);
	return rc;
}
