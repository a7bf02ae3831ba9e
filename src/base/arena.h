/* arena.h - many small allocations cut from a few chunks, freed at once.
 * For things built or read whole and dropped whole: a txn being built, a
 * reply being read. One arena belongs to one thread at a time. */
#ifndef LR_BASE_ARENA_H
#define LR_BASE_ARENA_H

#include <stddef.h>

struct lr_arena_chunk;

typedef struct lr_arena {
	struct lr_arena_chunk *chunks; /* the first one is where small pieces go */
	size_t chunk_size;             /* of each chunk for small pieces */
} lr_arena;

/* An empty arena whose chunks for small pieces hold chunk_size bytes;
 * it allocates nothing until asked. */
void lr_arena_init(lr_arena *a, size_t chunk_size);

/* n bytes aligned for any type, zeroed when `zero`; NULL when out of
 * memory. A piece over half a chunk gets a chunk of its own. */
void *lr_arena_alloc(lr_arena *a, size_t n, int zero);

/* Frees every chunk; the arena is empty again and may be used on. */
void lr_arena_clear(lr_arena *a);

#endif
