/* stack_agg.c: raw-stack aggregation and symbolization into profiles for
 * `sonde record` and the agent. See stack_agg.h. */
#include "agent/stack_agg.h"
#include "common/htable.h"
#include "common/log.h"
#include "common/utf8.h"
#include "common/xalloc.h"
#include "profile/profile.h"
#include "python/names.h"
#include "unwind_abi.h"
#include "symbolize/symbolize.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

/* The key is the bytes from pid to the last used frame kind, so identical
 * stacks of one thread collapse into one entry: the frames' addresses,
 * then their kinds and flags (a byte each). */
struct stack_key {
	uint32_t pid, tid;
	uint32_t nframes;
	uint32_t leaf;		   /* 1-based index into the agg's names, 0: none */
	uint32_t ranges;	   /* ... the NVTX ranges below the leaf, 0: none */
	uint32_t image;		   /* the symbolizer's image of pid the user frames ran in */
	uint32_t service;	   /* 1-based index into the agg's names, 0: none */
	uint32_t labels;	   /* ... its job's labels, 0: none */
	uint32_t reason;	   /* ... a GPU instruction's stall reason, 0: none */
	uint32_t op;		   /* ... its mnemonic, 0: none */
	uint64_t instr;		   /* the GPU instruction's offset + 1 above the leaf, 0: none */
	char comm[CPU_COMM_LEN];   /* the process */
	char thread[CPU_COMM_LEN]; /* the thread */
	uint64_t addrs[];	   /* nframes, then nframes bytes of kind << 4 | flags */
};

static size_t key_bytes(uint32_t n)
{
	return sizeof(struct stack_key) + n * (sizeof(uint64_t) + 1);
}

static uint8_t *key_kinds(const struct stack_key *k)
{
	return (uint8_t *)(k->addrs + k->nframes);
}

struct stack_entry {
	UT_hash_handle hh;
	uint64_t count;
	size_t keylen;
	struct stack_key key; /* variable length: must stay last */
};

struct seen_pid {
	UT_hash_handle hh;
	uint32_t pid;
};

/* A leaf name (kernel, API) given to stack_agg__add_leaf, or a service's
 * name, kept for the agg's life: the set of kernel names and services of a
 * node is small and stable. */
struct leaf_name {
	UT_hash_handle hh;
	uint32_t id;
	char name[];
};

struct stack_agg {
	struct symbolizer *sym;
	struct stack_entry *stacks;
	struct seen_pid *pids;
	struct leaf_name *leaves;
	char **leaf_by_id;
	size_t nleaves, leaves_cap;
	const char *leaf_module;
	stack_service_fn service;
	void *service_ctx;
	size_t max_stacks, nstacks;
	uint64_t samples, dropped, npids;
};

struct stack_agg *stack_agg__new(struct symbolizer *sym, size_t max_stacks)
{
	struct stack_agg *a = xcalloc(1, sizeof(*a));

	a->sym = sym;
	a->max_stacks = max_stacks;
	return a;
}

void stack_agg__reset(struct stack_agg *a)
{
	HTABLE_CLEAR(hh, a->stacks, e, free(e));
	a->nstacks = 0;
}

void stack_agg__set_leaf_module(struct stack_agg *a, const char *module)
{
	a->leaf_module = module;
}

void stack_agg__set_service(struct stack_agg *a, stack_service_fn fn, void *ctx)
{
	a->service = fn;
	a->service_ctx = ctx;
}

void stack_agg__forget_pids(struct stack_agg *a)
{
	HTABLE_CLEAR(hh, a->pids, p, free(p));
}

void stack_agg__free(struct stack_agg *a)
{
	if (!a)
		return;
	stack_agg__reset(a);
	HTABLE_CLEAR(hh, a->leaves, l, free(l));
	free(a->leaf_by_id);
	HTABLE_CLEAR(hh, a->pids, p, free(p));
	free(a);
}

