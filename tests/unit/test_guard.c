/* test_guard.c - the guard of a shell step, driven directly: its deadline
 * schedule, the runner's pipe closing, stop requests, processes that leave
 * the step's group, what it keeps open, the sweep of state directories
 * whose guard is gone, and what removing one may touch. No etcd. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <dlfcn.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "exec/exec_files.h"
#include "exec/guard.h"
#include "test.h"

static char base[256];
static lr_err err;

/* One guarded step: its output pipe, its state directory, its guard. */
struct step {
	int out[2];
	char dir[512];
	int dir_fd;
	lr_guard g;
	int status;
	bool got_status;
};

static void start(struct step *s, const char *run, int64_t deadline, int64_t grace)
{
	memset(s, 0, sizeof(*s));
	CHECK(pipe2(s->out, O_CLOEXEC) == 0);
	snprintf(s->dir, sizeof(s->dir), "%s/leaserun-t.XXXXXX", base);
	CHECK(mkdtemp(s->dir) != NULL);
	s->dir_fd = open(s->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	CHECK(s->dir_fd >= 0 && flock(s->dir_fd, LOCK_EX | LOCK_NB) == 0);
	char sh[] = "sh", c[] = "-c";
	char *argv[] = { sh, c, (char *)run, NULL };
	lr_guard_spec spec = { .argv = argv, .envp = environ, .out_fd = s->out[1],
	                       .err_fd = s->out[1], .dir_fd = s->dir_fd, .dir_path = s->dir,
	                       .deadline_ms = deadline, .grace_ms = grace };
	CHECK_OK(lr_guard_start(&spec, &s->g, &err), &err);
	close(s->out[1]);
	close(s->dir_fd);
}

/* Wait until the guard says no process of the step is left; the time. */
static int64_t wait_all_gone(struct step *s, int64_t timeout_ms)
{
	int64_t end = lr_mono_ms() + timeout_ms;
	lr_guard_said said = { 0 };
	while (lr_mono_ms() < end) {
		bool ended = lr_guard_read(&s->g, &said);
		s->status = said.wstatus;
		s->got_status = said.exited;
		if (ended)
			return lr_mono_ms();
		lr_sleep_ms(5);
	}
	return -1;
}

/* The pid the step printed first ("pid=N"). */
static pid_t first_pid(struct step *s)
{
	char buf[256];
	ssize_t n = read(s->out[0], buf, sizeof(buf) - 1);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *p = strstr(buf, "pid=");
	return p != NULL ? (pid_t)atoi(p + 4) : 0;
}

static bool gone(pid_t pid)
{
	return pid > 0 && kill(pid, 0) == -1 && errno == ESRCH;
}

static void end(struct step *s)
{
	lr_guard_end(&s->g);
	close(s->out[0]);
}

TEST(the_schedule_leaves_a_quarter_of_the_ttl_and_the_kill_margin)
{
	int64_t term, kill;
	lr_guard_schedule(12000, 10000, 10000, &term, &kill); /* TTL 2 s */
	CHECK_INT(kill, ==, 12000 - LR_GUARD_KILL_MARGIN_MS);
	CHECK_INT(term, ==, kill - 500);
	lr_guard_schedule(20000, 10000, 1000, &term, &kill); /* TTL 10 s, grace 1 s */
	CHECK_INT(term, ==, kill - 1000);
	lr_guard_schedule(20000, 10000, 0, &term, &kill);
	CHECK_INT(term, ==, kill);
}

TEST(without_a_renewal_nothing_of_the_step_is_alive_at_the_deadline)
{
	struct step s;
	int64_t deadline = lr_mono_ms() + 2000;
	start(&s, "echo pid=$$; trap '' TERM; (trap '' TERM; sleep 30) & sleep 30", deadline,
	      10000);
	pid_t pid = first_pid(&s);
	int64_t gone_at = wait_all_gone(&s, 5000);
	printf("# all gone %lld ms before the deadline\n", (long long)(deadline - gone_at));
	CHECK(gone_at > 0);
	CHECK_INT(gone_at, <, deadline);
	CHECK_INT(gone_at, >=, deadline - LR_GUARD_KILL_MARGIN_MS - 500);
	CHECK(gone(pid));
	CHECK(s.got_status && WIFSIGNALED(s.status) && WTERMSIG(s.status) == SIGKILL);
	end(&s);
}

TEST(renewals_keep_the_step_running)
{
	struct step s;
	start(&s, "sleep 2.5; exit 3", lr_mono_ms() + 1000, 10000);
	for (int i = 0; i < 12; i++) {
		lr_sleep_ms(300);
		lr_guard_deadline(&s.g, lr_mono_ms() + 1000);
	}
	CHECK(wait_all_gone(&s, 5000) > 0);
	CHECK(s.got_status && WIFEXITED(s.status) && WEXITSTATUS(s.status) == 3);
	end(&s);
}

TEST(a_stop_sends_sigterm_then_sigkill_after_the_grace)
{
	struct step s;
	start(&s, "trap '' TERM; echo pid=$$; sleep 30", lr_mono_ms() + 60000, 400);
	pid_t pid = first_pid(&s);
	int64_t t0 = lr_mono_ms();
	lr_guard_stop(&s.g, 400);
	int64_t gone_at = wait_all_gone(&s, 5000);
	CHECK(gone_at > 0);
	CHECK_INT(gone_at - t0, >=, 350);
	CHECK_INT(gone_at - t0, <, 2000);
	CHECK(gone(pid));
	end(&s);
}

TEST(the_runner_dying_stops_the_step_and_the_guard_cleans_up)
{
	struct step s;
	start(&s, "echo pid=$$; sleep 30", lr_mono_ms() + 60000, 2000);
	pid_t pid = first_pid(&s);
	pid_t guard = s.g.pid;
	close(s.g.ctl); /* what the runner's death does to the pipe */
	s.g.ctl = -1;
	CHECK(wait_all_gone(&s, 5000) > 0);
	CHECK(gone(pid));
	int st;
	CHECK_INT(waitpid(guard, &st, 0), ==, guard);
	s.g.pid = -1;
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	struct stat sb;
	CHECK(stat(s.dir, &sb) != 0 && errno == ENOENT); /* removed by the guard */
	end(&s);
}

TEST(processes_that_leave_the_group_die_with_the_step)
{
	struct step s;
	char pidfile[600];
	snprintf(pidfile, sizeof(pidfile), "%s/escaped.pid", base);
	char run[2048];
	/* A setsid'd loop and a double fork, both out of the group. */
	snprintf(run, sizeof(run),
	         "setsid sh -c 'echo $$ > %s.1; while :; do sleep 0.05; done' & "
	         "(sh -c 'echo $$ > %s.2; exec sleep 30' &) ; sleep 0.3; exit 0",
	         pidfile, pidfile);
	start(&s, run, lr_mono_ms() + 60000, 2000);
	CHECK(wait_all_gone(&s, 5000) > 0);
	CHECK(s.got_status && WIFEXITED(s.status) && WEXITSTATUS(s.status) == 0);
	for (int i = 1; i <= 2; i++) {
		char path[640];
		snprintf(path, sizeof(path), "%s.%d", pidfile, i);
		FILE *f = fopen(path, "r");
		CHECK(f != NULL);
		int pid = 0;
		CHECK(fscanf(f, "%d", &pid) == 1);
		fclose(f);
		CHECK(gone((pid_t)pid));
	}
	end(&s);
}

TEST(the_guard_keeps_none_of_the_runners_descriptors)
{
	int extra = open("/dev/null", O_RDONLY); /* stands for a socket */
	struct step s;
	start(&s, "sleep 30", lr_mono_ms() + 60000, 100);
	lr_sleep_ms(200);
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/fd", (int)s.g.pid);
	DIR *d = opendir(path);
	CHECK(d != NULL);
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL)
		n += e->d_name[0] != '.';
	closedir(d);
	/* 0-2 (/dev/null), the two pipes, the directory, the signalfd. */
	CHECK_INT(n, ==, 7);
	lr_guard_stop(&s.g, 100);
	CHECK(wait_all_gone(&s, 5000) > 0);
	end(&s);
	close(extra);
}

