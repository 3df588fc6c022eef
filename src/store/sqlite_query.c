/* sqlite_query.c: the reads of the embedded store that store.h offers --
 * select (a flame graph's stacks: values summed per stack over the
 * matching series' windows, handed over as the part of the stack trie that
 * leads to them, struct store_tree), timeline (their sums per step), label names
 * and values, and metric points -- each one read (sqlite_read.c) scanning
 * the window rows of its range or the points of its series. The server's
 * query API calls them from many threads at once. */
#include "store/sqlite_internal.h"
#include "common/clock.h"
#include "common/sat.h"
#include "common/xalloc.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- select ---- */

/* A select: sums by stack id and the ids summed, the unit of the first
 * window; then the tree of the stacks summed, its nodes those of the
 * store's stack trie that lead to them, each once. */
struct select_ctx {
	int64_t *counts; /* by stack id: the reader's, zeroed when done */
	size_t ncounts;
	uint32_t *touched; /* ids whose count became non-zero */
	size_t ntouched, cap_touched;
	/* The units of the matching windows of the earliest range (rows come
	 * in (start, end) order): the first by (unit, period) is the
	 * select's, as in the ClickHouse store. */
	uint32_t units[16];
	size_t nunits;
	int64_t first_start, first_end;
	struct store_tree tree;
	struct store_node *nodes;
	uint32_t *ids; /* per node: its stack id, to zero the reader's slots */
	struct store_func *funcs;
	uint32_t *funcidx; /* by function id: its index in funcs + 1, 0: none */
	size_t cap_nodes, cap_ids, cap_funcs;
};

static int select_section(struct select_ctx *c, const uint8_t *p, const uint8_t *end)
{
	uint32_t id = 0;
	int64_t v;
	int rc;

	while ((rc = codec_next_pair(&p, end, &id, &v)) > 0) {
		if (id >= c->ncounts)
			return corrupt("a window's data");
		if (!c->counts[id]) {
			if (c->ntouched == c->cap_touched &&
			    array_grow((void **)&c->touched, &c->cap_touched, c->ntouched + 1,
				       sizeof(*c->touched)))
				return -ENOMEM;
			c->touched[c->ntouched++] = id;
		}
		c->counts[id] = sat_add_i64(c->counts[id], v);
	}
	return rc < 0 ? corrupt("a window's data") : 0;
}

static void take_unit(struct select_ctx *c, sqlite3_stmt *st)
{
	int64_t start = sqlite3_column_int64(st, 0), end = sqlite3_column_int64(st, 1);
	uint32_t unit = (uint32_t)sqlite3_column_int64(st, 2);
	size_t i;

	if (!c->nunits) {
		c->first_start = start;
		c->first_end = end;
	} else if (start != c->first_start || end != c->first_end) {
		return;
	}
	for (i = 0; i < c->nunits; i++)
		if (c->units[i] == unit)
			return;
	if (c->nunits < ARRAY_SIZE(c->units))
		c->units[c->nunits++] = unit;
}

static int select_row(struct read *rd, sqlite3_stmt *st, void *ctx)
{
	struct select_ctx *c = ctx;
	const uint8_t *data = NULL;
	struct codec_dir_iter it;
	struct codec_dir_ent e;
	int rc, err;

	err = row_dir(st, true, &it);
	while (!err && (rc = row_next(rd, &it, &e)) > 0) {
		if (!rd->match[e.sid])
			continue;
		if (!data) {
			data = sqlite3_column_blob(st, 4);
			if (!data && sqlite3_column_bytes(st, 4))
				return -ENOMEM;
			if (!data)
				data = (const uint8_t *)""; /* empty: every part is too */
			take_unit(c, st);
		}
		err = select_section(c, data + e.off, data + e.off + e.len);
	}
	return err ? err : rc;
}

/* Copies a unit's name into unit and its period into *period (under
 * dict_lock). */
static void copy_unit(const struct dict *d, uint32_t id, char *unit, size_t unitlen,
		      int64_t *period)
{
	bool known = id && id <= d->nunits;

	if (period && known)
		*period = d->units[id].period;
	if (!unit || !unitlen)
		return;
	snprintf(unit, unitlen, "%s", known ? d->units[id].unit : "");
}

/* The first of the select's units by (unit, period), 0 when none (under
 * dict_lock). */
