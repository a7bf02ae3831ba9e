/* auth.h - etcd auth for the client handle: the token every call sends,
 * getting a new one when etcd refuses it, and the hooks that give stream
 * calls the same. Internal to src/etcd/. */
#ifndef LR_ETCD_AUTH_H
#define LR_ETCD_AUTH_H

#include <stdbool.h>
#include <stddef.h>

#include <grpc/grpc.h>

#include "etcd/stream.h"
#include "etcd/transport.h"

/* Whether etcd's text (a status detail, a watch's cancel reason) refuses
 * the token: expired, unknown, or minted before the last change of users
 * and roles. Each means the request was refused before it did anything. */
bool lr__token_refused_text(const char *text, size_t len);
/* A call's status that refuses its token. */
bool lr__token_expired(grpc_status_code st, const char *details);

/* Authenticate again; the new token replaces the client's. Any thread,
 * blocking; err may be NULL. */
int lr__authenticate(lr_etcd *c, lr_err *err);
/* The current token (a copy the caller frees), NULL without auth. */
char *lr__token_copy(lr_etcd *c);

/* The hooks that let c's stream thread send and renew tokens. */
lr_stream_auth lr__stream_auth(lr_etcd *c);
/* Stop the thread that renews tokens for the streams, waiting for a
 * renewal under way; before the stream thread stops. */
void lr__auth_stop(lr_etcd *c);

#endif
