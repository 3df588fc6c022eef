/* profile.h: the in-memory profile that every output format is written from
 * (folded stacks, pprof, speedscope) and, later, that the server ingests.
 *
 * A profile is a bag of samples. Each sample is a stack of symbolized frames
 * (leaf first) with who it was taken from -- pid, tid, the process's name
 * (comm), the thread's name and the service the process belongs to -- and a
 * count.
 * Strings, mappings, locations and identical samples are deduplicated, so
 * adding the same stack twice adds to one sample's count. */
#ifndef SONDE_PROFILE_PROFILE_H
#define SONDE_PROFILE_PROFILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* One frame as the symbolizer named it. All strings are borrowed for the
 * duration of profile__add() and copied (interned) by it. */
struct prof_frame {
	const char *func;     /* function name; NULL: named "basename(module)+0xOFFSET" */
	const char *module;   /* ELF path, "[kernel.kallsyms]", "[vdso]"...; may be NULL */
	const char *build_id; /* lowercase hex, may be NULL */
	uint64_t addr;	      /* runtime (virtual) address */
	uint64_t offset;      /* address in the module's ELF address space */
	uint64_t map_start;   /* mapping holding addr: [start, limit) at file offset */
	uint64_t map_limit;   /* map_pgoff; all 0 when there is no mapping */
	uint64_t map_pgoff;
	bool kernel;
	/* Where in the source, when known (DWARF lines, a Python code
	 * object): the file, the line of this frame's instruction (for a
	 * caller, of its call) and the first line of the function; NULL and
	 * 0 when unknown. */
	const char *file;
	uint32_t line, start_line;
};

/* Deduplicated tables; the writers read them directly. Index 0 of strings is
 * always "" (pprof requires it). A location's mapping is 1-based, 0 = none. */
struct prof_mapping {
	uint32_t file, build_id; /* string indices */
	uint64_t start, limit, pgoff;
};

/* What interning a string learnt of it, kept so that a reader of the
 * profile (the store) need not read the string again to look it up. */
struct prof_str {
	uint64_t hash; /* hash_bytes(s, len, 0) of common/hash.h */
	uint32_t len;  /* strlen(s) */
};

struct prof_location {
	uint32_t func;	  /* string index of the display name (never "") */
	uint32_t module;  /* string index, 0 if none */
	uint32_t mapping; /* 1-based index into mappings, 0 if none */
	uint64_t addr;
	bool kernel;
	uint32_t file;		   /* string index of the source file, 0 if unknown */
	uint32_t line, start_line; /* 0 if unknown */
};

struct prof_sample {
	uint32_t pid, tid;
	uint32_t comm;	  /* string index: the process's name */
	uint32_t thread;  /* string index: the thread's name; 0 ("") when unknown */
	uint32_t service; /* string index: the service named for it; 0 ("") when none */
	uint32_t labels;  /* 1-based index into the profile's labelsets; 0: none */
	uint32_t nlocs;
	uint32_t *locs; /* 0-based location indices, leaf first */
	int64_t count;
};

/* Labels of a sample beyond who took it (its job's: job, rank, pod...):
 * pairs of string indexes, name then value. */
#define PROF_MAX_LABELS 8
struct prof_labels {
	uint32_t n;
	uint32_t kv[2 * PROF_MAX_LABELS];
};

struct profile {
	/* What a sample counts: e.g. type "cpu", unit "nanoseconds" and
	 * period 10101010 for 99 Hz sampling. */
	char *type, *unit;
	int64_t period;
	int64_t time_ns;     /* wall-clock start, ns since the epoch */
	int64_t duration_ns; /* length of the window */

	char **strings;
	size_t nstrings, cap_strings;
	struct prof_str *str_info; /* per string: its length and hash */
	size_t cap_str_info;
	struct prof_mapping *mappings;
	size_t nmappings, cap_mappings;
	struct prof_location *locs;
	size_t nlocs, cap_locs;
	struct prof_sample *samples;
	size_t nsamples, cap_samples;
	struct prof_labels *labelsets; /* the samples' labels, each set once */
	size_t nlabelsets, cap_labelsets;
	int64_t total; /* sum of all sample counts */
	/* Sums stop at INT64_MAX instead of failing (-EOVERFLOW): a profile
	 * that adds up what was stored (store__select sets it), where one
	 * huge stored value must not fail every answer made from it. */
	bool saturate;

	struct profile_index *index; /* private hash tables (profile.c) */
};

/* A new, empty profile; type and unit are copied (NULL is ""). Never NULL:
 * a profile allocates through xalloc and aborts on OOM (profile.c says why).
 * The caller frees it with profile__free(). */
