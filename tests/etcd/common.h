/* common.h - shared set-up of the etcd client tests: one real etcd (or
 * three) started by the harness for the whole test program, and a client. */
#ifndef LR_TEST_ETCD_COMMON_H
#define LR_TEST_ETCD_COMMON_H

#include "etcd/kv.h"
#include "etcd/lease.h"
#include "etcd/transport.h"
#include "etcd_harness.h"

extern etcdh_cluster *cluster;

/* Start `members` etcd members (extra flags may be NULL); 0 on success. */
int cluster_up(int members, const char *const *extra);
void cluster_down(void);

/* A new client on the whole cluster (or one endpoint when not NULL), with
 * short timeouts; fails the current test on error. */
lr_etcd *client_open(const char *endpoint);

/* A lease of ttl_s granted on c and kept alive by a new keepalive (freed
 * by the caller), which calls lost(user, ...) if it is lost; *id and
 * *granted (may be NULL) are the lease's. Fails the test on error. */
lr_keepalive *kept_lease(lr_etcd *c, int64_t ttl_s, int64_t *id, int64_t *granted,
                         lr_lease_lost_fn lost, void *user);

/* A fresh key prefix for one test case: "/t/<case>/<n>/". */
const char *test_prefix(const char *name);

/* Poll (test helper, not library code) until cond() or timeout. */
int wait_until(int (*cond)(void *), void *arg, int timeout_ms);

/* The sum of etcd's metric `name` over its lines holding `label` (NULL:
 * all), on member i, read from its /metrics; -1 when none can be read. */
long etcd_metric(int i, const char *name, const char *label);

/* etcd's count of watchers (etcd_debugging_mvcc_watcher_total) on member
 * i, read from its /metrics; -1 when it cannot be read. */
long etcd_watcher_count(int i);

#endif
