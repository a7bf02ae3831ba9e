/* fdtable.c - room in the descriptor table made in one step (fdtable.h). */
#include "base/fdtable.h"

#include <fcntl.h>
#include <limits.h>
#include <sys/resource.h>
#include <unistd.h>

void lr_fd_table_reserve(int n)
{
	struct rlimit rl;
	if (n <= 0 || getrlimit(RLIMIT_NOFILE, &rl) != 0)
		return;
	/* The lowest free descriptor: where new ones start. */
	int low = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (low < 0)
		return;
	long long top = (long long)low + n;
	if (rl.rlim_cur != RLIM_INFINITY && top >= (long long)rl.rlim_cur)
		top = (long long)rl.rlim_cur - 1;
	if (top > INT_MAX)
		top = INT_MAX;
	/* A descriptor at `top` makes the kernel size the table for it;
	 * closing it leaves the size. */
	if (top > low) {
		int high = fcntl(low, F_DUPFD_CLOEXEC, (int)top);
		if (high >= 0)
			close(high);
	}
	close(low);
}
