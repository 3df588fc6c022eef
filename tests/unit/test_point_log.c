/* test_point_log.c: unit tests of src/agent/point_log.c over a real
 * gpu_metrics fed event by event: each sample turns the live metrics into
 * points -- memory per process and device and device capacity as they are,
 * launches, time blocked in synchronizes (all APIs of a process summed), NCCL
 * calls and seconds per operation as their increase since the previous
 * sample, left out when 0, and the last window's share of each state of a
 * judged process as it is, left out below half a percent -- labelled with
 * the node, the pid and its comm, the device, the operation or the state,
 * and point_log__take hands them over once as the body of POST
 * /api/v1/ingest/points. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <jansson.h>

#include "agent/point_log.h"
#include "metrics/gpu_metrics.h"

#define GIB (1024ull * 1024 * 1024)
#define NO_POINT (-1.0)

static const char *comm_of(void *ctx, uint32_t pid)
{
	return pid == 100 ? "train" : pid == 200 ? "" : NULL;
}

static struct gpu_metrics *new_metrics(void)
{
	struct gpu_metrics_opts o = {.node = "testnode"};
	struct gpu_metrics *m = gpu_metrics__new(&o);

	assert_non_null(m);
	return m;
}

/* The body taken from pl, parsed; its "points" array checked for shape. */
static json_t *take(struct point_log *pl)
{
	size_t len = 0, i;
	char *text = point_log__take(pl, &len);
	json_t *body, *points, *p;

	assert_non_null(text);
	assert_int_equal(strlen(text), len);
	body = json_loads(text, 0, NULL);
	free(text);
	assert_non_null(body);
	points = json_object_get(body, "points");
	assert_true(json_is_array(points));
	json_array_foreach(points, i, p)
	{
		assert_true(json_is_string(json_object_get(p, "name")));
		assert_true(json_is_object(json_object_get(p, "labels")));
		assert_true(json_is_integer(json_object_get(p, "ts_ms")));
		assert_true(json_is_number(json_object_get(p, "value")));
	}
	return body;
}

static bool labels_are(const json_t *labels, const char *const *want)
{
	size_t n = 0;

	for (; want[0]; want += 2, n++) {
		const char *v = json_string_value(json_object_get(labels, want[0]));

		if (!v || strcmp(v, want[1]))
			return false;
	}
	return json_object_size(labels) == n;
}

/* The value of the one point name{labels exactly} in body, NO_POINT when
 * there is none; fails on two. */
static double point(const json_t *body, const char *name, ...)
{
	const char *want[16];
	const json_t *p;
	double v = NO_POINT;
	size_t i, n = 0;
	va_list ap;

	va_start(ap, name);
	while ((want[n] = va_arg(ap, const char *)) && n < 14)
		n++;
	va_end(ap);
	want[n] = NULL;
	json_array_foreach(json_object_get(body, "points"), i, p)
	{
		if (strcmp(json_string_value(json_object_get(p, "name")), name) ||
		    !labels_are(json_object_get(p, "labels"), want))
			continue;
		if (v != NO_POINT)
			fail_msg("two points %s", name);
		v = json_number_value(json_object_get(p, "value"));
	}
	return v;
}

static size_t count_named(const json_t *body, const char *name)
{
	const json_t *p;
	size_t i, n = 0;

	json_array_foreach(json_object_get(body, "points"), i, p)
	{
		if (!strcmp(json_string_value(json_object_get(p, "name")), name))
			n++;
	}
	return n;
}

static void assert_near(double got, double want)
{
	if (fabs(got - want) > 1e-9 * (fabs(want) + 1))
		fail_msg("got %.12g, want %.12g", got, want);
}

