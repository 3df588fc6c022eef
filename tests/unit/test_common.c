/* test_common.c: unit tests of src/common/ -- the duration grammar every
 * option, rule and query shares, the regex guard in front of glibc, the
 * Prometheus writer, the clocks and the checked array growth. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "common/clock.h"
#include "common/count.h"
#include "common/duration.h"
#include "common/prom.h"
#include "common/regex.h"
#include "common/search.h"
#include "common/xalloc.h"

/* ---- durations ---- */

static void test_duration_good(void **state)
{
	static const struct {
		const char *s;
		uint64_t ms;
	} good[] = {
		{"0", 0},
		{"0s", 0},
		{"10", 10000}, /* a bare number is seconds */
		{"0.5", 500},
		{"30s", 30000},
		{"5m", 300000},
		{"1h", 3600000},
		{"1h30m", 5400000},
		{"1.5h", 5400000},
		{"250ms", 250},
		{"1m30s500ms", 90500},
		{"2d", 172800000},
		{"1w2d", 9 * 86400000ull},
		{"1y", 365 * 86400000ull},
		{"100y", DURATION_MAX_MS},
	};
	uint64_t ms;

	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		ms = 12345;
		if (duration_parse(good[i].s, &ms))
			fail_msg("duration \"%s\" refused", good[i].s);
		if (ms != good[i].ms)
			fail_msg("duration \"%s\" read as %llu ms, not %llu", good[i].s,
				 (unsigned long long)ms, (unsigned long long)good[i].ms);
	}
}

static void test_duration_bad(void **state)
{
	static const char *const bad[] = {
		"",
		"s",
		"m",
		"5x",
		"-1s",
		" 1s",
		"1s ",
		"1 s",
		"5m1h",
		"1h1h",
		"1ms1s",
		"30m1h",
		".5s",
		"1.s",
		"1..5s",
		"1e3",
		"101y",
		"1h1y",
		"99999999999999999999s",
		"9999999999999999d",
		"1s2",
		"0x10s",
	};
	uint64_t ms = 7;

	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		if (duration_parse(bad[i], &ms) != -EINVAL)
			fail_msg("duration \"%s\" accepted (%llu ms)", bad[i],
				 (unsigned long long)ms);
	assert_int_equal(duration_parse(NULL, &ms), -EINVAL);
	assert_int_equal(ms, 7); /* untouched on failure */
}

static void test_duration_format(void **state)
{
	static const uint64_t values[] = {
		0, 1, 250, 1000, 90500, 5400000, 86400000 + 1, 9 * 86400000ull, DURATION_MAX_MS};
	char buf[64];
	uint64_t back;

	duration_format(buf, sizeof(buf), 5400000);
	assert_string_equal(buf, "1h30m");
	duration_format(buf, sizeof(buf), 90500);
	assert_string_equal(buf, "1m30s500ms");
	duration_format(buf, sizeof(buf), 0);
	assert_string_equal(buf, "0s");
	/* Whatever it writes reads back as the same value. */
	for (size_t i = 0; i < ARRAY_SIZE(values); i++) {
		duration_format(buf, sizeof(buf), values[i]);
		assert_int_equal(duration_parse(buf, &back), 0);
		assert_int_equal(back, values[i]);
	}
	/* A short buffer is cut, never overrun. */
	memset(buf, 'x', sizeof(buf));
	duration_format(buf, 4, 90500);
	assert_true(strlen(buf) < 4);
	assert_int_equal(buf[5], 'x');
}

/* The nanosecond reading: the same grammar, with us and ns at its small
 * end; duration_parse takes neither. */
