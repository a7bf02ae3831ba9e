/* fleet.c - starting, watching and killing real runner processes. */
#include "fleet.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "etcd/lease.h"
#include "exec/exec.h"
#include "history.h"
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "test.h"

static lr_err err;

/* How long a runner may take to register. After a test's member kills the
 * cluster may still be electing a leader, and a sanitizer build starts
 * slowly, so this is generous: it only bounds a failure. */
#define REGISTER_WAIT_MS 30000

void fleet_init(fleet *f, const char *endpoints, const char *name)
{
	memset(f, 0, sizeof(*f));
	f->endpoints = endpoints;
	snprintf(f->prefix, sizeof(f->prefix), "/%s/", name);
	const char *tmp = getenv("TMPDIR");
	snprintf(f->dir, sizeof(f->dir), "%s/fleet-%s-XXXXXX", tmp ? tmp : "/tmp", name);
	CHECK(mkdtemp(f->dir) != NULL);
	/* "$MARKS/now": the wall clock in ns, for marks (marks.h) whose shell
	 * text goes through printf formats, where "%s%N" cannot. */
	char now[320];
	snprintf(now, sizeof(now), "%s/now", f->dir);
	FILE *fp = fopen(now, "w");
	CHECK(fp != NULL);
	fputs("#!/bin/sh\nexec date +%s%N\n", fp);
	fclose(fp);
	CHECK(chmod(now, 0755) == 0);
	lr_client_opts o = { .endpoints = endpoints, .prefix = f->prefix };
	CHECK_OK(lr_client_open(&o, &f->client, &err), &err);
}

static bool registered(fleet *f, const char *name)
{
	lr_runner_info *list = NULL;
	size_t n = 0;
	bool found = false;
	if (lr_runners_list(f->client, &list, &n, &err) == 0)
		for (size_t i = 0; i < n; i++)
			if (strcmp(list[i].name, name) == 0)
				found = true;
	free(list);
	return found;
}

/* Whether the NULL-terminated list (may be NULL) holds the flag. */
static bool has_flag(const char *const *args, const char *flag)
{
	for (int k = 0; args != NULL && args[k] != NULL; k++)
		if (strcmp(args[k], flag) == 0)
			return true;
	return false;
}

/* Fork and exec `leaserun worker` as runner i, named f->names[i], against
 * endpoints; stderr goes to <dir>/<name>.log, and <dir> is its TMPDIR. The
 * runner gets SIGKILL when the thread that started it exits, so that a
 * crashed or killed test leaves no runner behind. */
static pid_t spawn_runner(fleet *f, int i, const char *endpoints,
                          const char *const *extra)
{
	const char *bin = getenv("LEASERUN_BIN");
	CHECK(bin != NULL);
	const char *argv[32];
	int n = 0;
	argv[n++] = bin;
	argv[n++] = "worker";
	argv[n++] = "--endpoints";
	argv[n++] = endpoints;
	argv[n++] = "--prefix";
	argv[n++] = f->prefix;
	argv[n++] = "--name";
	argv[n++] = f->names[i];
	if (!has_flag(extra, "--ttl")) { /* a flag may be given once */
		argv[n++] = "--ttl";
		argv[n++] = "2";
	}
	for (int k = 0; extra != NULL && extra[k] != NULL && n < 30; k++)
		argv[n++] = extra[k];
	argv[n] = NULL;
	char log[320];
	snprintf(log, sizeof(log), "%s/%s.log", f->dir, f->names[i]);
	/* The environment, made before the fork: between fork and exec the
	 * child of this threaded process may call only async-signal-safe
	 * functions (setenv may wait for ever on a lock that a thread of the
	 * parent held at the fork). Step directories that killed runners leave
	 * behind go with the fleet's scratch directory (TMPDIR). */
	char marks[300], tmpdir[300];
	snprintf(marks, sizeof(marks), "MARKS=%s", f->dir);
	snprintf(tmpdir, sizeof(tmpdir), "TMPDIR=%s", f->dir);
	const char *const add[] = { marks, tmpdir, NULL };
	char **envp = lr_exec_env_build(environ, NULL, add);
	CHECK(envp != NULL);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid == 0) {
		if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
			_exit(127);
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		dup2(fd, 2);
		execve(bin, (char *const *)argv, envp);
		_exit(127);
	}
	lr_exec_env_free(envp);
	CHECK(pid >= 0);
	f->pids[i] = pid;
	return pid;
}

/* Copy the end of runner i's log to stderr: the scratch directory may be
 * gone by the time anyone reads the failure. */
