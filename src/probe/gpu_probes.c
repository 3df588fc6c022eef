/* gpu_probes.c: GPU probes userspace: loading bpf/gpu.bpf.c, finding the
 * CUDA and NCCL files processes map, attaching one uprobe and one uretprobe
 * per function per file, draining the ring buffer, and sweeping what exited
 * processes leave in the maps. See gpu_probes.h for the contract. */
#include "symbolize/elf.h"
#include "probe/bpf_counters.h"
#include "probe/bpf_msgs.h"
#include "probe/pid_filter.h"
#include "probe/gpu_probes.h"
#include "common/clock.h"
#include "probe/gpu_probes_internal.h"
#include "probe/libscan.h"
#include "probe/rb_drain.h"
#include "probe/host.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "unwind/unwinder.h"

#include "gpu.skel.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#define MAX_EXAMINED 65536    /* files remembered as holding no GPU function */
#define THREAD_SWEEP_EVERY 10 /* scans between sweeps of the per-thread maps */
#define BLOCKED_RECHECK_NS ((uint64_t)NS_PER_SEC)
#define DETACH_THREADS 32
#define HOLD_HEARTBEAT_NS (2ull * NS_PER_SEC) /* holds stop this long after the last poll */
/* A process is held this long at most, in all its holds: the unwind
 * tables still to come then are built while it runs, and the stacks that
 * reach them meanwhile are finished once they are in (gpu_late.c).
 * SONDE_GPU_HOLD_MAX_MS=N sets it. */
#define HOLD_MAX_NS_DEFAULT (100ull * NS_PER_MS)
#define HOLD_SPENT_MAX 1024 /* pids whose hold time is remembered */
#define HOLD_POLL_MS 2	    /* the poll's longest wait while one is held */
#define FLUSH_ROUNDS 4	    /* table builds the last poll waits for */

/* The symbols whose presence in an executable's .symtab says it links that
 * family statically. */
static const struct {
	enum gpu_api api;
	unsigned family;
} anchors[] = {
	{GPU_API_cudaLaunchKernel, LIBSCAN_RT},
	{GPU_API_cuLaunchKernel, LIBSCAN_DRV},
	{GPU_API_ncclAllReduce, LIBSCAN_NCCL},
};

struct gp_probe {
	enum gpu_api api;
	uint64_t offset;
	struct bpf_link *entry, *ret; /* perf uprobes */
	bool entry_ok, ret_ok;
	int err;
	enum gpu_api alias_of;
};

struct gp_file {
	uint64_t dev, ino;
	char *path;
	char *name; /* the path a process mapped it at, where path is its map_files view */
	unsigned families;
	struct gp_probe *probes;
	size_t nprobes;
	int *links; /* uprobe_multi link fds */
	size_t nlinks, links_cap;
};

/* BPF_LINK_CREATE of a uprobe_multi link (Linux 6.6), spelled out: libbpf
 * 1.1 and Debian 12's UAPI headers (Linux 6.1) predate it. The layout is
 * union bpf_attr's link_create with its uprobe_multi member. */
#define UPROBE_MULTI_ATTACH 48 /* BPF_TRACE_UPROBE_MULTI */
#define UPROBE_MULTI_RETURN 1u /* BPF_F_UPROBE_MULTI_RETURN */

struct uprobe_multi_attr {
	__u32 prog_fd;
	__u32 target_fd;
	__u32 attach_type;
	__u32 flags;
	__u64 path;
	__u64 offsets;
	__u64 ref_ctr_offsets;
	__u64 cookies;
	__u32 cnt;
	__u32 multi_flags;
	__u32 pid;
	__u32 pad;
};

_Static_assert(sizeof(struct uprobe_multi_attr) == 64, "link_create.uprobe_multi layout");

struct gpu_probes {
	struct gpu_bpf *skel;
	struct rb_drain *drain; /* the ring buffer, drained by a thread of its own */
	struct unwinder *unw;	/* tables of our own, when not the CPU sampler's */
	struct gpu_late *late;	/* stacks whose ends are walked here; NULL: none */
	struct gpu_probes_opts opts;
	gpu_event_fn fn;
	void *ctx;
	struct gp_file *files;
	size_t nfiles, files_cap;
	struct gpu_table examined;  /* (dev, ino) of files read that hold no GPU function */
	struct gpu_table proc_libs; /* (pid, 0) -> gp_proc_libs: what the last scan found */
	uint32_t scan_gen;	    /* full scans done: proc_libs entries of older ones are gone */
	struct gpu_state st;
	uint64_t received, scans;
	uint64_t swept_allocs, swept_inflight, swept_rf; /* deleted by userspace: off the live
							  * counters */
	uint32_t probes_attached, probes_failed;
	int nposs;
	bool multi; /* attach with uprobe_multi links, else one perf uprobe each */
	/* Dynamic loaders hooked at _dl_debug_state (see gpu_loader_hook), by
	 * (dev, ino); link as in struct detach_job. */
	struct gp_loader {
		uint64_t dev, ino;
		uintptr_t link;
	} * loaders;
	size_t nloaders, loaders_cap;
	/* Interpreter files hooked at Py_FinalizeEx (gpu_py_finalize), keyed
	 * as the unwinder keys files. */
	struct gp_loader *interps;
	size_t ninterps, interps_cap;
	/* GPU processes stopped as their interpreter finalizes
	 * (GPU_EV_PY_EXIT): let go once the records so far are read. */
	struct gp_exiting {
		uint32_t pid;
		uint64_t held_ns;
	} * exiting;
	size_t nexiting, exiting_cap;
	/* Pids that mapped new code (GPU_EV_LOADED, _NEW_LIB), scanned after
	 * the drain; held ones (stopped in the loader) released after. */
	struct gp_pending {
		uint32_t pid;
		bool held;
		uint64_t held_ns;	/* when the record came */
		struct gpu_lib_key lib; /* ino 0: none */
	} * pending;
	size_t npending, pending_cap;
	/* Held processes waiting for the unwind tables of their files, built
	 * on the unwinder's threads: let go when they are in, or when the
	 * process has been held hold_max_ns in all (its first stacks may then
	 * be cut where a table is still missing). */
	struct gp_held {
		uint32_t pid;
		uint64_t held_ns; /* when the record came */
		uint64_t max_ns;  /* what is left of its hold time */
		struct gp_want {
			struct unw_file_key key;
			char *path, *name;
		} * wants;
		size_t nwants, wants_cap;
	} * held;
	size_t nheld, held_cap;
	/* Hold time spent by recent pids (a ring), so that a process that
	 * maps a file at each import is not held the bound at each. */
	struct gp_spent {
		uint32_t pid;
		uint64_t ns;
	} spent[HOLD_SPENT_MAX];
	size_t spent_next;
	uint64_t loaded_scans, new_libs, holds, hold_ns, hold_max_ns, holds_capped;
	uint64_t beat_ns;		       /* the last heartbeat() */
	uint64_t hold_missed[HOLD_MISSED_MAX]; /* NEW_LIB records of processes not held */
	uint64_t drained_ns,
		drain_gap_max_ns; /* the last drain's end; the longest time between two */
};

/* The CUDA, NCCL and PyTorch files a process maps, as its last scan found
 * them: attached (an index into files), or not (the path, and why not). */
#define PROC_LIBS_MAX 12
#define MAX_PROC_LIBS 8192 /* processes */
struct gp_proc_libs {
	uint32_t gen, n;
	struct gp_proc_lib {
		int32_t file; /* -1: not attached */
		int err;      /* why not: -ENODATA (no GPU function), or the read's errno */
		char path[120];
	} lib[PROC_LIBS_MAX];
};

static int on_record(void *ctx, void *data, size_t size);
static void hook_own_loader(struct gpu_probes *gp);

/* We are polling: the BPF side may stop a process that maps a library no
 * probe is on for the next HOLD_HEARTBEAT_NS, sure to be let go. */
static void heartbeat(struct gpu_probes *gp)
{
	gp->beat_ns = mono_ns();
	gp->skel->bss->hold_until_ns = gp->beat_ns + HOLD_HEARTBEAT_NS;
}

const char *gpu_hold_missed_name(enum gpu_hold_missed why)
{
	static const char *const names[HOLD_MISSED_MAX] = {
		[HOLD_MISSED_BUSY] = "busy",
		[HOLD_MISSED_SIGNAL] = "signal",
	};

	return (unsigned)why < HOLD_MISSED_MAX ? names[why] : "?";
}

/* A process mapped a library no probe was on and was not held for the
 * attach, as it should have been: its first calls into it may be missed.
 * Counted and said for each such record (rare: one per load of a new
 * library). */
static void hold_missed(struct gpu_probes *gp, const struct gpu_rec *r)
{
	enum gpu_hold_missed why =
		r->flags & GPU_RF_HOLD_LAPSED ? HOLD_MISSED_BUSY : HOLD_MISSED_SIGNAL;

	gp->hold_missed[why]++;
	if (why == HOLD_MISSED_BUSY)
		pr_warn("GPU probes: pid %u mapped a CUDA/NCCL library no probe was on %.1f s "
			"after the agent last polled its events (busy or stopped): it was not "
			"held for the attach, and its first calls may be missed",
			r->pid, (double)(int64_t)(r->ts_ns - gp->beat_ns) / NS_PER_SEC);
	else
		pr_warn("GPU probes: pid %u mapped a CUDA/NCCL library no probe was on and "
			"could not be stopped for the attach: its first calls may be missed",
			r->pid);
}
static void release_pending(struct gpu_probes *gp);
static void release_held(struct gpu_probes *gp, bool force);
static void let_exit(struct gpu_probes *gp);

/* ---- lifecycle --------------------------------------------------------- */

static int uprobe_multi_link(int prog_fd, const char *path, const uint64_t *offsets,
			     const uint64_t *cookies, uint32_t cnt, bool retprobe)
{
	struct uprobe_multi_attr a = {
		.prog_fd = prog_fd,
		.attach_type = UPROBE_MULTI_ATTACH,
		.path = (uintptr_t)path,
		.offsets = (uintptr_t)offsets,
		.cookies = (uintptr_t)cookies,
		.cnt = cnt,
		.multi_flags = retprobe ? UPROBE_MULTI_RETURN : 0,
		.pid = 0, /* every process */
	};
	int fd = syscall(__NR_bpf, BPF_LINK_CREATE, &a, sizeof(a));

	return fd < 0 ? -errno : fd;
}

