/* gpu.h: the records the GPU probes (bpf/gpu.bpf.c: uprobes on libcudart,
 * libcuda, libnccl and PyTorch's libtorch_cpu) hand to userspace
 * (src/probe/gpu_probes.c), the API ids the probes are attached with (the
 * BPF cookie), and the drop and event counters they share. Fixed-width fields only: the same bytes are read on
 * both sides.
 *
 * Every probed call produces one record when it returns (its arguments, its
 * return code, its duration and, for launches, waits and collectives, the
 * user stack of the calling thread); waits and collectives also produce a
 * *_BEGIN record when they are entered, so that userspace knows who is
 * blocked right now. A failed call (ret != 0) is reported too, with the
 * arguments it was given: it had no effect (a failed cudaMalloc allocated
 * nothing and is not in the live-allocation map). */
#ifndef SONDE_BPF_GPU_H
#define SONDE_BPF_GPU_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#include "counters.h" /* the counters' tables */
#include "late.h"     /* struct late_stack: a stack's end left to userspace */

#define GPU_MAX_FRAMES 128 /* user frames of a call's stack (bpf/unwind.h) */
/* A probe's BPF cookie: its enum gpu_api, and above it the attached file's
 * index + 1 (0: not known), so that calls are counted per file. */
#define GPU_COOKIE(api, file) ((__u64)(api) | ((__u64)(file) << 32))
#define GPU_COOKIE_API(cookie) ((cookie)&0xffffffffull)
#define GPU_MAX_PROBE_COOKIES 8192

#define GPU_NAME_MAX 256 /* kernel names from cuModuleGetFunction/cuLibraryGetKernel */

/* Byte offset of totalGlobalMem in struct cudaDeviceProp (driver_types.h,
 * CUDA 12 and 13: name[256], uuid (16), luid[8], luidDeviceNodeMask (4),
 * padding to 8). tests/gpu/real/layout.c checks it against the real header. */
#define GPU_CUDA_DEVICE_PROP_TOTAL_MEM 288
/* cudaLaunchConfig_t and CUlaunchConfig (both 56 bytes): grid (3 x u32) at 0,
 * block (3 x u32) at 12, dynamic shared memory at 24 (size_t in the runtime,
 * unsigned int in the driver), stream at 32. */
#define GPU_LAUNCH_CONFIG_SMEM 24
#define GPU_LAUNCH_CONFIG_STREAM 32
/* CUmemAllocationProp: location.type at 8 (CU_MEM_LOCATION_TYPE_DEVICE = 1),
 * location.id at 12. */
#define GPU_MEM_PROP_LOC_TYPE 8
#define GPU_MEM_PROP_LOC_ID 12
#define GPU_MEM_LOCATION_DEVICE 1
/* cudaKernelNodeParams and CUDA_KERNEL_NODE_PARAMS: the kernel (host stub,
 * CUfunction) at 0; CUDA_KERNEL_NODE_PARAMS_v2's CUkernel, used when the
 * function is NULL, at 56. */
#define GPU_KERNEL_NODE_FUNC 0
#define GPU_KERNEL_NODE_KERN 56

