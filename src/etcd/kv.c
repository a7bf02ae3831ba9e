/* kv.c - etcd KV calls and the txn builder.
 * Any thread; a lr_txn is used by one thread at a time. No locks of its own:
 * calls block in lr_etcd_unary (unary.c). */
#include "etcd/kv.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "rpc.pb-c.h"

#include "base/arena.h"
#include "base/error.h"

#define M_RANGE "/etcdserverpb.KV/Range"
#define M_PUT "/etcdserverpb.KV/Put"
#define M_DELETE "/etcdserverpb.KV/DeleteRange"
#define M_TXN "/etcdserverpb.KV/Txn"

char *lr_kv_value_dup(const lr_kv *kv)
{
	char *out = malloc(kv->value_len + 1);
	if (out == NULL)
		return NULL;
	if (kv->value_len > 0)
		memcpy(out, kv->value, kv->value_len);
	out[kv->value_len] = '\0';
	return out;
}

size_t lr_prefix_end(const char *prefix, char *out)
{
	size_t n = strlen(prefix);
	memcpy(out, prefix, n);
	while (n > 0) {
		unsigned char b = (unsigned char)out[n - 1];
		if (b < 0xff) {
			out[n - 1] = (char)(b + 1);
			return n;
		}
		n--;
	}
	return 0;
}

size_t lr_range_end(const char *key, int flags, char *buf)
{
	if (!(flags & LR_KEY_PREFIX))
		return 0;
	size_t n = lr_prefix_end(key, buf);
	if (n > 0)
		return n;
	buf[0] = '\0'; /* "\0": every key from here on (a prefix of 0xff bytes) */
	return 1;
}

static ProtobufCBinaryData range_end(const char *key, int flags, char *buf)
{
	size_t n = lr_range_end(key, flags, buf);
	return (ProtobufCBinaryData){ n, n > 0 ? (uint8_t *)buf : NULL };
}

static ProtobufCBinaryData bytes_of(const char *s)
{
	return (ProtobufCBinaryData){ strlen(s), (uint8_t *)s };
}

void lr_kv_view(lr_kv *out, const Mvccpb__KeyValue *kv, char *keybuf)
{
	if (kv->key.len > 0) /* an empty key may come with no data at all */
		memcpy(keybuf, kv->key.data, kv->key.len);
	keybuf[kv->key.len] = '\0';
	out->key = keybuf;
	out->key_len = kv->key.len;
	out->value = (const char *)kv->value.data;
	out->value_len = kv->value.len;
	out->create_rev = kv->create_revision;
	out->mod_rev = kv->mod_revision;
	out->version = kv->version;
	out->lease = kv->lease;
}

/* protobuf-c gives bytes fields without a terminator. Keys are text here, so
 * copy each into a terminated buffer owned by an extra allocation that is
 * freed with the result. */
struct keybuf {
	struct keybuf *next;
	char data[];
};

static int copy_kvs(lr_kv **out, size_t n, Mvccpb__KeyValue **src,
                    struct keybuf **keys)
{
	*out = NULL;
	if (n == 0)
		return 0;
	lr_kv *kvs = calloc(n, sizeof(*kvs));
	if (kvs == NULL)
		return -1;
	size_t total = 0;
	for (size_t i = 0; i < n; i++)
		total += src[i]->key.len + 1;
	struct keybuf *kb = malloc(sizeof(*kb) + total);
	if (kb == NULL) {
		free(kvs);
		return -1;
	}
	kb->next = *keys;
	*keys = kb;
	char *p = kb->data;
	for (size_t i = 0; i < n; i++) {
		lr_kv_view(&kvs[i], src[i], p);
		p += src[i]->key.len + 1;
	}
	*out = kvs;
	return 0;
}

static void free_keys(struct keybuf *k)
{
	while (k != NULL) {
		struct keybuf *n = k->next;
		free(k);
		k = n;
	}
}

/* What a result's pb_ points at: the reply and the key copies. The results
 * of txns sent together (lr_etcd_txn_many) share one, each with a
 * reference, and may be freed on different threads. */
struct holder {
	ProtobufCMessage *reply;
	struct keybuf *keys;
	atomic_int refs;
};

static void *hold(ProtobufCMessage *reply)
{
	struct holder *h = calloc(1, sizeof(*h));
	if (h != NULL) {
		h->reply = reply;
		atomic_init(&h->refs, 1);
	}
	return h;
}

