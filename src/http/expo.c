/* expo.c - writing the Prometheus text exposition format: escaping of help
 * texts and label values, float formatting, histogram samples.
 * Any thread; a buffer has one writer. */
#include "http/expo.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lr_expo_free(lr_expo *e)
{
	free(e->buf);
	*e = (lr_expo){ 0 };
}

static void put(lr_expo *e, const char *s, size_t n)
{
	if (e->oom)
		return;
	if (e->len + n + 1 > e->cap) {
		size_t cap = e->cap ? e->cap : 4096;
		while (cap < e->len + n + 1)
			cap *= 2;
		char *nb = realloc(e->buf, cap);
		if (nb == NULL) {
			e->oom = true;
			return;
		}
		e->buf = nb;
		e->cap = cap;
	}
	memcpy(e->buf + e->len, s, n);
	e->len += n;
	e->buf[e->len] = '\0';
}

static void puts_(lr_expo *e, const char *s)
{
	put(e, s, strlen(s));
}

/* Copy s, writing a backslash escape for each byte in `special`
 * ('\n' as "\n"). */
static void put_escaped(lr_expo *e, const char *s, const char *special)
{
	const char *run = s;

	for (; *s != '\0'; s++) {
		if (strchr(special, *s) == NULL)
			continue;
		put(e, run, (size_t)(s - run));
		put(e, *s == '\n' ? "\\n" : *s == '\\' ? "\\\\" : "\\\"", 2);
		run = s + 1;
	}
	put(e, run, (size_t)(s - run));
}

void lr_expo_float(double v, char buf[32])
{
	if (isnan(v)) {
		snprintf(buf, 32, "NaN");
		return;
	}
	if (isinf(v)) {
		snprintf(buf, 32, v > 0 ? "+Inf" : "-Inf");
		return;
	}
	/* The shortest of %.15g .. %.17g that reads back exactly. */
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, 32, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

void lr_expo_family(lr_expo *e, const char *name, const char *type,
                    const char *help)
{
	puts_(e, "# HELP ");
	puts_(e, name);
	put(e, " ", 1);
	put_escaped(e, help, "\\\n");
	puts_(e, "\n# TYPE ");
	puts_(e, name);
	put(e, " ", 1);
	puts_(e, type);
	put(e, "\n", 1);
}

/* name{a="x",b="y"} with one optional extra label (the histogram's le). */
static void put_series(lr_expo *e, const char *name, const char *suffix,
                       const lr_label *labels, const char *le)
{
	bool any = false;

	puts_(e, name);
	puts_(e, suffix);
	for (const lr_label *l = labels; l != NULL && l->name != NULL; l++) {
		put(e, any ? "," : "{", 1);
		puts_(e, l->name);
		put(e, "=\"", 2);
		put_escaped(e, l->value != NULL ? l->value : "", "\\\"\n");
		put(e, "\"", 1);
		any = true;
	}
	if (le != NULL) {
		puts_(e, any ? ",le=\"" : "{le=\"");
		puts_(e, le);
		put(e, "\"", 1);
		any = true;
	}
	if (any)
		put(e, "}", 1);
	put(e, " ", 1);
}

void lr_expo_sample(lr_expo *e, const char *name, const lr_label *labels,
                    double value)
{
	char v[32];

	lr_expo_float(value, v);
	put_series(e, name, "", labels, NULL);
	puts_(e, v);
	put(e, "\n", 1);
}

static void put_count_line(lr_expo *e, const char *name, const char *suffix,
                           const lr_label *labels, const char *le, uint64_t value)
{
	char v[24];

	snprintf(v, sizeof(v), "%" PRIu64 "\n", value);
	put_series(e, name, suffix, labels, le);
	puts_(e, v);
}

void lr_expo_count(lr_expo *e, const char *name, const lr_label *labels,
                   uint64_t value)
{
	put_count_line(e, name, "", labels, NULL, value);
}

void lr_expo_histogram(lr_expo *e, const char *name, const lr_label *labels,
                       const double *le, const uint64_t *cum, size_t n,
                       uint64_t count, double sum)
{
	char bound[32], v[32];

	for (size_t i = 0; i < n; i++) {
		lr_expo_float(le[i], bound);
		put_count_line(e, name, "_bucket", labels, bound, cum[i]);
	}
	put_count_line(e, name, "_bucket", labels, "+Inf", count);
	lr_expo_float(sum, v);
	put_series(e, name, "_sum", labels, NULL);
	puts_(e, v);
	put(e, "\n", 1);
	put_count_line(e, name, "_count", labels, NULL, count);
}
