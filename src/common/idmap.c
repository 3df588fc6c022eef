/* idmap.c: the id map's growth, iteration and deletion. See idmap.h. */
#include "common/idmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static void idmap_insert(struct idmap_slot *slots, size_t mask, const struct idmap_slot *e)
{
	size_t i;

	for (i = hash_mix(e->key) & mask; slots[i].val; i = (i + 1) & mask)
		;
	slots[i] = *e;
}

/* Rehashes m into cap slots (a power of two holding its entries below
 * 70 %); 0 or -ENOMEM with m unchanged. */
static int idmap_resize(struct idmap *m, size_t cap)
{
	struct idmap_slot *slots = calloc(cap, sizeof(*slots));
	size_t i;

	if (!slots)
		return -ENOMEM;
	for (i = 0; m->slots && i <= m->mask; i++)
		if (m->slots[i].val)
			idmap_insert(slots, cap - 1, &m->slots[i]);
	free(m->slots);
	m->slots = slots;
	m->mask = cap - 1;
	return 0;
}

/* Whether n entries fit in cap slots below the 70 % fill. */
static int idmap_fits(size_t n, size_t cap)
{
	return n * 10 <= cap * 7;
}

int idmap__reserve(struct idmap *m, size_t n)
{
	size_t cap = m->slots ? m->mask + 1 : 64;

	while (!idmap_fits(m->count + n, cap))
		cap *= 2;
	return m->slots && cap == m->mask + 1 ? 0 : idmap_resize(m, cap);
}

int idmap__put(struct idmap *m, uint64_t key, uint32_t val)
{
	if (!m->slots || !idmap_fits(m->count + 1, m->mask + 1)) {
		int err = idmap_resize(m, m->slots ? (m->mask + 1) * 2 : 64);

		if (err)
			return err;
	}
	idmap_insert(m->slots, m->mask, &(struct idmap_slot){.key = key, .val = val});
	m->count++;
	return 0;
}

struct idmap_slot *idmap__find(const struct idmap *m, uint64_t key, uint32_t val)
{
	size_t pos = IDMAP_START;
	uint32_t v;

	while ((v = idmap__next(m, key, &pos)))
		if (v == val)
			return &m->slots[pos];
	return NULL;
}

uint32_t idmap__next(const struct idmap *m, uint64_t key, size_t *pos)
{
	size_t i;

	if (!m->slots)
		return 0;
	i = *pos == IDMAP_START ? hash_mix(key) & m->mask : (*pos + 1) & m->mask;
	for (; m->slots[i].val; i = (i + 1) & m->mask) {
		if (m->slots[i].key == key) {
			*pos = i;
			return m->slots[i].val;
		}
	}
	return 0;
}

void idmap__del(struct idmap *m, uint64_t key, uint32_t val)
{
	size_t i = IDMAP_START, j, k;
	uint32_t v;

	while ((v = idmap__next(m, key, &i)) && v != val)
		;
	if (!v)
		return;
	/* Backward-shift deletion: pull later entries of the probe run into the
	 * hole unless their home slot lies cyclically in (hole, their slot]. */
	for (j = i;;) {
		j = (j + 1) & m->mask;
		if (!m->slots[j].val)
			break;
		k = hash_mix(m->slots[j].key) & m->mask;
		if (i <= j ? (i < k && k <= j) : (i < k || k <= j))
			continue;
		m->slots[i] = m->slots[j];
		i = j;
	}
	m->slots[i].val = 0;
	m->count--;
}

void idmap__free(struct idmap *m)
{
	free(m->slots);
	memset(m, 0, sizeof(*m));
}
