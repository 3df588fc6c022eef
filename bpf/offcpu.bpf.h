/* offcpu.bpf.h: the off-CPU profiler, part of bpf/cpu.bpf.c (it shares the
 * sampler's pid filter, counters and the unwinder's maps). It times how long
 * threads block, and hands each wait of at least offcpu_min_ns to userspace
 * (src/probe/cpu_sampler.c) with the thread's kernel and user stacks.
 *
 * The cost is in the context switch, so what runs there is small. At
 * tp_btf/sched_switch:
 *   - prev: a thread that blocks (not preempted, its state not
 *     TASK_RUNNING) gets the time in its task storage;
 *   - next: a thread that wakes has its time off the CPU taken from it; a
 *     block shorter than the minimum is only counted (no stack work).
 * Only for a block at least the minimum, and within the rate bound (a
 * per-CPU token bucket: a busy machine does not flood userspace; what it
 * drops is counted, with its time): the kernel stack of next, still whole
 * while it sleeps in schedule() (bpf_get_task_stack), and the user
 * registers it entered the kernel with go to its pending wait. Its user
 * stack cannot be read there -- the address space is prev's -- so it is
 * walked when the thread is current again, on its way back to user space,
 * with the CPU sampler's unwinder (bpf/unwind.h) and a scratch of its own (a
 * perf_event sample can interrupt this program and uses unw_scratch):
 *   - Linux 6.18 on: a BPF task work (bpf_task_work_schedule_resume) that
 *     the thread runs as it returns to user space, from a system call or a
 *     fault alike: nothing runs for the threads that did not wait long
 *     (offcpu_switch, offcpu_work_cb);
 *   - before: tp_btf/sys_exit, of the system call it blocked in
 *     (offcpu_switch_sx, offcpu_sys_exit). A per-CPU slot names the thread
 *     with a pending wait that runs on the CPU, so that every other system
 *     call's exit costs one array lookup -- but every system call of the
 *     machine pays that, and the kernel's slow path of a traced system
 *     call. A wait outside a system call (a major page fault) has no return
 *     to catch: it is handed over when the thread next waits long, or
 *     returns from a system call, with its one user address
 *     (OFFCPU_SF_LEAF_ONLY).
 * Userspace loads one pair or the other (the kfunc is a weak extern). A
 * thread that blocks again before it is back in user space (a read that
 * sleeps twice) adds the time to its pending wait. The time is from
 * switch-out to switch-in, as bcc's offcputime measures it -- the wait for a
 * CPU after the wake-up is in it when the scheduler's clock saw it
 * (offcpu_now). Kernel threads and the idle task are left out. */
#ifndef SONDE_BPF_OFFCPU_BPF_H
#define SONDE_BPF_OFFCPU_BPF_H

#include "offcpu.h"

#define OFFCPU_PF_KTHREAD 0x00200000 /* include/linux/sched.h: a kernel thread */
#define OFFCPU_UNW_LOOKUPS 4	     /* mappings a walk may look up (irqs are on there) */
#define OFFCPU_INSN_SYSCALL 0x050f   /* x86-64 `syscall`, as read from memory */

/* Set between __open() and __load(). */
const volatile __u64 offcpu_min_ns = OFFCPU_MIN_NS_DEFAULT;
/* The token bucket: a record costs offcpu_cost_ns of credit, credit grows
 * with time up to offcpu_burst_ns. */
const volatile __u64 offcpu_cost_ns = 1000000000ull / OFFCPU_RATE_DEFAULT;
const volatile __u64 offcpu_burst_ns = OFFCPU_BURST_DEFAULT * (1000000000ull / OFFCPU_RATE_DEFAULT);

/* Linux 6.18 (commit 38aa7003e369): a callback the task runs on its way
 * back to user space. */
extern int bpf_task_work_schedule_resume_impl(struct task_struct *task, struct bpf_task_work *tw,
					      void *map__map, bpf_task_work_callback_t callback,
					      void *aux__prog) __ksym __weak;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096); /* resized by userspace */
} offcpu_events SEC(".maps");

