/* shared.h - what writers of shared values (P"shared/<name>") share: the
 * key of a name and the stored form of a value. Implemented in shared.c. */
#ifndef LR_SHARED_H
#define LR_SHARED_H

#include <jansson.h>

#include "client/client.h"

/* key = P"shared/<name>", or LR_EINVAL naming `name` when it is not a
 * valid name ([A-Za-z0-9._:-]{1,200}). */
int lr_shared_key(lr_client *c, const char *name, char key[LR_KEY_SIZE],
                  lr_err *err);

/* *text = v as stored (compact, sorted keys, any JSON value; malloc'd).
 * LR_ETOOLARGE over 1 MiB, LR_EINVAL for NULL. */
int lr_shared_encode(const json_t *v, char **text, lr_err *err);

#endif
