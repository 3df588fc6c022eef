/* remote.c: a store (store.h) whose reads are answered by every site of a
 * request at once and merged, so that the server's own query routes
 * (src/server/api_query.c) answer for all the sites: they parse and check
 * the request, read through this store, and build their answer from what
 * it returns exactly as they do from a local one.
 *
 *   select        each site's /api/v1/pprof of the selection (the whole
 *                 profile, never cut) summed stack by stack into one
 *                 profile, so that flame graphs, diffs, top functions and
 *                 downloads are computed from the merged samples
 *   timeline      /api/v1/timeseries at the caller's steps, summed per step
 *   label_*       /api/v1/labels and /api/v1/label/values, unioned, sorted
 *   points        /api/v1/points, a series' points from every site
 *                 concatenated in time order, series in label order
 *   series_totals /api/v1/totals grouped by the request's label (r->by):
 *                 the sites' groups, which the caller sums by value
 *
 * Writes are refused: the coordinator ingests nothing. */
#include <curl/curl.h>
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "common/idmap.h"
#include "common/sbuf.h"
#include "common/xalloc.h"
#include "coord/coord_internal.h"
#include "profile/profile.h"
#include "server/server_internal.h"

static struct coord_req *req_of(struct store *s)
{
	return (struct coord_req *)s;
}

/* GETs path?ARGS where ARGS are q's selection and extra ("&name=x", or ""). */
static int fan_query(struct coord_req *r, const char *path, const struct store_query *q,
		     const char *extra, coord_answer_fn fn, void *ctx)
{
	struct sbuf t = {0};
	int err;

	err = sbuf__printf(&t, "%s?", path);
	if (!err)
		err = coord_query_args(&t, q);
	if (!err)
		err = sbuf__puts(&t, extra);
	if (!err)
		err = coord_req__fan(r, t.buf, fn, ctx);
	else
		err = -ENOMEM;
	sbuf__free(&t);
	return err;
}

/* "&key=escaped value" into buf; 0 or -ENOMEM. */
static int extra_arg(struct sbuf *b, const char *key, const char *value)
{
	char *esc = curl_easy_escape(NULL, value, 0);
	int err;

	if (!esc)
		return -ENOMEM;
	err = sbuf__printf(b, "&%s=%s", key, esc);
	curl_free(esc);
	return err;
}

/* A site's JSON answer: the object, or -EINVAL with why. */
static json_t *load_object(const char *body, size_t len, char *why, size_t whylen)
{
	json_error_t je;
	json_t *j = json_loadb(body, len, 0, &je);

	if (!j)
		snprintf(why, whylen, "not JSON: %s", je.text);
	else if (!json_is_object(j)) {
		snprintf(why, whylen, "not a JSON object");
		json_decref(j);
		j = NULL;
	}
	return j;
}

/* ---- select: the sites' pprof downloads summed by stack ---- */

/* A site's frames already in the merged profile: its frame id -> our
 * location, an open-addressing table. */

struct select_ctx {
	struct profile *out;
	char *unit;
	size_t unitlen;
	struct idmap fm; /* a site's frame id -> its location in out + 1 */
	uint32_t locs[PROF_MAX_FRAMES];
	int64_t period;
	char site_unit[64];
	bool site_any;
};

/* What a sample counts, as the server's download wrote it: sample types
 * [samples/count, TYPE/UNIT], cpu samples as nanoseconds with their period
 * (api_query.c's profile_download). */
static int on_header(void *ctx, const struct pprof_header *h)
{
	struct select_ctx *c = ctx;
	const char *unit = h->units[h->ntypes - 1];

	if (!strcmp(unit, "nanoseconds") && h->period > 1) {
		snprintf(c->site_unit, sizeof(c->site_unit), "samples");
		if (!c->period)
			c->period = h->period;
	} else {
		snprintf(c->site_unit, sizeof(c->site_unit), "%s", unit);
	}
	return 0;
}

static int on_sample(void *ctx, const struct pprof_sample *s)
{
	struct select_ctx *c = ctx;
	int64_t count = s->nvalues ? s->values[0] : 0;

	if (count <= 0)
		return 0;
	c->site_any = true;
	for (size_t i = 0; i < s->nframes; i++) {
		uint32_t known = idmap__get(&c->fm, s->frame_ids[i]);

		if (!known) {
			uint32_t loc = profile__location(c->out, &s->frames[i]);

			if (idmap__put(&c->fm, s->frame_ids[i], loc + 1))
				return -ENOMEM;
			c->locs[i] = loc;
		} else {
			c->locs[i] = known - 1;
		}
	}
	return profile__add_locs(c->out, 0, 0, "", c->locs, s->nframes, count);
}

