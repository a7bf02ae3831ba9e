/* utf8.h - text from outside (a step's stderr, a name cut short by a
 * format) made fit for JSON, which holds only valid UTF-8. Pure; any
 * thread. */
#ifndef LR_BASE_UTF8_H
#define LR_BASE_UTF8_H

#include <stddef.h>

#include <jansson.h>

/* Length of the valid UTF-8 character at s (n bytes available), 0 when the
 * bytes there are not one (overlong forms and surrogates included). */
size_t lr_utf8_char_len(const unsigned char *s, size_t n);
/* The longest prefix of s[0..n) that does not end inside a character (a
 * text cut short, split or truncated, stays valid on both sides). */
size_t lr_utf8_whole(const char *s, size_t n);
/* A JSON string of s, each byte that is not part of a valid character
 * replaced by U+FFFD. NULL when out of memory. */
json_t *lr_json_string_lossy(const char *s);
/* s (len bytes) for a message, into buf (size bytes, always terminated):
 * valid characters as they are; each byte of an invalid sequence and of a
 * control (C0, DEL, C1: they could drive a terminal) as \xNN. At most
 * max_chars characters, and whole ones only. Returns how many bytes of s
 * were written out (len when all). */
size_t lr_utf8_escape(const char *s, size_t len, size_t max_chars, char *buf, size_t size);

#endif