/* Per thread: when it blocked (0: running, or preempted). */
struct offcpu_task {
	__u64 off_ts;
	__u32 pending; /* sys_exit path: it has a wait in offcpu_pend */
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct offcpu_task);
} offcpu_tasks SEC(".maps");

/* A wait whose user stack is still to be taken. */
struct offcpu_pend {
	__u64 blocked_ns, off_ts;
	__u64 ip, sp, bp, nr; /* the user registers it entered the kernel with */
	__s32 nkern;	      /* frames in kstack, or negative errno */
	__u32 nblocks;
	__u64 kstack[CPU_MAX_FRAMES];
};

/* The task-work path's: pending waits with the work that takes their
 * user stacks, a slot per thread id modulo the size (a power of two, set
 * by userspace). A slot is busy only from the wake-up to the return to user
 * space: two threads that want one at once are rare, and counted. */
struct offcpu_work {
	struct bpf_task_work tw;
	__u32 tid;
	__u32 queued; /* the work is scheduled: the thread is not back yet */
	struct offcpu_pend p;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct offcpu_work);
} offcpu_works SEC(".maps");

const volatile __u32 offcpu_works_mask = 1023;

/* The sys_exit path's: per thread, its pending wait. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct offcpu_pend);
} offcpu_pend SEC(".maps");

/* Per CPU: the token bucket, whether the walk's scratch is in use, and
 * (sys_exit path) the thread with a pending wait last switched in here. */
struct offcpu_cpu {
	__u32 pend_tid;
	__u32 pad;
	__u64 busy; /* 64 bits: the atomics of BPF's first instruction set */
	__u64 credit_ns, last_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct offcpu_cpu);
} offcpu_cpus SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unw_state);
} offcpu_scratch SEC(".maps");

static __always_inline void offcpu_add(void *map, __u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(map, &idx);

	if (v)
		*v += n;
}

/* Kernels before 5.14 (commit 2f064a59a11f) call the field state. */
struct task_struct___pre514 {
	long state;
} __attribute__((preserve_access_index));

/* t is the tracepoint's (trusted): a plain load, not a probe-read helper
 * call, on the hot path. */
static __always_inline long offcpu_task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return t->__state;
	return ((struct task_struct___pre514 *)t)->state;
}

/* Now, for the context switch: the clock of the run queue next is on --
 * this CPU's -- sched_clock() as the scheduler last read it: in
 * __schedule() before it picked next, or, where it skips that
 * (RQCF_ACT_SKIP: a wake-up that preempts, or wakes an idle CPU, has just
 * read it), at next's wake-up. Plain loads, where bpf_ktime_get_ns() is a
 * call through the clock source: 80 ns of a 200 ns program on the
 * benchmark's machine, the load's cost per switch halved without it
 * (docs/perf.md). Only differences of it are used; a wait's start is given
 * in bpf_ktime_get_ns()'s time (offcpu_start). The run queue is reached
 * through the task's CFS queue, which points to it with
 * CONFIG_FAIR_GROUP_SCHED; without, the helper. */
static __always_inline __u64 offcpu_now(struct task_struct *next)
{
	struct cfs_rq *cfs;
	struct rq *rq;

	if (!bpf_core_field_exists(next->se.cfs_rq))
		return bpf_ktime_get_ns();
	/* Loads through the tracepoint's task (BTF pointers), no helper. */
	cfs = next->se.cfs_rq;
	rq = cfs ? cfs->rq : NULL;
	return rq ? rq->clock : bpf_ktime_get_ns();
}

/* One token of the CPU's bucket, or false. */
static __always_inline bool offcpu_admit(struct offcpu_cpu *c, __u64 now)
{
	__u64 credit = c->credit_ns + (now - c->last_ns);

	c->last_ns = now;
	if (credit > offcpu_burst_ns)
		credit = offcpu_burst_ns;
	if (credit < offcpu_cost_ns) {
		c->credit_ns = credit;
		return false;
	}
	c->credit_ns = credit - offcpu_cost_ns;
	return true;
}

