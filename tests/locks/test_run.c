/* test_run.c - `leaserun run`, `leaserun locks` and the hold API against a
 * real etcd: the compatibility matrix with two holders, exit statuses,
 * invalid input, a limit, fairness (also beside tasks not ready yet), a
 * holder killed with SIGKILL, a fenced release after the lease was lost,
 * a command stopped while etcd froze, and what a killed guard leaves. */
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "base/clock.h"
#include "cli_run.h"
#include "client/client.h"
#include "etcd/kv.h"
#include "etcd/lease.h"
#include "test.h"

static const char *const modes[5] = { "IS", "IX", "S", "SIX", "X" };

/* Whether `want` on a node runs beside `held` on the same node. */
static const char same_node[5][6] = {
	/*          IS IX S SIX X */
	/* IS  */ "11110",
	/* IX  */ "11000",
	/* S   */ "10100",
	/* SIX */ "10000",
	/* X   */ "00000",
};

/* A `leaserun run` in the background that holds what `opt` (--lock or
 * --limit) names until stopped; returns once it holds it (its command
 * touched a file). */
static void hold_with(proc_bg *p, const char *opt, const char *what, const char *ttl)
{
	static int n;
	char mark[600], script[700], log[600];
	snprintf(mark, sizeof(mark), "%s/held-%d", cli_tmpdir, n);
	snprintf(log, sizeof(log), "%s/bg-%d.log", cli_tmpdir, n++);
	snprintf(script, sizeof(script), "touch %s; exec sleep 60", mark);
	const char *args[] = { "run", opt, what, "--ttl", ttl, "--", "sh", "-c", script, NULL };
	cli_start(p, log, args);
	int64_t t0 = lr_mono_ms();
	while (access(mark, F_OK) != 0) {
		if (!proc_alive(p) || lr_mono_ms() - t0 > 10000)
			TEST_FAIL("leaserun run %s %s never held it: %s", opt, what, proc_slurp(log));
		lr_sleep_ms(5);
	}
}

/* The same for a lock (PATH=MODE). */
static void hold_in_background(proc_bg *p, const char *lock, const char *ttl)
{
	hold_with(p, "--lock", lock, ttl);
}

/* `leaserun run --lock lock -- true` in the background; returns once its
 * request is queued (`queued` requests in wants/, holders' included). */
static void wait_in_background(lr_client *c, proc_bg *p, const char *lock, int queued)
{
	static int n;
	char log[600];
	snprintf(log, sizeof(log), "%s/waiter-%d.log", cli_tmpdir, n++);
	const char *args[] = { "run", "--lock", lock, "--", "true", NULL };
	cli_start(p, log, args);
	int64_t t0 = lr_mono_ms();
	while (fixture_count(c, "wants/") < queued) {
		if (!proc_alive(p) || lr_mono_ms() - t0 > 10000)
			TEST_FAIL("leaserun run --lock %s never queued: %s", lock, proc_slurp(log));
		lr_sleep_ms(5);
	}
}

/* A test's client, a holder of `held` in the background and a waiter for
 * `wanted` queued behind it. */
static lr_client *holder_and_waiter(const char *name, proc_bg *holder, const char *held,
                                    proc_bg *waiter, const char *wanted)
{
	lr_client *c = fixture_client(name);
	cli_use_client(c);
	hold_in_background(holder, held, "2");
	wait_in_background(c, waiter, wanted, 2);
	return c;
}

/* `leaserun run --lock lock --wait 0.1 -- true`: its exit status. A free
 * lock is taken at once whatever the wait, and a held one stays held (its
 * holder sleeps for a minute): a longer wait would show nothing more. */
static int try_lock(const char *lock)
{
	proc_result r = RUN("run", "--lock", lock, "--wait", "0.1", "--", "true");
	int st = r.status;
	if (st == 5) {
		CHECK_HAS(r.err, "leaserun: run: waited "); /* the command the user ran */
		CHECK_HAS(r.err, "held by run ");
	}
	proc_result_free(&r);
	return st;
}

TEST(the_compatibility_matrix_holds_pair_by_pair)
{
	lr_client *c = fixture_client("run_matrix");
	cli_use_client(c);
	for (int held = 0; held < 5; held++) {
		char lock[64];
		proc_bg bg;
		snprintf(lock, sizeof(lock), "r/n=%s", modes[held]);
		hold_in_background(&bg, lock, "2");
		for (int want = 0; want < 5; want++) {
			snprintf(lock, sizeof(lock), "r/n=%s", modes[want]);
			int st = try_lock(lock);
			int expected = same_node[held][want] == '1' ? 0 : 5;
			if (st != expected)
				TEST_FAIL("%s held, %s asked: exit %d, expected %d", modes[held],
				          modes[want], st, expected);
		}
		/* Below and above: the intention locks of the other side. */
		CHECK_INT(try_lock("r/n/c=X"), ==, held <= 1 ? 0 : 5);
		CHECK_INT(try_lock("r=S"), ==, held == 0 || held == 2 ? 0 : 5);
		CHECK_INT(try_lock("other=X"), ==, 0);
		CHECK_INT(proc_stop(&bg, SIGTERM, 5000), ==, 128 + SIGTERM);
	}
	CHECK_INT(fixture_count(c, "locks/"), ==, 0);
	lr_client_close(c);
}

TEST(it_exits_with_its_commands_status_and_the_command_sees_what_it_holds)
{
	lr_client *c = fixture_client("run_status");
	cli_use_client(c);
	proc_result r = RUN("run", "--lock", "a/b=S", "--limit", "gpu=3", "--",
	                    "sh", "-c", "echo \"$LEASERUN_FENCE|$LEASERUN_LOCKS|$LEASERUN_SLOTS\"; exit 7");
	CHECK_INT(r.status, ==, 7);
	long fence = atol(r.out);
	CHECK(fence > 0);
	CHECK_HAS(r.out, "|{\"a/b\":\"S\"}|{\"gpu\":");
	proc_result_free(&r);
	r = RUN("run", "--lock", "a", "--", "sh", "-c", "kill -9 $$");
	CHECK_INT(r.status, ==, 128 + SIGKILL);
	proc_result_free(&r);
	r = RUN("run", "--lock", "a", "--", "no-such-program-here");
	CHECK_INT(r.status, ==, 127);
	CHECK_HAS(r.err, "no-such-program-here");
	proc_result_free(&r);
	/* Found but not runnable is 126, as in the shell. */
	r = RUN("run", "--lock", "a", "--", cli_tmpdir);
	CHECK_INT(r.status, ==, 126);
	CHECK_HAS(r.err, "permission denied");
	proc_result_free(&r);
	r = RUN("run", "--lock", "a", "--", cli_write_file("not-executable", "true\n"));
	CHECK_INT(r.status, ==, 126);
	proc_result_free(&r);
	/* Given back each time, and each fence is newer. */
	CHECK_INT(fixture_count(c, "locks/"), ==, 0);
	r = RUN("run", "--lock", "a", "--", "sh", "-c", "echo $LEASERUN_FENCE");
	CHECK(atol(r.out) > fence);
	proc_result_free(&r);
	/* Started with standard input closed, the command reads /dev/null,
	 * not the descriptor gRPC opened under that number. */
	const char *const closed[] = { "run", "--lock", "a", "--", "readlink", "/proc/self/fd/0",
		                       NULL };
	r = cli_run_stdin_closed(closed);
	CHECK_INT(r.status, ==, 0);
	CHECK_STR(r.out, "/dev/null\n");
	proc_result_free(&r);
	lr_client_close(c);
}

