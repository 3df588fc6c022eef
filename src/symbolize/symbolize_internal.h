/* symbolize_internal.h: the parts the symbolizer (symbolize.c) is built from,
 * shared by the files of src/symbolize/ and by tests/unit/test_symbolize.c: a
 * string pool whose strings live as long as the symbolizer, the
 * /proc/PID/maps parser, ELF objects (libelf), kernel symbols from
 * /proc/kallsyms and JIT perf maps (/tmp/perf-PID.map). Each parser takes a
 * FILE or a file descriptor so that tests can feed it malformed input.
 * Nothing here is thread-safe. */
#ifndef SONDE_SYMBOLIZE_SYMBOLIZE_INTERNAL_H
#define SONDE_SYMBOLIZE_SYMBOLIZE_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <libelf.h>
#include <uthash.h>

#include "symbolize/elf.h"
#include "symbolize/maps.h"
#include "symbolize/symbolize.h"

/* Bounds on what outside input may make us allocate or loop over. */
#define SYMBOLIZE_MAX_LINE 8192		     /* a maps or perf map line, path included */
#define SYMBOLIZE_MAX_MAPPINGS (1u << 18)    /* vm.max_map_count defaults to 65530 */
#define SYMBOLIZE_MAX_SECTION (1ull << 30)   /* bytes in one ELF section we read */
#define SYMBOLIZE_MAX_SECTIONS (1u << 20)    /* section headers in one ELF file */
#define SYMBOLIZE_MAX_SEGMENTS 4096	     /* program headers in one ELF file */
#define SYMBOLIZE_MAX_SYMS (1u << 24)	     /* symbols kept from one ELF object */
#define SYMBOLIZE_MAX_KSYMS (1u << 23)	     /* lines kept from /proc/kallsyms */
#define SYMBOLIZE_MAX_JIT_ENTRIES (1u << 22) /* lines kept from one perf map */
#define SYMBOLIZE_MAX_BUILD_ID 64	     /* bytes in a build-id note (20 is usual) */
#define SYMBOLIZE_MAX_VDSO (1u << 20)	     /* bytes of the vdso image we copy */
#define SYMBOLIZE_MAX_PROCS (1u << 17)	     /* processes known at once, exited ones included */
#define SYMBOLIZE_MAX_IMAGES 64		     /* images kept per process */

/* ---- String pool (strpool.c) ----
 * Strings handed out live until strpool__free(), which is what lets
 * sym_info strings outlive a re-read perf map or a forgotten pid. */
struct strpool;

struct strpool *strpool__new(void);
void strpool__free(struct strpool *p);
/* Returns the pool's copy of str[0..len), one copy per distinct string. */
const char *strpool__intern(struct strpool *p, const char *str, size_t len);
/* Returns a new copy of str[0..len) without deduplication (cheaper per
 * string; for the many unique names of /proc/kallsyms). */
const char *strpool__add(struct strpool *p, const char *str, size_t len);

/* ---- /proc/PID/maps (maps.c): symbolize/maps.h ---- */

/* ---- ELF objects (elf.c) ---- */
struct elf_sym {
	uint64_t start, end; /* [start, end) in the ELF's address space */
	const char *name;    /* in the object's name arena */
	char *demangled;     /* filled on first lookup; == name when not mangled */
};

struct elf_seg { /* a PT_LOAD program header */
	uint64_t offset, vaddr, filesz, memsz;
	bool exec;
};

struct elf_object {
	char *name;	/* where it was first loaded from, for messages */
	char *build_id; /* lowercase hex, NULL if none */
	struct elf_seg *segs;
	size_t nsegs;
	struct elf_sym *syms; /* sorted by start, one per address */
	size_t nsyms;
	char *names;	 /* arena holding the symbol names */
	bool is_elf;	 /* false: not ELF or unreadable, never any symbols */
	bool has_symtab; /* symbols came from a .symtab (its own or a debug file's) */

	struct sym_dwarf *dwarf; /* its lines (dwarf.c), NULL if none */

	struct elf_object *next; /* symbolizer's list of every object */
	UT_hash_handle hh_bid;	 /* symbolizer's index by build_id */

	/* While loading (elf_object__open_*() to elf_object__close_file()). */
	Elf *elf;
	char *image; /* copy of an in-memory image (elf_memory) */
};

/* Candidate symbol, before sorting and deduplication. rank orders
 * candidates at the same address, the highest is kept. */
struct elf_cand {
	uint64_t start, size;
	uint64_t sec_end; /* end address of the symbol's section, UINT64_MAX if unknown */
	const char *name;
	unsigned int rank;
};

