/* gpu_time.c: kernels' GPU time under their launching stacks. See
 * gpu_time.h. Launches wait in a hash table by (pid, correlation id) and in
 * a FIFO, the oldest given up first when it is full. A launch whose kernel
 * came stays a while in a second FIFO (GPU_TIME_MAX_JOINED): a graph's
 * launch has a kernel for each of its nodes, all with its id. */
#include "agent/gpu_time.h"
#include "probe/libscan.h"
#include "agent/sass.h"
#include "agent/stack_agg.h"
#include "cupti/sonde_cupti.h"
#include "profile/profile.h"
#include "python/names.h"
#include "symbolize/symbolize.h"

#include "common/htable.h"
#include "common/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Static_assert(SONDE_CUPTI_NVTX_SEP == STACK_AGG_RANGE_SEP, "one separator of NVTX ranges");

struct pending {
	UT_hash_handle hh;
	uint64_t key;  /* pid << 32 | correlation */
	uint32_t nvtx; /* its NVTX range path's id, 0: none */
	bool joined;   /* a kernel of it came: on the joined FIFO */
	struct pending *older, *newer;
	struct stack *s; /* in the same allocation, after it: up to its last frame */
};

/* An NVTX range path of a process's, by its id. */
struct nvtx_ent {
	UT_hash_handle hh;
	uint64_t key; /* pid << 32 | id */
	char *path;
};

/* A process's highest correlation id so far: a launch above it is new, and
 * needs no lookup of an older one of the same id (a cache miss or two in a
 * table of thousands, most of a launch's cost here). */
struct high_ent {
	UT_hash_handle hh;
	uint32_t pid;
	uint32_t high;
};

/* What CUPTI could not record in a process so far, as its library says. */
struct lost_ent {
	UT_hash_handle hh;
	uint32_t pid;
	uint64_t n;	  /* records */
	uint64_t stall_n; /* PC samples */
};

/* A kernel's latest launching stack, for its stall samples (PC sampling's
 * continuous mode names no launch). */
struct home {
	UT_hash_handle hh;
	char *key; /* "pid:name" */
	uint32_t pid;
	uint32_t nvtx;
	uint32_t kernels; /* of it joined since; the stack is refreshed every HOME_EVERY */
	struct stack *s;
};
#define HOME_EVERY 64
#define GPU_TIME_HOME_KEY 512

/* Stall samples of a kernel with no home yet (its record may come after
 * them: CUPTI hands the two over apart), or whose instruction is being
 * disassembled. They wait until the profile is taken -- those waiting for
 * nvdisasm in the agent one window more -- MAX_ORPHANS at most, then go
 * as they are (no stack, counted; no mnemonic). */
struct orphan {
	struct orphan *next;
	uint32_t pid, reason;
	uint64_t pc, cubin, samples;
	unsigned age; /* profiles taken while it waited */
	char name[];
};
#define MAX_ORPHANS 4096

/* A stall reason's label, by pid << 32 | CUPTI's index. */
struct reason_ent {
	UT_hash_handle hh;
	uint64_t key;
	char label[64];
};
#define MAX_REASONS 65536

struct gpu_time {
	struct high_ent *high;
	struct lost_ent *lost;
	/* in_cuda's last answers, by the mapping's path: a launch's top
	 * frames are in the same few libraries. */
	struct {
		char path[256];
		bool cuda;
	} seen[8];
	unsigned nseen;
	struct nvtx_ent *nvtx;
	size_t nnvtx;
	struct symbolizer *sym;
	struct stack_agg *agg;	  /* GPU ns: kernels, copies and sets */
	struct stack_agg *copies; /* bytes: copies and sets */
	struct stack_agg *stalls; /* PC samples */
	struct home *homes;
	size_t nhomes;
	bool stalls_seen; /* a process told of stall reasons: keep homes */
	struct reason_ent *reasons;
	size_t nreasons;
	struct orphan *orphans;
	size_t norphans;
	struct sass *sass; /* NULL: no nvdisasm, or no cubin told yet */
	bool sass_tried;
	struct pending *table;
	struct list {
		struct pending *oldest, *newest;
		size_t n;
	} waiting, joined;
	struct stack *scratch;
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
	gt->stalls = stack_agg__new(sym, max_stacks);
	stack_agg__set_leaf_module(gt->stalls, "[cuda]");
	gt->scratch = stack__new();
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
	HTABLE_CLEAR(hh, gt->high, e, free(e));
	HTABLE_CLEAR(hh, gt->nvtx, e, (free(e->path), free(e)));
	stack_agg__free(gt->agg);
	stack_agg__free(gt->copies);
	stack_agg__free(gt->stalls);
	HTABLE_CLEAR(hh, gt->homes, h, (free(h->key), free(h->s), free(h)));
	HTABLE_CLEAR(hh, gt->reasons, r, free(r));
	while (gt->orphans) {
		struct orphan *o = gt->orphans;

		gt->orphans = o->next;
		free(o);
	}
	sass__free(gt->sass);
	free(gt->scratch);
	free(gt);
}