static void release(void *p)
{
	struct holder *h = p;
	if (h == NULL || atomic_fetch_sub(&h->refs, 1) > 1)
		return;
	if (h->reply != NULL)
		lr_etcd_reply_free(h->reply);
	free_keys(h->keys);
	free(h);
}

static void fill_range_req(Etcdserverpb__RangeRequest *req, const char *key,
                           const char *explicit_end, int flags, char *endbuf)
{
	req->key = bytes_of(key);
	req->range_end = explicit_end != NULL ? bytes_of(explicit_end)
	                                      : range_end(key, flags, endbuf);
	req->keys_only = (flags & LR_RANGE_KEYS_ONLY) != 0;
	req->count_only = (flags & LR_RANGE_COUNT_ONLY) != 0;
	req->serializable = (flags & LR_RANGE_SERIALIZABLE) != 0;
	if (flags & LR_RANGE_SORT_CREATE) {
		req->sort_target = ETCDSERVERPB__RANGE_REQUEST__SORT_TARGET__CREATE;
		req->sort_order = ETCDSERVERPB__RANGE_REQUEST__SORT_ORDER__ASCEND;
	}
}

static int range_result_from(lr_range_result *r, Etcdserverpb__RangeResponse *resp,
                             struct holder *h)
{
	r->revision = resp->header != NULL ? resp->header->revision : 0;
	r->more = resp->more;
	r->count = resp->count;
	r->n = resp->n_kvs;
	return copy_kvs(&r->kvs, resp->n_kvs, resp->kvs, &h->keys);
}

int lr_kv_range(lr_etcd *c, const lr_range_opts *o, lr_range_result *r, lr_err *err)
{
	memset(r, 0, sizeof(*r));
	Etcdserverpb__RangeRequest req = ETCDSERVERPB__RANGE_REQUEST__INIT;
	char *endbuf = malloc(strlen(o->key) + 2);
	if (endbuf == NULL)
		return lr_err_set(err, LR_ENOMEM, "range %s: out of memory", o->key);
	fill_range_req(&req, o->key, o->range_end, o->flags, endbuf);
	req.limit = o->limit;
	req.revision = o->revision;
	ProtobufCMessage *resp = NULL;
	int rc = lr_etcd_unary(c, M_RANGE, &req.base,
	                       &etcdserverpb__range_response__descriptor, &resp,
	                       LR_CALL_RETRY, err);
	free(endbuf);
	if (rc != 0)
		return rc;
	struct holder *h = hold(resp);
	if (h == NULL) {
		lr_etcd_reply_free(resp);
		return lr_err_set(err, LR_ENOMEM, "range %s: out of memory", o->key);
	}
	r->pb_ = h;
	if (range_result_from(r, (Etcdserverpb__RangeResponse *)resp, h) != 0) {
		lr_range_result_free(r);
		return lr_err_set(err, LR_ENOMEM, "range %s: out of memory", o->key);
	}
	return 0;
}

int lr_kv_get(lr_etcd *c, const char *key, lr_range_result *r, lr_err *err)
{
	lr_range_opts o = { .key = key };
	return lr_kv_range(c, &o, r, err);
}

void lr_range_result_free(lr_range_result *r)
{
	if (r == NULL)
		return;
	free(r->kvs);
	release(r->pb_);
	memset(r, 0, sizeof(*r));
}

int lr_kv_put(lr_etcd *c, const char *key, const void *value, size_t len,
              int64_t lease, int64_t *revision, lr_range_result *prev, lr_err *err)
{
	Etcdserverpb__PutRequest req = ETCDSERVERPB__PUT_REQUEST__INIT;
	req.key = bytes_of(key);
	req.value = (ProtobufCBinaryData){ len, (uint8_t *)value };
	req.lease = lease;
	req.prev_kv = prev != NULL;
	if (prev != NULL)
		memset(prev, 0, sizeof(*prev));
	ProtobufCMessage *resp = NULL;
	int rc = lr_etcd_unary(c, M_PUT, &req.base, &etcdserverpb__put_response__descriptor,
	                       &resp, 0, err);
	if (rc != 0)
		return lr_err_wrap(err, rc, "put %s", key);
	Etcdserverpb__PutResponse *pr = (Etcdserverpb__PutResponse *)resp;
	if (revision != NULL)
		*revision = pr->header != NULL ? pr->header->revision : 0;
	if (prev == NULL || pr->prev_kv == NULL) {
		lr_etcd_reply_free(resp);
		return 0;
	}
	struct holder *h = hold(resp);
	if (h == NULL)
		lr_etcd_reply_free(resp);
	if (h == NULL || copy_kvs(&prev->kvs, 1, &pr->prev_kv, &h->keys) != 0) {
		release(h);
		return lr_err_set(err, LR_ENOMEM, "put %s: out of memory", key);
	}
	prev->pb_ = h;
	prev->n = 1;
	prev->revision = pr->header != NULL ? pr->header->revision : 0;
	return 0;
}

