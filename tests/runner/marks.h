/* marks.h - the marker lines that the runner and chaos tests' shell steps
 * append to <fleet dir>/marks, and reading them back: which runner ran
 * which step of which task, under which fence, when it was alive (start,
 * heartbeats, end, each with the wall clock in ns), and whether two
 * executions of one step overlapped in time. */
#ifndef LR_TEST_MARKS_H
#define LR_TEST_MARKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Fields: task, step, attempt, runner, fence, the step shell's pid (also
 * its process group), and the time (ns since the epoch, from $MARKS/now,
 * which fleet_init writes; one host, one clock). Appends of one line are atomic, so the file's order is the order
 * the lines were written. */
#define MARK_FIELDS "$LEASERUN_TASK_ID $LEASERUN_STEP $LEASERUN_ATTEMPT " \
                    "$LEASERUN_RUNNER $LEASERUN_FENCE $$ $($MARKS/now) >> $MARKS/marks"
#define MARK_START "echo start " MARK_FIELDS
#define MARK_HB "echo hb " MARK_FIELDS
#define MARK_END "echo end " MARK_FIELDS
/* A step body that is alive for about ms, with a heartbeat every 50 ms. */
#define MARK_BEATS(loops) "i=0; while [ $i -lt " loops " ]; do " MARK_HB "; sleep 0.05; " \
                          "i=$((i+1)); done"
/* Shell that sets n to first in the step's first execution and to again in
 * any later one (a takeover's): a test whose step must outlive a kill or a
 * freeze need not wait for the whole length again once it has moved. */
#define MARK_FIRST_OR(first, again) "n=" again "; o=$MARKS/once-$LEASERUN_TASK_ID-" \
                                    "$LEASERUN_STEP; [ -e $o ] || { n=" first "; : > $o; }"
/* Heartbeats first times in the step's first execution, again times after. */
#define MARK_BEATS_FIRST(first, again) MARK_FIRST_OR(first, again) "; " MARK_BEATS("$n")
/* Sleeps first seconds in the step's first execution, again after. */
#define MARK_SLEEP_FIRST(first, again) MARK_FIRST_OR(first, again) "; sleep $n"

enum mark_kind { MARK_KIND_START, MARK_KIND_HB, MARK_KIND_END };

typedef struct mark {
	enum mark_kind kind;
	bool end;            /* kind == MARK_KIND_END */
	char task[64];
	int64_t step;
	int64_t attempt;
	char runner[64];
	int64_t fence;
	long pid;
	int64_t ns;          /* wall clock when written */
} mark;

/* Every well-formed line of <dir>/marks, in file order. *out is freed with
 * free(); no file means no marks. Returns -1 only when out of memory. */
int marks_read(const char *dir, mark **out, size_t *n);

/* One execution of a step: its marks from first to last. */
typedef struct marks_exec {
	char task[64];
	int64_t step;
	long pid;
	size_t first, last;  /* indexes into the marks, in file order */
	int64_t first_ns, last_ns;
} marks_exec;

/* Overlaps between executions of the same step of the same task: a mark
 * of one written after the first mark of the next. Returns how many; why
 * (size bytes) describes the first. *closest_gap_ns (may be NULL) gets the
 * smallest gap seen between an execution's last mark and the next one's
 * first (negative: an overlap), INT64_MAX when no step ran twice. */
size_t marks_overlaps(const mark *m, size_t n, int64_t *closest_gap_ns, char *why,
                      size_t size);

#endif