/* What a record reports. */
enum gpu_ev_type {
	GPU_EV_LAUNCH = 1,	   /* a kernel or graph launch returned (stack) */
	GPU_EV_ALLOC,		   /* an allocation returned */
	GPU_EV_FREE,		   /* a free returned */
	GPU_EV_SYNC_BEGIN,	   /* a thread entered a synchronize call */
	GPU_EV_SYNC_END,	   /* ... and returned from it (stack) */
	GPU_EV_MEMCPY,		   /* a cudaMemcpy* returned */
	GPU_EV_NCCL_BEGIN,	   /* a thread entered a collective or send/recv */
	GPU_EV_NCCL_END,	   /* ... and returned from it (stack) */
	GPU_EV_NCCL_GROUP,	   /* ncclGroupStart/ncclGroupEnd returned */
	GPU_EV_NCCL_COMM,	   /* ncclCommInitRank(Config) returned */
	GPU_EV_KERNEL_STUB,	   /* __cudaGetKernel: kernel handle -> host stub */
	GPU_EV_KERNEL_NAME,	   /* cuModuleGetFunction & co: handle -> name (name record) */
	GPU_EV_DEVICE,		   /* cudaSetDevice, cuCtxSetCurrent, context create/retain */
	GPU_EV_CAPACITY,	   /* device memory size, as the application asked */
	GPU_EV_PROCESS_EXIT,	   /* synthesized by userspace: a traced process is gone */
	GPU_EV_LOADED,		   /* a process exec'ed or its loader mapped objects: scan it
			      * (header only; kept inside src/probe/gpu_probes.c;
			      * GPU_RF_HELD: it loaded a GPU library a probe is on and
			      * is stopped until its files' unwind tables are built) */
	GPU_EV_NEW_LIB,		   /* a process mapped a CUDA/NCCL library no probe is on
			      * (args.lib; GPU_RF_HELD: it is stopped until attached;
			      * GPU_RF_HOLD_LAPSED, _FAILED: it should have been, and
			      * runs on) */
	GPU_EV_RF_BEGIN,	   /* PyTorch: a thread made a user-scope at::RecordFunction
			      * (torch.autograd.profiler.record_function's __enter__;
			      * args.rf, stack: its Python frames say whose) */
	GPU_EV_RF_END,		   /* ... and ended it (its __exit__): args.rf, dur_ns */
	GPU_EV_GRAPH,		   /* a stream capture began or ended, or a graph was
			      * instantiated (args.graph) */
	GPU_EV_CUPTI_LAUNCH,	   /* libsonde_cupti.so: a kernel launch's entry, by correlation id
			      * (args.cupti.correlation; stack) */
	GPU_EV_CUPTI_KERNEL,	   /* ... a kernel that ran on the GPU (args.cupti; name record) */
	GPU_EV_CUPTI_COPY,	   /* ... a memory copy or set that ran on the GPU (args.cupti) */
	GPU_EV_CUPTI_NVTX,	   /* ... an NVTX range path's id (args.cupti.nvtx; name record) */
	GPU_EV_CUPTI_CLOCK,	   /* ... CUPTI's clock against the host's (args.clock) */
	GPU_EV_CUPTI_STALL,	   /* ... PC sampling: samples of a kernel's instruction
			      * stalled for a reason (args.cupti; name record) */
	GPU_EV_CUPTI_STALL_REASON, /* ... a stall reason's name (args.cupti.detail;
				    * name record) */
	GPU_EV_CUPTI_MEMORY,	   /* ... device memory allocated or released
				    * (args.cupti: bytes, detail the operation
				    * | memory kind << 8) */
	GPU_EV_CUPTI_CUBIN,	   /* ... a module's cubin saved (args.cupti.end: its
				    * CRC, .bytes: its size; name record: its path) */
	GPU_EV_CUPTI_GRAPH,	   /* ... a graph launch's run, traced as a whole
				    * (args.cupti, detail: the graph's id) */
	GPU_EV_CUPTI_SYNC,	   /* ... the host waited for the GPU (args.cupti,
				    * detail: CUPTI's synchronization type) */
	GPU_EV_CUPTI_MEMORY_POOL,  /* ... a memory pool created, destroyed or
				    * trimmed (args.cupti: pool, pool_size, detail
				    * the operation | pool type << 16) */
	GPU_EV_PY_EXIT,		   /* a GPU process's Python interpreter is about to finalize:
			      * its code objects go (header only, kept inside
			      * src/probe/gpu_probes.c; GPU_RF_HELD: it is stopped until
			      * the names of its records' Python frames are read) */
	GPU_EV_MAX,
};

