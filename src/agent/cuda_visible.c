/* cuda_visible.c: a process's CUDA devices among the machine's GPUs. See
 * cuda_visible.h. */
#include "agent/cuda_visible.h"
#include "agent/service.h"

#include "common/xalloc.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define VAR_MAX 1024 /* bytes of a variable's value read, at most */

/* The device entry [p, p + len) names among the candidates cand (NVML
 * indices, ncand of them): an index into them, or a UUID or a unique prefix
 * of one. -1 when it names none, or more than one. */
static int entry_device(const char *p, size_t len, const int *cand, int ncand,
			const char *const *uuids)
{
	int dev = -1;

	if (!len)
		return -1;
	if (len >= 4 && !strncmp(p, "GPU-", 4)) {
		for (int i = 0; i < ncand; i++) {
			const char *u = uuids ? uuids[cand[i]] : NULL;

			if (u && strlen(u) >= len && !strncmp(p, u, len)) {
				if (dev >= 0)
					return -1;
				dev = cand[i];
			}
		}
		return dev;
	}
	for (size_t i = 0; i < len; i++)
		if (p[i] < '0' || p[i] > '9' || i > 3)
			return -1;
	dev = atoi(p);
	return dev < ncand ? cand[dev] : -1;
}

/* Narrows and orders cand (ncand) by the list in var, as the driver reads
 * CUDA_VISIBLE_DEVICES, into out. Returns how many. */
static int narrow(const char *var, const int *cand, int ncand, const char *const *uuids, int *out,
		  int max)
{
	const char *p = var;
	int n = 0;

	while (*p && n < max) {
		size_t len = strcspn(p, ",");
		int dev = entry_device(p, len, cand, ncand, uuids);

		for (int i = 0; i < n && dev >= 0; i++)
			if (out[i] == dev)
				dev = -1;
		if (dev < 0)
			break;
		out[n++] = dev;
		p += len + (p[len] == ',');
	}
	return n;
}

static int by_index(const void *a, const void *b)
{
	return *(const int *)a - *(const int *)b;
}

int cuda_visible__map(const char *cvd, const char *nvd, const char *const *uuids, int ndevs,
		      int *nvml_of, int max)
{
	int all[CUDA_VISIBLE_MAX], base[CUDA_VISIBLE_MAX], nbase;

	if (ndevs > CUDA_VISIBLE_MAX)
		ndevs = CUDA_VISIBLE_MAX;
	for (int i = 0; i < ndevs; i++)
		all[i] = i;
	/* The container's GPUs, in PCI order whatever order it lists them in. */
	if (!nvd || !*nvd || !strcmp(nvd, "all")) {
		memcpy(base, all, sizeof(int) * (size_t)ndevs);
		nbase = ndevs;
	} else if (!strcmp(nvd, "none") || !strcmp(nvd, "void")) {
		nbase = 0;
	} else {
		nbase = narrow(nvd, all, ndevs, uuids, base, CUDA_VISIBLE_MAX);
		qsort(base, (size_t)nbase, sizeof(*base), by_index);
	}
	if (!cvd) {
		nbase = nbase < max ? nbase : max;
		memcpy(nvml_of, base, sizeof(int) * (size_t)nbase);
		return nbase;
	}
	return narrow(cvd, base, nbase, uuids, nvml_of, max);
}

int cuda_visible__of_pid(uint32_t pid, const char *const *uuids, int ndevs, int *nvml_of, int max)
{
	char *env = xmalloc(SERVICE_ENVIRON_MAX), cvd[VAR_MAX], nvd[VAR_MAX], why[160];
	ssize_t len = service_read_proc(pid, "environ", env, SERVICE_ENVIRON_MAX);
	bool has_cvd, has_nvd;
	int n;

	if (len < 0) {
		free(env);
		return (int)len;
	}
	has_cvd = service_environ_value(env, (size_t)len, "CUDA_VISIBLE_DEVICES", cvd, sizeof(cvd),
					why, sizeof(why)) > 0;
	has_nvd = service_environ_value(env, (size_t)len, "NVIDIA_VISIBLE_DEVICES", nvd,
					sizeof(nvd), why, sizeof(why)) > 0;
	free(env);
	n = cuda_visible__map(has_cvd ? cvd : NULL, has_nvd ? nvd : NULL, uuids, ndevs, nvml_of,
			      max);
	return n;
}
