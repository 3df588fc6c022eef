/*
 * blas.h: the API of libstandin_blas.so.1 (blas.c), a BLAS-like library over the
 * libcuda.so.1 stand-in that launches as cuBLAS does. Functions return a CUresult.
 */
#ifndef SONDE_STANDIN_BLAS_H
#define SONDE_STANDIN_BLAS_H

#include <stddef.h>

#include <cuda.h>

/* The kernels' names in its library, as cuBLAS names its own: a plain name and a
 * mangled template (demangled: SB_GEMV_NAME). */
#define SB_GEMM_KERNEL                                                                             \
	"sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_"    \
	"segment_k_off_kernel__5x_cublas"
#define SB_GEMV_KERNEL "_Z13gemv2T_kernelIfLi128EEvPKT_S2_PS0_i"
#define SB_GEMV_NAME "void gemv2T_kernel<float, 128>(float const*, float const*, float*, int)"

typedef struct sbContext *sbHandle_t;

/* A handle for the calling thread's current context, with its 4 MiB workspace. */
int sbCreate(sbHandle_t *handle);
int sbDestroy(sbHandle_t handle);
int sbSetStream(sbHandle_t handle, CUstream stream);
int sbGetWorkspace(sbHandle_t handle, CUdeviceptr *ptr, size_t *size);
/* One gemm kernel: cuLaunchKernel of the function for the handle's context. */
int sbSgemm(sbHandle_t handle, int m, int n, int k, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c);
/* One gemm kernel as a node of a graph: cuGraphAddKernelNode_v2 of the CUkernel. */
int sbSgemmNode(sbHandle_t handle, CUgraph graph, CUgraphNode *node, int m, int n, int k,
		CUdeviceptr a, CUdeviceptr b, CUdeviceptr c);
/* One gemv kernel: cuLaunchKernelEx of the CUkernel. */
int sbSgemv(sbHandle_t handle, int m, int n, CUdeviceptr a, CUdeviceptr x, CUdeviceptr y);

#endif
