/* lock_keys.c - the keys of locks, slots and requests (see lock_keys.h).
 * Pure functions; any thread. */
#include "client/lock_keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "etcd/kv.h"

void lr_holder_of_task(const char *id, char holder[LR_HOLDER_SIZE])
{
	snprintf(holder, LR_HOLDER_SIZE, "task:%s", id);
}

/* prefix + kind + rest, never overflowing (keys are built from validated
 * parts, which always fit). */
static void build(const lr_client *c, const char *kind, const char *rest,
                  char key[LR_LOCK_KEY_SIZE])
{
	lr_key(c, kind, "", key); /* < LR_KEY_SIZE, half of the room */
	size_t n = strlen(key);
	size_t len = strnlen(rest, LR_LOCK_KEY_SIZE - 1 - n);
	memcpy(key + n, rest, len);
	key[n + len] = '\0';
}

void lr_lock_key(const lr_client *c, const char *path, lr_lock_mode m, const char *holder,
                 char key[LR_LOCK_KEY_SIZE])
{
	char rest[LR_LOCK_KEY_SIZE];
	snprintf(rest, sizeof(rest), "%s/#%d%s/%s", path, (int)m, lr_lock_mode_name(m), holder);
	build(c, LR_K_LOCKS, rest, key);
}

void lr_lock_mode_range(const lr_client *c, const char *path, int lo, int hi,
                        char from[LR_LOCK_KEY_SIZE], char to[LR_LOCK_KEY_SIZE])
{
	char rest[LR_LOCK_KEY_SIZE];
	snprintf(rest, sizeof(rest), "%s/#%d", path, lo);
	build(c, LR_K_LOCKS, rest, from);
	snprintf(rest, sizeof(rest), "%s/#%d", path, hi + 1);
	build(c, LR_K_LOCKS, rest, to);
}

bool lr_lock_key_parse(const lr_client *c, const char *key, char path[LR_LOCK_PATH_SIZE],
                       lr_lock_mode *m, const char **holder)
{
	const char *rest = lr_key_id(c, LR_K_LOCKS, key);
	const char *mark = rest != NULL ? strstr(rest, "/#") : NULL;
	if (mark == NULL || (size_t)(mark - rest) >= LR_LOCK_PATH_SIZE)
		return false;
	memcpy(path, rest, (size_t)(mark - rest));
	path[mark - rest] = '\0';
	const char *slash = strchr(mark + 2, '/');
	if (slash == NULL || mark[2] < '0' || mark[2] >= '0' + LR_LOCK_MODES)
		return false;
	char name[8];
	size_t len = (size_t)(slash - (mark + 3));
	if (len == 0 || len >= sizeof(name))
		return false;
	memcpy(name, mark + 3, len);
	name[len] = '\0';
	int mode = lr_lock_mode_parse(name);
	if (mode != mark[2] - '0' || !lr_lock_path_valid(path) || slash[1] == '\0')
		return false;
	*m = (lr_lock_mode)mode;
	*holder = slash + 1;
	return true;
}

void lr_slot_key(const lr_client *c, const char *pool, int index, char key[LR_LOCK_KEY_SIZE])
{
	char rest[LR_LOCK_KEY_SIZE];
	snprintf(rest, sizeof(rest), "%s/%05d", pool, index);
	build(c, LR_K_SLOTS, rest, key);
}

void lr_slot_range(const lr_client *c, const char *pool, int from, char lo[LR_LOCK_KEY_SIZE],
                   char hi[LR_LOCK_KEY_SIZE])
{
	lr_slot_key(c, pool, from, lo);
	char dir[LR_LOCK_KEY_SIZE], rest[LR_LOCK_KEY_SIZE];
	snprintf(rest, sizeof(rest), "%s/", pool);
	build(c, LR_K_SLOTS, rest, dir);
	hi[lr_prefix_end(dir, hi)] = '\0';
}

void lr_limit_key(const lr_client *c, const char *pool, int n, int index,
                  char key[LR_LOCK_KEY_SIZE])
{
	char rest[LR_LOCK_KEY_SIZE];
	snprintf(rest, sizeof(rest), "%s/%05d/%05d", pool, n, index);
	build(c, LR_K_LIMITS, rest, key);
}

