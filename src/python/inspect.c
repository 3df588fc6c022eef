/* inspect.c: recognizes a CPython 3.10-3.13 interpreter file (a python
 * executable that links libpython statically, or libpythonX.Y.so) from the
 * ELF file alone, for the agent, which hands what it finds to the BPF
 * unwinder (struct unw_py_file). Symbols come from src/symbolize/elf.h
 * (.dynsym, where CPython exports everything used here, and .symtab for
 * the loop's cold part); the version from Py_Version, or for 3.10, which has none, from
 * the shape of its code objects; the interpreter loop's extent and its
 * cold part from the call frame information (.eh_frame_hdr's FDE index,
 * libdw's rows) and the loop's own jumps; frame and thread offsets are
 * per-version constants, 3.13's read from the _Py_DebugOffsets in the
 * file's _PyRuntime; code-object offsets are checked against PyCode_Type's
 * member table. The file is distrusted: every read is bounded by its
 * segments and by fixed sizes. See python.h for the contract. */
#include "python/python.h"
#include "common/log.h"

#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/search.h"
#include "common/xalloc.h"
#include "symbolize/elf.h"

/* PT_LOAD segments kept. */
#define PY_MAX_SEGS 16
/* Largest part of the interpreter loop read (55 KB in Debian's 3.11). */
#define PY_MAX_PART (4u << 20)
/* Entries of .eh_frame_hdr's index read. */
#define PY_MAX_FDES (1u << 22)
/* Distinct functions the loop's jumps land in that are looked at. */
#define PY_MAX_COLD_CAND 32
/* PyMemberDef entries read from PyCode_Type's table. */
#define PY_MAX_MEMBERS 64

/* glibc 2.36, x86-64: pthread_getspecific(key) reads the thread's first
 * block of keys at the thread pointer + 0x310, 16 bytes a key, the value
 * at +8 (disassembled, and checked against PyThreadState_Get() on 3.11 to
 * 3.13: docs research, unwinding.md section 0). */
#define GLIBC_TSD_OFFSET 0x310

/* PyTypeObject: tp_basicsize and tp_members (3.10-3.13, no debug build). */
#define PY_TP_BASICSIZE 32
#define PY_TP_MEMBERS 240
/* PyMemberDef: 40 bytes, the name's pointer at 0, the offset at 16. */
#define PY_MEMBERDEF_SIZE 40
#define PY_MEMBERDEF_OFFSET 16

/* Where the thread state's key is in _PyRuntime (Py_tss_t._key: the
 * struct's second int). 3.10: gilstate.autoTSSkey at +0x248 (DWARF of
 * pyenv's 3.10.13, gdb "ptype/o struct pyruntimestate"); 3.11-3.13: +0x250,
 * +0x608, +0x870 (unwinding.md section 2, from DWARF and ctypes). */
static const uint16_t tss_key_offsets[] = {0x248 + 4, 0x250 + 4, 0x608 + 4, 0x870 + 4};

/* Frame offsets per version. 3.10 walks PyFrameObjects: tstate->frame
 * +24, f_back +24, f_code +32, f_lasti +96 (an int, in code units since
 * 3.10; -1 before the first instruction), from the DWARF of pyenv's
 * 3.10.13 (gdb "ptype/o struct _ts", "ptype/o struct _frame"); no cframe,
 * no entry byte, no adaptive bytecode. 3.11-3.13: unwinding.md section 2
 * (DWARF of the pyenv builds, the same offsets in Debian's 3.11.2); 3.13's
 * are replaced by the file's _Py_DebugOffsets where it has them. */
