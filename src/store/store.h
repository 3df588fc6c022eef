/* store.h: where `sonde server` keeps what agents send -- profile windows
 * (stacks with values, per series of labels) and metric points (GPU memory,
 * NCCL durations over time) -- and how it reads them back for the query API.
 *
 * One interface, several implementations behind an ops struct: the embedded
 * SQLite store (src/store/sqlite*.c, the default, one file in --data DIR) and,
 * for fleets, ClickHouse (src/store/clickhouse*.c, --store URL). A concrete store
 * embeds struct store first and casts back.
 *
 * Data model. A series is a set of labels, one of which is "type" (the
 * profile type: "cpu", "gpu_launch", "gpu_wait", "offcpu", or any name a
 * Pyroscope client sends). A window is one series over [start_ms, end_ms)
 * with a bag of stacks, each with a value (samples, launches, nanoseconds:
 * the profile's unit). Stacks and function names are stored once: a sample
 * costs a few integers. Points are (name, labels, ts_ms, value). Spans
 * (struct store_span) are the GPU timeline's kernels and copies, by series
 * of labels as points are, under the reserved metric name STORE_SPAN_METRIC.
 *
 * Every call is thread-safe (the server calls from many HTTP threads).
 * store__put_* return only once what they wrote is durable: a crash (kill -9)
 * afterwards loses none of it. Functions return 0 or a negative errno;
 * constructors NULL with errno set. */
#ifndef SONDE_STORE_STORE_H
#define SONDE_STORE_STORE_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/clock.h"

struct profile;
struct store;

/* Limits every store enforces (the server checks them first and answers 4xx;
 * a store given more returns -EINVAL). */
#define STORE_MAX_PUT_KEY 256	     /* bytes of store_window.key */
#define STORE_MAX_LABELS 32	     /* per series, "type" included */
#define STORE_MAX_LABEL_NAME 64	     /* bytes; [A-Za-z_][A-Za-z0-9_]* */
#define STORE_MAX_LABEL_VALUE 1024   /* bytes of valid UTF-8, no NUL */
#define STORE_MAX_METRIC_NAME 256    /* bytes; [A-Za-z_:][A-Za-z0-9_:]* */
#define STORE_MAX_MATCHERS 64	     /* per query */
#define STORE_MAX_MATCHER_VALUE 4096 /* bytes of valid UTF-8 (a regex may be long) */

struct store_label {
	const char *name, *value;
};

/* The label that keeps projects apart in one store: `sonde server --auth`
 * sets it on every series and point it ingests (to "" without --auth). The
 * bounds of struct store_quota hold per value of it. */
#define STORE_PROJECT_LABEL "__project"

/* What one project may hold: its series (profile and metric series
 * together), and the bytes its function names take -- a name counts against
 * the project that first sent it, for as long as it is stored: its bytes,
 * its source file's, and 96 for its entry (names are cut at
 * PROF_MAX_STRING bytes). A put that would add a series or a function to a
 * project past a bound writes nothing and returns -EDQUOT, and
 * store_last_refusal() says which bound. 0: no bound. A store starts with
 * the defaults. */
struct store_quota {
	uint64_t max_series, max_name_bytes;
};
#define STORE_DEFAULT_MAX_SERIES 1000000
#define STORE_DEFAULT_MAX_NAME_BYTES (512ULL << 20)

enum store_bound { STORE_BOUND_SERIES, STORE_BOUND_NAMES, STORE_NBOUNDS };
struct store_refusal {
	enum store_bound bound;
	char project[65];	  /* cut to fit */
	uint64_t have, more, max; /* what it holds, what the put would add */
};
/* The refusal of this thread's last store call that returned -EDQUOT. */
const struct store_refusal *store_last_refusal(void);

/* One series over [start_ms, end_ms): labels (any order; "type" required
 * and not empty) and the profile holding its stacks. The profile's pid, tid
 * and comm are ignored (they are labels of the series if they matter); its
 * frames' function and module names are kept, with kernel-ness (addresses
 * and mappings are not); its type is ignored in favour of the "type" label,
 * its unit and period are kept per window. Samples with a value of 0 are
 * skipped, and a window left with none stores nothing; samples of the same
 * stack are summed. A label with the value "" is the label missing: it is
 * not stored. Two windows of one series and range (in one put or not) add
 * up: a retried put counts twice. */
