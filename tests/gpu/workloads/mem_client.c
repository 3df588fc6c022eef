/*
 * mem_client.c: a client of CUPTI's memory activity records (CUPTI_ACTIVITY_KIND_MEMORY2,
 * CUpti_ActivityMemory4) driven as a profiler that accounts each process's device memory
 * from CUPTI drives them: it registers activity buffers, enables MEMSET (whose records tell
 * it the ids of its contexts and streams) and MEMORY2, and reads the records at
 * cuptiActivityFlushAll. Linked to the stand-ins (libcuda.so.1, libcudart.so.13,
 * libcupti.so.13), it allocates and frees device memory every way the fake GPU does
 * (cudaMalloc, cuMemAlloc, managed, async from the pool, VMM physical handles, on two
 * devices, on a thread with no context) and checks the CUPTI stand-in's records against
 * the header and tests/gpu/standin/cupti.c: one record per successful call, with its type,
 * kind, address, bytes, device, context, stream, isAsync, pool fields and time; none for a
 * failed call, a mapping, or while the kind is disabled; the bytes allocated less those
 * released equal to what the fake GPU says is in use (cudaMemGetInfo); and, across threads
 * that reuse each other's addresses, every address's records alternating allocation and
 * release. The pools keep their default release threshold, 0: what a pool holds of its
 * device (its records' pool.size, and what cudaMemGetInfo counts) grows with an allocation
 * that does not fit and comes back down to what its allocations use at each release, so
 * it is always what they use here (graph_sync_client.c checks a pool under a threshold). One "ok: ..." line a check, exit 1 at the first that fails.
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
#define DEVICE CUPTI_ACTIVITY_MEMORY_KIND_DEVICE
#define MANAGED CUPTI_ACTIVITY_MEMORY_KIND_MANAGED
#define CLIENT_BUF_BYTES                                                                           \
	(8 << 20) /* no buffer fills in a phase: all come back at the flush, in order */
#define MAX_RECS 8192
#define MAX_SETS 64
#define MAX_WANTS 64
#define THREADS 4
#define ROUNDS 300
#define SLACK_NS 10000000ull /* the stand-in's clock against cuptiGetTimestamp's */

#include "cupti_client.h"

/* ---- the records, as the buffers bring them back ---------------------------------------- */

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static CUpti_ActivityMemory4 recs[MAX_RECS];
static CUpti_ActivityMemset4 sets[MAX_SETS];
static int nrecs, nsets, nothers;

static void CUPTIAPI on_complete(CUcontext ctx, uint32_t stream, uint8_t *buffer, size_t size,
				 size_t valid)
{
	CUpti_Activity *r = NULL;

	pthread_mutex_lock(&lock);
	while (cuptiActivityGetNextRecord(buffer, valid, &r) == CUPTI_SUCCESS) {
		if (r->kind == CUPTI_ACTIVITY_KIND_MEMORY2 && nrecs < MAX_RECS)
			memcpy(&recs[nrecs++], r, sizeof(recs[0]));
		else if (r->kind == CUPTI_ACTIVITY_KIND_MEMSET && nsets < MAX_SETS)
			memcpy(&sets[nsets++], r, sizeof(sets[0]));
		else
			nothers++;
	}
	pthread_mutex_unlock(&lock);
	free(buffer);
}

/* Every record made so far is in recs and sets when it returns. */
static void flush(void)
{
	check(cuptiActivityFlushAll(0) == CUPTI_SUCCESS && !nothers,
	      "cuptiActivityFlushAll: every buffer back, no record of another kind (%d)", nothers);
}

/* Forgets the records read so far. */
static void forget(void)
{
	pthread_mutex_lock(&lock);
	nrecs = nsets = 0;
	pthread_mutex_unlock(&lock);
}

static uint64_t now(void)
{
	uint64_t t = 0;

	cuptiGetTimestamp(&t);
	return t;
}

/* ---- what each call should have recorded ------------------------------------------------ */

