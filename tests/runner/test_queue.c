/* test_queue.c - what operators expect of a queue, with real `leaserun
 * worker` processes (TTL 2 s): priorities order a backlog, a delayed task
 * starts at its time and survives the restart of every runner, a diamond
 * of dependencies runs in a valid order, a failed dependency fails its
 * dependents, retry resumes where the task failed (or from a step, with
 * the spec's state), a retry racing a purge leaves no half task, and a
 * runner killed meanwhile loses nothing. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "etcd/lease.h"
#include "etcd_harness.h"
#include "fleet.h"
#include "history.h"
#include "marks.h"
#include "test.h"

static etcdh_cluster *cluster;
static lr_err err;

#define STEP(name, run) "{\"name\":\"" name "\",\"run\":\"" run "\"}"
#define MARKED STEP("s", MARK_START "; " MARK_END)

/* The first mark of each task, in file order: the order they started. */
static size_t start_order(fleet *f, char order[][64], size_t max)
{
	mark *m = NULL;
	size_t n = 0, k = 0;
	CHECK_INT(marks_read(f->dir, &m, &n), ==, 0);
	for (size_t i = 0; i < n && k < max; i++) {
		bool seen = false;
		for (size_t j = 0; j < k && !seen; j++)
			seen = strcmp(order[j], m[i].task) == 0;
		if (!seen && m[i].kind == MARK_KIND_START)
			snprintf(order[k++], 64, "%s", m[i].task);
	}
	free(m);
	return k;
}

/* The wall clock (ns) of task's first start mark and last end mark. */
static void span_of(fleet *f, const char *task, int64_t *first, int64_t *last)
{
	mark *m = NULL;
	size_t n = 0;
	*first = *last = 0;
	CHECK_INT(marks_read(f->dir, &m, &n), ==, 0);
	for (size_t i = 0; i < n; i++) {
		if (strcmp(m[i].task, task) != 0)
			continue;
		if (*first == 0)
			*first = m[i].ns;
		*last = m[i].ns;
	}
	free(m);
}

/* Txn calls etcd has served so far (reads included), from its /metrics:
 * what runners cost while they should be idle. -1 when unreadable. */
static long etcd_txns(void)
{
	const char *ep = etcdh_endpoint(cluster, 0);
	struct sockaddr_in a = { .sin_family = AF_INET };
	a.sin_port = htons((uint16_t)atoi(strchr(ep, ':') + 1));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	if (fd < 0)
		return -1;
	static const char req[] = "GET /metrics HTTP/1.0\r\n\r\n";
	size_t cap = 1 << 20, len = 0;
	char *buf = malloc(cap);
	ssize_t n = -1;
	if (buf != NULL && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    write(fd, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1))
		while (len < cap - 1 && (n = read(fd, buf + len, cap - 1 - len)) > 0)
			len += (size_t)n;
	close(fd);
	long txns = -1;
	static const char line[] = "grpc_server_started_total{grpc_method=\"Txn\","
	                           "grpc_service=\"etcdserverpb.KV\",grpc_type=\"unary\"} ";
	if (buf != NULL) {
		buf[len] = '\0';
		const char *at = strstr(buf, line);
		if (at != NULL)
			txns = strtol(at + sizeof(line) - 1, NULL, 10);
	}
	free(buf);
	return txns;
}

/* Txns etcd serves in ms while the test only watches. */
static long txns_during(int ms)
{
	long before = etcd_txns();
	lr_sleep_ms(ms);
	long after = etcd_txns();
	CHECK(before >= 0 && after >= before);
	return after - before;
}

/* Task id ended failed, its error saying why. */
static void check_failed(fleet *f, const char *id, const char *why)
{
	lr_task_status s;
	CHECK_OK(lr_task_get(f->client, id, &s, &err), &err);
	CHECK_INT(s.state, ==, LR_TASK_FAILED);
	if (s.error == NULL || strstr(s.error, why) == NULL)
		TEST_FAIL("%s failed with \"%s\", not \"%s\"", id, s.error ? s.error : "", why);
	lr_task_status_clear(&s);
}

/* Submit a spec of over 64 KiB (more than a runner keeps of a spec from
 * its watch): id, the fields given (JSON members), one marked step, and a
 * state padded out. */
static void submit_big(fleet *f, const char *id, const char *fields)
{
	size_t pad = 70 * 1024;
	char *spec = malloc(pad + 2048);
	CHECK(spec != NULL);
	int n = snprintf(spec, 2048, "{\"id\":\"%s\",%s%s\"steps\":[" MARKED "],"
	                 "\"state\":{\"pad\":\"", id, fields, fields[0] ? "," : "");
	memset(spec + n, 'x', pad);
	strcpy(spec + n + pad, "\"}}");
	char out[LR_ID_SIZE];
	CHECK_OK(lr_submit_text(f->client, spec, strlen(spec), NULL, out, NULL, &err), &err);
	free(spec);
}

