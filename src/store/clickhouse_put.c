/* clickhouse_put.c: the writes of the ClickHouse store -- put_windows and
 * put_points of store.h. A put checks what it is given, turns each window
 * into one row (its series id, and its samples as (stack id, value) sorted
 * by stack and summed per stack) and, for the series, stacks and functions
 * not yet known to be stored for that day, their rows too, all RowBinary;
 * then hands them to the group commit: the put that finds no write under
 * way writes everything queued (functions, series, stacks, then windows and
 * points: a window is never visible before what it names), and every put of
 * that batch returns its result. Ids are content hashes (clickhouse.c). */
#include "store/clickhouse_internal.h"
#include "common/clock.h"
#include "common/xalloc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "profile/profile.h"

/* Seeds that keep the kinds of ids apart. */
#define SEED_SERIES 0x5345524945530001ULL
#define SEED_STACK 0x535441434b530001ULL
#define SEED_FUNC 0x46554e4353000001ULL
/* A function's key in the known set when it was stored with a source. */
#define FUNC_SRC_SALT 0x5352430000000001ULL

enum { KNOWN_FUNCS, KNOWN_SERIES, KNOWN_STACKS };

/* The day a row of time ms is stored in, as ClickHouse's intDiv() puts it
 * in its partition. */
static int64_t day_of(int64_t ms)
{
	return ms / CH_DAY_MS;
}

uint64_t ch_series_id(const struct labelset *ls, const char *metric)
{
	uint64_t seed = metric ? hash_bytes(metric, strlen(metric), SEED_SERIES) : SEED_SERIES;

	return hash_bytes(ls->key, ls->len, seed);
}

void ch_batch__free(struct ch_batch *b)
{
	size_t i;

	if (!b)
		return;
	for (i = 0; i < CH_NTABLES; i++)
		sbuf__free(&b->rows[i]);
	for (i = 0; i < 3; i++)
		free(b->known[i]);
	free(b->src_funcs);
	free(b);
}

static int u64_push(uint64_t **a, size_t *n, size_t *cap, uint64_t v)
{
	int err = array_grow((void **)a, cap, *n + 1, sizeof(**a));

	if (!err)
		(*a)[(*n)++] = v;
	return err;
}

static int u64_append(uint64_t **a, size_t *n, size_t *cap, const uint64_t *v, size_t nv)
{
	int err = nv ? array_grow((void **)a, cap, *n + nv, sizeof(**a)) : 0;

	if (!err && nv) {
		memcpy(*a + *n, v, nv * sizeof(**a));
		*n += nv;
	}
	return err;
}

static int batch_known(struct ch_batch *b, int which, uint64_t key)
{
	return u64_push(&b->known[which], &b->nknown[which], &b->cap_known[which], key);
}

/* Whether the row keyed key is to be written: not known to be stored, and
 * not already written by this put (seen). Under known_lock. */
static bool needs_row(struct ch_store *s, struct ch_set *seen, int which, uint64_t key, int *err)
{
	if (ch_set__has(&s->known[which], key) || ch_set__has(seen, key))
		return false;
	*err = ch_set__add(seen, key);
	return !*err;
}

/* A series row (for day) unless one is known; under known_lock. */
static int add_series(struct ch_store *s, struct ch_batch *b, struct ch_set *seen, uint64_t id,
		      int64_t day, const char *metric, const struct labelset *ls)
{
	uint64_t key = ch_day_key(id, day);
	struct sbuf *r = &b->rows[CH_SERIES];
	size_t i;
	int err = 0;

	if (!needs_row(s, seen, KNOWN_SERIES, key, &err))
		return err;
	err = rb_u32(r, (uint32_t)(int32_t)day);
	if (!err)
		err = rb_u64(r, id);
	if (!err)
		err = rb_str(r, metric ? metric : "", metric ? strlen(metric) : 0);
	if (!err)
		err = rb_varint(r, ls->n);
	for (i = 0; !err && i < ls->n; i++)
		err = rb_str(r, ls->labels[i].name, strlen(ls->labels[i].name));
	if (!err)
		err = rb_varint(r, ls->n);
	for (i = 0; !err && i < ls->n; i++)
		err = rb_str(r, ls->labels[i].value, strlen(ls->labels[i].value));
	return err ? err : batch_known(b, KNOWN_SERIES, key);
}

