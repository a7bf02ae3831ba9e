/* arena.c - see arena.h. Small pieces are cut from the newest chunk one
 * after another; a large one gets a chunk of its own, put behind the
 * newest so that its room stays in use. */
#include "base/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct lr_arena_chunk {
	struct lr_arena_chunk *next;
	size_t used, cap;
	max_align_t data[];
};

void lr_arena_init(lr_arena *a, size_t chunk_size)
{
	a->chunks = NULL;
	a->chunk_size = chunk_size < 64 ? 64 : chunk_size;
}

static struct lr_arena_chunk *new_chunk(size_t cap)
{
	if (cap > SIZE_MAX - sizeof(struct lr_arena_chunk))
		return NULL;
	struct lr_arena_chunk *c = malloc(sizeof(*c) + cap);
	if (c != NULL) {
		c->next = NULL;
		c->used = 0;
		c->cap = cap;
	}
	return c;
}

void *lr_arena_alloc(lr_arena *a, size_t n, int zero)
{
	const size_t align = _Alignof(max_align_t);
	if (n > (size_t)-1 - align)
		return NULL;
	size_t need = (n + align - 1) / align * align;
	if (need == 0)
		need = align;
	struct lr_arena_chunk *c = a->chunks;
	void *p;
	if (need > a->chunk_size / 2) {
		struct lr_arena_chunk *big = new_chunk(need);
		if (big == NULL)
			return NULL;
		big->used = need;
		if (c != NULL) {
			big->next = c->next;
			c->next = big;
		} else {
			a->chunks = big;
		}
		p = big->data;
	} else {
		if (c == NULL || c->cap - c->used < need) {
			c = new_chunk(a->chunk_size);
			if (c == NULL)
				return NULL;
			c->next = a->chunks;
			a->chunks = c;
		}
		p = (char *)c->data + c->used;
		c->used += need;
	}
	if (zero)
		memset(p, 0, n);
	return p;
}

void lr_arena_clear(lr_arena *a)
{
	while (a->chunks != NULL) {
		struct lr_arena_chunk *c = a->chunks;
		a->chunks = c->next;
		free(c);
	}
}