static int select_answer(void *ctx, size_t site, const char *body, size_t len, char *why,
			 size_t whylen)
{
	struct select_ctx *c = ctx;
	struct pprof_visitor v = {.header = on_header, .sample = on_sample, .ctx = c};
	int err;

	idmap__free(&c->fm); /* a site's frame ids are its own */
	c->site_unit[0] = '\0';
	c->site_any = false;
	err = profile__visit_pprof(body, len, COORD_MAX_PPROF, &v);
	if (err == -ENOMEM)
		return err;
	if (err) {
		snprintf(why, whylen, "its pprof: %s",
			 err == -EFBIG	     ? "too large"
			 : err == -EOVERFLOW ? "values past 2^63"
					     : "malformed");
		return -EINVAL;
	}
	/* The unit of the first site with samples (an empty selection is
	 * written as "count"), as a store takes the earliest window's. */
	if (c->site_any && !c->unit[0])
		snprintf(c->unit, c->unitlen, "%s", c->site_unit);
	return 0;
}

static int remote_select(struct store *s, const struct store_query *q, struct profile *out,
			 char *unit, size_t unitlen)
{
	struct select_ctx c = {.out = out, .unit = unit, .unitlen = unitlen};
	char none[1];
	int err;

	if (!unit || !unitlen) {
		c.unit = none;
		c.unitlen = sizeof(none);
	}
	c.unit[0] = '\0';
	err = fan_query(req_of(s), "/api/v1/pprof", q, "", select_answer, &c);
	if (!err && c.period)
		out->period = c.period;
	idmap__free(&c.fm);
	return err;
}

/* ---- timeline: the sites' time series summed per step ---- */

struct timeline_ctx {
	int64_t from, step;
	double *values;
	size_t n;
};

/* A number of a site's answer: a number, or NaN and the infinities as
 * the server writes them. */
static bool json_value(const json_t *j, double *v)
{
	const char *s = json_string_value(j);

	if (json_is_number(j)) {
		*v = json_number_value(j);
		return true;
	}
	if (!s)
		return false;
	if (!strcmp(s, "NaN"))
		*v = NAN;
	else if (!strcmp(s, "+Inf"))
		*v = INFINITY;
	else if (!strcmp(s, "-Inf"))
		*v = -INFINITY;
	else
		return false;
	return true;
}

static int timeline_answer(void *ctx, size_t site, const char *body, size_t len, char *why,
			   size_t whylen)
{
	struct timeline_ctx *c = ctx;
	json_t *j = load_object(body, len, why, whylen), *vals;
	json_int_t start, step;
	size_t i;
	double v;
	int err = -EINVAL;

	if (!j)
		return -EINVAL;
	vals = json_object_get(j, "values");
	start = json_integer_value(json_object_get(j, "start_ms"));
	step = json_integer_value(json_object_get(j, "step_ms"));
	if (!json_is_array(vals) || step <= 0) {
		snprintf(why, whylen, "a time series without values or step_ms");
		goto cleanup;
	}
	for (i = 0; i < json_array_size(vals); i++) {
		int64_t a, b;

		if (!json_value(json_array_get(vals, i), &v)) {
			snprintf(why, whylen, "a time series value that is no number");
			goto cleanup;
		}
		/* A site whose retention cut the range starts later; its
		 * steps are spread over ours by their overlap (they line up
		 * whenever it kept the whole range). */
		a = start + (int64_t)i * step;
		b = a + step;
		for (int64_t k = a > c->from ? (a - c->from) / c->step : 0; (size_t)k < c->n; k++) {
			int64_t lo = c->from + k * c->step, hi = lo + c->step;
			int64_t ov = (b < hi ? b : hi) - (a > lo ? a : lo);

			if (lo >= b)
				break;
			if (ov > 0)
				c->values[k] += ov == step ? v : v * (double)ov / (double)step;
		}
	}
	err = 0;
cleanup:
	json_decref(j);
	return err;
}

