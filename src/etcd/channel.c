/* channel.c - the gRPC channels to etcd, one per member: endpoints parsed
 * and resolved, TLS credentials, the dial within the dial timeout, and why
 * a connection failed, in words (TLS verdicts in particular).
 * Threads: opened and dialled by lr_etcd_open's caller; failures described
 * for failing unary calls on any thread. Takes no lock: what it reads is
 * set before the client is handed out. */
#include "etcd/channel.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/readall.h"
#include "etcd/pem.h"
#include "etcd/rpc.h"

#define LR_DIAL_POLL_MS 100   /* look at a failing channel's reason */
#define LR_DIAL_SLICE_MS 20   /* look at several members' states */
#define LR_DIAL_AFTER_PAUSE_MS 1000 /* the least a dial has after a pause */
#define LR_TLS_LIKELY_MS 1000 /* of failures that read like TLS ones */

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
	/* gRPC writes an address as a URI: "%5B::1%5D:2379" for [::1]:2379. */
	size_t n = 0;
	for (; p < end && n + 1 < size; p++) {
		unsigned hex;
		if (p[0] == '%' && end - p >= 3 && sscanf(p + 1, "%2x", &hex) == 1) {
			addr[n++] = (char)hex;
			p += 2;
		} else {
			addr[n++] = *p;
		}
	}
	addr[n] = '\0';
	return end + 2;
}

/* Whether `reason` (one failed connection) is a TLS failure, and why in
 * words that say what to do about it. */
static enum tls_verdict tls_diagnose(const lr_channel *c, const char *reason,
                                     char *why, size_t size)
{
	const char *p = strstr(reason, "Peer name ");
	if (p != NULL && strstr(p, " is not in peer certificate") != NULL) {
		p += strlen("Peer name ");
		snprintf(why, size,
		         "the server's certificate is not valid for the name %.*s "
		         "(%s)", (int)strcspn(p, " "), p,
		         c->tls_server_name != NULL
		             ? "check lr_client_opts.tls_server_name"
		             : "give lr_client_opts.tls_server_name with a name the certificate holds");
		return TLS_SURE;
	}
	if (strstr(reason, "certificate verify failed") != NULL) {
		snprintf(why, size,
		         "the server's certificate was not verified: it is not signed "
		         "by %s, or it has expired (certificate verify failed)",
		         c->has_cacert ? "the CA of lr_client_opts.cacert"
		                       : "a CA this system trusts (give lr_client_opts.cacert)");
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
		             ? "it did not accept the client certificate of lr_client_opts.cert"
		             : "it requires a client certificate (give lr_client_opts.cert and lr_client_opts.key)");
		return TLS_LIKELY;
	}
	return TLS_NO;
}

/* A call to one member that does not wait for a connection: while the
 * member's channel is in TRANSIENT_FAILURE it fails at once, with gRPC's
 * reason for the failed connections. */
struct failure_call {
	grpc_call *call;
	grpc_metadata_array trail;
	grpc_status_code status;
	grpc_slice details;
};

static bool failure_call_start(struct failure_call *f, grpc_channel *ch,
                               grpc_completion_queue *cq)
{
	f->call = grpc_channel_create_call(
	    ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
	    grpc_slice_from_static_string("/etcdserverpb.Maintenance/Status"), NULL,
	    lr__deadline_in_ms(500), NULL);
	grpc_metadata_array_init(&f->trail);
	f->status = GRPC_STATUS_OK;
	f->details = grpc_empty_slice();
	grpc_op ops[3];
	memset(ops, 0, sizeof(ops));
	ops[0].op = GRPC_OP_SEND_INITIAL_METADATA; /* fail fast: no wait for ready */
	ops[1].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
	ops[2].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
	ops[2].data.recv_status_on_client.trailing_metadata = &f->trail;
	ops[2].data.recv_status_on_client.status = &f->status;
	ops[2].data.recv_status_on_client.status_details = &f->details;
	if (grpc_call_start_batch(f->call, ops, 3, f, NULL) == GRPC_CALL_OK)
		return true;
	f->status = GRPC_STATUS_OK; /* no reason */
	return false;
}

static void failure_call_free(struct failure_call *f)
{
	grpc_slice_unref(f->details);
	grpc_metadata_array_destroy(&f->trail);
	grpc_call_unref(f->call);
}

/* The reason gRPC gives for the failed connections of the members not
 * connected, into buf ("" when none gives one): a TLS failure first
 * (certain, then likely), whichever member it is, so that a member merely
 * down does not hide what is wrong with another. The members are asked at
 * once, half a second at most in all. */
