/* sqlite_read.c: how the embedded store's reads (sqlite_query.c) get at
 * its data -- a pool of read-only connections, each read taking one and
 * reading a WAL snapshot so that it never holds up a put, the series a
 * read's matchers select, and the scan of the window rows overlapping its
 * range. A read holds gc_lock shared for its whole length, so that the ids
 * of rows expiry deleted are not reused while it can still see them. */
#include "store/sqlite_internal.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "common/clock.h"
#include "common/log.h"

#define MAX_READERS 8

static const char *const reader_sql[R_COUNT] = {
	[R_BEGIN] = "BEGIN",
	[R_COMMIT] = "COMMIT",
	[R_SNAP] = "SELECT count(*) FROM meta",
	/* ?1 until, ?2 from minus the longest window, ?3 from */
	[R_WINDOWS] =
		"SELECT start_ms, end_ms, unit, dir, data FROM windows"
		" WHERE start_ms < ?1 AND start_ms > ?2 AND end_ms > ?3 ORDER BY start_ms, end_ms",
	/* length() of a blob reads its size, not its bytes */
	[R_DIRS] =
		"SELECT start_ms, end_ms, unit, dir, length(data) FROM windows"
		" WHERE start_ms < ?1 AND start_ms > ?2 AND end_ms > ?3 ORDER BY start_ms, end_ms",
	[R_POINTS] = "SELECT ts_ms, value FROM points WHERE pseries = ?1 AND ts_ms >= ?2"
		     " AND ts_ms < ?3 ORDER BY ts_ms",
	/* ?1 until, ?2 from minus the longest span, ?3 from (ns) */
	[R_SPANS] = "SELECT pseries, start_ns, end_ns, device, stream, correlation, tid, bytes,"
		    " kind, name, launched_from FROM spans WHERE start_ns < ?1 AND start_ns > ?2"
		    " AND end_ns > ?3 ORDER BY start_ns, device, stream, correlation",
};

/* ---- the pool ---- */

static void reader_close(struct reader *r)
{
	int i;

	if (!r)
		return;
	for (i = 0; i < R_COUNT; i++)
		sqlite3_finalize(r->st[i]);
	sqlite3_close(r->db);
	free(r->counts);
	free(r->slots);
	free(r);
}

static int apply_read_pragmas(sqlite3 *db)
{
	/* Reads map the database (no copy through a page cache of our own);
	 * the WAL, still read() through, stays small. */
	return sql_exec(db,
			"PRAGMA query_only = 1; PRAGMA mmap_size = 1073741824;"
			" PRAGMA cache_size = -8192; PRAGMA busy_timeout = 10000;",
			"set up a reader");
}

static struct reader *reader_open(const char *path, int *err)
{
	struct reader *r = calloc(1, sizeof(*r));
	int rc, i;

	if (!r) {
		*err = -ENOMEM;
		return NULL;
	}
	rc = sqlite3_open_v2(path, &r->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, NULL);
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

void reader_pool__init(struct reader_pool *p)
{
	memset(p, 0, sizeof(*p));
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->max = MAX_READERS;
}

void reader_pool__free(struct reader_pool *p)
{
	struct reader *r, *next;

	for (r = p->idle; r; r = next) {
		next = r->next;
		reader_close(r);
	}
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cond);
	memset(p, 0, sizeof(*p));
}

/* An idle reader, or a new one on path while there are fewer than max,
 * else waits for one. NULL with *err set when a new one fails to open. */
static struct reader *reader_pool__get(struct reader_pool *p, const char *path, int *err)
{
	struct reader *r;

	pthread_mutex_lock(&p->lock);
	while (!p->idle && p->nreaders >= p->max)
		pthread_cond_wait(&p->cond, &p->lock);
	r = p->idle;
	if (r) {
		p->idle = r->next;
		pthread_mutex_unlock(&p->lock);
		return r;
	}
	p->nreaders++;
	pthread_mutex_unlock(&p->lock);

	r = reader_open(path, err);
	if (!r) {
		pthread_mutex_lock(&p->lock);
		p->nreaders--;
		pthread_cond_signal(&p->cond);
		pthread_mutex_unlock(&p->lock);
	}
	return r;
}