/* ---- put_windows ---- */

/* A location used by a sample; one whose function's row is to be
 * written unless known stored. */
enum { LOC_USED = 1, LOC_CHECK = 2 };

/* A window being turned into a row. */
struct win_scratch {
	uint64_t *locfid;  /* by location: its function id, 0 until needed */
	uint64_t *lockey;  /* and the key of its row (func_key) */
	uint8_t *locstate; /* by location: 0, LOC_USED or LOC_CHECK */
	size_t cap_locfid, cap_lockey, cap_locstate;
	uint64_t fids[PROF_MAX_FRAMES];
	struct pair {
		uint64_t stack;
		int64_t value;
	} * pairs;
	size_t npairs, cap_pairs;
};

static uint64_t func_id(const struct profile *prof, const struct prof_location *loc)
{
	uint64_t mod = loc->module ? profile__str_info(prof, loc->module).hash : 0;

	return hash_mix(profile__str_info(prof, loc->func).hash ^
			hash_mix(mod * 2 + loc->kernel + SEED_FUNC));
}

/* The key of a function's row in the known sets: with a source, one of
 * its own (a row without a source doesn't stand for one with it). */
static uint64_t func_key(const struct profile *prof, const struct prof_location *loc, uint64_t id,
			 int64_t day)
{
	return loc->file && *profile__str(prof, loc->file) ? ch_day_key(id ^ FUNC_SRC_SALT, day)
							   : ch_day_key(id, day);
}

/* A function row for day unless one is known (with a source, when loc has
 * one: srckey is func_key's); under known_lock. */
static int add_func(struct ch_store *s, struct ch_batch *b, struct ch_set *seen,
		    const struct profile *prof, const struct prof_location *loc, uint64_t id,
		    uint64_t srckey, int64_t day, uint64_t ver_time)
{
	uint64_t key = ch_day_key(id, day);
	struct sbuf *r = &b->rows[CH_FUNCS];
	const char *name, *module, *file;
	bool has_src = srckey != key;
	int err = 0;

	if (!needs_row(s, seen, KNOWN_FUNCS, srckey, &err))
		return err;
	name = profile__str(prof, loc->func);
	module = loc->module ? profile__str(prof, loc->module) : "";
	file = loc->file ? profile__str(prof, loc->file) : "";
	err = rb_u32(r, (uint32_t)(int32_t)day);
	if (!err)
		err = rb_u64(r, id);
	if (!err)
		err = rb_str(r, name, strlen(name));
	if (!err)
		err = rb_str(r, module, strlen(module));
	if (!err)
		err = rb_u8(r, loc->kernel);
	if (!err)
		err = rb_str(r, file, strlen(file));
	if (!err)
		err = rb_u32(r, has_src ? loc->start_line : 0);
	/* A row with a source beats one without; of two, the older wins. */
	if (!err)
		err = rb_u64(r, (has_src ? 1ULL << 63 : 0) | ver_time);
	if (!err)
		err = batch_known(b, KNOWN_FUNCS, key);
	if (!err && has_src)
		err = batch_known(b, KNOWN_FUNCS, srckey);
	if (!err && has_src)
		err = u64_push(&b->src_funcs, &b->nsrc_funcs, &b->cap_src_funcs, id);
	if (!err)
		err = ch_set__add(seen, key);
	return err;
}

static int cmp_pair(const void *a, const void *b)
{
	const struct pair *x = a, *y = b;

	return x->stack < y->stack ? -1 : x->stack > y->stack;
}

/* By stack: most windows hold a few stacks, which an insertion sort puts
 * in order quicker than qsort's indirect calls. */
