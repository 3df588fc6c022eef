/* test_gpu_trace.c: the kernel timeline (src/agent/gpu_trace.c) -- kernels
 * moved onto the host's clock by their process's clock pairs, joined to
 * their launch's thread, written as a Chrome trace that parses back; copies
 * beside kernels; and the agent's windows: the spans taken as an ingest
 * body (wall clock, a series per process, exact nanoseconds), the longest
 * kept past the window's bound. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/gpu_trace.h"
#include "cupti/sonde_cupti.h"

/* The trace t writes, parsed: its traceEvents. */
static json_t *written(struct gpu_trace *t, json_t **root)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	json_error_t err;

	assert_non_null(f);
	assert_int_equal(gpu_trace__write(t, f), 0);
	fclose(f);
	*root = json_loadb(buf, len, 0, &err);
	if (!*root)
		fail_msg("the trace is no JSON: %s (line %d): %.300s", err.text, err.line, buf);
	free(buf);
	return json_object_get(*root, "traceEvents");
}

/* The events of phase ph and category cat. */
static size_t count(json_t *ev, const char *ph, const char *cat)
{
	size_t i, n = 0;
	json_t *e;

	json_array_foreach(ev, i, e)
	{
		const char *c = json_string_value(json_object_get(e, "cat"));

		n += !strcmp(json_string_value(json_object_get(e, "ph")), ph) &&
		     (!cat || (c && !strcmp(c, cat)));
	}
	return n;
}

static json_t *kernel_event(json_t *ev, int correlation)
{
	size_t i;
	json_t *e;

	json_array_foreach(ev, i, e)
	{
		const char *c = json_string_value(json_object_get(e, "cat"));

		if (c && !strcmp(c, "kernel") &&
		    json_integer_value(json_object_get(json_object_get(e, "args"),
						       "correlation")) == correlation)
			return e;
	}
	fail_msg("no kernel of correlation %d", correlation);
	return NULL;
}

static void test_timeline(void **state)
{
	struct gpu_trace *t = gpu_trace__new();
	struct gpu_trace_stats st;
	json_t *root, *ev, *k;
	char *text;

	/* Process 7's GPU clock is 1,000,000 ns behind its host clock. */
	gpu_trace__clock(t, 7, 5000000, 6000000);
	gpu_trace__launch(t, 7, 71, 6000500, 1);
	gpu_trace__launch(t, 7, 72, 6000600, 2);
	gpu_trace__name(t, 7, "train\"er");
	gpu_trace__kernel(t, 7, 0, 13, 5001000, 5038000, 1, "_Z4stepPfi");
	gpu_trace__kernel(t, 7, 1, 14, 5002000, 5003000, 2, "relu");
	/* A kernel whose launch was not seen, of a process with no clock. */
	gpu_trace__kernel(t, 8, 0, 7, 100, 200, 9, NULL);
	gpu_trace__stats(t, &st);
	assert_int_equal(st.kernels, 3);
	assert_int_equal(st.no_launch, 1);
	assert_int_equal(st.no_clock, 1);
	ev = written(t, &root);
	assert_int_equal(count(ev, "X", "kernel"), 3);
	assert_int_equal(count(ev, "X", "launch"), 2);
	assert_int_equal(count(ev, "s", NULL), 2);
	assert_int_equal(count(ev, "f", NULL), 2);
	k = kernel_event(ev, 1);
	/* Demangled, on the host's clock, in microseconds. */
	assert_string_equal(json_string_value(json_object_get(k, "name")), "step(float*, int)");
	assert_true(json_real_value(json_object_get(k, "ts")) == 6001.0);
	assert_true(json_real_value(json_object_get(k, "dur")) == 37.0);
	k = kernel_event(ev, 9);
	assert_string_equal(json_string_value(json_object_get(k, "name")), "[unknown kernel]");
	assert_true(json_real_value(json_object_get(k, "ts")) == 0.1);
	/* The process's name, escaped and read back. */
	text = json_dumps(ev, 0);
	assert_non_null(strstr(text, "train\\\"er (7)"));
	free(text);
	json_decref(root);
	gpu_trace__free(t);
}

