/* sonde_cupti_internal.h: between the CUPTI injection library's files
 * (sonde_cupti.c, nvtx.c). */
#ifndef SONDE_CUPTI_INTERNAL_H
#define SONDE_CUPTI_INTERNAL_H

#include <stdint.h>

struct sonde_cupti_record;

/* The markers (markers.c): calls that do nothing, for the probes to read
 * their arguments. */
#define SONDE_CUPTI_EXPORT __attribute__((visibility("default")))
/* At each launch's and copy's entry: CUPTI's correlation id, and the id
 * of the thread's open NVTX ranges (0: none). */
SONDE_CUPTI_EXPORT void sonde_cupti_launch(uint32_t correlation, uint32_t nvtx);
/* What ran on the GPU, n records (at most SONDE_CUPTI_BATCH). */
SONDE_CUPTI_EXPORT void sonde_cupti_records(const struct sonde_cupti_record *r, uint32_t n);
/* CUPTI's clock against CLOCK_MONOTONIC; dropped: the records CUPTI could
 * not keep so far. */
SONDE_CUPTI_EXPORT void sonde_cupti_clock(uint64_t gpu_ns, uint64_t host_ns, uint64_t dropped);
/* An NVTX range path's id. */
SONDE_CUPTI_EXPORT void sonde_cupti_nvtx(uint32_t id, const char *path);

/* The id of this thread's open NVTX range path (told to the probes), 0
 * when none. */
uint32_t nvtx_current(void);
/* The library's clock ticked (about once a second). */
void nvtx_tick(void);

#endif
