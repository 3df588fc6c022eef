/*
 * standin.h: the private contract between Sonde's test stand-ins for libcuda.so.1,
 * libcudart.so.13 and libnccl.so.2. The fake GPU (devices, contexts, streams with a
 * timeline, events, memory, kernels, graphs) lives in the libcuda stand-in, as the real
 * GPU state lives in the real driver. The runtime and NCCL stand-ins reach it the way
 * NVIDIA's own libraries reach the driver: they dlopen libcuda.so.1 and ask
 * cuGetExportTable() for a private table, here `struct standin_gpu`, whose entries are
 * the internal twins of public driver functions (same signatures, but no public symbol,
 * so an uprobe on the public function does not see the runtime using them). None of
 * this is visible to an ELF reader: each library exports only the real library's names.
 */
#ifndef SONDE_STANDIN_H
#define SONDE_STANDIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

/* 16 bytes, the CUuuid passed to cuGetExportTable() to get `struct standin_gpu`. */
#define STANDIN_TABLE_ID "sonde-standin-v1"

/* A stream delay that never ends: the stream hangs until a signal interrupts the wait. */
#define STANDIN_FOREVER UINT64_MAX

/*
 * The internal entry points of the fake GPU. Each `CUresult` entry behaves exactly like
 * the driver function named in its comment; the last group has no driver counterpart.
 * Streams accept NULL, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD like the driver does.
 */
struct standin_tracer;

struct standin_gpu {
	size_t size; /* sizeof(struct standin_gpu) of the library that filled it */

	CUresult (*init)(unsigned int flags);				/* cuInit */
	CUresult (*driver_get_version)(int *version);			/* cuDriverGetVersion */
	CUresult (*device_get_count)(int *count);			/* cuDeviceGetCount */
	CUresult (*device_get_name)(char *name, int len, CUdevice dev); /* cuDeviceGetName */
	CUresult (*device_total_mem)(size_t *bytes, CUdevice dev);	/* cuDeviceTotalMem_v2 */
	CUresult (*device_get_attribute)(int *pi, CUdevice_attribute attrib, CUdevice dev);
	CUresult (*device_primary_ctx_retain)(CUcontext *pctx, CUdevice dev);
	CUresult (*ctx_set_current)(CUcontext ctx);   /* cuCtxSetCurrent */
	CUresult (*ctx_get_device)(CUdevice *device); /* cuCtxGetDevice */
	CUresult (*ctx_synchronize)(void);	      /* cuCtxSynchronize */

	CUresult (*mem_alloc)(CUdeviceptr *dptr, size_t bytesize); /* cuMemAlloc_v2 */
	CUresult (*mem_alloc_managed)(CUdeviceptr *dptr, size_t bytesize, unsigned int flags);
	CUresult (*mem_alloc_async)(CUdeviceptr *dptr, size_t bytesize, CUstream stream);
	CUresult (*mem_free)(CUdeviceptr dptr);				  /* cuMemFree_v2 */
	CUresult (*mem_free_async)(CUdeviceptr dptr, CUstream stream);	  /* cuMemFreeAsync */
	CUresult (*mem_get_info)(size_t *free, size_t *total);		  /* cuMemGetInfo_v2 */
	CUresult (*copy)(CUdeviceptr dst, CUdeviceptr src, size_t bytes); /* cuMemcpy */
	CUresult (*copy_async)(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream);
	CUresult (*memset_d8)(CUdeviceptr dst, unsigned char uc, size_t n); /* cuMemsetD8_v2 */
	CUresult (*memset_d8_async)(CUdeviceptr dst, unsigned char uc, size_t n, CUstream stream);

	CUresult (*stream_create)(CUstream *stream, unsigned int flags, int priority);
	CUresult (*stream_destroy)(CUstream stream);	 /* cuStreamDestroy_v2 */
	CUresult (*stream_query)(CUstream stream);	 /* cuStreamQuery */
	CUresult (*stream_synchronize)(CUstream stream); /* cuStreamSynchronize */
	CUresult (*stream_wait_event)(CUstream stream, CUevent event, unsigned int flags);
	CUresult (*stream_begin_capture)(CUstream stream, CUstreamCaptureMode mode);
	CUresult (*stream_end_capture)(CUstream stream, CUgraph *graph); /* cuStreamEndCapture */
	CUresult (*stream_is_capturing)(CUstream stream, CUstreamCaptureStatus *status);

