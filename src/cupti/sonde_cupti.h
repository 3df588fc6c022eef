/* sonde_cupti.h: what libsonde_cupti.so (the CUPTI injection library,
 * sonde_cupti.c) hands Sonde's probes. The library calls its marker
 * functions, and the GPU probes (bpf/gpu.bpf.c) read their arguments with
 * uprobes: no socket, no shared memory, nothing when no probe is on them.
 * Fixed-width fields only: the same bytes are read on both sides. */
#ifndef SONDE_CUPTI_H
#define SONDE_CUPTI_H

#ifndef __VMLINUX_H__
#include <stdint.h>
#define SONDE_CUPTI_U32 uint32_t
#define SONDE_CUPTI_U64 uint64_t
#else
#define SONDE_CUPTI_U32 __u32
#define SONDE_CUPTI_U64 __u64
#endif

/* What ran on the GPU, as the library hands it over: a batch of these at
 * a time (sonde_cupti_records(r, n), n <= SONDE_CUPTI_BATCH), one marker
 * call for many records. start and end are CUPTI's timestamps (the GPU's
 * clock, in ns); sonde_cupti_clock pairs that clock with the host's
 * CLOCK_MONOTONIC. */
enum sonde_cupti_rec_kind {
	SONDE_CUPTI_REC_KERNEL = 1,	  /* a kernel: name, grid, block */
	SONDE_CUPTI_REC_COPY = 2,	  /* a memory copy: bytes, copy_kind */
	SONDE_CUPTI_REC_SET = 3,	  /* a memory set: bytes */
	SONDE_CUPTI_REC_STALL = 4,	  /* PC sampling: samples of one SASS instruction
				     * of a kernel (name, pc, cubin) stalled for one
				     * reason (reason) */
	SONDE_CUPTI_REC_STALL_REASON = 5, /* a stall reason's name (name) for its
					   * index (reason) */
	SONDE_CUPTI_REC_CUBIN = 6,	  /* a module's cubin saved for disassembly: its
				    * CRC (cubin), size (bytes) and the file's
				    * path in the process's mount namespace (name) */
	SONDE_CUPTI_REC_MEMORY = 7,	  /* device memory allocated or released: start
				     * its time, end its address, bytes, reason
				     * CUpti_ActivityMemoryOperationType (1
				     * allocation, 2 release) | memoryKind << 8 |
				     * CUpti_ActivityMemoryPoolType << 16 (0: not
				     * from a pool); pool, pool_size, pool_used
				     * the pool's after it */
	SONDE_CUPTI_REC_GRAPH = 8,	  /* a graph launch's run, traced as a whole
				     * (SONDE_CUPTI_GRAPHS=graph): start, end,
				     * graph its graph's id; no kernel records of
				     * its nodes then */
	SONDE_CUPTI_REC_SYNC = 9,	  /* the host waited in a synchronisation
				     * call: start, end (CUPTI's clock), reason
				     * CUpti_ActivitySynchronizationType, stream
				     * (SONDE_CUPTI_NO_ID: a context's or an
				     * event's) */
	SONDE_CUPTI_REC_MEMORY_POOL = 10, /* a memory pool created, destroyed or
					   * trimmed: start its time, reason
					   * CUpti_ActivityMemoryPoolOperationType |
					   * CUpti_ActivityMemoryPoolType << 16; pool,
					   * pool_size, pool_used after it */
};

/* CUPTI's "not applicable" stream, context and event id. */
#define SONDE_CUPTI_NO_ID 0xffffffffu

struct sonde_cupti_record {
	union {
		struct {
			SONDE_CUPTI_U64 start, end; /* KERNEL, COPY, SET */
		};
		struct {
			SONDE_CUPTI_U64 pc;    /* STALL: the instruction's offset in its cubin */
			SONDE_CUPTI_U64 cubin; /* ... the cubin's CRC (CUPTI's cubinCrc);
						* CUBIN: the CRC */
		};
	};
	SONDE_CUPTI_U64 name; /* KERNEL, STALL: const char *, the kernel's (mangled)
			       * name; STALL_REASON: the reason's */
	union {
		SONDE_CUPTI_U64 bytes;	 /* COPY, SET; CUBIN: the cubin's size */
		SONDE_CUPTI_U64 samples; /* STALL */
	};
	SONDE_CUPTI_U32 kind; /* enum sonde_cupti_rec_kind */
	SONDE_CUPTI_U32 correlation;
	SONDE_CUPTI_U32 device;
	SONDE_CUPTI_U32 stream;
	SONDE_CUPTI_U32 context;
	union {
		SONDE_CUPTI_U32 copy_kind; /* COPY: CUpti_ActivityMemcpyKind (1 HtoD, 2 DtoH,
					    * 8 DtoD, ...) */
		SONDE_CUPTI_U32 reason;	   /* STALL, STALL_REASON: CUPTI's stall reason index;
					    * MEMORY, SYNC, MEMORY_POOL: see their kinds */
		SONDE_CUPTI_U32 graph;	   /* GRAPH: the graph's id */
	};
	union {
		struct {
			SONDE_CUPTI_U32 grid[3], block[3]; /* KERNEL */
		};
		struct {
			SONDE_CUPTI_U64 pool;	   /* MEMORY, MEMORY_POOL: the pool's address */
			SONDE_CUPTI_U64 pool_size; /* ... its size (what it holds of the device) */
			SONDE_CUPTI_U64 pool_used; /* ... what its allocations use of it */
		};
	};
};

