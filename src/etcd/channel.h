/* channel.h - the etcd client's gRPC channels, one per member: endpoints
 * parsed and resolved, TLS credentials, the dial, and why a connection
 * failed, in words. Which member a call goes to is route.h's. Internal to
 * src/etcd/; below the streams and the unary calls. */
#ifndef LR_ETCD_CHANNEL_H
#define LR_ETCD_CHANNEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <grpc/grpc.h>

#include "etcd/opts.h"
#include "leaserun.h"

/* Replies up to this size are accepted (gRPC's default is 4 MiB). */
#define LR_MAX_MESSAGE (64 * 1024 * 1024)

/* At most this many endpoints. */
#define LR_MAX_MEMBERS 64

/* One member: a channel to its one address, and whether it answers
 * (route.c; atomics, any thread). */
typedef struct lr_member {
	grpc_channel *channel;
	char addr[64];           /* "a:p" or "[a]:p", for messages */
	char host[256];          /* as written: the name its certificate must hold */
	_Atomic bool left_out;   /* a call went unanswered since its last answer */
} lr_member;

/* Set once by lr__channel_open, then only read (but the members' routing
 * state): any thread. */
typedef struct lr_channel {
	char *endpoints;       /* as given, for messages */
	lr_member *members;
	int n_members;
	_Atomic unsigned next; /* round robin (route.c) */
	int64_t dial_timeout_ms;
	bool tls, has_cacert, client_cert; /* for messages about TLS failures */
	char *tls_server_name;
} lr_channel;

/* Parse the endpoints, load the TLS files and create a channel for each
 * (not yet connected). LR_EINVAL for a malformed endpoint list or unreadable files,
 * LR_ETLS for certificates gRPC refuses. On failure, lr__channel_close
 * still frees what was made. */
int lr__channel_open(lr_channel *ch, const lr_etcd_opts *o, lr_err *err);
void lr__channel_close(lr_channel *ch);

/* Wait until some endpoint is connected, at most wait_ms; the error says
 * why not (TLS, refused, ...). */
int lr__channel_dial(lr_channel *ch, int64_t wait_ms, lr_err *err);

/* gRPC's reason for a failed connection to a member not connected, in
 * words, into buf ("" for none): a TLS failure first, whichever member it
 * is. Makes calls that fail fast, to those members at once: blocks for at
 * most half a second. */
void lr__connect_failure(lr_channel *ch, char *buf, size_t size);
/* A TLS failure as an lr_err (LR_ETLS) when gRPC's text `details` reads
 * like one (only a certain one with sure_only); 0, err untouched,
 * otherwise. `method` (a gRPC path) may be NULL. */
int lr__tls_error(const lr_channel *ch, const char *details, const char *method,
                  bool sure_only, lr_err *err);
/* "no endpoint reachable within ..." with the last reason, as `code`. */
int lr__unreachable_error(const lr_channel *ch, const char *method, const char *last,
                          int64_t waited_ms, int code, lr_err *err);

#endif
