/* record.h - the JSON values kept in etcd beside the specs: claims, checkpoints,
 * done records, runner records, cancel requests. Pure functions; any thread. */
#ifndef LR_RECORD_H
#define LR_RECORD_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/clock.h"
#include "leaserun.h"
#include "records/lockset.h"

/* Values this large were not written by leaserun (a checkpoint is a 512 KiB
 * state plus a few fields; etcd itself refuses requests over 1.5 MiB by
 * default), so they are refused before parsing. */
#define LR_RECORD_MAX_BYTES (2 * 1024 * 1024)

/* Encoders return compact JSON with sorted keys, malloc'd, for the caller to
 * free(); NULL when out of memory or when a string is not valid UTF-8.
 *
 * Decoders take the value as read from etcd (len bytes, not NUL-terminated),
 * which anyone with write access may have put there: invalid JSON, wrong
 * types, negative numbers and strings too long for the fixed buffers are
 * refused with LR_EINVAL and "<record> record: <field>: <what>", never
 * truncated. Fields they do not know are ignored, so that a newer runner's
 * records stay readable. On failure *out is left untouched. */

/* A slot of a pool that a claim took with the task. */
typedef struct lr_claim_slot {
	char pool[LR_LOCK_SEG_MAX + 1];
	int index;                    /* 0..LR_LIMIT_N_MAX-1 */
} lr_claim_slot;

/* claims/<id>: which runner holds the task, on which lease, and the slots
 * it took with it ("slots": {"gpu": 3}, absent when none), so that a
 * runner taking up its own claim again knows what to give back. */
typedef struct lr_claim_rec {
	char runner[256];
	int64_t lease; /* > 0 */
	char claimed_at[LR_TIME_BUF];
	size_t n_slots;
	lr_claim_slot slots[LR_LIMITS_MAX];
} lr_claim_rec;

char *lr_claim_encode(const lr_claim_rec *c);
int lr_claim_decode(const char *v, size_t len, lr_claim_rec *out, lr_err *err);

/* checkpoints/<id>: the progress of a task. */
typedef struct lr_checkpoint_rec {
	int64_t next_step; /* 0..LR_MAX_STEPS */
	int64_t attempt;   /* 0..INT32_MAX, so attempt + 1 never overflows */
	json_t *state;     /* owned; NULL encodes as null; decoded never NULL */
	char runner[256];  /* the last runner that ran the task; "" for none:
	                      a retry of a task no runner claimed */
	int64_t fence;     /* >= 0 */
	char updated_at[LR_TIME_BUF];
} lr_checkpoint_rec;

char *lr_checkpoint_encode(const lr_checkpoint_rec *c);
/* out->state is a new reference: release with lr_checkpoint_rec_clear. */
int lr_checkpoint_decode(const char *v, size_t len, lr_checkpoint_rec *out,
                         lr_err *err);
void lr_checkpoint_rec_clear(lr_checkpoint_rec *c);
/* The fence of the claim that wrote the checkpoint, for people and
 * external systems: c->fence, or for the checkpoint the claim txn itself
 * wrote (fence 0) the claim's create revision, which is the checkpoint's
 * mod_rev (the same txn). */
int64_t lr_checkpoint_fence(const lr_checkpoint_rec *c, int64_t mod_rev);

/* done/<id>: how a task ended. */
typedef struct lr_done_rec {
	char status[16];  /* succeeded | failed | cancelled */
	int64_t attempts; /* 0..INT32_MAX */
	char *error;      /* owned, malloc'd; NULL encodes as null */
	json_t *state;    /* owned; NULL encodes as null; decoded never NULL */
	char finished_at[LR_TIME_BUF];
} lr_done_rec;

char *lr_done_encode(const lr_done_rec *d);
/* out->error and out->state are owned by out: lr_done_rec_clear. */
int lr_done_decode(const char *v, size_t len, lr_done_rec *out, lr_err *err);
void lr_done_rec_clear(lr_done_rec *d);

/* runners/<name>: a live runner, for `leaserun runners`. */
typedef struct lr_runner_rec {
	int64_t pid;         /* > 0 */
	char host[256];
	int64_t concurrency; /* > 0 */
	int64_t ttl;         /* > 0, seconds */
	char started_at[LR_TIME_BUF];
	char version[32];
} lr_runner_rec;

char *lr_runner_encode(const lr_runner_rec *r);
int lr_runner_decode(const char *v, size_t len, lr_runner_rec *out,
                     lr_err *err);

/* cancel/<id>: a request to the holder to stop the task. */
typedef struct lr_cancel_rec {
	char requested_at[LR_TIME_BUF];
} lr_cancel_rec;

char *lr_cancel_encode(const char *requested_at);
int lr_cancel_decode(const char *v, size_t len, lr_cancel_rec *out,
                     lr_err *err);

#endif