void lr_limit_range(const lr_client *c, const char *pool, int below, char lo[LR_LOCK_KEY_SIZE],
                    char hi[LR_LOCK_KEY_SIZE])
{
	char rest[LR_LOCK_KEY_SIZE];
	snprintf(rest, sizeof(rest), "%s/", pool);
	build(c, LR_K_LIMITS, rest, lo);
	snprintf(rest, sizeof(rest), "%s/%05d", pool, below);
	build(c, LR_K_LIMITS, rest, hi);
}

bool lr_slot_key_parse(const lr_client *c, const char *key,
                       char pool[LR_LOCK_SEG_MAX + 1], int *index)
{
	const char *rest = lr_key_id(c, LR_K_SLOTS, key);
	const char *slash = rest != NULL ? strchr(rest, '/') : NULL;
	if (slash == NULL || slash == rest || (size_t)(slash - rest) > LR_LOCK_SEG_MAX)
		return false;
	memcpy(pool, rest, (size_t)(slash - rest));
	pool[slash - rest] = '\0';
	char *end;
	long i = strtol(slash + 1, &end, 10);
	if (strlen(slash + 1) != 5 || *end != '\0' || i < 0 || i >= LR_LIMIT_N_MAX)
		return false;
	*index = (int)i;
	return true;
}

void lr_wants_key(const lr_client *c, const char *holder, char key[LR_LOCK_KEY_SIZE])
{
	build(c, LR_K_WANTS, holder, key);
}

/* The wants/ value; not_before (a JSON string, may be NULL) and after (an
 * array of ids, may be NULL) for a task that waits for its start time or
 * for other tasks; within (NULL-terminated, may be NULL) the holders the
 * request is made within. */
static char *wants_value(const json_t *locks, const json_t *limits, const json_t *not_before,
                         const json_t *after, const char *const *within)
{
	if (locks == NULL && limits == NULL)
		return NULL;
	char since[LR_TIME_BUF];
	lr_rfc3339_now(since);
	json_t *v = json_pack("{s:s}", "since", since);
	/* Absent, not null, where the request names none. */
	if (v != NULL && locks != NULL && json_object_set(v, "locks", (json_t *)locks) != 0)
		json_decref(v), v = NULL;
	if (v != NULL && limits != NULL && json_object_set(v, "limits", (json_t *)limits) != 0)
		json_decref(v), v = NULL;
	if (v != NULL && json_is_string(not_before) &&
	    json_object_set(v, "not_before", (json_t *)not_before) != 0)
		json_decref(v), v = NULL;
	if (v != NULL && json_array_size(after) > 0 &&
	    json_object_set(v, "after", (json_t *)after) != 0)
		json_decref(v), v = NULL;
	if (v != NULL && within != NULL && within[0] != NULL) {
		json_t *holders = json_array();
		for (const char *const *h = within; holders != NULL && *h != NULL; h++)
			if (json_array_append_new(holders, json_string(*h)) != 0)
				json_decref(holders), holders = NULL;
		if (json_object_set_new(v, "within", holders) != 0) /* fails on NULL */
			json_decref(v), v = NULL;
	}
	char *text = v != NULL ? json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
	json_decref(v);
	return text;
}

char *lr_wants_value(const json_t *locks, const json_t *limits)
{
	return wants_value(locks, limits, NULL, NULL, NULL);
}

char *lr_wants_of_spec(const char *spec, size_t len, const char *const *within)
{
	/* Most specs ask for nothing: no parse for them. */
	if (memmem(spec, len, "\"locks\"", 7) == NULL && memmem(spec, len, "\"limits\"", 8) == NULL)
		return NULL;
	json_t *s = json_loadb(spec, len, 0, NULL);
	char *text = wants_value(json_object_get(s, "locks"), json_object_get(s, "limits"),
	                         json_object_get(s, "not_before"), json_object_get(s, "after"),
	                         within);
	json_decref(s);
	return text;
}