static int remote_timeline(struct store *s, const struct store_query *q, int64_t step_ms,
			   double *values, size_t nsteps)
{
	struct timeline_ctx c = {q->from_ms, step_ms, values, nsteps};
	struct sbuf extra = {0};
	int err;

	memset(values, 0, nsteps * sizeof(*values));
	if (sbuf__printf(&extra, "&step=%lld", (long long)step_ms))
		return -ENOMEM;
	err = fan_query(req_of(s), "/api/v1/timeseries", q, extra.buf, timeline_answer, &c);
	sbuf__free(&extra);
	return err;
}

/* ---- label names and values: unioned and sorted ---- */

struct strings_ctx {
	const char *key;
	char **v;
	size_t n, cap;
};

static int strings_answer(void *ctx, size_t site, const char *body, size_t len, char *why,
			  size_t whylen)
{
	struct strings_ctx *c = ctx;
	json_t *j = load_object(body, len, why, whylen), *arr, *e;
	size_t i;
	int err = 0;

	if (!j)
		return -EINVAL;
	arr = json_object_get(j, c->key);
	if (!json_is_array(arr)) {
		snprintf(why, whylen, "no %s list", c->key);
		err = -EINVAL;
	}
	json_array_foreach(err ? NULL : arr, i, e)
	{
		const char *s = json_string_value(e);

		if (!s) {
			snprintf(why, whylen, "a %s entry that is no string", c->key);
			err = -EINVAL;
			break;
		}
		if (array_grow((void **)&c->v, &c->cap, c->n + 1, sizeof(*c->v)) ||
		    !(c->v[c->n] = strdup(s))) {
			err = -ENOMEM;
			break;
		}
		c->n++;
	}
	json_decref(j);
	return err;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The strings of every site, each once, in byte order, to fn. */
static int strings_read(struct store *s, const char *path, const struct store_query *q,
			const char *extra, const char *key, store_string_fn fn, void *ctx)
{
	struct strings_ctx c = {.key = key};
	int err;

	err = fan_query(req_of(s), path, q, extra, strings_answer, &c);
	if (!err && c.n)
		qsort(c.v, c.n, sizeof(*c.v), cmp_str);
	for (size_t i = 0; !err && i < c.n; i++)
		if (!i || strcmp(c.v[i], c.v[i - 1]))
			fn(ctx, c.v[i]);
	for (size_t i = 0; i < c.n; i++)
		free(c.v[i]);
	free(c.v);
	return err;
}

static int remote_label_names(struct store *s, const struct store_query *q, store_string_fn fn,
			      void *ctx)
{
	return strings_read(s, "/api/v1/labels", q, "", "names", fn, ctx);
}

static int remote_label_values(struct store *s, const struct store_query *q, const char *name,
			       store_string_fn fn, void *ctx)
{
	struct sbuf extra = {0};
	int err;

	if (extra_arg(&extra, "name", name))
		return -ENOMEM;
	err = strings_read(s, "/api/v1/label/values", q, extra.buf, "values", fn, ctx);
	sbuf__free(&extra);
	return err;
}

/* ---- points: each series' points from every site, in time order ---- */

struct pseries {
	char *key; /* its labels, sorted, as "name\0value\0..." (keylen bytes) */
	size_t keylen;
	struct store_label *labels; /* pointing into key */
	size_t nlabels;
	int64_t *ts;
	double *v;
	size_t n, cap, capv;
};

struct points_ctx {
	struct pseries *s;
	size_t n, cap;
	size_t npoints;	    /* over every series: bounded */
	struct idmap index; /* key hash -> series + 1 */
};

static int cmp_label(const void *a, const void *b)
{
	return strcmp(((const struct store_label *)a)->name, ((const struct store_label *)b)->name);
}

/* The series of labels obj (a JSON object of strings), added if new. */
static struct pseries *points__series(struct points_ctx *c, const json_t *obj, int *err)
{
	struct store_label *l = NULL;
	struct sbuf key = {0};
	const char *k;
	json_t *v;
	size_t n = 0, i, pos = IDMAP_START;
	uint32_t h, id;
	struct pseries *ps = NULL;

	*err = -ENOMEM;
	l = calloc(json_object_size(obj) + 1, sizeof(*l));
	if (!l)
		return NULL;
	json_object_foreach((json_t *)obj, k, v)
	{
		if (!json_string_value(v)) {
			*err = -EINVAL;
			goto cleanup;
		}
		l[n++] = (struct store_label){k, json_string_value(v)};
	}
	qsort(l, n, sizeof(*l), cmp_label);
	for (i = 0; i < n; i++)
		if (sbuf__add(&key, l[i].name, strlen(l[i].name) + 1) ||
		    sbuf__add(&key, l[i].value, strlen(l[i].value) + 1))
			goto cleanup;
	if (sbuf__add(&key, "", 0))
		goto cleanup;
	h = (uint32_t)hash_bytes(key.buf, key.len, 0);
	while ((id = idmap__next(&c->index, h, &pos))) {
		struct pseries *e = &c->s[id - 1];

		if (e->keylen == key.len && !memcmp(e->key, key.buf, key.len)) {
			ps = e;
			*err = 0;
			goto cleanup;
		}
	}
	if (array_grow((void **)&c->s, &c->cap, c->n + 1, sizeof(*c->s)))
		goto cleanup;
	ps = &c->s[c->n];
	ps->keylen = key.len;
	ps->key = sbuf__steal(&key, NULL);
	ps->labels = l;
	ps->nlabels = n;
	l = NULL;
	if (!ps->key)
		goto cleanup;
	/* The labels point into the key from now on. */
	for (i = 0, k = ps->key; i < n; i++) {
		ps->labels[i].name = k;
		k += strlen(k) + 1;
		ps->labels[i].value = k;
		k += strlen(k) + 1;
	}
	if (idmap__put(&c->index, h, (uint32_t)c->n + 1)) {
		free(ps->key);
		free(ps->labels);
		ps = NULL;
		goto cleanup;
	}
	c->n++;
	*err = 0;
cleanup:
	if (*err)
		ps = NULL;
	free(l);
	sbuf__free(&key);
	return ps;
}

static int points_answer(void *ctx, size_t site, const char *body, size_t len, char *why,
			 size_t whylen)
{
	struct points_ctx *c = ctx;
	json_t *j = load_object(body, len, why, whylen), *series, *e, *p;
	size_t i, k;
	int err = 0;

	if (!j)
		return -EINVAL;
	series = json_object_get(j, "series");
	if (!json_is_array(series)) {
		snprintf(why, whylen, "points without a series list");
		err = -EINVAL;
	}
	json_array_foreach(err ? NULL : series, i, e)
	{
		json_t *labels = json_object_get(e, "labels"), *pts = json_object_get(e, "points");
		struct pseries *ps;

		if (!json_is_object(labels) || !json_is_array(pts)) {
			snprintf(why, whylen, "a series without labels or points");
			err = -EINVAL;
			break;
		}
		ps = points__series(c, labels, &err);
		if (!ps) {
			if (err == -EINVAL)
				snprintf(why, whylen, "a label value that is no string");
			break;
		}
		json_array_foreach(pts, k, p)
		{
			double v;

			if (!json_is_integer(json_array_get(p, 0)) ||
			    !json_value(json_array_get(p, 1), &v)) {
				snprintf(why, whylen, "a point that is not [ms, value]");
				err = -EINVAL;
				break;
			}
			/* Past the server's own limit the answer is a 400:
			 * keep one more so that the route says so. */
			if (c->npoints > SERVER_MAX_POINTS_OUT)
				continue;
			if (array_grow((void **)&ps->ts, &ps->cap, ps->n + 1, sizeof(*ps->ts)) ||
			    array_grow((void **)&ps->v, &ps->capv, ps->n + 1, sizeof(*ps->v))) {
				err = -ENOMEM;
				break;
			}
			ps->ts[ps->n] = json_integer_value(json_array_get(p, 0));
			ps->v[ps->n++] = v;
			c->npoints++;
		}
		if (err)
			break;
	}
	json_decref(j);
	return err;
}

static int cmp_series(const void *a, const void *b)
{
	const struct pseries *x = a, *y = b;
	size_t n = x->keylen < y->keylen ? x->keylen : y->keylen;
	int c = memcmp(x->key, y->key, n);

	return c ? c : (x->keylen > y->keylen) - (x->keylen < y->keylen);
}

/* Sorts a series' points by time, keeping the order of equal times (the
 * sites' order): an insertion sort, as each site's run is sorted already
 * and most series come from one site. */
static void pseries__sort(struct pseries *ps)
{
	for (size_t i = 1; i < ps->n; i++) {
		int64_t t = ps->ts[i];
		double v = ps->v[i];
		size_t j = i;

		if (ps->ts[i - 1] <= t)
			continue;
		while (j > 0 && ps->ts[j - 1] > t) {
			ps->ts[j] = ps->ts[j - 1];
			ps->v[j] = ps->v[j - 1];
			j--;
		}
		ps->ts[j] = t;
		ps->v[j] = v;
	}
}

static int remote_points(struct store *s, const char *name, const struct store_query *q,
			 store_points_fn fn, void *ctx)
{
	struct points_ctx c = {0};
	struct sbuf extra = {0};
	int err;

	if (extra_arg(&extra, "name", name)) {
		err = -ENOMEM;
		goto cleanup;
	}
	err = fan_query(req_of(s), "/api/v1/points", q, extra.buf, points_answer, &c);
	if (err)
		goto cleanup;
	if (c.n)
		qsort(c.s, c.n, sizeof(*c.s), cmp_series);
	for (size_t i = 0; i < c.n; i++) {
		pseries__sort(&c.s[i]);
		if (c.s[i].n)
			fn(ctx, name, c.s[i].labels, c.s[i].nlabels, c.s[i].ts, c.s[i].v, c.s[i].n);
	}
cleanup:
	for (size_t i = 0; i < c.n; i++) {
		free(c.s[i].key);
		free(c.s[i].labels);
		free(c.s[i].ts);
		free(c.s[i].v);
	}
	free(c.s);
	idmap__free(&c.index);
	sbuf__free(&extra);
	return err;
}

/* ---- series totals, grouped by the request's label ---- */

struct totals_ctx {
	const char *by;
	store_series_fn fn;
	void *ctx;
};

/* Each group of a site is handed on as a series with that one label: the
 * callers (totals, group_by) group by that label only, and sum what they
 * are given by its value. */
static int totals_answer(void *ctx, size_t site, const char *body, size_t len, char *why,
			 size_t whylen)
{
	struct totals_ctx *c = ctx;
	json_t *j = load_object(body, len, why, whylen), *groups, *g;
	size_t i;
	int err = 0;

	if (!j)
		return -EINVAL;
	groups = json_object_get(j, "groups");
	if (!json_is_array(groups)) {
		snprintf(why, whylen, "totals without a groups list");
		err = -EINVAL;
	}
	json_array_foreach(err ? NULL : groups, i, g)
	{
		const char *v = json_string_value(json_object_get(g, "value"));
		json_t *total = json_object_get(g, "total"), *f = json_object_get(g, "from_ms"),
		       *u = json_object_get(g, "until_ms");
		struct store_label l = {c->by, v};

		if (!v || !json_is_integer(total) || !json_is_integer(f) || !json_is_integer(u)) {
			snprintf(why, whylen, "a group without value, total, from_ms, until_ms");
			err = -EINVAL;
			break;
		}
		c->fn(c->ctx, &l, *v ? 1 : 0, json_integer_value(total), json_integer_value(f),
		      json_integer_value(u));
	}
	json_decref(j);
	return err;
}

static int remote_series_totals(struct store *s, const struct store_query *q, store_series_fn fn,
				void *ctx)
{
	struct coord_req *r = req_of(s);
	struct totals_ctx c = {r->by ? r->by : "service_name", fn, ctx};
	struct sbuf extra = {0};
	int err;

	if (extra_arg(&extra, "by", c.by))
		return -ENOMEM;
	err = fan_query(r, "/api/v1/totals", q, extra.buf, totals_answer, &c);
	sbuf__free(&extra);
	return err;
}

/* ---- what a coordinator does not do ---- */

static int remote_put_windows(struct store *s, const struct store_window *w, size_t n)
{
	return -EROFS;
}

static int remote_put_points(struct store *s, const struct store_point *p, size_t n)
{
	return -EROFS;
}

static int remote_expire(struct store *s, int64_t before_ms)
{
	return 0;
}

static void remote_stats(struct store *s, struct store_stats *out)
{
	memset(out, 0, sizeof(*out));
}

static void remote_close(struct store *s)
{
}

const struct store_ops coord_remote_ops = {
	.name = "coordinator",
	.put_windows = remote_put_windows,
	.put_points = remote_put_points,
	.select = remote_select,
	.timeline = remote_timeline,
	.label_names = remote_label_names,
	.label_values = remote_label_values,
	.points = remote_points,
	.series_totals = remote_series_totals,
	.expire = remote_expire,
	.stats = remote_stats,
	.close = remote_close,
};
