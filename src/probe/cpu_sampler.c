/* cpu_sampler.c: CPU sampler userspace: perf events per CPU, program attach, ring
 * buffer draining and the drop counters; the off-CPU programs' settings,
 * attach and ring buffer. See cpu_sampler.h for the contract. */
#include "probe/bpf_counters.h"
#include "probe/bpf_msgs.h"
#include "probe/pid_filter.h"
#include "probe/cpu_sampler.h"
#include "probe/host.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "unwind/late.h"
#include "unwind/unwinder.h"

#include "cpu.skel.h"

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Late samples a CPU's share of the ring buffer has room for, beyond its
 * half second of samples. */
#define LATE_ROOM 16
/* Rounds of tables built for the waiting stacks at the end of a recording. */
#define FLUSH_ROUNDS 4

struct cpu_sampler {
	struct cpu_bpf *skel;
	struct ring_buffer *rb;
	struct unwinder *unw;
	struct unw_late *late; /* NULL: no late stacks */
	int ncpus;
	int *pfds;
	struct bpf_link **links;
	const char *event;
	cpu_stack_fn fn;
	void *ctx;
	struct stack *stack; /* the sample's at hand */
	uint64_t received;
	/* Off-CPU profiling (offcpu_fn NULL: off). */
	struct bpf_link *offcpu_links[2];
	offcpu_wait_fn offcpu_fn;
	void *offcpu_ctx;
	uint64_t offcpu_received, offcpu_min_ns, offcpu_rate;
	bool offcpu_task_work; /* user stacks by task work, else at sys_exit */
};

static int on_sample(void *ctx, void *data, size_t size)
{
	struct cpu_sampler *cs = ctx;

	/* A record that is not ours is a bug on one side; skip it loudly. */
	if (size < sizeof(struct cpu_sample)) {
		pr_warn("short CPU sample record (%zu bytes) skipped", size);
		return 0;
	}
	cs->received++;
	if (((const struct cpu_sample *)data)->flags & CPU_SF_LATE) {
		if (cs->late)
			unw_late__add(cs->late, data, size);
		else
			pr_warn("a deferred CPU sample with no one to finish it skipped");
		return 0;
	}
	stack__from_sample(cs->stack, data);
	cs->fn(cs->ctx, cs->stack);
	return 0;
}

/* A sample whose stack's end was finished in userspace. */
static void on_late(void *ctx, const struct cpu_sample *s)
{
	struct cpu_sampler *cs = ctx;

	stack__from_sample(cs->stack, s);
	cs->fn(cs->ctx, cs->stack);
}

static int on_offcpu(void *ctx, void *data, size_t size)
{
	struct cpu_sampler *cs = ctx;
	const struct offcpu_sample *r = data;
	struct offcpu_wait w;

	if (size < sizeof(struct offcpu_sample)) {
		pr_warn("short off-CPU record (%zu bytes) skipped", size);
		return 0;
	}
	w = (struct offcpu_wait){
		.stack = cs->stack,
		.blocked_ns = r->blocked_ns,
		.off_ts_ns = r->off_ts_ns,
		.syscall = r->syscall,
		.nblocks = r->nblocks,
		.leaf_only = r->s.flags & OFFCPU_SF_LEAF_ONLY,
	};
	cs->offcpu_received++;
	stack__from_sample(cs->stack, &r->s);
	cs->offcpu_fn(cs->offcpu_ctx, &w);
	return 0;
}

/* Whether the kernel has BPF task works (Linux 6.18): the off-CPU
 * profiler takes user stacks with them, else at sys_exit. */
static bool kernel_has_task_work(void)
{
	struct btf *vmlinux = btf__load_vmlinux_btf();
	bool has;

	if (!vmlinux)
		return false;
	has = btf__find_by_name_kind(vmlinux, "bpf_task_work_schedule_resume_impl", BTF_KIND_FUNC) >
	      0;
	btf__free(vmlinux);
	return has;
}