/* Which layer an API belongs to. A call is tracked per (thread, layer) from
 * entry to return, and a driver call made while the same thread is inside a
 * runtime call is the runtime call's own work: it is not reported twice. */
enum gpu_layer {
	GPU_LAYER_RT,
	GPU_LAYER_DRV,
	GPU_LAYER_NCCL,
	GPU_LAYER_TORCH,
	GPU_LAYER_CUPTI,
	GPU_LAYER_MAX,
};

/* Every probed function; the value is the BPF cookie of its probes. Keep
 * the layers contiguous: GPU_API_LAYER() relies on it. The names are the
 * exported symbols (gpu_api_name() in src/probe/gpu_probes.c). */
enum gpu_api {
	GPU_API_NONE,
	/* CUDA runtime (libcudart, or an executable that links it statically) */
	GPU_API_cudaLaunchKernel,
	GPU_API_cudaLaunchKernel_ptsz,
	GPU_API___cudaLaunchKernel, /* CUDA 13 <<<>>> launches (a tail call into cudaLaunchKernel) */
	GPU_API___cudaLaunchKernel_ptsz,
	GPU_API_cudaLaunchKernelExC,
	GPU_API_cudaLaunchKernelExC_ptsz,
	GPU_API_cudaGraphLaunch,
	GPU_API_cudaGraphLaunch_ptsz,
	GPU_API___cudaGetKernel,
	GPU_API_cudaGetKernel,
	GPU_API_cudaLibraryGetKernel,
	GPU_API_cudaMalloc,
	GPU_API_cudaMallocManaged,
	GPU_API_cudaMallocAsync,
	GPU_API_cudaMallocAsync_ptsz,
	GPU_API_cudaFree,
	GPU_API_cudaFreeAsync,
	GPU_API_cudaFreeAsync_ptsz,
	GPU_API_cudaSetDevice,
	GPU_API_cudaStreamSynchronize,
	GPU_API_cudaStreamSynchronize_ptsz,
	GPU_API_cudaDeviceSynchronize,
	GPU_API_cudaEventSynchronize,
	GPU_API_cudaMemcpy,
	GPU_API_cudaMemcpy_ptds,
	GPU_API_cudaMemcpyAsync,
	GPU_API_cudaMemcpyAsync_ptsz,
	GPU_API_cudaMemGetInfo,
	GPU_API_cudaGetDeviceProperties,
	GPU_API_cudaGetDeviceProperties_v2, /* the CUDA 12 name */
	GPU_API_cudaStreamBeginCapture,
	GPU_API_cudaStreamBeginCapture_ptsz,
	GPU_API_cudaStreamEndCapture,
	GPU_API_cudaStreamEndCapture_ptsz,
	GPU_API_cudaGraphInstantiate,
	GPU_API_cudaGraphInstantiateWithFlags,
	GPU_API_cudaGraphAddKernelNode,
	GPU_API_cudaEventRecord, /* entry only: a capture's event (see capturing, bpf/gpu.bpf.c) */
	GPU_API_cudaEventRecord_ptsz,
	GPU_API_cudaEventRecordWithFlags,
	GPU_API_cudaEventRecordWithFlags_ptsz,
	GPU_API_cudaStreamWaitEvent, /* entry only: a stream joining a capture */
	GPU_API_cudaStreamWaitEvent_ptsz,
	/* CUDA driver (libcuda) */
	GPU_API_cuLaunchKernel,
	GPU_API_cuLaunchKernel_ptsz,
	GPU_API_cuLaunchKernelEx,
	GPU_API_cuLaunchKernelEx_ptsz,
	GPU_API_cuGraphLaunch,
	GPU_API_cuGraphLaunch_ptsz,
	GPU_API_cuModuleGetFunction,
	GPU_API_cuLibraryGetKernel,
	GPU_API_cuKernelGetFunction,
	GPU_API_cuMemAlloc_v2,
	GPU_API_cuMemAllocManaged,
	GPU_API_cuMemAllocAsync,
	GPU_API_cuMemAllocAsync_ptsz,
	GPU_API_cuMemFree_v2,
	GPU_API_cuMemFreeAsync,
	GPU_API_cuMemFreeAsync_ptsz,
	GPU_API_cuMemCreate,
	GPU_API_cuMemRelease,
	GPU_API_cuCtxSetCurrent,
	GPU_API_cuDevicePrimaryCtxRetain,
	GPU_API_cuCtxCreate_v2,
	GPU_API_cuCtxCreate_v3,
	GPU_API_cuCtxCreate_v4,
	GPU_API_cuStreamSynchronize,
	GPU_API_cuStreamSynchronize_ptsz,
	GPU_API_cuCtxSynchronize,
	GPU_API_cuCtxSynchronize_v2,
	GPU_API_cuMemGetInfo_v2,
	GPU_API_cuDeviceTotalMem_v2,
	GPU_API_cuStreamBeginCapture_v2,
	GPU_API_cuStreamBeginCapture_v2_ptsz,
	GPU_API_cuStreamEndCapture,
	GPU_API_cuStreamEndCapture_ptsz,
	GPU_API_cuGraphInstantiateWithFlags,
	GPU_API_cuGraphInstantiate_v2,
	GPU_API_cuGraphAddKernelNode, /* CUDA_KERNEL_NODE_PARAMS_v1 */
	GPU_API_cuGraphAddKernelNode_v2,
	GPU_API_cuEventRecord,
	GPU_API_cuEventRecord_ptsz,
	GPU_API_cuEventRecordWithFlags,
	GPU_API_cuEventRecordWithFlags_ptsz,
	GPU_API_cuStreamWaitEvent,
	GPU_API_cuStreamWaitEvent_ptsz,
	/* NCCL (libnccl) */
	GPU_API_ncclAllReduce,
	GPU_API_ncclAllGather,
	GPU_API_ncclReduceScatter,
	GPU_API_ncclBroadcast,
	GPU_API_ncclReduce,
	GPU_API_ncclSend,
	GPU_API_ncclRecv,
	GPU_API_ncclGroupStart,
	GPU_API_ncclGroupEnd,
	GPU_API_ncclCommInitRank,
	GPU_API_ncclCommInitRankConfig,
	/* PyTorch (libtorch_cpu): the calls that open and close a
	 * record_function scope (libscan_torch_sites: call sites, not
	 * functions) */
	GPU_API_torch_rf_begin,
	GPU_API_torch_rf_end,
	/* Sonde's CUPTI library (libsonde_cupti.so, src/cupti/): its marker
	 * functions, entry only */
	GPU_API_sonde_cupti_launch,
	GPU_API_sonde_cupti_records,
	GPU_API_sonde_cupti_clock,
	GPU_API_sonde_cupti_nvtx,
	GPU_API_MAX,
};

