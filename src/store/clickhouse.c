/* clickhouse.c: the store for fleets -- ClickHouse, over its HTTP
 * interface, implementing store.h like the embedded SQLite store, so that
 * `sonde server --store clickhouse://HOST:PORT/DATABASE` answers the same.
 * This file opens it (the address, the schema), holds the ops table, the
 * stats, expiry and the caches; clickhouse_put.c writes, clickhouse_query.c
 * reads, clickhouse_http.c talks to the server and clickhouse_rowbinary.c
 * encodes what is sent and reads what comes back.
 *
 * Layout (every table is partitioned by day, so that retention drops whole
 * partitions; no experimental feature, nothing 18.16 lacks):
 *   windows    one row per (series, window): series id, start_ms, end_ms,
 *              unit, period, total, put_key, and the samples as two
 *              arrays, stacks (ids) and vals, sorted by stack id. Ordered by
 *              (hour of start_ms, series, start_ms): a read of a range reads
 *              only its hours (a series holds too few windows a day for its
 *              own granules, so a key led by series would read whole days);
 *              within an hour consecutive windows of a series repeat most
 *              of their stacks, which compression takes away.
 *   hour_stacks the hourly rollup, filled by a materialized view as windows
 *              are written: (series, hour of start, stack) -> the sum of
 *              its values (SummingMergeTree), and under stack 0 the number
 *              of windows. A read takes its whole hours from here and only
 *              the partial hours at its edges from windows (see
 *              clickhouse_query.c, which also checks the rollup against
 *              the windows it sums before it trusts it).
 *   series     (day, id, metric, names, vals): the labels of profile series
 *              (metric "") and of metric series, stored once per day of use.
 *   stacks     (day, id, funcs): a stack's function ids, leaf first.
 *   functions  (day, id, name, module, kernel, file, line, ver).
 *   points     (name, series, ts_ms, value, ver).
 *   spans      (series, start_ns, end_ns, device, stream, correlation, tid,
 *              bytes, kind, name, launched_from): the GPU timeline's
 *              kernels and copies, by the day of their end; a span put
 *              twice is one (ReplacingMergeTree, read with FINAL).
 *   meta       (key, value): the schema version, the expiry mark and the
 *              longest window stored (a read's lower bound on start_ms).
 *   tokens     (id, hash, project, role, created_ms, revoked_ms, ver): who
 *              may read and write which project (clickhouse_tokens.c).
 * Ids are content hashes (common/hash.h) of what they name: every server on
 * one database agrees on them without asking each other, and a row written
 * twice (by two servers, or again after a failed put) is the same row, which
 * the ReplacingMergeTree tables merge away and reads take once. A day's
 * windows refer only to series, stacks and functions stored in that day's
 * partitions, so dropping a day can't leave a window without its stacks.
 *
 * Durability. A put returns once ClickHouse has answered its INSERT, i.e.
 * written it into a part: a server killed afterwards loses nothing. Puts
 * that arrive while one is being written are written together (group
 * commit, clickhouse_put.c): batched, with no delay added when the load is
 * light. A keyed put's key is a column of its first window row, written in
 * the same INSERT, and looked up by that row's primary key.
 *
 * A server away. Every call returns -EAGAIN when ClickHouse can't be
 * reached; the HTTP server answers 503 with Retry-After, so that agents keep
 * their windows and send them again. Labels matchers are evaluated here, in
 * C (labels.c), exactly as the SQLite store evaluates them. */
#include "store/clickhouse_internal.h"
#include "common/xalloc.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "net/libcurl.h"
#include "profile/profile.h"

#define SCHEMA_VERSION 2
#define DEFAULT_PORT 8123
#define DEFAULT_DATABASE "sonde"

/* The tables, in the order puts write them (a window after what it names). */
static const char *const table_names[CH_NTABLES] = {
	[CH_FUNCS] = "functions", [CH_SERIES] = "series", [CH_STACKS] = "stacks",
	[CH_WINDOWS] = "windows", [CH_POINTS] = "points", [CH_SPANS] = "spans",
};

