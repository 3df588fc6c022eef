/* gpu_time.c: kernels' GPU time under their launching stacks. See
 * gpu_time.h. Launches wait in a hash table by (pid, correlation id) and in
 * a FIFO, the oldest given up first when it is full. */
#include "agent/gpu_time.h"
#include "agent/libscan.h"
#include "agent/stack_agg.h"
#include "profile/profile.h"
#include "python/names.h"
#include "symbolize/symbolize.h"

#include "common/htable.h"
#include "common/xalloc.h"

#include <stdlib.h>
#include <string.h>

struct pending {
	UT_hash_handle hh;
	uint64_t key; /* pid << 32 | correlation */
	struct pending *older, *newer;
	struct cpu_sample s; /* up to its user frames: the rest is not allocated */
};

struct gpu_time {
	struct symbolizer *sym;
	struct stack_agg *agg;
	struct pending *table;
	struct pending *oldest, *newest;
	struct cpu_sample *scratch;
	struct gpu_time_stats st;
};

struct gpu_time *gpu_time__new(struct symbolizer *sym, size_t max_stacks)
{
	struct gpu_time *gt = xcalloc(1, sizeof(*gt));

	gt->sym = sym;
	gt->agg = stack_agg__new(sym, max_stacks);
	stack_agg__set_leaf_module(gt->agg, "[cuda]");
	gt->scratch = xcalloc(1, sizeof(*gt->scratch));
	return gt;
}

static void unlink_pending(struct gpu_time *gt, struct pending *p)
{
	HASH_DEL(gt->table, p);
	if (p->older)
		p->older->newer = p->newer;
	else
		gt->oldest = p->newer;
	if (p->newer)
		p->newer->older = p->older;
	else
		gt->newest = p->older;
	gt->st.pending--;
}

void gpu_time__free(struct gpu_time *gt)
{
	if (!gt)
		return;
	while (gt->oldest) {
		struct pending *p = gt->oldest;

		unlink_pending(gt, p);
		free(p);
	}
	stack_agg__free(gt->agg);
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

void gpu_time__launch(struct gpu_time *gt, uint32_t pid, uint32_t correlation,
		      const struct cpu_sample *s)
{
	uint64_t key = (uint64_t)pid << 32 | correlation;
	int drop = cuda_frames(gt, s), n = s->nuser > 0 ? s->nuser - drop : 0;
	int nk = s->nkern > 0 ? s->nkern : 0;
	struct pending *p;

	HASH_FIND(hh, gt->table, &key, sizeof(key), p);
	if (p) {
		/* An id again before its kernel came: the older launch is lost. */
		unlink_pending(gt, p);
		free(p);
		gt->st.no_kernel++;
	}
	if (gt->st.pending >= GPU_TIME_MAX_PENDING) {
		p = gt->oldest;
		unlink_pending(gt, p);
		free(p);
		gt->st.no_kernel++;
	}
	p = xmalloc(offsetof(struct pending, s.ips) + (size_t)(nk + n) * sizeof(uint64_t));
	memset(p, 0, offsetof(struct pending, s.ips));
	memcpy(&p->s, s, offsetof(struct cpu_sample, ips));
	memcpy(p->s.ips, s->ips, (size_t)nk * sizeof(uint64_t));
	memcpy(p->s.ips + nk, s->ips + nk + drop, (size_t)n * sizeof(uint64_t));
	p->s.nuser = s->nuser > 0 ? n : s->nuser;
	p->key = key;
	/* The names of its Python frames now, while their code objects can
	 * be read: its kernel may come once the process is gone (CUPTI hands
	 * the last records back at its exit). */
	for (int i = 0; gt->sym && i < n; i++)
		if (py_names__is_frame(p->s.ips[nk + i]))
			py_names__load(symbolizer__python(gt->sym), pid, p->s.ips[nk + i]);
	HASH_ADD(hh, gt->table, key, sizeof(p->key), p);
	p->older = gt->newest;
	if (gt->newest)
		gt->newest->newer = p;
	else
		gt->oldest = p;
	gt->newest = p;
	gt->st.pending++;
}

void gpu_time__kernel(struct gpu_time *gt, uint32_t pid, uint32_t correlation, const char *name,
		      uint64_t ns)
{
	uint64_t key = (uint64_t)pid << 32 | correlation;
	struct stack_agg_stats before, after;
	struct pending *p;
	char *demangled;
	int n;

	HASH_FIND(hh, gt->table, &key, sizeof(key), p);
	if (!p) {
		gt->st.no_launch++;
		return;
	}
	n = (p->s.nkern > 0 ? p->s.nkern : 0) + (p->s.nuser > 0 ? p->s.nuser : 0);
	memcpy(gt->scratch, &p->s, offsetof(struct cpu_sample, ips));
	memcpy(gt->scratch->ips, p->s.ips, (size_t)n * sizeof(uint64_t));
	unlink_pending(gt, p);
	free(p);
	demangled = name && *name ? sym_demangle(name) : NULL;
	stack_agg__stats(gt->agg, &before);
	stack_agg__add_leaf(gt->agg, gt->scratch,
			    demangled	    ? demangled
			    : name && *name ? name
					    : "[unknown kernel]",
			    ns);
	stack_agg__stats(gt->agg, &after);
	free(demangled);
	gt->st.drops += after.dropped != before.dropped;
	gt->st.kernels++;
	gt->st.ns += ns;
}

void gpu_time__forget_pid(struct gpu_time *gt, uint32_t pid)
{
	struct pending *p, *tmp;

	HASH_ITER(hh, gt->table, p, tmp)
	{
		if (p->key >> 32 != pid)
			continue;
		unlink_pending(gt, p);
		free(p);
		gt->st.no_kernel++;
	}
}

int gpu_time__profile(struct gpu_time *gt, struct profile *p)
{
	int err = stack_agg__to_profile(gt->agg, p);

	stack_agg__reset(gt->agg);
	return err;
}

void gpu_time__stats(const struct gpu_time *gt, struct gpu_time_stats *out)
{
	*out = gt->st;
}