/* Whether addr is in a CUDA or CUPTI library of the sample's process (or in
 * Sonde's CUPTI library). */
static bool in_cuda(struct gpu_time *gt, uint32_t image, uint64_t addr)
{
	struct sym_map_info m;
	const char *base;

	bool cuda;

	if (symbolizer__mapping(gt->sym, image, addr, &m) || !m.path)
		return false;
	for (unsigned i = 0; i < ARRAY_SIZE(gt->seen); i++)
		if (!strcmp(gt->seen[i].path, m.path))
			return gt->seen[i].cuda;
	base = strrchr(m.path, '/');
	base = base ? base + 1 : m.path;
	cuda = (libscan_classify(m.path) & (LIBSCAN_RT | LIBSCAN_DRV | LIBSCAN_CUPTI)) ||
	       !strncmp(base, "libcupti.so", strlen("libcupti.so"));
	if (strlen(m.path) < sizeof(gt->seen[0].path)) {
		strcpy(gt->seen[gt->nseen % ARRAY_SIZE(gt->seen)].path, m.path);
		gt->seen[gt->nseen++ % ARRAY_SIZE(gt->seen)].cuda = cuda;
	}
	return cuda;
}

/* Whether pid's launch of that id may be one held already: not when the id
 * is above every one it had (the ids grow). */
static bool may_hold(struct gpu_time *gt, uint32_t pid, uint32_t correlation)
{
	struct high_ent *e;

	HASH_FIND(hh, gt->high, &pid, sizeof(pid), e);
	if (!e) {
		e = xcalloc(1, sizeof(*e));
		e->pid = pid;
		e->high = correlation;
		HASH_ADD(hh, gt->high, pid, sizeof(e->pid), e);
		return false;
	}
	if (correlation > e->high) {
		e->high = correlation;
		return false;
	}
	return true;
}

/* The launch's frames above the application's: CUPTI's callback and the
 * CUDA API call it came from, as the launch profile, whose stack ends at
 * the caller of the API. The number of leaf frames to drop. */
static int cuda_frames(struct gpu_time *gt, const struct stack *s, uint32_t *first)
{
	uint32_t k = 0, i, image;

	while (k < s->nframes && s->frames[k].kind == FRAME_KERNEL)
		k++;
	*first = k;
	if (!gt->sym || k >= s->nframes)
		return 0;
	image = symbolizer__image(gt->sym, s->pid, s->ts_ns);
	for (i = k; i + 1 < s->nframes; i++) {
		const struct stack_frame *f = &s->frames[i];

		if (f->kind != FRAME_NATIVE || !in_cuda(gt, image, stack_frame__lookup(f)))
			break;
	}
	return (int)(i - k);
}

