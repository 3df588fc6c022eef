/* driver_calls.c: calls the CUDA driver API of the toolkit's driver stub
 * (lib64/stubs/libcuda.so, soname libcuda.so.1: the real exported symbols,
 * every function returning CUDA_ERROR_STUB_LIBRARY without touching its
 * arguments) with known, distinct arguments, for test_gpu_real_driver.py. Built
 * twice by real.mk: as is, and with CUDA_API_PER_THREAD_DEFAULT_STREAM,
 * where cuda.h maps the stream functions to their _ptsz entry points.
 *
 * Protocol as cuda_calls.cu: "ready", wait for a line on stdin, call, and
 * write the addresses and return codes as JSON to argv[1]. */
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* Older context constructors, still exported; cuda.h only declares the
 * current one (cuCtxCreate is cuCtxCreate_v4 in CUDA 13). */
CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *params, int n, unsigned int flags,
			CUdevice dev);

#define U64(x) ((unsigned long long)(uintptr_t)(x))

__attribute__((noinline)) static CUresult sonde_drv_launch(void)
{
	return cuLaunchKernel((CUfunction)0x4242, 3, 5, 7, 32, 2, 1, 1024, (CUstream)0x3333, NULL,
			      NULL);
}

int main(int argc, char **argv)
{
	CUcontext ctx1 = (CUcontext)0xc1c1, ctx2 = (CUcontext)0xc2c2, ctx3 = (CUcontext)0xc3c3,
		  ctx4 = (CUcontext)0xc4c4;
	CUfunction f = (CUfunction)0x4242;
	CUkernel kern = (CUkernel)0x4343;
	CUdeviceptr d1 = 0x5b5b0001, d2 = 0x5b5b0002, d3 = 0x5b5b0003;
	CUmemGenericAllocationHandle h = 0x6c6c;
	CUmemAllocationProp prop;
	CUlaunchConfig cfg;
	CUDA_KERNEL_NODE_PARAMS kp;
	CUgraphNode node = (CUgraphNode)0x9a9a;
	size_t free_b = 111, total_b = 222, dev_total = 0x9876543210ull;
	char line[64];
	int rc[32], k = 0;
	FILE *out;

	if (argc < 2) {
		fprintf(stderr, "usage: %s OUT.json\n", argv[0]);
		return 2;
	}
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 3;

	rc[k++] = cuCtxSetCurrent((CUcontext)0xc7c7);
	rc[k++] = cuDevicePrimaryCtxRetain(&ctx1, 1);
	rc[k++] = cuCtxCreate_v2(&ctx2, 0, 2);
	rc[k++] = cuCtxCreate_v3(&ctx3, NULL, 0, 0, 3);
	rc[k++] = cuCtxCreate(&ctx4, NULL, 0, 4);
	rc[k++] = cuModuleGetFunction(&f, (CUmodule)0x3d3d, "sonde_drv_kernel");
	rc[k++] = cuLibraryGetKernel(&kern, (CUlibrary)0x3e3e, "sonde_lib_kernel");
	rc[k++] = sonde_drv_launch();
	memset(&cfg, 0, sizeof(cfg));
	cfg.gridDimX = 2;
	cfg.gridDimY = 4;
	cfg.gridDimZ = 6;
	cfg.blockDimX = 8;
	cfg.blockDimY = 16;
	cfg.blockDimZ = 1;
	cfg.sharedMemBytes = 2048;
	cfg.hStream = (CUstream)0x5555;
	rc[k++] = cuLaunchKernelEx(&cfg, (CUfunction)0x4343, NULL, NULL);
	rc[k++] = cuGraphLaunch((CUgraphExec)0x6666, (CUstream)0x7777);
	/* A kernel node of a function, then (no function) of a CUkernel. */
	memset(&kp, 0, sizeof(kp));
	kp.func = f;
	kp.gridDimX = kp.gridDimY = kp.gridDimZ = 1;
	kp.blockDimX = kp.blockDimY = kp.blockDimZ = 1;
	kp.kern = (CUkernel)0x4444;
	rc[k++] = cuGraphAddKernelNode(&node, (CUgraph)0x8888, NULL, 0, &kp);
	kp.func = NULL;
	kp.kern = kern;
	rc[k++] = cuGraphAddKernelNode(&node, (CUgraph)0x8889, NULL, 0, &kp);
	rc[k++] = cuMemAlloc(&d1, 4099);
	rc[k++] = cuMemAllocManaged(&d2, 8192, CU_MEM_ATTACH_GLOBAL);
	rc[k++] = cuMemAllocAsync(&d3, 999, (CUstream)0x1111);
	rc[k++] = cuMemFree((CUdeviceptr)0xdead0000);
	rc[k++] = cuMemFreeAsync((CUdeviceptr)0xbeef0000, (CUstream)0x2222);
	memset(&prop, 0, sizeof(prop));
	prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
	prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
	prop.location.id = 2;
	rc[k++] = cuMemCreate(&h, 2097152, &prop, 0);
	rc[k++] = cuMemRelease((CUmemGenericAllocationHandle)0x6d6d);
	rc[k++] = cuStreamSynchronize((CUstream)0x9999);
	rc[k++] = cuCtxSynchronize();
	rc[k++] = cuCtxSynchronize_v2((CUcontext)0xc8c8);
	rc[k++] = cuMemGetInfo(&free_b, &total_b);
	rc[k++] = cuDeviceTotalMem(&dev_total, 2);

	out = fopen(argv[1], "w");
	if (!out) {
		perror(argv[1]);
		return 4;
	}
	fprintf(out,
		"{\"ctx1\": %llu, \"ctx2\": %llu, \"ctx3\": %llu, \"ctx4\": %llu, \"f\": %llu, "
		"\"kern\": %llu, \"d1\": %llu, \"d2\": %llu, \"d3\": %llu, \"h\": %llu, "
		"\"free_out\": %llu, \"total_out\": %llu, \"dev_total_out\": %llu, \"rc\": [",
		U64(&ctx1), U64(&ctx2), U64(&ctx3), U64(&ctx4), U64(&f), U64(&kern), U64(&d1),
		U64(&d2), U64(&d3), U64(&h), U64(&free_b), U64(&total_b), U64(&dev_total));
	for (int i = 0; i < k; i++)
		fprintf(out, "%s%d", i ? ", " : "", rc[i]);
	fprintf(out, "]}\n");
	fclose(out);
	return 0;
}
