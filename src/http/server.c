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
#define DEFAULT_CONN_MEMORY (32 * 1024)
/* How often a waiting stream reader looks whether its client has gone. */
#define STREAM_CHECK_MS 1000
/* How long a stop waits for streams to hand over what was written. */
#define STOP_FLUSH_MS 1000
/* Bytes a stream hands libmicrohttpd per call. */
#define STREAM_BLOCK (16 * 1024)
/* A stream's buffer beyond this is freed once it is drained. */
#define STREAM_KEEP (64 * 1024)

struct lr_http {
	struct MHD_Daemon *d;
	lr_http_handler handler;
	void *user;
	bool streams;
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

struct lr_http_stream {
	lr_http *h;
	pthread_mutex_t mu;
	pthread_cond_t cond;    /* data queued, closed, or server stopping */
	char *buf;              /* bytes not yet handed out: buf[off..len) */
	size_t off, len, cap;
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

static void stream_unref(lr_http_stream *s)
{
	pthread_mutex_lock(&s->mu);
	bool last = --s->refs == 0;
	pthread_mutex_unlock(&s->mu);
	if (!last)
		return;
	pthread_cond_destroy(&s->cond);
	pthread_mutex_destroy(&s->mu);
	free(s->buf);
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

/* libmicrohttpd asks for body bytes; on the connection's own thread, so
 * waiting here holds up nothing else. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	lr_http_stream *s = cls;
	ssize_t n = 0;

	(void)pos;
	pthread_mutex_lock(&s->mu);
	while (s->off == s->len && !s->closed && !s->gone) {
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += STREAM_CHECK_MS / 1000;
		pthread_cond_timedwait(&s->cond, &s->mu, &until);
		if (s->off == s->len && client_gone(s->fd))
			s->gone = true;
	}
	if (s->off < s->len) {
		size_t take = s->len - s->off < max ? s->len - s->off : max;
		memcpy(buf, s->buf + s->off, take);
		s->off += take;
		if (s->off == s->len) {
			s->off = s->len = 0;
			/* A snapshot taken in: its room goes back, so that open
			 * pages keep small buffers. */
			if (s->cap > STREAM_KEEP) {
				free(s->buf);
				s->buf = NULL;
				s->cap = 0;
			}
		}
		n = (ssize_t)take;
	} else {
		n = s->gone ? MHD_CONTENT_READER_END_WITH_ERROR
		            : MHD_CONTENT_READER_END_OF_STREAM;
	}
	pthread_mutex_unlock(&s->mu);
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

bool lr_http_stream_write(lr_http_stream *s, const void *data, size_t len,
                          size_t max_queued)
{
	bool ok = false;

	pthread_mutex_lock(&s->mu);
	if (s->closed || s->gone || s->len - s->off + len > max_queued)
		goto out;
	if (s->len + len > s->cap && s->off > 0) {
		/* Move what is left to the front before growing. */
		memmove(s->buf, s->buf + s->off, s->len - s->off);
		s->len -= s->off;
		s->off = 0;
	}
	if (s->len + len > s->cap) {
		/* Doubled for small events, exact for a large one (a snapshot). */
		size_t need = s->len + len;
		size_t cap = s->cap * 2 > need ? s->cap * 2 : need;
		char *nb = realloc(s->buf, cap);
		if (nb == NULL)
			goto out;
		s->buf = nb;
		s->cap = cap;
	}
	memcpy(s->buf + s->len, data, len);
	s->len += len;
	ok = true;
	pthread_cond_signal(&s->cond);
out:
	pthread_mutex_unlock(&s->mu);
	return ok;
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
	    o->request_bytes ? o->request_bytes : (size_t)DEFAULT_CONN_MEMORY,
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
