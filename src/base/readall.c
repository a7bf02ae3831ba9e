/* readall.c - a whole stream read at once. */
#include "base/readall.h"

#include <errno.h>
#include <stdlib.h>

int lr_read_all(FILE *f, size_t max, char **text, size_t *len)
{
	size_t cap = 16 * 1024, n = 0;
	char *buf = malloc(cap + 1);

	if (buf == NULL) {
		errno = ENOMEM;
		return -1;
	}
	for (;;) {
		size_t want = cap - n;
		if (want > max + 1 - n)
			want = max + 1 - n;
		size_t got = fread(buf + n, 1, want, f);
		n += got;
		if (ferror(f) || got < want || n > max)
			break;
		char *bigger = realloc(buf, cap * 2 + 1);
		if (bigger == NULL) {
			free(buf);
			errno = ENOMEM;
			return -1;
		}
		buf = bigger;
		cap *= 2;
	}
	if (ferror(f)) {
		int e = errno != 0 ? errno : EIO;
		free(buf);
		errno = e;
		return -1;
	}
	buf[n] = '\0';
	*text = buf;
	*len = n;
	return 0;
}
