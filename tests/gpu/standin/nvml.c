/*
 * nvml.c: a stand-in for NVIDIA's management library (libnvidia-ml.so.1), test-only:
 * the functions Sonde's agent calls to learn each device's memory and each process's
 * use of it, over the same fake devices as the CUDA stand-ins (SONDE_STANDIN_GPUS,
 * default 8; SONDE_STANDIN_GPU_MEM bytes each, default 80 GiB). Every process's fake GPU
 * lives in its own copy of the libcuda.so.1 stand-in, which publishes its per-device use
 * (account.c); this library reads those accounts, as the real one asks the driver. NVML's
 * header is not part of the toolkit installed here, so the declarations follow NVML's
 * documented C API (nvml.h of CUDA 12.6, NVML_API_VERSION 12): functions return
 * nvmlReturn_t, devices are opaque handles, nvmlProcessInfo_t is nvmlProcessInfo_v2_t.
 * SONDE_STANDIN_NVML_FAIL=1 makes nvmlInit_v2 fail, as it does on a machine whose driver
 * is not loaded.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "standin.h"

typedef enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_INSUFFICIENT_SIZE = 7,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
} nvmlReturn_t;

/* nvml.h: "Information about running compute processes on the GPU". gpuInstanceId and
 * computeInstanceId are 0xFFFFFFFF when MIG is off. */
typedef struct nvmlProcessInfo_v2_st {
	unsigned int pid;
	unsigned long long usedGpuMemory; /* bytes; NVML_VALUE_NOT_AVAILABLE where unknown */
	unsigned int gpuInstanceId;
	unsigned int computeInstanceId;
} nvmlProcessInfo_v2_t, nvmlProcessInfo_t;

typedef struct nvmlDevice_st *nvmlDevice_t;

typedef struct nvmlMemory_st {
	unsigned long long total;
	unsigned long long free;
	unsigned long long used;
} nvmlMemory_t;

static int initialized;
static struct nvmlDevice_st {
	unsigned int index;
} devices[64];

static unsigned int device_count(void)
{
	int64_t n = standin_env_int("SONDE_STANDIN_GPUS", 8);

	return n < 0 ? 0 : n > 64 ? 64 : (unsigned int)n;
}

nvmlReturn_t nvmlInit_v2(void)
{
	const char *fail = getenv("SONDE_STANDIN_NVML_FAIL");

	if (fail && *fail == '1')
		return NVML_ERROR_DRIVER_NOT_LOADED;
	initialized++;
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	initialized--;
	return NVML_SUCCESS;
}

const char *nvmlErrorString(nvmlReturn_t r)
{
	switch (r) {
	case NVML_SUCCESS:
		return "Success";
	case NVML_ERROR_UNINITIALIZED:
		return "Uninitialized";
	case NVML_ERROR_INVALID_ARGUMENT:
		return "Invalid Argument";
	case NVML_ERROR_INSUFFICIENT_SIZE:
		return "Insufficient Size";
	case NVML_ERROR_DRIVER_NOT_LOADED:
		return "Driver Not Loaded";
	}
	return "Unknown Error";
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!count)
		return NVML_ERROR_INVALID_ARGUMENT;
	*count = device_count();
	return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!device || index >= device_count())
		return NVML_ERROR_INVALID_ARGUMENT;
	devices[index].index = index;
	*device = &devices[index];
	return NVML_SUCCESS;
}

static bool valid(nvmlDevice_t device)
{
	return device && device >= devices && device < devices + device_count();
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!valid(device) || !uuid)
		return NVML_ERROR_INVALID_ARGUMENT;
	if (length < STANDIN_UUID_LEN)
		return NVML_ERROR_INSUFFICIENT_SIZE;
	standin_gpu_uuid((int)(device - devices), uuid, length);
	return NVML_SUCCESS;
}

/* The processes using one device, from their accounts, by pid. */
struct dev_procs {
	unsigned int index;
	size_t n, cap;
	nvmlProcessInfo_t *infos;
};

static void add_proc(void *ctx, uint32_t pid, const struct standin_dev_use *dev)
{
	struct dev_procs *dp = ctx;
	const struct standin_dev_use *u = &dev[dp->index];
	nvmlProcessInfo_t *grown;

	/* Listed while it has a context or memory on the device, as the driver lists it. */
	if (!u->contexts && !u->used)
		return;
	if (dp->n == dp->cap) {
		grown = realloc(dp->infos, (dp->cap * 2 + 16) * sizeof(*grown));
		if (!grown)
			return;
		dp->infos = grown;
		dp->cap = dp->cap * 2 + 16;
	}
	dp->infos[dp->n++] = (nvmlProcessInfo_t){
		.pid = pid,
		.usedGpuMemory = u->used,
		.gpuInstanceId = 0xFFFFFFFFu,
		.computeInstanceId = 0xFFFFFFFFu,
	};
}

static int by_pid(const void *a, const void *b)
{
	unsigned int x = ((const nvmlProcessInfo_t *)a)->pid,
		     y = ((const nvmlProcessInfo_t *)b)->pid;

	return x < y ? -1 : x > y;
}

static void read_procs(nvmlDevice_t device, struct dev_procs *dp)
{
	*dp = (struct dev_procs){.index = device->index};
	standin_account_each(add_proc, dp);
	if (dp->n)
		qsort(dp->infos, dp->n, sizeof(*dp->infos), by_pid);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	struct dev_procs dp;

	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!valid(device) || !memory)
		return NVML_ERROR_INVALID_ARGUMENT;
	memory->total = (unsigned long long)standin_env_int("SONDE_STANDIN_GPU_MEM", 80ll << 30);
	read_procs(device, &dp);
	memory->used = 0;
	for (size_t i = 0; i < dp.n; i++)
		memory->used += dp.infos[i].usedGpuMemory;
	free(dp.infos);
	if (memory->used > memory->total)
		memory->used = memory->total;
	memory->free = memory->total - memory->used;
	return NVML_SUCCESS;
}

/* nvmlDeviceGetComputeRunningProcesses_v3 and _v2 (the same nvmlProcessInfo_v2_t): with
 * *infoCount too small for every process, NVML_ERROR_INSUFFICIENT_SIZE and the count
 * needed in *infoCount (infos untouched; NULL allowed when *infoCount is 0); otherwise
 * the processes and their count. */
static nvmlReturn_t compute_procs(nvmlDevice_t device, unsigned int *infoCount,
				  nvmlProcessInfo_t *infos)
{
	nvmlReturn_t r = NVML_SUCCESS;
	struct dev_procs dp;

	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!valid(device) || !infoCount || (*infoCount && !infos))
		return NVML_ERROR_INVALID_ARGUMENT;
	read_procs(device, &dp);
	if (dp.n > *infoCount)
		r = NVML_ERROR_INSUFFICIENT_SIZE;
	else if (dp.n)
		memcpy(infos, dp.infos, dp.n * sizeof(*infos));
	*infoCount = (unsigned int)dp.n;
	free(dp.infos);
	return r;
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int *infoCount,
						     nvmlProcessInfo_t *infos)
{
	return compute_procs(device, infoCount, infos);
}

nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v2(nvmlDevice_t device, unsigned int *infoCount,
						     nvmlProcessInfo_v2_t *infos)
{
	return compute_procs(device, infoCount, infos);
}