/* ---- priorities ------------------------------------------------------------- */

TEST(priorities_order_a_backlog)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "q-prio");
	static const struct { const char *id; int prio; } tasks[] = {
		{ "low", -50 }, { "plain-1", 0 }, { "urgent", 100 }, { "plain-2", 0 },
		{ "high", 10 }, { "lowest", -100 },
	};
	for (size_t i = 0; i < 6; i++) {
		char spec[512];
		snprintf(spec, sizeof(spec), "{\"id\":\"%%s\",\"priority\":%d,\"steps\":[" MARKED "]}",
		         tasks[i].prio);
		fleet_submit(&f, tasks[i].id, spec);
	}
	/* The backlog is there before the runner: it reads it at start-up. */
	fleet_start(&f, 0, NULL);
	CHECK(fleet_wait_state(&f, "lowest", LR_TASK_SUCCEEDED, 20000) >= 0);
	char order[6][64];
	CHECK_INT(start_order(&f, order, 6), ==, 6);
	/* Higher priority first; equal ones roughly oldest first (runners
	 * spread over the first few, as for every task). */
	static const char *const want[6] = { "urgent", "high", "plain", "plain", "low",
		                             "lowest" };
	for (int i = 0; i < 6; i++)
		if (strncmp(order[i], want[i], strlen(want[i])) != 0)
			TEST_FAIL("start %d was %s, expected %s", i, order[i], want[i]);
	/* And those submitted while it runs, read from their watch events. */
	fleet_submit(&f, "blocker", "{\"id\":\"%s\",\"steps\":[" STEP("s", "sleep 0.5") "]}");
	CHECK(fleet_wait_state(&f, "blocker", LR_TASK_RUNNING, 5000) >= 0);
	fleet_submit(&f, "later-low", "{\"id\":\"%s\",\"priority\":-1,\"steps\":[" MARKED "]}");
	fleet_submit(&f, "later-high", "{\"id\":\"%s\",\"priority\":1,\"steps\":[" MARKED "]}");
	CHECK(fleet_wait_state(&f, "later-low", LR_TASK_SUCCEEDED, 10000) >= 0);
	char more[8][64];
	CHECK_INT(start_order(&f, more, 8), ==, 8);
	CHECK_STR(more[6], "later-high");
	CHECK_STR(more[7], "later-low");
	fleet_destroy(&f);
}

/* A runner keeps only small specs from its watch; a large one's priority
 * must not go with the rest of it. */
TEST(a_large_spec_submitted_while_a_runner_runs_keeps_its_priority)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "q-bigprio");
	fleet_start(&f, 0, NULL);
	fleet_submit(&f, "blocker", "{\"id\":\"%s\",\"steps\":[" STEP("s", "sleep 0.5") "]}");
	CHECK(fleet_wait_state(&f, "blocker", LR_TASK_RUNNING, 5000) >= 0);
	fleet_submit(&f, "plain", "{\"id\":\"%s\",\"steps\":[" MARKED "]}");
	submit_big(&f, "big-urgent", "\"priority\":100");
	CHECK(fleet_wait_state(&f, "plain", LR_TASK_SUCCEEDED, 10000) >= 0);
	CHECK(fleet_wait_state(&f, "big-urgent", LR_TASK_SUCCEEDED, 10000) >= 0);
	char order[2][64];
	CHECK_INT(start_order(&f, order, 2), ==, 2);
	CHECK_STR(order[0], "big-urgent");
	fleet_destroy(&f);
}

/* ---- delayed tasks ---------------------------------------------------------- */