#define GPU_API_RT_FIRST GPU_API_cudaLaunchKernel
#define GPU_API_DRV_FIRST GPU_API_cuLaunchKernel
#define GPU_API_NCCL_FIRST GPU_API_ncclAllReduce
#define GPU_API_TORCH_FIRST GPU_API_torch_rf_begin
#define GPU_API_CUPTI_FIRST GPU_API_sonde_cupti_launch
#define GPU_API_LAYER(api)                                                                         \
	((api) >= GPU_API_CUPTI_FIRST	? GPU_LAYER_CUPTI                                          \
	 : (api) >= GPU_API_TORCH_FIRST ? GPU_LAYER_TORCH                                          \
	 : (api) >= GPU_API_NCCL_FIRST	? GPU_LAYER_NCCL                                           \
	 : (api) >= GPU_API_DRV_FIRST	? GPU_LAYER_DRV                                            \
					: GPU_LAYER_RT)

/* Per-type arguments. Pointers and handles are the caller's values; "out"
 * fields are the addresses of the caller's out-parameters, read on return. */
union gpu_args {
	struct {
		__u64 func;   /* host stub, cudaKernel_t, CUfunction/CUkernel, or graph exec */
		__u64 stream; /* cudaStream_t / CUstream */
		__u32 grid[3];
		__u32 block[3];
		__u64 shmem; /* dynamic shared memory bytes */
		__u32 cupti; /* CUPTI's correlation id of it (GPU_RF_CUPTI) */
		__u32 nvtx;  /* ... and its NVTX range path's id, 0: none */
	} launch;
	struct {
		__u64 addr;   /* device pointer, or cuMemCreate handle */
		__u64 size;   /* bytes; for a free, the matched allocation's size */
		__u64 stream; /* async variants */
		__u64 out;    /* alloc: where the pointer/handle is written */
	} mem;
	struct {
		__u64 dst, src, bytes, stream;
		__u32 kind; /* cudaMemcpyKind: 0 H2H, 1 H2D, 2 D2H, 3 D2D, 4 default */
	} copy;
	struct {
		__u64 handle; /* stream, event or context; 0 for the device-wide waits */
	} sync;
	struct {
		__u64 sendbuff, recvbuff;
		__u64 count; /* elements, as passed (AllGather: per-rank send count,
			      * ReduceScatter: per-rank receive count) */
		__u64 comm, stream;
		__u32 datatype; /* ncclDataType_t */
		__u32 redop;	/* ncclRedOp_t; 0 for ops without one */
		__s32 peer;	/* root (Broadcast, Reduce) or peer (Send, Recv); -1 if none */
	} nccl;
	struct {
		__u64 comm; /* *out on return */
		__u64 out;  /* the ncclComm_t * argument */
		__s32 rank, nranks;
	} comm;
	struct {
		__u64 handle; /* *out on return */
		__u64 stub;   /* host stub (__cudaGetKernel), or module/library */
		__u64 out;
		__u64 name; /* address of the name string (cuModuleGetFunction & co) */
	} kernel;
	struct {
		__u64 ctx; /* context (cuCtxSetCurrent; *out on create/retain) */
		__u64 out;
		__s32 device; /* the argument; -1 when the call names a context */
	} device;
	struct {
		__u64 total, free; /* bytes read from the out-parameters on return */
		__u64 out_total, out_free;
	} capacity;
	struct {
		__u64 dev, ino; /* the file (dev in the kernel's encoding: major << 20 | minor) */
	} lib;
	struct {
		__u64 stream; /* capture begin and end: the stream */
		__u64 graph;  /* end: *out on return; instantiate, add: the argument */
		__u64 exec;   /* instantiate: *out on return */
		__u64 out;
		__u64 func;   /* add kernel node: the node's kernel (host stub, CUfunction,
			     * or the CUkernel of a _v2 node without a function) */
		__u64 origin; /* join: the stream the capture began on (stream joined it) */
	} graph;
	struct {
		__u64 obj;   /* the at::RecordFunction (this), the key from begin to end */
		__u64 start; /* RF_END: when it was made (bpf_ktime_get_ns) */
	} rf;
	/* Sonde's CUPTI library's records (GPU_EV_CUPTI_*). */
	struct {
		__u64 start, end; /* CUPTI's clock, ns; STALL: the instruction's
				   * offset in its cubin, and the cubin's CRC */
		__u32 correlation, device, stream, context;
		union {
			struct { /* KERNEL, LAUNCH, NVTX */
				__u32 grid[3], block[3];
				__u32 nvtx; /* LAUNCH: its NVTX range path's id; NVTX: the id */
			};
			struct {		 /* COPY, STALL, STALL_REASON, MEMORY,
					       * MEMORY_POOL, GRAPH, SYNC */
				__u64 bytes;	 /* COPY: bytes; STALL: samples */
				__u32 kind;	 /* SONDE_CUPTI_REC_COPY or _SET (COPY) */
				__u32 detail;	 /* COPY: CUpti_ActivityMemcpyKind; STALL,
						* STALL_REASON: CUPTI's stall reason index;
						* the others: the record's reason (or graph) */
				__u64 pool;	 /* MEMORY, MEMORY_POOL: the pool's address */
				__u64 pool_size; /* ... and size, after the operation */
			};
		};
	} cupti;
	struct {
		__u64 gpu, host;     /* CUPTI's clock and CLOCK_MONOTONIC, at one moment */
		__u64 dropped;	     /* kernel records CUPTI could not keep, so far */
		__u64 stall_dropped; /* PC samples CUPTI dropped, so far */
	} clock;
	__u64 raw[8];
};

