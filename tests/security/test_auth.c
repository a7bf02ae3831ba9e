/* test_auth.c - etcd authentication and roles against a real etcd with auth
 * enabled and tokens that expire after 2 s of disuse (--auth-token-ttl=2):
 * a runner under a role limited to its prefix does its work; a user without
 * the role is refused with a clear error and changes nothing; a wrong
 * password is refused without being shown; the password appears in no
 * output, log, step environment or etcd value; and leases, watches and
 * dispatch carry on across token expiries. */
#include <poll.h>
#include <pthread.h>
#include <pty.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "base/clock.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "etcd/lease.h"
#include "etcd/watch.h"
#include "etcd_harness.h"
#include "leaserun.h"
#include "proc.h"
#include "test.h"

#define TOKEN_TTL_S 2
#define ROOT_PW "root-Pw-4411"
/* Distinctive, so that any leak is found by a plain search. */
#define RUNNER_PW "Xq7-runner-SECRET-5309"
#define OUTSIDER_PW "outsider-Pw-8812"
#define VIEWER_PW "viewer-Pw-2290"
#define FLAKY_PW "flaky-Pw-7731"
#define ROLE_PREFIX "/lr-auth/"

static etcdh_cluster *cluster;
static char tmpdir[512];

/* ---- set-up ---------------------------------------------------------- */

/* Fails the test when the runner's password is in text. */
static void check_clean(const char *what, const char *text)
{
	if (strstr(text, RUNNER_PW) != NULL)
		TEST_FAIL("the password shows in %s", what);
}

/* etcdctl with these arguments on the cluster and input on its stdin
 * (NULL: none); its exit status. */
static int etcdctl_input(const char *const *args, const char *input)
{
	char ep[64];
	char *argv[24];
	int n = 0;
	snprintf(ep, sizeof(ep), "--endpoints=%s", etcdh_endpoint(cluster, 0));
	argv[n++] = "/usr/bin/env";
	argv[n++] = "etcdctl";
	argv[n++] = ep;
	for (; *args != NULL && n < 23; args++)
		argv[n++] = (char *)*args;
	argv[n] = NULL;
	const char *env[] = { "ETCDCTL_API=3", NULL };
	proc_result r = proc_run(argv, env, input, 20000);
	int st = r.status;
	proc_result_free(&r);
	return st;
}

static int etcdctl(const char *const *args)
{
	return etcdctl_input(args, NULL);
}

/* The least-privilege recipe of docs/security.md, "Least privilege". */
static int enable_auth(void)
{
	const char *const steps[][8] = {
		{ "user", "add", "root", "--new-user-password=" ROOT_PW },
		{ "user", "grant-role", "root", "root" },
		{ "role", "add", "leaserun-runner" },
		{ "role", "grant-permission", "leaserun-runner", "--prefix=true",
		  "readwrite", ROLE_PREFIX },
		{ "user", "add", "runner", "--new-user-password=" RUNNER_PW },
		{ "user", "grant-role", "runner", "leaserun-runner" },
		{ "user", "add", "outsider", "--new-user-password=" OUTSIDER_PW },
		{ "role", "add", "leaserun-viewer" },
		{ "role", "grant-permission", "leaserun-viewer", "--prefix=true",
		  "read", ROLE_PREFIX },
		{ "user", "add", "viewer", "--new-user-password=" VIEWER_PW },
		{ "user", "grant-role", "viewer", "leaserun-viewer" },
		{ "auth", "enable" },
	};
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		if (etcdctl(steps[i]) != 0)
			return -1;
	return 0;
}

/* A client with the given credentials; fails the test on error. */
static lr_client *open_as(const char *user, const char *password,
                          const char *prefix)
{
	lr_client_opts o = {
		.endpoints = etcdh_endpoints(cluster),
		.prefix = prefix,
		.dial_timeout_s = 5,
		.call_timeout_s = 5,
		.user = user,
		.password = password,
	};
	lr_client *c = NULL;
	lr_err err = { 0 };
	CHECK_OK(lr_client_open(&o, &c, &err), &err);
	return c;
}

/* Every key and value under prefix, read as root, as one string
 * ("key=value\n..."; malloc'd), and their number in *count. */
