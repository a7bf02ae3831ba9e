/* test_clock.c - monotonic sleeps that survive signals, RFC 3339 format and
 * parse, human durations (good and bad), compact ages. */
#include <signal.h>
#include <string.h>
#include <sys/time.h>

#include "base/clock.h"
#include "test.h"

TEST(mono_clock_advances_by_at_least_the_sleep)
{
	int64_t t0 = lr_mono_ms();
	int64_t u0 = lr_mono_us();
	lr_sleep_ms(30);
	int64_t elapsed = lr_mono_ms() - t0;
	CHECK_INT(elapsed, >=, 30);
	CHECK_INT(elapsed, <, 2000);
	CHECK_INT(lr_mono_us() - u0, >=, 30000);
}

TEST(sleep_of_zero_or_less_returns_at_once)
{
	int64_t t0 = lr_mono_ms();
	lr_sleep_ms(0);
	lr_sleep_ms(-1000);
	CHECK_INT(lr_mono_ms() - t0, <, 20);
}

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

TEST(sleep_is_not_cut_short_by_signals)
{
	struct sigaction sa, old;
	struct itimerval every_10ms = { { 0, 10000 }, { 0, 10000 } };
	struct itimerval off = { { 0, 0 }, { 0, 0 } };

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_alarm; /* no SA_RESTART: sleeps see EINTR */
	sigemptyset(&sa.sa_mask);
	CHECK(sigaction(SIGALRM, &sa, &old) == 0);
	alarms = 0;
	CHECK(setitimer(ITIMER_REAL, &every_10ms, NULL) == 0);
	int64_t t0 = lr_mono_ms();
	lr_sleep_ms(100);
	int64_t elapsed = lr_mono_ms() - t0;
	setitimer(ITIMER_REAL, &off, NULL);
	sigaction(SIGALRM, &old, NULL);
	CHECK_INT(alarms, >, 2);
	CHECK_INT(elapsed, >=, 100);
	CHECK_INT(elapsed, <, 2000);
}

TEST(rfc3339_format_writes_utc_with_milliseconds)
{
	char buf[LR_TIME_BUF];
	lr_rfc3339_format(0, buf);
	CHECK_STR(buf, "1970-01-01T00:00:00.000Z");
	lr_rfc3339_format(1795238957123, buf);
	CHECK_STR(buf, "2026-11-21T05:29:17.123Z");
	lr_rfc3339_format(-1, buf);
	CHECK_STR(buf, "1969-12-31T23:59:59.999Z");
	lr_rfc3339_format(946684800000 + 5, buf);
	CHECK_STR(buf, "2000-01-01T00:00:00.005Z");
}

TEST(rfc3339_now_is_the_wall_clock_in_our_format)
{
	char buf[LR_TIME_BUF];
	int64_t ms = 0;
	int64_t before = lr_wall_ms();
	lr_rfc3339_now(buf);
	int64_t after = lr_wall_ms();
	CHECK_INT(strlen(buf), ==, 24);
	CHECK(buf[10] == 'T' && buf[23] == 'Z');
	CHECK_INT(lr_rfc3339_parse(buf, &ms), ==, 0);
	CHECK_INT(ms, >=, before);
	CHECK_INT(ms, <=, after);
}

TEST(rfc3339_parse_reads_what_format_writes)
{
	int64_t samples[] = { 0, 1, 999, 1795238957123, 946684800000, 253402300799999 };
	for (size_t i = 0; i < sizeof(samples) / sizeof(samples[0]); i++) {
		char buf[LR_TIME_BUF];
		int64_t ms = -1;
		lr_rfc3339_format(samples[i], buf);
		CHECK_INT(lr_rfc3339_parse(buf, &ms), ==, 0);
		CHECK_INT(ms, ==, samples[i]);
	}
}

TEST(rfc3339_parse_accepts_no_fraction_long_fractions_and_offsets)
{
	int64_t ms = 0;
	CHECK_INT(lr_rfc3339_parse("2026-11-21T05:29:17Z", &ms), ==, 0);
	CHECK_INT(ms, ==, 1795238957000);
	CHECK_INT(lr_rfc3339_parse("2026-11-21T05:29:17.5Z", &ms), ==, 0);
	CHECK_INT(ms, ==, 1795238957500);
	CHECK_INT(lr_rfc3339_parse("2026-11-21T05:29:17.123987654Z", &ms), ==, 0);
	CHECK_INT(ms, ==, 1795238957123);
	CHECK_INT(lr_rfc3339_parse("2026-11-21t05:29:17.123z", &ms), ==, 0);
	CHECK_INT(ms, ==, 1795238957123);
	CHECK_INT(lr_rfc3339_parse("2026-11-21T06:29:17.123+01:00", &ms), ==, 0);
	CHECK_INT(ms, ==, 1795238957123);
	CHECK_INT(lr_rfc3339_parse("2026-11-21T00:59:17.123-04:30", &ms), ==, 0);
	CHECK_INT(ms, ==, 1795238957123);
	CHECK_INT(lr_rfc3339_parse("2024-02-29T23:59:59Z", &ms), ==, 0);
	CHECK_INT(ms, ==, 1709251199000);
}

