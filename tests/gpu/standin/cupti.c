/*
 * cupti.c: a stand-in for NVIDIA's CUPTI (libcupti.so.13), test-only, over the fake GPU of
 * the libcuda.so.1 stand-in: the part of its callback and activity APIs a profiler's
 * injection library uses to see each kernel launch with its correlation id, each
 * kernel's, copy's, fill's and graph launch's run on the GPU, each allocation and release of
 * device memory, each pool trimmed and each host synchronization. Its structures are
 * NVIDIA's own, from the toolkit's headers (CUpti_CallbackData, the generated parameter
 * structs, CUpti_ActivityKernel10, CUpti_ActivityMemcpy6, CUpti_ActivityMemset4,
 * CUpti_ActivityMemory4, CUpti_ActivityGraphTrace2, CUpti_ActivitySynchronization2,
 * CUpti_ActivityMemoryPool3).
 *
 * As the real one: one subscriber per process (a second cuptiSubscribe fails with
 * CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED); callbacks of the runtime and driver launch
 * functions (cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernel, cuLaunchKernelEx and
 * their _ptsz forms, cudaGraphLaunch and cuGraphLaunch), of the copies and fills, of the
 * synchronizations (cudaStreamSynchronize, cudaDeviceSynchronize, cudaEventSynchronize,
 * cudaStreamWaitEvent and the _ptsz forms the header has; cuStreamSynchronize,
 * cuCtxSynchronize, cuCtxSynchronize_v2, cuEventSynchronize, cuStreamWaitEvent and their
 * _ptsz forms) and of the default pools' functions (cudaDeviceGetDefaultMemPool,
 * cudaMemPoolSetAttribute, cudaMemPoolGetAttribute, cudaMemPoolTrimTo and their cu twins)
 * at entry and exit, each call with its correlation id, a record carrying the id of the
 * outermost call that made it (a runtime launch's, not the driver call it makes), 0 when
 * made outside any; kernel records (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
 * or _KERNEL), copy (_MEMCPY), fill (_MEMSET), memory (_MEMORY2), graph (_GRAPH_TRACE),
 * synchronization (_SYNCHRONIZATION) and memory pool (_MEMORY_POOL) records, each of its
 * own size, written into the buffers the client hands out, handed back when full -- on a
 * thread of its own -- or at cuptiActivityFlushAll, a record with no buffer to go in
 * counted as dropped. Timestamps are CLOCK_REALTIME nanoseconds (cuptiGetTimestamp), as
 * the GPU's global timer is, not the host's monotonic clock. Memory records
 * (CUpti_ActivityMemory4, see on_memory) come one per successful allocation or release of
 * device memory: an ALLOCATION at cuMemAlloc/cudaMalloc (DEVICE), cuMemAllocManaged/
 * cudaMallocManaged (MANAGED) and cuMemAllocAsync/cudaMallocAsync (DEVICE, from the
 * device's default pool: isAsync, its stream and the pool's fields), a RELEASE of the kind
 * and bytes released at cuMemFree/cudaFree/cuMemFreeAsync/cudaFreeAsync; and, as CUPTI's
 * documentation says nothing of VMM, an ALLOCATION of the handle's size at cuMemCreate and
 * a RELEASE at cuMemRelease, with the handle for an address, and nothing for mappings. A
 * pool's fields (memoryPoolConfig) are those of the device's default pool just after the
 * call: LOCAL, its address, its release threshold (cudaMemPoolSetAttribute's), pool.size
 * what it holds of the device (what cudaMemGetInfo counts: it grows with an allocation that
 * does not fit and gives back what it holds above max(used, threshold) at a release, as
 * CUDA does at the next synchronization) and utilizedSize what its allocations use.
 * Memory pool records (CUpti_ActivityMemoryPool3, on_pool) are TRIMMED ones, one per
 * successful cuMemPoolTrimTo/cudaMemPoolTrimTo (size what the pool holds after it,
 * utilizedSize, minBytesToKeep, releaseThreshold, its address, LOCAL); the default pools
 * are made with their devices, not by a call, so no CREATED record is made of them. Graph
 * records (CUpti_ActivityGraphTrace2, on_graph): while GRAPH_TRACE is enabled, one per
 * graph launch that runs (cuGraphLaunch, cudaGraphLaunch, their _ptsz forms), from its
 * first node's start to its last node's end, with its graphId (cuptiGetGraphId of the
 * CUgraph the exec was instantiated from), and no kernel record of its nodes, as nsys's
 * --cuda-graph-trace=graph (other kernels keep theirs); while it is disabled, a graph's
 * kernels have kernel records with its graphId and their graphNodeId (cuptiGetGraphNodeId
 * of the node: unique per node, the same at each launch of an exec). Synchronization
 * records (CUpti_ActivitySynchronization2, on_sync): one per synchronization call that
 * succeeded (STREAM_SYNCHRONIZE, CONTEXT_SYNCHRONIZE, EVENT_SYNCHRONIZE, STREAM_WAIT_EVENT),
 * its interval the call's, the fields that do not apply to its type
 * CUPTI_SYNCHRONIZATION_INVALID_VALUE; the waits inside blocking copies and fills make
 * none, nor do stream and event queries. The
 * resource domain's context
 * callbacks (CUPTI_CBID_RESOURCE_CONTEXT_CREATED after a context is made,
 * _CONTEXT_DESTROY_STARTING before one goes, with a CUpti_ResourceData, on the thread doing
 * so) and CUPTI_CBID_RESOURCE_MODULE_LOADED, its resourceDescriptor a
 * CUpti_ModuleResourceData (moduleId, cubinSize, pCubin), when the fake GPU loads a module:
 * lazily, at the first launch of one of its kernels, inside that launch (after its API
 * entry callback, before its kernel record and samples), on the launching thread, in the
 * launching context, once per module and process; the cubin is the fake GPU's made-up one
 * (standin.h, STANDIN_CUBIN_MAGIC), which the fake nvdisasm reads, and stays valid for the
 * process's life. Other resource callbacks may be enabled but are never issued. And the PC sampling
 * API of cupti_pcsampling.h, continuous mode only, over a fixed table of five stall reasons,
 * its samples made up from each kernel's run time by a rule that tests can compute (see
 * "PC sampling" below). Other kinds and domains, and PC sampling's serialized mode and
 * start/stop control, are refused with CUPTI_ERROR_NOT_SUPPORTED, saying what a client asked
 * for that the stand-in does not do.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Not cupti.h: its stand-ins for the obsolete _v1 structures clash with cuda.h's own,
 * which the stand-ins see (__CUDA_API_VERSION_INTERNAL). */
#include <cupti_activity.h>
#include <cupti_callbacks.h>
#include <cupti_pcsampling.h>
#include <cupti_result.h>

#include "standin.h"

#define LIB "libcupti: "
#define MAX_CBID 1024 /* callback ids kept per domain, above the largest launch's */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work = PTHREAD_COND_INITIALIZER;
static pthread_cond_t idle = PTHREAD_COND_INITIALIZER; /* no buffer being handed back */

static struct {
	bool subscribed;
	CUpti_CallbackFunc fn;
	void *userdata;
	uint8_t enabled[CUPTI_CB_DOMAIN_SIZE][MAX_CBID];
	/* Activity. */
	bool kernels; /* CONCURRENT_KERNEL or KERNEL enabled */
	CUpti_ActivityKind kernel_kind;
	bool copies, sets;    /* MEMCPY, MEMSET enabled */
	bool memory;	      /* MEMORY2 enabled */
	bool graphs;	      /* GRAPH_TRACE enabled: graph launches as a whole, not their nodes */
	bool syncs;	      /* SYNCHRONIZATION enabled */
	bool pools;	      /* MEMORY_POOL enabled */
	uint64_t event_syncs; /* cudaEventSyncIds given so far */
	CUpti_BuffersCallbackRequestFunc request;
	CUpti_BuffersCallbackCompleteFunc complete;
	uint8_t *buf; /* being filled */
	size_t size, used;
	uint64_t nrecs; /* records in it */
	struct full {
		uint8_t *buf;
		size_t size, used;
	} full[64]; /* handed back by the worker */
	int nfull;
	uint64_t dropped;
	bool worker_started;
	uint64_t realtime_offset; /* CLOCK_REALTIME - CLOCK_MONOTONIC, ns, at start */
	uint32_t correlations;
	uint64_t grids;
	int completing;	   /* buffers being handed back right now */
	uint32_t flush_ms; /* cuptiActivityFlushPeriod's */
} st;

