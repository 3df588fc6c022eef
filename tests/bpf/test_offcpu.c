/* test_offcpu.c: the off-CPU profiler (bpf/offcpu.bpf.h through
 * src/probe/cpu_sampler.c) in the real kernel, with both ways of taking the
 * user stack -- the task work (Linux 6.18 on) and sys_exit (before). A
 * thread of this process blocks for known times: each wait of at least the
 * minimum is one record with its time, its system call and both stacks, a
 * shorter one is only counted; threads that are preempted, never blocked,
 * have no wait; the rate bound drops what is over it and counts it, with its
 * time; a system call stopped by SIGSTOP is one wait of two blocks, walked
 * whole. Needs root (skips without). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "probe/cpu_sampler.h"
#include "probe/pid_filter.h"
#include "common/clock.h"
#include "common/log.h"

#define MAX_WAITS 4096

struct wait_rec {
	uint32_t pid, tid, nblocks;
	bool leaf_only;
	int32_t syscall, nkern, nuser;
	uint64_t blocked_ns, off_ts_ns;
};

struct waits {
	struct wait_rec w[MAX_WAITS];
	size_t n;
};

static void on_wait(void *ctx, const struct offcpu_wait *w)
{
	struct waits *ws = ctx;
	const struct stack *st = w->stack;
	int32_t nkern = 0, nuser = 0;

	if (ws->n == MAX_WAITS)
		return;
	for (uint32_t i = 0; i < st->nframes; i++)
		if (st->frames[i].kind == FRAME_KERNEL)
			nkern++;
		else if (st->frames[i].kind != FRAME_MARKER)
			nuser++;
	ws->w[ws->n++] = (struct wait_rec){
		.pid = st->pid,
		.tid = st->tid,
		.leaf_only = w->leaf_only,
		.nblocks = w->nblocks,
		.syscall = w->syscall,
		.nkern = nkern,
		.nuser = nuser,
		.blocked_ns = w->blocked_ns,
		.off_ts_ns = w->off_ts_ns,
	};
}

static bool sys_exit_path; /* the group's setting: which way to take user stacks */

/* The unwind tables of this program and of the libc it maps, built before
 * the waits (as `sonde record` does for its command): their first stacks
 * are whole. */
static void preload_tables(struct cpu_sampler *cs)
{
	char line[4096], path[4096];
	FILE *f = fopen("/proc/self/maps", "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%*s %*s %*s %*s %*s %4095s", path) == 1 && path[0] == '/' &&
		    (strstr(path, "/libc.so") || strstr(path, "test_offcpu")))
			cpu_sampler__preload(cs, path);
	fclose(f);
}

/* A sampler of off-CPU waits only, filtered to pid. */
static struct cpu_sampler *open_offcpu(struct waits *ws, uint32_t pid, uint32_t rate)
{
	static struct pid_filter *pf;
	struct cpu_sampler_opts o = {
		.freq = 0,
		.kernel_stacks = true,
		.user_stacks = true,
		.offcpu_fn = on_wait,
		.offcpu_ctx = ws,
		.offcpu_rate = rate,
		.offcpu_sys_exit = sys_exit_path,
	};
	struct cpu_sampler_stats st;
	struct cpu_sampler *cs;

	/* A filter of its own each time (the last one freed). */
	pid_filter__free(pf);
	pf = pid_filter__new();
	assert_non_null(pf);
	o.pid_filter = pf;
	cs = cpu_sampler__open(&o, NULL, NULL);
	assert_non_null(cs);
	assert_int_equal(pid_filter__add(pf, pid), 0);
	cpu_sampler__stats(cs, &st);
	assert_int_equal(st.offcpu_min_ns, OFFCPU_MIN_NS_DEFAULT);
	if (!sys_exit_path && !st.offcpu_task_work) {
		printf("SKIP: this kernel has no BPF task works (Linux 6.18): the sys_exit "
		       "group tests the way it uses\n");
		cpu_sampler__free(cs);
		skip();
	}
	assert_int_equal(st.offcpu_task_work, !sys_exit_path);
	preload_tables(cs);
	return cs;
}