/* Whether the kernel has uprobe_multi links (6.6), probed as libbpf does:
 * a program of that attach type loads, and a link on "/" (not a regular
 * file) fails with EBADF rather than EINVAL. Why it matters: removing a
 * perf uprobe waits for an RCU grace period under a global mutex, about
 * 0.1 s each, so 140 probes take 14 s to detach; a uprobe_multi link waits
 * once for all its probes, and links are closed in parallel. */
static bool have_uprobe_multi(void)
{
	const struct bpf_insn insns[] = {
		{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0, .imm = 0},
		{.code = BPF_JMP | BPF_EXIT},
	};
	LIBBPF_OPTS(bpf_prog_load_opts, lo,
		    .expected_attach_type = (enum bpf_attach_type)UPROBE_MULTI_ATTACH);
	uint64_t offset = 0;
	int prog, link;

	prog = bpf_prog_load(BPF_PROG_TYPE_KPROBE, NULL, "GPL", insns, 2, &lo);
	if (prog < 0)
		return false;
	link = uprobe_multi_link(prog, "/", &offset, NULL, 1, false);
	if (link >= 0)
		close(link);
	close(prog);
	return link == -EBADF;
}

/* Whether stacks that reach code without a table yet are finished in
 * userspace (SONDE_LATE_STACKS=0: walked by frame pointers, as before). */
static bool late_stacks(const struct gpu_probes_opts *opts)
{
	const char *env = getenv("SONDE_LATE_STACKS");

	return opts->user_stacks && opts->sym && !(env && !strcmp(env, "0"));
}

/* The BPF object's settings, map sizes and attach types, between open and
 * load. */
static void configure(struct gpu_probes *gp, const struct gpu_probes_opts *opts)
{
	size_t rb_bytes = opts->ringbuf_bytes;
	uint64_t max_allocs = opts->max_allocs, max_threads = opts->max_threads, control_bytes;

	/* SONDE_GPU_RINGBUF=64M: the kernel's ring, for jobs that still
	 * overflow it (and the tests' forced loss). */
	if (!rb_bytes)
		rb_bytes = env_size("SONDE_GPU_RINGBUF");
	/* SONDE_GPU_MAX_ALLOCS, SONDE_GPU_MAX_THREADS: the maps' entries,
	 * for a node whose jobs keep more live allocations or threads. */
	if (!max_allocs)
		max_allocs = env_size("SONDE_GPU_MAX_ALLOCS");
	if (!max_threads)
		max_threads = env_size("SONDE_GPU_MAX_THREADS");
	gp->skel->rodata->filter_pids = opts->pid_filter != NULL;
	gp->skel->rodata->follow_children = opts->follow_children;
	gp->skel->rodata->user_stacks = opts->user_stacks;
	gp->skel->rodata->hold_mode = opts->hold;
	gp->skel->rodata->late_stacks = late_stacks(opts);
	rb_bytes = ringbuf_size(rb_bytes ? rb_bytes : 8u << 20, 1u << 30);
	/* Wake a sleeping reader when the buffer is half full. */
	gp->skel->rodata->wakeup_bytes = rb_bytes / 2;
	bpf_map__set_max_entries(gp->skel->maps.events, rb_bytes);
	/* SONDE_GPU_CONTROL_RINGBUF=1M: the ring that tells of processes
	 * that loaded code, for a node where more load at once than its
	 * 256 KiB hold. */
	if ((control_bytes = env_size("SONDE_GPU_CONTROL_RINGBUF")))
		bpf_map__set_max_entries(gp->skel->maps.control,
					 ringbuf_size(control_bytes, 64u << 20));
	if (max_allocs)
		bpf_map__set_max_entries(gp->skel->maps.allocs,
					 max_allocs < INT32_MAX ? max_allocs : INT32_MAX);
	if (max_threads) {
		max_threads = max_threads < INT32_MAX ? max_threads : INT32_MAX;
		bpf_map__set_max_entries(gp->skel->maps.thread_dev, max_threads);
		bpf_map__set_max_entries(gp->skel->maps.inflight, max_threads);
	}
	if (!opts->follow_children)
		bpf_program__set_autoload(gp->skel->progs.follow_fork, false);
	/* SONDE_GPU_PERF_UPROBES=1 forces the fallback (tests run both). */
	gp->multi = !getenv("SONDE_GPU_PERF_UPROBES") && have_uprobe_multi();
	if (gp->multi) {
		struct bpf_program *prog;

		bpf_object__for_each_program(prog, gp->skel->obj)
		{
			if (prog != gp->skel->progs.follow_fork &&
			    prog != gp->skel->progs.gpu_exec_hook)
				bpf_program__set_expected_attach_type(
					prog, (enum bpf_attach_type)UPROBE_MULTI_ATTACH);
		}
	}
	pr_debug("GPU probes attach with %s", gp->multi ? "uprobe_multi links" : "perf uprobes");
}

/* The fork (children of the traced) and exec (scan a new program) hooks. */
static int attach_tracepoints(struct gpu_probes *gp)
{
	int err;

	if (gp->opts.follow_children) {
		gp->skel->links.follow_fork = bpf_program__attach(gp->skel->progs.follow_fork);
		if (!gp->skel->links.follow_fork) {
			err = -errno;
			pr_err("can't attach to sched_process_fork: %s", strerror(-err));
			return err;
		}
	}
	gp->skel->links.gpu_exec_hook = bpf_program__attach(gp->skel->progs.gpu_exec_hook);
	if (!gp->skel->links.gpu_exec_hook) {
		err = -errno;
		pr_err("can't attach to sched_process_exec: %s", strerror(-err));
		return err;
	}
	return 0;
}

static void deliver(struct gpu_probes *gp, const struct gpu_event *ev, const struct late_stack *end,
		    size_t end_size);

/* The unwinder whose tables the programs read. */
static struct unwinder *unwinder_of(struct gpu_probes *gp)
{
	return gp->unw ? gp->unw : gp->opts.unwinder;
}

/* The unwinder's maps: the CPU sampler's, or sized for tables of our own. */
static int setup_unwinder(struct gpu_probes *gp, const struct gpu_probes_opts *opts)
{
	if (!opts->unwinder)
		return bpf_map__set_max_entries(
			gp->skel->maps.unw_rows,
			unwinder__rows_for(opts->unwind_memory ?: UNWIND_MEMORY_DEFAULT));
	return unwinder__share(
		opts->unwinder,
		&(struct unwinder_maps){gp->skel->maps.unw_rows, gp->skel->maps.unw_files,
					gp->skel->maps.unw_misses, gp->skel->maps.unw_counters,
					gp->skel->maps.unw_py_files, gp->skel->maps.unw_py_procs,
					gp->skel->maps.unw_py_pids});
}

struct gpu_probes *gpu_probes__open(const struct gpu_probes_opts *opts, gpu_event_fn fn, void *ctx)
{
	struct gpu_probes *gp = xcalloc(1, sizeof(*gp));
	int err = 0;

	gp->opts = *opts;
	gp->fn = fn;
	gp->ctx = ctx;
	gp->nposs = libbpf_num_possible_cpus();
	gpu_state__init(&gp->st);
	gpu_table__init(&gp->examined, 1, MAX_EXAMINED);
	gpu_table__init(&gp->proc_libs, sizeof(struct gp_proc_libs), MAX_PROC_LIBS);
	if (gp->nposs <= 0 || gp->nposs > HOST_MAX_CPUS) {
		err = gp->nposs < 0 ? gp->nposs : -E2BIG;
		pr_err("can't count the possible CPUs: %s", strerror(-err));
		goto cleanup;
	}
	raise_memlock();
	/* libbpf attaches through the uprobe PMU and falls back to
	 * tracefs's uprobe_events when the kernel has no such PMU. */
	ensure_tracefs();

	gp->skel = gpu_bpf__open();
	if (!gp->skel) {
		err = -errno;
		pr_err("can't open the GPU probes BPF object: %s", strerror(-err));
		goto cleanup;
	}
	configure(gp, opts);
	if (opts->pid_filter &&
	    (err = pid_filter__use(opts->pid_filter, gp->skel->maps.target_pids))) {
		pr_err("can't share the pid filter with the GPU probes: %s", strerror(-err));
		goto cleanup;
	}
	err = setup_unwinder(gp, opts);
	if (err)
		goto cleanup;
	err = gpu_bpf__load(gp->skel);
	if (err) {
		pr_err("can't load the GPU probes BPF programs: %s -- run with SONDE_LOG=debug "
		       "for the verifier log",
		       strerror(-err));
		goto cleanup;
	}
	err = attach_tracepoints(gp);
	if (err)
		goto cleanup;
	if (!opts->unwinder) {
		gp->unw = unwinder__new(&(struct unwinder_maps){
			gp->skel->maps.unw_rows, gp->skel->maps.unw_files,
			gp->skel->maps.unw_misses, gp->skel->maps.unw_counters,
			gp->skel->maps.unw_py_files, gp->skel->maps.unw_py_procs,
			gp->skel->maps.unw_py_pids});
		if (!gp->unw) {
			err = -errno;
			goto cleanup;
		}
	}
	if (late_stacks(opts))
		gp->late = gpu_late__new(unwinder_of(gp), opts->sym, NULL);
	gp->drain = rb_drain__new((const int[]){bpf_map__fd(gp->skel->maps.events),
						bpf_map__fd(gp->skel->maps.control)},
				  2, opts->queue_bytes);
	if (!gp->drain) {
		err = -errno;
		pr_err("can't open the GPU event ring buffer: %s", strerror(-err));
		goto cleanup;
	}
	/* The loader of processes in our own mount namespace; others are
	 * hooked as scans meet them. */
	hook_own_loader(gp);
	/* Holding from now on: the caller polls from here. */
	heartbeat(gp);
	return gp;

cleanup:
	gpu_probes__free(gp);
	errno = -err;
	return NULL;
}