TEST(invalid_locks_and_limits_exit_2_naming_them_and_store_nothing)
{
	lr_client *c = fixture_client("run_invalid");
	cli_use_client(c);
	/* Two or four arguments, and what the message must name. */
	static const char *const bad[][5] = {
		{ "--lock", "a//b", NULL, NULL, "locks.a//b" },
		{ "--lock", "a=W", NULL, NULL, "locks.a: expected one of" },
		{ "--lock", "a b", NULL, NULL, "locks.a b" },
		{ "--lock", "=X", NULL, NULL, "locks.: a path" },
		{ "--limit", "gpu=0", NULL, NULL, "limits.gpu" },
		{ "--limit", "gpu=10001", NULL, NULL, "limits.gpu" },
		{ "--limit", "gpu", NULL, NULL, "--limit gpu: expected KEY=N" },
		{ "--limit", "gpu=x", NULL, NULL, "--limit gpu=x" },
		/* plain decimal digits alone, as in a spec */
		{ "--limit", "gpu=+3", NULL, NULL, "--limit gpu=+3: expected KEY=N" },
		{ "--limit", "gpu= 3", NULL, NULL, "--limit gpu= 3: expected KEY=N" },
		{ "--limit", "gpu=-3", NULL, NULL, "--limit gpu=-3: expected KEY=N" },
		{ "--limit", "gpu=3 ", NULL, NULL, "--limit gpu=3 : expected KEY=N" },
		{ "--limit", "gpu=", NULL, NULL, "--limit gpu=: expected KEY=N" },
		{ "--limit", "gpu=99999999999999999999", NULL, NULL, "limits.gpu" },
		{ "--limit", "a/b=2", NULL, NULL, "limits.a/b" },
		{ "--lock", "a", "--ttl", "0", "--ttl" },
		{ "--lock", "a", "--wait", "soon", "--wait: expected seconds" },
		{ "--lock", "a", "--wait", "-1", "--wait: expected seconds" },
		{ "--lock", "a", "--wait", "0x10", "got \"0x10\"" }, /* not 16 s */
		{ "--lock", "a", "--wait", "1e3", "got \"1e3\"" },
		{ "--lock", "a", "--lock", "a=S", "--lock a given twice" },
		{ "--limit", "g=2", "--limit", "g=3", "--limit g given twice" },
		/* jansson takes no text that is not UTF-8: never dropped */
		{ "--lock", "a", "--lock", "b\xff", "--lock \"b\\xff\": not valid UTF-8" },
		{ "--lock", "b=X\xff", NULL, NULL, "--lock \"b=X\\xff\": not valid UTF-8" },
		{ "--limit", "g\xff=2", NULL, NULL, "--limit \"g\\xff=2\": not valid UTF-8" },
		{ "--lock=\xff", "--limit=g=1", NULL, NULL, "--lock \"\\xff\": not valid UTF-8" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *const *b = bad[i];
		proc_result r = b[2] != NULL ? RUN("run", b[0], b[1], b[2], b[3], "--", "true")
		                             : RUN("run", b[0], b[1], "--", "true");
		if (r.status != 2 || strstr(r.err, b[4]) == NULL)
			TEST_FAIL("%s %s %s %s: exit %d, expected 2 naming \"%s\": %s", b[0], b[1],
			          b[2] ? b[2] : "", b[3] ? b[3] : "", r.status, b[4], r.err);
		proc_result_free(&r);
	}
	proc_result r = RUN("run", "--lock", "a");
	CHECK_INT(r.status, ==, 2); /* no command */
	proc_result_free(&r);
	r = RUN("run", "--", "true");
	CHECK_INT(r.status, ==, 2); /* nothing to hold */
	proc_result_free(&r);
	/* Bad input is bad input even with etcd out of reach; good input then
	 * is an etcd error. */
	r = RUN("run", "--endpoints", "127.0.0.1:1", "--dial-timeout", "1", "--lock", "a//b",
	        "--", "true");
	CHECK_INT(r.status, ==, 2);
	proc_result_free(&r);
	r = RUN("run", "--endpoints", "127.0.0.1:1", "--dial-timeout", "1", "--lock", "a", "--",
	        "true");
	CHECK_INT(r.status, ==, 1);
	CHECK_HAS(r.err, "127.0.0.1:1");
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, ""), ==, 0);
	lr_client_close(c);
}

TEST(a_signal_while_waiting_exits_128_plus_it_and_withdraws_the_request)
{
	proc_bg holder, waiter;
	lr_client *c = holder_and_waiter("run_signal", &holder, "sig=X", &waiter, "sig=S");
	kill(waiter.pid, SIGINT);
	CHECK_INT(proc_wait(&waiter, 5000), ==, 128 + SIGINT);
	CHECK_INT(fixture_count(c, "wants/"), ==, 1); /* the holder's alone */
	CHECK_INT(proc_stop(&holder, SIGINT, 5000), ==, 128 + SIGTERM); /* stopped by it */
	CHECK_INT(fixture_count(c, ""), ==, 0);
	lr_client_close(c);
}

/* A holder's name comes from its key, which anyone who may write to etcd
 * can fill with escape sequences and line breaks: the message that names
 * it shows neither, as `leaserun locks` does not. */
TEST(a_holder_named_with_control_characters_is_shown_on_one_line)
{
	lr_client *c = fixture_client("run_esc");
	cli_use_client(c);
	static const char key[] = "esc/#3X/run:x\033[31mRED\033[0m\nHELD fake";
	int64_t lease = fixture_lease(c, 60);
	fixture_put(c, "locks/", key, "{\"host\":\"h\"}", lease);
	proc_result r = RUN("run", "--lock", "esc", "--wait", "0", "--", "true");
	CHECK_INT(r.status, ==, 5);
	CHECK_HAS(r.err, "held by run x?[31mRED?[0m HELD fake on h\n");
	CHECK(strchr(r.err, '\033') == NULL);
	proc_result_free(&r);
	/* On no lease, it is deleted, and the warning says so on one line. */
	fixture_put(c, "locks/", key, "{\"host\":\"h\"}", 0);
	r = RUN("run", "--lock", "esc", "--wait", "0", "--", "true");
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.err, "/locks/esc/#3X/run:x?[31mRED?[0m HELD fake, in the way");
	CHECK(strchr(r.err, '\033') == NULL);
	proc_result_free(&r);
	lr_lease_revoke(lr_client_etcd(c), lease, NULL);
	lr_client_close(c);
}

/* ---- a limit, fairness ----------------------------------------------------- */