static char *dump_prefix(const char *prefix, int64_t *count)
{
	lr_client *root = open_as("root", ROOT_PW, prefix);
	lr_range_opts o = { .key = prefix, .flags = LR_KEY_PREFIX };
	lr_range_result r;
	lr_err err = { 0 };
	CHECK_OK(lr_kv_range(lr_client_etcd(root), &o, &r, &err), &err);
	size_t size = 1;
	for (size_t i = 0; i < r.n; i++)
		size += r.kvs[i].key_len + r.kvs[i].value_len + 2;
	char *out = malloc(size), *p = out;
	CHECK(out != NULL);
	for (size_t i = 0; i < r.n; i++)
		p += sprintf(p, "%s=%.*s\n", r.kvs[i].key, (int)r.kvs[i].value_len,
		             r.kvs[i].value);
	*p = '\0';
	if (count != NULL)
		*count = (int64_t)r.n;
	lr_range_result_free(&r);
	lr_client_close(root);
	return out;
}

/* The environment of a command: the cluster, a prefix, and more. */
struct env {
	char endpoints[128], prefix[128];
	const char *v[8];
};

static const char *const *env_of(struct env *e, const char *prefix,
                                 const char *a, const char *b)
{
	snprintf(e->endpoints, sizeof(e->endpoints), "LEASERUN_ENDPOINTS=%s",
	         etcdh_endpoints(cluster));
	snprintf(e->prefix, sizeof(e->prefix), "LEASERUN_PREFIX=%s", prefix);
	int n = 0;
	e->v[n++] = e->endpoints;
	e->v[n++] = e->prefix;
	if (a != NULL)
		e->v[n++] = a;
	if (b != NULL)
		e->v[n++] = b;
	e->v[n] = NULL;
	return e->v;
}

static const char spec_one[] =
    "{\"id\":\"t1\",\"steps\":[{\"name\":\"only\",\"run\":\"true\"}]}";

/* ---- roles ------------------------------------------------------------ */

TEST(a_wrong_password_is_refused_naming_user_and_endpoint_but_not_the_password)
{
	struct env e;
	const char *const *env = env_of(&e, ROLE_PREFIX "pw/", NULL, NULL);
	proc_result r = proc_cli(env, NULL, "status", "--user",
	                         "runner:Wrong-Pw-7777", (char *)NULL);
	CHECK_INT(r.status, ==, 1);
	CHECK_HAS(r.err, etcdh_endpoint(cluster, 0));
	CHECK_HAS(r.err, "authentication as etcd user runner failed");
	CHECK(strstr(r.err, "Wrong-Pw-7777") == NULL);
	CHECK(strstr(r.out, "Wrong-Pw-7777") == NULL);
	proc_result_free(&r);

	/* No user at all: etcd wants one, and the message says so. */
	r = proc_cli(env, NULL, "status", (char *)NULL);
	CHECK_INT(r.status, ==, 1);
	CHECK_HAS(r.err, "give --user");
	proc_result_free(&r);
}

TEST(a_runner_under_a_role_for_its_prefix_completes_a_task)
{
	struct env e;
	const char *const *env = env_of(&e, ROLE_PREFIX "rbac/",
	                                "LEASERUN_USER=runner",
	                                "LEASERUN_PASSWORD=" RUNNER_PW);
	proc_result r = proc_cli(env, spec_one, "submit", "-", (char *)NULL);
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "t1\n");
	proc_result_free(&r);
	r = proc_cli(env, NULL, "worker", "--exit-when-idle", "--ttl", "2",
	             "--name", "rbac-runner", (char *)NULL);
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	r = proc_cli(env, NULL, "status", "t1", "--json", (char *)NULL);
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.out, "\"state\": \"succeeded\"");
	proc_result_free(&r);
	r = proc_cli(env, NULL, "runners", (char *)NULL);
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
}

TEST(a_viewer_with_read_only_access_sees_status_but_cannot_change_anything)
{
	struct env e;
	const char *const *env = env_of(&e, ROLE_PREFIX "rbac/", "LEASERUN_USER=viewer",
	                                "LEASERUN_PASSWORD=" VIEWER_PW);
	const char *const reads[][3] = { { "status", NULL }, { "status", "--json" },
		                         { "runners", NULL } };
	for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++) {
		proc_result r = proc_cli(env, NULL, reads[i][0], reads[i][1], (char *)NULL);
		CHECK_INT(r.status, ==, 0);
		proc_result_free(&r);
	}
	proc_result r = proc_cli(env, "{\"steps\":[{\"name\":\"a\",\"run\":\"true\"}]}",
	                         "submit", "-", (char *)NULL);
	CHECK_INT(r.status, ==, 1);
	CHECK_HAS(r.err, "permission denied");
	proc_result_free(&r);
}