static const struct unw_py_layout layouts[] = {
	{
		.tstate_cframe = UNW_PY_NO_CFRAME,
		.cframe_frame = 24,
		.frame_code = 32,
		.frame_previous = 24,
		.frame_instr = 96,
		.entry_kind = UNW_PY_ENTRY_ONE,
		.instr_kind = UNW_PY_INSTR_INDEX,
		.minor = 10,
	},
	{
		.tstate_cframe = 0x38, /* tstate->cframe, then current_frame at +8 */
		.cframe_frame = 8,
		.frame_code = 32,
		.frame_previous = 48,
		.frame_instr = 56, /* prev_instr */
		.frame_entry = 68, /* is_entry */
		.code_adaptive = 184,
		.entry_kind = UNW_PY_ENTRY_FLAG,
		.instr_kind = UNW_PY_INSTR_PTR,
		.minor = 11,
	},
	{
		.tstate_cframe = 0x38,
		.cframe_frame = 0,
		.frame_code = 0,
		.frame_previous = 8,
		.frame_instr = 56, /* prev_instr */
		.frame_entry = 70, /* owner */
		.code_adaptive = 192,
		.entry_kind = UNW_PY_ENTRY_SHIM,
		.instr_kind = UNW_PY_INSTR_PTR,
		.minor = 12,
	},
	{
		.tstate_cframe = UNW_PY_NO_CFRAME,
		.cframe_frame = 0x48, /* tstate->current_frame */
		.frame_code = 0,      /* f_executable */
		.frame_previous = 8,
		.frame_instr = 0x38, /* instr_ptr */
		.frame_entry = 0x46, /* owner */
		.code_adaptive = 0xc8,
		.entry_kind = UNW_PY_ENTRY_SHIM,
		.instr_kind = UNW_PY_INSTR_PTR,
		.minor = 13,
	},
};

/* _Py_DebugOffsets of 3.13 (Include/internal/pycore_runtime.h; offsets
 * within it from the DWARF of pyenv's 3.13.0): the cookie, the version
 * (PY_VERSION_HEX), free-threading, and the fields used here. */
#define DBG_SIZE 584
#define DBG_VERSION 8
#define DBG_FREE_THREADED 16
#define DBG_TSTATE_CURRENT_FRAME 184
#define DBG_FRAME_PREVIOUS 232
#define DBG_FRAME_EXECUTABLE 240
#define DBG_FRAME_INSTR_PTR 248
#define DBG_FRAME_OWNER 264
#define DBG_CODE_FILENAME 280
#define DBG_CODE_QUALNAME 296
#define DBG_CODE_LINETABLE 304
#define DBG_CODE_FIRSTLINENO 312
#define DBG_CODE_ADAPTIVE 344
#define DBG_STR_ASCII_SIZE 560

/* The symbols looked up, in .dynsym (CPython exports them all). */
enum { SYM_EVAL, SYM_RUNTIME, SYM_VERSION, SYM_CODE_TYPE, NSYMS };
static const char *const sym_names[NSYMS] = {"_PyEval_EvalFrameDefault", "_PyRuntime", "Py_Version",
					     "PyCode_Type"};

struct pyfile {
	int fd;
	Elf *elf;
	Dwarf_CFI *cfi;		    /* .eh_frame's rows, libdw's */
	GElf_Phdr seg[PY_MAX_SEGS]; /* the PT_LOAD segments */
	size_t nseg;
	uint64_t *fde; /* start addresses of the FDEs, sorted (.eh_frame_hdr) */
	size_t nfde;
	char *err;
	size_t errlen;
};

/* A part of the interpreter loop: [lo, hi) in ELF addresses, and how many
 * of the hot part's jumps land in it. */
struct part {
	uint64_t lo, hi;
	size_t refs;
};

/* PyCode_Type's member table, where the file has it: each member's
 * offset, -1 when absent. */
struct members {
	bool found;
	int64_t filename, name, qualname, firstlineno, linetable, basicsize;
};

/* A one-line reason into f->err (common/log.h); returns e. */
#define set_err(f, e, ...) errmsg((f)->err, (f)->errlen, (e), __VA_ARGS__)

/* ---- The file ---- */

