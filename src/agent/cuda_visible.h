/* cuda_visible.h: which of the machine's GPUs (NVML's indices) each CUDA
 * device of a process is, so that what the probes saw it allocate on its
 * device N (a CUDA ordinal) is set against the driver's account of the same
 * GPU. A process sees the GPUs its container was given
 * (NVIDIA_VISIBLE_DEVICES, as the NVIDIA container runtime reads it: the
 * GPUs in PCI order, as NVML numbers them), narrowed and ordered by
 * CUDA_VISIBLE_DEVICES (indices into those, or UUIDs "GPU-..." and unique
 * prefixes of them, up to the first entry that names none or one already
 * listed, as the driver reads it). Where neither is set, ordinal N is
 * NVML's device N -- CUDA's default order puts the fastest device first,
 * which on a machine of one GPU model is PCI order too. Both are read from
 * /proc/PID/environ, the environment the process started with: one that
 * sets CUDA_VISIBLE_DEVICES itself before it loads CUDA (os.environ in
 * Python) is not seen. */
#ifndef SONDE_AGENT_CUDA_VISIBLE_H
#define SONDE_AGENT_CUDA_VISIBLE_H

#include <stddef.h>
#include <stdint.h>

#define CUDA_VISIBLE_MAX 64 /* devices of a machine, at most */

/* The NVML index of each CUDA ordinal of a process into nvml_of (max
 * entries), from its variables (NULL: unset) and NVML's devices' UUIDs
 * (ndevs; NULL or "" where unknown). Returns how many devices it sees. */
int cuda_visible__map(const char *cvd, const char *nvd, const char *const *uuids, int ndevs,
		      int *nvml_of, int max);

/* The same for pid, its variables read from /proc/PID/environ. -errno
 * when that can't be read (a process gone). */
int cuda_visible__of_pid(uint32_t pid, const char *const *uuids, int ndevs, int *nvml_of, int max);

#endif