static uint32_t leaf_id(struct stack_agg *a, const char *name)
{
	size_t len = strlen(name);
	struct leaf_name *l;

	HASH_FIND(hh, a->leaves, name, len, l);
	if (l)
		return l->id;
	l = xmalloc(sizeof(*l) + len + 1);
	memset(&l->hh, 0, sizeof(l->hh));
	memcpy(l->name, name, len + 1);
	xgrow((void **)&a->leaf_by_id, &a->leaves_cap, a->nleaves + 1, sizeof(*a->leaf_by_id));
	a->leaf_by_id[a->nleaves] = l->name;
	l->id = (uint32_t)++a->nleaves;
	HASH_ADD_KEYPTR(hh, a->leaves, l->name, len, l);
	return l->id;
}

/* A name of the record into a key's zeroed field: up to its NUL (what
 * follows may be anything), made UTF-8 -- the kernel cuts names at 15
 * bytes, maybe inside a character, and labels are UTF-8. */
static void key_name(char *dst, const char *src)
{
	size_t n = strnlen(src, CPU_COMM_LEN - 1);

	memcpy(dst, src, n);
	n = utf8_clean(dst, n);
	memset(dst + n, 0, CPU_COMM_LEN - n);
}

void stack_agg__add(struct stack_agg *a, const struct stack *s)
{
	stack_agg__add_leaf(a, s, NULL, 1);
}

void stack_agg__add_leaf(struct stack_agg *a, const struct stack *s, const char *leaf,
			 uint64_t weight)
{
	stack_agg__add_leaf_in(a, s, NULL, leaf, weight);
}

void stack_agg__add_leaf_in(struct stack_agg *a, const struct stack *s, const char *ranges,
			    const char *leaf, uint64_t weight)
{
	stack_agg__add_instr(a, s, ranges, leaf, NULL, weight);
}

/* Reads the files a new stack's user frames are in, while its process can
 * still be reached. */
static void load_frames(struct stack_agg *a, const struct stack *s, uint32_t image)
{
	for (uint32_t i = 0; i < s->nframes && image; i++) {
		const struct stack_frame *f = &s->frames[i];

		if (f->kind == FRAME_PYTHON)
			py_names__load(symbolizer__python(a->sym), s->pid, f->addr);
		else if (f->kind == FRAME_NATIVE)
			symbolizer__load(a->sym, image, stack_frame__lookup(f));
	}
}

void stack_agg__add_instr(struct stack_agg *a, const struct stack *s, const char *ranges,
			  const char *leaf, const struct stack_agg_instr *instr, uint64_t weight)
{
	uint32_t n = s->nframes > STACK_MAX_FRAMES ? STACK_MAX_FRAMES : s->nframes;
	size_t keylen = key_bytes(n);
	char buf[sizeof(struct stack_key) + STACK_MAX_FRAMES * (sizeof(uint64_t) + 1)];
	struct stack_key *key = (struct stack_key *)buf;
	struct stack_entry *e;
	struct seen_pid *p;
	uint8_t *kinds;

	a->samples += weight;
	HASH_FIND(hh, a->pids, &s->pid, sizeof(s->pid), p);
	if (!p) {
		p = xcalloc(1, sizeof(*p));
		p->pid = s->pid;
		HASH_ADD(hh, a->pids, pid, sizeof(p->pid), p);
		a->npids++;
	}
	memset(key, 0, sizeof(*key));
	key->pid = s->pid;
	key->tid = s->tid;
	key->nframes = n;
	key->leaf = leaf ? leaf_id(a, leaf) : 0;
	key->ranges = ranges && *ranges ? leaf_id(a, ranges) : 0;
	if (leaf && instr) {
		key->instr = instr->offset + 1;
		key->reason = instr->reason && *instr->reason ? leaf_id(a, instr->reason) : 0;
		key->op = instr->op && *instr->op ? leaf_id(a, instr->op) : 0;
	}
	/* The process's image when the sample was taken: it may exec again,
	 * or be gone, by the time the window is symbolized. */
	key->image = s->pid && stack__has_user(s) ? symbolizer__image(a->sym, s->pid, s->ts_ns) : 0;
	key_name(key->comm, s->comm);
	key_name(key->thread, s->thread);
	/* The service now, while the process can still be asked. */
	if (a->service && s->pid) {
		const char *labels = NULL,
			   *svc = a->service(a->service_ctx, s->pid, key->comm, &labels);

		key->service = svc && *svc ? leaf_id(a, svc) : 0;
		key->labels = labels && *labels ? leaf_id(a, labels) : 0;
	}
	kinds = key_kinds(key);
	for (uint32_t i = 0; i < n; i++) {
		key->addrs[i] = s->frames[i].addr;
		kinds[i] = (uint8_t)(s->frames[i].kind << 4 | (s->frames[i].flags & 0xf));
	}

	HASH_FIND(hh, a->stacks, key, keylen, e);
	if (e) {
		e->count += weight;
		return;
	}
	if (a->nstacks >= a->max_stacks) {
		if (!a->dropped)
			pr_warn("more than %zu distinct stacks in one window: further new stacks "
				"are dropped (counted)",
				a->max_stacks);
		a->dropped += weight;
		return;
	}
	load_frames(a, s, key->image);
	e = xmalloc(sizeof(*e) + keylen - sizeof(struct stack_key));
	memset(&e->hh, 0, sizeof(e->hh));
	e->count = weight;
	e->keylen = keylen;
	memcpy(&e->key, key, keylen);
	HASH_ADD_KEYPTR(hh, a->stacks, &e->key, keylen, e);
	a->nstacks++;
}

