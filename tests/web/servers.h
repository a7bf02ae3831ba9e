/* servers.h - the two HTTP servers under test as real processes: `leaserun
 * web` for a fleet's prefix, and a worker's --metrics; where each listens. */
#ifndef LR_TEST_SERVERS_H
#define LR_TEST_SERVERS_H

#include <stdbool.h>

#include "etcd_harness.h"
#include "fleet.h"
#include "proc.h"

#define ADDR_SIZE 64

/* The one-member etcd of a test program: TEST_MAIN(web_etcd_start,
 * web_etcd_stop), then etcdh_endpoints(web_etcd). */
extern etcdh_cluster *web_etcd;
int web_etcd_start(void);
void web_etcd_stop(void);

/* Start `leaserun web` on a free loopback port for f's prefix; its output
 * goes to <f->dir>/web.log. addr receives "127.0.0.1:PORT". Fails the test
 * when it does not print its address within 10 s. */
void web_start(proc_bg *p, fleet *f, bool allow_cancel, char addr[ADDR_SIZE]);
/* The same with more flags (NULL-terminated). */
void web_start_with(proc_bg *p, fleet *f, const char *const *extra, char addr[ADDR_SIZE]);

/* Start runner i of f with /metrics on a free loopback port (plus extra
 * flags, NULL-ended, may be NULL); addr receives where. */
void metrics_worker_start(fleet *f, int i, const char *const *extra,
                          char addr[ADDR_SIZE]);

/* The value of one sample in a /metrics text ("name" or "name{labels}" as
 * written); -1 when absent. */
double metric_value(const char *text, const char *series);

/* Check text with `promtool check metrics` (Debian's prometheus package,
 * or $PROMTOOL): fails the test with promtool's complaints. */
void promtool_check(const char *text);

/* GET /metrics from addr; the text (caller frees). Fails the test unless
 * the reply is 200. */
char *metrics_get(const char *addr);

#endif
