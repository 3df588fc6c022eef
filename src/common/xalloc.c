/* xalloc.c: aborting allocators for fixed-size internal objects. */
#include "common/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void oom(size_t size)
{
	fprintf(stderr, "sonde: out of memory allocating %zu bytes\n", size);
	abort();
}

void *xmalloc(size_t size)
{
	void *p = malloc(size ? size : 1);

	if (!p)
		oom(size);
	return p;
}

void *xcalloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	if (!p)
		oom(n * size);
	return p;
}

void *xrealloc(void *ptr, size_t size)
{
	void *p = realloc(ptr, size ? size : 1);

	if (!p)
		oom(size);
	return p;
}

void xgrow(void **ptr, size_t *cap, size_t need, size_t elem)
{
	size_t n = *cap ? *cap : 16;

	if (need <= *cap)
		return;
	while (n < need)
		n *= 2;
	*ptr = xrealloc(*ptr, n * elem);
	*cap = n;
}

char *xstrdup(const char *s)
{
	char *p = strdup(s);

	if (!p)
		oom(strlen(s) + 1);
	return p;
}

char *xstrndup(const char *s, size_t n)
{
	char *p = strndup(s, n);

	if (!p)
		oom(n + 1);
	return p;
}
