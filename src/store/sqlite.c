/* sqlite.c: the embedded store behind `sonde server` and `sonde run` -- one
 * SQLite database, DIR/sonde.db, in WAL mode, implementing store.h. This
 * file opens and closes it (schema, the writer's statements, loading the
 * dictionaries), holds the ops table and the stats, and the error helpers
 * the others use. The rest: sqlite_put.c (put_windows, put_points),
 * sqlite_read.c (the reader pool, a read's snapshot and row scan),
 * sqlite_query.c (select, timeline, label names and values, points),
 * sqlite_expire.c (expiry); sqlite_internal.h is what they share, dict.c
 * the dictionaries, codec.c the row format, labels.c label sets.
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
 * value. A sample costs a few bytes, a window of one series a few more.
 * Reads scan the rows overlapping a range through an index on (start_ms,
 * end_ms), pick the series that match from `dir`, and sum values per stack
 * id in an array; frames come from memory. Points are rows of (metric
 * series, ts_ms, value).
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
#include "store/sqlite_internal.h"
#include "common/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
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

#define SCHEMA_VERSION 1
#define SONDE_APP_ID 1399811684 /* 0x536f6e64, "Sond" */
#define DB_NAME "sonde.db"
#define LOCK_NAME "sonde.lock"

/* The keys of keyed puts (store_window.key), kept as long as the data, by
 * the series they came with (sqlite_put.c, put_key): a table a store of
 * schema 1 gains at open, which an older Sonde ignores. */
#define WINDOW_KEYS_SQL                                                                            \
	"CREATE TABLE IF NOT EXISTS window_keys(series INTEGER NOT NULL, key TEXT NOT NULL,"       \
	" ts_ms INTEGER NOT NULL, PRIMARY KEY(series, key)) WITHOUT ROWID;"

/* The GPU timeline's spans (store.h), by metric series (named
 * STORE_SPAN_METRIC): a table a store of schema 1 gains at open, which an
 * older Sonde ignores. Reads go by start through spans_time. */
#define SPANS_SQL                                                                                  \
	"CREATE TABLE IF NOT EXISTS spans(pseries INTEGER NOT NULL, start_ns INTEGER NOT NULL,"    \
	" end_ns INTEGER NOT NULL, device INTEGER NOT NULL, stream INTEGER NOT NULL,"              \
	" correlation INTEGER NOT NULL, tid INTEGER NOT NULL, bytes INTEGER NOT NULL,"             \
	" kind TEXT NOT NULL, name TEXT NOT NULL, launched_from TEXT NOT NULL,"                    \
	" PRIMARY KEY(pseries, start_ns, device, stream, correlation)) WITHOUT ROWID;"             \
	"CREATE INDEX IF NOT EXISTS spans_time ON spans(start_ns);"

/* Where each function is in the source: columns a store of schema 1 gains
 * at open (ALTER TABLE), which an older Sonde ignores. */
#define FUNC_SRC_COLUMNS "file TEXT NOT NULL DEFAULT '', line INTEGER NOT NULL DEFAULT 0"
/* The project that first sent each function, which it counts against
 * (struct store_quota): a column a store of schema 1 gains at open; the
 * functions of a store written before it count against project "". */
#define FUNC_PROJECT_COLUMN "project TEXT NOT NULL DEFAULT ''"

static const char schema_sql[] =
	"CREATE TABLE meta(key TEXT PRIMARY KEY, value) WITHOUT ROWID;"
	"CREATE TABLE functions(id INTEGER PRIMARY KEY, name TEXT NOT NULL,"
	" module TEXT NOT NULL, kernel INTEGER NOT NULL, " FUNC_SRC_COLUMNS ", " FUNC_PROJECT_COLUMN
	");"
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
	" PRIMARY KEY(pseries, ts_ms)) WITHOUT ROWID;" WINDOW_KEYS_SQL SPANS_SQL;

