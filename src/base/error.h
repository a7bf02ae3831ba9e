/* error.h - the library's one error type: a code and a message with context.
 * Internal helpers to fill it; the type itself is public (leaserun.h). */
#ifndef LR_ERROR_H
#define LR_ERROR_H

#include "leaserun.h"

/* Fill err (may be NULL) with code and a printf-style message; returns code,
 * so that a failing function can end with `return lr_err_set(err, ...)`. */
int lr_err_set(lr_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepend "<context>: " to the message already in err; returns err->code. */
int lr_err_wrap(lr_err *err, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void lr_err_clear(lr_err *err);

#endif