	CUresult (*event_create)(CUevent *event, unsigned int flags); /* cuEventCreate */
	CUresult (*event_destroy)(CUevent event);		      /* cuEventDestroy_v2 */
	CUresult (*event_record)(CUevent event, CUstream stream);     /* cuEventRecord */
	CUresult (*event_query)(CUevent event);			      /* cuEventQuery */
	CUresult (*event_synchronize)(CUevent event);		      /* cuEventSynchronize */
	CUresult (*event_elapsed_time)(float *ms, CUevent start, CUevent end);

	CUresult (*library_load_data)(CUlibrary *library, const void *code, CUjit_option *jit_opts,
				      void **jit_vals, unsigned int njit, CUlibraryOption *lib_opts,
				      void **lib_vals, unsigned int nlib);
	CUresult (*library_get_kernel)(CUkernel *kernel, CUlibrary library, const char *name);
	CUresult (*launch_kernel)(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
				  unsigned int bx, unsigned int by, unsigned int bz,
				  unsigned int shmem, CUstream stream, void **params, void **extra);
	CUresult (*launch_kernel_ex)(const CUlaunchConfig *config, CUfunction f, void **params,
				     void **extra);
	CUresult (*graph_instantiate)(CUgraphExec *exec, CUgraph graph, unsigned long long flags);
	CUresult (*graph_launch)(CUgraphExec exec, CUstream stream);  /* cuGraphLaunch */
	CUresult (*graph_destroy)(CUgraph graph);		      /* cuGraphDestroy */
	CUresult (*graph_exec_destroy)(CUgraphExec exec);	      /* cuGraphExecDestroy */
	CUresult (*graph_create)(CUgraph *graph, unsigned int flags); /* cuGraphCreate */
	CUresult (*graph_add_kernel_node)(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
					  size_t ndeps,
					  const CUDA_KERNEL_NODE_PARAMS *params); /* _v2 */

	/* What the runtime does on entry: make a context current if the thread has none
	 * (the primary context of device 0), and return the current device. */
	CUresult (*ensure_context)(CUdevice *dev);
	/* Whether a pointer is a live kernel handle (CUkernel, CUfunction, cudaKernel_t). */
	bool (*is_kernel)(const void *handle);
	/* The name a kernel was looked up by; borrowed, lives as long as the process. */
	const char *(*kernel_name)(const void *handle);
	/* Queue `ns` of work on a stream (STANDIN_FOREVER: hang), as an NCCL kernel would. */
	CUresult (*stream_delay)(CUstream stream, uint64_t ns);
	/* The device a stream belongs to. */
	CUresult (*stream_device)(CUstream stream, CUdevice *dev);
	/* The tracer the CUPTI stand-in hooks into the GPU (NULL: none), and the one set. */
	void (*set_tracer)(const struct standin_tracer *tracer);
	const struct standin_tracer *(*tracer)(void);
	CUresult (*ctx_get_id)(CUcontext ctx, unsigned long long *id); /* cuCtxGetId */
	CUresult (*ctx_get_current)(CUcontext *pctx);		       /* cuCtxGetCurrent */

	/* The device's default memory pool and its functions. */
	CUresult (*device_get_default_mem_pool)(CUmemoryPool *pool, CUdevice dev);
	CUresult (*mem_pool_set_attribute)(CUmemoryPool pool, CUmemPool_attribute attr,
					   void *value); /* cuMemPoolSetAttribute */
	CUresult (*mem_pool_get_attribute)(CUmemoryPool pool, CUmemPool_attribute attr,
					   void *value); /* cuMemPoolGetAttribute */
	CUresult (*mem_pool_trim_to)(CUmemoryPool pool,
				     size_t min_bytes_to_keep); /* cuMemPoolTrimTo */
	/* Waits for what is queued on a stream, as a blocking copy or fill does after queueing
	 * itself: cuStreamSynchronize's wait without being a synchronization call (the tracer's
	 * sync hook is not told). */
	CUresult (*stream_drain)(CUstream stream);
	/* The unique id of a graph (CUgraph: CUPTI's graphId, in the order graphs were made,
	 * from 1, stream captures included) or of a node (CUgraphNode, from
	 * cuGraphAddKernelNode: CUPTI's graphNodeId); CUDA_ERROR_INVALID_VALUE for a handle
	 * that is neither. */
	CUresult (*graph_get_id)(CUgraph graph, uint32_t *id);
	CUresult (*graph_node_get_id)(CUgraphNode node, uint64_t *id);
};

