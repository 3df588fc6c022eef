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

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#endif