struct want {
	const char *what;
	bool release;
	CUpti_ActivityMemoryKind kind;
	uint64_t address, bytes;
	int dev;
	uint32_t ctx;	 /* CUPTI_INVALID_CONTEXT_ID: none current */
	uint32_t stream; /* an async call's; 0: not async */
	bool pool;	 /* memory of the device's pool */
	/* Filled in by expect(). */
	uint64_t pool_used, pool_reserved, t0, t1;
};

static struct want wants[MAX_WANTS];
static int nwants;
static int64_t live[2];		 /* per device: bytes allocated less released, as called */
static uint64_t pool_live[2];	 /* per device: bytes of live pool allocations */
static uint64_t pool_held[2];	 /* per device: what the pool holds of the device */
static uint64_t pool_base[2];	 /* per device: the pool's address, as first recorded */
static int64_t recorded_live[2]; /* per device: the same, from the records */

/* One successful call made since t0 should have made the record w. */
static void expect(struct want w, uint64_t t0)
{
	int64_t sign = w.release ? -1 : 1;

	live[w.dev] += sign * (int64_t)w.bytes;
	if (w.pool) {
		pool_live[w.dev] += (uint64_t)sign * w.bytes;
		/* An allocation grows the pool to fit; a release gives back what it holds above
		 * max(used, release threshold), the threshold 0 here. */
		if (!w.release && pool_live[w.dev] > pool_held[w.dev])
			pool_held[w.dev] = pool_live[w.dev];
		else if (w.release)
			pool_held[w.dev] = pool_live[w.dev];
	}
	w.pool_used = pool_live[w.dev];
	w.pool_reserved = pool_held[w.dev];
	w.t0 = t0;
	w.t1 = now();
	if (nwants == MAX_WANTS) {
		printf("FAIL: more than %d records expected in a phase\n", MAX_WANTS);
		exit(1);
	}
	wants[nwants++] = w;
}

static const char *kind_name(CUpti_ActivityMemoryKind k)
{
	return k == CUPTI_ACTIVITY_MEMORY_KIND_DEVICE	 ? "DEVICE"
	       : k == CUPTI_ACTIVITY_MEMORY_KIND_MANAGED ? "MANAGED"
							 : "another kind";
}

/* Whether r's pool fields are w's: the device's pool, or none at all. */
static bool pool_ok(const CUpti_ActivityMemory4 *r, const struct want *w)
{
	const typeof(r->memoryPoolConfig) *p = &r->memoryPoolConfig;

	if (!w->pool)
		return p->memoryPoolType == CUPTI_ACTIVITY_MEMORY_POOL_TYPE_INVALID &&
		       !p->address && !p->releaseThreshold && !p->pool.size && !p->utilizedSize;
	if (!pool_base[w->dev])
		pool_base[w->dev] = p->address;
	return p->memoryPoolType == CUPTI_ACTIVITY_MEMORY_POOL_TYPE_LOCAL && p->address &&
	       p->address == pool_base[w->dev] && r->address >= p->address &&
	       !p->releaseThreshold && p->pool.size == w->pool_reserved &&
	       p->utilizedSize == w->pool_used;
}

/* Flushes, and checks that the records since the last forget() are the ones expected, one
 * per call, in order. */
