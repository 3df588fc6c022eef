/* clickhouse_internal.h: what the files of the ClickHouse store share and
 * nothing else sees -- struct ch_store (the server's address, a pool of HTTP
 * connections, the caches of what is known to be stored), the HTTP calls
 * (clickhouse_http.c), RowBinary encoding and a bounded reader of it
 * (clickhouse_rowbinary.c), and the group commit of puts. clickhouse.c (open, schema, stats, expiry, close)
 * describes the design; clickhouse_put.c writes, clickhouse_query.c reads.
 * The unit tests include it to reach the RowBinary reader and the URL
 * parser. */
#ifndef SONDE_STORE_CLICKHOUSE_INTERNAL_H
#define SONDE_STORE_CLICKHOUSE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/clock.h"
#include "common/sbuf.h"
#include "store/store.h"
#include "store/store_internal.h"

/* Tables are partitioned by day (of a window's end, of a point's time):
 * retention drops whole days. */
#define CH_DAY_MS 86400000LL
/* The most a server's answer may hold (a select of a million stacks is
 * about 16 MiB, their frames a few hundred). */
#define CH_MAX_ANSWER (512u << 20)
/* The expiry mark: windows that ended by it, and points before it, are gone
 * (their days are dropped when whole). */
#define CH_EXPIRED_SQL "(SELECT max(value) FROM meta WHERE key = 'expired_before')"
/* The longest window stored, ms: written before any window that long. */
#define CH_MAX_WINDOW_SQL "(SELECT max(value) FROM meta WHERE key = 'max_window_ms')"
/* A day in nanoseconds: spans are partitioned by the day of their end, a
 * partition id equal to the other tables' (days since 1970). */
#define CH_DAY_NS (CH_DAY_MS * NS_PER_MS)
/* The rollup's hours. */
#define CH_HOUR_MS 3600000LL
/* Entries a cache may hold before it is emptied (and filled again), and
 * the bytes of names and labels the caches hold together (a function name
 * may take 4 KB: 4 million of them would be 16 GB). */
#define CH_MAX_CACHE (1u << 22)
#define CH_MAX_CACHE_BYTES (256u << 20)
/* Series ids one read may name (each is 21 bytes of SQL at most). */
#define CH_MAX_SERIES (1u << 22)

/* ---- the address (clickhouse.c) ---- */

struct ch_url {
	char *base;	/* "http://host:port/" */
	char *database; /* [A-Za-z_][A-Za-z0-9_]* */
	char *user, *password;
};

/* Parses "clickhouse://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE]" (port
 * 8123, database "sonde" by default; USER and PASSWORD are percent-decoded,
 * and come from SONDE_CLICKHOUSE_USER and SONDE_CLICKHOUSE_PASSWORD when
 * the URL has none). 0, or -EINVAL with the reason in err. */
int ch_url__parse(struct ch_url *u, const char *url, char *err, size_t errlen);
void ch_url__free(struct ch_url *u);

/* ---- RowBinary (clickhouse_rowbinary.c) ---- */

static inline int rb_u64(struct sbuf *b, uint64_t v)
{
	return sbuf__add(b, &v, 8); /* little-endian hosts only (x86, arm64) */
}
static inline int rb_u32(struct sbuf *b, uint32_t v)
{
	return sbuf__add(b, &v, 4);
}
static inline int rb_u8(struct sbuf *b, uint8_t v)
{
	return sbuf__add(b, &v, 1);
}
static inline int rb_f64(struct sbuf *b, double v)
{
	return sbuf__add(b, &v, 8);
}
int rb_varint(struct sbuf *b, uint64_t v);
int rb_str(struct sbuf *b, const char *s, size_t len);

/* A reader over an answer: every read checks the bounds and sets bad (and
 * returns zeros) past the end, so that a damaged answer is an error, never a
 * read out of bounds. */
struct rb_reader {
	const uint8_t *p, *end;
	bool bad;
};

uint64_t rbr_u64(struct rb_reader *r);
uint32_t rbr_u32(struct rb_reader *r);
uint8_t rbr_u8(struct rb_reader *r);
double rbr_f64(struct rb_reader *r);
/* A count (an array's length, a string's) of at most max; bad beyond. */
uint64_t rbr_count(struct rb_reader *r, uint64_t max);
/* A string: points into the answer (not NUL-terminated), *len its length. */
const char *rbr_str(struct rb_reader *r, size_t *len);
static inline struct rb_reader rb_reader_of(const struct sbuf *b)
{
	const uint8_t *p = (const uint8_t *)b->buf; /* NULL for an empty answer */

	return (struct rb_reader){p, p ? p + b->len : p, false};
}
static inline bool rbr_more(const struct rb_reader *r)
{
	return !r->bad && r->p < r->end;
}