TEST(a_delayed_task_starts_at_its_time_and_survives_the_restart_of_every_runner)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "q-delay");
	fleet_start(&f, 0, NULL);
	char at[LR_TIME_BUF], spec[512];
	int64_t due = lr_wall_ms() + 2500;
	lr_rfc3339_format(due, at);
	snprintf(spec, sizeof(spec), "{\"id\":\"%%s\",\"not_before\":\"%s\",\"steps\":[" MARKED "]}",
	         at);
	fleet_submit(&f, "later", spec);
	fleet_submit(&f, "now", "{\"id\":\"%s\",\"steps\":[" MARKED "]}");
	CHECK(fleet_wait_state(&f, "now", LR_TASK_SUCCEEDED, 5000) >= 0);
	/* Every runner goes away and a new one comes while it waits. */
	kill(f.pids[0], SIGTERM);
	CHECK_INT(fleet_wait(&f, 0, 10000), ==, 0);
	fleet_start(&f, 1, NULL);
	CHECK(fleet_wait_state(&f, "later", LR_TASK_SUCCEEDED, 10000) >= 0);
	int64_t first, last;
	span_of(&f, "later", &first, &last);
	double late = (double)(first / 1000000 - due);
	printf("# the delayed task's first instruction came %.0f ms after its not_before\n",
	       late);
	CHECK(first / 1000000 >= due);
	CHECK(late < 2000); /* a generous bound: the figure is printed */
	fleet_check_history(&f, -1);
	fleet_destroy(&f);
}

/* A queue record changed by hand into something that is no schedule:
 * the task is dispatched all the same, not left pending unseen. */
TEST(a_task_whose_queue_record_was_spoiled_still_runs)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "q-spoiled");
	fleet_submit(&f, "spoiled", "{\"id\":\"%s\",\"priority\":5,\"steps\":[" MARKED "]}");
	char key[LR_KEY_SIZE];
	lr_key(f.client, LR_K_QUEUE, "spoiled", key);
	static const char junk[] = "{\"priority\":\"x\",\"not_before\":\"nope\"}";
	CHECK_OK(lr_kv_put(lr_client_etcd(f.client), key, junk, sizeof(junk) - 1, 0, NULL, NULL,
	                   &err), &err);
	fleet_start(&f, 0, NULL);
	CHECK(fleet_wait_state(&f, "spoiled", LR_TASK_SUCCEEDED, 5000) >= 0);
	fleet_destroy(&f);
}

/* A queue record changed by hand to a later time: the spec's time holds
 * (the record only orders dispatch), and the runner says so. */
TEST(a_queue_record_changed_to_a_later_time_does_not_hold_a_task_back)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "q-edited");
	char at[LR_TIME_BUF], spec[512];
	int64_t due = lr_wall_ms() + 2000;
	lr_rfc3339_format(due, at);
	snprintf(spec, sizeof(spec), "{\"id\":\"%%s\",\"not_before\":\"%s\",\"steps\":[" MARKED "]}",
	         at);
	fleet_submit(&f, "edited", spec);
	char key[LR_KEY_SIZE];
	lr_key(f.client, LR_K_QUEUE, "edited", key);
	static const char later[] = "{\"not_before\":\"2099-01-01T00:00:00.000Z\"}";
	CHECK_OK(lr_kv_put(lr_client_etcd(f.client), key, later, sizeof(later) - 1, 0, NULL, NULL,
	                   &err), &err);
	fleet_start(&f, 0, NULL);
	CHECK(fleet_wait_state(&f, "edited", LR_TASK_SUCCEEDED, 8000) >= 0);
	int64_t first, last;
	span_of(&f, "edited", &first, &last);
	CHECK(first / 1000000 >= due);
	CHECK(fleet_log_has(&f, 0, "its queue record was changed after submit"));
	fleet_destroy(&f);
}

/* ---- dependencies ---------------------------------------------------------- */

TEST(a_diamond_of_dependencies_runs_in_a_valid_order)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "q-diamond");
	const char *extra[] = { "--concurrency", "3", NULL };
	fleet_start(&f, 0, extra);
	fleet_start(&f, 1, extra);
	fleet_submit(&f, "top", "{\"id\":\"%s\",\"steps\":[" STEP("s", MARK_START
	             "; sleep 0.3; " MARK_END) "]}");
	fleet_submit(&f, "left", "{\"id\":\"%s\",\"after\":[\"top\"],\"steps\":[" STEP("s",
	             MARK_START "; sleep 0.2; " MARK_END) "]}");
	fleet_submit(&f, "right", "{\"id\":\"%s\",\"after\":[\"top\"],\"steps\":[" STEP("s",
	             MARK_START "; sleep 0.4; " MARK_END) "]}");
	fleet_submit(&f, "bottom", "{\"id\":\"%s\",\"after\":[\"left\",\"right\"],\"steps\":["
	             MARKED "]}");
	CHECK(fleet_wait_state(&f, "bottom", LR_TASK_SUCCEEDED, 20000) >= 0);
	int64_t t0, t1, l0, l1, r0, r1, b0, b1;
	span_of(&f, "top", &t0, &t1);
	span_of(&f, "left", &l0, &l1);
	span_of(&f, "right", &r0, &r1);
	span_of(&f, "bottom", &b0, &b1);
	CHECK(t1 < l0 && t1 < r0);
	CHECK(l1 < b0 && r1 < b0);
	CHECK(l0 < r1 && r0 < l1); /* the two sides ran side by side */
	printf("# bottom started %.1f ms after the last of its dependencies ended\n",
	       (double)(b0 - (l1 > r1 ? l1 : r1)) / 1e6);
	fleet_check_history(&f, -1);
	fleet_destroy(&f);
}