/* The off-CPU programs' settings, before the load; with it off, they are
 * not loaded and their ring buffer is one page. */
static void offcpu_configure(struct cpu_sampler *cs, const struct cpu_sampler_opts *opts)
{
	struct cpu_bpf *skel = cs->skel;
	uint64_t cost, room, want;

	cs->offcpu_task_work = opts->offcpu_fn && !opts->offcpu_sys_exit &&
			       !getenv("SONDE_OFFCPU_SYS_EXIT") && kernel_has_task_work();
	if (!cs->offcpu_task_work) {
		bpf_program__set_autoload(skel->progs.offcpu_switch, false);
		bpf_map__set_max_entries(skel->maps.offcpu_works, 1);
		skel->rodata->offcpu_works_mask = 0;
	} else if ((want = env_size("SONDE_OFFCPU_SLOTS"))) {
		/* SONDE_OFFCPU_SLOTS=4096: the pending waits' slots, for a
		 * machine where more threads wake at once than the 1024 hold
		 * without two sharing one: the power of two at most that, up
		 * to 1M. */
		uint32_t slots = 1;

		while ((uint64_t)slots * 2 <= want && slots < (1u << 20))
			slots <<= 1;
		bpf_map__set_max_entries(skel->maps.offcpu_works, slots);
		skel->rodata->offcpu_works_mask = slots - 1;
	}
	if (!opts->offcpu_fn || cs->offcpu_task_work) {
		bpf_program__set_autoload(skel->progs.offcpu_switch_sx, false);
		bpf_program__set_autoload(skel->progs.offcpu_sys_exit, false);
	}
	if (!opts->offcpu_fn) {
		bpf_map__set_max_entries(skel->maps.offcpu_events, getpagesize());
		return;
	}
	cs->offcpu_fn = opts->offcpu_fn;
	cs->offcpu_ctx = opts->offcpu_ctx;
	cs->offcpu_min_ns = opts->offcpu_min_ns ? opts->offcpu_min_ns : OFFCPU_MIN_NS_DEFAULT;
	cs->offcpu_rate = opts->offcpu_rate ? opts->offcpu_rate : OFFCPU_RATE_DEFAULT;
	/* The machine's rate, shared out among the CPUs' buckets. */
	cost = NS_PER_SEC * (uint64_t)cs->ncpus / cs->offcpu_rate;
	skel->rodata->offcpu_min_ns = cs->offcpu_min_ns;
	skel->rodata->offcpu_cost_ns = cost ? cost : 1;
	skel->rodata->offcpu_burst_ns = (cost ? cost : 1) * OFFCPU_BURST_DEFAULT;
	/* A quarter of a second at the rate bound, or every CPU's burst at
	 * once if more: userspace drains every 10 ms. */
	room = cs->offcpu_rate / 4;
	if (room < (uint64_t)OFFCPU_BURST_DEFAULT * cs->ncpus)
		room = (uint64_t)OFFCPU_BURST_DEFAULT * cs->ncpus;
	room *= sizeof(struct offcpu_sample) + 8;
	/* SONDE_OFFCPU_RINGBUF=8M: the ring, for a machine whose waits
	 * still overflow it (or a smaller one). */
	if ((want = env_size("SONDE_OFFCPU_RINGBUF")))
		room = want;
	bpf_map__set_max_entries(skel->maps.offcpu_events, ringbuf_size(room, 64u << 20));
}