static void fill_frame(struct prof_frame *f, const struct sym_info *si, uint64_t addr, char *name,
		       size_t name_len)
{
	memset(f, 0, sizeof(*f));
	f->func = sym_info__name(si, name, name_len);
	f->module = si->module;
	f->build_id = si->build_id;
	f->addr = addr;
	f->offset = si->offset;
	f->map_start = si->map_start;
	f->map_limit = si->map_limit;
	f->map_pgoff = si->map_pgoff;
	f->kernel = si->kernel;
}

/* A Python frame: "QUALNAME (FILE)" as read while its process lived, else
 * "[python]". */
static void python_frame(struct symbolizer *sym, uint32_t pid, uint64_t ip, struct prof_frame *f,
			 char *name, size_t name_len)
{
	struct py_names *names = symbolizer__python(sym);
	const struct py_name *pn = py_names__get(names, pid, ip);

	/* Not seen when the stack was added (`top` names stacks as they
	 * come): read it now, if the process is still there. */
	if (!pn && !py_names__load(names, pid, ip))
		pn = py_names__get(names, pid, ip);
	memset(f, 0, sizeof(*f));
	snprintf(name, name_len, "%s", pn ? pn->name : "[python]");
	f->func = name;
	/* Unique per code object and instruction; without the top bit, which
	 * a reader of the profile takes for a kernel address. */
	f->addr = ip & ~(1ULL << 63);
	if (pn) {
		f->file = pn->file;
		f->line = pn->line > 0 ? (uint32_t)pn->line : 0;
		f->start_line = pn->firstlineno > 0 ? (uint32_t)pn->firstlineno : 0;
	}
}

/* The frames of native address ip, resolved into si: each function
 * inlined there as a frame of its own, innermost first, then the function
 * the symbol table names; with their source lines where the file's DWARF
 * has them. At least one frame when max > 0. */
static size_t native_frames(struct symbolizer *sym, const struct sym_info *si, uint64_t ip,
			    struct prof_frame *frames, char (*names)[256], size_t max)
{
	struct sym_inline in[SYM_MAX_INLINE];
	size_t nin, n = 0;

