/* error.h - the library's one error type: a code and a message with context.
 * Internal helpers to fill it; the type itself is public (leaserun.h). */
#ifndef LR_ERROR_H
#define LR_ERROR_H

#include "leaserun.h"

/* Fill err (may be NULL) with code and a printf-style message; returns code,
 * so that a failing function can end with `return lr_err_set(err, ...)`. */
int lr_err_set(lr_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Prepend "<context>: " to the message that a failed call left in err, and
 * return that call's code: `return lr_err_wrap(err, rc, "claim %s", id)`.
 * err may be NULL: then only the code travels, so that callers of a public
 * function that passed no lr_err still get the real code. */
int lr_err_wrap(lr_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Give the error in err (may be NULL) another code, keeping its message;
 * returns code. */
int lr_err_set_code(lr_err *err, int code);

/* True, with LR_EINVAL and "<function>: <arg> must not be NULL" in err (may
 * be NULL), when p, a pointer argument the public function in which it is
 * used requires, is NULL; false otherwise. Arguments are checked in order,
 * so the message names the first one missing:
 * `if (LR_NULL_ARG(err, c) || LR_NULL_ARG(err, out)) return LR_EINVAL;` */
#define LR_NULL_ARG(err, p)                                                  \
	((p) == NULL &&                                                      \
	 lr_err_set((err), LR_EINVAL, "%s: %s must not be NULL", __func__, #p) != 0)

#endif
