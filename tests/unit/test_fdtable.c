/* test_fdtable.c - room in the descriptor table made at once: the table
 * (FDSize in /proc/self/status) grows to hold it, no descriptor is left
 * open, and the soft limit is kept. Each case runs in a child of its own,
 * whose table starts at the size of this process's. */
#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/fdtable.h"
#include "test.h"

static long fd_table_size(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long size = -1;
	while (f != NULL && fgets(line, sizeof(line), f) != NULL)
		if (strncmp(line, "FDSize:", 7) == 0)
			size = strtol(line + 7, NULL, 10);
	if (f != NULL)
		fclose(f);
	return size;
}

static int open_count(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;
	for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;)
		n += e->d_name[0] != '.';
	if (d != NULL)
		closedir(d);
	return n - 1; /* the directory's own */
}

static int lowest_free(void)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	close(fd);
	return fd;
}

/* Runs fn in a child; its exit status: 0 when every check held. */
static int in_child(int (*fn)(void))
{
	fflush(NULL);
	pid_t pid = fork();
	if (pid == 0)
		_exit(fn());
	int st = 0;
	waitpid(pid, &st, 0);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 100;
}

static int grows_at_once(void)
{
	long before = fd_table_size();
	int open_before = open_count(), low = lowest_free();
	if (before <= 0 || before >= low + 700)
		return 10; /* the table holds it already: nothing to see */
	lr_fd_table_reserve(700);
	if (fd_table_size() < low + 700)
		return 11;
	if (open_count() != open_before || lowest_free() != low)
		return 12;
	return 0;
}

TEST(a_reserve_grows_the_table_at_once_and_leaves_nothing_open)
{
	CHECK_INT(in_child(grows_at_once), ==, 0);
}

static int kept_within_the_soft_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_max < 300)
		return 20;
	struct rlimit low_soft = { .rlim_cur = 300, .rlim_max = rl.rlim_max };
	if (setrlimit(RLIMIT_NOFILE, &low_soft) != 0)
		return 21;
	long before = fd_table_size();
	int open_before = open_count();
	lr_fd_table_reserve(0);
	lr_fd_table_reserve(-5);
	if (fd_table_size() != before)
		return 22;
	lr_fd_table_reserve(1000000);
	long after = fd_table_size();
	if (after < 300 || after > 512)
		return 23; /* up to the limit, not to the million asked */
	if (open_count() != open_before)
		return 24;
	return 0;
}

TEST(a_reserve_past_the_soft_limit_stops_at_it)
{
	CHECK_INT(in_child(kept_within_the_soft_limit), ==, 0);
}

TEST_LIST(TEST_CASE(a_reserve_grows_the_table_at_once_and_leaves_nothing_open),
          TEST_CASE(a_reserve_past_the_soft_limit_stops_at_it));
TEST_MAIN(NULL, NULL)
