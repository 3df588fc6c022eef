/* sqlite.c: the embedded store behind `sonde server` and `sonde run` -- one
 * SQLite database, DIR/sonde.db, in WAL mode, implementing store.h.
 *
 * Layout. Function names, the trie of stacks (a node is a frame called from
 * its parent node; a stack is its leaf node), series (canonical label sets),
 * metric series and units are rows stored once, mirrored in memory by
 * dict.c. Profile windows are stored by time: the windows of one put that
 * share [start, end) and unit become one row, whose `dir` lists its series
 * (delta-coded ids, each with the byte length and value total of its part)
 * and whose `data` holds, per series, the (stack id, value) pairs sorted by
 * id as varints: the id's delta from the one before, shifted left by one,
 * its low bit set when the value is 1 (most are), else followed by the
 * value. A sample costs a few bytes, a window of one series a few more. Reads scan the rows overlapping a range through an
 * index on (start_ms, end_ms), pick the series that match from `dir`, and
 * sum values per stack id in an array; frames come from memory. Points are
 * rows of (metric series, ts_ms, value).
 *
 * Durability. Each put is one transaction, committed with synchronous=FULL:
 * the WAL is fsync()ed before the call returns, so an acknowledged put
 * survives kill -9 and power loss. One process owns a store (flock on
 * DIR/sonde.lock), since the dictionaries assume they see every write.
 *
 * Concurrency. Writes (puts, expire) take a mutex and use one connection;
 * reads use a pool of read-only connections, each reading a WAL snapshot,
 * so a long select never holds up ingest (docs/perf.md measures both). The
 * dictionaries are guarded by a rwlock held briefly. Expiry deletes rows and
 * "kills" dictionary entries; their ids are reused only once no read that
 * could still see the deleted rows is running (gc_lock). */
#include "store/store.h"
#include "common/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "profile/profile.h"
#include "store/store_internal.h"

#define SCHEMA_VERSION 1
#define SONDE_APP_ID 1399811684 /* 0x536f6e64, "Sond" */
#define DB_NAME "sonde.db"
#define LOCK_NAME "sonde.lock"

/* Work per expire call: enough for a busy node's minute many times over,
 * small enough to take well under a second. (The unit test shrinks them.) */
#ifndef EXPIRE_MAX_ROWS
#define EXPIRE_MAX_ROWS 2000
#endif
#ifndef EXPIRE_MAX_POINTS
#define EXPIRE_MAX_POINTS 100000
#endif
#ifndef EXPIRE_MAX_NODES
#define EXPIRE_MAX_NODES 50000
#endif
#define VACUUM_MIN_FREE 2048 /* free pages before giving any back */
#define VACUUM_PAGES 1024    /* at most per call */

#define MAX_READERS 8

#define STR_(x) #x
#define STR(x) STR_(x)

/* The keys of keyed puts (store_window.key), kept as long as the data: a
 * table a store of schema 1 gains at open, which an older Sonde ignores. */
#define PUT_KEYS_SQL                                                                               \
	"CREATE TABLE IF NOT EXISTS put_keys(key TEXT PRIMARY KEY, ts_ms INTEGER NOT NULL)"        \
	" WITHOUT ROWID;"

static const char schema_sql[] =
	"CREATE TABLE meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
	"CREATE TABLE functions(id INTEGER PRIMARY KEY, name TEXT NOT NULL,"
	" module TEXT NOT NULL, kernel INTEGER NOT NULL);"
	"CREATE TABLE stacks(id INTEGER PRIMARY KEY, parent INTEGER NOT NULL,"
	" func INTEGER NOT NULL, last_h INTEGER NOT NULL);"
	"CREATE TABLE series(id INTEGER PRIMARY KEY, labels BLOB NOT NULL,"
	" last_h INTEGER NOT NULL);"
	"CREATE TABLE units(id INTEGER PRIMARY KEY, unit TEXT NOT NULL, period INTEGER NOT NULL);"
	"CREATE TABLE windows(id INTEGER PRIMARY KEY, start_ms INTEGER NOT NULL,"
	" end_ms INTEGER NOT NULL, unit INTEGER NOT NULL, nwindows INTEGER NOT NULL,"
	" nsamples INTEGER NOT NULL, dir BLOB NOT NULL, data BLOB NOT NULL);"
	"CREATE INDEX windows_time ON windows(start_ms, end_ms);"
	"CREATE TABLE pseries(id INTEGER PRIMARY KEY, name TEXT NOT NULL, labels BLOB NOT NULL);"
	"CREATE TABLE points(pseries INTEGER NOT NULL, ts_ms INTEGER NOT NULL, value REAL,"
	" PRIMARY KEY(pseries, ts_ms)) WITHOUT ROWID;" PUT_KEYS_SQL;

/* The writer's statements. */
enum {
	W_BEGIN,
	W_COMMIT,
	W_ROLLBACK,
	W_INS_FUNC,
	W_INS_NODE,
	W_UPD_NODE,
	W_INS_SERIES,
	W_UPD_SERIES,
	W_INS_UNIT,
	W_INS_WINDOW,
	W_SET_META,
	W_INS_PSERIES,
	W_INS_POINT,
	W_UPD_POINT,
	W_OLD_WINDOWS,
	W_DEL_WINDOW,
	W_DEL_POINTS,
	W_HAS_POINTS,
	W_DEL_PSERIES,
	W_DEL_SERIES,
	W_DEL_NODE,
	W_DEL_FUNC,
	W_INS_KEY,
	W_DEL_KEYS,
	W_COUNT
};

static const char *const writer_sql[W_COUNT] = {
	[W_BEGIN] = "BEGIN IMMEDIATE",
	[W_COMMIT] = "COMMIT",
	[W_ROLLBACK] = "ROLLBACK",
	[W_INS_FUNC] = "INSERT INTO functions(id, name, module, kernel) VALUES(?1, ?2, ?3, ?4)",
	[W_INS_NODE] = "INSERT INTO stacks(id, parent, func, last_h) VALUES(?1, ?2, ?3, ?4)",
	[W_UPD_NODE] = "UPDATE stacks SET last_h = ?2 WHERE id = ?1",
	[W_INS_SERIES] = "INSERT INTO series(id, labels, last_h) VALUES(?1, ?2, ?3)",
	[W_UPD_SERIES] = "UPDATE series SET last_h = ?2 WHERE id = ?1",
	[W_INS_UNIT] = "INSERT INTO units(id, unit, period) VALUES(?1, ?2, ?3)",
	[W_INS_KEY] = "INSERT OR IGNORE INTO put_keys(key, ts_ms) VALUES(?1, ?2)",
	[W_DEL_KEYS] = "DELETE FROM put_keys WHERE ts_ms < ?1",
	[W_INS_WINDOW] =
		"INSERT INTO windows(start_ms, end_ms, unit, nwindows, nsamples, dir, data)"
		" VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
	[W_SET_META] = "INSERT OR REPLACE INTO meta(key, value) VALUES(?1, ?2)",
	[W_INS_PSERIES] = "INSERT INTO pseries(id, name, labels) VALUES(?1, ?2, ?3)",
	[W_INS_POINT] = "INSERT OR IGNORE INTO points(pseries, ts_ms, value) VALUES(?1, ?2, ?3)",
	[W_UPD_POINT] = "UPDATE points SET value = ?3 WHERE pseries = ?1 AND ts_ms = ?2",
	[W_OLD_WINDOWS] = "SELECT id, nwindows, nsamples FROM windows"
			  " WHERE start_ms < ?1 AND end_ms <= ?1 LIMIT ?2",
	[W_DEL_WINDOW] = "DELETE FROM windows WHERE id = ?1",
	/* At most ?3 points: those before the ?3-th oldest one before ?2. */
	[W_DEL_POINTS] = "DELETE FROM points WHERE pseries = ?1 AND ts_ms < coalesce((SELECT ts_ms"
			 " FROM points WHERE pseries = ?1 AND ts_ms < ?2 ORDER BY ts_ms"
			 " LIMIT 1 OFFSET ?3), ?2)",
	[W_HAS_POINTS] = "SELECT 1 FROM points WHERE pseries = ?1 LIMIT 1",
	[W_DEL_PSERIES] = "DELETE FROM pseries WHERE id = ?1",
	[W_DEL_SERIES] = "DELETE FROM series WHERE id = ?1",
	[W_DEL_NODE] = "DELETE FROM stacks WHERE id = ?1",
	[W_DEL_FUNC] = "DELETE FROM functions WHERE id = ?1",
};

/* A reader's statements. */
enum { R_BEGIN, R_COMMIT, R_SNAP, R_WINDOWS, R_DIRS, R_POINTS, R_COUNT };

