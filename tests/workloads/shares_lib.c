/* shares_lib.c: main -> run -> lib_hot_X, with lib_hot_a/b/c (60/30/10 %)
 * in libhot.so. */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "burn.h"

void lib_hot_a(uint64_t ns);
void lib_hot_b(uint64_t ns);
void lib_hot_c(uint64_t ns);

__attribute__((noinline)) void run(double seconds)
{
	uint64_t end = thread_cpu_ns() + (uint64_t)(seconds * 1e9);

	while (thread_cpu_ns() < end) {
		uint64_t r = round_ns();

		lib_hot_a(r * 6 / 10);
		lib_hot_b(r * 3 / 10);
		lib_hot_c(r / 10);
	}
	__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	run(argc > 1 ? atof(argv[1]) : 3.0);
	return 0;
}
