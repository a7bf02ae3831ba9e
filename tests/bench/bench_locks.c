/* bench_locks.c - what locks cost: the claim txn's latency for tasks with
 * 0, 1, 4 and 16 locks (and 2 pools with 16), one claimant on a local
 * one-member etcd; lr_hold_acquire's latency for 1, 4 and 16 locks; and
 * the time from a holder's last instruction to the next waiter's first,
 * with real runners handing one X lock from task to task, and with
 * `leaserun run` processes handing it from command to command. Prints
 * numbers; asserts nothing.
 *
 * usage: bench_locks [CLAIMS] [HANDOFFS]   (defaults 300 and 30) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>

#include <jansson.h>

#include "base/clock.h"
#include "client/client.h"
#include "engine/claim.h"
#include "etcd/kv.h"
#include "etcd/lease.h"
#include "etcd_harness.h"
#include "fleet.h"
#include "marks.h"
#include "proc.h"
#include "test.h"

TEST_GLOBALS;

static int cmp64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return (x > y) - (x < y);
}

static void print_quantiles(const char *what, int64_t *us, int n)
{
	qsort(us, (size_t)n, sizeof(us[0]), cmp64);
	printf("%-34s n=%-4d p50 %6.2f ms  p90 %6.2f ms  p99 %6.2f ms\n", what, n,
	       us[n / 2] / 1000.0, us[n * 9 / 10] / 1000.0, us[n * 99 / 100] / 1000.0);
}

/* "locks" of k entries: k paths team/<i>/tree in X (k + 1 nodes). */
static void locks_of(int k, char *buf, size_t size)
{
	size_t n = (size_t)snprintf(buf, size, "{");
	for (int i = 0; i < k; i++)
		n += (size_t)snprintf(buf + n, size - n, "%s\"team/%d/tree\":\"X\"", i ? "," : "", i);
	snprintf(buf + n, size - n, "}");
}

static int claims(lr_client *c, int k, bool pools, int count)
{
	char locks[2048], spec[4096], name[64];
	locks_of(k, locks, sizeof(locks));
	int64_t lease = 0, granted = 0;
	lr_err err;
	if (lr_lease_grant(lr_client_etcd(c), 60, &lease, &granted, NULL, &err) != 0) {
		fprintf(stderr, "lease: %s\n", err.msg);
		return 1;
	}
	lr_claimant who = { .client = c, .runner = "bench", .lease = lease };
	int64_t *us = calloc((size_t)count, sizeof(*us));
	for (int i = 0; i < count; i++) {
		char id[32];
		snprintf(id, sizeof(id), "k%d-%s-%d", k, pools ? "p" : "n", i);
		snprintf(spec, sizeof(spec),
		         "{\"id\":\"%s\",\"steps\":[{\"name\":\"a\",\"run\":\"-\"}]%s%s%s}", id,
		         k > 0 ? ",\"locks\":" : "", k > 0 ? locks : "",
		         pools ? ",\"limits\":{\"gpu\":4,\"api\":8}" : "");
		char out_id[LR_ID_SIZE], key[LR_KEY_SIZE];
		lr_range_result r;
		if (lr_submit_text(c, spec, strlen(spec), NULL, out_id, NULL, &err) != 0) {
			fprintf(stderr, "submit: %s\n", err.msg);
			return 1;
		}
		lr_key(c, LR_K_TASKS, id, key);
		if (lr_kv_get(lr_client_etcd(c), key, &r, &err) != 0 || r.n != 1) {
			fprintf(stderr, "read back %s: %s\n", id, err.msg);
			return 1;
		}
		int64_t rev = r.kvs[0].create_rev;
		lr_range_result_free(&r);
		lr_claimed_task h;
		enum lr_claim_outcome oc;
		lr_task_state ended;
		char why[600];
		int64_t t0 = lr_mono_us();
		/* As a runner claims a task it saw in a watch event: spec known. */
		int rc = lr_claim(&who, id, spec, strlen(spec), rev, true, NULL, 0, &h, &oc, &ended,
		                  why, sizeof(why), &err);
		us[i] = lr_mono_us() - t0;
		if (rc != 0 || oc != LR_CLAIM_WON) {
			fprintf(stderr, "claim %s: rc %d outcome %d %s\n", id, rc, (int)oc, err.msg);
			return 1;
		}
		/* Free the locks for the next one, outside the timing. */
		lr_finish(&who, &h, LR_TASK_SUCCEEDED, NULL, NULL, &err);
		lr_claimed_task_clear(&h);
	}
	snprintf(name, sizeof(name), "claim, %d locks%s", k, pools ? " + 2 pools" : "");
	print_quantiles(name, us, count);
	free(us);
	lr_lease_revoke(lr_client_etcd(c), lease, NULL);
	return 0;
}

