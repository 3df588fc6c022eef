/* test_gpu_time.c: the join of launches and kernels by (pid, correlation
 * id) in src/agent/gpu_time.c -- what is counted when one side is missing,
 * and what CUPTI itself lost, as each process's library tells it; copies
 * joined the same way, and NVTX range paths by process. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdint.h>
#include <string.h>

#include "agent/gpu_time.h"

static void launch_in(struct gpu_time *gt, uint32_t pid, uint32_t correlation, uint32_t nvtx)
{
	struct stack s = {.pid = pid, .tid = pid}; /* no frames */

	gpu_time__launch(gt, pid, correlation, nvtx, &s);
}

static void launch(struct gpu_time *gt, uint32_t pid, uint32_t correlation)
{
	launch_in(gt, pid, correlation, 0);
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

	gpu_time__clock(gt, 1, 0, 0);
	gpu_time__clock(gt, 1, 5, 0);
	gpu_time__clock(gt, 1, 12, 100);
	gpu_time__clock(gt, 1, 12, 100);
	gpu_time__clock(gt, 2, 3, 7);
	gpu_time__stats(gt, &st);
	assert_int_equal(st.cupti_lost, 15);
	assert_int_equal(st.stall_dropped, 107);
	gpu_time__forget_pid(gt, 1);
	gpu_time__clock(gt, 1, 4, 1); /* a new process, the pid reused */
	gpu_time__stats(gt, &st);
	assert_int_equal(st.cupti_lost, 19);
	assert_int_equal(st.stall_dropped, 108);
	gpu_time__free(gt);
	gpu_time__free(NULL);
}

/* Copies join as kernels do, counted apart with their bytes; their labels
 * by CUPTI's copy kind. */
static void test_copies(void **state)
{
	struct gpu_time *gt = gpu_time__new(NULL, 16);
	struct gpu_time_stats st;

	launch(gt, 4, 30);
	launch(gt, 4, 31);
	gpu_time__copy(gt, 4, 30, 1, false, 1000, 4096);
	gpu_time__copy(gt, 4, 31, 0, true, 10, 256);
	gpu_time__copy(gt, 4, 32, 2, false, 5, 8); /* its call never seen */
	gpu_time__stats(gt, &st);
	assert_int_equal(st.copies, 2);
	assert_int_equal(st.copy_bytes, 4096 + 256);
	assert_int_equal(st.ns, 1010);
	assert_int_equal(st.kernels, 0);
	assert_int_equal(st.no_launch, 1);
	assert_string_equal(gpu_copy_label(1, false), "[memcpy HtoD]");
	assert_string_equal(gpu_copy_label(2, false), "[memcpy DtoH]");
	assert_string_equal(gpu_copy_label(8, false), "[memcpy DtoD]");
	assert_string_equal(gpu_copy_label(8, true), "[memset]");
	assert_string_equal(gpu_copy_label(99, false), "[memcpy]");
	gpu_time__free(gt);
}

/* NVTX paths by (pid, id): a launch in a path never told is counted as its
 * kernel joins; a process gone forgets its paths, a pid reused tells anew. */
static void test_nvtx(void **state)
{
	struct gpu_time *gt = gpu_time__new(NULL, 16);
	struct gpu_time_stats st;

	gpu_time__nvtx(gt, 5, 1,
		       "step\x1f"
		       "forward");
	gpu_time__nvtx(gt, 5, 1,
		       "step\x1f"
		       "forward"); /* told again: once */
	launch_in(gt, 5, 40, 1);
	launch_in(gt, 5, 41, 2); /* path 2 never told */
	launch_in(gt, 6, 40, 1); /* pid 6 told no path 1 */
	gpu_time__kernel(gt, 5, 40, "_Z1kv", 1);
	gpu_time__kernel(gt, 5, 41, "_Z1kv", 1);
	gpu_time__kernel(gt, 6, 40, "_Z1kv", 1);
	gpu_time__stats(gt, &st);
	assert_int_equal(st.kernels, 3);
	assert_int_equal(st.nvtx_unknown, 2);
	gpu_time__forget_pid(gt, 5);
	launch_in(gt, 5, 42, 1);
	gpu_time__kernel(gt, 5, 42, "_Z1kv", 1);
	gpu_time__stats(gt, &st);
	assert_int_equal(st.nvtx_unknown, 3);
	gpu_time__free(gt);
}

/* Stall samples: under their kernel's launch once it is known -- those
 * that came first wait for it; a kernel never seen leaves its samples
 * without a stack when the profile is taken (counted), as does a reason
 * never named. */
static void test_stalls(void **state)
{
	struct gpu_time *gt = gpu_time__new(NULL, 16);
	struct gpu_time_stats st;
	char buf[64];

	gpu_time__stall_reason(gt, 7, 5, "smsp__pcsamp_warps_issue_stalled_long_scoreboard");
	gpu_time__stall(gt, 7, "_Z1kv", 0, 0x10, 5, 3); /* before its kernel */
	gpu_time__stats(gt, &st);
	assert_int_equal(st.stall_samples, 0); /* waiting */
	launch(gt, 7, 50);
	gpu_time__kernel(gt, 7, 50, "_Z1kv", 10);
	gpu_time__stats(gt, &st);
	assert_int_equal(st.stall_samples, 3); /* adopted */
	assert_int_equal(st.stall_no_stack, 0);
	gpu_time__stall(gt, 7, "_Z1kv", 0, 0x20, 5, 4);
	gpu_time__stall(gt, 7, "_Z1kv", 0, 0x20, 9, 2); /* reason 9 never named */
	gpu_time__stall(gt, 7, "_Z1jv", 0, 0x20, 5, 6); /* kernel never seen */
	gpu_time__stats(gt, &st);
	assert_int_equal(st.stall_samples, 9);
	assert_int_equal(st.stall_unknown, 2);
	gpu_time__forget_pid(gt, 7); /* the waiting ones go, without a stack */
	gpu_time__stats(gt, &st);
	assert_int_equal(st.stall_samples, 15);
	assert_int_equal(st.stall_no_stack, 6);
	assert_string_equal(
		gpu_stall_label("smsp__pcsamp_warps_issue_stalled_math_pipe_throttle", buf, 64),
		"math_pipe_throttle");
	assert_string_equal(gpu_stall_label("smsp__pcsamp_sample_count", buf, 64), "sample_count");
	assert_string_equal(gpu_stall_label("other", buf, 64), "other");
	gpu_time__free(gt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_join_counts), cmocka_unit_test(test_graph_kernels),
		cmocka_unit_test(test_cupti_lost),  cmocka_unit_test(test_copies),
		cmocka_unit_test(test_nvtx),	    cmocka_unit_test(test_stalls),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
