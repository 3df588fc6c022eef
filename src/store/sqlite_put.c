/* sqlite_put.c: the writes of the embedded store -- put_windows and
 * put_points of store.h, called by the server's ingest. A put of windows
 * validates them, resolves their labels, units, functions and stacks in the
 * dictionaries (dict.c: the stack trie is walked level by level, sorted
 * stacks sharing their walked prefixes), gathers each window's (stack,
 * value) pairs, writes one row per (start, end, unit) with codec.c, then the
 * dictionary rows it added, in one transaction; a failed one is rolled
 * back and the dictionaries undone. This is the store's hot path
 * (bench/store.sh measures it): the steps of a put stay in this file so
 * that the compiler can inline them. */
#include "store/sqlite_internal.h"
#include "common/xalloc.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "profile/profile.h"

/* ---- put_windows ---- */

/* The seed of the hash that names a key's series in window_keys. */
#define KEY_SERIES_SEED 0x4b45595345520001ULL

/* The first hour boundary at or after ms: windows ending at ms are before
 * hour_after(ms) * 1 h. */
static uint32_t hour_after(int64_t ms)
{
	int64_t h = (ms + DICT_HOUR_MS - 1) / DICT_HOUR_MS;

	return h > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)h;
}

static int cmp_pair(const void *a, const void *b)
{
	const struct store_pair *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

static int cmp_win(const void *a, const void *b)
{
	const struct put_win *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	if (x->unit != y->unit)
		return x->unit < y->unit ? -1 : 1;
	return x->series < y->series ? -1 : x->series > y->series;
}

/* Sorts pairs by stack id and adds up those of the same stack; returns how
 * many are left, or -EOVERFLOW. */
static long merge_pairs(struct store_pair *p, size_t n, int64_t *total)
{
	size_t i, m = 0;
	int64_t sum = 0;

	qsort(p, n, sizeof(*p), cmp_pair);
	for (i = 0; i < n; i++) {
		if (__builtin_add_overflow(sum, p[i].value, &sum))
			return -EOVERFLOW;
		if (m && p[m - 1].id == p[i].id) {
			if (__builtin_add_overflow(p[m - 1].value, p[i].value, &p[m - 1].value))
				return -EOVERFLOW;
		} else {
			p[m++] = p[i];
		}
	}
	*total = sum;
	return (long)m;
}

/* Module ids by the profile's string index: a stack crosses few modules. */
struct modcache {
	uint32_t idx[16], id[16];
	uint8_t kernel[16];
};

static int loc_module(struct sqlite_store *s, const struct prof_location *loc,
		      const struct profile *prof, struct modcache *mc, uint32_t *mid)
{
	unsigned int slot = loc->module & 15;
	int err;

	if (mc->idx[slot] == loc->module + 1 && mc->kernel[slot] == loc->kernel) {
		*mid = mc->id[slot];
		return 0;
	}
	err = dict__module(&s->dict, loc->module ? profile__str(prof, loc->module) : "",
			   loc->kernel, mid);
	if (err)
		return err;
	mc->idx[slot] = loc->module + 1;
	mc->kernel[slot] = loc->kernel;
	mc->id[slot] = *mid;
	return 0;
}

#define LOC_NEEDED UINT32_MAX

/* Function ids for the locations of prof that samples use, into locfunc.
 * A profile has a location per sampled address, several per function: only
 * the first location of each (name, module) is looked up, the others copy
 * its id. The lookups go in passes: hash every name and start fetching its
 * slot of the map, then its entry and the two names to compare, then look
 * each up: the misses of independent lookups overlap instead of adding up. */
#define LOC_COPY 0x80000000u /* locfunc: id of location (value & ~LOC_COPY) */

static int resolve_funcs(struct sqlite_store *s, const struct profile *prof, uint32_t project)
{
	struct put_scratch *ps = &s->put;
	struct modcache mc;
	size_t li;
	int err;

	err = array_grow((void **)&ps->strrep, &ps->cap_strrep, prof->nstrings,
			 sizeof(*ps->strrep));
	if (err)
		return err;
	memset(ps->strrep, 0, prof->nstrings * sizeof(*ps->strrep));
	memset(&mc, 0, sizeof(mc));
	for (li = 0; li < prof->nlocs; li++) {
		const struct prof_location *loc = &prof->locs[li];
		uint32_t rep;

		if (ps->locfunc[li] != LOC_NEEDED)
			continue;
		err = loc_module(s, loc, prof, &mc, &ps->locmod[li]);
		if (err)
			return err;
		/* strrep: the first location of this name, + 1 (0: none yet). */
		rep = loc->func < prof->nstrings ? ps->strrep[loc->func] : 0;
		if (rep && ps->locmod[rep - 1] == ps->locmod[li]) {
			ps->locfunc[li] = LOC_COPY | (rep - 1);
			continue;
		}
		if (!rep && loc->func < prof->nstrings)
			ps->strrep[loc->func] = (uint32_t)li + 1;
		/* The profile hashed the name when it interned it. */
		ps->lochash[li] =
			dict__func_hash_of(profile__str_info(prof, loc->func).hash, ps->locmod[li]);
		dict__func_prefetch(&s->dict, ps->lochash[li]);
	}
	for (li = 0; li < prof->nlocs; li++)
		if (ps->locfunc[li] == LOC_NEEDED) {
			dict__func_prefetch2(&s->dict, ps->lochash[li]);
			__builtin_prefetch(profile__str(prof, prof->locs[li].func));
		}
	for (li = 0; li < prof->nlocs; li++) {
		uint32_t fi = prof->locs[li].func;

		if (ps->locfunc[li] != LOC_NEEDED)
			continue;
		err = dict__func(&s->dict, profile__str(prof, fi), profile__str_info(prof, fi).len,
				 ps->locmod[li], ps->lochash[li],
				 profile__str(prof, prof->locs[li].file), prof->locs[li].start_line,
				 project, &ps->locfunc[li], &s->undo);
		if (err)
			return err;
	}
	/* Every LOC_NEEDED is resolved now (ids stay far below LOC_COPY); a
	 * copy's representative is never a copy itself. */
	for (li = 0; li < prof->nlocs; li++)
		if (ps->locfunc[li] & LOC_COPY)
			ps->locfunc[li] = ps->locfunc[ps->locfunc[li] & ~LOC_COPY];
	return 0;
}

/* Takes in one window: validates its samples, resolves the functions of
 * their frames, and appends one entry per counted sample (its stack as
 * function ids, root first, in ps->seq) for put_stacks. dict_lock is held. */
static int take_window(struct sqlite_store *s, const struct profile *prof, uint32_t win, uint32_t h,
		       uint32_t project)
{
	struct put_scratch *ps = &s->put;
	size_t i, j;
	int err;

	err = array_grow((void **)&ps->locfunc, &ps->cap_locfunc, prof->nlocs,
			 sizeof(*ps->locfunc));
	if (!err)
		err = array_grow((void **)&ps->locmod, &ps->cap_locmod, prof->nlocs,
				 sizeof(*ps->locmod));
	if (!err)
		err = array_grow((void **)&ps->lochash, &ps->cap_lochash, prof->nlocs,
				 sizeof(*ps->lochash));
	if (!err)
		err = array_grow((void **)&ps->ents, &ps->cap_ents, ps->nents + prof->nsamples,
				 sizeof(*ps->ents));
	if (err)
		return err;
	memset(ps->locfunc, 0, prof->nlocs * sizeof(*ps->locfunc));
	for (i = 0; i < prof->nsamples; i++) {
		const struct prof_sample *smp = &prof->samples[i];

		if (smp->count < 0 || smp->nlocs > PROF_MAX_FRAMES || (smp->nlocs && !smp->locs))
			return -EINVAL;
		for (j = 0; j < smp->nlocs; j++)
			if (smp->locs[j] >= prof->nlocs)
				return -EINVAL;
		/* Only locations of counted samples become functions: one that
		 * no stack refers to would never expire. */
		if (smp->count)
			for (j = 0; j < smp->nlocs; j++)
				ps->locfunc[smp->locs[j]] = LOC_NEEDED;
	}
	err = resolve_funcs(s, prof, project);
	if (err)
		return err;
	for (i = 0; i < prof->nsamples; i++) {
		const struct prof_sample *smp = &prof->samples[i];
		struct put_ent *e;

		if (!smp->count)
			continue;
		err = array_grow((void **)&ps->seq, &ps->cap_seq, ps->nseq + smp->nlocs,
				 sizeof(*ps->seq));
		if (err)
			return err;
		e = &ps->ents[ps->nents++];
		e->h = h;
		e->win = win;
		e->off = ps->nseq;
		e->n = smp->nlocs;
		e->count = smp->count;
		for (j = 0; j < smp->nlocs; j++)
			ps->seq[ps->nseq++] = ps->locfunc[smp->locs[smp->nlocs - 1 - j]];
	}
	return 0;
}

/* Orders entries by hour, then by stack root first: identical stacks of
 * different windows and series end up together, and neighbours share the
 * longest prefixes. */
static int cmp_ent(const void *a, const void *b, void *arg)
{
	const struct put_ent *x = a, *y = b;
	const uint32_t *seq = arg, *p = seq + x->off, *q = seq + y->off;
	uint32_t n = x->n < y->n ? x->n : y->n, k;

	if (x->h != y->h)
		return x->h < y->h ? -1 : 1;
	for (k = 0; k < n; k++)
		if (p[k] != q[k])
			return p[k] < q[k] ? -1 : 1;
	return x->n < y->n ? -1 : x->n > y->n;
}

/* Whether sorted entry e (not the first) has the stack of the one before,
 * in the same hour: it is not walked but takes that one's node. */
static bool same_as_prev(const struct put_ent *e)
{
	return e->lcp == e->n && e[-1].n == e->n && e[-1].h == e->h;
}

/* Resolves the entries' stacks into trie nodes, adding what is new: in
 * sorted order, the previous entry's path is reused as far as it goes (the
 * memo) and only the rest of the trie is walked. */
static int walk_stacks(struct sqlite_store *s)
{
	struct put_scratch *ps = &s->put;
	uint32_t d, src = 0;
	size_t i, na = 0, k;
	int err;

	qsort_r(ps->ents, ps->nents, sizeof(*ps->ents), cmp_ent, ps->seq);
	err = array_grow((void **)&ps->act, &ps->cap_act, ps->nents, sizeof(*ps->act));
	if (err)
		return err;
	for (i = 0; i < ps->nents; i++) {
		struct put_ent *e = &ps->ents[i], *prev = i ? e - 1 : NULL;
		uint32_t n = 0;

		/* The prefix shared with the previous entry (same hour only:
		 * the walk raises each node's last_h to the entry's hour). */
		if (prev && prev->h == e->h)
			while (n < e->n && n < prev->n &&
			       ps->seq[e->off + n] == ps->seq[prev->off + n])
				n++;
		e->lcp = n;
		e->node = 0;
		if (prev && same_as_prev(e))
			continue;
		if (e->n)
			ps->act[na++] = (struct put_act){.ent = (uint32_t)i, .src = src};
		src = (uint32_t)i;
	}
	/* Level by level over the entries still walking: the lookups of one
	 * depth do not depend on each other, so their slots are all fetched
	 * before any is used. Within the shared prefix an entry copies the
	 * node of the last walked entry before it (the same path so far, at
	 * depth d already). */
	for (d = 0; na; d++) {
		for (k = 0; k < na; k++) {
			const struct put_ent *e = &ps->ents[ps->act[k].ent];

			if (d >= e->lcp)
				dict__child_prefetch(&s->dict, e->node, ps->seq[e->off + d]);
		}
		for (i = k = 0; k < na; k++) {
			struct put_ent *e = &ps->ents[ps->act[k].ent];

			if (d < e->lcp) {
				e->node = ps->ents[ps->act[k].src].node;
			} else {
				err = dict__child(&s->dict, e->node, ps->seq[e->off + d], e->h,
						  &e->node, &s->undo);
				if (err)
					return err;
			}
			if (e->n > d + 1)
				ps->act[i++] = ps->act[k];
		}
		na = i;
	}
	for (i = 1; i < ps->nents; i++)
		if (same_as_prev(&ps->ents[i]))
			ps->ents[i].node = ps->ents[i - 1].node;
	return 0;
}

/* Gathers each window's (node, count) pairs into ps->pairs: count, place,
 * then sort and sum each window's. */
static int gather_pairs(struct put_scratch *ps, size_t nwins)
{
	size_t i;
	int err;

	err = array_grow((void **)&ps->pairs, &ps->cap_pairs, ps->nents, sizeof(*ps->pairs));
	if (err)
		return err;
	for (i = 0; i < nwins; i++)
		ps->wins[i].n = 0;
	for (i = 0; i < ps->nents; i++)
		ps->wins[ps->ents[i].win].n++;
	for (i = 0, ps->npairs = 0; i < nwins; i++) {
		ps->wins[i].off = ps->npairs;
		ps->npairs += ps->wins[i].n;
		ps->wins[i].n = 0;
	}
	for (i = 0; i < ps->nents; i++) {
		struct put_win *pw = &ps->wins[ps->ents[i].win];
		struct store_pair *p = &ps->pairs[pw->off + pw->n++];

		p->id = ps->ents[i].node;
		p->value = ps->ents[i].count;
	}
	for (i = 0; i < nwins; i++) {
		struct put_win *pw = &ps->wins[i];
		long m = merge_pairs(ps->pairs + pw->off, pw->n, &pw->total);

		if (m < 0)
			return (int)m;
		pw->n = (size_t)m;
	}
	return 0;
}

/* Writes the rows of windows wins[0..n), sorted, sharing start, end and
 * unit: one row, with the windows of one series merged. */
static int write_row(struct sqlite_store *s, const struct put_win *wins, size_t n,
		     uint64_t *nwindows, uint64_t *nsamples_out)
{
	struct put_scratch *ps = &s->put;
	sqlite3_stmt *st = s->st[W_INS_WINDOW];
	size_t i, j, nseries = 0, nsamples = 0;
	int err;

	ps->dirbuf.len = ps->databuf.len = 0;
	err = array_grow((void **)&ps->dirents, &ps->cap_dirents, n, sizeof(*ps->dirents));
	if (err)
		return err;
	for (i = 0; i < n; i = j) {
		const struct store_pair *pairs = ps->pairs + wins[i].off;
		size_t np = wins[i].n, before = ps->databuf.len;
		int64_t total = wins[i].total;

		for (j = i + 1; j < n && wins[j].series == wins[i].series; j++)
			;
		if (j > i + 1) { /* the same series twice: merge */
			size_t k, m = 0;
			long r;

			for (k = i; k < j; k++)
				m += wins[k].n;
			err = array_grow((void **)&ps->merge, &ps->cap_merge, m,
					 sizeof(*ps->merge));
			if (err)
				return err;
			for (m = 0, k = i; k < j; k++) {
				memcpy(ps->merge + m, ps->pairs + wins[k].off,
				       wins[k].n * sizeof(*ps->merge));
				m += wins[k].n;
			}
			r = merge_pairs(ps->merge, m, &total);
			if (r < 0)
				return (int)r;
			pairs = ps->merge;
			np = (size_t)r;
		}
		err = codec_put_pairs(&ps->databuf, pairs, np);
		if (err)
			return err;
		ps->dirents[nseries++] = (struct codec_dir_ent){
			.sid = wins[i].series, .len = ps->databuf.len - before, .total = total};
		nsamples += np;
	}
	err = codec_put_dir(&ps->dirbuf, ps->dirents, nseries);
	if (err)
		return err;

	sqlite3_bind_int64(st, 1, wins[0].start);
	sqlite3_bind_int64(st, 2, wins[0].end);
	sqlite3_bind_int64(st, 3, wins[0].unit);
	sqlite3_bind_int64(st, 4, (int64_t)nseries);
	sqlite3_bind_int64(st, 5, (int64_t)nsamples);
	sqlite3_bind_blob(st, 6, ps->dirbuf.p, (int)ps->dirbuf.len, SQLITE_STATIC);
	sqlite3_bind_blob(st, 7, ps->databuf.p, (int)ps->databuf.len, SQLITE_STATIC);
	err = step_done(s->db, st, "write a profile window");
	*nwindows += nseries;
	*nsamples_out += nsamples;
	return err;
}

/* Writes dictionary row id with statement which: an insert of a new entry
 * or an update of its last_h. */
static int write_dict_row(struct sqlite_store *s, int which, uint32_t id)
{
	const struct dict *d = &s->dict;
	sqlite3_stmt *st = s->st[which];
	const char *what;

	sqlite3_bind_int64(st, 1, id);
	switch (which) {
	case W_INS_FUNC:
		sqlite3_bind_text(st, 2, d->funcs[id].name, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 3, d->funcs[id].module, -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 4, d->funcs[id].kernel);
		sqlite3_bind_text(st, 5, d->funcs[id].file, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 6, d->funcs[id].start_line);
		sqlite3_bind_text(st, 7, d->projects[d->funcs[id].project].name, -1, SQLITE_STATIC);
		what = "write a function name";
		break;
	case W_UPD_FUNC_SRC:
		sqlite3_bind_text(st, 2, d->funcs[id].file, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 3, d->funcs[id].start_line);
		what = "write where a function is";
		break;
	case W_INS_NODE:
		sqlite3_bind_int64(st, 2, d->nodes[id].parent);
		sqlite3_bind_int64(st, 3, d->nodes[id].func);
		sqlite3_bind_int64(st, 4, d->nodes[id].last_h);
		what = "write a stack";
		break;
	case W_UPD_NODE:
		sqlite3_bind_int64(st, 2, d->nodes[id].last_h);
		what = "update a stack";
		break;
	case W_INS_SERIES:
		sqlite3_bind_blob(st, 2, d->series[id].ls.key, (int)d->series[id].ls.len,
				  SQLITE_STATIC);
		sqlite3_bind_int64(st, 3, d->series[id].last_h);
		what = "write a series";
		break;
	case W_UPD_SERIES:
		sqlite3_bind_int64(st, 2, d->series[id].last_h);
		what = "update a series";
		break;
	case W_INS_PSERIES:
		sqlite3_bind_text(st, 2, d->pseries[id].name, -1, SQLITE_STATIC);
		sqlite3_bind_blob(st, 3, d->pseries[id].ls.key, (int)d->pseries[id].ls.len,
				  SQLITE_STATIC);
		what = "write a metric series";
		break;
	default: /* W_INS_UNIT */
		sqlite3_bind_text(st, 2, d->units[id].unit, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 3, d->units[id].period);
		what = "write a unit";
		break;
	}
	return step_done(s->db, st, what);
}

/* Writes the dictionary rows a put added or changed (s->undo), parents
 * before the rows that refer to them. */
static int write_dict(struct sqlite_store *s)
{
	const struct dict_undo *u = &s->undo;
	size_t i;
	int err = 0;

	for (i = 0; !err && i < u->nfuncs; i++)
		err = write_dict_row(s, W_INS_FUNC, u->funcs[i]);
	for (i = 0; !err && i < u->nfunc_srcs; i++)
		err = write_dict_row(s, W_UPD_FUNC_SRC, u->func_srcs[i]);
	for (i = 0; !err && i < u->nnodes; i++)
		err = write_dict_row(s, W_INS_NODE, u->nodes[i]);
	for (i = 0; !err && i < u->nnode_last; i++)
		err = write_dict_row(s, W_UPD_NODE, u->node_last[i].id);
	for (i = 0; !err && i < u->nseries; i++)
		err = write_dict_row(s, W_INS_SERIES, u->series[i]);
	for (i = 0; !err && i < u->nseries_last; i++)
		err = write_dict_row(s, W_UPD_SERIES, u->series_last[i].id);
	for (i = 0; !err && i < u->npseries; i++)
		err = write_dict_row(s, W_INS_PSERIES, u->pseries[i]);
	for (i = 0; !err && i < u->nunits; i++)
		err = write_dict_row(s, W_INS_UNIT, u->units[i]);
	return err;
}

static int set_max_window(struct sqlite_store *s, int64_t len)
{
	sqlite3_stmt *st = s->st[W_SET_META];

	sqlite3_bind_text(st, 1, "max_window_ms", -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 2, len);
	return step_done(s->db, st, "write the store's metadata");
}

/* Commits, or rolls back and takes back what the dictionaries gained. */
static int commit_put(struct sqlite_store *s, int err)
{
	err = sqlite_store__commit(s, err, "commit");
	if (err) {
		pthread_rwlock_wrlock(&s->dict_lock);
		dict__undo(&s->dict, &s->undo);
		pthread_rwlock_unlock(&s->dict_lock);
	} else {
		dict__undo_clear(&s->undo);
	}
	return err;
}

/* Whether the window stores something: a sample of a value other than 0. */
static bool window_stores(const struct store_window *w)
{
	for (size_t i = 0; i < w->prof->nsamples; i++)
		if (w->prof->samples[i].count)
			return true;
	return false;
}

/* Records a keyed put's key with the series of its first window that
 * stores something (a key is that series' alone: the same key from
 * another series, another project's, is another put), to expire with the
 * latest of its windows; 1 when it was stored before. A put that stores
 * nothing records nothing. */
static int put_key(struct sqlite_store *s, const struct store_window *w, size_t n)
{
	sqlite3_stmt *st = s->st[W_INS_KEY];
	struct labelset ls = {0};
	int64_t end = w[0].end_ms;
	size_t i, first;
	int err;

	for (first = 0; first < n && !window_stores(&w[first]); first++)
		;
	if (first == n)
		return 0;
	for (i = 1; i < n; i++)
		if (w[i].end_ms > end)
			end = w[i].end_ms;
	err = labelset__encode_checked(&ls, w[first].labels, w[first].nlabels);
	if (err)
		return err;
	sqlite3_bind_int64(st, 1, (int64_t)hash_bytes(ls.key, ls.len, KEY_SERIES_SEED));
	labelset__free(&ls);
	sqlite3_bind_text(st, 2, w[0].key, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 3, end);
	err = step_done(s->db, st, "record the put's key");
	return err ? err : sqlite3_changes(s->db) == 0;
}

/* -EDQUOT (the refusal recorded) when the put in hand added to project p
 * series (since nseries of the undo log) or functions (since nfuncs) and
 * took it past a bound; dict_lock is held. */
static int check_quota(struct sqlite_store *s, uint32_t p, size_t nseries, size_t nfuncs)
{
	const struct dict_project *dp = &s->dict.projects[p];
	const struct store_quota *q = &s->quota;
	size_t added = s->undo.nseries + s->undo.npseries - nseries, i;
	uint64_t bytes = 0;

	if (added && q->max_series && dp->series > q->max_series) {
		store_refuse(STORE_BOUND_SERIES, dp->name, dp->series - added, added,
			     q->max_series);
		return -EDQUOT;
	}
	if (s->undo.nfuncs > nfuncs && q->max_name_bytes && dp->name_bytes > q->max_name_bytes) {
		for (i = nfuncs; i < s->undo.nfuncs; i++)
			bytes += dict__func_bytes(&s->dict.funcs[s->undo.funcs[i]]);
		store_refuse(STORE_BOUND_NAMES, dp->name, dp->name_bytes - bytes, bytes,
			     q->max_name_bytes);
		return -EDQUOT;
	}
	return 0;
}

int sqlite_store__set_quota(struct store *base, const struct store_quota *q)
{
	struct sqlite_store *s = sqlite_store(base);

	pthread_mutex_lock(&s->write_lock);
	s->quota = *q;
	pthread_mutex_unlock(&s->write_lock);
	return 0;
}

/* Resolves each window's series and unit, and the functions and stacks of
 * its samples, into ps->wins and ps->pairs, adding what is new to the
 * dictionaries -- within its project's bounds (check_quota). */
static int resolve_windows(struct sqlite_store *s, const struct store_window *w, size_t n)
{
	struct put_scratch *ps = &s->put;
	struct labelset ls = {0};
	size_t i;
	int err = 0;

	ps->npairs = ps->nents = ps->nseq = 0;
	pthread_rwlock_wrlock(&s->dict_lock);
	for (i = 0; !err && i < n; i++) {
		const struct profile *prof = w[i].prof;
		struct put_win *pw = &ps->wins[i];
		size_t nseries = s->undo.nseries + s->undo.npseries, nfuncs = s->undo.nfuncs;
		uint32_t project;

		err = labelset__encode_checked(&ls, w[i].labels, w[i].nlabels);
		if (err)
			break;
		pw->start = w[i].start_ms;
		pw->end = w[i].end_ms;
		err = dict__series(&s->dict, &ls, hour_after(w[i].end_ms), &pw->series, &s->undo);
		labelset__free(&ls);
		if (err)
			break;
		project = s->dict.series[pw->series].project;
		err = dict__unit(&s->dict, prof->unit ? prof->unit : "", prof->period, &pw->unit,
				 &s->undo);
		if (!err)
			err = take_window(s, prof, (uint32_t)i, hour_after(w[i].end_ms), project);
		if (!err)
			err = check_quota(s, project, nseries, nfuncs);
	}
	if (!err)
		err = walk_stacks(s);
	pthread_rwlock_unlock(&s->dict_lock);
	if (!err)
		err = gather_pairs(ps, n);
	return err;
}

static bool same_row(const struct put_win *a, const struct put_win *b)
{
	return a->start == b->start && a->end == b->end && a->unit == b->unit;
}

/* Writes the resolved windows wins[0..n) that kept samples, a row per
 * (start, end, unit); adds what they hold to *nwindows and *nsamples and
 * raises *maxlen to the longest. */
static int write_rows(struct sqlite_store *s, size_t n, int64_t *maxlen, uint64_t *nwindows,
		      uint64_t *nsamples)
{
	struct put_win *wins = s->put.wins;
	size_t i, j, nw = 0;
	int err = 0;

	for (i = 0; i < n; i++) {
		if (!wins[i].n)
			continue; /* a window left with no sample stores nothing */
		if (wins[i].end - wins[i].start > *maxlen)
			*maxlen = wins[i].end - wins[i].start;
		wins[nw++] = wins[i];
	}
	qsort(wins, nw, sizeof(*wins), cmp_win);
	for (i = 0; !err && i < nw; i = j) {
		for (j = i + 1; j < nw && same_row(&wins[i], &wins[j]); j++)
			;
		err = write_row(s, wins + i, j - i, nwindows, nsamples);
	}
	return err;
}

int sqlite_store__put_windows(struct store *base, const struct store_window *w, size_t n)
{
	struct sqlite_store *s = sqlite_store(base);
	int64_t maxlen = atomic_load(&s->max_window_ms);
	uint64_t nwindows = 0, nsamples = 0;
	size_t i;
	int err = 0;

	if (n && !w)
		return -EINVAL;
	if (n && w[0].key && strlen(w[0].key) > STORE_MAX_PUT_KEY)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		err = store_check_window(&w[i], i);
		if (err)
			return err;
	}
	if (!n)
		return 0;

	pthread_mutex_lock(&s->write_lock);
	err = array_grow((void **)&s->put.wins, &s->put.cap_wins, n, sizeof(*s->put.wins));
	if (!err)
		err = step_done(s->db, s->st[W_BEGIN], "begin a transaction");
	if (err)
		goto unlock;
	/* A keyed put stored before (a retry whose answer was lost): nothing
	 * to write. Otherwise the key commits with the windows. */
	if (w[0].key)
		err = put_key(s, w, n);
	if (err == 1) {
		step_done(s->db, s->st[W_ROLLBACK], "roll back");
		goto unlock;
	}
	if (!err)
		err = resolve_windows(s, w, n);
	if (!err)
		err = write_rows(s, n, &maxlen, &nwindows, &nsamples);
	if (!err)
		err = write_dict(s);
	if (!err && maxlen > atomic_load(&s->max_window_ms)) {
		/* Readers use it to bound their scans: raise it before the
		 * rows become visible. */
		err = set_max_window(s, maxlen);
		if (!err)
			atomic_store(&s->max_window_ms, maxlen);
	}
	err = commit_put(s, err);
	if (!err) {
		atomic_fetch_add(&s->nwindows, nwindows);
		atomic_fetch_add(&s->nsamples, nsamples);
	}
unlock:
	pthread_mutex_unlock(&s->write_lock);
	if (err < 0)
		pr_debug("store: put of %zu windows failed: %s", n, strerror(-err));
	return err;
}

