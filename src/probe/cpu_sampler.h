/* cpu_sampler.h: the CPU sampler -- loads bpf/cpu.bpf.c, opens one sampling perf
 * event per online CPU, attaches the program to each and hands every sample
 * to a callback as userspace drains the ring buffer; with off-CPU profiling
 * on, also every wait of at least a minimum time, with its stacks
 * (bpf/offcpu.bpf.h). Used by `sonde record`, `sonde top` and the agent. */
#ifndef SONDE_PROBE_CPU_SAMPLER_H
#define SONDE_PROBE_CPU_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "offcpu.h" /* bpf/offcpu.h: OFFCPU_*_DEFAULT */
#include "probe/stack.h"

struct pid_filter;
struct cpu_sampler;
struct symbolizer;

/* An off-CPU wait (bpf/offcpu.h) as the callback gets it: it and its
 * stack live until the callback returns. */
struct offcpu_wait {
	const struct stack *stack; /* the thread's stacks where it blocked */
	uint64_t blocked_ns;	   /* off the CPU: from switch-out to switch-in, over nblocks */
	uint64_t off_ts_ns;	   /* when the (first) block began */
	int32_t syscall;	   /* the system call it blocked in; -1: none (a fault...) */
	uint32_t nblocks;	   /* blocks of the one wait: a system call that slept twice */
	bool leaf_only;		   /* the user stack is the one address the wait was at */
};
typedef void (*offcpu_wait_fn)(void *ctx, const struct offcpu_wait *w);

struct cpu_sampler_opts {
	int freq; /* samples per second per CPU; 0: none (off-CPU only) */
	/* Only the processes of this filter (NULL: all), shared with the
	 * other BPF objects: pid_filter.h. */
	const struct pid_filter *pid_filter;
	bool follow_children; /* ... and the processes they fork */
	bool kernel_stacks;
	bool user_stacks;
	bool include_idle;	/* keep samples of the idle task */
	size_t ringbuf_bytes;	/* 0: sized from freq and the CPU count */
	uint64_t unwind_memory; /* bytes of unwind tables; 0: UNWIND_MEMORY_DEFAULT */
	/* The process mappings the kernel reported (borrowed): with it, a
	 * user stack that reaches code whose table is not built yet is
	 * finished in userspace once it is (src/unwind/late.h); without,
	 * such frames are walked by frame pointers. */
	struct symbolizer *sym;
	/* Off-CPU profiling: on when offcpu_fn is set. The pid filter,
	 * kernel_stacks and user_stacks apply to it too. */
	offcpu_wait_fn offcpu_fn;
	void *offcpu_ctx;
	uint64_t offcpu_min_ns; /* the shortest wait recorded; 0: OFFCPU_MIN_NS_DEFAULT */
	uint32_t offcpu_rate;	/* waits a second at most, all CPUs; 0: OFFCPU_RATE_DEFAULT */
	/* Take the user stacks at sys_exit even where the kernel has BPF task
	 * works (Linux 6.18), which it otherwise uses: the older kernels'
	 * way, for the tests and the benchmark. */
	bool offcpu_sys_exit;
};

/* Called for every sample, with its stack (which lives until the callback
 * returns). */
typedef void (*cpu_stack_fn)(void *ctx, const struct stack *s);

/* Loads, opens and attaches. Returns NULL with errno set after printing why. */
struct cpu_sampler *cpu_sampler__open(const struct cpu_sampler_opts *opts, cpu_stack_fn fn,
				      void *ctx);
void cpu_sampler__free(struct cpu_sampler *cs);

/* Drains the ring buffer, calling the callback per sample, then builds the
 * unwind tables the stacks asked for, and hands on the samples whose
 * stacks waited for them. Returns the number of samples or a negative
 * errno. */
int cpu_sampler__poll(struct cpu_sampler *cs);
/* As cpu_sampler__poll, then waits for the tables under way and hands on
 * every sample still waiting, finished as far as the tables allow: the
 * end of a recording. */
int cpu_sampler__flush(struct cpu_sampler *cs);

struct cpu_sampler_stats {
	/* The BPF programs' counts, by bpf/counters.h's CPU_DROPS and
	 * CPU_COUNTERS (the off-CPU ones 0 when it is off). */
	uint64_t drops[CPU_DROP_MAX];
	uint64_t counts[CPU_CNT_MAX];
	uint64_t received; /* seen by userspace */
	/* The sampling program's runs and their time, when the kernel keeps
	 * them (sysctl kernel.bpf_stats_enabled=1; else 0). */
	uint64_t prog_runs, prog_ns;
	int ncpus;
	/* Off-CPU profiling (all 0 when off): what userspace received. */
	uint64_t offcpu_received;	     /* seen by userspace */
	uint64_t offcpu_min_ns, offcpu_rate; /* the settings in force */
	bool offcpu_task_work;		     /* user stacks by task work, else at sys_exit */
};
void cpu_sampler__stats(struct cpu_sampler *cs, struct cpu_sampler_stats *out);
/* The stacks finished in userspace (all 0 without a symbolizer). */
struct unw_late_stats;
void cpu_sampler__late_stats(struct cpu_sampler *cs, struct unw_late_stats *out);
/* The unwinder's tables and counters (src/unwind/unwinder.h). */
struct unwinder_stats;
void cpu_sampler__unwind_stats(struct cpu_sampler *cs, struct unwinder_stats *out);
/* The sampler's unwinder, for the GPU probes to share its tables. */
struct unwinder *cpu_sampler__unwinder(struct cpu_sampler *cs);
/* Builds the unwind table of a file a command is about to map. */
int cpu_sampler__preload(struct cpu_sampler *cs, const char *path);
/* "cpu-clock" or "cycles" ("none" with freq 0). */
const char *cpu_sampler__event(const struct cpu_sampler *cs);

#endif