static void sort_pairs(struct pair *p, size_t n)
{
	size_t i, k;

	if (n > 32) {
		qsort(p, n, sizeof(*p), cmp_pair);
		return;
	}
	for (i = 1; i < n; i++) {
		struct pair x = p[i];

		for (k = i; k && p[k - 1].stack > x.stack; k--)
			p[k] = p[k - 1];
		p[k] = x;
	}
}

/* The stack row of sample smp (id stack) for day; its function ids are in
 * ws->locfid. Under known_lock. */
static int add_stack(struct ch_batch *b, struct win_scratch *ws, const struct prof_sample *smp,
		     uint64_t stack, uint64_t key, int64_t day)
{
	struct sbuf *r = &b->rows[CH_STACKS];
	size_t j;
	int err;

	err = sbuf__reserve(r, 4 + 8 + 10 + smp->nlocs * 8);
	if (!err)
		err = rb_u32(r, (uint32_t)(int32_t)day);
	if (!err)
		err = rb_u64(r, stack);
	if (!err)
		err = rb_varint(r, smp->nlocs);
	for (j = 0; !err && j < smp->nlocs; j++)
		err = rb_u64(r, ws->locfid[smp->locs[j]]);
	return err ? err : batch_known(b, KNOWN_STACKS, key);
}

/* The samples of prof as sorted (stack, value) pairs in ws->pairs, summed
 * per stack, their stack and function rows added to b; *total their sum.
 * Under known_lock. In passes, so that the known sets' lookups of a pass,
 * prefetched first, wait for memory together rather than one after
 * another. */
static int take_samples(struct ch_store *s, struct ch_batch *b, struct ch_set *seen,
			struct win_scratch *ws, const struct profile *prof, int64_t day,
			uint64_t ver_time, int64_t *total)
{
	size_t i, j, m;
	int err;

	err = array_grow((void **)&ws->locfid, &ws->cap_locfid, prof->nlocs + 1,
			 sizeof(*ws->locfid));
	if (!err)
		err = array_grow((void **)&ws->lockey, &ws->cap_lockey, prof->nlocs + 1,
				 sizeof(*ws->lockey));
	if (!err)
		err = array_grow((void **)&ws->locstate, &ws->cap_locstate, prof->nlocs + 1,
				 sizeof(*ws->locstate));
	if (!err)
		err = array_grow((void **)&ws->pairs, &ws->cap_pairs, prof->nsamples + 1,
				 sizeof(*ws->pairs));
	if (err)
		return err;
	memset(ws->locstate, 0, prof->nlocs);
	ws->npairs = 0;
	/* The samples checked, their locations' function ids made at first
	 * sight and their stacks' ids from those. Rows are added only once the
	 * whole profile is known good. */
	for (i = 0; i < prof->nsamples; i++) {
		const struct prof_sample *smp = &prof->samples[i];
		uint64_t stack;

		if (smp->count < 0 || smp->nlocs > PROF_MAX_FRAMES || (smp->nlocs && !smp->locs))
			return -EINVAL;
		if (!smp->count) {
			for (j = 0; j < smp->nlocs; j++)
				if (smp->locs[j] >= prof->nlocs)
					return -EINVAL;
			continue;
		}
		for (j = 0; j < smp->nlocs; j++) {
			uint32_t li = smp->locs[j];

			if (li >= prof->nlocs)
				return -EINVAL;
			if (!ws->locstate[li]) {
				ws->locfid[li] = func_id(prof, &prof->locs[li]);
				ws->locstate[li] = LOC_USED;
			}
			ws->fids[j] = ws->locfid[li];
		}
		stack = hash_bytes(ws->fids, smp->nlocs * sizeof(*ws->fids), SEED_STACK);
		if (!stack)
			stack = 1; /* 0 is the rollup's count of windows */
		ch_set__prefetch(&s->known[KNOWN_STACKS], ch_day_key(stack, day));
		ws->pairs[ws->npairs++] = (struct pair){stack, smp->count};
	}
	/* The rows of the stacks not known to be stored; their functions are
	 * to be checked. A stack known stored for the day was written with its
	 * functions, or after them: its functions need no check, but for
	 * those with a source, whose row may be the first with one. Most of a
	 * put's stacks are known, and most of its time went to checking every
	 * function of every window. */
	for (i = 0, m = 0; i < prof->nsamples; i++) {
		const struct prof_sample *smp = &prof->samples[i];
		uint64_t key;

		if (!smp->count)
			continue;
		key = ch_day_key(ws->pairs[m].stack, day);
		if (needs_row(s, seen, KNOWN_STACKS, key, &err)) {
			err = add_stack(b, ws, smp, ws->pairs[m].stack, key, day);
			for (j = 0; j < smp->nlocs; j++)
				ws->locstate[smp->locs[j]] = LOC_CHECK;
		}
		if (err)
			return err;
		m++;
	}
	/* The rows of the functions to check that aren't known stored, their
	 * lookups prefetched together. */
	for (i = 0; i < prof->nlocs; i++) {
		const struct prof_location *loc = &prof->locs[i];

		if (ws->locstate[i] == LOC_USED && loc->file && *profile__str(prof, loc->file))
			ws->locstate[i] = LOC_CHECK; /* with a source */
		if (ws->locstate[i] != LOC_CHECK)
			continue;
		ws->lockey[i] = func_key(prof, loc, ws->locfid[i], day);
		ch_set__prefetch(&s->known[KNOWN_FUNCS], ws->lockey[i]);
	}
	for (i = 0; i < prof->nlocs; i++)
		if (ws->locstate[i] == LOC_CHECK) {
			err = add_func(s, b, seen, prof, &prof->locs[i], ws->locfid[i],
				       ws->lockey[i], day, ver_time);
			if (err)
				return err;
		}
	sort_pairs(ws->pairs, ws->npairs);
	*total = 0;
	for (i = 0, m = 0; i < ws->npairs; i++) {
		if (__builtin_add_overflow(*total, ws->pairs[i].value, total))
			return -EOVERFLOW;
		if (m && ws->pairs[m - 1].stack == ws->pairs[i].stack) {
			if (__builtin_add_overflow(ws->pairs[m - 1].value, ws->pairs[i].value,
						   &ws->pairs[m - 1].value))
				return -EOVERFLOW;
		} else {
			ws->pairs[m++] = ws->pairs[i];
		}
	}
	ws->npairs = m;
	return 0;
}