static const char *const reader_sql[R_COUNT] = {
	[R_BEGIN] = "BEGIN",
	[R_COMMIT] = "COMMIT",
	[R_SNAP] = "SELECT count(*) FROM meta",
	/* ?1 until, ?2 from minus the longest window, ?3 from */
	[R_WINDOWS] = "SELECT start_ms, end_ms, unit, dir, data FROM windows"
		      " WHERE start_ms < ?1 AND start_ms > ?2 AND end_ms > ?3 ORDER BY start_ms",
	/* length() of a blob reads its size, not its bytes */
	[R_DIRS] = "SELECT start_ms, end_ms, unit, dir, length(data) FROM windows"
		   " WHERE start_ms < ?1 AND start_ms > ?2 AND end_ms > ?3 ORDER BY start_ms",
	[R_POINTS] = "SELECT ts_ms, value FROM points WHERE pseries = ?1 AND ts_ms >= ?2"
		     " AND ts_ms < ?3 ORDER BY ts_ms",
};

struct reader {
	struct reader *next;
	sqlite3 *db;
	sqlite3_stmt *st[R_COUNT];
	/* A select's sums by stack id, kept zeroed between selects: a fresh
	 * array per select would cost a page fault per 4 KiB. */
	int64_t *counts;
	size_t ncounts;
};

/* A window of a put, resolved. */
struct put_win {
	int64_t start, end, total;
	uint32_t series, unit;
	size_t off, n; /* its pairs in sqlite_store.pairs */
};

/* An entry still walking the trie, and the walked entry before it. */
struct put_act {
	uint32_t ent, src;
};

/* A counted sample of a put, its stack in sqlite_store.seq. */
struct put_ent {
	uint32_t h, win; /* hour its window ends by, index in sqlite_store.wins */
	uint32_t off, n; /* function ids, root first */
	uint32_t lcp;	 /* ids shared with the entry before, once sorted */
	uint32_t node;	 /* its stack, once resolved */
	int64_t count;
};

struct sqlite_store {
	struct store base;
	char *dir, *path;
	int lock_fd;

	sqlite3 *db; /* the writer */
	sqlite3_stmt *st[W_COUNT];
	pthread_mutex_t write_lock; /* the writer and everything below it */

	pthread_rwlock_t dict_lock; /* dict */
	struct dict dict;
	/* Held shared by every read for its whole length; expire frees killed
	 * ids only when it can take it exclusively (see dict__flush). */
	pthread_rwlock_t gc_lock;

	pthread_mutex_t pool_lock;
	pthread_cond_t pool_cond;
	struct reader *idle;
	unsigned int nreaders, max_readers;

	_Atomic int64_t max_window_ms;
	_Atomic uint64_t nwindows, nsamples, npoints;

	/* Writer scratch (write_lock). */
	struct dict_undo undo;
	struct put_win *wins;
	size_t cap_wins;
	struct store_pair *pairs, *merge;
	size_t npairs, cap_pairs, cap_merge;
	uint32_t *locfunc, *locmod; /* by location of the window in hand */
	uint64_t *lochash;
	uint32_t *strrep; /* by string of the window in hand */
	size_t cap_locfunc, cap_locmod, cap_lochash, cap_strrep;
	struct put_ent *ents;
	struct put_act *act;
	size_t cap_act;
	uint32_t *seq;
	size_t nents, cap_ents, nseq, cap_seq;
	struct store_buf dirbuf, databuf;
	struct codec_dir_ent *dirents;
	size_t cap_dirents;
	uint32_t gc_hour; /* the hour of the last complete collection */
};

static inline struct sqlite_store *sqlite_store(struct store *s)
{
	return (struct sqlite_store *)s;
}

/* ---- errors ---- */

static int sql_errno(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_OK:
	case SQLITE_ROW:
	case SQLITE_DONE:
		return 0;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_READONLY:
	case SQLITE_PERM:
		return -EROFS;
	case SQLITE_TOOBIG:
		return -E2BIG;
	case SQLITE_CONSTRAINT:
		return -EEXIST;
	default:
		return -EIO;
	}
}

static const char *sql_hint(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_FULL:
		return " -- free space on the store's disk";
	case SQLITE_READONLY:
	case SQLITE_PERM:
	case SQLITE_CANTOPEN:
		return " -- check the permissions of the --data directory";
	case SQLITE_CORRUPT:
	case SQLITE_NOTADB:
		return " -- the store is damaged; move the --data directory away to start afresh";
	default:
		return "";
	}
}

/* Logs a failed SQLite call and returns the negative errno for it. */
static int sql_fail(sqlite3 *db, int rc, const char *what)
{
	pr_err("store: can't %s: %s%s", what, db ? sqlite3_errmsg(db) : sqlite3_errstr(rc),
	       sql_hint(rc));
	return sql_errno(rc);
}

/* Steps a statement that returns no rows and resets it. */
static int step_done(sqlite3 *db, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		return sql_fail(db, rc, what);
	return 0;
}

static int exec(sqlite3 *db, const char *sql, const char *what)
{
	int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);

	return rc == SQLITE_OK ? 0 : sql_fail(db, rc, what);
}

/* ---- hours ---- */

/* The first hour boundary at or after ms: windows ending at ms are before
 * hour_after(ms) * 1 h. */
static uint32_t hour_after(int64_t ms)
{
	int64_t h = (ms + DICT_HOUR_MS - 1) / DICT_HOUR_MS;

	return h > UINT32_MAX - 1 ? UINT32_MAX - 1 : (uint32_t)h;
}

/* Whether something last used before hour h is older than horizon. */
static bool dead_by(uint32_t last_h, int64_t horizon_ms)
{
	return (int64_t)last_h * DICT_HOUR_MS <= horizon_ms;
}

/* ---- put_windows ---- */

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

	err = array_grow((void **)&s->strrep, &s->cap_strrep, prof->nstrings, sizeof(*s->strrep));
	if (err)
		return err;
	memset(s->strrep, 0, prof->nstrings * sizeof(*s->strrep));
	memset(&mc, 0, sizeof(mc));
	for (li = 0; li < prof->nlocs; li++) {
		const struct prof_location *loc = &prof->locs[li];
		uint32_t rep;

		if (s->locfunc[li] != LOC_NEEDED)
			continue;
		err = loc_module(s, loc, prof, &mc, &s->locmod[li]);
		if (err)
			return err;
		/* strrep: the first location of this name, + 1 (0: none yet). */
		rep = loc->func < prof->nstrings ? s->strrep[loc->func] : 0;
		if (rep && s->locmod[rep - 1] == s->locmod[li]) {
			s->locfunc[li] = LOC_COPY | (rep - 1);
			continue;
		}
		if (!rep && loc->func < prof->nstrings)
			s->strrep[loc->func] = (uint32_t)li + 1;
		/* The profile hashed the name when it interned it. */
		s->lochash[li] =
			dict__func_hash_of(profile__str_info(prof, loc->func).hash, s->locmod[li]);
		dict__func_prefetch(&s->dict, s->lochash[li]);
	}
	for (li = 0; li < prof->nlocs; li++)
		if (s->locfunc[li] == LOC_NEEDED) {
			dict__func_prefetch2(&s->dict, s->lochash[li]);
			__builtin_prefetch(profile__str(prof, prof->locs[li].func));
		}
	for (li = 0; li < prof->nlocs; li++) {
		uint32_t fi = prof->locs[li].func;

		if (s->locfunc[li] != LOC_NEEDED)
			continue;
		err = dict__func(&s->dict, profile__str(prof, fi), profile__str_info(prof, fi).len,
				 s->locmod[li], s->lochash[li], &s->locfunc[li], &s->undo);
		if (err)
			return err;
	}
	/* Every LOC_NEEDED is resolved now (ids stay far below LOC_COPY); a
	 * copy's representative is never a copy itself. */
	for (li = 0; li < prof->nlocs; li++)
		if (s->locfunc[li] & LOC_COPY)
			s->locfunc[li] = s->locfunc[s->locfunc[li] & ~LOC_COPY];
	return 0;
}

/* Takes in one window: validates its samples, resolves the functions of
 * their frames, and appends one entry per counted sample (its stack as
 * function ids, root first, in s->seq) for put_stacks. dict_lock is held. */
