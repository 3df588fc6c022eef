/* gpu_probes.h: the GPU probes -- loads bpf/gpu.bpf.c, finds the CUDA
 * runtime, CUDA driver and NCCL libraries that processes map (and the
 * executables that link the runtime statically; and PyTorch's libtorch_cpu,
 * whose record_function scopes time DataLoader waits), attaches uprobes to
 * their functions once per file, and hands every decoded call to a callback
 * as userspace drains the ring buffer. Used by the agent and by `sonde
 * record --gpu`.
 *
 * A uprobe is attached to a file (inode), not a process: once a library is
 * attached it fires in every process that maps it, present and future. So
 * the files are attached before processes map them where they can be found
 * (gpu_probes__attach_known, __attach_needed, __attach_path), and the
 * others as processes map them: a probe on the dynamic loader's
 * _dl_debug_state() -- called once a program's libraries are mapped, before
 * any of their code runs, and at every dlopen -- walks the loader's list of
 * objects in BPF; when one is a CUDA or NCCL library whose file no probe is
 * on, it tells gpu_probes__poll() at once and, per opts.hold, stops the
 * process (SIGSTOP) until the attach is done (SIGCONT): its first call is
 * then seen however soon it comes. gpu_probes__scan() finds what the
 * loader's probe could not (a static cudart, another loader) every few
 * seconds. Probes are attached
 * with one uprobe_multi link per program and file (Linux 6.6), else one
 * perf uprobe per function (SONDE_GPU_PERF_UPROBES=1 forces that). Not
 * thread-safe: one thread opens, scans, polls and frees. */
#ifndef SONDE_PROBE_GPU_PROBES_H
#define SONDE_PROBE_GPU_PROBES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gpu.h" /* bpf/gpu.h: enum gpu_ev_type, enum gpu_api, GPU_RF_*, GPU_DROP_* */
#include "probe/gpu_late.h"

struct pid_filter;
struct gpu_probes;

/* NCCL operations, in the order of enum nccl_op (metrics/gpu_metrics.h). */
enum gpu_coll {
	GPU_COLL_ALLREDUCE,
	GPU_COLL_ALLGATHER,
	GPU_COLL_REDUCESCATTER,
	GPU_COLL_BROADCAST,
	GPU_COLL_REDUCE,
	GPU_COLL_SEND,
	GPU_COLL_RECV,
	GPU_COLL_NONE, /* ncclGroupStart / ncclGroupEnd */
};

enum gpu_graph_op {
	GPU_GRAPH_CAPTURE_BEGIN,
	GPU_GRAPH_CAPTURE_END,
	GPU_GRAPH_INSTANTIATE,
	GPU_GRAPH_ADD_KERNEL,
	GPU_GRAPH_CAPTURE_JOIN, /* stream joined the capture begun on origin (an event's wait) */
};