/* The child fails as soon as one of its dependencies failed, while the
 * other still runs. */
TEST(a_failed_dependency_fails_its_dependents_naming_it)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "q-depfail");
	const char *const flags[] = { "--concurrency", "2", NULL };
	fleet_start(&f, 0, flags);
	fleet_submit(&f, "slow", "{\"id\":\"%s\",\"steps\":[" STEP("s", "sleep 30") "]}");
	fleet_submit(&f, "broken", "{\"id\":\"%s\",\"max_attempts\":1,\"steps\":["
	             STEP("s", "exit 3") "]}");
	fleet_submit(&f, "child", "{\"id\":\"%s\",\"after\":[\"slow\",\"broken\"],"
	             "\"steps\":[" MARKED "]}");
	fleet_submit(&f, "grandchild", "{\"id\":\"%s\",\"after\":[\"child\"],\"steps\":["
	             MARKED "]}");
	CHECK(fleet_wait_state(&f, "grandchild", LR_TASK_FAILED, 15000) >= 0);
	check_failed(&f, "child", "dependency broken ended failed");
	check_failed(&f, "grandchild", "dependency child ended failed");
	CHECK_INT(fleet_count_marks(&f, "start child"), ==, 0); /* never ran */
	CHECK_INT(fleet_state(&f, "slow", NULL, 0, NULL, NULL), ==, LR_TASK_RUNNING);
	fleet_destroy(&f);
}

/* A dependency finished by another runner, while this one is idle: its
 * result (done/ put, claim deleted, in one txn) is all that happens, and
 * it must be enough to start the task that waited for it. The other
 * runner is played by the test, holding the claim on a lease of its own. */
TEST(a_dependency_finished_elsewhere_wakes_an_idle_runner)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "q-wake");
	fleet_start(&f, 0, NULL);
	lr_etcd *etcd = lr_client_etcd(f.client);
	int64_t lease = 0, granted = 0;
	CHECK_OK(lr_lease_grant(etcd, 30, &lease, &granted, NULL, &err), &err);
	char claim[LR_KEY_SIZE], done[LR_KEY_SIZE], val[256];
	lr_key(f.client, LR_K_CLAIMS, "dep", claim);
	lr_key(f.client, LR_K_DONE, "dep", done);
	snprintf(val, sizeof(val), "{\"runner\":\"elsewhere\",\"lease\":%lld,"
	         "\"claimed_at\":\"2026-11-23T00:00:00.000Z\"}", (long long)lease);
	CHECK_OK(lr_kv_put(etcd, claim, val, strlen(val), lease, NULL, NULL, &err), &err);
	fleet_submit(&f, "dep", "{\"id\":\"%s\",\"steps\":[" MARKED "]}");
	fleet_submit(&f, "waiter", "{\"id\":\"%s\",\"after\":[\"dep\"],\"steps\":["
	             MARKED "]}");
	lr_sleep_ms(500); /* the runner has seen both, and waits */
	CHECK_INT(fleet_count_marks(&f, "start "), ==, 0);
	static const char result[] = "{\"attempts\":1,\"error\":null,\"finished_at\":"
	                             "\"2026-11-23T00:00:01.000Z\",\"state\":{},"
	                             "\"status\":\"succeeded\"}";
	lr_txn *t = lr_txn_new();
	CHECK(t != NULL);
	lr_txn_put(t, LR_THEN, done, result, strlen(result), 0);
	lr_txn_delete(t, LR_THEN, claim, 0);
	lr_txn_result r;
	CHECK_OK(lr_etcd_txn(etcd, t, 0, &r, &err), &err);
	lr_txn_result_free(&r);
	lr_txn_free(t);
	int64_t took = fleet_wait_state(&f, "waiter", LR_TASK_SUCCEEDED, 5000);
	printf("# the waiter succeeded %lld ms after its dependency's result\n",
	       (long long)took);
	CHECK(took >= 0);
	lr_lease_revoke(etcd, lease, NULL);
	fleet_destroy(&f);
}

/* A dependent whose spec is too large to keep from the watch waits for
 * its dependency's end like any other: no claim is tried meanwhile. */
