/* late.h: the end of a user stack the BPF walk (bpf/unwind.h) left to
 * userspace, as the CPU sampler's samples (struct cpu_sample_late,
 * bpf/cpu.h) and the GPU probes' calls (struct gpu_rec_late, bpf/gpu.h)
 * carry it. A stack that reaches a frame the walk can't take now -- in a
 * mapping not looked up yet for its process, or in a file whose unwind
 * table is not built yet (a new program, a library just loaded) -- keeps
 * what userspace needs to walk the rest once the table is there
 * (src/unwind/late.c): the registers at that frame, the stack above them
 * (up to LATE_STACK_BYTES bytes, whole pages above sp's: bpf/unwind_late.h
 * fill_late says which), and the thread's Python frames still to be
 * placed. The frames walked so far are the record's own. Fixed-width
 * fields only: the same bytes are read on both sides. */
#ifndef SONDE_BPF_LATE_H
#define SONDE_BPF_LATE_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

#define LATE_STACK_BYTES (32 << 10)
#define LATE_PAGE 4096 /* the unit of stack kept */
#define LATE_PAGES (LATE_STACK_BYTES / LATE_PAGE)
#define LATE_SPAN 32 /* pages looked at from where the kept ones start, at most */
#define LATE_FAR 255 /* pages above sp's that bp may point to and be followed */
#define LATE_PY 128  /* Python frames still to place, at most; a power of two */

/* late_stack flags. */
#define LATE_F_PY 1	   /* the process's interpreter is known: py holds its frames */
#define LATE_F_STACK_CUT 2 /* the stack may go on past the pages kept */

/* Handed over up to the stack pages it kept: offsetof(struct late_stack,
 * stack) + nstack bytes. */
struct late_stack {
	__u64 pc, sp, bp; /* the frame where the walk stopped */
	__u64 stack_base; /* sp's page: page[] counts pages from it */
	__u32 leaf;	  /* pc is where the thread was, not a return address */
	__u32 flags;	  /* LATE_F_* */
	__u32 nstack;	  /* bytes of stack kept in stack[] */
	__u32 npy;	  /* Python frames in py, the innermost first */
	/* stack[i * LATE_PAGE...] holds the page page[i] pages above
	 * stack_base */
	__u8 page[LATE_PAGES];
	__u64 py[LATE_PY];     /* as a stack holds them (UNW_PY_FRAME | ...) */
	__u8 py_kind[LATE_PY]; /* enum unw_py_kind (bpf/unwind_abi.h) */
	__u8 stack[LATE_STACK_BYTES];
};

_Static_assert(sizeof(struct late_stack) == 56 + 9 * LATE_PY + LATE_STACK_BYTES,
	       "late_stack layout");

#endif
