/* cpu.h: the record the CPU sampler (bpf/cpu.bpf.c) hands to userspace
 * (src/agent/cpu_sampler.c), and the drop counters they share. Fixed-width fields
 * only: the same bytes are read on both sides. */
#ifndef SONDE_BPF_CPU_H
#define SONDE_BPF_CPU_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define CPU_MAX_FRAMES 128 /* kernel frames at most, and user frames at most */
#define CPU_COMM_LEN 16

#include "late.h" /* struct late_stack: a stack's end left to userspace */

/* One sample: who was on the CPU and both stacks, leaf first. The ips array
 * holds nkern kernel frames followed by nuser user frames. comm is the
 * process's name (its thread-group leader's comm), thread the name of the
 * thread that was sampled (its own comm, as prctl(PR_SET_NAME) sets it). */
struct cpu_sample {
	__u64 ts_ns; /* bpf_ktime_get_ns() */
	__u32 pid;   /* thread group id */
	__u32 tid;
	__u32 cpu;
	__s32 nkern; /* frames, or negative errno from bpf_get_stack */
	__s32 nuser;
	__u32 flags;		   /* CPU_SF_* */
	char comm[CPU_COMM_LEN];   /* the process */
	char thread[CPU_COMM_LEN]; /* the thread */
	__u64 ips[2 * CPU_MAX_FRAMES];
};

_Static_assert(sizeof(struct cpu_sample) == 64 + 16 * 128, "cpu_sample layout");

/* Sample flags. */
#define CPU_SF_TRUNCATED 1 /* the user stack goes on past CPU_MAX_FRAMES */
#define CPU_SF_LATE 2	   /* a struct cpu_sample_late: the user stack's end is userspace's */

/* A sample whose user stack's end is userspace's (bpf/late.h), handed over
 * up to the stack pages it kept: offsetof(struct cpu_sample_late, l.stack)
 * + l.nstack bytes. Its nuser frames are those walked. */
struct cpu_sample_late {
	struct cpu_sample s; /* flags has CPU_SF_LATE */
	struct late_stack l;
};

/* Indices of the drops map (a per-CPU array of __u64). */
enum cpu_drop {
	CPU_DROP_RINGBUF, /* ring buffer full: the sample is lost */
	CPU_DROP_KSTACK,  /* kernel stack could not be read (sample kept) */
	CPU_DROP_USTACK, /* no room to keep a user stack's end for userspace: frame pointers there */
	/* The off-CPU profiler's (bpf/offcpu.bpf.h). */
	CPU_DROP_OFFCPU_RATE,	 /* a wait over the rate bound: not recorded */
	CPU_DROP_OFFCPU_RINGBUF, /* a wait lost to a full ring buffer */
	CPU_DROP_OFFCPU_STORAGE, /* no task storage for a thread: its block not timed */
	CPU_DROP_OFFCPU_KSTACK,	 /* a wait's kernel stack unreadable (wait kept) */
	CPU_DROP_MAX,
};

/* Indices of the counters map (per-CPU array of __u64). */
enum cpu_counter {
	CPU_CNT_SAMPLES,  /* samples handed to userspace */
	CPU_CNT_FILTERED, /* samples skipped by the pid filter */
	CPU_CNT_LATE,	  /* samples whose user stack's end was left to userspace */
	/* The off-CPU profiler's. */
	CPU_CNT_OFFCPU_BLOCKS,	   /* blocks timed, short ones included */
	CPU_CNT_OFFCPU_SHORT,	   /* blocks below the minimum: counted, not recorded */
	CPU_CNT_OFFCPU_SHORT_NS,   /* ... and their time */
	CPU_CNT_OFFCPU_WAITS,	   /* waits handed to userspace */
	CPU_CNT_OFFCPU_WAIT_NS,	   /* ... and their time */
	CPU_CNT_OFFCPU_DROPPED_NS, /* the time of the waits dropped (rate, ring buffer) */
	CPU_CNT_OFFCPU_LEAF_ONLY,  /* waits handed over with their user leaf only */
	CPU_CNT_MAX,
};

#endif