/* ---- put_points ---- */

/* The metric series of points p[0..n) into ids, adding what is new. */
static int resolve_points(struct sqlite_store *s, const struct store_point *p, size_t n,
			  uint32_t *ids)
{
	struct labelset ls = {0};
	size_t i;
	int err = 0;

	pthread_rwlock_wrlock(&s->dict_lock);
	for (i = 0; !err && i < n; i++) {
		size_t nseries = s->undo.nseries + s->undo.npseries;

		err = labelset__encode_checked(&ls, p[i].labels, p[i].nlabels);
		if (!err)
			err = dict__pseries(&s->dict, p[i].name, &ls, &ids[i], &s->undo);
		labelset__free(&ls);
		if (!err)
			err = check_quota(s, s->dict.pseries[ids[i]].project, nseries,
					  s->undo.nfuncs);
	}
	pthread_rwlock_unlock(&s->dict_lock);
	return err;
}

static int step_point(struct sqlite_store *s, int which, uint32_t id, const struct store_point *p)
{
	sqlite3_stmt *st = s->st[which];

	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int64(st, 2, p->ts_ms);
	sqlite3_bind_double(st, 3, p->value); /* NaN is stored as NULL */
	return step_done(s->db, st, "write a metric point");
}

/* Writes a point of series id; *added counts the new ones. */
static int write_point(struct sqlite_store *s, uint32_t id, const struct store_point *p,
		       uint64_t *added)
{
	int err = step_point(s, W_INS_POINT, id, p);

	if (err)
		return err;
	if (sqlite3_changes(s->db)) {
		(*added)++;
		return 0;
	}
	/* The same series and time as a stored point: the new value wins. */
	return step_point(s, W_UPD_POINT, id, p);
}

