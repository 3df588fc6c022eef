/*
 * gpu.c: the fake GPU of Sonde's CUDA stand-ins, built into the libcuda.so.1 stand-in
 * and reached by the runtime and NCCL stand-ins through cuGetExportTable(). It keeps what
 * a profiler can observe from the host: devices with a memory capacity and an allocator
 * handing out distinct device addresses from a reserved, inaccessible range; contexts
 * current per thread; streams as timelines (each kernel, copy or collective pushes the
 * time its stream is busy until, and a synchronize really sleeps until then); events as
 * points on those timelines; kernels named by the module lookups that made them; graphs
 * captured from streams or built node by node, each with CUPTI's graph and node ids; a
 * default memory pool per device (struct gpu_pool) that holds memory of the device beyond
 * what its allocations use, up to its release threshold; modules loaded lazily, at the first launch of one of their kernels,
 * each with a made-up cubin that names its kernels (for the CUPTI stand-in's resource
 * callbacks and PC samples, and the fake nvdisasm). Device memory holds no data; managed
 * memory is ordinary host memory. One mutex guards everything; nothing sleeps while
 * holding it.
 *
 * Each context takes device memory as a real one does, and every change of a device's
 * usage is published for the NVML stand-in (account.c). Each allocation and release of
 * device memory (contexts' aside) is told to the CUPTI stand-in (standin_memory_run), as
 * are each graph launch run (standin_graph_run), each pool trimmed (standin_pool_run) and
 * each synchronization call that succeeded (standin_sync_run).
 *
 * Settings (read once, at first use): SONDE_STANDIN_GPUS, SONDE_STANDIN_GPU_MEM,
 * SONDE_STANDIN_GPU_NAME, SONDE_STANDIN_KERNEL_US, SONDE_STANDIN_LAUNCH_US,
 * SONDE_STANDIN_COPY_GBPS and SONDE_STANDIN_CTX_BYTES; tests/gpu/README.md describes them.
 * CUDA_VISIBLE_DEVICES picks and orders the devices a process sees, as with the real
 * driver; the account is by physical device (NVML's index).
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "gpu.h"
#include "ptrmap.h"

#define GPU_MAX_DEVICES STANDIN_MAX_DEVICES
#define GPU_GRANULARITY (2ull << 20) /* VMM granularity and large-allocation alignment */
#define GPU_SMALL_ALIGN 512ull
#define GPU_MAX_THREADS 1024u

/* CUpti_ActivitySynchronizationType, as the tracer is told (standin_sync_run). */
#define CUPTI_SYNC_EVENT 1
#define CUPTI_SYNC_STREAM_WAIT_EVENT 2
#define CUPTI_SYNC_STREAM 3
#define CUPTI_SYNC_CONTEXT 4

enum obj_type {
	OBJ_CTX = 0x5d0001,
	OBJ_STREAM,
	OBJ_EVENT,
	OBJ_MODULE,
	OBJ_KERNEL,
	OBJ_FUNCTION,
	OBJ_GRAPH,
	OBJ_EXEC,
	OBJ_ALLOC,
	OBJ_PHYS,
	OBJ_VA,
	OBJ_NODE,
	OBJ_POOL,
};

enum alloc_kind { ALLOC_DEVICE, ALLOC_MANAGED, ALLOC_ASYNC };

struct gpu_ctx {
	uint32_t type;
	int dev;
	bool primary;
	int refs;
	uint32_t id; /* in the order made, from 1 (CUPTI's context ids) */
	/* The tracer is being told that it was made or is going, by the thread `teller`,
	 * which alone may use it meanwhile: others retaining or destroying it wait. */
	bool telling;
	pthread_t teller;
};

struct gpu_node {
	uint32_t type; /* OBJ_NODE */
	struct gpu_node *next;
	uint64_t id; /* its kernel node's node_id */
};

/* A kernel node of a graph: what a launch of the graph runs. */
struct graph_kernel {
	struct gpu_kernel *kernel; /* never freed, as every kernel */
	unsigned int grid[3], block[3], shmem;
	uint64_t node_id; /* CUPTI's graphNodeId: unique in the process, from 1; an exec's
			   * nodes keep those of the graph it was instantiated from */
};

struct gpu_graph {
	uint32_t type;	     /* OBJ_GRAPH, or OBJ_EXEC once instantiated */
	uint32_t id;	     /* CUPTI's graphId, from 1 in the order graphs were made (a
			      * capture's at its beginning); an exec's: its graph's */
	uint64_t capture_id; /* the capture that made it, 0: none */
	unsigned int nodes;
	uint64_t ns;		/* run time of all nodes, one after the other */
	struct gpu_node *added; /* the nodes added one by one (a graph's only) */
	struct graph_kernel *k; /* its kernel nodes, in the order they were added */
	unsigned int nk, capk;
};

struct gpu_stream {
	uint32_t type;
	int dev;
	unsigned int flags;
	int priority;
	bool legacy;
	uint64_t busy_until;	   /* monotonic ns when queued work ends; STANDIN_FOREVER: hung */
	uint32_t id;		   /* CUPTI's stream id: 7 the legacy one, then 13 on */
	uint32_t ctx_id;	   /* the context it was made in (gpu_ctx.id); 0: the legacy
				    * stream, whose context is the caller's */
	struct gpu_graph *capture; /* being captured into: its own capture, or one it joined */
	bool capture_origin;	   /* the capture began on it */
	struct gpu_stream *next;   /* on the device's list */
};

struct gpu_event {
	uint32_t type;
	unsigned int flags;
	uint32_t id;	 /* CUPTI's cudaEventId: from 1, in the order events were made */
	uint32_t ctx_id; /* the context it was made in; 0: none */
	bool recorded;
	int dev; /* recorded on a stream of (when recorded) */
	uint64_t at;
	uint64_t capture_id; /* recorded in a stream being captured: that capture's */
	struct gpu_event *next_free;
};

struct gpu_function;

struct gpu_kernel {
	uint32_t type;
	char *name;
	struct gpu_module *mod;
	struct gpu_kernel *next;
	struct gpu_function *funcs; /* from cuKernelGetFunction, one per context */
};

/* A kernel's function in one context (cuKernelGetFunction): its own handle, as in the
 * real driver, where a CUkernel is context-independent and a CUfunction is not. */
struct gpu_function {
	uint32_t type;
	struct gpu_kernel *kernel;
	const struct gpu_ctx *ctx;
	struct gpu_function *next;
};

/* A module's cubin as one load of it made it: STANDIN_CUBIN_MAGIC, then one line per
 * kernel. Never freed: CUPTI's clients and PC records refer to it for the process's life. */
struct gpu_cubin {
	uint32_t id;	       /* CUPTI's moduleId: in the order loaded, from 1 */
	unsigned int nkernels; /* of the module when it was made */
	size_t size;	       /* of bytes, without the NUL that ends them */
	char bytes[];
};

struct gpu_module {
	uint32_t type;
	bool library;
	struct gpu_kernel *kernels; /* in the order looked up */
	unsigned int nkernels;
	struct gpu_cubin *cubin; /* the last load's; NULL until a kernel of it launches */
	/* The tracer is being told of its loads (this many: the teller's callback may load
	 * it again) by the thread `teller`: other launches of its kernels wait, as behind a
	 * context's telling. */
	int telling;
	pthread_t teller;
};

struct gpu_alloc {
	uint32_t type;
	int dev;
	enum alloc_kind kind;
	size_t size; /* as requested, which is what the accounting counts */
	size_t span; /* address space taken */
};

struct gpu_phys {
	uint32_t type;
	int dev;
	size_t size;
};

struct gpu_va {
	uint32_t type;
	uintptr_t addr;
	size_t size;
	struct gpu_va *next;
};

struct extent {
	uintptr_t base;
	size_t len;
	struct extent *next;
};

/*
 * A device's default memory pool (CUmemoryPool): what its async allocations use of it, and
 * what it holds of the device (reserved: what the device's account counts). An allocation
 * that does not fit in what it holds grows it by what is missing (to the byte: no
 * granularity); whenever the host synchronizes -- a release (as if the synchronization
 * CUDA releases memory at came at once), cuStreamSynchronize, cuCtxSynchronize,
 * cuEventSynchronize -- it gives back what it holds above max(used, release threshold);
 * cuMemPoolTrimTo gives back what it holds above max(used, minBytesToKeep).
 */
struct gpu_pool {
	uint32_t type; /* OBJ_POOL */
	int dev;
	size_t used, reserved, threshold;
	size_t used_high, reserved_high; /* since made or last reset */
	int reuse[3];			 /* CU_MEMPOOL_ATTR_REUSE_*, in their order: 1 */
};

struct gpu_device {
	size_t total;
	size_t used;	   /* allocations, physical VMM handles and contexts */
	int contexts;	   /* live: the primary one while retained, and created ones */
	uintptr_t va_base; /* reserved PROT_NONE range device allocations come from */
	size_t va_len;
	struct extent *free; /* sorted by address, coalesced */
	struct gpu_ctx primary;
	struct gpu_stream legacy;
	struct gpu_stream *streams; /* every stream of the device, the legacy one first */
	uint64_t orphan_until;	    /* when work queued on since-destroyed streams ends */
	struct gpu_pool pool;	    /* its default memory pool */
};

static struct {
	int ndevs;
	size_t mem;
	char name[256];
	uint64_t kernel_ns;
	uint64_t launch_ns;
	double copy_gbps;
	size_t ctx_bytes;
} cfg;

static pthread_once_t setup_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t told = PTHREAD_COND_INITIALIZER; /* a context's or module's telling
							  * ended */
static struct ptrmap objs; /* handle or device address -> object, for validation */
static struct gpu_device devs[GPU_MAX_DEVICES];
static struct gpu_stream *free_streams;
static struct gpu_event *free_events;
static struct gpu_va *vas;
static bool initialized;

/* The physical device (NVML's index, the account's) of each ordinal. */
static int phys[GPU_MAX_DEVICES];

static const struct standin_tracer *tracer; /* the CUPTI stand-in's, or NULL */
static uint32_t ctx_ids;		    /* contexts made so far */
static uint32_t module_ids;		    /* module loads so far (gpu_cubin.id) */
static uint32_t graph_ids;		    /* graphs made so far (gpu_graph.id) */
static uint64_t node_ids;		    /* graph kernel nodes made so far */
static uint32_t event_ids;		    /* events made so far (gpu_event.id) */

static __thread struct gpu_ctx *cur_ctx;
static __thread struct gpu_stream *per_thread[GPU_MAX_DEVICES];

/* The devices of the machine (total) this process sees, as the real driver reads
 * CUDA_VISIBLE_DEVICES: a comma-separated list of device indices or UUIDs ("GPU-..." or
 * a unique prefix of one), the first ordinal first; the list ends at the first entry that
 * names no device or one already listed. Unset: all, in order. Fills phys; returns how
 * many. */
static int visible(int total)
{
	const char *cvd = getenv("CUDA_VISIBLE_DEVICES"), *p = cvd;
	int n = 0;

	if (!cvd) {
		for (int i = 0; i < total; i++)
			phys[i] = i;
		return total;
	}
	while (*p && n < total) {
		size_t len = strcspn(p, ",");
		int dev = -1;

		if (!strncmp(p, "GPU-", 4)) {
			for (int i = 0; i < total; i++) {
				char uuid[STANDIN_UUID_LEN];

				standin_gpu_uuid(i, uuid, sizeof(uuid));
				if (len <= strlen(uuid) && !strncmp(p, uuid, len))
					dev = dev < 0 ? i : total; /* a prefix of two: none */
			}
		} else {
			char *end;
			long v = strtol(p, &end, 10);

			dev = end == p + len && end != p && v >= 0 && v < total ? (int)v : -1;
		}
		for (int i = 0; i < n; i++)
			if (phys[i] == dev)
				dev = -1;
		if (dev < 0 || dev >= total)
			break;
		phys[n++] = dev;
		p += len + (p[len] == ',');
	}
	return n;
}

