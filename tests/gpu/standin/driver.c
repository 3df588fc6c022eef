/*
 * driver.c: the public API of the libcuda.so.1 stand-in, for Sonde's tests on machines
 * without a GPU. Each function has the name and signature of the CUDA 13 driver function
 * (cuda.h is compiled with __CUDA_API_VERSION_INTERNAL, as the driver is, so both the
 * plain and the _v2/_ptsz/_ptds names are declared and checked against our definitions)
 * and behaves like it on the fake GPU of gpu.c: it validates its arguments, succeeds, and
 * takes the time a GPU would. The _ptsz and _ptds variants differ only in what a NULL
 * stream means: the calling thread's per-thread default stream. libcuda.map lists the
 * exported names; like the real driver, they carry no symbol version.
 */
#include <stdio.h>
#include <string.h>

#include "gpu.h"

#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <generated_cuda_meta.h>

#define LIB "libcuda: "

#define ENTER()                                                                                    \
	do {                                                                                       \
		if (!gpu_initialized())                                                            \
			return CUDA_ERROR_NOT_INITIALIZED;                                         \
	} while (0)

static CUstream ptsz(CUstream s)
{
	return s ? s : CU_STREAM_PER_THREAD;
}

static const struct {
	CUresult code;
	const char *name;
	const char *text;
} errors[] = {
	{CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
	{CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
	{CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
	{CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
	{CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
	{CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"},
	{CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"},
	{CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"},
	{CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"},
	{CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE",
	 "the operation is not permitted in the current state"},
	{CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "named symbol not found"},
	{CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "device not ready"},
	{CUDA_ERROR_LAUNCH_TIMEOUT, "CUDA_ERROR_LAUNCH_TIMEOUT",
	 "the launch timed out and was terminated"},
	{CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
	 "operation not permitted when stream is capturing"},
	{CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

CUresult cuGetErrorString(CUresult error, const char **pStr)
{
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
		if (errors[i].code == error) {
			*pStr = errors[i].text;
			return CUDA_SUCCESS;
		}
	}
	*pStr = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorName(CUresult error, const char **pStr)
{
	if (!pStr)
		return CUDA_ERROR_INVALID_VALUE;
	for (size_t i = 0; i < sizeof(errors) / sizeof(errors[0]); i++) {
		if (errors[i].code == error) {
			*pStr = errors[i].name;
			return CUDA_SUCCESS;
		}
	}
	*pStr = NULL;
	return CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
	const struct standin_gpu *t;

	if (!ppExportTable || !pExportTableId)
		return CUDA_ERROR_INVALID_VALUE;
	t = gpu_export_table(pExportTableId);
	if (!t)
		return CUDA_ERROR_INVALID_VALUE;
	*ppExportTable = t;
	return CUDA_SUCCESS;
}

CUresult cuInit(unsigned int Flags)
{
	CUresult err = gpu_init(Flags);

	STANDIN_TRACE(LIB "cuInit(%u) = %d", Flags, err);
	return err;
}

CUresult cuDriverGetVersion(int *driverVersion)
{
	return gpu_driver_get_version(driverVersion);
}

/* Devices and contexts. */

CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
	ENTER();
	return gpu_device_get(device, ordinal);
}

CUresult cuDeviceGetCount(int *count)
{
	ENTER();
	return gpu_device_get_count(count);
}

CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
	ENTER();
	return gpu_device_get_name(name, len, dev);
}

CUresult cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev)
{
	CUresult err;

	ENTER();
	err = gpu_device_total_mem(bytes, dev);
	STANDIN_TRACE(LIB "cuDeviceTotalMem_v2(dev=%d) = %d bytes=%zu", dev, err, err ? 0 : *bytes);
	return err;
}

CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	ENTER();
	return gpu_device_get_attribute(pi, attrib, dev);
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev)
{
	ENTER();
	return gpu_primary_ctx_retain(pctx, dev);
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev)
{
	ENTER();
	return gpu_primary_ctx_release(dev);
}

CUresult cuCtxCreate_v2(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	CUresult err;

	ENTER();
	err = gpu_ctx_create(pctx, flags, dev);
	STANDIN_TRACE(LIB "cuCtxCreate_v2(dev=%d) = %d", dev, err);
	return err;
}

CUresult cuCtxCreate_v3(CUcontext *pctx, CUexecAffinityParam *paramsArray, int numParams,
			unsigned int flags, CUdevice dev)
{
	ENTER();
	if (numParams < 0 || (numParams && !paramsArray))
		return CUDA_ERROR_INVALID_VALUE;
	return gpu_ctx_create(pctx, flags, dev);
}

CUresult cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *ctxCreateParams, unsigned int flags,
			CUdevice dev)
{
	CUresult err;

	ENTER();
	err = gpu_ctx_create(pctx, flags, dev);
	STANDIN_TRACE(LIB "cuCtxCreate_v4(dev=%d) = %d", dev, err);
	return err;
}

CUresult cuCtxDestroy_v2(CUcontext ctx)
{
	ENTER();
	return gpu_ctx_destroy(ctx);
}

CUresult cuCtxSetCurrent(CUcontext ctx)
{
	ENTER();
	return gpu_ctx_set_current(ctx);
}

CUresult cuCtxGetCurrent(CUcontext *pctx)
{
	ENTER();
	return gpu_ctx_get_current(pctx);
}

CUresult cuCtxGetDevice(CUdevice *device)
{
	ENTER();
	return gpu_ctx_get_device(device);
}

/* A call's callbacks for the CUPTI stand-in at its entry (exit false) or exit (with its
 * result), with NVIDIA's parameter struct of its arguments (NULL for a function that has
 * none, as cuCtxSynchronize). */
static void traced(uint32_t cbid, const char *api, const void *params, bool exit, CUresult err)
{
	const struct standin_tracer *t = gpu_tracer();

	if (t)
		t->api(CUPTI_CB_DOMAIN_DRIVER_API, cbid, api, params, NULL, exit, err);
}

CUresult cuCtxSynchronize(void)
{
	uint64_t t0 = standin_now_ns();
	CUresult err;

	ENTER();
	traced(CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize, "cuCtxSynchronize", NULL, false, 0);
	err = gpu_ctx_synchronize();
	traced(CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize, "cuCtxSynchronize", NULL, true, err);
	STANDIN_TRACE(LIB "cuCtxSynchronize() = %d waited=%lluns", err,
		      (unsigned long long)(standin_now_ns() - t0));
	return err;
}

/* CUDA 13: the context to synchronize is named (NULL: the current one). */
CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
	uint64_t t0 = standin_now_ns();
	cuCtxSynchronize_v2_params p = {ctx};
	CUresult err;

	ENTER();
	traced(CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2, "cuCtxSynchronize_v2", &p, false, 0);
	err = gpu_ctx_synchronize_ctx(ctx);
	traced(CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2, "cuCtxSynchronize_v2", &p, true, err);
	STANDIN_TRACE(LIB "cuCtxSynchronize_v2(ctx=%p) = %d waited=%lluns", (void *)ctx, err,
		      (unsigned long long)(standin_now_ns() - t0));
	return err;
}

/* Modules, libraries and kernels. */

CUresult cuModuleLoadData(CUmodule *module, const void *image)
{
	ENTER();
	return gpu_module_load_data(module, image);
}

CUresult cuModuleUnload(CUmodule hmod)
{
	ENTER();
	return gpu_module_unload(hmod);
}

CUresult cuModuleGetFunction(CUfunction *hfunc, CUmodule hmod, const char *name)
{
	CUresult err;

	ENTER();
	err = gpu_module_get_function(hfunc, hmod, name);
	STANDIN_TRACE(LIB "cuModuleGetFunction(name=%s) = %d f=%p", name ? name : "(null)", err,
		      err ? NULL : (void *)*hfunc);
	return err;
}

CUresult cuLibraryLoadData(CUlibrary *library, const void *code, CUjit_option *jitOptions,
			   void **jitOptionsValues, unsigned int numJitOptions,
			   CUlibraryOption *libraryOptions, void **libraryOptionValues,
			   unsigned int numLibraryOptions)
{
	ENTER();
	return gpu_library_load_data(library, code, jitOptions, jitOptionsValues, numJitOptions,
				     libraryOptions, libraryOptionValues, numLibraryOptions);
}

CUresult cuLibraryUnload(CUlibrary library)
{
	ENTER();
	return gpu_library_unload(library);
}

CUresult cuLibraryGetKernel(CUkernel *pKernel, CUlibrary library, const char *name)
{
	CUresult err;

	ENTER();
	err = gpu_library_get_kernel(pKernel, library, name);
	STANDIN_TRACE(LIB "cuLibraryGetKernel(name=%s) = %d kernel=%p", name ? name : "(null)", err,
		      err ? NULL : (void *)*pKernel);
	return err;
}

CUresult cuKernelGetFunction(CUfunction *pFunc, CUkernel kernel)
{
	ENTER();
	return gpu_kernel_get_function(pFunc, kernel);
}

/* Launches and graphs. */

/* One launch, traced for the CUPTI stand-in at its entry and exit with its callback id and
 * NVIDIA's parameter struct of the call (p: its arguments as passed). */
static CUresult launch(const char *api, uint32_t cbid, const void *p, CUfunction f, unsigned int gx,
		       unsigned int gy, unsigned int gz, unsigned int bx, unsigned int by,
		       unsigned int bz, unsigned int shmem, CUstream stream, void **params,
		       void **extra)
{
	const struct standin_tracer *t = gpu_tracer();
	const char *name = gpu_kernel_name(f);
	CUresult err;

	if (t)
		t->api(CUPTI_CB_DOMAIN_DRIVER_API, cbid, api, p, name, false, 0);
	err = gpu_launch_kernel(f, gx, gy, gz, bx, by, bz, shmem, stream, params, extra);
	if (t)
		t->api(CUPTI_CB_DOMAIN_DRIVER_API, cbid, api, p, name, true, err);
	STANDIN_TRACE(LIB "%s(f=%p name=%s grid=(%u,%u,%u) block=(%u,%u,%u) shmem=%u "
			  "stream=%p) = %d",
		      api, (void *)f, name ? name : "?", gx, gy, gz, bx, by, bz, shmem,
		      (void *)stream, err);
	return err;
}

CUresult cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
			unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
			unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
			void **kernelParams, void **extra)
{
	cuLaunchKernel_params p = {f,	      gridDimX,	    gridDimY,  gridDimZ,
				   blockDimX, blockDimY,    blockDimZ, sharedMemBytes,
				   hStream,   kernelParams, extra};

	ENTER();
	return launch("cuLaunchKernel", CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &p, f, gridDimX,
		      gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
		      kernelParams, extra);
}

CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
			     unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
			     unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
			     void **kernelParams, void **extra)
{
	cuLaunchKernel_ptsz_params p = {f,	   gridDimX,	 gridDimY,  gridDimZ,
					blockDimX, blockDimY,	 blockDimZ, sharedMemBytes,
					hStream,   kernelParams, extra};

	ENTER();
	return launch("cuLaunchKernel_ptsz", CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, &p, f,
		      gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes,
		      ptsz(hStream), kernelParams, extra);
}

static CUresult launch_ex(const char *api, uint32_t cbid, const CUlaunchConfig *config,
			  CUfunction f, void **params, void **extra, bool per_thread)
{
	cuLaunchKernelEx_params p = {config, f, params, extra};
	CUlaunchConfig c;

	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	c = *config;
	if (per_thread)
		c.hStream = ptsz(c.hStream);
	return launch(api, cbid, &p, f, c.gridDimX, c.gridDimY, c.gridDimZ, c.blockDimX,
		      c.blockDimY, c.blockDimZ, c.sharedMemBytes, c.hStream, params, extra);
}

CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
			  void **extra)
{
	ENTER();
	return launch_ex("cuLaunchKernelEx", CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, config, f,
			 kernelParams, extra, false);
}

CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **kernelParams,
			       void **extra)
{
	ENTER();
	return launch_ex("cuLaunchKernelEx_ptsz", CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
			 config, f, kernelParams, extra, true);
}

CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
	ENTER();
	return gpu_stream_begin_capture(hStream, mode);
}

CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
	ENTER();
	return gpu_stream_begin_capture(ptsz(hStream), mode);
}

CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
	ENTER();
	return gpu_stream_end_capture(hStream, phGraph);
}

CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
	ENTER();
	return gpu_stream_end_capture(ptsz(hStream), phGraph);
}

CUresult cuStreamIsCapturing(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	ENTER();
	return gpu_stream_is_capturing(hStream, captureStatus);
}

CUresult cuStreamIsCapturing_ptsz(CUstream hStream, CUstreamCaptureStatus *captureStatus)
{
	ENTER();
	return gpu_stream_is_capturing(ptsz(hStream), captureStatus);
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *phGraphExec, CUgraph hGraph,
				     unsigned long long flags)
{
	ENTER();
	return gpu_graph_instantiate(phGraphExec, hGraph, flags);
}

/* A graph launch, traced for the CUPTI stand-in as the launches are (its
 * kernels run inside it: their records carry its correlation id). */
static CUresult graph_launch(const char *api, CUgraphExec exec, CUstream stream)
{
	const struct standin_tracer *t = gpu_tracer();
	bool pt = !strcmp(api, "cuGraphLaunch_ptsz");
	uint32_t cbid = pt ? CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz
			   : CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch;
	cuGraphLaunch_params p = {exec, stream};
	cuGraphLaunch_ptsz_params pp = {exec, stream};
	const void *params = pt ? (const void *)&pp : (const void *)&p;
	CUresult err;

	if (t)
		t->api(CUPTI_CB_DOMAIN_DRIVER_API, cbid, api, params, NULL, false, 0);
	err = gpu_graph_launch(exec, stream);
	if (t)
		t->api(CUPTI_CB_DOMAIN_DRIVER_API, cbid, api, params, NULL, true, err);
	STANDIN_TRACE(LIB "%s(exec=%p stream=%p) = %d", api, (void *)exec, (void *)stream, err);
	return err;
}

