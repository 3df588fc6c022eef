/* gpu_time.h: each kernel's time on the GPU under the CPU stack that
 * launched it -- the gpu_time profile. Sonde's CUPTI library
 * (libsonde_cupti.so) tells the probes of each launch on the launching
 * thread (its stack, by CUPTI's correlation id) and, later, of each kernel
 * that ran (its name, start and end on the GPU, the same id); here the two
 * meet by (pid, correlation id). A launch's stack ends at the caller of the
 * CUDA call, as the launch profile's: the CUDA and CUPTI frames above it
 * are dropped. A kernel whose launch was not seen (the
 * probes came after it) and a launch whose kernel never came (the job
 * ended first, or the record was lost) are counted, not guessed.
 *
 * A graph's launch has a kernel for each of its nodes, all with its id:
 * each joins it while it is among the last GPU_TIME_MAX_JOINED launches
 * joined.
 *
 * Bounded: GPU_TIME_MAX_PENDING launches wait for their kernel, the oldest
 * given up past that (counted). Not thread-safe: the GPU feed's thread. */
#ifndef SONDE_AGENT_GPU_TIME_H
#define SONDE_AGENT_GPU_TIME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "probe/stack.h"

struct symbolizer;
struct profile;
struct gpu_time;

#define GPU_TIME_MAX_PENDING 65536
/* Launches kept once their first kernel came, for a graph's others. */
#define GPU_TIME_MAX_JOINED 4096
/* NVTX range paths kept, all processes together. */
#define GPU_TIME_MAX_NVTX 65536
/* Kernels whose latest launching stack is kept for their stall samples,
 * all processes together. */
#define GPU_TIME_MAX_HOMES 4096

/* Stacks named with sym (borrowed), at most max_stacks distinct. */
struct gpu_time *gpu_time__new(struct symbolizer *sym, size_t max_stacks);
void gpu_time__free(struct gpu_time *gt);

/* A launch of pid's with CUPTI's correlation id, its stack in s (copied),
 * made inside the NVTX ranges of id nvtx (0: none). */
void gpu_time__launch(struct gpu_time *gt, uint32_t pid, uint32_t correlation, uint32_t nvtx,
		      const struct stack *s);
/* pid's NVTX range path of that id (ranges joined by SONDE_CUPTI_NVTX_SEP,
 * outermost first; copied): its launches' kernels and copies sit under
 * those ranges, as frames of module "[nvtx]" below the kernel's name. */
void gpu_time__nvtx(struct gpu_time *gt, uint32_t pid, uint32_t id, const char *path);
/* A kernel of pid's that ran ns on the GPU, named name (mangled or not),
 * launched by the launch with that correlation id. */
void gpu_time__kernel(struct gpu_time *gt, uint32_t pid, uint32_t correlation, const char *name,
		      uint64_t ns);
/* A memory copy (or with set, a memory set) of pid's of bytes that took
 * ns on the GPU, made by the call with that correlation id: in the
 * gpu_time profile (ns) and the gpu_memcpy one (bytes), topped by
 * gpu_copy_label's label. */
void gpu_time__copy(struct gpu_time *gt, uint32_t pid, uint32_t correlation, uint32_t copy_kind,
		    bool set, uint64_t ns, uint64_t bytes);
/* A graph launch's run, traced as a whole (SONDE_CUPTI_GRAPHS=graph): ns
 * under its launch's stack, topped by "[CUDA graph N]" (gpu_graph_label). */
void gpu_time__graph(struct gpu_time *gt, uint32_t pid, uint32_t correlation, uint32_t graph,
		     uint64_t ns);
/* "[CUDA graph 7]" for graph 7, into buf. */
const char *gpu_graph_label(uint32_t graph, char *buf, size_t size);
/* A synchronisation record of CUPTI's came (counted). */
void gpu_time__sync(struct gpu_time *gt);
/* "[memcpy HtoD]" for a CUpti_ActivityMemcpyKind (1 HtoD, 2 DtoH, 8 DtoD,
 * ...), "[memset]" for a set; static. */
const char *gpu_copy_label(uint32_t copy_kind, bool set);
/* pid's CUPTI library says CUPTI could not record lost kernels of it so
 * far, and dropped stall_lost PC samples (its clock marker's counts). */
