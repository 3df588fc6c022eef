/* symbolize.c: the symbolizer of symbolize.h, used by `sonde record`,
 * `sonde top` and the agent to name the addresses of sampled stacks. The
 * processes and their images are procs.c's; here, each mapping is tied to
 * an ELF object (elf.c) shared by every process that maps the same file --
 * found by build-id, else by device and inode, read on first use and kept
 * until the symbolizer is freed, so an exited process still resolves.
 * Anonymous code is named from the pid's perf map (perfmap.c), kernel
 * addresses from /proc/kallsyms (kallsyms.c), the vdso from our own copy of
 * it (the same kernel maps the same image in every process). */
#include "symbolize/symbolize.h"
#include "common/htable.h"
#include "common/clock.h"
#include "symbolize/symbolize_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"

#define JIT_REREAD_NS ((uint64_t)NS_PER_SEC) /* at most one perf map re-read per pid per second */
#define DEFAULT_DEBUG_DIR "/usr/lib/debug"
#define KERNEL_MODULE "[kernel.kallsyms]"
#define JIT_MODULE "[jit]"

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

void symbolizer__free(struct symbolizer *s)
{
	struct elf_object *obj, *next;

	if (!s)
		return;
	procs__free_all(s);
	if (s->ext)
		s->ext->free(s->ext);
	s->ext = NULL;
	HTABLE_CLEAR(hh, s->aliases, a, free(a));
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

/* Loads the vdso mapped in this process, which is the one of every
 * process of the same ABI: the kernel has a single image. */
static void symbolizer__load_vdso(struct symbolizer *s)
{
	uint64_t base, size;

	if (!sym_own_vdso(&base, &size))
		return;
	s->vdso = elf_object__open_memory((const void *)(uintptr_t)base, size, "[vdso]");
	elf_object__load_symbols(s->vdso, NULL);
	elf_object__close_file(s->vdso);
	s->vdso_size = size;
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
 * deleted file or one in another mount namespace while the process lives;
 * else through the process's root; else by path. A file found by path must
 * be the one mapped: same inode when the kernel gave one (a build-id is
 * checked once the object is read). */
static int open_mapped_file(uint32_t pid, const struct sym_mapping *m, struct stat *st)
{
	char path[SYMBOLIZE_MAX_LINE + 64];
	int fd;

	snprintf(path, sizeof(path), "/proc/%u/map_files/%" PRIx64 "-%" PRIx64, pid, m->start,
		 m->end);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	/* The path of a deleted file names another file now, or none. */
	if (fd < 0 && !m->deleted && m->path &&
	    snprintf(path, sizeof(path), "/proc/%u/root%s", pid, m->path) < (int)sizeof(path))
		fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 && !m->deleted && m->path)
		fd = open(m->path, O_RDONLY | O_CLOEXEC);
	if (fd >= 0 && (fstat(fd, st) || !S_ISREG(st->st_mode) || !st->st_size ||
			(m->key.ino && st->st_ino != m->key.ino))) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static int64_t stat_mtime_ns(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * NS_PER_SEC + st->st_mtim.tv_nsec;
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

static struct elf_object *by_build_id(struct symbolizer *s, const char *build_id)
{
	struct elf_object *obj = NULL;

	if (build_id)
		HASH_FIND(hh_bid, s->by_build_id, build_id, strlen(build_id), obj);
	return obj;
}

/* Reads the object of m from its file, or finds it by the build-id the
 * file turns out to have. NULL if the file can't be opened, or is not the
 * one the kernel reported. */
static struct elf_object *load_object(struct symbolizer *s, uint32_t pid, struct sym_mapping *m)
{
	struct elf_object *obj, *known;
	struct obj_alias *a;
	struct stat st;
	int fd = open_mapped_file(pid, m, &st);

	if (fd < 0) {
		pr_debug("can't open %s mapped by pid %u: %s -- its frames will be named by offset",
			 m->path, pid, strerror(errno));
		return NULL;
	}
	obj = elf_object__open_fd(fd, m->path);
	if (m->build_id && (!obj->build_id || strcmp(obj->build_id, m->build_id))) {
		pr_debug("%s is no longer the file pid %u mapped (build-id %s, now %s)", m->path,
			 pid, m->build_id, obj->build_id ? obj->build_id : "none");
		elf_object__free(obj);
		close(fd);
		return NULL;
	}
	known = by_build_id(s, obj->build_id);
	if (known) {
		elf_object__free(obj);
		obj = known;
		s->stats.object_hits++;
	} else {
		elf_object__load_symbols(obj, s->debug_dir);
		sym_dwarf__attach(s, obj, fd);
		elf_object__close_file(obj);
		symbolizer__add_object(s, obj);
	}
	close(fd);
	/* Remember the file, so that its next mapping is not opened again. */
	if (!m->key.ino)
		m->key = (struct obj_key){st.st_dev, st.st_ino};
	HASH_FIND(hh, s->aliases, &m->key, sizeof(m->key), a);
	if (!a) {
		a = xcalloc(1, sizeof(*a));
		a->key = m->key;
		HASH_ADD(hh, s->aliases, key, sizeof(a->key), a);
	}
	a->obj = obj;
	a->mtime_ns = stat_mtime_ns(&st);
	a->size = st.st_size;
	return obj;
}

struct elf_object *symbolizer__object(struct symbolizer *s, uint32_t pid, struct sym_mapping *m)
{
	struct obj_alias *a = NULL;

	if (m->looked_up)
		return m->obj;
	m->looked_up = true;
	if (m->kind == MAPPING_VDSO)
		return m->obj = symbolizer__vdso(s, m->end - m->start);
	if (m->kind != MAPPING_FILE)
		return NULL;
	/* The kernel's build-id names the object without opening a file. */
	m->obj = by_build_id(s, m->build_id);
	if (m->obj) {
		s->stats.object_hits++;
		return m->obj;
	}
	if (m->key.ino) {
		HASH_FIND(hh, s->aliases, &m->key, sizeof(m->key), a);
		if (a && alias__current(a, pid, m) &&
		    (!m->build_id ||
		     (a->obj->build_id && !strcmp(a->obj->build_id, m->build_id)))) {
			s->stats.object_hits++;
			return m->obj = a->obj;
		}
	}
	return m->obj = load_object(s, pid, m);
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

/* Names addr through the file mapping m of image im. Returns false when the
 * file is not ELF, so that it may be JIT code in a memfd. */
static bool resolve_mapped(struct symbolizer *s, struct image *im, struct sym_mapping *m,
			   uint64_t addr, struct sym_info *out)
{
	uint64_t file_off = addr - m->start + m->pgoff;
	struct elf_object *obj = symbolizer__object(s, im->proc->pid, m);

	out->module = m->path;
	out->offset = file_off;
	out->build_id = m->build_id;
	if (!obj)
		return true;
	out->build_id = obj->build_id;
	if (elf_object__file_to_vaddr(obj, file_off, &out->offset))
		out->obj = obj;
	else
		out->offset = file_off;
	out->func = elf_object__lookup(obj, out->offset);
	return obj->is_elf;
}

static int resolve_in(struct symbolizer *s, struct image *im, uint64_t addr, struct sym_info *out)
{
	const struct perfmap_entry *e;
	struct sym_mapping *m;

	memset(out, 0, sizeof(*out));
	out->offset = addr;
	if (!im)
		return 0;
	m = image__find(s, im, addr);
	/* A sample taken inside execve, past the point where the process
	 * took its new name and image, still has the old image's code as
	 * its user stack. */
	if (!m && im->older && (m = image__find(s, im->older, addr)))
		im = im->older;
	if (m) {
		out->map_start = m->start;
		out->map_limit = m->end;
		out->map_pgoff = m->pgoff;
		if (m->kind != MAPPING_ANON && resolve_mapped(s, im, m, addr, out))
			return 0;
	}
	e = symbolizer__find_jit(s, im->proc, addr);
	if (e) {
		out->func = e->name;
		out->module = JIT_MODULE;
		out->build_id = NULL;
		out->offset = addr;
	}
	return 0;
}

void symbolizer__load(struct symbolizer *s, uint32_t image, uint64_t addr)
{
	struct image *im = images__find(s, image);
	struct sym_mapping *m = im ? image__find(s, im, addr) : NULL;

	if (m)
		symbolizer__object(s, im->proc->pid, m);
}

int symbolizer__resolve_image(struct symbolizer *s, uint32_t image, uint64_t addr,
			      struct sym_info *out)
{
	return resolve_in(s, images__find(s, image), addr, out);
}

size_t symbolizer__lines(struct symbolizer *s, const struct sym_info *si, struct sym_inline *out,
			 size_t max)
{
	return si->obj ? sym_dwarf__lookup(s, si->obj, si->offset, out, max) : 0;
}

int symbolizer__resolve_user(struct symbolizer *s, uint32_t pid, uint64_t addr,
			     struct sym_info *out)
{
	struct proc *p = procs__get(s, pid);

	if (p && !p->image)
		symbolizer__track_pid(s, pid, false);
	return resolve_in(s, p ? p->image : NULL, addr, out);
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

struct symbolizer_ext *symbolizer__ext(struct symbolizer *s)
{
	return s->ext;
}

void symbolizer__attach(struct symbolizer *s, struct symbolizer_ext *ext)
{
	if (s->ext)
		s->ext->free(s->ext);
	s->ext = ext;
}