/* Read from the pty until `want` shows up in what was read (into buf),
 * the child closes it, or timeout_ms passes. */
static bool pty_read_until(int fd, char *buf, size_t size, size_t *len,
                           const char *want, int timeout_ms)
{
	int64_t end = lr_mono_ms() + timeout_ms;
	while (strstr(buf, want) == NULL) {
		int left = (int)(end - lr_mono_ms());
		struct pollfd p = { fd, POLLIN, 0 };
		if (left <= 0 || poll(&p, 1, left) <= 0)
			return false;
		ssize_t n = read(fd, buf + *len, size - 1 - *len);
		if (n <= 0)
			return false;
		*len += (size_t)n;
		buf[*len] = '\0';
	}
	return true;
}

TEST(a_missing_password_is_asked_on_the_terminal_without_echo)
{
	struct env e;
	const char *const *env = env_of(&e, ROLE_PREFIX "prompt/",
	                                "LEASERUN_USER=runner", NULL);
	const char *args[] = { "runners", NULL };
	char *argv[8];
	proc_cli_argv(argv, 8, args);
	int fd = -1;
	pid_t pid = forkpty(&fd, NULL, NULL, NULL);
	CHECK(pid >= 0);
	if (pid == 0) {
		for (const char *const *v = env; *v != NULL; v++)
			putenv((char *)*v);
		unsetenv("LEASERUN_PASSWORD");
		execv(argv[0], argv);
		_exit(127);
	}
	char buf[8192] = "";
	size_t len = 0;
	CHECK(pty_read_until(fd, buf, sizeof(buf), &len,
	                     "Password for etcd user runner: ", 10000));
	struct termios t;
	CHECK(tcgetattr(fd, &t) == 0);
	CHECK((t.c_lflag & ECHO) == 0);
	CHECK(write(fd, RUNNER_PW "\n", strlen(RUNNER_PW) + 1) > 0);
	pty_read_until(fd, buf, sizeof(buf), &len, "no runners", 10000);
	int st = 0;
	CHECK(waitpid(pid, &st, 0) == pid);
	close(fd);
	fprintf(stderr, "   terminal: %s\n", buf);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	CHECK_HAS(buf, "no runners"); /* it connected */
	check_clean("the terminal", buf);
}

/* No lease is left behind by a refused runner: etcdctl lease list. */
static int leases_now(void)
{
	char ep[64];
	snprintf(ep, sizeof(ep), "--endpoints=%s", etcdh_endpoint(cluster, 0));
	char *argv[] = { "/usr/bin/env", "etcdctl", ep,
		         "--user=root:" ROOT_PW, "lease", "list", NULL };
	proc_result r = proc_run(argv, NULL, NULL, 20000);
	CHECK_INT(r.status, ==, 0);
	int n = -1;
	CHECK(sscanf(r.out, "found %d leases", &n) == 1);
	proc_result_free(&r);
	return n;
}

TEST(a_user_without_the_role_is_denied_clearly_and_nothing_changes)
{
	struct env e;
	const char *prefix = ROLE_PREFIX "deny/";
	const char *const *env = env_of(&e, prefix, "LEASERUN_USER=outsider",
	                                "LEASERUN_PASSWORD=" OUTSIDER_PW);
	int leases = leases_now();
	const char *const cmds[][5] = {
		{ "submit", "-" },
		{ "status" },
		{ "status", "t1" },
		{ "cancel", "t1" },
		{ "runners" },
		{ "purge", "--older-than", "0s" },
		{ "worker", "--exit-when-idle", "--ttl", "2" },
	};
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		const char *const *c = cmds[i];
		proc_result r = proc_cli(env, spec_one, c[0], c[1], c[2], c[3],
		                         c[4], (char *)NULL);
		if (r.status != 1)
			TEST_FAIL("%s: exit %d", c[0], r.status);
		CHECK_HAS(r.err, etcdh_endpoint(cluster, 0));
		CHECK_HAS(r.err, "permission denied");
		CHECK_HAS(r.err, "outsider");
		CHECK_STR(r.out, ""); /* nothing was done: nothing to report */
		proc_result_free(&r);
	}
	int64_t keys = -1;
	free(dump_prefix(prefix, &keys));
	CHECK_INT(keys, ==, 0);
	CHECK_INT(leases_now(), ==, leases);
}

/* ---- secrets ---------------------------------------------------------- */

/* A step that shows what it can see: its environment and its runner's
 * command line (where `ps` would show a password given on it). */
