/* spec_reader.c - task specs read one at a time from a stream, in chunks,
 * so that memory stays bounded by one spec. The caller's thread. */
#include "client/spec_reader.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "records/spec.h"

#define CHUNK_SIZE (64 * 1024)

int lr_spec_reader_init(lr_spec_reader *r, int fd, const char *name,
                        lr_spec_format format)
{
	memset(r, 0, sizeof(*r));
	r->fd = fd;
	r->name = name;
	r->format = format;
	r->chunk = malloc(CHUNK_SIZE);
	if (r->chunk == NULL) {
		errno = ENOMEM;
		return -1;
	}
	return 0;
}

void lr_spec_reader_free(lr_spec_reader *r)
{
	free(r->chunk);
	free(r->text);
	r->chunk = r->text = NULL;
}

/* Make sure some unread bytes are in the chunk: 1, or 0 at the end of the
 * stream, or -1 when reading failed (errno set). */
static int fill(lr_spec_reader *r)
{
	ssize_t n;

	if (r->chunk_at < r->chunk_len)
		return 1;
	do
		n = read(r->fd, r->chunk, CHUNK_SIZE);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -1;
	r->chunk_at = 0;
	r->chunk_len = (size_t)n;
	return n > 0 ? 1 : 0;
}

/* Append n bytes of the current spec. Only the first LR_SPEC_MAX_BYTES are
 * kept: a longer spec is rejected by its size alone. */
static int append(lr_spec_reader *r, const char *p, size_t n)
{
	size_t was = r->size;

	r->size += n;
	if (n == 0 || r->size > LR_SPEC_MAX_BYTES)
		return 0;
	if (r->size > r->cap) {
		size_t cap = r->cap > 0 ? r->cap : 4096;
		while (cap < r->size)
			cap *= 2;
		if (cap > LR_SPEC_MAX_BYTES)
			cap = LR_SPEC_MAX_BYTES;
		char *bigger = realloc(r->text, cap);
		if (bigger == NULL) {
			errno = ENOMEM;
			return -1;
		}
		r->text = bigger;
		r->cap = cap;
	}
	memcpy(r->text + was, p, n);
	r->len = r->size;
	return 0;
}

/* Read the current spec up to its newline (LR_SPEC_LINES) or to the end of
 * the stream: 1 when a newline ended it, 0 at the end of the stream, -1
 * on a failed read (errno set; reported as an item) or -2 out of memory. */
static int read_one(lr_spec_reader *r)
{
	for (;;) {
		int rc = fill(r);
		if (rc <= 0)
			return rc;
		const char *start = r->chunk + r->chunk_at;
		size_t avail = r->chunk_len - r->chunk_at;
		const char *nl = r->format == LR_SPEC_LINES
		                     ? memchr(start, '\n', avail) : NULL;
		size_t take = nl != NULL ? (size_t)(nl - start) : avail;
		if (append(r, start, take) != 0)
			return -2;
		r->chunk_at += take + (nl != NULL ? 1 : 0);
		if (nl != NULL)
			return 1;
	}
}

static bool blank(const lr_spec_reader *r)
{
	for (size_t i = 0; i < r->len; i++) /* strchr would match a NUL */
		if (r->text[i] == '\0' || strchr(" \t\r\n", r->text[i]) == NULL)
			return false;
	return r->size == r->len;
}

static void set_origin(lr_spec_reader *r)
{
	if (r->format == LR_SPEC_LINES)
		snprintf(r->origin, sizeof(r->origin), "%s:%" PRIu64, r->name,
		         r->line);
	else
		snprintf(r->origin, sizeof(r->origin), "%s", r->name);
}

int lr_spec_reader_next(lr_spec_reader *r, lr_submit_item *item)
{
	memset(item, 0, sizeof(*item));
	for (;;) {
		if (r->ended)
			return 0;
		r->len = r->size = 0;
		r->line = ++r->lines;
		errno = 0;
		int rc = read_one(r);
		if (rc == -2)
			return -1;
		if (rc != 1)
			r->ended = true;
		set_origin(r);
		item->origin = r->origin;
		if (rc == -1) {
			snprintf(r->error, sizeof(r->error), "cannot read %s: %s",
			         r->name, strerror(errno));
			item->error = r->error;
			return 1;
		}
		if (r->format == LR_SPEC_LINES && blank(r))
			continue;
		if (r->size > LR_SPEC_MAX_BYTES) {
			snprintf(r->error, sizeof(r->error),
			         "invalid spec: spec is %zu bytes, over the 1 MiB "
			         "limit", r->size);
			item->error = r->error;
			return 1;
		}
		item->text = r->text != NULL ? r->text : "";
		item->len = r->len;
		return 1;
	}
}