static __always_inline void offcpu_drop(__u32 why, __u64 ns)
{
	count(&drops, why);
	offcpu_add(&counters, CPU_CNT_OFFCPU_DROPPED_NS, ns);
}

/* A new wait in p: its time, the user registers next entered the kernel
 * with and its kernel stack. */
static __always_inline void offcpu_start(struct offcpu_pend *p, struct task_struct *next,
					 __u64 delta)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(next);
	long n;

	p->blocked_ns = delta;
	p->off_ts = bpf_ktime_get_ns() - delta;
	p->nblocks = 1;
	p->ip = BPF_CORE_READ(regs, ip);
	p->sp = BPF_CORE_READ(regs, sp);
	p->bp = BPF_CORE_READ(regs, bp);
	p->nr = BPF_CORE_READ(regs, orig_ax);
	n = kernel_stacks ? bpf_get_task_stack(next, p->kstack, sizeof(p->kstack), 0) : 0;
	if (n < 0)
		count(&drops, CPU_DROP_OFFCPU_KSTACK);
	p->nkern = n < 0 ? n : n / sizeof(__u64);
}

/* Hands p over as the wait of task: its kernel stack, then its user stack
 * -- walked from the registers it blocked with when walk (task is current
 * on its way back to user space with those registers; leaf: pc is where it
 * stopped, a fault, rather than after a system call), else that one
 * address. */
static __always_inline void offcpu_emit(struct task_struct *task, struct offcpu_pend *p, __s32 nr,
					bool walk, bool leaf)
{
	struct offcpu_sample *r;
	struct offcpu_cpu *c;
	struct unw_state *s;
	__u32 zero = 0, nk, n;

	r = bpf_ringbuf_reserve(&offcpu_events, sizeof(*r), 0);
	if (!r) {
		offcpu_drop(CPU_DROP_OFFCPU_RINGBUF, p->blocked_ns);
		return;
	}
	r->blocked_ns = p->blocked_ns;
	r->off_ts_ns = p->off_ts;
	r->syscall = nr;
	r->nblocks = p->nblocks;
	r->s.ts_ns = bpf_ktime_get_ns();
	r->s.pid = BPF_CORE_READ(task, tgid);
	r->s.tid = BPF_CORE_READ(task, pid);
	r->s.cpu = bpf_get_smp_processor_id();
	r->s.flags = 0;
	BPF_CORE_READ_STR_INTO(&r->s.thread, task, comm);
	if (BPF_CORE_READ_STR_INTO(&r->s.comm, task, group_leader, comm) < 0)
		__builtin_memcpy(r->s.comm, r->s.thread, sizeof(r->s.comm));
	nk = p->nkern > 0 ? p->nkern : 0;
	if (nk > CPU_MAX_FRAMES)
		nk = CPU_MAX_FRAMES;
	r->s.nkern = nk;
	/* All of it: a fixed size is what the verifier takes at once. */
	if (nk && bpf_probe_read_kernel(r->s.ips, sizeof(p->kstack), p->kstack))
		r->s.nkern = nk = 0;
	r->s.nuser = 0;
	if (!user_stacks)
		goto submit;
	/* The scratch is this CPU's while busy: a task work can be
	 * preempted, and another thread's run here meanwhile. */
	c = walk ? bpf_map_lookup_elem(&offcpu_cpus, &zero) : NULL;
	s = c && !__sync_val_compare_and_swap(&c->busy, 0, 1)
		    ? bpf_map_lookup_elem(&offcpu_scratch, &zero)
		    : NULL;
	if (s) {
		n = unw_walk(s, r->s.pid, p->ip, p->sp, p->bp, leaf, OFFCPU_UNW_LOOKUPS, false);
		if (n > CPU_MAX_FRAMES)
			n = CPU_MAX_FRAMES;
		if (s->truncated)
			r->s.flags |= CPU_SF_TRUNCATED;
		/* The compiler knows nk's bound and drops the test; the
		 * verifier must see it. */
		asm volatile("" : "+r"(nk));
		if (n && nk <= CPU_MAX_FRAMES &&
		    !bpf_probe_read_kernel(&r->s.ips[nk], n * sizeof(__u64), s->ips))
			r->s.nuser = n;
	}
	if (c && s)
		c->busy = 0;
	if (!r->s.nuser && p->ip && p->ip < UNW_USER_LIMIT && nk < CPU_MAX_FRAMES) {
		r->s.ips[nk & (CPU_MAX_FRAMES - 1)] = p->ip;
		r->s.nuser = 1;
		r->s.flags |= OFFCPU_SF_LEAF_ONLY;
		count(&counters, CPU_CNT_OFFCPU_LEAF_ONLY);
	}
submit:
	count(&counters, CPU_CNT_OFFCPU_WAITS);
	offcpu_add(&counters, CPU_CNT_OFFCPU_WAIT_NS, p->blocked_ns);
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

/* ---- Linux 6.18 on: a task work takes the user stack ------------------- */

/* Run by the thread that waited, on its way back to user space. */
static int offcpu_work_cb(struct bpf_map *map, void *key, void *value)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	struct offcpu_work *w = value;
	__u16 insn = 0;
	__s32 nr = -1;
	__u64 ip;
	bool same;

	if (!w->queued || w->tid != (__u32)bpf_get_current_pid_tgid())
		return 0;
	/* The registers it entered the kernel with, unless it has been
	 * back in user space since (the work ran late) -- or that system
	 * call's again: a signal (a stop) in it restarts it, pc back on the
	 * syscall instruction. After a system call, pc follows its
	 * instruction; at a fault, pc is the faulting instruction itself. */
	ip = BPF_CORE_READ(regs, ip);
	same = BPF_CORE_READ(regs, sp) == w->p.sp && (ip == w->p.ip || ip + 2 == w->p.ip);
	if (w->p.ip >= 2 && !bpf_probe_read_user(&insn, sizeof(insn), (void *)(w->p.ip - 2)) &&
	    insn == OFFCPU_INSN_SYSCALL)
		nr = (__s32)w->p.nr;
	offcpu_emit(task, &w->p, nr, same, nr < 0);
	w->queued = 0;
	return 0;
}