TEST(a_limit_of_2_is_never_exceeded_by_5_holders)
{
	lr_client *c = fixture_client("run_limit");
	cli_use_client(c);
	char log[600], script[1400];
	snprintf(log, sizeof(log), "%s/limit.log", cli_tmpdir);
	/* +1 at the start, -1 at the end: the running sum is how many run. */
	snprintf(script, sizeof(script),
	         "echo \"$(date +%%s%%N) 1\" >> %s; sleep 0.3; echo \"$(date +%%s%%N) -1\" >> %s",
	         log, log);
	proc_bg bg[5];
	for (int i = 0; i < 5; i++) {
		char out[600];
		snprintf(out, sizeof(out), "%s/limit-%d.out", cli_tmpdir, i);
		const char *args[] = { "run", "--limit", "pool=2", "--", "sh", "-c", script, NULL };
		cli_start(&bg[i], out, args);
	}
	for (int i = 0; i < 5; i++)
		CHECK_INT(proc_wait(&bg[i], 20000), ==, 0);
	char *text = proc_slurp(log);
	int64_t at[10];
	int d[10], n = 0;
	for (char *line = strtok(text, "\n"); line != NULL && n < 10; line = strtok(NULL, "\n")) {
		long long t;
		if (sscanf(line, "%lld %d", &t, &d[n]) == 2)
			at[n++] = t;
	}
	free(text);
	CHECK_INT(n, ==, 10);
	/* Sorted by time, ends before starts at the same instant. */
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && (at[j] < at[j - 1] || (at[j] == at[j - 1] && d[j] < d[j - 1])); j--) {
			int64_t ta = at[j]; at[j] = at[j - 1]; at[j - 1] = ta;
			int td = d[j]; d[j] = d[j - 1]; d[j - 1] = td;
		}
	int running = 0, most = 0;
	for (int i = 0; i < n; i++) {
		running += d[i];
		most = running > most ? running : most;
	}
	printf("# 5 holders of a pool of 2: at most %d at once\n", most);
	CHECK_INT(most, ==, 2);
	lr_client_close(c);
}

/* Tasks that name different limits for one pool: each one's holds while
 * it runs, so the smallest among the holders bounds the pool. */
TEST(a_larger_limit_does_not_join_a_holder_of_a_smaller_one)
{
	lr_client *c = fixture_client("run_mixed");
	cli_use_client(c);
	proc_bg one;
	hold_with(&one, "--limit", "api=1", "2");
	proc_result r = RUN("run", "--limit", "api=3", "--wait", "0.3", "--", "true");
	CHECK_INT(r.status, ==, 5);
	CHECK_HAS(r.err, "pool api full: 1 held, and run ");
	CHECK_HAS(r.err, "runs under a limit of 1");
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, "limits/api/00001/"), ==, 1);
	r = RUN("locks");
	CHECK_HAS(r.out, "api[0] of 1");
	proc_result_free(&r);
	CHECK_INT(proc_stop(&one, SIGTERM, 5000), ==, 128 + SIGTERM);
	r = RUN("run", "--limit", "api=3", "--wait", "5", "--", "true");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, ""), ==, 0);
	lr_client_close(c);
}

/* No holder writes a lock or slot key on no lease (they hang on its
 * lease): one put by hand would never expire. A run it is in the way of
 * deletes it, says so, and takes what it asked for, also when it tries
 * once (--wait 0), and for a limits/ key, whose deletion it does not
 * watch. What is in nobody's way stays. */
TEST(a_run_kept_out_by_keys_on_no_lease_deletes_them_says_so_and_runs)
{
	lr_client *c = fixture_client("run_stray");
	cli_use_client(c);
	fixture_put(c, "locks/", "doc/#3X/task:ghost", "{\"holder\":\"task:ghost\"}", 0);
	fixture_put(c, "slots/", "gpu/00000", "not json", 0);
	fixture_put(c, "slots/", "gpu/00001", "{\"holder\":\"task:ghost\"}", 0);
	proc_result r = RUN("run", "--lock", "doc=S", "--limit", "gpu=2", "--wait", "0", "--",
	                    "true");
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.err, "leaserun: run: deleted ");
	CHECK_HAS(r.err, "locks/doc/#3X/task:ghost");
	CHECK_HAS(r.err, "slots/gpu/00000");
	CHECK_HAS(r.err, "hung on no lease");
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, "locks/"), ==, 0);
	CHECK_INT(fixture_count(c, "slots/"), ==, 1);

	/* With slot 0 held, a run takes slot 1: a holder under a limit of 1
	 * on no lease is in its way. */
	proc_bg one;
	hold_with(&one, "--limit", "api=2", "2");
	fixture_put(c, "limits/", "api/00001/00000", "{}", 0);
	r = RUN("run", "--limit", "api=2", "--wait", "5", "--", "true");
	CHECK_INT(r.status, ==, 0);
	CHECK_HAS(r.err, "limits/api/00001/00000");
	proc_result_free(&r);
	CHECK_INT(fixture_count(c, "limits/api/00001/"), ==, 0);
	CHECK_INT(proc_stop(&one, SIGTERM, 5000), ==, 128 + SIGTERM);
	lr_client_close(c);
}

TEST(a_writer_is_not_overtaken_by_readers_that_asked_after_it)
{
	proc_bg reader, writer;
	lr_client *c = holder_and_waiter("run_fair", &reader, "doc=S", &writer, "doc=X");
	/* Compatible with the reader that holds, but behind the writer. */
	proc_result r = RUN("run", "--lock", "doc=S", "--wait", "0.3", "--", "true");
	CHECK_INT(r.status, ==, 5);
	CHECK_HAS(r.err, "which asked first");
	proc_result_free(&r);
	CHECK(proc_alive(&writer));
	CHECK_INT(proc_stop(&reader, SIGTERM, 5000), ==, 128 + SIGTERM);
	CHECK_INT(proc_wait(&writer, 5000), ==, 0);
	lr_client_close(c);
}

TEST(locks_json_shows_the_holder_and_the_waiter)
{
	proc_bg holder, waiter;
	lr_client *c = holder_and_waiter("run_list", &holder, "team/agent=X", &waiter,
	                                 "team/agent/tools=IX");
	proc_result r = RUN("locks", "--json");
	CHECK_INT(r.status, ==, 0);
	json_t *doc = json_loads(r.out, 0, NULL);
	CHECK(doc != NULL);
	json_t *held = json_object_get(doc, "held"), *waiting = json_object_get(doc, "waiting");
	CHECK_INT(json_array_size(held), ==, 2); /* team IX, team/agent X */
	CHECK_INT(json_array_size(waiting), ==, 1);
	json_t *w = json_array_get(waiting, 0);
	CHECK(strncmp(json_string_value(json_object_get(w, "holder")), "run:", 4) == 0);
	CHECK_HAS(json_string_value(json_object_get(w, "waiting_for")), "X team/agent held by run");
	json_decref(doc);
	proc_result_free(&r);
	r = RUN("locks");
	CHECK_HAS(r.out, "team/agent");
	CHECK_HAS(r.out, "X team/agent held by run");
	proc_result_free(&r);
	CHECK_INT(proc_stop(&holder, SIGTERM, 5000), ==, 128 + SIGTERM);
	CHECK_INT(proc_wait(&waiter, 5000), ==, 0);
	lr_client_close(c);
}

/* ---- on a terminal ----------------------------------------------------------- */