static int open_file(struct pyfile *f, const char *path)
{
	GElf_Ehdr eh;
	size_t nph;

	f->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (f->fd < 0)
		return set_err(f, -errno, "can't open %s: %s", path, strerror(errno));
	f->elf = elf_begin(f->fd, ELF_C_READ, NULL);
	if (!f->elf || elf_kind(f->elf) != ELF_K_ELF || !gelf_getehdr(f->elf, &eh) ||
	    eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_machine != EM_X86_64 ||
	    elf_getphdrnum(f->elf, &nph))
		return set_err(f, -ENOEXEC, "%s is not an x86-64 ELF file", path);
	for (size_t i = 0; i < nph && f->nseg < PY_MAX_SEGS; i++) {
		GElf_Phdr ph;

		if (gelf_getphdr(f->elf, i, &ph) && ph.p_type == PT_LOAD &&
		    ph.p_filesz <= ph.p_memsz)
			f->seg[f->nseg++] = ph;
	}
	return 0;
}

static void close_file(struct pyfile *f)
{
	free(f->fde);
	if (f->cfi)
		dwarf_cfi_end(f->cfi);
	elf_end(f->elf);
	if (f->fd >= 0)
		close(f->fd);
}

/* The PT_LOAD segment whose file-backed bytes hold [vaddr, vaddr + n),
 * executable ones only when exec; NULL when none does. */
static const GElf_Phdr *seg_of(const struct pyfile *f, uint64_t vaddr, uint64_t n, bool exec)
{
	for (size_t i = 0; i < f->nseg; i++) {
		const GElf_Phdr *ph = &f->seg[i];

		if ((exec && !(ph->p_flags & PF_X)) || vaddr < ph->p_vaddr)
			continue;
		if (vaddr - ph->p_vaddr <= ph->p_filesz &&
		    n <= ph->p_filesz - (vaddr - ph->p_vaddr))
			return ph;
	}
	return NULL;
}

/* Reads n bytes at ELF address vaddr from the file: 0 or -ENODATA. */
static int file_read(const struct pyfile *f, uint64_t vaddr, void *buf, size_t n)
{
	const GElf_Phdr *ph = seg_of(f, vaddr, n, false);

	if (!ph || pread(f->fd, buf, n, (off_t)(vaddr - ph->p_vaddr + ph->p_offset)) != (ssize_t)n)
		return -ENODATA;
	return 0;
}

/* Reads a string of at most size - 1 bytes at vaddr, cut at its segment's
 * end: 0 or -ENODATA. */
static int file_read_str(const struct pyfile *f, uint64_t vaddr, char *buf, size_t size)
{
	const GElf_Phdr *ph = seg_of(f, vaddr, 1, false);
	uint64_t left;

	if (!ph || size < 2)
		return -ENODATA;
	left = ph->p_filesz - (vaddr - ph->p_vaddr);
	memset(buf, 0, size);
	return file_read(f, vaddr, buf, left < size - 1 ? left : size - 1);
}

static uint64_t get_u64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* ---- Call frame information: where functions start and end ---- */

/* .eh_frame_hdr's index of FDEs (PT_GNU_EH_FRAME): a header, then pairs
 * of (function start, FDE) relative to the header, sorted by start. Only
 * the encoding every GNU linker writes (4-byte entries, DW_EH_PE_datarel |
 * DW_EH_PE_sdata4) is read. */
