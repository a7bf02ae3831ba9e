/* server.c - the HTTP server: libmicrohttpd configured against slow and
 * hostile clients, requests handed to one handler, buffer and stream replies.
 * Threads: libmicrohttpd's (see server.h); streams are written from any
 * thread under their own mutex, never while libmicrohttpd's locks are held. */
#include "http/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "base/clock.h"
#include "base/error.h"

#define DEFAULT_MAX_CONNECTIONS 32
#define DEFAULT_IDLE_TIMEOUT_S 10
#define DEFAULT_REQUEST_BYTES (32 * 1024)
/* libmicrohttpd keeps a connection's request, the entries it parses from
 * it and the reply's headers in one memory pool: a request that nearly
 * fills the pool leaves no room for any reply, and the client would get
 * none. So the pool is this much larger than the largest request served,
 * and a request beyond is refused by the handler (see refuse_oversized). */
#define REPLY_ROOM (16 * 1024)
/* What one parsed header, argument or cookie takes in the pool besides its
 * bytes (libmicrohttpd's entry, aligned); cookies are parsed from a copy
 * of their header, which counts again. */
#define ENTRY_COST 64
/* How often a waiting stream reader looks whether its client has gone. */
#define STREAM_CHECK_MS 1000
/* How long a stop waits for streams to hand over what was written. */
#define STOP_FLUSH_MS 1000
/* Bytes a stream hands libmicrohttpd per call. */
#define STREAM_BLOCK (16 * 1024)

struct lr_http {
	struct MHD_Daemon *d;
	lr_http_handler handler;
	void *user;
	bool streams;
	size_t request_bytes;   /* request line + headers served at most */
	char address[80];
	pthread_mutex_t mu;     /* guards the list of streams and `stopping` */
	lr_http_stream *live;   /* streams still attached to a connection */
	bool stopping;
};

struct lr_http_req {
	lr_http *h;
	struct MHD_Connection *conn;
	const char *method, *path;
	bool replied;
};

/* Bytes queued on a stream: a copy of its own, or a buffer shared with
 * other streams and given back through release once sent. */
struct segment {
	struct segment *next;
	const char *data;
	size_t len, off;        /* data[off..len) not yet handed out */
	void (*release)(void *arg); /* NULL: the copy in own[] */
	void *arg;
	char own[];
};

struct lr_http_stream {
	lr_http *h;
	pthread_mutex_t mu;
	pthread_cond_t cond;    /* data queued, closed, or server stopping */
	struct segment *head, *tail; /* not yet handed out, oldest first */
	size_t queued;          /* their bytes not yet handed out */
	bool closed;            /* no more writes: end after the queue */
	bool gone;              /* the connection is over */
	int refs;               /* the writer's and the connection's */
	int fd;                 /* the client's socket, for noticing hang-ups */
	lr_http_stream *prev, *next; /* in h->live, under h->mu */
};

/* ---- the listen address --------------------------------------------------- */

/* Split "HOST:PORT", "[V6]:PORT" or ":PORT" into host (empty for none) and
 * port. */
static int split_address(const char *s, char *host, size_t hsize,
                         const char **port, lr_err *err)
{
	const char *colon;
	size_t hlen;

	if (s[0] == '[') {
		const char *close = strchr(s, ']');
		if (close == NULL || close[1] != ':')
			return lr_err_set(err, LR_EINVAL, "\"%s\": expected "
			                  "[ADDRESS]:PORT", s);
		hlen = (size_t)(close - s - 1);
		s++;
		colon = close + 1;
	} else {
		colon = strrchr(s, ':');
		if (colon == NULL)
			return lr_err_set(err, LR_EINVAL, "\"%s\": expected "
			                  "ADDRESS:PORT or :PORT", s);
		if (memchr(s, ':', (size_t)(colon - s)) != NULL)
			return lr_err_set(err, LR_EINVAL, "\"%s\": write an "
			                  "IPv6 address in brackets: [::1]:PORT", s);
		hlen = (size_t)(colon - s);
	}
	if (hlen >= hsize)
		return lr_err_set(err, LR_EINVAL, "\"%s\": address too long", s);
	memcpy(host, s, hlen);
	host[hlen] = '\0';
	*port = colon + 1;
	return 0;
}

