/* nvml.c: device memory through libnvidia-ml, loaded with dlopen. See
 * nvml.h. The declarations below are NVML's documented C ABI (nvml.h of
 * the CUDA toolkit, NVML_API_VERSION 12): functions return nvmlReturn_t,
 * 0 on success; nvmlProcessInfo_t is nvmlProcessInfo_v2_t, the layout of
 * both nvmlDeviceGetComputeRunningProcesses_v3 and _v2. */
#include "agent/nvml.h"
#include "common/log.h"
#include "common/xalloc.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

typedef int nvml_return;
typedef void *nvml_device;

#define NVML_OK 0
#define NVML_INSUFFICIENT_SIZE 7 /* NVML_ERROR_INSUFFICIENT_SIZE */
/* NVML_VALUE_NOT_AVAILABLE, (-1) in an unsigned long long field. */
#define NVML_NOT_AVAILABLE (~0ull)

struct nvml_memory {
	unsigned long long total, free, used;
};

/* nvmlProcessInfo_v2_t */
struct nvml_process_info {
	unsigned int pid;
	unsigned long long used_gpu_memory;
	unsigned int gpu_instance_id, compute_instance_id;
};

struct nvml {
	void *lib;
	nvml_return (*shutdown)(void);
	nvml_return (*count)(unsigned int *);
	nvml_return (*handle)(unsigned int, nvml_device *);
	nvml_return (*meminfo)(nvml_device, struct nvml_memory *);
	/* _v3, else _v2; NULL: no per-process query. */
	nvml_return (*procs)(nvml_device, unsigned int *, struct nvml_process_info *);
	const char *(*errstr)(nvml_return);
	nvml_return (*uuid)(nvml_device, char *, unsigned int); /* NULL: none */
	unsigned int ndevs;
	char uuids[NVML_MAX_DEVICES][NVML_UUID_MAX];
	const char *uuidp[NVML_MAX_DEVICES];
	struct nvml_process_info infos[NVML_MAX_PROCS];
	struct gpu_proc_mem *rows;
	size_t nrows, caprows;
	bool said_full[NVML_MAX_DEVICES], said_error;
};

struct nvml *nvml__open(void)
{
	nvml_return (*init)(void);
	struct nvml *n;
	void *lib;
	int r;

	lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		pr_debug("NVML not available (%s): GPU memory sizes come from the applications "
			 "or --gpu-memory, and no per-process use from the driver",
			 dlerror());
		errno = ENOENT;
		return NULL;
	}
	n = xcalloc(1, sizeof(*n));
	n->lib = lib;
	init = (nvml_return(*)(void))dlsym(lib, "nvmlInit_v2");
	n->shutdown = (nvml_return(*)(void))dlsym(lib, "nvmlShutdown");
	n->count = (nvml_return(*)(unsigned int *))dlsym(lib, "nvmlDeviceGetCount_v2");
	n->handle = (nvml_return(*)(unsigned int, nvml_device *))dlsym(
		lib, "nvmlDeviceGetHandleByIndex_v2");
	n->meminfo = (nvml_return(*)(nvml_device, struct nvml_memory *))dlsym(
		lib, "nvmlDeviceGetMemoryInfo");
	n->errstr = (const char *(*)(nvml_return))dlsym(lib, "nvmlErrorString");
	n->uuid =
		(nvml_return(*)(nvml_device, char *, unsigned int))dlsym(lib, "nvmlDeviceGetUUID");
	n->procs = (nvml_return(*)(nvml_device, unsigned int *, struct nvml_process_info *))dlsym(
		lib, "nvmlDeviceGetComputeRunningProcesses_v3");
	if (!n->procs)
		n->procs = (nvml_return(*)(nvml_device, unsigned int *, struct nvml_process_info *))
			dlsym(lib, "nvmlDeviceGetComputeRunningProcesses_v2");
	if (!init || !n->shutdown || !n->count || !n->handle || !n->meminfo) {
		pr_warn("libnvidia-ml.so.1 lacks the functions Sonde uses -- is it a driver older "
			"than 2012?");
		errno = ENOSYS;
		goto fail;
	}
	r = init();
	if (r) {
		pr_warn("NVML can't start: %s -- GPU memory sizes come from the applications "
			"or --gpu-memory",
			n->errstr ? n->errstr(r) : "error");
		errno = EIO;
		goto fail;
	}
	if (n->count(&n->ndevs))
		n->ndevs = 0;
	if (n->ndevs > NVML_MAX_DEVICES)
		n->ndevs = NVML_MAX_DEVICES;
	for (unsigned int i = 0; i < n->ndevs; i++) {
		nvml_device d;

		n->uuidp[i] = n->uuids[i];
		if (!n->uuid || n->handle(i, &d) || n->uuid(d, n->uuids[i], NVML_UUID_MAX))
			n->uuids[i][0] = '\0';
		n->uuids[i][NVML_UUID_MAX - 1] = '\0';
	}
	if (!n->procs)
		pr_info("NVML has no per-process memory query (a driver older than R470): "
			"GPU memory per process comes from the probes only");
	return n;
