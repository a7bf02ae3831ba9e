/* transport.c - the gRPC channel to etcd, unary calls and bidi streams.
 *
 * Threads: unary calls block the calling thread on a completion queue of
 * their own (any number of threads may call at once). Streams (LeaseKeepAlive
 * and Watch) live on one completion queue per client, served by one stream
 * thread that sleeps in grpc_completion_queue_next until an event or the
 * earliest timer a stream owner asked for: an idle client uses no CPU.
 * Locking: c->mu guards the stream table, each stream's send queue and each
 * call's bookkeeping. It is never held while an owner callback runs. Owner
 * callbacks run on the stream thread only, one at a time.
 *
 * Balancing: round_robin over every endpoint, so a retried call and a
 * re-opened stream go to another member when one is down. Streams carry the
 * `hasleader` metadata so that a member cut off from the leader refuses them. */
#include "etcd/transport.h"

#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <arpa/inet.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "rpc.pb-c.h"

#include "backoff.h"
#include "clock.h"
#include "error.h"

#define LR_MAX_MESSAGE (64 * 1024 * 1024)
#define LR_STREAM_BACKOFF_MIN_MS 50
#define LR_STREAM_BACKOFF_MAX_MS 2000
#define LR_DIAL_POLL_MS 100      /* look at a failing channel's reason */
#define LR_TLS_LIKELY_MS 1000    /* of failures that read like TLS ones */

enum tag_kind { TAG_START, TAG_SEND, TAG_RECV, TAG_STATUS, TAG_WAKE };

struct scall;

struct tag {
	enum tag_kind kind;
	struct scall *call;
};

struct sendq {
	grpc_byte_buffer *buf;
	struct sendq *next;
};

/* One gRPC call of a stream; a stream has a new one after every failure.
 * Freed once every batch started on it has completed. */
struct scall {
	lr_stream *stream; /* NULL once the stream was removed */
	grpc_call *call;
	struct tag t_start, t_send, t_recv, t_status;
	int outstanding;
	bool send_busy;
	bool ended;
	grpc_byte_buffer *send_buf;
	grpc_byte_buffer *recv_buf;
	grpc_metadata_array md_in, md_trail;
	grpc_status_code status;
	grpc_slice details;
	const char *error_string;
	grpc_metadata md_out[2];
	char *token; /* copy sent as metadata */
};

struct lr_stream {
	lr_etcd *client;
	const char *method;
	const lr_stream_ops *ops;
	void *owner;
	struct scall *cur; /* NULL while down */
	int64_t reopen_at;
	int64_t next_tick;
	lr_backoff backoff;
	struct sendq *q_head, *q_tail;
	bool removed;
	lr_stream *next;
};

struct lr_etcd {
	char *endpoints;
	char *target;
	grpc_channel *channel;
	int64_t dial_timeout_ms;
	int64_t call_timeout_ms;
	bool tls, has_cacert, client_cert; /* for messages about TLS failures */
	char *tls_server_name;
	char *user, *password;

	pthread_mutex_t mu;
	pthread_cond_t cond;
	char *token;          /* auth token, under mu */
	lr_rng rng;           /* under mu */

	grpc_completion_queue *cq; /* stream queue, NULL until first stream */
	pthread_t thread;
	bool thread_started;
	bool closing;
	lr_stream *streams;
	int wakes_pending;
	struct tag t_wake;
	lr_stream *in_callback; /* stream whose owner runs now */
};

/* ---- helpers ------------------------------------------------------------ */

static gpr_timespec deadline_in_ms(int64_t ms)
{
	return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
	                    gpr_time_from_millis(ms, GPR_TIMESPAN));
}

static gpr_timespec mono_ms_to_timespec(int64_t at_ms)
{
	int64_t now = lr_mono_ms();
	return deadline_in_ms(at_ms > now ? at_ms - now : 0);
}

static const char *method_short(const char *method)
{
	/* "/etcdserverpb.KV/Range" -> "KV/Range" */
	const char *dot = strchr(method, '.');
	return dot != NULL ? dot + 1 : method;
}

/* Serialise msg into a slice (one reference, caller unrefs). */
static int pack_slice(const ProtobufCMessage *msg, grpc_slice *out)
{
	size_t n = protobuf_c_message_get_packed_size(msg);
	*out = grpc_slice_malloc(n);
	protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(*out));
	return 0;
}

/* A byte buffer for one send. gRPC takes the bytes out of a buffer it
 * sends, so a retried call needs a new buffer over the same slice. */
static grpc_byte_buffer *buffer_of(grpc_slice slice)
{
	return grpc_raw_byte_buffer_create(&slice, 1);
}

static grpc_byte_buffer *pack(const ProtobufCMessage *msg)
{
	grpc_slice slice;
	pack_slice(msg, &slice);
	grpc_byte_buffer *bb = buffer_of(slice);
	grpc_slice_unref(slice);
	return bb;
}

/* Flatten a received buffer; *out is malloc'd (caller frees). */
static int unpack_bytes(grpc_byte_buffer *bb, uint8_t **out, size_t *len)
{
	grpc_byte_buffer_reader r;
	if (!grpc_byte_buffer_reader_init(&r, bb))
		return -1;
	grpc_slice s = grpc_byte_buffer_reader_readall(&r);
	grpc_byte_buffer_reader_destroy(&r);
	*len = GRPC_SLICE_LENGTH(s);
	*out = malloc(*len ? *len : 1);
	if (*out == NULL) {
		grpc_slice_unref(s);
		return -1;
	}
	memcpy(*out, GRPC_SLICE_START_PTR(s), *len);
	grpc_slice_unref(s);
	return 0;
}

/* Map a gRPC status to a library code. `write` marks calls whose effect may
 * have happened although the reply was lost. */
static int status_code(grpc_status_code st, const char *details, bool write)
{
	switch (st) {
	case GRPC_STATUS_OK:
		return LR_OK;
	case GRPC_STATUS_UNAVAILABLE:
		if (strstr(details, "ssl") != NULL || strstr(details, "SSL") != NULL ||
		    strstr(details, "handshake") != NULL ||
		    strstr(details, "certificate") != NULL)
			return LR_ETLS;
		return write ? LR_EAMBIGUOUS : LR_EUNAVAILABLE;
	case GRPC_STATUS_DEADLINE_EXCEEDED:
		return write ? LR_EAMBIGUOUS : LR_ETIMEDOUT;
	case GRPC_STATUS_PERMISSION_DENIED:
		return LR_EPERM;
	case GRPC_STATUS_UNAUTHENTICATED:
		return LR_EAUTH;
	case GRPC_STATUS_RESOURCE_EXHAUSTED:
		return LR_ETOOLARGE;
	case GRPC_STATUS_NOT_FOUND:
		if (strstr(details, "lease not found") != NULL)
			return LR_ELEASE;
		return LR_EETCD;
	case GRPC_STATUS_INVALID_ARGUMENT:
		if (strstr(details, "too large") != NULL)
			return LR_ETOOLARGE;
		if (strstr(details, "user name is empty") != NULL ||
		    strstr(details, "authentication failed") != NULL ||
		    strstr(details, "invalid auth token") != NULL)
			return LR_EAUTH;
		return LR_EETCD;
	case GRPC_STATUS_FAILED_PRECONDITION:
		if (strstr(details, "permission denied") != NULL)
			return LR_EPERM;
		return LR_EETCD;
	default:
		return LR_EETCD;
	}
}

