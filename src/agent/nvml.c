/* nvml.c: device memory sizes through libnvidia-ml, loaded with dlopen. See
 * nvml.h. The few declarations below are NVML's documented C ABI (nvml.h of
 * the CUDA toolkit): functions return nvmlReturn_t, 0 on success. */
#include "agent/nvml.h"
#include "common/log.h"

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>

typedef int nvml_return;
typedef void *nvml_device;
struct nvml_memory {
	unsigned long long total, free, used;
};

int nvml_device_memory(uint64_t *totals, int max)
{
	nvml_return (*init)(void), (*shutdown)(void), (*count)(unsigned int *);
	nvml_return (*handle)(unsigned int, nvml_device *);
	nvml_return (*meminfo)(nvml_device, struct nvml_memory *);
	const char *(*errstr)(nvml_return);
	unsigned int n = 0;
	int ret = 0, r;
	void *lib;

	lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		pr_debug("NVML not available (%s): GPU memory sizes come from the applications "
			 "or --gpu-memory",
			 dlerror());
		return 0;
	}
	init = (nvml_return(*)(void))dlsym(lib, "nvmlInit_v2");
	shutdown = (nvml_return(*)(void))dlsym(lib, "nvmlShutdown");
	count = (nvml_return(*)(unsigned int *))dlsym(lib, "nvmlDeviceGetCount_v2");
	handle = (nvml_return(*)(unsigned int, nvml_device *))dlsym(
		lib, "nvmlDeviceGetHandleByIndex_v2");
	meminfo = (nvml_return(*)(nvml_device, struct nvml_memory *))dlsym(
		lib, "nvmlDeviceGetMemoryInfo");
	errstr = (const char *(*)(nvml_return))dlsym(lib, "nvmlErrorString");
	if (!init || !shutdown || !count || !handle || !meminfo) {
		pr_warn("libnvidia-ml.so.1 lacks the functions Sonde uses -- is it a driver older "
			"than 2012?");
		ret = -ENOSYS;
		goto out;
	}
	r = init();
	if (r) {
		pr_warn("NVML can't start: %s -- GPU memory sizes come from the applications "
			"or --gpu-memory",
			errstr ? errstr(r) : "error");
		ret = -EIO;
		goto out;
	}
	r = count(&n);
	if (r)
		n = 0;
	if (n > (unsigned int)max)
		n = (unsigned int)max;
	for (unsigned int i = 0; i < n; i++) {
		struct nvml_memory m = {0};
		nvml_device d;

		if (handle(i, &d) || meminfo(d, &m)) {
			totals[i] = 0;
			continue;
		}
		totals[i] = m.total;
	}
	ret = (int)n;
	shutdown();
out:
	dlclose(lib);
	return ret;
}