static int load_fde_index(struct pyfile *f)
{
	GElf_Phdr ph, eh = {0}, *hdr = &eh;
	uint8_t head[12];
	int32_t *tab = NULL;
	uint32_t count;
	size_t nph;

	if (!elf_getphdrnum(f->elf, &nph))
		for (size_t i = 0; i < nph; i++)
			if (gelf_getphdr(f->elf, i, &ph) && ph.p_type == PT_GNU_EH_FRAME)
				eh = ph;
	if (hdr->p_filesz < sizeof(head) || file_read(f, hdr->p_vaddr, head, sizeof(head)))
		return -ENODATA;
	memcpy(&count, head + 8, sizeof(count));
	if (head[0] != 1 || ((head[1] & 0x0f) != 0x03 && (head[1] & 0x0f) != 0x0b) ||
	    head[2] != 0x03 || head[3] != 0x3b || count > (hdr->p_filesz - 12) / 8 ||
	    count > PY_MAX_FDES)
		return -ENODATA;
	tab = malloc((size_t)count * 8 + 1);
	f->fde = malloc((size_t)count * sizeof(*f->fde) + 1);
	if (!tab || !f->fde) {
		free(tab);
		return -ENOMEM;
	}
	if (file_read(f, hdr->p_vaddr + 12, tab, (size_t)count * 8)) {
		free(tab);
		return -ENODATA;
	}
	for (uint32_t i = 0; i < count; i++) {
		f->fde[i] = hdr->p_vaddr + (int64_t)tab[2 * i];
		/* Unsorted, it can't be searched. */
		if (i && f->fde[i] < f->fde[i - 1]) {
			free(tab);
			return -ENODATA;
		}
	}
	f->nfde = count;
	free(tab);
	return 0;
}

/* Whether libdw has a row of rules at addr. */
static bool has_row(Dwarf_CFI *cfi, uint64_t addr, uint64_t *end)
{
	Dwarf_Frame *fr = NULL;
	Dwarf_Addr start, stop;
	bool ok = false;

	if (!dwarf_cfi_addrframe(cfi, addr, &fr) &&
	    dwarf_frame_info(fr, &start, &stop, NULL) >= 0 && start <= addr && addr < stop) {
		*end = stop;
		ok = true;
	}
	free(fr);
	return ok;
}

/* The range of the FDE that holds addr: its start from the index, its end
 * where libdw's rows stop -- every address from the start has a row up to
 * the FDE's end, and none from there to the next FDE (the padding between
 * functions), so a binary search finds it in a few row evaluations.
 * -ENOENT when no FDE holds addr. */
static int fde_range(const struct pyfile *f, uint64_t addr, uint64_t *lo, uint64_t *hi)
{
	size_t k = PARTITION_POINT(f->nfde, i, f->fde[i] <= addr), n;
	uint64_t start, limit, end;

	if (!k)
		return -ENOENT;
	start = f->fde[k - 1];
	limit = k < f->nfde && f->fde[k] - start < PY_MAX_PART ? f->fde[k] : start + PY_MAX_PART;
	if (addr >= limit)
		return -ENOENT;
	n = PARTITION_POINT(limit - start, i, has_row(f->cfi, start + i, &end));
	if (!n || !has_row(f->cfi, start + n - 1, &end) || addr >= end)
		return -ENOENT;
	*lo = start;
	*hi = end;
	return 0;
}

/* ---- The interpreter loop ---- */

/* The code of [lo, hi), read from the file into a new buffer; NULL when it
 * is not in an executable segment or too long. */
static uint8_t *read_code(const struct pyfile *f, uint64_t lo, uint64_t hi)
{
	uint8_t *code;

	if (hi <= lo || hi - lo > PY_MAX_PART || !seg_of(f, lo, hi - lo, true))
		return NULL;
	code = malloc(hi - lo);
	if (code && file_read(f, lo, code, hi - lo)) {
		free(code);
		return NULL;
	}
	return code;
}

/* The next direct near jump (jmp rel32, jcc rel32) in code[*i, n), which
 * starts at address base, and its target. A byte scan, not a decoder: some
 * of what it finds are bytes inside other instructions, whose "targets"
 * land anywhere; the callers count only targets that others corroborate. */
static bool next_jump(const uint8_t *code, size_t n, size_t *i, uint64_t base, uint64_t *target)
{
	for (; *i < n; (*i)++) {
		size_t at = *i, len;
		int32_t rel;

		if (code[at] == 0xe9 && n - at >= 5)
			len = 5;
		else if (code[at] == 0x0f && n - at >= 6 && (code[at + 1] & 0xf0) == 0x80)
			len = 6;
		else
			continue;
		memcpy(&rel, code + at + len - 4, sizeof(rel));
		*target = base + at + len + (int64_t)rel;
		(*i)++;
		return true;
	}
	return false;
}

