/* table.c: builds a file's unwind table (table.h) from its call frame
 * information. libelf finds the sections and the executable PT_LOAD
 * segments; libdw enumerates the FDEs (dwarf_next_cfi) and evaluates their
 * rules, one row at a time (dwarf_cfi_addrframe, then the frame's end is the
 * next row's start). What is written here is ours: decoding an FDE's address
 * range from its CIE's augmentation (libdw has no call for it), a pass over
 * each FDE's instructions that refuses what would make libdw allocate
 * without bound (huge register numbers, deep remember_state stacks) and
 * counts its rows, the mapping of each rule to a row kind, and the sort and
 * merge of the ranges into rows keyed by file offset. Work is bounded per
 * FDE (UNW_MAX_FDE_ROWS) and per file (UNW_WORK_BASE, UNW_WORK_PER_BYTE),
 * since libdw evaluates every row of an FDE from the FDE's start: the FDEs
 * are read first and evaluated the cheapest first, so that a few long ones
 * can't starve the rest. */
#include "unwind/table.h"

#include "common/log.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/search.h"
#include "common/xalloc.h"

/* x86-64 DWARF registers. */
#define REG_RBP 6
#define REG_RSP 7
#define REG_RA 16
/* Registers an FDE may name: x86-64 numbers them below 128. libdw grows a
 * frame to the largest number named, up to 2 GB. */
#define MAX_DWARF_REG 128
/* remember_state depth allowed: each level is a copy of the frame. */
#define MAX_STATE_DEPTH 16
/* Work, in units of one CFA instruction byte interpreted (0.3 ns here),
 * charged per row evaluated on top of its bytes (libdw's FDE lookup, frame
 * allocation and copy of the CIE's state: 0.5 us) and per remember_state
 * (a frame copied into a new allocation). */
#define WORK_PER_STEP 1536
#define WORK_PER_REMEMBER 256
/* Executable PT_LOAD segments kept. */
#define MAX_SEGS 16
/* A compressed .debug_frame may inflate this much at most (real ones: 3 to
 * 6 times). */
#define MAX_INFLATE 64

struct seg {
	uint64_t vaddr, end, offset; /* [vaddr, end) at file offset offset */
};

/* A cursor over section bytes. */
struct cur {
	const uint8_t *p, *end;
};

/* What an FDE needs from its CIE. */
struct cie_info {
	Dwarf_Off off;
	bool ok;       /* its FDEs can be decoded and evaluated */
	bool z;	       /* FDEs have augmentation data with a length */
	uint8_t enc;   /* DW_EH_PE encoding of FDE addresses */
	uint64_t cost; /* work of its initial instructions */
};

/* The instructions of an FDE, as scan_insns() saw them. */
struct insn_scan {
	size_t advances; /* instructions that start a new row */
	uint64_t cost;	 /* work to interpret them all once */
};

/* An FDE to evaluate, as read_fde() decoded it. */
struct fde_job {
	uint64_t lo, hi; /* its addresses, inside segment seg */
	uint64_t cost;	 /* work per row evaluated */
	uint64_t total;	 /* work for all its rows (up to UNW_MAX_FDE_ROWS) */
	size_t seg;
};

/* One rule over [row.off, end), file offsets. */
struct range {
	uint32_t end;
	struct unw_row row;
};

/* The state of one build. */
struct builder {
	Elf *elf;
	size_t max_rows, max_ranges;
	struct seg segs[MAX_SEGS];
	size_t nsegs;
	Dwarf_CFI *cfi;	    /* the evaluator of the section read */
	Elf_Data *data;	    /* that section */
	bool eh;	    /* .eh_frame (else .debug_frame) */
	uint64_t sec_vaddr; /* its address, the base of pcrel pointers */
	const unsigned char *ident;
	struct cie_info cie; /* the last CIE read */
	struct fde_job *jobs;
	size_t njobs, jobs_cap;
	struct range *ranges;
	size_t nranges, cap;
	size_t fde_first; /* first range of the FDE being read */
	uint64_t work_left;
	bool out_of_work;
	struct unw_table_stats *st;
	char *err;
	size_t errlen;
};

/* The .debug_frame alone in an ELF image of its own (debug_frame_open()),
 * so that dwarf_begin_elf() reads and inflates nothing else. */
struct dbg_frame {
	char *image;
	Elf *elf;
	Dwarf *dw;
	Elf_Data *data;
};

/* Writes a one-line reason to b->err (common/log.h) and returns e. */
#define set_err(b, e, ...) errmsg((b)->err, (b)->errlen, (e), __VA_ARGS__)

/* ---- Reading section bytes ---- */

static bool cur_skip(struct cur *c, uint64_t n)
{
	if (n > (uint64_t)(c->end - c->p))
		return false;
	c->p += n;
	return true;
}

/* n little-endian bytes (n <= 8). */
static bool cur_fixed(struct cur *c, size_t n, uint64_t *v)
{
	if (n > (size_t)(c->end - c->p))
		return false;
	*v = 0;
	for (size_t i = 0; i < n; i++)
		*v |= (uint64_t)c->p[i] << (8 * i);
	c->p += n;
	return true;
}

