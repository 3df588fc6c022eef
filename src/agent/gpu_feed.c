/* gpu_feed.c: from decoded GPU calls to metrics, gpu_launch / gpu_wait
 * profiles and stuck collectives. See gpu_feed.h. */
#include "agent/gpu_feed.h"
#include "agent/gpu_time.h"
#include "agent/gpu_trace.h"
#include "common/clock.h"
#include "cupti/sonde_cupti.h"
#include "agent/dataloader.h"
#include "probe/gpu_probes.h"
#include "agent/proc_time.h"
#include "agent/stack_agg.h"
#include "common/htable.h"
#include "common/log.h"
#include "common/utf8.h"
#include "common/xalloc.h"
#include "metrics/gpu_metrics.h"
#include "profile/profile.h"
#include "symbolize/symbolize.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

#define DEFAULT_MAX_STACKS 65536
#define DEFAULT_STUCK_MIN_NS ((uint64_t)NS_PER_SEC)
#define MAX_PIDS 4096 /* processes whose comm and kernel names are kept */
#define MAX_KERNELS_PER_PID 65536
/* A launch whose kernel can't be named is asked about again at the next
 * launches of that kernel (a later stack may show nvcc's stub where this
 * one did not), this many times per process before "unknown" sticks. */
#define MAX_UNKNOWN_TRIES 256
#define MAX_SYNC_WAITS 4096 /* threads in a synchronisation whose stacks are kept */

/* A kernel name, by (pid, stub): symbolizing a host stub on every launch
 * would cost a lookup per launch. */
struct kernel_name {
	UT_hash_handle hh;
	uint64_t stub; /* or the kernel handle, for a launch without a stub */
	char name[];
};

/* The kernels launched into a stream while it was captured: what a graph
 * made from the capture runs, by name. Keyed by stream (a capture going
 * on), graph (captured) or executable graph (instantiated). */
#define GRAPH_KINDS 8		/* distinct kernel names kept, the rest counted */
#define MAX_GRAPHS_PER_PID 1024 /* of each of the three */
struct graph_nodes {
	UT_hash_handle hh;
	uint64_t key;
	uint32_t nkinds, total, more; /* more: launches of kernels past GRAPH_KINDS */
	struct graph_kind {
		char *name;
		uint32_t count;
	} kind[GRAPH_KINDS];
	char *label; /* "[CUDA graph: a ×2, b]", made at the first launch */
};

/* A stream that joined a capture begun on another (it waited on an event
 * recorded in the capture): its launches are the capture's. */
struct joined {
	UT_hash_handle hh;
	uint64_t stream, origin;
};

struct feed_pid {
	UT_hash_handle hh;
	uint32_t pid;
	char comm[16];
	bool named;  /* the metrics were told comm */
	bool exited; /* forgotten at the end of the window */
	/* The last work it queued was a collective: a synchronisation now
	 * waits for communication, not for its kernels. */
	bool coll_last;
	struct kernel_name *kernels;
	size_t nkernels;
	uint32_t unknown_tries; /* launches that could not be named, asked again */
	struct graph_nodes *captures, *graphs, *execs;
	uint32_t ncaptures, ngraphs, nexecs;
	struct joined *joined;
	uint32_t njoined;
};

/* A stuck collective reported at the last check, to clear it when its
 * thread returns. */
struct stuck_key {
	uint32_t pid;
	int op, rank, nranks;
	uint64_t comm;
	double seconds;
	bool seen;
};

/* A thread in a CUDA synchronisation, with its stack at the call: what a
 * stuck one waits on is named from it. */
struct sync_wait {
	UT_hash_handle hh;
	uint32_t tid, pid;
	uint64_t since_ns;
	const char *api; /* static */
	bool named;	 /* where was read */
	bool reported;	 /* sonde_cuda_sync_stuck_seconds has it */
	bool seen;	 /* blocked at this check */
	struct python_line where;
	int nips;
	uint64_t ips[GPU_MAX_FRAMES];
};

/* A DataLoader wait reported stuck at the last check, to clear it when
 * its batch comes. */
struct dl_stuck_key {
	uint32_t pid, tid;
	bool seen;
};

struct gpu_feed {
	struct gpu_feed_opts opts;
	struct stack_agg *launch, *wait;
	struct gpu_time *gpu_time; /* kernels' GPU time by launching stack (CUPTI) */
	struct gpu_trace *trace;   /* ... and on a timeline; NULL: not kept */
	struct feed_pid *pids;
	size_t npids;
	struct stuck_key *stuck;
	size_t nstuck, stuck_cap;
	struct stack *scratch; /* a launch's or a wait's stack */
	struct dataloader *dl; /* PyTorch DataLoader waits */
	struct dl_stuck_key *dl_stuck;
	size_t ndl_stuck, dl_stuck_cap;
	struct proc_time *times; /* where each process's threads spend time */
	struct sync_wait *syncs; /* by tid */
	size_t nsyncs;
	struct gpu_feed_stats st;
};

struct gpu_feed *gpu_feed__new(const struct gpu_feed_opts *opts)
{
	struct gpu_feed *f = xcalloc(1, sizeof(*f));
	size_t max = opts->max_stacks ? opts->max_stacks : DEFAULT_MAX_STACKS;

	f->opts = *opts;
	if (!f->opts.stuck_min_ns)
		f->opts.stuck_min_ns = DEFAULT_STUCK_MIN_NS;
	if (opts->profiles) {
		f->launch = stack_agg__new(opts->sym, max);
		f->wait = stack_agg__new(opts->sym, max);
		f->gpu_time = gpu_time__new(opts->sym, max);
		if (opts->trace) {
			f->trace = gpu_trace__new();
			gpu_trace__set_launches(f->trace, f->gpu_time, opts->sym);
		}
		stack_agg__set_leaf_module(f->launch, "[cuda]");
		stack_agg__set_leaf_module(f->wait, "[cuda]");
		stack_agg__set_service(f->launch, opts->service, opts->service_ctx);
		stack_agg__set_service(f->wait, opts->service, opts->service_ctx);
	}
	f->scratch = stack__new();
	f->dl = dataloader__new(opts->sym, opts->metrics);
	f->times = proc_time__new();
	return f;
}