/* etcd's words for "this token will not do, get another one": an expired or
 * unknown token, or one minted before the last change of users and roles.
 * Each means the request was refused before it did anything. */
static const char *const token_refusals[] = {
	"invalid auth token",
	"revision of auth store is old",
	"user name is empty",
	NULL,
};

static bool token_refused_text(const char *text, size_t len)
{
	for (size_t i = 0; token_refusals[i] != NULL; i++)
		if (memmem(text, len, token_refusals[i], strlen(token_refusals[i])) != NULL)
			return true;
	return false;
}

static bool token_expired(grpc_status_code st, const char *details)
{
	return (st == GRPC_STATUS_INVALID_ARGUMENT ||
	        st == GRPC_STATUS_UNAUTHENTICATED) &&
	       token_refused_text(details, strlen(details));
}

/* ---- why a connection failed ---------------------------------------------
 *
 * gRPC reports failed connections as "failed to connect to all addresses;
 * last error: UNKNOWN: ipv4:127.0.0.1:2379: <reason>". What gRPC 1.51 (on
 * OpenSSL 3) puts in <reason>, as seen against etcd 3.4:
 *   server certificate from another CA   "Ssl handshake failed: SSL_ERROR_SSL:
 *                                         ...certificate verify failed"
 *   name not in the server certificate   "Peer name 127.0.0.1 is not in peer
 *                                         certificate"
 *   no client certificate, or one the    "Endpoint read failed", "Connection
 *   server does not trust                 reset by peer" (TLS 1.3: the
 *                                         server's alert comes after the
 *                                         handshake, as a failed read)
 *   TLS to a plain port, or plain to TLS "Socket closed"
 *   nobody listening                     "Failed to connect to remote host:
 *                                         Connection refused"
 * The first two are certain; the next two only likely TLS failures, since a
 * server going away reads the same. */

enum tls_verdict { TLS_NO, TLS_LIKELY, TLS_SURE };

/* Split gRPC's text into the address that failed last (into addr, "" when
 * absent) and the reason (returned, a pointer into details). */
static const char *failure_reason(const char *details, char *addr, size_t size)
{
	addr[0] = '\0';
	const char *p = strstr(details, "ipv4:");
	if (p == NULL)
		p = strstr(details, "ipv6:");
	if (p == NULL)
		return details;
	p += 5;
	const char *end = strstr(p, ": ");
	if (end == NULL)
		return details;
	snprintf(addr, size, "%.*s", (int)(end - p), p);
	return end + 2;
}

/* Whether `reason` (one failed connection) is a TLS failure, and why in
 * words that say what to do about it. */
static enum tls_verdict tls_diagnose(const lr_etcd *c, const char *reason,
                                     char *why, size_t size)
{
	const char *p = strstr(reason, "Peer name ");
	if (p != NULL && strstr(p, " is not in peer certificate") != NULL) {
		p += strlen("Peer name ");
		snprintf(why, size,
		         "the server's certificate is not valid for the name %.*s "
		         "(%s)", (int)strcspn(p, " "), p,
		         c->tls_server_name != NULL
		             ? "check --tls-server-name"
		             : "give --tls-server-name with a name the certificate holds");
		return TLS_SURE;
	}
	if (strstr(reason, "certificate verify failed") != NULL) {
		snprintf(why, size,
		         "the server's certificate was not verified: it is not signed "
		         "by %s, or it has expired (certificate verify failed)",
		         c->has_cacert ? "the CA of --cacert"
		                       : "a CA this system trusts (give --cacert)");
		return TLS_SURE;
	}
	if (strstr(reason, "andshake") != NULL || strstr(reason, "SSL") != NULL ||
	    strstr(reason, "ssl") != NULL || strstr(reason, "certificate") != NULL) {
		snprintf(why, size, "%s", reason);
		return TLS_SURE;
	}
	if (c->tls && (strstr(reason, "Endpoint read failed") != NULL ||
	               strstr(reason, "Socket closed") != NULL ||
	               strstr(reason, "Connection reset") != NULL)) {
		snprintf(why, size,
		         "the server closed the connection in the TLS handshake: %s, "
		         "or it does not serve TLS on this port",
		         c->client_cert
		             ? "it did not accept the client certificate of --cert"
		             : "it requires a client certificate (give --cert and --key)");
		return TLS_LIKELY;
	}
	return TLS_NO;
}

/* The reason gRPC gives for the channel's failed connections, into buf
 * ("" when it gives none): a call that does not wait for a connection fails
 * at once with it while the channel is in TRANSIENT_FAILURE. */