/* Appends an Array(UInt64) of the pairs' stacks (or values) in one
 * reservation: a window's arrays are most of a put's bytes. */
static int rb_pairs(struct sbuf *r, const struct pair *p, size_t n, bool values)
{
	size_t i;
	char *o;
	int err;

	err = sbuf__reserve(r, 10 + n * 8);
	if (!err)
		err = rb_varint(r, n);
	if (err)
		return err;
	o = r->buf + r->len;
	for (i = 0; i < n; i++, o += 8)
		memcpy(o, values ? (const void *)&p[i].value : (const void *)&p[i].stack, 8);
	r->len += n * 8;
	r->buf[r->len] = '\0'; /* as every sbuf append leaves it */
	return 0;
}

static int window_row(struct sbuf *r, uint64_t series, const struct store_window *w, int64_t total,
		      const char *key, const struct win_scratch *ws)
{
	const char *unit = w->prof->unit ? w->prof->unit : "";
	int err;

	err = rb_u64(r, series);
	if (!err)
		err = rb_u64(r, (uint64_t)w->start_ms);
	if (!err)
		err = rb_u64(r, (uint64_t)w->end_ms);
	if (!err)
		err = rb_str(r, unit, strlen(unit));
	if (!err)
		err = rb_u64(r, (uint64_t)w->prof->period);
	if (!err)
		err = rb_u64(r, (uint64_t)total);
	if (!err)
		err = rb_str(r, key ? key : "", key ? strlen(key) : 0);
	if (!err)
		err = rb_pairs(r, ws->pairs, ws->npairs, false);
	if (!err)
		err = rb_pairs(r, ws->pairs, ws->npairs, true);
	return err;
}

/* Whether a keyed put was stored before: its key is on the row of its first
 * stored window, found by that row's primary key. 1, 0, or an error. */
