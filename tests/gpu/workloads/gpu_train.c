/*
 * gpu_train.c: a fake data-parallel training job on the CUDA runtime and NCCL stand-ins,
 * for Sonde's GPU tests. One thread per GPU sets its device, allocates weights, gradients
 * and a managed buffer, joins an NCCL communicator, captures a small CUDA graph, then
 * runs steps of: copy a batch in, K launches each of three kernels (one per launch style
 * nvcc and frameworks use), the graph, an all-reduce of the gradients, a wait, a loss
 * copied back, some host work. It ends freeing the weights only, so memory is still held
 * at exit. Before the threads start, the main thread makes three calls that fail (an
 * allocation too large, a free of a bad pointer, a launch with too many threads).
 *
 * Kernels are host stubs named as nvcc names them (asm labels give the mangled names):
 * matmul_tile is launched by host-function address through cudaLaunchKernel (nvcc's
 * legacy launch), softmax_fwd by a cudaKernel_t from __cudaGetKernel through
 * __cudaLaunchKernel (CUDA 13 nvcc), layernorm through cudaLaunchKernelExC. Built a
 * second time with -DCUDA_API_PER_THREAD_DEFAULT_STREAM (gpu_train_ptsz), and a third
 * time against the static runtime (gpu_train_static). Prints truth.h's JSON line.
 *
 * With --pool-keep BYTES the main thread first sets the release threshold of device 0's
 * default memory pool to BYTES (cudaDeviceGetDefaultMemPool, cudaMemPoolSetAttribute), so
 * that the pool keeps up to BYTES of what its async allocations freed, and after the steps
 * trims it (cudaMemPoolTrimTo(pool, 0); not with --no-pool-trim) and synchronizes
 * (cudaDeviceSynchronize); the truth
 * line then has "pool_keep" saying what it did and what the pool held.
 */
#include <getopt.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include "nvcc_abi.h"
#include "truth.h"

#ifdef CUDA_API_PER_THREAD_DEFAULT_STREAM
#define API(name) name "_ptsz"
#define LAUNCH_HANDLE __cudaLaunchKernel_ptsz
#else
#define API(name) name
#define LAUNCH_HANDLE __cudaLaunchKernel
#endif

/* The <<<grid, block, shmem, stream>>> of nvcc: push the configuration, call the stub. */
#define KERNEL_LAUNCH(kernel, grid, block, shmem, stream, ...)                                     \
	(__cudaPushCallConfiguration(grid, block, shmem, stream) ? (void)0 : kernel(__VA_ARGS__))

#define MIB (1ull << 20)

static struct {
	int gpus;
	int steps;
	int launches;
	size_t floats;
	unsigned int cpu_us;
	bool nccl;
	long long pool_keep; /* --pool-keep: bytes; -1: not given */
	bool pool_trim;	     /* ... and trimmed after the steps (not --no-pool-trim) */
} opt = {2, 20, 8, 1 << 20, 300, true, -1, true};

static ncclUniqueId nccl_id;

static void launched(cudaError_t e, const char *api, const char *kernel, const char *symbol)
{
	if (e)
		truth_failed(api);
	else
		truth_launch(api, kernel, symbol, 1);
}

void matmul_tile(float *a, float *b, float *c, int n) __asm__("_Z11matmul_tilePfS_S_i");
void matmul_tile(float *a, float *b, float *c, int n)
{
	void *args[] = {&a, &b, &c, &n};
	cudaStream_t stream;
	dim3 grid, block;
	size_t shmem;

	if (__cudaPopCallConfiguration(&grid, &block, &shmem, &stream))
		return;
	launched(cudaLaunchKernel((const void *)matmul_tile, grid, block, args, shmem, stream),
		 API("cudaLaunchKernel"), "matmul_tile(float*, float*, float*, int)",
		 "_Z11matmul_tilePfS_S_i");
}