static void nodes_free(struct graph_nodes *g)
{
	for (uint32_t i = 0; i < g->nkinds; i++)
		free(g->kind[i].name);
	free(g->label);
	free(g);
}

static void pid_free(struct feed_pid *p)
{
	HTABLE_CLEAR(hh, p->kernels, k, free(k));
	HTABLE_CLEAR(hh, p->captures, g, nodes_free(g));
	HTABLE_CLEAR(hh, p->graphs, g, nodes_free(g));
	HTABLE_CLEAR(hh, p->execs, g, nodes_free(g));
	HTABLE_CLEAR(hh, p->joined, j, free(j));
	free(p);
}

void gpu_feed__free(struct gpu_feed *f)
{
	if (!f)
		return;
	HTABLE_CLEAR(hh, f->pids, p, pid_free(p));
	stack_agg__free(f->launch);
	stack_agg__free(f->wait);
	gpu_time__free(f->gpu_time);
	gpu_trace__free(f->trace);
	free(f->stuck);
	free(f->scratch);
	dataloader__free(f->dl);
	free(f->dl_stuck);
	proc_time__free(f->times);
	HTABLE_CLEAR(hh, f->syncs, w, free(w));
	free(f);
}

static struct feed_pid *pid_find(struct gpu_feed *f, uint32_t pid)
{
	struct feed_pid *p;

	HASH_FIND(hh, f->pids, &pid, sizeof(pid), p);
	return p;
}

/* The state of pid, made at its first event (NULL past MAX_PIDS). */
static struct feed_pid *pid_get(struct gpu_feed *f, uint32_t pid)
{
	struct feed_pid *p = pid_find(f, pid);

	if (p || f->npids >= MAX_PIDS)
		return p;
	p = xcalloc(1, sizeof(*p));
	p->pid = pid;
	snprintf(p->comm, sizeof(p->comm), "%s", symbolizer__comm(f->opts.sym, pid));
	utf8_clean(p->comm, sizeof(p->comm) - 1); /* a label's value (point_log.c) */
	HASH_ADD(hh, f->pids, pid, sizeof(p->pid), p);
	f->npids++;
	proc_time__track(f->times, pid);
	return p;
}

const char *gpu_feed__comm(struct gpu_feed *f, uint32_t pid)
{
	struct feed_pid *p = pid_find(f, pid);

	return p ? p->comm : "";
}

const char *gpu_feed__name(struct gpu_feed *f, uint32_t pid)
{
	const char *comm = gpu_feed__comm(f, pid);

	if (!*comm && f->opts.sym)
		comm = symbolizer__comm(f->opts.sym, pid);
	return *comm ? comm : "?";
}

#define DEVICE_STUB "__device_stub__"
#define STUB_FRAMES 6 /* the stub, nvcc's launch helper, the runtime's frames */

/* nvcc (12, 13) launches a kernel from a host function named
 * __device_stub__<the kernel's mangled name without its leading '_'>,
 * sometimes through __cudaLaunchKernel_helper: such a caller names the
 * kernel. Writes the kernel's demangled name into buf; false when no
 * caller near the launch is a stub. */
static bool kernel_from_stub_frame(struct gpu_feed *f, const struct gpu_event *ev, uint32_t image,
				   char *buf, size_t size)
{
	for (int i = 0; i < ev->nips && i < STUB_FRAMES; i++) {
		const char *name, *end;
		struct sym_info si;
		char mangled[256];
		char *d;

		symbolizer__resolve_image(f->opts.sym, image, ev->ips[i] - 1, &si);
		name = si.func;
		if (!name || strncmp(name, DEVICE_STUB, strlen(DEVICE_STUB)))
			continue;
		name += strlen(DEVICE_STUB);
		end = name + strcspn(name, "(");
		if (*name != 'Z' || end - name >= (long)sizeof(mangled) - 1)
			return false;
		snprintf(mangled, sizeof(mangled), "_%.*s", (int)(end - name), name);
		d = sym_demangle(mangled);
		snprintf(buf, size, "%s", d ? d : mangled);
		free(d);
		return true;
	}
	return false;
}

/* ---- CUDA graphs: what a graph launch runs ---------------------------- */

static struct graph_nodes *nodes_find(struct graph_nodes *head, uint64_t key)
{
	struct graph_nodes *g;

	HASH_FIND(hh, head, &key, sizeof(key), g);
	return g;
}

/* Puts g under key in *head, replacing what was there; counted in *n,
 * bounded (beyond the bound g is freed). */
static void nodes_put(struct graph_nodes **head, uint32_t *n, uint64_t key, struct graph_nodes *g)
{
	struct graph_nodes *old = nodes_find(*head, key);

	if (old) {
		HASH_DEL(*head, old);
		nodes_free(old);
		(*n)--;
	}
	if (*n >= MAX_GRAPHS_PER_PID) {
		nodes_free(g);
		return;
	}
	g->key = key;
	HASH_ADD(hh, *head, key, sizeof(g->key), g);
	(*n)++;
}

static struct graph_nodes *nodes_copy(const struct graph_nodes *src)
{
	struct graph_nodes *g = xcalloc(1, sizeof(*g));

	g->nkinds = src->nkinds;
	g->total = src->total;
	g->more = src->more;
	for (uint32_t i = 0; i < src->nkinds; i++) {
		g->kind[i].name = xstrdup(src->kind[i].name);
		g->kind[i].count = src->kind[i].count;
	}
	return g;
}

/* One more node of g runs kernel name. */
static void nodes_add(struct graph_nodes *g, const char *name)
{
	uint32_t i;

	g->total++;
	for (i = 0; i < g->nkinds && strcmp(g->kind[i].name, name); i++)
		;
	if (i < g->nkinds) {
		g->kind[i].count++;
	} else if (g->nkinds < GRAPH_KINDS) {
		g->kind[g->nkinds].name = xstrdup(name);
		g->kind[g->nkinds++].count = 1;
	} else {
		g->more++;
	}
}

