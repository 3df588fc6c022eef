/* unwind.h: the user-stack unwinder that the CPU sampler (bpf/cpu.bpf.c)
 * uses, from the unwind tables userspace builds out of each file's
 * .eh_frame (src/unwind/, rows in bpf/unwind_abi.h), falling back to the
 * frame-pointer chain where a file has no table.
 *
 * Per frame: the mapping that holds pc (bpf_find_vma, once per run of
 * frames in one mapping) gives the file (device, inode) and the file offset
 * of pc; the file's rows (a binary search in one big array, unw_rows) give
 * the rule for the caller's frame: CFA from rsp or rbp, the saved rbp, the
 * return address at CFA - 8; PLT stubs and the signal trampoline have rules
 * of their own, and _start and clone's child end the stack cleanly. A file
 * without a table yet is reported once in unw_misses (userspace builds it)
 * and walked by frame pointers meanwhile.
 *
 * Reads of user memory are the expensive step (about 0.1 us each on a 6.18
 * guest), so the stack is read a block at a time -- from the frame's sp up
 * to 1 KB, within its page -- and a frame's slots come from the block. The
 * walk runs under bpf_loop (one verification of the step, whatever the
 * depth) with its state in a map value the caller owns for the duration of
 * the program (a per-CPU array in a perf_event program). */
#ifndef SONDE_BPF_UNWIND_H
#define SONDE_BPF_UNWIND_H

#include "unwind_abi.h"

struct unw_state;
#define UNW_RULE_CTX struct unw_state
#define UNW_RULE_READ(c, addr, out) unw_read(c, addr, out)
static __noinline int unw_read(struct unw_state *s, __u64 addr, __u64 *out);
static __noinline __u64 unw_ret(struct unw_state *s, __u64 slot, __u64 ret);
#define UNW_RULE_RET(c, slot, ret) unw_ret(c, slot, ret)
#include "unwind_rule.h"

#define UNW_MAX_FRAMES 128 /* user frames at most; a power of two */
#define UNW_MAX_STEPS (3 * UNW_MAX_FRAMES + 2)
#define UNW_BLOCK 1024 /* stack bytes read at once; a power of two */
#define UNW_PAGE 4096
#define UNW_PY_BLOCK 1024      /* Python frame bytes read at once; a power of two */
#define UNW_PY_FRAME_BYTES 128 /* of a frame, the most its fields are into it */
#define UNW_SEARCH_STEPS 24    /* binary search over up to 16 M rows */
#define UNW_USER_LIMIT 0x0100000000000000ull

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1); /* set by userspace: the memory budget */
	__type(key, __u32);
	__type(value, struct unw_row);
} unw_rows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, struct unw_file_key);
	__type(value, struct unw_file);
} unw_files SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, struct unw_file_key);
	__type(value, struct unw_miss);
} unw_misses SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, UNW_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} unw_counters SEC(".maps");

/* The walk's state. In a map value, not on the BPF stack: the verifier
 * tracks stack slots exactly, and values that differ at every step would
 * make it check the step once per value. */
struct unw_state {
	__u64 block[UNW_BLOCK / 8];
	__u64 ips[UNW_MAX_FRAMES];
	__u64 base, words;		  /* block[0] was read from base; words hold stack */
	struct unw_regs r;		  /* the frame at hand */
	__u64 vm_start, vm_end, vm_pgoff; /* the mapping of the last frame */
	__u64 first, nrows, fp_only;	  /* its file's rows */
	__u64 pid;
	__u64 mm[2];   /* its mapping cache's key: the mm and the process */
	__u64 lookups; /* bpf_find_vma calls left to this walk */
	__u64 n;       /* frames in ips */
	__u64 ended;   /* the stack ended cleanly (STOP) */
	__u64 truncated;
	/* A walk that may defer (defer) stops at a frame whose file it can't
	 * know now -- its mapping not looked up yet, or its table not built
	 * yet -- and says so (deferred), with r at that frame: its caller
	 * keeps the rest of the stack for userspace to walk once the table
	 * is there (src/unwind/late.c). Else such a frame is walked by frame
	 * pointers. */
	__u64 defer, deferred;
	/* Where uretprobes send returns (the process's uprobe area), 0: none. */
	__u64 tramp;
	/* CPython: the interpreter file of the last frame's mapping (py_map),
	 * its load bias, the thread's current Python frame (py_cur; 0 until
	 * read, py_none once it is known the thread has none) and whether a
	 * run of Python frames is being emitted (py_run) or has just been
	 * for the native frame at pc (py_done). */
	struct unw_py_file py;
	__u64 py_known; /* py holds the process's interpreter */
	__u64 py_map, py_bias, py_cur, py_none, py_run, py_done;
	/* Python frames read a block at a time (CPython 3.11 on keeps a
	 * thread's frames together, each caller below its callee): pyblk
	 * holds pyb_len bytes read from pyb_base; the frame at the cursor
	 * is at pyf_off in it. */
	__u64 pyb_base, pyb_len, pyf_off;
	__u8 pyblk[UNW_PY_BLOCK + UNW_PY_FRAME_BYTES];
};

