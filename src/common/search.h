/* search.h: the one binary search. The symbol tables (ELF, kallsyms, perf
 * maps), the process images, the histogram's bounds, the pid filter and the
 * sorted label and name lists all find their place with it. */
#ifndef SONDE_COMMON_SEARCH_H
#define SONDE_COMMON_SEARCH_H

#include <stddef.h>

/* The first index i in [0, n) for which the expression pred is false, n when
 * it holds for them all. pred, evaluated with the name i bound to the index
 * tried, must hold for a prefix of the range and fail for the rest: "a[i] <
 * key" finds the first element not below key (lower bound), "a[i] <= key"
 * the first above it (so the last at or below key is one before). */
#define PARTITION_POINT(n, i, pred)                                                                \
	({                                                                                         \
		size_t lo__ = 0, hi__ = (n);                                                       \
		while (lo__ < hi__) {                                                              \
			size_t i = lo__ + (hi__ - lo__) / 2;                                       \
			if (pred)                                                                  \
				lo__ = i + 1;                                                      \
			else                                                                       \
				hi__ = i;                                                          \
		}                                                                                  \
		lo__;                                                                              \
	})

#endif
