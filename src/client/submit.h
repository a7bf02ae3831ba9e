/* submit.h - what single and bulk submit share: turning spec text into the
 * id and canonical value to store, the guarded create, and how outcomes
 * rank. Implemented in submit.c and submit_many.c. Any thread. */
#ifndef LR_CLIENT_SUBMIT_H
#define LR_CLIENT_SUBMIT_H

#include <stdbool.h>
#include <stddef.h>

#include "client/client.h"

/* Validate spec text (len bytes, need not be NUL-terminated) as
 * lr_submit_text does; id_override may be NULL. On success id receives the
 * task's id (generated when the spec has none) and *value its canonical
 * stored form, malloc'd (the caller frees it), NUL-terminated. Errors:
 * LR_EINVAL with "invalid spec: <field and reason>", LR_ENOMEM. */
int lr_submit_prepare(const char *text, size_t len, const char *id_override,
                      char id[LR_ID_SIZE], char **value, lr_err *err);
/* The same, with not_before (unix ms; 0: none) given to a spec that does
 * not say when it may start (`submit --in`); *added (may be NULL) says
 * whether it was. */
int lr_submit_prepare_at(const char *text, size_t len, const char *id_override,
                         int64_t not_before_ms, char id[LR_ID_SIZE], char **value,
                         bool *added, lr_err *err);

/* Create tasks/<id> holding value, guarded by version == 0; see submit.c.
 * start_added: value's not_before was given by the submit (`--in`), so a
 * stored spec that differs from it only in an earlier not_before is this
 * submit retried (an earlier run computed an earlier time). within: the
 * holders the submit is made within (lr_submit_opts.within; may be NULL),
 * recorded with the task's request for locks or slots. *created: 1 new, 0
 * an identical value was already stored. Errors: LR_EEXIST (a different
 * value is stored), etcd errors. */
int lr_submit_store(lr_client *c, const char *id, const char *value, bool start_added,
                    const char *const *within, int *created, lr_err *err);

/* The worse of two outcome codes (0 or LR_E*), by the order documented at
 * lr_submit_summary in leaserun.h: any other error > LR_EINVAL > LR_EEXIST
 * > LR_OK. */
int lr_submit_worse(int a, int b);

#endif
