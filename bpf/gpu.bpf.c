// SPDX-License-Identifier: GPL-2.0
/* gpu.bpf.c: the GPU probes. Uprobes and uretprobes on the CUDA runtime
 * (libcudart, or an executable that links it statically), the CUDA driver
 * (libcuda) and NCCL (libnccl) decode the arguments of kernel launches,
 * allocations, frees, synchronizations, copies and collectives at entry,
 * keep them per (thread, layer) until the call returns, and hand one record
 * per call to userspace (src/probe/gpu_probes.c) through a ring buffer, with
 * the duration, the return code and, for launches, waits and collectives,
 * the caller's user stack. Userspace attaches every program to each symbol
 * it finds, with the symbol's enum gpu_api as the BPF cookie; the programs
 * below are one per argument layout. Two uprobes on PyTorch's libtorch_cpu
 * (at::RecordFunction's constructor and end()) time the scopes of
 * torch.autograd.profiler.record_function -- a DataLoader's __next__ among
 * them -- from entry to entry.
 *
 * The arguments are read by the x86-64 System V convention: integer and
 * pointer arguments in rdi, rsi, rdx, rcx, r8, r9, then on the stack above
 * the return address (argument 7 at sp+8 on entry); a dim3 passed by value
 * (12 bytes) takes two registers (x | y << 32, then z); a struct larger than
 * 16 bytes passed by value (ncclUniqueId, 128 bytes) goes on the stack and
 * takes no register. tests/integration/test_gpu_real_*.py check each layout
 * against the real CUDA 13 and NCCL libraries.
 *
 * Why a polled ring buffer: records are submitted with BPF_RB_NO_WAKEUP and
 * userspace drains the buffer on its own clock (the agent polls every few
 * ms, as it does for CPU samples). Uprobes run in task context, so a wakeup
 * would be safe, but one per launch costs an irq_work and a reader wake-up
 * at up to 100k launches/s, which is most of the per-launch budget. When the
 * buffer is more than wakeup_bytes full the record forces a wakeup, so a
 * reader that sleeps in epoll is still woken before the buffer overflows. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "gpu.h"
#include "cupti/sonde_cupti.h"
#include "unwind.h"
#include "unwind_late.h"

char LICENSE[] SEC("license") = "GPL";

#ifndef __TARGET_ARCH_x86
#error "the GPU probes decode the x86-64 System V calling convention only"
#endif

#define EEXIST 17 /* errno.h is not for BPF programs */
#define SIGSTOP 19

#include "pid_filter.bpf.h"

/* Set between __open() and __load(). */
const volatile bool user_stacks = true;
const volatile __u64 wakeup_bytes = 0; /* force a wakeup above this much data; 0: never */
const volatile __u32 hold_mode = 0;    /* enum gpu_hold (src/probe/gpu_probes.h) */
/* A stack that reaches a file whose unwind table is still being built
 * keeps its end for userspace (struct gpu_rec_late) rather than walk it by
 * frame pointers. */
const volatile bool late_stacks = false;
/* Userspace keeps this ahead of the clock while it polls: a process is only
 * held while someone is there to release it. */
__u64 hold_until_ns = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20); /* resized by userspace */
} events SEC(".maps");

/* A process that loaded code (GPU_EV_LOADED, _NEW_LIB) is told here, apart:
 * another process's flood of calls filling events must not lose it (its
 * library would go unprobed until a scan; it may wait stopped for it). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 256 << 10);
} control SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct gpu_call_key);
	__type(value, struct gpu_call);
} inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 262144);
	__type(key, struct gpu_alloc_key);
	__type(value, struct gpu_alloc);
} allocs SEC(".maps");

/* Device of each thread, from cudaSetDevice / cuCtxSetCurrent / ctx create. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __s32);
} thread_dev SEC(".maps");

/* Device of each context, from cuDevicePrimaryCtxRetain / cuCtxCreate. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, __s32);
} ctx_dev SEC(".maps");

/* Library files userspace has looked at (attached, or holding no GPU
 * function): a process mapping one is not reported again. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, struct gpu_lib_key);
	__type(value, __u8);
} lib_files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct gpu_loader_pos);
} loader_pos SEC(".maps");

/* A link_map's path, read by the loader probe. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, char[GPU_NAME_MAX]);
} name_buf SEC(".maps");

/* Where an entry builds its call before it goes into inflight: struct
 * gpu_call is too big to sit comfortably on the 512-byte BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gpu_call);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GPU_DROP_MAX);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

/* Records lost to a full ring buffer, by the process whose call it was
 * (tgid), for the per-process warning and metric. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} lost_by_pid SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GPU_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count_add(void *map, __u32 idx, __s64 n)
{
	__u64 *v = bpf_map_lookup_elem(map, &idx);

	if (v)
		*v += n;
}

static __always_inline void count(void *map, __u32 idx)
{
	count_add(map, idx, 1);
}

/* Entries into each probed function of each file, by cookie (GPU_COOKIE):
 * what userspace shows per file and function, so that a probe that never
 * fires (a library reached another way) shows itself. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, GPU_MAX_PROBE_COOKIES);
	__type(key, __u64);
	__type(value, __u64);
} probe_calls SEC(".maps");

/* The probe's enum gpu_api (the low half of its cookie), its entry counted. */
static __always_inline __u64 entry_api(struct pt_regs *ctx)
{
	__u64 cookie = bpf_get_attach_cookie(ctx), one = 1;
	__u64 *n = bpf_map_lookup_elem(&probe_calls, &cookie);

	/* The first call inserts; one that raced it on another CPU counts in
	 * the element that one made. */
	if (!n && bpf_map_update_elem(&probe_calls, &cookie, &one, BPF_NOEXIST))
		n = bpf_map_lookup_elem(&probe_calls, &cookie);
	if (n)
		*n += 1;
	return GPU_COOKIE_API(cookie);
}

/* Argument n (1-based) passed in a register. */
static __always_inline __u64 reg_arg(struct pt_regs *ctx, int n)
{
	switch (n) {
	case 1:
		return ctx->di;
	case 2:
		return ctx->si;
	case 3:
		return ctx->dx;
	case 4:
		return ctx->cx;
	case 5:
		return ctx->r8;
	default:
		return ctx->r9;
	}
}

/* Reads `size` bytes of user memory; a failure counts as a drop, flags the
 * record and leaves the destination zeroed. */
static __always_inline void read_user(void *dst, __u32 size, __u64 addr, __u32 *flags)
{
	if (bpf_probe_read_user(dst, size, (const void *)addr)) {
		__builtin_memset(dst, 0, size);
		count(&drops, GPU_DROP_READ);
		*flags |= GPU_RF_READ_FAILED;
	}
}

/* Reads `size` bytes of stack arguments starting at argument n (n > 6). At
 * entry the return address is at sp, argument 7 at sp+8. */
static __always_inline void stack_args(struct pt_regs *ctx, int n, void *dst, __u32 size,
				       __u32 *flags)
{
	read_user(dst, size, ctx->sp + 8 * (n - 6), flags);
}

static __always_inline __u64 read_u64(__u64 addr, __u32 *flags)
{
	__u64 v = 0;

	if (addr)
		read_user(&v, sizeof(v), addr, flags);
	return v;
}

static __always_inline bool is_name_lookup(__u16 api)
{
	return api == GPU_API_cuModuleGetFunction || api == GPU_API_cuLibraryGetKernel ||
	       api == GPU_API_cudaLibraryGetKernel;
}

static __always_inline bool in_runtime(__u32 tid)
{
	struct gpu_call_key k = {.tid = tid, .layer = GPU_LAYER_RT};

	return bpf_map_lookup_elem(&inflight, &k) != NULL;
}

/* Starts a call: returns the zeroed scratch call to fill, or NULL when the
 * call is not traced (pid filter) or, with dedup, is a driver call made
 * inside a runtime call of the same thread. */
static __always_inline struct gpu_call *enter(struct pt_regs *ctx, __u32 *tid, bool dedup)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 api = entry_api(ctx);
	struct gpu_call *c;
	__u32 zero = 0;

	if (api == GPU_API_NONE || api >= GPU_API_MAX)
		return NULL;
	if (!pid_traced(id >> 32)) {
		count(&counters, GPU_CNT_FILTERED);
		return NULL;
	}
	*tid = (__u32)id;
	if (dedup && GPU_API_LAYER(api) == GPU_LAYER_DRV && in_runtime(*tid)) {
		count(&counters, GPU_CNT_DEDUP);
		return NULL;
	}
	c = bpf_map_lookup_elem(&scratch, &zero);
	if (!c)
		return NULL;
	__builtin_memset(c, 0, sizeof(*c));
	c->api = api;
	c->device = -1;
	c->ts_ns = bpf_ktime_get_ns();
	return c;
}

/* Keeps the call until its return. Returns false when it is not tracked:
 * part of an enclosing call of the same layer, or no room. */
static __always_inline bool save(__u32 tid, struct gpu_call *c)
{
	struct gpu_call_key k = {.tid = tid, .layer = GPU_API_LAYER(c->api)};
	struct gpu_call *outer = bpf_map_lookup_elem(&inflight, &k);
	long err;

	if (outer) {
		if (c->ts_ns - outer->ts_ns < GPU_NEST_WINDOW_NS) {
			outer->depth++;
			count(&counters, GPU_CNT_NESTED);
			return false;
		}
		/* An unfinished call that left without returning (longjmp,
		 * or attached mid-call): the new one replaces it. */
		count(&counters, GPU_CNT_OVERWRITE);
		err = bpf_map_update_elem(&inflight, &k, c, BPF_EXIST);
	} else {
		err = bpf_map_update_elem(&inflight, &k, c, BPF_NOEXIST);
		if (!err)
			count(&counters, GPU_CNT_INFLIGHT_LIVE);
	}
	if (err) {
		count(&drops, GPU_DROP_INFLIGHT);
		return false;
	}
	return true;
}

/* Finds the call a return belongs to. NULL when there is none: not traced,
 * a driver call deduplicated at entry, or an entry we did not see. */