void lr__connect_failure(lr_channel *c, char *buf, size_t size)
{
	buf[0] = '\0';
	struct failure_call f[LR_MAX_MEMBERS];
	bool asked[LR_MAX_MEMBERS];
	int started = 0;
	grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
	for (int i = 0; i < c->n_members; i++) {
		asked[i] = grpc_channel_check_connectivity_state(c->members[i].channel, 0) !=
		           GRPC_CHANNEL_READY;
		if (asked[i] && failure_call_start(&f[i], c->members[i].channel, cq))
			started++;
	}
	for (int k = 0; k < started; k++)
		grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
	int best = -1;
	enum tls_verdict best_v = TLS_NO;
	for (int i = 0; i < c->n_members; i++) {
		if (!asked[i])
			continue;
		if (f[i].status == GRPC_STATUS_UNAVAILABLE && !GRPC_SLICE_IS_EMPTY(f[i].details)) {
			char *d = grpc_slice_to_c_string(f[i].details);
			char addr[128], why[320];
			enum tls_verdict v = tls_diagnose(c, failure_reason(d, addr, sizeof(addr)),
			                                  why, sizeof(why));
			if (best < 0 || v > best_v) {
				best = i;
				best_v = v;
				snprintf(buf, size, "%s", d);
			}
			gpr_free(d);
		}
		failure_call_free(&f[i]);
	}
	grpc_completion_queue_shutdown(cq);
	while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
	       GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(cq);
}

/* "etcd <addr>: TLS failed: <why>" for a TLS failure in gRPC's text
 * `details`; 0 (err untouched) when it is none, or only likely one and
 * `sure_only`. */
int lr__tls_error(const lr_channel *c, const char *details, const char *method,
                  bool sure_only, lr_err *err)
{
	char addr[128], why[320];
	const char *reason = failure_reason(details, addr, sizeof(addr));
	enum tls_verdict v = tls_diagnose(c, reason, why, sizeof(why));
	if (v == TLS_NO || (v == TLS_LIKELY && sure_only))
		return 0;
	return lr_err_set(err, LR_ETLS, "etcd %s%s%s%s: TLS failed: %s",
	                  addr[0] ? addr : c->endpoints, method ? " (" : "",
	                  method ? lr__method_short(method) : "", method ? ")" : "", why);
}

/* "no endpoint reachable" with the last reason gRPC gave (if any), and a
 * hint when a plain connection was closed by what may be a TLS port. */
int lr__unreachable_error(const lr_channel *c, const char *method, const char *last,
                          int64_t waited_ms, int code, lr_err *err)
{
	char addr[128];
	const char *reason = last[0] ? failure_reason(last, addr, sizeof(addr)) : "";
	bool plain_closed = !c->tls && strstr(reason, "Socket closed") != NULL;
	return lr_err_set(err, code, "etcd %s%s%s%s: no endpoint reachable within %.1fs%s%s%s%s",
	                  c->endpoints, method ? " (" : "", method ? lr__method_short(method) : "",
	                  method ? ")" : "", (double)waited_ms / 1000.0,
	                  reason[0] ? " (last error: " : "", reason, reason[0] ? ")" : "",
	                  plain_closed ? "; if the server expects TLS, give lr_client_opts.cacert" : "");
}

/* ---- endpoints and channel ---------------------------------------------- */

/* The endpoint without its "http://" or "https://" (both are allowed, as
 * etcdctl allows them; TLS follows from "https://" or the TLS options). */
static const char *strip_scheme(const char *ep)
{
	if (strncmp(ep, "http://", 7) == 0)
		return ep + 7;
	if (strncmp(ep, "https://", 8) == 0)
		return ep + 8;
	return ep;
}

/* Whether the options ask for TLS (a server name to check is only
 * meaningful with it). */
static bool wants_tls(const lr_etcd_opts *o)
{
	return o->cacert != NULL || o->cert != NULL || o->tls_server_name != NULL ||
	       strstr(o->endpoints, "https://") != NULL;
}

/* One endpoint's address as gRPC takes it ("a:p", "[a]:p" for IPv6) into
 * m->addr. Literal addresses are used as they are; names are resolved
 * once, here. */