int lr_http_parse_address(const char *s, struct sockaddr_storage *out,
                          socklen_t *out_len, lr_err *err)
{
	char host[256], *end;
	const char *port = NULL;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
		                  .ai_flags = AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	int rc;

	if (s == NULL || s[0] == '\0')
		return lr_err_set(err, LR_EINVAL, "empty listen address");
	rc = split_address(s, host, sizeof(host), &port, err);
	if (rc != 0)
		return rc;
	errno = 0;
	long p = strtol(port, &end, 10);
	if (port[0] < '0' || port[0] > '9' || *end != '\0' || errno != 0 ||
	    p < 0 || p > 65535)
		return lr_err_set(err, LR_EINVAL, "\"%s\": the port must be a "
		                  "number from 0 to 65535", s);
	if (host[0] == '\0')
		snprintf(host, sizeof(host), "127.0.0.1");
	rc = getaddrinfo(host, port, &hints, &res);
	if (rc != 0 || res == NULL)
		return lr_err_set(err, LR_EINVAL, "\"%s\": unknown address %s (%s)",
		                  s, host, gai_strerror(rc));
	memcpy(out, res->ai_addr, res->ai_addrlen);
	*out_len = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

static void format_address(const struct sockaddr_storage *sa, unsigned port,
                           char *buf, size_t size)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	if (sa->ss_family == AF_INET6) {
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr,
		          ip, sizeof(ip));
		snprintf(buf, size, "[%s]:%u", ip, port);
	} else {
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr,
		          ip, sizeof(ip));
		snprintf(buf, size, "%s:%u", ip, port);
	}
}

/* ---- requests ------------------------------------------------------------- */

const char *lr_http_method(const lr_http_req *req) { return req->method; }
const char *lr_http_path(const lr_http_req *req) { return req->path; }

const char *lr_http_header(const lr_http_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *lr_http_query(const lr_http_req *req, const char *name)
{
	return MHD_lookup_connection_value(req->conn, MHD_GET_ARGUMENT_KIND, name);
}

/* ---- replies -------------------------------------------------------------- */

static void add_headers(struct MHD_Response *resp, const char *content_type,
                        const lr_http_header_kv *headers)
{
	if (content_type != NULL)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
		                        content_type);
	MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	for (const lr_http_header_kv *kv = headers; kv != NULL && kv->name != NULL;
	     kv++)
		MHD_add_response_header(resp, kv->name, kv->value);
}

static void queue(lr_http_req *req, unsigned status, struct MHD_Response *resp)
{
	req->replied = true;
	if (resp == NULL)
		return; /* out of memory: libmicrohttpd closes the connection */
	MHD_queue_response(req->conn, status, resp);
	MHD_destroy_response(resp);
}

void lr_http_reply(lr_http_req *req, unsigned status, const char *content_type,
                   const void *body, size_t len, int flags,
                   const lr_http_header_kv *headers)
{
	enum MHD_ResponseMemoryMode mode = (flags & LR_HTTP_STATIC)
	                                       ? MHD_RESPMEM_PERSISTENT
	                                       : MHD_RESPMEM_MUST_COPY;
	struct MHD_Response *resp =
	    MHD_create_response_from_buffer(len, (void *)body, mode);

	if (resp != NULL)
		add_headers(resp, content_type, headers);
	queue(req, status, resp);
}

void lr_http_reply_text(lr_http_req *req, unsigned status, const char *text)
{
	lr_http_reply(req, status, "text/plain; charset=utf-8", text, strlen(text),
	              0, NULL);
}

/* ---- streams --------------------------------------------------------------- */

/* Give back segments taken off a queue (their buffers may be shared).
 * Without the stream's lock. */
static void segments_free(struct segment *seg)
{
	while (seg != NULL) {
		struct segment *next = seg->next;
		if (seg->release != NULL)
			seg->release(seg->arg);
		free(seg);
		seg = next;
	}
}

static void stream_unref(lr_http_stream *s)
{
	pthread_mutex_lock(&s->mu);
	bool last = --s->refs == 0;
	pthread_mutex_unlock(&s->mu);
	if (!last)
		return;
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->mu);
	segments_free(s->head);
	free(s);
}

/* Whether the client hung up: a readable end-of-file or an error on its
 * socket. A client sending more bytes is not a hang-up. */