static const char *const schema_sql[] = {
	"CREATE TABLE IF NOT EXISTS meta (key String, value UInt64)"
	" ENGINE = ReplacingMergeTree(value) ORDER BY key",
	"CREATE TABLE IF NOT EXISTS windows (series UInt64, start_ms Int64, end_ms Int64,"
	" unit String, period Int64, total Int64, put_key String, stacks Array(UInt64),"
	" vals Array(Int64)) ENGINE = MergeTree PARTITION BY intDiv(end_ms, 86400000)"
	" ORDER BY (intDiv(start_ms, 3600000), series, start_ms)",
	/* The rollup, by day of its hours. Stack ids are never 0. */
	"CREATE TABLE IF NOT EXISTS hour_stacks (series UInt64, hour Int32, stack UInt64,"
	" val Int64) ENGINE = SummingMergeTree(val) PARTITION BY intDiv(hour, 24)"
	" ORDER BY (series, hour, stack)",
	"CREATE MATERIALIZED VIEW IF NOT EXISTS hour_stacks_mv TO hour_stacks AS SELECT series,"
	" toInt32(intDiv(start_ms, 3600000)) AS hour, stack, val FROM windows"
	" ARRAY JOIN arrayConcat([toUInt64(0)], stacks) AS stack,"
	" arrayConcat([toInt64(1)], vals) AS val",
	"CREATE TABLE IF NOT EXISTS series (day Int32, id UInt64, metric String,"
	" names Array(String), vals Array(String)) ENGINE = ReplacingMergeTree"
	" PARTITION BY day ORDER BY id",
	"CREATE TABLE IF NOT EXISTS stacks (day Int32, id UInt64, funcs Array(UInt64))"
	" ENGINE = ReplacingMergeTree PARTITION BY day ORDER BY id",
	/* ver: a row with a source beats one without, an older one a newer
	 * (a function's source is the first one known). */
	"CREATE TABLE IF NOT EXISTS functions (day Int32, id UInt64, name String,"
	" module String, kernel UInt8, file String, line UInt32, ver UInt64)"
	" ENGINE = ReplacingMergeTree(ver) PARTITION BY day ORDER BY id",
	/* Tokens (auth/tokens.h, clickhouse_tokens.c): a few rows, never
	 * expired; ver: a revocation is a newer version. */
	"CREATE TABLE IF NOT EXISTS tokens (id String, hash String, project String, role UInt8,"
	" created_ms Int64, revoked_ms Int64, ver UInt64) ENGINE = ReplacingMergeTree(ver)"
	" ORDER BY id",
	/* ver: the newer put of a point wins. */
	"CREATE TABLE IF NOT EXISTS points (name String, series UInt64, ts_ms Int64,"
	" value Float64, ver UInt64) ENGINE = ReplacingMergeTree(ver)"
	" PARTITION BY intDiv(ts_ms, 86400000) ORDER BY (name, series, ts_ms)",
	"CREATE TABLE IF NOT EXISTS spans (series UInt64, start_ns Int64, end_ns Int64,"
	" device Int32, stream UInt32, correlation UInt32, tid UInt32, bytes UInt64,"
	" kind String, name String, launched_from String) ENGINE = ReplacingMergeTree"
	" PARTITION BY intDiv(end_ns, 86400000000000)"
	" ORDER BY (series, start_ns, device, stream, correlation)",
};

/* ---- the address ---- */

static int url_fail(char *err, size_t errlen, const char *msg)
{
	if (err && errlen)
		snprintf(err, errlen, "%s", msg);
	return -EINVAL;
}

static char *decode(const char *s, size_t len)
{
	int n = 0;
	char *d = curl_easy_unescape(NULL, s, (int)len, &n), *out;

	if (!d)
		return NULL;
	out = strdup(d);
	curl_free(d);
	return out;
}

static bool db_name_valid(const char *s)
{
	size_t i;

	if (!*s || strlen(s) > 64 || isdigit((unsigned char)*s))
		return false;
	for (i = 0; s[i]; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_')
			return false;
	return true;
}

/* A host name or address, with its port if any: nothing that would change
 * the meaning of the URL it goes into. */
static bool host_valid(const char *s)
{
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && !strchr(".-_[]:", *s))
			return false;
	return true;
}

