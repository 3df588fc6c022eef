/* late.c: the end of the user stacks the BPF walker left to userspace. See
 * late.h. A waiting sample is walked again at each poll until every file
 * its frames reach has its table (each missing one asked for on the
 * builder's thread), so that a walk never stops short for a table that
 * would have come: the frame loop mirrors bpf/unwind.h's unw_step, and a
 * frame's rule is bpf/unwind_rule.h's, over the stack bytes the sample
 * kept. */
#include "unwind/late.h"
#include "unwind/unwinder.h"
#include "python/names.h"
#include "symbolize/symbolize.h"

#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define USER_LIMIT 0x0100000000000000ull /* bpf/unwind.h's UNW_USER_LIMIT */
#define KEY_CACHE 256			 /* files' keys remembered by path */

struct late_walk;
static int late_read(struct late_walk *w, __u64 addr, __u64 *out);
#define UNW_RULE_CTX struct late_walk
#define UNW_RULE_READ(c, addr, out) late_read(c, addr, out)
#include "unwind_rule.h" /* bpf/: the rules the BPF walker steps by */

/* A sample waiting: its record's head, what it kept, the image its
 * process ran (its mappings), when it came. */
struct late_entry {
	uint64_t taken_ns;
	uint32_t image;
	bool crowded;	    /* taken past the bound: finished at once */
	uint64_t tried_gen; /* the tables' generation its last walk waited at */
	struct cpu_sample s;
	struct {
		uint64_t pc, sp, bp, stack_base;
		uint32_t leaf, flags, nstack, npy;
		uint8_t page[LATE_PAGES];
	} h; /* struct late_stack's head; its arrays are below */
	uint64_t *py;
	uint8_t *py_kind;
	uint8_t *stack;
	size_t bytes;
};

/* A file's key by the path the kernel reported its mapping with (the
 * symbolizer's interned strings: one pointer a path). */
struct key_slot {
	const char *path;
	struct unw_file_key key;
};

struct unw_late {
	struct unwinder *u;
	struct symbolizer *sym;
	struct unw_late_opts o;
	struct late_entry **q; /* in the order they came */
	size_t n, cap;
	struct key_slot keys[KEY_CACHE];
	struct unw_late_stats st;
};

/* ---- the walk ---------------------------------------------------------- */

struct late_walk {
	struct unw_late *l;
	const struct late_entry *e;
	bool force; /* no waiting: frame pointers where a table is missing */
	struct unw_regs r;
	uint64_t ips[CPU_MAX_FRAMES];
	uint32_t n, max; /* frames added; room for them */
	uint32_t py_next;
	bool py_run, py_done;
	bool ended, truncated, outside, no_python, gave_up;
};

/* Where the byte at addr is among those the sample kept, or NULL. */
static const uint8_t *kept_at(const struct late_entry *e, uint64_t addr)
{
	uint64_t page = (addr - e->h.stack_base) / LATE_PAGE;

	if (addr < e->h.stack_base || page >= LATE_FAR)
		return NULL;
	for (uint32_t i = 0; i < e->h.nstack / LATE_PAGE; i++)
		if (e->h.page[i] == page)
			return e->stack + i * LATE_PAGE + (addr % LATE_PAGE);
	return NULL;
}

/* A stack word the sample kept; -1 if it did not keep it. */
static int late_read(struct late_walk *w, __u64 addr, __u64 *out)
{
	size_t first = LATE_PAGE - addr % LATE_PAGE;
	const uint8_t *lo = kept_at(w->e, addr), *hi = lo;

	/* A word across two pages, which may be kept apart. */
	if (first < 8)
		hi = kept_at(w->e, addr + first);
	else
		first = 8;
	if (!lo || !hi) {
		w->outside = true;
		return -1;
	}
	memcpy(out, lo, first);
	memcpy((uint8_t *)out + first, hi, 8 - first);
	return 0;
}

/* The frame's file: where its mapping is, its rows, its Python pieces. */
struct late_file {
	uint64_t start, end, pgoff; /* pgoff in bytes */
	struct unwinder_table t;
};

/* Where the walk's process's mapping m can be opened: /proc/PID/map_files
 * while the process lives (the very file it maps, whatever its mount
 * namespace), else the path it was mapped by. */
