/* rb_drain.h: a thread that drains a BPF ring buffer into memory, so that
 * a reader that stalls (building unwind tables, ending a window,
 * symbolizing) loses nothing: the kernel's ring holds a fraction of a
 * second of GPU launches with their stacks, the queue here holds seconds.
 * The thread only copies records; the owner decodes them on its own
 * thread with rb_drain__consume(), each ring's in the order they were
 * submitted. Past
 * max_bytes queued, the thread stops draining until the owner catches up:
 * the kernel's ring then fills and the BPF side counts what it loses.
 * Used by the GPU probes (src/probe/gpu_probes.c). */
#ifndef SONDE_PROBE_RB_DRAIN_H
#define SONDE_PROBE_RB_DRAIN_H

#include <stddef.h>
#include <stdint.h>

struct rb_drain;

/* Record handler: as libbpf's ring_buffer_sample_fn (data lives until it
 * returns). */
typedef int (*rb_drain_fn)(void *ctx, void *data, size_t size);

/* Starts draining the ring buffer maps map_fds (n of them, into one
 * queue: each ring's records in their order), queueing at most max_bytes
 * (0: 128 MiB). NULL with errno set on failure. */
struct rb_drain *rb_drain__new(const int *map_fds, size_t n, size_t max_bytes);
/* Waits up to timeout_ms for records to be queued (0: doesn't wait).
 * Returns 1 when some are, else 0. */
int rb_drain__wait(struct rb_drain *d, int timeout_ms);
/* Calls fn for every queued record, oldest first; the number handled. */
int rb_drain__consume(struct rb_drain *d, rb_drain_fn fn, void *ctx);
/* Returns once every record submitted before the call is queued (wakes
 * the thread for a pass; tens of microseconds), or the queue is full. */
void rb_drain__flush(struct rb_drain *d);
/* Stops the thread and queues what is left in the ring (consume it
 * next). */
void rb_drain__stop(struct rb_drain *d);
/* The most bytes that were queued at once. */
uint64_t rb_drain__peak(struct rb_drain *d);
/* Stops the thread; queued records are dropped. NULL: a no-op. */
void rb_drain__free(struct rb_drain *d);

#endif
