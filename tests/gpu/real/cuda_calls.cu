/* cuda_calls.cu: calls the real CUDA runtime with known, distinct arguments
 * so that tests/integration/test_gpu_real_runtime.py can check that the GPU probes
 * decode each one. Built three ways by real.mk: against the shared
 * libcudart.so.13, with per-thread default streams (the _ptsz/_ptds entry
 * points), and with cudart linked statically (symbols in the executable's
 * .symtab). There is no GPU: every call fails for lack of a driver, after
 * the entry probe has seen its arguments.
 *
 * Protocol: prints "ready" once its libraries are loaded, waits for a line
 * on stdin (the harness attaches meanwhile), makes the calls, and writes
 * what it passed that only it knows (addresses, return codes) as one JSON
 * object to the file named by argv[1]. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

__global__ void sonde_test_kernel(float *a, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		a[i] += 1.0f;
}

#define U64(x) ((unsigned long long)(uintptr_t)(x))

/* Frames the test looks for in the captured stacks. */
extern "C" __attribute__((noinline)) int sonde_launch_explicit(float *a, int n)
{
	void *args[] = {&a, &n};

	return cudaLaunchKernel((const void *)sonde_test_kernel, dim3(11, 13, 17), dim3(64, 4, 2),
				args, 4096, (cudaStream_t)0x4444);
}

extern "C" __attribute__((noinline)) int sonde_launch_chevrons(float *a, int n)
{
	sonde_test_kernel<<<dim3(3, 5, 7), dim3(32, 2, 1), 1024, (cudaStream_t)0x3333>>>(a, n);
	return cudaGetLastError();
}

extern "C" __attribute__((noinline)) int sonde_wait_stream(void)
{
	return cudaStreamSynchronize((cudaStream_t)0x9999);
}

int main(int argc, char **argv)
{
	char line[64];
	FILE *out;
	void *p1 = (void *)0x5a5a0001, *p2 = (void *)0x5a5a0002, *p3 = (void *)0x5a5a0003;
	float *a = (float *)0xa0a0000;
	int n = 100;
	size_t free_b = 111, total_b = 222;
	static cudaDeviceProp prop;
	cudaKernel_t handle = (cudaKernel_t)0x6b6b;
	char host[64];
	int rc[32];
	int k = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s OUT.json\n", argv[0]);
		return 2;
	}
	printf("ready\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 3;

	rc[k++] = cudaSetDevice(1);
	rc[k++] = cudaMalloc(&p1, 1048583);
	rc[k++] = cudaMallocManaged(&p2, 12288, cudaMemAttachGlobal);
	rc[k++] = cudaMallocAsync(&p3, 777, (cudaStream_t)0x1111);
	rc[k++] = cudaFree((void *)0xdead0000);
	rc[k++] = cudaFreeAsync((void *)0xbeef0000, (cudaStream_t)0x2222);
	rc[k++] = sonde_launch_chevrons(a, n);
	rc[k++] = sonde_launch_explicit(a, n);
	{
		cudaLaunchConfig_t cfg;
		void *args[] = {&a, &n};

		memset(&cfg, 0, sizeof(cfg));
		cfg.gridDim = dim3(2, 4, 6);
		cfg.blockDim = dim3(8, 16, 1);
		cfg.dynamicSmemBytes = 2048;
		cfg.stream = (cudaStream_t)0x5555;
		rc[k++] = cudaLaunchKernelExC(&cfg, (const void *)sonde_test_kernel, args);
	}
	rc[k++] = cudaGraphLaunch((cudaGraphExec_t)0x6666, (cudaStream_t)0x7777);
	{
		cudaKernelNodeParams kp;
		cudaGraphNode_t node;

		memset(&kp, 0, sizeof(kp));
		kp.func = (void *)sonde_test_kernel;
		kp.gridDim = dim3(1, 1, 1);
		kp.blockDim = dim3(1, 1, 1);
		rc[k++] = cudaGraphAddKernelNode(&node, (cudaGraph_t)0x8888, NULL, 0, &kp);
	}
	rc[k++] = cudaMemcpy((void *)0x10000, host, 12345, cudaMemcpyHostToDevice);
	rc[k++] = cudaMemcpyAsync(host, (void *)0x20000, 54321, cudaMemcpyDeviceToHost,
				  (cudaStream_t)0x8888);
	rc[k++] = sonde_wait_stream();
	rc[k++] = cudaDeviceSynchronize();
	rc[k++] = cudaEventSynchronize((cudaEvent_t)0xaaaa);
	rc[k++] = cudaMemGetInfo(&free_b, &total_b);
	prop.totalGlobalMem = 0x123456789ull;
	rc[k++] = cudaGetDeviceProperties(&prop, 3);
	rc[k++] = cudaGetKernel(&handle, (const void *)sonde_test_kernel);

	out = fopen(argv[1], "w");
	if (!out) {
		perror(argv[1]);
		return 4;
	}
	fprintf(out,
		"{\"stub\": %llu, \"p1\": %llu, \"p2\": %llu, \"p3\": %llu, \"free_out\": %llu, "
		"\"total_out\": %llu, \"prop\": %llu, \"prop_total\": %llu, \"free_after\": %llu, "
		"\"total_after\": %llu, \"handle_out\": %llu, \"handle_after\": %llu, "
		"\"p1_after\": %llu, \"rc\": [",
		U64(sonde_test_kernel), U64(&p1), U64(&p2), U64(&p3), U64(&free_b), U64(&total_b),
		U64(&prop), (unsigned long long)prop.totalGlobalMem, (unsigned long long)free_b,
		(unsigned long long)total_b, U64(&handle), U64(handle), U64(p1));
	for (int i = 0; i < k; i++)
		fprintf(out, "%s%d", i ? ", " : "", rc[i]);
	fprintf(out, "]}\n");
	fclose(out);
	return 0;
}