static bool client_gone(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };

	if (fd < 0)
		return false;
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Copy up to max queued bytes into buf; the segments emptied go into
 * *done. Under s->mu. */
static size_t take_queued(lr_http_stream *s, char *buf, size_t max,
                          struct segment **done)
{
	size_t n = 0;

	while (n < max && s->head != NULL) {
		struct segment *seg = s->head;
		size_t take = seg->len - seg->off < max - n ? seg->len - seg->off : max - n;
		memcpy(buf + n, seg->data + seg->off, take);
		seg->off += take;
		n += take;
		if (seg->off < seg->len)
			break;
		/* Sent: a snapshot taken in gives its room back at once. */
		s->head = seg->next;
		if (s->head == NULL)
			s->tail = NULL;
		seg->next = *done;
		*done = seg;
	}
	s->queued -= n;
	return n;
}

/* libmicrohttpd asks for body bytes; on the connection's own thread, so
 * waiting here holds up nothing else. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	lr_http_stream *s = cls;
	struct segment *done = NULL;
	ssize_t n = 0;

	(void)pos;
	pthread_mutex_lock(&s->mu);
	while (s->head == NULL && !s->closed && !s->gone) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += STREAM_CHECK_MS / 1000;
		pthread_cond_timedwait(&s->cond, &s->mu, &until);
		if (s->head == NULL && client_gone(s->fd))
			s->gone = true;
	}
	if (s->head != NULL)
		n = (ssize_t)take_queued(s, buf, max, &done);
	else
		n = s->gone ? MHD_CONTENT_READER_END_WITH_ERROR
		            : MHD_CONTENT_READER_END_OF_STREAM;
	pthread_mutex_unlock(&s->mu);
	segments_free(done);
	return n;
}

/* The connection is over (libmicrohttpd frees the response). */
static void stream_detach(void *cls)
{
	lr_http_stream *s = cls;
	lr_http *h = s->h;

	pthread_mutex_lock(&h->mu);
	if (s->prev != NULL)
		s->prev->next = s->next;
	else
		h->live = s->next;
	if (s->next != NULL)
		s->next->prev = s->prev;
	pthread_mutex_unlock(&h->mu);
	pthread_mutex_lock(&s->mu);
	s->gone = true;
	pthread_mutex_unlock(&s->mu);
	stream_unref(s);
}

static int connection_fd(struct MHD_Connection *conn)
{
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);

	return ci != NULL ? ci->connect_fd : -1;
}

lr_http_stream *lr_http_reply_stream(lr_http_req *req, const char *content_type,
                                     const lr_http_header_kv *headers)
{
	lr_http *h = req->h;
	lr_http_stream *s = calloc(1, sizeof(*s));
	struct MHD_Response *resp = NULL;

	if (s == NULL || !h->streams)
		goto fail;
	s->h = h;
	s->refs = 2;
	s->fd = connection_fd(req->conn);
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cond, NULL);
	resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK,
	                                         stream_read, s, stream_detach);
	if (resp == NULL) {
		pthread_cond_destroy(&s->cond);
		pthread_mutex_destroy(&s->mu);
		goto fail;
	}
	add_headers(resp, content_type, headers);
	pthread_mutex_lock(&h->mu);
	s->closed = h->stopping;
	s->next = h->live;
	if (h->live != NULL)
		h->live->prev = s;
	h->live = s;
	pthread_mutex_unlock(&h->mu);
	/* A stream stays open as long as it has something to say. */
	MHD_set_connection_option(req->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0);
	queue(req, MHD_HTTP_OK, resp);
	return s;
fail:
	free(s);
	lr_http_reply_text(req, MHD_HTTP_SERVICE_UNAVAILABLE, "out of memory\n");
	return NULL;
}

/* Whether s would take len more bytes now. Under s->mu. */
static bool takes_more(const lr_http_stream *s, size_t len, size_t max_queued)
{
	return !s->closed && !s->gone && s->queued + len <= max_queued;
}

/* Queue seg; false (seg not taken) when the stream cannot take it. */
static bool enqueue(lr_http_stream *s, struct segment *seg, size_t max_queued)
{
	bool ok = false;

	pthread_mutex_lock(&s->mu);
	if (!takes_more(s, seg->len, max_queued))
		goto out;
	if (s->tail != NULL)
		s->tail->next = seg;
	else
		s->head = seg;
	s->tail = seg;
	s->queued += seg->len;
	ok = true;
	pthread_cond_signal(&s->cond);
out:
	pthread_mutex_unlock(&s->mu);
	return ok;
}

