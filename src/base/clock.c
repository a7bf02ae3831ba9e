/* clock.c - monotonic time and sleeps, RFC 3339 times, human durations and ages.
 * Pure functions and clock reads; any thread. */
#include "base/clock.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/error.h"

static int64_t read_clock_us(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t lr_mono_us(void)
{
	return read_clock_us(CLOCK_MONOTONIC);
}

int64_t lr_mono_ms(void)
{
	return lr_mono_us() / 1000;
}

int64_t lr_wall_ms(void)
{
	return read_clock_us(CLOCK_REALTIME) / 1000;
}

struct timespec lr_mono_deadline_us(int64_t us)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	t.tv_sec += (time_t)(us / 1000000);
	t.tv_nsec += (long)(us % 1000000) * 1000L;
	if (t.tv_nsec >= 1000000000L) {
		t.tv_sec++;
		t.tv_nsec -= 1000000000L;
	}
	return t;
}

void lr_sleep_ms(int64_t ms)
{
	if (ms <= 0)
		return;
	/* An absolute deadline: after EINTR the sleep resumes towards the
	 * same instant instead of drifting by the time spent in the handler. */
	struct timespec until = lr_mono_deadline_us(ms * 1000);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &until, NULL) ==
	       EINTR)
		;
}

/* ---- RFC 3339 ---- */

void lr_rfc3339_format(int64_t unix_ms, char buf[LR_TIME_BUF])
{
	/* Floor division, so times before 1970 keep a positive millisecond. */
	int64_t secs = unix_ms / 1000;
	int64_t millis = unix_ms % 1000;
	if (millis < 0) {
		millis += 1000;
		secs--;
	}
	time_t t = (time_t)secs;
	struct tm tm;
	size_t n = 0;
	if (gmtime_r(&t, &tm) != NULL)
		n = strftime(buf, LR_TIME_BUF, "%Y-%m-%dT%H:%M:%S", &tm);
	if (n == 0) {
		snprintf(buf, LR_TIME_BUF, "(time out of range)");
		return;
	}
	snprintf(buf + n, LR_TIME_BUF - n, ".%03dZ", (int)millis);
}

void lr_rfc3339_now(char buf[LR_TIME_BUF])
{
	lr_rfc3339_format(lr_wall_ms(), buf);
}

/* Days from 1970-01-01 to y-m-d in the proleptic Gregorian calendar
 * (H. Hinnant's days_from_civil): no time zone, no libc state. */
static int64_t days_from_civil(int64_t y, int64_t m, int64_t d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static int days_in_month(int y, int m)
{
	static const int days[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
	return m == 2 && leap ? 29 : days[m - 1];
}

/* Exactly n digits at *p. */
static int read_digits(const char **p, int n, int *out)
{
	int v = 0;
	for (int i = 0; i < n; i++) {
		char c = (*p)[i];
		if (c < '0' || c > '9')
			return -1;
		v = v * 10 + (c - '0');
	}
	*p += n;
	*out = v;
	return 0;
}

/* A literal character at *p. */
static int expect(const char **p, char a, char b)
{
	if (**p != a && **p != b)
		return -1;
	(*p)++;
	return 0;
}

/* ".123456" -> 123 milliseconds; absent -> 0. */
static int read_fraction(const char **p, int *ms)
{
	int digits = 0;
	*ms = 0;
	if (**p != '.')
		return 0;
	(*p)++;
	while (**p >= '0' && **p <= '9') {
		if (digits < 3)
			*ms = *ms * 10 + (**p - '0');
		digits++;
		(*p)++;
	}
	for (int i = digits; i < 3; i++)
		*ms *= 10;
	return digits > 0 ? 0 : -1;
}

/* "Z" -> 0; "+hh:mm" / "-hh:mm" -> seconds east of UTC. */
static int read_offset(const char **p, int *secs)
{
	int sign, hh, mm;
	*secs = 0;
	if (expect(p, 'Z', 'z') == 0)
		return 0;
	if (**p != '+' && **p != '-')
		return -1;
	sign = **p == '-' ? -1 : 1;
	(*p)++;
	if (read_digits(p, 2, &hh) != 0 || expect(p, ':', ':') != 0 ||
	    read_digits(p, 2, &mm) != 0 || hh > 23 || mm > 59)
		return -1;
	*secs = sign * (hh * 3600 + mm * 60);
	return 0;
}

int lr_rfc3339_parse(const char *s, int64_t *unix_ms)
{
	int y, mo, d, h, mi, sec, ms, offset;
	const char *p = s;

	if (s == NULL)
		return LR_EINVAL;
	if (read_digits(&p, 4, &y) != 0 || expect(&p, '-', '-') != 0 ||
	    read_digits(&p, 2, &mo) != 0 || expect(&p, '-', '-') != 0 ||
	    read_digits(&p, 2, &d) != 0 || expect(&p, 'T', 't') != 0 ||
	    read_digits(&p, 2, &h) != 0 || expect(&p, ':', ':') != 0 ||
	    read_digits(&p, 2, &mi) != 0 || expect(&p, ':', ':') != 0 ||
	    read_digits(&p, 2, &sec) != 0 || read_fraction(&p, &ms) != 0 ||
	    read_offset(&p, &offset) != 0 || *p != '\0')
		return LR_EINVAL;
	/* Second 60 is a leap second, which RFC 3339 allows. */
	if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 ||
	    mi > 59 || sec > 60)
		return LR_EINVAL;
	int64_t t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 +
	            sec - offset;
	*unix_ms = t * 1000 + ms;
	return 0;
}

/* ---- durations ---- */

struct number {
	int64_t whole;
	int64_t frac;   /* the first digits after the point, as an integer */
	int64_t scale;  /* 10^(number of those digits) */
};

/* Reads "12", "1.5", ".5" or "2."; -1 if no digit, -2 on overflow. */
static int read_number(const char **p, struct number *n)
{
	int digits = 0;

	n->whole = 0;
	n->frac = 0;
	n->scale = 1;
	for (; **p >= '0' && **p <= '9'; (*p)++, digits++) {
		if (n->whole > (INT64_MAX - 9) / 10)
			return -2;
		n->whole = n->whole * 10 + (**p - '0');
	}
	if (**p == '.') {
		(*p)++;
		/* Nine digits are finer than any unit needs; the rest are
		 * read and dropped. */
		for (; **p >= '0' && **p <= '9'; (*p)++, digits++) {
			if (n->scale < 1000000000) {
				n->frac = n->frac * 10 + (**p - '0');
				n->scale *= 10;
			}
		}
	}
	return digits > 0 ? 0 : -1;
}

/* Milliseconds in the unit at *p ("ms" before "m"), advancing past it. */
static int64_t read_unit(const char **p)
{
	static const struct {
		const char *name;
		int64_t ms;
	} units[] = {
		{ "ms", 1 }, { "s", 1000 }, { "m", 60000 }, { "h", 3600000 },
		{ "d", 86400000 },
	};
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		size_t len = strlen(units[i].name);
		if (strncmp(*p, units[i].name, len) == 0) {
			*p += len;
			return units[i].ms;
		}
	}
	return 0;
}