int sqlite_store__put_points(struct store *base, const struct store_point *p, size_t n)
{
	struct sqlite_store *s = sqlite_store(base);
	uint32_t *ids = NULL;
	uint64_t added = 0;
	size_t i;
	int err = 0;

	err = store_check_points(p, n);
	if (err || !n)
		return err;
	ids = malloc(n * sizeof(*ids));
	if (!ids)
		return -ENOMEM;

	pthread_mutex_lock(&s->write_lock);
	err = step_done(s->db, s->st[W_BEGIN], "begin a transaction");
	if (err)
		goto unlock;
	err = resolve_points(s, p, n, ids);
	for (i = 0; !err && i < n; i++)
		err = write_point(s, ids[i], &p[i], &added);
	if (!err)
		err = write_dict(s);
	err = commit_put(s, err);
	if (!err)
		atomic_fetch_add(&s->npoints, added);
unlock:
	pthread_mutex_unlock(&s->write_lock);
	free(ids);
	return err;
}

/* ---- put_spans ---- */

static int write_span(struct sqlite_store *s, uint32_t id, const struct store_span *sp)
{
	sqlite3_stmt *st = s->st[W_INS_SPAN];

	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int64(st, 2, sp->start_ns);
	sqlite3_bind_int64(st, 3, sp->end_ns);
	sqlite3_bind_int64(st, 4, sp->device);
	sqlite3_bind_int64(st, 5, sp->stream);
	sqlite3_bind_int64(st, 6, sp->correlation);
	sqlite3_bind_int64(st, 7, sp->tid);
	sqlite3_bind_int64(st, 8, (int64_t)(sp->bytes > INT64_MAX ? INT64_MAX : sp->bytes));
	sqlite3_bind_text(st, 9, sp->kind, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 10, sp->name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 11, sp->from ? sp->from : "", -1, SQLITE_STATIC);
	return step_done(s->db, st, "write a span");
}

