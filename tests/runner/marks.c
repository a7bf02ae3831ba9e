/* marks.c - reading the steps' marker lines back (see marks.h). */
#include "marks.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool parse(const char *line, mark *m)
{
	char kind[8];
	memset(m, 0, sizeof(*m));
	int got = sscanf(line, "%7s %63s %" SCNd64 " %" SCNd64 " %63s %" SCNd64 " %ld",
	                 kind, m->task, &m->step, &m->attempt, m->runner, &m->fence,
	                 &m->pid);
	if (got != 7)
		return false;
	m->end = strcmp(kind, "end") == 0;
	return m->end || strcmp(kind, "start") == 0;
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