int ch_url__parse(struct ch_url *u, const char *url, char *err, size_t errlen)
{
	static const char scheme[] = "clickhouse://";
	const char *p, *at, *slash, *host, *colon, *env;
	char hostbuf[256];
	long port = DEFAULT_PORT;
	size_t hostlen;

	memset(u, 0, sizeof(*u));
	if (!url || strncmp(url, scheme, sizeof(scheme) - 1))
		return url_fail(err, errlen,
				"the store URL is not clickhouse://HOST[:PORT][/DATABASE]");
	p = url + sizeof(scheme) - 1;
	slash = strchr(p, '/');
	at = memchr(p, '@', slash ? (size_t)(slash - p) : strlen(p));
	if (at) {
		const char *c = memchr(p, ':', (size_t)(at - p));

		u->user = decode(p, c ? (size_t)(c - p) : (size_t)(at - p));
		if (c)
			u->password = decode(c + 1, (size_t)(at - c - 1));
		if (!u->user || (c && !u->password))
			goto nomem;
		host = at + 1;
	} else {
		host = p;
	}
	hostlen = slash ? (size_t)(slash - host) : strlen(host);
	if (!hostlen || hostlen >= sizeof(hostbuf)) {
		ch_url__free(u);
		return url_fail(err, errlen, "the store URL has no host");
	}
	memcpy(hostbuf, host, hostlen);
	hostbuf[hostlen] = '\0';
	if (!host_valid(hostbuf)) {
		ch_url__free(u);
		return url_fail(
			err, errlen,
			"the store URL's host is not a name, an IPv4 address or an [IPv6] one");
	}
	colon = strrchr(hostbuf, ':');
	if (colon && !strchr(colon, ']')) {
		char *end;

		port = strtol(colon + 1, &end, 10);
		if (*end || port <= 0 || port > 65535) {
			ch_url__free(u);
			return url_fail(err, errlen, "the store URL's port is not 1-65535");
		}
		hostbuf[colon - hostbuf] = '\0';
	}
	u->database = strdup(slash && slash[1] ? slash + 1 : DEFAULT_DATABASE);
	if (!u->database)
		goto nomem;
	if (!db_name_valid(u->database)) {
		ch_url__free(u);
		return url_fail(err, errlen,
				"the store URL's database is not [A-Za-z_][A-Za-z0-9_]* (64 bytes "
				"at most)");
	}
	if (!u->user && (env = getenv("SONDE_CLICKHOUSE_USER")) && *env) {
		u->user = strdup(env);
		env = getenv("SONDE_CLICKHOUSE_PASSWORD");
		u->password = strdup(env ? env : "");
		if (!u->user || !u->password)
			goto nomem;
	}
	if (asprintf(&u->base, "http://%s:%ld/", hostbuf, port) < 0) {
		u->base = NULL;
		goto nomem;
	}
	return 0;
nomem:
	ch_url__free(u);
	return url_fail(err, errlen, "out of memory");
}

void ch_url__free(struct ch_url *u)
{
	free(u->base);
	free(u->database);
	free(u->user);
	free(u->password);
	memset(u, 0, sizeof(*u));
}

/* ---- sets ---- */

bool ch_set__has(const struct ch_set *set, uint64_t key)
{
	return idmap__get(&set->map, key) != 0;
}

int ch_set__add(struct ch_set *set, uint64_t key)
{
	if (idmap__get(&set->map, key))
		return 0;
	if (set->map.count >= CH_MAX_CACHE)
		idmap__free(&set->map); /* written again, harmlessly, when next used */
	return idmap__put(&set->map, key, 1);
}

void ch_set__free(struct ch_set *set)
{
	idmap__free(&set->map);
}

/* ---- reads' ranges ---- */

int ch_sql_with_range(struct sbuf *b, int64_t from, int64_t until)
{
	/* Windows start at 0 or later: a range before 0 is the same as one
	 * from 0, and keeps the hours' arithmetic off negative numbers. */
	if (from < 0)
		from = 0;
	if (until < 0)
		until = 0;
	return sbuf__printf(
		b,
		"WITH greatest(toInt64(%" PRId64 "), toInt64(" CH_EXPIRED_SQL
		")) AS lo_ms, toInt64(%" PRId64 ") AS hi_ms, toInt64(" CH_MAX_WINDOW_SQL
		") AS max_win, intDiv(lo_ms + %lld, %lld) AS ha, intDiv(hi_ms, %lld) AS hb ",
		from, until, CH_HOUR_MS - 1, CH_HOUR_MS, CH_HOUR_MS);
}