static uint32_t first_unit(const struct dict *d, const struct select_ctx *c)
{
	uint32_t best = 0;
	size_t i;

	for (i = 0; i < c->nunits; i++) {
		const struct unit_ent *u = c->units[i] <= d->nunits ? &d->units[c->units[i]] : NULL;
		const struct unit_ent *b = best ? &d->units[best] : NULL;
		int cmp;

		if (!u)
			continue;
		cmp = b ? strcmp(u->unit, b->unit) : -1;
		if (cmp < 0 || (!cmp && u->period < b->period))
			best = c->units[i];
	}
	return best;
}

/* The tree's function for dictionary function id, added on first use
 * (under dict_lock); UINT32_MAX on ENOMEM. Names stay valid while the read
 * holds gc_lock, so they are taken by pointer. */
static uint32_t tree_func(const struct dict *d, struct select_ctx *c, uint32_t id)
{
	const struct func_ent *f = &d->funcs[id];
	struct store_tree *t = &c->tree;

	if (c->funcidx[id])
		return c->funcidx[id] - 1;
	if (array_grow((void **)&c->funcs, &c->cap_funcs, t->nfuncs + 1, sizeof(*c->funcs)))
		return UINT32_MAX;
	c->funcs[t->nfuncs] =
		(struct store_func){f->name, f->module, f->file, f->start_line, f->kernel};
	c->funcidx[id] = (uint32_t)++t->nfuncs;
	return (uint32_t)t->nfuncs - 1;
}

/* Adds stack id to the tree with its value: the nodes of the trie from the
 * root to it that the tree lacks, outermost first, so that each node comes
 * after its parent (under dict_lock). */
static int tree_stack(const struct dict *d, struct select_ctx *c, uint32_t *slots, uint32_t id)
{
	struct store_tree *t = &c->tree;
	uint32_t path[DICT_MAX_DEPTH], parent, v = id;
	size_t n = 0;

	if (!id) { /* the stack of no frames */
		t->root_value = sat_add_i64(t->root_value, c->counts[id]);
		return 0;
	}
	for (; v; v = d->nodes[v].parent) {
		if (v >= d->cap_nodes)
			return corrupt("the stack table");
		if (slots[v])
			break;
		if (n == DICT_MAX_DEPTH || d->nodes[v].state == DICT_FREE ||
		    d->nodes[v].func >= d->cap_funcs)
			return corrupt("the stack table");
		path[n++] = v;
	}
	if (array_grow((void **)&c->nodes, &c->cap_nodes, t->nnodes + n, sizeof(*c->nodes)) ||
	    array_grow((void **)&c->ids, &c->cap_ids, t->nnodes + n, sizeof(*c->ids)))
		return -ENOMEM;
	parent = v ? slots[v] - 1 : STORE_NO_PARENT;
	while (n-- > 0) {
		uint32_t fi = tree_func(d, c, d->nodes[path[n]].func);

		if (fi == UINT32_MAX)
			return -ENOMEM;
		c->nodes[t->nnodes] = (struct store_node){parent, fi, 0};
		c->ids[t->nnodes] = path[n];
		parent = (uint32_t)t->nnodes++;
		slots[path[n]] = parent + 1;
	}
	c->nodes[slots[id] - 1].value = c->counts[id];
	return 0;
}

/* Makes the tree of the touched stacks, and copies the unit, under
 * dict_lock: no lock is held while the tree's reader works on it. */
static int make_tree(struct read *rd, struct select_ctx *c, char *unit, size_t unitlen)
{
	struct sqlite_store *s = rd->s;
	const struct dict *d = &s->dict;
	struct reader *r = rd->r;
	size_t i;
	int err = 0;

	pthread_rwlock_rdlock(&s->dict_lock);
	c->funcidx = calloc(d->cap_funcs ? d->cap_funcs : 1, sizeof(*c->funcidx));
	if (!c->funcidx)
		err = -ENOMEM;
	if (!err && r->nslots < d->cap_nodes) {
		uint32_t *p = realloc(r->slots, d->cap_nodes * sizeof(*p));

		if (p) {
			memset(p + r->nslots, 0, (d->cap_nodes - r->nslots) * sizeof(*p));
			r->slots = p;
			r->nslots = d->cap_nodes;
		} else {
			err = -ENOMEM;
		}
	}
	for (i = 0; !err && i < c->ntouched; i++)
		err = tree_stack(d, c, r->slots, c->touched[i]);
	copy_unit(d, first_unit(d, c), unit, unitlen, &c->tree.period);
	pthread_rwlock_unlock(&s->dict_lock);
	c->tree.funcs = c->funcs;
	c->tree.nodes = c->nodes;
	return err;
}

