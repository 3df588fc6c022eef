/* hash.h: the 64-bit string hash that profiles and the store share. A
 * profile hashes each string once when it interns it and keeps the hash, so
 * the store can look a function name up without reading the name again. */
#ifndef SONDE_COMMON_HASH_H
#define SONDE_COMMON_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A 64-bit finalizer: every input bit moves every output bit. */
static inline uint64_t hash_mix(uint64_t h)
{
	h ^= h >> 33;
	h *= 0xff51afd7ed558ccdULL;
	h ^= h >> 33;
	h *= 0xc4ceb9fe1a85ec53ULL;
	h ^= h >> 33;
	return h;
}

/* len bytes of key, chained through seed, a word at a time (byte-at-a-time
 * hashes are much of the cost of interning short names). */
static inline uint64_t hash_bytes(const void *key, size_t len, uint64_t seed)
{
	const unsigned char *s = key;
	uint64_t h = seed ^ (0x9e3779b97f4a7c15ULL * (len + 1)), w;

	for (; len >= 8; s += 8, len -= 8) {
		memcpy(&w, s, 8);
		h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
		h ^= h >> 31;
	}
	if (len) {
		w = 0;
		memcpy(&w, s, len);
		h = (h ^ w) * 0xbf58476d1ce4e5b9ULL;
		h ^= h >> 31;
	}
	return hash_mix(h);
}

#endif