static void test_duration_ns(void **state)
{
	static const struct {
		const char *s;
		uint64_t ns;
	} good[] = {
		{"1ms", 1000000},      {"250us", 250000}, {"0.2ms", 200000},
		{"1ms500us", 1500000}, {"2", 2000000000}, {"1s5ns", 1000000005},
		{"750ns", 750},	       {"0.5us", 500},	  {"1m", 60000000000ull},
	};
	static const char *const bad[] = {"us", "1us1ms", "5 us", "1usx", "1ns1ns", ""};
	uint64_t ns = 7, ms = 7;

	for (size_t i = 0; i < ARRAY_SIZE(good); i++) {
		if (duration_parse_ns(good[i].s, &ns))
			fail_msg("duration \"%s\" refused", good[i].s);
		if (ns != good[i].ns)
			fail_msg("duration \"%s\" read as %llu ns, not %llu", good[i].s,
				 (unsigned long long)ns, (unsigned long long)good[i].ns);
	}
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++)
		if (duration_parse_ns(bad[i], &ns) != -EINVAL)
			fail_msg("duration \"%s\" accepted (%llu ns)", bad[i],
				 (unsigned long long)ns);
	assert_int_equal(duration_parse("250us", &ms), -EINVAL);
	assert_int_equal(duration_parse("5ns", &ms), -EINVAL);
	assert_int_equal(ms, 7);
}

/* ---- the regex guard ---- */

static void test_regex_match(void **state)
{
	assert_true(regex_match_anchored("python.*", "python3"));
	assert_false(regex_match_anchored("python", "python3"));
	assert_false(regex_match_anchored("ython3", "python3"));
	assert_true(regex_match_anchored("a|b", "b"));
	/* Alternation is inside the anchors: "a|b" does not match "xb". */
	assert_false(regex_match_anchored("a|b", "xb"));
	assert_true(regex_match_anchored("[[:alpha:]]+[]x]", "abc]"));
	assert_false(regex_match_anchored("(", "("));
}

/* Each must be refused, with a message containing what. */
static void refused(const char *re, const char *what)
{
	char err[256] = "";
	regex_t r;
	int rc = regex_compile_anchored(re, &r, err, sizeof(err));

	if (rc == 0) {
		regfree(&r);
		fail_msg("regex \"%s\" accepted", re);
	}
	assert_int_equal(rc, -EINVAL);
	if (!strstr(err, what))
		fail_msg("regex \"%s\" refused with \"%s\", not naming \"%s\"", re, err, what);
}

static void test_regex_guard(void **state)
{
	static const char *const fine[] = {
		"python.*",	 "(py|ba).+", "a{255}",	  "(a+)*", "[[:alpha:]]+x{2,3}",
		"(a|b){,16}[ ]", "[]a+]*",    "\\{1000}", "[\\1]", "a{1,2}",
		"^anchored$",	 "(x|)",      "a{256}",
	};
	char big[REGEX_MAX_LEN + 2];
	char err[256];
	regex_t r;

	for (size_t i = 0; i < ARRAY_SIZE(fine); i++) {
		if (regex_compile_anchored(fine[i], &r, err, sizeof(err)))
			fail_msg("regex \"%s\" refused: %s", fine[i], err);
		regfree(&r);
	}
	refused("(a)\\1", "back-reference");
	refused("(a{100}){100}", "repeats too much");
	refused("a{600}", "repeats too much");
	refused("(((a+)*)+)*", "nests repetitions");
	refused("a+*+", "nests repetitions");
	refused("a^^^^^b", "anchors");
	refused("\\b\\<\\>\\B\\b", "anchors");
	/* A word boundary is an anchor: it can match nothing, and repeated
	 * it took glibc 52 MB ("(d|\b){,26}", found by fuzz_selector). */
	refused("(d|\\b){,26}", "can match nothing");
	refused("(){8,484}", "can match nothing");
	refused("(d*)+(d*)+(d*)+(d*)+(d*)+", "can match nothing");
	refused("x{1,99999999999999999999}", "repeats too much");
	/* A ')' that closes nothing would change meaning once anchored:
	 * "^(a)|(b)$" matches "ab..." -- refused, never wrapped. */
	refused("a)|(b", "unmatched ')'");
	refused("(unclosed", "bad regex");
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	refused(big, "longer than");
	assert_int_equal(regex_check("ok", err, sizeof(err)), 0);
}

