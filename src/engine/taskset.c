/* taskset.c - the runner's view of tasks: a hash map by id and a min-heap
 * by create revision with lazy deletion. Loop thread only. */
#include "engine/taskset.h"

#include "records/schedule.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t hash_id(const char *id)
{
	uint64_t h = 1469598103934665603ULL; /* FNV-1a */
	for (const unsigned char *p = (const unsigned char *)id; *p; p++) {
		h ^= *p;
		h *= 1099511628211ULL;
	}
	return h;
}

int lr_taskset_init(lr_taskset *s)
{
	memset(s, 0, sizeof(*s));
	s->nbuckets = 1024;
	s->buckets = calloc(s->nbuckets, sizeof(*s->buckets));
	return s->buckets != NULL ? 0 : LR_ENOMEM;
}

static void free_entry(lr_taskset *s, lr_entry *e)
{
	lr_taskset_drop_spec(s, e);
	free(e->after);
	free(e);
}

void lr_taskset_free(lr_taskset *s)
{
	/* Removed entries still in the heap are owned by the heap. */
	for (size_t i = 0; i < s->heap_len; i++) {
		lr_entry *e = s->heap[i];
		if (e->removed && --e->heap_refs == 0)
			free_entry(s, e);
		else if (!e->removed)
			e->heap_refs--;
	}
	for (size_t i = 0; i < s->nbuckets; i++) {
		lr_entry *e = s->buckets[i];
		while (e != NULL) {
			lr_entry *n = e->next;
			free_entry(s, e);
			e = n;
		}
	}
	free(s->buckets);
	free(s->heap);
	memset(s, 0, sizeof(*s));
}

lr_entry *lr_taskset_find(lr_taskset *s, const char *id)
{
	for (lr_entry *e = s->buckets[hash_id(id) % s->nbuckets]; e != NULL; e = e->next)
		if (strcmp(e->id, id) == 0)
			return e;
	return NULL;
}

static void grow_table(lr_taskset *s)
{
	size_t nb = s->nbuckets * 2;
	lr_entry **b = calloc(nb, sizeof(*b));
	if (b == NULL)
		return; /* keep the longer chains */
	for (size_t i = 0; i < s->nbuckets; i++) {
		lr_entry *e = s->buckets[i];
		while (e != NULL) {
			lr_entry *n = e->next;
			size_t h = hash_id(e->id) % nb;
			e->next = b[h];
			b[h] = e;
			e = n;
		}
	}
	free(s->buckets);
	s->buckets = b;
	s->nbuckets = nb;
}

/* ---- heap ---------------------------------------------------------------- */

/* Dispatch order: higher priority first, then older. */
static bool older(const lr_entry *a, const lr_entry *b)
{
	if (a->priority != b->priority)
		return a->priority > b->priority;
	return a->create_rev < b->create_rev;
}

static void heap_push(lr_taskset *s, lr_entry *e)
{
	if (s->heap_len == s->heap_cap) {
		size_t nc = s->heap_cap ? s->heap_cap * 2 : 256;
		lr_entry **nh = realloc(s->heap, nc * sizeof(*nh));
		if (nh == NULL)
			return; /* found again by the next re-read */
		s->heap = nh;
		s->heap_cap = nc;
	}
	size_t i = s->heap_len++;
	e->heap_refs++;
	while (i > 0) {
		size_t p = (i - 1) / 2;
		if (!older(e, s->heap[p]))
			break;
		s->heap[i] = s->heap[p];
		i = p;
	}
	s->heap[i] = e;
}

static lr_entry *heap_pop(lr_taskset *s)
{
	if (s->heap_len == 0)
		return NULL;
	lr_entry *top = s->heap[0];
	lr_entry *last = s->heap[--s->heap_len];
	size_t i = 0;
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		const lr_entry *best = last;
		if (l < s->heap_len && older(s->heap[l], best)) {
			m = l;
			best = s->heap[l];
		}
		if (r < s->heap_len && older(s->heap[r], best))
			m = r;
		if (m == i)
			break;
		s->heap[i] = s->heap[m];
		i = m;
	}
	if (s->heap_len > 0)
		s->heap[i] = last;
	top->heap_refs--;
	return top;
}

