/* test_tsp.c: the Trace Server Protocol endpoint (src/server/tsp.c) over a
 * fake backend of canned query API answers -- the selector and number
 * helpers, the routes' answers, a coordinator's partial/failed fields
 * carried into a GenericResponse, the request's caller handed to the
 * backend with each of its questions, and malformed bodies (mutations of valid
 * ones and random bytes): each a 4xx with {"title", "error"}, never a
 * crash. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "server/tsp_internal.h"

struct fake {
	bool partial;
	int calls;
};

/* Who every request here comes from: what tsp__handle() is given, which
 * the backend must see with each of its questions. */
static int caller;

/* Canned answers: one service "trainer" with one cpu process, 10 samples
 * of f in [1000, 2000) ms. */
static int fake_get(void *ctx, void *who, const char *path, const char *query, json_t **answer)
{
	struct fake *f = ctx;
	const char *by = strstr(query, "by=");
	const char *value = "";

	assert_ptr_equal(who, &caller);
	f->calls++;
	*answer = NULL;
	if (!strcmp(path, "/api/v1/totals")) {
		if (by && !strncmp(by + 3, "type", 4))
			value = "cpu";
		else if (by && !strncmp(by + 3, "service_name", 12))
			value = "trainer";
		else if (by && !strncmp(by + 3, "node", 4))
			value = "n1";
		else if (by && !strncmp(by + 3, "pid", 3))
			value = "42";
		*answer = json_pack("{s:I,s:I,s:[{s:s,s:I,s:I,s:I}]}", "from_ms", 1000LL,
				    "until_ms", 2000LL, "groups", "value", value, "total", 10LL,
				    "from_ms", 1000LL, "until_ms", 2000LL);
	} else if (!strcmp(path, "/api/v1/top")) {
		*answer = json_pack("{s:s,s:I,s:[{s:s,s:s,s:I,s:I}]}", "unit", "samples", "total",
				    10LL, "functions", "name", "f", "module", "m", "self", 10LL,
				    "total", 10LL);
	} else if (!strcmp(path, "/api/v1/timeseries")) {
		*answer = json_pack("{s:s,s:[f,f]}", "unit", "samples", "values", 4.0, 6.0);
	} else if (!strcmp(path, "/api/v1/flamegraph")) {
		*answer = json_pack("{s:{s:i}}", "metadata", "sampleRate", 100);
	} else if (!strcmp(path, "/api/v1/label/values") || !strcmp(path, "/api/v1/points")) {
		*answer = json_pack("{s:[s],s:[]}", "values", "python3", "series");
	} else {
		*answer = json_pack("{s:s}", "error", "no such route");
		return 404;
	}
	if (f->partial)
		json_object_set_new(
			*answer, "failed",
			json_pack("[{s:s,s:s}]", "server", "http://b:7470", "error", "timed out"));
	json_object_set_new(*answer, "partial", json_boolean(f->partial));
	return 200;
}

static struct tsp *fake_tsp(struct fake *f)
{
	struct tsp_backend b = {.get = fake_get, .ctx = f};
	struct tsp *t = tsp__new(&b);

	assert_non_null(t);
	return t;
}

/* Handles a request; returns the status, *out the answer. */
static int ask(struct tsp *t, const char *method, const char *path, const char *body, json_t **out)
{
	int status = 0;

	assert_int_equal(
		tsp__handle(t, &caller, method, path, body, body ? strlen(body) : 0, &status, out),
		0);
	assert_non_null(*out);
	return status;
}

static void test_selector_with(void **state)
{
	static const struct {
		const char *in, *want;
	} cases[] = {
		{"", "{a=\"b\"}"},
		{"{}", "{a=\"b\"}"},
		{" { } ", " { a=\"b\"}"},
		{"{x=\"1\"}", "{x=\"1\",a=\"b\"}"},
		{"{x=\"1\", }", "{x=\"1\", a=\"b\"}"},
		{"app.cpu", "app.cpu{a=\"b\"}"},
		{"app.cpu{x=`}`}", "app.cpu{x=`}`,a=\"b\"}"},
	};
	char *s;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		s = tsp_selector_with(cases[i].in, "a", "b", NULL);
		assert_string_equal(s, cases[i].want);
		free(s);
	}
	s = tsp_selector_with("{}", "a", "q\"\\\n", "c", "", NULL);
	assert_string_equal(s, "{a=\"q\\\"\\\\\\n\",c=\"\"}");
	free(s);
}

