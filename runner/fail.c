/* fail.c - how the command ends on an error: the exit status of a library
 * error code, and the one-line messages on stderr. Main thread. */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/utf8.h"
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
	case LR_EBUSY:
		return EXIT_BUSY;
	default:
		return EXIT_RUNTIME;
	}
}

/* The library names its options as lr_client_opts fields; a person at the
 * command line knows them as flags: "lr_client_opts.tls_server_name" is
 * printed as "--tls-server-name". */
static void print_with_flags(FILE *f, const char *msg)
{
	static const char field[] = "lr_client_opts.";
	const char *p = msg;
	for (const char *at; (at = strstr(p, field)) != NULL;) {
		fwrite(p, 1, (size_t)(at - p), f);
		fputs("--", f);
		for (p = at + sizeof(field) - 1; *p == '_' || (*p >= 'a' && *p <= 'z'); p++)
			fputc(*p == '_' ? '-' : *p, f);
	}
	fputs(p, f);
}

int cli_fail(const lr_err *err)
{
	fputs("leaserun: ", stderr);
	print_with_flags(stderr, err->msg[0] != '\0' ? err->msg : lr_strerror(err->code));
	fputc('\n', stderr);
	return cli_exit_code(err->code);
}

int cli_output_failed(int errnum)
{
	if (errnum != EPIPE)
		fprintf(stderr, "leaserun: writing the output: %s\n",
		        strerror(errnum != 0 ? errnum : EIO));
	return EXIT_RUNTIME;
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

const char *cli_quote(const char *s, char buf[CLI_QUOTE_SIZE])
{
	size_t len = strlen(s);
	/* Room is left for "...": the characters always fit the rest. */
	if (lr_utf8_escape(s, len, CLI_QUOTE_MAX, buf, CLI_QUOTE_SIZE - 3) < len)
		strcat(buf, "...");
	return buf;
}

int cli_utf8_valid(const char *s)
{
	size_t len = strlen(s);

	for (size_t i = 0, k; i < len; i += k) {
		k = lr_utf8_char_len((const unsigned char *)s + i, len - i);
		if (k == 0)
			return 0;
	}
	return 1;
}
