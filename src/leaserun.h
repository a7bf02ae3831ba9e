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
 * - Pointer arguments are required unless their comment says "may be NULL"
 *   (or gives NULL a meaning). A function that returns a code fails with
 *   LR_EINVAL, doing nothing else, when a required handle, input or out
 *   pointer is NULL; its message names the function and the argument
 *   ("lr_task_get: out must not be NULL"). Functions that return a value
 *   rather than a code (lr_client_prefix, lr_hold_fence, the lr_step_*
 *   accessors...) need a valid handle. Freeing functions accept NULL.
 */
#ifndef LEASERUN_H
#define LEASERUN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Exported from the shared library; everything else stays internal. */
#if defined(__GNUC__)
#define LR_API __attribute__((visibility("default")))
#else
#define LR_API
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
	LR_EBUSY = -20,       /* locks still held by others when a wait ran out (exit 5) */
};

/* The error a failing call leaves behind: its code and a readable message
 * with context, e.g. "claim report-7: etcd 127.0.0.1:2379 (KV.Txn):
 * deadline exceeded". Owned by the caller; usually on the stack. */
typedef struct lr_err {
	int code;
	char msg[512];
} lr_err;

/* A short constant description of a code. */
LR_API const char *lr_strerror(int code);

/* The library's version ("0.1.0"). */
LR_API const char *lr_version(void);

/* ========================================================================
 * Client: a connection to the etcd cluster and the task operations.
 * ====================================================================== */

typedef struct lr_client lr_client;

/* Options of lr_client_open. Zero/NULL fields take the default. Strings are
 * copied; the caller keeps ownership. */
typedef struct lr_client_opts {
	const char *endpoints;       /* "host:port[,host:port...]"; default
	                                "127.0.0.1:2379" */
	const char *prefix;          /* key prefix; default "/leaserun/" (a
	                                missing trailing '/' is added); valid
	                                UTF-8, no control characters, no
	                                blank at either end (LR_EINVAL) */
	double dial_timeout_s;       /* default 5 (0): an unreachable cluster
	                                is reported within it; 0.001..86400 */
	double call_timeout_s;       /* default 5 (0): deadline of one etcd
	                                call; 0.001..86400 */
	const char *cacert;          /* PEM file: TLS, verifying the server */
	const char *cert, *key;      /* PEM files: client certificate (mTLS) */
	const char *tls_server_name; /* name checked against the certificate; implies TLS */
	const char *user;            /* etcd authentication; NULL for none */
	const char *password;        /* never logged, never passed to steps */
} lr_client_opts;

/* Connect. On success *out is a new client, freed by lr_client_close.
 * Errors: LR_EINVAL (options), LR_EUNAVAILABLE (no endpoint reachable within
 * the dial timeout; the message names the endpoints), LR_EAUTH, LR_ETLS. */
LR_API int lr_client_open(const lr_client_opts *opts, lr_client **out, lr_err *err);
LR_API void lr_client_close(lr_client *c);

/* The normalised prefix ("/leaserun/"). Borrowed. */
LR_API const char *lr_client_prefix(const lr_client *c);

/* Task ids are at most this long (plus the terminating NUL). */
#define LR_ID_SIZE 201

/* True when s follows the one rule of task ids, runner names and shared
 * value names: 1 to LR_ID_SIZE - 1 of A-Z a-z 0-9 . _ : - (so that they are
 * usable in keys, file names and log fields without quoting). */
LR_API int lr_id_valid(const char *s);

/* Validate and store a task spec given as JSON text (at most 1 MiB).
 * id_override (may be NULL) sets the id when the spec has none. On success
 * id_out (may be NULL) receives the task's id and *created (may be NULL) tells whether
 * the task is new (false: an identical spec was already stored, which is a
 * success so that a submit may be retried).
 * Errors: LR_EINVAL (invalid spec; the message names the field, or line and
 * column), LR_EEXIST (the id exists with a different spec), etcd errors.
 * Nothing is stored unless it returns 0. */
LR_API int lr_submit_text(lr_client *c, const char *text, size_t len,
                   const char *id_override, char id_out[LR_ID_SIZE],
                   int *created, lr_err *err);

/* The same for a spec as a jansson object (json_t *; borrowed: the caller
 * keeps its reference). Declared with void * so that this header does not
 * require jansson.h. */
LR_API int lr_submit_json(lr_client *c, const void *spec, const char *id_override,
                   char id_out[LR_ID_SIZE], int *created, lr_err *err);

/* ---- many tasks at once ---------------------------------------------------
 *
 * lr_submit_many stores a stream of specs with many creates in flight on
 * the client's one connection. Each spec is still its own guarded create
 * with its own outcome, exactly as lr_submit_text: valid specs are stored
 * even when others are rejected, an identical resubmit is a success, and
 * no outcome depends on another spec's. Specs are read as they are needed
 * and at most about 16 MiB of them are held at once, so any length of
 * input runs in bounded memory.
 *
 * Threads: input and outcome run on the caller's thread, inside
 * lr_submit_many, one at a time and never at once; the creates run on
 * threads of lr_submit_many's own, all joined before it returns. */

/* One spec handed to lr_submit_many. Every pointer is borrowed and must
 * stay valid until input is called again (the library copies what it
 * keeps). */
typedef struct lr_submit_item {
	const char *text;   /* the spec as JSON text; need not be NUL-terminated */
	size_t len;         /* at most 1 MiB, as for lr_submit_text */
	const char *origin; /* where it came from, for messages, e.g.
	                       "tasks.jsonl:17"; may be NULL */
	const char *error;  /* not NULL: the input could not give this spec
	                       (e.g. an unreadable file); it is rejected with
	                       LR_EINVAL and this message, and text is ignored */
} lr_submit_item;

/* Supplies the next spec: fills *item and returns 1; returns 0 at the end
 * of the input; or returns a negative LR_E* code (err filled) to stop, in
 * which case lr_submit_many reads nothing more, finishes the creates it has
 * started and returns that code. item and err are zeroed before the call. */
