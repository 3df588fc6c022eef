/* test_alerts.c: unit tests of the alert engine (src/alerts/) --
 * the rule file loader on the documented grammar and on every kind of bad
 * file (line and reason), the expression subset on constructed series, the
 * pending/firing/resolved state machine under a fake clock (exact `for:`
 * boundary, one notification per transition, one instance per label set,
 * Alertmanager re-sends), templates and number formats, the default rules,
 * delivery failures being counted, and the engine's own /metrics families
 * (alert_engine__collect). */
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>
#include <jansson.h>

#include "common/clock.h"
#include "common/prom.h"
#include "alerts/alerts.h"
#include "alerts/alerts_internal.h"

/* ---- a scripted series source ---- */

#define MAX_SERIES 64
#define MAX_LABELS 16

struct fake_series {
	const char *name;
	const char *labels[MAX_LABELS + 1];
	double v;
};

struct fake {
	struct fake_series s[MAX_SERIES];
	size_t n;
};

/* Sets (or adds) series name{labels...} to v; labels as "k", "v", ..., NULL. */
static void fake_set(struct fake *f, const char *name, double v, ...)
{
	const char *labels[MAX_LABELS + 1] = {0};
	va_list ap;
	size_t n = 0, i;

	va_start(ap, v);
	while (n < MAX_LABELS && (labels[n] = va_arg(ap, const char *)))
		n++;
	va_end(ap);
	for (i = 0; i < f->n; i++) {
		size_t k = 0;

		if (strcmp(f->s[i].name, name))
			continue;
		while (k <= n &&
		       ((!labels[k] && !f->s[i].labels[k]) ||
			(labels[k] && f->s[i].labels[k] && !strcmp(labels[k], f->s[i].labels[k]))))
			k++;
		if (k > n)
			break;
	}
	if (i == f->n) {
		assert_true(f->n < MAX_SERIES);
		f->n++;
		f->s[i].name = name;
		memcpy(f->s[i].labels, labels, sizeof(labels));
	}
	f->s[i].v = v;
}

static void fake_clear(struct fake *f)
{
	f->n = 0;
}

static void fake_each(void *src, series_fn fn, void *ctx)
{
	struct fake *f = src;

	for (size_t i = 0; i < f->n; i++)
		fn(ctx, f->s[i].name, f->s[i].labels, f->s[i].v);
}

/* ---- notifications caught by a callback sink and the post hook ---- */

struct caught {
	json_t *notes; /* array of the callback's notifications */
	json_t *am;    /* array of Alertmanager bodies (each an array) */
	json_t *hooks; /* array of webhook bodies */
};

static void catch_note(void *ctx, json_t *n)
{
	struct caught *c = ctx;

	json_array_append(c->notes, n);
}

static void catch_post(void *ctx, enum alert_sink_kind kind, const char *url, const char *body)
{
	struct caught *c = ctx;
	json_t *j = json_loads(body, 0, NULL);

	assert_non_null(j);
	json_array_append_new(kind == ALERT_SINK_ALERTMANAGER ? c->am : c->hooks, j);
}

static struct alert_engine *engine(const char *yaml, struct caught *c)
{
	char err[512] = "";
	struct alert_engine *e = alert_engine__load_string(yaml, "test.yml", err, sizeof(err));

	if (!e)
		fail_msg("load failed: %s", err);
	alert_engine__set_external_label(e, "node", NULL);
	if (c) {
		c->notes = json_array();
		c->am = json_array();
		c->hooks = json_array();
		alert_engine__set_post_hook(e, catch_post, c);
		assert_int_equal(alert_engine__add_callback(e, catch_note, c), 0);
	}
	return e;
}

static void caught_free(struct caught *c)
{
	json_decref(c->notes);
	json_decref(c->am);
	json_decref(c->hooks);
}

static const char *note_status(struct caught *c, size_t i)
{
	return json_string_value(json_object_get(json_array_get(c->notes, i), "status"));
}

static const char *note_label(struct caught *c, size_t i, const char *k)
{
	json_t *labels = json_object_get(json_array_get(c->notes, i), "labels");

	return json_string_value(json_object_get(labels, k));
}

/* ---- loading ---- */

static const char *const full_file =
	"# every documented key\n"
	"rules:\n"
	"  - alert: HighMem\n"
	"    expr: sonde_gpu_memory_used_ratio{gpu_id=~\"0|1\", pid!=\"1\"} > 0.9\n"
	"    for: 1m30s\n"
	"    keep_firing_for: 10s\n"
	"    labels:\n"
	"      team: ml\n"
	"      gpu: \"{{ $labels.gpu_id }}\"\n"
	"    severity: page\n"
	"    summary: 'pid {{ $labels.pid }} at {{ $value | humanizePercentage }}'\n"
	"    description: |\n"
	"      long text\n"
	"    annotations:\n"
	"      runbook_url: https://example.com/{{ .Labels.pid }}\n"
	"  - alert: Ratio\n"
	"    expr: |\n"
	"      max by (gpu_id) (a) / on(gpu_id) group_left(source) b > 0.5\n"
	"  - alert: Simple\n"
	"    expr: 'x{a=\"1\"} != 0'\n"
	"    for: 0\n"
	"    summary: \"{{pid}} {{value}}\"\n";

static void test_load_full(void **state)
{
	struct alert_engine *e = engine(full_file, NULL);
	json_t *rules = alert_engine__rules(e), *r;

	assert_int_equal(json_array_size(rules), 3);
	r = json_array_get(rules, 0);
	assert_string_equal(json_string_value(json_object_get(r, "alert")), "HighMem");
	assert_string_equal(json_string_value(json_object_get(r, "for")), "1m30s");
	assert_string_equal(json_string_value(json_object_get(r, "keep_firing_for")), "10s");
	assert_int_equal(json_integer_value(json_object_get(r, "line")), 3);
	assert_string_equal(
		json_string_value(json_object_get(json_object_get(r, "labels"), "severity")),
		"page");
	assert_string_equal(
		json_string_value(json_object_get(json_object_get(r, "labels"), "team")), "ml");
	assert_string_equal(json_string_value(json_object_get(json_object_get(r, "annotations"),
							      "description")),
			    "long text\n");
	assert_non_null(json_object_get(json_object_get(r, "annotations"), "runbook_url"));
	r = json_array_get(rules, 2);
	assert_string_equal(json_string_value(json_object_get(r, "for")), "0s");
	assert_string_equal(json_string_value(json_object_get(r, "health")), "ok");
	json_decref(rules);
	alert_engine__free(e);
}

static void test_load_groups(void **state)
{
	/* A Prometheus rule file loads as it is. */
	struct alert_engine *e = engine("groups:\n"
					"  - name: gpu\n"
					"    interval: 15s\n"
					"    rules:\n"
					"      - alert: A\n"
					"        expr: x > 1\n"
					"  - name: other\n"
					"    rules:\n"
					"      - alert: B\n"
					"        expr: y < 1\n"
					"        annotations: {summary: hi}\n",
					NULL);
	json_t *rules = alert_engine__rules(e);

	assert_int_equal(json_array_size(rules), 2);
	assert_string_equal(json_string_value(json_object_get(json_array_get(rules, 1), "alert")),
			    "B");
	json_decref(rules);
	alert_engine__free(e);

	e = engine("rules: []\n", NULL);
	rules = alert_engine__rules(e);
	assert_int_equal(json_array_size(rules), 0);
	json_decref(rules);
	alert_engine__free(e);
}

struct bad_case {
	const char *yaml;
	const char *want; /* the message starts "test.yml:" then this */
};