static __always_inline struct gpu_call *leave(struct pt_regs *ctx, struct gpu_call_key *k,
					      __u32 *pid)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 api = GPU_COOKIE_API(bpf_get_attach_cookie(ctx));
	struct gpu_call *c;

	if (api == GPU_API_NONE || api >= GPU_API_MAX)
		return NULL;
	*pid = id >> 32;
	k->tid = (__u32)id;
	k->layer = GPU_API_LAYER(api);
	c = bpf_map_lookup_elem(&inflight, k);
	if (c && c->depth) {
		/* The return of a nested call; the enclosing one reports. */
		c->depth--;
		return NULL;
	}
	if (c && c->api == api)
		return c;
	if (pid_traced(*pid) && !(k->layer == GPU_LAYER_DRV && in_runtime(k->tid)))
		count(&counters, GPU_CNT_NO_ENTRY);
	return NULL;
}

/* Forgets the call; the caller no longer reads it. */
static __always_inline void done(struct gpu_call_key *k)
{
	if (!bpf_map_delete_elem(&inflight, k))
		count_add(&counters, GPU_CNT_INFLIGHT_LIVE, -1);
}

static __always_inline void *reserve(__u64 size)
{
	void *r = bpf_ringbuf_reserve(&events, size, 0);
	__u32 tgid;
	__u64 one = 1, *n;

	if (r)
		return r;
	count(&drops, GPU_DROP_RINGBUF);
	tgid = bpf_get_current_pid_tgid() >> 32;
	n = bpf_map_lookup_elem(&lost_by_pid, &tgid);
	if (n)
		__sync_fetch_and_add(n, 1);
	else if (bpf_map_update_elem(&lost_by_pid, &tgid, &one, BPF_NOEXIST) == -EEXIST)
		if ((n = bpf_map_lookup_elem(&lost_by_pid, &tgid)))
			__sync_fetch_and_add(n, 1);
	return NULL;
}

/* A record of the control ring; its loss counted as the others'. */
static __always_inline struct gpu_rec *reserve_control(void)
{
	struct gpu_rec *r = bpf_ringbuf_reserve(&control, sizeof(*r), 0);

	if (!r)
		count(&drops, GPU_DROP_CONTROL);
	return r;
}

static __always_inline __u64 wakeup_flags(void)
{
	if (wakeup_bytes && bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes)
		return BPF_RB_FORCE_WAKEUP;
	return BPF_RB_NO_WAKEUP;
}

static __always_inline void submit(void *r)
{
	count(&counters, GPU_CNT_EVENTS);
	bpf_ringbuf_submit(r, wakeup_flags());
}

/* Fills a record's header and arguments from the call (NULL: none). */
static __always_inline void rec_init(struct gpu_rec *r, __u16 type, const struct gpu_call *c,
				     __u32 pid, __u32 tid, __s32 ret)
{
	__u64 now = bpf_ktime_get_ns();

	r->dur_ns = 0;
	if (c) {
		if (type == GPU_EV_SYNC_BEGIN || type == GPU_EV_NCCL_BEGIN) {
			r->ts_ns = c->ts_ns;
		} else {
			r->ts_ns = now;
			r->dur_ns = now - c->ts_ns;
		}
		r->api = c->api;
		r->flags = c->flags;
		r->device = c->device;
		r->args = c->args;
	} else {
		r->ts_ns = now;
		r->api = GPU_API_NONE;
		r->flags = 0;
		r->device = -1;
		__builtin_memset(&r->args, 0, sizeof(r->args));
	}
	r->pid = pid;
	r->tid = tid;
	r->type = type;
	r->ret = ret;
	r->nframes = 0;
	r->pad = 0;
}

static __always_inline __s32 thread_device(__u32 tid, __u32 *flags)
{
	__s32 *d = bpf_map_lookup_elem(&thread_dev, &tid);

	if (d)
		return *d;
	/* The runtime's default: device 0 until the thread picks another. */
	*flags |= GPU_RF_DEVICE_GUESSED;
	return 0;
}

/* The unwinder's state (bpf/unwind.h), one per thread: a uprobe program
 * can be preempted, and another thread's on the same CPU would overwrite a
 * per-CPU state under it. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct unw_state);
} unw_scratch SEC(".maps");

/* A late record is made here, one a thread: a uprobe program can be
 * preempted, and another thread's on the same CPU would overwrite a per-CPU
 * slot under it. Made at a thread's first late stack, freed with it. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct gpu_rec_late);
} late_recs SEC(".maps");

/* Hands s over with the end of its stack where the walk u stopped, in a
 * record of its own, and discards s. false when there is no room for it
 * (s is then the caller's still). */
static __always_inline bool submit_late(struct gpu_rec_stack *s, struct unw_state *u)
{
	struct gpu_rec_late *lr = bpf_task_storage_get(&late_recs, bpf_get_current_task_btf(), NULL,
						       BPF_LOCAL_STORAGE_GET_F_CREATE);
	__u64 size;

	if (!lr || bpf_probe_read_kernel(&lr->s, sizeof(lr->s), s))
		return false;
	lr->s.r.flags |= GPU_RF_LATE;
	fill_late(&lr->l, u);
	size = offsetof(struct gpu_rec_late, l.stack) + lr->l.nstack;
	if (size > sizeof(*lr) || bpf_ringbuf_output(&events, lr, size, wakeup_flags()))
		return false;
	bpf_ringbuf_discard(s, BPF_RB_NO_WAKEUP);
	count(&counters, GPU_CNT_EVENTS);
	count(&counters, GPU_CNT_LATE);
	return true;
}

/* The user stack at a uretprobe, leaf first: regs->ip is the return
 * address into the caller (the kernel puts it back in place of the
 * uretprobe trampoline), rsp the caller's after the return, and rbp as the
 * returning function left it (restored if it saved it); the unwinder walks
 * on from there as from any return address. At a uprobe (entry: true),
 * regs->ip is the function's first instruction, where the thread is. With
 * late_stacks, a stack that reaches a file whose table is not built yet is
 * handed over with its end for userspace, s with it (submit_late): true
 * then, and s is gone. */
static __always_inline bool walk_stack(struct pt_regs *ctx, struct gpu_rec_stack *s, __u32 pid,
				       bool entry)
{
	struct unw_state *u;
	bool defer = late_stacks;
	__u32 n;

	s->ips[0] = ctx->ip;
	s->r.nframes = 1;
	u = bpf_task_storage_get(&unw_scratch, bpf_get_current_task_btf(), NULL,
				 BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!u) {
		/* No room for the thread's walk: the call's address alone. */
		count(&drops, GPU_DROP_STACK);
		return false;
	}
again:
	n = unw_walk(u, pid, ctx->ip, ctx->sp, ctx->bp, entry, UNW_MM_MAPS, defer);
	if (n > GPU_MAX_FRAMES)
		n = GPU_MAX_FRAMES;
	if (u->truncated)
		s->r.flags |= GPU_RF_TRUNCATED;
	if (n && !bpf_probe_read_kernel(s->ips, n * sizeof(__u64), u->ips))
		s->r.nframes = n;
	else if (n)
		count(&drops, GPU_DROP_STACK);
	if (defer && u->deferred) {
		if (submit_late(s, u))
			return true;
		/* No room for the stack's end: walked again, by frame
		 * pointers where a table is missing. */
		count(&drops, GPU_DROP_LATE);
		defer = false;
		goto again;
	}
	return false;
}

/* Who calls: the calling thread's name and its process's (the thread-group
 * leader's; the thread's when that can't be read). */
static __always_inline void set_names(struct gpu_rec_stack *s)
{
	struct task_struct *task = bpf_get_current_task_btf();

	bpf_get_current_comm(s->thread, sizeof(s->thread));
	if (BPF_CORE_READ_STR_INTO(&s->comm, task, group_leader, comm) < 0)
		__builtin_memcpy(s->comm, s->thread, sizeof(s->comm));
}

/* false, or true when s was handed over with its stack (walk_stack). */
static __always_inline bool user_stack(struct pt_regs *ctx, struct gpu_rec_stack *s, __u32 pid)
{
	return user_stacks && walk_stack(ctx, s, pid, false);
}

/* Emits the record of a returning call with the caller's stack. */
static __always_inline void emit_stack_rec(struct pt_regs *ctx, struct gpu_call_key *k,
					   struct gpu_call *c, __u32 pid, __u16 type,
					   bool with_device)
{
	struct gpu_rec_stack *s = reserve(sizeof(*s));

	if (!s) {
		done(k);
		return;
	}
	rec_init(&s->r, type, c, pid, k->tid, (__s32)PT_REGS_RC(ctx));
	set_names(s);
	if (with_device && s->r.device < 0)
		s->r.device = thread_device(k->tid, &s->r.flags);
	done(k);
	if (!user_stack(ctx, s, pid))
		submit(s);
}

/* Emits a record without stack for a returning call. */
static __always_inline struct gpu_rec *rec_reserve_ret(struct pt_regs *ctx, struct gpu_call_key *k,
						       struct gpu_call *c, __u32 pid, __u16 type)
{
	struct gpu_rec *r = reserve(sizeof(*r));

	if (!r)
		return NULL;
	rec_init(r, type, c, pid, k->tid, (__s32)PT_REGS_RC(ctx));
	return r;
}

/* Emits the *_BEGIN record of a call just entered. */
static __always_inline void emit_begin(struct gpu_call *c, __u32 tid, __u16 type)
{
	struct gpu_rec *r = reserve(sizeof(*r));

	if (!r)
		return;
	rec_init(r, type, c, bpf_get_current_pid_tgid() >> 32, tid, 0);
	if (r->device < 0)
		r->device = thread_device(tid, &r->flags);
	submit(r);
}

/* Emits the *_BEGIN record of a call just entered with the caller's stack:
 * what a thread blocked in it waits on, named while it waits. */
