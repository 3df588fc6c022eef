/* unwind_late.h: the end of a user stack left to userspace (struct
 * late_stack, bpf/late.h), filled from a walk that deferred (bpf/unwind.h:
 * unw_walk with defer, s->deferred set). Shared by the CPU sampler
 * (bpf/cpu.bpf.c) and the GPU probes (bpf/gpu.bpf.c); include after
 * unwind.h. */
#ifndef SONDE_BPF_UNWIND_LATE_H
#define SONDE_BPF_UNWIND_LATE_H

#include "late.h"

struct late_py {
	struct unw_state *s;
	struct late_stack *l;
};

static long late_py_frame(__u64 i, void *arg)
{
	struct late_py *w = arg;
	__u64 ip = 0;
	int kind = unw_py_next(w->s, &ip);

	if (kind < 0)
		return 1;
	w->l->py[i & (LATE_PY - 1)] = ip;
	w->l->py_kind[i & (LATE_PY - 1)] = kind;
	w->l->npy = i + 1;
	return 0;
}

/* The process's interpreter into s: from its last walk through it, else
 * from userspace's scan of its mappings (checked against the mapping it
 * names: the process may have exec'd since). Returns whether it is known. */
static __always_inline bool late_interp(struct unw_state *s)
{
	struct unw_py_proc *pp = bpf_map_lookup_elem(&unw_py_procs, s->mm);
	__u32 pid = s->pid;
	struct unw_py_pid *pm, at;
	struct unw_py_file *py;
	struct unw_vma v = {};

	py = pp ? bpf_map_lookup_elem(&unw_py_files, &pp->key) : NULL;
	if (py) {
		s->py = *py;
		s->py_bias = pp->bias;
		return true;
	}
	pm = bpf_map_lookup_elem(&unw_py_pids, &pid);
	if (!pm)
		return false;
	at = *pm;
	py = bpf_map_lookup_elem(&unw_py_files, &at.key);
	if (!py || bpf_find_vma(bpf_get_current_task_btf(), at.start, unw_vma_cb, &v, 0) ||
	    v.start != at.start || v.key.dev != at.key.dev || v.key.ino != at.key.ino)
		return false;
	s->py = *py;
	s->py_bias = v.start - (v.pgoff << 12) - py->text_delta;
	return true;
}

/* The thread's Python frames the walk did not place, into l: from the
 * walk's cursor, or from the thread's current frame when its walk had not
 * reached the interpreter (late_interp). Returns whether the process's
 * interpreter is known. */
static __always_inline bool late_python(struct unw_state *s, struct late_stack *l)
{
	struct late_py w = {s, l};

	l->npy = 0;
	if (!s->py_known) {
		if (!late_interp(s))
			return false;
		s->py_known = 1;
	}
	if (!unw_py_start(s))
		return true;
	s->py_run = 0;
	bpf_loop(LATE_PY, late_py_frame, &w, 0);
	return true;
}

struct keep_pages {
	struct late_stack *l;
	__u64 base;
	__u32 from, kept;
};

/* Keeps the stack's page from + i (pages above base) if it can be read. */
static long keep_page(__u64 i, void *arg)
{
	struct keep_pages *c = arg;
	__u32 slot = c->kept;

	if (slot >= LATE_PAGES)
		return 1;
	if (bpf_probe_read_user(&c->l->stack[(slot & (LATE_PAGES - 1)) * LATE_PAGE], LATE_PAGE,
				(const void *)(c->base + (c->from + i) * LATE_PAGE)))
		return 0;
	c->l->page[slot & (LATE_PAGES - 1)] = c->from + i;
	c->kept = slot + 1;
	return 0;
}

struct late_rets {
	struct late_stack *l;
	struct return_instance *ri;
	__u64 tramp;
	__u32 kept;
};

/* One of the thread's uprobe return instances: the slot it put the
 * trampoline in, if a page kept holds it, gets the original return address
 * back, so that userspace walks the stack as it was (bpf/unwind.h unw_ret). */
static long late_ret(__u64 i, void *arg)
{
	struct late_rets *c = arg;
	struct return_instance *ri = c->ri; /* (a local: CO-RE relocates ri's fields only) */
	__u64 slot, orig, page, off;

	if (!ri)
		return 1;
	slot = BPF_CORE_READ(ri, stack);
	orig = BPF_CORE_READ(ri, orig_ret_vaddr);
	c->ri = BPF_CORE_READ(ri, next);
	if (slot < c->l->stack_base || (slot & 7))
		return 0;
	page = (slot - c->l->stack_base) / LATE_PAGE;
	for (__u32 j = 0; j < LATE_PAGES; j++) {
		if (j >= c->kept || c->l->page[j] != page)
			continue;
		off = ((__u64)j * LATE_PAGE + (slot & (LATE_PAGE - 1))) & (LATE_STACK_BYTES - 8);
		if (*(__u64 *)&c->l->stack[off] == c->tramp)
			*(__u64 *)&c->l->stack[off] = orig;
		break;
	}
	return 0;
}

/* Where the walk s stopped, the thread's Python frames still to place,
 * and the stack above it: up to LATE_PAGES pages, those that can be read
 * -- one that can't was never touched (under a frame's big buffer), is
 * being faulted in, or is past the stack's top. The frame's own words are
 * near sp, or near bp when it keeps a frame pointer (or a realigned
 * frame's: its CFA is at bp - 8), and its callers' above: the pages from
 * sp's, and when bp is further up than they reach, two from sp's and the
 * others from bp's on. The record then goes up to offsetof(struct
 * late_stack, stack) + l->nstack. */
static __always_inline void fill_late(struct late_stack *l, struct unw_state *s)
{
	__u64 base = s->r.sp & ~(__u64)(LATE_PAGE - 1);
	struct keep_pages c = {.l = l, .base = base};

	l->pc = s->r.pc;
	l->sp = s->r.sp;
	l->bp = s->r.bp;
	l->stack_base = base;
	l->leaf = s->r.leaf;
	l->flags = late_python(s, l) ? LATE_F_PY : 0;
	if (l->npy > LATE_PY)
		l->npy = LATE_PY;
	if (s->r.bp >= base + LATE_PAGES * LATE_PAGE &&
	    s->r.bp - base < (__u64)(LATE_FAR - LATE_SPAN) * LATE_PAGE) {
		bpf_loop(2, keep_page, &c, 0);
		c.from = (s->r.bp - 16 - base) / LATE_PAGE;
	}
	bpf_loop(LATE_SPAN, keep_page, &c, 0);
	l->nstack = (c.kept < LATE_PAGES ? c.kept : LATE_PAGES) * LATE_PAGE;
	if (c.kept >= LATE_PAGES)
		l->flags |= LATE_F_STACK_CUT;
	if (s->tramp) {
		struct late_rets r = {
			.l = l,
			.ri = BPF_CORE_READ(bpf_get_current_task_btf(), utask, return_instances),
			.tramp = s->tramp,
			.kept = c.kept < LATE_PAGES ? c.kept : LATE_PAGES,
		};

		bpf_loop(UNW_RET_INSTANCES, late_ret, &r, 0);
	}
}

#endif