/* The capture stream's launches go into: its own, or the one it joined. */
static struct graph_nodes *capture_of(struct feed_pid *p, uint64_t stream)
{
	struct graph_nodes *g = nodes_find(p->captures, stream);
	struct joined *j;

	if (g)
		return g;
	HASH_FIND(hh, p->joined, &stream, sizeof(stream), j);
	return j ? nodes_find(p->captures, j->origin) : NULL;
}

/* Streams stop being part of origin's capture (it ended, or began anew). */
static void unjoin(struct feed_pid *p, uint64_t origin)
{
	struct joined *j, *tmp;

	HASH_ITER(hh, p->joined, j, tmp)
	{
		if (j->origin != origin && j->stream != origin)
			continue;
		HASH_DEL(p->joined, j);
		p->njoined--;
		free(j);
	}
}

/* stream joined the capture begun on origin. */
static void join(struct feed_pid *p, uint64_t stream, uint64_t origin)
{
	struct joined *j;

	if (!nodes_find(p->captures, origin) || stream == origin)
		return;
	HASH_FIND(hh, p->joined, &stream, sizeof(stream), j);
	if (!j) {
		if (p->njoined >= MAX_GRAPHS_PER_PID)
			return;
		j = xcalloc(1, sizeof(*j));
		j->stream = stream;
		HASH_ADD(hh, p->joined, stream, sizeof(j->stream), j);
		p->njoined++;
	}
	j->origin = origin;
}

/* A kernel launched into a stream being captured: a node of its graph. */
static void graph_node(struct feed_pid *p, const struct gpu_event *ev, const char *name)
{
	struct graph_nodes *g = capture_of(p, ev->launch.stream);

	if (g)
		nodes_add(g, name);
}

static int kind_cmp(const void *a, const void *b)
{
	const struct graph_kind *x = a, *y = b;
	int c = (y->count > x->count) - (y->count < x->count);

	return c ? c : strcmp(x->name, y->name);
}

/* "[CUDA graph: matmul(...) ×2, softmax(...)]": what an executable graph
 * runs, most launched first, then by name, cut with "..." past 480 bytes; "[CUDA graph]"
 * when its capture was not seen. */
static const char *graph_label(struct feed_pid *p, const struct gpu_event *ev)
{
	struct graph_nodes *g = p ? nodes_find(p->execs, ev->launch.func) : NULL;
	char buf[480];
	FILE *out;

	if (!g || !g->total)
		return "[CUDA graph]";
	if (g->label)
		return g->label;
	qsort(g->kind, g->nkinds, sizeof(g->kind[0]), kind_cmp);
	memset(buf, 0, sizeof(buf));
	out = fmemopen(buf, sizeof(buf) - 4, "w");
	if (!out)
		return "[CUDA graph]";
	fputs("[CUDA graph: ", out);
	for (uint32_t i = 0; i < g->nkinds; i++) {
		fprintf(out, "%s%s", i ? ", " : "", g->kind[i].name);
		if (g->kind[i].count > 1)
			fprintf(out, " ×%u", g->kind[i].count);
	}
	if (g->more)
		fprintf(out, ", %u more", g->more);
	fputc(']', out);
	fclose(out);
	/* fmemopen stops at its size: a label that did not fit ends "...]". */
	if (buf[strlen(buf) - 1] != ']')
		strcpy(buf + strlen(buf), "...]");
	g->label = xstrdup(buf);
	return g->label;
}

/* The name a launch shows in the gpu_launch profile: the driver's name for
 * its handle, else its host stub's symbol, else nvcc's stub among its
 * callers (a handle looked up before the probes were on; a driver launch
 * the runtime made while only the driver was probed), cached per process
 * by stub or handle. "[unknown kernel]" only when none of these names it,
 * counted in the stats. */
static const char *kernel_name(struct gpu_feed *f, struct feed_pid *p, const struct gpu_event *ev,
			       char *buf, size_t size)
{
	uint64_t key = ev->launch.stub ? ev->launch.stub : ev->launch.func;
	struct kernel_name *k;
	struct sym_info si = {0};
	uint32_t image;
	size_t len;

	if (ev->launch.graph)
		return graph_label(p, ev);
	if (ev->launch.name)
		return ev->launch.name;
	if (!key || !p) {
		f->st.unknown_kernels++;
		return "[unknown kernel]";
	}
	HASH_FIND(hh, p->kernels, &key, sizeof(key), k);
	if (k)
		return k->name;
	image = symbolizer__image(f->opts.sym, ev->pid, ev->ts_ns);
	if (ev->launch.stub)
		symbolizer__resolve_image(f->opts.sym, image, ev->launch.stub, &si);
	/* Outside every mapping: not a host stub but a kernel handle whose
	 * stub we never learnt (its __cudaGetKernel ran before we attached);
	 * nvcc's own stub may still say which kernel it launches. */
	if (si.module)
		sym_info__name(&si, buf, size);
	else if (!kernel_from_stub_frame(f, ev, image, buf, size)) {
		snprintf(buf, size, "[unknown kernel]");
		f->st.unknown_kernels++;
		if (p->unknown_tries++ < MAX_UNKNOWN_TRIES)
			return buf;
	}
	if (p->nkernels >= MAX_KERNELS_PER_PID)
		return buf;
	len = strlen(buf);
	k = xmalloc(sizeof(*k) + len + 1);
	memset(&k->hh, 0, sizeof(k->hh));
	k->stub = key;
	memcpy(k->name, buf, len + 1);
	HASH_ADD(hh, p->kernels, stub, sizeof(k->stub), k);
	p->nkernels++;
	return k->name;
}

/* A kernel node added to a graph (made empty, or by a capture), named as
 * a launch of its kernel would be. */