static void setup(void)
{
	const char *name = getenv("SONDE_STANDIN_GPU_NAME");
	int64_t n = standin_env_int("SONDE_STANDIN_GPUS", 8);
	int64_t mem = standin_env_int("SONDE_STANDIN_GPU_MEM", 80ll << 30);
	int64_t ctx = standin_env_int("SONDE_STANDIN_CTX_BYTES", 500ll << 20);
	double us;

	cfg.ndevs = visible(n < 0 ? 0 : n > GPU_MAX_DEVICES ? GPU_MAX_DEVICES : (int)n);
	cfg.mem = mem > 0 ? (size_t)mem : 80ull << 30;
	cfg.ctx_bytes = ctx > 0 ? (size_t)ctx : 0;
	snprintf(cfg.name, sizeof(cfg.name), "%s", name && *name ? name : "Sonde Stand-in GPU");
	us = standin_env_double("SONDE_STANDIN_KERNEL_US", 50);
	cfg.kernel_ns = us > 0 ? (uint64_t)(us * 1000) : 0;
	us = standin_env_double("SONDE_STANDIN_LAUNCH_US", 0);
	cfg.launch_ns = us > 0 ? (uint64_t)(us * 1000) : 0;
	cfg.copy_gbps = standin_env_double("SONDE_STANDIN_COPY_GBPS", 25);
	if (cfg.copy_gbps <= 0)
		cfg.copy_gbps = 25;
	for (int i = 0; i < cfg.ndevs; i++) {
		struct gpu_device *d = &devs[i];

		d->total = cfg.mem;
		d->primary = (struct gpu_ctx){.type = OBJ_CTX, .dev = i, .primary = true};
		d->legacy =
			(struct gpu_stream){.type = OBJ_STREAM, .dev = i, .legacy = true, .id = 7};
		d->streams = &d->legacy;
		d->pool = (struct gpu_pool){.type = OBJ_POOL, .dev = i, .reuse = {1, 1, 1}};
		if (ptrmap__put(&objs, (uintptr_t)&d->primary, &d->primary) ||
		    ptrmap__put(&objs, (uintptr_t)&d->pool, &d->pool))
			abort();
	}
}

static void *obj_get(const void *handle, uint32_t type)
{
	uint32_t *o = ptrmap__get(&objs, (uintptr_t)handle);

	return o && *o == type ? o : NULL;
}

static void *obj_new(size_t size, uint32_t type, uintptr_t key)
{
	uint32_t *o = calloc(1, size);

	if (!o)
		return NULL;
	*o = type;
	if (ptrmap__put(&objs, key ? key : (uintptr_t)o, o)) {
		free(o);
		return NULL;
	}
	return o;
}

static bool valid_device(CUdevice dev)
{
	return dev >= 0 && dev < cfg.ndevs;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
	return a > STANDIN_FOREVER - b ? STANDIN_FOREVER : a + b;
}

static uint64_t bytes_ns(size_t bytes)
{
	/* 1 GB/s is one byte per nanosecond. */
	return (uint64_t)((double)bytes / cfg.copy_gbps);
}

/*
 * When work queued on `s` may start, by the ordering rules of the legacy default stream:
 * it waits for all earlier work on the device's blocking streams, and work on a blocking
 * stream waits for earlier work on it. Non-blocking streams order only themselves.
 */
static uint64_t ready_at(const struct gpu_stream *s)
{
	const struct gpu_device *d = &devs[s->dev];
	uint64_t t = s->busy_until;

	if (s->flags & CU_STREAM_NON_BLOCKING)
		return t;
	if (!s->legacy)
		return t > d->legacy.busy_until ? t : d->legacy.busy_until;
	for (const struct gpu_stream *x = d->streams; x; x = x->next) {
		if (!(x->flags & CU_STREAM_NON_BLOCKING) && x->busy_until > t)
			t = x->busy_until;
	}
	return t;
}

/* Adds kernel nodes to g (the kernels of a launch captured into it, or of a
 * graph launched into its capture; an exec's, copied from its graph), each a
 * new node with an id of its own when renumber is set, else keeping k's. Lock
 * held. Out of memory: the node counts, its kernel isn't run by name. */
static void graph_add_kernels(struct gpu_graph *g, const struct graph_kernel *k, unsigned int n,
			      bool renumber)
{
	struct graph_kernel *more;

	if (g->nk + n > g->capk) {
		unsigned int cap = (g->nk + n) * 2;

		more = realloc(g->k, cap * sizeof(*g->k));
		if (!more)
			return;
		g->k = more;
		g->capk = cap;
	}
	memcpy(g->k + g->nk, k, n * sizeof(*k));
	for (unsigned int i = 0; renumber && i < n; i++)
		g->k[g->nk + i].node_id = ++node_ids;
	g->nk += n;
}

/* Queues `ns` of work (`nodes` kernels) on `s`, or adds it to the graph being captured. */
static void enqueue(struct gpu_stream *s, uint64_t ns, unsigned int nodes)
{
	uint64_t now, ready;

	if (s->capture) {
		s->capture->nodes += nodes;
		s->capture->ns = sat_add(s->capture->ns, ns);
		return;
	}
	ready = ready_at(s);
	if (ready == STANDIN_FOREVER || ns == STANDIN_FOREVER) {
		s->busy_until = STANDIN_FOREVER;
		return;
	}
	now = standin_now_ns();
	s->busy_until = sat_add(ready > now ? ready : now, ns);
}

/*
 * Sleeps until the monotonic time `t`. A wait on hung work (STANDIN_FOREVER) lasts until
 * a signal handler runs on this thread, and then reports a timeout: what an application
 * with a watchdog sees from a stuck collective.
 */
static CUresult wait_until(uint64_t t)
{
	struct timespec ts;

	if (t == STANDIN_FOREVER) {
		pause();
		return CUDA_ERROR_LAUNCH_TIMEOUT;
	}
	ts.tv_sec = (time_t)(t / 1000000000ull);
	ts.tv_nsec = (long)(t % 1000000000ull);
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
	return CUDA_SUCCESS;
}

static struct gpu_stream *stream_new(int dev, unsigned int flags, int priority)
{
	struct gpu_stream *s = free_streams;

	if (s)
		free_streams = s->next;
	else
		s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	static uint32_t ids = 12;

	*s = (struct gpu_stream){.type = OBJ_STREAM,
				 .dev = dev,
				 .flags = flags,
				 .priority = priority,
				 .id = ++ids,
				 .ctx_id = cur_ctx ? cur_ctx->id : 0};
	s->next = devs[dev].streams->next;
	devs[dev].streams->next = s;
	return s;
}

/* The stream a handle names, resolving the default-stream handles; lock held. */
static struct gpu_stream *stream_of(CUstream h, CUresult *err)
{
	struct gpu_stream *s;
	int dev;

	if (h == NULL || h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD) {
		if (!cur_ctx) {
			*err = CUDA_ERROR_INVALID_CONTEXT;
			return NULL;
		}
		dev = cur_ctx->dev;
		if (h != CU_STREAM_PER_THREAD)
			return &devs[dev].legacy;
		if (!per_thread[dev])
			per_thread[dev] = stream_new(dev, CU_STREAM_DEFAULT, 0);
		if (!per_thread[dev])
			*err = CUDA_ERROR_OUT_OF_MEMORY;
		return per_thread[dev];
	}
	s = obj_get(h, OBJ_STREAM);
	if (!s)
		*err = CUDA_ERROR_INVALID_HANDLE;
	return s;
}

bool gpu_initialized(void)
{
	return __atomic_load_n(&initialized, __ATOMIC_ACQUIRE);
}

/* Loads the library CUDA_INJECTION64_PATH names and calls its InitializeInjection, once,
 * as the real driver does at its initialization (a profiler's way in: CUPTI's callbacks
 * and activity records). The library may call back into the driver from there; a second
 * initialization meanwhile (on its thread or another) goes on without waiting. */
static void inject(void)
{
	static int state; /* 0: not yet, 1: under way or done */
	const char *path = getenv("CUDA_INJECTION64_PATH");
	int (*init)(void), r;
	void *lib;

	if (!path || !*path || __atomic_exchange_n(&state, 1, __ATOMIC_ACQ_REL))
		return;
	lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	*(void **)&init = lib ? dlsym(lib, "InitializeInjection") : NULL;
	if (!init) {
		STANDIN_TRACE("libcuda: the injection library %s can't be used: %s", path,
			      lib ? "no InitializeInjection" : dlerror());
		return;
	}
	r = init();
	STANDIN_TRACE("libcuda: InitializeInjection of %s = %d", path, r);
}

CUresult gpu_init(unsigned int flags)
{
	pthread_once(&setup_once, setup);
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (!cfg.ndevs)
		return CUDA_ERROR_NO_DEVICE;
	__atomic_store_n(&initialized, true, __ATOMIC_RELEASE);
	inject();
	return CUDA_SUCCESS;
}

void gpu_set_tracer(const struct standin_tracer *t)
{
	__atomic_store_n(&tracer, t, __ATOMIC_RELEASE);
}

const struct standin_tracer *gpu_tracer(void)
{
	return __atomic_load_n(&tracer, __ATOMIC_ACQUIRE);
}

CUresult gpu_driver_get_version(int *version)
{
	if (!version)
		return CUDA_ERROR_INVALID_VALUE;
	*version = CUDA_VERSION;
	return CUDA_SUCCESS;
}

CUresult gpu_device_get(CUdevice *device, int ordinal)
{
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (!valid_device(ordinal))
		return CUDA_ERROR_INVALID_DEVICE;
	*device = ordinal;
	return CUDA_SUCCESS;
}

CUresult gpu_device_get_count(int *count)
{
	if (!count)
		return CUDA_ERROR_INVALID_VALUE;
	*count = cfg.ndevs;
	return CUDA_SUCCESS;
}

