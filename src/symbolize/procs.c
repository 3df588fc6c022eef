/* procs.c: the processes the symbolizer knows and the images (one per
 * exec) their addresses are resolved in -- see symbolize_internal.h. Fed
 * two ways: by the kernel's records as they happen (symbolizer__mmap,
 * __exec, __fork, __exit, from src/probe/sideband.c), which is how a
 * process born while Sonde runs is known however short its life, and by
 * /proc/PID/maps for one that was running before (read when first needed)
 * or whose records were lost (read again on a miss, at most every 100 ms).
 * Bounded: SYMBOLIZE_MAX_PROCS processes, SYMBOLIZE_MAX_IMAGES images each,
 * SYMBOLIZE_MAX_MAPPINGS mappings an image; exited processes are dropped by
 * symbolizer__forget_exited() once their windows are written. */
#include "symbolize/symbolize_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/htable.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "common/search.h"

#define MAPS_REREAD_NS (100ull * NS_PER_MS) /* at most one maps re-read per pid per 100 ms */
/* ... after the first few: a process that just exec'ed maps its libraries
 * within milliseconds, and each step may be the one a sample needs. */
#define MAPS_FREE_READS 4
#define INHERIT_DEPTH 16 /* forked children followed up to an ancestor's image */

/* ---- images ---- */

/* Frees im and every older image of its process. */
static void images_free(struct symbolizer *s, struct image *im)
{
	while (im) {
		struct image *next = im->older;

		HASH_DEL(s->images, im);
		free(im->maps);
		free(im);
		s->stats.images--;
		im = next;
	}
}

static struct image *image_new(struct symbolizer *s, struct proc *p, uint64_t start_ns)
{
	struct image *im = xcalloc(1, sizeof(*im)), *old, **pp;
	unsigned n = 0;

	/* Ids are never 0 and never reused while the symbolizer lives (2^32
	 * execs: the counter wraps past 0). */
	if (!++s->next_image)
		++s->next_image;
	im->id = s->next_image;
	im->start_ns = start_ns;
	im->proc = p;
	HASH_ADD(hh, s->images, id, sizeof(im->id), im);
	s->stats.images++;
	/* Newest first: an image older than the newest (a record that came
	 * late) goes where its start puts it. */
	for (pp = &p->image; *pp && (*pp)->start_ns > start_ns; pp = &(*pp)->older)
		;
	im->older = *pp;
	*pp = im;
	/* A process that execs in a loop keeps its last images only. */
	for (old = p->image; old; old = old->older)
		if (++n == SYMBOLIZE_MAX_IMAGES && old->older) {
			images_free(s, old->older);
			old->older = NULL;
			break;
		}
	return im;
}

static void image_free_all(struct symbolizer *s, struct proc *p)
{
	images_free(s, p->image);
	p->image = NULL;
}

struct image *images__find(struct symbolizer *s, uint32_t id)
{
	struct image *im;

	HASH_FIND(hh, s->images, &id, sizeof(id), im);
	return im;
}

struct image *proc__image_at(struct proc *p, uint64_t ts_ns)
{
	struct image *im = p->image;

	while (im && im->start_ns > ts_ns && im->older)
		im = im->older;
	return im;
}

/* The index of the first mapping of im that ends past addr. */
static size_t image__lower(const struct image *im, uint64_t addr)
{
	return PARTITION_POINT(im->nmaps, i, im->maps[i].end <= addr);
}

/* Puts m into im, cutting what it overlaps out of the mappings there (a
 * MAP_FIXED over part of one, a library mapped where another was). */