static __always_inline void emit_begin_stack(struct pt_regs *ctx, struct gpu_call *c, __u32 tid,
					     __u16 type)
{
	struct gpu_rec_stack *s = reserve(sizeof(*s));
	__u32 pid = bpf_get_current_pid_tgid() >> 32;

	if (!s)
		return;
	rec_init(&s->r, type, c, pid, tid, 0);
	if (s->r.device < 0)
		s->r.device = thread_device(tid, &s->r.flags);
	set_names(s);
	s->r.nframes = 0;
	if (!user_stacks || !walk_stack(ctx, s, pid, true))
		submit(s);
}

/* ---- launches ---------------------------------------------------------- */

/* cudaLaunchKernel(const void *func, dim3 grid, dim3 block, void **args,
 *                  size_t sharedMem, cudaStream_t stream), _ptsz, and
 * __cudaLaunchKernel(_ptsz) (same arguments, func a cudaKernel_t). */
SEC("uprobe")
int rt_launch(struct pt_regs *ctx)
{
	struct gpu_call *c;
	__u64 st[2];
	__u32 tid;

	c = enter(ctx, &tid, true);
	if (!c)
		return 0;
	c->args.launch.func = reg_arg(ctx, 1);
	c->args.launch.grid[0] = (__u32)reg_arg(ctx, 2);
	c->args.launch.grid[1] = reg_arg(ctx, 2) >> 32;
	c->args.launch.grid[2] = (__u32)reg_arg(ctx, 3);
	c->args.launch.block[0] = (__u32)reg_arg(ctx, 4);
	c->args.launch.block[1] = reg_arg(ctx, 4) >> 32;
	c->args.launch.block[2] = (__u32)reg_arg(ctx, 5);
	stack_args(ctx, 7, st, sizeof(st), &c->flags);
	c->args.launch.shmem = st[0];
	c->args.launch.stream = st[1];
	save(tid, c);
	return 0;
}

/* The first 40 bytes of cudaLaunchConfig_t and CUlaunchConfig. */
struct launch_config {
	__u32 grid[3];
	__u32 block[3];
	__u64 smem; /* unsigned int in the driver's struct, then padding */
	__u64 stream;
};

_Static_assert(__builtin_offsetof(struct launch_config, smem) == GPU_LAUNCH_CONFIG_SMEM,
	       "launch_config.smem");
_Static_assert(__builtin_offsetof(struct launch_config, stream) == GPU_LAUNCH_CONFIG_STREAM,
	       "launch_config.stream");

static __always_inline void launch_from_config(struct gpu_call *c, __u64 config, bool driver)
{
	struct launch_config lc;

	read_user(&lc, sizeof(lc), config, &c->flags);
	c->args.launch.grid[0] = lc.grid[0];
	c->args.launch.grid[1] = lc.grid[1];
	c->args.launch.grid[2] = lc.grid[2];
	c->args.launch.block[0] = lc.block[0];
	c->args.launch.block[1] = lc.block[1];
	c->args.launch.block[2] = lc.block[2];
	c->args.launch.shmem = driver ? (__u32)lc.smem : lc.smem;
	c->args.launch.stream = lc.stream;
}

/* cudaLaunchKernelExC(const cudaLaunchConfig_t *config, const void *func,
 *                     void **args), and _ptsz. */
SEC("uprobe")
int rt_launch_ex(struct pt_regs *ctx)
{
	struct gpu_call *c;
	__u32 tid;

	c = enter(ctx, &tid, true);
	if (!c)
		return 0;
	c->args.launch.func = reg_arg(ctx, 2);
	launch_from_config(c, reg_arg(ctx, 1), false);
	save(tid, c);
	return 0;
}

/* cuLaunchKernel(CUfunction f, unsigned gridX, gridY, gridZ, blockX, blockY,
 *                blockZ, unsigned sharedMem, CUstream stream, void **params,
 *                void **extra), and _ptsz. */
SEC("uprobe")
int drv_launch(struct pt_regs *ctx)
{
	struct gpu_call *c;
	__u64 st[3];
	__u32 tid;

	c = enter(ctx, &tid, true);
	if (!c)
		return 0;
	c->args.launch.func = reg_arg(ctx, 1);
	c->args.launch.grid[0] = reg_arg(ctx, 2);
	c->args.launch.grid[1] = reg_arg(ctx, 3);
	c->args.launch.grid[2] = reg_arg(ctx, 4);
	c->args.launch.block[0] = reg_arg(ctx, 5);
	c->args.launch.block[1] = reg_arg(ctx, 6);
	stack_args(ctx, 7, st, sizeof(st), &c->flags);
	c->args.launch.block[2] = (__u32)st[0];
	c->args.launch.shmem = (__u32)st[1];
	c->args.launch.stream = st[2];
	save(tid, c);
	return 0;
}

/* cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, ...), _ptsz. */
SEC("uprobe")
int drv_launch_ex(struct pt_regs *ctx)
{
	struct gpu_call *c;
	__u32 tid;

	c = enter(ctx, &tid, true);
	if (!c)
		return 0;
	c->args.launch.func = reg_arg(ctx, 2);
	launch_from_config(c, reg_arg(ctx, 1), true);
	save(tid, c);
	return 0;
}

/* cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream), cuGraphLaunch
 * and their _ptsz variants. */
SEC("uprobe")
int graph_launch(struct pt_regs *ctx)
{
	struct gpu_call *c;
	__u32 tid;

	c = enter(ctx, &tid, true);
	if (!c)
		return 0;
	c->args.launch.func = reg_arg(ctx, 1);
	c->args.launch.stream = reg_arg(ctx, 2);
	save(tid, c);
	return 0;
}

SEC("uretprobe")
int launch_ret(struct pt_regs *ctx)
{
	struct gpu_call_key k;
	struct gpu_call *c;
	__u32 pid;

	c = leave(ctx, &k, &pid);
	if (c)
		emit_stack_rec(ctx, &k, c, pid, GPU_EV_LAUNCH, true);
	return 0;
}

/* ---- kernel names ------------------------------------------------------ */

/* __cudaGetKernel / cudaGetKernel(cudaKernel_t *out, const void *stub) and
 * cuKernelGetFunction(CUfunction *out, CUkernel kernel) -- a stub record, the
 * second argument in .stub; cuModuleGetFunction(CUfunction *out, CUmodule mod,
 * const char *name), cuLibraryGetKernel and cudaLibraryGetKernel (same
 * shape) -- a name record. */
SEC("uprobe")
int kernel_lookup(struct pt_regs *ctx)
{
	struct gpu_call *c;
	__u32 tid;

	c = enter(ctx, &tid, false);
	if (!c)
		return 0;
	c->args.kernel.out = reg_arg(ctx, 1);
	c->args.kernel.stub = reg_arg(ctx, 2);
	if (is_name_lookup(c->api))
		c->args.kernel.name = reg_arg(ctx, 3);
	save(tid, c);
	return 0;
}

SEC("uretprobe")
int kernel_lookup_ret(struct pt_regs *ctx)
{
	struct gpu_call_key k;
	struct gpu_rec_name *n;
	struct gpu_call *c;
	struct gpu_rec *r;
	__u32 pid;

	c = leave(ctx, &k, &pid);
	if (!c)
		return 0;
	if (!is_name_lookup(c->api)) {
		r = rec_reserve_ret(ctx, &k, c, pid, GPU_EV_KERNEL_STUB);
		if (r) {
			r->args.kernel.handle = read_u64(r->args.kernel.out, &r->flags);
			submit(r);
		}
		done(&k);
		return 0;
	}
	n = reserve(sizeof(*n));
	if (!n) {
		done(&k);
		return 0;
	}
	rec_init(&n->r, GPU_EV_KERNEL_NAME, c, pid, k.tid, (__s32)PT_REGS_RC(ctx));
	done(&k);
	n->r.args.kernel.handle = read_u64(n->r.args.kernel.out, &n->r.flags);
	if (bpf_probe_read_user_str(n->name, sizeof(n->name), (const void *)n->r.args.kernel.name) <
	    0) {
		n->name[0] = 0;
		count(&drops, GPU_DROP_READ);
		n->r.flags |= GPU_RF_READ_FAILED;
	}
	submit(n);
	return 0;
}

/* ---- graphs ------------------------------------------------------------ */

/* cudaStreamBeginCapture(stream, mode) and cuStreamBeginCapture_v2, _ptsz;
 * cudaStreamEndCapture(stream, cudaGraph_t *out) and cuStreamEndCapture,
 * _ptsz; cudaGraphInstantiate(cudaGraphExec_t *out, graph, ...),
 * cudaGraphInstantiateWithFlags, cuGraphInstantiateWithFlags and
 * cuGraphInstantiate_v2: what userspace needs to name the kernels a graph
 * launch runs (those launched into the stream while it was captured). */
SEC("uprobe")
int graph_op(struct pt_regs *ctx)
{
	struct gpu_call *c;
	__u32 tid;

	c = enter(ctx, &tid, true);
	if (!c)
		return 0;
	c->args.graph.stream = reg_arg(ctx, 1);
	c->args.graph.out = reg_arg(ctx, 2);
	save(tid, c);
	return 0;
}

/* The streams being captured into a graph, each to the stream its capture
 * began on (itself, or the one whose capture it joined), and the events
 * recorded in them, to the same: a stream that waits on such an event joins
 * that capture, as CUDA has it (PyTorch's side streams in a CUDA graph).
 * Kept here so that only joins are told: the event calls outside a
 * capture, most of them, cost a lookup. An entry of a capture that ended is
 * dropped when next met. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct gpu_capture_key);
	__type(value, __u64);
} capturing SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct gpu_capture_key);
	__type(value, __u64);
} capture_events SEC(".maps");

/* The capture map's origin for k, if that capture is still under way
 * (else the stale entry is dropped). */
static __always_inline __u64 capture_origin(void *map, struct gpu_capture_key *k)
{
	struct gpu_capture_key ok = {.pid = k->pid};
	__u64 *origin = bpf_map_lookup_elem(map, k), o;

	if (!origin)
		return 0;
	o = *origin;
	ok.handle = o;
	origin = bpf_map_lookup_elem(&capturing, &ok);
	if (origin && *origin == o)
		return o;
	bpf_map_delete_elem(map, k);
	return 0;
}

