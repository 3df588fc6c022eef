/* pid_filter.h: the processes the BPF programs watch when not the whole
 * machine (`sonde record -p`, `record -- CMD`, `agent -p`): one BPF map
 * (bpf/pid_filter.bpf.h's target_pids) made here once and handed to every
 * BPF object that filters by pid -- the CPU sampler, the GPU probes -- so
 * that a pid is added once, for all of them; their programs add the
 * watched processes' children as they fork. */
#ifndef SONDE_PROBE_PID_FILTER_H
#define SONDE_PROBE_PID_FILTER_H

#include <stdint.h>

struct pid_filter;
struct bpf_map;

/* The filter's map, empty; NULL after printing why. */
struct pid_filter *pid_filter__new(void);
void pid_filter__free(struct pid_filter *pf);
/* Watches pid (a process: its tgid). 0 or a negative errno. */
int pid_filter__add(struct pid_filter *pf, uint32_t pid);
/* Makes an object's target_pids map, before the object is loaded, this
 * filter's. 0 or a negative errno. */
int pid_filter__use(const struct pid_filter *pf, struct bpf_map *target_pids);

#endif
