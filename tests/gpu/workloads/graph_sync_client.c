/*
 * graph_sync_client.c: a client of three more kinds of CUPTI activity records, driven as a
 * profiler drives them, linked to the stand-ins (libcuda.so.1, libcudart.so.13,
 * libcupti.so.13), checking the CUPTI stand-in's records against NVIDIA's header and
 * tests/gpu/standin/cupti.c:
 *
 * - CUPTI_ACTIVITY_KIND_GRAPH_TRACE (CUpti_ActivityGraphTrace2): while it is disabled, each
 *   kernel a graph launch runs has a kernel record carrying its graph's id (cuptiGetGraphId
 *   of the CUgraph the exec was instantiated from, numbered from 1) and its node's
 *   (cuptiGetGraphNodeId of a node added with cuGraphAddKernelNode; unique per node, the
 *   same at every launch), a plain kernel 0 and 0; while it is enabled, one graph record
 *   per graph launch (cudaGraphLaunch and cuGraphLaunch) -- the launch's correlation id,
 *   its nodes' interval on the kernels' clock, device, context, stream, graph id, the same
 *   device and context at the end -- and no kernel record of its nodes, plain kernels
 *   recorded as before.
 * - CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (CUpti_ActivitySynchronization2): one record per
 *   synchronization call that succeeded -- cudaStreamSynchronize and cuStreamSynchronize
 *   (STREAM_SYNCHRONIZE, the stream), cudaDeviceSynchronize, cuCtxSynchronize and
 *   cuCtxSynchronize_v2 (CONTEXT_SYNCHRONIZE), cudaEventSynchronize and cuEventSynchronize
 *   (EVENT_SYNCHRONIZE, a stable id per event, a cudaEventSyncId per record),
 *   cudaStreamWaitEvent and cuStreamWaitEvent (STREAM_WAIT_EVENT, the waiting stream and
 *   the event) -- with the context, the fields that do not apply
 *   CUPTI_SYNCHRONIZATION_INVALID_VALUE, its interval the call's on CUPTI's clock and
 *   containing the end of the work it waited for, and the correlation id of the call's
 *   outermost callback (runtime or driver); none for a failed call, none while disabled.
 * - Memory pools: the default pool of device 0 (cudaDeviceGetDefaultMemPool, the same as
 *   cuDeviceGetDefaultMemPool) under a release threshold (cudaMemPoolSetAttribute): MEMORY2
 *   records' memoryPoolConfig (size what the pool holds after the call, utilizedSize what
 *   its allocations use, the threshold, its address), cudaMemGetInfo counting what the
 *   pool holds (not what its allocations use), the pool attributes, memory going back at
 *   a synchronization after the threshold is lowered, and one
 *   CUPTI_ACTIVITY_KIND_MEMORY_POOL record (CUpti_ActivityMemoryPool3, TRIMMED) per
 *   successful cudaMemPoolTrimTo / cuMemPoolTrimTo, none of a default pool's creation.
 *
 * One "ok: ..." line a check, exit 1 at the first that fails.
 * tests/integration/test_gpu_cupti_standin.py runs it. Test-only.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti.h>

#define MIB (1ull << 20)
#define CLIENT_BUF_BYTES (4 << 20) /* no buffer fills in a phase: all come back at the flush */
#define MAX_RECS 512
#define MAX_CALLS 1024
#define KERNEL_US 200
#define KERNEL_NS (KERNEL_US * 1000ull)
#define SLACK_NS 10000000ull /* the stand-in's clock against cuptiGetTimestamp's */
#define NONE CUPTI_SYNCHRONIZATION_INVALID_VALUE

#include "cupti_client.h"

static void ok(CUptiResult r, const char *what)
{
	check(r == CUPTI_SUCCESS, "%s (%d)", what, (int)r);
}

/* ---- the records, as the buffers bring them back ---------------------------------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static CUpti_ActivityKernel10 kernels[MAX_RECS];
static CUpti_ActivityGraphTrace2 graphs[MAX_RECS];
static CUpti_ActivitySynchronization2 syncs[MAX_RECS];
static CUpti_ActivityMemory4 mems[MAX_RECS];
static CUpti_ActivityMemoryPool3 pools[MAX_RECS];
static int nkernels, ngraphs, nsyncs, nmems, npools, nothers;
static int launched; /* kernels launched (not captured) since the last forget() */

#define KEEP(arr, n, r)                                                                            \
	do {                                                                                       \
		if ((n) < MAX_RECS)                                                                \
			memcpy(&(arr)[(n)++], (r), sizeof((arr)[0]));                              \
	} while (0)

static void CUPTIAPI on_complete(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
				 size_t valid)
{
	CUpti_Activity *r = NULL;

	pthread_mutex_lock(&lock);
	while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
		switch (r->kind) {
		case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
			KEEP(kernels, nkernels, r);
			break;
		case CUPTI_ACTIVITY_KIND_GRAPH_TRACE:
			KEEP(graphs, ngraphs, r);
			break;
		case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION:
			KEEP(syncs, nsyncs, r);
			break;
		case CUPTI_ACTIVITY_KIND_MEMORY2:
			KEEP(mems, nmems, r);
			break;
		case CUPTI_ACTIVITY_KIND_MEMORY_POOL:
			KEEP(pools, npools, r);
			break;
		default:
			nothers++;
		}
	}
	pthread_mutex_unlock(&lock);
	free(buffer);
}

