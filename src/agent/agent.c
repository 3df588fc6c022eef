/* agent.c: the node daemon behind `sonde agent` and `sonde run`. It samples CPU stacks of every
 * process (bpf/cpu.bpf.c), with --offcpu times where threads block
 * (bpf/offcpu.bpf.h), probes CUDA and NCCL in every process that uses
 * them (bpf/gpu.bpf.c), keeps the live GPU state as metrics, serves them at
 * /metrics and /json (default 127.0.0.1:9091) and as a WebSocket stream
 * (127.0.0.1:9092), evaluates alert rules every second and notifies the log,
 * webhooks and Alertmanager, and cuts its profiles (cpu, gpu_launch,
 * gpu_wait, offcpu) into windows, served at /profile/TYPE. `--simulate` feeds
 * synthetic GPU telemetry instead, without BPF or root.
 *
 * One thread runs the probes (polls every few ms), the per-second work (scans,
 * stuck collectives, alerts) and the windows; the HTTP and WebSocket servers
 * have their own threads and read the thread-safe metrics and engine. */
#include "probe/bpf_counters.h"
#include "probe/pid_filter.h"
#include "agent/agent.h"
#include "common/prom.h"
#include "common/clock.h"
#include "probe/cpu_sampler.h"
#include "agent/gpu_feed.h"
#include "probe/gpu_probes.h"
#include "probe/cupti_state.h"
#include "agent/gpu_time.h"
#include "agent/gpu_trace.h"
#include "cupti/sonde_cupti.h"
#include "agent/cuda_visible.h"
#include "agent/nvml.h"
#include "agent/point_log.h"
#include "probe/host.h"
#include "probe/libscan.h"
#include "probe/libsearch.h"
#include "agent/service.h"
#include "agent/shipper.h"
#include "probe/sideband.h"
#include "agent/stack_agg.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "unwind/late.h"
#include "unwind/unwinder.h"
#include "alerts/alerts.h"
#include "metrics/gpu_metrics.h"
#include "metrics/http.h"
#include "metrics/simulate.h"
#include "net/ws_server.h"
#include "profile/profile.h"
#include "symbolize/symbolize.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Kernels and copies a window ships to the server's GPU timeline at most:
 * the longest (docs/api.md, sonde_agent_gpu_timeline_dropped_total). */
#define AGENT_GPU_TIMELINE_MAX 20000
#define AGENT_GPU_TIMELINE_MAX_TEXT "20000"

#define POLL_MS 10
#define TICK_MS 1000
#define SCAN_EVERY_TICKS 2
/* How long an exited process's series stay by default (--exited-grace): a
 * few scrapes of a Prometheus that scrapes every 15-30 s. */
#define EXITED_GRACE_MS (120 * MS_PER_SEC)
#define SIM_TICK_MS 100
#define MAX_STACKS (1u << 20)

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
	stop_signal = sig;
}

/* The host part of "HOST:PORT" ("127.0.0.1" for ":PORT"), for messages. */
static const char *host_of(const char *addr)
{
	return addr[0] == ':' ? "127.0.0.1" : addr;
}

static int host_len(const char *addr)
{
	const char *colon = strrchr(addr, ':');

	if (addr[0] == ':')
		return 9;
	return colon ? (int)(colon - addr) : (int)strlen(addr);
}

/* ---- the last window's profiles, served at /profile/TYPE --------------- */

enum {
	WIN_CPU,
	WIN_GPU_LAUNCH,
	WIN_GPU_WAIT,
	WIN_OFFCPU,
	WIN_GPU_TIME,
	WIN_GPU_MEMCPY,
	WIN_GPU_STALL,
	WIN_MAX
};
static const char *const win_names[WIN_MAX] = {"cpu",	   "gpu_launch", "gpu_wait", "offcpu",
					       "gpu_time", "gpu_memcpy", "gpu_stall"};

struct agent {
	struct agent_opts o;
	struct gpu_metrics *metrics;
	struct metrics_http *http;
	struct ws_server *ws;
	struct alert_engine *alerts;
	struct simulator *sim;
	struct nvml *nvml; /* NULL: not installed, or not started */
	struct symbolizer *sym;
	struct sideband *sb;
	struct pid_filter *pf; /* -p: the processes the BPF programs watch */
	struct cpu_sampler *cpu;
	struct stack_agg *cpu_agg;
	struct stack_agg *offcpu_agg;	/* --offcpu: blocked time by stack */
	struct service_namer *services; /* the service_name of the profiles' samples */
	struct gpu_probes *gpu;
	struct gpu_feed *feed;
	struct libsearch *search; /* CUDA/NCCL libraries on the filesystems */
	bool search_done;
	struct shipper *ship;
	struct point_log *points;
	uint64_t start_ms, window_start_wall, window_start_mono;
	uint64_t judged_ns; /* CLOCK_MONOTONIC: the verdicts' last window ended */
	uint64_t windows;

	pthread_mutex_t lock; /* the fields below: read by HTTP threads */
	struct {
		char *pprof;
		size_t len;
		uint64_t from_ms, until_ms;
		int64_t total;
	} last[WIN_MAX];
	/* The probes' own counters, copied each tick by the probing thread. */
	struct gpu_probes_stats gpu_st;
	struct gpu_time_stats time_st;	 /* the CUPTI library's launches and kernels */
	struct gpu_trace_stats trace_st; /* ... and its timeline, shipped */
	struct gpu_feed_stats feed_st;
	struct probe_count *probe_counts; /* by attached function, under lock */
	size_t nprobe_counts;
	struct proc_lib *proc_libs; /* each GPU library each process maps, under lock */
	size_t nproc_libs;
	struct pid_lost {
		uint32_t pid;
		uint64_t n;
	} * lost; /* GPU records lost to a full ring, by process; under lock */
	size_t nlost, lost_cap;
	struct sideband_stats sb_st;
	struct libsearch_stats search_st;
	struct symbolizer_stats sym_st;
	struct unwinder_stats unw_st;
	struct unw_late_stats late_st;
	struct cpu_sampler_stats cpu_st;
};

static int route_profile(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	struct agent *a = ctx;
	const char *path = http_request__path(req), *type = strrchr(path, '/') + 1;
	int w;

	for (w = 0; w < WIN_MAX && strcmp(type, win_names[w]); w++)
		;
	pthread_mutex_lock(&a->lock);
	if (w == WIN_MAX || !a->last[w].pprof) {
		rep->status = w == WIN_MAX ? 404 : 503;
		rep->body = xstrdup(
			w == WIN_MAX	? "unknown profile type: use cpu, gpu_launch, "
					  "gpu_wait, gpu_time, gpu_memcpy, gpu_stall or offcpu\n"
			: a->o.simulate ? "no profiles in --simulate mode\n"
					: "no window of this profile yet: the first one "
					  "ends --window seconds after start\n");
		rep->len = strlen(rep->body);
	} else {
		rep->content_type = "application/octet-stream";
		rep->body = xmalloc(a->last[w].len ? a->last[w].len : 1);
		memcpy(rep->body, a->last[w].pprof, a->last[w].len);
		rep->len = a->last[w].len;
	}
	pthread_mutex_unlock(&a->lock);
	return 0;
}

static int json_reply(json_t *o, struct http_reply *rep)
{
	rep->body = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	if (!rep->body)
		return -ENOMEM;
	rep->content_type = HTTP_CONTENT_JSON;
	rep->len = strlen(rep->body);
	return 0;
}

static int route_alerts(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	struct agent *a = ctx;

	if (!a->alerts)
		return json_reply(json_array(), rep);
	return json_reply(alert_engine__list(a->alerts), rep);
}

static int route_rules(void *ctx, const struct http_request *req, struct http_reply *rep)
{
	struct agent *a = ctx;

	if (!a->alerts)
		return json_reply(json_array(), rep);
	return json_reply(alert_engine__rules(a->alerts), rep);
}

