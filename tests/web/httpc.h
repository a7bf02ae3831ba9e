/* httpc.h - a raw HTTP client for the tests: sends exactly the bytes a test
 * gives (well-formed or not) to a loopback server and reads what comes
 * back until the server closes, within a time limit. */
#ifndef LR_TEST_HTTPC_H
#define LR_TEST_HTTPC_H

#include <stddef.h>

typedef struct http_resp {
	int status;     /* from the status line; -1: no reply (closed, refused,
	                   or timed out before a status line) */
	char *head;     /* status line and headers, NUL-terminated ("" if none) */
	char *body;     /* what followed the headers, NUL-terminated */
	size_t body_len;
} http_resp;

/* Open a TCP connection to "ADDR:PORT"; -1 on failure. */
int http_connect(const char *addr);
/* The same, giving up after timeout_ms (a server whose backlog is full
 * leaves connect() waiting for seconds). */
int http_connect_within(const char *addr, int timeout_ms);
/* The same from the local address src ("127.0.0.2": any of loopback's
 * 127/8 stands for another client); NULL: any. */
int http_connect_from(const char *src, const char *addr, int timeout_ms);

/* Send req (len bytes) on a new connection and read the reply until the
 * server closes it or timeout_ms passes. */
http_resp http_raw(const char *addr, const void *req, size_t len, int timeout_ms);
/* The same from the local address src (see http_connect_from). */
http_resp http_raw_from(const char *src, const char *addr, const void *req, size_t len,
                        int timeout_ms);

/* GET path with HTTP/1.0 (the server closes after the reply); extra is
 * more header lines, each ending with "\r\n" (may be NULL). */
http_resp http_get(const char *addr, const char *path, const char *extra,
                   int timeout_ms);

/* A request with a method and headers, as http_get. */
http_resp http_method(const char *addr, const char *method, const char *path,
                      const char *extra, int timeout_ms);

/* A header's value in r->head (case-insensitive name), into buf; 0 if
 * absent. */
int http_header(const http_resp *r, const char *name, char *buf, size_t size);

void http_resp_free(http_resp *r);

#endif
