/* stdfd.c - see stdfd.h. Any thread. */
#include "base/stdfd.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

bool lr_fd_is_anon(int fd)
{
	static const char anon[] = "anon_inode:";
	char path[32], target[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(path, target, sizeof(target) - 1);
	if (n < 0)
		return false;
	target[n] = '\0';
	return strncmp(target, anon, sizeof(anon) - 1) == 0;
}
