/* shares_o2.c: known shares in code built the way distributions build it
 * (gcc -O2, no frame pointers; workloads.mk): alpha 50 %, beta 30 %,
 * gamma 20 % of its CPU time for SECONDS (default 3), each through
 * spin_unit, with the chain main -> run -> alpha|beta|gamma -> spin_unit.
 * Every function keeps its own frame (a call that is not the last thing it
 * does, locals on the stack), so only the unwind tables can walk it. */
#include <stdlib.h>

#include "burn.h"

volatile uint64_t calls;

__attribute__((noinline)) void spin_unit(uint64_t ns)
{
	BURN_CPU(ns);
}

/* The work in two calls, and a count after them: no tail call. */
#define SHARE_FN(name, pad)                                                                        \
	__attribute__((noinline)) void name(uint64_t ns)                                           \
	{                                                                                          \
		volatile char locals[pad];                                                         \
		locals[0] = 1;                                                                     \
		spin_unit(ns / 2);                                                                 \
		spin_unit(ns - ns / 2);                                                            \
		calls += locals[0];                                                                \
	}

SHARE_FN(alpha, 24)
SHARE_FN(beta, 200)
SHARE_FN(gamma, 3000)

__attribute__((noinline)) void run(double seconds)
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