/* Starts loading the ELF file open on fd (borrowed, must stay open until
 * elf_object__close_file()): reads its build-id and PT_LOAD segments. Never
 * fails: a file that is not ELF or is malformed gives an object without
 * symbols (is_elf false) and a warning. name is copied. */
struct elf_object *elf_object__open_fd(int fd, const char *name);
/* Same for an image in memory (copied, at most SYMBOLIZE_MAX_VDSO bytes). */
struct elf_object *elf_object__open_memory(const void *image, size_t size, const char *name);
/* Reads the symbols of .symtab and .dynsym; when there is no .symtab and
 * debug_dir is not NULL, the .symtab of debug_dir/.build-id/xx/rest.debug. */
void elf_object__load_symbols(struct elf_object *obj, const char *debug_dir);
/* Releases the file (or image); the object keeps its symbols. */
void elf_object__close_file(struct elf_object *obj);
void elf_object__free(struct elf_object *obj);

/* Replaces obj's symbols by the candidates (reordered in place): sorted,
 * one per address (highest rank, then smallest name), zero-size ones
 * extending to the next symbol or the end of their section. Names are
 * copied. Returns 0 or -ENOMEM (then obj has no symbols). */
int elf_object__set_symbols(struct elf_object *obj, struct elf_cand *cands, size_t n);

/* The PT_LOAD segments of elf into *segs (xcalloc()ed, the caller frees
 * it), in file order. 0, -ENOEXEC when the program headers can't be read,
 * -E2BIG past SYMBOLIZE_MAX_SEGMENTS. */
int elf_read_segments(Elf *elf, struct elf_seg **segs, size_t *nsegs);

/* Converts an offset in the file to an address in the ELF's address space
 * through the PT_LOAD segment holding it. Returns false if none does. */
bool elf_object__file_to_vaddr(const struct elf_object *obj, uint64_t file_off, uint64_t *vaddr);

/* The demangled name of the symbol covering vaddr, NULL if none; lives as
 * long as obj. O(log n). */
const char *elf_object__lookup(struct elf_object *obj, uint64_t vaddr);

/* ---- Kernel symbols (kallsyms.c) ---- */
struct ksym {
	uint64_t addr;
	const char *name;   /* in the pool */
	const char *module; /* "[kernel.kallsyms]" or "[modname]", in the pool */
};

struct ksyms {
	struct ksym *syms; /* sorted by addr, one per address */
	size_t n;
	bool loaded; /* a load was attempted */
};

/* Reads f in the /proc/kallsyms format, keeping text symbols with non-zero
 * addresses. Returns 0 or -ENOMEM. */
int ksyms__load(struct ksyms *k, FILE *f, struct strpool *pool);
/* The greatest symbol at or below addr, NULL if none. */
const struct ksym *ksyms__find(const struct ksyms *k, uint64_t addr);
void ksyms__release(struct ksyms *k);

/* ---- JIT perf maps (perfmap.c) ---- */
struct perfmap_entry {
	uint64_t start, end;
	const char *name; /* in the pool */
};

struct perfmap {
	struct perfmap_entry *e; /* sorted by start, one per start (the last listed) */
	size_t n;
	uint64_t checked_ns;	/* last time the file was looked at, 0 never */
	int64_t mtime_ns, size; /* of the file when parsed, to skip unchanged ones */
};

/* Replaces m's entries by those of f ("START SIZE name" lines, hex).
 * Malformed lines are skipped. Returns 0 or -ENOMEM (m unchanged). */
int perfmap__load(struct perfmap *m, FILE *f, struct strpool *pool);
const struct perfmap_entry *perfmap__find(const struct perfmap *m, uint64_t addr);
void perfmap__release(struct perfmap *m);

/* ---- Processes (procs.c) ----
 * What the symbolizer knows of each process: its images -- one per exec,
 * newest first, each the executable mappings it had -- fed by the kernel's
 * records (symbolizer__mmap, __exec, __fork) for processes born under the
 * sideband, or read from /proc/PID/maps for those that were running before
 * and on a miss. An image has a number, unique for the symbolizer's life,
 * so that a stack keeps naming the code it ran after its process exec'ed
 * again, exited or had its pid reused. */
struct obj_key {
	uint64_t dev, ino;
};

/* A file seen in a process's mappings and the object read from it; several
 * files share one object when their build-ids are equal. */
struct obj_alias {
	struct obj_key key;
	struct elf_object *obj;
	int64_t mtime_ns, size; /* of the file when read, to notice it was replaced */
	UT_hash_handle hh;
};

struct sym_mapping {
	uint64_t start, end, pgoff;
	struct obj_key key;   /* 0 when the kernel gave a build-id instead */
	const char *path;     /* in the pool, NULL when anonymous */
	const char *build_id; /* in the pool, lowercase hex; NULL: unknown */
	enum mapping_kind kind;
	bool deleted;
	bool looked_up;		/* obj was looked for */
	struct elf_object *obj; /* NULL: anonymous, unreadable or not looked up yet */
};