static void test_numbers(void **state)
{
	static const double v[] = {
		1.0 / 3, -1.0 / 3, 6.4e10, 123456789.123456, -1.23456789123e-5, 1e300, -7e-299,
		3.0,	 0.1,	   2e15};
	json_t *n;
	char *s;

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		json_t *j = tsp_number(v[i]);

		assert_non_null(j);
		s = json_dumps(j, JSON_ENCODE_ANY | JSON_REAL_PRECISION(9));
		/* The npm client's parser takes a longer number for a BigInt. */
		assert_true(strlen(s) <= 15);
		if (fabs(v[i]) > 1e-30)
			assert_true(fabs(json_number_value(j) - v[i]) <= 1e-8 * fabs(v[i]));
		free(s);
		json_decref(j);
	}
	n = tsp_number(6.4e10);
	assert_true(json_is_integer(n));
	json_decref(n);
	n = tsp_number(NAN);
	assert_int_equal(json_number_value(n), 0);
	json_decref(n);
	assert_true(tsp_id("a", "b", "c") == tsp_id("a", "b", "c"));
	assert_true(tsp_id("a", "b", "c") != tsp_id("a", "b", "d"));
	assert_true(tsp_id("x", "y", "z") < (1LL << 49));
}

static void test_routes(void **state)
{
	struct fake f = {0};
	struct tsp *t = fake_tsp(&f);
	json_t *a, *tr, *traces;
	char path[256], body[256];
	const char *uuid, *exp;
	int st;

	st = ask(t, "GET", "/tsp/api/health", NULL, &a);
	assert_int_equal(st, 200);
	assert_string_equal(json_string_value(json_object_get(a, "status")), "UP");
	json_decref(a);
	st = ask(t, "GET", "/traces", NULL, &traces);
	tr = traces;
	assert_int_equal(st, 200);
	assert_int_equal(json_array_size(tr), 1);
	uuid = json_string_value(json_object_get(json_array_get(tr, 0), "UUID"));
	assert_int_equal(strlen(uuid), 36);
	assert_int_equal(json_integer_value(json_object_get(json_array_get(tr, 0), "start")),
			 1000LL * 1000000);
	/* Opening the service's URI is the same trace. */
	st = ask(t, "POST", "/tsp/api/traces",
		 "{\"parameters\": {\"uri\": \"sonde:{service_name=\\\"trainer\\\"}\"}}", &a);
	assert_int_equal(st, 200);
	assert_string_equal(json_string_value(json_object_get(a, "UUID")), uuid);
	json_decref(a);
	snprintf(body, sizeof(body), "{\"parameters\": {\"name\": \"e\", \"traces\": [\"%s\"]}}",
		 uuid);
	st = ask(t, "POST", "/tsp/api/experiments", body, &a);
	assert_int_equal(st, 200);
	exp = json_string_value(json_object_get(a, "UUID"));
	snprintf(path, sizeof(path), "/tsp/api/experiments/%s/outputs/data/sonde.top.cpu/tree",
		 exp);
	json_t *e = a;

	st = ask(t, "POST", path, "{\"parameters\": {}}", &a);
	assert_int_equal(st, 200);
	assert_string_equal(json_string_value(json_object_get(a, "status")), "COMPLETED");
	assert_null(json_object_get(a, "partial"));
	/* The trace and its function f, self and total as top said. */
	tr = json_object_get(json_object_get(a, "model"), "entries");
	assert_int_equal(json_array_size(tr), 2);
	assert_string_equal(json_string_value(json_array_get(
				    json_object_get(json_array_get(tr, 1), "labels"), 1)),
			    "10");
	json_decref(a);
	/* A coordinator's partial answer says so in the response. */
	f.partial = true;
	st = ask(t, "POST", path, NULL, &a);
	assert_int_equal(st, 200);
	assert_true(json_is_true(json_object_get(a, "partial")));
	assert_string_equal(json_string_value(json_object_get(
				    json_array_get(json_object_get(a, "failed"), 0), "server")),
			    "http://b:7470");
	json_decref(a);
	f.partial = false;
	snprintf(path, sizeof(path), "/tsp/api/experiments/%s/outputs/XY/sonde.rate.cpu/xy", exp);
	st = ask(t, "POST", path,
		 "{\"parameters\": {\"requested_timerange\": {\"start\": 1000000000, \"end\": "
		 "2000000000, \"nbTimes\": 2}}}",
		 &a);
	assert_int_equal(st, 200);
	/* 4 samples in 500 ms: 8 a second. */
	tr = json_array_get(json_object_get(json_object_get(a, "model"), "series"), 0);
	assert_int_equal(json_number_value(json_array_get(json_object_get(tr, "yValues"), 0)), 8);
	assert_int_equal(json_integer_value(json_array_get(json_object_get(tr, "xValues"), 1)),
			 1500000000LL);
	json_decref(a);
	snprintf(path, sizeof(path), "/tsp/api/experiments/%s", exp);
	st = ask(t, "DELETE", path, NULL, &a);
	assert_int_equal(st, 200);
	json_decref(a);
	st = ask(t, "GET", path, NULL, &a);
	assert_int_equal(st, 404);
	assert_non_null(json_string_value(json_object_get(a, "error")));
	assert_non_null(json_string_value(json_object_get(a, "title")));
	json_decref(a);
	json_decref(e);
	json_decref(traces);
	tsp__free(t);
	tsp__free(NULL);
}

