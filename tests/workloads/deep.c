/* deep.c: burns CPU at the bottom of a recursion DEPTH frames deep (default
 * 10) for SECONDS (default 5): the benchmark's workload at a chosen stack
 * depth. */
#include <stdlib.h>

#include "burn.h"

__attribute__((noinline)) void leaf_burn(void)
{
	BURN_CPU(1000000);
}

__attribute__((noinline)) void descend(int depth)
{
	if (depth <= 1)
		leaf_burn();
	else
		descend(depth - 1);
	__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	int depth = argc > 1 ? atoi(argv[1]) : 10;
	double seconds = argc > 2 ? atof(argv[2]) : 5.0;
	uint64_t end = mono_ns() + (uint64_t)(seconds * 1e9);

	/* main and descend frames below leaf_burn: depth counts them all. */
	while (mono_ns() < end)
		descend(depth - 2);
	return 0;
}
