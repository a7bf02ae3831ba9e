/* txn_group.c - which txns may share one request: their written and
 * compared keys, op budget and size (see txn_group.h). Reads the protobuf
 * requests the builder made; any thread, one group per thread at a time. */
#include "etcd/txn_group.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.pb-c.h"

/* A key, or the keys in [key, end) when end_len > 0 (end "\0": every key
 * from key on), as etcd's range_end says. Borrowed from a member. */
struct span {
	const uint8_t *key, *end;
	size_t len, end_len;
};

struct lr_txn_group {
	size_t max_txns;
	size_t max_ops, max_bytes; /* lr_txn_group_limit */
	const lr_txn **members;
	size_t n;
	size_t need;            /* the most budget a member needs */
	size_t bytes;           /* packed size of the members */
	struct span *writes;    /* every key or range a member writes */
	size_t n_writes, cap_writes, n_ranges;
	uint32_t *slots;        /* hash of the single-key writes: index + 1 */
	size_t cap_slots;       /* a power of two, at least twice the writes */
};

lr_txn_group *lr_txn_group_new(size_t max_txns)
{
	if (max_txns < 1 || max_txns >= LR_TXN_MAX_OPS)
		return NULL;
	lr_txn_group *g = calloc(1, sizeof(*g));
	if (g == NULL)
		return NULL;
	g->max_txns = max_txns;
	g->max_ops = LR_TXN_MAX_OPS;
	g->max_bytes = LR_TXN_GROUP_MAX_BYTES;
	g->members = calloc(max_txns, sizeof(*g->members));
	if (g->members == NULL) {
		free(g);
		return NULL;
	}
	return g;
}

void lr_txn_group_free(lr_txn_group *g)
{
	if (g == NULL)
		return;
	free(g->members);
	free(g->writes);
	free(g->slots);
	free(g);
}

void lr_txn_group_clear(lr_txn_group *g)
{
	g->n = 0;
	g->need = 0;
	g->bytes = 0;
	g->n_writes = 0;
	g->n_ranges = 0;
	if (g->slots != NULL)
		memset(g->slots, 0, g->cap_slots * sizeof(*g->slots));
}

void lr_txn_group_limit(lr_txn_group *g, size_t max_ops, size_t max_bytes)
{
	g->max_ops = max_ops < LR_TXN_MAX_OPS ? max_ops : LR_TXN_MAX_OPS;
	g->max_bytes = max_bytes < LR_TXN_GROUP_MAX_BYTES ? max_bytes : LR_TXN_GROUP_MAX_BYTES;
}

size_t lr_txn_group_ops(const lr_txn_group *g)
{
	return g->n + g->need;
}

size_t lr_txn_group_bytes(const lr_txn_group *g)
{
	return g->bytes;
}

size_t lr_txn_group_size(const lr_txn_group *g)
{
	return g->n;
}

const lr_txn *const *lr_txn_group_members(const lr_txn_group *g)
{
	return g->members;
}

/* ---- keys and ranges ------------------------------------------------------- */

static int bytes_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen)
{
	int c = memcmp(a, b, alen < blen ? alen : blen);
	if (c != 0)
		return c;
	return alen < blen ? -1 : alen > blen;
}

static bool endless(const struct span *s)
{
	return s->end_len == 1 && s->end[0] == 0;
}

/* Whether key k lies before the end of range r. */
static bool before_end(const uint8_t *k, size_t len, const struct span *r)
{
	return endless(r) || bytes_cmp(k, len, r->end, r->end_len) < 0;
}

static bool overlap(const struct span *a, const struct span *b)
{
	if (a->end_len == 0 && b->end_len == 0)
		return a->len == b->len && memcmp(a->key, b->key, a->len) == 0;
	if (a->end_len == 0)
		return bytes_cmp(a->key, a->len, b->key, b->len) >= 0 &&
		       before_end(a->key, a->len, b);
	if (b->end_len == 0)
		return overlap(b, a);
	return before_end(a->key, a->len, b) && before_end(b->key, b->len, a);
}

static uint64_t hash(const uint8_t *k, size_t len)
{
	uint64_t h = 14695981039346656037ULL; /* FNV-1a */
	for (size_t i = 0; i < len; i++)
		h = (h ^ k[i]) * 1099511628211ULL;
	return h;
}

/* Whether s overlaps a key or range a member writes. */
static bool written(const lr_txn_group *g, const struct span *s)
{
	if (s->end_len == 0 && g->n_ranges == 0) {
		if (g->cap_slots == 0)
			return false;
		size_t mask = g->cap_slots - 1;
		for (size_t i = hash(s->key, s->len) & mask; g->slots[i] != 0; i = (i + 1) & mask)
			if (overlap(s, &g->writes[g->slots[i] - 1]))
				return true;
		return false;
	}
	for (size_t i = 0; i < g->n_writes; i++)
		if (overlap(s, &g->writes[i]))
			return true;
	return false;
}