/* Forgets the records read so far. */
static void forget(void)
{
	pthread_mutex_lock(&lock);
	nkernels = ngraphs = nsyncs = nmems = npools = 0;
	launched = 0;
	pthread_mutex_unlock(&lock);
}

/* Every record made so far is in the arrays when it returns. */
static void flush(const char *phase)
{
	check(cuptiActivityFlushAll(0) == CUPTI_SUCCESS && !nothers,
	      "%s: cuptiActivityFlushAll, every buffer back, no record of another kind (%d)", phase,
	      nothers);
}

static uint64_t now(void)
{
	uint64_t t = 0;

	cuptiGetTimestamp(&t);
	return t;
}

/* ---- the callbacks: each outermost enabled call's correlation id ------------------------- */

struct call {
	CUpti_CallbackDomain domain;
	CUpti_CallbackId cbid;
	uint32_t correlation;
};

static struct call calls[MAX_CALLS];
static int ncalls;
static __thread int depth;

static void CUPTIAPI on_callback(void *userdata, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
				 const void *data)
{
	const CUpti_CallbackData *d = data;

	if (domain != CUPTI_CB_DOMAIN_RUNTIME_API && domain != CUPTI_CB_DOMAIN_DRIVER_API)
		return;
	if (d->callbackSite == CUPTI_API_EXIT) {
		depth--;
		return;
	}
	if (!depth++ && ncalls < MAX_CALLS)
		calls[ncalls++] = (struct call){domain, cbid, d->correlationId};
}

/* The correlation id of the last outermost call, which must be cbid of domain. */
static uint32_t last_call(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const char *what)
{
	const struct call *c = ncalls ? &calls[ncalls - 1] : NULL;

	check(c && c->domain == domain && c->cbid == cbid && c->correlation,
	      "%s: its %s callback came, correlation id %u", what,
	      domain == CUPTI_CB_DOMAIN_RUNTIME_API ? "runtime" : "driver", c ? c->correlation : 0);
	return c->correlation;
}

static const CUpti_CallbackId runtime_cbids[] = {
	CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
	CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
	CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
	CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020,
	CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020,
	CUPTI_RUNTIME_TRACE_CBID_cudaMemPoolTrimTo_v11020,
};

static const CUpti_CallbackId driver_cbids[] = {
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,	     CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
	CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,
	CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2, CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize,
	CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent,   CUPTI_DRIVER_TRACE_CBID_cuMemPoolTrimTo,
};

/* ---- kernels ---------------------------------------------------------------------------- */

static CUfunction fn;

static void launch(CUstream s)
{
	cu(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL), "cuLaunchKernel");
	launched++;
}

static const CUpti_ActivityKernel10 *kernel_at(int i)
{
	return i < nkernels ? &kernels[i] : NULL;
}

/* ---- graph trace -------------------------------------------------------------------------- */

static uint32_t ctx0, sid; /* device 0's context, the created stream's id */

