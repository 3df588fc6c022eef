/* verdict.h: what bounds a process in a window -- the GPU, the CPU, its
 * input pipeline, communication, I/O or locks, or nothing (idle) -- from
 * where its threads spent the window's wall time: on a CPU (the sampler),
 * waiting in a GPU synchronisation, in a DataLoader's next batch, in a
 * collective (the probes), or blocked off-CPU for another cause (the
 * off-CPU profiler, by the system call it blocked in).
 *
 * The waits the probes explain (GPU, input, communication) are off-CPU time
 * too: the unexplained off-CPU time of a cause is what is left of it once
 * the explained waits took their part, in proportion to each cause. The
 * verdict is the state with the largest share of the window's wall time
 * when that share is at least VERDICT_MIN_SHARE, else idle; ties go to the
 * state listed first in enum proc_state. Pure functions: the caller keeps
 * the times and locks. */
#ifndef SONDE_METRICS_VERDICT_H
#define SONDE_METRICS_VERDICT_H

#include <stddef.h>
#include <stdint.h>

/* Where a process's threads spent time (the `state` label of
 * sonde_process_time_seconds_total). */
enum proc_state {
	PS_GPU,		  /* in a CUDA synchronisation (cudaDeviceSynchronize...) */
	PS_COMMUNICATION, /* in a collective (NCCL) */
	PS_INPUT,	  /* in a DataLoader's next batch */
	PS_CPU,		  /* on a CPU */
	PS_LOCK,	  /* blocked in futex and other lock waits */
	PS_IO,		  /* blocked in reads, writes, polls, faults */
	PS_SLEEP,	  /* blocked by choice: sleeps, waits for a child */
	PS_NR,
};

/* The verdicts: the states that bound a process, and idle. */
enum verdict {
	V_GPU,
	V_COMMUNICATION,
	V_INPUT,
	V_CPU,
	V_LOCK,
	V_IO,
	V_IDLE,
	V_NR,
};

/* The least share of the window's wall time that makes a state the bound. */
#define VERDICT_MIN_SHARE 0.2

/* A process's times in one window, in nanoseconds; wall_ns is the window's
 * length. Off-CPU times by cause (lock, io, sleep) include the explained
 * waits' blocked time. */
struct proc_times {
	uint64_t wall_ns;
	uint64_t ns[PS_NR];
};

struct verdict_out {
	enum verdict verdict;
	/* Each state's share of the wall time after the explained waits took
	 * their part of the off-CPU time (0..; on-CPU time of many threads
	 * can pass 1). */
	double share[PS_NR];
};

/* The verdict of t; a window of no length is idle with no shares. */
void verdict__judge(const struct proc_times *t, struct verdict_out *out);

/* "gpu", "communication", "input", "cpu", "lock", "io", "idle". */
const char *verdict__name(enum verdict v);
/* "gpu_wait", "collective", "dataloader_wait", "on_cpu", "lock", "io",
 * "sleep". */
const char *proc_state__name(enum proc_state s);

/* The evidence in words: the states with at least half a percent of the
 * wall time, largest first, as "gpu_wait 81 %, on_cpu 12 %" ("nothing" when
 * none) into buf (always terminated). */
void verdict__evidence(const double share[PS_NR], char *buf, size_t size);

/* The cause of an off-CPU block in system call nr (x86-64 numbers; -1: not
 * in a system call, as a page fault): PS_LOCK, PS_IO or PS_SLEEP. */
enum proc_state verdict__syscall_cause(long nr);

#endif
