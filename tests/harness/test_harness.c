/* test_harness.c - the etcd test harness keeps its promises.
 *
 * Runs real etcd members: starting, health, leadership after a kill,
 * restart with the same data, pause, and a clean slate afterwards (no etcd
 * child, no temporary directory). */
#include "etcd_harness.h"
#include "test.h"

#include <dirent.h>
#include <ftw.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char private_tmp[PATH_MAX];
/* The cluster of the running case, so that a case that fails half-way does
 * not leave it to the next one. */
static etcdh_cluster *c;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* etcd processes whose parent is this test, zombies included. */
static int etcd_children(void)
{
	DIR *proc = opendir("/proc");
	struct dirent *e;
	int count = 0;

	if (proc == NULL)
		return -1;
	while ((e = readdir(proc)) != NULL) {
		char path[300];
		char line[512];
		FILE *f;
		size_t len;
		const char *close_paren;
		char state;
		int ppid;

		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
		f = fopen(path, "r");
		if (f == NULL)
			continue;
		len = fread(line, 1, sizeof(line) - 1, f);
		fclose(f);
		line[len] = '\0';
		close_paren = strrchr(line, ')');
		if (close_paren == NULL ||
		    sscanf(close_paren, ") %c %d", &state, &ppid) != 2)
			continue;
		if (strstr(line, " (etcd) ") != NULL && ppid == (int)getpid())
			count++;
	}
	closedir(proc);
	return count;
}

/* Entries in this test's private TMPDIR. */
static int tmp_entries(void)
{
	DIR *d = opendir(private_tmp);
	struct dirent *e;
	int count = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL)
		if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
			count++;
	closedir(d);
	return count;
}

static bool is_private_dir(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0 && S_ISDIR(st.st_mode) &&
	       (st.st_mode & 0777) == 0700;
}

/* Runs etcdctl against endpoint; the first line of its stdout in out. */
static int etcdctl(const char *endpoint, const char *args, char *out,
                   size_t outsz)
{
	char cmd[512];
	FILE *p;

	snprintf(cmd, sizeof(cmd),
	         "ETCDCTL_API=3 etcdctl --endpoints=%s --dial-timeout=1s "
	         "--command-timeout=2s %s 2>/dev/null",
	         endpoint, args);
	p = popen(cmd, "r");
	if (p == NULL)
		return -1;
	out[0] = '\0';
	if (fgets(out, (int)outsz, p) != NULL)
		out[strcspn(out, "\n")] = '\0';
	while (fgetc(p) != EOF)
		;
	return pclose(p);
}

/* The leader, once some member other than `not` leads; -1 after 15 s. */
static int wait_leader_other_than(int not)
{
	double deadline = now_s() + 15;

	while (now_s() < deadline) {
		int leader = etcdh_leader(c);
		if (leader >= 0 && leader != not)
			return leader;
		usleep(100 * 1000);
	}
	return -1;
}

static void drop_cluster(void)
{
	etcdh_destroy(c);
	c = NULL;
}

static int start(int members, const char *const *extra_args)
{
	etcdh_opts o = { .members = members, .extra_args = extra_args };

	drop_cluster();
	return etcdh_start(&o, &c);
}

/* Destroys the cluster and checks that nothing of it is left. */
static void finish(void)
{
	drop_cluster();
	CHECK_INT(etcd_children(), ==, 0);
	CHECK_INT(tmp_entries(), ==, 0);
}

TEST(one_member_starts_healthy_and_leads)
{
	char dir[PATH_MAX];
	double t0 = now_s();

	CHECK_INT(start(1, NULL), ==, 0);
	fprintf(stderr, "  1 member healthy in %.2f s\n", now_s() - t0);
	CHECK_INT(etcdh_members(c), ==, 1);
	CHECK_HAS(etcdh_endpoint(c, 0), "127.0.0.1:");
	CHECK_STR(etcdh_endpoints(c), etcdh_endpoint(c, 0));
	/* Below the kernel's ports for outgoing connections, where no peer's
	 * reconnect can take it while the member is down. */
	int lo = 0, hi = 0;
	FILE *range = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
	CHECK(range != NULL && fscanf(range, "%d %d", &lo, &hi) == 2);
	fclose(range);
	int port = atoi(strrchr(etcdh_endpoint(c, 0), ':') + 1);
	if (lo > 12000)
		CHECK_INT(port, <, lo);
	CHECK(etcdh_endpoint(c, 1) == NULL);
	snprintf(dir, sizeof(dir), "%s", etcdh_dir(c, 0));
	CHECK(strncmp(dir, private_tmp, strlen(private_tmp)) == 0);
	CHECK(is_private_dir(dir));
	CHECK_INT(etcd_children(), ==, 1);
	CHECK_INT(etcdh_wait_healthy(c, 5), ==, 0);
	CHECK_INT(etcdh_leader(c), ==, 0);
	finish();
	CHECK(access(dir, F_OK) != 0);
}

