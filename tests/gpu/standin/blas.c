/*
 * blas.c: libstandin_blas.so.1, a BLAS-like library over the libcuda.so.1 stand-in, for
 * Sonde's tests on machines without a GPU. It reaches the GPU the way cuBLAS does, not
 * the way a program does: cuBLAS carries its own copy of the CUDA runtime (linked
 * statically into libcublasLt, no exported runtime function a probe could sit on), which
 * dlopens libcuda.so.1 and takes every driver function from cuGetProcAddress_v2; its
 * kernels live in a library it loads with cuLibraryLoadData, looked up by name with
 * cuLibraryGetKernel and launched through the driver -- a gemm through the function
 * cuKernelGetFunction gives for the calling thread's context, with cuLaunchKernel, a
 * gemv with the CUkernel itself, with cuLaunchKernelEx. Each handle holds a 4 MiB
 * workspace from cuMemAlloc, as cuBLAS's does. So a profiler sees these launches only
 * in the driver, with handles it must name from the library API.
 *
 * Its API is its own (sb*); it computes nothing. Kernel names are cuBLAS-like: a plain
 * name for the gemm, a mangled C++ template for the gemv.
 */
#include <pthread.h>
#include <stdlib.h>

#include <cuda.h>

#include "blas.h"
#include "standin.h"

#define LIB "libstandin_blas: "
#define WORKSPACE (4ull << 20)

struct sbContext {
	CUstream stream;
	CUcontext ctx;
	CUfunction gemm; /* cuKernelGetFunction of the gemm kernel in ctx */
	CUdeviceptr workspace;
};

static struct {
	standin_get_proc_fn get_proc;
	CUresult (*init)(unsigned int);
	CUresult (*library_load_data)(CUlibrary *, const void *, CUjit_option *, void **,
				      unsigned int, CUlibraryOption *, void **, unsigned int);
	CUresult (*library_get_kernel)(CUkernel *, CUlibrary, const char *);
	CUresult (*kernel_get_function)(CUfunction *, CUkernel);
	CUresult (*launch_kernel)(CUfunction, unsigned int, unsigned int, unsigned int,
				  unsigned int, unsigned int, unsigned int, unsigned int, CUstream,
				  void **, void **);
	CUresult (*launch_kernel_ex)(const CUlaunchConfig *, CUfunction, void **, void **);
	CUresult (*ctx_get_current)(CUcontext *);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*mem_free)(CUdeviceptr);
	CUresult (*graph_add_kernel_node)(CUgraphNode *, CUgraph, const CUgraphNode *, size_t,
					  const CUDA_KERNEL_NODE_PARAMS *);
} D;

static const char image[] = "sonde-standin libstandin_blas kernels";
static pthread_once_t once = PTHREAD_ONCE_INIT;
static CUresult init_err;
static CUlibrary library;
static CUkernel gemm_kernel, gemv_kernel;

