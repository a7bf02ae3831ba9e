/* log.c - the default log sink (lr_log_stderr): one line per record on
 * stderr, text on a terminal, a JSON object otherwise (format_text and
 * format_json show each). Any thread: a record is written whole under a
 * lock, in one write(2) unless a full pipe cuts it short. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "base/clock.h"
#include "base/utf8.h"
#include "leaserun.h"

/* The one process-wide setting of the library: stderr itself is one per
 * process, so its format and level are too (set by the command line from
 * its flags). Atomics, so that a change never races a record. */
static atomic_int log_format;                 /* 0 auto, 1 text, 2 JSON */
static atomic_int log_min_level = LR_LOG_INFO;

/* Serialises the writes of records: one write(2) per line normally, but a
 * short write (a full pipe interrupted by a signal) is finished before
 * another thread's line starts. */
static pthread_mutex_t log_write_lock = PTHREAD_MUTEX_INITIALIZER;

#define FORMAT_AUTO 0
#define FORMAT_TEXT 1
#define FORMAT_JSON 2

void lr_log_stderr_config(int format, lr_log_level min_level)
{
	if (format < FORMAT_AUTO || format > FORMAT_JSON)
		format = FORMAT_AUTO;
	atomic_store(&log_format, format);
	atomic_store(&log_min_level, (int)min_level);
}

/* ---- a growable line ---- */

struct line {
	char *p;
	size_t len, cap;
	int oom;
};

static void line_add(struct line *l, const char *s, size_t n)
{
	if (l->oom)
		return;
	if (l->len + n + 1 > l->cap) {
		size_t cap = (l->len + n + 1) * 2;
		char *p = realloc(l->p, cap);
		if (p == NULL) {
			l->oom = 1;
			return;
		}
		l->p = p;
		l->cap = cap;
	}
	memcpy(l->p + l->len, s, n);
	l->len += n;
	l->p[l->len] = '\0';
}

static void line_str(struct line *l, const char *s)
{
	line_add(l, s, strlen(s));
}

static void line_addf(struct line *l, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void line_addf(struct line *l, const char *fmt, ...)
{
	char buf[256];
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n > 0)
		line_add(l, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* ---- formats ---- */

static const char *level_name(lr_log_level level, int upper)
{
	static const char *lower_names[] = { "debug", "info", "warn", "error" };
	static const char *upper_names[] = { "DEBUG", "INFO", "WARN", "ERROR" };
	int i = (int)level;

	if (i < 0 || i > 3)
		i = i < 0 ? 0 : 3;
	return upper ? upper_names[i] : lower_names[i];
}

static int json_put(json_t *o, const char *key, json_t *v)
{
	return v == NULL ? -1 : json_object_set_new(o, key, v);
}

/* {"time","level","runner","task","step","step_index","msg"}, absent
 * fields left out, and '\n'. */
static void format_json(struct line *l, const lr_log_record *r,
                        const char *time)
{
	json_t *o = json_object();
	int rc = o != NULL ? 0 : -1;

	if (rc == 0)
		rc = json_put(o, "time", json_string(time));
	if (rc == 0)
		rc = json_put(o, "level", json_string(level_name(r->level, 0)));
	if (rc == 0 && r->runner != NULL)
		rc = json_put(o, "runner", lr_json_string_lossy(r->runner));
	if (rc == 0 && r->task != NULL)
		rc = json_put(o, "task", lr_json_string_lossy(r->task));
	if (rc == 0 && r->step != NULL)
		rc = json_put(o, "step", lr_json_string_lossy(r->step));
	if (rc == 0 && r->step_index >= 0)
		rc = json_put(o, "step_index", json_integer(r->step_index));
	if (rc == 0)
		rc = json_put(o, "msg",
		              lr_json_string_lossy(r->msg != NULL ? r->msg : ""));
	/* Into our own buffer: no reliance on jansson's allocator. */
	size_t n = rc == 0 ? json_dumpb(o, NULL, 0, JSON_COMPACT) : 0;
	char *buf = n > 0 ? malloc(n) : NULL;
	if (buf != NULL) {
		json_dumpb(o, buf, n, JSON_COMPACT);
		line_add(l, buf, n);
		line_str(l, "\n");
	} else {
		l->oom = 1;
	}
	free(buf);
	json_decref(o);
}

/* Control characters from step output must not drive the terminal:
 * newlines as \n, others as \xNN; tabs pass. */
static void add_escaped(struct line *l, const char *s)
{
	for (const char *p = s; *p != '\0'; p++) {
		unsigned char c = (unsigned char)*p;
		if (c == '\n')
			line_str(l, "\\n");
		else if ((c < 0x20 && c != '\t') || c == 0x7F)
			line_addf(l, "\\x%02x", c);
		else
			line_add(l, p, 1);
	}
}

static void add_field(struct line *l, const char *key, const char *value)
{
	if (value == NULL)
		return;
	line_str(l, key);
	add_escaped(l, value);
	line_str(l, " ");
}

static const char *level_colour(lr_log_level level)
{
	switch (level) {
	case LR_LOG_DEBUG: return "\x1b[2m";
	case LR_LOG_INFO: return "\x1b[32m";
	case LR_LOG_WARN: return "\x1b[33m";
	default: return "\x1b[1;31m";
	}
}

/* 2026-11-21T05:29:17.123Z INFO  runner=host-12 task=report-7 step=1:analyse msg */
static void format_text(struct line *l, const lr_log_record *r,
                        const char *time, int colour)
{
	const char *name = level_name(r->level, 1);

	line_str(l, time);
	line_str(l, " ");
	if (colour)
		line_str(l, level_colour(r->level));
	line_str(l, name);
	if (colour)
		line_str(l, "\x1b[0m");
	line_addf(l, "%*s", (int)(6 - strlen(name)), "");
	add_field(l, "runner=", r->runner);
	add_field(l, "task=", r->task);
	if (r->step_index >= 0) {
		line_addf(l, "step=%lld", (long long)r->step_index);
		if (r->step != NULL)
			line_str(l, ":");
		add_field(l, "", r->step != NULL ? r->step : "");
	} else {
		add_field(l, "step=", r->step);
	}
	add_escaped(l, r->msg != NULL ? r->msg : "");
	line_str(l, "\n");
}

static void write_line(const char *p, size_t n)
{
	pthread_mutex_lock(&log_write_lock);
	while (n > 0) {
		ssize_t w = write(STDERR_FILENO, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break; /* nowhere left to report it */
		p += w;
		n -= (size_t)w;
	}
	pthread_mutex_unlock(&log_write_lock);
}

void lr_log_stderr(void *user, const lr_log_record *rec)
{
	struct line l = { 0 };
	char time[LR_TIME_BUF];
	int saved_errno = errno; /* a log call must not disturb its caller */
	int format = atomic_load(&log_format);

	(void)user;
	if (rec == NULL || (int)rec->level < atomic_load(&log_min_level))
		return;
	int tty = isatty(STDERR_FILENO);
	lr_rfc3339_now(time);
	if (format == FORMAT_TEXT || (format == FORMAT_AUTO && tty))
		format_text(&l, rec, time, tty && getenv("NO_COLOR") == NULL);
	else
		format_json(&l, rec, time);
	if (l.oom) {
		static const char lost[] = "leaserun: log record lost: out of memory\n";
		write_line(lost, sizeof(lost) - 1);
	}
	if (!l.oom && l.p != NULL)
		write_line(l.p, l.len);
	free(l.p);
	errno = saved_errno;
}
