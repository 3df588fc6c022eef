/* test_nvml.c: the agent's reading of NVML (src/agent/nvml.c) against a
 * made-up library whose functions behave as NVML's do and misbehave as a
 * driver might: each process's memory per device, sorted, a process listed
 * twice on a device (MIG) summed, NVML_VALUE_NOT_AVAILABLE left out, a
 * device with more processes than the bound (NVML_ERROR_INSUFFICIENT_SIZE)
 * or an error skipped without losing the others, a count beyond the array
 * bounded; no per-process query where the library lacks it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "agent/nvml.c"

#define NDEVS 6
#define ERROR_UNKNOWN 999

static int calls[NDEVS];

static nvml_return fake_shutdown(void)
{
	return NVML_OK;
}

static nvml_return fake_handle(unsigned int i, nvml_device *d)
{
	if (i == 5) /* a device that fell off the bus */
		return 15;
	*d = (nvml_device)(uintptr_t)(i + 1);
	return NVML_OK;
}

static nvml_return fake_meminfo(nvml_device d, struct nvml_memory *m)
{
	m->total = (uintptr_t)d << 30;
	m->used = 1;
	m->free = m->total - 1;
	return NVML_OK;
}

static void put(struct nvml_process_info *p, unsigned int pid, unsigned long long bytes)
{
	*p = (struct nvml_process_info){pid, bytes, 0xFFFFFFFFu, 0xFFFFFFFFu};
}

static nvml_return fake_procs(nvml_device d, unsigned int *count, struct nvml_process_info *infos)
{
	unsigned int dev = (unsigned int)(uintptr_t)d - 1;

	/* The agent offers its whole array each time. */
	assert_int_equal(*count, NVML_MAX_PROCS);
	assert_non_null(infos);
	calls[dev]++;
	switch (dev) {
	case 0: /* pid 20 twice (two MIG instances), listed after pid 10 */
		put(&infos[0], 20, 100);
		put(&infos[1], 10, 50);
		put(&infos[2], 20, 25);
		*count = 3;
		return NVML_OK;
	case 1: /* more processes than the agent reads: NVML fills nothing */
		*count = 5000;
		return NVML_INSUFFICIENT_SIZE;
	case 2: /* one process's use unknown (WDDM, some vGPUs) */
		put(&infos[0], 30, NVML_NOT_AVAILABLE);
		put(&infos[1], 10, 7);
		*count = 2;
		return NVML_OK;
	case 3:
		return ERROR_UNKNOWN;
	case 4: /* a library that says it wrote more than it had room for */
		for (unsigned int i = 0; i < NVML_MAX_PROCS; i++)
			put(&infos[i], 1000 + i, 1);
		*count = 2 * NVML_MAX_PROCS;
		return NVML_OK;
	}
	fail_msg("device %u queried", dev);
	return ERROR_UNKNOWN;
}

static struct nvml *fake_nvml(bool with_procs)
{
	struct nvml *n = xcalloc(1, sizeof(*n));

	n->lib = NULL;
	n->shutdown = fake_shutdown;
	n->handle = fake_handle;
	n->meminfo = fake_meminfo;
	n->procs = with_procs ? fake_procs : NULL;
	n->ndevs = NDEVS;
	return n;
}

static void release(struct nvml *n)
{
	free(n->rows);
	free(n);
}

static void test_process_memory(void **state)
{
	struct nvml *n = fake_nvml(true);
	const struct gpu_proc_mem *r;
	size_t count;

	for (int round = 0; round < 2; round++) {
		assert_int_equal(nvml__process_memory(n, &r, &count), 0);
		/* 10 on GPUs 0 and 2, 20 on GPU 0 (summed), the 1024 of GPU 4. */
		assert_int_equal(count, 3 + NVML_MAX_PROCS);
		assert_true(r[0].pid == 10 && r[0].device == 0 && r[0].bytes == 50);
		assert_true(r[1].pid == 10 && r[1].device == 2 && r[1].bytes == 7);
		assert_true(r[2].pid == 20 && r[2].device == 0 && r[2].bytes == 125);
		for (size_t i = 3; i < count; i++)
			assert_true(r[i].pid == 1000 + i - 3 && r[i].device == 4 &&
				    r[i].bytes == 1);
		for (size_t i = 0; i < count; i++)
			assert_true(r[i].pid != 30);
	}
	/* Each reachable device once a poll; the one whose handle fails never. */
	assert_int_equal(calls[0], 2);
	assert_int_equal(calls[1], 2);
	assert_int_equal(calls[4], 2);
	assert_int_equal(calls[5], 0);
	/* The full device is said once, not each second. */
	assert_true(n->said_full[1] && !n->said_full[0]);
	assert_true(n->said_error);
	release(n);
}

static void test_no_process_query(void **state)
{
	struct nvml *n = fake_nvml(false);
	const struct gpu_proc_mem *r = (void *)1;
	size_t count = 9;

	assert_int_equal(nvml__process_memory(n, &r, &count), -ENOSYS);
	assert_null(r);
	assert_int_equal(count, 0);
	release(n);
}

static void test_device_memory(void **state)
{
	struct nvml *n = fake_nvml(true);
	uint64_t totals[NDEVS], used[NDEVS];

	/* At most max; a device that does not answer has 0. */
	assert_int_equal(nvml__device_memory(n, totals, NULL, 3), 3);
	assert_int_equal(totals[2], 3ull << 30);
	assert_int_equal(nvml__device_memory(n, totals, used, NDEVS), NDEVS);
	assert_int_equal(totals[0], 1ull << 30);
	assert_int_equal(used[0], 1);
	assert_int_equal(totals[5], 0);
	assert_int_equal(used[5], 0);
	release(n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_process_memory),
		cmocka_unit_test(test_no_process_query),
		cmocka_unit_test(test_device_memory),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
