/* utf8.c - text made fit for JSON (see utf8.h). Pure; any thread. */
#include "base/utf8.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

size_t lr_utf8_char_len(const unsigned char *s, size_t n)
{
	unsigned int c = s[0], cp, min;
	size_t len;

	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF) {
		len = 2;
		min = 0x80;
	} else if (c >= 0xE0 && c <= 0xEF) {
		len = 3;
		min = 0x800;
	} else if (c >= 0xF0 && c <= 0xF4) {
		len = 4;
		min = 0x10000;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	cp = c & (0x3Fu >> (len - 1));
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3F);
	}
	if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
		return 0;
	return len;
}

size_t lr_utf8_escape(const char *s, size_t len, size_t max_chars, char *buf, size_t size)
{
	size_t out = 0, i = 0;
	for (size_t shown = 0; i < len && shown < max_chars; shown++) {
		const unsigned char *p = (const unsigned char *)s + i;
		size_t k = lr_utf8_char_len(p, len - i);
		bool control = (k == 1 && (*p < 0x20 || *p == 0x7f)) ||
		               (k == 2 && p[0] == 0xc2 && p[1] < 0xa0);
		bool escaped = k == 0 || control;
		if (k == 0)
			k = 1;
		if (out + (escaped ? 4 * k : k) >= size)
			break;
		for (size_t j = 0; escaped && j < k; j++, out += 4)
			snprintf(buf + out, 5, "\\x%02x", p[j]);
		if (!escaped) {
			memcpy(buf + out, p, k);
			out += k;
		}
		i += k;
	}
	if (size > 0)
		buf[out] = '\0';
	return i;
}

size_t lr_utf8_whole(const char *s, size_t n)
{
	size_t i = n, back = 0;

	while (i > 0 && back < 3 && ((unsigned char)s[i - 1] & 0xC0) == 0x80) {
		i--;
		back++;
	}
	if (i == 0)
		return n;
	unsigned char lead = (unsigned char)s[i - 1];
	size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
	if (n - (i - 1) < need && i - 1 > 0)
		return i - 1;
	return n;
}

json_t *lr_json_string_lossy(const char *s)
{
	json_t *j = json_string(s);
	if (j != NULL)
		return j;
	size_t n = strlen(s);
	/* U+FFFD is 3 bytes: at most three times as long. */
	char *buf = n < ((size_t)-1) / 3 ? malloc(3 * n + 1) : NULL;
	if (buf == NULL)
		return NULL;
	size_t out = 0;
	for (size_t i = 0; i < n;) {
		size_t k = lr_utf8_char_len((const unsigned char *)s + i, n - i);
		if (k == 0) {
			memcpy(buf + out, "\xEF\xBF\xBD", 3);
			out += 3;
			i++;
			continue;
		}
		memcpy(buf + out, s + i, k);
		out += k;
		i += k;
	}
	j = json_stringn(buf, out);
	free(buf);
	return j;
}
