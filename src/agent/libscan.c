/* libscan.c: library classification, ELF function lookup and /proc/PID/maps
 * parsing for the GPU probes. See libscan.h for the contract. The ELF file
 * is distrusted: libelf bounds every read by the file's size, and a symbol
 * whose address falls outside every PT_LOAD segment is not reported. */
#include "agent/libscan.h"

#include <ctype.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/xalloc.h"
#include "common/search.h"

/* A library name matches a stem when it is the stem followed by the end or
 * a version suffix: "libcuda.so" and "libcuda.so.580.65" do, and
 * "libcuda.so-old" does not. */
static bool stem_matches(const char *base, const char *stem)
{
	size_t n = strlen(stem);

	if (strncmp(base, stem, n))
		return false;
	base += n;
	if (!*base)
		return true;
	if (*base != '.')
		return false;
	for (base++; *base; base++)
		if (!isdigit((unsigned char)*base) && *base != '.')
			return false;
	return true;
}

unsigned libscan_classify(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	if (stem_matches(base, "libcudart.so"))
		return LIBSCAN_RT;
	if (stem_matches(base, "libcuda.so"))
		return LIBSCAN_DRV;
	if (stem_matches(base, "libnccl.so"))
		return LIBSCAN_NCCL;
	if (stem_matches(base, "libtorch_cpu.so"))
		return LIBSCAN_TORCH;
	if (stem_matches(base, "libsonde_cupti.so"))
		return LIBSCAN_CUPTI;
	return 0;
}

/* How good a symbol is for its name: a default version beats a hidden
 * one, then global beats weak beats local. Local symbols count: a runtime
 * linked statically keeps its functions as local symbols of the executable
 * (nvcc -cudart static). 0: never use it. */
#define RANK_DEFAULT_VERSION 4u

static unsigned sym_rank(const GElf_Sym *sym, bool hidden, bool objects)
{
	unsigned type = GELF_ST_TYPE(sym->st_info), rank = 1;

	if ((type != STT_FUNC && !(objects && type == STT_OBJECT)) || sym->st_shndx == SHN_UNDEF ||
	    !sym->st_value)
		return 0;
	switch (GELF_ST_BIND(sym->st_info)) {
	case STB_GLOBAL:
		rank += 2;
		break;
	case STB_WEAK:
		rank += 1;
		break;
	case STB_LOCAL:
		break;
	default:
		return 0;
	}
	if (!hidden)
		rank += RANK_DEFAULT_VERSION;
	return rank;
}

struct name_index {
	const char *const *names;
	size_t *order; /* indices into names, sorted by name */
	size_t n;
};

static int cmp_order(const void *a, const void *b, void *arg)
{
	const char *const *names = arg;

	return strcmp(names[*(const size_t *)a], names[*(const size_t *)b]);
}

/* s against name (length len, not NUL-terminated), as strcmp orders them. */
static int cmp_name(const char *s, const char *name, size_t len)
{
	int c = strncmp(s, name, len);

	return c ? c : s[len] != 0;
}

/* Index of name (length len, not NUL-terminated) in the sorted names, or -1. */
static long index_find(const struct name_index *ix, const char *name, size_t len)
{
	size_t i = PARTITION_POINT(ix->n, j, cmp_name(ix->names[ix->order[j]], name, len) < 0);

	if (i < ix->n && !cmp_name(ix->names[ix->order[i]], name, len))
		return (long)ix->order[i];
	return -1;
}

/* File offset of an address, through the PT_LOAD segment that holds it in
 * the file (or in memory only: .bss, when in_memory). */
static int vaddr_to_offset(Elf *elf, uint64_t addr, uint64_t *off, bool in_memory)
{
	size_t nph;

	if (elf_getphdrnum(elf, &nph))
		return -ENOEXEC;
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, i, &ph) || ph.p_type != PT_LOAD)
			continue;
		if (addr >= ph.p_vaddr &&
		    addr - ph.p_vaddr < (in_memory ? ph.p_memsz : ph.p_filesz)) {
			*off = addr - ph.p_vaddr + ph.p_offset;
			return 0;
		}
	}
	return -ENOENT;
}

static void scan_symbols(Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh, Elf_Data *versym,
			 const struct name_index *ix, uint64_t *addrs, unsigned *ranks,
			 bool objects)
{
	Elf_Data *data = elf_getdata(scn, NULL);
	size_t nsyms;

	if (!data || !sh->sh_entsize)
		return;
	nsyms = sh->sh_size / sh->sh_entsize;
	for (size_t i = 0; i < nsyms; i++) {
		GElf_Sym sym;
		GElf_Versym vs = 0;
		const char *name, *at;
		unsigned rank;
		long k;

		if (!gelf_getsym(data, i, &sym))
			break;
		if (versym && !gelf_getversym(versym, i, &vs))
			vs = 0;
		rank = sym_rank(&sym, vs & 0x8000, objects);
		if (!rank)
			continue;
		name = elf_strptr(elf, sh->sh_link, sym.st_name);
		if (!name || !*name)
			continue;
		at = strchr(name, '@');
		/* "name@VER" in .symtab is a non-default version, "name@@VER"
		 * the default. */
		if (at && at[1] != '@' && rank > RANK_DEFAULT_VERSION)
			rank -= RANK_DEFAULT_VERSION;
		k = index_find(ix, name, at ? (size_t)(at - name) : strlen(name));
		if (k < 0 || rank <= ranks[k])
			continue;
		ranks[k] = rank;
		addrs[k] = sym.st_value;
	}
}

