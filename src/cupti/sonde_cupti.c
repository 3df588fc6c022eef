/* sonde_cupti.c: libsonde_cupti.so, the CUPTI injection library. A job
 * started with CUDA_INJECTION64_PATH=.../libsonde_cupti.so has the CUDA
 * driver load it and call InitializeInjection; from there it subscribes to
 * CUPTI's launch callbacks and kernel activity records, and tells Sonde's
 * probes through three marker functions:
 *
 *   sonde_cupti_launch(correlation)  at each kernel launch's entry, on the
 *                                    launching thread: the probe takes the
 *                                    CPU stack there
 *   sonde_cupti_kernel(&kernel)      for each kernel that ran on the GPU,
 *                                    with the launch's correlation id
 *   sonde_cupti_clock(gpu, host)     CUPTI's clock against CLOCK_MONOTONIC,
 *                                    at start and about once a second
 *
 * so that each kernel's GPU time meets the stack that launched it. CUPTI is
 * loaded at run time (libcupti.so.13, .12, .so), not linked: a machine
 * without it, or a process whose CUPTI another tool holds (PyTorch's
 * profiler, Nsight: one subscriber per process), runs as it would without
 * the library, said once on stderr. The library never changes what the
 * application computes or the order of its calls; its buffers are bounded
 * (BUFFERS of BUFFER_BYTES in flight), and what CUPTI could not record for
 * want of one is counted by CUPTI and told with the clock. */
#include "cupti/sonde_cupti.h"

#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_result.h>
#include <cupti_runtime_cbid.h>

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))
#define MARKER __attribute__((noinline, used, visibility("default")))

#define BUFFER_BYTES (1u << 20)
#define BUFFERS 16	    /* in flight at once, at most */
#define FLUSH_PERIOD_MS 100 /* CUPTI hands back buffers at least this often */
#define CLOCK_EVERY_NS 1000000000ull

/* CUPTI's functions, found at run time. */
static struct {
	CUptiResult (*subscribe)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
	CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
				       CUpti_CallbackId);
	CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
					  CUpti_BuffersCallbackCompleteFunc);
	CUptiResult (*enable)(CUpti_ActivityKind);
	CUptiResult (*flush_all)(uint32_t);
	CUptiResult (*flush_period)(uint32_t);
	CUptiResult (*next_record)(uint8_t *, size_t, CUpti_Activity **);
	CUptiResult (*dropped)(CUcontext, uint32_t, size_t *);
	CUptiResult (*timestamp)(uint64_t *);
	CUptiResult (*result_string)(CUptiResult, const char **);
} c;

static atomic_int in_flight;	  /* buffers handed to CUPTI */
static atomic_ullong clock_due;	  /* CLOCK_MONOTONIC ns of the next clock marker */
static atomic_ullong dropped;	  /* records CUPTI could not keep, so far */
static __thread int launch_depth; /* launch callbacks under way on this thread */

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- the markers: empty calls the probes read ---------------------------- */

MARKER void sonde_cupti_launch(uint32_t correlation)
{
	__asm__ volatile("" : : "r"(correlation) : "memory");
}

MARKER void sonde_cupti_kernel(const struct sonde_cupti_kernel *k)
{
	__asm__ volatile("" : : "r"(k) : "memory");
}

/* dropped: the records CUPTI could not keep so far. */
MARKER void sonde_cupti_clock(uint64_t gpu_ns, uint64_t host_ns, uint64_t dropped_records)
{
	__asm__ volatile("" : : "r"(gpu_ns), "r"(host_ns), "r"(dropped_records) : "memory");
}

static void tell_clock(void)
{
	uint64_t gpu = 0, before = mono_ns(), after;

	if (c.timestamp(&gpu))
		return;
	after = mono_ns();
	sonde_cupti_clock(gpu, before + (after - before) / 2, atomic_load(&dropped));
	atomic_store(&clock_due, after + CLOCK_EVERY_NS);
}

/* ---- CUPTI's side ---------------------------------------------------------- */

static bool is_launch(CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
{
	if (domain == CUPTI_CB_DOMAIN_RUNTIME_API)
		return cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000 ||
		       cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000 ||
		       cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060 ||
		       cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060;
	return domain == CUPTI_CB_DOMAIN_DRIVER_API &&
	       (cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel ||
		cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz ||
		cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx ||
		cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz);
}

/* A launch's entry: the outermost one of the thread (a runtime launch, not
 * the driver call it makes) is the one its kernel's record names. */
static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
				 const void *cbdata)
{
	const CUpti_CallbackData *d = cbdata;

	if (!is_launch(domain, cbid))
		return;
	if (d->callbackSite == CUPTI_API_ENTER) {
		if (!launch_depth++)
			sonde_cupti_launch(d->correlationId);
	} else if (launch_depth > 0) {
		launch_depth--;
	}
}

