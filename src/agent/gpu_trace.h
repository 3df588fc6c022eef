/* gpu_trace.h: the kernel timeline -- each kernel Sonde's CUPTI library
 * told of, on its device and stream, from its start to its end on the
 * host's clock (CLOCK_MONOTONIC: CUPTI's clock moved by the library's
 * pairs of the two), with the thread and moment of the launch that queued
 * it. Written as a Chrome trace (the Trace Event Format that Perfetto's UI
 * and chrome://tracing open): a track per process thread that launched and
 * per device and stream, each kernel a slice, an arrow from its launch to
 * it.
 *
 * The agent ships it instead, window by window (gpu_trace__take_json: the
 * body of POST /api/v1/ingest/spans, docs/api.md), each kernel and copy
 * with a short description of the CPU stack that launched it (its
 * innermost frames below CUDA's, Python's first where there are any: from
 * gpu_time's launch stacks, gpu_trace__set_launches).
 *
 * Bounded: GPU_TRACE_MAX_KERNELS kernels (or the window's max, keeping the
 * longest: gpu_trace__set_window_max), GPU_TRACE_MAX_PENDING launches
 * waiting for theirs and GPU_TRACE_MAX_FROM stack descriptions; past that,
 * counted. Not thread-safe. */
#ifndef SONDE_AGENT_GPU_TRACE_H
#define SONDE_AGENT_GPU_TRACE_H

#include <stdint.h>
#include <stdio.h>

#define GPU_TRACE_MAX_KERNELS (1u << 20)
#define GPU_TRACE_MAX_PENDING 65536
#define GPU_TRACE_MAX_FROM 65536

struct gpu_trace;
struct gpu_time;
struct symbolizer;

struct gpu_trace *gpu_trace__new(void);
void gpu_trace__free(struct gpu_trace *t);

/* pid's CUPTI clock read gpu when CLOCK_MONOTONIC read host. */
void gpu_trace__clock(struct gpu_trace *t, uint32_t pid, uint64_t gpu, uint64_t host);
/* Thread tid of pid began a launch at ts_ns (CLOCK_MONOTONIC), CUPTI's
 * correlation id correlation. */
void gpu_trace__launch(struct gpu_trace *t, uint32_t pid, uint32_t tid, uint64_t ts_ns,
		       uint32_t correlation);
/* A kernel of pid's ran on device and stream from start to end (CUPTI's
 * clock), named name (mangled or not; copied). */
void gpu_trace__kernel(struct gpu_trace *t, uint32_t pid, int device, uint32_t stream,
		       uint64_t start, uint64_t end, uint32_t correlation, const char *name);
/* A graph launch of pid's, traced as a whole, ran on device and stream
 * from start to end (CUPTI's clock): a span of kind "graph" named "[CUDA
 * graph N]". */
void gpu_trace__graph(struct gpu_trace *t, uint32_t pid, int device, uint32_t stream,
		      uint64_t start, uint64_t end, uint32_t correlation, uint32_t graph);
/* A thread of pid's waited for the GPU from start to end (CUPTI's clock)
 * in a synchronisation of CUPTI's type (sonde_cupti.h) on stream
 * (SONDE_CUPTI_NO_ID: none, a context's or an event's): a span of kind
 * "sync" on device -1, the host's, named by gpu_sync_label. */
void gpu_trace__sync(struct gpu_trace *t, uint32_t pid, uint32_t stream, uint64_t start,
		     uint64_t end, uint32_t correlation, uint32_t type);
/* "[stream synchronize]" for CUPTI's synchronization type 3, ...; static. */
const char *gpu_sync_label(uint32_t type);
/* A memory copy (or set) of pid's on device and stream from start to end
 * (CUPTI's clock), of bytes, labelled label (gpu_copy_label's "[memcpy
 * HtoD]", "[memset]"; copied): a span like a kernel's, of kind "memcpy
 * HtoD" (the label without its brackets). */
void gpu_trace__copy(struct gpu_trace *t, uint32_t pid, int device, uint32_t stream, uint64_t start,
		     uint64_t end, uint32_t correlation, const char *label, uint64_t bytes);
/* Describes each kernel's and copy's launching stack: the one gt holds for
 * its (pid, correlation) when it comes (gpu_time__launch_stack), named
 * with sym. Both borrowed; NULL: no descriptions. */
void gpu_trace__set_launches(struct gpu_trace *t, struct gpu_time *gt, struct symbolizer *sym);
/* Keeps at most max spans between two gpu_trace__take_json calls: the
 * longest (a shorter one, or the shortest kept, is dropped and counted).
 * 0: GPU_TRACE_MAX_KERNELS, the first kept. */
void gpu_trace__set_window_max(struct gpu_trace *t, size_t max);
/* pid's process is named comm (copied), for its tracks; cheap when it
 * was already. */
void gpu_trace__name(struct gpu_trace *t, uint32_t pid, const char *comm);

struct gpu_trace_stats {
	uint64_t kernels;   /* kept */
	uint64_t dropped;   /* not kept: GPU_TRACE_MAX_KERNELS were */
	uint64_t no_clock;  /* kept on CUPTI's clock: their process told none */
	uint64_t no_launch; /* kept without their launch's thread */
	uint64_t copies;    /* of kernels: copies and sets */
	uint64_t no_from;   /* kept without a stack description: none, or too many */
	uint64_t shipped;   /* given to gpu_trace__take_json's bodies */
};
void gpu_trace__stats(const struct gpu_trace *t, struct gpu_trace_stats *out);

/* Writes the timeline to f as a Chrome trace (JSON). 0 or -EIO. */
int gpu_trace__write(const struct gpu_trace *t, FILE *f);

/* The spans kept since the last call, as a body of POST
 * /api/v1/ingest/spans (a series per process: labels node, pid and
 * process), in order of start, on the wall clock (CLOCK_MONOTONIC +
 * real_minus_mono ns), then forgets them. Spans of a process that told no
 * clock pair are left out (counted in no_clock). NULL when there is none
 * (or on ENOMEM), else malloc()ed, *len its length and *n its spans. */
char *gpu_trace__take_json(struct gpu_trace *t, const char *node, int64_t real_minus_mono,
			   size_t *len, size_t *n);

#endif
