/* bench_waiting.c - what waiting tasks cost: the start delay of delayed
 * tasks with idle runners, and the submit-to-start latency of a plain task
 * while 10,000 delayed tasks wait, against none waiting. Real runners on a
 * private etcd; prints numbers, asserts nothing.
 *
 * usage: bench_waiting [WAITING]   (default 10000)
 * LEASERUN_BIN names the `leaserun` program. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "etcd_harness.h"
#include "fleet.h"
#include "test.h"

#define ROUNDS 20
#define MARK "echo run $LEASERUN_TASK_ID $(date +%%s%%N) >> $MARKS/marks"

TEST_GLOBALS;
static lr_err err;

static void submit(fleet *f, const char *spec)
{
	char out[LR_ID_SIZE];
	CHECK_OK(lr_submit_text(f->client, spec, strlen(spec), NULL, out, NULL, &err), &err);
}

/* The wall time (ms) the step of task id started, from the marks. */
static int64_t started_at(fleet *f, const char *id)
{
	char path[320], line[256], want[128];
	snprintf(path, sizeof(path), "%s/marks", f->dir);
	snprintf(want, sizeof(want), "run %s ", id);
	FILE *fp = fopen(path, "r");
	int64_t at = -1;
	while (fp != NULL && fgets(line, sizeof(line), fp) != NULL)
		if (strncmp(line, want, strlen(want)) == 0)
			at = atoll(line + strlen(want)) / 1000000;
	if (fp != NULL)
		fclose(fp);
	return at;
}

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static void print_stats(const char *what, int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp64);
	printf("%-58s min %4lld  median %4lld  max %4lld ms\n", what, (long long)v[0],
	       (long long)v[n / 2], (long long)v[n - 1]);
}

/* Plain one-step tasks submitted one after another: submit to step start. */
static void plain_latency(fleet *f, const char *what)
{
	int64_t lat[ROUNDS];
	for (int i = 0; i < ROUNDS; i++) {
		char id[32], spec[256], mark[64];
		snprintf(id, sizeof(id), "plain-%d", i);
		snprintf(spec, sizeof(spec), "{\"id\":\"%s\",\"steps\":[{\"name\":\"a\",\"run\":\"" MARK
		                             "\"}]}", id);
		int64_t t0 = lr_wall_ms();
		submit(f, spec);
		snprintf(mark, sizeof(mark), "run %s ", id);
		CHECK_INT(fleet_wait_marks(f, mark, 1, 20000), ==, 0);
		lat[i] = started_at(f, id) - t0;
	}
	print_stats(what, lat, ROUNDS);
}

int main(int argc, char **argv)
{
	int waiting = argc > 1 ? atoi(argv[1]) : 10000;
	etcdh_opts o = { .members = 1 };
	etcdh_cluster *cluster;
	if (etcdh_start(&o, &cluster) != 0)
		return 1;
	if (setjmp(test__jump) != 0) {
		etcdh_destroy(cluster);
		return 1;
	}

	/* Delayed tasks with idle runners: how late each starts. */
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "late");
	fleet_start(&f, 0, NULL);
	fleet_start(&f, 1, NULL);
	int64_t late[ROUNDS];
	for (int i = 0; i < ROUNDS; i++) {
		char id[32], spec[256], when[LR_TIME_BUF], mark[64];
		int64_t at = lr_wall_ms() + 300;
		lr_rfc3339_format(at, when);
		snprintf(id, sizeof(id), "late-%d", i);
		snprintf(spec, sizeof(spec), "{\"id\":\"%s\",\"not_before\":\"%s\",\"steps\":"
		                             "[{\"name\":\"a\",\"run\":\"" MARK "\"}]}", id, when);
		submit(&f, spec);
		snprintf(mark, sizeof(mark), "run %s ", id);
		CHECK_INT(fleet_wait_marks(&f, mark, 1, 20000), ==, 0);
		late[i] = started_at(&f, id) - at;
	}
	print_stats("delayed task: step start after its not_before", late, ROUNDS);
	plain_latency(&f, "plain task, none waiting: submit to step start");
	fleet_destroy(&f);

	/* The same with `waiting` delayed tasks held by the runner. */
	fleet_init(&f, etcdh_endpoints(cluster), "held");
	char when[LR_TIME_BUF];
	lr_rfc3339_format(lr_wall_ms() + 3600 * 1000, when);
	int64_t t0 = lr_mono_ms();
	for (int i = 0; i < waiting; i++) {
		char spec[256];
		snprintf(spec, sizeof(spec), "{\"id\":\"w%d\",\"priority\":%d,\"not_before\":\"%s\","
		                             "\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]}",
		         i, i % 7 - 3, when);
		submit(&f, spec);
	}
	printf("%d delayed tasks submitted in %lld ms\n", waiting,
	       (long long)(lr_mono_ms() - t0));
	t0 = lr_mono_ms();
	fleet_start(&f, 0, NULL);
	fleet_start(&f, 1, NULL);
	submit(&f, "{\"id\":\"warm\",\"steps\":[{\"name\":\"a\",\"run\":\"" MARK "\"}]}");
	CHECK_INT(fleet_wait_marks(&f, "run warm ", 1, 60000), ==, 0);
	printf("two runners started, read %d waiting tasks and ran a first one in %lld ms\n",
	       waiting, (long long)(lr_mono_ms() - t0));
	char label[96];
	snprintf(label, sizeof(label), "plain task, %d waiting: submit to step start", waiting);
	plain_latency(&f, label);
	fleet_destroy(&f);
	etcdh_destroy(cluster);
	return 0;
}
