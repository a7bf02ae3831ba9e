/* test_expo.c - the Prometheus text format as written: escaping, floats,
 * histograms; the latency buckets the public statistics carry; the metrics
 * of a runner that did nothing yet. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/stats.h"
#include "http/expo.h"
#include "leaserun.h"
#include "test.h"

TEST(a_family_has_help_then_type_and_its_help_is_escaped)
{
	lr_expo e = { 0 };
	lr_expo_family(&e, "leaserun_x_total", "counter", "a\\b\nc \"q\"");
	CHECK(!e.oom);
	CHECK_STR(e.buf, "# HELP leaserun_x_total a\\\\b\\nc \"q\"\n"
	                 "# TYPE leaserun_x_total counter\n");
	lr_expo_free(&e);
}

TEST(label_values_escape_backslash_quote_and_newline)
{
	lr_expo e = { 0 };
	lr_label l[] = { { "method", "KV.Txn" }, { "why", "a\"b\\c\nd" }, { NULL, NULL } };
	lr_expo_count(&e, "leaserun_y_total", l, 7);
	CHECK_STR(e.buf, "leaserun_y_total{method=\"KV.Txn\",why=\"a\\\"b\\\\c\\nd\"} 7\n");
	lr_expo_free(&e);
}

TEST(counts_are_written_exactly_however_large)
{
	lr_expo e = { 0 };
	lr_expo_count(&e, "c", NULL, UINT64_MAX);
	CHECK_STR(e.buf, "c 18446744073709551615\n");
	lr_expo_free(&e);
}

TEST(floats_are_shortest_round_trip_and_infinities_are_spelled)
{
	char b[32];
	lr_expo_float(0.1, b);
	CHECK_STR(b, "0.1");
	lr_expo_float(0.000128, b);
	CHECK_STR(b, "0.000128");
	lr_expo_float(1.0 / 3.0, b);
	CHECK(strtod(b, NULL) == 1.0 / 3.0);
	lr_expo_float(INFINITY, b);
	CHECK_STR(b, "+Inf");
	lr_expo_float(-INFINITY, b);
	CHECK_STR(b, "-Inf");
	lr_expo_float(NAN, b);
	CHECK_STR(b, "NaN");
	lr_expo_float(0, b);
	CHECK_STR(b, "0");
}

TEST(a_histogram_has_buckets_inf_sum_and_count)
{
	lr_expo e = { 0 };
	double le[] = { 0.5, 1 };
	uint64_t cum[] = { 1, 3 };
	lr_label l[] = { { "method", "KV.Range" }, { NULL, NULL } };
	lr_expo_histogram(&e, "h_seconds", l, le, cum, 2, 4, 2.25);
	CHECK_STR(e.buf,
	          "h_seconds_bucket{method=\"KV.Range\",le=\"0.5\"} 1\n"
	          "h_seconds_bucket{method=\"KV.Range\",le=\"1\"} 3\n"
	          "h_seconds_bucket{method=\"KV.Range\",le=\"+Inf\"} 4\n"
	          "h_seconds_sum{method=\"KV.Range\"} 2.25\n"
	          "h_seconds_count{method=\"KV.Range\"} 4\n");
	lr_expo_free(&e);
}

TEST(latency_buckets_double_from_128_microseconds)
{
	CHECK(lr_latency_bucket_s(0) == 0.000128);
	CHECK(lr_latency_bucket_s(1) == 0.000256);
	CHECK(lr_latency_bucket_s(LR_LATENCY_BUCKETS - 1) == 16.777216);
	CHECK(lr_latency_bucket_s(-1) == 0);
	CHECK(lr_latency_bucket_s(LR_LATENCY_BUCKETS) == 0);
}

TEST(latency_buckets_count_samples_at_or_below_each_bound)
{
	lr_hist *h = calloc(1, sizeof(*h));
	lr_hist_snap *s = calloc(1, sizeof(*s));
	lr_latency l;
	CHECK(h != NULL && s != NULL);
	/* 127 us and 128 us: under 0.000128 s only the first (a sample
	 * recorded as 128 us took at least that long). */
	lr_hist_record(h, 127);
	lr_hist_record(h, 128);
	lr_hist_record(h, 255);
	lr_hist_record(h, 1000);
	lr_hist_record(h, 30 * 1000 * 1000); /* 30 s: beyond the last bound */
	lr_hist_add_to(h, s);
	lr_hist_summary(s, &l);
	CHECK_INT(l.count, ==, 5);
	CHECK_INT(l.le[0], ==, 1);  /* <= 128 us */
	CHECK_INT(l.le[1], ==, 3);  /* <= 256 us */
	CHECK_INT(l.le[2], ==, 3);  /* <= 512 us */
	CHECK_INT(l.le[3], ==, 4);  /* <= 1024 us */
	CHECK_INT(l.le[LR_LATENCY_BUCKETS - 1], ==, 4);
	CHECK(fabs(l.sum_ms - (127 + 128 + 255 + 1000 + 30e6) / 1000.0) < 1e-6);
	for (int i = 1; i < LR_LATENCY_BUCKETS; i++)
		CHECK(l.le[i] >= l.le[i - 1]);
	free(h);
	free(s);
}

TEST(metrics_of_no_runner_are_zero_but_complete)
{
	char *text = NULL;
	size_t len = 0;
	lr_err err = { 0 };
	CHECK_OK(lr_metrics_text(NULL, 0, &text, &len, &err), &err);
	CHECK_INT(strlen(text), ==, len);
	CHECK_HAS(text, "# TYPE leaserun_claims_won_total counter\nleaserun_claims_won_total 0\n");
	CHECK_HAS(text, "leaserun_step_executions_total{result=\"stopped\"} 0\n");
	CHECK_HAS(text, "leaserun_build_info{version=\"");
	CHECK_HAS(text, "leaserun_commit_duration_seconds_bucket{le=\"+Inf\"} 0\n");
	CHECK_HAS(text, "# TYPE leaserun_lease_remaining_seconds gauge\n");
	/* Every line is a comment or "name[{labels}] value". */
	for (char *line = text; *line != '\0';) {
		char *nl = strchr(line, '\n');
		CHECK(nl != NULL);
		CHECK(line[0] == '#' || strncmp(line, "leaserun_", 9) == 0);
		line = nl + 1;
	}
	free(text);
}

TEST_LIST(TEST_CASE(a_family_has_help_then_type_and_its_help_is_escaped),
          TEST_CASE(label_values_escape_backslash_quote_and_newline),
          TEST_CASE(counts_are_written_exactly_however_large),
          TEST_CASE(floats_are_shortest_round_trip_and_infinities_are_spelled),
          TEST_CASE(a_histogram_has_buckets_inf_sum_and_count),
          TEST_CASE(latency_buckets_double_from_128_microseconds),
          TEST_CASE(latency_buckets_count_samples_at_or_below_each_bound),
          TEST_CASE(metrics_of_no_runner_are_zero_but_complete));

TEST_MAIN(NULL, NULL)