int lr_kv_delete(lr_etcd *c, const char *key, int flags, int64_t *deleted,
                 int64_t *revision, lr_err *err)
{
	Etcdserverpb__DeleteRangeRequest req = ETCDSERVERPB__DELETE_RANGE_REQUEST__INIT;
	char *endbuf = malloc(strlen(key) + 2);
	if (endbuf == NULL)
		return lr_err_set(err, LR_ENOMEM, "delete %s: out of memory", key);
	req.key = bytes_of(key);
	req.range_end = range_end(key, flags, endbuf);
	ProtobufCMessage *resp = NULL;
	int rc = lr_etcd_unary(c, M_DELETE, &req.base,
	                       &etcdserverpb__delete_range_response__descriptor, &resp, 0, err);
	free(endbuf);
	if (rc != 0)
		return lr_err_wrap(err, rc, "delete %s", key);
	Etcdserverpb__DeleteRangeResponse *dr = (Etcdserverpb__DeleteRangeResponse *)resp;
	if (deleted != NULL)
		*deleted = dr->deleted;
	if (revision != NULL)
		*revision = dr->header != NULL ? dr->header->revision : 0;
	lr_etcd_reply_free(resp);
	return 0;
}

/* ---- txn builder ---------------------------------------------------------- */

/* Everything a txn allocates comes from its root's arena, freed at once:
 * a typical txn costs two or three malloc calls instead of one per piece
 * (compares, ops, keys, values). */
#define TXN_CHUNK 2048

struct lr_txn {
	Etcdserverpb__TxnRequest req;
	size_t cap_cmp, cap_ops[2];
	lr_txn *root;         /* the outermost txn: its arena and oom serve all */
	lr_txn *nested;       /* txns nested in this one (lr_txn_nest) */
	lr_txn *next_nested;
	lr_arena arena;
	bool oom;
};

/* n zeroed bytes, aligned for any type, freed with the txn. */
static void *txn_alloc(lr_txn *t, size_t n)
{
	void *p = lr_arena_alloc(&t->root->arena, n, 1);
	if (p == NULL)
		t->root->oom = true;
	return p;
}

static char *txn_strdup(lr_txn *t, const char *s)
{
	size_t n = strlen(s) + 1;
	char *p = txn_alloc(t, n);
	if (p != NULL)
		memcpy(p, s, n);
	return p;
}

static ProtobufCBinaryData txn_bytes(lr_txn *t, const void *v, size_t len)
{
	uint8_t *p = txn_alloc(t, len ? len : 1);
	if (p == NULL)
		return (ProtobufCBinaryData){ 0, NULL };
	if (len > 0)
		memcpy(p, v, len);
	return (ProtobufCBinaryData){ len, p };
}

static ProtobufCBinaryData txn_range_end(lr_txn *t, const char *key, int flags)
{
	char *buf = txn_alloc(t, strlen(key) + 2);
	if (buf == NULL)
		return (ProtobufCBinaryData){ 0, NULL };
	return range_end(key, flags, buf);
}

/* Grow a pointer array by one slot; false when out of memory. */
static bool grow(void ***arr, size_t n, size_t *cap)
{
	if (n < *cap)
		return true;
	size_t nc = *cap ? *cap * 2 : 4;
	void **na = realloc(*arr, nc * sizeof(void *));
	if (na == NULL)
		return false;
	*arr = na;
	*cap = nc;
	return true;
}

lr_txn *lr_txn_new(void)
{
	lr_txn *t = calloc(1, sizeof(*t));
	if (t != NULL) {
		etcdserverpb__txn_request__init(&t->req);
		t->root = t;
		lr_arena_init(&t->arena, TXN_CHUNK);
	}
	return t;
}

void lr_txn_free(lr_txn *t)
{
	if (t == NULL)
		return;
	while (t->nested != NULL) {
		lr_txn *n = t->nested;
		t->nested = n->next_nested;
		lr_txn_free(n);
	}
	lr_arena_clear(&t->arena);
	free(t->req.compare);
	free(t->req.success);
	free(t->req.failure);
	free(t);
}