/* The series of the stacks finished in userspace (src/unwind/late.h). */
static void late_collect(struct prom_out *o, const struct unw_late_stats *l, uint64_t cut)
{
	const char *why[][4] = {
		{"reason", "no_table_in_time", NULL},
		{"reason", "waiting_room_full", NULL},
		{"reason", "stack_kept", NULL},
		{"reason", "ring_buffer_full", NULL},
	};
	const uint64_t n[] = {l->waited_out, l->crowded_out, l->stack_cut, cut};

	prom__metric(o, "sonde_agent_unwind_late_stacks_total", "counter",
		     "Stacks that reached code whose unwind table was not built yet (a program "
		     "just started, a library just loaded), finished once it was.",
		     (double)l->finished);
	prom__family(o, "sonde_agent_unwind_late_cut_total", "counter",
		     "Of those, stacks cut short anyway, by reason (no_table_in_time: not built "
		     "within 10 s; waiting_room_full: over 64 MB waited; stack_kept: deeper "
		     "than the 32 KB kept; ring_buffer_full: no room to keep its end, walked by "
		     "frame pointers).");
	for (size_t i = 0; i < ARRAY_SIZE(n); i++)
		prom__sample(o, "sonde_agent_unwind_late_cut_total", why[i], (double)n[i]);
	prom__metric(o, "sonde_agent_unwind_late_waiting", "gauge",
		     "Stacks waiting for unwind tables being built.", (double)l->waiting);
}

/* How the launches Sonde's CUPTI library tells of met their kernels. */
static void gpu_time_collect(struct prom_out *o, const struct gpu_time_stats *t)
{
	prom__metric(o, "sonde_agent_gpu_time_kernels_total", "counter",
		     "Kernels from Sonde's CUPTI library joined to their launch's stack "
		     "(the gpu_time profile).",
		     (double)t->kernels);
	prom__metric(o, "sonde_agent_gpu_time_no_launch_total", "counter",
		     "Kernels whose launch was not seen (the probes came after it).",
		     (double)t->no_launch);
	prom__metric(o, "sonde_agent_gpu_time_no_kernel_total", "counter",
		     "Launches given up without their kernel (the job ended first, or CUPTI lost "
		     "the record).",
		     (double)t->no_kernel);
	prom__metric(o, "sonde_agent_gpu_time_dropped_total", "counter",
		     "Kernels left out of the gpu_time profile: its stack table was full.",
		     (double)t->drops);
	prom__metric(o, "sonde_agent_gpu_time_cupti_lost_total", "counter",
		     "Kernel records CUPTI could not keep (its buffers full), as the CUPTI "
		     "library of each process says.",
		     (double)t->cupti_lost);
	prom__metric(o, "sonde_agent_gpu_time_copies_total", "counter",
		     "Memory copies and sets from Sonde's CUPTI library joined to their call's "
		     "stack (gpu_time and gpu_memcpy).",
		     (double)t->copies);
	prom__metric(o, "sonde_agent_gpu_time_copy_bytes_total", "counter",
		     "Bytes of the copies and sets joined to their call's stack.",
		     (double)t->copy_bytes);
	prom__metric(o, "sonde_agent_gpu_stall_samples_total", "counter",
		     "GPU PC samples (SONDE_CUPTI_PC_SAMPLING=1) in the gpu_stall profile.",
		     (double)t->stall_samples);
	prom__metric(o, "sonde_agent_gpu_stall_no_stack_samples_total", "counter",
		     "... of them whose kernel's launching stack was not known yet (shown "
		     "without one).",
		     (double)t->stall_no_stack);
	prom__metric(o, "sonde_agent_gpu_stall_unknown_reason_samples_total", "counter",
		     "... of them whose stall reason's name was never told.",
		     (double)t->stall_unknown);
	prom__metric(o, "sonde_agent_gpu_stall_dropped_samples_total", "counter",
		     "GPU PC samples CUPTI dropped (its hardware buffer full), as the CUPTI "
		     "library of each process says.",
		     (double)t->stall_dropped);
	prom__metric(o, "sonde_agent_gpu_time_nvtx_unknown_total", "counter",
		     "Kernels and copies launched inside NVTX ranges whose path was never told "
		     "(shown without their ranges).",
		     (double)t->nvtx_unknown);
	prom__metric(o, "sonde_agent_gpu_time_nvtx_dropped_total", "counter",
		     "NVTX range paths not kept: 65,536 were, all processes together.",
		     (double)t->nvtx_dropped);
	prom__metric(o, "sonde_agent_gpu_time_pending_launches", "gauge",
		     "Launches waiting for their kernel now.", (double)t->pending);
}

/* The series of the GPU calls whose stacks were finished in userspace
 * (src/probe/gpu_late.h). */
static void gpu_late_collect(struct prom_out *o, const struct gpu_probes_stats *g)
{
	const char *why[][4] = {
		{"reason", "no_table_in_time", NULL},
		{"reason", "waiting_room_full", NULL},
		{"reason", "ring_buffer_full", NULL},
	};
	const uint64_t n[] = {g->late_st.waited_out, g->late_st.crowded_out,
			      g->drops[GPU_DROP_LATE]};

	prom__metric(o, "sonde_agent_gpu_late_stacks_total", "counter",
		     "GPU calls whose stacks reached code whose unwind table was being built "
		     "(a library just loaded), finished once it was; their process's events "
		     "waited behind them.",
		     (double)g->late_st.late);
	prom__family(o, "sonde_agent_gpu_late_cut_total", "counter",
		     "Of those, stacks cut short anyway, by reason (no_table_in_time: not built "
		     "within 10 s; waiting_room_full: over 64 MB waited; ring_buffer_full: no "
		     "room to keep its end, walked by frame pointers).");
	for (size_t i = 0; i < ARRAY_SIZE(n); i++)
		prom__sample(o, "sonde_agent_gpu_late_cut_total", why[i], (double)n[i]);
	prom__metric(o, "sonde_agent_gpu_late_waiting_events", "gauge",
		     "GPU events waiting now: calls whose stacks wait for a table, and the "
		     "events of their processes behind them.",
		     (double)g->late_st.waiting);
	prom__metric(o, "sonde_agent_gpu_late_wait_longest_seconds", "gauge",
		     "The longest a GPU event waited for a stack before it.",
		     (double)g->late_st.max_wait_ns / NS_PER_SEC);
}

/* The unwinder's series: its tables, and how stacks were walked. */
static void unwind_collect(struct prom_out *o, const struct unwinder_stats *u)
{
	const char *fp_reasons[][4] = {
		{"reason", "no_table", NULL},
		{"reason", "over_budget", NULL},
		{"reason", "failed", NULL},
	};
	const uint64_t fp_counts[] = {u->no_table, u->over_budget, u->failed};
	const char *how[][4] = {
		{"method", "table", NULL},
		{"method", "frame_pointer", NULL},
		{"method", "python", NULL},
	};
	const uint64_t how_counts[] = {u->counts[UNW_CNT_TABLE], u->counts[UNW_CNT_FP],
				       u->counts[UNW_CNT_PYTHON]};

	prom__metric(o, "sonde_agent_unwind_tables", "gauge",
		     "Files whose unwind tables are in the BPF maps.", (double)u->files);
	prom__metric(o, "sonde_agent_unwind_table_bytes", "gauge",
		     "Bytes of unwind table rows in the BPF maps.", (double)u->rows * 8);
	prom__metric(o, "sonde_agent_unwind_table_budget_bytes", "gauge",
		     "The unwind tables' memory budget (--unwind-memory).",
		     (double)u->capacity * 8);
	prom__metric(o, "sonde_agent_unwind_tables_evicted_total", "counter",
		     "Unwind tables evicted (least recently used) for room.", (double)u->evicted);
	prom__family(o, "sonde_agent_unwind_fallback_files_total", "counter",
		     "Files walked by frame pointers for want of an unwind table, by reason.");
	for (size_t i = 0; i < ARRAY_SIZE(fp_counts); i++)
		prom__sample(o, "sonde_agent_unwind_fallback_files_total", fp_reasons[i],
			     (double)fp_counts[i]);
	prom__family(o, "sonde_agent_unwind_frames_total", "counter",
		     "User frames stepped, by how the caller was found (python: a "
		     "Python frame read from the interpreter).");
	for (size_t i = 0; i < ARRAY_SIZE(how_counts); i++)
		prom__sample(o, "sonde_agent_unwind_frames_total", how[i], (double)how_counts[i]);
	prom__metric(o, "sonde_agent_unwind_truncated_total", "counter",
		     "Stacks cut at 128 user frames (shown under a [truncated] frame).",
		     (double)u->counts[UNW_CNT_TRUNC]);
}