static void sleep_ns(uint64_t ns)
{
	struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};

	while (nanosleep(&ts, &ts))
		;
}

/* ---- waits and short blocks ---- */

struct sleeper {
	pid_t tid;
	int longs, shorts;
	uint64_t long_ns, short_ns;
};

/* The long waits in poll(), the short ones in nanosleep(): told apart by
 * their system call whatever the machine's load adds to them. */
static void *sleeper_main(void *arg)
{
	struct sleeper *s = arg;

	s->tid = (pid_t)syscall(SYS_gettid);
	for (int i = 0; i < s->longs; i++)
		poll(NULL, 0, (int)(s->long_ns / 1000000));
	for (int i = 0; i < s->shorts; i++)
		sleep_ns(s->short_ns);
	return NULL;
}

static void run_sleeper(struct sleeper *s)
{
	pthread_t t;

	assert_int_equal(pthread_create(&t, NULL, sleeper_main, s), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
}

static void test_waits_and_short_blocks(void **state)
{
	struct waits *ws = calloc(1, sizeof(*ws));
	struct cpu_sampler *cs = open_offcpu(ws, (uint32_t)getpid(), 0);
	struct sleeper s = {.longs = 20, .long_ns = 20000000, .shorts = 200, .short_ns = 100000};
	struct cpu_sampler_stats st;
	int longs = 0, others = 0;

	run_sleeper(&s);
	assert_true(cpu_sampler__poll(cs) >= 0);
	cpu_sampler__stats(cs, &st);
	for (size_t i = 0; i < ws->n; i++) {
		const struct wait_rec *w = &ws->w[i];

		if (w->tid != (uint32_t)s.tid)
			continue;
		/* A 0.1 ms sleep may be off the CPU for more than the
		 * minimum on a busy machine: the wait for a CPU is in it. */
		if (w->syscall == SYS_clock_nanosleep) {
			others++;
			continue;
		}
		longs++;
		/* The timeout runs from the call, the wait from a little
		 * later. */
		if (w->blocked_ns < s.long_ns * 9 / 10 || w->blocked_ns > 500000000)
			fail_msg("a wait of %.3f ms, not about 20", w->blocked_ns / 1e6);
		assert_int_equal(w->pid, getpid());
		assert_int_equal(w->syscall, SYS_poll);
		assert_int_equal(w->nblocks, 1);
		assert_true(w->nkern > 0);
		assert_true(w->nuser >= 2); /* poll, sleeper_main... */
		assert_false(w->leaf_only);
	}
	/* All of them, but on a busy machine maybe one or two: a thread
	 * preempted as it set out to sleep is runnable, not blocked, and if
	 * its timeout passes before it runs again it never blocks. */
	if (longs > s.longs || longs < s.longs - 2)
		fail_msg("%d waits in poll(), not %d", longs, s.longs);
	/* Most of the short sleeps are only counted, with their time. */
	if (others > s.shorts / 4 ||
	    st.counts[CPU_CNT_OFFCPU_SHORT] < (uint64_t)(s.shorts - others) * 9 / 10 ||
	    st.counts[CPU_CNT_OFFCPU_SHORT_NS] <
		    (uint64_t)(s.shorts - others) * 9 / 10 * s.short_ns)
		fail_msg("%d of %d short sleeps recorded, %llu blocks under the minimum (%.3f ms)",
			 others, s.shorts, (unsigned long long)st.counts[CPU_CNT_OFFCPU_SHORT],
			 st.counts[CPU_CNT_OFFCPU_SHORT_NS] / 1e6);
	assert_true(st.counts[CPU_CNT_OFFCPU_BLOCKS] >=
		    st.counts[CPU_CNT_OFFCPU_SHORT] + longs + others);
	/* Every wait handed over was received -- but one of this thread's
	 * may have come after the drain. */
	assert_int_equal(st.offcpu_received, ws->n);
	assert_true(st.counts[CPU_CNT_OFFCPU_WAITS] >= ws->n &&
		    st.counts[CPU_CNT_OFFCPU_WAITS] <= ws->n + 2);
	assert_int_equal(st.drops[CPU_DROP_OFFCPU_RATE] + st.drops[CPU_DROP_OFFCPU_RINGBUF] +
				 st.drops[CPU_DROP_OFFCPU_STORAGE],
			 0);
	cpu_sampler__free(cs);
	free(ws);
}

/* ---- preemption is not a wait ---- */

static volatile int spin_stop;

static void *spinner_main(void *arg)
{
	__atomic_store_n((pid_t *)arg, (pid_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
	while (!spin_stop)
		;
	return NULL;
}

static void test_preempted_is_not_off_cpu(void **state)
{
	struct waits *ws = calloc(1, sizeof(*ws));
	struct cpu_sampler *cs = open_offcpu(ws, (uint32_t)getpid(), 0);
	pid_t tids[2] = {0, 0};
	uint64_t t0, t1;
	pthread_attr_t attr;
	cpu_set_t one;
	pthread_t t[2];

	/* Started on CPU 0: moving there would be a wait of its own. */
	CPU_ZERO(&one);
	CPU_SET(0, &one);
	pthread_attr_init(&attr);
	pthread_attr_setaffinity_np(&attr, sizeof(one), &one);
	spin_stop = 0;
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], &attr, spinner_main, &tids[i]), 0);
	pthread_attr_destroy(&attr);
	while (!__atomic_load_n(&tids[0], __ATOMIC_ACQUIRE) ||
	       !__atomic_load_n(&tids[1], __ATOMIC_ACQUIRE))
		sleep_ns(1000000);
	/* Two threads on one CPU: each waits for it while the other runs,
	 * for a time slice (milliseconds) at a time, preempted. Their start
	 * and their exit may wait (for the memory map's lock): only the
	 * waits that began while they spun are wrong. */
	t0 = mono_ns();
	sleep_ns(400000000);
	t1 = mono_ns();
	spin_stop = 1;
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	assert_true(cpu_sampler__poll(cs) >= 0);
	for (size_t i = 0; i < ws->n; i++)
		if ((ws->w[i].tid == (uint32_t)tids[0] || ws->w[i].tid == (uint32_t)tids[1]) &&
		    ws->w[i].off_ts_ns >= t0 && ws->w[i].off_ts_ns < t1)
			fail_msg("a preempted thread has a wait of %.3f ms (system call %d)",
				 ws->w[i].blocked_ns / 1e6, ws->w[i].syscall);
	cpu_sampler__free(cs);
	free(ws);
}

