/* server.h - a small HTTP server on libmicrohttpd, which does all the
 * parsing: a listen address, limits against slow or hostile clients, one
 * request handler, replies from buffers, and streams fed by other threads.
 *
 * Threads: libmicrohttpd's own. Without streams, one internal thread polls
 * every connection and runs the handler, which must not block. With
 * streams (LR_HTTP_STREAMS), each connection has a thread of its own, so
 * that a stream's reader may wait for data; the handler runs there. */
#ifndef LR_HTTP_SERVER_H
#define LR_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

#include "leaserun.h"

typedef struct lr_http lr_http;
typedef struct lr_http_req lr_http_req;
typedef struct lr_http_stream lr_http_stream;

/* Answer one request: call exactly one of the lr_http_reply* functions and
 * return. The request lives during the call only. */
typedef void (*lr_http_handler)(void *user, lr_http_req *req);

enum {
	/* Thread per connection, for long-lived streams (server-sent events). */
	LR_HTTP_STREAMS = 1 << 0,
};

typedef struct lr_http_opts {
	/* "ADDR:PORT", "[V6ADDR]:PORT", or ":PORT" for loopback (127.0.0.1).
	 * PORT 0 picks a free port (see lr_http_address). Required. */
	const char *listen;
	const char *what;          /* names the server in messages ("metrics") */
	int flags;
	unsigned max_connections;  /* default 32 */
	unsigned max_per_ip;       /* connections from one address; 0: no
	                              limit beyond max_connections */
	unsigned idle_timeout_s;   /* a connection silent this long is closed;
	                              default 10 */
	size_t request_bytes;      /* request line + headers; larger ones are
	                              refused (431, or 414 for a request line
	                              that alone is too long), always with an
	                              answer; default 32 KiB */
	lr_http_handler handler;   /* required */
	void *user;
} lr_http_opts;

/* Start listening. On success *out runs until lr_http_stop. Errors:
 * LR_EINVAL (a malformed address), LR_ESYS (the address cannot be bound;
 * the message names it). */
int lr_http_start(const lr_http_opts *o, lr_http **out, lr_err *err);

/* Close every stream, wait for the server's threads and free it. NULL is
 * allowed. Not from a handler. */
void lr_http_stop(lr_http *h);

/* The address actually bound ("127.0.0.1:9464"). Borrowed. */
const char *lr_http_address(const lr_http *h);

/* Parse a listen address as lr_http_opts.listen describes it (names are
 * resolved; the first address found is taken). LR_EINVAL with the reason. */
int lr_http_parse_address(const char *listen, struct sockaddr_storage *out,
                          socklen_t *out_len, lr_err *err);

/* ---- requests ------------------------------------------------------------ */

const char *lr_http_method(const lr_http_req *req);
/* The path without the query string, %-escapes decoded. */
const char *lr_http_path(const lr_http_req *req);
/* A header's value (case-insensitive name), or NULL. */
const char *lr_http_header(const lr_http_req *req, const char *name);
/* A query argument, decoded; NULL when absent. */
const char *lr_http_query(const lr_http_req *req, const char *name);

/* ---- replies ------------------------------------------------------------- */

/* Extra headers of a reply: { name, value } pairs ending with { NULL }. */
typedef struct lr_http_header_kv {
	const char *name, *value;
} lr_http_header_kv;

/* Reply with body (copied unless LR_HTTP_STATIC: then it must outlive the
 * server). Every reply carries "X-Content-Type-Options: nosniff" and
 * "Cache-Control: no-store" besides `headers` (may be NULL). */
enum { LR_HTTP_STATIC = 1 << 0 };
void lr_http_reply(lr_http_req *req, unsigned status, const char *content_type,
                   const void *body, size_t len, int flags,
                   const lr_http_header_kv *headers);

/* A short text/plain reply ("not found\n"). */
void lr_http_reply_text(lr_http_req *req, unsigned status, const char *text);

/* Reply with a stream of unknown length: the body is whatever
 * lr_http_stream_write is given, until lr_http_stream_close or the server
 * stops. Only on a server with LR_HTTP_STREAMS. NULL when out of memory
 * (then a 503 has been sent). The caller holds one reference, released by
 * lr_http_stream_close; the connection holds another. */
lr_http_stream *lr_http_reply_stream(lr_http_req *req, const char *content_type,
                                     const lr_http_header_kv *headers);

/* Queue bytes; any thread. Fails (false) once the client is gone, the
 * stream is closed, or more than max_queued bytes are waiting (the client
 * does not read): the caller should then close it. */
bool lr_http_stream_write(lr_http_stream *s, const void *data, size_t len,
                          size_t max_queued);
/* Queue len bytes at data without copying them: release(arg) is called
 * once the stream is done with them (sent, or the stream freed), on
 * whichever thread that is, without the stream's lock. On false nothing
 * was taken (release is not called). So one buffer (a snapshot) may be
 * queued on many streams, each holding a reference. */
bool lr_http_stream_write_shared(lr_http_stream *s, const void *data, size_t len,
                                 void (*release)(void *arg), void *arg,
                                 size_t max_queued);
/* True once the client has gone (the stream can be closed). Any thread. */
bool lr_http_stream_gone(lr_http_stream *s);
/* End the stream (what is queued is still sent) and drop the caller's
 * reference. Any thread. */
void lr_http_stream_close(lr_http_stream *s);

#endif
