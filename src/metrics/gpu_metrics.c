/* gpu_metrics.c: the agent's live GPU and NCCL state (gpu_metrics.h) --
 * per-process memory, launches, waits, copies and dataloader waits in a hash
 * by pid, NCCL per op, device capacities, stuck collectives and the agent's
 * health -- and the three ways it is read: the Prometheus text exposition,
 * the JSON snapshot, and the series walk of the alert engine.
 *
 * The exposition and the series walk are one function, emit(), driven by two
 * emitters, so that /metrics and what the alert engine sees never disagree.
 * emit() lists the families in their order; a family writer serves each
 * kind of series (per process, per process and device, per NCCL operation),
 * reading tables that name the families.
 * One mutex guards everything; events take it for a hash lookup and a few
 * additions. Processes are capped at GPU_METRICS_MAX_PIDS: events of further
 * processes are counted in sonde_agent_untracked_events_total, not stored.
 * Beside the probes' account of each process's memory (its allocations) the
 * driver's (NVML's, set whole each poll) is kept apart: a process may be in
 * either alone. */
#include "metrics/gpu_metrics.h"
#include "common/text.h"
#include "common/htable.h"
#include "common/clock.h"

#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <uthash.h>

#include "common/prom.h"
#include "common/xalloc.h"
#include "metrics/histogram.h"

#define GPU_METRICS_MAX_PIDS 4096
/* Distinct wait APIs kept per process; further names are counted as "other". */
#define WAITS_MAX 16
#define API_MAX 64
#define SOURCE_MAX 16
#define NODE_MAX 256
#define NAME_MAX_LEN 16 /* a process's name, as the kernel keeps it (TASK_COMM_LEN) */

/* Bounds of every sonde_*_seconds histogram, in nanoseconds: 1 us to 5 min,
 * covering a launch call (microseconds) to a hung collective (minutes). */
static const uint64_t seconds_bounds[] = {
	1000,	     2500,	  5000,	       10000,	     25000,	   50000,      100000,
	250000,	     500000,	  1000000,     2500000,	     5000000,	   10000000,   25000000,
	50000000,    100000000,	  250000000,   500000000,    1000000000,   2500000000, 5000000000,
	10000000000, 30000000000, 60000000000, 120000000000, 300000000000,
};

static const char *const copy_kind_names[] = {
	[GPU_COPY_H2H] = "h2h", [GPU_COPY_H2D] = "h2d",		[GPU_COPY_D2H] = "d2h",
	[GPU_COPY_D2D] = "d2d", [GPU_COPY_DEFAULT] = "default",
};
#define COPY_KINDS (GPU_COPY_DEFAULT + 1)

static const char *const nccl_op_names[] = {
	[NCCL_OP_ALLREDUCE] = "allreduce",
	[NCCL_OP_ALLGATHER] = "allgather",
	[NCCL_OP_REDUCESCATTER] = "reducescatter",
	[NCCL_OP_BROADCAST] = "broadcast",
	[NCCL_OP_REDUCE] = "reduce",
	[NCCL_OP_SEND] = "send",
	[NCCL_OP_RECV] = "recv",
};

/* Capacity sources, most trusted first: a learned capacity only replaces one
 * from a source at least as trusted. */
static const char *const capacity_sources[] = {"nvml", "app", "config", "simulated"};

struct mem_entry {
	int device; /* first: device_entry() */
	uint64_t cur, peak, allocs, frees;
};

/* A memory pool of a process's, as CUPTI's records tell of it: what it
 * holds of the device (its size), and what the process's allocations from
 * it use. */
struct pool_entry {
	uint64_t address;
	int device;
	uint64_t size, used;
};

/* Pools kept per process; the allocations of more are counted as plain
 * allocations. */
#define MAX_POOLS 64

struct wait_entry {
	char api[API_MAX];
	struct hist h;
};

struct copy_entry {
	uint64_t bytes, calls;
};

/* A process's kernels on one device, from their intervals on the GPU
 * (Sonde's CUPTI library). */
struct busy_entry {
	int device; /* first: device_entry() */
	uint64_t kernels;
	uint64_t busy_ns; /* the union of their intervals: overlap counted once */
	uint64_t end;	  /* the latest end seen, GPU clock */
	uint64_t mark_ns; /* busy_ns at the last window's end */
	double ratio;	  /* busy_ns over the last window, once windowed */
	bool windowed;
};

struct proc {
	uint32_t pid;
	char name[NAME_MAX_LEN]; /* its main thread's, "" while unknown */
	bool name_read;		 /* /proc/PID/comm was read (or tried) */
	struct hist launch;	 /* latency of the launch call, ns; count = launches */
	struct mem_entry *mem;	 /* sorted by device */
	size_t nmem, capmem;
	struct mem_entry *cmem; /* ... as CUPTI's memory records say (Sonde's library):
				 * its allocations outside pools, and its pools' sizes */
	size_t ncmem, capcmem;
	struct pool_entry *pools;
	size_t npools, cappools;
	struct wait_entry *waits; /* sorted by api */
	size_t nwaits, capwaits;
	struct copy_entry copies[COPY_KINDS];
	struct busy_entry *busy; /* sorted by device */
	size_t nbusy, capbusy;
	struct hist dataloader;
	/* Where its threads spent time (gpu_metrics__proc_window). */
	bool judged;
	uint64_t time_ns[PS_NR]; /* every thread's, since it was followed */
	uint64_t window_ns;	 /* the last window's length */
	uint32_t lead_tid;	 /* its leading thread then, 0: none */
	enum verdict verdict;	 /* judged on that thread */
	double share[PS_NR];	 /* that thread's time / the window */
	uint64_t exited_ms;	 /* wall ms of its exit; 0 while it runs */
	char *service, *labels;	 /* gpu_metrics__set_info's; NULL: not told */
	UT_hash_handle hh;
};

struct nccl_entry {
	uint64_t calls, bytes;
	struct hist dur;
};

struct device_cap {
	int device;
	uint64_t bytes;
	char source[SOURCE_MAX];
};

struct stuck_entry {
	uint32_t pid;
	enum nccl_op op;
	int rank, nranks;
	uint64_t comm;
	double seconds;
};

/* A thread waiting long for its next batch from a DataLoader, or in a
 * CUDA synchronisation (api set). */
struct wait_stuck_entry {
	uint32_t pid, tid;
	int line;
	double seconds;
	char file[256], function[128];
	char api[API_MAX]; /* "": a DataLoader wait */
};

struct gpu_metrics {
	pthread_mutex_t lock;
	bool simulated;
	char node[NODE_MAX];
	struct proc *procs;
	size_t nprocs;
	bool procs_sorted;
	struct hist launch_all, dataloader_all;
	struct nccl_entry nccl[NCCL_OP_MAX];
	struct device_cap *caps; /* sorted by device */
	size_t ncaps, capcaps;
	struct stuck_entry *stuck;
	size_t nstuck, capstuck;
	struct wait_stuck_entry *waits_stuck;
	size_t nwaits_stuck, capwaits_stuck;
	struct gpu_proc_mem *drv; /* the driver's account, sorted by pid and device */
	size_t ndrv, capdrv;
	uint64_t drv_used[GPU_METRICS_MAX_DEVICES]; /* per device, as NVML says */
	bool has_drv_used[GPU_METRICS_MAX_DEVICES];
	struct agent_health health;
	uint64_t untracked_events;
	uint64_t start_ms, last_update_ms;
};

const char *nccl_op_name(enum nccl_op op)
{
	return (unsigned)op < NCCL_OP_MAX ? nccl_op_names[op] : "unknown";
}

struct gpu_metrics *gpu_metrics__new(const struct gpu_metrics_opts *opts)
{
	struct gpu_metrics *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	pthread_mutex_init(&m->lock, NULL);
	m->simulated = opts && opts->simulated;
	if (opts && opts->node)
		snprintf(m->node, sizeof(m->node), "%s", opts->node);
	else if (gethostname(m->node, sizeof(m->node) - 1))
		snprintf(m->node, sizeof(m->node), "unknown");
	hist__init(&m->launch_all, NULL, 0);
	hist__init(&m->dataloader_all, NULL, 0);
	for (int i = 0; i < NCCL_OP_MAX; i++)
		hist__init(&m->nccl[i].dur, seconds_bounds, ARRAY_SIZE(seconds_bounds));
	m->start_ms = m->last_update_ms = wall_ms();
	return m;
}

static void proc_free(struct proc *p)
{
	hist__fini(&p->launch);
	hist__fini(&p->dataloader);
	for (size_t i = 0; i < p->nwaits; i++)
		hist__fini(&p->waits[i].h);
	free(p->waits);
	free(p->mem);
	free(p->cmem);
	free(p->pools);
	free(p->busy);
	free(p->service);
	free(p->labels);
	free(p);
}

void gpu_metrics__free(struct gpu_metrics *m)
{
	if (!m)
		return;
	HTABLE_CLEAR(hh, m->procs, p, proc_free(p));
	hist__fini(&m->launch_all);
	hist__fini(&m->dataloader_all);
	for (int i = 0; i < NCCL_OP_MAX; i++)
		hist__fini(&m->nccl[i].dur);
	free(m->caps);
	free(m->drv);
	free(m->stuck);
	free(m->waits_stuck);
	pthread_mutex_destroy(&m->lock);
	free(m);
}

/* ---- events (called with m->lock held) ---- */

/* The process entry of pid, created on first use; NULL past the cap. */
/* Drops p from m. */
static void proc_del(struct gpu_metrics *m, struct proc *p)
{
	HASH_DEL(m->procs, p);
	m->nprocs--;
	proc_free(p);
}

static struct proc *proc_get(struct gpu_metrics *m, uint32_t pid)
{
	struct proc *p;

