/* gpu_metrics.h: the agent's live GPU and NCCL state, fed event by event by
 * the probes (or by the simulator), read by the Prometheus exposition
 * (/metrics), the JSON snapshot (/json and the WebSocket stream) and the
 * alert engine. Thread-safe: events arrive on the agent's poll thread while
 * HTTP threads read.
 *
 * Names follow the seed daemon's reference exactly where it names a metric
 * (zernel_*), and Prometheus conventions for Sonde's own (sonde_*): see
 * docs/metrics.md. Kernel names are never labels. */
#ifndef SONDE_METRICS_GPU_METRICS_H
#define SONDE_METRICS_GPU_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "metrics/series.h"
#include "metrics/verdict.h"

struct gpu_metrics;
typedef struct json_t json_t;

enum gpu_copy_kind { GPU_COPY_H2H, GPU_COPY_H2D, GPU_COPY_D2H, GPU_COPY_D2D, GPU_COPY_DEFAULT };

enum nccl_op {
	NCCL_OP_ALLREDUCE,
	NCCL_OP_ALLGATHER,
	NCCL_OP_REDUCESCATTER,
	NCCL_OP_BROADCAST,
	NCCL_OP_REDUCE,
	NCCL_OP_SEND,
	NCCL_OP_RECV,
	NCCL_OP_MAX,
};
/* "allreduce", "allgather", ... (the op label). */
const char *nccl_op_name(enum nccl_op op);

struct gpu_metrics_opts {
	bool simulated;	  /* every output says so */
	const char *node; /* hostname label for the JSON snapshot; NULL: gethostname() */
};

struct gpu_metrics *gpu_metrics__new(const struct gpu_metrics_opts *opts);
void gpu_metrics__free(struct gpu_metrics *m);

/* Events. pid is the thread group id; device the CUDA device ordinal. */
void gpu_metrics__launch(struct gpu_metrics *m, uint32_t pid, uint64_t latency_ns);
void gpu_metrics__alloc(struct gpu_metrics *m, uint32_t pid, int device, uint64_t bytes);
void gpu_metrics__release(struct gpu_metrics *m, uint32_t pid, int device, uint64_t bytes);
/* A thread blocked in a synchronize call (api: "cudaStreamSynchronize"...). */
/* A kernel of pid's ran on device from start to end (ns, the GPU's clock;
 * records about in order of their end): counted, and its time on the GPU
 * added where no kernel of pid's seen before ran. */
void gpu_metrics__kernel(struct gpu_metrics *m, uint32_t pid, int device, uint64_t start,
			 uint64_t end);
/* CUPTI's memory record of pid's (Sonde's CUPTI library), of device
 * memory. */
struct gpu_cupti_mem {
	bool alloc;	/* an allocation, else a release */
	uint64_t bytes; /* allocated or released */
	enum {
		GPU_MEM_PLAIN,	       /* not from a pool */
		GPU_MEM_POOL,	       /* from a pool of pid's own: pool, pool_size hold */
		GPU_MEM_IMPORTED_POOL, /* from a pool another process exported */
	} from;
	uint64_t pool;	    /* the pool's address */
	uint64_t pool_size; /* what it holds of the device after the operation */
};
/* pid's sonde_gpu_process_memory_bytes{source="cupti"} on device follows
 * r: plain allocations and releases by their bytes; those from a pool of
 * its own leave the account at what its pools hold (a pool keeps memory
 * released to it, up to its release threshold); those from an imported
 * pool are its exporter's memory. sonde_gpu_memory_pool_bytes follows too. */
void gpu_metrics__cupti_memory(struct gpu_metrics *m, uint32_t pid, int device,
			       const struct gpu_cupti_mem *r);
/* pid's pool at address pool on device now holds size bytes (created,
 * trimmed), or is gone (destroyed): CUPTI's memory pool records. */
void gpu_metrics__cupti_pool(struct gpu_metrics *m, uint32_t pid, int device, uint64_t pool,
			     uint64_t size, bool destroyed);
void gpu_metrics__wait(struct gpu_metrics *m, uint32_t pid, const char *api, uint64_t ns);
void gpu_metrics__copy(struct gpu_metrics *m, uint32_t pid, enum gpu_copy_kind kind,
		       uint64_t bytes);
void gpu_metrics__nccl(struct gpu_metrics *m, uint32_t pid, enum nccl_op op, uint64_t bytes,
		       uint64_t ns);
void gpu_metrics__dataloader_wait(struct gpu_metrics *m, uint32_t pid, uint64_t ns);
/* Device memory capacity as learned (source: "nvml", "app", "config"). */
void gpu_metrics__device_capacity(struct gpu_metrics *m, int device, uint64_t bytes,
				  const char *source);
/* One process's device memory as the driver accounts it (NVML): its
 * contexts, allocations, VMM handles and pools, seen by the probes or not. */
struct gpu_proc_mem {
	uint32_t pid;
	int device; /* NVML's index */
	uint64_t bytes;
	int cuda_device; /* the process's CUDA ordinal of that device (agent/cuda_visible.h);
			  * -1 where not known */
};

/* Device memory in use as the driver says (NVML: every process's and the
 * driver's own, nvidia-smi's Memory-Usage), device by NVML index (below
 * GPU_METRICS_MAX_DEVICES). Exposed as sonde_gpu_device_memory_nvml_used_bytes. */
#define GPU_METRICS_MAX_DEVICES 64
void gpu_metrics__device_driver_used(struct gpu_metrics *m, int device, uint64_t bytes);

/* Orders rows by pid, then device (a qsort/bsearch comparator). */
int gpu_proc_mem__cmp(const void *a, const void *b);

