/* exec_files.h - a shell step's environment and private state directory,
 * shared by exec.c (the process) and exec_files.c (its files). */
#ifndef LR_EXEC_FILES_H
#define LR_EXEC_FILES_H

#include <limits.h>

#include "exec/exec.h"

/* The directory private to one execution and the two state files in it. */
struct lr_state_dir {
	int made;
	char dir[PATH_MAX];
	char in[PATH_MAX];
	char out[PATH_MAX];
};

/* Make the directory (0700) under o->work_dir_base, named from
 * o->work_dir_name plus a random suffix, holding the state in (o->state_in)
 * and an empty state out. */
int lr_state_dir_make(const lr_exec_opts *o, struct lr_state_dir *sd, lr_err *err);
/* Remove it and everything the step left in it. */
void lr_state_dir_remove(struct lr_state_dir *sd);
/* After exit 0: the new state from the file at path into res->state_out,
 * or res marked LR_EXEC_BAD_STATE with the reason. */
void lr_state_out_read(const char *path, lr_exec_result *res);

#endif
