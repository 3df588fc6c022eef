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

static int resolve_funcs(struct sqlite_store *s, const struct profile *prof)
{
	struct modcache mc;
	size_t li;
	int err;

	err = array_grow((void **)&s->put.strrep, &s->put.cap_strrep, prof->nstrings,
			 sizeof(*s->put.strrep));
	if (err)
		return err;
	memset(s->put.strrep, 0, prof->nstrings * sizeof(*s->put.strrep));
	memset(&mc, 0, sizeof(mc));
	for (li = 0; li < prof->nlocs; li++) {
		const struct prof_location *loc = &prof->locs[li];
		uint32_t rep;

		if (s->put.locfunc[li] != LOC_NEEDED)
			continue;
		err = loc_module(s, loc, prof, &mc, &s->put.locmod[li]);
		if (err)
			return err;
		/* strrep: the first location of this name, + 1 (0: none yet). */
		rep = loc->func < prof->nstrings ? s->put.strrep[loc->func] : 0;
		if (rep && s->put.locmod[rep - 1] == s->put.locmod[li]) {
			s->put.locfunc[li] = LOC_COPY | (rep - 1);
			continue;
		}
		if (!rep && loc->func < prof->nstrings)
			s->put.strrep[loc->func] = (uint32_t)li + 1;
		/* The profile hashed the name when it interned it. */
		s->put.lochash[li] = dict__func_hash_of(profile__str_info(prof, loc->func).hash,
							s->put.locmod[li]);
		dict__func_prefetch(&s->dict, s->put.lochash[li]);
	}
	for (li = 0; li < prof->nlocs; li++)
		if (s->put.locfunc[li] == LOC_NEEDED) {
			dict__func_prefetch2(&s->dict, s->put.lochash[li]);
			__builtin_prefetch(profile__str(prof, prof->locs[li].func));
		}
	for (li = 0; li < prof->nlocs; li++) {
		uint32_t fi = prof->locs[li].func;

		if (s->put.locfunc[li] != LOC_NEEDED)
			continue;
		err = dict__func(&s->dict, profile__str(prof, fi), profile__str_info(prof, fi).len,
				 s->put.locmod[li], s->put.lochash[li], &s->put.locfunc[li],
				 &s->undo);
		if (err)
			return err;
	}
	/* Every LOC_NEEDED is resolved now (ids stay far below LOC_COPY); a
	 * copy's representative is never a copy itself. */
	for (li = 0; li < prof->nlocs; li++)
		if (s->put.locfunc[li] & LOC_COPY)
			s->put.locfunc[li] = s->put.locfunc[s->put.locfunc[li] & ~LOC_COPY];
	return 0;
}

/* Takes in one window: validates its samples, resolves the functions of
 * their frames, and appends one entry per counted sample (its stack as
 * function ids, root first, in s->put.seq) for put_stacks. dict_lock is held. */
static int take_window(struct sqlite_store *s, const struct profile *prof, uint32_t win, uint32_t h)
{
	size_t i, j;
	int err;

	err = array_grow((void **)&s->put.locfunc, &s->put.cap_locfunc, prof->nlocs,
			 sizeof(*s->put.locfunc));
	if (!err)
		err = array_grow((void **)&s->put.locmod, &s->put.cap_locmod, prof->nlocs,
				 sizeof(*s->put.locmod));
	if (!err)
		err = array_grow((void **)&s->put.lochash, &s->put.cap_lochash, prof->nlocs,
				 sizeof(*s->put.lochash));
	if (!err)
		err = array_grow((void **)&s->put.ents, &s->put.cap_ents,
				 s->put.nents + prof->nsamples, sizeof(*s->put.ents));
	if (err)
		return err;
	memset(s->put.locfunc, 0, prof->nlocs * sizeof(*s->put.locfunc));
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
				s->put.locfunc[smp->locs[j]] = LOC_NEEDED;
	}
	err = resolve_funcs(s, prof);
	if (err)
		return err;
	for (i = 0; i < prof->nsamples; i++) {
		const struct prof_sample *smp = &prof->samples[i];
		struct put_ent *e;

		if (!smp->count)
			continue;
		err = array_grow((void **)&s->put.seq, &s->put.cap_seq, s->put.nseq + smp->nlocs,
				 sizeof(*s->put.seq));
		if (err)
			return err;
		e = &s->put.ents[s->put.nents++];
		e->h = h;
		e->win = win;
		e->off = s->put.nseq;
		e->n = smp->nlocs;
		e->count = smp->count;
		for (j = 0; j < smp->nlocs; j++)
			s->put.seq[s->put.nseq++] = s->put.locfunc[smp->locs[smp->nlocs - 1 - j]];
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
 * memo) and only the rest of the trie is walked. Then gathers each window's
 * (node, count) pairs, sorted and summed, into s->put.pairs. */