/* The writer's statements' SQL, by their enum in sqlite_internal.h. */
static const char *const writer_sql[W_COUNT] = {
	[W_BEGIN] = "BEGIN IMMEDIATE",
	[W_COMMIT] = "COMMIT",
	[W_ROLLBACK] = "ROLLBACK",
	[W_INS_FUNC] = "INSERT INTO functions(id, name, module, kernel, file, line, project)"
		       " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
	[W_UPD_FUNC_SRC] = "UPDATE functions SET file = ?2, line = ?3 WHERE id = ?1",
	[W_INS_NODE] = "INSERT INTO stacks(id, parent, func, last_h) VALUES(?1, ?2, ?3, ?4)",
	[W_UPD_NODE] = "UPDATE stacks SET last_h = ?2 WHERE id = ?1",
	[W_INS_SERIES] = "INSERT INTO series(id, labels, last_h) VALUES(?1, ?2, ?3)",
	[W_UPD_SERIES] = "UPDATE series SET last_h = ?2 WHERE id = ?1",
	[W_INS_UNIT] = "INSERT INTO units(id, unit, period) VALUES(?1, ?2, ?3)",
	[W_INS_KEY] = "INSERT OR IGNORE INTO window_keys(series, key, ts_ms) VALUES(?1, ?2, ?3)",
	[W_DEL_KEYS] = "DELETE FROM window_keys WHERE ts_ms < ?1",
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
	[W_INS_SPAN] = "INSERT OR REPLACE INTO spans(pseries, start_ns, end_ns, device, stream,"
		       " correlation, tid, bytes, kind, name, launched_from)"
		       " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
	/* At most ?2 spans: those that ended by ?1 among the ?2 oldest. */
	[W_DEL_SPANS] = "DELETE FROM spans WHERE end_ns <= ?1 AND start_ns < coalesce((SELECT"
			" start_ns FROM spans WHERE start_ns < ?1 ORDER BY start_ns LIMIT 1"
			" OFFSET ?2), ?1)",
};

/* ---- errors and one-off queries ---- */

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

int sql_fail(sqlite3 *db, int rc, const char *what)
{
	/* A full disk fails every put of a stream of ingests: said every 10 s
	 * with the count of the others, not once a request. */
	static struct log_limit full;
	unsigned long long skipped = 0;

	if ((rc & 0xff) != SQLITE_FULL || log_limit__take(&full, 10000, &skipped))
		pr_err("store: can't %s: %s%s%s", what,
		       db ? sqlite3_errmsg(db) : sqlite3_errstr(rc), sql_hint(rc),
		       skipped ? " (and earlier failures, not logged)" : "");
	return sql_errno(rc);
}

int sql_exec(sqlite3 *db, const char *sql, const char *what)
{
	int rc = sqlite3_exec(db, sql, NULL, NULL, NULL);

	return rc == SQLITE_OK ? 0 : sql_fail(db, rc, what);
}

int corrupt(const char *what)
{
	pr_err("store: %s is damaged -- the store needs repair; move the --data directory away to"
	       " start afresh",
	       what);
	return -EIO;
}

int sql_query_int(sqlite3 *db, const char *sql, int64_t *out)
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

int sqlite_store__commit(struct sqlite_store *s, int err, const char *what)
{
	if (!err)
		err = step_done(s->db, s->st[W_COMMIT], what);
	if (err && !sqlite3_get_autocommit(s->db))
		step_done(s->db, s->st[W_ROLLBACK], "roll back");
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

static void sqlite_store__stats(struct store *base, struct store_stats *out)
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
	out->spans = atomic_load(&s->nspans);
	out->bytes_on_disk = file_size(s->path, "") + file_size(s->path, "-wal");
}

static void sqlite_store__free(struct sqlite_store *s)
{
	int i;

	reader_pool__free(&s->pool);
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
	put_scratch__free(&s->put);
	free(s->dir);
	free(s->path);
	pthread_mutex_destroy(&s->write_lock);
	pthread_rwlock_destroy(&s->dict_lock);
	pthread_rwlock_destroy(&s->gc_lock);
	free(s);
}

static void sqlite_store__close(struct store *base)
{
	sqlite_store__free(sqlite_store(base));
}

static const struct store_ops sqlite_ops = {
	.name = "sqlite",
	.put_windows = sqlite_store__put_windows,
	.put_points = sqlite_store__put_points,
	.select_tree = sqlite_store__select_tree,
	.timeline = sqlite_store__timeline,
	.label_names = sqlite_store__label_names,
	.label_values = sqlite_store__label_values,
	.series_totals = sqlite_store__series_totals,
	.points = sqlite_store__points,
	.expire = sqlite_store__expire,
	.put_spans = sqlite_store__put_spans,
	.spans = sqlite_store__spans,
	.set_quota = sqlite_store__set_quota,
	.stats = sqlite_store__stats,
	.close = sqlite_store__close,
};

/* ---- schema ---- */

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