static void open_path(const struct late_walk *w, const struct sym_map_info *m, char *buf,
		      size_t size)
{
	snprintf(buf, size, "/proc/%" PRIu32 "/map_files/%" PRIx64 "-%" PRIx64, w->e->s.pid,
		 m->start, m->end);
	if (access(buf, F_OK))
		snprintf(buf, size, "%s", m->path);
}

/* The kernel's key of the file the walk's process maps at m, whose record
 * gave a build-id instead: from the file itself, remembered by path. 0,
 * or -ENOENT. */
static int file_key(struct late_walk *w, const struct sym_map_info *m, struct unw_file_key *out)
{
	struct key_slot *slot = &w->l->keys[((uintptr_t)m->path >> 4) % KEY_CACHE];
	struct stat st;
	char path[4096];
	int fd;

	if (slot->path == m->path) {
		*out = slot->key;
		return 0;
	}
	open_path(w, m, path, sizeof(path));
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -ENOENT;
	if (fstat(fd, &st)) {
		close(fd);
		return -ENOENT;
	}
	close(fd);
	out->dev = ((uint64_t)major(st.st_dev) << 20) | minor(st.st_dev);
	out->ino = st.st_ino;
	slot->path = m->path;
	slot->key = *out;
	return 0;
}

/* The file of the frame at target into f: 0, or -EAGAIN while its table
 * is being built (unless the walk is forced). A frame in no known mapping,
 * in anonymous memory or in a file without a table gets no rows: frame
 * pointers, as on the BPF side. */
static int late_file(struct late_walk *w, uint64_t target, struct late_file *f)
{
	struct sym_map_info m;
	struct unw_file_key key;
	char path[4096];
	int err;

	memset(f, 0, sizeof(*f));
	if (symbolizer__mapping(w->l->sym, w->e->image, target, &m))
		return 0;
	f->start = m.start;
	f->end = m.end;
	f->pgoff = m.pgoff;
	if (m.vdso) {
		key = (struct unw_file_key){0, UNW_VDSO_INO};
	} else if (m.anon || !m.path) {
		return 0;
	} else if (m.ino) {
		key = (struct unw_file_key){((uint64_t)major(m.dev) << 20) | minor(m.dev), m.ino};
	} else if (file_key(w, &m, &key)) {
		return 0;
	}
	err = unwinder__table(w->l->u, &key, &f->t);
	if (err == -ENOENT && !m.vdso) {
		open_path(w, &m, path, sizeof(path));
		err = unwinder__request(w->l->u, &key, path, m.path) ? 0 : -EAGAIN;
	}
	if (err != -EAGAIN)
		return 0;
	if (!w->force)
		return -EAGAIN;
	w->gave_up = true;
	return 0;
}

static bool in_eval(const struct unw_py_file *py, uint64_t off)
{
	for (uint32_t i = 0; i < py->neval && i < UNW_PY_EVAL_RANGES; i++)
		if (py->eval_start[i] <= off && off < py->eval_end[i])
			return true;
	return false;
}

/* The row of f's table that holds file offset off, or NULL. */
static const struct unw_row *search(const struct unwinder_table *t, uint32_t off)
{
	size_t lo = 0, hi = t->n;

	if (!t->rows || !t->n || t->rows[0].off > off)
		return NULL;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (t->rows[mid].off <= off)
			lo = mid;
		else
			hi = mid;
	}
	return &t->rows[lo];
}

static void push(struct late_walk *w, uint64_t ip)
{
	w->ips[w->n++] = ip;
}

/* The next Python frame of the thread in place of an interpreter-loop
 * frame (as unw_py_emit does). */
static void py_emit(struct late_walk *w)
{
	uint32_t k = w->py_next++;

	if (k >= w->e->h.npy) {
		w->py_run = false;
		return;
	}
	if (w->e->py_kind[k] == UNW_PYK_SHIM) {
		w->py_run = false;
		return;
	}
	push(w, w->e->py[k]);
	if (w->e->py_kind[k] == UNW_PYK_LAST)
		w->py_run = false;
}

/* Walks the sample on from where the BPF side stopped. 0 when done,
 * -EAGAIN when a table it needs is on its way. */