/* ---- the rate bound ---- */

static void test_rate_bound(void **state)
{
	struct waits *ws = calloc(1, sizeof(*ws));
	/* 10 a second for the machine: a CPU's burst, then almost nothing. */
	struct cpu_sampler *cs = open_offcpu(ws, (uint32_t)getpid(), 10);
	struct sleeper s = {.longs = 300, .long_ns = 2000000};
	struct cpu_sampler_stats st;
	uint64_t kept_ns = 0, t0 = mono_ns(), secs;
	uint64_t lost;
	int mine = 0;

	run_sleeper(&s);
	secs = (mono_ns() - t0) / 1000000000 + 1;
	assert_true(cpu_sampler__poll(cs) >= 0);
	cpu_sampler__stats(cs, &st);
	for (size_t i = 0; i < ws->n; i++)
		if (ws->w[i].tid == (uint32_t)s.tid) {
			mine++;
			kept_ns += ws->w[i].blocked_ns;
		}
	lost = st.drops[CPU_DROP_OFFCPU_RATE] + st.drops[CPU_DROP_OFFCPU_STORAGE] +
	       st.drops[CPU_DROP_OFFCPU_RINGBUF];
	/* At most the CPUs' bursts and the rate over the run; the rest
	 * lost to the bound (the ring buffer has room for the bursts), and
	 * the time of each wait in what was kept or in what was lost. */
	if (mine > OFFCPU_BURST_DEFAULT * st.ncpus + 10 * (int)secs + 2 ||
	    st.drops[CPU_DROP_OFFCPU_RINGBUF] ||
	    st.drops[CPU_DROP_OFFCPU_RATE] < (uint64_t)(s.longs - mine) * 9 / 10 ||
	    lost + mine + 3 < (uint64_t)s.longs || lost + mine > (uint64_t)s.longs + 5 ||
	    kept_ns + st.counts[CPU_CNT_OFFCPU_DROPPED_NS] < (uint64_t)s.longs * s.long_ns * 9 / 10)
		fail_msg("of %d waits: %d kept (%.1f ms), lost %llu to the rate, %llu to the ring "
			 "buffer, %llu for want of room (%.1f ms)",
			 s.longs, mine, kept_ns / 1e6,
			 (unsigned long long)st.drops[CPU_DROP_OFFCPU_RATE],
			 (unsigned long long)st.drops[CPU_DROP_OFFCPU_RINGBUF],
			 (unsigned long long)st.drops[CPU_DROP_OFFCPU_STORAGE],
			 st.counts[CPU_CNT_OFFCPU_DROPPED_NS] / 1e6);
	cpu_sampler__free(cs);
	free(ws);
}