/* The off-CPU profiler's series. */
static void offcpu_collect(struct prom_out *o, const struct cpu_sampler_stats *st)
{
	const char *why[][4] = {
		{"reason", "rate", NULL},
		{"reason", "ringbuf", NULL},
		{"reason", "storage", NULL},
	};
	const uint64_t n[] = {st->drops[CPU_DROP_OFFCPU_RATE], st->drops[CPU_DROP_OFFCPU_RINGBUF],
			      st->drops[CPU_DROP_OFFCPU_STORAGE]};

	prom__metric(o, "sonde_agent_offcpu_blocks_total", "counter",
		     "Blocks of threads timed by the off-CPU profiler, those under the minimum "
		     "included.",
		     (double)st->counts[CPU_CNT_OFFCPU_BLOCKS]);
	prom__metric(o, "sonde_agent_offcpu_short_blocks_total", "counter",
		     "Blocks under the minimum (--offcpu-min): counted, not recorded.",
		     (double)st->counts[CPU_CNT_OFFCPU_SHORT]);
	prom__metric(o, "sonde_agent_offcpu_short_seconds_total", "counter",
		     "The time of the blocks under the minimum.",
		     (double)st->counts[CPU_CNT_OFFCPU_SHORT_NS] / NS_PER_SEC);
	prom__metric(o, "sonde_agent_offcpu_events_total", "counter",
		     "Waits of at least the minimum handed over with their stacks.",
		     (double)st->counts[CPU_CNT_OFFCPU_WAITS]);
	prom__metric(o, "sonde_agent_offcpu_seconds_total", "counter", "The time of those waits.",
		     (double)st->counts[CPU_CNT_OFFCPU_WAIT_NS] / NS_PER_SEC);
	prom__family(o, "sonde_agent_offcpu_dropped_total", "counter",
		     "Waits of at least the minimum lost, by reason (rate: over --offcpu-rate; "
		     "ringbuf: the ring buffer full; storage: no room to keep one).");
	for (size_t i = 0; i < ARRAY_SIZE(n); i++)
		prom__sample(o, "sonde_agent_offcpu_dropped_total", why[i], (double)n[i]);
	prom__metric(o, "sonde_agent_offcpu_dropped_seconds_total", "counter",
		     "The time of the waits lost.",
		     (double)st->counts[CPU_CNT_OFFCPU_DROPPED_NS] / NS_PER_SEC);
}

/* Entries into one attached function of one file (the probes' own count). */
struct probe_count {
	const char *path, *symbol; /* owned by the GPU probes, which outlive the server */
	uint64_t calls;
};

struct probe_counts {
	struct probe_count *v;
	size_t n, cap;
};

static void add_probe_count(void *ctx, const struct gpu_probe_info *p)
{
	struct probe_counts *pc = ctx;

	if (p->err || p->alias_of)
		return;
	xgrow((void **)&pc->v, &pc->cap, pc->n + 1, sizeof(*pc->v));
	pc->v[pc->n++] = (struct probe_count){p->path, p->symbol, p->calls};
}

/* A CUDA, NCCL or PyTorch library file a process maps, and whether the
 * probes are on it. */
struct proc_lib {
	uint32_t pid;
	char *file;
	int err;
	int cupti; /* Sonde's CUPTI library: its state (cupti_state__read) */
};

struct proc_libs {
	struct proc_lib *v;
	size_t n, cap;
};

static void add_proc_lib(void *ctx, uint32_t pid, const char *file, int err)
{
	struct proc_libs *pl = ctx;

	bool cupti = !err && libscan_classify(file) == LIBSCAN_CUPTI;

	xgrow((void **)&pl->v, &pl->cap, pl->n + 1, sizeof(*pl->v));
	pl->v[pl->n++] = (struct proc_lib){pid, xstrdup(file), err,
					   cupti ? cupti_state__read(pid, file) : -ENOENT};
}

static void free_proc_libs(struct proc_lib *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].file);
	free(v);
}

static void emit_proc_libs(struct agent *a, struct prom_out *o)
{
	char pid[16];
	const char *l[] = {"pid", pid, "file", NULL, "state", NULL, NULL};

	prom__family(o, "sonde_agent_gpu_process_library", "gauge",
		     "1 for each CUDA, NCCL or PyTorch library file each process maps, as the "
		     "last scan found it (state: attached, the probes are on it; "
		     "no_functions, it holds none of the probed functions; unreadable, it "
		     "could not be read).");
	for (size_t i = 0; i < a->nproc_libs; i++) {
		const struct proc_lib *p = &a->proc_libs[i];

		snprintf(pid, sizeof(pid), "%u", p->pid);
		l[3] = p->file;
		l[5] = !p->err ? "attached" : p->err == -ENODATA ? "no_functions" : "unreadable";
		prom__sample(o, "sonde_agent_gpu_process_library", l, 1);
	}
	/* Each process's files come together. */
	prom__family(o, "sonde_agent_gpu_process_kernel_timing", "gauge",
		     "1 for a CUDA process whose Sonde CUPTI library records (its kernels are "
		     "timed on the GPU), 0 for one that runs without it or whose CUPTI is not "
		     "Sonde's (sonde_agent_gpu_process_cupti says why).");
	for (size_t i = 0, j; i < a->nproc_libs; i = j) {
		unsigned families = 0;
		int cupti = -ENOENT;

		for (j = i; j < a->nproc_libs && a->proc_libs[j].pid == a->proc_libs[i].pid; j++) {
			families |= libscan_classify(a->proc_libs[j].file);
			if (a->proc_libs[j].cupti >= 0)
				cupti = a->proc_libs[j].cupti;
		}
		if (!(families & (LIBSCAN_RT | LIBSCAN_DRV)))
			continue;
		snprintf(pid, sizeof(pid), "%u", a->proc_libs[i].pid);
		prom__sample(o, "sonde_agent_gpu_process_kernel_timing",
			     (const char *[]){"pid", pid, NULL},
			     cupti == SONDE_CUPTI_STARTING || cupti == SONDE_CUPTI_RECORDING);
	}
	prom__family(o, "sonde_agent_gpu_process_cupti", "gauge",
		     "1 for each process that loaded Sonde's CUPTI library, by what became of it "
		     "(state: starting, recording, no_cupti -- no CUPTI library found --, held -- "
		     "another tool, PyTorch's profiler or Nsight, holds CUPTI: its kernels are "
		     "not timed, the job runs on --, failed).");
	for (size_t i = 0; i < a->nproc_libs; i++) {
		const struct proc_lib *p = &a->proc_libs[i];

		if (p->cupti < 0)
			continue;
		snprintf(pid, sizeof(pid), "%u", p->pid);
		prom__sample(
			o, "sonde_agent_gpu_process_cupti",
			(const char *[]){"pid", pid, "state", cupti_state__name(p->cupti), NULL},
			1);
	}
}

/* Read in the loop's thread (the probes are not thread-safe), shown by the
 * metrics server's. */
