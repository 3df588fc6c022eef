/*
 * gpu_launch_bench.c: kernel launches in a tight loop, for Sonde's launch-overhead
 * benchmark: N launches (1 M by default) as fast as possible, printing the nanoseconds per
 * launch, or launches paced at a rate for a duration (--rate 10000 --duration 10) to
 * measure the agent's CPU at a known launch rate. --api picks the entry point:
 * cudaLaunchKernel with a host stub (default), __cudaLaunchKernel with a cudaKernel_t (as
 * CUDA 13 nvcc code launches), or cuLaunchKernel on the driver. Kernels take no GPU time
 * unless SONDE_STANDIN_KERNEL_US is set, so the final synchronize does not dominate.
 * Prints truth.h's JSON line with the timing added.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "nvcc_abi.h"
#include "truth.h"

enum api { API_RUNTIME, API_HANDLE, API_DRIVER };

static const char *const api_names[] = {"cudaLaunchKernel", "__cudaLaunchKernel", "cuLaunchKernel"};

/* The host stub the launches name, as nvcc would emit for `__global__ void
 * vector_add(float *, float *, int)`; never called. */
void vector_add(float *a, float *b, int n) __asm__("_Z10vector_addPfS_i");
void vector_add(float *a, float *b, int n)
{
}

struct bench {
	enum api api;
	cudaStream_t stream;
	cudaKernel_t handle;
	CUfunction function;
	void *args[3];
	uint64_t failed;
};

static inline void launch_one(struct bench *b)
{
	dim3 grid = {1, 1, 1}, block = {128, 1, 1};
	int e;

	switch (b->api) {
	case API_RUNTIME:
		e = cudaLaunchKernel((const void *)vector_add, grid, block, b->args, 0, b->stream);
		break;
	case API_HANDLE:
		e = __cudaLaunchKernel(b->handle, grid, block, b->args, 0, b->stream);
		break;
	default:
		e = cuLaunchKernel(b->function, 1, 1, 1, 128, 1, 1, 0, (CUstream)b->stream, b->args,
				   NULL);
		break;
	}
	b->failed += e != 0;
}

static uint64_t cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void usage(FILE *f)
{
	fprintf(f, "usage: gpu_launch_bench [-n LAUNCHES] [--rate PER_SECOND --duration SECONDS]\n"
		   "                        [--api runtime|handle|driver] [--hold]\n"
		   "  Launches in a loop on the CUDA stand-ins; prints ns per launch and the\n"
		   "  truth line (tests/gpu/README.md). --hold: then waits for stdin to close.\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"rate", required_argument, NULL, 'r'}, {"duration", required_argument, NULL, 'd'},
		{"api", required_argument, NULL, 'a'},	{"hold", no_argument, NULL, 'H'},
		{"help", no_argument, NULL, 'h'},	{NULL, 0, NULL, 0},
	};
	struct bench b = {.api = API_RUNTIME};
	uint64_t n = 1000000, done = 0, t0, t1, c0, c1, sync_ns;
	double rate = 0, duration = 10;
	float *x = NULL, *y = NULL;
	int len = 1024, c;
	bool hold = false;
	CUlibrary lib;

	while ((c = getopt_long(argc, argv, "n:r:d:a:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'n':
			n = strtoull(optarg, NULL, 0);
			break;
		case 'r':
			rate = atof(optarg);
			break;
		case 'd':
			duration = atof(optarg);
			break;
		case 'a':
			if (!strcmp(optarg, "runtime"))
				b.api = API_RUNTIME;
			else if (!strcmp(optarg, "handle"))
				b.api = API_HANDLE;
			else if (!strcmp(optarg, "driver"))
				b.api = API_DRIVER;
			else
				return usage(stderr), 2;
			break;
		case 'H':
			hold = true;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	setenv("SONDE_STANDIN_KERNEL_US", "0", 0);
	truth_init("gpu_launch_bench");
	if (cudaSetDevice(0) || cudaStreamCreate(&b.stream) || cudaMalloc((void **)&x, 4096) ||
	    cudaMalloc((void **)&y, 4096)) {
		fprintf(stderr, "gpu_launch_bench: no GPU: %s\n",
			cudaGetErrorString(cudaGetLastError()));
		return 1;
	}
	truth_alloc("cudaMalloc", 0, (uintptr_t)x, 4096);
	truth_alloc("cudaMalloc", 0, (uintptr_t)y, 4096);
	b.args[0] = &x;
	b.args[1] = &y;
	b.args[2] = &len;
	if (__cudaGetKernel(&b.handle, (const void *)vector_add))
		return 1;
	if (b.api == API_DRIVER &&
	    (cuLibraryLoadData(&lib, "sonde-standin bench", NULL, NULL, 0, NULL, NULL, 0) ||
	     cuLibraryGetKernel((CUkernel *)&b.function, lib, "_Z10vector_addPfS_i"))) {
		fprintf(stderr, "gpu_launch_bench: can't look up the kernel\n");
		return 1;
	}
	for (int i = 0; i < 1000; i++)
		launch_one(&b); /* warm-up: lazy binding, caches */

	c0 = cpu_ns();
	t0 = truth_now_ns();
	if (rate > 0) {
		/* Paced: each millisecond tick issues the launches due by then. */
		uint64_t end = t0 + (uint64_t)(duration * 1e9), tick = t0;
		struct timespec ts;

		n = 0;
		while (tick < end) {
			uint64_t due = (uint64_t)((double)(tick - t0) * rate / 1e9);

			for (; n < due; n++)
				launch_one(&b);
			tick += 1000000;
			ts.tv_sec = (time_t)(tick / 1000000000ull);
			ts.tv_nsec = (long)(tick % 1000000000ull);
			clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
		}
		done = n;
	} else {
		for (done = 0; done < n; done++)
			launch_one(&b);
	}
	t1 = truth_now_ns();
	c1 = cpu_ns();
	if (cudaStreamSynchronize(b.stream) == cudaSuccess)
		truth_wait("cudaStreamSynchronize", (sync_ns = truth_now_ns() - t1));
	else
		sync_ns = 0;

	truth_launch(api_names[b.api], "vector_add(float*, float*, int)", "_Z10vector_addPfS_i",
		     done + 1000 - b.failed);
	truth_note("bench",
		   "{\"api\":\"%s\",\"launches\":%llu,\"warmup\":1000,\"failed\":%llu,"
		   "\"elapsed_ns\":%llu,\"ns_per_launch\":%.1f,\"cpu_ns\":%llu,"
		   "\"rate\":%.0f,\"sync_ns\":%llu}",
		   api_names[b.api], (unsigned long long)done, (unsigned long long)b.failed,
		   (unsigned long long)(t1 - t0), done ? (double)(t1 - t0) / done : 0.0,
		   (unsigned long long)(c1 - c0), rate, (unsigned long long)sync_ns);
	truth_print();
	if (hold) {
		char buf[64];

		/* The process stays (its metrics with it) until released. */
		fflush(stdout);
		while (fread(buf, 1, sizeof(buf), stdin) > 0)
			;
	}
	return b.failed ? 1 : 0;
}