_Static_assert(sizeof(struct sonde_cupti_record) == 80, "sonde_cupti_record layout");

/* CUpti_ActivityMemoryKind's first kind of device memory (DEVICE; before
 * it: unknown, pageable and pinned host memory). */
#define SONDE_CUPTI_MEMORY_KIND_DEVICE 3

/* CUpti_ActivityMemoryPoolType: a pool of the process's own (its size
 * known), one imported from another process (whose memory is that
 * process's). */
#define SONDE_CUPTI_POOL_LOCAL 1
#define SONDE_CUPTI_POOL_IMPORTED 2

/* CUpti_ActivityMemoryPoolOperationType. */
#define SONDE_CUPTI_POOL_CREATED 1
#define SONDE_CUPTI_POOL_DESTROYED 2
#define SONDE_CUPTI_POOL_TRIMMED 3

/* CUpti_ActivitySynchronizationType: 1 event synchronize, 2 stream wait
 * event, 3 stream synchronize, 4 context synchronize. */
#define SONDE_CUPTI_SYNC_TYPES 5

/* Records a marker call hands over, at most. */
#define SONDE_CUPTI_BATCH 32

/* The launch callbacks the library enables (cupti_callbacks.h's ids:
 * where CUPTI's headers are included), for it and the tests' CUPTI
 * client alike: kernel launches, and graph launches (CUPTI gives a graph's
 * kernels the correlation id of its launch). */
#define SONDE_CUPTI_RUNTIME_LAUNCHES                                                               \
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,                                           \
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,                              \
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,                               \
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,                          \
		CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,                                   \
		CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000
#define SONDE_CUPTI_DRIVER_LAUNCHES                                                                \
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,       \
		CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,                                          \
		CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,                                     \
		CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz

/* The copy and set callbacks it enables: their records carry the call's
 * correlation id as a kernel's does, and the call's stack is taken the same
 * way. */
#define SONDE_CUPTI_RUNTIME_COPIES                                                                 \
	CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020, \
		CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000,                                    \
		CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000,                               \
		CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020,                                         \
		CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020,                                    \
		CUPTI_RUNTIME_TRACE_CBID_cudaMemset_ptds_v7000,                                    \
		CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000
#define SONDE_CUPTI_DRIVER_COPIES                                                                  \
	CUPTI_DRIVER_TRACE_CBID_cuMemcpy_v2, CUPTI_DRIVER_TRACE_CBID_cuMemcpy,                     \
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync, CUPTI_DRIVER_TRACE_CBID_cuMemcpy_ptds,      \
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz,                                        \
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2,                                           \
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2,                                      \
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2,                                           \
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2,                                      \
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2,                                           \
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2,                                      \
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2_ptds,                                      \
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2_ptds,                                      \
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2_ptds,                                      \
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz,                                 \
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz,                                 \
		CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz,                                 \
		CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2, CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async,    \
		CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2_ptds,                                        \
		CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz

/* What became of the library in a process: its exported int
 * sonde_cupti_state (SONDE_CUPTI_STATE), which the agent reads from the
 * process's memory -- whenever it comes, even long after the job began. */
enum sonde_cupti_state {
	SONDE_CUPTI_STARTING = 0,  /* loaded; the driver has not initialised it yet */
	SONDE_CUPTI_RECORDING = 1, /* subscribed: kernels, copies and sets recorded */
	SONDE_CUPTI_NO_CUPTI = 2,  /* no CUPTI library found (or one too old) */
	SONDE_CUPTI_HELD = 3,	   /* CUPTI's one subscriber is another tool's */
	SONDE_CUPTI_FAILED = 4,	   /* CUPTI refused something else */
};
#define SONDE_CUPTI_STATE "sonde_cupti_state"

/* NVTX range paths (sonde_cupti_nvtx(id, path)): the open ranges of a
 * thread, outermost first, joined by SONDE_CUPTI_NVTX_SEP; at most
 * SONDE_CUPTI_NVTX_PATH_LEN bytes with the NUL. */
#define SONDE_CUPTI_NVTX_SEP '\x1f'
#define SONDE_CUPTI_NVTX_PATH_LEN 256

/* The marker functions' names, the symbols the probes look up. */
#define SONDE_CUPTI_LAUNCH "sonde_cupti_launch"
#define SONDE_CUPTI_RECORDS "sonde_cupti_records"
#define SONDE_CUPTI_NVTX "sonde_cupti_nvtx"
#define SONDE_CUPTI_CLOCK "sonde_cupti_clock"

/* PC sampling (opt-in: SONDE_CUPTI_PC_SAMPLING=1): the sampling period's
 * exponent (2^N cycles between a SM's samples) unless
 * SONDE_CUPTI_PC_PERIOD says otherwise, and the PCs asked of CUPTI at a
 * time. */
#define SONDE_CUPTI_PC_PERIOD_DEFAULT 20
#define SONDE_CUPTI_PC_BATCH 1024

#endif
