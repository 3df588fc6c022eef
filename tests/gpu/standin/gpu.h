/*
 * gpu.h: the fake GPU inside the libcuda.so.1 stand-in. gpu.c implements it; driver.c
 * wraps each function in the public driver-API symbol of the same behaviour, and the
 * runtime and NCCL stand-ins call the same functions through `struct standin_gpu`.
 * Every function returns a CUresult as the driver function it shadows would.
 */
#ifndef SONDE_STANDIN_GPU_H
#define SONDE_STANDIN_GPU_H

#include "standin.h"

/* Public driver calls other than cuInit fail with CUDA_ERROR_NOT_INITIALIZED until this. */
bool gpu_initialized(void);
/* The private table for cuGetExportTable(); NULL if `id` is not STANDIN_TABLE_ID. */
const struct standin_gpu *gpu_export_table(const CUuuid *id);

CUresult gpu_init(unsigned int flags);
CUresult gpu_driver_get_version(int *version);
CUresult gpu_device_get(CUdevice *device, int ordinal);
CUresult gpu_device_get_count(int *count);
CUresult gpu_device_get_name(char *name, int len, CUdevice dev);
CUresult gpu_device_total_mem(size_t *bytes, CUdevice dev);
CUresult gpu_device_get_attribute(int *pi, CUdevice_attribute attrib, CUdevice dev);

CUresult gpu_primary_ctx_retain(CUcontext *pctx, CUdevice dev);
CUresult gpu_primary_ctx_release(CUdevice dev);
CUresult gpu_ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev);
CUresult gpu_ctx_destroy(CUcontext ctx);
CUresult gpu_ctx_set_current(CUcontext ctx);
CUresult gpu_ctx_get_current(CUcontext *pctx);
CUresult gpu_ctx_get_device(CUdevice *device);
CUresult gpu_ctx_get_id(CUcontext ctx, unsigned long long *id); /* NULL: the current one */
CUresult gpu_ctx_synchronize(void);
CUresult gpu_ctx_synchronize_ctx(CUcontext ctx); /* NULL: the current context */
CUresult gpu_ensure_context(CUdevice *dev);

CUresult gpu_mem_alloc(CUdeviceptr *dptr, size_t bytesize);
CUresult gpu_mem_alloc_managed(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
CUresult gpu_mem_alloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream stream);
CUresult gpu_mem_free(CUdeviceptr dptr);
CUresult gpu_mem_free_async(CUdeviceptr dptr, CUstream stream);
CUresult gpu_mem_get_info(size_t *free, size_t *total);
CUresult gpu_device_get_default_mem_pool(CUmemoryPool *pool, CUdevice dev);
CUresult gpu_mem_pool_set_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult gpu_mem_pool_get_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value);
CUresult gpu_mem_pool_trim_to(CUmemoryPool pool, size_t min_keep);
CUresult gpu_mem_create(CUmemGenericAllocationHandle *handle, size_t size,
			const CUmemAllocationProp *prop, unsigned long long flags);
CUresult gpu_mem_release(CUmemGenericAllocationHandle handle);
CUresult gpu_mem_address_reserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
				 unsigned long long flags);
CUresult gpu_mem_address_free(CUdeviceptr ptr, size_t size);
CUresult gpu_mem_map(CUdeviceptr ptr, size_t size, size_t offset,
		     CUmemGenericAllocationHandle handle, unsigned long long flags);
CUresult gpu_mem_unmap(CUdeviceptr ptr, size_t size);
CUresult gpu_mem_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
			    size_t count);
CUresult gpu_mem_get_allocation_granularity(size_t *granularity, const CUmemAllocationProp *prop,
					    CUmemAllocationGranularity_flags option);
CUresult gpu_copy(CUdeviceptr dst, CUdeviceptr src, size_t bytes);
CUresult gpu_copy_async(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
CUresult gpu_memset_d8(CUdeviceptr dst, unsigned char uc, size_t n);
CUresult gpu_memset_d8_async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream stream);

