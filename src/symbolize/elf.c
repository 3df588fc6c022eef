/* elf.c: ELF objects of the symbolizer, and the walk over a symbol table
 * and the PT_LOAD segments that the lookups by name (elf_find.c) share.
 * Reads, through libelf, what naming an address needs -- the GNU build-id
 * note, the PT_LOAD segments (file offset to ELF address) and the function
 * symbols of .symtab and .dynsym, or of a debug file found by build-id --
 * into a sorted table searched in O(log n). Names are demangled on first
 * lookup. The file is distrusted: sizes are bounded, libelf checks every
 * read against the file's size, and a malformed file gives an object
 * without symbols, never a crash. */
#include "symbolize/elf.h"
#include "symbolize/symbolize.h"
#include "symbolize/symbolize_internal.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "common/search.h"

char *__cxa_demangle(const char *mangled, char *buf, size_t *len, int *status);

/* Ranking of symbols at the same address: a sized, global function wins
 * over an alias (a local or hidden one, a label). */
#define RANK_SIZED 8u
#define RANK_GLOBAL 4u
#define RANK_WEAK 2u
#define RANK_FUNC 1u

struct sec_info {
	uint64_t end;
	bool exec;
};

struct cand_vec {
	struct elf_cand *c;
	size_t n, cap;
};

static void elf_object__inspect(struct elf_object *obj);

static struct elf_object *elf_object__alloc(const char *name)
{
	struct elf_object *obj = xcalloc(1, sizeof(*obj));

	obj->name = xstrdup(name);
	return obj;
}

struct elf_object *elf_object__open_fd(int fd, const char *name)
{
	struct elf_object *obj = elf_object__alloc(name);

	obj->elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!obj->elf) {
		pr_warn("can't read %s: %s -- its frames will be named by offset", name,
			elf_errmsg(-1));
		return obj;
	}
	elf_object__inspect(obj);
	return obj;
}

struct elf_object *elf_object__open_memory(const void *image, size_t size, const char *name)
{
	struct elf_object *obj = elf_object__alloc(name);

	if (!size || size > SYMBOLIZE_MAX_VDSO) {
		pr_warn("can't read %s: image of %zu bytes -- its frames will be named by offset",
			name, size);
		return obj;
	}
	/* A copy: libelf may write to an image opened read-write, and the
	 * source (the vdso) is read-only. */
	obj->image = xmalloc(size);
	memcpy(obj->image, image, size);
	obj->elf = elf_memory(obj->image, size);
	if (!obj->elf) {
		pr_warn("can't read %s: %s", name, elf_errmsg(-1));
		return obj;
	}
	elf_object__inspect(obj);
	return obj;
}

/* Returns the build-id of the first NT_GNU_BUILD_ID note in data, as
 * lowercase hex in a new string, or NULL. gelf_getnote() checks that each
 * note fits in data. */
static char *find_build_id(Elf_Data *data)
{
	static const char hex[] = "0123456789abcdef";
	size_t off = 0, next, name_off, desc_off;
	GElf_Nhdr nh;

	while (off < data->d_size &&
	       (next = gelf_getnote(data, off, &nh, &name_off, &desc_off)) > 0) {
		const unsigned char *desc = (const unsigned char *)data->d_buf + desc_off;
		char *id;

		off = next;
		if (nh.n_type != NT_GNU_BUILD_ID || nh.n_namesz != sizeof("GNU") ||
		    memcmp((const char *)data->d_buf + name_off, "GNU", sizeof("GNU")))
			continue;
		if (!nh.n_descsz || nh.n_descsz > SYMBOLIZE_MAX_BUILD_ID)
			return NULL;
		id = xmalloc(2 * nh.n_descsz + 1);
		for (size_t i = 0; i < nh.n_descsz; i++) {
			id[2 * i] = hex[desc[i] >> 4];
			id[2 * i + 1] = hex[desc[i] & 0xf];
		}
		id[2 * nh.n_descsz] = '\0';
		return id;
	}
	return NULL;
}