void gpu_time__launch(struct gpu_time *gt, uint32_t pid, uint32_t correlation, uint32_t nvtx,
		      const struct stack *s)
{
	uint64_t key = (uint64_t)pid << 32 | correlation;
	uint32_t nk, n;
	int drop = cuda_frames(gt, s, &nk);
	struct pending *p;

	/* An id again: the older launch is done with (lost if its kernel
	 * never came). */
	p = NULL;
	if (may_hold(gt, pid, correlation))
		HASH_FIND(hh, gt->table, &key, sizeof(key), p);
	if (p)
		drop_pending(gt, p);
	if (gt->waiting.n >= GPU_TIME_MAX_PENDING)
		drop_pending(gt, gt->waiting.oldest);
	n = s->nframes - (uint32_t)drop;
	p = xmalloc(sizeof(*p) + stack_size(n));
	memset(p, 0, sizeof(*p));
	p->s = (struct stack *)(p + 1);
	memcpy(p->s, s, stack_size(0));
	memcpy(p->s->frames, s->frames, nk * sizeof(s->frames[0]));
	memcpy(p->s->frames + nk, s->frames + nk + drop, (n - nk) * sizeof(s->frames[0]));
	p->s->nframes = n;
	p->key = key;
	p->nvtx = nvtx;
	/* The names of its Python frames now, while their code objects can
	 * be read: its kernel may come once the process is gone (CUPTI hands
	 * the last records back at its exit). */
	for (uint32_t i = nk; gt->sym && i < n; i++)
		if (p->s->frames[i].kind == FRAME_PYTHON)
			py_names__load(symbolizer__python(gt->sym), pid, p->s->frames[i].addr);
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
static struct stack *join(struct gpu_time *gt, uint32_t pid, uint32_t correlation,
			  const char **ranges, uint32_t *nvtx_id)
{
	uint64_t key = (uint64_t)pid << 32 | correlation;
	struct pending *p;
	uint32_t nvtx;

	HASH_FIND(hh, gt->table, &key, sizeof(key), p);
	if (!p) {
		gt->st.no_launch++;
		return NULL;
	}
	nvtx = p->nvtx;
	memcpy(gt->scratch, p->s, stack_size(p->s->nframes));
	/* Kept a while for the other kernels of a graph's launch. */
	if (!p->joined) {
		list_del(&gt->waiting, p);
		p->joined = true;
		list_add(&gt->joined, p);
		if (gt->joined.n > GPU_TIME_MAX_JOINED)
			drop_pending(gt, gt->joined.oldest);
	}
	*ranges = nvtx_path(gt, pid, nvtx);
	*nvtx_id = nvtx;
	return gt->scratch;
}

/* Adds v under s, in ranges, topped by leaf to agg; whether it was kept. */
static bool add(struct stack_agg *agg, const struct stack *s, const char *ranges, const char *leaf,
		uint64_t v)
{
	struct stack_agg_stats before, after;

	stack_agg__stats(agg, &before);
	stack_agg__add_leaf_in(agg, s, ranges, leaf, v);
	stack_agg__stats(agg, &after);
	return after.dropped == before.dropped;
}

/* The bytes of s up to its last frame. */
static size_t sample_bytes(const struct stack *s)
{
	return stack_size(s->nframes);
}

static void home_key(char *buf, size_t size, uint32_t pid, const char *name)
{
	snprintf(buf, size, "%u:%s", pid, name);
}

static void adopt(struct gpu_time *gt, uint32_t pid, const char *name, bool final, unsigned grow,
		  unsigned min_age);

/* s (with its NVTX path's id) launched pid's kernel name: kept as its
 * home, refreshed every HOME_EVERY of its kernels. */
static void set_home(struct gpu_time *gt, uint32_t pid, const char *name, uint32_t nvtx,
		     const struct stack *s)
{
	char key[GPU_TIME_HOME_KEY];
	struct home *h;

	home_key(key, sizeof(key), pid, name);
	HASH_FIND_STR(gt->homes, key, h);
	if (h && h->kernels++ % HOME_EVERY)
		return;
	if (!h && gt->nhomes >= GPU_TIME_MAX_HOMES)
		return;
	if (!h) {
		h = xcalloc(1, sizeof(*h));
		h->key = xstrdup(key);
		h->pid = pid;
		h->kernels = 1;
		HASH_ADD_KEYPTR(hh, gt->homes, h->key, strlen(h->key), h);
		gt->nhomes++;
	} else {
		free(h->s);
	}
	h->s = xmalloc(sample_bytes(s));
	memcpy(h->s, s, sample_bytes(s));
	h->nvtx = nvtx;
	/* A new home: the samples that waited for it. */
	if (h->kernels == 1 && gt->norphans)
		adopt(gt, pid, name, false, 0, 0);
}

/* The leaf a kernel's name (mangled or not, NULL or "": none) shows: its
 * demangled name (*owned, to free), else the name, else "[unknown kernel]". */
static const char *kernel_leaf(const char *name, char **owned)
{
	*owned = name && *name ? sym_demangle(name) : NULL;
	return *owned ? *owned : name && *name ? name : "[unknown kernel]";
}

static void drop_home(struct gpu_time *gt, struct home *h)
{
	HASH_DEL(gt->homes, h);
	free(h->key);
	free(h->s);
	free(h);
	gt->nhomes--;
}

void gpu_time__kernel(struct gpu_time *gt, uint32_t pid, uint32_t correlation, const char *name,
		      uint64_t ns)
{
	const char *ranges;
	uint32_t nvtx;
	struct stack *s = join(gt, pid, correlation, &ranges, &nvtx);
	char *demangled;

	if (!s)
		return;
	if (gt->stalls_seen && name && *name)
		set_home(gt, pid, name, nvtx, s);
	gt->st.drops += !add(gt->agg, s, ranges, kernel_leaf(name, &demangled), ns);
	free(demangled);
	gt->st.kernels++;
	gt->st.ns += ns;
}

void gpu_time__graph(struct gpu_time *gt, uint32_t pid, uint32_t correlation, uint32_t graph,
		     uint64_t ns)
{
	const char *ranges;
	uint32_t nvtx;
	struct stack *s = join(gt, pid, correlation, &ranges, &nvtx);
	char leaf[48];

	if (!s)
		return;
	gpu_graph_label(graph, leaf, sizeof(leaf));
	gt->st.drops += !add(gt->agg, s, ranges, leaf, ns);
	gt->st.graphs++;
	gt->st.ns += ns;
}

const char *gpu_graph_label(uint32_t graph, char *buf, size_t size)
{
	snprintf(buf, size, "[CUDA graph %u]", graph);
	return buf;
}

void gpu_time__sync(struct gpu_time *gt)
{
	gt->st.syncs++;
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
	uint32_t nvtx;
	struct stack *s = join(gt, pid, correlation, &ranges, &nvtx);
	const char *leaf = gpu_copy_label(copy_kind, set);

	if (!s)
		return;
	gt->st.drops += !add(gt->agg, s, ranges, leaf, ns);
	gt->st.drops += !add(gt->copies, s, ranges, leaf, bytes);
	gt->st.copies++;
	gt->st.copy_bytes += bytes;
	gt->st.ns += ns;
}

void gpu_time__clock(struct gpu_time *gt, uint32_t pid, uint64_t lost, uint64_t stall_lost)
{
	struct lost_ent *e;

	HASH_FIND(hh, gt->lost, &pid, sizeof(pid), e);
	if (!e) {
		if (!lost && !stall_lost)
			return;
		e = xcalloc(1, sizeof(*e));
		e->pid = pid;
		HASH_ADD(hh, gt->lost, pid, sizeof(e->pid), e);
	}
	if (lost > e->n) {
		gt->st.cupti_lost += lost - e->n;
		e->n = lost;
	}
	if (stall_lost > e->stall_n) {
		gt->st.stall_dropped += stall_lost - e->stall_n;
		e->stall_n = stall_lost;
	}
}

const char *gpu_stall_label(const char *reason, char *buf, size_t size)
{
	static const char *const prefixes[] = {"smsp__pcsamp_warps_issue_stalled_",
					       "smsp__pcsamp_"};

	for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
		size_t len = strlen(prefixes[i]);

		if (!strncmp(reason, prefixes[i], len) && reason[len]) {
			reason += len;
			break;
		}
	}
	snprintf(buf, size, "%s", *reason ? reason : "[no reason]");
	return buf;
}

