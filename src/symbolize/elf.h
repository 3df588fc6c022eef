/* elf.h: the one ELF symbol reader (elf.c, elf_find.c), as the rooms above
 * symbolize/ use it. The symbolizer reads every function of a file to name
 * addresses (symbolize_internal.h: struct elf_object); the GPU probes
 * (src/probe/libscan.h) and the Python inspector (src/python/inspect.c)
 * look functions and data up by name, to attach uprobes at their file
 * offsets or read the interpreter's state at their addresses. Both walk
 * the symbol tables with elf_each_sym(). The file is distrusted: libelf
 * bounds every read by the file's size, the sizes read are bounded, and the
 * file is read, never mapped, so a truncated file fails cleanly. */
#ifndef SONDE_SYMBOLIZE_ELF_H
#define SONDE_SYMBOLIZE_ELF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <gelf.h>

/* One symbol of a table: idx is its index in the table (from 1), ver its
 * .gnu.version entry (0 when the table has none; bit 15 set: hidden). Its
 * name is elf_strptr(elf, sh->sh_link, sym->st_name). */
typedef int (*elf_sym_fn)(void *ctx, Elf *elf, const GElf_Shdr *sh, size_t idx, const GElf_Sym *sym,
			  GElf_Versym ver);

/* Calls fn for each symbol of elf's symbol tables of type sh_type
 * (SHT_SYMTAB or SHT_DYNSYM) until fn returns non-zero, which is then
 * returned; 0 at the end. A table too large, of odd-sized entries or
 * unreadable is skipped, with a warning naming the file name unless name
 * is NULL. *found (if not NULL) tells whether a table was read. */
int elf_each_sym(Elf *elf, const char *name, Elf64_Word sh_type, elf_sym_fn fn, void *ctx,
		 bool *found);

/* Opens path as an ELF file to read: its Elf, and in *fd the descriptor it
 * reads (the caller ends both: elf_end(), close()). NULL with errno set
 * (*fd -1): EINVAL when libelf can't start, the open's errno, ENOEXEC for
 * a file that is not ELF. */
Elf *elf_open_path(const char *path, int *fd);

/* What elf_find_syms() looks up (a bitmask). */
#define ELF_FIND_SYMTAB 0x1u  /* .symtab too, not only .dynsym */
#define ELF_FIND_OBJECTS 0x2u /* data objects too, not only functions */
#define ELF_FIND_VADDRS 0x4u  /* addresses, not file offsets */

/* Looks up names[0..n) in path's .dynsym, and in its .symtab with
 * ELF_FIND_SYMTAB (executables that link libraries statically). Versioned
 * names match their base name ("cudaMalloc@@libcudart.so.13" is
 * "cudaMalloc"); a default version beats a hidden one, then a global
 * binding a weak one, a weak one a local one (a runtime linked statically
 * keeps its functions as local symbols); undefined symbols, symbols at 0
 * and other types than functions (and data objects with ELF_FIND_OBJECTS)
 * never match. out[i] is names[i]'s file offset (its address converted
 * through the PT_LOAD segment that holds it in the file), or with
 * ELF_FIND_VADDRS its address (held by a segment in memory); 0 when absent
 * or outside every segment. Returns the number found or a negative errno
 * (-ENOEXEC: not an ELF file). */
int elf_find_syms(const char *path, const char *const *names, size_t n, uint64_t *out,
		  unsigned flags);

/* The program interpreter (PT_INTERP, "/lib64/ld-linux-x86-64.so.2") of
 * the executable path, into out. 0, -ENOENT for a static executable,
 * -ENOEXEC for a file that is not ELF or has a malformed one. */
int elf_read_interp(const char *path, char *out, size_t size);

#endif
