/* sqlite_internal.h: what the files of the embedded SQLite store share and
 * nothing else sees -- struct sqlite_store (the writer connection and its
 * statements, the dictionaries and their locks, the reader pool, the
 * writer's scratch), the reader pool and a read's snapshot, and the error
 * helpers every SQLite call goes through. sqlite.c (open, close, schema,
 * stats), sqlite_put.c (writes), sqlite_read.c (the pool and snapshots),
 * sqlite_query.c (the reads of store.h) and sqlite_expire.c (expiry)
 * include it; sqlite.c describes the design. The unit test includes it
 * (through sqlite_expire.c) to look at the dictionaries. */
#ifndef SONDE_STORE_SQLITE_INTERNAL_H
#define SONDE_STORE_SQLITE_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "store/store.h"
#include "store/store_internal.h"

/* ---- statements ---- */

/* The writer's statements, prepared at open (their SQL: writer_sql in
 * sqlite.c, beside the schema). */
enum {
	W_BEGIN,
	W_COMMIT,
	W_ROLLBACK,
	W_INS_FUNC,
	W_UPD_FUNC_SRC,
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
	W_INS_SPAN,
	W_DEL_SPANS,
	W_COUNT
};

/* A reader's statements, prepared when it opens (reader_sql in
 * sqlite_read.c). */
enum { R_BEGIN, R_COMMIT, R_SNAP, R_WINDOWS, R_DIRS, R_POINTS, R_SPANS, R_COUNT };

/* ---- the reader pool (sqlite_read.c) ---- */

/* A read-only connection. */
struct reader {
	struct reader *next;
	sqlite3 *db;
	sqlite3_stmt *st[R_COUNT];
	/* A select's sums by stack id, kept zeroed between selects: a fresh
	 * array per select would cost a page fault per 4 KiB. */
	int64_t *counts;
	size_t ncounts;
	/* A select's tree: by stack id, its node's index + 1 (0: none yet),
	 * kept zeroed the same way. */
	uint32_t *slots;
	size_t nslots;
};

/* Connections opened on demand, at most max at once, kept when idle. */
struct reader_pool {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct reader *idle;
	unsigned int nreaders, max;
};

void reader_pool__init(struct reader_pool *p);
/* Closes the idle readers (all of them: the store is closing). */
void reader_pool__free(struct reader_pool *p);

/* ---- the writer's scratch (sqlite_put.c) ---- */

/* A window of a put, resolved. */
struct put_win {
	int64_t start, end, total;
	uint32_t series, unit;
	size_t off, n; /* its pairs in put_scratch.pairs */
};

/* An entry still walking the trie, and the walked entry before it. */
struct put_act {
	uint32_t ent, src;
};

/* A counted sample of a put, its stack in put_scratch.seq. */
struct put_ent {
	uint32_t h, win; /* hour its window ends by, index in put_scratch.wins */
	uint32_t off, n; /* function ids, root first */
	uint32_t lcp;	 /* ids shared with the entry before, once sorted */
	uint32_t node;	 /* its stack, once resolved */
	int64_t count;
};

/* Arrays a put reuses from one call to the next (under write_lock). */
struct put_scratch {
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
};

void put_scratch__free(struct put_scratch *p);

/* ---- the store ---- */

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

	struct reader_pool pool;

	_Atomic int64_t max_window_ms;
	/* The latest expiry's before_ms: windows that ended by it and points
	 * taken before it are never read, even before expiry has deleted
	 * them all or when they were written after it. */
	_Atomic int64_t expired_before;
	_Atomic uint64_t nwindows, nsamples, npoints, nspans;

	/* Writer state (write_lock). */
	struct store_quota quota; /* each project's bounds */
	struct dict_undo undo;	  /* what the put in hand added to dict */
	struct put_scratch put;
	uint32_t gc_hour; /* the hour of the last complete collection */
};

static inline struct sqlite_store *sqlite_store(struct store *s)
{
	return (struct sqlite_store *)s;
}

/* The operations of store.h, by file. */
int sqlite_store__put_windows(struct store *base, const struct store_window *w, size_t n);
int sqlite_store__put_points(struct store *base, const struct store_point *p, size_t n);
int sqlite_store__set_quota(struct store *base, const struct store_quota *q);
int sqlite_store__select_tree(struct store *base, const struct store_query *q, store_tree_fn fn,
			      void *ctx, char *unit, size_t unitlen);
int sqlite_store__timeline(struct store *base, const struct store_query *q, int64_t step_ms,
			   double *values, size_t nsteps);
int sqlite_store__label_names(struct store *base, const struct store_query *q, store_string_fn fn,
			      void *ctx);