/* cudaEventRecord(event, stream) (and WithFlags, _ptsz), cuEventRecord
 * (same): an event recorded in a stream being captured is one of its
 * capture's. Entry only. */
SEC("uprobe")
int event_record(struct pt_regs *ctx)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	struct gpu_capture_key sk = {.pid = pid, .handle = reg_arg(ctx, 2)};
	struct gpu_capture_key ek = {.pid = pid, .handle = reg_arg(ctx, 1)};
	__u64 origin, *old;

	entry_api(ctx);
	if (!pid_traced(pid))
		return 0;
	origin = capture_origin(&capturing, &sk);
	if (!origin)
		return 0;
	old = bpf_map_lookup_elem(&capture_events, &ek);
	if (!old || *old != origin)
		bpf_map_update_elem(&capture_events, &ek, &origin, BPF_ANY);
	return 0;
}

/* cudaStreamWaitEvent(stream, event, flags) (_ptsz), cuStreamWaitEvent
 * (same): a stream that waits on an event of a capture joins the capture;
 * userspace is told (GPU_EV_GRAPH), for the kernels launched into it are the
 * graph's. Entry only. */
SEC("uprobe")
int stream_wait(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), api = entry_api(ctx), origin, *old;
	__u32 pid = id >> 32;
	struct gpu_capture_key sk = {.pid = pid, .handle = reg_arg(ctx, 1)};
	struct gpu_capture_key ek = {.pid = pid, .handle = reg_arg(ctx, 2)};
	struct gpu_rec *r;

	if (!pid_traced(pid))
		return 0;
	origin = capture_origin(&capture_events, &ek);
	if (!origin)
		return 0;
	old = bpf_map_lookup_elem(&capturing, &sk);
	if (old && *old == origin)
		return 0; /* already in it (the origin, rejoined) */
	bpf_map_update_elem(&capturing, &sk, &origin, BPF_ANY);
	r = reserve(sizeof(*r));
	if (!r)
		return 0;
	rec_init(r, GPU_EV_GRAPH, NULL, pid, (__u32)id, 0);
	r->api = api;
	r->args.graph.stream = sk.handle;
	r->args.graph.origin = origin;
	submit(r);
	return 0;
}

/* cudaGraphAddKernelNode(cudaGraphNode_t *out, graph, deps, ndeps, const
 * cudaKernelNodeParams *p) and cuGraphAddKernelNode(_v2) (CUDA_KERNEL_NODE_PARAMS):
 * the node's kernel, read at entry (p is the caller's, and const), for the
 * name of what a launch of the graph runs. graph_op_ret reports it. */
SEC("uprobe")
int graph_add(struct pt_regs *ctx)
{
	struct gpu_call *c;
	__u64 p;
	__u32 tid;

	c = enter(ctx, &tid, true);
	if (!c)
		return 0;
	c->args.graph.graph = reg_arg(ctx, 2);
	p = reg_arg(ctx, 5);
	c->args.graph.func = read_u64(p ? p + GPU_KERNEL_NODE_FUNC : 0, &c->flags);
	if (!c->args.graph.func && p && c->api == GPU_API_cuGraphAddKernelNode_v2)
		c->args.graph.func = read_u64(p + GPU_KERNEL_NODE_KERN, &c->flags);
	save(tid, c);
	return 0;
}

static __always_inline bool is_instantiate(__u16 api)
{
	return api == GPU_API_cudaGraphInstantiate ||
	       api == GPU_API_cudaGraphInstantiateWithFlags ||
	       api == GPU_API_cuGraphInstantiateWithFlags || api == GPU_API_cuGraphInstantiate_v2;
}

static __always_inline bool is_begin_capture(__u16 api)
{
	return api == GPU_API_cudaStreamBeginCapture ||
	       api == GPU_API_cudaStreamBeginCapture_ptsz ||
	       api == GPU_API_cuStreamBeginCapture_v2 ||
	       api == GPU_API_cuStreamBeginCapture_v2_ptsz;
}

static __always_inline bool is_end_capture(__u16 api)
{
	return api == GPU_API_cudaStreamEndCapture || api == GPU_API_cudaStreamEndCapture_ptsz ||
	       api == GPU_API_cuStreamEndCapture || api == GPU_API_cuStreamEndCapture_ptsz;
}

/* A capture began (its stream captures into it) or ended. */
static __always_inline void track_capture(struct gpu_call *c, __u32 pid)
{
	struct gpu_capture_key k = {.pid = pid, .handle = c->args.graph.stream};
	__u64 stream = c->args.graph.stream;

	if (is_begin_capture(c->api))
		bpf_map_update_elem(&capturing, &k, &stream, BPF_ANY);
	else if (is_end_capture(c->api))
		bpf_map_delete_elem(&capturing, &k);
}

SEC("uretprobe")
int graph_op_ret(struct pt_regs *ctx)
{
	struct gpu_call_key k;
	struct gpu_call *c;
	struct gpu_rec *r;
	__u64 a1, a2;
	__u32 pid;

	c = leave(ctx, &k, &pid);
	if (!c)
		return 0;
	if (!PT_REGS_RC(ctx))
		track_capture(c, pid);
	r = rec_reserve_ret(ctx, &k, c, pid, GPU_EV_GRAPH);
	if (r) {
		a1 = r->args.graph.stream;
		a2 = r->args.graph.out;
		r->args.graph.out = 0;
		if (is_instantiate(r->api)) {
			/* (exec *out, graph): arguments 1 and 2. */
			r->args.graph.stream = 0;
			r->args.graph.exec = read_u64(a1, &r->flags);
			r->args.graph.graph = a2;
		} else if (is_end_capture(r->api)) {
			r->args.graph.graph = read_u64(a2, &r->flags);
		}
		submit(r);
	}
	done(&k);
	return 0;
}

/* ---- Sonde's CUPTI library (src/cupti/sonde_cupti.c) -------------------- */

static __always_inline bool is_launch_api(__u16 api)
{
	return (api >= GPU_API_cudaLaunchKernel && api <= GPU_API_cudaGraphLaunch_ptsz) ||
	       (api >= GPU_API_cuLaunchKernel && api <= GPU_API_cuGraphLaunch_ptsz);
}

/* The launch call the probes follow that thread tid is in: the runtime's
 * (it reports; the driver's inside it does not), else the driver's. */
static __always_inline struct gpu_call *launch_in_flight(__u32 tid)
{
	struct gpu_call_key k = {.tid = tid, .layer = GPU_LAYER_RT};
	struct gpu_call *c = bpf_map_lookup_elem(&inflight, &k);

	if (c && is_launch_api(c->api))
		return c;
	k.layer = GPU_LAYER_DRV;
	c = bpf_map_lookup_elem(&inflight, &k);
	return c && is_launch_api(c->api) ? c : NULL;
}

/* sonde_cupti_launch(correlation): a kernel launch's entry, on the launching
 * thread; its stack is the kernel's. Inside a launch the probes follow, the
 * id goes into that launch's record, whose stack serves both profiles (one
 * walk and one record a launch); else a record of its own with the stack. */
SEC("uprobe")
int cupti_launch(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), api = entry_api(ctx);
	__u32 pid = id >> 32;
	struct gpu_rec_stack *s;
	struct gpu_call *c;

	if (!pid_traced(pid)) {
		count(&counters, GPU_CNT_FILTERED);
		return 0;
	}
	c = launch_in_flight((__u32)id);
	if (c && !(c->flags & GPU_RF_CUPTI)) {
		c->args.launch.cupti = (__u32)reg_arg(ctx, 1);
		c->args.launch.nvtx = (__u32)reg_arg(ctx, 2);
		c->flags |= GPU_RF_CUPTI;
		return 0;
	}
	s = reserve(sizeof(*s));
	if (!s)
		return 0;
	rec_init(&s->r, GPU_EV_CUPTI_LAUNCH, NULL, pid, (__u32)id, 0);
	s->r.api = api;
	s->r.args.cupti.correlation = (__u32)reg_arg(ctx, 1);
	s->r.args.cupti.nvtx = (__u32)reg_arg(ctx, 2);
	set_names(s);
	s->r.nframes = 0;
	if (!user_stacks || !walk_stack(ctx, s, pid, true))
		submit(s);
	return 0;
}

/* A batch of the library's records being read (cupti_records). */
struct cupti_batch {
	__u64 base; /* const struct sonde_cupti_record * */
	__u32 n, pid, tid;
	__u16 api;
};

/* Record i of the batch into the ring: a kernel, a stall sample, a stall
 * reason or a cubin with its name; a copy, a set, a memory or pool record,
 * a graph's run or a synchronisation without one. */
