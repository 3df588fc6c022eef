/* deep.c: a fixed amount of CPU work done at the bottom of a call chain
 * DEPTH frames deep (default 10): UNITS units (default 2000) of a fixed
 * loop (about 0.4 ms each on the benchmark machine of docs/perf.md). With
 * PAD, each frame of the chain also holds PAD bytes of locals, so that the
 * chain spans pages (test_record_deep.py).
 * The benchmark's workload: fixed work, so wall time shows a profiler's
 * overhead, and a chosen stack depth, so the per-sample cost can be
 * measured at 10 and 60 frames. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static size_t pad;

__attribute__((noinline)) void leaf_work(void)
{
	volatile uint64_t x = 0;

	for (int i = 0; i < 1000000; i++)
		x += (uint64_t)i * i;
}

__attribute__((noinline)) void descend(int depth)
{
	/* A frame of pad bytes the compiler can't drop (none when 0). */
	char *locals = pad ? __builtin_alloca(pad) : NULL;

	if (locals)
		memset(locals, depth, pad);
	if (depth <= 1)
		leaf_work();
	else
		descend(depth - 1);
	__asm__ volatile("" ::"r"(locals) : "memory");
}

int main(int argc, char **argv)
{
	int depth = argc > 1 ? atoi(argv[1]) : 10;
	long units = argc > 2 ? atol(argv[2]) : 2000;

	pad = argc > 3 ? strtoul(argv[3], NULL, 0) : 0;
	/* The frames above descend are main, __libc_start_call_main,
	 * __libc_start_main and _start: count them in DEPTH. */
	for (long i = 0; i < units; i++)
		descend(depth > 5 ? depth - 5 : 1);
	return 0;
}
