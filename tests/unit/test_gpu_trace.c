/* test_gpu_trace.c: the kernel timeline (src/agent/gpu_trace.c) -- kernels
 * moved onto the host's clock by their process's clock pairs, joined to
 * their launch's thread, written as a Chrome trace that parses back. */
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_timeline),
		cmocka_unit_test(test_graph_launch),
		cmocka_unit_test(test_bounds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