bool lr_http_stream_write(lr_http_stream *s, const void *data, size_t len,
                          size_t max_queued)
{
	struct segment *seg;

	/* No copy for a stream that would refuse it. */
	pthread_mutex_lock(&s->mu);
	bool fits = takes_more(s, len, max_queued);
	pthread_mutex_unlock(&s->mu);
	if (!fits || (seg = malloc(sizeof(*seg) + len)) == NULL)
		return false;
	*seg = (struct segment){ .data = seg->own, .len = len };
	memcpy(seg->own, data, len);
	if (enqueue(s, seg, max_queued))
		return true;
	free(seg);
	return false;
}

bool lr_http_stream_write_shared(lr_http_stream *s, const void *data, size_t len,
                                 void (*release)(void *arg), void *arg,
                                 size_t max_queued)
{
	struct segment *seg = malloc(sizeof(*seg));

	if (seg == NULL)
		return false;
	*seg = (struct segment){ .data = data, .len = len, .release = release,
		                 .arg = arg };
	if (enqueue(s, seg, max_queued))
		return true;
	free(seg);
	return false;
}

bool lr_http_stream_gone(lr_http_stream *s)
{
	pthread_mutex_lock(&s->mu);
	bool gone = s->gone;
	pthread_mutex_unlock(&s->mu);
	return gone;
}

static void stream_end(lr_http_stream *s)
{
	pthread_mutex_lock(&s->mu);
	s->closed = true;
	pthread_cond_signal(&s->cond);
	pthread_mutex_unlock(&s->mu);
}

void lr_http_stream_close(lr_http_stream *s)
{
	if (s == NULL)
		return;
	stream_end(s);
	stream_unref(s);
}

/* ---- the server ------------------------------------------------------------ */

/* A request beyond what the server serves gets 431 written straight to its
 * socket: libmicrohttpd builds replies in the pool the request fills, so
 * near the pool's end it could build none (and would close without a
 * word). Nothing has been sent on the connection for this request, and
 * the reply is far smaller than an empty socket buffer. True when refused
 * (the caller then has libmicrohttpd close the connection). */
static bool refuse_oversized(const lr_http *h, struct MHD_Connection *conn)
{
	static const char body[] = "request line and headers too large\n";
	const union MHD_ConnectionInfo *ci =
	    MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
	int entries = MHD_get_connection_values(
	    conn, MHD_HEADER_KIND | MHD_GET_ARGUMENT_KIND | MHD_COOKIE_KIND, NULL, NULL);
	const char *cookie = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
	                                                 MHD_HTTP_HEADER_COOKIE);
	size_t size = ci != NULL ? ci->header_size : 0;
	size_t pooled = size + (size_t)(entries > 0 ? entries : 0) * ENTRY_COST +
	                (cookie != NULL ? strlen(cookie) : 0);
	char reply[256];

	/* Whatever is served leaves half the reply room free. */
	if (size <= h->request_bytes && pooled <= h->request_bytes + REPLY_ROOM / 2)
		return false;
	int n = snprintf(reply, sizeof(reply),
	                 "HTTP/1.1 431 Request Header Fields Too Large\r\n"
	                 "Content-Type: text/plain; charset=utf-8\r\n"
	                 "Content-Length: %zu\r\n"
	                 "X-Content-Type-Options: nosniff\r\n"
	                 "Cache-Control: no-store\r\n"
	                 "Connection: close\r\n\r\n%s",
	                 sizeof(body) - 1, body);
	int fd = connection_fd(conn);
	if (fd >= 0 && n > 0)
		(void)!send(fd, reply, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
	return true;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn,
                                  const char *url, const char *method,
                                  const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
	lr_http *h = cls;
	lr_http_req req = { .h = h, .conn = conn, .method = method, .path = url };

	(void)version;
	(void)upload_data;
	/* Every answer is decided by the request line and headers: a body is
	 * never read (libmicrohttpd closes the connection after replying). */
	if (*con_cls == NULL) {
		*con_cls = h;
		if (refuse_oversized(h, conn))
			return MHD_NO; /* closes the connection */
		h->handler(h->user, &req);
		if (!req.replied)
			lr_http_reply_text(&req, MHD_HTTP_INTERNAL_SERVER_ERROR,
			                   "no reply\n");
		return MHD_YES;
	}
	*upload_data_size = 0;
	return MHD_YES;
}