	m->last_update_ms = wall_ms();
	HASH_FIND(hh, m->procs, &pid, sizeof(pid), p);
	if (p && !p->exited_ms)
		return p;
	/* An exited one's pid, reused: a new process, its counters from 0. */
	if (p)
		proc_del(m, p);
	if (m->nprocs >= GPU_METRICS_MAX_PIDS) {
		m->untracked_events++;
		return NULL;
	}
	p = xcalloc(1, sizeof(*p));
	p->pid = pid;
	hist__init(&p->launch, seconds_bounds, ARRAY_SIZE(seconds_bounds));
	hist__init(&p->dataloader, seconds_bounds, ARRAY_SIZE(seconds_bounds));
	HASH_ADD(hh, m->procs, pid, sizeof(pid), p);
	m->nprocs++;
	m->procs_sorted = false;
	return p;
}

/* The entry of device in *v, an array of *n entries of size bytes sorted
 * by device, whose first field is the device (struct mem_entry, struct
 * busy_entry); made, zeroed, where it is missing. */
static void *device_entry(void **v, size_t *n, size_t *cap, size_t size, int device)
{
	size_t i = 0;
	char *at;

	while (i < *n && *(const int *)((const char *)*v + i * size) < device)
		i++;
	if (i < *n && *(const int *)((const char *)*v + i * size) == device)
		return (char *)*v + i * size;
	xgrow(v, cap, *n + 1, size);
	at = (char *)*v + i * size;
	memmove(at + size, at, (*n - i) * size);
	(*n)++;
	memset(at, 0, size);
	*(int *)at = device;
	return at;
}

_Static_assert(offsetof(struct mem_entry, device) == 0 && offsetof(struct busy_entry, device) == 0,
	       "device_entry() reads the device first");

static struct mem_entry *mem_get(struct proc *p, int device)
{
	return device_entry((void **)&p->mem, &p->nmem, &p->capmem, sizeof(*p->mem), device);
}

/* e's bytes grown (or shrunk) by delta; never below 0: a release of what
 * was allocated before the library came. */
static void mem_add(struct mem_entry *e, int64_t delta)
{
	if (delta >= 0)
		e->cur += (uint64_t)delta;
	else
		e->cur = (uint64_t)-delta < e->cur ? e->cur - (uint64_t)-delta : 0;
	if (e->cur > e->peak)
		e->peak = e->cur;
}

/* p's pool at address on device (e its account there), made when new
 * (NULL: MAX_POOLS are kept). */
static struct pool_entry *pool_get(struct proc *p, int device, uint64_t address)
{
	for (size_t i = 0; i < p->npools; i++)
		if (p->pools[i].address == address && p->pools[i].device == device)
			return &p->pools[i];
	if (p->npools >= MAX_POOLS)
		return NULL;
	xgrow((void **)&p->pools, &p->cappools, p->npools + 1, sizeof(*p->pools));
	p->pools[p->npools] = (struct pool_entry){.address = address, .device = device};
	return &p->pools[p->npools++];
}

/* Pool q now holds size bytes of the device: e's account follows. */
static void pool_resize(struct mem_entry *e, struct pool_entry *q, uint64_t size)
{
	mem_add(e, (int64_t)size - (int64_t)q->size);
	q->size = size;
}

void gpu_metrics__cupti_memory(struct gpu_metrics *m, uint32_t pid, int device,
			       const struct gpu_cupti_mem *r)
{
	struct pool_entry *q = NULL;
	struct mem_entry *e;
	struct proc *p;

	pthread_mutex_lock(&m->lock);
	p = proc_get(m, pid);
	if (!p) {
		pthread_mutex_unlock(&m->lock);
		return;
	}
	e = device_entry((void **)&p->cmem, &p->ncmem, &p->capcmem, sizeof(*e), device);
	if (r->from == GPU_MEM_IMPORTED_POOL) {
		/* Memory of the process that exported the pool. */
	} else if (r->from == GPU_MEM_POOL && (q = pool_get(p, device, r->pool))) {
		/* The pool holds what it holds, whatever its allocations use. */
		q->used = r->alloc	       ? q->used + r->bytes
			  : r->bytes < q->used ? q->used - r->bytes
					       : 0;
		pool_resize(e, q, r->pool_size);
	} else {
		mem_add(e, r->alloc ? (int64_t)r->bytes : -(int64_t)r->bytes);
	}
	if (r->alloc)
		e->allocs++;
	else
		e->frees++;
	pthread_mutex_unlock(&m->lock);
}

void gpu_metrics__cupti_pool(struct gpu_metrics *m, uint32_t pid, int device, uint64_t pool,
			     uint64_t size, bool destroyed)
{
	struct pool_entry *q;
	struct mem_entry *e;
	struct proc *p;

	pthread_mutex_lock(&m->lock);
	p = proc_get(m, pid);
	if (p && (q = pool_get(p, device, pool))) {
		e = device_entry((void **)&p->cmem, &p->ncmem, &p->capcmem, sizeof(*e), device);
		pool_resize(e, q, destroyed ? 0 : size);
		if (destroyed)
			*q = p->pools[--p->npools];
	}
	pthread_mutex_unlock(&m->lock);
}

static struct busy_entry *busy_get(struct proc *p, int device)
{
	return device_entry((void **)&p->busy, &p->nbusy, &p->capbusy, sizeof(*p->busy), device);
}

void gpu_metrics__kernel(struct gpu_metrics *m, uint32_t pid, int device, uint64_t start,
			 uint64_t end)
{
	struct busy_entry *b;
	struct proc *p;

	pthread_mutex_lock(&m->lock);
	p = proc_get(m, pid);
	if (p) {
		b = busy_get(p, device);
		b->kernels++;
		/* Records come about in order of their end: the part of this
		 * one past the latest end is time no kernel seen ran. */
		if (start < b->end)
			start = b->end;
		if (end > start)
			b->busy_ns += end - start;
		if (end > b->end)
			b->end = end;
	}
	pthread_mutex_unlock(&m->lock);
}

static struct wait_entry *wait_get(struct proc *p, const char *api)
{
	char name[API_MAX];
	size_t i = 0;
	int cmp = 1;

	snprintf(name, sizeof(name), "%s", api && *api ? api : "unknown");
	for (i = 0; i < p->nwaits; i++) {
		cmp = strcmp(p->waits[i].api, name);
		if (cmp >= 0)
			break;
	}
	if (i < p->nwaits && cmp == 0)
		return &p->waits[i];
	if (p->nwaits >= WAITS_MAX - 1 && strcmp(name, "other"))
		return wait_get(p, "other");
	xgrow((void **)&p->waits, &p->capwaits, p->nwaits + 1, sizeof(*p->waits));
	memmove(&p->waits[i + 1], &p->waits[i], (p->nwaits - i) * sizeof(*p->waits));
	p->nwaits++;
	memcpy(p->waits[i].api, name, sizeof(name));
	hist__init(&p->waits[i].h, seconds_bounds, ARRAY_SIZE(seconds_bounds));
	return &p->waits[i];
}

void gpu_metrics__launch(struct gpu_metrics *m, uint32_t pid, uint64_t latency_ns)
{
	struct proc *p;

	pthread_mutex_lock(&m->lock);
	p = proc_get(m, pid);
	if (p) {
		hist__add(&p->launch, latency_ns);
		hist__add(&m->launch_all, latency_ns);
	}
	pthread_mutex_unlock(&m->lock);
}

void gpu_metrics__alloc(struct gpu_metrics *m, uint32_t pid, int device, uint64_t bytes)
{
	struct proc *p;

	pthread_mutex_lock(&m->lock);
	p = proc_get(m, pid);
	if (p) {
		struct mem_entry *e = mem_get(p, device);

		e->cur += bytes;
		e->allocs++;
		if (e->cur > e->peak)
			e->peak = e->cur;
	}
	pthread_mutex_unlock(&m->lock);
}

void gpu_metrics__release(struct gpu_metrics *m, uint32_t pid, int device, uint64_t bytes)
{
	struct proc *p;

	pthread_mutex_lock(&m->lock);
	p = proc_get(m, pid);
	if (p) {
		struct mem_entry *e = mem_get(p, device);

		/* A free of memory allocated before the agent started can
		 * exceed what we saw allocated: stop at zero. */
		e->cur = bytes > e->cur ? 0 : e->cur - bytes;
		e->frees++;
	}
	pthread_mutex_unlock(&m->lock);
}

void gpu_metrics__wait(struct gpu_metrics *m, uint32_t pid, const char *api, uint64_t ns)
{
	struct proc *p;

	pthread_mutex_lock(&m->lock);
	p = proc_get(m, pid);
	if (p)
		hist__add(&wait_get(p, api)->h, ns);
	pthread_mutex_unlock(&m->lock);
}

void gpu_metrics__copy(struct gpu_metrics *m, uint32_t pid, enum gpu_copy_kind kind, uint64_t bytes)
{
	struct proc *p;

	if ((unsigned)kind >= COPY_KINDS)
		kind = GPU_COPY_DEFAULT;
	pthread_mutex_lock(&m->lock);
	p = proc_get(m, pid);
	if (p) {
		p->copies[kind].bytes += bytes;
		p->copies[kind].calls++;
	}
	pthread_mutex_unlock(&m->lock);
}

void gpu_metrics__nccl(struct gpu_metrics *m, uint32_t pid, enum nccl_op op, uint64_t bytes,
		       uint64_t ns)
{
	if ((unsigned)op >= NCCL_OP_MAX)
		return;
	pthread_mutex_lock(&m->lock);
	m->last_update_ms = wall_ms();
	m->nccl[op].calls++;
	m->nccl[op].bytes += bytes;
	hist__add(&m->nccl[op].dur, ns);
	pthread_mutex_unlock(&m->lock);
}

void gpu_metrics__dataloader_wait(struct gpu_metrics *m, uint32_t pid, uint64_t ns)
{
	struct proc *p;

	pthread_mutex_lock(&m->lock);
	p = proc_get(m, pid);
	if (p) {
		hist__add(&p->dataloader, ns);
		hist__add(&m->dataloader_all, ns);
	}
	pthread_mutex_unlock(&m->lock);
}

static int source_rank(const char *source)
{
	for (size_t i = 0; i < ARRAY_SIZE(capacity_sources); i++)
		if (!strcmp(source, capacity_sources[i]))
			return (int)i;
	return (int)ARRAY_SIZE(capacity_sources);
}