/* The functions (FDEs) that the hot part's jumps out of it land in, with
 * how many land in each: where a cold part can be. */
static size_t jump_targets(const struct pyfile *f, const struct part *hot, const uint8_t *code,
			   struct part *cand)
{
	size_t i = 0, n = 0, k;
	uint64_t t;

	while (next_jump(code, hot->hi - hot->lo, &i, hot->lo, &t)) {
		if ((t >= hot->lo && t < hot->hi) || !seg_of(f, t, 1, true))
			continue;
		for (k = 0; k < n && !(t >= cand[k].lo && t < cand[k].hi); k++)
			;
		if (k < n) {
			cand[k].refs++;
		} else if (n < PY_MAX_COLD_CAND && !fde_range(f, t, &cand[n].lo, &cand[n].hi) &&
			   (cand[n].hi <= hot->lo || cand[n].lo >= hot->hi)) {
			cand[n++].refs = 1;
		}
	}
	return n;
}

/* Whether the code of p jumps into the inside of hot (not its start: a
 * tail call): what a part of the same function does and no other function
 * can. */
static bool jumps_into(const struct pyfile *f, const struct part *p, const struct part *hot)
{
	uint8_t *code = read_code(f, p->lo, p->hi);
	size_t i = 0;
	uint64_t t;
	bool found = false;

	while (code && !found && next_jump(code, p->hi - p->lo, &i, p->lo, &t))
		found = t > hot->lo && t < hot->hi;
	free(code);
	return found;
}

static int cmp_refs(const void *a, const void *b)
{
	const struct part *x = a, *y = b;

	return x->refs > y->refs ? -1 : x->refs < y->refs;
}

/* Adds part p to the loop's parts unless it is there or they are full. */
static void add_part(struct part *parts, size_t *n, const struct part *p)
{
	for (size_t i = 0; i < *n; i++)
		if (parts[i].lo == p->lo)
			return;
	if (*n < UNW_PY_EVAL_RANGES)
		parts[(*n)++] = *p;
}

/* The cold parts a .symtab names (gcc's "_PyEval_EvalFrameDefault.cold"):
 * their FDEs' ranges. The pyenv builds have a tiny one that no jump of the
 * hot part reaches directly. */
static void named_cold_parts(const struct pyfile *f, const char *path, struct part *parts,
			     size_t *n)
{
	static const char *const names[] = {"_PyEval_EvalFrameDefault.cold",
					    "_PyEval_EvalFrameDefault.cold.0"};
	uint64_t offs[2];

	if (elf_find_syms(path, names, 2, offs, ELF_FIND_SYMTAB) <= 0)
		return;
	for (size_t i = 0; i < 2; i++) {
		for (size_t s = 0; offs[i] && s < f->nseg; s++) {
			const GElf_Phdr *ph = &f->seg[s];
			struct part p = {0};

			if (!(ph->p_flags & PF_X) || offs[i] < ph->p_offset ||
			    offs[i] - ph->p_offset >= ph->p_filesz)
				continue;
			if (!fde_range(f, offs[i] - ph->p_offset + ph->p_vaddr, &p.lo, &p.hi))
				add_part(parts, n, &p);
		}
	}
}

/* The loop's parts: the hot one, the FDE of _PyEval_EvalFrameDefault, then
 * its cold parts. A cold part (gcc's hot/cold split: the unlikely blocks
 * moved to .text.unlikely, 0x430f05..0x43455e in Debian's stripped 3.11)
 * has an FDE of its own and no symbol in a stripped file; it is found as
 * an FDE that the hot part's jumps land in and whose own jumps land back
 * inside the hot part; the ones most jumped to are kept. */
