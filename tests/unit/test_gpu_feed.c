/* test_gpu_feed.c: the GPU feed (src/agent/gpu_feed.c) on decoded calls
 * built here -- what the probes hand it -- for a made-up process whose
 * image the symbolizer was told about as the kernel's records would: the
 * live metrics (launches, device memory, waits, copies, collectives) count
 * only calls that succeeded and forget a process that exited; the
 * gpu_launch profile tops the launching stack with the kernel's name (the
 * driver's name, the host stub's symbol, "[CUDA graph]"); the gpu_wait
 * profile weighs the waiting stack by nanoseconds; the process is named,
 * and a stack by its process, thread and service. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdint.h>

#include "agent/gpu_feed.h"
#include "probe/gpu_probes.h"
#include "common/xalloc.h"
#include "metrics/gpu_metrics.h"

#include <jansson.h>
#include "profile/profile.h"
#include "symbolize/symbolize.h"
#include "fixture_child.h"

#define PID 0x7fff0200u
#define BASE 0x555500000000ull

struct world {
	struct symbolizer *sym;
	struct gpu_metrics *m;
	struct gpu_feed *f;
	uint64_t alpha, beta, main_;
	uint64_t ips[3];
};

static int setup(void **state)
{
	struct world *w = xcalloc(1, sizeof(*w));
	struct sym_mmap mm = {.pid = PID, .ts_ns = 11, .start = BASE, .len = 0x4000};
	struct gpu_feed_opts fo = {.profiles = true};

	find_fixtures();
	mm.path = fixture("pie");
	w->sym = symbolizer__new();
	symbolizer__set_debug_dir(w->sym, NULL);
	symbolizer__exec(w->sym, PID, 10, "trainer");
	symbolizer__mmap(w->sym, &mm);
	w->alpha = nm_value(fixture("pie"), false, "fix_alpha");
	w->beta = nm_value(fixture("pie"), false, "fix_beta");
	w->main_ = nm_value(fixture("pie"), false, "main");
	w->ips[0] = BASE + w->alpha + 2;
	w->ips[1] = BASE + w->beta + 9;
	w->ips[2] = BASE + w->main_ + 9;
	w->m = gpu_metrics__new(NULL);
	fo.metrics = w->m;
	fo.sym = w->sym;
	w->f = gpu_feed__new(&fo);
	*state = w;
	return 0;
}

static int teardown(void **state)
{
	struct world *w = *state;

	gpu_feed__free(w->f);
	gpu_metrics__free(w->m);
	symbolizer__free(w->sym);
	free(w);
	return 0;
}

static void feed(struct world *w, struct gpu_event ev)
{
	ev.pid = PID;
	ev.tid = PID;
	ev.ts_ns = ev.ts_ns ? ev.ts_ns : 1000;
	if (!ev.api_name)
		ev.api_name = "cudaLaunchKernel";
	if (ev.type == GPU_EV_LAUNCH || ev.type == GPU_EV_SYNC_END) {
		ev.ips = w->ips;
		ev.nips = 3;
	}
	gpu_feed__event(w->f, &ev);
}

/* The value of a series in the metrics' text, -1 when absent. */
static double metric(struct world *w, const char *series)
{
	char *text = gpu_metrics__prometheus(w->m, NULL), *at;
	double v = -1;

	assert_non_null(text);
	at = strstr(text, series);
	if (at && (at == text || at[-1] == '\n') && at[strlen(series)] == ' ')
		v = strtod(at + strlen(series) + 1, NULL);
	free(text);
	return v;
}

static char *folded(const struct profile *p)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_int_equal(profile__write(p, PROF_FMT_FOLDED, f), 0);
	fclose(f);
	return buf;
}