static void connect_failure(lr_etcd *c, char *buf, size_t size)
{
	grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
	grpc_call *call = grpc_channel_create_call(
	    c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
	    grpc_slice_from_static_string("/etcdserverpb.Maintenance/Status"), NULL,
	    deadline_in_ms(500), NULL);
	grpc_metadata_array trail;
	grpc_metadata_array_init(&trail);
	grpc_status_code st = GRPC_STATUS_OK;
	grpc_slice details = grpc_empty_slice();
	grpc_op ops[3];
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA; /* fail fast: no wait for ready */
	ops[1].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
	ops[2].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	ops[2].data.recv_status_on_client.trailing_metadata = &trail;
	ops[2].data.recv_status_on_client.status = &st;
	ops[2].data.recv_status_on_client.status_details = &details;
	buf[0] = '\0';
	if (grpc_call_start_batch(call, ops, 3, call, NULL) == GRPC_CALL_OK) {
		grpc_completion_queue_pluck(cq, call, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
		if (st == GRPC_STATUS_UNAVAILABLE) {
			char *d = grpc_slice_to_c_string(details);
			snprintf(buf, size, "%s", d);
			gpr_free(d);
		}
	}
	grpc_slice_unref(details);
	grpc_metadata_array_destroy(&trail);
	grpc_call_unref(call);
	grpc_completion_queue_shutdown(cq);
	grpc_completion_queue_destroy(cq);
}

/* "etcd <addr>: TLS failed: <why>" for a TLS failure in gRPC's text
 * `details`; 0 (err untouched) when it is none, or only likely one and
 * `sure_only`. */
static int tls_error(lr_etcd *c, const char *details, const char *method,
                     bool sure_only, lr_err *err)
{
	char addr[128], why[320];
	const char *reason = failure_reason(details, addr, sizeof(addr));
	enum tls_verdict v = tls_diagnose(c, reason, why, sizeof(why));
	if (v == TLS_NO || (v == TLS_LIKELY && sure_only))
		return 0;
	return lr_err_set(err, LR_ETLS, "etcd %s%s%s%s: TLS failed: %s",
	                  addr[0] ? addr : c->endpoints, method ? " (" : "",
	                  method ? method_short(method) : "", method ? ")" : "", why);
}

/* "no endpoint reachable" with the last reason gRPC gave (if any), and a
 * hint when a plain connection was closed by what may be a TLS port. */
static int unreachable_error(lr_etcd *c, const char *method, const char *last,
                             int64_t waited_ms, int code, lr_err *err)
{
	char addr[128];
	const char *reason = last[0] ? failure_reason(last, addr, sizeof(addr)) : "";
	bool plain_closed = !c->tls && strstr(reason, "Socket closed") != NULL;
	return lr_err_set(err, code, "etcd %s%s%s%s: no endpoint reachable within %.1fs%s%s%s%s",
	                  c->endpoints, method ? " (" : "", method ? method_short(method) : "",
	                  method ? ")" : "", (double)waited_ms / 1000.0,
	                  reason[0] ? " (last error: " : "", reason, reason[0] ? ")" : "",
	                  plain_closed ? "; if the server expects TLS, give --cacert" : "");
}

/* What to do about a refusal by etcd's access control, for messages:
 * " (...)" or "". */
static void auth_hint(const lr_etcd *c, int code, const char *details,
                      char *buf, size_t size)
{
	buf[0] = '\0';
	if (code == LR_EAUTH && strstr(details, "user name is empty") != NULL)
		snprintf(buf, size, " (etcd has authentication enabled: give --user)");
	else if (code == LR_EPERM && c->user != NULL)
		snprintf(buf, size, " (etcd user %.60s has no role granting this on "
		         "these keys)", c->user);
}

/* ---- endpoints and channel ---------------------------------------------- */

/* Append "addr:port" for one endpoint to the target list. Literal addresses
 * are used as they are; names are resolved once, here. */
static int add_endpoint(char *target, size_t size, const char *ep, bool *v6,
                        bool first, lr_err *err)
{
	const char *s = ep;
	if (strncmp(s, "http://", 7) == 0)
		s += 7;
	else if (strncmp(s, "https://", 8) == 0)
		s += 8;
	const char *colon = strrchr(s, ':');
	if (colon == NULL || colon == s || colon[1] == '\0')
		return lr_err_set(err, LR_EINVAL,
		                  "endpoint \"%s\": expected host:port", ep);
	char *end;
	long port = strtol(colon + 1, &end, 10);
	if (*end != '\0' || port < 1 || port > 65535)
		return lr_err_set(err, LR_EINVAL,
		                  "endpoint \"%s\": port must be 1..65535", ep);
	char host[256];
	size_t hl = (size_t)(colon - s);
	if (hl >= sizeof(host))
		return lr_err_set(err, LR_EINVAL, "endpoint \"%s\": host too long", ep);
	memcpy(host, s, hl);
	host[hl] = '\0';
	if (host[0] == '[' && hl > 2 && host[hl - 1] == ']') {
		memmove(host, host + 1, hl - 2);
		host[hl - 2] = '\0';
	}

	char addr[INET6_ADDRSTRLEN];
	unsigned char tmp[sizeof(struct in6_addr)];
	bool is6 = false;
	if (inet_pton(AF_INET, host, tmp) == 1) {
		inet_ntop(AF_INET, tmp, addr, sizeof(addr));
	} else if (inet_pton(AF_INET6, host, tmp) == 1) {
		inet_ntop(AF_INET6, tmp, addr, sizeof(addr));
		is6 = true;
	} else {
		struct addrinfo hints = {0}, *res = NULL;
		hints.ai_family = AF_UNSPEC;
		hints.ai_socktype = SOCK_STREAM;
		int rc = getaddrinfo(host, NULL, &hints, &res);
		if (rc != 0 || res == NULL)
			return lr_err_set(err, LR_EUNAVAILABLE,
			                  "endpoint \"%s\": cannot resolve %s: %s", ep,
			                  host, gai_strerror(rc));
		struct addrinfo *pick = res;
		for (struct addrinfo *a = res; a != NULL; a = a->ai_next)
			if (a->ai_family == AF_INET) {
				pick = a;
				break;
			}
		if (pick->ai_family == AF_INET) {
			inet_ntop(AF_INET, &((struct sockaddr_in *)pick->ai_addr)->sin_addr,
			          addr, sizeof(addr));
		} else {
			inet_ntop(AF_INET6,
			          &((struct sockaddr_in6 *)pick->ai_addr)->sin6_addr,
			          addr, sizeof(addr));
			is6 = true;
		}
		freeaddrinfo(res);
	}
	if (!first && is6 != *v6)
		return lr_err_set(err, LR_EINVAL,
		                  "endpoints: cannot mix IPv4 and IPv6 (%s)", ep);
	*v6 = is6;
	size_t used = strlen(target);
	int n = snprintf(target + used, size - used, is6 ? "%s[%s]:%ld" : "%s%s:%ld",
	                 first ? "" : ",", addr, port);
	if (n < 0 || (size_t)n >= size - used)
		return lr_err_set(err, LR_EINVAL, "endpoints: list too long");
	return 0;
}

static int build_target(const char *endpoints, char **out, lr_err *err)
{
	if (endpoints == NULL || endpoints[0] == '\0')
		return lr_err_set(err, LR_EINVAL, "endpoints: the list is empty");
	size_t size = strlen(endpoints) * 4 + 64;
	char *list = calloc(1, size);
	char *copy = strdup(endpoints);
	int rc = 0;
	if (list == NULL || copy == NULL) {
		rc = lr_err_set(err, LR_ENOMEM, "endpoints: out of memory");
		goto out;
	}
	bool v6 = false, first = true;
	char *save = NULL;
	for (char *ep = strtok_r(copy, ",", &save); ep != NULL;
	     ep = strtok_r(NULL, ",", &save)) {
		while (*ep == ' ')
			ep++;
		if (*ep == '\0')
			continue;
		rc = add_endpoint(list, size, ep, &v6, first, err);
		if (rc != 0)
			goto out;
		first = false;
	}
	if (first) {
		rc = lr_err_set(err, LR_EINVAL, "endpoints: the list is empty");
		goto out;
	}
	size_t tl = strlen(list) + 8;
	*out = malloc(tl);
	if (*out == NULL) {
		rc = lr_err_set(err, LR_ENOMEM, "endpoints: out of memory");
		goto out;
	}
	snprintf(*out, tl, "%s:%s", v6 ? "ipv6" : "ipv4", list);
out:
	free(list);
	free(copy);
	return rc;
}

static char *read_file(const char *path, lr_err *err, const char *what)
{
	FILE *f = fopen(path, "rb");
	if (f == NULL) {
		lr_err_set(err, LR_EINVAL, "%s %s: %s", what, path, strerror(errno));
		return NULL;
	}
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);
	while (buf != NULL) {
		size_t n = fread(buf + len, 1, cap - len - 1, f);
		len += n;
		if (n == 0)
			break;
		if (len + 1 == cap) {
			char *nb = realloc(buf, cap * 2);
			if (nb == NULL) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
			cap *= 2;
		}
	}
	fclose(f);
	if (buf == NULL) {
		lr_err_set(err, LR_ENOMEM, "%s %s: out of memory", what, path);
		return NULL;
	}
	buf[len] = '\0';
	return buf;
}

