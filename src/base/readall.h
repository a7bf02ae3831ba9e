/* readall.h - a whole stream read at once: the few inputs taken in one
 * piece (TLS certificates and keys, a task spec, a fuzz input). */
#ifndef LR_READALL_H
#define LR_READALL_H

#include <stddef.h>
#include <stdio.h>

/* Everything left in f, up to max + 1 bytes: a longer input stops there,
 * so that the caller refuses it by its size without reading it all (or
 * running out of memory on /dev/zero). *text is malloc'd (the caller
 * frees it) and holds *len bytes plus a NUL. -1 with errno set when
 * reading fails or memory runs out; then *text is untouched. */
int lr_read_all(FILE *f, size_t max, char **text, size_t *len);

#endif