char *elf_read_build_id(Elf *elf)
{
	Elf_Scn *scn = NULL;
	size_t phnum;
	char *id;

	while ((scn = elf_nextscn(elf, scn))) {
		GElf_Shdr shdr;
		Elf_Data *data;

		if (!gelf_getshdr(scn, &shdr) || shdr.sh_type != SHT_NOTE ||
		    shdr.sh_size > SYMBOLIZE_MAX_SECTION)
			continue;
		data = elf_getdata(scn, NULL);
		if (data && (id = find_build_id(data)))
			return id;
	}
	/* No section headers (sstrip'ed): the PT_NOTE segments. */
	if (elf_getphdrnum(elf, &phnum) || phnum > SYMBOLIZE_MAX_SEGMENTS)
		return NULL;
	for (size_t i = 0; i < phnum; i++) {
		GElf_Phdr ph;
		Elf_Data *data;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_NOTE ||
		    ph.p_filesz > SYMBOLIZE_MAX_SECTION)
			continue;
		data = elf_getdata_rawchunk(elf, (int64_t)ph.p_offset, ph.p_filesz,
					    ph.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);
		if (data && (id = find_build_id(data)))
			return id;
	}
	return NULL;
}

int elf_read_segments(Elf *elf, struct elf_seg **segs, size_t *nsegs)
{
	size_t phnum, n = 0;

	*segs = NULL;
	*nsegs = 0;
	if (elf_getphdrnum(elf, &phnum))
		return -ENOEXEC;
	if (phnum > SYMBOLIZE_MAX_SEGMENTS)
		return -E2BIG;
	*segs = xcalloc(phnum ? phnum : 1, sizeof(**segs));
	for (size_t i = 0; i < phnum; i++) {
		GElf_Phdr ph;

		if (!gelf_getphdr(elf, (int)i, &ph) || ph.p_type != PT_LOAD)
			continue;
		(*segs)[n++] = (struct elf_seg){
			.offset = ph.p_offset,
			.vaddr = ph.p_vaddr,
			.filesz = ph.p_filesz,
			.memsz = ph.p_memsz,
			.exec = ph.p_flags & PF_X,
		};
	}
	*nsegs = n;
	return 0;
}

static void read_segments(struct elf_object *obj)
{
	int err = elf_read_segments(obj->elf, &obj->segs, &obj->nsegs);

	if (err)
		pr_warn("can't read the program headers of %s: %s -- its frames will be named by "
			"file offset",
			obj->name, err == -E2BIG ? "too many" : elf_errmsg(-1));
}

static void elf_object__inspect(struct elf_object *obj)
{
	GElf_Ehdr ehdr;

	if (elf_kind(obj->elf) != ELF_K_ELF || !gelf_getehdr(obj->elf, &ehdr)) {
		pr_warn("can't read symbols of %s: not an ELF file -- its frames will be named by "
			"offset",
			obj->name);
		return;
	}
	obj->is_elf = true;
	read_segments(obj);
	obj->build_id = elf_read_build_id(obj->elf);
}

/* Fills secs[0..shnum) with each section's end address and whether it holds
 * code. Returns the number of sections, or 0 when unreadable. */
static size_t read_sections(Elf *elf, struct sec_info **secs)
{
	Elf_Scn *scn = NULL;
	size_t shnum;

	*secs = NULL;
	if (elf_getshdrnum(elf, &shnum) || !shnum || shnum > SYMBOLIZE_MAX_SECTIONS)
		return 0;
	*secs = calloc(shnum, sizeof(**secs));
	if (!*secs)
		return 0;
	while ((scn = elf_nextscn(elf, scn))) {
		size_t idx = elf_ndxscn(scn);
		GElf_Shdr shdr;

		if (idx >= shnum || !gelf_getshdr(scn, &shdr))
			continue;
		(*secs)[idx].exec = shdr.sh_flags & SHF_EXECINSTR;
		(*secs)[idx].end = shdr.sh_addr + shdr.sh_size < shdr.sh_addr
					   ? UINT64_MAX
					   : shdr.sh_addr + shdr.sh_size;
	}
	return shnum;
}