static int make_credentials(const lr_etcd_opts *o, grpc_channel_credentials **out,
                            lr_err *err)
{
	bool tls = o->cacert != NULL || o->cert != NULL ||
	           strstr(o->endpoints, "https://") != NULL;
	if (!tls) {
		*out = grpc_insecure_credentials_create();
		return 0;
	}
	if ((o->cert == NULL) != (o->key == NULL))
		return lr_err_set(err, LR_EINVAL,
		                  "TLS: --cert and --key must be given together");
	char *ca = NULL, *cert = NULL, *key = NULL;
	int rc = 0;
	if (o->cacert != NULL && (ca = read_file(o->cacert, err, "--cacert")) == NULL)
		return err ? err->code : LR_EINVAL;
	if (o->cert != NULL) {
		cert = read_file(o->cert, err, "--cert");
		key = cert != NULL ? read_file(o->key, err, "--key") : NULL;
		if (key == NULL) {
			rc = err ? err->code : LR_EINVAL;
			goto out;
		}
	}
	grpc_ssl_pem_key_cert_pair pair = { key, cert };
	*out = grpc_ssl_credentials_create(ca, cert != NULL ? &pair : NULL, NULL, NULL);
	if (*out == NULL)
		rc = lr_err_set(err, LR_ETLS, "TLS: cannot use the given certificates");
out:
	free(ca);
	free(cert);
	if (key != NULL) {
		memset(key, 0, strlen(key));
		free(key);
	}
	return rc;
}

/* The host of the first endpoint ("https://[::1]:2379,..." -> "::1"). */
static bool first_host(const char *endpoints, char *buf, size_t size)
{
	const char *s = endpoints + strspn(endpoints, " ");
	if (strncmp(s, "http://", 7) == 0)
		s += 7;
	else if (strncmp(s, "https://", 8) == 0)
		s += 8;
	size_t len = strcspn(s, ",");
	const char *colon = memrchr(s, ':', len);
	if (colon != NULL)
		len = (size_t)(colon - s);
	if (len >= 2 && s[0] == '[' && s[len - 1] == ']') {
		s++;
		len -= 2;
	}
	if (len == 0 || len >= size)
		return false;
	memcpy(buf, s, len);
	buf[len] = '\0';
	return true;
}

static int create_channel(lr_etcd *c, const lr_etcd_opts *o, lr_err *err)
{
	grpc_channel_credentials *creds = NULL;
	int rc = make_credentials(o, &creds, err);
	if (rc != 0)
		return rc;
	grpc_arg args[8];
	size_t n = 0;
	args[n++] = (grpc_arg){ .type = GRPC_ARG_STRING,
	                        .key = GRPC_ARG_LB_POLICY_NAME,
	                        .value.string = "round_robin" };
	args[n++] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
	                        .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
	                        .value.integer = LR_MAX_MESSAGE };
	args[n++] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
	                        .key = GRPC_ARG_KEEPALIVE_TIME_MS,
	                        .value.integer = 10000 };
	args[n++] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
	                        .key = GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
	                        .value.integer = 5000 };
	args[n++] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
	                        .key = GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS,
	                        .value.integer = 0 };
	/* Reconnect quickly: a restarted member is back within a second. */
	args[n++] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
	                        .key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
	                        .value.integer = 100 };
	args[n++] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
	                        .key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS,
	                        .value.integer = 2000 };
	/* The name checked against the server certificate: gRPC would check
	 * the whole target ("127.0.0.1:2379,127.0.0.1:22379", after names were
	 * resolved), so give it the host of the first endpoint as written. One
	 * channel checks one name: every member's certificate must hold it. */
	char host[256];
	const char *name = o->tls_server_name;
	if (name == NULL && c->tls && first_host(o->endpoints, host, sizeof(host)))
		name = host;
	if (name != NULL)
		args[n++] = (grpc_arg){ .type = GRPC_ARG_STRING,
		                        .key = GRPC_SSL_TARGET_NAME_OVERRIDE_ARG,
		                        .value.string = (char *)name };
	grpc_channel_args cargs = { .num_args = n, .args = args };
	c->channel = grpc_channel_create(c->target, creds, &cargs);
	grpc_channel_credentials_release(creds);
	if (c->channel == NULL)
		return lr_err_set(err, LR_EINTERNAL, "etcd %s: cannot create channel",
		                  c->endpoints);
	return 0;
}

/* Wait until some endpoint is connected, at most the dial timeout. A TLS
 * failure ends the wait at once when gRPC's reason is certain (unknown CA,
 * name mismatch), and after LR_TLS_LIKELY_MS of failed connections that all
 * read like one (a refused client certificate reads as a dropped
 * connection). A channel in TRANSIENT_FAILURE stays there through its
 * reconnects, so its reason is polled. */
static int dial(lr_etcd *c, lr_err *err)
{
	grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
	int64_t end = lr_mono_ms() + c->dial_timeout_ms;
	int64_t likely_since = -1;
	char last[256] = "";
	int rc = 0;
	grpc_connectivity_state st = grpc_channel_check_connectivity_state(c->channel, 1);
	while (st != GRPC_CHANNEL_READY) {
		int64_t now = lr_mono_ms();
		int64_t wake = end;
		if (st == GRPC_CHANNEL_TRANSIENT_FAILURE) {
			lr_err probe = { 0 };
			connect_failure(c, last, sizeof(last));
			if (last[0] == '\0')
				; /* connecting again already: no verdict */
			else if (tls_error(c, last, NULL, false, &probe) == 0)
				likely_since = -1;
			else if (likely_since < 0)
				likely_since = now;
			if (probe.code != 0 &&
			    (tls_error(c, last, NULL, true, &probe) != 0 ||
			     now - likely_since >= LR_TLS_LIKELY_MS)) {
				if (err != NULL)
					*err = probe;
				rc = LR_ETLS;
				break;
			}
			if (now + LR_DIAL_POLL_MS < wake)
				wake = now + LR_DIAL_POLL_MS;
		}
		if (now >= end)
			break;
		grpc_channel_watch_connectivity_state(c->channel, st, mono_ms_to_timespec(wake),
		                                      cq, NULL);
		grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
		st = grpc_channel_check_connectivity_state(c->channel, 1);
	}
	grpc_completion_queue_shutdown(cq);
	while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type != GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(cq);
	if (rc != 0 || st == GRPC_CHANNEL_READY)
		return rc;
	/* The deadline passed: say what failed last, TLS (likely) first. */
	if (last[0] != '\0' && tls_error(c, last, NULL, false, err) != 0)
		return LR_ETLS;
	return unreachable_error(c, NULL, last, c->dial_timeout_ms, LR_EUNAVAILABLE, err);
}

/* ---- unary calls -------------------------------------------------------- */

struct unary_result {
	grpc_status_code status;
	char details[256];
	char peer[128];
	uint8_t *data;
	size_t len;
};