/* Points c->counts at the reader's array, grown to the stack ids the
 * dictionaries hold (zeroed beyond what it had). */
static int take_counts(struct read *rd, struct select_ctx *c)
{
	struct sqlite_store *s = rd->s;
	int64_t *p;

	pthread_rwlock_rdlock(&s->dict_lock);
	c->ncounts = s->dict.cap_nodes ? s->dict.cap_nodes : 1;
	pthread_rwlock_unlock(&s->dict_lock);
	if (rd->r->ncounts < c->ncounts) {
		p = realloc(rd->r->counts, c->ncounts * sizeof(*p));
		if (!p)
			return -ENOMEM;
		memset(p + rd->r->ncounts, 0, (c->ncounts - rd->r->ncounts) * sizeof(*p));
		rd->r->counts = p;
		rd->r->ncounts = c->ncounts;
	}
	c->counts = rd->r->counts;
	return 0;
}

int sqlite_store__select_tree(struct store *base, const struct store_query *q, store_tree_fn fn,
			      void *ctx, char *unit, size_t unitlen)
{
	struct sqlite_store *s = sqlite_store(base);
	struct select_ctx c = {0};
	struct read rd;
	size_t i;
	int err;

	if (unit && unitlen)
		*unit = '\0';
	err = read__begin(&rd, s, q, NULL);
	if (err)
		return err;
	err = take_counts(&rd, &c);
	if (!err)
		err = read__scan_rows(&rd, true, select_row, &c);
	if (!err)
		err = make_tree(&rd, &c, unit, unitlen);
	/* Inside the read: the names the tree points to stay. */
	if (!err)
		err = fn(ctx, &c.tree);
	/* Zeroed for the next select. */
	for (i = 0; i < c.ntouched; i++)
		c.counts[c.touched[i]] = 0;
	for (i = 0; i < c.tree.nnodes; i++)
		rd.r->slots[c.ids[i]] = 0;
	free(c.touched);
	free(c.nodes);
	free(c.ids);
	free(c.funcs);
	free(c.funcidx);
	read__end(&rd);
	return err;
}

/* ---- timeline ---- */

/* Windows of one range are summed before they are spread (rows come in
 * (start, end) order): the ClickHouse store sums them in its query, and the
 * two give the same doubles. */
struct timeline_ctx {
	int64_t step;
	double *values;
	size_t nsteps;
	int64_t start, end, total; /* the range in hand */
};

static void timeline_flush(struct read *rd, struct timeline_ctx *c)
{
	timeline_spread(c->values, c->nsteps, rd->from, c->step, c->start, c->end, c->total);
	c->total = 0;
}

static int timeline_row(struct read *rd, sqlite3_stmt *st, void *ctx)
{
	struct timeline_ctx *c = ctx;
	int64_t start = sqlite3_column_int64(st, 0), end = sqlite3_column_int64(st, 1);
	int64_t total = 0;
	struct codec_dir_iter it;
	struct codec_dir_ent e;
	int err, rc = 0;

	err = row_dir(st, false, &it);
	while (!err && (rc = row_next(rd, &it, &e)) > 0)
		if (rd->match[e.sid])
			total = sat_add_i64(total, e.total);
	if (err || rc)
		return err ? err : rc;
	if (!total)
		return 0;
	if (start != c->start || end != c->end) {
		timeline_flush(rd, c);
		c->start = start;
		c->end = end;
	}
	c->total = sat_add_i64(c->total, total);
	return 0;
}

int sqlite_store__timeline(struct store *base, const struct store_query *q, int64_t step_ms,
			   double *values, size_t nsteps)
{
	struct sqlite_store *s = sqlite_store(base);
	struct timeline_ctx c = {.step = step_ms, .values = values, .nsteps = nsteps};
	struct read rd;
	int err;

	if (step_ms <= 0 || (nsteps && !values) || nsteps > (size_t)(INT64_MAX / step_ms))
		return -EINVAL;
	memset(values, 0, nsteps * sizeof(*values));
	err = read__begin(&rd, s, q, NULL);
	if (err)
		return err;
	err = read__scan_rows(&rd, false, timeline_row, &c);
	if (!err)
		timeline_flush(&rd, &c);
	read__end(&rd);
	return err;
}

/* ---- label reads ---- */

