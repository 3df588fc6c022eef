/* counters.c: stacks and waits shaped to move the CPU sampler's and the
 * off-CPU profiler's counters (bpf/counters.h) that a plain job leaves at 0,
 * for test_bpf_counters.py. One mode a run, for SECONDS (default 2):
 *   nomap   spins in a function whose frame's return address is in no
 *           mapping (an address below vm.mmap_min_addr, put there for the
 *           spin and put back before it returns): the walk of every sample
 *           meets a pc in no mapping (no_vma);
 *   fault   waits 5 ms at a time in page faults, not system calls: a
 *           userfaultfd handler thread fills each page only after a sleep;
 *           the faults alternate between two functions, so that two waits
 *           in a row never look like one (leaf_only: the older kernels'
 *           sys_exit path has no return of a system call to take such a
 *           wait's user stack at);
 *   waits   THREADS threads (default 8) block 2 ms at a time, all together:
 *           more waits than a small ring holds between two reads of it
 *           (offcpu_ringbuf);
 *   dlopen  loads and unloads libm in a loop: the dynamic loader's list of
 *           objects changes four times a round, each change told to the
 *           GPU probes' userspace through their control ring (control).
 * Built with -O2 (workloads.mk). Usage: counters MODE [SECONDS [THREADS]]. */
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096
#define NOMAP_ADDR 0x8000 /* below vm.mmap_min_addr (64 KiB by default): never mapped */

static volatile sig_atomic_t stop;

static void on_alarm(int sig)
{
	(void)sig;
	stop = 1;
}

/* nomap_spin(stop, ra): a frame of its own (rbp-based, with its CFI) whose
 * return address is ra while it spins until *stop. */
void nomap_spin(volatile sig_atomic_t *flag, uint64_t ra);
__asm__(".text\n"
	".globl nomap_spin\n"
	".type nomap_spin, @function\n"
	"nomap_spin:\n"
	".cfi_startproc\n"
	"	push %rbp\n"
	".cfi_def_cfa_offset 16\n"
	".cfi_offset %rbp, -16\n"
	"	mov %rsp, %rbp\n"
	".cfi_def_cfa_register %rbp\n"
	"	mov 8(%rbp), %rax\n"
	"	mov %rsi, 8(%rbp)\n"
	"1:	cmpl $0, (%rdi)\n"
	"	je 1b\n"
	"	mov %rax, 8(%rbp)\n"
	"	pop %rbp\n"
	".cfi_def_cfa %rsp, 8\n"
	"	ret\n"
	".cfi_endproc\n"
	".size nomap_spin, .-nomap_spin\n");

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ns(long ns)
{
	struct timespec ts = {0, ns};

	nanosleep(&ts, NULL);
}

/* ---- fault ---- */

static int uffd;

static void *fault_handler(void *arg)
{
	static char fill[PAGE];
	struct uffd_msg msg;
	struct pollfd p = {.fd = uffd, .events = POLLIN};

	(void)arg;
	memset(fill, 1, sizeof(fill));
	while (poll(&p, 1, -1) > 0) {
		struct uffdio_copy copy = {.src = (uintptr_t)fill, .len = PAGE};

		if (read(uffd, &msg, sizeof(msg)) != sizeof(msg) ||
		    msg.event != UFFD_EVENT_PAGEFAULT)
			continue;
		sleep_ns(5000000);
		copy.dst = msg.arg.pagefault.address & ~(uint64_t)(PAGE - 1);
		ioctl(uffd, UFFDIO_COPY, &copy);
	}
	return NULL;
}

__attribute__((noinline)) int touch_a(volatile char *p)
{
	return p[0];
}

__attribute__((noinline)) int touch_b(volatile char *p)
{
	return p[0] + 1;
}

static int fault_mode(double secs)
{
	struct uffdio_api api = {.api = UFFD_API};
	struct uffdio_register reg = {.mode = UFFDIO_REGISTER_MODE_MISSING};
	uint64_t end = now_ns() + (uint64_t)(secs * 1e9);
	char *region;
	pthread_t t;
	int sum = 0;

	uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
	if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api)) {
		perror("counters: userfaultfd");
		return 3;
	}
	region = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	reg.range.start = (uintptr_t)region;
	reg.range.len = 2 * PAGE;
	if (region == MAP_FAILED || ioctl(uffd, UFFDIO_REGISTER, &reg) ||
	    pthread_create(&t, NULL, fault_handler, NULL)) {
		perror("counters: userfaultfd register");
		return 3;
	}
	while (now_ns() < end) {
		sum += touch_a(region);
		sum += touch_b(region + PAGE);
		/* Missing again: the next touches fault. */
		madvise(region, 2 * PAGE, MADV_DONTNEED);
	}
	return sum == -1;
}

/* ---- waits ---- */

static uint64_t waits_end;

static void *waiter(void *arg)
{
	(void)arg;
	while (now_ns() < waits_end)
		sleep_ns(2000000);
	return NULL;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	double secs = argc > 2 ? atof(argv[2]) : 2;
	int threads = argc > 3 ? atoi(argv[3]) : 8;

	if (!strcmp(mode, "nomap")) {
		struct itimerval it = {
			.it_value = {(time_t)secs, (suseconds_t)((secs - (time_t)secs) * 1e6)}};

		signal(SIGALRM, on_alarm);
		setitimer(ITIMER_REAL, &it, NULL);
		nomap_spin(&stop, NOMAP_ADDR);
		return 0;
	}
	if (!strcmp(mode, "fault"))
		return fault_mode(secs);
	if (!strcmp(mode, "waits") && threads > 0 && threads <= 64) {
		pthread_t t[64];

		waits_end = now_ns() + (uint64_t)(secs * 1e9);
		for (int i = 0; i < threads; i++)
			if (pthread_create(&t[i], NULL, waiter, NULL))
				return 1;
		for (int i = 0; i < threads; i++)
			pthread_join(t[i], NULL);
		return 0;
	}
	if (!strcmp(mode, "dlopen")) {
		uint64_t end = now_ns() + (uint64_t)(secs * 1e9);

		while (now_ns() < end) {
			void *h = dlopen("libm.so.6", RTLD_NOW | RTLD_LOCAL);

			if (!h) {
				fprintf(stderr, "counters: %s\n", dlerror());
				return 1;
			}
			dlclose(h);
		}
		return 0;
	}
	fprintf(stderr, "usage: counters nomap|fault|waits|dlopen [SECONDS [THREADS]]\n");
	return 2;
}
