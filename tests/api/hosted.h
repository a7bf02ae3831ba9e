/* hosted.h - what the API tests share: one real etcd for the test program,
 * and runners hosted on threads of the test process. */
#ifndef LR_TEST_HOSTED_H
#define LR_TEST_HOSTED_H

#include <pthread.h>
#include <stdint.h>

#include "etcd_harness.h"
#include "leaserun.h"

/* TEST_MAIN's setup and teardown: one etcd member for the program, or,
 * with HOSTED_ENDPOINTS in the environment (a child process the test
 * started), the etcd it names. */
#define HOSTED_ENDPOINTS "LR_TEST_HOSTED_ENDPOINTS"
int hosted_setup(void);
void hosted_teardown(void);
/* The endpoints of that etcd. */
const char *hosted_endpoints(void);
/* That etcd, to pause or stop (NULL in a child process). */
etcdh_cluster *hosted_cluster(void);

/* A client on that etcd under prefix; fails the test on error. */
lr_client *hosted_client(const char *prefix);

/* A log sink that shows warnings and errors only (all with TEST_VERBOSE). */
void hosted_quiet(void *user, const lr_log_record *rec);

/* Runners made here run their workers as fibers on this many threads
 * when the environment names it. */
#define HOSTED_THREADS "LR_TEST_HOSTED_THREADS"

/* A runner run by lr_runner_run on a thread of its own. */
struct hosted {
	lr_runner *r;
	pthread_t th;
	int rc;
	lr_err err;
};

/* Create it (TTL 2 s, grace 1 s, quiet logs); handlers are added next. */
void hosted_new(struct hosted *h, lr_client *c, const char *name, int concurrency);
/* The same, of concurrency 1, with its warnings and errors (only) going to
 * sink. */
void hosted_new_logged(struct hosted *h, lr_client *c, const char *name, lr_log_fn sink);
/* Start lr_runner_run on its thread. */
void hosted_start(struct hosted *h);
/* Stop it and wait for lr_runner_run to return 0 (fails the test
 * otherwise); the runner stays, so that its statistics can be read. */
void hosted_stop(struct hosted *h);
/* hosted_stop, then free the runner. */
void hosted_end(struct hosted *h);

/* Poll until the task is finished; its final state. Fails the test after
 * timeout_ms. */
lr_task_state hosted_wait_done(lr_client *c, const char *id, int timeout_ms);
/* Submit a spec given as JSON text; fails the test on error. */
void hosted_submit(lr_client *c, const char *json);

/* Run task `id` of one step (named "one") to its end on a runner of its
 * own whose handler is fn; its final state. Fails the test after 10 s. */
lr_task_state hosted_run_one(lr_client *c, const char *runner, lr_step_fn fn, void *user,
                             const char *id);

/* How many keys are under the prefix of kind (LR_K_*), followed by rest. */
int64_t hosted_count(lr_client *c, const char *kind, const char *rest);
/* The lease of task id's claim, or with id NULL of any task's; 0: none. */
int64_t hosted_claim_lease(lr_client *c, const char *id);

#endif
