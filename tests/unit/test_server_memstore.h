/* test_server_memstore.h: a small in-memory store (store.h's ops) for the
 * server's unit tests, so that routes and query builders are tested without
 * SQLite: windows and points in arrays under one mutex, label matching by
 * the server's own regex rules, timelines spread by overlap as store.h
 * says. It can be told to fail its next puts, to check that a failed write
 * is never acknowledged. Included by tests/unit/test_server_*.c. */
#ifndef SONDE_TESTS_SERVER_MEMSTORE_H
#define SONDE_TESTS_SERVER_MEMSTORE_H

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/regex.h"
#include "profile/profile.h"
#include "server/parse.h"
#include "server/lset.h"
#include "store/store.h"

struct mem_window {
	struct lset labels;
	int64_t start, end;
	struct profile *prof;
};

struct mem_point {
	char *name;
	struct lset labels;
	int64_t ts;
	double v;
};

struct memstore {
	struct store base;
	pthread_mutex_t lock;
	struct mem_window *w;
	size_t nw, capw;
	struct mem_point *p;
	size_t np, capp;
	int fail_puts; /* the next this many puts fail with -EIO */
	int expires;   /* expire calls seen */
	int64_t last_expire_before;
};

static struct profile *mem_copy_profile(const struct profile *src)
{
	struct profile *p = profile__new(src->type, src->unit, src->period);
	struct prof_frame fr[PROF_MAX_FRAMES];

	for (size_t i = 0; i < src->nsamples; i++) {
		const struct prof_sample *s = &src->samples[i];

		if (s->count <= 0)
			continue;
		for (uint32_t j = 0; j < s->nlocs; j++) {
			const struct prof_location *l = &src->locs[s->locs[j]];

			memset(&fr[j], 0, sizeof(fr[j]));
			fr[j].func = profile__str(src, l->func);
			fr[j].module = l->module ? profile__str(src, l->module) : NULL;
			fr[j].kernel = l->kernel;
		}
		profile__add(p, 0, 0, "", fr, s->nlocs, s->count);
	}
	return p;
}

static bool mem_match(const struct lset *ls, const struct store_query *q)
{
	for (size_t i = 0; i < q->nmatchers; i++) {
		const struct store_matcher *m = &q->matchers[i];
		const char *v = lset__get(ls, m->name);
		bool ok;

		if (!v)
			v = "";
		switch (m->op) {
		case STORE_EQ:
			ok = !strcmp(v, m->value);
			break;
		case STORE_NE:
			ok = strcmp(v, m->value);
			break;
		case STORE_RE:
			ok = regex_match_anchored(m->value, v);
			break;
		default:
			ok = !regex_match_anchored(m->value, v);
			break;
		}
		if (!ok)
			return false;
	}
	return true;
}

static int mem_put_windows(struct store *s, const struct store_window *w, size_t n)
{
	struct memstore *m = (struct memstore *)s;
	int err = 0;

	pthread_mutex_lock(&m->lock);
	if (m->fail_puts > 0) {
		m->fail_puts--;
		err = -EIO;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct mem_window *mw;

		if (!lset__get(&(struct lset){(struct store_label *)w[i].labels, w[i].nlabels,
					      w[i].nlabels},
			       "type") ||
		    w[i].start_ms >= w[i].end_ms) {
			err = -EINVAL;
			goto out;
		}
		if (m->nw == m->capw) {
			m->capw = m->capw ? 2 * m->capw : 16;
			m->w = realloc(m->w, m->capw * sizeof(*m->w));
		}
		mw = &m->w[m->nw++];
		memset(mw, 0, sizeof(*mw));
		for (size_t k = 0; k < w[i].nlabels; k++)
			lset__set(&mw->labels, w[i].labels[k].name, w[i].labels[k].value);
		mw->start = w[i].start_ms;
		mw->end = w[i].end_ms;
		mw->prof = mem_copy_profile(w[i].prof);
	}
out:
	pthread_mutex_unlock(&m->lock);
	return err;
}

