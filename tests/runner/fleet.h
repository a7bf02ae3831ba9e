/* fleet.h - real `leaserun worker` processes for the runner tests, started
 * against the harness's etcd with a prefix of their own. */
#ifndef LR_TEST_FLEET_H
#define LR_TEST_FLEET_H

#include <stdbool.h>
#include <sys/types.h>

#include "leaserun.h"

#define FLEET_MAX 8

typedef struct fleet {
	const char *endpoints;
	char prefix[64];
	char dir[256];           /* scratch directory: logs and step markers */
	pid_t pids[FLEET_MAX];
	char names[FLEET_MAX][32];
	lr_client *client;
} fleet;

/* A fleet on a fresh prefix, with its own scratch directory. */
void fleet_init(fleet *f, const char *endpoints, const char *name);
/* Start runner i (`leaserun worker`) with extra flags (NULL-ended); waits
 * until it is registered. Like every runner of a fleet, it gets SIGKILL
 * when the thread that started it exits (a test that failed or was killed
 * leaves no runner behind), so start runners from the main thread. */
pid_t fleet_start(fleet *f, int i, const char *const *extra);
/* Start runner i as `name` against endpoints (NULL: the fleet's) without
 * waiting for it to register. */
pid_t fleet_spawn(fleet *f, int i, const char *name, const char *endpoints,
                  const char *const *extra);
/* fleet_spawn, then wait until it is registered (fails the test when it
 * exits first or takes over 30 s). */
pid_t fleet_start_named(fleet *f, int i, const char *name, const char *endpoints,
                        const char *const *extra);
/* True when a live runner named name is registered under runners/. */
bool fleet_registered(fleet *f, const char *name);
/* The lease of the live runner named name; 0 when there is none. */
int64_t fleet_runner_lease(fleet *f, const char *name);
/* The TTL left of runner i's lease, in whole seconds as etcd tells it. */
int64_t fleet_lease_left(fleet *f, int i);
/* Return just after runner i's lease was renewed, as etcd counts it: the
 * TTL left goes up, from `left` (< 0: as it is now) at first; fails the
 * test after 15 s. */
void fleet_wait_renewal(fleet *f, int i, int64_t left);
/* Wait for runner i to exit; returns its exit status (-1 if signalled). */
int fleet_wait(fleet *f, int i, int timeout_ms);
/* Kill every runner left and free everything. */
void fleet_destroy(fleet *f);

/* Submit a spec (JSON text with %s for the scratch dir allowed once). */
void fleet_submit(fleet *f, const char *id, const char *spec_fmt);

/* Status of a task (fails the test on error). */
lr_task_state fleet_state(fleet *f, const char *id, char *runner, size_t size,
                          int64_t *next_step, int64_t *attempt);
/* Poll until the task is in `st` (or done when st < 0); returns the time
 * taken in ms, or -1 after timeout_ms. */
int64_t fleet_wait_state(fleet *f, const char *id, int st, int timeout_ms);
/* How many keys are under the fleet's prefix + kind (LR_K_LOCKS, ...). */
int64_t fleet_count_keys(fleet *f, const char *kind);
/* Index of the runner holding the task, -1 if none. */
int fleet_holder(fleet *f, const char *id);

/* Replay the fleet prefix's history (history.h) and fail the test on any
 * violation; want_finals >= 0: exactly that many done records. */
void fleet_check_history(fleet *f, long want_finals);

/* Whether a line of runner i's log holds text. */
bool fleet_log_has(fleet *f, int i, const char *text);

/* Lines of the scratch file "marks" that start with prefix. */
int fleet_count_marks(fleet *f, const char *prefix);
/* Wait until that count reaches n; -1 after timeout. */
int fleet_wait_marks(fleet *f, const char *prefix, int n, int timeout_ms);

#endif
