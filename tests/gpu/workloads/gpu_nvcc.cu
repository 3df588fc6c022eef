/*
 * gpu_nvcc.cu: a CUDA program as users write it, compiled by the real nvcc and linked
 * against the libcudart.so.13 stand-in instead of NVIDIA's runtime: nvcc's own module
 * constructor registers the fat binary and kernels, and each <<<...>>> goes through
 * __cudaPushCallConfiguration, the generated stub, __cudaGetKernel and __cudaLaunchKernel
 * (which enters cudaLaunchKernel). Built only where nvcc is installed. Prints truth.h's
 * JSON line; its launches count under __cudaLaunchKernel, what the stubs call.
 */
#include <cstdio>
#include <cstdlib>

#include <cuda_runtime.h>

#include "truth.h"

__global__ void saxpy(float a, const float *x, float *y, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;

	if (i < n)
		y[i] = a * x[i] + y[i];
}

__global__ void scale_rows(float *m, int rows, int cols, float s)
{
	int r = blockIdx.y, c = blockIdx.x * blockDim.x + threadIdx.x;

	if (r < rows && c < cols)
		m[r * cols + c] *= s;
}

static void check(cudaError_t e, const char *what)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "gpu_nvcc: %s: %s\n", what, cudaGetErrorString(e));
		exit(1);
	}
}

int main(int argc, char **argv)
{
	const int n = 1 << 20, rows = 64, cols = 4096, iters = argc > 1 ? atoi(argv[1]) : 10;
	float *x, *y, *m, *host;
	cudaStream_t s;

	truth_init("gpu_nvcc");
	check(cudaSetDevice(0), "cudaSetDevice");
	check(cudaStreamCreate(&s), "cudaStreamCreate");
	check(cudaMalloc(&x, n * sizeof(float)), "cudaMalloc");
	truth_alloc("cudaMalloc", 0, (uintptr_t)x, n * sizeof(float));
	check(cudaMalloc(&y, n * sizeof(float)), "cudaMalloc");
	truth_alloc("cudaMalloc", 0, (uintptr_t)y, n * sizeof(float));
	check(cudaMalloc(&m, rows * cols * sizeof(float)), "cudaMalloc");
	truth_alloc("cudaMalloc", 0, (uintptr_t)m, rows * cols * sizeof(float));
	host = (float *)calloc(n, sizeof(float));
	check(cudaMemcpy(x, host, n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy");
	truth_copy("cudaMemcpy", "HostToDevice", n * sizeof(float));

	for (int i = 0; i < iters; i++) {
		saxpy<<<(n + 255) / 256, 256, 0, s>>>(2.0f, x, y, n);
		check(cudaGetLastError(), "saxpy");
		truth_launch("__cudaLaunchKernel", "saxpy(float, float const*, float*, int)",
			     "_Z5saxpyfPKfPfi", 1);
		scale_rows<<<dim3(cols / 128, rows), 128, 0, s>>>(m, rows, cols, 0.5f);
		check(cudaGetLastError(), "scale_rows");
		truth_launch("__cudaLaunchKernel", "scale_rows(float*, int, int, float)",
			     "_Z10scale_rowsPfiif", 1);
		uint64_t t0 = truth_now_ns();
		check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
		truth_wait("cudaStreamSynchronize", truth_now_ns() - t0);
	}
	check(cudaMemcpy(host, y, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
	truth_copy("cudaMemcpy", "DeviceToHost", n * sizeof(float));
	check(cudaFree(x), "cudaFree");
	truth_free("cudaFree", (uintptr_t)x);
	check(cudaFree(y), "cudaFree");
	truth_free("cudaFree", (uintptr_t)y);
	truth_note("grids", "{\"saxpy\":[%d,1,1],\"scale_rows\":[%d,%d,1]}", (n + 255) / 256,
		   cols / 128, rows);
	truth_print();
	free(host);
	return 0;
}