/* A perf uprobe link, or a uprobe_multi link fd (tagged: fd << 1 | 1). */
struct detach_job {
	uintptr_t *links;
	size_t n, stride, first;
};

static void *detach_worker(void *arg)
{
	struct detach_job *j = arg;

	for (size_t i = j->first; i < j->n; i += j->stride) {
		if (j->links[i] & 1)
			close(j->links[i] >> 1);
		else
			bpf_link__destroy((struct bpf_link *)j->links[i]);
	}
	return NULL;
}

/* Detaches every probe. Removing a uprobe waits for an RCU grace period
 * (about 0.1 s on 6.x kernels): uprobe_multi links are closed from several
 * threads, whose waits overlap. (Perf uprobes are removed under a global
 * mutex: for them the threads only keep the order of magnitude.) */
static void detach_all(struct gpu_probes *gp)
{
	struct detach_job jobs[DETACH_THREADS];
	pthread_t threads[DETACH_THREADS];
	bool started[DETACH_THREADS] = {0};
	uintptr_t *links;
	size_t n = 0, nthreads;

	for (size_t i = 0; i < gp->nfiles; i++)
		n += 2 * gp->files[i].nprobes + gp->files[i].nlinks;
	n += gp->nloaders + gp->ninterps;
	if (!n)
		return;
	links = xcalloc(n, sizeof(*links));
	n = 0;
	for (size_t i = 0; i < gp->nloaders; i++)
		if (gp->loaders[i].link)
			links[n++] = gp->loaders[i].link;
	gp->nloaders = 0;
	for (size_t i = 0; i < gp->ninterps; i++)
		if (gp->interps[i].link)
			links[n++] = gp->interps[i].link;
	gp->ninterps = 0;
	for (size_t i = 0; i < gp->nfiles; i++) {
		struct gp_file *f = &gp->files[i];

		for (size_t j = 0; j < f->nprobes; j++) {
			struct gp_probe *p = &f->probes[j];

			if (p->entry)
				links[n++] = (uintptr_t)p->entry;
			if (p->ret)
				links[n++] = (uintptr_t)p->ret;
			p->entry = p->ret = NULL;
		}
		for (size_t j = 0; j < f->nlinks; j++)
			links[n++] = (uintptr_t)f->links[j] << 1 | 1;
		f->nlinks = 0;
	}
	nthreads = n < DETACH_THREADS ? n : DETACH_THREADS;
	for (size_t t = 0; t < nthreads; t++) {
		jobs[t] = (struct detach_job){links, n, nthreads, t};
		started[t] = t > 0 && !pthread_create(&threads[t], NULL, detach_worker, &jobs[t]);
	}
	detach_worker(&jobs[0]);
	for (size_t t = 1; t < nthreads; t++) {
		if (started[t])
			pthread_join(threads[t], NULL);
		else
			detach_worker(&jobs[t]); /* no thread: do its share here */
	}
	free(links);
}

void gpu_probes__free(struct gpu_probes *gp)
{
	if (!gp)
		return;
	if (gp->drain) {
		/* No new hold; the held ones let go. */
		gp->skel->bss->hold_until_ns = 0;
		rb_drain__stop(gp->drain);
		rb_drain__consume(gp->drain, on_record, gp);
		release_pending(gp);
		release_held(gp, true);
		let_exit(gp);
	}
	/* Events still waiting for their stacks are past the end (the last
	 * one was gpu_probes__flush's), and the tables they wait for may be
	 * gone with a borrowed unwinder. */
	gpu_late__free(gp->late);
	rb_drain__free(gp->drain);
	detach_all(gp);
	unwinder__free(gp->unw);
	for (size_t i = 0; i < gp->nfiles; i++) {
		free(gp->files[i].probes);
		free(gp->files[i].links);
		free(gp->files[i].path);
		free(gp->files[i].name);
	}
	free(gp->files);
	free(gp->loaders);
	free(gp->interps);
	free(gp->exiting);
	free(gp->pending);
	free(gp->held);
	gpu_bpf__destroy(gp->skel);
	gpu_table__fini(&gp->examined);
	gpu_table__fini(&gp->proc_libs);
	gpu_state__fini(&gp->st);
	free(gp);
}

/* ---- attaching --------------------------------------------------------- */

static void progs_for(struct gpu_bpf *skel, enum gpu_class cls, struct bpf_program **entry,
		      struct bpf_program **ret)
{
	switch (cls) {
	case GPU_CLASS_RT_LAUNCH:
		*entry = skel->progs.rt_launch;
		*ret = skel->progs.launch_ret;
		break;
	case GPU_CLASS_RT_LAUNCH_EX:
		*entry = skel->progs.rt_launch_ex;
		*ret = skel->progs.launch_ret;
		break;
	case GPU_CLASS_DRV_LAUNCH:
		*entry = skel->progs.drv_launch;
		*ret = skel->progs.launch_ret;
		break;
	case GPU_CLASS_DRV_LAUNCH_EX:
		*entry = skel->progs.drv_launch_ex;
		*ret = skel->progs.launch_ret;
		break;
	case GPU_CLASS_GRAPH_LAUNCH:
		*entry = skel->progs.graph_launch;
		*ret = skel->progs.launch_ret;
		break;
	case GPU_CLASS_KERNEL:
		*entry = skel->progs.kernel_lookup;
		*ret = skel->progs.kernel_lookup_ret;
		break;
	case GPU_CLASS_CAPTURE_BEGIN:
	case GPU_CLASS_CAPTURE_END:
	case GPU_CLASS_GRAPH_INSTANTIATE:
		*entry = skel->progs.graph_op;
		*ret = skel->progs.graph_op_ret;
		break;
	case GPU_CLASS_GRAPH_ADD_KERNEL:
		*entry = skel->progs.graph_add;
		*ret = skel->progs.graph_op_ret;
		break;
	/* Entry only: what a capture's events and joins need is their
	 * arguments. */
	case GPU_CLASS_EVENT_RECORD:
		*entry = skel->progs.event_record;
		*ret = NULL;
		break;
	case GPU_CLASS_STREAM_WAIT:
		*entry = skel->progs.stream_wait;
		*ret = NULL;
		break;
	case GPU_CLASS_CUPTI_LAUNCH:
		*entry = skel->progs.cupti_launch;
		*ret = NULL;
		break;
	case GPU_CLASS_CUPTI_RECORDS:
		*entry = skel->progs.cupti_records;
		*ret = NULL;
		break;
	case GPU_CLASS_CUPTI_CLOCK:
		*entry = skel->progs.cupti_clock;
		*ret = NULL;
		break;
	case GPU_CLASS_CUPTI_NVTX:
		*entry = skel->progs.cupti_nvtx;
		*ret = NULL;
		break;
	case GPU_CLASS_ALLOC:
		*entry = skel->progs.mem_alloc;
		*ret = skel->progs.mem_alloc_ret;
		break;
	case GPU_CLASS_FREE:
		*entry = skel->progs.mem_free;
		*ret = skel->progs.mem_free_ret;
		break;
	case GPU_CLASS_DEVICE:
		*entry = skel->progs.device_set;
		*ret = skel->progs.device_set_ret;
		break;
	case GPU_CLASS_SYNC:
		*entry = skel->progs.sync_begin;
		*ret = skel->progs.sync_end;
		break;
	case GPU_CLASS_MEMCPY:
		*entry = skel->progs.memcpy_begin;
		*ret = skel->progs.memcpy_end;
		break;
	case GPU_CLASS_CAPACITY:
		*entry = skel->progs.capacity_query;
		*ret = skel->progs.capacity_ret;
		break;
	case GPU_CLASS_NCCL_COLL:
		*entry = skel->progs.nccl_coll;
		*ret = skel->progs.nccl_ret;
		break;
	case GPU_CLASS_NCCL_GROUP:
		*entry = skel->progs.nccl_group;
		*ret = skel->progs.nccl_ret;
		break;
	case GPU_CLASS_NCCL_INIT:
		*entry = skel->progs.nccl_init;
		*ret = skel->progs.nccl_ret;
		break;
	/* Entry only: the two ends of a record_function scope are two
	 * functions' entries. */
	case GPU_CLASS_TORCH_RF_BEGIN:
		*entry = skel->progs.torch_rf_begin;
		*ret = NULL;
		break;
	case GPU_CLASS_TORCH_RF_END:
		*entry = skel->progs.torch_rf_end;
		*ret = NULL;
		break;
	}
}

static struct bpf_link *attach_one(struct bpf_program *prog, const char *path, uint64_t offset,
				   uint64_t cookie, bool retprobe)
{
	LIBBPF_OPTS(bpf_uprobe_opts, uo, .bpf_cookie = cookie, .retprobe = retprobe);

	/* pid -1: the probe is on the file and fires in every process. */
	return bpf_program__attach_uprobe_opts(prog, -1, path, offset, &uo);
}

static void attach_failed(struct gpu_probes *gp, struct gp_file *f, struct gp_probe *p, int err)
{
	const char *hint = uprobe_hint(err);

	p->err = err;
	pr_warn("can't attach to %s in %s (offset 0x%" PRIx64 "): %s%s%s -- its calls will not be "
		"seen",
		gpu_apis[p->api].name, f->path, p->offset, strerror(-err), *hint ? ": " : "", hint);
}

/* The cookie of a probe on f: its api, and f's index + 1 for the counts. */
static uint64_t file_cookie(const struct gpu_probes *gp, const struct gp_file *f, enum gpu_api api)
{
	return GPU_COOKIE(api, (uint64_t)(f - gp->files) + 1);
}

/* One perf uprobe and one perf uretprobe. */
static void attach_perf(struct gpu_probes *gp, struct gp_file *f, struct gp_probe *p)
{
	struct bpf_program *entry = NULL, *ret = NULL;

	progs_for(gp->skel, gpu_apis[p->api].cls, &entry, &ret);
	/* The return probe first: an entry is never seen without its return. */
	if (ret)
		p->ret = attach_one(ret, f->path, p->offset, file_cookie(gp, f, p->api), true);
	if (ret && !p->ret) {
		attach_failed(gp, f, p, -errno);
		return;
	}
	p->entry = attach_one(entry, f->path, p->offset, file_cookie(gp, f, p->api), false);
	if (!p->entry) {
		attach_failed(gp, f, p, -errno);
		bpf_link__destroy(p->ret);
		p->ret = NULL;
		return;
	}
	p->ret_ok = p->entry_ok = true;
}

