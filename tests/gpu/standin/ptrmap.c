/*
 * ptrmap.c: the address-keyed hash map of ptrmap.h, shared by the GPU stand-ins.
 */
#include <errno.h>
#include <stdlib.h>

#include "ptrmap.h"

static size_t slot_of(uintptr_t key, size_t cap)
{
	/* Fibonacci hashing: handles are 16-byte aligned, so mix the low bits away. */
	return (size_t)((key * 0x9E3779B97F4A7C15ull) >> 17) & (cap - 1);
}

static int grow(struct ptrmap *m)
{
	size_t cap = m->cap ? m->cap * 2 : 64;
	uintptr_t *keys = calloc(cap, sizeof(*keys));
	void **vals = calloc(cap, sizeof(*vals));

	if (!keys || !vals) {
		free(keys);
		free(vals);
		return -ENOMEM;
	}
	for (size_t i = 0; i < m->cap; i++) {
		size_t j;

		if (!m->keys[i])
			continue;
		for (j = slot_of(m->keys[i], cap); keys[j]; j = (j + 1) & (cap - 1))
			;
		keys[j] = m->keys[i];
		vals[j] = m->vals[i];
	}
	free(m->keys);
	free(m->vals);
	m->keys = keys;
	m->vals = vals;
	m->cap = cap;
	return 0;
}

int ptrmap__put(struct ptrmap *m, uintptr_t key, void *val)
{
	size_t i;

	if ((m->len + 1) * 10 > m->cap * 7) {
		int err = grow(m);

		if (err)
			return err;
	}
	for (i = slot_of(key, m->cap); m->keys[i]; i = (i + 1) & (m->cap - 1)) {
		if (m->keys[i] == key) {
			m->vals[i] = val;
			return 0;
		}
	}
	m->keys[i] = key;
	m->vals[i] = val;
	m->len++;
	return 0;
}

void *ptrmap__get(const struct ptrmap *m, uintptr_t key)
{
	if (!m->cap || !key)
		return NULL;
	for (size_t i = slot_of(key, m->cap); m->keys[i]; i = (i + 1) & (m->cap - 1)) {
		if (m->keys[i] == key)
			return m->vals[i];
	}
	return NULL;
}

void *ptrmap__del(struct ptrmap *m, uintptr_t key)
{
	size_t mask = m->cap - 1, i, j;
	void *val;

	if (!m->cap || !key)
		return NULL;
	for (i = slot_of(key, m->cap); m->keys[i] != key; i = (i + 1) & mask) {
		if (!m->keys[i])
			return NULL;
	}
	val = m->vals[i];
	/*
	 * Backward shift: move later members of the probe run into the hole when their home
	 * slot does not lie cyclically in (hole, their slot], so no tombstones are needed.
	 */
	for (j = (i + 1) & mask; m->keys[j]; j = (j + 1) & mask) {
		size_t home = slot_of(m->keys[j], m->cap);

		if (((j - home) & mask) >= ((j - i) & mask)) {
			m->keys[i] = m->keys[j];
			m->vals[i] = m->vals[j];
			i = j;
		}
	}
	m->keys[i] = 0;
	m->vals[i] = NULL;
	m->len--;
	return val;
}
