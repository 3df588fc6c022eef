/* quick.c: a short-lived process built as distributions build (gcc -O2, no
 * frame pointers; workloads.mk): main calls quick_burn, which spins for
 * SECONDS of the process's CPU time (default 0.025) and returns. The spin
 * calls nothing -- a timer signal ends it -- so that every sample of it has
 * quick_burn as its leaf and only the unwind tables walk it to main and
 * _start: the first stacks of a program whose table the profiler has not
 * built yet (tests/integration/test_unwind_late.py). */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/time.h>

static volatile sig_atomic_t done;
volatile uint64_t sink;

static void on_prof(int sig)
{
	(void)sig;
	done = 1;
}

/* Keeps a frame of its own (locals, a call that is not its last act's). */
__attribute__((noinline)) uint64_t quick_burn(void)
{
	volatile uint64_t x[4] = {0};

	while (!done)
		for (int i = 0; i < 1000; i++)
			x[i & 3] += (uint64_t)i * i;
	return x[0] + x[1];
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 0.025;
	struct itimerval it = {{0, 0}, {(time_t)secs, (suseconds_t)((secs - (time_t)secs) * 1e6)}};

	signal(SIGPROF, on_prof);
	setitimer(ITIMER_PROF, &it, NULL);
	sink = quick_burn();
	return 0;
}
