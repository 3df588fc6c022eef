/* store.c: what store.h does the same for every store -- opening the store a
 * spec names, and the order of a select's stacks: each store reads them in
 * its own order (SQLite by its stack ids, ClickHouse by its hashes), and
 * store__select puts them in one order by content, so that every answer
 * made from a select is the same byte for byte from either store. A store
 * reads a select as a profile or as a tree (struct store_tree): the other
 * is made here from the one it reads. Also the record of a quota's refusal
 * (store_last_refusal). */
#include "store/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/sat.h"
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

/* ---- a select as a profile from a tree, and as a tree from a profile ---- */

/* A store_tree_fn adding the tree's stacks to the profile ctx, each
 * function becoming a location once: for store__select of a store that
 * reads trees. */
static int profile_of_tree(void *ctx, const struct store_tree *t)
{
	struct profile *out = ctx;
	uint32_t *loc = malloc((t->nfuncs ? t->nfuncs : 1) * sizeof(*loc));
	uint32_t stack[PROF_MAX_FRAMES];
	size_t i, n;
	int err = 0;

	if (!loc)
		return -ENOMEM;
	memset(loc, 0xff, (t->nfuncs ? t->nfuncs : 1) * sizeof(*loc));
	if (t->root_value > 0)
		err = profile__add_locs(out, 0, 0, "", NULL, 0, t->root_value);
	for (i = 0; !err && i < t->nnodes; i++) {
		uint32_t v;

		if (t->nodes[i].value <= 0)
			continue;
		/* Leaf first, as a profile holds it. */
		for (n = 0, v = (uint32_t)i; !err && v != STORE_NO_PARENT; v = t->nodes[v].parent) {
			uint32_t fi = t->nodes[v].func;

			if (n == PROF_MAX_FRAMES || v >= t->nnodes || fi >= t->nfuncs) {
				err = -EINVAL;
				break;
			}
			if (loc[fi] == UINT32_MAX) {
				const struct store_func *fn = &t->funcs[fi];
				struct prof_frame f = {
					.func = fn->name,
					.module = *fn->module ? fn->module : NULL,
					.kernel = fn->kernel,
					.file = *fn->file ? fn->file : NULL,
					.start_line = fn->start_line,
				};

				loc[fi] = profile__location(out, &f);
			}
			stack[n++] = loc[fi];
		}
		if (!err)
			err = profile__add_locs(out, 0, 0, "", stack, n, t->nodes[i].value);
	}
	if (!err && t->period > 0)
		out->period = t->period;
	free(loc);
	return err;
}

int store_tree__of_profile(const struct profile *p, store_tree_fn fn, void *ctx)
{
	struct store_tree t = {.period = p->period};
	struct store_func *funcs = malloc((p->nlocs ? p->nlocs : 1) * sizeof(*funcs));
	struct store_node *nodes = NULL;
	size_t i, nnodes = 0;
	int err;

	for (i = 0; i < p->nsamples; i++)
		if (p->samples[i].count > 0)
			nnodes += p->samples[i].nlocs;
	nodes = malloc((nnodes ? nnodes : 1) * sizeof(*nodes));
	if (!funcs || !nodes) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < p->nlocs; i++) {
		const struct prof_location *l = &p->locs[i];

		funcs[i] = (struct store_func){
			.name = profile__str(p, l->func),
			.module = l->module ? profile__str(p, l->module) : "",
			.file = l->file ? profile__str(p, l->file) : "",
			.start_line = l->start_line,
			.kernel = l->kernel,
		};
	}
	for (i = 0; i < p->nsamples; i++) {
		const struct prof_sample *smp = &p->samples[i];
		uint32_t parent = STORE_NO_PARENT;

		if (smp->count <= 0)
			continue;
		if (!smp->nlocs)
			t.root_value = sat_add_i64(t.root_value, smp->count);
		for (uint32_t j = smp->nlocs; j-- > 0;) {
			nodes[t.nnodes] =
				(struct store_node){parent, smp->locs[j], j ? 0 : smp->count};
			parent = (uint32_t)t.nnodes++;
		}
	}
	t.funcs = funcs;
	t.nfuncs = p->nlocs;
	t.nodes = nodes;
	err = fn(ctx, &t);
cleanup:
	free(funcs);
	free(nodes);
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
	if (s->ops->select)
		err = s->ops->select(s, q, tmp, unit, unitlen);
	else
		err = s->ops->select_tree(s, q, profile_of_tree, tmp, unit, unitlen);
	if (!err)
		err = add_sorted(out, tmp);
	if (!err && tmp->period != out->period)
		out->period = tmp->period;
	profile__free(tmp);
	return err;
}

int store__select_tree(struct store *s, const struct store_query *q, store_tree_fn fn, void *ctx,
		       char *unit, size_t unitlen)
{
	struct profile *tmp;
	int err;

	if (!fn)
		return -EINVAL;
	if (s->ops->select_tree)
		return s->ops->select_tree(s, q, fn, ctx, unit, unitlen);
	tmp = profile__new("", "", 0);
	if (!tmp)
		return -ENOMEM;
	tmp->saturate = true;
	err = s->ops->select(s, q, tmp, unit, unitlen);
	if (!err)
		err = store_tree__of_profile(tmp, fn, ctx);
	profile__free(tmp);
	return err;
}