static int parse_endpoint(const char *ep, lr_member *m, lr_err *err)
{
	const char *s = strip_scheme(ep);
	const char *colon = strrchr(s, ':');
	if (colon == NULL || colon == s || colon[1] == '\0')
		return lr_err_set(err, LR_EINVAL,
		                  "endpoint \"%.64s\": expected host:port", ep);
	char *end;
	long port = strtol(colon + 1, &end, 10);
	if (*end != '\0' || port < 1 || port > 65535)
		return lr_err_set(err, LR_EINVAL,
		                  "endpoint \"%.64s\": port must be 1..65535", ep);
	char host[256];
	size_t hl = (size_t)(colon - s);
	if (hl >= sizeof(host))
		return lr_err_set(err, LR_EINVAL, "endpoint \"%.64s\": host too long", ep);
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
			                  "endpoint \"%.64s\": cannot resolve %.64s: %s", ep,
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
	snprintf(m->addr, sizeof(m->addr), is6 ? "[%s]:%ld" : "%s:%ld", addr, port);
	snprintf(m->host, sizeof(m->host), "%s", host);
	return 0;
}

/* Whether m is a member already listed: the same address, and the same
 * name checked against its certificate (with TLS). An endpoint written
 * twice would otherwise be two members: frozen, it would cost an
 * unanswered call for each, and count twice as left out. */
static bool same_member_twice(const lr_channel *c, const lr_member *m)
{
	for (int i = 0; i < c->n_members; i++)
		if (strcmp(c->members[i].addr, m->addr) == 0 &&
		    (!c->tls || c->tls_server_name != NULL ||
		     strcmp(c->members[i].host, m->host) == 0))
			return true;
	return false;
}

/* The endpoint list parsed into c->members, each address once. */
static int parse_members(lr_channel *c, const char *endpoints, lr_err *err)
{
	if (endpoints == NULL || endpoints[0] == '\0')
		return lr_err_set(err, LR_EINVAL, "endpoints: the list is empty");
	char *copy = strdup(endpoints);
	c->members = calloc(LR_MAX_MEMBERS, sizeof(*c->members));
	if (copy == NULL || c->members == NULL) {
		free(copy);
		return lr_err_set(err, LR_ENOMEM, "endpoints: out of memory");
	}
	int rc = 0;
	char *save = NULL;
	for (char *ep = strtok_r(copy, ",", &save); ep != NULL && rc == 0;
	     ep = strtok_r(NULL, ",", &save)) {
		while (*ep == ' ')
			ep++;
		if (*ep == '\0')
			continue;
		lr_member m = { 0 };
		rc = parse_endpoint(ep, &m, err);
		if (rc == 0 && same_member_twice(c, &m))
			continue;
		if (rc == 0 && c->n_members == LR_MAX_MEMBERS)
			rc = lr_err_set(err, LR_EINVAL, "endpoints: more than %d", LR_MAX_MEMBERS);
		if (rc == 0)
			c->members[c->n_members++] = m;
	}
	free(copy);
	if (rc == 0 && c->n_members == 0)
		rc = lr_err_set(err, LR_EINVAL, "endpoints: the list is empty");
	return rc;
}

static char *read_file(const char *path, lr_err *err, const char *what)
{
	FILE *f = fopen(path, "rb");
	char *text = NULL;
	size_t len;
	/* Certificates and keys; a CA bundle is a few hundred KiB. */
	int rc = f != NULL ? lr_read_all(f, 16u << 20, &text, &len) : -1;
	int e = errno;
	if (f != NULL)
		fclose(f);
	if (rc != 0)
		lr_err_set(err, e == ENOMEM ? LR_ENOMEM : LR_EINVAL, "%s %s: %s", what, path,
		           e == ENOMEM ? "out of memory" : strerror(e));
	return text;
}