/* A LEB128 number; bits past 64 are dropped, as libdw does. */
static bool cur_leb(struct cur *c, uint64_t *v, bool is_signed)
{
	unsigned shift = 0;
	uint8_t byte;

	*v = 0;
	do {
		if (c->p == c->end)
			return false;
		byte = *c->p++;
		if (shift < 64)
			*v |= (uint64_t)(byte & 0x7f) << shift;
		shift += 7;
	} while (byte & 0x80);
	if (is_signed && shift < 64 && (byte & 0x40))
		*v |= ~0ull << shift;
	return true;
}

/* A pointer in DW_EH_PE encoding enc at c; pc is the address of c->p, the
 * base of a pcrel pointer. apply: add the base (an address), else read
 * the bare value (a length). Only absolute and pcrel pointers: x86-64
 * toolchains emit nothing else for FDEs. */
static bool read_encoded(struct cur *c, uint8_t enc, uint64_t pc, bool apply, uint64_t *v)
{
	static const uint8_t size[16] = {8, 0, 2, 4, 8, 0, 0, 0, 8, 0, 2, 4, 8};
	uint8_t fmt = enc & 0x0f;
	bool ok;

	if (fmt == DW_EH_PE_uleb128 || fmt == DW_EH_PE_sleb128)
		ok = cur_leb(c, v, fmt == DW_EH_PE_sleb128);
	else if (size[fmt])
		ok = cur_fixed(c, size[fmt], v);
	else
		return false;
	if (ok && fmt == DW_EH_PE_sdata2)
		*v = (uint64_t)(int64_t)(int16_t)*v;
	else if (ok && fmt == DW_EH_PE_sdata4)
		*v = (uint64_t)(int64_t)(int32_t)*v;
	if (!ok || !apply)
		return ok;
	if (enc & DW_EH_PE_indirect)
		return false;
	if ((enc & 0x70) == DW_EH_PE_pcrel)
		*v += pc;
	else if ((enc & 0x70) != DW_EH_PE_absptr)
		return false;
	return true;
}

/* ---- Checking CFA instructions before libdw runs them ---- */

/* A register operand: below MAX_DWARF_REG. */
static bool scan_reg(struct cur *c)
{
	uint64_t reg;

	return cur_leb(c, &reg, false) && reg < MAX_DWARF_REG;
}

/* The operands of an extended opcode; false if unknown or malformed. */
static bool scan_operands(struct cur *c, uint8_t op, uint8_t enc, struct insn_scan *sc, int *depth)
{
	uint64_t x;

	switch (op) {
	case DW_CFA_nop:
	case DW_CFA_GNU_window_save:
		return true;
	case DW_CFA_set_loc:
		sc->advances++;
		return read_encoded(c, enc, 0, false, &x);
	case DW_CFA_advance_loc1:
	case DW_CFA_advance_loc2:
	case DW_CFA_advance_loc4:
	case DW_CFA_MIPS_advance_loc8:
		sc->advances++;
		/* 1, 2, 4 and 8 bytes of delta: opcodes 2, 3, 4 and 0x1d. */
		return cur_skip(c, op == DW_CFA_MIPS_advance_loc8 ? 8 : 1u << (op - 2));
	case DW_CFA_offset_extended:
	case DW_CFA_offset_extended_sf:
	case DW_CFA_val_offset:
	case DW_CFA_val_offset_sf:
	case DW_CFA_GNU_negative_offset_extended:
	case DW_CFA_def_cfa:
	case DW_CFA_def_cfa_sf:
		return scan_reg(c) && cur_leb(c, &x, false);
	case DW_CFA_restore_extended:
	case DW_CFA_undefined:
	case DW_CFA_same_value:
	case DW_CFA_def_cfa_register:
		return scan_reg(c);
	case DW_CFA_register:
		return scan_reg(c) && scan_reg(c);
	case DW_CFA_remember_state:
		sc->cost += WORK_PER_REMEMBER;
		return ++*depth <= MAX_STATE_DEPTH;
	case DW_CFA_restore_state:
		*depth -= *depth > 0;
		return true;
	case DW_CFA_def_cfa_offset:
	case DW_CFA_def_cfa_offset_sf:
	case DW_CFA_GNU_args_size:
		return cur_leb(c, &x, false);
	case DW_CFA_def_cfa_expression:
		return cur_leb(c, &x, false) && cur_skip(c, x);
	case DW_CFA_expression:
	case DW_CFA_val_expression:
		return scan_reg(c) && cur_leb(c, &x, false) && cur_skip(c, x);
	default:
		return false;
	}
}

/* Walks the instructions at c (enc: the FDE address encoding, for
 * set_loc): counts their rows and work, and refuses any that would let
 * libdw allocate without bound or that it does not know. */
static bool scan_insns(struct cur c, uint8_t enc, struct insn_scan *sc)
{
	int depth = 0;
	uint64_t x;

	sc->advances = 0;
	sc->cost = (uint64_t)(c.end - c.p);
	while (c.p < c.end) {
		uint8_t op = *c.p++;

		if ((op & 0xc0) == DW_CFA_advance_loc)
			sc->advances++;
		else if ((op & 0xc0) == DW_CFA_offset) {
			if (!cur_leb(&c, &x, false))
				return false;
		} else if ((op & 0xc0) != DW_CFA_restore && !scan_operands(&c, op, enc, sc, &depth))
			return false;
	}
	return true;
}

/* ---- CIEs and FDEs ---- */

