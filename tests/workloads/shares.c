/* shares.c: burns CPU in three functions in known shares -- hot_a 60 %,
 * hot_b 30 %, hot_c 10 % of its CPU time, in rounds of random length -- for SECONDS (default 3), with the
 * call chain main -> run -> hot_X. The ground truth of the CPU tests. */
#include <stdlib.h>

#include "burn.h"

__attribute__((noinline)) void hot_a(uint64_t ns)
{
	BURN_CPU(ns);
}

__attribute__((noinline)) void hot_b(uint64_t ns)
{
	BURN_CPU(ns);
}

__attribute__((noinline)) void hot_c(uint64_t ns)
{
	BURN_CPU(ns);
}

__attribute__((noinline)) void run(double seconds)
{
	uint64_t end = thread_cpu_ns() + (uint64_t)(seconds * 1e9);

	while (thread_cpu_ns() < end) {
		uint64_t r = round_ns();

		hot_a(r * 6 / 10);
		hot_b(r * 3 / 10);
		hot_c(r / 10);
	}
	__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	run(argc > 1 ? atof(argv[1]) : 3.0);
	return argc > 2 ? atoi(argv[2]) : 0;
}
