/* test_exec.c - how a shell step runs: state files in and out, exit statuses,
 * output lines, timeouts, cancels, deadlines, process groups, no leftovers. */
#include <dirent.h>
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
#include "exec/exec.h"
#include "exec/orphans.h"
#include "records/spec.h"
#include "test.h"

extern char **environ;

/* ---- fixture: a private base directory and the collected output ---- */

#define MAX_LINES 2000

static struct {
	char base[64];
	int n;
	int fd[MAX_LINES];
	char *text[MAX_LINES];
	int cancel_w;          /* written when a line "ready" arrives; -1 */
	int64_t ready_ms;
} fx;

static void on_line(void *user, int fd, const char *line)
{
	(void)user;
	if (fx.n < MAX_LINES) {
		fx.fd[fx.n] = fd;
		fx.text[fx.n] = strdup(line);
		fx.n++;
	}
	if (strcmp(line, "ready") == 0) {
		fx.ready_ms = lr_mono_ms();
		if (fx.cancel_w >= 0)
			CHECK(write(fx.cancel_w, "x", 1) == 1);
	}
}

static void lines_clear(void)
{
	for (int i = 0; i < fx.n; i++)
		free(fx.text[i]);
	fx.n = 0;
}

/* The i-th line of stream fd, or NULL. */
static const char *line_of(int fd, int i)
{
	for (int k = 0; k < fx.n; k++)
		if (fx.fd[k] == fd && i-- == 0)
			return fx.text[k];
	return NULL;
}

static int lines_on(int fd)
{
	int n = 0;
	for (int k = 0; k < fx.n; k++)
		n += fx.fd[k] == fd;
	return n;
}

/* The first stdout line starting with prefix, past the prefix. */
static const char *value_of(const char *prefix)
{
	for (int k = 0; k < fx.n; k++)
		if (fx.fd[k] == 1 && strncmp(fx.text[k], prefix, strlen(prefix)) == 0)
			return fx.text[k] + strlen(prefix);
	return NULL;
}

static int dir_entries(const char *path)
{
	DIR *d = opendir(path);
	int n = 0;
	if (d == NULL)
		return -1;
	for (;;) {
		struct dirent *e = readdir(d);
		if (e == NULL)
			break;
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			n++;
	}
	closedir(d);
	return n;
}

static int open_fds(void)
{
	return dir_entries("/proc/self/fd");
}

static void opts_init(lr_exec_opts *o, const char *run)
{
	memset(o, 0, sizeof(*o));
	o->run = run;
	o->env = environ;
	o->state_in = "{\"n\":1}";
	o->work_dir_base = fx.base;
	o->task_id = "report-7";
	o->fence = 12;
	o->attempt = 3;
	o->grace_ms = 2000;
	o->cancel_fd = -1;
	o->line = on_line;
	lines_clear();
	fx.cancel_w = -1;
	fx.ready_ms = 0;
}

/* The step printed its shell's pid ($$) as "pid=N": its process group. */
static pid_t step_pgid(void)
{
	const char *v = value_of("pid=");
	CHECK(v != NULL);
	return (pid_t)atoi(v);
}

/* The state letter of process pid ('Z' zombie) and its process group, read
 * from /proc/<pid>/stat; 0 when there is no such process. */
static char proc_state(pid_t pid, pid_t *pgrp)
{
	char path[64], buf[512];
	char state = 0;
	int pg = 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (f == NULL)
		return 0;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *rparen = strrchr(buf, ')'); /* after the command name */
	if (rparen == NULL || sscanf(rparen + 1, " %c %*d %d", &state, &pg) != 2)
		return 0;
	if (pgrp != NULL)
		*pgrp = pg;
	return state;
}

/* This program is a child subreaper (see setup): the orphans a step leaves
 * come back to it, not to init. Reap those that died; a dead step shell (a
 * group leader: pid == pgrp) left unreaped is a zombie leak. */
static void reap_orphans(void)
{
	for (;;) {
		siginfo_t si;
		pid_t pg = 0;
		memset(&si, 0, sizeof(si));
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 ||
		    si.si_pid == 0)
			return;
		proc_state(si.si_pid, &pg);
		if (pg == si.si_pid)
			TEST_FAIL("step shell %d left unreaped", (int)si.si_pid);
		waitpid(si.si_pid, NULL, 0);
	}
}

/* Run, expecting the step to have been started; the state directory must
 * be gone afterwards, and no zombie left behind. */
static void run(const lr_exec_opts *o, lr_exec_result *res)
{
	lr_err err = { 0 };
	CHECK_OK(lr_exec_run(o, res, &err), &err);
	CHECK_INT(dir_entries(fx.base), ==, 0);
	reap_orphans();
}

/* No process of the group is left: the group id is unknown to kill(2).
 * Killed orphans need a moment to turn into zombies and be reaped. */