/* A mapping of a process, as bpf_find_vma found it. */
struct unw_vma {
	__u64 start, end, pgoff;
	struct unw_file_key key;
};

/* The mappings a process's stacks went through, found by bpf_find_vma
 * once each. That helper can be called only once in a perf_event program
 * (the mapping lock is let go by an irq_work that runs after the program;
 * a second call finds it busy), so a sample looks its stack's mappings up
 * here, and finds one more of them each time: a stack across three files
 * is whole from the third sample of its process on. Keyed by the mm and
 * the pid: an exec starts afresh, and a new process that gets the memory
 * of an exited one's mm does not inherit its mappings. */
#define UNW_MM_MAPS 16 /* a power of two */

struct unw_mm {
	struct unw_vma m[UNW_MM_MAPS];
	__u64 next;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64[2]);
	__type(value, struct unw_mm);
} unw_mms SEC(".maps");

/* The CPython interpreter files among unw_files (UNW_FILE_PYTHON). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, struct unw_file_key);
	__type(value, struct unw_py_file);
} unw_py_files SEC(".maps");

/* The interpreter file of each process whose stacks went through one
 * (keyed as unw_mms), and its load bias: where a deferred stack's Python
 * frames are read from before its walk reaches the interpreter. */
struct unw_py_proc {
	struct unw_file_key key;
	__u64 bias;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64[2]);
	__type(value, struct unw_py_proc);
} unw_py_procs SEC(".maps");

/* The same learned from the process's mappings when userspace scans it (a
 * GPU process, at its start and at each library it loads), before any of
 * its walks has gone through the interpreter. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct unw_py_pid);
} unw_py_pids SEC(".maps");

/* A new process's empty cache (too big for the BPF stack): never written. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct unw_mm);
} unw_mm_zero SEC(".maps");

static __always_inline void unw_count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&unw_counters, &idx);

	if (v)
		(*v)++;
}

static long unw_vma_cb(struct task_struct *task, struct vm_area_struct *vma, void *data)
{
	struct unw_vma *v = data;
	struct file *f = BPF_CORE_READ(vma, vm_file);

	v->start = BPF_CORE_READ(vma, vm_start);
	v->end = BPF_CORE_READ(vma, vm_end);
	v->pgoff = BPF_CORE_READ(vma, vm_pgoff);
	if (f) {
		v->key.ino = BPF_CORE_READ(f, f_inode, i_ino);
		v->key.dev = BPF_CORE_READ(f, f_inode, i_sb, s_dev);
	} else if (v->start == (__u64)BPF_CORE_READ(task, mm, context.vdso)) {
		v->key.ino = UNW_VDSO_INO;
	}
	return 0;
}

/* A word of the stack at addr, through the block. Returns 0 or -1. */
/* A return address a uretprobe replaced with its trampoline (the probed
 * function, or one it called, has not returned yet): the original, from
 * the thread's uprobe return instances, the one whose slot it was. */
#define UNW_RET_INSTANCES 16

static __noinline __u64 unw_ret(struct unw_state *s, __u64 slot, __u64 ret)
{
	struct task_struct *task;
	struct return_instance *ri;

	if (!s->tramp || ret != s->tramp)
		return ret;
	task = bpf_get_current_task_btf();
	ri = BPF_CORE_READ(task, utask, return_instances);
	for (int i = 0; i < UNW_RET_INSTANCES && ri; i++) {
		if (BPF_CORE_READ(ri, stack) == slot)
			return BPF_CORE_READ(ri, orig_ret_vaddr);
		ri = BPF_CORE_READ(ri, next);
	}
	return ret;
}