static void graph_add(struct gpu_feed *f, struct feed_pid *p, const struct gpu_event *ev)
{
	struct graph_nodes *g = nodes_find(p->graphs, ev->graph.graph);
	struct gpu_event k = {
		.type = GPU_EV_LAUNCH,
		.api = ev->api,
		.pid = ev->pid,
		.tid = ev->tid,
		.ts_ns = ev->ts_ns,
		.launch = {.func = ev->graph.func, .stub = ev->graph.stub, .name = ev->graph.name},
	};
	char buf[512];

	if (!ev->graph.graph)
		return;
	if (!g) {
		nodes_put(&p->graphs, &p->ngraphs, ev->graph.graph,
			  xcalloc(1, sizeof(struct graph_nodes)));
		g = nodes_find(p->graphs, ev->graph.graph);
		if (!g)
			return;
	}
	nodes_add(g, kernel_name(f, p, &k, buf, sizeof(buf)));
}

/* A capture began or ended, a graph was instantiated or a kernel node added
 * to one. */
static void graph_event(struct gpu_feed *f, struct feed_pid *p, const struct gpu_event *ev)
{
	struct graph_nodes *g;

	switch (ev->graph.op) {
	case GPU_GRAPH_CAPTURE_BEGIN:
		unjoin(p, ev->graph.stream);
		nodes_put(&p->captures, &p->ncaptures, ev->graph.stream,
			  xcalloc(1, sizeof(struct graph_nodes)));
		break;
	case GPU_GRAPH_CAPTURE_JOIN:
		join(p, ev->graph.stream, ev->graph.origin);
		break;
	case GPU_GRAPH_CAPTURE_END:
		unjoin(p, ev->graph.stream);
		g = nodes_find(p->captures, ev->graph.stream);
		if (!g)
			break;
		HASH_DEL(p->captures, g);
		p->ncaptures--;
		if (ev->graph.graph)
			nodes_put(&p->graphs, &p->ngraphs, ev->graph.graph, g);
		else
			nodes_free(g);
		break;
	case GPU_GRAPH_INSTANTIATE:
		g = nodes_find(p->graphs, ev->graph.graph);
		if (g && ev->graph.exec)
			nodes_put(&p->execs, &p->nexecs, ev->graph.exec, nodes_copy(g));
		break;
	case GPU_GRAPH_ADD_KERNEL:
		graph_add(f, p, ev);
		break;
	}
}

static uint64_t agg_dropped(struct stack_agg *a)
{
	struct stack_agg_stats st;

	stack_agg__stats(a, &st);
	return st.dropped;
}

/* The event's stack, for stack_agg: named by the process and thread names
 * the probe read, else by the process's name as the feed knows it. */
static const struct stack *event_stack(struct gpu_feed *f, const struct gpu_event *ev,
				       const struct feed_pid *p)
{
	struct stack *s = f->scratch;

	s->ts_ns = ev->ts_ns;
	s->pid = ev->pid;
	s->tid = ev->tid;
	s->cpu = 0;
	memset(s->comm, 0, sizeof(s->comm));
	memset(s->thread, 0, sizeof(s->thread));
	if (ev->process[0])
		memcpy(s->comm, ev->process, sizeof(s->comm) - 1);
	else if (p)
		memcpy(s->comm, p->comm, sizeof(s->comm) - 1);
	memcpy(s->thread, ev->thread, sizeof(s->thread) - 1);
	stack__set_user(s, ev->ips, ev->nips, ev->flags & GPU_RF_TRUNCATED);
	return s;
}

static enum gpu_copy_kind copy_kind(uint32_t kind)
{
	return kind <= GPU_COPY_DEFAULT ? (enum gpu_copy_kind)kind : GPU_COPY_DEFAULT;
}

/* Forgets a synchronisation, and its stuck series (clear). */
static void sync_del(struct gpu_feed *f, struct sync_wait *w, bool clear)
{
	if (clear && w->reported && f->opts.metrics)
		gpu_metrics__set_sync_stuck(f->opts.metrics, w->pid, w->tid, w->api, NULL, 0, NULL,
					    0);
	HASH_DEL(f->syncs, w);
	free(w);
	f->nsyncs--;
}

/* A thread entered a synchronisation (ev SYNC_BEGIN): its stack is kept
 * while it waits. */
static void sync_begin(struct gpu_feed *f, const struct gpu_event *ev)
{
	struct sync_wait *w;

	HASH_FIND(hh, f->syncs, &ev->tid, sizeof(ev->tid), w);
	if (w)
		sync_del(f, w, true);
	if (f->nsyncs >= MAX_SYNC_WAITS)
		return;
	w = xcalloc(1, sizeof(*w));
	w->tid = ev->tid;
	w->pid = ev->pid;
	w->since_ns = ev->ts_ns;
	w->api = ev->api_name;
	w->nips = ev->nips < 0 ? 0 : ev->nips > GPU_MAX_FRAMES ? GPU_MAX_FRAMES : ev->nips;
	if (w->nips)
		memcpy(w->ips, ev->ips, (size_t)w->nips * sizeof(w->ips[0]));
	HASH_ADD(hh, f->syncs, tid, sizeof(w->tid), w);
	f->nsyncs++;
}

static void sync_end(struct gpu_feed *f, const struct gpu_event *ev)
{
	struct sync_wait *w;

	HASH_FIND(hh, f->syncs, &ev->tid, sizeof(ev->tid), w);
	if (w)
		sync_del(f, w, true);
}

/* What a synchronisation of p waits for: its last queued work. */
static enum proc_state sync_state(const struct feed_pid *p)
{
	return p && p->coll_last ? PS_COMMUNICATION : PS_GPU;
}

/* CUPTI's memory and memory pool records: each process's device memory. */
static void cupti_memory(struct gpu_metrics *m, const struct gpu_event *ev)
{
	unsigned op = ev->cupti.reason & 0xff, kind = ev->cupti.reason >> 8 & 0xff,
		 pool = ev->cupti.reason >> 16 & 0xff;
	struct gpu_cupti_mem r = {
		.alloc = op == 1,
		.bytes = ev->cupti.bytes,
		.from = pool == SONDE_CUPTI_POOL_LOCAL	    ? GPU_MEM_POOL
			: pool == SONDE_CUPTI_POOL_IMPORTED ? GPU_MEM_IMPORTED_POOL
							    : GPU_MEM_PLAIN,
		.pool = ev->cupti.pool,
		.pool_size = ev->cupti.pool_size,
	};

	if (ev->type == GPU_EV_CUPTI_MEMORY_POOL) {
		/* An imported pool's memory is its exporter's. */
		if (pool == SONDE_CUPTI_POOL_LOCAL)
			gpu_metrics__cupti_pool(m, ev->pid, ev->device, ev->cupti.pool,
						ev->cupti.pool_size,
						op == SONDE_CUPTI_POOL_DESTROYED);
		return;
	}
	/* Device memory only: CUPTI also records pinned and pageable host
	 * memory (CUpti_ActivityMemoryKind 0-2). */
	if (kind >= SONDE_CUPTI_MEMORY_KIND_DEVICE)
		gpu_metrics__cupti_memory(m, ev->pid, ev->device, &r);
}

