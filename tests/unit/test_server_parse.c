/* test_server_parse.c: unit tests of the server's query-string parsers
 * (src/server/parse.c), its label sets (src/server/lset.c) and the UTF-8
 * and JSON helpers it answers with (src/common/utf8.c, json.c) -- selectors in
 * Prometheus and Pyroscope form with every operator, quoting and escape,
 * and their errors with positions; regexes anchored, refused when they
 * would not compile or would blow up; times (now, now-1h, ms, Pyroscope
 * seconds); durations; Pyroscope ingest names; UTF-8 checks and repair;
 * label limits. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "server/parse.h"
#include "common/json.h"
#include "common/utf8.h"
#include "server/lset.h"

static void parse_ok(const char *text, struct selector *sel)
{
	char err[256] = "";
	int rc;

	memset(sel, 0, sizeof(*sel));
	rc = selector__parse(sel, text, err, sizeof(err));
	if (rc)
		fail_msg("selector '%s': %s", text, err);
}

/* Parses text, expecting an error mentioning want. */
static void parse_bad(const char *text, const char *want)
{
	struct selector sel = {0};
	char err[256] = "";

	assert_int_equal(selector__parse(&sel, text, err, sizeof(err)), -EINVAL);
	if (!strstr(err, want))
		fail_msg("selector '%s': error '%s' does not say '%s'", text, err, want);
	selector__free(&sel);
}

static void assert_matcher(const struct selector *sel, size_t i, const char *name,
			   enum store_match op, const char *value)
{
	assert_true(i < sel->n);
	assert_string_equal(sel->m[i].name, name);
	assert_int_equal(sel->m[i].op, op);
	assert_string_equal(sel->m[i].value, value);
}

static void test_selector_prometheus(void **state)
{
	struct selector sel;

	parse_ok("{type=\"cpu\", service_name=\"shares\", pid!=\"1\", comm=~\"python.*\","
		 " exe!~'/usr/.*'}",
		 &sel);
	assert_int_equal(sel.n, 5);
	assert_matcher(&sel, 0, "type", STORE_EQ, "cpu");
	assert_matcher(&sel, 1, "service_name", STORE_EQ, "shares");
	assert_matcher(&sel, 2, "pid", STORE_NE, "1");
	assert_matcher(&sel, 3, "comm", STORE_RE, "python.*");
	assert_matcher(&sel, 4, "exe", STORE_NRE, "/usr/.*");
	assert_string_equal(selector__eq(&sel, "type"), "cpu");
	assert_null(selector__eq(&sel, "pid"));
	selector__free(&sel);

	/* Escapes, backticks, spaces and a trailing comma. */
	parse_ok("  { a = \"x\\\"y\\\\z\\n\" , b=`raw\\d`, }  ", &sel);
	assert_int_equal(sel.n, 2);
	assert_matcher(&sel, 0, "a", STORE_EQ, "x\"y\\z\n");
	assert_matcher(&sel, 1, "b", STORE_EQ, "raw\\d");
	selector__free(&sel);

	/* OpenTelemetry-style names, plain or quoted as Prometheus 3 writes
	 * them: a dot is '_', as at ingest. */
	parse_ok("{otel.scope.name=\"x\", \"process.runtime.name\"=~\"node.*\", .a!=\"y\"}", &sel);
	assert_int_equal(sel.n, 3);
	assert_matcher(&sel, 0, "otel_scope_name", STORE_EQ, "x");
	assert_matcher(&sel, 1, "process_runtime_name", STORE_RE, "node.*");
	assert_matcher(&sel, 2, "_a", STORE_NE, "y");
	selector__free(&sel);

	parse_ok("", &sel);
	assert_int_equal(sel.n, 0);
	selector__free(&sel);
	parse_ok("{}", &sel);
	assert_int_equal(sel.n, 0);
	selector__free(&sel);
	parse_ok(NULL, &sel);
	assert_int_equal(sel.n, 0);
}

static void test_selector_pyroscope(void **state)
{
	struct selector sel;

	parse_ok("shares.cpu{pid=\"42\"}", &sel);
	assert_int_equal(sel.n, 3);
	assert_matcher(&sel, 0, "service_name", STORE_EQ, "shares");
	assert_matcher(&sel, 1, "type", STORE_EQ, "cpu");
	assert_matcher(&sel, 2, "pid", STORE_EQ, "42");
	selector__free(&sel);

	/* The type is after the last dot; no dot means cpu. */
	parse_ok("com.example.app.gpu_wait", &sel);
	assert_matcher(&sel, 0, "service_name", STORE_EQ, "com.example.app");
	assert_matcher(&sel, 1, "type", STORE_EQ, "gpu_wait");
	selector__free(&sel);
	parse_ok("kworker/0:1 {}", &sel);
	assert_matcher(&sel, 0, "service_name", STORE_EQ, "kworker/0:1");
	assert_matcher(&sel, 1, "type", STORE_EQ, "cpu");
	selector__free(&sel);
}

