/* xalloc.c: aborting allocators for fixed-size internal objects, and the
 * bounds on what glibc's malloc keeps for the long-running services. */
#include "common/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

int array_grow(void **ptr, size_t *cap, size_t need, size_t elem)
{
	size_t n = *cap ? *cap : 16;
	void *p;

	if (need <= *cap)
		return 0;
	while (n < need) {
		if (n > SIZE_MAX / 2)
			return -ENOMEM;
		n *= 2;
	}
	if (!elem || n > SIZE_MAX / elem)
		return -ENOMEM;
	p = realloc(*ptr, n * elem);
	if (!p)
		return -ENOMEM;
	memset((char *)p + *cap * elem, 0, (n - *cap) * elem);
	*ptr = p;
	*cap = n;
	return 0;
}

void xgrow(void **ptr, size_t *cap, size_t need, size_t elem)
{
	if (array_grow(ptr, cap, need, elem))
		oom(need * elem);
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

void xalloc_bound_arenas(void)
{
	mallopt(M_ARENA_MAX, XALLOC_ARENAS);
	/* Fixed thresholds (glibc raises both as big blocks are freed, up to
	 * 32 and 64 MB): a block of XALLOC_MMAP_MIN or more is mapped for
	 * itself and unmapped when freed, and a heap's free top past
	 * XALLOC_TRIM_MIN is given back at once -- malloc_trim gives back the
	 * free chunks inside the heaps, not the tops of the threads' ones. */
	mallopt(M_MMAP_THRESHOLD, XALLOC_MMAP_MIN);
	mallopt(M_TRIM_THRESHOLD, XALLOC_TRIM_MIN);
}

/* This process's resident bytes, 0 when unknown. */
static size_t resident(void)
{
	static int fd = -1;
	char buf[128];
	unsigned long size, pages;
	ssize_t n;

	if (fd < 0)
		fd = open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
	n = fd < 0 ? -1 : pread(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	if (sscanf(buf, "%lu %lu", &size, &pages) != 2)
		return 0;
	return pages * (size_t)sysconf(_SC_PAGESIZE);
}

void xalloc_give_back(void)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static size_t base; /* resident after the last trim, or less since */
	size_t now;

	/* One thread at a time: another one trimming gives back what this
	 * one would. */
	if (pthread_mutex_trylock(&lock))
		return;
	/* Trim when the process holds XALLOC_GIVE_BACK_MIN more than after
	 * the last trim: what is in use stays resident, and becomes the next
	 * base, so memory that grew for good costs one trim, not one a
	 * request. */
	now = resident();
	if (now > base + XALLOC_GIVE_BACK_MIN) {
		malloc_trim(0);
		base = resident();
	} else if (now < base) {
		base = now;
	}
	pthread_mutex_unlock(&lock);
}