static Etcdserverpb__Compare *new_compare(lr_txn *t, const char *key, int flags,
                                          enum lr_cmp_target target, enum lr_cmp_op op)
{
	Etcdserverpb__Compare *cmp = txn_alloc(t, sizeof(*cmp));
	if (cmp == NULL || !grow((void ***)&t->req.compare, t->req.n_compare, &t->cap_cmp)) {
		t->root->oom = true;
		return NULL;
	}
	etcdserverpb__compare__init(cmp);
	cmp->key = txn_bytes(t, key, strlen(key));
	cmp->range_end = txn_range_end(t, key, flags);
	cmp->target = (Etcdserverpb__Compare__CompareTarget)target;
	cmp->result = (Etcdserverpb__Compare__CompareResult)op;
	t->req.compare[t->req.n_compare++] = cmp;
	return cmp;
}

void lr_txn_cmp(lr_txn *t, const char *key, int flags, enum lr_cmp_target target,
                enum lr_cmp_op op, int64_t v)
{
	Etcdserverpb__Compare *cmp = new_compare(t, key, flags, target, op);
	if (cmp == NULL)
		return;
	/* The oneof case must be set, or a zero value is not sent at all and
	 * etcd compares against nothing. */
	switch (target) {
	case LR_CMP_VERSION:
		cmp->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VERSION;
		cmp->version = v;
		break;
	case LR_CMP_CREATE:
		cmp->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_CREATE_REVISION;
		cmp->create_revision = v;
		break;
	case LR_CMP_MOD:
		cmp->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_MOD_REVISION;
		cmp->mod_revision = v;
		break;
	case LR_CMP_LEASE:
		cmp->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_LEASE;
		cmp->lease = v;
		break;
	case LR_CMP_VALUE:
		t->root->oom = true; /* misuse: values go through lr_txn_cmp_value */
		break;
	}
}

void lr_txn_cmp_range(lr_txn *t, const char *key, const char *end,
                      enum lr_cmp_target target, enum lr_cmp_op op, int64_t v)
{
	lr_txn_cmp(t, key, 0, target, op, v);
	Etcdserverpb__Compare *cmp = t->req.n_compare > 0 ? t->req.compare[t->req.n_compare - 1] : NULL;
	if (cmp != NULL && !t->root->oom)
		cmp->range_end = txn_bytes(t, end, strlen(end));
}

void lr_txn_cmp_value(lr_txn *t, const char *key, enum lr_cmp_op op, const void *v,
                      size_t len)
{
	Etcdserverpb__Compare *cmp = new_compare(t, key, 0, LR_CMP_VALUE, op);
	if (cmp == NULL)
		return;
	cmp->target_union_case = ETCDSERVERPB__COMPARE__TARGET_UNION_VALUE;
	cmp->value = txn_bytes(t, v, len);
}

static Etcdserverpb__RequestOp *new_op(lr_txn *t, enum lr_txn_branch b)
{
	Etcdserverpb__RequestOp ***arr = b == LR_THEN ? &t->req.success : &t->req.failure;
	size_t *n = b == LR_THEN ? &t->req.n_success : &t->req.n_failure;
	Etcdserverpb__RequestOp *op = txn_alloc(t, sizeof(*op));
	if (op == NULL || !grow((void ***)arr, *n, &t->cap_ops[b])) {
		t->root->oom = true;
		return NULL;
	}
	etcdserverpb__request_op__init(op);
	(*arr)[(*n)++] = op;
	return op;
}

void lr_txn_put(lr_txn *t, enum lr_txn_branch b, const char *key, const void *value,
                size_t len, int64_t lease)
{
	Etcdserverpb__RequestOp *op = new_op(t, b);
	Etcdserverpb__PutRequest *put = txn_alloc(t, sizeof(*put));
	if (op == NULL || put == NULL)
		return;
	etcdserverpb__put_request__init(put);
	put->key = txn_bytes(t, key, strlen(key));
	put->value = txn_bytes(t, value, len);
	put->lease = lease;
	op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_PUT;
	op->request_put = put;
}

