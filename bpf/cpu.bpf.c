// SPDX-License-Identifier: GPL-2.0
/* cpu.bpf.c: the CPU sampler. Runs on every perf_event (cpu-clock or cycles)
 * sample on every CPU and hands pid/tid, the process's and the thread's
 * names with the kernel and user stacks to userspace (src/probe/cpu_sampler.c).
 *
 * Why a polled ring buffer rather than in-kernel aggregation in a stack map:
 * a stack map keyed by stack hash drops or merges stacks on collision and
 * loses the time of each sample, while the ring buffer gives every sample
 * with its timestamp (the server's timelines need it) and lets userspace see
 * a new process within one poll interval, early enough to capture its
 * mappings before it can exit. At 99 Hz on a few dozen CPUs it is a few
 * MB/s, which userspace drains every 10 ms. Samples are submitted with
 * BPF_RB_NO_WAKEUP: waking a reader from perf_event context was seen to
 * halve the sampling rate. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "cpu.h"
#include "unwind.h"
#include "unwind_late.h"

char LICENSE[] SEC("license") = "GPL";

#include "pid_filter.bpf.h"

/* Set between __open() and __load(). */
const volatile bool skip_idle = true; /* drop samples of the idle task (pid 0) */
const volatile bool user_stacks = true;
const volatile bool kernel_stacks = true;
/* A user stack that reaches a file the walk can't take now keeps its end
 * for userspace (struct cpu_sample_late) rather than walk it by frame
 * pointers. */
const volatile bool late_stacks = false;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); /* resized by userspace */
} samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CPU_DROP_MAX);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CPU_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count(void *map, __u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(map, &idx);

	if (v)
		(*v)++;
}

/* The unwinder's state (bpf/unwind.h): a perf_event program is not
 * interrupted by another on its CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unw_state);
} unw_scratch SEC(".maps");

/* What a sample gathers before its record is reserved: the record's size
 * depends on how far its user stack was walked. */
struct cpu_scratch {
	__u64 kips[CPU_MAX_FRAMES];
	__s32 nkern;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_scratch);
} cpu_scratch SEC(".maps");

/* Walks the user stack of the interrupted task into s->ips, leaf first,
 * from its user registers -- those of the sample when it hit user code,
 * else the ones saved on entry to the kernel. Returns the frames walked;
 * 0 for a kernel thread. */
static __always_inline __u32 user_stack(struct bpf_perf_event_data *ctx, struct unw_state *s,
					__u32 pid, bool defer)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs regs;
	bool leaf = true;
	__u32 n;

	/* What the scratch says of the last walk on this CPU is not this
	 * sample's until it walks. */
	s->deferred = s->truncated = 0;
	/* Interrupted in user code: its address is in the lower half. */
	if (ctx->regs.ip < UNW_USER_LIMIT) {
		regs.ip = ctx->regs.ip;
		regs.sp = ctx->regs.sp;
		regs.bp = ctx->regs.bp;
	} else {
		if (!task->mm)
			return 0;
		if (bpf_probe_read_kernel(&regs, sizeof(regs), (void *)bpf_task_pt_regs(task)))
			return 0;
		leaf = false; /* after the syscall instruction */
	}
	if (!regs.ip)
		return 0;
	n = unw_walk(s, pid, regs.ip, regs.sp, regs.bp, leaf, 1, defer);
	return n > CPU_MAX_FRAMES ? CPU_MAX_FRAMES : n;
}

/* The record's head and both stacks. */
static __always_inline void fill_sample(struct cpu_sample *smp, struct cpu_scratch *k,
					struct unw_state *s, __u32 nuser, __u64 id)
{
	struct task_struct *task = bpf_get_current_task_btf();
	__u32 nk = k->nkern > 0 ? k->nkern : 0;