/* Two processes on two devices: 100 ("train") and 200 (no name). */
static void feed(struct gpu_metrics *m)
{
	gpu_metrics__device_capacity(m, 0, 80 * GIB, "nvml");
	gpu_metrics__alloc(m, 100, 0, 3 * GIB);
	gpu_metrics__alloc(m, 100, 1, 1 * GIB);
	gpu_metrics__release(m, 100, 0, 1 * GIB);
	gpu_metrics__alloc(m, 200, 1, 5 * GIB);
	for (int i = 0; i < 5; i++)
		gpu_metrics__launch(m, 100, 4000);
	gpu_metrics__wait(m, 100, "cudaStreamSynchronize", 250000000);
	gpu_metrics__wait(m, 100, "cudaDeviceSynchronize", 500000000);
	gpu_metrics__nccl(m, 100, NCCL_OP_ALLREDUCE, 1 << 20, 30000000);
	gpu_metrics__nccl(m, 100, NCCL_OP_ALLREDUCE, 1 << 20, 20000000);
	gpu_metrics__nccl(m, 100, NCCL_OP_BROADCAST, 1 << 10, 1000000);
}

static void test_first_sample(void **state)
{
	struct gpu_metrics *m = new_metrics();
	struct point_log *pl = point_log__new("node-1");
	size_t len = 0;
	json_t *body, *p;
	size_t i;

	assert_null(point_log__take(pl, &len));
	feed(m);
	point_log__sample(pl, m, 1700000000123, comm_of, NULL);
	body = take(pl);

	json_array_foreach(json_object_get(body, "points"), i, p)
	{
		assert_int_equal(json_integer_value(json_object_get(p, "ts_ms")), 1700000000123);
	}
	/* Gauges as they are. */
	assert_near(point(body, "gpu_memory_used_bytes", "node", "node-1", "pid", "100", "comm",
			  "train", "gpu_id", "0", NULL),
		    2.0 * GIB);
	assert_near(point(body, "gpu_memory_used_bytes", "node", "node-1", "pid", "100", "comm",
			  "train", "gpu_id", "1", NULL),
		    1.0 * GIB);
	/* A process without a name has no comm label. */
	assert_near(point(body, "gpu_memory_used_bytes", "node", "node-1", "pid", "200", "gpu_id",
			  "1", NULL),
		    5.0 * GIB);
	assert_int_equal(count_named(body, "gpu_memory_used_bytes"), 3);
	assert_near(point(body, "gpu_memory_capacity_bytes", "node", "node-1", "gpu_id", "0", NULL),
		    80.0 * GIB);
	assert_int_equal(count_named(body, "gpu_memory_capacity_bytes"), 1);

	/* Counters: all of them the first time (they start with the agent). */
	assert_near(
		point(body, "cuda_launches", "node", "node-1", "pid", "100", "comm", "train", NULL),
		5);
	/* Process 200 launched nothing: no point rather than a 0. */
	assert_int_equal(count_named(body, "cuda_launches"), 1);
	/* Both APIs' waits in one point. */
	assert_near(point(body, "cuda_sync_wait_seconds", "node", "node-1", "pid", "100", "comm",
			  "train", NULL),
		    0.75);
	assert_int_equal(count_named(body, "cuda_sync_wait_seconds"), 1);
	assert_near(point(body, "nccl_calls", "node", "node-1", "op", "allreduce", NULL), 2);
	assert_near(point(body, "nccl_calls", "node", "node-1", "op", "broadcast", NULL), 1);
	assert_int_equal(count_named(body, "nccl_calls"), 2);
	assert_near(point(body, "nccl_seconds", "node", "node-1", "op", "allreduce", NULL), 0.05);
	assert_near(point(body, "nccl_seconds", "node", "node-1", "op", "broadcast", NULL), 0.001);
	assert_int_equal(count_named(body, "nccl_seconds"), 2);
	assert_int_equal(json_array_size(json_object_get(body, "points")), 3 + 1 + 1 + 1 + 2 + 2);
	json_decref(body);

	/* Taken once. */
	assert_null(point_log__take(pl, &len));
	point_log__free(pl);
	point_log__free(NULL);
	gpu_metrics__free(m);
}

/* Counters are sent as their increase since the previous sample; a quiet
 * second sends the gauges only. */
