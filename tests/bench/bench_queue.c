/* bench_queue.c - what queue features cost a runner: the start delay of
 * delayed tasks (first instruction minus not_before), and dispatch with
 * 10,000 tasks waiting for their time (start-up read, idle CPU, submit to
 * first instruction of a plain task) against none. Real `leaserun worker`
 * processes on a local one-member etcd. Prints numbers; asserts nothing.
 *
 * usage: bench_queue [WAITING]   (default 10000) */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd_harness.h"
#include "fleet.h"
#include "marks.h"
#include "test.h"

TEST_GLOBALS;

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

/* The first mark of task, in ms of the wall clock; 0 when none yet. */
static int64_t first_mark_ms(fleet *f, const char *task)
{
	mark *m = NULL;
	size_t n = 0;
	int64_t at = 0;
	marks_read(f->dir, &m, &n);
	for (size_t i = 0; i < n && at == 0; i++)
		if (strcmp(m[i].task, task) == 0)
			at = m[i].ns / 1000000;
	free(m);
	return at;
}

static void delayed_starts(etcdh_cluster *cl)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cl), "bq-delay");
	fleet_start(&f, 0, NULL);
	enum { N = 20 };
	int64_t due[N], late[N];
	for (int i = 0; i < N; i++) {
		char id[16], at[LR_TIME_BUF], spec[512];
		snprintf(id, sizeof(id), "d%02d", i);
		due[i] = lr_wall_ms() + 1000 + 150 * i;
		lr_rfc3339_format(due[i], at);
		snprintf(spec, sizeof(spec), "{\"id\":\"%%s\",\"not_before\":\"%s\",\"steps\":[{"
		         "\"name\":\"s\",\"run\":\"" MARK_START "\"}]}", at);
		fleet_submit(&f, id, spec);
	}
	for (int i = 0; i < N; i++) {
		char id[16];
		snprintf(id, sizeof(id), "d%02d", i);
		fleet_wait_state(&f, id, LR_TASK_SUCCEEDED, 20000);
		late[i] = first_mark_ms(&f, id) - due[i];
	}
	qsort(late, N, sizeof(late[0]), cmp64);
	printf("delayed task, first instruction - not_before: min %lld ms, p50 %lld ms, max %lld ms "
	       "(%d tasks, one idle runner)\n", (long long)late[0], (long long)late[N / 2],
	       (long long)late[N - 1], N);
	fleet_destroy(&f);
}

static void dispatch_with(etcdh_cluster *cl, int waiting)
{
	fleet f;
	char name[32];
	snprintf(name, sizeof(name), "bq-wait%d", waiting);
	fleet_init(&f, etcdh_endpoints(cl), name);
	char at[LR_TIME_BUF];
	lr_rfc3339_format(lr_wall_ms() + 3600 * 1000, at);
	for (int i = 0; i < waiting; i++) {
		char id[16], spec[256];
		snprintf(id, sizeof(id), "w%05d", i);
		snprintf(spec, sizeof(spec), "{\"id\":\"%%s\",\"not_before\":\"%s\",\"steps\":[{"
		         "\"name\":\"s\",\"run\":\"true\"}]}", at);
		fleet_submit(&f, id, spec);
	}
	/* A plain task behind them all: the runner's first dispatch passes
	 * over every waiting one to reach it. */
	fleet_submit(&f, "first", "{\"id\":\"%s\",\"steps\":[{\"name\":\"s\",\"run\":\""
	             MARK_START "\"}]}");
	int64_t t0 = lr_wall_ms();
	fleet_start(&f, 0, NULL);
	fleet_wait_state(&f, "first", LR_TASK_SUCCEEDED, 60000);
	int64_t startup = first_mark_ms(&f, "first") - t0;
	lr_sleep_ms(500);
	int64_t c0 = etcdh_pid_cpu_ms(f.pids[0]);
	lr_sleep_ms(5000);
	int64_t idle = etcdh_pid_cpu_ms(f.pids[0]) - c0;
	enum { N = 15 };
	int64_t lat[N];
	for (int i = 0; i < N; i++) {
		char id[16];
		snprintf(id, sizeof(id), "p%02d", i);
		int64_t sent = lr_wall_ms();
		fleet_submit(&f, id, "{\"id\":\"%s\",\"steps\":[{\"name\":\"s\",\"run\":\"" MARK_START
		             "\"}]}");
		fleet_wait_state(&f, id, LR_TASK_SUCCEEDED, 10000);
		lat[i] = first_mark_ms(&f, id) - sent;
	}
	qsort(lat, N, sizeof(lat[0]), cmp64);
	printf("%5d tasks waiting: a task queued behind them started %lld ms after the runner; "
	       "idle CPU %lld ms in 5 s; "
	       "submit -> first instruction p50 %lld ms, max %lld ms\n", waiting,
	       (long long)startup, (long long)idle, (long long)lat[N / 2], (long long)lat[N - 1]);
	fleet_destroy(&f);
}

int main(int argc, char **argv)
{
	int waiting = argc > 1 ? atoi(argv[1]) : 10000;
	etcdh_opts o = { .members = 1 };
	etcdh_cluster *cl = NULL;
	if (etcdh_start(&o, &cl) != 0)
		return 1;
	delayed_starts(cl);
	dispatch_with(cl, 0);
	dispatch_with(cl, waiting);
	etcdh_destroy(cl);
	return 0;
}