static int image__insert(struct image *im, const struct sym_mapping *m)
{
	size_t i = image__lower(im, m->start), j;
	int err;

	if (m->end <= m->start)
		return -EINVAL;
	/* Room for m and a split in two of the mapping it lands inside. */
	if (im->nmaps + 2 > SYMBOLIZE_MAX_MAPPINGS)
		return -E2BIG;
	err = array_grow((void **)&im->maps, &im->cap, im->nmaps + 2, sizeof(*im->maps));
	if (err)
		return err;
	if (i < im->nmaps && im->maps[i].start < m->start && im->maps[i].end > m->end) {
		/* Inside one: split it around m. */
		struct sym_mapping right = im->maps[i];

		right.pgoff += m->end - right.start;
		right.start = m->end;
		im->maps[i].end = m->start;
		memmove(&im->maps[i + 2], &im->maps[i + 1],
			(im->nmaps - i - 1) * sizeof(*im->maps));
		im->maps[i + 1] = *m;
		im->maps[i + 2] = right;
		im->nmaps += 2;
		return 0;
	}
	if (i < im->nmaps && im->maps[i].start < m->start) {
		im->maps[i].end = m->start; /* its tail was overwritten */
		i++;
	}
	/* [i, j): the mappings m covers whole; j may start inside m. */
	for (j = i; j < im->nmaps && im->maps[j].end <= m->end; j++)
		;
	if (j < im->nmaps && im->maps[j].start < m->end) {
		im->maps[j].pgoff += m->end - im->maps[j].start;
		im->maps[j].start = m->end;
	}
	if (j > i + 1)
		memmove(&im->maps[i + 1], &im->maps[j], (im->nmaps - j) * sizeof(*im->maps));
	else if (j == i)
		memmove(&im->maps[i + 1], &im->maps[i], (im->nmaps - i) * sizeof(*im->maps));
	im->nmaps += 1 - (j - i);
	im->maps[i] = *m;
	return 0;
}

/* ---- processes ---- */

struct proc *procs__find(struct symbolizer *s, uint32_t pid)
{
	struct proc *p;

	if (s->last && s->last->pid == pid)
		return s->last;
	HASH_FIND(hh, s->procs, &pid, sizeof(pid), p);
	if (p)
		s->last = p;
	return p;
}

/* A new process of pid; one already there (its pid reused) goes to the
 * graveyard, where its images stay resolvable until forgotten. NULL past
 * the bound. */
static struct proc *proc_new(struct symbolizer *s, uint32_t pid)
{
	struct proc *old, *p;

	if (s->nprocs >= SYMBOLIZE_MAX_PROCS) {
		s->stats.dropped++;
		return NULL;
	}
	HASH_FIND(hh, s->procs, &pid, sizeof(pid), old);
	if (old) {
		HASH_DEL(s->procs, old);
		old->gone = true;
		old->grave = s->graveyard;
		s->graveyard = old;
	}
	p = xcalloc(1, sizeof(*p));
	p->pid = pid;
	p->jit.size = -1;
	HASH_ADD(hh, s->procs, pid, sizeof(p->pid), p);
	s->last = p;
	s->nprocs++;
	s->stats.procs = s->nprocs;
	return p;
}

static void proc_free(struct symbolizer *s, struct proc *p)
{
	if (s->ext)
		s->ext->forget_pid(s->ext, p->pid);
	image_free_all(s, p);
	perfmap__release(&p->jit);
	if (s->last == p)
		s->last = NULL;
	if (p->counted)
		s->stats.pids_tracked--;
	free(p);
	s->nprocs--;
	s->stats.procs = s->nprocs;
}

struct maps_collect {
	struct symbolizer *s;
	struct image *im;
	size_t n;
	int err;
};

static int collect_mapping(const struct maps_line *l, void *arg)
{
	struct maps_collect *mc = arg;
	struct sym_mapping m = {
		.start = l->start,
		.end = l->end,
		.pgoff = l->pgoff,
		.key = {makedev(l->dev_major, l->dev_minor), l->ino},
		.kind = l->kind,
		.deleted = l->deleted,
	};
	int err;

	if (!l->exec)
		return 0;
	m.path = l->path_len ? strpool__intern(mc->s->pool, l->path, l->path_len) : NULL;
	err = image__insert(mc->im, &m);
	if (err == -ENOMEM)
		return err;
	mc->n++;
	return 0;
}

/* Reads p's executable mappings into its newest image. Returns 0, -ESRCH
 * if the process is gone, or -errno. */