/* The FDE address encoding of a CIE with a 'z' augmentation string. */
static bool parse_augmentation(const Dwarf_CIE *cie, uint8_t *enc)
{
	struct cur c = {cie->augmentation_data,
			cie->augmentation_data + cie->augmentation_data_size};
	uint64_t x;
	uint8_t penc;

	for (const char *s = cie->augmentation + 1; *s; s++) {
		if (*s == 'R') {
			if (c.p == c.end)
				return false;
			*enc = *c.p++;
			return true;
		} else if (*s == 'P') {
			if (c.p == c.end)
				return false;
			penc = *c.p++;
			if (!read_encoded(&c, penc & 0x0f, 0, false, &x))
				return false;
		} else if (*s == 'L') {
			if (!cur_skip(&c, 1))
				return false;
		} else if (*s != 'S' && *s != 'B') {
			return false; /* unknown: where 'R' would be is unknown too */
		}
	}
	*enc = DW_EH_PE_absptr;
	return true;
}

/* Whether FDE address encoding enc is one read_encoded() applies. */
static bool encoding_ok(uint8_t enc)
{
	uint8_t fmt = enc & 0x0f, app = enc & 0xf0;

	return fmt != 5 && fmt != 6 && fmt != 7 && fmt <= DW_EH_PE_sdata8 &&
	       (app == DW_EH_PE_absptr || app == DW_EH_PE_pcrel);
}

/* Reads the CIE at section offset off into b->cie (kept for the FDEs after
 * it that share it). */
static void load_cie(struct builder *b, Dwarf_Off off)
{
	struct cie_info *ci = &b->cie;
	Dwarf_CFI_Entry e;
	Dwarf_Off next;
	struct insn_scan sc;

	if (ci->off == off)
		return;
	memset(ci, 0, sizeof(*ci));
	ci->off = off;
	if (dwarf_next_cfi(b->ident, b->data, b->eh, off, &next, &e) != 0 || !dwarf_cfi_cie_p(&e) ||
	    e.cie.return_address_register != REG_RA)
		return;
	ci->enc = DW_EH_PE_absptr;
	if (e.cie.augmentation[0] == 'z') {
		if (!b->eh || !parse_augmentation(&e.cie, &ci->enc) || !encoding_ok(ci->enc))
			return;
		ci->z = true;
	} else if (e.cie.augmentation[strspn(e.cie.augmentation, "S")]) {
		return; /* without 'z', only 'S' (no data) is understood */
	}
	if (!scan_insns((struct cur){e.cie.initial_instructions, e.cie.initial_instructions_end},
			ci->enc, &sc))
		return;
	ci->cost = sc.cost;
	ci->ok = true;
}

/* The address range [*lo, *hi) of an FDE and its instructions. */
static bool decode_fde(struct builder *b, const Dwarf_FDE *fde, uint64_t *lo, uint64_t *hi,
		       struct cur *insns)
{
	struct cur c = {fde->start, fde->end};
	uint64_t pc = b->sec_vaddr + (uint64_t)(fde->start - (const uint8_t *)b->data->d_buf);
	uint64_t len, alen;

	if (!read_encoded(&c, b->cie.enc, pc, true, lo) ||
	    !read_encoded(&c, b->cie.enc & 0x0f, 0, false, &len))
		return false;
	if (b->cie.z && (!cur_leb(&c, &alen, false) || !cur_skip(&c, alen)))
		return false;
	if (!len || *lo + len < *lo)
		return false;
	*hi = *lo + len;
	*insns = c;
	return true;
}

/* The executable segment holding address lo, or NULL. */
static const struct seg *find_seg(const struct builder *b, uint64_t lo)
{
	for (size_t i = 0; i < b->nsegs; i++)
		if (b->segs[i].vaddr <= lo && lo < b->segs[i].end)
			return &b->segs[i];
	return NULL;
}

/* ---- Rules ---- */

/* Whether a register rule is "saved at CFA + *off". */
static bool saved_at_cfa(const Dwarf_Op *ops, size_t nops, int64_t *off)
{
	if (nops < 1 || nops > 2 || !ops || ops[0].atom != DW_OP_call_frame_cfa)
		return false;
	if (nops == 2 && ops[1].atom != DW_OP_plus_uconst)
		return false;
	*off = nops == 2 ? (int64_t)ops[1].number : 0;
	return true;
}

/* N of the CFA expression of a PLT stub, "rsp + 8, plus 8 where (rip & 15)
 * >= N" (as binutils writes it), or -1. */
static int match_plt(const Dwarf_Op *ops, size_t nops)
{
	static const uint8_t atoms[9] = {DW_OP_breg7, DW_OP_breg16, DW_OP_lit15,
					 DW_OP_and,   DW_OP_lit0,   DW_OP_ge,
					 DW_OP_lit3,  DW_OP_shl,    DW_OP_plus};

	if (nops != 9 || ops[0].number != 8 || ops[1].number != 0)
		return -1;
	for (size_t i = 0; i < 9; i++)
		if (i != 4 && ops[i].atom != atoms[i])
			return -1;
	if (ops[4].atom < DW_OP_lit0 || ops[4].atom > DW_OP_lit15)
		return -1;
	return ops[4].atom - DW_OP_lit0;
}

