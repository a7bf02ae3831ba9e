/* expo.h - the Prometheus text exposition format (version 0.0.4): metric
 * families with HELP and TYPE, samples with escaped labels, histograms.
 * Pure functions on a growing buffer; any thread, one writer per buffer. */
#ifndef LR_HTTP_EXPO_H
#define LR_HTTP_EXPO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LR_EXPO_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

typedef struct lr_expo {
	char *buf;   /* NUL-terminated text so far (NULL before the first write) */
	size_t len, cap;
	bool oom;    /* an allocation failed: the text is incomplete */
} lr_expo;

/* Labels of a sample: { name, value } pairs ending with { NULL }; NULL for
 * none. Names must be valid label names; values may hold anything (they
 * are escaped). */
typedef struct lr_label {
	const char *name, *value;
} lr_label;

/* Zero-initialised memory is an empty buffer. */
void lr_expo_free(lr_expo *e);

/* "# HELP name help" and "# TYPE name type" (type: counter, gauge,
 * histogram, untyped). Each family once, before its samples. */
void lr_expo_family(lr_expo *e, const char *name, const char *type,
                    const char *help);

/* One sample "name{labels} value". */
void lr_expo_sample(lr_expo *e, const char *name, const lr_label *labels,
                    double value);
/* The same for a count, written exactly however large. */
void lr_expo_count(lr_expo *e, const char *name, const lr_label *labels,
                   uint64_t value);

/* The samples of one histogram: name_bucket for each upper bound le[i]
 * with its cumulative count cum[i] (non-decreasing, le increasing), then
 * le="+Inf" with `count`, name_sum and name_count. */
void lr_expo_histogram(lr_expo *e, const char *name, const lr_label *labels,
                       const double *le, const uint64_t *cum, size_t n,
                       uint64_t count, double sum);

/* A float as the format writes it: "+Inf", "-Inf", "NaN", or the shortest
 * decimal that reads back as the same double. buf holds 32 bytes. */
void lr_expo_float(double v, char buf[32]);

#endif
