/* test_proc_time.c: where followed processes' threads spend each window
 * (src/agent/proc_time.c): only followed processes count, the leading
 * thread is the one on a CPU or in explained waits (not an idle pool's),
 * a wait under way is credited once across windows however it is seen,
 * and exits and lost ends are forgotten. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "agent/proc_time.h"

#define MS 1000000ull
#define S (1000 * MS)

struct seen {
	int n;
	struct proc_window w[8];
};

static void collect(void *ctx, const struct proc_window *w)
{
	struct seen *s = ctx;

	if (s->n < 8)
		s->w[s->n] = *w;
	s->n++;
}

static struct seen window(struct proc_time *pt, uint64_t wall)
{
	struct seen s;

	memset(&s, 0, sizeof(s));
	proc_time__window(pt, wall, collect, &s);
	return s;
}

static void test_only_followed(void **state)
{
	struct proc_time *pt = proc_time__new();
	struct seen s;

	(void)state;
	proc_time__add(pt, 100, 100, PS_CPU, 5 * S);
	proc_time__wait(pt, 100, 100, PS_GPU, 0, 5 * S, true);
	s = window(pt, 10 * S);
	assert_int_equal(s.n, 0);
	proc_time__track(pt, 100);
	assert_true(proc_time__tracked(pt, 100));
	proc_time__add(pt, 100, 101, PS_CPU, 8 * S);
	s = window(pt, 10 * S);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.w[0].pid, 100);
	assert_int_equal(s.w[0].total.ns[PS_CPU], 8 * S);
	assert_int_equal(s.w[0].total.ns[PS_GPU], 0);
	assert_int_equal(s.w[0].verdict.verdict, V_CPU);
	/* A window with nothing: still listed, idle. */
	s = window(pt, 10 * S);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.w[0].verdict.verdict, V_IDLE);
	assert_int_equal(s.w[0].lead_tid, 0);
	proc_time__forget(pt, 100);
	assert_false(proc_time__tracked(pt, 100));
	assert_int_equal(window(pt, 10 * S).n, 0);
	proc_time__free(pt);
}

static void test_leading_thread(void **state)
{
	struct proc_time *pt = proc_time__new();
	struct seen s;

	(void)state;
	proc_time__track(pt, 7);
	/* The loop: half on a CPU, a third waiting for batches. */
	proc_time__add(pt, 7, 8, PS_CPU, 5 * S);
	proc_time__wait(pt, 7, 8, PS_INPUT, 1 * S, 4 * S, true);
	/* Eight idle pool threads in futex all window long. */
	for (uint32_t t = 20; t < 28; t++)
		proc_time__add(pt, 7, t, PS_LOCK, 10 * S);
	/* A logger, a little on a CPU. */
	proc_time__add(pt, 7, 30, PS_CPU, 1 * S);
	s = window(pt, 10 * S);
	assert_int_equal(s.n, 1);
	assert_int_equal(s.w[0].lead_tid, 8);
	assert_int_equal(s.w[0].verdict.verdict, V_CPU);
	assert_true(s.w[0].verdict.share[PS_CPU] > 0.49 && s.w[0].verdict.share[PS_CPU] < 0.51);
	assert_true(s.w[0].verdict.share[PS_INPUT] > 0.29 && s.w[0].verdict.share[PS_INPUT] < 0.31);
	assert_true(s.w[0].verdict.share[PS_LOCK] < 1e-9);
	/* The totals are every thread's. */
	assert_int_equal(s.w[0].total.ns[PS_LOCK], 80 * S);
	assert_int_equal(s.w[0].total.ns[PS_CPU], 6 * S);
	proc_time__free(pt);
}

static void test_wait_across_windows(void **state)
{
	struct proc_time *pt = proc_time__new();
	uint64_t t0 = 1000 * S, sum = 0;
	struct seen s;

	(void)state;
	proc_time__track(pt, 1);
	/* A collective that waits 25 s, seen under way at each window's
	 * end (10 s, 20 s), at a check in between (15 s), and at its end. */
	proc_time__wait(pt, 1, 2, PS_COMMUNICATION, t0, t0 + 10 * S, false);
	s = window(pt, 10 * S);
	assert_int_equal(s.w[0].verdict.verdict, V_COMMUNICATION);
	assert_int_equal(s.w[0].lead.ns[PS_COMMUNICATION], 10 * S);
	sum += s.w[0].total.ns[PS_COMMUNICATION];
	proc_time__wait(pt, 1, 2, PS_COMMUNICATION, t0, t0 + 15 * S, false);
	proc_time__wait(pt, 1, 2, PS_COMMUNICATION, t0, t0 + 20 * S, false);
	s = window(pt, 10 * S);
	assert_int_equal(s.w[0].lead.ns[PS_COMMUNICATION], 10 * S);
	sum += s.w[0].total.ns[PS_COMMUNICATION];
	/* Its end says the state it was first seen in. */
	proc_time__wait(pt, 1, 2, PS_GPU, t0, t0 + 25 * S, true);
	s = window(pt, 10 * S);
	assert_int_equal(s.w[0].total.ns[PS_COMMUNICATION], 5 * S);
	assert_int_equal(s.w[0].total.ns[PS_GPU], 0);
	sum += s.w[0].total.ns[PS_COMMUNICATION];
	assert_int_equal(sum, 25 * S);
	/* Ended: seen again, it is a new wait. */
	proc_time__wait(pt, 1, 2, PS_GPU, t0 + 30 * S, t0 + 31 * S, true);
	s = window(pt, 10 * S);
	assert_int_equal(s.w[0].total.ns[PS_GPU], 1 * S);
	assert_int_equal(s.w[0].total.ns[PS_COMMUNICATION], 0);
	proc_time__free(pt);
}

static void test_lost_ends(void **state)
{
	struct proc_time *pt = proc_time__new();
	struct proc_time_stats st;

	(void)state;
	proc_time__track(pt, 1);
	proc_time__track(pt, 3);
	proc_time__wait(pt, 1, 2, PS_GPU, 0, 1 * S, false);
	proc_time__wait(pt, 3, 4, PS_INPUT, 0, 1 * S, false);
	proc_time__stats(pt, &st);
	assert_int_equal(st.waits, 2);
	assert_int_equal(st.processes, 2);
	/* Exited: its wait goes with it. */
	proc_time__forget(pt, 3);
	proc_time__stats(pt, &st);
	assert_int_equal(st.waits, 1);
	/* Not seen again: forgotten after two windows. */
	window(pt, S);
	window(pt, S);
	proc_time__stats(pt, &st);
	assert_int_equal(st.waits, 1);
	window(pt, S);
	proc_time__stats(pt, &st);
	assert_int_equal(st.waits, 0);
	assert_int_equal(st.threads, 0);
	proc_time__free(pt);
}

static void test_thread_bound(void **state)
{
	struct proc_time *pt = proc_time__new();
	struct proc_time_stats st;

	(void)state;
	proc_time__track(pt, 1);
	for (uint32_t t = 0; t < PROC_TIME_MAX_THREADS + 10; t++)
		proc_time__add(pt, 1, t + 1, PS_CPU, MS);
	proc_time__stats(pt, &st);
	assert_int_equal(st.threads, PROC_TIME_MAX_THREADS);
	assert_int_equal(st.thread_drops, 10);
	window(pt, S);
	proc_time__stats(pt, &st);
	assert_int_equal(st.threads, 0);
	proc_time__free(pt);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_only_followed),	    cmocka_unit_test(test_leading_thread),
		cmocka_unit_test(test_wait_across_windows), cmocka_unit_test(test_lost_ends),
		cmocka_unit_test(test_thread_bound),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