static void unary_once(lr_etcd *c, const char *method, grpc_slice req_bytes,
                       gpr_timespec deadline, const char *token,
                       struct unary_result *r)
{
	grpc_byte_buffer *req = buffer_of(req_bytes);
	grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
	grpc_slice mslice = grpc_slice_from_static_string(method);
	grpc_call *call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS,
	                                           cq, mslice, NULL, deadline, NULL);
	grpc_metadata md[1];
	size_t nmd = 0;
	if (token != NULL) {
		md[0].key = grpc_slice_from_static_string("token");
		md[0].value = grpc_slice_from_static_string(token);
		nmd = 1;
	}
	grpc_metadata_array md_in, md_trail;
	grpc_metadata_array_init(&md_in);
	grpc_metadata_array_init(&md_trail);
	grpc_byte_buffer *resp = NULL;
	grpc_slice details = grpc_empty_slice();
	const char *error_string = NULL;

	grpc_op ops[6];
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY |
	               GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
	ops[0].data.send_initial_metadata.count = nmd;
	ops[0].data.send_initial_metadata.metadata = md;
	ops[1].op = GRPC_OP_SEND_MESSAGE;
	ops[1].data.send_message.send_message = req;
	ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
	ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
	ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_in;
	ops[4].op = GRPC_OP_RECV_MESSAGE;
	ops[4].data.recv_message.recv_message = &resp;
	ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	ops[5].data.recv_status_on_client.trailing_metadata = &md_trail;
	ops[5].data.recv_status_on_client.status = &r->status;
	ops[5].data.recv_status_on_client.status_details = &details;
	ops[5].data.recv_status_on_client.error_string = &error_string;

	grpc_call_error ce = grpc_call_start_batch(call, ops, 6, call, NULL);
	if (ce != GRPC_CALL_OK) {
		r->status = GRPC_STATUS_INTERNAL;
		snprintf(r->details, sizeof(r->details), "grpc_call_start_batch: %d", ce);
	} else {
		grpc_completion_queue_pluck(cq, call, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
		char *d = grpc_slice_to_c_string(details);
		if (d[0] == '\0' && error_string != NULL)
			snprintf(r->details, sizeof(r->details), "%s", error_string);
		else
			snprintf(r->details, sizeof(r->details), "%s", d);
		gpr_free(d);
	}
	char *peer = grpc_call_get_peer(call);
	const char *p = peer;
	if (strncmp(p, "ipv4:", 5) == 0 || strncmp(p, "ipv6:", 5) == 0)
		p += 5;
	snprintf(r->peer, sizeof(r->peer), "%s", p);
	gpr_free(peer);

	r->data = NULL;
	r->len = 0;
	if (r->status == GRPC_STATUS_OK && resp != NULL &&
	    unpack_bytes(resp, &r->data, &r->len) != 0) {
		r->status = GRPC_STATUS_RESOURCE_EXHAUSTED;
		snprintf(r->details, sizeof(r->details), "out of memory reading reply");
	}
	if (resp != NULL)
		grpc_byte_buffer_destroy(resp);
	grpc_byte_buffer_destroy(req);
	if (error_string != NULL)
		gpr_free((void *)error_string);
	grpc_slice_unref(details);
	grpc_metadata_array_destroy(&md_in);
	grpc_metadata_array_destroy(&md_trail);
	grpc_call_unref(call);
	grpc_completion_queue_shutdown(cq);
	grpc_completion_queue_destroy(cq);
}

static int authenticate(lr_etcd *c, lr_err *err);

/* The current token (a copy the caller frees), NULL without auth. */
static char *token_copy(lr_etcd *c)
{
	pthread_mutex_lock(&c->mu);
	char *t = c->token != NULL ? strdup(c->token) : NULL;
	pthread_mutex_unlock(&c->mu);
	return t;
}

int lr_etcd_unary(lr_etcd *c, const char *method, const ProtobufCMessage *req,
                  const ProtobufCMessageDescriptor *resp_desc,
                  ProtobufCMessage **resp, int flags, lr_err *err)
{
	grpc_slice bb;
	pack_slice(req, &bb);
	int64_t start = lr_mono_ms();
	int64_t deadline_ms = start + c->call_timeout_ms;
	lr_backoff bo;
	lr_backoff_init(&bo, 25, 1000);
	bool reauthed = false;
	bool write = (flags & LR_CALL_RETRY) == 0;
	struct unary_result r;
	int rc;

	/* A retryable call gets several attempts within its deadline: a
	 * request forwarded to a leader that just died hangs on the server
	 * for etcd's own request timeout (7 s by default), longer than ours. */
	int64_t attempt_ms = write ? c->call_timeout_ms : c->call_timeout_ms / 3;
	if (attempt_ms < 1000)
		attempt_ms = c->call_timeout_ms < 1000 ? c->call_timeout_ms : 1000;
	for (;;) {
		char *token = token_copy(c);
		int64_t now = lr_mono_ms();
		int64_t attempt_end = now + attempt_ms < deadline_ms ? now + attempt_ms : deadline_ms;
		unary_once(c, method, bb, mono_ms_to_timespec(attempt_end), token, &r);
		free(token);
		if (r.status == GRPC_STATUS_OK)
			break;
		if (token_expired(r.status, r.details) && !reauthed && c->user != NULL) {
			/* The server refused the token before doing anything. */
			reauthed = true;
			rc = authenticate(c, err);
			if (rc != 0)
				goto fail_noresult;
			continue;
		}
		bool transient = r.status == GRPC_STATUS_UNAVAILABLE ||
		                 r.status == GRPC_STATUS_DEADLINE_EXCEEDED;
		if (transient && !write && status_code(r.status, r.details, false) != LR_ETLS) {
			pthread_mutex_lock(&c->mu);
			int64_t wait = lr_backoff_next(&bo, &c->rng);
			pthread_mutex_unlock(&c->mu);
			if (r.status == GRPC_STATUS_DEADLINE_EXCEEDED)
				wait = 0;
			if (lr_mono_ms() + wait < deadline_ms) {
				free(r.data);
				lr_sleep_ms(wait);
				continue;
			}
		}
		break;
	}

	if (r.status != GRPC_STATUS_OK) {
		rc = status_code(r.status, r.details, write);
		const char *where = r.peer[0] != '\0' && strcmp(r.peer, "unknown") != 0
		                        ? r.peer : c->endpoints;
		if (r.status == GRPC_STATUS_DEADLINE_EXCEEDED &&
		    grpc_channel_check_connectivity_state(c->channel, 0) != GRPC_CHANNEL_READY) {
			/* The call waited for a connection that never came. */
			char last[256];
			connect_failure(c, last, sizeof(last));
			rc = write ? LR_EAMBIGUOUS : LR_EUNAVAILABLE;
			if (write || tls_error(c, last, method, true, err) == 0)
				unreachable_error(c, method, last, c->call_timeout_ms, rc, err);
			else
				rc = LR_ETLS;
		} else if (rc != LR_ETLS || tls_error(c, r.details, method, false, err) == 0) {
			char hint[160];
			auth_hint(c, rc, r.details, hint, sizeof(hint));
			lr_err_set(err, rc, "etcd %s (%s): %s%s%s%s", where, method_short(method),
			           rc == LR_ETOOLARGE ? "request too large for etcd: " : "",
			           r.details[0] ? r.details : "call failed", hint,
			           rc == LR_EAMBIGUOUS ? " (the write may have applied)" : "");
		}
		goto out;
	}
	*resp = protobuf_c_message_unpack(resp_desc, NULL, r.len, r.data);
	if (*resp == NULL) {
		rc = lr_err_set(err, LR_EETCD, "etcd %s (%s): malformed reply",
		                r.peer, method_short(method));
		goto out;
	}
	rc = 0;
out:
	free(r.data);
fail_noresult:
	grpc_slice_unref(bb);
	return rc;
}

