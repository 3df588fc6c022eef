/* histogram.h: a log-linear histogram of non-negative integer values
 * (nanoseconds, bytes) with exact count, sum, min and max, bounded memory and
 * quantiles of known relative resolution. gpu_metrics.c keeps one per series
 * that needs quantiles (the zernel_* summaries, the JSON snapshot) and, when
 * given fixed bounds, the exact cumulative counts of a Prometheus histogram.
 *
 * Resolution: values below HIST_SUB (32) have a bucket each and are exact.
 * Above, every power of two [2^e, 2^(e+1)) is cut into HIST_SUB equal
 * buckets, so a bucket is at most 1/32 of its lower bound wide; a quantile
 * reports the middle of its bucket (clamped to the observed min and max), so
 * its relative error against the true nearest-rank quantile is at most 1/64
 * (1.6 %).
 *
 * Memory: the header is about 540 bytes; bucket counters are allocated one
 * power of two (256 bytes) at a time on first use, so a latency histogram
 * spanning 1 us to 1 s uses about 5 KiB, and no histogram ever exceeds
 * 16 KiB. Not thread-safe: the owner locks. */
#ifndef SONDE_METRICS_HISTOGRAM_H
#define SONDE_METRICS_HISTOGRAM_H

#include <stddef.h>
#include <stdint.h>

#define HIST_SUB_BITS 5
#define HIST_SUB (1u << HIST_SUB_BITS)
/* Chunk 0 holds the exact values 0..31; chunk c >= 1 holds the octave
 * [2^(c+4), 2^(c+5)) in HIST_SUB buckets. */
#define HIST_CHUNKS (65 - HIST_SUB_BITS)

struct hist {
	uint64_t count, sum; /* exact; sum wraps after 2^64 (584 years of ns) */
	uint64_t min, max;   /* exact; meaningless while count is 0 */
	uint64_t *chunks[HIST_CHUNKS];
	/* Optional fixed bounds (ascending, inclusive upper bounds in the unit of
	 * the values) with the exact number of values <= each, for Prometheus
	 * histograms. bounds is borrowed and must outlive the histogram. */
	const uint64_t *bounds;
	size_t nbounds;
	uint64_t *bound_counts; /* nbounds + 1 (the last is +Inf), not cumulative */
};

/* bounds may be NULL (no fixed buckets). */
void hist__init(struct hist *h, const uint64_t *bounds, size_t nbounds);
/* Frees the buckets; h may be reused after hist__init. NULL is a no-op. */
void hist__fini(struct hist *h);
void hist__add(struct hist *h, uint64_t v);
/* Adds every value of src to dst (the fixed bounds must be the same array or
 * dst must have none). */
void hist__merge(struct hist *dst, const struct hist *src);

/* The nearest-rank q-quantile (q in [0, 1]): the value at rank ceil(q * count)
 * in sorted order, within the resolution above (exact for the first and last
 * ranks: the minimum and maximum); 0 when empty. */
uint64_t hist__quantile(const struct hist *h, double q);
/* Number of values <= bounds[i] (i < nbounds), or all values (i == nbounds). */
uint64_t hist__cumulative(const struct hist *h, size_t i);
/* Bytes of memory h holds besides the struct itself. */
size_t hist__mem(const struct hist *h);

/* The bucket of v and its range [*lo, *hi] (exposed for the tests). */
size_t hist_bucket(uint64_t v);
void hist_bucket_range(size_t b, uint64_t *lo, uint64_t *hi);

#endif
