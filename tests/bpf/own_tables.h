/* own_tables.h: what the tests of stacks finished in userspace share (test_late.c,
 * test_gpu_late.c): the real unwind tables in the real BPF maps -- the CPU sampler's,
 * loaded without sampling -- and this process's own memory read as the BPF side reads
 * a task's. Needs root: setup leaves cs NULL without it. Include once, in a cmocka test. */
#ifndef SONDE_TESTS_BPF_OWN_TABLES_H
#define SONDE_TESTS_BPF_OWN_TABLES_H

#include <sys/uio.h>
#include <unistd.h>

#include "probe/cpu_sampler.h"
#include "symbolize/symbolize.h"

static struct cpu_sampler *cs;
static struct symbolizer *sym;

static void ignore(void *ctx, const struct stack *s)
{
}

static int setup(void **state)
{
	struct cpu_sampler_opts o = {.freq = 0, .user_stacks = true, .kernel_stacks = false};

	if (geteuid() != 0)
		return 0;
	sym = symbolizer__new();
	o.sym = sym;
	cs = cpu_sampler__open(&o, ignore, NULL);
	return cs ? 0 : -1;
}

static int teardown(void **state)
{
	cpu_sampler__free(cs);
	symbolizer__free(sym);
	return 0;
}

/* Reads this process's memory as the BPF side reads a task's: 0, or -1
 * where nothing is mapped. */
static int read_own(void *dst, uint64_t addr, size_t len)
{
	struct iovec local = {dst, len}, remote = {(void *)(uintptr_t)addr, len};

	return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == (ssize_t)len ? 0 : -1;
}

#endif