static void keep_link(struct gp_file *f, int fd)
{
	xgrow((void **)&f->links, &f->links_cap, f->nlinks + 1, sizeof(*f->links));
	f->links[f->nlinks++] = fd;
}

/* One uprobe_multi link per program: the return programs first, then the
 * entry programs of the functions whose return is hooked. A link that fails
 * is retried function by function, so that one bad symbol costs only
 * itself. */
static void attach_multi(struct gpu_probes *gp, struct gp_file *f)
{
	uint64_t *offsets = xcalloc(f->nprobes, sizeof(*offsets));
	uint64_t *cookies = xcalloc(f->nprobes, sizeof(*cookies));
	size_t *members = xcalloc(f->nprobes, sizeof(*members));
	bool *done = xcalloc(f->nprobes, sizeof(*done));

	for (int phase = 0; phase < 2; phase++) {
		bool ret = phase == 0;

		memset(done, 0, f->nprobes * sizeof(*done));
		for (size_t i = 0; i < f->nprobes; i++) {
			struct bpf_program *prog = NULL, *entry = NULL, *rprog = NULL;
			size_t n = 0;
			int fd;

			if (done[i] || f->probes[i].err || f->probes[i].alias_of ||
			    (!ret && !f->probes[i].ret_ok))
				continue;
			progs_for(gp->skel, gpu_apis[f->probes[i].api].cls, &entry, &rprog);
			prog = ret ? rprog : entry;
			if (!prog) {
				/* An entry-only function: nothing to attach first. */
				f->probes[i].ret_ok = true;
				continue;
			}
			/* Every not-yet-attached function this program serves. */
			for (size_t j = i; j < f->nprobes; j++) {
				struct gp_probe *q = &f->probes[j];
				struct bpf_program *qe = NULL, *qr = NULL;

				if (done[j] || q->err || q->alias_of || (!ret && !q->ret_ok))
					continue;
				progs_for(gp->skel, gpu_apis[q->api].cls, &qe, &qr);
				if ((ret ? qr : qe) != prog)
					continue;
				done[j] = true;
				members[n] = j;
				offsets[n] = q->offset;
				cookies[n++] = file_cookie(gp, f, q->api);
			}
			fd = uprobe_multi_link(bpf_program__fd(prog), f->path, offsets, cookies, n,
					       ret);
			if (fd >= 0) {
				keep_link(f, fd);
				for (size_t k = 0; k < n; k++) {
					if (ret)
						f->probes[members[k]].ret_ok = true;
					else
						f->probes[members[k]].entry_ok = true;
				}
				continue;
			}
			for (size_t k = 0; k < n; k++) {
				struct gp_probe *q = &f->probes[members[k]];

				fd = uprobe_multi_link(bpf_program__fd(prog), f->path, &q->offset,
						       &cookies[k], 1, ret);
				if (fd < 0) {
					attach_failed(gp, f, q, fd);
					continue;
				}
				keep_link(f, fd);
				if (ret)
					q->ret_ok = true;
				else
					q->entry_ok = true;
			}
		}
	}
	free(done);
	free(members);
	free(cookies);
	free(offsets);
}

static void mark_lib_key(struct gpu_probes *gp, const struct gpu_lib_key *k)
{
	__u8 one = 1;

	bpf_map_update_elem(bpf_map__fd(gp->skel->maps.lib_files), k, &one, BPF_ANY);
}

/* Tells the loader probe that the file (dev as stat gives it) was looked at. */
static void mark_lib(struct gpu_probes *gp, uint64_t dev, uint64_t ino)
{
	struct gpu_lib_key k = {((uint64_t)major(dev) << 20) | minor(dev), ino};

	mark_lib_key(gp, &k);
}

static struct gp_file *find_file(struct gpu_probes *gp, uint64_t dev, uint64_t ino)
{
	for (size_t i = 0; i < gp->nfiles; i++)
		if (gp->files[i].dev == dev && gp->files[i].ino == ino)
			return &gp->files[i];
	return NULL;
}

/* Attaches probes at offsets[i] of path for apis[i] (offset 0: the file
 * has no such function) and keeps the file. what says what the offsets
 * are ("functions", "call sites"). Returns 1. */
static int attach_probes(struct gpu_probes *gp, const char *path, uint64_t dev, uint64_t ino,
			 unsigned families, const enum gpu_api *apis, const uint64_t *offsets,
			 size_t n, const char *what)
{
	struct gp_file *f;

	xgrow((void **)&gp->files, &gp->files_cap, gp->nfiles + 1, sizeof(*gp->files));
	f = &gp->files[gp->nfiles++];
	memset(f, 0, sizeof(*f));
	f->dev = dev;
	f->ino = ino;
	f->path = xstrdup(path);
	f->families = families;
	f->probes = xcalloc(n ? n : 1, sizeof(*f->probes));
	for (size_t i = 0; i < n; i++) {
		struct gp_probe *p;

		if (!(gpu_apis[apis[i]].family & families))
			continue;
		p = &f->probes[f->nprobes++];
		p->api = apis[i];
		p->offset = offsets[i];
		if (!p->offset) {
			p->err = -ENOENT;
			continue;
		}
		/* Aliases (pnccl* beside nccl*, a _ptsz that is the same
		 * function) share an address: one probe per address. */
		for (size_t j = 0; j + 1 < f->nprobes; j++)
			if (f->probes[j].offset == p->offset && !f->probes[j].err &&
			    !f->probes[j].alias_of) {
				p->alias_of = f->probes[j].api;
				break;
			}
		if (!p->alias_of && !gp->multi)
			attach_perf(gp, f, p);
	}
	if (gp->multi)
		attach_multi(gp, f);
	for (size_t i = 0; i < f->nprobes; i++) {
		struct gp_probe *p = &f->probes[i];

		if (p->entry_ok && p->ret_ok)
			gp->probes_attached++;
		else if (p->err && p->err != -ENOENT)
			gp->probes_failed++;
	}
	/* Only now: a process the loader probe finds mapping this file while
	 * the attach is under way must still wait for it. */
	mark_lib(gp, dev, ino);
	/* Attaching many files takes a while: we are still here to let go
	 * whoever is held meanwhile. */
	heartbeat(gp);
	pr_info("GPU probes: attached to %s (%zu %s)", path, f->nprobes, what);
	return 1;
}

/* PyTorch's libtorch_cpu: probes at the calls that open and close
 * record_function scopes (libscan_torch_sites), for the DataLoader waits.
 * Returns 1, -ENODATA (none recognised), or another negative errno. */
static int attach_torch(struct gpu_probes *gp, const char *path, uint64_t dev, uint64_t ino)
{
	struct libscan_torch_sites ts;
	enum gpu_api apis[2 * LIBSCAN_TORCH_SITES];
	uint64_t offsets[2 * LIBSCAN_TORCH_SITES];
	size_t n = 0;
	int err = libscan_torch_sites(path, &ts);

	if (err == -ENODATA) {
		pr_info("GPU probes: %s: no record_function call recognised (%zu scope openings, "
			"%zu ends) -- DataLoader waits are not measured in its processes",
			path, ts.nbegin, ts.nend);
		mark_lib(gp, dev, ino);
		return err;
	}
	if (err) {
		pr_debug("can't scan the code of %s: %s", path, strerror(-err));
		return err;
	}
	for (size_t i = 0; i < ts.nbegin; i++) {
		apis[n] = GPU_API_torch_rf_begin;
		offsets[n++] = ts.begin[i];
	}
	for (size_t i = 0; i < ts.nend; i++) {
		apis[n] = GPU_API_torch_rf_end;
		offsets[n++] = ts.end[i];
	}
	return attach_probes(gp, path, dev, ino, LIBSCAN_TORCH, apis, offsets, n, "call sites");
}

/* Looks the families' functions up in path and attaches to them. With
 * families 0 (an executable), the families are those whose anchor symbol
 * the file defines. Returns 1 if attached, -ENODATA if the file holds none
 * of the functions, or another negative errno (the file can't be read). */
static int attach_file(struct gpu_probes *gp, const char *path, uint64_t dev, uint64_t ino,
		       unsigned families)
{
	const char *names[GPU_API_MAX];
	uint64_t offsets[GPU_API_MAX];
	enum gpu_api apis[GPU_API_MAX];
	bool exe = !families;
	size_t n = 0;
	int found;

	if (families == LIBSCAN_TORCH)
		return attach_torch(gp, path, dev, ino);
	for (int a = 1; a < GPU_API_MAX; a++) {
		/* PyTorch's probes are on call sites, not symbols. */
		if (gpu_apis[a].family == LIBSCAN_TORCH ||
		    (!exe && !(gpu_apis[a].family & families)))
			continue;
		apis[n] = a;
		names[n++] = gpu_apis[a].name;
	}
	found = elf_find_syms(path, names, n, offsets, exe ? ELF_FIND_SYMTAB : 0);
	if (found < 0) {
		pr_debug("can't read the symbols of %s: %s", path, strerror(-found));
		return found;
	}
	if (exe) {
		for (size_t i = 0; i < n; i++)
			for (size_t k = 0; k < sizeof(anchors) / sizeof(anchors[0]); k++)
				if (apis[i] == anchors[k].api && offsets[i])
					families |= anchors[k].family;
	}
	if (!families || !found) {
		mark_lib(gp, dev, ino);
		return -ENODATA;
	}
	return attach_probes(gp, path, dev, ino, families, apis, offsets, n, "functions");
}

int gpu_probes__attach_cupti(struct gpu_probes *gp, char *path, size_t size)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;
	int err;

	if (n <= 0)
		return -errno;
	exe[n] = '\0';
	slash = strrchr(exe, '/');
	if (!slash)
		return -ENOENT;
	*slash = '\0';
	if ((size_t)snprintf(path, size, "%s/libsonde_cupti.so", exe) >= size)
		return -ENAMETOOLONG;
	if (access(path, R_OK))
		return -errno;
	err = gpu_probes__attach_path(gp, path);
	return err < 0 ? err : 0;
}