void lr_txn_get(lr_txn *t, enum lr_txn_branch b, const char *key, int flags)
{
	Etcdserverpb__RequestOp *op = new_op(t, b);
	Etcdserverpb__RangeRequest *rr = txn_alloc(t, sizeof(*rr));
	char *key_copy = txn_strdup(t, key);
	char *endbuf = txn_alloc(t, strlen(key) + 2);
	if (op == NULL || rr == NULL || key_copy == NULL || endbuf == NULL)
		return;
	etcdserverpb__range_request__init(rr);
	fill_range_req(rr, key_copy, NULL, flags, endbuf);
	op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
	op->request_range = rr;
}

void lr_txn_get_range(lr_txn *t, enum lr_txn_branch b, const char *key, const char *end,
                      int flags)
{
	Etcdserverpb__RequestOp *op = new_op(t, b);
	Etcdserverpb__RangeRequest *rr = txn_alloc(t, sizeof(*rr));
	char *key_copy = txn_strdup(t, key);
	char *end_copy = txn_strdup(t, end);
	if (op == NULL || rr == NULL || key_copy == NULL || end_copy == NULL)
		return;
	etcdserverpb__range_request__init(rr);
	fill_range_req(rr, key_copy, end_copy, flags, NULL);
	op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_RANGE;
	op->request_range = rr;
}

void lr_txn_delete(lr_txn *t, enum lr_txn_branch b, const char *key, int flags)
{
	Etcdserverpb__RequestOp *op = new_op(t, b);
	Etcdserverpb__DeleteRangeRequest *dr = txn_alloc(t, sizeof(*dr));
	if (op == NULL || dr == NULL)
		return;
	etcdserverpb__delete_range_request__init(dr);
	dr->key = txn_bytes(t, key, strlen(key));
	dr->range_end = txn_range_end(t, key, flags);
	op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_DELETE_RANGE;
	op->request_delete_range = dr;
}

lr_txn *lr_txn_nest(lr_txn *t, enum lr_txn_branch b)
{
	Etcdserverpb__RequestOp *op = new_op(t, b);
	lr_txn *n = calloc(1, sizeof(*n));
	if (op == NULL || n == NULL) {
		free(n);
		t->root->oom = true;
		return t; /* calls on it only add to a txn that will not be sent */
	}
	etcdserverpb__txn_request__init(&n->req);
	n->root = t->root;
	n->next_nested = t->nested;
	t->nested = n;
	op->request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN;
	op->request_txn = &n->req;
	return n;
}

size_t lr_txn_count(const lr_txn *t, int what)
{
	switch (what) {
	case LR_TXN_COMPARES:
		return t->req.n_compare;
	case LR_TXN_THEN:
		return t->req.n_success;
	default:
		return t->req.n_failure;
	}
}

static int txn_result_from(lr_txn_result *r, Etcdserverpb__TxnResponse *resp,
                           struct holder *h)
{
	r->succeeded = resp->succeeded;
	r->revision = resp->header != NULL ? resp->header->revision : 0;
	r->n_ops = resp->n_responses;
	if (r->n_ops == 0)
		return 0;
	r->ops = calloc(r->n_ops, sizeof(*r->ops));
	if (r->ops == NULL)
		return -1;
	for (size_t i = 0; i < r->n_ops; i++) {
		Etcdserverpb__ResponseOp *op = resp->responses[i];
		lr_op_result *o = &r->ops[i];
		switch (op->response_case) {
		case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_RANGE:
			o->type = LR_OP_RANGE;
			o->n = op->response_range->n_kvs;
			if (copy_kvs(&o->kvs, o->n, op->response_range->kvs, &h->keys) != 0)
				return -1;
			break;
		case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_PUT:
			o->type = LR_OP_PUT;
			break;
		case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_DELETE_RANGE:
			o->type = LR_OP_DELETE;
			o->deleted = op->response_delete_range->deleted;
			break;
		case ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_TXN:
			o->type = LR_OP_TXN;
			o->txn = calloc(1, sizeof(*o->txn));
			if (o->txn == NULL ||
			    txn_result_from(o->txn, op->response_txn, h) != 0)
				return -1;
			break;
		default:
			break;
		}
	}
	return 0;
}

int lr_etcd_txn(lr_etcd *c, const lr_txn *t, int flags, lr_txn_result *r, lr_err *err)
{
	memset(r, 0, sizeof(*r));
	if (t->root->oom)
		return lr_err_set(err, LR_ENOMEM, "txn: out of memory building it");
	ProtobufCMessage *resp = NULL;
	int rc = lr_etcd_unary(c, M_TXN, &t->req.base, &etcdserverpb__txn_response__descriptor,
	                       &resp, flags, err);
	if (rc != 0)
		return rc;
	struct holder *h = hold(resp);
	if (h == NULL) {
		lr_etcd_reply_free(resp);
		return lr_err_set(err, LR_ENOMEM, "txn: out of memory");
	}
	r->pb_ = h;
	if (txn_result_from(r, (Etcdserverpb__TxnResponse *)resp, h) != 0) {
		lr_txn_result_free(r);
		return lr_err_set(err, LR_ENOMEM, "txn: out of memory");
	}
	return 0;
}