static int take_window(struct sqlite_store *s, const struct profile *prof, uint32_t win, uint32_t h)
{
	size_t i, j;
	int err;

	err = array_grow((void **)&s->locfunc, &s->cap_locfunc, prof->nlocs, sizeof(*s->locfunc));
	if (!err)
		err = array_grow((void **)&s->locmod, &s->cap_locmod, prof->nlocs,
				 sizeof(*s->locmod));
	if (!err)
		err = array_grow((void **)&s->lochash, &s->cap_lochash, prof->nlocs,
				 sizeof(*s->lochash));
	if (!err)
		err = array_grow((void **)&s->ents, &s->cap_ents, s->nents + prof->nsamples,
				 sizeof(*s->ents));
	if (err)
		return err;
	memset(s->locfunc, 0, prof->nlocs * sizeof(*s->locfunc));
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
				s->locfunc[smp->locs[j]] = LOC_NEEDED;
	}
	err = resolve_funcs(s, prof);
	if (err)
		return err;
	for (i = 0; i < prof->nsamples; i++) {
		const struct prof_sample *smp = &prof->samples[i];
		struct put_ent *e;

		if (!smp->count)
			continue;
		err = array_grow((void **)&s->seq, &s->cap_seq, s->nseq + smp->nlocs,
				 sizeof(*s->seq));
		if (err)
			return err;
		e = &s->ents[s->nents++];
		e->h = h;
		e->win = win;
		e->off = s->nseq;
		e->n = smp->nlocs;
		e->count = smp->count;
		for (j = 0; j < smp->nlocs; j++)
			s->seq[s->nseq++] = s->locfunc[smp->locs[smp->nlocs - 1 - j]];
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
 * (node, count) pairs, sorted and summed, into s->pairs. */
static int put_stacks(struct sqlite_store *s, size_t nwins)
{
	uint32_t d, src = 0;
	size_t i, na = 0, k;
	int err;

	qsort_r(s->ents, s->nents, sizeof(*s->ents), cmp_ent, s->seq);
	err = array_grow((void **)&s->act, &s->cap_act, s->nents, sizeof(*s->act));
	if (err)
		return err;
	for (i = 0; i < s->nents; i++) {
		struct put_ent *e = &s->ents[i], *prev = i ? e - 1 : NULL;
		uint32_t n = 0;

		/* The prefix shared with the previous entry (same hour only:
		 * the walk raises each node's last_h to the entry's hour). */
		if (prev && prev->h == e->h)
			while (n < e->n && n < prev->n &&
			       s->seq[e->off + n] == s->seq[prev->off + n])
				n++;
		e->lcp = n;
		e->node = 0;
		if (prev && same_as_prev(e))
			continue;
		if (e->n)
			s->act[na++] = (struct put_act){.ent = (uint32_t)i, .src = src};
		src = (uint32_t)i;
	}
	/* Level by level over the entries still walking: the lookups of one
	 * depth do not depend on each other, so their slots are all fetched
	 * before any is used. Within the shared prefix an entry copies the
	 * node of the last walked entry before it (the same path so far). */
	for (d = 0; na; d++) {
		for (k = 0; k < na; k++) {
			const struct put_ent *e = &s->ents[s->act[k].ent];

			if (d >= e->lcp)
				dict__child_prefetch(&s->dict, e->node, s->seq[e->off + d]);
		}
		for (i = k = 0; k < na; k++) {
			struct put_ent *e = &s->ents[s->act[k].ent];

			if (d < e->lcp) {
				e->node = s->ents[s->act[k].src].node; /* at depth d already */
			} else {
				err = dict__child(&s->dict, e->node, s->seq[e->off + d], e->h,
						  &e->node, &s->undo);
				if (err)
					return err;
			}
			if (e->n > d + 1)
				s->act[i++] = s->act[k];
		}
		na = i;
	}
	for (i = 1; i < s->nents; i++)
		if (same_as_prev(&s->ents[i]))
			s->ents[i].node = s->ents[i - 1].node;

	/* Pairs by window: count, place, then sort and sum each window's. */
	err = array_grow((void **)&s->pairs, &s->cap_pairs, s->nents, sizeof(*s->pairs));
	if (err)
		return err;
	for (i = 0; i < nwins; i++)
		s->wins[i].n = 0;
	for (i = 0; i < s->nents; i++)
		s->wins[s->ents[i].win].n++;
	for (i = 0, s->npairs = 0; i < nwins; i++) {
		s->wins[i].off = s->npairs;
		s->npairs += s->wins[i].n;
		s->wins[i].n = 0;
	}
	for (i = 0; i < s->nents; i++) {
		struct put_win *pw = &s->wins[s->ents[i].win];
		struct store_pair *p = &s->pairs[pw->off + pw->n++];

		p->id = s->ents[i].node;
		p->value = s->ents[i].count;
	}
	for (i = 0; i < nwins; i++) {
		struct put_win *pw = &s->wins[i];
		long m = merge_pairs(s->pairs + pw->off, pw->n, &pw->total);

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

	s->dirbuf.len = s->databuf.len = 0;
	err = array_grow((void **)&s->dirents, &s->cap_dirents, n, sizeof(*s->dirents));
	if (err)
		return err;
	for (i = 0; i < n; i = j) {
		const struct store_pair *pairs = s->pairs + wins[i].off;
		size_t np = wins[i].n, before = s->databuf.len;
		int64_t total = wins[i].total;

		for (j = i + 1; j < n && wins[j].series == wins[i].series; j++)
			;
		if (j > i + 1) { /* the same series twice: merge */
			size_t k, m = 0;
			long r;

			for (k = i; k < j; k++)
				m += wins[k].n;
			err = array_grow((void **)&s->merge, &s->cap_merge, m, sizeof(*s->merge));
			if (err)
				return err;
			for (m = 0, k = i; k < j; k++) {
				memcpy(s->merge + m, s->pairs + wins[k].off,
				       wins[k].n * sizeof(*s->merge));
				m += wins[k].n;
			}
			r = merge_pairs(s->merge, m, &total);
			if (r < 0)
				return (int)r;
			pairs = s->merge;
			np = (size_t)r;
		}
		err = codec_put_pairs(&s->databuf, pairs, np);
		if (err)
			return err;
		s->dirents[nseries++] = (struct codec_dir_ent){
			.sid = wins[i].series, .len = s->databuf.len - before, .total = total};
		nsamples += np;
	}
	err = codec_put_dir(&s->dirbuf, s->dirents, nseries);
	if (err)
		return err;

	sqlite3_bind_int64(st, 1, wins[0].start);
	sqlite3_bind_int64(st, 2, wins[0].end);
	sqlite3_bind_int64(st, 3, wins[0].unit);
	sqlite3_bind_int64(st, 4, (int64_t)nseries);
	sqlite3_bind_int64(st, 5, (int64_t)nsamples);
	sqlite3_bind_blob(st, 6, s->dirbuf.p, (int)s->dirbuf.len, SQLITE_STATIC);
	sqlite3_bind_blob(st, 7, s->databuf.p, (int)s->databuf.len, SQLITE_STATIC);
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

static int sqlite_put_windows(struct store *base, const struct store_window *w, size_t n)
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
	s->npairs = s->nents = s->nseq = 0;
	err = array_grow((void **)&s->wins, &s->cap_wins, n, sizeof(*s->wins));
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
		struct put_win *pw = &s->wins[i];

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
			if (!s->wins[i].n)
				continue;
			if (s->wins[i].end - s->wins[i].start > maxlen)
				maxlen = s->wins[i].end - s->wins[i].start;
			s->wins[nw++] = s->wins[i];
		}
		qsort(s->wins, nw, sizeof(*s->wins), cmp_win);
		for (i = 0; !err && i < nw; i = j) {
			for (j = i + 1;
			     j < nw && s->wins[j].start == s->wins[i].start &&
			     s->wins[j].end == s->wins[i].end && s->wins[j].unit == s->wins[i].unit;
			     j++)
				;
			err = write_row(s, s->wins + i, j - i, &nwindows, &nsamples);
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

static int sqlite_put_points(struct store *base, const struct store_point *p, size_t n)
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

/* ---- readers ---- */

static void reader_close(struct reader *r)
{
	int i;

	if (!r)
		return;
	for (i = 0; i < R_COUNT; i++)
		sqlite3_finalize(r->st[i]);
	sqlite3_close(r->db);
	free(r->counts);
	free(r);
}

static int apply_read_pragmas(sqlite3 *db)
{
	/* Reads map the database (no copy through a page cache of our own);
	 * the WAL, still read() through, stays small. */
	return exec(db,
		    "PRAGMA query_only = 1; PRAGMA mmap_size = 1073741824;"
		    " PRAGMA cache_size = -8192; PRAGMA busy_timeout = 10000;",
		    "set up a reader");
}

static struct reader *reader_open(struct sqlite_store *s, int *err)
{
	struct reader *r = calloc(1, sizeof(*r));
	int rc, i;

	if (!r) {
		*err = -ENOMEM;
		return NULL;
	}
	rc = sqlite3_open_v2(s->path, &r->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
	if (rc != SQLITE_OK) {
		*err = sql_fail(r->db, rc, "open a reader");
		goto fail;
	}
	*err = apply_read_pragmas(r->db);
	if (*err)
		goto fail;
	for (i = 0; i < R_COUNT; i++) {
		rc = sqlite3_prepare_v3(r->db, reader_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
					&r->st[i], NULL);
		if (rc != SQLITE_OK) {
			*err = sql_fail(r->db, rc, "prepare a query");
			goto fail;
		}
	}
	return r;
fail:
	reader_close(r);
	return NULL;
}

static struct reader *reader_get(struct sqlite_store *s, int *err)
{
	struct reader *r;

	pthread_mutex_lock(&s->pool_lock);
	while (!s->idle && s->nreaders >= s->max_readers)
		pthread_cond_wait(&s->pool_cond, &s->pool_lock);
	r = s->idle;
	if (r) {
		s->idle = r->next;
		pthread_mutex_unlock(&s->pool_lock);
		return r;
	}
	s->nreaders++;
	pthread_mutex_unlock(&s->pool_lock);

	r = reader_open(s, err);
	if (!r) {
		pthread_mutex_lock(&s->pool_lock);
		s->nreaders--;
		pthread_cond_signal(&s->pool_cond);
		pthread_mutex_unlock(&s->pool_lock);
	}
	return r;
}

static void reader_put(struct sqlite_store *s, struct reader *r)
{
	pthread_mutex_lock(&s->pool_lock);
	r->next = s->idle;
	s->idle = r;
	pthread_cond_signal(&s->pool_cond);
	pthread_mutex_unlock(&s->pool_lock);
}

/* One read: a reader connection holding a snapshot, the compiled matchers
 * and which series (by id) they select. */
struct read {
	struct sqlite_store *s;
	struct reader *r;
	struct matchset ms;
	uint8_t *match;
	size_t nmatch;
	int64_t from, until;
	bool gc_held, in_txn;
};

static void read_end(struct read *rd)
{
	struct sqlite_store *s = rd->s;

	if (rd->in_txn)
		step_done(rd->r->db, rd->r->st[R_COMMIT], "end a read");
	if (rd->r)
		reader_put(s, rd->r);
	if (rd->gc_held)
		pthread_rwlock_unlock(&s->gc_lock);
	matchset__free(&rd->ms);
	free(rd->match);
	memset(rd, 0, sizeof(*rd));
}

static int read_begin(struct sqlite_store *s, const struct store_query *q, struct read *rd)
{
	char msg[256];
	int err;

	memset(rd, 0, sizeof(*rd));
	rd->s = s;
	if (!q || q->from_ms >= q->until_ms)
		return -EINVAL;
	rd->from = q->from_ms;
	rd->until = q->until_ms;
	err = matchset__compile(&rd->ms, q->matchers, q->nmatchers, msg, sizeof(msg));
	if (err) {
		pr_debug("store: bad query: %s", msg);
		return err;
	}
	pthread_rwlock_rdlock(&s->gc_lock);
	rd->gc_held = true;
	rd->r = reader_get(s, &err);
	if (!rd->r)
		goto fail;
	err = step_done(rd->r->db, rd->r->st[R_BEGIN], "begin a read");
	if (err)
		goto fail;
	rd->in_txn = true;
	/* The snapshot starts with the first read: take it before looking at
	 * the dictionaries, so they hold every id the snapshot can show. */
	err = step_done(rd->r->db, rd->r->st[R_SNAP], "read the store");
	if (err)
		goto fail;
	return 0;
fail:
	read_end(rd);
	return err;
}

/* Marks the (profile or metric) series the matchers select. */
static int match_series(struct read *rd, bool metric, const char *name)
{
	struct sqlite_store *s = rd->s;
	const struct series_ent *arr;
	size_t i, n;

	pthread_rwlock_rdlock(&s->dict_lock);
	arr = metric ? s->dict.pseries : s->dict.series;
	n = metric ? s->dict.cap_pseries : s->dict.cap_series;
	rd->match = calloc(n ? n : 1, 1);
	if (!rd->match) {
		pthread_rwlock_unlock(&s->dict_lock);
		return -ENOMEM;
	}
	rd->nmatch = n;
	for (i = 1; i < n; i++) {
		if (arr[i].state == DICT_FREE || (name && strcmp(arr[i].name, name)))
			continue;
		rd->match[i] = matchset__match(&rd->ms, arr[i].ls.labels, arr[i].ls.n);
	}
	pthread_rwlock_unlock(&s->dict_lock);
	return 0;
}

static int corrupt(const char *what)
{
	pr_err("store: %s is damaged -- the store needs repair; move the --data directory away to"
	       " start afresh",
	       what);
	return -EIO;
}

/* Starts reading a row's dir (column 3) over its data (column 4: the blob
 * for R_WINDOWS, its length for R_DIRS). */
static int row_dir(sqlite3_stmt *st, bool with_data, struct codec_dir_iter *it)
{
	int64_t datalen = with_data ? sqlite3_column_bytes(st, 4) : sqlite3_column_int64(st, 4);

	if (codec_dir_begin(it, sqlite3_column_blob(st, 3), (size_t)sqlite3_column_bytes(st, 3),
			    datalen > 0 ? (size_t)datalen : 0))
		return corrupt("a window's directory");
	return 0;
}

static int row_next(struct read *rd, struct codec_dir_iter *it, struct codec_dir_ent *e)
{
	int rc = codec_dir_next(it, e);

	if (rc < 0 || (rc > 0 && e->sid >= rd->nmatch))
		return corrupt("a window's directory");
	return rc;
}

typedef int (*row_fn)(struct read *rd, sqlite3_stmt *st, void *ctx);

/* Calls fn for each row overlapping [from, until), in start order; with
 * their data or only its length. */
static int scan_rows(struct read *rd, bool with_data, row_fn fn, void *ctx)
{
	sqlite3_stmt *st = rd->r->st[with_data ? R_WINDOWS : R_DIRS];
	int64_t maxlen = atomic_load(&rd->s->max_window_ms), lo;
	int rc, err = 0;

	if (__builtin_sub_overflow(rd->from, maxlen, &lo))
		lo = INT64_MIN;
	sqlite3_bind_int64(st, 1, rd->until);
	sqlite3_bind_int64(st, 2, lo);
	sqlite3_bind_int64(st, 3, rd->from);
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW)
		err = fn(rd, st, ctx);
	if (!err && rc != SQLITE_DONE)
		err = sql_fail(rd->r->db, rc, "read windows");
	sqlite3_reset(st);
	return err;
}

/* ---- select ---- */

struct select_ctx {
	int64_t *counts; /* by stack id */
	size_t ncounts;
	uint32_t *touched; /* ids whose count became non-zero */
	size_t ntouched, cap_touched;
	uint32_t unit;
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
		if (__builtin_add_overflow(c->counts[id], v, &c->counts[id]))
			return -EOVERFLOW;
	}
	return rc < 0 ? corrupt("a window's data") : 0;
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
			if (!c->unit)
				c->unit = (uint32_t)sqlite3_column_int64(st, 2);
		}
		err = select_section(c, data + e.off, data + e.off + e.len);
	}
	return err ? err : rc;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
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

/* A function as a select needs it: names stay valid while the read holds
 * gc_lock, so they are copied out of the dictionary by pointer. */
struct fref {
	const char *name, *module;
	uint32_t loc; /* its location in the output, or UINT32_MAX */
	bool kernel, seen;
};

/* Copies each touched stack's function ids (leaf first) into c->frames and
 * the functions they name into refs, under dict_lock. */
static int copy_stacks(struct sqlite_store *s, struct select_ctx *c, struct fref **refs,
		       uint32_t **frames, size_t **offs, char *unit, size_t unitlen,
		       int64_t *period)
{
	const struct dict *d = &s->dict;
	size_t i, k, nframes = 0, cap = 0, nrefs;
	uint32_t buf[DICT_MAX_DEPTH];
	int err = 0;

	pthread_rwlock_rdlock(&s->dict_lock);
	nrefs = d->cap_funcs ? d->cap_funcs : 1;
	*refs = calloc(nrefs, sizeof(**refs));
	*offs = malloc((c->ntouched + 1) * sizeof(**offs));
	if (!*refs || !*offs)
		err = -ENOMEM;
	for (i = 0; !err && i < c->ntouched; i++) {
		int n = dict__frames(d, c->touched[i], buf, DICT_MAX_DEPTH);

		if (n < 0 || n > DICT_MAX_DEPTH) {
			err = corrupt("the stack table");
			break;
		}
		err = array_grow((void **)frames, &cap, nframes + (size_t)n, sizeof(**frames));
		if (err)
			break;
		(*offs)[i] = nframes;
		for (k = 0; k < (size_t)n; k++) {
			const struct func_ent *f;
			struct fref *r;

			if (buf[k] >= nrefs) {
				err = corrupt("the stack table");
				break;
			}
			f = &d->funcs[buf[k]];
			r = &(*refs)[buf[k]];
			if (!r->seen)
				*r = (struct fref){f->name, f->module, UINT32_MAX, f->kernel, true};
			(*frames)[nframes++] = buf[k];
		}
	}
	if (!err)
		(*offs)[c->ntouched] = nframes;
	copy_unit(d, c->unit, unit, unitlen, period);
	pthread_rwlock_unlock(&s->dict_lock);
	return err;
}

static int sqlite_select(struct store *base, const struct store_query *q, struct profile *out,
			 char *unit, size_t unitlen)
{
	struct sqlite_store *s = sqlite_store(base);
	struct select_ctx c = {0};
	struct fref *refs = NULL;
	uint32_t *frames = NULL, locs[DICT_MAX_DEPTH];
	size_t *offs = NULL, i, k;
	struct read rd;
	int64_t period = 0;
	int err;

	if (unit && unitlen)
		*unit = '\0';
	if (!out)
		return -EINVAL;
	err = read_begin(s, q, &rd);
	if (err)
		return err;
	err = match_series(&rd, false, NULL);
	if (err)
		goto cleanup;
	pthread_rwlock_rdlock(&s->dict_lock);
	c.ncounts = s->dict.cap_nodes ? s->dict.cap_nodes : 1;
	pthread_rwlock_unlock(&s->dict_lock);
	if (rd.r->ncounts < c.ncounts) {
		int64_t *p = realloc(rd.r->counts, c.ncounts * sizeof(*p));

		if (!p) {
			err = -ENOMEM;
			goto cleanup;
		}
		memset(p + rd.r->ncounts, 0, (c.ncounts - rd.r->ncounts) * sizeof(*p));
		rd.r->counts = p;
		rd.r->ncounts = c.ncounts;
	}
	c.counts = rd.r->counts;
	err = scan_rows(&rd, true, select_row, &c);
	if (err)
		goto cleanup;

	/* Stack ids in order: the same data gives the same profile. */
	qsort(c.touched, c.ntouched, sizeof(*c.touched), cmp_u32);
	err = copy_stacks(s, &c, &refs, &frames, &offs, unit, unitlen, &period);
	if (!err && period > 0)
		out->period = period;
	/* Each function becomes a location of out once; stacks are added as
	 * location indices. */
	for (i = 0; !err && i < c.ntouched; i++) {
		size_t n = offs[i + 1] - offs[i];

		for (k = 0; k < n; k++) {
			struct fref *r = &refs[frames[offs[i] + k]];

			if (r->loc == UINT32_MAX) {
				struct prof_frame f = {
					.func = r->name,
					.module = *r->module ? r->module : NULL,
					.kernel = r->kernel,
				};

				r->loc = profile__location(out, &f);
			}
			locs[k] = r->loc;
		}
		err = profile__add_locs(out, 0, 0, "", locs, n, c.counts[c.touched[i]]);
	}
cleanup:
	for (i = 0; i < c.ntouched; i++) /* zeroed for the next select */
		c.counts[c.touched[i]] = 0;
	free(c.touched);
	free(refs);
	free(frames);
	free(offs);
	read_end(&rd);
	return err;
}

/* ---- timeline ---- */

struct timeline_ctx {
	int64_t step;
	double *values;
	size_t nsteps;
};

static int timeline_row(struct read *rd, sqlite3_stmt *st, void *ctx)
{
	struct timeline_ctx *c = ctx;
	int64_t start = sqlite3_column_int64(st, 0), end = sqlite3_column_int64(st, 1);
	int64_t total = 0, lo, hi, i, i0, i1, grid_end;
	struct codec_dir_iter it;
	struct codec_dir_ent e;
	int err, rc = 0;

	err = row_dir(st, false, &it);
	while (!err && (rc = row_next(rd, &it, &e)) > 0)
		if (rd->match[e.sid] && __builtin_add_overflow(total, e.total, &total))
			return -EOVERFLOW;
	if (err || rc)
		return err ? err : rc;
	if (!total || end <= start)
		return 0;
	/* Spread over the steps in proportion to the overlap. */
	if (__builtin_add_overflow(rd->from, (int64_t)c->nsteps * c->step, &grid_end))
		grid_end = INT64_MAX;
	lo = start > rd->from ? start : rd->from;
	hi = end < grid_end ? end : grid_end;
	if (hi <= lo)
		return 0;
	i0 = (lo - rd->from) / c->step;
	i1 = (hi - rd->from + c->step - 1) / c->step;
	for (i = i0; i < i1 && i < (int64_t)c->nsteps; i++) {
		int64_t a = rd->from + i * c->step, b = a + c->step;

		if (a < start)
			a = start;
		if (b > end)
			b = end;
		if (b > a)
			c->values[i] += (double)total * (double)(b - a) / (double)(end - start);
	}
	return 0;
}

static int sqlite_timeline(struct store *base, const struct store_query *q, int64_t step_ms,
			   double *values, size_t nsteps)
{
	struct sqlite_store *s = sqlite_store(base);
	struct timeline_ctx c = {.step = step_ms, .values = values, .nsteps = nsteps};
	struct read rd;
	int err;

	if (step_ms <= 0 || (nsteps && !values) || nsteps > (size_t)(INT64_MAX / step_ms))
		return -EINVAL;
	memset(values, 0, nsteps * sizeof(*values));
	err = read_begin(s, q, &rd);
	if (err)
		return err;
	err = match_series(&rd, false, NULL);
	if (!err)
		err = scan_rows(&rd, false, timeline_row, &c);
	read_end(&rd);
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
	err = read_begin(s, q, &rd);
	if (err)
		return err;
	err = match_series(&rd, false, NULL);
	if (err)
		goto cleanup;
	present = calloc(rd.nmatch ? rd.nmatch : 1, 1);
	if (!present) {
		err = -ENOMEM;
		goto cleanup;
	}
	err = scan_rows(&rd, false, present_row, present);
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
	read_end(&rd);
	return err;
}

static int sqlite_label_names(struct store *base, const struct store_query *q, store_string_fn fn,
			      void *ctx)
{
	return label_strings(sqlite_store(base), q, NULL, fn, ctx);
}

static int sqlite_label_values(struct store *base, const struct store_query *q, const char *name,
			       store_string_fn fn, void *ctx)
{
	if (!name || !*name)
		return -EINVAL;
	return label_strings(sqlite_store(base), q, name, fn, ctx);
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

static int sqlite_points(struct store *base, const char *name, const struct store_query *q,
			 store_points_fn fn, void *ctx)
{
	struct sqlite_store *s = sqlite_store(base);
	struct pick *picks = NULL;
	int64_t *ts = NULL;
	double *vals = NULL;
	size_t npicks = 0, cap_picks = 0, cap_ts = 0, cap_vals = 0, i, n;
	struct read rd;
	int err, rc;

	if (!fn || !metric_name_valid(name))
		return -EINVAL;
	err = read_begin(s, q, &rd);
	if (err)
		return err;
	err = match_series(&rd, true, name);
	if (err)
		goto cleanup;
	pthread_rwlock_rdlock(&s->dict_lock);
	for (i = 1; !err && i < rd.nmatch; i++) {
		const struct labelset *ls = &s->dict.pseries[i].ls;

		if (!rd.match[i])
			continue;
		err = array_grow((void **)&picks, &cap_picks, npicks + 1, sizeof(*picks));
		if (!err)
			err = labelset__decode(&picks[npicks].ls, ls->key, ls->len);
		if (!err)
			picks[npicks++].id = (uint32_t)i;
	}
	pthread_rwlock_unlock(&s->dict_lock);
	if (err)
		goto cleanup;
	qsort(picks, npicks, sizeof(*picks), cmp_pick);

	for (i = 0; !err && i < npicks; i++) {
		sqlite3_stmt *st = rd.r->st[R_POINTS];

		sqlite3_bind_int64(st, 1, picks[i].id);
		sqlite3_bind_int64(st, 2, rd.from);
		sqlite3_bind_int64(st, 3, rd.until);
		n = 0;
		while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
			err = array_grow((void **)&ts, &cap_ts, n + 1, sizeof(*ts));
			if (!err)
				err = array_grow((void **)&vals, &cap_vals, n + 1, sizeof(*vals));
			if (err)
				break;
			ts[n] = sqlite3_column_int64(st, 0);
			vals[n] = sqlite3_column_type(st, 1) == SQLITE_NULL
					  ? NAN
					  : sqlite3_column_double(st, 1);
			n++;
		}
		if (!err && rc != SQLITE_DONE)
			err = sql_fail(rd.r->db, rc, "read metric points");
		sqlite3_reset(st);
		if (!err && n)
			fn(ctx, name, picks[i].ls.labels, picks[i].ls.n, ts, vals, n);
	}
cleanup:
	for (i = 0; i < npicks; i++)
		labelset__free(&picks[i].ls);
	free(picks);
	free(ts);
	free(vals);
	read_end(&rd);
	return err;
}

/* ---- expire ---- */

enum { KILL_NODE, KILL_FUNC, KILL_SERIES, KILL_PSERIES };

struct kill {
	uint32_t id;
	uint8_t kind;
};

struct expire {
	struct kill *kills;
	size_t nkills, cap_kills;
	uint32_t *work;
	size_t nwork, cap_work;
	uint64_t windows, samples, points;
	bool gc_complete;
};

static int delete_id(struct sqlite_store *s, int which, uint32_t id, const char *what)
{
	sqlite3_bind_int64(s->st[which], 1, id);
	return step_done(s->db, s->st[which], what);
}

/* Deletes a row and kills its dictionary entry (dict_lock held). */
static int expire_kill(struct sqlite_store *s, struct expire *x, int kind, uint32_t id)
{
	static const int stmt[] = {W_DEL_NODE, W_DEL_FUNC, W_DEL_SERIES, W_DEL_PSERIES};
	int err = array_grow((void **)&x->kills, &x->cap_kills, x->nkills + 1, sizeof(*x->kills));

	if (!err)
		err = delete_id(s, stmt[kind], id, "expire old data");
	if (err)
		return err;
	switch (kind) {
	case KILL_NODE:
		dict__kill_node(&s->dict, id);
		break;
	case KILL_FUNC:
		dict__kill_func(&s->dict, id);
		break;
	case KILL_SERIES:
		dict__kill_series(&s->dict, id);
		break;
	default:
		dict__kill_pseries(&s->dict, id);
		break;
	}
	x->kills[x->nkills].id = id;
	x->kills[x->nkills].kind = (uint8_t)kind;
	x->nkills++;
	return 0;
}

static int expire_windows(struct sqlite_store *s, int64_t before, struct expire *x, bool *done)
{
	sqlite3_stmt *st = s->st[W_OLD_WINDOWS];
	int64_t *ids = malloc(EXPIRE_MAX_ROWS * sizeof(*ids));
	size_t n = 0, i;
	int rc, err = 0;

	if (!ids)
		return -ENOMEM;
	sqlite3_bind_int64(st, 1, before);
	sqlite3_bind_int(st, 2, EXPIRE_MAX_ROWS);
	while (n < EXPIRE_MAX_ROWS && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		ids[n++] = sqlite3_column_int64(st, 0);
		x->windows += (uint64_t)sqlite3_column_int64(st, 1);
		x->samples += (uint64_t)sqlite3_column_int64(st, 2);
	}
	if (n < EXPIRE_MAX_ROWS && rc != SQLITE_DONE)
		err = sql_fail(s->db, rc, "find old windows");
	sqlite3_reset(st);
	for (i = 0; !err && i < n; i++) {
		sqlite3_bind_int64(s->st[W_DEL_WINDOW], 1, ids[i]);
		err = step_done(s->db, s->st[W_DEL_WINDOW], "expire old windows");
	}
	*done = n < EXPIRE_MAX_ROWS;
	free(ids);
	return err;
}

static int expire_points(struct sqlite_store *s, int64_t before, struct expire *x)
{
	int64_t budget = EXPIRE_MAX_POINTS;
	size_t i;
	int err = 0, rc;

	for (i = 1; !err && budget > 0 && i < s->dict.cap_pseries; i++) {
		sqlite3_stmt *st = s->st[W_DEL_POINTS];
		int changes;

		if (s->dict.pseries[i].state != DICT_LIVE)
			continue;
		sqlite3_bind_int64(st, 1, (int64_t)i);
		sqlite3_bind_int64(st, 2, before);
		sqlite3_bind_int64(st, 3, budget);
		err = step_done(s->db, st, "expire old points");
		changes = sqlite3_changes(s->db);
		if (err || !changes)
			continue;
		budget -= changes;
		x->points += (uint64_t)changes;
		st = s->st[W_HAS_POINTS];
		sqlite3_bind_int64(st, 1, (int64_t)i);
		rc = sqlite3_step(st);
		sqlite3_reset(st);
		if (rc == SQLITE_DONE) {
			pthread_rwlock_wrlock(&s->dict_lock);
			err = expire_kill(s, x, KILL_PSERIES, (uint32_t)i);
			pthread_rwlock_unlock(&s->dict_lock);
		} else if (rc != SQLITE_ROW) {
			err = sql_fail(s->db, rc, "expire old points");
		}
	}
	return err;
}

static bool node_dead(const struct dict *d, uint32_t id, int64_t horizon)
{
	const struct node_ent *n = &d->nodes[id];

	return n->state == DICT_LIVE && !n->nchild && dead_by(n->last_h, horizon);
}

/* Deletes series, stacks and functions that no window ending after horizon
 * can use: all windows ending by horizon are gone. Stacks go leaf first, so
 * the table never holds a node whose parent is gone. dict_lock is held. */
static int collect(struct sqlite_store *s, int64_t horizon, struct expire *x)
{
	struct dict *d = &s->dict;
	size_t budget = EXPIRE_MAX_NODES, i;
	int err = 0;

	x->gc_complete = true;
	for (i = 1; !err && i < d->cap_series; i++)
		if (d->series[i].state == DICT_LIVE && dead_by(d->series[i].last_h, horizon))
			err = expire_kill(s, x, KILL_SERIES, (uint32_t)i);
	for (i = 1; !err && i < d->cap_nodes && x->nwork < budget; i++) {
		if (!node_dead(d, (uint32_t)i, horizon))
			continue;
		err = array_grow((void **)&x->work, &x->cap_work, x->nwork + 1, sizeof(*x->work));
		if (!err)
			x->work[x->nwork++] = (uint32_t)i;
	}
	while (!err && x->nwork) {
		uint32_t id = x->work[--x->nwork], parent = d->nodes[id].parent;
		uint32_t func = d->nodes[id].func;

		if (!budget) {
			x->gc_complete = false;
			break;
		}
		budget--;
		err = expire_kill(s, x, KILL_NODE, id);
		if (!err && !d->funcs[func].refs && d->funcs[func].state == DICT_LIVE)
			err = expire_kill(s, x, KILL_FUNC, func);
		if (!err && parent && node_dead(d, parent, horizon)) {
			err = array_grow((void **)&x->work, &x->cap_work, x->nwork + 1,
					 sizeof(*x->work));
			if (!err)
				x->work[x->nwork++] = parent;
		}
	}
	if (i < d->cap_nodes)
		x->gc_complete = false;
	return err;
}

static void revive(struct sqlite_store *s, struct expire *x)
{
	size_t i;

	pthread_rwlock_wrlock(&s->dict_lock);
	for (i = x->nkills; i-- > 0;) {
		uint32_t id = x->kills[i].id;

		switch (x->kills[i].kind) {
		case KILL_NODE:
			dict__revive_node(&s->dict, id);
			break;
		case KILL_FUNC:
			dict__revive_func(&s->dict, id);
			break;
		case KILL_SERIES:
			dict__revive_series(&s->dict, id);
			break;
		default:
			dict__revive_pseries(&s->dict, id);
			break;
		}
	}
	pthread_rwlock_unlock(&s->dict_lock);
}

/* Gives free pages back to the file system, a bounded number per call. */
static void vacuum(struct sqlite_store *s)
{
	sqlite3_stmt *st;
	int64_t nfree = 0;

	if (sqlite3_prepare_v2(s->db, "PRAGMA freelist_count", -1, &st, NULL) != SQLITE_OK)
		return;
	if (sqlite3_step(st) == SQLITE_ROW)
		nfree = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	if (nfree >= VACUUM_MIN_FREE)
		exec(s->db, "PRAGMA incremental_vacuum(" STR(VACUUM_PAGES) ")",
		     "give free space back");
}

static int sqlite_expire(struct store *base, int64_t before_ms)
{
	struct sqlite_store *s = sqlite_store(base);
	uint32_t hour = before_ms > 0 ? (uint32_t)(before_ms / DICT_HOUR_MS) : 0;
	struct expire x = {0};
	bool windows_done = false;
	int err;

	pthread_mutex_lock(&s->write_lock);
	/* Ids killed by earlier calls can be reused once no read that began
	 * before those deletes committed is still running. */
	if (!pthread_rwlock_trywrlock(&s->gc_lock)) {
		pthread_rwlock_wrlock(&s->dict_lock);
		dict__flush(&s->dict);
		pthread_rwlock_unlock(&s->dict_lock);
		pthread_rwlock_unlock(&s->gc_lock);
	}
	err = step_done(s->db, s->st[W_BEGIN], "begin a transaction");
	if (err)
		goto unlock;
	err = expire_windows(s, before_ms, &x, &windows_done);
	if (!err)
		err = expire_points(s, before_ms, &x);
	if (!err) {
		sqlite3_bind_int64(s->st[W_DEL_KEYS], 1, before_ms);
		err = step_done(s->db, s->st[W_DEL_KEYS], "expire the put keys");
	}
	/* Only once every window ending by before_ms is gone can what they
	 * used be judged unused. */
	if (!err && windows_done && (hour != s->gc_hour || !s->gc_hour)) {
		pthread_rwlock_wrlock(&s->dict_lock);
		err = collect(s, before_ms, &x);
		pthread_rwlock_unlock(&s->dict_lock);
	}
	if (!err)
		err = step_done(s->db, s->st[W_COMMIT], "commit expiry");
	if (err) {
		if (!sqlite3_get_autocommit(s->db))
			step_done(s->db, s->st[W_ROLLBACK], "roll back");
		revive(s, &x);
		goto unlock;
	}
	atomic_fetch_sub(&s->nwindows, x.windows);
	atomic_fetch_sub(&s->nsamples, x.samples);
	atomic_fetch_sub(&s->npoints, x.points);
	if (windows_done && x.gc_complete)
		s->gc_hour = hour;
	vacuum(s);
unlock:
	pthread_mutex_unlock(&s->write_lock);
	free(x.kills);
	free(x.work);
	return err;
}

/* ---- stats, close ---- */

static uint64_t file_size(const char *path, const char *suffix)
{
	char buf[PATH_MAX];
	struct stat st;

	snprintf(buf, sizeof(buf), "%s%s", path, suffix);
	return stat(buf, &st) ? 0 : (uint64_t)st.st_size;
}

static void sqlite_stats(struct store *base, struct store_stats *out)
{
	struct sqlite_store *s = sqlite_store(base);

	memset(out, 0, sizeof(*out));
	pthread_rwlock_rdlock(&s->dict_lock);
	out->series = s->dict.live_series;
	out->stacks = s->dict.live_nodes;
	out->functions = s->dict.live_funcs;
	pthread_rwlock_unlock(&s->dict_lock);
	out->windows = atomic_load(&s->nwindows);
	out->samples = atomic_load(&s->nsamples);
	out->points = atomic_load(&s->npoints);
	out->bytes_on_disk = file_size(s->path, "") + file_size(s->path, "-wal");
}

static void sqlite_free(struct sqlite_store *s)
{
	struct reader *r, *next;
	int i;

	for (r = s->idle; r; r = next) {
		next = r->next;
		reader_close(r);
	}
	for (i = 0; i < W_COUNT; i++)
		sqlite3_finalize(s->st[i]);
	if (s->db) {
		/* Fold the WAL into the database so the store is one file at rest. */
		sqlite3_wal_checkpoint_v2(s->db, NULL, SQLITE_CHECKPOINT_TRUNCATE, NULL, NULL);
		sqlite3_close(s->db);
	}
	if (s->lock_fd >= 0)
		close(s->lock_fd);
	dict__free(&s->dict);
	dict__undo_free(&s->undo);
	free(s->wins);
	free(s->pairs);
	free(s->merge);
	free(s->locfunc);
	free(s->locmod);
	free(s->lochash);
	free(s->strrep);
	free(s->act);
	free(s->ents);
	free(s->seq);
	store_buf__free(&s->dirbuf);
	store_buf__free(&s->databuf);
	free(s->dirents);
	free(s->dir);
	free(s->path);
	pthread_mutex_destroy(&s->write_lock);
	pthread_rwlock_destroy(&s->dict_lock);
	pthread_rwlock_destroy(&s->gc_lock);
	pthread_mutex_destroy(&s->pool_lock);
	pthread_cond_destroy(&s->pool_cond);
	free(s);
}

static void sqlite_close(struct store *base)
{
	sqlite_free(sqlite_store(base));
}

static const struct store_ops sqlite_ops = {
	.name = "sqlite",
	.put_windows = sqlite_put_windows,
	.put_points = sqlite_put_points,
	.select = sqlite_select,
	.timeline = sqlite_timeline,
	.label_names = sqlite_label_names,
	.label_values = sqlite_label_values,
	.points = sqlite_points,
	.expire = sqlite_expire,
	.stats = sqlite_stats,
	.close = sqlite_close,
};

/* ---- open ---- */

static int mkdir_p(const char *dir)
{
	char buf[PATH_MAX];
	size_t i, n = strlen(dir);

	if (!n || n >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, dir, n + 1);
	for (i = 1; i <= n; i++) {
		if (buf[i] != '/' && buf[i] != '\0')
			continue;
		buf[i] = '\0';
		if (mkdir(buf, 0755) && errno != EEXIST)
			return -errno;
		buf[i] = dir[i];
	}
	return 0;
}

/* Reads one integer (a PRAGMA or a count). */
static int query_int(sqlite3 *db, const char *sql, int64_t *out)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(db, sql, -1, &st, NULL);

	if (rc != SQLITE_OK)
		return rc;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*out = sqlite3_column_int64(st, 0);
		rc = SQLITE_OK;
	} else if (rc == SQLITE_DONE) {
		*out = 0;
		rc = SQLITE_OK;
	}
	sqlite3_finalize(st);
	return rc;
}