static __noinline int unw_read(struct unw_state *s, __u64 addr, __u64 *out)
{
	__u64 start, size, off;

	if (addr & 7)
		return bpf_probe_read_user(out, 8, (const void *)addr) ? -1 : 0;
	off = (addr - s->base) / 8;
	if (addr >= s->base && off < s->words) {
		*out = s->block[off & (UNW_BLOCK / 8 - 1)];
		return 0;
	}
	/* A new block: from the frame's sp when addr is within reach of it
	 * (the frame's slots all come from one read), else from addr. */
	start = addr;
	if (s->r.sp <= addr && addr - s->r.sp < UNW_BLOCK / 2 && !(s->r.sp & 7))
		start = s->r.sp;
	size = UNW_PAGE - (start & (UNW_PAGE - 1));
	if (size > UNW_BLOCK)
		size = UNW_BLOCK;
	if (start + size <= addr) {
		start = addr;
		size = UNW_PAGE - (start & (UNW_PAGE - 1));
		if (size > UNW_BLOCK)
			size = UNW_BLOCK;
	}
	if (size < 8)
		size = 8;
	if (bpf_probe_read_user(s->block, size, (const void *)start)) {
		s->words = 0;
		return -1;
	}
	s->base = start;
	s->words = size / 8;
	*out = s->block[((addr - start) / 8) & (UNW_BLOCK / 8 - 1)];
	return 0;
}

struct unw_mm_scan {
	struct unw_mm *mm;
	__u64 pc;
	__s64 found;
};

static long unw_mm_scan_cb(__u64 i, void *arg)
{
	struct unw_mm_scan *c = arg;
	struct unw_vma *v = &c->mm->m[i & (UNW_MM_MAPS - 1)];

	if (v->start <= c->pc && c->pc < v->end) {
		c->found = i;
		return 1;
	}
	return 0;
}

/* The mapping of pc: from the process's cache, else bpf_find_vma (while
 * the walk has lookups left), remembered. 0, or -1 if not found. */
static __always_inline int unw_find_vma(struct unw_state *s, __u64 pc, struct unw_vma *out)
{
	struct unw_mm_scan c = {.pc = pc, .found = -1};
	struct unw_mm *mm = bpf_map_lookup_elem(&unw_mms, s->mm);

	if (mm) {
		c.mm = mm;
		bpf_loop(UNW_MM_MAPS, unw_mm_scan_cb, &c, 0);
		if (c.found >= 0) {
			*out = mm->m[c.found & (UNW_MM_MAPS - 1)];
			return 0;
		}
	}
	if (!s->lookups) {
		unw_count(UNW_CNT_NO_VMA);
		return -1;
	}
	s->lookups--;
	__builtin_memset(out, 0, sizeof(*out));
	if (bpf_find_vma(bpf_get_current_task_btf(), pc, unw_vma_cb, out, 0) || !out->end) {
		unw_count(UNW_CNT_NO_VMA);
		return -1;
	}
	if (!mm) {
		__u32 zero = 0;
		struct unw_mm *z = bpf_map_lookup_elem(&unw_mm_zero, &zero);

		if (!z)
			return 0;
		bpf_map_update_elem(&unw_mms, s->mm, z, BPF_NOEXIST);
		mm = bpf_map_lookup_elem(&unw_mms, s->mm);
		if (!mm)
			return 0;
	}
	mm->m[mm->next & (UNW_MM_MAPS - 1)] = *out;
	mm->next++;
	return 0;
}

/* The mapping and file table of pc into s (none, and frame pointers, when
 * its mapping can't be looked up now). Returns 0, or 1 when the walk
 * defers: the mapping can't be looked up now, or its file has no table
 * yet. */