CUresult gpu_device_get_name(char *name, int len, CUdevice dev)
{
	if (!name || len <= 0)
		return CUDA_ERROR_INVALID_VALUE;
	if (!valid_device(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	snprintf(name, (size_t)len, "%s", cfg.name);
	return CUDA_SUCCESS;
}

CUresult gpu_device_total_mem(size_t *bytes, CUdevice dev)
{
	if (!bytes)
		return CUDA_ERROR_INVALID_VALUE;
	if (!valid_device(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	*bytes = devs[dev].total;
	return CUDA_SUCCESS;
}

CUresult gpu_device_get_attribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
	int v;

	if (!pi)
		return CUDA_ERROR_INVALID_VALUE;
	if (!valid_device(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	/* A Hopper-class part; what is not listed is reported as 0 (absent feature). */
	switch (attrib) {
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
		v = GPU_MAX_THREADS;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
		v = 64;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
		v = 0x7fffffff;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
		v = 65535;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
		v = 48 << 10;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
		v = 228 << 10;
		break;
	case CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY:
		v = 64 << 10;
		break;
	case CU_DEVICE_ATTRIBUTE_WARP_SIZE:
		v = 32;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
	case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR:
		v = 65536;
		break;
	case CU_DEVICE_ATTRIBUTE_CLOCK_RATE:
		v = 1980000;
		break;
	case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE:
		v = 2619000;
		break;
	case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH:
		v = 5120;
		break;
	case CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE:
		v = 50 << 20;
		break;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
		v = 132;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR:
		v = 2048;
		break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
		v = 9;
		break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
		v = 0;
		break;
	case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
		v = 0x18 + dev;
		break;
	case CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT:
		v = 2;
		break;
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS:
	case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
	case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY:
	case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS:
	case CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY:
	case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH:
	case CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED:
	case CU_DEVICE_ATTRIBUTE_ECC_ENABLED:
		v = 1;
		break;
	default:
		v = 0;
		break;
	}
	*pi = v;
	return CUDA_SUCCESS;
}

/* The driver's account of dev changed: publish it. Lock held. */
static void account(int dev)
{
	standin_account_set(phys[dev], devs[dev].used, (uint64_t)devs[dev].contexts);
}

/* A context takes device memory as a real one does (code, stacks, heaps): it fails to
 * start where that does not fit. Lock held. */
static CUresult ctx_charge(int dev)
{
	struct gpu_device *d = &devs[dev];

	if (cfg.ctx_bytes > d->total - d->used)
		return CUDA_ERROR_OUT_OF_MEMORY;
	d->used += cfg.ctx_bytes;
	d->contexts++;
	account(dev);
	return CUDA_SUCCESS;
}

static void ctx_uncharge(int dev)
{
	devs[dev].used -= cfg.ctx_bytes;
	devs[dev].contexts--;
	account(dev);
}

/* Waits while another thread tells the tracer of c coming or going, as a second
 * thread waits behind the driver's lock while CUPTI's callbacks of a context run.
 * Lock held. */
static void wait_told(struct gpu_ctx *c)
{
	while (c->telling && !pthread_equal(c->teller, pthread_self()))
		pthread_cond_wait(&told, &lock);
}

/* The tracer to tell of c coming or going, with c marked as being told; NULL when no
 * tracer listens for contexts. Lock held. */
static const struct standin_tracer *tell_begin(struct gpu_ctx *c)
{
	const struct standin_tracer *t = gpu_tracer();

	if (!t || !t->context)
		return NULL;
	c->telling = true;
	c->teller = pthread_self();
	return t;
}

/* Tells t (from tell_begin; NULL: nothing to do) that c was made or is going, without
 * the lock, then lets those waiting on c go on. */
static void tell(const struct standin_tracer *t, struct gpu_ctx *c, bool created)
{
	if (!t)
		return;
	t->context((CUcontext)c, c->id, created);
	pthread_mutex_lock(&lock);
	c->telling = false;
	pthread_cond_broadcast(&told);
	pthread_mutex_unlock(&lock);
}

/* The primary context is created by its first reference; *t is then the tracer to tell
 * of it once the lock is released (tell()), else NULL. Lock held. */
static CUresult primary_retain(int dev, const struct standin_tracer **t)
{
	struct gpu_ctx *p = &devs[dev].primary;
	CUresult err;

	*t = NULL;
	wait_told(p);
	err = p->refs ? CUDA_SUCCESS : ctx_charge(dev);
	if (!err && !p->refs) {
		p->id = ++ctx_ids;
		*t = tell_begin(p);
	}
	if (!err)
		p->refs++;
	return err;
}

CUresult gpu_primary_ctx_retain(CUcontext *pctx, CUdevice dev)
{
	const struct standin_tracer *t;
	CUresult err;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (!valid_device(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&lock);
	err = primary_retain(dev, &t);
	pthread_mutex_unlock(&lock);
	if (err)
		return err;
	*pctx = (CUcontext)&devs[dev].primary;
	tell(t, &devs[dev].primary, true);
	return CUDA_SUCCESS;
}

CUresult gpu_primary_ctx_release(CUdevice dev)
{
	struct gpu_ctx *p;
	const struct standin_tracer *t;
	CUresult err = CUDA_SUCCESS;

	if (!valid_device(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	p = &devs[dev].primary;
	pthread_mutex_lock(&lock);
	wait_told(p);
	/* The last reference destroys it: the tracer hears of it first, while it lives. */
	if (p->refs == 1 && (t = tell_begin(p))) {
		pthread_mutex_unlock(&lock);
		tell(t, p, false);
		pthread_mutex_lock(&lock);
	}
	if (p->refs > 0) {
		if (!--p->refs)
			ctx_uncharge(dev);
	} else {
		err = CUDA_ERROR_INVALID_CONTEXT;
	}
	pthread_mutex_unlock(&lock);
	return err;
}

CUresult gpu_ctx_create(CUcontext *pctx, unsigned int flags, CUdevice dev)
{
	const struct standin_tracer *t = NULL;
	struct gpu_ctx *c;
	CUresult err;

	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	if (!valid_device(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&lock);
	err = ctx_charge(dev);
	c = err ? NULL : obj_new(sizeof(*c), OBJ_CTX, 0);
	if (!c && !err)
		ctx_uncharge(dev);
	if (c) {
		c->id = ++ctx_ids;
		c->dev = dev;
		c->refs = 1;
		t = tell_begin(c);
	}
	pthread_mutex_unlock(&lock);
	if (!c)
		return err ? err : CUDA_ERROR_OUT_OF_MEMORY;
	cur_ctx = c;
	*pctx = (CUcontext)c;
	tell(t, c, true);
	return CUDA_SUCCESS;
}

CUresult gpu_ctx_destroy(CUcontext ctx)
{
	const struct standin_tracer *t;
	struct gpu_ctx *c;

	pthread_mutex_lock(&lock);
	c = obj_get(ctx, OBJ_CTX);
	if (c && !c->primary) {
		wait_told(c);
		c = obj_get(ctx, OBJ_CTX); /* another thread may have destroyed it meanwhile */
	}
	if (c && !c->primary && (t = tell_begin(c))) {
		/* The tracer hears of it first, while it lives. */
		pthread_mutex_unlock(&lock);
		tell(t, c, false);
		pthread_mutex_lock(&lock);
		c = obj_get(ctx, OBJ_CTX);
	}
	/* Contexts are never freed: other threads may still have them current. Their
	 * device memory is. */
	if (c && !c->primary) {
		ptrmap__del(&objs, (uintptr_t)c);
		ctx_uncharge(c->dev);
	}
	pthread_mutex_unlock(&lock);
	if (!c || c->primary)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (cur_ctx == c)
		cur_ctx = NULL;
	return CUDA_SUCCESS;
}

CUresult gpu_ctx_set_current(CUcontext ctx)
{
	struct gpu_ctx *c = NULL;

	if (ctx) {
		pthread_mutex_lock(&lock);
		c = obj_get(ctx, OBJ_CTX);
		pthread_mutex_unlock(&lock);
		if (!c)
			return CUDA_ERROR_INVALID_CONTEXT;
	}
	cur_ctx = c;
	return CUDA_SUCCESS;
}

CUresult gpu_ctx_get_current(CUcontext *pctx)
{
	if (!pctx)
		return CUDA_ERROR_INVALID_VALUE;
	*pctx = (CUcontext)cur_ctx;
	return CUDA_SUCCESS;
}

CUresult gpu_ctx_get_id(CUcontext ctx, unsigned long long *id)
{
	struct gpu_ctx *c;

	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	c = obj_get(ctx ? (const void *)ctx : (const void *)cur_ctx, OBJ_CTX);
	/* A primary context lives while it is retained. */
	if (c && c->primary && !c->refs)
		c = NULL;
	if (c)
		*id = c->id;
	pthread_mutex_unlock(&lock);
	return c ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult gpu_ctx_get_device(CUdevice *device)
{
	if (!device)
		return CUDA_ERROR_INVALID_VALUE;
	if (!cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	*device = cur_ctx->dev;
	return CUDA_SUCCESS;
}

CUresult gpu_ensure_context(CUdevice *dev)
{
	pthread_once(&setup_once, setup);
	if (!cfg.ndevs)
		return CUDA_ERROR_NO_DEVICE;
	if (!cur_ctx) {
		const struct standin_tracer *t;
		CUresult err;

		pthread_mutex_lock(&lock);
		err = primary_retain(0, &t);
		pthread_mutex_unlock(&lock);
		if (err)
			return err;
		cur_ctx = &devs[0].primary;
		tell(t, cur_ctx, true);
	}
	if (dev)
		*dev = cur_ctx->dev;
	return CUDA_SUCCESS;
}

/* The pool of dev gives back what it holds above max(used, release threshold), as CUDA's
 * does when the host synchronizes. Lock held. */
static void pool_settle(int dev)
{
	struct gpu_device *d = &devs[dev];
	struct gpu_pool *p = &d->pool;
	size_t keep = p->threshold < p->reserved ? p->threshold : p->reserved;

	if (keep < p->used)
		keep = p->used;
	if (keep == p->reserved)
		return;
	d->used -= p->reserved - keep;
	p->reserved = keep;
	account(dev);
}

/* Tells the tracer of a synchronization call (standin_sync_run) that began at t0 and
 * succeeded; without the lock, just before the call returns. */
static void tell_sync(uint8_t type, uint32_t ctx_id, uint32_t stream_id, uint32_t event_id,
		      uint64_t t0)
{
	const struct standin_tracer *t = gpu_tracer();
	struct standin_sync_run run = {.type = type,
				       .ctx_id = ctx_id,
				       .stream_id = stream_id,
				       .event_id = event_id,
				       .start_ns = t0};

	if (!t || !t->sync)
		return;
	run.end_ns = standin_now_ns();
	t->sync(&run);
}

/* Synchronizes with everything queued on a device; the lock is not held on entry. */
static CUresult device_sync(int dev)
{
	uint64_t until;

	pthread_mutex_lock(&lock);
	until = devs[dev].orphan_until;
	for (struct gpu_stream *s = devs[dev].streams; s; s = s->next) {
		if (s->busy_until > until)
			until = s->busy_until;
	}
	pthread_mutex_unlock(&lock);
	return wait_until(until);
}

/* cuCtxSynchronize of c, which began at t0: a synchronization the tracer is told of. */
static CUresult ctx_sync(const struct gpu_ctx *c, uint64_t t0)
{
	CUresult err = device_sync(c->dev);

	if (err)
		return err;
	pthread_mutex_lock(&lock);
	pool_settle(c->dev);
	pthread_mutex_unlock(&lock);
	tell_sync(CUPTI_SYNC_CONTEXT, c->id, 0, 0, t0);
	return CUDA_SUCCESS;
}

CUresult gpu_ctx_synchronize(void)
{
	uint64_t t0 = standin_now_ns();

	if (!cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	return ctx_sync(cur_ctx, t0);
}

CUresult gpu_ctx_synchronize_ctx(CUcontext ctx)
{
	uint64_t t0 = standin_now_ns();
	struct gpu_ctx *c;

	if (!ctx)
		return gpu_ctx_synchronize();
	pthread_mutex_lock(&lock);
	c = obj_get(ctx, OBJ_CTX);
	pthread_mutex_unlock(&lock);
	if (!c)
		return CUDA_ERROR_INVALID_CONTEXT;
	return ctx_sync(c, t0);
}

/* Device memory. */

static uintptr_t round_up(uintptr_t v, uintptr_t align)
{
	return (v + align - 1) & ~(align - 1);
}

static bool device_reserve(struct gpu_device *d)
{
	void *p = MAP_FAILED;

	if (d->va_base)
		return true;
	/* Twice the capacity, so fragmentation does not fail an allocation that fits; the
	 * capacity alone where address space is limited (ulimit -v, valgrind). */
	for (int twice = 1; twice >= 0 && p == MAP_FAILED; twice--) {
		d->va_len = round_up(d->total, GPU_GRANULARITY) << twice;
		p = mmap(NULL, d->va_len + GPU_GRANULARITY, PROT_NONE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	}
	if (p == MAP_FAILED)
		return false;
	d->free = malloc(sizeof(*d->free));
	if (!d->free) {
		munmap(p, d->va_len + GPU_GRANULARITY);
		return false;
	}
	d->va_base = round_up((uintptr_t)p, GPU_GRANULARITY);
	*d->free = (struct extent){.base = d->va_base, .len = d->va_len};
	return true;
}

/* First fit: reuses freed addresses as a caching allocator does. 0 when nothing fits. */
static uintptr_t carve(struct gpu_device *d, size_t span, size_t align)
{
	struct extent **prev, *e;

	for (prev = &d->free; (e = *prev); prev = &e->next) {
		uintptr_t a = round_up(e->base, align);
		size_t pad = a - e->base, tail;

		if (pad > e->len || e->len - pad < span)
			continue;
		tail = e->len - pad - span;
		if (pad && tail) {
			struct extent *t = malloc(sizeof(*t));

			if (!t)
				return 0;
			*t = (struct extent){.base = a + span, .len = tail, .next = e->next};
			e->len = pad;
			e->next = t;
		} else if (pad) {
			e->len = pad;
		} else if (tail) {
			e->base = a + span;
			e->len = tail;
		} else {
			*prev = e->next;
			free(e);
		}
		return a;
	}
	return 0;
}

static void give_back(struct gpu_device *d, uintptr_t base, size_t len)
{
	struct extent *before = NULL, *after = d->free, *n;

	while (after && after->base < base) {
		before = after;
		after = after->next;
	}
	/* Merge with the extent before, the one after, or both. */
	if (before && before->base + before->len == base) {
		before->len += len;
		if (after && before->base + before->len == after->base) {
			before->len += after->len;
			before->next = after->next;
			free(after);
		}
		return;
	}
	if (after && base + len == after->base) {
		after->base = base;
		after->len += len;
		return;
	}
	n = malloc(sizeof(*n));
	if (!n)
		return; /* the range is lost to later allocations, nothing worse */
	*n = (struct extent){.base = base, .len = len, .next = after};
	if (before)
		before->next = n;
	else
		d->free = n;
}

/* What the CUPTI stand-in is told of an allocation or release (standin_memory_run): all but
 * the async call's stream, filled in by the caller. Lock held. */
static struct standin_memory_run memory_run(int dev, enum alloc_kind kind, bool release,
					    uintptr_t addr, size_t bytes)
{
	return (struct standin_memory_run){
		.release = release,
		.memory_kind = kind == ALLOC_MANAGED ? 5 : 3, /* CUPTI_ACTIVITY_MEMORY_KIND_ */
		.pool = kind == ALLOC_ASYNC,
		.device = dev,
		.ctx_id = cur_ctx ? cur_ctx->id : 0,
		.address = addr,
		.bytes = bytes,
		.at_ns = standin_now_ns(),
		.pool_base = devs[dev].va_base,
		.pool_used = devs[dev].pool.used,
		.pool_reserved = devs[dev].pool.reserved,
		.pool_threshold = devs[dev].pool.threshold,
	};
}

/* Tells the CUPTI stand-in of an allocation or release, without the lock. */
static void tell_memory(const struct standin_memory_run *run)
{
	const struct standin_tracer *t = gpu_tracer();

	if (t && t->memory)
		t->memory(run);
}

/* An allocation of size bytes on dev; stream_id: an async call's stream, else 0. */
static CUresult alloc_on(int dev, size_t size, enum alloc_kind kind, uint32_t stream_id,
			 CUdeviceptr *dptr)
{
	struct gpu_device *d = &devs[dev];
	struct standin_memory_run run;
	struct gpu_alloc *a;
	uintptr_t addr;
	size_t span, charge = size; /* what the device's account grows by */

	if (!dptr || !size)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	if (kind == ALLOC_ASYNC) {
		/* From what the pool holds; it grows by what is missing. */
		charge = size > d->pool.reserved - d->pool.used
				 ? size - (d->pool.reserved - d->pool.used)
				 : 0;
	}
	if (charge > d->total - d->used) {
		pthread_mutex_unlock(&lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	if (kind == ALLOC_MANAGED) {
		/* Managed memory is host memory: the host may read and write it. */
		void *p;

		span = round_up(size, (size_t)sysconf(_SC_PAGESIZE));
		p = mmap(NULL, span, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		addr = p == MAP_FAILED ? 0 : (uintptr_t)p;
	} else {
		size_t align = size >= GPU_GRANULARITY ? GPU_GRANULARITY : GPU_SMALL_ALIGN;

		span = round_up(size, align);
		addr = device_reserve(d) ? carve(d, span, align) : 0;
	}
	a = addr ? obj_new(sizeof(*a), OBJ_ALLOC, addr) : NULL;
	if (!a) {
		if (addr && kind == ALLOC_MANAGED)
			munmap((void *)addr, span);
		else if (addr)
			give_back(d, addr, span);
		pthread_mutex_unlock(&lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a->dev = dev;
	a->kind = kind;
	a->size = size;
	a->span = span;
	d->used += charge;
	if (kind == ALLOC_ASYNC) {
		struct gpu_pool *p = &d->pool;

		p->used += size;
		p->reserved += charge;
		p->used_high = p->used > p->used_high ? p->used : p->used_high;
		p->reserved_high = p->reserved > p->reserved_high ? p->reserved : p->reserved_high;
	}
	account(dev);
	run = memory_run(dev, kind, false, addr, size);
	run.async = kind == ALLOC_ASYNC;
	run.stream_id = stream_id;
	pthread_mutex_unlock(&lock);
	tell_memory(&run);
	*dptr = (CUdeviceptr)addr;
	return CUDA_SUCCESS;
}

CUresult gpu_mem_alloc(CUdeviceptr *dptr, size_t bytesize)
{
	if (!cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	return alloc_on(cur_ctx->dev, bytesize, ALLOC_DEVICE, 0, dptr);
}

CUresult gpu_mem_alloc_managed(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
	if (!cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
		return CUDA_ERROR_INVALID_VALUE;
	return alloc_on(cur_ctx->dev, bytesize, ALLOC_MANAGED, 0, dptr);
}

CUresult gpu_mem_alloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream stream)
{
	CUresult err = CUDA_SUCCESS;
	struct gpu_stream *s;
	uint32_t id;
	int dev;

	pthread_mutex_lock(&lock);
	s = stream_of(stream, &err);
	dev = s ? s->dev : 0;
	id = s ? s->id : 0;
	pthread_mutex_unlock(&lock);
	if (!s)
		return err;
	/* Taken at once from the device's pool; the stream only orders its use. */
	return alloc_on(dev, bytesize, ALLOC_ASYNC, id, dptr);
}

/* Frees an allocation; stream_id: an async call's stream, else 0 (a synchronous free). */
static CUresult free_on(CUdeviceptr dptr, bool async, uint32_t stream_id)
{
	struct standin_memory_run run;
	struct gpu_alloc *a;

	pthread_mutex_lock(&lock);
	a = obj_get((void *)(uintptr_t)dptr, OBJ_ALLOC);
	if (!a) {
		pthread_mutex_unlock(&lock);
		return CUDA_ERROR_INVALID_VALUE;
	}
	ptrmap__del(&objs, (uintptr_t)dptr);
	if (a->kind == ALLOC_ASYNC) {
		/* Back to the pool, which gives the device what it holds above its threshold. */
		devs[a->dev].pool.used -= a->size;
		pool_settle(a->dev);
	} else {
		devs[a->dev].used -= a->size;
	}
	account(a->dev);
	run = memory_run(a->dev, a->kind, true, (uintptr_t)dptr, a->size);
	run.async = async;
	run.stream_id = stream_id;
	pthread_mutex_unlock(&lock);
	/* Told while its addresses are still taken: no other thread's allocation at them is
	 * told before this release. */
	tell_memory(&run);
	if (a->kind == ALLOC_MANAGED) {
		munmap((void *)(uintptr_t)dptr, a->span);
	} else {
		pthread_mutex_lock(&lock);
		give_back(&devs[a->dev], (uintptr_t)dptr, a->span);
		pthread_mutex_unlock(&lock);
	}
	free(a);
	return CUDA_SUCCESS;
}

CUresult gpu_mem_free(CUdeviceptr dptr)
{
	if (!cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	return free_on(dptr, false, 0);
}

CUresult gpu_mem_free_async(CUdeviceptr dptr, CUstream stream)
{
	CUresult err = CUDA_SUCCESS;
	struct gpu_stream *s;
	uint32_t id;

	pthread_mutex_lock(&lock);
	s = stream_of(stream, &err);
	id = s ? s->id : 0;
	pthread_mutex_unlock(&lock);
	if (!s)
		return err;
	if (!cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	return free_on(dptr, true, id);
}

CUresult gpu_mem_get_info(size_t *free, size_t *total)
{
	struct gpu_device *d;

	if (!cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!free || !total)
		return CUDA_ERROR_INVALID_VALUE;
	d = &devs[cur_ctx->dev];
	pthread_mutex_lock(&lock);
	*free = d->total - d->used;
	*total = d->total;
	pthread_mutex_unlock(&lock);
	return CUDA_SUCCESS;
}

/* The default memory pools (struct gpu_pool). */

CUresult gpu_device_get_default_mem_pool(CUmemoryPool *pool, CUdevice dev)
{
	pthread_once(&setup_once, setup);
	if (!pool)
		return CUDA_ERROR_INVALID_VALUE;
	if (!valid_device(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&lock);
	device_reserve(&devs[dev]); /* the pool's address is its device's range */
	pthread_mutex_unlock(&lock);
	*pool = (CUmemoryPool)&devs[dev].pool;
	return CUDA_SUCCESS;
}

/* The pool of handle pool with the lock held; NULL, the lock released, when it is none. */
static struct gpu_pool *pool_lock(CUmemoryPool pool)
{
	struct gpu_pool *p;

	pthread_mutex_lock(&lock);
	p = obj_get(pool, OBJ_POOL);
	if (!p)
		pthread_mutex_unlock(&lock);
	return p;
}

/* As the driver's: the reuse policies are ints, kept; the release threshold a cuuint64_t;
 * the high watermarks can only be reset (to the current value) by setting 0; the current
 * amounts cannot be set. */
CUresult gpu_mem_pool_set_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	CUresult err = CUDA_SUCCESS;
	struct gpu_pool *p;

	if (!value || !(p = pool_lock(pool)))
		return CUDA_ERROR_INVALID_VALUE;
	if (attr >= CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES &&
	    attr <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES) {
		p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES] = *(int *)value;
	} else if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD) {
		/* Memory above it goes back at the next synchronization, not now. */
		p->threshold = (size_t) * (cuuint64_t *)value;
	} else if ((attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH ||
		    attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH) &&
		   !*(cuuint64_t *)value) {
		if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
			p->reserved_high = p->reserved;
		else
			p->used_high = p->used;
	} else {
		err = CUDA_ERROR_INVALID_VALUE;
	}
	pthread_mutex_unlock(&lock);
	return err;
}

CUresult gpu_mem_pool_get_attribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
	CUresult err = CUDA_SUCCESS;
	struct gpu_pool *p;

	if (!value || !(p = pool_lock(pool)))
		return CUDA_ERROR_INVALID_VALUE;
	if (attr >= CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES &&
	    attr <= CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES)
		*(int *)value = p->reuse[attr - CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES];
	else if (attr == CU_MEMPOOL_ATTR_RELEASE_THRESHOLD)
		*(cuuint64_t *)value = p->threshold;
	else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT)
		*(cuuint64_t *)value = p->reserved;
	else if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH)
		*(cuuint64_t *)value = p->reserved_high;
	else if (attr == CU_MEMPOOL_ATTR_USED_MEM_CURRENT)
		*(cuuint64_t *)value = p->used;
	else if (attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH)
		*(cuuint64_t *)value = p->used_high;
	else
		err = CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_unlock(&lock);
	return err;
}

/* Gives back what the pool holds above max(used, min_keep): trimming never grows it. */
CUresult gpu_mem_pool_trim_to(CUmemoryPool pool, size_t min_keep)
{
	const struct standin_tracer *t = gpu_tracer();
	struct standin_pool_run run;
	struct gpu_device *d;
	struct gpu_pool *p;
	size_t keep;

	p = pool_lock(pool);
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	d = &devs[p->dev];
	keep = min_keep > p->used ? min_keep : p->used;
	if (keep < p->reserved) {
		d->used -= p->reserved - keep;
		p->reserved = keep;
		account(p->dev);
	}
	run = (struct standin_pool_run){
		.operation = 3, /* CUPTI_ACTIVITY_MEMORY_POOL_OPERATION_TYPE_TRIMMED */
		.device = p->dev,
		.base = d->va_base,
		.min_bytes_to_keep = min_keep,
		.reserved = p->reserved,
		.used = p->used,
		.release_threshold = p->threshold,
		.at_ns = standin_now_ns(),
	};
	pthread_mutex_unlock(&lock);
	if (t && t->pool)
		t->pool(&run);
	return CUDA_SUCCESS;
}

/* Virtual memory management: physical handles count against the device, mappings do not.
 * CUPTI's documentation does not say whether its memory records (CUPTI_ACTIVITY_KIND_MEMORY2)
 * cover VMM; the stand-in tells each physical allocation, at cuMemCreate (its size, the
 * handle for an address) and cuMemRelease, and no mapping. */

CUresult gpu_mem_create(CUmemGenericAllocationHandle *handle, size_t size,
			const CUmemAllocationProp *prop, unsigned long long flags)
{
	struct standin_memory_run run = {0};
	struct gpu_device *d;
	struct gpu_phys *p;
	int dev;

	if (!handle || !prop || flags || !size || size % GPU_GRANULARITY ||
	    prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
	    prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
		return CUDA_ERROR_INVALID_VALUE;
	dev = prop->location.id;
	if (!valid_device(dev))
		return CUDA_ERROR_INVALID_DEVICE;
	d = &devs[dev];
	pthread_mutex_lock(&lock);
	if (size > d->total - d->used) {
		pthread_mutex_unlock(&lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	p = obj_new(sizeof(*p), OBJ_PHYS, 0);
	if (p) {
		p->dev = dev;
		p->size = size;
		d->used += size;
		account(dev);
		run = memory_run(dev, ALLOC_DEVICE, false, (uintptr_t)p, size);
	}
	pthread_mutex_unlock(&lock);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	tell_memory(&run);
	*handle = (CUmemGenericAllocationHandle)(uintptr_t)p;
	return CUDA_SUCCESS;
}

CUresult gpu_mem_release(CUmemGenericAllocationHandle handle)
{
	struct standin_memory_run run = {0};
	struct gpu_phys *p;

	pthread_mutex_lock(&lock);
	p = obj_get((void *)(uintptr_t)handle, OBJ_PHYS);
	if (p) {
		ptrmap__del(&objs, (uintptr_t)p);
		devs[p->dev].used -= p->size;
		account(p->dev);
		run = memory_run(p->dev, ALLOC_DEVICE, true, (uintptr_t)p, p->size);
	}
	pthread_mutex_unlock(&lock);
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	/* Told before the handle can be handed out again. */
	tell_memory(&run);
	free(p);
	return CUDA_SUCCESS;
}

CUresult gpu_mem_address_reserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
				 unsigned long long flags)
{
	struct gpu_va *va;
	void *p;

	if (!ptr || !size || size % GPU_GRANULARITY || flags)
		return CUDA_ERROR_INVALID_VALUE;
	p = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED)
		return CUDA_ERROR_OUT_OF_MEMORY;
	pthread_mutex_lock(&lock);
	va = obj_new(sizeof(*va), OBJ_VA, (uintptr_t)p);
	if (va) {
		va->addr = (uintptr_t)p;
		va->size = size;
		va->next = vas;
		vas = va;
	}
	pthread_mutex_unlock(&lock);
	if (!va) {
		munmap(p, size);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	*ptr = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

CUresult gpu_mem_address_free(CUdeviceptr ptr, size_t size)
{
	struct gpu_va *va, **prev;

	pthread_mutex_lock(&lock);
	va = obj_get((void *)(uintptr_t)ptr, OBJ_VA);
	if (va && va->size == size) {
		ptrmap__del(&objs, va->addr);
		for (prev = &vas; *prev != va; prev = &(*prev)->next)
			;
		*prev = va->next;
	} else {
		va = NULL;
	}
	pthread_mutex_unlock(&lock);
	if (!va)
		return CUDA_ERROR_INVALID_VALUE;
	munmap((void *)va->addr, va->size);
	free(va);
	return CUDA_SUCCESS;
}

/* Whether [ptr, ptr + size) lies inside one reserved range. */
static bool va_covers(CUdeviceptr ptr, size_t size)
{
	bool ok = false;

	pthread_mutex_lock(&lock);
	for (struct gpu_va *va = vas; va && !ok; va = va->next)
		ok = ptr >= va->addr && size <= va->size && ptr - va->addr <= va->size - size;
	pthread_mutex_unlock(&lock);
	return ok;
}

CUresult gpu_mem_map(CUdeviceptr ptr, size_t size, size_t offset,
		     CUmemGenericAllocationHandle handle, unsigned long long flags)
{
	struct gpu_phys *p;

	if (!size || flags || !va_covers(ptr, size))
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	p = obj_get((void *)(uintptr_t)handle, OBJ_PHYS);
	pthread_mutex_unlock(&lock);
	if (!p)
		return CUDA_ERROR_INVALID_HANDLE;
	if (offset > p->size || size > p->size - offset)
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

CUresult gpu_mem_unmap(CUdeviceptr ptr, size_t size)
{
	return size && va_covers(ptr, size) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult gpu_mem_set_access(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
	if (!desc || !count || !size || !va_covers(ptr, size))
		return CUDA_ERROR_INVALID_VALUE;
	return CUDA_SUCCESS;
}

CUresult gpu_mem_get_allocation_granularity(size_t *granularity, const CUmemAllocationProp *prop,
					    CUmemAllocationGranularity_flags option)
{
	if (!granularity || !prop)
		return CUDA_ERROR_INVALID_VALUE;
	*granularity = GPU_GRANULARITY;
	return CUDA_SUCCESS;
}

/* Copies and fills. */

/* Whether an address is device memory (holds no data), as opposed to host or managed. */
static bool is_device_addr(uintptr_t a)
{
	bool dev = false;

	pthread_mutex_lock(&lock);
	for (int i = 0; i < cfg.ndevs && !dev; i++)
		dev = devs[i].va_base && a >= devs[i].va_base &&
		      a - devs[i].va_base < devs[i].va_len;
	for (struct gpu_va *va = vas; va && !dev; va = va->next)
		dev = a >= va->addr && a - va->addr < va->size;
	pthread_mutex_unlock(&lock);
	return dev;
}

/* Queues `ns` of transfer on a stream, told to the CUPTI stand-in's tracer as run says (its
 * times and where filled in here); with `sync`, waits for it as a blocking call does. */
static CUresult transfer(CUstream stream, uint64_t ns, bool sync, struct standin_copy_run *run)
{
	const struct standin_tracer *t = gpu_tracer();
	CUresult err = CUDA_SUCCESS;
	struct gpu_stream *s;
	uint64_t until;
	bool told = false;

	pthread_mutex_lock(&lock);
	s = stream_of(stream, &err);
	if (s && t && t->copy && !s->capture) {
		uint64_t now = standin_now_ns(), ready = ready_at(s);

		run->start_ns = ready > now ? ready : now;
		run->end_ns = sat_add(run->start_ns, ns);
		run->device = s->dev;
		run->ctx_id = cur_ctx ? cur_ctx->id : 0;
		run->stream_id = s->id;
		told = run->start_ns != STANDIN_FOREVER;
	}
	if (s)
		enqueue(s, ns, 1);
	until = s && !s->capture ? s->busy_until : 0;
	pthread_mutex_unlock(&lock);
	if (!s)
		return err;
	if (told)
		t->copy(run);
	return sync ? wait_until(until) : CUDA_SUCCESS;
}

static CUresult copy(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream, bool sync)
{
	if (!dst || !src)
		return CUDA_ERROR_INVALID_VALUE;
	if (!bytes)
		return CUDA_SUCCESS;
	bool to_dev = is_device_addr(dst), from_dev = is_device_addr(src);
	struct standin_copy_run run = {
		.bytes = bytes, .copy_kind = to_dev ? (from_dev ? 8 : 1) : (from_dev ? 2 : 9)};

	if (!to_dev && !from_dev)
		memmove((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, bytes);
	return transfer(stream, bytes_ns(bytes), sync, &run);
}

CUresult gpu_copy(CUdeviceptr dst, CUdeviceptr src, size_t bytes)
{
	return copy(dst, src, bytes, NULL, true);
}

CUresult gpu_copy_async(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream stream)
{
	return copy(dst, src, bytes, stream, false);
}

static CUresult fill(CUdeviceptr dst, unsigned char uc, size_t n, CUstream stream, bool sync)
{
	if (!dst)
		return CUDA_ERROR_INVALID_VALUE;
	if (!n)
		return CUDA_SUCCESS;
	if (!is_device_addr(dst))
		memset((void *)(uintptr_t)dst, uc, n);
	/* A fill writes device memory only: about ten times a host link's speed. */
	return transfer(stream, bytes_ns(n) / 10, sync,
			&(struct standin_copy_run){.bytes = n, .set = true});
}

CUresult gpu_memset_d8(CUdeviceptr dst, unsigned char uc, size_t n)
{
	return fill(dst, uc, n, NULL, true);
}

CUresult gpu_memset_d8_async(CUdeviceptr dst, unsigned char uc, size_t n, CUstream stream)
{
	return fill(dst, uc, n, stream, false);
}

/* Streams. */

CUresult gpu_stream_create(CUstream *stream, unsigned int flags, int priority)
{
	struct gpu_stream *s;

	if (!stream || flags > CU_STREAM_NON_BLOCKING)
		return CUDA_ERROR_INVALID_VALUE;
	if (!cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&lock);
	s = stream_new(cur_ctx->dev, flags, priority);
	if (s && ptrmap__put(&objs, (uintptr_t)s, s)) {
		s->type = 0; /* left on the device list, idle; harmless */
		s = NULL;
	}
	pthread_mutex_unlock(&lock);
	if (!s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*stream = (CUstream)s;
	return CUDA_SUCCESS;
}

CUresult gpu_stream_destroy(CUstream stream)
{
	struct gpu_stream *s, **prev;

	pthread_mutex_lock(&lock);
	s = obj_get(stream, OBJ_STREAM);
	if (s) {
		/* Queued work still runs, and a device-wide synchronize waits for it. */
		struct gpu_device *d = &devs[s->dev];

		if (s->busy_until > d->orphan_until)
			d->orphan_until = s->busy_until;
		ptrmap__del(&objs, (uintptr_t)s);
		for (prev = &devs[s->dev].streams; *prev != s; prev = &(*prev)->next)
			;
		*prev = s->next;
		s->type = 0;
		s->next = free_streams;
		free_streams = s;
	}
	pthread_mutex_unlock(&lock);
	return s ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult gpu_stream_query(CUstream stream)
{
	CUresult err = CUDA_SUCCESS;
	struct gpu_stream *s;

	pthread_mutex_lock(&lock);
	s = stream_of(stream, &err);
	if (s)
		err = ready_at(s) <= standin_now_ns() ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
	pthread_mutex_unlock(&lock);
	return err;
}

/* The context of a stream, as CUPTI's synchronization records name it: the one it was made
 * in, the caller's for the legacy stream. Lock held. */
static uint32_t stream_ctx_id(const struct gpu_stream *s)
{
	return s->ctx_id ? s->ctx_id : cur_ctx ? cur_ctx->id : 0;
}

/* Waits for what is queued on a stream; as cuStreamSynchronize when tell is set (the host
 * synchronizes: the pool settles, the tracer is told), else as a blocking copy's wait. */
static CUresult stream_sync(CUstream stream, bool tell)
{
	uint64_t t0 = standin_now_ns(), until = 0;
	CUresult err = CUDA_SUCCESS;
	uint32_t ctx_id = 0, id = 0;
	struct gpu_stream *s;
	int dev = 0;

	pthread_mutex_lock(&lock);
	s = stream_of(stream, &err);
	if (s && s->capture)
		err = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	else if (s) {
		until = ready_at(s);
		dev = s->dev;
		id = s->id;
		ctx_id = stream_ctx_id(s);
	}
	pthread_mutex_unlock(&lock);
	if (err || (err = wait_until(until)) || !tell)
		return err;
	pthread_mutex_lock(&lock);
	pool_settle(dev);
	pthread_mutex_unlock(&lock);
	tell_sync(CUPTI_SYNC_STREAM, ctx_id, id, 0, t0);
	return CUDA_SUCCESS;
}

CUresult gpu_stream_synchronize(CUstream stream)
{
	return stream_sync(stream, true);
}

CUresult gpu_stream_drain(CUstream stream)
{
	return stream_sync(stream, false);
}

/* The graph of the capture under way with that id, NULL if it is over. Lock held. */
static struct gpu_graph *capture_of(uint64_t id)
{
	for (int d = 0; id && d < cfg.ndevs; d++)
		for (struct gpu_stream *s = devs[d].streams; s; s = s->next)
			if (s->capture && s->capture_origin && s->capture->capture_id == id)
				return s->capture;
	return NULL;
}

CUresult gpu_stream_wait_event(CUstream stream, CUevent event, unsigned int flags)
{
	uint64_t t0 = standin_now_ns();
	CUresult err = CUDA_SUCCESS;
	uint32_t ctx_id = 0, id = 0, event_id = 0;
	struct gpu_stream *s;
	struct gpu_event *e;

	pthread_mutex_lock(&lock);
	s = stream_of(stream, &err);
	e = obj_get(event, OBJ_EVENT);
	if (s && !e)
		err = CUDA_ERROR_INVALID_HANDLE;
	if (s && e && e->capture_id && !s->capture) {
		/* An event of a capture under way: the stream joins it, as in CUDA. */
		s->capture = capture_of(e->capture_id);
	} else if (s && e && e->recorded && !s->capture && e->at > s->busy_until) {
		s->busy_until = e->at;
	}
	if (s && e) {
		ctx_id = stream_ctx_id(s);
		id = s->id;
		event_id = e->id;
	}
	pthread_mutex_unlock(&lock);
	if (!err)
		tell_sync(CUPTI_SYNC_STREAM_WAIT_EVENT, ctx_id, id, event_id, t0);
	return err;
}

CUresult gpu_stream_begin_capture(CUstream stream, CUstreamCaptureMode mode)
{
	CUresult err = CUDA_SUCCESS;
	struct gpu_stream *s;

	pthread_mutex_lock(&lock);
	s = stream_of(stream, &err);
	if (s && s->legacy)
		err = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	else if (s && s->capture)
		err = CUDA_ERROR_ILLEGAL_STATE;
	else if (s && !(s->capture = obj_new(sizeof(struct gpu_graph), OBJ_GRAPH, 0)))
		err = CUDA_ERROR_OUT_OF_MEMORY;
	if (s && !err) {
		static uint64_t captures;

		s->capture->capture_id = ++captures;
		s->capture->id = ++graph_ids;
		s->capture_origin = true;
	}
	pthread_mutex_unlock(&lock);
	return err;
}

CUresult gpu_stream_end_capture(CUstream stream, CUgraph *graph)
{
	CUresult err = CUDA_SUCCESS;
	struct gpu_stream *s;

	if (!graph)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	s = stream_of(stream, &err);
	if (s && !s->capture)
		err = CUDA_ERROR_ILLEGAL_STATE;
	else if (s && !s->capture_origin)
		err = CUDA_ERROR_STREAM_CAPTURE_UNMATCHED; /* ended where it was joined */
	if (s && !err) {
		/* The streams that joined it are captured no more. */
		for (int d = 0; d < cfg.ndevs; d++)
			for (struct gpu_stream *o = devs[d].streams; o; o = o->next)
				if (o != s && o->capture == s->capture)
					o->capture = NULL;
		*graph = (CUgraph)s->capture;
		s->capture = NULL;
		s->capture_origin = false;
	}
	pthread_mutex_unlock(&lock);
	return err;
}

CUresult gpu_stream_is_capturing(CUstream stream, CUstreamCaptureStatus *status)
{
	CUresult err = CUDA_SUCCESS;
	struct gpu_stream *s;

	if (!status)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	s = stream_of(stream, &err);
	if (s)
		*status = s->capture ? CU_STREAM_CAPTURE_STATUS_ACTIVE
				     : CU_STREAM_CAPTURE_STATUS_NONE;
	pthread_mutex_unlock(&lock);
	return err;
}

CUresult gpu_stream_delay(CUstream stream, uint64_t ns)
{
	CUresult err = CUDA_SUCCESS;
	struct gpu_stream *s;

	pthread_mutex_lock(&lock);
	s = stream_of(stream, &err);
	if (s)
		enqueue(s, ns, 1);
	pthread_mutex_unlock(&lock);
	return err;
}

CUresult gpu_stream_device(CUstream stream, CUdevice *dev)
{
	CUresult err = CUDA_SUCCESS;
	struct gpu_stream *s;

	if (!dev)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	s = stream_of(stream, &err);
	if (s)
		*dev = s->dev;
	pthread_mutex_unlock(&lock);
	return err;
}

/* Events. */

CUresult gpu_event_create(CUevent *event, unsigned int flags)
{
	struct gpu_event *e;

	if (!event)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	e = free_events;
	if (e)
		free_events = e->next_free;
	else
		e = calloc(1, sizeof(*e));
	if (e) {
		*e = (struct gpu_event){.type = OBJ_EVENT,
					.flags = flags,
					.id = ++event_ids,
					.ctx_id = cur_ctx ? cur_ctx->id : 0};
		if (ptrmap__put(&objs, (uintptr_t)e, e)) {
			free(e);
			e = NULL;
		}
	}
	pthread_mutex_unlock(&lock);
	if (!e)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*event = (CUevent)e;
	return CUDA_SUCCESS;
}

CUresult gpu_event_destroy(CUevent event)
{
	struct gpu_event *e;

	pthread_mutex_lock(&lock);
	e = obj_get(event, OBJ_EVENT);
	if (e) {
		/* Recycled, never freed: a racing lookup must not read freed memory. */
		ptrmap__del(&objs, (uintptr_t)e);
		e->type = 0;
		e->next_free = free_events;
		free_events = e;
	}
	pthread_mutex_unlock(&lock);
	return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult gpu_event_record(CUevent event, CUstream stream)
{
	CUresult err = CUDA_SUCCESS;
	struct gpu_stream *s;
	struct gpu_event *e;

	pthread_mutex_lock(&lock);
	e = obj_get(event, OBJ_EVENT);
	s = e ? stream_of(stream, &err) : NULL;
	if (!e) {
		err = CUDA_ERROR_INVALID_HANDLE;
	} else if (s && s->capture) {
		e->capture_id = s->capture->capture_id; /* a node of the graph, not a time */
	} else if (s) {
		uint64_t now = standin_now_ns(), ready = ready_at(s);

		e->at = ready > now ? ready : now;
		e->recorded = true;
		e->dev = s->dev;
		e->capture_id = 0;
	}
	pthread_mutex_unlock(&lock);
	return err;
}

CUresult gpu_event_query(CUevent event)
{
	CUresult err = CUDA_SUCCESS;
	struct gpu_event *e;

	pthread_mutex_lock(&lock);
	e = obj_get(event, OBJ_EVENT);
	if (!e)
		err = CUDA_ERROR_INVALID_HANDLE;
	else if (e->recorded && e->at > standin_now_ns())
		err = CUDA_ERROR_NOT_READY;
	pthread_mutex_unlock(&lock);
	return err;
}

CUresult gpu_event_synchronize(CUevent event)
{
	uint64_t t0 = standin_now_ns(), until = 0;
	uint32_t ctx_id = 0, id = 0;
	struct gpu_event *e;
	CUresult err;
	int dev = -1;

	pthread_mutex_lock(&lock);
	e = obj_get(event, OBJ_EVENT);
	if (e && e->recorded) {
		until = e->at;
		dev = e->dev;
	}
	if (e) {
		id = e->id;
		ctx_id = e->ctx_id ? e->ctx_id : cur_ctx ? cur_ctx->id : 0;
	}
	pthread_mutex_unlock(&lock);
	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	err = wait_until(until);
	if (err)
		return err;
	if (dev >= 0) {
		pthread_mutex_lock(&lock);
		pool_settle(dev);
		pthread_mutex_unlock(&lock);
	}
	tell_sync(CUPTI_SYNC_EVENT, ctx_id, 0, id, t0);
	return CUDA_SUCCESS;
}

CUresult gpu_event_elapsed_time(float *ms, CUevent start, CUevent end)
{
	CUresult err = CUDA_SUCCESS;
	struct gpu_event *a, *b;
	uint64_t now = standin_now_ns();

	if (!ms)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	a = obj_get(start, OBJ_EVENT);
	b = obj_get(end, OBJ_EVENT);
	if (!a || !b || !a->recorded || !b->recorded ||
	    (a->flags | b->flags) & CU_EVENT_DISABLE_TIMING)
		err = CUDA_ERROR_INVALID_HANDLE;
	else if (a->at > now || b->at > now)
		err = CUDA_ERROR_NOT_READY;
	else
		*ms = (float)(((double)b->at - (double)a->at) / 1e6);
	pthread_mutex_unlock(&lock);
	return err;
}

/* Modules, libraries and kernels: any image loads, any name resolves. A module's kernels
 * are those looked up in it; the runtime looks up every kernel registered in a fat binary
 * as it loads it, as the real fat binary holds them all. */

static CUresult module_new(void **out, const void *image, bool library)
{
	struct gpu_module *m;

	if (!out || !image)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	m = obj_new(sizeof(*m), OBJ_MODULE, 0);
	if (m)
		m->library = library;
	pthread_mutex_unlock(&lock);
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*out = m;
	return CUDA_SUCCESS;
}

static CUresult module_unload(void *handle, bool library)
{
	struct gpu_module *m;

	pthread_mutex_lock(&lock);
	m = obj_get(handle, OBJ_MODULE);
	if (m && m->library == library) {
		/* Its kernels stop being valid handles; their names stay readable. */
		for (struct gpu_kernel *k = m->kernels; k; k = k->next) {
			ptrmap__del(&objs, (uintptr_t)k);
			for (struct gpu_function *fn = k->funcs; fn; fn = fn->next)
				ptrmap__del(&objs, (uintptr_t)fn);
		}
		ptrmap__del(&objs, (uintptr_t)m);
	} else {
		m = NULL;
	}
	pthread_mutex_unlock(&lock);
	return m ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

static CUresult kernel_lookup(void **out, void *handle, bool library, const char *name)
{
	struct gpu_kernel *k = NULL, **tail;
	struct gpu_module *m;
	CUresult err = CUDA_SUCCESS;

	if (!out || !name)
		return CUDA_ERROR_INVALID_VALUE;
	if (!*name)
		return CUDA_ERROR_NOT_FOUND;
	pthread_mutex_lock(&lock);
	m = obj_get(handle, OBJ_MODULE);
	if (!m || m->library != library) {
		err = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	for (tail = &m->kernels; *tail && strcmp((*tail)->name, name); tail = &(*tail)->next)
		;
	k = *tail;
	if (!k) {
		k = obj_new(sizeof(*k), OBJ_KERNEL, 0);
		if (k && !(k->name = strdup(name))) {
			ptrmap__del(&objs, (uintptr_t)k);
			free(k);
			k = NULL;
		}
		if (!k) {
			err = CUDA_ERROR_OUT_OF_MEMORY;
			goto out;
		}
		k->mod = m;
		*tail = k;
		m->nkernels++;
	}
	*out = k;
out:
	pthread_mutex_unlock(&lock);
	return err;
}

CUresult gpu_module_load_data(CUmodule *module, const void *image)
{
	return module_new((void **)module, image, false);
}

CUresult gpu_module_unload(CUmodule module)
{
	return module_unload(module, false);
}

CUresult gpu_module_get_function(CUfunction *f, CUmodule module, const char *name)
{
	return kernel_lookup((void **)f, module, false, name);
}

CUresult gpu_library_load_data(CUlibrary *library, const void *code, CUjit_option *jit_opts,
			       void **jit_vals, unsigned int njit, CUlibraryOption *lib_opts,
			       void **lib_vals, unsigned int nlib)
{
	return module_new((void **)library, code, true);
}

CUresult gpu_library_unload(CUlibrary library)
{
	return module_unload(library, true);
}

CUresult gpu_library_get_kernel(CUkernel *kernel, CUlibrary library, const char *name)
{
	return kernel_lookup((void **)kernel, library, true, name);
}

CUresult gpu_kernel_get_function(CUfunction *f, CUkernel kernel)
{
	struct gpu_function *fn;
	struct gpu_kernel *k;
	CUresult err = CUDA_SUCCESS;

	if (!f)
		return CUDA_ERROR_INVALID_VALUE;
	if (!cur_ctx)
		return CUDA_ERROR_INVALID_CONTEXT;
	pthread_mutex_lock(&lock);
	k = obj_get(kernel, OBJ_KERNEL);
	if (!k) {
		err = CUDA_ERROR_INVALID_HANDLE;
		goto out;
	}
	for (fn = k->funcs; fn && fn->ctx != cur_ctx; fn = fn->next)
		;
	if (!fn) {
		fn = obj_new(sizeof(*fn), OBJ_FUNCTION, 0);
		if (!fn) {
			err = CUDA_ERROR_OUT_OF_MEMORY;
			goto out;
		}
		fn->kernel = k;
		fn->ctx = cur_ctx;
		fn->next = k->funcs;
		k->funcs = fn;
	}
	*f = (CUfunction)fn;
out:
	pthread_mutex_unlock(&lock);
	return err;
}

/* The kernel a launchable handle stands for: a CUkernel (or a module's CUfunction, the
 * same object here) or a CUfunction from cuKernelGetFunction. Called with the lock. */
static struct gpu_kernel *kernel_of(const void *handle)
{
	struct gpu_function *fn = obj_get(handle, OBJ_FUNCTION);

	return fn ? fn->kernel : obj_get(handle, OBJ_KERNEL);
}

bool gpu_is_kernel(const void *handle)
{
	bool ok;

	pthread_mutex_lock(&lock);
	ok = kernel_of(handle) != NULL;
	pthread_mutex_unlock(&lock);
	return ok;
}

const char *gpu_kernel_name(const void *handle)
{
	struct gpu_kernel *k;

	pthread_mutex_lock(&lock);
	k = kernel_of(handle);
	pthread_mutex_unlock(&lock);
	return k ? k->name : NULL;
}

/* m's cubin as it is now, under a new id; NULL when out of memory. Lock held. */
static struct gpu_cubin *cubin_new(const struct gpu_module *m)
{
	size_t size = strlen(STANDIN_CUBIN_MAGIC), at;
	const struct gpu_kernel *k;
	struct gpu_cubin *c;

	for (k = m->kernels; k; k = k->next)
		size += strlen(k->name) + 1;
	c = malloc(sizeof(*c) + size + 1);
	if (!c)
		return NULL;
	c->id = ++module_ids;
	c->nkernels = m->nkernels;
	c->size = size;
	at = (size_t)sprintf(c->bytes, "%s", STANDIN_CUBIN_MAGIC);
	for (k = m->kernels; k; k = k->next)
		at += (size_t)sprintf(c->bytes + at, "%s\n", k->name);
	return c;
}

/*
 * Loads k's module for a launch, as CUDA_MODULE_LOADING=LAZY (CUDA's default) loads a
 * module at the first launch of one of its kernels: its cubin then names every kernel it
 * has. A kernel looked up in it after that is in no loaded cubin: the next launch of any of
 * its kernels loads it again, a new cubin under a new id, as a module unloaded and loaded
 * again (the real one knows all its functions from its image; the fake GPU knows only the
 * names looked up). Returns the cubin the launch runs from (NULL: out of memory, never
 * loaded); *t is the tracer to tell of a new one with module_tell() once the lock is
 * released, else NULL. Waits while another thread tells of the module. Lock held.
 */
static struct gpu_cubin *module_load(struct gpu_kernel *k, const struct standin_tracer **t)
{
	struct gpu_module *m = k->mod;
	struct gpu_cubin *c;

	*t = NULL;
	while (m->telling && !pthread_equal(m->teller, pthread_self()))
		pthread_cond_wait(&told, &lock);
	if (m->cubin && m->cubin->nkernels == m->nkernels)
		return m->cubin;
	c = cubin_new(m);
	if (!c)
		return m->cubin;
	m->cubin = c;
	*t = gpu_tracer();
	if (*t && !(*t)->module)
		*t = NULL;
	if (*t) {
		m->telling++;
		m->teller = pthread_self();
	}
	return c;
}

/* Tells t (from module_load; NULL: nothing to do) that m was loaded as c in ctx, without
 * the lock, then lets the module's other launches go on. */
static void module_tell(const struct standin_tracer *t, struct gpu_module *m,
			const struct gpu_cubin *c, CUcontext ctx)
{
	if (!t)
		return;
	t->module(ctx, c->id, c->bytes, c->size);
	pthread_mutex_lock(&lock);
	if (!--m->telling)
		pthread_cond_broadcast(&told);
	pthread_mutex_unlock(&lock);
}

/* Spends the configured CPU time of a launch call, as a real launch costs a few µs. */
static void launch_overhead(void)
{
	uint64_t end;

	if (!cfg.launch_ns)
		return;
	end = standin_now_ns() + cfg.launch_ns;
	while (standin_now_ns() < end)
		;
}

CUresult gpu_launch_kernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			   unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
			   CUstream stream, void **params, void **extra)
{
	CUresult err = CUDA_SUCCESS;
	struct gpu_stream *s;

	if (!gx || !gy || !gz || !bx || !by || !bz || bx > GPU_MAX_THREADS ||
	    by > GPU_MAX_THREADS || bz > 64 || (uint64_t)bx * by * bz > GPU_MAX_THREADS ||
	    gy > 65535 || gz > 65535 || gx > 0x7fffffffu)
		return CUDA_ERROR_INVALID_VALUE;
	const struct standin_tracer *t = gpu_tracer(), *load = NULL;
	struct standin_kernel_run run = {
		.grid = {gx, gy, gz}, .block = {bx, by, bz}, .shmem = shmem};
	struct gpu_cubin *cubin = NULL;
	struct gpu_kernel *k;

	launch_overhead();
	pthread_mutex_lock(&lock);
	k = kernel_of(f);
	if (!k) {
		err = CUDA_ERROR_INVALID_HANDLE;
	} else {
		s = stream_of(stream, &err);
		if (s)
			cubin = module_load(k, &load);
		if (s && t && !s->capture) {
			uint64_t now = standin_now_ns(), ready = ready_at(s);

			run.start_ns = ready > now ? ready : now;
			run.end_ns = sat_add(run.start_ns, cfg.kernel_ns);
			run.device = s->dev;
			run.ctx = (CUcontext)cur_ctx;
			run.ctx_id = cur_ctx ? cur_ctx->id : 0;
			run.stream_id = s->id;
			run.name = k->name;
			if (cubin) {
				run.module_id = cubin->id;
				run.cubin = cubin->bytes;
				run.cubin_size = cubin->size;
			}
		}
		if (s && s->capture)
			graph_add_kernels(
				s->capture,
				&(struct graph_kernel){k, {gx, gy, gz}, {bx, by, bz}, shmem, 0}, 1,
				true);
		if (s)
			enqueue(s, cfg.kernel_ns, 1);
	}
	pthread_mutex_unlock(&lock);
	module_tell(load, k ? k->mod : NULL, cubin, (CUcontext)cur_ctx);
	/* Only a kernel that will run: not a captured one, not one on a hung stream. */
	if (!err && t && run.name && run.start_ns != STANDIN_FOREVER)
		t->kernel(&run);
	return err;
}

CUresult gpu_launch_kernel_ex(const CUlaunchConfig *config, CUfunction f, void **params,
			      void **extra)
{
	if (!config)
		return CUDA_ERROR_INVALID_VALUE;
	return gpu_launch_kernel(f, config->gridDimX, config->gridDimY, config->gridDimZ,
				 config->blockDimX, config->blockDimY, config->blockDimZ,
				 config->sharedMemBytes, config->hStream, params, extra);
}

/* Graphs: a captured graph is the count and total run time of its kernels. */

CUresult gpu_graph_instantiate(CUgraphExec *exec, CUgraph graph, unsigned long long flags)
{
	struct gpu_graph *g, *x = NULL;

	if (!exec)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	g = obj_get(graph, OBJ_GRAPH);
	if (g) {
		x = obj_new(sizeof(*x), OBJ_EXEC, 0);
		if (x) {
			x->id = g->id;
			x->nodes = g->nodes;
			x->ns = g->ns;
			graph_add_kernels(x, g->k, g->nk, false);
		}
	}
	pthread_mutex_unlock(&lock);
	if (!g)
		return CUDA_ERROR_INVALID_VALUE;
	if (!x)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*exec = (CUgraphExec)x;
	return CUDA_SUCCESS;
}

/* A launch of a graph runs its kernel nodes one after the other on the
 * stream, each told to the tracer as a kernel run (inside the launch call:
 * CUPTI gives a graph's kernels the correlation id of the launch), then the
 * whole launch as a graph run. */
CUresult gpu_graph_launch(CUgraphExec exec, CUstream stream)
{
	const struct standin_tracer *t = gpu_tracer();
	struct standin_graph_run graph = {0};
	struct standin_kernel_run *runs = NULL;
	struct loaded {
		const struct standin_tracer *t; /* to tell of c: module_load's */
		struct gpu_kernel *k;
		struct gpu_cubin *c;
	} *loads = NULL;
	CUresult err = CUDA_SUCCESS;
	unsigned int nruns = 0, nloads = 0;
	struct gpu_stream *s;
	struct gpu_graph *x;

	pthread_mutex_lock(&lock);
	x = obj_get(exec, OBJ_EXEC);
	if (!x) {
		err = CUDA_ERROR_INVALID_VALUE;
	} else {
		s = stream_of(stream, &err);
		/* Its kernels' modules load as the graph first runs, each told once. */
		if (s && !s->capture && x->nk && (loads = calloc(x->nk, sizeof(*loads))))
			for (nloads = 0; nloads < x->nk; nloads++) {
				loads[nloads].k = x->k[nloads].kernel;
				loads[nloads].c = module_load(loads[nloads].k, &loads[nloads].t);
			}
		if (s && s->capture) {
			graph_add_kernels(s->capture, x->k, x->nk, true);
		} else if (s && t && ready_at(s) != STANDIN_FOREVER) {
			uint64_t now = standin_now_ns(), at = ready_at(s);

			at = at > now ? at : now;
			if (x->nodes && t->graph)
				graph = (struct standin_graph_run){
					.device = s->dev,
					.ctx = (CUcontext)cur_ctx,
					.ctx_id = cur_ctx ? cur_ctx->id : 0,
					.stream_id = s->id,
					.graph_id = x->id,
					.nodes = x->nodes,
					.start_ns = at,
					.end_ns = sat_add(at, x->ns),
				};
			runs = x->nk ? calloc(x->nk, sizeof(*runs)) : NULL;
			for (nruns = 0; runs && nruns < x->nk; nruns++) {
				struct standin_kernel_run *r = &runs[nruns];
				const struct graph_kernel *k = &x->k[nruns];

				r->device = s->dev;
				r->ctx = (CUcontext)cur_ctx;
				r->ctx_id = cur_ctx ? cur_ctx->id : 0;
				r->stream_id = s->id;
				r->name = k->kernel->name;
				if (loads && loads[nruns].c) {
					r->module_id = loads[nruns].c->id;
					r->cubin = loads[nruns].c->bytes;
					r->cubin_size = loads[nruns].c->size;
				}
				memcpy(r->grid, k->grid, sizeof(r->grid));
				memcpy(r->block, k->block, sizeof(r->block));
				r->shmem = k->shmem;
				r->start_ns = at;
				r->end_ns = at = sat_add(at, cfg.kernel_ns);
				r->graph_id = x->id;
				r->graph_node_id = k->node_id;
			}
		}
		if (s)
			enqueue(s, x->ns, x->nodes);
	}
	pthread_mutex_unlock(&lock);
	for (unsigned int i = 0; i < nloads; i++)
		module_tell(loads[i].t, loads[i].k->mod, loads[i].c, (CUcontext)cur_ctx);
	for (unsigned int i = 0; i < nruns; i++)
		t->kernel(&runs[i]);
	if (graph.nodes)
		t->graph(&graph);
	free(loads);
	free(runs);
	return err;
}

static CUresult graph_free(void *handle, uint32_t type)
{
	struct gpu_node *n, *next;
	struct gpu_graph *g;

	pthread_mutex_lock(&lock);
	g = obj_get(handle, type);
	if (g) {
		ptrmap__del(&objs, (uintptr_t)g);
		for (n = g->added; n; n = next) {
			next = n->next;
			ptrmap__del(&objs, (uintptr_t)n);
			free(n);
		}
	}
	pthread_mutex_unlock(&lock);
	if (!g)
		return CUDA_ERROR_INVALID_VALUE;
	free(g->k);
	free(g);
	return CUDA_SUCCESS;
}

CUresult gpu_graph_create(CUgraph *graph, unsigned int flags)
{
	struct gpu_graph *g;

	if (!graph || flags)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	g = obj_new(sizeof(*g), OBJ_GRAPH, 0);
	if (g)
		g->id = ++graph_ids;
	pthread_mutex_unlock(&lock);
	if (!g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*graph = (CUgraph)g;
	return CUDA_SUCCESS;
}

/* A node after deps, each a node of the graph. Called with the lock. */
static bool deps_ok(const struct gpu_graph *g, const CUgraphNode *deps, size_t ndeps)
{
	if (ndeps && !deps)
		return false;
	for (size_t i = 0; i < ndeps; i++) {
		const struct gpu_node *n = g->added;

		while (n && n != (const struct gpu_node *)deps[i])
			n = n->next;
		if (!n)
			return false;
	}
	return true;
}

CUresult gpu_graph_add_kernel(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
			      size_t ndeps, const void *kernel, const unsigned int grid[3],
			      const unsigned int block[3])
{
	CUresult err = CUDA_SUCCESS;
	struct gpu_kernel *k = NULL;
	struct gpu_graph *g;
	struct gpu_node *n = NULL;

	if (!node || !grid[0] || !grid[1] || !grid[2] || !block[0] || !block[1] || !block[2] ||
	    (uint64_t)block[0] * block[1] * block[2] > GPU_MAX_THREADS)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	g = obj_get(graph, OBJ_GRAPH);
	if (!g || !deps_ok(g, deps, ndeps))
		err = CUDA_ERROR_INVALID_VALUE;
	else if (!(k = kernel_of(kernel)))
		err = CUDA_ERROR_INVALID_HANDLE;
	else if (!(n = obj_new(sizeof(*n), OBJ_NODE, 0)))
		err = CUDA_ERROR_OUT_OF_MEMORY;
	if (n) {
		n->next = g->added;
		g->added = n;
		n->id = ++node_ids;
		g->nodes++;
		g->ns = sat_add(g->ns, cfg.kernel_ns);
		graph_add_kernels(g,
				  &(struct graph_kernel){k,
							 {grid[0], grid[1], grid[2]},
							 {block[0], block[1], block[2]},
							 0,
							 n->id},
				  1, false);
		*node = (CUgraphNode)n;
	}
	pthread_mutex_unlock(&lock);
	return err;
}

CUresult gpu_graph_add_kernel_node(CUgraphNode *node, CUgraph graph, const CUgraphNode *deps,
				   size_t ndeps, const CUDA_KERNEL_NODE_PARAMS *p)
{
	if (!p)
		return CUDA_ERROR_INVALID_VALUE;
	return gpu_graph_add_kernel(
		node, graph, deps, ndeps, p->func ? (void *)p->func : (void *)p->kern,
		(const unsigned int[3]){p->gridDimX, p->gridDimY, p->gridDimZ},
		(const unsigned int[3]){p->blockDimX, p->blockDimY, p->blockDimZ});
}

CUresult gpu_graph_destroy(CUgraph graph)
{
	return graph_free(graph, OBJ_GRAPH);
}

CUresult gpu_graph_exec_destroy(CUgraphExec exec)
{
	return graph_free(exec, OBJ_EXEC);
}

CUresult gpu_graph_get_id(CUgraph graph, uint32_t *id)
{
	struct gpu_graph *g;

	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	g = obj_get(graph, OBJ_GRAPH);
	if (g)
		*id = g->id;
	pthread_mutex_unlock(&lock);
	return g ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult gpu_graph_node_get_id(CUgraphNode node, uint64_t *id)
{
	struct gpu_node *n;

	if (!id)
		return CUDA_ERROR_INVALID_VALUE;
	pthread_mutex_lock(&lock);
	n = obj_get(node, OBJ_NODE);
	if (n)
		*id = n->id;
	pthread_mutex_unlock(&lock);
	return n ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static const struct standin_gpu table = {
	.size = sizeof(struct standin_gpu),
	.init = gpu_init,
	.driver_get_version = gpu_driver_get_version,
	.device_get_count = gpu_device_get_count,
	.device_get_name = gpu_device_get_name,
	.device_total_mem = gpu_device_total_mem,
	.device_get_attribute = gpu_device_get_attribute,
	.device_primary_ctx_retain = gpu_primary_ctx_retain,
	.ctx_set_current = gpu_ctx_set_current,
	.ctx_get_device = gpu_ctx_get_device,
	.ctx_synchronize = gpu_ctx_synchronize,
	.mem_alloc = gpu_mem_alloc,
	.mem_alloc_managed = gpu_mem_alloc_managed,
	.mem_alloc_async = gpu_mem_alloc_async,
	.mem_free = gpu_mem_free,
	.mem_free_async = gpu_mem_free_async,
	.mem_get_info = gpu_mem_get_info,
	.copy = gpu_copy,
	.copy_async = gpu_copy_async,
	.memset_d8 = gpu_memset_d8,
	.memset_d8_async = gpu_memset_d8_async,
	.stream_create = gpu_stream_create,
	.stream_destroy = gpu_stream_destroy,
	.stream_query = gpu_stream_query,
	.stream_synchronize = gpu_stream_synchronize,
	.stream_wait_event = gpu_stream_wait_event,
	.stream_begin_capture = gpu_stream_begin_capture,
	.stream_end_capture = gpu_stream_end_capture,
	.stream_is_capturing = gpu_stream_is_capturing,
	.event_create = gpu_event_create,
	.event_destroy = gpu_event_destroy,
	.event_record = gpu_event_record,
	.event_query = gpu_event_query,
	.event_synchronize = gpu_event_synchronize,
	.event_elapsed_time = gpu_event_elapsed_time,
	.library_load_data = gpu_library_load_data,
	.library_get_kernel = gpu_library_get_kernel,
	.launch_kernel = gpu_launch_kernel,
	.launch_kernel_ex = gpu_launch_kernel_ex,
	.graph_instantiate = gpu_graph_instantiate,
	.graph_launch = gpu_graph_launch,
	.graph_destroy = gpu_graph_destroy,
	.graph_exec_destroy = gpu_graph_exec_destroy,
	.graph_create = gpu_graph_create,
	.graph_add_kernel_node = gpu_graph_add_kernel_node,
	.ensure_context = gpu_ensure_context,
	.is_kernel = gpu_is_kernel,
	.kernel_name = gpu_kernel_name,
	.stream_delay = gpu_stream_delay,
	.stream_device = gpu_stream_device,
	.set_tracer = gpu_set_tracer,
	.tracer = gpu_tracer,
	.ctx_get_id = gpu_ctx_get_id,
	.ctx_get_current = gpu_ctx_get_current,
	.device_get_default_mem_pool = gpu_device_get_default_mem_pool,
	.mem_pool_set_attribute = gpu_mem_pool_set_attribute,
	.mem_pool_get_attribute = gpu_mem_pool_get_attribute,
	.mem_pool_trim_to = gpu_mem_pool_trim_to,
	.stream_drain = gpu_stream_drain,
	.graph_get_id = gpu_graph_get_id,
	.graph_node_get_id = gpu_graph_node_get_id,
};

const struct standin_gpu *gpu_export_table(const CUuuid *id)
{
	if (!id || memcmp(id->bytes, STANDIN_TABLE_ID, sizeof(id->bytes)))
		return NULL;
	pthread_once(&setup_once, setup);
	return &table;
}