/* A graph's launch: one launch slice, an arrow to each of its kernels. */
static void test_graph_launch(void **state)
{
	struct gpu_trace *t = gpu_trace__new();
	json_t *root, *ev;

	gpu_trace__launch(t, 9, 91, 1000, 5);
	for (int i = 0; i < 3; i++)
		gpu_trace__kernel(t, 9, 0, 13, 2000 + 10 * i, 2010 + 10 * i, 5, "node");
	ev = written(t, &root);
	assert_int_equal(count(ev, "X", "kernel"), 3);
	assert_int_equal(count(ev, "X", "launch"), 1);
	assert_int_equal(count(ev, "s", NULL), 3);
	assert_int_equal(count(ev, "f", NULL), 3);
	json_decref(root);
	gpu_trace__free(t);
}

/* Past the bound, kernels are counted, not kept. */
static void test_bounds(void **state)
{
	struct gpu_trace *t = gpu_trace__new();
	struct gpu_trace_stats st;

	for (uint32_t i = 0; i < GPU_TRACE_MAX_KERNELS + 5; i++)
		gpu_trace__kernel(t, 1, 0, 0, i, i + 1, i, "k");
	gpu_trace__stats(t, &st);
	assert_int_equal(st.kernels, GPU_TRACE_MAX_KERNELS);
	assert_int_equal(st.dropped, 5);
	gpu_trace__free(t);
	gpu_trace__free(NULL);
}

/* The body gpu_trace__take_json gives, parsed (NULL when it gives none). */
static json_t *taken(struct gpu_trace *t, int64_t offset, size_t *n)
{
	size_t len = 0;
	char *body = gpu_trace__take_json(t, "node-1", offset, &len, n);
	json_error_t err;
	json_t *root;

	if (!body)
		return NULL;
	assert_int_equal(strlen(body), len);
	root = json_loadb(body, len, 0, &err);
	if (!root)
		fail_msg("the body is no JSON: %s: %.300s", err.text, body);
	free(body);
	return root;
}

static json_int_t span_int(json_t *sp, const char *name)
{
	json_t *v = json_object_get(sp, name);

	assert_true(json_is_integer(v));
	return json_integer_value(v);
}

static void test_copy(void **state)
{
	struct gpu_trace *t = gpu_trace__new();
	struct gpu_trace_stats st;
	json_t *root, *ev, *sp;
	size_t n;

	gpu_trace__clock(t, 7, 1000, 5000);
	gpu_trace__copy(t, 7, 0, 13, 2000, 2500, 9, "[memcpy HtoD]", 4096);
	gpu_trace__copy(t, 7, 0, 13, 3000, 3100, 10, "[memset]", 64);
	gpu_trace__kernel(t, 7, 0, 7, 2100, 2200, 8, "_Z3addPfi");
	gpu_trace__stats(t, &st);
	assert_int_equal(st.kernels, 3);
	assert_int_equal(st.copies, 2);
	/* In the Chrome trace, a copy is a slice of category copy. */
	ev = written(t, &root);
	assert_int_equal(count(ev, "X", "copy"), 2);
	assert_int_equal(count(ev, "X", "kernel"), 1);
	json_decref(root);
	/* Shipped: its kind is its label's, its bytes with it. */
	root = taken(t, 0, &n);
	assert_non_null(root);
	assert_int_equal(n, 3);
	sp = json_object_get(json_array_get(json_object_get(root, "series"), 0), "spans");
	assert_int_equal(json_array_size(sp), 3);
	assert_string_equal(json_string_value(json_object_get(json_array_get(sp, 0), "kind")),
			    "memcpy HtoD");
	assert_string_equal(json_string_value(json_object_get(json_array_get(sp, 0), "name")),
			    "[memcpy HtoD]");
	assert_int_equal(span_int(json_array_get(sp, 0), "bytes"), 4096);
	assert_int_equal(span_int(json_array_get(sp, 0), "start_ns"), 6000);
	assert_int_equal(span_int(json_array_get(sp, 0), "end_ns"), 6500);
	assert_string_equal(json_string_value(json_object_get(json_array_get(sp, 1), "kind")),
			    "kernel");
	assert_string_equal(json_string_value(json_object_get(json_array_get(sp, 1), "name")),
			    "add(float*, int)");
	assert_null(json_object_get(json_array_get(sp, 1), "bytes"));
	assert_string_equal(json_string_value(json_object_get(json_array_get(sp, 2), "kind")),
			    "memset");
	json_decref(root);
	gpu_trace__free(t);
}