/* ---- Prometheus text ---- */

static char *collect(void (*fn)(struct prom_out *o))
{
	struct prom_text t;
	size_t len = 0;
	char *s;

	assert_int_equal(prom_text__open(&t), 0);
	fn(&t.out);
	s = prom_text__close(&t, &len);
	assert_non_null(s);
	assert_int_equal(strlen(s), len);
	return s;
}

static void write_some(struct prom_out *o)
{
	const char *l[] = {"pid", "12", "api", "a\"b\\c\nd", NULL};
	static const double bounds[] = {0.001, 0.5, 10};
	static const uint64_t cum[] = {1, 3, 3};
	static const double q[] = {0.5, 0.99}, v[] = {0.25, 2};

	prom__metric(o, "x_total", "counter", "Help with \\ and\nnewline.", 42);
	prom__family(o, "y", "gauge", "Y.");
	prom__sample(o, "y", l, 0.1);
	prom__sample(o, "y", NULL, NAN);
	prom__sample(o, "y", NULL, -INFINITY);
	prom__family(o, "h_seconds", "histogram", "H.");
	prom__histogram(o, "h_seconds", l, bounds, cum, 3, 4, 12.5);
	prom__family(o, "s_seconds", "summary", "S.");
	prom__summary(o, "s_seconds", NULL, q, v, 2, 9, 3.75);
}

static void test_prom_text(void **state)
{
	char *s = collect(write_some);

	assert_string_equal(s,
			    "# HELP x_total Help with \\\\ and\\nnewline.\n"
			    "# TYPE x_total counter\n"
			    "x_total 42\n"
			    "# HELP y Y.\n"
			    "# TYPE y gauge\n"
			    "y{pid=\"12\",api=\"a\\\"b\\\\c\\nd\"} 0.1\n"
			    "y NaN\n"
			    "y -Inf\n"
			    "# HELP h_seconds H.\n"
			    "# TYPE h_seconds histogram\n"
			    "h_seconds_bucket{pid=\"12\",api=\"a\\\"b\\\\c\\nd\",le=\"0.001\"} 1\n"
			    "h_seconds_bucket{pid=\"12\",api=\"a\\\"b\\\\c\\nd\",le=\"0.5\"} 3\n"
			    "h_seconds_bucket{pid=\"12\",api=\"a\\\"b\\\\c\\nd\",le=\"10\"} 3\n"
			    "h_seconds_bucket{pid=\"12\",api=\"a\\\"b\\\\c\\nd\",le=\"+Inf\"} 4\n"
			    "h_seconds_sum{pid=\"12\",api=\"a\\\"b\\\\c\\nd\"} 12.5\n"
			    "h_seconds_count{pid=\"12\",api=\"a\\\"b\\\\c\\nd\"} 4\n"
			    "# HELP s_seconds S.\n"
			    "# TYPE s_seconds summary\n"
			    "s_seconds{quantile=\"0.5\"} 0.25\n"
			    "s_seconds{quantile=\"0.99\"} 2\n"
			    "s_seconds_sum 3.75\n"
			    "s_seconds_count 9\n");
	free(s);
}

static void test_prom_values(void **state)
{
	static const double values[] = {0.1, 1.0 / 3, 1e-9, 123456789012345678.0, 5e-324, 0};
	char buf[40];

	/* Every value reads back exactly. */
	for (size_t i = 0; i < ARRAY_SIZE(values); i++) {
		prom_format_value(buf, sizeof(buf), values[i]);
		assert_true(strtod(buf, NULL) == values[i]);
	}
	prom_format_value(buf, sizeof(buf), INFINITY);
	assert_string_equal(buf, "+Inf");
}