static __noinline int offcpu_long_tw(struct task_struct *next, __u64 delta, __u64 now)
{
	__u32 tid = next->pid, slot = tid & offcpu_works_mask, zero = 0;
	struct offcpu_work *w = bpf_map_lookup_elem(&offcpu_works, &slot);
	struct offcpu_cpu *c;

	if (!w)
		return 0;
	if (w->queued) {
		/* Slept again before it got back to user space: the same
		 * wait. */
		if (w->tid == tid) {
			w->p.blocked_ns += delta;
			w->p.nblocks++;
		} else {
			offcpu_drop(CPU_DROP_OFFCPU_STORAGE, delta);
		}
		return 0;
	}
	c = bpf_map_lookup_elem(&offcpu_cpus, &zero);
	if (!c || !offcpu_admit(c, now)) {
		offcpu_drop(CPU_DROP_OFFCPU_RATE, delta);
		return 0;
	}
	w->tid = tid;
	offcpu_start(&w->p, next, delta);
	w->queued = 1;
	if (bpf_task_work_schedule_resume_impl(next, &w->tw, &offcpu_works, offcpu_work_cb, NULL)) {
		w->queued = 0;
		offcpu_drop(CPU_DROP_OFFCPU_STORAGE, delta);
	}
	return 0;
}

/* ---- before Linux 6.18: the return of the system call ------------------ */