/* One decoded call. Which member of the union is set depends on type:
 *
 *   GPU_EV_LAUNCH              launch (+ stack)
 *   GPU_EV_ALLOC, GPU_EV_FREE  mem
 *   GPU_EV_SYNC_BEGIN, _END    sync (+ stack at both: _BEGIN names what a stuck one waits on)
 *   GPU_EV_MEMCPY              copy
 *   GPU_EV_NCCL_BEGIN, _END,
 *   GPU_EV_NCCL_GROUP          nccl (+ stack at _END)
 *   GPU_EV_NCCL_COMM           comm
 *   GPU_EV_KERNEL_STUB, _NAME  kernel
 *   GPU_EV_DEVICE              ctx (the device is in .device)
 *   GPU_EV_CAPACITY            capacity
 *   GPU_EV_PROCESS_EXIT        none (only pid): the process is gone, and
 *                              with it its device memory
 *   GPU_EV_GRAPH               graph: a stream capture began or ended, a
 *                              graph was instantiated
 *   GPU_EV_CUPTI_LAUNCH        cupti.correlation (+ stack): a launch, seen by
 *                              Sonde's CUPTI library (libsonde_cupti.so)
 *   GPU_EV_CUPTI_KERNEL        cupti: a kernel that ran, and when (GPU clock)
 *   GPU_EV_CUPTI_NVTX          cupti.nvtx, cupti.name: an NVTX range path
 *                              (ranges joined by SONDE_CUPTI_NVTX_SEP)
 *   GPU_EV_CUPTI_COPY          cupti: a memory copy or set that ran (bytes,
 *                              copy_kind, set; no name)
 *   GPU_EV_CUPTI_CLOCK         clock: the GPU clock against the host's
 *   GPU_EV_CUPTI_STALL         cupti.name, pc, cubin, reason, samples: PC
 *                              sampling's samples of a kernel's instruction
 *   GPU_EV_CUPTI_STALL_REASON  cupti.reason, cupti.name: a stall reason's name
 *   GPU_EV_CUPTI_MEMORY        cupti.bytes, pc (the address), reason (CUPTI's
 *                              operation: 1 allocation, 2 release | memory
 *                              kind << 8), device: device memory, as CUPTI
 *                              records it
 *   GPU_EV_CUPTI_CUBIN         cupti.cubin (CRC), bytes, name (its file): a
 *                              module's cubin, saved for disassembly
 *   GPU_EV_CUPTI_GRAPH         cupti: a graph launch's run, traced as a whole
 *                              (reason: the graph's id)
 *   GPU_EV_CUPTI_SYNC          cupti: start and end (CUPTI's clock) of a wait
 *                              of the host (reason: CUPTI's type), stream,
 *                              context (SONDE_CUPTI_NO_ID: none); device -1
 *   GPU_EV_CUPTI_MEMORY_POOL   cupti.pool, pool_size, reason (operation |
 *                              pool type << 16), device: a pool created,
 *                              destroyed or trimmed
 *   GPU_EV_RF_BEGIN, _END      rf: a PyTorch record_function scope entered
 *                              (+ stack, always taken: its Python frames say
 *                              whose it is) and ended (dur_ns, on the thread
 *                              that ended it)
 *
 * A failed call (ret != 0) is reported with the arguments it was given and
 * had no effect: account memory, copies and capacities only when ret == 0. */