static const struct bad_case bad_cases[] = {
	{"", "1: the file is empty"},
	{"# only a comment\n", "1: the file is empty"},
	{"- alert: A\n  expr: x > 1\n",
	 "1: the top level must be a mapping with a `rules:` list, not a list"},
	{"just text\n", "1: the top level must be a mapping"},
	{"rule:\n  - alert: A\n",
	 "1: unknown key `rule` in the top level -- did you mean `rules`?"},
	{"alerts:\n  - alert: A\n",
	 "1: unknown key `alerts` in the top level (known: rules, groups)"},
	{"version: 2\nrules: []\n",
	 "1: unknown key `version` in the top level (known: rules, groups)"},
	{"other: 1\n", "1: unknown key `other`"},
	{"rules:\n  alert: A\n", "2: `rules` must be a list of rules, not a mapping"},
	{"rules:\n  - just a string\n", "2: a rule must be a mapping"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    sumary: hi\n",
	 "4: unknown key `sumary` in a rule -- did you mean `summary`?"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    colour: red\n",
	 "4: unknown key `colour` in a rule (known: alert, expr, for"},
	{"rules:\n  - alert: A\n    for: 5m\n", "2: rule `A` has no `expr:`"},
	{"rules:\n  - expr: x > 1\n", "2: rule has no `alert:`"},
	{"rules:\n  - alert: A\n    expr: x > 1\n  - alert: B\n", "4: rule `B` has no `expr:`"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    for: 5x\n",
	 "4: bad duration `5x` in `for`: use seconds or a number and a unit"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    for: 30 s\n",
	 "4: bad duration `30 s` in `for`"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    for: 5m1h\n", "4: bad duration `5m1h`"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    for: -5s\n", "4: bad duration `-5s`"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    for: [1]\n",
	 "4: `for` must be a string, not a list"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    keep_firing_for: soon\n",
	 "4: bad duration `soon` in `keep_firing_for`"},
	{"rules:\n  - alert: A\n    expr: x >\n", "3:14: bad expression: unexpected end of the "
						  "expression: expected a metric, a number or `(`"},
	{"rules:\n  - alert: A\n    expr: x > > 1\n", "3:15: bad expression: unexpected `>`"},
	{"rules:\n  - alert: A\n    expr: 'x{a=\"b\" > 1'\n",
	 "3:20: bad expression: unexpected `>`: "
	 "expected `,` or `}`"},
	{"rules:\n  - alert: A\n    expr: \"rate(x[5m]) > 1\"\n",
	 "3:12: bad expression: function `rate` is not supported"},
	{"rules:\n  - alert: A\n    expr: x[5m] > 1\n",
	 "3:12: bad expression: range selectors (`[5m]`) are not supported"},
	{"rules:\n  - alert: A\n    expr: |\n      x > 1 and\n      y > 2\n",
	 "4:13: bad expression: `and` is not supported"},
	{"rules:\n  - alert: A\n    expr: x{a=~\"(\"} > 1\n",
	 "3:16: bad expression: bad regular expression"},
	{"rules:\n  - alert: A\n    expr: 1 > 2\n",
	 "3:13: bad expression: comparison of two numbers: one side must be a metric"},
	{"rules:\n  - alert: A\n    expr: 42\n",
	 "3:11: bad expression: the expression is a number"},
	{"rules:\n  - alert: A\n    expr: x > 5m\n", "3:15: bad expression: bad number `5m`"},
	{"rules:\n  - alert: A\n    expr: x{a=\"1\"} = 1\n",
	 "3:20: bad expression: unexpected `=`"},
	{"rules:\n  - alert: A\n    expr: (x > 1\n", "3:11: bad expression: unclosed `(`"},
	{"rules:\n  - alert: A\n    expr: x > 1 bool\n", "3:17: bad expression: unexpected `bool`"},
	{"rules:\n  - alert: A\n    expr: x > bool 1\n",
	 "3:15: bad expression: `bool` is not supported"},
	{"rules:\n  - alert: A\n    expr: x / on(a) 2\n",
	 "3:13: bad expression: on()/ignoring() apply between two sets of series"},
	{"rules:\n  - alert: A\n    expr:\n", "3: `expr:` is empty"},
	{"rules:\n  - alert: A\n    expr: ''\n", "3:12: bad expression: empty expression"},
	{"rules:\n  - alert: A\n    expr: {a: 1}\n", "3: `expr` must be a string, not a mapping"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    expr: y > 1\n",
	 "4: `expr` appears twice in a rule"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    labels: [a, b]\n",
	 "4: `labels` must be a mapping of label names to values, not a list"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    labels:\n      bad-name: x\n",
	 "5: `bad-name` is not a valid label name"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    labels:\n      alertname: x\n",
	 "5: label `alertname` comes from `alert:`"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    labels:\n      sub:\n        deep: 1\n",
	 "6: `sub` must be a string, not a mapping"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    severity: page\n    labels:\n      severity: "
	 "low\n",
	 "4: `severity` is given twice"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    summary: a\n    annotations:\n      summary: "
	 "b\n",
	 "4: `summary` is given twice"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    summary: '{{ $labels.pid | humanise }}'\n",
	 "4: bad template in annotation `summary`: unknown function `humanise`"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    summary: 'pid {{ $labels.pid'\n",
	 "4: bad template in annotation `summary`: unclosed `{{`"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    summary: '{{ if $value }}x{{ end }}'\n",
	 "4: bad template in annotation `summary`: `if` is not supported"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    summary: '{{ printf \"%d %d\" $value }}'\n",
	 "4: bad template in annotation `summary`: printf: the format has 2 conversion(s) for 1"},
	{"rules:\n  - alert: A\n    expr: x > 1\n    summary: '{{ $lables.pid }}'\n",
	 "4: bad template in annotation `summary`: unknown `$lables.pid`"},
	{"rules:\n  - alert: GPU OOM\n    expr: x > 1\n", "2: bad alert name `GPU OOM`"},
	{"rules:\n  - alert: [A]\n    expr: x > 1\n", "2: `alert` must be a string, not a list"},
	{"rules:\n  - record: x:sum\n    expr: sum(x)\n",
	 "2: recording rules (`record:`) are not supported"},
	{"rules:\n\t- alert: A\n", "2: tab in the indentation: YAML indents with spaces"},
	{"rules:\n  - alert: A\n\t  expr: x > 1\n", "3: tab in the indentation"},
	{"rules:\n  - alert: \"A\n", "3: YAML syntax error: found unexpected end of stream"},
	{"rules:\n  - alert: A\n    expr: x > 1\n  wrong: indent\n", "4: YAML syntax error"},
	{"rules:\n  - alert: A\n    expr: x > 1\n---\nrules: []\n", "4: a second YAML document"},
	{"groups:\n  - rules:\n      - alert: A\n        expr: x > 1\n", "2: group has no `name:`"},
	{"groups:\n  - name: g\n", "2: group has no `rules:`"},
	{"groups:\n  - name: g\n    rules: []\n    labels: {}\n",
	 "4: unknown key `labels` in a group"},
	{"groups: {}\n", "1: `groups` must be a list, not a mapping"},
};

static void test_load_bad(void **state)
{
	for (size_t i = 0; i < sizeof(bad_cases) / sizeof(bad_cases[0]); i++) {
		char err[512] = "", want[512];
		struct alert_engine *e =
			alert_engine__load_string(bad_cases[i].yaml, "test.yml", err, sizeof(err));

		snprintf(want, sizeof(want), "test.yml:%s", bad_cases[i].want);
		if (e || strncmp(err, want, strlen(want)))
			fail_msg("case %zu (%s):\n  got  %s\n  want %s...", i, bad_cases[i].yaml,
				 e ? "(loaded)" : err, want);
		assert_int_equal(errno, EINVAL);
	}
}

static void test_load_file(void **state)
{
	char path[] = "/tmp/sonde-test-alerts-XXXXXX", err[512];
	int fd = mkstemp(path);
	struct alert_engine *e;

	assert_true(fd >= 0);
	assert_int_equal(write(fd, "rules:\n  - alert: A\n    expr: x >> 1\n", 36), 36);
	close(fd);
	e = alert_engine__load(path, err, sizeof(err));
	assert_null(e);
	assert_true(!strncmp(err, path, strlen(path)));
	assert_non_null(strstr(err, ":3:14: bad expression: unexpected `>`"));
	unlink(path);
	e = alert_engine__load(path, err, sizeof(err));
	assert_null(e);
	assert_int_equal(errno, ENOENT);
	assert_non_null(strstr(err, "can't read the rule file: No such file or directory"));
	e = alert_engine__load("/tmp", err, sizeof(err));
	assert_null(e);
	assert_non_null(strstr(err, "not a regular file"));
}

/* ---- expressions ---- */

/* Evaluates src over f; returns the result as "labels=value" lines, sorted. */
static char *eval_str(struct fake *f, const char *src, int want_err)
{
	char err[256] = "", *out = NULL;
	size_t outlen = 0;
	int pos;
	struct alert_expr *x = alert_expr__parse(src, err, sizeof(err), &pos);
	struct alert_snapshot snap = {0};
	struct alert_vector v = {0};
	char lines[64][256];
	size_t n = 0;
	FILE *m;
	int rc;

	if (!x)
		fail_msg("parse of `%s` failed at %d: %s", src, pos, err);
	for (size_t i = 0; i < f->n; i++)
		alert_snapshot__want(&snap, f->s[i].name);
	alert_snapshot__collect(&snap, fake_each, f);
	rc = alert_expr__eval(x, &snap, &v, err, sizeof(err));
	if (want_err) {
		assert_int_equal(rc, -EINVAL);
		out = strdup(err);
		goto cleanup;
	}
	if (rc)
		fail_msg("eval of `%s` failed: %s", src, err);
	for (size_t i = 0; i < v.n && n < 64; i++, n++) {
		size_t o = 0;
		char val[40];

		for (size_t k = 0; k < v.s[i].l.n; k++)
			o += snprintf(lines[n] + o, sizeof(lines[n]) - o, "%s%s=%s", k ? "," : "",
				      v.s[i].l.kv[2 * k], v.s[i].l.kv[2 * k + 1]);
		alert_format_value(val, sizeof(val), v.s[i].v);
		snprintf(lines[n] + o, sizeof(lines[n]) - o, " %s", val);
	}
	qsort(lines, n, sizeof(lines[0]), (int (*)(const void *, const void *))strcmp);
	m = open_memstream(&out, &outlen);
	for (size_t i = 0; i < n; i++)
		fprintf(m, "%s%s", i ? "; " : "", lines[i]);
	fclose(m);
cleanup:
	alert_vector__free(&v);
	alert_snapshot__free(&snap);
	alert_expr__free(x);
	return out;
}

