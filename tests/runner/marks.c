/* marks.c - reading the steps' marker lines back, and finding executions
 * of one step that overlapped (see marks.h). */
#include "marks.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool parse(const char *line, mark *m)
{
	char kind[8];
	memset(m, 0, sizeof(*m));
	int got = sscanf(line, "%7s %63s %" SCNd64 " %" SCNd64 " %63s %" SCNd64 " %ld %" SCNd64,
	                 kind, m->task, &m->step, &m->attempt, m->runner, &m->fence,
	                 &m->pid, &m->ns);
	if (got != 8)
		return false;
	if (strcmp(kind, "start") == 0)
		m->kind = MARK_KIND_START;
	else if (strcmp(kind, "hb") == 0)
		m->kind = MARK_KIND_HB;
	else if (strcmp(kind, "end") == 0)
		m->kind = MARK_KIND_END;
	else
		return false;
	m->end = m->kind == MARK_KIND_END;
	return true;
}

int marks_read(const char *dir, mark **out, size_t *n)
{
	*out = NULL;
	*n = 0;
	char path[512];
	snprintf(path, sizeof(path), "%s/marks", dir);
	FILE *fp = fopen(path, "r");
	if (fp == NULL)
		return 0;
	size_t cap = 0;
	char line[512];
	mark m;
	while (fgets(line, sizeof(line), fp) != NULL) {
		if (!parse(line, &m))
			continue;
		if (*n == cap) {
			cap = cap ? cap * 2 : 256;
			mark *grown = realloc(*out, cap * sizeof(**out));
			if (grown == NULL) {
				fclose(fp);
				return -1;
			}
			*out = grown;
		}
		(*out)[(*n)++] = m;
	}
	fclose(fp);
	return 0;
}

/* The executions, each once, in the order of their first mark. The shell's
 * pid tells executions apart: two at once cannot share one. */
static marks_exec *executions(const mark *m, size_t n, size_t *count)
{
	marks_exec *e = calloc(n > 0 ? n : 1, sizeof(*e));
	*count = 0;
	if (e == NULL)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		size_t j = *count;
		/* The latest execution with this pid and step is this one. */
		for (size_t k = *count; k-- > 0;)
			if (e[k].pid == m[i].pid && e[k].step == m[i].step &&
			    strcmp(e[k].task, m[i].task) == 0) {
				j = k;
				break;
			}
		if (j == *count || m[i].kind == MARK_KIND_START) {
			j = (*count)++;
			snprintf(e[j].task, sizeof(e[j].task), "%s", m[i].task);
			e[j].step = m[i].step;
			e[j].pid = m[i].pid;
			e[j].first = i;
			e[j].first_ns = m[i].ns;
		}
		e[j].last = i;
		e[j].last_ns = m[i].ns;
	}
	return e;
}

size_t marks_overlaps(const mark *m, size_t n, int64_t *closest_gap_ns, char *why,
                      size_t size)
{
	size_t count, overlaps = 0;
	int64_t closest = INT64_MAX;
	marks_exec *e = executions(m, n, &count);
	if (why != NULL && size > 0)
		why[0] = '\0';
	for (size_t a = 0; e != NULL && a < count; a++)
		for (size_t b = a + 1; b < count; b++) {
			if (e[b].step != e[a].step || strcmp(e[b].task, e[a].task) != 0)
				continue;
			/* b started after a in file order: a's marks must all come
			 * before b's first. */
			int64_t gap = e[b].first_ns - e[a].last_ns;
			if (gap < closest)
				closest = gap;
			if (e[a].last > e[b].first) {
				if (overlaps == 0 && why != NULL)
					snprintf(why, size, "step %" PRId64 " of %s: the execution of "
					         "pid %ld wrote after the one of pid %ld began (%.1f ms "
					         "later)", e[a].step, e[a].task, e[a].pid, e[b].pid,
					         (double)(e[a].last_ns - e[b].first_ns) / 1e6);
				overlaps++;
			}
			break; /* the next execution of this step is enough */
		}
	free(e);
	if (closest_gap_ns != NULL)
		*closest_gap_ns = closest;
	return overlaps;
}
