/* builder.h: unwind tables built on threads of their own, so that the
 * thread that polls the BPF rings keeps draining them while a big file's
 * table is built (libtorch_cpu.so's takes about a second), and so that
 * the files a process maps are built side by side, in the order asked
 * (small ones are not queued behind a big one while a thread is free:
 * one per CPU but one, at most UNW_BUILDER_MAX_THREADS). The unwinder
 * (unwinder.c) submits a file it opened and later takes the finished
 * table; it alone touches the BPF maps. Jobs are bounded: past
 * UNW_BUILDER_MAX_JOBS in flight, submit refuses (the file is asked for
 * again by its next stack). */
#ifndef SONDE_UNWIND_BUILDER_H
#define SONDE_UNWIND_BUILDER_H

#include <stdbool.h>
#include <stdint.h>

#include "unwind/table.h"
#include "unwind_abi.h" /* struct unw_file_key */

#define UNW_BUILDER_MAX_JOBS 256
#define UNW_BUILDER_MAX_THREADS 8

struct unw_job {
	struct unw_file_key key;
	int fd;		 /* the file, open; the job's owner closes it */
	char path[32];	 /* "/proc/self/fd/N": the file, by its descriptor */
	char name[4096]; /* what it is called, for messages */
	uint32_t max_rows;
	/* The result: what unw_table__build_file() returned, its reason, the
	 * table (the taker frees it) and how long the build took. */
	int err;
	char why[256];
	struct unw_table t;
	uint64_t build_ns;
	struct unw_job *next;
};

struct unw_builder;

/* A builder and its threads; NULL with errno set when none can be
 * started. */
struct unw_builder *unw_builder__new(void);
/* Stops the threads (after the builds in progress) and frees every job,
 * closing their files. NULL is a no-op. */
void unw_builder__free(struct unw_builder *b);

/* Queues job (malloc()ed, key, fd, name and max_rows filled; path is set
 * here) and takes it over. false when UNW_BUILDER_MAX_JOBS are in flight or
 * the key is among them: the caller keeps the job. */
bool unw_builder__submit(struct unw_builder *b, struct unw_job *job);
/* A finished job, or NULL: the caller frees its table, closes its fd and
 * frees it. */
struct unw_job *unw_builder__take(struct unw_builder *b);
/* Whether the file of key is queued, being built or built and not taken. */
bool unw_builder__has(struct unw_builder *b, const struct unw_file_key *key);
/* Blocks until nothing is queued or being built (the tests, the end of a
 * recording). */
void unw_builder__wait(struct unw_builder *b);

#endif