struct gpu_event {
	enum gpu_ev_type type;
	enum gpu_api api;
	const char *api_name; /* "cudaLaunchKernel", ...; static */
	uint32_t pid, tid;
	uint64_t ts_ns;	 /* CLOCK_MONOTONIC: return (entry for *_BEGIN) */
	uint64_t dur_ns; /* entry to return; 0 for *_BEGIN */
	int32_t ret;	 /* cudaError_t, CUresult or ncclResult_t */
	int device;	 /* CUDA device ordinal (GPU_RF_DEVICE_GUESSED: assumed 0) */
	uint32_t flags;	 /* GPU_RF_* */
	union {
		struct {
			uint64_t func;	  /* as passed: host stub, cudaKernel_t, CUfunction,
					* CUkernel, or the graph exec for graph launches */
			uint64_t stub;	  /* host stub to symbolize in pid's address space
					* (symbolizer__resolve_user), 0 if unknown */
			const char *name; /* kernel name from the driver API, or NULL;
					   * lives as long as the gpu_probes */
			uint32_t grid[3], block[3]; /* 0 for graph launches */
			uint64_t shmem, stream;
			bool graph;
			uint32_t cupti; /* CUPTI's correlation id (flags & GPU_RF_CUPTI) */
			uint32_t nvtx;	/* ... its NVTX range path's id (0: none) */
		} launch;
		struct {
			uint64_t addr;	 /* device pointer, or cuMemCreate handle */
			uint64_t size;	 /* free: the matched allocation's size, 0 if
					  * unmatched (GPU_RF_UNMATCHED) */
			uint64_t stream; /* async variants, else 0 */
			uint64_t out;	 /* alloc: address of the out-parameter, else 0 */
			bool managed, async, handle;
		} mem;
		struct {
			uint64_t dst, src, bytes, stream;
			uint32_t kind; /* cudaMemcpyKind: 0 H2H, 1 H2D, 2 D2H, 3 D2D, 4 default
					* (the order of enum gpu_copy_kind in metrics) */
			bool async;
		} copy;
		struct {
			uint64_t handle; /* stream, event or context; 0: device-wide */
		} sync;
		struct {
			enum gpu_coll coll;
			uint64_t count;	    /* elements, as passed */
			uint64_t bytes;	    /* count x size of datatype; 0 if unknown type */
			uint32_t datatype;  /* ncclDataType_t */
			uint32_t type_size; /* bytes per element, 0 if unknown */
			uint32_t redop;	    /* ncclRedOp_t (AllReduce, Reduce, ReduceScatter) */
			int peer;	    /* root (Broadcast, Reduce), peer (Send, Recv), or -1 */
			uint64_t comm, stream, sendbuff, recvbuff;
			int rank, nranks; /* of comm, from ncclCommInitRank; -1 if unknown */
		} nccl;
		struct {
			uint64_t comm; /* 0 if the call failed */
			int rank, nranks;
		} comm;
		struct {
			uint64_t handle;  /* cudaKernel_t, CUfunction or CUkernel */
			uint64_t stub;	  /* KERNEL_STUB: the host stub; KERNEL_NAME: module */
			const char *name; /* KERNEL_NAME: the name; else NULL */
		} kernel;
		struct {
			uint64_t ctx; /* the context created, retained or made current */
		} ctx;
		struct {
			uint64_t total; /* device memory bytes */
			uint64_t free;	/* free bytes (cudaMemGetInfo, cuMemGetInfo), else 0 */
		} capacity;
		struct {
			enum gpu_graph_op op;
			uint64_t stream; /* capture begin and end */
			uint64_t graph;	 /* end: the graph captured; instantiate: its graph;
					  * add: the graph a node was added to */
			uint64_t exec;	 /* instantiate: the executable graph made */
			/* add: the node's kernel, as launch's func, stub and name */
			uint64_t func, stub;
			const char *name;
			uint64_t origin; /* join: the stream the capture began on */
		} graph;
		struct {
			uint64_t obj;	   /* the at::RecordFunction: begin and end share it */
			uint64_t start_ns; /* CLOCK_MONOTONIC at its constructor */
		} rf;
		struct {
			uint32_t correlation; /* CUPTI's: a launch and its kernel share it */
			uint32_t stream;      /* KERNEL: CUPTI's stream id */
			uint64_t start, end;  /* KERNEL: on CUPTI's clock (ns) */
			const char *name; /* KERNEL: mangled; valid until the callback returns */
			uint64_t bytes;	  /* COPY */
			uint32_t
				copy_kind; /* COPY: CUpti_ActivityMemcpyKind (1 HtoD, 2 DtoH, ...) */
			bool set;	   /* COPY: a memory set, not a copy */
			uint32_t nvtx;	   /* LAUNCH: its NVTX range path's id (0: none); NVTX: the
					* id of the path in name */
			uint64_t pc, cubin; /* STALL: the instruction's offset in its cubin,
					     * the cubin's CRC; name its kernel's */
			uint64_t samples;   /* STALL */
			uint32_t reason;    /* STALL: CUPTI's stall reason index; STALL_REASON:
					     * the index whose name is name; MEMORY,
					     * MEMORY_POOL, SYNC: sonde_cupti.h's reason;
					     * GRAPH: the graph's id */
			uint32_t context;   /* SYNC: CUPTI's context id */
			uint64_t pool, pool_size; /* MEMORY, MEMORY_POOL: the pool's address
						   * (0: not from a pool) and size */
		} cupti;
		struct {
			uint64_t gpu, host; /* CUPTI's clock and CLOCK_MONOTONIC at one moment */
			uint64_t dropped;   /* kernel records CUPTI could not keep, so far */
			uint64_t stall_dropped; /* PC samples CUPTI dropped, so far */
		} clock;
	};
	/* The calling thread's user stack, leaf first (launch, sync and NCCL
	 * ends, RF_BEGIN); nips 0 when none. stack_err: negative errno when it
	 * could not be read. Valid until the callback returns. */
	const uint64_t *ips;
	int nips;
	int stack_err;
	/* With the stack: the process's name (its thread-group leader's
	 * comm) and the calling thread's; "" for the events without one. */
	char process[GPU_COMM_LEN], thread[GPU_COMM_LEN];
};

