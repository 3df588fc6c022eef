/* gpu_state.c: turns the GPU probes' ring-buffer records (bpf/gpu.h) into
 * struct gpu_event, and keeps what the records teach: kernel handle to stub
 * or name, communicator to rank, who is blocked in a wait or a collective.
 * Also the table of probed functions. Pure userspace, no BPF: the unit
 * tests feed it records directly. */
#include "probe/gpu_probes_internal.h"
#include "cupti/sonde_cupti.h"
#include "probe/libscan.h"
#include "common/hash.h"
#include "symbolize/symbolize.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "common/xalloc.h"

#define RT LIBSCAN_RT
#define DRV LIBSCAN_DRV
#define NCCL LIBSCAN_NCCL
#define TORCH LIBSCAN_TORCH
#define CUPTI LIBSCAN_CUPTI
#define API(n, fam, cls) [GPU_API_##n] = {#n, fam, GPU_CLASS_##cls}
/* Probes on the calls of C++ functions: the function's name. */
#define CXX_API(n, name, fam, cls) [GPU_API_##n] = {name, fam, GPU_CLASS_##cls}

const struct gpu_api_info gpu_apis[GPU_API_MAX] = {
	API(cudaLaunchKernel, RT, RT_LAUNCH),
	API(cudaLaunchKernel_ptsz, RT, RT_LAUNCH),
	API(__cudaLaunchKernel, RT, RT_LAUNCH),
	API(__cudaLaunchKernel_ptsz, RT, RT_LAUNCH),
	API(cudaLaunchKernelExC, RT, RT_LAUNCH_EX),
	API(cudaLaunchKernelExC_ptsz, RT, RT_LAUNCH_EX),
	API(cudaGraphLaunch, RT, GRAPH_LAUNCH),
	API(cudaGraphLaunch_ptsz, RT, GRAPH_LAUNCH),
	API(__cudaGetKernel, RT, KERNEL),
	API(cudaGetKernel, RT, KERNEL),
	API(cudaLibraryGetKernel, RT, KERNEL),
	API(cudaMalloc, RT, ALLOC),
	API(cudaMallocManaged, RT, ALLOC),
	API(cudaMallocAsync, RT, ALLOC),
	API(cudaMallocAsync_ptsz, RT, ALLOC),
	API(cudaFree, RT, FREE),
	API(cudaFreeAsync, RT, FREE),
	API(cudaFreeAsync_ptsz, RT, FREE),
	API(cudaSetDevice, RT, DEVICE),
	API(cudaStreamSynchronize, RT, SYNC),
	API(cudaStreamSynchronize_ptsz, RT, SYNC),
	API(cudaDeviceSynchronize, RT, SYNC),
	API(cudaEventSynchronize, RT, SYNC),
	API(cudaMemcpy, RT, MEMCPY),
	API(cudaMemcpy_ptds, RT, MEMCPY),
	API(cudaMemcpyAsync, RT, MEMCPY),
	API(cudaMemcpyAsync_ptsz, RT, MEMCPY),
	API(cudaMemGetInfo, RT, CAPACITY),
	API(cudaStreamBeginCapture, RT, CAPTURE_BEGIN),
	API(cudaStreamBeginCapture_ptsz, RT, CAPTURE_BEGIN),
	API(cudaStreamEndCapture, RT, CAPTURE_END),
	API(cudaStreamEndCapture_ptsz, RT, CAPTURE_END),
	API(cudaGraphInstantiate, RT, GRAPH_INSTANTIATE),
	API(cudaGraphInstantiateWithFlags, RT, GRAPH_INSTANTIATE),
	API(cudaGraphAddKernelNode, RT, GRAPH_ADD_KERNEL),
	API(cudaEventRecord, RT, EVENT_RECORD),
	API(cudaEventRecord_ptsz, RT, EVENT_RECORD),
	API(cudaEventRecordWithFlags, RT, EVENT_RECORD),
	API(cudaEventRecordWithFlags_ptsz, RT, EVENT_RECORD),
	API(cudaStreamWaitEvent, RT, STREAM_WAIT),
	API(cudaStreamWaitEvent_ptsz, RT, STREAM_WAIT),
	API(cudaGetDeviceProperties, RT, CAPACITY),
	API(cudaGetDeviceProperties_v2, RT, CAPACITY),
	API(cuLaunchKernel, DRV, DRV_LAUNCH),
	API(cuLaunchKernel_ptsz, DRV, DRV_LAUNCH),
	API(cuLaunchKernelEx, DRV, DRV_LAUNCH_EX),
	API(cuLaunchKernelEx_ptsz, DRV, DRV_LAUNCH_EX),
	API(cuGraphLaunch, DRV, GRAPH_LAUNCH),
	API(cuGraphLaunch_ptsz, DRV, GRAPH_LAUNCH),
	API(cuModuleGetFunction, DRV, KERNEL),
	API(cuLibraryGetKernel, DRV, KERNEL),
	API(cuKernelGetFunction, DRV, KERNEL),
	API(cuMemAlloc_v2, DRV, ALLOC),
	API(cuMemAllocManaged, DRV, ALLOC),
	API(cuMemAllocAsync, DRV, ALLOC),
	API(cuMemAllocAsync_ptsz, DRV, ALLOC),
	API(cuMemFree_v2, DRV, FREE),
	API(cuMemFreeAsync, DRV, FREE),
	API(cuMemFreeAsync_ptsz, DRV, FREE),
	API(cuMemCreate, DRV, ALLOC),
	API(cuMemRelease, DRV, FREE),
	API(cuCtxSetCurrent, DRV, DEVICE),
	API(cuDevicePrimaryCtxRetain, DRV, DEVICE),
	API(cuCtxCreate_v2, DRV, DEVICE),
	API(cuCtxCreate_v3, DRV, DEVICE),
	API(cuCtxCreate_v4, DRV, DEVICE),
	API(cuStreamSynchronize, DRV, SYNC),
	API(cuStreamSynchronize_ptsz, DRV, SYNC),
	API(cuCtxSynchronize, DRV, SYNC),
	API(cuCtxSynchronize_v2, DRV, SYNC),
	API(cuMemGetInfo_v2, DRV, CAPACITY),
	API(cuDeviceTotalMem_v2, DRV, CAPACITY),
	API(cuStreamBeginCapture_v2, DRV, CAPTURE_BEGIN),
	API(cuStreamBeginCapture_v2_ptsz, DRV, CAPTURE_BEGIN),
	API(cuStreamEndCapture, DRV, CAPTURE_END),
	API(cuStreamEndCapture_ptsz, DRV, CAPTURE_END),
	API(cuGraphInstantiateWithFlags, DRV, GRAPH_INSTANTIATE),
	API(cuGraphInstantiate_v2, DRV, GRAPH_INSTANTIATE),
	API(cuGraphAddKernelNode, DRV, GRAPH_ADD_KERNEL),
	API(cuGraphAddKernelNode_v2, DRV, GRAPH_ADD_KERNEL),
	API(cuEventRecord, DRV, EVENT_RECORD),
	API(cuEventRecord_ptsz, DRV, EVENT_RECORD),
	API(cuEventRecordWithFlags, DRV, EVENT_RECORD),
	API(cuEventRecordWithFlags_ptsz, DRV, EVENT_RECORD),
	API(cuStreamWaitEvent, DRV, STREAM_WAIT),
	API(cuStreamWaitEvent_ptsz, DRV, STREAM_WAIT),
	API(ncclAllReduce, NCCL, NCCL_COLL),
	API(ncclAllGather, NCCL, NCCL_COLL),
	API(ncclReduceScatter, NCCL, NCCL_COLL),
	API(ncclBroadcast, NCCL, NCCL_COLL),
	API(ncclReduce, NCCL, NCCL_COLL),
	API(ncclSend, NCCL, NCCL_COLL),
	API(ncclRecv, NCCL, NCCL_COLL),
	API(ncclGroupStart, NCCL, NCCL_GROUP),
	API(ncclGroupEnd, NCCL, NCCL_GROUP),
	API(ncclCommInitRank, NCCL, NCCL_INIT),
	API(ncclCommInitRankConfig, NCCL, NCCL_INIT),
	/* Call sites in libtorch_cpu, named after the function called. */
	CXX_API(torch_rf_begin, "at::RecordFunction::RecordFunction(at::RecordScope)", TORCH,
		TORCH_RF_BEGIN),
	CXX_API(torch_rf_end, "at::RecordFunction::end()", TORCH, TORCH_RF_END),
	API(sonde_cupti_launch, CUPTI, CUPTI_LAUNCH),
	API(sonde_cupti_records, CUPTI, CUPTI_RECORDS),
	API(sonde_cupti_clock, CUPTI, CUPTI_CLOCK),
	API(sonde_cupti_nvtx, CUPTI, CUPTI_NVTX),
};