static const char spec_nosy[] =
    "{\"id\":\"nosy\",\"steps\":["
    "{\"name\":\"show\",\"run\":\"env; echo cmdline: $(tr '\\\\0' ' ' < /proc/$PPID/cmdline);"
    " echo environ: $(tr '\\\\0' ' ' < /proc/$PPID/environ)\"},"
    "{\"name\":\"keep\",\"run\":\"printf '{\\\"user\\\":\\\"%s\\\",\\\"pw\\\":\\\"%s\\\"}' "
    "\\\"${LEASERUN_USER:-none}\\\" \\\"${LEASERUN_PASSWORD:-none}\\\" > $LEASERUN_STATE_OUT\"}]}";

TEST(the_password_shows_in_no_output_log_step_or_etcd_value)
{
	struct env e;
	const char *prefix = ROLE_PREFIX "secret/";
	const char *const *env = env_of(&e, prefix, "LEASERUN_USER=runner:" RUNNER_PW,
	                                "LEASERUN_PASSWORD=" RUNNER_PW);
	struct env e2;
	const char *const *env_flag = env_of(&e2, prefix, NULL, NULL);

	/* The password on the command line, then from the environment. */
	proc_result r = proc_cli(env_flag, spec_nosy, "submit", "-", "--user",
	                         "runner:" RUNNER_PW, (char *)NULL);
	CHECK_INT(r.status, ==, 0);
	check_clean("submit's stdout", r.out);
	check_clean("submit's stderr", r.err);
	proc_result_free(&r);

	char log[600];
	snprintf(log, sizeof(log), "%s/worker.log", tmpdir);
	const char *args[] = { "worker", "--name", "nosy-runner", "--ttl", "2",
		               "--exit-when-idle", "--user=runner:" RUNNER_PW, NULL };
	char *argv[16];
	proc_cli_argv(argv, 16, args);
	/* The password on the command line and twice in the environment,
	 * where --user wins. */
	proc_bg w;
	proc_start(&w, argv, env, log);
	CHECK_INT(proc_wait(&w, 30000), ==, 0);
	char *out = proc_slurp(log);
	check_clean("the worker's log", out);
	/* The step ran, printed its environment, and found the runner's
	 * command line with the password blanked out. */
	CHECK_HAS(out, "\"msg\":\"LEASERUN_TASK_ID=nosy\"");
	CHECK_HAS(out, "--user=runner:*****");
	CHECK_HAS(out, "environ: ");
	/* Nor its length: five stars, whatever it is. */
	CHECK(strstr(out, "******") == NULL);
	/* Root reads a non-dumpable process's environment block too. */
	if (geteuid() == 0)
		CHECK_HAS(out, "LEASERUN_USER=runner:*****");
	CHECK(strstr(out, "\"msg\":\"LEASERUN_PASSWORD=") == NULL);
	CHECK(strstr(out, "\"msg\":\"LEASERUN_USER=") == NULL);
	/* Logs are JSON lines when not on a terminal. */
	CHECK_HAS(out, "{\"");
	free(out);

	const char *const reads[][3] = {
		{ "status", NULL }, { "status", "--json" }, { "status", "nosy" },
		{ "runners", "--json" },
	};
	for (size_t i = 0; i < sizeof(reads) / sizeof(reads[0]); i++) {
		r = proc_cli(env, NULL, reads[i][0], reads[i][1], (char *)NULL);
		CHECK_INT(r.status, ==, 0);
		check_clean(reads[i][0], r.out);
		check_clean(reads[i][0], r.err);
		proc_result_free(&r);
	}
	r = proc_cli(env, NULL, "status", "nosy", "--json", (char *)NULL);
	CHECK_HAS(r.out, "succeeded");
	proc_result_free(&r);

	int64_t keys = 0;
	char *values = dump_prefix(prefix, &keys);
	CHECK(keys >= 3);
	check_clean("etcd's values", values);
	/* The step saw neither the user variable nor the password. */
	CHECK_HAS(values, "\"state\":{\"pw\":\"none\",\"user\":\"none\"}");
	free(values);
	/* And nothing anywhere else in the keyspace. */
	values = dump_prefix("/", NULL);
	check_clean("the keyspace", values);
	free(values);
}

/* What a step can read of its guard's ($1, the step's $PPID) and its
 * runner's memory:
 * every password-like string there, or "unreadable" (root may still read
 * /proc/<pid>/maps; mem is what matters). Regions over 64 MiB (a
 * sanitizer's shadow) are skipped. */