static __always_inline int unw_find_file(struct unw_state *s, __u64 pc)
{
	struct unw_vma v;
	struct unw_file *f;

	if (unw_find_vma(s, pc, &v)) {
		if (s->defer)
			return 1;
		/* Not known here (the mapping lock busy, the walk's lookups
		 * spent): this frame by frame pointers, the next looked up
		 * again. */
		s->vm_start = s->vm_end = 0;
		s->first = s->nrows = 0;
		s->fp_only = 1;
		s->py_map = 0;
		return 0;
	}
	s->vm_start = v.start;
	s->vm_end = v.end;
	s->vm_pgoff = v.pgoff;
	s->first = s->nrows = 0;
	s->fp_only = 1;
	s->py_map = 0;
	if (!v.key.ino) /* anonymous memory (JIT code) */
		return 0;
	f = bpf_map_lookup_elem(&unw_files, &v.key);
	if (!f) {
		struct unw_miss m = {.pid = s->pid, .start = v.start, .end = v.end};

		bpf_map_update_elem(&unw_misses, &v.key, &m, BPF_NOEXIST);
		unw_count(UNW_CNT_MISS);
		return s->defer ? 1 : 0;
	}
	f->used_ns = bpf_ktime_get_ns();
	s->py_map = 0;
	if (f->flags & UNW_FILE_PYTHON) {
		struct unw_py_file *py = bpf_map_lookup_elem(&unw_py_files, &v.key);

		if (py) {
			struct unw_py_proc *pp = bpf_map_lookup_elem(&unw_py_procs, s->mm);

			s->py = *py;
			s->py_known = 1;
			s->py_map = 1;
			s->py_bias = v.start - (v.pgoff << 12) - py->text_delta;
			if (!pp || pp->bias != s->py_bias || pp->key.ino != v.key.ino) {
				struct unw_py_proc np = {v.key, s->py_bias};

				bpf_map_update_elem(&unw_py_procs, s->mm, &np, BPF_ANY);
			}
		}
	}
	if (f->flags & UNW_FILE_FP || !f->n)
		return 0;
	s->first = f->first;
	s->nrows = f->n;
	s->fp_only = 0;
	return 0;
}

/* The row whose range holds file offset off, or NULL. */
static __always_inline struct unw_row *unw_search(struct unw_state *s, __u32 off)
{
	__u32 lo = s->first, hi = s->first + s->nrows, mid;
	struct unw_row *r;

	r = bpf_map_lookup_elem(&unw_rows, &lo);
	if (!r || r->off > off)
		return NULL;
	for (int i = 0; i < UNW_SEARCH_STEPS; i++) {
		if (hi - lo <= 1)
			break;
		mid = lo + (hi - lo) / 2;
		r = bpf_map_lookup_elem(&unw_rows, &mid);
		if (!r)
			return NULL;
		if (r->off <= off)
			lo = mid;
		else
			hi = mid;
	}
	return bpf_map_lookup_elem(&unw_rows, &lo);
}

/* ---- CPython frames ------------------------------------------------------ */

/* Whether file offset off is in the interpreter loop of the mapping's
 * interpreter. */
static __always_inline bool unw_py_in_eval(struct unw_state *s, __u64 off)
{
	for (int i = 0; i < UNW_PY_EVAL_RANGES; i++)
		if (i < s->py.neval && s->py.eval_start[i] <= off && off < s->py.eval_end[i])
			return true;
	return false;
}

/* The thread's current Python frame: its PyThreadState is the value of
 * the interpreter's pthread key, which glibc keeps in the thread's
 * descriptor (at the thread pointer, fsbase) for the first 32 keys. */
static __always_inline __u64 unw_py_current(struct unw_state *s)
{
	struct task_struct *task = bpf_get_current_task_btf();
	const struct unw_py_layout *l = &s->py.layout;
	__u64 fsbase = BPF_CORE_READ(task, thread.fsbase), tstate = 0, frame = 0, cf;
	__u32 key = 0;

	if (!fsbase ||
	    bpf_probe_read_user(&key, sizeof(key), (void *)(s->py_bias + s->py.tss_key_addr)) ||
	    key >= 32)
		return 0;
	if (bpf_probe_read_user(&tstate, 8, (void *)(fsbase + l->tsd_offset + 16 * key + 8)) ||
	    !tstate)
		return 0;
	cf = tstate;
	if (l->tstate_cframe != UNW_PY_NO_CFRAME &&
	    (bpf_probe_read_user(&cf, 8, (void *)(tstate + l->tstate_cframe)) || !cf))
		return 0;
	if (bpf_probe_read_user(&frame, 8, (void *)(cf + l->cframe_frame)))
		return 0;
	return frame;
}

static __always_inline __u64 unw_py_u64(struct unw_state *s, __u16 off)
{
	return *(__u64 *)&s->pyblk[(s->pyf_off & (UNW_PY_BLOCK - 1)) +
				   (off & (UNW_PY_FRAME_BYTES - 8))];
}

static __always_inline __u8 unw_py_u8(struct unw_state *s, __u16 off)
{
	return s->pyblk[(s->pyf_off & (UNW_PY_BLOCK - 1)) + (off & (UNW_PY_FRAME_BYTES - 1))];
}

static __always_inline __u32 unw_py_u32(struct unw_state *s, __u16 off)
{
	return *(__u32 *)&s->pyblk[(s->pyf_off & (UNW_PY_BLOCK - 1)) +
				   (off & (UNW_PY_FRAME_BYTES - 4))];
}