void softmax_fwd(float *x, int n) __asm__("_Z11softmax_fwdPfi");
void softmax_fwd(float *x, int n)
{
	static cudaKernel_t handle;
	void *args[] = {&x, &n};
	cudaKernel_t h = __atomic_load_n(&handle, __ATOMIC_ACQUIRE);
	cudaStream_t stream;
	dim3 grid, block;
	size_t shmem;

	if (!h && !__cudaGetKernel(&h, (const void *)softmax_fwd))
		__atomic_store_n(&handle, h, __ATOMIC_RELEASE);
	if (__cudaPopCallConfiguration(&grid, &block, &shmem, &stream))
		return;
	launched(LAUNCH_HANDLE(h, grid, block, args, shmem, stream), API("__cudaLaunchKernel"),
		 "softmax_fwd(float*, int)", "_Z11softmax_fwdPfi");
}

void layernorm(const float *x, float *y, int rows, int cols) __asm__("_Z9layernormPKfPfii");
void layernorm(const float *x, float *y, int rows, int cols)
{
	void *args[] = {&x, &y, &rows, &cols};
	cudaLaunchAttribute attr = {.id = cudaLaunchAttributePriority, .val.priority = 0};
	cudaLaunchConfig_t config = {.attrs = &attr, .numAttrs = 1};

	if (__cudaPopCallConfiguration(&config.gridDim, &config.blockDim, &config.dynamicSmemBytes,
				       &config.stream))
		return;
	launched(cudaLaunchKernelExC(&config, (const void *)layernorm, args),
		 API("cudaLaunchKernelExC"), "layernorm(float const*, float*, int, int)",
		 "_Z9layernormPKfPfii");
}

/*
 * What nvcc's generated module constructor does: register the fat binary and each
 * kernel's host stub with its device name, before main.
 */
static void unregister_kernels(void);
static void **fatbin_handle;

__attribute__((constructor)) static void register_kernels(void)
{
	static const struct {
		int magic, version;
		const void *data, *unused;
	} wrapper = {0x466243b1, 1, "sonde-standin gpu_train", NULL};

	fatbin_handle = __cudaRegisterFatBinary((void *)&wrapper);
	__cudaRegisterFunction(fatbin_handle, (const char *)matmul_tile,
			       (char *)"_Z11matmul_tilePfS_S_i", "_Z11matmul_tilePfS_S_i", -1, NULL,
			       NULL, NULL, NULL, NULL);
	__cudaRegisterFunction(fatbin_handle, (const char *)softmax_fwd,
			       (char *)"_Z11softmax_fwdPfi", "_Z11softmax_fwdPfi", -1, NULL, NULL,
			       NULL, NULL, NULL);
	__cudaRegisterFunction(fatbin_handle, (const char *)layernorm,
			       (char *)"_Z9layernormPKfPfii", "_Z9layernormPKfPfii", -1, NULL, NULL,
			       NULL, NULL, NULL);
	__cudaRegisterFatBinaryEnd(fatbin_handle);
	atexit(unregister_kernels);
}

static void unregister_kernels(void)
{
	__cudaUnregisterFatBinary(fatbin_handle);
}

/* Host work between steps, so the profile has CPU time of its own. */
static void host_preprocess(unsigned int us)
{
	uint64_t end = truth_now_ns() + us * 1000ull;
	volatile double x = 1;

	while (truth_now_ns() < end)
		x = x * 1.000001 + 1e-9;
}

static void *malloc_dev(const char *api, int dev, size_t size)
{
	void *p = NULL;
	cudaError_t e;

	e = cudaMalloc(&p, size);
	if (e) {
		fprintf(stderr, "gpu_train: cudaMalloc(%zu) on GPU %d: %s\n", size, dev,
			cudaGetErrorString(e));
		exit(1);
	}
	truth_alloc(api, dev, (uintptr_t)p, size);
	return p;
}

static void timed_wait(const char *api, cudaError_t (*wait)(void *), void *arg)
{
	uint64_t t0 = truth_now_ns();
	cudaError_t e = wait(arg);

	if (e)
		truth_failed(api);
	else
		truth_wait(api, truth_now_ns() - t0);
}

static cudaError_t stream_sync(void *s)
{
	return cudaStreamSynchronize((cudaStream_t)s);
}

static cudaError_t event_sync(void *e)
{
	return cudaEventSynchronize((cudaEvent_t)e);
}

static cudaError_t device_sync(void *unused)
{
	return cudaDeviceSynchronize();
}