static void update_probe_counts(struct agent *a)
{
	struct probe_counts pc = {0};
	struct probe_count *old;
	size_t keep = 0;

	gpu_probes__each_probe(a->gpu, add_probe_count, &pc);
	/* Only the files some process called into (each file's functions come
	 * together): the library search may attach to hundreds never used. */
	for (size_t i = 0, j; i < pc.n; i = j) {
		uint64_t sum = 0;

		for (j = i; j < pc.n && pc.v[j].path == pc.v[i].path; j++)
			sum += pc.v[j].calls;
		if (sum)
			for (size_t k = i; k < j; k++)
				pc.v[keep++] = pc.v[k];
	}
	pc.n = keep;
	pthread_mutex_lock(&a->lock);
	old = a->probe_counts;
	a->probe_counts = pc.v;
	a->nprobe_counts = pc.n;
	pthread_mutex_unlock(&a->lock);
	free(old);
}

/* The same for each process's GPU library files. */
static void update_proc_libs(struct agent *a)
{
	struct proc_libs pl = {0};
	struct proc_lib *old;
	size_t old_n;

	gpu_probes__each_process_lib(a->gpu, add_proc_lib, &pl);
	pthread_mutex_lock(&a->lock);
	old = a->proc_libs;
	old_n = a->nproc_libs;
	a->proc_libs = pl.v;
	a->nproc_libs = pl.n;
	pthread_mutex_unlock(&a->lock);
	free_proc_libs(old, old_n);
}

static void add_lost(void *ctx, uint32_t pid, uint64_t n)
{
	struct agent *a = ctx;
	size_t i;

	for (i = 0; i < a->nlost && a->lost[i].pid != pid; i++)
		;
	if (i == a->nlost) {
		/* Said once per process; the metric follows the count. */
		pr_warn("pid %u (%s): GPU events lost, the probes' ring buffer was full (%llu so "
			"far, sonde_agent_gpu_lost_events_total) -- a bigger one: "
			"SONDE_GPU_RINGBUF=64M",
			pid, a->feed ? gpu_feed__name(a->feed, pid) : "?", (unsigned long long)n);
		xgrow((void **)&a->lost, &a->lost_cap, a->nlost + 1, sizeof(*a->lost));
		a->lost[a->nlost++].pid = pid;
	}
	a->lost[i].n = n;
}

/* Read in the loop's thread, shown by the metrics server's. */
static void update_lost(struct agent *a)
{
	pthread_mutex_lock(&a->lock);
	gpu_probes__each_lost(a->gpu, add_lost, a);
	pthread_mutex_unlock(&a->lock);
}

static void emit_lost(struct agent *a, struct prom_out *o)
{
	char pid[16];

	prom__family(o, "sonde_agent_gpu_lost_events_total", "counter",
		     "CUDA and NCCL events of each process lost to a full ring buffer (the "
		     "ringbuf reason of sonde_agent_gpu_drops_total, by pid).");
	for (size_t i = 0; i < a->nlost; i++) {
		const char *l[] = {"pid", pid, NULL};

		snprintf(pid, sizeof(pid), "%u", a->lost[i].pid);
		prom__sample(o, "sonde_agent_gpu_lost_events_total", l, (double)a->lost[i].n);
	}
}

static void emit_probe_counts(struct agent *a, struct prom_out *o)
{
	prom__family(o, "sonde_agent_gpu_probe_calls_total", "counter",
		     "Calls into each probed CUDA, NCCL or PyTorch function of each file "
		     "some process called into, in every process, as its probe saw them: a "
		     "function the programs reach another way (a probe that never fires) "
		     "stays at 0.");
	for (size_t i = 0; i < a->nprobe_counts; i++) {
		const struct probe_count *c = &a->probe_counts[i];
		const char *l[] = {"file", c->path, "function", c->symbol, NULL};

		prom__sample(o, "sonde_agent_gpu_probe_calls_total", l, (double)c->calls);
	}
}

/* The profiler's own series on /metrics. */
static void agent_collect(void *ctx, struct prom_out *o)
{
	struct agent *a = ctx;

	pthread_mutex_lock(&a->lock);
	prom__metric(o, "sonde_agent_profile_windows_total", "counter",
		     "Profile windows completed.", (double)a->windows);
	prom__family(o, "sonde_agent_profile_last_window_total", "gauge",
		     "Sum of the last window's values, by profile type (samples, launches, "
		     "nanoseconds).");
	for (int w = 0; w < WIN_MAX; w++) {
		const char *l[] = {"type", win_names[w], NULL};

		if (a->last[w].pprof)
			prom__sample(o, "sonde_agent_profile_last_window_total", l,
				     (double)a->last[w].total);
	}
	if (a->gpu) {
		prom__metric(o, "sonde_agent_gpu_new_libraries_total", "counter",
			     "Processes seen mapping a CUDA or NCCL library no probe was on yet.",
			     (double)a->gpu_st.new_libs);
		prom__metric(o, "sonde_agent_gpu_holds_total", "counter",
			     "Processes stopped in their loader until the probes were attached, "
			     "or the unwind tables of their files built.",
			     (double)a->gpu_st.holds);
		prom__metric(o, "sonde_agent_gpu_hold_seconds_total", "counter",
			     "Time processes were held in their loader.",
			     (double)a->gpu_st.hold_ns / NS_PER_SEC);
		prom__metric(o, "sonde_agent_gpu_hold_longest_seconds", "gauge",
			     "The longest a process was held in its loader.",
			     (double)a->gpu_st.hold_max_ns / NS_PER_SEC);
		prom__metric(
			o, "sonde_agent_gpu_holds_capped_total", "counter",
			"Holds ended at the bound (SONDE_GPU_HOLD_MAX_MS) with unwind tables of "
			"its files still being built: its first stacks through them may be cut.",
			(double)a->gpu_st.holds_capped);
		prom__family(o, "sonde_agent_gpu_hold_missed_total", "counter",
			     "Processes that mapped a CUDA or NCCL library no probe was on and "
			     "were not held for the attach, as they should have been: their first "
			     "calls may be missed (reason: busy, the agent had not polled for 2 s; "
			     "signal, the stop could not be sent).");
		for (int i = 0; i < HOLD_MISSED_MAX; i++) {
			const char *l[] = {"reason", gpu_hold_missed_name(i), NULL};

			prom__sample(o, "sonde_agent_gpu_hold_missed_total", l,
				     (double)a->gpu_st.hold_missed[i]);
		}
		gpu_late_collect(o, &a->gpu_st);
		gpu_time_collect(o, &a->time_st);
		prom__metric(o, "sonde_agent_gpu_timeline_spans_total", "counter",
			     "Kernels and copies of Sonde's CUPTI library shipped to the server's "
			     "GPU timeline (POST /api/v1/ingest/spans).",
			     (double)a->trace_st.shipped);
		prom__metric(o, "sonde_agent_gpu_timeline_dropped_total", "counter",
			     "Kernels and copies left out of the GPU timeline: past the window's "
			     "bound (" AGENT_GPU_TIMELINE_MAX_TEXT " a window, the longest kept).",
			     (double)a->trace_st.dropped);
		emit_probe_counts(a, o);
		emit_proc_libs(a, o);
		emit_lost(a, o);
		prom__metric(o, "sonde_agent_gpu_unknown_kernel_launches_total", "counter",
			     "Kernel launches no name was found for, anywhere: not from the "
			     "driver's lookups, the host stub's symbol, nor nvcc's stub among the "
			     "callers (\"[unknown kernel]\" in the gpu_launch profile).",
			     (double)a->feed_st.unknown_kernels);
		prom__family(o, "sonde_agent_gpu_time_launch_stacks_total", "counter",
			     "Launches Sonde's CUPTI library told of, by where their stack came "
			     "from: the probed launch call's own record, or the library's marker.");
		prom__sample(o, "sonde_agent_gpu_time_launch_stacks_total",
			     (const char *[]){"from", "launch_probe", NULL},
			     (double)a->feed_st.cupti_from_launch);
		prom__sample(o, "sonde_agent_gpu_time_launch_stacks_total",
			     (const char *[]){"from", "marker", NULL},
			     (double)a->feed_st.cupti_from_marker);
		prom__metric(o, "sonde_agent_gpu_library_search_done", "gauge",
			     "1 once the search of the filesystems for CUDA and NCCL libraries is "
			     "over (and what it found attached).",
			     a->search_done || !a->search);
		prom__metric(o, "sonde_agent_gpu_library_search_files", "gauge",
			     "Files the search of the filesystems looked at.",
			     (double)a->search_st.entries);
	}
	if (a->sb) {
		prom__metric(o, "sonde_agent_process_records_total", "counter",
			     "The kernel's exec, fork, exit and mapping records applied.",
			     (double)a->sb_st.records);
		prom__metric(o, "sonde_agent_process_records_lost_total", "counter",
			     "The kernel's process records lost to a full ring.",
			     (double)a->sb_st.lost);
		prom__metric(o, "sonde_agent_symbolizer_processes", "gauge",
			     "Processes the symbolizer knows now, exited ones not yet forgotten "
			     "included.",
			     (double)a->sym_st.procs);
		prom__metric(o, "sonde_agent_symbolizer_objects_total", "counter",
			     "Executable files whose symbols were read.",
			     (double)a->sym_st.objects_loaded);
	}
	if (a->cpu) {
		unwind_collect(o, &a->unw_st);
		late_collect(o, &a->late_st, a->cpu_st.drops[CPU_DROP_USTACK]);
	}
	/* Every counter of the BPF programs (bpf/counters.h). */
	if (a->cpu || a->offcpu_agg) {
		bpf_counters__emit(o, &bpf_cpu_drops, a->cpu_st.drops);
		bpf_counters__emit(o, &bpf_cpu_counts, a->cpu_st.counts);
		bpf_counters__emit(o, &bpf_unw_counts, a->unw_st.counts);
	}
	if (a->gpu) {
		bpf_counters__emit(o, &bpf_gpu_drops, a->gpu_st.drops);
		bpf_counters__emit(o, &bpf_gpu_counts, a->gpu_st.counts);
	}
	if (a->offcpu_agg)
		offcpu_collect(o, &a->cpu_st);
	pthread_mutex_unlock(&a->lock);
}