static void test_launches(void **state)
{
	struct world *w = *state;
	struct profile *launch = profile__new("gpu_launch", "launches", 1);
	struct gpu_feed_stats st;
	char series[128], *text;

	for (int i = 0; i < 3; i++)
		feed(w, (struct gpu_event){.type = GPU_EV_LAUNCH, .launch.name = "gemm_kernel"});
	/* A failed launch launched nothing. */
	feed(w, (struct gpu_event){.type = GPU_EV_LAUNCH, .ret = 1, .launch.name = "gemm_kernel"});
	/* Named from its host stub's symbol. */
	feed(w, (struct gpu_event){.type = GPU_EV_LAUNCH, .launch.stub = BASE + w->alpha});
	feed(w, (struct gpu_event){.type = GPU_EV_LAUNCH, .launch.graph = true});
	snprintf(series, sizeof(series), "sonde_cuda_launches_total{pid=\"%u\"}", PID);
	assert_true(metric(w, series) == 5);
	gpu_feed__stats(w->f, &st);
	assert_int_equal(st.launches, 5);
	assert_string_equal(gpu_feed__comm(w->f, PID), "trainer");
	assert_int_equal(gpu_feed__profiles(w->f, launch, NULL), 0);
	text = folded(launch);
	assert_non_null(strstr(text, "trainer;main;fix_beta;fix_alpha;gemm_kernel 3\n"));
	assert_non_null(strstr(text, "trainer;main;fix_beta;fix_alpha;fix_alpha 1\n"));
	assert_non_null(strstr(text, "trainer;main;fix_beta;fix_alpha;[CUDA graph] 1\n"));
	free(text);
	profile__free(launch);
}

/* A graph launch is named by the kernels launched into the stream while it
 * was captured -- through the capture's end (stream -> graph) and the
 * instantiation (graph -> executable graph) -- most launched first; a graph
 * whose capture was not seen is "[CUDA graph]"; a failed capture call
 * changes nothing. */
static void test_graph_names(void **state)
{
	struct world *w = *state;
	struct profile *launch = profile__new("gpu_launch", "launches", 1);
	const uint64_t stream = 0x5000, graph = 0x6000, exec = 0x7000;
	char *text;

	feed(w, (struct gpu_event){.type = GPU_EV_GRAPH,
				   .graph = {.op = GPU_GRAPH_CAPTURE_BEGIN, .stream = stream}});
	feed(w, (struct gpu_event){.type = GPU_EV_LAUNCH,
				   .launch = {.name = "relu", .stream = stream}});
	for (int i = 0; i < 2; i++)
		feed(w, (struct gpu_event){.type = GPU_EV_LAUNCH,
					   .launch = {.name = "gemm_kernel", .stream = stream}});
	/* On another stream: not in the graph. */
	feed(w,
	     (struct gpu_event){.type = GPU_EV_LAUNCH, .launch = {.name = "copy", .stream = 0x1}});
	feed(w, (struct gpu_event){
			.type = GPU_EV_GRAPH,
			.graph = {.op = GPU_GRAPH_CAPTURE_END, .stream = stream, .graph = graph}});
	feed(w, (struct gpu_event){
			.type = GPU_EV_GRAPH,
			.ret = 1,
			.graph = {.op = GPU_GRAPH_INSTANTIATE, .graph = graph, .exec = 0x7777}});
	feed(w, (struct gpu_event){
			.type = GPU_EV_GRAPH,
			.graph = {.op = GPU_GRAPH_INSTANTIATE, .graph = graph, .exec = exec}});
	for (int i = 0; i < 4; i++)
		feed(w, (struct gpu_event){.type = GPU_EV_LAUNCH,
					   .launch = {.graph = true, .func = exec, .stream = 0x1}});
	feed(w,
	     (struct gpu_event){.type = GPU_EV_LAUNCH, .launch = {.graph = true, .func = 0x7777}});
	assert_int_equal(gpu_feed__profiles(w->f, launch, NULL), 0);
	text = folded(launch);
	assert_non_null(strstr(
		text, "trainer;main;fix_beta;fix_alpha;[CUDA graph: gemm_kernel ×2, relu] 4\n"));
	assert_non_null(strstr(text, "trainer;main;fix_beta;fix_alpha;[CUDA graph] 1\n"));
	/* The captured launches themselves are launches too. */
	assert_non_null(strstr(text, "trainer;main;fix_beta;fix_alpha;gemm_kernel 2\n"));
	free(text);
	profile__free(launch);
}

