/* nvml.h: device memory from NVIDIA's management library, when it is
 * installed (libnvidia-ml.so.1 comes with the driver): each device's size,
 * and each process's use of each device as the driver accounts it -- what
 * nvidia-smi shows: its contexts, allocations, VMM handles and pools, seen
 * by Sonde's probes or not. Loaded with dlopen at run time, so Sonde neither
 * links nor needs it. Used by the agent for the capacity behind the GPU
 * memory alert and for the driver's side of the per-process memory metrics.
 *
 * Devices are NVML's indices. NVML numbers devices in PCI order, as CUDA
 * does with CUDA_DEVICE_ORDER=PCI_BUS_ID; without it CUDA puts the fastest
 * device first, so on a machine with mixed GPUs the indices may differ, and
 * CUDA_VISIBLE_DEVICES renumbers a process's devices from 0: which of a
 * process's CUDA devices each is, agent/cuda_visible.h says. */
#ifndef SONDE_AGENT_NVML_H
#define SONDE_AGENT_NVML_H

#include <stddef.h>
#include <stdint.h>

#include "metrics/gpu_metrics.h"

#define NVML_MAX_DEVICES 64
/* Processes read per device and poll; a device with more is skipped (said
 * once), as NVML gives no partial list. */
#define NVML_MAX_PROCS 1024
#define NVML_UUID_MAX 96 /* NVML_DEVICE_UUID_V2_BUFFER_SIZE */

struct nvml;

/* NVML loaded and initialized, until nvml__close. NULL with errno ENOENT
 * when it is not installed (said at debug level), or another errno when it
 * is but can't start (logged). */
struct nvml *nvml__open(void);
/* Shuts NVML down and unloads it. NULL is a no-op. */
void nvml__close(struct nvml *n);

/* Total memory of each device, by NVML index, into totals, and the memory
 * in use on it into used (NULL: not wanted) -- every process's and the
 * driver's own, nvidia-smi's Memory-Usage -- at most max each; 0 where a
 * device does not say. Returns the number of devices. */
int nvml__device_memory(struct nvml *n, uint64_t *totals, uint64_t *used, int max);

/* Every process's used memory on every device, now, into *rows (*count of
 * them): sorted by pid and device, a process listed twice on a device (once
 * per MIG instance) summed, processes whose use the driver does not give
 * (NVML_VALUE_NOT_AVAILABLE) left out. *rows is borrowed: valid until the
 * next call or nvml__close. Returns 0, -ENOSYS where NVML has no
 * per-process query (a driver older than R470), or -ENOMEM. */
int nvml__process_memory(struct nvml *n, const struct gpu_proc_mem **rows, size_t *count);

/* Each device's UUID ("GPU-..."; "" where NVML does not say), by NVML
 * index; *ndevs of them. Valid until nvml__close. */
const char *const *nvml__uuids(const struct nvml *n, int *ndevs);

#endif