static long cupti_record(__u32 i, void *data)
{
	struct cupti_batch *b = data;
	struct sonde_cupti_record k;
	struct gpu_rec_name *n = NULL;
	struct gpu_rec *r;
	__u32 flags = 0, type;

	if (i >= b->n || i >= SONDE_CUPTI_BATCH)
		return 1;
	read_user(&k, sizeof(k), b->base + (__u64)i * sizeof(k), &flags);
	if (flags & GPU_RF_READ_FAILED)
		return 1;
	switch (k.kind) {
	case SONDE_CUPTI_REC_KERNEL:
		type = GPU_EV_CUPTI_KERNEL;
		break;
	case SONDE_CUPTI_REC_COPY:
	case SONDE_CUPTI_REC_SET:
		type = GPU_EV_CUPTI_COPY;
		break;
	case SONDE_CUPTI_REC_MEMORY:
		type = GPU_EV_CUPTI_MEMORY;
		break;
	case SONDE_CUPTI_REC_MEMORY_POOL:
		type = GPU_EV_CUPTI_MEMORY_POOL;
		break;
	case SONDE_CUPTI_REC_GRAPH:
		type = GPU_EV_CUPTI_GRAPH;
		break;
	case SONDE_CUPTI_REC_SYNC:
		type = GPU_EV_CUPTI_SYNC;
		break;
	case SONDE_CUPTI_REC_STALL:
		type = GPU_EV_CUPTI_STALL;
		break;
	case SONDE_CUPTI_REC_STALL_REASON:
		type = GPU_EV_CUPTI_STALL_REASON;
		break;
	case SONDE_CUPTI_REC_CUBIN:
		type = GPU_EV_CUPTI_CUBIN;
		break;
	default:
		return 0;
	}
	if (type == GPU_EV_CUPTI_KERNEL || type == GPU_EV_CUPTI_STALL ||
	    type == GPU_EV_CUPTI_STALL_REASON || type == GPU_EV_CUPTI_CUBIN) {
		n = reserve(sizeof(*n));
		if (!n)
			return 1;
		r = &n->r;
	} else {
		r = reserve(sizeof(*r));
		if (!r)
			return 1;
	}
	rec_init(r, type, NULL, b->pid, b->tid, 0);
	r->api = b->api;
	r->device = (__s32)k.device;
	r->args.cupti.start = k.start;
	r->args.cupti.end = k.end;
	r->args.cupti.correlation = k.correlation;
	r->args.cupti.device = k.device;
	r->args.cupti.stream = k.stream;
	r->args.cupti.context = k.context;
	if (type == GPU_EV_CUPTI_KERNEL) {
		__builtin_memcpy(r->args.cupti.grid, k.grid, sizeof(k.grid));
		__builtin_memcpy(r->args.cupti.block, k.block, sizeof(k.block));
	} else {
		r->args.cupti.bytes = k.bytes;
		r->args.cupti.kind = k.kind;
		r->args.cupti.detail = k.copy_kind;
		r->args.cupti.pool = k.pool;
		r->args.cupti.pool_size = k.pool_size;
	}
	if (!n) {
		submit(r);
		return 0;
	}
	if (!k.name || bpf_probe_read_user_str(n->name, sizeof(n->name), (const void *)k.name) < 0)
		n->name[0] = 0;
	submit(n);
	return 0;
}

/* sonde_cupti_records(const struct sonde_cupti_record *r, n): what ran on
 * the GPU, n records at a time (one trap for a batch). */
SEC("uprobe")
int cupti_records(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct cupti_batch b = {
		.base = reg_arg(ctx, 1),
		.n = (__u32)reg_arg(ctx, 2),
		.pid = id >> 32,
		.tid = (__u32)id,
	};

	if (!pid_traced(b.pid))
		return 0;
	b.api = entry_api(ctx);
	bpf_loop(SONDE_CUPTI_BATCH, cupti_record, &b, 0);
	return 0;
}

/* sonde_cupti_nvtx(id, path): an NVTX range path of the process's. */
SEC("uprobe")
int cupti_nvtx(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), api = entry_api(ctx);
	__u32 pid = id >> 32;
	struct gpu_rec_name *n;
	__u64 path = reg_arg(ctx, 2);

	if (!pid_traced(pid))
		return 0;
	n = reserve(sizeof(*n));
	if (!n)
		return 0;
	rec_init(&n->r, GPU_EV_CUPTI_NVTX, NULL, pid, (__u32)id, 0);
	n->r.api = api;
	n->r.args.cupti.nvtx = (__u32)reg_arg(ctx, 1);
	if (!path || bpf_probe_read_user_str(n->name, sizeof(n->name), (const void *)path) < 0)
		n->name[0] = 0;
	submit(n);
	return 0;
}

/* sonde_cupti_clock(gpu_ns, host_ns, dropped, stall_dropped). */
SEC("uprobe")
int cupti_clock(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid(), api = entry_api(ctx);
	__u32 pid = id >> 32;
	struct gpu_rec *r;

	if (!pid_traced(pid))
		return 0;
	r = reserve(sizeof(*r));
	if (!r)
		return 0;
	rec_init(r, GPU_EV_CUPTI_CLOCK, NULL, pid, (__u32)id, 0);
	r->api = api;
	r->args.clock.gpu = reg_arg(ctx, 1);
	r->args.clock.host = reg_arg(ctx, 2);
	r->args.clock.dropped = reg_arg(ctx, 3);
	r->args.clock.stall_dropped = reg_arg(ctx, 4);
	submit(r);
	return 0;
}

/* ---- memory ------------------------------------------------------------ */

/* cudaMalloc(void **ptr, size_t size), cudaMallocManaged(.., flags),
 * cudaMallocAsync(.., stream), cuMemAlloc_v2, cuMemAllocManaged,
 * cuMemAllocAsync (same shapes); cuMemCreate(handle *out, size_t size,
 * const CUmemAllocationProp *prop, flags). */
SEC("uprobe")
int mem_alloc(struct pt_regs *ctx)
{
	struct gpu_call *c;
	__u32 loc[2];
	__u32 tid;

	c = enter(ctx, &tid, true);
	if (!c)
		return 0;
	c->args.mem.out = reg_arg(ctx, 1);
	c->args.mem.size = reg_arg(ctx, 2);
	switch (c->api) {
	case GPU_API_cudaMallocAsync:
	case GPU_API_cudaMallocAsync_ptsz:
	case GPU_API_cuMemAllocAsync:
	case GPU_API_cuMemAllocAsync_ptsz:
		c->args.mem.stream = reg_arg(ctx, 3);
		break;
	case GPU_API_cuMemCreate:
		read_user(loc, sizeof(loc), reg_arg(ctx, 3) + GPU_MEM_PROP_LOC_TYPE, &c->flags);
		if (loc[0] == GPU_MEM_LOCATION_DEVICE)
			c->device = loc[1];
		break;
	}
	save(tid, c);
	return 0;
}

SEC("uretprobe")
int mem_alloc_ret(struct pt_regs *ctx)
{
	struct gpu_alloc_key ak = {};
	struct gpu_alloc a = {};
	struct gpu_call_key k;
	struct gpu_call *c;
	struct gpu_rec *r;
	__u32 pid;
	long err;

	c = leave(ctx, &k, &pid);
	if (!c)
		return 0;
	r = rec_reserve_ret(ctx, &k, c, pid, GPU_EV_ALLOC);
	done(&k);
	if (!r)
		return 0;
	if (r->device < 0)
		r->device = thread_device(k.tid, &r->flags);
	r->args.mem.addr = read_u64(r->args.mem.out, &r->flags);
	if (r->ret == 0 && r->args.mem.addr) {
		ak.pid = pid;
		ak.kind = r->api == GPU_API_cuMemCreate ? GPU_ALLOC_HANDLE : GPU_ALLOC_PTR;
		ak.addr = r->args.mem.addr;
		a.size = r->args.mem.size;
		a.device = r->device;
		a.api = r->api;
		err = bpf_map_update_elem(&allocs, &ak, &a, BPF_NOEXIST);
		if (err == -EEXIST) {
			r->flags |= GPU_RF_REPLACED;
			err = bpf_map_update_elem(&allocs, &ak, &a, BPF_EXIST);
		} else if (!err) {
			count(&counters, GPU_CNT_ALLOCS_LIVE);
		}
		if (err)
			count(&drops, GPU_DROP_ALLOCS);
	}
	submit(r);
	return 0;
}

/* cudaFree(void *ptr), cudaFreeAsync(ptr, stream), cuMemFree_v2,
 * cuMemFreeAsync, cuMemRelease(handle). */
SEC("uprobe")
int mem_free(struct pt_regs *ctx)
{
	struct gpu_call *c;
	__u32 tid;

	c = enter(ctx, &tid, true);
	if (!c)
		return 0;
	c->args.mem.addr = reg_arg(ctx, 1);
	switch (c->api) {
	case GPU_API_cudaFreeAsync:
	case GPU_API_cudaFreeAsync_ptsz:
	case GPU_API_cuMemFreeAsync:
	case GPU_API_cuMemFreeAsync_ptsz:
		c->args.mem.stream = reg_arg(ctx, 2);
		break;
	}
	save(tid, c);
	return 0;
}

SEC("uretprobe")
int mem_free_ret(struct pt_regs *ctx)
{
	struct gpu_alloc_key ak = {};
	struct gpu_call_key k;
	struct gpu_alloc *a;
	struct gpu_call *c;
	struct gpu_rec *r;
	__u32 pid;

	c = leave(ctx, &k, &pid);
	if (!c)
		return 0;
	r = rec_reserve_ret(ctx, &k, c, pid, GPU_EV_FREE);
	done(&k);
	if (!r)
		return 0;
	/* cudaFree(NULL) is a no-op (often used to create the context). */
	if (r->ret == 0 && r->args.mem.addr) {
		ak.pid = pid;
		ak.kind = r->api == GPU_API_cuMemRelease ? GPU_ALLOC_HANDLE : GPU_ALLOC_PTR;
		ak.addr = r->args.mem.addr;
		a = bpf_map_lookup_elem(&allocs, &ak);
		if (a) {
			r->args.mem.size = a->size;
			r->device = a->device;
			if (!bpf_map_delete_elem(&allocs, &ak))
				count_add(&counters, GPU_CNT_ALLOCS_LIVE, -1);
		} else {
			r->flags |= GPU_RF_UNMATCHED;
			count(&counters, GPU_CNT_UNMATCHED);
		}
	}
	if (r->device < 0)
		r->device = thread_device(k.tid, &r->flags);
	submit(r);
	return 0;
}

/* ---- devices and contexts ---------------------------------------------- */

/* cudaSetDevice(int dev); cuCtxSetCurrent(CUcontext ctx);
 * cuDevicePrimaryCtxRetain(CUcontext *out, CUdevice dev);
 * cuCtxCreate_v2(out, flags, dev), _v3(out, params, n, flags, dev),
 * _v4(out, params, flags, dev). Never deduplicated: a runtime call that
 * creates or selects a context through the driver teaches us the device. */