static int walk(struct late_walk *w)
{
	for (;;) {
		uint64_t pc = w->r.pc, target, off;
		const struct unw_row *row;
		struct late_file f;
		int res;

		if (w->n >= w->max) {
			w->truncated = w->py_run || (pc && pc < USER_LIMIT);
			return 0;
		}
		if (w->py_run) {
			py_emit(w);
			continue;
		}
		if (!pc || pc >= USER_LIMIT)
			return 0;
		target = w->r.leaf ? pc : pc - 1;
		if (late_file(w, target, &f))
			return -EAGAIN;
		off = target - f.start + f.pgoff;
		if (f.t.python && !w->py_done && in_eval(&f.t.py, off)) {
			if (w->py_next < w->e->h.npy) {
				w->py_run = w->py_done = true;
				continue;
			}
			if (!(w->e->h.flags & LATE_F_PY))
				w->no_python = true;
		}
		if (!w->py_done)
			push(w, pc);
		w->py_done = false;
		row = search(&f.t, (uint32_t)off);
		res = row ? unw_rule_step(w, row, &w->r) : unw_rule_fp(w, &w->r);
		if (res == UNW_RULE_SIGNAL && w->n)
			w->ips[w->n - 1] = UNW_SIGNAL_FRAME;
		if (res == UNW_RULE_END)
			w->ended = true;
		if (res == UNW_RULE_END || res == UNW_RULE_FAIL)
			return 0;
	}
}

/* Walks e: 0 and hands it to fn when done, -EAGAIN to keep it waiting. */
static int finish(struct unw_late *l, struct late_entry *e, bool force, unw_late_fn fn, void *ctx)
{
	struct late_walk w = {.l = l, .e = e, .force = force || e->crowded};
	uint32_t nk = e->s.nkern > 0 ? (uint32_t)e->s.nkern : 0;
	struct cpu_sample out;

	w.r = (struct unw_regs){e->h.pc, e->h.sp, e->h.bp, e->h.leaf};
	w.max = CPU_MAX_FRAMES - e->s.nuser;
	if (walk(&w))
		return -EAGAIN;
	out = e->s;
	memcpy(&out.ips[nk + out.nuser], w.ips, w.n * sizeof(w.ips[0]));
	out.nuser += w.n;
	out.flags &= ~CPU_SF_LATE;
	if (w.truncated)
		out.flags |= CPU_SF_TRUNCATED;
	l->st.finished++;
	l->st.frames += w.n;
	l->st.ended += w.ended;
	l->st.waited_out += w.gave_up && !e->crowded;
	l->st.crowded_out += e->crowded;
	l->st.stack_cut += w.outside && (e->h.flags & LATE_F_STACK_CUT);
	l->st.no_python += w.no_python;
	fn(ctx, &out);
	return 0;
}

/* ---- the waiting room ---------------------------------------------------- */

struct unw_late *unw_late__new(struct unwinder *u, struct symbolizer *sym,
			       const struct unw_late_opts *opts)
{
	struct unw_late *l = xcalloc(1, sizeof(*l));

	l->u = u;
	l->sym = sym;
	if (opts)
		l->o = *opts;
	if (!l->o.max_bytes)
		l->o.max_bytes = UNW_LATE_MAX_BYTES_DEFAULT;
	if (!l->o.max_wait_ns)
		l->o.max_wait_ns = UNW_LATE_MAX_WAIT_NS_DEFAULT;
	return l;
}

void unw_late__free(struct unw_late *l)
{
	if (!l)
		return;
	for (size_t i = 0; i < l->n; i++) {
		symbolizer__hold(l->sym, l->q[i]->image, false);
		free(l->q[i]);
	}
	free(l->q);
	free(l);
}

static void names_now(struct unw_late *l, const struct cpu_sample *s, const struct late_stack *h)
{
	struct py_names *pn = symbolizer__python(l->sym);
	uint32_t nk = s->nkern > 0 ? (uint32_t)s->nkern : 0;

	for (int i = 0; i < s->nuser; i++)
		if (py_names__is_frame(s->ips[nk + i]))
			py_names__load(pn, s->pid, s->ips[nk + i]);
	for (uint32_t i = 0; i < h->npy; i++)
		if (h->py_kind[i] != UNW_PYK_SHIM)
			py_names__load(pn, s->pid, h->py[i]);
}