struct profile *profile__new(const char *type, const char *unit, int64_t period);
/* Frees p and everything it holds; NULL is a no-op. */
void profile__free(struct profile *p);

/* Who a sample was taken from. The strings are borrowed for the call and
 * interned; NULL is "", and "" is "unknown" (thread) or "none" (service). */
struct prof_who {
	uint32_t pid, tid;
	const char *comm;    /* the process's name (its thread-group leader's comm) */
	const char *thread;  /* the thread's own name */
	const char *service; /* the service the process belongs to, as the agent named it */
	/* More labels, "NAME=VALUE" one per line (its job's; at most
	 * PROF_MAX_LABELS, names of label characters), or NULL. */
	const char *labels;
};

/* Adds count to the sample (who, frames[0..n)), frames[0] being the leaf.
 * Returns 0; -EINVAL when p or who is NULL, n > PROF_MAX_FRAMES, count < 0
 * or frames is NULL with n > 0; -EOVERFLOW when the total would pass
 * INT64_MAX (unless p->saturate: then the sums stop there). p is unchanged
 * on an error. Aborts on OOM. */
#define PROF_MAX_FRAMES 512
int profile__add_ex(struct profile *p, const struct prof_who *who, const struct prof_frame *frames,
		    size_t n, int64_t count);
/* profile__add_ex of (pid, tid, comm), without thread or service. */
int profile__add(struct profile *p, uint32_t pid, uint32_t tid, const char *comm,
		 const struct prof_frame *frames, size_t n, int64_t count);
/* For callers adding many stacks over the same few frames (the store's
 * selects): the 0-based index of f's location in p, added if new. Never
 * fails (aborts on OOM). */
uint32_t profile__location(struct profile *p, const struct prof_frame *f);
/* profile__add, and on success the locations of frames[0..n) in locs (the
 * caller's, n entries; untouched on an error). Returns what profile__add
 * does. */
int profile__add_get_locs(struct profile *p, uint32_t pid, uint32_t tid, const char *comm,
			  const struct prof_frame *frames, size_t n, int64_t count, uint32_t *locs);
/* profile__add of a stack given as location indices (leaf first), such as
 * profile__location returns. Returns what profile__add does, and -EINVAL
 * too for an index p does not have (or locs NULL with n > 0). */
int profile__add_locs(struct profile *p, uint32_t pid, uint32_t tid, const char *comm,
		      const uint32_t *locs, size_t n, int64_t count);

/* Interns s (NULL is ""), returning its index: the same index for the same
 * string every time. A string longer than PROF_MAX_STRING bytes (a function
 * name, a file) is cut to fit with PROF_CUT_MARK at its end, never inside
 * a UTF-8 sequence: what a profile holds of any string is bounded, however
 * it came (a pprof, folded text, the agent). Never fails (aborts on OOM). */
#define PROF_MAX_STRING 4096
#define PROF_CUT_MARK "\xe2\x80\xa6" /* U+2026, "…" */
uint32_t profile__intern(struct profile *p, const char *s);
/* The 1-based index of the label set encoded ("NAME=VALUE" one per line;
 * lines without a name and '=' skipped; the first PROF_MAX_LABELS kept) in
 * p->labelsets, added if new. Never fails (aborts on OOM). */
uint32_t profile__labelset(struct profile *p, const char *encoded);
/* The string of index i, "" when i is out of range; it lives as long as p. */
static inline const char *profile__str(const struct profile *p, uint32_t i)
{
	return i < p->nstrings ? p->strings[i] : "";
}
/* Its length and hash; those of "" when i is out of range. */
static inline struct prof_str profile__str_info(const struct profile *p, uint32_t i)
{
	return i < p->nstrings ? p->str_info[i] : p->str_info[0];
}

/* Output formats. */
enum prof_format { PROF_FMT_NONE, PROF_FMT_FOLDED, PROF_FMT_PPROF, PROF_FMT_SPEEDSCOPE };

/* "folded" | "pprof" | "speedscope" -> format; PROF_FMT_NONE when unknown. */
enum prof_format prof_format_from_name(const char *name);
/* By extension: .folded/.txt/.collapsed -> folded, .pb.gz/.pprof/.pb -> pprof,
 * .speedscope.json/.json -> speedscope; PROF_FMT_NONE otherwise. */
enum prof_format prof_format_from_path(const char *path);
/* The name of fmt ("folded", ...), "none" for PROF_FMT_NONE or an unknown
 * value; a static string. */
const char *prof_format_name(enum prof_format fmt);