void gpu_metrics__device_capacity(struct gpu_metrics *m, int device, uint64_t bytes,
				  const char *source)
{
	size_t i;

	if (!source || !*source)
		source = "config";
	pthread_mutex_lock(&m->lock);
	m->last_update_ms = wall_ms();
	for (i = 0; i < m->ncaps && m->caps[i].device < device; i++)
		;
	if (i < m->ncaps && m->caps[i].device == device) {
		if (source_rank(source) > source_rank(m->caps[i].source))
			goto out;
	} else {
		xgrow((void **)&m->caps, &m->capcaps, m->ncaps + 1, sizeof(*m->caps));
		memmove(&m->caps[i + 1], &m->caps[i], (m->ncaps - i) * sizeof(*m->caps));
		m->ncaps++;
		m->caps[i].device = device;
	}
	m->caps[i].bytes = bytes;
	snprintf(m->caps[i].source, sizeof(m->caps[i].source), "%s", source);
out:
	pthread_mutex_unlock(&m->lock);
}

int gpu_proc_mem__cmp(const void *a, const void *b)
{
	const struct gpu_proc_mem *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->device < y->device ? -1 : x->device > y->device;
}

void gpu_metrics__set_driver_memory(struct gpu_metrics *m, const struct gpu_proc_mem *rows,
				    size_t n)
{
	pthread_mutex_lock(&m->lock);
	m->last_update_ms = wall_ms();
	if (n > GPU_METRICS_MAX_DRIVER_ROWS) {
		m->untracked_events += n - GPU_METRICS_MAX_DRIVER_ROWS;
		n = GPU_METRICS_MAX_DRIVER_ROWS;
	}
	xgrow((void **)&m->drv, &m->capdrv, n, sizeof(*m->drv));
	if (n)
		memcpy(m->drv, rows, n * sizeof(*rows));
	m->ndrv = n;
	if (n)
		qsort(m->drv, n, sizeof(*m->drv), gpu_proc_mem__cmp);
	pthread_mutex_unlock(&m->lock);
}

void gpu_metrics__device_driver_used(struct gpu_metrics *m, int device, uint64_t bytes)
{
	if (device < 0 || device >= GPU_METRICS_MAX_DEVICES)
		return;
	pthread_mutex_lock(&m->lock);
	m->drv_used[device] = bytes;
	m->has_drv_used[device] = true;
	pthread_mutex_unlock(&m->lock);
}

void gpu_metrics__process_exit(struct gpu_metrics *m, uint32_t pid)
{
	struct proc *p;
	size_t j = 0;

	pthread_mutex_lock(&m->lock);
	m->last_update_ms = wall_ms();
	HASH_FIND(hh, m->procs, &pid, sizeof(pid), p);
	/* Kept for the grace (gpu_metrics__expire), so that a scrape after a
	 * short job's end still finds its counters; what it held is freed. */
	if (p && !p->exited_ms) {
		p->exited_ms = m->last_update_ms ? m->last_update_ms : 1;
		for (size_t i = 0; i < p->nmem; i++)
			p->mem[i].cur = 0;
		for (size_t i = 0; i < p->ncmem; i++)
			p->cmem[i].cur = 0;
		for (size_t i = 0; i < p->npools; i++)
			p->pools[i].size = p->pools[i].used = 0;
	}
	for (size_t i = 0; i < m->nstuck; i++)
		if (m->stuck[i].pid != pid)
			m->stuck[j++] = m->stuck[i];
	m->nstuck = j;
	j = 0;
	/* The driver freed it too; its next account will say so. */
	for (size_t i = 0; i < m->ndrv; i++)
		if (m->drv[i].pid != pid)
			m->drv[j++] = m->drv[i];
	m->ndrv = j;
	j = 0;
	for (size_t i = 0; i < m->nwaits_stuck; i++)
		if (m->waits_stuck[i].pid != pid)
			m->waits_stuck[j++] = m->waits_stuck[i];
	m->nwaits_stuck = j;
	pthread_mutex_unlock(&m->lock);
}

void gpu_metrics__expire(struct gpu_metrics *m, uint64_t grace_ms)
{
	uint64_t now = wall_ms();
	struct proc *p, *tmp;

	pthread_mutex_lock(&m->lock);
	HASH_ITER(hh, m->procs, p, tmp)
	{
		if (p->exited_ms && now - p->exited_ms >= grace_ms)
			proc_del(m, p);
	}
	pthread_mutex_unlock(&m->lock);
}

void gpu_metrics__set_stuck(struct gpu_metrics *m, uint32_t pid, enum nccl_op op, int rank,
			    int nranks, uint64_t comm, double seconds)
{
	size_t i;

	pthread_mutex_lock(&m->lock);
	m->last_update_ms = wall_ms();
	for (i = 0; i < m->nstuck; i++) {
		struct stuck_entry *s = &m->stuck[i];

		if (s->pid == pid && s->op == op && s->rank == rank && s->comm == comm)
			break;
	}
	if (!(seconds > 0)) {
		if (i < m->nstuck)
			m->stuck[i] = m->stuck[--m->nstuck];
		goto out;
	}
	if (i == m->nstuck) {
		/* One entry per blocked thread at most; a runaway caller is
		 * bounded by the process cap. */
		if (m->nstuck >= GPU_METRICS_MAX_PIDS) {
			m->untracked_events++;
			goto out;
		}
		xgrow((void **)&m->stuck, &m->capstuck, m->nstuck + 1, sizeof(*m->stuck));
		m->nstuck++;
	}
	m->stuck[i] = (struct stuck_entry){.pid = pid,
					   .op = op,
					   .rank = rank,
					   .nranks = nranks,
					   .comm = comm,
					   .seconds = seconds};
out:
	pthread_mutex_unlock(&m->lock);
}

static void set_wait_stuck(struct gpu_metrics *m, uint32_t pid, uint32_t tid, const char *api,
			   const char *file, int line, const char *function, double seconds)
{
	struct wait_stuck_entry *s;
	size_t i;

	pthread_mutex_lock(&m->lock);
	for (i = 0; i < m->nwaits_stuck; i++)
		if (m->waits_stuck[i].pid == pid && m->waits_stuck[i].tid == tid &&
		    !strcmp(m->waits_stuck[i].api, api))
			break;
	if (!(seconds > 0)) {
		if (i < m->nwaits_stuck)
			m->waits_stuck[i] = m->waits_stuck[--m->nwaits_stuck];
		goto out;
	}
	if (i == m->nwaits_stuck) {
		/* One entry per waiting thread; bounded like the processes. */
		if (m->nwaits_stuck >= GPU_METRICS_MAX_PIDS) {
			m->untracked_events++;
			goto out;
		}
		xgrow((void **)&m->waits_stuck, &m->capwaits_stuck, m->nwaits_stuck + 1,
		      sizeof(*m->waits_stuck));
		m->nwaits_stuck++;
	}
	s = &m->waits_stuck[i];
	s->pid = pid;
	s->tid = tid;
	s->line = line;
	s->seconds = seconds;
	snprintf(s->api, sizeof(s->api), "%s", api);
	snprintf(s->file, sizeof(s->file), "%s", file ? file : "");
	snprintf(s->function, sizeof(s->function), "%s", function ? function : "");
out:
	pthread_mutex_unlock(&m->lock);
}

void gpu_metrics__set_dataloader_stuck(struct gpu_metrics *m, uint32_t pid, uint32_t tid,
				       const char *file, int line, const char *function,
				       double seconds)
{
	set_wait_stuck(m, pid, tid, "", file, line, function, seconds);
}

void gpu_metrics__set_sync_stuck(struct gpu_metrics *m, uint32_t pid, uint32_t tid, const char *api,
				 const char *file, int line, const char *function, double seconds)
{
	set_wait_stuck(m, pid, tid, api && *api ? api : "?", file, line, function, seconds);
}

void gpu_metrics__proc_window(struct gpu_metrics *m, uint32_t pid, const struct proc_times *total,
			      const struct proc_times *lead, uint32_t lead_tid,
			      const struct verdict_out *v)
{
	struct proc *p;

	pthread_mutex_lock(&m->lock);
	p = proc_get(m, pid);
	if (p) {
		p->judged = true;
		for (int s = 0; s < PS_NR; s++)
			p->time_ns[s] += total->ns[s];
		p->window_ns = lead->wall_ns;
		p->lead_tid = lead_tid;
		p->verdict = v->verdict;
		memcpy(p->share, v->share, sizeof(p->share));
		for (size_t i = 0; i < p->nbusy && lead->wall_ns; i++) {
			struct busy_entry *b = &p->busy[i];
			double r = (double)(b->busy_ns - b->mark_ns) / (double)lead->wall_ns;

			b->ratio = r > 1 ? 1 : r;
			b->mark_ns = b->busy_ns;
			b->windowed = true;
		}
	}
	pthread_mutex_unlock(&m->lock);
}

void gpu_metrics__set_health(struct gpu_metrics *m, const struct agent_health *h)
{
	pthread_mutex_lock(&m->lock);
	m->health = *h;
	pthread_mutex_unlock(&m->lock);
}

void gpu_metrics__set_name(struct gpu_metrics *m, uint32_t pid, const char *name)
{
	struct proc *p;

	pthread_mutex_lock(&m->lock);
	p = proc_get(m, pid);
	if (p && name) {
		snprintf(p->name, sizeof(p->name), "%s", name);
		p->name_read = true;
	}
	pthread_mutex_unlock(&m->lock);
}

void gpu_metrics__set_info(struct gpu_metrics *m, uint32_t pid, const char *service,
			   const char *labels)
{
	struct proc *p;

	pthread_mutex_lock(&m->lock);
	p = proc_get(m, pid);
	if (p) {
		free(p->service);
		free(p->labels);
		p->service = xstrdup(service ? service : "");
		p->labels = labels && *labels ? xstrdup(labels) : NULL;
	}
	pthread_mutex_unlock(&m->lock);
}

/* ---- reading (with m->lock held) ---- */

static int proc_cmp(const struct proc *a, const struct proc *b)
{
	return a->pid < b->pid ? -1 : a->pid > b->pid;
}