static int present_row(struct read *rd, sqlite3_stmt *st, void *ctx)
{
	uint8_t *present = ctx;
	struct codec_dir_iter it;
	struct codec_dir_ent e;
	int err, rc = 0;

	err = row_dir(st, false, &it);
	while (!err && (rc = row_next(rd, &it, &e)) > 0)
		present[e.sid] = 1;
	return err ? err : rc;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names (name NULL) or values of label name of the matching series with a
 * window in range, to fn in byte order. */
static int label_strings(struct sqlite_store *s, const struct store_query *q, const char *name,
			 store_string_fn fn, void *ctx)
{
	uint8_t *present = NULL;
	char **strs = NULL;
	size_t nstrs = 0, cap = 0, i, k;
	struct read rd;
	int err;

	if (!fn)
		return -EINVAL;
	err = read__begin(&rd, s, q, NULL);
	if (err)
		return err;
	present = calloc(rd.nmatch ? rd.nmatch : 1, 1);
	if (!present) {
		err = -ENOMEM;
		goto cleanup;
	}
	err = read__scan_rows(&rd, false, present_row, present);
	if (err)
		goto cleanup;

	pthread_rwlock_rdlock(&s->dict_lock);
	for (i = 1; !err && i < rd.nmatch; i++) {
		const struct labelset *ls = &s->dict.series[i].ls;

		if (!present[i] || !rd.match[i])
			continue;
		for (k = 0; !err && k < ls->n; k++) {
			const char *str = name ? ls->labels[k].value : ls->labels[k].name;

			if (name && strcmp(ls->labels[k].name, name))
				continue;
			err = array_grow((void **)&strs, &cap, nstrs + 1, sizeof(*strs));
			if (!err && !(strs[nstrs] = strdup(str)))
				err = -ENOMEM;
			if (!err)
				nstrs++;
		}
	}
	pthread_rwlock_unlock(&s->dict_lock);
	if (err)
		goto cleanup;
	qsort(strs, nstrs, sizeof(*strs), cmp_str);
	for (i = 0; i < nstrs; i++)
		if (!i || strcmp(strs[i], strs[i - 1]))
			fn(ctx, strs[i]);
cleanup:
	for (i = 0; i < nstrs; i++)
		free(strs[i]);
	free(strs);
	free(present);
	read__end(&rd);
	return err;
}

int sqlite_store__label_names(struct store *base, const struct store_query *q, store_string_fn fn,
			      void *ctx)
{
	return label_strings(sqlite_store(base), q, NULL, fn, ctx);
}

int sqlite_store__label_values(struct store *base, const struct store_query *q, const char *name,
			       store_string_fn fn, void *ctx)
{
	if (!name || !*name)
		return -EINVAL;
	return label_strings(sqlite_store(base), q, name, fn, ctx);
}

/* ---- series totals ---- */

struct totals_ctx {
	int64_t *total, *first, *last; /* by series id */
};

static int totals_row(struct read *rd, sqlite3_stmt *st, void *ctx)
{
	struct totals_ctx *c = ctx;
	int64_t start = sqlite3_column_int64(st, 0), end = sqlite3_column_int64(st, 1);
	struct codec_dir_iter it;
	struct codec_dir_ent e;
	int err, rc = 0;

	err = row_dir(st, false, &it);
	while (!err && (rc = row_next(rd, &it, &e)) > 0) {
		if (!rd->match[e.sid])
			continue;
		c->total[e.sid] = sat_add_i64(c->total[e.sid], e.total);
		if (c->first[e.sid] == INT64_MAX || start < c->first[e.sid])
			c->first[e.sid] = start;
		if (end > c->last[e.sid])
			c->last[e.sid] = end;
	}
	return err ? err : rc;
}

int sqlite_store__series_totals(struct store *base, const struct store_query *q, store_series_fn fn,
				void *ctx)
{
	struct sqlite_store *s = sqlite_store(base);
	struct totals_ctx c = {0};
	struct labelset *sets = NULL;
	uint32_t *ids = NULL;
	size_t i, n = 0;
	struct read rd;
	int err;

	if (!fn)
		return -EINVAL;
	err = read__begin(&rd, s, q, NULL);
	if (err)
		return err;
	c.total = calloc(rd.nmatch ? rd.nmatch : 1, sizeof(*c.total));
	c.first = malloc((rd.nmatch ? rd.nmatch : 1) * sizeof(*c.first));
	c.last = calloc(rd.nmatch ? rd.nmatch : 1, sizeof(*c.last));
	ids = malloc((rd.nmatch ? rd.nmatch : 1) * sizeof(*ids));
	sets = calloc(rd.nmatch ? rd.nmatch : 1, sizeof(*sets));
	if (!c.total || !c.first || !c.last || !ids || !sets) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (i = 0; i < rd.nmatch; i++)
		c.first[i] = INT64_MAX;
	err = read__scan_rows(&rd, false, totals_row, &c);
	if (err)
		goto cleanup;
	/* The labels copied under the lock; fn runs without it. */
	pthread_rwlock_rdlock(&s->dict_lock);
	for (i = 1; !err && i < rd.nmatch; i++) {
		const struct labelset *ls = &s->dict.series[i].ls;

		if (!rd.match[i] || c.first[i] == INT64_MAX)
			continue;
		err = labelset__decode(&sets[n], ls->key, ls->len);
		if (!err)
			ids[n++] = (uint32_t)i;
	}
	pthread_rwlock_unlock(&s->dict_lock);
	for (i = 0; !err && i < n; i++)
		fn(ctx, sets[i].labels, sets[i].n, c.total[ids[i]], c.first[ids[i]],
		   c.last[ids[i]]);
cleanup:
	for (i = 0; sets && i < n; i++)
		labelset__free(&sets[i]);
	free(sets);
	free(ids);
	free(c.total);
	free(c.first);
	free(c.last);
	read__end(&rd);
	return err;
}

/* ---- points ---- */

struct pick {
	uint32_t id;
	struct labelset ls; /* a copy: fn runs without the lock */
};

static int cmp_pick(const void *a, const void *b)
{
	const struct pick *x = a, *y = b;
	size_t n = x->ls.len < y->ls.len ? x->ls.len : y->ls.len;
	int c = memcmp(x->ls.key, y->ls.key, n);

	if (c)
		return c;
	return x->ls.len < y->ls.len ? -1 : x->ls.len > y->ls.len;
}

/* The matching metric series (rd->match), sorted by labels, into *picks. */
static int pick_series(struct read *rd, struct pick **picks, size_t *npicks)
{
	struct sqlite_store *s = rd->s;
	size_t i, cap = 0;
	int err = 0;

	pthread_rwlock_rdlock(&s->dict_lock);
	for (i = 1; !err && i < rd->nmatch; i++) {
		const struct labelset *ls = &s->dict.pseries[i].ls;

		if (!rd->match[i])
			continue;
		err = array_grow((void **)picks, &cap, *npicks + 1, sizeof(**picks));
		if (!err)
			err = labelset__decode(&(*picks)[*npicks].ls, ls->key, ls->len);
		if (!err)
			(*picks)[(*npicks)++].id = (uint32_t)i;
	}
	pthread_rwlock_unlock(&s->dict_lock);
	if (!err)
		qsort(*picks, *npicks, sizeof(**picks), cmp_pick);
	return err;
}

/* One series' points in the read's range, in time order (NaN where NULL
 * was stored); the arrays are reused from series to series. */
struct series_points {
	int64_t *ts;
	double *vals;
	size_t n, cap_ts, cap_vals;
};

static int read_points(struct read *rd, uint32_t id, struct series_points *sp)
{
	sqlite3_stmt *st = rd->r->st[R_POINTS];
	int rc, err = 0;

	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int64(st, 2, rd->lo);
	sqlite3_bind_int64(st, 3, rd->until);
	sp->n = 0;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		err = array_grow((void **)&sp->ts, &sp->cap_ts, sp->n + 1, sizeof(*sp->ts));
		if (!err)
			err = array_grow((void **)&sp->vals, &sp->cap_vals, sp->n + 1,
					 sizeof(*sp->vals));
		if (err)
			break;
		sp->ts[sp->n] = sqlite3_column_int64(st, 0);
		sp->vals[sp->n] = sqlite3_column_type(st, 1) == SQLITE_NULL
					  ? NAN
					  : sqlite3_column_double(st, 1);
		sp->n++;
	}
	if (!err && rc != SQLITE_DONE)
		err = sql_fail(rd->r->db, rc, "read metric points");
	sqlite3_reset(st);
	return err;
}