static int proc__read_maps(struct symbolizer *s, struct proc *p)
{
	struct maps_collect mc = {.s = s};
	char path[64];
	FILE *f;
	int err;

	p->maps_read_ns = mono_ns();
	p->maps_reads++;
	if (!p->image && !image_new(s, p, 0))
		return -ENOMEM;
	mc.im = p->image;
	snprintf(path, sizeof(path), "/proc/%u/maps", p->pid);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? -ESRCH : -errno;
	s->stats.maps_reads++;
	err = maps__parse(f, collect_mapping, &mc);
	fclose(f);
	/* Reading fails, or finds nothing (a zombie), once the process exited. */
	if (err == -EIO || (!err && !mc.n))
		return -ESRCH;
	if (err)
		return err;
	p->read = true;
	p->read_ns = p->maps_read_ns;
	/* The files are at hand now; the process may be gone when its
	 * samples are named. */
	for (size_t i = 0; i < mc.im->nmaps; i++)
		symbolizer__object(s, p->pid, &mc.im->maps[i]);
	if (!p->counted) {
		p->counted = true;
		s->stats.pids_tracked++;
	}
	return 0;
}

struct proc *procs__get(struct symbolizer *s, uint32_t pid)
{
	struct proc *p = procs__find(s, pid);

	if (p)
		return p;
	p = proc_new(s, pid);
	if (!p)
		return NULL;
	/* Kept even if the read fails, so that the samples of a pid that
	 * can't be read don't each retry it. */
	if (proc__read_maps(s, p) == -ESRCH)
		p->gone = true;
	return p;
}

/* Whether p's newest image holds everything p maps now: fed by the kernel
 * since its exec, or read from /proc. */
static bool proc__known(const struct proc *p)
{
	return p->read || (p->image && p->image->complete);
}

int symbolizer__track_pid(struct symbolizer *s, uint32_t pid, bool refresh)
{
	struct proc *p = procs__find(s, pid);
	int err;

	if (p && proc__known(p) && !refresh)
		return 0;
	if (!p) {
		p = procs__get(s, pid);
		if (!p)
			return -ENOSPC;
		return p->read || !p->gone ? 0 : -ESRCH;
	}
	if (p->gone)
		return proc__known(p) ? 0 : -ESRCH;
	err = proc__read_maps(s, p);
	if (err == -ESRCH) {
		/* Exited: what was seen is what its samples need. */
		p->gone = true;
		return proc__known(p) || p->image->nmaps ? 0 : -ESRCH;
	}
	return err;
}

/* Copies into im (a forked child's first image) the mappings its parent had
 * at the fork, once, when first needed. */
static void image__inherit(struct symbolizer *s, struct image *im, unsigned depth)
{
	struct proc *parent;
	struct image *from;

	if (!im->inherit)
		return;
	im->inherit = false;
	parent = procs__find(s, im->parent);
	if (!parent && depth < INHERIT_DEPTH)
		parent = procs__get(s, im->parent);
	from = parent ? proc__image_at(parent, im->fork_ns) : NULL;
	if (from && from != im) {
		image__inherit(s, from, depth + 1);
		/* The child's own mmaps since the fork win over the copy. */
		for (size_t i = 0; i < from->nmaps; i++) {
			bool mine = false;

			for (size_t k = 0; k < im->nmaps && !mine; k++)
				mine = im->maps[k].start < from->maps[i].end &&
				       from->maps[i].start < im->maps[k].end;
			if (!mine && image__insert(im, &from->maps[i]))
				break;
		}
		return;
	}
	/* The parent is not known: the child's own maps, while it lives. */
	if (!im->proc->gone && im == im->proc->image && proc__read_maps(s, im->proc) == -ESRCH)
		im->proc->gone = true;
}

struct sym_mapping *image__find(struct symbolizer *s, struct image *im, uint64_t addr)
{
	struct proc *p = im->proc;
	size_t i;

	image__inherit(s, im, 0);
	i = image__lower(im, addr);
	if (i < im->nmaps && im->maps[i].start <= addr)
		return &im->maps[i];
	/* A library dlopen()ed since /proc was read, or a record lost: read
	 * the maps again, of a live process's newest image only. */
	if (p->gone || im != p->image ||
	    (p->maps_reads >= MAPS_FREE_READS && mono_ns() - p->maps_read_ns < MAPS_REREAD_NS))
		return NULL;
	if (proc__read_maps(s, p) == -ESRCH) {
		p->gone = true;
		return NULL;
	}
	i = image__lower(im, addr);
	return i < im->nmaps && im->maps[i].start <= addr ? &im->maps[i] : NULL;
}