#define FIND_SYMTAB 1u	/* .symtab too */
#define FIND_OBJECTS 2u /* data objects too */
#define FIND_VADDRS 4u	/* addresses, not file offsets */

static int find_syms(const char *path, const char *const *names, size_t n, uint64_t *offsets,
		     unsigned flags)
{
	struct name_index ix = {names, NULL, n};
	unsigned *ranks = NULL;
	uint64_t *addrs = NULL;
	Elf_Scn *scn = NULL;
	Elf *elf = NULL;
	int fd, err = 0, found = 0;

	memset(offsets, 0, n * sizeof(*offsets));
	if (elf_version(EV_CURRENT) == EV_NONE)
		return -EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF) {
		err = -ENOEXEC;
		goto cleanup;
	}
	ix.order = xcalloc(n ? n : 1, sizeof(*ix.order));
	for (size_t i = 0; i < n; i++)
		ix.order[i] = i;
	qsort_r(ix.order, n, sizeof(*ix.order), cmp_order, (void *)names);
	addrs = xcalloc(n ? n : 1, sizeof(*addrs));
	ranks = xcalloc(n ? n : 1, sizeof(*ranks));

	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr sh;
		Elf_Data *versym = NULL;

		if (!gelf_getshdr(scn, &sh))
			continue;
		if (sh.sh_type == SHT_DYNSYM) {
			/* .gnu.version runs parallel to .dynsym. */
			Elf_Scn *v = NULL;
			GElf_Shdr vsh;

			while ((v = elf_nextscn(elf, v)))
				if (gelf_getshdr(v, &vsh) && vsh.sh_type == SHT_GNU_versym &&
				    vsh.sh_link == elf_ndxscn(scn))
					versym = elf_getdata(v, NULL);
			scan_symbols(elf, scn, &sh, versym, &ix, addrs, ranks,
				     flags & FIND_OBJECTS);
		} else if (sh.sh_type == SHT_SYMTAB && (flags & FIND_SYMTAB)) {
			scan_symbols(elf, scn, &sh, NULL, &ix, addrs, ranks, flags & FIND_OBJECTS);
		}
	}
	for (size_t i = 0; i < n; i++) {
		uint64_t off;

		/* An address outside every segment is not one to trust. */
		if (!ranks[i] || vaddr_to_offset(elf, addrs[i], &off, flags & FIND_VADDRS)) {
			offsets[i] = 0;
			continue;
		}
		offsets[i] = flags & FIND_VADDRS ? addrs[i] : off;
		found++;
	}
	err = found;

cleanup:
	free(ranks);
	free(addrs);
	free(ix.order);
	elf_end(elf);
	close(fd);
	return err;
}

int libscan_find_syms(const char *path, const char *const *names, size_t n, uint64_t *offsets,
		      bool with_symtab)
{
	return find_syms(path, names, n, offsets, with_symtab ? FIND_SYMTAB : 0);
}

int libscan_sym_vaddrs(const char *path, const char *const *names, size_t n, uint64_t *vaddrs)
{
	return find_syms(path, names, n, vaddrs, FIND_OBJECTS | FIND_VADDRS);
}

int libscan_interp(const char *path, char *out, size_t size)
{
	Elf *elf = NULL;
	size_t nph;
	int fd, err = -ENOENT;

	if (elf_version(EV_CURRENT) == EV_NONE || !size)
		return -EINVAL;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF || elf_getphdrnum(elf, &nph)) {
		err = -ENOEXEC;
		goto cleanup;
	}
	for (size_t i = 0; i < nph; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, i, &ph) || ph.p_type != PT_INTERP)
			continue;
		/* The path, NUL included, within the file and the buffer. */
		if (!ph.p_filesz || ph.p_filesz > size ||
		    pread(fd, out, ph.p_filesz, (off_t)ph.p_offset) != (ssize_t)ph.p_filesz ||
		    out[ph.p_filesz - 1] || out[0] != '/') {
			err = -ENOEXEC;
			break;
		}
		err = 0;
		break;
	}
cleanup:
	elf_end(elf);
	close(fd);
	return err;
}

int libscan_parse_maps_line(char *line, struct libscan_map *m)
{
	unsigned long long start, end, pgoff, inode;
	unsigned maj, min;
	char perms[8];
	int pos = 0;
	size_t len;
	char *p;

	memset(m, 0, sizeof(*m));
	if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu%n", &start, &end, perms, &pgoff, &maj, &min,
		   &inode, &pos) != 7 ||
	    !pos || strlen(perms) != 4 || end < start)
		return -EINVAL;
	m->start = start;
	m->end = end;
	m->pgoff = pgoff;
	m->dev_major = maj;
	m->dev_minor = min;
	m->inode = inode;
	memcpy(m->perms, perms, 5);
	p = line + pos;
	while (*p == ' ' || *p == '\t')
		p++;
	len = strlen(p);
	while (len && (p[len - 1] == '\n' || p[len - 1] == '\r'))
		p[--len] = 0;
	if (!len)
		return 0;
	if (len > 10 && !strcmp(p + len - 10, " (deleted)")) {
		p[len - 10] = 0;
		m->deleted = true;
	}
	m->path = p;
	return 0;
}

int libscan_each_map(uint32_t pid, libscan_map_fn fn, void *ctx)
{
	char path[64], *line = NULL;
	struct libscan_map m;
	size_t cap = 0;
	int err = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%" PRIu32 "/maps", pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (getline(&line, &cap, f) > 0) {
		if (libscan_parse_maps_line(line, &m) || !m.path || m.path[0] != '/' || !m.inode)
			continue;
		err = fn(ctx, &m);
		if (err)
			break;
	}
	free(line);
	fclose(f);
	return err;
}
