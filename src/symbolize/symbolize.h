/* symbolize.h: turns the raw addresses of a stack into names.
 *
 * User addresses are resolved through the process's mappings (so ASLR and
 * PIE work) to an ELF object, then through its .symtab and .dynsym (a
 * stripped binary keeps its dynamic symbols), or a debug file found by
 * build-id under /usr/lib/debug/.build-id. Anonymous executable memory is
 * looked up in /tmp/perf-PID.map (JIT frames). Kernel addresses are
 * resolved through /proc/kallsyms.
 *
 * The mappings come from the kernel as they are made: the sideband
 * (src/probe/sideband.c) reports every exec, fork and executable mmap with
 * the file's build-id, so a process born while it runs is known from its
 * first instruction, however short its life. A process that was already
 * running is read from /proc/PID/maps when first needed, and again on a
 * miss. Each exec starts a new image of the process; a stack names the code
 * of the image it was sampled in (symbolizer__image), even after the
 * process exec'ed again, exited, or its pid was reused.
 *
 * ELF objects are cached by build-id (falling back to device+inode), so the
 * same library mapped by 100 processes is read once, and only when one of
 * its addresses is first resolved. Used by `sonde record`, `sonde top` and
 * the agent. Not thread-safe. */
#ifndef SONDE_SYMBOLIZE_SYMBOLIZE_H
#define SONDE_SYMBOLIZE_SYMBOLIZE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct symbolizer;
struct elf_object;