int sqlite_store__points(struct store *base, const char *name, const struct store_query *q,
			 store_points_fn fn, void *ctx)
{
	struct sqlite_store *s = sqlite_store(base);
	struct series_points sp = {0};
	struct pick *picks = NULL;
	size_t npicks = 0, i;
	struct read rd;
	int err;

	if (!fn || !metric_name_valid(name))
		return -EINVAL;
	err = read__begin(&rd, s, q, name);
	if (err)
		return err;
	err = pick_series(&rd, &picks, &npicks);
	for (i = 0; !err && i < npicks; i++) {
		err = read_points(&rd, picks[i].id, &sp);
		if (!err && sp.n)
			fn(ctx, name, picks[i].ls.labels, picks[i].ls.n, sp.ts, sp.vals, sp.n);
	}
	for (i = 0; i < npicks; i++)
		labelset__free(&picks[i].ls);
	free(picks);
	free(sp.ts);
	free(sp.vals);
	read__end(&rd);
	return err;
}

/* ---- spans ---- */

/* The labels of picked series id (picks sorted by id), or NULL. */
static const struct pick *pick_by_id(const struct pick *picks, size_t n, uint32_t id)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (picks[mid].id == id)
			return &picks[mid];
		if (picks[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static int cmp_pick_id(const void *a, const void *b)
{
	const struct pick *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

/* a * 1e6 (ms to ns), saturated. */
static int64_t ms_to_ns(int64_t ms)
{
	int64_t ns;

	if (__builtin_mul_overflow(ms, (int64_t)NS_PER_MS, &ns))
		return ms < 0 ? INT64_MIN : INT64_MAX;
	return ns;
}

int sqlite_store__spans(struct store *base, const struct store_query *q, size_t limit,
			store_span_fn fn, void *ctx, bool *truncated)
{
	struct sqlite_store *s = sqlite_store(base);
	struct pick *picks = NULL;
	size_t npicks = 0, n = 0, rows = 0, i;
	sqlite3_stmt *st = NULL;
	int64_t lo_ns, until_ns;
	struct read rd;
	int rc = SQLITE_DONE, err;

	if (truncated)
		*truncated = false;
	if (!fn)
		return -EINVAL;
	err = read__begin(&rd, s, q, STORE_SPAN_METRIC);
	if (err)
		return err;
	err = pick_series(&rd, &picks, &npicks);
	if (err || !npicks)
		goto out;
	qsort(picks, npicks, sizeof(*picks), cmp_pick_id);
	st = rd.r->st[R_SPANS];
	lo_ns = ms_to_ns(rd.lo);
	until_ns = ms_to_ns(rd.until);
	/* No span is longer than STORE_MAX_SPAN_NS: one overlapping the range
	 * starts after lo - that, which bounds the index scan from below. */
	sqlite3_bind_int64(st, 1, until_ns);
	sqlite3_bind_int64(st, 2, lo_ns - STORE_MAX_SPAN_NS - 1);
	sqlite3_bind_int64(st, 3, lo_ns);
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t sid = sqlite3_column_int64(st, 0);
		const struct pick *p = sid > 0 && sid <= UINT32_MAX
					       ? pick_by_id(picks, npicks, (uint32_t)sid)
					       : NULL;
		struct store_span sp;

		if (store_past_deadline(rd.deadline_ns, ++rows)) {
			err = -ETIMEDOUT;
			break;
		}
		if (!p)
			continue;
		if (n == limit) {
			if (truncated)
				*truncated = true;
			break;
		}
		sp = (struct store_span){
			.start_ns = sqlite3_column_int64(st, 1),
			.end_ns = sqlite3_column_int64(st, 2),
			.device = (int32_t)sqlite3_column_int64(st, 3),
			.stream = (uint32_t)sqlite3_column_int64(st, 4),
			.correlation = (uint32_t)sqlite3_column_int64(st, 5),
			.tid = (uint32_t)sqlite3_column_int64(st, 6),
			.bytes = (uint64_t)sqlite3_column_int64(st, 7),
			.kind = (const char *)sqlite3_column_text(st, 8),
			.name = (const char *)sqlite3_column_text(st, 9),
			.from = (const char *)sqlite3_column_text(st, 10),
		};
		if (!sp.kind || !sp.name || !sp.from) {
			err = -ENOMEM;
			break;
		}
		fn(ctx, p->ls.labels, p->ls.n, &sp);
		n++;
	}
	if (!err && rc != SQLITE_DONE && rc != SQLITE_ROW)
		err = sql_fail(rd.r->db, rc, "read spans");
	sqlite3_reset(st);
out:
	for (i = 0; i < npicks; i++)
		labelset__free(&picks[i].ls);
	free(picks);
	read__end(&rd);
	return err;
}