static int group_gone(pid_t pgid)
{
	for (int i = 0; i < 100; i++) {
		reap_orphans();
		if (kill(-pgid, 0) == -1 && errno == ESRCH)
			return 1;
		lr_sleep_ms(10);
	}
	return 0;
}

static int process_gone(pid_t pid)
{
	for (int i = 0; i < 100; i++) {
		waitpid(pid, NULL, WNOHANG); /* an orphan: ours to reap */
		if (kill(pid, 0) == -1 && errno == ESRCH)
			return 1;
		lr_sleep_ms(10);
	}
	return 0;
}

static int setup(void)
{
	/* Orphans of steps are reparented here and reaped at once by the
	 * tests, rather than by init at its own pace. */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
		return -1;
	snprintf(fx.base, sizeof(fx.base), "/tmp/lr-test-exec.XXXXXX");
	return mkdtemp(fx.base) != NULL ? 0 : -1;
}

static void teardown(void)
{
	lines_clear();
	rmdir(fx.base);
}

/* ---- state in and out ---- */

TEST(exit_zero_with_state_written_returns_the_new_state)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "echo '{\"n\": 2, \"list\": [1, 2]}' > \"$LEASERUN_STATE_OUT\"");
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_OK);
	CHECK_INT(res.exit_status, ==, 0);
	CHECK_STR(res.state_out, "{\"n\":2,\"list\":[1,2]}");
	CHECK_STR(res.msg, "exit status 0");
	lr_exec_result_clear(&res);
	CHECK(res.state_out == NULL);
}

TEST(step_reads_the_current_state_from_state_in)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "sed 's/1/2/' \"$LEASERUN_STATE_IN\" > \"$LEASERUN_STATE_OUT\"");
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_OK);
	CHECK_STR(res.state_out, "{\"n\":2}");
	lr_exec_result_clear(&res);
}

TEST(empty_or_blank_state_out_leaves_the_state_unchanged)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "true");
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_OK);
	CHECK(res.state_out == NULL);
	opts_init(&o, "printf ' \\n\\t\\r\\n' > \"$LEASERUN_STATE_OUT\"");
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_OK);
	CHECK(res.state_out == NULL);
	opts_init(&o, "rm \"$LEASERUN_STATE_OUT\"");
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_OK);
	CHECK(res.state_out == NULL);
}

TEST(any_json_value_is_a_state)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "echo 42 > \"$LEASERUN_STATE_OUT\"");
	run(&o, &res);
	CHECK_STR(res.state_out, "42");
	lr_exec_result_clear(&res);
	opts_init(&o, "echo '[ \"a\" , null ]' > \"$LEASERUN_STATE_OUT\"");
	run(&o, &res);
	CHECK_STR(res.state_out, "[\"a\",null]");
	lr_exec_result_clear(&res);
}

TEST(invalid_state_json_is_bad_state_with_line_and_column)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "printf '{\"a\": }' > \"$LEASERUN_STATE_OUT\"");
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_BAD_STATE);
	CHECK(res.state_out == NULL);
	CHECK_HAS(res.msg, "LEASERUN_STATE_OUT: line 1, column 7: ");
	opts_init(&o, "printf '{\"a\": \"\\\\u0000\"}' > \"$LEASERUN_STATE_OUT\"");
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_BAD_STATE);
	CHECK_HAS(res.msg, "LEASERUN_STATE_OUT: line 1, column 14: \\u0000 is not allowed near");
	CHECK(strstr(res.msg, "JSON_ALLOW_NUL") == NULL);
	opts_init(&o, "printf '{\"a\": 1, \"a\": 2}' > \"$LEASERUN_STATE_OUT\"");
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_BAD_STATE);
	CHECK_HAS(res.msg, "duplicate");
}

TEST(state_over_512_kib_is_bad_state)
{
	lr_exec_opts o;
	lr_exec_result res;
	/* A JSON string of 600000 a's: 600002 bytes encoded. */
	opts_init(&o, "{ printf '\"'; head -c 600000 /dev/zero | tr '\\0' a; "
	              "printf '\"'; } > \"$LEASERUN_STATE_OUT\"");
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_BAD_STATE);
	CHECK(res.state_out == NULL);
	CHECK_HAS(res.msg, "LEASERUN_STATE_OUT: 600002 bytes");
	CHECK_HAS(res.msg, "512 KiB");
}

TEST(state_of_exactly_512_kib_is_accepted)
{
	lr_exec_opts o;
	lr_exec_result res;
	char cmd[256];
	snprintf(cmd, sizeof(cmd),
	         "{ printf '\"'; head -c %d /dev/zero | tr '\\0' a; printf '\"'; } "
	         "> \"$LEASERUN_STATE_OUT\"", LR_STATE_MAX_BYTES - 2);
	opts_init(&o, cmd);
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_OK);
	CHECK_INT(strlen(res.state_out), ==, LR_STATE_MAX_BYTES);
	lr_exec_result_clear(&res);
}

