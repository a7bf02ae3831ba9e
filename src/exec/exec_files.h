/* exec_files.h - a shell step's environment and private state directory,
 * shared by exec.c (the process) and exec_files.c (its files). */
#ifndef LR_EXEC_FILES_H
#define LR_EXEC_FILES_H

#include <limits.h>

#include "exec/exec.h"

/* The directory private to one execution and the two state files in it. */
struct lr_state_dir {
	int made;
	int fd;             /* the directory, locked (flock) while in use: by
	                       its guard once started */
	char dir[PATH_MAX];
	char in[PATH_MAX];
	char out[PATH_MAX];
};

/* Make the directory (0700) under o->work_dir_base, named
 * leaserun-<task>.<fence>.<attempt>.XXXXXX from o->task_id, o->fence and
 * o->attempt plus a random suffix, holding the state in (o->state_in) and
 * an empty state out. */
int lr_state_dir_make(const lr_exec_opts *o, struct lr_state_dir *sd, lr_err *err);
/* Remove it and everything the step left in it. */
void lr_state_dir_remove(struct lr_state_dir *sd);
/* Remove the state directories under base whose guard is gone: left by a
 * runner killed with its guards, or by a guard killed. Only what
 * lr_state_dir_make makes is touched: a directory, not a symbolic link, by
 * exactly that name, owned by this user, mode 0700. One in use is locked by
 * its guard and left alone, and so is one less than a minute old (it may
 * not be locked yet). *removed (may be NULL) gets the count. */
int lr_state_dir_sweep(const char *base, size_t *removed, lr_err *err);
/* After exit 0: the new state from the file at path into res->state_out,
 * or res marked LR_EXEC_BAD_STATE with the reason. */
void lr_state_out_read(const char *path, lr_exec_result *res);

#endif
