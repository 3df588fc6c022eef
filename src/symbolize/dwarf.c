/* dwarf.c: source lines and inlined functions of native frames, from the
 * DWARF of an object or of its separate debug file (found by build-id under
 * the debug directory, or by .gnu_debuglink beside the file or under the
 * debug directory), read through libdw.
 *
 * An object's DWARF is kept open from its loading (the file may be gone by
 * the time a stack is named) when it has .debug_info and .debug_line; at
 * most SYM_DWARF_MAX_OPEN objects at once, the others are named without
 * lines (counted). The first lookup indexes the compilation units by
 * address range (bounded); each lookup then finds the unit, the line of
 * the address and the scopes that contain it, innermost first, and turns
 * each inlined subroutine into a frame of its own, its caller's line being
 * the call site. Results are cached per address. The file is distrusted:
 * libdw checks every read against the section, and every count here is
 * bounded. */
#include "symbolize/symbolize.h"
#include "symbolize/symbolize_internal.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "common/htable.h"

#define SYM_DWARF_MAX_OPEN 256	     /* objects whose DWARF is kept open at once */
#define SYM_DWARF_MAX_RANGES 1000000 /* address ranges of units indexed per object */
#define SYM_DWARF_MAX_CACHED 200000  /* addresses whose answer is kept per object */

struct cu_range {
	uint64_t start, end;
	Dwarf_Off off; /* of the unit's DIE */
};

struct addr_ent {
	UT_hash_handle hh;
	uint64_t addr;
	uint8_t n;
	struct sym_inline f[];
};

struct sym_dwarf {
	int fd;
	Dwarf *dw;
	bool indexed;
	struct cu_range *ranges;
	size_t nranges;
	struct addr_ent *cache;
	size_t ncached;
};

/* Whether elf has the sections a line lookup needs. */
static bool has_lines(Elf *elf)
{
	bool info = false, line = false;
	Elf_Scn *scn = NULL;
	size_t shstrndx;

	if (elf_getshdrstrndx(elf, &shstrndx))
		return false;
	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		const char *name;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type == SHT_NOBITS)
			continue;
		name = elf_strptr(elf, shstrndx, sh.sh_name);
		if (!name)
			continue;
		info |= !strcmp(name, ".debug_info");
		line |= !strcmp(name, ".debug_line");
	}
	return info && line;
}

/* Opens path and keeps it when it is an ELF file with lines whose
 * build-id is want (when want is not NULL). The fd, or -1. */
