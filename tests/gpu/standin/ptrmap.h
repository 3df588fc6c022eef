/*
 * ptrmap.h: a hash map from non-zero addresses to pointers, used by the GPU stand-ins to
 * find and validate handles (streams, events, kernels, allocations) without trusting the
 * caller's pointer. Open addressing with linear probing and backward-shift deletion, so
 * lookups stay short after many inserts and deletes. Not thread-safe: callers lock.
 */
#ifndef SONDE_STANDIN_PTRMAP_H
#define SONDE_STANDIN_PTRMAP_H

#include <stddef.h>
#include <stdint.h>

struct ptrmap {
	uintptr_t *keys; /* 0 marks an empty slot */
	void **vals;
	size_t cap; /* a power of two, or 0 before the first insert */
	size_t len;
};

/* Inserts or replaces; returns 0 or -ENOMEM. `key` must not be 0. */
int ptrmap__put(struct ptrmap *m, uintptr_t key, void *val);
/* The value stored under `key`, or NULL. */
void *ptrmap__get(const struct ptrmap *m, uintptr_t key);
/* Removes `key` and returns its value, or NULL if absent. */
void *ptrmap__del(struct ptrmap *m, uintptr_t key);

#endif /* SONDE_STANDIN_PTRMAP_H */