int lr_etcd_txn_many(lr_etcd *c, const lr_txn *const *ts, size_t n, int flags,
                     lr_txn_result *rs, lr_err *err)
{
	if (n == 1)
		return lr_etcd_txn(c, ts[0], flags, &rs[0], err);
	memset(rs, 0, n * sizeof(*rs));
	Etcdserverpb__TxnRequest outer = ETCDSERVERPB__TXN_REQUEST__INIT;
	Etcdserverpb__RequestOp *ops = calloc(n, sizeof(*ops));
	Etcdserverpb__RequestOp **refs = calloc(n, sizeof(*refs));
	if (ops == NULL || refs == NULL) {
		free(ops);
		free(refs);
		return lr_err_set(err, LR_ENOMEM, "txn: out of memory");
	}
	int rc = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		if (ts[i]->root->oom)
			rc = lr_err_set(err, LR_ENOMEM, "txn: out of memory building it");
		etcdserverpb__request_op__init(&ops[i]);
		ops[i].request_case = ETCDSERVERPB__REQUEST_OP__REQUEST_REQUEST_TXN;
		ops[i].request_txn = (Etcdserverpb__TxnRequest *)&ts[i]->req;
		refs[i] = &ops[i];
	}
	outer.success = refs;
	outer.n_success = n;
	ProtobufCMessage *resp = NULL;
	if (rc == 0)
		rc = lr_etcd_unary(c, M_TXN, &outer.base, &etcdserverpb__txn_response__descriptor,
		                   &resp, flags, err);
	free(ops);
	free(refs);
	if (rc != 0)
		return rc;
	Etcdserverpb__TxnResponse *tr = (Etcdserverpb__TxnResponse *)resp;
	struct holder *h = hold(resp);
	if (h == NULL) {
		lr_etcd_reply_free(resp);
		return lr_err_set(err, LR_ENOMEM, "txn: out of memory");
	}
	if (tr->n_responses != n) {
		release(h);
		return lr_err_set(err, LR_EETCD, "etcd %s (Txn): %zu replies to %zu txns",
		                  lr_etcd_endpoints(c), tr->n_responses, n);
	}
	atomic_store(&h->refs, (int)n);
	int64_t rev = tr->header != NULL ? tr->header->revision : 0;
	for (size_t i = 0; i < n; i++) {
		Etcdserverpb__ResponseOp *op = tr->responses[i];
		rs[i].pb_ = h;
		if (op->response_case != ETCDSERVERPB__RESPONSE_OP__RESPONSE_RESPONSE_TXN ||
		    txn_result_from(&rs[i], op->response_txn, h) != 0)
			rc = LR_ENOMEM;
		rs[i].revision = rev; /* a nested reply carries none of its own */
	}
	if (rc != 0) {
		for (size_t i = 0; i < n; i++)
			lr_txn_result_free(&rs[i]);
		return lr_err_set(err, LR_ENOMEM, "txn: out of memory");
	}
	return 0;
}

bool lr_etcd_too_many_ops(int code, const lr_err *e)
{
	/* etcd's ErrGRPCTooManyOps, an InvalidArgument like many others */
	return code == LR_EETCD && strstr(e->msg, "too many operations in txn request") != NULL;
}

const ProtobufCMessage *lr_txn_request(const lr_txn *t)
{
	return &t->req.base;
}

/* The ops' own allocations (the protobuf reply is released by the
 * outermost result only). */
static void free_ops(lr_txn_result *r)
{
	for (size_t i = 0; r->ops != NULL && i < r->n_ops; i++) {
		free(r->ops[i].kvs);
		if (r->ops[i].txn != NULL) {
			free_ops(r->ops[i].txn);
			free(r->ops[i].txn);
		}
	}
	free(r->ops);
}

void lr_txn_result_free(lr_txn_result *r)
{
	if (r == NULL)
		return;
	free_ops(r);
	release(r->pb_);
	memset(r, 0, sizeof(*r));
}
