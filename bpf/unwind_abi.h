/* unwind_abi.h: the unwind tables as the BPF unwinder (bpf/unwind.h) reads
 * them and userspace (src/unwind/) writes them. Fixed-width fields only:
 * the same bytes are read on both sides.
 *
 * A file's table is a sorted run of rows, one per address range of its code
 * over which the rule to find the caller's frame stays the same, keyed by
 * FILE OFFSET (not ELF address): the BPF side knows a frame's mapping, whose
 * start and page offset give the file offset of its pc directly, whatever
 * the file's segments say. A row holds from its offset to the next row's.
 *
 * x86-64 only: the registers a frame step needs are rsp, rbp and rip. */
#ifndef SONDE_BPF_UNWIND_ABI_H
#define SONDE_BPF_UNWIND_ABI_H

#ifndef __VMLINUX_H__
#include <linux/types.h>
#endif

enum unw_kind {
	UNW_INVALID = 0, /* no rule here (a gap between functions, a rule we
			  * can't express): try frame pointers */
	UNW_CFA_RSP = 1, /* CFA = rsp + 8*cfa */
	UNW_CFA_RBP = 2, /* CFA = rbp + 8*cfa */
	UNW_PLT = 3,	 /* a PLT stub: CFA = rsp + 8, plus 8 where
			  * (pc & 15) >= cfa (the stub's push is done;
			  * cfa is 11 for the classic stub, 10 for some) */
	UNW_SIGNAL = 4,	 /* a signal trampoline (__restore_rt): rsp points at
			  * the ucontext; the interrupted registers are in
			  * its mcontext */
	UNW_STOP = 5,	 /* the return address is undefined (_start, the
			  * child side of clone): the stack ends here */
};

/* One row: 8 bytes. The return address is at CFA - 8 in every rule kind
 * but SIGNAL and STOP (x86-64: the call pushed it just below the CFA). */
struct unw_row {
	__u32 off; /* file offset where this rule starts */
	__u8 kind; /* enum unw_kind */
	__s8 rbp;  /* rbp saved at CFA + 8*rbp; 0: rbp keeps its value */
	__s16 cfa; /* CFA offset from its register, in units of 8 bytes */
};

_Static_assert(sizeof(struct unw_row) == 8, "unw_row layout");

/* Counters (unw_counters, per-CPU array of __u64). */
enum unw_counter {
	UNW_CNT_TABLE,	  /* frames stepped by a table row */
	UNW_CNT_FP,	  /* frames stepped by frame pointers */
	UNW_CNT_MISS,	  /* frames in a file with no table yet (FP meanwhile) */
	UNW_CNT_NO_VMA,	  /* pc in no mapping, or the mapping lock was busy */
	UNW_CNT_STOP,	  /* stacks that ended at _start or clone */
	UNW_CNT_TRUNC,	  /* stacks cut at UNW_MAX_FRAMES */
	UNW_CNT_BAD_READ, /* a stack slot could not be read */
	UNW_CNT_MAX,
};

/* What userspace put in unw_files for a file. */
struct unw_file_key {
	__u64 dev; /* the kernel's s_dev: major << 20 | minor */
	__u64 ino;
};

/* The vdso is no file, but the same image in every process: its table is
 * keyed {0, UNW_VDSO_INO} (no file has device 0). */
#define UNW_VDSO_INO 1

#define UNW_FILE_FP                                                                                \
	1 /* no table (none in the file, over budget, malformed):
		       * frame pointers */

struct unw_file {
	__u32 first; /* its rows: unw_rows[first, first + n) */
	__u32 n;
	__u32 flags; /* UNW_FILE_* */
	__u32 pad;
	__u64 used_ns; /* last time a stack went through it (LRU) */
};

/* A file a stack went through that has no entry in unw_files: where it is
 * mapped, so userspace can open it (/proc/PID/map_files/START-END). */
struct unw_miss {
	__u32 pid;
	__u32 pad;
	__u64 start, end;
};

#endif
