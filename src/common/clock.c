/* clock.c: the clocks of clock.h. */
#include "common/clock.h"

#include <time.h>

static uint64_t read_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (uint64_t)ts.tv_sec * NS_PER_SEC + (uint64_t)ts.tv_nsec;
}

uint64_t mono_ns(void)
{
	return read_ns(CLOCK_MONOTONIC);
}

uint64_t mono_ms(void)
{
	return read_ns(CLOCK_MONOTONIC) / NS_PER_MS;
}

uint64_t wall_ns(void)
{
	return read_ns(CLOCK_REALTIME);
}

uint64_t wall_ms(void)
{
	return read_ns(CLOCK_REALTIME) / NS_PER_MS;
}