/* ---- what the kernel reports ---- */

/* Whether p was read from /proc after ts_ns: a record of that time (which
 * may come late, the sideband being drained after the process was read)
 * tells nothing the read did not. Its mappings are then in p's newest
 * image, whatever records of that time were lost to a full ring. */
static bool proc__read_since(const struct proc *p, uint64_t ts_ns)
{
	return p->read && !p->gone && p->read_ns > ts_ns;
}

static void hex_build_id(const uint8_t *id, size_t n, char *out)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = hex[id[i] >> 4];
		out[2 * i + 1] = hex[id[i] & 15];
	}
	out[2 * n] = 0;
}

void symbolizer__mmap(struct symbolizer *s, const struct sym_mmap *r)
{
	struct proc *p = procs__find(s, r->pid);
	struct sym_mapping m = {
		.start = r->start,
		.end = r->start + r->len,
		.pgoff = r->pgoff,
		.key = {r->dev, r->ino},
		.kind = maps__classify(r->path ? r->path : ""),
	};
	struct image *im;

	if (!r->len || m.end < m.start)
		return;
	/* A process from before the sideband: its earlier mappings come
	 * from /proc when it is first needed. */
	if (!p && !(p = proc_new(s, r->pid)))
		return;
	if (!p->image && !image_new(s, p, 0))
		return;
	im = proc__image_at(p, r->ts_ns);
	if (m.kind == MAPPING_FILE || m.kind == MAPPING_VDSO)
		m.path = strpool__intern(s->pool, r->path, strlen(r->path));
	if (r->build_id && r->build_id_len && r->build_id_len <= SYMBOLIZE_MAX_BUILD_ID) {
		char hex[2 * SYMBOLIZE_MAX_BUILD_ID + 1];

		hex_build_id(r->build_id, r->build_id_len, hex);
		m.build_id = strpool__intern(s->pool, hex, 2 * r->build_id_len);
	}
	if (image__insert(im, &m))
		s->stats.dropped++;
}

void symbolizer__exec(struct symbolizer *s, uint32_t pid, uint64_t ts_ns, const char *comm)
{
	struct proc *p = procs__find(s, pid);
	struct image *im;

	if (!p && !(p = proc_new(s, pid)))
		return;
	/* The same exec seen twice (a record replayed) is one image. */
	for (im = p->image; im; im = im->older)
		if (im->complete && im->start_ns == ts_ns && !im->inherit)
			return;
	/* Read from /proc since: the newest image is this exec's already,
	 * holding what it mapped before the read, records lost or not. */
	im = p->image;
	if (im && !im->inherit && im->start_ns <= ts_ns && proc__read_since(p, ts_ns))
		im->start_ns = ts_ns;
	else
		im = image_new(s, p, ts_ns);
	im->complete = true;
	p->gone = false;
	if (comm)
		snprintf(p->comm, sizeof(p->comm), "%s", comm);
}

void symbolizer__rename(struct symbolizer *s, uint32_t pid, const char *comm)
{
	struct proc *p = procs__find(s, pid);

	if (p && comm)
		snprintf(p->comm, sizeof(p->comm), "%s", comm);
}

void symbolizer__fork(struct symbolizer *s, uint32_t ppid, uint32_t pid, uint64_t ts_ns)
{
	struct proc *parent = procs__find(s, ppid), *p = procs__find(s, pid);
	struct image *im;

	if (pid == ppid)
		return; /* a thread */
	/* Already known from a later record (its exec), or read from /proc
	 * since (the same process: a pid is not reused while it lives). */
	if (p && !p->gone && p->image && (p->image->start_ns > ts_ns || proc__read_since(p, ts_ns)))
		return;
	p = proc_new(s, pid);
	if (!p)
		return;
	im = image_new(s, p, ts_ns);
	im->complete = true;
	im->inherit = true;
	im->parent = ppid;
	im->fork_ns = ts_ns;
	if (parent)
		memcpy(p->comm, parent->comm, sizeof(p->comm));
}