static const char peek_script[] =
    "peek() {\n"
    "	first=$(grep -m 1 ' rw' /proc/$2/maps 2>/dev/null | cut -d- -f1)\n"
    "	n=$(dd if=/proc/$2/mem bs=4096 skip=$((0x${first:-0} / 4096)) count=1 2>/dev/null | wc -c)\n"
    "	if [ \"$n\" -ne 4096 ]; then\n"
    "		echo \"memory of the $1: unreadable\"; return\n"
    "	fi\n"
    "	grep ' rw' /proc/$2/maps | while read -r range rest; do\n"
    "		start=$((0x${range%-*})); end=$((0x${range#*-}))\n"
    "		[ $((end - start)) -le 67108864 ] || continue\n"
    "		dd if=/proc/$2/mem bs=4096 skip=$((start / 4096)) \\\n"
    "			count=$(((end - start) / 4096)) 2>/dev/null\n"
    "	done | grep -a -o 'Xq7-[A-Za-z0-9-]*' | sort -u | sed \"s/^/memory of the $1 holds: /\"\n"
    "	echo \"memory of the $1: read\"\n"
    "}\n"
    "peek guard $1\n"
    "peek runner $(cut -d' ' -f4 /proc/$1/stat)\n";

TEST(a_step_cannot_read_the_password_in_its_runners_memory)
{
	struct env e;
	const char *prefix = ROLE_PREFIX "peek/";
	const char *const *env = env_of(&e, prefix, "LEASERUN_USER=runner",
	                                "LEASERUN_PASSWORD=" RUNNER_PW);
	char script[600], spec[800], log[600];
	snprintf(script, sizeof(script), "%s/peek.sh", tmpdir);
	FILE *f = fopen(script, "w");
	CHECK(f != NULL && fputs(peek_script, f) >= 0 && fclose(f) == 0);
	snprintf(spec, sizeof(spec),
	         "{\"id\":\"peek\",\"steps\":[{\"name\":\"peek\",\"run\":\"sh %s $PPID\"}]}",
	         script);
	proc_result r = proc_cli(env, spec, "submit", "-", (char *)NULL);
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);

	/* Root may read any process's memory (CAP_SYS_PTRACE): the worker and
	 * its step run without that capability, as a runner's own user would. */
	const char *args[16];
	int n = 0;
	if (geteuid() == 0) {
		args[n++] = "/usr/bin/setpriv";
		args[n++] = "--bounding-set=-sys_ptrace";
	}
	args[n++] = proc_leaserun();
	const char *const worker[] = { "worker", "--name", "peek-runner", "--ttl", "2",
	                               "--exit-when-idle", NULL };
	for (int i = 0; worker[i] != NULL; i++)
		args[n++] = worker[i];
	args[n] = NULL;
	snprintf(log, sizeof(log), "%s/peek.log", tmpdir);
	proc_bg w;
	proc_start(&w, (char *const *)args, env, log);
	CHECK_INT(proc_wait(&w, 30000), ==, 0);
	char *out = proc_slurp(log);
	check_clean("the memory a step could read", out);
	CHECK_HAS(out, "memory of the guard: unreadable");
	CHECK_HAS(out, "memory of the runner: unreadable");
	free(out);
}

/* ---- token expiry ----------------------------------------------------- */

struct seen {
	atomic_int created, events, cancelled, lost;
	char reason[200]; /* the last cancel's */
};

static void on_watch(void *user, const lr_watch_batch *b)
{
	struct seen *s = user;
	if (b->kind == LR_WATCH_CREATED) {
		atomic_fetch_add(&s->created, 1);
	} else if (b->kind == LR_WATCH_EVENTS) {
		atomic_fetch_add(&s->events, (int)b->n);
	} else if (b->kind == LR_WATCH_CANCELLED) {
		snprintf(s->reason, sizeof(s->reason), "%s", b->reason != NULL ? b->reason : "");
		atomic_fetch_add(&s->cancelled, 1);
	}
}

static void on_lost(void *user, int64_t id, const char *why)
{
	struct seen *s = user;
	fprintf(stderr, "   lease %llx lost: %s\n", (unsigned long long)id, why);
	atomic_fetch_add(&s->lost, 1);
}

static bool wait_for(atomic_int *v, int want, int timeout_ms)
{
	int64_t end = lr_mono_ms() + timeout_ms;
	while (atomic_load(v) < want) {
		if (lr_mono_ms() >= end)
			return false;
		lr_sleep_ms(10);
	}
	return true;
}

