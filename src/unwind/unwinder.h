/* unwinder.h: the userspace side of the BPF stack unwinder (bpf/unwind.h).
 * It keeps the unwind tables of the files the sampled stacks go through in
 * the BPF maps, within a memory budget: when a stack reaches a file with no
 * table, the BPF side notes it (unw_misses); unwinder__poll() has the
 * file's table built on a thread of its own (src/unwind/builder.h: the
 * polling thread keeps draining the rings meanwhile; a later poll loads it)
 * from its .eh_frame (src/unwind/table.h), opened through
 * /proc/PID/map_files (whatever the process's mount namespace, and even if
 * the file was replaced since), and writes it into the rows array, evicting
 * the least recently used files when the budget is full. A file with no
 * table (none in it, malformed, or bigger than the whole budget) is marked
 * for frame pointers, with the reason counted and logged once. A file that
 * is a CPython interpreter also gets its pieces (src/python/python.h) in
 * unw_py_files, so that the BPF side walks the Python frames it runs.
 *
 * Files are keyed by (device, inode) as the kernel sees the mapping: one
 * table per file, shared by every process that maps it. Not thread-safe. */
#ifndef SONDE_UNWIND_UNWINDER_H
#define SONDE_UNWIND_UNWINDER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "unwind_abi.h" /* bpf/unwind_abi.h: rows, file keys */

struct bpf_map;
struct unwinder;

#define UNWIND_MEMORY_DEFAULT (64ull << 20)

/* The rows a budget of bytes holds (the unw_rows map's max_entries, to set
 * before the BPF object is loaded). */
uint32_t unwinder__rows_for(uint64_t bytes);

/* The maps of bpf/unwind.h. */
/* bpf/unwind.h's maps. py_procs (each process's interpreter, learned as
 * its stacks go through it) is only shared: a stack one object's program
 * defers before it reaches the interpreter finds it from the other's.
 * py_pids holds the same, learned from the process's mappings
 * (unwinder__python_pid). */
struct unwinder_maps {
	struct bpf_map *rows, *files, *misses, *counters, *py_files, *py_procs, *py_pids;
};

/* Takes the loaded maps (unw_rows must be mmapable). Returns NULL with
 * errno set after printing why. */
struct unwinder *unwinder__new(const struct unwinder_maps *m);
void unwinder__free(struct unwinder *u);

/* Makes another BPF object's unwinder maps (bpf/unwind.h, between its
 * open and load) these ones, so that both walk stacks with one set of tables. 0 or a negative
 * errno. */
int unwinder__share(struct unwinder *u, const struct unwinder_maps *m);

/* Builds and loads the tables the BPF side asked for since the last call.
 * Returns the number of files loaded, or a negative errno. */
int unwinder__poll(struct unwinder *u);

/* Waits for the tables being built and loads them (the end of a
 * recording). */
void unwinder__settle(struct unwinder *u);

/* Builds and loads the table of path now (a file a command is about to
 * map), unless it is there. 0, or a negative errno. */
int unwinder__load_path(struct unwinder *u, const char *path);
/* The same for a file a process maps, as the kernel names it (dev is the
 * kernel's: major << 20 | minor), opened through path. */
int unwinder__load(struct unwinder *u, uint64_t dev, uint64_t ino, const char *path);

/* A file's table as the BPF side has it, for the userspace walk of the
 * stacks it left unfinished (src/unwind/late.c). */
struct unwinder_table {
	const struct unw_row *rows; /* NULL: walked by frame pointers */
	uint32_t n;
	bool python; /* a CPython interpreter: py holds its pieces */
	struct unw_py_file py;
};
/* The table of key's file: 0 (rows valid until the next unwinder__poll),
 * -EAGAIN while it is being built, -ENOENT when nothing was asked for it. */
int unwinder__table(struct unwinder *u, const struct unw_file_key *key, struct unwinder_table *out);
/* A number that changes each time a file's table (or its lack) is put in
 * the maps. */
uint64_t unwinder__generation(const struct unwinder *u);
/* Has key's file, open at path (name in messages), built on the builder's
 * thread unless it is there or under way. 0 when it is asked for or
 * there, or a negative errno (-ENOENT: path can't be opened). */
int unwinder__request(struct unwinder *u, const struct unw_file_key *key, const char *path,
		      const char *name);

/* The same, never built here: 1 when key's table (or its lack) is in the
 * maps, 0 when it is queued or being built, -EBUSY when the builder can't
 * take it now (ask again), -ENOENT when path can't be opened. For a caller
 * that must not wait (the GPU probes' poll, holding a process). */
int unwinder__want(struct unwinder *u, const struct unw_file_key *key, const char *path,
		   const char *name);

/* Process pid maps key's file (name: its path as the process sees it;
 * opened through path) executable from start. If the file is named like
 * a CPython interpreter (python3.12, libpython3.11.so.1.0) and is one, the
 * BPF side may read the process's Python frames before any of its stacks
 * has been walked through the interpreter (a stack left to userspace:
 * bpf/unwind_late.h). Returns whether it is one. */
bool unwinder__python_pid(struct unwinder *u, uint32_t pid, const struct unw_file_key *key,
			  const char *path, const char *name, uint64_t start);

struct unwinder_stats {
	uint64_t files;	      /* files with a table in the maps now */
	uint64_t rows;	      /* their rows */
	uint64_t capacity;    /* rows the budget holds */
	uint64_t built;	      /* tables built */
	uint64_t build_ms;    /* time spent building them */
	uint64_t evicted;     /* tables evicted for room */
	uint64_t fp_files;    /* files walked by frame pointers: */
	uint64_t no_table;    /*   no unwind table in the file */
	uint64_t over_budget; /*   its table is bigger than the budget */
	uint64_t failed;      /*   can't be opened or read (malformed) */
	uint64_t python;      /* CPython interpreter files found */
	/* from the BPF side (per-CPU counters summed), by bpf/counters.h's
	 * UNW_COUNTERS */
	uint64_t counts[UNW_CNT_MAX];
};
void unwinder__stats(struct unwinder *u, struct unwinder_stats *out);

#endif