/* Creates the schema in an empty database, or checks that it is a store of
 * a schema this build reads. */
static int check_schema(struct sqlite_store *s)
{
	int64_t ntables = 0, app_id = 0, version = 0, journal_ok = 0;
	int rc, err;

	rc = query_int(s->db, "SELECT count(*) FROM sqlite_schema", &ntables);
	if (rc == SQLITE_OK)
		rc = query_int(s->db, "PRAGMA application_id", &app_id);
	if (rc == SQLITE_OK)
		rc = query_int(s->db, "PRAGMA user_version", &version);
	if ((rc & 0xff) == SQLITE_NOTADB) {
		pr_err("store: can't open %s: it is not a Sonde store (not an SQLite database) --"
		       " move it away or choose another --data directory",
		       s->path);
		return -EINVAL;
	}
	if (rc != SQLITE_OK)
		return sql_fail(s->db, rc, "read the store's schema");

	if (!ntables && !app_id && !version) {
		/* Page size and auto_vacuum must be set before the first table. */
		err = exec(s->db,
			   "PRAGMA page_size = 4096; PRAGMA auto_vacuum = INCREMENTAL;"
			   " PRAGMA journal_mode = WAL;",
			   "set up a new store");
		if (err)
			return err;
		err = exec(s->db, "BEGIN IMMEDIATE", "create the store");
		if (!err)
			err = exec(s->db, schema_sql, "create the store");
		if (!err)
			err = exec(
				s->db,
				"PRAGMA application_id = " STR(
					SONDE_APP_ID) ";"
						      " PRAGMA user_version = " STR(
							      SCHEMA_VERSION) ";"
									      " INSERT INTO "
									      "meta(key, value) "
									      "VALUES('max_window_"
									      "ms', 0); COMMIT",
				"create the store");
		if (err) {
			sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
			return err;
		}
		pr_debug("store: created %s", s->path);
		return 0;
	}
	if (app_id != SONDE_APP_ID) {
		pr_err("store: can't open %s: it is an SQLite database but not a Sonde store -- "
		       "move"
		       " it away or choose another --data directory",
		       s->path);
		return -EINVAL;
	}
	if (version > SCHEMA_VERSION) {
		pr_err("store: can't open %s: it was written by a newer Sonde (schema %" PRId64
		       ", this one reads up to %d) -- upgrade sonde or choose another --data"
		       " directory",
		       s->path, version, SCHEMA_VERSION);
		return -ENOTSUP;
	}
	if (version < 1) {
		pr_err("store: can't open %s: its schema version %" PRId64 " is not one Sonde wrote"
		       " -- move it away or choose another --data directory",
		       s->path, version);
		return -EINVAL;
	}
	rc = query_int(s->db, "SELECT count(*) FROM sqlite_schema WHERE name = 'windows'",
		       &journal_ok);
	if (rc != SQLITE_OK || !journal_ok) {
		pr_err("store: can't open %s: its tables are missing -- the store is damaged;"
		       " move it away",
		       s->path);
		return -EINVAL;
	}
	/* Stores written before keyed puts get their table now. */
	err = exec(s->db, PUT_KEYS_SQL, "add the table of put keys");
	if (err)
		return err;
	return 0;
}

