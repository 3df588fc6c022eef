/* histogram.c: the log-linear histogram of histogram.h -- bucket arithmetic,
 * lazily allocated chunks, exact fixed-bound counts and nearest-rank
 * quantiles. Used by gpu_metrics.c for every latency, duration and wait. */
#include "metrics/histogram.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "common/search.h"

size_t hist_bucket(uint64_t v)
{
	unsigned e;

	if (v < HIST_SUB)
		return (size_t)v;
	e = 63 - (unsigned)__builtin_clzll(v);
	/* v >> (e - 5) is the top six bits, in [32, 64). */
	return (size_t)(e - HIST_SUB_BITS) * HIST_SUB + (size_t)(v >> (e - HIST_SUB_BITS));
}

void hist_bucket_range(size_t b, uint64_t *lo, uint64_t *hi)
{
	unsigned e, shift;
	uint64_t m;

	if (b < HIST_SUB) {
		*lo = *hi = b;
		return;
	}
	e = (unsigned)(b / HIST_SUB) + HIST_SUB_BITS - 1;
	m = b % HIST_SUB + HIST_SUB;
	shift = e - HIST_SUB_BITS;
	*lo = m << shift;
	*hi = *lo + ((1ull << shift) - 1);
}

void hist__init(struct hist *h, const uint64_t *bounds, size_t nbounds)
{
	memset(h, 0, sizeof(*h));
	h->bounds = bounds;
	h->nbounds = bounds ? nbounds : 0;
}

void hist__fini(struct hist *h)
{
	if (!h)
		return;
	for (size_t c = 0; c < HIST_CHUNKS; c++)
		free(h->chunks[c]);
	free(h->bound_counts);
	memset(h, 0, sizeof(*h));
}

static void add_n(struct hist *h, size_t b, uint64_t n)
{
	size_t c = b / HIST_SUB;

	if (!h->chunks[c])
		h->chunks[c] = xcalloc(HIST_SUB, sizeof(uint64_t));
	h->chunks[c][b % HIST_SUB] += n;
}

/* Index of the first bound >= v (nbounds when above them all). */
static size_t bound_index(const struct hist *h, uint64_t v)
{
	return PARTITION_POINT(h->nbounds, i, h->bounds[i] < v);
}

void hist__add(struct hist *h, uint64_t v)
{
	add_n(h, hist_bucket(v), 1);
	if (h->nbounds) {
		if (!h->bound_counts)
			h->bound_counts = xcalloc(h->nbounds + 1, sizeof(uint64_t));
		h->bound_counts[bound_index(h, v)]++;
	}
	if (!h->count || v < h->min)
		h->min = v;
	if (!h->count || v > h->max)
		h->max = v;
	h->count++;
	h->sum += v;
}

void hist__merge(struct hist *dst, const struct hist *src)
{
	if (!src->count)
		return;
	for (size_t c = 0; c < HIST_CHUNKS; c++) {
		if (!src->chunks[c])
			continue;
		for (size_t i = 0; i < HIST_SUB; i++)
			if (src->chunks[c][i])
				add_n(dst, c * HIST_SUB + i, src->chunks[c][i]);
	}
	if (dst->nbounds && src->bound_counts && dst->bounds == src->bounds) {
		if (!dst->bound_counts)
			dst->bound_counts = xcalloc(dst->nbounds + 1, sizeof(uint64_t));
		for (size_t i = 0; i <= dst->nbounds; i++)
			dst->bound_counts[i] += src->bound_counts[i];
	}
	if (!dst->count || src->min < dst->min)
		dst->min = src->min;
	if (!dst->count || src->max > dst->max)
		dst->max = src->max;
	dst->count += src->count;
	dst->sum += src->sum;
}

uint64_t hist__quantile(const struct hist *h, double q)
{
	uint64_t rank, seen = 0;

	if (!h->count)
		return 0;
	if (!(q > 0))
		return h->min;
	if (q >= 1)
		return h->max;
	rank = (uint64_t)ceil(q * (double)h->count);
	/* The first and last ranks are the exact minimum and maximum. */
	if (rank <= 1)
		return h->min;
	if (rank >= h->count)
		return h->max;
	for (size_t c = 0; c < HIST_CHUNKS; c++) {
		if (!h->chunks[c])
			continue;
		for (size_t i = 0; i < HIST_SUB; i++) {
			uint64_t lo, hi, mid;

			seen += h->chunks[c][i];
			if (seen < rank)
				continue;
			hist_bucket_range(c * HIST_SUB + i, &lo, &hi);
			mid = lo + (hi - lo) / 2;
			/* The extremes are known exactly: a bucket holding the
			 * minimum or maximum never reports beyond it. */
			if (mid < h->min)
				mid = h->min;
			if (mid > h->max)
				mid = h->max;
			return mid;
		}
	}
	return h->max;
}

uint64_t hist__cumulative(const struct hist *h, size_t i)
{
	uint64_t n = 0;

	if (i >= h->nbounds || !h->bound_counts)
		return i >= h->nbounds ? h->count : 0;
	for (size_t j = 0; j <= i; j++)
		n += h->bound_counts[j];
	return n;
}

size_t hist__mem(const struct hist *h)
{
	size_t n = h->bound_counts ? (h->nbounds + 1) * sizeof(uint64_t) : 0;

	for (size_t c = 0; c < HIST_CHUNKS; c++)
		if (h->chunks[c])
			n += HIST_SUB * sizeof(uint64_t);
	return n;
}