/* Record flags. */
#define GPU_RF_DEVICE_GUESSED (1u << 0) /* no cudaSetDevice/cuCtxSetCurrent seen: device 0 */
#define GPU_RF_UNMATCHED (1u << 1)	/* a free of an address no tracked alloc returned */
#define GPU_RF_READ_FAILED (1u << 2)	/* a user-memory read failed: some field is 0 */
#define GPU_RF_REPLACED (1u << 3)	/* an alloc reused an address whose free we missed */
#define GPU_RF_HELD (1u << 4)		/* NEW_LIB, LOADED: the process was stopped (SIGSTOP) */
#define GPU_RF_TRUNCATED (1u << 5)	/* the stack goes on past GPU_MAX_FRAMES */
#define GPU_RF_HOLD_LAPSED (1u << 6) /* NEW_LIB: not held, userspace had not polled for a while */
#define GPU_RF_HOLD_FAILED (1u << 7) /* NEW_LIB: not held, the stop signal could not be sent */
#define GPU_RF_LATE (1u << 8)	     /* a struct gpu_rec_late: the stack's end is userspace's */
#define GPU_RF_CUPTI (1u << 9) /* LAUNCH: Sonde's CUPTI library told of it: args.launch.cupti */

/* A stream or an event of a process (capturing, capture_events). */
struct gpu_capture_key {
	__u32 pid;
	__u32 pad;
	__u64 handle;
};

