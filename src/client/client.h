/* client.h - what the library's parts share about an lr_client: its etcd
 * connection and the layout of keys under the prefix. */
#ifndef LR_CLIENT_H
#define LR_CLIENT_H

#include "etcd/transport.h"
#include "leaserun.h"

/* Room for any key: prefix (<= 200) + kind + id or name (< LR_ID_SIZE). */
#define LR_KEY_SIZE 512
#define LR_PREFIX_MAX 200

/* The key kinds under the prefix (docs/keys.md). */
#define LR_K_TASKS "tasks/"
#define LR_K_CLAIMS "claims/"
#define LR_K_CHECKPOINTS "checkpoints/"
#define LR_K_DONE "done/"
#define LR_K_RUNNERS "runners/"
#define LR_K_CANCEL "cancel/"
#define LR_K_SHARED "shared/"
#define LR_K_LOCKS "locks/"   /* held locks (client/lock_keys.h) */
#define LR_K_SLOTS "slots/"   /* held slots of pools */
#define LR_K_LIMITS "limits/" /* the limit each slot's holder runs under */
#define LR_K_WANTS "wants/"   /* what a holder or waiter asks for */
#define LR_K_QUEUE "queue/"   /* when a task may start (records/schedule.h) */
#define LR_K_HISTORY "history/" /* earlier outcomes of a retried task */

/* The connection; borrowed, lives as long as the client. */
lr_etcd *lr_client_etcd(const lr_client *c);

/* buf = prefix + kind + id (kind one of LR_K_*, id may be "" for the
 * directory itself). */
void lr_key(const lr_client *c, const char *kind, const char *id,
            char buf[LR_KEY_SIZE]);

/* The id part of a key under prefix+kind, or NULL when key is not there. */
const char *lr_key_id(const lr_client *c, const char *kind, const char *key);

#endif