/* ---- entries -------------------------------------------------------------- */

static void count_state(lr_taskset *s, enum lr_entry_state st, int delta)
{
	if (st == LR_ENTRY_PENDING)
		s->pending += delta;
	else
		s->claimed += delta;
}

lr_entry *lr_taskset_add(lr_taskset *s, const char *id, int64_t create_rev,
                         enum lr_entry_state st)
{
	return lr_taskset_add_sched(s, id, create_rev, st, NULL);
}

static void take_sched(lr_entry *e, lr_sched *sc)
{
	e->priority = sc->priority;
	e->not_before_ms = sc->not_before_ms;
	e->after = sc->after;
	e->n_after = (uint8_t)sc->n_after;
	sc->after = NULL;
	sc->n_after = 0;
}

void lr_taskset_set_sched(lr_taskset *s, lr_entry *e, lr_sched *sc)
{
	(void)s;
	if (e->heap_refs > 0 || e->priority != 0 || e->not_before_ms != 0 || e->n_after > 0)
		return;
	free(e->after);
	take_sched(e, sc);
}

lr_entry *lr_taskset_add_sched(lr_taskset *s, const char *id, int64_t create_rev,
                               enum lr_entry_state st, lr_sched *sc)
{
	lr_entry *e = lr_taskset_find(s, id);
	if (e != NULL)
		return e;
	if (s->count >= s->nbuckets)
		grow_table(s);
	size_t id_len = strnlen(id, LR_ID_SIZE - 1);
	e = calloc(1, sizeof(*e) + id_len + 1);
	if (e == NULL)
		return NULL;
	memcpy(e->id, id, id_len);
	e->create_rev = create_rev;
	if (sc != NULL) /* known before it enters the dispatch order, which it sets */
		take_sched(e, sc);
	e->state = st;
	size_t h = hash_id(id) % s->nbuckets;
	e->next = s->buckets[h];
	s->buckets[h] = e;
	s->count++;
	count_state(s, st, +1);
	if (st == LR_ENTRY_PENDING)
		heap_push(s, e);
	return e;
}

void lr_taskset_set_state(lr_taskset *s, lr_entry *e, enum lr_entry_state st)
{
	if (e->state == st)
		return;
	count_state(s, e->state, -1);
	count_state(s, st, +1);
	e->state = st;
	if (st == LR_ENTRY_PENDING && e->heap_refs == 0)
		heap_push(s, e);
}

void lr_taskset_cache_spec(lr_taskset *s, lr_entry *e, const char *v, size_t len)
{
	if (e->spec != NULL || len > LR_SPEC_CACHE_ONE ||
	    s->spec_bytes + len > LR_SPEC_CACHE_TOTAL)
		return;
	e->spec = malloc(len + 1);
	if (e->spec == NULL)
		return;
	memcpy(e->spec, v, len);
	e->spec[len] = '\0';
	e->spec_len = len;
	s->spec_bytes += len;
}

void lr_taskset_drop_spec(lr_taskset *s, lr_entry *e)
{
	if (e->spec == NULL)
		return;
	s->spec_bytes -= e->spec_len;
	free(e->spec);
	e->spec = NULL;
	e->spec_len = 0;
}

void lr_taskset_take_spec(lr_taskset *s, lr_entry *e, char **spec, size_t *len)
{
	*spec = e->spec;
	*len = e->spec_len;
	s->spec_bytes -= e->spec_len;
	e->spec = NULL;
	e->spec_len = 0;
}

void lr_taskset_set_create_rev(lr_taskset *s, lr_entry *e, int64_t create_rev)
{
	(void)s;
	if (e->heap_refs == 0)
		e->create_rev = create_rev;
}

void lr_taskset_remove(lr_taskset *s, lr_entry *e)
{
	lr_entry **pp = &s->buckets[hash_id(e->id) % s->nbuckets];
	while (*pp != NULL && *pp != e)
		pp = &(*pp)->next;
	if (*pp == NULL)
		return;
	*pp = e->next;
	s->count--;
	count_state(s, e->state, -1);
	lr_taskset_drop_spec(s, e);
	if (e->heap_refs > 0)
		e->removed = true; /* freed when it leaves the heap */
	else
		free_entry(s, e);
}