const char *gpu_api_name(enum gpu_api api)
{
	if ((unsigned)api >= GPU_API_MAX || !gpu_apis[api].name)
		return "?";
	return gpu_apis[api].name;
}

const char *gpu_drop_name(enum gpu_drop d)
{
	static const char *const names[GPU_DROP_MAX] = {GPU_DROPS(COUNTER_NAME)};

	return (unsigned)d < GPU_DROP_MAX ? names[d] : "?";
}

const char *gpu_coll_name(enum gpu_coll c)
{
	static const char *const names[] = {
		"allreduce", "allgather", "reducescatter", "broadcast",
		"reduce",    "send",	  "recv",	   "group",
	};

	return (unsigned)c <= GPU_COLL_NONE ? names[c] : "?";
}

uint32_t gpu_nccl_type_size(uint32_t datatype)
{
	/* ncclDataType_t of NCCL 2.19+: int8, uint8, int32, uint32, int64,
	 * uint64, float16, float32, float64, bfloat16, float8e4m3,
	 * float8e5m2. tests/gpu/real/layout.c checks it against nccl.h. */
	static const uint8_t sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

	return datatype < sizeof(sizes) ? sizes[datatype] : 0;
}

/* ---- table ------------------------------------------------------------- */

static uint64_t mix(uint64_t a, uint64_t b)
{
	return hash_mix(a * 0x9e3779b97f4a7c15ull ^ hash_mix(b));
}