#define ASSERT_EVAL(f, src, want)                                                                  \
	do {                                                                                       \
		char *got_ = eval_str(f, src, 0);                                                  \
		if (strcmp(got_, want))                                                            \
			fail_msg("`%s`:\n  got  %s\n  want %s", src, got_, want);                  \
		free(got_);                                                                        \
	} while (0)

static void test_expr_selectors(void **state)
{
	struct fake f = {0};

	fake_set(&f, "mem", 0.5, "pid", "1", "gpu_id", "0", NULL);
	fake_set(&f, "mem", 0.97, "pid", "2", "gpu_id", "0", NULL);
	fake_set(&f, "mem", 0.99, "pid", "3", "gpu_id", "1", NULL);
	fake_set(&f, "mem", 0.2, "pid", "4", NULL);
	fake_set(&f, "other", 7, "pid", "1", NULL);

	ASSERT_EVAL(&f, "mem",
		    "gpu_id=0,pid=1 0.5; gpu_id=0,pid=2 0.97; gpu_id=1,pid=3 0.99; pid=4 0.2");
	ASSERT_EVAL(&f, "mem{gpu_id=\"0\"}", "gpu_id=0,pid=1 0.5; gpu_id=0,pid=2 0.97");
	ASSERT_EVAL(&f, "mem{gpu_id!=\"0\"}", "gpu_id=1,pid=3 0.99; pid=4 0.2");
	/* A missing label equals "". */
	ASSERT_EVAL(&f, "mem{gpu_id=\"\"}", "pid=4 0.2");
	/* Regular expressions are anchored at both ends. */
	ASSERT_EVAL(&f, "mem{pid=~\"1|3\"}", "gpu_id=0,pid=1 0.5; gpu_id=1,pid=3 0.99");
	ASSERT_EVAL(&f, "mem{pid=~\"1\", gpu_id=~'.*'}", "gpu_id=0,pid=1 0.5");
	ASSERT_EVAL(&f, "mem{pid!~\"[12]\",}", "gpu_id=1,pid=3 0.99; pid=4 0.2");
	ASSERT_EVAL(&f, "mem{gpu_id=~\"\"}", "pid=4 0.2");
	ASSERT_EVAL(&f, "missing", "");
	ASSERT_EVAL(&f, "mem > 0.95", "gpu_id=0,pid=2 0.97; gpu_id=1,pid=3 0.99");
	ASSERT_EVAL(&f, "mem >= 0.97", "gpu_id=0,pid=2 0.97; gpu_id=1,pid=3 0.99");
	ASSERT_EVAL(&f, "mem < 0.5", "pid=4 0.2");
	ASSERT_EVAL(&f, "mem <= 0.5", "gpu_id=0,pid=1 0.5; pid=4 0.2");
	ASSERT_EVAL(&f, "mem == 0.5", "gpu_id=0,pid=1 0.5");
	ASSERT_EVAL(&f, "mem != 0.5", "gpu_id=0,pid=2 0.97; gpu_id=1,pid=3 0.99; pid=4 0.2");
	/* A number on the left keeps the series' values. */
	ASSERT_EVAL(&f, "0.9 < mem", "gpu_id=0,pid=2 0.97; gpu_id=1,pid=3 0.99");
	ASSERT_EVAL(&f, "mem * 100 > 95", "gpu_id=0,pid=2 97; gpu_id=1,pid=3 99");
	ASSERT_EVAL(&f, "100 * mem - 90 > 8", "gpu_id=1,pid=3 9");
	ASSERT_EVAL(&f, "other / 2 + 1", "pid=1 4.5");
	ASSERT_EVAL(&f, "-other", "pid=1 -7");
	ASSERT_EVAL(&f, "other > 2 * 3 + 0.5", "pid=1 7");
	ASSERT_EVAL(&f, "other > -(2 - 10)", "");
	ASSERT_EVAL(&f, "other > 1e0", "pid=1 7");
	ASSERT_EVAL(&f, "other < Inf", "pid=1 7");
	ASSERT_EVAL(&f, "(other)", "pid=1 7");
}

static void test_expr_matching(void **state)
{
	struct fake f = {0};
	char *err;

	fake_set(&f, "used", 90, "pid", "1", "gpu_id", "0", NULL);
	fake_set(&f, "used", 30, "pid", "2", "gpu_id", "0", NULL);
	fake_set(&f, "used", 50, "pid", "3", "gpu_id", "1", NULL);
	fake_set(&f, "total", 100, "pid", "1", "gpu_id", "0", NULL);
	fake_set(&f, "total", 100, "pid", "2", "gpu_id", "0", NULL);
	fake_set(&f, "total", 0, "pid", "3", "gpu_id", "1", NULL);
	fake_set(&f, "cap", 100, "gpu_id", "0", "source", "nvml", NULL);
	fake_set(&f, "cap", 200, "gpu_id", "1", "source", "app", NULL);
	fake_set(&f, "dev", 10, "gpu_id", "0", "kind", "x", NULL);
	fake_set(&f, "dev", 20, "gpu_id", "0", "kind", "y", NULL);

	/* One-to-one on identical label sets; x/0 is +Inf as in PromQL. */
	ASSERT_EVAL(&f, "used / total",
		    "gpu_id=0,pid=1 0.9; gpu_id=0,pid=2 0.3; gpu_id=1,pid=3 +Inf");
	ASSERT_EVAL(&f, "used / total > 0.5", "gpu_id=0,pid=1 0.9; gpu_id=1,pid=3 +Inf");
	/* Comparison between series keeps the left value. */
	ASSERT_EVAL(&f, "used > total", "gpu_id=1,pid=3 50");
	/* No partner, no result. */
	ASSERT_EVAL(&f, "used / cap", "");
	/* on() keeps only the listed labels. */
	ASSERT_EVAL(&f, "used{pid=\"1\"} / on(pid, gpu_id) total", "gpu_id=0,pid=1 0.9");
	ASSERT_EVAL(&f, "sum by (gpu_id) (used) / on(gpu_id) cap", "gpu_id=0 1.2; gpu_id=1 0.25");
	ASSERT_EVAL(&f, "sum by (gpu_id) (used) / ignoring(source) cap",
		    "gpu_id=0 1.2; gpu_id=1 0.25");
	/* Many-to-one: every process over its device's capacity. */
	ASSERT_EVAL(&f, "used / on(gpu_id) group_left cap > 0.2",
		    "gpu_id=0,pid=1 0.9; gpu_id=0,pid=2 0.3; gpu_id=1,pid=3 0.25");
	ASSERT_EVAL(&f, "used / on(gpu_id) group_left(source) cap",
		    "gpu_id=0,pid=1,source=nvml 0.9; gpu_id=0,pid=2,source=nvml 0.3; "
		    "gpu_id=1,pid=3,source=app 0.25");
	ASSERT_EVAL(&f, "cap / on(gpu_id) group_right used",
		    "gpu_id=0,pid=1 1.1111111111111112; gpu_id=0,pid=2 3.3333333333333335; "
		    "gpu_id=1,pid=3 4");
	/* Many-to-many is an error, as in Prometheus. */
	err = eval_str(&f, "used / on(gpu_id) cap", 1);
	assert_non_null(strstr(err, "more than one series on the left side match {gpu_id=\"0\"}"));
	free(err);
	err = eval_str(&f, "cap / on(gpu_id) dev", 1);
	assert_non_null(strstr(err,
			       "many-to-many matching: more than one series for {gpu_id=\"0\"} "
			       "on the right side"));
	free(err);
	err = eval_str(&f, "used / on(gpu_id) group_left(kind) dev", 1);
	assert_non_null(strstr(err, "many-to-many"));
	free(err);
}