typedef int (*lr_submit_input_fn)(void *user, lr_submit_item *item, lr_err *err);

/* What became of one spec. Strings are borrowed for the call only. */
typedef struct lr_submit_outcome {
	uint64_t index;     /* 0-based position in the input */
	const char *origin; /* the item's origin; "" when it had none */
	const char *id;     /* the task's id (given or generated); "" when the
	                       spec was rejected before an id was known */
	int code;           /* LR_OK; LR_EINVAL (invalid spec); LR_ENOTFOUND (a
	                       task of its "after" does not exist); LR_EEXIST (the
	                       id holds a different spec, including one stored
	                       earlier in the same input); LR_ECANCELLED (not
	                       sent: the submit was stopping); or an etcd error */
	int created;        /* LR_OK: 1 a new task; 0 the identical spec was
	                       already stored */
	const char *msg;    /* why, when code != LR_OK (without the origin);
	                       "" otherwise */
} lr_submit_outcome;

/* Called once for every item taken from the input, in input order. */
typedef void (*lr_submit_outcome_fn)(void *user, const lr_submit_outcome *o);

typedef struct lr_submit_opts {
	int in_flight;      /* creates in flight at once, each on a thread of
	                       its own; default 16, at most 256 */
	int64_t not_before_ms; /* unix ms given as "not_before" to specs that
	                          give none (`submit --in`); 0: none */
	/* The holders this submit is made within, NULL-terminated (borrowed;
	 * NULL: none), as lr_hold_opts.within: "task:<id>" when a step of task
	 * id submits tasks it will wait for. A submitted task that takes
	 * locks or slots is not held back behind an older waiter that waits
	 * for one of them (it could not be granted before the sub-task ends).
	 * `leaserun submit` gives LEASERUN_TASK_ID's task and LEASERUN_HOLD's
	 * run. */
	const char *const *within;
} lr_submit_opts;

/* Counts of one lr_submit_many. worst is the worst code met, in this
 * order: any etcd or runtime error (including the code that stopped the
 * submit) > LR_EINVAL > LR_ENOTFOUND > LR_EEXIST > LR_OK. An error of the cluster comes
 * first because it is the only outcome that the same submit, run again,
 * can change (and it may be run again safely: what was stored is an
 * identical resubmit); an invalid spec comes before a taken id as single
 * submit finds it first, before asking etcd. */
typedef struct lr_submit_summary {
	uint64_t items;       /* taken from the input: the sum of the next five */
	uint64_t created;     /* new tasks */
	uint64_t identical;   /* already stored with the same spec */
	uint64_t invalid;     /* LR_EINVAL, and LR_ENOTFOUND (unknown "after") */
	uint64_t conflicting; /* LR_EEXIST */
	uint64_t failed;      /* etcd errors and specs not sent (LR_ECANCELLED) */
	int worst;
} lr_submit_summary;

/* Take specs from input and store each, calling outcome once per item in
 * input order. A spec without an id gets a generated one (so submitting it
 * again makes another task); a spec whose id appears earlier in the input
 * is sent only after that one's create has finished, so the earlier one
 * wins and the later is an identical resubmit or LR_EEXIST; a spec with
 * "after" is sent alone, once every create before it has finished and
 * before any after it is sent, so it may name tasks earlier in the input,
 * and one named only later in the input is LR_ENOTFOUND, every time.
 * The first etcd error (any code but LR_EINVAL, LR_EEXIST, LR_ENOTFOUND,
 * LR_ETOOLARGE)
 * stops the submit: no more input is read, specs read but not yet sent get
 * LR_ECANCELLED, creates in flight finish with their own outcomes, and the
 * call returns that error (its message in err). A create whose reply was
 * lost is retried within the call timeout; the retry's compare reads the
 * stored spec, so a lost reply is never taken for a success.
 * opts may be NULL; summary (may be NULL) is filled in any case.
 * Returns 0 when the whole input was taken (whatever the outcomes: see
 * summary->worst); the input's code, or the etcd error that stopped it;
 * LR_EINVAL for bad opts, LR_ENOMEM or LR_ESYS (no thread could start),
 * before any input is read. */
LR_API int lr_submit_many(lr_client *c, const lr_submit_opts *opts,
                          lr_submit_input_fn input,
                          lr_submit_outcome_fn outcome, void *user,
                          lr_submit_summary *summary, lr_err *err);

typedef enum lr_task_state {
	LR_TASK_PENDING = 0,
	LR_TASK_RUNNING = 1,
	LR_TASK_SUCCEEDED = 2,
	LR_TASK_FAILED = 3,
	LR_TASK_CANCELLED = 4,
} lr_task_state;

/* "pending", "running", ...; NULL for an unknown value. */
LR_API const char *lr_task_state_name(lr_task_state s);
/* The state named s; -1 if none. */
LR_API int lr_task_state_parse(const char *s);

/* What status shows of one task. Strings are owned by the struct and freed
 * by lr_task_status_clear. */
typedef struct lr_task_status {
	char id[LR_ID_SIZE];
	lr_task_state state;
	int64_t next_step;      /* first step not committed */
	int64_t steps;          /* number of steps; 0 when the spec is unreadable */
	char *step_name;        /* name of step next_step, NULL when done */
	int64_t attempt;        /* attempt of step next_step (0: never started) */
	int64_t max_attempts;
	char *runner;           /* holder (running) or last runner; may be NULL */
	char *error;            /* failed/cancelled reason; may be NULL */
	char *updated_at;       /* RFC 3339 of the last change seen; may be NULL */
	int64_t create_revision;/* etcd revision that created the task */
	char *waiting;          /* pending: what it waits for, filled in by
	                           lr_task_waits ("X org/a held by task t-12 on
	                           box-1", "not before ...", "after t-3, which is
	                           running"); NULL otherwise */
	char *history;          /* lr_task_get only: earlier outcomes of a
	                           retried task, newest first, as a JSON array
	                           of {"status","attempts","error","runner",
	                           "finished_at"}; NULL when never retried */
	char *cancel_requested_at; /* pending or running: when `leaserun cancel`
	                           asked for it (cancel/<id>; "" when the
	                           request does not say), until the task ends;
	                           NULL when not asked */
} lr_task_status;