int ch_sql_point_range(struct sbuf *b, int64_t from, int64_t until)
{
	return sbuf__printf(b,
			    "ts_ms >= greatest(toInt64(%" PRId64 "), toInt64(" CH_EXPIRED_SQL
			    ")) AND ts_ms < %" PRId64,
			    from, until);
}

/* ---- open ---- */

static int run_sql(struct ch_store *s, const char *url, const char *sql, const char *what)
{
	return ch__post(s, url, sql, strlen(sql), NULL, what);
}

/* A single UInt64 (SELECT ... FORMAT RowBinary) into *v. */
static int query_u64(struct ch_store *s, const char *sql, uint64_t *v, const char *what)
{
	struct sbuf out = {0};
	struct rb_reader r;
	int err = ch__query(s, sql, &out, what);

	if (!err) {
		r = rb_reader_of(&out);
		*v = rbr_u64(&r);
		if (r.bad || r.p != r.end) {
			pr_warn("clickhouse: can't %s: the answer is not one UInt64", what);
			err = -EIO;
		}
	}
	sbuf__free(&out);
	return err;
}

static int create_schema(struct ch_store *s)
{
	struct sbuf sql = {0};
	char *url = NULL;
	uint64_t version = 0;
	size_t i;
	int err;

	/* The database first, by a URL that names none (it may not exist). */
	url = strdup(s->url.base);
	err = url ? sbuf__printf(&sql, "CREATE DATABASE IF NOT EXISTS %s", s->url.database)
		  : -ENOMEM;
	if (!err)
		err = run_sql(s, url, sql.buf, "create the database");
	free(url);
	sbuf__free(&sql);
	/* meta first: the version says whether the rest can be used. */
	if (!err)
		err = run_sql(s, s->select_url, schema_sql[0], "create the tables");
	if (!err)
		err = query_u64(s,
				"SELECT toUInt64(max(value)) FROM meta WHERE key = 'schema'"
				" FORMAT RowBinary",
				&version, "read the schema version");
	if (err)
		return err;
	if (version > SCHEMA_VERSION) {
		pr_err("clickhouse: database %s was written by a newer Sonde (schema %" PRIu64
		       ", this one knows %d)",
		       s->url.database, version, SCHEMA_VERSION);
		return -ENOTSUP;
	}
	if (version && version < SCHEMA_VERSION) {
		/* Schema 1 (a development build's, never released) ordered
		 * windows by series and had no rollup: its tables can't be
		 * altered into these. */
		pr_err("clickhouse: database %s has schema %" PRIu64
		       ", of a development build of Sonde; this one needs schema %d -- "
		       "give the server a new database",
		       s->url.database, version, SCHEMA_VERSION);
		return -ENOTSUP;
	}
	for (i = 1; !err && i < ARRAY_SIZE(schema_sql); i++)
		err = run_sql(s, s->select_url, schema_sql[i], "create the tables");
	if (!err && version < SCHEMA_VERSION) {
		sql.len = 0;
		err = sbuf__printf(&sql, "INSERT INTO meta VALUES ('schema', %d)", SCHEMA_VERSION);
		if (!err)
			err = run_sql(s, s->select_url, sql.buf, "record the schema version");
		sbuf__free(&sql);
	}
	if (!err)
		err = query_u64(s, "SELECT toUInt64(" CH_MAX_WINDOW_SQL ") FORMAT RowBinary",
				&version, "read the longest window");
	if (!err)
		atomic_store(&s->max_window_ms, (int64_t)version);
	return err;
}

static const struct store_ops ch_ops;

