/* cpu.h: the record the CPU sampler (bpf/cpu.bpf.c) hands to userspace
 * (src/probe/cpu_sampler.c), and the drop counters they share. Fixed-width fields
 * only: the same bytes are read on both sides. */
#ifndef SONDE_BPF_CPU_H
#define SONDE_BPF_CPU_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define CPU_MAX_FRAMES 128 /* kernel frames at most, and user frames at most */
#define CPU_COMM_LEN 16

#include "counters.h" /* the counters' tables */
#include "late.h"     /* struct late_stack: a stack's end left to userspace */

/* One sample: who was on the CPU and both stacks, leaf first. The ips array
 * holds nkern kernel frames followed by nuser user slots: native return
 * addresses (the leaf the interrupted pc), Python frames' tokens (top bit
 * set, src/python/names.h) and signal markers (UNW_SIGNAL_FRAME,
 * bpf/unwind_abi.h). Userspace reads it once, into a struct stack whose
 * frames say their kinds (src/probe/stack.h). comm is the
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

/* Indices of the drops and counters maps (per-CPU arrays of __u64):
 * counters.h's tables. */
enum cpu_drop { CPU_DROPS(COUNTER_ENUM) CPU_DROP_MAX };
enum cpu_counter { CPU_COUNTERS(COUNTER_ENUM) CPU_CNT_MAX };

#endif
