/* transport.c - the etcd client handle: open (channel, stream thread, dial,
 * authenticate, in that order) and close, and what it hands out: its
 * endpoints, its stream thread, its call counts.
 * Threads: open and close on the owner's thread; the getters on any. Locks
 * nothing itself (c->mu is initialised here, used by unary.c and auth.c). */
#include "etcd/transport_int.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "base/error.h"
#include "etcd/auth.h"
#include "etcd/route.h"

/* gRPC 1.51's grpc_shutdown can return while its event engine threads
 * still work: after a failed TLS handshake, one may be starting the next
 * handshake. OpenSSL frees its locks at exit (an atexit handler), and such
 * a thread then crashes the process as it exits (SIGSEGV in
 * CRYPTO_THREAD_write_lock from tsi_ssl_client_handshaker_factory_create_
 * handshaker). So OpenSSL is told, before gRPC first starts it, to leave
 * its memory to the process's end. Without effect when the application
 * started OpenSSL itself before. */
static pthread_once_t ssl_once = PTHREAD_ONCE_INIT;

static void ssl_no_atexit(void)
{
	OPENSSL_init_crypto(OPENSSL_INIT_NO_ATEXIT, NULL);
}

int lr_etcd_open(const lr_etcd_opts *o, lr_etcd **out, lr_err *err)
{
	*out = NULL;
	if (o == NULL || o->endpoints == NULL)
		return lr_err_set(err, LR_EINVAL, "endpoints: the list is empty");
	lr_etcd *c = calloc(1, sizeof(*c));
	if (c == NULL)
		return lr_err_set(err, LR_ENOMEM, "etcd: out of memory");
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->renew_cond, NULL);
	lr_rng_init(&c->rng, NULL);
	c->call_timeout_ms = (int64_t)((o->call_timeout_s > 0 ? o->call_timeout_s : 5.0) * 1000);
	if (o->user != NULL) {
		c->user = strdup(o->user);
		c->password = strdup(o->password != NULL ? o->password : "");
	}
	pthread_once(&ssl_once, ssl_no_atexit);
	grpc_init();
	int rc = 0;
	c->stats = lr__call_stats_new();
	if (c->stats == NULL || (o->user != NULL && (c->user == NULL || c->password == NULL)))
		rc = lr_err_set(err, LR_ENOMEM, "etcd: out of memory");
	if (rc == 0)
		rc = lr__channel_open(&c->chan, o, err);
	if (rc == 0) {
		lr_stream_auth auth = lr__stream_auth(c);
		rc = lr__streams_start(&c->chan, c->stats, &auth, &c->streams, err);
	}
	if (rc == 0)
		rc = lr__channel_dial(&c->chan, c->chan.dial_timeout_ms, err);
	if (rc == 0 && c->user != NULL)
		rc = lr__authenticate(c, err);
	if (rc != 0) {
		lr_etcd_close(c);
		return rc;
	}
	*out = c;
	return 0;
}

void lr_etcd_close(lr_etcd *c)
{
	if (c == NULL)
		return;
	lr__auth_stop(c); /* its calls complete on the stream thread */
	lr__streams_stop(c->streams);
	lr__channel_close(&c->chan);
	if (c->password != NULL) {
		memset(c->password, 0, strlen(c->password));
		free(c->password);
	}
	free(c->user);
	free(c->token);
	lr__call_stats_free(c->stats);
	pthread_cond_destroy(&c->renew_cond);
	pthread_mutex_destroy(&c->mu);
	free(c);
	grpc_shutdown();
}

const char *lr_etcd_endpoints(const lr_etcd *c)
{
	return c->chan.endpoints;
}

bool lr_etcd_connected(lr_etcd *c)
{
	lr_err ignore = { 0 };
	int64_t wait = c->call_timeout_ms < c->chan.dial_timeout_ms ? c->call_timeout_ms
	                                                            : c->chan.dial_timeout_ms;
	return lr__channel_dial(&c->chan, wait, &ignore) == 0;
}

int lr_etcd_members_left_out(lr_etcd *c)
{
	int n = 0;
	for (int i = 0; i < c->chan.n_members; i++)
		n += lr__route_left_out(&c->chan, i);
	return n;
}

void lr_etcd_call_stats(lr_etcd *c, lr_etcd_call_stat_fn fn, void *user)
{
	lr__call_stats_each(c->stats, fn, user);
}

struct lr_streams *lr_etcd_streams(lr_etcd *c)
{
	return c->streams;
}