struct store_window {
	const struct store_label *labels;
	size_t nlabels;
	int64_t start_ms, end_ms; /* ms since the epoch, 0 <= start < end */
	const struct profile *prof;
	/* The put's key (read from the first window; NULL: none): a put whose
	 * key was stored before writes nothing and returns 1, so that a client
	 * retrying a put whose answer it lost doesn't count it twice. A key
	 * belongs to the series of the put's first window that stores
	 * something: the same key with another series (another project's:
	 * the server's project label is one of the labels) is another put.
	 * Kept until the windows it came with expire. At most 256 bytes. */
	const char *key;
};

/* One metric point. A point of the same name, labels and ts_ms as one
 * stored replaces it. NaN is kept (as NaN). */
struct store_point {
	const char *name; /* [A-Za-z_:][A-Za-z0-9_:]* */
	const struct store_label *labels;
	size_t nlabels;
	int64_t ts_ms;
	double value;
};

/* One span of a timeline: a kernel or a copy that ran on a GPU, from
 * start_ns to end_ns (nanoseconds since the epoch), on its device and
 * stream, with the series labels of its process (node, pid, process...;
 * the server adds the project's). kind is "kernel" or a copy's kind
 * ("memcpy HtoD"...), name the kernel's (demangled) or the copy's label,
 * from a short description of the CPU stack that launched it ("" when
 * unknown). A span of the same series, start_ns, device, stream and
 * correlation as one stored replaces it (a retried put counts once). */
#define STORE_SPAN_METRIC "__gpu_span"
#define STORE_MAX_SPAN_NAME 2048 /* bytes of name, and of from */
#define STORE_MAX_SPAN_KIND 32
#define STORE_MAX_SPAN_NS (3600LL * NS_PER_SEC) /* longer spans are refused */
struct store_span {
	const struct store_label *labels;
	size_t nlabels;
	int64_t start_ns, end_ns; /* 0 <= start_ns <= end_ns <= start_ns + STORE_MAX_SPAN_NS */
	int32_t device;
	uint32_t stream, correlation, tid; /* tid: the launching thread, 0: unknown */
	uint64_t bytes;			   /* a copy's; 0 for a kernel */
	const char *kind, *name, *from;	   /* valid UTF-8, within the bounds above */
};

/* A label matcher, as in Prometheus: name="v", name!="v", name=~"re",
 * name!~"re" (POSIX extended regex, anchored at both ends). A label the
 * series lacks has the value "". */
enum store_match { STORE_EQ, STORE_NE, STORE_RE, STORE_NRE };
struct store_matcher {
	const char *name, *value;
	enum store_match op;
};

/* What a read selects: the series matching every matcher, over windows
 * (or points) that overlap [from_ms, until_ms). For profile reads a "type"
 * matcher is usual but not required. */
struct store_query {
	const struct store_matcher *matchers;
	size_t nmatchers;
	int64_t from_ms, until_ms;
	/* When the read must give up (common/clock.h mono_ns), 0 for never:
	 * matching the series and reading the windows stop past it and the
	 * read returns -ETIMEDOUT, so that no selector (a regex costly on
	 * every series) holds a thread and the store for long. */
	uint64_t deadline_ns;
};

struct store_stats {
	/* Profile series (metric series are not counted). */
	uint64_t series;
	/* (series, window) pairs stored. */
	uint64_t windows;
	/* Stored stacks: for the SQLite store, the nodes of its stack trie (a
	 * stack of n frames adds at most n, a prefix shared with a stored
	 * stack nothing). */
	uint64_t stacks;
	/* Distinct (name, module, kernel). */
	uint64_t functions;
	uint64_t points;
	uint64_t spans; /* GPU timeline spans */
	/* Sum over windows of their distinct stacks: the (stack, value) rows
	 * stored, not the sum of the values. */
	uint64_t samples;
	/* The store's files, 0 if unknown. */
	uint64_t bytes_on_disk;
};

/* Called by label reads, once per distinct string, in byte order. */
typedef void (*store_string_fn)(void *ctx, const char *s);
/* Called by store__points once per series: its labels (name first among
 * them is not guaranteed) and its points in time order. */
typedef void (*store_points_fn)(void *ctx, const char *name, const struct store_label *labels,
				size_t nlabels, const int64_t *ts_ms, const double *values,
				size_t n);

/* Called by store__series_totals once per matching profile series with a
 * window in range: its labels, the sum of its windows' values there (at
 * most INT64_MAX: sums stop there), and the start of the first of them and
 * the end of the last. */