static void age(const char *path)
{
	struct timespec old[2] = { { .tv_sec = time(NULL) - 600 },
	                           { .tv_sec = time(NULL) - 600 } };
	CHECK(utimensat(AT_FDCWD, path, old, AT_SYMLINK_NOFOLLOW) == 0);
}

/* Where the sweep tests make their directories: one of their own each. */
static char sweep_base[400];

static void in_new_dir(const char *name)
{
	snprintf(sweep_base, sizeof(sweep_base), "%s/%s", base, name);
	CHECK(mkdir(sweep_base, 0700) == 0);
}

/* A directory of mode 0700, holding a file, like a state directory. */
static void make_dir(const char *name, bool aged, int *locked_fd)
{
	char path[700];
	snprintf(path, sizeof(path), "%s/%s", sweep_base, name);
	CHECK(mkdir(path, 0700) == 0 && chmod(path, 0700) == 0);
	snprintf(path, sizeof(path), "%s/%s/state-in.json", sweep_base, name);
	FILE *f = fopen(path, "w");
	CHECK(f != NULL);
	fclose(f);
	snprintf(path, sizeof(path), "%s/%s", sweep_base, name);
	if (locked_fd != NULL) {
		*locked_fd = open(path, O_RDONLY | O_DIRECTORY);
		CHECK(*locked_fd >= 0 && flock(*locked_fd, LOCK_EX) == 0);
	}
	if (aged)
		age(path);
}

