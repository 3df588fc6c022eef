/* gpu_feed.h: turns the GPU probes' decoded calls (src/probe/gpu_probes.h)
 * into what users see: the live metrics (src/metrics/gpu_metrics.h) and two
 * profiles per window --
 *
 *   gpu_launch  the CPU stack of each launching thread topped by the name of
 *               the kernel it launched (the host stub's symbol, the driver's
 *               name, or "[CUDA graph]"), weighted by launches;
 *   gpu_wait    the stack of each thread blocked in a synchronize call
 *               topped by the call's name, weighted by nanoseconds blocked.
 *
 * It also watches threads blocked after a collective for the stuck-collective
 * alert (sonde_nccl_stuck_seconds), and measures PyTorch DataLoader waits
 * (src/agent/dataloader.h: sonde_dataloader_wait_seconds, and
 * sonde_dataloader_stuck_seconds for the stuck-wait alert). Used by the
 * agent and by
 * `sonde record --gpu`. Not thread-safe: one thread feeds and reads it (the
 * metrics it feeds are thread-safe on their own). */
#ifndef SONDE_AGENT_GPU_FEED_H
#define SONDE_AGENT_GPU_FEED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/proc_time.h"
#include "agent/stack_agg.h"

struct gpu_event;
struct gpu_metrics;
struct gpu_probes;
struct profile;
struct symbolizer;
struct gpu_feed;

struct gpu_feed_opts {
	struct gpu_metrics *metrics; /* borrowed; NULL: no metrics */
	struct symbolizer *sym;	     /* borrowed; names processes, kernels and stacks */
	bool profiles;		     /* keep the gpu_launch and gpu_wait profiles */
	size_t max_stacks;	     /* distinct stacks per profile and window; 0: 65536 */
	/* A thread blocked this long after a collective, or waiting this
	 * long for a DataLoader's batch, is reported stuck (the metric
	 * appears); 0: 1 s. The alerts have their own thresholds. */
	uint64_t stuck_min_ns;
	/* Names the service of a launching or waiting process (a
	 * stack_service_fn of stack_agg.h); NULL: the profiles' samples have
	 * none. */
	stack_service_fn service;
	void *service_ctx;
	/* Keep the kernel timeline of Sonde's CUPTI library (gpu_feed__trace). */
	bool trace;
};

struct gpu_feed *gpu_feed__new(const struct gpu_feed_opts *opts);
void gpu_feed__free(struct gpu_feed *f);

/* The gpu_event_fn to pass to gpu_probes__open (ctx: the feed). */
void gpu_feed__event(void *f, const struct gpu_event *ev);

/* Updates the stuck collectives from the probes' blocked threads, and the
 * DataLoader waits longer than stuck_min_ns (sonde_dataloader_stuck_seconds),
 * at now_ns (CLOCK_MONOTONIC). Call every second or so. */
void gpu_feed__check_blocked(struct gpu_feed *f, struct gpu_probes *gp, uint64_t now_ns);

/* The kernels' GPU time by launching stack (Sonde's CUPTI library) since
 * the last call, into p (type gpu_time, nanoseconds). 0 or a negative errno. */
int gpu_feed__gpu_time(struct gpu_feed *f, struct profile *p);
/* The gpu_memcpy profile since the last call: bytes copied under the
 * calling stacks (gpu_time__memcpy_profile). */
int gpu_feed__gpu_memcpy(struct gpu_feed *f, struct profile *p);
/* The gpu_stall profile since the last call: PC samples under the
 * launching stacks, kernel, instruction and stall reason
 * (gpu_time__stall_profile): the last one (record's, waiting for nvdisasm),
 * or a window's (the agent's: samples whose instruction is being named
 * wait for the next). */
int gpu_feed__gpu_stall(struct gpu_feed *f, struct profile *p);
int gpu_feed__gpu_stall_window(struct gpu_feed *f, struct profile *p);
struct gpu_time_stats;
void gpu_feed__gpu_time_stats(struct gpu_feed *f, struct gpu_time_stats *out);
/* The kernel timeline kept since the start (opts.trace), NULL without it. */
struct gpu_trace *gpu_feed__trace(struct gpu_feed *f);

/* Adds the window's stacks to launch and wait (either may be NULL), then
 * starts a new window. 0 or a negative errno. */
int gpu_feed__profiles(struct gpu_feed *f, struct profile *launch, struct profile *wait);

/* The name of process pid (its thread-group leader's comm): the one its
 * last launch or wait carried, else the symbolizer's at its first event; ""
 * if unknown. Valid until the next call that feeds f. */
const char *gpu_feed__comm(struct gpu_feed *f, uint32_t pid);
/* pid's name for a message: gpu_feed__comm's, else (none of its events
 * came) the symbolizer's -- the sideband's or /proc's -- else "?". */
const char *gpu_feed__name(struct gpu_feed *f, uint32_t pid);

/* Where the followed processes' threads spend time (src/agent/proc_time.h):
 * a CPU sample of thread tid of pid worth ns on a CPU; a block off the CPU
 * of ns in system call syscall (-1: none). Processes the probes have not
 * seen are ignored. */
void gpu_feed__on_cpu(struct gpu_feed *f, uint32_t pid, uint32_t tid, uint64_t ns);
void gpu_feed__off_cpu(struct gpu_feed *f, uint32_t pid, uint32_t tid, long syscall, uint64_t ns);

/* Ends a window of wall_ns at now_ns (CLOCK_MONOTONIC): credits the waits
 * under way (gp's blocked threads, may be NULL, and the DataLoader's),
 * judges each followed process, gives the metrics its window
 * (gpu_metrics__proc_window) and calls fn (may be NULL). Call it before
 * gpu_feed__profiles, which forgets the processes that exited. */
void gpu_feed__judge(struct gpu_feed *f, struct gpu_probes *gp, uint64_t now_ns, uint64_t wall_ns,
		     proc_window_fn fn, void *ctx);
struct proc_time_stats;
void gpu_feed__time_stats(struct gpu_feed *f, struct proc_time_stats *out);

struct gpu_feed_stats {
	uint64_t launches, waits;	   /* calls profiled */
	uint64_t launch_drops, wait_drops; /* not profiled: stack table full */
	uint64_t unknown_kernels;	   /* launches no name was found for */
	/* Launches Sonde's CUPTI library told of, by where their stack came
	 * from: the probed launch call's record, or the library's marker (a
	 * launch no probe followed). */
	uint64_t cupti_from_launch, cupti_from_marker;
};
void gpu_feed__stats(struct gpu_feed *f, struct gpu_feed_stats *out);

#endif