/* Creates the tables of a new store in an empty database. */
static int create_schema(struct sqlite_store *s)
{
	char stamp[160];
	int err;

	/* Page size and auto_vacuum must be set before the first table. */
	err = sql_exec(s->db,
		       "PRAGMA page_size = 4096; PRAGMA auto_vacuum = INCREMENTAL;"
		       " PRAGMA journal_mode = WAL;",
		       "set up a new store");
	if (err)
		return err;
	err = sql_exec(s->db, "BEGIN IMMEDIATE", "create the store");
	if (!err)
		err = sql_exec(s->db, schema_sql, "create the store");
	snprintf(stamp, sizeof(stamp),
		 "PRAGMA application_id = %d; PRAGMA user_version = %d;"
		 " INSERT INTO meta(key, value) VALUES('max_window_ms', 0);",
		 SONDE_APP_ID, SCHEMA_VERSION);
	if (!err)
		err = sql_exec(s->db, stamp, "create the store");
	if (!err)
		err = sql_exec(s->db, "COMMIT", "create the store");
	if (err) {
		sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, NULL);
		return err;
	}
	pr_debug("store: created %s", s->path);
	return 0;
}

/* Creates the schema in an empty database, or checks that it is a store of
 * a schema this build reads. */
static int check_schema(struct sqlite_store *s)
{
	int64_t ntables = 0, app_id = 0, version = 0, has_windows = 0, has_file = 0,
		has_project = 0;
	int rc;

	rc = sql_query_int(s->db, "SELECT count(*) FROM sqlite_schema", &ntables);
	if (rc == SQLITE_OK)
		rc = sql_query_int(s->db, "PRAGMA application_id", &app_id);
	if (rc == SQLITE_OK)
		rc = sql_query_int(s->db, "PRAGMA user_version", &version);
	if ((rc & 0xff) == SQLITE_NOTADB) {
		pr_err("store: can't open %s: it is not a Sonde store (not an SQLite database) --"
		       " move it away or choose another --data directory",
		       s->path);
		return -EINVAL;
	}
	if (rc != SQLITE_OK)
		return sql_fail(s->db, rc, "read the store's schema");
	if (!ntables && !app_id && !version)
		return create_schema(s);
	if (app_id != SONDE_APP_ID) {
		pr_err("store: can't open %s: it is an SQLite database but not a Sonde store --"
		       " move it away or choose another --data directory",
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
	rc = sql_query_int(s->db, "SELECT count(*) FROM sqlite_schema WHERE name = 'windows'",
			   &has_windows);
	if (rc != SQLITE_OK || !has_windows) {
		pr_err("store: can't open %s: its tables are missing -- the store is damaged;"
		       " move it away",
		       s->path);
		return -EINVAL;
	}
	/* Stores written before keyed puts get their table now, and those
	 * written before source lines their functions' columns. */
	rc = sql_query_int(
		s->db, "SELECT count(*) FROM pragma_table_info('functions') WHERE name = 'file'",
		&has_file);
	if (rc != SQLITE_OK)
		return sql_fail(s->db, rc, "read the store's schema");
	if (!has_file) {
		int err = sql_exec(
			s->db,
			"ALTER TABLE functions ADD COLUMN file TEXT NOT NULL DEFAULT '';"
			"ALTER TABLE functions ADD COLUMN line INTEGER NOT NULL DEFAULT 0;",
			"add the functions' source columns");

		if (err)
			return err;
	}
	/* ...and those written before the projects' bounds the project of
	 * each function. */
	rc = sql_query_int(
		s->db, "SELECT count(*) FROM pragma_table_info('functions') WHERE name = 'project'",
		&has_project);
	if (rc != SQLITE_OK)
		return sql_fail(s->db, rc, "read the store's schema");
	if (!has_project) {
		int err =
			sql_exec(s->db, "ALTER TABLE functions ADD COLUMN " FUNC_PROJECT_COLUMN ";",
				 "add the functions' project column");

		if (err)
			return err;
	}
	/* The keys of stores written before keys had a series (put_keys)
	 * are dropped: any project may have written one, and trusting them
	 * would let one keep another's window out. A put retried across the
	 * upgrade may be stored twice. An older Sonde makes the table again. */
	return sql_exec(s->db, WINDOW_KEYS_SQL SPANS_SQL "DROP TABLE IF EXISTS put_keys;",
			"add the table of window keys");
}

/* ---- loading the dictionaries ---- */

/* Loads a row of a dictionary table, its id checked, into d. Text columns
 * are read as text and blob columns as blobs: a conversion would invalidate
 * pointers already taken. */
typedef int (*load_row_fn)(struct dict *d, uint32_t id, sqlite3_stmt *st);

static const char *column_str(sqlite3_stmt *st, int col)
{
	const char *text = (const char *)sqlite3_column_text(st, col);

	return text ? text : "";
}

static int load_func(struct dict *d, uint32_t id, sqlite3_stmt *st)
{
	const char *name = column_str(st, 1), *module = column_str(st, 2);

	int64_t line = sqlite3_column_int64(st, 5);

	return dict__load_func(d, id, name, module, sqlite3_column_int(st, 3), column_str(st, 4),
			       line > 0 && line <= UINT32_MAX ? (uint32_t)line : 0,
			       column_str(st, 6));
}

static int load_node(struct dict *d, uint32_t id, sqlite3_stmt *st)
{
	return dict__load_node(d, id, (uint32_t)sqlite3_column_int64(st, 1),
			       (uint32_t)sqlite3_column_int64(st, 2),
			       (uint32_t)sqlite3_column_int64(st, 3));
}

static int load_series(struct dict *d, uint32_t id, sqlite3_stmt *st)
{
	const void *labels = sqlite3_column_blob(st, 1);
	int len = sqlite3_column_bytes(st, 1);

	return dict__load_series(d, id, labels, (size_t)len, (uint32_t)sqlite3_column_int64(st, 2));
}

static int load_pseries(struct dict *d, uint32_t id, sqlite3_stmt *st)
{
	const char *name = column_str(st, 1);
	const void *labels = sqlite3_column_blob(st, 2);
	int len = sqlite3_column_bytes(st, 2);

	return dict__load_pseries(d, id, name, labels, (size_t)len);
}

static int load_unit(struct dict *d, uint32_t id, sqlite3_stmt *st)
{
	const char *unit = column_str(st, 1);

	return dict__load_unit(d, id, unit, sqlite3_column_int64(st, 2));
}

static int load_table(struct sqlite_store *s, const char *sql, load_row_fn fn)
{
	sqlite3_stmt *st;
	int rc, err = 0;

	rc = sqlite3_prepare_v2(s->db, sql, -1, &st, NULL);
	if (rc != SQLITE_OK)
		return sql_fail(s->db, rc, "load the store");
	while (!err && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		int64_t id = sqlite3_column_int64(st, 0);

		err = id <= 0 || id >= UINT32_MAX - 1 ? -EINVAL : fn(&s->dict, (uint32_t)id, st);
	}
	if (!err && rc != SQLITE_DONE)
		err = sql_fail(s->db, rc, "load the store");
	sqlite3_finalize(st);
	return err;
}

static int load_dict(struct sqlite_store *s)
{
	static const struct {
		const char *sql;
		load_row_fn fn;
	} tables[] = {
		{"SELECT id, name, module, kernel, file, line, project FROM functions", load_func},
		{"SELECT id, parent, func, last_h FROM stacks", load_node},
		{"SELECT id, labels, last_h FROM series", load_series},
		{"SELECT id, name, labels FROM pseries", load_pseries},
		{"SELECT id, unit, period FROM units", load_unit},
	};
	size_t t;
	int err = 0;

	for (t = 0; !err && t < ARRAY_SIZE(tables); t++)
		err = load_table(s, tables[t].sql, tables[t].fn);
	if (!err)
		err = dict__load_done(&s->dict);
	if (err == -EINVAL)
		corrupt("the store's dictionary tables");
	return err;
}

static int load_counts(struct sqlite_store *s)
{
	int64_t w = 0, n = 0, p = 0, sp = 0, maxlen = 0, expired = 0;
	int rc;

	rc = sql_query_int(s->db, "SELECT coalesce(sum(nwindows), 0) FROM windows", &w);
	if (rc == SQLITE_OK)
		rc = sql_query_int(s->db, "SELECT coalesce(sum(nsamples), 0) FROM windows", &n);
	if (rc == SQLITE_OK)
		rc = sql_query_int(s->db, "SELECT count(*) FROM points", &p);
	if (rc == SQLITE_OK)
		rc = sql_query_int(s->db, "SELECT count(*) FROM spans", &sp);
	if (rc == SQLITE_OK)
		rc = sql_query_int(s->db, "SELECT value FROM meta WHERE key = 'max_window_ms'",
				   &maxlen);
	if (rc == SQLITE_OK)
		rc = sql_query_int(s->db, "SELECT value FROM meta WHERE key = 'expired_before'",
				   &expired);
	if (rc != SQLITE_OK)
		return sql_fail(s->db, rc, "load the store");
	atomic_store(&s->nwindows, (uint64_t)w);
	atomic_store(&s->nsamples, (uint64_t)n);
	atomic_store(&s->npoints, (uint64_t)p);
	atomic_store(&s->nspans, (uint64_t)sp);
	atomic_store(&s->max_window_ms, maxlen);
	atomic_store(&s->expired_before, expired);
	return 0;
}

/* ---- open ---- */

static void sync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (fd >= 0) {
		fsync(fd);
		close(fd);
	}
}

/* Creates dir and takes its lock file, so that one process owns the store. */
static int lock_dir(struct sqlite_store *s, const char *dir)
{
	char buf[PATH_MAX];
	int err = mkdir_p(dir);

	if (err) {
		pr_err("store: can't create the directory %s: %s -- check the --data path and its"
		       " permissions",
		       dir, strerror(-err));
		return err;
	}
	snprintf(buf, sizeof(buf), "%s/%s", dir, LOCK_NAME);
	s->lock_fd = open(buf, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (s->lock_fd < 0) {
		err = -errno;
		pr_err("store: can't open %s: %s -- check the permissions of the --data directory",
		       buf, strerror(errno));
		return err;
	}
	if (flock(s->lock_fd, LOCK_EX | LOCK_NB)) {
		err = errno == EWOULDBLOCK ? -EBUSY : -errno;
		pr_err("store: can't open %s: it is in use by another sonde process -- stop it or"
		       " choose another --data directory",
		       dir);
		return err;
	}
	return 0;
}

/* Opens the writer's connection on s->path, creating or checking the
 * schema, and prepares its statements. */
static int open_writer(struct sqlite_store *s)
{
	char mode[16] = "";
	sqlite3_stmt *st;
	int rc, err, i;

	rc = sqlite3_open_v2(s->path, &s->db,
			     SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
			     NULL);
	if (rc != SQLITE_OK)
		return sql_fail(s->db, rc, "open the store");
	sqlite3_extended_result_codes(s->db, 1);
	sqlite3_busy_timeout(s->db, 10000);
	err = check_schema(s);
	if (err)
		return err;

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
		return -ENOTSUP;
	}
	err = sql_exec(s->db,
		       "PRAGMA synchronous = FULL; PRAGMA secure_delete = OFF;"
		       " PRAGMA cache_size = -16384; PRAGMA foreign_keys = OFF;",
		       "set up the store");
	for (i = 0; !err && i < W_COUNT; i++) {
		rc = sqlite3_prepare_v3(s->db, writer_sql[i], -1, SQLITE_PREPARE_PERSISTENT,
					&s->st[i], NULL);
		if (rc != SQLITE_OK)
			err = sql_fail(s->db, rc, "prepare the store's statements");
	}
	return err;
}

/* A store with its locks made and no file open. */
static struct sqlite_store *sqlite_store__new(void)
{
	struct sqlite_store *s = calloc(1, sizeof(*s));
	pthread_rwlockattr_t rwattr;

	if (!s)
		return NULL;
	s->base.ops = &sqlite_ops;
	s->lock_fd = -1;
	s->quota = (struct store_quota){STORE_DEFAULT_MAX_SERIES, STORE_DEFAULT_MAX_NAME_BYTES};
	pthread_mutex_init(&s->write_lock, NULL);
	/* Readers take dict_lock often and briefly; preferring the writer keeps
	 * a stream of them from holding up a put. */
	pthread_rwlockattr_init(&rwattr);
	pthread_rwlockattr_setkind_np(&rwattr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
	pthread_rwlock_init(&s->dict_lock, &rwattr);
	pthread_rwlockattr_destroy(&rwattr);
	pthread_rwlock_init(&s->gc_lock, NULL);
	reader_pool__init(&s->pool);
	dict__init(&s->dict);
	return s;
}

struct store *store_sqlite__open(const char *dir)
{
	struct sqlite_store *s;
	char buf[PATH_MAX];
	int err;

	if (!dir || !*dir) {
		errno = EINVAL;
		return NULL;
	}
	s = sqlite_store__new();
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	if (snprintf(buf, sizeof(buf), "%s/%s", dir, DB_NAME) >= (int)sizeof(buf)) {
		err = -ENAMETOOLONG;
		pr_err("store: can't open %s: the path is too long", dir);
		goto fail;
	}
	s->dir = strdup(dir);
	s->path = strdup(buf);
	if (!s->dir || !s->path) {
		err = -ENOMEM;
		goto fail;
	}
	err = lock_dir(s, dir);
	if (!err)
		err = open_writer(s);
	if (!err)
		err = load_dict(s);
	if (!err)
		err = load_counts(s);
	if (err)
		goto fail;
	sync_dir(dir);
	return &s->base;
fail:
	sqlite_store__free(s);
	errno = -err;
	return NULL;
}