static void graph_phase(CUstream s)
{
	cudaGraph_t ga, gb;
	cudaGraphExec_t xa, xb;
	CUgraphNode nb[2];
	uint64_t nid[2], anodes[3];
	uint32_t ida = 0, idb = 0, corr_a, corr_b, corr_a2;
	CUDA_KERNEL_NODE_PARAMS np = {.func = fn,
				      .gridDimX = 1,
				      .gridDimY = 1,
				      .gridDimZ = 1,
				      .blockDimX = 32,
				      .blockDimY = 1,
				      .blockDimZ = 1};
	bool same;

	/* A graph captured from three launches, one built of two kernel nodes. */
	rt(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture");
	for (int i = 0; i < 3; i++)
		cu(cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, (CUstream)s, NULL, NULL),
		   "cuLaunchKernel (captured)");
	rt(cudaStreamEndCapture(s, &ga), "cudaStreamEndCapture");
	rt(cudaGraphCreate(&gb, 0), "cudaGraphCreate");
	cu(cuGraphAddKernelNode(&nb[0], (CUgraph)gb, NULL, 0, &np), "cuGraphAddKernelNode");
	cu(cuGraphAddKernelNode(&nb[1], (CUgraph)gb, &nb[0], 1, &np), "cuGraphAddKernelNode");
	ok(cuptiGetGraphId((CUgraph)ga, &ida), "cuptiGetGraphId of the captured graph");
	ok(cuptiGetGraphId((CUgraph)gb, &idb), "cuptiGetGraphId of the built graph");
	check(ida == 1 && idb == 2, "graph ids from 1 in the order the graphs were made: %u, %u",
	      ida, idb);
	ok(cuptiGetGraphNodeId(nb[0], &nid[0]), "cuptiGetGraphNodeId");
	ok(cuptiGetGraphNodeId(nb[1], &nid[1]), "cuptiGetGraphNodeId");
	check(nid[0] && nid[1] && nid[0] != nid[1], "two nodes, two ids: %llu, %llu",
	      (unsigned long long)nid[0], (unsigned long long)nid[1]);
	check(cuptiGetGraphId((CUgraph)0x1000, &idb) == CUPTI_ERROR_INVALID_PARAMETER,
	      "cuptiGetGraphId of something that is no graph: CUPTI_ERROR_INVALID_PARAMETER");
	rt(cudaGraphInstantiate(&xa, ga, 0), "cudaGraphInstantiate");
	rt(cudaGraphInstantiate(&xb, gb, 0), "cudaGraphInstantiate");
	/* As CUDA allows: the exec outlives its graph, keeping its id. */
	rt(cudaGraphDestroy(ga), "cudaGraphDestroy");

	/* GRAPH_TRACE disabled: every node a kernel record, with its graph and node ids. */
	forget();
	rt(cudaGraphLaunch(xa, s), "cudaGraphLaunch");
	corr_a = last_call(CUPTI_CB_DOMAIN_RUNTIME_API,
			   CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, "cudaGraphLaunch");
	launch(s);
	cu(cuGraphLaunch((CUgraphExec)xb, (CUstream)s), "cuGraphLaunch");
	corr_b = last_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
			   "cuGraphLaunch");
	rt(cudaGraphLaunch(xa, s), "cudaGraphLaunch");
	corr_a2 = last_call(CUPTI_CB_DOMAIN_RUNTIME_API,
			    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, "cudaGraphLaunch");
	rt(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	flush("graph trace disabled");
	check(nkernels == 3 + 1 + 2 + 3 && !ngraphs,
	      "graph trace disabled: a kernel record per node run and plain kernel (%d of 9), no "
	      "graph record (%d)",
	      nkernels, ngraphs);
	same = true;
	for (int i = 0; i < 3; i++) {
		const CUpti_ActivityKernel10 *k = kernel_at(i), *k2 = kernel_at(6 + i);

		anodes[i] = k->graphNodeId;
		same = same && k->graphId == ida && k2->graphId == ida && k->graphNodeId &&
		       k2->graphNodeId == k->graphNodeId && k->correlationId == corr_a &&
		       k2->correlationId == corr_a2 && k->streamId == sid;
	}
	check(same && anodes[0] != anodes[1] && anodes[1] != anodes[2] && anodes[0] != anodes[2],
	      "the captured graph's kernels: graphId %u, node ids %llu, %llu, %llu (the same at "
	      "both launches), each launch's correlation id (%u, %u)",
	      ida, (unsigned long long)anodes[0], (unsigned long long)anodes[1],
	      (unsigned long long)anodes[2], corr_a, corr_a2);
	check(!kernel_at(3)->graphId && !kernel_at(3)->graphNodeId,
	      "a plain kernel: graphId 0, graphNodeId 0");
	check(kernel_at(4)->graphId == idb && kernel_at(5)->graphId == idb &&
		      kernel_at(4)->graphNodeId == nid[0] && kernel_at(5)->graphNodeId == nid[1] &&
		      kernel_at(4)->correlationId == corr_b &&
		      kernel_at(5)->correlationId == corr_b,
	      "the built graph's kernels: graphId %u, the node ids cuptiGetGraphNodeId gave, the "
	      "cuGraphLaunch's correlation id %u",
	      idb, corr_b);
	for (int i = 0; i < 3; i++)
		check(anodes[i] != nid[0] && anodes[i] != nid[1],
		      "node id %llu is unique among the two graphs' nodes",
		      (unsigned long long)anodes[i]);

	/* GRAPH_TRACE enabled: a record per graph launch, none of its nodes. */
	ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE),
	   "cuptiActivityEnable(GRAPH_TRACE)");
	forget();
	rt(cudaGraphLaunch(xa, s), "cudaGraphLaunch");
	corr_a = last_call(CUPTI_CB_DOMAIN_RUNTIME_API,
			   CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, "cudaGraphLaunch");
	launch(s);
	cu(cuGraphLaunch((CUgraphExec)xb, (CUstream)s), "cuGraphLaunch");
	corr_b = last_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
			   "cuGraphLaunch");
	rt(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	flush("graph trace enabled");
	check(ngraphs == 2 && nkernels == 1,
	      "graph trace enabled: one record per graph launch (%d of 2), no kernel record of "
	      "their nodes: only the plain kernel's (%d of 1)",
	      ngraphs, nkernels);
	for (int i = 0; i < 2; i++) {
		const CUpti_ActivityGraphTrace2 *g = &graphs[i];
		uint32_t id = i ? idb : ida, corr = i ? corr_b : corr_a;
		uint64_t nodes = i ? 2 : 3;

		check(g->kind == CUPTI_ACTIVITY_KIND_GRAPH_TRACE && g->graphId == id &&
			      g->correlationId == corr && g->end - g->start == nodes * KERNEL_NS &&
			      g->deviceId == 0 && g->contextId == ctx0 && g->streamId == sid &&
			      g->endDeviceId == 0 && g->endContextId == ctx0,
		      "%s: graphId %u, correlation id %u (the launch's: %u), %llu ns (%llu nodes "
		      "of "
		      "%llu), device %u, context %u, stream %u, ending on device %u, context %u",
		      i ? "cuGraphLaunch" : "cudaGraphLaunch", g->graphId, g->correlationId, corr,
		      (unsigned long long)(g->end - g->start), (unsigned long long)nodes, KERNEL_NS,
		      g->deviceId, g->contextId, g->streamId, g->endDeviceId, g->endContextId);
	}
	check(graphs[0].end <= kernels[0].start && kernels[0].end <= graphs[1].start &&
		      !kernels[0].graphId,
	      "in stream order, on the kernels' clock: the first graph ends (%llu) before the "
	      "plain kernel starts (%llu), which ends (%llu) before the second graph starts "
	      "(%llu)",
	      (unsigned long long)graphs[0].end, (unsigned long long)kernels[0].start,
	      (unsigned long long)kernels[0].end, (unsigned long long)graphs[1].start);

	/* Disabled again: the nodes' kernel records again. */
	ok(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE),
	   "cuptiActivityDisable(GRAPH_TRACE)");
	forget();
	cu(cuGraphLaunch((CUgraphExec)xb, (CUstream)s), "cuGraphLaunch");
	rt(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	flush("graph trace disabled again");
	check(nkernels == 2 && !ngraphs && kernels[0].graphId == idb,
	      "graph trace disabled again: the nodes' kernel records (%d), no graph record (%d)",
	      nkernels, ngraphs);
	rt(cudaGraphExecDestroy(xa), "cudaGraphExecDestroy");
	rt(cudaGraphExecDestroy(xb), "cudaGraphExecDestroy");
	rt(cudaGraphDestroy(gb), "cudaGraphDestroy");
	forget();
}