CUresult cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream)
{
	ENTER();
	return graph_launch("cuGraphLaunch", hGraphExec, hStream);
}

CUresult cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream)
{
	ENTER();
	return graph_launch("cuGraphLaunch_ptsz", hGraphExec, ptsz(hStream));
}

CUresult cuGraphCreate(CUgraph *phGraph, unsigned int flags)
{
	ENTER();
	return gpu_graph_create(phGraph, flags);
}

CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
			      const CUgraphNode *dependencies, size_t numDependencies,
			      const CUDA_KERNEL_NODE_PARAMS_v1 *p)
{
	ENTER();
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	return gpu_graph_add_kernel(
		phGraphNode, hGraph, dependencies, numDependencies, p->func,
		(const unsigned int[3]){p->gridDimX, p->gridDimY, p->gridDimZ},
		(const unsigned int[3]){p->blockDimX, p->blockDimY, p->blockDimZ});
}

CUresult cuGraphAddKernelNode_v2(CUgraphNode *phGraphNode, CUgraph hGraph,
				 const CUgraphNode *dependencies, size_t numDependencies,
				 const CUDA_KERNEL_NODE_PARAMS *nodeParams)
{
	CUresult err;

	ENTER();
	err = gpu_graph_add_kernel_node(phGraphNode, hGraph, dependencies, numDependencies,
					nodeParams);
	STANDIN_TRACE(LIB "cuGraphAddKernelNode_v2(graph=%p func=%p kern=%p) = %d", (void *)hGraph,
		      nodeParams ? (void *)nodeParams->func : NULL,
		      nodeParams ? (void *)nodeParams->kern : NULL, err);
	return err;
}