static int open_lines_file(const char *path, const char *want)
{
	int fd;
	Elf *elf = elf_open_matching(path, want, &fd);
	bool ok = elf && has_lines(elf);

	if (elf)
		elf_end(elf);
	if (!ok && fd >= 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* The fd of obj's separate debug file with lines: by build-id, then by
 * .gnu_debuglink beside the file, in its .debug/ and under debug_dir. */
static int open_debug_lines(const struct elf_object *obj, const char *debug_dir)
{
	const char *link;
	char path[4096], dir[4096];
	GElf_Word crc;
	int fd = -1;

	if (!debug_dir)
		return -1;
	if (obj->build_id && strlen(obj->build_id) > 2 &&
	    snprintf(path, sizeof(path), "%s/.build-id/%.2s/%s.debug", debug_dir, obj->build_id,
		     obj->build_id + 2) < (int)sizeof(path))
		fd = open_lines_file(path, obj->build_id);
	if (fd >= 0 || !obj->elf)
		return fd;
	link = dwelf_elf_gnu_debuglink(obj->elf, &crc);
	if (!link || strchr(link, '/') || obj->name[0] != '/')
		return -1;
	snprintf(dir, sizeof(dir), "%s", obj->name);
	dirname(dir);
	const char *const fmts[] = {"%s/%s", "%s/.debug/%s"};
	for (size_t i = 0; i < 2 && fd < 0; i++)
		if (snprintf(path, sizeof(path), fmts[i], dir, link) < (int)sizeof(path) &&
		    strcmp(path, obj->name))
			fd = open_lines_file(path, obj->build_id);
	if (fd < 0 &&
	    snprintf(path, sizeof(path), "%s%s/%s", debug_dir, dir, link) < (int)sizeof(path))
		fd = open_lines_file(path, obj->build_id);
	return fd;
}

void sym_dwarf__attach(struct symbolizer *s, struct elf_object *obj, int fd)
{
	struct sym_dwarf *d;
	int dfd = -1;

	if (!obj->elf || !obj->is_elf || obj->dwarf)
		return;
	if (fd >= 0 && has_lines(obj->elf))
		dfd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
	if (dfd < 0)
		dfd = open_debug_lines(obj, s->debug_dir);
	if (dfd < 0)
		return;
	if (s->stats.dwarf_files >= SYM_DWARF_MAX_OPEN) {
		pr_debug("not reading the lines of %s: %d files' lines are kept already", obj->name,
			 SYM_DWARF_MAX_OPEN);
		s->stats.dwarf_skipped++;
		close(dfd);
		return;
	}
	d = xcalloc(1, sizeof(*d));
	d->fd = dfd;
	d->dw = dwarf_begin(dfd, DWARF_C_READ);
	if (!d->dw) {
		pr_warn("can't read the DWARF of %s: %s -- its frames will have no lines",
			obj->name, dwarf_errmsg(-1));
		close(dfd);
		free(d);
		s->stats.dwarf_skipped++;
		return;
	}
	obj->dwarf = d;
	s->stats.dwarf_files++;
}

void sym_dwarf__free(struct sym_dwarf *d)
{
	if (!d)
		return;
	HTABLE_CLEAR(hh, d->cache, e, free(e));
	free(d->ranges);
	dwarf_end(d->dw);
	close(d->fd);
	free(d);
}

static int range_cmp(const void *a, const void *b)
{
	const struct cu_range *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	return x->end < y->end ? -1 : x->end > y->end;
}

/* The units' address ranges, sorted by start. */
static void index_units(struct sym_dwarf *d, const char *name)
{
	Dwarf_Off off = 0, next;
	size_t hsize, cap = 0;

	d->indexed = true;
	while (dwarf_nextcu(d->dw, off, &next, &hsize, NULL, NULL, NULL) == 0) {
		Dwarf_Die cu;
		Dwarf_Addr base, start, end;
		ptrdiff_t it = 0;

		if (dwarf_offdie(d->dw, off + hsize, &cu)) {
			while ((it = dwarf_ranges(&cu, it, &base, &start, &end)) > 0) {
				if (end <= start)
					continue;
				if (d->nranges >= SYM_DWARF_MAX_RANGES) {
					pr_warn("%s: over %d address ranges in its DWARF: the "
						"rest have no lines",
						name, SYM_DWARF_MAX_RANGES);
					goto done;
				}
				xgrow((void **)&d->ranges, &cap, d->nranges + 1,
				      sizeof(*d->ranges));
				d->ranges[d->nranges++] =
					(struct cu_range){start, end, dwarf_dieoffset(&cu)};
			}
		}
		if (next <= off)
			break;
		off = next;
	}
done:
	if (d->nranges)
		qsort(d->ranges, d->nranges, sizeof(*d->ranges), range_cmp);
}

/* The unit holding addr, in *cu. */
static bool find_unit(struct sym_dwarf *d, uint64_t addr, Dwarf_Die *cu)
{
	size_t lo = 0, hi = d->nranges;

	/* The last range starting at or before addr; ranges of units do not
	 * nest, but look back a few in case they overlap. */
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (d->ranges[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	for (size_t i = lo, seen = 0; i > 0 && seen < 8; i--, seen++) {
		const struct cu_range *r = &d->ranges[i - 1];

		if (addr >= r->start && addr < r->end)
			return dwarf_offdie(d->dw, r->off, cu) != NULL;
	}
	return false;
}

/* The name of a subprogram or inlined subroutine: its linkage name
 * demangled (as the symbol table names it), else its name. */
static const char *scope_name(struct symbolizer *s, Dwarf_Die *die)
{
	Dwarf_Attribute attr;
	const char *name = NULL;
	char *dem;

	if (dwarf_attr_integrate(die, DW_AT_linkage_name, &attr) ||
	    dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr))
		name = dwarf_formstring(&attr);
	if (name && (dem = sym_demangle(name))) {
		name = strpool__intern(s->pool, dem, strlen(dem));
		free(dem);
		return name;
	}
	if (!name && dwarf_attr_integrate(die, DW_AT_name, &attr))
		name = dwarf_formstring(&attr);
	return name ? strpool__intern(s->pool, name, strlen(name)) : NULL;
}

static uint32_t die_udata(Dwarf_Die *die, unsigned int at, bool integrate)
{
	Dwarf_Attribute attr;
	Dwarf_Word w;

	if (!(integrate ? dwarf_attr_integrate(die, at, &attr) : dwarf_attr(die, at, &attr)))
		return 0;
	if (dwarf_formudata(&attr, &w) || w > UINT32_MAX)
		return 0;
	return (uint32_t)w;
}

/* A source file's name, kept: a relative one (the compiler was given a
 * relative path) under the unit's compilation directory. */
static const char *pool_file(struct symbolizer *s, Dwarf_Die *cu, const char *file)
{
	Dwarf_Attribute attr;
	const char *dir;
	char path[4096];

	if (!file)
		return NULL;
	if (file[0] != '/' && dwarf_attr(cu, DW_AT_comp_dir, &attr) &&
	    (dir = dwarf_formstring(&attr)) && dir[0] == '/' &&
	    snprintf(path, sizeof(path), "%s/%s", dir, file) < (int)sizeof(path))
		file = path;
	return strpool__intern(s->pool, file, strlen(file));
}

/* Looks addr up in d: frames innermost first into f[0..max). */
static size_t lookup(struct symbolizer *s, struct sym_dwarf *d, uint64_t addr, struct sym_inline *f,
		     size_t max)
{
	Dwarf_Die cu, *scopes = NULL;
	Dwarf_Line *line;
	Dwarf_Files *files = NULL;
	size_t nfiles = 0, n = 0;
	const char *file = NULL;
	uint32_t lineno = 0;
	int nscopes;

	if (!find_unit(d, addr, &cu))
		return 0;
	line = dwarf_getsrc_die(&cu, addr);
	if (line) {
		int ln = 0;

		file = pool_file(s, &cu, dwarf_linesrc(line, NULL, NULL));
		if (!dwarf_lineno(line, &ln) && ln > 0)
			lineno = (uint32_t)ln;
	}
	if (dwarf_getsrcfiles(&cu, &files, &nfiles))
		files = NULL;
	/* The innermost scope at addr, then the scopes that hold it in the
	 * tree: dwarf_getscopes follows an inlined function to where it is
	 * defined, but its callers are the DIEs that hold its instance. */
	nscopes = dwarf_getscopes(&cu, addr, &scopes);
	if (nscopes > 0) {
		Dwarf_Die inner = scopes[0];

		free(scopes);
		scopes = NULL;
		nscopes = dwarf_getscopes_die(&inner, &scopes);
	}
	for (int i = 0; i < nscopes && n < max; i++) {
		Dwarf_Die *sc = &scopes[i];
		int tag = dwarf_tag(sc);
		uint32_t call_file;

		if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_subprogram)
			continue;
		f[n++] = (struct sym_inline){
			.func = scope_name(s, sc),
			.file = file,
			.line = lineno,
			.start_line = die_udata(sc, DW_AT_decl_line, true),
		};
		if (tag == DW_TAG_subprogram)
			break;
		/* The caller is at the call site. */
		call_file = die_udata(sc, DW_AT_call_file, false);
		file = files && call_file < nfiles
			       ? pool_file(s, &cu, dwarf_filesrc(files, call_file, NULL, NULL))
			       : NULL;
		lineno = die_udata(sc, DW_AT_call_line, false);
	}
	free(scopes);
	/* Lines but no function (a unit without subprograms): the line alone. */
	if (!n && file && max)
		f[n++] = (struct sym_inline){.file = file, .line = lineno};
	return n;
}

size_t sym_dwarf__lookup(struct symbolizer *s, struct elf_object *obj, uint64_t addr,
			 struct sym_inline *out, size_t max)
{
	struct sym_dwarf *d = obj ? obj->dwarf : NULL;
	struct sym_inline f[SYM_MAX_INLINE];
	struct addr_ent *e;
	size_t n;

	if (!d || !max)
		return 0;
	HASH_FIND(hh, d->cache, &addr, sizeof(addr), e);
	if (!e) {
		if (!d->indexed)
			index_units(d, obj->name);
		n = lookup(s, d, addr, f, SYM_MAX_INLINE);
		if (d->ncached >= SYM_DWARF_MAX_CACHED) {
			HTABLE_CLEAR(hh, d->cache, old, free(old));
			d->ncached = 0;
		}
		e = xmalloc(sizeof(*e) + n * sizeof(e->f[0]));
		e->addr = addr;
		e->n = (uint8_t)n;
		memcpy(e->f, f, n * sizeof(f[0]));
		HASH_ADD(hh, d->cache, addr, sizeof(e->addr), e);
		d->ncached++;
	}
	n = e->n < max ? e->n : max;
	memcpy(out, e->f, n * sizeof(out[0]));
	return n;
}