static unsigned int sym_rank(const GElf_Sym *sym)
{
	unsigned int rank = 0;

	if (sym->st_size)
		rank |= RANK_SIZED;
	if (GELF_ST_BIND(sym->st_info) == STB_GLOBAL)
		rank |= RANK_GLOBAL;
	else if (GELF_ST_BIND(sym->st_info) == STB_WEAK)
		rank |= RANK_WEAK;
	if (GELF_ST_TYPE(sym->st_info) != STT_NOTYPE)
		rank |= RANK_FUNC;
	return rank;
}

/* The .gnu.version table that runs parallel to the symbol table scn, NULL
 * if none. */
static Elf_Data *versym_of(Elf *elf, Elf_Scn *scn)
{
	size_t idx = elf_ndxscn(scn);
	Elf_Scn *v = NULL;
	GElf_Shdr vsh;

	while ((v = elf_nextscn(elf, v)))
		if (gelf_getshdr(v, &vsh) && vsh.sh_type == SHT_GNU_versym && vsh.sh_link == idx)
			return elf_getdata(v, NULL);
	return NULL;
}

int elf_each_sym(Elf *elf, const char *name, Elf64_Word sh_type, elf_sym_fn fn, void *ctx,
		 bool *found)
{
	size_t entsize = gelf_fsize(elf, ELF_T_SYM, 1, EV_CURRENT);
	Elf_Scn *scn = NULL;
	bool any = false;
	int ret = 0;

	while (!ret && entsize && (scn = elf_nextscn(elf, scn))) {
		Elf_Data *data, *versym;
		GElf_Shdr shdr;
		size_t n;

		if (!gelf_getshdr(scn, &shdr) || shdr.sh_type != sh_type)
			continue;
		if (shdr.sh_size > SYMBOLIZE_MAX_SECTION || shdr.sh_entsize != entsize) {
			if (name)
				pr_warn("can't read the symbols of %s: a symbol table of %llu "
					"bytes, entries of %llu -- its frames will be named by "
					"offset",
					name, (unsigned long long)shdr.sh_size,
					(unsigned long long)shdr.sh_entsize);
			continue;
		}
		data = elf_getdata(scn, NULL);
		if (!data) {
			if (name)
				pr_warn("can't read the symbols of %s: %s -- is the file "
					"truncated?",
					name, elf_errmsg(-1));
			continue;
		}
		any = true;
		versym = sh_type == SHT_DYNSYM ? versym_of(elf, scn) : NULL;
		n = data->d_size / entsize;
		for (size_t i = 1; i < n && !ret; i++) {
			GElf_Versym ver = 0;
			GElf_Sym sym;

			if (!gelf_getsym(data, (int)i, &sym))
				break;
			if (versym && !gelf_getversym(versym, (int)i, &ver))
				ver = 0;
			ret = fn(ctx, elf, &shdr, i, &sym, ver);
		}
	}
	if (found)
		*found = any;
	return ret;
}

struct collect {
	const char *name;
	struct cand_vec *v;
	const struct sec_info *secs;
	size_t shnum;
};

