/* bpf_counters.c: bpf/counters.h's tables, read and exported. */
#include "probe/bpf_counters.h"
#include "probe/host.h"
#include "common/prom.h"
#include "common/sbuf.h"

#include <linux/types.h>
#include <stdbool.h>
#include <string.h>

#include "counters.h" /* bpf/ */

#define COUNTER_DEF(e, name, help) {name, help},

static const struct bpf_counter cpu_drops[] = {CPU_DROPS(COUNTER_DEF)};
static const struct bpf_counter cpu_counts[] = {CPU_COUNTERS(COUNTER_DEF)};
static const struct bpf_counter unw_counts[] = {UNW_COUNTERS(COUNTER_DEF)};
static const struct bpf_counter gpu_drops[] = {GPU_DROPS(COUNTER_DEF)};
static const struct bpf_counter gpu_counts[] = {GPU_COUNTERS(COUNTER_DEF)};

#define TABLE(fam, lab, text, arr)                                                                 \
	{                                                                                          \
		fam, lab, text, arr, sizeof(arr) / sizeof(arr[0])                                  \
	}

const struct bpf_counter_table bpf_cpu_drops = TABLE(
	"sonde_agent_bpf_cpu_drops_total", "reason",
	"What the CPU sampler's and off-CPU profiler's BPF programs could not keep", cpu_drops);
const struct bpf_counter_table bpf_cpu_counts =
	TABLE("sonde_agent_bpf_cpu_counts_total", "counter",
	      "What the CPU sampler's and off-CPU profiler's BPF programs counted", cpu_counts);
const struct bpf_counter_table bpf_unw_counts =
	TABLE("sonde_agent_bpf_unwind_total", "counter",
	      "What the BPF user-stack unwinder counted, its stacks and frames", unw_counts);
const struct bpf_counter_table bpf_gpu_drops =
	TABLE("sonde_agent_bpf_gpu_drops_total", "reason",
	      "What the GPU probes' BPF programs could not keep", gpu_drops);
const struct bpf_counter_table bpf_gpu_counts =
	TABLE("sonde_agent_bpf_gpu_counts_total", "counter",
	      "What the GPU probes' BPF programs counted", gpu_counts);

void bpf_counters__read(int fd, const struct bpf_counter_table *t, uint64_t *out)
{
	for (unsigned i = 0; i < t->n; i++)
		out[i] = fd >= 0 ? percpu_sum(fd, i) : 0;
}

static bool is_gauge(const char *name)
{
	size_t n = strlen(name);

	return n >= 5 && !strcmp(name + n - 5, "_live");
}

void bpf_counters__emit(struct prom_out *o, const struct bpf_counter_table *t, const uint64_t *v)
{
	struct sbuf help = {0};

	sbuf__printf(&help, "%s, by %s (each count one of):", t->what, t->label);
	for (unsigned i = 0; i < t->n; i++)
		if (!is_gauge(t->c[i].name))
			sbuf__printf(&help, "%s %s: %s", i ? ";" : "", t->c[i].name, t->c[i].help);
	sbuf__puts(&help, ".");
	prom__family(o, t->family, "counter", help.buf ? help.buf : t->what);
	sbuf__free(&help);
	for (unsigned i = 0; i < t->n; i++) {
		const char *l[] = {t->label, t->c[i].name, NULL};

		if (!is_gauge(t->c[i].name))
			prom__sample(o, t->family, l, (double)v[i]);
	}
}