/* The outermost traced call of this thread (depth, and its correlation id). */
static __thread struct {
	int depth;
	uint32_t outer;
	uint32_t ids[8];
	uint64_t data[8];
} th;

static uint64_t clock_ns(clockid_t c)
{
	struct timespec ts;

	clock_gettime(c, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

CUptiResult cuptiGetTimestamp(uint64_t *timestamp)
{
	if (!timestamp)
		return CUPTI_ERROR_INVALID_PARAMETER;
	*timestamp = clock_ns(CLOCK_REALTIME);
	return CUPTI_SUCCESS;
}

CUptiResult cuptiGetResultString(CUptiResult result, const char **str)
{
	static const struct {
		CUptiResult r;
		const char *s;
	} names[] = {
		{CUPTI_SUCCESS, "CUPTI_SUCCESS"},
		{CUPTI_ERROR_INVALID_PARAMETER, "CUPTI_ERROR_INVALID_PARAMETER"},
		{CUPTI_ERROR_INVALID_OPERATION, "CUPTI_ERROR_INVALID_OPERATION"},
		{CUPTI_ERROR_MAX_LIMIT_REACHED, "CUPTI_ERROR_MAX_LIMIT_REACHED"},
		{CUPTI_ERROR_NOT_INITIALIZED, "CUPTI_ERROR_NOT_INITIALIZED"},
		{CUPTI_ERROR_INVALID_KIND, "CUPTI_ERROR_INVALID_KIND"},
		{CUPTI_ERROR_NOT_SUPPORTED, "CUPTI_ERROR_NOT_SUPPORTED"},
		{CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
		 "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"},
		{CUPTI_ERROR_OUT_OF_MEMORY, "CUPTI_ERROR_OUT_OF_MEMORY"},
	};

	if (!str)
		return CUPTI_ERROR_INVALID_PARAMETER;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].r == result) {
			*str = names[i].s;
			return CUPTI_SUCCESS;
		}
	*str = "CUPTI_ERROR_UNKNOWN";
	return CUPTI_ERROR_INVALID_PARAMETER;
}

/* ---- callbacks ---------------------------------------------------------------------- */

/* The calling thread's current context on the fake GPU, NULL when none. */
static CUcontext current_context(void)
{
	const struct standin_gpu *g = standin_gpu_table(NULL);
	CUcontext ctx = NULL;

	if (g && g->size >= offsetof(struct standin_gpu, ctx_get_current) + sizeof(void *) &&
	    g->ctx_get_current(&ctx))
		ctx = NULL;
	return ctx;
}

static void on_api(int domain, uint32_t cbid, const char *name, const void *params,
		   const char *symbol, bool exit, int ret)
{
	CUpti_CallbackData d = {0};
	CUpti_CallbackFunc fn;
	void *userdata;
	int slot;
	bool on;

	if (!exit) {
		slot = th.depth++;
		if (slot >= 8)
			return;
		pthread_mutex_lock(&lock);
		th.ids[slot] = ++st.correlations;
		pthread_mutex_unlock(&lock);
		th.data[slot] = 0;
		if (!slot)
			th.outer = th.ids[slot];
	} else {
		slot = --th.depth;
		if (slot >= 8 || slot < 0) {
			th.depth = slot < 0 ? 0 : th.depth;
			return;
		}
	}
	pthread_mutex_lock(&lock);
	fn = st.fn;
	userdata = st.userdata;
	on = st.subscribed && domain < CUPTI_CB_DOMAIN_SIZE && cbid < MAX_CBID &&
	     st.enabled[domain][cbid];
	pthread_mutex_unlock(&lock);
	if (!on || !fn)
		return;
	d.callbackSite = exit ? CUPTI_API_EXIT : CUPTI_API_ENTER;
	/* As CUPTI's: the thread's current context (NULL: none yet). */
	d.context = current_context();
	d.functionName = name;
	d.functionParams = params;
	d.functionReturnValue = exit ? &ret : NULL;
	d.symbolName = symbol;
	d.correlationData = &th.data[slot];
	d.correlationId = th.ids[slot];
	fn(userdata, (CUpti_CallbackDomain)domain, cbid, &d);
}

static void on_kernel(const struct standin_kernel_run *k);
static void on_copy(const struct standin_copy_run *c);
static void on_context(CUcontext ctx, uint32_t ctx_id, bool created);
static void on_module(CUcontext ctx, uint32_t module_id, const char *cubin, size_t size);
static void on_memory(const struct standin_memory_run *m);
static void on_graph(const struct standin_graph_run *g);
static void on_sync(const struct standin_sync_run *y);
static void on_pool(const struct standin_pool_run *p);

static const struct standin_tracer tracer = {
	.api = on_api,
	.kernel = on_kernel,
	.copy = on_copy,
	.context = on_context,
	.module = on_module,
	.memory = on_memory,
	.graph = on_graph,
	.sync = on_sync,
	.pool = on_pool,
};

static void pc_context(CUcontext ctx, uint32_t ctx_id, bool created);

/* A context made or going: the resource callback, without the lock. PC sampling forgets
 * what it knew of a former context at the address before, and disables itself on a
 * context going after (as CUPTI tears it down when the context is destroyed). */
static void on_context(CUcontext ctx, uint32_t ctx_id, bool created)
{
	CUpti_CallbackId cbid = created ? CUPTI_CBID_RESOURCE_CONTEXT_CREATED
					: CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING;
	CUpti_ResourceData d = {.context = ctx};
	CUpti_CallbackFunc fn;
	void *userdata;
	bool on;

	pthread_mutex_lock(&lock);
	fn = st.fn;
	userdata = st.userdata;
	on = st.subscribed && st.enabled[CUPTI_CB_DOMAIN_RESOURCE][cbid];
	pthread_mutex_unlock(&lock);
	if (created)
		pc_context(ctx, ctx_id, created);
	if (on && fn)
		fn(userdata, CUPTI_CB_DOMAIN_RESOURCE, cbid, &d);
	if (!created)
		pc_context(ctx, ctx_id, created);
}

/* A module loaded (at the first launch of one of its kernels, inside that launch): the
 * resource callback, without the lock. */
static void on_module(CUcontext ctx, uint32_t module_id, const char *cubin, size_t size)
{
	CUpti_ModuleResourceData m = {.moduleId = module_id, .cubinSize = size, .pCubin = cubin};
	CUpti_ResourceData d = {.context = ctx, .resourceDescriptor = &m};
	CUpti_CallbackFunc fn;
	void *userdata;
	bool on;

	pthread_mutex_lock(&lock);
	fn = st.fn;
	userdata = st.userdata;
	on = st.subscribed &&
	     st.enabled[CUPTI_CB_DOMAIN_RESOURCE][CUPTI_CBID_RESOURCE_MODULE_LOADED];
	pthread_mutex_unlock(&lock);
	STANDIN_TRACE(LIB "module %u loaded (%zu bytes of cubin)%s", module_id, size,
		      on && fn ? ", told" : "");
	if (on && fn)
		fn(userdata, CUPTI_CB_DOMAIN_RESOURCE, CUPTI_CBID_RESOURCE_MODULE_LOADED, &d);
}

/* The fake GPU, told of the tracer. */
static CUptiResult hook(void)
{
	const char *why;
	const struct standin_gpu *g = standin_gpu_table(&why);

	if (!g || g->size < offsetof(struct standin_gpu, tracer) + sizeof(g->tracer)) {
		STANDIN_TRACE(LIB "no fake GPU to trace: %s", g ? "an older libcuda.so.1" : why);
		return CUPTI_ERROR_NOT_INITIALIZED;
	}
	g->set_tracer(&tracer);
	return CUPTI_SUCCESS;
}

CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *subscriber, CUpti_CallbackFunc callback,
			   void *userdata)
{
	CUptiResult r;

	if (!subscriber)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&lock);
	if (st.subscribed) {
		pthread_mutex_unlock(&lock);
		return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
	}
	st.subscribed = true;
	st.fn = callback;
	st.userdata = userdata;
	memset(st.enabled, 0, sizeof(st.enabled));
	pthread_mutex_unlock(&lock);
	r = hook();
	if (r) {
		pthread_mutex_lock(&lock);
		st.subscribed = false;
		pthread_mutex_unlock(&lock);
		return r;
	}
	*subscriber = (CUpti_SubscriberHandle)&st;
	return CUPTI_SUCCESS;
}

CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle subscriber)
{
	if (subscriber != (CUpti_SubscriberHandle)&st)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&lock);
	st.subscribed = false;
	st.fn = NULL;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

/* Only the launch, copy, fill, synchronization and pool callbacks of the two API domains
 * and the context and module-loaded callbacks of the resource domain are issued here. */