/* Keeps sym when it is a function (or an untyped sized symbol in code). */
static int collect_symbol(void *arg, Elf *elf, const GElf_Shdr *sh, size_t idx, const GElf_Sym *sym,
			  GElf_Versym ver)
{
	struct collect *c = arg;
	struct cand_vec *v = c->v;
	unsigned int type = GELF_ST_TYPE(sym->st_info);
	const char *sname;
	int err;

	if (sym->st_shndx == SHN_UNDEF || sym->st_shndx >= SHN_LORESERVE || !sym->st_value)
		return 0;
	if (type != STT_FUNC && type != STT_GNU_IFUNC &&
	    !(type == STT_NOTYPE && sym->st_size && sym->st_shndx < c->shnum &&
	      c->secs[sym->st_shndx].exec))
		return 0;
	sname = elf_strptr(elf, sh->sh_link, sym->st_name);
	if (!sname || !*sname)
		return 0;
	if (v->n >= SYMBOLIZE_MAX_SYMS) {
		pr_warn("can't read all the symbols of %s: more than %u -- some frames will be "
			"named by offset",
			c->name, SYMBOLIZE_MAX_SYMS);
		return 1;
	}
	err = array_grow((void **)&v->c, &v->cap, v->n + 1, sizeof(*v->c));
	if (err)
		return err;
	v->c[v->n++] = (struct elf_cand){
		.start = sym->st_value,
		.size = sym->st_size,
		.sec_end = sym->st_shndx < c->shnum && c->secs[sym->st_shndx].end
				   ? c->secs[sym->st_shndx].end
				   : UINT64_MAX,
		.name = sname,
		.rank = sym_rank(sym),
	};
	return 0;
}

/* Appends the functions of elf's symbol tables of type sh_type to v; the
 * names point into elf's data. *found tells whether there was such a table.
 * Returns 0 or -ENOMEM. */
static int collect_symbols(Elf *elf, const char *name, Elf64_Word sh_type, struct cand_vec *v,
			   bool *found)
{
	struct sec_info *secs;
	struct collect c = {name, v, NULL, read_sections(elf, &secs)};
	int err;

	c.secs = secs;
	err = elf_each_sym(elf, name, sh_type, collect_symbol, &c, found);
	free(secs);
	/* > 0: stopped at SYMBOLIZE_MAX_SYMS, what was read is kept. */
	return err < 0 ? err : 0;
}

Elf *elf_open_matching(const char *path, const char *build_id, int *fd)
{
	Elf *elf = NULL, *ret = NULL;
	char *id = NULL;
	struct stat st;

	*fd = open(path, O_RDONLY | O_CLOEXEC);
	if (*fd < 0)
		goto cleanup;
	if (fstat(*fd, &st) || !S_ISREG(st.st_mode))
		goto cleanup;
	elf = elf_begin(*fd, ELF_C_READ, NULL);
	if (!elf || elf_kind(elf) != ELF_K_ELF) {
		pr_warn("can't read debug file %s: not an ELF file", path);
		goto cleanup;
	}
	id = build_id ? elf_read_build_id(elf) : NULL;
	if (build_id && (!id || strcmp(id, build_id))) {
		pr_warn("ignoring debug file %s: its build-id is %s -- is it from another build?",
			path, id ? id : "missing");
		goto cleanup;
	}
	ret = elf;
	elf = NULL;
cleanup:
	free(id);
	if (elf)
		elf_end(elf);
	if (!ret && *fd >= 0) {
		close(*fd);
		*fd = -1;
	}
	return ret;
}

/* Opens the debug file of obj under debug_dir, checking its build-id.
 * Returns the Elf (and *fd) or NULL. */
static Elf *open_debug_file(const struct elf_object *obj, const char *debug_dir, int *fd)
{
	char path[4096];
	Elf *elf;

	*fd = -1;
	if (!obj->build_id || strlen(obj->build_id) < 3)
		return NULL;
	if (snprintf(path, sizeof(path), "%s/.build-id/%.2s/%s.debug", debug_dir, obj->build_id,
		     obj->build_id + 2) >= (int)sizeof(path))
		return NULL;
	elf = elf_open_matching(path, obj->build_id, fd);
	if (elf)
		pr_debug("reading the symbols of %s from %s", obj->name, path);
	return elf;
}

/* The .rela.plt relocations by GOT slot, sorted: the slot each PLT stub
 * jumps through is looked up here. */