/* The driver's account of every process's device memory now, replacing the
 * last one (rows at most GPU_METRICS_MAX_DRIVER_ROWS; the rest are counted in
 * sonde_agent_untracked_events_total): a process no longer listed loses its
 * series. Exposed as sonde_gpu_process_memory_bytes{source="nvml"} and, where
 * the probes saw the process's allocations on the device,
 * sonde_gpu_process_memory_unattributed_bytes. */
#define GPU_METRICS_MAX_DRIVER_ROWS 65536
void gpu_metrics__set_driver_memory(struct gpu_metrics *m, const struct gpu_proc_mem *rows,
				    size_t n);
/* The process is gone: the driver freed its memory (its memory series read
 * 0); its other series stay, with sonde_process_exit_time_seconds{pid}, until
 * gpu_metrics__expire finds them older than the grace -- a scrape after a
 * short job's end still finds what it did. A new process of the same pid
 * starts from 0. */
void gpu_metrics__process_exit(struct gpu_metrics *m, uint32_t pid);
/* Drops the series of processes that exited grace_ms or more ago. */
void gpu_metrics__expire(struct gpu_metrics *m, uint64_t grace_ms);

/* A thread of pid has been blocked for `seconds` in a synchronize after
 * collective op on communicator comm (rank of nranks); seconds 0 clears it.
 * Exposed as sonde_nccl_stuck_seconds{pid,op,rank,comm}. */
void gpu_metrics__set_stuck(struct gpu_metrics *m, uint32_t pid, enum nccl_op op, int rank,
			    int nranks, uint64_t comm, double seconds);

/* A thread tid of pid has waited `seconds` for its next batch from a
 * DataLoader, in the loop at file:line, in function (the Python frame that
 * called the iterator's __next__; "" and 0 when unknown); seconds 0 clears
 * it. Exposed as sonde_dataloader_stuck_seconds{pid,tid,file,line,function,
 * process} and the snapshot's dataloader_stuck[]. */
void gpu_metrics__set_dataloader_stuck(struct gpu_metrics *m, uint32_t pid, uint32_t tid,
				       const char *file, int line, const char *function,
				       double seconds);

/* pid's window: every thread's times (total, added to
 * sonde_process_time_seconds_total{pid,state}), its leading thread lead_tid
 * (0: none) and that thread's times, and the verdict judged on them
 * (sonde_process_verdict, sonde_process_time_share; the snapshot's
 * processes[].verdict). */
void gpu_metrics__proc_window(struct gpu_metrics *m, uint32_t pid, const struct proc_times *total,
			      const struct proc_times *lead, uint32_t lead_tid,
			      const struct verdict_out *v);

/* A thread tid of pid has been blocked `seconds` in the CUDA synchronisation
 * api (waiting for kernels or copies, not a collective), called from the
 * Python line file:line in function (the innermost Python frame; "" and 0
 * when unknown); seconds 0 clears it. Exposed as
 * sonde_cuda_sync_stuck_seconds{pid,tid,file,line,function,process,api}
 * and the snapshot's sync_stuck[]. */
void gpu_metrics__set_sync_stuck(struct gpu_metrics *m, uint32_t pid, uint32_t tid, const char *api,
				 const char *file, int line, const char *function, double seconds);

/* The name of pid's process (at most 15 characters are kept), shown beside
 * its pid in the JSON snapshot ("process"). Processes not named this way
 * are named from /proc/PID/comm when a snapshot first lists them (not
 * when the data is simulated). */
void gpu_metrics__set_name(struct gpu_metrics *m, uint32_t pid, const char *name);
/* The service pid belongs to and its job's labels ("NAME=VALUE" one per
 * line, agent/service.h; NULL or "": none), as the agent names them for its
 * profiles. Exposed as sonde_process_info{pid,service_name,job,rank,...} 1
 * and in the JSON snapshot's processes. */
void gpu_metrics__set_info(struct gpu_metrics *m, uint32_t pid, const char *service,
			   const char *labels);

/* The agent's own health, exposed as sonde_agent_* series. */
struct agent_health {
	uint64_t cpu_samples, cpu_drops;
	uint64_t gpu_events, gpu_drops;
	uint64_t probe_attached, probe_attach_failures;
	double map_fill_ratio; /* fullest BPF map, 0..1 */
};
void gpu_metrics__set_health(struct gpu_metrics *m, const struct agent_health *h);

/* Prometheus text exposition (version 0.0.4). Caller frees. */
char *gpu_metrics__prometheus(struct gpu_metrics *m, size_t *len);
/* The same families written to o (a prom_collect_fn; m is the metrics). */
struct prom_out;
void gpu_metrics__collect(void *m, struct prom_out *o);
/* The JSON snapshot: the seed's fields (gpu_utilization[] with key,
 * current_bytes, peak_bytes; cuda_latency_p50_us, cuda_latency_p99_us,
 * nccl_allreduce_p50_ms, nccl_allreduce_p99_ms, dataloader_wait_p50_ms,
 * last_update_ms) and Sonde's own. New reference; caller decrefs. */
json_t *gpu_metrics__snapshot(struct gpu_metrics *m);
/* The snapshot as compact JSON text (a ws_snapshot_fn for ws_server__start;
 * m is a struct gpu_metrics). malloc()ed, caller frees; NULL with errno set
 * on failure. */
char *gpu_metrics__snapshot_text(void *m, size_t *len);
/* Walks every current series (a series_source): the same samples as the
 * exposition, histograms as their _bucket (with le), _sum and _count series,
 * summaries as quantile, _sum and _count series. fn runs with m locked and
 * must not call back into m. */
void gpu_metrics__each(void *m, series_fn fn, void *ctx);

#endif
