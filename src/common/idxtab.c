/* idxtab.c: making and rebuilding the index tables of idxtab.h. */
#include "common/idxtab.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

uint32_t *idxtab_new(size_t cap)
{
	uint32_t *t;

	if (!cap || cap & (cap - 1) || cap > SIZE_MAX / sizeof(*t))
		return NULL;
	t = malloc(cap * sizeof(*t));
	if (t)
		memset(t, 0xff, cap * sizeof(*t));
	return t;
}

int idxtab_rebuild(uint32_t **tab, size_t *tabcap, size_t cap, size_t first, size_t n,
		   idxtab_hash_fn hash, const void *ctx)
{
	uint32_t *t = cap > n ? idxtab_new(cap) : NULL;

	if (!t)
		return -ENOMEM;
	for (size_t i = first; i < n; i++)
		t[idxtab_free_slot(t, cap, hash(ctx, i))] = (uint32_t)i;
	free(*tab);
	*tab = t;
	*tabcap = cap;
	return 0;
}
