// SPDX-License-Identifier: GPL-2.0
/* cpu.bpf.c: the CPU sampler. Runs on every perf_event (cpu-clock or cycles)
 * sample on every CPU and hands pid/tid, the process's and the thread's
 * names with the kernel and user stacks to userspace (src/agent/cpu_sampler.c).
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

char LICENSE[] SEC("license") = "GPL";

/* Set between __open() and __load(). */
const volatile bool filter_pids = false;     /* only pids in target_pids */
const volatile bool follow_children = false; /* add children of targets on fork */
const volatile bool skip_idle = true;	     /* drop samples of the idle task (pid 0) */
const volatile bool user_stacks = true;
const volatile bool kernel_stacks = true;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); /* resized by userspace */
} samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} target_pids SEC(".maps");

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

/* The user stack of the interrupted task into ips[k..], leaf first, from
 * its user registers -- those of the sample when it hit user code, else the
 * ones saved on entry to the kernel. Returns the frames written; 0 for a
 * kernel thread. */
static __always_inline int user_stack(struct bpf_perf_event_data *ctx, struct cpu_sample *smp,
				      __u32 k)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct unw_state *s;
	struct pt_regs regs;
	__u32 zero = 0, n;
	bool leaf = true;

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
	if (!regs.ip || k > CPU_MAX_FRAMES)
		return 0;
	s = bpf_map_lookup_elem(&unw_scratch, &zero);
	if (!s)
		return 0;
	n = unw_walk(s, smp->pid, regs.ip, regs.sp, regs.bp, leaf, 1);
	if (n > CPU_MAX_FRAMES)
		n = CPU_MAX_FRAMES;
	if (s->truncated)
		smp->flags |= CPU_SF_TRUNCATED;
	if (!n || bpf_probe_read_kernel(&smp->ips[k], n * sizeof(__u64), s->ips))
		return 0;
	return n;
}

SEC("perf_event")
int sample_cpu(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 pid = id >> 32, tid = (__u32)id;
	struct task_struct *task;
	struct cpu_sample *s;
	long n;

	if (skip_idle && tid == 0)
		return 0;
	if (filter_pids && !bpf_map_lookup_elem(&target_pids, &pid)) {
		count(&counters, CPU_CNT_FILTERED);
		return 0;
	}

	s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
	if (!s) {
		count(&drops, CPU_DROP_RINGBUF);
		return 0;
	}
	s->ts_ns = bpf_ktime_get_ns();
	s->pid = pid;
	s->tid = tid;
	s->cpu = bpf_get_smp_processor_id();
	s->flags = 0;
	/* The process is named by its thread-group leader; the thread by
	 * its own comm. */
	bpf_get_current_comm(s->thread, sizeof(s->thread));
	task = bpf_get_current_task_btf();
	if (BPF_CORE_READ_STR_INTO(&s->comm, task, group_leader, comm) < 0)
		__builtin_memcpy(s->comm, s->thread, sizeof(s->comm));

	s->nkern = 0;
	/* A sample of user code has no kernel stack: skip the helper. */
	if (kernel_stacks && ctx->regs.ip >= UNW_USER_LIMIT) {
		n = bpf_get_stack(ctx, s->ips, CPU_MAX_FRAMES * sizeof(__u64), 0);
		if (n < 0) {
			count(&drops, CPU_DROP_KSTACK);
			s->nkern = n;
		} else {
			s->nkern = n / sizeof(__u64);
		}
	}
	s->nuser = 0;
	if (user_stacks && s->nkern >= 0 && s->nkern <= CPU_MAX_FRAMES)
		s->nuser = user_stack(ctx, s, s->nkern);
	count(&counters, CPU_CNT_SAMPLES);
	bpf_ringbuf_submit(s, BPF_RB_NO_WAKEUP);
	return 0;
}

/* Keeps the pid filter following `sonde record -- CMD`'s descendants. */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(follow_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ppid, cpid;
	__u8 one = 1;

	if (!follow_children)
		return 0;
	ppid = BPF_CORE_READ(parent, tgid);
	cpid = BPF_CORE_READ(child, tgid);
	if (ppid == cpid || !bpf_map_lookup_elem(&target_pids, &ppid))
		return 0;
	bpf_map_update_elem(&target_pids, &cpid, &one, BPF_ANY);
	return 0;
}

/* The off-CPU profiler: its programs use the pid filter, the counters and
 * the unwinder above. Loaded only when off-CPU profiling is on. */
#include "offcpu.bpf.h"
