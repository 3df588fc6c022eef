/* late.h: the end of the user stacks the BPF walker left to userspace.
 *
 * A sample whose stack reaches a frame the BPF side can't take at that
 * moment -- a mapping of its process not looked up yet (one lookup a
 * sample), a file whose unwind table is not built yet (a program just
 * exec'ed, a library just loaded) -- comes with the registers of that frame,
 * the stack above them and the thread's Python frames still to be placed
 * (struct cpu_sample_late, bpf/cpu.h). Here it waits until the tables of
 * the files its frames are in are built, is walked on from that frame with
 * the same rules (bpf/unwind_rule.h) over the bytes it kept and the
 * process's mappings as the kernel reported them (the symbolizer's, so an
 * exited process's too), and is handed on whole. So no stack starts cut,
 * however new its code: a 25 ms process, the first moments after `import
 * torch`.
 *
 * Bounded: at most max_bytes of samples wait (past it, a new one is
 * finished at once with frame pointers where tables are missing); one
 * that waited max_wait_ns is finished so too. Used by the CPU sampler
 * (src/probe/cpu_sampler.c) and the GPU probes (src/probe/gpu_late.c).
 * Not thread-safe. */
#ifndef SONDE_UNWIND_LATE_H
#define SONDE_UNWIND_LATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/clock.h"
#include "cpu.h" /* bpf/cpu.h: struct cpu_sample, struct cpu_sample_late; bpf/late.h */

struct unwinder;
struct symbolizer;
struct unw_late;

#define UNW_LATE_MAX_BYTES_DEFAULT (64u << 20)
#define UNW_LATE_MAX_WAIT_NS_DEFAULT (10ull * NS_PER_SEC)

struct unw_late_opts {
	size_t max_bytes;     /* of samples waiting; 0: UNW_LATE_MAX_BYTES_DEFAULT */
	uint64_t max_wait_ns; /* 0: UNW_LATE_MAX_WAIT_NS_DEFAULT */
};

/* Walks with u's tables and sym's mappings, both borrowed. */
struct unw_late *unw_late__new(struct unwinder *u, struct symbolizer *sym,
			       const struct unw_late_opts *opts);
void unw_late__free(struct unw_late *l);

/* Called with each finished sample; it lives until the call returns. */
typedef void (*unw_late_fn)(void *ctx, const struct cpu_sample *s);

/* Takes a deferred sample of size bytes: the record up to the stack pages
 * it kept (copied). A malformed one (a record the BPF side did not write)
 * is refused with a warning: -EINVAL. 0 otherwise. */
int unw_late__add(struct unw_late *l, const struct cpu_sample_late *r, size_t size);

/* The same for a stack in two parts, another record's (the GPU probes'):
 * s's walked frames (its nuser) and, of late_size bytes, the end. */
int unw_late__take(struct unw_late *l, const struct cpu_sample *s, const struct late_stack *h,
		   size_t late_size);

/* Finishes the samples whose files' tables are all there, and those that
 * waited too long (all of them with force: the end of a recording), in
 * the order they came, calling fn for each. Returns how many. */
size_t unw_late__poll(struct unw_late *l, bool force, unw_late_fn fn, void *ctx);

struct unw_late_stats {
	uint64_t taken;	      /* deferred samples taken */
	uint64_t finished;    /* handed on */
	uint64_t ended;	      /* ... their stack walked to its end (_start, clone) */
	uint64_t waited_out;  /* ... finished without a table that never came in time */
	uint64_t crowded_out; /* ... finished at once: the waiting room was full */
	uint64_t stack_cut;   /* ... stopped at the end of the stack bytes kept */
	uint64_t no_python;   /* ... reached the interpreter without the thread's Python frames */
	uint64_t frames;      /* frames the walks added */
	uint64_t malformed;   /* records refused */
	uint64_t waiting, waiting_bytes; /* now */
	uint64_t peak_bytes;		 /* the most that waited at once */
};
void unw_late__stats(const struct unw_late *l, struct unw_late_stats *out);

#endif
