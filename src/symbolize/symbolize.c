/* symbolize.c: the symbolizer of symbolize.h, used by `sonde record`,
 * `sonde top` and the agent to name the addresses of sampled stacks. It
 * keeps, per tracked pid, the executable mappings read from /proc/PID/maps,
 * each pointing to an ELF object (elf.c) shared by every process that maps
 * the same file: objects are found by device and inode, then by build-id,
 * and live until the symbolizer is freed, so an exited process still
 * resolves. Anonymous code is named from the pid's perf map (perfmap.c),
 * kernel addresses from /proc/kallsyms (kallsyms.c), the vdso from our own
 * copy of it (the same kernel maps the same image in every process). */
#include "symbolize/symbolize.h"
#include "common/clock.h"
#include "symbolize/symbolize_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"

#define MAPS_REREAD_NS (100 * 1000000ull) /* at most one maps re-read per pid per 100 ms */
/* ... after the first few: a process that just exec'ed maps its libraries
 * within milliseconds, and each step may be the one a sample needs. */
#define MAPS_FREE_READS 4
#define JIT_REREAD_NS (1000 * 1000000ull) /* at most one perf map re-read per pid per second */
#define DEFAULT_DEBUG_DIR "/usr/lib/debug"
#define KERNEL_MODULE "[kernel.kallsyms]"
#define JIT_MODULE "[jit]"

struct obj_key {
	uint64_t dev, ino;
};

/* A file seen in a process's mappings and the object read from it; several
 * files share one object when their build-ids are equal. */
struct obj_alias {
	struct obj_key key;
	struct elf_object *obj;
	int64_t mtime_ns, size; /* of the file when read, to notice it was replaced */
	UT_hash_handle hh;
};

struct sym_mapping {
	uint64_t start, end, pgoff;
	struct obj_key key;
	const char *path; /* in the pool, NULL when anonymous */
	enum mapping_kind kind;
	bool deleted;
	struct elf_object *obj; /* NULL: anonymous or unreadable */
};

struct proc {
	uint32_t pid;
	uint32_t nspid;		  /* the pid in its own namespace, 0 until needed */
	struct sym_mapping *maps; /* executable only, sorted by start */
	size_t nmaps;
	uint64_t maps_read_ns; /* last attempt to read them */
	unsigned maps_reads;   /* attempts so far */
	bool seen;	       /* its mappings were read once */
	bool gone;	       /* ...and then could not be: it exited */
	struct perfmap jit;
	UT_hash_handle hh;
};

struct symbolizer {
	struct proc *procs;
	struct proc *last; /* the stack being resolved is usually the last pid's */
	struct obj_alias *aliases;
	struct elf_object *by_build_id;
	struct elf_object *objects; /* every object, through next */
	struct strpool *pool;
	struct ksyms ksyms;
	struct elf_object *vdso;
	uint64_t vdso_size;
	bool vdso_tried;
	char *debug_dir;
	struct symbolizer_stats stats;
};

struct symbolizer *symbolizer__new(void)
{
	struct symbolizer *s;

	if (elf_version(EV_CURRENT) == EV_NONE) {
		pr_err("can't initialize libelf: %s -- is libelf older than the headers?",
		       elf_errmsg(-1));
		errno = EINVAL;
		return NULL;
	}
	s = xcalloc(1, sizeof(*s));
	s->pool = strpool__new();
	s->debug_dir = xstrdup(DEFAULT_DEBUG_DIR);
	return s;
}

static void proc__free(struct proc *p)
{
	free(p->maps);
	perfmap__release(&p->jit);
	free(p);
}

void symbolizer__free(struct symbolizer *s)
{
	struct proc *p, *ptmp;
	struct obj_alias *a, *atmp;
	struct elf_object *obj, *next;

	if (!s)
		return;
	HASH_ITER(hh, s->procs, p, ptmp)
	{
		HASH_DEL(s->procs, p);
		proc__free(p);
	}
	HASH_ITER(hh, s->aliases, a, atmp)
	{
		HASH_DEL(s->aliases, a);
		free(a);
	}
	HASH_CLEAR(hh_bid, s->by_build_id);
	for (obj = s->objects; obj; obj = next) {
		next = obj->next;
		elf_object__free(obj);
	}
	ksyms__release(&s->ksyms);
	strpool__free(s->pool);
	free(s->debug_dir);
	free(s);
}