/* The limit is on the state, not on how the step laid it out. */
TEST(state_file_over_512_kib_of_whitespace_is_judged_by_its_compact_size)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "{ printf '['; head -c 700000 /dev/zero | tr '\\0' ' '; "
	              "printf '1]'; } > \"$LEASERUN_STATE_OUT\"");
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_OK);
	CHECK_STR(res.state_out, "[1]");
	lr_exec_result_clear(&res);
}

TEST(huge_state_file_is_refused_without_being_read)
{
	lr_exec_opts o;
	lr_exec_result res;
	/* Sparse: 10 GiB that take no disk, and no time unless read. */
	opts_init(&o, "truncate -s 10G \"$LEASERUN_STATE_OUT\"");
	int64_t t0 = lr_mono_ms();
	run(&o, &res);
	CHECK_INT(lr_mono_ms() - t0, <, 2000);
	CHECK_INT(res.outcome, ==, LR_EXEC_BAD_STATE);
	CHECK_HAS(res.msg, "LEASERUN_STATE_OUT: file of 10737418240 bytes");
}

TEST(state_out_replaced_by_a_fifo_is_bad_state_not_a_hang)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "rm \"$LEASERUN_STATE_OUT\" && mkfifo \"$LEASERUN_STATE_OUT\"");
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_BAD_STATE);
	CHECK_HAS(res.msg, "not a regular file");
}

TEST(state_is_not_read_after_a_failure)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "echo '{\"n\":2}' > \"$LEASERUN_STATE_OUT\"; exit 1");
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_EXIT);
	CHECK(res.state_out == NULL);
}

/* ---- exit statuses and output ---- */

TEST(non_zero_exit_is_exit_with_status_and_stderr_tail)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "for i in $(seq 1 30); do echo \"err $i\" >&2; done; "
	              "echo out; exit 3");
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_EXIT);
	CHECK_INT(res.exit_status, ==, 3);
	CHECK_STR(res.msg, "exit status 3");
	/* The last 20 lines of stderr, and nothing of stdout. */
	CHECK(strncmp(res.stderr_tail, "err 11\nerr 12\n", 14) == 0);
	const char *end = res.stderr_tail + strlen(res.stderr_tail) - 7;
	CHECK_STR(end, "\nerr 30");
	CHECK(strstr(res.stderr_tail, "out") == NULL);
}

TEST(stderr_tail_fits_its_buffer_with_long_lines)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "for i in 1 2 3 4 5 6 7 8 9; do head -c 3000 /dev/zero | "
	              "tr '\\0' e >&2; echo >&2; done; echo last >&2; exit 1");
	run(&o, &res);
	CHECK_INT(strlen(res.stderr_tail), <, sizeof(res.stderr_tail));
	const char *end = res.stderr_tail + strlen(res.stderr_tail) - 5;
	CHECK_STR(end, "\nlast");
}

TEST(shell_killed_by_a_signal_is_signal)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "kill -9 $$");
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_SIGNAL);
	CHECK_INT(res.signal, ==, SIGKILL);
	CHECK_STR(res.msg, "killed by signal 9 (SIGKILL)");
}

TEST(output_lines_arrive_in_order_on_both_streams)
{
	lr_exec_opts o;
	lr_exec_result res;
	char want[32];
	opts_init(&o, "i=0; while [ $i -lt 300 ]; do echo \"out $i\"; "
	              "echo \"err $i\" >&2; i=$((i+1)); done; printf 'no newline'");
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_OK);
	CHECK_INT(lines_on(1), ==, 301);
	CHECK_INT(lines_on(2), ==, 300);
	for (int i = 0; i < 300; i++) {
		snprintf(want, sizeof(want), "out %d", i);
		CHECK_STR(line_of(1, i), want);
		snprintf(want, sizeof(want), "err %d", i);
		CHECK_STR(line_of(2, i), want);
	}
	CHECK_STR(line_of(1, 300), "no newline");
}

TEST(carriage_returns_and_nul_bytes_are_cleaned_from_lines)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "printf 'dos\\r\\na\\000b\\n'");
	run(&o, &res);
	CHECK_STR(line_of(1, 0), "dos");
	CHECK_STR(line_of(1, 1), "a?b");
}