typedef void (*store_series_fn)(void *ctx, const struct store_label *labels, size_t nlabels,
				int64_t total, int64_t first_ms, int64_t last_ms);

/* A select's stacks as a forest of frames, handed to a store_tree_fn by
 * store__select_tree: what a flame graph is built from, root down, without
 * a profile made and sorted first. A stack is a node and the nodes above it
 * to one without a parent (its outermost frame); its value is the node's.
 * Nodes come each after its parent and in no other set order; two children
 * of one node may have the same function (a store that keeps no trie hands
 * each stack over as a chain of its own), so that a reader merges by what
 * it shows, never by node. Every stack with a value is a distinct stack of
 * the selected windows with its values summed, as store__select sums them;
 * nodes with no value lie on the way to one; a stack of no frames (rare)
 * is root_value. At most 512 frames deep (profile.h's PROF_MAX_FRAMES).
 * The strings live as long as the call. */
struct store_func {
	const char *name;    /* the function's (never "") */
	const char *module;  /* its module's path, "" when unknown */
	const char *file;    /* its source file, "" when unknown */
	uint32_t start_line; /* its first line, 0 when unknown */
	bool kernel;
};
#define STORE_NO_PARENT UINT32_MAX
struct store_node {
	uint32_t parent; /* an earlier node's index, or STORE_NO_PARENT */
	uint32_t func;	 /* index in funcs */
	int64_t value;	 /* summed over the stacks that end here; 0: none do */
};
struct store_tree {
	const struct store_func *funcs;
	size_t nfuncs;
	const struct store_node *nodes;
	size_t nnodes;
	int64_t root_value; /* of the stack of no frames, 0 when none */
	int64_t period;	    /* the unit's (store__select's out->period), 0 when unknown */
};
/* Called once by store__select_tree with the selection; what it returns
 * (0 or a negative errno) the select returns. It must not call the store. */
typedef int (*store_tree_fn)(void *ctx, const struct store_tree *t);

/* Called by store__spans once per span: its series' labels (sorted by
 * name, the span's own labels field unset) and the span; borrowed for the
 * call. */
typedef void (*store_span_fn)(void *ctx, const struct store_label *labels, size_t nlabels,
			      const struct store_span *sp);

struct store_ops {
	const char *name; /* "sqlite", "clickhouse" */
	int (*put_windows)(struct store *s, const struct store_window *w, size_t n);
	int (*put_points)(struct store *s, const struct store_point *p, size_t n);
	/* A store gives its selects as a profile (select) or as a tree
	 * (select_tree), or both; store.c makes the other from the one it
	 * has. */
	int (*select)(struct store *s, const struct store_query *q, struct profile *out, char *unit,
		      size_t unitlen);
	int (*select_tree)(struct store *s, const struct store_query *q, store_tree_fn fn,
			   void *ctx, char *unit, size_t unitlen);
	int (*timeline)(struct store *s, const struct store_query *q, int64_t step_ms,
			double *values, size_t nsteps);
	int (*label_names)(struct store *s, const struct store_query *q, store_string_fn fn,
			   void *ctx);
	int (*label_values)(struct store *s, const struct store_query *q, const char *name,
			    store_string_fn fn, void *ctx);
	int (*points)(struct store *s, const char *name, const struct store_query *q,
		      store_points_fn fn, void *ctx);
	int (*series_totals)(struct store *s, const struct store_query *q, store_series_fn fn,
			     void *ctx);
	int (*put_spans)(struct store *s, const struct store_span *sp, size_t n);
	int (*spans)(struct store *s, const struct store_query *q, size_t limit, store_span_fn fn,
		     void *ctx, bool *truncated);
	int (*expire)(struct store *s, int64_t before_ms);
	/* NULL: the store enforces no quota. */
	int (*set_quota)(struct store *s, const struct store_quota *q);
	void (*stats)(struct store *s, struct store_stats *out);
	void (*close)(struct store *s);
};

struct store {
	const struct store_ops *ops;
};

/* The embedded store in dir (created if missing, with its parents): one
 * SQLite database, DIR/sonde.db, in WAL mode with synchronous=FULL, locked
 * for this process (DIR/sonde.lock). NULL with errno set after logging why:
 * EBUSY another process has it open, EINVAL DIR/sonde.db is not a Sonde
 * store (or is damaged), ENOTSUP it was written by a newer Sonde, or the
 * errno of the failed mkdir/open (EACCES, ENOSPC...). */
struct store *store_sqlite__open(const char *dir);

