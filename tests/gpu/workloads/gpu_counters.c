/*
 * gpu_counters.c: driver-API calls on the libcuda stand-in shaped to move the GPU probes'
 * counters (bpf/counters.h) that a plain job leaves at 0, for test_bpf_counters.py. One
 * mode a run:
 *   signal     a kernel of SONDE_STANDIN_KERNEL_US runs while the thread waits in
 *              cuCtxSynchronize; 100 ms in, a SIGALRM handler calls cuCtxSetCurrent on the
 *              same thread: a call of the same layer entered while another is unfinished,
 *              past the nesting window -- it replaces it (overwrite), and the wait's return
 *              then finds no entry (no_entry);
 *   hold       cuMemAlloc, prints "ready", waits for a line on stdin, then cuMemFree: the
 *              allocation made before the probes were on, its free unmatched (unmatched);
 *   badread    cuDevicePrimaryCtxRetain(out, 999) with out on a page that can't be read:
 *              the call fails without writing it, and the probe's read of *out fails (read);
 *   allocs N   N allocations, then their frees (allocs: a map smaller than N);
 *   threads N  N threads make their context current one after another, each a device map
 *              entry, then wait in cuCtxSynchronize together behind a kernel, each a call
 *              in flight (devices, inflight: maps smaller than N);
 *   late       launches through a trampoline of code in a memfd mapped just now -- a file
 *              no unwind table was built for, and no loader event tells of: the launch's
 *              stack reaches it, and its end is left to userspace (late).
 * Prints "done" at the end. Test-only.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <sys/time.h>

#include <cuda.h>

#define GEMM_SYM "_Z9gemm_bf16PvS_S_i"

static const char image[] = "sonde-standin gpu_counters module";
static CUcontext primary;
static CUfunction gemm;
static CUstream stream;
static pthread_barrier_t barrier;

static void check(CUresult e, const char *what)
{
	if (e != CUDA_SUCCESS) {
		fprintf(stderr, "gpu_counters: %s failed: %d\n", what, (int)e);
		exit(1);
	}
}

static void setup(void)
{
	CUmodule mod;

	check(cuInit(0), "cuInit");
	check(cuDevicePrimaryCtxRetain(&primary, 0), "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(primary), "cuCtxSetCurrent");
	check(cuModuleLoadData(&mod, image), "cuModuleLoadData");
	check(cuModuleGetFunction(&gemm, mod, GEMM_SYM), "cuModuleGetFunction");
	check(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
}

/* One kernel on the stream: SONDE_STANDIN_KERNEL_US long. */
static void launch(void)
{
	CUdeviceptr a = 0;
	int n = 64;
	void *params[] = {&a, &a, &a, &n};

	check(cuLaunchKernel(gemm, 1, 1, 1, 16, 1, 1, 0, stream, params, NULL), "cuLaunchKernel");
}

/* push %rbp; mov %rsp,%rbp; call *%rdi; pop %rbp; ret */
static const unsigned char tramp_code[] = {0x55, 0x48, 0x89, 0xe5, 0xff, 0xd7, 0x5d, 0xc3};

static void launch_late(void)
{
	int fd = memfd_create("gpu_counters_tramp", MFD_CLOEXEC);
	void (*tramp)(void (*)(void));

	if (fd < 0 || write(fd, tramp_code, sizeof(tramp_code)) != sizeof(tramp_code)) {
		perror("gpu_counters: memfd");
		exit(1);
	}
	tramp = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
	if (tramp == MAP_FAILED) {
		perror("gpu_counters: mmap of the memfd");
		exit(1);
	}
	tramp(launch);
	check(cuCtxSynchronize(), "cuCtxSynchronize");
}

static void on_alarm(int sig)
{
	(void)sig;
	cuCtxSetCurrent(primary);
}

static void *thread_wait(void *arg)
{
	static pthread_mutex_t one = PTHREAD_MUTEX_INITIALIZER;

	(void)arg;
	/* One at a time: each a call of its own in flight, the device map
	 * filling one thread after another. */
	pthread_mutex_lock(&one);
	check(cuCtxSetCurrent(primary), "cuCtxSetCurrent");
	pthread_mutex_unlock(&one);
	pthread_barrier_wait(&barrier);
	check(cuCtxSynchronize(), "cuCtxSynchronize");
	return NULL;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";
	int n = argc > 2 ? atoi(argv[2]) : 4;

	if (n < 1 || n > 64) {
		fprintf(stderr, "gpu_counters: N is 1..64\n");
		return 2;
	}
	setup();
	if (!strcmp(mode, "signal")) {
		struct itimerval it = {.it_value = {0, 100000}};

		signal(SIGALRM, on_alarm);
		launch();
		setitimer(ITIMER_REAL, &it, NULL);
		check(cuCtxSynchronize(), "cuCtxSynchronize");
	} else if (!strcmp(mode, "hold")) {
		CUdeviceptr p;
		char line[16];

		check(cuMemAlloc(&p, 1 << 20), "cuMemAlloc");
		printf("ready\n");
		fflush(stdout);
		if (!fgets(line, sizeof(line), stdin))
			line[0] = 0;
		check(cuMemFree(p), "cuMemFree");
	} else if (!strcmp(mode, "badread")) {
		void *page = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (page == MAP_FAILED || cuDevicePrimaryCtxRetain(page, 999) == CUDA_SUCCESS) {
			fprintf(stderr,
				"gpu_counters: cuDevicePrimaryCtxRetain(999) did not fail\n");
			return 1;
		}
	} else if (!strcmp(mode, "allocs")) {
		CUdeviceptr p[64];

		for (int i = 0; i < n; i++)
			check(cuMemAlloc(&p[i], 1 << 20), "cuMemAlloc");
		for (int i = 0; i < n; i++)
			check(cuMemFree(p[i]), "cuMemFree");
	} else if (!strcmp(mode, "threads")) {
		pthread_t t[64];

		pthread_barrier_init(&barrier, NULL, (unsigned)n);
		launch();
		for (int i = 0; i < n; i++)
			if (pthread_create(&t[i], NULL, thread_wait, NULL))
				return 1;
		for (int i = 0; i < n; i++)
			pthread_join(t[i], NULL);
	} else if (!strcmp(mode, "late")) {
		launch_late();
	} else {
		fprintf(stderr,
			"usage: gpu_counters signal|hold|badread|allocs N|threads N|late\n");
		return 2;
	}
	printf("done\n");
	return 0;
}
