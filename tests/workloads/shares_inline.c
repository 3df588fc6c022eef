/* shares_inline.c: the known shares of shares_o2.c (alpha 50 %, beta 30 %,
 * gamma 20 %, each through spin_unit) in code gcc -O3 inlines
 * (workloads.mk): run, alpha, beta and gamma are inlined into main and
 * crunch into spin_unit, so the symbol table names only main and
 * spin_unit. The chain main -> run -> alpha|beta|gamma -> spin_unit ->
 * crunch is in the DWARF alone: its inlined subroutines and their call
 * sites. */
#include <stdlib.h>

#include "burn.h"

volatile uint64_t calls;

static inline __attribute__((always_inline)) void crunch(uint64_t ns)
{
	BURN_CPU(ns);
}

__attribute__((noinline)) void spin_unit(uint64_t ns)
{
	crunch(ns);
	calls++;
}

#define SHARE_FN(name)                                                                             \
	static inline __attribute__((always_inline)) void name(uint64_t ns)                        \
	{                                                                                          \
		spin_unit(ns / 2);                                                                 \
		spin_unit(ns - ns / 2);                                                            \
		calls++;                                                                           \
	}

SHARE_FN(alpha)
SHARE_FN(beta)
SHARE_FN(gamma)

static inline __attribute__((always_inline)) void run(double seconds)
{
	uint64_t end = thread_cpu_ns() + (uint64_t)(seconds * 1e9);

	while (thread_cpu_ns() < end) {
		uint64_t r = round_ns();

		alpha(r * 5 / 10);
		beta(r * 3 / 10);
		gamma(r * 2 / 10);
	}
	calls++;
}

int main(int argc, char **argv)
{
	run(argc > 1 ? atof(argv[1]) : 3.0);
	return 0;
}