/* n * unit_ms into *out; -2 on overflow. frac < 10^9 and unit_ms < 10^8,
 * so the fraction's product fits in int64. */
static int scale_number(const struct number *n, int64_t unit_ms, int64_t *out)
{
	if (n->whole > INT64_MAX / unit_ms)
		return -2;
	int64_t whole = n->whole * unit_ms;
	int64_t part = n->frac * unit_ms / n->scale;
	if (whole > INT64_MAX - part)
		return -2;
	*out = whole + part;
	return 0;
}

static int duration_error(const char *s, int rc, lr_err *err)
{
	if (rc == -2)
		return lr_err_set(err, LR_EINVAL, "duration \"%.64s\": too large", s);
	return lr_err_set(err, LR_EINVAL,
	                  "duration \"%.64s\": expected seconds or numbers with units ms, s, m, h, d (e.g. 90, 1.5s, 250ms, 1h30m)",
	                  s);
}

int lr_duration_parse(const char *s, int64_t *ms, lr_err *err)
{
	const char *p = s;
	int64_t total = 0;
	int rc;

	if (s == NULL || *s == '\0')
		return lr_err_set(err, LR_EINVAL,
		                  "duration \"\": empty (e.g. 90, 1.5s, 250ms, 1h30m)");
	if (*s == '-')
		return lr_err_set(err, LR_EINVAL,
		                  "duration \"%.64s\": must not be negative", s);
	while (*p != '\0') {
		const char *start = p;
		struct number n;
		int64_t unit_ms, term;

		rc = read_number(&p, &n);
		if (rc != 0)
			return duration_error(s, rc, err);
		/* A bare number is seconds, but only as the whole input:
		 * "1h30" is more likely a typo than 1h and 30 s. */
		if (start == s && *p == '\0')
			unit_ms = 1000;
		else
			unit_ms = read_unit(&p);
		if (unit_ms == 0)
			return duration_error(s, -1, err);
		rc = scale_number(&n, unit_ms, &term);
		if (rc == 0 && total > INT64_MAX - term)
			rc = -2;
		if (rc != 0)
			return duration_error(s, rc, err);
		total += term;
	}
	*ms = total;
	return 0;
}

void lr_format_age(int64_t ms, char *buf, size_t n)
{
	int64_t s = ms > 0 ? ms / 1000 : 0;

	if (s < 60)
		snprintf(buf, n, "%" PRId64 "s", s);
	else if (s < 3600)
		snprintf(buf, n, "%" PRId64 "m%02" PRId64 "s", s / 60, s % 60);
	else if (s < 86400)
		snprintf(buf, n, "%" PRId64 "h%02" PRId64 "m", s / 3600,
		         s % 3600 / 60);
	else
		snprintf(buf, n, "%" PRId64 "d%02" PRId64 "h", s / 86400,
		         s % 86400 / 3600);
}