struct store *store_clickhouse__open(const char *url)
{
	struct ch_store *s = calloc(1, sizeof(*s));
	char msg[256];
	size_t i;
	int err;

	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	net_init_curl();
	s->base.ops = &ch_ops;
	pthread_mutex_init(&s->conn_lock, NULL);
	pthread_mutex_init(&s->known_lock, NULL);
	pthread_rwlock_init(&s->cache_lock, NULL);
	pthread_mutex_init(&s->batch_lock, NULL);
	pthread_cond_init(&s->batch_cond, NULL);
	pthread_mutex_init(&s->stats_lock, NULL);
	err = ch_url__parse(&s->url, url, msg, sizeof(msg));
	if (err) {
		pr_err("clickhouse: %s: %s", url ? url : "(none)", msg);
		goto fail;
	}
	err = -ENOMEM;
	s->select_url = ch__url(&s->url, NULL);
	if (!s->select_url)
		goto fail;
	for (i = 0; i < CH_NTABLES; i++) {
		char sql[64];

		snprintf(sql, sizeof(sql), "INSERT INTO %s FORMAT RowBinary", table_names[i]);
		s->insert_url[i] = ch__url(&s->url, sql);
		if (!s->insert_url[i])
			goto fail;
	}
	err = create_schema(s);
	if (err) {
		if (err == -EAGAIN)
			pr_err("clickhouse: can't reach %s -- is ClickHouse running, and is its "
			       "HTTP"
			       " port the one in the URL?",
			       s->url.base);
		goto fail;
	}
	pr_info("store: ClickHouse at %s, database %s", s->url.base, s->url.database);
	return &s->base;
fail:
	s->base.ops->close(&s->base);
	errno = err == -EAGAIN ? ECONNREFUSED : -err;
	return NULL;
}

/* ---- stats ---- */

static void ch_store__stats(struct store *base, struct store_stats *out)
{
	struct ch_store *s = ch_store(base);
	struct sbuf sql = {0}, ans = {0};
	struct store_stats st = {0};
	struct rb_reader r;
	int err;

	err = sbuf__printf(
		&sql,
		"SELECT (SELECT uniqExact(series) FROM windows WHERE end_ms > " CH_EXPIRED_SQL "),"
		" (SELECT count() FROM windows WHERE end_ms > " CH_EXPIRED_SQL "),"
		" (SELECT uniqExact(id) FROM stacks), (SELECT uniqExact(id) FROM functions),"
		" (SELECT count() FROM (SELECT 1 FROM points WHERE ts_ms >= " CH_EXPIRED_SQL
		" GROUP BY name, series, ts_ms)),"
		" (SELECT toUInt64(sum(length(stacks))) FROM windows WHERE end_ms > " CH_EXPIRED_SQL
		"),"
		" (SELECT toUInt64(sum(bytes_on_disk)) FROM system.parts WHERE database = '%s'"
		" AND active) FORMAT RowBinary",
		s->url.database);
	if (!err)
		err = ch__query(s, sql.buf, &ans, "read the store's size");
	if (!err) {
		r = rb_reader_of(&ans);
		st.series = rbr_u64(&r);
		st.windows = rbr_u64(&r);
		st.stacks = rbr_u64(&r);
		st.functions = rbr_u64(&r);
		st.points = rbr_u64(&r);
		st.samples = rbr_u64(&r);
		st.bytes_on_disk = rbr_u64(&r);
		if (r.bad || r.p != r.end)
			err = -EIO;
	}
	pthread_mutex_lock(&s->stats_lock);
	if (!err)
		s->last_stats = st;
	*out = s->last_stats; /* while ClickHouse is away: what it last said */
	pthread_mutex_unlock(&s->stats_lock);
	sbuf__free(&sql);
	sbuf__free(&ans);
}

/* ---- expiry ---- */

struct part {
	int table; /* CH_* or CH_ROLLUP */
	int64_t day;
};

/* The rollup is no table that puts insert into: its own number. */
#define CH_ROLLUP (CH_NTABLES + 1)
#define ROLLUP_TABLE "hour_stacks"

/* Windows first, then the rollup, then what they name. */
static int drop_rank(int table)
{
	return table == CH_WINDOWS ? 0 : table == CH_ROLLUP ? 1 : 2 + table;
}

static int cmp_part(const void *a, const void *b)
{
	const struct part *x = a, *y = b;

	if (x->table != y->table)
		return drop_rank(x->table) - drop_rank(y->table);
	return x->day < y->day ? -1 : x->day > y->day;
}

/* Drops the days that end by before_ms, windows and the rollup first (a
 * row never outlives what it names), and raises the expiry mark that reads apply to
 * the rest. Bounded work: a day is one DROP PARTITION per table. */
