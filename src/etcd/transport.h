/* transport.h - the etcd client handle: one gRPC channel to the cluster,
 * blocking unary calls with retries and etcd auth, the stream thread that
 * leases and watches use, and counts of every call.
 *
 * Layers inside src/etcd/, each using only the ones before it: rpc.c
 * (gRPC helpers) and callstats.c; channel.c (endpoints, TLS, dial, why a
 * connection failed); stream.c (bidi streams on one thread); unary.c and
 * auth.c with this handle (transport.c); then kv.c, lease.c, watch.c,
 * which build requests and read replies. */
#ifndef LR_ETCD_TRANSPORT_H
#define LR_ETCD_TRANSPORT_H

#include <stdbool.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "etcd/callstats.h"
#include "etcd/opts.h"
#include "leaserun.h"

typedef struct lr_etcd lr_etcd;

/* Connect to the cluster. Fails with LR_EUNAVAILABLE naming the endpoints
 * when none becomes reachable within the dial timeout, LR_EINVAL for a
 * malformed endpoint list, LR_EAUTH when the credentials are refused.
 * On success *out is a new client, freed by lr_etcd_close. */
int lr_etcd_open(const lr_etcd_opts *opts, lr_etcd **out, lr_err *err);

/* Stops the stream thread (no stream callback runs after it returns), cancels
 * every call and frees the client. Leases are not revoked. */
void lr_etcd_close(lr_etcd *c);

/* The endpoint list as given, for messages. Borrowed. */
const char *lr_etcd_endpoints(const lr_etcd *c);

/* True when a member is connected, or connects within the dial timeout
 * or the call timeout, whichever is shorter: a failure then is etcd's own passing state (an election,
 * a paused member, the member we used just killed), not a cluster out of
 * reach. Blocks; any thread. */
bool lr_etcd_connected(lr_etcd *c);

/* How many members are left out now (something sent to them went
 * unanswered: calls go to the others until they answer, route.h). Any
 * thread; cheap. */
int lr_etcd_members_left_out(lr_etcd *c);

/* Flags of lr_etcd_unary. */
enum {
	/* Retry UNAVAILABLE replies with backoff until the call's deadline.
	 * Only for calls that are safe to repeat: reads, and txns whose
	 * compares make a second application fail visibly. Without it a lost
	 * write reply is reported as LR_EAMBIGUOUS: re-read, then decide. */
	LR_CALL_RETRY = 1 << 0,
};

/* One unary call. `method` is the gRPC path ("/etcdserverpb.KV/Range").
 * On success *resp is a new message of resp_desc, freed by
 * lr_etcd_reply_free(*resp). Any thread. */
int lr_etcd_unary(lr_etcd *c, const char *method, const ProtobufCMessage *req,
                  const ProtobufCMessageDescriptor *resp_desc,
                  ProtobufCMessage **resp, int flags, lr_err *err);
/* The same, and on success *sent_ms: when the attempt that was answered
 * began (monotonic ms). An earlier attempt may have applied too. */
int lr_etcd_unary_sent(lr_etcd *c, const char *method, const ProtobufCMessage *req,
                       const ProtobufCMessageDescriptor *resp_desc,
                       ProtobufCMessage **resp, int flags, int64_t *sent_ms, lr_err *err);

/* Frees a reply of lr_etcd_unary or of a stream; NULL is fine. Any
 * thread. */
void lr_etcd_reply_free(ProtobufCMessage *m);

/* The client's call counts so far (callstats.h): fn(user, st) once per
 * method called at least once, unary and stream, in the order first used,
 * on the calling thread, before this returns. `st` and its strings are
 * valid during that call only. Any thread, at any time while c is open;
 * calls in flight keep counting meanwhile, so the figures of one method
 * are not one instant. Cheap for the calls: they never wait for it. */
void lr_etcd_call_stats(lr_etcd *c, lr_etcd_call_stat_fn fn, void *user);

/* The client's stream thread, on which lease.c and watch.c open their
 * streams (stream.h). Borrowed; lives as long as c. */
struct lr_streams *lr_etcd_streams(lr_etcd *c);

#endif
