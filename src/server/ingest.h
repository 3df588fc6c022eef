/* ingest.h: turning what senders POST into what the store keeps -- an
 * agent's pprof window split into series by its samples' labels, a
 * Pyroscope client's folded or pprof profile, and metric points in JSON.
 * Pure functions over request bodies (no HTTP, no store), used by
 * api_ingest.c and fuzzed by tests/fuzz/fuzz_ingest.c. Every function
 * bounds what it allocates by the body and the limits it is given, and
 * answers malformed input with -EINVAL and a message. */
#ifndef SONDE_SERVER_INGEST_H
#define SONDE_SERVER_INGEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/idmap.h"
#include "server/lset.h"
#include "store/store.h"

struct profile;

/* Windows time when the sender gives none and the pprof has no duration. */
#define INGEST_DEFAULT_WINDOW_MS 10000

/* One series of a batch: its labels ("type" among them) and its stacks. */
struct ingest_series {
	struct lset labels;
	struct profile *prof;
	char *key; /* the sample labels that told it apart */
	size_t keylen;
	uint32_t hash;
	/* While a pprof is split: its frames (by frame id) already in prof,
	 * and their location there + 1. */
	struct idmap memo;
};

/* What one request brings: series over one window. */
struct ingest_batch {
	struct ingest_series *series;
	size_t n, cap;
	struct idmap index; /* key hash -> series + 1 */
	uint64_t samples;   /* samples with a non-zero value taken */
	int64_t start_ms, end_ms;
	struct store_window *windows; /* ingest_batch__windows() */
};

struct ingest_opts {
	const struct lset *labels; /* added to every series; a sample's own win */
	const char *type;	   /* the series' type; NULL: the pprof's */
	int64_t start_ms, end_ms;  /* the window; 0: the pprof's, or the last 10 s */
	int64_t now_ms;
	size_t max_bytes;  /* decompressed pprof */
	size_t max_heap;   /* its unpacked message (16 times its size at most) */
	size_t max_series; /* per batch */
	/* Folded input: the unit and period of its values. */
	const char *unit;
	int64_t period;
	/* pprof: the sample type whose values to take (NULL: the last one;
	 * -ENOENT when the profile has none of that name), and the unit to
	 * give them (NULL: the profile's). */
	const char *sample_type, *sample_unit;
};

/* Splits a pprof (gzip or raw) into series of b (zeroed by the caller):
 * the labels of o, then each sample's string labels and numeric pid (tid
 * and other numbers dropped), service_name defaulting to comm, and type.
 * A sample's value is its last one; cpu/nanoseconds values are divided by
 * the period into samples. 0, or with a message in err: -EINVAL (malformed
 * protobuf, bad labels, negative values, bad window), -EFBIG (larger than
 * o->max_bytes decompressed or o->max_heap unpacked), -E2BIG (more than
 * o->max_series series), -ENOMEM. */
int ingest__pprof(struct ingest_batch *b, const void *body, size_t len, const struct ingest_opts *o,
		  char *err, size_t errlen);

/* Pyroscope's multipart pprof with a sample_type_config part (cfg, JSON:
 * {"TYPE": {"units": U, "display-name": NAME, "aggregation": "sum" |
 * "average", "cumulative": false, "sampled": B}, ...}): a series per
 * configured sample type the profile has, typed NAME (else TYPE) in unit U
 * (else the profile's); types it lacks are skipped, as Pyroscope does. At
 * most INGEST_MAX_SAMPLE_TYPES entries; {} is as no config (ingest__pprof).
 * -EINVAL with a message: bad JSON, a bad entry, a cumulative type (Sonde
 * keeps deltas, it has no previous profile to subtract), none of the types
 * in the profile; else what ingest__pprof returns. */
#define INGEST_MAX_SAMPLE_TYPES 32
int ingest__pprof_typed(struct ingest_batch *b, const void *body, size_t len, const char *cfg,
			size_t cfglen, const struct ingest_opts *o, char *err, size_t errlen);

/* Reads Pyroscope folded text ("frame;...;leaf COUNT" per line, root
 * first; with lines, "frame;...;leaf" counting 1 each) into one series
 * labelled by o->labels (which must hold "type"). Errors as above, naming
 * the line. */
int ingest__folded(struct ingest_batch *b, const void *body, size_t len, bool lines,
		   const struct ingest_opts *o, char *err, size_t errlen);

/* Fills b->windows from the series (borrowing their labels and profiles);
 * 0 or -ENOMEM. */
int ingest_batch__windows(struct ingest_batch *b);
void ingest_batch__free(struct ingest_batch *b);

/* Metric points of a JSON body {"points": [{"name", "labels", "ts_ms",
 * "value"}, ...]}. */
struct ingest_points {
	struct store_point *p;
	struct lset *labels; /* one per point */
	size_t n;
};

/* 0, -EINVAL with err set, -EFBIG past max_points, -ENOMEM. */
int ingest_points__parse(struct ingest_points *out, const void *body, size_t len, size_t max_points,
			 char *err, size_t errlen);
void ingest_points__free(struct ingest_points *pts);

/* GPU timeline spans of a JSON body {"series": [{"labels": {...},
 * "spans": [{"start_ns", "end_ns", "device", "stream", "correlation",
 * "tid", "bytes", "kind", "name", "from"}, ...]}, ...]} (docs/api.md). The
 * spans' strings point into root, kept until ingest_spans__free; their
 * labels are left for the caller to point at labels[i] (first). */
struct ingest_spans {
	struct store_span *sp;
	struct lset *labels; /* one per series */
	size_t *first;	     /* series i's spans: sp[first[i] .. first[i + 1]) */
	size_t n, nseries;
	void *root; /* the parsed body (json_t) */
};

/* 0, -EINVAL with err set, -EFBIG past max_spans spans or max_series
 * series, -ENOMEM. */
int ingest_spans__parse(struct ingest_spans *out, const void *body, size_t len, size_t max_spans,
			size_t max_series, char *err, size_t errlen);
void ingest_spans__free(struct ingest_spans *in);

#endif