int sqlite_store__series_totals(struct store *base, const struct store_query *q, store_series_fn fn,
				void *ctx);
int sqlite_store__label_values(struct store *base, const struct store_query *q, const char *name,
			       store_string_fn fn, void *ctx);
int sqlite_store__points(struct store *base, const char *name, const struct store_query *q,
			 store_points_fn fn, void *ctx);
int sqlite_store__expire(struct store *base, int64_t before_ms);
int sqlite_store__put_spans(struct store *base, const struct store_span *sp, size_t n);
int sqlite_store__spans(struct store *base, const struct store_query *q, size_t limit,
			store_span_fn fn, void *ctx, bool *truncated);

/* ---- errors and one-off queries (sqlite.c) ---- */

/* Logs a failed SQLite call (what: "write a stack") with a hint when there
 * is one, and returns the negative errno for it. */
int sql_fail(sqlite3 *db, int rc, const char *what);
/* Steps a statement that returns no rows (or whose rows don't matter),
 * resets it and clears its bindings. 0 or sql_fail()'s errno. Inline: a put
 * steps a statement per row it writes. */
static inline int step_done(sqlite3 *db, sqlite3_stmt *st, const char *what)
{
	int rc = sqlite3_step(st);

	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		return sql_fail(db, rc, what);
	return 0;
}
/* Runs SQL text; 0 or sql_fail()'s errno. */
int sql_exec(sqlite3 *db, const char *sql, const char *what);
/* Logs that what ("a window's directory") is damaged; returns -EIO. */
int corrupt(const char *what);
/* Ends the writer's transaction (write_lock held): commits it when err is
 * 0 (what: "commit expiry"), else, or when the commit fails, rolls it back.
 * Returns err or the commit's error. */
int sqlite_store__commit(struct sqlite_store *s, int err, const char *what);
/* Reads one integer (a PRAGMA, a count; 0 when there is no row) into
 * *out. Returns the SQLite result code (SQLITE_OK), unlogged. */
int sql_query_int(sqlite3 *db, const char *sql, int64_t *out);

/* ---- a read (sqlite_read.c) ---- */

/* One read: a reader connection holding a snapshot, the compiled matchers
 * and which series (by id) they select. */
struct read {
	struct sqlite_store *s;
	struct reader *r;
	struct matchset ms;
	uint8_t *match; /* by series id: selected */
	size_t nmatch;
	int64_t from, until;
	int64_t lo;	      /* from, raised to the expiry mark: what rows are read from */
	uint64_t deadline_ns; /* the query's */
	bool gc_held, in_txn;
};

/* Checks q, compiles its matchers, takes gc_lock shared and a reader,
 * starts its snapshot and marks in rd->match the series the matchers
 * select: profile series (metric NULL) or the series of metric. 0, -EINVAL
 * (a bad query), -ENOMEM, -ETIMEDOUT (past q's deadline), or an SQLite
 * error; on error rd needs no read__end. */
int read__begin(struct read *rd, struct sqlite_store *s, const struct store_query *q,
		const char *metric);
/* Ends the snapshot and gives everything back. */
void read__end(struct read *rd);

/* Called per window row by read__scan_rows; returns 0 to go on. */
typedef int (*row_fn)(struct read *rd, sqlite3_stmt *st, void *ctx);
/* Calls fn for each window row overlapping [from, until), in (start, end) order,
 * with its columns start_ms, end_ms, unit, dir and then data (with_data) or
 * data's length. Stops at the first error fn returns, or with -ETIMEDOUT
 * past the query's deadline. */
int read__scan_rows(struct read *rd, bool with_data, row_fn fn, void *ctx);

/* Starts reading a row's dir (column 3) over its data (column 4: the blob
 * with data, else its length). 0 or -EIO. */
static inline int row_dir(sqlite3_stmt *st, bool with_data, struct codec_dir_iter *it)
{
	int64_t datalen = with_data ? sqlite3_column_bytes(st, 4) : sqlite3_column_int64(st, 4);

	if (codec_dir_begin(it, sqlite3_column_blob(st, 3), (size_t)sqlite3_column_bytes(st, 3),
			    datalen > 0 ? (size_t)datalen : 0))
		return corrupt("a window's directory");
	return 0;
}

/* The row's next series into e: 1, 0 after the last, -EIO when the dir is
 * damaged or names a series the dictionaries don't hold. */
static inline int row_next(const struct read *rd, struct codec_dir_iter *it,
			   struct codec_dir_ent *e)
{
	int rc = codec_dir_next(it, e);

	if (rc < 0 || (rc > 0 && e->sid >= rd->nmatch))
		return corrupt("a window's directory");
	return rc;
}

#endif