TEST(a_large_dependent_waits_for_its_dependency_without_polling)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "q-bigdep");
	fleet_start(&f, 0, (const char *const[]){ "--concurrency", "2", NULL });
	fleet_submit(&f, "long", "{\"id\":\"%s\",\"steps\":[" STEP("s", MARK_START
	             "; sleep 4; " MARK_END) "]}");
	CHECK_INT(fleet_wait_marks(&f, "start long", 1, 5000), ==, 0);
	submit_big(&f, "big-child", "\"after\":[\"long\"]");
	lr_sleep_ms(300);
	long txns = txns_during(2500);
	printf("# %ld txns in 2.5 s while the dependent waited\n", txns);
	CHECK(txns <= 1);
	CHECK(fleet_wait_state(&f, "big-child", LR_TASK_SUCCEEDED, 10000) >= 0);
	int64_t l0, l1, c0, c1;
	span_of(&f, "long", &l0, &l1);
	span_of(&f, "big-child", &c0, &c1);
	CHECK(l1 < c0);
	fleet_destroy(&f);
}

/* Its queue record deleted by hand: the runner learns that the task waits
 * only from its claim, which says for which task; it waits for that one's
 * end, and says once that the record is missing. */
TEST(a_dependent_without_its_queue_record_waits_without_polling)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "q-norec");
	fleet_submit(&f, "long", "{\"id\":\"%s\",\"steps\":[" STEP("s", MARK_START
	             "; sleep 4; " MARK_END) "]}");
	fleet_submit(&f, "child", "{\"id\":\"%s\",\"after\":[\"long\"],\"steps\":["
	             MARKED "]}");
	char key[LR_KEY_SIZE];
	lr_key(f.client, LR_K_QUEUE, "child", key);
	CHECK_OK(lr_kv_delete(lr_client_etcd(f.client), key, 0, NULL, NULL, &err), &err);
	fleet_start(&f, 0, (const char *const[]){ "--concurrency", "2", NULL });
	CHECK_INT(fleet_wait_marks(&f, "start long", 1, 5000), ==, 0);
	lr_sleep_ms(300);
	long txns = txns_during(2500);
	printf("# %ld txns in 2.5 s while the dependent waited\n", txns);
	CHECK(txns <= 1);
	CHECK(fleet_wait_state(&f, "child", LR_TASK_SUCCEEDED, 10000) >= 0);
	int64_t l0, l1, c0, c1;
	span_of(&f, "long", &l0, &l1);
	span_of(&f, "child", &c0, &c1);
	CHECK(l1 < c0);
	CHECK(fleet_log_has(&f, 0, "queue record is missing"));
	fleet_destroy(&f);
}

/* A dependency purged and submitted again is another task, which may wait
 * for the dependent: the dependent fails, as for a dependency gone,
 * instead of the two waiting for each other for ever. */
TEST(a_dependency_purged_and_submitted_again_fails_its_dependent_instead_of_a_cycle)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "q-cycle");
	fleet_start(&f, 0, NULL);
	fleet_submit(&f, "a", "{\"id\":\"%s\",\"steps\":[" MARKED "]}");
	char at[LR_TIME_BUF], spec[512];
	lr_rfc3339_format(lr_wall_ms() + 3000, at);
	snprintf(spec, sizeof(spec), "{\"id\":\"%%s\",\"not_before\":\"%s\",\"after\":[\"a\"],"
	         "\"steps\":[" MARKED "]}", at);
	fleet_submit(&f, "b", spec);
	CHECK(fleet_wait_state(&f, "a", LR_TASK_SUCCEEDED, 5000) >= 0);
	kill(f.pids[0], SIGTERM);
	CHECK_INT(fleet_wait(&f, 0, 10000), ==, 0);
	size_t n = 0;
	CHECK_OK(lr_purge(f.client, 0, -1, &n, &err), &err);
	CHECK_INT(n, ==, 1);
	fleet_submit(&f, "a", "{\"id\":\"%s\",\"after\":[\"b\"],\"steps\":[" MARKED "]}");
	/* Read at start-up, then claimed when b's time comes. */
	fleet_start(&f, 1, (const char *const[]){ "--exit-when-idle", NULL });
	CHECK_INT(fleet_wait(&f, 1, 15000), ==, 0);
	check_failed(&f, "b", "dependency a no longer exists");
	check_failed(&f, "a", "dependency b ended failed");
	CHECK_INT(fleet_count_marks(&f, "start b"), ==, 0);
	fleet_destroy(&f);
}

/* A retried dependent keeps its tasks/ key, so its dependency is still
 * older than it: it runs. */