int sqlite_store__put_spans(struct store *base, const struct store_span *sp, size_t n)
{
	struct sqlite_store *s = sqlite_store(base);
	struct labelset ls = {0};
	uint32_t id = 0;
	size_t i;
	int err = 0;

	err = store_check_spans(sp, n);
	if (err || !n)
		return err;
	pthread_mutex_lock(&s->write_lock);
	err = step_done(s->db, s->st[W_BEGIN], "begin a transaction");
	if (err)
		goto unlock;
	for (i = 0; !err && i < n; i++) {
		size_t nseries = s->undo.nseries + s->undo.npseries;

		/* Spans of one process come together: its series once. */
		if (i && sp[i].labels == sp[i - 1].labels && sp[i].nlabels == sp[i - 1].nlabels) {
			err = write_span(s, id, &sp[i]);
			continue;
		}
		pthread_rwlock_wrlock(&s->dict_lock);
		err = labelset__encode_checked(&ls, sp[i].labels, sp[i].nlabels);
		if (!err)
			err = dict__pseries(&s->dict, STORE_SPAN_METRIC, &ls, &id, &s->undo);
		labelset__free(&ls);
		if (!err)
			err = check_quota(s, s->dict.pseries[id].project, nseries, s->undo.nfuncs);
		pthread_rwlock_unlock(&s->dict_lock);
		if (!err)
			err = write_span(s, id, &sp[i]);
	}
	if (!err)
		err = write_dict(s);
	err = commit_put(s, err);
	/* A span put again (a retry) counts twice here: the stats' count is
	 * a close estimate, expiry's deletions exact. */
	if (!err)
		atomic_fetch_add(&s->nspans, n);
unlock:
	pthread_mutex_unlock(&s->write_lock);
	return err;
}

void put_scratch__free(struct put_scratch *p)
{
	free(p->wins);
	free(p->pairs);
	free(p->merge);
	free(p->locfunc);
	free(p->locmod);
	free(p->lochash);
	free(p->strrep);
	free(p->act);
	free(p->ents);
	free(p->seq);
	store_buf__free(&p->dirbuf);
	store_buf__free(&p->databuf);
	free(p->dirents);
	memset(p, 0, sizeof(*p));
}