void symbolizer__set_debug_dir(struct symbolizer *s, const char *dir)
{
	free(s->debug_dir);
	s->debug_dir = dir ? xstrdup(dir) : NULL;
}

void symbolizer__stats(const struct symbolizer *s, struct symbolizer_stats *out)
{
	*out = s->stats;
}

static void symbolizer__add_object(struct symbolizer *s, struct elf_object *obj)
{
	obj->next = s->objects;
	s->objects = obj;
	if (obj->build_id)
		HASH_ADD_KEYPTR(hh_bid, s->by_build_id, obj->build_id, strlen(obj->build_id), obj);
	s->stats.objects_loaded++;
}

struct vdso_search {
	uint64_t base, size;
};

static int match_vdso(const struct maps_line *l, void *arg)
{
	struct vdso_search *vs = arg;

	if (l->kind != MAPPING_VDSO || l->start != vs->base)
		return 0;
	vs->size = l->end - l->start;
	return 1;
}

/* Loads the vdso mapped in this process, which is the one of every
 * process of the same ABI: the kernel has a single image. */
static void symbolizer__load_vdso(struct symbolizer *s)
{
	struct vdso_search vs = {.base = getauxval(AT_SYSINFO_EHDR)};
	FILE *f;

	if (!vs.base)
		return;
	f = fopen("/proc/self/maps", "re");
	if (!f) {
		pr_debug("can't read /proc/self/maps: %s -- vdso frames won't be named",
			 strerror(errno));
		return;
	}
	maps__parse(f, match_vdso, &vs);
	fclose(f);
	if (!vs.size)
		return;
	s->vdso = elf_object__open_memory((const void *)(uintptr_t)vs.base, vs.size, "[vdso]");
	elf_object__load_symbols(s->vdso, NULL);
	elf_object__close_file(s->vdso);
	s->vdso_size = vs.size;
	symbolizer__add_object(s, s->vdso);
}

static struct elf_object *symbolizer__vdso(struct symbolizer *s, uint64_t size)
{
	if (!s->vdso_tried) {
		s->vdso_tried = true;
		symbolizer__load_vdso(s);
	} else if (s->vdso) {
		s->stats.object_hits++;
	}
	/* A 32-bit process has another vdso, of another size. */
	return s->vdso && size == s->vdso_size ? s->vdso : NULL;
}

/* Opens the file of mapping m of pid: through map_files, which reaches a
 * deleted file or one in another mount namespace; else through the
 * process's root; else by path, if that is still the same inode. */