/* A CUPTI library event, onto the kernel timeline. */
static void trace_event(struct gpu_feed *f, const struct gpu_event *ev)
{
	if (ev->type == GPU_EV_CUPTI_CLOCK) {
		gpu_trace__clock(f->trace, ev->pid, ev->clock.gpu, ev->clock.host);
	} else if (ev->type == GPU_EV_CUPTI_LAUNCH) {
		gpu_trace__launch(f->trace, ev->pid, ev->tid, ev->ts_ns, ev->cupti.correlation);
	} else if (ev->type == GPU_EV_CUPTI_KERNEL) {
		gpu_trace__name(f->trace, ev->pid, gpu_feed__comm(f, ev->pid));
		gpu_trace__kernel(f->trace, ev->pid, ev->device, ev->cupti.stream, ev->cupti.start,
				  ev->cupti.end, ev->cupti.correlation, ev->cupti.name);
	} else if (ev->type == GPU_EV_CUPTI_GRAPH) {
		gpu_trace__name(f->trace, ev->pid, gpu_feed__comm(f, ev->pid));
		gpu_trace__graph(f->trace, ev->pid, ev->device, ev->cupti.stream, ev->cupti.start,
				 ev->cupti.end, ev->cupti.correlation, ev->cupti.reason);
	} else if (ev->type == GPU_EV_CUPTI_SYNC) {
		gpu_trace__name(f->trace, ev->pid, gpu_feed__comm(f, ev->pid));
		gpu_trace__sync(f->trace, ev->pid, ev->cupti.stream, ev->cupti.start, ev->cupti.end,
				ev->cupti.correlation, ev->cupti.reason);
	} else if (ev->type == GPU_EV_CUPTI_COPY) {
		gpu_trace__name(f->trace, ev->pid, gpu_feed__comm(f, ev->pid));
		gpu_trace__copy(f->trace, ev->pid, ev->device, ev->cupti.stream, ev->cupti.start,
				ev->cupti.end, ev->cupti.correlation,
				gpu_copy_label(ev->cupti.copy_kind, ev->cupti.set),
				ev->cupti.bytes);
	}
}