static int handoffs(etcdh_cluster *cl, int count)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cl), "bench-handoff");
	for (int i = 0; i < 2; i++)
		fleet_start(&f, i, (const char *const[]){ "--concurrency", "2", NULL });
	for (int i = 0; i < count; i++) {
		char id[16], spec[512];
		snprintf(id, sizeof(id), "h%03d", i);
		snprintf(spec, sizeof(spec),
		         "{\"id\":\"%s\",\"steps\":[{\"name\":\"a\",\"run\":\"" MARK_START
		         "; sleep 0.05; " MARK_END "\"}],\"locks\":{\"doc\":\"X\"}}", id);
		fleet_submit(&f, id, spec);
	}
	for (int i = 0; i < count; i++) {
		char id[16];
		snprintf(id, sizeof(id), "h%03d", i);
		if (fleet_wait_state(&f, id, LR_TASK_SUCCEEDED, 60000) < 0) {
			fprintf(stderr, "%s did not finish\n", id);
			fleet_destroy(&f);
			return 1;
		}
	}
	mark *m = NULL;
	size_t n = 0;
	marks_read(f.dir, &m, &n);
	int64_t *us = calloc(n + 1, sizeof(*us));
	int k = 0;
	/* Marks are in file order: each start after an end is a handoff. */
	for (size_t i = 1; i < n; i++)
		if (m[i].kind == MARK_KIND_START && m[i - 1].kind == MARK_KIND_END)
			us[k++] = (m[i].ns - m[i - 1].ns) / 1000;
	if (k > 0)
		print_quantiles("X lock: holder's end -> next start", us, k);
	free(us);
	free(m);
	fleet_destroy(&f);
	return 0;
}

/* lr_hold_acquire of k X locks with nobody else about: the lease, its
 * keepalive stream, the request in wants/, the table read, the watch and
 * the txn. Each hold is released outside the timing. */
static int holds(lr_client *c, int k, int count)
{
	char text[2048], name[64];
	locks_of(k, text, sizeof(text));
	json_t *locks = json_loads(text, 0, NULL);
	lr_hold_opts o = { .locks = locks, .ttl_s = 10, .wait_ms = 5000, .cancel_fd = -1 };
	int64_t *us = calloc((size_t)count, sizeof(*us));
	int rc = 0;
	for (int i = 0; rc == 0 && i < count; i++) {
		lr_hold *h = NULL;
		lr_err err;
		int64_t t0 = lr_mono_us();
		rc = lr_hold_acquire(c, &o, &h, &err);
		us[i] = lr_mono_us() - t0;
		if (rc != 0)
			fprintf(stderr, "hold of %d locks: %s\n", k, err.msg);
		else if (lr_hold_release(h, &err) != 0)
			fprintf(stderr, "release: %s\n", err.msg);
	}
	snprintf(name, sizeof(name), "lr_hold_acquire, %d locks", k);
	if (rc == 0)
		print_quantiles(name, us, count);
	free(us);
	json_decref(locks);
	return rc;
}

/* How many requests wait in wants/ under c's prefix (-1: error). */
static int64_t queued(lr_client *c)
{
	char key[LR_KEY_SIZE];
	lr_key(c, LR_K_WANTS, "", key);
	lr_range_opts ro = { .key = key, .flags = LR_KEY_PREFIX | LR_RANGE_COUNT_ONLY };
	lr_range_result r;
	lr_err err;
	if (lr_kv_range(lr_client_etcd(c), &ro, &r, &err) != 0)
		return -1;
	int64_t n = r.count;
	lr_range_result_free(&r);
	return n;
}

/* count `leaserun run --lock doc=X` processes, the first command held
 * until all of them queued (so that start-up does not count), each
 * command marking its start and end: the gap from one's end to the next
 * one's start is the release, the DELETE events, the waiter's txn and its
 * guard starting the command. */
