/* sbuf.c: the growable buffer of sbuf.h, doubling from 256 bytes. */
#include "common/sbuf.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sbuf__reserve(struct sbuf *b, size_t more)
{
	size_t need, cap;
	char *nb;

	if (more > SIZE_MAX - b->len - 1)
		return -ENOMEM;
	need = b->len + more + 1;
	if (need <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	nb = realloc(b->buf, cap);
	if (!nb)
		return -ENOMEM;
	b->buf = nb;
	b->cap = cap;
	return 0;
}

int sbuf__add(struct sbuf *b, const void *data, size_t n)
{
	if (sbuf__reserve(b, n))
		return -ENOMEM;
	if (n)
		memcpy(b->buf + b->len, data, n);
	b->len += n;
	b->buf[b->len] = '\0';
	return 0;
}

int sbuf__puts(struct sbuf *b, const char *s)
{
	return sbuf__add(b, s, strlen(s));
}

int sbuf__printf(struct sbuf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || sbuf__reserve(b, (size_t)n))
		return -ENOMEM;
	va_start(ap, fmt);
	vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

char *sbuf__steal(struct sbuf *b, size_t *len)
{
	char *s = b->buf;

	if (len)
		*len = b->len;
	if (!s)
		s = calloc(1, 1);
	b->buf = NULL;
	b->len = b->cap = 0;
	return s;
}

void sbuf__free(struct sbuf *b)
{
	free(b->buf);
	b->buf = NULL;
	b->len = b->cap = 0;
}
