/*
 * gpu_blas.c: a job that calls the GPU the ways a PyTorch training job does beside its own
 * kernels, on the stand-ins: matrix products through a BLAS-like library
 * (libstandin_blas.so.1, which like cuBLAS reaches the driver through cuGetProcAddress and
 * launches library kernels through cuKernelGetFunction + cuLaunchKernel and a CUkernel +
 * cuLaunchKernelEx), from several threads at once on several GPUs; a caching allocator with
 * expandable segments (PyTorch's PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True), which
 * finds the driver's virtual memory functions with cudaGetDriverEntryPointByVersion,
 * reserves a range with cuMemAddressReserve and grows and shrinks it with cuMemCreate +
 * cuMemMap + cuMemSetAccess and cuMemUnmap + cuMemRelease; cudaMallocAsync from the
 * stream-ordered pool; a CUDA graph captured from library launches, one of them on a side
 * stream that joins the capture through an event, and replayed; and one
 * built node by node -- a kernel of its own through cudaGraphAddKernelNode, the library's
 * through cuGraphAddKernelNode_v2 of its CUkernel -- and replayed.
 * Prints truth.h's JSON line.
 *
 * gpu_blas [--threads 4] [--gpus 2] [--iters 50] [--segments 8] [--hold]
 */
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "blas.h"
#include "truth.h"

#define MIB (1ull << 20)
#define GEMM_NAME SB_GEMM_KERNEL /* not mangled: its own name */
#define SEGMENT (20 * MIB)	 /* the allocator's growth step: 10 x 2 MiB pages */
/* What a launch of the built graph runs, as the profiles name it: its kernels, the most
 * launched first, then by name. */
#define BUILT_LABEL "[CUDA graph: scale_rows, " GEMM_NAME "]"

static struct {
	int threads, gpus, iters, segments;
	bool hold;
} opt = {4, 2, 50, 8, false};

static void die(const char *what, int e)
{
	fprintf(stderr, "gpu_blas: %s failed: %d\n", what, e);
	exit(1);
}

/* The driver's virtual memory functions, found as PyTorch's c10::cuda::DriverAPI does. */
static struct {
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const CUmemAllocationProp *,
			   unsigned long long);
	CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,
			unsigned long long);
	CUresult (*set_access)(CUdeviceptr, size_t, const CUmemAccessDesc *, size_t);
	CUresult (*unmap)(CUdeviceptr, size_t);
	CUresult (*release)(CUmemGenericAllocationHandle);
	CUresult (*address_free)(CUdeviceptr, size_t);
} vmm;

static void *entry(const char *name, unsigned int version)
{
	enum cudaDriverEntryPointQueryResult st;
	void *fn = NULL;
	cudaError_t e =
		cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &st);

	if (e || st != cudaDriverEntryPointSuccess || !fn)
		die(name, e ? (int)e : (int)st);
	return fn;
}