/* The CFA rule into row (kind and cfa); false if we can't express it. */
static bool cfa_rule(struct builder *b, Dwarf_Frame *fr, struct unw_row *row)
{
	Dwarf_Op *ops;
	size_t nops;
	uint64_t reg;
	int64_t off;
	int n;

	if (dwarf_frame_cfa(fr, &ops, &nops) || !nops)
		return false;
	if (nops == 1 && ops[0].atom == DW_OP_bregx) {
		reg = ops[0].number;
		off = (int64_t)ops[0].number2;
	} else if (nops == 1 && ops[0].atom >= DW_OP_breg0 && ops[0].atom <= DW_OP_breg31) {
		reg = ops[0].atom - DW_OP_breg0;
		off = (int64_t)ops[0].number;
	} else if (nops == 2 && ops[0].atom == DW_OP_breg6 && ops[1].atom == DW_OP_deref) {
		/* A realigned frame: the CFA was saved below rbp (gcc's
		 * DRAP, as `rbp - 16, deref`). */
		off = (int64_t)ops[0].number;
		if (off % 8 || off / 8 < INT16_MIN || off / 8 > INT16_MAX)
			return false;
		row->kind = UNW_CFA_DEREF_RBP;
		row->cfa = (int16_t)(off / 8);
		return true;
	} else {
		n = match_plt(ops, nops);
		if (n < 0)
			return false;
		row->kind = UNW_PLT;
		row->cfa = (int16_t)n;
		b->st->plt++;
		return true;
	}
	if (reg != REG_RSP && reg != REG_RBP)
		return false;
	if (off % 8 || off / 8 < INT16_MIN || off / 8 > INT16_MAX) {
		b->st->cfa_not_multiple_of_8 += off % 8 != 0;
		return false;
	}
	row->kind = reg == REG_RSP ? UNW_CFA_RSP : UNW_CFA_RBP;
	row->cfa = (int16_t)(off / 8);
	return true;
}

/* The rbp rule: saved at CFA + 8*rbp, or 0 (kept, or a rule we can't
 * express, counted). */
static int8_t rbp_rule(struct builder *b, Dwarf_Frame *fr)
{
	Dwarf_Op mem[3], *ops;
	size_t nops;
	int64_t off;

	if (dwarf_frame_register(fr, REG_RBP, mem, &ops, &nops))
		goto other;
	if (!nops)
		return 0; /* same value, or undefined: nothing to restore */
	if (saved_at_cfa(ops, nops, &off) && off && off % 8 == 0 && off / 8 >= INT8_MIN &&
	    off / 8 <= INT8_MAX)
		return (int8_t)(off / 8);
other:
	b->st->rbp_other++;
	return 0;
}

/* The rbp rule of a realigned frame, "saved at rbp + 8*n" (an expression
 * `breg6 N`, which libdw gives after the CFA its evaluation starts with):
 * n into *out; false for another. */
static bool drap_rbp_rule(Dwarf_Frame *fr, int8_t *out)
{
	Dwarf_Op mem[3], *ops;
	size_t nops;
	int64_t off;

	if (dwarf_frame_register(fr, REG_RBP, mem, &ops, &nops) || !nops || !ops)
		return false;
	if (nops == 2 && ops[0].atom == DW_OP_call_frame_cfa) {
		ops++;
		nops--;
	}
	if (nops != 1 || ops[0].atom != DW_OP_breg6)
		return false;
	off = (int64_t)ops[0].number;
	if (off % 8 || off / 8 < INT8_MIN || off / 8 > INT8_MAX)
		return false;
	*out = (int8_t)(off / 8);
	return true;
}

/* The row kind and fields of the rule libdw found in frame fr. */
static void classify(struct builder *b, Dwarf_Frame *fr, bool signalp, struct unw_row *row)
{
	Dwarf_Op mem[3], *ops = NULL;
	size_t nops = 0;
	int64_t off;
	int err;

	memset(row, 0, sizeof(*row));
	if (signalp) {
		row->kind = UNW_SIGNAL;
		b->st->signal++;
		return;
	}
	err = dwarf_frame_register(fr, REG_RA, mem, &ops, &nops);
	if (!err && !nops && ops == mem) {
		row->kind = UNW_STOP;
		b->st->stop++;
		return;
	}
	/* Every other kind finds the return address at CFA - 8. */
	if (err || !saved_at_cfa(ops, nops, &off) || off != -8 || !cfa_rule(b, fr, row)) {
		row->kind = UNW_INVALID;
		row->cfa = 0;
		b->st->invalid_rules++;
		return;
	}
	if (row->kind == UNW_CFA_DEREF_RBP) {
		if (!drap_rbp_rule(fr, &row->rbp)) {
			memset(row, 0, sizeof(*row));
			b->st->invalid_rules++;
			return;
		}
		b->st->drap++;
		return;
	}
	row->rbp = rbp_rule(b, fr);
}

/* ---- Ranges ---- */

static bool same_rule(const struct unw_row *a, const struct unw_row *b)
{
	return a->kind == b->kind && a->rbp == b->rbp && a->cfa == b->cfa;
}

/* Appends the rule row over file offsets [start, end), merged with the
 * FDE's previous range when it continues it with the same rule. */
