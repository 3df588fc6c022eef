/* test_gpu_late.c: GPU events whose stacks are finished in userspace, and
 * the events of their process held back behind them (src/probe/gpu_late.c),
 * with the real unwind tables in the real BPF maps (the CPU sampler's,
 * loaded without sampling): a launch whose stack's end is this very
 * thread's, made as the BPF side makes one, waits until the tables of this
 * program and its libc are built, then comes out walked to _start; the
 * events of its process after it -- a kernel name whose buffer is reused
 * at once, a free -- come out after it, in order, with what they carried,
 * while another process's events come out at once; an end that is not one
 * is refused and its event still comes out, in its place; past the bound of
 * bytes everything is handed on at the next poll; with force, at once.
 * Needs root (skips without). */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "probe/cpu_sampler.h"
#include "probe/gpu_late.h"
#include "probe/gpu_probes.h"
#include "common/clock.h"
#include "common/log.h"
#include "symbolize/symbolize.h"
#include "unwind/unwinder.h"

#include "own_tables.h"

#define PAGE 4096
#define MAX_GOT 16
#define OTHER_PID 4000000 /* a pid no process has (over pid_max's 4 M cap) */

struct got {
	struct gpu_event ev[MAX_GOT];
	uint64_t ips[MAX_GOT][GPU_MAX_FRAMES];
	char name[MAX_GOT][64];
	int n;
};

/* Keeps what each event carried: it lives only until the call returns. */
static void on_event(void *ctx, const struct gpu_event *ev)
{
	struct got *g = ctx;

	assert_true(g->n < MAX_GOT);
	g->ev[g->n] = *ev;
	if (ev->nips > 0)
		memcpy(g->ips[g->n], ev->ips, (size_t)ev->nips * sizeof(uint64_t));
	g->ev[g->n].ips = g->ips[g->n];
	if (ev->type == GPU_EV_KERNEL_NAME && ev->kernel.name)
		snprintf(g->name[g->n], sizeof(g->name[0]), "%s", ev->kernel.name);
	g->n++;
}

static struct late_stack end;
static uint64_t leaf_ip;

/* The end of this thread's stack at the frame of capture's caller, as the
 * BPF side keeps it when the walk stops there: pc a return address into
 * it, sp and bp its registers after the return, the pages from sp's up. */
static __attribute__((noinline)) void capture(struct late_stack *l)
{
	uint64_t *fp = __builtin_frame_address(0);
	uint32_t kept = 0;

	memset(l, 0, sizeof(*l));
	l->pc = fp[1];
	l->sp = (uint64_t)(uintptr_t)(fp + 2);
	l->bp = fp[0];
	l->stack_base = l->sp & ~(uint64_t)(PAGE - 1);
	for (uint32_t i = 0; i < LATE_SPAN && kept < LATE_PAGES; i++)
		if (!read_own(&l->stack[kept * PAGE], l->stack_base + (uint64_t)i * PAGE, PAGE))
			l->page[kept++] = i;
	l->nstack = kept * PAGE;
	leaf_ip = (uint64_t)(uintptr_t)__builtin_return_address(0);
}

#define END_SIZE(l) (offsetof(struct late_stack, stack) + (l).nstack)

/* A launch of this process with the frame the BPF walk stopped at (its
 * first frame: the walk took none before it). */
static struct gpu_event launch(uint64_t ts)
{
	struct gpu_event ev = {.type = GPU_EV_LAUNCH,
			       .api = GPU_API_cudaLaunchKernel,
			       .api_name = "cudaLaunchKernel"};

	ev.pid = ev.tid = getpid();
	ev.ts_ns = ts;
	return ev;
}

/* Polls until n events are handed on (tables built) or 30 s pass. */
static void poll_for(struct gpu_late *gl, struct got *g, int n)
{
	uint64_t deadline = mono_ns() + 30ull * 1000000000;

	while (g->n < n && mono_ns() < deadline) {
		unwinder__poll(cpu_sampler__unwinder(cs));
		gpu_late__poll(gl, false, on_event, g);
		if (g->n < n)
			usleep(2000);
	}
}

static bool has_frame(const struct gpu_event *ev, const char *name)
{
	uint32_t image = symbolizer__image(sym, ev->pid, ev->ts_ns);

	for (int i = 0; i < ev->nips; i++) {
		struct sym_info si;
		char buf[256];

		symbolizer__resolve_image(sym, image, ev->ips[i] - (i ? 1 : 0), &si);
		if (!strcmp(sym_info__name(&si, buf, sizeof(buf)), name))
			return true;
	}
	return false;
}

static __attribute__((noinline)) void add_launch(struct gpu_late *gl, uint64_t ts)
{
	struct gpu_event ev = launch(ts);
	uint64_t first;

	capture(&end);
	first = leaf_ip;
	ev.ips = &first;
	ev.nips = 1;
	assert_int_equal(gpu_late__add(gl, &ev, &end, END_SIZE(end)), 0);
}