/* The store of a ClickHouse server (src/store/clickhouse*.c), by URL:
 * "clickhouse://[USER[:PASSWORD]@]HOST[:PORT][/DATABASE]" (its HTTP port,
 * 8123 by default; database "sonde" by default; USER and PASSWORD from
 * SONDE_CLICKHOUSE_USER and SONDE_CLICKHOUSE_PASSWORD when the URL names
 * none). The database and its tables are created when missing; several
 * servers may share one database. NULL with errno set after logging why:
 * EINVAL a malformed URL, ECONNREFUSED ClickHouse can't be reached, ENOTSUP
 * the database was written by a newer Sonde, EIO ClickHouse refused (the
 * log has its message). Its calls return -EAGAIN while ClickHouse is away
 * (the server answers 503 with Retry-After). */
struct store *store_clickhouse__open(const char *url);
/* Opens the store that spec names: a clickhouse:// URL, else the embedded
 * store in the directory spec. */
struct store *store__open(const char *spec);

/* Writes windows in one transaction: all of them or none. Returns 0, 1 for a
 * keyed put already stored (nothing written), or -EINVAL (labels
 * past the limits, no "type", a bad range, no profile, a malformed profile:
 * nothing is written), -EOVERFLOW (a value sum past INT64_MAX), -ENOSPC,
 * -EIO. */
static inline int store__put_windows(struct store *s, const struct store_window *w, size_t n)
{
	return s->ops->put_windows(s, w, n);
}
static inline int store__put_points(struct store *s, const struct store_point *p, size_t n)
{
	return s->ops->put_points(s, p, n);
}

/* Reads return -ETIMEDOUT past their query's deadline_ns. */

/* Adds to out (a profile made by the caller with profile__new) one sample
 * per distinct stack of the selected windows, its value summed (pid, tid 0,
 * comm ""); frames leaf first as stored, with function, module and
 * kernel-ness only, in one order whatever the store and however the data
 * came: by stack, root first, frame by frame (name, module, kernel-ness,
 * source), so that every answer made from it (speedscope, pprof) is the same
 * from every store. The unit of the windows is written into unit ("" when
 * none matched; when they differ, the earliest window's, and of windows of
 * the earliest range the first by unit, then period), and its period into
 * out->period when one matched. Sums stop at INT64_MAX: a stack's, or the
 * total, past it reads INT64_MAX (out->saturate is set), so that no stored
 * value fails a read. -EINVAL for a bad
 * query (from_ms >= until_ms, a matcher store_check_matchers refuses). */
int store__select(struct store *s, const struct store_query *q, struct profile *out, char *unit,
		  size_t unitlen);

/* The same selection as a tree (struct store_tree), handed to fn once,
 * with the unit written as store__select writes it: the stacks in the
 * store's own order, neither sorted nor copied into a profile, for an
 * answer whose order is its own (a flame graph orders children by name
 * and picks what a name shows by a rule of its own, flame.h). fn's error,
 * or store__select's. */
int store__select_tree(struct store *s, const struct store_query *q, store_tree_fn fn, void *ctx,
		       char *unit, size_t unitlen);

/* Hands p's stacks to fn as a tree: each location a function, each sample
 * with a value a chain of nodes of its own (a profile keeps no trie) --
 * store__select_tree for a store that reads profiles. fn's error, or
 * -ENOMEM. */
int store_tree__of_profile(const struct profile *p, store_tree_fn fn, void *ctx);

/* Sums of the selected windows' values per step: values[i] covers
 * [from_ms + i*step_ms, from_ms + (i+1)*step_ms). A window that spans steps
 * is spread over them in proportion to its overlap. values has nsteps
 * entries, zeroed by the call. */
static inline int store__timeline(struct store *s, const struct store_query *q, int64_t step_ms,
				  double *values, size_t nsteps)
{
	return s->ops->timeline(s, q, step_ms, values, nsteps);
}

/* Label names / values of the series of profile windows that match q and
 * have a window in its range. Values are never "". */
static inline int store__label_names(struct store *s, const struct store_query *q,
				     store_string_fn fn, void *ctx)
{
	return s->ops->label_names(s, q, fn, ctx);
}
static inline int store__label_values(struct store *s, const struct store_query *q,
				      const char *name, store_string_fn fn, void *ctx)
{
	return s->ops->label_values(s, q, name, fn, ctx);
}

/* The points of metric name whose series match q, in [from_ms, until_ms);
 * fn is called for each series with at least one, in the byte order of
 * their sorted labels. */