static void test_selector_errors(void **state)
{
	parse_bad("{type=\"cpu\"", "offset 11");
	parse_bad("{type=cpu}", "expected a quoted value for 'type' at offset 6");
	parse_bad("{type==\"cpu\"}", "quoted value");
	parse_bad("{type<\"cpu\"}", "expected =, !=, =~ or !~");
	parse_bad("{1abc=\"x\"}", "expected a label name at offset 1");
	parse_bad("{\"a b\"=\"x\"}", "label name at offset 1 is not");
	parse_bad("{a-b=\"x\"}", "expected =, !=, =~ or !~ after 'a'");
	parse_bad("{\"a=\"x\"}", "label name at offset 1 is not");
	parse_bad("{\"ab", "unterminated string at offset 1");
	parse_bad("{a=\"x\" b=\"y\"}", "expected ',' or '}' at offset 7");
	parse_bad("{a=\"x\"} junk", "offset 8");
	parse_bad("{a=\"unterminated}", "unterminated string at offset 3");
	parse_bad("{a=\"bad \\q escape\"}", "unknown escape");
	parse_bad("{a=~\"(unclosed\"}", "bad regex");
	parse_bad("{a=~\"x)|(y\"}", "unmatched ')'");
	parse_bad("{a=~\"(a{100}){100}\"}", "repeats too much");
	parse_bad("{a=~\"(a{30}b{30}){30}\"}", "repeats too much");
	parse_bad("{a=~\"a{600}\"}", "repeats too much");
	parse_bad("{a=~\"(a|b){,32}{,32}\"}", "can match nothing");
	parse_bad("{a=~\"(a)\\\\1\"}", "back-reference");
	{
		/* Repetitions of repetitions nest at most two deep. */
		char re[300] = "{a=~\"p";
		struct selector sel = {0};

		memset(re + strlen(re), '+', 150);
		strcat(re, "\"}");
		parse_bad(re, "nests repetitions");
		parse_ok("{a=~\"((a+)|b)*\", b=~\"a{400}\", c=~\"x{3,}y{0,9}\", "
			 "d=~\"(ab+)*\\\\+\"}",
			 &sel);
		selector__free(&sel);
		parse_bad("{a=~\"((((((((((((((a+)+)+)+)+)+)+)+)+)+)+)+)+)+)\"}",
			  "nests repetitions");
		parse_bad("{a=~\"((((/+)*)+)*)\"}", "nests repetitions");
		parse_bad("{a=~\"/+*+\"}", "nests repetitions");
		parse_bad("{a=~\"a^^^^^b\"}", "more than 4 anchors");
		parse_bad("{a=~\"(d*)+(d*)+(d*)+(d*)+(d*)+\"}", "more than 4 times");
		parse_bad("{a=~\"d**d**d**d**d**\"}", "more than 4 times");
		parse_ok("{a=~\"(d*)+(d*)+(d*)+(d*)+(d+)*(d+)*\"}", &sel);
		selector__free(&sel);
		parse_bad("{a=~\"(b){,4}{,}{72}\"}", "can match nothing");
		/* Copies of what can match nothing. */
		parse_bad("{a=~\"(){8,484}\"}", "can match nothing");
		parse_bad("{a=~\"(a*){1,100}\"}", "can match nothing");
		parse_bad("{a=~\"(b|){40}\"}", "can match nothing");
		parse_bad("{a=~\"(x{0,3}){40}\"}", "can match nothing");
		parse_ok("{a=~\"(a*){1,15}\", b=~\"(ab){1,200}\", c=~\"(b|c){40}\"}", &sel);
		selector__free(&sel);
	}
	parse_bad("app.{}", "expected APP.TYPE");
	parse_bad(".cpu", "expected APP.TYPE");
	parse_bad("{a=\"\xff\xfe\"}", "not UTF-8");
	{
		char *v = malloc(5000);

		strcpy(v, "{a=\"");
		memset(v + 4, 'x', 4200);
		strcpy(v + 4204, "\"}");
		parse_bad(v, "longer than 4096 bytes");
		free(v);
	}
	{
		char name[100];

		memset(name, 'a', sizeof(name));
		name[0] = '{';
		memcpy(name + 80, "=\"x\"}", 6);
		parse_bad(name, "longer than 64");
	}
	{
		/* 65 matchers */
		struct sbuf b = {0};

		sbuf__puts(&b, "{");
		for (int i = 0; i < 65; i++)
			sbuf__printf(&b, "l%d=\"v\",", i);
		sbuf__puts(&b, "}");
		parse_bad(b.buf, "more than 64 matchers");
		sbuf__free(&b);
	}
	{
		char *big = malloc(SELECTOR_MAX_LEN + 10);

		memset(big, ' ', SELECTOR_MAX_LEN + 9);
		big[SELECTOR_MAX_LEN + 9] = '\0';
		parse_bad(big, "longer than");
		free(big);
	}
}

