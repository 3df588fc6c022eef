/* clickhouse_query.c: the reads of the ClickHouse store that store.h offers.
 * Each starts by finding the series with data in its range (one query) and
 * matching their labels here, with labels.c's matchers, exactly as the
 * SQLite store does (a regex means the same in both); labels come from a
 * cache, or from the series table for ids not yet seen. The read proper is
 * then one aggregation over the matching series' rows: sums per stack
 * (select), per range (timeline), per series (totals), or points. A
 * select's stacks and functions are resolved from caches, filled from their
 * tables for what is missing, and handed over as a tree (struct
 * store_tree, store.c makes a profile of it for store__select). */
#include "store/clickhouse_internal.h"
#include "common/clock.h"
#include "common/sat.h"
#include "common/xalloc.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "profile/profile.h"

/* A function without a source is looked up again after this long: another
 * server may have learnt it. */
#define FUNC_RECHECK_MS 60000

static int damaged(const char *what)
{
	pr_warn("clickhouse: the answer to '%s' is malformed", what);
	return -EIO;
}

/* Sums of stored values (all >= 0) are asked for twice: as Int64, exact
 * but wrapping past 2^63 as ClickHouse adds them, and as Float64, a little
 * off but never wrapping. The sum, or INT64_MAX when it is past that
 * (store.h: sums stop there): the Int64 is right modulo 2^64, so it is the
 * sum when it is not negative and the Float64 is below 2^64. */
static int64_t ch_sum(uint64_t wrapped, double approx)
{
	if ((int64_t)wrapped < 0 || !(approx < 0x1.8p63))
		return INT64_MAX;
	return (int64_t)wrapped;
}

/* Below this, a (series, hour)'s windows' totals can't have made the
 * rollup's Int64 sums wrap, whatever the Float64's error. */
#define CH_ROLLUP_SAFE 0x1p62

/* Appends "(id, id, ...)". */
static int sql_ids(struct sbuf *b, const uint64_t *ids, size_t n)
{
	size_t i;
	int err = sbuf__reserve(b, n * 21 + 2);

	if (!err)
		err = sbuf__puts(b, "(");
	for (i = 0; !err && i < n; i++)
		err = sbuf__printf(b, "%s%" PRIu64, i ? "," : "", ids[i]);
	return err ? err : sbuf__puts(b, ")");
}

/* Runs "<select> WHERE id IN (ids) GROUP BY id" for a table keyed by id,
 * its rows (RowBinary) into ans. */
static int query_ids(struct ch_store *s, const char *select, const uint64_t *ids, size_t n,
		     struct sbuf *ans, const char *what)
{
	struct sbuf sql = {0};
	int err = sbuf__printf(&sql, "%s WHERE id IN ", select);