static void test_expr_aggregations(void **state)
{
	struct fake f = {0};

	fake_set(&f, "m", 1, "pid", "1", "gpu_id", "0", NULL);
	fake_set(&f, "m", 4, "pid", "2", "gpu_id", "0", NULL);
	fake_set(&f, "m", 10, "pid", "3", "gpu_id", "1", NULL);
	fake_set(&f, "m", NAN, "pid", "4", "gpu_id", "1", NULL);

	ASSERT_EVAL(&f, "sum by (gpu_id) (m{pid!=\"4\"})", "gpu_id=0 5; gpu_id=1 10");
	ASSERT_EVAL(&f, "sum(m{pid!=\"4\"}) by (gpu_id)", "gpu_id=0 5; gpu_id=1 10");
	ASSERT_EVAL(&f, "max by (gpu_id) (m)", "gpu_id=0 4; gpu_id=1 10");
	ASSERT_EVAL(&f, "min by (gpu_id) (m)", "gpu_id=0 1; gpu_id=1 10");
	ASSERT_EVAL(&f, "avg by (gpu_id) (m{pid!=\"4\"})", "gpu_id=0 2.5; gpu_id=1 10");
	ASSERT_EVAL(&f, "count by (gpu_id) (m)", "gpu_id=0 2; gpu_id=1 2");
	ASSERT_EVAL(&f, "count(m)", " 4");
	ASSERT_EVAL(&f, "sum without (pid) (m{pid!=\"4\"})", "gpu_id=0 5; gpu_id=1 10");
	ASSERT_EVAL(&f, "sum by (nope) (m{pid!=\"4\"})", " 15");
	ASSERT_EVAL(&f, "max by (gpu_id) (m) > 5", "gpu_id=1 10");
	ASSERT_EVAL(&f, "sum by (gpu_id) (m > 2)", "gpu_id=0 4; gpu_id=1 10");
	/* NaN never compares true. */
	ASSERT_EVAL(&f, "m{pid=\"4\"} > 0 ", "");
	ASSERT_EVAL(&f, "m{pid=\"4\"} != 0 ", "gpu_id=1,pid=4 NaN");
}

static void test_expr_parse_errors(void **state)
{
	static const struct {
		const char *src;
		int pos;
		const char *msg;
	} bad[] = {
		{"", 0, "empty expression"},
		{"x >", 3, "unexpected end of the expression"},
		{"x > y >", 7, "unexpected end"},
		{"sum by (a) x", 11, "unexpected `x`: expected `(`"},
		{"sum(x, 1)", 5, "aggregations with a parameter"},
		{"sum by (a) (x) by (b)", 15, "one `by` or `without` clause"},
		{"sum(1)", 4, "sum() needs series"},
		{"topk(3, x)", 0, "function `topk` is not supported"},
		{"{a=\"1\"}", 0, "a selector needs a metric name"},
		{"x{a==\"1\"}", 3, "use `=`"},
		{"x{a=1}", 4, "expected a quoted label value"},
		{"x{\"a\"=\"1\"}", 2, "expected a label name"},
		{"x{a=\"1\\q\"}", 6, "unknown escape"},
		{"x{a=\"1}", 4, "unterminated string"},
		{"x @ 1", 2, "unexpected character `@`"},
		{"x / on(a) group_left(b c) y", 23, "expected `,` or `)`"},
		{"x > 1 or y > 1", 6, "`or` is not supported"},
		{"x offset 5m", 2, "unexpected `offset`"},
		{"x % 2", 2, "unexpected character `%`"},
		{"1 + 2", 0, "the expression is a number"},
		{"x > 5m", 4, "bad number `5m`"},
		{"-(1)", 0, "the expression is a number"},
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char err[256] = "";
		int pos = -1;
		struct alert_expr *x = alert_expr__parse(bad[i].src, err, sizeof(err), &pos);

		if (x || pos != bad[i].pos || !strstr(err, bad[i].msg))
			fail_msg("`%s`: got pos %d \"%s\", want pos %d \"%s\"", bad[i].src, pos,
				 x ? "(parsed)" : err, bad[i].pos, bad[i].msg);
	}
}

/* ---- state machine ---- */

#define T0 1700000000000ULL

static void test_for_boundary(void **state)
{
	struct caught c;
	struct alert_engine *e = engine("rules:\n"
					"  - alert: Hot\n"
					"    expr: temp > 80\n"
					"    for: 30s\n"
					"    summary: 'gpu {{ $labels.gpu_id }} at {{ $value }}'\n",
					&c);
	struct fake f = {0};
	struct alert_engine_stats st;
	json_t *list;

	fake_set(&f, "temp", 90, "gpu_id", "0", NULL);
	/* Condition true from t=0 on; ticks every second. */
	for (int t = 0; t <= 29; t++) {
		alert_engine__eval(e, T0 + t * 1000, fake_each, &f);
		if (json_array_size(c.notes))
			fail_msg("notified at t=%ds, before `for: 30s` had held", t);
	}
	list = alert_engine__list(e);
	assert_int_equal(json_array_size(list), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "state")),
			    "pending");
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "activeAt")),
			    "2023-11-14T22:13:20.000Z");
	json_decref(list);
	alert_engine__eval(e, T0 + 30000, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 1);
	assert_string_equal(note_status(&c, 0), "firing");
	/* Many more ticks with the condition still true: no new notification. */
	for (int t = 31; t < 200; t++)
		alert_engine__eval(e, T0 + t * 1000, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 1);
	alert_engine__stats(e, &st);
	assert_int_equal(st.firing, 1);
	assert_int_equal(st.pending, 0);
	assert_int_equal(st.evals, 200);
	list = alert_engine__list(e);
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "state")),
			    "firing");
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "summary")),
			    "gpu 0 at 90");
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "firedAt")),
			    "2023-11-14T22:13:50.000Z");
	json_decref(list);

	/* Condition stops: one resolved notification, then silence. */
	fake_set(&f, "temp", 70, "gpu_id", "0", NULL);
	for (int t = 200; t < 300; t++)
		alert_engine__eval(e, T0 + t * 1000, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 2);
	assert_string_equal(note_status(&c, 1), "resolved");
	assert_string_equal(
		json_string_value(json_object_get(json_array_get(c.notes, 1), "endsAt")),
		"2023-11-14T22:16:40.000Z");
	assert_string_equal(
		json_string_value(json_object_get(json_array_get(c.notes, 1), "startsAt")),
		"2023-11-14T22:13:50.000Z");
	list = alert_engine__list(e);
	assert_int_equal(json_array_size(list), 0);
	json_decref(list);

	/* A flap shorter than `for:` never notifies. */
	fake_set(&f, "temp", 95, "gpu_id", "0", NULL);
	for (int t = 300; t < 329; t++)
		alert_engine__eval(e, T0 + t * 1000, fake_each, &f);
	fake_clear(&f);
	for (int t = 329; t < 400; t++)
		alert_engine__eval(e, T0 + t * 1000, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 2);
	/* And holding again fires a new alert with a new startsAt. */
	fake_set(&f, "temp", 95, "gpu_id", "0", NULL);
	for (int t = 400; t <= 430; t++)
		alert_engine__eval(e, T0 + t * 1000, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 3);
	assert_string_equal(note_status(&c, 2), "firing");
	assert_string_equal(
		json_string_value(json_object_get(json_array_get(c.notes, 2), "startsAt")),
		"2023-11-14T22:20:30.000Z");
	alert_engine__free(e);
	caught_free(&c);
}

static void test_for_zero_and_instances(void **state)
{
	struct caught c;
	struct alert_engine *e = engine("rules:\n"
					"  - alert: Stuck\n"
					"    expr: stuck > 2\n"
					"    labels: {severity: critical}\n",
					&c);
	struct fake f = {0};
	size_t firing = 0, resolved = 0;

	fake_set(&f, "stuck", 1, "rank", "0", NULL);
	alert_engine__eval(e, T0, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 0);
	/* for: 0 fires on the first evaluation that sees the condition. */
	fake_set(&f, "stuck", 3, "rank", "0", NULL);
	alert_engine__eval(e, T0 + 1000, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 1);
	assert_string_equal(note_label(&c, 0, "rank"), "0");
	assert_string_equal(note_label(&c, 0, "alertname"), "Stuck");
	assert_string_equal(note_label(&c, 0, "severity"), "critical");
	/* A second label set is a second alert; the first isn't re-notified. */
	fake_set(&f, "stuck", 5, "rank", "1", NULL);
	fake_set(&f, "stuck", 4, "rank", "0", NULL);
	alert_engine__eval(e, T0 + 2000, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 2);
	assert_string_equal(note_label(&c, 1, "rank"), "1");
	/* Rank 0 recovers: only it resolves. */
	fake_set(&f, "stuck", 0, "rank", "0", NULL);
	for (int t = 3; t < 50; t++)
		alert_engine__eval(e, T0 + t * 1000, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 3);
	assert_string_equal(note_status(&c, 2), "resolved");
	assert_string_equal(note_label(&c, 2, "rank"), "0");
	/* The series disappears (the process exited): rank 1 resolves. */
	fake_clear(&f);
	for (int t = 50; t < 100; t++)
		alert_engine__eval(e, T0 + t * 1000, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 4);
	assert_string_equal(note_label(&c, 3, "rank"), "1");
	for (size_t i = 0; i < json_array_size(c.notes); i++) {
		firing += !strcmp(note_status(&c, i), "firing");
		resolved += !strcmp(note_status(&c, i), "resolved");
	}
	assert_int_equal(firing, 2);
	assert_int_equal(resolved, 2);
	alert_engine__free(e);
	caught_free(&c);
}

