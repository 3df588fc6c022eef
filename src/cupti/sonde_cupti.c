/* sonde_cupti.c: libsonde_cupti.so, the CUPTI injection library. A job
 * started with CUDA_INJECTION64_PATH=.../libsonde_cupti.so has the CUDA
 * driver load it and call InitializeInjection; from there it subscribes to
 * CUPTI's launch callbacks and kernel activity records, and tells Sonde's
 * probes through three marker functions:
 *
 *   sonde_cupti_launch(corr, nvtx)   at each kernel launch's and copy's
 *                                    entry, on the calling thread: the probe
 *                                    takes the CPU stack there
 *   sonde_cupti_records(recs, n)     the kernels, copies and sets that ran
 *                                    on the GPU, each with its call's
 *                                    correlation id, SONDE_CUPTI_BATCH at
 *                                    most a call (one trap for a batch)
 *   sonde_cupti_nvtx(id, path)       an NVTX range path's id (nvtx.c: the
 *                                    library is the job's NVTX injection too)
 *   sonde_cupti_clock(gpu, host, ..) CUPTI's clock against CLOCK_MONOTONIC,
 *                                    at start and about once a second, with
 *                                    the records and PC samples CUPTI lost
 *
 * so that each kernel's GPU time meets the stack that launched it. CUPTI is
 * loaded at run time, not linked (find_cupti: SONDE_CUPTI_LIBRARY, the one
 * the process has or its library path finds, else beside its CUDA runtime
 * or driver, or in the toolkit's usual places): a machine
 * without it, or a process whose CUPTI another tool holds (PyTorch's
 * profiler, Nsight: one subscriber per process), runs as it would without
 * the library, said once on stderr. The library never changes what the
 * application computes or the order of its calls; a thread of its own asks
 * CUPTI for part-filled buffers every FLUSH_EVERY_MS, so that a job's
 * records come while it runs; its buffers are bounded
 * (BUFFERS of BUFFER_BYTES in flight; SONDE_CUPTI_BUFFERS and
 * SONDE_CUPTI_BUFFER_BYTES change them), and what CUPTI could not record for
 * want of one is counted by CUPTI and told with the clock. */
#include "cupti/sonde_cupti.h"
#include "cupti/sonde_cupti_internal.h"

#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_pcsampling.h>
#include <cupti_driver_cbid.h>
#include <cupti_result.h>
#include <cupti_runtime_cbid.h>

#include <dlfcn.h>
#include <pthread.h>
#include <limits.h>
#include <link.h>
#include <string.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define EXPORT __attribute__((visibility("default")))

#define BUFFER_BYTES (1u << 20)
#define BUFFERS 16 /* in flight at once, at most */
#define BUFFERS_MAX 256
#define BUFFER_BYTES_MIN 4096
#define BUFFER_BYTES_MAX (64u << 20)
#define FLUSH_PERIOD_MS 100 /* CUPTI hands back full buffers at least this often */
#define FLUSH_EVERY_MS 250  /* ... and part-filled ones: our flusher's period */
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

/* enum sonde_cupti_state: the agent reads it (SONDE_CUPTI_STATE). */
EXPORT volatile int sonde_cupti_state = SONDE_CUPTI_STARTING;

static int buffers = BUFFERS;		   /* SONDE_CUPTI_BUFFERS */
static size_t buffer_bytes = BUFFER_BYTES; /* SONDE_CUPTI_BUFFER_BYTES */
static atomic_int in_flight;		   /* buffers handed to CUPTI */
static atomic_ullong clock_due;		   /* CLOCK_MONOTONIC ns of the next clock marker */
static atomic_ullong dropped;		   /* records CUPTI could not keep, so far */
static __thread int call_depth;		   /* traced calls under way on this thread */

uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void tell_clock(void)
{
	uint64_t gpu = 0, before = mono_ns(), after;

	if (c.timestamp(&gpu))
		return;
	after = mono_ns();
	sonde_cupti_clock(gpu, before + (after - before) / 2, atomic_load(&dropped),
			  pc_sampling_dropped());
	atomic_store(&clock_due, after + CLOCK_EVERY_NS);
	nvtx_tick();
	pc_sampling_tick();
}

/* ---- CUPTI's side ---------------------------------------------------------- */