	if (!err)
		err = sql_ids(&sql, ids, n);
	if (!err)
		err = sbuf__puts(&sql, " GROUP BY id FORMAT RowBinary");
	if (!err)
		err = ch__query(s, sql.buf, ans, what);
	sbuf__free(&sql);
	return err;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* ---- the caches ---- */

void ch_store__free_caches(struct ch_store *s)
{
	size_t i;

	for (i = 0; i < s->nseries; i++)
		labelset__free(&s->series[i].ls);
	for (i = 0; i < s->nfuncs; i++)
		free(s->funcs[i].name);
	free(s->series);
	free(s->stacks);
	free(s->funcs);
	free(s->frame_ids);
	idmap__free(&s->series_map);
	idmap__free(&s->stack_map);
	idmap__free(&s->func_map);
	s->series = NULL;
	s->stacks = NULL;
	s->funcs = NULL;
	s->frame_ids = NULL;
	s->nseries = s->nstacks = s->nfuncs = s->nframe_ids = 0;
	s->cap_series = s->cap_stacks = s->cap_funcs = s->cap_frame_ids = 0;
	s->cache_bytes = 0;
}

void ch_store__sources_known(struct ch_store *s, const uint64_t *ids, size_t n)
{
	size_t i;

	if (!n)
		return;
	pthread_rwlock_wrlock(&s->cache_lock);
	for (i = 0; i < n; i++) {
		uint32_t k = idmap__get(&s->func_map, ids[i]);

		if (k && !*s->funcs[k - 1].file)
			s->funcs[k - 1].fetched_ms = INT64_MIN / 2;
	}
	pthread_rwlock_unlock(&s->cache_lock);
}

/* Makes room for more entries: a cache that would pass CH_MAX_CACHE, or
 * caches past CH_MAX_CACHE_BYTES, are emptied first (under the write
 * lock). */
static void cache_room(struct ch_store *s, size_t more)
{
	if (s->nseries + more > CH_MAX_CACHE || s->nstacks + more > CH_MAX_CACHE ||
	    s->nfuncs + more > CH_MAX_CACHE || s->nframe_ids + more * 64 > 16 * CH_MAX_CACHE ||
	    s->cache_bytes > CH_MAX_CACHE_BYTES)
		ch_store__free_caches(s);
}

/* ---- the matching series ---- */

/* "<cols> FROM spans FINAL WHERE <the spans overlapping [from, until) ms,
 * none that ended by the expiry mark>". */
static int ch_sql_span_range(struct sbuf *b, int64_t from, int64_t until, const char *cols)
{
	if (from < 0)
		from = 0;
	if (until < 0)
		until = 0;
	return sbuf__printf(b,
			    "%s FROM spans FINAL WHERE end_ns > greatest(toInt64(%" PRId64
			    "), toInt64(" CH_EXPIRED_SQL ")) * 1000000 AND start_ns < %" PRId64
			    " * 1000000 AND start_ns > greatest(toInt64(%" PRId64
			    "), toInt64(" CH_EXPIRED_SQL ")) * 1000000 - %lld",
			    cols, from, until, from, STORE_MAX_SPAN_NS + 1);
}

struct picked {
	uint64_t id;
	struct labelset ls;
};

/* A count of windows of a series that start in one whole hour of a read,
 * and the sum of their totals as a Float64. */
struct hour_count {
	uint64_t series;
	int64_t hour;
	uint64_t n;
	double total;
};

struct ch_read {
	struct matchset ms;
	int64_t from, until;
	uint64_t deadline_ns; /* the query's */
	struct picked *picks; /* the matching series, with their labels */
	size_t npicks;
	uint64_t *ids; /* their ids, sorted */
	/* With CH_READ_HOURS: the matching series' windows by whole hour of
	 * the range, by (series, hour). */
	struct hour_count *hours;
	size_t nhours;
};

enum { CH_READ_HOURS = 1 };

static void ch_read__end(struct ch_read *rd)
{
	size_t i;

	for (i = 0; i < rd->npicks; i++)
		labelset__free(&rd->picks[i].ls);
	free(rd->picks);
	free(rd->ids);
	free(rd->hours);
	matchset__free(&rd->ms);
	memset(rd, 0, sizeof(*rd));
}

/* Labels of series ids not in the cache, from the series table, into the
 * cache. */
static int fetch_series(struct ch_store *s, const uint64_t *ids, size_t n)
{
	struct sbuf ans = {0};
	struct rb_reader r;
	int err;

	err = query_ids(s, "SELECT id, any(names), any(vals) FROM series", ids, n, &ans,
			"read the series' labels");
	if (err)
		goto out;
	r = rb_reader_of(&ans);
	pthread_rwlock_wrlock(&s->cache_lock);
	cache_room(s, n);
	while (!err && rbr_more(&r)) {
		struct store_label labels[STORE_MAX_LABELS];
		char *strs[2 * STORE_MAX_LABELS];
		uint64_t id = rbr_u64(&r), nn, nv, i;
		struct ch_series_ent *e;
		struct labelset ls = {0};

		nn = rbr_count(&r, STORE_MAX_LABELS);
		for (i = 0; i < nn; i++) {
			size_t len;
			const char *p = rbr_str(&r, &len);

			strs[i] = strndup(p, len);
		}
		nv = rbr_count(&r, STORE_MAX_LABELS);
		for (i = 0; i < nv; i++) {
			size_t len;
			const char *p = rbr_str(&r, &len);

			strs[STORE_MAX_LABELS + i] = i < nn ? strndup(p, len) : NULL;
		}
		if (r.bad || nn != nv)
			err = damaged("read the series' labels");
		for (i = 0; !err && i < nn; i++) {
			if (!strs[i] || !strs[STORE_MAX_LABELS + i])
				err = -ENOMEM;
			else
				labels[i] =
					(struct store_label){strs[i], strs[STORE_MAX_LABELS + i]};
		}
		if (!err)
			err = labelset__encode(&ls, labels, nn, NULL, 0);
		for (i = 0; i < nn; i++) {
			free(strs[i]);
			if (i < nv)
				free(strs[STORE_MAX_LABELS + i]);
		}
		if (err) {
			if (err == -EINVAL)
				err = damaged("read the series' labels");
			break;
		}
		if (idmap__get(&s->series_map, id)) {
			labelset__free(&ls);
			continue;
		}
		err = array_grow((void **)&s->series, &s->cap_series, s->nseries + 1,
				 sizeof(*s->series));
		if (!err)
			err = idmap__put(&s->series_map, id, (uint32_t)s->nseries + 1);
		if (err) {
			labelset__free(&ls);
			break;
		}
		e = &s->series[s->nseries++];
		e->id = id;
		e->ls = ls;
		s->cache_bytes += ls.len + ls.n * sizeof(*ls.labels);
	}
	pthread_rwlock_unlock(&s->cache_lock);
out:
	sbuf__free(&ans);
	return err;
}

/* Copies the cached labels of ids[0..n) that match into rd->picks; the ids
 * not in the cache into *missing (NULL: none is expected). */
static int pick_cached(struct ch_store *s, struct ch_read *rd, const uint64_t *ids, size_t n,
		       uint64_t *missing, size_t *nmissing)
{
	size_t i, cap = rd->npicks;
	int err = 0;

	pthread_rwlock_rdlock(&s->cache_lock);
	for (i = 0; !err && i < n; i++) {
		uint32_t k = idmap__get(&s->series_map, ids[i]);
		const struct labelset *ls;

		if (store_past_deadline(rd->deadline_ns, i)) {
			err = -ETIMEDOUT;
			break;
		}

		if (!k) {
			if (missing)
				missing[(*nmissing)++] = ids[i];
			else
				pr_debug("clickhouse: series %" PRIu64 " has no labels", ids[i]);
			continue;
		}
		ls = &s->series[k - 1].ls;
		if (!matchset__match(&rd->ms, ls->labels, ls->n))
			continue;
		err = array_grow((void **)&rd->picks, &cap, rd->npicks + 1, sizeof(*rd->picks));
		if (!err)
			err = labelset__decode(&rd->picks[rd->npicks].ls, ls->key, ls->len);
		if (!err)
			rd->picks[rd->npicks++].id = ids[i];
	}
	pthread_rwlock_unlock(&s->cache_lock);
	return err;
}

static int cmp_hour_count(const void *a, const void *b)
{
	const struct hour_count *x = a, *y = b;

	if (x->series != y->series)
		return x->series < y->series ? -1 : 1;
	return x->hour < y->hour ? -1 : x->hour > y->hour;
}

/* Reads the answer of the series query: ids (hour counts with
 * CH_READ_HOURS: the ids are their distinct series, and the counts of whole
 * hours are kept in rd). */
static int read_found(struct ch_read *rd, const struct sbuf *ans, int flags, uint64_t **ids,
		      size_t *nids)
{
	size_t row = flags & CH_READ_HOURS ? 32 : 8, n, i;
	struct rb_reader r = rb_reader_of(ans);

	if (ans->len % row)
		return damaged("find the series in range");
	n = ans->len / row;
	if (n > (flags & CH_READ_HOURS ? CH_MAX_SERIES * (size_t)64 : CH_MAX_SERIES))
		return -E2BIG;
	*ids = malloc((n ? n : 1) * sizeof(**ids));
	if (flags & CH_READ_HOURS)
		rd->hours = malloc((n ? n : 1) * sizeof(*rd->hours));
	if (!*ids || ((flags & CH_READ_HOURS) && !rd->hours))
		return -ENOMEM;
	*nids = 0;
	for (i = 0; i < n; i++) {
		uint64_t id = rbr_u64(&r);

		if (flags & CH_READ_HOURS) {
			int64_t hour = (int64_t)rbr_u64(&r);
			uint64_t count = rbr_u64(&r);
			double total = rbr_f64(&r);

			if (hour >= 0)
				rd->hours[rd->nhours++] =
					(struct hour_count){id, hour, count, total};
			if (*nids && (*ids)[*nids - 1] == id)
				continue;
		}
		(*ids)[(*nids)++] = id;
	}
	if (*nids > CH_MAX_SERIES)
		return -E2BIG;
	return 0;
}

/* Keeps the hour counts of the matching series (rd->ids, sorted). */
static void keep_picked_hours(struct ch_read *rd)
{
	size_t i, n = 0;

	for (i = 0; i < rd->nhours; i++)
		if (bsearch(&rd->hours[i].series, rd->ids, rd->npicks, sizeof(*rd->ids), cmp_u64))
			rd->hours[n++] = rd->hours[i];
	rd->nhours = n;
}

/* Checks q and finds the series that match it with data in its range:
 * profile series (metric NULL), or the series of metric. With
 * CH_READ_HOURS, also how many windows of each start in each whole hour of
 * the range, for the rollup's check. */
static int ch_read__begin(struct ch_read *rd, struct ch_store *s, const struct store_query *q,
			  const char *metric, int flags)
{
	struct sbuf sql = {0}, ans = {0};
	uint64_t *ids = NULL, *missing = NULL;
	size_t nids = 0, nmissing = 0, i;
	int err;

	memset(rd, 0, sizeof(*rd));
	if (!q || q->from_ms >= q->until_ms || (q->nmatchers && !q->matchers))
		return -EINVAL;
	rd->from = q->from_ms;
	rd->until = q->until_ms;
	rd->deadline_ns = q->deadline_ns;
	err = matchset__compile(&rd->ms, q->matchers, q->nmatchers, NULL, 0);
	if (err)
		return err;
	if (metric && !strcmp(metric, STORE_SPAN_METRIC)) {
		flags &= ~CH_READ_HOURS;
		err = ch_sql_span_range(&sql, q->from_ms, q->until_ms, "SELECT DISTINCT series");
	} else if (metric) {
		flags &= ~CH_READ_HOURS;
		err = sbuf__puts(&sql, "SELECT DISTINCT series FROM points WHERE name = ");
		if (!err)
			err = ch_sql_str(&sql, metric);
		if (!err)
			err = sbuf__puts(&sql, " AND ");
		if (!err)
			err = ch_sql_point_range(&sql, q->from_ms, q->until_ms);
	} else {
		err = ch_sql_with_range(&sql, q->from_ms, q->until_ms);
		if (!err && (flags & CH_READ_HOURS))
			err = sbuf__puts(&sql,
					 "SELECT series, if(" CH_AT_EDGES ", toInt64(-1),"
					 " " CH_HOUR_OF_START ") AS h, count(),"
					 " sum(toFloat64(total)) FROM windows PREWHERE " CH_IN_RANGE
					 " GROUP BY series, h ORDER BY series, h");
		else if (!err)
			err = sbuf__puts(
				&sql, "SELECT DISTINCT series FROM windows PREWHERE " CH_IN_RANGE);
	}
	if (!err)
		err = sbuf__puts(&sql, " FORMAT RowBinary");
	if (!err)
		err = ch__query(s, sql.buf, &ans, "find the series in range");
	if (!err)
		err = read_found(rd, &ans, flags, &ids, &nids);
	if (!err && !(missing = malloc((nids ? nids : 1) * sizeof(*missing))))
		err = -ENOMEM;
	if (!err)
		err = pick_cached(s, rd, ids, nids, missing, &nmissing);
	if (!err && nmissing)
		err = fetch_series(s, missing, nmissing);
	if (!err && nmissing)
		err = pick_cached(s, rd, missing, nmissing, NULL, NULL);
	if (err)
		goto out;
	rd->ids = malloc((rd->npicks ? rd->npicks : 1) * sizeof(*rd->ids));
	if (!rd->ids) {
		err = -ENOMEM;
		goto out;
	}
	for (i = 0; i < rd->npicks; i++)
		rd->ids[i] = rd->picks[i].id;
	qsort(rd->ids, rd->npicks, sizeof(*rd->ids), cmp_u64);
	keep_picked_hours(rd);
out:
	free(ids);
	free(missing);
	sbuf__free(&sql);
	sbuf__free(&ans);
	if (err)
		ch_read__end(rd);
	return err;
}

/* "WITH <range> SELECT <cols> PREWHERE series IN (...) AND <in range>
 * [AND <cond>] <tail>" for the matching series: PREWHERE, so that the key
 * skips what is out of range even behind an ARRAY JOIN. */
static int windows_sql(struct sbuf *b, const struct ch_read *rd, const char *cols, const char *cond,
		       const char *tail)
{
	int err = ch_sql_with_range(b, rd->from, rd->until);

	if (!err)
		err = sbuf__printf(b, "SELECT %s PREWHERE series IN ", cols);
	if (!err)
		err = sql_ids(b, rd->ids, rd->npicks);
	if (!err)
		err = sbuf__puts(b, " AND " CH_IN_RANGE);
	if (!err && cond)
		err = sbuf__printf(b, " AND %s", cond);
	return err ? err : sbuf__printf(b, " %s", tail);
}

/* ---- select ---- */

struct stack_sum {
	uint64_t id;
	int64_t value;
};

/* Frames of stacks not in the cache, from the stacks table, into it. */
static int fetch_stacks(struct ch_store *s, const uint64_t *ids, size_t n)
{
	struct sbuf ans = {0};
	struct rb_reader r;
	int err;

	err = query_ids(s, "SELECT id, any(funcs) FROM stacks", ids, n, &ans, "read the stacks");
	if (err)
		goto out;
	r = rb_reader_of(&ans);
	pthread_rwlock_wrlock(&s->cache_lock);
	cache_room(s, n);
	while (!err && rbr_more(&r)) {
		uint64_t id = rbr_u64(&r), nf = rbr_count(&r, PROF_MAX_FRAMES), i;
		struct ch_stack_ent *e;

		err = array_grow((void **)&s->frame_ids, &s->cap_frame_ids, s->nframe_ids + nf + 1,
				 sizeof(*s->frame_ids));
		for (i = 0; !err && i < nf; i++)
			s->frame_ids[s->nframe_ids + i] = rbr_u64(&r);
		if (!err && r.bad)
			err = damaged("read the stacks");
		if (err || idmap__get(&s->stack_map, id))
			continue;
		err = array_grow((void **)&s->stacks, &s->cap_stacks, s->nstacks + 1,
				 sizeof(*s->stacks));
		if (!err)
			err = idmap__put(&s->stack_map, id, (uint32_t)s->nstacks + 1);
		if (err)
			break;
		e = &s->stacks[s->nstacks++];
		*e = (struct ch_stack_ent){id, s->nframe_ids, (uint32_t)nf};
		s->nframe_ids += nf;
	}
	pthread_rwlock_unlock(&s->cache_lock);
out:
	sbuf__free(&ans);
	return err;
}

/* Functions not in the cache (or without a source, looked up long ago),
 * from the functions table, into it. */
static int fetch_funcs(struct ch_store *s, const uint64_t *ids, size_t n)
{
	struct sbuf ans = {0};
	int64_t now = mono_ms();
	struct rb_reader r;
	int err;

	err = query_ids(s,
			"SELECT id, any(name), any(module), any(kernel), argMax(file, ver),"
			" argMax(line, ver) FROM functions",
			ids, n, &ans, "read the functions");
	if (err)
		goto out;
	r = rb_reader_of(&ans);
	pthread_rwlock_wrlock(&s->cache_lock);
	cache_room(s, n);
	while (!err && rbr_more(&r)) {
		uint64_t id = rbr_u64(&r);
		size_t nl, ml, fl;
		const char *name = rbr_str(&r, &nl), *mod = rbr_str(&r, &ml);
		uint8_t kernel = rbr_u8(&r);
		const char *file = rbr_str(&r, &fl);
		uint32_t line = rbr_u32(&r), k;
		struct ch_func_ent *e;
		char *buf;

		if (r.bad) {
			err = damaged("read the functions");
			break;
		}
		buf = malloc(nl + ml + fl + 3);
		if (!buf) {
			err = -ENOMEM;
			break;
		}
		k = idmap__get(&s->func_map, id);
		if (!k) {
			err = array_grow((void **)&s->funcs, &s->cap_funcs, s->nfuncs + 1,
					 sizeof(*s->funcs));
			if (!err)
				err = idmap__put(&s->func_map, id, (uint32_t)s->nfuncs + 1);
			if (err) {
				free(buf);
				break;
			}
			k = (uint32_t)++s->nfuncs;
		} else {
			e = &s->funcs[k - 1];
			s->cache_bytes -= strlen(e->name) + strlen(e->module) + strlen(e->file) + 3;
			free(e->name);
		}
		s->cache_bytes += nl + ml + fl + 3;
		e = &s->funcs[k - 1];
		e->id = id;
		e->name = buf;
		memcpy(buf, name, nl);
		buf[nl] = '\0';
		e->module = buf + nl + 1;
		memcpy(e->module, mod, ml);
		e->module[ml] = '\0';
		e->file = e->module + ml + 1;
		memcpy(e->file, file, fl);
		e->file[fl] = '\0';
		e->kernel = kernel != 0;
		e->start_line = line;
		e->fetched_ms = now;
	}
	pthread_rwlock_unlock(&s->cache_lock);
out:
	sbuf__free(&ans);
	return err;
}

/* The stacks and functions of sums[0..n) that the cache lacks, fetched. */
static int resolve(struct ch_store *s, const struct stack_sum *sums, size_t n)
{
	uint64_t *want = NULL;
	size_t nwant = 0, cap = 0, i, k;
	int64_t now = mono_ms();
	int err = 0;

	pthread_rwlock_rdlock(&s->cache_lock);
	for (i = 0; !err && i < n; i++)
		if (!idmap__get(&s->stack_map, sums[i].id)) {
			err = array_grow((void **)&want, &cap, nwant + 1, sizeof(*want));
			if (!err)
				want[nwant++] = sums[i].id;
		}
	pthread_rwlock_unlock(&s->cache_lock);
	if (!err && nwant)
		err = fetch_stacks(s, want, nwant);
	nwant = 0;
	pthread_rwlock_rdlock(&s->cache_lock);
	for (i = 0; !err && i < n; i++) {
		uint32_t sk = idmap__get(&s->stack_map, sums[i].id);
		const struct ch_stack_ent *st = sk ? &s->stacks[sk - 1] : NULL;

		for (k = 0; !err && st && k < st->n; k++) {
			uint64_t fid = s->frame_ids[st->off + k];
			uint32_t fk = idmap__get(&s->func_map, fid);

			if (fk && (*s->funcs[fk - 1].file ||
				   now - s->funcs[fk - 1].fetched_ms < FUNC_RECHECK_MS))
				continue;
			err = array_grow((void **)&want, &cap, nwant + 1, sizeof(*want));
			if (!err)
				want[nwant++] = fid;
		}
	}
	pthread_rwlock_unlock(&s->cache_lock);
	if (!err && nwant) {
		qsort(want, nwant, sizeof(*want), cmp_u64);
		for (i = 0, k = 0; i < nwant; i++)
			if (!k || want[k - 1] != want[i])
				want[k++] = want[i];
		err = fetch_funcs(s, want, k);
	}
	free(want);
	return err;
}

/* A select's stacks as a tree (struct store_tree): a node per distinct
 * (parent, function), so that stacks sharing a prefix share its nodes as
 * in the SQLite store's trie, and the functions' strings copied out of the
 * cache (strs; offsets in stroff until the lock is let go), so that the
 * tree's reader works on it without the cache's lock held. */
struct ch_tree {
	struct store_tree t;
	struct store_node *nodes;
	struct store_func *funcs;
	size_t *stroff; /* per function: its name's, module's and file's in strs */
	size_t cap_nodes, cap_funcs, cap_stroff;
	struct idmap func_map; /* function cache index + 1 -> tree function + 1 */
	struct idmap node_map; /* (parent + 1) << 32 | tree function -> node + 1 */
	struct sbuf strs;
};

static void ch_tree__free(struct ch_tree *ct)
{
	free(ct->nodes);
	free(ct->funcs);
	free(ct->stroff);
	idmap__free(&ct->func_map);
	idmap__free(&ct->node_map);
	sbuf__free(&ct->strs);
	memset(ct, 0, sizeof(*ct));
}

/* The tree's function for cache entry fk (1-based), added on first use;
 * 0 or -ENOMEM. */
static int ch_tree__func(struct ch_tree *ct, const struct ch_store *s, uint32_t fk, uint32_t *fi)
{
	const struct ch_func_ent *f = &s->funcs[fk - 1];
	size_t n = ct->t.nfuncs;
	int err;

	*fi = idmap__get(&ct->func_map, fk);
	if (*fi) {
		(*fi)--;
		return 0;
	}
	if (array_grow((void **)&ct->funcs, &ct->cap_funcs, n + 1, sizeof(*ct->funcs)) ||
	    array_grow((void **)&ct->stroff, &ct->cap_stroff, 3 * (n + 1), sizeof(*ct->stroff)))
		return -ENOMEM;
	ct->funcs[n] = (struct store_func){.start_line = f->start_line, .kernel = f->kernel};
	ct->stroff[3 * n] = ct->strs.len;
	err = sbuf__add(&ct->strs, f->name, strlen(f->name) + 1);
	ct->stroff[3 * n + 1] = ct->strs.len;
	err |= sbuf__add(&ct->strs, f->module, strlen(f->module) + 1);
	ct->stroff[3 * n + 2] = ct->strs.len;
	err |= sbuf__add(&ct->strs, f->file, strlen(f->file) + 1);
	if (err || idmap__put(&ct->func_map, fk, (uint32_t)n + 1))
		return -ENOMEM;
	ct->t.nfuncs++;
	*fi = (uint32_t)n;
	return 0;
}

/* Makes the tree of the stacks. Under the cache's read lock; -EAGAIN when
 * the cache lost an entry (emptied meanwhile). */
static int ch_tree__make(struct ch_tree *ct, const struct ch_store *s, const struct stack_sum *sums,
			 size_t n)
{
	struct store_tree *t = &ct->t;
	size_t i, k;
	int err = 0;

	for (i = 0; !err && i < n; i++) {
		uint32_t sk = idmap__get(&s->stack_map, sums[i].id), node = STORE_NO_PARENT;
		const struct ch_stack_ent *st = sk ? &s->stacks[sk - 1] : NULL;

		if (!st) {
			err = -EAGAIN;
			break;
		}
		if (!st->n) { /* the stack of no frames */
			t->root_value = sat_add_i64(t->root_value, sums[i].value);
			continue;
		}
		/* Root first: the frames are leaf first. */
		for (k = st->n; !err && k-- > 0;) {
			uint32_t fk = idmap__get(&s->func_map, s->frame_ids[st->off + k]), fi, nk;
			uint64_t key;

			if (!fk) {
				err = -EAGAIN;
				break;
			}
			err = ch_tree__func(ct, s, fk, &fi);
			if (err)
				break;
			key = (uint64_t)(node + 1) << 32 | fi; /* STORE_NO_PARENT + 1 is 0 */
			nk = idmap__get(&ct->node_map, key);
			if (!nk) {
				err = array_grow((void **)&ct->nodes, &ct->cap_nodes, t->nnodes + 1,
						 sizeof(*ct->nodes));
				if (!err)
					err = idmap__put(&ct->node_map, key,
							 (uint32_t)t->nnodes + 1);
				if (err)
					break;
				ct->nodes[t->nnodes] = (struct store_node){node, fi, 0};
				nk = (uint32_t)++t->nnodes;
			}
			node = nk - 1;
		}
		if (!err)
			ct->nodes[node].value = sat_add_i64(ct->nodes[node].value, sums[i].value);
	}
	return err;
}

/* Points the tree at its arrays and strings, once they are made. */
static void ch_tree__finish(struct ch_tree *ct)
{
	for (size_t i = 0; i < ct->t.nfuncs; i++) {
		ct->funcs[i].name = ct->strs.buf + ct->stroff[3 * i];
		ct->funcs[i].module = ct->strs.buf + ct->stroff[3 * i + 1];
		ct->funcs[i].file = ct->strs.buf + ct->stroff[3 * i + 2];
	}
	ct->t.funcs = ct->funcs;
	ct->t.nodes = ct->nodes;
}

/* The unit and period of the earliest matching window: among the windows
 * at the edges and those of the first whole hour with any (rd->hours). */
static int read_unit(struct ch_store *s, const struct ch_read *rd, char *unit, size_t unitlen,
		     int64_t *period)
{
	struct sbuf sql = {0}, ans = {0};
	int64_t first = INT64_MAX;
	char cond[128];
	struct rb_reader r;
	size_t i;
	int err;

	for (i = 0; i < rd->nhours; i++)
		if (rd->hours[i].hour < first)
			first = rd->hours[i].hour;
	if (first != INT64_MAX)
		snprintf(cond, sizeof(cond),
			 "(" CH_AT_EDGES " OR " CH_HOUR_OF_START " = %" PRId64 ")", first);
	err = windows_sql(&sql, rd, "unit, period FROM windows", first != INT64_MAX ? cond : NULL,
			  "ORDER BY start_ms, end_ms, unit, period LIMIT 1 FORMAT RowBinary");
	if (!err)
		err = ch__query(s, sql.buf, &ans, "read the unit");
	if (!err && ans.len) {
		size_t len;
		const char *u;

		r = rb_reader_of(&ans);
		u = rbr_str(&r, &len);
		*period = (int64_t)rbr_u64(&r);
		if (r.bad)
			err = damaged("read the unit");
		else if (unit && unitlen)
			snprintf(unit, unitlen, "%.*s", (int)len, u);
	}
	sbuf__free(&sql);
	sbuf__free(&ans);
	return err;
}

/* Beyond this many (series, hour) pairs that the rollup gets wrong, a read
 * sums the windows instead. */
#define CH_MAX_BAD_HOURS 4096

/* Compares the rollup's count of windows with the windows' (rd->hours), by
 * series and whole hour: the pairs that differ (the rollup is written by a
 * materialized view after the windows, and a ClickHouse that dies between
 * the two leaves it short) go into *bad, to be read from the windows; so
 * do those whose windows' totals come near 2^63, whose rollup sums may
 * have wrapped (ch_sum). */
static int check_rollup(struct ch_store *s, const struct ch_read *rd, struct hour_count **bad,
			size_t *nbad)
{
	struct sbuf sql = {0}, ans = {0};
	struct hour_count *roll = NULL;
	size_t nroll = 0, cap = 0, i = 0, j = 0;
	struct rb_reader r;
	int err;

	*bad = NULL;
	*nbad = 0;
	err = ch_sql_with_range(&sql, rd->from, rd->until);
	if (!err)
		err = sbuf__puts(&sql,
				 "SELECT series, hour, sum(val) FROM hour_stacks WHERE series IN ");
	if (!err)
		err = sql_ids(&sql, rd->ids, rd->npicks);
	if (!err)
		err = sbuf__puts(&sql, " AND " CH_WHOLE_HOURS " AND stack = 0 GROUP BY series, hour"
				       " ORDER BY series, hour FORMAT RowBinary");
	if (!err)
		err = ch__query(s, sql.buf, &ans, "check the rollup");
	if (!err && ans.len % 20)
		err = damaged("check the rollup");
	if (!err) {
		nroll = ans.len / 20;
		roll = malloc((nroll ? nroll : 1) * sizeof(*roll));
		if (!roll)
			err = -ENOMEM;
	}
	r = rb_reader_of(&ans);
	for (j = 0; !err && j < nroll; j++) {
		roll[j].series = rbr_u64(&r);
		roll[j].hour = (int32_t)rbr_u32(&r);
		roll[j].n = rbr_u64(&r);
		roll[j].total = 0;
	}
	/* Both lists by (series, hour): a merge, keeping the pairs whose
	 * counts differ (a pair missing from one counts 0 there). */
	for (j = 0; !err && (i < rd->nhours || j < nroll) && *nbad <= CH_MAX_BAD_HOURS;) {
		const struct hour_count *w = i < rd->nhours ? &rd->hours[i] : NULL;
		const struct hour_count *h = j < nroll ? &roll[j] : NULL;
		int c = !w ? 1 : !h ? -1 : cmp_hour_count(w, h);
		struct hour_count pair = c <= 0 ? *w : *h;

		if (c == 0 && w->n == h->n && w->total < CH_ROLLUP_SAFE) {
			i++;
			j++;
			continue;
		}
		i += c <= 0;
		j += c >= 0;
		err = array_grow((void **)bad, &cap, *nbad + 1, sizeof(**bad));
		if (!err)
			(*bad)[(*nbad)++] = pair;
	}
	free(roll);
	sbuf__free(&sql);
	sbuf__free(&ans);
	if (err) {
		free(*bad);
		*bad = NULL;
		*nbad = 0;
	}
	return err;
}

/* Appends "(series, <hour>) [NOT ]IN ((s, h), ...)". */
static int sql_pairs(struct sbuf *b, const char *hour, bool not, const struct hour_count *p,
		     size_t n)
{
	size_t i;
	int err = sbuf__printf(b, "(series, %s) %sIN (", hour, not ? "NOT " : "");

	for (i = 0; !err && i < n; i++)
		err = sbuf__printf(b, "%s(%" PRIu64 ", %" PRId64 ")", i ? ", " : "", p[i].series,
				   p[i].hour);
	return err ? err : sbuf__puts(b, ")");
}

/* The sums by stack of the matching series over the range: from the rollup
 * for its whole hours (but for the pairs in bad) and from the windows for
 * the rest; from the windows alone when rollup is false. */
static int select_sql(struct sbuf *sql, const struct ch_read *rd, bool rollup,
		      const struct hour_count *bad, size_t nbad)
{
	struct sbuf cond = {0};
	int err = 0;

	if (!rollup)
		return windows_sql(sql, rd,
				   "stack, sum(v), sum(toFloat64(v)) FROM windows"
				   " ARRAY JOIN stacks AS stack, vals AS v",
				   NULL, "GROUP BY stack FORMAT RowBinary");
	err = sbuf__puts(sql, "SELECT stack, sum(v), sum(f) FROM (");
	if (!err)
		err = ch_sql_with_range(sql, rd->from, rd->until);
	if (!err)
		err = sbuf__puts(sql, "SELECT stack, sum(val) AS v, sum(toFloat64(val)) AS f"
				      " FROM hour_stacks WHERE series IN ");
	if (!err)
		err = sql_ids(sql, rd->ids, rd->npicks);
	if (!err)
		err = sbuf__puts(sql, " AND " CH_WHOLE_HOURS " AND stack != 0");
	if (!err && nbad) {
		err = sbuf__puts(sql, " AND ");
		if (!err)
			err = sql_pairs(sql, "hour", true, bad, nbad);
	}
	if (!err)
		err = sbuf__puts(sql, " GROUP BY stack UNION ALL ");
	if (!err)
		err = sbuf__puts(&cond, "(" CH_AT_EDGES);
	if (!err && nbad) {
		err = sbuf__puts(&cond, " OR ");
		if (!err)
			err = sql_pairs(&cond, CH_HOUR_OF_START, false, bad, nbad);
	}
	if (!err)
		err = sbuf__puts(&cond, ")");
	if (!err)
		err = windows_sql(sql, rd,
				  "stack, sum(x) AS v, sum(toFloat64(x)) AS f FROM windows"
				  " ARRAY JOIN stacks AS stack, vals AS x",
				  cond.buf, "GROUP BY stack");
	if (!err)
		err = sbuf__puts(sql, ") GROUP BY stack FORMAT RowBinary");
	sbuf__free(&cond);
	return err;
}

int ch_store__select_tree(struct store *base, const struct store_query *q, store_tree_fn fn,
			  void *ctx, char *unit, size_t unitlen)
{
	struct ch_store *s = ch_store(base);
	struct sbuf sql = {0}, ans = {0};
	struct stack_sum *sums = NULL;
	struct hour_count *bad = NULL;
	struct ch_tree ct = {0};
	size_t nsums = 0, nbad = 0, i;
	int64_t period = 0;
	struct ch_read rd;
	struct rb_reader r;
	bool rollup;
	int err, tries;

	if (unit && unitlen)
		*unit = '\0';
	err = ch_read__begin(&rd, s, q, NULL, CH_READ_HOURS);
	if (err || !rd.npicks)
		goto out;
	rollup = rd.nhours > 0;
	if (rollup)
		err = check_rollup(s, &rd, &bad, &nbad);
	if (!err && nbad) {
		pr_debug("clickhouse: the rollup lacks windows of %zu%s series' hours", nbad,
			 nbad > CH_MAX_BAD_HOURS ? "+" : "");
		rollup = nbad <= CH_MAX_BAD_HOURS;
	}
	if (!err)
		err = select_sql(&sql, &rd, rollup, bad, rollup ? nbad : 0);
	if (!err)
		err = ch__query(s, sql.buf, &ans, "read the profiles");
	if (err)
		goto out;
	if (ans.len % 24) {
		err = damaged("read the profiles");
		goto out;
	}
	nsums = ans.len / 24;
	sums = malloc((nsums ? nsums : 1) * sizeof(*sums));
	if (!sums) {
		err = -ENOMEM;
		goto out;
	}
	r = rb_reader_of(&ans);
	for (i = 0; i < nsums; i++) {
		uint64_t v;

		sums[i].id = rbr_u64(&r);
		v = rbr_u64(&r);
		sums[i].value = ch_sum(v, rbr_f64(&r));
	}
	err = read_unit(s, &rd, unit, unitlen, &period);
	/* A cache emptied between resolve and the tree: resolve again. */
	for (tries = 0; !err && tries < 3; tries++) {
		err = resolve(s, sums, nsums);
		if (err)
			break;
		ch_tree__free(&ct);
		pthread_rwlock_rdlock(&s->cache_lock);
		err = ch_tree__make(&ct, s, sums, nsums);
		pthread_rwlock_unlock(&s->cache_lock);
		if (err != -EAGAIN)
			break;
		pr_debug("clickhouse: a select's stacks left the cache; resolving again");
	}
	if (err == -EAGAIN) {
		pr_warn("clickhouse: a select's stacks or functions are not in the store");
		err = -EIO;
	}
out:
	/* The tree of no stacks too, when no series matched. */
	if (!err) {
		ch_tree__finish(&ct);
		ct.t.period = period > 0 ? period : 0;
		err = fn(ctx, &ct.t);
	}
	ch_tree__free(&ct);
	free(sums);
	free(bad);
	sbuf__free(&sql);
	sbuf__free(&ans);
	ch_read__end(&rd);
	return err;
}

/* ---- timeline ---- */

int ch_store__timeline(struct store *base, const struct store_query *q, int64_t step_ms,
		       double *values, size_t nsteps)
{
	struct ch_store *s = ch_store(base);
	struct sbuf sql = {0}, ans = {0};
	struct ch_read rd;
	struct rb_reader r;
	int err;

	if (step_ms <= 0 || (nsteps && !values) || nsteps > (size_t)(INT64_MAX / step_ms))
		return -EINVAL;
	memset(values, 0, nsteps * sizeof(*values));
	err = ch_read__begin(&rd, s, q, NULL, 0);
	if (err || !rd.npicks)
		goto out;
	err = windows_sql(&sql, &rd,
			  "start_ms, end_ms, sum(total), sum(toFloat64(total)) FROM windows", NULL,
			  "GROUP BY start_ms, end_ms ORDER BY start_ms, end_ms FORMAT RowBinary");
	if (!err)
		err = ch__query(s, sql.buf, &ans, "read the timeline");
	r = rb_reader_of(&ans);
	while (!err && rbr_more(&r)) {
		int64_t start = (int64_t)rbr_u64(&r), end = (int64_t)rbr_u64(&r);
		uint64_t wrapped = rbr_u64(&r);
		int64_t total = ch_sum(wrapped, rbr_f64(&r));

		/* Windows are put with 0 <= start < end: anything else is a
		 * damaged table. */
		if (r.bad || start < 0 || end <= start)
			err = damaged("read the timeline");
		else
			timeline_spread(values, nsteps, rd.from, step_ms, start, end, total);
	}
out:
	sbuf__free(&sql);
	sbuf__free(&ans);
	ch_read__end(&rd);
	return err;
}

/* ---- label reads ---- */

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int label_strings(struct ch_store *s, const struct store_query *q, const char *name,
			 store_string_fn fn, void *ctx)
{
	const char **strs = NULL;
	size_t nstrs = 0, cap = 0, i, k;
	struct ch_read rd;
	int err;

	if (!fn)
		return -EINVAL;
	err = ch_read__begin(&rd, s, q, NULL, 0);
	for (i = 0; !err && i < rd.npicks; i++) {
		const struct labelset *ls = &rd.picks[i].ls;

		for (k = 0; !err && k < ls->n; k++) {
			if (name && strcmp(ls->labels[k].name, name))
				continue;
			err = array_grow((void **)&strs, &cap, nstrs + 1, sizeof(*strs));
			if (!err)
				strs[nstrs++] = name ? ls->labels[k].value : ls->labels[k].name;
		}
	}
	if (!err && nstrs) {
		qsort(strs, nstrs, sizeof(*strs), cmp_str);
		for (i = 0; i < nstrs; i++)
			if (!i || strcmp(strs[i], strs[i - 1]))
				fn(ctx, strs[i]);
	}
	free(strs);
	ch_read__end(&rd);
	return err;
}

int ch_store__label_names(struct store *base, const struct store_query *q, store_string_fn fn,
			  void *ctx)
{
	return label_strings(ch_store(base), q, NULL, fn, ctx);
}

int ch_store__label_values(struct store *base, const struct store_query *q, const char *name,
			   store_string_fn fn, void *ctx)
{
	if (!name || !*name)
		return -EINVAL;
	return label_strings(ch_store(base), q, name, fn, ctx);
}

/* ---- series totals ---- */

static int cmp_pick(const void *a, const void *b)
{
	const struct picked *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

int ch_store__series_totals(struct store *base, const struct store_query *q, store_series_fn fn,
			    void *ctx)
{
	struct ch_store *s = ch_store(base);
	struct sbuf sql = {0}, ans = {0};
	struct ch_read rd;
	struct rb_reader r;
	int err;

	if (!fn)
		return -EINVAL;
	err = ch_read__begin(&rd, s, q, NULL, 0);
	if (err || !rd.npicks)
		goto out;
	/* Picks by id, for the lookups below. */
	qsort(rd.picks, rd.npicks, sizeof(*rd.picks), cmp_pick);
	err = windows_sql(&sql, &rd,
			  "series, sum(total), sum(toFloat64(total)), min(start_ms), max(end_ms)"
			  " FROM windows",
			  NULL, "GROUP BY series FORMAT RowBinary");
	if (!err)
		err = ch__query(s, sql.buf, &ans, "read the series' totals");
	r = rb_reader_of(&ans);
	while (!err && rbr_more(&r)) {
		uint64_t id = rbr_u64(&r), wrapped = rbr_u64(&r);
		int64_t total = ch_sum(wrapped, rbr_f64(&r)), first = (int64_t)rbr_u64(&r),
			last = (int64_t)rbr_u64(&r);
		struct picked key = {.id = id};
		const struct picked *p;

		if (r.bad) {
			err = damaged("read the series' totals");
			break;
		}
		p = bsearch(&key, rd.picks, rd.npicks, sizeof(*rd.picks), cmp_pick);
		if (p)
			fn(ctx, p->ls.labels, p->ls.n, total, first, last);
	}
out:
	sbuf__free(&sql);
	sbuf__free(&ans);
	ch_read__end(&rd);
	return err;
}

/* ---- points ---- */

static int cmp_pick_labels(const void *a, const void *b)
{
	const struct picked *x = a, *y = b;
	size_t n = x->ls.len < y->ls.len ? x->ls.len : y->ls.len;
	int c = memcmp(x->ls.key, y->ls.key, n);

	if (c)
		return c;
	return x->ls.len < y->ls.len ? -1 : x->ls.len > y->ls.len;
}

int ch_store__points(struct store *base, const char *name, const struct store_query *q,
		     store_points_fn fn, void *ctx)
{
	struct ch_store *s = ch_store(base);
	struct sbuf sql = {0}, ans = {0};
	uint64_t *series = NULL;
	int64_t *ts = NULL;
	double *vals = NULL;
	struct idmap first = {0}; /* series id -> its first row + 1 */
	size_t n = 0, i, j;
	struct ch_read rd;
	struct rb_reader r;
	int err;

	if (!fn || !metric_name_valid(name))
		return -EINVAL;
	err = ch_read__begin(&rd, s, q, name, 0);
	if (err || !rd.npicks)
		goto out;
	err = sbuf__puts(&sql,
			 "SELECT series, ts_ms, argMax(value, ver) FROM points WHERE name = ");
	if (!err)
		err = ch_sql_str(&sql, name);
	if (!err)
		err = sbuf__puts(&sql, " AND series IN ");
	if (!err)
		err = sql_ids(&sql, rd.ids, rd.npicks);
	if (!err)
		err = sbuf__puts(&sql, " AND ");
	if (!err)
		err = ch_sql_point_range(&sql, rd.from, rd.until);
	if (!err)
		err = sbuf__puts(&sql, " GROUP BY series, ts_ms ORDER BY series, ts_ms"
				       " FORMAT RowBinary");
	if (!err)
		err = ch__query(s, sql.buf, &ans, "read the points");
	if (err)
		goto out;
	if (ans.len % 24) {
		err = damaged("read the points");
		goto out;
	}
	n = ans.len / 24;
	series = malloc((n ? n : 1) * sizeof(*series));
	ts = malloc((n ? n : 1) * sizeof(*ts));
	vals = malloc((n ? n : 1) * sizeof(*vals));
	if (!series || !ts || !vals) {
		err = -ENOMEM;
		goto out;
	}
	r = rb_reader_of(&ans);
	for (i = 0; !err && i < n; i++) {
		series[i] = rbr_u64(&r);
		ts[i] = (int64_t)rbr_u64(&r);
		vals[i] = rbr_f64(&r);
		/* Asked for in (series, ts_ms) order, each pair once: a row
		 * before the one read before it is a damaged answer, which
		 * would give points out of time order or cut a series. */
		if (i && (series[i] < series[i - 1] ||
			  (series[i] == series[i - 1] && ts[i] <= ts[i - 1])))
			err = damaged("read the points");
		else if (!i || series[i] != series[i - 1])
			err = idmap__put(&first, series[i], (uint32_t)i + 1);
	}
	if (err)
		goto out;
	/* Series in the byte order of their labels, each with its points. */
	qsort(rd.picks, rd.npicks, sizeof(*rd.picks), cmp_pick_labels);
	for (i = 0; i < rd.npicks; i++) {
		uint32_t k = idmap__get(&first, rd.picks[i].id);

		if (!k)
			continue;
		for (j = k - 1; j < n && series[j] == rd.picks[i].id; j++)
			;
		fn(ctx, name, rd.picks[i].ls.labels, rd.picks[i].ls.n, ts + k - 1, vals + k - 1,
		   j - (k - 1));
	}
out:
	idmap__free(&first);
	free(series);
	free(ts);
	free(vals);
	sbuf__free(&sql);
	sbuf__free(&ans);
	ch_read__end(&rd);
	return err;
}

/* ---- spans ---- */

static const struct picked *picked_by_id(const struct ch_read *rd, uint64_t id)
{
	for (size_t i = 0; i < rd->npicks; i++)
		if (rd->picks[i].id == id)
			return &rd->picks[i];
	return NULL;
}

int ch_store__spans(struct store *base, const struct store_query *q, size_t limit, store_span_fn fn,
		    void *ctx, bool *truncated)
{
	struct ch_store *s = ch_store(base);
	struct sbuf sql = {0}, ans = {0};
	struct ch_read rd;
	struct rb_reader r;
	size_t n = 0;
	int err;

	if (truncated)
		*truncated = false;
	if (!fn)
		return -EINVAL;
	err = ch_read__begin(&rd, s, q, STORE_SPAN_METRIC, 0);
	if (err || !rd.npicks)
		goto out;
	err = ch_sql_span_range(&sql, rd.from, rd.until,
				"SELECT series, start_ns, end_ns, device, stream, correlation, tid,"
				" bytes, kind, name, launched_from");
	if (!err)
		err = sbuf__puts(&sql, " AND series IN ");
	if (!err)
		err = sql_ids(&sql, rd.ids, rd.npicks);
	/* One more than asked for: whether there were more. */
	if (!err)
		err = sbuf__printf(&sql,
				   " ORDER BY start_ns, device, stream, correlation LIMIT %zu"
				   " FORMAT RowBinary",
				   limit + 1);
	if (!err)
		err = ch__query(s, sql.buf, &ans, "read the spans");
	if (err)
		goto out;
	r = rb_reader_of(&ans);
	while (!err && rbr_more(&r)) {
		uint64_t series = rbr_u64(&r);
		struct store_span sp = {0};
		const struct picked *p;
		char *kind = NULL, *name = NULL, *from = NULL;
		const char *t;
		size_t len;

		sp.start_ns = (int64_t)rbr_u64(&r);
		sp.end_ns = (int64_t)rbr_u64(&r);
		sp.device = (int32_t)rbr_u32(&r);
		sp.stream = rbr_u32(&r);
		sp.correlation = rbr_u32(&r);
		sp.tid = rbr_u32(&r);
		sp.bytes = rbr_u64(&r);
		t = rbr_str(&r, &len);
		kind = r.bad ? NULL : strndup(t, len);
		t = rbr_str(&r, &len);
		name = r.bad ? NULL : strndup(t, len);
		t = rbr_str(&r, &len);
		from = r.bad ? NULL : strndup(t, len);
		if (r.bad)
			err = damaged("read the spans");
		else if (!kind || !name || !from)
			err = -ENOMEM;
		p = err ? NULL : picked_by_id(&rd, series);
		if (p && n == limit) {
			if (truncated)
				*truncated = true;
		} else if (p) {
			sp.kind = kind;
			sp.name = name;
			sp.from = from;
			fn(ctx, p->ls.labels, p->ls.n, &sp);
			n++;
		}
		free(kind);
		free(name);
		free(from);
	}
out:
	sbuf__free(&sql);
	sbuf__free(&ans);
	ch_read__end(&rd);
	return err;
}
