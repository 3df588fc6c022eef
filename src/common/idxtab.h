/* idxtab.h: open-addressing tables of 32-bit indexes, the lookup behind
 * the server's flame trees (names, children of a node) and ingest batches
 * (series by label key). The caller keeps its entries and their hashes in
 * its own arrays; a table maps a hash to the indexes that may match,
 * probed linearly from the hash, and is rebuilt larger when it is half
 * full. Sizes are powers of two; IDXTAB_EMPTY marks a free slot. */
#ifndef SONDE_COMMON_IDXTAB_H
#define SONDE_COMMON_IDXTAB_H

#include <stddef.h>
#include <stdint.h>

#define IDXTAB_EMPTY UINT32_MAX

/* The hash of entry i of the caller's arrays (ctx), for a rebuild. */
typedef uint32_t (*idxtab_hash_fn)(const void *ctx, size_t i);

/* An empty table of cap slots (a power of two); NULL on ENOMEM. */
uint32_t *idxtab_new(size_t cap);
/* Replaces *tab (NULL or *tabcap slots) by a table of cap slots (a power
 * of two larger than n) holding the entries first..n-1 at their hashes.
 * 0, or -ENOMEM with *tab unchanged. */
int idxtab_rebuild(uint32_t **tab, size_t *tabcap, size_t cap, size_t first, size_t n,
		   idxtab_hash_fn hash, const void *ctx);

/* The first free slot from hash h on (the table must have one). */
static inline size_t idxtab_free_slot(const uint32_t *tab, size_t cap, uint32_t h)
{
	size_t slot = h & (cap - 1);

	while (tab[slot] != IDXTAB_EMPTY)
		slot = (slot + 1) & (cap - 1);
	return slot;
}

#endif