/* A 4xx with {"title", "error"} (or a 200 when the mutation left a valid
 * request). */
static void check_answer(int st, json_t *a)
{
	if (st == 200)
		return;
	if (st < 400 || st >= 500) {
		char *s = json_dumps(a, 0);

		fprintf(stderr, "HTTP %d %s\n", st, s);
		free(s);
	}
	assert_true(st >= 400 && st < 500);
	assert_non_null(json_string_value(json_object_get(a, "error")));
	assert_non_null(json_string_value(json_object_get(a, "title")));
}

static void test_fuzz(void **state)
{
	static const char *const valid[] = {
		"{\"parameters\": {\"uri\": \"sonde:{}\", \"name\": \"n\"}}",
		"{\"parameters\": {\"name\": \"e\", \"traces\": [\"%s\"]}}",
		"{\"parameters\": {\"requested_timerange\": {\"start\": 1000000000, \"end\": "
		"2000000000, \"nbTimes\": 20}, \"requested_items\": [1, 2]}}",
	};
	static const char junk[] = "{}[]\":,0123456789-+.eE \\nultrfase\xff\x80";
	const char *paths[8];
	struct fake f = {0};
	struct tsp *t = fake_tsp(&f);
	char path[5][256], body[1024], uuid[64] = "";
	unsigned seed = 12345;
	json_t *a;
	int st;

	st = ask(t, "GET", "/tsp/api/traces", NULL, &a);
	snprintf(uuid, sizeof(uuid), "%s",
		 json_string_value(json_object_get(json_array_get(a, 0), "UUID")));
	json_decref(a);
	snprintf(body, sizeof(body), valid[1], uuid);
	st = ask(t, "POST", "/tsp/api/experiments", body, &a);
	assert_int_equal(st, 200);
	snprintf(path[0], sizeof(path[0]),
		 "/tsp/api/experiments/%s/outputs/data/sonde.top.cpu/tree",
		 json_string_value(json_object_get(a, "UUID")));
	snprintf(path[1], sizeof(path[1]), "/tsp/api/experiments/%s/outputs/XY/sonde.rate.cpu/xy",
		 json_string_value(json_object_get(a, "UUID")));
	snprintf(path[2], sizeof(path[2]),
		 "/tsp/api/experiments/%s/outputs/timeGraph/sonde.states/states",
		 json_string_value(json_object_get(a, "UUID")));
	json_decref(a);
	paths[0] = "/tsp/api/traces";
	paths[1] = "/tsp/api/experiments";
	paths[2] = path[0];
	paths[3] = path[1];
	paths[4] = path[2];
	for (int i = 0; i < 3000; i++) {
		const char *p = paths[rand_r(&seed) % 5];
		size_t len;

		if (i % 3 == 0) {
			/* Random bytes. */
			len = rand_r(&seed) % 64;
			for (size_t k = 0; k < len; k++)
				body[k] = (char)(rand_r(&seed) & 0xff);
		} else {
			/* A valid body with a few bytes changed, cut or
			 * inserted. */
			snprintf(body, sizeof(body), valid[rand_r(&seed) % 3], uuid);
			len = strlen(body);
			for (int m = rand_r(&seed) % 4 + 1; m > 0; m--) {
				size_t at = rand_r(&seed) % len;
				char c = junk[rand_r(&seed) % (sizeof(junk) - 1)];

				if (rand_r(&seed) % 4 == 0 && len > 1)
					len = at ? at : 1;
				else if (rand_r(&seed) % 2 && len + 1 < sizeof(body)) {
					memmove(body + at + 1, body + at, len - at);
					body[at] = c;
					len++;
				} else {
					body[at] = c;
				}
			}
		}
		body[len] = '\0';
		assert_int_equal(tsp__handle(t, &caller, "POST", p, body, len, &st, &a), 0);
		check_answer(st, a);
		json_decref(a);
	}
	tsp__free(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_selector_with),
		cmocka_unit_test(test_numbers),
		cmocka_unit_test(test_routes),
		cmocka_unit_test(test_fuzz),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