LR_API void lr_task_status_clear(lr_task_status *s);

/* One task. LR_ENOTFOUND when there is no such task. */
LR_API int lr_task_get(lr_client *c, const char *id, lr_task_status *out, lr_err *err);

/* Tasks oldest first; state_filter -1 for all; limit 0 for no limit. On
 * success *out is an array of *n statuses, freed by lr_task_list_free. */
LR_API int lr_task_list(lr_client *c, int state_filter, size_t limit,
                 lr_task_status **out, size_t *n, lr_err *err);
LR_API void lr_task_list_free(lr_task_status *list, size_t n);

/* Fill in `waiting` for the pending tasks of list whose locks or slots
 * cannot be taken now: held by others, or asked for first by an older
 * request they must not overtake. Reads locks/, slots/ and wants/ once. */
LR_API int lr_task_waits(lr_client *c, lr_task_status *list, size_t n, lr_err *err);

/* ---- holding locks and slots from any process ------------------------------
 *
 * The same locks and slot pools as tasks' "locks" and "limits" (see
 * docs/locks.md), held by a process on a lease of its own: taken all at
 * once in one txn, fairly (first come, first served among conflicting
 * requests: the request is queued in wants/ before the wait), driven by
 * watch events, never by polling; kept while the lease is renewed; given
 * back by lr_hold_release, or by etcd when the lease expires. */
typedef struct lr_hold lr_hold;

struct lr_log_record; /* see Logging below */

typedef struct lr_hold_opts {
	const void *locks;   /* json_t {"PATH": "MODE"} (borrowed), or NULL */
	const void *limits;  /* json_t {"KEY": N} (borrowed), or NULL */
	int64_t ttl_s;       /* the lease's TTL; 0: 10 (etcd may raise it); at
	                        most 9000000000 (etcd's longest) */
	int64_t wait_ms;     /* how long to wait for them: -1 forever, 0 try
	                        once; below -1: LR_EINVAL */
	const char *name;    /* who holds, as `leaserun locks` shows it; NULL:
	                        the host name */
	int cancel_fd;       /* readable: stop waiting (LR_ECANCELLED); -1: none.
	                        0 is a descriptor (stdin), so an options struct
	                        zeroed must set -1; one not open is LR_EINVAL */
	/* Warnings while waiting, on the caller's thread: a lock or slot key
	 * in the way that hung on no lease (put by hand: no holder writes
	 * one, and it would never expire) was deleted. An lr_log_fn; NULL:
	 * none. */
	void (*log)(void *user, const struct lr_log_record *rec);
	void *log_user;
	/* The holders this request is made within, NULL-terminated (borrowed;
	 * NULL: none): "task:<id>" for a request made by a step of task id
	 * (lr_step_task_id), "run:<id>" by the command of a hold (its id,
	 * LEASERUN_HOLD). An older request that waits for one of them does
	 * not hold this one back: it could not be granted before this one
	 * is. `leaserun run` gives LEASERUN_TASK_ID's task and LEASERUN_HOLD's
	 * run. */
	const char *const *within;
} lr_hold_opts;

/* Take every lock and slot of o, waiting as o says. On success *out holds
 * them until lr_hold_release. LR_EINVAL: an invalid path, mode or limit
 * (the message names it), nothing written; LR_EBUSY: the wait ran out
 * (the message names a holder: "X org/a held by task t-12 on box-1");
 * LR_ECANCELLED: cancel_fd; other codes: etcd errors. Blocking; any
 * thread; several holds of one client may wait at once. */
LR_API int lr_hold_acquire(lr_client *c, const lr_hold_opts *o, lr_hold **out, lr_err *err);
/* Whether o's locks and limits are valid, as lr_hold_acquire checks them,
 * without etcd: 0, or LR_EINVAL with a message naming what is wrong (an
 * empty request is invalid too; so are ttl_s, wait_ms and cancel_fd out of
 * their ranges). Pure; any thread. */
LR_API int lr_hold_check(const lr_hold_opts *o, lr_err *err);
/* The fencing token: the revision of the txn that took them. It grows with
 * every later acquisition of any lock, so a system that keeps the highest
 * token it saw can refuse a holder that lost its hold. */
LR_API int64_t lr_hold_fence(const lr_hold *h);
/* The hold's id ("run:<id>" in etcd) and its lease. */
LR_API const char *lr_hold_id(const lr_hold *h);
LR_API int64_t lr_hold_lease(const lr_hold *h);
/* The slot taken in each pool: {"POOL": index}, and the locks as asked
 * ({} when none) (json_t *, borrowed). */
LR_API const void *lr_hold_slots(const lr_hold *h);
LR_API const void *lr_hold_locks(const lr_hold *h);
/* When the lease may expire (monotonic ms, CLOCK_MONOTONIC): moves with
 * each renewal; 0 once it is lost. A readable fd after each renewal
 * (read it to clear), and one readable once the lease is lost: the locks
 * may then belong to someone else. */