#define PROC(field, sym, name, version)                                                            \
	do {                                                                                       \
		_Static_assert(                                                                    \
			__builtin_types_compatible_p(__typeof__(&sym), __typeof__(D.field)),       \
			#sym " does not match D." #field);                                         \
		*(void **)&D.field = standin_driver_proc(D.get_proc, name, version, 0);            \
		ok = ok && D.field;                                                                \
	} while (0)

static void setup(void)
{
	bool ok = true;

	D.get_proc = standin_get_proc_address();
	if (!D.get_proc) {
		init_err = CUDA_ERROR_NOT_FOUND;
		return;
	}
	PROC(init, cuInit, "cuInit", 2000);
	PROC(library_load_data, cuLibraryLoadData, "cuLibraryLoadData", 12000);
	PROC(library_get_kernel, cuLibraryGetKernel, "cuLibraryGetKernel", 12000);
	PROC(kernel_get_function, cuKernelGetFunction, "cuKernelGetFunction", 12000);
	PROC(launch_kernel, cuLaunchKernel, "cuLaunchKernel", 4000);
	PROC(launch_kernel_ex, cuLaunchKernelEx, "cuLaunchKernelEx", 11060);
	PROC(ctx_get_current, cuCtxGetCurrent, "cuCtxGetCurrent", 4000);
	PROC(mem_alloc, cuMemAlloc_v2, "cuMemAlloc", 3020);
	PROC(mem_free, cuMemFree_v2, "cuMemFree", 3020);
	PROC(graph_add_kernel_node, cuGraphAddKernelNode_v2, "cuGraphAddKernelNode", 12000);
	if (!ok) {
		init_err = CUDA_ERROR_NOT_FOUND;
		return;
	}
	init_err = D.init(0);
	if (!init_err)
		init_err = D.library_load_data(&library, image, NULL, NULL, 0, NULL, NULL, 0);
	if (!init_err)
		init_err = D.library_get_kernel(&gemm_kernel, library, SB_GEMM_KERNEL);
	if (!init_err)
		init_err = D.library_get_kernel(&gemv_kernel, library, SB_GEMV_KERNEL);
	STANDIN_TRACE(LIB "initialized = %d", init_err);
}

int sbCreate(sbHandle_t *handle)
{
	struct sbContext *c;
	CUresult e;

	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_once(&once, setup);
	if (init_err)
		return init_err;
	c = calloc(1, sizeof(*c));
	if (!c)
		return CUDA_ERROR_OUT_OF_MEMORY;
	e = D.ctx_get_current(&c->ctx);
	if (!e && !c->ctx)
		e = CUDA_ERROR_INVALID_CONTEXT;
	if (!e)
		e = D.kernel_get_function(&c->gemm, gemm_kernel);
	if (!e)
		e = D.mem_alloc(&c->workspace, WORKSPACE);
	if (e) {
		free(c);
		return e;
	}
	*handle = c;
	return CUDA_SUCCESS;
}

int sbDestroy(sbHandle_t handle)
{
	CUresult e;

	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	e = D.mem_free(handle->workspace);
	free(handle);
	return e;
}

int sbSetStream(sbHandle_t handle, CUstream stream)
{
	if (!handle)
		return CUDA_ERROR_INVALID_VALUE;
	handle->stream = stream;
	return CUDA_SUCCESS;
}

int sbGetWorkspace(sbHandle_t handle, CUdeviceptr *ptr, size_t *size)
{
	if (!handle || !ptr || !size)
		return CUDA_ERROR_INVALID_VALUE;
	*ptr = handle->workspace;
	*size = WORKSPACE;
	return CUDA_SUCCESS;
}

static unsigned int tiles(int n, int tile)
{
	return n <= 0 ? 1 : (unsigned int)((n + tile - 1) / tile);
}

int sbSgemm(sbHandle_t handle, int m, int n, int k, CUdeviceptr a, CUdeviceptr b, CUdeviceptr c)
{
	void *params[] = {&a, &b, &c, &m, &n, &k};
	CUresult e;

	if (!handle || m <= 0 || n <= 0 || k <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	e = D.launch_kernel(handle->gemm, tiles(m, 128), tiles(n, 128), 1, 256, 1, 1, 49152,
			    handle->stream, params, NULL);
	STANDIN_TRACE(LIB "sbSgemm(%d, %d, %d) = %d", m, n, k, e);
	return e;
}

int sbSgemmNode(sbHandle_t handle, CUgraph graph, CUgraphNode *node, int m, int n, int k,
		CUdeviceptr a, CUdeviceptr b, CUdeviceptr c)
{
	void *params[] = {&a, &b, &c, &m, &n, &k};
	CUDA_KERNEL_NODE_PARAMS p = {
		.gridDimX = tiles(m, 128),
		.gridDimY = tiles(n, 128),
		.gridDimZ = 1,
		.blockDimX = 256,
		.blockDimY = 1,
		.blockDimZ = 1,
		.sharedMemBytes = 49152,
		.kernelParams = params,
		.kern = gemm_kernel, /* no function: the CUkernel, in the graph's context */
	};
	CUresult e;

	if (!handle || m <= 0 || n <= 0 || k <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	e = D.graph_add_kernel_node(node, graph, NULL, 0, &p);
	STANDIN_TRACE(LIB "sbSgemmNode(%d, %d, %d) = %d", m, n, k, e);
	return e;
}

int sbSgemv(sbHandle_t handle, int m, int n, CUdeviceptr a, CUdeviceptr x, CUdeviceptr y)
{
	void *params[] = {&a, &x, &y, &n};
	CUlaunchConfig cfg = {
		.gridDimX = tiles(m, 128),
		.gridDimY = 1,
		.gridDimZ = 1,
		.blockDimX = 128,
		.blockDimY = 1,
		.blockDimZ = 1,
		.hStream = NULL,
	};
	CUresult e;

	if (!handle || m <= 0 || n <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	cfg.hStream = handle->stream;
	/* A CUkernel launches as it is, in the current context. */
	e = D.launch_kernel_ex(&cfg, (CUfunction)gemv_kernel, params, NULL);
	STANDIN_TRACE(LIB "sbSgemv(%d, %d) = %d", m, n, e);
	return e;
}
