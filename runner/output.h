/* output.h - how `leaserun` shows tasks and runners: aligned tables for
 * people (with a progress bar on a terminal) and JSON for programs. Main
 * thread. */
#ifndef LR_CLI_OUTPUT_H
#define LR_CLI_OUTPUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "leaserun.h"

/* How a table is laid out: on a terminal, with a progress bar and errors
 * cut to the terminal's width; otherwise every column in full. */
typedef struct out_style {
	int tty;
	int width; /* columns of the terminal; 0 when not one */
} out_style;

/* The style for stdout. */
out_style out_style_stdout(void);

/* The tasks, one a row; on a terminal with a progress bar and, under
 * several rows, a line of totals by state. limited: a limit may have left
 * tasks out (the totals say so). */
void out_status_table(FILE *f, const lr_task_status *v, size_t n, bool limited,
                      const out_style *st, int64_t now_ms);
/* How printing JSON failed: the document could not be built (out of
 * memory), or the stream refused it (ferror(f), errno says why). */
enum { OUT_ENOMEM = -1, OUT_EWRITE = -2 };

/* The exit status of a command that printed a JSON document to stdout
 * (out: what its out_*_json returned, errno still that of the failed
 * write), with the reason on stderr when printing failed: "out of memory"
 * naming what, or the write's (cli_output_failed). */
int out_json_exit(int out, const char *what);

/* single: one object (status ID), otherwise an array. 0, OUT_ENOMEM or
 * OUT_EWRITE. */
int out_status_json(FILE *f, const lr_task_status *v, size_t n, int single);
/* What a task waits for and its error, each in full on a line of its own
 * (nothing when it has neither): a terminal's table cuts them. */
void out_status_reason(FILE *f, const lr_task_status *s);
/* A retried task's earlier outcomes, one a line (nothing when none). */
void out_status_history(FILE *f, const lr_task_status *s);

void out_runners_table(FILE *f, const lr_runner_info *v, size_t n,
                       const out_style *st, int64_t now_ms);
/* 0, OUT_ENOMEM or OUT_EWRITE. */
int out_runners_json(FILE *f, const lr_runner_info *v, size_t n);

/* Text for a terminal on one line, whatever etcd held: blanks for line
 * breaks and tabs, '?' for the other C0 and C1 controls, DEL and
 * bidirectional controls. New string; NULL when out of memory. */
char *out_one_line(const char *s);

/* The document of lr_locks_read: what is held, then what is asked for. */
void out_locks_table(FILE *f, const void *doc, const out_style *st, int64_t now_ms);
/* The same document as JSON, keys sorted. 0, OUT_ENOMEM or OUT_EWRITE. */
int out_locks_json(FILE *f, const void *doc);

#endif
