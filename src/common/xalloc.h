/* xalloc.h: allocation for small, fixed-size objects that abort on OOM, so
 * callers need no error path for them (redis zmalloc). Anything sized by
 * outside input (a file, a record, a request) uses plain malloc and checks,
 * and grows its arrays with array_grow(), which fails cleanly. */
#ifndef SONDE_COMMON_XALLOC_H
#define SONDE_COMMON_XALLOC_H

#include <stddef.h>

void *xmalloc(size_t size);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *ptr, size_t size);
/* Grows *ptr (an array of *cap elements of size elem) to hold at least need
 * elements, doubling from 16; the new elements are zeroed. Returns 0, or
 * -ENOMEM with *ptr and *cap unchanged: for arrays sized by outside input. */
int array_grow(void **ptr, size_t *cap, size_t need, size_t elem);
/* The same, aborting on OOM: for arrays of the program's own making. */
void xgrow(void **ptr, size_t *cap, size_t need, size_t elem);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);

/* For the long-running services (sonde server, coordinator). glibc's
 * malloc gives each thread that meets a busy arena one of its own, up to 8
 * per core, and keeps what each held at its peak: a service answering big
 * queries on 16 threads grew by each thread's peak in turn (1.5 GB for
 * the coordinator after six queries of 200 000 stacks), and one ingesting
 * big windows kept 32 MB for 2 MB stored. xalloc_bound_arenas limits the
 * arenas to XALLOC_ARENAS (call it at start, before the threads);
 * xalloc_give_back, called after each request that did some work, returns
 * the free memory of every arena to the system (malloc_trim) once the
 * process holds XALLOC_GIVE_BACK_MIN bytes more than after the last trim
 * (its resident size, read from /proc/self/statm). */
#define XALLOC_ARENAS 2
#define XALLOC_MMAP_MIN (1u << 20)
#define XALLOC_TRIM_MIN (8u << 20)
#define XALLOC_GIVE_BACK_MIN (8u << 20)
void xalloc_bound_arenas(void);
void xalloc_give_back(void);

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
