/* layout.c: checks what bpf/gpu.h and the GPU probes assume about the CUDA
 * and NCCL ABIs against the REAL headers of /usr/local/cuda: struct offsets
 * the BPF programs read at (compile time: this file does not build if one
 * is wrong), enum values, and the element size of every ncclDataType_t
 * (run time, by the names NCCL gives its types). Prints what it checked;
 * exits non-zero on a mismatch. Run by test_gpu_real_layout.py. */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stddef.h>
#include <stdio.h>

#include "probe/gpu_probes.h"

/* cudaGetDeviceProperties: the BPF program reads totalGlobalMem here. */
_Static_assert(offsetof(struct cudaDeviceProp, totalGlobalMem) == GPU_CUDA_DEVICE_PROP_TOTAL_MEM,
	       "cudaDeviceProp.totalGlobalMem");
_Static_assert(sizeof(((struct cudaDeviceProp *)0)->totalGlobalMem) == 8, "totalGlobalMem size");

/* cudaLaunchKernelExC's config. */
_Static_assert(offsetof(cudaLaunchConfig_t, gridDim) == 0, "cudaLaunchConfig_t.gridDim");
_Static_assert(offsetof(cudaLaunchConfig_t, blockDim) == 12, "cudaLaunchConfig_t.blockDim");
_Static_assert(offsetof(cudaLaunchConfig_t, dynamicSmemBytes) == GPU_LAUNCH_CONFIG_SMEM,
	       "cudaLaunchConfig_t.dynamicSmemBytes");
_Static_assert(sizeof(((cudaLaunchConfig_t *)0)->dynamicSmemBytes) == 8, "dynamicSmemBytes size");
_Static_assert(offsetof(cudaLaunchConfig_t, stream) == GPU_LAUNCH_CONFIG_STREAM,
	       "cudaLaunchConfig_t.stream");

/* cuLaunchKernelEx's config. */
_Static_assert(offsetof(CUlaunchConfig, gridDimX) == 0 && offsetof(CUlaunchConfig, gridDimY) == 4 &&
		       offsetof(CUlaunchConfig, gridDimZ) == 8,
	       "CUlaunchConfig.gridDim*");
_Static_assert(offsetof(CUlaunchConfig, blockDimX) == 12 &&
		       offsetof(CUlaunchConfig, blockDimY) == 16 &&
		       offsetof(CUlaunchConfig, blockDimZ) == 20,
	       "CUlaunchConfig.blockDim*");
_Static_assert(offsetof(CUlaunchConfig, sharedMemBytes) == GPU_LAUNCH_CONFIG_SMEM,
	       "CUlaunchConfig.sharedMemBytes");
_Static_assert(sizeof(((CUlaunchConfig *)0)->sharedMemBytes) == 4, "sharedMemBytes size");
_Static_assert(offsetof(CUlaunchConfig, hStream) == GPU_LAUNCH_CONFIG_STREAM,
	       "CUlaunchConfig.hStream");

/* cuMemCreate's allocation properties: the device is location.id when
 * location.type is a device. */
_Static_assert(offsetof(CUmemAllocationProp, location) + offsetof(CUmemLocation, type) ==
		       GPU_MEM_PROP_LOC_TYPE,
	       "CUmemAllocationProp.location.type");
_Static_assert(offsetof(CUmemAllocationProp, location) + offsetof(CUmemLocation, id) ==
		       GPU_MEM_PROP_LOC_ID,
	       "CUmemAllocationProp.location.id");
_Static_assert(CU_MEM_LOCATION_TYPE_DEVICE == GPU_MEM_LOCATION_DEVICE,
	       "CU_MEM_LOCATION_TYPE_DEVICE");

/* A kernel node's kernel: the host stub, the CUfunction, or (_v2, with no
 * function) the CUkernel. */
_Static_assert(offsetof(struct cudaKernelNodeParams, func) == GPU_KERNEL_NODE_FUNC,
	       "cudaKernelNodeParams.func");
_Static_assert(offsetof(CUDA_KERNEL_NODE_PARAMS_v1, func) == GPU_KERNEL_NODE_FUNC,
	       "CUDA_KERNEL_NODE_PARAMS_v1.func");
_Static_assert(offsetof(CUDA_KERNEL_NODE_PARAMS_v2, func) == GPU_KERNEL_NODE_FUNC,
	       "CUDA_KERNEL_NODE_PARAMS_v2.func");
_Static_assert(offsetof(CUDA_KERNEL_NODE_PARAMS_v2, kern) == GPU_KERNEL_NODE_KERN,
	       "CUDA_KERNEL_NODE_PARAMS_v2.kern");

/* Arguments passed by value. dim3 (12 bytes) takes two registers; the
 * 128-byte ncclUniqueId goes on the stack, leaving rank in the third. */
_Static_assert(sizeof(dim3) == 12, "dim3");
_Static_assert(sizeof(ncclUniqueId) == 128, "ncclUniqueId");
_Static_assert(sizeof(CUdeviceptr) == 8 && sizeof(CUmemGenericAllocationHandle) == 8,
	       "device pointers and handles are 64-bit");
_Static_assert(sizeof(cudaError_t) == 4 && sizeof(CUresult) == 4 && sizeof(ncclResult_t) == 4,
	       "return codes are 32-bit");

/* The copy directions of gpu_event.copy.kind. */
_Static_assert(cudaMemcpyHostToHost == 0 && cudaMemcpyHostToDevice == 1 &&
		       cudaMemcpyDeviceToHost == 2 && cudaMemcpyDeviceToDevice == 3 &&
		       cudaMemcpyDefault == 4,
	       "cudaMemcpyKind");

/* The element size of every type NCCL has, by its name. */
static const struct {
	const char *name;
	int value;
	unsigned size;
} types[] = {
	{"ncclInt8", ncclInt8, 1},
	{"ncclUint8", ncclUint8, 1},
	{"ncclInt32", ncclInt32, 4},
	{"ncclUint32", ncclUint32, 4},
	{"ncclInt64", ncclInt64, 8},
	{"ncclUint64", ncclUint64, 8},
	{"ncclFloat16", ncclFloat16, 2},
	{"ncclFloat32", ncclFloat32, 4},
	{"ncclFloat64", ncclFloat64, 8},
	{"ncclBfloat16", ncclBfloat16, 2},
	{"ncclFloat8e4m3", ncclFloat8e4m3, 1},
	{"ncclFloat8e5m2", ncclFloat8e5m2, 1},
};

int main(void)
{
	int bad = 0;

	printf("nccl %d.%d.%d, cuda %d\n", NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, CUDA_VERSION);
	if (ncclNumTypes != sizeof(types) / sizeof(types[0])) {
		printf("FAIL: nccl.h has %d data types, the probes know %zu\n", (int)ncclNumTypes,
		       sizeof(types) / sizeof(types[0]));
		bad++;
	}
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		unsigned got = gpu_nccl_type_size(types[i].value);

		printf("%s %s = %d: %u bytes (probes: %u)\n", got == types[i].size ? "ok" : "FAIL",
		       types[i].name, types[i].value, types[i].size, got);
		bad += got != types[i].size;
	}
	if (gpu_nccl_type_size(ncclNumTypes) != 0) {
		printf("FAIL: type %d past the last has a size\n", (int)ncclNumTypes);
		bad++;
	}
	printf("%s: struct offsets checked at compile time\n", bad ? "FAIL" : "ok");
	return bad ? 1 : 0;
}
