/*
 * procaddr.c: cuGetProcAddress of the libcuda.so.1 stand-in. The CUDA 12/13 runtime finds
 * every driver function this way, not through the driver's exported symbols: it looks up
 * `cuGetProcAddress_v2` with dlsym, asks it for "cuGetProcAddress" itself, then for each
 * function by its base name, the CUDA version whose form it was compiled against, and a
 * flag for the per-thread default stream -- ("cuMemAlloc", 3020, 0) is cuMemAlloc_v2,
 * ("cuLaunchKernel", 7000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) is
 * cuLaunchKernel_ptsz, ("cuCtxSynchronize", 13000, 0) is cuCtxSynchronize_v2. (What the
 * real libcudart.so.13 asks for is seen by loading it over a libcuda.so.1 that logs its
 * cuGetProcAddress_v2 calls.) The entry points handed out are the exported functions, at
 * their symbols' addresses, as the real driver's are: a probe on the exported function
 * sees a call made through them.
 *
 * Each name has a row per form: the CUDA version that introduced the form, and its legacy
 * and per-thread functions. A request takes the newest form not newer than its version.
 * Forms older than the oldest we export (cuMemAlloc before 3020, say) exist in the real
 * driver but not here: such a request answers CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT.
 */
#include <string.h>

#include "gpu.h"

struct proc {
	const char *name;
	int version;	  /* the CUDA version (1000 x major + 10 x minor) of this form */
	void *legacy;	  /* the form for the legacy default stream (or with no stream) */
	void *per_thread; /* _ptsz/_ptds form, NULL when it has none */
};

#define P(name, version, fn)                                                                       \
	{                                                                                          \
#name, version, (void *)fn, NULL                                                   \
	}
#define PT(name, version, fn, pt)                                                                  \
	{                                                                                          \
#name, version, (void *)fn, (void *)pt                                             \
	}