TEST(a_retried_dependent_still_runs_after_its_dependency)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "q-retrydep");
	fleet_start(&f, 0, NULL);
	fleet_submit(&f, "dep", "{\"id\":\"%s\",\"steps\":[" MARKED "]}");
	fleet_submit(&f, "child", "{\"id\":\"%s\",\"after\":[\"dep\"],\"max_attempts\":1,"
	             "\"steps\":[" STEP("s", MARK_START "; test -f $MARKS/ok") "]}");
	CHECK(fleet_wait_state(&f, "child", LR_TASK_FAILED, 10000) >= 0);
	char ok[400];
	snprintf(ok, sizeof(ok), "%s/ok", f.dir);
	FILE *fp = fopen(ok, "w");
	CHECK(fp != NULL);
	fclose(fp);
	CHECK_OK(lr_retry(f.client, "child", NULL, NULL, &err), &err);
	CHECK(fleet_wait_state(&f, "child", LR_TASK_SUCCEEDED, 10000) >= 0);
	CHECK_INT(fleet_count_marks(&f, "start child"), ==, 2);
	fleet_destroy(&f);
}

/* ---- retry ---------------------------------------------------------------------- */

#define RETRIED "{\"id\":\"%s\",\"max_attempts\":1,\"state\":{\"n\":0},\"steps\":[" \
                STEP("first", MARK_START "; echo '{\\\"n\\\":1}' > $LEASERUN_STATE_OUT") "," \
                STEP("second", MARK_START "; grep -q 1 $LEASERUN_STATE_IN && test -f $MARKS/ok") "]}"

TEST(retry_resumes_at_the_failed_step_with_its_state_and_keeps_the_history)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "q-retry");
	fleet_start(&f, 0, NULL);
	fleet_submit(&f, "r", RETRIED);
	CHECK(fleet_wait_state(&f, "r", LR_TASK_FAILED, 10000) >= 0);
	char ok[400];
	snprintf(ok, sizeof(ok), "%s/ok", f.dir);
	FILE *fp = fopen(ok, "w");
	CHECK(fp != NULL);
	fclose(fp);
	int64_t step = -1;
	CHECK_OK(lr_retry(f.client, "r", NULL, &step, &err), &err);
	CHECK_INT(step, ==, 1);
	/* The running runner sees it from its watch. */
	CHECK(fleet_wait_state(&f, "r", LR_TASK_SUCCEEDED, 10000) >= 0);
	CHECK_INT(fleet_count_marks(&f, "start r 0 "), ==, 1); /* step 0 ran once */
	CHECK_INT(fleet_count_marks(&f, "start r 1 "), ==, 2);
	lr_task_status s;
	CHECK_OK(lr_task_get(f.client, "r", &s, &err), &err);
	CHECK(s.history != NULL);
	json_t *h = json_loads(s.history, 0, NULL);
	CHECK_INT(json_array_size(h), ==, 1);
	CHECK_STR(json_string_value(json_object_get(json_array_get(h, 0), "status")), "failed");
	json_decref(h);
	lr_task_status_clear(&s);
	/* A succeeded task is not retried. */
	CHECK_INT(lr_retry(f.client, "r", NULL, NULL, &err), ==, LR_EINVAL);
	CHECK(strstr(err.msg, "succeeded") != NULL);
	CHECK_INT(lr_retry(f.client, "nope", NULL, NULL, &err), ==, LR_ENOTFOUND);
	fleet_check_history(&f, -1);
	fleet_destroy(&f);
}

TEST(retry_from_step_0_with_the_specs_state)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "q-reset");
	fleet_submit(&f, "r", "{\"id\":\"%s\",\"max_attempts\":1,\"state\":{\"n\":0},\"steps\":["
	             STEP("first", MARK_START "; echo '{\\\"n\\\":1}' > $LEASERUN_STATE_OUT") ","
	             STEP("second", "cat $LEASERUN_STATE_IN > $MARKS/state-$LEASERUN_ATTEMPT; exit 1") "]}");
	fleet_start(&f, 0, (const char *const[]){ "--exit-when-idle", NULL });
	CHECK_INT(fleet_wait(&f, 0, 15000), ==, 0);
	CHECK_INT(fleet_state(&f, "r", NULL, 0, NULL, NULL), ==, LR_TASK_FAILED);
	lr_retry_opts o = { .from_step = "first", .reset_state = 1 };
	int64_t step = -1;
	CHECK_OK(lr_retry(f.client, "r", &o, &step, &err), &err);
	CHECK_INT(step, ==, 0);
	/* Pending, with the spec's state, from step 0, attempts afresh. */
	lr_task_status s;
	CHECK_OK(lr_task_get(f.client, "r", &s, &err), &err);
	CHECK_INT(s.state, ==, LR_TASK_PENDING);
	CHECK_INT(s.next_step, ==, 0);
	lr_task_status_clear(&s);
	fleet_start(&f, 1, (const char *const[]){ "--exit-when-idle", NULL });
	CHECK_INT(fleet_wait(&f, 1, 15000), ==, 0);
	CHECK_INT(fleet_count_marks(&f, "start r 0 "), ==, 2); /* step 0 again */
	CHECK_INT(lr_retry(f.client, "r", &(lr_retry_opts){ .from_step = "nine" }, NULL, &err),
	          ==, LR_EINVAL);
	fleet_destroy(&f);
}