static void compare(const char *phase)
{
	flush();
	check(nrecs == nwants, "%s: %d memory records, one per successful call (%d)", phase, nrecs,
	      nwants);
	for (int i = 0; i < nrecs; i++) {
		const CUpti_ActivityMemory4 *r = &recs[i];
		const struct want *w = &wants[i];
		uint32_t stream = w->stream ? w->stream : CUPTI_INVALID_STREAM_ID;
		bool same =
			r->kind == CUPTI_ACTIVITY_KIND_MEMORY2 &&
			r->memoryOperationType ==
				(w->release ? CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE
					    : CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_ALLOCATION) &&
			r->memoryKind == w->kind && r->address == w->address &&
			r->bytes == w->bytes && r->deviceId == (uint32_t)w->dev &&
			r->contextId == w->ctx && r->streamId == stream &&
			r->isAsync == (w->stream != 0) && r->correlationId == 0 && !r->PC &&
			r->processId == (uint32_t)getpid() && !r->name && !r->source;

		if (!same)
			printf("want: %s %s of %llu bytes at 0x%llx, device %d, context %u, stream "
			       "%u, isAsync %d\n",
			       w->release ? "RELEASE" : "ALLOCATION", kind_name(w->kind),
			       (unsigned long long)w->bytes, (unsigned long long)w->address, w->dev,
			       w->ctx, stream, w->stream != 0);
		check(same,
		      "%s: %s: %s %s of %llu bytes at 0x%llx, device %u, context %u, stream %u, "
		      "isAsync %u, correlation id %u, PC 0, pid, no name",
		      phase, w->what,
		      r->memoryOperationType == CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE
			      ? "RELEASE"
			      : "ALLOCATION",
		      kind_name(r->memoryKind), (unsigned long long)r->bytes,
		      (unsigned long long)r->address, r->deviceId, r->contextId, r->streamId,
		      r->isAsync, r->correlationId);
		check(pool_ok(r, w),
		      "%s: %s: pool %s (type %d, at 0x%llx, threshold %llu, size %llu, utilized "
		      "%llu; %llu held, %llu in use)",
		      phase, w->what, w->pool ? "the device's" : "none",
		      (int)r->memoryPoolConfig.memoryPoolType,
		      (unsigned long long)r->memoryPoolConfig.address,
		      (unsigned long long)r->memoryPoolConfig.releaseThreshold,
		      (unsigned long long)r->memoryPoolConfig.pool.size,
		      (unsigned long long)r->memoryPoolConfig.utilizedSize,
		      (unsigned long long)w->pool_reserved, (unsigned long long)w->pool_used);
		check(r->timestamp + SLACK_NS >= w->t0 && r->timestamp <= w->t1 + SLACK_NS,
		      "%s: %s: timestamp %llu on the wall clock, within the call [%llu, %llu]",
		      phase, w->what, (unsigned long long)r->timestamp, (unsigned long long)w->t0,
		      (unsigned long long)w->t1);
		recorded_live[w->dev] += (w->release ? -1 : 1) * (int64_t)r->bytes;
	}
	nwants = 0;
	forget();
}