#define ENTRY(field, sym, name)                                                                    \
	do {                                                                                       \
		_Static_assert(                                                                    \
			__builtin_types_compatible_p(__typeof__(&sym), __typeof__(vmm.field)),     \
			#sym " does not match vmm." #field);                                       \
		*(void **)&vmm.field = entry(name, 12000);                                         \
	} while (0)

/* An expandable segment on device 0: a reserved range whose pages are created and mapped
 * as it grows and unmapped and released as it shrinks. Ends holding `keep` segments. */
static void expandable_segment(int grow, int keep)
{
	CUmemGenericAllocationHandle h[64];
	CUmemAllocationProp prop = {0};
	CUmemAccessDesc access = {0};
	CUdeviceptr base;
	int e;

	ENTRY(reserve, cuMemAddressReserve, "cuMemAddressReserve");
	ENTRY(create, cuMemCreate, "cuMemCreate");
	ENTRY(map, cuMemMap, "cuMemMap");
	ENTRY(set_access, cuMemSetAccess, "cuMemSetAccess");
	ENTRY(unmap, cuMemUnmap, "cuMemUnmap");
	ENTRY(release, cuMemRelease, "cuMemRelease");
	ENTRY(address_free, cuMemAddressFree, "cuMemAddressFree");
	if (grow > 64)
		grow = 64;
	if ((e = cudaSetDevice(0)))
		die("cudaSetDevice", e);
	if ((e = vmm.reserve(&base, 64 * SEGMENT, 0, 0, 0)))
		die("cuMemAddressReserve", e);
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 0;
	access.location = prop.location;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	for (int i = 0; i < grow; i++) {
		if ((e = vmm.create(&h[i], SEGMENT, &prop, 0)))
			die("cuMemCreate", e);
		truth_alloc("cuMemCreate", 0, h[i], SEGMENT);
		if ((e = vmm.map(base + i * SEGMENT, SEGMENT, 0, h[i], 0)) ||
		    (e = vmm.set_access(base + i * SEGMENT, SEGMENT, &access, 1)))
			die("cuMemMap", e);
	}
	/* Shrink (empty_cache): the pages past `keep` go back. */
	for (int i = grow - 1; i >= keep; i--) {
		if ((e = vmm.unmap(base + i * SEGMENT, SEGMENT)))
			die("cuMemUnmap", e);
		if ((e = vmm.release(h[i])))
			die("cuMemRelease", e);
		truth_free("cuMemRelease", h[i]);
	}
}

static void gemm(sbHandle_t h, CUdeviceptr a, int captured)
{
	int e = sbSgemm(h, 1024, 1024, 1024, a, a, a);

	if (e)
		die("sbSgemm", e);
	truth_launch("cuLaunchKernel", GEMM_NAME, SB_GEMM_KERNEL, 1);
	if (captured)
		truth_captured(1);
}

/* The host stub of a kernel of the job's own (nvcc would generate it; unregistered, the
 * runtime knows it by its symbol). */
__attribute__((noinline)) void scale_rows(void)
{
	__asm__ volatile("");
}

/* A graph of scale_rows and a library gemm, built node by node. */
static cudaGraphExec_t built_graph(sbHandle_t h, CUdeviceptr a)
{
	struct cudaKernelNodeParams kp = {
		.func = (void *)scale_rows,
		.gridDim = {4, 1, 1},
		.blockDim = {128, 1, 1},
	};
	cudaGraphNode_t own, lib;
	cudaGraphExec_t exec;
	cudaGraph_t graph;
	int e;

	if ((e = cudaGraphCreate(&graph, 0)) ||
	    (e = cudaGraphAddKernelNode(&own, graph, NULL, 0, &kp)))
		die("cudaGraphAddKernelNode", e);
	if ((e = sbSgemmNode(h, graph, (CUgraphNode *)&lib, 1024, 1024, 1024, a, a, a)))
		die("sbSgemmNode", e);
	if ((e = cudaGraphInstantiate(&exec, graph, 0)))
		die("cudaGraphInstantiate", e);
	return exec;
}

static void gemv(sbHandle_t h, CUdeviceptr a, int captured)
{
	int e = sbSgemv(h, 1024, 1024, a, a, a);

	if (e)
		die("sbSgemv", e);
	truth_launch("cuLaunchKernelEx", SB_GEMV_NAME, SB_GEMV_KERNEL, 1);
	if (captured)
		truth_captured(1);
}

static void *blas_thread(void *arg)
{
	int t = (int)(intptr_t)arg, dev = t % opt.gpus, e;
	cudaGraphExec_t exec = NULL, built;
	CUdeviceptr ws;
	cudaGraph_t graph;
	cudaEvent_t fork_ev, join_ev;
	cudaStream_t s, side;
	sbHandle_t h;
	size_t wsize;
	void *a, *tmp;

	if ((e = cudaSetDevice(dev)) || (e = cudaStreamCreate(&s)))
		die("cudaSetDevice/cudaStreamCreate", e);
	truth_mem_begin();
	if ((e = cudaMalloc(&a, 8 * MIB)))
		die("cudaMalloc", e);
	truth_alloc("cudaMalloc", dev, (uintptr_t)a, 8 * MIB);
	if ((e = sbCreate(&h)) || (e = sbSetStream(h, (CUstream)s)) ||
	    (e = sbGetWorkspace(h, &ws, &wsize)))
		die("sbCreate", e);
	truth_alloc("cuMemAlloc_v2", dev, ws, wsize);
	truth_mem_end();

	/* Two library kernels captured into a graph, and a third on a side stream that joins the
	 * capture by waiting on an event recorded in it and rejoins it the same way (as
	 * PyTorch's side streams do in a CUDA graph); replayed each tenth iteration. */
	if ((e = cudaStreamCreate(&side)) || (e = cudaEventCreate(&fork_ev)) ||
	    (e = cudaEventCreate(&join_ev)))
		die("cudaStreamCreate/cudaEventCreate", e);
	if ((e = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal)))
		die("cudaStreamBeginCapture", e);
	gemm(h, (CUdeviceptr)a, 1);
	gemm(h, (CUdeviceptr)a, 1);
	if ((e = cudaEventRecord(fork_ev, s)) || (e = cudaStreamWaitEvent(side, fork_ev, 0)) ||
	    (e = sbSetStream(h, (CUstream)side)))
		die("joining the capture", e);
	gemv(h, (CUdeviceptr)a, 1);
	if ((e = sbSetStream(h, (CUstream)s)) || (e = cudaEventRecord(join_ev, side)) ||
	    (e = cudaStreamWaitEvent(s, join_ev, 0)))
		die("rejoining the capture", e);
	if ((e = cudaStreamEndCapture(s, &graph)) || (e = cudaGraphInstantiate(&exec, graph, 0)))
		die("graph capture", e);
	built = built_graph(h, (CUdeviceptr)a);

	for (int i = 0; i < opt.iters; i++) {
		truth_mem_begin();
		if ((e = cudaMallocAsync(&tmp, MIB, s)))
			die("cudaMallocAsync", e);
		truth_alloc("cudaMallocAsync", dev, (uintptr_t)tmp, MIB);
		truth_mem_end();
		gemm(h, (CUdeviceptr)a, 0);
		gemv(h, (CUdeviceptr)a, 0);
		if (i % 10 == 9) {
			if ((e = cudaGraphLaunch(exec, s)))
				die("cudaGraphLaunch", e);
			truth_launch("cudaGraphLaunch", NULL, NULL, 1);
			if ((e = cudaGraphLaunch(built, s)))
				die("cudaGraphLaunch", e);
			truth_launch("cudaGraphLaunch", BUILT_LABEL, NULL, 1);
		}
		truth_mem_begin();
		if ((e = cudaFreeAsync(tmp, s)))
			die("cudaFreeAsync", e);
		truth_free("cudaFreeAsync", (uintptr_t)tmp);
		truth_mem_end();
		if (i % 10 == 9) {
			uint64_t t0 = truth_now_ns();

			if ((e = cudaStreamSynchronize(s)))
				die("cudaStreamSynchronize", e);
			truth_wait("cudaStreamSynchronize", truth_now_ns() - t0);
		}
	}
	truth_mem_begin();
	if ((e = sbDestroy(h)))
		die("sbDestroy", e);
	truth_free("cuMemFree_v2", ws);
	if ((e = cudaFree(a)))
		die("cudaFree", e);
	truth_free("cudaFree", (uintptr_t)a);
	truth_mem_end();
	return NULL;
}