static void show_log_tail(fleet *f, int i)
{
	char path[320];
	snprintf(path, sizeof(path), "%s/%s.log", f->dir, f->names[i]);
	char *log = proc_slurp(path);
	size_t len = strlen(log);
	fprintf(stderr, "  --- %s, last lines ---\n%s\n", path,
	        len > 3000 ? log + len - 3000 : log);
	free(log);
}

/* Whether runner i has exited, left to be reaped by fleet_wait. */
static bool exited(const fleet *f, int i)
{
	siginfo_t info = { .si_pid = 0 };
	return waitid(P_PID, (id_t)f->pids[i], &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
	       info.si_pid == f->pids[i];
}

/* Whether runner i's log says it registered: one started with
 * --exit-when-idle may be done and gone before runners/ is read. */
static bool logged_registration(fleet *f, int i)
{
	char path[320];
	snprintf(path, sizeof(path), "%s/%s.log", f->dir, f->names[i]);
	char *log = proc_slurp(path);
	bool found = strstr(log, "\"msg\":\"registered with lease ") != NULL;
	free(log);
	return found;
}

/* Wait until runner i is registered; fails the test, with the end of its
 * log, when it exits without having registered or takes longer than
 * REGISTER_WAIT_MS. */
static void wait_registered(fleet *f, int i)
{
	int64_t end = lr_mono_ms() + REGISTER_WAIT_MS;
	while (!registered(f, f->names[i])) {
		bool gone = exited(f, i);
		if (gone && logged_registration(f, i))
			return;
		if (gone || lr_mono_ms() > end) {
			show_log_tail(f, i);
			TEST_FAIL("runner %s %s", f->names[i],
			          gone ? "exited before it registered"
			                 : "did not register in time");
		}
		lr_sleep_ms(20);
	}
}

pid_t fleet_start(fleet *f, int i, const char *const *extra)
{
	snprintf(f->names[i], sizeof(f->names[i]), "r%d", i);
	pid_t pid = spawn_runner(f, i, f->endpoints, extra);
	wait_registered(f, i);
	return pid;
}

int fleet_wait(fleet *f, int i, int timeout_ms)
{
	int64_t end = lr_mono_ms() + timeout_ms;
	int status;
	while (waitpid(f->pids[i], &status, WNOHANG) == 0) {
		if (lr_mono_ms() > end)
			return -2;
		lr_sleep_ms(5);
	}
	f->pids[i] = 0;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

void fleet_destroy(fleet *f)
{
	for (int i = 0; i < FLEET_MAX; i++)
		if (f->pids[i] > 0) {
			kill(f->pids[i], SIGKILL);
			waitpid(f->pids[i], NULL, 0);
			f->pids[i] = 0;
		}
	lr_client_close(f->client);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", f->dir);
	if (getenv("KEEP_FLEET") == NULL && system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", f->dir);
}

void fleet_check_history(fleet *f, long want_finals)
{
	history_report rep;
	CHECK_INT(history_check(lr_client_etcd(f->client), f->prefix, &rep), ==, 0);
	printf("# history of %s: %zu claims, %zu commits, %zu done, %zu violations\n",
	       f->prefix, rep.claims, rep.commits, rep.finals, rep.violations);
	if (rep.violations > 0)
		TEST_FAIL("%s", rep.first);
	if (want_finals >= 0)
		CHECK_INT(rep.finals, ==, want_finals);
}

void fleet_submit(fleet *f, const char *id, const char *spec_fmt)
{
	char spec[8192];
	snprintf(spec, sizeof(spec), spec_fmt, id);
	char out[LR_ID_SIZE];
	CHECK_OK(lr_submit_text(f->client, spec, strlen(spec), NULL, out, NULL, &err), &err);
	CHECK_STR(out, id);
}

lr_task_state fleet_state(fleet *f, const char *id, char *runner, size_t size,
                          int64_t *next_step, int64_t *attempt)
{
	lr_task_status st;
	CHECK_OK(lr_task_get(f->client, id, &st, &err), &err);
	if (runner != NULL)
		snprintf(runner, size, "%s", st.runner ? st.runner : "");
	if (next_step != NULL)
		*next_step = st.next_step;
	if (attempt != NULL)
		*attempt = st.attempt;
	lr_task_state s = st.state;
	lr_task_status_clear(&st);
	return s;
}

int64_t fleet_wait_state(fleet *f, const char *id, int st, int timeout_ms)
{
	int64_t start = lr_mono_ms();
	for (;;) {
		lr_task_state s = fleet_state(f, id, NULL, 0, NULL, NULL);
		if ((st < 0 && s >= LR_TASK_SUCCEEDED) || (st >= 0 && (int)s == st))
			return lr_mono_ms() - start;
		if (lr_mono_ms() - start > timeout_ms)
			return -1;
		lr_sleep_ms(10);
	}
}

int fleet_holder(fleet *f, const char *id)
{
	char runner[64];
	if (fleet_state(f, id, runner, sizeof(runner), NULL, NULL) != LR_TASK_RUNNING)
		return -1;
	/* Never a slot that was not started: kill(0, ...) would hit the test. */
	for (int i = 0; i < FLEET_MAX; i++)
		if (f->pids[i] > 0 && runner[0] != '\0' && strcmp(f->names[i], runner) == 0)
			return i;
	return -1;
}

bool fleet_log_has(fleet *f, int i, const char *text)
{
	char path[320];
	snprintf(path, sizeof(path), "%s/%s.log", f->dir, f->names[i]);
	FILE *fp = fopen(path, "r");
	if (fp == NULL)
		return false;
	char line[4096];
	bool found = false;
	while (!found && fgets(line, sizeof(line), fp) != NULL)
		found = strstr(line, text) != NULL;
	fclose(fp);
	return found;
}

int fleet_count_marks(fleet *f, const char *prefix)
{
	char path[320];
	snprintf(path, sizeof(path), "%s/marks", f->dir);
	FILE *fp = fopen(path, "r");
	if (fp == NULL)
		return 0;
	char line[512];
	int n = 0;
	while (fgets(line, sizeof(line), fp) != NULL)
		if (strncmp(line, prefix, strlen(prefix)) == 0)
			n++;
	fclose(fp);
	return n;
}

int fleet_wait_marks(fleet *f, const char *prefix, int n, int timeout_ms)
{
	int64_t end = lr_mono_ms() + timeout_ms;
	while (fleet_count_marks(f, prefix) < n) {
		if (lr_mono_ms() > end)
			return -1;
		lr_sleep_ms(10);
	}
	return 0;
}

pid_t fleet_spawn(fleet *f, int i, const char *name, const char *endpoints,
                  const char *const *extra)
{
	snprintf(f->names[i], sizeof(f->names[i]), "%s", name);
	return spawn_runner(f, i, endpoints != NULL ? endpoints : f->endpoints, extra);
}

pid_t fleet_start_named(fleet *f, int i, const char *name, const char *endpoints,
                        const char *const *extra)
{
	pid_t pid = fleet_spawn(f, i, name, endpoints, extra);
	wait_registered(f, i);
	return pid;
}

bool fleet_registered(fleet *f, const char *name)
{
	return registered(f, name);
}

int64_t fleet_runner_lease(fleet *f, const char *name)
{
	lr_runner_info *list = NULL;
	size_t n = 0;
	int64_t lease = 0;
	if (lr_runners_list(f->client, &list, &n, &err) == 0)
		for (size_t i = 0; i < n; i++)
			if (strcmp(list[i].name, name) == 0)
				lease = list[i].lease;
	free(list);
	return lease;
}

int64_t fleet_lease_left(fleet *f, int i)
{
	int64_t lease = fleet_runner_lease(f, f->names[i]), left = 0, granted = 0;
	CHECK(lease != 0);
	lr_err e;
	CHECK_OK(lr_lease_ttl(lr_client_etcd(f->client), lease, &left, &granted, &e), &e);
	return left;
}

void fleet_wait_renewal(fleet *f, int i, int64_t left)
{
	if (left < 0)
		left = fleet_lease_left(f, i);
	for (int64_t t0 = lr_mono_ms(), now; (now = fleet_lease_left(f, i)) <= left; left = now) {
		if (lr_mono_ms() - t0 > 15000)
			TEST_FAIL("no renewal of runner %d's lease in 15 s", i);
		lr_sleep_ms(5);
	}
}

int64_t fleet_count_keys(fleet *f, const char *kind)
{
	char key[LR_KEY_SIZE];
	lr_key(f->client, kind, "", key);
	lr_range_opts o = { .key = key, .flags = LR_KEY_PREFIX | LR_RANGE_COUNT_ONLY };
	lr_range_result r;
	CHECK_OK(lr_kv_range(lr_client_etcd(f->client), &o, &r, &err), &err);
	int64_t n = r.count;
	lr_range_result_free(&r);
	return n;
}