TEST(long_lines_are_split_at_4096_bytes_on_character_boundaries)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "head -c 10000 /dev/zero | tr '\\0' x; echo; "
	              "head -c 4095 /dev/zero | tr '\\0' y; printf '\\303\\251z\\n'");
	run(&o, &res);
	CHECK_INT(lines_on(1), ==, 5);
	CHECK_INT(strlen(line_of(1, 0)), ==, 4096);
	CHECK_INT(strlen(line_of(1, 1)), ==, 4096);
	CHECK_INT(strlen(line_of(1, 2)), ==, 10000 - 2 * 4096);
	/* "é" would straddle byte 4096: it starts the next piece instead. */
	CHECK_INT(strlen(line_of(1, 3)), ==, 4095);
	CHECK_STR(line_of(1, 4), "\xc3\xa9z");
}

TEST(stdin_is_dev_null)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "if read x; then echo got; else echo eof; fi; "
	              "readlink /proc/$$/fd/0");
	run(&o, &res);
	CHECK_STR(line_of(1, 0), "eof");
	CHECK_STR(line_of(1, 1), "/dev/null");
}

TEST(step_sees_only_stdin_stdout_and_stderr)
{
	lr_exec_opts o;
	lr_exec_result res;
	int stray = open("/dev/null", O_RDONLY); /* not close-on-exec */
	CHECK(stray >= 0);
	opts_init(&o, "ls /proc/$$/fd");
	run(&o, &res);
	close(stray);
	CHECK_INT(lines_on(1), ==, 3);
	CHECK_STR(line_of(1, 0), "0");
	CHECK_STR(line_of(1, 1), "1");
	CHECK_STR(line_of(1, 2), "2");
}

TEST(step_runs_in_its_own_process_group)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "echo \"pid=$$\"; echo \"pgrp=$(cut -d' ' -f5 /proc/$$/stat)\"");
	run(&o, &res);
	CHECK_STR(value_of("pgrp="), value_of("pid="));
	CHECK_INT(atoi(value_of("pgrp=")), !=, getpgrp());
}

TEST(signals_ignored_or_blocked_here_are_default_in_the_step)
{
	lr_exec_opts o;
	lr_exec_result res;
	sigset_t block, old_mask;
	struct sigaction ign, old_term, old_pipe;

	memset(&ign, 0, sizeof(ign));
	ign.sa_handler = SIG_IGN;
	sigaction(SIGTERM, &ign, &old_term);
	sigaction(SIGPIPE, &ign, &old_pipe);
	sigemptyset(&block);
	sigaddset(&block, SIGUSR1);
	sigaddset(&block, SIGINT);
	sigprocmask(SIG_BLOCK, &block, &old_mask);
	opts_init(&o, "grep -E '^Sig(Blk|Ign)' /proc/$$/status | tr -d '\\t'");
	run(&o, &res);
	sigprocmask(SIG_SETMASK, &old_mask, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	sigaction(SIGPIPE, &old_pipe, NULL);
	CHECK_STR(value_of("SigBlk:"), "0000000000000000");
	unsigned long long ignored = strtoull(value_of("SigIgn:"), NULL, 16);
	CHECK_INT(ignored & (1ull << (SIGTERM - 1)), ==, 0);
	CHECK_INT(ignored & (1ull << (SIGPIPE - 1)), ==, 0);
}

/* ---- stops ---- */

TEST(timeout_stops_the_step_and_its_whole_process_group)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "echo \"pid=$$\"; sleep 30 & sleep 30");
	o.timeout_ms = 300;
	int64_t t0 = lr_mono_ms();
	run(&o, &res);
	int64_t took = lr_mono_ms() - t0;
	CHECK_INT(res.outcome, ==, LR_EXEC_TIMEOUT);
	CHECK_STR(res.msg, "timed out after 300ms");
	CHECK_INT(took, >=, 300);
	CHECK_INT(took, <, 1500); /* sleep dies on SIGTERM: no grace needed */
	CHECK(group_gone(step_pgid()));
}

TEST(timeout_message_counts_whole_seconds)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "sleep 30");
	o.timeout_ms = 1000;
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_TIMEOUT);
	CHECK_STR(res.msg, "timed out after 1s");
}

TEST(cancel_fd_stops_the_step_at_once)
{
	lr_exec_opts o;
	lr_exec_result res;
	int p[2];
	CHECK(pipe2(p, O_CLOEXEC) == 0);
	opts_init(&o, "echo \"pid=$$\"; echo ready; sleep 30");
	o.cancel_fd = p[0];
	fx.cancel_w = p[1];
	run(&o, &res);
	int64_t after_cancel = lr_mono_ms() - fx.ready_ms;
	close(p[0]);
	close(p[1]);
	CHECK_INT(res.outcome, ==, LR_EXEC_STOPPED);
	CHECK_STR(res.msg, "stopped on request");
	CHECK_INT(after_cancel, <, 1000);
	CHECK(group_gone(step_pgid()));
}

