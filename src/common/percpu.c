/* percpu.c: sums of per-CPU BPF array entries. See percpu.h. */
#include "common/percpu.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

uint64_t percpu_sum(int fd, uint32_t key)
{
	static int ncpus;
	uint64_t vals[PERCPU_MAX_CPUS], sum = 0;

	if (!ncpus)
		ncpus = libbpf_num_possible_cpus();
	if (ncpus <= 0 || ncpus > PERCPU_MAX_CPUS || bpf_map_lookup_elem(fd, &key, vals))
		return 0;
	for (int i = 0; i < ncpus; i++)
		sum += vals[i];
	return sum;
}