void gpu_table__init(struct gpu_table *t, size_t vsize, size_t max)
{
	memset(t, 0, sizeof(*t));
	t->vsize = vsize;
	t->max = max;
}

void gpu_table__fini(struct gpu_table *t)
{
	idmap__free(&t->index);
	free(t->keys);
	free(t->vals);
	t->keys = NULL;
	t->vals = NULL;
	t->cap = t->n = 0;
}

/* The index of (a, b)'s entry, or -1. */
static ssize_t find(const struct gpu_table *t, uint64_t a, uint64_t b)
{
	size_t pos = IDMAP_START;
	uint32_t v;

	while ((v = idmap__next(&t->index, mix(a, b), &pos)))
		if (t->keys[v - 1].a == a && t->keys[v - 1].b == b)
			return (ssize_t)v - 1;
	return -1;
}

void *gpu_table__get(const struct gpu_table *t, uint64_t a, uint64_t b)
{
	ssize_t i = find(t, a, b);

	return i < 0 ? NULL : gpu_table__val(t, (size_t)i);
}

void *gpu_table__put(struct gpu_table *t, uint64_t a, uint64_t b, bool *created)
{
	ssize_t i = find(t, a, b);
	size_t cap = t->cap;

	if (created)
		*created = i < 0;
	if (i >= 0)
		return gpu_table__val(t, (size_t)i);
	if (t->n >= t->max || idmap__put(&t->index, mix(a, b), (uint32_t)t->n + 1))
		return NULL;
	xgrow((void **)&t->keys, &t->cap, t->n + 1, sizeof(*t->keys));
	if (t->cap != cap)
		t->vals = xrealloc(t->vals, t->cap * t->vsize);
	t->keys[t->n] = (struct gpu_key){a, b};
	memset(gpu_table__val(t, t->n), 0, t->vsize);
	return gpu_table__val(t, t->n++);
}

/* Removes entry i: the last takes its place. */
static void del_at(struct gpu_table *t, size_t i)
{
	size_t last = t->n - 1;

	idmap__del(&t->index, mix(t->keys[i].a, t->keys[i].b), (uint32_t)i + 1);
	if (i != last) {
		idmap__find(&t->index, mix(t->keys[last].a, t->keys[last].b), (uint32_t)last + 1)
			->val = (uint32_t)i + 1;
		t->keys[i] = t->keys[last];
		memcpy(gpu_table__val(t, i), gpu_table__val(t, last), t->vsize);
	}
	t->n--;
}

void gpu_table__del(struct gpu_table *t, uint64_t a, uint64_t b)
{
	ssize_t i = find(t, a, b);

	if (i >= 0)
		del_at(t, (size_t)i);
}

void gpu_table__filter(struct gpu_table *t, gpu_table_keep_fn keep, void *ctx)
{
	/* An entry removed, the last one takes its place: looked at next. */
	for (size_t i = 0; i < t->n;)
		if (keep(ctx, t->keys[i].a, t->keys[i].b, gpu_table__val(t, i)))
			i++;
		else
			del_at(t, i);
}

/* ---- state ------------------------------------------------------------- */

/* Bounds on what decoding keeps: beyond them, handles go unnamed. */
#define MAX_KERNELS (1u << 18)
#define MAX_NAMES (1u << 16) /* distinct kernel names, up to 256 bytes each */
#define MAX_COMMS (1u << 16)
#define MAX_THREADS (1u << 20)
#define MAX_PROCS (1u << 20)