static int add_range(struct builder *b, uint32_t start, uint32_t end, const struct unw_row *row)
{
	struct range *last = b->nranges ? &b->ranges[b->nranges - 1] : NULL;

	if (b->nranges > b->fde_first && last->end == start && same_rule(&last->row, row)) {
		last->end = end;
		return 0;
	}
	if (b->nranges >= b->max_ranges)
		return set_err(b, -E2BIG, "more than %zu rows", b->max_rows);
	if (array_grow((void **)&b->ranges, &b->cap, b->nranges + 1, sizeof(*b->ranges)))
		return set_err(b, -ENOMEM, "out of memory for %zu rows", b->nranges + 1);
	b->ranges[b->nranges] = (struct range){end, *row};
	b->ranges[b->nranges].row.off = start;
	b->nranges++;
	b->st->rows_raw++;
	return 0;
}

/* Evaluates the rows of FDE job j. Stops early (counted) at
 * UNW_MAX_FDE_ROWS rows, when the file's work runs out, or when libdw fails
 * or does not advance. */
static int eval_fde(struct builder *b, const struct fde_job *j)
{
	const struct seg *s = &b->segs[j->seg];
	uint64_t addr = j->lo, lo = j->lo, hi = j->hi, cost = j->cost;
	size_t steps = 0;
	bool cut = false;

	b->fde_first = b->nranges;
	while (addr < hi) {
		Dwarf_Frame *fr;
		Dwarf_Addr start, end;
		bool signalp;
		struct unw_row row;
		int err;

		if (steps == UNW_MAX_FDE_ROWS || b->work_left < cost) {
			b->out_of_work |= steps < UNW_MAX_FDE_ROWS;
			b->st->fdes_truncated++;
			cut = true;
			break;
		}
		b->work_left -= cost;
		b->st->work += cost;
		steps++;
		b->st->steps++;
		if (dwarf_cfi_addrframe(b->cfi, addr, &fr))
			break;
		if (dwarf_frame_info(fr, &start, &end, &signalp) < 0 || start > addr ||
		    end <= addr) {
			free(fr);
			break;
		}
		classify(b, fr, signalp, &row);
		free(fr);
		end = end < hi ? end : hi;
		err = add_range(b, (uint32_t)(addr - s->vaddr + s->offset),
				(uint32_t)(end - s->vaddr + s->offset), &row);
		if (err)
			return err;
		addr = end;
	}
	if (addr > lo)
		b->st->fdes_used++;
	else if (!cut)
		b->st->fdes_skipped++;
	return 0;
}

/* Decodes one FDE into a job for eval_fde(): 0, or a negative errno that
 * ends the build (E2BIG, ENOMEM); FDEs that can't be read are counted and
 * left. */
static int read_fde(struct builder *b, const Dwarf_FDE *fde)
{
	uint64_t lo, hi, rows;
	struct cur insns;
	struct insn_scan sc;
	const struct seg *s;
	struct fde_job *j;

	b->st->fdes++;
	load_cie(b, fde->CIE_pointer);
	if (!b->cie.ok || !decode_fde(b, fde, &lo, &hi, &insns) ||
	    !scan_insns(insns, b->cie.enc, &sc)) {
		b->st->fdes_skipped++;
		return 0;
	}
	s = find_seg(b, lo);
	if (!s) {
		b->st->fdes_skipped++;
		return 0;
	}
	hi = hi < s->end ? hi : s->end;
	if (hi - s->vaddr + s->offset > UINT32_MAX) {
		b->st->off_overflow++;
		return 0;
	}
	/* Each job gives a range at least. */
	if (b->njobs >= b->max_ranges)
		return set_err(b, -E2BIG, "more than %zu rows", b->max_rows);
	if (array_grow((void **)&b->jobs, &b->jobs_cap, b->njobs + 1, sizeof(*b->jobs)))
		return set_err(b, -ENOMEM, "out of memory for %zu FDEs", b->njobs + 1);
	j = &b->jobs[b->njobs++];
	j->lo = lo;
	j->hi = hi;
	j->seg = (size_t)(s - b->segs);
	j->cost = WORK_PER_STEP + b->cie.cost + sc.cost;
	rows = sc.advances < UNW_MAX_FDE_ROWS ? sc.advances + 1 : UNW_MAX_FDE_ROWS;
	j->total = j->cost * rows;
	return 0;
}

static int cmp_job(const void *pa, const void *pb)
{
	const struct fde_job *a = pa, *b = pb;

	if (a->total != b->total)
		return a->total < b->total ? -1 : 1;
	if (a->lo != b->lo)
		return a->lo < b->lo ? -1 : 1;
	return a->hi < b->hi ? -1 : a->hi > b->hi;
}

/* Evaluates the FDEs read, the cheapest first: when the work bound is
 * reached, only the longest FDEs are left out. */
static int eval_fdes(struct builder *b)
{
	int err;

	if (b->njobs)
		qsort(b->jobs, b->njobs, sizeof(*b->jobs), cmp_job);
	for (size_t i = 0; i < b->njobs; i++) {
		if (b->out_of_work) {
			b->st->fdes_truncated++;
			continue;
		}
		err = eval_fde(b, &b->jobs[i]);
		if (err)
			return err;
	}
	return 0;
}

/* Reads every FDE of b->data. */
static int read_fdes(struct builder *b)
{
	Dwarf_Off off = 0, next;
	Dwarf_CFI_Entry e;
	int r, err;

	for (;;) {
		next = off;
		r = dwarf_next_cfi(b->ident, b->data, b->eh, off, &next, &e);
		if (r > 0)
			return 0;
		if (r < 0) {
			b->st->bad_entries++;
			if (next == (Dwarf_Off)-1 || next <= off)
				return 0; /* nowhere safe to go on from */
		} else if (!dwarf_cfi_cie_p(&e)) {
			err = read_fde(b, &e.fde);
			if (err)
				return err;
		}
		off = next;
	}
}