TEST(rfc3339_parse_rejects_anything_else)
{
	const char *bad[] = {
		"", "2026-11-21", "2026-11-21T05:29:17", "2026-11-21 05:29:17Z",
		"2026-13-01T00:00:00Z", "2026-00-01T00:00:00Z", "2026-02-29T00:00:00Z",
		"2026-04-31T00:00:00Z", "2026-11-21T24:00:00Z", "2026-11-21T05:60:00Z",
		"2026-11-21T05:29:61Z", "2026-11-21T05:29:17.Z", "2026-11-21T05:29:17.123ZZ",
		"2026-11-21T05:29:17+0100", "2026-11-21T05:29:17+24:00", "26-11-21T05:29:17Z",
		"2026-11-21T5:29:17Z", "yesterday",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int64_t ms = 12345;
		if (lr_rfc3339_parse(bad[i], &ms) != LR_EINVAL)
			TEST_FAIL("accepted \"%s\"", bad[i]);
		CHECK_INT(ms, ==, 12345);
	}
	int64_t ms;
	CHECK_INT(lr_rfc3339_parse(NULL, &ms), ==, LR_EINVAL);
}

static int64_t duration(const char *s)
{
	int64_t ms = -1;
	lr_err err = { 0 };
	CHECK_OK(lr_duration_parse(s, &ms, &err), &err);
	return ms;
}

TEST(duration_parse_accepts_seconds_units_and_sums)
{
	CHECK_INT(duration("90"), ==, 90000);
	CHECK_INT(duration("0"), ==, 0);
	CHECK_INT(duration("1.5"), ==, 1500);
	CHECK_INT(duration("1.5s"), ==, 1500);
	CHECK_INT(duration("250ms"), ==, 250);
	CHECK_INT(duration("5m"), ==, 300000);
	CHECK_INT(duration("2h"), ==, 7200000);
	CHECK_INT(duration("7d"), ==, 604800000);
	CHECK_INT(duration("1h30m"), ==, 5400000);
	CHECK_INT(duration("1d2h3m4s5ms"), ==, 93784005);
	CHECK_INT(duration(".5s"), ==, 500);
	CHECK_INT(duration("0.5h"), ==, 1800000);
	CHECK_INT(duration("1.0009s"), ==, 1000);
	CHECK_INT(duration("0.123456789123d"), ==, 10666666);
	CHECK_INT(duration("106751991167d"), ==, 106751991167 * 86400000LL);
}

static void duration_fails(const char *s, const char *want)
{
	int64_t ms = 77;
	lr_err err = { 0 };
	if (lr_duration_parse(s, &ms, &err) != LR_EINVAL)
		TEST_FAIL("accepted \"%s\"", s);
	CHECK_INT(ms, ==, 77);
	CHECK_HAS(err.msg, want);
}

TEST(duration_parse_rejects_empty_negative_and_garbage_naming_the_input)
{
	duration_fails("", "duration \"\": empty");
	duration_fails("-5s", "duration \"-5s\": must not be negative");
	duration_fails("abc", "duration \"abc\": expected seconds or numbers with units");
	const char *bad[] = { "5x", "1h30", "s", "5 m", " 5s", "5s ", "1..5s", ".s",
	                      "5M", "+5s", "1e3", "5ss", "ms", "." };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char want[64];
		snprintf(want, sizeof(want), "duration \"%s\"", bad[i]);
		duration_fails(bad[i], want);
	}
}

TEST(duration_parse_rejects_overflow)
{
	duration_fails("106751991168d", "duration \"106751991168d\": too large");
	duration_fails("9223372036854775807d", "too large");
	duration_fails("99999999999999999999", "too large");
	duration_fails("9223372036854775807ms1ms", "too large");
	duration_fails("106751991167d86400000ms", "too large");
}

static void age(int64_t ms, const char *want)
{
	char buf[32];
	lr_format_age(ms, buf, sizeof(buf));
	CHECK_STR(buf, want);
}

TEST(format_age_is_compact)
{
	age(0, "0s");
	age(999, "0s");
	age(3000, "3s");
	age(59999, "59s");
	age(60000, "1m00s");
	age(252000, "4m12s");
	age(3599999, "59m59s");
	age(3600000, "1h00m");
	age(7500000, "2h05m");
	age(86400000, "1d00h");
	age(273600000, "3d04h");
	age(-5000, "0s");
	age(INT64_MAX, "106751991167d07h");
}

TEST(format_age_respects_a_small_buffer)
{
	char buf[4];
	lr_format_age(252000, buf, sizeof(buf));
	CHECK_STR(buf, "4m1");
}

TEST_LIST(
	TEST_CASE(mono_clock_advances_by_at_least_the_sleep),
	TEST_CASE(sleep_of_zero_or_less_returns_at_once),
	TEST_CASE(sleep_is_not_cut_short_by_signals),
	TEST_CASE(rfc3339_format_writes_utc_with_milliseconds),
	TEST_CASE(rfc3339_now_is_the_wall_clock_in_our_format),
	TEST_CASE(rfc3339_parse_reads_what_format_writes),
	TEST_CASE(rfc3339_parse_accepts_no_fraction_long_fractions_and_offsets),
	TEST_CASE(rfc3339_parse_rejects_anything_else),
	TEST_CASE(duration_parse_accepts_seconds_units_and_sums),
	TEST_CASE(duration_parse_rejects_empty_negative_and_garbage_naming_the_input),
	TEST_CASE(duration_parse_rejects_overflow),
	TEST_CASE(format_age_is_compact),
	TEST_CASE(format_age_respects_a_small_buffer),
);

TEST_MAIN(NULL, NULL)