/* A graph built node by node is named by the kernels of its nodes -- by
 * name, host stub or the kernels table, as launches are -- the most first,
 * then by name; nodes added after instantiation are not in that
 * executable graph; a failed add adds nothing; nodes added to a captured
 * graph join its captured kernels. */
static void test_graph_built(void **state)
{
	struct world *w = *state;
	struct profile *launch = profile__new("gpu_launch", "launches", 1);
	const uint64_t graph = 0x6100, exec = 0x7100, exec2 = 0x7200;
	char *text, want[256];

	feed(w, (struct gpu_event){
			.type = GPU_EV_GRAPH,
			.graph = {.op = GPU_GRAPH_ADD_KERNEL, .graph = graph, .name = "softmax"}});
	for (int i = 0; i < 2; i++)
		feed(w, (struct gpu_event){.type = GPU_EV_GRAPH,
					   .graph = {.op = GPU_GRAPH_ADD_KERNEL,
						     .graph = graph,
						     .name = "zeta"}});
	/* Named from its host stub's symbol, as a runtime launch is. */
	feed(w, (struct gpu_event){.type = GPU_EV_GRAPH,
				   .graph = {.op = GPU_GRAPH_ADD_KERNEL,
					     .graph = graph,
					     .func = BASE + w->alpha,
					     .stub = BASE + w->alpha}});
	feed(w, (struct gpu_event){
			.type = GPU_EV_GRAPH,
			.ret = 1,
			.graph = {.op = GPU_GRAPH_ADD_KERNEL, .graph = graph, .name = "failed"}});
	feed(w, (struct gpu_event){
			.type = GPU_EV_GRAPH,
			.graph = {.op = GPU_GRAPH_INSTANTIATE, .graph = graph, .exec = exec}});
	feed(w, (struct gpu_event){
			.type = GPU_EV_GRAPH,
			.graph = {.op = GPU_GRAPH_ADD_KERNEL, .graph = graph, .name = "later"}});
	feed(w, (struct gpu_event){
			.type = GPU_EV_GRAPH,
			.graph = {.op = GPU_GRAPH_INSTANTIATE, .graph = graph, .exec = exec2}});
	for (int i = 0; i < 3; i++)
		feed(w, (struct gpu_event){.type = GPU_EV_LAUNCH,
					   .launch = {.graph = true, .func = exec}});
	feed(w,
	     (struct gpu_event){.type = GPU_EV_LAUNCH, .launch = {.graph = true, .func = exec2}});
	assert_int_equal(gpu_feed__profiles(w->f, launch, NULL), 0);
	text = folded(launch);
	assert_non_null(strstr(
		text,
		"trainer;main;fix_beta;fix_alpha;[CUDA graph: zeta ×2, fix_alpha, softmax] 3\n"));
	snprintf(want, sizeof(want),
		 "trainer;main;fix_beta;fix_alpha;[CUDA graph: zeta ×2, fix_alpha, later, "
		 "softmax] 1\n");
	assert_non_null(strstr(text, want));
	/* Adding a node is not a launch. */
	assert_null(strstr(text, ";softmax "));
	free(text);
	profile__free(launch);
}

/* A stream that joined a capture (it waited on an event recorded in it) adds
 * its launches to the capture's graph until the capture ends; a join to a
 * stream that captures nothing is none. */