static void reader_pool__put(struct reader_pool *p, struct reader *r)
{
	pthread_mutex_lock(&p->lock);
	r->next = p->idle;
	p->idle = r;
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

/* ---- a read ---- */

void read__end(struct read *rd)
{
	struct sqlite_store *s = rd->s;

	if (rd->in_txn)
		step_done(rd->r->db, rd->r->st[R_COMMIT], "end a read");
	if (rd->r)
		reader_pool__put(&s->pool, rd->r);
	if (rd->gc_held)
		pthread_rwlock_unlock(&s->gc_lock);
	matchset__free(&rd->ms);
	free(rd->match);
	memset(rd, 0, sizeof(*rd));
}

/* Marks in rd->match the profile series (metric NULL), or the series of
 * metric, that the matchers select; -ETIMEDOUT past the query's deadline.
 * Regexes over many series take long: dict_lock, which a put waits for
 * (and, as it prefers writers, every read after it, /healthz's too), is
 * let go every MATCH_HOLD_NS and taken again. That is safe: the series the
 * snapshot can show are all below n, and their ids are not reused while
 * gc_lock is held; the array may have moved, never shrunk. */
#define MATCH_HOLD_NS (2ull * NS_PER_MS)
static int match_series(struct read *rd, const char *metric)
{
	struct sqlite_store *s = rd->s;
	const struct series_ent *arr;
	uint64_t held;
	size_t i, n;
	int err = 0;

	pthread_rwlock_rdlock(&s->dict_lock);
	n = metric ? s->dict.cap_pseries : s->dict.cap_series;
	rd->match = calloc(n ? n : 1, 1);
	if (!rd->match) {
		pthread_rwlock_unlock(&s->dict_lock);
		return -ENOMEM;
	}
	rd->nmatch = n;
	held = mono_ns();
	for (i = 1; i < n; i++) {
		if (!(i % STORE_DEADLINE_STEP) && mono_ns() - held > MATCH_HOLD_NS) {
			pthread_rwlock_unlock(&s->dict_lock);
			pthread_rwlock_rdlock(&s->dict_lock);
			held = mono_ns();
		}
		if (store_past_deadline(rd->deadline_ns, i)) {
			err = -ETIMEDOUT;
			break;
		}
		arr = metric ? s->dict.pseries : s->dict.series;
		if (arr[i].state == DICT_FREE || (metric && strcmp(arr[i].name, metric)))
			continue;
		rd->match[i] = matchset__match(&rd->ms, arr[i].ls.labels, arr[i].ls.n);
	}
	pthread_rwlock_unlock(&s->dict_lock);
	return err;
}

int read__begin(struct read *rd, struct sqlite_store *s, const struct store_query *q,
		const char *metric)
{
	char msg[256];
	int err;

	memset(rd, 0, sizeof(*rd));
	rd->s = s;
	if (!q || q->from_ms >= q->until_ms)
		return -EINVAL;
	rd->from = q->from_ms;
	rd->until = q->until_ms;
	rd->deadline_ns = q->deadline_ns;
	rd->lo = q->from_ms;
	if (atomic_load(&s->expired_before) > rd->lo)
		rd->lo = atomic_load(&s->expired_before);
	err = matchset__compile(&rd->ms, q->matchers, q->nmatchers, msg, sizeof(msg));
	if (err) {
		pr_debug("store: bad query: %s", msg);
		return err;
	}
	pthread_rwlock_rdlock(&s->gc_lock);
	rd->gc_held = true;
	rd->r = reader_pool__get(&s->pool, s->path, &err);
	if (!rd->r)
		goto fail;
	err = step_done(rd->r->db, rd->r->st[R_BEGIN], "begin a read");
	if (err)
		goto fail;
	rd->in_txn = true;
	/* The snapshot starts with the first read: take it before looking at
	 * the dictionaries, so they hold every id the snapshot can show. */
	err = step_done(rd->r->db, rd->r->st[R_SNAP], "read the store");
	if (!err)
		err = match_series(rd, metric);
	if (err)
		goto fail;
	return 0;
fail:
	read__end(rd);
	return err;
}

int read__scan_rows(struct read *rd, bool with_data, row_fn fn, void *ctx)
{
	sqlite3_stmt *st = rd->r->st[with_data ? R_WINDOWS : R_DIRS];
	int64_t maxlen = atomic_load(&rd->s->max_window_ms), lo;
	size_t rows = 0;
	int rc, err = 0;

	/* No window is longer than maxlen: one overlapping the range starts
	 * after from - maxlen, which bounds the index scan from below. */
	if (__builtin_sub_overflow(rd->lo, maxlen, &lo))
		lo = INT64_MIN;
	sqlite3_bind_int64(st, 1, rd->until);
	sqlite3_bind_int64(st, 2, lo);
	sqlite3_bind_int64(st, 3, rd->lo);
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		err = fn(rd, st, ctx);
		if (!err && store_past_deadline(rd->deadline_ns, ++rows))
			err = -ETIMEDOUT;
	}
	if (!err && rc != SQLITE_DONE)
		err = sql_fail(rd->r->db, rc, "read windows");
	sqlite3_reset(st);
	return err;
}