	if (!max)
		return 0;
	nin = symbolizer__lines(sym, si, in, max);
	/* The inlined ones, named from DWARF and sharing the address. */
	for (size_t j = 0; j + 1 < nin; j++) {
		fill_frame(&frames[n], si, ip, names[n], sizeof(names[n]));
		snprintf(names[n], sizeof(names[n]), "%s", in[j].func ? in[j].func : "[inlined]");
		frames[n].func = names[n];
		frames[n].file = in[j].file;
		frames[n].line = in[j].line;
		frames[n].start_line = in[j].start_line;
		n++;
	}
	fill_frame(&frames[n], si, ip, names[n], sizeof(names[n]));
	if (nin) {
		/* Where the symbol table has no name, DWARF's. */
		if (!si->func && in[nin - 1].func) {
			snprintf(names[n], sizeof(names[n]), "%s", in[nin - 1].func);
			frames[n].func = names[n];
		}
		frames[n].file = in[nin - 1].file;
		frames[n].line = in[nin - 1].line;
		frames[n].start_line = in[nin - 1].start_line;
	}
	return n + 1;
}

/* A marker frame: its name in name. */
static void marker_frame(uint64_t marker, struct prof_frame *f, char *name, size_t name_len)
{
	memset(f, 0, sizeof(*f));
	snprintf(name, name_len, "%s",
		 marker == STACK_MARK_SIGNAL	  ? "[signal]"
		 : marker == STACK_MARK_TRUNCATED ? "[truncated]"
						  : "[marker]");
	f->func = name;
	if (marker == STACK_MARK_SIGNAL)
		f->addr = UNW_SIGNAL_FRAME;
}

size_t symbolize_stack(struct symbolizer *sym, const struct stack *s, uint32_t image,
		       struct prof_frame *frames, char (*names)[256], size_t max)
{
	struct sym_info si;
	size_t n = 0;

	if (!image && s->pid && stack__has_user(s))
		image = symbolizer__image(sym, s->pid, s->ts_ns);
	for (uint32_t i = 0; i < s->nframes && n < max; i++) {
		const struct stack_frame *f = &s->frames[i];
		uint64_t at = stack_frame__lookup(f);

		switch (f->kind) {
		case FRAME_KERNEL:
			symbolizer__resolve_kernel(sym, at, &si);
			fill_frame(&frames[n], &si, f->addr, names[n], sizeof(names[n]));
			n++;
			break;
		case FRAME_PYTHON:
			python_frame(sym, s->pid, f->addr, &frames[n], names[n], sizeof(names[n]));
			n++;
			break;
		case FRAME_NATIVE:
			symbolizer__resolve_image(sym, image, at, &si);
			n += native_frames(sym, &si, f->addr, frames + n, names + n, max - n);
			break;
		default:
			marker_frame(f->addr, &frames[n], names[n], sizeof(names[n]));
			n++;
			break;
		}
	}
	if (n == 0 && max > 0) {
		memset(&frames[0], 0, sizeof(frames[0]));
		snprintf(names[0], sizeof(names[0]), "[no stack]");
		frames[0].func = names[0];
		n = 1;
	}
	return n;
}

/* The ranges of a SEP-joined path as frames, innermost first, into frames
 * (at most max), their names cut in buf; the number of frames. */
static size_t range_frames(const char *path, const char *module, struct prof_frame *frames,
			   size_t max, char *buf, size_t size)
{
	size_t n = 0, len = strlen(path);
	char *p;

	if (len >= size)
		len = size - 1;
	memcpy(buf, path, len);
	buf[len] = 0;
	/* From the end: the innermost range is the last. */
	while (n < max) {
		p = strrchr(buf, STACK_AGG_RANGE_SEP);
		memset(&frames[n], 0, sizeof(frames[n]));
		frames[n].func = p ? p + 1 : buf;
		frames[n].module = module;
		n++;
		if (!p)
			break;
		*p = 0;
	}
	return n;
}

/* stack_agg__to_profile's room for one stack's frames and their names:
 * about 90 KB, on the heap for each call (two threads may build profiles
 * at once: the agent's windows, a record's). */
