/* lockset.c - lock and pool requests: validation, the lock lattice, the
 * nodes a request locks. Pure functions; any thread. */
#include "records/lockset.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "records/spec.h"

static const char *const mode_names[LR_LOCK_MODES] = { "IS", "S", "SIX", "X", "IX" };

/* compatible[a][b], ranks as in lr_lock_mode. */
static const bool compatible[LR_LOCK_MODES][LR_LOCK_MODES] = {
	/*          IS     S      SIX    X      IX */
	/* IS  */ { true,  true,  true,  false, true  },
	/* S   */ { true,  true,  false, false, false },
	/* SIX */ { true,  false, false, false, false },
	/* X   */ { false, false, false, false, false },
	/* IX  */ { true,  false, false, false, true  },
};

int lr_lock_mode_parse(const char *s)
{
	for (int m = 0; s != NULL && m < LR_LOCK_MODES; m++)
		if (strcmp(s, mode_names[m]) == 0)
			return m;
	return -1;
}

const char *lr_lock_mode_name(lr_lock_mode m)
{
	return m >= 0 && m < LR_LOCK_MODES ? mode_names[m] : "?";
}

bool lr_lock_compatible(lr_lock_mode a, lr_lock_mode b)
{
	return compatible[a][b];
}

lr_lock_mode lr_lock_intention(lr_lock_mode m)
{
	return m == LR_LOCK_IS || m == LR_LOCK_S ? LR_LOCK_IS : LR_LOCK_IX;
}

lr_lock_mode lr_lock_join(lr_lock_mode a, lr_lock_mode b)
{
	if (a == b)
		return a;
	if (a == LR_LOCK_X || b == LR_LOCK_X)
		return LR_LOCK_X;
	if (a == LR_LOCK_IS)
		return b;
	if (b == LR_LOCK_IS)
		return a;
	return LR_LOCK_SIX; /* two of IX, S, SIX, not equal */
}

int lr_lock_conflicts(lr_lock_mode m, int lo[2], int hi[2])
{
	/* With the ranks IS < S < SIX < X < IX, each set is one run. */
	int n = 0;
	for (int r = 0; r < LR_LOCK_MODES; r++) {
		if (compatible[m][r])
			continue;
		if (n > 0 && hi[n - 1] == r - 1) {
			hi[n - 1] = r;
		} else {
			lo[n] = hi[n] = r;
			n++;
		}
	}
	return n;
}

/* ---- paths ------------------------------------------------------------------ */

bool lr_lock_path_valid(const char *path)
{
	if (path == NULL || path[0] == '\0')
		return false;
	int segs = 0;
	const char *p = path;
	for (;;) {
		size_t len = 0;
		while (p[len] != '\0' && p[len] != '/') {
			if (!lr_id_char(p[len]))
				return false;
			len++;
		}
		if (len < 1 || len > LR_LOCK_SEG_MAX || ++segs > LR_LOCK_DEPTH_MAX)
			return false;
		if (p[len] == '\0')
			return true;
		p += len + 1;
	}
}

/* ---- building a request ------------------------------------------------------ */

/* While parsing: fixed room, packed into one block at the end. */
struct build {
	size_t n_nodes;
	struct { char path[LR_LOCK_PATH_SIZE]; lr_lock_mode mode; bool named; }
	    nodes[LR_LOCK_NODES_MAX];
	size_t n_limits;
	lr_limit limits[LR_LIMITS_MAX];
};

/* Lock path in mode m (joined with what the node has already). */
static void add_node(struct build *b, const char *path, size_t len, lr_lock_mode m, bool named)
{
	for (size_t i = 0; i < b->n_nodes; i++) {
		if (strlen(b->nodes[i].path) == len && memcmp(b->nodes[i].path, path, len) == 0) {
			b->nodes[i].mode = lr_lock_join(b->nodes[i].mode, m);
			b->nodes[i].named = b->nodes[i].named || named;
			return;
		}
	}
	size_t i = b->n_nodes++;
	memcpy(b->nodes[i].path, path, len);
	b->nodes[i].path[len] = '\0';
	b->nodes[i].mode = m;
	b->nodes[i].named = named;
}

static int cmp_nodes(const void *a, const void *b)
{
	return strcmp(((const lr_lock_node *)a)->path, ((const lr_lock_node *)b)->path);
}

static int cmp_limits(const void *a, const void *b)
{
	return strcmp(((const lr_limit *)a)->key, ((const lr_limit *)b)->key);
}

static int parse_locks(const json_t *locks, struct build *out, lr_err *err)
{
	if (!json_is_object(locks))
		return lr_err_set(err, LR_EINVAL, "locks: expected an object of \"PATH\": \"MODE\"");
	if (json_object_size(locks) > LR_LOCKS_MAX)
		return lr_err_set(err, LR_EINVAL, "locks: %zu entries, at most %d",
		                  json_object_size(locks), LR_LOCKS_MAX);
	const char *path;
	json_t *v;
	json_object_foreach((json_t *)locks, path, v) {
		if (!lr_lock_path_valid(path))
			return lr_err_set(err, LR_EINVAL,
			                  "locks.%.80s: a path is 1 to %d segments of 1 to %d of "
			                  "A-Z a-z 0-9 . _ : - joined by /", path,
			                  LR_LOCK_DEPTH_MAX, LR_LOCK_SEG_MAX);
		int m = lr_lock_mode_parse(json_string_value(v));
		if (m < 0)
			return lr_err_set(err, LR_EINVAL,
			                  "locks.%s: expected one of \"IS\", \"IX\", \"S\", \"SIX\", \"X\"",
			                  path);
		/* Every ancestor in the mode's intention, then the path. */
		for (const char *slash = strchr(path, '/'); slash != NULL;
		     slash = strchr(slash + 1, '/'))
			add_node(out, path, (size_t)(slash - path),
			         lr_lock_intention((lr_lock_mode)m), false);
		add_node(out, path, strlen(path), (lr_lock_mode)m, true);
	}
	if (out->n_nodes > LR_LOCK_NODES_TXN)
		return lr_err_set(err, LR_EINVAL,
		                  "locks: %zu nodes with the paths' ancestors, at most %d (a "
		                  "claim takes them all in one etcd txn): share more of the "
		                  "paths' prefixes, or lock a common ancestor",
		                  out->n_nodes, LR_LOCK_NODES_TXN);
	return 0;
}