static bool exists(const char *name)
{
	char path[700];
	struct stat sb;
	snprintf(path, sizeof(path), "%s/%s", sweep_base, name);
	return lstat(path, &sb) == 0;
}

TEST(the_sweep_removes_only_directories_whose_guard_is_gone)
{
	int held;
	in_new_dir("guards");
	make_dir("leaserun-left.4.1.aaaaaa", true, NULL);
	make_dir("leaserun-busy.4.1.bbbbbb", true, &held);
	make_dir("leaserun-new.4.1.cccccc", false, NULL);
	make_dir("someone-else", true, NULL);
	size_t removed = 0;
	CHECK_OK(lr_state_dir_sweep(sweep_base, &removed, &err), &err);
	CHECK_INT(removed, ==, 1);
	CHECK(!exists("leaserun-left.4.1.aaaaaa"));
	CHECK(exists("leaserun-busy.4.1.bbbbbb"));
	CHECK(exists("leaserun-new.4.1.cccccc"));
	CHECK(exists("someone-else"));
	close(held);
}

/* What the real code makes and a runner killed would leave: unlocked, and
 * a minute old. */
static void leave_state_dir(const char *task, char *leaf, size_t size)
{
	lr_exec_opts o = { .work_dir_base = sweep_base, .task_id = task, .fence = 12,
	                   .attempt = 3 };
	struct lr_state_dir sd;
	CHECK_OK(lr_state_dir_make(&o, &sd, &err), &err);
	close(sd.fd);
	age(sd.dir);
	snprintf(leaf, size, "%s", strrchr(sd.dir, '/') + 1);
}

TEST(the_sweep_leaves_other_programs_directories_named_leaserun)
{
	/* scripts/cluster's etcd data, scripts/test's runs, anyone's. */
	const char *const others[] = {
		"leaserun-cluster", "leaserun-test-abc123", "leaserun-other-user-data",
		"leaserun-t.1.2.abc12", "leaserun-.1.2.abcdef", "leaserun-t.1.abcdef",
		"leaserun-t.1.x.abcdef", "leaserun-t.1.2.abcdefg", "leaserun-t.1.2.abc-ef",
		"leaserun-t y.1.2.abcdef", NULL,
	};
	in_new_dir("others");
	for (size_t i = 0; others[i] != NULL; i++)
		make_dir(others[i], true, NULL);
	/* The task ids "." and ".." are valid too. */
	char leaf[256], dots[256];
	leave_state_dir("report-7", leaf, sizeof(leaf));
	leave_state_dir("..", dots, sizeof(dots));
	size_t removed = 0;
	CHECK_OK(lr_state_dir_sweep(sweep_base, &removed, &err), &err);
	CHECK_INT(removed, ==, 2);
	CHECK(!exists(leaf));
	CHECK(!exists(dots));
	for (size_t i = 0; others[i] != NULL; i++)
		if (!exists(others[i]))
			TEST_FAIL("the sweep removed %s", others[i]);
}

TEST(the_sweep_leaves_links_other_modes_and_other_users_directories)
{
	char path[700], target[700];
	in_new_dir("strangers");
	/* A link by a state directory's name to an old directory. */
	make_dir("target", true, NULL);
	snprintf(target, sizeof(target), "%s/target", sweep_base);
	snprintf(path, sizeof(path), "%s/leaserun-link.1.1.aaaaaa", sweep_base);
	CHECK(symlink(target, path) == 0);
	age(path);
	/* A mode the runner never gives its directories. */
	make_dir("leaserun-open.1.1.bbbbbb", false, NULL);
	snprintf(path, sizeof(path), "%s/leaserun-open.1.1.bbbbbb", sweep_base);
	CHECK(chmod(path, 0755) == 0);
	age(path);
	/* Another user's (as root only: nobody else may give it away). */
	bool root = geteuid() == 0;
	if (root) {
		make_dir("leaserun-theirs.1.1.cccccc", false, NULL);
		snprintf(path, sizeof(path), "%s/leaserun-theirs.1.1.cccccc", sweep_base);
		CHECK(chown(path, 65534, 65534) == 0);
		age(path);
	} else {
		fprintf(stderr, "   not root: another user's directory not tried\n");
	}
	size_t removed = 0;
	CHECK_OK(lr_state_dir_sweep(sweep_base, &removed, &err), &err);
	CHECK_INT(removed, ==, 0);
	CHECK(exists("leaserun-link.1.1.aaaaaa"));
	CHECK(exists("target") && exists("target/state-in.json"));
	CHECK(exists("leaserun-open.1.1.bbbbbb/state-in.json"));
	if (root)
		CHECK(exists("leaserun-theirs.1.1.cccccc/state-in.json"));
}