/* ---- synchronization ---------------------------------------------------------------------- */

struct sync_want {
	const char *what;
	CUpti_ActivitySynchronizationType type;
	uint32_t ctx, stream, event; /* NONE: not applicable */
	uint32_t correlation;
	uint64_t t0, t1; /* around the call */
	bool waits;	 /* for the kernels launched before it (their last end) */
	int before;	 /* kernels launched before it in the phase: filled in by sync_expect */
};

static struct sync_want swants[64];
static int nswants;
static uint64_t last_syncid; /* the last cudaEventSyncId seen: each is larger */

static const char *sync_name(CUpti_ActivitySynchronizationType t)
{
	switch (t) {
	case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE:
		return "EVENT_SYNCHRONIZE";
	case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT:
		return "STREAM_WAIT_EVENT";
	case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE:
		return "STREAM_SYNCHRONIZE";
	case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE:
		return "CONTEXT_SYNCHRONIZE";
	default:
		return "another type";
	}
}

static void sync_expect(struct sync_want w)
{
	w.before = launched;
	swants[nswants++] = w;
}

/* Queues n kernels on s. */
static void queue(CUstream s, int n)
{
	for (int i = 0; i < n; i++)
		launch(s);
}

/* Flushes and checks the synchronization records against swants, in order. The work a wait
 * waited for ends with the last of the kernels launched before it (their records come in
 * the order they were launched). */
static void compare_syncs(const char *phase)
{
	uint64_t syncid[64];

	flush(phase);
	check(nsyncs == nswants, "%s: %d synchronization records, one per successful call (%d)",
	      phase, nsyncs, nswants);
	for (int i = 0; i < nsyncs; i++) {
		const CUpti_ActivitySynchronization2 *r = &syncs[i];
		const struct sync_want *w = &swants[i];
		bool event = w->type == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE ||
			     w->type == CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT;
		uint64_t work = 0;

		for (int k = 0; w->waits && k < w->before && k < nkernels; k++)
			if (kernels[k].end > work)
				work = kernels[k].end;
		syncid[i] = r->cudaEventSyncId;
		check(r->kind == CUPTI_ACTIVITY_KIND_SYNCHRONIZATION && r->type == w->type &&
			      r->contextId == w->ctx && r->streamId == w->stream &&
			      r->cudaEventId == w->event && r->correlationId == w->correlation &&
			      !r->returnValue &&
			      (event ? r->cudaEventSyncId != NONE : r->cudaEventSyncId == NONE),
		      "%s: %s: %s, context %u, stream %u, event %u (want %u, %u, %u), correlation "
		      "id %u (the call's %u), cudaEventSyncId %llu, returnValue %u",
		      phase, w->what, sync_name(r->type), r->contextId, r->streamId, r->cudaEventId,
		      w->ctx, w->stream, w->event, r->correlationId, w->correlation,
		      (unsigned long long)r->cudaEventSyncId, r->returnValue);
		check(r->start + SLACK_NS >= w->t0 && r->start <= r->end &&
			      r->end <= w->t1 + SLACK_NS,
		      "%s: %s: [%llu, %llu] on CUPTI's clock, within the call [%llu, %llu]", phase,
		      w->what, (unsigned long long)r->start, (unsigned long long)r->end,
		      (unsigned long long)w->t0, (unsigned long long)w->t1);
		if (w->waits)
			check(work && r->end >= work && r->start < work,
			      "%s: %s: the wait [%llu, %llu] holds the end of the work it waited "
			      "for (%llu)",
			      phase, w->what, (unsigned long long)r->start,
			      (unsigned long long)r->end, (unsigned long long)work);
		if (event) {
			bool own = true;

			for (int j = 0; j < i; j++)
				own = own && syncid[j] != syncid[i];
			check(own && syncid[i] > last_syncid,
			      "%s: %s: cudaEventSyncId %llu is its own, none before it in the "
			      "process",
			      phase, w->what, (unsigned long long)syncid[i]);
			last_syncid = syncid[i];
		}
	}
	nswants = 0;
	forget();
}