static void copy(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s,
		 const char *kind_name)
{
	cudaError_t e;

	if (s)
		e = cudaMemcpyAsync(dst, src, n, kind, s);
	else
		e = cudaMemcpy(dst, src, n, kind);
	if (e)
		truth_failed(s ? API("cudaMemcpyAsync") : "cudaMemcpy");
	else
		truth_copy(s ? API("cudaMemcpyAsync") : "cudaMemcpy", kind_name, n);
}

static void allreduce(float *grads, size_t n, ncclComm_t comm, cudaStream_t s)
{
	if (ncclAllReduce(grads, grads, n, ncclFloat, ncclSum, comm, s))
		truth_failed("ncclAllReduce");
	else
		truth_nccl("ncclAllReduce", n * sizeof(float));
}

/* Every tenth step, a group of a broadcast and an all-gather, as when ranks resync. */
static void resync(float *weights, float *grads, ncclComm_t comm, cudaStream_t s)
{
	ncclGroupStart();
	if (!ncclBroadcast(weights, weights, 4096, ncclBfloat16, 0, comm, s))
		truth_nccl("ncclBroadcast", 4096 * 2);
	if (!ncclAllGather(weights, grads, 1024, ncclFloat, comm, s))
		truth_nccl("ncclAllGather", 1024 * 4);
	if (!ncclGroupEnd())
		truth_nccl_group();
}

static void *gpu_thread(void *arg)
{
	int dev = (int)(intptr_t)arg;
	size_t batch = 4 * MIB, act_size = 8 * MIB, weights_size = 64 * MIB + dev * MIB;
	float *weights, *grads, *managed, *act, loss;
	cudaGraphExec_t exec = NULL;
	cudaGraph_t graph = NULL;
	ncclComm_t comm = NULL;
	cudaStream_t s;
	cudaEvent_t ev;
	void *pinned;
	dim3 grid = {64, 1, 1}, block = {256, 1, 1}, one = {1, 1, 1};

	if (cudaSetDevice(dev) || cudaStreamCreate(&s) || cudaEventCreate(&ev) ||
	    cudaMallocHost(&pinned, batch)) {
		fprintf(stderr, "gpu_train: can't set up GPU %d: %s\n", dev,
			cudaGetErrorString(cudaGetLastError()));
		exit(1);
	}
	memset(pinned, 1, batch);
	weights = malloc_dev("cudaMalloc", dev, weights_size);
	grads = malloc_dev("cudaMalloc", dev, opt.floats * sizeof(float));
	if (cudaMallocManaged((void **)&managed, MIB + dev * 4096, cudaMemAttachGlobal)) {
		fprintf(stderr, "gpu_train: cudaMallocManaged failed\n");
		exit(1);
	}
	truth_alloc("cudaMallocManaged", dev, (uintptr_t)managed, MIB + dev * 4096);
	memset(managed, 0, MIB); /* managed memory is host-accessible */
	copy(weights, pinned, MIB, cudaMemcpyHostToDevice, NULL, "HostToDevice");
	if (opt.nccl) {
		if (ncclCommInitRank(&comm, opt.gpus, nccl_id, dev)) {
			fprintf(stderr, "gpu_train: ncclCommInitRank failed\n");
			exit(1);
		}
		truth_comm(dev, opt.gpus, dev);
	}

	/* A graph of three kernels, captured from the stream. */
	if (cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
		KERNEL_LAUNCH(matmul_tile, grid, block, 0, s, weights, weights, grads, 256);
		KERNEL_LAUNCH(matmul_tile, grid, block, 0, s, grads, weights, grads, 256);
		KERNEL_LAUNCH(softmax_fwd, grid, block, 0, s, grads, 256);
		truth_captured(3);
		if (cudaStreamEndCapture(s, &graph) || cudaGraphInstantiate(&exec, graph, 0))
			exec = NULL;
	}

	for (int step = 0; step < opt.steps; step++) {
		if (cudaMallocAsync((void **)&act, act_size, s)) {
			truth_failed(API("cudaMallocAsync"));
			continue;
		}
		truth_alloc(API("cudaMallocAsync"), dev, (uintptr_t)act, act_size);
		copy(act, pinned, batch, cudaMemcpyHostToDevice, s, "HostToDevice");
		for (int k = 0; k < opt.launches; k++) {
			KERNEL_LAUNCH(matmul_tile, grid, block, 0, s, act, weights, act, 1024);
			KERNEL_LAUNCH(softmax_fwd, grid, block, 4096, s, act, 1024);
			KERNEL_LAUNCH(layernorm, grid, block, 0, s, act, act, 64, 1024);
		}
		if (exec) {
			if (cudaGraphLaunch(exec, s))
				truth_failed(API("cudaGraphLaunch"));
			else
				truth_launch(API("cudaGraphLaunch"), NULL, NULL, 1);
		}
		copy(grads, weights, MIB, cudaMemcpyDeviceToDevice, s, "DeviceToDevice");
		if (opt.nccl) {
			allreduce(grads, opt.floats, comm, s);
			if (step % 10 == 9)
				resync(weights, grads, comm, s);
		}
		if (step % 5 == 4) {
			cudaEventRecord(ev, s);
			timed_wait("cudaEventSynchronize", event_sync, ev);
		} else {
			timed_wait(API("cudaStreamSynchronize"), stream_sync, s);
		}
		copy(&loss, act, sizeof(loss), cudaMemcpyDeviceToHost, NULL, "DeviceToHost");
		if (cudaFreeAsync(act, s))
			truth_failed(API("cudaFreeAsync"));
		else
			truth_free(API("cudaFreeAsync"), (uintptr_t)act);
		KERNEL_LAUNCH(matmul_tile, one, block, 0, s, managed, managed, managed, 16);
		host_preprocess(opt.cpu_us);
	}
	timed_wait("cudaDeviceSynchronize", device_sync, NULL);
	if (!cudaFree(weights))
		truth_free("cudaFree", (uintptr_t)weights);
	if (comm)
		ncclCommDestroy(comm);
	if (exec)
		cudaGraphExecDestroy(exec);
	if (graph)
		cudaGraphDestroy(graph);
	cudaEventDestroy(ev);
	cudaStreamDestroy(s);
	cudaFreeHost(pinned);
	return NULL;
}