/* Read fd until `want` shows up or 10 s pass; true when it did. */
static bool read_until(int fd, const char *want)
{
	char buf[4096];
	size_t n = 0;
	int64_t t0 = lr_mono_ms();
	while (lr_mono_ms() - t0 < 10000) {
		struct pollfd p = { fd, POLLIN, 0 };
		if (poll(&p, 1, 100) <= 0)
			continue;
		ssize_t r = read(fd, buf + n, sizeof(buf) - 1 - n);
		if (r <= 0)
			return false;
		n += (size_t)r;
		buf[n] = '\0';
		if (strstr(buf, want) != NULL)
			return true;
		if (n == sizeof(buf) - 1)
			n = 0;
	}
	return false;
}

TEST(a_command_on_a_terminal_reads_it_and_gets_its_ctrl_c)
{
	lr_client *c = fixture_client("run_tty");
	cli_use_client(c);
	int fd = -1;
	pid_t pid = forkpty(&fd, NULL, NULL, NULL);
	CHECK(pid >= 0);
	if (pid == 0) {
		setenv("LEASERUN_ENDPOINTS", cli_env_endpoints, 1);
		setenv("LEASERUN_PREFIX", cli_env_prefix, 1);
		execl(proc_leaserun(), "leaserun", "run", "--lock", "tty", "--", "sh", "-c",
		      "read x; echo got:$x; exec sleep 10", (char *)NULL);
		_exit(127);
	}
	/* Typed ahead; read once the command has the terminal (a command in
	 * a background group would be stopped by SIGTTIN instead). The sleep
	 * is exec'd: a shell that gets SIGINT while it forks a child waits
	 * for the child, which may have missed it. */
	CHECK(write(fd, "hello\n", 6) == 6);
	bool got = read_until(fd, "got:hello");
	/* Ctrl-C reaches the command's group, in the foreground. */
	CHECK(write(fd, "\x03", 1) == 1);
	int st = 0;
	int64_t t0 = lr_mono_ms();
	while (waitpid(pid, &st, WNOHANG) == 0 && lr_mono_ms() - t0 < 10000)
		lr_sleep_ms(20);
	if (lr_mono_ms() - t0 >= 10000) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
	close(fd);
	CHECK(got);
	CHECK(WIFEXITED(st));
	CHECK_INT(WEXITSTATUS(st), ==, 128 + SIGINT);
	CHECK_INT(fixture_count(c, ""), ==, 0);
	lr_client_close(c);
}

/* ---- a holder killed, a lease lost ------------------------------------------- */

/* A holder of lock on a 2 s lease whose command appends the time (ns) to
 * beats every 50 ms; returns once it beat. */
static void beating_holder(proc_bg *bg, const char *lock, char *beats, size_t size)
{
	static int n;
	char script[900], out[600];
	snprintf(beats, size, "%s/beats-%d", cli_tmpdir, n);
	snprintf(out, sizeof(out), "%s/beating-%d.out", cli_tmpdir, n++);
	snprintf(script, sizeof(script), "while :; do date +%%s%%N >> %s; sleep 0.05; done",
	         beats);
	const char *args[] = { "run", "--lock", lock, "--ttl", "2", "--", "sh", "-c", script,
		               NULL };
	cli_start(bg, out, args);
	int64_t t0 = lr_mono_ms();
	while (access(beats, F_OK) != 0 && lr_mono_ms() - t0 < 10000)
		lr_sleep_ms(10);
	lr_sleep_ms(200);
}

/* A beating holder of lock, then sig to it (SIGKILL or SIGSTOP): the next
 * holder of lock runs once the lease expired, after the old command's last
 * beat (its guard stopped it). */
static void next_holder_after_sig_to_a_holder(int sig, const char *lock, proc_bg *bg)
{
	char beats[600];
	beating_holder(bg, lock, beats, sizeof(beats));
	kill(bg->pid, sig);
	if (sig == SIGKILL)
		proc_wait(bg, 5000);
	int64_t t0 = lr_mono_ms();
	proc_result r = RUN("run", "--lock", lock, "--", "sh", "-c", "date +%s%N");
	CHECK_INT(r.status, ==, 0);
	int64_t took = lr_mono_ms() - t0;
	long long first_new = atoll(r.out);
	proc_result_free(&r);
	char *text = proc_slurp(beats);
	size_t len = strlen(text);
	while (len > 0 && text[len - 1] == '\n')
		text[--len] = '\0';
	char *last = strrchr(text, '\n');
	long long last_old = atoll(last != NULL ? last + 1 : text);
	free(text);
	printf("# lock free %lld ms after the holder's %s (TTL 2 s); its command's last "
	       "beat %.1f ms before the next holder's command\n",
	       (long long)took, sig == SIGKILL ? "SIGKILL" : "SIGSTOP",
	       (double)(first_new - last_old) / 1e6);
	CHECK(took < 4000);
	CHECK(first_new > last_old);
}

TEST(a_killed_holders_command_stops_at_once_and_its_locks_free_with_the_lease)
{
	lr_client *c = fixture_client("run_kill");
	cli_use_client(c);
	proc_bg bg;
	next_holder_after_sig_to_a_holder(SIGKILL, "k", &bg);
	lr_client_close(c);
}

TEST(a_frozen_holders_command_is_stopped_before_its_lease_can_expire)
{
	lr_client *c = fixture_client("run_freeze");
	cli_use_client(c);
	proc_bg bg;
	/* No more renewals; its guard is not frozen. */
	next_holder_after_sig_to_a_holder(SIGSTOP, "f", &bg);
	/* Woken, it finds its command stopped and its lease gone. */
	kill(bg.pid, SIGCONT);
	CHECK_INT(proc_wait(&bg, 5000), ==, 1);
	char *log = proc_slurp(bg.log);
	CHECK_HAS(log, "was lost: the command was stopped");
	free(log);
	lr_client_close(c);
}

/* Lines in the file at path (0 when there is none). */
static int lines_in(const char *path)
{
	char *text = proc_slurp(path);
	int n = 0;
	for (const char *p = text; p != NULL && *p != '\0'; p++)
		n += *p == '\n';
	free(text);
	return n;
}

/* etcd frozen past the TTL: no renewal comes, and the guard stops the
 * command ahead of the deadline. A command that obeys SIGTERM ends before
 * the deadline, and run still says that the lease was lost. */
TEST(a_command_stopped_for_the_deadline_while_etcd_froze_exits_1_saying_so)
{
	lr_client *c = fixture_client("run_etcd_frozen");
	cli_use_client(c);
	proc_bg bg;
	char beats[600];
	beating_holder(&bg, "frozen", beats, sizeof(beats));
	CHECK_INT(etcdh_pause(cluster, 0), ==, 0);
	int64_t paused = lr_mono_ms();
	/* Stopped within the TTL (2 s) of the freeze, and still stopped. */
	lr_sleep_ms(2200);
	int stopped = lines_in(beats);
	lr_sleep_ms(800);
	int later = lines_in(beats);
	CHECK_INT(etcdh_resume(cluster, 0), ==, 0);
	printf("# etcd frozen %lld ms\n", (long long)(lr_mono_ms() - paused));
	CHECK_INT(later, ==, stopped);
	CHECK_INT(proc_wait(&bg, 10000), ==, 1);
	char *log = proc_slurp(bg.log);
	CHECK_HAS(log, "was lost: the command was stopped");
	free(log);
	CHECK_INT(etcdh_wait_healthy(cluster, 10), ==, 0);
	lr_client_close(c);
}