static int offcpu_attach(struct cpu_sampler *cs)
{
	struct bpf_program *progs[2] = {cs->skel->progs.offcpu_switch, NULL};

	if (!cs->offcpu_task_work) {
		progs[0] = cs->skel->progs.offcpu_switch_sx;
		progs[1] = cs->skel->progs.offcpu_sys_exit;
	}
	for (int i = 0; i < 2 && progs[i]; i++) {
		cs->offcpu_links[i] = bpf_program__attach(progs[i]);
		if (!cs->offcpu_links[i]) {
			int err = -errno;

			cs->offcpu_links[i] = NULL;
			pr_err("can't attach the off-CPU profiler to %s: %s -- it needs tp_btf "
			       "programs and task storage (Linux 5.11 or later)",
			       bpf_program__section_name(progs[i]), strerror(-err));
			return err;
		}
	}
	pr_debug("off-CPU profiler: waits of %.3f ms or more, user stacks %s",
		 (double)cs->offcpu_min_ns / NS_PER_MS,
		 cs->offcpu_task_work ? "by task work" : "at sys_exit");
	return 0;
}

/* Whether user stacks that reach code without a table yet are finished in
 * userspace (SONDE_LATE_STACKS=0: walked by frame pointers, as before). */
static bool late_stacks(const struct cpu_sampler_opts *opts)
{
	const char *env = getenv("SONDE_LATE_STACKS");

	return opts->user_stacks && opts->sym && !(env && !strcmp(env, "0"));
}