/* Runs first: the tables of this program are not built yet. */
static void test_in_order(void **state)
{
	struct gpu_late *gl;
	struct gpu_late_stats st;
	struct got *g = calloc(1, sizeof(*g));
	char name[64] = "gemm_kernel";
	struct gpu_event kn = {.type = GPU_EV_KERNEL_NAME,
			       .api = GPU_API_cuLibraryGetKernel,
			       .api_name = "cuLibraryGetKernel"};
	struct gpu_event fr = {
		.type = GPU_EV_FREE, .api = GPU_API_cudaFree, .api_name = "cudaFree"};
	struct gpu_event other = {.type = GPU_EV_ALLOC,
				  .api = GPU_API_cudaMalloc,
				  .api_name = "cudaMalloc",
				  .pid = OTHER_PID,
				  .ts_ns = 5};

	if (!cs)
		skip();
	gl = gpu_late__new(cpu_sampler__unwinder(cs), sym, NULL);
	assert_false(gpu_late__waiting(gl, getpid()));
	add_launch(gl, 1);
	assert_true(gpu_late__waiting(gl, getpid()));
	kn.pid = kn.tid = fr.pid = fr.tid = getpid();
	kn.ts_ns = 2;
	kn.kernel.name = name;
	assert_int_equal(gpu_late__add(gl, &kn, NULL, 0), 0);
	strcpy(name, "overwritten");
	fr.ts_ns = 3;
	fr.mem.addr = 0x7000;
	assert_int_equal(gpu_late__add(gl, &fr, NULL, 0), 0);
	/* Another process's event is not held (the caller hands it on
	 * itself when its process waits for nothing). */
	assert_false(gpu_late__waiting(gl, OTHER_PID));
	on_event(g, &other);

	/* The table of this program is not built yet: nothing of its own. */
	assert_int_equal(gpu_late__poll(gl, false, on_event, g), 0);
	assert_int_equal(g->n, 1);
	gpu_late__stats(gl, &st);
	assert_int_equal(st.waiting, 3);
	assert_true(st.waiting_bytes > 0);

	poll_for(gl, g, 4);
	assert_int_equal(g->n, 4);
	assert_int_equal(g->ev[1].type, GPU_EV_LAUNCH);
	assert_int_equal(g->ev[1].ts_ns, 1);
	assert_int_equal(g->ev[2].type, GPU_EV_KERNEL_NAME);
	assert_string_equal(g->name[2], "gemm_kernel");
	assert_int_equal(g->ev[3].type, GPU_EV_FREE);
	assert_int_equal(g->ev[3].mem.addr, 0x7000);
	/* The launch's stack: its first frame, then the rest walked here,
	 * from the test to the program's entry. */
	assert_true(g->ev[1].nips > 4);
	assert_int_equal(g->ips[1][0], leaf_ip);
	assert_true(has_frame(&g->ev[1], "add_launch"));
	assert_true(has_frame(&g->ev[1], "test_in_order"));
	assert_true(has_frame(&g->ev[1], "main"));
	assert_true(has_frame(&g->ev[1], "_start"));
	assert_false(gpu_late__waiting(gl, getpid()));
	gpu_late__stats(gl, &st);
	assert_int_equal(st.late, 1);
	assert_int_equal(st.held_back, 2);
	assert_int_equal(st.waiting, 0);
	assert_int_equal(st.waiting_bytes, 0);
	assert_true(st.peak_bytes > 0);
	gpu_late__free(gl);
	free(g);
}

/* An end that is not one is refused; its event keeps its place. */
static void test_malformed(void **state)
{
	struct gpu_late *gl;
	struct gpu_late_stats st;
	struct got *g = calloc(1, sizeof(*g));
	struct gpu_event ev = launch(10);
	uint64_t ip = 0x1234;

	if (!cs)
		skip();
	gl = gpu_late__new(cpu_sampler__unwinder(cs), sym, NULL);
	log_set_level(LOG_ERROR);
	add_launch(gl, 9);
	ev.ips = &ip;
	ev.nips = 1;
	capture(&end);
	end.nstack = 100; /* not whole pages */
	assert_int_equal(gpu_late__add(gl, &ev, &end, END_SIZE(end)), -EINVAL);
	assert_int_equal(gpu_late__add(gl, &ev, &end, 3), -EINVAL);
	log_set_level(LOG_WARN);
	poll_for(gl, g, 3);
	assert_int_equal(g->n, 3);
	assert_int_equal(g->ev[0].ts_ns, 9);
	assert_int_equal(g->ev[1].ts_ns, 10);
	assert_int_equal(g->ev[1].nips, 1);
	assert_int_equal(g->ips[1][0], 0x1234);
	gpu_late__stats(gl, &st);
	assert_int_equal(st.malformed, 2);
	assert_int_equal(st.late, 1);
	gpu_late__free(gl);
	free(g);
}

/* Past the bound of bytes waiting, everything goes at the next poll; with
 * force, at once. The ones walked early are counted. */
static void test_bounds(void **state)
{
	struct gpu_late_opts o = {.max_bytes = 1};
	struct gpu_late *gl;
	struct gpu_late_stats st;
	struct got *g = calloc(1, sizeof(*g));

	if (!cs)
		skip();
	gl = gpu_late__new(cpu_sampler__unwinder(cs), sym, &o);
	add_launch(gl, 20);
	assert_int_equal(gpu_late__poll(gl, false, on_event, g), 1);
	gpu_late__stats(gl, &st);
	assert_int_equal(st.crowded_out, 1);
	assert_int_equal(st.waiting, 0);
	gpu_late__free(gl);

	gl = gpu_late__new(cpu_sampler__unwinder(cs), sym, NULL);
	add_launch(gl, 21);
	add_launch(gl, 22);
	assert_int_equal(gpu_late__poll(gl, true, on_event, g), 2);
	assert_int_equal(g->n, 3);
	assert_int_equal(g->ev[1].ts_ns, 21);
	assert_int_equal(g->ev[2].ts_ns, 22);
	gpu_late__stats(gl, &st);
	assert_int_equal(st.waiting, 0);
	assert_int_equal(st.waiting_bytes, 0);
	gpu_late__free(gl);
	free(g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_in_order),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_bounds),
	};

	if (geteuid() != 0) {
		printf("SKIP: test_gpu_late needs root to load the BPF maps\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, setup, teardown);
}