int gpu_probes__attach_path(struct gpu_probes *gp, const char *path)
{
	struct stat st;
	int err;

	if (stat(path, &st))
		err = -errno;
	else if (find_file(gp, st.st_dev, st.st_ino))
		return 0;
	else
		err = attach_file(gp, path, st.st_dev, st.st_ino, libscan_classify(path));
	if (err < 0 && err != -ENODATA)
		pr_debug("can't attach to %s: %s", path, strerror(-err));
	return err;
}

struct scan_ctx {
	struct gpu_probes *gp;
	uint32_t pid;
	char exe[PATH_MAX];
	int attached;
	bool unwind; /* build the unwind tables of its files, if it is ... */
	bool gpu;    /* ... a process that maps CUDA or NCCL code */
	struct gp_proc_libs libs;
	struct scan_file {
		struct unw_file_key key;
		uint64_t size; /* of its code mapping: the smaller, the sooner built */
		char *path, *name;
	} * files; /* its files, for the unwind tables */
	size_t nfiles, files_cap;
};

/* Notes a GPU library file the scanned process maps. */
static void note_lib(struct scan_ctx *sc, const struct gp_file *f, const char *path, int err)
{
	struct gp_proc_lib *l;

	for (uint32_t i = 0; i < sc->libs.n; i++)
		if (f ? sc->libs.lib[i].file == f - sc->gp->files
		      : !strcmp(sc->libs.lib[i].path, path))
			return;
	if (sc->libs.n >= PROC_LIBS_MAX)
		return;
	l = &sc->libs.lib[sc->libs.n++];
	l->file = f ? (int32_t)(f - sc->gp->files) : -1;
	l->err = err;
	snprintf(l->path, sizeof(l->path), "%s", path);
}

/* A path this process can open for the mapping: the mapped path when it is
 * the same file (same inode), else the process's own view of it through
 * map_files (another mount namespace, a deleted or replaced file). */
static void mapping_path(const struct scan_ctx *sc, const struct libscan_map *m, char *buf,
			 size_t size)
{
	struct stat st;

	if (!m->deleted && stat(m->path, &st) == 0 && st.st_ino == m->inode) {
		snprintf(buf, size, "%s", m->path);
		return;
	}
	snprintf(buf, size, "/proc/%" PRIu32 "/map_files/%" PRIx64 "-%" PRIx64, sc->pid, m->start,
		 m->end);
}

/* ---- the dynamic loader's hook ----------------------------------------- */

/* ld-linux-x86-64.so.2 (glibc), ld-musl-x86_64.so.1 (musl), ld.so. */
static bool is_loader(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return !strncmp(base, "ld-linux", 8) || !strncmp(base, "ld-musl", 7) ||
	       !strcmp(base, "ld.so");
}

static struct gp_loader *find_loader(struct gpu_probes *gp, uint64_t dev, uint64_t ino)
{
	for (size_t i = 0; i < gp->nloaders; i++)
		if (gp->loaders[i].dev == dev && gp->loaders[i].ino == ino)
			return &gp->loaders[i];
	return NULL;
}

/* Attaches prog at file offset of path, with cookie: *link as in struct
 * detach_job. 0 or a negative errno. */
static int hook_one(struct gpu_probes *gp, struct bpf_program *prog, const char *path,
		    uint64_t offset, uint64_t cookie, uintptr_t *link)
{
	if (gp->multi) {
		int fd = uprobe_multi_link(bpf_program__fd(prog), path, &offset, &cookie, 1, false);

		if (fd < 0)
			return fd;
		*link = (uintptr_t)fd << 1 | 1;
	} else {
		LIBBPF_OPTS(bpf_uprobe_opts, uo, .bpf_cookie = cookie);
		struct bpf_link *l = bpf_program__attach_uprobe_opts(prog, -1, path, offset, &uo);

		if (!l)
			return -errno;
		*link = (uintptr_t)l;
	}
	return 0;
}

/* Attaches gpu_loader_hook to path's _dl_debug_state. A loader without the
 * symbol, or one that can't be attached, is remembered all the same (with
 * no link): its processes are still found by the periodic scan. */
static void hook_loader(struct gpu_probes *gp, const char *path, uint64_t dev, uint64_t ino)
{
	static const char *const names[] = {"_dl_debug_state", "_r_debug"};
	struct bpf_program *prog = gp->skel->progs.gpu_loader_hook;
	struct gp_loader *l;
	uint64_t offset = 0, cookie = 0, vaddrs[2];
	int found, err;

	xgrow((void **)&gp->loaders, &gp->loaders_cap, gp->nloaders + 1, sizeof(*gp->loaders));
	l = &gp->loaders[gp->nloaders++];
	*l = (struct gp_loader){.dev = dev, .ino = ino};
	found = elf_find_syms(path, names, 1, &offset, 0);
	if (found <= 0) {
		pr_debug("%s: no _dl_debug_state (%s): its processes are found by the periodic "
			 "scan",
			 path, found < 0 ? strerror(-found) : "not exported");
		return;
	}
	/* The probe finds the loader's list of objects at this distance
	 * from _dl_debug_state (a loader without _r_debug: just a scan). */
	if (elf_find_syms(path, names, 2, vaddrs, ELF_FIND_OBJECTS | ELF_FIND_VADDRS) == 2)
		cookie = vaddrs[1] - vaddrs[0];
	err = hook_one(gp, prog, path, offset, cookie, &l->link);
	if (err)
		pr_warn("can't hook the dynamic loader %s: %s -- processes that load CUDA "
			"later are found within a scan interval",
			path, strerror(-err));
	else
		pr_debug("GPU probes: hooked the dynamic loader %s", path);
}

static int hook_own_loader_map(void *ctx, const struct libscan_map *m)
{
	struct gpu_probes *gp = ctx;
	uint64_t dev = makedev(m->dev_major, m->dev_minor);

	if (m->perms[2] == 'x' && is_loader(m->path) && !m->deleted &&
	    !find_loader(gp, dev, m->inode))
		hook_loader(gp, m->path, dev, m->inode);
	return 0;
}

static void hook_own_loader(struct gpu_probes *gp)
{
	libscan_each_map(getpid(), hook_own_loader_map, gp);
}

/* Hooks the interpreter file key (opened through path; name for messages)
 * at Py_FinalizeEx, once, and has sc's process held there. */
static void hook_finalize(struct scan_ctx *sc, const struct unw_file_key *key, const char *path,
			  const char *name)
{
	static const char *const names[] = {"Py_FinalizeEx"};
	struct gpu_probes *gp = sc->gp;
	struct gp_loader *l = NULL;
	uint64_t offset;
	__u8 one = 1;
	int err;

	if (gp->opts.hold == GPU_HOLD_NONE || !gp->opts.sym)
		return;
	for (size_t i = 0; i < gp->ninterps && !l; i++)
		if (gp->interps[i].dev == key->dev && gp->interps[i].ino == key->ino)
			l = &gp->interps[i];
	if (!l) {
		xgrow((void **)&gp->interps, &gp->interps_cap, gp->ninterps + 1,
		      sizeof(*gp->interps));
		l = &gp->interps[gp->ninterps++];
		*l = (struct gp_loader){.dev = key->dev, .ino = key->ino};
		err = elf_find_syms(path, names, 1, &offset, 0);
		err = err <= 0 ? (err ?: -ENOENT)
			       : hook_one(gp, gp->skel->progs.gpu_py_finalize, path, offset, 0,
					  &l->link);
		if (err)
			pr_info("can't hook Py_FinalizeEx in %s: %s -- the Python frames of a "
				"job's last GPU calls may be unnamed",
				name, strerror(-err));
		else
			pr_debug("GPU probes: hooked Py_FinalizeEx in %s", name);
	}
	if (l->link)
		bpf_map_update_elem(bpf_map__fd(gp->skel->maps.py_exit_pids), &sc->pid, &one,
				    BPF_ANY);
}

/* Notes the file of an executable mapping, for its unwind table. */
static int unwind_map(void *ctx, const struct libscan_map *m)
{
	struct scan_ctx *sc = ctx;
	struct unw_file_key key = {((uint64_t)m->dev_major << 20) | m->dev_minor, m->inode};
	char path[PATH_MAX + 64];

	if (m->perms[2] != 'x' || !m->inode || m->deleted)
		return 0;
	for (size_t i = 0; i < sc->nfiles; i++)
		if (sc->files[i].key.dev == key.dev && sc->files[i].key.ino == key.ino)
			return 0;
	mapping_path(sc, m, path, sizeof(path));
	/* Its Python frames readable before its first stack is walked
	 * through the interpreter, whose table may take a while, and the
	 * names of its last ones read before the interpreter goes. */
	if (unwinder__python_pid(unwinder_of(sc->gp), sc->pid, &key, path, m->path, m->start))
		hook_finalize(sc, &key, path, m->path);
	xgrow((void **)&sc->files, &sc->files_cap, sc->nfiles + 1, sizeof(*sc->files));
	sc->files[sc->nfiles++] =
		(struct scan_file){key, m->end - m->start, xstrdup(path), xstrdup(m->path)};
	return 0;
}

static int cmp_size(const void *a, const void *b)
{
	const struct scan_file *x = a, *y = b;

	return x->size < y->size ? -1 : x->size > y->size;
}

/* Has the unwind tables of sc's files built on the unwinder's threads, the
 * smallest first (most are built before a libtorch_cpu is); those still
 * to come go to want (a held process waits for them), or are freed. */
static void want_tables(struct gpu_probes *gp, struct scan_ctx *sc, struct gp_held *want)
{
	qsort(sc->files, sc->nfiles, sizeof(*sc->files), cmp_size);
	for (size_t i = 0; i < sc->nfiles; i++) {
		struct scan_file *f = &sc->files[i];
		int r = unwinder__want(unwinder_of(gp), &f->key, f->path, f->name);

		if (want && r != 1 && r != -ENOENT) {
			xgrow((void **)&want->wants, &want->wants_cap, want->nwants + 1,
			      sizeof(*want->wants));
			want->wants[want->nwants++] = (struct gp_want){f->key, f->path, f->name};
			continue;
		}
		free(f->path);
		free(f->name);
	}
	free(sc->files);
}

