/* fixture.h - set-up shared by the client and command-line tests: a client
 * on the harness's etcd with a key prefix of its own for each test case,
 * and raw access to the keys under it. */
#ifndef LR_TEST_CLIENT_FIXTURE_H
#define LR_TEST_CLIENT_FIXTURE_H

#include <stdint.h>

#include "client/client.h"
#include "common.h"

/* A new client with a fresh prefix "/t/<name>/<n>/"; fails the test on
 * error. Close it with lr_client_close. */
lr_client *fixture_client(const char *name);

/* Keys under the client's prefix + kind ("" for every key). */
int64_t fixture_count(lr_client *c, const char *kind);

/* Put value at prefix + kind + id, on lease (0 for none). */
void fixture_put(lr_client *c, const char *kind, const char *id,
                 const char *value, int64_t lease);

/* The value at prefix + kind + id as a new string, NULL when absent. */
char *fixture_get(lr_client *c, const char *kind, const char *id);

/* A lease of ttl_s seconds. */
int64_t fixture_lease(lr_client *c, int64_t ttl_s);

/* The store's current revision. */
int64_t fixture_revision(lr_client *c);

/* A valid spec with `steps` steps named s0, s1, ... as JSON text
 * (malloc'd). */
char *fixture_spec(const char *id, int steps);

#endif