struct racer {
	lr_client *c;
	int rc;
	lr_err err;
};

static void *retry_thread(void *p)
{
	struct racer *r = p;
	r->rc = lr_retry(r->c, "raced", NULL, NULL, &r->err);
	return NULL;
}

TEST(a_retry_racing_a_purge_leaves_either_a_pending_task_or_nothing)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "q-race");
	int retried = 0, purged = 0;
	for (int round = 0; round < 8; round++) {
		fleet_submit(&f, "raced", "{\"id\":\"%s\",\"steps\":[" STEP("s", "-") "]}");
		int already;
		CHECK_OK(lr_cancel(f.client, "raced", &already, &err), &err);
		struct racer r = { .c = f.client };
		pthread_t t;
		CHECK(pthread_create(&t, NULL, retry_thread, &r) == 0);
		size_t n = 0;
		lr_err perr;
		int prc = lr_purge(f.client, 0, -1, &n, &perr);
		pthread_join(t, NULL);
		CHECK_INT(prc, ==, 0);
		lr_task_status s;
		int grc = lr_task_get(f.client, "raced", &s, &err);
		if (r.rc == 0 && grc == 0) {
			/* Retried first: pending again, and purge left it alone. */
			CHECK_INT(s.state, ==, LR_TASK_PENDING);
			retried++;
			lr_task_status_clear(&s);
		} else {
			/* Purged first: nothing of it is left, and the retry said so. */
			CHECK_INT(grc, ==, LR_ENOTFOUND);
			CHECK(r.rc == LR_ENOTFOUND || r.rc == LR_ECONFLICT);
			CHECK(n == 1);
			purged++;
		}
		char key[LR_KEY_SIZE];
		lr_key(f.client, "", "", key);
		/* Clean up for the next round: whatever is left goes. */
		CHECK_OK(lr_kv_delete(lr_client_etcd(f.client), key, LR_KEY_PREFIX, NULL, NULL, &err),
		         &err);
	}
	printf("# 8 races: retry first %d times, purge first %d times\n", retried, purged);
	fleet_destroy(&f);
}

struct retrier {
	lr_client *c;
	const char *from;
	pthread_barrier_t *go;
	int rc;
	int64_t step;
	lr_err err;
};

static void *retry_from(void *p)
{
	struct retrier *r = p;
	lr_retry_opts o = { .from_step = r->from };
	pthread_barrier_wait(r->go);
	r->rc = lr_retry(r->c, "twice", &o, &r->step, &r->err);
	return NULL;
}

/* Two retries of one outcome at once, to different steps: one applies and
 * says where the task resumes; the other, finding the first one's history
 * entry (the same outcome), does not take it for its own. */
TEST(of_two_racing_retries_of_one_outcome_only_the_one_applied_succeeds)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "q-twice");
	int raced = 0;
	for (int round = 0; round < 20; round++) {
		fleet_submit(&f, "twice", "{\"id\":\"%s\",\"steps\":[" STEP("a", "-") ","
		             STEP("b", "-") "," STEP("c", "-") "]}");
		int already;
		CHECK_OK(lr_cancel(f.client, "twice", &already, &err), &err);
		pthread_barrier_t go;
		pthread_barrier_init(&go, NULL, 2);
		struct retrier r[2] = { { .c = f.client, .from = "b", .go = &go },
			                { .c = f.client, .from = "c", .go = &go } };
		pthread_t t[2];
		for (int i = 0; i < 2; i++)
			CHECK(pthread_create(&t[i], NULL, retry_from, &r[i]) == 0);
		for (int i = 0; i < 2; i++)
			pthread_join(t[i], NULL);
		pthread_barrier_destroy(&go);
		int won = r[0].rc == 0 ? 0 : 1;
		if (r[0].rc == 0 && r[1].rc == 0)
			TEST_FAIL("round %d: both retries succeeded, at steps %lld and %lld", round,
			          (long long)r[0].step, (long long)r[1].step);
		CHECK_OK(r[won].rc, &r[won].err);
		/* The other raced (conflict) or came after (the task was pending). */
		const struct retrier *lost = &r[1 - won];
		CHECK(lost->rc == LR_ECONFLICT || lost->rc == LR_EINVAL);
		raced += lost->rc == LR_ECONFLICT;
		lr_task_status s;
		CHECK_OK(lr_task_get(f.client, "twice", &s, &err), &err);
		CHECK_INT(s.state, ==, LR_TASK_PENDING);
		CHECK_INT(s.next_step, ==, r[won].step);
		lr_task_status_clear(&s);
		char key[LR_KEY_SIZE];
		lr_key(f.client, "", "", key);
		CHECK_OK(lr_kv_delete(lr_client_etcd(f.client), key, LR_KEY_PREFIX, NULL, NULL, &err),
		         &err);
	}
	printf("# 20 rounds of two retries: %d raced to the txn\n", raced);
	fleet_destroy(&f);
}