void gpu_time__stall_reason(struct gpu_time *gt, uint32_t pid, uint32_t index, const char *name)
{
	uint64_t key = (uint64_t)pid << 32 | index;
	struct reason_ent *e;

	gt->stalls_seen = true;
	HASH_FIND(hh, gt->reasons, &key, sizeof(key), e);
	if (!e) {
		if (gt->nreasons >= MAX_REASONS)
			return;
		e = xcalloc(1, sizeof(*e));
		e->key = key;
		HASH_ADD(hh, gt->reasons, key, sizeof(e->key), e);
		gt->nreasons++;
	}
	gpu_stall_label(name ? name : "", e->label, sizeof(e->label));
}

/* Adds samples under the home of pid's kernel name, their instruction
 * named where nvdisasm did; without a home, or with its name being
 * disassembled, they wait (an orphan, of age) unless final or MAX_ORPHANS
 * wait, then go as they are (no stack: counted). */
static void add_stall(struct gpu_time *gt, uint32_t pid, const char *name, uint64_t cubin,
		      uint64_t pc, uint32_t reason, uint64_t samples, bool final, unsigned age)
{
	uint64_t rkey = (uint64_t)pid << 32 | reason;
	struct stack_agg_instr instr = {.offset = pc};
	enum sass_state op = SASS_NONE;
	char key[GPU_TIME_HOME_KEY];
	const char *ranges = NULL;
	struct reason_ent *r;
	struct home *h;
	char *demangled;

	home_key(key, sizeof(key), pid, name);
	HASH_FIND_STR(gt->homes, key, h);
	if (gt->sass && *name)
		op = sass__lookup(gt->sass, cubin, name, pc, &instr.op);
	if ((!h || op == SASS_PENDING) && !final && gt->norphans < MAX_ORPHANS) {
		struct orphan *o = xmalloc(sizeof(*o) + strlen(name) + 1);

		*o = (struct orphan){.next = gt->orphans,
				     .pid = pid,
				     .reason = reason,
				     .pc = pc,
				     .cubin = cubin,
				     .samples = samples,
				     .age = age};
		strcpy(o->name, name);
		gt->orphans = o;
		gt->norphans++;
		return;
	}
	if (op != SASS_READY)
		instr.op = NULL;
	if (h) {
		memcpy(gt->scratch, h->s, sample_bytes(h->s));
		ranges = nvtx_path(gt, pid, h->nvtx);
	} else {
		memset(gt->scratch, 0, stack_size(0));
		gt->scratch->pid = pid;
		gt->st.stall_no_stack += samples;
	}
	HASH_FIND(hh, gt->reasons, &rkey, sizeof(rkey), r);
	instr.reason = r ? r->label : NULL;
	if (!r)
		gt->st.stall_unknown += samples;
	stack_agg__add_instr(gt->stalls, gt->scratch, ranges, kernel_leaf(name, &demangled), &instr,
			     samples);
	free(demangled);
	gt->st.stall_samples += samples;
}