static int make_credentials(const lr_etcd_opts *o, grpc_channel_credentials **out,
                            lr_err *err)
{
	if (!wants_tls(o)) {
		*out = grpc_insecure_credentials_create();
		return 0;
	}
	if ((o->cert == NULL) != (o->key == NULL))
		return lr_err_set(err, LR_EINVAL,
		                  "TLS: lr_client_opts.cert and lr_client_opts.key must be given together");
	char *ca = NULL, *cert = NULL, *key = NULL;
	int rc = 0;
	if (o->cacert != NULL && (ca = read_file(o->cacert, err, "lr_client_opts.cacert")) == NULL)
		return err ? err->code : LR_EINVAL;
	if (ca != NULL && (rc = lr__pem_check_certs(ca, "lr_client_opts.cacert", o->cacert,
	                                            err)) != 0)
		goto out;
	if (o->cert != NULL) {
		cert = read_file(o->cert, err, "lr_client_opts.cert");
		key = cert != NULL ? read_file(o->key, err, "lr_client_opts.key") : NULL;
		if (key == NULL) {
			rc = err ? err->code : LR_EINVAL;
			goto out;
		}
		if ((rc = lr__pem_check_certs(cert, "lr_client_opts.cert", o->cert, err)) != 0 ||
		    (rc = lr__pem_check_pair(cert, key, o->key, err)) != 0)
			goto out;
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

/* A channel to each member, with TLS credentials when asked for. */
static int create_channels(lr_channel *c, const lr_etcd_opts *o, lr_err *err)
{
	grpc_channel_credentials *creds = NULL;
	int rc = make_credentials(o, &creds, err);
	if (rc != 0)
		return rc;
	grpc_arg args[10];
	size_t n = 0;
	/* round_robin over the member's one address: it reconnects on its
	 * own (pick_first would wait for a call to ask). */
	args[n++] = (grpc_arg){ .type = GRPC_ARG_STRING,
	                        .key = GRPC_ARG_LB_POLICY_NAME,
	                        .value.string = "round_robin" };
	args[n++] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
	                        .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
	                        .value.integer = LR_MAX_MESSAGE };
	/* A member that stops answering (frozen, its host gone) keeps its
	 * connection READY until a ping goes unanswered: at most 6 + 3 s
	 * (route.c leaves it out sooner). etcd refuses pings more often than
	 * every 5 s (GOAWAY too_many_pings). */
	args[n++] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
	                        .key = GRPC_ARG_KEEPALIVE_TIME_MS,
	                        .value.integer = 6000 };
	args[n++] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
	                        .key = GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
	                        .value.integer = 3000 };
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
	/* Calls are retried by lr_etcd_unary where that is safe; gRPC's own
	 * retries would only add per-call bookkeeping. */
	args[n++] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
	                        .key = GRPC_ARG_ENABLE_RETRIES,
	                        .value.integer = 0 };
	grpc_channel_args cargs = { .num_args = n, .args = args };
	for (int i = 0; i < c->n_members && rc == 0; i++) {
		lr_member *m = &c->members[i];
		/* The name checked against the member's certificate: gRPC
		 * would check the target (its address, the name resolved), so
		 * give it the host as written, or tls_server_name for all. */
		const char *name = o->tls_server_name != NULL ? o->tls_server_name
		                   : c->tls ? m->host : NULL;
		args[n] = (grpc_arg){ .type = GRPC_ARG_STRING,
		                      .key = GRPC_SSL_TARGET_NAME_OVERRIDE_ARG,
		                      .value.string = (char *)name };
		cargs.num_args = name != NULL ? n + 1 : n;
		char target[sizeof(m->addr) + 8];
		snprintf(target, sizeof(target), "%s:%s", m->addr[0] == '[' ? "ipv6" : "ipv4",
		         m->addr);
		m->channel = grpc_channel_create(target, creds, &cargs);
		if (m->channel == NULL)
			rc = lr_err_set(err, LR_EINTERNAL, "etcd %s: cannot create channel",
			                m->addr);
	}
	grpc_channel_credentials_release(creds);
	return rc;
}

int lr__channel_open(lr_channel *c, const lr_etcd_opts *o, lr_err *err)
{
	memset(c, 0, sizeof(*c));
	c->endpoints = strdup(o->endpoints);
	c->dial_timeout_ms = (int64_t)((o->dial_timeout_s > 0 ? o->dial_timeout_s : 5.0) * 1000);
	c->tls = wants_tls(o);
	c->has_cacert = o->cacert != NULL;
	c->client_cert = o->cert != NULL;
	if (o->tls_server_name != NULL)
		c->tls_server_name = strdup(o->tls_server_name);
	if (c->endpoints == NULL || (o->tls_server_name != NULL && c->tls_server_name == NULL))
		return lr_err_set(err, LR_ENOMEM, "etcd: out of memory");
	int rc = parse_members(c, o->endpoints, err);
	if (rc == 0)
		rc = create_channels(c, o, err);
	return rc;
}

void lr__channel_close(lr_channel *c)
{
	for (int i = 0; i < c->n_members; i++)
		if (c->members[i].channel != NULL)
			grpc_channel_destroy(c->members[i].channel);
	free(c->members);
	free(c->tls_server_name);
	free(c->endpoints);
	memset(c, 0, sizeof(*c));
}

/* The best state among the members: READY when one is, TRANSIENT_FAILURE
 * only when all are (each asked to connect when idle). */
