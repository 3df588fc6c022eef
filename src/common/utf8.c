/* utf8.c: the UTF-8 check and repair of utf8.h, one sequence at a time. */
#include "common/utf8.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Length of the valid UTF-8 sequence at s (at most n bytes), or 0. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t len, i;
	uint32_t cp;

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
		cp = c & 0x1f;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		cp = c & 0x0f;
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		cp = c & 0x07;
	} else {
		return 0;
	}
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff))
		return 0;
	return len;
}

bool utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, k;

	while (i < n) {
		k = utf8_seq(p + i, n - i);
		if (!k)
			return false;
		i += k;
	}
	return true;
}

char *utf8_repair(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0, o = 0, k;
	char *out;

	/* Each bad byte grows to 3: bounded by 3n. */
	if (n > (SIZE_MAX - 1) / 3)
		return NULL;
	out = malloc(3 * n + 1);
	if (!out)
		return NULL;
	while (i < n) {
		k = utf8_seq(p + i, n - i);
		if (!k) {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
			continue;
		}
		if (!(k == 1 && !p[i])) {
			memcpy(out + o, p + i, k);
			o += k;
		}
		i += k;
	}
	out[o] = '\0';
	return out;
}

size_t utf8_clean(char *s, size_t n)
{
	unsigned char *p = (unsigned char *)s;
	size_t i = 0, k;

	n = strnlen(s, n);
	while (i < n) {
		k = utf8_seq(p + i, n - i);
		if (k) {
			i += k;
			continue;
		}
		/* A lead byte whose sequence the end cut: drop the rest. */
		if (p[i] >= 0xc2 && p[i] <= 0xf4) {
			size_t want = p[i] >= 0xf0 ? 4 : p[i] >= 0xe0 ? 3 : 2, j = 1;

			while (i + j < n && (p[i + j] & 0xc0) == 0x80)
				j++;
			if (i + j == n && j < want) {
				n = i;
				break;
			}
		}
		p[i++] = '?';
	}
	s[n] = '\0';
	return n;
}

size_t utf8_cut(const char *s, size_t n, size_t max)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t k = 0;

	if (n <= max)
		return n;
	/* s[max] is the first byte left out: while it continues a sequence,
	 * the sequence's start goes too (3 bytes back at most). */
	while (max && k < 3 && (p[max] & 0xc0) == 0x80) {
		max--;
		k++;
	}
	return max;
}