SEC("uprobe")
int device_set(struct pt_regs *ctx)
{
	struct gpu_call *c;
	__u32 tid;

	c = enter(ctx, &tid, false);
	if (!c)
		return 0;
	c->args.device.device = -1;
	switch (c->api) {
	case GPU_API_cudaSetDevice:
		c->args.device.device = reg_arg(ctx, 1);
		break;
	case GPU_API_cuCtxSetCurrent:
		c->args.device.ctx = reg_arg(ctx, 1);
		break;
	case GPU_API_cuDevicePrimaryCtxRetain:
		c->args.device.out = reg_arg(ctx, 1);
		c->args.device.device = reg_arg(ctx, 2);
		break;
	case GPU_API_cuCtxCreate_v2:
		c->args.device.out = reg_arg(ctx, 1);
		c->args.device.device = reg_arg(ctx, 3);
		break;
	case GPU_API_cuCtxCreate_v3:
		c->args.device.out = reg_arg(ctx, 1);
		c->args.device.device = reg_arg(ctx, 5);
		break;
	case GPU_API_cuCtxCreate_v4:
		c->args.device.out = reg_arg(ctx, 1);
		c->args.device.device = reg_arg(ctx, 4);
		break;
	}
	save(tid, c);
	return 0;
}

static __always_inline void set_thread_dev(__u32 tid, __s32 dev)
{
	if (bpf_map_update_elem(&thread_dev, &tid, &dev, BPF_ANY))
		count(&drops, GPU_DROP_DEVICES);
}

SEC("uretprobe")
int device_set_ret(struct pt_regs *ctx)
{
	struct gpu_call_key k;
	struct gpu_call *c;
	struct gpu_rec *r;
	__s32 dev, *d;
	__u32 pid;

	c = leave(ctx, &k, &pid);
	if (!c)
		return 0;
	r = rec_reserve_ret(ctx, &k, c, pid, GPU_EV_DEVICE);
	done(&k);
	if (!r)
		return 0;
	dev = r->args.device.device;
	/* Read even when the call failed: the record says so in ret. */
	if (r->args.device.out)
		r->args.device.ctx = read_u64(r->args.device.out, &r->flags);
	if (r->ret == 0) {
		switch (r->api) {
		case GPU_API_cudaSetDevice:
			set_thread_dev(k.tid, dev);
			break;
		case GPU_API_cuCtxSetCurrent:
			d = bpf_map_lookup_elem(&ctx_dev, &r->args.device.ctx);
			if (d) {
				dev = *d;
				set_thread_dev(k.tid, dev);
			}
			break;
		default: /* a context was created or retained */
			if (r->args.device.ctx &&
			    bpf_map_update_elem(&ctx_dev, &r->args.device.ctx, &dev, BPF_ANY))
				count(&drops, GPU_DROP_DEVICES);
			if (r->api != GPU_API_cuDevicePrimaryCtxRetain)
				set_thread_dev(k.tid, dev); /* cuCtxCreate makes it current */
			break;
		}
	}
	r->device = dev;
	/* The maps learn from every call, but a driver call made by the
	 * runtime is the runtime call's business. */
	if (k.layer == GPU_LAYER_DRV && in_runtime(k.tid)) {
		bpf_ringbuf_discard(r, BPF_RB_NO_WAKEUP);
		count(&counters, GPU_CNT_DEDUP);
		return 0;
	}
	submit(r);
	return 0;
}

/* ---- waits ------------------------------------------------------------- */

/* cudaStreamSynchronize(stream), cudaEventSynchronize(event),
 * cuStreamSynchronize(stream), cuCtxSynchronize_v2(ctx) and the _ptsz
 * variants; cudaDeviceSynchronize(), cuCtxSynchronize() take nothing. */
SEC("uprobe")
int sync_begin(struct pt_regs *ctx)
{
	struct gpu_call *c;
	__u32 tid;

	c = enter(ctx, &tid, true);
	if (!c)
		return 0;
	if (c->api != GPU_API_cudaDeviceSynchronize && c->api != GPU_API_cuCtxSynchronize)
		c->args.sync.handle = reg_arg(ctx, 1);
	if (save(tid, c))
		emit_begin_stack(ctx, c, tid, GPU_EV_SYNC_BEGIN);
	return 0;
}

SEC("uretprobe")
int sync_end(struct pt_regs *ctx)
{
	struct gpu_call_key k;
	struct gpu_call *c;
	__u32 pid;

	c = leave(ctx, &k, &pid);
	if (c)
		emit_stack_rec(ctx, &k, c, pid, GPU_EV_SYNC_END, true);
	return 0;
}

/* ---- copies ------------------------------------------------------------ */

/* cudaMemcpy(dst, src, count, kind), _ptds; cudaMemcpyAsync(.., stream),
 * _ptsz. */
SEC("uprobe")
int memcpy_begin(struct pt_regs *ctx)
{
	struct gpu_call *c;
	__u32 tid;

	c = enter(ctx, &tid, true);
	if (!c)
		return 0;
	c->args.copy.dst = reg_arg(ctx, 1);
	c->args.copy.src = reg_arg(ctx, 2);
	c->args.copy.bytes = reg_arg(ctx, 3);
	c->args.copy.kind = reg_arg(ctx, 4);
	if (c->api == GPU_API_cudaMemcpyAsync || c->api == GPU_API_cudaMemcpyAsync_ptsz)
		c->args.copy.stream = reg_arg(ctx, 5);
	save(tid, c);
	return 0;
}

SEC("uretprobe")
int memcpy_end(struct pt_regs *ctx)
{
	struct gpu_call_key k;
	struct gpu_call *c;
	struct gpu_rec *r;
	__u32 pid;

	c = leave(ctx, &k, &pid);
	if (!c)
		return 0;
	r = rec_reserve_ret(ctx, &k, c, pid, GPU_EV_MEMCPY);
	done(&k);
	if (!r)
		return 0;
	r->device = thread_device(k.tid, &r->flags);
	submit(r);
	return 0;
}

/* ---- capacity ---------------------------------------------------------- */

/* cudaMemGetInfo(size_t *free, size_t *total), cuMemGetInfo_v2 (same);
 * cuDeviceTotalMem_v2(size_t *bytes, CUdevice dev);
 * cudaGetDeviceProperties(struct cudaDeviceProp *prop, int dev) and _v2. */
SEC("uprobe")
int capacity_query(struct pt_regs *ctx)
{
	struct gpu_call *c;
	__u32 tid;

	c = enter(ctx, &tid, true);
	if (!c)
		return 0;
	switch (c->api) {
	case GPU_API_cudaMemGetInfo:
	case GPU_API_cuMemGetInfo_v2:
		c->args.capacity.out_free = reg_arg(ctx, 1);
		c->args.capacity.out_total = reg_arg(ctx, 2);
		break;
	case GPU_API_cuDeviceTotalMem_v2:
		c->args.capacity.out_total = reg_arg(ctx, 1);
		c->device = reg_arg(ctx, 2);
		break;
	default: /* cudaGetDeviceProperties */
		c->args.capacity.out_total = reg_arg(ctx, 1) + GPU_CUDA_DEVICE_PROP_TOTAL_MEM;
		c->device = reg_arg(ctx, 2);
		break;
	}
	save(tid, c);
	return 0;
}

SEC("uretprobe")
int capacity_ret(struct pt_regs *ctx)
{
	struct gpu_call_key k;
	struct gpu_call *c;
	struct gpu_rec *r;
	__u32 pid;

	c = leave(ctx, &k, &pid);
	if (!c)
		return 0;
	r = rec_reserve_ret(ctx, &k, c, pid, GPU_EV_CAPACITY);
	done(&k);
	if (!r)
		return 0;
	if (r->device < 0)
		r->device = thread_device(k.tid, &r->flags);
	/* Read even when the call failed: the record says so in ret. */
	r->args.capacity.total = read_u64(r->args.capacity.out_total, &r->flags);
	r->args.capacity.free = read_u64(r->args.capacity.out_free, &r->flags);
	submit(r);
	return 0;
}

/* ---- NCCL -------------------------------------------------------------- */

/* ncclAllReduce(send, recv, count, type, op, comm, stream)
 * ncclAllGather(send, recv, sendcount, type, comm, stream)
 * ncclReduceScatter(send, recv, recvcount, type, op, comm, stream)
 * ncclBroadcast(send, recv, count, type, root, comm, stream)
 * ncclReduce(send, recv, count, type, op, root, comm, stream)
 * ncclSend(send, count, type, peer, comm, stream)
 * ncclRecv(recv, count, type, peer, comm, stream) */
SEC("uprobe")
int nccl_coll(struct pt_regs *ctx)
{
	struct gpu_call *c;
	__u64 st[2];
	__u32 tid;

	c = enter(ctx, &tid, false);
	if (!c)
		return 0;
	c->args.nccl.peer = -1;
	switch (c->api) {
	case GPU_API_ncclAllReduce:
	case GPU_API_ncclReduceScatter:
		c->args.nccl.redop = reg_arg(ctx, 5);
		c->args.nccl.comm = reg_arg(ctx, 6);
		stack_args(ctx, 7, st, sizeof(st[0]), &c->flags);
		c->args.nccl.stream = st[0];
		break;
	case GPU_API_ncclAllGather:
		c->args.nccl.comm = reg_arg(ctx, 5);
		c->args.nccl.stream = reg_arg(ctx, 6);
		break;
	case GPU_API_ncclBroadcast:
		c->args.nccl.peer = reg_arg(ctx, 5);
		c->args.nccl.comm = reg_arg(ctx, 6);
		stack_args(ctx, 7, st, sizeof(st[0]), &c->flags);
		c->args.nccl.stream = st[0];
		break;
	case GPU_API_ncclReduce:
		c->args.nccl.redop = reg_arg(ctx, 5);
		c->args.nccl.peer = reg_arg(ctx, 6);
		stack_args(ctx, 7, st, sizeof(st), &c->flags);
		c->args.nccl.comm = st[0];
		c->args.nccl.stream = st[1];
		break;
	default: /* ncclSend, ncclRecv: one buffer, no op */
		c->args.nccl.count = reg_arg(ctx, 2);
		c->args.nccl.datatype = reg_arg(ctx, 3);
		c->args.nccl.peer = reg_arg(ctx, 4);
		c->args.nccl.comm = reg_arg(ctx, 5);
		c->args.nccl.stream = reg_arg(ctx, 6);
		if (c->api == GPU_API_ncclSend)
			c->args.nccl.sendbuff = reg_arg(ctx, 1);
		else
			c->args.nccl.recvbuff = reg_arg(ctx, 1);
		break;
	}
	if (c->api != GPU_API_ncclSend && c->api != GPU_API_ncclRecv) {
		c->args.nccl.sendbuff = reg_arg(ctx, 1);
		c->args.nccl.recvbuff = reg_arg(ctx, 2);
		c->args.nccl.count = reg_arg(ctx, 3);
		c->args.nccl.datatype = reg_arg(ctx, 4);
	}
	if (save(tid, c))
		emit_begin(c, tid, GPU_EV_NCCL_BEGIN);
	return 0;
}