static int on_map(void *ctx, const struct libscan_map *m)
{
	struct scan_ctx *sc = ctx;
	struct gpu_probes *gp = sc->gp;
	uint64_t dev = makedev(m->dev_major, m->dev_minor);
	char path[PATH_MAX + 64];
	struct gp_file *f;
	unsigned families;
	int err;

	if (m->perms[2] != 'x')
		return 0;
	if ((f = find_file(gp, dev, m->inode))) {
		sc->gpu = true;
		note_lib(sc, f, m->path, 0);
		return 0;
	}
	if (gpu_table__get(&gp->examined, dev, m->inode)) {
		if (libscan_classify(m->path))
			note_lib(sc, NULL, m->path, -ENODATA);
		return 0;
	}
	if (is_loader(m->path)) {
		if (!find_loader(gp, dev, m->inode)) {
			mapping_path(sc, m, path, sizeof(path));
			hook_loader(gp, path, dev, m->inode);
		}
		return 0;
	}
	families = libscan_classify(m->path);
	/* Only the executable itself may link cudart statically. */
	if (!families && strcmp(m->path, sc->exe))
		return 0;
	mapping_path(sc, m, path, sizeof(path));
	/* Uprobes key on the mapped inode, which is what maps shows: the
	 * same file seen through another path or namespace is one file. */
	err = attach_file(gp, path, dev, m->inode, families);
	if (err > 0) {
		f = find_file(gp, dev, m->inode);
		note_lib(sc, f, m->path, 0);
		/* Another mount namespace's file (a container's): named as the
		 * process sees it, not by the pid's map_files entry. */
		if (f && strcmp(path, m->path)) {
			f->name = xstrdup(m->path);
			pr_info("GPU probes: that is %s in pid %" PRIu32 "'s mount namespace",
				f->name, sc->pid);
		}
		sc->attached++;
		sc->gpu = true;
	} else if (err == -ENODATA) {
		gpu_table__put(&gp->examined, dev, m->inode, NULL);
		if (families) {
			pr_debug("%s holds no GPU function", path);
			note_lib(sc, NULL, m->path, err);
		}
	} else {
		/* Retried at the next scan: the process may have gone. */
		pr_debug("can't read %s: %s", path, strerror(-err));
		if (families)
			note_lib(sc, NULL, m->path, err);
	}
	return 0;
}

/* Scans pid's mappings, attaching to its GPU files; with unwind, when it
 * is a GPU process, has its files' unwind tables built, the missing ones
 * noted in want (NULL: none noted). */
static int scan_pid(struct gpu_probes *gp, uint32_t pid, bool unwind, struct gp_held *want)
{
	struct scan_ctx sc = {.gp = gp, .pid = pid, .unwind = unwind};
	char link[64];
	ssize_t n;
	int err;

	snprintf(link, sizeof(link), "/proc/%" PRIu32 "/exe", pid);
	n = readlink(link, sc.exe, sizeof(sc.exe) - 1);
	if (n < 0)
		n = 0; /* a kernel thread, or gone */
	sc.exe[n] = 0;
	if (n > 10 && !strcmp(sc.exe + n - 10, " (deleted)"))
		sc.exe[n - 10] = 0;
	err = libscan_each_map(pid, on_map, &sc);
	if (err < 0)
		return err;
	if (sc.libs.n) {
		struct gp_proc_libs *pl = gpu_table__put(&gp->proc_libs, pid, 0, NULL);

		if (pl) {
			*pl = sc.libs;
			pl->gen = gp->scan_gen;
		}
	} else {
		gpu_table__del(&gp->proc_libs, pid, 0);
	}
	if (unwind && sc.gpu && unwinder_of(gp)) {
		libscan_each_map(pid, unwind_map, &sc);
		want_tables(gp, &sc, want);
	}
	return sc.attached;
}

int gpu_probes__scan_pid(struct gpu_probes *gp, uint32_t pid)
{
	return scan_pid(gp, pid, false, NULL);
}

/* ---- sweeping ---------------------------------------------------------- */

/* Field 22 of /proc/PID/stat (start time in clock ticks), 0 if gone. */
static uint64_t proc_start_time(uint32_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long t = 0;
	ssize_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%" PRIu32 "/stat", pid);
	f = fopen(path, "re");
	if (!f)
		return 0;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	/* The command name may hold spaces and parentheses: skip past the
	 * last ')'. Then state is field 3, start time field 22. */
	p = strrchr(buf, ')');
	if (!p || sscanf(p + 2,
			 "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
			 "%*d %*d %*d %llu",
			 &t) != 1)
		return 0;
	return t;
}

static bool tid_alive(uint32_t tid)
{
	char path[64];

	snprintf(path, sizeof(path), "/proc/%" PRIu32, tid);
	return access(path, F_OK) == 0;
}

struct dead_set {
	uint32_t *pids;
	size_t n, cap;
};

static bool dead_has(const struct dead_set *d, uint32_t pid)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->pids[i] == pid)
			return true;
	return false;
}

/* Deletes the BPF allocations of exited processes. */
static void sweep_allocs(struct gpu_probes *gp, const struct dead_set *dead)
{
	int fd = bpf_map__fd(gp->skel->maps.allocs);
	struct gpu_alloc_key key, next, *prev = NULL;

	while (!bpf_map_get_next_key(fd, prev, &next)) {
		key = next;
		prev = &key;
		if (dead_has(dead, key.pid) && !bpf_map_delete_elem(fd, &key))
			gp->swept_allocs++;
	}
}

/* Deletes the record_function scopes exited processes left open. */
static void sweep_rf(struct gpu_probes *gp, const struct dead_set *dead)
{
	int fd = bpf_map__fd(gp->skel->maps.torch_rf);
	struct gpu_rf_key key, next, *prev = NULL;

	while (!bpf_map_get_next_key(fd, prev, &next)) {
		key = next;
		prev = &key;
		if (dead_has(dead, key.pid) && !bpf_map_delete_elem(fd, &key))
			gp->swept_rf++;
	}
}

/* Deletes per-thread entries of threads that exited inside a call or after
 * choosing a device, and forgets blocked threads whose call is over (its
 * end record was lost). */
static void sweep_threads(struct gpu_probes *gp)
{
	int ifd = bpf_map__fd(gp->skel->maps.inflight);
	int dfd = bpf_map__fd(gp->skel->maps.thread_dev);
	struct gpu_call_key ck, cnext, *cprev = NULL;
	__u32 tk, tnext, *tprev = NULL;

	while (!bpf_map_get_next_key(ifd, cprev, &cnext)) {
		ck = cnext;
		cprev = &ck;
		if (!tid_alive(ck.tid) && !bpf_map_delete_elem(ifd, &ck))
			gp->swept_inflight++;
	}
	while (!bpf_map_get_next_key(dfd, tprev, &tnext)) {
		tk = tnext;
		tprev = &tk;
		if (!tid_alive(tk))
			bpf_map_delete_elem(dfd, &tk);
	}
}

static bool keep_still_blocked(void *ctx, uint64_t a, uint64_t b, void *val)
{
	struct gpu_probes *gp = ctx;
	const struct gpu_blocked *bl = val;
	struct gpu_call_key k = {.tid = bl->tid, .layer = GPU_API_LAYER(bl->api)};
	struct gpu_call c;
	if (mono_ns() - bl->since_ns < BLOCKED_RECHECK_NS)
		return true;
	if (bpf_map_lookup_elem(bpf_map__fd(gp->skel->maps.inflight), &k, &c))
		return false;
	return c.api == bl->api && c.ts_ns == bl->since_ns;
}

static void sweep(struct gpu_probes *gp)
{
	struct gpu_table *procs = &gp->st.procs;
	struct dead_set dead = {0};

	for (size_t i = 0; i < procs->n; i++) {
		struct gpu_proc_ent *p = gpu_table__val(procs, i);
		uint32_t pid = (uint32_t)procs->keys[i].a;

		if (proc_start_time(pid) != p->start_time || !p->start_time) {
			xgrow((void **)&dead.pids, &dead.cap, dead.n + 1, sizeof(*dead.pids));
			dead.pids[dead.n++] = pid;
		}
	}
	if (dead.n) {
		sweep_allocs(gp, &dead);
		sweep_rf(gp, &dead);
	}
	for (size_t i = 0; i < dead.n; i++) {
		struct gpu_event ev = {
			.type = GPU_EV_PROCESS_EXIT,
			.api = GPU_API_NONE,
			.api_name = "exit",
			.pid = dead.pids[i],
			.device = -1,
		};
		ev.ts_ns = mono_ns();
		gpu_state__forget_pid(&gp->st, dead.pids[i]);
		deliver(gp, &ev, NULL, 0);
	}
	gpu_table__filter(&gp->st.blocked, keep_still_blocked, gp);
	/* Threads that die inside a call are mostly those of dead processes. */
	if (dead.n || gp->scans % THREAD_SWEEP_EVERY == 0)
		sweep_threads(gp);
	free(dead.pids);
}

static bool scanned_now(void *ctx, uint64_t a, uint64_t b, void *val)
{
	const struct gp_proc_libs *pl = val;

	return pl->gen == *(const uint32_t *)ctx;
}

