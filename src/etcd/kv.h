/* kv.h - etcd's KV service: Range, Put, DeleteRange and Txn, with results as
 * plain C structs. Every function blocks the calling thread; any thread. */
#ifndef LR_ETCD_KV_H
#define LR_ETCD_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "etcd/transport.h"
#include "kv.pb-c.h"

/* A key-value as etcd returned it. Pointers are borrowed from the result
 * that holds them and live until that result is freed. value is not
 * NUL-terminated; key is. */
typedef struct lr_kv {
	const char *key;
	size_t key_len;
	const char *value;
	size_t value_len;
	int64_t create_rev, mod_rev, version, lease;
} lr_kv;

/* A NUL-terminated malloc'd copy of kv's value (freed by the caller), also
 * for an empty value, which may come with no buffer at all. NULL when out
 * of memory. */
char *lr_kv_value_dup(const lr_kv *kv);

/* Key flags. */
enum {
	LR_KEY_PREFIX = 1 << 0,    /* the key is a prefix: every key under it */
	LR_RANGE_KEYS_ONLY = 1 << 2,
	LR_RANGE_COUNT_ONLY = 1 << 3,
	LR_RANGE_SERIALIZABLE = 1 << 4,
	LR_RANGE_SORT_CREATE = 1 << 5, /* ascending create revision */
};

typedef struct lr_range_opts {
	const char *key;
	const char *range_end; /* explicit end (exclusive), overrides flags */
	int flags;
	int64_t limit;         /* 0: no limit */
	int64_t revision;      /* 0: latest */
} lr_range_opts;

typedef struct lr_range_result {
	int64_t revision; /* the store's revision when the range was served */
	bool more;
	int64_t count;
	size_t n;
	lr_kv *kvs;
	void *pb_;
} lr_range_result;

int lr_kv_range(lr_etcd *c, const lr_range_opts *o, lr_range_result *r, lr_err *err);
/* One key; r->n is 0 when it does not exist. */
int lr_kv_get(lr_etcd *c, const char *key, lr_range_result *r, lr_err *err);
void lr_range_result_free(lr_range_result *r);

/* Put. *revision (may be NULL) is the revision of the write; prev (may be
 * NULL) receives the previous key-value (prev->n is 0 or 1). */
int lr_kv_put(lr_etcd *c, const char *key, const void *value, size_t len,
              int64_t lease, int64_t *revision, lr_range_result *prev, lr_err *err);

/* DeleteRange of a key (flags 0) or a prefix (LR_KEY_PREFIX). */
int lr_kv_delete(lr_etcd *c, const char *key, int flags, int64_t *deleted,
                 int64_t *revision, lr_err *err);

/* ---- transactions ------------------------------------------------------- */

typedef struct lr_txn lr_txn;

enum lr_cmp_op { LR_CMP_EQ = 0, LR_CMP_GT = 1, LR_CMP_LT = 2, LR_CMP_NE = 3 };
enum lr_cmp_target {
	LR_CMP_VERSION = 0,
	LR_CMP_CREATE = 1,
	LR_CMP_MOD = 2,
	LR_CMP_VALUE = 3,
	LR_CMP_LEASE = 4,
};
enum lr_txn_branch { LR_THEN = 0, LR_ELSE = 1 };

/* A new empty txn, freed by lr_txn_free. Builder calls copy their
 * arguments; an allocation failure is remembered and reported by
 * lr_etcd_txn. */
lr_txn *lr_txn_new(void);
void lr_txn_free(lr_txn *t);

/* Compare target (VERSION, CREATE, MOD, LEASE) of key (flags: 0 or
 * LR_KEY_PREFIX, comparing every key under it) with v. */
void lr_txn_cmp(lr_txn *t, const char *key, int flags, enum lr_cmp_target target,
                enum lr_cmp_op op, int64_t v);
/* The same over every key in [key, end): on an empty range, the compare
 * is judged against a key of zero version and revisions. */
void lr_txn_cmp_range(lr_txn *t, const char *key, const char *end,
                      enum lr_cmp_target target, enum lr_cmp_op op, int64_t v);
void lr_txn_cmp_value(lr_txn *t, const char *key, enum lr_cmp_op op,
                      const void *v, size_t len);

