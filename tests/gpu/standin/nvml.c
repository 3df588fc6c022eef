/*
 * nvml.c: a stand-in for NVIDIA's management library (libnvidia-ml.so.1), test-only:
 * the few functions Sonde's agent calls to learn each device's memory, over the same
 * fake devices as the CUDA stand-ins (SONDE_STANDIN_GPUS, default 8;
 * SONDE_STANDIN_GPU_MEM bytes each, default 80 GiB). NVML's header is not part of the
 * toolkit installed here, so the declarations follow NVML's documented C API (nvml.h):
 * functions return nvmlReturn_t (0 NVML_SUCCESS, 1 NVML_ERROR_UNINITIALIZED,
 * 2 NVML_ERROR_INVALID_ARGUMENT), devices are opaque handles. SONDE_STANDIN_NVML_FAIL=1
 * makes nvmlInit_v2 fail, as it does on a machine whose driver is not loaded.
 */
#include <stdint.h>
#include <stdlib.h>

#include "standin.h"

typedef enum {
	NVML_SUCCESS = 0,
	NVML_ERROR_UNINITIALIZED = 1,
	NVML_ERROR_INVALID_ARGUMENT = 2,
	NVML_ERROR_DRIVER_NOT_LOADED = 9,
} nvmlReturn_t;

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

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
	if (!initialized)
		return NVML_ERROR_UNINITIALIZED;
	if (!device || !memory || device < devices || device >= devices + device_count())
		return NVML_ERROR_INVALID_ARGUMENT;
	memory->total = (unsigned long long)standin_env_int("SONDE_STANDIN_GPU_MEM", 80ll << 30);
	memory->used = 0;
	memory->free = memory->total;
	return NVML_SUCCESS;
}
