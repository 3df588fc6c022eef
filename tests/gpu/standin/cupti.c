/*
 * cupti.c: a stand-in for NVIDIA's CUPTI (libcupti.so.13), test-only, over the fake GPU of
 * the libcuda.so.1 stand-in: the part of its callback and activity APIs a profiler's
 * injection library uses to see each kernel launch with its correlation id and each
 * kernel's, copy's and fill's run on the GPU. Its structures are NVIDIA's own, from the
 * toolkit's headers (CUpti_CallbackData, the generated parameter structs,
 * CUpti_ActivityKernel10, CUpti_ActivityMemcpy6, CUpti_ActivityMemset4).
 *
 * As the real one: one subscriber per process (a second cuptiSubscribe fails with
 * CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED); callbacks of the runtime and driver launch
 * functions (cudaLaunchKernel, cudaLaunchKernelExC, cuLaunchKernel, cuLaunchKernelEx and
 * their _ptsz forms) and of the copies and fills at entry and exit, each call with its
 * correlation id, a record carrying the id of the outermost call that made it (a runtime
 * launch's, not the driver call it makes); kernel records (CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
 * or _KERNEL), copy (_MEMCPY) and fill (_MEMSET) records, each of its own size, written
 * into the buffers the client hands out, handed back when full -- on a
 * thread of its own -- or at cuptiActivityFlushAll, a record with no buffer to go in
 * counted as dropped. Timestamps are CLOCK_REALTIME nanoseconds (cuptiGetTimestamp), as
 * the GPU's global timer is, not the host's monotonic clock. Other kinds and domains are
 * refused with CUPTI_ERROR_NOT_SUPPORTED, saying what a client asked for that the stand-in
 * does not do.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Not cupti.h: its stand-ins for the obsolete _v1 structures clash with cuda.h's own,
 * which the stand-ins see (__CUDA_API_VERSION_INTERNAL). */
#include <cupti_activity.h>
#include <cupti_callbacks.h>
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
	bool copies, sets; /* MEMCPY, MEMSET enabled */
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

static const struct standin_tracer tracer = {.api = on_api, .kernel = on_kernel, .copy = on_copy};

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

/* Only the launch callbacks of the two API domains are issued here. */
static bool domain_ok(CUpti_CallbackDomain domain)
{
	return domain == CUPTI_CB_DOMAIN_DRIVER_API || domain == CUPTI_CB_DOMAIN_RUNTIME_API;
}

CUptiResult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle subscriber,
				CUpti_CallbackDomain domain, CUpti_CallbackId cbid)
{
	if (subscriber != (CUpti_SubscriberHandle)&st || !domain_ok(domain) || cbid >= MAX_CBID)
		return domain_ok(domain) ? CUPTI_ERROR_INVALID_PARAMETER
					 : CUPTI_ERROR_NOT_SUPPORTED;
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
	if (!domain_ok(domain))
		return CUPTI_ERROR_NOT_SUPPORTED;
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
	default:
		return 0;
	}
}

static void on_kernel(const struct standin_kernel_run *k)
{
	CUpti_ActivityKernel10 *r;

	pthread_mutex_lock(&lock);
	if (!st.kernels) {
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