struct plt_slot {
	uint64_t slot;
	uint32_t sym;
};

static int slot_cmp(const void *a, const void *b)
{
	const struct plt_slot *x = a, *y = b;

	return x->slot < y->slot ? -1 : x->slot > y->slot;
}

static size_t read_slots(Elf_Data *rela, const GElf_Shdr *rsh, struct plt_slot **out)
{
	size_t n = rsh->sh_entsize ? rela->d_size / rsh->sh_entsize : 0, k = 0;

	if (n > SYMBOLIZE_MAX_SYMS)
		n = SYMBOLIZE_MAX_SYMS;
	*out = n ? calloc(n, sizeof(**out)) : NULL;
	for (size_t i = 0; *out && i < n; i++) {
		GElf_Rela r;

		if (gelf_getrela(rela, (int)i, &r) && GELF_R_SYM(r.r_info))
			(*out)[k++] = (struct plt_slot){r.r_offset, (uint32_t)GELF_R_SYM(r.r_info)};
	}
	if (*out)
		qsort(*out, k, sizeof(**out), slot_cmp);
	return k;
}

/* The name of the function whose GOT slot is slot ("" if none). */
static const char *plt_slot_name(Elf *elf, const GElf_Shdr *rsh, const struct plt_slot *slots,
				 size_t n, uint64_t slot)
{
	size_t i = PARTITION_POINT(n, j, slots[j].slot < slot);
	Elf_Scn *symscn = elf_getscn(elf, rsh->sh_link);
	Elf_Data *syms = symscn ? elf_getdata(symscn, NULL) : NULL;
	GElf_Shdr symsh;
	GElf_Sym sym;
	const char *name;

	if (i == n || slots[i].slot != slot || !syms || !gelf_getshdr(symscn, &symsh) ||
	    !gelf_getsym(syms, (int)slots[i].sym, &sym))
		return "";
	name = elf_strptr(elf, symsh.sh_link, sym.st_name);
	return name ? name : "";
}

/* The PLT stubs, named as perf and objdump name them ("clock_gettime@plt"):
 * a sample taken in one would otherwise have no name. Each 16-byte stub of
 * .plt or .plt.sec jumps through a GOT slot (jmp *disp32(%rip), ff 25,
 * possibly after endbr64 and a bnd prefix); the .rela.plt relocation of
 * that slot names the function. The names are made in *names (one
 * allocation, freed by the caller once the symbols are kept); a candidate's
 * name is an offset into it until the caller rebases it. */
static int collect_plt(Elf *elf, struct cand_vec *v, char **names)
{
	Elf_Scn *scn = NULL, *rela_scn = NULL, *plts[2] = {0};
	GElf_Shdr sh, rsh = {0}, psh[2];
	size_t shstrndx, off = 0, cap = 0, count = 0, nslots;
	struct plt_slot *slots = NULL;
	Elf_Data *rela;
	int err = 0;

	if (elf_getshdrstrndx(elf, &shstrndx))
		return 0;
	while ((scn = elf_nextscn(elf, scn))) {
		const char *sname;

		if (!gelf_getshdr(scn, &sh) || !(sname = elf_strptr(elf, shstrndx, sh.sh_name)))
			continue;
		if (!strcmp(sname, ".rela.plt") && sh.sh_type == SHT_RELA)
			rela_scn = scn, rsh = sh;
		else if (!strcmp(sname, ".plt"))
			plts[0] = scn, psh[0] = sh;
		else if (!strcmp(sname, ".plt.sec"))
			plts[1] = scn, psh[1] = sh;
	}
	if (!rela_scn || !(rela = elf_getdata(rela_scn, NULL)))
		return 0;
	nslots = read_slots(rela, &rsh, &slots);
	for (int k = 0; k < 2 && !err && nslots; k++) {
		Elf_Data *d = plts[k] ? elf_getdata(plts[k], NULL) : NULL;

		for (size_t e = 0; d && d->d_buf && e + 16 <= d->d_size && !err; e += 16) {
			const uint8_t *b = (const uint8_t *)d->d_buf + e;
			const char *name = "";
			size_t len;

			for (size_t j = 0; j + 6 <= 16 && !*name; j++) {
				int32_t disp;

				if (b[j] != 0xff || b[j + 1] != 0x25)
					continue;
				memcpy(&disp, b + j + 2, 4);
				name = plt_slot_name(elf, &rsh, slots, nslots,
						     psh[k].sh_addr + e + j + 6 + disp);
			}
			if (!*name || ++count > SYMBOLIZE_MAX_SYMS)
				continue;
			len = strlen(name) + sizeof("@plt");
			err = array_grow((void **)names, &cap, off + len, 1);
			err = err ?: array_grow((void **)&v->c, &v->cap, v->n + 1, sizeof(*v->c));
			if (err)
				break;
			snprintf(*names + off, len, "%s@plt", name);
			v->c[v->n++] = (struct elf_cand){
				.start = psh[k].sh_addr + e,
				.size = 16,
				.sec_end = UINT64_MAX,
				.name = (const char *)(uintptr_t)off,
				.rank = 0,
			};
			off += len;
		}
	}
	free(slots);
	return err;
}

