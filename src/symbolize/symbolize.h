/* symbolize.h: turns the raw addresses of a stack into names.
 *
 * User addresses are resolved through the process's mappings
 * (/proc/PID/maps, so ASLR and PIE work) to an ELF object, then through its
 * .symtab and .dynsym (a stripped binary keeps its dynamic symbols), or a
 * debug file found by build-id under /usr/lib/debug/.build-id. Anonymous
 * executable memory is looked up in /tmp/perf-PID.map (JIT frames). Kernel
 * addresses are resolved through /proc/kallsyms.
 *
 * ELF objects are cached by build-id (falling back to device+inode), so the
 * same library mapped by 100 processes is read once. A process is captured
 * by symbolizer__track_pid() when first seen -- its mappings and the symbol
 * tables of its objects are read then -- so it can still be symbolized after
 * it exits. Used by `sonde record`, `sonde top` and the agent. Not thread-safe. */
#ifndef SONDE_SYMBOLIZE_SYMBOLIZE_H
#define SONDE_SYMBOLIZE_SYMBOLIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct symbolizer;

struct sym_info {
	const char *func;     /* symbol name, demangled; NULL when unknown */
	const char *module;   /* path, "[kernel.kallsyms]", "[vdso]", "[jit]"; NULL: unmapped */
	const char *build_id; /* lowercase hex, NULL if the object has none */
	uint64_t offset;      /* address in the module's ELF address space (st_value space),
			       * or the raw address when there is no module */
	uint64_t map_start, map_limit, map_pgoff; /* the mapping, 0 if none */
	bool kernel;
};

struct symbolizer *symbolizer__new(void);
void symbolizer__free(struct symbolizer *s);

/* Sets the directory searched for debug files by build-id
 * (DIR/.build-id/xx/rest.debug) when an object has no .symtab; the default
 * is /usr/lib/debug, NULL disables the search. Applies to objects loaded
 * afterwards. dir is copied. */
void symbolizer__set_debug_dir(struct symbolizer *s, const char *dir);

/* Captures pid's mappings and loads the symbol tables of the objects it maps
 * (once per object). Calling it again for a known pid is cheap and re-reads
 * the mappings only when refresh is true. Returns 0, -ESRCH if the process
 * is gone and was never seen, or another negative errno. */
int symbolizer__track_pid(struct symbolizer *s, uint32_t pid, bool refresh);

/* Drops what is kept for pid (objects stay cached). */
void symbolizer__forget_pid(struct symbolizer *s, uint32_t pid);
/* Drops what is kept for every process that has exited (no /proc/PID, or
 * found gone by a re-read), for a long-running agent once the profiles that
 * needed them are written. Returns how many. */
size_t symbolizer__forget_exited(struct symbolizer *s);

/* Resolves a user-space address of pid. Always fills out (func NULL when the
 * address can't be named) and returns 0; the strings live until
 * symbolizer__free(). An address outside every known mapping of a live
 * process makes the mappings be re-read once (a library dlopen()ed since). */
int symbolizer__resolve_user(struct symbolizer *s, uint32_t pid, uint64_t addr,
			     struct sym_info *out);

/* Resolves a kernel address through /proc/kallsyms (read on first use). */
int symbolizer__resolve_kernel(struct symbolizer *s, uint64_t addr, struct sym_info *out);

/* Writes the display name of a resolved address into buf: the function name,
 * else "basename(module)+0xOFFSET", else "[unknown]+0xADDR". Returns buf. */
const char *sym_info__name(const struct sym_info *info, char *buf, size_t size);

/* The demangled form of an Itanium C++ name ("_Z..."), malloc()ed, or NULL
 * when name is not one. */
char *sym_demangle(const char *name);

/* Counters, for the agent's health metrics and tests. */
struct symbolizer_stats {
	uint64_t objects_loaded; /* ELF objects parsed (cache misses) */
	uint64_t object_hits;	 /* mappings served from the object cache */
	uint64_t pids_tracked;
	uint64_t maps_reads; /* /proc/PID/maps reads */
};
void symbolizer__stats(const struct symbolizer *s, struct symbolizer_stats *out);

#endif