LR_API int64_t lr_hold_deadline_ms(const lr_hold *h);
LR_API int lr_hold_renewed_fd(const lr_hold *h);
LR_API int lr_hold_lost_fd(const lr_hold *h);
/* Run argv (argv[0] found on PATH when it has no '/') while h holds, under
 * the same guard as shell steps: in a process group of its own (which
 * takes the foreground of the terminal when stdin is this process's
 * controlling terminal and it is in the foreground, and gives it back at
 * the end), with this process's stdin, stdout, stderr and environment plus
 * LEASERUN_FENCE, LEASERUN_LOCKS, LEASERUN_SLOTS and LEASERUN_HOLD (the
 * hold's id). Each
 * renewal moves the guard's deadline; if the lease is lost, or this
 * process dies, every process of the command is stopped (SIGTERM, SIGKILL
 * after grace_ms) and none is alive when the lease can expire. stop_fd
 * (may be -1; only polled, never read) readable: stop it the same way.
 * Returns once no process of the command is left: 0 with *wstatus its
 * wait status (waitpid), LR_ELEASE when the lease was lost, its deadline
 * passed by the clock, or the guard stopped the command for it (this
 * process frozen or cut off, etcd not answering: no renewal came in time,
 * and the command may have obeyed SIGTERM before the deadline),
 * LR_ENOTFOUND when argv[0] cannot be run, LR_ESYS (among others) when
 * the guard itself was killed (the command killed its $PPID, the OOM
 * killer): the command's own process dies with it, but what it started
 * in another process group is out of reach, since an application's
 * process does not adopt orphans (its other children are its own; only
 * `leaserun run` and `leaserun worker` do). Some of the command may then
 * still run: the message says so, and lr_hold_release leaves the lease to
 * expire instead of revoking it, which keeps the locks taken for up to
 * the TTL more but cannot keep the next holder from overlapping what is
 * left. Blocking. */
LR_API int lr_hold_exec(lr_hold *h, char *const argv[], int stop_fd, int64_t grace_ms,
                        int *wstatus, lr_err *err);
/* Who holds and who waits, read at one revision: *doc is a new json_t *
 * {"held": [{"lock", "mode", "holder", "runner" or "host", "since"} and
 * {"pool", "slot", "limit", "holder", ...}], "waiting": [{"holder", "locks",
 * "limits", "since", "waiting_for"} oldest first], "revision"}, where
 * holder is "task:<id>" or "run:<id>" and waiting_for says what holds it
 * back (null: free now, about to be taken). */
LR_API int lr_locks_read(lr_client *c, void **doc, lr_err *err);
/* Give everything back (revoking the lease deletes exactly this hold's
 * keys: never a later holder's) and free h. Any error is reported, and h
 * is freed anyway: what was not deleted goes when the lease expires.
 * After lr_hold_exec said that some of the command may still run, the
 * lease is only no longer renewed (0): it expires within the TTL. */
LR_API int lr_hold_release(lr_hold *h, lr_err *err);

/* Run a failed or cancelled task again: it is pending once more, resumes
 * at the step that failed (or o->from_step: a step name or 0-based index)
 * with its state as checkpointed (or the spec's with o->reset_state) and
 * its attempts counted afresh; its earlier outcome goes to its history
 * (lr_task_status.history). One txn, guarded by the done record as read
 * and no claim. LR_ENOTFOUND: no such task; LR_EINVAL: it is pending,
 * running or succeeded, or from_step names no step, or is digits that are
 * an index and the name of another step (the message says which);
 * LR_ECONFLICT: it changed meanwhile (retried or purged), nothing
 * was done. *step (may be NULL): where it resumes. */
typedef struct lr_retry_opts {
	const char *from_step; /* NULL: the step it ended at */
	int reset_state;
} lr_retry_opts;
LR_API int lr_retry(lr_client *c, const char *id, const lr_retry_opts *o, int64_t *step,
                    lr_err *err);

/* Cancel a pending or running task (one txn). A pending task ends cancelled
 * at once; a running one is stopped by its holder. When the task had
 * already finished, *already (may be NULL) is set to its final state and
 * nothing changes; otherwise *already is -1. LR_ENOTFOUND for no task. */
LR_API int lr_cancel(lr_client *c, const char *id, int *already, lr_err *err);

/* Delete the keys of tasks finished at least older_than_ms ago (by their
 * finished_at), and only those in state_filter (-1: any final state).
 * One txn per task, guarded so that only finished, unclaimed tasks go. */
LR_API int lr_purge(lr_client *c, int64_t older_than_ms, int state_filter,
             size_t *purged, lr_err *err);

/* A live runner, as registered under runners/. */
typedef struct lr_runner_info {
	char name[256];
	char host[256];
	int64_t pid;
	int64_t concurrency;
	int64_t ttl;            /* granted lease TTL, seconds */
	int64_t ttl_left;       /* seconds left on its lease (-1: unknown) */
	int64_t lease;
	char started_at[40];
	char version[32];
} lr_runner_info;

/* Live runners by name. *out is freed with free(). */
LR_API int lr_runners_list(lr_client *c, lr_runner_info **out, size_t *n, lr_err *err);

/* Guarded update of a shared JSON value stored at P "shared/<name>": read
 * it, call fn, write the result with a txn on the key's mod revision, and
 * retry from the read when another writer came first. Concurrent writers
 * never lose an update and never hold a lock.
 * fn receives the current value (json_t *, borrowed; NULL when the key does
 * not exist) and sets *next to the new value (a new reference that the
 * library steals). It returns 0 to write, LR_ECANCELLED to stop without
 * writing (lr_update then returns LR_ECANCELLED), or another negative code
 * that is passed back. A value that is not JSON (as for
 * lr_step_shared_put_many) is LR_EINVAL, nothing written. fn may run
 * several times; it runs on the caller's thread. */
typedef int (*lr_update_fn)(void *user, const void *current, void **next);
LR_API int lr_update(lr_client *c, const char *name, lr_update_fn fn, void *user,
              lr_err *err);

/* Read a shared value: *value (json_t *) is a new reference, NULL when the
 * key does not exist. */
LR_API int lr_shared_get(lr_client *c, const char *name, void **value, lr_err *err);

/* One shared value of a listing; everything in it is owned by the list. */
typedef struct lr_shared_entry {
	char *name;             /* the name (after P "shared/") */
	void *value;            /* json_t *; NULL with LR_SHARED_KEYS_ONLY */
	int64_t mod_revision;   /* etcd revision of its last write */
} lr_shared_entry;

