/* fail.c - how the command ends on an error: the exit status of a library
 * error code, and the one-line messages on stderr. Main thread. */
#include <stdarg.h>
#include <stdio.h>

#include "cli.h"

int cli_exit_code(int code)
{
	switch (code) {
	case LR_OK:
		return EXIT_OK;
	case LR_EINVAL:
		return EXIT_USAGE;
	case LR_EEXIST:
		return EXIT_EXISTS;
	case LR_ENOTFOUND:
		return EXIT_NOTFOUND;
	default:
		return EXIT_RUNTIME;
	}
}

int cli_fail(const lr_err *err)
{
	fprintf(stderr, "leaserun: %s\n",
	        err->msg[0] != '\0' ? err->msg : lr_strerror(err->code));
	return cli_exit_code(err->code);
}

int cli_usage_error(const char *fmt, ...)
{
	va_list ap;

	fputs("leaserun: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputs("\nRun 'leaserun --help' for usage.\n", stderr);
	return EXIT_USAGE;
}