CUresult cuGraphDestroy(CUgraph hGraph)
{
	ENTER();
	return gpu_graph_destroy(hGraph);
}

CUresult cuGraphExecDestroy(CUgraphExec hGraphExec)
{
	ENTER();
	return gpu_graph_exec_destroy(hGraphExec);
}

/* Memory. */

static CUresult traced_alloc(const char *api, CUresult err, CUdeviceptr *dptr, size_t size)
{
	STANDIN_TRACE(LIB "%s(size=%zu) = %d ptr=0x%llx", api, size, err,
		      err ? 0ull : (unsigned long long)*dptr);
	return err;
}

static CUresult traced_free(const char *api, CUresult err, CUdeviceptr dptr)
{
	STANDIN_TRACE(LIB "%s(ptr=0x%llx) = %d", api, (unsigned long long)dptr, err);
	return err;
}

CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
	ENTER();
	return traced_alloc("cuMemAlloc_v2", gpu_mem_alloc(dptr, bytesize), dptr, bytesize);
}

CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	ENTER();
	return traced_alloc("cuMemAllocManaged", gpu_mem_alloc_managed(dptr, bytesize, flags), dptr,
			    bytesize);
}

CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	ENTER();
	return traced_alloc("cuMemAllocAsync", gpu_mem_alloc_async(dptr, bytesize, hStream), dptr,
			    bytesize);
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
	ENTER();
	return traced_alloc("cuMemAllocAsync_ptsz",
			    gpu_mem_alloc_async(dptr, bytesize, ptsz(hStream)), dptr, bytesize);
}