static int load_dict(struct sqlite_store *s)
{
	static const char *const sql[] = {
		"SELECT id, name, module, kernel FROM functions",
		"SELECT id, parent, func, last_h FROM stacks",
		"SELECT id, labels, last_h FROM series",
		"SELECT id, name, labels FROM pseries",
		"SELECT id, unit, period FROM units",
	};
	struct dict *d = &s->dict;
	sqlite3_stmt *st;
	size_t t;
	int rc, err = 0;

	for (t = 0; !err && t < ARRAY_SIZE(sql); t++) {
		rc = sqlite3_prepare_v2(s->db, sql[t], -1, &st, NULL);
		if (rc != SQLITE_OK)
			return sql_fail(s->db, rc, "load the store");
		while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
			int64_t id = sqlite3_column_int64(st, 0);
			const char *text = NULL;
			const void *blob = NULL;
			int len = 0;

			/* Blob columns as blobs, text as text: a conversion would
			 * invalidate pointers already taken. */
			if (t == 2) {
				blob = sqlite3_column_blob(st, 1);
				len = sqlite3_column_bytes(st, 1);
			} else {
				text = (const char *)sqlite3_column_text(st, 1);
			}
			if (t == 3) {
				blob = sqlite3_column_blob(st, 2);
				len = sqlite3_column_bytes(st, 2);
			}

			if (id <= 0 || id >= UINT32_MAX - 1) {
				err = -EINVAL;
				break;
			}
			switch (t) {
			case 0:
				err = dict__load_func(d, (uint32_t)id, text ? text : "",
						      (const char *)sqlite3_column_text(st, 2)
							      ?: "",
						      sqlite3_column_int(st, 3));
				break;
			case 1:
				err = dict__load_node(d, (uint32_t)id,
						      (uint32_t)sqlite3_column_int64(st, 1),
						      (uint32_t)sqlite3_column_int64(st, 2),
						      (uint32_t)sqlite3_column_int64(st, 3));
				break;
			case 2:
				err = dict__load_series(d, (uint32_t)id, blob, (size_t)len,
							(uint32_t)sqlite3_column_int64(st, 2));
				break;
			case 3:
				err = dict__load_pseries(d, (uint32_t)id, text ? text : "", blob,
							 (size_t)len);
				break;
			default:
				err = dict__load_unit(d, (uint32_t)id, text ? text : "",
						      sqlite3_column_int64(st, 2));
				break;
			}
		}
		if (!err && rc != SQLITE_DONE)
			err = sql_fail(s->db, rc, "load the store");
		sqlite3_finalize(st);
	}
	if (!err)
		err = dict__load_done(d);
	if (err == -EINVAL)
		corrupt("the store's dictionary tables");
	return err;
}