static int parse_limits(const json_t *limits, struct build *out, lr_err *err)
{
	if (!json_is_object(limits))
		return lr_err_set(err, LR_EINVAL, "limits: expected an object of \"KEY\": N");
	if (json_object_size(limits) > LR_LIMITS_MAX)
		return lr_err_set(err, LR_EINVAL, "limits: %zu entries, at most %d",
		                  json_object_size(limits), LR_LIMITS_MAX);
	const char *key;
	json_t *v;
	json_object_foreach((json_t *)limits, key, v) {
		if (strchr(key, '/') != NULL || !lr_lock_path_valid(key))
			return lr_err_set(err, LR_EINVAL,
			                  "limits.%.80s: a key is 1 to %d of A-Z a-z 0-9 . _ : -",
			                  key, LR_LOCK_SEG_MAX);
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > LR_LIMIT_N_MAX)
			return lr_err_set(err, LR_EINVAL,
			                  "limits.%s: expected a whole number from 1 to %d", key,
			                  LR_LIMIT_N_MAX);
		lr_limit *l = &out->limits[out->n_limits++];
		snprintf(l->key, sizeof(l->key), "%s", key);
		l->n = (int)json_integer_value(v);
	}
	return 0;
}

/* One block: the struct, the nodes, the limits, the paths. */
static lr_lockset *pack(const struct build *b)
{
	size_t strings = 0;
	for (size_t i = 0; i < b->n_nodes; i++)
		strings += strlen(b->nodes[i].path) + 1;
	size_t size = sizeof(lr_lockset) + b->n_nodes * sizeof(lr_lock_node) +
	              b->n_limits * sizeof(lr_limit) + strings;
	lr_lockset *s = calloc(1, size);
	if (s == NULL)
		return NULL;
	s->nodes = (lr_lock_node *)(s + 1);
	s->limits = (lr_limit *)(s->nodes + b->n_nodes);
	char *str = (char *)(s->limits + b->n_limits);
	s->n_nodes = b->n_nodes;
	for (size_t i = 0; i < b->n_nodes; i++) {
		size_t len = strlen(b->nodes[i].path) + 1;
		memcpy(str, b->nodes[i].path, len);
		s->nodes[i] = (lr_lock_node){ .path = str, .mode = b->nodes[i].mode,
		                              .named = b->nodes[i].named };
		str += len;
	}
	s->n_limits = b->n_limits;
	memcpy(s->limits, b->limits, b->n_limits * sizeof(lr_limit));
	qsort(s->nodes, s->n_nodes, sizeof(s->nodes[0]), cmp_nodes);
	qsort(s->limits, s->n_limits, sizeof(s->limits[0]), cmp_limits);
	return s;
}

int lr_lockset_parse(const json_t *locks, const json_t *limits, lr_lockset **out,
                     lr_err *err)
{
	if (out != NULL)
		*out = NULL;
	if (locks == NULL && limits == NULL)
		return 0;
	struct build *b = calloc(1, sizeof(*b)); /* ~70 KiB: not on a stack */
	if (b == NULL)
		return lr_err_set(err, LR_ENOMEM, "locks: out of memory");
	int rc = locks != NULL ? parse_locks(locks, b, err) : 0;
	if (rc == 0 && limits != NULL)
		rc = parse_limits(limits, b, err);
	if (rc == 0 && out != NULL && b->n_nodes + b->n_limits > 0 &&
	    (*out = pack(b)) == NULL)
		rc = lr_err_set(err, LR_ENOMEM, "locks: out of memory");
	free(b);
	return rc;
}

/* bsearch's: a path (or pool key) against a node (or limit). */
static int cmp_path_node(const void *path, const void *node)
{
	return strcmp(path, ((const lr_lock_node *)node)->path);
}

static int cmp_key_limit(const void *key, const void *limit)
{
	return strcmp(key, ((const lr_limit *)limit)->key);
}

bool lr_lockset_has_node(const lr_lockset *set, const char *path)
{
	return bsearch(path, set->nodes, set->n_nodes, sizeof(*set->nodes), cmp_path_node) != NULL;
}

bool lr_lockset_has_pool(const lr_lockset *set, const char *key)
{
	return bsearch(key, set->limits, set->n_limits, sizeof(*set->limits), cmp_key_limit) !=
	       NULL;
}

bool lr_locksets_conflict(const lr_lockset *a, const lr_lockset *b)
{
	if (a == NULL || b == NULL)
		return false;
	/* Both sorted: one merge pass over each list. */
	for (size_t i = 0, j = 0; i < a->n_nodes && j < b->n_nodes;) {
		int c = strcmp(a->nodes[i].path, b->nodes[j].path);
		if (c == 0 && !lr_lock_compatible(a->nodes[i].mode, b->nodes[j].mode))
			return true;
		i += c <= 0;
		j += c >= 0;
	}
	for (size_t i = 0, j = 0; i < a->n_limits && j < b->n_limits;) {
		int c = strcmp(a->limits[i].key, b->limits[j].key);
		if (c == 0)
			return true;
		i += c < 0;
		j += c > 0;
	}
	return false;
}