static void put_as_root(const char *key)
{
	lr_client *root = open_as("root", ROOT_PW, ROLE_PREFIX);
	lr_err err = { 0 };
	CHECK_OK(lr_kv_put(lr_client_etcd(root), key, "x", 1, 0, NULL, NULL, &err), &err);
	lr_client_close(root);
}

TEST(a_keepalive_and_a_watch_outlive_several_token_expiries)
{
	lr_client *c = open_as("runner", RUNNER_PW, ROLE_PREFIX "tok/");
	lr_etcd *etcd = lr_client_etcd(c);
	struct seen seen = { 0 };
	lr_err err = { 0 };
	int64_t lease = 0, granted = 0, sent = 0;
	CHECK_OK(lr_lease_grant(etcd, 2, &lease, &granted, &sent, &err), &err);
	lr_keepalive *k = NULL;
	CHECK_OK(lr_keepalive_new(etcd, &k, &err), &err);
	CHECK_OK(lr_keepalive_add(k, lease, granted, sent, on_lost, NULL, &seen, &err), &err);
	lr_watch *w = NULL;
	lr_watcher *first = NULL, *second = NULL;
	CHECK_OK(lr_watch_new(etcd, &w, &err), &err);
	CHECK_OK(lr_watch_add(w, ROLE_PREFIX "tok/a/", LR_KEY_PREFIX, 0, on_watch,
	                      &seen, &first, &err), &err);
	CHECK(wait_for(&seen.created, 1, 5000));

	/* Idle for 3.5 token lifetimes: this client's token expires while
	 * the keepalive goes on. */
	int64_t end = lr_mono_ms() + TOKEN_TTL_S * 3500;
	while (lr_mono_ms() < end) {
		lr_sleep_ms(250);
		CHECK(lr_keepalive_deadline(k, lease) > lr_mono_ms());
	}
	CHECK_INT(atomic_load(&seen.lost), ==, 0);

	/* Events still arrive on the old stream. */
	put_as_root(ROLE_PREFIX "tok/a/1");
	CHECK(wait_for(&seen.events, 1, 5000));
	/* A new watch on the stream whose token has expired: etcd refuses the
	 * create; the stream comes back with a fresh token and both watchers
	 * are live again, nothing missed. */
	CHECK_OK(lr_watch_add(w, ROLE_PREFIX "tok/b/", LR_KEY_PREFIX, 0, on_watch,
	                      &seen, &second, &err), &err);
	CHECK(wait_for(&seen.created, 2, 5000));
	put_as_root(ROLE_PREFIX "tok/a/2");
	put_as_root(ROLE_PREFIX "tok/b/1");
	CHECK(wait_for(&seen.events, 3, 5000));
	/* A unary call with the expired token works too. */
	int64_t ttl = 0;
	CHECK_OK(lr_lease_ttl(etcd, lease, &ttl, &granted, &err), &err);
	CHECK(ttl > 0);
	CHECK_INT(atomic_load(&seen.lost), ==, 0);

	lr_watcher_cancel(first);
	lr_watcher_cancel(second);
	lr_watch_free(w);
	lr_keepalive_free(k);
	lr_lease_revoke(etcd, lease, NULL);
	lr_client_close(c);
}

/* Etcd user `flaky`'s password, as root. */
static void set_flaky_password(const char *pw)
{
	const char *const args[] = { "--user=root:" ROOT_PW, "user", "passwd", "flaky",
		                     "--interactive=false", NULL };
	char input[64];
	snprintf(input, sizeof(input), "%s\n", pw);
	CHECK_INT(etcdctl_input(args, input), ==, 0);
}

/* A watch whose token was refused while etcd also refused the password
 * (changed meanwhile: its tokens are gone too) comes back once the
 * password works again, instead of leaving its watchers waiting for good
 * on a stream that stays open. */
