/* bench_submit.c - `leaserun submit` of many tasks against a private
 * one-member etcd started by the harness: tasks/s and the command's peak
 * RSS for JSON Lines inputs, at a few creates in flight, and one process a
 * task for comparison. Prints numbers; fails only when a run fails.
 *
 * usage: bench_submit [LINES...]   (default 2000 100000)
 * LEASERUN_BIN names the `leaserun` program. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "etcd_harness.h"

/* A spec of about 150 bytes, as a report or agent task might be. */
static void spec_line(char *buf, size_t cap, const char *tag, long i)
{
	snprintf(buf, cap, "{\"id\":\"%s-%07ld\",\"steps\":[{\"name\":\"fetch\","
	         "\"run\":\"./fetch.sh %ld\"},{\"name\":\"report\",\"run\":"
	         "\"./report.sh\",\"timeout_s\":600}],\"env\":{\"BATCH\":\"%s\"}}",
	         tag, i, i, tag);
}

/* A file of n spec lines (ids "<tag>-<i>"); 0 on success. */
static int write_jsonl(const char *path, const char *tag, long n)
{
	FILE *f = fopen(path, "w");
	char line[512];
	if (f == NULL)
		return -1;
	for (long i = 0; i < n; i++) {
		spec_line(line, sizeof(line), tag, i);
		fprintf(f, "%s\n", line);
	}
	return fclose(f);
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Run argv with stdin from in_path (NULL: /dev/null) and stdout to
 * /dev/null; its exit status (-1 if it could not run), *rss_kb its peak
 * RSS. */
static int run(char *const argv[], const char *in_path, long *rss_kb)
{
	fflush(stdout);
	pid_t pid = fork();
	if (pid == 0) {
		FILE *in = freopen(in_path != NULL ? in_path : "/dev/null", "r", stdin);
		FILE *out = freopen("/dev/null", "w", stdout);
		if (in == NULL || out == NULL)
			_exit(127);
		execv(argv[0], argv);
		_exit(127);
	}
	int st = 0;
	struct rusage ru;
	memset(&ru, 0, sizeof(ru));
	if (pid < 0 || wait4(pid, &st, 0, &ru) != pid)
		return -1;
	*rss_kb = ru.ru_maxrss;
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* `leaserun submit --jsonl FILE` of n lines under a fresh prefix. */
static int bench_bulk(const char *bin, const char *ep, const char *dir,
                      long n, const char *in_flight)
{
	char path[600], prefix[64], tag[32];
	static int runs;
	snprintf(tag, sizeof(tag), "b%d", ++runs);
	snprintf(path, sizeof(path), "%s/%s.jsonl", dir, tag);
	snprintf(prefix, sizeof(prefix), "/bench-submit/%s/", tag);
	if (write_jsonl(path, tag, n) != 0)
		return -1;
	char *argv[] = { (char *)bin, "submit", "--jsonl", path, "--endpoints",
		         (char *)ep, "--prefix", prefix, "--in-flight",
		         (char *)in_flight, NULL };
	long rss = 0;
	double t0 = now_s();
	int rc = run(argv, NULL, &rss);
	double took = now_s() - t0;
	unlink(path);
	if (rc != 0) {
		fprintf(stderr, "bench_submit: submit of %ld lines exited %d\n", n, rc);
		return -1;
	}
	printf("%-28s %9ld %11s %9.2f %10.0f %9.1f\n", "submit --jsonl", n,
	       in_flight, took, (double)n / took, (double)rss / 1024);
	return 0;
}

/* One `leaserun submit` process a task, as before bulk submit. */
static int bench_one_by_one(const char *bin, const char *ep, const char *dir,
                            long n)
{
	char path[600], line[512];
	snprintf(path, sizeof(path), "%s/one.json", dir);
	long rss = 0, peak = 0;
	double t0 = now_s();
	for (long i = 0; i < n; i++) {
		FILE *f = fopen(path, "w");
		if (f == NULL)
			return -1;
		spec_line(line, sizeof(line), "one", i);
		fputs(line, f);
		fclose(f);
		char *argv[] = { (char *)bin, "submit", path, "--endpoints",
			         (char *)ep, "--prefix", "/bench-submit/one/", NULL };
		if (run(argv, NULL, &rss) != 0) {
			fprintf(stderr, "bench_submit: one submit failed\n");
			return -1;
		}
		peak = rss > peak ? rss : peak;
	}
	double took = now_s() - t0;
	unlink(path);
	printf("%-28s %9ld %11s %9.2f %10.0f %9.1f\n", "submit FILE, a process each",
	       n, "1", took, (double)n / took, (double)peak / 1024);
	return 0;
}

int main(int argc, char **argv)
{
	const char *bin = getenv("LEASERUN_BIN");
	if (bin == NULL) {
		fprintf(stderr, "bench_submit: needs LEASERUN_BIN\n");
		return 1;
	}
	const char *tmp = getenv("TMPDIR");
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/bench-submit-XXXXXX", tmp != NULL ? tmp : "/tmp");
	if (mkdtemp(dir) == NULL) {
		perror("bench_submit: mkdtemp");
		return 1;
	}
	etcdh_opts o = { .members = 1 };
	etcdh_cluster *cluster;
	if (etcdh_start(&o, &cluster) != 0) {
		fprintf(stderr, "bench_submit: needs etcd\n");
		rmdir(dir);
		return 1;
	}
	const char *ep = etcdh_endpoints(cluster);
	printf("%-28s %9s %11s %9s %10s %9s\n", "run", "tasks", "in flight",
	       "seconds", "tasks/s", "peak MiB");
	int rc = bench_one_by_one(bin, ep, dir, 200);
	static const char *const in_flights[] = { "1", "4", "16", "64" };
	for (size_t i = 0; rc == 0 && i < 4; i++)
		rc = bench_bulk(bin, ep, dir, 2000, in_flights[i]);
	if (argc > 1) {
		for (int i = 1; rc == 0 && i < argc; i++)
			rc = bench_bulk(bin, ep, dir, atol(argv[i]), "16");
	} else {
		rc = bench_bulk(bin, ep, dir, 100000, "16");
	}
	etcdh_destroy(cluster);
	rmdir(dir);
	return rc == 0 ? 0 : 1;
}
