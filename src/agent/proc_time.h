/* proc_time.h: where the threads of the processes the GPU probes follow
 * spent each window -- on a CPU (the sampler's samples), in GPU
 * synchronisations, in collectives, in DataLoader waits (the probes'
 * waits, ended and under way), blocked off-CPU for another cause (the
 * off-CPU profiler, by system call) -- and what bounds each process
 * (src/metrics/verdict.h).
 *
 * A process's verdict is its leading thread's: the thread with the most
 * time on a CPU or in the waits the probes explain in the window (the
 * training loop, not its idle pools), judged against the window's wall
 * time. Its totals are every thread's. A wait under way is credited up to
 * the window's end, the rest when it ends, so a wait that never ends (a
 * stuck collective) still counts.
 *
 * Bounded: at most PROC_TIME_MAX_THREADS threads a window and as many
 * waits under way; what goes past is counted. Not thread-safe: the GPU
 * feed's thread feeds and reads it (src/agent/gpu_feed.c). */
#ifndef SONDE_AGENT_PROC_TIME_H
#define SONDE_AGENT_PROC_TIME_H

#include <stdbool.h>
#include <stdint.h>

#include "metrics/verdict.h"

#define PROC_TIME_MAX_THREADS 65536

struct proc_time;

struct proc_time *proc_time__new(void);
void proc_time__free(struct proc_time *pt);

/* Follows pid's threads from now on (the probes saw it); until then its
 * times are not kept. */
void proc_time__track(struct proc_time *pt, uint32_t pid);
bool proc_time__tracked(const struct proc_time *pt, uint32_t pid);
/* pid exited: its threads, waits and window are forgotten. */
void proc_time__forget(struct proc_time *pt, uint32_t pid);

/* ns spent in state s by thread tid of pid (on a CPU, or a block that
 * ended). Ignored unless pid is followed. */
void proc_time__add(struct proc_time *pt, uint32_t pid, uint32_t tid, enum proc_state s,
		    uint64_t ns);

/* A wait of tid in state s (PS_GPU, PS_COMMUNICATION or PS_INPUT) that
 * began at since_ns, seen at now_ns (CLOCK_MONOTONIC): under way, or its
 * end when ended. Credits the part of [since_ns, now_ns] not credited yet,
 * to the state the wait was first seen in (what it waits for may seem to
 * change while it waits). */
void proc_time__wait(struct proc_time *pt, uint32_t pid, uint32_t tid, enum proc_state s,
		     uint64_t since_ns, uint64_t now_ns, bool ended);

/* One process's window. */
struct proc_window {
	uint32_t pid;
	struct proc_times total; /* every thread's times */
	struct proc_times lead;	 /* the leading thread's */
	uint32_t lead_tid;	 /* 0: no thread had time in the window */
	struct verdict_out verdict;
};
typedef void (*proc_window_fn)(void *ctx, const struct proc_window *w);

/* Ends a window of wall_ns: calls fn once per followed process (by pid)
 * and starts the next. Waits under way should be credited up to now
 * (proc_time__wait) first. */
void proc_time__window(struct proc_time *pt, uint64_t wall_ns, proc_window_fn fn, void *ctx);

struct proc_time_stats {
	uint64_t thread_drops; /* times of threads past PROC_TIME_MAX_THREADS */
	uint64_t wait_drops;   /* waits under way past the bound, credited at their end */
	uint32_t processes, threads, waits;
};
void proc_time__stats(const struct proc_time *pt, struct proc_time_stats *out);

#endif