static void slot_in(lr_txn_group *g, size_t index)
{
	const struct span *s = &g->writes[index];
	size_t mask = g->cap_slots - 1;
	size_t i = hash(s->key, s->len) & mask;
	while (g->slots[i] != 0)
		i = (i + 1) & mask;
	g->slots[i] = (uint32_t)index + 1;
}

/* Room for `more` writes, the table at most half full; false when out of
 * memory. */
static bool room_for_writes(lr_txn_group *g, size_t more)
{
	size_t want = g->n_writes + more;
	if (want > g->cap_writes) {
		size_t cap = g->cap_writes ? g->cap_writes : 64;
		while (cap < want)
			cap *= 2;
		struct span *w = realloc(g->writes, cap * sizeof(*w));
		if (w == NULL)
			return false;
		g->writes = w;
		g->cap_writes = cap;
	}
	if (2 * want <= g->cap_slots)
		return true;
	size_t cap = g->cap_slots ? g->cap_slots : 128;
	while (cap < 2 * want)
		cap *= 2;
	uint32_t *slots = calloc(cap, sizeof(*slots));
	if (slots == NULL)
		return false;
	free(g->slots);
	g->slots = slots;
	g->cap_slots = cap;
	for (size_t i = 0; i < g->n_writes; i++)
		if (g->writes[i].end_len == 0)
			slot_in(g, i);
	return true;
}

/* After room_for_writes. */
static void add_write(lr_txn_group *g, const struct span *s)
{
	g->writes[g->n_writes] = *s;
	if (s->end_len == 0)
		slot_in(g, g->n_writes);
	else
		g->n_ranges++;
	g->n_writes++;
}

/* ---- walking a request ----------------------------------------------------- */

static struct span span_of(ProtobufCBinaryData key, ProtobufCBinaryData end)
{
	return (struct span){ key.data, end.data, key.len, end.len };
}

/* The budget q needs: its own count, plus the most any txn nested in it
 * needs. *writes counts its puts and deletes, nested ones included. */
static size_t need_of(const Etcdserverpb__TxnRequest *q, size_t *writes)
{
	size_t own = q->n_compare;
	if (q->n_success > own)
		own = q->n_success;
	if (q->n_failure > own)
		own = q->n_failure;
	size_t inner = 0;
	for (int b = 0; b < 2; b++) {
		Etcdserverpb__RequestOp **ops = b == 0 ? q->success : q->failure;
		size_t n = b == 0 ? q->n_success : q->n_failure;
		for (size_t i = 0; i < n; i++) {
			if (ops[i]->request_case == ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT ||
			    ops[i]->request_case ==
			        ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE)
				(*writes)++;
			if (ops[i]->request_case != ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN)
				continue;
			size_t k = need_of(ops[i]->request_txn, writes);
			if (k > inner)
				inner = k;
		}
	}
	return own + inner;
}

/* Check mode (g != NULL, into == NULL): false when a compare or write of q
 * touches a key the group writes. Insert mode (into != NULL, with room
 * made): add q's writes to the group. */
static bool walk(const Etcdserverpb__TxnRequest *q, const lr_txn_group *g, lr_txn_group *into)
{
	for (size_t i = 0; into == NULL && i < q->n_compare; i++) {
		struct span s = span_of(q->compare[i]->key, q->compare[i]->range_end);
		if (written(g, &s))
			return false;
	}
	for (int b = 0; b < 2; b++) {
		Etcdserverpb__RequestOp **ops = b == 0 ? q->success : q->failure;
		size_t n = b == 0 ? q->n_success : q->n_failure;
		for (size_t i = 0; i < n; i++) {
			const Etcdserverpb__RequestOp *op = ops[i];
			struct span s;
			switch (op->request_case) {
			case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT:
				s = span_of(op->request_put->key, (ProtobufCBinaryData){ 0, NULL });
				break;
			case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE:
				s = span_of(op->request_delete_range->key,
				            op->request_delete_range->range_end);
				break;
			case ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN:
				if (!walk(op->request_txn, g, into))
					return false;
				continue;
			default:
				continue; /* reads see earlier members' writes, in order */
			}
			if (into != NULL)
				add_write(into, &s);
			else if (written(g, &s))
				return false;
		}
	}
	return true;
}

bool lr_txn_group_add(lr_txn_group *g, const lr_txn *t)
{
	const Etcdserverpb__TxnRequest *q = (const Etcdserverpb__TxnRequest *)lr_txn_request(t);
	if (g->n == g->max_txns)
		return false;
	size_t writes = 0;
	size_t need = need_of(q, &writes);
	size_t bytes = protobuf_c_message_get_packed_size(&q->base) + 16;
	if (g->n > 0) {
		size_t most = need > g->need ? need : g->need;
		if (g->n + 1 + most > g->max_ops || g->bytes + bytes > g->max_bytes ||
		    !walk(q, g, NULL))
			return false;
	}
	if (!room_for_writes(g, writes))
		return false; /* out of memory: it goes alone, later */
	walk(q, NULL, g);
	g->members[g->n++] = t;
	if (need > g->need)
		g->need = need;
	g->bytes += bytes;
	return true;
}