static inline int store__points(struct store *s, const char *name, const struct store_query *q,
				store_points_fn fn, void *ctx)
{
	return s->ops->points(s, name, q, fn, ctx);
}

/* The matching profile series with a window in range, with their totals
 * and the extent of their windows (store_series_fn), in no set order; what
 * the UI opens on (the busiest process, a range fitted to the data). 0,
 * -EINVAL for a bad query, -ENOMEM, or the store's error. */
static inline int store__series_totals(struct store *s, const struct store_query *q,
				       store_series_fn fn, void *ctx)
{
	return s->ops->series_totals(s, q, fn, ctx);
}

/* Writes spans in one transaction (or one INSERT): all or none. 0,
 * -EINVAL (a span past the bounds of struct store_span: nothing written),
 * -EDQUOT, -ENOSPC, -EIO, -EAGAIN. */
static inline int store__put_spans(struct store *s, const struct store_span *sp, size_t n)
{
	return s->ops->put_spans(s, sp, n);
}

/* The spans of the series matching q that overlap [from_ms, until_ms), in
 * order of start (then device, stream, correlation), the first limit of
 * them; *truncated says whether more were there. Spans that ended by the
 * expiry mark are never read. */
static inline int store__spans(struct store *s, const struct store_query *q, size_t limit,
			       store_span_fn fn, void *ctx, bool *truncated)
{
	return s->ops->spans(s, q, limit, fn, ctx, truncated);
}

/* Deletes windows that ended by before_ms (end_ms <= before_ms) and points
 * taken before it, and the series, stacks and function names nothing refers
 * to any more. Bounded work per call (the SQLite store: 2000 window rows,
 * 100 000 points, 50 000 stacks), so that the server can call it every
 * minute without a stall: a backlog is worked off over successive calls.
 * Series and stacks are judged by the hour they were last used in: they go
 * once the hour after their last window's end is older than before_ms.
 * From the call on, reads never see a window that ended by the latest
 * before_ms or a point taken before it, even one left for a later call or
 * written afterwards: what is expired is gone at once, in every store (the
 * ClickHouse store drops whole days and filters the rest). */
static inline int store__expire(struct store *s, int64_t before_ms)
{
	return s->ops->expire(s, before_ms);
}

/* Sets the bounds of each project (struct store_quota). 0, or -ENOTSUP
 * for a store that enforces none (ClickHouse). */
static inline int store__set_quota(struct store *s, const struct store_quota *q)
{
	return s->ops->set_quota ? s->ops->set_quota(s, q) : -ENOTSUP;
}

static inline void store__stats(struct store *s, struct store_stats *out)
{
	s->ops->stats(s, out);
}

/* NULL is a no-op. */
static inline void store__close(struct store *s)
{
	if (s)
		s->ops->close(s);
}

/* Whether name is a label name: [A-Za-z_][A-Za-z0-9_]*, at most
 * STORE_MAX_LABEL_NAME bytes. */
bool label_name_valid(const char *name);
/* An OpenTelemetry-style name as Pyroscope takes it: each '.' of name
 * becomes '_' (otel.scope.name: otel_scope_name), in place; then whether it
 * is a label name. Grafana's Pyroscope SDKs send such names; a selector may
 * name them either way. */
bool label_name_sanitize(char *name);
/* Whether name is a metric name: [A-Za-z_:][A-Za-z0-9_:]*, at most
 * STORE_MAX_METRIC_NAME bytes. */
bool metric_name_valid(const char *name);
/* Checks a label set against the limits above. 0 or -EINVAL with the reason
 * in err ("label name 'x y' is not [A-Za-z_][A-Za-z0-9_]*"). */
int store_check_labels(const struct store_label *labels, size_t n, char *err, size_t errlen);
/* Checks matchers against the limits above: valid label names, values of
 * valid UTF-8, regexes that pass common/regex.h's guard and compile
 * (anchored, POSIX extended). 0 or -EINVAL with the reason in err. Reads
 * given a bad matcher return -EINVAL too. */
int store_check_matchers(const struct store_matcher *m, size_t n, char *err, size_t errlen);
/* Checks span i of a put against the bounds of struct store_span and its
 * labels: 0, or -EINVAL with the reason in err (may be NULL; "span 3: it
 * lasts longer than an hour"). */
int store_check_span(const struct store_span *sp, size_t i, char *err, size_t errlen);

#endif