static int mem_put_points(struct store *s, const struct store_point *p, size_t n)
{
	struct memstore *m = (struct memstore *)s;
	int err = 0;

	pthread_mutex_lock(&m->lock);
	if (m->fail_puts > 0) {
		m->fail_puts--;
		err = -EIO;
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		struct mem_point *mp;

		if (m->np == m->capp) {
			m->capp = m->capp ? 2 * m->capp : 16;
			m->p = realloc(m->p, m->capp * sizeof(*m->p));
		}
		mp = &m->p[m->np++];
		memset(mp, 0, sizeof(*mp));
		mp->name = strdup(p[i].name);
		for (size_t k = 0; k < p[i].nlabels; k++)
			lset__set(&mp->labels, p[i].labels[k].name, p[i].labels[k].value);
		mp->ts = p[i].ts_ms;
		mp->v = p[i].value;
	}
out:
	pthread_mutex_unlock(&m->lock);
	return err;
}

static bool mem_overlaps(const struct mem_window *w, const struct store_query *q)
{
	return w->start < q->until_ms && w->end > q->from_ms;
}

static int mem_select(struct store *s, const struct store_query *q, struct profile *out, char *unit,
		      size_t unitlen)
{
	struct memstore *m = (struct memstore *)s;
	bool first = true;

	if (q->from_ms >= q->until_ms)
		return -EINVAL;
	unit[0] = '\0';
	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < m->nw; i++) {
		struct mem_window *w = &m->w[i];
		struct profile *p = w->prof;
		struct prof_frame fr[PROF_MAX_FRAMES];

		if (!mem_overlaps(w, q) || !mem_match(&w->labels, q))
			continue;
		if (first) {
			snprintf(unit, unitlen, "%s", p->unit);
			out->period = p->period;
			first = false;
		}
		for (size_t k = 0; k < p->nsamples; k++) {
			const struct prof_sample *sm = &p->samples[k];

			for (uint32_t j = 0; j < sm->nlocs; j++) {
				const struct prof_location *l = &p->locs[sm->locs[j]];

				memset(&fr[j], 0, sizeof(fr[j]));
				fr[j].func = profile__str(p, l->func);
				fr[j].module = l->module ? profile__str(p, l->module) : NULL;
				fr[j].kernel = l->kernel;
			}
			profile__add(out, 0, 0, "", fr, sm->nlocs, sm->count);
		}
	}
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static int mem_timeline(struct store *s, const struct store_query *q, int64_t step, double *values,
			size_t nsteps)
{
	struct memstore *m = (struct memstore *)s;

	if (q->from_ms >= q->until_ms || step <= 0)
		return -EINVAL;
	memset(values, 0, nsteps * sizeof(*values));
	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < m->nw; i++) {
		struct mem_window *w = &m->w[i];

		if (!mem_overlaps(w, q) || !mem_match(&w->labels, q))
			continue;
		for (size_t k = 0; k < nsteps; k++) {
			int64_t a = q->from_ms + (int64_t)k * step, b = a + step;

			if (a < w->start)
				a = w->start;
			if (b > w->end)
				b = w->end;
			if (b > a)
				values[k] += (double)w->prof->total * (double)(b - a) /
					     (double)(w->end - w->start);
		}
	}
	pthread_mutex_unlock(&m->lock);
	return 0;
}

/* One call per window, not per series: the server's grouping adds them
 * up the same way. */
static int mem_series_totals(struct store *s, const struct store_query *q, store_series_fn fn,
			     void *ctx)
{
	struct memstore *m = (struct memstore *)s;

	if (q->from_ms >= q->until_ms)
		return -EINVAL;
	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < m->nw; i++) {
		struct mem_window *w = &m->w[i];

		if (mem_overlaps(w, q) && mem_match(&w->labels, q))
			fn(ctx, w->labels.v, w->labels.n, w->prof->total, w->start, w->end);
	}
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static int mem_str_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int mem_labels(struct store *s, const struct store_query *q, const char *name,
		      store_string_fn fn, void *ctx)
{
	struct memstore *m = (struct memstore *)s;
	const char **v = NULL;
	size_t n = 0, cap = 0;

	if (q->from_ms >= q->until_ms)
		return -EINVAL;
	pthread_mutex_lock(&m->lock);
	for (size_t i = 0; i < m->nw; i++) {
		struct mem_window *w = &m->w[i];

		if (!mem_overlaps(w, q) || !mem_match(&w->labels, q))
			continue;
		for (size_t k = 0; k < w->labels.n; k++) {
			if (name && strcmp(w->labels.v[k].name, name))
				continue;
			if (n == cap) {
				cap = cap ? 2 * cap : 16;
				v = realloc(v, cap * sizeof(*v));
			}
			v[n++] = name ? w->labels.v[k].value : w->labels.v[k].name;
		}
	}
	if (n)
		qsort(v, n, sizeof(*v), mem_str_cmp);
	for (size_t i = 0; i < n; i++)
		if (!i || strcmp(v[i], v[i - 1]))
			fn(ctx, v[i]);
	pthread_mutex_unlock(&m->lock);
	free(v);
	return 0;
}

