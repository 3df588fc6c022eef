/* table.h: the unwind table of one ELF file, as the BPF unwinder reads it
 * (bpf/unwind_abi.h): rows keyed by file offset, sorted, each holding until
 * the next. Built from the file's .eh_frame, or its .debug_frame where that
 * describes clearly more functions, by libdw's CFI evaluator; the agent
 * builds one per executable file it unwinds and copies it into a BPF map.
 * The file is distrusted: its size, rows and the work spent on it are
 * bounded, and a malformed file gives an error or a partial table, never a
 * crash. x86-64 ELF files only. */
#ifndef SONDE_UNWIND_TABLE_H
#define SONDE_UNWIND_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include <libelf.h>

#include "unwind_abi.h"

/* Which section a table was built from. */
enum unw_source { UNW_SRC_NONE, UNW_SRC_EH_FRAME, UNW_SRC_DEBUG_FRAME };

/* Rows evaluated in one FDE at most (its rest is UNW_INVALID): libdw
 * evaluates an FDE from its start for every row, so a long one costs the
 * square of its rows. The longest seen in Debian's binaries has 7000
 * (gcc's cc1, libspatialite). */
#define UNW_MAX_FDE_ROWS 8192
/* Work libdw may do for one file, in units of one CFA instruction byte
 * interpreted (0.3 ns on the machine that measured it, a row evaluated
 * costing 1536 more): UNW_WORK_BASE plus UNW_WORK_PER_BYTE per byte of the
 * CFI section -- real files take 100 to 250 per byte, so a 10 MB section
 * may take 2 s at most. FDEs are evaluated the cheapest first: past the
 * bound, the longest are cut. */
#define UNW_WORK_PER_BYTE 512
#define UNW_WORK_BASE (1ull << 30)
/* Largest CFI section read (after decompression). */
#define UNW_MAX_SECTION (256u << 20)

/* What a build saw. Rule counts are per rule evaluated, before merging. */
struct unw_table_stats {
	int source;		      /* enum unw_source */
	size_t fdes;		      /* FDEs in the section read */
	size_t fdes_other;	      /* in the other section (.debug_frame or .eh_frame) */
	size_t fdes_used;	      /* FDEs that gave rows */
	size_t fdes_skipped;	      /* undecodable, unsafe, outside code, refused by libdw */
	size_t fdes_truncated;	      /* cut at UNW_MAX_FDE_ROWS or by the work bound */
	size_t bad_entries;	      /* CIE/FDE entries libdw could not read */
	size_t off_overflow;	      /* FDEs past a 32-bit file offset */
	size_t steps;		      /* rules evaluated (dwarf_cfi_addrframe calls) */
	size_t rows_raw;	      /* address ranges of one rule, before sorting */
	size_t rows;		      /* rows of the table */
	size_t invalid_rules;	      /* rules we can't express, made UNW_INVALID */
	size_t plt, signal, stop;     /* rules of those kinds */
	size_t drap;		      /* realigned frames' rules (UNW_CFA_DEREF_RBP) */
	size_t cfa_not_multiple_of_8; /* of the invalid rules */
	size_t rbp_other;	      /* rbp rules other than saved at CFA+8n: 0 */
	uint64_t work;		      /* work done, in the units of UNW_WORK_BASE */
	uint64_t build_ns;	      /* time the build took */
};

struct unw_table {
	struct unw_row *rows; /* sorted by strictly increasing off */
	size_t n;
	struct unw_table_stats st;
};

/* Builds the table of the ELF file at path into *t (which it overwrites;
 * free it with unw_table__free()). At most max_rows rows, and twice that
 * many ranges read before they are merged (12 bytes each) and FDEs (40
 * bytes each): -E2BIG past them. Returns 0 or a negative errno (open()'s,
 * -ENOEXEC: not an x86-64 ELF file, -ENODATA: no CFI, -E2BIG, -ENOMEM,
 * -EINVAL: CFI libdw refuses), with a one-line reason in err; on success
 * err is empty, or says what was left out of a partial table (FDEs
 * skipped or cut short). */
int unw_table__build_file(const char *path, size_t max_rows, struct unw_table *t, char *err,
			  size_t errlen);
/* The same from an open libelf descriptor (the caller's, e.g. over
 * elf_memory()), which it reads but does not end. */
int unw_table__build_elf(Elf *elf, size_t max_rows, struct unw_table *t, char *err, size_t errlen);
/* Frees t's rows and zeroes it; a zeroed table is a no-op. */
void unw_table__free(struct unw_table *t);
/* The row whose range holds file offset off (the last at or below it), or
 * NULL below the first row. Borrowed from t, valid until it is freed. */
const struct unw_row *unw_table__lookup(const struct unw_table *t, uint32_t off);

#endif