/* ---- clocks and arrays ---- */

static void test_clock(void **state)
{
	struct timespec ts;
	uint64_t a = mono_ns(), b;

	clock_gettime(CLOCK_REALTIME, &ts);
	b = mono_ns();
	assert_true(b >= a);
	assert_true(mono_ms() >= a / 1000000);
	/* Wall time is the epoch's, within a second of the libc's. */
	assert_true(llabs((long long)wall_ms() - (long long)ts.tv_sec * 1000) < 2000);
	assert_true(wall_ns() / 1000000 >= wall_ms() - 1);
}

/* Every boundary of a sorted array with runs of equal values, against a
 * linear scan: the lower bound (first not below) and the upper bound (first
 * above), for keys below, between, on and above the values. */
static void test_partition_point(void **state)
{
	const int a[] = {1, 3, 3, 3, 7, 9, 9};
	size_t n = ARRAY_SIZE(a);

	for (int key = 0; key <= 10; key++) {
		size_t lower = 0, upper = 0;

		while (lower < n && a[lower] < key)
			lower++;
		while (upper < n && a[upper] <= key)
			upper++;
		assert_int_equal(PARTITION_POINT(n, i, a[i] < key), lower);
		assert_int_equal(PARTITION_POINT(n, i, a[i] <= key), upper);
	}
	assert_int_equal(PARTITION_POINT(0, i, a[i] < 5), 0);
	assert_int_equal(PARTITION_POINT(n, i, a[i] < 100), n);
	assert_int_equal(PARTITION_POINT(1, i, a[i] < 100), 1);
	assert_int_equal(PARTITION_POINT(1, i, a[i] < 0), 0);
}

/* Counts grouped by thousands, whatever their size; a short buffer gets
 * what fits. */
static void test_fmt_count(void **state)
{
	char buf[32], small[4];

	assert_string_equal(fmt_count(buf, sizeof(buf), 0), "0");
	assert_string_equal(fmt_count(buf, sizeof(buf), 999), "999");
	assert_string_equal(fmt_count(buf, sizeof(buf), 1000), "1,000");
	assert_string_equal(fmt_count(buf, sizeof(buf), 1434660), "1,434,660");
	assert_string_equal(fmt_count(buf, sizeof(buf), UINT64_MAX), "18,446,744,073,709,551,615");
	assert_string_equal(fmt_count(small, sizeof(small), 123456), "123");
}

static void test_array_grow(void **state)
{
	uint32_t *v = NULL;
	size_t cap = 0;

	assert_int_equal(array_grow((void **)&v, &cap, 3, sizeof(*v)), 0);
	assert_true(cap >= 3);
	for (size_t i = 0; i < cap; i++)
		assert_int_equal(v[i], 0); /* new elements are zeroed */
	v[0] = 7;
	assert_int_equal(array_grow((void **)&v, &cap, 1000, sizeof(*v)), 0);
	assert_true(cap >= 1000);
	assert_int_equal(v[0], 7);
	assert_int_equal(v[999], 0);
	/* A size past the address space fails cleanly, the array intact. */
	{
		size_t before = cap;

		assert_int_equal(array_grow((void **)&v, &cap, SIZE_MAX / 2, sizeof(*v)), -ENOMEM);
		assert_int_equal(cap, before);
		assert_int_equal(v[0], 7);
	}
	free(v);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_duration_good),	cmocka_unit_test(test_duration_bad),
		cmocka_unit_test(test_duration_format), cmocka_unit_test(test_duration_ns),
		cmocka_unit_test(test_regex_match),	cmocka_unit_test(test_regex_guard),
		cmocka_unit_test(test_prom_text),	cmocka_unit_test(test_prom_values),
		cmocka_unit_test(test_clock),		cmocka_unit_test(test_array_grow),
		cmocka_unit_test(test_partition_point), cmocka_unit_test(test_fmt_count),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