static int authenticate(lr_etcd *c, lr_err *err)
{
	Etcdserverpb__AuthenticateRequest req = ETCDSERVERPB__AUTHENTICATE_REQUEST__INIT;
	req.name = c->user;
	req.password = c->password != NULL ? c->password : "";
	grpc_slice bb;
	pack_slice(&req.base, &bb);
	struct unary_result r;
	unary_once(c, "/etcdserverpb.Auth/Authenticate", bb,
	           deadline_in_ms(c->call_timeout_ms), NULL, &r);
	grpc_slice_unref(bb);
	int rc = 0;
	if (r.status == GRPC_STATUS_FAILED_PRECONDITION &&
	    strstr(r.details, "authentication is not enabled") != NULL) {
		/* As etcd's own client does: without auth, no token is needed. */
		goto out;
	}
	if (r.status != GRPC_STATUS_OK) {
		rc = status_code(r.status, r.details, false);
		if (rc == LR_EETCD)
			rc = LR_EAUTH;
		if (rc == LR_ETLS && tls_error(c, r.details, "Auth/Authenticate", false, err) != 0)
			goto out;
		/* Never echo the password; name the user only. */
		lr_err_set(err, rc, "etcd %s (Auth/Authenticate): authentication as "
		           "etcd user %s failed: %s", r.peer[0] ? r.peer : c->endpoints,
		           c->user, r.details);
		goto out;
	}
	Etcdserverpb__AuthenticateResponse *resp =
	    etcdserverpb__authenticate_response__unpack(NULL, r.len, r.data);
	if (resp == NULL) {
		rc = lr_err_set(err, LR_EETCD, "etcd %s (Auth/Authenticate): malformed reply",
		                c->endpoints);
		goto out;
	}
	pthread_mutex_lock(&c->mu);
	free(c->token);
	c->token = strdup(resp->token);
	pthread_mutex_unlock(&c->mu);
	etcdserverpb__authenticate_response__free_unpacked(resp, NULL);
out:
	free(r.data);
	return rc;
}

/* ---- open / close ------------------------------------------------------- */

