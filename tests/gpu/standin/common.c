/*
 * common.c: what every GPU stand-in library needs besides its API: settings read from
 * SONDE_STANDIN_* environment variables, optional trace lines on stderr, a monotonic
 * clock, and finding the fake GPU (the libcuda.so.1 stand-in's private export table).
 * Compiled into each stand-in; the version scripts keep these names out of the dynamic
 * symbol tables.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "standin.h"

int64_t standin_env_int(const char *name, int64_t def)
{
	const char *s = getenv(name);
	char *end;
	long long v;

	if (!s || !*s)
		return def;
	v = strtoll(s, &end, 0);
	if (end == s)
		return def;
	switch (*end) {
	case 'k':
	case 'K':
		return v << 10;
	case 'm':
	case 'M':
		return v << 20;
	case 'g':
	case 'G':
		return v << 30;
	case 't':
	case 'T':
		return v << 40;
	case '\0':
		return v;
	default:
		return def;
	}
}

double standin_env_double(const char *name, double def)
{
	const char *s = getenv(name);
	char *end;
	double v;

	if (!s || !*s)
		return def;
	v = strtod(s, &end);
	return end == s || *end ? def : v;
}

static int trace_state = -1; /* -1: not read yet */

bool standin_tracing(void)
{
	int t = __atomic_load_n(&trace_state, __ATOMIC_RELAXED);

	if (t < 0) {
		t = standin_env_int("SONDE_STANDIN_TRACE", 0) != 0;
		__atomic_store_n(&trace_state, t, __ATOMIC_RELAXED);
	}
	return t;
}

void standin_trace(const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	n = snprintf(line, sizeof(line), "sonde-standin[%d]: ", (int)getpid());
	va_start(ap, fmt);
	vsnprintf(line + n, sizeof(line) - n - 1, fmt, ap);
	va_end(ap);
	strcat(line, "\n");
	/* One write per line so lines from several threads do not interleave. */
	if (write(STDERR_FILENO, line, strlen(line)) < 0)
		return;
}

void standin_gpu_uuid(int index, char *buf, size_t len)
{
	snprintf(buf, len, "GPU-5d0e0000-0000-4000-8000-%012x", (unsigned)index);
}

uint64_t standin_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static const struct standin_gpu *gpu_table;
static const char *gpu_why = "not looked up";
static pthread_once_t gpu_once = PTHREAD_ONCE_INIT;

static void *open_driver(void)
{
	char path[PATH_MAX];
	Dl_info info;
	void *h;

	h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	if (h)
		return h;
	/* Next to this library, so a test build never picks up a real driver by accident. */
	if (dladdr((void *)open_driver, &info) && info.dli_fname) {
		const char *slash = strrchr(info.dli_fname, '/');

		if (slash && (size_t)(slash - info.dli_fname) + 14 < sizeof(path)) {
			snprintf(path, sizeof(path), "%.*s/libcuda.so.1",
				 (int)(slash - info.dli_fname), info.dli_fname);
			h = dlopen(path, RTLD_NOW);
			if (h)
				return h;
		}
	}
	return dlopen("libcuda.so.1", RTLD_NOW);
}

standin_get_proc_fn standin_get_proc_address(void)
{
	void *h = open_driver();
	standin_get_proc_fn fn = NULL;

	if (h)
		*(void **)&fn = dlsym(h, "cuGetProcAddress_v2");
	return fn;
}

void *standin_driver_proc(standin_get_proc_fn get_proc, const char *name, int version,
			  cuuint64_t flags)
{
	CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	void *fn = NULL;

	if (get_proc(name, &fn, version, flags, &st) || st != CU_GET_PROC_ADDRESS_SUCCESS || !fn) {
		STANDIN_TRACE("cuGetProcAddress(%s, %d, %llu) found nothing", name, version,
			      (unsigned long long)flags);
		return NULL;
	}
	return fn;
}

static void find_gpu(void)
{
	CUresult (*get_table)(const void **, const CUuuid *);
	const void *table = NULL;
	CUuuid id;
	void *h;

	h = open_driver();
	if (!h) {
		gpu_why = "can't load libcuda.so.1 -- build the stand-ins (make gpu-standin)";
		return;
	}
	get_table = (CUresult(*)(const void **, const CUuuid *))dlsym(h, "cuGetExportTable");
	memcpy(id.bytes, STANDIN_TABLE_ID, sizeof(id.bytes));
	if (!get_table || get_table(&table, &id) != CUDA_SUCCESS || !table) {
		gpu_why = "libcuda.so.1 is not Sonde's stand-in -- is a real driver first on the "
			  "library path?";
		return;
	}
	if (((const struct standin_gpu *)table)->size < sizeof(struct standin_gpu)) {
		gpu_why =
			"libcuda.so.1 stand-in is older than this library -- rebuild them together";
		return;
	}
	gpu_table = table;
	gpu_why = NULL;
}

const struct standin_gpu *standin_gpu_table(const char **why)
{
	pthread_once(&gpu_once, find_gpu);
	if (why)
		*why = gpu_why;
	return gpu_table;
}