TEST(step_ignoring_sigterm_is_killed_after_the_grace)
{
	lr_exec_opts o;
	lr_exec_result res;
	int p[2];
	CHECK(pipe2(p, O_CLOEXEC) == 0);
	opts_init(&o, "trap '' TERM; echo \"pid=$$\"; echo ready; sleep 30");
	o.cancel_fd = p[0];
	o.grace_ms = 400;
	fx.cancel_w = p[1];
	run(&o, &res);
	int64_t after_cancel = lr_mono_ms() - fx.ready_ms;
	close(p[0]);
	close(p[1]);
	CHECK_INT(res.outcome, ==, LR_EXEC_STOPPED);
	CHECK_STR(res.msg, "stopped on request (SIGKILL after the 400ms grace)");
	CHECK_INT(after_cancel, >=, 400);
	CHECK_INT(after_cancel, <, 1500);
	CHECK(group_gone(step_pgid()));
}

TEST(grace_lets_the_step_finish_its_cleanup)
{
	lr_exec_opts o;
	lr_exec_result res;
	int p[2];
	CHECK(pipe2(p, O_CLOEXEC) == 0);
	/* The trap runs after sleep returns; 0.2 s of cleanup fits the grace. */
	opts_init(&o, "trap 'sleep 0.2; echo cleaned; exit 0' TERM; echo ready; "
	              "sleep 30 & wait");
	o.cancel_fd = p[0];
	o.grace_ms = 3000;
	fx.cancel_w = p[1];
	run(&o, &res);
	close(p[0]);
	close(p[1]);
	CHECK_INT(res.outcome, ==, LR_EXEC_STOPPED); /* even though it exited 0 */
	CHECK_STR(res.msg, "stopped on request");
	CHECK_STR(line_of(1, 1), "cleaned");
	CHECK(res.state_out == NULL);
}

TEST(nothing_of_the_step_is_alive_at_its_deadline)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "echo \"pid=$$\"; trap '' TERM; sleep 30");
	o.deadline_ms = lr_mono_ms() + 1500;
	o.grace_ms = 10000;
	run(&o, &res);
	/* lr_exec_run returns once no process of the step is left. */
	int64_t done = lr_mono_ms();
	printf("# step gone %lld ms before its deadline\n", (long long)(o.deadline_ms - done));
	CHECK_INT(done, <, o.deadline_ms);
	CHECK_INT(done, >, o.deadline_ms - 1000); /* not before its time */
	CHECK_INT(res.outcome, ==, LR_EXEC_DEADLINE);
	CHECK_STR(res.msg, "stopped: lease deadline reached");
	CHECK(group_gone(step_pgid()));
}

/* A lease of 2 s renewed all the time: the deadline keeps moving away. */
static int64_t renewed_deadline(void *user)
{
	(void)user;
	return lr_mono_ms() + 2000;
}

static int64_t fixed_deadline(void *user)
{
	return *(int64_t *)user;
}

TEST(deadline_callback_follows_lease_renewals)
{
	lr_exec_opts o;
	lr_exec_result res;
	int64_t at;
	opts_init(&o, "sleep 3; echo done");
	o.deadline_ms = lr_mono_ms() + 50; /* ignored: the callback rules */
	o.deadline = renewed_deadline;
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_OK);
	CHECK_STR(line_of(1, 0), "done");
	opts_init(&o, "sleep 30");
	at = lr_mono_ms() + 1000;
	o.deadline = fixed_deadline;
	o.user = &at;
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_DEADLINE);
	CHECK_INT(lr_mono_ms(), <, at);
}

TEST(a_step_past_its_deadline_or_cancelled_is_not_started)
{
	lr_exec_opts o;
	lr_exec_result res;
	char marker[128], cmd[256];
	int p[2];
	snprintf(marker, sizeof(marker), "%s.marker", fx.base);
	snprintf(cmd, sizeof(cmd), "touch %s", marker);
	opts_init(&o, cmd);
	o.deadline_ms = lr_mono_ms() - 1;
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_DEADLINE);
	CHECK_STR(res.msg, "stopped: lease deadline reached, before start");
	CHECK(pipe2(p, O_CLOEXEC) == 0);
	CHECK(write(p[1], "x", 1) == 1);
	opts_init(&o, cmd);
	o.cancel_fd = p[0];
	run(&o, &res);
	close(p[0]);
	close(p[1]);
	CHECK_INT(res.outcome, ==, LR_EXEC_STOPPED);
	CHECK_STR(res.msg, "stopped on request, before start");
	CHECK(access(marker, F_OK) != 0);
}

/* ---- the shell's exit ends the step ---- */

TEST(shell_exit_ends_the_step_while_a_grandchild_holds_stdout)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "echo \"pid=$$\"; sleep 30 & echo started; exit 0");
	int64_t t0 = lr_mono_ms();
	run(&o, &res);
	CHECK_INT(lr_mono_ms() - t0, <, 1000);
	CHECK_INT(res.outcome, ==, LR_EXEC_OK);
	CHECK_STR(line_of(1, 1), "started");
	/* Orphans of a finished step do not outlive it. */
	CHECK(group_gone(step_pgid()));
}