/* ---- the caches ---- */

/* A set of 64-bit keys (an idmap whose values are 1). */
struct ch_set {
	struct idmap map;
};

/* ---- the store ---- */

/* What a put hands the group commit: its rows, RowBinary, by table. */
enum { CH_FUNCS, CH_SERIES, CH_STACKS, CH_WINDOWS, CH_POINTS, CH_SPANS, CH_NTABLES };

struct ch_batch {
	struct sbuf rows[CH_NTABLES];
	/* Keys ((id, day) mixed) that the rows add to the caches once written,
	 * by the cache: CH_FUNCS, CH_SERIES, CH_STACKS. */
	uint64_t *known[3];
	size_t nknown[3], cap_known[3];
	/* Functions written with their source: a read that cached one
	 * without it looks it up again. */
	uint64_t *src_funcs;
	size_t nsrc_funcs, cap_src_funcs;
	int refs; /* puts waiting for it */
	bool done;
	int err;
	uint64_t nwindows, nsamples, npoints;
};

struct ch_conn;

struct ch_store {
	struct store base;
	struct ch_url url;
	char *insert_url[CH_NTABLES]; /* the URL of an INSERT into each table */
	char *select_url;

	pthread_mutex_t conn_lock;
	struct ch_conn *idle; /* connections kept for the next call */

	/* What is known to be stored, by (id, day): a put writes a function,
	 * series or stack row only for the days it is not known in. */
	pthread_mutex_t known_lock;
	struct ch_set known[3];

	/* What reads learnt: series' labels, stacks' frames, functions. An
	 * id names the same thing forever (a content hash), so an entry is
	 * never stale, but for a function's source, which may become known
	 * later: a function without one is looked up again after a while. */
	pthread_rwlock_t cache_lock;
	struct idmap series_map, stack_map, func_map; /* id -> index + 1 */
	struct ch_series_ent *series;
	struct ch_stack_ent *stacks;
	struct ch_func_ent *funcs;
	size_t nseries, nstacks, nfuncs, cap_series, cap_stacks, cap_funcs;
	uint64_t *frame_ids; /* the stacks' function ids, leaf first */
	size_t nframe_ids, cap_frame_ids;
	size_t cache_bytes; /* of the series' labels and the functions' names */

	/* The group commit. */
	pthread_mutex_t batch_lock;
	pthread_cond_t batch_cond;
	struct ch_batch *open; /* the batch puts join */
	bool flushing;	       /* a put is writing a batch */
	_Atomic uint64_t point_ver;
	_Atomic int64_t max_window_ms; /* the longest window known stored */

	/* The last stats read, answered while the server is away. */
	pthread_mutex_t stats_lock;
	struct store_stats last_stats;
};

struct ch_series_ent {
	uint64_t id;
	struct labelset ls;
};

struct ch_stack_ent {
	uint64_t id;
	size_t off; /* its function ids: frame_ids[off .. off + n) */
	uint32_t n;
};

struct ch_func_ent {
	uint64_t id;
	char *name, *module, *file; /* one allocation */
	uint32_t start_line;
	bool kernel;
	int64_t fetched_ms; /* an entry without a source is looked up again */
};

static inline struct ch_store *ch_store(struct store *s)
{
	return (struct ch_store *)s;
}

/* ---- HTTP (clickhouse_http.c) ---- */

/* Runs a query: POSTs body (SQL, or the rows of an INSERT whose SQL is in
 * url) to url; the answer goes into out (NULL: dropped), at most
 * CH_MAX_ANSWER bytes. 0, -EAGAIN when the server can't be reached, timed
 * out or is overloaded (try again later), -ENOMEM, or -EIO for an error it
 * answered (logged with its message; what: "insert the windows"). */
int ch__post(struct ch_store *s, const char *url, const void *body, size_t len, struct sbuf *out,
	     const char *what);
/* Runs SQL text (a SELECT gets " FORMAT RowBinary" from the caller). */
static inline int ch__query(struct ch_store *s, const char *sql, struct sbuf *out, const char *what)
{
	return ch__post(s, s->select_url, sql, sql ? __builtin_strlen(sql) : 0, out, what);
}
void ch__close_conns(struct ch_store *s);
/* A URL for the base with the query string parameters added: "query" (SQL,
 * percent-encoded here) and the store's database. NULL on ENOMEM. */
