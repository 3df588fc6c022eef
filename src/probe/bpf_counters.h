/* bpf_counters.h: the BPF programs' counters (bpf/counters.h's tables) read
 * from their per-CPU maps into arrays by index, and exported on /metrics as
 * one family per table, a sample per counter. */
#ifndef SONDE_PROBE_BPF_COUNTERS_H
#define SONDE_PROBE_BPF_COUNTERS_H

#include <stddef.h>
#include <stdint.h>

struct prom_out;

struct bpf_counter {
	const char *name; /* the label's value */
	const char *help; /* what one count is */
};

struct bpf_counter_table {
	const char *family; /* sonde_agent_bpf_..._total */
	const char *label;  /* "reason" for drops, "counter" for counts */
	const char *what;   /* the family's help, before the list of counters */
	const struct bpf_counter *c;
	unsigned n; /* the map's entries: the enum's *_MAX */
};

/* bpf/counters.h's tables: CPU_DROPS, CPU_COUNTERS, UNW_COUNTERS, GPU_DROPS,
 * GPU_COUNTERS. */
extern const struct bpf_counter_table bpf_cpu_drops, bpf_cpu_counts, bpf_unw_counts, bpf_gpu_drops,
	bpf_gpu_counts;

/* out[i] = the sum over CPUs of the per-CPU array map fd's entry i, for each
 * of t's counters (0 where unreadable). */
void bpf_counters__read(int fd, const struct bpf_counter_table *t, uint64_t *out);
/* t's family: its help naming each counter and what it counts, a sample
 * {label=name} per counter of v (read by bpf_counters__read). Counters
 * named *_live (map entries: gauges) are left out. */
void bpf_counters__emit(struct prom_out *o, const struct bpf_counter_table *t, const uint64_t *v);

#endif