/* A library file, as lib_files knows it. */
struct gpu_lib_key {
	__u64 dev; /* the kernel's encoding: major << 20 | minor */
	__u64 ino;
};

/* How far the loader probe has walked a process's list of objects (the
 * dynamic loader's r_debug.r_map): the last link_map seen and its l_addr,
 * to know it is still there; r_debug's address, to know the process did
 * not exec since. */
struct gpu_loader_pos {
	__u64 rdebug;
	__u64 last, last_addr;
};

/* One record, without a stack (GPU_EV_ALLOC, _FREE, _MEMCPY,
 * _NCCL_BEGIN, _NCCL_GROUP, _NCCL_COMM, _KERNEL_STUB, _DEVICE, _CAPACITY). */
struct gpu_rec {
	__u64 ts_ns;  /* bpf_ktime_get_ns() at return (at entry for *_BEGIN) */
	__u64 dur_ns; /* entry to return; 0 for *_BEGIN */
	__u32 pid;    /* thread group id */
	__u32 tid;
	__u16 type; /* enum gpu_ev_type */
	__u16 api;  /* enum gpu_api */
	__s32 ret;  /* cudaError_t / CUresult / ncclResult_t; 0 for *_BEGIN */
	__s32 device;
	__u32 flags;   /* GPU_RF_* */
	__s32 nframes; /* user frames in the stack record, or negative errno */
	__u32 pad;
	union gpu_args args;
};

_Static_assert(sizeof(struct gpu_rec) == 48 + 64, "gpu_rec layout");

#define GPU_COMM_LEN 16

/* GPU_EV_LAUNCH, _SYNC_BEGIN, _SYNC_END, _NCCL_END, _RF_BEGIN: who called -- the process's name
 * (its thread-group leader's comm) and the calling thread's -- and the user
 * stack, leaf first. */