TEST(a_hold_that_lost_its_lease_releases_none_of_the_next_holders_keys)
{
	lr_client *c = fixture_client("run_fence");
	lr_err err;
	json_t *locks = json_pack("{s:s}", "doc/1", "X"), *limits = json_pack("{s:i}", "api", 1);
	lr_hold_opts o = { .locks = locks, .limits = limits, .ttl_s = 2, .wait_ms = 5000,
		           .cancel_fd = -1 };
	lr_hold *old = NULL, *next = NULL;
	CHECK_OK(lr_hold_acquire(c, &o, &old, &err), &err);
	int64_t fence = lr_hold_fence(old);
	/* Its lease ends under it, as when etcd expired it. */
	CHECK_OK(lr_lease_revoke(lr_client_etcd(c), lr_hold_lease(old), &err), &err);
	CHECK_OK(lr_hold_acquire(c, &o, &next, &err), &err);
	CHECK(lr_hold_fence(next) > fence);
	/* The old holder learns it from the keepalive, and its command would
	 * be stopped; its release deletes nothing of the next holder's. */
	int64_t t0 = lr_mono_ms();
	uint64_t v;
	while (read(lr_hold_lost_fd(old), &v, sizeof(v)) != sizeof(v) && lr_mono_ms() - t0 < 5000)
		lr_sleep_ms(20);
	CHECK(lr_mono_ms() - t0 < 5000);
	lr_hold_release(old, &err);
	CHECK_INT(fixture_count(c, "locks/"), ==, 2);
	CHECK_INT(fixture_count(c, "slots/"), ==, 1);
	CHECK_OK(lr_hold_release(next, &err), &err);
	CHECK_INT(fixture_count(c, "locks/"), ==, 0);
	CHECK_INT(fixture_count(c, "wants/"), ==, 0);
	json_decref(locks);
	json_decref(limits);
	lr_client_close(c);
}

/* ---- a guard killed ------------------------------------------------------------ */

/* A command that leaves its process group (setsid) with a process that
 * writes its pid to <tag>.pid and the time (ns) to <tag>.beats every
 * 20 ms, writes its own parent's pid (its guard's) to <tag>.guard, and
 * then waits (or, kill_guard, kills its guard at once). */
static void escaping_command(const char *tag, bool kill_guard, char *script, size_t size)
{
	snprintf(script, size,
	         "setsid sh -c 'echo $$ > %s/%s.pid; while :; do date +%%s%%N >> %s/%s.beats; "
	         "sleep 0.02; done' </dev/null >/dev/null 2>&1 & "
	         "while [ ! -s %s/%s.pid ]; do sleep 0.01; done; echo $PPID > %s/%s.guard; %s",
	         cli_tmpdir, tag, cli_tmpdir, tag, cli_tmpdir, tag, cli_tmpdir, tag,
	         kill_guard ? "kill -9 $PPID; exec sleep 20" : "exec sleep 20");
}

/* The pid in <tag>.<what> once it is there. */
static pid_t pid_in(const char *tag, const char *what)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/%s.%s", cli_tmpdir, tag, what);
	int64_t t0 = lr_mono_ms();
	long pid = 0;
	while (pid <= 0 && lr_mono_ms() - t0 < 10000) {
		char *text = proc_slurp(path);
		pid = text != NULL ? atol(text) : 0;
		free(text);
		if (pid <= 0)
			lr_sleep_ms(10);
	}
	if (pid <= 0)
		TEST_FAIL("%s never came", path);
	return (pid_t)pid;
}

/* The last time (ns) in <tag>.beats. */
static long long last_beat(const char *tag)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/%s.beats", cli_tmpdir, tag);
	char *text = proc_slurp(path);
	size_t len = text != NULL ? strlen(text) : 0;
	while (len > 0 && text[len - 1] == '\n')
		text[--len] = '\0';
	char *last = text != NULL ? strrchr(text, '\n') : NULL;
	long long t = text != NULL ? atoll(last != NULL ? last + 1 : text) : 0;
	free(text);
	return t;
}

/* Whether pid is still alive; killed if so, so that a failed test leaves
 * nothing behind. */
static bool alive_then_killed(pid_t pid)
{
	bool alive = kill(pid, 0) == 0;
	if (alive)
		kill(pid, SIGKILL);
	return alive;
}

/* Its guard killed (by the command, the OOM killer, anyone), what the
 * command started outside its process group comes to `leaserun run`,
 * which stops it before the locks go to the next holder. */
TEST(what_a_killed_guard_leaves_is_stopped_before_the_next_holder_runs)
{
	lr_client *c = fixture_client("run_guard_killed");
	cli_use_client(c);
	char script[2000], log[600];
	escaping_command("esc", false, script, sizeof(script));
	snprintf(log, sizeof(log), "%s/esc.log", cli_tmpdir);
	const char *first_args[] = { "run", "--lock", "g", "--ttl", "2", "--", "sh", "-c", script,
		                     NULL };
	proc_bg first, next;
	cli_start(&first, log, first_args);
	pid_t escapee = pid_in("esc", "pid"), guard = pid_in("esc", "guard");
	snprintf(log, sizeof(log), "%s/next.log", cli_tmpdir);
	const char *next_args[] = { "run", "--lock", "g", "--ttl", "2", "--", "sh", "-c",
		                    "date +%s%N", NULL };
	cli_start(&next, log, next_args);
	int64_t t0 = lr_mono_ms();
	while (fixture_count(c, "wants/") < 2 && lr_mono_ms() - t0 < 10000)
		lr_sleep_ms(5);
	int killed = kill(guard, SIGKILL);
	int next_st = proc_wait(&next, 10000), first_st = proc_wait(&first, 10000);
	bool escaped = alive_then_killed(escapee); /* before any check can fail */
	char *text = proc_slurp(next.log);
	long long first_new = atoll(text);
	free(text);
	long long last_old = last_beat("esc");
	printf("# the escapee's last beat %.1f ms before the next holder's command\n",
	       (double)(first_new - last_old) / 1e6);
	CHECK_INT(killed, ==, 0);
	CHECK_INT(next_st, ==, 0);
	CHECK_INT(first_st, ==, 1);
	CHECK(!escaped);
	CHECK(first_new > last_old);
	text = proc_slurp(first.log);
	CHECK_HAS(text, "guard was killed; what the command left running was stopped");
	free(text);
	CHECK_INT(fixture_count(c, ""), ==, 0);
	lr_client_close(c);
}

/* An application does not adopt orphans (its other children are its
 * own): what a killed guard leaves cannot be stopped, so the lease is
 * not revoked under it, and the locks are the next holder's only once it
 * expired. */
