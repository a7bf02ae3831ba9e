/* error.c - filling and prefixing lr_err messages.
 * Pure functions on caller-owned structs; any thread. */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

int lr_err_set(lr_err *err, int code, const char *fmt, ...)
{
	if (err == NULL)
		return code;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	err->code = code;
	return code;
}

int lr_err_wrap(lr_err *err, int code, const char *fmt, ...)
{
	if (err == NULL)
		return code;
	char prefix[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(prefix, sizeof(prefix), fmt, ap);
	va_end(ap);
	/* Shift the old message right to make room; the tail may be cut. */
	size_t plen = strlen(prefix) + 2;
	size_t cap = sizeof(err->msg);
	if (plen >= cap)
		plen = cap - 1;
	size_t keep = strnlen(err->msg, cap - 1);
	if (keep > cap - 1 - plen)
		keep = cap - 1 - plen;
	memmove(err->msg + plen, err->msg, keep);
	err->msg[plen + keep] = '\0';
	memcpy(err->msg, prefix, plen - 2);
	err->msg[plen - 2] = ':';
	err->msg[plen - 1] = ' ';
	err->code = code;
	return code;
}

int lr_err_set_code(lr_err *err, int code)
{
	if (err != NULL)
		err->code = code;
	return code;
}

const char *lr_strerror(int code)
{
	switch (code) {
	case LR_OK: return "ok";
	case LR_EINVAL: return "invalid input";
	case LR_EEXIST: return "already exists with a different value";
	case LR_ENOTFOUND: return "not found";
	case LR_EUNAVAILABLE: return "etcd unavailable";
	case LR_ETIMEDOUT: return "deadline exceeded";
	case LR_EAMBIGUOUS: return "outcome unknown";
	case LR_EPERM: return "permission denied";
	case LR_EAUTH: return "authentication failed";
	case LR_ETLS: return "TLS failure";
	case LR_EETCD: return "etcd error";
	case LR_ECONFLICT: return "compare failed";
	case LR_ELEASE: return "lease lost";
	case LR_ECANCELLED: return "cancelled";
	case LR_ETOOLARGE: return "too large";
	case LR_EINUSE: return "name already in use";
	case LR_ESYS: return "system error";
	case LR_ENOMEM: return "out of memory";
	case LR_ECLOSED: return "closed";
	case LR_EINTERNAL: return "internal error";
	case LR_EBUSY: return "locks held by others";
	}
	return "unknown error";
}
