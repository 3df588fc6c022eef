/* sat.h: 64-bit sums and products that stop at INT64_MAX (INT64_MIN)
 * instead of wrapping or failing. What reads add up is stored values, and
 * a value may be anything up to INT64_MAX: a read that sums two of them
 * answers with the sum pinned at the top, never an error (a profile's
 * sums when it saturates, the store's per-stack sums, flame graph nodes,
 * totals, pprof's value x period). */
#ifndef SONDE_COMMON_SAT_H
#define SONDE_COMMON_SAT_H

#include <stdint.h>

static inline int64_t sat_add_i64(int64_t a, int64_t b)
{
	int64_t r;

	if (__builtin_add_overflow(a, b, &r))
		return b > 0 ? INT64_MAX : INT64_MIN;
	return r;
}

static inline int64_t sat_mul_i64(int64_t a, int64_t b)
{
	int64_t r;

	if (__builtin_mul_overflow(a, b, &r))
		return (a < 0) != (b < 0) ? INT64_MIN : INT64_MAX;
	return r;
}

#endif
