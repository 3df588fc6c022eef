/* gpu_trace.h: the kernel timeline -- each kernel Sonde's CUPTI library
 * told of, on its device and stream, from its start to its end on the
 * host's clock (CLOCK_MONOTONIC: CUPTI's clock moved by the library's
 * pairs of the two), with the thread and moment of the launch that queued
 * it. Written as a Chrome trace (the Trace Event Format that Perfetto's UI
 * and chrome://tracing open): a track per process thread that launched and
 * per device and stream, each kernel a slice, an arrow from its launch to
 * it.
 *
 * Bounded: GPU_TRACE_MAX_KERNELS kernels and GPU_TRACE_MAX_PENDING
 * launches waiting for theirs; past that, counted. Not thread-safe. */
#ifndef SONDE_AGENT_GPU_TRACE_H
#define SONDE_AGENT_GPU_TRACE_H

#include <stdint.h>
#include <stdio.h>

#define GPU_TRACE_MAX_KERNELS (1u << 20)
#define GPU_TRACE_MAX_PENDING 65536

struct gpu_trace;

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
/* pid's process is named comm (copied), for its tracks; cheap when it
 * was already. */
void gpu_trace__name(struct gpu_trace *t, uint32_t pid, const char *comm);

struct gpu_trace_stats {
	uint64_t kernels;   /* kept */
	uint64_t dropped;   /* not kept: GPU_TRACE_MAX_KERNELS were */
	uint64_t no_clock;  /* kept on CUPTI's clock: their process told none */
	uint64_t no_launch; /* kept without their launch's thread */
};
void gpu_trace__stats(const struct gpu_trace *t, struct gpu_trace_stats *out);

/* Writes the timeline to f as a Chrome trace (JSON). 0 or -EIO. */
int gpu_trace__write(const struct gpu_trace *t, FILE *f);

#endif
