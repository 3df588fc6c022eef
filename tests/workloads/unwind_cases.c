/* unwind_cases.c: stacks only the unwind tables get right, built as
 * distributions build (gcc -O2, no frame pointers; workloads.mk), for
 * SECONDS (default 2) of CPU:
 *   qsort    main -> sort_loop -> qsort (libc) -> cmp_slow: a callback
 *            through a library, whole from main;
 *   signal   main -> signal_loop -> raise (libc, into the kernel) -- the
 *            signal's handler on_signal -> handler_work runs above the
 *            kernel's signal frame (__restore_rt) on the same stack;
 *   drap     main -> drap_loop -> realigned -> drap_leaf: realigned aligns
 *            its stack to 64 bytes and allocas, so gcc keeps its CFA in a
 *            register saved below rbp (DRAP): its rows are CFA
 *            expressions, and the frame-pointer chain alone would give
 *            drap_loop the wrong stack pointer. */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "burn.h"

volatile uint64_t sink;

__attribute__((noinline)) static int cmp_slow(const void *a, const void *b)
{
	volatile uint64_t x = 0;

	for (int i = 0; i < 2000; i++)
		x += (uint64_t)i * i;
	sink += x;
	return *(const int *)a - *(const int *)b;
}

__attribute__((noinline)) static void sort_loop(double seconds)
{
	uint64_t end = thread_cpu_ns() + (uint64_t)(seconds * 1e9);
	int v[64];

	while (thread_cpu_ns() < end) {
		for (int i = 0; i < 64; i++)
			v[i] = (int)(round_ns() % 1000);
		qsort(v, 64, sizeof(v[0]), cmp_slow);
	}
	sink += v[0];
}

__attribute__((noinline)) static void handler_work(void)
{
	BURN_CPU(2000000);
}

static void on_signal(int sig)
{
	handler_work();
	sink += sig;
}

__attribute__((noinline)) static void signal_loop(double seconds)
{
	uint64_t end = thread_cpu_ns() + (uint64_t)(seconds * 1e9);
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGUSR1, &sa, NULL);
	while (thread_cpu_ns() < end)
		raise(SIGUSR1);
	sink++;
}

__attribute__((noinline)) static void drap_leaf(char *p, int n)
{
	BURN_CPU(1000000);
	sink += p[0] + p[n - 1];
}

__attribute__((noinline)) static void realigned(int n)
{
	__attribute__((aligned(64))) char buf[64];
	char *v = __builtin_alloca(n);

	memset(buf, 1, sizeof(buf));
	memset(v, 2, n);
	drap_leaf(buf, sizeof(buf));
	drap_leaf(v, n);
	sink += buf[3];
}

__attribute__((noinline)) static void drap_loop(double seconds)
{
	uint64_t end = thread_cpu_ns() + (uint64_t)(seconds * 1e9);
	volatile char locals[40];

	locals[0] = 1;
	while (thread_cpu_ns() < end)
		realigned(16 + (int)(round_ns() % 200));
	sink += locals[0];
}

int main(int argc, char **argv)
{
	double secs = argc > 2 ? atof(argv[2]) : 2.0;

	if (argc > 1 && !strcmp(argv[1], "signal"))
		signal_loop(secs);
	else if (argc > 1 && !strcmp(argv[1], "drap"))
		drap_loop(secs);
	else
		sort_loop(secs);
	return 0;
}