void gpu_state__init(struct gpu_state *st)
{
	memset(st, 0, sizeof(*st));
	gpu_table__init(&st->kernels, sizeof(struct gpu_kernel_ent), MAX_KERNELS);
	gpu_table__init(&st->names, sizeof(char *), MAX_NAMES);
	gpu_table__init(&st->comms, sizeof(struct gpu_comm_ent), MAX_COMMS);
	gpu_table__init(&st->blocked, sizeof(struct gpu_blocked), MAX_THREADS);
	gpu_table__init(&st->procs, sizeof(struct gpu_proc_ent), MAX_PROCS);
}

static bool free_name(void *ctx, uint64_t a, uint64_t b, void *val)
{
	free(*(char **)val);
	return false;
}

void gpu_state__fini(struct gpu_state *st)
{
	gpu_table__filter(&st->names, free_name, NULL);
	gpu_table__fini(&st->names);
	gpu_table__fini(&st->kernels);
	gpu_table__fini(&st->comms);
	gpu_table__fini(&st->blocked);
	gpu_table__fini(&st->procs);
}

static bool keep_other_pid(void *ctx, uint64_t a, uint64_t b, void *val)
{
	return a != *(uint32_t *)ctx;
}

static bool keep_other_pid_blocked(void *ctx, uint64_t a, uint64_t b, void *val)
{
	return ((struct gpu_blocked *)val)->pid != *(uint32_t *)ctx;
}

void gpu_state__forget_pid(struct gpu_state *st, uint32_t pid)
{
	gpu_table__filter(&st->kernels, keep_other_pid, &pid);
	gpu_table__filter(&st->comms, keep_other_pid, &pid);
	gpu_table__filter(&st->blocked, keep_other_pid_blocked, &pid);
	gpu_table__del(&st->procs, pid, 0);
}

static enum gpu_coll api_coll(enum gpu_api api)
{
	switch (api) {
	case GPU_API_ncclAllReduce:
		return GPU_COLL_ALLREDUCE;
	case GPU_API_ncclAllGather:
		return GPU_COLL_ALLGATHER;
	case GPU_API_ncclReduceScatter:
		return GPU_COLL_REDUCESCATTER;
	case GPU_API_ncclBroadcast:
		return GPU_COLL_BROADCAST;
	case GPU_API_ncclReduce:
		return GPU_COLL_REDUCE;
	case GPU_API_ncclSend:
		return GPU_COLL_SEND;
	case GPU_API_ncclRecv:
		return GPU_COLL_RECV;
	default:
		return GPU_COLL_NONE;
	}
}

/* The record size each type must have, and the class of APIs it comes
 * from (a record whose API does not produce its type is malformed). */
static bool type_fits(const struct gpu_rec *r, size_t size)
{
	enum gpu_class cls = gpu_apis[r->api].cls;

	switch (r->type) {
	case GPU_EV_LAUNCH:
		return size >= sizeof(struct gpu_rec_stack) &&
		       (cls == GPU_CLASS_RT_LAUNCH || cls == GPU_CLASS_RT_LAUNCH_EX ||
			cls == GPU_CLASS_DRV_LAUNCH || cls == GPU_CLASS_DRV_LAUNCH_EX ||
			cls == GPU_CLASS_GRAPH_LAUNCH);
	case GPU_EV_SYNC_END:
		return size >= sizeof(struct gpu_rec_stack) && cls == GPU_CLASS_SYNC;
	case GPU_EV_NCCL_END:
		return size >= sizeof(struct gpu_rec_stack) && cls == GPU_CLASS_NCCL_COLL;
	case GPU_EV_KERNEL_NAME:
		return size >= sizeof(struct gpu_rec_name) && cls == GPU_CLASS_KERNEL;
	case GPU_EV_KERNEL_STUB:
		return cls == GPU_CLASS_KERNEL;
	case GPU_EV_GRAPH:
		return cls == GPU_CLASS_CAPTURE_BEGIN || cls == GPU_CLASS_CAPTURE_END ||
		       cls == GPU_CLASS_GRAPH_INSTANTIATE || cls == GPU_CLASS_GRAPH_ADD_KERNEL ||
		       cls == GPU_CLASS_STREAM_WAIT;
	case GPU_EV_ALLOC:
		return cls == GPU_CLASS_ALLOC;
	case GPU_EV_FREE:
		return cls == GPU_CLASS_FREE;
	case GPU_EV_SYNC_BEGIN:
		return cls == GPU_CLASS_SYNC;
	case GPU_EV_MEMCPY:
		return cls == GPU_CLASS_MEMCPY;
	case GPU_EV_NCCL_BEGIN:
		return cls == GPU_CLASS_NCCL_COLL || r->api == GPU_API_ncclGroupEnd;
	case GPU_EV_NCCL_GROUP:
		return cls == GPU_CLASS_NCCL_GROUP;
	case GPU_EV_NCCL_COMM:
		return cls == GPU_CLASS_NCCL_INIT;
	case GPU_EV_DEVICE:
		return cls == GPU_CLASS_DEVICE;
	case GPU_EV_CAPACITY:
		return cls == GPU_CLASS_CAPACITY;
	case GPU_EV_RF_BEGIN:
		return size >= sizeof(struct gpu_rec_stack) && cls == GPU_CLASS_TORCH_RF_BEGIN;
	case GPU_EV_RF_END:
		return cls == GPU_CLASS_TORCH_RF_END;
	case GPU_EV_CUPTI_LAUNCH:
		return size >= sizeof(struct gpu_rec_stack) && cls == GPU_CLASS_CUPTI_LAUNCH;
	case GPU_EV_CUPTI_KERNEL:
		return size >= sizeof(struct gpu_rec_name) && cls == GPU_CLASS_CUPTI_RECORDS;
	case GPU_EV_CUPTI_COPY:
	case GPU_EV_CUPTI_MEMORY:
	case GPU_EV_CUPTI_MEMORY_POOL:
	case GPU_EV_CUPTI_GRAPH:
	case GPU_EV_CUPTI_SYNC:
		return cls == GPU_CLASS_CUPTI_RECORDS;
	case GPU_EV_CUPTI_STALL:
	case GPU_EV_CUPTI_STALL_REASON:
	case GPU_EV_CUPTI_CUBIN:
		return size >= sizeof(struct gpu_rec_name) && cls == GPU_CLASS_CUPTI_RECORDS;
	case GPU_EV_CUPTI_CLOCK:
		return cls == GPU_CLASS_CUPTI_CLOCK;
	case GPU_EV_CUPTI_NVTX:
		return size >= sizeof(struct gpu_rec_name) && cls == GPU_CLASS_CUPTI_NVTX;
	default:
		return false;
	}
}

