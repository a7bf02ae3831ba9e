/* spec_reader.h - task specs read one at a time from a stream: the whole
 * stream as one spec, or JSON Lines (one spec a line), holding at most one
 * spec of up to 1 MiB whatever the stream's length. One thread per reader. */
#ifndef LR_CLIENT_SPEC_READER_H
#define LR_CLIENT_SPEC_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "leaserun.h"

typedef enum lr_spec_format {
	LR_SPEC_WHOLE = 0, /* the stream is one spec */
	LR_SPEC_LINES = 1, /* JSON Lines: one spec a line */
} lr_spec_format;

typedef struct lr_spec_reader {
	int fd;            /* borrowed */
	const char *name;  /* for origins and messages; borrowed */
	lr_spec_format format;
	char *chunk;       /* what was read from f and not yet taken */
	size_t chunk_at, chunk_len;
	char *text;        /* the current spec (at most LR_SPEC_MAX_BYTES) */
	size_t len, cap;
	size_t size;       /* its whole size: over the limit, more than len */
	uint64_t line;     /* the current spec's line (LR_SPEC_LINES), 1-based */
	uint64_t lines;    /* lines begun so far */
	bool ended;        /* nothing more will come */
	char origin[320];  /* "<name>" or "<name>:<line>" of the current spec */
	char error[400];   /* why the current spec cannot be submitted */
} lr_spec_reader;

/* A reader of fd named name ("tasks.jsonl", "<stdin>"). Both are borrowed
 * and must outlive the reader. It reads with read(2), taking what is there:
 * a spec is handed on as soon as its line has arrived, also from a pipe
 * fed slowly. Returns 0, or -1 (errno ENOMEM). */
int lr_spec_reader_init(lr_spec_reader *r, int fd, const char *name,
                        lr_spec_format format);
void lr_spec_reader_free(lr_spec_reader *r);

/* The next spec as an item for lr_submit_many: returns 1 with *item filled
 * (its pointers borrowed from r until the next call), 0 at the end of the
 * stream, -1 (errno ENOMEM) when memory runs out. Items that cannot be
 * submitted come back with an error instead of text: a spec over the 1 MiB
 * limit (read past, never kept whole; the error gives its size), and a
 * failed read ("cannot read <name>: <reason>"), after which the stream
 * ends. Lines holding only whitespace are skipped (they still count in
 * line numbers); LR_SPEC_WHOLE gives exactly one item, empty or not. */
int lr_spec_reader_next(lr_spec_reader *r, lr_submit_item *item);

#endif