void lr_txn_put(lr_txn *t, enum lr_txn_branch b, const char *key, const void *value,
                size_t len, int64_t lease);
/* Range inside the txn; flags as lr_range_opts.flags. */
void lr_txn_get(lr_txn *t, enum lr_txn_branch b, const char *key, int flags);
/* The same over every key in [key, end). */
void lr_txn_get_range(lr_txn *t, enum lr_txn_branch b, const char *key, const char *end,
                      int flags);
void lr_txn_delete(lr_txn *t, enum lr_txn_branch b, const char *key, int flags);

/* A txn nested in branch b of t (etcd >= 3.3): its own compares decide
 * its own branch, yet the whole is one request, one revision. Freed with
 * t; build it with the calls above. No key may be written twice in one
 * request, nested txns included. */
lr_txn *lr_txn_nest(lr_txn *t, enum lr_txn_branch b);

/* How many compares, or ops of a branch, t has. etcd refuses a txn whose
 * largest list is over --max-txn-ops (128 by default), and checks a nested
 * txn against what its parent leaves: the budget minus the parent's
 * largest list, along the whole chain of nesting. */
enum { LR_TXN_COMPARES = 0, LR_TXN_THEN = 1, LR_TXN_ELSE = 2 };
size_t lr_txn_count(const lr_txn *t, int what);

enum lr_op_type { LR_OP_RANGE = 1, LR_OP_PUT = 2, LR_OP_DELETE = 3, LR_OP_TXN = 4 };

struct lr_txn_result;

typedef struct lr_op_result {
	enum lr_op_type type;
	size_t n;       /* LR_OP_RANGE: kvs found */
	lr_kv *kvs;
	int64_t deleted; /* LR_OP_DELETE */
	struct lr_txn_result *txn; /* LR_OP_TXN: the nested txn's result */
} lr_op_result;

typedef struct lr_txn_result {
	bool succeeded;
	int64_t revision; /* of the txn (its writes, when it wrote) */
	size_t n_ops;
	lr_op_result *ops; /* one per op of the branch taken */
	void *pb_;
} lr_txn_result;

/* Run the txn; flags as lr_etcd_unary (LR_CALL_RETRY only for txns whose
 * compares make a repeated application fail). */
int lr_etcd_txn(lr_etcd *c, const lr_txn *t, int flags, lr_txn_result *r, lr_err *err);
void lr_txn_result_free(lr_txn_result *r);

/* Run n txns (n >= 1) as one request, each nested in the THEN branch of an
 * outer txn without compares: each decides by its own compares, all apply
 * in one revision, for the cost of one proposal. rs[i] (n of them, each
 * freed with lr_txn_result_free, on any thread) is ts[i]'s result, with the
 * request's revision. etcd judges every compare before any write and
 * refuses a request that writes a key twice or goes over --max-txn-ops down
 * its nesting: lr_txn_group (txn_group.h) tells which txns may go
 * together. flags as lr_etcd_txn. On failure no result is filled. */
int lr_etcd_txn_many(lr_etcd *c, const lr_txn *const *ts, size_t n, int flags,
                     lr_txn_result *rs, lr_err *err);

/* Whether a txn call failed with code and e because etcd found one of its
 * lists longer than its --max-txn-ops allows (down the nesting). */
bool lr_etcd_too_many_ops(int code, const lr_err *e);

/* The txn request as protobuf-c will pack it (borrowed; for tests that
 * check what goes on the wire). */
const ProtobufCMessage *lr_txn_request(const lr_txn *t);

/* A view of kv in out; the key is copied, terminated, into keybuf (at least
 * kv->key.len + 1 bytes); the value is borrowed from kv. */
void lr_kv_view(lr_kv *out, const Mvccpb__KeyValue *kv, char *keybuf);

/* The range_end etcd needs for key with flags (LR_KEY_PREFIX) into buf
 * (strlen(key) + 1 bytes); returns its length, 0 for none. */
size_t lr_range_end(const char *key, int flags, char *buf);

/* The end of the range of keys that start with prefix: prefix with its last
 * byte incremented (bytes 0xff dropped). Writes at most len(prefix)+1 bytes
 * into out and returns its length; 0 means "no end" (use "\0"). */
size_t lr_prefix_end(const char *prefix, char *out);

#endif
