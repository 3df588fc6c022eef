/* gpu_probes_internal.h: what gpu_probes.c and gpu_state.c share, and the
 * unit tests reach: the table of probed functions, a small hash table, and
 * the userspace state that decoding keeps (kernel names, communicators,
 * blocked threads, known processes). */
#ifndef SONDE_PROBE_GPU_PROBES_INTERNAL_H
#define SONDE_PROBE_GPU_PROBES_INTERNAL_H

#include "common/idmap.h"
#include "probe/gpu_probes.h"

/* Argument layouts: one BPF entry program (and its return program) each. */
enum gpu_class {
	GPU_CLASS_RT_LAUNCH,
	GPU_CLASS_RT_LAUNCH_EX,
	GPU_CLASS_DRV_LAUNCH,
	GPU_CLASS_DRV_LAUNCH_EX,
	GPU_CLASS_GRAPH_LAUNCH,
	GPU_CLASS_KERNEL,
	GPU_CLASS_ALLOC,
	GPU_CLASS_FREE,
	GPU_CLASS_DEVICE,
	GPU_CLASS_SYNC,
	GPU_CLASS_MEMCPY,
	GPU_CLASS_CAPACITY,
	GPU_CLASS_NCCL_COLL,
	GPU_CLASS_NCCL_GROUP,
	GPU_CLASS_NCCL_INIT,
	GPU_CLASS_CAPTURE_BEGIN,
	GPU_CLASS_CAPTURE_END,
	GPU_CLASS_GRAPH_INSTANTIATE,
	GPU_CLASS_GRAPH_ADD_KERNEL,
	GPU_CLASS_EVENT_RECORD,	  /* entry only, no record: BPF keeps a capture's events */
	GPU_CLASS_STREAM_WAIT,	  /* entry only: a stream joining a capture (GPU_EV_GRAPH) */
	GPU_CLASS_TORCH_RF_BEGIN, /* entry only: no return program */
	GPU_CLASS_TORCH_RF_END,	  /* entry only */
	GPU_CLASS_CUPTI_LAUNCH,	  /* entry only: Sonde's CUPTI library's markers */
	GPU_CLASS_CUPTI_RECORDS,
	GPU_CLASS_CUPTI_CLOCK,
	GPU_CLASS_CUPTI_NVTX,
};

struct gpu_api_info {
	const char *name;
	unsigned family; /* LIBSCAN_RT, LIBSCAN_DRV, LIBSCAN_NCCL or LIBSCAN_TORCH */
	enum gpu_class cls;
};

/* Indexed by enum gpu_api; entry 0 (GPU_API_NONE) has a NULL name. */
extern const struct gpu_api_info gpu_apis[GPU_API_MAX];

/* A table keyed by two u64s, with fixed-size values stored inline (zeroed
 * when created), dense: entries 0..n-1, found through an id map
 * (common/idmap.h) from the keys' hash to the entry's index + 1. At most
 * max entries. A value's address holds until the next put or delete. */
struct gpu_table {
	struct idmap index;
	struct gpu_key {
		uint64_t a, b;
	} * keys;
	char *vals;
	size_t vsize, n, cap, max;
};

void gpu_table__init(struct gpu_table *t, size_t vsize, size_t max);
void gpu_table__fini(struct gpu_table *t);
void *gpu_table__get(const struct gpu_table *t, uint64_t a, uint64_t b);
/* The value of (a, b), created zeroed (*created set) if absent; NULL when
 * the table is full. */
void *gpu_table__put(struct gpu_table *t, uint64_t a, uint64_t b, bool *created);
void gpu_table__del(struct gpu_table *t, uint64_t a, uint64_t b);
/* Keeps the entries keep() says yes to; keep may release what a dropped
 * value owns. */
typedef bool (*gpu_table_keep_fn)(void *ctx, uint64_t a, uint64_t b, void *val);
void gpu_table__filter(struct gpu_table *t, gpu_table_keep_fn keep, void *ctx);
/* Iteration: for (size_t i = 0; i < t->n; i++) gpu_table__val(t, i), t->keys[i] */
static inline void *gpu_table__val(const struct gpu_table *t, size_t i)
{
	return t->vals + i * t->vsize;
}

struct gpu_kernel_ent {
	uint64_t stub;
	const char *name; /* pooled in gpu_state.names */
};

struct gpu_comm_ent {
	int rank, nranks;
};

struct gpu_proc_ent {
	uint64_t start_time; /* /proc/PID/stat field 22, to tell a reused pid */
	bool has_coll;
	enum gpu_coll coll;
	uint64_t comm, coll_ts_ns;
};

/* What decoding learns and keeps. */
struct gpu_state {
	struct gpu_table kernels; /* (pid, handle) -> gpu_kernel_ent */
	struct gpu_table names;	  /* (hash, length) -> char *: every kernel name seen */
	struct gpu_table comms;	  /* (pid, comm) -> gpu_comm_ent */
	struct gpu_table blocked; /* (tid, 0) -> gpu_blocked (has_coll etc. unset) */
	struct gpu_table procs;	  /* (pid, 0) -> gpu_proc_ent */
	char name[GPU_NAME_MAX + 1];
	uint64_t bad_records;
};

void gpu_state__init(struct gpu_state *st);
void gpu_state__fini(struct gpu_state *st);
/* Decodes one ring-buffer record into ev (which borrows from data and st)
 * and updates st. Returns 0, or -EINVAL for a record of the wrong size,
 * type or API (counted in bad_records). A new process gets a zeroed
 * gpu_proc_ent; *new_pid says so. */
int gpu_state__decode(struct gpu_state *st, const void *data, size_t size, struct gpu_event *ev,
		      bool *new_pid);
/* Forgets everything about pid. */
void gpu_state__forget_pid(struct gpu_state *st, uint32_t pid);

#endif