static int open_mapped_file(uint32_t pid, const struct sym_mapping *m, struct stat *st)
{
	char path[SYMBOLIZE_MAX_LINE + 64];
	int fd;

	snprintf(path, sizeof(path), "/proc/%u/map_files/%" PRIx64 "-%" PRIx64, pid, m->start,
		 m->end);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	/* The path of a deleted file names another file now, or none. */
	if (fd < 0 && !m->deleted &&
	    snprintf(path, sizeof(path), "/proc/%u/root%s", pid, m->path) < (int)sizeof(path))
		fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && !m->deleted) {
		fd = open(m->path, O_RDONLY | O_CLOEXEC);
		if (fd >= 0 && (fstat(fd, st) || st->st_ino != m->key.ino)) {
			close(fd);
			fd = -1;
		}
	}
	if (fd >= 0 && (fstat(fd, st) || !S_ISREG(st->st_mode) || !st->st_size)) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static int64_t stat_mtime_ns(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

/* Whether the file behind alias a is still the one it was read from: an
 * inode number is reused once the file is deleted (a rebuilt binary). */
static bool alias__current(const struct obj_alias *a, uint32_t pid, const struct sym_mapping *m)
{
	char path[128];
	struct stat st;

	snprintf(path, sizeof(path), "/proc/%u/map_files/%" PRIx64 "-%" PRIx64, pid, m->start,
		 m->end);
	if (stat(path, &st))
		return true; /* can't tell: trust device and inode */
	return stat_mtime_ns(&st) == a->mtime_ns && st.st_size == a->size;
}

/* Returns the object of a mapping, loading it on first sight. */
static struct elf_object *symbolizer__object(struct symbolizer *s, uint32_t pid,
					     const struct sym_mapping *m)
{
	struct elf_object *obj, *known = NULL;
	struct obj_alias *a = NULL;
	struct stat st;
	int fd;

	if (m->kind == MAPPING_VDSO)
		return symbolizer__vdso(s, m->end - m->start);
	if (m->kind != MAPPING_FILE)
		return NULL;
	if (m->key.ino) {
		HASH_FIND(hh, s->aliases, &m->key, sizeof(m->key), a);
		if (a && alias__current(a, pid, m)) {
			s->stats.object_hits++;
			return a->obj;
		}
	}
	fd = open_mapped_file(pid, m, &st);
	if (fd < 0) {
		pr_debug("can't open %s mapped by pid %u: %s -- its frames will be named by offset",
			 m->path, pid, strerror(errno));
		return NULL;
	}
	obj = elf_object__open_fd(fd, m->path);
	if (obj->build_id)
		HASH_FIND(hh_bid, s->by_build_id, obj->build_id, strlen(obj->build_id), known);
	if (known) {
		elf_object__free(obj);
		obj = known;
		s->stats.object_hits++;
	} else {
		elf_object__load_symbols(obj, s->debug_dir);
		elf_object__close_file(obj);
		symbolizer__add_object(s, obj);
	}
	close(fd);
	if (m->key.ino) {
		if (!a) {
			a = xcalloc(1, sizeof(*a));
			a->key = m->key;
			HASH_ADD(hh, s->aliases, key, sizeof(a->key), a);
		}
		a->obj = obj;
		a->mtime_ns = stat_mtime_ns(&st);
		a->size = st.st_size;
	}
	return obj;
}

struct maps_collect {
	struct symbolizer *s;
	struct sym_mapping *maps;
	size_t n, cap;
};

static int collect_mapping(const struct maps_line *l, void *arg)
{
	struct maps_collect *mc = arg;
	int err;

	if (!l->exec)
		return 0;
	err = array_grow((void **)&mc->maps, &mc->cap, mc->n + 1, sizeof(*mc->maps));
	if (err)
		return err;
	mc->maps[mc->n++] = (struct sym_mapping){
		.start = l->start,
		.end = l->end,
		.pgoff = l->pgoff,
		.key = {makedev(l->dev_major, l->dev_minor), l->ino},
		.path = l->path_len ? strpool__intern(mc->s->pool, l->path, l->path_len) : NULL,
		.kind = l->kind,
		.deleted = l->deleted,
	};
	return 0;
}

static int mapping_cmp(const void *pa, const void *pb)
{
	const struct sym_mapping *a = pa, *b = pb;

	return a->start < b->start ? -1 : a->start > b->start;
}

/* Reads p's executable mappings and their objects, replacing the known ones
 * on success. Returns 0, -ESRCH if the process is gone, or -errno. */
static int symbolizer__read_maps(struct symbolizer *s, struct proc *p)
{
	struct maps_collect mc = {.s = s};
	char path[64];
	FILE *f;
	int err;

	p->maps_read_ns = mono_ns();
	p->maps_reads++;
	snprintf(path, sizeof(path), "/proc/%u/maps", p->pid);
	f = fopen(path, "re");
	if (!f) {
		err = errno == ENOENT ? -ESRCH : -errno;
		goto cleanup;
	}
	s->stats.maps_reads++;
	err = maps__parse(f, collect_mapping, &mc);
	/* Reading fails, or finds nothing (a zombie), once the process exited. */
	if (err == -EIO || (!err && !mc.n && p->nmaps))
		err = -ESRCH;
	if (err)
		goto cleanup;
	qsort(mc.maps, mc.n, sizeof(*mc.maps), mapping_cmp);
	for (size_t i = 0; i < mc.n; i++)
		mc.maps[i].obj = symbolizer__object(s, p->pid, &mc.maps[i]);
	free(p->maps);
	p->maps = mc.maps;
	p->nmaps = mc.n;
	mc.maps = NULL;
	p->seen = true;
	p->gone = false;
cleanup:
	if (f)
		fclose(f);
	free(mc.maps);
	return err;
}

static struct proc *symbolizer__find_proc(struct symbolizer *s, uint32_t pid)
{
	struct proc *p;

	if (s->last && s->last->pid == pid)
		return s->last;
	HASH_FIND(hh, s->procs, &pid, sizeof(pid), p);
	if (p)
		s->last = p;
	return p;
}

int symbolizer__track_pid(struct symbolizer *s, uint32_t pid, bool refresh)
{
	struct proc *p = symbolizer__find_proc(s, pid);
	bool was_seen;
	int err;

	if (p && p->seen && !refresh)
		return 0;
	if (!p) {
		/* Kept even if the read fails, so that the samples of a pid
		 * that can't be read don't each retry it. */
		p = xcalloc(1, sizeof(*p));
		p->pid = pid;
		p->jit.size = -1;
		HASH_ADD(hh, s->procs, pid, sizeof(p->pid), p);
		s->last = p;
	}
	was_seen = p->seen;
	err = symbolizer__read_maps(s, p);
	if (err && was_seen) {
		/* Exited: what was seen is what its samples need. */
		p->gone = true;
		err = 0;
	}
	if (!was_seen && p->seen)
		s->stats.pids_tracked++;
	return err;
}

void symbolizer__forget_pid(struct symbolizer *s, uint32_t pid)
{
	struct proc *p;

	HASH_FIND(hh, s->procs, &pid, sizeof(pid), p);
	if (!p)
		return;
	HASH_DEL(s->procs, p);
	if (s->last == p)
		s->last = NULL;
	proc__free(p);
}

size_t symbolizer__forget_exited(struct symbolizer *s)
{
	struct proc *p, *tmp;
	size_t n = 0;

	HASH_ITER(hh, s->procs, p, tmp)
	{
		char path[64];

		snprintf(path, sizeof(path), "/proc/%u", p->pid);
		if (!p->gone && access(path, F_OK) == 0)
			continue;
		symbolizer__forget_pid(s, p->pid);
		n++;
	}
	return n;
}

static const struct sym_mapping *proc__find_mapping(const struct proc *p, uint64_t addr)
{
	size_t lo = 0, hi = p->nmaps;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (p->maps[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (!lo || addr >= p->maps[lo - 1].end)
		return NULL;
	return &p->maps[lo - 1];
}

/* The pid of p in its own pid namespace, from the NSpid line of its status,
 * which lists it last; p's pid when unknown. */
static uint32_t read_nspid(uint32_t pid)
{
	char path[64], line[256];
	uint32_t nspid = pid;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%u/status", pid);
	f = fopen(path, "re");
	if (!f)
		return pid;
	while (fgets(line, sizeof(line), f)) {
		char *last;

		if (strncmp(line, "NSpid:", 6))
			continue;
		last = strrchr(line, '\t');
		if (last && strtoul(last + 1, NULL, 10))
			nspid = (uint32_t)strtoul(last + 1, NULL, 10);
		break;
	}
	fclose(f);
	return nspid;
}

/* (Re-)reads p's perf map if it changed: /tmp/perf-PID.map, or the one in
 * the process's own /tmp and pid namespace (a container). */
static void symbolizer__read_jit(struct symbolizer *s, struct proc *p)
{
	char path[96];
	struct stat st;
	FILE *f;
	int err;

	snprintf(path, sizeof(path), "/tmp/perf-%u.map", p->pid);
	f = fopen(path, "re");
	if (!f) {
		if (!p->nspid)
			p->nspid = read_nspid(p->pid);
		if (p->nspid == p->pid)
			return;
		snprintf(path, sizeof(path), "/proc/%u/root/tmp/perf-%u.map", p->pid, p->nspid);
		f = fopen(path, "re");
		if (!f)
			return;
	}
	if (fstat(fileno(f), &st) ||
	    (stat_mtime_ns(&st) == p->jit.mtime_ns && st.st_size == p->jit.size))
		goto cleanup;
	err = perfmap__load(&p->jit, f, s->pool);
	if (err) {
		pr_warn("can't read JIT symbols from %s: %s -- JIT frames will be unnamed", path,
			strerror(-err));
		goto cleanup;
	}
	p->jit.mtime_ns = stat_mtime_ns(&st);
	p->jit.size = st.st_size;
cleanup:
	fclose(f);
}

static const struct perfmap_entry *symbolizer__find_jit(struct symbolizer *s, struct proc *p,
							uint64_t addr)
{
	const struct perfmap_entry *e = perfmap__find(&p->jit, addr);
	uint64_t now;

	if (e)
		return e;
	/* A miss re-reads the map, which grows as code is compiled. */
	now = mono_ns();
	if (p->jit.checked_ns && now - p->jit.checked_ns < JIT_REREAD_NS)
		return NULL;
	p->jit.checked_ns = now;
	symbolizer__read_jit(s, p);
	return perfmap__find(&p->jit, addr);
}

/* Names addr through the file mapping m. Returns false when the file is not
 * ELF, so that it may be JIT code in a memfd. */
static bool resolve_mapped(const struct sym_mapping *m, uint64_t addr, struct sym_info *out)
{
	uint64_t file_off = addr - m->start + m->pgoff;

	out->module = m->path;
	out->offset = file_off;
	if (!m->obj)
		return true;
	out->build_id = m->obj->build_id;
	if (!elf_object__file_to_vaddr(m->obj, file_off, &out->offset))
		out->offset = file_off;
	out->func = elf_object__lookup(m->obj, out->offset);
	return m->obj->is_elf;
}

int symbolizer__resolve_user(struct symbolizer *s, uint32_t pid, uint64_t addr,
			     struct sym_info *out)
{
	const struct perfmap_entry *e;
	const struct sym_mapping *m;
	struct proc *p;

	memset(out, 0, sizeof(*out));
	out->offset = addr;
	p = symbolizer__find_proc(s, pid);
	if (!p) {
		symbolizer__track_pid(s, pid, false);
		p = symbolizer__find_proc(s, pid);
	}
	m = proc__find_mapping(p, addr);
	if (!m && !p->gone &&
	    (p->maps_reads < MAPS_FREE_READS || mono_ns() - p->maps_read_ns >= MAPS_REREAD_NS)) {
		/* A library dlopen()ed since the mappings were read. */
		if (symbolizer__read_maps(s, p) && p->seen)
			p->gone = true;
		m = proc__find_mapping(p, addr);
	}
	if (m) {
		out->map_start = m->start;
		out->map_limit = m->end;
		out->map_pgoff = m->pgoff;
		if (m->kind != MAPPING_ANON && resolve_mapped(m, addr, out))
			return 0;
	}
	e = symbolizer__find_jit(s, p, addr);
	if (e) {
		out->func = e->name;
		out->module = JIT_MODULE;
		out->build_id = NULL;
		out->offset = addr;
	}
	return 0;
}

static void symbolizer__load_kallsyms(struct symbolizer *s)
{
	FILE *f = fopen("/proc/kallsyms", "re");
	int err;

	s->ksyms.loaded = true;
	if (!f) {
		pr_warn("can't read /proc/kallsyms: %s -- kernel frames will be named by address",
			strerror(errno));
		return;
	}
	err = ksyms__load(&s->ksyms, f, s->pool);
	fclose(f);
	if (err)
		pr_warn("can't keep kernel symbols: %s -- kernel frames will be named by address",
			strerror(-err));
	else if (!s->ksyms.n)
		pr_warn("can't read kernel symbols: /proc/kallsyms shows no addresses -- run as "
			"root or set kernel.kptr_restrict=0");
}

int symbolizer__resolve_kernel(struct symbolizer *s, uint64_t addr, struct sym_info *out)
{
	const struct ksym *k;

	memset(out, 0, sizeof(*out));
	out->kernel = true;
	out->offset = addr;
	out->module = KERNEL_MODULE;
	if (!s->ksyms.loaded)
		symbolizer__load_kallsyms(s);
	k = ksyms__find(&s->ksyms, addr);
	if (k) {
		out->func = k->name;
		out->module = k->module;
	}
	return 0;
}

const char *sym_info__name(const struct sym_info *info, char *buf, size_t size)
{
	const char *base;

	if (!size)
		return buf;
	if (info->func) {
		snprintf(buf, size, "%s", info->func);
	} else if (info->module) {
		base = strrchr(info->module, '/');
		base = base ? base + 1 : info->module;
		snprintf(buf, size, "%s+0x%" PRIx64, base, info->offset);
	} else {
		snprintf(buf, size, "[unknown]+0x%" PRIx64, info->offset);
	}
	return buf;
}