struct gpu_rec_stack {
	struct gpu_rec r;
	char comm[GPU_COMM_LEN];   /* the process */
	char thread[GPU_COMM_LEN]; /* the thread */
	__u64 ips[GPU_MAX_FRAMES];
};

_Static_assert(sizeof(struct gpu_rec_stack) == 112 + 32 + 8 * 128, "gpu_rec_stack layout");

/* A call whose stack reached a frame the walk could not take then (a file
 * whose unwind table was still being built): its nframes are those walked,
 * and the rest is userspace's (bpf/late.h), walked once the table is in
 * (src/probe/gpu_late.c). Handed over up to the stack pages it kept:
 * offsetof(struct gpu_rec_late, l.stack) + l.nstack bytes; r.flags has
 * GPU_RF_LATE. */
struct gpu_rec_late {
	struct gpu_rec_stack s;
	struct late_stack l;
};

/* GPU_EV_KERNEL_NAME: the NUL-terminated name. */
struct gpu_rec_name {
	struct gpu_rec r;
	char name[GPU_NAME_MAX];
};

_Static_assert(sizeof(struct gpu_rec_name) == 112 + 256, "gpu_rec_name layout");

/* A call entered less than this after an unfinished call of the same thread
 * and layer is part of it: a wrapper or a tail call (CUDA 13's
 * __cudaLaunchKernel jumps to cudaLaunchKernel), reported once. Older
 * unfinished calls are taken as lost (a longjmp) and replaced. Wide enough
 * for a thread preempted between the two (1 ms was not, on a loaded
 * machine: a tail call taken for a lost call). */
#define GPU_NEST_WINDOW_NS 20000000ull

/* A call in flight, from entry to return, keyed by (thread, layer). */
struct gpu_call_key {
	__u32 tid;
	__u32 layer;
};

struct gpu_call {
	__u64 ts_ns; /* entry */
	__u16 api;
	__u16 depth;  /* calls nested in this one (see GPU_NEST_WINDOW_NS) */
	__u32 flags;  /* GPU_RF_* */
	__s32 device; /* from the arguments; -1: the thread's */
	__u32 pad2;
	union gpu_args args;
};

/* A live allocation, keyed by (pid, kind, address or handle). */
enum gpu_alloc_kind {
	GPU_ALLOC_PTR,	  /* device pointer */
	GPU_ALLOC_HANDLE, /* cuMemCreate handle */
};

struct gpu_alloc_key {
	__u32 pid;
	__u32 kind;
	__u64 addr;
};

struct gpu_alloc {
	__u64 size;
	__s32 device;
	__u16 api;
	__u16 pad;
};

/* Indices of the drops and counters maps (per-CPU arrays of __u64):
 * counters.h's tables. */
enum gpu_drop { GPU_DROPS(COUNTER_ENUM) GPU_DROP_MAX };
enum gpu_counter { GPU_COUNTERS(COUNTER_ENUM) GPU_CNT_MAX };

/* ---- PyTorch ------------------------------------------------------------ */

/* at::RecordScope::USER_SCOPE (ATen's record_function.h; 7 in torch 1.13,
 * which tests/integration/test_dataloader_wait.py runs): the scope of
 * torch.autograd.profiler.record_function, which DataLoader iterators wrap
 * each __next__ in. The other scopes (operators, backward functions,
 * TorchScript) are not reported. */
#define GPU_TORCH_USER_SCOPE 7

/* A user-scope RecordFunction from its constructor to its end(), keyed by
 * (process, object): one in a process's heap is ended once, by the thread
 * that made it, and its address is reused for the next. */
struct gpu_rf_key {
	__u32 pid;
	__u32 pad;
	__u64 obj;
};

struct gpu_rf {
	__u64 ts_ns; /* the constructor's entry */
	__u32 tid;
	__u32 pad;
};

#endif