static bool domain_ok(CUpti_CallbackDomain domain)
{
	return domain == CUPTI_CB_DOMAIN_DRIVER_API || domain == CUPTI_CB_DOMAIN_RUNTIME_API ||
	       domain == CUPTI_CB_DOMAIN_RESOURCE;
}

CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
				CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
{
	uint32_t max = domain == CUPTI_CB_DOMAIN_RESOURCE ? CUPTI_CBID_RESOURCE_SIZE : MAX_CBID;

	if (!domain_ok(domain)) {
		STANDIN_TRACE(LIB "callback domain %d is not one the stand-in issues", (int)domain);
		return CUPTI_ERROR_NOT_SUPPORTED;
	}
	if (subscriber != (CUpti_SubscriberHandle)&st || cbid >= max)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&lock);
	st.enabled[domain][cbid] = !!enable;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

CUptiResult cuptiEnableDomain(uint32_t enable, CUpti_SubscriberHandle subscriber,
			      CUpti_CallbackDomain domain)
{
	if (subscriber != (CUpti_SubscriberHandle)&st)
		return CUPTI_ERROR_INVALID_PARAMETER;
	if (!domain_ok(domain)) {
		STANDIN_TRACE(LIB "callback domain %d is not one the stand-in issues", (int)domain);
		return CUPTI_ERROR_NOT_SUPPORTED;
	}
	pthread_mutex_lock(&lock);
	memset(st.enabled[domain], !!enable, sizeof(st.enabled[domain]));
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

/* ---- activity ----------------------------------------------------------------------- */

/* Hands the full buffers back, on the caller's thread, without the lock. */
static void complete_full(void)
{
	struct full f[64];
	CUpti_BuffersCallbackCompleteFunc complete;
	int n;

	pthread_mutex_lock(&lock);
	n = st.nfull;
	memcpy(f, st.full, sizeof(f[0]) * (size_t)n);
	st.nfull = 0;
	complete = st.complete;
	st.completing++;
	pthread_mutex_unlock(&lock);
	for (int i = 0; i < n; i++)
		complete(NULL, 0, f[i].buf, f[i].size, f[i].used);
	pthread_mutex_lock(&lock);
	if (!--st.completing)
		pthread_cond_broadcast(&idle);
	pthread_mutex_unlock(&lock);
}

/* Hands full buffers back as they come; SONDE_STANDIN_CUPTI_LAG_MS makes it that much late
 * with each (a CUPTI whose thread is slow to hand buffers back: the client runs out). */
static void *worker(void *arg)
{
	int64_t lag_ms = standin_env_int("SONDE_STANDIN_CUPTI_LAG_MS", 0);
	struct timespec lag = {lag_ms / 1000, (lag_ms % 1000) * 1000000L};

	for (;;) {
		pthread_mutex_lock(&lock);
		while (!st.nfull)
			pthread_cond_wait(&work, &lock);
		pthread_mutex_unlock(&lock);
		if (lag_ms > 0)
			nanosleep(&lag, NULL);
		complete_full();
	}
	return NULL;
}

/* The current buffer goes to the full ones. Lock held. */
static void retire(void)
{
	if (!st.buf)
		return;
	if (st.nfull == 64) {
		/* The worker is behind: what the buffer holds is lost. */
		st.dropped += st.nrecs;
	} else {
		st.full[st.nfull++] = (struct full){st.buf, st.size, st.used};
		pthread_cond_signal(&work);
	}
	st.buf = NULL;
}

/* Room for one record: a new buffer from the client when needed. Lock held; the client's
 * request is called with it (it must not call CUPTI). */
static uint8_t *room(size_t need)
{
	size_t max = 0;

	if (st.buf && st.used + need > st.size)
		retire();
	if (!st.buf && st.request) {
		st.request(&st.buf, &st.size, &max);
		st.used = 0;
		st.nrecs = 0;
		if (st.buf && st.size < need)
			st.buf = NULL;
	}
	if (!st.buf)
		return NULL;
	st.used += need;
	st.nrecs++;
	return st.buf + st.used - need;
}

/* The size of a record of kind, as this CUPTI writes it; 0 for one it doesn't. */
static size_t record_size(CUpti_ActivityKind kind)
{
	switch (kind) {
	case CUPTI_ACTIVITY_KIND_KERNEL:
	case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
		return sizeof(CUpti_ActivityKernel10);
	case CUPTI_ACTIVITY_KIND_MEMCPY:
		return sizeof(CUpti_ActivityMemcpy6);
	case CUPTI_ACTIVITY_KIND_MEMSET:
		return sizeof(CUpti_ActivityMemset4);
	case CUPTI_ACTIVITY_KIND_MEMORY2:
		return sizeof(CUpti_ActivityMemory4);
	case CUPTI_ACTIVITY_KIND_GRAPH_TRACE:
		return sizeof(CUpti_ActivityGraphTrace2);
	case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
		return sizeof(CUpti_ActivitySynchronization2);
	case CUPTI_ACTIVITY_KIND_MEMORY_POOL:
		return sizeof(CUpti_ActivityMemoryPool3);
	default:
		return 0;
	}
}

static void pc_sample(const struct standin_kernel_run *k);

static void on_kernel(const struct standin_kernel_run *k)
{
	CUpti_ActivityKernel10 *r;

	pthread_mutex_lock(&lock);
	pc_sample(k);
	/* Under GRAPH_TRACE a graph launch is one record of its own (on_graph), its nodes
	 * none, as nsys's --cuda-graph-trace=graph. */
	if (!st.kernels || (st.graphs && k->graph_id)) {
		pthread_mutex_unlock(&lock);
		return;
	}
	r = (CUpti_ActivityKernel10 *)room(sizeof(*r));
	if (!r) {
		st.dropped++;
		pthread_mutex_unlock(&lock);
		return;
	}
	memset(r, 0, sizeof(*r));
	r->kind = st.kernel_kind;
	r->start = k->start_ns + st.realtime_offset;
	r->end = k->end_ns + st.realtime_offset;
	r->completed = r->end;
	r->deviceId = (uint32_t)k->device;
	r->contextId = k->ctx_id;
	r->streamId = k->stream_id;
	r->gridX = (int32_t)k->grid[0];
	r->gridY = (int32_t)k->grid[1];
	r->gridZ = (int32_t)k->grid[2];
	r->blockX = (int32_t)k->block[0];
	r->blockY = (int32_t)k->block[1];
	r->blockZ = (int32_t)k->block[2];
	r->dynamicSharedMemory = (int32_t)k->shmem;
	r->correlationId = th.depth > 0 ? th.outer : 0;
	r->name = k->name;
	r->gridId = (int64_t)++st.grids;
	r->graphId = k->graph_id;
	r->graphNodeId = k->graph_node_id;
	pthread_mutex_unlock(&lock);
}

/* A graph launch ran: a CUpti_ActivityGraphTrace2 record while GRAPH_TRACE is enabled, its
 * correlation id the launch's (as its nodes' kernel records would have had), its interval
 * from its first node's start to its last node's end, on the kernels' clock. */
static void on_graph(const struct standin_graph_run *g)
{
	CUpti_ActivityGraphTrace2 *r;

	pthread_mutex_lock(&lock);
	if (!st.graphs) {
		pthread_mutex_unlock(&lock);
		return;
	}
	r = (CUpti_ActivityGraphTrace2 *)room(sizeof(*r));
	if (!r) {
		st.dropped++;
		pthread_mutex_unlock(&lock);
		return;
	}
	memset(r, 0, sizeof(*r));
	r->kind = CUPTI_ACTIVITY_KIND_GRAPH_TRACE;
	r->correlationId = th.depth > 0 ? th.outer : 0;
	r->start = g->start_ns + st.realtime_offset;
	r->end = g->end_ns + st.realtime_offset;
	r->deviceId = (uint32_t)g->device;
	r->graphId = g->graph_id;
	r->contextId = g->ctx_id;
	r->streamId = g->stream_id;
	r->reserved = NULL;
	/* The fake GPU runs a graph on one device and context. */
	r->endDeviceId = (uint32_t)g->device;
	r->endContextId = g->ctx_id;
	pthread_mutex_unlock(&lock);
}

/* A synchronization call returned success: a CUpti_ActivitySynchronization2 record while
 * SYNCHRONIZATION is enabled. Fields that do not apply to its type (a context's stream and
 * event, a stream's event, an event's stream) are CUPTI_SYNCHRONIZATION_INVALID_VALUE, as
 * the header says; cudaEventSyncId is given to the records of the two event types only,
 * unique per record. start and end are the call's, on CUPTI's clock. */
static void on_sync(const struct standin_sync_run *y)
{
	const uint32_t none = CUPTI_SYNCHRONIZATION_INVALID_VALUE;
	CUpti_ActivitySynchronization2 *r;
	bool event = y->type == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE ||
		     y->type == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT;

	pthread_mutex_lock(&lock);
	if (!st.syncs) {
		pthread_mutex_unlock(&lock);
		return;
	}
	r = (CUpti_ActivitySynchronization2 *)room(sizeof(*r));
	if (!r) {
		st.dropped++;
		pthread_mutex_unlock(&lock);
		return;
	}
	memset(r, 0, sizeof(*r));
	r->kind = CUPTI_ACTIVITY_KIND_SYNCHRONIZATION;
	r->type = (CUpti_ActivitySynchronizationType)y->type;
	r->start = y->start_ns + st.realtime_offset;
	r->end = y->end_ns + st.realtime_offset;
	r->correlationId = th.depth > 0 ? th.outer : 0;
	r->contextId = y->ctx_id ? y->ctx_id : none;
	r->streamId = y->stream_id ? y->stream_id : none;
	r->cudaEventId = event && y->event_id ? y->event_id : none;
	r->cudaEventSyncId = event ? ++st.event_syncs : none;
	r->returnValue = 0; /* CUDA_SUCCESS: failed calls make no record */
	pthread_mutex_unlock(&lock);
}

/* A pool trimmed: a CUpti_ActivityMemoryPool3 record while MEMORY_POOL is enabled. The
 * fake GPU's pools are the devices' default ones: LOCAL, of pinned (not managed) memory. */
static void on_pool(const struct standin_pool_run *p)
{
	CUpti_ActivityMemoryPool3 *r;

	pthread_mutex_lock(&lock);
	if (!st.pools) {
		pthread_mutex_unlock(&lock);
		return;
	}
	r = (CUpti_ActivityMemoryPool3 *)room(sizeof(*r));
	if (!r) {
		st.dropped++;
		pthread_mutex_unlock(&lock);
		return;
	}
	memset(r, 0, sizeof(*r));
	r->kind = CUPTI_ACTIVITY_KIND_MEMORY_POOL;
	r->memoryPoolOperationType = (CUpti_ActivityMemoryPoolOperationType)p->operation;
	r->memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
	r->correlationId = th.depth > 0 ? th.outer : 0;
	r->processId = (uint32_t)getpid();
	r->deviceId = (uint32_t)p->device;
	r->minBytesToKeep = (size_t)p->min_bytes_to_keep;
	r->address = p->base;
	r->size = p->reserved;
	r->releaseThreshold = p->release_threshold;
	r->timestamp = p->at_ns + st.realtime_offset;
	r->utilizedSize = p->used;
	r->isManagedPool = 0;
	pthread_mutex_unlock(&lock);
}

static void on_copy(const struct standin_copy_run *c)
{
	void *r;

	pthread_mutex_lock(&lock);
	if (c->set ? !st.sets : !st.copies) {
		pthread_mutex_unlock(&lock);
		return;
	}
	r = room(record_size(c->set ? CUPTI_ACTIVITY_KIND_MEMSET : CUPTI_ACTIVITY_KIND_MEMCPY));
	if (!r) {
		st.dropped++;
		pthread_mutex_unlock(&lock);
		return;
	}
	if (c->set) {
		CUpti_ActivityMemset4 *m = r;

		memset(m, 0, sizeof(*m));
		m->kind = CUPTI_ACTIVITY_KIND_MEMSET;
		m->bytes = c->bytes;
		m->start = c->start_ns + st.realtime_offset;
		m->end = c->end_ns + st.realtime_offset;
		m->deviceId = (uint32_t)c->device;
		m->contextId = c->ctx_id;
		m->streamId = c->stream_id;
		m->correlationId = th.depth > 0 ? th.outer : 0;
	} else {
		CUpti_ActivityMemcpy6 *m = r;

		memset(m, 0, sizeof(*m));
		m->kind = CUPTI_ACTIVITY_KIND_MEMCPY;
		m->copyKind = c->copy_kind;
		m->bytes = c->bytes;
		m->start = c->start_ns + st.realtime_offset;
		m->end = c->end_ns + st.realtime_offset;
		m->deviceId = (uint32_t)c->device;
		m->contextId = c->ctx_id;
		m->streamId = c->stream_id;
		m->correlationId = th.depth > 0 ? th.outer : 0;
	}
	pthread_mutex_unlock(&lock);
}

/* Device memory allocated or released: a CUpti_ActivityMemory4 record, as the header describes
 * one, while MEMORY2 is enabled. Its correlation id is, as a kernel's, that of the outermost
 * traced call it was made in, else 0: the stand-in issues no callbacks of the allocation
 * calls, so gives them no correlation id (the real CUPTI gives each API call one). The
 * stream and context ids are CUPTI_INVALID_STREAM_ID for a call that is not async and
 * CUPTI_INVALID_CONTEXT_ID with no current context, as the header says. */
static void on_memory(const struct standin_memory_run *m)
{
	CUpti_ActivityMemory4 *r;

	pthread_mutex_lock(&lock);
	if (!st.memory) {
		pthread_mutex_unlock(&lock);
		return;
	}
	r = (CUpti_ActivityMemory4 *)room(sizeof(*r));
	if (!r) {
		st.dropped++;
		pthread_mutex_unlock(&lock);
		return;
	}
	memset(r, 0, sizeof(*r));
	r->kind = CUPTI_ACTIVITY_KIND_MEMORY2;
	r->memoryOperationType = m->release ? CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE
					    : CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION;
	r->memoryKind = (CUpti_ActivityMemoryKind)m->memory_kind;
	r->correlationId = th.depth > 0 ? th.outer : 0;
	r->address = m->address;
	r->bytes = m->bytes;
	r->timestamp = m->at_ns + st.realtime_offset;
	r->PC = 0;
	r->processId = (uint32_t)getpid();
	r->deviceId = (uint32_t)m->device;
	r->contextId = m->ctx_id ? m->ctx_id : CUPTI_INVALID_CONTEXT_ID;
	r->streamId = m->async ? m->stream_id : CUPTI_INVALID_STREAM_ID;
	r->name = NULL;
	r->isAsync = m->async;
	if (m->pool) {
		/* The device's default pool, local, just after the operation: its size what it
		 * holds of the device, utilizedSize what its allocations use of that. */
		r->memoryPoolConfig.memoryPoolType = CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL;
		r->memoryPoolConfig.address = m->pool_base;
		r->memoryPoolConfig.releaseThreshold = m->pool_threshold;
		r->memoryPoolConfig.pool.size = m->pool_reserved;
		r->memoryPoolConfig.utilizedSize = m->pool_used;
	}
	r->source = NULL;
	pthread_mutex_unlock(&lock);
}

CUptiResult cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc funcBufferRequested,
					   CUpti_BuffersCallbackCompleteFunc funcBufferCompleted)
{
	pthread_t t;

	if (!funcBufferRequested || !funcBufferCompleted)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&lock);
	st.request = funcBufferRequested;
	st.complete = funcBufferCompleted;
	if (!st.worker_started && !pthread_create(&t, NULL, worker, NULL)) {
		pthread_detach(t);
		st.worker_started = true;
	}
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

