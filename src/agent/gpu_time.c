/* gpu_time.c: kernels' GPU time under their launching stacks. See
 * gpu_time.h. Launches wait in a hash table by (pid, correlation id) and in
 * a FIFO, the oldest given up first when it is full. A launch whose kernel
 * came stays a while in a second FIFO (GPU_TIME_MAX_JOINED): a graph's
 * launch has a kernel for each of its nodes, all with its id. */
#include "agent/gpu_time.h"
#include "agent/libscan.h"
#include "agent/stack_agg.h"
#include "cupti/sonde_cupti.h"
#include "profile/profile.h"
#include "python/names.h"
#include "symbolize/symbolize.h"

#include "common/htable.h"
#include "common/xalloc.h"

#include <stdlib.h>
#include <string.h>

_Static_assert(SONDE_CUPTI_NVTX_SEP == STACK_AGG_RANGE_SEP, "one separator of NVTX ranges");

struct pending {
	UT_hash_handle hh;
	uint64_t key;  /* pid << 32 | correlation */
	uint32_t nvtx; /* its NVTX range path's id, 0: none */
	bool joined;   /* a kernel of it came: on the joined FIFO */
	struct pending *older, *newer;
	struct cpu_sample s; /* up to its user frames: the rest is not allocated */
};

/* An NVTX range path of a process's, by its id. */
struct nvtx_ent {
	UT_hash_handle hh;
	uint64_t key; /* pid << 32 | id */
	char *path;
};

/* What CUPTI could not record in a process so far, as its library says. */
struct lost_ent {
	UT_hash_handle hh;
	uint32_t pid;
	uint64_t n;
};

struct gpu_time {
	struct lost_ent *lost;
	struct nvtx_ent *nvtx;
	size_t nnvtx;
	struct symbolizer *sym;
	struct stack_agg *agg;	  /* GPU ns: kernels, copies and sets */
	struct stack_agg *copies; /* bytes: copies and sets */
	struct pending *table;
	struct list {
		struct pending *oldest, *newest;
		size_t n;
	} waiting, joined;
	struct cpu_sample *scratch;
	struct gpu_time_stats st;
};

struct gpu_time *gpu_time__new(struct symbolizer *sym, size_t max_stacks)
{
	struct gpu_time *gt = xcalloc(1, sizeof(*gt));

	gt->sym = sym;
	gt->agg = stack_agg__new(sym, max_stacks);
	stack_agg__set_leaf_module(gt->agg, "[cuda]");
	gt->copies = stack_agg__new(sym, max_stacks);
	stack_agg__set_leaf_module(gt->copies, "[cuda]");
	gt->scratch = xcalloc(1, sizeof(*gt->scratch));
	return gt;
}

static struct list *list_of(struct gpu_time *gt, const struct pending *p)
{
	return p->joined ? &gt->joined : &gt->waiting;
}

static void list_del(struct list *l, struct pending *p)
{
	if (p->older)
		p->older->newer = p->newer;
	else
		l->oldest = p->newer;
	if (p->newer)
		p->newer->older = p->older;
	else
		l->newest = p->older;
	p->older = p->newer = NULL;
	l->n--;
}

static void list_add(struct list *l, struct pending *p)
{
	p->older = l->newest;
	p->newer = NULL;
	if (l->newest)
		l->newest->newer = p;
	else
		l->oldest = p;
	l->newest = p;
	l->n++;
}

/* Takes p out and frees it; a launch still waiting for its kernel is
 * counted as one that never told of it. */
static void drop_pending(struct gpu_time *gt, struct pending *p)
{
	HASH_DEL(gt->table, p);
	list_del(list_of(gt, p), p);
	if (!p->joined)
		gt->st.no_kernel++;
	free(p);
}

void gpu_time__free(struct gpu_time *gt)
{
	if (!gt)
		return;
	HTABLE_CLEAR(hh, gt->table, p, free(p));
	HTABLE_CLEAR(hh, gt->lost, e, free(e));
	HTABLE_CLEAR(hh, gt->nvtx, e, (free(e->path), free(e)));
	stack_agg__free(gt->agg);
	stack_agg__free(gt->copies);
	free(gt->scratch);
	free(gt);
}

/* Whether addr is in a CUDA or CUPTI library of the sample's process (or in
 * Sonde's CUPTI library). */
static bool in_cuda(struct gpu_time *gt, uint32_t image, uint64_t addr)
{
	struct sym_map_info m;
	const char *base;

	if (symbolizer__mapping(gt->sym, image, addr, &m) || !m.path)
		return false;
	base = strrchr(m.path, '/');
	base = base ? base + 1 : m.path;
	return (libscan_classify(m.path) & (LIBSCAN_RT | LIBSCAN_DRV | LIBSCAN_CUPTI)) ||
	       !strncmp(base, "libcupti.so", strlen("libcupti.so"));
}

/* The launch's frames above the application's: CUPTI's callback and the
 * CUDA API call it came from, as the launch profile, whose stack ends at
 * the caller of the API. The number of leaf frames to drop. */