TEST(a_step_that_kills_its_guard_is_guard_lost)
{
	lr_exec_opts o;
	lr_exec_result res;
	lr_err err = { 0 };
	/* A process out of the group, then the guard ($PPID) killed: the
	 * shell dies with it (its parent-death signal), the other lives on
	 * out of reach, here as this program's orphan. */
	opts_init(&o, "setsid sleep 30 >/dev/null 2>&1 & echo \"bg=$!\"; sleep 0.2; "
	              "kill -9 $PPID; exec sleep 30");
	int64_t t0 = lr_mono_ms();
	CHECK_OK(lr_exec_run(&o, &res, &err), &err);
	CHECK_INT(lr_mono_ms() - t0, <, 10000);
	CHECK_INT(res.outcome, ==, LR_EXEC_GUARD_LOST);
	CHECK_HAS(res.msg, "guard was killed");
	CHECK_INT(dir_entries(fx.base), ==, 0); /* removed all the same */
	pid_t bg = (pid_t)atoi(value_of("bg="));
	CHECK(bg > 0);
	CHECK(kill(bg, 0) == 0);
	kill(bg, SIGKILL);
	CHECK(process_gone(bg));
	/* The shell, this program's orphan too: reaped here (no guard did). */
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

/* The same in a process that adopts the orphans of its guards (as `leaserun
 * worker` does): what the step left is stopped, and the attempt is an
 * interrupted one, to be run again. Last: adopting stays on. */
TEST(a_killed_guards_leftovers_are_stopped_where_orphans_are_adopted)
{
	lr_exec_opts o;
	lr_exec_result res;
	lr_err err = { 0 };
	CHECK(lr_orphans_adopt());
	opts_init(&o, "setsid sleep 30 >/dev/null 2>&1 & echo \"bg=$!\"; sleep 0.2; "
	              "kill -9 $PPID; exec sleep 30");
	CHECK_OK(lr_exec_run(&o, &res, &err), &err);
	CHECK_INT(res.outcome, ==, LR_EXEC_EXIT);
	CHECK_INT(res.exit_status, ==, -1);
	CHECK_HAS(res.msg, "what the step left running was stopped");
	pid_t bg = (pid_t)atoi(value_of("bg="));
	CHECK(bg > 0);
	CHECK(kill(bg, 0) == -1 && errno == ESRCH); /* killed and reaped */
	CHECK_INT(dir_entries(fx.base), ==, 0);
}

TEST(background_process_without_output_is_killed_with_the_step)
{
	lr_exec_opts o;
	lr_exec_result res;
	opts_init(&o, "sleep 30 >/dev/null 2>&1 & echo \"bg=$!\"");
	run(&o, &res);
	CHECK_INT(res.outcome, ==, LR_EXEC_OK);
	CHECK(process_gone((pid_t)atoi(value_of("bg="))));
}

TEST(process_that_left_the_group_does_not_outlive_the_step)
{
	lr_exec_opts o;
	lr_exec_result res;
	/* setsid puts it out of reach of the group kill; it keeps stdout.
	 * The shell waits until it has left (its pgrp is its own pid). The
	 * guard, its subreaper once the shell is gone, kills it. */
	opts_init(&o, "setsid sleep 30 & bg=$!; "
	              "until [ \"$(cut -d' ' -f5 /proc/$bg/stat)\" = $bg ]; do "
	              "sleep 0.01; done; echo \"bg=$bg\"");
	int64_t t0 = lr_mono_ms();
	run(&o, &res);
	int64_t took = lr_mono_ms() - t0;
	pid_t bg = (pid_t)atoi(value_of("bg="));
	CHECK(bg > 0);
	CHECK(kill(bg, 0) == -1 && errno == ESRCH); /* gone when the step is */
	CHECK_INT(res.outcome, ==, LR_EXEC_OK);
	CHECK_INT(took, <, 1500);
}

/* ---- environment and the private directory ---- */

TEST(env_build_drops_overrides_and_adds)
{
	char *const base[] = { "PATH=/usr/bin:/bin", "LEASERUN_PASSWORD=secret",
	                       "MODEL=big", "HOME=/root", "BROKEN", NULL };
	const char *drop[] = { "LEASERUN_PASSWORD", NULL };
	const char *add[] = { "MODEL=small", "TASK=t1", "NOVALUE", "TASK=t2",
	                      NULL };
	char **env = lr_exec_env_build(base, drop, add);
	CHECK(env != NULL);
	CHECK_STR(env[0], "PATH=/usr/bin:/bin");
	CHECK_STR(env[1], "HOME=/root");
	CHECK_STR(env[2], "MODEL=small");
	CHECK_STR(env[3], "TASK=t2");
	CHECK(env[4] == NULL);
	lr_exec_env_free(env);
	env = lr_exec_env_build(NULL, NULL, NULL);
	CHECK(env != NULL && env[0] == NULL);
	lr_exec_env_free(env);
}

TEST(step_sees_the_environment_it_is_given)
{
	lr_exec_opts o;
	lr_exec_result res;
	char *const base[] = { "PATH=/usr/bin:/bin", "LEASERUN_PASSWORD=secret",
	                       "LEASERUN_STATE_IN=/stale", NULL };
	const char *drop[] = { "LEASERUN_PASSWORD", NULL };
	const char *add[] = { "MODEL=small", NULL };
	char **env = lr_exec_env_build(base, drop, add);
	CHECK(env != NULL);
	opts_init(&o, "echo \"pw=${LEASERUN_PASSWORD-unset} model=$MODEL\"; "
	              "echo \"in=$LEASERUN_STATE_IN\"");
	o.env = env;
	run(&o, &res);
	lr_exec_env_free(env);
	CHECK_STR(line_of(1, 0), "pw=unset model=small");
	CHECK(strncmp(value_of("in="), fx.base, strlen(fx.base)) == 0);
}

TEST(state_files_live_in_a_private_directory_removed_afterwards)
{
	lr_exec_opts o;
	lr_exec_result res;
	char prefix[128];
	struct stat st;
	/* A umask that would leave the directory and the files read-only. */
	mode_t old_umask = umask(0222);
	opts_init(&o,
	          "umask 022; d=$(dirname \"$LEASERUN_STATE_IN\"); echo \"dir=$d\"; "
	          "echo \"mode=$(stat -c %a \"$d\")\"; "
	          "echo \"fmode=$(stat -c %a \"$LEASERUN_STATE_OUT\")\"; "
	          "echo \"in=$(cat \"$LEASERUN_STATE_IN\")\"; "
	          "test -f \"$LEASERUN_STATE_OUT\" && test ! -s \"$LEASERUN_STATE_OUT\" "
	          "&& echo out=empty; "
	          "test \"$(dirname \"$LEASERUN_STATE_OUT\")\" = \"$d\" && echo same=yes; "
	          "mkdir \"$d/sub\" && echo x > \"$d/sub/f\" && chmod 500 \"$d/sub\"; "
	          "mkdir \"$d/shut\" && chmod 000 \"$d/shut\"; "
	          "echo '{}' > \"$LEASERUN_STATE_OUT\"");
	run(&o, &res);
	umask(old_umask);
	CHECK_INT(res.outcome, ==, LR_EXEC_OK);
	snprintf(prefix, sizeof(prefix), "%s/leaserun-report-7.12.3.", fx.base);
	const char *dir = value_of("dir=");
	CHECK(dir != NULL && strncmp(dir, prefix, strlen(prefix)) == 0);
	CHECK_INT(strlen(dir), ==, strlen(prefix) + 6); /* random suffix */
	CHECK_STR(value_of("mode="), "700");
	CHECK_STR(value_of("fmode="), "600");
	CHECK_STR(value_of("in="), "{\"n\":1}");
	CHECK_STR(value_of("out="), "empty");
	CHECK_STR(value_of("same="), "yes");
	/* Gone, with what the step left there (run() saw the base empty). */
	CHECK(stat(dir, &st) != 0 && errno == ENOENT);
	lr_exec_result_clear(&res);
}

TEST(two_executions_of_one_step_get_separate_directories)
{
	lr_exec_opts o;
	lr_exec_result res;
	char first[256];
	opts_init(&o, "echo \"in=$LEASERUN_STATE_IN\"");
	run(&o, &res);
	snprintf(first, sizeof(first), "%s", value_of("in="));
	opts_init(&o, "echo \"in=$LEASERUN_STATE_IN\"");
	run(&o, &res);
	CHECK(strcmp(first, value_of("in=")) != 0);
}

TEST(the_task_id_cannot_take_the_state_directory_out_of_the_base)
{
	lr_exec_opts o;
	lr_exec_result res;
	char prefix[128];
	opts_init(&o, "echo \"in=$LEASERUN_STATE_IN\"");
	o.task_id = "../../etc/x y";
	run(&o, &res);
	snprintf(prefix, sizeof(prefix), "%s/leaserun-.._.._etc_x_y.12.3.", fx.base);
	CHECK(strncmp(value_of("in="), prefix, strlen(prefix)) == 0);
}

TEST(unusable_work_dir_base_is_a_spawn_failure)
{
	lr_exec_opts o;
	lr_exec_result res;
	lr_err err = { 0 };
	opts_init(&o, "true");
	o.work_dir_base = "/nonexistent/leaserun";
	CHECK_INT(lr_exec_run(&o, &res, &err), ==, LR_ESYS);
	CHECK_INT(res.outcome, ==, LR_EXEC_SPAWN);
	CHECK_HAS(err.msg, "/nonexistent/leaserun");
	CHECK_STR(res.msg, err.msg);
	o.run = NULL;
	CHECK_INT(lr_exec_run(&o, &res, NULL), ==, LR_EINVAL);
	CHECK_INT(res.outcome, ==, LR_EXEC_SPAWN);
}

TEST(no_descriptor_leaks_and_no_zombies_whatever_the_outcome)
{
	static const char *runs[] = {
		"echo '{}' > \"$LEASERUN_STATE_OUT\"", "exit 4", "kill -9 $$",
		"sleep 30 & sleep 30", "printf '{' > \"$LEASERUN_STATE_OUT\"",
		"sleep 30 &",
	};
	lr_exec_opts o;
	lr_exec_result res;
	int before = open_fds();
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++) {
		opts_init(&o, runs[i]);
		o.timeout_ms = 200;
		run(&o, &res);
		lr_exec_result_clear(&res);
	}
	opts_init(&o, "true");
	o.work_dir_base = "/nonexistent";
	CHECK(lr_exec_run(&o, &res, NULL) < 0);
	CHECK_INT(open_fds(), ==, before);
}