static int mem_label_names(struct store *s, const struct store_query *q, store_string_fn fn,
			   void *ctx)
{
	return mem_labels(s, q, NULL, fn, ctx);
}

static int mem_label_values(struct store *s, const struct store_query *q, const char *name,
			    store_string_fn fn, void *ctx)
{
	return mem_labels(s, q, name, fn, ctx);
}

/* Points of one series per call, grouped by labels in order of first
 * appearance. */
static int mem_points(struct store *s, const char *name, const struct store_query *q,
		      store_points_fn fn, void *ctx)
{
	struct memstore *m = (struct memstore *)s;
	bool *done;

	pthread_mutex_lock(&m->lock);
	done = calloc(m->np + 1, sizeof(*done));
	for (size_t i = 0; i < m->np; i++) {
		int64_t *ts = malloc((m->np + 1) * sizeof(*ts));
		double *vs = malloc((m->np + 1) * sizeof(*vs));
		size_t n = 0;

		if (done[i] || strcmp(m->p[i].name, name) || !mem_match(&m->p[i].labels, q)) {
			free(ts);
			free(vs);
			continue;
		}
		for (size_t k = i; k < m->np; k++) {
			struct mem_point *pk = &m->p[k];
			bool same = !done[k] && !strcmp(pk->name, name) &&
				    pk->labels.n == m->p[i].labels.n;

			for (size_t j = 0; same && j < pk->labels.n; j++) {
				const char *v = lset__get(&m->p[i].labels, pk->labels.v[j].name);

				same = v && !strcmp(v, pk->labels.v[j].value);
			}
			if (!same)
				continue;
			done[k] = true;
			if (pk->ts >= q->from_ms && pk->ts < q->until_ms) {
				ts[n] = pk->ts;
				vs[n++] = pk->v;
			}
		}
		if (n)
			fn(ctx, name, m->p[i].labels.v, m->p[i].labels.n, ts, vs, n);
		free(ts);
		free(vs);
	}
	free(done);
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static int mem_expire(struct store *s, int64_t before)
{
	struct memstore *m = (struct memstore *)s;
	size_t o = 0;

	pthread_mutex_lock(&m->lock);
	m->expires++;
	m->last_expire_before = before;
	for (size_t i = 0; i < m->nw; i++) {
		if (m->w[i].end <= before) {
			lset__free(&m->w[i].labels);
			profile__free(m->w[i].prof);
			continue;
		}
		m->w[o++] = m->w[i];
	}
	m->nw = o;
	pthread_mutex_unlock(&m->lock);
	return 0;
}

static void mem_stats(struct store *s, struct store_stats *out)
{
	struct memstore *m = (struct memstore *)s;

	memset(out, 0, sizeof(*out));
	pthread_mutex_lock(&m->lock);
	out->windows = m->nw;
	out->series = m->nw;
	out->points = m->np;
	for (size_t i = 0; i < m->nw; i++)
		out->samples += m->w[i].prof->nsamples;
	pthread_mutex_unlock(&m->lock);
}

static void mem_close(struct store *s)
{
	struct memstore *m = (struct memstore *)s;

	for (size_t i = 0; i < m->nw; i++) {
		lset__free(&m->w[i].labels);
		profile__free(m->w[i].prof);
	}
	for (size_t i = 0; i < m->np; i++) {
		free(m->p[i].name);
		lset__free(&m->p[i].labels);
	}
	free(m->w);
	free(m->p);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

static const struct store_ops mem_ops = {
	.name = "memory",
	.put_windows = mem_put_windows,
	.put_points = mem_put_points,
	.select = mem_select,
	.timeline = mem_timeline,
	.label_names = mem_label_names,
	.label_values = mem_label_values,
	.points = mem_points,
	.series_totals = mem_series_totals,
	.expire = mem_expire,
	.stats = mem_stats,
	.close = mem_close,
};

static struct memstore *memstore__new(void)
{
	struct memstore *m = calloc(1, sizeof(*m));

	m->base.ops = &mem_ops;
	pthread_mutex_init(&m->lock, NULL);
	return m;
}

#endif