static int cuda_frames(struct gpu_time *gt, const struct cpu_sample *s)
{
	uint32_t nk = s->nkern > 0 ? (uint32_t)s->nkern : 0;
	uint32_t image;
	int i = 0;

	if (!gt->sym || s->nuser <= 0)
		return 0;
	image = symbolizer__image(gt->sym, s->pid, s->ts_ns);
	while (i < s->nuser - 1 && in_cuda(gt, image, s->ips[nk + i] - (i ? 1 : 0)))
		i++;
	return i;
}

void gpu_time__launch(struct gpu_time *gt, uint32_t pid, uint32_t correlation, uint32_t nvtx,
		      const struct cpu_sample *s)
{
	uint64_t key = (uint64_t)pid << 32 | correlation;
	int drop = cuda_frames(gt, s), n = s->nuser > 0 ? s->nuser - drop : 0;
	int nk = s->nkern > 0 ? s->nkern : 0;
	struct pending *p;

	HASH_FIND(hh, gt->table, &key, sizeof(key), p);
	/* An id again: the older launch is done with (lost if its kernel
	 * never came). */
	if (p)
		drop_pending(gt, p);
	if (gt->waiting.n >= GPU_TIME_MAX_PENDING)
		drop_pending(gt, gt->waiting.oldest);
	p = xmalloc(offsetof(struct pending, s.ips) + (size_t)(nk + n) * sizeof(uint64_t));
	memset(p, 0, offsetof(struct pending, s.ips));
	memcpy(&p->s, s, offsetof(struct cpu_sample, ips));
	memcpy(p->s.ips, s->ips, (size_t)nk * sizeof(uint64_t));
	memcpy(p->s.ips + nk, s->ips + nk + drop, (size_t)n * sizeof(uint64_t));
	p->s.nuser = s->nuser > 0 ? n : s->nuser;
	p->key = key;
	p->nvtx = nvtx;
	/* The names of its Python frames now, while their code objects can
	 * be read: its kernel may come once the process is gone (CUPTI hands
	 * the last records back at its exit). */
	for (int i = 0; gt->sym && i < n; i++)
		if (py_names__is_frame(p->s.ips[nk + i]))
			py_names__load(symbolizer__python(gt->sym), pid, p->s.ips[nk + i]);
	HASH_ADD(hh, gt->table, key, sizeof(p->key), p);
	list_add(&gt->waiting, p);
}

void gpu_time__nvtx(struct gpu_time *gt, uint32_t pid, uint32_t id, const char *path)
{
	uint64_t key = (uint64_t)pid << 32 | id;
	struct nvtx_ent *e;

	HASH_FIND(hh, gt->nvtx, &key, sizeof(key), e);
	if (e) {
		/* Told again: the same path, or a new process of that pid's. */
		if (strcmp(e->path, path)) {
			free(e->path);
			e->path = xstrdup(path);
		}
		return;
	}
	if (gt->nnvtx >= GPU_TIME_MAX_NVTX) {
		gt->st.nvtx_dropped++;
		return;
	}
	e = xcalloc(1, sizeof(*e));
	e->key = key;
	e->path = xstrdup(path);
	HASH_ADD(hh, gt->nvtx, key, sizeof(e->key), e);
	gt->nnvtx++;
}

/* The NVTX range path of pid's id, NULL for none or one not told. */
static const char *nvtx_path(struct gpu_time *gt, uint32_t pid, uint32_t id)
{
	uint64_t key = (uint64_t)pid << 32 | id;
	struct nvtx_ent *e;

	if (!id)
		return NULL;
	HASH_FIND(hh, gt->nvtx, &key, sizeof(key), e);
	if (!e)
		gt->st.nvtx_unknown++;
	return e ? e->path : NULL;
}

/* The stack of pid's launch or copy with that correlation id, into
 * gt->scratch, and the NVTX ranges it was made in (*ranges, NULL for
 * none); NULL when it was not seen (counted). */
static struct cpu_sample *join(struct gpu_time *gt, uint32_t pid, uint32_t correlation,
			       const char **ranges)
{
	uint64_t key = (uint64_t)pid << 32 | correlation;
	struct pending *p;
	uint32_t nvtx;
	int n;

	HASH_FIND(hh, gt->table, &key, sizeof(key), p);
	if (!p) {
		gt->st.no_launch++;
		return NULL;
	}
	nvtx = p->nvtx;
	n = (p->s.nkern > 0 ? p->s.nkern : 0) + (p->s.nuser > 0 ? p->s.nuser : 0);
	memcpy(gt->scratch, &p->s, offsetof(struct cpu_sample, ips));
	memcpy(gt->scratch->ips, p->s.ips, (size_t)n * sizeof(uint64_t));
	/* Kept a while for the other kernels of a graph's launch. */
	if (!p->joined) {
		list_del(&gt->waiting, p);
		p->joined = true;
		list_add(&gt->joined, p);
		if (gt->joined.n > GPU_TIME_MAX_JOINED)
			drop_pending(gt, gt->joined.oldest);
	}
	*ranges = nvtx_path(gt, pid, nvtx);
	return gt->scratch;
}