/* Called for every event; the event lives until the callback returns. */
typedef void (*gpu_event_fn)(void *ctx, const struct gpu_event *ev);

/* Whether a process that maps a CUDA or NCCL library file no probe is on
 * yet waits (stopped, for the milliseconds the attach takes) before it can
 * call into it; and one that maps such a library a probe is on while a file
 * it maps has no unwind table yet, while the tables are built (with stacks
 * only), so that its first calls' stacks keep their callers. */
enum gpu_hold {
	GPU_HOLD_NONE,	 /* never: calls made before the attach are missed */
	GPU_HOLD_NO_TTY, /* processes without a controlling terminal: a shell's
			  * job control would report the stop of one with */
	GPU_HOLD_ALL,	 /* every traced process (`sonde record -- CMD`'s own) */
};

struct unwinder;
struct symbolizer;

struct gpu_probes_opts {
	/* Only the processes of this filter (NULL: all), shared with the
	 * other BPF objects: pid_filter.h. */
	const struct pid_filter *pid_filter;
	bool follow_children; /* ... and the processes they fork */
	bool user_stacks;     /* capture stacks of launches, waits, collectives */
	size_t ringbuf_bytes; /* the kernel's ring; 0: 8 MiB */
	size_t queue_bytes;   /* records drained from it, waiting to be decoded; 0: 128 MiB */
	uint32_t max_allocs;  /* live allocations tracked; 0: 262144 */
	uint32_t max_threads; /* threads with a device or a call in flight; 0: 65536 */
	enum gpu_hold hold;
	/* The CPU sampler's unwind tables, shared (borrowed: it must outlive
	 * the probes); NULL: tables of their own, of unwind_memory bytes
	 * (0: the default). */
	struct unwinder *unwinder;
	uint64_t unwind_memory;
	/* The longest a process is held, in all its holds (0:
	 * SONDE_GPU_HOLD_MAX_MS, else 100 ms): the attach comes first, then
	 * the unwind tables of its files, built on the unwinder's threads
	 * while the poll goes on; it goes on when they are in or the time is
	 * up, the tables still to come then built while it runs (its stacks
	 * through them finished once they are in, with sym; else cut). */
	uint64_t hold_max_ns;
	/* The agent's symbolizer (borrowed): with it and user_stacks, a
	 * stack that reaches code whose unwind table is still being built is
	 * finished in userspace once it is in, the process's events handed
	 * on in order meanwhile (src/probe/gpu_late.c; SONDE_LATE_STACKS=0:
	 * walked by frame pointers there). */
	struct symbolizer *sym;
};

/* Loads the BPF programs (nothing is attached until a scan finds a
 * library). Returns NULL with errno set after printing why. */
struct gpu_probes *gpu_probes__open(const struct gpu_probes_opts *opts, gpu_event_fn fn, void *ctx);
void gpu_probes__free(struct gpu_probes *gp);

/* Attaches to the CUDA and NCCL libraries found where the dynamic loader
 * looks (/etc/ld.so.conf and its includes, the default directories,
 * LD_LIBRARY_PATH, CUDA_HOME and /usr/local/cuda*), so that processes
 * started later are traced from their first call. Returns the number of
 * files newly attached (src/probe/gpu_discover.c). */
int gpu_probes__attach_known(struct gpu_probes *gp);

/* Attaches to the CUDA and NCCL libraries the program exe links, as its
 * dynamic loader resolves them with this process's environment (the loader
 * run in list mode: it maps the libraries and runs none of their code), so
 * that a command started next is traced from its first call. Returns the
 * number of files newly attached, or a negative errno. */
int gpu_probes__attach_needed(struct gpu_probes *gp, const char *exe);