static int loop_parts(struct pyfile *f, const char *path, uint64_t eval, struct part *parts,
		      size_t *n)
{
	struct part hot = {0}, cand[PY_MAX_COLD_CAND];
	uint8_t *code;
	size_t ncand;

	if (fde_range(f, eval, &hot.lo, &hot.hi) || hot.lo != eval)
		return set_err(f, -ENODATA, "no FDE starts at _PyEval_EvalFrameDefault (%#lx)",
			       (unsigned long)eval);
	code = read_code(f, hot.lo, hot.hi);
	if (!code)
		return set_err(f, -ENODATA,
			       "_PyEval_EvalFrameDefault is not in an executable segment");
	*n = 0;
	add_part(parts, n, &hot);
	named_cold_parts(f, path, parts, n);
	ncand = jump_targets(f, &hot, code, cand);
	free(code);
	qsort(cand, ncand, sizeof(*cand), cmp_refs);
	for (size_t i = 0; i < ncand; i++)
		if (jumps_into(f, &cand[i], &hot))
			add_part(parts, n, &cand[i]);
	return 0;
}

/* The parts as file offsets, through the executable segments holding them. */
static int loop_ranges(struct pyfile *f, const struct part *parts, size_t n, struct py_interp *out)
{
	for (size_t i = 0; i < n; i++) {
		const GElf_Phdr *ph = seg_of(f, parts[i].lo, parts[i].hi - parts[i].lo, true);

		if (!ph)
			return set_err(f, -ENODATA,
				       "a part of the interpreter loop is not in the file");
		out->eval_start[i] = parts[i].lo - ph->p_vaddr + ph->p_offset;
		out->eval_end[i] = parts[i].hi - ph->p_vaddr + ph->p_offset;
		if (!i)
			out->text_delta = ph->p_vaddr - ph->p_offset;
	}
	out->neval = (int)n;
	return 0;
}

/* ---- Version and layout ---- */

/* Reads PyCode_Type's member table (tp_members: name, type, offset, flags,
 * doc) and tp_basicsize. Pointers in it are absolute in an executable;
 * in a shared library they are RELATIVE relocations, whose addends GNU ld
 * also writes in place -- where they aren't, the names don't read and the
 * table counts as absent. */
static void read_members(const struct pyfile *f, uint64_t type, struct members *m)
{
	uint8_t buf[8], md[PY_MEMBERDEF_SIZE];
	uint64_t table;

	memset(m, 0xff, sizeof(*m));
	m->found = false;
	if (file_read(f, type + PY_TP_BASICSIZE, buf, 8))
		return;
	m->basicsize = (int64_t)get_u64(buf);
	if (file_read(f, type + PY_TP_MEMBERS, buf, 8))
		return;
	table = get_u64(buf);
	for (int i = 0; i < PY_MAX_MEMBERS; i++) {
		char name[24] = "";
		int64_t off;

		if (file_read(f, table + (uint64_t)i * PY_MEMBERDEF_SIZE, md, sizeof(md)))
			return;
		if (!get_u64(md))
			break;
		if (file_read_str(f, get_u64(md), name, sizeof(name)))
			return;
		off = (int64_t)get_u64(md + PY_MEMBERDEF_OFFSET);
		m->found = true;
		if (!strcmp(name, "co_filename"))
			m->filename = off;
		else if (!strcmp(name, "co_name"))
			m->name = off;
		else if (!strcmp(name, "co_qualname"))
			m->qualname = off;
		else if (!strcmp(name, "co_firstlineno"))
			m->firstlineno = off;
		else if (!strcmp(name, "co_linetable"))
			m->linetable = off;
	}
}

/* The minor version named in the file's name ("libpython3.10.so.1.0",
 * "python3.10"), -1 when it names none. */
static int minor_from_name(const char *path)
{
	const char *base = strrchr(path, '/'), *p;
	int minor = -1;

	p = strstr(base ? base + 1 : path, "python3.");
	if (p && sscanf(p + strlen("python3."), "%d", &minor) != 1)
		minor = -1;
	return minor;
}

