/* bench_tasks.c - `leaserun bench` with small numbers against a private
 * one-member etcd started by the harness: the table, then the JSON object.
 * Prints numbers; fails only when the bench itself fails.
 *
 * usage: bench_tasks [BENCH FLAGS...]   (default --tasks 300 --raw-txns 1500)
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

int main(int argc, char **argv)
{
	const char *bin = getenv("LEASERUN_BIN");
	etcdh_opts o = { .members = 1 };
	etcdh_cluster *cluster;
	if (bin == NULL || etcdh_start(&o, &cluster) != 0) {
		fprintf(stderr, "bench_tasks: needs LEASERUN_BIN and etcd\n");
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