static int key_stored(struct ch_store *s, const char *key, uint64_t series, int64_t start_ms)
{
	struct sbuf sql = {0}, ans = {0};
	struct rb_reader r;
	uint64_t n = 0;
	int err;

	err = sbuf__printf(&sql,
			   "SELECT count() FROM windows WHERE intDiv(start_ms, %lld) = %" PRId64
			   " AND series = %" PRIu64 " AND start_ms = %" PRId64
			   " AND end_ms > " CH_EXPIRED_SQL " AND put_key = ",
			   CH_HOUR_MS, (int64_t)(start_ms / CH_HOUR_MS), series, start_ms);
	if (!err)
		err = ch_sql_str(&sql, key);
	if (!err)
		err = sbuf__puts(&sql, " FORMAT RowBinary");
	if (!err)
		err = ch__query(s, sql.buf, &ans, "look up the put's key");
	if (!err) {
		r = rb_reader_of(&ans);
		n = rbr_u64(&r);
		if (r.bad)
			err = -EIO;
	}
	sbuf__free(&sql);
	sbuf__free(&ans);
	return err ? err : n > 0;
}

/* Records the longest window of a put before the put is written, if it is
 * longer than any stored: reads bound a range's windows' starts by it. */
static int note_window_length(struct ch_store *s, const struct store_window *w, size_t n)
{
	int64_t longest = 0, known = atomic_load(&s->max_window_ms);
	char sql[128];
	size_t i;
	int err;

	for (i = 0; i < n; i++)
		if (w[i].end_ms - w[i].start_ms > longest)
			longest = w[i].end_ms - w[i].start_ms;
	if (longest <= known)
		return 0;
	snprintf(sql, sizeof(sql), "INSERT INTO meta VALUES ('max_window_ms', %" PRId64 ")",
		 longest);
	err = ch__query(s, sql, NULL, "record the longest window");
	while (!err && known < longest &&
	       !atomic_compare_exchange_weak(&s->max_window_ms, &known, longest))
		;
	return err;
}

/* ---- the group commit ---- */

static const char *const insert_what[CH_NTABLES] = {
	[CH_FUNCS] = "insert the functions", [CH_SERIES] = "insert the series",
	[CH_STACKS] = "insert the stacks",   [CH_WINDOWS] = "insert the windows",
	[CH_POINTS] = "insert the points",   [CH_SPANS] = "insert the spans",
};

/* Writes a batch, table by table in the order of the enum; once it is all
 * written, what it stored becomes known. */
static int flush(struct ch_store *s, struct ch_batch *b)
{
	size_t t, i;
	int err = 0;

	for (t = 0; !err && t < CH_NTABLES; t++)
		if (b->rows[t].len)
			err = ch__post(s, s->insert_url[t], b->rows[t].buf, b->rows[t].len, NULL,
				       insert_what[t]);
	if (err)
		return err;
	pthread_mutex_lock(&s->known_lock);
	for (t = 0; !err && t < 3; t++)
		for (i = 0; !err && i < b->nknown[t]; i++)
			err = ch_set__add(&s->known[t], b->known[t][i]);
	pthread_mutex_unlock(&s->known_lock);
	ch_store__sources_known(s, b->src_funcs, b->nsrc_funcs);
	return 0; /* a key not remembered costs a row written again, no more */
}

/* Appends a put's rows (mine) to the open batch and waits for it to be
 * written: by this thread if no other is writing, else by the one that
 * takes it next. Returns the batch's result. */
