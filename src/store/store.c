/* store.c: what store.h does the same for every store -- opening the store a
 * spec names, and the order of a select's stacks: each store reads them in
 * its own order (SQLite by its stack ids, ClickHouse by its hashes), and
 * store__select puts them in one order by content, so that every answer
 * made from a select is the same byte for byte from either store. Also the
 * record of a quota's refusal (store_last_refusal). */
#include "store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "profile/profile.h"
#include "store/store_internal.h"

static __thread struct store_refusal last_refusal;

const struct store_refusal *store_last_refusal(void)
{
	return &last_refusal;
}

/* For the stores: records this thread's refusal (store_internal.h). */
void store_refuse(enum store_bound bound, const char *project, uint64_t have, uint64_t more,
		  uint64_t max)
{
	last_refusal.bound = bound;
	snprintf(last_refusal.project, sizeof(last_refusal.project), "%s", project);
	last_refusal.have = have;
	last_refusal.more = more;
	last_refusal.max = max;
}

struct store *store__open(const char *spec)
{
	if (spec && !strncmp(spec, "clickhouse://", 13))
		return store_clickhouse__open(spec);
	return store_sqlite__open(spec);
}

static int cmp_loc(const struct profile *p, uint32_t a, uint32_t b)
{
	const struct prof_location *x = &p->locs[a], *y = &p->locs[b];
	int c;

	if (a == b)
		return 0;
	c = strcmp(profile__str(p, x->func), profile__str(p, y->func));
	if (!c)
		c = strcmp(profile__str(p, x->module), profile__str(p, y->module));
	if (!c)
		c = (int)x->kernel - (int)y->kernel;
	if (!c)
		c = strcmp(profile__str(p, x->file), profile__str(p, y->file));
	if (!c)
		c = x->start_line < y->start_line ? -1 : x->start_line > y->start_line;
	return c;
}

/* Stacks root first, frame by frame; a stack before those it is a prefix
 * of. */
static int cmp_sample(const void *a, const void *b, void *arg)
{
	const struct profile *p = arg;
	const struct prof_sample *x = &p->samples[*(const size_t *)a];
	const struct prof_sample *y = &p->samples[*(const size_t *)b];
	uint32_t i;

	for (i = 0; i < x->nlocs && i < y->nlocs; i++) {
		int c = cmp_loc(p, x->locs[x->nlocs - 1 - i], y->locs[y->nlocs - 1 - i]);

		if (c)
			return c;
	}
	return x->nlocs < y->nlocs ? -1 : x->nlocs > y->nlocs;
}

/* Adds src's samples to out in that order, each location becoming one of
 * out's in order of first use. */
static int add_sorted(struct profile *out, const struct profile *src)
{
	size_t *order = malloc((src->nsamples ? src->nsamples : 1) * sizeof(*order));
	uint32_t *map = malloc((src->nlocs ? src->nlocs : 1) * sizeof(*map));
	uint32_t locs[PROF_MAX_FRAMES];
	size_t i, k;
	int err = 0;

	if (!order || !map) {
		free(order);
		free(map);
		return -ENOMEM;
	}
	for (i = 0; i < src->nsamples; i++)
		order[i] = i;
	qsort_r(order, src->nsamples, sizeof(*order), cmp_sample, (void *)src);
	memset(map, 0xff, (src->nlocs ? src->nlocs : 1) * sizeof(*map));
	for (i = 0; !err && i < src->nsamples; i++) {
		const struct prof_sample *smp = &src->samples[order[i]];
		size_t n = smp->nlocs < PROF_MAX_FRAMES ? smp->nlocs : PROF_MAX_FRAMES;

		/* Locations root first, so that they are numbered from the
		 * root as the flame graph reads them. */
		for (k = n; k-- > 0;) {
			uint32_t li = smp->locs[k];

			if (map[li] == UINT32_MAX) {
				const struct prof_location *l = &src->locs[li];
				struct prof_frame f = {0};

				f.func = profile__str(src, l->func);
				f.module = l->module ? profile__str(src, l->module) : NULL;
				f.kernel = l->kernel;
				f.file = l->file ? profile__str(src, l->file) : NULL;
				f.start_line = l->start_line;
				map[li] = profile__location(out, &f);
			}
			locs[k] = map[li];
		}
		err = profile__add_locs(out, 0, 0, "", locs, n, smp->count);
	}
	free(order);
	free(map);
	return err;
}

int store__select(struct store *s, const struct store_query *q, struct profile *out, char *unit,
		  size_t unitlen)
{
	struct profile *tmp;
	int err;

	if (!out)
		return -EINVAL;
	tmp = profile__new(out->type ? out->type : "", out->unit ? out->unit : "", out->period);
	if (!tmp)
		return -ENOMEM;
	/* Sums of what was stored stop at INT64_MAX (store.h). */
	tmp->saturate = out->saturate = true;
	err = s->ops->select(s, q, tmp, unit, unitlen);
	if (!err)
		err = add_sorted(out, tmp);
	if (!err && tmp->period != out->period)
		out->period = tmp->period;
	profile__free(tmp);
	return err;
}