static void sort_procs(struct gpu_metrics *m)
{
	if (!m->procs_sorted) {
		HASH_SRT(hh, m->procs, proc_cmp);
		m->procs_sorted = true;
	}
}

static const struct device_cap *cap_find(const struct gpu_metrics *m, int device)
{
	for (size_t i = 0; i < m->ncaps; i++)
		if (m->caps[i].device == device)
			return &m->caps[i];
	return NULL;
}

/* Devices seen in any process or with a known capacity, ascending. */
static size_t devices(const struct gpu_metrics *m, int *out, size_t max)
{
	size_t n = 0;
	const struct proc *p;

	for (size_t i = 0; i < m->ncaps && n < max; i++)
		out[n++] = m->caps[i].device;
	for (p = m->procs; p; p = p->hh.next) {
		for (size_t i = 0; i < p->nmem; i++) {
			size_t j;

			for (j = 0; j < n && out[j] != p->mem[i].device; j++)
				;
			if (j == n && n < max)
				out[n++] = p->mem[i].device;
		}
	}
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && out[j - 1] > out[j]; j--) {
			int t = out[j];

			out[j] = out[j - 1];
			out[j - 1] = t;
		}
	return n;
}

static uint64_t device_used(const struct gpu_metrics *m, int device)
{
	uint64_t sum = 0;

	for (const struct proc *p = m->procs; p; p = p->hh.next)
		for (size_t i = 0; i < p->nmem; i++)
			if (p->mem[i].device == device)
				sum += p->mem[i].cur;
	return sum;
}

/* ---- one walk, two outputs: /metrics text and the alert engine's series ---- */

/* Values are divided by div (NS_PER_SEC: ns to seconds); a division of exact
 * integers rounds correctly where a multiplication by 1e-9 would not. */
static void emit_hist(struct prom_out *e, const char *name, const char *const *labels,
		      const struct hist *h, double div)
{
	double bounds[64];
	uint64_t cum[64];
	size_t n = h->nbounds < ARRAY_SIZE(bounds) ? h->nbounds : ARRAY_SIZE(bounds);

	for (size_t i = 0; i < n; i++) {
		bounds[i] = (double)h->bounds[i] / div;
		cum[i] = hist__cumulative(h, i);
	}
	prom__histogram(e, name, labels, bounds, cum, n, h->count, (double)h->sum / div);
}

static const double summary_quantiles[] = {0.5, 0.99};

static void emit_summary(struct prom_out *e, const char *name, const char *const *labels,
			 const struct hist *h, double div)
{
	double v[ARRAY_SIZE(summary_quantiles)];

	for (size_t i = 0; i < ARRAY_SIZE(summary_quantiles); i++)
		v[i] = (double)hist__quantile(h, summary_quantiles[i]) / div;
	prom__summary(e, name, labels, summary_quantiles, v, ARRAY_SIZE(v), h->count,
		      (double)h->sum / div);
}

/* How a family reads a histogram of nanoseconds: its count, its quantiles,
 * or its buckets (both in seconds). */
enum hist_shape { AS_COUNTER, AS_SUMMARY, AS_HISTOGRAM };

static const char *const shape_types[] = {
	[AS_COUNTER] = "counter",
	[AS_SUMMARY] = "summary",
	[AS_HISTOGRAM] = "histogram",
};

static void emit_shaped(struct prom_out *e, const char *name, enum hist_shape shape,
			const char *const *labels, const struct hist *h)
{
	if (shape == AS_COUNTER)
		prom__sample(e, name, labels, (double)h->count);
	else if (shape == AS_SUMMARY)
		emit_summary(e, name, labels, h, NS_PER_SEC);
	else
		emit_hist(e, name, labels, h, NS_PER_SEC);
}

/* A family with one series {pid} per process that has values in one of its
 * histograms. */
struct proc_family {
	const char *name, *help;
	enum hist_shape shape;
	size_t hist; /* offsetof(struct proc, <the histogram>) */
};

static const struct proc_family launch_latency_summary = {
	"zernel_cuda_launch_latency_seconds",
	"Time spent in the CUDA kernel launch call, per process.",
	AS_SUMMARY,
	offsetof(struct proc, launch),
};
static const struct proc_family dataloader_summary = {
	"zernel_dataloader_wait_seconds",
	"Time the training loop waited for the next batch from its data loader.",
	AS_SUMMARY,
	offsetof(struct proc, dataloader),
};
static const struct proc_family launch_counts = {
	"sonde_cuda_launches_total",
	"CUDA kernel launches.",
	AS_COUNTER,
	offsetof(struct proc, launch),
};
static const struct proc_family launch_histogram = {
	"sonde_cuda_launch_duration_seconds",
	"Time spent in the CUDA kernel launch call.",
	AS_HISTOGRAM,
	offsetof(struct proc, launch),
};
static const struct proc_family dataloader_histogram = {
	"sonde_dataloader_wait_seconds",
	"Time the training loop waited for the next batch from its data loader.",
	AS_HISTOGRAM,
	offsetof(struct proc, dataloader),
};

static void emit_proc_family(const struct gpu_metrics *m, struct prom_out *e,
			     const struct proc_family *f)
{
	char pid[16];
	const char *l[] = {"pid", pid, NULL};

	prom__family(e, f->name, shape_types[f->shape], f->help);
	for (const struct proc *p = m->procs; p; p = p->hh.next) {
		const struct hist *h = (const struct hist *)((const char *)p + f->hist);

		if (!h->count)
			continue;
		snprintf(pid, sizeof(pid), "%u", p->pid);
		emit_shaped(e, f->name, f->shape, l, h);
	}
}

/* The families with one series {pid, gpu_id} per process and device it
 * holds memory on. */
enum mem_value { MEM_CUR, MEM_PEAK, MEM_RATIO, MEM_ALLOCS, MEM_FREES };

struct mem_family {
	const char *name, *type, *help;
	enum mem_value value;
};

static const struct mem_family seed_memory[] = {
	{"zernel_gpu_memory_used_bytes", "gauge",
	 "Device memory a process holds now, from its allocations.", MEM_CUR},
	{"zernel_gpu_memory_peak_bytes", "gauge",
	 "Most device memory the process has held at once.", MEM_PEAK},
};

static const struct mem_family sonde_memory[] = {
	{"sonde_gpu_memory_used_bytes", "gauge",
	 "Device memory a process holds now, from its allocations.", MEM_CUR},
	{"sonde_gpu_memory_peak_bytes", "gauge", "Most device memory the process has held at once.",
	 MEM_PEAK},
	{"sonde_gpu_memory_used_ratio", "gauge",
	 "Device memory a process holds over the device's capacity (when known).", MEM_RATIO},
	{"sonde_cuda_memory_allocations_total", "counter",
	 "Device memory allocations (cudaMalloc, cuMemAlloc, ...).", MEM_ALLOCS},
	{"sonde_cuda_memory_frees_total", "counter",
	 "Device memory frees (cudaFree, cuMemFree, ...).", MEM_FREES},
};

/* The value of me in a family; false when the family has no sample for it
 * (a ratio on a device of unknown capacity). */
static bool mem_value(const struct gpu_metrics *m, const struct mem_entry *me, enum mem_value what,
		      double *v)
{
	const struct device_cap *c;

	switch (what) {
	case MEM_CUR:
		*v = (double)me->cur;
		return true;
	case MEM_PEAK:
		*v = (double)me->peak;
		return true;
	case MEM_ALLOCS:
		*v = (double)me->allocs;
		return true;
	case MEM_FREES:
		*v = (double)me->frees;
		return true;
	case MEM_RATIO:
		c = cap_find(m, me->device);
		if (!c || !c->bytes)
			return false;
		*v = (double)me->cur / (double)c->bytes;
		return true;
	}
	return false;
}

static void emit_mem_families(const struct gpu_metrics *m, struct prom_out *e,
			      const struct mem_family *f, size_t n)
{
	char pid[16], dev[16];
	const char *l[] = {"pid", pid, "gpu_id", dev, NULL};
	double v;

	for (; n--; f++) {
		prom__family(e, f->name, f->type, f->help);
		for (const struct proc *p = m->procs; p; p = p->hh.next)
			for (size_t i = 0; i < p->nmem; i++) {
				if (!mem_value(m, &p->mem[i], f->value, &v))
					continue;
				snprintf(pid, sizeof(pid), "%u", p->pid);
				snprintf(dev, sizeof(dev), "%d", p->mem[i].device);
				prom__sample(e, f->name, l, v);
			}
	}
}

/* The families with one series {pid, gpu_id} per process and device its
 * kernels ran on. */
enum busy_value { BUSY_KERNELS, BUSY_SECONDS, BUSY_RATIO };

static const struct busy_family {
	const char *name, *type, *help;
	enum busy_value value;
} busy_families[] = {
	{"sonde_gpu_kernels_total", "counter",
	 "Kernels of the process that ran on the GPU (Sonde's CUPTI library).", BUSY_KERNELS},
	{"sonde_gpu_kernel_seconds_total", "counter",
	 "Time the process had a kernel running on the GPU, overlapping kernels counted once.",
	 BUSY_SECONDS},
	{"sonde_gpu_busy_ratio", "gauge",
	 "Share of the last window the process had a kernel running on the GPU.", BUSY_RATIO},
};

static void emit_busy(const struct gpu_metrics *m, struct prom_out *e)
{
	char pid[16], dev[16];
	const char *l[] = {"pid", pid, "gpu_id", dev, NULL};

	for (size_t k = 0; k < ARRAY_SIZE(busy_families); k++) {
		const struct busy_family *f = &busy_families[k];

		prom__family(e, f->name, f->type, f->help);
		for (const struct proc *p = m->procs; p; p = p->hh.next)
			for (size_t i = 0; i < p->nbusy; i++) {
				const struct busy_entry *b = &p->busy[i];

				if (f->value == BUSY_RATIO && !b->windowed)
					continue;
				snprintf(pid, sizeof(pid), "%u", p->pid);
				snprintf(dev, sizeof(dev), "%d", b->device);
				prom__sample(e, f->name, l,
					     f->value == BUSY_KERNELS ? (double)b->kernels
					     : f->value == BUSY_SECONDS
						     ? (double)b->busy_ns / NS_PER_SEC
						     : b->ratio);
			}
	}
}

