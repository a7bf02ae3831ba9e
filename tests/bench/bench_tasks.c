/* bench_tasks.c - `leaserun bench` with small numbers against a private
 * one-member etcd started by the harness: the table, then the JSON object.
 * Prints numbers; fails only when the bench itself fails.
 *
 * usage: bench_tasks [BENCH FLAGS...]   (default --tasks 300 --raw-txns 1500)
 *        bench_tasks --etcd-cost [TASKS]  (default 3000)
 * The second form measures etcd's own CPU time: per raw txn (a run of raw
 * txns only) and per write of the task phase (a run of 4-step tasks, its
 * submits charged at the raw price), each on a fresh etcd. Where etcd is
 * what limits throughput, efficiency cannot exceed their ratio.
 * LEASERUN_BIN names the `leaserun` program. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "etcd_harness.h"

/* Run `leaserun bench --endpoints E [flags] [--json]`; its exit status. */
static int bench(const char *bin, const char *endpoints, int argc, char **argv, int json)
{
	static const char *dflt[] = { "--tasks", "300", "--raw-txns", "1500" };
	const char *args[64];
	int n = 0;
	args[n++] = "leaserun";
	args[n++] = "bench";
	args[n++] = "--endpoints";
	args[n++] = endpoints;
	if (argc > 1) {
		for (int i = 1; i < argc && n < 60; i++)
			args[n++] = argv[i];
	} else {
		for (size_t i = 0; i < sizeof(dflt) / sizeof(dflt[0]); i++)
			args[n++] = dflt[i];
	}
	if (json)
		args[n++] = "--json";
	args[n] = NULL;
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		execv(bin, (char *const *)args);
		perror(bin);
		_exit(127);
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) != pid)
		return -1;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* One run of `leaserun bench FLAGS --json` on a fresh etcd: etcd's CPU
 * time in ms, -1 on failure. */
static long etcd_cpu_of(const char *bin, char **flags)
{
	etcdh_opts o = { .members = 1 };
	etcdh_cluster *cluster;
	if (etcdh_start(&o, &cluster) != 0)
		return -1;
	int argc = 0;
	char *argv[16];
	argv[argc++] = "bench_tasks";
	for (int i = 0; flags[i] != NULL && argc < 15; i++)
		argv[argc++] = flags[i];
	long before = etcdh_cpu_ms(cluster, 0);
	int rc = bench(bin, etcdh_endpoints(cluster), argc, argv, 1);
	long after = etcdh_cpu_ms(cluster, 0);
	etcdh_destroy(cluster);
	return rc == 0 && before >= 0 && after >= before ? after - before : -1;
}

static int etcd_cost(const char *bin, long tasks)
{
	char raw_n[32], tasks_n[32];
	long raw_txns = tasks * 5;
	snprintf(raw_n, sizeof(raw_n), "%ld", raw_txns);
	snprintf(tasks_n, sizeof(tasks_n), "%ld", tasks);
	char *raw_flags[] = { "--tasks", "1", "--steps", "4", "--raw-txns", raw_n, NULL };
	char *task_flags[] = { "--tasks", tasks_n, "--steps", "4", "--raw-txns", "10", NULL };
	long raw_ms = etcd_cpu_of(bin, raw_flags);
	long task_ms = etcd_cpu_of(bin, task_flags);
	if (raw_ms <= 0 || task_ms <= 0) {
		fprintf(stderr, "bench_tasks: a bench run failed\n");
		return 1;
	}
	/* The raw run also submitted and ran one task (5 writes); the task
	 * run also submitted its tasks and made 10 raw txns: those are
	 * charged at the raw price. */
	double per_raw = (double)raw_ms * 1000 / (double)(raw_txns + 6);
	double per_write = ((double)task_ms * 1000 - per_raw * (double)(tasks + 10)) /
	                   (double)(tasks * 5);
	printf("etcd CPU per raw txn:            %.0f us (%ld txns, %ld ms)\n",
	       per_raw, raw_txns, raw_ms);
	printf("etcd CPU per task-phase write:   %.0f us (%ld tasks x 5 writes, %ld ms)\n",
	       per_write, tasks, task_ms);
	printf("raw / task-phase price:          %.2f (the efficiency a runner costing\n"
	       "                                 nothing would reach where etcd's CPU\n"
	       "                                 is what limits throughput)\n",
	       per_write > 0 ? per_raw / per_write : 0);
	return 0;
}

int main(int argc, char **argv)
{
	const char *bin = getenv("LEASERUN_BIN");
	if (bin == NULL) {
		fprintf(stderr, "bench_tasks: needs LEASERUN_BIN\n");
		return 1;
	}
	if (argc > 1 && strcmp(argv[1], "--etcd-cost") == 0) {
		long tasks = argc > 2 ? atol(argv[2]) : 0;
		return etcd_cost(bin, tasks > 0 ? tasks : 3000);
	}
	etcdh_opts o = { .members = 1 };
	etcdh_cluster *cluster;
	if (etcdh_start(&o, &cluster) != 0) {
		fprintf(stderr, "bench_tasks: needs etcd\n");
		return 1;
	}
	int rc = bench(bin, etcdh_endpoints(cluster), argc, argv, 0);
	if (rc == 0)
		rc = bench(bin, etcdh_endpoints(cluster), argc, argv, 1);
	etcdh_destroy(cluster);
	if (rc != 0)
		fprintf(stderr, "bench_tasks: leaserun bench failed (%d)\n", rc);
	return rc == 0 ? 0 : 1;
}
