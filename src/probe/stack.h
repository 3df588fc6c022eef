/* stack.h: a stack as the probes hand it to the agent -- who ran (pid,
 * tid, the process's and the thread's names, when) and its frames, leaf
 * first, each with its kind: a kernel address, a native user address, a
 * Python frame, or a marker (a signal frame between two parts of a user
 * stack, the cut end of a truncated one). The CPU sampler makes one of
 * each sample and off-CPU wait (src/probe/cpu_sampler.c), the GPU feed of
 * each launch's or wait's stack (src/agent/gpu_feed.c); the aggregation
 * (src/agent/stack_agg.h) and `sonde top` take it, never the ring-buffer
 * records (bpf/cpu.h, bpf/gpu.h), whose layout is the BPF programs'.
 *
 * A native frame is an address in its process: its file and the offset in
 * it are the mapping's that held the address in the process's image at
 * ts_ns (symbolizer__image, symbolizer__mapping), found once per distinct
 * stack when it is named -- not per sample, where the same stacks repeat
 * thousands of times -- and kept in the profile's frames (struct
 * prof_frame's build_id, offset). */
#ifndef SONDE_PROBE_STACK_H
#define SONDE_PROBE_STACK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cpu.h" /* bpf/cpu.h: struct cpu_sample, CPU_MAX_FRAMES, CPU_COMM_LEN */

enum frame_kind {
	FRAME_KERNEL = 1, /* addr: a kernel address */
	FRAME_NATIVE,	  /* addr: a user address of the process */
	FRAME_PYTHON,	  /* addr: a Python frame's token (src/python/names.h) */
	FRAME_MARKER,	  /* addr: an enum stack_marker */
};

enum stack_marker {
	STACK_MARK_SIGNAL = 1, /* a signal handler's frames below, the interrupted code above */
	STACK_MARK_TRUNCATED,  /* the root: the stack went on past what was walked */
};

/* A frame's flags. */
#define FRAME_F_CALLER 1 /* addr is a return address: the call is at addr - 1 */

struct stack_frame {
	uint64_t addr;
	uint8_t kind;  /* enum frame_kind */
	uint8_t flags; /* FRAME_F_* */
	uint8_t pad[6];
};

/* Kernel frames, user frames and one marker for a truncated end. */
#define STACK_MAX_FRAMES (2 * CPU_MAX_FRAMES + 1)

struct stack {
	uint64_t ts_ns; /* when it was taken, CLOCK_MONOTONIC (bpf_ktime_get_ns) */
	uint32_t pid;	/* thread group id; 0: the idle task */
	uint32_t tid;
	uint32_t cpu;
	uint32_t nframes;
	char comm[CPU_COMM_LEN];     /* the process, NUL-terminated, maybe cut */
	char thread[CPU_COMM_LEN];   /* the thread */
	struct stack_frame frames[]; /* leaf first, nframes of them */
};

/* The address to look f up at: a return address's call, which is in the
 * caller even when the call is the function's last instruction. */
static inline uint64_t stack_frame__lookup(const struct stack_frame *f)
{
	return f->flags & FRAME_F_CALLER ? f->addr - 1 : f->addr;
}

/* Bytes of a stack of n frames. */
static inline size_t stack_size(size_t n)
{
	return sizeof(struct stack) + n * sizeof(struct stack_frame);
}

/* A stack with room for STACK_MAX_FRAMES (malloc()ed; free()). */
struct stack *stack__new(void);

/* s's kernel frames then user frames into st (room for STACK_MAX_FRAMES),
 * with a truncation marker at the root where s has CPU_SF_TRUNCATED. */
void stack__from_sample(struct stack *st, const struct cpu_sample *s);
/* A user stack of n frames (ips, leaf first; counts beyond CPU_MAX_FRAMES
 * are cut) into st, with who and when already set by the caller:
 * replaces st's frames. */
void stack__set_user(struct stack *st, const uint64_t *ips, int n, bool truncated);

/* Whether st has user frames (native, Python or a signal marker), which
 * need its process's image to be named. */
bool stack__has_user(const struct stack *st);

#endif