/* Looks at every process (with the pid filter, the filtered ones) for CUDA
 * and NCCL libraries and executables that link cudart statically, attaches
 * to the files not seen before, and forgets processes that exited (a
 * GPU_EV_PROCESS_EXIT event each, through the callback). Returns the number
 * of files newly attached, or a negative errno. */
int gpu_probes__scan(struct gpu_probes *gp);
/* The same for one process. */
int gpu_probes__scan_pid(struct gpu_probes *gp, uint32_t pid);
/* Attaches to a file by path, as if a process mapped it: families from its
 * name (libcudart.so*, libcuda.so*, libnccl.so*), else from its symbols
 * (an executable). Returns 1 if newly attached, 0 if already attached,
 * -ENODATA if the file holds no GPU function, or another negative errno. */
int gpu_probes__attach_path(struct gpu_probes *gp, const char *path);

/* Attaches to Sonde's CUPTI library (libsonde_cupti.so, beside the running
 * sonde binary), whose markers tell each kernel's GPU time (gpu_time); its
 * path into path (size bytes). 0, or a negative errno: -ENOENT where it was
 * not built. */
int gpu_probes__attach_cupti(struct gpu_probes *gp, char *path, size_t size);

/* Waits up to timeout_ms for records and decodes those drained so far,
 * calling the callback per event; timeout_ms 0: every record submitted
 * before the call (the drain thread's pass it asks for: tens of us). A
 * thread of the probes' own drains the kernel's ring buffer into memory
 * every 10 ms, and at once for a record that forces a wakeup (a launch
 * record is 1128 bytes: 8 MiB hold 0.37 s at 20,000 launches/s), so a
 * caller busy for seconds loses nothing up to opts.queue_bytes; call this
 * every 10-50 ms all the same, as held processes wait for it. Returns the
 * number of records or a negative errno. */
int gpu_probes__poll(struct gpu_probes *gp, int timeout_ms);

/* The last poll, at the end of a recording: everything drained, and the
 * stacks still waiting for tables finished (those that need one that does
 * not come in a few rounds, by frame pointers there). */
int gpu_probes__flush(struct gpu_probes *gp);

/* What a kernel handle of pid names, as learned from __cudaGetKernel (stub)
 * and cuModuleGetFunction / cuLibraryGetKernel (name). 0 and both filled
 * (stub 0 or name NULL when unknown), or -ENOENT. */
int gpu_probes__kernel(struct gpu_probes *gp, uint32_t pid, uint64_t handle, uint64_t *stub,
		       const char **name);

/* A thread now inside a synchronize, a collective or ncclGroupEnd, and the
 * last collective its process issued (for the stuck-collective alert). */
struct gpu_blocked {
	uint32_t pid, tid;
	enum gpu_api api;  /* the call it is in */
	uint64_t since_ns; /* CLOCK_MONOTONIC at entry */
	uint64_t handle;   /* stream/event/context it waits on, or the comm */
	bool has_coll;	   /* the process issued a collective */
	enum gpu_coll coll;
	uint64_t comm, coll_ts_ns;
	int rank, nranks; /* -1 if unknown */
};
typedef void (*gpu_blocked_fn)(void *ctx, const struct gpu_blocked *b);
void gpu_probes__each_blocked(struct gpu_probes *gp, gpu_blocked_fn fn, void *ctx);

/* One attach attempt: a symbol of a file. err 0: attached (alias_of set
 * when it shares its address with an earlier symbol, which carries the
 * probe); -ENOENT: the file has no such symbol (not a failure); else why
 * the attach failed. calls: the entries into it the probe saw, in every
 * process (0 for aliases and failures). */
struct gpu_probe_info {
	const char *path;
	const char *symbol;
	uint64_t offset;
	int err;
	const char *alias_of;
	uint64_t calls;
};
typedef void (*gpu_probe_info_fn)(void *ctx, const struct gpu_probe_info *p);
void gpu_probes__each_probe(struct gpu_probes *gp, gpu_probe_info_fn fn, void *ctx);