void elf_object__load_symbols(struct elf_object *obj, const char *debug_dir)
{
	struct cand_vec v = {0};
	bool found_symtab = false, found_dynsym = false;
	char *plt_names = NULL;
	Elf *dbg = NULL;
	int dbg_fd = -1;
	int err;

	if (!obj->elf || !obj->is_elf)
		return;
	err = collect_symbols(obj->elf, obj->name, SHT_SYMTAB, &v, &found_symtab);
	if (!err)
		err = collect_symbols(obj->elf, obj->name, SHT_DYNSYM, &v, &found_dynsym);
	if (!err && !found_symtab && debug_dir) {
		dbg = open_debug_file(obj, debug_dir, &dbg_fd);
		if (dbg)
			err = collect_symbols(dbg, obj->name, SHT_SYMTAB, &v, &found_symtab);
	}
	if (!err) {
		size_t first = v.n;

		err = collect_plt(obj->elf, &v, &plt_names);
		/* The names' buffer may have moved while it grew. */
		for (size_t i = first; !err && i < v.n; i++)
			v.c[i].name = plt_names + (uintptr_t)v.c[i].name;
	}
	if (err) {
		pr_warn("can't read the symbols of %s: %s -- its frames will be named by offset",
			obj->name, strerror(-err));
		goto cleanup;
	}
	obj->has_symtab = found_symtab;
	/* Names still point into the files: copy them before closing. */
	err = elf_object__set_symbols(obj, v.c, v.n);
	if (err)
		pr_warn("can't keep the %zu symbols of %s: %s -- its frames will be named by "
			"offset",
			v.n, obj->name, strerror(-err));
cleanup:
	free(v.c);
	free(plt_names);
	if (dbg)
		elf_end(dbg);
	if (dbg_fd >= 0)
		close(dbg_fd);
}

void elf_object__close_file(struct elf_object *obj)
{
	if (obj->elf)
		elf_end(obj->elf);
	obj->elf = NULL;
	free(obj->image);
	obj->image = NULL;
}

static void elf_object__clear_symbols(struct elf_object *obj)
{
	for (size_t i = 0; i < obj->nsyms; i++)
		if (obj->syms[i].demangled != obj->syms[i].name)
			free(obj->syms[i].demangled);
	free(obj->syms);
	free(obj->names);
	obj->syms = NULL;
	obj->names = NULL;
	obj->nsyms = 0;
}

void elf_object__free(struct elf_object *obj)
{
	if (!obj)
		return;
	elf_object__close_file(obj);
	elf_object__clear_symbols(obj);
	sym_dwarf__free(obj->dwarf);
	free(obj->segs);
	free(obj->build_id);
	free(obj->name);
	free(obj);
}