int main(int argc, char **argv)
{
	static const struct option longs[] = {
		{"threads", required_argument, NULL, 't'},
		{"gpus", required_argument, NULL, 'g'},
		{"iters", required_argument, NULL, 'i'},
		{"segments", required_argument, NULL, 's'},
		{"hold", no_argument, NULL, 'H'},
		{0},
	};
	pthread_t th[64];
	int c;

	while ((c = getopt_long(argc, argv, "", longs, NULL)) != -1) {
		switch (c) {
		case 't':
			opt.threads = atoi(optarg);
			break;
		case 'g':
			opt.gpus = atoi(optarg);
			break;
		case 'i':
			opt.iters = atoi(optarg);
			break;
		case 's':
			opt.segments = atoi(optarg);
			break;
		case 'H':
			opt.hold = true;
			break;
		default:
			fprintf(stderr, "usage: gpu_blas [--threads N] [--gpus N] [--iters N] "
					"[--segments N] [--hold]\n");
			return 2;
		}
	}
	if (opt.threads < 1 || opt.threads > 64 || opt.gpus < 1 || opt.iters < 0 ||
	    opt.segments < 0 || opt.segments > 64) {
		fprintf(stderr, "gpu_blas: options out of range\n");
		return 2;
	}
	truth_init("gpu_blas");
	truth_note("threads", "%d", opt.threads);
	truth_note("gpus", "%d", opt.gpus);
	truth_note("iters", "%d", opt.iters);
	truth_note("segments", "%d", opt.segments);

	expandable_segment(opt.segments, opt.segments / 2);
	for (int i = 0; i < opt.threads; i++)
		pthread_create(&th[i], NULL, blas_thread, (void *)(intptr_t)i);
	for (int i = 0; i < opt.threads; i++)
		pthread_join(th[i], NULL);
	truth_print();
	fflush(stdout);
	if (opt.hold) {
		char buf[64];

		while (fread(buf, 1, sizeof(buf), stdin) > 0)
			;
	}
	return 0;
}
