/* gpu_late.h: the GPU calls whose stacks reached code without an unwind
 * table yet (struct gpu_rec_late, bpf/gpu.h: a library just loaded, its
 * table still being built), walked on in userspace once the table is in
 * (src/unwind/late.c) -- and the events of their processes that came
 * after them, held back so that each process's events are handed on in
 * the order they came (a scope's begin before its launches, an allocation
 * before its free). Other processes' events are not held.
 *
 * So a process need not be stopped while the tables of what it loads are
 * built: its calls meanwhile keep their callers (the Python line under a
 * libtorch_cpu whose table takes seconds), late by as long.
 *
 * Bounded: an event waits max_wait_ns at most (its stack is then finished
 * with frame pointers where a table is missing), and past max_bytes of
 * waiting events all are handed on so. Used by the GPU probes
 * (src/probe/gpu_probes.c). Not thread-safe. */
#ifndef SONDE_PROBE_GPU_LATE_H
#define SONDE_PROBE_GPU_LATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/clock.h"
#include "late.h" /* bpf/late.h: struct late_stack */

struct unwinder;
struct symbolizer;
struct gpu_event; /* probe/gpu_probes.h */
struct gpu_late;

#define GPU_LATE_MAX_BYTES_DEFAULT (64u << 20)
#define GPU_LATE_MAX_WAIT_NS_DEFAULT (10ull * NS_PER_SEC)

struct gpu_late_opts {
	size_t max_bytes;     /* of events waiting, stacks' ends included; 0: the default */
	uint64_t max_wait_ns; /* 0: the default */
};

/* Walks with u's tables and sym's mappings, both borrowed. */
struct gpu_late *gpu_late__new(struct unwinder *u, struct symbolizer *sym,
			       const struct gpu_late_opts *opts);
void gpu_late__free(struct gpu_late *gl);

/* Whether pid's events wait behind one whose stack is being finished:
 * its next event must go through gpu_late__add then. */
bool gpu_late__waiting(const struct gpu_late *gl, uint32_t pid);

/* Takes ev, copied (its stack and kernel name with it), to be handed on
 * after pid's events before it. With end (end_size bytes), ev's stack goes
 * on there: walked once the tables it needs are in. An end that is not
 * one (a record the BPF side did not write) is refused with a warning
 * (-EINVAL), ev taken with the stack it has. 0 otherwise. */
int gpu_late__add(struct gpu_late *gl, const struct gpu_event *ev, const struct late_stack *end,
		  size_t end_size);

/* Walks the waiting stacks whose tables are in, and those that waited too
 * long (all of them with force: the end), then hands on each process's
 * events, in order, up to the first whose stack still waits. Returns how
 * many were handed on. */
size_t gpu_late__poll(struct gpu_late *gl, bool force,
		      void (*fn)(void *ctx, const struct gpu_event *ev), void *ctx);

struct gpu_late_stats {
	uint64_t late;	      /* events whose stack's end was walked here */
	uint64_t held_back;   /* events that waited behind one of them */
	uint64_t malformed;   /* stacks' ends refused */
	uint64_t waited_out;  /* ... walked without a table that never came in time */
	uint64_t crowded_out; /* ... walked at once, or early: too much was waiting */
	uint64_t waiting;     /* events waiting now */
	uint64_t waiting_bytes;
	uint64_t peak_bytes;  /* the most that waited at once */
	uint64_t max_wait_ns; /* the longest an event waited */
};
void gpu_late__stats(const struct gpu_late *gl, struct gpu_late_stats *out);

#endif