int unw_late__take(struct unw_late *l, const struct cpu_sample *s, const struct late_stack *h,
		   size_t late_size)
{
	struct late_entry *e;
	size_t bytes;

	if (late_size < offsetof(struct late_stack, stack) || h->nstack > LATE_STACK_BYTES ||
	    h->nstack % LATE_PAGE || late_size != offsetof(struct late_stack, stack) + h->nstack ||
	    h->npy > LATE_PY || s->nuser < 0 || s->nuser > CPU_MAX_FRAMES ||
	    s->nkern > CPU_MAX_FRAMES) {
		l->st.malformed++;
		pr_warn("a deferred stack record that is not one (%zu bytes of its end, %" PRIu32
			" stack bytes, %" PRIu32 " Python frames) skipped",
			late_size,
			late_size >= offsetof(struct late_stack, npy) + 4 ? h->nstack : 0,
			late_size >= offsetof(struct late_stack, npy) + 4 ? h->npy : 0);
		return -EINVAL;
	}
	bytes = sizeof(*e) + h->npy * (sizeof(uint64_t) + 1) + h->nstack;
	e = xmalloc(bytes);
	e->taken_ns = mono_ns();
	e->tried_gen = UINT64_MAX; /* never walked */
	e->bytes = bytes;
	e->crowded = l->st.waiting_bytes + bytes > l->o.max_bytes;
	e->s = *s;
	e->s.flags |= CPU_SF_LATE;
	e->h.pc = h->pc;
	e->h.sp = h->sp;
	e->h.bp = h->bp;
	e->h.stack_base = h->stack_base;
	e->h.leaf = h->leaf;
	e->h.flags = h->flags;
	e->h.nstack = h->nstack;
	e->h.npy = h->npy;
	memcpy(e->h.page, h->page, sizeof(e->h.page));
	e->py = (uint64_t *)(e + 1);
	e->py_kind = (uint8_t *)(e->py + h->npy);
	e->stack = e->py_kind + h->npy;
	memcpy(e->py, h->py, h->npy * sizeof(uint64_t));
	memcpy(e->py_kind, h->py_kind, h->npy);
	memcpy(e->stack, h->stack, h->nstack);
	/* The names of its Python frames now, while their code objects can
	 * be read: it may be finished after its process exited. */
	names_now(l, s, h);
	/* The image now, while the process's exec is fresh. */
	e->image = symbolizer__image(l->sym, s->pid, s->ts_ns);
	symbolizer__hold(l->sym, e->image, true);
	xgrow((void **)&l->q, &l->cap, l->n + 1, sizeof(*l->q));
	l->q[l->n++] = e;
	l->st.taken++;
	l->st.waiting_bytes += bytes;
	if (l->st.waiting_bytes > l->st.peak_bytes)
		l->st.peak_bytes = l->st.waiting_bytes;
	return 0;
}

int unw_late__add(struct unw_late *l, const struct cpu_sample_late *r, size_t size)
{
	if (size < offsetof(struct cpu_sample_late, l) || !(r->s.flags & CPU_SF_LATE)) {
		l->st.malformed++;
		pr_warn("a deferred CPU sample record that is not one (%zu bytes) skipped", size);
		return -EINVAL;
	}
	return unw_late__take(l, &r->s, &r->l, size - offsetof(struct cpu_sample_late, l));
}

size_t unw_late__poll(struct unw_late *l, bool force, unw_late_fn fn, void *ctx)
{
	uint64_t now = mono_ns(), gen = unwinder__generation(l->u);
	size_t kept = 0, done = 0;

	for (size_t i = 0; i < l->n; i++) {
		struct late_entry *e = l->q[i];
		bool late = force || now - e->taken_ns >= l->o.max_wait_ns;

		/* Walked again once a table came since it last waited. */
		if ((!late && e->tried_gen == gen) || finish(l, e, late, fn, ctx)) {
			e->tried_gen = gen;
			l->q[kept++] = e;
			continue;
		}
		l->st.waiting_bytes -= e->bytes;
		symbolizer__hold(l->sym, e->image, false);
		free(e);
		done++;
	}
	l->n = kept;
	return done;
}

void unw_late__stats(const struct unw_late *l, struct unw_late_stats *out)
{
	*out = l->st;
	out->waiting = l->n;
}