CUresult gpu_stream_create(CUstream *stream, unsigned int flags, int priority);
CUresult gpu_stream_destroy(CUstream stream);
CUresult gpu_stream_query(CUstream stream);
CUresult gpu_stream_synchronize(CUstream stream);
CUresult gpu_stream_drain(CUstream stream); /* its wait, not a synchronization (standin.h) */
CUresult gpu_stream_wait_event(CUstream stream, CUevent event, unsigned int flags);
CUresult gpu_stream_begin_capture(CUstream stream, CUstreamCaptureMode mode);
CUresult gpu_stream_end_capture(CUstream stream, CUgraph *graph);
CUresult gpu_stream_is_capturing(CUstream stream, CUstreamCaptureStatus *status);
CUresult gpu_stream_delay(CUstream stream, uint64_t ns);
CUresult gpu_stream_device(CUstream stream, CUdevice *dev);

CUresult gpu_event_create(CUevent *event, unsigned int flags);
CUresult gpu_event_destroy(CUevent event);
CUresult gpu_event_record(CUevent event, CUstream stream);
CUresult gpu_event_query(CUevent event);
CUresult gpu_event_synchronize(CUevent event);
CUresult gpu_event_elapsed_time(float *ms, CUevent start, CUevent end);

CUresult gpu_module_load_data(CUmodule *module, const void *image);
CUresult gpu_module_unload(CUmodule module);
CUresult gpu_module_get_function(CUfunction *f, CUmodule module, const char *name);
CUresult gpu_library_load_data(CUlibrary *library, const void *code, CUjit_option *jit_opts,
			       void **jit_vals, unsigned int njit, CUlibraryOption *lib_opts,
			       void **lib_vals, unsigned int nlib);
CUresult gpu_library_unload(CUlibrary library);
CUresult gpu_library_get_kernel(CUkernel *kernel, CUlibrary library, const char *name);
CUresult gpu_kernel_get_function(CUfunction *f, CUkernel kernel);
bool gpu_is_kernel(const void *handle);
const char *gpu_kernel_name(const void *handle);
CUresult gpu_launch_kernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			   unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
			   CUstream stream, void **params, void **extra);
CUresult gpu_launch_kernel_ex(const CUlaunchConfig *config, CUfunction f, void **params,
			      void **extra);

CUresult gpu_graph_instantiate(CUgraphExec *exec, CUgraph graph, unsigned long long flags);
CUresult gpu_graph_launch(CUgraphExec exec, CUstream stream);
CUresult gpu_graph_destroy(CUgraph graph);
CUresult gpu_graph_exec_destroy(CUgraphExec exec);
CUresult gpu_graph_get_id(CUgraph graph, uint32_t *id);		/* CUPTI's graphId */
CUresult gpu_graph_node_get_id(CUgraphNode node, uint64_t *id); /* CUPTI's graphNodeId */
/* CUDA 13's cuda.h names the _v2 form cuGraphAddKernelNode; the first form,
 * with the first form of the parameters, keeps the plain name in the ABI. */
#undef cuGraphAddKernelNode
CUresult cuGraphAddKernelNode(CUgraphNode *phGraphNode, CUgraph hGraph,
			      const CUgraphNode *dependencies, size_t numDependencies,
			      const CUDA_KERNEL_NODE_PARAMS_v1 *nodeParams);

/* The CUPTI stand-in's tracer (standin.h), or NULL. */
void gpu_set_tracer(const struct standin_tracer *t);
const struct standin_tracer *gpu_tracer(void);
CUresult gpu_graph_create(CUgraph *graph, unsigned int flags);
/* A kernel node: kernel is a CUfunction or CUkernel. */
CUresult gpu_graph_add_kernel(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
			      size_t ndeps, const void *kernel, const unsigned int grid[3],
			      const unsigned int block[3]);
CUresult gpu_graph_add_kernel_node(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
				   size_t ndeps, const CUDA_KERNEL_NODE_PARAMS *params);

#endif /* SONDE_STANDIN_GPU_H */