/* The calls whose records the stacks meet: launches, copies and sets. */
static const CUpti_CallbackId runtime_calls[] = {SONDE_CUPTI_RUNTIME_LAUNCHES,
						 SONDE_CUPTI_RUNTIME_COPIES};
static const CUpti_CallbackId driver_calls[] = {SONDE_CUPTI_DRIVER_LAUNCHES,
						SONDE_CUPTI_DRIVER_COPIES};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static bool is_traced(CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
{
	const CUpti_CallbackId *ids =
		domain == CUPTI_CB_DOMAIN_RUNTIME_API ? runtime_calls : driver_calls;
	size_t n =
		domain == CUPTI_CB_DOMAIN_RUNTIME_API ? COUNT(runtime_calls) : COUNT(driver_calls);

	if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API)
		return false;
	for (size_t i = 0; i < n; i++)
		if (ids[i] == cbid)
			return true;
	return false;
}

/* A call's entry: the outermost one of the thread (a runtime launch or
 * copy, not the driver call it makes) is the one its record names. At its
 * exit, PC sampling's data may be due (pc_sampling.c); contexts and
 * modules come and go in the resource domain (PC sampling only). */
static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
				 const void *cbdata)
{
	const CUpti_CallbackData *d = cbdata;

	if (domain == CUPTI_CB_DOMAIN_RESOURCE) {
		pc_sampling_resource(cbid, cbdata);
		return;
	}
	if (!is_traced(domain, cbid))
		return;
	if (d->callbackSite == CUPTI_API_ENTER) {
		if (!call_depth++)
			sonde_cupti_launch(d->correlationId, nvtx_current());
	} else if (call_depth > 0) {
		if (!--call_depth)
			pc_sampling_launched(d->context);
	}
}

/* The environment's integer name within [min, max], else def (said once
 * on stderr when set but out of range). */
long env_long(const char *name, long def, long min, long max)
{
	const char *v = getenv(name);
	char *end;
	long n;

	if (!v || !*v)
		return def;
	n = strtol(v, &end, 10);
	if (*end || n < min || n > max) {
		fprintf(stderr, "sonde_cupti: %s=%s is not a number in %ld..%ld -- using %ld\n",
			name, v, min, max, def);
		return def;
	}
	return n;
}

static void CUPTIAPI on_request(uint8_t **buffer, size_t *size, size_t *max)
{
	*buffer = NULL;
	*size = 0;
	*max = 0;
	if (atomic_fetch_add(&in_flight, 1) >= buffers) {
		atomic_fetch_sub(&in_flight, 1);
		return; /* CUPTI counts what it can't record */
	}
	*buffer = aligned_alloc(8, buffer_bytes);
	if (*buffer)
		*size = buffer_bytes;
	else
		atomic_fetch_sub(&in_flight, 1);
}