static void test_keep_firing_for(void **state)
{
	struct caught c;
	struct alert_engine *e = engine("rules:\n"
					"  - alert: Flappy\n"
					"    expr: x > 1\n"
					"    keep_firing_for: 10s\n",
					&c);
	struct fake f = {0};

	fake_set(&f, "x", 5, NULL);
	alert_engine__eval(e, T0, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 1);
	fake_clear(&f);
	for (int t = 1; t <= 9; t++)
		alert_engine__eval(e, T0 + t * 1000, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 1);
	/* Back within keep_firing_for: still the same alert. */
	fake_set(&f, "x", 5, NULL);
	alert_engine__eval(e, T0 + 9500, fake_each, &f);
	fake_clear(&f);
	for (int t = 10; t <= 19; t++)
		alert_engine__eval(e, T0 + t * 1000, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 1);
	alert_engine__eval(e, T0 + 19500, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 2);
	assert_string_equal(note_status(&c, 1), "resolved");
	alert_engine__free(e);
	caught_free(&c);
}

static void test_alertmanager_resend(void **state)
{
	struct caught c;
	struct alert_engine *e =
		engine("rules:\n"
		       "  - alert: Stuck\n"
		       "    expr: stuck > 2\n"
		       "    for: 2s\n"
		       "    summary: '{{ $labels.op }} on rank {{ $labels.rank }}'\n",
		       &c);
	struct alert_delivery d = {.resend_ms = 10000};
	struct fake f = {0};
	json_t *a;

	alert_engine__set_delivery(e, &d);
	assert_int_equal(alert_engine__add_alertmanager(e, "http://127.0.0.1:9093/"), 0);
	assert_int_equal(alert_engine__add_webhook(e, "http://127.0.0.1:9999/hook"), 0);
	alert_engine__set_generator_url(e, "http://node1:9091/alerts");
	fake_set(&f, "stuck", 5, "op", "allreduce", "rank", "3", NULL);
	/* Pending alerts are not sent. */
	alert_engine__eval(e, T0, fake_each, &f);
	alert_engine__eval(e, T0 + 1000, fake_each, &f);
	assert_int_equal(json_array_size(c.am), 0);
	alert_engine__eval(e, T0 + 2000, fake_each, &f);
	assert_int_equal(json_array_size(c.am), 1);
	a = json_array_get(json_array_get(c.am, 0), 0);
	assert_string_equal(
		json_string_value(json_object_get(json_object_get(a, "labels"), "alertname")),
		"Stuck");
	assert_string_equal(
		json_string_value(json_object_get(json_object_get(a, "annotations"), "summary")),
		"allreduce on rank 3");
	assert_string_equal(json_string_value(json_object_get(a, "startsAt")),
			    "2023-11-14T22:13:22.000Z");
	/* Valid for four resend intervals, so AM resolves it if we die. */
	assert_string_equal(json_string_value(json_object_get(a, "endsAt")),
			    "2023-11-14T22:14:02.000Z");
	assert_string_equal(json_string_value(json_object_get(a, "generatorURL")),
			    "http://node1:9091/alerts");
	/* Re-sent every 10 s, same startsAt; the webhook got one POST. */
	for (int t = 3; t <= 35; t++)
		alert_engine__eval(e, T0 + t * 1000, fake_each, &f);
	assert_int_equal(json_array_size(c.am), 4); /* t=2, 12, 22, 32 */
	for (size_t i = 0; i < 4; i++) {
		a = json_array_get(json_array_get(c.am, i), 0);
		assert_string_equal(json_string_value(json_object_get(a, "startsAt")),
				    "2023-11-14T22:13:22.000Z");
	}
	assert_int_equal(json_array_size(c.hooks), 1);
	/* Resolution goes out at once with endsAt = now. */
	fake_clear(&f);
	alert_engine__eval(e, T0 + 36000, fake_each, &f);
	assert_int_equal(json_array_size(c.am), 5);
	a = json_array_get(json_array_get(c.am, 4), 0);
	assert_string_equal(json_string_value(json_object_get(a, "endsAt")),
			    "2023-11-14T22:13:56.000Z");
	assert_int_equal(json_array_size(c.hooks), 2);
	assert_string_equal(
		json_string_value(json_object_get(json_array_get(c.hooks, 1), "status")),
		"resolved");
	/* The resolution is repeated on the resend schedule, the webhook not. */
	for (int t = 37; t <= 60; t++)
		alert_engine__eval(e, T0 + t * 1000, fake_each, &f);
	assert_int_equal(json_array_size(c.am), 7); /* t=46, 56 */
	assert_int_equal(json_array_size(c.hooks), 2);
	alert_engine__free(e);
	caught_free(&c);
}

/* A server sink: the webhook's notifications, and the firing alerts again
 * on the resend schedule (a server that restarted learns them again). */
static void test_server_resend(void **state)
{
	struct caught c;
	struct alert_engine *e = engine("rules:\n"
					"  - alert: Stuck\n"
					"    expr: stuck > 2\n"
					"    for: 2s\n",
					&c);
	struct alert_delivery d = {.resend_ms = 10000};
	struct fake f = {0};

	alert_engine__set_delivery(e, &d);
	assert_int_equal(alert_engine__add_server(e, "http://127.0.0.1:7470/api/v1/alerts"), 0);
	fake_set(&f, "stuck", 5, "rank", "3", NULL);
	for (int t = 0; t <= 35; t++)
		alert_engine__eval(e, T0 + t * 1000, fake_each, &f);
	/* fired at t=2; again at t=20 and t=30 (at t=10 it had just fired) */
	assert_int_equal(json_array_size(c.hooks), 3);
	for (size_t i = 0; i < 3; i++) {
		json_t *h = json_array_get(c.hooks, i);

		assert_string_equal(json_string_value(json_object_get(h, "status")), "firing");
		assert_string_equal(json_string_value(json_object_get(h, "startsAt")),
				    "2023-11-14T22:13:22.000Z");
	}
	/* The resolution once, and nothing after it. */
	fake_clear(&f);
	for (int t = 36; t <= 70; t++)
		alert_engine__eval(e, T0 + t * 1000, fake_each, &f);
	assert_int_equal(json_array_size(c.hooks), 4);
	assert_string_equal(
		json_string_value(json_object_get(json_array_get(c.hooks, 3), "status")),
		"resolved");
	alert_engine__free(e);
	caught_free(&c);
}

static void test_duplicate_labelsets(void **state)
{
	struct caught c;
	/* Both series become the same alert once the label `pid` is overwritten. */
	struct alert_engine *e = engine("rules:\n"
					"  - alert: A\n"
					"    expr: x > 1\n"
					"    labels: {pid: all}\n",
					&c);
	struct fake f = {0};
	json_t *list;

	fake_set(&f, "x", 2, "pid", "1", NULL);
	fake_set(&f, "x", 3, "pid", "2", NULL);
	for (int t = 0; t < 5; t++)
		alert_engine__eval(e, T0 + t * 1000, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 1);
	list = alert_engine__list(e);
	assert_int_equal(json_array_size(list), 1);
	assert_string_equal(json_string_value(json_object_get(
				    json_object_get(json_array_get(list, 0), "labels"), "pid")),
			    "all");
	json_decref(list);
	alert_engine__free(e);
	caught_free(&c);
}

static void test_eval_error_keeps_state(void **state)
{
	struct caught c;
	struct alert_engine *e = engine("rules:\n"
					"  - alert: A\n"
					"    expr: used / on(gpu_id) cap > 0.5\n",
					&c);
	struct fake f = {0};
	struct alert_engine_stats st;
	json_t *rules;

	fake_set(&f, "used", 9, "pid", "1", "gpu_id", "0", NULL);
	fake_set(&f, "cap", 10, "gpu_id", "0", NULL);
	alert_engine__eval(e, T0, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 1);
	/* A second process on the same GPU makes the matching many-to-one. */
	fake_set(&f, "used", 9, "pid", "2", "gpu_id", "0", NULL);
	for (int t = 1; t < 5; t++)
		alert_engine__eval(e, T0 + t * 1000, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 1);
	alert_engine__stats(e, &st);
	assert_int_equal(st.eval_errors, 4);
	assert_int_equal(st.firing, 1);
	rules = alert_engine__rules(e);
	assert_string_equal(json_string_value(json_object_get(json_array_get(rules, 0), "health")),
			    "err");
	assert_non_null(
		strstr(json_string_value(json_object_get(json_array_get(rules, 0), "lastError")),
		       "group_left"));
	json_decref(rules);
	alert_engine__free(e);
	caught_free(&c);
}

