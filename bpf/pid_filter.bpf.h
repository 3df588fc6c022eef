/* pid_filter.bpf.h: the pid filter of every BPF object that watches
 * processes (cpu.bpf.c, gpu.bpf.c): the pids watched (target_pids, one map
 * that userspace makes once and hands to each object: src/probe/pid_filter.h),
 * whether the filter is on, and the program that keeps it following a
 * watched process's children. Include once per object. */
#ifndef SONDE_BPF_PID_FILTER_H
#define SONDE_BPF_PID_FILTER_H

/* Set between __open() and __load(). */
const volatile bool filter_pids = false;     /* only pids in target_pids */
const volatile bool follow_children = false; /* add children of targets on fork */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__type(key, __u32);
	__type(value, __u8);
} target_pids SEC(".maps");

/* Whether pid (a tgid) is one to watch. */
static __always_inline bool pid_traced(__u32 pid)
{
	return !filter_pids || bpf_map_lookup_elem(&target_pids, &pid);
}

/* Keeps the pid filter following the watched processes' descendants
 * (`sonde record -- CMD`, `sonde agent -p PID`). */
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

#endif