/* ---- a stop in a system call ---- */

/* A child stopped (SIGSTOP) in a 300 ms nanosleep, then continued: its
 * waits -- the sleep until the stop, the stop, the restarted sleep -- add
 * up to the 300 ms and more, each with its whole user stack and the system
 * call it is in (clock_nanosleep, or restart_syscall once restarted). */
static void test_stopped_in_syscall(void **state)
{
	struct waits *ws = calloc(1, sizeof(*ws));
	struct cpu_sampler *cs;
	int go[2], status, n = 0;
	uint64_t sum = 0;
	pid_t pid;
	char c;

	assert_int_equal(pipe(go), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (read(go[0], &c, 1) != 1)
			_exit(1);
		sleep_ns(300000000);
		_exit(0);
	}
	cs = open_offcpu(ws, (uint32_t)pid, 0);
	assert_int_equal(write(go[1], "g", 1), 1);
	sleep_ns(60000000);
	kill(pid, SIGSTOP);
	sleep_ns(100000000);
	kill(pid, SIGCONT);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(cpu_sampler__poll(cs) >= 0);
	for (size_t i = 0; i < ws->n; i++) {
		const struct wait_rec *w = &ws->w[i];

		if (w->pid != (uint32_t)pid)
			continue;
		n++;
		sum += w->blocked_ns;
		if (w->syscall != SYS_clock_nanosleep && w->syscall != SYS_restart_syscall)
			fail_msg("a wait of the stopped child in system call %d", w->syscall);
		assert_false(w->leaf_only);
		assert_true(w->nuser >= 3);
	}
	/* Task work: three waits (it runs as the signal is taken, before the
	 * stop); sys_exit: two, the stop and the restarted sleep are one (no
	 * return between them) -- or fewer of the child's waits where the
	 * signal finds it runnable on a busy machine. The sleep ends when it
	 * would have without the stop: the waits add up to about its 300 ms. */
	if (n < 1 || n > (sys_exit_path ? 2 : 3) || sum < 250000000 || sum > 450000000)
		fail_msg("the stopped child has %d waits of %.3f ms in all, not %d of about 300", n,
			 sum / 1e6, sys_exit_path ? 2 : 3);
	close(go[0]);
	close(go[1]);
	cpu_sampler__free(cs);
	free(ws);
}

static int use_task_work(void **state)
{
	sys_exit_path = false;
	return 0;
}

static int use_sys_exit(void **state)
{
	sys_exit_path = true;
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_waits_and_short_blocks),
		cmocka_unit_test(test_preempted_is_not_off_cpu),
		cmocka_unit_test(test_rate_bound),
		cmocka_unit_test(test_stopped_in_syscall),
	};
	int failed;

	if (geteuid() != 0) {
		printf("SKIP: the off-CPU profiler needs root (BPF)\n");
		return 77;
	}
	log_init();
	failed = cmocka_run_group_tests_name("task work", tests, use_task_work, NULL);
	failed += cmocka_run_group_tests_name("sys_exit", tests, use_sys_exit, NULL);
	return failed ? 1 : 0;
}
