/*
 * gpu_dlopen.c: loads the CUDA runtime with dlopen() after it has started, as PyTorch and
 * other frameworks do on their first use of the GPU, and calls it at once -- for Sonde's
 * test that the probes reach a library loaded late, from the first call after the load.
 *
 *   gpu_dlopen LIBCUDART [--delay-ms N] [--after-ms N] [--allocs N] [--hold]
 *
 * Sleeps --delay-ms (default 300), dlopen()s LIBCUDART, sleeps --after-ms (default 0: the
 * first call follows the load at once, as no real framework's does -- CUDA's own start-up
 * takes far longer), makes --allocs cudaMalloc calls of 1 MiB x i on device 0 (default
 * 16), frees every other one, then prints truth.h's JSON line. --hold: then waits for
 * stdin to close before exiting.
 */
#include <dlfcn.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "truth.h"

typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"delay-ms", required_argument, NULL, 'd'},
		{"after-ms", required_argument, NULL, 'A'},
		{"allocs", required_argument, NULL, 'a'},
		{"hold", no_argument, NULL, 'H'},
		{NULL, 0, NULL, 0},
	};
	long delay_ms = 300, after_ms = 0;
	int allocs = 16, c;
	bool hold = false;
	void *lib, *ptrs[256];
	malloc_fn cuda_malloc;
	free_fn cuda_free;

	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			delay_ms = atol(optarg);
			break;
		case 'A':
			after_ms = atol(optarg);
			break;
		case 'a':
			allocs = atoi(optarg);
			break;
		case 'H':
			hold = true;
			break;
		default:
			fprintf(stderr, "usage: gpu_dlopen LIBCUDART [--delay-ms N] [--after-ms N] "
					"[--allocs N] "
					"[--hold]\n");
			return 2;
		}
	}
	if (optind != argc - 1 || allocs < 1 || allocs > 256) {
		fprintf(stderr, "usage: gpu_dlopen LIBCUDART [--delay-ms N] [--allocs 1..256] "
				"[--hold]\n");
		return 2;
	}
	truth_init("gpu_dlopen");
	struct timespec ts = {delay_ms / 1000, (delay_ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
	lib = dlopen(argv[optind], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr, "gpu_dlopen: %s\n", dlerror());
		return 1;
	}
	ts = (struct timespec){after_ms / 1000, (after_ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
	cuda_malloc = (malloc_fn)dlsym(lib, "cudaMalloc");
	cuda_free = (free_fn)dlsym(lib, "cudaFree");
	if (!cuda_malloc || !cuda_free) {
		fprintf(stderr, "gpu_dlopen: %s has no cudaMalloc/cudaFree\n", argv[optind]);
		return 1;
	}
	for (int i = 0; i < allocs; i++) {
		size_t size = (size_t)(i + 1) << 20;

		if (cuda_malloc(&ptrs[i], size)) {
			fprintf(stderr, "gpu_dlopen: cudaMalloc of %zu bytes failed\n", size);
			return 1;
		}
		truth_alloc("cudaMalloc", 0, (uint64_t)(uintptr_t)ptrs[i], size);
	}
	for (int i = 0; i < allocs; i += 2) {
		if (cuda_free(ptrs[i])) {
			fprintf(stderr, "gpu_dlopen: cudaFree failed\n");
			return 1;
		}
		truth_free("cudaFree", (uint64_t)(uintptr_t)ptrs[i]);
	}
	truth_print();
	if (hold) {
		char buf[256];

		fflush(stdout);
		while (fread(buf, 1, sizeof(buf), stdin) > 0)
			;
	}
	return 0;
}