static void test_external_labels(void **state)
{
	struct caught c;
	struct alert_engine *e = engine("rules:\n"
					"  - alert: A\n"
					"    expr: x > 1\n"
					"    labels: {cluster: mine}\n",
					&c);
	struct fake f = {0};

	assert_int_equal(alert_engine__set_external_label(e, "cluster", "theirs"), 0);
	assert_int_equal(alert_engine__set_external_label(e, "node", "n1"), 0);
	assert_int_equal(alert_engine__set_external_label(e, "bad-key", "x"), -EINVAL);
	assert_int_equal(alert_engine__set_external_label(e, "alertname", "x"), -EINVAL);
	fake_set(&f, "x", 2, "node", "from-series", NULL);
	fake_set(&f, "x", 2, "pid", "7", NULL);
	alert_engine__eval(e, T0, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 2);
	/* Rule labels win over external ones; the series' own labels too. */
	assert_string_equal(note_label(&c, 0, "cluster"), "mine");
	assert_string_equal(note_label(&c, 0, "node"), "from-series");
	assert_string_equal(note_label(&c, 1, "node"), "n1");
	alert_engine__free(e);
	caught_free(&c);

	/* The default external label is the host name. */
	e = alert_engine__load_string("rules:\n  - alert: A\n    expr: x > 1\n", "t", NULL, 0);
	assert_non_null(e);
	c.notes = json_array();
	alert_engine__add_callback(e, catch_note, &c);
	alert_engine__eval(e, T0, fake_each, &f);
	{
		char host[256] = "";

		gethostname(host, sizeof(host) - 1);
		assert_string_equal(note_label(&c, 1, "node"), host);
	}
	json_decref(c.notes);
	alert_engine__free(e);
}

/* ---- templates ---- */

static char *render(const char *src, double value)
{
	const char *kv[] = {"gpu_id", "0", "op", "allreduce", "pid", "4242", "size", "2048"};
	struct alert_labels l = {.kv = kv, .n = 4};
	char err[256] = "";
	struct alert_tmpl *t = alert_tmpl__parse(src, err, sizeof(err));
	char *out;

	if (!t)
		fail_msg("template `%s`: %s", src, err);
	out = alert_tmpl__render(t, &l, value);
	alert_tmpl__free(t);
	return out;
}

#define ASSERT_RENDER(src, value, want)                                                            \
	do {                                                                                       \
		char *got_ = render(src, value);                                                   \
		if (strcmp(got_, want))                                                            \
			fail_msg("`%s`: got \"%s\", want \"%s\"", src, got_, want);                \
		free(got_);                                                                        \
	} while (0)

static void test_templates(void **state)
{
	ASSERT_RENDER("plain text", 1, "plain text");
	ASSERT_RENDER("pid {{ $labels.pid }} on {{$labels.gpu_id}}", 1, "pid 4242 on 0");
	ASSERT_RENDER("{{ .Labels.op }}={{ .Value }}", 0.5, "allreduce=0.5");
	ASSERT_RENDER("{{pid}} {{value}}", 0.97, "4242 0.97");
	ASSERT_RENDER("{{ $labels.missing }}|", 1, "|");
	ASSERT_RENDER("{{ $value }}", 1e6, "1e+06");
	ASSERT_RENDER("{{ $value }}", 123456, "123456");
	ASSERT_RENDER("{{ $value }}", 0.0001, "0.0001");
	ASSERT_RENDER("{{ $value }}", 0.00001, "1e-05");
	ASSERT_RENDER("{{ $value }}", NAN, "NaN");
	ASSERT_RENDER("{{ $value }}", -INFINITY, "-Inf");
	ASSERT_RENDER("{{ $value | humanizePercentage }}", 0.9712, "97.12%");
	ASSERT_RENDER("{{ humanizePercentage $value }}", 0.5, "50%");
	ASSERT_RENDER("{{ $value | humanize }}", 1234567, "1.235M");
	ASSERT_RENDER("{{ $value | humanize }}", 0.00025, "250u");
	ASSERT_RENDER("{{ $value | humanize1024 }}", 83886080000.0, "78.12Gi");
	ASSERT_RENDER("{{ $labels.size | humanize1024 }}", 0, "2ki");
	ASSERT_RENDER("{{ $value | humanizeDuration }}", 65, "1m 5s");
	ASSERT_RENDER("{{ $value | humanizeDuration }}", 90061, "1d 1h 1m 1s");
	ASSERT_RENDER("{{ $value | humanizeDuration }}", 2.5, "2.5s");
	ASSERT_RENDER("{{ $value | humanizeDuration }}", 0.0015, "1.5ms");
	ASSERT_RENDER("{{ $value | humanizeDuration }}", 0, "0s");
	ASSERT_RENDER("{{ printf \"%.2f\" $value }}", 3.14159, "3.14");
	ASSERT_RENDER("{{ $value | printf \"%.1f%%\" }}", 97.14, "97.1%");
	ASSERT_RENDER("{{ printf \"%s/%d\" $labels.op $value }}", 7.9, "allreduce/7");
	ASSERT_RENDER("{{ printf \"%5.1f|%-6s|\" $value $labels.pid }}", 2, "  2.0|4242  |");
	ASSERT_RENDER("{{ $labels.op | toUpper }} {{ $labels.op | title }}", 1,
		      "ALLREDUCE Allreduce");
	ASSERT_RENDER("{{ \"MiXeD\" | toLower }}", 1, "mixed");
	ASSERT_RENDER("a  {{- $labels.pid -}}  b", 1, "a4242b");
	ASSERT_RENDER("a{{/* a comment */}}b", 1, "ab");
	ASSERT_RENDER("{{ $labels.op | humanize }}", 1, "allreduce");
}

static void test_template_errors(void **state)
{
	static const struct {
		const char *src, *msg;
	} bad[] = {
		{"{{ $labels.pid", "unclosed `{{`"},
		{"{{ }}", "empty `{{ }}`"},
		{"{{ $value | }}", "`|` with nothing after it"},
		{"{{ | humanize }}", "`|` with nothing before it"},
		{"{{ $value | frobnicate }}", "unknown function `frobnicate`"},
		{"{{ range $labels }}{{ end }}", "`range` is not supported"},
		{"{{ $labels.pid $value }}", "a value takes no arguments"},
		{"{{ $foo }}", "unknown `$foo`"},
		{"{{ $labels.a-b }}", "`a-b` is not a label name"},
		{"{{ printf $value }}", "printf needs a format string first"},
		{"{{ printf \"%n\" $value }}", "unsupported conversion `%n`"},
		{"{{ printf \"%999f\" $value }}", "width above 99"},
		{"{{ humanize $value $value }}", "humanize takes one value, got 2"},
		{"{{ (humanize $value) }}", "parentheses are not supported"},
		{"{{ \"abc }}", "unterminated string"},
		{"{{ $value | $value }}", "only functions can follow `|`"},
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char err[256] = "";
		struct alert_tmpl *t = alert_tmpl__parse(bad[i].src, err, sizeof(err));

		if (t || !strstr(err, bad[i].msg))
			fail_msg("`%s`: got \"%s\", want \"%s\"", bad[i].src, t ? "(parsed)" : err,
				 bad[i].msg);
	}
}

static void test_formats(void **state)
{
	char buf[64];

	alert_format_value(buf, sizeof(buf), 0.95);
	assert_string_equal(buf, "0.95");
	alert_format_value(buf, sizeof(buf), 60);
	assert_string_equal(buf, "60");
	alert_format_value(buf, sizeof(buf), 0.1 + 0.2);
	assert_string_equal(buf, "0.30000000000000004");
	alert_format_value(buf, sizeof(buf), 1234567);
	assert_string_equal(buf, "1.234567e+06");
	alert_format_value(buf, sizeof(buf), -2.5);
	assert_string_equal(buf, "-2.5");
	alert_format_rfc3339(buf, sizeof(buf), 1700000000123LL);
	assert_string_equal(buf, "2023-11-14T22:13:20.123Z");
	alert_format_humanize(buf, sizeof(buf), 0);
	assert_string_equal(buf, "0");
	alert_format_humanize(buf, sizeof(buf), 1000);
	assert_string_equal(buf, "1k");
}

/* ---- defaults ---- */