/* The orphans of pid (all pids: pid 0) whose kernel is name (NULL: any),
 * of age min_age or more, tried again: added where their home and name
 * are found, or with final as they are; older by grow. */
static void adopt(struct gpu_time *gt, uint32_t pid, const char *name, bool final, unsigned grow,
		  unsigned min_age)
{
	struct orphan **pp = &gt->orphans, *o, *take = NULL;

	/* Taken out first: those that still wait go back in. */
	while ((o = *pp)) {
		if ((pid && o->pid != pid) || (name && strcmp(o->name, name)) || o->age < min_age) {
			pp = &o->next;
			continue;
		}
		*pp = o->next;
		gt->norphans--;
		o->next = take;
		take = o;
	}
	while ((o = take)) {
		take = o->next;
		add_stall(gt, o->pid, o->name, o->cubin, o->pc, o->reason, o->samples, final,
			  o->age + grow);
		free(o);
	}
}

void gpu_time__stall(struct gpu_time *gt, uint32_t pid, const char *name, uint64_t cubin,
		     uint64_t pc, uint32_t reason, uint64_t samples)
{
	gt->stalls_seen = true;
	add_stall(gt, pid, name ? name : "", cubin, pc, reason, samples, false, 0);
}

void gpu_time__memory(struct gpu_time *gt)
{
	gt->st.memory++;
}

void gpu_time__cubin(struct gpu_time *gt, uint32_t pid, uint64_t crc, const char *path)
{
	if (!gt->sass_tried) {
		gt->sass_tried = true;
		gt->sass = sass__new(NULL);
	}
	sass__cubin(gt->sass, pid, crc, path);
}

void gpu_time__forget_pid(struct gpu_time *gt, uint32_t pid)
{
	struct nvtx_ent *n, *ntmp;
	struct reason_ent *r, *rtmp;
	struct high_ent *hi;
	struct home *h, *htmp;
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
	HASH_FIND(hh, gt->high, &pid, sizeof(pid), hi);
	if (hi) {
		HASH_DEL(gt->high, hi);
		free(hi);
	}

	adopt(gt, pid, NULL, true, 0, 0);
	HASH_ITER(hh, gt->homes, h, htmp)
	{
		if (h->pid == pid)
			drop_home(gt, h);
	}
	HASH_ITER(hh, gt->reasons, r, rtmp)
	{
		if (r->key >> 32 == pid) {
			HASH_DEL(gt->reasons, r);
			free(r);
			gt->nreasons--;
		}
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

int gpu_time__stall_profile(struct gpu_time *gt, struct profile *p, bool last)
{
	int err;

	/* The last profile waits for nvdisasm (a bound); others let what
	 * waits for it wait one window more. */
	if (last)
		sass__wait(gt->sass, SASS_TIMEOUT_MS);
	adopt(gt, 0, NULL, false, 1, 0);
	adopt(gt, 0, NULL, true, 0, last ? 0 : 2);
	err = stack_agg__to_profile(gt->stalls, p);

	stack_agg__reset(gt->stalls);
	return err;
}

void gpu_time__stats(const struct gpu_time *gt, struct gpu_time_stats *out)
{
	*out = gt->st;
	out->pending = (uint32_t)gt->waiting.n;
}

const struct stack *gpu_time__launch_stack(struct gpu_time *gt, uint32_t pid, uint32_t correlation)
{
	uint64_t key = (uint64_t)pid << 32 | correlation;
	struct pending *p;

	HASH_FIND(hh, gt->table, &key, sizeof(key), p);
	return p ? p->s : NULL;
}
