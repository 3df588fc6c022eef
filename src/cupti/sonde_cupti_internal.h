/* sonde_cupti_internal.h: between the CUPTI injection library's files
 * (sonde_cupti.c, nvtx.c). */
#ifndef SONDE_CUPTI_INTERNAL_H
#define SONDE_CUPTI_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "cupti/sonde_cupti.h"

/* The markers (markers.c): calls that do nothing, for the probes to read
 * their arguments. */
#define SONDE_CUPTI_EXPORT __attribute__((visibility("default")))
/* At each launch's and copy's entry: CUPTI's correlation id, and the id
 * of the thread's open NVTX ranges (0: none). */
SONDE_CUPTI_EXPORT void sonde_cupti_launch(uint32_t correlation, uint32_t nvtx);
/* What ran on the GPU, n records (at most SONDE_CUPTI_BATCH). */
SONDE_CUPTI_EXPORT void sonde_cupti_records(const struct sonde_cupti_record *r, uint32_t n);
/* CUPTI's clock against CLOCK_MONOTONIC; dropped: the records CUPTI could
 * not keep so far; stall_dropped: the PC samples it dropped so far. */
SONDE_CUPTI_EXPORT void sonde_cupti_clock(uint64_t gpu_ns, uint64_t host_ns, uint64_t dropped,
					  uint64_t stall_dropped);
/* An NVTX range path's id. */
SONDE_CUPTI_EXPORT void sonde_cupti_nvtx(uint32_t id, const char *path);

/* Records handed to the probes SONDE_CUPTI_BATCH a marker call: pushed one
 * by one, the rest handed at the flush. */
struct record_batch {
	struct sonde_cupti_record r[SONDE_CUPTI_BATCH];
	uint32_t n;
};

static inline void batch_flush(struct record_batch *b)
{
	if (b->n)
		sonde_cupti_records(b->r, b->n);
	b->n = 0;
}

static inline void batch_push(struct record_batch *b, const struct sonde_cupti_record *r)
{
	b->r[b->n++] = *r;
	if (b->n == SONDE_CUPTI_BATCH)
		batch_flush(b);
}

/* sonde_cupti.c: CLOCK_MONOTONIC ns; the environment's integer name within
 * [min, max], else def; CUPTI's words for a result. */
uint64_t mono_ns(void);
long env_long(const char *name, long def, long min, long max);
const char *cupti_why(int result);

/* pc_sampling.c: GPU stall reasons, when SONDE_CUPTI_PC_SAMPLING=1. */
/* Whether it is wanted and CUPTI (lib, dlopen's) can: its callbacks are
 * to be enabled. */
bool pc_sampling_setup(void *lib);
/* A resource-domain callback (context created or destroyed, module
 * unloading); cbdata: its CUpti_ResourceData. */
void pc_sampling_resource(uint32_t cbid, const void *cbdata);
/* A launch or copy into ctx (a CUcontext) returned: its samples may be due. */
void pc_sampling_launched(void *ctx);
/* The clock ticked. */
void pc_sampling_tick(void);
/* The process ends: every context's samples, and sampling off. */
void pc_sampling_end(void);
/* Samples CUPTI dropped, so far. */
uint64_t pc_sampling_dropped(void);

/* The id of this thread's open NVTX range path (told to the probes), 0
 * when none. */
uint32_t nvtx_current(void);
/* The library's clock ticked (about once a second). */
void nvtx_tick(void);

#endif