static int load_counts(struct sqlite_store *s)
{
	int64_t w = 0, n = 0, p = 0, maxlen = 0;
	int rc;

	rc = query_int(s->db, "SELECT coalesce(sum(nwindows), 0) FROM windows", &w);
	if (rc == SQLITE_OK)
		rc = query_int(s->db, "SELECT coalesce(sum(nsamples), 0) FROM windows", &n);
	if (rc == SQLITE_OK)
		rc = query_int(s->db, "SELECT count(*) FROM points", &p);
	if (rc == SQLITE_OK)
		rc = query_int(s->db, "SELECT value FROM meta WHERE key = 'max_window_ms'",
			       &maxlen);
	if (rc != SQLITE_OK)
		return sql_fail(s->db, rc, "load the store");
	atomic_store(&s->nwindows, (uint64_t)w);
	atomic_store(&s->nsamples, (uint64_t)n);
	atomic_store(&s->npoints, (uint64_t)p);
	atomic_store(&s->max_window_ms, maxlen);
	return 0;
}

static void sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

struct store *store_sqlite__open(const char *dir)
{
	pthread_rwlockattr_t rwattr;
	struct sqlite_store *s;
	char buf[PATH_MAX];
	int64_t wal = 0;
	int rc, err, i;
	char mode[16] = "";
	sqlite3_stmt *st;

