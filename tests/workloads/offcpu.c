/* offcpu.c: a main thread that blocks, over and over, about 30 ms in one
 * function (nanosleep) and about 10 ms in another (poll), and measures
 * around each call how long it was away: the truth the off-CPU profile is
 * checked against (test_record_offcpu.py, test_agent_offcpu.py). At the end
 * it prints "blocked_ns long=N short=N rounds=N". Built as distributions
 * build (gcc -O2, no frame pointers): only the unwind tables walk it.
 *
 * Usage: offcpu [SECONDS] (default 2). */
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Each uses its call's result, so that the call is not a tail call and the
 * function stays on the stack under it. */
__attribute__((noinline)) int block_long(void)
{
	struct timespec ts = {0, 30 * 1000 * 1000};

	return nanosleep(&ts, NULL) ? -1 : 1;
}

__attribute__((noinline)) int block_short(void)
{
	return poll(NULL, 0, 10) < 0 ? -1 : 1;
}

int main(int argc, char **argv)
{
	double secs = argc > 1 ? atof(argv[1]) : 2;
	uint64_t end = now_ns() + (uint64_t)(secs * 1e9), t0, t1, t2;
	uint64_t in_long = 0, in_short = 0;
	int rounds = 0, bad = 0;

	do {
		t0 = now_ns();
		bad |= block_long() < 0;
		t1 = now_ns();
		bad |= block_short() < 0;
		t2 = now_ns();
		in_long += t1 - t0;
		in_short += t2 - t1;
		rounds++;
	} while (t2 < end);
	printf("blocked_ns long=%llu short=%llu rounds=%d\n", (unsigned long long)in_long,
	       (unsigned long long)in_short, rounds);
	return bad;
}