TEST(a_hold_whose_guard_was_killed_in_an_application_leaves_its_lease_to_expire)
{
	lr_client *c = fixture_client("run_guard_killed_api");
	lr_err err;
	json_t *locks = json_pack("{s:s}", "left", "X");
	lr_hold_opts o = { .locks = locks, .ttl_s = 2, .wait_ms = 5000, .cancel_fd = -1 };
	lr_hold *h = NULL;
	CHECK_OK(lr_hold_acquire(c, &o, &h, &err), &err);
	char script[2000];
	escaping_command("api", true, script, sizeof(script));
	char sh[] = "sh", dash_c[] = "-c";
	char *argv[] = { sh, dash_c, script, NULL };
	int ws = 0;
	int rc = lr_hold_exec(h, argv, -1, 1000, &ws, &err);
	pid_t escapee = pid_in("api", "pid");
	char said[sizeof(err.msg)];
	snprintf(said, sizeof(said), "%s", err.msg);
	int released = lr_hold_release(h, &err);
	int held = (int)fixture_count(c, "locks/");
	/* Gone with the lease, within its TTL. */
	int64_t t0 = lr_mono_ms();
	while (fixture_count(c, "locks/") > 0 && lr_mono_ms() - t0 < 5000)
		lr_sleep_ms(50);
	int64_t took = lr_mono_ms() - t0;
	bool escaped = alive_then_killed(escapee); /* before any check can fail */
	printf("# the lock free %lld ms after the release\n", (long long)took);
	CHECK(escaped); /* out of this process's reach, as documented */
	CHECK_INT(rc, ==, LR_ESYS);
	CHECK_HAS(said, "some may still run, so the hold's lease");
	CHECK_INT(released, ==, 0);
	CHECK_INT(held, ==, 1);
	CHECK_INT(fixture_count(c, ""), ==, 0);
	json_decref(locks);
	lr_client_close(c);
}

/* The lease of the one request in wants/ under c's prefix: a run's. */
static int64_t only_request_lease(lr_client *c)
{
	char key[LR_KEY_SIZE];
	lr_key(c, LR_K_WANTS, "", key);
	lr_range_opts ro = { .key = key, .flags = LR_KEY_PREFIX };
	lr_range_result r;
	lr_err err;
	CHECK_OK(lr_kv_range(lr_client_etcd(c), &ro, &r, &err), &err);
	CHECK_INT(r.n, ==, 1);
	int64_t lease = r.kvs[0].lease;
	lr_range_result_free(&r);
	return lease;
}

TEST(a_run_whose_lease_is_lost_stops_its_command_and_exits_1)
{
	lr_client *c = fixture_client("run_lost");
	cli_use_client(c);
	proc_bg bg;
	hold_in_background(&bg, "lost", "2");
	/* Its lease ended under it. */
	int64_t lease = only_request_lease(c);
	lr_err err;
	CHECK_OK(lr_lease_revoke(lr_client_etcd(c), lease, &err), &err);
	/* Noticed at the next renewal (TTL/3), the command stopped at once. */
	CHECK_INT(proc_wait(&bg, 5000), ==, 1);
	char *log = proc_slurp(bg.log);
	CHECK_HAS(log, "was lost: the command was stopped");
	free(log);
	lr_client_close(c);
}

/* The lease of a waiting run is lost (revoked here; etcd unreachable
 * past its TTL or the process stopped do the same): nothing is held, so
 * it asks again on a new lease, says so, and takes the lock once free. */
TEST(a_run_whose_lease_is_lost_while_waiting_asks_again_on_a_new_one)
{
	proc_bg holder, waiter;
	lr_client *c = holder_and_waiter("run_lost_waiting", &holder, "q", &waiter, "q");
	char prefix[LR_KEY_SIZE];
	lr_key(c, LR_K_WANTS, "run:", prefix);
	lr_range_opts ro = { .key = prefix, .flags = LR_KEY_PREFIX | LR_RANGE_SORT_CREATE };
	lr_range_result got;
	lr_err e = {0};
	CHECK_OK(lr_kv_range(lr_client_etcd(c), &ro, &got, &e), &e);
	CHECK_INT((int64_t)got.n, ==, 2);
	int64_t lease = got.kvs[1].lease; /* the waiter's: the later request */
	lr_range_result_free(&got);
	CHECK_OK(lr_lease_revoke(lr_client_etcd(c), lease, &e), &e);
	/* Asked again: two requests once more, the waiter's on a new lease. */
	int64_t t0 = lr_mono_ms();
	for (;;) {
		CHECK_OK(lr_kv_range(lr_client_etcd(c), &ro, &got, &e), &e);
		bool again = got.n == 2 && got.kvs[1].lease != lease;
		lr_range_result_free(&got);
		if (again)
			break;
		if (lr_mono_ms() - t0 > 10000)
			TEST_FAIL("the waiter never asked again");
		lr_sleep_ms(20);
	}
	CHECK_INT(proc_stop(&holder, SIGTERM, 5000), ==, 128 + SIGTERM);
	CHECK_INT(proc_wait(&waiter, 10000), ==, 0);
	char *log = proc_slurp(waiter.log);
	CHECK_HAS(log, "its lease was lost while waiting: asking again on a new lease");
	free(log);
	lr_client_close(c);
}

/* A task that asked first but waits for its start time (tomorrow) holds
 * back nobody meanwhile, as runners already treat it: a run goes ahead. */
TEST(a_task_waiting_for_its_start_time_does_not_hold_back_a_run)
{
	lr_client *c = fixture_client("run_not_before");
	cli_use_client(c);
	proc_result r = RUN_STDIN("{\"id\":\"later\",\"locks\":{\"db\":\"X\"},"
	                          "\"steps\":[{\"name\":\"s\",\"run\":\"true\"}]}",
	                          "submit", "--in", "1d");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	r = RUN("run", "--lock", "db", "--wait", "5", "--", "true");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	/* A task due now still goes first. */
	r = RUN_STDIN("{\"id\":\"now\",\"locks\":{\"db\":\"X\"},"
	              "\"steps\":[{\"name\":\"s\",\"run\":\"true\"}]}", "submit");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	r = RUN("run", "--lock", "db", "--wait", "1", "--", "true");
	CHECK_INT(r.status, ==, 5);
	proc_result_free(&r);
	lr_client_close(c);
}

/* The request of a task whose tasks/ key was deleted by hand (purge
 * deletes both) is left over: it holds back no run, while the request of
 * a task that lives still does. */
TEST(a_request_left_by_a_task_deleted_by_hand_does_not_hold_back_a_run)
{
	lr_client *c = fixture_client("run_left_over");
	cli_use_client(c);
	proc_result r = RUN_STDIN("{\"id\":\"ghost\",\"locks\":{\"db\":\"X\"},"
	                          "\"steps\":[{\"name\":\"s\",\"run\":\"true\"}]}", "submit");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	/* It lives: the run waits behind it. */
	r = RUN("run", "--lock", "db", "--wait", "0.5", "--", "true");
	CHECK_INT(r.status, ==, 5);
	CHECK_HAS(r.err, "behind task ghost");
	proc_result_free(&r);
	char key[LR_KEY_SIZE];
	lr_key(c, LR_K_TASKS, "ghost", key);
	lr_err e = {0};
	int64_t deleted = 0;
	int64_t rev = 0;
	CHECK_INT(lr_kv_delete(lr_client_etcd(c), key, 0, &deleted, &rev, &e), ==, 0);
	CHECK_INT(deleted, ==, 1);
	char *wants = fixture_get(c, "wants/", "task:ghost");
	CHECK(wants != NULL); /* still there: only a purge deletes it */
	free(wants);
	r = RUN("run", "--lock", "db", "--wait", "5", "--", "true");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	lr_client_close(c);
}