static void test_increases(void **state)
{
	struct gpu_metrics *m = new_metrics();
	struct point_log *pl = point_log__new("n");
	json_t *body;

	feed(m);
	point_log__sample(pl, m, 1000, comm_of, NULL);
	json_decref(take(pl));

	point_log__sample(pl, m, 2000, comm_of, NULL);
	body = take(pl);
	assert_int_equal(count_named(body, "gpu_memory_used_bytes"), 3);
	assert_int_equal(count_named(body, "gpu_memory_capacity_bytes"), 1);
	assert_int_equal(json_array_size(json_object_get(body, "points")), 4);
	json_decref(body);

	for (int i = 0; i < 3; i++)
		gpu_metrics__launch(m, 100, 4000);
	gpu_metrics__launch(m, 200, 4000);
	gpu_metrics__wait(m, 100, "cudaStreamSynchronize", 100000000);
	gpu_metrics__nccl(m, 100, NCCL_OP_ALLREDUCE, 1 << 20, 40000000);
	gpu_metrics__alloc(m, 200, 1, 1 * GIB);
	point_log__sample(pl, m, 3000, comm_of, NULL);
	body = take(pl);
	assert_near(point(body, "cuda_launches", "node", "n", "pid", "100", "comm", "train", NULL),
		    3);
	assert_near(point(body, "cuda_launches", "node", "n", "pid", "200", NULL), 1);
	assert_near(point(body, "cuda_sync_wait_seconds", "node", "n", "pid", "100", "comm",
			  "train", NULL),
		    0.1);
	assert_near(point(body, "nccl_calls", "node", "n", "op", "allreduce", NULL), 1);
	assert_near(point(body, "nccl_seconds", "node", "n", "op", "allreduce", NULL), 0.04);
	assert_true(point(body, "nccl_calls", "node", "n", "op", "broadcast", NULL) == NO_POINT);
	assert_near(point(body, "gpu_memory_used_bytes", "node", "n", "pid", "200", "gpu_id", "1",
			  NULL),
		    6.0 * GIB);
	json_decref(body);

	/* Two samples before a take: both are in the body, each at its time. */
	gpu_metrics__launch(m, 100, 4000);
	point_log__sample(pl, m, 4000, comm_of, NULL);
	gpu_metrics__launch(m, 100, 4000);
	point_log__sample(pl, m, 5000, comm_of, NULL);
	body = take(pl);
	assert_int_equal(count_named(body, "cuda_launches"), 2);
	assert_int_equal(count_named(body, "gpu_memory_used_bytes"), 6);
	json_decref(body);
	point_log__free(pl);
	gpu_metrics__free(m);
}

/* A process that exits and comes back under the same pid starts its
 * counters again: what it has done since is its increase, whether or not a
 * sample saw it gone. */
static void test_process_comes_back(void **state)
{
	struct gpu_metrics *m = new_metrics();
	struct point_log *pl = point_log__new(NULL);
	json_t *body;

	for (int i = 0; i < 10; i++)
		gpu_metrics__launch(m, 100, 4000);
	point_log__sample(pl, m, 1000, NULL, NULL);
	json_decref(take(pl));

	/* Gone and back between two samples: its count fell from 10 to 4. */
	gpu_metrics__process_exit(m, 100);
	for (int i = 0; i < 4; i++)
		gpu_metrics__launch(m, 100, 4000);
	point_log__sample(pl, m, 2000, NULL, NULL);
	body = take(pl);
	/* No comm function: no comm label; no node given: "". */
	assert_near(point(body, "cuda_launches", "node", "", "pid", "100", NULL), 4);
	json_decref(body);

	/* Gone for a sample, then back with 12 launches. */
	gpu_metrics__process_exit(m, 100);
	point_log__sample(pl, m, 3000, NULL, NULL);
	assert_null(point_log__take(pl, &(size_t){0}));
	for (int i = 0; i < 12; i++)
		gpu_metrics__launch(m, 100, 4000);
	point_log__sample(pl, m, 4000, NULL, NULL);
	body = take(pl);
	assert_near(point(body, "cuda_launches", "node", "", "pid", "100", NULL), 12);
	json_decref(body);
	point_log__free(pl);
	gpu_metrics__free(m);
}