/* ---- windows ----------------------------------------------------------- */

static void keep_window(struct agent *a, int w, struct profile *p, uint64_t from, uint64_t until)
{
	char *buf = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&buf, &size);
	int err = f ? profile__write_pprof(p, f) : -errno;

	if (f && fclose(f) && !err)
		err = -errno;
	if (err) {
		pr_warn("can't encode the %s profile of the window: %s", win_names[w],
			strerror(-err));
		free(buf);
		return;
	}
	if (a->ship) {
		char *copy = xmalloc(size ? size : 1);

		char key[256];

		memcpy(copy, buf, size);
		/* Unique per agent run and window. */
		snprintf(key, sizeof(key), "%s/%" PRIu64 "/%" PRIu64 "/%s",
			 a->o.node ? a->o.node : "", a->start_ms, a->windows, win_names[w]);
		shipper__window(a->ship, win_names[w], from, until, key, copy, size);
	}
	pthread_mutex_lock(&a->lock);
	free(a->last[w].pprof);
	a->last[w].pprof = buf;
	a->last[w].len = size;
	a->last[w].from_ms = from;
	a->last[w].until_ms = until;
	a->last[w].total = p->total;
	pthread_mutex_unlock(&a->lock);
}

static struct profile *window_profile(int w, int freq, uint64_t from, uint64_t until)
{
	struct profile *p;

	if (w == WIN_CPU)
		p = profile__new("cpu", "nanoseconds", NS_PER_SEC / freq);
	else if (w == WIN_GPU_LAUNCH)
		p = profile__new("gpu_launch", "launches", 1);
	else if (w == WIN_GPU_WAIT)
		p = profile__new("gpu_wait", "nanoseconds", 1);
	else if (w == WIN_GPU_TIME)
		p = profile__new("gpu_time", "nanoseconds", 1);
	else if (w == WIN_GPU_MEMCPY)
		p = profile__new("gpu_memcpy", "bytes", 1);
	else if (w == WIN_GPU_STALL)
		p = profile__new("gpu_stall", "samples", 1);
	else
		p = profile__new("offcpu", "nanoseconds", 1);
	if (p) {
		p->time_ns = (int64_t)from * NS_PER_MS;
		p->duration_ns = (int64_t)(until - from) * NS_PER_MS;
	}
	return p;
}

static void end_window(struct agent *a)
{
	uint64_t from = a->window_start_wall, until = wall_ms();
	struct profile *p[WIN_MAX] = {0};
	int err;

	if (a->cpu_agg) {
		sideband__poll(a->sb);
		cpu_sampler__poll(a->cpu);
	}
	/* What bounded each GPU process in the window: first, while what the
	 * probes say of waits under way is fresh; before the feed forgets
	 * the processes that exited. */
	if (a->feed) {
		uint64_t now = mono_ns();

		gpu_feed__judge(a->feed, a->gpu, now, now - a->judged_ns, NULL, NULL);
		a->judged_ns = now;
	}
	if (a->cpu_agg) {
		p[WIN_CPU] = window_profile(WIN_CPU, a->o.freq, from, until);
		if (p[WIN_CPU] && (err = stack_agg__to_profile(a->cpu_agg, p[WIN_CPU])))
			pr_warn("can't build the CPU profile of the window: %s", strerror(-err));
		stack_agg__reset(a->cpu_agg);
	}
	if (a->offcpu_agg) {
		p[WIN_OFFCPU] = window_profile(WIN_OFFCPU, 1, from, until);
		if (p[WIN_OFFCPU] && (err = stack_agg__to_profile(a->offcpu_agg, p[WIN_OFFCPU])))
			pr_warn("can't build the off-CPU profile of the window: %s",
				strerror(-err));
		stack_agg__reset(a->offcpu_agg);
	}
	if (a->feed && a->sym) {
		p[WIN_GPU_LAUNCH] = window_profile(WIN_GPU_LAUNCH, 1, from, until);
		p[WIN_GPU_WAIT] = window_profile(WIN_GPU_WAIT, 1, from, until);
		/* Before the launch and wait profiles, which forget the exited
		 * processes. */
		p[WIN_GPU_TIME] = window_profile(WIN_GPU_TIME, 1, from, until);
		if (p[WIN_GPU_TIME] && gpu_feed__gpu_time(a->feed, p[WIN_GPU_TIME]))
			pr_warn("can't build the gpu_time profile of the window");
		p[WIN_GPU_MEMCPY] = window_profile(WIN_GPU_MEMCPY, 1, from, until);
		if (p[WIN_GPU_MEMCPY] && gpu_feed__gpu_memcpy(a->feed, p[WIN_GPU_MEMCPY]))
			pr_warn("can't build the gpu_memcpy profile of the window");
		/* Only where a job samples its PCs (SONDE_CUPTI_PC_SAMPLING=1). */
		p[WIN_GPU_STALL] = window_profile(WIN_GPU_STALL, 1, from, until);
		if (p[WIN_GPU_STALL] && gpu_feed__gpu_stall_window(a->feed, p[WIN_GPU_STALL]))
			pr_warn("can't build the gpu_stall profile of the window");
		if (p[WIN_GPU_STALL] && !p[WIN_GPU_STALL]->total) {
			profile__free(p[WIN_GPU_STALL]);
			p[WIN_GPU_STALL] = NULL;
		}
		if ((err = gpu_feed__profiles(a->feed, p[WIN_GPU_LAUNCH], p[WIN_GPU_WAIT])))
			pr_warn("can't build the GPU profiles of the window: %s", strerror(-err));
	}
	for (int w = 0; w < WIN_MAX; w++) {
		if (p[w])
			keep_window(a, w, p[w], from, until);
		profile__free(p[w]);
	}
	if (a->points) {
		size_t len;
		char *body = point_log__take(a->points, &len);

		if (body)
			shipper__points(a->ship, body, len, until);
	}
	/* The window's kernels and copies, on the wall clock, for the
	 * server's GPU timeline. */
	if (a->ship && a->feed && gpu_feed__trace(a->feed)) {
		int64_t real_minus_mono = (int64_t)wall_ns() - (int64_t)mono_ns();
		size_t len, n;
		char *body = gpu_trace__take_json(gpu_feed__trace(a->feed), a->o.node,
						  real_minus_mono, &len, &n);

		if (body)
			shipper__spans(a->ship, body, len, until);
	}
	/* The windows that needed them are written: forget exited processes
	 * (a long-running agent would otherwise keep every pid it saw). */
	if (a->sym) {
		symbolizer__forget_exited(a->sym);
		if (a->cpu_agg)
			stack_agg__forget_pids(a->cpu_agg);
		if (a->offcpu_agg)
			stack_agg__forget_pids(a->offcpu_agg);
	}
	if (a->services)
		service_namer__forget_exited(a->services);
	pthread_mutex_lock(&a->lock);
	a->windows++;
	pthread_mutex_unlock(&a->lock);
	a->window_start_wall = until;
	a->window_start_mono = mono_ms();
}

