/* percpu.h: the sum of a per-CPU BPF array's entry over the possible CPUs --
 * how every BPF-using room (the samplers, the GPU probes, the unwinder)
 * reads the counters its programs keep per CPU. */
#ifndef SONDE_COMMON_PERCPU_H
#define SONDE_COMMON_PERCPU_H

#include <stdint.h>

/* CPUs a per-CPU map may have (its values are read into a stack array). */
#define PERCPU_MAX_CPUS 4096

/* The sum over the possible CPUs of entry key of the per-CPU array map fd;
 * 0 when it can't be read. */
uint64_t percpu_sum(int fd, uint32_t key);

#endif
