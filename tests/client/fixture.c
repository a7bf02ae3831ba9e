/* fixture.c - set-up shared by the client and command-line tests. */
#include "fixture.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd/kv.h"
#include "etcd/lease.h"
#include "test.h"

lr_client *fixture_client(const char *name)
{
	lr_client_opts o = {
		.endpoints = etcdh_endpoints(cluster),
		.prefix = test_prefix(name),
		.dial_timeout_s = 5,
		.call_timeout_s = 5,
	};
	lr_client *c = NULL;
	lr_err err = { 0 };
	CHECK_OK(lr_client_open(&o, &c, &err), &err);
	return c;
}

int64_t fixture_count(lr_client *c, const char *kind)
{
	char key[LR_KEY_SIZE];
	lr_range_result r;
	lr_err err = { 0 };

	lr_key(c, kind, "", key);
	lr_range_opts o = { .key = key,
		            .flags = LR_KEY_PREFIX | LR_RANGE_COUNT_ONLY };
	CHECK_OK(lr_kv_range(lr_client_etcd(c), &o, &r, &err), &err);
	int64_t n = r.count;
	lr_range_result_free(&r);
	return n;
}

void fixture_put(lr_client *c, const char *kind, const char *id,
                 const char *value, int64_t lease)
{
	char key[LR_KEY_SIZE];
	lr_err err = { 0 };

	lr_key(c, kind, id, key);
	CHECK_OK(lr_kv_put(lr_client_etcd(c), key, value, strlen(value), lease,
	                   NULL, NULL, &err), &err);
}

char *fixture_get(lr_client *c, const char *kind, const char *id)
{
	char key[LR_KEY_SIZE];
	lr_range_result r;
	lr_err err = { 0 };
	char *v = NULL;

	lr_key(c, kind, id, key);
	CHECK_OK(lr_kv_get(lr_client_etcd(c), key, &r, &err), &err);
	if (r.n > 0)
		v = strndup(r.kvs[0].value, r.kvs[0].value_len);
	lr_range_result_free(&r);
	return v;
}

int64_t fixture_lease(lr_client *c, int64_t ttl_s)
{
	int64_t id = 0, granted = 0, sent = 0;
	lr_err err = { 0 };

	CHECK_OK(lr_lease_grant(lr_client_etcd(c), ttl_s, &id, &granted, &sent,
	                        &err), &err);
	return id;
}

int64_t fixture_revision(lr_client *c)
{
	lr_range_result r;
	lr_err err = { 0 };

	CHECK_OK(lr_kv_get(lr_client_etcd(c), "/", &r, &err), &err);
	int64_t rev = r.revision;
	lr_range_result_free(&r);
	return rev;
}

char *fixture_spec(const char *id, int steps)
{
	size_t cap = 128 + (size_t)steps * 48;
	char *s = malloc(cap);
	size_t n;

	CHECK(s != NULL);
	n = (size_t)snprintf(s, cap, "{%s%s%s\"steps\":[", id ? "\"id\":\"" : "",
	                     id ? id : "", id ? "\"," : "");
	for (int i = 0; i < steps; i++)
		n += (size_t)snprintf(s + n, cap - n,
		                      "%s{\"name\":\"s%d\",\"run\":\"true\"}",
		                      i ? "," : "", i);
	snprintf(s + n, cap - n, "]}");
	return s;
}
