/* task_records.h - the records of one task (tasks/, claims/, checkpoints/,
 * done/) read together in one txn, and the status derived from them.
 * Implemented in status.c; used by status, cancel and purge. Any thread. */
#ifndef LR_TASK_RECORDS_H
#define LR_TASK_RECORDS_H

#include "client/client.h"
#include "etcd/kv.h"

/* How many ops lr_task_records_ops adds to a txn branch. */
#define LR_TASK_RECORD_OPS 4

/* The key-values of one task; NULL when the key does not exist. Borrowed
 * from the lr_txn_result they were read with. */
typedef struct lr_task_records {
	const lr_kv *task, *claim, *checkpoint, *done;
} lr_task_records;

/* Append the gets of the task's records to branch b of t, in a fixed order
 * that lr_task_records_at understands. id must be valid. */
void lr_task_records_ops(const lr_client *c, lr_txn *t, enum lr_txn_branch b,
                         const char *id);

/* The records read by the LR_TASK_RECORD_OPS ops starting at op `first` of
 * r. LR_EINTERNAL when the reply does not have those ops. */
int lr_task_records_at(const lr_txn_result *r, size_t first,
                       lr_task_records *out, lr_err *err);

/* Read the records of id in one txn (one revision). *r holds them and is
 * freed by the caller with lr_txn_result_free. */
int lr_task_records_read(lr_client *c, const char *id, lr_txn_result *r,
                         lr_task_records *out, lr_err *err);

/* The status shown for the records (rec->task must not be NULL). Records
 * that do not decode never fail the call: what is readable is shown and the
 * problem goes into out->error. Only LR_ENOMEM fails. */
int lr_task_status_from(const char *id, const lr_task_records *rec,
                        lr_task_status *out, lr_err *err);

/* The final state named by a done record's status, LR_TASK_FAILED for a
 * done record that does not decode (the task is over either way). */
lr_task_state lr_done_state(const lr_kv *done);

/* What a runners/<name> key says (ttl_left -1: not asked). A record that
 * does not decode still gives the name and the lease. */
void lr_runner_info_from(const lr_kv *kv, const char *name,
                         lr_runner_info *info);

/* LR_EINVAL naming `what` unless id is a valid task id. */
int lr_check_task_id(const char *what, const char *id, lr_err *err);

#endif