static void test_times(void **state)
{
	const int64_t now = 1795337821123LL;
	char err[256];
	int64_t v;

	assert_int_equal(parse_time_ms("now", TIME_MS, now, &v, err, sizeof(err)), 0);
	assert_int_equal(v, now);
	assert_int_equal(parse_time_ms("now-1h", TIME_MS, now, &v, err, sizeof(err)), 0);
	assert_int_equal(v, now - 3600000);
	assert_int_equal(parse_time_ms("now-15m", TIME_PYROSCOPE_S, now, &v, err, sizeof(err)), 0);
	assert_int_equal(v, now - 900000);
	assert_int_equal(parse_time_ms("1795337821000", TIME_MS, now, &v, err, sizeof(err)), 0);
	assert_int_equal(v, 1795337821000LL);
	/* Pyroscope: seconds, or ms when above 10^11. */
	assert_int_equal(parse_time_ms("1795337821", TIME_PYROSCOPE_S, now, &v, err, sizeof(err)),
			 0);
	assert_int_equal(v, 1795337821000LL);
	assert_int_equal(
		parse_time_ms("1795337821000", TIME_PYROSCOPE_S, now, &v, err, sizeof(err)), 0);
	assert_int_equal(v, 1795337821000LL);

	assert_int_equal(parse_time_ms("yesterday", TIME_MS, now, &v, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "yesterday"));
	assert_int_equal(parse_time_ms("-5", TIME_MS, now, &v, err, sizeof(err)), -EINVAL);
	assert_int_equal(parse_time_ms("now+1h", TIME_MS, now, &v, err, sizeof(err)), -EINVAL);
	assert_int_equal(parse_time_ms("now-", TIME_MS, now, &v, err, sizeof(err)), -EINVAL);
	assert_int_equal(parse_time_ms("now-100000w", TIME_MS, now, &v, err, sizeof(err)), -EINVAL);
	assert_int_equal(parse_time_ms("", TIME_MS, now, &v, err, sizeof(err)), -EINVAL);
	assert_int_equal(parse_time_ms("99999999999999999999", TIME_MS, now, &v, err, sizeof(err)),
			 -EINVAL);
	assert_int_equal(parse_time_ms("99999999999", TIME_PYROSCOPE_S, now, &v, err, sizeof(err)),
			 0);
	assert_int_equal(v, 99999999999000LL);
}

static void test_pyroscope_names(void **state)
{
	struct lset ls = {0};
	char err[256];

	assert_int_equal(pyroscope_name__parse("shares.cpu{env=prod, region = \"eu,west\" }", &ls,
					       err, sizeof(err)),
			 0);
	assert_string_equal(lset__get(&ls, "service_name"), "shares");
	assert_string_equal(lset__get(&ls, "type"), "cpu");
	assert_string_equal(lset__get(&ls, "env"), "prod");
	assert_string_equal(lset__get(&ls, "region"), "eu,west");
	assert_int_equal(ls.n, 4);
	lset__free(&ls);

	/* No type: the caller's default (cpu, or a pprof's sample type). */
	assert_int_equal(pyroscope_name__parse("myapp", &ls, err, sizeof(err)), 0);
	assert_string_equal(lset__get(&ls, "service_name"), "myapp");
	assert_null(lset__get(&ls, "type"));
	lset__free(&ls);

	/* The name's own app and type win over labels of those names. */
	assert_int_equal(pyroscope_name__parse("a.b.alloc_space{type=x,service_name=y,k=}", &ls,
					       err, sizeof(err)),
			 0);
	assert_string_equal(lset__get(&ls, "service_name"), "a.b");
	assert_string_equal(lset__get(&ls, "type"), "alloc_space");
	assert_null(lset__get(&ls, "k"));
	lset__free(&ls);

	/* Grafana's Pyroscope SDKs put OpenTelemetry-style tags in the name
	 * (@pyroscope/nodejs 0.6.4): taken with '_' for each dot. */
	assert_int_equal(
		pyroscope_name__parse("nodeapp{otel.scope.name=com.grafana.pyroscope/nodejs,"
				      "process.runtime.name=nodejs,env=check}",
				      &ls, err, sizeof(err)),
		0);
	assert_string_equal(lset__get(&ls, "service_name"), "nodeapp");
	assert_string_equal(lset__get(&ls, "otel_scope_name"), "com.grafana.pyroscope/nodejs");
	assert_string_equal(lset__get(&ls, "process_runtime_name"), "nodejs");
	assert_string_equal(lset__get(&ls, "env"), "check");
	lset__free(&ls);
	assert_int_equal(pyroscope_name__parse("app.cpu{a-b=c}", &ls, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "is not [A-Za-z_.][A-Za-z0-9_.]*"));
	lset__free(&ls);

	assert_int_equal(pyroscope_name__parse("", &ls, err, sizeof(err)), -EINVAL);
	assert_int_equal(pyroscope_name__parse(NULL, &ls, err, sizeof(err)), -EINVAL);
	assert_int_equal(pyroscope_name__parse("{a=b}", &ls, err, sizeof(err)), -EINVAL);
	lset__free(&ls);
	assert_int_equal(pyroscope_name__parse("app.{a=b}", &ls, err, sizeof(err)), -EINVAL);
	lset__free(&ls);
	assert_int_equal(pyroscope_name__parse("app.cpu{a=b", &ls, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "offset"));
	lset__free(&ls);
	assert_int_equal(pyroscope_name__parse("app.cpu{a b=c}", &ls, err, sizeof(err)), -EINVAL);
	lset__free(&ls);
	assert_int_equal(pyroscope_name__parse("app.cpu{novalue}", &ls, err, sizeof(err)), -EINVAL);
	lset__free(&ls);
	assert_int_equal(pyroscope_name__parse("app.cpu{a=b}x", &ls, err, sizeof(err)), -EINVAL);
	lset__free(&ls);
}

