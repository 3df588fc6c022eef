/* store.h: where `sonde server` keeps what agents send -- profile windows
 * (stacks with values, per series of labels) and metric points (GPU memory,
 * NCCL durations over time) -- and how it reads them back for the query API.
 *
 * One interface, several implementations behind an ops struct: the embedded
 * SQLite store (src/store/sqlite.c, the default, one file in --data DIR) and,
 * for fleets, ClickHouse (a later store_ops beside it). A concrete store
 * embeds struct store first and casts back.
 *
 * Data model. A series is a set of labels, one of which is "type" (the
 * profile type: "cpu", "gpu_launch", "gpu_wait", "offcpu", or any name a
 * Pyroscope client sends). A window is one series over [start_ms, end_ms)
 * with a bag of stacks, each with a value (samples, launches, nanoseconds:
 * the profile's unit). Stacks and function names are stored once: a sample
 * costs a few integers. Points are (name, labels, ts_ms, value).
 *
 * Every call is thread-safe (the server calls from many HTTP threads).
 * store__put_* return only once what they wrote is durable: a crash (kill -9)
 * afterwards loses none of it. Functions return 0 or a negative errno;
 * constructors NULL with errno set. */
#ifndef SONDE_STORE_STORE_H
#define SONDE_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct profile;
struct store;

/* Limits every store enforces (the server checks them first and answers 4xx;
 * a store given more returns -EINVAL). */
#define STORE_MAX_LABELS 32	     /* per series, "type" included */
#define STORE_MAX_LABEL_NAME 64	     /* bytes; [A-Za-z_][A-Za-z0-9_]* */
#define STORE_MAX_LABEL_VALUE 1024   /* bytes of valid UTF-8, no NUL */
#define STORE_MAX_METRIC_NAME 256    /* bytes; [A-Za-z_:][A-Za-z0-9_:]* */
#define STORE_MAX_MATCHERS 64	     /* per query */
#define STORE_MAX_MATCHER_VALUE 4096 /* bytes of valid UTF-8 (a regex may be long) */

struct store_label {
	const char *name, *value;
};

/* One series over [start_ms, end_ms): labels (any order; "type" required)
 * and the profile holding its stacks. The profile's pid, tid and comm are
 * ignored (they are labels of the series if they matter); its frames'
 * function and module names are kept, with kernel-ness; its type is ignored
 * in favour of the "type" label, its unit and period are kept per window.
 * Samples with a value of 0 are skipped. */
struct store_window {
	const struct store_label *labels;
	size_t nlabels;
	int64_t start_ms, end_ms; /* ms since the epoch, start < end */
	const struct profile *prof;
};

/* One metric point. */
struct store_point {
	const char *name; /* [A-Za-z_:][A-Za-z0-9_:]* */
	const struct store_label *labels;
	size_t nlabels;
	int64_t ts_ms;
	double value;
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
};

struct store_stats {
	uint64_t series, windows, stacks, functions, points;
	uint64_t samples;	/* sum over windows of their stacks' sample counts:
				* the number of sample rows a window held */
	uint64_t bytes_on_disk; /* the store's files, 0 if unknown */
};

/* Called by label reads, once per distinct string, in byte order. */
typedef void (*store_string_fn)(void *ctx, const char *s);
/* Called by store__points once per series: its labels (name first among
 * them is not guaranteed) and its points in time order. */
typedef void (*store_points_fn)(void *ctx, const char *name, const struct store_label *labels,
				size_t nlabels, const int64_t *ts_ms, const double *values,
				size_t n);

struct store_ops {
	const char *name; /* "sqlite", "clickhouse" */
	int (*put_windows)(struct store *s, const struct store_window *w, size_t n);
	int (*put_points)(struct store *s, const struct store_point *p, size_t n);
	int (*select)(struct store *s, const struct store_query *q, struct profile *out, char *unit,
		      size_t unitlen);
	int (*timeline)(struct store *s, const struct store_query *q, int64_t step_ms,
			double *values, size_t nsteps);
	int (*label_names)(struct store *s, const struct store_query *q, store_string_fn fn,
			   void *ctx);
	int (*label_values)(struct store *s, const struct store_query *q, const char *name,
			    store_string_fn fn, void *ctx);
	int (*points)(struct store *s, const char *name, const struct store_query *q,
		      store_points_fn fn, void *ctx);
	int (*expire)(struct store *s, int64_t before_ms);
	void (*stats)(struct store *s, struct store_stats *out);
	void (*close)(struct store *s);
};

struct store {
	const struct store_ops *ops;
};

/* The embedded store in dir (created if missing): one SQLite database in WAL
 * mode. NULL with errno set after logging why (unwritable dir, a file that
 * is not a Sonde store, a schema from a newer Sonde). */
struct store *store_sqlite__open(const char *dir);

/* Writes windows in one transaction: all of them or none. */
static inline int store__put_windows(struct store *s, const struct store_window *w, size_t n)
{
	return s->ops->put_windows(s, w, n);
}
static inline int store__put_points(struct store *s, const struct store_point *p, size_t n)
{
	return s->ops->put_points(s, p, n);
}

/* Adds to out (a profile made by the caller with profile__new) one sample
 * per distinct stack of the selected windows, its value summed (pid, tid 0,
 * comm ""); frames leaf first as stored. The unit of the windows is written
 * into unit ("" when none matched; the first one's when they differ). */
static inline int store__select(struct store *s, const struct store_query *q, struct profile *out,
				char *unit, size_t unitlen)
{
	return s->ops->select(s, q, out, unit, unitlen);
}

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
 * have a window in its range. */
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

/* The points of metric name whose series match q, in [from_ms, until_ms). */
static inline int store__points(struct store *s, const char *name, const struct store_query *q,
				store_points_fn fn, void *ctx)
{
	return s->ops->points(s, name, q, fn, ctx);
}

/* Deletes windows that ended and points taken before before_ms, and the
 * series, stacks and names nothing refers to any more. */
static inline int store__expire(struct store *s, int64_t before_ms)
{
	return s->ops->expire(s, before_ms);
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

/* Checks a label set against the limits above. 0 or -EINVAL with the reason
 * in err ("label name 'x y' is not [A-Za-z_][A-Za-z0-9_]*"). */
int store_check_labels(const struct store_label *labels, size_t n, char *err, size_t errlen);
/* Checks matchers against the limits above: valid label names, values of
 * valid UTF-8, regexes that compile (anchored, POSIX extended) and have no
 * back-reference (whose matching time has no bound). 0 or -EINVAL with the
 * reason in err. Reads given a bad matcher return -EINVAL too. */
int store_check_matchers(const struct store_matcher *m, size_t n, char *err, size_t errlen);

#endif