/* rec as Sonde's record, or false when it is of a kind not handed over. */
static bool convert(const CUpti_Activity *rec, struct sonde_cupti_record *out)
{
	*out = (struct sonde_cupti_record){0};
	if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL ||
	    rec->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
		const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)rec;

		*out = (struct sonde_cupti_record){
			.kind = SONDE_CUPTI_REC_KERNEL,
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
	} else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
		const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)rec;

		*out = (struct sonde_cupti_record){
			.kind = SONDE_CUPTI_REC_COPY,
			.start = m->start,
			.end = m->end,
			.bytes = m->bytes,
			.copy_kind = m->copyKind,
			.correlation = m->correlationId,
			.device = m->deviceId,
			.stream = m->streamId,
			.context = m->contextId,
		};
	} else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMORY2) {
		const CUpti_ActivityMemory4 *m = (const CUpti_ActivityMemory4 *)rec;
		uint32_t pool = (uint32_t)m->memoryPoolConfig.memoryPoolType & 0xff;

		*out = (struct sonde_cupti_record){
			.kind = SONDE_CUPTI_REC_MEMORY,
			.start = m->timestamp,
			.end = m->address,
			.bytes = m->bytes,
			.reason = ((uint32_t)m->memoryOperationType & 0xff) |
				  ((uint32_t)m->memoryKind & 0xff) << 8 | pool << 16,
			.correlation = m->correlationId,
			.device = m->deviceId,
			.stream = m->streamId,
			.context = m->contextId,
		};
		if (pool) {
			out->pool = m->memoryPoolConfig.address;
			/* size and utilizedSize hold for a local pool only. */
			if (pool == CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL) {
				out->pool_size = m->memoryPoolConfig.pool.size;
				out->pool_used = m->memoryPoolConfig.utilizedSize;
			}
		}
	} else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMORY_POOL) {
		const CUpti_ActivityMemoryPool3 *m = (const CUpti_ActivityMemoryPool3 *)rec;
		uint32_t pool = (uint32_t)m->memoryPoolType & 0xff;

		*out = (struct sonde_cupti_record){
			.kind = SONDE_CUPTI_REC_MEMORY_POOL,
			.start = m->timestamp,
			.reason = ((uint32_t)m->memoryPoolOperationType & 0xff) | pool << 16,
			.correlation = m->correlationId,
			.device = m->deviceId,
			.stream = SONDE_CUPTI_NO_ID,
			.context = SONDE_CUPTI_NO_ID,
			.pool = m->address,
		};
		if (pool == CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL) {
			out->pool_size = m->size;
			out->pool_used = m->utilizedSize;
		}
	} else if (rec->kind == CUPTI_ACTIVITY_KIND_GRAPH_TRACE) {
		const CUpti_ActivityGraphTrace2 *g = (const CUpti_ActivityGraphTrace2 *)rec;

		*out = (struct sonde_cupti_record){
			.kind = SONDE_CUPTI_REC_GRAPH,
			.start = g->start,
			.end = g->end,
			.graph = g->graphId,
			.correlation = g->correlationId,
			.device = g->deviceId,
			.stream = g->streamId,
			.context = g->contextId,
		};
	} else if (rec->kind == CUPTI_ACTIVITY_KIND_SYNCHRONIZATION) {
		const CUpti_ActivitySynchronization2 *y =
			(const CUpti_ActivitySynchronization2 *)rec;

		*out = (struct sonde_cupti_record){
			.kind = SONDE_CUPTI_REC_SYNC,
			.start = y->start,
			.end = y->end,
			.reason = (uint32_t)y->type,
			.correlation = y->correlationId,
			.device = SONDE_CUPTI_NO_ID,
			.stream = y->streamId,
			.context = y->contextId,
		};
	} else if (rec->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
		const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)rec;

		*out = (struct sonde_cupti_record){
			.kind = SONDE_CUPTI_REC_SET,
			.start = m->start,
			.end = m->end,
			.bytes = m->bytes,
			.correlation = m->correlationId,
			.device = m->deviceId,
			.stream = m->streamId,
			.context = m->contextId,
		};
	} else {
		return false;
	}
	return true;
}

/* A buffer back from CUPTI: its records to the probes, SONDE_CUPTI_BATCH a
 * marker call. */
static void CUPTIAPI on_complete(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
				 size_t valid)
{
	struct record_batch b = {.n = 0};
	struct sonde_cupti_record out;
	CUpti_Activity *rec = NULL;
	size_t lost = 0;

	while (c.next_record(buffer, valid, &rec) == CUPTI_SUCCESS)
		if (convert(rec, &out))
			batch_push(&b, &out);
	batch_flush(&b);
	free(buffer);
	atomic_fetch_sub(&in_flight, 1);
	if (c.dropped && !c.dropped(ctx, stream, &lost) && lost)
		atomic_fetch_add(&dropped, lost);
	if (mono_ns() >= atomic_load(&clock_due) || lost)
		tell_clock();
}

static atomic_bool exiting;

/* CUPTI's periodic flush hands back only full buffers: a job that launches
 * a few kernels a second would have its records wait for its exit. This
 * thread asks for the part-filled ones too, FLUSH_EVERY_MS (the default
 * flush: buffers whose records are complete; what CUPTI's documentation
 * suggests doing "at a regular interval in a separate thread"). */
static void *flusher(void *arg)
{
	struct timespec every = {0, FLUSH_EVERY_MS * 1000000L};

	while (!atomic_load(&exiting)) {
		nanosleep(&every, NULL);
		if (!atomic_load(&exiting))
			c.flush_all(0);
	}
	return NULL;
}