TEST(stopped_member_restarts_with_its_data)
{
	char out[256];

	CHECK_INT(start(1, NULL), ==, 0);
	CHECK_INT(etcdctl(etcdh_endpoint(c, 0), "put harness-key kept", out,
	                  sizeof(out)),
	          ==, 0);
	CHECK_INT(etcdh_stop(c, 0), ==, 0);
	CHECK_INT(etcd_children(), ==, 0);
	CHECK_INT(etcdh_leader(c), ==, -1);
	CHECK_INT(etcdh_restart(c, 0), ==, 0);
	CHECK_INT(etcdctl(etcdh_endpoint(c, 0),
	                  "get harness-key --print-value-only", out,
	                  sizeof(out)),
	          ==, 0);
	CHECK_STR(out, "kept");
	finish();
}

TEST(three_members_elect_a_new_leader_after_a_kill)
{
	int old_leader;
	int new_leader;
	double t0 = now_s();
	char want[128];

	CHECK_INT(start(3, NULL), ==, 0);
	fprintf(stderr, "  3 members healthy in %.2f s\n", now_s() - t0);
	CHECK_INT(etcdh_members(c), ==, 3);
	snprintf(want, sizeof(want), "%s,%s,%s", etcdh_endpoint(c, 0),
	         etcdh_endpoint(c, 1), etcdh_endpoint(c, 2));
	CHECK_STR(etcdh_endpoints(c), want);
	CHECK_INT(etcd_children(), ==, 3);
	old_leader = etcdh_leader(c);
	CHECK(old_leader >= 0);

	t0 = now_s();
	CHECK_INT(etcdh_kill(c, old_leader), ==, 0);
	CHECK_INT(etcd_children(), ==, 2);
	new_leader = wait_leader_other_than(old_leader);
	CHECK(new_leader >= 0);
	fprintf(stderr, "  new leader %d after %.2f s\n", new_leader,
	        now_s() - t0);
	CHECK_INT(etcdh_wait_healthy(c, 10), ==, 0);

	t0 = now_s();
	CHECK_INT(etcdh_restart(c, old_leader), ==, 0);
	fprintf(stderr, "  old leader back in %.2f s\n", now_s() - t0);
	CHECK_INT(etcd_children(), ==, 3);
	CHECK_INT(etcdh_wait_healthy(c, 10), ==, 0);
	CHECK(etcdh_leader(c) >= 0);
	finish();
}

TEST(paused_follower_leaves_the_rest_healthy)
{
	int leader;
	int follower;
	char out[256];

	CHECK_INT(start(3, NULL), ==, 0);
	leader = etcdh_leader(c);
	CHECK(leader >= 0);
	follower = (leader + 1) % 3;
	CHECK_INT(etcdh_pause(c, follower), ==, 0);
	/* A paused member answers nothing, not even a status request. */
	CHECK(etcdctl(etcdh_endpoint(c, follower), "endpoint status", out,
	              sizeof(out)) != 0);
	CHECK_INT(etcdh_wait_healthy(c, 10), ==, 0);
	CHECK_INT(etcdh_leader(c), ==, leader);
	CHECK_INT(etcdh_resume(c, follower), ==, 0);
	CHECK_INT(etcdh_wait_healthy(c, 10), ==, 0);
	/* A paused member dies with the cluster all the same. */
	CHECK_INT(etcdh_pause(c, follower), ==, 0);
	finish();
}

TEST(start_fails_cleanly_on_a_bad_flag)
{
	static const char *const bad[] = { "--no-such-flag", NULL };
	double t0 = now_s();

	CHECK_INT(start(1, bad), ==, -1);
	CHECK(c == NULL);
	CHECK(now_s() - t0 < 10);
	finish();
}

TEST(extra_args_reach_etcd)
{
	/* A later flag wins in etcd: raising the log level shows in the log. */
	static const char *const info[] = { "--log-level=info", NULL };
	char log_path[PATH_MAX + 16];
	char line[4096];
	FILE *f;
	bool has_info = false;

	CHECK_INT(start(1, info), ==, 0);
	snprintf(log_path, sizeof(log_path), "%s/etcd.log", etcdh_dir(c, 0));
	f = fopen(log_path, "r");
	CHECK(f != NULL);
	while (fgets(line, sizeof(line), f) != NULL)
		if (strstr(line, "\"level\":\"info\"") != NULL)
			has_info = true;
	fclose(f);
	CHECK(has_info);
	finish();
}

TEST_LIST(TEST_CASE(one_member_starts_healthy_and_leads),
          TEST_CASE(stopped_member_restarts_with_its_data),
          TEST_CASE(three_members_elect_a_new_leader_after_a_kill),
          TEST_CASE(paused_follower_leaves_the_rest_healthy),
          TEST_CASE(start_fails_cleanly_on_a_bad_flag),
          TEST_CASE(extra_args_reach_etcd));

/* Every case runs in a private TMPDIR, so that it can tell that nothing
 * was left behind. */
static int setup(void)
{
	const char *tmp = getenv("TMPDIR");

	snprintf(private_tmp, sizeof(private_tmp), "%s/harness-test-XXXXXX",
	         tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
	if (mkdtemp(private_tmp) == NULL)
		return -1;
	return setenv("TMPDIR", private_tmp, 1);
}

static int remove_entry(const char *path, const struct stat *st, int type,
                        struct FTW *ftw)
{
	(void)st;
	(void)type;
	(void)ftw;
	remove(path);
	return 0;
}

static void teardown(void)
{
	drop_cluster();
	nftw(private_tmp, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

TEST_MAIN(setup, teardown)
