/* route.c - see route.h. */
#include "etcd/route.h"

#include <stdatomic.h>

/* Lower is better: connected 0, connecting 2, failing 4; left out + 1, and
 * connected but left out 3 (behind connecting). */
static int rank(lr_member *m)
{
	grpc_connectivity_state st = grpc_channel_check_connectivity_state(m->channel, 1);
	int r = st == GRPC_CHANNEL_READY ? 0
	        : st == GRPC_CHANNEL_IDLE || st == GRPC_CHANNEL_CONNECTING ? 2 : 4;
	if (atomic_load_explicit(&m->left_out, memory_order_relaxed))
		r += r == 0 ? 3 : 1;
	return r;
}

int lr__route_pick(lr_channel *c)
{
	if (c->n_members == 1)
		return 0;
	unsigned start = atomic_fetch_add_explicit(&c->next, 1, memory_order_relaxed);
	int best = 0, best_rank = 99;
	for (int k = 0; k < c->n_members && best_rank > 0; k++) {
		int i = (int)((start + (unsigned)k) % (unsigned)c->n_members);
		int r = rank(&c->members[i]);
		if (r < best_rank) {
			best = i;
			best_rank = r;
		}
	}
	return best;
}

static void set_left_out(lr_channel *c, int i, bool out)
{
	if (c->n_members == 1 || i < 0 || i >= c->n_members)
		return;
	lr_member *m = &c->members[i];
	if (atomic_load_explicit(&m->left_out, memory_order_relaxed) != out)
		atomic_store_explicit(&m->left_out, out, memory_order_relaxed);
}

void lr__route_unanswered(lr_channel *c, int i)
{
	set_left_out(c, i, true);
}

void lr__route_answered(lr_channel *c, int i)
{
	set_left_out(c, i, false);
}

bool lr__route_left_out(lr_channel *c, int i)
{
	return atomic_load_explicit(&c->members[i].left_out, memory_order_relaxed);
}

bool lr__route_connected(lr_channel *c)
{
	for (int i = 0; i < c->n_members; i++)
		if (grpc_channel_check_connectivity_state(c->members[i].channel, 0) ==
		    GRPC_CHANNEL_READY)
			return true;
	return false;
}