static int run_handoffs(etcdh_cluster *cl, int count)
{
	char dir[300], env_ep[600], script[1200];
	const char *tmp = getenv("TMPDIR");
	snprintf(dir, sizeof(dir), "%s/bench-run-XXXXXX", tmp != NULL ? tmp : "/tmp");
	lr_client_opts co = { .endpoints = etcdh_endpoints(cl), .prefix = "/bench-run/" };
	lr_client *c = NULL;
	lr_err err;
	if (mkdtemp(dir) == NULL || lr_client_open(&co, &c, &err) != 0)
		return 1;
	snprintf(env_ep, sizeof(env_ep), "LEASERUN_ENDPOINTS=%s", etcdh_endpoints(cl));
	const char *env[] = { env_ep, "LEASERUN_PREFIX=/bench-run/", NULL };
	snprintf(script, sizeof(script),
	         "while [ ! -e %s/go ]; do sleep 0.01; done; "
	         "echo \"s $(date +%%s%%N)\" >> %s/marks; sleep 0.05; "
	         "echo \"e $(date +%%s%%N)\" >> %s/marks", dir, dir, dir);
	proc_bg *bg = calloc((size_t)count, sizeof(*bg));
	for (int i = 0; i < count; i++) {
		char log[400];
		snprintf(log, sizeof(log), "%s/run-%d.log", dir, i);
		const char *args[] = { "run", "--lock", "doc=X", "--ttl", "10", "--",
			               "sh", "-c", script, NULL };
		char *argv[16];
		proc_cli_argv(argv, 16, args);
		proc_start(&bg[i], argv, env, log);
	}
	char path[400];
	int64_t t0 = lr_mono_ms();
	while (queued(c) < count && lr_mono_ms() - t0 < 60000)
		lr_sleep_ms(20);
	lr_client_close(c);
	snprintf(path, sizeof(path), "%s/go", dir);
	close(open(path, O_WRONLY | O_CREAT, 0600)); /* go */
	int rc = 0;
	for (int i = 0; i < count; i++)
		if (proc_wait(&bg[i], 120000) != 0) {
			char *log = proc_slurp(bg[i].log);
			fprintf(stderr, "leaserun run %d: %s\n", i, log);
			free(log);
			rc = 1;
		}
	snprintf(path, sizeof(path), "%s/marks", dir);
	char *text = proc_slurp(path);
	int64_t *us = calloc((size_t)count, sizeof(*us)), last_end = -1;
	int k = 0;
	for (char *line = strtok(text, "\n"); line != NULL; line = strtok(NULL, "\n")) {
		long long ns = atoll(line + 2);
		if (line[0] == 's' && last_end >= 0 && k < count)
			us[k++] = (ns - last_end) / 1000;
		last_end = line[0] == 'e' ? ns : -1;
	}
	if (rc == 0 && k > 0)
		print_quantiles("leaserun run: end -> next start", us, k);
	free(text);
	free(us);
	free(bg);
	for (int i = 0; i < count; i++) {
		char log[400];
		snprintf(log, sizeof(log), "%s/run-%d.log", dir, i);
		unlink(log);
	}
	unlink(path);
	snprintf(path, sizeof(path), "%s/go", dir);
	unlink(path);
	rmdir(dir);
	return rc;
}

int main(int argc, char **argv)
{
	int count = argc > 1 ? atoi(argv[1]) : 300;
	int hand = argc > 2 ? atoi(argv[2]) : 30;
	etcdh_opts o = { .members = 1 };
	etcdh_cluster *cl = NULL;
	if (etcdh_start(&o, &cl) != 0)
		return 1;
	lr_client_opts co = { .endpoints = etcdh_endpoints(cl), .prefix = "/bench-locks/" };
	lr_client *c = NULL;
	lr_err err;
	int rc = lr_client_open(&co, &c, &err);
	if (rc != 0)
		fprintf(stderr, "client: %s\n", err.msg);
	const int ks[] = { 0, 1, 4, 16 };
	for (size_t i = 0; rc == 0 && i < sizeof(ks) / sizeof(ks[0]); i++)
		rc = claims(c, ks[i], false, count);
	if (rc == 0)
		rc = claims(c, 16, true, count);
	for (size_t i = 1; rc == 0 && i < sizeof(ks) / sizeof(ks[0]); i++)
		rc = holds(c, ks[i], count / 3);
	if (c != NULL)
		lr_client_close(c);
	if (rc == 0)
		rc = handoffs(cl, hand);
	if (rc == 0)
		rc = run_handoffs(cl, hand);
	etcdh_destroy(cl);
	return rc;
}