static int by_pid(const void *a, const void *b)
{
	uint32_t x = ((const struct gpu_proc_mem *)a)->pid,
		 y = ((const struct gpu_proc_mem *)b)->pid;

	return (x > y) - (x < y);
}

/* The driver's account of pid on its CUDA device cuda_device, NULL when it
 * has none: a row of pid's (the rows are sorted by pid), a few a process. */
static const struct gpu_proc_mem *drv_find(const struct gpu_metrics *m, uint32_t pid,
					   int cuda_device)
{
	struct gpu_proc_mem key = {.pid = pid};
	const struct gpu_proc_mem *r =
		m->ndrv ? bsearch(&key, m->drv, m->ndrv, sizeof(*m->drv), by_pid) : NULL;

	if (!r)
		return NULL;
	while (r > m->drv && r[-1].pid == pid)
		r--;
	for (; r < m->drv + m->ndrv && r->pid == pid; r++)
		if (r->cuda_device == cuda_device)
			return r;
	return NULL;
}

static const struct mem_entry *mem_find(const struct gpu_metrics *m, uint32_t pid, int device)
{
	const struct proc *p;

	HASH_FIND(hh, m->procs, &pid, sizeof(pid), p);
	for (size_t i = 0; p && i < p->nmem; i++)
		if (p->mem[i].device == device)
			return &p->mem[i];
	return NULL;
}

/* Each process's memory pools per device, as CUPTI's records tell of them
 * {pid, gpu_id, state}: what they hold of the device, and what its
 * allocations use of that. */
static void emit_pools(const struct gpu_metrics *m, struct prom_out *e)
{
	static const char *const name = "sonde_gpu_memory_pool_bytes";
	char pid[16], dev[16];
	const char *l[] = {"pid", pid, "gpu_id", dev, "state", "reserved", NULL};

	prom__family(e, name, "gauge",
		     "Device memory a process's memory pools (cudaMallocAsync's, "
		     "cudaMemPoolCreate's) hold, as CUPTI's records of Sonde's CUPTI library "
		     "say: state reserved what the pools hold of the device (counted in "
		     "sonde_gpu_process_memory_bytes{source=\"cupti\"}), used what the "
		     "process's allocations from them use of that.");
	for (const struct proc *p = m->procs; p; p = p->hh.next)
		for (size_t i = 0; i < p->ncmem; i++) {
			uint64_t size = 0, used = 0;
			bool any = false;

			for (size_t j = 0; j < p->npools; j++)
				if (p->pools[j].device == p->cmem[i].device) {
					size += p->pools[j].size;
					used += p->pools[j].used;
					any = true;
				}
			if (!any)
				continue;
			snprintf(pid, sizeof(pid), "%u", p->pid);
			snprintf(dev, sizeof(dev), "%d", p->cmem[i].device);
			l[5] = "reserved";
			prom__sample(e, name, l, (double)size);
			l[5] = "used";
			prom__sample(e, name, l, (double)used);
		}
}

/* Each process's memory by source {pid, gpu_id, source}: what the probes saw
 * allocated, and what the driver accounts (NVML); then {pid, gpu_id} what the
 * driver holds that no probe saw, where both say. */
static void emit_process_memory(const struct gpu_metrics *m, struct prom_out *e)
{
	static const char *const name = "sonde_gpu_process_memory_bytes",
				 *const unattributed =
					 "sonde_gpu_process_memory_unattributed_bytes";
	char pid[16], dev[16];
	const char *l[] = {"pid", pid, "gpu_id", dev, "source", "allocations", NULL};

	prom__family(e, name, "gauge",
		     "Device memory a process holds, by source: allocations (what Sonde's "
		     "probes saw it allocate, gpu_id the CUDA device), cupti (what CUPTI's "
		     "memory records of Sonde's CUPTI library say it allocated, gpu_id the CUDA "
		     "device) or nvml (the driver's account, as nvidia-smi shows it: contexts, "
		     "allocations, VMM, pools; gpu_id NVML's index).");
	for (const struct proc *p = m->procs; p; p = p->hh.next)
		for (size_t i = 0; i < p->nmem; i++) {
			snprintf(pid, sizeof(pid), "%u", p->pid);
			snprintf(dev, sizeof(dev), "%d", p->mem[i].device);
			prom__sample(e, name, l, (double)p->mem[i].cur);
		}
	l[5] = "cupti";
	for (const struct proc *p = m->procs; p; p = p->hh.next)
		for (size_t i = 0; i < p->ncmem; i++) {
			snprintf(pid, sizeof(pid), "%u", p->pid);
			snprintf(dev, sizeof(dev), "%d", p->cmem[i].device);
			prom__sample(e, name, l, (double)p->cmem[i].cur);
		}
	l[5] = "nvml";
	for (size_t i = 0; i < m->ndrv; i++) {
		snprintf(pid, sizeof(pid), "%u", m->drv[i].pid);
		snprintf(dev, sizeof(dev), "%d", m->drv[i].device);
		prom__sample(e, name, l, (double)m->drv[i].bytes);
	}
	prom__family(e, unattributed, "gauge",
		     "Device memory the driver accounts to a process (NVML) beyond what Sonde's "
		     "probes saw it allocate on the same GPU (its CUDA device, through "
		     "CUDA_VISIBLE_DEVICES): its contexts, and allocations no probe saw; 0 at "
		     "least; gpu_id NVML's index.");
	l[4] = NULL;
	for (size_t i = 0; i < m->ndrv; i++) {
		const struct gpu_proc_mem *d = &m->drv[i];
		const struct mem_entry *me =
			d->cuda_device >= 0 ? mem_find(m, d->pid, d->cuda_device) : NULL;

		if (!me)
			continue;
		snprintf(pid, sizeof(pid), "%u", d->pid);
		snprintf(dev, sizeof(dev), "%d", d->device);
		prom__sample(e, unattributed, l,
			     d->bytes > me->cur ? (double)(d->bytes - me->cur) : 0);
	}
	emit_pools(m, e);
}

/* Capacities {gpu_id, source}, then per device {gpu_id} the memory all
 * processes hold and its ratio to the capacity. */
static void emit_devices(const struct gpu_metrics *m, struct prom_out *e)
{
	char dev[16], src[SOURCE_MAX];
	const char *cap_l[] = {"gpu_id", dev, "source", src, NULL}, *l[] = {"gpu_id", dev, NULL};
	int devs[64];
	size_t ndevs = devices(m, devs, ARRAY_SIZE(devs));

	prom__family(e, "sonde_gpu_memory_capacity_bytes", "gauge",
		     "Device memory capacity and where it was learned (nvml, app, config).");
	for (size_t i = 0; i < m->ncaps; i++) {
		snprintf(dev, sizeof(dev), "%d", m->caps[i].device);
		snprintf(src, sizeof(src), "%s", m->caps[i].source);
		prom__sample(e, "sonde_gpu_memory_capacity_bytes", cap_l, (double)m->caps[i].bytes);
	}
	prom__family(e, "sonde_gpu_device_memory_used_bytes", "gauge",
		     "Device memory held by all tracked processes on the device.");
	for (size_t i = 0; i < ndevs; i++) {
		snprintf(dev, sizeof(dev), "%d", devs[i]);
		prom__sample(e, "sonde_gpu_device_memory_used_bytes", l,
			     (double)device_used(m, devs[i]));
	}
	prom__family(e, "sonde_gpu_device_memory_nvml_used_bytes", "gauge",
		     "Device memory in use as the driver says (NVML, as nvidia-smi shows it): "
		     "every process's and the driver's own; gpu_id NVML's index.");
	for (int i = 0; i < GPU_METRICS_MAX_DEVICES; i++) {
		if (!m->has_drv_used[i])
			continue;
		snprintf(dev, sizeof(dev), "%d", i);
		prom__sample(e, "sonde_gpu_device_memory_nvml_used_bytes", l,
			     (double)m->drv_used[i]);
	}
	prom__family(e, "sonde_gpu_device_memory_used_ratio", "gauge",
		     "Device memory held by all tracked processes over the capacity (when known).");
	for (size_t i = 0; i < ndevs; i++) {
		const struct device_cap *c = cap_find(m, devs[i]);

		if (!c || !c->bytes)
			continue;
		snprintf(dev, sizeof(dev), "%d", devs[i]);
		prom__sample(e, "sonde_gpu_device_memory_used_ratio", l,
			     (double)device_used(m, devs[i]) / (double)c->bytes);
	}
}

static void emit_waits(const struct gpu_metrics *m, struct prom_out *e)
{
	char pid[16];
	const char *l[] = {"pid", pid, "api", NULL, NULL};

	prom__family(e, "sonde_cuda_sync_wait_seconds", "histogram",
		     "Time a thread blocked in a CUDA synchronize call, per API.");
	for (const struct proc *p = m->procs; p; p = p->hh.next)
		for (size_t i = 0; i < p->nwaits; i++) {
			snprintf(pid, sizeof(pid), "%u", p->pid);
			l[3] = p->waits[i].api;
			emit_hist(e, "sonde_cuda_sync_wait_seconds", l, &p->waits[i].h, NS_PER_SEC);
		}
}

/* Per process and direction {pid, kind} with copies: bytes or calls. */
static void emit_copies(const struct gpu_metrics *m, struct prom_out *e, const char *name,
			const char *help, bool calls)
{
	char pid[16];
	const char *l[] = {"pid", pid, "kind", NULL, NULL};

	prom__family(e, name, "counter", help);
	for (const struct proc *p = m->procs; p; p = p->hh.next)
		for (int k = 0; k < COPY_KINDS; k++) {
			const struct copy_entry *c = &p->copies[k];

			if (!c->calls)
				continue;
			snprintf(pid, sizeof(pid), "%u", p->pid);
			l[3] = copy_kind_names[k];
			prom__sample(e, name, l, (double)(calls ? c->calls : c->bytes));
		}
}