static void sync_phase(CUstream s, CUstream s2, uint32_t sid2)
{
	cudaEvent_t ev, ev2;
	uint32_t eid = 0, eid2 = 0;
	uint64_t t0;
	CUcontext ctx;

	rt(cudaEventCreate(&ev), "cudaEventCreate");
	rt(cudaEventCreate(&ev2), "cudaEventCreate");
	cu(cuCtxGetCurrent(&ctx), "cuCtxGetCurrent");
	ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION),
	   "cuptiActivityEnable(SYNCHRONIZATION)");
	forget();

	/* Streams. */
	queue(s, 3);
	t0 = now();
	rt(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	sync_expect((struct sync_want){
		"cudaStreamSynchronize", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE,
		ctx0, sid, NONE,
		last_call(CUPTI_CB_DOMAIN_RUNTIME_API,
			  CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
			  "cudaStreamSynchronize"),
		t0, now(), true, 0});
	queue(s2, 2);
	t0 = now();
	cu(cuStreamSynchronize((CUstream)s2), "cuStreamSynchronize");
	sync_expect((struct sync_want){
		"cuStreamSynchronize", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, ctx0,
		sid2, NONE,
		last_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize,
			  "cuStreamSynchronize"),
		t0, now(), true, 0});

	/* Contexts. */
	queue(s, 2);
	t0 = now();
	rt(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	sync_expect((struct sync_want){
		"cudaDeviceSynchronize", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE,
		ctx0, NONE, NONE,
		last_call(CUPTI_CB_DOMAIN_RUNTIME_API,
			  CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
			  "cudaDeviceSynchronize"),
		t0, now(), true, 0});
	queue(s2, 1);
	t0 = now();
	cu(cuCtxSynchronize(), "cuCtxSynchronize");
	sync_expect((struct sync_want){
		"cuCtxSynchronize", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE, ctx0,
		NONE, NONE,
		last_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,
			  "cuCtxSynchronize"),
		t0, now(), true, 0});
	t0 = now();
	cu(cuCtxSynchronize_v2(ctx), "cuCtxSynchronize_v2");
	sync_expect((struct sync_want){
		"cuCtxSynchronize_v2", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE,
		ctx0, NONE, NONE,
		last_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2,
			  "cuCtxSynchronize_v2"),
		t0, now(), false, 0});
	compare_syncs("streams and contexts");

	/* Events: the event ids come from the first records. */
	queue(s, 2);
	rt(cudaEventRecord(ev, s), "cudaEventRecord");
	t0 = now();
	rt(cudaEventSynchronize(ev), "cudaEventSynchronize");
	sync_expect((struct sync_want){
		"cudaEventSynchronize", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE, ctx0,
		NONE, 0,
		last_call(CUPTI_CB_DOMAIN_RUNTIME_API,
			  CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020,
			  "cudaEventSynchronize"),
		t0, now(), true, 0});
	rt(cudaEventRecord(ev2, s2), "cudaEventRecord");
	t0 = now();
	cu(cuEventSynchronize((CUevent)ev2), "cuEventSynchronize");
	sync_expect((struct sync_want){
		"cuEventSynchronize", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE, ctx0,
		NONE, 0,
		last_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize,
			  "cuEventSynchronize"),
		t0, now(), false, 0});
	flush("events");
	check(nsyncs == 2 && syncs[0].cudaEventId != NONE && syncs[0].cudaEventId &&
		      syncs[1].cudaEventId != NONE && syncs[1].cudaEventId != syncs[0].cudaEventId,
	      "two events, two cudaEventIds: %u, %u", nsyncs > 0 ? syncs[0].cudaEventId : 0,
	      nsyncs > 1 ? syncs[1].cudaEventId : 0);
	eid = swants[0].event = syncs[0].cudaEventId;
	eid2 = swants[1].event = syncs[1].cudaEventId;
	compare_syncs("events");

	/* The same events again: the same ids, new cudaEventSyncIds; a stream waiting. */
	queue(s, 2);
	rt(cudaEventRecord(ev, s), "cudaEventRecord");
	t0 = now();
	rt(cudaStreamWaitEvent(s2, ev, 0), "cudaStreamWaitEvent");
	sync_expect((struct sync_want){"cudaStreamWaitEvent",
				       CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, ctx0,
				       sid2, eid,
				       last_call(CUPTI_CB_DOMAIN_RUNTIME_API,
						 CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020,
						 "cudaStreamWaitEvent"),
				       t0, now(), false, 0});
	t0 = now();
	cu(cuStreamWaitEvent((CUstream)s, (CUevent)ev2, 0), "cuStreamWaitEvent");
	sync_expect((struct sync_want){
		"cuStreamWaitEvent", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, ctx0,
		sid, eid2,
		last_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent,
			  "cuStreamWaitEvent"),
		t0, now(), false, 0});
	t0 = now();
	rt(cudaEventSynchronize(ev), "cudaEventSynchronize");
	sync_expect((struct sync_want){
		"cudaEventSynchronize again", CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE,
		ctx0, NONE, eid,
		last_call(CUPTI_CB_DOMAIN_RUNTIME_API,
			  CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020,
			  "cudaEventSynchronize"),
		t0, now(), true, 0});
	/* Failed calls: no record. */
	check(cudaEventSynchronize((cudaEvent_t)0x1000) != cudaSuccess,
	      "cudaEventSynchronize of something that is no event fails");
	check(cuStreamWaitEvent((CUstream)s, (CUevent)0x1000, 0) != CUDA_SUCCESS,
	      "cuStreamWaitEvent of something that is no event fails");
	check(cuStreamSynchronize((CUstream)0x1000) != CUDA_SUCCESS,
	      "cuStreamSynchronize of something that is no stream fails");
	compare_syncs("waits");

	/* Disabled: no record. */
	ok(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION),
	   "cuptiActivityDisable(SYNCHRONIZATION)");
	queue(s, 1);
	rt(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	rt(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	rt(cudaEventSynchronize(ev), "cudaEventSynchronize");
	flush("synchronization disabled");
	check(!nsyncs, "SYNCHRONIZATION disabled: no record (%d)", nsyncs);
	forget();
	rt(cudaEventDestroy(ev), "cudaEventDestroy");
	rt(cudaEventDestroy(ev2), "cudaEventDestroy");
}

/* ---- memory pools ------------------------------------------------------------------------- */

static cudaMemPool_t pool;
static int64_t used0;

/* Bytes in use on device 0, as the fake GPU accounts them (contexts included). */
static int64_t used(void)
{
	size_t free = 0, total = 0;

	rt(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
	return (int64_t)(total - free);
}

/* A cuuint64_t attribute (the reuse policies are ints). */
static uint64_t attr(enum cudaMemPoolAttr a)
{
	uint64_t v = 0;
	int i = 0;

	if (a <= cudaMemPoolReuseAllowInternalDependencies) {
		rt(cudaMemPoolGetAttribute(pool, a, &i), "cudaMemPoolGetAttribute");
		return (uint64_t)i;
	}
	rt(cudaMemPoolGetAttribute(pool, a, &v), "cudaMemPoolGetAttribute");
	return v;
}

static uint64_t base; /* the pool's address, as its first record gives it */

/* The MEMORY2 record (flushed) of the call just made: its pool fields, and what
 * cudaMemGetInfo and the pool's attributes say now. */
static void pool_after(const char *what, void *addr, bool release, uint64_t held, uint64_t inuse,
		       uint64_t threshold)
{
	const CUpti_ActivityMemory4 *r;

	flush(what);
	r = nmems ? &mems[nmems - 1] : NULL;
	if (r && !base) {
		base = r->memoryPoolConfig.address;
		check(base && r->address >= base,
		      "the pool's address, 0x%llx, is at or below its memory (0x%llx)",
		      (unsigned long long)base, (unsigned long long)r->address);
	}
	check(nmems == 1 && r->address == (uint64_t)(uintptr_t)addr &&
		      r->memoryPoolConfig.address == base &&
		      r->memoryOperationType ==
			      (release ? CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE
				       : CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION) &&
		      r->memoryPoolConfig.memoryPoolType == CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL &&
		      r->memoryPoolConfig.pool.size == held &&
		      r->memoryPoolConfig.utilizedSize == inuse &&
		      r->memoryPoolConfig.releaseThreshold == threshold,
	      "%s: its MEMORY2 record: the pool holds %llu MiB (want %llu), its allocations use "
	      "%llu MiB (want %llu), threshold %llu MiB",
	      what, r ? (unsigned long long)(r->memoryPoolConfig.pool.size / MIB) : 0,
	      (unsigned long long)(held / MIB),
	      r ? (unsigned long long)(r->memoryPoolConfig.utilizedSize / MIB) : 0,
	      (unsigned long long)(inuse / MIB),
	      r ? (unsigned long long)(r->memoryPoolConfig.releaseThreshold / MIB) : 0);
	check(used() - used0 == (int64_t)held && attr(cudaMemPoolAttrReservedMemCurrent) == held &&
		      attr(cudaMemPoolAttrUsedMemCurrent) == inuse,
	      "%s: cudaMemGetInfo counts what the pool holds, %lld MiB more in use (%llu held, "
	      "%llu used by its attributes)",
	      what, (long long)((used() - used0) / (int64_t)MIB),
	      (unsigned long long)(attr(cudaMemPoolAttrReservedMemCurrent) / MIB),
	      (unsigned long long)(attr(cudaMemPoolAttrUsedMemCurrent) / MIB));
	forget();
}

/* A TRIMMED record of the trim just made. */
static void trimmed(const char *what, uint32_t correlation, uint64_t keep, uint64_t held,
		    uint64_t inuse, uint64_t threshold, uint64_t base, uint64_t t0)
{
	const CUpti_ActivityMemoryPool3 *r;
	uint64_t t1 = now();

	flush(what);
	r = npools ? &pools[0] : NULL;
	check(npools == 1 &&
		      r->memoryPoolOperationType ==
			      CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED &&
		      r->memoryPoolType == CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL &&
		      r->correlationId == correlation && r->processId == (uint32_t)getpid() &&
		      r->deviceId == 0 && r->minBytesToKeep == keep && r->address == base &&
		      r->size == held && r->utilizedSize == inuse &&
		      r->releaseThreshold == threshold && !r->isManagedPool,
	      "%s: one MEMORY_POOL record (%d): TRIMMED, LOCAL, correlation id %u (the call's "
	      "%u), pid, device 0, minBytesToKeep %llu MiB, at the pool's address, size %llu MiB "
	      "(want %llu), utilized %llu MiB (want %llu), threshold %llu MiB",
	      what, npools, r ? r->correlationId : 0, correlation, (unsigned long long)(keep / MIB),
	      r ? (unsigned long long)(r->size / MIB) : 0, (unsigned long long)(held / MIB),
	      r ? (unsigned long long)(r->utilizedSize / MIB) : 0,
	      (unsigned long long)(inuse / MIB),
	      r ? (unsigned long long)(r->releaseThreshold / MIB) : 0);
	check(r->timestamp + SLACK_NS >= t0 && r->timestamp <= t1 + SLACK_NS,
	      "%s: its timestamp %llu is within the call [%llu, %llu]", what,
	      (unsigned long long)r->timestamp, (unsigned long long)t0, (unsigned long long)t1);
	check(used() - used0 == (int64_t)held, "%s: cudaMemGetInfo: %lld MiB more in use", what,
	      (long long)((used() - used0) / (int64_t)MIB));
	forget();
}

static void pool_phase(CUstream s)
{
	CUmemoryPool cpool;
	uint64_t v, t0;
	void *a, *b, *c, *d;
	uint32_t corr;

	rt(cudaDeviceGetDefaultMemPool(&pool, 0), "cudaDeviceGetDefaultMemPool");
	cu(cuDeviceGetDefaultMemPool(&cpool, 0), "cuDeviceGetDefaultMemPool");
	check(pool && (void *)cpool == (void *)pool,
	      "cudaDeviceGetDefaultMemPool and cuDeviceGetDefaultMemPool give device 0's pool");
	check(attr(cudaMemPoolAttrReleaseThreshold) == 0 &&
		      attr(cudaMemPoolAttrReservedMemCurrent) == 0 &&
		      attr(cudaMemPoolAttrUsedMemCurrent) == 0 &&
		      attr(cudaMemPoolReuseFollowEventDependencies) == 1,
	      "a pool not used yet: release threshold 0 (the default), nothing held or used, "
	      "reuse policies enabled");
	ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY2), "cuptiActivityEnable(MEMORY2)");
	ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY_POOL),
	   "cuptiActivityEnable(MEMORY_POOL)");
	forget();
	used0 = used();

	v = 64 * MIB;
	rt(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &v),
	   "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold)");
	check(attr(cudaMemPoolAttrReleaseThreshold) == 64 * MIB,
	      "the release threshold set to 64 MiB reads back");
	rt(cudaMallocAsync(&a, 16 * MIB, s), "cudaMallocAsync");
	pool_after("cudaMallocAsync 16 MiB", a, false, 16 * MIB, 16 * MIB, 64 * MIB);
	rt(cudaMallocAsync(&b, 32 * MIB, s), "cudaMallocAsync");
	pool_after("cudaMallocAsync 32 MiB", b, false, 48 * MIB, 48 * MIB, 64 * MIB);
	rt(cudaFreeAsync(a, s), "cudaFreeAsync");
	pool_after("cudaFreeAsync 16 MiB under the threshold", a, true, 48 * MIB, 32 * MIB,
		   64 * MIB);
	rt(cudaMallocAsync(&c, 8 * MIB, s), "cudaMallocAsync");
	pool_after("cudaMallocAsync 8 MiB of what the pool holds", c, false, 48 * MIB, 40 * MIB,
		   64 * MIB);
	rt(cudaMallocAsync(&d, 40 * MIB, s), "cudaMallocAsync");
	pool_after("cudaMallocAsync 40 MiB, the pool grows", d, false, 80 * MIB, 80 * MIB,
		   64 * MIB);
	rt(cudaFreeAsync(d, s), "cudaFreeAsync");
	pool_after("cudaFreeAsync 40 MiB: the pool keeps the threshold's 64 MiB", d, true, 64 * MIB,
		   40 * MIB, 64 * MIB);

	/* The attributes: high watermarks, reset only to the current value by setting 0. */
	check(attr(cudaMemPoolAttrReservedMemHigh) == 80 * MIB &&
		      attr(cudaMemPoolAttrUsedMemHigh) == 80 * MIB,
	      "high watermarks: 80 MiB held, 80 MiB used");
	v = 0;
	rt(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &v),
	   "cudaMemPoolSetAttribute(cudaMemPoolAttrReservedMemHigh, 0)");
	check(attr(cudaMemPoolAttrReservedMemHigh) == 64 * MIB,
	      "setting the high watermark to 0 resets it to what the pool holds now, 64 MiB");
	v = 5;
	check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReservedMemHigh, &v) != cudaSuccess &&
		      cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &v) !=
			      cudaSuccess,
	      "a high watermark set to anything but 0, a current amount set at all: refused");
	cudaGetLastError();

	/* Trims: to what is asked or what is used, never up. */
	t0 = now();
	rt(cudaMemPoolTrimTo(pool, 50 * MIB), "cudaMemPoolTrimTo");
	corr = last_call(CUPTI_CB_DOMAIN_RUNTIME_API,
			 CUPTI_RUNTIME_TRACE_CBID_cudaMemPoolTrimTo_v11020, "cudaMemPoolTrimTo");
	trimmed("cudaMemPoolTrimTo 50 MiB", corr, 50 * MIB, 50 * MIB, 40 * MIB, 64 * MIB, base, t0);
	t0 = now();
	cu(cuMemPoolTrimTo(cpool, 100 * MIB), "cuMemPoolTrimTo");
	corr = last_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemPoolTrimTo,
			 "cuMemPoolTrimTo");
	trimmed("cuMemPoolTrimTo 100 MiB (a trim never grows the pool)", corr, 100 * MIB, 50 * MIB,
		40 * MIB, 64 * MIB, base, t0);
	t0 = now();
	cu(cuMemPoolTrimTo(cpool, 0), "cuMemPoolTrimTo");
	corr = last_call(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuMemPoolTrimTo,
			 "cuMemPoolTrimTo");
	trimmed("cuMemPoolTrimTo 0 (down to what is used)", corr, 0, 40 * MIB, 40 * MIB, 64 * MIB,
		base, t0);
	check(cudaMemPoolTrimTo((cudaMemPool_t)0x1000, 0) != cudaSuccess &&
		      cuMemPoolTrimTo((CUmemoryPool)0x1000, 0) != CUDA_SUCCESS,
	      "trimming something that is no pool fails");
	cudaGetLastError();
	flush("failed trims");
	check(!npools, "failed trims: no MEMORY_POOL record (%d)", npools);

	/* A lower threshold: memory above it goes back at the next synchronization. */
	rt(cudaMallocAsync(&d, 20 * MIB, s), "cudaMallocAsync");
	pool_after("cudaMallocAsync 20 MiB", d, false, 60 * MIB, 60 * MIB, 64 * MIB);
	rt(cudaFreeAsync(d, s), "cudaFreeAsync");
	pool_after("cudaFreeAsync 20 MiB", d, true, 60 * MIB, 40 * MIB, 64 * MIB);
	v = 0;
	rt(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &v),
	   "cudaMemPoolSetAttribute(cudaMemPoolAttrReleaseThreshold, 0)");
	check(used() - used0 == (int64_t)(60 * MIB) &&
		      attr(cudaMemPoolAttrReservedMemCurrent) == 60 * MIB,
	      "threshold lowered to 0: the pool still holds 60 MiB until the host synchronizes");
	rt(cudaStreamSynchronize(s), "cudaStreamSynchronize");
	check(used() - used0 == (int64_t)(40 * MIB) &&
		      attr(cudaMemPoolAttrReservedMemCurrent) == 40 * MIB,
	      "after cudaStreamSynchronize it holds what its allocations use, 40 MiB (%lld MiB "
	      "more in use)",
	      (long long)((used() - used0) / (int64_t)MIB));
	rt(cudaFreeAsync(b, s), "cudaFreeAsync");
	pool_after("cudaFreeAsync 32 MiB at threshold 0", b, true, 8 * MIB, 8 * MIB, 0);
	rt(cudaFreeAsync(c, s), "cudaFreeAsync");
	pool_after("cudaFreeAsync 8 MiB at threshold 0", c, true, 0, 0, 0);

	/* MEMORY_POOL disabled: a trim makes no record. */
	ok(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMORY_POOL),
	   "cuptiActivityDisable(MEMORY_POOL)");
	rt(cudaMemPoolTrimTo(pool, 0), "cudaMemPoolTrimTo");
	flush("MEMORY_POOL disabled");
	check(!npools && !nmems, "MEMORY_POOL disabled: no record of a trim (%d)", npools);
	ok(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMORY2), "cuptiActivityDisable(MEMORY2)");
	forget();
}

