/* sonde_cupti_internal.h: between the CUPTI injection library's files
 * (sonde_cupti.c, nvtx.c). */
#ifndef SONDE_CUPTI_INTERNAL_H
#define SONDE_CUPTI_INTERNAL_H

#include <stdint.h>

/* The id of this thread's open NVTX range path (told to the probes), 0
 * when none. */
uint32_t nvtx_current(void);
/* The library's clock ticked (about once a second). */
void nvtx_tick(void);

#endif