static void test_utf8(void **state)
{
	char *r;

	assert_true(utf8_valid("plain", 5));
	assert_true(utf8_valid("h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x94\xa5", 15));
	assert_false(utf8_valid("\xff", 1));
	assert_false(utf8_valid("\xc0\xaf", 2));	 /* overlong '/' */
	assert_false(utf8_valid("\xed\xa0\x80", 3));	 /* a surrogate */
	assert_false(utf8_valid("\xf4\x90\x80\x80", 4)); /* past U+10FFFF */
	assert_false(utf8_valid("\xe2\x82", 2));	 /* truncated */
	/* Cuts fall between characters: "h\xc3\xa9llo \xe2\x82\xac". */
	assert_int_equal(utf8_cut("h\xc3\xa9llo", 6, 10), 6);
	assert_int_equal(utf8_cut("h\xc3\xa9llo", 6, 2), 1);
	assert_int_equal(utf8_cut("h\xc3\xa9llo", 6, 3), 3);
	assert_int_equal(utf8_cut("ab\xe2\x82\xac", 5, 3), 2);
	assert_int_equal(utf8_cut("ab\xe2\x82\xac", 5, 4), 2);
	assert_int_equal(utf8_cut("ab\xf0\x9f\x94\xa5"
				  "c",
				  7, 5),
			 2);
	assert_int_equal(utf8_cut("\x80\x80\x80\x80\x80", 5, 4), 1); /* not UTF-8: 3 back at most */
	r = utf8_repair("a\xff"
			"b",
			3);
	assert_string_equal(r, "a\xef\xbf\xbd"
			       "b");
	free(r);
	{
		json_t *j = json_string_lossy("x\xfe");
		char *s = json_dumps(j, JSON_ENCODE_ANY);

		assert_string_equal(s, "\"x\xef\xbf\xbd\"");
		free(s);
		json_decref(j);
	}
}

static void test_label_limits(void **state)
{
	struct lset ls = {0};
	char err[256], big[2000];

	lset__set(&ls, "ok_name", "v");
	assert_int_equal(lset__check(&ls, err, sizeof(err)), 0);
	lset__set(&ls, "bad name", "v");
	assert_int_equal(lset__check(&ls, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "'bad name'"));
	lset__free(&ls);

	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	lset__set(&ls, "big", big);
	assert_int_equal(lset__check(&ls, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "'big'"));
	lset__free(&ls);

	lset__set(&ls, "bin", "\xff\xfe");
	assert_int_equal(lset__check(&ls, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "not UTF-8"));
	lset__free(&ls);

	for (int i = 0; i < 33; i++) {
		char n[16];

		snprintf(n, sizeof(n), "l%d", i);
		lset__set(&ls, n, "v");
	}
	assert_int_equal(lset__check(&ls, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "at most 32"));
	/* Setting a name again replaces its value. */
	lset__set(&ls, "l3", "w");
	assert_string_equal(lset__get(&ls, "l3"), "w");
	assert_int_equal(ls.n, 33);
	lset__free(&ls);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_selector_prometheus),
		cmocka_unit_test(test_selector_pyroscope),
		cmocka_unit_test(test_selector_errors),
		cmocka_unit_test(test_times),
		cmocka_unit_test(test_pyroscope_names),
		cmocka_unit_test(test_utf8),
		cmocka_unit_test(test_label_limits),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