/* Calls that fail; a profiler must not count them as allocations, frees or launches. */
static void failing_calls(void)
{
	dim3 grid = {1, 1, 1}, too_big = {2048, 1, 1};
	void *p = NULL;

	cudaSetDevice(0);
	if (cudaMalloc(&p, (size_t)1 << 50) == cudaErrorMemoryAllocation)
		truth_failed("cudaMalloc");
	if (cudaFree((void *)0x1000) == cudaErrorInvalidValue)
		truth_failed("cudaFree");
	KERNEL_LAUNCH(matmul_tile, grid, too_big, 0, NULL, NULL, NULL, NULL, 0);
	cudaGetLastError();
}

/* What the pool of device 0 holds of the device (-1: unknown). */
static long long pool_reserved(cudaMemPool_t pool)
{
	unsigned long long v = 0;

	if (cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &v)) {
		truth_failed("cudaMemPoolGetAttribute");
		return -1;
	}
	return (long long)v;
}

/* --pool-keep, before the steps: device 0's default pool keeps up to opt.pool_keep bytes. */
static cudaMemPool_t pool_keep_begin(void)
{
	unsigned long long v = (unsigned long long)opt.pool_keep;
	cudaMemPool_t pool = NULL;

	cudaSetDevice(0);
	if (cudaDeviceGetDefaultMemPool(&pool, 0)) {
		truth_failed("cudaDeviceGetDefaultMemPool");
		return NULL;
	}
	if (cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &v)) {
		truth_failed("cudaMemPoolSetAttribute");
		return NULL;
	}
	return pool;
}

/* --pool-keep, after the steps: the pool trimmed to nothing kept (unless --no-pool-trim),
 * then a synchronize. */