TEST(a_watch_whose_token_renewal_failed_comes_back_when_it_works_again)
{
	const char *const add[] = { "--user=root:" ROOT_PW, "user", "add", "flaky",
		                    "--new-user-password=" FLAKY_PW, NULL };
	const char *const grant[] = { "--user=root:" ROOT_PW, "user", "grant-role", "flaky",
		                      "leaserun-runner", NULL };
	CHECK_INT(etcdctl(add), ==, 0);
	CHECK_INT(etcdctl(grant), ==, 0);
	lr_client *c = open_as("flaky", FLAKY_PW, ROLE_PREFIX "flaky/");
	struct seen seen = { 0 };
	lr_err err = { 0 };
	lr_watch *w = NULL;
	lr_watcher *first = NULL, *second = NULL;
	CHECK_OK(lr_watch_new(lr_client_etcd(c), &w, &err), &err);
	CHECK_OK(lr_watch_add(w, ROLE_PREFIX "flaky/a/", LR_KEY_PREFIX, 0, on_watch, &seen,
	                      &first, &err), &err);
	CHECK(wait_for(&seen.created, 1, 5000));

	set_flaky_password("flaky-Pw-other");
	CHECK_OK(lr_watch_add(w, ROLE_PREFIX "flaky/b/", LR_KEY_PREFIX, 0, on_watch, &seen,
	                      &second, &err), &err);
	lr_sleep_ms(1500);
	CHECK_INT(atomic_load(&seen.created), ==, 1); /* refused meanwhile */
	set_flaky_password(FLAKY_PW);
	int64_t t0 = lr_mono_ms();
	/* Both watchers created again on the reopened stream. */
	if (!wait_for(&seen.created, 3, 8000))
		TEST_FAIL("the watch never came back: %d creates", atomic_load(&seen.created));
	fprintf(stderr, "   watch back %lld ms after the password works again\n",
	        (long long)(lr_mono_ms() - t0));
	put_as_root(ROLE_PREFIX "flaky/b/1");
	CHECK(wait_for(&seen.events, 1, 5000));

	lr_watcher_cancel(first);
	lr_watcher_cancel(second);
	lr_watch_free(w);
	lr_client_close(c);
}

/* etcd refuses a watch on keys the user may not read with watch id -1,
 * not the watcher's own: the watcher is told, not left waiting, and the
 * watchers around it are unaffected. */
TEST(a_watch_on_keys_the_user_may_not_read_is_cancelled_saying_why)
{
	lr_client *c = open_as("viewer", VIEWER_PW, ROLE_PREFIX);
	lr_err err = { 0 };
	lr_watch *w = NULL;
	lr_watcher *ok1 = NULL, *denied = NULL, *ok2 = NULL;
	struct seen mine = { 0 }, others = { 0 };
	CHECK_OK(lr_watch_new(lr_client_etcd(c), &w, &err), &err);
	CHECK_OK(lr_watch_add(w, ROLE_PREFIX "a/", LR_KEY_PREFIX, 0, on_watch, &others, &ok1,
	                      &err), &err);
	CHECK_OK(lr_watch_add(w, "/not-for-viewers/", LR_KEY_PREFIX, 0, on_watch, &mine,
	                      &denied, &err), &err);
	CHECK_OK(lr_watch_add(w, ROLE_PREFIX "b/", LR_KEY_PREFIX, 0, on_watch, &others, &ok2,
	                      &err), &err);
	CHECK(wait_for(&mine.cancelled, 1, 5000));
	CHECK_HAS(mine.reason, "permission denied");
	CHECK(wait_for(&others.created, 2, 5000));
	CHECK_INT(atomic_load(&others.cancelled), ==, 0);
	lr_watcher_cancel(ok1);
	lr_watcher_cancel(denied);
	lr_watcher_cancel(ok2);
	lr_watch_free(w);
	lr_client_close(c);
}

struct tally {
	atomic_int done, lost;
};

static void cb_lost(void *user, const char *why)
{
	struct tally *t = user;
	fprintf(stderr, "   runner lost its lease: %s\n", why);
	atomic_fetch_add(&t->lost, 1);
}

static void cb_done(void *user, const char *task, lr_task_state st, const char *error)
{
	struct tally *t = user;
	if (st == LR_TASK_SUCCEEDED)
		atomic_fetch_add(&t->done, 1);
	else
		fprintf(stderr, "   task %s ended %s: %s\n", task, lr_task_state_name(st),
		        error ? error : "");
}

static lr_step_result step_ok(lr_step *s, void *user)
{
	return LR_STEP_OK;
}

struct run_arg {
	lr_runner *r;
	int rc;
	lr_err err;
};

static void *run_thread(void *p)
{
	struct run_arg *a = p;
	a->rc = lr_runner_run(a->r, &a->err);
	return NULL;
}

/* The lease the runner's name is registered on, read as root. */
static int64_t runner_lease(const char *prefix, const char *name)
{
	char key[256];
	snprintf(key, sizeof(key), "%srunners/%s", prefix, name);
	lr_client *root = open_as("root", ROOT_PW, prefix);
	lr_range_result r;
	lr_err err = { 0 };
	CHECK_OK(lr_kv_get(lr_client_etcd(root), key, &r, &err), &err);
	int64_t lease = r.n > 0 ? r.kvs[0].lease : 0;
	lr_range_result_free(&r);
	lr_client_close(root);
	return lease;
}

