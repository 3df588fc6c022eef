/* libhot.c: the shares workload's hot functions in a shared library, so the
 * tests see the symbolizer follow a library mapped at a random address. */
#include "burn.h"

__attribute__((noinline)) void lib_hot_a(uint64_t ns)
{
	BURN_CPU(ns);
}

__attribute__((noinline)) void lib_hot_b(uint64_t ns)
{
	BURN_CPU(ns);
}

__attribute__((noinline)) void lib_hot_c(uint64_t ns)
{
	BURN_CPU(ns);
}
