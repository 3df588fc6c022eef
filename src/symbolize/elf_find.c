/* elf_find.c: ELF lookups by name (see elf.h) -- the file offsets of the
 * functions the GPU probes attach uprobes to, the addresses of the
 * functions and data the Python inspector reads, and an executable's
 * program interpreter. The symbol tables are walked with elf_each_sym()
 * and addresses converted through the PT_LOAD segments elf.c reads, as the
 * symbolizer does; a symbol whose address falls outside every PT_LOAD
 * segment is not reported. */
#include "symbolize/elf.h"
#include "symbolize/symbolize_internal.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/search.h"
#include "common/xalloc.h"

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

/* The names looked up, sorted, and the best symbol found for each. */
struct lookup {
	const char *const *names;
	size_t *order; /* indices into names, sorted by name */
	size_t n;
	uint64_t *addrs;
	unsigned *ranks;
	bool objects;
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
static long lookup_find(const struct lookup *lk, const char *name, size_t len)
{
	size_t i = PARTITION_POINT(lk->n, j, cmp_name(lk->names[lk->order[j]], name, len) < 0);

	if (i < lk->n && !cmp_name(lk->names[lk->order[i]], name, len))
		return (long)lk->order[i];
	return -1;
}

static int match_symbol(void *arg, Elf *elf, const GElf_Shdr *sh, size_t idx, const GElf_Sym *sym,
			GElf_Versym ver)
{
	struct lookup *lk = arg;
	unsigned rank = sym_rank(sym, ver & 0x8000, lk->objects);
	const char *name, *at;
	long k;

	if (!rank)
		return 0;
	name = elf_strptr(elf, sh->sh_link, sym->st_name);
	if (!name || !*name)
		return 0;
	at = strchr(name, '@');
	/* "name@VER" in .symtab is a non-default version, "name@@VER" the
	 * default. */
	if (at && at[1] != '@' && rank > RANK_DEFAULT_VERSION)
		rank -= RANK_DEFAULT_VERSION;
	k = lookup_find(lk, name, at ? (size_t)(at - name) : strlen(name));
	if (k < 0 || rank <= lk->ranks[k])
		return 0;
	lk->ranks[k] = rank;
	lk->addrs[k] = sym->st_value;
	return 0;
}

/* File offset of an address, through the PT_LOAD segment that holds it in
 * the file (or in memory only: .bss, when in_memory). */
static int vaddr_to_offset(const struct elf_seg *segs, size_t nsegs, uint64_t addr, uint64_t *off,
			   bool in_memory)
{
	for (size_t i = 0; i < nsegs; i++) {
		const struct elf_seg *sg = &segs[i];

		if (addr >= sg->vaddr && addr - sg->vaddr < (in_memory ? sg->memsz : sg->filesz)) {
			*off = addr - sg->vaddr + sg->offset;
			return 0;
		}
	}
	return -ENOENT;
}

Elf *elf_open_path(const char *path, int *fd)
{
	Elf *elf;

	*fd = -1;
	if (elf_version(EV_CURRENT) == EV_NONE) {
		errno = EINVAL;
		return NULL;
	}
	*fd = open(path, O_RDONLY | O_CLOEXEC);
	if (*fd < 0)
		return NULL;
	elf = elf_begin(*fd, ELF_C_READ, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF) {
		elf_end(elf);
		close(*fd);
		*fd = -1;
		errno = ENOEXEC;
		return NULL;
	}
	return elf;
}

int elf_find_syms(const char *path, const char *const *names, size_t n, uint64_t *out,
		  unsigned flags)
{
	struct lookup lk = {.names = names, .n = n, .objects = flags & ELF_FIND_OBJECTS};
	struct elf_seg *segs = NULL;
	size_t nsegs = 0;
	int fd, found = 0;
	Elf *elf;

	memset(out, 0, n * sizeof(*out));
	elf = elf_open_path(path, &fd);
	if (!elf)
		return -errno;
	lk.order = xcalloc(n ? n : 1, sizeof(*lk.order));
	for (size_t i = 0; i < n; i++)
		lk.order[i] = i;
	qsort_r(lk.order, n, sizeof(*lk.order), cmp_order, (void *)names);
	lk.addrs = xcalloc(n ? n : 1, sizeof(*lk.addrs));
	lk.ranks = xcalloc(n ? n : 1, sizeof(*lk.ranks));

	/* .dynsym comes first in the files linkers write, as it is loaded. */
	elf_each_sym(elf, NULL, SHT_DYNSYM, match_symbol, &lk, NULL);
	if (flags & ELF_FIND_SYMTAB)
		elf_each_sym(elf, NULL, SHT_SYMTAB, match_symbol, &lk, NULL);
	/* No segments: nothing found (an address outside them is not one to
	 * trust). */
	elf_read_segments(elf, &segs, &nsegs);
	for (size_t i = 0; i < n; i++) {
		uint64_t off;

		if (!lk.ranks[i] ||
		    vaddr_to_offset(segs, nsegs, lk.addrs[i], &off, flags & ELF_FIND_VADDRS))
			continue;
		out[i] = flags & ELF_FIND_VADDRS ? lk.addrs[i] : off;
		found++;
	}
	free(segs);
	free(lk.ranks);
	free(lk.addrs);
	free(lk.order);
	elf_end(elf);
	close(fd);
	return found;
}

int elf_read_interp(const char *path, char *out, size_t size)
{
	size_t nph;
	int fd, err = -ENOENT;
	Elf *elf;

	if (!size)
		return -EINVAL;
	elf = elf_open_path(path, &fd);
	if (!elf)
		return -errno;
	if (elf_getphdrnum(elf, &nph)) {
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