static int commit(struct ch_store *s, struct ch_batch *mine)
{
	struct ch_batch *b;
	size_t t;
	int err = 0;

	pthread_mutex_lock(&s->batch_lock);
	if (!s->open && !(s->open = calloc(1, sizeof(*s->open)))) {
		pthread_mutex_unlock(&s->batch_lock);
		return -ENOMEM;
	}
	b = s->open;
	/* What becomes known first, then the rows, a window's or a point's
	 * last: once those are in, nothing can fail, and a put that fails
	 * before leaves in the batch only rows that are harmless twice
	 * (functions, series, stacks). */
	for (t = 0; !err && t < 3; t++)
		err = u64_append(&b->known[t], &b->nknown[t], &b->cap_known[t], mine->known[t],
				 mine->nknown[t]);
	if (!err)
		err = u64_append(&b->src_funcs, &b->nsrc_funcs, &b->cap_src_funcs, mine->src_funcs,
				 mine->nsrc_funcs);
	for (t = 0; !err && t < CH_NTABLES; t++)
		if (mine->rows[t].len)
			err = sbuf__add(&b->rows[t], mine->rows[t].buf, mine->rows[t].len);
	if (err) {
		pthread_mutex_unlock(&s->batch_lock);
		return err;
	}
	b->refs++;
	while (!b->done) {
		if (!s->flushing) {
			struct ch_batch *f = s->open;

			s->open = NULL;
			s->flushing = true;
			pthread_mutex_unlock(&s->batch_lock);
			err = flush(s, f);
			pthread_mutex_lock(&s->batch_lock);
			f->err = err;
			f->done = true;
			s->flushing = false;
			pthread_cond_broadcast(&s->batch_cond);
		} else {
			pthread_cond_wait(&s->batch_cond, &s->batch_lock);
		}
	}
	err = b->err;
	if (--b->refs == 0)
		ch_batch__free(b);
	pthread_mutex_unlock(&s->batch_lock);
	return err;
}

int ch_store__put_windows(struct store *base, const struct store_window *w, size_t n)
{
	struct ch_store *s = ch_store(base);
	struct ch_batch mine = {0};
	struct win_scratch ws = {0};
	struct ch_set seen = {0};
	struct labelset ls = {0};
	const char *key = n && w ? w[0].key : NULL;
	uint64_t key_series = 0, ver_time = (uint64_t)(INT64_MAX - (int64_t)wall_ns());
	int64_t key_start = 0;
	bool keyed = false;
	size_t i;
	int err = 0;

	if (n && !w)
		return -EINVAL;
	if (key && strlen(key) > STORE_MAX_PUT_KEY)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		err = store_check_window(&w[i], i);
		if (err)
			return err;
	}
	pthread_mutex_lock(&s->known_lock);
	for (i = 0; !err && i < n; i++) {
		int64_t day = day_of(w[i].end_ms), total = 0;
		uint64_t series;

		err = labelset__encode_checked(&ls, w[i].labels, w[i].nlabels);
		if (err)
			break;
		series = ch_series_id(&ls, NULL);
		err = take_samples(s, &mine, &seen, &ws, w[i].prof, day, ver_time, &total);
		if (!err && ws.npairs) /* a window left with no sample stores nothing */
			err = add_series(s, &mine, &seen, series, day, NULL, &ls);
		if (!err && ws.npairs) {
			err = window_row(&mine.rows[CH_WINDOWS], series, &w[i], total,
					 key && !keyed ? key : NULL, &ws);
			if (key && !keyed) {
				keyed = true;
				key_series = series;
				key_start = w[i].start_ms;
			}
		}
		labelset__free(&ls);
	}
	pthread_mutex_unlock(&s->known_lock);
	ch_set__free(&seen);
	free(ws.locfid);
	free(ws.lockey);
	free(ws.locstate);
	free(ws.pairs);
	/* A keyed put stored before (a retry whose answer was lost): nothing
	 * to write. */
	if (!err && keyed)
		err = key_stored(s, key, key_series, key_start);
	if (!err && mine.rows[CH_WINDOWS].len)
		err = note_window_length(s, w, n);
	if (!err && mine.rows[CH_WINDOWS].len)
		err = commit(s, &mine);
	for (i = 0; i < CH_NTABLES; i++)
		sbuf__free(&mine.rows[i]);
	for (i = 0; i < 3; i++)
		free(mine.known[i]);
	free(mine.src_funcs);
	if (err < 0)
		pr_debug("store: put of %zu windows failed: %s", n, strerror(-err));
	return err;
}

/* ---- put_points ---- */

