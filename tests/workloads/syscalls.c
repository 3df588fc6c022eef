/* syscalls.c: spends its time in the kernel -- read() from /dev/zero and
 * write() to /dev/null of 1 MiB buffers -- for SECONDS (default 2), so the
 * tests see kernel frames under do_syscalls. */
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static char buf[1 << 20];

__attribute__((noinline)) void do_syscalls(double seconds)
{
	int zero = open("/dev/zero", O_RDONLY), null = open("/dev/null", O_WRONLY);
	struct timespec ts;
	double end;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	end = ts.tv_sec + ts.tv_nsec / 1e9 + seconds;
	do {
		for (int i = 0; i < 16; i++) {
			if (read(zero, buf, sizeof(buf)) < 0 || write(null, buf, sizeof(buf)) < 0)
				exit(1);
		}
		clock_gettime(CLOCK_MONOTONIC, &ts);
	} while (ts.tv_sec + ts.tv_nsec / 1e9 < end);
	close(zero);
	close(null);
}

int main(int argc, char **argv)
{
	do_syscalls(argc > 1 ? atof(argv[1]) : 2.0);
	return 0;
}