void lr_taskset_clear_remote(lr_taskset *s)
{
	for (size_t i = 0; i < s->nbuckets; i++) {
		lr_entry *e = s->buckets[i];
		while (e != NULL) {
			lr_entry *n = e->next;
			if (e->state != LR_ENTRY_LOCAL) {
				lr_taskset_remove(s, e);
			} else {
				/* What the records say is read again; until its
				 * result is seen, what the worker says of the task
				 * does not end it here (it may have been retried). */
				e->claim_present = false;
				e->claim_lease = 0;
				e->claim_ev_rev = 0;
				e->done_seen = false;
				e->rerun = true;
			}
			e = n;
		}
	}
}

void lr_taskset_local_read(lr_taskset *s, int64_t rev)
{
	for (size_t i = 0; i < s->nbuckets; i++)
		for (lr_entry *e = s->buckets[i]; e != NULL; e = e->next)
			if (e->state == LR_ENTRY_LOCAL && !e->claim_present &&
			    e->claim_ev_rev < rev)
				e->claim_ev_rev = rev;
}

/* Pop up to max pending entries, oldest first, dropping stale heap slots
 * on the way. The caller pushes back those it does not take. */
static size_t pop_pending(lr_taskset *s, size_t max, lr_entry **out)
{
	size_t n = 0;
	while (n < max) {
		lr_entry *e = heap_pop(s);
		if (e == NULL)
			break;
		if (e->removed) {
			if (e->heap_refs == 0)
				free_entry(s, e);
			continue;
		}
		if (e->state != LR_ENTRY_PENDING || e->heap_refs > 0)
			continue; /* stale, or a duplicate still in the heap */
		out[n++] = e;
	}
	return n;
}

#define LR_PASSED_OVER_MAX 2

lr_entry *lr_taskset_pick(lr_taskset *s, size_t spread, lr_rng *rng)
{
	lr_entry *cand[64];
	if (spread == 0)
		spread = 1;
	if (spread > 64)
		spread = 64;
	size_t n = pop_pending(s, spread, cand);
	if (n == 0)
		return NULL;
	/* Spread over the oldest of the highest priority only, each older
	 * one as likely as all younger ones together, so that runners racing
	 * for the same few tasks mostly take different ones; but the oldest
	 * is passed over at most LR_PASSED_OVER_MAX times (a uniform pick left
	 * the oldest of ten last now and then). */
	size_t same = 1;
	while (same < n && cand[same]->priority == cand[0]->priority)
		same++;
	size_t pick = 0;
	if (cand[0]->passed_over < LR_PASSED_OVER_MAX)
		while (pick + 1 < same && lr_rng_below(rng, 2) == 1)
			pick++;
	if (pick != 0)
		cand[0]->passed_over++;
	cand[pick]->passed_over = 0; /* should it come back pending */
	for (size_t i = 0; i < n; i++)
		if (i != pick)
			heap_push(s, cand[i]);
	return cand[pick];
}

size_t lr_taskset_oldest(lr_taskset *s, size_t max, lr_entry **out)
{
	size_t n = pop_pending(s, max, out);
	for (size_t i = 0; i < n; i++)
		heap_push(s, out[i]);
	return n;
}

static bool unread(const lr_entry *e)
{
	return e->spec == NULL && !e->fresh && !e->prefetched;
}

size_t lr_taskset_read_ahead(lr_taskset *s, size_t max, bool now, lr_entry **out)
{
	lr_entry *cand[2 * LR_READ_AHEAD_MAX];
	if (max > LR_READ_AHEAD_MAX)
		max = LR_READ_AHEAD_MAX;
	size_t n = lr_taskset_oldest(s, 2 * max, cand), todo = 0, got = 0;
	for (size_t i = 0; i < n; i++)
		todo += unread(cand[i]);
	if (todo == 0 || (!now && todo < (max + 1) / 2))
		return 0;
	for (size_t i = 0; i < n && got < max; i++)
		if (unread(cand[i])) {
			cand[i]->prefetched = true;
			out[got++] = cand[i];
		}
	return got;
}