/* The name and host stub of the kernel handle a process passed (*name
 * NULL, *stub 0 where not known). rt: passed to the runtime, which before
 * CUDA 13 (and in CUDA 13 without a driver) is given the host stub itself. */
static void kernel_of(const struct gpu_state *st, uint32_t pid, uint64_t handle, bool rt,
		      const char **name, uint64_t *stub)
{
	const struct gpu_kernel_ent *k = gpu_table__get(&st->kernels, pid, handle);

	*name = k ? k->name : NULL;
	*stub = k && k->stub ? k->stub : rt ? handle : 0;
}

static void decode_launch(struct gpu_state *st, const struct gpu_rec *r, struct gpu_event *ev)
{
	enum gpu_class cls = gpu_apis[r->api].cls;

	ev->launch.func = r->args.launch.func;
	memcpy(ev->launch.grid, r->args.launch.grid, sizeof(ev->launch.grid));
	memcpy(ev->launch.block, r->args.launch.block, sizeof(ev->launch.block));
	ev->launch.shmem = r->args.launch.shmem;
	ev->launch.stream = r->args.launch.stream;
	ev->launch.graph = cls == GPU_CLASS_GRAPH_LAUNCH;
	ev->launch.cupti = r->args.launch.cupti;
	ev->launch.nvtx = r->args.launch.nvtx;
	if (ev->launch.graph)
		return;
	kernel_of(st, r->pid, r->args.launch.func,
		  cls == GPU_CLASS_RT_LAUNCH || cls == GPU_CLASS_RT_LAUNCH_EX, &ev->launch.name,
		  &ev->launch.stub);
}

static uint64_t hash_str(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
	return h;
}

/* The pooled copy of a kernel name: names live until gpu_state__fini(), so
 * that an event's name stays valid however the handle tables change. */
static const char *intern(struct gpu_state *st, const char *name)
{
	size_t len = strlen(name);
	uint64_t h = hash_str(name);
	char **slot;

	/* Probe on collisions of (hash, len) by bumping the second key. */
	for (uint64_t b = len;; b += 1ull << 32) {
		bool created;

		slot = gpu_table__put(&st->names, h, b, &created);
		if (!slot)
			return NULL;
		if (created) {
			*slot = xstrdup(name);
			return *slot;
		}
		if (!strcmp(*slot, name))
			return *slot;
	}
}

/* What a kernel handle stands for: a host stub (__cudaGetKernel), a name
 * (cuModuleGetFunction, cuLibraryGetKernel: demangled once, here), or, for
 * the CUfunction cuKernelGetFunction gives for a CUkernel (as cuBLAS and the
 * runtime launch through), whatever that kernel stands for. */