/* A family with one series {op} per NCCL operation: its calls, its bytes,
 * or its durations (shaped; a summary only of operations called). */
enum nccl_value { NCCL_CALLS, NCCL_BYTES, NCCL_DURATION };

struct nccl_family {
	const char *name, *help;
	enum nccl_value value;
	enum hist_shape shape; /* of NCCL_DURATION */
};

static const struct nccl_family nccl_families[] = {
	{"sonde_nccl_calls_total", "NCCL collective calls, per operation.", NCCL_CALLS, AS_COUNTER},
	{"sonde_nccl_bytes_total",
	 "Bytes NCCL calls were given (count x datatype size), per operation.", NCCL_BYTES,
	 AS_COUNTER},
	{"sonde_nccl_duration_seconds", "Duration of NCCL calls, per operation.", NCCL_DURATION,
	 AS_HISTOGRAM},
};

static const struct nccl_family nccl_summary = {
	"zernel_nccl_collective_duration_seconds",
	"Duration of NCCL collective calls, per operation.",
	NCCL_DURATION,
	AS_SUMMARY,
};

static void emit_nccl_family(const struct gpu_metrics *m, struct prom_out *e,
			     const struct nccl_family *f)
{
	prom__family(e, f->name, shape_types[f->shape], f->help);
	for (int i = 0; i < NCCL_OP_MAX; i++) {
		const struct nccl_entry *n = &m->nccl[i];
		const char *l[] = {"op", nccl_op_name(i), NULL};

		if (f->value == NCCL_CALLS)
			prom__sample(e, f->name, l, (double)n->calls);
		else if (f->value == NCCL_BYTES)
			prom__sample(e, f->name, l, (double)n->bytes);
		else if (f->shape != AS_SUMMARY || n->calls)
			emit_shaped(e, f->name, f->shape, l, &n->dur);
	}
}

static void emit_stuck(const struct gpu_metrics *m, struct prom_out *e)
{
	char pid[16], rank[16], comm[24];
	const char *l[] = {"pid", pid, "op", NULL, "rank", rank, "comm", comm, NULL};

	prom__family(e, "sonde_nccl_stuck_seconds", "gauge",
		     "How long a thread has been blocked in a synchronize after a collective.");
	for (size_t i = 0; i < m->nstuck; i++) {
		const struct stuck_entry *s = &m->stuck[i];

		snprintf(pid, sizeof(pid), "%u", s->pid);
		l[3] = nccl_op_name(s->op);
		snprintf(rank, sizeof(rank), "%d", s->rank);
		snprintf(comm, sizeof(comm), "0x%" PRIx64, s->comm);
		prom__sample(e, "sonde_nccl_stuck_seconds", l, s->seconds);
	}
}

static const char *proc_name(const struct gpu_metrics *m, uint32_t pid);

/* The stuck waits of one kind: DataLoader waits (sync false) or CUDA
 * synchronisations (with their api). */
static void emit_wait_stuck(const struct gpu_metrics *m, struct prom_out *e, bool sync)
{
	const char *name =
		sync ? "sonde_cuda_sync_stuck_seconds" : "sonde_dataloader_stuck_seconds";
	char pid[16], tid[16], line[16];
	const char *l[] = {"pid",      pid,  "tid",	tid,  "file", NULL, "line", line,
			   "function", NULL, "process", NULL, NULL,   NULL, NULL};

	prom__family(e, name, "gauge",
		     sync ? "How long a thread has been blocked in a CUDA synchronisation that "
			    "waits for kernels or copies (waits longer than a second), at the "
			    "Python line that called it."
			  : "How long a thread has been waiting for its next batch from a "
			    "DataLoader (waits longer than a second), at the line of the loop "
			    "that waits.");
	for (size_t i = 0; i < m->nwaits_stuck; i++) {
		const struct wait_stuck_entry *s = &m->waits_stuck[i];
		int k = 10;

		if (sync != (s->api[0] != '\0'))
			continue;
		snprintf(pid, sizeof(pid), "%u", s->pid);
		snprintf(tid, sizeof(tid), "%u", s->tid);
		snprintf(line, sizeof(line), "%d", s->line);
		l[5] = s->file;
		l[9] = s->function;
		/* The process's name, when known: the alert names it. */
		if (proc_name(m, s->pid)) {
			l[k++] = "process";
			l[k++] = proc_name(m, s->pid);
		}
		if (sync) {
			l[k++] = "api";
			l[k++] = s->api;
		}
		l[k] = NULL;
		prom__sample(e, name, l, s->seconds);
	}
}

/* The agent's health: one unlabelled sample each. */
/* A family {pid, state} of each judged process: its thread-seconds in
 * each state, or its leading thread's share of the last window. */
static void emit_states(const struct gpu_metrics *m, struct prom_out *e, const char *name,
			const char *type, const char *help, bool share)
{
	char pid[16];
	const char *l[] = {"pid", pid, "state", NULL, NULL};

	prom__family(e, name, type, help);
	for (const struct proc *p = m->procs; p; p = p->hh.next) {
		if (!p->judged)
			continue;
		snprintf(pid, sizeof(pid), "%u", p->pid);
		for (int s = 0; s < PS_NR; s++) {
			l[3] = proc_state__name(s);
			prom__sample(e, name, l,
				     share ? p->share[s] : (double)p->time_ns[s] / NS_PER_SEC);
		}
	}
}

/* Where each judged process's time went, and what bounds it. */
static void emit_verdicts(const struct gpu_metrics *m, struct prom_out *e)
{
	char pid[16];
	const char *l[] = {"pid", pid, "verdict", NULL, NULL};

	emit_states(m, e, "sonde_process_time_seconds_total", "counter",
		    "Thread-seconds a process spent on a CPU, in GPU synchronisations, in "
		    "collectives, in DataLoader waits, and blocked off-CPU by cause (lock, io, "
		    "sleep; with --offcpu), summed over its threads.",
		    false);
	emit_states(m, e, "sonde_process_time_share", "gauge",
		    "Share of the last window's wall time the process's leading thread spent in "
		    "each state (the evidence of its verdict).",
		    true);
	prom__family(e, "sonde_process_verdict", "gauge",
		     "What bounded the process in the last window: 1 for its verdict (gpu, "
		     "communication, input, cpu, lock, io, idle), 0 for the others.");
	for (const struct proc *p = m->procs; p; p = p->hh.next) {
		if (!p->judged)
			continue;
		snprintf(pid, sizeof(pid), "%u", p->pid);
		for (int v = 0; v < V_NR; v++) {
			l[3] = verdict__name(v);
			prom__sample(e, "sonde_process_verdict", l, p->verdict == (enum verdict)v);
		}
	}
}

/* Label pairs of a job's labels ("NAME=VALUE" lines, agent/service.h) into
 * l from index i on, cut into buf; the index after them. */
#define INFO_LABELS 12
static size_t job_label_pairs(const char *labels, const char **l, size_t i, size_t max, char *buf,
			      size_t size)
{
	struct label_line ll;
	size_t used = 0;

	for (const char *s = labels; i + 2 < max && label_line__next(&s, &ll);) {
		if (used + ll.name_len + ll.value_len + 2 > size)
			continue;
		memcpy(buf + used, ll.name, ll.name_len);
		buf[used + ll.name_len] = '\0';
		l[i++] = buf + used;
		used += ll.name_len + 1;
		memcpy(buf + used, ll.value, ll.value_len);
		buf[used + ll.value_len] = '\0';
		l[i++] = buf + used;
		used += ll.value_len + 1;
	}
	l[i] = NULL;
	return i;
}

/* What names each process: its service and its job (sonde_process_info). */
static void emit_info(const struct gpu_metrics *m, struct prom_out *e)
{
	const char *l[2 * INFO_LABELS + 1];
	char pid[16], buf[1024];

	prom__family(e, "sonde_process_info", "gauge",
		     "1 for each process with GPU series: its service and, where its environment "
		     "says, its job (job, rank, local_rank, world_size, pod, namespace, "
		     "container_id), as on its profiles' samples.");
	for (const struct proc *p = m->procs; p; p = p->hh.next) {
		if (!p->service)
			continue;
		snprintf(pid, sizeof(pid), "%u", p->pid);
		l[0] = "pid";
		l[1] = pid;
		l[2] = "service_name";
		l[3] = p->service;
		job_label_pairs(p->labels, l, 4, 2 * INFO_LABELS, buf, sizeof(buf));
		prom__sample(e, "sonde_process_info", l, 1);
	}
}

/* The processes that exited, kept for the grace: when. */
static void emit_exits(const struct gpu_metrics *m, struct prom_out *e)
{
	char pid[16];
	const char *l[] = {"pid", pid, NULL};

	prom__family(e, "sonde_process_exit_time_seconds", "gauge",
		     "When a process with GPU series exited (Unix time): its series stay for "
		     "sonde agent --exited-grace after it, then go.");
	for (const struct proc *p = m->procs; p; p = p->hh.next) {
		if (!p->exited_ms)
			continue;
		snprintf(pid, sizeof(pid), "%u", p->pid);
		prom__sample(e, "sonde_process_exit_time_seconds", l, (double)p->exited_ms / 1e3);
	}
}

static void emit_health(const struct gpu_metrics *m, struct prom_out *e)
{
	const struct agent_health *h = &m->health;
	const struct {
		const char *name, *type, *help;
		double v;
	} gauges[] = {
		{"sonde_agent_cpu_samples_total", "counter", "CPU stack samples received.",
		 (double)h->cpu_samples},
		{"sonde_agent_cpu_drops_total", "counter",
		 "CPU samples lost (ring buffer or map full, read failures).",
		 (double)h->cpu_drops},
		{"sonde_agent_gpu_events_total", "counter",
		 "CUDA and NCCL events received from the probes.", (double)h->gpu_events},
		{"sonde_agent_gpu_drops_total", "counter",
		 "CUDA and NCCL events lost (ring buffer or map full).", (double)h->gpu_drops},
		{"sonde_agent_probes_attached", "gauge", "Probes attached now.",
		 (double)h->probe_attached},
		{"sonde_agent_probe_attach_failures_total", "counter",
		 "Probe attachments that failed.", (double)h->probe_attach_failures},
		{"sonde_agent_bpf_map_fill_ratio", "gauge",
		 "Fill of the fullest BPF map (entries over max entries).", h->map_fill_ratio},
		{"sonde_agent_tracked_processes", "gauge",
		 "Processes with GPU state held by the agent.", (double)m->nprocs},
		{"sonde_agent_untracked_events_total", "counter",
		 "Events not stored because the process table was full.",
		 (double)m->untracked_events},
		{"sonde_agent_simulated", "gauge",
		 "1 when the agent serves simulated telemetry (--simulate).", m->simulated ? 1 : 0},
	};

	for (size_t i = 0; i < ARRAY_SIZE(gauges); i++)
		prom__metric(e, gauges[i].name, gauges[i].type, gauges[i].help, gauges[i].v);
}