struct sym_info {
	const char *func;     /* symbol name, demangled; NULL when unknown */
	const char *module;   /* path, "[kernel.kallsyms]", "[vdso]", "[jit]"; NULL: unmapped */
	const char *build_id; /* lowercase hex, NULL if the object has none */
	uint64_t offset;      /* address in the module's ELF address space (st_value space),
			       * or the raw address when there is no module */
	uint64_t map_start, map_limit, map_pgoff; /* the mapping, 0 if none */
	bool kernel;
	struct elf_object *obj; /* the ELF object offset is in, NULL if none (symbolizer__lines) */
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

/* ---- What the kernel reports (src/probe/sideband.c) ---- */

/* An executable mapping pid made at ts_ns. path is copied. */
struct sym_mmap {
	uint32_t pid;
	uint64_t ts_ns;
	uint64_t start, len, pgoff;
	const char *path;	 /* as the process names it; "//anon", "[vdso]" */
	const uint8_t *build_id; /* NULL, or build_id_len bytes */
	size_t build_id_len;
	uint64_t dev, ino; /* when the kernel gave them instead (0: unknown) */
};
void symbolizer__mmap(struct symbolizer *s, const struct sym_mmap *m);
/* pid exec'ed at ts_ns, now named comm (may be NULL): a new image, whose
 * mappings the kernel reports. */
void symbolizer__exec(struct symbolizer *s, uint32_t pid, uint64_t ts_ns, const char *comm);
/* pid renamed itself (prctl): its comm from now on. */
void symbolizer__rename(struct symbolizer *s, uint32_t pid, const char *comm);
/* ppid forked pid at ts_ns (threads are not forks). */
void symbolizer__fork(struct symbolizer *s, uint32_t ppid, uint32_t pid, uint64_t ts_ns);
/* pid exited at ts_ns: what is known of it is kept for the samples still
 * to be symbolized, until symbolizer__forget_exited(). */
void symbolizer__exit(struct symbolizer *s, uint32_t pid, uint64_t ts_ns);

/* The sideband: sync drains the kernel's records into s (it calls
 * symbolizer__set_horizon); symbolizer__image() calls it when asked about a
 * time past the horizon, so that a sample is never matched with an image
 * older than the exec it followed. */
typedef void (*symbolizer_sync_fn)(void *ctx);
void symbolizer__set_sync(struct symbolizer *s, symbolizer_sync_fn fn, void *ctx);
/* Every record of the kernel's up to ts_ns has been applied. */
void symbolizer__set_horizon(struct symbolizer *s, uint64_t ts_ns);

/* The image of pid that ran at ts_ns (CLOCK_MONOTONIC, as BPF timestamps):
 * a number for symbolizer__resolve_image, valid until the process is
 * forgotten. A pid never seen is tracked (its maps read) first. 0 when the
 * process can't be known (past the bounds). */
uint32_t symbolizer__image(struct symbolizer *s, uint32_t pid, uint64_t ts_ns);
/* As symbolizer__resolve_user, in a given image. */
int symbolizer__resolve_image(struct symbolizer *s, uint32_t image, uint64_t addr,
			      struct sym_info *out);
/* The mapping that holds addr in image: where it is, the file's (device,
 * inode) when the kernel gave them (dev 0 when it gave a build-id instead;
 * dev as userspace encodes it, makedev()), its path. */
struct sym_map_info {
	uint64_t start, end, pgoff;
	uint64_t dev, ino;
	const char *path; /* NULL when anonymous; lives until symbolizer__free() */
	bool vdso, anon;
};
/* 0, or -ENOENT when no known mapping holds addr. */
int symbolizer__mapping(struct symbolizer *s, uint32_t image, uint64_t addr,
			struct sym_map_info *out);
/* Makes sure the file holding addr in image is read (its symbols loaded),
 * while the process may still be reached: the agent calls it for each
 * frame of a stack it sees for the first time. */
void symbolizer__load(struct symbolizer *s, uint32_t image, uint64_t addr);
/* The command name of pid as the kernel last reported it (or /proc/PID/comm
 * for one it did not), "" if unknown; lives until pid is forgotten. */
const char *symbolizer__comm(struct symbolizer *s, uint32_t pid);

/* Keeps (hold) the process of image from symbolizer__forget_exited(), or
 * lets it go (one let-go per hold): a stack of it still to be walked needs
 * its mappings. */
void symbolizer__hold(struct symbolizer *s, uint32_t image, bool hold);

/* Drops what is kept for pid (objects stay cached). */
void symbolizer__forget_pid(struct symbolizer *s, uint32_t pid);
/* Drops what is kept for every process that has exited (no /proc/PID, or
 * found gone by a re-read) and is not held, for a long-running agent once
 * the profiles that needed them are written. Returns how many. */
size_t symbolizer__forget_exited(struct symbolizer *s);

/* Resolves a user-space address of pid. Always fills out (func NULL when the
 * address can't be named) and returns 0; the strings live until
 * symbolizer__free(). An address outside every known mapping of a live
 * process makes the mappings be re-read once (a library dlopen()ed since). */
int symbolizer__resolve_user(struct symbolizer *s, uint32_t pid, uint64_t addr,
			     struct sym_info *out);

/* Resolves a kernel address through /proc/kallsyms (read on first use). */
int symbolizer__resolve_kernel(struct symbolizer *s, uint64_t addr, struct sym_info *out);

/* A frame at a native address as its DWARF has it: an inlined function,
 * or the function holding it. */
#define SYM_MAX_INLINE 16
struct sym_inline {
	const char *func;    /* NULL: unknown (name it from the symbol table) */
	const char *file;    /* source file, NULL if unknown */
	uint32_t line;	     /* of the address, or (a caller) of its call; 0 if unknown */
	uint32_t start_line; /* the function's first line; 0 if unknown */
};

/* The source frames at the address si was resolved from (a return
 * address already moved back into its call, as for resolve): each function
 * inlined there innermost first, the function holding them last. Up to
 * max; 0 when its file has no DWARF lines (nor its debug file, found by
 * build-id or .gnu_debuglink) there. The strings live until
 * symbolizer__free(). */
size_t symbolizer__lines(struct symbolizer *s, const struct sym_info *si, struct sym_inline *out,
			 size_t max);

/* Writes the display name of a resolved address into buf: the function name,
 * else "basename(module)+0xOFFSET", else "[unknown]+0xADDR". Returns buf. */
const char *sym_info__name(const struct sym_info *info, char *buf, size_t size);

/* The demangled form of an Itanium C++ name ("_Z..."), malloc()ed, or NULL
 * when name is not one. */
char *sym_demangle(const char *name);

/* The vdso this process maps -- the image every process of its ABI maps:
 * its address and size. false if there is none. */
bool sym_own_vdso(uint64_t *base, uint64_t *size);

/* What a room above keeps beside the symbolizer, per process: the names
 * of the Python frames (src/python/names.h's symbolizer__python() attaches
 * them on first use). The symbolizer tells it of each process it forgets,
 * and frees it with itself. */
struct symbolizer_ext {
	void (*forget_pid)(struct symbolizer_ext *ext, uint32_t pid);
	void (*free)(struct symbolizer_ext *ext);
};

/* The extension attached to s, NULL if none yet. */
struct symbolizer_ext *symbolizer__ext(struct symbolizer *s);
/* Attaches ext to s, which owns it from then on (one at a time). */
void symbolizer__attach(struct symbolizer *s, struct symbolizer_ext *ext);

/* Counters, for the agent's health metrics and tests. */
struct symbolizer_stats {
	uint64_t objects_loaded; /* ELF objects parsed (cache misses) */
	uint64_t object_hits;	 /* mappings served from the object cache */
	uint64_t pids_tracked;
	uint64_t maps_reads;	/* /proc/PID/maps reads */
	uint64_t images;	/* images (execs) known now */
	uint64_t procs;		/* processes known now, exited ones not yet forgotten included */
	uint64_t dropped;	/* kernel records not kept: process table full */
	uint64_t dwarf_files;	/* files whose DWARF lines are kept */
	uint64_t dwarf_skipped; /* files with lines not kept (bound, or unreadable) */
};
void symbolizer__stats(const struct symbolizer *s, struct symbolizer_stats *out);

#endif