/* The version: Py_Version (PY_VERSION_HEX, 3.11+); else 3.10 when its
 * code objects have co_linetable but no co_qualname (3.9 has co_lnotab,
 * 3.11 co_qualname); else, when the member table can't be read, the file
 * name's. */
static int read_version(struct pyfile *f, const char *path, uint64_t py_version,
			const struct members *m, struct py_interp *out)
{
	uint8_t buf[4];
	uint32_t hex;

	out->major = 3;
	if (py_version && !file_read(f, py_version, buf, sizeof(buf))) {
		memcpy(&hex, buf, sizeof(hex));
		out->major = (int)(hex >> 24);
		out->minor = (int)(hex >> 16 & 0xff);
	} else if (m->found) {
		out->minor = m->linetable >= 0 && m->qualname < 0 ? 10 : -1;
	} else {
		out->minor = minor_from_name(path);
	}
	if (out->minor < 0)
		return set_err(f, -ENOTSUP,
			       "%s: a CPython older than 3.10, or of no version we can tell", path);
	if (out->major != 3 || out->minor < 10 || out->minor > 13)
		return set_err(f, -ENOTSUP, "%s: CPython %d.%d is not supported (3.10-3.13 are)",
			       path, out->major, out->minor);
	return 0;
}

/* Whether the code objects of the file have the offsets py_code_read uses
 * for its version (a debug or free-threaded build doesn't). */
static int check_members(struct pyfile *f, int minor, const struct members *m)
{
	const struct py_code_offsets *o = py_code_offsets(minor);
	int64_t qualname = o->qualname ? o->qualname : -1;

	if (!m->found)
		return 0;
	if (m->filename != o->filename || m->name != o->name || m->qualname != qualname ||
	    m->firstlineno != o->firstlineno || m->linetable != o->linetable ||
	    (o->bytecode && m->basicsize != o->bytecode))
		return set_err(f, -ENOTSUP,
			       "code objects of this 3.%d are not laid out as usual "
			       "(co_filename at %lld, co_linetable at %lld, size %lld) -- "
			       "a debug or free-threaded build?",
			       minor, (long long)m->filename, (long long)m->linetable,
			       (long long)m->basicsize);
	return 0;
}

/* A u16 field of _Py_DebugOffsets, or -1 when it doesn't fit one. */
static int dbg_field(const uint8_t *dbg, size_t at)
{
	uint64_t v = get_u64(dbg + at);

	return v < UNW_PY_NO_CFRAME ? (int)v : -1;
}

/* 3.13's offsets from the _Py_DebugOffsets at the start of _PyRuntime
 * (its initialized data in the file): where the cookie "xdebugpy" is
 * there, its frame offsets replace the constants, and its code-object
 * ones must agree with py_code_read's. */
