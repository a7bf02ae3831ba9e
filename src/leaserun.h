/* leaserun.h - the public API of libleaserun.
 *
 * libleaserun runs long multi-step tasks on a fleet of runners that share an
 * etcd cluster: at most one runner holds a task's claim (a key on its etcd
 * lease), only the holder commits progress (fenced transactions), and a task
 * whose runner dies is resumed elsewhere from its last checkpoint.
 *
 * Conventions:
 * - Every function that can fail returns 0 or a negative LR_E* code, and
 *   fills the lr_err the caller passed (may be NULL) with the same code and a
 *   message that names the endpoint, task and step involved.
 * - Handles are opaque; each has exactly one function that frees it.
 */
#ifndef LEASERUN_H
#define LEASERUN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Error codes (always negative; LR_OK is 0). */
enum {
	LR_OK = 0,
	LR_EINVAL = -1,       /* bad argument or invalid input (exit 2) */
	LR_EEXIST = -2,       /* task id exists with a different spec (exit 3) */
	LR_ENOTFOUND = -3,    /* no such task (exit 4) */
	LR_EUNAVAILABLE = -4, /* no etcd endpoint answered */
	LR_ETIMEDOUT = -5,    /* a call's deadline passed */
	LR_EAMBIGUOUS = -6,   /* a write's reply was lost: it may have applied */
	LR_EPERM = -7,        /* etcd denied the request (RBAC) */
	LR_EAUTH = -8,        /* authentication failed */
	LR_ETLS = -9,         /* TLS handshake or certificate failure */
	LR_EETCD = -10,       /* any other error reported by etcd */
	LR_ECONFLICT = -11,   /* a txn compare failed */
	LR_ELEASE = -12,      /* the lease is gone */
	LR_ECANCELLED = -13,  /* stopped by cancel, lease loss or shutdown */
	LR_ETOOLARGE = -14,   /* a value over a documented limit */
	LR_EINUSE = -15,      /* a runner name already held by a live runner */
	LR_ESYS = -16,        /* an operating system call failed */
	LR_ENOMEM = -17,      /* out of memory */
	LR_ECLOSED = -18,     /* the handle is being closed */
	LR_EINTERNAL = -19,   /* a bug: please report it */
};

/* The error a failing call leaves behind: its code and a readable message
 * with context, e.g. "claim report-7: etcd 127.0.0.1:2379 (KV.Txn):
 * deadline exceeded". Owned by the caller; usually on the stack. */
typedef struct lr_err {
	int code;
	char msg[512];
} lr_err;

/* A short constant description of a code. */
const char *lr_strerror(int code);

#ifdef __cplusplus
}
#endif

#endif /* LEASERUN_H */