CUresult cuMemFree_v2(CUdeviceptr dptr)
{
	ENTER();
	return traced_free("cuMemFree_v2", gpu_mem_free(dptr), dptr);
}

CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
	ENTER();
	return traced_free("cuMemFreeAsync", gpu_mem_free_async(dptr, hStream), dptr);
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
	ENTER();
	return traced_free("cuMemFreeAsync_ptsz", gpu_mem_free_async(dptr, ptsz(hStream)), dptr);
}

CUresult cuMemGetInfo_v2(size_t *free, size_t *total)
{
	ENTER();
	return gpu_mem_get_info(free, total);
}

CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
		     const CUmemAllocationProp *prop, unsigned long long flags)
{
	CUresult err;

	ENTER();
	err = gpu_mem_create(handle, size, prop, flags);
	STANDIN_TRACE(LIB "cuMemCreate(size=%zu dev=%d) = %d handle=0x%llx", size,
		      prop ? prop->location.id : -1, err, err ? 0ull : *handle);
	return err;
}

CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
	CUresult err;

	ENTER();
	err = gpu_mem_release(handle);
	STANDIN_TRACE(LIB "cuMemRelease(handle=0x%llx) = %d", handle, err);
	return err;
}

CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
			     unsigned long long flags)
{
	ENTER();
	return gpu_mem_address_reserve(ptr, size, alignment, addr, flags);
}

CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
	ENTER();
	return gpu_mem_address_free(ptr, size);
}

CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
		  unsigned long long flags)
{
	ENTER();
	return gpu_mem_map(ptr, size, offset, handle, flags);
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
	ENTER();
	return gpu_mem_unmap(ptr, size);
}

CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	ENTER();
	return gpu_mem_set_access(ptr, size, desc, count);
}

CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
				       CUmemAllocationGranularity_flags option)
{
	ENTER();
	return gpu_mem_get_allocation_granularity(granularity, prop, option);
}

/* Copies and fills: the synchronous _ptds forms queue on the per-thread stream and wait. */

static CUresult copy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t bytes)
{
	CUresult err = gpu_copy_async(dst, src, bytes, CU_STREAM_PER_THREAD);

	return err ? err : gpu_stream_drain(CU_STREAM_PER_THREAD);
}

/* A copy's or fill's callbacks for the CUPTI stand-in around `call`, with NVIDIA's parameter
 * struct of the function `name` (its fields from the rest of the arguments). */
#define TRACED(name, call, ...)                                                                    \
	do {                                                                                       \
		const struct standin_tracer *t_ = gpu_tracer();                                    \
		name##_params p_ = {__VA_ARGS__};                                                  \
		CUresult err_;                                                                     \
                                                                                                   \
		if (t_)                                                                            \
			t_->api(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_##name, #name, \
				&p_, NULL, false, 0);                                              \
		err_ = (call);                                                                     \
		if (t_)                                                                            \
			t_->api(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_##name, #name, \
				&p_, NULL, true, err_);                                            \
		return err_;                                                                       \
	} while (0)