int ch_store__put_points(struct store *base, const struct store_point *p, size_t n)
{
	struct ch_store *s = ch_store(base);
	struct ch_batch mine = {0};
	struct ch_set seen = {0};
	struct labelset ls = {0};
	struct sbuf *r = &mine.rows[CH_POINTS];
	uint64_t ver;
	size_t i;
	int err = 0;

	err = store_check_points(p, n);
	if (err || !n)
		return err;
	/* Versions: the later put of a point wins, and within a put the later
	 * point. */
	ver = wall_ns();
	for (;;) {
		uint64_t last = atomic_load(&s->point_ver), next = ver > last ? ver : last + 1;

		if (atomic_compare_exchange_weak(&s->point_ver, &last, next + n)) {
			ver = next;
			break;
		}
	}
	pthread_mutex_lock(&s->known_lock);
	for (i = 0; !err && i < n; i++) {
		uint64_t series;

		err = labelset__encode_checked(&ls, p[i].labels, p[i].nlabels);
		if (err)
			break;
		series = ch_series_id(&ls, p[i].name);
		err = add_series(s, &mine, &seen, series, day_of(p[i].ts_ms), p[i].name, &ls);
		if (!err)
			err = rb_str(r, p[i].name, strlen(p[i].name));
		if (!err)
			err = rb_u64(r, series);
		if (!err)
			err = rb_u64(r, (uint64_t)p[i].ts_ms);
		if (!err)
			err = rb_f64(r, p[i].value);
		if (!err)
			err = rb_u64(r, ver + i);
		labelset__free(&ls);
	}
	pthread_mutex_unlock(&s->known_lock);
	ch_set__free(&seen);
	if (!err)
		err = commit(s, &mine);
	for (i = 0; i < CH_NTABLES; i++)
		sbuf__free(&mine.rows[i]);
	for (i = 0; i < 3; i++)
		free(mine.known[i]);
	return err;
}

/* ---- put_spans ---- */

int ch_store__put_spans(struct store *base, const struct store_span *sp, size_t n)
{
	struct ch_store *s = ch_store(base);
	struct ch_batch mine = {0};
	struct ch_set seen = {0};
	struct labelset ls = {0};
	struct sbuf *r = &mine.rows[CH_SPANS];
	uint64_t series = 0;
	size_t i;
	int err = 0;

	err = store_check_spans(sp, n);
	if (err || !n)
		return err;
	pthread_mutex_lock(&s->known_lock);
	for (i = 0; !err && i < n; i++) {
		const struct store_span *x = &sp[i];

		err = labelset__encode_checked(&ls, x->labels, x->nlabels);
		if (err)
			break;
		series = ch_series_id(&ls, STORE_SPAN_METRIC);
		err = add_series(s, &mine, &seen, series, x->end_ns / CH_DAY_NS, STORE_SPAN_METRIC,
				 &ls);
		labelset__free(&ls);
		if (!err)
			err = rb_u64(r, series);
		if (!err)
			err = rb_u64(r, (uint64_t)x->start_ns);
		if (!err)
			err = rb_u64(r, (uint64_t)x->end_ns);
		if (!err)
			err = rb_u32(r, (uint32_t)x->device);
		if (!err)
			err = rb_u32(r, x->stream);
		if (!err)
			err = rb_u32(r, x->correlation);
		if (!err)
			err = rb_u32(r, x->tid);
		if (!err)
			err = rb_u64(r, x->bytes);
		if (!err)
			err = rb_str(r, x->kind, strlen(x->kind));
		if (!err)
			err = rb_str(r, x->name, strlen(x->name));
		if (!err)
			err = rb_str(r, x->from ? x->from : "", x->from ? strlen(x->from) : 0);
	}
	pthread_mutex_unlock(&s->known_lock);
	ch_set__free(&seen);
	if (!err)
		err = commit(s, &mine);
	for (i = 0; i < CH_NTABLES; i++)
		sbuf__free(&mine.rows[i]);
	for (i = 0; i < 3; i++)
		free(mine.known[i]);
	return err;
}