/* Flags of lr_shared_list and lr_shared_delete; any other bit is
 * LR_EINVAL. */
enum {
	LR_SHARED_KEYS_ONLY = 1 << 0, /* names (and revisions) without values */
	LR_SHARED_PREFIX = 1 << 1,    /* delete: every name starting with it */
};

/* The shared values whose names start with name_prefix ("" for all), in
 * name order (bytewise), read page by page in name order: a value written
 * during the listing may or may not be in it, none is listed twice. On
 * success *out is an array of *n entries, freed by lr_shared_list_free.
 * LR_EINVAL when name_prefix has a character a name cannot have; a stored
 * value that is not JSON fails the listing with LR_EINVAL naming its key. */
LR_API int lr_shared_list(lr_client *c, const char *name_prefix, int flags,
                          lr_shared_entry **out, size_t *n, lr_err *err);
LR_API void lr_shared_list_free(lr_shared_entry *list, size_t n);

/* Delete the shared value `name`, or with LR_SHARED_PREFIX every shared
 * value whose name starts with it ("" deletes them all). Not fenced: for
 * tools and clean-up; a step writes with lr_step_shared_put. *deleted (may
 * be NULL) is how many were deleted. */
LR_API int lr_shared_delete(lr_client *c, const char *name, int flags,
                            int64_t *deleted, lr_err *err);

/* ========================================================================
 * Logging
 * ====================================================================== */

typedef enum lr_log_level {
	LR_LOG_DEBUG = 0,
	LR_LOG_INFO = 1,
	LR_LOG_WARN = 2,
	LR_LOG_ERROR = 3,
} lr_log_level;

/* One log line. Every pointer may be NULL and lives during the call. */
typedef struct lr_log_record {
	lr_log_level level;
	const char *runner;
	const char *task;
	const char *step;       /* step name */
	int64_t step_index;     /* -1 when no step */
	const char *msg;
} lr_log_record;

/* A log sink. Called from the runner's threads (its loop and its step
 * workers), one record at a time per runner. */
typedef void (*lr_log_fn)(void *user, const lr_log_record *rec);

/* The default sink: stderr, text when stderr is a terminal and one JSON
 * object per line otherwise; records below min_level are dropped. user is
 * ignored. */
LR_API void lr_log_stderr(void *user, const lr_log_record *rec);
/* Force the default sink's format: 0 auto, 1 text, 2 JSON; and its level. */
LR_API void lr_log_stderr_config(int format, lr_log_level min_level);

/* ========================================================================
 * Runner: claims tasks, runs their steps through handlers, checkpoints.
 * ====================================================================== */

typedef struct lr_runner lr_runner;
typedef struct lr_step lr_step;

/* What a step handler returns. */
typedef enum lr_step_result {
	LR_STEP_OK = 0,        /* commit the step (with the state as set) */
	LR_STEP_RETRY = 1,     /* a failed attempt: retried after backoff,
	                          until max_attempts */
	LR_STEP_FAIL = 2,      /* permanent failure: the task ends failed */
	/* Any other value returned is a bug of the handler's: taken as
	 * LR_STEP_FAIL, with an error that names the value. */
} lr_step_result;

/* A step handler. Runs on one of the runner's worker threads (one task per
 * worker, `concurrency` workers; fibers with lr_runner_opts.threads). It
 * must return soon after lr_step_cancelled() turns true; whatever it
 * returns then, nothing is committed for this step. */
typedef lr_step_result (*lr_step_fn)(lr_step *step, void *user);

/* The step context: valid during the handler call only; all strings and
 * json values are borrowed from it unless said otherwise. */
LR_API const char *lr_step_task_id(const lr_step *s);
LR_API int64_t lr_step_index(const lr_step *s);      /* 0-based */
LR_API int64_t lr_step_count(const lr_step *s);
LR_API const char *lr_step_name(const lr_step *s);
LR_API int64_t lr_step_attempt(const lr_step *s);    /* 1-based */
LR_API int64_t lr_step_fence(const lr_step *s);      /* the claim's fence */
LR_API const char *lr_step_runner(const lr_step *s);
/* The step's spec object {"name","run","timeout_s"} (json_t *). */
LR_API const void *lr_step_spec(const lr_step *s);
/* The task spec's env object (json_t *). */
LR_API const void *lr_step_env(const lr_step *s);
/* The locks the task holds, as its spec asks for them: {"PATH": "MODE"}
 * (json_t *; ancestors are held in IS or IX besides), NULL when none. */
LR_API const void *lr_step_locks(const lr_step *s);
/* The slot the task holds in each pool of its limits: {"KEY": index},
 * index from 0 to N-1 (json_t *), NULL when it names no limits. Shell
 * steps see both as JSON in LEASERUN_LOCKS and LEASERUN_SLOTS ("{}" when
 * none). */
LR_API const void *lr_step_slots(const lr_step *s);
/* The current state (json_t *, borrowed). */
LR_API void *lr_step_state(lr_step *s);
/* Replace the state (json_t *; the library steals the reference; NULL:
 * JSON null). It is committed with the step (LR_STEP_OK) or by
 * lr_step_checkpoint. Given lr_step_state(s) itself (changed in place),
 * nothing changes and no reference is taken. */
LR_API void lr_step_set_state(lr_step *s, void *state);
/* Commit the current state now without advancing the step (a fenced
 * checkpoint): a resumed step starts from it. LR_ELEASE when the claim is
 * gone (stop at once), LR_ETOOLARGE over 512 KiB. */
