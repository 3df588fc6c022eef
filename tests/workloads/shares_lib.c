/* shares_lib.c: main -> run -> lib_hot_X, with lib_hot_a/b/c (60/30/10 %)
 * in libhot.so. */
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

void lib_hot_a(void);
void lib_hot_b(void);
void lib_hot_c(void);

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

__attribute__((noinline)) void run(double seconds)
{
	uint64_t end = thread_cpu_ns() + (uint64_t)(seconds * 1e9);

	while (thread_cpu_ns() < end) {
		lib_hot_a();
		lib_hot_b();
		lib_hot_c();
	}
	__asm__ volatile("" ::: "memory");
}

int main(int argc, char **argv)
{
	run(argc > 1 ? atof(argv[1]) : 3.0);
	return 0;
}
