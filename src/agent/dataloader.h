/* dataloader.h: the time a PyTorch training loop waits for its next batch,
 * from the record_function scopes the GPU probes report (GPU_EV_RF_BEGIN
 * and GPU_EV_RF_END of src/probe/gpu_probes.h). torch's DataLoader
 * iterators wrap each __next__ -- blocked on the workers' queue, or making
 * the batch itself with num_workers=0 -- in
 * torch.autograd.profiler.record_function("enumerate(DataLoader)#..."),
 * whose scope the probes time from its constructor to its end(). Other
 * code makes such scopes too (optimizers' step and zero_grad, users' own):
 * a DataLoader's is the one entered from __next__ in
 * torch/utils/data/dataloader.py, which the Python frames of the begin's
 * stack say. Each one that ends is one observation of
 * sonde_dataloader_wait_seconds for its process
 * (gpu_metrics__dataloader_wait); the ones under way are listed for the
 * stuck-wait alert, with the line of the loop that waits.
 *
 * Bounded: at most DATALOADER_MAX_WAITS scopes are followed at once,
 * further ones counted and not measured. Not thread-safe: the GPU feed's
 * thread calls it (src/agent/gpu_feed.c). */
#ifndef SONDE_AGENT_DATALOADER_H
#define SONDE_AGENT_DATALOADER_H

#include <stdbool.h>
#include <stdint.h>

#define DATALOADER_MAX_WAITS 65536

struct dataloader;
struct gpu_event;
struct gpu_metrics;
struct symbolizer;

/* sym names the Python frames (borrowed); m gets the observations
 * (borrowed; NULL: none). */
struct dataloader *dataloader__new(struct symbolizer *sym, struct gpu_metrics *m);
void dataloader__free(struct dataloader *d);

/* Feeds one event: RF_BEGIN, RF_END and PROCESS_EXIT are used, the rest
 * ignored. Returns true when the event began or ended a DataLoader wait. */
bool dataloader__event(struct dataloader *d, const struct gpu_event *ev);

/* A thread waiting for its next batch now. */
struct dataloader_wait {
	uint32_t pid, tid;
	uint64_t since_ns;    /* CLOCK_MONOTONIC at the wait's start */
	const char *file;     /* the loop's line: its co_filename, "" if unknown */
	int line;	      /* 0 if unknown */
	const char *function; /* its qualified name, "" if unknown */
};
/* Calls fn for each wait under way; the strings live until the next call
 * that feeds d. */
typedef void (*dataloader_wait_fn)(void *ctx, const struct dataloader_wait *w);
void dataloader__each_waiting(struct dataloader *d, dataloader_wait_fn fn, void *ctx);

/* The innermost Python frame of a stack of pid (leaf first, as the probes
 * take it), named now while the process lives: the Python line a native
 * call was made from. false when the stack has none or its name can't be
 * read. */
struct python_line {
	char file[256];
	int line;
	char function[128];
};
bool python_line(struct symbolizer *sym, uint32_t pid, const uint64_t *ips, int n,
		 struct python_line *out);

struct dataloader_stats {
	uint64_t scopes;    /* record_function scopes begun */
	uint64_t waits;	    /* DataLoader waits measured (ended) */
	uint64_t unknown;   /* scopes whose stack had no Python frame to tell */
	uint64_t dropped;   /* DataLoader waits not followed: DATALOADER_MAX_WAITS */
	uint64_t unmatched; /* DataLoader waits whose end never came (the process
				* exited, the record was lost) */
	uint32_t waiting;   /* waits under way */
};
void dataloader__stats(const struct dataloader *d, struct dataloader_stats *out);

#endif