	smp->ts_ns = bpf_ktime_get_ns();
	smp->pid = id >> 32;
	smp->tid = (__u32)id;
	smp->cpu = bpf_get_smp_processor_id();
	smp->flags = s && s->truncated ? CPU_SF_TRUNCATED : 0;
	/* The process is named by its thread-group leader; the thread by
	 * its own comm. */
	bpf_get_current_comm(smp->thread, sizeof(smp->thread));
	if (BPF_CORE_READ_STR_INTO(&smp->comm, task, group_leader, comm) < 0)
		__builtin_memcpy(smp->comm, smp->thread, sizeof(smp->comm));
	smp->nkern = k->nkern;
	/* All of it: a fixed size is what the verifier takes at once. */
	if (nk && bpf_probe_read_kernel(smp->ips, sizeof(k->kips), k->kips))
		smp->nkern = nk = 0;
	smp->nuser = 0;
	if (nk > CPU_MAX_FRAMES)
		nk = CPU_MAX_FRAMES;
	/* The compiler knows nk's bound and drops the test; the verifier
	 * must see it. */
	asm volatile("" : "+r"(nk));
	if (s && nuser && nuser <= CPU_MAX_FRAMES && nk <= CPU_MAX_FRAMES &&
	    !bpf_probe_read_kernel(&smp->ips[nk], nuser * sizeof(__u64), s->ips))
		smp->nuser = nuser;
}

/* A late sample's record is made here, a slot a CPU (userspace sets
 * max_entries to the possible CPUs; a perf_event program does not nest on
 * its CPU), and handed over up to the stack pages it kept: most stacks
 * are far shallower than LATE_STACK_BYTES. (Too big for a per-CPU value.) */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cpu_sample_late);
} late_recs SEC(".maps");

/* Hands over a deferred sample, up to the stack it kept. 0, or -1 when
 * the ring buffer has no room for it. */
static __always_inline int submit_late(struct cpu_scratch *k, struct unw_state *s, __u32 nuser,
				       __u64 id)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct cpu_sample_late *lr = bpf_map_lookup_elem(&late_recs, &cpu);
	__u64 size;

	if (!lr)
		return -1;
	fill_sample(&lr->s, k, s, nuser, id);
	lr->s.flags |= CPU_SF_LATE;
	fill_late(&lr->l, s);
	size = offsetof(struct cpu_sample_late, l.stack) + lr->l.nstack;
	if (size > sizeof(*lr))
		return -1;
	return bpf_ringbuf_output(&samples, lr, size, BPF_RB_NO_WAKEUP) ? -1 : 0;
}

SEC("perf_event")
int sample_cpu(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 pid = id >> 32, tid = (__u32)id, zero = 0, nuser = 0;
	struct unw_state *s = NULL;
	struct cpu_scratch *k;
	struct cpu_sample *r;

	if (skip_idle && tid == 0)
		return 0;
	if (!pid_traced(pid)) {
		count(&counters, CPU_CNT_FILTERED);
		return 0;
	}
	k = bpf_map_lookup_elem(&cpu_scratch, &zero);
	if (!k)
		return 0;
	k->nkern = 0;
	/* A sample of user code has no kernel stack: skip the helper. */
	if (kernel_stacks && ctx->regs.ip >= UNW_USER_LIMIT) {
		long n = bpf_get_stack(ctx, k->kips, sizeof(k->kips), 0);

		if (n < 0)
			count(&drops, CPU_DROP_KSTACK);
		k->nkern = n < 0 ? n : n / sizeof(__u64);
	}
	if (user_stacks && k->nkern >= 0) {
		s = bpf_map_lookup_elem(&unw_scratch, &zero);
		if (s)
			nuser = user_stack(ctx, s, pid, late_stacks);
	}

	if (s && s->deferred && late_stacks) {
		if (!submit_late(k, s, nuser, id)) {
			count(&counters, CPU_CNT_LATE);
			count(&counters, CPU_CNT_SAMPLES);
			return 0;
		}
		/* No room for the stack's end: walked again, by frame
		 * pointers where it can't be taken now. */
		count(&drops, CPU_DROP_USTACK);
		nuser = user_stack(ctx, s, pid, false);
	}
	r = bpf_ringbuf_reserve(&samples, sizeof(*r), 0);
	if (!r) {
		count(&drops, CPU_DROP_RINGBUF);
		return 0;
	}
	fill_sample(r, k, s, nuser, id);
	count(&counters, CPU_CNT_SAMPLES);
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
	return 0;
}

/* The off-CPU profiler: its programs use the pid filter, the counters and
 * the unwinder above. Loaded only when off-CPU profiling is on. */
#include "offcpu.bpf.h"