/* ---- the loop ---------------------------------------------------------- */

/* A sample goes to the window's profile, and is the time on a CPU of its
 * thread for the verdict of its process (if a GPU process). */
static void on_cpu_sample(void *ctx, const struct stack *s)
{
	struct agent *a = ctx;

	stack_agg__add(a->cpu_agg, s);
	if (a->feed)
		gpu_feed__on_cpu(a->feed, s->pid, s->tid, NS_PER_SEC / (unsigned)a->o.freq);
}

static void on_offcpu(void *ctx, const struct offcpu_wait *w)
{
	struct agent *a = ctx;

	stack_agg__add_leaf(a->offcpu_agg, w->stack, NULL, w->blocked_ns);
	if (a->feed)
		gpu_feed__off_cpu(a->feed, w->stack->pid, w->stack->tid, w->syscall, w->blocked_ns);
}

static const char *service_of(void *ctx, uint32_t pid, const char *comm, const char **labels)
{
	const char *svc = service_namer__name(ctx, pid, comm);

	*labels = service_namer__labels(ctx, pid);
	return svc;
}

/* What /proc said of a process is stale once it execs, and belongs to
 * another process once its pid is reused (a fork); after its exit it
 * still names the samples drained later, until the window ends. */
static void on_process_record(void *ctx, const struct sideband_rec *r)
{
	struct service_namer *sn = ctx;

	if (r->kind == SIDEBAND_COMM && r->exec)
		service_namer__forget(sn, r->pid);
	else if (r->kind == SIDEBAND_FORK && r->pid != r->ppid)
		service_namer__forget(sn, r->pid);
	else if (r->kind == SIDEBAND_EXIT && r->pid == r->tid)
		service_namer__exited(sn, r->pid);
}

static void update_health(struct agent *a)
{
	struct agent_health h = {0};

	if (a->cpu) {
		struct cpu_sampler_stats cs;
		struct stack_agg_stats as;

		cpu_sampler__stats(a->cpu, &cs);
		stack_agg__stats(a->cpu_agg, &as);
		h.cpu_samples = cs.received;
		h.cpu_drops = cs.drops[CPU_DROP_RINGBUF] + as.dropped;
		pthread_mutex_lock(&a->lock);
		a->cpu_st = cs;
		pthread_mutex_unlock(&a->lock);
	}
	if (a->gpu) {
		struct gpu_probes_stats gs;

		gpu_probes__stats(a->gpu, &gs);
		h.gpu_events = gs.received;
		h.gpu_drops = gs.drops_total;
		h.probe_attached = gs.probes_attached;
		h.probe_attach_failures = gs.probes_failed;
		h.map_fill_ratio = gs.map_fill;
		update_probe_counts(a);
		update_proc_libs(a);
		update_lost(a);
		pthread_mutex_lock(&a->lock);
		a->gpu_st = gs;
		if (a->feed) {
			gpu_feed__stats(a->feed, &a->feed_st);
			gpu_feed__gpu_time_stats(a->feed, &a->time_st);
			if (gpu_feed__trace(a->feed))
				gpu_trace__stats(gpu_feed__trace(a->feed), &a->trace_st);
		}
		pthread_mutex_unlock(&a->lock);
	}
	if (a->cpu) {
		pthread_mutex_lock(&a->lock);
		unwinder__stats(cpu_sampler__unwinder(a->cpu), &a->unw_st);
		cpu_sampler__late_stats(a->cpu, &a->late_st);
		pthread_mutex_unlock(&a->lock);
	}
	if (a->sb) {
		pthread_mutex_lock(&a->lock);
		sideband__stats(a->sb, &a->sb_st);
		symbolizer__stats(a->sym, &a->sym_st);
		pthread_mutex_unlock(&a->lock);
	}
	gpu_metrics__set_health(a->metrics, &h);
}

static const char *feed_comm(void *feed, uint32_t pid)
{
	return feed ? gpu_feed__comm(feed, pid) : NULL;
}

static void attach_found(void *ctx, const char *path)
{
	struct agent *a = ctx;

	gpu_probes__attach_path(a->gpu, path);
	/* Many files may come at once: a process held for its library
	 * meanwhile is let go between them. */
	gpu_probes__poll(a->gpu, 0);
}

/* Attaches what the filesystem search found since the last tick. */
static void attach_searched(struct agent *a)
{
	struct libsearch_stats st;
	bool done;

	if (!a->search || a->search_done)
		return;
	done = libsearch__drain(a->search, attach_found, a);
	libsearch__stats(a->search, &st);
	pthread_mutex_lock(&a->lock);
	a->search_st = st;
	a->search_done = done;
	pthread_mutex_unlock(&a->lock);
	if (done)
		pr_info("GPU probes: searched %llu files on %llu filesystems in %.1f s, %llu "
			"CUDA/NCCL library files%s",
			(unsigned long long)st.entries, (unsigned long long)st.mounts,
			(double)st.ms / MS_PER_SEC, (unsigned long long)st.found,
			st.cut ? " (stopped at its bound)" : "");
}

static bool pid_followed(const struct agent *a, uint32_t pid)
{
	for (int i = 0; i < a->o.npids; i++)
		if ((uint32_t)a->o.pids[i] == pid)
			return true;
	return !a->o.npids;
}

/* Which CUDA device of its process each row's GPU is (rows sorted by pid:
 * each process's environment read once). */
static void cuda_devices_of(struct agent *a, struct gpu_proc_mem *rows, size_t n)
{
	int ndevs, map[CUDA_VISIBLE_MAX], nmap = 0;
	const char *const *uuids = nvml__uuids(a->nvml, &ndevs);

	for (size_t i = 0; i < n; i++) {
		if (!i || rows[i].pid != rows[i - 1].pid)
			nmap = cuda_visible__of_pid(rows[i].pid, uuids, ndevs, map,
						    CUDA_VISIBLE_MAX);
		rows[i].cuda_device = -1;
		for (int j = 0; j < nmap; j++)
			if (map[j] == rows[i].device)
				rows[i].cuda_device = j;
	}
}

/* The driver's account of each process's device memory, beside what the
 * probes saw: a few ioctls per device, once a tick. */
static void poll_nvml(struct agent *a)
{
	uint64_t totals[NVML_MAX_DEVICES], used[NVML_MAX_DEVICES];
	const struct gpu_proc_mem *rows;
	struct gpu_proc_mem *kept;
	size_t n, k = 0;
	int ndevs;

	if (!a->nvml)
		return;
	ndevs = nvml__device_memory(a->nvml, totals, used, NVML_MAX_DEVICES);
	for (int i = 0; i < ndevs; i++)
		gpu_metrics__device_driver_used(a->metrics, i, used[i]);
	if (nvml__process_memory(a->nvml, &rows, &n))
		return;
	kept = n ? malloc(n * sizeof(*kept)) : NULL;
	if (n && !kept)
		return;
	for (size_t i = 0; i < n; i++)
		if (pid_followed(a, rows[i].pid))
			kept[k++] = rows[i];
	cuda_devices_of(a, kept, k);
	gpu_metrics__set_driver_memory(a->metrics, kept, k);
	free(kept);
}