/* Adds v under s, in ranges, topped by leaf to agg; whether it was kept. */
static bool add(struct stack_agg *agg, const struct cpu_sample *s, const char *ranges,
		const char *leaf, uint64_t v)
{
	struct stack_agg_stats before, after;

	stack_agg__stats(agg, &before);
	stack_agg__add_leaf_in(agg, s, ranges, leaf, v);
	stack_agg__stats(agg, &after);
	return after.dropped == before.dropped;
}

void gpu_time__kernel(struct gpu_time *gt, uint32_t pid, uint32_t correlation, const char *name,
		      uint64_t ns)
{
	const char *ranges;
	struct cpu_sample *s = join(gt, pid, correlation, &ranges);
	char *demangled;

	if (!s)
		return;
	demangled = name && *name ? sym_demangle(name) : NULL;
	gt->st.drops += !add(gt->agg, s, ranges,
			     demangled	     ? demangled
			     : name && *name ? name
					     : "[unknown kernel]",
			     ns);
	free(demangled);
	gt->st.kernels++;
	gt->st.ns += ns;
}

const char *gpu_copy_label(uint32_t copy_kind, bool set)
{
	static const char *const labels[] = {
		[1] = "[memcpy HtoD]",	[2] = "[memcpy DtoH]", [3] = "[memcpy HtoA]",
		[4] = "[memcpy AtoH]",	[5] = "[memcpy AtoA]", [6] = "[memcpy AtoD]",
		[7] = "[memcpy DtoA]",	[8] = "[memcpy DtoD]", [9] = "[memcpy HtoH]",
		[10] = "[memcpy PtoP]",
	};

	if (set)
		return "[memset]";
	return copy_kind < sizeof(labels) / sizeof(labels[0]) && labels[copy_kind]
		       ? labels[copy_kind]
		       : "[memcpy]";
}

void gpu_time__copy(struct gpu_time *gt, uint32_t pid, uint32_t correlation, uint32_t copy_kind,
		    bool set, uint64_t ns, uint64_t bytes)
{
	const char *ranges;
	struct cpu_sample *s = join(gt, pid, correlation, &ranges);
	const char *leaf = gpu_copy_label(copy_kind, set);

	if (!s)
		return;
	gt->st.drops += !add(gt->agg, s, ranges, leaf, ns);
	gt->st.drops += !add(gt->copies, s, ranges, leaf, bytes);
	gt->st.copies++;
	gt->st.copy_bytes += bytes;
	gt->st.ns += ns;
}

void gpu_time__clock(struct gpu_time *gt, uint32_t pid, uint64_t lost)
{
	struct lost_ent *e;

	HASH_FIND(hh, gt->lost, &pid, sizeof(pid), e);
	if (!e) {
		if (!lost)
			return;
		e = xcalloc(1, sizeof(*e));
		e->pid = pid;
		HASH_ADD(hh, gt->lost, pid, sizeof(e->pid), e);
	}
	if (lost > e->n) {
		gt->st.cupti_lost += lost - e->n;
		e->n = lost;
	}
}

void gpu_time__forget_pid(struct gpu_time *gt, uint32_t pid)
{
	struct nvtx_ent *n, *ntmp;
	struct pending *p, *tmp;
	struct lost_ent *e;

	HASH_ITER(hh, gt->nvtx, n, ntmp)
	{
		if (n->key >> 32 == pid) {
			HASH_DEL(gt->nvtx, n);
			free(n->path);
			free(n);
			gt->nnvtx--;
		}
	}

	HASH_FIND(hh, gt->lost, &pid, sizeof(pid), e);
	if (e) {
		HASH_DEL(gt->lost, e);
		free(e);
	}

	HASH_ITER(hh, gt->table, p, tmp)
	{
		if (p->key >> 32 == pid)
			drop_pending(gt, p);
	}
}

int gpu_time__profile(struct gpu_time *gt, struct profile *p)
{
	int err = stack_agg__to_profile(gt->agg, p);

	stack_agg__reset(gt->agg);
	return err;
}

int gpu_time__memcpy_profile(struct gpu_time *gt, struct profile *p)
{
	int err = stack_agg__to_profile(gt->copies, p);

	stack_agg__reset(gt->copies);
	return err;
}

void gpu_time__stats(const struct gpu_time *gt, struct gpu_time_stats *out)
{
	*out = gt->st;
	out->pending = (uint32_t)gt->waiting.n;
}

const struct cpu_sample *gpu_time__launch_stack(struct gpu_time *gt, uint32_t pid,
						uint32_t correlation)
{
	uint64_t key = (uint64_t)pid << 32 | correlation;
	struct pending *p;

	HASH_FIND(hh, gt->table, &key, sizeof(key), p);
	return p ? &p->s : NULL;
}