static int read_debug_offsets(struct pyfile *f, uint64_t runtime, struct unw_py_layout *l)
{
	const struct py_code_offsets *o = py_code_offsets(13);
	uint8_t dbg[DBG_SIZE];
	int cur, prev, code, instr, owner;

	if (file_read(f, runtime, dbg, sizeof(dbg)) || memcmp(dbg, "xdebugpy", 8))
		return 0;
	if (get_u64(dbg + DBG_VERSION) >> 16 != 0x030d || get_u64(dbg + DBG_FREE_THREADED))
		return set_err(f, -ENOTSUP, "_Py_DebugOffsets says version %#llx%s",
			       (unsigned long long)get_u64(dbg + DBG_VERSION),
			       get_u64(dbg + DBG_FREE_THREADED) ? ", free-threaded" : "");
	cur = dbg_field(dbg, DBG_TSTATE_CURRENT_FRAME);
	prev = dbg_field(dbg, DBG_FRAME_PREVIOUS);
	code = dbg_field(dbg, DBG_FRAME_EXECUTABLE);
	instr = dbg_field(dbg, DBG_FRAME_INSTR_PTR);
	owner = dbg_field(dbg, DBG_FRAME_OWNER);
	if (cur < 0 || prev < 0 || code < 0 || instr < 0 || owner < 0 ||
	    dbg_field(dbg, DBG_CODE_FILENAME) != o->filename ||
	    dbg_field(dbg, DBG_CODE_QUALNAME) != o->qualname ||
	    dbg_field(dbg, DBG_CODE_LINETABLE) != o->linetable ||
	    dbg_field(dbg, DBG_CODE_FIRSTLINENO) != o->firstlineno ||
	    dbg_field(dbg, DBG_CODE_ADAPTIVE) != o->bytecode ||
	    dbg_field(dbg, DBG_STR_ASCII_SIZE) != o->str_ascii)
		return set_err(f, -ENOTSUP, "_Py_DebugOffsets differ from 3.13.0's");
	l->cframe_frame = (uint16_t)cur;
	l->frame_previous = (uint16_t)prev;
	l->frame_code = (uint16_t)code;
	l->frame_instr = (uint16_t)instr;
	l->frame_entry = (uint16_t)owner;
	l->code_adaptive = (uint16_t)o->bytecode;
	return 0;
}

/* Version, runtime, thread key and layout of the file. */
static int read_layout(struct pyfile *f, const char *path, const uint64_t *syms,
		       struct py_interp *out)
{
	struct members m;
	int err;

	read_members(f, syms[SYM_CODE_TYPE], &m);
	err = read_version(f, path, syms[SYM_VERSION], &m, out);
	if (!err)
		err = check_members(f, out->minor, &m);
	if (err)
		return err;
	out->layout = layouts[out->minor - 10];
	out->layout.tsd_offset = GLIBC_TSD_OFFSET;
	out->runtime_addr = syms[SYM_RUNTIME];
	out->tss_key_addr = syms[SYM_RUNTIME] + tss_key_offsets[out->minor - 10];
	return out->minor == 13 ? read_debug_offsets(f, syms[SYM_RUNTIME], &out->layout) : 0;
}

int py_inspect_file(const char *path, struct py_interp *out, char *err, size_t errlen)
{
	struct pyfile f = {.fd = -1, .err = err, .errlen = errlen};
	struct part parts[UNW_PY_EVAL_RANGES];
	uint64_t syms[NSYMS];
	size_t nparts;
	int rc;

	memset(out, 0, sizeof(*out));
	if (errlen)
		err[0] = '\0';
	if (elf_version(EV_CURRENT) == EV_NONE)
		return set_err(&f, -EINVAL, "libelf: %s", elf_errmsg(-1));
	rc = open_file(&f, path);
	if (rc)
		goto cleanup;
	rc = elf_find_syms(path, sym_names, NSYMS, syms, ELF_FIND_OBJECTS | ELF_FIND_VADDRS);
	if (rc < 0 || !syms[SYM_EVAL] || !syms[SYM_RUNTIME] || !syms[SYM_CODE_TYPE]) {
		rc = set_err(&f, -ENODATA, "%s: no CPython interpreter in it", path);
		goto cleanup;
	}
	rc = read_layout(&f, path, syms, out);
	if (rc)
		goto cleanup;
	f.cfi = dwarf_getcfi_elf(f.elf);
	rc = load_fde_index(&f);
	if (rc || !f.cfi) {
		rc = set_err(&f, rc == -ENOMEM ? rc : -ENODATA,
			     "%s: no usable .eh_frame_hdr/.eh_frame to bound the interpreter loop",
			     path);
		goto cleanup;
	}
	rc = loop_parts(&f, path, syms[SYM_EVAL], parts, &nparts);
	if (!rc)
		rc = loop_ranges(&f, parts, nparts, out);
cleanup:
	close_file(&f);
	if (rc)
		memset(out, 0, sizeof(*out));
	return rc;
}