TEST(a_runner_keeps_its_lease_and_dispatches_across_token_expiries)
{
	const char *prefix = ROLE_PREFIX "run/";
	lr_client *c = open_as("runner", RUNNER_PW, prefix);
	lr_client *root = open_as("root", ROOT_PW, prefix);
	struct tally t = { 0 };
	lr_runner_opts o = { .name = "tok-runner", .ttl_s = 2, .grace_s = 1 };
	struct run_arg a = { 0 };
	lr_err err = { 0 };
	CHECK_OK(lr_runner_new(c, &o, &a.r, &err), &err);
	CHECK_OK(lr_runner_handle(a.r, NULL, step_ok, NULL), &err);
	lr_runner_callbacks cb = { .lease_lost = cb_lost, .task_done = cb_done };
	lr_runner_set_callbacks(a.r, &cb, &t);
	pthread_t th;
	CHECK(pthread_create(&th, NULL, run_thread, &a) == 0);
	int64_t end = lr_mono_ms() + 5000;
	int64_t lease = 0;
	while (lease == 0 && lr_mono_ms() < end) {
		lr_sleep_ms(50);
		lease = runner_lease(prefix, "tok-runner");
	}
	CHECK(lease != 0);

	/* Two rounds: stay idle past the token's lifetime, then submit (as
	 * root, so nothing refreshes the runner's token meanwhile); the
	 * second finds expired the token that the first one's dispatch got. */
	for (int i = 0; i < 2; i++) {
		lr_sleep_ms(TOKEN_TTL_S * 1000 + 1200);
		char id[LR_ID_SIZE], spec[128];
		snprintf(spec, sizeof(spec),
		         "{\"id\":\"after-expiry-%d\",\"steps\":[{\"name\":\"s\",\"run\":\"-\"}]}",
		         i);
		int64_t t0 = lr_mono_ms();
		CHECK_OK(lr_submit_text(root, spec, strlen(spec), NULL, id, NULL, &err), &err);
		if (!wait_for(&t.done, i + 1, 10000))
			TEST_FAIL("task %s not done within 10 s", id);
		fprintf(stderr, "   %s done %lld ms after submit\n", id,
		        (long long)(lr_mono_ms() - t0));
	}
	CHECK_INT(atomic_load(&t.lost), ==, 0);
	CHECK_INT(runner_lease(prefix, "tok-runner"), ==, lease);

	lr_runner_stop(a.r);
	pthread_join(th, NULL);
	CHECK_OK(a.rc, &a.err);
	lr_runner_free(a.r);
	lr_client_close(root);
	lr_client_close(c);
}

TEST_LIST(
	TEST_CASE(a_wrong_password_is_refused_naming_user_and_endpoint_but_not_the_password),
	TEST_CASE(a_runner_under_a_role_for_its_prefix_completes_a_task),
	TEST_CASE(a_viewer_with_read_only_access_sees_status_but_cannot_change_anything),
	TEST_CASE(a_missing_password_is_asked_on_the_terminal_without_echo),
	TEST_CASE(a_user_without_the_role_is_denied_clearly_and_nothing_changes),
	TEST_CASE(the_password_shows_in_no_output_log_step_or_etcd_value),
	TEST_CASE(a_step_cannot_read_the_password_in_its_runners_memory),
	TEST_CASE(a_keepalive_and_a_watch_outlive_several_token_expiries),
	TEST_CASE(a_watch_whose_token_renewal_failed_comes_back_when_it_works_again),
	TEST_CASE(a_watch_on_keys_the_user_may_not_read_is_cancelled_saying_why),
	TEST_CASE(a_runner_keeps_its_lease_and_dispatches_across_token_expiries),
);

static int setup(void)
{
	static const char *const extra[] = { "--auth-token-ttl=2", NULL };
	etcdh_opts o = { .members = 1, .extra_args = extra };
	const char *tmp = getenv("TMPDIR");

	signal(SIGPIPE, SIG_IGN);
	snprintf(tmpdir, sizeof(tmpdir), "%s/leaserun-auth-XXXXXX",
	         tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
	if (mkdtemp(tmpdir) == NULL)
		return -1;
	if (etcdh_start(&o, &cluster) != 0)
		return -1;
	return enable_auth();
}

static void teardown(void)
{
	char cmd[600];
	etcdh_destroy(cluster);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", tmpdir);
}

TEST_MAIN(setup, teardown)