char *ch__url(const struct ch_url *u, const char *sql);

/* Appends a ClickHouse string literal of s (quoted, every byte outside
 * printable ASCII escaped; clickhouse_rowbinary.c). */
int ch_sql_str(struct sbuf *b, const char *s);

/* ---- the caches (clickhouse.c) ---- */

bool ch_set__has(const struct ch_set *set, uint64_t key);
/* A ch_set__has(set, key) to come: see idmap__prefetch. */
static inline void ch_set__prefetch(const struct ch_set *set, uint64_t key)
{
	idmap__prefetch(&set->map, key);
}
int ch_set__add(struct ch_set *set, uint64_t key);
void ch_set__free(struct ch_set *set);
/* The key of an (id, day) pair in a ch_set: ids are hashes already, and
 * the set mixes its keys itself. */
static inline uint64_t ch_day_key(uint64_t id, int64_t day)
{
	return id ^ (0x9e3779b97f4a7c15ULL * (uint64_t)(day + 1));
}

/* ---- the operations of store.h, by file ---- */

int ch_store__put_windows(struct store *base, const struct store_window *w, size_t n);
int ch_store__put_points(struct store *base, const struct store_point *p, size_t n);
int ch_store__select_tree(struct store *base, const struct store_query *q, store_tree_fn fn,
			  void *ctx, char *unit, size_t unitlen);
int ch_store__timeline(struct store *base, const struct store_query *q, int64_t step_ms,
		       double *values, size_t nsteps);
int ch_store__label_names(struct store *base, const struct store_query *q, store_string_fn fn,
			  void *ctx);
int ch_store__label_values(struct store *base, const struct store_query *q, const char *name,
			   store_string_fn fn, void *ctx);
int ch_store__points(struct store *base, const char *name, const struct store_query *q,
		     store_points_fn fn, void *ctx);
int ch_store__series_totals(struct store *base, const struct store_query *q, store_series_fn fn,
			    void *ctx);
int ch_store__put_spans(struct store *base, const struct store_span *sp, size_t n);
int ch_store__spans(struct store *base, const struct store_query *q, size_t limit, store_span_fn fn,
		    void *ctx, bool *truncated);
void ch_store__free_caches(struct ch_store *s);
/* Functions ids[0..n) were written with their source: cached without one,
 * they are looked up again. */
void ch_store__sources_known(struct ch_store *s, const uint64_t *ids, size_t n);
void ch_batch__free(struct ch_batch *b);

/* A series' id: of its canonical labels, and the metric's name for a metric
 * series (NULL for a profile series). */
uint64_t ch_series_id(const struct labelset *ls, const char *metric);

/* Appends "WITH ... " naming a read's range for the conditions below:
 * lo_ms (from, or the expiry mark if later), hi_ms (until), max_win (the
 * longest window stored) and the whole hours in the range, [ha, hb) (none
 * when ha >= hb). */
int ch_sql_with_range(struct sbuf *b, int64_t from, int64_t until);
/* The hour of a window's start: the first column of windows' key, which
 * 18.16 uses only for conditions on this very expression (not on start_ms
 * itself), so every condition on start_ms comes with one on it too. */
#define CH_HOUR_OF_START "intDiv(start_ms, 3600000)"
/* The windows of the range: they end after lo_ms and start before hi_ms
 * (and so after lo_ms - max_win: the key skips the hours before). */
#define CH_IN_RANGE                                                                                \
	CH_HOUR_OF_START " >= intDiv(lo_ms - max_win, 3600000) AND " CH_HOUR_OF_START              \
			 " <= intDiv(hi_ms - 1, 3600000) AND end_ms > lo_ms AND start_ms < hi_ms"  \
			 " AND start_ms > lo_ms - max_win"
/* The windows of the range that start outside its whole hours (the rollup
 * holds the others). */
#define CH_AT_EDGES "(" CH_HOUR_OF_START " < ha OR " CH_HOUR_OF_START " >= hb)"
/* The rollup's rows of the whole hours. */
#define CH_WHOLE_HOURS "hour >= ha AND hour < hb"
/* The same for points: taken in [from, until) and not before the mark. */
int ch_sql_point_range(struct sbuf *b, int64_t from, int64_t until);

#endif