void gpu_time__clock(struct gpu_time *gt, uint32_t pid, uint64_t lost, uint64_t stall_lost);
/* pid's stall reason of that index (CUPTI's) is named name (copied). */
void gpu_time__stall_reason(struct gpu_time *gt, uint32_t pid, uint32_t index, const char *name);
/* PC sampling: samples of pid's kernel name (mangled) at the instruction
 * at pc in its cubin (of that CRC), stalled for the reason of that index. CUPTI's
 * continuous sampling names no launch: they go under the stack of the
 * kernel's latest launch whose kernel came (its NVTX ranges too), or
 * without a stack when none came yet (counted). */
void gpu_time__stall(struct gpu_time *gt, uint32_t pid, const char *name, uint64_t cubin,
		     uint64_t pc, uint32_t reason, uint64_t samples);
/* A memory or memory pool record of CUPTI's came (counted: CUPTI's count
 * of what it dropped is of all its records). */
void gpu_time__memory(struct gpu_time *gt);
/* pid's module cubin of that CRC (the samples' cubin) was saved at path:
 * its instructions are named by nvdisasm where there is one (sass.h). */
void gpu_time__cubin(struct gpu_time *gt, uint32_t pid, uint64_t crc, const char *path);
/* "long_scoreboard" for CUPTI's "smsp__pcsamp_warps_issue_stalled_long_scoreboard"
 * (its prefixes cut), into buf. */
const char *gpu_stall_label(const char *reason, char *buf, size_t size);
/* pid exited: its launches still waiting are given up (counted). */
void gpu_time__forget_pid(struct gpu_time *gt, uint32_t pid);

/* The profile since the last call (type gpu_time, unit nanoseconds): each
 * launching stack topped by its kernel's name (or its copy's label),
 * weighted by GPU time. */
int gpu_time__profile(struct gpu_time *gt, struct profile *p);
/* The copies' profile since the last call (type gpu_memcpy, unit bytes):
 * each calling stack topped by its copy's label, weighted by bytes. */
int gpu_time__memcpy_profile(struct gpu_time *gt, struct profile *p);
/* The stall samples' profile since the last call (type gpu_stall, unit
 * samples): each launching stack topped by its kernel, the instruction
 * ("+0x1a0 LDG.E.128", its mnemonic where nvdisasm named it, module
 * "[sass]") and the stall reason ("[stall]"). Samples whose name is being
 * disassembled wait one more profile, unless last (which waits for
 * nvdisasm up to SASS_TIMEOUT_MS). */
int gpu_time__stall_profile(struct gpu_time *gt, struct profile *p, bool last);

struct gpu_time_stats {
	uint64_t kernels;	 /* kernels whose launch was found */
	uint64_t ns;		 /* ... their time on the GPU, and the copies' */
	uint64_t copies;	 /* copies and sets whose call was found */
	uint64_t copy_bytes;	 /* ... their bytes */
	uint64_t no_launch;	 /* kernels (and copies) whose launch was not seen */
	uint64_t no_kernel;	 /* launches given up without their kernel */
	uint64_t drops;		 /* kernels not profiled: the stack table was full */
	uint64_t cupti_lost;	 /* kernel records CUPTI could not keep (its buffers full) */
	uint64_t nvtx_dropped;	 /* NVTX range paths not kept: GPU_TIME_MAX_NVTX were */
	uint64_t nvtx_unknown;	 /* kernels whose launch's NVTX path was never told */
	uint64_t graphs;	 /* graph runs (traced as a whole) whose launch was found */
	uint64_t memory;	 /* CUPTI's memory records (allocations, releases, pools) */
	uint64_t syncs;		 /* CUPTI's synchronisation records */
	uint64_t stall_samples;	 /* PC samples profiled */
	uint64_t stall_no_stack; /* ... of them with no launching stack known */
	uint64_t stall_dropped;	 /* PC samples CUPTI dropped (its buffer full) */
	uint64_t stall_unknown;	 /* ... profiled with a stall reason never named */
	uint32_t pending;	 /* launches waiting for their kernel now */
};
void gpu_time__stats(const struct gpu_time *gt, struct gpu_time_stats *out);

/* The stack of pid's launch with that correlation id while gt holds it
 * (waiting for its kernel, or among the last joined), below the CUDA and
 * CUPTI frames; NULL when it holds none. Borrowed until the next call
 * that feeds gt. For the kernel timeline's launched-from (gpu_trace.h). */
const struct stack *gpu_time__launch_stack(struct gpu_time *gt, uint32_t pid, uint32_t correlation);

#endif
