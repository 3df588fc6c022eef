/* burn.h: spin in the calling function until it has used NS nanoseconds of
 * this thread's CPU time. A macro, not a function, so that the samples land
 * in the function that uses it: the workloads' CPU shares are then exact by
 * construction, whatever else the machine is running. */
#ifndef SONDE_WORKLOAD_BURN_H
#define SONDE_WORKLOAD_BURN_H

#include <stdint.h>
#include <time.h>

static inline uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

static inline uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec;
}

#define BURN_CPU(ns)                                                                               \
	do {                                                                                       \
		uint64_t end_ = thread_cpu_ns() + (ns);                                            \
		volatile uint64_t x_ = 0;                                                          \
		do {                                                                               \
			for (int i_ = 0; i_ < 20000; i_++)                                         \
				x_ += (uint64_t)i_ * i_;                                           \
		} while (thread_cpu_ns() < end_);                                                  \
	} while (0)

/* The length of one round of a workload's cycle, 5..15 ms, drawn anew each
 * round: a fixed cycle would phase-lock with the sampling period (10 ms of
 * work against 499 Hz samples drifts by 0.2 % a round) and bias the shares. */
static inline uint64_t round_ns(void)
{
	static uint64_t state = 88172645463325252ull;

	state ^= state << 13;
	state ^= state >> 7;
	state ^= state << 17;
	return 5000000 + state % 10000000;
}

#endif
