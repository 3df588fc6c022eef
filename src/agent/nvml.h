/* nvml.h: device memory sizes from NVIDIA's management library, when it is
 * installed (libnvidia-ml.so.1 comes with the driver). Loaded with dlopen at
 * run time, so Sonde neither links nor needs it. Used by the agent for the
 * capacity behind the GPU memory alert. */
#ifndef SONDE_AGENT_NVML_H
#define SONDE_AGENT_NVML_H

#include <stdint.h>

#define NVML_MAX_DEVICES 64

/* Total memory of each device, by NVML index, into totals (at most max).
 * Returns the number of devices, 0 when NVML is not installed, or a
 * negative errno when it is but fails (logged). NVML numbers devices in
 * PCI order, as CUDA does with CUDA_DEVICE_ORDER=PCI_BUS_ID; without it
 * CUDA puts the fastest device first, so on a machine with mixed GPUs the
 * indices may differ. */
int nvml_device_memory(uint64_t *totals, int max);

#endif