/* Brings the first UNW_PY_FRAME_BYTES of the Python frame at f into the
 * block (pyf_off): from the block read for a frame above it, else with a
 * new read that ends with the frame and starts as far below as the block
 * and the frame's page allow, where its callers are. 0, or -1. */
static __always_inline int unw_py_frame(struct unw_state *s, __u64 f)
{
	__u64 end = f + UNW_PY_FRAME_BYTES, start, size;

	if (f >= s->pyb_base && end <= s->pyb_base + s->pyb_len) {
		s->pyf_off = f - s->pyb_base;
		return 0;
	}
	start = end > UNW_PY_BLOCK ? end - UNW_PY_BLOCK : 0;
	if (start < (f & ~(__u64)(UNW_PAGE - 1)))
		start = f & ~(__u64)(UNW_PAGE - 1);
	size = end - start;
	if (size > UNW_PY_BLOCK)
		size = UNW_PY_BLOCK;
	if (size < UNW_PY_FRAME_BYTES)
		size = UNW_PY_FRAME_BYTES;
	if (bpf_probe_read_user(s->pyblk, size, (const void *)start)) {
		s->pyb_len = 0;
		return -1;
	}
	s->pyb_base = start;
	s->pyb_len = size;
	s->pyf_off = f - start;
	return 0;
}

/* Reads the Python frame at the cursor into *ip (as a stack holds it) and
 * moves the cursor to its caller. Returns its enum unw_py_kind -- whether
 * it ends the run of frames its interpreter-loop frame runs, as the version
 * says, or is the C stack's shim below the run, which is no Python frame --
 * or -1 when the thread has no frame there (the cursor is spent). */
static __always_inline int unw_py_next(struct unw_state *s, __u64 *ip)
{
	const struct unw_py_layout *l = &s->py.layout;
	__u64 f = s->py_cur, code, instr;
	__u8 entry;

	if (!f || unw_py_frame(s, f)) {
		s->py_cur = 0;
		s->py_none = 1;
		return -1;
	}
	code = unw_py_u64(s, l->frame_code);
	entry = unw_py_u8(s, l->frame_entry);
	s->py_cur = unw_py_u64(s, l->frame_previous);
	if (!s->py_cur)
		s->py_none = 1;
	if (l->entry_kind == UNW_PY_ENTRY_SHIM && entry == 3)
		return UNW_PYK_SHIM;
	if (l->instr_kind == UNW_PY_INSTR_INDEX) {
		instr = unw_py_u32(s, l->frame_instr);
	} else {
		instr = unw_py_u64(s, l->frame_instr);
		instr = instr > code + l->code_adaptive ? (instr - code - l->code_adaptive) / 2 : 0;
	}
	if (instr > UNW_PY_INSTR_MAX)
		instr = UNW_PY_INSTR_MAX;
	*ip = UNW_PY_FRAME | instr << UNW_PY_ADDR_BITS | (code & ((1ull << UNW_PY_ADDR_BITS) - 1));
	if (l->entry_kind == UNW_PY_ENTRY_ONE || (l->entry_kind == UNW_PY_ENTRY_FLAG && entry))
		return UNW_PYK_LAST;
	return UNW_PYK_FRAME;
}

/* Emits the Python frame at the cursor and moves it to its caller; ends
 * the run where the version says the interpreter-loop frame's frames end.
 * Returns 1 to stop the walk (no room left), else 0. */
static __always_inline long unw_py_emit(struct unw_state *s)
{
	__u64 ip = 0;
	int kind;

	if (s->n >= UNW_MAX_FRAMES) {
		s->truncated = 1;
		return 1;
	}
	kind = unw_py_next(s, &ip);
	if (kind < 0 || kind == UNW_PYK_SHIM) {
		/* No frame, or the C stack's shim below the run. */
		s->py_run = 0;
		return 0;
	}
	s->ips[s->n & (UNW_MAX_FRAMES - 1)] = ip;
	s->n++;
	unw_count(UNW_CNT_PYTHON);
	if (kind == UNW_PYK_LAST)
		s->py_run = 0;
	return 0;
}

/* At a frame of the interpreter loop: whether the thread has Python
 * frames to put in its place (the run starts). */
static __always_inline bool unw_py_start(struct unw_state *s)
{
	if (s->py_none)
		return false;
	if (!s->py_cur)
		s->py_cur = unw_py_current(s);
	if (!s->py_cur) {
		s->py_none = 1;
		return false;
	}
	s->py_run = 1;
	return true;
}