/*
 * What the libcupti.so.13 stand-in (cupti.c) learns from the fake GPU, as the real CUPTI
 * learns it from the real driver: each traced API call at its entry and exit, each
 * kernel, copy and fill the GPU ran, each graph launch run, each context made or destroyed,
 * each module loaded, each device-memory allocation and release, each pool trimmed and each
 * host synchronization. Hooks may be called from any thread, never
 * with the GPU's lock held.
 */
struct standin_kernel_run {
	int device;
	CUcontext ctx;
	uint32_t ctx_id;    /* the context's number, in the order contexts were made */
	uint32_t stream_id; /* the stream's number (the legacy stream 7, as CUDA's) */
	const char *name;   /* the kernel's name as it was looked up, mangled; lives as long as
			       * the process */
	/* Its module's cubin as loaded for this launch (see the tracer's module hook): its
	 * id and bytes, which live as long as the process. */
	uint32_t module_id;
	const char *cubin;
	size_t cubin_size;
	unsigned int grid[3], block[3], shmem;
	uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC, on the fake GPU's timeline */
	/* A node of a graph launch (standin_graph_run): the graph's id (that of the CUgraph the
	 * launched exec was instantiated from) and the node's, unique in the process; 0 and 0
	 * for a kernel launched on its own. */
	uint32_t graph_id;
	uint64_t graph_node_id;
};

/* A graph launch that ran, as a whole: told after the kernels of its nodes (each also told
 * as a standin_kernel_run with graph_id and graph_node_id), inside the launch call. Not
 * told of a graph launched into a capture, on a hung stream, or with no node. */
struct standin_graph_run {
	int device;
	CUcontext ctx;
	uint32_t ctx_id, stream_id; /* as standin_kernel_run's */
	uint32_t graph_id;	    /* as standin_kernel_run's */
	unsigned int nodes;	    /* kernels, copies and fills it ran */
	uint64_t start_ns, end_ns;  /* its first node's start, its last node's end (nodes run one
				     * after the other); CLOCK_MONOTONIC, on the fake GPU's
				     * timeline */
};

/* A host synchronization call that returned success, as CUPTI's synchronization records
 * (CUPTI_ACTIVITY_KIND_SYNCHRONIZATION) tell of it: cuStreamSynchronize(_ptsz),
 * cuCtxSynchronize(_v2), cuEventSynchronize, cuStreamWaitEvent(_ptsz), and the runtime's
 * calls that reach them (the private table's entries of the same names included). The
 * waits inside blocking copies and fills (stream_drain) are not told. */
struct standin_sync_run {
	uint8_t type;	    /* CUpti_ActivitySynchronizationType: 1 EVENT_SYNCHRONIZE, 2
			     * STREAM_WAIT_EVENT, 3 STREAM_SYNCHRONIZE, 4 CONTEXT_SYNCHRONIZE */
	uint32_t ctx_id;    /* the synchronized context's; a stream's or event's context's
			     * (where it was made; the default streams': the caller's); 0: none */
	uint32_t stream_id; /* the stream synchronized or made to wait (as standin_kernel_run's);
			     * 0 for a context or event synchronize */
	uint32_t event_id;  /* the event's, unique per event made in the process, from 1; 0 for
			     * a stream or context synchronize */
	uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC: when the call began, when it returned */
};

/* A memory pool operation other than an allocation or release, as CUPTI's memory pool
 * records (CUPTI_ACTIVITY_KIND_MEMORY_POOL) tell of it: each successful cuMemPoolTrimTo of
 * a device's default pool (the only pools the fake GPU has; it tells no creation of them,
 * as CUDA makes a device's default pool with the device, not through a call). */
struct standin_pool_run {
	uint8_t operation; /* CUpti_ActivityMemoryPoolOperationType: 3 TRIMMED */
	int device;
	uint64_t base;		    /* the pool's address (as standin_memory_run's pool_base) */
	uint64_t min_bytes_to_keep; /* cuMemPoolTrimTo's */
	uint64_t reserved, used;    /* the pool's, just after the operation */
	uint64_t release_threshold; /* CU_MEMPOOL_ATTR_RELEASE_THRESHOLD */
	uint64_t at_ns;		    /* CLOCK_MONOTONIC, when it was made */
};