/* A worker under the test's prefix in the background, up to 3 tasks at
 * once. */
static void worker_in_background(proc_bg *p, const char *name)
{
	char log[600];
	snprintf(log, sizeof(log), "%s/worker-%s.log", cli_tmpdir, name);
	const char *args[] = { "worker", "--ttl", "2", "--concurrency", "3", "--name", name, NULL };
	cli_start(p, log, args);
}

/* Submit specs (one a line) and start a worker for them. */
static void submit_to_a_worker(const char *specs, proc_bg *worker, const char *name)
{
	proc_result r = RUN_STDIN(specs, "submit", "--jsonl", "-");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	worker_in_background(worker, name);
}

/* The shell text of a step that takes `lock` (PATH=MODE) with `leaserun run`
 * under the test's etcd and prefix, waiting 5 s at most, then runs true. */
static void run_in_a_step(char *out, size_t size, const char *lock)
{
	snprintf(out, size, "LEASERUN_ENDPOINTS=%s LEASERUN_PREFIX=%s %s run --lock %s "
	         "--wait 5 -- true", cli_env_endpoints, cli_env_prefix, proc_leaserun(), lock);
}

/* The value of kind/id once it exists (new string); fails the test after
 * timeout_ms. */
static char *await_key(lr_client *c, const char *kind, const char *id, int timeout_ms)
{
	int64_t t0 = lr_mono_ms();
	char *v;
	while ((v = fixture_get(c, kind, id)) == NULL) {
		if (lr_mono_ms() - t0 > timeout_ms)
			TEST_FAIL("%s%s never came", kind, id);
		lr_sleep_ms(20);
	}
	return v;
}

static void check_succeeded(lr_client *c, const char *id, int timeout_ms)
{
	char *done = await_key(c, "done/", id, timeout_ms);
	CHECK_HAS(done, "\"status\":\"succeeded\"");
	free(done);
}

/* A task that asked first but waits for a task of its "after" holds back
 * nobody meanwhile, as runners already treat it: a run goes ahead, as a
 * task the runner dispatches does, and `leaserun locks` says what the
 * task waits for. */
TEST(a_task_waiting_for_a_dependency_does_not_hold_back_a_run)
{
	lr_client *c = fixture_client("run_after");
	cli_use_client(c);
	char specs[1200];
	snprintf(specs, sizeof(specs),
	         "{\"id\":\"D\",\"steps\":[{\"name\":\"s\",\"run\":\"while [ ! -e %s/go ]; do "
	         "sleep 0.05; done\"}]}\n"
	         "{\"id\":\"T\",\"steps\":[{\"name\":\"s\",\"run\":\"true\"}],\"after\":[\"D\"],"
	         "\"locks\":{\"res\":\"X\"}}\n", cli_tmpdir);
	proc_bg worker;
	submit_to_a_worker(specs, &worker, "w1");
	free(await_key(c, "claims/", "D", 10000));
	proc_result r = RUN_STDIN("{\"id\":\"U\",\"steps\":[{\"name\":\"s\",\"run\":\"true\"}],"
	                          "\"locks\":{\"res\":\"X\"}}", "submit", "-");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	check_succeeded(c, "U", 10000);
	r = RUN("run", "--lock", "res=X", "--wait", "3", "--", "true");
	CHECK_INT(r.status, ==, 0);
	proc_result_free(&r);
	r = RUN("locks", "--json");
	CHECK_INT(r.status, ==, 0);
	json_t *doc = json_loads(r.out, 0, NULL);
	json_t *w = json_array_get(json_object_get(doc, "waiting"), 0);
	CHECK_STR(json_string_value(json_object_get(w, "holder")), "task:T");
	CHECK_STR(json_string_value(json_object_get(w, "waiting_for")),
	          "after D, which has not finished");
	json_decref(doc);
	proc_result_free(&r);
	/* Once D has finished, T takes the lock and runs. */
	cli_write_file("go", "");
	check_succeeded(c, "D", 10000);
	check_succeeded(c, "T", 10000);
	CHECK_INT(proc_stop(&worker, SIGTERM, 10000), ==, 0);
	lr_client_close(c);
}

/* A task whose step takes, with `leaserun run`, the lock of a task that
 * waits for it: the dependent does not hold the run back, so neither
 * waits for the other for ever. */
TEST(a_run_in_a_dependency_is_not_held_back_by_its_dependent)
{
	lr_client *c = fixture_client("run_after_cycle");
	cli_use_client(c);
	char step[1000], specs[2000];
	run_in_a_step(step, sizeof(step), "res=X");
	snprintf(specs, sizeof(specs),
	         "{\"id\":\"D\",\"steps\":[{\"name\":\"s\",\"run\":\"%s\"}]}\n"
	         "{\"id\":\"T\",\"steps\":[{\"name\":\"s\",\"run\":\"true\"}],\"after\":[\"D\"],"
	         "\"locks\":{\"res\":\"X\"}}\n",
	         step);
	proc_bg worker;
	submit_to_a_worker(specs, &worker, "w2");
	check_succeeded(c, "D", 20000);
	check_succeeded(c, "T", 10000);
	CHECK_INT(proc_stop(&worker, SIGTERM, 10000), ==, 0);
	lr_client_close(c);
}

/* W asks for res/a, res/b and res/c while res/c is held (by a run), so T,
 * asking for res/a only, goes ahead of it; then T's step (step: its shell
 * text) asks for res/b, for which W waits too, and waits for that. T, and
 * `also` (a task its step made; may be NULL), succeed while W waits; W
 * succeeds once res/c is free. */
static void step_of_a_task_an_older_waiter_waits_for(lr_client *c, const char *step,
                                                     const char *also, const char *worker_name)
{
	proc_bg holder;
	hold_in_background(&holder, "res/c", "2");
	char specs[3000];
	snprintf(specs, sizeof(specs),
	         "{\"id\":\"W\",\"steps\":[{\"name\":\"s\",\"run\":\"true\"}],"
	         "\"locks\":{\"res/a\":\"X\",\"res/b\":\"X\",\"res/c\":\"X\"}}\n"
	         "{\"id\":\"T\",\"steps\":[{\"name\":\"s\",\"run\":\"%s\"}],"
	         "\"max_attempts\":1,\"locks\":{\"res/a\":\"X\"}}\n",
	         step);
	proc_bg worker;
	submit_to_a_worker(specs, &worker, worker_name);
	if (also != NULL)
		check_succeeded(c, also, 20000);
	check_succeeded(c, "T", 20000);
	char *done = fixture_get(c, "done/", "W");
	CHECK(done == NULL); /* held up by res/c all along */
	free(done);
	CHECK_INT(proc_stop(&holder, SIGTERM, 10000), ==, 128 + SIGTERM);
	check_succeeded(c, "W", 20000);
	CHECK_INT(proc_stop(&worker, SIGTERM, 10000), ==, 0);
}