static void test_defaults(void **state)
{
	struct alert_defaults d = {
		.nccl_stuck_seconds = 2, .dataloader_stuck_seconds = 5, .sync_stuck_seconds = 7};
	struct alert_engine *e = alert_engine__new_defaults(&d);
	struct caught c = {.notes = json_array()};
	struct fake f = {0};
	json_t *rules, *n;
	char *yaml;
	const char *summary;

	assert_non_null(e);
	rules = alert_engine__rules(e);
	assert_int_equal(json_array_size(rules), 5);
	assert_string_equal(json_string_value(json_object_get(json_array_get(rules, 0), "alert")),
			    "GpuOOMWarning");
	assert_string_equal(json_string_value(json_object_get(json_array_get(rules, 0), "expr")),
			    "sonde_gpu_memory_used_ratio > 0.95");
	assert_string_equal(json_string_value(json_object_get(json_array_get(rules, 0), "for")),
			    "30s");
	assert_string_equal(json_string_value(json_object_get(json_array_get(rules, 1), "alert")),
			    "NcclCollectiveStuck");
	assert_string_equal(json_string_value(json_object_get(json_array_get(rules, 1), "expr")),
			    "sonde_nccl_stuck_seconds > 2");
	assert_string_equal(json_string_value(json_object_get(json_array_get(rules, 1), "for")),
			    "0s");
	assert_string_equal(json_string_value(json_object_get(json_array_get(rules, 2), "expr")),
			    "zernel_cuda_launch_latency_seconds{quantile=\"0.99\"} > 0.001");
	assert_string_equal(json_string_value(json_object_get(json_array_get(rules, 2), "for")),
			    "1m");
	assert_string_equal(json_string_value(json_object_get(json_array_get(rules, 3), "alert")),
			    "DataLoaderWaitStuck");
	assert_string_equal(json_string_value(json_object_get(json_array_get(rules, 3), "expr")),
			    "sonde_dataloader_stuck_seconds > 5");
	assert_string_equal(json_string_value(json_object_get(json_array_get(rules, 3), "for")),
			    "0s");
	assert_string_equal(json_string_value(json_object_get(json_array_get(rules, 4), "alert")),
			    "CudaSyncStuck");
	assert_string_equal(json_string_value(json_object_get(json_array_get(rules, 4), "expr")),
			    "sonde_cuda_sync_stuck_seconds > 7");
	json_decref(rules);
	alert_engine__set_external_label(e, "node", NULL);
	alert_engine__add_callback(e, catch_note, &c);

	fake_set(&f, "sonde_nccl_stuck_seconds", 125, "pid", "4242", "op", "allreduce", "rank", "3",
		 "comm", "0x7f00deadbeef", NULL);
	fake_set(&f, "sonde_gpu_memory_used_ratio", 0.97, "pid", "4242", "gpu_id", "1", NULL);
	fake_set(&f, "zernel_cuda_launch_latency_seconds", 0.0025, "pid", "4242", "quantile",
		 "0.99", NULL);
	fake_set(&f, "zernel_cuda_launch_latency_seconds", 0.5, "pid", "4242", "quantile", "0.5",
		 NULL);
	fake_set(&f, "sonde_dataloader_stuck_seconds", 75, "pid", "77", "tid", "78", "file",
		 "/srv/job/train.py", "line", "42", "function", "train", "process", "python3",
		 NULL);
	fake_set(&f, "sonde_cuda_sync_stuck_seconds", 8, "pid", "90", "tid", "91", "file",
		 "/srv/job/eval.py", "line", "7", "function", "score", "process", "python3", "api",
		 "cudaStreamSynchronize", NULL);
	for (int t = 0; t <= 60; t++)
		alert_engine__eval(e, T0 + t * 1000, fake_each, &f);
	assert_int_equal(json_array_size(c.notes), 5);
	n = json_array_get(c.notes, 0);
	assert_string_equal(json_string_value(json_object_get(n, "alert")), "NcclCollectiveStuck");
	summary = json_string_value(json_object_get(json_object_get(n, "annotations"), "summary"));
	assert_string_equal(summary, "NCCL allreduce stuck for 2m 5s on rank 3 of communicator "
				     "0x7f00deadbeef (pid 4242)");
	assert_string_equal(
		json_string_value(json_object_get(json_object_get(n, "labels"), "severity")),
		"critical");
	n = json_array_get(c.notes, 1);
	assert_string_equal(json_string_value(json_object_get(n, "alert")), "DataLoaderWaitStuck");
	summary = json_string_value(json_object_get(json_object_get(n, "annotations"), "summary"));
	assert_string_equal(summary, "DataLoader wait stuck for 1m 15s at /srv/job/train.py:42 in "
				     "train (pid 77 python3)");
	summary = json_string_value(
		json_object_get(json_object_get(n, "annotations"), "description"));
	assert_non_null(strstr(summary, "Thread 78 of pid 77 has waited more than 5s"));
	n = json_array_get(c.notes, 2);
	assert_string_equal(json_string_value(json_object_get(n, "alert")), "CudaSyncStuck");
	summary = json_string_value(json_object_get(json_object_get(n, "annotations"), "summary"));
	assert_string_equal(summary, "cudaStreamSynchronize stuck for 8s at /srv/job/eval.py:7 in "
				     "score (pid 90 python3)");
	n = json_array_get(c.notes, 3);
	assert_string_equal(json_string_value(json_object_get(n, "alert")), "GpuOOMWarning");
	assert_string_equal(json_string_value(json_object_get(n, "startsAt")),
			    "2023-11-14T22:13:50.000Z");
	summary = json_string_value(json_object_get(json_object_get(n, "annotations"), "summary"));
	assert_string_equal(summary, "GPU OOM Warning: pid 4242 holds 97% of the memory of GPU 1");
	n = json_array_get(c.notes, 4);
	assert_string_equal(json_string_value(json_object_get(n, "alert")),
			    "CudaLaunchLatencyHigh");
	assert_string_equal(
		json_string_value(json_object_get(json_object_get(n, "labels"), "quantile")),
		"0.99");
	assert_string_equal(json_string_value(json_object_get(n, "startsAt")),
			    "2023-11-14T22:14:20.000Z");
	json_decref(c.notes);
	alert_engine__free(e);

	/* Zeroes and NULL keep the defaults; the YAML is a valid rule file. */
	yaml = alert_defaults__yaml(NULL);
	assert_non_null(strstr(yaml, "sonde_nccl_stuck_seconds > 60\n"));
	assert_non_null(strstr(yaml, "sonde_gpu_memory_used_ratio > 0.95\n"));
	assert_non_null(strstr(yaml, "waited more than 1m for the GPU"));
	assert_non_null(strstr(yaml, "(threshold 1ms)"));
	assert_non_null(strstr(yaml, "sonde_dataloader_stuck_seconds > 60\n"));
	e = alert_engine__load_string(yaml, "defaults", NULL, 0);
	assert_non_null(e);
	alert_engine__free(e);
	free(yaml);
	d = (struct alert_defaults){.gpu_memory_ratio = 0.9, .launch_p99_seconds = 0.0005};
	yaml = alert_defaults__yaml(&d);
	assert_non_null(strstr(yaml, "sonde_gpu_memory_used_ratio > 0.9\n"));
	assert_non_null(strstr(yaml, "above 90% of the device"));
	assert_non_null(strstr(yaml, "} > 0.0005\n"));
	assert_non_null(strstr(yaml, "(threshold 500us)"));
	free(yaml);
}

/* docs/alerts.md shows the default rules as alert_defaults__yaml() writes them. */
static void test_defaults_documented(void **state)
{
	FILE *f = fopen("docs/alerts.md", "r");
	char *doc = NULL, *yaml = alert_defaults__yaml(NULL), *line, *save = NULL;
	size_t len = 0;
	int lines = 0;

	if (!f) {
		/* Run from elsewhere than the repository root: nothing to compare. */
		print_message("skipping: docs/alerts.md not found from the current directory\n");
		free(yaml);
		return;
	}
	assert_true(getdelim(&doc, &len, '\0', f) > 0);
	fclose(f);
	strtok_r(yaml, "\n", &save); /* the file's own comment line */
	while ((line = strtok_r(NULL, "\n", &save))) {
		if (!strstr(doc, line))
			fail_msg("docs/alerts.md lacks the default rules' line:\n%s", line);
		lines++;
	}
	assert_true(lines >= 18);
	free(doc);
	free(yaml);
}

/* ---- delivery ---- */

static void test_sink_urls(void **state)
{
	struct alert_engine *e = engine("rules: []\n", NULL);

	assert_int_equal(alert_engine__add_webhook(e, "ftp://x/"), -EINVAL);
	assert_int_equal(alert_engine__add_webhook(e, "http://"), -EINVAL);
	assert_int_equal(alert_engine__add_webhook(e, "http:///path"), -EINVAL);
	assert_int_equal(alert_engine__add_webhook(e, "http://a b/"), -EINVAL);
	assert_int_equal(alert_engine__add_webhook(e, NULL), -EINVAL);
	assert_int_equal(alert_engine__add_alertmanager(e, "localhost:9093"), -EINVAL);
	assert_int_equal(alert_engine__add_callback(e, NULL, NULL), -EINVAL);
	alert_engine__free(e);
}

