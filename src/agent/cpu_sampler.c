/* cpu_sampler.c: CPU sampler userspace: perf events per CPU, program attach, ring
 * buffer draining and the drop counters. See cpu_sampler.h for the contract. */
#include "agent/cpu_sampler.h"
#include "agent/host.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "unwind/unwinder.h"

#include "cpu.skel.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

struct cpu_sampler {
	struct cpu_bpf *skel;
	struct ring_buffer *rb;
	struct unwinder *unw;
	int ncpus;
	int *pfds;
	struct bpf_link **links;
	const char *event;
	cpu_sample_fn fn;
	void *ctx;
	uint64_t received;
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
	cs->fn(cs->ctx, data);
	return 0;
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

struct cpu_sampler *cpu_sampler__open(const struct cpu_sampler_opts *opts, cpu_sample_fn fn,
				      void *ctx)
{
	struct cpu_sampler *cs = xcalloc(1, sizeof(*cs));
	int cpus[HOST_MAX_CPUS], err = 0;
	size_t rb_bytes;
	bool hw = true;

	cs->fn = fn;
	cs->ctx = ctx;
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
	cs->skel->rodata->filter_pids = opts->filter_pids;
	cs->skel->rodata->follow_children = opts->follow_children;
	cs->skel->rodata->skip_idle = !opts->include_idle;
	cs->skel->rodata->kernel_stacks = opts->kernel_stacks;
	cs->skel->rodata->user_stacks = opts->user_stacks;
	/* Room for ~0.5 s of samples from every CPU at full stack size: the
	 * reader drains every 10 ms, so this absorbs long stalls. */
	rb_bytes = opts->ringbuf_bytes;
	if (!rb_bytes)
		rb_bytes = (size_t)opts->freq * cs->ncpus * (sizeof(struct cpu_sample) + 8) / 2;
	rb_bytes = ringbuf_size(rb_bytes, 256u << 20);
	bpf_map__set_max_entries(cs->skel->maps.samples, rb_bytes);
	bpf_map__set_max_entries(cs->skel->maps.unw_rows,
				 unwinder__rows_for(opts->unwind_memory ? opts->unwind_memory
									: UNWIND_MEMORY_DEFAULT));
	if (!opts->follow_children)
		bpf_program__set_autoload(cs->skel->progs.follow_fork, false);

	err = cpu_bpf__load(cs->skel);
	if (err) {
		pr_err("can't load the CPU sampler BPF program: %s -- run with SONDE_LOG=debug "
		       "for the verifier log",
		       strerror(-err));
		goto cleanup;
	}
	cs->unw = unwinder__new(&(struct unwinder_maps){
		cs->skel->maps.unw_rows, cs->skel->maps.unw_files, cs->skel->maps.unw_misses,
		cs->skel->maps.unw_counters, cs->skel->maps.unw_py_files});
	if (!cs->unw) {
		err = -errno;
		goto cleanup;
	}
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
	for (int i = 0; i < cs->ncpus; i++) {
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
			err = -errno;
			pr_err("can't open perf event on cpu %d: %s -- is the CPU offline, or "
			       "kernel.perf_event_max_sample_rate below %d?",
			       cpus[i], strerror(-err), opts->freq);
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
	cs->event = hw ? "cycles" : "cpu-clock";

	cs->rb = ring_buffer__new(bpf_map__fd(cs->skel->maps.samples), on_sample, cs, NULL);
	if (!cs->rb) {
		err = -errno;
		pr_err("can't open the sample ring buffer: %s", strerror(-err));
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
	ring_buffer__free(cs->rb);
	unwinder__free(cs->unw);
	for (int i = 0; cs->links && i < cs->ncpus; i++)
		bpf_link__destroy(cs->links[i]);
	for (int i = 0; cs->pfds && i < cs->ncpus; i++)
		if (cs->pfds[i] >= 0)
			close(cs->pfds[i]);
	free(cs->links);
	free(cs->pfds);
	cpu_bpf__destroy(cs->skel);
	free(cs);
}

int cpu_sampler__add_pid(struct cpu_sampler *cs, uint32_t pid)
{
	__u8 one = 1;

	if (bpf_map_update_elem(bpf_map__fd(cs->skel->maps.target_pids), &pid, &one, BPF_ANY))
		return -errno;
	return 0;
}

int cpu_sampler__poll(struct cpu_sampler *cs)
{
	int n = ring_buffer__consume(cs->rb);

	unwinder__poll(cs->unw);
	return n;
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
	out->samples = percpu_sum(cfd, CPU_CNT_SAMPLES);
	out->filtered = percpu_sum(cfd, CPU_CNT_FILTERED);
	out->drop_ringbuf = percpu_sum(dfd, CPU_DROP_RINGBUF);
	out->drop_kstack = percpu_sum(dfd, CPU_DROP_KSTACK);
	out->drop_ustack = percpu_sum(dfd, CPU_DROP_USTACK);
	out->received = cs->received;
	out->ncpus = cs->ncpus;
}

const char *cpu_sampler__event(const struct cpu_sampler *cs)
{
	return cs->event;
}
