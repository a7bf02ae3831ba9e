/* claim.h - the claim txn and every fenced write of a holder: step commit,
 * intermediate checkpoint, attempt bump, completion and release.
 * Blocking etcd calls; called by one worker thread per held task. */
#ifndef LR_CLAIM_H
#define LR_CLAIM_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "client/client.h"
#include "client/lock_keys.h"
#include "etcd/kv.h"
#include "records/lockset.h"

/* A txn that rides with the first txn a claimant sends through its batch,
 * in the same request when they fit (the end of the task a worker ran
 * before, with the claim of its next): sent once; its outcome is its own. */
typedef struct lr_rider {
	const lr_txn *t;
	bool sent;            /* rc, r and err are its outcome */
	int rc;
	lr_txn_result r;
	lr_err err;
} lr_rider;

/* Who writes: the runner's name and its current lease. */
typedef struct lr_claimant {
	lr_client *client;
	const char *runner;
	int64_t lease;
	/* Called after a txn failed in a way that leaves its outcome open
	 * (etcd unreachable, deadline, reply lost: lr_claim_transient): it
	 * waits as it sees fit and returns true to send the same txn again,
	 * false to give up (the lease deadline passed). The txn's compares
	 * make a second try that finds the first applied recognise it, so a
	 * holder never has to walk away from a claim it may still hold.
	 * NULL: no second try. */
	bool (*again)(void *user, int code);
	void *again_user;
	/* The runner's group commit (batch.h): its txns may share a request
	 * with other workers'. NULL: each txn is a request of its own. */
	struct lr_batch *batch;
	/* Sent with the first txn through the batch; NULL: none. */
	lr_rider *rider;
	/* Told of each key of locks/, slots/ or limits/ on no lease that a
	 * claim of task id found in its way and deleted (no holder writes
	 * one: it would never expire), to warn of it. NULL: not told. */
	void (*stray)(void *user, const char *id, const char *key);
	void *stray_user;
} lr_claimant;

/* Whether a failed write's outcome is open and a retry may settle it. */
bool lr_claim_transient(int code);

/* The keys of one task. */
typedef struct lr_task_keys {
	char task[LR_KEY_SIZE];
	char claim[LR_KEY_SIZE];
	char ckpt[LR_KEY_SIZE];
	char done[LR_KEY_SIZE];
	char cancel[LR_KEY_SIZE];
	char holder[LR_HOLDER_SIZE];   /* "task:<id>": the holder of its locks */
	char wants[LR_LOCK_KEY_SIZE];  /* its request for locks and slots */
} lr_task_keys;

/* A task held under a claim. */
typedef struct lr_claimed_task {
	char id[LR_ID_SIZE];
	json_t *spec;          /* normalised spec (owned) */
	int64_t steps;
	int64_t max_attempts;
	int64_t fence;         /* create revision of our claim */
	int64_t next_step;
	int64_t attempt;       /* of next_step, as in the checkpoint */
	bool started;          /* `attempt` counts a start that happened: the
	                          next start must count one more first (false
	                          after a claim, commit or bump, which count
	                          the start about to happen) */
	json_t *state;         /* committed state (owned) */
	int64_t ckpt_rev;      /* mod revision of the checkpoint we last saw */
	bool cancel_requested; /* cancel/<id> existed when we claimed */
	bool adopted;          /* a claim of ours found on our lease, taken up
	                          again: whether its step started already is
	                          for the caller to say (`started`) */
	lr_lockset *locks;     /* what the claim took besides (owned), or NULL */
	int slots[LR_LIMITS_MAX]; /* the slot taken in each pool of locks */
	int64_t wait_until;    /* LR_CLAIM_WAIT: unix ms, 0 for a dependency */
	char wait_for[LR_ID_SIZE]; /* LR_CLAIM_WAIT (0): that dependency */
	lr_task_keys keys;     /* its keys, built once for every write */
} lr_claimed_task;

void lr_claimed_task_clear(lr_claimed_task *h);

enum lr_claim_outcome {
	LR_CLAIM_WON,      /* h filled: run it */
	LR_CLAIM_LOST,     /* claimed by another runner: h->fence is the create
	                      revision of that claim */
	LR_CLAIM_GONE,     /* done already, or no such task (purged) */
	LR_CLAIM_ENDED,    /* the claimer ended it: see *ended_state (failed
	                      when its attempts ran out, cancelled when a
	                      cancel request was waiting for a holder) */
	LR_CLAIM_BLOCKED,  /* its locks or slots are held by others (a key of
	                      theirs on no lease, no holder's, is deleted and
	                      the claim tried again first) */
	LR_CLAIM_WAIT,     /* not yet: its not_before is ahead (h->wait_until),
	                      or a task of its "after" has not finished (0);
	                      nothing was written */
};