	if (!dir || !*dir) {
		errno = EINVAL;
		return NULL;
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	s->base.ops = &sqlite_ops;
	s->lock_fd = -1;
	s->max_readers = MAX_READERS;
	pthread_mutex_init(&s->write_lock, NULL);
	/* Readers take dict_lock often and briefly; preferring the writer keeps
	 * a stream of them from holding up a put. */
	pthread_rwlockattr_init(&rwattr);
	pthread_rwlockattr_setkind_np(&rwattr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&s->dict_lock, &rwattr);
	pthread_rwlockattr_destroy(&rwattr);
	pthread_rwlock_init(&s->gc_lock, NULL);
	pthread_mutex_init(&s->pool_lock, NULL);
	pthread_cond_init(&s->pool_cond, NULL);
	dict__init(&s->dict);

	s->dir = strdup(dir);
	if (snprintf(buf, sizeof(buf), "%s/%s", dir, DB_NAME) >= (int)sizeof(buf)) {
		err = -ENAMETOOLONG;
		pr_err("store: can't open %s: the path is too long", dir);
		goto fail;
	}
	s->path = strdup(buf);
	if (!s->dir || !s->path) {
		err = -ENOMEM;
		goto fail;
	}
	err = mkdir_p(dir);
	if (err) {
		pr_err("store: can't create the directory %s: %s -- check the --data path and its"
		       " permissions",
		       dir, strerror(-err));
		goto fail;
	}
	snprintf(buf, sizeof(buf), "%s/%s", dir, LOCK_NAME);
	s->lock_fd = open(buf, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (s->lock_fd < 0) {
		err = -errno;
		pr_err("store: can't open %s: %s -- check the permissions of the --data directory",
		       buf, strerror(errno));
		goto fail;
	}
	if (flock(s->lock_fd, LOCK_EX | LOCK_NB)) {
		err = errno == EWOULDBLOCK ? -EBUSY : -errno;
		pr_err("store: can't open %s: it is in use by another sonde process -- stop it or"
		       " choose another --data directory",
		       dir);
		goto fail;
	}

	rc = sqlite3_open_v2(s->path, &s->db,
			     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
			     NULL);
	if (rc != SQLITE_OK) {
		err = sql_fail(s->db, rc, "open the store");
		goto fail;
	}
	sqlite3_extended_result_codes(s->db, 1);
	sqlite3_busy_timeout(s->db, 10000);
	err = check_schema(s);
	if (err)
		goto fail;

	/* WAL: readers never block the writer; synchronous=FULL: a commit
	 * returns once the WAL is on disk (durable against power loss, not
	 * only against a crash of the process). */
	rc = sqlite3_prepare_v2(s->db, "PRAGMA journal_mode = WAL", -1, &st, NULL);
	if (rc == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		snprintf(mode, sizeof(mode), "%s", (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	if (strcmp(mode, "wal")) {
		pr_err("store: can't use write-ahead logging for %s (journal mode '%s') -- put the"
		       " --data directory on a local file system",
		       s->path, mode);
		err = -ENOTSUP;
		goto fail;
	}
	err = exec(s->db,
		   "PRAGMA synchronous = FULL; PRAGMA secure_delete = OFF;"
		   " PRAGMA cache_size = -16384; PRAGMA foreign_keys = OFF;",
		   "set up the store");
	if (err)
		goto fail;
	query_int(s->db, "PRAGMA wal_autocheckpoint", &wal);

	for (i = 0; i < W_COUNT; i++) {
		rc = sqlite3_prepare_v3(s->db, writer_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
					&s->st[i], NULL);
		if (rc != SQLITE_OK) {
			err = sql_fail(s->db, rc, "prepare the store's statements");
			goto fail;
		}
	}
	err = load_dict(s);
	if (!err)
		err = load_counts(s);
	if (err)
		goto fail;
	sync_dir(dir);
	return &s->base;
fail:
	sqlite_free(s);
	errno = -err;
	return NULL;
}
