/* test_verdict.c: what bounds a process (src/metrics/verdict.c): each kind
 * of job gets its verdict, the explained waits take their off-CPU time from
 * the causes, small shares are idle, and system calls map to causes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "metrics/verdict.h"

#define MS 1000000ull
#define WALL (10000 * MS)

static enum verdict judge(struct proc_times t, struct verdict_out *out)
{
	t.wall_ns = t.wall_ns ? t.wall_ns : WALL;
	verdict__judge(&t, out);
	return out->verdict;
}

static void test_kinds_of_job(void **state)
{
	struct verdict_out o;

	/* CPU-heavy: a core busy, little else. */
	assert_int_equal(
		judge((struct proc_times){.ns = {[PS_CPU] = 9500 * MS, [PS_IO] = 300 * MS}}, &o),
		V_CPU);
	/* Sync-heavy: 80 % in cudaDeviceSynchronize, blocked in futex
	 * meanwhile; the futex time is the sync's, not a lock's. */
	assert_int_equal(judge((struct proc_times){.ns = {[PS_GPU] = 8000 * MS,
							  [PS_LOCK] = 8000 * MS,
							  [PS_CPU] = 1900 * MS}},
			       &o),
			 V_GPU);
	assert_true(o.share[PS_LOCK] < 1e-9);
	assert_true(o.share[PS_GPU] > 0.79 && o.share[PS_GPU] < 0.81);
	/* Loader-heavy: waiting for batches in a pipe read. */
	assert_int_equal(judge((struct proc_times){.ns = {[PS_INPUT] = 6000 * MS,
							  [PS_IO] = 6000 * MS,
							  [PS_CPU] = 3000 * MS}},
			       &o),
			 V_INPUT);
	/* Stuck in a collective. */
	assert_int_equal(
		judge((struct proc_times){.ns = {[PS_COMMUNICATION] = WALL, [PS_LOCK] = WALL}}, &o),
		V_COMMUNICATION);
	/* Lock- and I/O-bound with nothing explaining it. */
	assert_int_equal(
		judge((struct proc_times){.ns = {[PS_LOCK] = 5000 * MS, [PS_CPU] = 2000 * MS}}, &o),
		V_LOCK);
	assert_int_equal(
		judge((struct proc_times){.ns = {[PS_IO] = 4000 * MS, [PS_CPU] = 1000 * MS}}, &o),
		V_IO);
	/* Idle: sleeping, or nothing reaching a fifth of the wall time. */
	assert_int_equal(judge((struct proc_times){.ns = {[PS_SLEEP] = 9900 * MS}}, &o), V_IDLE);
	assert_int_equal(
		judge((struct proc_times){.ns = {[PS_CPU] = 1500 * MS, [PS_IO] = 1000 * MS}}, &o),
		V_IDLE);
	assert_true(o.share[PS_CPU] > 0.149 && o.share[PS_CPU] < 0.151);
}

static void test_explained_waits_split_by_cause(void **state)
{
	struct verdict_out o;

	/* 3 s of GPU wait out of 4 s lock and 2 s io: lock gives 2 s, io 1 s. */
	judge(
		(struct proc_times){
			.ns = {[PS_GPU] = 3000 * MS, [PS_LOCK] = 4000 * MS, [PS_IO] = 2000 * MS}},
		&o);
	assert_true(o.share[PS_LOCK] > 0.199 && o.share[PS_LOCK] < 0.201);
	assert_true(o.share[PS_IO] > 0.099 && o.share[PS_IO] < 0.101);
	/* More explained than blocked (the waits spun on a CPU): no cause
	 * goes below zero. */
	judge((struct proc_times){.ns = {[PS_GPU] = 9000 * MS, [PS_IO] = 1000 * MS}}, &o);
	assert_true(o.share[PS_IO] == 0);
	/* Ties go to the state listed first. */
	assert_int_equal(
		judge((struct proc_times){.ns = {[PS_CPU] = 5000 * MS, [PS_IO] = 5000 * MS}}, &o),
		V_CPU);
	/* No window: idle, no shares. */
	verdict__judge(&(struct proc_times){.ns = {[PS_CPU] = 5}}, &o);
	assert_int_equal(o.verdict, V_IDLE);
	assert_true(o.share[PS_CPU] == 0);
}

static void test_names_and_causes(void **state)
{
	assert_string_equal(verdict__name(V_COMMUNICATION), "communication");
	assert_string_equal(verdict__name(V_IDLE), "idle");
	assert_string_equal(verdict__name((enum verdict)99), "idle");
	assert_string_equal(proc_state__name(PS_INPUT), "dataloader_wait");
	assert_string_equal(proc_state__name(PS_CPU), "on_cpu");
	assert_int_equal(verdict__syscall_cause(202), PS_LOCK);	 /* futex */
	assert_int_equal(verdict__syscall_cause(230), PS_SLEEP); /* clock_nanosleep */
	assert_int_equal(verdict__syscall_cause(0), PS_IO);	 /* read */
	assert_int_equal(verdict__syscall_cause(-1), PS_IO);	 /* a page fault */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kinds_of_job),
		cmocka_unit_test(test_explained_waits_split_by_cause),
		cmocka_unit_test(test_names_and_causes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
