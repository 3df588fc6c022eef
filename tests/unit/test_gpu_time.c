/* test_gpu_time.c: the join of launches and kernels by (pid, correlation
 * id) in src/agent/gpu_time.c -- what is counted when one side is missing,
 * and what CUPTI itself lost, as each process's library tells it. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <string.h>

#include "agent/gpu_time.h"

static void launch(struct gpu_time *gt, uint32_t pid, uint32_t correlation)
{
	struct cpu_sample s;

	memset(&s, 0, sizeof(s));
	s.pid = pid;
	s.tid = pid;
	gpu_time__launch(gt, pid, correlation, 0, &s);
}

static void test_join_counts(void **state)
{
	struct gpu_time *gt = gpu_time__new(NULL, 16);
	struct gpu_time_stats st;

	launch(gt, 1, 10);
	launch(gt, 1, 11);
	launch(gt, 2, 10); /* another process's id 10 */
	gpu_time__kernel(gt, 1, 10, "_Z1kv", 100);
	gpu_time__kernel(gt, 2, 10, "_Z1kv", 50);
	gpu_time__kernel(gt, 1, 12, "_Z1kv", 7); /* its launch never seen */
	gpu_time__stats(gt, &st);
	assert_int_equal(st.kernels, 2);
	assert_int_equal(st.ns, 150);
	assert_int_equal(st.no_launch, 1);
	assert_int_equal(st.pending, 1);
	/* The process goes: its launch still waiting is given up. */
	gpu_time__forget_pid(gt, 1);
	gpu_time__stats(gt, &st);
	assert_int_equal(st.no_kernel, 1);
	assert_int_equal(st.pending, 0);
	gpu_time__free(gt);
}

/* A graph's launch: a kernel for each node, all with the launch's id. */
static void test_graph_kernels(void **state)
{
	struct gpu_time *gt = gpu_time__new(NULL, 16);
	struct gpu_time_stats st;

	launch(gt, 3, 20);
	for (int i = 0; i < 3; i++)
		gpu_time__kernel(gt, 3, 20, "_Z1kv", 10);
	gpu_time__stats(gt, &st);
	assert_int_equal(st.kernels, 3);
	assert_int_equal(st.ns, 30);
	assert_int_equal(st.no_launch, 0);
	/* Past GPU_TIME_MAX_JOINED other launches joined, it is forgotten. */
	for (uint32_t c = 100; c < 100 + GPU_TIME_MAX_JOINED; c++) {
		launch(gt, 3, c);
		gpu_time__kernel(gt, 3, c, "_Z1kv", 1);
	}
	gpu_time__kernel(gt, 3, 20, "_Z1kv", 10);
	gpu_time__stats(gt, &st);
	assert_int_equal(st.no_launch, 1);
	assert_int_equal(st.no_kernel, 0); /* each had its kernel */
	gpu_time__free(gt);
}

/* Each library tells its process's count so far; the sum over processes,
 * the gone ones included, each counted once. */
static void test_cupti_lost(void **state)
{
	struct gpu_time *gt = gpu_time__new(NULL, 16);
	struct gpu_time_stats st;

	gpu_time__clock(gt, 1, 0);
	gpu_time__clock(gt, 1, 5);
	gpu_time__clock(gt, 1, 12);
	gpu_time__clock(gt, 1, 12);
	gpu_time__clock(gt, 2, 3);
	gpu_time__stats(gt, &st);
	assert_int_equal(st.cupti_lost, 15);
	gpu_time__forget_pid(gt, 1);
	gpu_time__clock(gt, 1, 4); /* a new process, the pid reused */
	gpu_time__stats(gt, &st);
	assert_int_equal(st.cupti_lost, 19);
	gpu_time__free(gt);
	gpu_time__free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_join_counts),
		cmocka_unit_test(test_graph_kernels),
		cmocka_unit_test(test_cupti_lost),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
