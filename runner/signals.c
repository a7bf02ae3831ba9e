/* signals.c - SIGINT and SIGTERM as a file descriptor, for the commands
 * that wait for them beside other events (web, status --watch). Main
 * thread, before any other thread starts. */
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "cli.h"

int cli_stop_signal_fd(void)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	/* Blocked here, they stay blocked in every thread started later
	 * (gRPC's, the server's), so the descriptor receives them all. */
	if (sigprocmask(SIG_BLOCK, &set, NULL) != 0)
		return -1;
	return signalfd(-1, &set, SFD_CLOEXEC);
}

int cli_stop_signal_read(int fd)
{
	struct signalfd_siginfo si;
	if (fd >= 0 && read(fd, &si, sizeof(si)) == (ssize_t)sizeof(si))
		return (int)si.ssi_signo;
	return SIGTERM;
}