/* ncclGroupStart(), ncclGroupEnd(): the operations of a group are issued
 * at ncclGroupEnd, which is where a thread blocks. */
SEC("uprobe")
int nccl_group(struct pt_regs *ctx)
{
	struct gpu_call *c;
	__u32 tid;

	c = enter(ctx, &tid, false);
	if (!c)
		return 0;
	c->args.nccl.peer = -1;
	if (save(tid, c) && c->api == GPU_API_ncclGroupEnd)
		emit_begin(c, tid, GPU_EV_NCCL_BEGIN);
	return 0;
}

/* ncclCommInitRank(ncclComm_t *out, int nranks, ncclUniqueId id, int rank)
 * and ncclCommInitRankConfig(.., rank, config): the 128-byte id is passed
 * on the stack, so rank is the third register argument. */
SEC("uprobe")
int nccl_init(struct pt_regs *ctx)
{
	struct gpu_call *c;
	__u32 tid;

	c = enter(ctx, &tid, false);
	if (!c)
		return 0;
	c->args.comm.out = reg_arg(ctx, 1);
	c->args.comm.nranks = reg_arg(ctx, 2);
	c->args.comm.rank = reg_arg(ctx, 3);
	save(tid, c);
	return 0;
}

SEC("uretprobe")
int nccl_ret(struct pt_regs *ctx)
{
	struct gpu_call_key k;
	struct gpu_call *c;
	struct gpu_rec *r;
	__u32 pid;

	c = leave(ctx, &k, &pid);
	if (!c)
		return 0;
	switch (c->api) {
	case GPU_API_ncclGroupStart:
	case GPU_API_ncclGroupEnd:
		r = rec_reserve_ret(ctx, &k, c, pid, GPU_EV_NCCL_GROUP);
		break;
	case GPU_API_ncclCommInitRank:
	case GPU_API_ncclCommInitRankConfig:
		r = rec_reserve_ret(ctx, &k, c, pid, GPU_EV_NCCL_COMM);
		if (r)
			r->args.comm.comm = read_u64(r->args.comm.out, &r->flags);
		break;
	default:
		emit_stack_rec(ctx, &k, c, pid, GPU_EV_NCCL_END, true);
		return 0;
	}
	done(&k);
	if (r) {
		r->device = thread_device(k.tid, &r->flags);
		submit(r);
	}
	return 0;
}

/* ---- PyTorch: record_function scopes (DataLoader waits) ----------------- */

/* User-scope RecordFunctions from their constructor to their end(). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, struct gpu_rf_key);
	__type(value, struct gpu_rf);
} torch_rf SEC(".maps");

/* at::RecordFunction::RecordFunction(at::RecordScope scope): this in rdi,
 * the scope (a uint8_t enum) in sil. A user scope -- a
 * torch.autograd.profiler.record_function entered, as a DataLoader
 * iterator's __next__ does for each batch, and optimizers' step() and
 * zero_grad() for theirs -- is kept until its end() and reported now with
 * the thread's stack, whose Python frames tell userspace whose it is (the
 * name torch gives it is not passed to the constructor, and is only
 * stored while a profiler runs). The stack is taken even without
 * user_stacks: it is what tells a DataLoader's apart. The other scopes
 * (an operator's, a backward function's) cost a compare. */
SEC("uprobe")
int torch_rf_begin(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct gpu_rf_key k = {.pid = id >> 32, .obj = reg_arg(ctx, 1)};
	struct gpu_rf v = {.tid = (__u32)id};
	struct gpu_rec_stack *s;

	if ((__u8)reg_arg(ctx, 2) != GPU_TORCH_USER_SCOPE || !k.obj)
		return 0;
	if (!pid_traced(k.pid)) {
		count(&counters, GPU_CNT_FILTERED);
		return 0;
	}
	v.ts_ns = bpf_ktime_get_ns();
	/* An object whose end() we missed (attached between the two) is
	 * replaced: its address was freed and reused. */
	if (!bpf_map_update_elem(&torch_rf, &k, &v, BPF_NOEXIST)) {
		count(&counters, GPU_CNT_RF_LIVE);
	} else if (bpf_map_update_elem(&torch_rf, &k, &v, BPF_EXIST)) {
		count(&drops, GPU_DROP_RF);
		return 0;
	}
	s = reserve(sizeof(*s));
	if (!s)
		return 0;
	rec_init(&s->r, GPU_EV_RF_BEGIN, NULL, k.pid, v.tid, 0);
	s->r.ts_ns = v.ts_ns;
	s->r.api = entry_api(ctx);
	s->r.args.rf.obj = k.obj;
	s->r.args.rf.start = v.ts_ns;
	set_names(s);
	if (!walk_stack(ctx, s, k.pid, true))
		submit(s);
	return 0;
}

/* at::RecordFunction::end(): this in rdi. record_function's __exit__ calls
 * it, and the destructor again (a no-op then); so does every other
 * RecordFunction's destructor, which finds nothing here. */
SEC("uprobe")
int torch_rf_end(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct gpu_rf_key k = {.pid = id >> 32, .obj = reg_arg(ctx, 1)};
	struct gpu_rf *v = bpf_map_lookup_elem(&torch_rf, &k);
	struct gpu_rec *r;
	__u64 start;

	if (!v)
		return 0;
	start = v->ts_ns;
	/* Deleted once: a second end() of the same object finds nothing. */
	if (bpf_map_delete_elem(&torch_rf, &k))
		return 0;
	count_add(&counters, GPU_CNT_RF_LIVE, -1);
	r = reserve(sizeof(*r));
	if (!r)
		return 0;
	rec_init(r, GPU_EV_RF_END, NULL, k.pid, (__u32)id, 0);
	r->api = entry_api(ctx);
	r->dur_ns = r->ts_ns > start ? r->ts_ns - start : 0;
	r->args.rf.obj = k.obj;
	r->args.rf.start = start;
	submit(r);
	return 0;
}

/* A traced process may have mapped new code: tell userspace to scan it now
 * rather than at its next periodic scan, so that CUDA and NCCL calls made
 * right after a library is loaded are seen. A header-only record; with
 * hold, the process is stopped until userspace has scanned it (and built
 * the unwind tables of its files), GPU_RF_HELD. */
static __always_inline void notify_loaded(bool hold)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 pid = id >> 32;
	struct gpu_rec *r;

	if (!pid_traced(pid))
		return;
	r = reserve_control();
	if (!r)
		return;
	__builtin_memset(r, 0, sizeof(*r));
	r->ts_ns = bpf_ktime_get_ns();
	r->pid = pid;
	r->tid = (__u32)id;
	r->type = GPU_EV_LOADED;
	r->device = -1;
	if (hold && !bpf_send_signal(SIGSTOP))
		r->flags |= GPU_RF_HELD;
	/* Woken at once: the process is about to run the code just mapped. */
	count(&counters, GPU_CNT_EVENTS);
	bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
}

/* The head of glibc's struct link_map (link.h) and of struct r_debug. */
struct user_link_map {
	__u64 l_addr, l_name, l_ld, l_next, l_prev;
};

struct user_r_debug {
	__s32 r_version;
	__u32 pad;
	__u64 r_map, r_brk;
	__s32 r_state; /* RT_CONSISTENT 0, RT_ADD 1, RT_DELETE 2 */
};

#define RT_CONSISTENT 0
#define MAX_LOADED_OBJECTS 4096

struct loader_walk {
	__u64 cur;
	struct gpu_loader_pos pos;
	struct gpu_lib_key found; /* the first new GPU library, ino 0 if none */
	bool known;		  /* a GPU library a probe is already on */
	bool unknown;		  /* a GPU library whose file could not be looked up */
};

static __noinline long vma_file(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct gpu_lib_key *k = data;
	struct file *f = BPF_CORE_READ(vma, vm_file);

	if (f) {
		k->ino = BPF_CORE_READ(f, f_inode, i_ino);
		k->dev = BPF_CORE_READ(f, f_inode, i_sb, s_dev);
	}
	return 0;
}

#define CH(i, ch) (c[i] == (ch))

/* Whether the path in buf (n bytes with its NUL) names a CUDA runtime,
 * driver or NCCL library, or PyTorch's CPU library: libcudart.so*,
 * libcuda.so*, libnccl.so*, libtorch_cpu.so* (libscan_classify). (No
 * string constants: clang 14 gives .rodata strings BTF that the kernel
 * refuses, and the loop callbacks need the program's BTF.) */
struct basename_scan {
	const char *buf;
	long n;
	__u32 base;
};

static __noinline long scan_slash(__u32 i, void *data)
{
	struct basename_scan *b = data;

	if (i >= b->n)
		return 1;
	if (b->buf[i & (GPU_NAME_MAX - 1)] == '/')
		b->base = i + 1;
	return 0;
}