/* FDEs in a CFI section: how much of the code it describes. */
static size_t count_fdes(const unsigned char *ident, Elf_Data *data, bool eh)
{
	Dwarf_Off off = 0, next;
	Dwarf_CFI_Entry e;
	size_t n = 0;
	int r;

	for (;;) {
		next = off;
		r = dwarf_next_cfi(ident, data, eh, off, &next, &e);
		if (r > 0 || (r < 0 && (next == (Dwarf_Off)-1 || next <= off)))
			return n;
		n += r == 0 && !dwarf_cfi_cie_p(&e);
		off = next;
	}
}

/* ---- Rows ---- */

static int cmp_range(const void *pa, const void *pb)
{
	const struct range *a = pa, *b = pb;

	if (a->row.off != b->row.off)
		return a->row.off < b->row.off ? -1 : 1;
	if (a->end != b->end)
		return a->end < b->end ? -1 : 1;
	if (a->row.kind != b->row.kind)
		return a->row.kind < b->row.kind ? -1 : 1;
	if (a->row.rbp != b->row.rbp)
		return a->row.rbp < b->row.rbp ? -1 : 1;
	return a->row.cfa < b->row.cfa ? -1 : a->row.cfa > b->row.cfa;
}

/* Appends row to t unless it repeats the rule of the row before; with
 * t->rows NULL, only counts it (t->rows[t->n - 1] is then *last). */
static int emit_row(struct builder *b, struct unw_table *t, struct unw_row *last,
		    const struct unw_row *row)
{
	if (t->n && same_rule(last, row))
		return 0;
	if (t->n >= b->max_rows)
		return set_err(b, -E2BIG, "more than %zu rows", b->max_rows);
	if (t->rows)
		t->rows[t->n] = *row;
	t->n++;
	*last = *row;
	return 0;
}

/* The rows of the sorted ranges into t, or (t->rows NULL) their count. */
static int walk_ranges(struct builder *b, struct unw_table *t)
{
	struct unw_row last = {0};
	int err;

	for (size_t i = 0; i < b->nranges; i++) {
		const struct range *r = &b->ranges[i];
		uint64_t next = i + 1 < b->nranges ? b->ranges[i + 1].row.off : UINT64_MAX;

		if (next == r->row.off)
			continue;
		err = emit_row(b, t, &last, &r->row);
		if (!err && r->end < next)
			err = emit_row(b, t, &last, &(struct unw_row){.off = r->end});
		if (err)
			return err;
	}
	return 0;
}

/* Sorts the ranges and writes them as rows: where ranges overlap, the one
 * starting later wins (at the same start, the last in cmp_range()'s order),
 * and the end of a range before a gap gets an UNW_INVALID row. The rows are
 * counted first and allocated once: libtorch_cpu.so's are 11 MB. */
static int ranges_to_rows(struct builder *b, struct unw_table *t)
{
	size_t n;
	int err;

	if (b->nranges)
		qsort(b->ranges, b->nranges, sizeof(*b->ranges), cmp_range);
	err = walk_ranges(b, t);
	if (err || !t->n)
		return err;
	n = t->n;
	t->rows = malloc(n * sizeof(*t->rows));
	if (!t->rows)
		return set_err(b, -ENOMEM, "out of memory for %zu rows", n);
	t->n = 0;
	return walk_ranges(b, t);
}

/* ---- Sections and segments ---- */

/* The executable PT_LOAD segments of the file (the first MAX_SEGS). */
static void load_segments(struct builder *b)
{
	size_t n;
	GElf_Phdr ph;

	if (elf_getphdrnum(b->elf, &n))
		return;
	for (size_t i = 0; i < n && b->nsegs < MAX_SEGS; i++) {
		if (!gelf_getphdr(b->elf, (int)i, &ph) || ph.p_type != PT_LOAD ||
		    !(ph.p_flags & PF_X) || !ph.p_filesz || ph.p_vaddr + ph.p_filesz < ph.p_vaddr ||
		    ph.p_offset + ph.p_filesz < ph.p_offset)
			continue;
		b->segs[b->nsegs++] =
			(struct seg){ph.p_vaddr, ph.p_vaddr + ph.p_filesz, ph.p_offset};
	}
}

/* The section called name with contents in the file, or NULL. */
static Elf_Scn *find_section(Elf *elf, const char *name, GElf_Shdr *sh)
{
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	const char *s;

	if (elf_getshdrstrndx(elf, &shstrndx))
		return NULL;
	while ((scn = elf_nextscn(elf, scn))) {
		if (!gelf_getshdr(scn, sh) || sh->sh_type == SHT_NOBITS)
			continue;
		s = elf_strptr(elf, shstrndx, sh->sh_name);
		if (s && !strcmp(s, name))
			return scn;
	}
	return NULL;
}