LR_API int lr_step_checkpoint(lr_step *s, lr_err *err);
/* Write shared values (P "shared/<name>", as lr_shared_get reads them) in
 * one txn fenced by the step's claim, exactly like its checkpoints: it
 * applies only while this runner still holds the task, so a stale holder
 * (paused, cut off, its lease expired) cannot overwrite what the task's
 * next holder wrote. values[i] is a json_t * (borrowed) stored at
 * names[i]; n is 1 to LR_SHARED_PUT_MAX. All or nothing. Errors:
 * LR_ELEASE when the claim is gone (stop at once: the step is stopped
 * too), LR_ECANCELLED when the step was stopped already, LR_EINVAL for an
 * invalid name, a NULL value or one that is not JSON (a string that is
 * not UTF-8, arrays and objects nested over 1000 deep, which could not be
 * read back), LR_ETOOLARGE when the values encode to
 * over 1 MiB together. A write whose reply was lost is sent again: writing
 * the same values twice leaves the same result, unless another writer
 * changed one of these names in between, which the second write then
 * overwrites. Names only this task writes (as a LangGraph saver's are)
 * are safe; for names several writers change, use lr_update. Worker
 * thread of the step only. */
#define LR_SHARED_PUT_MAX 100
LR_API int lr_step_shared_put_many(lr_step *s, size_t n, const char *const names[],
                                   const void *const values[], lr_err *err);
/* The same for one value. */
LR_API int lr_step_shared_put(lr_step *s, const char *name, const void *value,
                              lr_err *err);
/* What an in-process handler is guaranteed, and what it is not.
 *
 * A shell step (lr_shell_step) runs under a guard process that kills it
 * before the lease deadline, whatever happens to the runner. A handler
 * running inside the runner's process cannot be killed by force: it must
 * look. The three calls below tell it, from the clock, the moment the
 * deadline has passed, even when no other thread of the runner has run
 * yet (a process that was frozen past its deadline sees it at its first
 * check). A handler that checks at least every few hundred milliseconds,
 * and whose effects outside etcd are fenced, never overlaps the next
 * holder's execution of the step.
 *
 * What no handler can be promised: a handler that does not look keeps
 * running, and a whole host that freezes (a VM paused, the kernel stuck)
 * wakes up with no chance to check before its next instruction. Against
 * both, and in every case, the step's fence (lr_step_fence; LEASERUN_FENCE
 * for shell steps) is the defence: it strictly increases with every claim,
 * so an external system that stores the highest fence seen and refuses
 * writes with a lower one rejects a stale holder. Writes to etcd through
 * the step (checkpoints, shared values) are fenced already. */

/* True once the step must stop: lease lost or its deadline passed, task
 * cancelled, shutdown. */
LR_API int lr_step_cancelled(const lr_step *s);
/* Why the step must stop, if it must. */
typedef enum lr_step_stop {
	LR_STEP_GOES_ON = 0,   /* no reason to stop */
	LR_STEP_CANCELLED = 1, /* the task was cancelled */
	LR_STEP_LEASE_LOST = 2,/* the claim is gone (the lease lost, its deadline
	                          passed, or the claim deleted), also after a
	                          cancel or a shutdown began */
	LR_STEP_SHUTDOWN = 3,  /* the runner is stopping */
} lr_step_stop;
LR_API lr_step_stop lr_step_stop_reason(const lr_step *s);
/* Wait up to timeout_ms (or until it must stop; a year or more, such as
 * INT64_MAX: until it must stop; 0 or less: not at all); returns
 * lr_step_cancelled(). */
LR_API int lr_step_sleep(lr_step *s, int64_t timeout_ms);
/* A file descriptor that becomes readable once the step must stop: a
 * cancel, a shutdown, a lost lease, or the lease deadline passing (a timer
 * moved by every renewal), for handlers that poll. Only poll it; owned by
 * the library. */
LR_API int lr_step_cancel_fd(const lr_step *s);
/* The monotonic time (ms, as CLOCK_MONOTONIC) by which the step must have
 * stopped: the runner's lease deadline, moved later by every renewal. */
LR_API int64_t lr_step_deadline_ms(const lr_step *s);
/* A file descriptor (an eventfd) that becomes readable whenever a renewal
 * moved lr_step_deadline_ms; read 8 bytes from it to clear it. For
 * handlers that pass the deadline on (the shell step's guard). Owned by
 * the library. */
LR_API int lr_step_deadline_fd(const lr_step *s);
/* The runner's grace period (ms): how long a step asked to stop by a
 * graceful shutdown may take to finish; what a process-based handler gives
 * between SIGTERM and SIGKILL. */