static void tick(struct agent *a, uint64_t ticks)
{
	uint64_t now = mono_ms();

	if (a->gpu) {
		attach_searched(a);
		if (ticks % SCAN_EVERY_TICKS == 0)
			gpu_probes__scan(a->gpu);
		gpu_feed__check_blocked(a->feed, a->gpu, now * NS_PER_MS);
	}
	poll_nvml(a);
	gpu_metrics__expire(a->metrics,
			    a->o.exited_grace_ms ? a->o.exited_grace_ms : EXITED_GRACE_MS);
	update_health(a);
	if (a->points)
		point_log__sample(a->points, a->metrics, wall_ms(), feed_comm, a->feed);
	if (a->alerts)
		alert_engine__eval(a->alerts, wall_ms(), gpu_metrics__each, a->metrics);
}

static int run_loop(struct agent *a)
{
	uint64_t start = mono_ms(), next_tick = start + TICK_MS, next_sim = start;
	uint64_t deadline = a->o.duration_ms ? start + a->o.duration_ms : 0, ticks = 0;

	a->window_start_mono = start;
	a->window_start_wall = wall_ms();
	a->judged_ns = mono_ns();
	while (!stop_signal) {
		uint64_t now;

		if (a->gpu) {
			int n = gpu_probes__poll(a->gpu, POLL_MS);

			if (n < 0 && n != -EINTR)
				pr_warn("can't read the GPU probes' ring buffer: %s", strerror(-n));
		} else {
			struct timespec ts = {0, POLL_MS * NS_PER_MS};

			nanosleep(&ts, NULL);
		}
		/* The kernel's process records before the samples of those
		 * processes. */
		if (a->sb)
			sideband__poll(a->sb);
		if (a->cpu)
			cpu_sampler__poll(a->cpu);
		now = mono_ms();
		if (a->sim && now >= next_sim) {
			simulator__tick(a->sim, now);
			next_sim = now + SIM_TICK_MS;
		}
		if (now >= next_tick) {
			tick(a, ++ticks);
			next_tick += TICK_MS;
			if (next_tick <= now) /* the machine stalled: don't catch up */
				next_tick = now + TICK_MS;
		}
		if (a->o.window_ms && now - a->window_start_mono >= a->o.window_ms)
			end_window(a);
		if (deadline && now >= deadline)
			break;
	}
	return 0;
}

/* ---- set-up ------------------------------------------------------------ */

static int setup_alerts(struct agent *a)
{
	struct alert_defaults d = {
		.gpu_memory_ratio = a->o.memory_ratio,
		.nccl_stuck_seconds = a->o.nccl_stuck_s,
		.dataloader_stuck_seconds = a->o.dataloader_stuck_s,
		.sync_stuck_seconds = a->o.sync_stuck_s,
		.launch_p99_seconds = a->o.launch_p99_s,
	};
	char err[512], url[128];

	if (a->o.rules) {
		a->alerts = alert_engine__load(a->o.rules, err, sizeof(err));
		if (!a->alerts) {
			pr_err("%s", err);
			return -EINVAL;
		}
	} else {
		a->alerts = alert_engine__new_defaults(&d);
		if (!a->alerts) {
			pr_err("can't build the default alert rules");
			return -ENOMEM;
		}
	}
	if (a->o.alert_resend_ms)
		alert_engine__set_delivery(
			a->alerts, &(struct alert_delivery){.resend_ms = a->o.alert_resend_ms});
	if (a->o.node)
		alert_engine__set_external_label(a->alerts, "node", a->o.node);
	snprintf(url, sizeof(url), "http://%s:%d/alerts", a->o.node ? a->o.node : "localhost",
		 metrics_http__port(a->http));
	alert_engine__set_generator_url(a->alerts, url);
	for (int i = 0; i < a->o.nwebhooks; i++)
		if (alert_engine__add_webhook(a->alerts, a->o.webhooks[i])) {
			pr_err("invalid --webhook URL '%s': expected http://HOST[:PORT]/PATH",
			       a->o.webhooks[i]);
			return -EINVAL;
		}
	if (a->o.server) {
		/* The server keeps the alerts of its agents for its UI, and
		 * learns the firing ones again after a restart. */
		snprintf(url, sizeof(url), "%s/api/v1/alerts", a->o.server);
		if (alert_engine__add_server_auth(a->alerts, url, a->o.tls, a->o.token)) {
			pr_err("invalid --server URL '%s': expected http://HOST:PORT", a->o.server);
			return -EINVAL;
		}
	}
	for (int i = 0; i < a->o.nalertmanagers; i++)
		if (alert_engine__add_alertmanager(a->alerts, a->o.alertmanagers[i])) {
			pr_err("invalid --alertmanager URL '%s': expected http://HOST:PORT",
			       a->o.alertmanagers[i]);
			return -EINVAL;
		}
	return 0;
}

/* The -p pids: the BPF programs' filter, shared by the CPU sampler and
 * the GPU probes, made with them. -1 after printing why. */
static int add_pids(struct agent *a)
{
	if (!a->o.npids)
		return 0;
	a->pf = pid_filter__new();
	if (!a->pf)
		return -1;
	for (int i = 0; i < a->o.npids; i++) {
		int err = pid_filter__add(a->pf, (uint32_t)a->o.pids[i]);

		if (err) {
			pr_err("can't add pid %d to the probes' filter: %s", a->o.pids[i],
			       strerror(-err));
			return -1;
		}
	}
	return 0;
}

static int setup_probes(struct agent *a)
{
	struct sideband_opts sbo = {.filter_pids = a->o.npids > 0};
	char err[512];

	a->sym = symbolizer__new();
	if (!a->sym)
		return -1;
	a->services = service_namer__new(a->o.service_by, err, sizeof(err));
	if (!a->services) {
		pr_err("%s", err);
		return -1;
	}
	/* First: every process started from now on is known from its exec. */
	a->sb = sideband__open(&sbo, a->sym);
	if (!a->sb)
		return -1;
	for (int i = 0; i < a->o.npids; i++)
		sideband__add_pid(a->sb, (uint32_t)a->o.pids[i]);
	sideband__set_listener(a->sb, on_process_record, a->services);
	if (add_pids(a))
		return -1;
	if (a->o.cpu) {
		struct cpu_sampler_opts so = {
			.freq = a->o.freq,
			.pid_filter = a->pf,
			.follow_children = a->o.npids > 0,
			.kernel_stacks = true,
			.user_stacks = true,
			.unwind_memory = a->o.unwind_memory,
			.sym = a->sym,
		};

		a->cpu_agg = stack_agg__new(a->sym, MAX_STACKS);
		stack_agg__set_service(a->cpu_agg, service_of, a->services);
		if (a->o.offcpu) {
			a->offcpu_agg = stack_agg__new(a->sym, MAX_STACKS);
			stack_agg__set_service(a->offcpu_agg, service_of, a->services);
			so.offcpu_fn = on_offcpu;
			so.offcpu_ctx = a;
			so.offcpu_min_ns = a->o.offcpu_min_ns;
			so.offcpu_rate = a->o.offcpu_rate;
		}
		a->cpu = cpu_sampler__open(&so, on_cpu_sample, a);
		if (!a->cpu)
			return -1;
	}
	if (a->o.gpu) {
		struct gpu_probes_opts go = {
			.pid_filter = a->pf,
			.follow_children = a->o.npids > 0,
			.user_stacks = a->o.gpu_stacks,
			/* A job started without a terminal (a batch job, a
			 * service, a container) that maps a CUDA library no
			 * probe is on waits the milliseconds of the attach. */
			.hold = GPU_HOLD_NO_TTY,
			.unwinder = a->cpu ? cpu_sampler__unwinder(a->cpu) : NULL,
			.unwind_memory = a->o.unwind_memory,
			.sym = a->sym,
		};
		struct gpu_feed_opts fo = {
			.metrics = a->metrics,
			.sym = a->sym,
			.profiles = a->o.gpu_stacks,
			.service = service_of,
			.service_ctx = a->services,
			/* Shipped to the server's GPU timeline. */
			.trace = a->ship != NULL,
		};
		char cupti[PATH_MAX + 32];
		int n;

		a->feed = gpu_feed__new(&fo);
		if (gpu_feed__trace(a->feed))
			gpu_trace__set_window_max(gpu_feed__trace(a->feed), AGENT_GPU_TIMELINE_MAX);
		a->gpu = gpu_probes__open(&go, gpu_feed__event, a->feed);
		if (!a->gpu)
			return -1;
		/* Libraries where the loader finds them: processes that start
		 * later are covered from their first call. */
		if (!gpu_probes__attach_cupti(a->gpu, cupti, sizeof(cupti)))
			pr_info("GPU probes: kernels' GPU time from jobs started with "
				"CUDA_INJECTION64_PATH=%s",
				cupti);
		n = gpu_probes__attach_known(a->gpu);
		if (n > 0)
			pr_info("GPU probes: attached to %d CUDA/NCCL libraries found on the "
				"system",
				n);
		gpu_probes__scan(a->gpu);
		/* The rest of the machine's libraries, found in the background. */
		if (!a->o.no_library_search) {
			struct libsearch_opts lo = {0};

			a->search = libsearch__start(&lo);
		}
	}
	return 0;
}

