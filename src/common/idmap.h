/* idmap.h: an open-addressing multimap of 64-bit keys (a hash of what the
 * caller identifies) to 32-bit ids (never 0), duplicates allowed: the
 * store's dictionaries (names, the trie, series), ingest's memo of a
 * profile's frames, the server's flame trees (names, children) and the GPU
 * probes' tables by (pid, key) all look things up through it. Linear probing from hash_mix(key), grown at 70 %
 * full, backward-shift deletion. */
#ifndef SONDE_COMMON_IDMAP_H
#define SONDE_COMMON_IDMAP_H

#include <stddef.h>
#include <stdint.h>

#include "common/hash.h"

struct idmap_slot {
	uint64_t key;
	uint32_t val; /* 0: empty */
	uint32_t aux; /* the user's, beside the id at no cost (padding) */
};

struct idmap {
	struct idmap_slot *slots;
	size_t mask, count; /* mask + 1 slots (a power of two), count used */
};

/* The first id stored under key, 0 if none. */
static inline uint32_t idmap__get(const struct idmap *m, uint64_t key)
{
	size_t i;

	if (!m->slots)
		return 0;
	for (i = hash_mix(key) & m->mask; m->slots[i].val; i = (i + 1) & m->mask)
		if (m->slots[i].key == key)
			return m->slots[i].val;
	return 0;
}

/* Starts fetching the slot where key's search begins: the lookups of many
 * keys, each prefetched first, then wait for memory together rather than
 * one after the other. */
static inline void idmap__prefetch(const struct idmap *m, uint64_t key)
{
	if (m->slots)
		__builtin_prefetch(&m->slots[hash_mix(key) & m->mask]);
}

/* The first slot holding key, NULL if none. */
static inline struct idmap_slot *idmap__slot(const struct idmap *m, uint64_t key)
{
	size_t i;

	if (!m->slots)
		return NULL;
	for (i = hash_mix(key) & m->mask; m->slots[i].val; i = (i + 1) & m->mask)
		if (m->slots[i].key == key)
			return &m->slots[i];
	return NULL;
}

/* The slot holding (key, val), NULL if none. */
struct idmap_slot *idmap__find(const struct idmap *m, uint64_t key, uint32_t val);

/* Iterates over the ids stored under key: start with *pos = IDMAP_START;
 * returns 0 after the last. */
#define IDMAP_START SIZE_MAX
uint32_t idmap__next(const struct idmap *m, uint64_t key, size_t *pos);
/* Adds (key, val) with aux 0; 0 or -ENOMEM. */
int idmap__put(struct idmap *m, uint64_t key, uint32_t val);
/* Room for n more entries without growing (the table rehashed once, not
 * at every doubling); 0 or -ENOMEM. */
int idmap__reserve(struct idmap *m, size_t n);
/* Removes (key, val) if present. */
void idmap__del(struct idmap *m, uint64_t key, uint32_t val);
void idmap__free(struct idmap *m);

#endif