static int cand_cmp(const void *pa, const void *pb)
{
	const struct elf_cand *a = pa, *b = pb;

	if (a->start != b->start)
		return a->start < b->start ? -1 : 1;
	if (a->rank != b->rank)
		return a->rank > b->rank ? -1 : 1;
	return strcmp(a->name, b->name);
}

int elf_object__set_symbols(struct elf_object *obj, struct elf_cand *cands, size_t n)
{
	size_t kept = 0, names_len = 0, off = 0;
	int err = 0;

	elf_object__clear_symbols(obj);
	if (!n)
		return 0;
	qsort(cands, n, sizeof(*cands), cand_cmp);
	/* Keep the best candidate of each address, at the front. */
	for (size_t i = 0; i < n; i++) {
		size_t len = strlen(cands[i].name) + 1;

		if (kept && cands[kept - 1].start == cands[i].start)
			continue;
		if (names_len > SIZE_MAX - len) {
			err = -ENOMEM;
			goto cleanup;
		}
		names_len += len;
		cands[kept++] = cands[i];
	}
	obj->syms = calloc(kept, sizeof(*obj->syms));
	obj->names = malloc(names_len);
	if (!obj->syms || !obj->names) {
		err = -ENOMEM;
		goto cleanup;
	}
	for (size_t i = 0; i < kept; i++) {
		const struct elf_cand *c = &cands[i];
		struct elf_sym *s = &obj->syms[i];
		uint64_t next = i + 1 < kept ? cands[i + 1].start : UINT64_MAX;
		size_t len = strlen(c->name) + 1;

		s->start = c->start;
		if (c->size)
			s->end = c->start + c->size < c->start ? UINT64_MAX : c->start + c->size;
		else
			s->end = c->sec_end > c->start && c->sec_end < next ? c->sec_end : next;
		memcpy(obj->names + off, c->name, len);
		s->name = obj->names + off;
		off += len;
	}
	obj->nsyms = kept;
cleanup:
	if (err) {
		free(obj->syms);
		free(obj->names);
		obj->syms = NULL;
		obj->names = NULL;
	}
	return err;
}

bool elf_object__file_to_vaddr(const struct elf_object *obj, uint64_t file_off, uint64_t *vaddr)
{
	static uint64_t page;
	const struct elf_seg *found = NULL;

	if (!page)
		page = (uint64_t)sysconf(_SC_PAGESIZE);
	for (size_t i = 0; i < obj->nsegs; i++) {
		const struct elf_seg *seg = &obj->segs[i];
		/* The mapping starts and ends on page boundaries around it. */
		uint64_t lo = seg->offset & ~(page - 1);
		uint64_t hi = (seg->offset + seg->filesz + page - 1) & ~(page - 1);

		if (file_off < lo || file_off >= hi)
			continue;
		if (!found || (seg->exec && !found->exec))
			found = seg;
	}
	if (!found)
		return false;
	*vaddr = file_off - found->offset + found->vaddr;
	return true;
}

const char *elf_object__lookup(struct elf_object *obj, uint64_t vaddr)
{
	/* The first symbol starting above vaddr is at lo. */
	size_t lo = PARTITION_POINT(obj->nsyms, i, obj->syms[i].start <= vaddr);
	struct elf_sym *s;

	if (!lo)
		return NULL;
	s = &obj->syms[lo - 1];
	if (vaddr >= s->end)
		return NULL;
	if (!s->demangled) {
		char *d = sym_demangle(s->name);

		s->demangled = d ? d : (char *)s->name;
	}
	return s->demangled;
}

char *sym_demangle(const char *name)
{
	int status = -1;
	char *d;

	if (name[0] != '_' || name[1] != 'Z')
		return NULL;
	d = __cxa_demangle(name, NULL, NULL, &status);
	if (d && status) {
		free(d);
		d = NULL;
	}
	return d;
}