static void learn_kernel(struct gpu_state *st, const struct gpu_event *ev)
{
	const struct gpu_kernel_ent *of;
	struct gpu_kernel_ent *k;
	char *d;

	/* A failed lookup leaves its out-parameter as it was. */
	if (ev->ret || !ev->kernel.handle)
		return;
	k = gpu_table__put(&st->kernels, ev->pid, ev->kernel.handle, NULL);
	if (!k)
		return;
	if (ev->api == GPU_API_cuKernelGetFunction) {
		of = gpu_table__get(&st->kernels, ev->pid, ev->kernel.stub);
		if (of && of != k) {
			k->stub = of->stub;
			k->name = of->name;
		}
	} else if (ev->type == GPU_EV_KERNEL_STUB) {
		k->stub = ev->kernel.stub;
	} else if (ev->kernel.name && *ev->kernel.name) {
		d = sym_demangle(ev->kernel.name);
		k->name = intern(st, d ? d : ev->kernel.name);
		free(d);
	}
}

static void decode_nccl(struct gpu_state *st, const struct gpu_rec *r, struct gpu_event *ev)
{
	const struct gpu_comm_ent *c;

	ev->nccl.coll = api_coll(r->api);
	ev->nccl.count = r->args.nccl.count;
	ev->nccl.datatype = r->args.nccl.datatype;
	ev->nccl.type_size =
		ev->nccl.coll == GPU_COLL_NONE ? 0 : gpu_nccl_type_size(r->args.nccl.datatype);
	if (__builtin_mul_overflow(ev->nccl.count, (uint64_t)ev->nccl.type_size, &ev->nccl.bytes))
		ev->nccl.bytes = UINT64_MAX;
	ev->nccl.redop = r->args.nccl.redop;
	ev->nccl.peer = r->args.nccl.peer;
	ev->nccl.comm = r->args.nccl.comm;
	ev->nccl.stream = r->args.nccl.stream;
	ev->nccl.sendbuff = r->args.nccl.sendbuff;
	ev->nccl.recvbuff = r->args.nccl.recvbuff;
	ev->nccl.rank = ev->nccl.nranks = -1;
	c = ev->nccl.comm ? gpu_table__get(&st->comms, r->pid, ev->nccl.comm) : NULL;
	if (c) {
		ev->nccl.rank = c->rank;
		ev->nccl.nranks = c->nranks;
	}
}

static void track_blocked(struct gpu_state *st, const struct gpu_event *ev)
{
	struct gpu_proc_ent *p;
	struct gpu_blocked *b;

	switch (ev->type) {
	case GPU_EV_SYNC_BEGIN:
	case GPU_EV_NCCL_BEGIN:
		b = gpu_table__put(&st->blocked, ev->tid, 0, NULL);
		if (b) {
			memset(b, 0, sizeof(*b));
			b->pid = ev->pid;
			b->tid = ev->tid;
			b->api = ev->api;
			b->since_ns = ev->ts_ns;
			b->handle = ev->type == GPU_EV_SYNC_BEGIN ? ev->sync.handle : ev->nccl.comm;
			b->rank = b->nranks = -1;
		}
		if (ev->type == GPU_EV_NCCL_BEGIN && ev->nccl.coll != GPU_COLL_NONE) {
			p = gpu_table__get(&st->procs, ev->pid, 0);
			if (p) {
				p->has_coll = true;
				p->coll = ev->nccl.coll;
				p->comm = ev->nccl.comm;
				p->coll_ts_ns = ev->ts_ns;
			}
		}
		break;
	case GPU_EV_SYNC_END:
	case GPU_EV_NCCL_END:
	case GPU_EV_NCCL_GROUP:
		gpu_table__del(&st->blocked, ev->tid, 0);
		break;
	default:
		break;
	}
}

static void decode_graph(struct gpu_state *st, const struct gpu_rec *r, struct gpu_event *ev)
{
	switch (gpu_apis[r->api].cls) {
	case GPU_CLASS_CAPTURE_BEGIN:
		ev->graph.op = GPU_GRAPH_CAPTURE_BEGIN;
		break;
	case GPU_CLASS_CAPTURE_END:
		ev->graph.op = GPU_GRAPH_CAPTURE_END;
		break;
	case GPU_CLASS_STREAM_WAIT:
		ev->graph.op = GPU_GRAPH_CAPTURE_JOIN;
		ev->graph.origin = r->args.graph.origin;
		break;
	case GPU_CLASS_GRAPH_ADD_KERNEL:
		ev->graph.op = GPU_GRAPH_ADD_KERNEL;
		ev->graph.func = r->args.graph.func;
		kernel_of(st, r->pid, ev->graph.func, GPU_API_LAYER(r->api) == GPU_LAYER_RT,
			  &ev->graph.name, &ev->graph.stub);
		break;
	default:
		ev->graph.op = GPU_GRAPH_INSTANTIATE;
		break;
	}
	ev->graph.stream = r->args.graph.stream;
	ev->graph.graph = r->args.graph.graph;
	ev->graph.exec = r->args.graph.exec;
}