/* A graph run as a whole is a span of kind graph, joined to its launch; a
 * host wait is a span of kind sync on device -1, joined to none (not
 * counted as a span whose launch is missing). */
static void test_graph_and_sync(void **state)
{
	struct gpu_trace *t = gpu_trace__new();
	struct gpu_trace_stats st;
	json_t *root, *ev, *sp;
	size_t n;

	gpu_trace__clock(t, 7, 1000, 5000);
	gpu_trace__launch(t, 7, 70, 5500, 4);
	gpu_trace__graph(t, 7, 0, 13, 2000, 2900, 4, 3);
	gpu_trace__sync(t, 7, 13, 2100, 3000, 5, 3);
	gpu_trace__sync(t, 7, SONDE_CUPTI_NO_ID, 3100, 3200, 6, 4);
	gpu_trace__stats(t, &st);
	assert_int_equal(st.kernels, 3);
	assert_int_equal(st.no_launch, 0);
	ev = written(t, &root);
	assert_int_equal(count(ev, "X", "graph"), 1);
	assert_int_equal(count(ev, "X", "sync"), 2);
	json_decref(root);
	root = taken(t, 0, &n);
	assert_int_equal(n, 3);
	sp = json_object_get(json_array_get(json_object_get(root, "series"), 0), "spans");
	assert_string_equal(json_string_value(json_object_get(json_array_get(sp, 0), "kind")),
			    "graph");
	assert_string_equal(json_string_value(json_object_get(json_array_get(sp, 0), "name")),
			    "[CUDA graph 3]");
	assert_int_equal(span_int(json_array_get(sp, 0), "tid"), 70);
	assert_int_equal(span_int(json_array_get(sp, 0), "start_ns"), 6000);
	assert_string_equal(json_string_value(json_object_get(json_array_get(sp, 1), "kind")),
			    "sync");
	assert_string_equal(json_string_value(json_object_get(json_array_get(sp, 1), "name")),
			    "[stream synchronize]");
	assert_int_equal(span_int(json_array_get(sp, 1), "device"), -1);
	assert_int_equal(span_int(json_array_get(sp, 1), "stream"), 13);
	assert_int_equal(span_int(json_array_get(sp, 1), "end_ns"), 7000);
	assert_string_equal(json_string_value(json_object_get(json_array_get(sp, 2), "name")),
			    "[context synchronize]");
	assert_int_equal(span_int(json_array_get(sp, 2), "stream"), 0);
	json_decref(root);
	gpu_trace__free(t);
}