TEST_LIST(
	TEST_CASE(exit_zero_with_state_written_returns_the_new_state),
	TEST_CASE(step_reads_the_current_state_from_state_in),
	TEST_CASE(empty_or_blank_state_out_leaves_the_state_unchanged),
	TEST_CASE(any_json_value_is_a_state),
	TEST_CASE(invalid_state_json_is_bad_state_with_line_and_column),
	TEST_CASE(state_over_512_kib_is_bad_state),
	TEST_CASE(state_of_exactly_512_kib_is_accepted),
	TEST_CASE(state_file_over_512_kib_of_whitespace_is_judged_by_its_compact_size),
	TEST_CASE(huge_state_file_is_refused_without_being_read),
	TEST_CASE(state_out_replaced_by_a_fifo_is_bad_state_not_a_hang),
	TEST_CASE(state_is_not_read_after_a_failure),
	TEST_CASE(non_zero_exit_is_exit_with_status_and_stderr_tail),
	TEST_CASE(stderr_tail_fits_its_buffer_with_long_lines),
	TEST_CASE(shell_killed_by_a_signal_is_signal),
	TEST_CASE(output_lines_arrive_in_order_on_both_streams),
	TEST_CASE(carriage_returns_and_nul_bytes_are_cleaned_from_lines),
	TEST_CASE(long_lines_are_split_at_4096_bytes_on_character_boundaries),
	TEST_CASE(stdin_is_dev_null),
	TEST_CASE(step_sees_only_stdin_stdout_and_stderr),
	TEST_CASE(step_runs_in_its_own_process_group),
	TEST_CASE(signals_ignored_or_blocked_here_are_default_in_the_step),
	TEST_CASE(timeout_stops_the_step_and_its_whole_process_group),
	TEST_CASE(timeout_message_counts_whole_seconds),
	TEST_CASE(cancel_fd_stops_the_step_at_once),
	TEST_CASE(step_ignoring_sigterm_is_killed_after_the_grace),
	TEST_CASE(grace_lets_the_step_finish_its_cleanup),
	TEST_CASE(nothing_of_the_step_is_alive_at_its_deadline),
	TEST_CASE(deadline_callback_follows_lease_renewals),
	TEST_CASE(a_step_past_its_deadline_or_cancelled_is_not_started),
	TEST_CASE(shell_exit_ends_the_step_while_a_grandchild_holds_stdout),
	TEST_CASE(background_process_without_output_is_killed_with_the_step),
	TEST_CASE(a_step_that_kills_its_guard_is_guard_lost),
	TEST_CASE(process_that_left_the_group_does_not_outlive_the_step),
	TEST_CASE(env_build_drops_overrides_and_adds),
	TEST_CASE(step_sees_the_environment_it_is_given),
	TEST_CASE(state_files_live_in_a_private_directory_removed_afterwards),
	TEST_CASE(two_executions_of_one_step_get_separate_directories),
	TEST_CASE(the_task_id_cannot_take_the_state_directory_out_of_the_base),
	TEST_CASE(unusable_work_dir_base_is_a_spawn_failure),
	TEST_CASE(no_descriptor_leaks_and_no_zombies_whatever_the_outcome),
	TEST_CASE(a_killed_guards_leftovers_are_stopped_where_orphans_are_adopted),
);

TEST_MAIN(setup, teardown)