/* A copy or fill queued on the GPU, as CUPTI's memcpy and memset records tell of it. */
struct standin_copy_run {
	int device;
	uint32_t ctx_id, stream_id;
	uint8_t copy_kind; /* CUpti_ActivityMemcpyKind: 1 HtoD, 2 DtoH, 8 DtoD, 9 HtoH */
	bool set;	   /* a fill (memset), not a copy */
	uint64_t bytes;
	uint64_t start_ns, end_ns; /* CLOCK_MONOTONIC, on the fake GPU's timeline */
};

/*
 * Device memory allocated or released, as CUPTI's memory records (CUPTI_ACTIVITY_KIND_MEMORY2)
 * tell of it: every successful cuMemAlloc_v2 / cudaMalloc (DEVICE), cuMemAllocManaged /
 * cudaMallocManaged (MANAGED), cuMemAllocAsync / cudaMallocAsync (DEVICE, from the device's
 * pool), cuMemFree_v2 / cudaFree / cuMemFreeAsync / cudaFreeAsync of one of those (a release
 * of the same kind), and each VMM physical allocation, cuMemCreate and cuMemRelease (DEVICE;
 * its address the CUmemGenericAllocationHandle, as it has none of its own: mappings are not
 * told). Failed calls are not told.
 */
struct standin_memory_run {
	bool release;	     /* a release, else an allocation */
	uint8_t memory_kind; /* CUpti_ActivityMemoryKind: 3 DEVICE, 5 MANAGED */
	bool async;	     /* made by an async call (cuMemAllocAsync, cuMemFreeAsync, ...) */
	bool pool;	     /* memory of the device's default pool: the pool fields hold */
	int device;
	uint32_t ctx_id;    /* the calling thread's current context's (standin_kernel_run); 0:
			     * none */
	uint32_t stream_id; /* an async call's stream (as standin_kernel_run's); else 0 */
	uint64_t address;   /* the allocation's device address (a VMM handle: the handle) */
	uint64_t bytes;	    /* as requested; a release's: those of what it releases */
	uint64_t at_ns;	    /* CLOCK_MONOTONIC, when it was made */
	/* The device's default pool just after the operation: its base address, the bytes its
	 * live allocations use, the bytes it holds of the device (reserved >= used: an
	 * allocation that does not fit grows it; a release gives back what it holds above
	 * max(used, its release threshold), as CUDA does at the next synchronization) and its
	 * release threshold (CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 0 by default). */
	uint64_t pool_base, pool_used, pool_reserved, pool_threshold;
};

struct standin_tracer {
	/* An API call of domain (a CUpti_CallbackDomain) and cbid (its CUpti_CallbackId)
	 * entered (exit false) or returned (its result ret): name the function's, params
	 * NVIDIA's generated parameter struct of its arguments, symbol the launched kernel's
	 * name or NULL. */
	void (*api)(int domain, uint32_t cbid, const char *name, const void *params,
		    const char *symbol, bool exit, int ret);
	/* A kernel was queued on the GPU (times known in advance: the fake GPU keeps a
	 * timeline). Called inside the launch call, between its entry and exit. */
	void (*kernel)(const struct standin_kernel_run *run);
	/* A copy or fill was queued: as kernel. */
	void (*copy)(const struct standin_copy_run *run);
	/* A context was made (created true: told after it is made, before the call that made
	 * it returns -- the primary context's first retain, cuCtxCreate) or is going (false:
	 * told before it is destroyed, while it still lives -- cuCtxDestroy, the primary
	 * context's last release), on the thread doing so; ctx_id as in standin_kernel_run.
	 * Other threads retaining or destroying that context wait until the hook returns.
	 * May be NULL: the GPU then tells nothing. */
	void (*context)(CUcontext ctx, uint32_t ctx_id, bool created);
	/* A module was loaded: lazily, as CUDA_MODULE_LOADING=LAZY (CUDA's default) does, at
	 * the first launch of one of its kernels, in ctx (the launching context), on the
	 * launching thread, inside the launch call before its kernel is told; again, under
	 * a new module_id, at the next launch after more kernels were looked up in it. The
	 * cubin (STANDIN_CUBIN_MAGIC, then one line per kernel) lives as long as the
	 * process. Other launches of the module's kernels wait until the hook returns. May be
	 * NULL. */
	void (*module)(CUcontext ctx, uint32_t module_id, const char *cubin, size_t size);
	/* Device memory was allocated or released (standin_memory_run), on the calling thread,
	 * inside the call, before it returns; a release before the addresses (or handle) it
	 * frees can be handed out again, so a later allocation at them is told after it. May
	 * be NULL. */
	void (*memory)(const struct standin_memory_run *run);
	/* A graph launch ran (standin_graph_run), after its nodes' kernel hooks, inside the
	 * launch call. May be NULL. */
	void (*graph)(const struct standin_graph_run *run);
	/* A synchronization call returned success (standin_sync_run), on the calling thread,
	 * inside the call, just before it returns. May be NULL. */
	void (*sync)(const struct standin_sync_run *run);
	/* A memory pool was trimmed (standin_pool_run), on the calling thread, inside the
	 * call, before it returns. May be NULL. */
	void (*pool)(const struct standin_pool_run *run);
};

