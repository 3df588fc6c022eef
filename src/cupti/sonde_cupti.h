/* sonde_cupti.h: what libsonde_cupti.so (the CUPTI injection library,
 * sonde_cupti.c) hands Sonde's probes. The library calls its marker
 * functions, and the GPU probes (bpf/gpu.bpf.c) read their arguments with
 * uprobes: no socket, no shared memory, nothing when no probe is on them.
 * Fixed-width fields only: the same bytes are read on both sides. */
#ifndef SONDE_CUPTI_H
#define SONDE_CUPTI_H

#ifndef __VMLINUX_H__
#include <stdint.h>
#define SONDE_CUPTI_U32 uint32_t
#define SONDE_CUPTI_U64 uint64_t
#else
#define SONDE_CUPTI_U32 __u32
#define SONDE_CUPTI_U64 __u64
#endif

/* One kernel that ran on the GPU (sonde_cupti_kernel). start and end are
 * CUPTI's timestamps (the GPU's clock, in ns); sonde_cupti_clock pairs
 * that clock with the host's CLOCK_MONOTONIC. */
struct sonde_cupti_kernel {
	SONDE_CUPTI_U64 start, end;
	SONDE_CUPTI_U64 name; /* const char *: the kernel's (mangled) name */
	SONDE_CUPTI_U32 correlation;
	SONDE_CUPTI_U32 device;
	SONDE_CUPTI_U32 stream;
	SONDE_CUPTI_U32 context;
	SONDE_CUPTI_U32 grid[3], block[3];
};

/* The launch callbacks the library enables (cupti_callbacks.h's ids:
 * where CUPTI's headers are included), for it and the tests' CUPTI
 * client alike: kernel launches, and graph launches (CUPTI gives a graph's
 * kernels the correlation id of its launch). */
#define SONDE_CUPTI_RUNTIME_LAUNCHES                                                               \
	CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,                                           \
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,                              \
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,                               \
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,                          \
		CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,                                   \
		CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000
#define SONDE_CUPTI_DRIVER_LAUNCHES                                                                \
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,       \
		CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,                                          \
		CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,                                     \
		CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz

/* The marker functions' names, the symbols the probes look up. */
#define SONDE_CUPTI_LAUNCH "sonde_cupti_launch"
#define SONDE_CUPTI_KERNEL "sonde_cupti_kernel"
#define SONDE_CUPTI_CLOCK "sonde_cupti_clock"

#endif