int gpu_probes__scan(struct gpu_probes *gp)
{
	int attached = 0, n;

	gp->scan_gen++;

	if (gp->opts.pid_filter) {
		int fd = bpf_map__fd(gp->skel->maps.target_pids);
		__u32 key, next, *prev = NULL;

		while (!bpf_map_get_next_key(fd, prev, &next)) {
			key = next;
			prev = &key;
			n = gpu_probes__scan_pid(gp, key);
			if (n > 0)
				attached += n;
		}
	} else {
		DIR *d = opendir("/proc");
		struct dirent *de;

		if (!d) {
			n = -errno;
			pr_err("can't list /proc: %s -- is procfs mounted?", strerror(-n));
			return n;
		}
		while ((de = readdir(d))) {
			char *end;
			unsigned long pid = strtoul(de->d_name, &end, 10);

			if (!isdigit((unsigned char)de->d_name[0]) || *end || pid > UINT32_MAX)
				continue;
			n = gpu_probes__scan_pid(gp, pid);
			if (n > 0)
				attached += n;
		}
		closedir(d);
	}
	/* Processes this scan did not find are gone. */
	gpu_table__filter(&gp->proc_libs, scanned_now, &gp->scan_gen);
	sweep(gp);
	gp->scans++;
	heartbeat(gp);
	return attached;
}

/* ---- events ------------------------------------------------------------ */

/* The hold time pid has spent already (NULL for one not seen; with add,
 * a new entry). */
static struct gp_spent *spent_of(struct gpu_probes *gp, uint32_t pid, bool add)
{
	struct gp_spent *e;

	for (size_t i = 0; i < HOLD_SPENT_MAX; i++)
		if (gp->spent[i].pid == pid)
			return &gp->spent[i];
	if (!add)
		return NULL;
	e = &gp->spent[gp->spent_next++ % HOLD_SPENT_MAX];
	*e = (struct gp_spent){pid, 0};
	return e;
}

static uint64_t hold_max_ns(const struct gpu_probes *gp)
{
	const char *env = getenv("SONDE_GPU_HOLD_MAX_MS");

	if (gp->opts.hold_max_ns)
		return gp->opts.hold_max_ns;
	if (env && *env)
		return strtoull(env, NULL, 10) * NS_PER_MS ?: 1;
	return HOLD_MAX_NS_DEFAULT;
}

/* Lets a held process go on; why for the log. */
static void let_go(struct gpu_probes *gp, uint32_t pid, uint64_t held_ns, const char *why)
{
	uint64_t ns = mono_ns() - held_ns;

	if (kill((pid_t)pid, SIGCONT) && errno != ESRCH)
		pr_warn("can't let pid %u go on (%s): %s -- send it SIGCONT", pid, why,
			strerror(errno));
	gp->hold_ns += ns;
	if (ns > gp->hold_max_ns)
		gp->hold_max_ns = ns;
	spent_of(gp, pid, true)->ns += ns;
	pr_debug("GPU probes: pid %u held %.1f ms (%s)", pid, (double)ns / NS_PER_MS, why);
}

/* Lets go the processes stopped as their interpreter finalizes, once every
 * record they made is read (the names of its Python frames with it). */
static void let_exit(struct gpu_probes *gp)
{
	if (!gp->nexiting)
		return;
	rb_drain__flush(gp->drain);
	rb_drain__consume(gp->drain, on_record, gp);
	for (size_t i = 0; i < gp->nexiting; i++)
		let_go(gp, gp->exiting[i].pid, gp->exiting[i].held_ns,
		       "its records read before its interpreter finalizes");
	gp->nexiting = 0;
}

static void free_held(struct gp_held *h)
{
	for (size_t i = 0; i < h->nwants; i++) {
		free(h->wants[i].path);
		free(h->wants[i].name);
	}
	free(h->wants);
}

/* Lets go the held processes whose files' tables are all in, or whose
 * hold time is up (all of them with force: the end). */
static void release_held(struct gpu_probes *gp, bool force)
{
	uint64_t now = mono_ns();
	size_t kept = 0;

	for (size_t i = 0; i < gp->nheld; i++) {
		struct gp_held *h = &gp->held[i];
		size_t left = 0;

		for (size_t j = 0; j < h->nwants; j++) {
			struct gp_want *w = &h->wants[j];
			int r = force ? 1
				      : unwinder__want(unwinder_of(gp), &w->key, w->path, w->name);

			if (r == 1 || r == -ENOENT) {
				free(w->path);
				free(w->name);
			} else {
				h->wants[left++] = *w;
			}
		}
		h->nwants = left;
		if (!left || now - h->held_ns >= h->max_ns) {
			if (left)
				gp->holds_capped++;
			let_go(gp, h->pid, h->held_ns,
			       left ? "hold time up, unwind tables still to come"
				    : "probes on, unwind tables in");
			free_held(h);
			continue;
		}
		gp->held[kept++] = *h;
	}
	gp->nheld = kept;
}

/* Scans the processes that just mapped new code, attaching before they call
 * it, then lets go those the loader probe stopped for it: at once, or,
 * when tables of their files are still to be built, once they are in or
 * the process has been held hold_max_ns in all (release_held). */
static void release_pending(struct gpu_probes *gp)
{
	for (size_t i = 0; i < gp->npending; i++) {
		struct gp_pending *p = &gp->pending[i];
		struct gp_held h = {.pid = p->pid, .held_ns = p->held_ns};
		const struct gp_spent *sp = spent_of(gp, p->pid, false);
		uint64_t spent = sp ? sp->ns : 0;

		/* Held or not, it is a GPU process: its stacks' files get
		 * their unwind tables before it calls into CUDA, if they can
		 * be built in time. */
		scan_pid(gp, p->pid, true, p->held ? &h : NULL);
		gp->loaded_scans++;
		/* Looked at, whatever it held: not reported again. */
		if (p->lib.ino)
			mark_lib_key(gp, &p->lib);
		if (!p->held)
			continue;
		h.max_ns = spent < hold_max_ns(gp) ? hold_max_ns(gp) - spent : 0;
		xgrow((void **)&gp->held, &gp->held_cap, gp->nheld + 1, sizeof(*gp->held));
		gp->held[gp->nheld++] = h;
	}
	gp->npending = 0;
	release_held(gp, false);
}

/* Hands ev on, or behind its process's events that wait for their
 * stacks (gpu_late.c), with its own stack's end when it has one. */
static void deliver(struct gpu_probes *gp, const struct gpu_event *ev, const struct late_stack *end,
		    size_t end_size)
{
	if (gp->late && (end || gpu_late__waiting(gp->late, ev->pid)))
		gpu_late__add(gp->late, ev, end, end_size);
	else
		gp->fn(gp->ctx, ev);
}

static int on_record(void *ctx, void *data, size_t size)
{
	struct gpu_probes *gp = ctx;
	const struct gpu_rec *r = data;
	const struct late_stack *end = NULL;
	size_t end_size = 0;
	struct gpu_event ev;
	bool new_pid;

	if (size == sizeof(*r) && r->type == GPU_EV_PY_EXIT) {
		gp->received++;
		if (r->flags & GPU_RF_HELD) {
			gp->holds++;
			xgrow((void **)&gp->exiting, &gp->exiting_cap, gp->nexiting + 1,
			      sizeof(*gp->exiting));
			gp->exiting[gp->nexiting++] = (struct gp_exiting){r->pid, mono_ns()};
		}
		return 0;
	}
	if (size == sizeof(*r) && (r->type == GPU_EV_LOADED || r->type == GPU_EV_NEW_LIB)) {
		struct gp_pending *p = NULL;

		gp->received++;
		for (size_t i = 0; i < gp->npending && !p; i++)
			if (gp->pending[i].pid == r->pid)
				p = &gp->pending[i];
		if (!p) {
			xgrow((void **)&gp->pending, &gp->pending_cap, gp->npending + 1,
			      sizeof(*gp->pending));
			p = &gp->pending[gp->npending++];
			*p = (struct gp_pending){.pid = r->pid};
		}
		if (r->type == GPU_EV_NEW_LIB) {
			gp->new_libs++;
			p->lib = (struct gpu_lib_key){r->args.lib.dev, r->args.lib.ino};
			if (r->flags & (GPU_RF_HOLD_LAPSED | GPU_RF_HOLD_FAILED))
				hold_missed(gp, r);
		}
		/* Stopped for a new library's attach (NEW_LIB) or for the unwind
		 * tables of its files (LOADED): release_pending lets it go. */
		if (r->flags & GPU_RF_HELD) {
			gp->holds++;
			if (!p->held)
				p->held_ns = mono_ns();
			p->held = true;
		}
		return 0;
	}
	/* One whose stack goes on in userspace: the call's record, then its
	 * stack's end. */
	if (size > sizeof(struct gpu_rec_stack) && (r->flags & GPU_RF_LATE)) {
		end = &((const struct gpu_rec_late *)data)->l;
		end_size = size - offsetof(struct gpu_rec_late, l);
		size = sizeof(struct gpu_rec_stack);
	}
	if (gpu_state__decode(&gp->st, data, size, &ev, &new_pid)) {
		pr_debug("malformed GPU record (%zu bytes) skipped", size);
		return 0;
	}
	if (new_pid) {
		struct gpu_proc_ent *p = gpu_table__get(&gp->st.procs, ev.pid, 0);

		if (p)
			p->start_time = proc_start_time(ev.pid);
	}
	gp->received++;
	if (end && !gp->late) {
		gp->st.bad_records++;
		pr_debug("a GPU record with its stack's end, not asked for, skipped");
		return 0;
	}
	deliver(gp, &ev, end, end_size);
	return 0;
}

int gpu_probes__poll(struct gpu_probes *gp, int timeout_ms)
{
	uint64_t now;
	int n;

	/* The drain thread copies the ring buffer into memory every few ms,
	 * and at once when a record forces a wakeup (a process waits for
	 * us): a stall here costs memory, not records. Without a wait,
	 * everything submitted so far. A held process is let go within ms of
	 * its tables. */
	if (gp->nheld && timeout_ms > HOLD_POLL_MS)
		timeout_ms = HOLD_POLL_MS;
	if (timeout_ms > 0)
		rb_drain__wait(gp->drain, timeout_ms);
	else
		rb_drain__flush(gp->drain);
	now = mono_ns();
	if (gp->drained_ns && now - gp->drained_ns > gp->drain_gap_max_ns)
		gp->drain_gap_max_ns = now - gp->drained_ns;
	n = rb_drain__consume(gp->drain, on_record, gp);
	gp->drained_ns = mono_ns();
	if (gp->unw)
		unwinder__poll(gp->unw);
	release_pending(gp);
	if (gp->late)
		gpu_late__poll(gp->late, false, gp->fn, gp->ctx);
	let_exit(gp);
	/* Processes are held only while we are here to let them go. */
	heartbeat(gp);
	return n;
}

