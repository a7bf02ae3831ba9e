/* marks.h - the marker lines that the chaos tests' shell steps append to
 * <fleet dir>/marks, and reading them back: which runner ran which step of
 * which task, under which fence, and whether the step ran to its end. */
#ifndef LR_TEST_MARKS_H
#define LR_TEST_MARKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Shell for a step's run: "start" when it begins, "end" when it finishes.
 * Fields: task, step, attempt, runner, fence, and the step shell's pid,
 * which is also its process group. */
#define MARK_FIELDS "$LEASERUN_TASK_ID $LEASERUN_STEP $LEASERUN_ATTEMPT " \
                    "$LEASERUN_RUNNER $LEASERUN_FENCE $$ >> $MARKS/marks"
#define MARK_START "echo start " MARK_FIELDS
#define MARK_END "echo end " MARK_FIELDS

typedef struct mark {
	bool end;            /* an "end" line; otherwise "start" */
	char task[64];
	int64_t step;
	int64_t attempt;
	char runner[64];
	int64_t fence;
	long pid;
} mark;

/* Every well-formed line of <dir>/marks, in file order. *out is freed with
 * free(); no file means no marks. Returns -1 only when out of memory. */
int marks_read(const char *dir, mark **out, size_t *n);

#endif