void symbolizer__exit(struct symbolizer *s, uint32_t pid, uint64_t ts_ns)
{
	struct proc *p = procs__find(s, pid);

	if (p)
		p->gone = true;
}

void symbolizer__set_sync(struct symbolizer *s, symbolizer_sync_fn fn, void *ctx)
{
	s->sync = fn;
	s->sync_ctx = ctx;
}

void symbolizer__set_horizon(struct symbolizer *s, uint64_t ts_ns)
{
	if (ts_ns > s->horizon_ns)
		s->horizon_ns = ts_ns;
}

uint32_t symbolizer__image(struct symbolizer *s, uint32_t pid, uint64_t ts_ns)
{
	struct proc *p;
	struct image *im;

	if (s->sync && ts_ns >= s->horizon_ns)
		s->sync(s->sync_ctx);
	p = procs__get(s, pid);
	if (!p)
		return 0;
	if (!p->image && !image_new(s, p, 0))
		return 0;
	im = proc__image_at(p, ts_ns);
	return im->id;
}

int symbolizer__mapping(struct symbolizer *s, uint32_t image, uint64_t addr,
			struct sym_map_info *out)
{
	struct image *im = images__find(s, image);
	struct sym_mapping *m = im ? image__find(s, im, addr) : NULL;

	if (!m)
		return -ENOENT;
	*out = (struct sym_map_info){
		.start = m->start,
		.end = m->end,
		.pgoff = m->pgoff,
		.dev = m->key.dev,
		.ino = m->key.ino,
		.path = m->path,
		.vdso = m->kind == MAPPING_VDSO,
		.anon = m->kind == MAPPING_ANON || m->kind == MAPPING_VSYSCALL,
	};
	return 0;
}

void symbolizer__hold(struct symbolizer *s, uint32_t image, bool hold)
{
	struct image *im = images__find(s, image);

	if (!im)
		return;
	if (hold)
		im->proc->holds++;
	else if (im->proc->holds)
		im->proc->holds--;
}

const char *symbolizer__comm(struct symbolizer *s, uint32_t pid)
{
	struct proc *p = procs__find(s, pid);
	char path[64];
	ssize_t n;
	int fd;

	if (!p && !(p = proc_new(s, pid)))
		return "";
	if (p->comm[0] || p->gone)
		return p->comm;
	snprintf(path, sizeof(path), "/proc/%u/comm", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return p->comm;
	n = read(fd, p->comm, sizeof(p->comm) - 1);
	close(fd);
	p->comm[n > 0 ? n : 0] = 0;
	p->comm[strcspn(p->comm, "\n")] = 0;
	return p->comm;
}

/* ---- forgetting ---- */

void symbolizer__forget_pid(struct symbolizer *s, uint32_t pid)
{
	struct proc *p;

	HASH_FIND(hh, s->procs, &pid, sizeof(pid), p);
	if (!p)
		return;
	HASH_DEL(s->procs, p);
	proc_free(s, p);
}

size_t symbolizer__forget_exited(struct symbolizer *s)
{
	struct proc *p, *tmp;
	struct image *im, *itmp;
	size_t n = 0;

	/* A child that has not taken its parent's mappings yet takes them
	 * now, before the parent may be forgotten. */
	HASH_ITER(hh, s->images, im, itmp)
	{
		if (im->inherit)
			image__inherit(s, im, 0);
	}
	for (struct proc **pp = &s->graveyard; (p = *pp);) {
		if (p->holds) {
			pp = &p->grave;
			continue;
		}
		*pp = p->grave;
		proc_free(s, p);
		n++;
	}
	HASH_ITER(hh, s->procs, p, tmp)
	{
		char path[64];

		snprintf(path, sizeof(path), "/proc/%u", p->pid);
		if (p->holds || (!p->gone && access(path, F_OK) == 0))
			continue;
		symbolizer__forget_pid(s, p->pid);
		n++;
	}
	return n;
}

void procs__free_all(struct symbolizer *s)
{
	struct proc *p;

	HTABLE_CLEAR(hh, s->procs, p, proc_free(s, p));
	while ((p = s->graveyard)) {
		s->graveyard = p->grave;
		proc_free(s, p);
	}
}
