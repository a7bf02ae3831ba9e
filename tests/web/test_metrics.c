/* test_metrics.c - /metrics of real `leaserun worker --metrics` processes
 * against a real etcd: valid for promtool, and the figures move as tasks
 * run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "fleet.h"
#include "servers.h"
#include "test.h"


#define STEP(name, run) "{\"name\":\"" name "\",\"run\":\"" run "\"}"

/* Poll the metrics until series reaches at least want; its last value. */
static double wait_metric(const char *addr, const char *series, double want,
                          int timeout_ms)
{
	int64_t end = lr_mono_ms() + timeout_ms;
	double v;
	do {
		char *text = metrics_get(addr);
		v = metric_value(text, series);
		free(text);
		if (v >= want)
			break;
		lr_sleep_ms(50);
	} while (lr_mono_ms() < end);
	return v;
}

TEST(metrics_of_a_working_runner_pass_promtool_and_move)
{
	fleet f;
	char addr[ADDR_SIZE];
	const char *extra[] = { "--concurrency", "2", NULL };
	fleet_init(&f, etcdh_endpoints(web_etcd), "metrics");
	metrics_worker_start(&f, 0, extra, addr);

	char *before = metrics_get(addr);
	promtool_check(before);
	CHECK(metric_value(before, "leaserun_claims_won_total") == 0);
	CHECK(metric_value(before, "leaserun_worker_slots") == 2);
	CHECK(metric_value(before, "leaserun_worker_slots_free") == 2);
	CHECK(metric_value(before, "leaserun_etcd_members_left_out") == 0);
	CHECK_HAS(before, "leaserun_build_info{version=\"");
	free(before);

	fleet_submit(&f, "ok1", "{\"id\":\"%s\",\"steps\":[" STEP("a", "true") "," STEP("b", "true") "]}");
	fleet_submit(&f, "ok2", "{\"id\":\"%s\",\"steps\":[" STEP("a", "true") "," STEP("b", "true") "]}");
	/* Fails once (no flag file yet), then succeeds. */
	fleet_submit(&f, "flaky", "{\"id\":\"%s\",\"max_attempts\":3,\"retry_backoff_ms\":50,"
	             "\"steps\":[" STEP("a", "test -f $MARKS/flag || { touch $MARKS/flag; exit 1; }") "]}");
	fleet_submit(&f, "bad", "{\"id\":\"%s\",\"max_attempts\":1,\"steps\":[" STEP("a", "exit 3") "]}");
	const char *ids[] = { "ok1", "ok2", "flaky", "bad" };
	for (int i = 0; i < 4; i++)
		CHECK(fleet_wait_state(&f, ids[i], -1, 30000) >= 0);
	/* The figures are counted just after the txns that etcd shows. */
	wait_metric(addr, "leaserun_tasks_finished_total{state=\"failed\"}", 1, 3000);

	char *after = metrics_get(addr);
	promtool_check(after);
	printf("%s", after);
	CHECK(metric_value(after, "leaserun_claims_won_total") >= 4);
	CHECK(metric_value(after, "leaserun_step_executions_total{result=\"ok\"}") >= 5);
	/* A shell step that exits non-zero is a retry (flaky's first
	 * attempt, bad's only one): the runner, not the step, gives up. */
	CHECK(metric_value(after, "leaserun_step_executions_total{result=\"retry\"}") == 2);
	CHECK(metric_value(after, "leaserun_step_executions_total{result=\"stopped\"}") == 0);
	CHECK(metric_value(after, "leaserun_etcd_requests_total{method=\"KV/Txn\"}") >= 8);
	CHECK(metric_value(after, "leaserun_etcd_request_duration_seconds_count{method=\"KV/Txn\"}") >= 8);
	CHECK(metric_value(after, "leaserun_step_commits_total") >= 2);
	CHECK(metric_value(after, "leaserun_tasks_finished_total{state=\"succeeded\"}") == 3);
	CHECK(metric_value(after, "leaserun_tasks_finished_total{state=\"failed\"}") == 1);
	CHECK(metric_value(after, "leaserun_commit_duration_seconds_count") >= 2);
	CHECK(metric_value(after, "leaserun_claim_duration_seconds_bucket{le=\"+Inf\"}") >= 4);
	CHECK(metric_value(after, "leaserun_tasks_running") == 0);
	CHECK(metric_value(after, "leaserun_worker_slots_free") == 2);
	double left = metric_value(after, "leaserun_lease_remaining_seconds");
	CHECK(left > 0 && left <= 2.0);
	free(after);
	/* Renewals come every TTL/3 (TTL 2 s here). */
	CHECK(wait_metric(addr, "leaserun_lease_renewal_duration_seconds_count", 2, 3000) >= 2);
	fleet_destroy(&f);
}

TEST(gauges_show_the_running_task_the_busy_slot_and_the_pending_one)
{
	fleet f;
	char addr[ADDR_SIZE];
	fleet_init(&f, etcdh_endpoints(web_etcd), "gauges");
	metrics_worker_start(&f, 0, NULL, addr);
	fleet_submit(&f, "long", "{\"id\":\"%s\",\"steps\":[" STEP("a", "sleep 3") "]}");
	CHECK(fleet_wait_state(&f, "long", LR_TASK_RUNNING, 10000) >= 0);
	fleet_submit(&f, "next", "{\"id\":\"%s\",\"steps\":[" STEP("a", "true") "]}");
	CHECK(wait_metric(addr, "leaserun_tasks_pending", 1, 3000) == 1);
	char *text = metrics_get(addr);
	CHECK(metric_value(text, "leaserun_tasks_running") == 1);
	CHECK(metric_value(text, "leaserun_worker_slots_free") == 0);
	free(text);
	CHECK(fleet_wait_state(&f, "next", LR_TASK_SUCCEEDED, 20000) >= 0);
	wait_metric(addr, "leaserun_tasks_finished_total{state=\"succeeded\"}", 2, 3000);
	text = metrics_get(addr);
	CHECK(metric_value(text, "leaserun_tasks_running") == 0);
	CHECK(metric_value(text, "leaserun_tasks_pending") == 0);
	CHECK(metric_value(text, "leaserun_worker_slots_free") == 1);
	free(text);
	fleet_destroy(&f);
}

TEST_LIST(TEST_CASE(metrics_of_a_working_runner_pass_promtool_and_move),
          TEST_CASE(gauges_show_the_running_task_the_busy_slot_and_the_pending_one));

TEST_MAIN(web_etcd_start, web_etcd_stop)