/* Every family, in the order /metrics has always listed them: the seed's
 * names first, exactly, then Sonde's own. */
static void emit(struct gpu_metrics *m, struct prom_out *e)
{
	sort_procs(m);

	emit_mem_families(m, e, seed_memory, ARRAY_SIZE(seed_memory));
	emit_proc_family(m, e, &launch_latency_summary);
	emit_nccl_family(m, e, &nccl_summary);
	emit_proc_family(m, e, &dataloader_summary);

	emit_proc_family(m, e, &launch_counts);
	emit_proc_family(m, e, &launch_histogram);
	emit_mem_families(m, e, sonde_memory, ARRAY_SIZE(sonde_memory));
	emit_process_memory(m, e);
	emit_busy(m, e);
	emit_devices(m, e);
	emit_waits(m, e);
	emit_copies(m, e, "sonde_cuda_memcpy_bytes_total",
		    "Bytes copied by cudaMemcpy/cudaMemcpyAsync, by direction.", false);
	emit_copies(m, e, "sonde_cuda_memcpy_calls_total",
		    "cudaMemcpy/cudaMemcpyAsync calls, by direction.", true);
	for (size_t i = 0; i < ARRAY_SIZE(nccl_families); i++)
		emit_nccl_family(m, e, &nccl_families[i]);
	emit_stuck(m, e);
	emit_proc_family(m, e, &dataloader_histogram);
	emit_wait_stuck(m, e, false);
	emit_exits(m, e);
	emit_info(m, e);
	emit_wait_stuck(m, e, true);
	emit_verdicts(m, e);
	emit_health(m, e);
}

void gpu_metrics__collect(void *src, struct prom_out *o)
{
	struct gpu_metrics *m = src;

	pthread_mutex_lock(&m->lock);
	emit(m, o);
	pthread_mutex_unlock(&m->lock);
}

char *gpu_metrics__prometheus(struct gpu_metrics *m, size_t *len)
{
	struct prom_text t;

	if (prom_text__open(&t))
		return NULL;
	gpu_metrics__collect(m, &t.out);
	return prom_text__close(&t, len);
}

/* The series output: every sample to the alert engine's series_fn, but
 * those of processes that exited (kept for the grace in /metrics only: an
 * alert on a process resolves when it exits). */
struct series_emitter {
	struct prom_out base;
	const struct gpu_metrics *m;
	series_fn fn;
	void *ctx;
};

/* Whether labels hold the pid of a process that exited. */
static bool of_exited(const struct gpu_metrics *m, const char *const *labels)
{
	for (size_t i = 0; labels[i]; i += 2) {
		const struct proc *p;
		uint32_t pid;

		if (strcmp(labels[i], "pid"))
			continue;
		pid = (uint32_t)strtoul(labels[i + 1], NULL, 10);
		HASH_FIND(hh, m->procs, &pid, sizeof(pid), p);
		return p && p->exited_ms;
	}
	return false;
}

static void series_family(struct prom_out *e, const char *name, const char *type, const char *help)
{
}

static void series_sample(struct prom_out *e, const char *name, const char *const *labels, double v)
{
	struct series_emitter *se = (struct series_emitter *)e;

	if (!of_exited(se->m, labels))
		se->fn(se->ctx, name, labels, v);
}

void gpu_metrics__each(void *src, series_fn fn, void *ctx)
{
	struct gpu_metrics *m = src;
	struct series_emitter se = {{series_family, series_sample}, m, fn, ctx};

	pthread_mutex_lock(&m->lock);
	emit(m, &se.base);
	pthread_mutex_unlock(&m->lock);
}

/* ---- the JSON snapshot ---- */

static double q_scaled(const struct hist *h, double q, double unit_ns)
{
	return (double)hist__quantile(h, q) / unit_ns;
}

static json_t *hist_json(const struct hist *h, double unit_ns, const char *suffix)
{
	char k50[16], k99[16], ksum[24];

	snprintf(k50, sizeof(k50), "p50_%s", suffix);
	snprintf(k99, sizeof(k99), "p99_%s", suffix);
	snprintf(ksum, sizeof(ksum), "total_%s", suffix);
	return json_pack("{sI sf sf sf}", "count", (json_int_t)h->count, k50,
			 q_scaled(h, 0.5, unit_ns), k99, q_scaled(h, 0.99, unit_ns), ksum,
			 (double)h->sum / unit_ns);
}

/* json_object_set_new that tolerates a NULL value (out of memory). */
static void obj_set(json_t *o, const char *k, json_t *v)
{
	if (v)
		json_object_set_new(o, k, v);
}

static void arr_add(json_t *a, json_t *v)
{
	if (v)
		json_array_append_new(a, v);
}

/* The names of the processes not named yet, from /proc/PID/comm (the main
 * thread's name, as `ps -o comm` shows): read once, at the first snapshot
 * that lists the process. Not for simulated data, whose pids are no one's
 * here (the simulator names its own). */
static void read_comm(uint32_t pid, char name[NAME_MAX_LEN])
{
	char path[32];
	size_t n = 0;
	FILE *f;

	name[0] = '\0';
	snprintf(path, sizeof(path), "/proc/%u/comm", pid);
	f = fopen(path, "re");
	if (!f)
		return; /* gone already: it stays unnamed */
	if (fgets(name, NAME_MAX_LEN, f))
		n = strcspn(name, "\n");
	name[n] = '\0';
	fclose(f);
}

static void read_names(struct gpu_metrics *m)
{
	for (struct proc *p = m->procs; p && !m->simulated; p = p->hh.next) {
		if (p->name_read)
			continue;
		p->name_read = true;
		read_comm(p->pid, p->name);
	}
}

/* The name of pid's process, NULL while unknown. */
static const char *proc_name(const struct gpu_metrics *m, uint32_t pid)
{
	const struct proc *p;

	HASH_FIND(hh, m->procs, &pid, sizeof(pid), p);
	return p && p->name[0] ? p->name : NULL;
}

/* Adds "process": the name of p's process, when known. */
static void set_process(json_t *o, const char *name)
{
	if (o && name)
		json_object_set_new(o, "process", json_string(name));
}

/* The seed's gpu_utilization: one entry per process and device, keyed
 * "pid:gpu_id". */
static json_t *snapshot_memory_keys(const struct gpu_metrics *m)
{
	json_t *a = json_array();

	for (const struct proc *p = m->procs; p && a; p = p->hh.next)
		for (size_t i = 0; i < p->nmem; i++) {
			const struct mem_entry *me = &p->mem[i];
			char key[32];

			json_t *e;

			snprintf(key, sizeof(key), "%u:%d", p->pid, me->device);
			e = json_pack("{ss sI sI sI sI}", "key", key, "pid", (json_int_t)p->pid,
				      "gpu_id", (json_int_t)me->device, "current_bytes",
				      (json_int_t)me->cur, "peak_bytes", (json_int_t)me->peak);
			set_process(e, p->name[0] ? p->name : NULL);
			arr_add(a, e);
		}
	return a;
}

/* A process's verdict with its evidence: the leading thread's shares of
 * the last window, and every thread's seconds since it was followed. */
static json_t *verdict_json(const struct proc *p)
{
	json_t *o = json_pack("{ss sf}", "bound", verdict__name(p->verdict), "window_s",
			      (double)p->window_ns / NS_PER_SEC);
	json_t *sh = json_object(), *tot = json_object();

	if (!o || !sh || !tot) {
		json_decref(o);
		json_decref(sh);
		json_decref(tot);
		return NULL;
	}
	for (int s = 0; s < PS_NR; s++) {
		json_object_set_new(sh, proc_state__name(s), json_real(p->share[s]));
		json_object_set_new(tot, proc_state__name(s),
				    json_real((double)p->time_ns[s] / NS_PER_SEC));
	}
	if (p->lead_tid)
		json_object_set_new(o, "tid", json_integer(p->lead_tid));
	json_object_set_new(o, "shares", sh);
	json_object_set_new(o, "seconds_total", tot);
	/* The GPU's side, where its kernels are timed: the share of the
	 * window each device ran one of them. */
	for (size_t i = 0; i < p->nbusy; i++) {
		json_t *busy = json_object_get(o, "gpu_busy");
		char dev[16];

		if (!p->busy[i].windowed)
			continue;
		if (!busy) {
			busy = json_object();
			json_object_set_new(o, "gpu_busy", busy);
		}
		snprintf(dev, sizeof(dev), "%d", p->busy[i].device);
		json_object_set_new(busy, dev, json_real(p->busy[i].ratio));
	}
	return o;
}