static int ch_store__expire(struct store *base, int64_t before_ms)
{
	struct ch_store *s = ch_store(base);
	struct sbuf sql = {0}, ans = {0};
	struct part *parts = NULL;
	size_t nparts = 0, cap = 0, i;
	struct rb_reader r;
	int err;

	if (before_ms <= 0)
		return 0;
	err = sbuf__printf(&sql,
			   "SELECT table, partition FROM system.parts WHERE database = '%s' AND"
			   " active GROUP BY table, partition FORMAT RowBinary",
			   s->url.database);
	if (!err)
		err = ch__query(s, sql.buf, &ans, "list the store's partitions");
	r = rb_reader_of(&ans);
	while (!err && rbr_more(&r)) {
		size_t tl, pl;
		const char *t = rbr_str(&r, &tl), *p = rbr_str(&r, &pl);
		char day[24], *end;
		long long d;
		int k;

		if (r.bad)
			break;
		for (k = 0; k < CH_NTABLES; k++)
			if (strlen(table_names[k]) == tl && !memcmp(t, table_names[k], tl))
				break;
		if (k == CH_NTABLES && tl == strlen(ROLLUP_TABLE) && !memcmp(t, ROLLUP_TABLE, tl))
			k = CH_ROLLUP;
		if (k == CH_NTABLES || !pl || pl >= sizeof(day))
			continue;
		memcpy(day, p, pl);
		day[pl] = '\0';
		/* Ours are days since 1970 (intDiv of ms): anything else is not
		 * a partition to drop. */
		errno = 0;
		d = strtoll(day, &end, 10);
		if (errno || *end || d < 0 || d >= INT64_MAX / CH_DAY_MS - 1)
			continue;
		err = array_grow((void **)&parts, &cap, nparts + 1, sizeof(*parts));
		if (!err)
			parts[nparts++] = (struct part){k, d};
	}
	if (!err && r.bad)
		err = -EIO;
	if (!err && nparts)
		qsort(parts, nparts, sizeof(*parts), cmp_part);
	for (i = 0; !err && i < nparts; i++) {
		if ((parts[i].day + 1) * CH_DAY_MS > before_ms)
			continue;
		sql.len = 0;
		err = sbuf__printf(&sql, "ALTER TABLE %s DROP PARTITION %" PRId64,
				   parts[i].table == CH_ROLLUP ? ROLLUP_TABLE
							       : table_names[parts[i].table],
				   parts[i].day);
		if (!err)
			err = run_sql(s, s->select_url, sql.buf, "drop an expired day");
	}
	if (!err) {
		sql.len = 0;
		err = sbuf__printf(&sql, "INSERT INTO meta VALUES ('expired_before', %" PRId64 ")",
				   before_ms);
		if (!err)
			err = run_sql(s, s->select_url, sql.buf, "record the expiry");
	}
	free(parts);
	sbuf__free(&sql);
	sbuf__free(&ans);
	return err;
}

/* ---- close ---- */

static void ch_store__close(struct store *base)
{
	struct ch_store *s = ch_store(base);
	size_t i;

	ch__close_conns(s);
	ch_store__free_caches(s);
	for (i = 0; i < 3; i++)
		ch_set__free(&s->known[i]);
	ch_batch__free(s->open);
	for (i = 0; i < CH_NTABLES; i++)
		free(s->insert_url[i]);
	free(s->select_url);
	ch_url__free(&s->url);
	pthread_mutex_destroy(&s->conn_lock);
	pthread_mutex_destroy(&s->known_lock);
	pthread_rwlock_destroy(&s->cache_lock);
	pthread_mutex_destroy(&s->batch_lock);
	pthread_cond_destroy(&s->batch_cond);
	pthread_mutex_destroy(&s->stats_lock);
	free(s);
}

static const struct store_ops ch_ops = {
	.name = "clickhouse",
	.put_windows = ch_store__put_windows,
	.put_points = ch_store__put_points,
	.select_tree = ch_store__select_tree,
	.timeline = ch_store__timeline,
	.label_names = ch_store__label_names,
	.label_values = ch_store__label_values,
	.points = ch_store__points,
	.put_spans = ch_store__put_spans,
	.spans = ch_store__spans,
	.series_totals = ch_store__series_totals,
	.expire = ch_store__expire,
	.stats = ch_store__stats,
	.close = ch_store__close,
};