static void test_graph_joined(void **state)
{
	struct world *w = *state;
	struct profile *launch = profile__new("gpu_launch", "launches", 1);
	const uint64_t origin = 0x5100, side = 0x5200, other = 0x5300, graph = 0x6200,
		       exec = 0x7300;
	char *text;

	feed(w, (struct gpu_event){.type = GPU_EV_GRAPH,
				   .graph = {.op = GPU_GRAPH_CAPTURE_BEGIN, .stream = origin}});
	feed(w, (struct gpu_event){.type = GPU_EV_LAUNCH,
				   .launch = {.name = "gemm_kernel", .stream = origin}});
	feed(w, (struct gpu_event){
			.type = GPU_EV_GRAPH,
			.graph = {.op = GPU_GRAPH_CAPTURE_JOIN, .stream = side, .origin = origin}});
	feed(w,
	     (struct gpu_event){
		     .type = GPU_EV_GRAPH,
		     .graph = {.op = GPU_GRAPH_CAPTURE_JOIN, .stream = other, .origin = 0x9999}});
	for (int i = 0; i < 2; i++)
		feed(w, (struct gpu_event){.type = GPU_EV_LAUNCH,
					   .launch = {.name = "allreduce_side", .stream = side}});
	feed(w, (struct gpu_event){.type = GPU_EV_LAUNCH,
				   .launch = {.name = "elsewhere", .stream = other}});
	feed(w, (struct gpu_event){
			.type = GPU_EV_GRAPH,
			.graph = {.op = GPU_GRAPH_CAPTURE_END, .stream = origin, .graph = graph}});
	/* After the capture the side stream is its own again. */
	feed(w, (struct gpu_event){.type = GPU_EV_LAUNCH,
				   .launch = {.name = "after", .stream = side}});
	feed(w, (struct gpu_event){
			.type = GPU_EV_GRAPH,
			.graph = {.op = GPU_GRAPH_INSTANTIATE, .graph = graph, .exec = exec}});
	feed(w, (struct gpu_event){.type = GPU_EV_LAUNCH, .launch = {.graph = true, .func = exec}});
	assert_int_equal(gpu_feed__profiles(w->f, launch, NULL), 0);
	text = folded(launch);
	assert_non_null(strstr(text, "trainer;main;fix_beta;fix_alpha;[CUDA graph: allreduce_side "
				     "×2, gemm_kernel] 1\n"));
	free(text);
	profile__free(launch);
}

static const char *svc_of(void *ctx, uint32_t pid, const char *comm, const char **labels)
{
	*labels = NULL;
	return pid == PID ? "jobs" : NULL;
}

/* A launch's stack is named by the process and the thread the probe read
 * (after an exec: the new name), and by the service the namer gives. */
static void test_launch_names(void **state)
{
	struct world *w = *state;
	struct gpu_feed_opts fo = {.profiles = true, .sym = w->sym, .service = svc_of};
	struct gpu_feed *f = gpu_feed__new(&fo);
	struct profile *launch = profile__new("gpu_launch", "launches", 1);
	struct gpu_event ev = {.type = GPU_EV_LAUNCH,
			       .pid = PID,
			       .tid = PID + 1,
			       .ts_ns = 1000,
			       .api_name = "cudaLaunchKernel",
			       .launch.name = "gemm_kernel",
			       .ips = w->ips,
			       .nips = 3};
	const struct prof_sample *ps;

	memcpy(ev.process, "python3", 8);
	memcpy(ev.thread, "pt_autograd_0", 14);
	fo.metrics = w->m;
	gpu_feed__free(f);
	f = gpu_feed__new(&fo);
	gpu_feed__event(f, &ev);
	gpu_feed__event(f, &ev);
	assert_string_equal(gpu_feed__comm(f, PID), "python3");
	/* The metrics know the name the probe read, not only what /proc says
	 * (the process may be gone before a snapshot reads it). */
	{
		json_t *snap = gpu_metrics__snapshot(w->m);
		char *text = json_dumps(snap, 0);

		assert_non_null(strstr(text, "\"process\": \"python3\""));
		free(text);
		json_decref(snap);
	}
	assert_int_equal(gpu_feed__profiles(f, launch, NULL), 0);
	assert_int_equal(launch->nsamples, 1);
	ps = &launch->samples[0];
	assert_int_equal(ps->count, 2);
	assert_int_equal(ps->tid, PID + 1);
	assert_string_equal(profile__str(launch, ps->comm), "python3");
	assert_string_equal(profile__str(launch, ps->thread), "pt_autograd_0");
	assert_string_equal(profile__str(launch, ps->service), "jobs");
	profile__free(launch);
	gpu_feed__free(f);
}