static json_t *process_json(const struct gpu_metrics *m, const struct proc *p)
{
	json_t *po = json_pack("{sI}", "pid", (json_int_t)p->pid), *x;

	if (!po)
		return NULL;
	set_process(po, p->name[0] ? p->name : NULL);
	if (p->exited_ms)
		obj_set(po, "exited_ms", json_integer((json_int_t)p->exited_ms));
	if (p->service) {
		const char *l[2 * INFO_LABELS + 1];
		char buf[1024];
		json_t *jl = json_object();

		obj_set(po, "service", json_string(p->service));
		job_label_pairs(p->labels, l, 0, 2 * INFO_LABELS, buf, sizeof(buf));
		for (size_t i = 0; l[i] && jl; i += 2)
			json_object_set_new(jl, l[i], json_string(l[i + 1]));
		if (jl && json_object_size(jl))
			obj_set(po, "job", jl);
		else
			json_decref(jl);
	}
	obj_set(po, "launches", hist_json(&p->launch, NS_PER_US, "us"));
	obj_set(po, "dataloader_wait", hist_json(&p->dataloader, NS_PER_MS, "ms"));
	x = json_array();
	for (size_t i = 0; i < p->nwaits && x; i++) {
		json_t *w = hist_json(&p->waits[i].h, NS_PER_MS, "ms");

		if (w)
			json_object_set_new(w, "api", json_string(p->waits[i].api));
		arr_add(x, w);
	}
	obj_set(po, "waits", x);
	x = json_object();
	for (int k = 0; k < COPY_KINDS && x; k++)
		if (p->copies[k].calls)
			obj_set(x, copy_kind_names[k],
				json_pack("{sI sI}", "bytes", (json_int_t)p->copies[k].bytes,
					  "calls", (json_int_t)p->copies[k].calls));
	obj_set(po, "copies", x);
	x = json_array();
	for (size_t i = 0; i < p->nmem && x; i++) {
		const struct gpu_proc_mem *d = drv_find(m, p->pid, p->mem[i].device);
		json_t *me = json_pack("{sI sI sI sI sI}", "gpu_id", (json_int_t)p->mem[i].device,
				       "current_bytes", (json_int_t)p->mem[i].cur, "peak_bytes",
				       (json_int_t)p->mem[i].peak, "allocs",
				       (json_int_t)p->mem[i].allocs, "frees",
				       (json_int_t)p->mem[i].frees);

		/* The driver's number beside the probes', as /metrics has it. */
		if (me && d)
			json_object_set_new(me, "nvml_bytes", json_integer((json_int_t)d->bytes));
		arr_add(x, me);
	}
	obj_set(po, "memory", x);
	if (p->judged)
		obj_set(po, "verdict", verdict_json(p));
	return po;
}

static json_t *snapshot_processes(const struct gpu_metrics *m)
{
	json_t *a = json_array();

	for (const struct proc *p = m->procs; p && a; p = p->hh.next)
		arr_add(a, process_json(m, p));
	return a;
}

/* The driver's account of every process (NVML), those the probes never saw
 * included. */
static json_t *snapshot_driver_memory(const struct gpu_metrics *m)
{
	json_t *a = json_array();

	for (size_t i = 0; i < m->ndrv && a; i++) {
		const struct gpu_proc_mem *d = &m->drv[i];
		json_t *e = json_pack("{sI sI sI}", "pid", (json_int_t)d->pid, "gpu_id",
				      (json_int_t)d->device, "used_bytes", (json_int_t)d->bytes);
		char name[NAME_MAX_LEN];

		/* Which of the process's CUDA devices it is, where known. */
		if (e && d->cuda_device >= 0)
			json_object_set_new(e, "cuda_gpu_id", json_integer(d->cuda_device));

		/* A process the probes never saw is named here, each time. */
		if (!proc_name(m, d->pid))
			read_comm(d->pid, name);
		set_process(e, proc_name(m, d->pid) ? proc_name(m, d->pid) : name[0] ? name : NULL);
		arr_add(a, e);
	}
	return a;
}

/* The operations called, with their durations and bytes. */
static json_t *snapshot_nccl(const struct gpu_metrics *m)
{
	json_t *a = json_array();

	for (int i = 0; i < NCCL_OP_MAX && a; i++) {
		json_t *n;

		if (!m->nccl[i].calls)
			continue;
		n = hist_json(&m->nccl[i].dur, NS_PER_MS, "ms");
		if (n) {
			json_object_set_new(n, "op", json_string(nccl_op_name(i)));
			json_object_set_new(n, "bytes", json_integer((json_int_t)m->nccl[i].bytes));
		}
		arr_add(a, n);
	}
	return a;
}

static json_t *snapshot_devices(const struct gpu_metrics *m)
{
	json_t *a = json_array();
	int devs[64];
	size_t ndevs = devices(m, devs, ARRAY_SIZE(devs));

	for (size_t i = 0; i < ndevs && a; i++) {
		const struct device_cap *c = cap_find(m, devs[i]);
		uint64_t used = device_used(m, devs[i]);
		json_t *d = json_pack("{sI sI}", "gpu_id", (json_int_t)devs[i], "used_bytes",
				      (json_int_t)used);

		if (d && devs[i] >= 0 && devs[i] < GPU_METRICS_MAX_DEVICES &&
		    m->has_drv_used[devs[i]])
			json_object_set_new(d, "nvml_used_bytes",
					    json_integer((json_int_t)m->drv_used[devs[i]]));
		if (d && c && c->bytes) {
			json_object_set_new(d, "capacity_bytes",
					    json_integer((json_int_t)c->bytes));
			json_object_set_new(d, "capacity_source", json_string(c->source));
			json_object_set_new(d, "used_ratio",
					    json_real((double)used / (double)c->bytes));
		}
		arr_add(a, d);
	}
	return a;
}

static json_t *snapshot_stuck(const struct gpu_metrics *m)
{
	json_t *a = json_array();

	for (size_t i = 0; i < m->nstuck && a; i++) {
		const struct stuck_entry *s = &m->stuck[i];
		char comm[24];
		json_t *e;

		snprintf(comm, sizeof(comm), "0x%" PRIx64, s->comm);
		e = json_pack("{sI ss si si ss sf}", "pid", (json_int_t)s->pid, "op",
			      nccl_op_name(s->op), "rank", s->rank, "nranks", s->nranks, "comm",
			      comm, "seconds", s->seconds);
		set_process(e, proc_name(m, s->pid));
		arr_add(a, e);
	}
	return a;
}

static json_t *snapshot_wait_stuck(const struct gpu_metrics *m, bool sync)
{
	json_t *a = json_array();

	for (size_t i = 0; i < m->nwaits_stuck && a; i++) {
		const struct wait_stuck_entry *s = &m->waits_stuck[i];
		json_t *e;

		if (sync != (s->api[0] != '\0'))
			continue;
		e = json_pack("{sI sI ss si ss sf}", "pid", (json_int_t)s->pid, "tid",
			      (json_int_t)s->tid, "file", s->file, "line", s->line, "function",
			      s->function, "seconds", s->seconds);
		if (e && sync)
			json_object_set_new(e, "api", json_string(s->api));
		set_process(e, proc_name(m, s->pid));
		arr_add(a, e);
	}
	return a;
}

static json_t *snapshot_health(const struct gpu_metrics *m)
{
	const struct agent_health *h = &m->health;

	return json_pack("{sI sI sI sI sI sI sf sI sI}", "cpu_samples", (json_int_t)h->cpu_samples,
			 "cpu_drops", (json_int_t)h->cpu_drops, "gpu_events",
			 (json_int_t)h->gpu_events, "gpu_drops", (json_int_t)h->gpu_drops,
			 "probes_attached", (json_int_t)h->probe_attached, "probe_attach_failures",
			 (json_int_t)h->probe_attach_failures, "map_fill_ratio", h->map_fill_ratio,
			 "tracked_processes", (json_int_t)m->nprocs, "untracked_events",
			 (json_int_t)m->untracked_events);
}

json_t *gpu_metrics__snapshot(struct gpu_metrics *m)
{
	json_t *o = json_object();
	const struct hist *ar = &m->nccl[NCCL_OP_ALLREDUCE].dur;

	if (!o)
		return NULL;
	pthread_mutex_lock(&m->lock);
	sort_procs(m);
	read_names(m);

	/* The seed's fields. */
	obj_set(o, "gpu_utilization", snapshot_memory_keys(m));
	obj_set(o, "cuda_latency_p50_us", json_real(q_scaled(&m->launch_all, 0.5, NS_PER_US)));
	obj_set(o, "cuda_latency_p99_us", json_real(q_scaled(&m->launch_all, 0.99, NS_PER_US)));
	obj_set(o, "nccl_allreduce_p50_ms", json_real(q_scaled(ar, 0.5, NS_PER_MS)));
	obj_set(o, "nccl_allreduce_p99_ms", json_real(q_scaled(ar, 0.99, NS_PER_MS)));
	obj_set(o, "dataloader_wait_p50_ms",
		json_real(q_scaled(&m->dataloader_all, 0.5, NS_PER_MS)));
	obj_set(o, "last_update_ms", json_integer((json_int_t)m->last_update_ms));

	/* Sonde's own. */
	obj_set(o, "simulated", json_boolean(m->simulated));
	obj_set(o, "node", json_string(m->node));
	obj_set(o, "time_ms", json_integer((json_int_t)wall_ms()));
	obj_set(o, "start_ms", json_integer((json_int_t)m->start_ms));
	obj_set(o, "dataloader_wait_p99_ms",
		json_real(q_scaled(&m->dataloader_all, 0.99, NS_PER_MS)));
	obj_set(o, "cuda_launches_total", json_integer((json_int_t)m->launch_all.count));
	obj_set(o, "dataloader_waits_total", json_integer((json_int_t)m->dataloader_all.count));
	obj_set(o, "processes", snapshot_processes(m));
	obj_set(o, "nccl", snapshot_nccl(m));
	obj_set(o, "devices", snapshot_devices(m));
	obj_set(o, "nvml_memory", snapshot_driver_memory(m));
	obj_set(o, "stuck", snapshot_stuck(m));
	obj_set(o, "dataloader_stuck", snapshot_wait_stuck(m, false));
	obj_set(o, "sync_stuck", snapshot_wait_stuck(m, true));
	obj_set(o, "health", snapshot_health(m));
	pthread_mutex_unlock(&m->lock);
	return o;
}

char *gpu_metrics__snapshot_text(void *src, size_t *len)
{
	json_t *o = gpu_metrics__snapshot(src);
	char *s;

	if (!o) {
		errno = ENOMEM;
		return NULL;
	}
	s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(10));
	json_decref(o);
	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	if (len)
		*len = strlen(s);
	return s;
}