int gpu_probes__flush(struct gpu_probes *gp)
{
	int n = gpu_probes__poll(gp, 0);

	if (!gp->late)
		return n;
	/* What the waiting stacks asked for, built, and what they ask for
	 * then (a walk goes on to files it had not reached), a few rounds;
	 * then what they need that still has no table is walked by frame
	 * pointers. */
	for (int round = 0; round < FLUSH_ROUNDS; round++) {
		struct gpu_late_stats st;

		unwinder__settle(unwinder_of(gp));
		gpu_late__poll(gp->late, false, gp->fn, gp->ctx);
		gpu_late__stats(gp->late, &st);
		if (!st.waiting)
			break;
	}
	gpu_late__poll(gp->late, true, gp->fn, gp->ctx);
	return n;
}

int gpu_probes__kernel(struct gpu_probes *gp, uint32_t pid, uint64_t handle, uint64_t *stub,
		       const char **name)
{
	const struct gpu_kernel_ent *k = gpu_table__get(&gp->st.kernels, pid, handle);

	if (!k)
		return -ENOENT;
	*stub = k->stub;
	*name = k->name;
	return 0;
}

void gpu_probes__each_blocked(struct gpu_probes *gp, gpu_blocked_fn fn, void *ctx)
{
	const struct gpu_table *t = &gp->st.blocked;

	for (size_t i = 0; i < t->n; i++) {
		struct gpu_blocked b;
		const struct gpu_proc_ent *p;
		const struct gpu_comm_ent *c;

		b = *(const struct gpu_blocked *)gpu_table__val(t, i);
		p = gpu_table__get(&gp->st.procs, b.pid, 0);
		b.rank = b.nranks = -1;
		if (p && p->has_coll) {
			b.has_coll = true;
			b.coll = p->coll;
			b.comm = p->comm;
			b.coll_ts_ns = p->coll_ts_ns;
			c = gpu_table__get(&gp->st.comms, b.pid, p->comm);
			if (c) {
				b.rank = c->rank;
				b.nranks = c->nranks;
			}
		}
		fn(ctx, &b);
	}
}

void gpu_probes__each_process_lib(struct gpu_probes *gp, gpu_process_lib_fn fn, void *ctx)
{
	for (size_t i = 0; i < gp->proc_libs.n; i++) {
		const struct gp_proc_libs *pl = gpu_table__val(&gp->proc_libs, i);

		for (uint32_t j = 0; j < pl->n; j++) {
			const struct gp_proc_lib *l = &pl->lib[j];
			const struct gp_file *f = l->file >= 0 ? &gp->files[l->file] : NULL;

			fn(ctx, (uint32_t)gp->proc_libs.keys[i].a,
			   f ? (f->name ? f->name : f->path) : l->path, l->err);
		}
	}
}

/* Entries into one probe, over all CPUs. */
/* A probe's calls so far, by its cookie. */
struct probe_calls {
	uint64_t cookie, calls;
};

static int cmp_cookie(const void *a, const void *b)
{
	const struct probe_calls *x = a, *y = b;

	return x->cookie < y->cookie ? -1 : x->cookie > y->cookie;
}

/* The same, a key at a time, into *v (*cap its room); the number read. */
static size_t read_probe_calls_each(struct gpu_probes *gp, int fd, uint64_t *percpu,
				    struct probe_calls **v, size_t *cap)
{
	uint64_t key, next, *prev = NULL;
	size_t n = 0;

	while (n < GPU_MAX_PROBE_COOKIES && !bpf_map_get_next_key(fd, prev, &next)) {
		uint64_t sum = 0;

		key = next;
		prev = &key;
		if (bpf_map_lookup_elem(fd, &key, percpu))
			continue;
		for (int c = 0; c < gp->nposs; c++)
			sum += percpu[c];
		xgrow((void **)v, cap, n + 1, sizeof(**v));
		(*v)[n++] = (struct probe_calls){key, sum};
	}
	return n;
}

/* Every called probe's count (the map holds only those), sorted by cookie,
 * read in batches of BATCH: a syscall for a batch, not one a probe (the
 * library search attaches hundreds, read every second). The number read;
 * *out is the caller's to free. */
static size_t read_probe_calls(struct gpu_probes *gp, struct probe_calls **out)
{
	enum { BATCH = 256 };
	int fd = bpf_map__fd(gp->skel->maps.probe_calls);
	uint64_t *keys = xcalloc(BATCH, sizeof(*keys));
	uint64_t *vals = xcalloc((size_t)BATCH * (size_t)gp->nposs, sizeof(*vals));
	uint64_t in = 0, next = 0;
	struct probe_calls *v = NULL;
	size_t n = 0, cap = 0;
	bool first = true, done = false;

	while (!done && n < GPU_MAX_PROBE_COOKIES) {
		__u32 count = BATCH;
		int err = bpf_map_lookup_batch(fd, first ? NULL : &in, &next, keys, vals, &count,
					       NULL);

		if (err && errno != ENOENT) {
			/* A kernel without batch lookups: key by key. */
			if (first)
				n = read_probe_calls_each(gp, fd, vals, &v, &cap);
			break;
		}
		done = err != 0;
		xgrow((void **)&v, &cap, n + count, sizeof(*v));
		for (__u32 i = 0; i < count; i++) {
			uint64_t sum = 0;

			for (int c = 0; c < gp->nposs; c++)
				sum += vals[(size_t)i * (size_t)gp->nposs + (size_t)c];
			v[n++] = (struct probe_calls){keys[i], sum};
		}
		in = next;
		first = false;
	}
	free(keys);
	free(vals);
	if (n)
		qsort(v, n, sizeof(*v), cmp_cookie);
	*out = v;
	return n;
}

static uint64_t probe_calls(const struct probe_calls *v, size_t n, uint64_t cookie)
{
	struct probe_calls key = {.cookie = cookie}, *hit;

	hit = n ? bsearch(&key, v, n, sizeof(*v), cmp_cookie) : NULL;
	return hit ? hit->calls : 0;
}

void gpu_probes__each_probe(struct gpu_probes *gp, gpu_probe_info_fn fn, void *ctx)
{
	struct probe_calls *calls;
	size_t ncalls = read_probe_calls(gp, &calls);

	for (size_t i = 0; i < gp->nfiles; i++) {
		const struct gp_file *f = &gp->files[i];

		for (size_t j = 0; j < f->nprobes; j++) {
			const struct gp_probe *p = &f->probes[j];
			struct gpu_probe_info info = {
				.path = f->name ? f->name : f->path,
				.symbol = gpu_apis[p->api].name,
				.offset = p->offset,
				.err = p->err,
				.alias_of = p->alias_of ? gpu_apis[p->alias_of].name : NULL,
			};

			if (!p->err && !p->alias_of)
				info.calls = probe_calls(calls, ncalls, file_cookie(gp, f, p->api));
			fn(ctx, &info);
		}
	}
	free(calls);
}

void gpu_probes__each_lost(struct gpu_probes *gp, gpu_lost_fn fn, void *ctx)
{
	int fd = bpf_map__fd(gp->skel->maps.lost_by_pid);
	uint32_t key, next;
	uint32_t *prev = NULL;
	uint64_t n;

	while (!bpf_map_get_next_key(fd, prev, &next)) {
		key = next;
		prev = &key;
		if (!bpf_map_lookup_elem(fd, &key, &n) && n)
			fn(ctx, key, n);
	}
}

static double fill(uint64_t n, uint32_t max)
{
	return max ? (double)n / max : 0;
}

void gpu_probes__stats(struct gpu_probes *gp, struct gpu_probes_stats *out)
{
	int dfd = bpf_map__fd(gp->skel->maps.drops);
	int cfd = bpf_map__fd(gp->skel->maps.counters);
	double f;

	memset(out, 0, sizeof(*out));
	bpf_counters__read(dfd, &bpf_gpu_drops, out->drops);
	bpf_counters__read(cfd, &bpf_gpu_counts, out->counts);
	for (int d = 0; d < GPU_DROP_MAX; d++)
		/* A stack's end walked by frame pointers: the record is whole. */
		if (d != GPU_DROP_LATE)
			out->drops_total += out->drops[d];
	if (gp->late)
		gpu_late__stats(gp->late, &out->late_st);
	out->drain_gap_max_ns = gp->drain_gap_max_ns;
	out->queue_peak_bytes = rb_drain__peak(gp->drain);
	out->allocs_live = out->counts[GPU_CNT_ALLOCS_LIVE] - gp->swept_allocs;
	out->inflight_live = out->counts[GPU_CNT_INFLIGHT_LIVE] - gp->swept_inflight;
	out->map_fill = fill(out->allocs_live, bpf_map__max_entries(gp->skel->maps.allocs));
	f = fill(out->inflight_live, bpf_map__max_entries(gp->skel->maps.inflight));
	if (f > out->map_fill)
		out->map_fill = f;
	f = fill(out->counts[GPU_CNT_RF_LIVE] - gp->swept_rf,
		 bpf_map__max_entries(gp->skel->maps.torch_rf));
	if (f > out->map_fill)
		out->map_fill = f;
	out->received = gp->received;
	out->bad_records = gp->st.bad_records;
	out->files = gp->nfiles;
	out->probes_attached = gp->probes_attached;
	out->probes_failed = gp->probes_failed;
	out->processes = gp->st.procs.n;
	out->kernels = gp->st.kernels.n;
	out->scans = gp->scans;
	out->loaded_scans = gp->loaded_scans;
	out->new_libs = gp->new_libs;
	out->holds = gp->holds;
	out->hold_ns = gp->hold_ns;
	out->hold_max_ns = gp->hold_max_ns;
	out->holds_capped = gp->holds_capped;
	memcpy(out->hold_missed, gp->hold_missed, sizeof(out->hold_missed));
	out->loaders_hooked = 0;
	for (size_t i = 0; i < gp->nloaders; i++)
		out->loaders_hooked += gp->loaders[i].link != 0;
}