int lr_etcd_open(const lr_etcd_opts *o, lr_etcd **out, lr_err *err)
{
	*out = NULL;
	if (o == NULL || o->endpoints == NULL)
		return lr_err_set(err, LR_EINVAL, "endpoints: the list is empty");
	lr_etcd *c = calloc(1, sizeof(*c));
	if (c == NULL)
		return lr_err_set(err, LR_ENOMEM, "etcd: out of memory");
	pthread_mutex_init(&c->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&c->cond, &ca);
	pthread_condattr_destroy(&ca);
	lr_rng_init(&c->rng, NULL);
	c->t_wake.kind = TAG_WAKE;
	c->endpoints = strdup(o->endpoints);
	c->dial_timeout_ms = (int64_t)((o->dial_timeout_s > 0 ? o->dial_timeout_s : 5.0) * 1000);
	c->call_timeout_ms = (int64_t)((o->call_timeout_s > 0 ? o->call_timeout_s : 5.0) * 1000);
	c->tls = o->cacert != NULL || o->cert != NULL ||
	         strstr(o->endpoints, "https://") != NULL;
	c->has_cacert = o->cacert != NULL;
	c->client_cert = o->cert != NULL;
	if (o->tls_server_name != NULL)
		c->tls_server_name = strdup(o->tls_server_name);
	if (o->user != NULL) {
		c->user = strdup(o->user);
		c->password = strdup(o->password != NULL ? o->password : "");
	}
	grpc_init();
	int rc = build_target(o->endpoints, &c->target, err);
	if (rc == 0)
		rc = create_channel(c, o, err);
	if (rc == 0)
		rc = dial(c, err);
	if (rc == 0 && c->user != NULL)
		rc = authenticate(c, err);
	if (rc != 0) {
		lr_etcd_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

static void free_sendq(lr_stream *s)
{
	while (s->q_head != NULL) {
		struct sendq *q = s->q_head;
		s->q_head = q->next;
		grpc_byte_buffer_destroy(q->buf);
		free(q);
	}
	s->q_tail = NULL;
}

void lr_etcd_close(lr_etcd *c)
{
	if (c == NULL)
		return;
	if (c->thread_started) {
		pthread_mutex_lock(&c->mu);
		c->closing = true;
		for (lr_stream *s = c->streams; s != NULL; s = s->next)
			if (s->cur != NULL)
				grpc_call_cancel(s->cur->call, NULL);
		pthread_mutex_unlock(&c->mu);
		lr_etcd_wake(c);
		pthread_join(c->thread, NULL);
	}
	while (c->streams != NULL) {
		lr_stream *s = c->streams;
		c->streams = s->next;
		free_sendq(s);
		free(s);
	}
	if (c->cq != NULL)
		grpc_completion_queue_destroy(c->cq);
	if (c->channel != NULL)
		grpc_channel_destroy(c->channel);
	if (c->password != NULL) {
		memset(c->password, 0, strlen(c->password));
		free(c->password);
	}
	free(c->user);
	free(c->tls_server_name);
	free(c->token);
	free(c->target);
	free(c->endpoints);
	pthread_cond_destroy(&c->cond);
	pthread_mutex_destroy(&c->mu);
	free(c);
	grpc_shutdown();
}

const char *lr_etcd_endpoints(const lr_etcd *c)
{
	return c->endpoints;
}

/* ---- streams ------------------------------------------------------------ */

/* Start a batch on a stream call and count it; c->mu held. */
static bool start_ops(struct scall *sc, grpc_op *ops, size_t n, struct tag *t)
{
	if (grpc_call_start_batch(sc->call, ops, n, t, NULL) != GRPC_CALL_OK)
		return false;
	sc->outstanding++;
	return true;
}

/* Send the next queued message if none is in flight; c->mu held. */
static void pump_send(lr_stream *s)
{
	struct scall *sc = s->cur;
	if (sc == NULL || sc->ended || sc->send_busy || s->q_head == NULL)
		return;
	struct sendq *q = s->q_head;
	s->q_head = q->next;
	if (s->q_head == NULL)
		s->q_tail = NULL;
	sc->send_buf = q->buf;
	free(q);
	grpc_op op;
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_SEND_MESSAGE;
	op.data.send_message.send_message = sc->send_buf;
	if (start_ops(sc, &op, 1, &sc->t_send)) {
		sc->send_busy = true;
	} else {
		grpc_byte_buffer_destroy(sc->send_buf);
		sc->send_buf = NULL;
	}
}

static void arm_recv(struct scall *sc)
{
	grpc_op op;
	memset(&op, 0, sizeof(op));
	op.op = GRPC_OP_RECV_MESSAGE;
	op.data.recv_message.recv_message = &sc->recv_buf;
	start_ops(sc, &op, 1, &sc->t_recv);
}

static void free_scall(struct scall *sc)
{
	if (sc->send_buf != NULL)
		grpc_byte_buffer_destroy(sc->send_buf);
	if (sc->recv_buf != NULL)
		grpc_byte_buffer_destroy(sc->recv_buf);
	grpc_metadata_array_destroy(&sc->md_in);
	grpc_metadata_array_destroy(&sc->md_trail);
	grpc_slice_unref(sc->details);
	if (sc->error_string != NULL)
		gpr_free((void *)sc->error_string);
	grpc_call_unref(sc->call);
	free(sc->token);
	free(sc);
}

/* Open a new call for s; c->mu held. On failure s stays down. */
static void open_call(lr_etcd *c, lr_stream *s)
{
	struct scall *sc = calloc(1, sizeof(*sc));
	if (sc == NULL)
		return;
	sc->stream = s;
	sc->t_start = (struct tag){ TAG_START, sc };
	sc->t_send = (struct tag){ TAG_SEND, sc };
	sc->t_recv = (struct tag){ TAG_RECV, sc };
	sc->t_status = (struct tag){ TAG_STATUS, sc };
	grpc_metadata_array_init(&sc->md_in);
	grpc_metadata_array_init(&sc->md_trail);
	sc->details = grpc_empty_slice();
	sc->call = grpc_channel_create_call(c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, c->cq,
	                                    grpc_slice_from_static_string(s->method), NULL,
	                                    gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
	size_t nmd = 0;
	sc->md_out[nmd].key = grpc_slice_from_static_string("hasleader");
	sc->md_out[nmd].value = grpc_slice_from_static_string("true");
	nmd++;
	if (c->token != NULL) {
		sc->token = strdup(c->token);
		sc->md_out[nmd].key = grpc_slice_from_static_string("token");
		sc->md_out[nmd].value = grpc_slice_from_static_string(sc->token);
		nmd++;
	}
	grpc_op ops[2];
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
	ops[0].flags = GRPC_INITIAL_METADATA_WAIT_FOR_READY |
	               GRPC_INITIAL_METADATA_WAIT_FOR_READY_EXPLICITLY_SET;
	ops[0].data.send_initial_metadata.count = nmd;
	ops[0].data.send_initial_metadata.metadata = sc->md_out;
	ops[1].op = GRPC_OP_RECV_INITIAL_METADATA;
	ops[1].data.recv_initial_metadata.recv_initial_metadata = &sc->md_in;
	bool ok = start_ops(sc, ops, 2, &sc->t_start);
	grpc_op st;
	memset(&st, 0, sizeof(st));
	st.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	st.data.recv_status_on_client.trailing_metadata = &sc->md_trail;
	st.data.recv_status_on_client.status = &sc->status;
	st.data.recv_status_on_client.status_details = &sc->details;
	st.data.recv_status_on_client.error_string = &sc->error_string;
	ok = ok && start_ops(sc, &st, 1, &sc->t_status);
	if (!ok) {
		/* Nothing was accepted that could complete: give up this try. */
		grpc_call_cancel(sc->call, NULL);
		if (sc->outstanding == 0) {
			free_scall(sc);
			return;
		}
	}
	arm_recv(sc);
	s->cur = sc;
}

int lr_stream_send(lr_stream *s, const ProtobufCMessage *msg)
{
	lr_etcd *c = s->client;
	grpc_byte_buffer *bb = pack(msg);
	struct sendq *q = malloc(sizeof(*q));
	if (bb == NULL || q == NULL) {
		if (bb != NULL)
			grpc_byte_buffer_destroy(bb);
		free(q);
		return LR_ENOMEM;
	}
	q->buf = bb;
	q->next = NULL;
	pthread_mutex_lock(&c->mu);
	if (s->cur == NULL || s->cur->ended || s->removed) {
		pthread_mutex_unlock(&c->mu);
		grpc_byte_buffer_destroy(bb);
		free(q);
		return LR_EUNAVAILABLE;
	}
	if (s->q_tail != NULL)
		s->q_tail->next = q;
	else
		s->q_head = q;
	s->q_tail = q;
	pump_send(s);
	pthread_mutex_unlock(&c->mu);
	return 0;
}

void lr_stream_reset(lr_stream *s, const char *why)
{
	(void)why;
	lr_etcd *c = s->client;
	pthread_mutex_lock(&c->mu);
	if (s->cur != NULL && !s->cur->ended)
		grpc_call_cancel(s->cur->call, NULL);
	pthread_mutex_unlock(&c->mu);
}

void lr_etcd_wake(lr_etcd *c)
{
	pthread_mutex_lock(&c->mu);
	if (c->cq != NULL && c->wakes_pending == 0) {
		/* A connectivity watch whose deadline is now: the one portable way
		 * to post an event onto a completion queue from outside. */
		grpc_connectivity_state st = grpc_channel_check_connectivity_state(c->channel, 0);
		grpc_channel_watch_connectivity_state(c->channel, st, gpr_now(GPR_CLOCK_MONOTONIC),
		                                      c->cq, &c->t_wake);
		c->wakes_pending++;
	}
	pthread_mutex_unlock(&c->mu);
}

void lr_stream_kick(lr_stream *s)
{
	lr_etcd *c = s->client;
	pthread_mutex_lock(&c->mu);
	s->next_tick = 0;
	pthread_mutex_unlock(&c->mu);
	lr_etcd_wake(c);
}

bool lr_etcd_on_stream_thread(const lr_etcd *c)
{
	return c->thread_started && pthread_equal(pthread_self(), c->thread);
}

/* etcd 3.4 checks a Watch stream's token on every watch create, not when
 * the stream opens, and refuses a create with an expired token in a reply
 * (watch id -1, canceled, the reason as text) while the stream stays open.
 * That reply, once the stream's token expired: say so. */
static bool watch_token_refused(const lr_stream *s, const uint8_t *data, size_t len)
{
	if (strcmp(s->method, "/etcdserverpb.Watch/Watch") != 0 ||
	    !token_refused_text((const char *)data, len))
		return false; /* the cheap test first: events pass here */
	Etcdserverpb__WatchResponse *r = etcdserverpb__watch_response__unpack(NULL, len, data);
	bool refused = r != NULL && r->canceled && r->cancel_reason != NULL &&
	               token_refused_text(r->cancel_reason, strlen(r->cancel_reason));
	if (r != NULL)
		etcdserverpb__watch_response__free_unpacked(r, NULL);
	return refused;
}

/* A stream call carried a token that etcd no longer takes: get a new one,
 * unless another call already did, and end the call so that the stream
 * opens again with it (its owner then re-sends what the server must know).
 * c->mu held; released during Authenticate. The call cannot be freed
 * meanwhile: its status is still outstanding. */
static void renew_stream_token(lr_etcd *c, struct scall *sc)
{
	bool same = sc->token == NULL || c->token == NULL ||
	            strcmp(sc->token, c->token) == 0;
	int rc = 0;
	if (same) {
		pthread_mutex_unlock(&c->mu);
		rc = authenticate(c, NULL);
		pthread_mutex_lock(&c->mu);
	}
	if (rc == 0 && sc->stream != NULL && !sc->ended)
		grpc_call_cancel(sc->call, NULL);
}

/* Run an owner callback with the lock released; c->mu held on entry/exit. */
#define OWNER_CALL(c, s, expr)                                                \
	do {                                                                  \
		(c)->in_callback = (s);                                       \
		pthread_mutex_unlock(&(c)->mu);                               \
		expr;                                                         \
		pthread_mutex_lock(&(c)->mu);                                 \
		(c)->in_callback = NULL;                                      \
		pthread_cond_broadcast(&(c)->cond);                           \
	} while (0)

static void on_event(lr_etcd *c, struct tag *t, bool ok)
{
	if (t->kind == TAG_WAKE) {
		c->wakes_pending--;
		return;
	}
	struct scall *sc = t->call;
	sc->outstanding--;
	lr_stream *s = sc->stream;
	bool current = s != NULL && s->cur == sc && !s->removed;

	switch (t->kind) {
	case TAG_SEND:
		sc->send_busy = false;
		grpc_byte_buffer_destroy(sc->send_buf);
		sc->send_buf = NULL;
		if (ok && current)
			pump_send(s);
		break;
	case TAG_RECV:
		if (ok && sc->recv_buf != NULL) {
			uint8_t *data = NULL;
			size_t len = 0;
			int urc = unpack_bytes(sc->recv_buf, &data, &len);
			grpc_byte_buffer_destroy(sc->recv_buf);
			sc->recv_buf = NULL;
			if (current && !sc->ended)
				arm_recv(sc);
			bool refused = urc == 0 && current && c->user != NULL &&
			               watch_token_refused(s, data, len);
			if (urc == 0 && current)
				OWNER_CALL(c, s, s->ops->message(s->owner, data, len));
			free(data);
			/* sc->stream is NULL once the owner removed the stream. */
			if (refused && sc->stream != NULL)
				renew_stream_token(c, sc);
		}
		break;
	case TAG_STATUS: {
		sc->ended = true;
		if (current) {
			s->cur = NULL;
			free_sendq(s);
			char *d = grpc_slice_to_c_string(sc->details);
			char why[256];
			snprintf(why, sizeof(why), "%s", d[0] ? d
			         : sc->error_string ? sc->error_string : "stream ended");
			gpr_free(d);
			int code = status_code(sc->status, why, false);
			if (token_expired(sc->status, why) && c->user != NULL) {
				pthread_mutex_unlock(&c->mu);
				authenticate(c, NULL);
				pthread_mutex_lock(&c->mu);
			}
			s->reopen_at = lr_mono_ms() + lr_backoff_next(&s->backoff, &c->rng);
			OWNER_CALL(c, s, s->ops->closed(s->owner, code, why));
		}
		break;
	}
	case TAG_START:
		if (ok && current)
			lr_backoff_reset(&s->backoff);
		break;
	case TAG_WAKE:
		break;
	}
	if (sc->outstanding == 0 && sc->ended)
		free_scall(sc);
}

static void *stream_thread(void *arg)
{
	lr_etcd *c = arg;
	pthread_mutex_lock(&c->mu);
	for (;;) {
		int64_t now = lr_mono_ms();
		int64_t next = INT64_MAX;
		bool calls_left = c->wakes_pending > 0;
		for (lr_stream *s = c->streams; s != NULL; s = s->next) {
			if (s->removed)
				continue;
			if (s->cur == NULL && !c->closing && now >= s->reopen_at) {
				open_call(c, s);
				if (s->cur != NULL)
					OWNER_CALL(c, s, s->ops->opened(s->owner, s));
				else
					s->reopen_at = now + lr_backoff_next(&s->backoff, &c->rng);
			}
			if (s->cur == NULL && s->reopen_at < next)
				next = s->reopen_at;
			if (!c->closing && s->next_tick <= now) {
				int64_t when = INT64_MAX;
				OWNER_CALL(c, s, when = s->ops->tick(s->owner, lr_mono_ms()));
				s->next_tick = when;
			}
			if (s->next_tick < next)
				next = s->next_tick;
		}
		/* Closing: wait for the cancelled calls' statuses; whatever else
		 * is left drains after the queue's shutdown below. */
		if (c->closing) {
			bool open_calls = false;
			for (lr_stream *s = c->streams; s != NULL; s = s->next)
				if (s->cur != NULL)
					open_calls = true;
			if (!open_calls && !calls_left)
				break;
		}
		gpr_timespec dl = next == INT64_MAX ? gpr_inf_future(GPR_CLOCK_MONOTONIC)
		                                    : mono_ms_to_timespec(next);
		pthread_mutex_unlock(&c->mu);
		grpc_event ev = grpc_completion_queue_next(c->cq, dl, NULL);
		pthread_mutex_lock(&c->mu);
		if (ev.type == GRPC_OP_COMPLETE)
			on_event(c, ev.tag, ev.success != 0);
		else if (ev.type == GRPC_QUEUE_SHUTDOWN)
			break;
	}
	pthread_mutex_unlock(&c->mu);
	/* Drain whatever is left (cancelled calls of removed streams). */
	grpc_completion_queue_shutdown(c->cq);
	for (;;) {
		grpc_event ev = grpc_completion_queue_next(c->cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
		if (ev.type == GRPC_QUEUE_SHUTDOWN)
			break;
		pthread_mutex_lock(&c->mu);
		on_event(c, ev.tag, ev.success != 0);
		pthread_mutex_unlock(&c->mu);
	}
	return NULL;
}

int lr_stream_add(lr_etcd *c, const char *method, const lr_stream_ops *ops,
                  void *owner, lr_stream **out, lr_err *err)
{
	lr_stream *s = calloc(1, sizeof(*s));
	if (s == NULL)
		return lr_err_set(err, LR_ENOMEM, "etcd: out of memory");
	s->client = c;
	s->method = method;
	s->ops = ops;
	s->owner = owner;
	lr_backoff_init(&s->backoff, LR_STREAM_BACKOFF_MIN_MS, LR_STREAM_BACKOFF_MAX_MS);
	pthread_mutex_lock(&c->mu);
	if (c->closing) {
		pthread_mutex_unlock(&c->mu);
		free(s);
		return lr_err_set(err, LR_ECLOSED, "etcd: client is closing");
	}
	s->next = c->streams;
	c->streams = s;
	if (c->cq == NULL)
		c->cq = grpc_completion_queue_create_for_next(NULL);
	if (!c->thread_started) {
		if (pthread_create(&c->thread, NULL, stream_thread, c) != 0) {
			c->streams = s->next;
			pthread_mutex_unlock(&c->mu);
			free(s);
			return lr_err_set(err, LR_ESYS, "etcd: cannot start stream thread");
		}
		c->thread_started = true;
	}
	pthread_mutex_unlock(&c->mu);
	lr_etcd_wake(c);
	*out = s;
	return 0;
}

void lr_stream_remove(lr_stream *s)
{
	lr_etcd *c = s->client;
	pthread_mutex_lock(&c->mu);
	s->removed = true;
	if (s->cur != NULL) {
		grpc_call_cancel(s->cur->call, NULL);
		s->cur->stream = NULL; /* the call drains on its own */
		if (s->cur->outstanding == 0)
			free_scall(s->cur);
		s->cur = NULL;
	}
	while (c->in_callback == s && !lr_etcd_on_stream_thread(c))
		pthread_cond_wait(&c->cond, &c->mu);
	for (lr_stream **pp = &c->streams; *pp != NULL; pp = &(*pp)->next)
		if (*pp == s) {
			*pp = s->next;
			break;
		}
	free_sendq(s);
	pthread_mutex_unlock(&c->mu);
	free(s);
}
