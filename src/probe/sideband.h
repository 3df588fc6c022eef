/* sideband.h: what the kernel says about processes as it happens -- the
 * executable mappings they make (PERF_RECORD_MMAP2, with the build-id of
 * the file), their execs and command names (PERF_RECORD_COMM), forks and
 * exits (PERF_RECORD_FORK, _EXIT) -- read from one dummy perf event per
 * CPU, as `perf record` does, and handed to the symbolizer. A process
 * started after the sideband opened is thus known from its first
 * instruction, whatever its lifetime: nothing is read from /proc/PID/maps
 * for it, so a 25 ms job that has exited by the time its samples are
 * symbolized is still named. Processes that were already running are read
 * from /proc when first needed (symbolize.h).
 *
 * Used by `sonde record`, `sonde top` and the agent, which poll it before
 * they drain their samples and GPU events. Timestamps are CLOCK_MONOTONIC,
 * the clock of bpf_ktime_get_ns(), so a sample is matched with the exec it
 * followed. Records lost to a full ring are counted (and the symbolizer
 * falls back to /proc for a mapping it missed). Not thread-safe. */
#ifndef SONDE_PROBE_SIDEBAND_H
#define SONDE_PROBE_SIDEBAND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sideband;
struct symbolizer;

struct sideband_opts {
	/* Only these pids and their descendants (sideband__add_pid). */
	bool filter_pids;
	size_t ring_pages; /* per CPU, a power of two; 0: 64 (256 KiB) */
};

/* Opens the events (needs CAP_PERFMON or root) and feeds sym, which is
 * borrowed and must outlive the sideband. Returns NULL with errno set
 * after printing why. */
struct sideband *sideband__open(const struct sideband_opts *opts, struct symbolizer *sym);
/* The same without the kernel's events: fed by sideband__queue only (a
 * replay, the tests). */
struct sideband *sideband__new(const struct sideband_opts *opts, struct symbolizer *sym);
void sideband__free(struct sideband *sb);

/* Called with each record applied, after the symbolizer has it, for the
 * caller's own state of processes (the agent's service names). */
struct sideband_rec;
typedef void (*sideband_fn)(void *ctx, const struct sideband_rec *r);
void sideband__set_listener(struct sideband *sb, sideband_fn fn, void *ctx);

/* Adds pid (and its future children) to the filter. */
void sideband__add_pid(struct sideband *sb, uint32_t pid);

/* Drains every CPU's ring into the symbolizer, in time order: the records
 * stamped before the poll began, those since held for the next (a record
 * on one CPU's ring may follow one that another CPU's ring only shows
 * later). Returns the number of records applied. */
int sideband__poll(struct sideband *sb);

/* Queues one record (its perf_event_header first, laid out as
 * sideband__open's events write it) for the next poll, as if read from a
 * ring; a malformed one is counted bad and dropped. */
void sideband__queue(struct sideband *sb, const void *rec, size_t size);

struct sideband_stats {
	uint64_t records; /* applied */
	uint64_t mmaps, execs, forks, exits;
	uint64_t lost;	   /* records the kernel could not write: ring full */
	uint64_t bad;	   /* malformed records, skipped */
	uint64_t filtered; /* records of processes outside the filter */
	bool build_ids;	   /* MMAP2 records carry build-ids (Linux 5.12) */
};
void sideband__stats(const struct sideband *sb, struct sideband_stats *out);

/* ---- the record parser, for the unit tests and the fuzzer ---- */

enum sideband_kind {
	SIDEBAND_MMAP,
	SIDEBAND_COMM,
	SIDEBAND_FORK,
	SIDEBAND_EXIT,
	SIDEBAND_LOST,
	SIDEBAND_OTHER, /* a type we don't use: skipped */
};

#define SIDEBAND_BUILD_ID_MAX 20

/* One record, decoded. Strings point into the record. */
struct sideband_rec {
	enum sideband_kind kind;
	uint32_t pid, tid;
	uint32_t ppid, ptid; /* FORK, EXIT */
	uint64_t time_ns;    /* CLOCK_MONOTONIC; 0 if the record has none */
	/* MMAP */
	uint64_t addr, len, pgoff;
	uint32_t prot, flags;
	uint32_t maj, min;
	uint64_t ino;
	uint8_t build_id[SIDEBAND_BUILD_ID_MAX];
	uint8_t build_id_size; /* 0: none (then maj/min/ino are set if !has_build_id) */
	bool has_build_id;     /* the record carries a build-id field */
	const char *path;      /* MMAP: the file; COMM: the command name */
	bool exec;	       /* COMM of an exec */
	uint64_t lost;	       /* LOST */
};

/* Decodes one record of size bytes (its perf_event_header included), as
 * opened by sideband__open (sample_id_all with TID and TIME). 0, or
 * -EINVAL for a record that is truncated, has a bad size or an unterminated
 * string. */
int sideband_parse(const void *rec, size_t size, struct sideband_rec *out);

#endif