static CUresult memset_ptds(CUdeviceptr dst, unsigned char uc, size_t n)
{
	CUresult err = gpu_memset_d8_async(dst, uc, n, CU_STREAM_PER_THREAD);

	return err ? err : gpu_stream_drain(CU_STREAM_PER_THREAD);
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	ENTER();
	TRACED(cuMemcpy, gpu_copy(dst, src, ByteCount), dst, src, ByteCount);
}

CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
	ENTER();
	TRACED(cuMemcpy_ptds, copy_ptds(dst, src, ByteCount), dst, src, ByteCount);
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	ENTER();
	TRACED(cuMemcpyAsync, gpu_copy_async(dst, src, ByteCount, hStream), dst, src, ByteCount,
	       hStream);
}

CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount, CUstream hStream)
{
	ENTER();
	TRACED(cuMemcpyAsync_ptsz, gpu_copy_async(dst, src, ByteCount, ptsz(hStream)), dst, src,
	       ByteCount, hStream);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	ENTER();
	TRACED(cuMemcpyHtoD_v2, gpu_copy(dstDevice, (CUdeviceptr)(uintptr_t)srcHost, ByteCount),
	       dstDevice, srcHost, ByteCount);
}

CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
	ENTER();
	TRACED(cuMemcpyHtoD_v2_ptds,
	       copy_ptds(dstDevice, (CUdeviceptr)(uintptr_t)srcHost, ByteCount), dstDevice, srcHost,
	       ByteCount);
}

CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	ENTER();
	TRACED(cuMemcpyDtoH_v2, gpu_copy((CUdeviceptr)(uintptr_t)dstHost, srcDevice, ByteCount),
	       dstHost, srcDevice, ByteCount);
}

CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
	ENTER();
	TRACED(cuMemcpyDtoH_v2_ptds,
	       copy_ptds((CUdeviceptr)(uintptr_t)dstHost, srcDevice, ByteCount), dstHost, srcDevice,
	       ByteCount);
}

CUresult cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	ENTER();
	TRACED(cuMemsetD8_v2, gpu_memset_d8(dstDevice, uc, N), dstDevice, uc, N);
}

CUresult cuMemsetD8_v2_ptds(CUdeviceptr dstDevice, unsigned char uc, size_t N)
{
	ENTER();
	TRACED(cuMemsetD8_v2_ptds, memset_ptds(dstDevice, uc, N), dstDevice, uc, N);
}

CUresult cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
	ENTER();
	TRACED(cuMemsetD8Async, gpu_memset_d8_async(dstDevice, uc, N, hStream), dstDevice, uc, N,
	       hStream);
}

CUresult cuMemsetD8Async_ptsz(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream)
{
	ENTER();
	TRACED(cuMemsetD8Async_ptsz, gpu_memset_d8_async(dstDevice, uc, N, ptsz(hStream)),
	       dstDevice, uc, N, hStream);
}

/* Streams and events. */

CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
	ENTER();
	return gpu_stream_create(phStream, Flags, 0);
}

CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
	ENTER();
	return gpu_stream_create(phStream, flags, priority);
}

CUresult cuStreamDestroy_v2(CUstream hStream)
{
	ENTER();
	return gpu_stream_destroy(hStream);
}

CUresult cuStreamQuery(CUstream hStream)
{
	ENTER();
	return gpu_stream_query(hStream);
}

CUresult cuStreamQuery_ptsz(CUstream hStream)
{
	ENTER();
	return gpu_stream_query(ptsz(hStream));
}

/* p: the call's parameter struct (cuStreamSynchronize_params and _ptsz_params alike), with
 * the stream as passed; stream: as it means. */
