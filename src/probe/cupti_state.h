/* cupti_state.h: what became of Sonde's CUPTI library in a process --
 * recording, no CUPTI found, CUPTI held by another tool (PyTorch's
 * profiler, Nsight) -- read from the process's memory: the library's
 * exported sonde_cupti_state (src/cupti/sonde_cupti.h). Read whenever the
 * agent looks, so an agent started after the job still knows. Used by the
 * agent's loop (sonde_agent_gpu_process_cupti). */
#ifndef SONDE_PROBE_CUPTI_STATE_H
#define SONDE_PROBE_CUPTI_STATE_H

#include <stdint.h>

/* The state (enum sonde_cupti_state, >= 0) of the library at path (as the
 * agent can open it) in process pid, or a negative errno: -ENOENT, the
 * process does not map it (or is gone); -ENODATA, the file has no
 * sonde_cupti_state (an older library). */
int cupti_state__read(uint32_t pid, const char *path);

/* "starting", "recording", "no_cupti", "held", "failed"; "unknown" else. */
const char *cupti_state__name(int state);

#endif