/* The first line of the stand-in's cubins, which the fake nvdisasm (standin/nvdisasm)
 * reads; each line after it names one kernel of the module, mangled, in the order the
 * kernels were registered or looked up. */
#define STANDIN_CUBIN_MAGIC "SONDE-STANDIN-CUBIN 1\n"

/* common.c: settings from the environment, trace lines, finding the fake GPU. */

/* Integer setting: unset or unparsable gives `def`. Accepts K/M/G/T (binary) suffixes. */
int64_t standin_env_int(const char *name, int64_t def);

/* The UUID of fake device index (physical: NVML's index) as NVML and CUDA_VISIBLE_DEVICES
 * write it, "GPU-" and 36 characters, into buf (at least STANDIN_UUID_LEN bytes). */
#define STANDIN_UUID_LEN 41
void standin_gpu_uuid(int index, char *buf, size_t len);
/* Floating-point setting: unset or unparsable gives `def`. */
double standin_env_double(const char *name, double def);
/* True when SONDE_STANDIN_TRACE is set to something other than 0. */
bool standin_tracing(void);
/* Writes one "sonde-standin: ..." line to stderr. */
void standin_trace(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/*
 * The fake GPU's private table, or NULL with a reason in *why (a static string) when no
 * libcuda.so.1 stand-in can be loaded. Looks for libcuda.so.1 already loaded, then next
 * to the calling library, then on the usual search path. The result lives as long as
 * the process.
 */
const struct standin_gpu *standin_gpu_table(const char **why);

/* cuGetProcAddress_v2, the one driver function CUDA 12/13's runtime and libraries (cuBLAS's
 * own copy of the runtime among them) look up with dlsym; they take every other one from it. */
typedef CUresult (*standin_get_proc_fn)(const char *symbol, void **pfn, int version,
					cuuint64_t flags, CUdriverProcAddressQueryResult *status);
/* The driver's, from libcuda.so.1 found as standin_gpu_table() finds it; NULL when none. */
standin_get_proc_fn standin_get_proc_address(void);
/* A driver function by base name, CUDA version and CU_GET_PROC_ADDRESS_* flags, through
 * get_proc; NULL (traced) when the driver has no such form. */
void *standin_driver_proc(standin_get_proc_fn get_proc, const char *name, int version,
			  cuuint64_t flags);

/* account.c: each process's device-memory account, for the NVML stand-in. */

#define STANDIN_MAX_DEVICES 64

/* One process's use of one device, as the driver accounts it. */
struct standin_dev_use {
	uint64_t used;	   /* bytes: allocations, physical VMM handles, contexts, and
			    * what the default memory pools hold (reserved, not what
			    * their allocations use) */
	uint64_t contexts; /* live contexts */
};

/* The directory of the accounts: SONDE_STANDIN_STATE_DIR, else a per-user directory under
 * /dev/shm (or /tmp); may be written into buf (len bytes). */
const char *standin_state_dir(char *buf, size_t len);
/* Publishes this process's use of dev (libcuda.so.1 stand-in, after every change). */
void standin_account_set(int dev, uint64_t used, uint64_t contexts);
/* Calls fn for every live process with an account, its devices indexed by ordinal;
 * returns how many. Processes that exited, or whose pid was reused, are skipped. */
int standin_account_each(void (*fn)(void *ctx, uint32_t pid, const struct standin_dev_use *dev),
			 void *ctx);

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t standin_now_ns(void);

#define STANDIN_TRACE(...)                                                                         \
	do {                                                                                       \
		if (standin_tracing())                                                             \
			standin_trace(__VA_ARGS__);                                                \
	} while (0)

#endif /* SONDE_STANDIN_H */