static void set_capacities(struct agent *a)
{
	uint64_t totals[NVML_MAX_DEVICES];
	int n = a->nvml ? nvml__device_memory(a->nvml, totals, NULL, NVML_MAX_DEVICES) : 0;

	for (int i = 0; i < n; i++)
		gpu_metrics__device_capacity(a->metrics, i, totals[i], "nvml");
	if (n > 0)
		pr_info("GPU memory from NVML: %d devices", n);
	for (int i = 0; i < a->o.ngpu_mem; i++) {
		if (a->o.gpu_mem_dev[i] >= 0) {
			gpu_metrics__device_capacity(a->metrics, a->o.gpu_mem_dev[i],
						     a->o.gpu_mem[i], "config");
			continue;
		}
		for (int d = 0; d < AGENT_MAX_CONFIG_DEVICES; d++)
			gpu_metrics__device_capacity(a->metrics, d, a->o.gpu_mem[i], "config");
	}
}

static void agent_free(struct agent *a)
{
	/* The servers first: their threads read what follows. */
	ws_server__stop(a->ws);
	metrics_http__stop(a->http);
	/* What is still queued gets a few seconds to reach the server. */
	shipper__free(a->ship, 5000);
	point_log__free(a->points);
	alert_engine__free(a->alerts);
	libsearch__free(a->search);
	gpu_probes__free(a->gpu);
	free(a->probe_counts);
	free_proc_libs(a->proc_libs, a->nproc_libs);
	free(a->lost);
	gpu_feed__free(a->feed);
	cpu_sampler__free(a->cpu);
	stack_agg__free(a->cpu_agg);
	stack_agg__free(a->offcpu_agg);
	sideband__free(a->sb);
	pid_filter__free(a->pf);
	service_namer__free(a->services);
	symbolizer__free(a->sym);
	simulator__free(a->sim);
	gpu_metrics__free(a->metrics);
	nvml__close(a->nvml);
	for (int w = 0; w < WIN_MAX; w++)
		free(a->last[w].pprof);
	pthread_mutex_destroy(&a->lock);
}

int agent_run(const struct agent_opts *opts)
{
	struct gpu_metrics_opts mo = {.simulated = opts->simulate, .node = opts->node};
	struct agent a = {.o = *opts};
	int ret = 1;

	pthread_mutex_init(&a.lock, NULL);
	a.start_ms = wall_ms();
	/* From the start, not once serving: a SIGINT during the set-up (its
	 * metrics are served before the probes are on) stops it cleanly as
	 * soon as the loop begins, instead of killing it. */
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	if (!opts->simulate && (opts->cpu || opts->gpu) && (check_privileges() || check_btf()))
		goto cleanup;
	a.metrics = gpu_metrics__new(&mo);
	if (!a.metrics)
		goto cleanup;
	if (opts->simulate) {
		a.sim = simulator__new(a.metrics, (uint64_t)time(NULL));
	} else {
		/* Kept loaded: each tick reads each process's use from it. */
		a.nvml = nvml__open();
		set_capacities(&a);
		poll_nvml(&a);
	}
	a.http = metrics_http__start(opts->metrics_addr, a.metrics);
	if (!a.http)
		goto cleanup;
	metrics_http__add_route(a.http, "/alerts", route_alerts, &a);
	metrics_http__add_route(a.http, "/rules", route_rules, &a);
	for (int w = 0; w < WIN_MAX; w++) {
		char path[64];

		snprintf(path, sizeof(path), "/profile/%s", win_names[w]);
		metrics_http__add_route(a.http, path, route_profile, &a);
	}
	a.ws = ws_server__start(opts->ws_addr, opts->interval_ms, gpu_metrics__snapshot_text,
				a.metrics);
	if (!a.ws)
		goto cleanup;
	metrics_http__add_exposition(a.http, ws_server__collect, a.ws);
	metrics_http__add_exposition(a.http, agent_collect, &a);
	if (opts->server) {
		struct ship_opts so = {
			.url = opts->server,
			.node = opts->node,
			.max_bytes = opts->buffer_bytes,
			.max_age_ms = opts->buffer_age_ms,
			.tls = opts->tls,
			.token = opts->token,
			.state_path = opts->state_path,
		};

		a.ship = shipper__new(&so);
		if (!a.ship)
			goto cleanup;
		a.points = point_log__new(opts->node);
		metrics_http__add_exposition(a.http, shipper__collect, a.ship);
	}
	if (setup_alerts(&a))
		goto cleanup;
	metrics_http__add_exposition(a.http, alert_engine__collect, a.alerts);
	if (!opts->simulate && setup_probes(&a))
		goto cleanup;
	fprintf(stderr,
		"sonde agent: metrics on http://%.*s:%d/metrics, stream on ws://%.*s:%d%s%s%s -- "
		"Ctrl-C to stop\n",
		host_len(opts->metrics_addr), host_of(opts->metrics_addr),
		metrics_http__port(a.http), host_len(opts->ws_addr), host_of(opts->ws_addr),
		ws_server__port(a.ws), opts->simulate ? " (SIMULATED data)" : "",
		a.cpu ? (a.offcpu_agg ? ", CPU sampling, off-CPU" : ", CPU sampling") : "",
		a.gpu ? ", GPU probes" : "");
	if (opts->server && !opts->ui_url)
		fprintf(stderr, "sonde agent: sending profiles every %u s to %s\n",
			opts->window_ms / MS_PER_SEC, opts->server);
	if (opts->ui_url)
		fprintf(stderr, "sonde run: open %s in a browser\n", opts->ui_url);

	run_loop(&a);
	/* What the last, partial window holds is kept (and shipped). */
	if (a.o.window_ms)
		end_window(&a);
	ret = 0;
	if (stop_signal)
		pr_info("stopping on signal %d", (int)stop_signal);

cleanup:
	agent_free(&a);
	return ret;
}

void agent_opts__init(struct agent_opts *o)
{
	static char host[256];

	memset(o, 0, sizeof(*o));
	o->freq = 49;
	o->metrics_addr = "127.0.0.1:9091";
	o->ws_addr = "127.0.0.1:9092";
	o->interval_ms = 1000;
	o->window_ms = 10000;
	o->cpu = o->gpu = o->gpu_stacks = true;
	if (!gethostname(host, sizeof(host) - 1))
		o->node = host;
}
