/* client.c - the lr_client handle: one etcd connection, the normalised key
 * prefix and the key layout under it. Immutable after open; any thread. */
#include "client/client.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/utf8.h"
#include "records/spec.h"

#define DEFAULT_ENDPOINTS "127.0.0.1:2379"
#define DEFAULT_PREFIX "/leaserun/"

struct lr_client {
	lr_etcd *etcd;
	char prefix[LR_PREFIX_MAX + 2]; /* with its trailing '/' */
	size_t prefix_len;
};

/* Why a prefix cannot be used, NULL when it can. A control character (a
 * newline from an environment variable) or a blank at either end (from
 * quoting) would silently make a namespace of its own that nobody sees
 * when reading or typing the prefix. */
static const char *prefix_flaw(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)p[i];
		if (ch < 0x20 || ch == 0x7f)
			return "must not contain control characters";
	}
	/* Nor bytes that no one could type or see, nor JSON hold. */
	for (size_t i = 0, k; i < n; i += k)
		if ((k = lr_utf8_char_len((const unsigned char *)p + i, n - i)) == 0)
			return "must be valid UTF-8";
	/* Every other ASCII blank is a control character. */
	if (p[0] == ' ' || p[n - 1] == ' ')
		return "must not start or end with a blank";
	return NULL;
}

/* The prefix as given, or the default, with a trailing '/' so that the tasks
 * of "/a" never mix with those of "/ab". */
static int normalise_prefix(const char *given, char *out, size_t *len,
                            lr_err *err)
{
	const char *p = given != NULL ? given : DEFAULT_PREFIX;
	size_t n = strlen(p);

	if (n == 0)
		return lr_err_set(err, LR_EINVAL, "prefix: must not be empty");
	if (n > LR_PREFIX_MAX)
		return lr_err_set(err, LR_EINVAL,
		                  "prefix: %zu characters, over the limit of %d", n,
		                  LR_PREFIX_MAX);
	const char *flaw = prefix_flaw(p, n);
	if (flaw != NULL) {
		char shown[LR_PREFIX_MAX + 1];
		const char *cut = lr_utf8_escape(p, n, SIZE_MAX, shown, sizeof(shown)) < n
		                  ? "..." : "";
		return lr_err_set(err, LR_EINVAL, "prefix \"%s%s\": %s", shown, cut, flaw);
	}
	memcpy(out, p, n);
	if (out[n - 1] != '/')
		out[n++] = '/';
	out[n] = '\0';
	*len = n;
	return 0;
}

/* 0 (the default), or a millisecond to a day: beyond, milliseconds would
 * not fit the clocks; below, every call would fail at once. NaN is not. */
static bool timeout_ok(double s)
{
	return s == 0 || (s >= 0.001 && s <= 86400);
}

int lr_client_open(const lr_client_opts *opts, lr_client **out, lr_err *err)
{
	static const lr_client_opts none = { .endpoints = NULL };
	const lr_client_opts *o = opts != NULL ? opts : &none;
	lr_client *c = NULL;
	int rc;

	if (LR_NULL_ARG(err, out))
		return LR_EINVAL;
	*out = NULL;
	if (!timeout_ok(o->dial_timeout_s) || !timeout_ok(o->call_timeout_s))
		return lr_err_set(err, LR_EINVAL, "lr_client_opts: dial_timeout_s %g, call_timeout_s "
		                  "%g: expected seconds from 0.001 to 86400, or 0 for the default",
		                  o->dial_timeout_s, o->call_timeout_s);
	c = calloc(1, sizeof(*c));
	if (c == NULL)
		return lr_err_set(err, LR_ENOMEM, "open client: out of memory");
	rc = normalise_prefix(o->prefix, c->prefix, &c->prefix_len, err);
	if (rc != 0)
		goto fail;
	lr_etcd_opts eo = {
		.endpoints = o->endpoints != NULL && o->endpoints[0] != '\0'
		                 ? o->endpoints : DEFAULT_ENDPOINTS,
		.dial_timeout_s = o->dial_timeout_s,
		.call_timeout_s = o->call_timeout_s,
		.cacert = o->cacert,
		.cert = o->cert,
		.key = o->key,
		.tls_server_name = o->tls_server_name,
		.user = o->user,
		.password = o->password,
	};
	rc = lr_etcd_open(&eo, &c->etcd, err);
	if (rc != 0)
		goto fail;
	*out = c;
	return 0;
fail:
	free(c);
	return rc;
}

void lr_client_close(lr_client *c)
{
	if (c == NULL)
		return;
	lr_etcd_close(c->etcd);
	free(c);
}

const char *lr_client_prefix(const lr_client *c)
{
	return c->prefix;
}

lr_etcd *lr_client_etcd(const lr_client *c)
{
	return c->etcd;
}

void lr_key(const lr_client *c, const char *kind, const char *id,
            char buf[LR_KEY_SIZE])
{
	/* Ids and names are checked against the id rule before they get
	 * here, so the key always fits; %.*s only guards against a caller
	 * that forgot. */
	snprintf(buf, LR_KEY_SIZE, "%s%s%.*s", c->prefix, kind, LR_ID_SIZE - 1,
	         id);
}

const char *lr_key_id(const lr_client *c, const char *kind, const char *key)
{
	size_t kl = strlen(kind);

	if (strncmp(key, c->prefix, c->prefix_len) != 0)
		return NULL;
	key += c->prefix_len;
	if (strncmp(key, kind, kl) != 0)
		return NULL;
	return key + kl;
}

static const char *const state_names[] = {
	[LR_TASK_PENDING] = "pending",
	[LR_TASK_RUNNING] = "running",
	[LR_TASK_SUCCEEDED] = "succeeded",
	[LR_TASK_FAILED] = "failed",
	[LR_TASK_CANCELLED] = "cancelled",
};

#define N_STATES (sizeof(state_names) / sizeof(state_names[0]))

const char *lr_task_state_name(lr_task_state s)
{
	if ((unsigned)s >= N_STATES)
		return NULL;
	return state_names[s];
}

int lr_task_state_parse(const char *s)
{
	if (s == NULL)
		return -1;
	for (size_t i = 0; i < N_STATES; i++)
		if (strcmp(s, state_names[i]) == 0)
			return (int)i;
	return -1;
}