/* A window of pid judged with these shares (gpu_wait, collective,
 * dataloader_wait, on_cpu, lock, io, sleep) as its evidence. */
static void judge(struct gpu_metrics *m, uint32_t pid, const double share[PS_NR])
{
	struct proc_times t = {.wall_ns = 2000000000};
	struct verdict_out v = {.verdict = V_IDLE};

	for (int s = 0; s < PS_NR; s++) {
		t.ns[s] = (uint64_t)(share[s] * (double)t.wall_ns);
		v.share[s] = share[s];
	}
	gpu_metrics__proc_window(m, pid, &t, &t, pid, &v);
}

/* The shares of each judged process's last window, one point per state a
 * second (a gauge: the same again each second until the next window),
 * with its state as a label; a state under half a percent, and so a
 * process idle with no time anywhere, costs nothing. */
static void test_process_time_share(void **state)
{
	static const char *const lab100[] = {"node", "n", "pid", "100", "comm", "train", NULL};
	struct gpu_metrics *m = new_metrics();
	struct point_log *pl = point_log__new("n");
	json_t *body;

	/* 100: gpu_wait 0.8, on_cpu 0.1, io just under the least, sleep at it. */
	judge(m, 100, (const double[PS_NR]){0.8, 0, 0, 0.1, 0, 0.0049, 0.005});
	/* 200: judged, no time anywhere (idle, no evidence). */
	judge(m, 200, (const double[PS_NR]){0});
	for (int sec = 1; sec <= 2; sec++) {
		point_log__sample(pl, m, 1000 * (uint64_t)sec, comm_of, NULL);
		body = take(pl);
		assert_near(point(body, "process_time_share", lab100[0], lab100[1], lab100[2],
				  lab100[3], lab100[4], lab100[5], "state", "gpu_wait", NULL),
			    0.8);
		assert_near(point(body, "process_time_share", lab100[0], lab100[1], lab100[2],
				  lab100[3], lab100[4], lab100[5], "state", "on_cpu", NULL),
			    0.1);
		assert_near(point(body, "process_time_share", lab100[0], lab100[1], lab100[2],
				  lab100[3], lab100[4], lab100[5], "state", "sleep", NULL),
			    0.005);
		assert_true(point(body, "process_time_share", lab100[0], lab100[1], lab100[2],
				  lab100[3], lab100[4], lab100[5], "state", "io",
				  NULL) == NO_POINT);
		assert_int_equal(count_named(body, "process_time_share"), 3);
		json_decref(body);
	}

	/* The next window: its shares replace the last ones. */
	judge(m, 100, (const double[PS_NR]){0, 0, 0.6, 0.2, 0, 0, 0});
	judge(m, 200, (const double[PS_NR]){0, 0, 0, 0, 0, 0, 0.9});
	point_log__sample(pl, m, 3000, comm_of, NULL);
	body = take(pl);
	assert_near(point(body, "process_time_share", lab100[0], lab100[1], lab100[2], lab100[3],
			  lab100[4], lab100[5], "state", "dataloader_wait", NULL),
		    0.6);
	assert_near(point(body, "process_time_share", lab100[0], lab100[1], lab100[2], lab100[3],
			  lab100[4], lab100[5], "state", "on_cpu", NULL),
		    0.2);
	assert_near(point(body, "process_time_share", "node", "n", "pid", "200", "state", "sleep",
			  NULL),
		    0.9);
	assert_int_equal(count_named(body, "process_time_share"), 3);
	json_decref(body);

	/* Gone: no more shares. */
	gpu_metrics__process_exit(m, 100);
	gpu_metrics__process_exit(m, 200);
	point_log__sample(pl, m, 4000, comm_of, NULL);
	assert_null(point_log__take(pl, &(size_t){0}));
	point_log__free(pl);
	gpu_metrics__free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_first_sample),
		cmocka_unit_test(test_increases),
		cmocka_unit_test(test_process_comes_back),
		cmocka_unit_test(test_process_time_share),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