/* Whether .debug_frame, compressed or not, inflates to a size we read. */
static bool debug_frame_size_ok(Elf_Scn *scn, const GElf_Shdr *sh)
{
	GElf_Chdr ch;

	if (sh->sh_size > UNW_MAX_SECTION)
		return false;
	if (!(sh->sh_flags & SHF_COMPRESSED))
		return true;
	return gelf_getchdr(scn, &ch) && ch.ch_size <= UNW_MAX_SECTION &&
	       ch.ch_size / MAX_INFLATE <= sh->sh_size;
}

static void debug_frame_close(struct dbg_frame *d)
{
	if (d->dw)
		dwarf_end(d->dw);
	if (d->elf)
		elf_end(d->elf);
	free(d->image);
	memset(d, 0, sizeof(*d));
}

/* A new ELF image (malloc()ed, *size bytes) of the header eh and one
 * section, .debug_frame, of header sh and bytes raw; NULL on ENOMEM. */
static char *debug_frame_image(const GElf_Ehdr *eh, const GElf_Shdr *sh, const Elf_Data *raw,
			       size_t *size)
{
	static const char names[] = "\0.debug_frame\0.shstrtab";
	size_t data_off = sizeof(Elf64_Ehdr), str_off = data_off + raw->d_size;
	size_t sh_off = (str_off + sizeof(names) + 7) & ~(size_t)7;
	char *image;
	Elf64_Ehdr *h;
	Elf64_Shdr *s;

	*size = sh_off + 3 * sizeof(*s);
	image = calloc(1, *size);
	if (!image)
		return NULL;
	h = (Elf64_Ehdr *)image;
	memcpy(h->e_ident, eh->e_ident, EI_NIDENT);
	h->e_type = eh->e_type;
	h->e_machine = eh->e_machine; /* libdw's default rules are the machine's */
	h->e_version = EV_CURRENT;
	h->e_shoff = sh_off;
	h->e_ehsize = sizeof(*h);
	h->e_shentsize = sizeof(*s);
	h->e_shnum = 3;
	h->e_shstrndx = 2;
	memcpy(image + data_off, raw->d_buf, raw->d_size);
	memcpy(image + str_off, names, sizeof(names));
	s = (Elf64_Shdr *)(image + sh_off);
	s[1] = (Elf64_Shdr){.sh_name = 1,
			    .sh_type = SHT_PROGBITS,
			    .sh_flags = sh->sh_flags & SHF_COMPRESSED,
			    .sh_offset = data_off,
			    .sh_size = raw->d_size,
			    .sh_addralign = 8};
	s[2] = (Elf64_Shdr){.sh_name = 14,
			    .sh_type = SHT_STRTAB,
			    .sh_offset = str_off,
			    .sh_size = sizeof(names),
			    .sh_addralign = 1};
	return image;
}

/* Copies section scn (its header sh) of elf into an ELF image holding it
 * alone as .debug_frame, and opens libdw over it: dwarf_begin_elf() on the
 * whole file would read and inflate every debug section. */
static int debug_frame_open(Elf *elf, Elf_Scn *scn, const GElf_Shdr *sh, struct dbg_frame *d)
{
	Elf_Data *raw = elf_rawdata(scn, NULL);
	GElf_Ehdr eh;
	size_t size;

	memset(d, 0, sizeof(*d));
	if (!raw || !raw->d_buf || !gelf_getehdr(elf, &eh))
		return -EINVAL;
	d->image = debug_frame_image(&eh, sh, raw, &size);
	if (!d->image)
		return -ENOMEM;
	d->elf = elf_memory(d->image, size);
	d->dw = d->elf ? dwarf_begin_elf(d->elf, DWARF_C_READ, NULL) : NULL;
	/* dwarf_begin_elf() has inflated the section: this is its data now. */
	d->data = d->dw ? elf_getdata(elf_getscn(d->elf, 1), NULL) : NULL;
	if (!d->data || !d->data->d_buf) {
		debug_frame_close(d);
		return -EINVAL;
	}
	return 0;
}

/* ---- The build ---- */

/* Opens .eh_frame (eh_data, its header eh_sh) and, if present and sound,
 * .debug_frame (dbg), and picks the one describing clearly more FDEs. */
static int pick_source(struct builder *b, struct dbg_frame *dbg)
{
	GElf_Shdr eh_sh, dbg_sh;
	Elf_Scn *eh_scn = find_section(b->elf, ".eh_frame", &eh_sh);
	Elf_Scn *dbg_scn = find_section(b->elf, ".debug_frame", &dbg_sh);
	Elf_Data *eh_data = NULL;
	size_t eh_n = 0, dbg_n = 0;

	if (eh_scn && eh_sh.sh_size <= UNW_MAX_SECTION && (eh_data = elf_getdata(eh_scn, NULL)) &&
	    eh_data->d_buf)
		eh_n = count_fdes(b->ident, eh_data, true);
	if (dbg_scn && debug_frame_size_ok(dbg_scn, &dbg_sh) &&
	    !debug_frame_open(b->elf, dbg_scn, &dbg_sh, dbg))
		dbg_n = count_fdes(b->ident, dbg->data, false);
	if (!eh_n && !dbg_n)
		return set_err(b, -ENODATA,
			       "no FDE in .eh_frame or .debug_frame -- built without unwind "
			       "tables (Go, -fno-asynchronous-unwind-tables), or stripped?");
	if (dbg_n > eh_n + eh_n / 4) {
		b->st->source = UNW_SRC_DEBUG_FRAME;
		b->st->fdes_other = eh_n;
		b->data = dbg->data;
		b->eh = false;
		b->cfi = dwarf_getcfi(dbg->dw);
	} else {
		b->st->source = UNW_SRC_EH_FRAME;
		b->st->fdes_other = dbg_n;
		b->data = eh_data;
		b->eh = true;
		b->sec_vaddr = eh_sh.sh_addr;
		b->cfi = dwarf_getcfi_elf(b->elf);
	}
	if (!b->cfi)
		return set_err(b, -EINVAL, "libdw can't read %s: %s",
			       b->eh ? ".eh_frame" : ".debug_frame", dwarf_errmsg(-1));
	return 0;
}