LR_API int64_t lr_step_grace_ms(const lr_step *s);
/* Why the step failed, recorded with LR_STEP_RETRY or LR_STEP_FAIL. */
LR_API void lr_step_set_error(lr_step *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Log a line tagged with runner, task and step. */
LR_API void lr_step_log(lr_step *s, lr_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The built-in handler for shell steps: runs the step spec's "run" with
 * /bin/sh -c in its own process group under a guard process that stops it
 * by the lease deadline whatever happens to this process, as described in
 * docs/commands.md, "Shell steps". user is ignored. */
LR_API lr_step_result lr_shell_step(lr_step *step, void *user);

/* Remove the private state directories that shell steps left in dir (NULL:
 * $TMPDIR, else /tmp) when their runner and guard were killed; those of
 * steps running now, here or in other processes, are left alone (each is
 * locked by its guard). Nothing else is touched: only directories named
 * leaserun-<task>.<fence>.<attempt>.XXXXXX, owned by this process's
 * effective user, mode 0700, never through a symbolic link. Call it when a
 * runner using lr_shell_step starts. *removed (may be NULL) gets the count.
 * LR_ESYS when dir cannot be read or written: no shell step could start. */
LR_API int lr_shell_step_sweep(const char *dir, size_t *removed, lr_err *err);

/* Workers a runner may have (lr_runner_opts.concurrency). */
#define LR_CONCURRENCY_MAX 1024

typedef struct lr_runner_opts {
	const char *name;        /* default "<hostname>-<pid>" */
	int concurrency;         /* default 1; at most LR_CONCURRENCY_MAX */
	int ttl_s;               /* lease TTL asked for; default 10 */
	int grace_s;             /* default 10; -1 for 0; below -1: LR_EINVAL */
	int exit_when_idle;      /* stop once no task is pending or claimed */
	lr_log_fn log;           /* default lr_log_stderr */
	void *log_user;
	lr_log_level log_level;  /* records below it are not even made; one
	                            of lr_log_level (LR_EINVAL otherwise)
	                            (default LR_LOG_DEBUG: all go to log) */
	/* Threads the workers share. 0 (the default): a thread per worker.
	 * 1 to concurrency: the workers run as fibers spread over that many
	 * threads, each switching only where it waits for etcd, so that the
	 * reply to one group commit wakes one thread rather than one per
	 * worker: less CPU per task, for handlers that return promptly.
	 * Their handlers then run on a 2 MiB stack and must not block: a
	 * sleep of their own, a blocking read or a lock held long holds up
	 * every worker of the thread. lr_step_checkpoint and lr_step_sleep
	 * wait as a fiber does. Shell steps block: give them threads. */
	int threads;
} lr_runner_opts;

/* Lifecycle callbacks. All run on the thread inside lr_runner_run, never at
 * the same time; any may be NULL. Strings live during the call. */
typedef struct lr_runner_callbacks {
	void (*claimed)(void *user, const char *task, int64_t next_step,
	                int64_t attempt, int64_t fence);
	void (*step_committed)(void *user, const char *task, int64_t step,
	                       const char *name);
	void (*lease_lost)(void *user, const char *why);
	void (*task_done)(void *user, const char *task, lr_task_state state,
	                  const char *error);
} lr_runner_callbacks;

/* A runner on client c (which must outlive it). opts may be NULL (the
 * defaults). *out is freed by lr_runner_free.
 *
 * Life cycle: configure it (lr_runner_handle, lr_runner_set_callbacks),
 * then lr_runner_run, on one thread at a time; lr_runner_stop from any
 * thread; lr_runner_free once lr_runner_run has returned (or was never
 * called). */
LR_API int lr_runner_new(lr_client *c, const lr_runner_opts *opts, lr_runner **out,
                  lr_err *err);
/* Free r (NULL is allowed). Only while lr_runner_run is not running: the
 * runner's threads would go on using r. Called during a run, it prints
 * why on stderr and aborts the process, as freeing memory in use would
 * otherwise corrupt it silently (and it returns nothing to refuse with);
 * call lr_runner_stop and wait for lr_runner_run to return first. */
LR_API void lr_runner_free(lr_runner *r);

/* Handle steps named step_name with fn (step_name NULL: every step without
 * a handler of its own). A step with no handler fails the task with an
 * error naming it. Handlers are set while lr_runner_run is not running:
 * during a run (the workers read them without a lock), or with r or fn
 * NULL, or step_name "" (no step has it), it returns LR_EINVAL and
 * changes nothing. Having no lr_err, it
 * says why through r's log sink (LR_LOG_ERROR). LR_ENOMEM. */
LR_API int lr_runner_handle(lr_runner *r, const char *step_name, lr_step_fn fn,
                     void *user);
/* Replace the lifecycle callbacks (cb is copied). Like lr_runner_handle:
 * not during a run, r and cb required; LR_EINVAL otherwise, logged. */
LR_API int lr_runner_set_callbacks(lr_runner *r, const lr_runner_callbacks *cb,
                            void *user);

/* Run until stopped: register, claim and run tasks. Returns 0 after a
 * graceful stop (lr_runner_stop) or, with exit_when_idle, when idle;
 * LR_EINUSE when the runner name is held by a live runner; etcd errors
 * when the cluster cannot be reached at start; LR_EINVAL "the runner is
 * running already" when another thread is inside lr_runner_run with the
 * same r. Blocking. Once it has returned, it may be called again (after a
 * failure to start, or exit_when_idle); but a stop is for good: a runner
 * stopped by lr_runner_stop, also one stopped before it ran, returns 0
 * from every later lr_runner_run without taking a task (err cleared). */
LR_API int lr_runner_run(lr_runner *r, lr_err *err);

/* Ask the runner to stop gracefully (docs/how-it-works.md, "Runners"). Callable from any
 * thread and from a signal handler (async-signal-safe). NULL does
 * nothing, as free(NULL). */
LR_API void lr_runner_stop(lr_runner *r);

/* ---- statistics ----------------------------------------------------------- */

/* The number of buckets of lr_latency.le. */
#define LR_LATENCY_BUCKETS 18

/* A latency distribution in milliseconds, from a fixed-bucket histogram:
 * quantiles are within about 6 % of the true value (buckets are 12.5 %
 * wide and reported at their middle); count, mean, sum and max are exact.
 * All 0 when count is 0. */
typedef struct lr_latency {
	uint64_t count;
	double mean_ms;
	double p50_ms, p90_ms, p99_ms;
	double max_ms;
	double sum_ms;
	/* le[i]: the samples at or below lr_latency_bucket_s(i) (cumulative,
	 * as a Prometheus histogram counts them). */
	uint64_t le[LR_LATENCY_BUCKETS];
} lr_latency;

/* The upper bound of bucket i (0 <= i < LR_LATENCY_BUCKETS) in seconds:
 * 2^(i+7) microseconds, doubling from 0.000128 s to 16.777216 s. These
 * are edges of the histograms kept inside, so the counts are exact, not
 * interpolated. 0 for an i out of range. */
LR_API double lr_latency_bucket_s(int i);

/* Error codes counted apart in lr_etcd_method_stats.errors: [-code] for
 * LR_EINVAL (-1) .. -(LR_ETCD_ERROR_CODES - 1); [0] for any other. */
#define LR_ETCD_ERROR_CODES 24
/* Methods in lr_runner_stats.etcd (leaserun calls about a dozen). */
#define LR_ETCD_METHODS 16

/* The calls of one etcd method by a runner's client. */
typedef struct lr_etcd_method_stats {
	char method[48];          /* etcd's service and method, "KV/Txn" */
	int stream;               /* 1: a bidi stream (Watch/Watch,
	                             Lease/LeaseKeepAlive), 0: unary */
	uint64_t calls;           /* unary: calls made */
	uint64_t attempts;        /* unary: attempts, retries included */
	uint64_t errors;          /* unary: calls that failed, any code */
	uint64_t errors_by_code[LR_ETCD_ERROR_CODES];
	uint64_t reopens;         /* stream: calls opened after the one before
	                             ended (reconnects) */
	lr_latency latency;       /* unary: each attempt; stream: the round
	                             trips its owner times (LeaseKeepAlive: a
	                             renewal sent to etcd's answer) */
} lr_etcd_method_stats;

/* What a runner has done since lr_runner_new (across lr_runner_run calls).
 * A plain struct owned by the caller. */
typedef struct lr_runner_stats {
	uint64_t claims_won;      /* claims that gave this runner the task */
	uint64_t claims_lost;     /* another runner's claim came first (one
	                             txn, not an error) */
	uint64_t steps_committed; /* step-commit txns: every step but a task's
	                             last, which the completion txn commits */
	uint64_t attempts_failed; /* attempts that ended RETRY or FAIL */
	uint64_t tasks_finished;  /* done/<id> written by this runner: the sum
	                             of the next three */
	uint64_t tasks_succeeded, tasks_failed, tasks_cancelled;
	uint64_t tasks_let_go;    /* given up unfinished: released on shutdown,
	                             dropped on lease loss or after an etcd
	                             error; another runner resumes them */
	uint64_t lease_losses;
	lr_latency claim;      /* a won claim: from the worker taking the task
	                          to the claim txn's reply (with the read of
	                          spec and checkpoint, when one was needed) */
	lr_latency commit;     /* one step-commit txn */
	lr_latency completion; /* the completion txn (done/<id> written and
	                          the claim deleted, with the last step) */

	/* Step executions (handler calls) by how they ended: ok (committed
	 * or completing the task), retry and fail (as the handler returned),
	 * stopped (cancel, lease loss or shutdown came first: nothing was
	 * committed, whatever the handler returned), not_started (a shell step
	 * this runner could not start: no attempt of the task's, the task
	 * released). */
	uint64_t steps_ok, steps_retry, steps_fail, steps_stopped, steps_not_started;

	/* Gauges: the figures now. */
	uint64_t tasks_running;   /* claims this runner holds */
	uint64_t slots;           /* workers (concurrency) */
	uint64_t slots_free;      /* workers with no task */
	uint64_t tasks_pending;   /* tasks this runner sees unclaimed: pending
	                             in its watched set, or queued for one of
	                             its workers but not yet claimed */
	double lease_remaining_s; /* until the lease deadline (the send time
	                             of the last renewal etcd answered, plus
	                             the TTL); 0 while there is no lease */

	/* The runner's etcd client (shared by the runners of one lr_client:
	 * the sum counts each client once). */
	lr_latency lease_renewal; /* keepalive round trips (the
	                             Lease/LeaseKeepAlive entry's latency) */
	uint64_t watch_reconnects;     /* Watch/Watch stream reopens */
	uint64_t keepalive_reconnects; /* Lease/LeaseKeepAlive reopens */
	uint64_t etcd_members_left_out; /* gauge: members that let a call or a
	                             stream go unanswered, left out (calls go
	                             to the others) until they answer again */
	size_t n_etcd;            /* entries of etcd[] in use */
	lr_etcd_method_stats etcd[LR_ETCD_METHODS]; /* in the order first
	                             called */
} lr_runner_stats;

/* Fill *out with r's statistics. Any thread, at any time, also while
 * lr_runner_run runs: cheap (no etcd call, no runner lock, about 10 KiB
 * of struct); the figures are then read one after the other, not at a
 * single instant. */
LR_API void lr_runner_get_stats(const lr_runner *r, lr_runner_stats *out);

/* The statistics of n runners together (for example every runner hosted
 * in one process): counters and gauges summed, latency histograms merged;
 * lease_remaining_s is the least of the runners' (the nearest deadline). */
LR_API void lr_runner_get_stats_sum(lr_runner *const *rs, size_t n,
                                    lr_runner_stats *out);

/* ---- Prometheus metrics ----------------------------------------------------- */

/* The statistics of n runners together (as lr_runner_get_stats_sum) in the
 * Prometheus text format (version 0.0.4), names prefixed "leaserun_", for
 * an embedder that serves /metrics itself. On success *text is a
 * NUL-terminated string of *len bytes, freed by free(). */
LR_API int lr_metrics_text(lr_runner *const *rs, size_t n, char **text,
                           size_t *len, lr_err *err);

typedef struct lr_metrics_server lr_metrics_server;

/* Serve lr_metrics_text of rs[0..n) on GET /metrics at `listen`
 * ("ADDR:PORT", "[V6ADDR]:PORT", or ":PORT" for 127.0.0.1; port 0 picks
 * a free one), from a thread of its own: a scrape reads atomics and never
 * waits for a runner; slow, idle or malformed connections are cut off and
 * cannot delay the runners. The runners (the array is copied) must outlive
 * the server. Errors: LR_EINVAL (address), LR_ESYS (cannot listen). */
LR_API int lr_metrics_serve(lr_runner *const *rs, size_t n, const char *listen,
                            lr_metrics_server **out, lr_err *err);
/* The address actually listened on ("127.0.0.1:9464"). Borrowed. */
LR_API const char *lr_metrics_server_address(const lr_metrics_server *s);
/* Stop serving and free. NULL is allowed. */
LR_API void lr_metrics_server_free(lr_metrics_server *s);

#ifdef __cplusplus
}
#endif

#endif /* LEASERUN_H */
