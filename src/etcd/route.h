/* route.h - which member a call or a stream goes to: round robin over the
 * members, leaving out one that let a call or a stream go unanswered
 * until it answers again (the stream thread probes it every second). A
 * member that stops answering without closing its connection (frozen, its
 * host gone without a word) stays READY to gRPC until a keepalive ping
 * fails, 9 to 11 s later (etcd refuses pings more often than every 5 s);
 * left out after one unanswered call, it costs that one attempt instead
 * of every third call meanwhile. Internal to src/etcd/; any thread, no
 * lock. */
#ifndef LR_ETCD_ROUTE_H
#define LR_ETCD_ROUTE_H

#include <stdbool.h>

#include "etcd/channel.h"

/* The member for the next call: the next in turn that is connected and
 * not left out; else one connecting; else one left out; else any. */
int lr__route_pick(lr_channel *c);

/* Member i let a call or a stream go unanswered past its deadline: left
 * out until it answers. */
void lr__route_unanswered(lr_channel *c, int i);

/* Member i answered (anything, even a refusal): taken again at once. */
void lr__route_answered(lr_channel *c, int i);

/* Whether member i is left out. */
bool lr__route_left_out(lr_channel *c, int i);

/* Whether some member is connected. */
bool lr__route_connected(lr_channel *c);

#endif