static void catch_url(void *ctx, enum alert_sink_kind kind, const char *url, const char *body)
{
	json_array_append_new(ctx, json_string(url));
}

static void test_am_url(void **state)
{
	struct alert_engine *e = engine("rules:\n  - alert: A\n    expr: x > 1\n", NULL);
	json_t *urls = json_array();
	struct fake f = {0};
	static const char *const given[] = {"http://am:9093", "http://am:9093/",
					    "http://am:9093/api/v2/alerts", "https://am/x//"};
	static const char *const want[] = {
		"http://am:9093/api/v2/alerts", "http://am:9093/api/v2/alerts",
		"http://am:9093/api/v2/alerts", "https://am/x/api/v2/alerts"};

	alert_engine__set_post_hook(e, catch_url, urls);
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(alert_engine__add_alertmanager(e, given[i]), 0);
	fake_set(&f, "x", 2, NULL);
	alert_engine__eval(e, T0, fake_each, &f);
	assert_int_equal(json_array_size(urls), 4);
	for (size_t i = 0; i < 4; i++)
		assert_string_equal(json_string_value(json_array_get(urls, i)), want[i]);
	json_decref(urls);
	alert_engine__free(e);
}

static int closed_port(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

static void test_delivery_failure_counted(void **state)
{
	struct alert_engine *e = engine("rules:\n  - alert: A\n    expr: x > 1\n", NULL);
	struct alert_delivery d = {
		.timeout_ms = 500, .retries = 2, .backoff_ms = 20, .queue_len = 2};
	struct alert_engine_stats st;
	struct fake f = {0};
	char url[64];
	uint64_t t0;

	alert_engine__set_delivery(e, &d);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/hook", closed_port());
	assert_int_equal(alert_engine__add_webhook(e, url), 0);
	assert_int_equal(alert_engine__add_alertmanager(e, url), 0);
	fake_set(&f, "x", 2, NULL);
	t0 = mono_ms();
	alert_engine__eval(e, T0, fake_each, &f);
	/* Evaluation doesn't wait for delivery. */
	assert_true(mono_ms() - t0 < 100);
	assert_int_equal(alert_engine__flush(e, 10000), 0);
	alert_engine__stats(e, &st);
	assert_int_equal(st.notifications[ALERT_SINK_WEBHOOK], 0);
	assert_int_equal(st.notifications_failed[ALERT_SINK_WEBHOOK], 1);
	assert_int_equal(st.notifications_failed[ALERT_SINK_ALERTMANAGER], 1);
	assert_int_equal(st.queued, 0);
	alert_engine__free(e);
}

/* alert_engine__collect: the engine's families on /metrics, every value
 * from a known history -- two evaluations, one alert pending, one firing,
 * one rule failing each time, one webhook POST given up on. */
static void test_collect(void **state)
{
	struct alert_engine *e = engine("rules:\n"
					"  - alert: Firing\n"
					"    expr: x > 1\n"
					"  - alert: Pending\n"
					"    expr: x > 1\n"
					"    for: 1h\n"
					"  - alert: Broken\n"
					"    expr: x > on() y\n",
					NULL);
	struct alert_delivery d = {.timeout_ms = 500, .retries = 1, .backoff_ms = 10};
	static const char want[] =
		"# HELP sonde_alerts_evaluations_total Evaluations of the alert rules.\n"
		"# TYPE sonde_alerts_evaluations_total counter\n"
		"sonde_alerts_evaluations_total 2\n"
		"# HELP sonde_alerts_evaluation_errors_total Rule evaluations that failed.\n"
		"# TYPE sonde_alerts_evaluation_errors_total counter\n"
		"sonde_alerts_evaluation_errors_total 2\n"
		"# HELP sonde_alerts Alerts by state.\n"
		"# TYPE sonde_alerts gauge\n"
		"sonde_alerts{state=\"pending\"} 1\n"
		"sonde_alerts{state=\"firing\"} 1\n"
		"# HELP sonde_alerts_notifications_total Notifications delivered (2xx), by sink.\n"
		"# TYPE sonde_alerts_notifications_total counter\n"
		"sonde_alerts_notifications_total{sink=\"webhook\"} 0\n"
		"sonde_alerts_notifications_total{sink=\"alertmanager\"} 0\n"
		"# HELP sonde_alerts_notifications_failed_total Notifications given up on, by "
		"sink.\n"
		"# TYPE sonde_alerts_notifications_failed_total counter\n"
		"sonde_alerts_notifications_failed_total{sink=\"webhook\"} 1\n"
		"sonde_alerts_notifications_failed_total{sink=\"alertmanager\"} 0\n"
		"# HELP sonde_alerts_notifications_dropped_total Notifications dropped because a "
		"sink's queue was full.\n"
		"# TYPE sonde_alerts_notifications_dropped_total counter\n"
		"sonde_alerts_notifications_dropped_total{sink=\"webhook\"} 0\n"
		"sonde_alerts_notifications_dropped_total{sink=\"alertmanager\"} 0\n";
	struct prom_text t;
	struct fake f = {0};
	char url[64], *text;

	alert_engine__set_delivery(e, &d);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/hook", closed_port());
	assert_int_equal(alert_engine__add_webhook(e, url), 0);
	fake_set(&f, "x", 2, NULL);
	fake_set(&f, "y", 1, "k", "1", NULL);
	fake_set(&f, "y", 1, "k", "2", NULL);
	alert_engine__eval(e, T0, fake_each, &f);
	alert_engine__eval(e, T0 + 1000, fake_each, &f);
	assert_int_equal(alert_engine__flush(e, 10000), 0);
	assert_int_equal(prom_text__open(&t), 0);
	alert_engine__collect(e, &t.out);
	text = prom_text__close(&t, NULL);
	assert_non_null(text);
	assert_string_equal(text, want);
	free(text);
	alert_engine__free(e);
}

static void test_queue_full_drops(void **state)
{
	struct alert_engine *e = engine("rules:\n  - alert: A\n    expr: x > 1\n", NULL);
	struct alert_delivery d = {
		.timeout_ms = 300, .retries = 1, .backoff_ms = 10, .queue_len = 1};
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	struct alert_engine_stats st;
	struct fake f = {0};
	char url[64];
	/* A receiver that accepts connections (the kernel does) and never answers. */
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 16), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", ntohs(a.sin_port));
	alert_engine__set_delivery(e, &d);
	assert_int_equal(alert_engine__add_webhook(e, url), 0);
	fake_set(&f, "x", 2, "pid", "1", NULL);
	fake_set(&f, "x", 2, "pid", "2", NULL);
	fake_set(&f, "x", 2, "pid", "3", NULL);
	fake_set(&f, "x", 2, "pid", "4", NULL);
	alert_engine__eval(e, T0, fake_each, &f);
	assert_int_equal(alert_engine__flush(e, 10000), 0);
	alert_engine__stats(e, &st);
	/* One notification in flight (or not yet taken), one queued, the rest dropped. */
	assert_true(st.notifications_dropped[ALERT_SINK_WEBHOOK] >= 2);
	assert_true(st.notifications_dropped[ALERT_SINK_WEBHOOK] <= 3);
	assert_int_equal(st.notifications_failed[ALERT_SINK_WEBHOOK], 4);
	assert_int_equal(st.notifications[ALERT_SINK_WEBHOOK], 0);
	alert_engine__free(e);
	close(fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_load_full),
		cmocka_unit_test(test_load_groups),
		cmocka_unit_test(test_load_bad),
		cmocka_unit_test(test_load_file),
		cmocka_unit_test(test_expr_selectors),
		cmocka_unit_test(test_expr_matching),
		cmocka_unit_test(test_expr_aggregations),
		cmocka_unit_test(test_expr_parse_errors),
		cmocka_unit_test(test_for_boundary),
		cmocka_unit_test(test_for_zero_and_instances),
		cmocka_unit_test(test_keep_firing_for),
		cmocka_unit_test(test_alertmanager_resend),
		cmocka_unit_test(test_server_resend),
		cmocka_unit_test(test_duplicate_labelsets),
		cmocka_unit_test(test_eval_error_keeps_state),
		cmocka_unit_test(test_external_labels),
		cmocka_unit_test(test_templates),
		cmocka_unit_test(test_template_errors),
		cmocka_unit_test(test_formats),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_defaults_documented),
		cmocka_unit_test(test_sink_urls),
		cmocka_unit_test(test_am_url),
		cmocka_unit_test(test_delivery_failure_counted),
		cmocka_unit_test(test_queue_full_drops),
		cmocka_unit_test(test_collect),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