static __always_inline bool gpu_lib_name(const char *buf, long n)
{
	struct basename_scan b = {buf, n, 0};
	char c[16];

	bpf_loop(GPU_NAME_MAX, scan_slash, &b, 0);
	for (__u32 i = 0; i < sizeof(c); i++)
		c[i] = b.base + i < n ? buf[(b.base + i) & (GPU_NAME_MAX - 1)] : 0;
	if (!(CH(0, 'l') && CH(1, 'i') && CH(2, 'b')))
		return false;
	if (CH(3, 'c') && CH(4, 'u') && CH(5, 'd') && CH(6, 'a')) {
		if (CH(7, '.') && CH(8, 's') && CH(9, 'o'))
			return true; /* libcuda.so */
		return CH(7, 'r') && CH(8, 't') && CH(9, '.') && CH(10, 's') && CH(11, 'o');
	}
	if (CH(3, 't') && CH(4, 'o') && CH(5, 'r') && CH(6, 'c') && CH(7, 'h') && CH(8, '_'))
		return CH(9, 'c') && CH(10, 'p') && CH(11, 'u') && CH(12, '.') && CH(13, 's') &&
		       CH(14, 'o');
	return CH(3, 'n') && CH(4, 'c') && CH(5, 'c') && CH(6, 'l') && CH(7, '.') && CH(8, 's') &&
	       CH(9, 'o');
}

static __noinline long walk_object(__u32 i, void *data)
{
	struct loader_walk *w = data;
	struct user_link_map lm;
	struct gpu_lib_key k = {};
	__u32 zero = 0;
	char *buf;
	long n;

	if (!w->cur || bpf_probe_read_user(&lm, sizeof(lm), (const void *)w->cur))
		return 1;
	w->pos.last = w->cur;
	w->pos.last_addr = lm.l_addr;
	w->cur = lm.l_next;
	buf = bpf_map_lookup_elem(&name_buf, &zero);
	if (!buf || w->found.ino || !lm.l_name)
		return 0;
	n = bpf_probe_read_user_str(buf, GPU_NAME_MAX, (const void *)lm.l_name);
	if (n <= 1 || !gpu_lib_name(buf, n))
		return 0;
	/* The library's file: the mapping its dynamic section is in. The
	 * lookup fails while the mapping lock is contended: the file is not
	 * known then, but a GPU library is there -- reported all the same,
	 * for userspace to find in the process's mappings. */
	if (bpf_find_vma(bpf_get_current_task_btf(), lm.l_ld, vma_file, &k, 0) || !k.ino)
		w->unknown = true;
	else if (!bpf_map_lookup_elem(&lib_files, &k))
		w->found = k;
	else
		w->known = true;
	return 0;
}

struct tables_walk {
	__u64 cur;
	bool missing; /* an object whose file has no entry in unw_files */
};

static __noinline long check_table(__u32 i, void *data)
{
	struct tables_walk *w = data;
	struct user_link_map lm;
	struct gpu_lib_key k = {};
	struct unw_file_key key;

	if (!w->cur || bpf_probe_read_user(&lm, sizeof(lm), (const void *)w->cur))
		return 1;
	w->cur = lm.l_next;
	if (!lm.l_ld)
		return 0;
	/* The object's file: the mapping its dynamic section is in (none for
	 * the vdso, whose table is not built from a file). */
	bpf_find_vma(bpf_get_current_task_btf(), lm.l_ld, vma_file, &k, 0);
	if (!k.ino)
		return 0;
	key.dev = k.dev;
	key.ino = k.ino;
	if (bpf_map_lookup_elem(&unw_files, &key))
		return 0;
	w->missing = true;
	return 1;
}

/* Whether some object of the process (the list at r_map) is in a file
 * userspace has not built an unwind table for (nor marked for frame
 * pointers): its first stacks through it would lose their callers. */
static __always_inline bool tables_missing(__u64 r_map)
{
	struct tables_walk w = {.cur = r_map};

	bpf_loop(MAX_LOADED_OBJECTS, check_table, &w, 0);
	return w.missing;
}

enum hold_answer { HOLD_NO, HOLD_YES, HOLD_LAPSED };

/* Whether the current process may be stopped until its new library is
 * attached (enum gpu_hold): HOLD_LAPSED where it would be, but userspace has
 * not polled for HOLD_HEARTBEAT_NS (busy, stopped: src/probe/gpu_probes.c)
 * -- none is held then, for nobody would let it go. */
static __always_inline enum hold_answer hold_answer(void)
{
	struct task_struct *task = bpf_get_current_task_btf();

	/* GPU_HOLD_NO_TTY: a shell with job control would see the stop. */
	if (!hold_mode || (hold_mode != 2 && BPF_CORE_READ(task, signal, tty)))
		return HOLD_NO;
	/* 0: userspace is letting go (stopping), which is no lapse. */
	if (!hold_until_ns)
		return HOLD_NO;
	return bpf_ktime_get_ns() < hold_until_ns ? HOLD_YES : HOLD_LAPSED;
}

static __always_inline bool may_hold(void)
{
	return hold_answer() == HOLD_YES;
}

/* The objects the loader added since the process's last visit: any CUDA or
 * NCCL library among them whose file no probe is on is reported at once,
 * and the process stopped until userspace has attached to it (may_hold).
 * The loader has mapped them but run none of their code yet. A library a
 * probe is already on (the agent's search found its file) needs no attach,
 * but the process is about to call it: if some file it maps has no unwind
 * table yet -- a Python job's libffi, its extension modules -- the stacks
 * of its first calls would be walked by frame pointers and lose their
 * callers, so it is held too while userspace builds them. Returns whether
 * to hold it for that (the caller's GPU_EV_LOADED record says so). */
static __always_inline bool walk_loaded(struct pt_regs *ctx, __u32 pid, __u32 tid)
{
	__s64 delta = (__s64)bpf_get_attach_cookie(ctx);
	struct loader_walk w = {};
	struct gpu_loader_pos *pos;
	struct user_r_debug rd;
	struct user_link_map lm;
	struct gpu_rec *r;
	__u64 fn;

	if (!delta)
		return false;
	/* _dl_debug_state's address: the ip is past the breakpoint or at it;
	 * r_debug.r_brk names the right one. */
	fn = PT_REGS_IP(ctx);
	w.pos.rdebug = fn + delta;
	if (bpf_probe_read_user(&rd, sizeof(rd), (const void *)w.pos.rdebug) || rd.r_brk != fn) {
		fn -= 1;
		w.pos.rdebug = fn + delta;
		if (bpf_probe_read_user(&rd, sizeof(rd), (const void *)w.pos.rdebug) ||
		    rd.r_brk != fn)
			return false;
	}
	if (rd.r_state != RT_CONSISTENT)
		return false;
	w.cur = rd.r_map;
	pos = bpf_map_lookup_elem(&loader_pos, &pid);
	/* Go on from the last object seen, if the process still has it. */
	if (pos && pos->rdebug == w.pos.rdebug && pos->last &&
	    !bpf_probe_read_user(&lm, sizeof(lm), (const void *)pos->last) &&
	    lm.l_addr == pos->last_addr) {
		w.pos = *pos;
		w.cur = lm.l_next;
	}
	bpf_loop(MAX_LOADED_OBJECTS, walk_object, &w, 0);
	bpf_map_update_elem(&loader_pos, &pid, &w.pos, BPF_ANY);
	if (!w.found.ino && !w.unknown)
		return w.known && user_stacks && may_hold() && tables_missing(rd.r_map);
	r = reserve_control();
	if (!r)
		return false;
	__builtin_memset(r, 0, sizeof(*r));
	r->ts_ns = bpf_ktime_get_ns();
	r->pid = pid;
	r->tid = tid;
	r->type = GPU_EV_NEW_LIB;
	r->device = -1;
	r->args.lib.dev = w.found.dev;
	r->args.lib.ino = w.found.ino;
	switch (hold_answer()) {
	case HOLD_YES:
		r->flags |= bpf_send_signal(SIGSTOP) ? GPU_RF_HOLD_FAILED : GPU_RF_HELD;
		break;
	case HOLD_LAPSED:
		r->flags |= GPU_RF_HOLD_LAPSED;
		break;
	default:
		break;
	}
	count(&counters, GPU_CNT_EVENTS);
	/* Woken at once: the process waits, or is about to call. */
	bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
	return false;
}

/* The dynamic loader calls _dl_debug_state() each time its list of loaded
 * objects changes -- once the libraries a program needs are mapped at
 * start-up, and at every dlopen() and dlclose() -- which is the hook
 * debuggers use for the same purpose. The cookie is the distance from
 * _dl_debug_state to the loader's _r_debug (0: unknown). */
SEC("uprobe")
int gpu_loader_hook(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();

	if (!pid_traced(id >> 32))
		return 0;
	notify_loaded(walk_loaded(ctx, id >> 32, (__u32)id));
	return 0;
}

/* The GPU processes that run a Python interpreter (userspace puts them in
 * at its scan of them). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} py_exit_pids SEC(".maps");

/* Py_FinalizeEx() (Py_RunMain calls it once the program is done, before the
 * process exits): the interpreter is about to free its code objects, whose
 * names userspace reads as the records come -- those of the last few ms,
 * still in the ring, would have none. The process is stopped until
 * userspace has read them (src/probe/gpu_probes.c: let_exit). */
SEC("uprobe")
int gpu_py_finalize(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 pid = id >> 32;
	struct gpu_rec *r;

	if (!bpf_map_lookup_elem(&py_exit_pids, &pid) || hold_answer() != HOLD_YES)
		return 0;
	bpf_map_delete_elem(&py_exit_pids, &pid);
	r = reserve_control();
	if (!r)
		return 0;
	__builtin_memset(r, 0, sizeof(*r));
	r->ts_ns = bpf_ktime_get_ns();
	r->pid = pid;
	r->tid = (__u32)id;
	r->type = GPU_EV_PY_EXIT;
	r->device = -1;
	if (!bpf_send_signal(SIGSTOP))
		r->flags |= GPU_RF_HELD;
	count(&counters, GPU_CNT_EVENTS);
	bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
	return 0;
}

/* A new program: it may link the CUDA runtime statically, or be run by a
 * loader not yet hooked (another mount namespace). */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(gpu_exec_hook, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	notify_loaded(false);
	return 0;
}