fail:
	dlclose(lib);
	free(n);
	return NULL;
}

void nvml__close(struct nvml *n)
{
	if (!n)
		return;
	n->shutdown();
	dlclose(n->lib);
	free(n->rows);
	free(n);
}

int nvml__device_memory(struct nvml *n, uint64_t *totals, uint64_t *used, int max)
{
	int ndevs = (int)n->ndevs < max ? (int)n->ndevs : max;

	for (int i = 0; i < ndevs; i++) {
		struct nvml_memory m = {0};
		nvml_device d;

		if (n->handle((unsigned int)i, &d) || n->meminfo(d, &m))
			m = (struct nvml_memory){0};
		totals[i] = m.total;
		if (used)
			used[i] = m.used;
	}
	return ndevs;
}

/* Appends one device's processes to the rows. -ENOMEM when they can't grow. */
static int read_device(struct nvml *n, unsigned int dev)
{
	unsigned int count = NVML_MAX_PROCS;
	nvml_device d;
	int r;

	if (n->handle(dev, &d))
		return 0;
	r = n->procs(d, &count, n->infos);
	if (r == NVML_INSUFFICIENT_SIZE) {
		/* count says how many there are; NVML fills nothing then. */
		if (!n->said_full[dev])
			pr_warn("GPU %u runs %u processes, more than the %d Sonde reads: its "
				"per-process memory from NVML is left out",
				dev, count, NVML_MAX_PROCS);
		n->said_full[dev] = true;
		return 0;
	}
	if (r) {
		if (!n->said_error)
			pr_warn("can't read the processes of GPU %u from NVML: %s -- GPU memory "
				"per process comes from the probes only",
				dev, n->errstr ? n->errstr(r) : "error");
		n->said_error = true;
		return 0;
	}
	if (count > NVML_MAX_PROCS) /* a library that breaks its contract */
		count = NVML_MAX_PROCS;
	if (array_grow((void **)&n->rows, &n->caprows, n->nrows + count, sizeof(*n->rows)))
		return -ENOMEM;
	for (unsigned int i = 0; i < count; i++) {
		const struct nvml_process_info *p = &n->infos[i];

		if (p->used_gpu_memory == NVML_NOT_AVAILABLE)
			continue;
		n->rows[n->nrows++] = (struct gpu_proc_mem){
			.pid = p->pid,
			.device = (int)dev,
			.bytes = p->used_gpu_memory,
			.cuda_device = -1,
		};
	}
	return 0;
}

const char *const *nvml__uuids(const struct nvml *n, int *ndevs)
{
	*ndevs = (int)n->ndevs;
	return n->uuidp;
}

int nvml__process_memory(struct nvml *n, const struct gpu_proc_mem **rows, size_t *count)
{
	size_t j = 0;
	int err;

	*rows = NULL;
	*count = 0;
	n->nrows = 0;
	if (!n->procs)
		return -ENOSYS;
	for (unsigned int dev = 0; dev < n->ndevs; dev++) {
		err = read_device(n, dev);
		if (err)
			return err;
	}
	if (!n->nrows)
		return 0;
	qsort(n->rows, n->nrows, sizeof(*n->rows), gpu_proc_mem__cmp);
	/* One row per process and device: MIG lists a process once per instance. */
	for (size_t i = 1; i < n->nrows; i++) {
		if (!gpu_proc_mem__cmp(&n->rows[j], &n->rows[i]))
			n->rows[j].bytes += n->rows[i].bytes;
		else
			n->rows[++j] = n->rows[i];
	}
	n->nrows = j + 1;
	*rows = n->rows;
	*count = n->nrows;
	return 0;
}
