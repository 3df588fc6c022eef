/*
 * gpu_driver.c: a program on the CUDA driver API alone (linked to the libcuda.so.1
 * stand-in, no runtime), as JIT compilers and frameworks with their own loaders are. It
 * names kernels the two driver ways (cuModuleGetFunction on a module, cuLibraryGetKernel
 * on a library), launches them with cuLaunchKernel and cuLaunchKernelEx and through a
 * captured graph, allocates with cuMemAlloc, cuMemAllocAsync and the virtual memory API
 * (cuMemCreate, mapped into a reserved range), switches between the primary context of
 * GPU 0 and a created context on GPU 1, waits with cuStreamSynchronize and
 * cuCtxSynchronize, and makes three calls that fail. It ends with one allocation still
 * held. Prints truth.h's JSON line.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

#include "truth.h"

#define MIB (1ull << 20)

#define GEMM_SYM "_Z9gemm_bf16PvS_S_i"
#define GEMM_NAME "gemm_bf16(void*, void*, void*, int)"
#define REDUCE_SYM "_Z10reduce_sumPKfPfi"
#define REDUCE_NAME "reduce_sum(float const*, float*, int)"

static const char image[] = "sonde-standin gpu_driver module";

static void check(CUresult e, const char *what)
{
	const char *s = NULL;

	if (e == CUDA_SUCCESS)
		return;
	cuGetErrorString(e, &s);
	fprintf(stderr, "gpu_driver: %s: %s\n", what, s ? s : "unknown error");
	exit(1);
}

static CUdeviceptr alloc(int dev, size_t size)
{
	CUdeviceptr p;

	check(cuMemAlloc(&p, size), "cuMemAlloc");
	truth_alloc("cuMemAlloc_v2", dev, p, size);
	return p;
}

static void release(CUdeviceptr p)
{
	check(cuMemFree(p), "cuMemFree");
	truth_free("cuMemFree_v2", p);
}

static void launch(CUfunction f, const char *name, const char *sym, CUstream s, void **params)
{
	check(cuLaunchKernel(f, 8, 8, 1, 16, 16, 1, 0, s, params, NULL), "cuLaunchKernel");
	truth_launch("cuLaunchKernel", name, sym, 1);
}

static void launch_ex(CUfunction f, const char *name, const char *sym, CUstream s, void **params)
{
	CUlaunchConfig config = {
		.gridDimX = 128,
		.gridDimY = 1,
		.gridDimZ = 1,
		.blockDimX = 512,
		.blockDimY = 1,
		.blockDimZ = 1,
		.sharedMemBytes = 8192,
		.hStream = s,
	};

	check(cuLaunchKernelEx(&config, f, params, NULL), "cuLaunchKernelEx");
	truth_launch("cuLaunchKernelEx", name, sym, 1);
}

static void wait_stream(CUstream s)
{
	uint64_t t0 = truth_now_ns();

	check(cuStreamSynchronize(s), "cuStreamSynchronize");
	truth_wait("cuStreamSynchronize", truth_now_ns() - t0);
}

static void wait_ctx(void)
{
	uint64_t t0 = truth_now_ns();

	check(cuCtxSynchronize(), "cuCtxSynchronize");
	truth_wait("cuCtxSynchronize", truth_now_ns() - t0);
}

/* Calls that fail; a profiler must not count them. */
static void failing_calls(CUfunction f, CUstream s)
{
	CUdeviceptr p;

	if (cuMemAlloc(&p, (size_t)1 << 50) == CUDA_ERROR_OUT_OF_MEMORY)
		truth_failed("cuMemAlloc_v2");
	if (cuMemFree((CUdeviceptr)0x1000) == CUDA_ERROR_INVALID_VALUE)
		truth_failed("cuMemFree_v2");
	if (cuLaunchKernel(f, 1, 1, 1, 2048, 1, 1, 0, s, NULL, NULL) == CUDA_ERROR_INVALID_VALUE)
		truth_failed("cuLaunchKernel");
}