/* Checks that elf is an x86-64 ELF file and reads its segments. */
static int check_elf(struct builder *b)
{
	GElf_Ehdr eh;

	if (elf_kind(b->elf) != ELF_K_ELF || !gelf_getehdr(b->elf, &eh))
		return set_err(b, -ENOEXEC, "not an ELF file");
	if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
	    eh.e_machine != EM_X86_64)
		return set_err(b, -ENOEXEC, "not an x86-64 ELF file (machine %u)", eh.e_machine);
	b->ident = (const unsigned char *)elf_getident(b->elf, NULL);
	load_segments(b);
	if (!b->nsegs)
		return set_err(b, -ENODATA, "no executable segment");
	return 0;
}

/* What a partial table left out, in err; empty if nothing. */
static void note_partial(struct builder *b)
{
	const struct unw_table_stats *st = b->st;

	if (!b->errlen)
		return;
	b->err[0] = '\0';
	if (st->fdes_skipped || st->fdes_truncated || st->bad_entries || st->off_overflow)
		set_err(b, 0,
			"partial table: of %zu FDEs %zu skipped, %zu cut short%s, %zu past 4 GiB; "
			"%zu unreadable entries",
			st->fdes, st->fdes_skipped, st->fdes_truncated,
			b->out_of_work ? " (work bound reached)" : "", st->off_overflow,
			st->bad_entries);
}

int unw_table__build_elf(Elf *elf, size_t max_rows, struct unw_table *t, char *err, size_t errlen)
{
	struct builder b = {
		.elf = elf, .max_rows = max_rows, .st = &t->st, .err = err, .errlen = errlen};
	struct dbg_frame dbg = {0};
	uint64_t t0 = mono_ns();
	int ret;

	memset(t, 0, sizeof(*t));
	if (errlen)
		err[0] = '\0';
	b.max_ranges = max_rows > SIZE_MAX / 2 ? SIZE_MAX : 2 * max_rows;
	b.cie.off = (Dwarf_Off)-1;
	ret = check_elf(&b);
	if (!ret)
		ret = pick_source(&b, &dbg);
	if (!ret) {
		b.work_left = UNW_WORK_BASE + UNW_WORK_PER_BYTE * (uint64_t)b.data->d_size;
		ret = read_fdes(&b);
	}
	if (!ret)
		ret = eval_fdes(&b);
	/* What the rules were read with goes before the rows are made: at
	 * libtorch_cpu.so's size, libdw's caches and the FDE list are 25 MB. */
	if (b.eh && b.cfi)
		dwarf_cfi_end(b.cfi);
	b.cfi = NULL;
	debug_frame_close(&dbg);
	free(b.jobs);
	b.jobs = NULL;
	if (!ret && b.nranges && b.cap > b.nranges) {
		struct range *fit = realloc(b.ranges, b.nranges * sizeof(*b.ranges));

		if (fit) {
			b.ranges = fit;
			b.cap = b.nranges;
		}
	}
	if (!ret)
		ret = ranges_to_rows(&b, t);
	free(b.ranges);
	if (ret) {
		unw_table__free(t);
		return ret;
	}
	t->st.rows = t->n;
	t->st.build_ns = mono_ns() - t0;
	note_partial(&b);
	return 0;
}

int unw_table__build_file(const char *path, size_t max_rows, struct unw_table *t, char *err,
			  size_t errlen)
{
	char why[256];
	Elf *elf;
	int fd, ret;

	memset(t, 0, sizeof(*t));
	if (elf_version(EV_CURRENT) == EV_NONE) {
		snprintf(err, errlen, "can't initialize libelf: %s", elf_errmsg(-1));
		return -EINVAL;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		snprintf(err, errlen, "can't open %s: %s", path, strerror(-ret));
		return ret;
	}
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (!elf) {
		snprintf(err, errlen, "can't read %s: %s", path, elf_errmsg(-1));
		close(fd);
		return -ENOEXEC;
	}
	ret = unw_table__build_elf(elf, max_rows, t, why, sizeof(why));
	if (ret)
		snprintf(err, errlen, "can't build the unwind table of %s: %s", path, why);
	else if (why[0])
		snprintf(err, errlen, "%s: %s", path, why);
	else if (errlen)
		err[0] = '\0';
	elf_end(elf);
	close(fd);
	return ret;
}

void unw_table__free(struct unw_table *t)
{
	if (!t)
		return;
	free(t->rows);
	memset(t, 0, sizeof(*t));
}

const struct unw_row *unw_table__lookup(const struct unw_table *t, uint32_t off)
{
	size_t i = PARTITION_POINT(t->n, i, t->rows[i].off <= off);

	return i ? &t->rows[i - 1] : NULL;
}