/* A task that went ahead of an older waiter (held up then by another
 * holder) and whose step takes, with `leaserun run`, a lock that waiter
 * also asks for: the waiter now waits for that very task, so the run,
 * made within it (LEASERUN_TASK_ID), does not wait behind the waiter. */
TEST(a_run_in_a_step_is_not_held_back_by_a_waiter_that_waits_for_its_task)
{
	lr_client *c = fixture_client("run_within");
	cli_use_client(c);
	char step[1000];
	run_in_a_step(step, sizeof(step), "res/b=X");
	step_of_a_task_an_older_waiter_waits_for(c, step, NULL, "w3");
	lr_client_close(c);
}

/* The same with a sub-task: a step of T submits S, which asks for a lock
 * the older waiter W also asks for, and waits for S to finish. W waits for
 * T, so S, submitted within T (LEASERUN_TASK_ID), does not wait behind W:
 * otherwise S would wait for W, W for T and T for S, for ever. */
TEST(a_sub_task_awaited_by_its_step_is_not_held_back_by_a_waiter_that_waits_for_its_task)
{
	lr_client *c = fixture_client("submit_within");
	cli_use_client(c);
	char sub[600], step[2000];
	snprintf(sub, sizeof(sub), "%s",
	         cli_write_file("sub.json", "{\"id\":\"S\",\"steps\":[{\"name\":\"s\","
	                                    "\"run\":\"true\"}],\"locks\":{\"res/b\":\"X\"}}"));
	/* Submit S, then wait up to 8 s for its result. */
	snprintf(step, sizeof(step),
	         "export LEASERUN_ENDPOINTS=%s LEASERUN_PREFIX=%s; %s submit %s && "
	         "for i in $(seq 80); do %s status S --json | grep -q succeeded && exit 0; "
	         "sleep 0.1; done; exit 1",
	         cli_env_endpoints, cli_env_prefix, proc_leaserun(), sub, proc_leaserun());
	step_of_a_task_an_older_waiter_waits_for(c, step, "S", "w4");
	lr_client_close(c);
}

/* The same with a command that ignores SIGTERM and a long --grace: the
 * locks may be the next holder's at once, so no grace is given. Renewals
 * come every 2 s (TTL 6), so the loss is seen within 2 s of the revoke; a
 * grace would last until the guard's cap, 3.8 to 5.8 s after it. */
TEST(a_lost_lease_gives_the_command_no_grace)
{
	lr_client *c = fixture_client("run_lost_nograce");
	cli_use_client(c);
	char mark[600], log[600], script[700];
	snprintf(mark, sizeof(mark), "%s/stubborn", cli_tmpdir);
	snprintf(log, sizeof(log), "%s/stubborn.log", cli_tmpdir);
	snprintf(script, sizeof(script), "trap '' TERM; touch %s; while :; do sleep 0.1; done",
	         mark);
	const char *args[] = { "run", "--lock", "stubborn", "--ttl", "9", "--grace", "60", "--",
		               "sh", "-c", script, NULL };
	proc_bg bg;
	cli_start(&bg, log, args);
	int64_t t0 = lr_mono_ms();
	while (access(mark, F_OK) != 0 && proc_alive(&bg) && lr_mono_ms() - t0 < 10000)
		lr_sleep_ms(5);
	CHECK(access(mark, F_OK) == 0);
	int64_t lease = only_request_lease(c);
	lr_err err;
	/* Revoked just after a renewal: the next comes TTL/3 (3 s) later.
	 * The hold watches its request, whose deletion tells it at once. */
	int64_t ttl = 0, last = 0, granted = 0;
	CHECK_OK(lr_lease_ttl(lr_client_etcd(c), lease, &last, &granted, &err), &err);
	for (int64_t end = lr_mono_ms() + 10000; lr_mono_ms() < end; last = ttl) {
		lr_sleep_ms(20);
		CHECK_OK(lr_lease_ttl(lr_client_etcd(c), lease, &ttl, &granted, &err), &err);
		if (ttl > last)
			break; /* renewed just now */
	}
	int64_t revoked = lr_mono_ms();
	CHECK_OK(lr_lease_revoke(lr_client_etcd(c), lease, &err), &err);
	CHECK_INT(proc_wait(&bg, 10000), ==, 1);
	int64_t took = lr_mono_ms() - revoked;
	printf("# stopped %lld ms after the revoke\n", (long long)took);
	CHECK_INT(took, <, 1500);
	char *text = proc_slurp(bg.log);
	CHECK_HAS(text, "was lost: the command was stopped");
	free(text);
	lr_client_close(c);
}

TEST_LIST(TEST_CASE(the_compatibility_matrix_holds_pair_by_pair),
          TEST_CASE(a_run_whose_lease_is_lost_stops_its_command_and_exits_1),
          TEST_CASE(a_run_whose_lease_is_lost_while_waiting_asks_again_on_a_new_one),
          TEST_CASE(a_lost_lease_gives_the_command_no_grace),
          TEST_CASE(a_task_waiting_for_its_start_time_does_not_hold_back_a_run),
          TEST_CASE(a_request_left_by_a_task_deleted_by_hand_does_not_hold_back_a_run),
          TEST_CASE(a_task_waiting_for_a_dependency_does_not_hold_back_a_run),
          TEST_CASE(a_run_in_a_dependency_is_not_held_back_by_its_dependent),
          TEST_CASE(a_run_in_a_step_is_not_held_back_by_a_waiter_that_waits_for_its_task),
          TEST_CASE(a_sub_task_awaited_by_its_step_is_not_held_back_by_a_waiter_that_waits_for_its_task),
          TEST_CASE(it_exits_with_its_commands_status_and_the_command_sees_what_it_holds),
          TEST_CASE(invalid_locks_and_limits_exit_2_naming_them_and_store_nothing),
          TEST_CASE(a_signal_while_waiting_exits_128_plus_it_and_withdraws_the_request),
          TEST_CASE(a_holder_named_with_control_characters_is_shown_on_one_line),
          TEST_CASE(a_limit_of_2_is_never_exceeded_by_5_holders),
          TEST_CASE(a_larger_limit_does_not_join_a_holder_of_a_smaller_one),
          TEST_CASE(a_run_kept_out_by_keys_on_no_lease_deletes_them_says_so_and_runs),
          TEST_CASE(a_writer_is_not_overtaken_by_readers_that_asked_after_it),
          TEST_CASE(locks_json_shows_the_holder_and_the_waiter),
          TEST_CASE(a_command_on_a_terminal_reads_it_and_gets_its_ctrl_c),
          TEST_CASE(a_killed_holders_command_stops_at_once_and_its_locks_free_with_the_lease),
          TEST_CASE(a_frozen_holders_command_is_stopped_before_its_lease_can_expire),
          TEST_CASE(a_command_stopped_for_the_deadline_while_etcd_froze_exits_1_saying_so),
          TEST_CASE(a_hold_that_lost_its_lease_releases_none_of_the_next_holders_keys),
          TEST_CASE(what_a_killed_guard_leaves_is_stopped_before_the_next_holder_runs),
          TEST_CASE(a_hold_whose_guard_was_killed_in_an_application_leaves_its_lease_to_expire));
TEST_MAIN(cli_setup, cli_teardown)