static void pool_keep_end(cudaMemPool_t pool)
{
	long long before = -1, after = -1;
	bool trimmed = false;

	cudaSetDevice(0);
	if (pool) {
		before = pool_reserved(pool);
		trimmed = opt.pool_trim && !cudaMemPoolTrimTo(pool, 0);
		if (opt.pool_trim && !trimmed)
			truth_failed("cudaMemPoolTrimTo");
	}
	timed_wait("cudaDeviceSynchronize", device_sync, NULL);
	if (pool)
		after = pool_reserved(pool);
	truth_note(
		"pool_keep",
		"{\"device\": 0, \"release_threshold\": %lld, \"set\": %s, \"trimmed_to\": 0, "
		"\"trimmed\": %s, \"reserved_before_trim\": %lld, \"reserved_after_trim\": %lld}",
		opt.pool_keep, pool ? "true" : "false", trimmed ? "true" : "false", before, after);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: gpu_train [--gpus N] [--steps N] [--launches K] [--floats M] "
		   "[--cpu-us U] [--no-nccl] [--hold] [--pool-keep BYTES [--no-pool-trim]]\n"
		   "  A fake data-parallel training loop on the CUDA and NCCL stand-ins; prints\n"
		   "  one JSON line of ground truth (tests/gpu/README.md). --hold: then wait\n"
		   "  for stdin to close before exiting, its memory still held. --pool-keep:\n"
		   "  device 0's default memory pool keeps up to BYTES freed (its release\n"
		   "  threshold) during the steps, and is trimmed to 0 after them (not with\n"
		   "  --no-pool-trim).\n");
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"gpus", required_argument, NULL, 'g'},
		{"steps", required_argument, NULL, 's'},
		{"launches", required_argument, NULL, 'k'},
		{"floats", required_argument, NULL, 'm'},
		{"cpu-us", required_argument, NULL, 'c'},
		{"no-nccl", no_argument, NULL, 'n'},
		{"hold", no_argument, NULL, 'H'},
		{"pool-keep", required_argument, NULL, 'P'},
		{"no-pool-trim", no_argument, NULL, 'T'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	pthread_t threads[64];
	cudaMemPool_t pool = NULL;
	int c, ngpus = 0;
	bool hold = false;
	char *end;

	while ((c = getopt_long(argc, argv, "g:s:k:m:c:nh", longopts, NULL)) != -1) {
		switch (c) {
		case 'g':
			opt.gpus = atoi(optarg);
			break;
		case 's':
			opt.steps = atoi(optarg);
			break;
		case 'k':
			opt.launches = atoi(optarg);
			break;
		case 'm':
			opt.floats = strtoull(optarg, NULL, 0);
			break;
		case 'c':
			opt.cpu_us = (unsigned int)atoi(optarg);
			break;
		case 'n':
			opt.nccl = false;
			break;
		case 'H':
			hold = true;
			break;
		case 'P':
			opt.pool_keep = strtoll(optarg, &end, 0);
			if (end == optarg || *end || opt.pool_keep < 0) {
				usage(stderr);
				return 2;
			}
			break;
		case 'T':
			opt.pool_trim = false;
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (cudaGetDeviceCount(&ngpus) || opt.gpus < 1 || opt.gpus > ngpus || opt.gpus > 64 ||
	    opt.floats < 4096) {
		fprintf(stderr, "gpu_train: need 1..%d GPUs and --floats >= 4096 -- %s\n", ngpus,
			cudaGetErrorString(cudaGetLastError()));
		return 1;
	}
	truth_init(strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0]);
	truth_note("gpus", "%d", opt.gpus);
	truth_note("steps", "%d", opt.steps);
	truth_note("launches_per_kernel_per_step", "%d", opt.launches);
	truth_note("allreduce_floats", "%zu", opt.floats);
	truth_note("via_driver", "\"%s\"", getenv("SONDE_STANDIN_CUDART_VIA_DRIVER") ?: "");
	if (opt.nccl && ncclGetUniqueId(&nccl_id)) {
		fprintf(stderr, "gpu_train: ncclGetUniqueId failed\n");
		return 1;
	}
	failing_calls();
	if (opt.pool_keep >= 0)
		pool = pool_keep_begin();
	for (int i = 0; i < opt.gpus; i++)
		pthread_create(&threads[i], NULL, gpu_thread, (void *)(intptr_t)i);
	for (int i = 0; i < opt.gpus; i++)
		pthread_join(threads[i], NULL);
	if (opt.pool_keep >= 0)
		pool_keep_end(pool);
	truth_print();
	/* Held for a test to read what an observer sees of a live process
	 * (its memory, its counters) before the exit clears it. */
	if (hold) {
		char buf[256];

		fflush(stdout);
		while (fread(buf, 1, sizeof(buf), stdin) > 0)
			;
	}
	return 0;
}
