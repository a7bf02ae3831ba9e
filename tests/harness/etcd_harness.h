/* etcd_harness.h - real etcd servers for integration tests.
 *
 * Starts one or three `etcd` processes on free loopback ports, each with a
 * private temporary directory, and lets a test kill, stop, pause and restart
 * them. Every member dies with the test process: PR_SET_PDEATHSIG in the
 * child, plus an atexit handler and SIGINT/SIGTERM/SIGABRT/SIGSEGV handlers
 * that kill whatever this process started.
 *
 * Threads: call it from one thread at a time. PR_SET_PDEATHSIG fires when
 * the thread that started a member exits, so start and restart members from
 * a thread that outlives them (normally the test's main thread).
 *
 * Errors: functions returning int give 0 on success and -1 on failure, with
 * the reason on stderr (and the tail of the member's log when a member did
 * not come up). */
#ifndef ETCD_HARNESS_H
#define ETCD_HARNESS_H

#include <sys/types.h>

typedef struct etcdh_cluster etcdh_cluster;

typedef struct etcdh_opts {
	/* 1 or 3. */
	int members;
	/* NULL-terminated extra etcd flags, e.g. "--auth-token-ttl=2"; may
	 * be NULL. They come after the harness's own flags, and etcd keeps the
	 * last value of a repeated flag, so they also override defaults such
	 * as "--log-level=error". Copied: the caller keeps ownership. */
	const char *const *extra_args;
	/* TLS on the client URLs (https) with this certificate and key (PEM
	 * files); NULL for plain http. The harness's own etcdctl calls
	 * (health, leader) do not verify the server certificate, so any
	 * names may be in it. Copied. */
	const char *tls_cert, *tls_key;
	/* With TLS: require client certificates signed by this CA
	 * (--client-cert-auth); the harness's etcdctl presents ctl_cert and
	 * ctl_key. NULL for none. Copied. */
	const char *client_ca, *ctl_cert, *ctl_key;
} etcdh_opts;

/* Starts the members with --heartbeat-interval=100 --election-timeout=1000
 * (so the minimum lease TTL is 2 s) and waits until every member answers
 * health (for three members, that implies an elected leader). Retries with
 * other ports when one was taken in the meantime. On success *out is a new
 * cluster, to be freed with etcdh_destroy. */
int etcdh_start(const etcdh_opts *o, etcdh_cluster **out);

/* "127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3": client endpoints of every
 * member, running or not. Borrowed: valid until etcdh_destroy. */
const char *etcdh_endpoints(const etcdh_cluster *c);

/* "127.0.0.1:Pi", the client endpoint of member i. Borrowed. NULL when i is
 * out of range. */
const char *etcdh_endpoint(const etcdh_cluster *c, int i);

/* The directory of member i: etcd's data in data/, its output in etcd.log.
 * Borrowed; removed by etcdh_destroy. NULL when i is out of range. */
const char *etcdh_dir(const etcdh_cluster *c, int i);

int etcdh_members(const etcdh_cluster *c);

/* CPU time (user + system) member i has used so far, in ms; -1 when it is
 * not running or i is out of range. */
long etcdh_cpu_ms(const etcdh_cluster *c, int i);
/* The same for any process of ours, from /proc/PID/stat. */
long etcdh_pid_cpu_ms(pid_t pid);

/* SIGKILL member i and reap it. Killing a member that is down is a no-op. */
int etcdh_kill(etcdh_cluster *c, int i);

/* SIGTERM member i (waking it first if paused) and wait for it to exit;
 * SIGKILL after 10 s. */
int etcdh_stop(etcdh_cluster *c, int i);

/* Start a member that was killed or stopped again, with the same ports and
 * data directory (--initial-cluster-state existing), and wait until it
 * answers health. */
int etcdh_restart(etcdh_cluster *c, int i);

/* SIGSTOP / SIGCONT member i: it keeps its sockets but answers nothing. */
int etcdh_pause(etcdh_cluster *c, int i);
int etcdh_resume(etcdh_cluster *c, int i);

/* Index of the member that reports itself leader, asking each running,
 * unpaused member; -1 when none does. */
int etcdh_leader(etcdh_cluster *c);

/* How many leases etcd has, asking the first running, unpaused member
 * that answers; -1 when none does. */
int etcdh_lease_count(etcdh_cluster *c);

/* Wait until every running, unpaused member answers health, for at most
 * timeout_s seconds. */
int etcdh_wait_healthy(etcdh_cluster *c, double timeout_s);

/* Kill every member, remove their directories, free c. NULL is allowed.
 * Clusters still alive at exit() are destroyed by the atexit handler. */
void etcdh_destroy(etcdh_cluster *c);

#endif
