/* point_log.h: the per-second metric points an agent ships with each window
 * (POST /api/v1/ingest/points, docs/api.md) for the server's GPU views:
 * memory per process and device, device capacity, and per second the
 * launches, the time blocked in synchronizes, the NCCL calls and their
 * summed duration, and the shares of the last window each process's leading
 * thread spent in each state (the evidence of its verdict) -- read off the
 * live metrics (src/metrics/gpu_metrics.h), counters turned into the
 * increase since the previous second. Used by the agent's thread only. */
#ifndef SONDE_AGENT_POINT_LOG_H
#define SONDE_AGENT_POINT_LOG_H

#include <stddef.h>
#include <stdint.h>

/* The least share of a window sent as a process_time_share point: the
 * states a process spends (nearly) no time in are left out. */
#define POINT_LOG_MIN_SHARE 0.005

struct gpu_metrics;
struct point_log;

/* Names the process pid ("" or NULL when unknown). */
typedef const char *(*point_comm_fn)(void *ctx, uint32_t pid);

struct point_log *point_log__new(const char *node);
void point_log__free(struct point_log *pl);

/* Samples m at ts_ms (wall clock): one point per series, counters as their
 * increase since the previous sample (left out when 0), shares below
 * POINT_LOG_MIN_SHARE left out. */
void point_log__sample(struct point_log *pl, struct gpu_metrics *m, uint64_t ts_ms,
		       point_comm_fn comm, void *ctx);

/* The points sampled since the last call as the JSON body of
 * /api/v1/ingest/points (malloc()ed), or NULL when there are none. */
char *point_log__take(struct point_log *pl, size_t *len);

#endif