#define TO_PROFILE_FRAMES (STACK_MAX_FRAMES + 3 + STACK_AGG_MAX_RANGES)
struct to_profile_room {
	/* A stack's frames (more than its addresses where DWARF names
	 * inlined functions), then the leaf, a GPU instruction's two and the
	 * NVTX ranges; a name for each. */
	struct prof_frame frames[TO_PROFILE_FRAMES];
	char names[TO_PROFILE_FRAMES][256];
	char rbuf[STACK_AGG_RANGES_LEN];
	char ibuf[96];
};

int stack_agg__to_profile(struct stack_agg *a, struct profile *p)
{
	struct to_profile_room *room = xmalloc(sizeof(*room));
	struct prof_frame *frames = room->frames;
	char *rbuf = room->rbuf, *ibuf = room->ibuf;
	char(*names)[256] = room->names;
	struct stack *s = stack__new();
	struct stack_entry *e, *tmp;
	int err = 0;

	HASH_ITER(hh, a->stacks, e, tmp)
	{
		struct prof_who who;
		size_t n;

		const uint8_t *kinds = key_kinds(&e->key);

		s->pid = e->key.pid;
		s->tid = e->key.tid;
		s->nframes = e->key.nframes;
		memcpy(s->comm, e->key.comm, CPU_COMM_LEN);
		memcpy(s->thread, e->key.thread, CPU_COMM_LEN);
		for (uint32_t i = 0; i < s->nframes; i++)
			s->frames[i] = (struct stack_frame){
				.addr = e->key.addrs[i],
				.kind = kinds[i] >> 4,
				.flags = kinds[i] & 0xf,
			};
		if (e->key.leaf) {
			/* The leaf frames first (a GPU instruction's reason and
			 * offset, the leaf), then the stack below them. */
			size_t r = 0, l = 0;

			memset(frames, 0, 3 * sizeof(frames[0]));
			if (e->key.instr) {
				frames[l].func = e->key.reason ? a->leaf_by_id[e->key.reason - 1]
							       : "[no reason]";
				frames[l++].module = "[stall]";
				if (e->key.op)
					snprintf(ibuf, sizeof(room->ibuf), "+0x%" PRIx64 " %s",
						 e->key.instr - 1, a->leaf_by_id[e->key.op - 1]);
				else
					snprintf(ibuf, sizeof(room->ibuf), "+0x%" PRIx64,
						 e->key.instr - 1);
				frames[l].func = ibuf;
				frames[l++].module = "[sass]";
			}
			frames[l].func = a->leaf_by_id[e->key.leaf - 1];
			frames[l++].module = a->leaf_module;
			if (e->key.ranges)
				r = range_frames(a->leaf_by_id[e->key.ranges - 1], "[nvtx]",
						 frames + l, STACK_AGG_MAX_RANGES, rbuf,
						 sizeof(room->rbuf));
			n = l + r +
			    symbolize_stack(a->sym, s, e->key.image, frames + l + r, names + l + r,
					    TO_PROFILE_FRAMES - l - r);
			/* A GPU event without a stack: the leaf alone. */
			if (n == l + 1 + r && frames[l + r].func == names[l + r] &&
			    !strcmp(names[l + r], "[no stack]"))
				n = l + r;
		} else {
			n = symbolize_stack(a->sym, s, e->key.image, frames, names,
					    TO_PROFILE_FRAMES);
		}
		who = (struct prof_who){
			.pid = s->pid,
			.tid = s->tid,
			.comm = s->comm,
			.thread = s->thread,
			.service = e->key.service ? a->leaf_by_id[e->key.service - 1] : NULL,
			.labels = e->key.labels ? a->leaf_by_id[e->key.labels - 1] : NULL,
		};
		err = profile__add_ex(p, &who, frames, n, (int64_t)e->count);
		if (err)
			break;
	}
	free(s);
	free(room);
	return err;
}

void stack_agg__stats(const struct stack_agg *a, struct stack_agg_stats *out)
{
	out->samples = a->samples;
	out->stacks = a->nstacks;
	out->dropped = a->dropped;
	out->pids = a->npids;
}
