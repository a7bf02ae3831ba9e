/* bench_step.c - what starting and running one shell step costs the
 * runner: the time from lr_exec_run to the step's first instruction (its
 * first output line), the whole step, and the CPU of this process and of
 * its children per step. No etcd. Prints numbers; asserts nothing.
 *
 * usage: bench_step [STEPS] [RSS_MB]
 *   RSS_MB: memory this process touches first, like a runner's heap
 *   (forking costs more the more a process has mapped). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/clock.h"
#include "exec/exec.h"

struct probe {
	int64_t start_us, first_us;
};

static void on_line(void *user, int fd, const char *line)
{
	struct probe *p = user;
	if (p->first_us == 0)
		p->first_us = lr_mono_us();
}

static int cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static double cpu_us(int who)
{
	struct rusage ru;
	getrusage(who, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

int main(int argc, char **argv)
{
	int steps = argc > 1 ? atoi(argv[1]) : 300;
	size_t rss_mb = argc > 2 ? (size_t)atol(argv[2]) : 32;
	if (steps < 1)
		steps = 1;
	char *heap = malloc(rss_mb << 20);
	if (heap != NULL)
		memset(heap, 1, rss_mb << 20);
	const char *tmp = getenv("TMPDIR");
	int64_t *first = calloc((size_t)steps, sizeof(*first));
	int64_t *whole = calloc((size_t)steps, sizeof(*whole));
	double self0 = cpu_us(RUSAGE_SELF), kids0 = cpu_us(RUSAGE_CHILDREN);
	int failed = 0;
	for (int i = 0; i < steps; i++) {
		struct probe p = { .start_us = lr_mono_us() };
		lr_exec_opts o = { .run = "echo started", .work_dir_base = tmp ? tmp : "/tmp",
		                   .task_id = "bench", .cancel_fd = -1,
		                   .deadline_ms = lr_mono_ms() + 10000, .line = on_line,
		                   .user = &p };
		lr_exec_result res;
		lr_err err;
		if (lr_exec_run(&o, &res, &err) != 0 || res.outcome != LR_EXEC_OK)
			failed++;
		lr_exec_result_clear(&res);
		whole[i] = lr_mono_us() - p.start_us;
		first[i] = p.first_us > 0 ? p.first_us - p.start_us : whole[i];
	}
	double self = cpu_us(RUSAGE_SELF) - self0, kids = cpu_us(RUSAGE_CHILDREN) - kids0;
	qsort(first, (size_t)steps, sizeof(*first), cmp);
	qsort(whole, (size_t)steps, sizeof(*whole), cmp);
	printf("steps %d (failed %d), this process touching %zu MB\n", steps, failed, rss_mb);
	printf("to the first instruction: p50 %.2f ms, p99 %.2f ms\n",
	       (double)first[steps / 2] / 1000, (double)first[steps * 99 / 100] / 1000);
	printf("whole step: p50 %.2f ms, p99 %.2f ms\n", (double)whole[steps / 2] / 1000,
	       (double)whole[steps * 99 / 100] / 1000);
	printf("CPU per step: this process %.0f us, its children %.0f us\n", self / steps,
	       kids / steps);
	free(first);
	free(whole);
	free(heap);
	return 0;
}