static grpc_connectivity_state best_state(lr_channel *c, grpc_connectivity_state *each)
{
	grpc_connectivity_state best = GRPC_CHANNEL_SHUTDOWN;
	for (int i = 0; i < c->n_members; i++) {
		each[i] = grpc_channel_check_connectivity_state(c->members[i].channel, 1);
		if (each[i] == GRPC_CHANNEL_READY)
			best = GRPC_CHANNEL_READY;
		else if (each[i] != GRPC_CHANNEL_TRANSIENT_FAILURE && best != GRPC_CHANNEL_READY)
			best = GRPC_CHANNEL_CONNECTING;
		else if (best == GRPC_CHANNEL_SHUTDOWN)
			best = GRPC_CHANNEL_TRANSIENT_FAILURE;
	}
	return best;
}

/* Wait until some member is connected, at most wait_ms. A TLS
 * failure ends the wait at once when gRPC's reason is certain (unknown CA,
 * name mismatch), and after LR_TLS_LIKELY_MS of failed connections that all
 * read like one (a refused client certificate reads as a dropped
 * connection). A channel in TRANSIENT_FAILURE stays there through its
 * reconnects, so its reason is polled (when every member's is). Time this process did not run (a
 * SIGSTOP, a starved machine: a wait that ended long after its time) is
 * not counted: etcd was not given it. */
int lr__channel_dial(lr_channel *c, int64_t wait_ms, lr_err *err)
{
	grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
	grpc_connectivity_state each[LR_MAX_MEMBERS];
	int64_t end = lr_mono_ms() + wait_ms;
	int64_t likely_since = -1;
	char last[256] = "";
	int rc = 0;
	grpc_connectivity_state st = best_state(c, each);
	while (st != GRPC_CHANNEL_READY) {
		int64_t now = lr_mono_ms();
		int64_t wake = end;
		if (st == GRPC_CHANNEL_TRANSIENT_FAILURE) {
			lr_err probe = { 0 };
			lr__connect_failure(c, last, sizeof(last));
			if (last[0] == '\0')
				; /* connecting again already: no verdict */
			else if (lr__tls_error(c, last, NULL, false, &probe) == 0)
				likely_since = -1;
			else if (likely_since < 0)
				likely_since = now;
			if (probe.code != 0 &&
			    (lr__tls_error(c, last, NULL, true, &probe) != 0 ||
			     now - likely_since >= LR_TLS_LIKELY_MS)) {
				if (err != NULL)
					*err = probe;
				rc = LR_ETLS;
				break;
			}
		}
		if (st == GRPC_CHANNEL_TRANSIENT_FAILURE && now + LR_DIAL_POLL_MS < wake)
			wake = now + LR_DIAL_POLL_MS;
		/* Several members: each watched until a short slice's end, and
		 * every watch back before the states are looked at again. */
		if (c->n_members > 1 && now + LR_DIAL_SLICE_MS < wake)
			wake = now + LR_DIAL_SLICE_MS;
		if (now >= end)
			break;
		for (int i = 0; i < c->n_members; i++)
			grpc_channel_watch_connectivity_state(c->members[i].channel, each[i],
			                                      lr__mono_ms_to_timespec(wake), cq, NULL);
		for (int i = 0; i < c->n_members; i++)
			grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
		/* Woken this late, the process did not run for at least as
		 * long (when it stopped is unknown): that time back, and a
		 * second at least from now. */
		int64_t woke = lr_mono_ms();
		if (woke - wake > LR_DIAL_POLL_MS) {
			end += woke - wake;
			if (end < woke + LR_DIAL_AFTER_PAUSE_MS)
				end = woke + LR_DIAL_AFTER_PAUSE_MS;
		}
		st = best_state(c, each);
	}
	grpc_completion_queue_shutdown(cq);
	while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type != GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(cq);
	if (rc != 0 || st == GRPC_CHANNEL_READY)
		return rc;
	/* The deadline passed: say what failed last, TLS (likely) first. With
	 * a member still connecting (one that never answers), the others'
	 * reasons were not asked for yet. */
	if (last[0] == '\0' && st != GRPC_CHANNEL_TRANSIENT_FAILURE)
		lr__connect_failure(c, last, sizeof(last));
	if (last[0] != '\0' && lr__tls_error(c, last, NULL, false, err) != 0)
		return LR_ETLS;
	return lr__unreachable_error(c, NULL, last, wait_ms, LR_EUNAVAILABLE, err);
}