/* Bytes in use on the current device, as the fake GPU accounts them (contexts included). */
static int64_t used(void)
{
	size_t free = 0, total = 0;

	rt(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
	return (int64_t)(total - free);
}

/* ---- a thread without a context, and threads reusing each other's addresses ------------- */

static CUmemAllocationProp prop0 = {
	.type = CU_MEM_ALLOCATION_TYPE_PINNED,
	.location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
};

static void *create_bare(void *arg)
{
	CUcontext ctx = (CUcontext)1;
	CUmemGenericAllocationHandle *h = arg;
	uint64_t t0 = now();

	cuCtxGetCurrent(&ctx);
	check(!ctx, "a new thread has no current context");
	cu(cuMemCreate(h, 2 * MIB, &prop0, 0), "cuMemCreate");
	expect((struct want){.what = "cuMemCreate with no context",
			     .kind = DEVICE,
			     .address = (uint64_t)*h,
			     .bytes = 2 * MIB,
			     .ctx = CUPTI_INVALID_CONTEXT_ID},
	       t0);
	return NULL;
}

static void *churn(void *arg)
{
	rt(cudaSetDevice(0), "cudaSetDevice");
	for (int i = 0; i < ROUNDS; i++) {
		void *p;

		rt(cudaMalloc(&p, 4096), "cudaMalloc");
		rt(cudaFree(p), "cudaFree");
	}
	return NULL;
}

/* A record of the threads' churn: its address, and where it came among the records. */
struct seen {
	uint64_t address;
	int index;
	bool release;
	uint64_t bytes;
};

static struct seen order[MAX_RECS];

static int by_address(const void *a, const void *b)
{
	const struct seen *x = a, *y = b;

	if (x->address != y->address)
		return x->address < y->address ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

int main(void)
{
	void *a, *m, *x, *y, *d1, *e1, *f, *p0;
	CUdeviceptr b, m2, z, va, fd;
	CUmemGenericAllocationHandle h1, h2, h3, fh;
	uint32_t ctx0, ctx1 = 0, legacy, sid;
	int64_t used0, used1 = 0, grew;
	CUmemAccessDesc access = {.location = prop0.location,
				  .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
	pthread_t t[THREADS];
	cudaStream_t s;
	size_t dropped = 1;
	int ndev = 0, addrs = 0;
	bool alternate = true;
	CUptiResult r;
	uint64_t t0;

	check(cuptiActivityRegisterCallbacks(on_request, on_complete) == CUPTI_SUCCESS,
	      "cuptiActivityRegisterCallbacks");
	check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET) == CUPTI_SUCCESS,
	      "cuptiActivityEnable(MEMSET)");
	check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY) == CUPTI_ERROR_NOT_SUPPORTED,
	      "the older kind MEMORY (CUpti_ActivityMemory) is refused: CUPTI_ERROR_NOT_SUPPORTED");
	cu(cuInit(0), "cuInit");
	rt(cudaGetDeviceCount(&ndev), "cudaGetDeviceCount");
	rt(cudaSetDevice(0), "cudaSetDevice");
	rt(cudaStreamCreate(&s), "cudaStreamCreate");

	/* MEMORY2 never enabled: nothing recorded; the fills name the context and streams. */
	rt(cudaMalloc(&p0, 4096), "cudaMalloc");
	rt(cudaMemsetAsync(p0, 0, 16, 0), "cudaMemsetAsync");
	rt(cudaMemsetAsync(p0, 0, 16, s), "cudaMemsetAsync");
	rt(cudaFree(p0), "cudaFree");
	flush();
	check(!nrecs && nsets == 2,
	      "MEMORY2 not enabled: no memory record of a cudaMalloc and cudaFree (%d), the two "
	      "fills' records (%d)",
	      nrecs, nsets);
	ctx0 = sets[0].contextId;
	legacy = sets[0].streamId;
	sid = sets[1].streamId;
	check(ctx0 && ctx0 == sets[1].contextId && legacy != sid,
	      "device 0's context is %u, its legacy stream %u, the created one %u", ctx0, legacy,
	      sid);
	forget();
	used0 = used();

	/* Device 0: every way to allocate and free. */
	check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY2) == CUPTI_SUCCESS,
	      "cuptiActivityEnable(MEMORY2)");
	t0 = now();
	rt(cudaMalloc(&a, 3 * MIB + 100), "cudaMalloc");
	expect((struct want){.what = "cudaMalloc",
			     .kind = DEVICE,
			     .address = (uint64_t)a,
			     .bytes = 3 * MIB + 100,
			     .ctx = ctx0},
	       t0);
	t0 = now();
	cu(cuMemAlloc(&b, 4096), "cuMemAlloc");
	expect((struct want){.what = "cuMemAlloc",
			     .kind = DEVICE,
			     .address = b,
			     .bytes = 4096,
			     .ctx = ctx0},
	       t0);
	t0 = now();
	rt(cudaMallocManaged(&m, MIB + 1, cudaMemAttachGlobal), "cudaMallocManaged");
	expect((struct want){.what = "cudaMallocManaged",
			     .kind = MANAGED,
			     .address = (uint64_t)m,
			     .bytes = MIB + 1,
			     .ctx = ctx0},
	       t0);
	t0 = now();
	cu(cuMemAllocManaged(&m2, 8192, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
	expect((struct want){.what = "cuMemAllocManaged",
			     .kind = MANAGED,
			     .address = m2,
			     .bytes = 8192,
			     .ctx = ctx0},
	       t0);
	t0 = now();
	rt(cudaMallocAsync(&x, 5 * MIB, s), "cudaMallocAsync");
	expect((struct want){.what = "cudaMallocAsync on a stream",
			     .kind = DEVICE,
			     .address = (uint64_t)x,
			     .bytes = 5 * MIB,
			     .ctx = ctx0,
			     .stream = sid,
			     .pool = true},
	       t0);
	t0 = now();
	rt(cudaMallocAsync(&y, MIB, 0), "cudaMallocAsync");
	expect((struct want){.what = "cudaMallocAsync on the legacy stream",
			     .kind = DEVICE,
			     .address = (uint64_t)y,
			     .bytes = MIB,
			     .ctx = ctx0,
			     .stream = legacy,
			     .pool = true},
	       t0);
	t0 = now();
	cu(cuMemAllocAsync(&z, 2 * MIB, (CUstream)s), "cuMemAllocAsync");
	expect((struct want){.what = "cuMemAllocAsync",
			     .kind = DEVICE,
			     .address = z,
			     .bytes = 2 * MIB,
			     .ctx = ctx0,
			     .stream = sid,
			     .pool = true},
	       t0);

	/* Failed calls, and calls that allocate or free nothing: no record. */
	check(cudaMalloc(&f, 1ull << 50) != cudaSuccess, "cudaMalloc of 1 PiB fails");
	check(cudaFree((void *)0x1000) != cudaSuccess, "cudaFree of an unknown pointer fails");
	check(cuMemFree(0x1000) != CUDA_SUCCESS, "cuMemFree of an unknown pointer fails");
	check(cudaFreeAsync((void *)0x1000, s) != cudaSuccess,
	      "cudaFreeAsync of an unknown pointer fails");
	check(cuMemAlloc(&fd, 0) != CUDA_SUCCESS, "cuMemAlloc of 0 bytes fails");
	check(cuMemCreate(&fh, 1000, &prop0, 0) != CUDA_SUCCESS,
	      "cuMemCreate of a size that is not a multiple of the granularity fails");
	check(cuMemRelease(0x1000) != CUDA_SUCCESS, "cuMemRelease of an unknown handle fails");
	check(cudaMalloc(&f, 0) == cudaSuccess && !f && cudaFree(NULL) == cudaSuccess,
	      "cudaMalloc of 0 bytes gives NULL, cudaFree(NULL) does nothing");

	t0 = now();
	rt(cudaFreeAsync(x, s), "cudaFreeAsync");
	expect((struct want){.what = "cudaFreeAsync",
			     .release = true,
			     .kind = DEVICE,
			     .address = (uint64_t)x,
			     .bytes = 5 * MIB,
			     .ctx = ctx0,
			     .stream = sid,
			     .pool = true},
	       t0);
	t0 = now();
	rt(cudaFree(y), "cudaFree");
	expect((struct want){.what = "cudaFree of a pool allocation",
			     .release = true,
			     .kind = DEVICE,
			     .address = (uint64_t)y,
			     .bytes = MIB,
			     .ctx = ctx0,
			     .pool = true},
	       t0);
	t0 = now();
	cu(cuMemFreeAsync(b, (CUstream)s), "cuMemFreeAsync");
	expect((struct want){.what = "cuMemFreeAsync of a cuMemAlloc",
			     .release = true,
			     .kind = DEVICE,
			     .address = b,
			     .bytes = 4096,
			     .ctx = ctx0,
			     .stream = sid},
	       t0);
	t0 = now();
	rt(cudaFree(m), "cudaFree");
	expect((struct want){.what = "cudaFree of managed memory",
			     .release = true,
			     .kind = MANAGED,
			     .address = (uint64_t)m,
			     .bytes = MIB + 1,
			     .ctx = ctx0},
	       t0);
	t0 = now();
	cu(cuMemFree(m2), "cuMemFree");
	expect((struct want){.what = "cuMemFree of managed memory",
			     .release = true,
			     .kind = MANAGED,
			     .address = m2,
			     .bytes = 8192,
			     .ctx = ctx0},
	       t0);

	/* VMM: the physical handles, not their mappings. */
	t0 = now();
	cu(cuMemCreate(&h1, 2 * MIB, &prop0, 0), "cuMemCreate");
	expect((struct want){.what = "cuMemCreate",
			     .kind = DEVICE,
			     .address = h1,
			     .bytes = 2 * MIB,
			     .ctx = ctx0},
	       t0);
	t0 = now();
	cu(cuMemCreate(&h2, 4 * MIB, &prop0, 0), "cuMemCreate");
	expect((struct want){.what = "cuMemCreate",
			     .kind = DEVICE,
			     .address = h2,
			     .bytes = 4 * MIB,
			     .ctx = ctx0},
	       t0);
	cu(cuMemAddressReserve(&va, 8 * MIB, 0, 0, 0), "cuMemAddressReserve");
	cu(cuMemMap(va, 2 * MIB, 0, h1, 0), "cuMemMap");
	cu(cuMemMap(va + 2 * MIB, 4 * MIB, 0, h2, 0), "cuMemMap");
	cu(cuMemSetAccess(va, 6 * MIB, &access, 1), "cuMemSetAccess");
	cu(cuMemUnmap(va, 2 * MIB), "cuMemUnmap");
	cu(cuMemUnmap(va + 2 * MIB, 4 * MIB), "cuMemUnmap");
	cu(cuMemAddressFree(va, 8 * MIB), "cuMemAddressFree");
	t0 = now();
	cu(cuMemRelease(h1), "cuMemRelease");
	expect((struct want){.what = "cuMemRelease",
			     .release = true,
			     .kind = DEVICE,
			     .address = h1,
			     .bytes = 2 * MIB,
			     .ctx = ctx0},
	       t0);

	/* A physical allocation made on a thread with no context, released on this one. */
	pthread_create(&t[0], NULL, create_bare, &h3);
	pthread_join(t[0], NULL);
	t0 = now();
	cu(cuMemRelease(h3), "cuMemRelease");
	expect((struct want){.what = "cuMemRelease",
			     .release = true,
			     .kind = DEVICE,
			     .address = h3,
			     .bytes = 2 * MIB,
			     .ctx = ctx0},
	       t0);
	compare("device 0");
	grew = used() - used0;
	check(recorded_live[0] == live[0] && grew == live[0],
	      "device 0: the records' bytes allocated less released, %lld, are what is still "
	      "allocated (%lld called, %lld more in use by cudaMemGetInfo)",
	      (long long)recorded_live[0], (long long)live[0], (long long)grew);

	/* Device 1: its own device id, context and pool. */
	if (ndev >= 2) {
		rt(cudaSetDevice(1), "cudaSetDevice");
		used1 = used();
		t0 = now();
		rt(cudaMalloc(&d1, 7 * MIB), "cudaMalloc");
		rt(cudaMemsetAsync(d1, 0, 16, 0), "cudaMemsetAsync");
		flush();
		check(nsets == 1 && sets[0].contextId != ctx0 && sets[0].streamId == legacy,
		      "device 1's context is %u, its legacy stream %u", sets[0].contextId,
		      sets[0].streamId);
		ctx1 = sets[0].contextId;
		expect((struct want){.what = "cudaMalloc",
				     .kind = DEVICE,
				     .address = (uint64_t)d1,
				     .bytes = 7 * MIB,
				     .dev = 1,
				     .ctx = ctx1},
		       t0);
		t0 = now();
		rt(cudaMallocAsync(&e1, 3 * MIB, 0), "cudaMallocAsync");
		expect((struct want){.what = "cudaMallocAsync",
				     .kind = DEVICE,
				     .address = (uint64_t)e1,
				     .bytes = 3 * MIB,
				     .dev = 1,
				     .ctx = ctx1,
				     .stream = legacy,
				     .pool = true},
		       t0);
		t0 = now();
		rt(cudaFreeAsync(e1, 0), "cudaFreeAsync");
		expect((struct want){.what = "cudaFreeAsync",
				     .release = true,
				     .kind = DEVICE,
				     .address = (uint64_t)e1,
				     .bytes = 3 * MIB,
				     .dev = 1,
				     .ctx = ctx1,
				     .stream = legacy,
				     .pool = true},
		       t0);
		compare("device 1");
		check(pool_base[1] && pool_base[1] != pool_base[0],
		      "device 1's pool is its own (0x%llx; device 0's 0x%llx)",
		      (unsigned long long)pool_base[1], (unsigned long long)pool_base[0]);
		grew = used() - used1;
		check(recorded_live[1] == live[1] && grew == live[1],
		      "device 1: the records' bytes allocated less released, %lld, are what is "
		      "still allocated (%lld called, %lld more in use by cudaMemGetInfo)",
		      (long long)recorded_live[1], (long long)live[1], (long long)grew);
		rt(cudaSetDevice(0), "cudaSetDevice");
	} else {
		printf("skip: device 1 (SONDE_STANDIN_GPUS=%d)\n", ndev);
	}

	/* Threads freeing and allocating at once, each reusing the addresses another just
	 * freed: each address's records still alternate, allocation first. */
	for (int i = 0; i < THREADS; i++)
		pthread_create(&t[i], NULL, churn, NULL);
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	flush();
	check(nrecs == 2 * THREADS * ROUNDS,
	      "%d threads x %d cudaMalloc + cudaFree: %d records (%d)", THREADS, ROUNDS, nrecs,
	      2 * THREADS * ROUNDS);
	/* In the order they came (the buffer's), per address. */
	for (int i = 0; i < nrecs; i++)
		order[i] = (struct seen){recs[i].address, i,
					 recs[i].memoryOperationType ==
						 CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE,
					 recs[i].bytes};
	qsort(order, (size_t)nrecs, sizeof(order[0]), by_address);
	for (int i = 0; i < nrecs; i++) {
		bool first = !i || order[i].address != order[i - 1].address;
		bool last = i + 1 == nrecs || order[i + 1].address != order[i].address;

		addrs += first;
		alternate = alternate && order[i].bytes == 4096 &&
			    order[i].release == (first ? false : !order[i - 1].release) &&
			    (!last || order[i].release);
	}
	check(addrs < THREADS * ROUNDS, "addresses were reused: %d for %d allocations", addrs,
	      THREADS * ROUNDS);
	check(alternate, "every address's records alternate ALLOCATION and RELEASE of 4096 bytes "
			 "in the order they came, allocation first, release last");
	forget();

	/* Disabled: nothing recorded, while the fills still are. */
	check(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMORY2) == CUPTI_SUCCESS,
	      "cuptiActivityDisable(MEMORY2)");
	rt(cudaMalloc(&f, MIB), "cudaMalloc");
	rt(cudaMemsetAsync(f, 0, 16, s), "cudaMemsetAsync");
	rt(cudaFree(f), "cudaFree");
	rt(cudaMallocAsync(&f, MIB, s), "cudaMallocAsync");
	rt(cudaFreeAsync(f, s), "cudaFreeAsync");
	cu(cuMemCreate(&fh, 2 * MIB, &prop0, 0), "cuMemCreate");
	cu(cuMemRelease(fh), "cuMemRelease");
	flush();
	check(!nrecs && nsets == 1,
	      "MEMORY2 disabled: no memory record (%d), the fill's record all the same (%d)", nrecs,
	      nsets);
	forget();

	/* Enabled again: recorded again. */
	check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMORY2) == CUPTI_SUCCESS,
	      "cuptiActivityEnable(MEMORY2) again");
	t0 = now();
	rt(cudaFree(a), "cudaFree");
	expect((struct want){.what = "cudaFree",
			     .release = true,
			     .kind = DEVICE,
			     .address = (uint64_t)a,
			     .bytes = 3 * MIB + 100,
			     .ctx = ctx0},
	       t0);
	compare("enabled again");
	grew = used() - used0;
	check(recorded_live[0] == live[0] && grew == live[0] && live[0] == 4 * MIB + 2 * MIB,
	      "device 0: still allocated, by the records and cudaMemGetInfo, %lld bytes: "
	      "cuMemAllocAsync's 2 MiB and cuMemCreate's 4 MiB",
	      (long long)grew);
	r = cuptiActivityGetNumDroppedRecords(NULL, 0, &dropped);
	check(r == CUPTI_SUCCESS && !dropped, "no record dropped (%zu)", dropped);
	printf("mem_client: %d checks passed\n", checks);
	return 0;
}