void gpu_feed__event(void *ctx, const struct gpu_event *ev)
{
	struct gpu_feed *f = ctx;
	struct gpu_metrics *m = f->opts.metrics;
	bool profiles = f->opts.profiles;
	struct feed_pid *p = NULL;
	char buf[512];

	if (ev->type == GPU_EV_PROCESS_EXIT) {
		struct sync_wait *w, *wtmp;

		HASH_ITER(hh, f->syncs, w, wtmp)
		{
			if (w->pid == ev->pid)
				sync_del(f, w, false);
		}
		dataloader__event(f->dl, ev);
		if (m)
			gpu_metrics__process_exit(m, ev->pid);
		p = pid_find(f, ev->pid);
		if (p)
			p->exited = true;
		if (f->gpu_time)
			gpu_time__forget_pid(f->gpu_time, ev->pid);
		return;
	}
	/* Sonde's CUPTI library: a launch's stack, then its kernel's time. */
	if (ev->type == GPU_EV_CUPTI_NVTX) {
		if (f->gpu_time)
			gpu_time__nvtx(f->gpu_time, ev->pid, ev->cupti.nvtx, ev->cupti.name);
		return;
	}
	/* ... and PC sampling's stall samples. */
	if (ev->type == GPU_EV_CUPTI_STALL_REASON) {
		if (f->gpu_time)
			gpu_time__stall_reason(f->gpu_time, ev->pid, ev->cupti.reason,
					       ev->cupti.name);
		return;
	}
	if (ev->type == GPU_EV_CUPTI_STALL) {
		if (f->gpu_time)
			gpu_time__stall(f->gpu_time, ev->pid, ev->cupti.name, ev->cupti.cubin,
					ev->cupti.pc, ev->cupti.reason, ev->cupti.samples);
		return;
	}
	if (ev->type == GPU_EV_CUPTI_MEMORY || ev->type == GPU_EV_CUPTI_MEMORY_POOL) {
		if (f->gpu_time)
			gpu_time__memory(f->gpu_time);
		if (m)
			cupti_memory(m, ev);
		return;
	}
	if (ev->type == GPU_EV_CUPTI_SYNC) {
		if (f->gpu_time)
			gpu_time__sync(f->gpu_time);
		if (f->trace)
			trace_event(f, ev);
		return;
	}
	if (ev->type == GPU_EV_CUPTI_CUBIN) {
		if (f->gpu_time)
			gpu_time__cubin(f->gpu_time, ev->pid, ev->cupti.cubin, ev->cupti.name);
		return;
	}
	if (ev->type == GPU_EV_CUPTI_LAUNCH || ev->type == GPU_EV_CUPTI_KERNEL ||
	    ev->type == GPU_EV_CUPTI_COPY || ev->type == GPU_EV_CUPTI_CLOCK ||
	    ev->type == GPU_EV_CUPTI_GRAPH) {
		/* A graph run as a whole: the GPU busy from its first node's
		 * start to its last's end. */
		if ((ev->type == GPU_EV_CUPTI_KERNEL || ev->type == GPU_EV_CUPTI_GRAPH) && m)
			gpu_metrics__kernel(m, ev->pid, ev->device, ev->cupti.start, ev->cupti.end);
		if (f->trace)
			trace_event(f, ev);
		if (!f->gpu_time)
			return;
		if (ev->type == GPU_EV_CUPTI_CLOCK) {
			gpu_time__clock(f->gpu_time, ev->pid, ev->clock.dropped,
					ev->clock.stall_dropped);
		} else if (ev->type == GPU_EV_CUPTI_LAUNCH) {
			f->st.cupti_from_marker++;
			gpu_time__launch(f->gpu_time, ev->pid, ev->cupti.correlation,
					 ev->cupti.nvtx, event_stack(f, ev, pid_find(f, ev->pid)));
		} else if (ev->type == GPU_EV_CUPTI_KERNEL) {
			gpu_time__kernel(
				f->gpu_time, ev->pid, ev->cupti.correlation, ev->cupti.name,
				ev->cupti.end > ev->cupti.start ? ev->cupti.end - ev->cupti.start
								: 0);
		} else if (ev->type == GPU_EV_CUPTI_GRAPH) {
			gpu_time__graph(
				f->gpu_time, ev->pid, ev->cupti.correlation, ev->cupti.reason,
				ev->cupti.end > ev->cupti.start ? ev->cupti.end - ev->cupti.start
								: 0);
		} else {
			gpu_time__copy(f->gpu_time, ev->pid, ev->cupti.correlation,
				       ev->cupti.copy_kind, ev->cupti.set,
				       ev->cupti.end > ev->cupti.start
					       ? ev->cupti.end - ev->cupti.start
					       : 0,
				       ev->cupti.bytes);
		}
		return;
	}
	/* PyTorch's record_function scopes: DataLoader waits, whose
	 * processes are named like the others (a begin has the names). */
	if (ev->type == GPU_EV_RF_BEGIN || ev->type == GPU_EV_RF_END) {
		if (!dataloader__event(f->dl, ev))
			return;
		if (ev->type == GPU_EV_RF_END) {
			proc_time__wait(f->times, ev->pid, ev->tid, PS_INPUT, ev->rf.start_ns,
					ev->ts_ns, true);
			return;
		}
		p = pid_get(f, ev->pid);
	}
	if (ev->type == GPU_EV_LAUNCH || ev->type == GPU_EV_SYNC_BEGIN ||
	    ev->type == GPU_EV_SYNC_END || ev->type == GPU_EV_ALLOC ||
	    ev->type == GPU_EV_NCCL_BEGIN || ev->type == GPU_EV_NCCL_END ||
	    (ev->type == GPU_EV_GRAPH && profiles))
		p = pid_get(f, ev->pid);
	/* The name the probe read: the process's now, after an exec too;
	 * the metrics learn it when it changes (a process that exits before
	 * a snapshot reads /proc is still named). */
	if (p && ev->process[0]) {
		char name[sizeof(p->comm)];

		snprintf(name, sizeof(name), "%s", ev->process);
		utf8_clean(name, sizeof(name) - 1);
		if (strcmp(name, p->comm) || !p->named) {
			memcpy(p->comm, name, sizeof(name));
			p->named = true;
			if (m)
				gpu_metrics__set_name(m, ev->pid, p->comm);
			/* Its service and job, as its profiles' samples say. */
			if (m && f->opts.service) {
				const char *labels = NULL,
					   *svc = f->opts.service(f->opts.service_ctx, ev->pid,
								  p->comm, &labels);

				gpu_metrics__set_info(m, ev->pid, svc, labels);
			}
		}
	}

	/* A failed call had no effect: it launched, allocated, freed or
	 * copied nothing (gpu_probes.h). A failed wait still waited. */
	switch (ev->type) {
	case GPU_EV_LAUNCH:
		if (ev->ret)
			break;
		/* Sonde's CUPTI library told of it inside the call: its stack
		 * is its kernels' too. */
		if ((ev->flags & GPU_RF_CUPTI) && f->gpu_time) {
			gpu_time__launch(f->gpu_time, ev->pid, ev->launch.cupti, ev->launch.nvtx,
					 event_stack(f, ev, p));
			f->st.cupti_from_launch++;
		}
		if ((ev->flags & GPU_RF_CUPTI) && f->trace)
			gpu_trace__launch(f->trace, ev->pid, ev->tid, ev->ts_ns - ev->dur_ns,
					  ev->launch.cupti);
		if (p)
			p->coll_last = false;
		if (m)
			gpu_metrics__launch(m, ev->pid, ev->dur_ns);
		if (profiles) {
			const char *name;
			uint64_t before = agg_dropped(f->launch);

			name = kernel_name(f, p, ev, buf, sizeof(buf));
			if (p && p->captures && !ev->launch.graph)
				graph_node(p, ev, name);
			stack_agg__add_leaf(f->launch, event_stack(f, ev, p), name, 1);
			f->st.launches++;
			f->st.launch_drops += agg_dropped(f->launch) != before;
		}
		break;
	case GPU_EV_GRAPH:
		if (!ev->ret && p)
			graph_event(f, p, ev);
		break;
	case GPU_EV_ALLOC:
		if (!ev->ret && m)
			gpu_metrics__alloc(m, ev->pid, ev->device, ev->mem.size);
		break;
	case GPU_EV_FREE:
		if (!ev->ret && ev->mem.size && m)
			gpu_metrics__release(m, ev->pid, ev->device, ev->mem.size);
		break;
	case GPU_EV_SYNC_BEGIN:
		sync_begin(f, ev);
		break;
	case GPU_EV_SYNC_END:
		sync_end(f, ev);
		proc_time__wait(f->times, ev->pid, ev->tid, sync_state(p), ev->ts_ns - ev->dur_ns,
				ev->ts_ns, true);
		if (m)
			gpu_metrics__wait(m, ev->pid, ev->api_name, ev->dur_ns);
		if (profiles && ev->dur_ns) {
			uint64_t before = agg_dropped(f->wait);

			stack_agg__add_leaf(f->wait, event_stack(f, ev, p), ev->api_name,
					    ev->dur_ns);
			f->st.waits++;
			f->st.wait_drops += agg_dropped(f->wait) != before;
		}
		break;
	case GPU_EV_MEMCPY:
		if (!ev->ret && (p = pid_find(f, ev->pid)))
			p->coll_last = false;
		if (!ev->ret && m)
			gpu_metrics__copy(m, ev->pid, copy_kind(ev->copy.kind), ev->copy.bytes);
		break;
	case GPU_EV_NCCL_BEGIN:
		if (p && ev->nccl.coll < GPU_COLL_NONE)
			p->coll_last = true;
		break;
	case GPU_EV_NCCL_GROUP:
		if (ev->dur_ns)
			proc_time__wait(f->times, ev->pid, ev->tid, PS_COMMUNICATION,
					ev->ts_ns - ev->dur_ns, ev->ts_ns, true);
		break;
	case GPU_EV_NCCL_END:
		proc_time__wait(f->times, ev->pid, ev->tid, PS_COMMUNICATION,
				ev->ts_ns - ev->dur_ns, ev->ts_ns, true);
		if (!ev->ret && m && ev->nccl.coll < GPU_COLL_NONE)
			gpu_metrics__nccl(m, ev->pid, (enum nccl_op)ev->nccl.coll, ev->nccl.bytes,
					  ev->dur_ns);
		break;
	case GPU_EV_CAPACITY:
		if (!ev->ret && m && ev->capacity.total && ev->device >= 0)
			gpu_metrics__device_capacity(m, ev->device, ev->capacity.total, "app");
		break;
	default:
		break;
	}
}