static int open_sampling_event(int cpu, int freq, bool hw)
{
	struct perf_event_attr attr = {
		.size = sizeof(attr),
		.type = hw ? PERF_TYPE_HARDWARE : PERF_TYPE_SOFTWARE,
		.config = hw ? PERF_COUNT_HW_CPU_CYCLES : PERF_COUNT_SW_CPU_CLOCK,
		.freq = 1,
		.sample_freq = freq,
	};

	return syscall(SYS_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
}

struct cpu_sampler *cpu_sampler__open(const struct cpu_sampler_opts *opts, cpu_stack_fn fn,
				      void *ctx)
{
	struct cpu_sampler *cs = xcalloc(1, sizeof(*cs));
	int cpus[HOST_MAX_CPUS], err = 0;
	size_t rb_bytes;
	bool hw = true;

	cs->fn = fn;
	cs->ctx = ctx;
	cs->stack = stack__new();
	cs->ncpus = online_cpus(cpus, HOST_MAX_CPUS);
	if (cs->ncpus <= 0) {
		err = cs->ncpus ? cs->ncpus : -ENODEV;
		pr_err("can't read the online CPUs from /sys/devices/system/cpu/online: %s",
		       strerror(-err));
		goto cleanup;
	}
	raise_memlock();

	cs->skel = cpu_bpf__open();
	if (!cs->skel) {
		err = -errno;
		pr_err("can't open the CPU sampler BPF object: %s", strerror(-err));
		goto cleanup;
	}
	cs->skel->rodata->filter_pids = opts->pid_filter != NULL;
	cs->skel->rodata->follow_children = opts->follow_children;
	cs->skel->rodata->skip_idle = !opts->include_idle;
	cs->skel->rodata->kernel_stacks = opts->kernel_stacks;
	cs->skel->rodata->user_stacks = opts->user_stacks;
	cs->skel->rodata->late_stacks = late_stacks(opts);
	/* SONDE_CPU_RINGBUF=32M sets it; else room for ~0.5 s of samples
	 * from every CPU at full stack size: the reader drains every 10 ms,
	 * so this absorbs long stalls. */
	rb_bytes = opts->ringbuf_bytes ? opts->ringbuf_bytes : env_size("SONDE_CPU_RINGBUF");
	if (!rb_bytes) {
		rb_bytes = (size_t)opts->freq * cs->ncpus * (sizeof(struct cpu_sample) + 8) / 2;
		/* ... and the stacks of a burst of new processes, whose ends
		 * are userspace's (a late sample is 17 times a sample). */
		if (late_stacks(opts))
			rb_bytes += (size_t)LATE_ROOM * cs->ncpus *
				    (sizeof(struct cpu_sample_late) + 8);
	}
	rb_bytes = ringbuf_size(rb_bytes, 256u << 20);
	bpf_map__set_max_entries(cs->skel->maps.samples, rb_bytes);
	/* A late sample's record is made in a slot of its CPU's. */
	if (late_stacks(opts))
		bpf_map__set_max_entries(cs->skel->maps.late_recs, libbpf_num_possible_cpus());
	bpf_map__set_max_entries(cs->skel->maps.unw_rows,
				 unwinder__rows_for(opts->unwind_memory ? opts->unwind_memory
									: UNWIND_MEMORY_DEFAULT));
	if (!opts->follow_children)
		bpf_program__set_autoload(cs->skel->progs.follow_fork, false);
	if (opts->pid_filter &&
	    (err = pid_filter__use(opts->pid_filter, cs->skel->maps.target_pids))) {
		pr_err("can't share the pid filter with the CPU sampler: %s", strerror(-err));
		goto cleanup;
	}
	offcpu_configure(cs, opts);

	err = cpu_bpf__load(cs->skel);
	if (err) {
		pr_err("can't load the CPU sampler BPF program: %s -- run with SONDE_LOG=debug "
		       "for the verifier log",
		       strerror(-err));
		goto cleanup;
	}
	cs->unw = unwinder__new(&(struct unwinder_maps){
		cs->skel->maps.unw_rows, cs->skel->maps.unw_files, cs->skel->maps.unw_misses,
		cs->skel->maps.unw_counters, cs->skel->maps.unw_py_files,
		cs->skel->maps.unw_py_procs, cs->skel->maps.unw_py_pids});
	if (!cs->unw) {
		err = -errno;
		goto cleanup;
	}
	if (late_stacks(opts))
		cs->late = unw_late__new(cs->unw, opts->sym, NULL);
	if (opts->follow_children) {
		err = cpu_bpf__attach(cs->skel);
		if (err) {
			pr_err("can't attach to sched_process_fork: %s", strerror(-err));
			goto cleanup;
		}
	}

	cs->pfds = xcalloc(cs->ncpus, sizeof(int));
	cs->links = xcalloc(cs->ncpus, sizeof(*cs->links));
	for (int i = 0; i < cs->ncpus; i++)
		cs->pfds[i] = -1;
	/* freq 0: no sampling, off-CPU profiling only. */
	for (int i = 0; opts->freq > 0 && i < cs->ncpus; i++) {
		int fd = hw ? open_sampling_event(cpus[i], opts->freq, true) : -1;

		/* No hardware PMU (VMs, containers): fall back to the
		 * cpu-clock software event, as perf does. */
		if (fd < 0 && hw && i == 0) {
			hw = false;
			pr_debug("no cycles event (%s), sampling with cpu-clock", strerror(errno));
		}
		if (fd < 0)
			fd = open_sampling_event(cpus[i], opts->freq, false);
		if (fd < 0) {
			char hint[160];

			err = -errno;
			perf_open_hint(err, opts->freq, hint, sizeof(hint));
			pr_err("can't open perf event on cpu %d: %s%s%s", cpus[i], strerror(-err),
			       *hint ? " -- " : "", hint);
			goto cleanup;
		}
		cs->pfds[i] = fd;
		cs->links[i] = bpf_program__attach_perf_event(cs->skel->progs.sample_cpu, fd);
		if (!cs->links[i]) {
			err = -errno;
			cs->links[i] = NULL;
			pr_err("can't attach the sampler to cpu %d: %s", cpus[i], strerror(-err));
			goto cleanup;
		}
	}
	cs->event = opts->freq <= 0 ? "none" : hw ? "cycles" : "cpu-clock";

	cs->rb = ring_buffer__new(bpf_map__fd(cs->skel->maps.samples), on_sample, cs, NULL);
	if (!cs->rb) {
		err = -errno;
		pr_err("can't open the sample ring buffer: %s", strerror(-err));
		goto cleanup;
	}
	if (cs->offcpu_fn) {
		err = ring_buffer__add(cs->rb, bpf_map__fd(cs->skel->maps.offcpu_events), on_offcpu,
				       cs);
		if (err) {
			pr_err("can't open the off-CPU ring buffer: %s", strerror(-err));
			goto cleanup;
		}
		err = offcpu_attach(cs);
		if (err)
			goto cleanup;
	}
	return cs;

cleanup:
	cpu_sampler__free(cs);
	errno = -err;
	return NULL;
}

void cpu_sampler__free(struct cpu_sampler *cs)
{
	if (!cs)
		return;
	for (int i = 0; i < 2; i++)
		bpf_link__destroy(cs->offcpu_links[i]);
	ring_buffer__free(cs->rb);
	unw_late__free(cs->late);
	unwinder__free(cs->unw);
	for (int i = 0; cs->links && i < cs->ncpus; i++)
		bpf_link__destroy(cs->links[i]);
	for (int i = 0; cs->pfds && i < cs->ncpus; i++)
		if (cs->pfds[i] >= 0)
			close(cs->pfds[i]);
	free(cs->links);
	free(cs->pfds);
	cpu_bpf__destroy(cs->skel);
	free(cs->stack);
	free(cs);
}

int cpu_sampler__poll(struct cpu_sampler *cs)
{
	int n = ring_buffer__consume(cs->rb);

	unwinder__poll(cs->unw);
	if (cs->late)
		unw_late__poll(cs->late, false, on_late, cs);
	return n;
}

int cpu_sampler__flush(struct cpu_sampler *cs)
{
	int n = cpu_sampler__poll(cs);

	if (!cs->late)
		return n;
	/* What the waiting stacks asked for, built, and what they ask for
	 * then (a walk goes on to files it had not reached), a few rounds;
	 * then what they need that still has no table is walked by frame
	 * pointers. */
	for (int round = 0; round < FLUSH_ROUNDS; round++) {
		struct unw_late_stats st;

		unwinder__settle(cs->unw);
		unw_late__poll(cs->late, false, on_late, cs);
		unw_late__stats(cs->late, &st);
		if (!st.waiting)
			break;
	}
	unw_late__poll(cs->late, true, on_late, cs);
	return n;
}

void cpu_sampler__late_stats(struct cpu_sampler *cs, struct unw_late_stats *out)
{
	if (cs->late)
		unw_late__stats(cs->late, out);
	else
		memset(out, 0, sizeof(*out));
}

void cpu_sampler__unwind_stats(struct cpu_sampler *cs, struct unwinder_stats *out)
{
	unwinder__stats(cs->unw, out);
}

struct unwinder *cpu_sampler__unwinder(struct cpu_sampler *cs)
{
	return cs->unw;
}

int cpu_sampler__preload(struct cpu_sampler *cs, const char *path)
{
	return unwinder__load_path(cs->unw, path);
}

void cpu_sampler__stats(struct cpu_sampler *cs, struct cpu_sampler_stats *out)
{
	int dfd = bpf_map__fd(cs->skel->maps.drops);
	int cfd = bpf_map__fd(cs->skel->maps.counters);

	memset(out, 0, sizeof(*out));
	bpf_counters__read(dfd, &bpf_cpu_drops, out->drops);
	bpf_counters__read(cfd, &bpf_cpu_counts, out->counts);
	out->received = cs->received;
	out->ncpus = cs->ncpus;
	{
		struct bpf_prog_info info = {0};
		__u32 len = sizeof(info);

		if (!bpf_obj_get_info_by_fd(bpf_program__fd(cs->skel->progs.sample_cpu), &info,
					    &len)) {
			out->prog_runs = info.run_cnt;
			out->prog_ns = info.run_time_ns;
		}
	}
	if (!cs->offcpu_fn)
		return;
	out->offcpu_received = cs->offcpu_received;
	out->offcpu_min_ns = cs->offcpu_min_ns;
	out->offcpu_rate = cs->offcpu_rate;
	out->offcpu_task_work = cs->offcpu_task_work;
}

const char *cpu_sampler__event(const struct cpu_sampler *cs)
{
	return cs->event;
}