/* Without it, records come when buffers fill and at exit. */
static void start_flusher(void)
{
	pthread_attr_t a;
	pthread_t t;

	if (pthread_attr_init(&a))
		return;
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	pthread_create(&t, &a, flusher, NULL);
	pthread_attr_destroy(&a);
}

static void at_exit(void)
{
	size_t lost = 0;

	atomic_store(&exiting, true);
	/* Kernels before their PC samples: the samples go under the stack
	 * of their kernel's launch. */
	c.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	pc_sampling_end();
	/* Records lost since the last buffer came back. */
	if (c.dropped && !c.dropped(NULL, 0, &lost) && lost)
		atomic_fetch_add(&dropped, lost);
	tell_clock();
}

static const char *const cupti_names[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};

/* Tries CUPTI in the directory of a loaded CUDA runtime or driver (a
 * toolkit's lib64, a wheel's nvidia/<pkg>/lib sits beside nvidia/cuda_cupti/lib). */
static int try_beside(struct dl_phdr_info *info, size_t size, void *data)
{
	void **lib = data;
	const char *name = info->dlpi_name, *base = name ? strrchr(name, '/') : NULL;
	char path[PATH_MAX];
	size_t dir;

	if (!base || (strncmp(base + 1, "libcudart.so", 12) && strncmp(base + 1, "libcuda.so", 10)))
		return 0;
	dir = (size_t)(base - name);
	for (size_t i = 0; i < sizeof(cupti_names) / sizeof(cupti_names[0]) && !*lib; i++) {
		snprintf(path, sizeof(path), "%.*s/%s", (int)dir, name, cupti_names[i]);
		*lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		if (!*lib) {
			snprintf(path, sizeof(path), "%.*s/../../cuda_cupti/lib/%s", (int)dir, name,
				 cupti_names[i]);
			*lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		}
	}
	return *lib != NULL;
}

/* The CUPTI library: SONDE_CUPTI_LIBRARY when set; else the one the
 * process has loaded (PyTorch's) or its library path finds; else one
 * beside its CUDA runtime or driver; else the toolkit's usual places. */
static void *find_cupti(void)
{
	static const char *const dirs[] = {"/usr/local/cuda/lib64",
					   "/usr/local/cuda/extras/CUPTI/lib64"};
	const char *env = getenv("SONDE_CUPTI_LIBRARY");
	char path[PATH_MAX];
	void *lib = NULL;

	if (env && *env)
		return dlopen(env, RTLD_NOW | RTLD_LOCAL);
	for (size_t i = 0; i < sizeof(cupti_names) / sizeof(cupti_names[0]) && !lib; i++)
		lib = dlopen(cupti_names[i], RTLD_NOW | RTLD_LOCAL);
	if (!lib)
		dl_iterate_phdr(try_beside, &lib);
	for (size_t d = 0; d < sizeof(dirs) / sizeof(dirs[0]) && !lib; d++)
		for (size_t i = 0; i < sizeof(cupti_names) / sizeof(cupti_names[0]) && !lib; i++) {
			snprintf(path, sizeof(path), "%s/%s", dirs[d], cupti_names[i]);
			lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
		}
	return lib;
}

/* CUPTI's functions, from find_cupti's library. */
static void *load_cupti(void)
{
	void *lib = find_cupti();

	if (!lib) {
		fprintf(stderr,
			"sonde_cupti: no CUPTI library (libcupti.so.13) found: %s -- set "
			"SONDE_CUPTI_LIBRARY to its path; GPU kernel times are not recorded\n",
			dlerror());
		return NULL;
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
		return NULL;
	}
	return lib;
}

const char *cupti_why(int r)
{
	const char *s = NULL;

	if (!c.result_string || c.result_string((CUptiResult)r, &s) || !s)
		return "CUPTI error";
	return s;
}

/* SONDE_CUPTI_GRAPHS=graph: a CUDA graph's launch recorded as one run
 * (GRAPH_TRACE), not kernel by kernel -- CUPTI's cheaper way for jobs that
 * replay graphs of many small kernels, at the cost of their names. The
 * default ("node"): every node's kernel recorded as any other. */
