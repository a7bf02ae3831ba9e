/* channel.c - the gRPC channel to etcd: endpoints parsed and resolved,
 * TLS credentials, the dial within the dial timeout, and why a connection
 * failed, in words (TLS verdicts in particular).
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
	snprintf(addr, size, "%.*s", (int)(end - p), p);
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

/* The reason gRPC gives for the channel's failed connections, into buf
 * ("" when it gives none): a call that does not wait for a connection fails
 * at once with it while the channel is in TRANSIENT_FAILURE. */
void lr__connect_failure(lr_channel *c, char *buf, size_t size)
{
	grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
	grpc_call *call = grpc_channel_create_call(
	    c->channel, NULL, GRPC_PROPAGATE_DEFAULTS, cq,
	    grpc_slice_from_static_string("/etcdserverpb.Maintenance/Status"), NULL,
	    lr__deadline_in_ms(500), NULL);
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

/* Append "addr:port" for one endpoint to the target list. Literal addresses
 * are used as they are; names are resolved once, here. */
static int add_endpoint(char *target, size_t size, const char *ep, bool *v6,
                        bool first, lr_err *err)
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

/* The endpoint list as gRPC's target ("ipv4:a:p,b:p"), into *out. */
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

/* The host of the first endpoint ("https://[::1]:2379,..." -> "::1"). */
static bool first_host(const char *endpoints, char *buf, size_t size)
{
	const char *s = strip_scheme(endpoints + strspn(endpoints, " "));
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

/* The channel to c->target, with TLS credentials when asked for. */
static int create_channel(lr_channel *c, const lr_etcd_opts *o, lr_err *err)
{
	grpc_channel_credentials *creds = NULL;
	int rc = make_credentials(o, &creds, err);
	if (rc != 0)
		return rc;
	grpc_arg args[10];
	size_t n = 0;
	args[n++] = (grpc_arg){ .type = GRPC_ARG_STRING,
	                        .key = GRPC_ARG_LB_POLICY_NAME,
	                        .value.string = "round_robin" };
	args[n++] = (grpc_arg){ .type = GRPC_ARG_INTEGER,
	                        .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
	                        .value.integer = LR_MAX_MESSAGE };
	/* A member that stops answering (frozen, its host gone) keeps its
	 * connection READY, and round robin keeps sending it calls, until a
	 * ping goes unanswered: at most 6 + 3 s. etcd refuses pings more often
	 * than every 5 s (GOAWAY too_many_pings). */
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
	int rc = build_target(o->endpoints, &c->target, err);
	if (rc == 0)
		rc = create_channel(c, o, err);
	return rc;
}

void lr__channel_close(lr_channel *c)
{
	if (c->channel != NULL)
		grpc_channel_destroy(c->channel);
	free(c->tls_server_name);
	free(c->target);
	free(c->endpoints);
	memset(c, 0, sizeof(*c));
}

/* Wait until some endpoint is connected, at most wait_ms. A TLS
 * failure ends the wait at once when gRPC's reason is certain (unknown CA,
 * name mismatch), and after LR_TLS_LIKELY_MS of failed connections that all
 * read like one (a refused client certificate reads as a dropped
 * connection). A channel in TRANSIENT_FAILURE stays there through its
 * reconnects, so its reason is polled. Time this process did not run (a
 * SIGSTOP, a starved machine: a wait that ended long after its time) is
 * not counted: etcd was not given it. */
int lr__channel_dial(lr_channel *c, int64_t wait_ms, lr_err *err)
{
	grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
	int64_t end = lr_mono_ms() + wait_ms;
	int64_t likely_since = -1;
	char last[256] = "";
	int rc = 0;
	grpc_connectivity_state st = grpc_channel_check_connectivity_state(c->channel, 1);
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
			if (now + LR_DIAL_POLL_MS < wake)
				wake = now + LR_DIAL_POLL_MS;
		}
		if (now >= end)
			break;
		grpc_channel_watch_connectivity_state(c->channel, st, lr__mono_ms_to_timespec(wake),
		                                      cq, NULL);
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
		st = grpc_channel_check_connectivity_state(c->channel, 1);
	}
	grpc_completion_queue_shutdown(cq);
	while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type != GRPC_QUEUE_SHUTDOWN)
		;
	grpc_completion_queue_destroy(cq);
	if (rc != 0 || st == GRPC_CHANNEL_READY)
		return rc;
	/* The deadline passed: say what failed last, TLS (likely) first. */
	if (last[0] != '\0' && lr__tls_error(c, last, NULL, false, err) != 0)
		return LR_ETLS;
	return lr__unreachable_error(c, NULL, last, wait_ms, LR_EUNAVAILABLE, err);
}
