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

#include "counters.h" /* the counters' tables */
#endif

enum unw_kind {
	UNW_INVALID = 0,       /* no rule here (a gap between functions, a rule we
			  * can't express): try frame pointers */
	UNW_CFA_RSP = 1,       /* CFA = rsp + 8*cfa */
	UNW_CFA_RBP = 2,       /* CFA = rbp + 8*cfa */
	UNW_PLT = 3,	       /* a PLT stub: CFA = rsp + 8, plus 8 where
			  * (pc & 15) >= cfa (the stub's push is done;
			  * cfa is 11 for the classic stub, 10 for some) */
	UNW_SIGNAL = 4,	       /* a signal trampoline (__restore_rt): rsp points at
			  * the ucontext; the interrupted registers are in
			  * its mcontext */
	UNW_STOP = 5,	       /* the return address is undefined (_start, the
			  * child side of clone): the stack ends here */
	UNW_CFA_DEREF_RBP = 6, /* a realigned frame (gcc's DRAP): CFA = the
				* word at rbp + 8*cfa, rbp saved at rbp + 8*rbp
				* (0 included) */
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

/* Counters (unw_counters, per-CPU array of __u64): counters.h's table. */
enum unw_counter { UNW_COUNTERS(COUNTER_ENUM) UNW_CNT_MAX };

/* What userspace put in unw_files for a file. */
struct unw_file_key {
	__u64 dev; /* the kernel's s_dev: major << 20 | minor */
	__u64 ino;
};

/* The vdso is no file, but the same image in every process: its table is
 * keyed {0, UNW_VDSO_INO} (no file has device 0). */
#define UNW_VDSO_INO 1

/* unw_file flags. UNW_FILE_FP: no table (none in the file, over budget,
 * malformed), so frame pointers; UNW_FILE_PYTHON: a CPython interpreter,
 * whose pieces are in unw_py_files. */
#define UNW_FILE_FP 1
#define UNW_FILE_PYTHON 2

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

/* ---- CPython (src/python/python.h) ------------------------------------ */

/* A Python frame in a stack's user part: bit 63 set (no user address has
 * it), the instruction index (code units from the start of the bytecode,
 * capped) in bits 47-62, the code object's address in bits 0-46. */
#define UNW_PY_FRAME (1ull << 63)
/* The kernel's signal frame (the trampoline a handler returns to): bit 62
 * alone. Shown as [signal], between a handler and the code it interrupted. */
#define UNW_SIGNAL_FRAME (1ull << 62)
#define UNW_PY_ADDR_BITS 47
#define UNW_PY_INSTR_MAX 0xffffu

#define UNW_PY_EVAL_RANGES 4

/* How a run of Python frames ends, per version. */
enum unw_py_entry {
	UNW_PY_ENTRY_ONE = 0,  /* 3.10: one Python frame per interpreter-loop frame */
	UNW_PY_ENTRY_FLAG = 1, /* 3.11: the run's last frame has a byte set at frame_entry */
	UNW_PY_ENTRY_SHIM = 2, /* 3.12+: the run ends at a shim frame, whose byte at
				* frame_entry is 3 (FRAME_OWNED_BY_CSTACK): skipped */
};

/* Where a frame's instruction is. */
enum unw_py_instr {
	UNW_PY_INSTR_PTR = 0,	/* a pointer into the code object's bytecode, which
				 * starts code_adaptive bytes into the code object */
	UNW_PY_INSTR_INDEX = 1, /* an int, in code units (3.10's f_lasti) */
};

#define UNW_PY_NO_CFRAME 0xffff

/* A Python frame's place in the run of frames its interpreter-loop frame
 * runs (a deferred stack keeps its thread's frames so: bpf/cpu.h). */
enum unw_py_kind {
	UNW_PYK_FRAME = 0, /* a frame; the run goes on */
	UNW_PYK_LAST = 1,  /* a frame that ends its run */
	UNW_PYK_SHIM = 2,  /* the C stack's shim below a run (3.12+): no frame, ends it */
};

/* The offsets the BPF walker reads a thread's Python frames with. */
struct unw_py_layout {
	__u16 tstate_cframe;  /* tstate -> cframe pointer; UNW_PY_NO_CFRAME: none */
	__u16 cframe_frame;   /* -> the current frame, in the cframe, or in the
			       * tstate when there is no cframe */
	__u16 frame_code;     /* frame -> code object */
	__u16 frame_previous; /* frame -> its caller's frame */
	__u16 frame_instr;    /* frame -> its instruction (enum unw_py_instr) */
	__u16 frame_entry;    /* frame -> the byte enum unw_py_entry reads */
	__u16 code_adaptive;  /* code object -> its bytecode */
	__u16 tsd_offset;     /* glibc: the thread pointer -> its first block of
			       * pthread keys' values (16 bytes a key, value at +8) */
	__u8 entry_kind;      /* enum unw_py_entry */
	__u8 instr_kind;      /* enum unw_py_instr */
	__u8 minor;	      /* 10..13 */
	__u8 pad[5];
};

_Static_assert(sizeof(struct unw_py_layout) == 24, "unw_py_layout layout");

/* An interpreter file's pieces, keyed like unw_files. Offsets are FILE
 * offsets; addresses ELF addresses (the BPF side adds the load bias,
 * vm_start - pgoff * 4096 - text_delta, from the mapping a frame is in). */
/* A process's CPython interpreter as userspace found it among its mappings
 * (unw_py_pids, keyed by process id): the file, and the start of its
 * executable mapping. */
struct unw_py_pid {
	struct unw_file_key key;
	__u64 start;
};

struct unw_py_file {
	__u64 eval_start[UNW_PY_EVAL_RANGES], eval_end[UNW_PY_EVAL_RANGES];
	__u64 text_delta;   /* p_vaddr - p_offset of the executable segment */
	__u64 tss_key_addr; /* the pthread key (a u32) of the thread states */
	__u32 neval;
	__u32 pad;
	struct unw_py_layout layout;
};

#endif