static void enable_graph_trace(void)
{
	const char *v = getenv("SONDE_CUPTI_GRAPHS");
	int r;

	if (!v || !*v || !strcmp(v, "node"))
		return;
	if (strcmp(v, "graph")) {
		fprintf(stderr,
			"sonde_cupti: SONDE_CUPTI_GRAPHS=%s is not node or graph -- "
			"recording each node of a graph\n",
			v);
		return;
	}
	if ((r = c.enable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE)))
		fprintf(stderr,
			"sonde_cupti: can't record graphs as a whole: %s -- recording "
			"each node\n",
			cupti_why(r));
}

/* The driver calls it once, at its initialization. Returns 1 on success,
 * and also when CUPTI is not there or is taken: the job runs on. */
EXPORT int InitializeInjection(void)
{
	CUpti_SubscriberHandle sub;
	CUptiResult r;
	void *lib;

	buffers = (int)env_long("SONDE_CUPTI_BUFFERS", BUFFERS, 1, BUFFERS_MAX);
	buffer_bytes = (size_t)env_long("SONDE_CUPTI_BUFFER_BYTES", BUFFER_BYTES, BUFFER_BYTES_MIN,
					BUFFER_BYTES_MAX) &
		       ~(size_t)7;
	if (!(lib = load_cupti())) {
		sonde_cupti_state = SONDE_CUPTI_NO_CUPTI;
		return 1;
	}
	r = c.subscribe(&sub, on_callback, NULL);
	if (r) {
		sonde_cupti_state = r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
					    ? SONDE_CUPTI_HELD
					    : SONDE_CUPTI_FAILED;
		fprintf(stderr,
			"sonde_cupti: can't subscribe to CUPTI: %s%s -- GPU kernel times "
			"are not recorded\n",
			cupti_why(r),
			r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
				? " (another tool holds it: PyTorch's profiler, Nsight)"
				: "");
		return 1;
	}
	for (size_t i = 0; i < COUNT(runtime_calls); i++)
		c.enable_callback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API, runtime_calls[i]);
	for (size_t i = 0; i < COUNT(driver_calls); i++)
		c.enable_callback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, driver_calls[i]);
	if (pc_sampling_setup(lib)) {
		c.enable_callback(1, sub, CUPTI_CB_DOMAIN_RESOURCE,
				  CUPTI_CBID_RESOURCE_CONTEXT_CREATED);
		c.enable_callback(1, sub, CUPTI_CB_DOMAIN_RESOURCE,
				  CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING);
		c.enable_callback(1, sub, CUPTI_CB_DOMAIN_RESOURCE,
				  CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING);
		c.enable_callback(1, sub, CUPTI_CB_DOMAIN_RESOURCE,
				  CUPTI_CBID_RESOURCE_MODULE_LOADED);
	}
	r = c.register_callbacks(on_request, on_complete);
	if (!r)
		r = c.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
	if (r) {
		fprintf(stderr, "sonde_cupti: can't record kernels: %s\n", cupti_why(r));
		sonde_cupti_state = SONDE_CUPTI_FAILED;
		return 1;
	}
	/* Copies and sets: without them, kernels still are. */
	if ((r = c.enable(CUPTI_ACTIVITY_KIND_MEMCPY)) ||
	    (r = c.enable(CUPTI_ACTIVITY_KIND_MEMSET)))
		fprintf(stderr, "sonde_cupti: can't record memory copies and sets: %s\n",
			cupti_why(r));
	/* Device memory allocated and released, and pools: each process's
	 * account. */
	if ((r = c.enable(CUPTI_ACTIVITY_KIND_MEMORY2)))
		fprintf(stderr, "sonde_cupti: can't record memory allocations: %s\n", cupti_why(r));
	if ((r = c.enable(CUPTI_ACTIVITY_KIND_MEMORY_POOL)))
		fprintf(stderr, "sonde_cupti: can't record memory pools: %s\n", cupti_why(r));
	/* The host's waits for the GPU, on the timeline. */
	if ((r = c.enable(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION)))
		fprintf(stderr, "sonde_cupti: can't record synchronisations: %s\n", cupti_why(r));
	enable_graph_trace();
	if (c.flush_period)
		c.flush_period(FLUSH_PERIOD_MS);
	tell_clock();
	atexit(at_exit);
	start_flusher();
	sonde_cupti_state = SONDE_CUPTI_RECORDING;
	return 1;
}
