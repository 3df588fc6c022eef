/* counters.h: the BPF programs' counters, one table per per-CPU array map:
 * each entry its enum index, its name (a label value on /metrics) and what
 * it counts. The enums of cpu.h, gpu.h and unwind_abi.h are made from them,
 * and so are the agent's copy and its exposition (src/probe/bpf_counters.c):
 * a counter added here is read and exported with nothing else to write.
 * X(INDEX, "name", "what one count is") */
#ifndef SONDE_BPF_COUNTERS_H
#define SONDE_BPF_COUNTERS_H

#define COUNTER_ENUM(e, name, help) e,
#define COUNTER_NAME(e, name, help) [e] = name,

/* The CPU sampler's drops (its drops map). */
#define CPU_DROPS(X)                                                                               \
	X(CPU_DROP_RINGBUF, "ringbuf", "a sample lost: the ring buffer was full")                  \
	X(CPU_DROP_KSTACK, "kstack",                                                               \
	  "a sample kept without its kernel stack: it could not be read")                          \
	X(CPU_DROP_USTACK, "ustack",                                                               \
	  "a user stack walked by frame pointers at its end: no room to keep the end for "         \
	  "userspace")                                                                             \
	X(CPU_DROP_OFFCPU_RATE, "offcpu_rate", "a wait not recorded: over the rate bound")         \
	X(CPU_DROP_OFFCPU_RINGBUF, "offcpu_ringbuf", "a wait lost: the ring buffer was full")      \
	X(CPU_DROP_OFFCPU_STORAGE, "offcpu_storage",                                               \
	  "a block not timed: no task storage for its thread")                                     \
	X(CPU_DROP_OFFCPU_KSTACK, "offcpu_kstack",                                                 \
	  "a wait kept without its kernel stack: it could not be read")

/* The CPU sampler's and the off-CPU profiler's counts (their counters map). */
#define CPU_COUNTERS(X)                                                                            \
	X(CPU_CNT_SAMPLES, "samples", "a sample handed to userspace")                              \
	X(CPU_CNT_FILTERED, "filtered", "a sample skipped by the pid filter")                      \
	X(CPU_CNT_LATE, "late", "a sample whose user stack's end was left to userspace")           \
	X(CPU_CNT_OFFCPU_BLOCKS, "offcpu_blocks", "a block timed, short ones included")            \
	X(CPU_CNT_OFFCPU_SHORT, "offcpu_short",                                                    \
	  "a block below the minimum: counted, not recorded")                                      \
	X(CPU_CNT_OFFCPU_SHORT_NS, "offcpu_short_ns", "a nanosecond of those")                     \
	X(CPU_CNT_OFFCPU_WAITS, "offcpu_waits", "a wait handed to userspace")                      \
	X(CPU_CNT_OFFCPU_WAIT_NS, "offcpu_wait_ns", "a nanosecond of those")                       \
	X(CPU_CNT_OFFCPU_DROPPED_NS, "offcpu_dropped_ns",                                          \
	  "a nanosecond of the waits dropped (rate, ring buffer)")                                 \
	X(CPU_CNT_OFFCPU_LEAF_ONLY, "offcpu_leaf_only",                                            \
	  "a wait handed over with its user leaf only")

/* The user-stack unwinder's counts (unw_counters). */
#define UNW_COUNTERS(X)                                                                            \
	X(UNW_CNT_TABLE, "table", "a frame stepped by a table row")                                \
	X(UNW_CNT_FP, "fp", "a frame stepped by frame pointers")                                   \
	X(UNW_CNT_MISS, "no_table",                                                                \
	  "a frame in a file with no table yet (frame pointers meanwhile)")                        \
	X(UNW_CNT_NO_VMA, "no_vma",                                                                \
	  "a pc in no mapping, or one not looked up: the mapping lock busy, or the walk's "        \
	  "lookups spent")                                                                         \
	X(UNW_CNT_STOP, "stop", "a stack that ended at _start or clone")                           \
	X(UNW_CNT_TRUNC, "truncated", "a stack cut at its most frames")                            \
	X(UNW_CNT_FAIL, "failed_step",                                                             \
	  "a stack that ended at a frame whose slots could not be read, or whose CFA did not "     \
	  "move up")                                                                               \
	X(UNW_CNT_PYTHON, "python", "a Python frame emitted")

/* The GPU probes' drops (their drops map). */
#define GPU_DROPS(X)                                                                               \
	X(GPU_DROP_RINGBUF, "ringbuf", "a record lost: the ring buffer was full")                  \
	X(GPU_DROP_INFLIGHT, "inflight", "a call not reported: the in-flight map was full")        \
	X(GPU_DROP_ALLOCS, "allocs", "an allocation not kept: its free will be unmatched")         \
	X(GPU_DROP_DEVICES, "devices",                                                             \
	  "a thread's or context's device not kept: the map was full")                             \
	X(GPU_DROP_READ, "read", "a user-memory read failed (the record kept, flagged)")           \
	X(GPU_DROP_STACK, "stack",                                                                 \
	  "a user stack that could not be walked: no memory for the walk (the record kept, with "  \
	  "the call's address)")                                                                   \
	X(GPU_DROP_RF, "record_function", "a RecordFunction's end not reported: its map was full") \
	X(GPU_DROP_LATE, "late_stack",                                                             \
	  "a stack walked by frame pointers at its end: no room to keep the end for userspace")    \
	X(GPU_DROP_CONTROL, "control",                                                             \
	  "a process's loaded code not told: the control ring was full")

/* The GPU probes' counts (their counters map). The *_LIVE ones go up on
 * insert and down on delete: their sum over CPUs is the entries in the map
 * (gauges, not counts: exported as map fill, not here). */
#define GPU_COUNTERS(X)                                                                            \
	X(GPU_CNT_EVENTS, "events", "a record submitted")                                          \
	X(GPU_CNT_FILTERED, "filtered", "a call skipped by the pid filter")                        \
	X(GPU_CNT_DEDUP, "dedup", "a driver call made inside a runtime call, not reported")        \
	X(GPU_CNT_NO_ENTRY, "no_entry", "a return whose entry was not seen (attached mid-call)")   \
	X(GPU_CNT_OVERWRITE, "overwrite",                                                          \
	  "an entry that replaced an unfinished call of the thread")                               \
	X(GPU_CNT_NESTED, "nested", "a call inside a call of the same layer, part of it")          \
	X(GPU_CNT_UNMATCHED, "unmatched", "a free of an address with no tracked allocation")       \
	X(GPU_CNT_ALLOCS_LIVE, "allocs_live", "entries in the allocs map")                         \
	X(GPU_CNT_INFLIGHT_LIVE, "inflight_live", "entries in the inflight map")                   \
	X(GPU_CNT_RF_LIVE, "rf_live", "entries in the torch_rf map")                               \
	X(GPU_CNT_LATE, "late", "a record whose stack's end was left to userspace")

#endif