/* A step's trick: replace a directory with a link to someone's file while
 * its state directory is removed. The swap is put exactly where it hurts,
 * just after the removal found "d" to be a directory: this definition of
 * unlinkat is the one the library calls. */
static bool swap_armed;
static char swap_target[700];

int unlinkat(int dir_fd, const char *name, int flags)
{
	static int (*real)(int, const char *, int);
	if (real == NULL)
		real = (int (*)(int, const char *, int))dlsym(RTLD_NEXT, "unlinkat");
	int rc = real(dir_fd, name, flags);
	if (rc != 0 && errno == EISDIR && swap_armed && strcmp(name, "d") == 0) {
		swap_armed = false;
		if (renameat(dir_fd, "d", dir_fd, "d-moved") != 0 ||
		    symlinkat(swap_target, dir_fd, "d") != 0)
			TEST_FAIL("swap: %s", strerror(errno));
		errno = EISDIR;
	}
	return rc;
}

TEST(removing_a_state_directory_never_changes_the_mode_of_a_linked_file)
{
	const char *target = swap_target;
	struct stat st;
	in_new_dir("swaps");
	snprintf(swap_target, sizeof(swap_target), "%s/precious", sweep_base);
	int t = open(target, O_WRONLY | O_CREAT | O_EXCL, 0644);
	CHECK(t >= 0 && fchmod(t, 0644) == 0);
	close(t);
	lr_exec_opts o = { .work_dir_base = sweep_base, .task_id = "swap", .fence = 1,
	                   .attempt = 1 };
	struct lr_state_dir sd;
	CHECK_OK(lr_state_dir_make(&o, &sd, &err), &err);
	CHECK(mkdirat(sd.fd, "d", 0700) == 0);
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", sd.dir);
	swap_armed = true;
	lr_state_dir_remove(&sd);
	CHECK(!swap_armed); /* the removal met the swap */
	CHECK(stat(target, &st) == 0);
	CHECK_INT(st.st_mode & 07777, ==, 0644);
	/* What a swap leaves, the link, keeps the directory from going. */
	CHECK(stat(dir, &st) == 0);
}

TEST(removing_a_state_directory_leaves_what_another_user_owns_in_it)
{
	if (geteuid() != 0) {
		fprintf(stderr, "   not root: nobody else's directory to try\n");
		return;
	}
	in_new_dir("owners");
	lr_exec_opts o = { .work_dir_base = sweep_base, .task_id = "own", .fence = 1,
	                   .attempt = 1 };
	struct lr_state_dir sd;
	CHECK_OK(lr_state_dir_make(&o, &sd, &err), &err);
	CHECK(mkdirat(sd.fd, "theirs", 0755) == 0);
	CHECK(fchmodat(sd.fd, "theirs", 0755, 0) == 0);
	CHECK(fchownat(sd.fd, "theirs", 65534, 65534, 0) == 0);
	char theirs[PATH_MAX + 8];
	snprintf(theirs, sizeof(theirs), "%s/theirs", sd.dir);
	lr_state_dir_remove(&sd);
	struct stat st;
	CHECK(lstat(theirs, &st) == 0);
	CHECK_INT(st.st_uid, ==, 65534);
	CHECK_INT(st.st_mode & 07777, ==, 0755);
}

static int setup(void)
{
	snprintf(base, sizeof(base), "%s/guard-test-XXXXXX",
	         getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp");
	return mkdtemp(base) != NULL ? 0 : -1;
}

static void teardown(void)
{
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	if (system(cmd) != 0)
		fprintf(stderr, "could not remove %s\n", base);
}

TEST_LIST(
	TEST_CASE(the_schedule_leaves_a_quarter_of_the_ttl_and_the_kill_margin),
	TEST_CASE(without_a_renewal_nothing_of_the_step_is_alive_at_the_deadline),
	TEST_CASE(renewals_keep_the_step_running),
	TEST_CASE(a_stop_sends_sigterm_then_sigkill_after_the_grace),
	TEST_CASE(the_runner_dying_stops_the_step_and_the_guard_cleans_up),
	TEST_CASE(processes_that_leave_the_group_die_with_the_step),
	TEST_CASE(the_guard_keeps_none_of_the_runners_descriptors),
	TEST_CASE(the_sweep_removes_only_directories_whose_guard_is_gone),
	TEST_CASE(the_sweep_leaves_other_programs_directories_named_leaserun),
	TEST_CASE(the_sweep_leaves_links_other_modes_and_other_users_directories),
	TEST_CASE(removing_a_state_directory_never_changes_the_mode_of_a_linked_file),
	TEST_CASE(removing_a_state_directory_leaves_what_another_user_owns_in_it),
);
TEST_MAIN(setup, teardown)
