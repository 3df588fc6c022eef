/* libsearch.h: finds every CUDA runtime, CUDA driver and NCCL library file
 * on the machine's local filesystems (libcudart.so*, libcuda.so*,
 * libnccl.so*: libscan_classify), so that the agent attaches to each
 * before any process maps it -- the ones in virtualenvs, conda
 * environments, wheels' directories and build trees included, which no
 * loader path names. The walk runs on a thread of its own at low priority
 * (a cold filesystem of a few hundred thousand files takes seconds) and
 * hands what it finds to the agent's probing thread, which attaches.
 * Walked: every mount of a local, disk- or memory-backed filesystem (ext*,
 * xfs, btrfs, zfs, f2fs, overlay, tmpfs, ramfs), each within itself, except
 * under /proc, /sys and /dev; not walked: network and FUSE filesystems.
 * Bounded in files and time. */
#ifndef SONDE_PROBE_LIBSEARCH_H
#define SONDE_PROBE_LIBSEARCH_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

struct libsearch;

struct libsearch_opts {
	const char *mountinfo; /* NULL: /proc/self/mountinfo */
	uint64_t max_files;    /* entries looked at; 0: 20 million */
	uint64_t max_ms;       /* 0: 10 minutes */
};

/* Starts the walk. NULL with errno set (and a message) if the thread can't
 * start. */
struct libsearch *libsearch__start(const struct libsearch_opts *opts);
/* Hands each path found since the last call to fn (on the caller's
 * thread). Returns true once the walk is over and everything was handed. */
typedef void (*libsearch_fn)(void *ctx, const char *path);
bool libsearch__drain(struct libsearch *s, libsearch_fn fn, void *ctx);

struct libsearch_stats {
	uint64_t mounts, entries, found;
	uint64_t ms;	/* time the walk took (so far) */
	bool done, cut; /* over; stopped by a bound */
};
void libsearch__stats(struct libsearch *s, struct libsearch_stats *out);
/* Stops the walk (if under way) and frees. NULL is a no-op. */
void libsearch__free(struct libsearch *s);

/* ---- for the tests and the fuzzer ---- */

/* The mount points of the filesystems to walk, from text in the format of
 * /proc/PID/mountinfo; fn gets each (unescaped, "\040" is a space).
 * Malformed lines are skipped. Returns the number of mounts handed. */
size_t libsearch_mounts(FILE *mountinfo, libsearch_fn fn, void *ctx);

#endif