/* What a CUPTI record of something that ran has: its launch's
 * correlation id, its interval (CUPTI's clock), stream and device. */
static void decode_interval(const struct gpu_rec *r, struct gpu_event *ev)
{
	ev->cupti.correlation = r->args.cupti.correlation;
	ev->cupti.start = r->args.cupti.start;
	ev->cupti.end = r->args.cupti.end;
	ev->cupti.stream = r->args.cupti.stream;
	ev->device = (int)r->args.cupti.device;
}

/* A name record's name, NUL-terminated in st (valid until the next
 * decode). */
static const char *record_name(struct gpu_state *st, const struct gpu_rec_name *nr)
{
	memcpy(st->name, nr->name, GPU_NAME_MAX);
	st->name[GPU_NAME_MAX] = 0;
	return st->name;
}

int gpu_state__decode(struct gpu_state *st, const void *data, size_t size, struct gpu_event *ev,
		      bool *new_pid)
{
	const struct gpu_rec *r = data;
	const struct gpu_rec_stack *s = data;
	const struct gpu_rec_name *nr = data;
	bool created = false;

	memset(ev, 0, sizeof(*ev));
	*new_pid = false;
	if (size < sizeof(*r) || r->api == GPU_API_NONE || r->api >= GPU_API_MAX ||
	    !type_fits(r, size)) {
		st->bad_records++;
		return -EINVAL;
	}
	ev->type = r->type;
	ev->api = r->api;
	ev->api_name = gpu_apis[r->api].name;
	ev->pid = r->pid;
	ev->tid = r->tid;
	ev->ts_ns = r->ts_ns;
	ev->dur_ns = r->dur_ns;
	ev->ret = r->ret;
	ev->device = r->device;
	ev->flags = r->flags;

	switch (r->type) {
	case GPU_EV_LAUNCH:
		decode_launch(st, r, ev);
		break;
	case GPU_EV_ALLOC:
	case GPU_EV_FREE:
		ev->mem.addr = r->args.mem.addr;
		ev->mem.size = r->args.mem.size;
		ev->mem.stream = r->args.mem.stream;
		ev->mem.out = r->args.mem.out;
		ev->mem.managed =
			r->api == GPU_API_cudaMallocManaged || r->api == GPU_API_cuMemAllocManaged;
		ev->mem.handle = r->api == GPU_API_cuMemCreate || r->api == GPU_API_cuMemRelease;
		ev->mem.async = strstr(ev->api_name, "Async") != NULL;
		if (r->type == GPU_EV_FREE && (r->flags & GPU_RF_UNMATCHED))
			ev->mem.size = 0;
		break;
	case GPU_EV_SYNC_BEGIN:
	case GPU_EV_SYNC_END:
		ev->sync.handle = r->args.sync.handle;
		break;
	case GPU_EV_MEMCPY:
		ev->copy.dst = r->args.copy.dst;
		ev->copy.src = r->args.copy.src;
		ev->copy.bytes = r->args.copy.bytes;
		ev->copy.stream = r->args.copy.stream;
		ev->copy.kind = r->args.copy.kind;
		ev->copy.async = strstr(ev->api_name, "Async") != NULL;
		break;
	case GPU_EV_NCCL_BEGIN:
	case GPU_EV_NCCL_END:
	case GPU_EV_NCCL_GROUP:
		decode_nccl(st, r, ev);
		break;
	case GPU_EV_NCCL_COMM:
		ev->comm.comm = r->args.comm.comm;
		ev->comm.rank = r->args.comm.rank;
		ev->comm.nranks = r->args.comm.nranks;
		if (r->ret == 0 && ev->comm.comm) {
			struct gpu_comm_ent *c =
				gpu_table__put(&st->comms, r->pid, ev->comm.comm, NULL);

			if (c) {
				c->rank = ev->comm.rank;
				c->nranks = ev->comm.nranks;
			}
		}
		break;
	case GPU_EV_KERNEL_STUB:
	case GPU_EV_KERNEL_NAME:
		ev->kernel.handle = r->args.kernel.handle;
		ev->kernel.stub = r->args.kernel.stub;
		if (r->type == GPU_EV_KERNEL_NAME) {
			ev->kernel.name = record_name(st, nr);
		}
		learn_kernel(st, ev);
		break;
	case GPU_EV_DEVICE:
		ev->ctx.ctx = r->args.device.ctx;
		break;
	case GPU_EV_GRAPH:
		decode_graph(st, r, ev);
		break;
	case GPU_EV_CAPACITY:
		ev->capacity.total = r->args.capacity.total;
		ev->capacity.free = r->args.capacity.free;
		break;
	case GPU_EV_RF_BEGIN:
	case GPU_EV_RF_END:
		ev->rf.obj = r->args.rf.obj;
		ev->rf.start_ns = r->args.rf.start;
		break;
	case GPU_EV_CUPTI_LAUNCH:
		ev->cupti.correlation = r->args.cupti.correlation;
		ev->cupti.nvtx = r->args.cupti.nvtx;
		break;
	case GPU_EV_CUPTI_NVTX:
		ev->cupti.nvtx = r->args.cupti.nvtx;
		ev->cupti.name = record_name(st, nr);
		break;
	case GPU_EV_CUPTI_KERNEL:
		decode_interval(r, ev);
		ev->cupti.name = record_name(st, nr);
		break;
	case GPU_EV_CUPTI_COPY:
		decode_interval(r, ev);
		ev->cupti.bytes = r->args.cupti.bytes;
		ev->cupti.copy_kind = r->args.cupti.detail;
		ev->cupti.set = r->args.cupti.kind == SONDE_CUPTI_REC_SET;
		break;
	case GPU_EV_CUPTI_MEMORY:
	case GPU_EV_CUPTI_MEMORY_POOL:
		ev->cupti.start = r->args.cupti.start;
		ev->cupti.pc = r->args.cupti.end; /* the address */
		ev->cupti.bytes = r->args.cupti.bytes;
		ev->cupti.reason = r->args.cupti.detail;
		ev->cupti.correlation = r->args.cupti.correlation;
		ev->cupti.pool = r->args.cupti.pool;
		ev->cupti.pool_size = r->args.cupti.pool_size;
		ev->device = (int)r->args.cupti.device;
		break;
	case GPU_EV_CUPTI_GRAPH:
	case GPU_EV_CUPTI_SYNC:
		decode_interval(r, ev);
		ev->cupti.context = r->args.cupti.context;
		ev->cupti.reason = r->args.cupti.detail;
		if (r->type == GPU_EV_CUPTI_SYNC)
			ev->device = -1; /* the host's wait */
		break;
	case GPU_EV_CUPTI_STALL:
		ev->cupti.pc = r->args.cupti.start;
		ev->cupti.cubin = r->args.cupti.end;
		ev->cupti.samples = r->args.cupti.bytes;
		ev->cupti.reason = r->args.cupti.detail;
		ev->cupti.name = record_name(st, nr);
		break;
	case GPU_EV_CUPTI_STALL_REASON:
		ev->cupti.reason = r->args.cupti.detail;
		ev->cupti.name = record_name(st, nr);
		break;
	case GPU_EV_CUPTI_CUBIN:
		ev->cupti.cubin = r->args.cupti.end;
		ev->cupti.bytes = r->args.cupti.bytes;
		ev->cupti.name = record_name(st, nr);
		break;
	case GPU_EV_CUPTI_CLOCK:
		ev->clock.gpu = r->args.clock.gpu;
		ev->clock.host = r->args.clock.host;
		ev->clock.dropped = r->args.clock.dropped;
		ev->clock.stall_dropped = r->args.clock.stall_dropped;
		break;
	default:
		break;
	}
	if (r->type == GPU_EV_LAUNCH || r->type == GPU_EV_SYNC_END || r->type == GPU_EV_NCCL_END ||
	    r->type == GPU_EV_RF_BEGIN || r->type == GPU_EV_CUPTI_LAUNCH ||
	    (r->type == GPU_EV_SYNC_BEGIN && size >= sizeof(struct gpu_rec_stack))) {
		/* The record's names may lack their NUL: ev's have one. */
		memcpy(ev->process, s->comm, sizeof(ev->process) - 1);
		memcpy(ev->thread, s->thread, sizeof(ev->thread) - 1);
		if (r->nframes < 0) {
			ev->stack_err = r->nframes;
		} else if (r->nframes > 0) {
			ev->ips = (const uint64_t *)s->ips;
			ev->nips = r->nframes < GPU_MAX_FRAMES ? r->nframes : GPU_MAX_FRAMES;
		}
	}
	gpu_table__put(&st->procs, r->pid, 0, &created);
	*new_pid = created;
	track_blocked(st, ev);
	return 0;
}
