/* stdfd.h - whether a standard descriptor was closed when the process
 * started. gRPC's library constructor opens an eventfd before main()
 * runs, and it takes the lowest free number: 0, 1 or 2 when the process
 * started with that one closed. Such a number must be left alone (it is
 * gRPC's now), and never read, written or handed to a child as if it
 * were standard input or output. */
#ifndef LR_BASE_STDFD_H
#define LR_BASE_STDFD_H

#include <stdbool.h>

/* Whether fd is an anonymous inode (an eventfd, epoll or timer fd: no
 * file, pipe, socket or terminal is one). False when /proc cannot tell. */
bool lr_fd_is_anon(int fd);

#endif