/* ---- a runner killed ------------------------------------------------------------ */

TEST(a_runner_killed_while_tasks_wait_loses_nothing)
{
	fleet f;
	fleet_init(&f, etcdh_endpoints(cluster), "q-kill");
	fleet_start(&f, 0, NULL);
	char at[LR_TIME_BUF], spec[512];
	lr_rfc3339_format(lr_wall_ms() + 3000, at);
	snprintf(spec, sizeof(spec), "{\"id\":\"%%s\",\"not_before\":\"%s\",\"steps\":[" MARKED "]}",
	         at);
	fleet_submit(&f, "timed", spec);
	fleet_submit(&f, "slow", "{\"id\":\"%s\",\"steps\":[" STEP("s", MARK_START
	             "; sleep 1.5; " MARK_END) "]}");
	fleet_submit(&f, "waiter", "{\"id\":\"%s\",\"after\":[\"slow\"],\"priority\":5,\"steps\":["
	             MARKED "]}");
	CHECK_INT(fleet_wait_marks(&f, "start slow", 1, 10000), ==, 0);
	kill(f.pids[0], SIGKILL);
	fleet_wait(&f, 0, 5000);
	fleet_start(&f, 1, NULL);
	CHECK(fleet_wait_state(&f, "waiter", LR_TASK_SUCCEEDED, 20000) >= 0);
	CHECK(fleet_wait_state(&f, "timed", LR_TASK_SUCCEEDED, 20000) >= 0);
	int64_t s0, s1, w0, w1;
	span_of(&f, "slow", &s0, &s1);
	span_of(&f, "waiter", &w0, &w1);
	CHECK(s1 < w0);
	fleet_check_history(&f, -1);
	fleet_destroy(&f);
}

static int setup(void)
{
	etcdh_opts o = { .members = 1 };
	return etcdh_start(&o, &cluster);
}

static void teardown(void) { etcdh_destroy(cluster); }

TEST_LIST(
	TEST_CASE(a_dependency_finished_elsewhere_wakes_an_idle_runner),
	TEST_CASE(priorities_order_a_backlog),
	TEST_CASE(a_large_spec_submitted_while_a_runner_runs_keeps_its_priority),
	TEST_CASE(a_large_dependent_waits_for_its_dependency_without_polling),
	TEST_CASE(a_dependent_without_its_queue_record_waits_without_polling),
	TEST_CASE(a_dependency_purged_and_submitted_again_fails_its_dependent_instead_of_a_cycle),
	TEST_CASE(a_retried_dependent_still_runs_after_its_dependency),
	TEST_CASE(a_delayed_task_starts_at_its_time_and_survives_the_restart_of_every_runner),
	TEST_CASE(a_task_whose_queue_record_was_spoiled_still_runs),
	TEST_CASE(a_queue_record_changed_to_a_later_time_does_not_hold_a_task_back),
	TEST_CASE(a_diamond_of_dependencies_runs_in_a_valid_order),
	TEST_CASE(a_failed_dependency_fails_its_dependents_naming_it),
	TEST_CASE(retry_resumes_at_the_failed_step_with_its_state_and_keeps_the_history),
	TEST_CASE(retry_from_step_0_with_the_specs_state),
	TEST_CASE(a_retry_racing_a_purge_leaves_either_a_pending_task_or_nothing),
	TEST_CASE(of_two_racing_retries_of_one_outcome_only_the_one_applied_succeeds),
	TEST_CASE(a_runner_killed_while_tasks_wait_loses_nothing),
);
TEST_MAIN(setup, teardown)