/* Claim task id in one txn (two when the checkpoint must be read first).
 * spec_text (may be NULL) is the spec as seen in a watch event, of the
 * tasks/<id> created at revision spec_rev; fresh says the task has never
 * been claimed, so that no checkpoint can exist. The claim holds only
 * while tasks/<id> is the one its spec was read from: a task purged (or
 * purged and submitted again) meanwhile is not claimed on the old spec.
 * A task with locks or limits takes them in the same txn, all or nothing:
 * slots[i] (n_slots of them; NULL: pick at random) is the slot to take in
 * the i-th pool of its limits. */
int lr_claim(const lr_claimant *who, const char *id, const char *spec_text,
             size_t spec_len, int64_t spec_rev, bool fresh, const int *slots,
             size_t n_slots, lr_claimed_task *h, enum lr_claim_outcome *outcome,
             lr_task_state *ended_state, char *ended_error, size_t ended_error_size,
             lr_err *err);

/* What a prefetch learnt of one task. */
typedef struct lr_prefetched {
	char id[LR_ID_SIZE];
	bool found;        /* tasks/<id> exists */
	bool has_ckpt;     /* checkpoints/<id> exists: it was claimed before */
	int64_t create_rev; /* of tasks/<id>: which incarnation was read */
	char *spec;        /* its text (malloc'd, NUL-terminated), or NULL when
	                      not found or over max_spec */
	size_t spec_len;   /* its length, also when not kept */
} lr_prefetched;

/* Read the specs of n tasks, and whether each has a checkpoint (keys
 * only), in one read-only txn, so that their claims need no read of their
 * own. The reads are serializable (no round of consensus): an outdated
 * checkpoint costs the claim one retry at most, because the claim txn
 * compares the checkpoint's revision; callers check create_rev against
 * the task they know, so that an outdated spec is never used. out[] (n
 * entries) is filled; free with lr_prefetched_clear. */
int lr_claim_prefetch(lr_client *c, const char (*ids)[LR_ID_SIZE], size_t n,
                      size_t max_spec, lr_prefetched *out, lr_err *err);
void lr_prefetched_clear(lr_prefetched *p, size_t n);

/* Commit step h->next_step with h->state (taking a new reference): the
 * checkpoint moves to the next step, attempt 1. LR_ELEASE when the claim is
 * gone. */
int lr_commit_step(const lr_claimant *who, lr_claimed_task *h, json_t *state, lr_err *err);

/* Fenced checkpoint of state without advancing (intermediate progress). */
int lr_checkpoint_progress(const lr_claimant *who, lr_claimed_task *h, json_t *state,
                           lr_err *err);

/* Count one more start of the current step, just before it runs again. */
int lr_bump_attempt(const lr_claimant *who, lr_claimed_task *h, lr_err *err);

/* End the task: done/<id> with state (NULL: h->state), claim and cancel
 * request deleted, in one fenced txn. */
int lr_finish(const lr_claimant *who, lr_claimed_task *h, lr_task_state st,
              const char *error, json_t *state, lr_err *err);

/* lr_finish in two halves, for a txn sent by someone else (a rider): the
 * txn, with the done record it puts in *val (the caller frees both), and
 * what its outcome means (0, LR_ELEASE: the claim is gone). */
lr_txn *lr_finish_txn(const lr_claimant *who, const lr_claimed_task *h, lr_task_state st,
                      const char *error, json_t *state, char **val, lr_err *err);
int lr_finish_outcome(lr_claimed_task *h, const lr_txn_result *r, const char *val,
                      lr_err *err);
/* Send a txn of lr_finish_txn (again) and judge its outcome: for a rider
 * whose request failed, so that a try of it that applied meanwhile is
 * recognised by the record it put (a new record would not be). */
int lr_finish_send(const lr_claimant *who, lr_claimed_task *h, const lr_txn *t,
                   const char *val, lr_err *err);

/* Graceful release: claim deleted; give_back returns one attempt to the
 * count (a start that did not happen, or was interrupted by the
 * shutdown). */
int lr_release(const lr_claimant *who, lr_claimed_task *h, bool give_back, lr_err *err);

/* Put vals[i] at keys[i] (n of them) in one txn fenced by h's claim, for
 * values the holder keeps beside the task's own keys. LR_ELEASE when the
 * claim is gone. */
int lr_fenced_put(const lr_claimant *who, const lr_claimed_task *h, size_t n,
                  const char *const keys[], char *const vals[], lr_err *err);

#endif
