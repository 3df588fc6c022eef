/* syscalls.c: spends its time in the kernel -- read() from /dev/zero and
 * pwrite() into a memory file of 1 MiB buffers, each a copy of a megabyte,
 * so that both paths take their share of the time (a write to /dev/null
 * would take none) -- for SECONDS (default 2), so the tests see kernel
 * frames of both under do_syscalls. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sys/mman.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static char buf[1 << 20];

__attribute__((noinline)) void do_syscalls(double seconds)
{
	int zero = open("/dev/zero", O_RDONLY), mem = memfd_create("syscalls", MFD_CLOEXEC);
	struct timespec ts;
	double end;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	end = ts.tv_sec + ts.tv_nsec / 1e9 + seconds;
	do {
		for (int i = 0; i < 16; i++) {
			if (read(zero, buf, sizeof(buf)) < 0 ||
			    pwrite(mem, buf, sizeof(buf), 0) < 0)
				exit(1);
		}
		clock_gettime(CLOCK_MONOTONIC, &ts);
	} while (ts.tv_sec + ts.tv_nsec / 1e9 < end);
	close(zero);
	close(mem);
}

int main(int argc, char **argv)
{
	do_syscalls(argc > 1 ? atof(argv[1]) : 2.0);
	return 0;
}