static const struct proc procs[] = {
	P(cuGetProcAddress, 11030, cuGetProcAddress),
	P(cuGetProcAddress, 12000, cuGetProcAddress_v2),
	P(cuGetErrorString, 6000, cuGetErrorString),
	P(cuGetErrorName, 6000, cuGetErrorName),
	P(cuGetExportTable, 3000, cuGetExportTable),
	P(cuInit, 2000, cuInit),
	P(cuDriverGetVersion, 2020, cuDriverGetVersion),
	P(cuDeviceGet, 2000, cuDeviceGet),
	P(cuDeviceGetCount, 2000, cuDeviceGetCount),
	P(cuDeviceGetName, 2000, cuDeviceGetName),
	P(cuDeviceTotalMem, 3020, cuDeviceTotalMem_v2),
	P(cuDeviceGetAttribute, 2000, cuDeviceGetAttribute),
	P(cuDevicePrimaryCtxRetain, 7000, cuDevicePrimaryCtxRetain),
	P(cuDevicePrimaryCtxRelease, 11000, cuDevicePrimaryCtxRelease_v2),
	P(cuCtxCreate, 3020, cuCtxCreate_v2),
	P(cuCtxCreate, 11040, cuCtxCreate_v3),
	P(cuCtxCreate, 12050, cuCtxCreate_v4),
	P(cuCtxDestroy, 4000, cuCtxDestroy_v2),
	P(cuCtxSetCurrent, 4000, cuCtxSetCurrent),
	P(cuCtxGetCurrent, 4000, cuCtxGetCurrent),
	P(cuCtxGetDevice, 2000, cuCtxGetDevice),
	P(cuCtxSynchronize, 2000, cuCtxSynchronize),
	P(cuCtxSynchronize, 13000, cuCtxSynchronize_v2),
	P(cuModuleLoadData, 2000, cuModuleLoadData),
	P(cuModuleUnload, 2000, cuModuleUnload),
	P(cuModuleGetFunction, 2000, cuModuleGetFunction),
	P(cuLibraryLoadData, 12000, cuLibraryLoadData),
	P(cuLibraryUnload, 12000, cuLibraryUnload),
	P(cuLibraryGetKernel, 12000, cuLibraryGetKernel),
	P(cuKernelGetFunction, 12000, cuKernelGetFunction),
	PT(cuLaunchKernel, 4000, cuLaunchKernel, cuLaunchKernel_ptsz),
	PT(cuLaunchKernelEx, 11060, cuLaunchKernelEx, cuLaunchKernelEx_ptsz),
	PT(cuStreamBeginCapture, 10010, cuStreamBeginCapture_v2, cuStreamBeginCapture_v2_ptsz),
	PT(cuStreamEndCapture, 10000, cuStreamEndCapture, cuStreamEndCapture_ptsz),
	PT(cuStreamIsCapturing, 10000, cuStreamIsCapturing, cuStreamIsCapturing_ptsz),
	P(cuGraphInstantiateWithFlags, 11040, cuGraphInstantiateWithFlags),
	PT(cuGraphLaunch, 10000, cuGraphLaunch, cuGraphLaunch_ptsz),
	P(cuGraphCreate, 10000, cuGraphCreate),
	P(cuGraphAddKernelNode, 10000, cuGraphAddKernelNode),
	P(cuGraphAddKernelNode, 12000, cuGraphAddKernelNode_v2),
	P(cuGraphDestroy, 10000, cuGraphDestroy),
	P(cuGraphExecDestroy, 10000, cuGraphExecDestroy),
	P(cuMemAlloc, 3020, cuMemAlloc_v2),
	P(cuMemAllocManaged, 6000, cuMemAllocManaged),
	PT(cuMemAllocAsync, 11020, cuMemAllocAsync, cuMemAllocAsync_ptsz),
	P(cuMemFree, 3020, cuMemFree_v2),
	PT(cuMemFreeAsync, 11020, cuMemFreeAsync, cuMemFreeAsync_ptsz),
	P(cuMemGetInfo, 3020, cuMemGetInfo_v2),
	P(cuDeviceGetDefaultMemPool, 11020, cuDeviceGetDefaultMemPool),
	P(cuMemPoolSetAttribute, 11020, cuMemPoolSetAttribute),
	P(cuMemPoolGetAttribute, 11020, cuMemPoolGetAttribute),
	P(cuMemPoolTrimTo, 11020, cuMemPoolTrimTo),
	P(cuMemCreate, 10020, cuMemCreate),
	P(cuMemRelease, 10020, cuMemRelease),
	P(cuMemAddressReserve, 10020, cuMemAddressReserve),
	P(cuMemAddressFree, 10020, cuMemAddressFree),
	P(cuMemMap, 10020, cuMemMap),
	P(cuMemUnmap, 10020, cuMemUnmap),
	P(cuMemSetAccess, 10020, cuMemSetAccess),
	P(cuMemGetAllocationGranularity, 10020, cuMemGetAllocationGranularity),
	PT(cuMemcpy, 4000, cuMemcpy, cuMemcpy_ptds),
	PT(cuMemcpyAsync, 4000, cuMemcpyAsync, cuMemcpyAsync_ptsz),
	PT(cuMemcpyHtoD, 3020, cuMemcpyHtoD_v2, cuMemcpyHtoD_v2_ptds),
	PT(cuMemcpyDtoH, 3020, cuMemcpyDtoH_v2, cuMemcpyDtoH_v2_ptds),
	PT(cuMemsetD8, 3020, cuMemsetD8_v2, cuMemsetD8_v2_ptds),
	PT(cuMemsetD8Async, 3020, cuMemsetD8Async, cuMemsetD8Async_ptsz),
	P(cuStreamCreate, 2000, cuStreamCreate),
	P(cuStreamCreateWithPriority, 5050, cuStreamCreateWithPriority),
	P(cuStreamDestroy, 4000, cuStreamDestroy_v2),
	PT(cuStreamQuery, 2000, cuStreamQuery, cuStreamQuery_ptsz),
	PT(cuStreamSynchronize, 2000, cuStreamSynchronize, cuStreamSynchronize_ptsz),
	PT(cuStreamWaitEvent, 3020, cuStreamWaitEvent, cuStreamWaitEvent_ptsz),
	P(cuEventCreate, 2000, cuEventCreate),
	P(cuEventDestroy, 4000, cuEventDestroy_v2),
	PT(cuEventRecord, 2000, cuEventRecord, cuEventRecord_ptsz),
	P(cuEventQuery, 2000, cuEventQuery),
	P(cuEventSynchronize, 2000, cuEventSynchronize),
	P(cuEventElapsedTime, 12080, cuEventElapsedTime_v2),
};

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
			     CUdriverProcAddressQueryResult *symbolStatus)
{
	const struct proc *best = NULL;
	bool known = false;

	if (!symbol || !pfn)
		return CUDA_ERROR_INVALID_VALUE;
	if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM |
				  CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
		return CUDA_ERROR_INVALID_VALUE;
	*pfn = NULL;
	for (size_t i = 0; i < sizeof(procs) / sizeof(procs[0]); i++) {
		if (strcmp(procs[i].name, symbol))
			continue;
		known = true;
		if (procs[i].version <= cudaVersion && (!best || procs[i].version > best->version))
			best = &procs[i];
	}
	if (!best) {
		if (symbolStatus)
			*symbolStatus = known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
					      : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
		STANDIN_TRACE("libcuda: cuGetProcAddress(%s, %d, %llu) = not %s", symbol,
			      cudaVersion, (unsigned long long)flags,
			      known ? "of that version" : "found");
		return CUDA_ERROR_NOT_FOUND;
	}
	*pfn = (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) && best->per_thread
		       ? best->per_thread
		       : best->legacy;
	if (symbolStatus)
		*symbolStatus = CU_GET_PROC_ADDRESS_SUCCESS;
	STANDIN_TRACE("libcuda: cuGetProcAddress(%s, %d, %llu) = %p", symbol, cudaVersion,
		      (unsigned long long)flags, *pfn);
	return CUDA_SUCCESS;
}

/* The CUDA 11.3 form, without the status. */
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
	return cuGetProcAddress_v2(symbol, pfn, cudaVersion, flags, NULL);
}