static CUptiResult kind_switch(CUpti_ActivityKind kind, bool on)
{
	if (!record_size(kind)) {
		STANDIN_TRACE(LIB "activity kind %d is not one the stand-in records", (int)kind);
		return CUPTI_ERROR_NOT_SUPPORTED;
	}
	if (on && hook())
		return CUPTI_ERROR_NOT_INITIALIZED;
	pthread_mutex_lock(&lock);
	if (kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
		st.copies = on;
	} else if (kind == CUPTI_ACTIVITY_KIND_MEMSET) {
		st.sets = on;
	} else if (kind == CUPTI_ACTIVITY_KIND_MEMORY2) {
		st.memory = on;
	} else if (kind == CUPTI_ACTIVITY_KIND_GRAPH_TRACE) {
		st.graphs = on;
	} else if (kind == CUPTI_ACTIVITY_KIND_SYNCHRONIZATION) {
		st.syncs = on;
	} else if (kind == CUPTI_ACTIVITY_KIND_MEMORY_POOL) {
		st.pools = on;
	} else {
		st.kernels = on;
		st.kernel_kind = kind;
	}
	st.realtime_offset = clock_ns(CLOCK_REALTIME) - standin_now_ns();
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityEnable(CUpti_ActivityKind kind)
{
	return kind_switch(kind, true);
}

CUptiResult cuptiActivityDisable(CUpti_ActivityKind kind)
{
	return kind_switch(kind, false);
}

CUptiResult cuptiActivityFlushAll(uint32_t flag)
{
	pthread_mutex_lock(&lock);
	if (st.buf && st.used)
		retire();
	pthread_mutex_unlock(&lock);
	complete_full();
	/* As CUPTI's: every buffer is back when it returns, those its worker
	 * was handing back too. */
	pthread_mutex_lock(&lock);
	while (st.completing)
		pthread_cond_wait(&idle, &lock);
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

/* As CUPTI's, a periodic flush returns only the buffers that are full,
 * which the worker hands back as they fill here anyway: the period is
 * kept, and changes nothing. A client that wants a part-filled buffer back
 * calls cuptiActivityFlushAll. */
CUptiResult cuptiActivityFlushPeriod(uint32_t time)
{
	pthread_mutex_lock(&lock);
	st.flush_ms = time;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNextRecord(uint8_t *buffer, size_t validBufferSizeBytes,
				       CUpti_Activity **record)
{
	size_t off, size;

	if (!buffer || !record)
		return CUPTI_ERROR_INVALID_PARAMETER;
	off = *record ? (size_t)((uint8_t *)*record - buffer) + record_size((*record)->kind) : 0;
	if (off + sizeof(CUpti_Activity) > validBufferSizeBytes)
		return CUPTI_ERROR_MAX_LIMIT_REACHED;
	size = record_size(((const CUpti_Activity *)(buffer + off))->kind);
	if (!size || off + size > validBufferSizeBytes)
		return CUPTI_ERROR_MAX_LIMIT_REACHED;
	*record = (CUpti_Activity *)(buffer + off);
	return CUPTI_SUCCESS;
}

/* The fake GPU's table, when it has the entry `field` (a libcuda.so.1 as new as this). */
#define GPU_WITH(g, field)                                                                         \
	((g) && (g)->size >= offsetof(struct standin_gpu, field) + sizeof((g)->field))

CUptiResult cuptiGetGraphId(CUgraph graph, uint32_t *pId)
{
	const struct standin_gpu *g = standin_gpu_table(NULL);

	if (!GPU_WITH(g, graph_get_id))
		return CUPTI_ERROR_NOT_INITIALIZED;
	if (!graph || !pId || g->graph_get_id(graph, pId))
		return CUPTI_ERROR_INVALID_PARAMETER;
	return CUPTI_SUCCESS;
}

CUptiResult cuptiGetGraphNodeId(CUgraphNode node, uint64_t *nodeId)
{
	const struct standin_gpu *g = standin_gpu_table(NULL);

	if (!GPU_WITH(g, graph_node_get_id))
		return CUPTI_ERROR_NOT_INITIALIZED;
	if (!node || !nodeId || g->graph_node_get_id(node, nodeId))
		return CUPTI_ERROR_INVALID_PARAMETER;
	return CUPTI_SUCCESS;
}

CUptiResult cuptiActivityGetNumDroppedRecords(CUcontext context, uint32_t streamId, size_t *dropped)
{
	if (!dropped)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pthread_mutex_lock(&lock);
	*dropped = st.dropped;
	st.dropped = 0;
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

/* ---- PC sampling ---------------------------------------------------------------------- */

/*
 * PC sampling over the fake GPU, which runs no code: its samples are made up from each
 * kernel's run time by a rule fixed so that tests can compute exactly what a client gets.
 *
 * A kernel run (the tracer's kernel hook) is sampled when its context has PC sampling
 * enabled (cuptiPCSamplingEnable) and configured with a sampling data buffer
 * (CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER); with the context's
 * sampling period P (5..31, 10 when never set) one cycle is 1 ns of the run (end_ns -
 * start_ns). Each function (kernel name) keeps, over the process's life and across all
 * contexts, C: the nanoseconds of its sampled runs so far, and J: its samples so far. A run
 * of d ns adds floor((C + d) / 2^P) - floor(C / 2^P) samples, numbered J, J + 1, ...; so a
 * function sampled at one period throughout has floor(its total ns / 2^P) samples. Sample
 * j of a function lands at PC offset 0x10 * (j % 4), with stall reason
 * reasons[(j / 4) % 5] (the order of the table below, whatever the selection): the pattern
 * repeats every 20 samples. Every sample counts in totalSamples; one of a reason not
 * selected (CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON) is in no PC record.
 *
 * Each context keeps the PCs (function, offset) with samples not yet read, in the order
 * their first sample came, each with its count per reason, at most SONDE_STANDIN_PC_MAX_PCS
 * (4096, read at cuptiPCSamplingEnable) of them: a sample that would need one more PC is
 * dropped, counted in totalSamples and droppedSamples, and the next cuptiPCSamplingGetData
 * fails with CUPTI_ERROR_OUT_OF_MEMORY, hardwareBufferFull = 1 and no PC, as the real one
 * does when the hardware buffer filled, leaving the pending PCs to the call after. A
 * record's cubinCrc is, as the real one's, cuptiGetCubinCrc of the cubin of its function's
 * module (the one CUPTI_CBID_RESOURCE_MODULE_LOADED gave, loaded for the run sampled):
 * here the FNV-1a hash of its bytes. A record's function is a kernel name in one cubin:
 * its functionIndex is that function's number in the order functions were first sampled
 * in the process (a name in two cubins, two modules or two loads of one, is two
 * functions, with two indices, though C and J above are the name's); its functionName is
 * allocated once per function and shared by all its records (the header lets the client
 * free() it when done with every record; the stand-in never frees it).
 *
 * The stand-in does not model serialized mode, start/stop control (both refused with
 * CUPTI_ERROR_NOT_SUPPORTED), the scratch and hardware buffer sizes or the worker thread's
 * sleep span (kept, read back, changing nothing), non-user kernels, ranges (rangeId is 0),
 * module unloads (no MODULE_UNLOAD_STARTING callback; samples of an unloaded module's
 * kernels stay pending), or the lag between a kernel and its samples: a kernel's samples are
 * there for GetData as soon as it is launched, as its activity record is.
 */

#define PC_REASONS 5
#define PC_SLOTS 4     /* PC offsets per function */
#define PC_STRIDE 0x10 /* bytes between them */
#define PC_CYCLE (PC_SLOTS * PC_REASONS)
#define PC_PERIOD_DEFAULT 10
#define PC_BUCKETS 256

static const struct {
	uint32_t index;
	const char *name;
} reasons[PC_REASONS] = {
	{2, "smsp__pcsamp_warps_issue_stalled_barrier"},
	{5, "smsp__pcsamp_warps_issue_stalled_long_scoreboard"},
	{7, "smsp__pcsamp_warps_issue_stalled_math_pipe_throttle"},
	{11, "smsp__pcsamp_warps_issue_stalled_selected"},
	{13, "smsp__pcsamp_warps_issue_stalled_wait"},
};

/* A function sampled in this process: a kernel name in one cubin. */
struct pc_func {
	struct pc_func *next;  /* in its bucket */
	char *name;	       /* records' functionName: allocated once, never freed */
	const char *cubin;     /* the fake GPU's, which lives as long as the process */
	uint64_t hash;	       /* of the name, for the bucket */
	uint64_t crc;	       /* records' cubinCrc: cuptiGetCubinCrc of the cubin */
	uint32_t index;	       /* records' functionIndex */
	struct pc_func *first; /* the name's first function, which keeps C and J */
	uint64_t ns;	       /* C: the name's sampled run time so far (first's only) */
	uint64_t samples;      /* J: the name's samples so far (first's only) */
};

/* A PC with samples not yet read. */
struct pc_rec {
	struct pc_rec *next; /* the next newer */
	uint32_t func, slot;
	uint64_t n[PC_REASONS]; /* by position in reasons[] */
};

/* A context with PC sampling enabled. */
struct pc_ctx {
	struct pc_ctx *next;
	CUcontext ctx;
	uint32_t ctx_id;
	uint32_t period;
	uint8_t selected; /* bit i: reasons[i] is collected */
	size_t scratch_bytes, hw_bytes;
	uint32_t sleep_ms;
	CUpti_PCSamplingData *buffer; /* SAMPLING_DATA_BUFFER's; NULL: not sampling yet */
	struct pc_rec *head, **tail;  /* pending PCs, oldest first */
	struct pc_rec **by_key;	      /* [function index * PC_SLOTS + slot] */
	size_t nkeys, npcs, max_pcs;
	uint64_t total, dropped; /* samples since the last GetData */
	bool full;		 /* one was dropped since the last GetData */
};

/* Guarded by `lock`, as everything. */
static struct {
	struct pc_func **funcs; /* by index */
	uint32_t nfuncs, cap;
	struct pc_func *bucket[PC_BUCKETS];
	struct pc_ctx *ctxs;
} pcs;

static uint64_t fnv1a(const void *p, size_t len)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++)
		h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* The function of run k (its name in its cubin), made at its first sample; NULL when out
 * of memory. */
static struct pc_func *pc_func_of(const struct standin_kernel_run *k)
{
	uint64_t hash = fnv1a(k->name, strlen(k->name));
	struct pc_func **b = &pcs.bucket[hash % PC_BUCKETS], *f, *first = NULL;

	for (f = *b; f; f = f->next) {
		if (f->hash != hash || strcmp(f->name, k->name))
			continue;
		if (f->cubin == k->cubin)
			return f;
		first = f->first;
	}
	if (pcs.nfuncs == pcs.cap) {
		uint32_t cap = pcs.cap ? 2 * pcs.cap : 64;
		struct pc_func **funcs = realloc(pcs.funcs, cap * sizeof(*funcs));

		if (!funcs)
			return NULL;
		pcs.funcs = funcs;
		pcs.cap = cap;
	}
	f = calloc(1, sizeof(*f));
	if (!f || !(f->name = strdup(k->name))) {
		free(f);
		return NULL;
	}
	f->hash = hash;
	f->cubin = k->cubin;
	f->crc = k->cubin ? fnv1a(k->cubin, k->cubin_size) : 0;
	f->first = first ? first : f;
	f->index = pcs.nfuncs;
	pcs.funcs[pcs.nfuncs++] = f;
	f->next = *b;
	*b = f;
	return f;
}

/* The context's id if it lives, as the fake GPU's cuCtxGetId says; else 0. */
static uint32_t live_ctx(CUcontext ctx)
{
	const struct standin_gpu *g = standin_gpu_table(NULL);
	unsigned long long id;

	if (!ctx || !g ||
	    g->size < offsetof(struct standin_gpu, ctx_get_id) + sizeof(g->ctx_get_id))
		return 0;
	return g->ctx_get_id(ctx, &id) ? 0 : (uint32_t)id;
}

/* The PC sampling state of a context, NULL when not enabled there. Lock held. */
static struct pc_ctx *pc_ctx_of(CUcontext ctx, uint32_t ctx_id)
{
	for (struct pc_ctx *c = pcs.ctxs; c; c = c->next)
		if (c->ctx == ctx && c->ctx_id == ctx_id)
			return c;
	return NULL;
}

/* The pending PC of function f at slot, made if need be; NULL when the context has
 * max_pcs already (or no memory). Lock held. */
static struct pc_rec *pc_rec_of(struct pc_ctx *c, uint32_t f, uint32_t slot)
{
	size_t key = (size_t)f * PC_SLOTS + slot;
	struct pc_rec *r;

	if (key >= c->nkeys) {
		size_t n = (key / PC_SLOTS + 1) * PC_SLOTS * 2;
		struct pc_rec **by_key = realloc(c->by_key, n * sizeof(*by_key));

		if (!by_key)
			return NULL;
		memset(by_key + c->nkeys, 0, (n - c->nkeys) * sizeof(*by_key));
		c->by_key = by_key;
		c->nkeys = n;
	}
	if (c->by_key[key])
		return c->by_key[key];
	if (c->npcs >= c->max_pcs || !(r = calloc(1, sizeof(*r))))
		return NULL;
	r->func = f;
	r->slot = slot;
	*c->tail = r;
	c->tail = &r->next;
	c->by_key[key] = r;
	c->npcs++;
	return r;
}

/* A kernel ran: its samples, by the rule above. Lock held. */
static void pc_sample(const struct standin_kernel_run *k)
{
	struct pc_ctx *c = pcs.ctxs ? pc_ctx_of(k->ctx, k->ctx_id) : NULL;
	struct pc_func *f, *counts;
	uint64_t d, n, j0;

	if (!c || !c->buffer || !k->name || k->end_ns <= k->start_ns)
		return;
	f = pc_func_of(k);
	if (!f)
		return;
	counts = f->first;
	d = k->end_ns - k->start_ns;
	n = ((counts->ns + d) >> c->period) - (counts->ns >> c->period);
	counts->ns += d;
	j0 = counts->samples;
	counts->samples += n;
	c->total += n;
	/* Samples j0 + i, j0 + i + 20, ... all land on the same PC and reason. */
	for (uint64_t i = 0; i < n && i < PC_CYCLE; i++) {
		uint64_t j = j0 + i, count = n / PC_CYCLE + (i < n % PC_CYCLE);
		uint32_t reason = (uint32_t)(j / PC_SLOTS % PC_REASONS);
		struct pc_rec *r;

		if (!(c->selected & 1u << reason))
			continue;
		r = pc_rec_of(c, f->index, (uint32_t)(j % PC_SLOTS));
		if (!r) {
			c->dropped += count;
			c->full = true;
			continue;
		}
		r->n[reason] += count;
	}
}

/* Whether d is a CUpti_PCSamplingData the stand-in can write into. */
static bool pc_data_ok(const CUpti_PCSamplingData *d)
{
	return d && d->size >= CUPTI_PCSAMPLING_STRUCT_SIZE(CUpti_PCSamplingData, pPcData) &&
	       (!d->collectNumPcs || d->pPcData);
}

/* Whether the PC records that pc_write would fill have their stall reason arrays. */
static bool pc_room_ok(const struct pc_ctx *c, const CUpti_PCSamplingData *d)
{
	size_t n = d->collectNumPcs < c->npcs ? d->collectNumPcs : c->npcs;

	for (size_t i = 0; i < n; i++)
		if (!d->pPcData[i].stallReason)
			return false;
	return true;
}

/* Moves up to max pending PCs (at most d->collectNumPcs), oldest first, into d's records,
 * each with its selected reasons' counts (as many as the client's arrays hold), and says
 * what is left; then d's counts of samples, which start again from 0. Lock held. */
static void pc_write(struct pc_ctx *c, CUpti_PCSamplingData *d, size_t max, bool full)
{
	size_t i = 0;

	if (max > d->collectNumPcs)
		max = d->collectNumPcs;
	while (c->head && i < max) {
		struct pc_rec *r = c->head;
		const struct pc_func *f = pcs.funcs[r->func];
		CUpti_PCSamplingPCData *p = &d->pPcData[i];
		uint32_t slot = r->slot;
		size_t nr = 0;

		c->head = r->next;
		if (!c->head)
			c->tail = &c->head;
		c->by_key[(size_t)r->func * PC_SLOTS + r->slot] = NULL;
		c->npcs--;
		for (int k = 0; k < PC_REASONS; k++) {
			if (!r->n[k] || !(c->selected & 1u << k))
				continue;
			p->stallReason[nr].pcSamplingStallReasonIndex = reasons[k].index;
			p->stallReason[nr].samples =
				r->n[k] > UINT32_MAX ? UINT32_MAX : (uint32_t)r->n[k];
			nr++;
		}
		free(r);
		if (!nr) /* the selection changed since: nothing to tell of this PC */
			continue;
		p->size = sizeof(*p);
		p->cubinCrc = f->crc;
		p->pcOffset = (uint64_t)PC_STRIDE * slot;
		p->functionIndex = f->index;
		p->pad = 0;
		p->functionName = f->name;
		p->stallReasonCount = nr;
		p->correlationId = 0;
		i++;
	}
	d->totalNumPcs = i;
	d->remainingNumPcs = c->npcs;
	d->totalSamples = c->total;
	d->droppedSamples = c->dropped;
	d->rangeId = 0;
	if (d->size >=
	    CUPTI_PCSAMPLING_STRUCT_SIZE(CUpti_PCSamplingData, nonUsrKernelsTotalSamples))
		d->nonUsrKernelsTotalSamples = 0;
	if (d->size >= CUPTI_PCSAMPLING_STRUCT_SIZE(CUpti_PCSamplingData, hardwareBufferFull))
		d->hardwareBufferFull = full;
	c->total = c->dropped = 0;
	c->full = false;
}

/* Disables PC sampling on c: what is pending goes into the configured buffer, what does
 * not fit is lost, and the context's configuration with it. Lock held. */
static void pc_disable(struct pc_ctx *c)
{
	struct pc_rec *r, *next;

	if (c->buffer && pc_room_ok(c, c->buffer))
		pc_write(c, c->buffer, SIZE_MAX, c->full);
	for (r = c->head; r; r = next) {
		next = r->next;
		free(r);
	}
	for (struct pc_ctx **p = &pcs.ctxs; *p; p = &(*p)->next)
		if (*p == c) {
			*p = c->next;
			break;
		}
	free(c->by_key);
	free(c);
}

/* A context was made (a former one at its address is forgotten) or is going (what
 * PC sampling did there is disabled, as CUPTI tears it down at the context's destruction). */
static void pc_context(CUcontext ctx, uint32_t ctx_id, bool created)
{
	struct pc_ctx *c, *next;

	pthread_mutex_lock(&lock);
	for (c = pcs.ctxs; c; c = next) {
		next = c->next;
		if (c->ctx == ctx && (created || c->ctx_id == ctx_id)) {
			STANDIN_TRACE(LIB "PC sampling of context %u ends with it", c->ctx_id);
			pc_disable(c);
		}
	}
	pthread_mutex_unlock(&lock);
}

/* The checks every PC sampling call makes: the size of its parameters (at least `need`),
 * a live context, and (unless `enabling`) PC sampling enabled there; *c is then its state,
 * with the lock held. */
static CUptiResult pc_enter(const void *params, size_t need, CUcontext ctx, struct pc_ctx **c)
{
	uint32_t id;

	if (!params || *(const size_t *)params < need)
		return CUPTI_ERROR_INVALID_PARAMETER;
	id = live_ctx(ctx);
	if (!id) {
		STANDIN_TRACE(LIB "PC sampling: %p is not a context", (void *)ctx);
		return CUPTI_ERROR_INVALID_PARAMETER;
	}
	pthread_mutex_lock(&lock);
	*c = pc_ctx_of(ctx, id);
	if (!*c) {
		pthread_mutex_unlock(&lock);
		STANDIN_TRACE(LIB "PC sampling is not enabled on context %u", id);
		return CUPTI_ERROR_INVALID_OPERATION;
	}
	return CUPTI_SUCCESS;
}

CUptiResult cuptiPCSamplingEnable(CUpti_PCSamplingEnableParams *pParams)
{
	struct pc_ctx *c;
	CUptiResult r;
	uint32_t id;
	int64_t max;

	if (!pParams || pParams->size < CUpti_PCSamplingEnableParamsSize)
		return CUPTI_ERROR_INVALID_PARAMETER;
	r = hook();
	if (r)
		return r;
	id = live_ctx(pParams->ctx);
	if (!id) {
		STANDIN_TRACE(LIB "cuptiPCSamplingEnable: %p is not a context",
			      (void *)pParams->ctx);
		return CUPTI_ERROR_INVALID_PARAMETER;
	}
	max = standin_env_int("SONDE_STANDIN_PC_MAX_PCS", 4096);
	pthread_mutex_lock(&lock);
	if (pc_ctx_of(pParams->ctx, id)) {
		pthread_mutex_unlock(&lock);
		STANDIN_TRACE(LIB "cuptiPCSamplingEnable: already enabled on context %u", id);
		return CUPTI_ERROR_INVALID_OPERATION;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		pthread_mutex_unlock(&lock);
		return CUPTI_ERROR_OUT_OF_MEMORY;
	}
	c->ctx = pParams->ctx;
	c->ctx_id = id;
	c->period = PC_PERIOD_DEFAULT;
	c->selected = (1u << PC_REASONS) - 1;
	c->scratch_bytes = 1 << 20;
	c->hw_bytes = 512 << 20;
	c->sleep_ms = 100;
	c->tail = &c->head;
	c->max_pcs = max > 0 ? (size_t)max : 0;
	c->next = pcs.ctxs;
	pcs.ctxs = c;
	pthread_mutex_unlock(&lock);
	STANDIN_TRACE(LIB "PC sampling enabled on context %u", id);
	return CUPTI_SUCCESS;
}

CUptiResult cuptiPCSamplingDisable(CUpti_PCSamplingDisableParams *pParams)
{
	struct pc_ctx *c;
	CUptiResult r;

	r = pc_enter(pParams, CUpti_PCSamplingDisableParamsSize, pParams ? pParams->ctx : NULL, &c);
	if (r)
		return r;
	pc_disable(c);
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

/* Start and stop need start/stop control, which the stand-in never turns on. */
static CUptiResult pc_range(const void *params, size_t need, CUcontext ctx, const char *what)
{
	struct pc_ctx *c;
	CUptiResult r = pc_enter(params, need, ctx, &c);

	if (r)
		return r;
	pthread_mutex_unlock(&lock);
	STANDIN_TRACE(LIB "%s: start/stop control is off (the stand-in samples continuously)",
		      what);
	return CUPTI_ERROR_INVALID_OPERATION;
}

CUptiResult cuptiPCSamplingStart(CUpti_PCSamplingStartParams *pParams)
{
	return pc_range(pParams, CUpti_PCSamplingStartParamsSize, pParams ? pParams->ctx : NULL,
			"cuptiPCSamplingStart");
}

CUptiResult cuptiPCSamplingStop(CUpti_PCSamplingStopParams *pParams)
{
	return pc_range(pParams, CUpti_PCSamplingStopParamsSize, pParams ? pParams->ctx : NULL,
			"cuptiPCSamplingStop");
}

CUptiResult cuptiPCSamplingGetNumStallReasons(CUpti_PCSamplingGetNumStallReasonsParams *pParams)
{
	struct pc_ctx *c;
	CUptiResult r;

	r = pc_enter(pParams, CUpti_PCSamplingGetNumStallReasonsParamsSize,
		     pParams ? pParams->ctx : NULL, &c);
	if (r)
		return r;
	pthread_mutex_unlock(&lock);
	if (!pParams->numStallReasons)
		return CUPTI_ERROR_INVALID_PARAMETER;
	*pParams->numStallReasons = PC_REASONS;
	return CUPTI_SUCCESS;
}

/* Writes the first numStallReasons of the table (all five when there is room). */
CUptiResult cuptiPCSamplingGetStallReasons(CUpti_PCSamplingGetStallReasonsParams *pParams)
{
	struct pc_ctx *c;
	CUptiResult r;
	size_t n;

	r = pc_enter(pParams, CUpti_PCSamplingGetStallReasonsParamsSize,
		     pParams ? pParams->ctx : NULL, &c);
	if (r)
		return r;
	pthread_mutex_unlock(&lock);
	n = pParams->numStallReasons < PC_REASONS ? pParams->numStallReasons : PC_REASONS;
	if (!pParams->stallReasonIndex || !pParams->stallReasons)
		return CUPTI_ERROR_INVALID_PARAMETER;
	for (size_t i = 0; i < n; i++)
		if (!pParams->stallReasons[i])
			return CUPTI_ERROR_INVALID_PARAMETER;
	for (size_t i = 0; i < n; i++) {
		pParams->stallReasonIndex[i] = reasons[i].index;
		snprintf(pParams->stallReasons[i], CUPTI_STALL_REASON_STRING_SIZE, "%s",
			 reasons[i].name);
	}
	return CUPTI_SUCCESS;
}

/* An attribute's value checked: CUPTI_SUCCESS, CUPTI_ERROR_INVALID_PARAMETER (a value out
 * of range), CUPTI_ERROR_NOT_SUPPORTED (what the stand-in does not do) or
 * CUPTI_ERROR_INVALID_OPERATION (no such attribute, or one that cannot be written). */
static CUptiResult pc_attr_check(const CUpti_PCSamplingConfigurationInfo *a)
{
	const typeof(a->attributeData) *v = &a->attributeData;
	uint32_t period;

	switch (a->attributeType) {
	case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD:
		period = v->samplingPeriodData.samplingPeriod;
		return period >= 5 && period <= 31 ? CUPTI_SUCCESS : CUPTI_ERROR_INVALID_PARAMETER;
	case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON:
		if (!v->stallReasonData.stallReasonCount || !v->stallReasonData.pStallReasonIndex)
			return CUPTI_ERROR_INVALID_PARAMETER;
		for (size_t i = 0; i < v->stallReasonData.stallReasonCount; i++) {
			int k = 0;

			while (k < PC_REASONS &&
			       reasons[k].index != v->stallReasonData.pStallReasonIndex[i])
				k++;
			if (k == PC_REASONS)
				return CUPTI_ERROR_INVALID_PARAMETER;
		}
		return CUPTI_SUCCESS;
	case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SCRATCH_BUFFER_SIZE:
		return v->scratchBufferSizeData.scratchBufferSize ? CUPTI_SUCCESS
								  : CUPTI_ERROR_INVALID_PARAMETER;
	case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_HARDWARE_BUFFER_SIZE:
		return v->hardwareBufferSizeData.hardwareBufferSize ? CUPTI_SUCCESS
								    : CUPTI_ERROR_INVALID_PARAMETER;
	case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE:
		if (v->collectionModeData.collectionMode ==
		    CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS)
			return CUPTI_SUCCESS;
		if (v->collectionModeData.collectionMode ==
		    CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED) {
			STANDIN_TRACE(LIB "PC sampling: the stand-in does continuous mode only, "
					  "not KERNEL_SERIALIZED");
			return CUPTI_ERROR_NOT_SUPPORTED;
		}
		return CUPTI_ERROR_INVALID_PARAMETER;
	case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_ENABLE_START_STOP_CONTROL:
		if (!v->enableStartStopControlData.enableStartStopControl)
			return CUPTI_SUCCESS;
		STANDIN_TRACE(LIB "PC sampling: the stand-in does continuous mode only, "
				  "without start/stop control");
		return CUPTI_ERROR_NOT_SUPPORTED;
	case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_OUTPUT_DATA_FORMAT:
		if (v->outputDataFormatData.outputDataFormat ==
		    CUPTI_PC_SAMPLING_OUTPUT_DATA_FORMAT_PARSED)
			return CUPTI_SUCCESS;
		return CUPTI_ERROR_INVALID_PARAMETER;
	case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER:
		return pc_data_ok(v->samplingDataBufferData.samplingDataBuffer)
			       ? CUPTI_SUCCESS
			       : CUPTI_ERROR_INVALID_PARAMETER;
	case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_WORKER_THREAD_PERIODIC_SLEEP_SPAN:
		return CUPTI_SUCCESS;
	default:
		return CUPTI_ERROR_INVALID_OPERATION;
	}
}

/* Sets a checked attribute. Lock held. */
static void pc_attr_set(struct pc_ctx *c, const CUpti_PCSamplingConfigurationInfo *a)
{
	const typeof(a->attributeData) *v = &a->attributeData;

	switch (a->attributeType) {
	case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD:
		c->period = v->samplingPeriodData.samplingPeriod;
		break;
	case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON:
		c->selected = 0;
		for (size_t i = 0; i < v->stallReasonData.stallReasonCount; i++)
			for (int k = 0; k < PC_REASONS; k++)
				if (reasons[k].index == v->stallReasonData.pStallReasonIndex[i])
					c->selected |= 1u << k;
		break;
	case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SCRATCH_BUFFER_SIZE:
		c->scratch_bytes = v->scratchBufferSizeData.scratchBufferSize;
		break;
	case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_HARDWARE_BUFFER_SIZE:
		c->hw_bytes = v->hardwareBufferSizeData.hardwareBufferSize;
		break;
	case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER:
		c->buffer = v->samplingDataBufferData.samplingDataBuffer;
		break;
	case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_WORKER_THREAD_PERIODIC_SLEEP_SPAN:
		c->sleep_ms = v->workerThreadPeriodicSleepSpanData.workerThreadPeriodicSleepSpan;
		break;
	default: /* the only values allowed: continuous, no start/stop control, parsed */
		break;
	}
}

/* All or nothing: each attribute's status says what was wrong with it, and the call
 * returns the first such error, setting none. */
CUptiResult
cuptiPCSamplingSetConfigurationAttribute(CUpti_PCSamplingConfigurationInfoParams *pParams)
{
	CUptiResult r, first = CUPTI_SUCCESS;
	struct pc_ctx *c;

	r = pc_enter(pParams, CUpti_PCSamplingConfigurationInfoParamsSize,
		     pParams ? pParams->ctx : NULL, &c);
	if (r)
		return r;
	if (pParams->numAttributes && !pParams->pPCSamplingConfigurationInfo) {
		pthread_mutex_unlock(&lock);
		return CUPTI_ERROR_INVALID_PARAMETER;
	}
	for (size_t i = 0; i < pParams->numAttributes; i++) {
		CUpti_PCSamplingConfigurationInfo *a = &pParams->pPCSamplingConfigurationInfo[i];

		a->attributeStatus = pc_attr_check(a);
		if (a->attributeStatus && !first) {
			first = a->attributeStatus;
			STANDIN_TRACE(LIB "cuptiPCSamplingSetConfigurationAttribute: attribute %d "
					  "refused (%d)",
				      (int)a->attributeType, (int)first);
		}
	}
	for (size_t i = 0; !first && i < pParams->numAttributes; i++)
		pc_attr_set(c, &pParams->pPCSamplingConfigurationInfo[i]);
	pthread_mutex_unlock(&lock);
	return first;
}

/* The attributes marked [r] or [rw] in the header; the [w] ones (stall reasons, output
 * format, sampling data buffer) fail with CUPTI_ERROR_INVALID_OPERATION. */
CUptiResult
cuptiPCSamplingGetConfigurationAttribute(CUpti_PCSamplingConfigurationInfoParams *pParams)
{
	CUptiResult r, first = CUPTI_SUCCESS;
	struct pc_ctx *c;

	r = pc_enter(pParams, CUpti_PCSamplingConfigurationInfoParamsSize,
		     pParams ? pParams->ctx : NULL, &c);
	if (r)
		return r;
	if (pParams->numAttributes && !pParams->pPCSamplingConfigurationInfo) {
		pthread_mutex_unlock(&lock);
		return CUPTI_ERROR_INVALID_PARAMETER;
	}
	for (size_t i = 0; i < pParams->numAttributes; i++) {
		CUpti_PCSamplingConfigurationInfo *a = &pParams->pPCSamplingConfigurationInfo[i];
		typeof(a->attributeData) *v = &a->attributeData;

		a->attributeStatus = CUPTI_SUCCESS;
		switch (a->attributeType) {
		case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD:
			v->samplingPeriodData.samplingPeriod = c->period;
			break;
		case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SCRATCH_BUFFER_SIZE:
			v->scratchBufferSizeData.scratchBufferSize = c->scratch_bytes;
			break;
		case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_HARDWARE_BUFFER_SIZE:
			v->hardwareBufferSizeData.hardwareBufferSize = c->hw_bytes;
			break;
		case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE:
			v->collectionModeData.collectionMode =
				CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS;
			break;
		case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_ENABLE_START_STOP_CONTROL:
			v->enableStartStopControlData.enableStartStopControl = 0;
			break;
		case CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_WORKER_THREAD_PERIODIC_SLEEP_SPAN:
			v->workerThreadPeriodicSleepSpanData.workerThreadPeriodicSleepSpan =
				c->sleep_ms;
			break;
		default:
			a->attributeStatus = CUPTI_ERROR_INVALID_OPERATION;
			if (!first)
				first = a->attributeStatus;
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	return first;
}

CUptiResult cuptiPCSamplingGetData(CUpti_PCSamplingGetDataParams *pParams)
{
	CUpti_PCSamplingData *d;
	struct pc_ctx *c;
	CUptiResult r;

	r = pc_enter(pParams, CUpti_PCSamplingGetDataParamsSize, pParams ? pParams->ctx : NULL, &c);
	if (r)
		return r;
	d = pParams->pcSamplingData;
	if (!pc_data_ok(d) || !pc_room_ok(c, d)) {
		pthread_mutex_unlock(&lock);
		return CUPTI_ERROR_INVALID_PARAMETER;
	}
	if (c->full) {
		/* The hardware buffer filled: no PC this time, those pending stay. */
		STANDIN_TRACE(LIB "PC sampling on context %u: %llu samples dropped", c->ctx_id,
			      (unsigned long long)c->dropped);
		pc_write(c, d, 0, true);
		pthread_mutex_unlock(&lock);
		return CUPTI_ERROR_OUT_OF_MEMORY;
	}
	pc_write(c, d, SIZE_MAX, false);
	pthread_mutex_unlock(&lock);
	return CUPTI_SUCCESS;
}

/* The stand-in's CRC of a cubin: FNV-1a over its bytes, as its PC records' cubinCrc is of
 * the cubin of their function's module (the one MODULE_LOADED gave). */
CUptiResult cuptiGetCubinCrc(CUpti_GetCubinCrcParams *pParams)
{
	if (!pParams || pParams->size < CUpti_GetCubinCrcParamsSize || !pParams->cubin ||
	    !pParams->cubinSize)
		return CUPTI_ERROR_INVALID_PARAMETER;
	pParams->cubinCrc = fnv1a(pParams->cubin, pParams->cubinSize);
	return CUPTI_SUCCESS;
}
