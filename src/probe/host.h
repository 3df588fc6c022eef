/* host.h: what every BPF-using piece of the agent asks of the host -- the
 * checks run before loading anything (each failing with a one-line message
 * that says what to do), its CPUs, the memlock limit, and the sizes and sums
 * of its per-CPU maps (common/percpu.h) and ring buffers. Used by the
 * samplers, the GPU probes, the sideband and the subcommands that start
 * them. */
#ifndef SONDE_PROBE_HOST_H
#define SONDE_PROBE_HOST_H

#include <stddef.h>
#include <stdint.h>

/* percpu_sum(), the sum of a per-CPU map's entry, is src/common/percpu.h's:
 * the unwinder reads its counters with it too. */
#include "common/percpu.h"

/* CPUs a per-CPU map may have (its values are read into a stack array). */
#define HOST_MAX_CPUS PERCPU_MAX_CPUS

/* 0 when the process may load BPF programs and open system-wide perf events
 * (root, or CAP_BPF + CAP_PERFMON, or CAP_SYS_ADMIN); else prints why and
 * returns -EPERM. */
int check_privileges(void);
/* 0 when the kernel exposes its BTF (/sys/kernel/btf/vmlinux); else prints
 * why and returns -ENOENT. */
int check_btf(void);
/* Mounts tracefs on /sys/kernel/tracing when it is not mounted (as perf
 * does): tracepoint ids live there. Returns 0 or a negative errno. */
int ensure_tracefs(void);
/* Online CPUs from /sys/devices/system/cpu/online into cpus (at most max).
 * Returns the count or a negative errno. */
int online_cpus(int *cpus, int max);
/* Raises RLIMIT_MEMLOCK for kernels that still charge BPF maps to it. */
void raise_memlock(void);
/* The size of a BPF ring buffer holding at least want bytes: a power of
 * two, at least a page, at most max. */
size_t ringbuf_size(size_t want, size_t max);
/* The size an environment variable sets, as the command line writes sizes
 * (common/bytes.h: 4K, 64M...): a map's or ring's size over the default.
 * 0 when unset; also, with a warning, when it is not a size. */
uint64_t env_size(const char *name);

#endif