static long unw_step(__u64 i, void *arg)
{
	struct unw_state *s = *(struct unw_state **)arg;
	__u64 pc = s->r.pc, target, off;
	struct unw_row *r;
	int res;

	if (s->py_run)
		return unw_py_emit(s);
	if (!pc || pc >= UNW_USER_LIMIT)
		return 1;
	if (s->n >= UNW_MAX_FRAMES) {
		s->truncated = 1;
		return 1;
	}
	/* A return address is after its call: the call is what to look up
	 * (it may be the function's last instruction). */
	target = s->r.leaf ? pc : pc - 1;
	if ((target < s->vm_start || target >= s->vm_end) && unw_find_file(s, target)) {
		/* The rest is userspace's, from this frame on. */
		s->deferred = 1;
		return 1;
	}
	/* The interpreter loop: the Python frames it runs take its place
	 * (emitted by the next steps), then the native walk goes on. */
	off = target - s->vm_start + (s->vm_pgoff << 12);
	if (s->py_map && !s->py_done && unw_py_in_eval(s, off) && unw_py_start(s)) {
		s->py_done = 1;
		return 0;
	}
	if (!s->py_done) {
		s->ips[s->n & (UNW_MAX_FRAMES - 1)] = pc;
		s->n++;
	}
	s->py_done = 0;
	r = s->fp_only ? NULL : unw_search(s, (__u32)off);
	res = r ? unw_rule_step(s, r, &s->r) : unw_rule_fp(s, &s->r);
	switch (res) {
	case UNW_RULE_TABLE:
		unw_count(UNW_CNT_TABLE);
		return 0;
	case UNW_RULE_SIGNAL:
		unw_count(UNW_CNT_TABLE);
		if (s->n)
			s->ips[(s->n - 1) & (UNW_MAX_FRAMES - 1)] = UNW_SIGNAL_FRAME;
		return 0;
	case UNW_RULE_FP:
		unw_count(UNW_CNT_FP);
		return 0;
	case UNW_RULE_END:
		s->ended = 1;
		unw_count(UNW_CNT_STOP);
		return 1;
	default:
		unw_count(UNW_CNT_FAIL);
		return 1;
	}
}

/* Walks the user stack from the registers (pc, sp, bp) into s->ips, leaf
 * first; leaf says pc is where the thread was (a sample in user code)
 * rather than after a call (a sample in the kernel: pc follows the
 * syscall). lookups: the mappings the walk may look up that its process's
 * cache doesn't hold (1 in a perf_event program: see unw_mms); defer: stop
 * at a frame whose file can't be known now rather than walk it by frame
 * pointers (s->deferred says it did). Returns the frames in s->ips;
 * s->truncated says the stack went on past UNW_MAX_FRAMES. */
static __always_inline __u32 unw_walk(struct unw_state *s, __u32 pid, __u64 pc, __u64 sp, __u64 bp,
				      bool leaf, __u32 lookups, bool defer)
{
	/* An exited process's mm may be reused by another: the pid tells
	 * them apart. */
	s->mm[0] = (__u64)BPF_CORE_READ(bpf_get_current_task_btf(), mm);
	s->tramp =
		(__u64)BPF_CORE_READ(bpf_get_current_task_btf(), mm, uprobes_state.xol_area, vaddr);
	s->mm[1] = pid;
	s->lookups = lookups;
	s->r.pc = pc;
	s->r.sp = sp;
	s->r.bp = bp;
	s->r.leaf = leaf;
	s->defer = defer;
	s->deferred = 0;
	s->pid = pid;
	s->base = s->words = 0;
	s->vm_start = s->vm_end = 0;
	s->n = s->ended = s->truncated = 0;
	s->py_known = s->py_map = s->py_cur = s->py_none = s->py_run = s->py_done = 0;
	s->pyb_base = s->pyb_len = s->pyf_off = 0; /* a block is good for one stack */
	/* A step emits a frame, or starts or ends a run of Python frames:
	 * room for every frame and two steps more a run. A walk still going
	 * at the end was cut. */
	if (bpf_loop(UNW_MAX_STEPS, unw_step, &s, 0) >= UNW_MAX_STEPS)
		s->truncated = 1;
	if (s->truncated)
		unw_count(UNW_CNT_TRUNC);
	return s->n < UNW_MAX_FRAMES ? s->n : UNW_MAX_FRAMES;
}

#endif