int main(int argc, char **argv)
{
	int iters = 10, launches = 4, ndev = 0, n = 64;
	CUdeviceptr a, b, va, tmp;
	CUmemGenericAllocationHandle handle;
	CUmemAllocationProp prop = {0};
	CUmemAccessDesc access = {0};
	CUcontext primary, other;
	CUgraphExec exec;
	CUgraph graph;
	CUlibrary lib;
	CUmodule mod;
	CUfunction gemm, reduce;
	CUkernel reduce_kernel;
	CUdevice dev0, dev1;
	CUstream s;
	size_t gran, vsize, total, free_mem;
	char name[256];
	void *params[] = {&a, &b, &a, &n};
	int c;

	while ((c = getopt(argc, argv, "i:k:h")) != -1) {
		switch (c) {
		case 'i':
			iters = atoi(optarg);
			break;
		case 'k':
			launches = atoi(optarg);
			break;
		default:
			fprintf(c == 'h' ? stdout : stderr,
				"usage: gpu_driver [-i ITERATIONS] [-k LAUNCHES]\n"
				"  Driver-API calls on the libcuda stand-in; prints one JSON line\n"
				"  of ground truth (tests/gpu/README.md).\n");
			return c == 'h' ? 0 : 2;
		}
	}
	truth_init("gpu_driver");
	check(cuInit(0), "cuInit");
	check(cuDeviceGetCount(&ndev), "cuDeviceGetCount");
	check(cuDeviceGet(&dev0, 0), "cuDeviceGet");
	check(cuDeviceTotalMem(&total, dev0), "cuDeviceTotalMem");
	check(cuDeviceGetName(name, sizeof(name), dev0), "cuDeviceGetName");
	check(cuDevicePrimaryCtxRetain(&primary, dev0), "cuDevicePrimaryCtxRetain");
	check(cuCtxSetCurrent(primary), "cuCtxSetCurrent");

	check(cuModuleLoadData(&mod, image), "cuModuleLoadData");
	check(cuModuleGetFunction(&gemm, mod, GEMM_SYM), "cuModuleGetFunction");
	check(cuLibraryLoadData(&lib, image, NULL, NULL, 0, NULL, NULL, 0), "cuLibraryLoadData");
	check(cuLibraryGetKernel(&reduce_kernel, lib, REDUCE_SYM), "cuLibraryGetKernel");
	check(cuKernelGetFunction(&reduce, reduce_kernel), "cuKernelGetFunction");
	check(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");

	a = alloc(0, 32 * MIB);
	b = alloc(0, 16 * MIB);

	/* Virtual memory management: physical memory counts when created, not when mapped. */
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = dev0;
	check(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM),
	      "cuMemGetAllocationGranularity");
	vsize = 4 * gran;
	check(cuMemCreate(&handle, vsize, &prop, 0), "cuMemCreate");
	truth_alloc("cuMemCreate", dev0, handle, vsize);
	check(cuMemAddressReserve(&va, vsize, 0, 0, 0), "cuMemAddressReserve");
	check(cuMemMap(va, vsize, 0, handle, 0), "cuMemMap");
	access.location = prop.location;
	access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
	check(cuMemSetAccess(va, vsize, &access, 1), "cuMemSetAccess");

	failing_calls(gemm, s);

	for (int i = 0; i < iters; i++) {
		check(cuMemAllocAsync(&tmp, MIB, s), "cuMemAllocAsync");
		truth_alloc("cuMemAllocAsync", 0, tmp, MIB);
		for (int k = 0; k < launches; k++) {
			launch(gemm, GEMM_NAME, GEMM_SYM, s, params);
			launch_ex(reduce, REDUCE_NAME, REDUCE_SYM, s, params);
		}
		check(cuMemFreeAsync(tmp, s), "cuMemFreeAsync");
		truth_free("cuMemFreeAsync", tmp);
		wait_stream(s);
	}

	/* A graph of three kernels, captured, then launched three times. */
	check(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL), "cuStreamBeginCapture");
	launch(gemm, GEMM_NAME, GEMM_SYM, s, params);
	launch(gemm, GEMM_NAME, GEMM_SYM, s, params);
	launch_ex(reduce, REDUCE_NAME, REDUCE_SYM, s, params);
	truth_captured(3);
	check(cuStreamEndCapture(s, &graph), "cuStreamEndCapture");
	check(cuGraphInstantiate(&exec, graph, 0), "cuGraphInstantiate");
	for (int i = 0; i < 3; i++) {
		check(cuGraphLaunch(exec, s), "cuGraphLaunch");
		truth_launch("cuGraphLaunch", NULL, NULL, 1);
	}
	wait_stream(s);

	/* A created context on the second GPU; allocations there belong to GPU 1. */
	if (ndev > 1) {
		CUdeviceptr c1;

		check(cuDeviceGet(&dev1, 1), "cuDeviceGet");
		check(cuCtxCreate(&other, NULL, 0, dev1), "cuCtxCreate");
		c1 = alloc(1, 8 * MIB);
		for (int k = 0; k < launches; k++)
			launch(gemm, GEMM_NAME, GEMM_SYM, NULL, params);
		wait_ctx();
		release(c1);
		check(cuCtxDestroy(other), "cuCtxDestroy");
		check(cuCtxSetCurrent(primary), "cuCtxSetCurrent");
	}

	check(cuMemGetInfo(&free_mem, &total), "cuMemGetInfo");
	truth_note("mem_get_info", "{\"free\":%zu,\"total\":%zu}", free_mem, total);
	truth_note("device_name", "\"%s\"", name);

	release(b);
	check(cuMemUnmap(va, vsize), "cuMemUnmap");
	check(cuMemRelease(handle), "cuMemRelease");
	truth_free("cuMemRelease", handle);
	check(cuMemAddressFree(va, vsize), "cuMemAddressFree");
	wait_ctx();
	check(cuGraphExecDestroy(exec), "cuGraphExecDestroy");
	check(cuGraphDestroy(graph), "cuGraphDestroy");
	check(cuStreamDestroy(s), "cuStreamDestroy");
	check(cuModuleUnload(mod), "cuModuleUnload");
	check(cuLibraryUnload(lib), "cuLibraryUnload");
	truth_print();
	return 0;
}