static void test_memory_and_waits(void **state)
{
	struct world *w = *state;
	struct profile *wait = profile__new("gpu_wait", "nanoseconds", 1);
	char series[128], *text;

	feed(w,
	     (struct gpu_event){.type = GPU_EV_ALLOC, .api_name = "cudaMalloc", .mem.size = 1000});
	feed(w,
	     (struct gpu_event){
		     .type = GPU_EV_ALLOC, .api_name = "cudaMalloc", .device = 1, .mem.size = 300});
	feed(w, (struct gpu_event){.type = GPU_EV_ALLOC,
				   .api_name = "cudaMalloc",
				   .ret = 2,
				   .mem.size = 5000}); /* failed: nothing held */
	feed(w, (struct gpu_event){.type = GPU_EV_FREE, .api_name = "cudaFree", .mem.size = 400});
	snprintf(series, sizeof(series), "zernel_gpu_memory_used_bytes{pid=\"%u\",gpu_id=\"0\"}",
		 PID);
	assert_true(metric(w, series) == 600);
	snprintf(series, sizeof(series), "zernel_gpu_memory_used_bytes{pid=\"%u\",gpu_id=\"1\"}",
		 PID);
	assert_true(metric(w, series) == 300);

	feed(w, (struct gpu_event){.type = GPU_EV_SYNC_END,
				   .api_name = "cudaStreamSynchronize",
				   .dur_ns = 1500});
	feed(w, (struct gpu_event){.type = GPU_EV_SYNC_END,
				   .api_name = "cudaStreamSynchronize",
				   .dur_ns = 500,
				   .ret = 1}); /* a failed wait still waited */
	assert_int_equal(gpu_feed__profiles(w->f, NULL, wait), 0);
	text = folded(wait);
	assert_string_equal(text, "trainer;main;fix_beta;fix_alpha;cudaStreamSynchronize 2000\n");
	free(text);

	/* The process exits: its memory goes with it (0 for the grace its
	 * series stay, then none). */
	feed(w, (struct gpu_event){.type = GPU_EV_PROCESS_EXIT, .api_name = "exit"});
	snprintf(series, sizeof(series), "zernel_gpu_memory_used_bytes{pid=\"%u\",gpu_id=\"0\"}",
		 PID);
	assert_true(metric(w, series) == 0);
	gpu_metrics__expire(w->m, 0);
	assert_true(metric(w, series) == -1);
	profile__free(wait);
}

static void test_copies_and_collectives(void **state)
{
	struct world *w = *state;
	char series[160];

	feed(w, (struct gpu_event){.type = GPU_EV_MEMCPY,
				   .api_name = "cudaMemcpy",
				   .copy = {.bytes = 4096, .kind = 1}});
	feed(w, (struct gpu_event){.type = GPU_EV_MEMCPY,
				   .api_name = "cudaMemcpy",
				   .ret = 1,
				   .copy = {.bytes = 1 << 20, .kind = 1}});
	snprintf(series, sizeof(series), "sonde_cuda_memcpy_bytes_total{pid=\"%u\",kind=\"h2d\"}",
		 PID);
	assert_true(metric(w, series) == 4096);
	feed(w, (struct gpu_event){.type = GPU_EV_NCCL_END,
				   .api_name = "ncclAllReduce",
				   .dur_ns = 2000000,
				   .nccl = {.coll = GPU_COLL_ALLREDUCE, .bytes = 1 << 20}});
	assert_true(metric(w, "sonde_nccl_calls_total{op=\"allreduce\"}") == 1);
	assert_true(metric(w, "sonde_nccl_bytes_total{op=\"allreduce\"}") == 1 << 20);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_launches, setup, teardown),
		cmocka_unit_test_setup_teardown(test_launch_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_graph_names, setup, teardown),
		cmocka_unit_test_setup_teardown(test_graph_built, setup, teardown),
		cmocka_unit_test_setup_teardown(test_graph_joined, setup, teardown),
		cmocka_unit_test_setup_teardown(test_memory_and_waits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_copies_and_collectives, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