static int put_stacks(struct sqlite_store *s, size_t nwins)
{
	uint32_t d, src = 0;
	size_t i, na = 0, k;
	int err;

	qsort_r(s->put.ents, s->put.nents, sizeof(*s->put.ents), cmp_ent, s->put.seq);
	err = array_grow((void **)&s->put.act, &s->put.cap_act, s->put.nents, sizeof(*s->put.act));
	if (err)
		return err;
	for (i = 0; i < s->put.nents; i++) {
		struct put_ent *e = &s->put.ents[i], *prev = i ? e - 1 : NULL;
		uint32_t n = 0;

		/* The prefix shared with the previous entry (same hour only:
		 * the walk raises each node's last_h to the entry's hour). */
		if (prev && prev->h == e->h)
			while (n < e->n && n < prev->n &&
			       s->put.seq[e->off + n] == s->put.seq[prev->off + n])
				n++;
		e->lcp = n;
		e->node = 0;
		if (prev && same_as_prev(e))
			continue;
		if (e->n)
			s->put.act[na++] = (struct put_act){.ent = (uint32_t)i, .src = src};
		src = (uint32_t)i;
	}
	/* Level by level over the entries still walking: the lookups of one
	 * depth do not depend on each other, so their slots are all fetched
	 * before any is used. Within the shared prefix an entry copies the
	 * node of the last walked entry before it (the same path so far). */
	for (d = 0; na; d++) {
		for (k = 0; k < na; k++) {
			const struct put_ent *e = &s->put.ents[s->put.act[k].ent];

			if (d >= e->lcp)
				dict__child_prefetch(&s->dict, e->node, s->put.seq[e->off + d]);
		}
		for (i = k = 0; k < na; k++) {
			struct put_ent *e = &s->put.ents[s->put.act[k].ent];

			if (d < e->lcp) {
				e->node = s->put.ents[s->put.act[k].src]
						  .node; /* at depth d already */
			} else {
				err = dict__child(&s->dict, e->node, s->put.seq[e->off + d], e->h,
						  &e->node, &s->undo);
				if (err)
					return err;
			}
			if (e->n > d + 1)
				s->put.act[i++] = s->put.act[k];
		}
		na = i;
	}
	for (i = 1; i < s->put.nents; i++)
		if (same_as_prev(&s->put.ents[i]))
			s->put.ents[i].node = s->put.ents[i - 1].node;

	/* Pairs by window: count, place, then sort and sum each window's. */
	err = array_grow((void **)&s->put.pairs, &s->put.cap_pairs, s->put.nents,
			 sizeof(*s->put.pairs));
	if (err)
		return err;
	for (i = 0; i < nwins; i++)
		s->put.wins[i].n = 0;
	for (i = 0; i < s->put.nents; i++)
		s->put.wins[s->put.ents[i].win].n++;
	for (i = 0, s->put.npairs = 0; i < nwins; i++) {
		s->put.wins[i].off = s->put.npairs;
		s->put.npairs += s->put.wins[i].n;
		s->put.wins[i].n = 0;
	}
	for (i = 0; i < s->put.nents; i++) {
		struct put_win *pw = &s->put.wins[s->put.ents[i].win];
		struct store_pair *p = &s->put.pairs[pw->off + pw->n++];

		p->id = s->put.ents[i].node;
		p->value = s->put.ents[i].count;
	}
	for (i = 0; i < nwins; i++) {
		struct put_win *pw = &s->put.wins[i];
		long m = merge_pairs(s->put.pairs + pw->off, pw->n, &pw->total);

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
	sqlite3_stmt *st = s->st[W_INS_WINDOW];
	size_t i, j, nseries = 0, nsamples = 0;
	int err;

	s->put.dirbuf.len = s->put.databuf.len = 0;
	err = array_grow((void **)&s->put.dirents, &s->put.cap_dirents, n, sizeof(*s->put.dirents));
	if (err)
		return err;
	for (i = 0; i < n; i = j) {
		const struct store_pair *pairs = s->put.pairs + wins[i].off;
		size_t np = wins[i].n, before = s->put.databuf.len;
		int64_t total = wins[i].total;

		for (j = i + 1; j < n && wins[j].series == wins[i].series; j++)
			;
		if (j > i + 1) { /* the same series twice: merge */
			size_t k, m = 0;
			long r;

			for (k = i; k < j; k++)
				m += wins[k].n;
			err = array_grow((void **)&s->put.merge, &s->put.cap_merge, m,
					 sizeof(*s->put.merge));
			if (err)
				return err;
			for (m = 0, k = i; k < j; k++) {
				memcpy(s->put.merge + m, s->put.pairs + wins[k].off,
				       wins[k].n * sizeof(*s->put.merge));
				m += wins[k].n;
			}
			r = merge_pairs(s->put.merge, m, &total);
			if (r < 0)
				return (int)r;
			pairs = s->put.merge;
			np = (size_t)r;
		}
		err = codec_put_pairs(&s->put.databuf, pairs, np);
		if (err)
			return err;
		s->put.dirents[nseries++] = (struct codec_dir_ent){
			.sid = wins[i].series, .len = s->put.databuf.len - before, .total = total};
		nsamples += np;
	}
	err = codec_put_dir(&s->put.dirbuf, s->put.dirents, nseries);
	if (err)
		return err;

	sqlite3_bind_int64(st, 1, wins[0].start);
	sqlite3_bind_int64(st, 2, wins[0].end);
	sqlite3_bind_int64(st, 3, wins[0].unit);
	sqlite3_bind_int64(st, 4, (int64_t)nseries);
	sqlite3_bind_int64(st, 5, (int64_t)nsamples);
	sqlite3_bind_blob(st, 6, s->put.dirbuf.p, (int)s->put.dirbuf.len, SQLITE_STATIC);
	sqlite3_bind_blob(st, 7, s->put.databuf.p, (int)s->put.databuf.len, SQLITE_STATIC);
	err = step_done(s->db, st, "write a profile window");
	*nwindows += nseries;
	*nsamples_out += nsamples;
	return err;
}

/* Writes the dictionary rows a put or expire added or changed (s->undo). */
static int write_dict(struct sqlite_store *s)
{
	const struct dict *d = &s->dict;
	const struct dict_undo *u = &s->undo;
	sqlite3_stmt *st;
	size_t i;
	int err = 0;

	for (i = 0; !err && i < u->nfuncs; i++) {
		const struct func_ent *f = &d->funcs[u->funcs[i]];

		st = s->st[W_INS_FUNC];
		sqlite3_bind_int64(st, 1, u->funcs[i]);
		sqlite3_bind_text(st, 2, f->name, -1, SQLITE_STATIC);
		sqlite3_bind_text(st, 3, f->module, -1, SQLITE_STATIC);
		sqlite3_bind_int(st, 4, f->kernel);
		err = step_done(s->db, st, "write a function name");
	}
	for (i = 0; !err && i < u->nnodes; i++) {
		const struct node_ent *n = &d->nodes[u->nodes[i]];

		st = s->st[W_INS_NODE];
		sqlite3_bind_int64(st, 1, u->nodes[i]);
		sqlite3_bind_int64(st, 2, n->parent);
		sqlite3_bind_int64(st, 3, n->func);
		sqlite3_bind_int64(st, 4, n->last_h);
		err = step_done(s->db, st, "write a stack");
	}
	for (i = 0; !err && i < u->nnode_last; i++) {
		uint32_t id = u->node_last[i].id;

		st = s->st[W_UPD_NODE];
		sqlite3_bind_int64(st, 1, id);
		sqlite3_bind_int64(st, 2, d->nodes[id].last_h);
		err = step_done(s->db, st, "update a stack");
	}
	for (i = 0; !err && i < u->nseries; i++) {
		const struct series_ent *e = &d->series[u->series[i]];

		st = s->st[W_INS_SERIES];
		sqlite3_bind_int64(st, 1, u->series[i]);
		sqlite3_bind_blob(st, 2, e->ls.key, (int)e->ls.len, SQLITE_STATIC);
		sqlite3_bind_int64(st, 3, e->last_h);
		err = step_done(s->db, st, "write a series");
	}
	for (i = 0; !err && i < u->nseries_last; i++) {
		uint32_t id = u->series_last[i].id;

		st = s->st[W_UPD_SERIES];
		sqlite3_bind_int64(st, 1, id);
		sqlite3_bind_int64(st, 2, d->series[id].last_h);
		err = step_done(s->db, st, "update a series");
	}
	for (i = 0; !err && i < u->npseries; i++) {
		const struct series_ent *e = &d->pseries[u->pseries[i]];

		st = s->st[W_INS_PSERIES];
		sqlite3_bind_int64(st, 1, u->pseries[i]);
		sqlite3_bind_text(st, 2, e->name, -1, SQLITE_STATIC);
		sqlite3_bind_blob(st, 3, e->ls.key, (int)e->ls.len, SQLITE_STATIC);
		err = step_done(s->db, st, "write a metric series");
	}
	for (i = 0; !err && i < u->nunits; i++) {
		const struct unit_ent *e = &d->units[u->units[i]];

		st = s->st[W_INS_UNIT];
		sqlite3_bind_int64(st, 1, u->units[i]);
		sqlite3_bind_text(st, 2, e->unit, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 3, e->period);
		err = step_done(s->db, st, "write a unit");
	}
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
static int finish(struct sqlite_store *s, int err)
{
	if (!err)
		err = step_done(s->db, s->st[W_COMMIT], "commit");
	if (err) {
		if (!sqlite3_get_autocommit(s->db))
			step_done(s->db, s->st[W_ROLLBACK], "roll back");
		pthread_rwlock_wrlock(&s->dict_lock);
		dict__undo(&s->dict, &s->undo);
		pthread_rwlock_unlock(&s->dict_lock);
	} else {
		dict__undo_clear(&s->undo);
	}
	return err;
}

static int check_window(const struct store_window *w, size_t i)
{
	char err[256];
	size_t k;

	if (store_check_labels(w->labels, w->nlabels, err, sizeof(err))) {
		pr_debug("store: window %zu: %s", i, err);
		return -EINVAL;
	}
	for (k = 0; k < w->nlabels; k++)
		if (!strcmp(w->labels[k].name, "type") && *w->labels[k].value)
			break;
	if (k == w->nlabels) {
		pr_debug("store: window %zu has no \"type\" label", i);
		return -EINVAL;
	}
	if (w->start_ms < 0 || w->start_ms >= w->end_ms || !w->prof) {
		pr_debug("store: window %zu: bad range [%" PRId64 ", %" PRId64 ") or no profile", i,
			 w->start_ms, w->end_ms);
		return -EINVAL;
	}
	return 0;
}

int sqlite_store__put_windows(struct store *base, const struct store_window *w, size_t n)
{
	struct sqlite_store *s = sqlite_store(base);
	struct labelset ls = {0};
	int64_t maxlen = atomic_load(&s->max_window_ms);
	uint64_t nwindows = 0, nsamples = 0;
	size_t i, j, nw = 0;
	int err = 0;

	if (n && !w)
		return -EINVAL;
	if (n && w[0].key && strlen(w[0].key) > STORE_MAX_PUT_KEY)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		err = check_window(&w[i], i);
		if (err)
			return err;
	}
	if (!n)
		return 0;

	pthread_mutex_lock(&s->write_lock);
	s->put.npairs = s->put.nents = s->put.nseq = 0;
	err = array_grow((void **)&s->put.wins, &s->put.cap_wins, n, sizeof(*s->put.wins));
	if (!err)
		err = step_done(s->db, s->st[W_BEGIN], "begin a transaction");
	if (err) {
		pthread_mutex_unlock(&s->write_lock);
		return err;
	}
	if (w[0].key) {
		/* A keyed put stored before (a retry whose answer was lost):
		 * nothing to write. The key commits with the windows. */
		sqlite3_stmt *st = s->st[W_INS_KEY];
		int64_t end = w[0].end_ms;

		for (i = 1; i < n; i++)
			if (w[i].end_ms > end)
				end = w[i].end_ms;
		sqlite3_bind_text(st, 1, w[0].key, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 2, end);
		err = step_done(s->db, st, "record the put's key");
		if (!err && sqlite3_changes(s->db) == 0) {
			step_done(s->db, s->st[W_ROLLBACK], "roll back");
			pthread_mutex_unlock(&s->write_lock);
			return 1;
		}
		if (err) {
			finish(s, err);
			pthread_mutex_unlock(&s->write_lock);
			return err;
		}
	}

	pthread_rwlock_wrlock(&s->dict_lock);
	for (i = 0; !err && i < n; i++) {
		const struct profile *prof = w[i].prof;
		struct put_win *pw = &s->put.wins[i];

		err = labelset__encode(&ls, w[i].labels, w[i].nlabels, NULL, 0);
		if (err)
			break;
		pw->start = w[i].start_ms;
		pw->end = w[i].end_ms;
		err = dict__series(&s->dict, &ls, hour_after(w[i].end_ms), &pw->series, &s->undo);
		labelset__free(&ls);
		if (!err)
			err = dict__unit(&s->dict, prof->unit ? prof->unit : "", prof->period,
					 &pw->unit, &s->undo);
		if (!err)
			err = take_window(s, prof, (uint32_t)i, hour_after(w[i].end_ms));
	}
	if (!err)
		err = put_stacks(s, n);
	pthread_rwlock_unlock(&s->dict_lock);

	if (!err) {
		/* Windows left with no sample store nothing. */
		for (i = 0; i < n; i++) {
			if (!s->put.wins[i].n)
				continue;
			if (s->put.wins[i].end - s->put.wins[i].start > maxlen)
				maxlen = s->put.wins[i].end - s->put.wins[i].start;
			s->put.wins[nw++] = s->put.wins[i];
		}
		qsort(s->put.wins, nw, sizeof(*s->put.wins), cmp_win);
		for (i = 0; !err && i < nw; i = j) {
			for (j = i + 1; j < nw && s->put.wins[j].start == s->put.wins[i].start &&
					s->put.wins[j].end == s->put.wins[i].end &&
					s->put.wins[j].unit == s->put.wins[i].unit;
			     j++)
				;
			err = write_row(s, s->put.wins + i, j - i, &nwindows, &nsamples);
		}
	}
	if (!err)
		err = write_dict(s);
	if (!err && maxlen > atomic_load(&s->max_window_ms)) {
		/* Readers use it to bound their scans: raise it before the
		 * rows become visible. */
		err = set_max_window(s, maxlen);
		if (!err)
			atomic_store(&s->max_window_ms, maxlen);
	}
	err = finish(s, err);
	if (!err) {
		atomic_fetch_add(&s->nwindows, nwindows);
		atomic_fetch_add(&s->nsamples, nsamples);
	}
	pthread_mutex_unlock(&s->write_lock);
	if (err)
		pr_debug("store: put of %zu windows failed: %s", n, strerror(-err));
	return err;
}

/* ---- put_points ---- */

int sqlite_store__put_points(struct store *base, const struct store_point *p, size_t n)
{
	struct sqlite_store *s = sqlite_store(base);
	struct labelset ls = {0};
	uint32_t *ids = NULL;
	uint64_t added = 0;
	char msg[256];
	size_t i;
	int err = 0;

	if (n && !p)
		return -EINVAL;
	for (i = 0; i < n; i++) {
		if (!metric_name_valid(p[i].name)) {
			pr_debug("store: point %zu: bad metric name", i);
			return -EINVAL;
		}
		if (store_check_labels(p[i].labels, p[i].nlabels, msg, sizeof(msg))) {
			pr_debug("store: point %zu: %s", i, msg);
			return -EINVAL;
		}
	}
	if (!n)
		return 0;
	ids = malloc(n * sizeof(*ids));
	if (!ids)
		return -ENOMEM;

	pthread_mutex_lock(&s->write_lock);
	err = step_done(s->db, s->st[W_BEGIN], "begin a transaction");
	if (err)
		goto unlock;
	pthread_rwlock_wrlock(&s->dict_lock);
	for (i = 0; !err && i < n; i++) {
		err = labelset__encode(&ls, p[i].labels, p[i].nlabels, NULL, 0);
		if (!err)
			err = dict__pseries(&s->dict, p[i].name, &ls, &ids[i], &s->undo);
		labelset__free(&ls);
	}
	pthread_rwlock_unlock(&s->dict_lock);

	for (i = 0; !err && i < n; i++) {
		sqlite3_stmt *st = s->st[W_INS_POINT];

		sqlite3_bind_int64(st, 1, ids[i]);
		sqlite3_bind_int64(st, 2, p[i].ts_ms);
		sqlite3_bind_double(st, 3, p[i].value); /* NaN is stored as NULL */
		err = step_done(s->db, st, "write a metric point");
		if (err)
			break;
		if (sqlite3_changes(s->db)) {
			added++;
			continue;
		}
		st = s->st[W_UPD_POINT]; /* the same series and time: the new value wins */
		sqlite3_bind_int64(st, 1, ids[i]);
		sqlite3_bind_int64(st, 2, p[i].ts_ms);
		sqlite3_bind_double(st, 3, p[i].value);
		err = step_done(s->db, st, "write a metric point");
	}
	if (!err)
		err = write_dict(s);
	err = finish(s, err);
	if (!err)
		atomic_fetch_add(&s->npoints, added);
unlock:
	pthread_mutex_unlock(&s->write_lock);
	free(ids);
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