int lr_http_start(const lr_http_opts *o, lr_http **out, lr_err *err)
{
	struct sockaddr_storage sa;
	socklen_t sa_len = 0;
	const char *what = o->what != NULL ? o->what : "http";
	lr_http *h;
	int rc;

	*out = NULL;
	if (o->handler == NULL)
		return lr_err_set(err, LR_EINVAL, "%s: no handler", what);
	rc = lr_http_parse_address(o->listen, &sa, &sa_len, err);
	if (rc != 0)
		return lr_err_wrap(err, rc, "%s: listen", what);
	h = calloc(1, sizeof(*h));
	if (h == NULL)
		return lr_err_set(err, LR_ENOMEM, "%s: out of memory", what);
	h->handler = o->handler;
	h->user = o->user;
	h->streams = (o->flags & LR_HTTP_STREAMS) != 0;
	h->request_bytes = o->request_bytes ? o->request_bytes : DEFAULT_REQUEST_BYTES;
	pthread_mutex_init(&h->mu, NULL);

	unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD;
	flags |= h->streams ? MHD_USE_THREAD_PER_CONNECTION : MHD_USE_EPOLL;
	if (sa.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	h->d = MHD_start_daemon(
	    flags, 0, NULL, NULL, on_request, h,
	    MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&sa,
	    MHD_OPTION_CONNECTION_LIMIT,
	    o->max_connections ? o->max_connections : DEFAULT_MAX_CONNECTIONS,
	    MHD_OPTION_CONNECTION_TIMEOUT,
	    o->idle_timeout_s ? o->idle_timeout_s : DEFAULT_IDLE_TIMEOUT_S,
	    MHD_OPTION_CONNECTION_MEMORY_LIMIT,
	    h->request_bytes + (size_t)REPLY_ROOM,
	    MHD_OPTION_PER_IP_CONNECTION_LIMIT, o->max_per_ip,
	    MHD_OPTION_LISTEN_BACKLOG_SIZE, 64u,
	    MHD_OPTION_THREAD_STACK_SIZE, (size_t)(256 * 1024),
	    MHD_OPTION_END);
	if (h->d == NULL) {
		int e = errno;
		char addr[80];
		format_address(&sa, ntohs(sa.ss_family == AF_INET6
		                              ? ((struct sockaddr_in6 *)&sa)->sin6_port
		                              : ((struct sockaddr_in *)&sa)->sin_port),
		               addr, sizeof(addr));
		pthread_mutex_destroy(&h->mu);
		free(h);
		return lr_err_set(err, LR_ESYS, "%s: cannot listen on %s: %s", what,
		                  addr, e != 0 ? strerror(e) : "refused");
	}
	const union MHD_DaemonInfo *di =
	    MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_BIND_PORT);
	format_address(&sa, di != NULL ? di->port : 0, h->address,
	               sizeof(h->address));
	*out = h;
	return 0;
}

const char *lr_http_address(const lr_http *h)
{
	return h->address;
}

void lr_http_stop(lr_http *h)
{
	if (h == NULL)
		return;
	/* Streams end first, so that their readers return and the
	 * connection threads can be joined. */
	pthread_mutex_lock(&h->mu);
	h->stopping = true;
	for (lr_http_stream *s = h->live; s != NULL; s = s->next)
		stream_end(s);
	pthread_mutex_unlock(&h->mu);
	/* What was written before the stop still reaches readers that read:
	 * each response ends after its queue, then detaches. A reader that
	 * does not read is cut off after STOP_FLUSH_MS. */
	int64_t until = lr_mono_ms() + STOP_FLUSH_MS;
	for (;;) {
		pthread_mutex_lock(&h->mu);
		bool left = h->live != NULL;
		pthread_mutex_unlock(&h->mu);
		if (!left || lr_mono_ms() >= until)
			break;
		lr_sleep_ms(5);
	}
	MHD_stop_daemon(h->d);
	pthread_mutex_destroy(&h->mu);
	free(h);
}