int main(void)
{
	static const char image[] = "sonde-standin graph_sync_client module";
	CUpti_SubscriberHandle sub;
	cudaStream_t s, s2;
	CUmodule mod;
	uint32_t sid2;
	size_t dropped = 1;
	char us[16];

	snprintf(us, sizeof(us), "%d", KERNEL_US);
	setenv("SONDE_STANDIN_KERNEL_US", us, 1); /* before the first call reads it */
	ok(cuptiActivityRegisterCallbacks(on_request, on_complete),
	   "cuptiActivityRegisterCallbacks");
	ok(cuptiSubscribe(&sub, on_callback, NULL), "cuptiSubscribe");
	for (size_t i = 0; i < sizeof(runtime_cbids) / sizeof(runtime_cbids[0]); i++)
		ok(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API, runtime_cbids[i]),
		   "cuptiEnableCallback of a runtime call");
	for (size_t i = 0; i < sizeof(driver_cbids) / sizeof(driver_cbids[0]); i++)
		ok(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, driver_cbids[i]),
		   "cuptiEnableCallback of a driver call");
	ok(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
	   "cuptiActivityEnable(CONCURRENT_KERNEL)");
	cu(cuInit(0), "cuInit");
	rt(cudaSetDevice(0), "cudaSetDevice");
	rt(cudaStreamCreate(&s), "cudaStreamCreate");
	rt(cudaStreamCreate(&s2), "cudaStreamCreate");
	cu(cuModuleLoadData(&mod, image), "cuModuleLoadData");
	cu(cuModuleGetFunction(&fn, mod, "_Z6kernelv"), "cuModuleGetFunction");

	/* The ids of device 0's context and the two streams, from kernel records. */
	launch(s);
	launch(s2);
	rt(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
	flush("setup");
	check(nkernels == 2 && kernels[0].contextId && kernels[0].streamId != kernels[1].streamId,
	      "device 0's context is %u, the streams %u and %u", kernels[0].contextId,
	      kernels[0].streamId, kernels[1].streamId);
	ctx0 = kernels[0].contextId;
	sid = kernels[0].streamId;
	sid2 = kernels[1].streamId;
	forget();

	graph_phase(s);
	sync_phase(s, s2, sid2);
	pool_phase(s);

	ok(cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped),
	   "cuptiActivityGetNumDroppedRecords");
	check(!dropped, "no record dropped (%zu)", dropped);
	printf("graph_sync_client: %d checks passed\n", checks);
	return 0;
}
