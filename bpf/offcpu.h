/* offcpu.h: the record of the off-CPU profiler (bpf/offcpu.bpf.h, part of
 * bpf/cpu.bpf.c) that userspace (src/probe/cpu_sampler.c) aggregates into
 * the "offcpu" profile: a wait of at least the minimum block time, with
 * the blocked thread's kernel and user stacks. Fixed-width fields only: the
 * same bytes are read on both sides. Its drops and counters are in
 * bpf/cpu.h's enums (the sampler's maps). */
#ifndef SONDE_BPF_OFFCPU_H
#define SONDE_BPF_OFFCPU_H

#include "cpu.h"

/* Defaults of the settings userspace may change (docs/cli.md says how the
 * minimum was chosen). */
#define OFFCPU_MIN_NS_DEFAULT 1000000ull /* --offcpu-min: 1 ms */
#define OFFCPU_RATE_DEFAULT 5000	 /* records a second, the whole machine */
#define OFFCPU_BURST_DEFAULT 16		 /* records a CPU may send at once */

/* One wait. s holds who waited and its stacks, leaf first (the kernel's,
 * where it slept, then the user's, where it entered the kernel); s.ts_ns is
 * when the stacks were complete (the wait's end, or the system call's
 * return). */
struct offcpu_sample {
	__u64 blocked_ns; /* off the CPU: from switch-out to switch-in, over nblocks */
	__u64 off_ts_ns;  /* when the (first) block began, bpf_ktime_get_ns() */
	__s32 syscall;	  /* the system call it blocked in; -1: none (a fault...) */
	__u32 nblocks;	  /* blocks of the one wait: a system call that slept twice */
	struct cpu_sample s;
};

_Static_assert(sizeof(struct offcpu_sample) == 24 + sizeof(struct cpu_sample),
	       "offcpu_sample layout");

/* s.flags of an off-CPU record, besides CPU_SF_TRUNCATED. */
#define OFFCPU_SF_LEAF_ONLY                                                                        \
	0x100 /* the user stack is the one address the wait was at:
				   * not in a system call whose return was seen */

#endif