static CUresult stream_sync(const char *api, uint32_t cbid, const void *p, CUstream stream)
{
	uint64_t t0 = standin_now_ns();
	CUresult err;

	traced(cbid, api, p, false, 0);
	err = gpu_stream_synchronize(stream);
	traced(cbid, api, p, true, err);
	STANDIN_TRACE(LIB "%s(stream=%p) = %d waited=%lluns", api, (void *)stream, err,
		      (unsigned long long)(standin_now_ns() - t0));
	return err;
}

CUresult cuStreamSynchronize(CUstream hStream)
{
	cuStreamSynchronize_params p = {hStream};

	ENTER();
	return stream_sync("cuStreamSynchronize", CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, &p,
			   hStream);
}

CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
	cuStreamSynchronize_ptsz_params p = {hStream};

	ENTER();
	return stream_sync("cuStreamSynchronize_ptsz",
			   CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz, &p, ptsz(hStream));
}

CUresult cuStreamWaitEvent(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	ENTER();
	TRACED(cuStreamWaitEvent, gpu_stream_wait_event(hStream, hEvent, Flags), hStream, hEvent,
	       Flags);
}

CUresult cuStreamWaitEvent_ptsz(CUstream hStream, CUevent hEvent, unsigned int Flags)
{
	ENTER();
	TRACED(cuStreamWaitEvent_ptsz, gpu_stream_wait_event(ptsz(hStream), hEvent, Flags), hStream,
	       hEvent, Flags);
}

CUresult cuEventCreate(CUevent *phEvent, unsigned int Flags)
{
	ENTER();
	return gpu_event_create(phEvent, Flags);
}

CUresult cuEventDestroy_v2(CUevent hEvent)
{
	ENTER();
	return gpu_event_destroy(hEvent);
}

CUresult cuEventRecord(CUevent hEvent, CUstream hStream)
{
	ENTER();
	return gpu_event_record(hEvent, hStream);
}

CUresult cuEventRecord_ptsz(CUevent hEvent, CUstream hStream)
{
	ENTER();
	return gpu_event_record(hEvent, ptsz(hStream));
}

CUresult cuEventQuery(CUevent hEvent)
{
	ENTER();
	return gpu_event_query(hEvent);
}

CUresult cuEventSynchronize(CUevent hEvent)
{
	uint64_t t0 = standin_now_ns();
	cuEventSynchronize_params p = {hEvent};
	CUresult err;

	ENTER();
	traced(CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize, "cuEventSynchronize", &p, false, 0);
	err = gpu_event_synchronize(hEvent);
	traced(CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize, "cuEventSynchronize", &p, true, err);
	STANDIN_TRACE(LIB "cuEventSynchronize(event=%p) = %d waited=%lluns", (void *)hEvent, err,
		      (unsigned long long)(standin_now_ns() - t0));
	return err;
}

CUresult cuEventElapsedTime_v2(float *pMilliseconds, CUevent hStart, CUevent hEnd)
{
	ENTER();
	return gpu_event_elapsed_time(pMilliseconds, hStart, hEnd);
}

/* Memory pools: each device's default one (gpu.c, struct gpu_pool). */

CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *pool_out, CUdevice dev)
{
	ENTER();
	TRACED(cuDeviceGetDefaultMemPool, gpu_device_get_default_mem_pool(pool_out, dev), pool_out,
	       dev);
}

CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	ENTER();
	TRACED(cuMemPoolSetAttribute, gpu_mem_pool_set_attribute(pool, attr, value), pool, attr,
	       value);
}

CUresult cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	ENTER();
	TRACED(cuMemPoolGetAttribute, gpu_mem_pool_get_attribute(pool, attr, value), pool, attr,
	       value);
}

static CUresult traced_trim(CUmemoryPool pool, size_t keep)
{
	CUresult err = gpu_mem_pool_trim_to(pool, keep);

	STANDIN_TRACE(LIB "cuMemPoolTrimTo(pool=%p minBytesToKeep=%zu) = %d", (void *)pool, keep,
		      err);
	return err;
}

CUresult cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep)
{
	ENTER();
	TRACED(cuMemPoolTrimTo, traced_trim(pool, minBytesToKeep), pool, minBytesToKeep);
}