struct blocked_ctx {
	struct gpu_feed *f;
	uint64_t now_ns;
};

/* A thread blocked in a synchronisation for secs, waiting for kernels or
 * copies: reported with the Python line of its call. */
static void sync_stuck(struct gpu_feed *f, const struct gpu_blocked *b, double secs)
{
	struct sync_wait *w;

	HASH_FIND(hh, f->syncs, &b->tid, sizeof(b->tid), w);
	if (!w || w->since_ns != b->since_ns)
		return; /* entered before the probes, or its stack was not kept */
	if (!w->named) {
		w->named = true;
		if (!python_line(f->opts.sym, w->pid, w->ips, w->nips, &w->where))
			memset(&w->where, 0, sizeof(w->where));
	}
	w->seen = w->reported = true;
	if (f->opts.metrics)
		gpu_metrics__set_sync_stuck(f->opts.metrics, w->pid, w->tid, w->api, w->where.file,
					    w->where.line, w->where.function, secs);
}

static void on_blocked(void *ctx, const struct gpu_blocked *b)
{
	struct blocked_ctx *bc = ctx;
	struct gpu_feed *f = bc->f;
	bool nccl = GPU_API_LAYER(b->api) == GPU_LAYER_NCCL;
	const struct feed_pid *p = pid_find(f, b->pid);
	struct stuck_key *s;
	double secs;

	if (bc->now_ns < b->since_ns || bc->now_ns - b->since_ns < f->opts.stuck_min_ns)
		return;
	secs = (double)(bc->now_ns - b->since_ns) / NS_PER_SEC;
	/* A synchronisation waits for a collective when that was the last
	 * work its process queued, else for kernels or copies. */
	if (!nccl && !(p && p->coll_last)) {
		sync_stuck(f, b, secs);
		return;
	}
	if (!b->has_coll || b->coll >= GPU_COLL_NONE)
		return;
	for (size_t i = 0; i < f->nstuck; i++) {
		s = &f->stuck[i];
		if (s->pid == b->pid && s->op == (int)b->coll && s->rank == b->rank &&
		    s->comm == b->comm) {
			/* Several threads of one rank: the longest wait. */
			if (!s->seen || secs > s->seconds)
				s->seconds = secs;
			s->seen = true;
			return;
		}
	}
	xgrow((void **)&f->stuck, &f->stuck_cap, f->nstuck + 1, sizeof(*f->stuck));
	f->stuck[f->nstuck++] = (struct stuck_key){
		.pid = b->pid,
		.op = (int)b->coll,
		.rank = b->rank,
		.nranks = b->nranks,
		.comm = b->comm,
		.seconds = secs,
		.seen = true,
	};
}

/* A DataLoader wait under way: reported once it is older than the stuck
 * threshold, with the line of the loop that waits. */
static void on_waiting(void *ctx, const struct dataloader_wait *w)
{
	struct blocked_ctx *bc = ctx;
	struct gpu_feed *f = bc->f;
	struct dl_stuck_key *s = NULL;

	if (bc->now_ns < w->since_ns || bc->now_ns - w->since_ns < f->opts.stuck_min_ns)
		return;
	for (size_t i = 0; i < f->ndl_stuck && !s; i++)
		if (f->dl_stuck[i].pid == w->pid && f->dl_stuck[i].tid == w->tid)
			s = &f->dl_stuck[i];
	if (!s) {
		xgrow((void **)&f->dl_stuck, &f->dl_stuck_cap, f->ndl_stuck + 1,
		      sizeof(*f->dl_stuck));
		s = &f->dl_stuck[f->ndl_stuck++];
		*s = (struct dl_stuck_key){.pid = w->pid, .tid = w->tid};
	}
	s->seen = true;
	if (f->opts.metrics)
		gpu_metrics__set_dataloader_stuck(f->opts.metrics, w->pid, w->tid, w->file, w->line,
						  w->function,
						  (double)(bc->now_ns - w->since_ns) / NS_PER_SEC);
}

/* The DataLoader waits longer than the threshold now; those that ended
 * since the last check are cleared. */
static void check_dataloader(struct gpu_feed *f, uint64_t now_ns)
{
	struct blocked_ctx bc = {f, now_ns};
	size_t kept = 0;

	for (size_t i = 0; i < f->ndl_stuck; i++)
		f->dl_stuck[i].seen = false;
	dataloader__each_waiting(f->dl, on_waiting, &bc);
	for (size_t i = 0; i < f->ndl_stuck; i++) {
		struct dl_stuck_key *s = &f->dl_stuck[i];

		if (s->seen) {
			f->dl_stuck[kept++] = *s;
			continue;
		}
		if (f->opts.metrics)
			gpu_metrics__set_dataloader_stuck(f->opts.metrics, s->pid, s->tid, NULL, 0,
							  NULL, 0);
	}
	f->ndl_stuck = kept;
}