static __noinline int offcpu_long_sx(struct task_struct *next, struct offcpu_task *t, __u64 delta,
				     __u64 now)
{
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(next);
	struct offcpu_pend *p;
	struct offcpu_cpu *c;
	__u32 zero = 0;

	c = bpf_map_lookup_elem(&offcpu_cpus, &zero);
	p = bpf_task_storage_get(&offcpu_pend, next, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!c || !p) {
		offcpu_drop(CPU_DROP_OFFCPU_STORAGE, delta);
		return 0;
	}
	if (t->pending) {
		if (p->ip == BPF_CORE_READ(regs, ip) && p->sp == BPF_CORE_READ(regs, sp)) {
			/* Slept again before returning to user space. */
			p->blocked_ns += delta;
			p->nblocks++;
			c->pend_tid = next->pid;
			return 0;
		}
		/* The earlier wait was not in a system call (or its return
		 * was missed): hand it over as it is. */
		offcpu_emit(next, p, -1, false, false);
		t->pending = 0;
	}
	if (!offcpu_admit(c, now)) {
		offcpu_drop(CPU_DROP_OFFCPU_RATE, delta);
		return 0;
	}
	offcpu_start(p, next, delta);
	t->pending = 1;
	c->pend_tid = next->pid;
	return 0;
}

/* ---- the context switch ------------------------------------------------ */

static __always_inline int offcpu_switch_body(bool preempt, struct task_struct *prev,
					      struct task_struct *next, bool task_work)
{
	__u64 now = offcpu_now(next), delta;
	struct offcpu_task *t;

	/* prev blocks: a thread of ours that was not preempted. */
	if (!preempt && prev->pid && !(prev->flags & OFFCPU_PF_KTHREAD) &&
	    offcpu_task_state(prev) != 0) {
		__u32 tgid = prev->tgid;

		if (pid_traced(tgid)) {
			t = bpf_task_storage_get(&offcpu_tasks, prev, 0,
						 BPF_LOCAL_STORAGE_GET_F_CREATE);
			if (t)
				t->off_ts = now;
			else
				count(&drops, CPU_DROP_OFFCPU_STORAGE);
		}
	}
	/* next wakes: only a thread that blocked above has storage. */
	if (!next->pid)
		return 0;
	t = bpf_task_storage_get(&offcpu_tasks, next, 0, 0);
	if (!t)
		return 0;
	if (!task_work && t->pending) {
		/* Its system call returns on this CPU. */
		__u32 zero = 0;
		struct offcpu_cpu *c = bpf_map_lookup_elem(&offcpu_cpus, &zero);

		if (c)
			c->pend_tid = next->pid;
	}
	if (!t->off_ts)
		return 0;
	delta = now - t->off_ts;
	t->off_ts = 0;
	count(&counters, CPU_CNT_OFFCPU_BLOCKS);
	if (delta < offcpu_min_ns) {
		count(&counters, CPU_CNT_OFFCPU_SHORT);
		offcpu_add(&counters, CPU_CNT_OFFCPU_SHORT_NS, delta);
		return 0;
	}
	if (task_work)
		return offcpu_long_tw(next, delta, now);
	return offcpu_long_sx(next, t, delta, now);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return offcpu_switch_body(preempt, prev, next, true);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(offcpu_switch_sx, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	return offcpu_switch_body(preempt, prev, next, false);
}

SEC("tp_btf/sys_exit")
int BPF_PROG(offcpu_sys_exit, struct pt_regs *regs, long ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), zero = 0;
	struct offcpu_cpu *c = bpf_map_lookup_elem(&offcpu_cpus, &zero);
	struct task_struct *task;
	struct offcpu_task *t;
	struct offcpu_pend *p;
	bool same;

	if (!c || c->pend_tid != tid || !tid)
		return 0;
	c->pend_tid = 0;
	task = bpf_get_current_task_btf();
	t = bpf_task_storage_get(&offcpu_tasks, task, 0, 0);
	if (!t || !t->pending)
		return 0;
	p = bpf_task_storage_get(&offcpu_pend, task, 0, 0);
	if (!p)
		return 0;
	t->pending = 0;
	/* The return of the system call it blocked in: the registers it
	 * entered with. */
	same = regs->ip == p->ip && regs->sp == p->sp;
	offcpu_emit(task, p, same ? (__s32)p->nr : -1, same, false);
	return 0;
}

#endif