/* Writers. Each returns 0, -EIO when writing to f (or flushing it) failed,
 * or -ENOMEM; f may then hold part of the output. */

/* One line per distinct (comm, stack): "comm;root;...;leaf COUNT\n", comm
 * being the process's name (threads and services are not written), kernel
 * frames suffixed "_[k]" (the flamegraph.pl convention). Lines sorted. An
 * empty comm is left out of its line; ';' in a name is written as ':'. */
int profile__write_folded(const struct profile *p, FILE *f);
/* pprof: gzip-compressed perftools.profiles.Profile. sample_type is
 * [samples/count, TYPE/UNIT] with the second value count*period; mappings
 * carry file name and build id, locations their address and one line each;
 * every sample has labels pid, tid (numeric) and comm (string: the process),
 * and the string labels thread and service_name when it has them. */
int profile__write_pprof(const struct profile *p, FILE *f);
/* speedscope JSON (https://www.speedscope.app/file-format-schema.json): shared
 * frames, one "sampled" profile per pid named "comm (pid)". */
int profile__write_speedscope(const struct profile *p, FILE *f);
/* The writer of fmt; -EINVAL for PROF_FMT_NONE or an unknown format. */
int profile__write(const struct profile *p, enum prof_format fmt, FILE *f);

/* Reads folded text (as written above) into p: each line's first field is the
 * comm, pid/tid 0. Returns 0, -EINVAL for a bad line (malformed, over 1 MiB,
 * holding a NUL byte, or a count that takes the total past INT64_MAX), -EIO
 * for a read error, or -ENOMEM; on an error p holds the lines before the one
 * that failed. *line (when line is not NULL) is set to the number of the
 * failing line, or of the last line read on success. A stack over
 * PROF_MAX_FRAMES keeps its leaf-most frames. */
int profile__read_folded(struct profile *p, FILE *f, size_t *line);
/* Reads a pprof file (gzip or raw protobuf) of at most max_bytes bytes
 * decompressed into a new profile (the caller frees it). NULL with errno:
 * EINVAL malformed, EFBIG too large (decompressed, or unpacked: over 16
 * times its size plus 1 MiB, reckoned before unpacking), ENOMEM. A
 * sample's count is its first
 * value; pid, tid, comm, thread and service (label service_name) come from
 * its labels when present; a location with inlined functions gives one
 * frame per line; kernel frames are those of a "[kernel..." module or an
 * upper-half address; a stack over PROF_MAX_FRAMES keeps its leaf-most. */
struct profile *profile__read_pprof(const void *buf, size_t len, size_t max_bytes);

/* A pprof read sample by sample, for callers that need what the profile
 * model leaves out (every value, every label): the server splits an agent's
 * window into series by its samples' labels. Everything a visitor is handed
 * is borrowed for the duration of the call. */
struct pprof_header {
	const char *const *types, *const *units; /* sample_type[i] */
	size_t ntypes;				 /* >= 1 */
	const char *period_type, *period_unit;	 /* "" when absent */
	int64_t period, time_ns, duration_ns;
	size_t nsamples;
};

struct pprof_label {
	const char *key;
	const char *str; /* NULL for a numeric label */
	int64_t num;
	const char *num_unit;
};

struct pprof_sample {
	const struct prof_frame *frames; /* leaf first, as profile__read_pprof makes them */
	/* Per frame, the same number wherever the same frame (a location's
	 * line) recurs in this profile, and another for any other frame. */
	const uint64_t *frame_ids;
	size_t nframes;
	const int64_t *values; /* one per sample type */
	size_t nvalues;
	const struct pprof_label *labels;
	size_t nlabels;
};

struct pprof_visitor {
	/* Called once before the samples; a non-zero return stops the read. */
	int (*header)(void *ctx, const struct pprof_header *h);
	/* Called once per sample, in order; a non-zero return stops the read. */
	int (*sample)(void *ctx, const struct pprof_sample *s);
	void *ctx;
	/* Heap the unpacked message may take: 16 times its size plus 1 MiB
	 * (a real profile takes about 9, one of tiny submessages 50 and
	 * more), and at most max_heap when that is not 0. A scan of the wire
	 * format reckons it first: a message over it is refused before it is
	 * unpacked. */
	size_t max_heap;
};

/* Reads a pprof (gzip or raw, at most max_bytes decompressed) with the
 * checks of profile__read_pprof and hands it to v. Returns 0, -EINVAL
 * (malformed), -EFBIG (too large, decompressed or unpacked), -ENOMEM, or
 * what a callback returned. */
int profile__visit_pprof(const void *buf, size_t len, size_t max_bytes,
			 const struct pprof_visitor *v);

#endif