static void CUPTIAPI on_request(uint8_t **buffer, size_t *size, size_t *max)
{
	*buffer = NULL;
	*size = 0;
	*max = 0;
	if (atomic_fetch_add(&in_flight, 1) >= BUFFERS) {
		atomic_fetch_sub(&in_flight, 1);
		return; /* CUPTI counts what it can't record */
	}
	*buffer = aligned_alloc(8, BUFFER_BYTES);
	if (*buffer)
		*size = BUFFER_BYTES;
	else
		atomic_fetch_sub(&in_flight, 1);
}

static void CUPTIAPI on_complete(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
				 size_t valid)
{
	CUpti_Activity *rec = NULL;
	size_t lost = 0;

	while (c.next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
		const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;
		struct sonde_cupti_kernel out;

		if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
		    rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
			continue;
		out = (struct sonde_cupti_kernel){
			.start = k->start,
			.end = k->end,
			.name = (uint64_t)(uintptr_t)k->name,
			.correlation = k->correlationId,
			.device = k->deviceId,
			.stream = k->streamId,
			.context = k->contextId,
			.grid = {(uint32_t)k->gridX, (uint32_t)k->gridY, (uint32_t)k->gridZ},
			.block = {(uint32_t)k->blockX, (uint32_t)k->blockY, (uint32_t)k->blockZ},
		};
		sonde_cupti_kernel(&out);
	}
	free(buffer);
	atomic_fetch_sub(&in_flight, 1);
	if (c.dropped && !c.dropped(ctx, stream, &lost) && lost)
		atomic_fetch_add(&dropped, lost);
	if (mono_ns() >= atomic_load(&clock_due) || lost)
		tell_clock();
}

static void at_exit(void)
{
	c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	tell_clock();
}

/* CUPTI's functions from the first library that has them all. */
static bool load_cupti(void)
{
	static const char *const names[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
	void *lib = NULL;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !lib; i++)
		lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
	if (!lib) {
		fprintf(stderr,
			"sonde_cupti: no CUPTI library (libcupti.so.13) to load: %s -- "
			"GPU kernel times are not recorded\n",
			dlerror());
		return false;
	}
#define SYM(field, name) *(void **)&c.field = dlsym(lib, name)
	SYM(subscribe, "cuptiSubscribe");
	SYM(enable_callback, "cuptiEnableCallback");
	SYM(register_callbacks, "cuptiActivityRegisterCallbacks");
	SYM(enable, "cuptiActivityEnable");
	SYM(flush_all, "cuptiActivityFlushAll");
	SYM(flush_period, "cuptiActivityFlushPeriod");
	SYM(next_record, "cuptiActivityGetNextRecord");
	SYM(dropped, "cuptiActivityGetNumDroppedRecords");
	SYM(timestamp, "cuptiGetTimestamp");
	SYM(result_string, "cuptiGetResultString");
#undef SYM
	if (!c.subscribe || !c.enable_callback || !c.register_callbacks || !c.enable ||
	    !c.flush_all || !c.next_record || !c.timestamp) {
		fprintf(stderr, "sonde_cupti: the CUPTI library lacks functions Sonde needs -- GPU "
				"kernel times are not recorded\n");
		return false;
	}
	return true;
}

static const char *why(CUptiResult r)
{
	const char *s = NULL;

	if (!c.result_string || c.result_string(r, &s) || !s)
		return "CUPTI error";
	return s;
}

/* The driver calls it once, at its initialization. Returns 1 on success,
 * and also when CUPTI is not there or is taken: the job runs on. */
EXPORT int InitializeInjection(void)
{
	static const CUpti_CallbackId rt[] = {
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
		CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
	};
	static const CUpti_CallbackId drv[] = {
		CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
		CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
		CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
		CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
	};
	CUpti_SubscriberHandle sub;
	CUptiResult r;

	if (!load_cupti())
		return 1;
	r = c.subscribe(&sub, on_callback, NULL);
	if (r) {
		fprintf(stderr,
			"sonde_cupti: can't subscribe to CUPTI: %s%s -- GPU kernel times "
			"are not recorded\n",
			why(r),
			r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
				? " (another tool holds it: PyTorch's profiler, Nsight)"
				: "");
		return 1;
	}
	for (size_t i = 0; i < sizeof(rt) / sizeof(rt[0]); i++)
		c.enable_callback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API, rt[i]);
	for (size_t i = 0; i < sizeof(drv) / sizeof(drv[0]); i++)
		c.enable_callback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, drv[i]);
	r = c.register_callbacks(on_request, on_complete);
	if (!r)
		r = c.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	if (r) {
		fprintf(stderr, "sonde_cupti: can't record kernels: %s\n", why(r));
		return 1;
	}
	if (c.flush_period)
		c.flush_period(FLUSH_PERIOD_MS);
	tell_clock();
	atexit(at_exit);
	return 1;
}
