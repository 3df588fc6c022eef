/* pingpong.c: the context-switch-heavy load of bench/offcpu.sh -- two
 * processes pass one byte back and forth through two pipes, each blocking
 * in read() until the other answers: every round trip is two blocks and
 * two wake-ups. Prints "rounds=N secs=S cpu_s=C switches_per_s=R": the
 * wall time, the CPU time of both processes (user and system: what a
 * profiler's programs in the kernel add is in it, and other load on the
 * machine much less than in the wall time) and their voluntary switches a
 * second, from getrusage.
 *
 * Usage: pingpong ROUNDS */
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double tv(struct timeval t)
{
	return t.tv_sec + t.tv_usec / 1e6;
}

int main(int argc, char **argv)
{
	long rounds = argc > 1 ? atol(argv[1]) : 100000;
	int ping[2], pong[2];
	struct rusage self, child;
	double t0, secs;
	char c = 0;
	pid_t pid;

	if (rounds <= 0 || pipe(ping) || pipe(pong)) {
		fprintf(stderr, "usage: pingpong ROUNDS\n");
		return 2;
	}
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		for (long i = 0; i < rounds; i++)
			if (read(ping[0], &c, 1) != 1 || write(pong[1], &c, 1) != 1)
				_exit(1);
		_exit(0);
	}
	t0 = now();
	for (long i = 0; i < rounds; i++)
		if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1)
			return 1;
	secs = now() - t0;
	waitpid(pid, NULL, 0);
	getrusage(RUSAGE_SELF, &self);
	getrusage(RUSAGE_CHILDREN, &child);
	printf("rounds=%ld secs=%.4f cpu_s=%.4f switches_per_s=%.0f\n", rounds, secs,
	       tv(self.ru_utime) + tv(self.ru_stime) + tv(child.ru_utime) + tv(child.ru_stime),
	       (self.ru_nvcsw + child.ru_nvcsw) / secs);
	return 0;
}