struct proc;

struct image {
	uint32_t id;
	uint64_t start_ns; /* the exec (or fork) that began it; 0: before we knew */
	bool complete;	   /* every mapping since start_ns came from the kernel */
	/* A child between fork and exec runs its parent's mappings: copied
	 * from the parent's image at fork_ns on first use. */
	bool inherit;
	uint32_t parent;
	uint64_t fork_ns;
	struct proc *proc;
	struct sym_mapping *maps; /* sorted by start, not overlapping */
	size_t nmaps, cap;
	struct image *older;
	UT_hash_handle hh; /* symbolizer's images, by id */
};

struct proc {
	uint32_t pid;
	uint32_t nspid;	       /* the pid in its own namespace, 0 until needed */
	struct image *image;   /* the newest */
	uint64_t maps_read_ns; /* last attempt to read /proc/PID/maps */
	unsigned maps_reads;   /* attempts so far */
	uint64_t read_ns;      /* when the last read that succeeded began: the
				* process's mappings then are in its newest image */
	bool read;	       /* /proc/PID/maps was read once */
	bool gone;	       /* it exited (a record said so, or /proc did) */
	bool counted;	       /* in stats.pids_tracked */
	uint32_t holds;	       /* symbolizer__hold()s: not forgotten while some */
	char comm[16];
	struct perfmap jit;
	struct proc *grave; /* replaced by a new process of the same pid: kept until forgotten */
	UT_hash_handle hh;
};

struct symbolizer {
	struct proc *procs;
	struct proc *graveyard; /* procs whose pid was reused, through grave */
	struct proc *last;	/* the stack being resolved is usually the last pid's */
	struct image *images;	/* by id */
	uint32_t next_image;
	size_t nprocs;
	uint64_t horizon_ns; /* the kernel's records up to here were applied */
	symbolizer_sync_fn sync;
	void *sync_ctx;
	struct obj_alias *aliases;
	struct elf_object *by_build_id;
	struct elf_object *objects; /* every object, through next */
	struct strpool *pool;
	struct ksyms ksyms;
	struct elf_object *vdso;
	uint64_t vdso_size;
	bool vdso_tried;
	char *debug_dir;
	struct symbolizer_ext *ext; /* the names of Python frames (symbolizer__attach) */
	struct symbolizer_stats stats;
};

/* The process of pid, or NULL. */
struct proc *procs__find(struct symbolizer *s, uint32_t pid);
/* The process of pid, made (and its maps read from /proc) if unknown; NULL
 * only past SYMBOLIZE_MAX_PROCS. */
struct proc *procs__get(struct symbolizer *s, uint32_t pid);
/* The image of p that ran at ts_ns. */
struct image *proc__image_at(struct proc *p, uint64_t ts_ns);
/* The mapping of im holding addr, re-reading /proc/PID/maps once in a while
 * on a miss of a live process's newest image; NULL if none. */
struct sym_mapping *image__find(struct symbolizer *s, struct image *im, uint64_t addr);
struct image *images__find(struct symbolizer *s, uint32_t id);
void procs__free_all(struct symbolizer *s);

/* The GNU build-id of elf as lowercase hex (malloc()ed), or NULL. */
char *elf_read_build_id(Elf *elf);
/* Opens path when it is a regular ELF file whose build-id is build_id
 * (any, when NULL; one of another build is logged): its Elf, open on *fd,
 * or NULL (*fd -1). */
Elf *elf_open_matching(const char *path, const char *build_id, int *fd);

/* ---- Lines and inlined functions (dwarf.c) ---- */

/* While obj's file is open (obj->elf, fd its descriptor or -1): keeps its
 * DWARF -- its own or its debug file's -- for sym_dwarf__lookup, when it has
 * lines. */
void sym_dwarf__attach(struct symbolizer *s, struct elf_object *obj, int fd);
/* The frames at addr (ELF address) of obj, innermost first: each inlined
 * function, then the function that holds them (its DWARF name; the caller
 * names it from the symbol table), with file and line (for a caller: of the
 * call). Up to max; 0 when obj has no lines for addr. Strings live as long
 * as s. */
size_t sym_dwarf__lookup(struct symbolizer *s, struct elf_object *obj, uint64_t addr,
			 struct sym_inline *out, size_t max);
void sym_dwarf__free(struct sym_dwarf *d);

/* symbolize.c: the object of a mapping of pid, looked up on first use. */
struct elf_object *symbolizer__object(struct symbolizer *s, uint32_t pid, struct sym_mapping *m);

#endif
