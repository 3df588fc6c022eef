/* libhot.c: the shares workload's hot functions in a shared library, so the
 * tests see the symbolizer follow a library mapped at a random address. */
#include "burn.h"

__attribute__((noinline)) void lib_hot_a(void)
{
	BURN_CPU(6000000);
}

__attribute__((noinline)) void lib_hot_b(void)
{
	BURN_CPU(3000000);
}

__attribute__((noinline)) void lib_hot_c(void)
{
	BURN_CPU(1000000);
}