/* Each CUDA, NCCL or PyTorch library file each process maps, as the last
 * scan of it found it: the file's name (the path probes report), and err 0
 * when the probes are on it, else why not (-ENODATA: it holds none of the
 * functions; another negative errno: it could not be read). Processes the
 * last full scan did not find are forgotten. */
typedef void (*gpu_process_lib_fn)(void *ctx, uint32_t pid, const char *file, int err);
void gpu_probes__each_process_lib(struct gpu_probes *gp, gpu_process_lib_fn fn, void *ctx);

/* Why a process that mapped a library no probe was on was not held for the
 * attach (it should have been): the agent had not polled for the heartbeat
 * (busy, stopped), or the stop signal could not be sent. */
enum gpu_hold_missed { HOLD_MISSED_BUSY, HOLD_MISSED_SIGNAL, HOLD_MISSED_MAX };

struct gpu_probes_stats {
	/* The BPF programs' counts, by bpf/counters.h's GPU_COUNTERS (events:
	 * records submitted; the *_LIVE ones raw, see allocs_live). */
	uint64_t counts[GPU_CNT_MAX];
	uint64_t received;	      /* records decoded by userspace */
	uint64_t drain_gap_max_ns;    /* the longest time between two polls that decoded */
	uint64_t queue_peak_bytes;    /* the most records waited in memory, drained, not decoded */
	uint64_t bad_records;	      /* records of the wrong size or type, skipped */
	uint64_t drops[GPU_DROP_MAX]; /* by enum gpu_drop, see gpu_drop_name() */
	uint64_t drops_total;	/* of the records (GPU_DROP_LATE is a stack walked another way) */
	uint64_t allocs_live;	/* live allocations tracked */
	uint64_t inflight_live; /* calls in flight */
	double map_fill;	/* fullest BPF hash map, 0..1 */
	uint32_t files;		/* files attached */
	uint32_t probes_attached, probes_failed; /* symbols (entry + return) */
	uint32_t processes;			 /* processes with GPU events, tracked */
	uint32_t kernels;			 /* kernel handles known */
	uint64_t scans;
	uint64_t loaded_scans;	 /* scans of a process that exec'ed or loaded objects */
	uint32_t loaders_hooked; /* dynamic loaders whose _dl_debug_state is hooked */
	uint64_t new_libs;	 /* processes seen mapping a library no probe was on */
	uint64_t holds;		 /* processes held for an attach or for unwind tables */
	uint64_t hold_ns;	 /* total time they were held */
	uint64_t hold_max_ns;	 /* the longest hold */
	uint64_t holds_capped;	 /* let go at hold_max_ns with unwind tables still to come */
	uint64_t hold_missed[HOLD_MISSED_MAX]; /* processes that should have been held, were not */
	struct gpu_late_stats late_st; /* the records whose stack's end was left to userspace
					* (counts[GPU_CNT_LATE]): what became of them */	       /* ... and what became of them */
};
void gpu_probes__stats(struct gpu_probes *gp, struct gpu_probes_stats *out);
/* Calls fn for each process that lost records to a full ring buffer, with
 * how many so far (a count for each of the last 4096 such processes). */
typedef void (*gpu_lost_fn)(void *ctx, uint32_t pid, uint64_t lost);
void gpu_probes__each_lost(struct gpu_probes *gp, gpu_lost_fn fn, void *ctx);

/* "busy", "signal": the reason label of sonde_agent_gpu_hold_missed_total. */
const char *gpu_hold_missed_name(enum gpu_hold_missed why);

/* "cudaLaunchKernel" for GPU_API_cudaLaunchKernel; "?" when out of range. */
const char *gpu_api_name(enum gpu_api api);
/* "ringbuf", "inflight", ... for the drops metric's label. */
const char *gpu_drop_name(enum gpu_drop d);
/* "allreduce", ... (the op label of enum nccl_op); "group" for GPU_COLL_NONE. */
const char *gpu_coll_name(enum gpu_coll c);
/* Bytes per element of an ncclDataType_t (ncclInt8 .. ncclFloat8e5m2), 0 if
 * unknown. */
uint32_t gpu_nccl_type_size(uint32_t datatype);

#endif