static void test_take_json(void **state)
{
	struct gpu_trace *t = gpu_trace__new();
	const int64_t wall = 1795337821000000000LL; /* wall minus monotonic */
	struct gpu_trace_stats st;
	json_t *root, *series, *sp, *labels;
	size_t n;

	gpu_trace__name(t, 7, "train");
	gpu_trace__clock(t, 7, 1000, 5000);
	gpu_trace__launch(t, 7, 70, 4500, 3);
	gpu_trace__kernel(t, 7, 1, 14, 3000, 3700, 3, "k_late");
	gpu_trace__kernel(t, 7, 1, 7, 2000, 2001, 4, "k_early");
	/* pid 8 told no clock pair: its kernels can't be placed in time. */
	gpu_trace__kernel(t, 8, 0, 7, 100, 200, 1, "k_unclocked");
	gpu_trace__name(t, 9, "eval");
	gpu_trace__clock(t, 9, 0, 0);
	gpu_trace__kernel(t, 9, 0, 7, 10, 30, 1, "k_other");

	root = taken(t, wall, &n);
	assert_non_null(root);
	assert_int_equal(n, 3);
	series = json_object_get(root, "series");
	assert_int_equal(json_array_size(series), 2);
	labels = json_object_get(json_array_get(series, 0), "labels");
	assert_string_equal(json_string_value(json_object_get(labels, "node")), "node-1");
	assert_string_equal(json_string_value(json_object_get(labels, "pid")), "7");
	assert_string_equal(json_string_value(json_object_get(labels, "process")), "train");
	sp = json_object_get(json_array_get(series, 0), "spans");
	assert_int_equal(json_array_size(sp), 2);
	/* In order of start, on the wall clock to the nanosecond. */
	assert_string_equal(json_string_value(json_object_get(json_array_get(sp, 0), "name")),
			    "k_early");
	assert_int_equal(span_int(json_array_get(sp, 0), "start_ns"), wall + 6000);
	assert_int_equal(span_int(json_array_get(sp, 0), "end_ns"), wall + 6001);
	assert_int_equal(span_int(json_array_get(sp, 0), "stream"), 7);
	assert_int_equal(span_int(json_array_get(sp, 0), "device"), 1);
	assert_int_equal(span_int(json_array_get(sp, 0), "tid"), 0);
	assert_int_equal(span_int(json_array_get(sp, 1), "start_ns"), wall + 7000);
	assert_int_equal(span_int(json_array_get(sp, 1), "end_ns"), wall + 7700);
	assert_int_equal(span_int(json_array_get(sp, 1), "stream"), 14);
	assert_int_equal(span_int(json_array_get(sp, 1), "correlation"), 3);
	assert_int_equal(span_int(json_array_get(sp, 1), "tid"), 70);
	labels = json_object_get(json_array_get(series, 1), "labels");
	assert_string_equal(json_string_value(json_object_get(labels, "process")), "eval");
	json_decref(root);
	gpu_trace__stats(t, &st);
	assert_int_equal(st.shipped, 3);
	assert_int_equal(st.no_clock, 1);
	/* Taken once: the next window starts empty. */
	assert_null(taken(t, wall, &n));
	assert_int_equal(n, 0);
	gpu_trace__kernel(t, 7, 0, 7, 5000, 5100, 5, "k_next");
	root = taken(t, wall, &n);
	assert_int_equal(n, 1);
	json_decref(root);
	gpu_trace__free(t);
}

static void test_window_max(void **state)
{
	static const uint64_t len[] = {50, 10, 40, 20, 30, 5, 60};
	struct gpu_trace *t = gpu_trace__new();
	struct gpu_trace_stats st;
	json_t *root, *sp;
	size_t n, i;

	gpu_trace__set_window_max(t, 3);
	gpu_trace__clock(t, 7, 0, 0);
	for (i = 0; i < sizeof(len) / sizeof(len[0]); i++)
		gpu_trace__kernel(t, 7, 0, 7, 1000 * i, 1000 * i + len[i], (uint32_t)i, "k");
	gpu_trace__stats(t, &st);
	assert_int_equal(st.dropped, 4);
	assert_int_equal(st.kernels, 3);
	/* The longest three, in order of start. */
	root = taken(t, 0, &n);
	assert_int_equal(n, 3);
	sp = json_object_get(json_array_get(json_object_get(root, "series"), 0), "spans");
	assert_int_equal(span_int(json_array_get(sp, 0), "correlation"), 0);
	assert_int_equal(span_int(json_array_get(sp, 1), "correlation"), 2);
	assert_int_equal(span_int(json_array_get(sp, 2), "correlation"), 6);
	json_decref(root);
	gpu_trace__free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_timeline),       cmocka_unit_test(test_graph_launch),
		cmocka_unit_test(test_bounds),	       cmocka_unit_test(test_copy),
		cmocka_unit_test(test_graph_and_sync), cmocka_unit_test(test_take_json),
		cmocka_unit_test(test_window_max),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