void gpu_feed__check_blocked(struct gpu_feed *f, struct gpu_probes *gp, uint64_t now_ns)
{
	struct blocked_ctx bc = {f, now_ns};
	struct sync_wait *w, *wtmp;
	size_t kept = 0;

	check_dataloader(f, now_ns);
	for (size_t i = 0; i < f->nstuck; i++)
		f->stuck[i].seen = false;
	HASH_ITER(hh, f->syncs, w, wtmp)
	{
		w->seen = false;
	}
	gpu_probes__each_blocked(gp, on_blocked, &bc);
	/* Reported, but no longer blocked as it was: its end was lost. */
	HASH_ITER(hh, f->syncs, w, wtmp)
	{
		if (w->reported && !w->seen)
			sync_del(f, w, true);
	}
	for (size_t i = 0; i < f->nstuck; i++) {
		struct stuck_key *s = &f->stuck[i];

		if (f->opts.metrics)
			gpu_metrics__set_stuck(f->opts.metrics, s->pid, (enum nccl_op)s->op,
					       s->rank, s->nranks, s->comm,
					       s->seen ? s->seconds : 0);
		if (s->seen)
			f->stuck[kept++] = *s;
	}
	f->nstuck = kept;
}

/* A thread in a synchronisation or a collective now: its wait so far. */
static void credit_blocked(void *ctx, const struct gpu_blocked *b)
{
	struct blocked_ctx *bc = ctx;
	enum proc_state s = GPU_API_LAYER(b->api) == GPU_LAYER_NCCL
				    ? PS_COMMUNICATION
				    : sync_state(pid_find(bc->f, b->pid));

	proc_time__wait(bc->f->times, b->pid, b->tid, s, b->since_ns, bc->now_ns, false);
}

static void credit_waiting(void *ctx, const struct dataloader_wait *w)
{
	struct blocked_ctx *bc = ctx;

	proc_time__wait(bc->f->times, w->pid, w->tid, PS_INPUT, w->since_ns, bc->now_ns, false);
}

struct judge_ctx {
	struct gpu_feed *f;
	proc_window_fn fn;
	void *ctx;
};

static void on_window(void *ctx, const struct proc_window *w)
{
	struct judge_ctx *jc = ctx;
	const struct feed_pid *p = pid_find(jc->f, w->pid);

	/* Its series went with it (gpu_metrics__process_exit). */
	if (jc->f->opts.metrics && !(p && p->exited))
		gpu_metrics__proc_window(jc->f->opts.metrics, w->pid, &w->total, &w->lead,
					 w->lead_tid, &w->verdict);
	if (jc->fn)
		jc->fn(jc->ctx, w);
}

void gpu_feed__on_cpu(struct gpu_feed *f, uint32_t pid, uint32_t tid, uint64_t ns)
{
	proc_time__add(f->times, pid, tid, PS_CPU, ns);
}

void gpu_feed__off_cpu(struct gpu_feed *f, uint32_t pid, uint32_t tid, long syscall, uint64_t ns)
{
	proc_time__add(f->times, pid, tid, verdict__syscall_cause(syscall), ns);
}

void gpu_feed__judge(struct gpu_feed *f, struct gpu_probes *gp, uint64_t now_ns, uint64_t wall_ns,
		     proc_window_fn fn, void *ctx)
{
	struct blocked_ctx bc = {f, now_ns};
	struct judge_ctx jc = {f, fn, ctx};

	/* The calls that ended by now: the blocked threads are those still
	 * blocked, not those whose end waits in the ring buffer. */
	if (gp) {
		gpu_probes__poll(gp, 0);
		gpu_probes__each_blocked(gp, credit_blocked, &bc);
	}
	dataloader__each_waiting(f->dl, credit_waiting, &bc);
	proc_time__window(f->times, wall_ns, on_window, &jc);
}

void gpu_feed__time_stats(struct gpu_feed *f, struct proc_time_stats *out)
{
	proc_time__stats(f->times, out);
}

int gpu_feed__gpu_time(struct gpu_feed *f, struct profile *p)
{
	return f->gpu_time ? gpu_time__profile(f->gpu_time, p) : 0;
}

int gpu_feed__gpu_memcpy(struct gpu_feed *f, struct profile *p)
{
	return f->gpu_time ? gpu_time__memcpy_profile(f->gpu_time, p) : 0;
}

int gpu_feed__gpu_stall(struct gpu_feed *f, struct profile *p)
{
	return f->gpu_time ? gpu_time__stall_profile(f->gpu_time, p, true) : 0;
}

int gpu_feed__gpu_stall_window(struct gpu_feed *f, struct profile *p)
{
	return f->gpu_time ? gpu_time__stall_profile(f->gpu_time, p, false) : 0;
}

struct gpu_trace *gpu_feed__trace(struct gpu_feed *f)
{
	return f->trace;
}

void gpu_feed__gpu_time_stats(struct gpu_feed *f, struct gpu_time_stats *out)
{
	if (f->gpu_time)
		gpu_time__stats(f->gpu_time, out);
	else
		memset(out, 0, sizeof(*out));
}

int gpu_feed__profiles(struct gpu_feed *f, struct profile *launch, struct profile *wait)
{
	struct feed_pid *p, *tmp;
	int err = 0;

	if (f->launch) {
		if (launch)
			err = stack_agg__to_profile(f->launch, launch);
		if (!err && wait)
			err = stack_agg__to_profile(f->wait, wait);
		stack_agg__reset(f->launch);
		stack_agg__reset(f->wait);
	}
	/* The window that needed them is written: forget the processes
	 * that exited during it. */
	HASH_ITER(hh, f->pids, p, tmp)
	{
		if (!p->exited)
			continue;
		proc_time__forget(f->times, p->pid);
		HASH_DEL(f->pids, p);
		pid_free(p);
		f->npids--;
	}
	return err;
}

void gpu_feed__stats(struct gpu_feed *f, struct gpu_feed_stats *out)
{
	*out = f->st;
}
