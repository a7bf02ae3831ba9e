/* httpc.c - the tests' raw HTTP client over loopback TCP. */
#include "httpc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"

int http_connect_from(const char *src, const char *addr, int timeout_ms)
{
	struct sockaddr_in sa = { .sin_family = AF_INET }, from = { .sin_family = AF_INET };
	char host[64];
	const char *colon = strrchr(addr, ':');
	int fd;

	if (colon == NULL || (size_t)(colon - addr) >= sizeof(host))
		return -1;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = '\0';
	sa.sin_port = htons((uint16_t)atoi(colon + 1));
	if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
		return -1;
	if (src != NULL && inet_pton(AF_INET, src, &from.sin_addr) != 1)
		return -1;
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	if (src != NULL && bind(fd, (struct sockaddr *)&from, sizeof(from)) != 0) {
		close(fd);
		return -1;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
		struct pollfd p = { .fd = fd, .events = POLLOUT };
		int soerr = 0;
		socklen_t len = sizeof(soerr);
		if (errno != EINPROGRESS || poll(&p, 1, timeout_ms) <= 0 ||
		    getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &len) != 0 || soerr != 0) {
			close(fd);
			return -1;
		}
	}
	/* Blocking again: the callers read and write with poll. */
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	return fd;
}

int http_connect_within(const char *addr, int timeout_ms)
{
	return http_connect_from(NULL, addr, timeout_ms);
}

int http_connect(const char *addr)
{
	return http_connect_within(addr, 10000);
}

static void split(http_resp *r, char *all, size_t len)
{
	char *end = strstr(all, "\r\n\r\n");

	r->status = -1;
	if (end == NULL) {
		r->head = all;
		r->body = strdup("");
		r->body_len = 0;
		return;
	}
	size_t hl = (size_t)(end - all);
	r->body_len = len - hl - 4;
	r->body = malloc(r->body_len + 1);
	memcpy(r->body, end + 4, r->body_len);
	r->body[r->body_len] = '\0';
	all[hl] = '\0';
	r->head = all;
	if (strncmp(all, "HTTP/1.", 7) == 0 && strlen(all) > 12)
		r->status = atoi(all + 9);
}

http_resp http_raw(const char *addr, const void *req, size_t len, int timeout_ms)
{
	return http_raw_from(NULL, addr, req, len, timeout_ms);
}

http_resp http_raw_from(const char *src, const char *addr, const void *req, size_t len,
                        int timeout_ms)
{
	http_resp r = { .status = -1 };
	int64_t end = lr_mono_ms() + timeout_ms;
	size_t n = 0, cap = 4096;
	char *buf = malloc(cap);
	int fd = http_connect_from(src, addr, 10000);

	buf[0] = '\0';
	if (fd >= 0) {
		const char *p = req;
		size_t left = len;
		while (left > 0) {
			ssize_t w = send(fd, p, left, MSG_NOSIGNAL);
			if (w <= 0)
				break;
			p += w;
			left -= (size_t)w;
		}
		for (;;) {
			int64_t wait = end - lr_mono_ms();
			struct pollfd pf = { .fd = fd, .events = POLLIN };
			if (wait <= 0 || poll(&pf, 1, (int)wait) <= 0)
				break;
			if (n + 4096 + 1 > cap) {
				cap *= 2;
				buf = realloc(buf, cap);
			}
			ssize_t got = recv(fd, buf + n, cap - n - 1, 0);
			if (got <= 0)
				break;
			n += (size_t)got;
		}
		close(fd);
	}
	buf[n] = '\0';
	split(&r, buf, n);
	return r;
}

http_resp http_method(const char *addr, const char *method, const char *path,
                      const char *extra, int timeout_ms)
{
	char *req = NULL;
	int n = asprintf(&req, "%s %s HTTP/1.0\r\nHost: %s\r\n%s\r\n", method, path,
	                 addr, extra != NULL ? extra : "");
	http_resp r = http_raw(addr, req, n > 0 ? (size_t)n : 0, timeout_ms);
	free(req);
	return r;
}

http_resp http_get(const char *addr, const char *path, const char *extra,
                   int timeout_ms)
{
	return http_method(addr, "GET", path, extra, timeout_ms);
}

int http_header(const http_resp *r, const char *name, char *buf, size_t size)
{
	size_t nl = strlen(name);

	for (const char *line = r->head; line != NULL && *line != '\0';) {
		const char *eol = strstr(line, "\r\n");
		size_t ll = eol != NULL ? (size_t)(eol - line) : strlen(line);
		if (ll > nl && line[nl] == ':' && strncasecmp(line, name, nl) == 0) {
			const char *v = line + nl + 1;
			while (*v == ' ')
				v++;
			snprintf(buf, size, "%.*s", (int)(ll - (size_t)(v - line)), v);
			return 1;
		}
		line = eol != NULL ? eol + 2 : NULL;
	}
	return 0;
}

void http_resp_free(http_resp *r)
{
	free(r->head);
	free(r->body);
	r->head = r->body = NULL;
}
