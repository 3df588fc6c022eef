/* strpool.c: memory helpers of the symbolizer. The string pool keeps every
 * name the symbolizer hands out (paths, kernel and JIT symbol names) until
 * the symbolizer is freed, so a sym_info stays valid after a perf map is
 * re-read or a pid forgotten. Interned strings are deduplicated through a
 * hash table; added ones are bump-allocated in chunks. */
#include "symbolize/symbolize_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/htable.h"
#include "common/xalloc.h"

#define STRPOOL_CHUNK (64 * 1024)

struct strpool_chunk {
	struct strpool_chunk *next;
	size_t used, cap;
	char data[];
};

struct strpool_entry {
	UT_hash_handle hh;
	char str[];
};

struct strpool {
	struct strpool_chunk *chunks;
	struct strpool_entry *interned;
};

struct strpool *strpool__new(void)
{
	return xcalloc(1, sizeof(struct strpool));
}

void strpool__free(struct strpool *p)
{
	struct strpool_chunk *c, *next;

	if (!p)
		return;
	HTABLE_CLEAR(hh, p->interned, e, free(e));
	for (c = p->chunks; c; c = next) {
		next = c->next;
		free(c);
	}
	free(p);
}

const char *strpool__intern(struct strpool *p, const char *str, size_t len)
{
	struct strpool_entry *e;

	HASH_FIND(hh, p->interned, str, len, e);
	if (e)
		return e->str;
	e = xmalloc(sizeof(*e) + len + 1);
	memcpy(e->str, str, len);
	e->str[len] = '\0';
	HASH_ADD_KEYPTR(hh, p->interned, e->str, len, e);
	return e->str;
}

const char *strpool__add(struct strpool *p, const char *str, size_t len)
{
	struct strpool_chunk *c = p->chunks;
	char *dst;

	if (!c || c->cap - c->used < len + 1) {
		size_t cap = len + 1 > STRPOOL_CHUNK ? len + 1 : STRPOOL_CHUNK;

		c = xmalloc(sizeof(*c) + cap);
		c->used = 0;
		c->cap = cap;
		c->next = p->chunks;
		p->chunks = c;
	}
	dst = c->data + c->used;
	memcpy(dst, str, len);
	dst[len] = '\0';
	c->used += len + 1;
	return dst;
}
