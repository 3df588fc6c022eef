/* test_store.c: unit tests of the embedded SQLite store (src/store/) in a
 * temporary directory -- exact round trips of windows and points through
 * every read, deduplication of stacks, functions and series, matchers of
 * each kind, the overlap rules of time ranges and the proportional timeline,
 * expiry (exactly what it should, in bounded steps, ids reused safely),
 * all-or-nothing puts, threads putting, selecting and expiring at once,
 * reopening, refusing a newer schema, a file that is not a store and a
 * store in use, label and matcher limits, and kill -9 of a process in the
 * middle of puts; GPU timeline spans (order, matchers, limits, bounds,
 * expiry). It includes sqlite_expire.c with small expiry bounds so
 * that bounded work is visible, and reaches the dictionaries through
 * sqlite_internal.h. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <jansson.h>

#include "common/log.h"
#include "common/sbuf.h"
#include "profile/profile.h"
#include "server/flame.h"

/* Expiry with small bounds, so that bounded work is visible: this file's
 * copy of sqlite_expire.c defines everything the library's does, so the
 * linker never pulls that one from libsonde.a and the ops table in sqlite.c
 * gets this sqlite_store__expire (two of them would fail the link). */
#define EXPIRE_MAX_ROWS 5
#define EXPIRE_MAX_POINTS 10
#define EXPIRE_MAX_NODES 7
#include "store/sqlite_expire.c"
#include "store/clickhouse_internal.h"

#define H DICT_HOUR_MS

/* ---- helpers ---- */

static char tmpl[] = "/tmp/sonde-store-XXXXXX";

static char *make_dir(void)
{
	char *d = strdup(tmpl);

	assert_non_null(d);
	assert_non_null(mkdtemp(d));
	return d;
}

static void remove_dir(char *d)
{
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", d);
	assert_int_equal(system(cmd), 0);
	free(d);
}

/* The store under test: the embedded SQLite store in a temporary directory,
 * or, with SONDE_TEST_STORE=clickhouse://HOST:PORT (what
 * tests/integration/test_store_clickhouse.py sets), a fresh database of
 * that ClickHouse server per test: the same tests, the conformance suite,
 * run against both stores. */
static const char *store_url;

static char *new_place(void)
{
	static int n;
	char *p;

	if (!store_url)
		return make_dir();
	assert_true(asprintf(&p, "%s/t%d_%d", store_url, (int)getpid(), ++n) > 0);
	return p;
}

static void drop_place(char *p)
{
	if (!store_url)
		remove_dir(p);
	else
		free(p); /* the test's ClickHouse server goes with its databases */
}

/* Adds "root;...;leaf" (names ending in _[k] are kernel frames of
 * [kernel.kallsyms], "!name" a frame without a module, others of module
 * "/usr/bin/app") with count. */
static void add(struct profile *p, const char *stack, int64_t count)
{
	struct prof_frame frames[64];
	char buf[1024], *names[64], *tok, *save = NULL;
	size_t n = 0, i;

	snprintf(buf, sizeof(buf), "%s", stack);
	for (tok = strtok_r(buf, ";", &save); tok; tok = strtok_r(NULL, ";", &save))
		names[n++] = tok;
	for (i = 0; i < n; i++) {
		char *name = names[n - 1 - i];
		size_t len = strlen(name);
		struct prof_frame *f = &frames[i];

		memset(f, 0, sizeof(*f));
		f->addr = 0x1000 + i;
		if (len > 4 && !strcmp(name + len - 4, "_[k]")) {
			name[len - 4] = '\0';
			f->kernel = true;
			f->module = "[kernel.kallsyms]";
		} else if (name[0] == '!') {
			name++;
		} else {
			f->module = "/usr/bin/app";
		}
		f->func = name;
	}
	assert_int_equal(profile__add(p, 1, 2, "comm", frames, n, count), 0);
}

static struct profile *prof(const char *unit, const char *stack, int64_t count)
{
	struct profile *p = profile__new("cpu", unit, 10101010);

	assert_non_null(p);
	if (stack)
		add(p, stack, count);
	return p;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A profile as sorted lines "root;...;leaf count", kernel frames with
 * _[k], frames without a module with a leading '!'. */
static char *canon(const struct profile *p)
{
	char **lines = calloc(p->nsamples + 1, sizeof(*lines));
	char *out = NULL;
	size_t len = 0, i, k;
	FILE *f;

	assert_non_null(lines);
	for (i = 0; i < p->nsamples; i++) {
		const struct prof_sample *s = &p->samples[i];
		char *line = NULL;
		size_t ll = 0;
		FILE *lf = open_memstream(&line, &ll);

		for (k = s->nlocs; k-- > 0;) {
			const struct prof_location *loc = &p->locs[s->locs[k]];

			fprintf(lf, "%s%s%s%s", k + 1 < s->nlocs ? ";" : "", loc->module ? "" : "!",
				profile__str(p, loc->func), loc->kernel ? "_[k]" : "");
		}
		fprintf(lf, " %" PRId64, s->count);
		fclose(lf);
		lines[i] = line;
	}
	qsort(lines, p->nsamples, sizeof(*lines), cmp_str);
	f = open_memstream(&out, &len);
	for (i = 0; i < p->nsamples; i++) {
		fprintf(f, "%s\n", lines[i]);
		free(lines[i]);
	}
	fclose(f);
	free(lines);
	return out;
}

static struct store_query query(int64_t from, int64_t until, const struct store_matcher *m,
				size_t n)
{
	return (struct store_query){
		.matchers = m, .nmatchers = n, .from_ms = from, .until_ms = until};
}

/* A store_tree_fn writing the tree's stacks as canon() writes a
 * profile's (ctx: a char **), after checking that each node comes after
 * its parent and names a function the tree has. */
static int canon_tree(void *ctx, const struct store_tree *t)
{
	char **lines = calloc(t->nnodes + 2, sizeof(*lines)), *out = NULL;
	size_t n = 0, len = 0, i;
	FILE *f;

	assert_non_null(lines);
	if (t->root_value)
		assert_true(asprintf(&lines[n++], " %" PRId64, t->root_value) > 0);
	for (i = 0; i < t->nnodes; i++) {
		char *line = NULL, *frames;
		uint32_t v;

		assert_true(t->nodes[i].parent == STORE_NO_PARENT || t->nodes[i].parent < i);
		assert_true(t->nodes[i].func < t->nfuncs);
		assert_true(t->nodes[i].value >= 0);
		if (!t->nodes[i].value)
			continue;
		frames = strdup("");
		for (v = (uint32_t)i; v != STORE_NO_PARENT; v = t->nodes[v].parent) {
			const struct store_func *fn = &t->funcs[t->nodes[v].func];
			char *more;

			assert_true(asprintf(&more, "%s%s%s%s%s", *fn->module ? "" : "!", fn->name,
					     fn->kernel ? "_[k]" : "", *frames ? ";" : "",
					     frames) > 0);
			free(frames);
			frames = more;
		}
		assert_true(asprintf(&line, "%s %" PRId64, frames, t->nodes[i].value) > 0);
		free(frames);
		lines[n++] = line;
	}
	qsort(lines, n, sizeof(*lines), cmp_str);
	f = open_memstream(&out, &len);
	for (i = 0; i < n; i++) {
		fprintf(f, "%s\n", lines[i]);
		free(lines[i]);
	}
	fclose(f);
	free(lines);
	*(char **)ctx = out;
	return 0;
}

/* The select of q in canonical form; unit into unit if not NULL. The
 * same select as a tree (store__select_tree) must hold the same stacks,
 * values and unit. */
static char *sel(struct store *s, struct store_query q, char *unit)
{
	struct profile *out = profile__new("cpu", "", 0);
	char u[64], tu[64], *tc = NULL;
	char *c;

	assert_int_equal(store__select(s, &q, out, u, sizeof(u)), 0);
	if (unit)
		strcpy(unit, u);
	c = canon(out);
	assert_int_equal(store__select_tree(s, &q, canon_tree, &tc, tu, sizeof(tu)), 0);
	if (strcmp(c, tc))
		fail_msg("select:\n%s\nas a tree:\n%s", c, tc);
	assert_string_equal(u, tu);
	free(tc);
	profile__free(out);
	return c;
}

static void assert_sel(struct store *s, struct store_query q, const char *want)
{
	char *got = sel(s, q, NULL);

	if (strcmp(got, want))
		fail_msg("select:\n%s\nwanted:\n%s", got, want);
	free(got);
}

static int64_t sel_total(struct store *s, struct store_query q)
{
	struct profile *out = profile__new("cpu", "", 0);
	int64_t t;

	assert_int_equal(store__select(s, &q, out, NULL, 0), 0);
	t = out->total;
	profile__free(out);
	return t;
}

static int put1(struct store *s, const struct store_label *l, size_t nl, int64_t start, int64_t end,
		const struct profile *p)
{
	struct store_window w = {
		.labels = l, .nlabels = nl, .start_ms = start, .end_ms = end, .prof = p};

	return store__put_windows(s, &w, 1);
}

/* Strings from label reads, joined with ','. */
struct strs {
	char buf[1024];
};

static void collect_str(void *ctx, const char *str)
{
	struct strs *c = ctx;

	if (*c->buf)
		strcat(c->buf, ",");
	strcat(c->buf, str);
}

static char *names_of(struct store *s, struct store_query q)
{
	static struct strs c;

	memset(&c, 0, sizeof(c));
	assert_int_equal(store__label_names(s, &q, collect_str, &c), 0);
	return c.buf;
}

static char *values_of(struct store *s, struct store_query q, const char *name)
{
	static struct strs c;

	memset(&c, 0, sizeof(c));
	assert_int_equal(store__label_values(s, &q, name, collect_str, &c), 0);
	return c.buf;
}

static void expire_all(struct store *s, int64_t before)
{
	struct store_stats a, b;
	int i;

	store__stats(s, &a);
	for (i = 0; i < 1000; i++) {
		assert_int_equal(store__expire(s, before), 0);
		store__stats(s, &b);
		if (!memcmp(&a, &b, offsetof(struct store_stats, bytes_on_disk)))
			return;
		a = b;
	}
	fail_msg("expire never finished");
}

#define L(n, v)                                                                                    \
	{                                                                                          \
		.name = (n), .value = (v)                                                          \
	}

/* ---- limits ---- */

static void test_check_labels(void **state)
{
	struct store_label ok[] = {L("type", "cpu"), L("service_name", "ünïcode ok"), L("_x9", "")};
	struct store_label many[STORE_MAX_LABELS + 1];
	char err[256], longname[STORE_MAX_LABEL_NAME + 2], longval[STORE_MAX_LABEL_VALUE + 2];
	char names[STORE_MAX_LABELS + 1][8];
	struct store_label bad[2];
	size_t i;

	assert_int_equal(store_check_labels(ok, 3, err, sizeof(err)), 0);
	assert_int_equal(store_check_labels(NULL, 0, err, sizeof(err)), 0);

	for (i = 0; i <= STORE_MAX_LABELS; i++) {
		snprintf(names[i], sizeof(names[i]), "l%zu", i);
		many[i] = (struct store_label)L(names[i], "v");
	}
	assert_int_equal(store_check_labels(many, STORE_MAX_LABELS, err, sizeof(err)), 0);
	assert_int_equal(store_check_labels(many, STORE_MAX_LABELS + 1, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "at most 32"));

	bad[0] = (struct store_label)L("x y", "v");
	assert_int_equal(store_check_labels(bad, 1, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "label name 'x y' is not [A-Za-z_][A-Za-z0-9_]*");
	bad[0] = (struct store_label)L("9a", "v");
	assert_int_equal(store_check_labels(bad, 1, err, sizeof(err)), -EINVAL);
	bad[0] = (struct store_label)L("", "v");
	assert_int_equal(store_check_labels(bad, 1, err, sizeof(err)), -EINVAL);

	memset(longname, 'a', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = '\0';
	bad[0] = (struct store_label)L(longname, "v");
	assert_int_equal(store_check_labels(bad, 1, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "longer than 64"));
	longname[STORE_MAX_LABEL_NAME] = '\0'; /* exactly 64: fine */
	assert_int_equal(store_check_labels(bad, 1, err, sizeof(err)), 0);

	memset(longval, 'v', sizeof(longval) - 1);
	longval[sizeof(longval) - 1] = '\0';
	bad[0] = (struct store_label)L("a", longval);
	assert_int_equal(store_check_labels(bad, 1, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "longer than 1024"));
	longval[STORE_MAX_LABEL_VALUE] = '\0';
	assert_int_equal(store_check_labels(bad, 1, err, sizeof(err)), 0);

	/* Not UTF-8: a stray continuation byte, an overlong '/', a surrogate,
	 * a truncated sequence, past U+10FFFF. */
	{
		const char *bads[] = {"a\x80", "\xc0\xaf", "\xed\xa0\x80", "\xe2\x82",
				      "\xf4\x90\x80\x80"};

		for (i = 0; i < ARRAY_SIZE(bads); i++) {
			bad[0] = (struct store_label)L("a", bads[i]);
			assert_int_equal(store_check_labels(bad, 1, err, sizeof(err)), -EINVAL);
			assert_non_null(strstr(err, "not valid UTF-8"));
		}
		bad[0] = (struct store_label)L("a", "\xf0\x9f\x98\x80 \xe2\x82\xac");
		assert_int_equal(store_check_labels(bad, 1, err, sizeof(err)), 0);
	}

	bad[0] = (struct store_label)L("a", "1");
	bad[1] = (struct store_label)L("a", "2");
	assert_int_equal(store_check_labels(bad, 2, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "twice"));
	bad[1] = (struct store_label)L("b", NULL);
	assert_int_equal(store_check_labels(bad, 2, err, sizeof(err)), -EINVAL);
}

static void test_check_matchers(void **state)
{
	struct store_matcher m[2] = {{"comm", "py.*|java", STORE_RE}, {"pid", "1", STORE_NE}};
	char err[256], big[STORE_MAX_MATCHER_VALUE + 2];

	assert_int_equal(store_check_matchers(m, 2, err, sizeof(err)), 0);
	m[0].value = "(unclosed";
	assert_int_equal(store_check_matchers(m, 1, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "bad regex for 'comm'"));
	m[0].value = "(a)\\1";
	assert_int_equal(store_check_matchers(m, 1, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "back-reference"));
	m[0].value = "[\\1]"; /* in a bracket: a backslash and a 1, no back-reference */
	assert_int_equal(store_check_matchers(m, 1, err, sizeof(err)), 0);
	m[0].name = "bad-name";
	assert_int_equal(store_check_matchers(m, 1, err, sizeof(err)), -EINVAL);
	m[0].name = "comm";
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	m[0].value = big;
	assert_int_equal(store_check_matchers(m, 1, err, sizeof(err)), -EINVAL);
	m[0].op = 7;
	m[0].value = "x";
	assert_int_equal(store_check_matchers(m, 1, err, sizeof(err)), -EINVAL);

	/* Regexes whose compilation would have no bound are refused (by the
	 * guard of common/regex.h, tested on its own in test_common.c);
	 * ordinary ones, repetitions included, are not. */
	{
		static const char *const refused[] = {
			"(((a+)*)+)*",
			"((a+)*)+",
			"a{600}",
			"(a{200}){200}",
			"x{1,99999999999999999999}",
			"(){8,484}`",
			"4{,5555}",
			"a{1,2}{0000000000000000000300}",
			"(a|b){,32}{,32}[ ]",
		};
		static const char *const fine[] = {
			"python.*",	      "(py|ba).+",     "a{256}", "(a+)*",
			"[[:alpha:]]+x{2,3}", "(a|b){,16}[ ]", "[]a+]*", "\\{1000}",
		};
		char plus[160];
		size_t i;

		m[0].op = STORE_RE;
		memset(plus, '+', sizeof(plus) - 1);
		plus[0] = 'p';
		plus[sizeof(plus) - 1] = '\0';
		m[0].value = plus;
		assert_int_equal(store_check_matchers(m, 1, err, sizeof(err)), -EINVAL);
		assert_non_null(strstr(err, "bad regex for 'comm'"));
		for (i = 0; i < ARRAY_SIZE(refused); i++) {
			m[0].value = refused[i];
			if (store_check_matchers(m, 1, err, sizeof(err)) != -EINVAL)
				fail_msg("'%s' was accepted", refused[i]);
		}
		for (i = 0; i < ARRAY_SIZE(fine); i++) {
			m[0].value = fine[i];
			if (store_check_matchers(m, 1, err, sizeof(err)))
				fail_msg("'%s' was refused: %s", fine[i], err);
		}
	}
}

/* ---- building blocks ---- */

static void test_varint_idmap(void **state)
{
	uint64_t vals[] = {0, 1, 127, 128, 16383, 16384, UINT32_MAX, INT64_MAX, UINT64_MAX};
	uint8_t buf[VARINT_MAX * 9], *p = buf;
	const uint8_t *r = buf;
	struct idmap m = {0};
	uint32_t *ref;
	size_t i, n = 0;
	uint64_t v;

	for (i = 0; i < ARRAY_SIZE(vals); i++)
		n += varint_put(buf + n, vals[i]);
	for (i = 0; i < ARRAY_SIZE(vals); i++) {
		assert_true(varint_get(&r, buf + n, &v));
		assert_true(v == vals[i]);
	}
	assert_ptr_equal(r, buf + n);
	assert_false(varint_get(&r, buf + n, &v));
	p = buf;
	memset(buf, 0xff, 11);
	r = p;
	assert_false(varint_get(&r, buf + 11, &v)); /* 11 continuation bytes */
	assert_ptr_equal(r, p);

	/* The map against a plain array, through growth and deletions; keys
	 * shared by several ids (a multimap, as for hash collisions). */
	ref = calloc(20001, sizeof(*ref));
	for (i = 1; i <= 20000; i++) {
		assert_int_equal(idmap__put(&m, i % 7000, (uint32_t)i), 0);
		ref[i] = 1;
	}
	for (i = 1; i <= 20000; i += 3) {
		idmap__del(&m, i % 7000, (uint32_t)i);
		ref[i] = 0;
	}
	idmap__del(&m, 123456, 5); /* absent: a no-op */
	for (i = 1; i <= 20000; i++) {
		size_t pos = IDMAP_START;
		uint32_t id;
		bool seen = false;

		while ((id = idmap__next(&m, i % 7000, &pos)))
			if (id == i)
				seen = true;
		assert_int_equal(seen, ref[i]);
	}
	assert_int_equal(m.count, 20000 - 6667);
	idmap__free(&m);
	free(ref);

	/* Reserved room takes that many entries without a rehash (the slots
	 * stay where they are), and the entries before it stay found. */
	assert_int_equal(idmap__put(&m, 42, 1), 0);
	assert_int_equal(idmap__reserve(&m, 5000), 0);
	{
		struct idmap_slot *slots = m.slots;

		for (i = 2; i <= 5001; i++)
			assert_int_equal(idmap__put(&m, i * 977, (uint32_t)i), 0);
		assert_ptr_equal(m.slots, slots);
	}
	assert_int_equal(idmap__get(&m, 42), 1);
	assert_int_equal(idmap__get(&m, 5001 * 977), 5001);
	idmap__free(&m);
}

/* ---- round trip ---- */

static void test_roundtrip(void **state)
{
	struct store_label a[] = {L("type", "cpu"), L("service_name", "app"), L("pid", "10")};
	struct store_label b[] = {L("pid", "20"), L("service_name", "app"), L("type", "cpu"),
				  L("empty", "")};
	struct store_matcher ma[] = {{"pid", "10", STORE_EQ}};
	char *dir = new_place(), unit[64];
	struct store *s = store__open(dir);
	struct profile *p1, *p2;
	struct store_window w[2];
	struct store_stats st;
	double tl[4];
	char *got;

	assert_non_null(s);
	assert_string_equal(s->ops->name, store_url ? "clickhouse" : "sqlite");
	p1 = prof("samples", "main;run;hot_a", 600);
	add(p1, "main;run;hot_b", 300);
	add(p1, "main;read;!vdso_fn;sys_read_[k];vfs_read_[k]", 7);
	add(p1, "main;run;hot_b", 5); /* the same stack again: summed */
	p2 = prof("samples", "main;run;hot_a", 40);
	add(p2, "main", 1);
	add(p2, "main;zero", 0); /* value 0: skipped */

	w[0] = (struct store_window){a, 3, 10000, 20000, p1, NULL};
	w[1] = (struct store_window){b, 4, 10000, 20000, p2, NULL};
	assert_int_equal(store__put_windows(s, w, 2), 0);

	got = sel(s, query(0, 100000, NULL, 0), unit);
	assert_string_equal(got, "main 1\n"
				 "main;read;!vdso_fn;sys_read_[k];vfs_read_[k] 7\n"
				 "main;run;hot_a 640\n"
				 "main;run;hot_b 305\n");
	assert_string_equal(unit, "samples");
	free(got);
	assert_sel(s, query(0, 100000, ma, 1),
		   "main;read;!vdso_fn;sys_read_[k];vfs_read_[k] 7\nmain;run;hot_a 600\n"
		   "main;run;hot_b 305\n");

	/* Modules and kernel-ness survive; pid, tid and comm are not kept. */
	{
		struct profile *out = profile__new("cpu", "", 0);
		struct store_query q = query(0, 100000, ma, 1);
		size_t i;
		bool kernel_seen = false;

		assert_int_equal(store__select(s, &q, out, NULL, 0), 0);
		for (i = 0; i < out->nlocs; i++) {
			const char *f = profile__str(out, out->locs[i].func);
			const char *m = profile__str(out, out->locs[i].module);

			if (!strcmp(f, "vfs_read") || !strcmp(f, "sys_read")) {
				assert_true(out->locs[i].kernel);
				assert_string_equal(m, "[kernel.kallsyms]");
				kernel_seen = true;
			} else if (!strcmp(f, "vdso_fn")) {
				assert_int_equal(out->locs[i].module, 0);
			} else {
				assert_string_equal(m, "/usr/bin/app");
				assert_false(out->locs[i].kernel);
			}
		}
		assert_true(kernel_seen);
		for (i = 0; i < out->nsamples; i++) {
			assert_int_equal(out->samples[i].pid, 0);
			assert_string_equal(profile__str(out, out->samples[i].comm), "");
		}
		profile__free(out);
	}

	/* Timeline: [10 s, 20 s) over steps of 5 s from 5 s: half and half. */
	{
		struct store_query q = query(5000, 25000, NULL, 0);

		assert_int_equal(store__timeline(s, &q, 5000, tl, 4), 0);
		assert_true(tl[0] == 0 && tl[3] == 0);
		assert_true(fabs(tl[1] - 953 / 2.0) < 1e-9 && fabs(tl[2] - 953 / 2.0) < 1e-9);
	}

	assert_string_equal(names_of(s, query(0, 100000, NULL, 0)), "pid,service_name,type");
	assert_string_equal(values_of(s, query(0, 100000, NULL, 0), "pid"), "10,20");
	assert_string_equal(values_of(s, query(0, 100000, ma, 1), "pid"), "10");
	assert_string_equal(values_of(s, query(0, 100000, NULL, 0), "empty"), "");

	store__stats(s, &st);
	assert_int_equal(st.series, 2);
	assert_int_equal(st.windows, 2);
	assert_int_equal(st.samples, 3 + 2); /* distinct stacks per window */
	/* SQLite: the trie's nodes, main, run, hot_a, hot_b, read, vdso_fn,
	 * sys_read, vfs_read; ClickHouse: the distinct stacks */
	assert_int_equal(st.stacks, store_url ? 4 : 8);
	assert_int_equal(st.functions, 8);
	assert_true(st.bytes_on_disk > 0);

	/* A window empty after skipping zeros stores nothing. */
	profile__free(p2);
	p2 = prof("samples", "main;zero", 0);
	assert_int_equal(put1(s, b, 4, 30000, 40000, p2), 0);
	store__stats(s, &st);
	assert_int_equal(st.windows, 2);
	assert_string_equal(values_of(s, query(30000, 40000, NULL, 0), "pid"), "");

	profile__free(p1);
	profile__free(p2);
	store__close(s);
	drop_place(dir);
}

static void test_dedup(void **state)
{
	char *dir = new_place(), name[32];
	struct store *s = store__open(dir);
	struct store_stats st;
	struct profile *p;
	int i;

	assert_non_null(s);
	p = prof("samples", "main;a;b;c", 1);
	for (i = 0; i < 20; i++) {
		struct store_label l[] = {L("type", "cpu"), L("service_name", name)};

		snprintf(name, sizeof(name), "svc%d", i % 4);
		assert_int_equal(put1(s, l, 2, i * 10000, (i + 1) * 10000, p), 0);
	}
	store__stats(s, &st);
	assert_int_equal(st.stacks, store_url ? 1 : 4); /* one stack (SQLite: its 4 nodes), once */
	assert_int_equal(st.functions, 4);
	assert_int_equal(st.series, 4);
	assert_int_equal(st.windows, 20);
	assert_int_equal(st.samples, 20);
	profile__free(p);

	/* A stack sharing the prefix adds one node; the same names in the kernel
	 * are other functions. */
	p = prof("samples", "main;a;b;d", 1);
	add(p, "main_[k];a_[k]", 1);
	{
		struct store_label l[] = {L("type", "cpu"), L("service_name", "svc0")};

		assert_int_equal(put1(s, l, 2, 500000, 510000, p), 0);
	}
	store__stats(s, &st);
	assert_int_equal(st.stacks, store_url ? 3 : 4 + 1 + 2);
	assert_int_equal(st.functions, 4 + 1 + 2);
	assert_int_equal(st.series, 4);
	assert_sel(s, query(0, 1000000, NULL, 0),
		   "main;a;b;c 20\nmain;a;b;d 1\nmain_[k];a_[k] 1\n");
	profile__free(p);

	/* After a reopen the names, hashed now from the stored rows rather than
	 * by the profile, still find their functions and stacks. */
	store__close(s);
	s = store__open(dir);
	assert_non_null(s);
	p = prof("samples", "main;a;b;c", 1);
	add(p, "main_[k];a_[k]", 1);
	{
		struct store_label l[] = {L("type", "cpu"), L("service_name", "svc1")};

		assert_int_equal(put1(s, l, 2, 600000, 610000, p), 0);
	}
	store__stats(s, &st);
	assert_int_equal(st.stacks, store_url ? 3 : 4 + 1 + 2);
	assert_int_equal(st.functions, 4 + 1 + 2);
	profile__free(p);
	store__close(s);
	drop_place(dir);
}

/* Many windows in one put, their stacks drawn from a few names so that
 * most share prefixes or repeat exactly, within a window, across windows
 * and across an hour boundary: each window reads back as it was written. */
static void test_put_many(void **state)
{
	enum { NW = 24, NSTACKS = 40 };
	/* "c" also names a kernel function: one string, two functions */
	static const char *names[] = {"a", "b", "c", "d", "sys_x_[k]", "c_[k]"};
	char *dir = new_place(), pids[NW][8], stack[256];
	struct store_label labels[NW][2];
	struct store_window w[NW];
	struct profile *p[NW];
	struct store *s = store__open(dir);
	unsigned int seed = 7;
	int64_t total = 0;
	int i, j, k;

	assert_non_null(s);
	for (i = 0; i < NW; i++) {
		p[i] = prof("samples", NULL, 0);
		for (j = 0; j < NSTACKS; j++) {
			int depth = 1 + (int)(rand_r(&seed) % 8), n = 0;

			n += snprintf(stack + n, sizeof(stack) - (size_t)n, "main");
			for (k = 0; k < depth; k++)
				n += snprintf(stack + n, sizeof(stack) - (size_t)n, ";%s",
					      names[rand_r(&seed) % (k + 1 < depth ? 4 : 6)]);
			add(p[i], stack, 1 + rand_r(&seed) % 3);
		}
		total += p[i]->total;
		snprintf(pids[i], sizeof(pids[i]), "%d", i);
		labels[i][0] = (struct store_label)L("type", "cpu");
		labels[i][1] = (struct store_label)L("pid", pids[i]);
		/* four ranges, two of them in the next hour */
		w[i] = (struct store_window){
			labels[i], 2,	3580000 + (i % 4) * 10000, 3590000 + (i % 4) * 10000,
			p[i],	   NULL};
	}
	assert_int_equal(store__put_windows(s, w, NW), 0);
	for (i = 0; i < NW; i++) {
		struct store_matcher m[] = {{"pid", pids[i], STORE_EQ}};
		char *want = canon(p[i]);

		assert_sel(s, query(w[i].start_ms, w[i].end_ms, m, 1), want);
		free(want);
		profile__free(p[i]);
	}
	assert_int_equal(sel_total(s, query(0, 7200000, NULL, 0)), total);
	store__close(s);
	drop_place(dir);
}

/* ---- keyed puts ---- */

/* A put sent again under its key (a retry whose answer was lost) is stored
 * once; another key is another put; the key goes with its windows. */
static void test_keyed_put(void **state)
{
	char *dir = new_place();
	struct store *s = store__open(dir);
	struct store_label l[] = {L("type", "cpu"), L("service_name", "svc")};
	struct profile *p = prof("samples", "main;a", 3), *empty = prof("samples", NULL, 0);
	struct store_window w = {l, 2, 10000, 20000, p, "node/1/0/cpu"};
	char long_key[STORE_MAX_PUT_KEY + 2];

	assert_non_null(s);
	assert_int_equal(store__put_windows(s, &w, 1), 0);
	assert_int_equal(store__put_windows(s, &w, 1), 1);
	assert_int_equal(sel_total(s, query(0, 100000, NULL, 0)), 3);
	w.key = "node/1/1/cpu";
	assert_int_equal(store__put_windows(s, &w, 1), 0);
	assert_int_equal(sel_total(s, query(0, 100000, NULL, 0)), 6);
	w.key = NULL; /* no key: puts add up */
	assert_int_equal(store__put_windows(s, &w, 1), 0);
	assert_int_equal(sel_total(s, query(0, 100000, NULL, 0)), 9);

	/* A key is its series': another series' put of the same key (another
	 * project's: the server's project label is a label) is stored, and
	 * keeps neither out (security probe, issue 22, finding 4). */
	{
		struct store_label lb[] = {L("type", "cpu"), L("service_name", "svc"),
					   L("__project", "b")};
		struct store_matcher mb[] = {{"__project", "b", STORE_EQ}};
		struct store_window wb = {lb, 3, 10000, 20000, p, "gpu-7/1795900000000/1/cpu"};
		struct store_window two[2] = {{lb, 3, 10000, 20000, empty, "node/1/8/cpu"},
					      {l, 2, 10000, 20000, p, NULL}};

		assert_int_equal(store__put_windows(s, &wb, 1), 0);
		w.key = "gpu-7/1795900000000/1/cpu";
		assert_int_equal(store__put_windows(s, &w, 1), 0);
		assert_int_equal(store__put_windows(s, &w, 1), 1);
		assert_int_equal(store__put_windows(s, &wb, 1), 1);
		assert_int_equal(sel_total(s, query(0, 100000, NULL, 0)), 15);
		assert_int_equal(sel_total(s, query(0, 100000, mb, 1)), 3);
		/* The series of the first window that stores something. */
		assert_int_equal(store__put_windows(s, two, 2), 0);
		w.key = wb.key = "node/1/8/cpu";
		assert_int_equal(store__put_windows(s, &w, 1), 1);
		assert_int_equal(store__put_windows(s, &wb, 1), 0);
		assert_int_equal(sel_total(s, query(0, 100000, NULL, 0)), 21);
	}
	memset(long_key, 'k', sizeof(long_key) - 1);
	long_key[sizeof(long_key) - 1] = 0;
	w.key = long_key;
	assert_int_equal(store__put_windows(s, &w, 1), -EINVAL);

	/* Kept across a reopen, and expired with the windows. */
	store__close(s);
	s = store__open(dir);
	assert_non_null(s);
	w.key = "node/1/0/cpu";
	assert_int_equal(store__put_windows(s, &w, 1), 1);
	expire_all(s, 30000);
	assert_int_equal(sel_total(s, query(0, 100000, NULL, 0)), 0);
	/* The key went with its window; the window sent again is older than
	 * the expiry mark: never read. */
	assert_int_equal(store__put_windows(s, &w, 1), 0);
	assert_int_equal(sel_total(s, query(0, 100000, NULL, 0)), 0);
	w.start_ms = 40000;
	w.end_ms = 50000;
	w.key = "node/1/2/cpu";
	assert_int_equal(store__put_windows(s, &w, 1), 0);
	assert_int_equal(store__put_windows(s, &w, 1), 1);
	assert_int_equal(sel_total(s, query(0, 100000, NULL, 0)), 3);
	profile__free(p);
	profile__free(empty);
	store__close(s);
	drop_place(dir);
}

/* ---- matchers ---- */

static void test_matchers(void **state)
{
	static const char *const comms[] = {"python3", "python", "java", "bash"};
	char *dir = new_place(), pid[16];
	struct store *s = store__open(dir);
	struct profile *p;
	size_t i;

	assert_non_null(s);
	for (i = 0; i < 4; i++) {
		struct store_label l[] = {L("type", "cpu"), L("comm", comms[i]), L("pid", pid),
					  L("gpu", i == 0 ? "0" : "")};

		snprintf(pid, sizeof(pid), "%zu", 100 + i);
		p = prof("samples", "main", (int64_t)1 << i); /* totals identify series */
		assert_int_equal(put1(s, l, 4, 0, 10000, p), 0);
		profile__free(p);
	}
	{
		struct {
			struct store_matcher m[2];
			size_t n;
			int64_t total;
		} cases[] = {
			{{{"comm", "python", STORE_EQ}}, 1, 2},
			{{{"comm", "python", STORE_NE}}, 1, 1 + 4 + 8},
			{{{"comm", "python.*", STORE_RE}}, 1, 1 + 2},
			{{{"comm", "ython", STORE_RE}}, 1, 0}, /* anchored */
			{{{"comm", "py.*|ba.*", STORE_RE}}, 1, 1 + 2 + 8},
			{{{"comm", "python.*", STORE_NRE}}, 1, 4 + 8},
			{{{"gpu", "", STORE_EQ}}, 1, 2 + 4 + 8}, /* missing == "" */
			{{{"gpu", "", STORE_NE}}, 1, 1},	 /* has one */
			{{{"nolabel", "", STORE_EQ}}, 1, 15},	 /* nobody has it */
			{{{"nolabel", ".+", STORE_RE}}, 1, 0},	 /* "" does not match .+ */
			{{{"gpu", "0|", STORE_RE}}, 1, 15},	 /* "" matches an empty branch */
			{{{"type", "cpu", STORE_EQ}, {"pid", "10[13]", STORE_RE}}, 2, 2 + 8},
			{{{"type", "offcpu", STORE_EQ}}, 1, 0},
		};

		for (i = 0; i < ARRAY_SIZE(cases); i++) {
			int64_t t = sel_total(s, query(0, 10000, cases[i].m, cases[i].n));

			if (t != cases[i].total)
				fail_msg("case %zu: total %" PRId64 ", wanted %" PRId64, i, t,
					 cases[i].total);
		}
	}
	{
		struct store_matcher bad[] = {{"comm", "(", STORE_RE}};
		struct store_query q = query(0, 10000, bad, 1);
		struct profile *out = profile__new("cpu", "", 0);
		double v[1];

		assert_int_equal(store__select(s, &q, out, NULL, 0), -EINVAL);
		assert_int_equal(store__timeline(s, &q, 1000, v, 1), -EINVAL);
		q = query(10, 10, NULL, 0); /* empty range */
		assert_int_equal(store__select(s, &q, out, NULL, 0), -EINVAL);
		profile__free(out);
	}
	store__close(s);
	drop_place(dir);
}

/* ---- time ranges ---- */

static void test_time_range(void **state)
{
	struct store_label l[] = {L("type", "cpu")};
	char *dir = new_place();
	struct store *s = store__open(dir);
	struct profile *p[3];
	double tl[8];
	int i;

	assert_non_null(s);
	/* [0, 10 s) 1, [10 s, 20 s) 10, [20 s, 30 s) 100, and a long one
	 * [100 s, 200 s) 1000 that later short reads must still find. */
	for (i = 0; i < 3; i++) {
		p[i] = prof("samples", "main", i == 0 ? 1 : i == 1 ? 10 : 100);
		assert_int_equal(put1(s, l, 1, i * 10000, (i + 1) * 10000, p[i]), 0);
		profile__free(p[i]);
	}
	p[0] = prof("samples", "main", 1000);
	assert_int_equal(put1(s, l, 1, 100000, 200000, p[0]), 0);
	profile__free(p[0]);

	assert_int_equal(sel_total(s, query(10000, 20000, NULL, 0)), 10);
	assert_int_equal(sel_total(s, query(9999, 10001, NULL, 0)), 11);
	assert_int_equal(sel_total(s, query(0, 1, NULL, 0)), 1);
	assert_int_equal(sel_total(s, query(30000, 40000, NULL, 0)), 0); /* end is exclusive */
	assert_int_equal(sel_total(s, query(-5000, 0, NULL, 0)), 0);
	assert_int_equal(sel_total(s, query(5000, 25000, NULL, 0)), 111);
	assert_int_equal(sel_total(s, query(150000, 150001, NULL, 0)), 1000);
	assert_int_equal(sel_total(s, query(199999, 300000, NULL, 0)), 1000);
	assert_int_equal(sel_total(s, query(200000, 300000, NULL, 0)), 0);

	/* Proportional spreading: [0, 30 s) in steps of 4 s. */
	{
		struct store_query q = query(0, 32000, NULL, 0);
		double want[8] = {0.4, 0.4, 0.2 + 2.0, 4.0, 4.0, 40, 40, 20};

		assert_int_equal(store__timeline(s, &q, 4000, tl, 8), 0);
		for (i = 0; i < 8; i++)
			if (fabs(tl[i] - want[i]) > 1e-9)
				fail_msg("step %d: %g, wanted %g", i, tl[i], want[i]);
	}
	/* A window partly outside the grid gives only its share inside it. */
	{
		struct store_query q = query(150000, 160000, NULL, 0);

		assert_int_equal(store__timeline(s, &q, 5000, tl, 2), 0);
		assert_true(fabs(tl[0] - 50) < 1e-9 && fabs(tl[1] - 50) < 1e-9);
	}
	{
		struct store_query q = query(0, 1000, NULL, 0);

		assert_int_equal(store__timeline(s, &q, 0, tl, 1), -EINVAL);
	}
	store__close(s);
	drop_place(dir);
}

/* ---- series totals ---- */

struct got_totals {
	char text[1024];
	int calls;
};

static void collect_totals(void *ctx, const struct store_label *labels, size_t nlabels,
			   int64_t total, int64_t first, int64_t last)
{
	struct got_totals *g = ctx;
	const char *svc = "";
	size_t len = strlen(g->text);

	for (size_t i = 0; i < nlabels; i++)
		if (!strcmp(labels[i].name, "service_name"))
			svc = labels[i].value;
	snprintf(g->text + len, sizeof(g->text) - len, "%s%s=%" PRId64 "@%" PRId64 "-%" PRId64,
		 len ? " " : "", svc, total, first, last);
	g->calls++;
}

/* Each matching series once, with its total and the extent of its windows
 * in range, whatever the order the store reads them in. */
static void test_series_totals(void **state)
{
	struct store_label a[] = {L("type", "cpu"), L("service_name", "a")};
	struct store_label b[] = {L("type", "cpu"), L("service_name", "b")};
	struct store_label bw[] = {L("type", "wall"), L("service_name", "b")};
	struct store_matcher cpu = {.name = "type", .op = STORE_EQ, .value = "cpu"};
	char *dir = new_place();
	struct store *s = store__open(dir);
	struct got_totals g;
	struct profile *p;
	struct store_query q;

	assert_non_null(s);
	p = prof("samples", "main", 5);
	assert_int_equal(put1(s, a, 2, 10000, 20000, p), 0);
	assert_int_equal(put1(s, a, 2, 40000, 50000, p), 0);
	assert_int_equal(put1(s, b, 2, 20000, 30000, p), 0);
	assert_int_equal(put1(s, bw, 2, 0, 90000, p), 0);
	profile__free(p);
	p = prof("samples", "other", 7);
	assert_int_equal(put1(s, b, 2, 20000, 30000, p), 0);
	profile__free(p);

	memset(&g, 0, sizeof(g));
	q = query(0, 100000, &cpu, 1);
	assert_int_equal(store__series_totals(s, &q, collect_totals, &g), 0);
	assert_int_equal(g.calls, 2);
	assert_non_null(strstr(g.text, "a=10@10000-50000"));
	assert_non_null(strstr(g.text, "b=12@20000-30000"));
	/* Only what is in range: a's second window alone. */
	memset(&g, 0, sizeof(g));
	q = query(35000, 100000, &cpu, 1);
	assert_int_equal(store__series_totals(s, &q, collect_totals, &g), 0);
	assert_string_equal(g.text, "a=5@40000-50000");
	/* Nothing in range, nothing called. */
	memset(&g, 0, sizeof(g));
	q = query(95000, 100000, NULL, 0);
	assert_int_equal(store__series_totals(s, &q, collect_totals, &g), 0);
	assert_int_equal(g.calls, 0);
	q = query(0, 100000, NULL, 0);
	assert_int_equal(store__series_totals(s, &q, NULL, NULL), -EINVAL);
	store__close(s);
	drop_place(dir);
}

/* Values up to INT64_MAX sum to at most INT64_MAX in every read, however
 * many are summed and wherever a store adds them (the ClickHouse store's
 * hourly rollup, whose Int64 sums wrap, and the windows at a range's
 * edges alike): no read fails, and a series beside reads exactly
 * (security probe, issue 22, finding 7). */
static void test_saturated_sums(void **state)
{
	struct store_label big[] = {L("type", "cpu"), L("service_name", "big")};
	struct store_label small[] = {L("type", "cpu"), L("service_name", "small")};
	const int64_t q62 = (int64_t)1 << 62;
	char *dir = new_place(), *got, *want;
	struct store *s = store__open(dir);
	struct store_query q = query(H + H / 2, 5 * H, NULL, 0);
	struct got_totals g = {0};
	double tl[7], sum = 0;
	struct profile *p;
	int k;

	assert_non_null(s);
	/* Four windows of 2^62 in hour 3, whole in the range (their Int64 sum
	 * wraps to 0), one at its edge, and one of INT64_MAX of another stack
	 * twice. */
	p = prof("samples", "main;x", q62);
	for (k = 0; k < 4; k++)
		assert_int_equal(put1(s, big, 2, 3 * H + k * 60000, 3 * H + (k + 1) * 60000, p), 0);
	assert_int_equal(put1(s, big, 2, H + H / 2, H + H / 2 + 60000, p), 0);
	profile__free(p);
	p = prof("samples", "main;z", INT64_MAX);
	assert_int_equal(put1(s, big, 2, 4 * H, 4 * H + 60000, p), 0);
	assert_int_equal(put1(s, big, 2, 4 * H + 60000, 4 * H + 120000, p), 0);
	profile__free(p);
	p = prof("samples", "main;y", 5);
	assert_int_equal(put1(s, small, 2, 3 * H, 3 * H + 60000, p), 0);
	profile__free(p);

	got = sel(s, q, NULL);
	want = "main;x 9223372036854775807\nmain;y 5\nmain;z 9223372036854775807\n";
	if (strcmp(got, want))
		fail_msg("got\n%swanted\n%s", got, want);
	free(got);
	assert_int_equal(sel_total(s, q), INT64_MAX);
	assert_int_equal(store__series_totals(s, &q, collect_totals, &g), 0);
	assert_int_equal(g.calls, 2);
	assert_non_null(strstr(g.text, "big=9223372036854775807@5400000-14520000"));
	assert_non_null(strstr(g.text, "small=5@10800000-10860000"));
	assert_int_equal(store__timeline(s, &q, H / 2, tl, 7), 0);
	for (k = 0; k < 7; k++) {
		assert_true(isfinite(tl[k]) && tl[k] >= 0);
		sum += tl[k];
	}
	assert_true(sum >= 9.2e18);
	/* The small series alone, exactly. */
	{
		struct store_matcher m[] = {{"service_name", "small", STORE_EQ}};

		assert_int_equal(sel_total(s, query(H + H / 2, 5 * H, m, 1)), 5);
	}
	store__close(s);
	drop_place(dir);
}

/* ---- points ---- */

struct got_points {
	char text[2048];
};

static void collect_points(void *ctx, const char *name, const struct store_label *labels,
			   size_t nlabels, const int64_t *ts, const double *values, size_t n)
{
	struct got_points *g = ctx;
	size_t i, len = strlen(g->text);

	len += snprintf(g->text + len, sizeof(g->text) - len, "%s{", name);
	for (i = 0; i < nlabels; i++)
		len += snprintf(g->text + len, sizeof(g->text) - len, "%s%s=%s", i ? "," : "",
				labels[i].name, labels[i].value);
	len += snprintf(g->text + len, sizeof(g->text) - len, "}");
	for (i = 0; i < n; i++)
		len += snprintf(g->text + len, sizeof(g->text) - len, " %" PRId64 ":%g", ts[i],
				values[i]);
	snprintf(g->text + len, sizeof(g->text) - len, "\n");
}

static const char *points_of(struct store *s, const char *name, struct store_query q)
{
	static struct got_points g;

	memset(&g, 0, sizeof(g));
	assert_int_equal(store__points(s, name, &q, collect_points, &g), 0);
	return g.text;
}

static void test_points(void **state)
{
	struct store_label g0[] = {L("gpu_id", "0"), L("node", "n1")};
	struct store_label g1[] = {L("node", "n1"), L("gpu_id", "1")};
	struct store_matcher m[] = {{"gpu_id", "1", STORE_EQ}};
	struct store_point pts[] = {
		{"gpu_memory_used_bytes", g0, 2, 3000, 6.4e10},
		{"gpu_memory_used_bytes", g0, 2, 1000, 1.5},
		{"gpu_memory_used_bytes", g1, 2, 2000, 7},
		{"nccl_calls", g0, 2, 1000, 3},
		{"gpu_memory_used_bytes", g0, 2, 2000, NAN},
	};
	char *dir = new_place();
	struct store *s = store__open(dir);
	struct store_stats st;

	assert_non_null(s);
	assert_int_equal(store__put_points(s, pts, ARRAY_SIZE(pts)), 0);
	assert_string_equal(
		points_of(s, "gpu_memory_used_bytes", query(0, 10000, NULL, 0)),
		"gpu_memory_used_bytes{gpu_id=0,node=n1} 1000:1.5 2000:nan 3000:6.4e+10\n"
		"gpu_memory_used_bytes{gpu_id=1,node=n1} 2000:7\n");
	assert_string_equal(points_of(s, "gpu_memory_used_bytes", query(1000, 3000, m, 1)),
			    "gpu_memory_used_bytes{gpu_id=1,node=n1} 2000:7\n");
	/* [from, until): 3000 is out, and a series with nothing in range is
	 * not reported. */
	assert_string_equal(points_of(s, "gpu_memory_used_bytes", query(2500, 3000, NULL, 0)), "");
	assert_string_equal(points_of(s, "nccl_calls", query(0, 10000, NULL, 0)),
			    "nccl_calls{gpu_id=0,node=n1} 1000:3\n");
	assert_string_equal(points_of(s, "nope", query(0, 10000, NULL, 0)), "");
	store__stats(s, &st);
	assert_int_equal(st.points, 5);

	/* The same series and time again: the value is replaced, not added. */
	pts[1].value = 2.5;
	assert_int_equal(store__put_points(s, &pts[1], 1), 0);
	assert_string_equal(points_of(s, "gpu_memory_used_bytes", query(1000, 1001, NULL, 0)),
			    "gpu_memory_used_bytes{gpu_id=0,node=n1} 1000:2.5\n");
	store__stats(s, &st);
	assert_int_equal(st.points, 5);

	/* Bad names and labels: nothing written. */
	{
		struct store_label badl[] = {L("bad name", "x")};
		struct store_point bad[] = {pts[0], {"bad-name", g0, 2, 1, 1}};
		struct got_points gp = {{0}};
		struct store_query q = query(0, 10, NULL, 0);

		assert_int_equal(store__put_points(s, bad, 2), -EINVAL);
		bad[1] = (struct store_point){"ok_name", badl, 1, 1, 1};
		assert_int_equal(store__put_points(s, bad, 2), -EINVAL);
		store__stats(s, &st);
		assert_int_equal(st.points, 5);
		assert_int_equal(store__points(s, "bad-name", &q, collect_points, &gp), -EINVAL);
	}
	store__close(s);
	drop_place(dir);
}

/* ---- GPU timeline spans ---- */

static void collect_spans(void *ctx, const struct store_label *labels, size_t nlabels,
			  const struct store_span *sp)
{
	char **out = ctx, *line;
	size_t i;

	assert_true(asprintf(&line, "%s%s", *out, "{") > 0);
	free(*out);
	*out = line;
	for (i = 0; i < nlabels; i++) {
		assert_true(asprintf(&line, "%s%s%s=%s", *out, i ? "," : "", labels[i].name,
				     labels[i].value) > 0);
		free(*out);
		*out = line;
	}
	assert_true(
		asprintf(&line,
			 "%s} %" PRId64 "-%" PRId64 " gpu%d/s%u c%u t%u b%" PRIu64 " %s %s <%s>\n",
			 *out, sp->start_ns, sp->end_ns, sp->device, sp->stream, sp->correlation,
			 sp->tid, sp->bytes, sp->kind, sp->name, sp->from) > 0);
	free(*out);
	*out = line;
}

/* The spans of q (at most limit), one line each; *truncated set. */
static char *spans_of(struct store *s, struct store_query q, size_t limit, bool *truncated)
{
	static char *last;
	bool t = false;

	free(last);
	last = strdup("");
	assert_int_equal(store__spans(s, &q, limit, collect_spans, &last, &t), 0);
	if (truncated)
		*truncated = t;
	return last;
}

#define MS 1000000LL

static void test_spans(void **state)
{
	struct store_label p1[] = {L("node", "n1"), L("pid", "42")};
	struct store_label p2[] = {L("pid", "43"), L("node", "n1")};
	struct store_matcher m[] = {{"pid", "43", STORE_EQ}};
	struct store_span sp[] = {
		{p1, 2, 1000 * MS + 5, 1000 * MS + 2005, 0, 7, 1, 100, 0, "kernel", "add<float>",
		 "train.py:12 step < main"},
		{p1, 2, 1000 * MS + 3000, 1000 * MS + 4000, 0, 13, 2, 100, 4096, "memcpy HtoD",
		 "[memcpy HtoD]", ""},
		{p2, 2, 2000 * MS, 2001 * MS, 1, 7, 9, 101, 0, "kernel", "gemm", "main"},
		/* Long before, and one across the range's start. */
		{p1, 2, 10 * MS, 11 * MS, 0, 7, 3, 100, 0, "kernel", "old", ""},
		{p1, 2, 900 * MS, 1001 * MS, 0, 7, 4, 100, 0, "kernel", "long", ""},
	};
	char *dir = new_place();
	struct store *s = store__open(dir);
	struct store_stats st;
	bool truncated;

	assert_non_null(s);
	assert_int_equal(store__put_spans(s, sp, ARRAY_SIZE(sp)), 0);
	/* In order of start, exact to the nanosecond; ranges in ms overlap. */
	assert_string_equal(
		spans_of(s, query(1000, 3000, NULL, 0), 100, &truncated),
		"{node=n1,pid=42} 900000000-1001000000 gpu0/s7 c4 t100 b0 kernel long <>\n"
		"{node=n1,pid=42} 1000000005-1000002005 gpu0/s7 c1 t100 b0 kernel add<float> "
		"<train.py:12 step < main>\n"
		"{node=n1,pid=42} 1000003000-1000004000 gpu0/s13 c2 t100 b4096 memcpy HtoD "
		"[memcpy HtoD] <>\n"
		"{node=n1,pid=43} 2000000000-2001000000 gpu1/s7 c9 t101 b0 kernel gemm <main>\n");
	assert_false(truncated);
	/* A matcher picks a process; a limit cuts and says so. */
	assert_string_equal(
		spans_of(s, query(0, 3000, m, 1), 100, NULL),
		"{node=n1,pid=43} 2000000000-2001000000 gpu1/s7 c9 t101 b0 kernel gemm <main>\n");
	assert_string_equal(
		spans_of(s, query(0, 3000, NULL, 0), 1, &truncated),
		"{node=n1,pid=42} 10000000-11000000 gpu0/s7 c3 t100 b0 kernel old <>\n");
	assert_true(truncated);
	assert_string_equal(spans_of(s, query(1002, 2000, NULL, 0), 100, NULL), "");
	/* The same span again (a retry) is one. */
	assert_int_equal(store__put_spans(s, &sp[2], 1), 0);
	assert_string_equal(
		spans_of(s, query(0, 3000, m, 1), 100, NULL),
		"{node=n1,pid=43} 2000000000-2001000000 gpu1/s7 c9 t101 b0 kernel gemm <main>\n");
	if (!store_url) {
		store__stats(s, &st);
		assert_int_equal(st.spans, 6); /* the retry counted twice: an estimate */
	}

	/* Past the bounds: nothing written. */
	{
		struct store_span bad[] = {sp[0], sp[0]};
		char name[STORE_MAX_SPAN_NAME + 2];
		char err[256];

		bad[1].end_ns = bad[1].start_ns - 1;
		assert_int_equal(store__put_spans(s, bad, 2), -EINVAL);
		assert_int_equal(store_check_span(&bad[1], 1, err, sizeof(err)), -EINVAL);
		assert_string_equal(
			err, "span 1: its end is before its start, or its start before 1970");
		bad[1] = sp[0];
		bad[1].end_ns = bad[1].start_ns + STORE_MAX_SPAN_NS + 1;
		assert_int_equal(store__put_spans(s, bad, 2), -EINVAL);
		memset(name, 'x', sizeof(name) - 1);
		name[sizeof(name) - 1] = '\0';
		bad[1] = sp[0];
		bad[1].name = name;
		assert_int_equal(store__put_spans(s, bad, 2), -EINVAL);
		bad[1] = sp[0];
		bad[1].kind = "";
		assert_int_equal(store__put_spans(s, bad, 2), -EINVAL);
		bad[1] = sp[0];
		bad[1].name = "\xff\xfe";
		assert_int_equal(store__put_spans(s, bad, 2), -EINVAL);
		bad[1].start_ns = 5000 * MS;
		bad[1].end_ns = 5001 * MS;
		assert_string_equal(spans_of(s, query(4000, 6000, NULL, 0), 100, NULL), "");
	}

	/* Expiry: spans that ended by the mark go, at once for reads. */
	assert_int_equal(store__expire(s, 1500), 0);
	assert_string_equal(
		spans_of(s, query(0, 3000, NULL, 0), 100, NULL),
		"{node=n1,pid=43} 2000000000-2001000000 gpu1/s7 c9 t101 b0 kernel gemm <main>\n");
	if (!store_url) {
		store__stats(s, &st);
		assert_int_equal(st.spans, 2);
	}
	store__close(s);

	/* ...and what is stored survives a reopen. */
	s = store__open(dir);
	assert_non_null(s);
	assert_string_equal(
		spans_of(s, query(0, 3000, NULL, 0), 100, NULL),
		"{node=n1,pid=43} 2000000000-2001000000 gpu1/s7 c9 t101 b0 kernel gemm <main>\n");
	store__close(s);
	drop_place(dir);
}

/* ---- all or nothing ---- */

static void test_put_rejects(void **state)
{
	struct store_label ok[] = {L("type", "cpu")};
	struct store_label notype[] = {L("service_name", "x")};
	struct store_label emptytype[] = {L("type", "")};
	struct store_label badname[] = {L("type", "cpu"), L("a b", "x")};
	char *dir = new_place();
	struct store *s = store__open(dir);
	struct profile *p = prof("samples", "main;new_a;new_b", 3), *broken;
	struct store_window w[2];
	struct store_stats before, after;

	assert_non_null(s);
	assert_int_equal(put1(s, ok, 1, 0, 10000, p), 0);
	store__stats(s, &before);

	w[0] = (struct store_window){ok, 1, 20000, 30000, p, NULL};
	w[1] = (struct store_window){notype, 1, 20000, 30000, p, NULL};
	assert_int_equal(store__put_windows(s, w, 2), -EINVAL);
	w[1] = (struct store_window){emptytype, 1, 20000, 30000, p, NULL};
	assert_int_equal(store__put_windows(s, w, 2), -EINVAL);
	w[1] = (struct store_window){badname, 2, 20000, 30000, p, NULL};
	assert_int_equal(store__put_windows(s, w, 2), -EINVAL);
	w[1] = (struct store_window){ok, 1, 30000, 30000, p, NULL};
	assert_int_equal(store__put_windows(s, w, 2), -EINVAL);
	w[1] = (struct store_window){ok, 1, 30000, 40000, NULL, NULL};
	assert_int_equal(store__put_windows(s, w, 2), -EINVAL);

	/* A profile that fails half-way through resolving (a location index
	 * out of range) after the first window added new stacks and series:
	 * the transaction and the dictionaries are rolled back. */
	broken = prof("samples", "other;x;y", 1);
	broken->samples[0].locs[1] = 999;
	{
		struct store_label fresh[] = {L("type", "cpu"), L("service_name", "fresh")};
		struct profile *q = prof("samples", "brand;new;stack", 2);

		w[0] = (struct store_window){fresh, 2, 20000, 30000, q, NULL};
		w[1] = (struct store_window){ok, 1, 20000, 30000, broken, NULL};
		assert_int_equal(store__put_windows(s, w, 2), -EINVAL);
		store__stats(s, &after);
		assert_memory_equal(&before, &after, offsetof(struct store_stats, bytes_on_disk));
		assert_string_equal(values_of(s, query(0, 100000, NULL, 0), "service_name"), "");
		assert_int_equal(sel_total(s, query(0, 100000, NULL, 0)), 3);

		/* The same with the bad sample counting 0: still refused. */
		broken->samples[0].count = 0;
		assert_int_equal(store__put_windows(s, w, 2), -EINVAL);
		store__stats(s, &after);
		assert_memory_equal(&before, &after, offsetof(struct store_stats, bytes_on_disk));
		broken->samples[0].count = 1;

		/* And the store goes on: the same window alone is fine. */
		assert_int_equal(store__put_windows(s, w, 1), 0);
		assert_sel(s, query(0, 100000, NULL, 0), "brand;new;stack 2\nmain;new_a;new_b 3\n");
		profile__free(q);
	}
	profile__free(broken);
	profile__free(p);
	store__close(s);

	/* Durable state agrees after reopening (no row of the failed puts). */
	s = store__open(dir);
	assert_non_null(s);
	store__stats(s, &after);
	assert_int_equal(after.stacks, store_url ? 2 : 6);
	assert_int_equal(after.series, 2);
	assert_int_equal(after.windows, 2);
	store__close(s);
	drop_place(dir);
}

/* ---- expiry ---- */

static void test_expire(void **state)
{
	struct store_label old[] = {L("type", "cpu"), L("service_name", "old")};
	struct store_label both[] = {L("type", "cpu"), L("service_name", "both")};
	struct store_point pts[30];
	char *dir = make_dir();
	struct store *s = store_sqlite__open(dir);
	struct store_stats st;
	struct profile *p_old = prof("samples", "main;shared;old_only_a;old_only_b", 5);
	struct profile *p_new = prof("samples", "main;shared;new_only", 7);
	int i;

	assert_non_null(s);
	add(p_old, "main;shared", 1);
	/* Hour 0: 12 windows of "old" and "both" (two rows each step); hour 5:
	 * 3 windows of "both". */
	for (i = 0; i < 12; i++) {
		struct store_window w[2] = {{old, 2, i * 10000, (i + 1) * 10000, p_old, NULL},
					    {both, 2, i * 10000, (i + 1) * 10000, p_old, NULL}};

		assert_int_equal(store__put_windows(s, w, 2), 0);
	}
	for (i = 0; i < 3; i++)
		assert_int_equal(
			put1(s, both, 2, 5 * H + i * 10000, 5 * H + (i + 1) * 10000, p_new), 0);
	for (i = 0; i < 30; i++)
		pts[i] = (struct store_point){i < 25 ? "old_metric" : "new_metric", both, 2,
					      i < 25 ? i * 1000 : 5 * H + i, (double)i};
	assert_int_equal(store__put_points(s, pts, 30), 0);

	store__stats(s, &st);
	assert_int_equal(st.windows, 27);
	assert_int_equal(st.stacks, 5);
	assert_int_equal(st.series, 2);
	assert_int_equal(st.points, 30);

	/* One call does bounded work: EXPIRE_MAX_ROWS rows (one step's two
	 * windows each), EXPIRE_MAX_POINTS points, and no collection while
	 * windows remain. */
	assert_int_equal(store__expire(s, 3 * H), 0);
	store__stats(s, &st);
	assert_int_equal(st.windows, 27 - EXPIRE_MAX_ROWS * 2);
	assert_int_equal(st.points, 30 - EXPIRE_MAX_POINTS);
	assert_int_equal(st.stacks, 5);
	assert_int_equal(st.series, 2);

	expire_all(s, 3 * H);
	store__stats(s, &st);
	assert_int_equal(st.windows, 3);
	assert_int_equal(st.samples, 3);
	assert_int_equal(st.points, 5);
	/* main, shared, new_only are used by hour 5; old_only_a/_b are not. */
	assert_int_equal(st.stacks, 3);
	assert_int_equal(st.functions, 3);
	assert_int_equal(st.series, 1);
	assert_int_equal(sqlite_store(s)->dict.live_pseries, 1);

	assert_int_equal(sel_total(s, query(0, 3 * H, NULL, 0)), 0);
	assert_sel(s, query(0, 6 * H, NULL, 0), "main;shared;new_only 21\n");
	assert_string_equal(values_of(s, query(0, 6 * H, NULL, 0), "service_name"), "both");
	assert_string_equal(points_of(s, "old_metric", query(0, 6 * H, NULL, 0)), "");
	assert_string_equal(points_of(s, "new_metric", query(0, 6 * H, NULL, 0)),
			    "new_metric{service_name=both,type=cpu} 18000025:25 18000026:26"
			    " 18000027:27 18000028:28 18000029:29\n");

	/* Ids freed by the expiry are reused by new stacks and series, and
	 * reads stay exact. */
	{
		struct store_label fresh[] = {L("type", "cpu"), L("service_name", "fresh")};
		struct profile *p = prof("samples", "x1;x2;x3;x4", 9);

		assert_int_equal(store__expire(s, 3 * H), 0); /* flushes the killed ids */
		assert_int_equal(put1(s, fresh, 2, 6 * H, 6 * H + 10000, p), 0);
		assert_sel(s, query(0, 7 * H, NULL, 0), "main;shared;new_only 21\nx1;x2;x3;x4 9\n");
		store__stats(s, &st);
		assert_int_equal(st.stacks, 7);
		/* 4 new nodes: the 2 freed ids (3, 4), then 6 and 7 */
		assert_int_equal(sqlite_store(s)->dict.node_ids.next, 8);
		assert_int_equal(sqlite_store(s)->dict.nodes[3].state, DICT_LIVE);
		assert_int_equal(sqlite_store(s)->dict.nodes[4].state, DICT_LIVE);
		profile__free(p);
	}
	store__close(s);

	/* What survived is what reopening finds. */
	s = store_sqlite__open(dir);
	assert_non_null(s);
	store__stats(s, &st);
	assert_int_equal(st.windows, 4);
	assert_int_equal(st.stacks, 7);
	assert_int_equal(st.functions, 7);
	assert_int_equal(st.series, 2);
	assert_int_equal(st.points, 5);
	assert_sel(s, query(0, 7 * H, NULL, 0), "main;shared;new_only 21\nx1;x2;x3;x4 9\n");

	/* Expiring everything empties every table. */
	expire_all(s, 10 * H);
	store__stats(s, &st);
	assert_int_equal(st.windows + st.stacks + st.functions + st.series + st.points, 0);
	store__close(s);
	profile__free(p_old);
	profile__free(p_new);
	remove_dir(dir);
}

/* Stacks go in bounded steps, leaves first: after any step the table holds
 * no node whose parent is gone (reopening checks the trie). */
static void test_expire_stacks_bounded(void **state)
{
	struct store_label l[] = {L("type", "cpu")};
	char *dir = make_dir(), stack[512] = "keep";
	struct store *s = store_sqlite__open(dir);
	struct store_stats st;
	struct profile *p;
	int i, left = 20;

	assert_non_null(s);
	p = prof("samples", "keep;also_kept", 1);
	assert_int_equal(put1(s, l, 1, 5 * H, 5 * H + 10000, p), 0);
	profile__free(p);
	for (i = 0; i < 20; i++)
		snprintf(stack + strlen(stack), sizeof(stack) - strlen(stack), ";old%d", i);
	p = prof("samples", stack, 1);
	assert_int_equal(put1(s, l, 1, 0, 10000, p), 0);
	profile__free(p);
	store__stats(s, &st);
	assert_int_equal(st.stacks, 2 + 20);

	while (left > 0) {
		assert_int_equal(store__expire(s, 3 * H), 0);
		left -= left < EXPIRE_MAX_NODES ? left : EXPIRE_MAX_NODES;
		store__stats(s, &st);
		assert_int_equal(st.stacks, 2 + (uint64_t)left);
		assert_int_equal(st.functions, 2 + (uint64_t)left);
		store__close(s);
		s = store_sqlite__open(dir);
		assert_non_null(s);
		store__stats(s, &st);
		assert_int_equal(st.stacks, 2 + (uint64_t)left);
	}
	assert_sel(s, query(0, 6 * H, NULL, 0), "keep;also_kept 1\n");
	store__close(s);
	remove_dir(dir);
}

/* A row damaged on disk is an error of the read, not a crash. */
static void test_damaged_row(void **state)
{
	static const char *const damage[] = {
		"UPDATE windows SET dir = x'05ff'",			/* truncated varint */
		"UPDATE windows SET dir = x'0101ff7f01'",		/* part past the data */
		"UPDATE windows SET dir = x'01010101', data = x'00'",	/* pair cut short */
		"UPDATE windows SET dir = x'01ffffff0f0101'",		/* series out of range */
		"UPDATE windows SET dir = x'01010201', data = x'ff7f'", /* stack out of range */
	};
	struct store_label l[] = {L("type", "cpu")};
	char *dir = make_dir(), path[512];
	struct store *s = store_sqlite__open(dir);
	struct profile *p = prof("samples", "main;f", 2), *out;
	struct store_query q = query(0, 10000, NULL, 0);
	double v[2];
	size_t i;
	sqlite3 *db;

	assert_non_null(s);
	assert_int_equal(put1(s, l, 1, 0, 10000, p), 0);
	snprintf(path, sizeof(path), "%s/sonde.db", dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	for (i = 0; i < ARRAY_SIZE(damage); i++) {
		struct strs c = {{0}};

		assert_int_equal(sqlite3_exec(db, damage[i], NULL, NULL, NULL), SQLITE_OK);
		out = profile__new("cpu", "", 0);
		if (store__select(s, &q, out, NULL, 0) != -EIO)
			fail_msg("damage %zu: select did not fail with EIO", i);
		profile__free(out);
		if (i < 2 || i == 3) { /* the dir itself is bad */
			assert_int_equal(store__timeline(s, &q, 5000, v, 2), -EIO);
			assert_int_equal(store__label_names(s, &q, collect_str, &c), -EIO);
		}
	}
	sqlite3_close(db);
	profile__free(p);
	store__close(s);
	remove_dir(dir);
}

/* ---- reopen and refusals ---- */

static void test_reopen(void **state)
{
	struct store_label l[] = {L("type", "offcpu"), L("comm", "db")};
	struct store_point pt = {"m", l, 2, 5, 1.25};
	char *dir = make_dir(), *a, *b, unit[64];
	struct store *s = store_sqlite__open(dir);
	struct store_stats s1, s2;
	struct profile *p = prof("nanoseconds", "main;poll;sys_poll_[k]", 123456789);

	assert_non_null(s);
	assert_int_equal(put1(s, l, 2, 1000, 2000, p), 0);
	assert_int_equal(store__put_points(s, &pt, 1), 0);
	a = sel(s, query(0, 5000, NULL, 0), NULL);
	store__stats(s, &s1);
	store__close(s);

	s = store_sqlite__open(dir);
	assert_non_null(s);
	b = sel(s, query(0, 5000, NULL, 0), unit);
	assert_string_equal(a, b);
	assert_string_equal(unit, "nanoseconds");
	store__stats(s, &s2);
	assert_memory_equal(&s1, &s2, offsetof(struct store_stats, bytes_on_disk));
	assert_string_equal(points_of(s, "m", query(0, 10, NULL, 0)),
			    "m{comm=db,type=offcpu} 5:1.25\n");

	/* New rows after reopening get new ids: nothing collides. */
	profile__free(p);
	p = prof("nanoseconds", "main;poll;other", 1);
	assert_int_equal(put1(s, l, 2, 2000, 3000, p), 0);
	assert_sel(s, query(0, 5000, NULL, 0),
		   "main;poll;other 1\nmain;poll;sys_poll_[k] 123456789\n");
	store__close(s);
	profile__free(p);
	free(a);
	free(b);
	remove_dir(dir);
}

/* Where each function is in the source: kept with the function (its first
 * file and first line), read back by selects and after reopening; a store
 * written before these columns gains them at open, its functions without a
 * source until one is sent. */
static const char *src_of(const struct profile *p, const char *func, uint32_t *start_line)
{
	for (size_t i = 0; i < p->nlocs; i++)
		if (!strcmp(profile__str(p, p->locs[i].func), func)) {
			*start_line = p->locs[i].start_line;
			return profile__str(p, p->locs[i].file);
		}
	fail_msg("no function %s", func);
	return NULL;
}

static struct profile *sourced(const char *leaf, const char *file, uint32_t first)
{
	struct profile *p = profile__new("cpu", "samples", 1);
	struct prof_frame st[2] = {
		{.func = leaf,
		 .module = "/usr/bin/app",
		 .addr = 0x401000,
		 .file = file,
		 .line = first + 2,
		 .start_line = first},
		{.func = "main",
		 .module = "/usr/bin/app",
		 .addr = 0x400500,
		 .file = "/src/main.c",
		 .line = 9,
		 .start_line = 5},
	};

	assert_int_equal(profile__add(p, 1, 1, "app", st, 2, 3), 0);
	return p;
}

/* Everything s holds, as one profile. */
static struct profile *select_all(struct store *s)
{
	struct profile *out = profile__new("cpu", "", 0);

	assert_int_equal(store__select(s, &(struct store_query){.from_ms = 0, .until_ms = 5000},
				       out, NULL, 0),
			 0);
	return out;
}

static void test_function_sources(void **state)
{
	struct store_label l[] = {L("type", "cpu"), L("comm", "app")};
	char *dir = make_dir(), path[512];
	struct store *s = store_sqlite__open(dir);
	struct profile *p = sourced("work", "/src/work.c", 40), *out;
	uint32_t line = 0;
	sqlite3 *db;

	assert_non_null(s);
	assert_int_equal(put1(s, l, 2, 1000, 2000, p), 0);
	profile__free(p);
	out = select_all(s);
	assert_string_equal(src_of(out, "work", &line), "/src/work.c");
	assert_int_equal(line, 40);
	assert_string_equal(src_of(out, "main", &line), "/src/main.c");
	assert_int_equal(line, 5);
	profile__free(out);
	store__close(s);

	/* After reopening. */
	s = store_sqlite__open(dir);
	assert_non_null(s);
	out = select_all(s);
	assert_string_equal(src_of(out, "work", &line), "/src/work.c");
	assert_int_equal(line, 40);
	profile__free(out);
	store__close(s);

	/* A store from before: the columns gone (as it was written). */
	snprintf(path, sizeof(path), "%s/sonde.db", dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db,
				      "ALTER TABLE functions DROP COLUMN file;"
				      "ALTER TABLE functions DROP COLUMN line;",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_close(db);
	s = store_sqlite__open(dir);
	assert_non_null(s);
	p = sourced("later", "/src/later.c", 7);
	assert_int_equal(put1(s, l, 2, 2000, 3000, p), 0);
	profile__free(p);
	out = select_all(s);
	assert_string_equal(src_of(out, "work", &line), "");
	assert_int_equal(line, 0);
	assert_string_equal(src_of(out, "later", &line), "/src/later.c");
	assert_int_equal(line, 7);
	assert_int_equal(out->total, 6);
	profile__free(out);

	/* A function known without a source gets the first one it is sent
	 * with, kept on disk. */
	p = sourced("work", "/src/work.c", 41);
	assert_int_equal(put1(s, l, 2, 3000, 4000, p), 0);
	profile__free(p);
	store__close(s);
	s = store_sqlite__open(dir);
	assert_non_null(s);
	out = select_all(s);
	assert_string_equal(src_of(out, "work", &line), "/src/work.c");
	assert_int_equal(line, 41);
	assert_int_equal(out->total, 9);
	profile__free(out);
	store__close(s);
	remove_dir(dir);
}

/* A store written when keys had no series (put_keys, bare keys any project
 * may have written): it opens, those keys are dropped, and keyed puts work
 * as in a new store. */
static void test_keys_before_series(void **state)
{
	struct store_label l[] = {L("type", "cpu")};
	char *dir = make_dir(), path[512];
	struct store *s = store_sqlite__open(dir);
	struct profile *p = prof("samples", "main", 2);
	struct store_window w = {l, 1, 10000, 20000, p, "node/1/0/cpu"};
	sqlite3_stmt *st;
	sqlite3 *db;

	assert_non_null(s);
	store__close(s);
	snprintf(path, sizeof(path), "%s/sonde.db", dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db,
				      "DROP TABLE window_keys;"
				      "CREATE TABLE put_keys(key TEXT PRIMARY KEY, ts_ms INTEGER"
				      " NOT NULL) WITHOUT ROWID;"
				      "INSERT INTO put_keys VALUES('node/1/0/cpu', 20000);",
				      NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_close(db);
	s = store_sqlite__open(dir);
	assert_non_null(s);
	assert_int_equal(store__put_windows(s, &w, 1), 0);
	assert_int_equal(store__put_windows(s, &w, 1), 1);
	assert_int_equal(sel_total(s, query(0, 100000, NULL, 0)), 2);
	store__close(s);
	s = store_sqlite__open(dir);
	assert_non_null(s);
	assert_int_equal(store__put_windows(s, &w, 1), 1);
	store__close(s);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db,
					    "SELECT count(*) FROM sqlite_schema WHERE name ="
					    " 'put_keys'",
					    -1, &st, NULL),
			 SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(st, 0), 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	profile__free(p);
	remove_dir(dir);
}

/* ---- whole hours and edges ---- */

/* A window of test_hours: which series (HS_*), when, one stack and count. */
struct hwin {
	int series;
	int64_t start, end;
	const char *stack, *unit;
	int64_t count;
};

enum { HS_X, HS_Y, HS_Z, HS_W, HS_N };
static const char *const hs_name[HS_N] = {"x", "y", "z", "w"};
static const char *const hs_type[HS_N] = {"cpu", "cpu", "cpu", "wall"};

#define HT0 (500000 * H) /* an hour boundary */
#define MAX_HWIN 128

static struct hwin hwins[MAX_HWIN];
static size_t nhwins;

struct hsum {
	const char *stack;
	int64_t count;
};

static int cmp_line(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* What a select of [from, until) of the series in want[] must give, worked
 * out here from the windows put: each window in range whole. */
static char *hours_want(const bool *want, int64_t from, int64_t until)
{
	struct hsum sums[16];
	char *lines[16], *out = NULL;
	size_t nsums = 0, i, k, len = 0;
	FILE *f;

	for (i = 0; i < nhwins; i++) {
		const struct hwin *w = &hwins[i];

		if (!want[w->series] || w->end <= from || w->start >= until)
			continue;
		for (k = 0; k < nsums && strcmp(sums[k].stack, w->stack); k++)
			;
		if (k == nsums)
			sums[nsums++] = (struct hsum){w->stack, 0};
		sums[k].count += w->count;
	}
	for (k = 0; k < nsums; k++)
		assert_true(asprintf(&lines[k], "%s %" PRId64 "\n", sums[k].stack, sums[k].count) >
			    0);
	qsort(lines, nsums, sizeof(*lines), cmp_line);
	f = open_memstream(&out, &len);
	for (k = 0; k < nsums; k++) {
		fputs(lines[k], f);
		free(lines[k]);
	}
	fclose(f);
	return out;
}

static void hours_put(struct store *s, const struct hwin *w, size_t n)
{
	struct store_label l[8][2];
	struct store_window ws[8];
	struct profile *p[8];
	size_t i;

	assert_true(n <= 8 && nhwins + n <= MAX_HWIN);
	for (i = 0; i < n; i++) {
		l[i][0] = (struct store_label){"type", hs_type[w[i].series]};
		l[i][1] = (struct store_label){"service_name", hs_name[w[i].series]};
		p[i] = prof(w[i].unit, w[i].stack, w[i].count);
		ws[i] = (struct store_window){.labels = l[i],
					      .nlabels = 2,
					      .start_ms = w[i].start,
					      .end_ms = w[i].end,
					      .prof = p[i]};
	}
	assert_int_equal(store__put_windows(s, ws, n), 0);
	for (i = 0; i < n; i++) {
		hwins[nhwins++] = w[i];
		profile__free(p[i]);
	}
}

/* Every range below, by every matcher set, against the windows put. */
static void hours_check(struct store *s)
{
	static const int64_t M = 60000;
	int64_t ranges[40][2] = {
		{HT0, HT0 + 6 * H},
		{HT0 - H, HT0 + 10 * H},
		{HT0 + 1234567, HT0 + 6 * H - 7654321},
		{HT0 + H + 1, HT0 + H + 2},
		{HT0 + 2 * H, HT0 + 3 * H},
		{HT0 + 30 * M, HT0 + 5 * H + 30 * M},
		{HT0 + 4 * H + 1, HT0 + 5 * H},
		{HT0 + 2 * H - 1, HT0 + 4 * H + 1},
		{HT0 + 5 * H + 59 * M, HT0 + 7 * H},
		{0, HT0 + H},
	};
	struct store_matcher cpu = {.name = "type", .op = STORE_EQ, .value = "cpu"};
	struct store_matcher x = {.name = "service_name", .op = STORE_EQ, .value = "x"};
	struct store_matcher yz = {.name = "service_name", .op = STORE_RE, .value = "[yz]"};
	struct {
		const struct store_matcher *m;
		bool want[HS_N];
	} sets[] = {
		{NULL, {true, true, true, true}},
		{&cpu, {true, true, true, false}},
		{&x, {true, false, false, false}},
		{&yz, {false, true, true, false}},
	};
	uint64_t rng = 12345;
	size_t nranges = 10, r, k;

	/* and some at random over the hours put */
	while (nranges < 40) {
		int64_t a, b;

		rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
		a = HT0 - 10 * M + (int64_t)((rng >> 20) % (uint64_t)(7 * H));
		rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
		b = a + 1 + (int64_t)((rng >> 20) % (uint64_t)(5 * H));
		ranges[nranges][0] = a;
		ranges[nranges++][1] = b;
	}
	for (r = 0; r < nranges; r++)
		for (k = 0; k < ARRAY_SIZE(sets); k++) {
			struct store_query q =
				query(ranges[r][0], ranges[r][1], sets[k].m, sets[k].m ? 1 : 0);
			char *want = hours_want(sets[k].want, ranges[r][0], ranges[r][1]);
			char *got = sel(s, q, NULL);

			if (strcmp(got, want))
				fail_msg("select of [%" PRId64 ", %" PRId64
					 ") (set %zu):\n%s\nwanted:\n%s",
					 ranges[r][0] - HT0, ranges[r][1] - HT0, k, got, want);
			free(got);
			free(want);
		}
}

/* Sql run on the ClickHouse store under test. */
static void ch_sql(struct store *s, const char *fmt, ...)
{
	char sql[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(sql, sizeof(sql), fmt, ap);
	va_end(ap);
	assert_int_equal(ch__query(ch_store(s), sql, NULL, "run the test's SQL"), 0);
}

/* Reads of whole hours and of their edges give exactly the windows in
 * range: windows of 5 and 25 minutes, some across hour boundaries, one of
 * 3 hours, ranges aligned to hours and not, within an hour and across
 * many, by several matchers; the unit of the earliest window whether it
 * is at an edge or in a whole hour. Against ClickHouse, again after the
 * hourly rollup is made wrong for an hour (rows added as if written twice)
 * and after it is lost for a day: reads check it and sum the windows. */
static void test_hours(void **state)
{
	static const int64_t M = 60000;
	struct store_matcher wall = {.name = "type", .op = STORE_EQ, .value = "wall"};
	char *dir = new_place();
	struct store *s = store__open(dir);
	static const char *const stacks[] = {"main;a", "main;b", "main;c;d_[k]"};
	struct hwin batch[8];
	char unit[64], *got;
	int64_t i;
	size_t n = 0;

	assert_non_null(s);
	nhwins = 0;
	/* x: 5-minute windows over 6 hours, put 6 at a time */
	for (i = 0; i < 72; i++) {
		batch[n++] = (struct hwin){HS_X,	  HT0 + i * 5 * M, HT0 + (i + 1) * 5 * M,
					   stacks[i % 3], "samples",	   1 + (i * 7) % 13};
		if (n == 6) {
			hours_put(s, batch, n);
			n = 0;
		}
	}
	/* y: 25-minute windows from 10 minutes in, across hours */
	for (i = 0; i < 14; i++) {
		batch[0] = (struct hwin){HS_Y,
					 HT0 + 10 * M + i * 25 * M,
					 HT0 + 10 * M + (i + 1) * 25 * M,
					 "main;y",
					 "samples",
					 100 + i};
		hours_put(s, batch, 1);
	}
	/* z: one window of 3 hours, w: wall windows of two units */
	batch[0] = (struct hwin){HS_Z, HT0 + 90 * M, HT0 + 270 * M, "main;z", "samples", 7777};
	batch[1] =
		(struct hwin){HS_W, HT0 + 5 * H + 10 * M, HT0 + 5 * H + 11 * M, "main;w", "aa", 6};
	batch[2] =
		(struct hwin){HS_W, HT0 + 2 * H + 100000, HT0 + 2 * H + 200000, "main;w", "zz", 5};
	hours_put(s, batch, 3);

	hours_check(s);
	/* The earliest window's unit: in a whole hour, then at the edge. */
	got = sel(s, query(HT0 + 30 * M, HT0 + 5 * H + 30 * M, &wall, 1), unit);
	assert_string_equal(unit, "zz");
	assert_string_equal(got, "main;w 11\n");
	free(got);
	batch[0] = (struct hwin){HS_W, HT0 + 40 * M, HT0 + 41 * M, "main;w", "mm", 1};
	hours_put(s, batch, 1);
	got = sel(s, query(HT0 + 30 * M, HT0 + 5 * H + 30 * M, &wall, 1), unit);
	assert_string_equal(unit, "mm");
	free(got);
	hours_check(s);

	if (store_url) {
		int64_t hour = HT0 / H + 2;

		/* An hour's rollup with everything twice, the count of windows
		 * too, and then one more window counted: wrong, and seen so. */
		ch_sql(s,
		       "INSERT INTO hour_stacks SELECT series, hour, stack, sum(val) FROM "
		       "hour_stacks"
		       " WHERE hour = %" PRId64 " GROUP BY series, hour, stack",
		       hour);
		ch_sql(s,
		       "INSERT INTO hour_stacks SELECT series, hour, 0, 1 FROM hour_stacks"
		       " WHERE hour = %" PRId64 " AND stack = 0 GROUP BY series, hour",
		       hour);
		hours_check(s);
		/* The rollup of the whole day lost. */
		ch_sql(s, "ALTER TABLE hour_stacks DROP PARTITION %" PRId64, hour / 24);
		hours_check(s);
	}
	store__close(s);
	drop_place(dir);
}

/* A fleet's worth of series in one read: 30 000 of them (40 000 would be
 * 100 nodes over a day), each with a window in a whole hour of the range
 * and some at its edges, all selected, counted and their values listed;
 * more ids than ClickHouse takes in a query by default. */
static void count_value(void *ctx, const char *v)
{
	(*(size_t *)ctx)++;
}

static void test_many_series(void **state)
{
	enum { NS = 30000, BATCH = 1000 };
	static struct store_label labels[BATCH][2];
	static struct store_window w[BATCH];
	static char pids[BATCH][8];
	struct store_matcher cpu = {.name = "type", .op = STORE_EQ, .value = "cpu"};
	char *dir = new_place();
	struct store *s = store__open(dir);
	struct profile *p = prof("samples", "main;work", 3);
	struct store_query q;
	size_t nvalues = 0;
	int i, k;

	assert_non_null(s);
	for (i = 0; i < NS; i += BATCH) {
		for (k = 0; k < BATCH; k++) {
			int64_t start = H + ((i + k) % 7 == 0 ? -30000 : 60000 * ((i + k) % 50));

			snprintf(pids[k], sizeof(pids[k]), "%d", i + k);
			labels[k][0] = (struct store_label)L("type", "cpu");
			labels[k][1] = (struct store_label)L("pid", pids[k]);
			w[k] = (struct store_window){labels[k], 2, start, start + 60000, p, NULL};
		}
		assert_int_equal(store__put_windows(s, w, BATCH), 0);
	}
	assert_int_equal(sel_total(s, query(H - 10000, 3 * H, &cpu, 1)), 3 * NS);
	assert_int_equal(sel_total(s, query(0, 4 * H, NULL, 0)), 3 * NS);
	q = query(0, 4 * H, &cpu, 1);
	assert_int_equal(store__label_values(s, &q, "pid", count_value, &nvalues), 0);
	assert_int_equal(nvalues, NS);
	profile__free(p);
	store__close(s);
	drop_place(dir);
}

/* The ClickHouse store's URL: its parts and defaults, the user from the
 * URL (percent-decoded) or the environment, and what it refuses, each with
 * a message. */
static void test_clickhouse_url(void **state)
{
	static const char *const bad[] = {
		"http://h/db",		 "clickhouse://",	    "clickhouse:///db",
		"clickhouse://h:0/db",	 "clickhouse://h:65536/db", "clickhouse://h:80x/db",
		"clickhouse://h/1db",	 "clickhouse://h/d-b",	    "clickhouse://h/db/x",
		"clickhouse://h?x=1/db", "clickhouse://h#x/db",	    "clickhouse://a b/db",
		"clickhouse://u@/db",
	};
	struct ch_url u;
	char msg[256];
	size_t i;

	unsetenv("SONDE_CLICKHOUSE_USER");
	assert_int_equal(ch_url__parse(&u, "clickhouse://ch.example", msg, sizeof(msg)), 0);
	assert_string_equal(u.base, "http://ch.example:8123/");
	assert_string_equal(u.database, "sonde");
	assert_null(u.user);
	ch_url__free(&u);
	assert_int_equal(ch_url__parse(&u, "clickhouse://us%40r:p%3Ass@10.0.0.1:9123/prof_1", msg,
				       sizeof(msg)),
			 0);
	assert_string_equal(u.base, "http://10.0.0.1:9123/");
	assert_string_equal(u.database, "prof_1");
	assert_string_equal(u.user, "us@r");
	assert_string_equal(u.password, "p:ss");
	ch_url__free(&u);
	assert_int_equal(ch_url__parse(&u, "clickhouse://[::1]:8124/", msg, sizeof(msg)), 0);
	assert_string_equal(u.base, "http://[::1]:8124/");
	assert_string_equal(u.database, "sonde");
	ch_url__free(&u);
	setenv("SONDE_CLICKHOUSE_USER", "envuser", 1);
	setenv("SONDE_CLICKHOUSE_PASSWORD", "envpass", 1);
	assert_int_equal(ch_url__parse(&u, "clickhouse://h/db", msg, sizeof(msg)), 0);
	assert_string_equal(u.user, "envuser");
	assert_string_equal(u.password, "envpass");
	ch_url__free(&u);
	unsetenv("SONDE_CLICKHOUSE_USER");
	unsetenv("SONDE_CLICKHOUSE_PASSWORD");
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		msg[0] = '\0';
		if (ch_url__parse(&u, bad[i], msg, sizeof(msg)) != -EINVAL)
			fail_msg("%s was taken", bad[i]);
		if (!strstr(msg, "store URL"))
			fail_msg("%s: message '%s'", bad[i], msg);
	}
}

/* Sources as every store keeps them: each function's, after a reopen; one
 * known without a source gets the first it is sent with, and keeps it. */
static void test_sources(void **state)
{
	struct store_label l[] = {L("type", "cpu"), L("comm", "app")};
	char *dir = new_place();
	struct store *s = store__open(dir);
	struct profile *p = sourced("work", "/src/work.c", 40), *out;
	uint32_t line = 0;

	assert_non_null(s);
	assert_int_equal(put1(s, l, 2, 1000, 2000, p), 0);
	profile__free(p);
	p = prof("samples", "main;later", 1);
	assert_int_equal(put1(s, l, 2, 1000, 2000, p), 0);
	profile__free(p);
	out = select_all(s);
	assert_string_equal(src_of(out, "work", &line), "/src/work.c");
	assert_int_equal(line, 40);
	assert_string_equal(src_of(out, "main", &line), "/src/main.c");
	assert_int_equal(line, 5);
	assert_string_equal(src_of(out, "later", &line), "");
	profile__free(out);

	/* "later" is told its source, "work" another one (ignored). */
	p = sourced("later", "/src/later.c", 7);
	assert_int_equal(put1(s, l, 2, 2000, 3000, p), 0);
	profile__free(p);
	p = sourced("work", "/src/other.c", 99);
	assert_int_equal(put1(s, l, 2, 2000, 3000, p), 0);
	profile__free(p);
	out = select_all(s);
	assert_string_equal(src_of(out, "later", &line), "/src/later.c");
	assert_int_equal(line, 7);
	assert_string_equal(src_of(out, "work", &line), "/src/work.c");
	assert_int_equal(line, 40);
	profile__free(out);
	store__close(s);

	s = store__open(dir);
	assert_non_null(s);
	out = select_all(s);
	assert_string_equal(src_of(out, "later", &line), "/src/later.c");
	assert_int_equal(line, 7);
	assert_string_equal(src_of(out, "work", &line), "/src/work.c");
	assert_int_equal(line, 40);
	assert_int_equal(out->total, 3 + 1 + 3 + 3);
	profile__free(out);
	store__close(s);
	drop_place(dir);
}

/* A flame graph's answer (flame.h) of everything in s in [0, 5000): from
 * the select's tree (what the query API does) or from its sorted profile. */
static int flame_tree_cb(void *ctx, const struct store_tree *t)
{
	return flame__add_tree(ctx, 0, NULL, t);
}

static char *flame_of(struct store *s, bool tree)
{
	struct store_query q = query(0, 5000, NULL, 0);
	struct flame *f = flame__new(1);
	struct sbuf b = {0};

	assert_non_null(f);
	if (tree) {
		assert_int_equal(store__select_tree(s, &q, flame_tree_cb, f, NULL, 0), 0);
	} else {
		struct profile *p = select_all(s);

		assert_int_equal(flame__add(f, 0, p), 0);
		profile__free(p);
	}
	assert_int_equal(flame__write(f, FLAME_DEFAULT_MAX_NODES, &b), 0);
	flame__free(f);
	return sbuf__steal(&b, NULL);
}

/* What a flamebearer's key ("sources", "modules") says of name. */
static const char *flame_says(json_t *fb, const char *key, const char *name)
{
	json_t *names = json_object_get(fb, "names"), *vals = json_object_get(fb, key);

	assert_int_equal(json_array_size(vals), json_array_size(names));
	for (size_t i = 0; i < json_array_size(names); i++)
		if (!strcmp(json_string_value(json_array_get(names, i)), name))
			return json_string_value(json_array_get(vals, i));
	fail_msg("no name %s", name);
	return NULL;
}

/* One name, several functions (a name in three modules, two files, one
 * without a first line): a flame graph shows the least file, first line
 * and module basename of them, by the rule of flame.h, so that the answer
 * is the same from every store and whatever order the stacks were put in
 * (each store numbers its functions and stacks in the order it first
 * sees them, and hands them over in its own order). */
static void test_flame_same_by_rule(void **state)
{
	struct store_label l[] = {L("type", "cpu"), L("comm", "app")};
	struct prof_frame main_f = {
		.func = "main", .module = "/usr/bin/app", .file = "/src/main.c", .start_line = 5};
	struct prof_frame run_f = {.func = "run", .module = "/usr/bin/app"};
	struct prof_frame work[3] = {
		{.func = "work", .module = "/opt/b/libb.so", .file = "/src/b.c", .start_line = 20},
		{.func = "work", .module = "/opt/a/liba.so", .file = "/src/a.c", .start_line = 30},
		{.func = "work", .module = "/usr/bin/app", .file = "/src/a.c"},
	};
	struct prof_frame idle = {.func = "idle"};
	char *place, *json[2], *sorted = NULL;
	struct store *s;
	json_t *fb;

	for (int k = 0; k < 2; k++) {
		place = new_place();
		s = store__open(place);
		assert_non_null(s);
		for (int i = 0; i < 4; i++) {
			/* The first store gets them in one order, the second
			 * in the other. */
			int w = k ? 3 - i : i;
			struct profile *p = profile__new("cpu", "samples", 10101010);
			struct prof_frame st[3] = {w < 3 ? work[w] : idle, w == 1 ? run_f : main_f,
						   main_f};

			assert_int_equal(profile__add(p, 1, 1, "app", st, w == 1 ? 3 : 2, w + 1),
					 0);
			assert_int_equal(put1(s, l, 2, 1000, 2000, p), 0);
			profile__free(p);
		}
		json[k] = flame_of(s, true);
		if (!k)
			sorted = flame_of(s, false);
		store__close(s);
		drop_place(place);
	}
	if (strcmp(json[0], json[1]))
		fail_msg("two orders of putting:\n%s\n%s", json[0], json[1]);
	if (strcmp(json[0], sorted))
		fail_msg("from the tree and from the sorted profile:\n%s\n%s", json[0], sorted);
	fb = json_loads(json[0], 0, NULL);
	assert_non_null(fb);
	assert_string_equal(flame_says(fb, "sources", "work"), "/src/a.c:30");
	assert_string_equal(flame_says(fb, "modules", "work"), "app");
	assert_string_equal(flame_says(fb, "sources", "main"), "/src/main.c:5");
	assert_string_equal(flame_says(fb, "sources", "idle"), "");
	assert_string_equal(flame_says(fb, "modules", "idle"), "");
	assert_string_equal(flame_says(fb, "sources", "run"), "");
	assert_int_equal(json_integer_value(json_object_get(fb, "numTicks")), 1 + 2 + 3 + 4);
	json_decref(fb);
	free(json[0]);
	free(json[1]);
	free(sorted);
}

/* What every store's expiry does, seen by the reads: windows that ended by
 * the mark and points taken before it are gone from every read; the rest,
 * and a window that overlaps the mark, stay. */
static void test_expire_reads(void **state)
{
	struct store_label old[] = {L("type", "cpu"), L("service_name", "old")};
	struct store_label both[] = {L("type", "cpu"), L("service_name", "both")};
	struct store_label g[] = {L("gpu", "0")};
	struct store_point pts[] = {{"mem", g, 1, 5000, 1}, {"mem", g, 1, 25000, 2}};
	struct store_query all = query(0, 100000, NULL, 0);
	char *dir = new_place();
	struct store *s = store__open(dir);
	struct profile *p = prof("samples", "main;a", 2);
	double tl[4];

	assert_non_null(s);
	assert_int_equal(put1(s, old, 2, 0, 10000, p), 0);
	assert_int_equal(put1(s, old, 2, 10000, 20000, p), 0);
	assert_int_equal(put1(s, both, 2, 15000, 25000, p), 0);
	assert_int_equal(put1(s, both, 2, 30000, 40000, p), 0);
	assert_int_equal(store__put_points(s, pts, 2), 0);
	assert_int_equal(sel_total(s, all), 8);
	expire_all(s, 20000);
	assert_int_equal(sel_total(s, all), 4);
	assert_string_equal(values_of(s, all, "service_name"), "both");
	assert_string_equal(points_of(s, "mem", all), "mem{gpu=0} 25000:2\n");
	assert_int_equal(store__timeline(s, &all, 25000, tl, 4), 0);
	assert_true(tl[0] == 2 && tl[1] == 2 && tl[2] == 0 && tl[3] == 0);
	/* Later data is stored and read as before. */
	assert_int_equal(put1(s, old, 2, 50000, 60000, p), 0);
	assert_string_equal(values_of(s, all, "service_name"), "both,old");
	profile__free(p);
	store__close(s);
	drop_place(dir);
}

/* Each project's bounds (struct store_quota): a put that would add a series
 * or a function name past them writes nothing and says which, counted per
 * project (another project is not held back), points' series counting too;
 * what is already stored still takes windows; expiry makes room; the
 * counts hold after reopening (a function's project is stored with it). */
static void test_quota(void **state)
{
	struct store_label a1[] = {L("type", "cpu"), L(STORE_PROJECT_LABEL, "alpha"),
				   L("pid", "1")},
			   a2[] = {L("type", "cpu"), L(STORE_PROJECT_LABEL, "alpha"),
				   L("pid", "2")},
			   a3[] = {L("type", "cpu"), L(STORE_PROJECT_LABEL, "alpha"),
				   L("pid", "3")},
			   b1[] = {L("type", "cpu"), L(STORE_PROJECT_LABEL, "beta"), L("pid", "1")};
	struct store_quota q = {.max_series = 2, .max_name_bytes = 1 << 20};
	struct store_point pt = {"m", a3, 3, 5000, 1.0};
	char *dir = make_dir(), name[2100];
	struct store *s = store_sqlite__open(dir);
	struct profile *p = prof("samples", "main;work", 1), *big[3];
	const struct store_refusal *r = store_last_refusal();
	struct store_stats st;
	int i;

	assert_non_null(s);
	assert_int_equal(store__set_quota(s, &q), 0);
	assert_int_equal(put1(s, a1, 3, 1000, 2000, p), 0);
	assert_int_equal(put1(s, a2, 3, 1000, 2000, p), 0);
	/* A third series of alpha: refused, nothing written. */
	assert_int_equal(put1(s, a3, 3, 1000, 2000, p), -EDQUOT);
	assert_int_equal(r->bound, STORE_BOUND_SERIES);
	assert_string_equal(r->project, "alpha");
	assert_int_equal(r->have, 2);
	assert_int_equal(r->more, 1);
	assert_int_equal(r->max, 2);
	assert_int_equal(store__put_points(s, &pt, 1), -EDQUOT);
	store__stats(s, &st);
	assert_int_equal(st.series, 2);
	assert_int_equal(sel_total(s, query(0, 5000, NULL, 0)), 2);
	/* Its series already stored take more windows; beta has its own. */
	assert_int_equal(put1(s, a1, 3, 2000, 3000, p), 0);
	assert_int_equal(put1(s, b1, 3, 1000, 2000, p), 0);

	/* Names: alpha's bound is 1 MiB; 400 names of 2 KB fit, 800 don't. */
	for (int k = 0; k < 3; k++) {
		big[k] = profile__new("cpu", "samples", 0);
		for (i = 0; i < 400; i++) {
			struct prof_frame f = {.func = name, .module = "/usr/bin/app"};

			memset(name, 'a' + i % 26, 2048);
			snprintf(name + 2048, 50, "_%d_%d", k, i);
			assert_int_equal(profile__add(big[k], 1, 1, "c", &f, 1, 1), 0);
		}
	}
	assert_int_equal(put1(s, a1, 3, 3000, 4000, big[0]), 0);
	assert_int_equal(put1(s, a1, 3, 3000, 4000, big[1]), -EDQUOT);
	assert_int_equal(r->bound, STORE_BOUND_NAMES);
	assert_string_equal(r->project, "alpha");
	assert_true(r->have + r->more > q.max_name_bytes && r->have <= q.max_name_bytes);
	/* 400 entries of 2048 bytes and "_1_0".."_1_399" each. */
	assert_int_equal(r->more, 400 * (DICT_FUNC_BYTES + 2048) + 10 * 4 + 90 * 5 + 300 * 6);
	assert_int_equal(sel_total(s, query(3000, 4000, NULL, 0)), 400);
	/* ...which another project may send (its own bound), */
	assert_int_equal(put1(s, b1, 3, 3000, 4000, big[1]), 0);
	/* and then alpha too: names already stored cost it nothing. */
	assert_int_equal(put1(s, a1, 3, 3000, 4000, big[1]), 0);

	/* Reopened, the bounds hold as before (functions keep their project). */
	store__close(s);
	s = store_sqlite__open(dir);
	assert_non_null(s);
	assert_int_equal(store__set_quota(s, &q), 0);
	assert_int_equal(put1(s, a3, 3, 4000, 5000, p), -EDQUOT);
	assert_int_equal(r->have, 2);
	assert_int_equal(put1(s, a1, 3, 4000, 5000, big[2]), -EDQUOT);
	assert_int_equal(r->bound, STORE_BOUND_NAMES);
	assert_int_equal(put1(s, b1, 3, 4000, 5000, big[2]), -EDQUOT);
	assert_string_equal(r->project, "beta");

	/* Expiry of alpha's series makes room. */
	expire_all(s, 10 * H);
	assert_int_equal(put1(s, a3, 3, 20 * H, 20 * H + 1000, p), 0);
	assert_int_equal(store__put_points(s, &pt, 1), 0);
	assert_int_equal(put1(s, a2, 3, 20 * H, 20 * H + 1000, p), -EDQUOT);

	store__close(s);
	profile__free(p);
	for (i = 0; i < 3; i++)
		profile__free(big[i]);
	remove_dir(dir);
}

static void test_refusals(void **state)
{
	char *dir = make_dir(), path[512];
	struct store *s = store_sqlite__open(dir), *s2;
	sqlite3 *db;
	FILE *f;

	/* In use by another opener (this process stands for another one). */
	assert_non_null(s);
	errno = 0;
	s2 = store_sqlite__open(dir);
	assert_null(s2);
	assert_int_equal(errno, EBUSY);
	store__close(s);

	/* A newer schema. */
	snprintf(path, sizeof(path), "%s/sonde.db", dir);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "PRAGMA user_version = 99", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);
	errno = 0;
	assert_null(store_sqlite__open(dir));
	assert_int_equal(errno, ENOTSUP);

	/* Not a database at all. */
	f = fopen(path, "w");
	assert_non_null(f);
	fputs("this is not a database, just text that is long enough to have a header......."
	      "................................................................................",
	      f);
	fclose(f);
	snprintf(path, sizeof(path), "%s/sonde.db-wal", dir);
	unlink(path);
	errno = 0;
	assert_null(store_sqlite__open(dir));
	assert_int_equal(errno, EINVAL);

	/* A database of something else. */
	snprintf(path, sizeof(path), "%s/sonde.db", dir);
	unlink(path);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(
		sqlite3_exec(db, "CREATE TABLE t(x); INSERT INTO t VALUES(1)", NULL, NULL, NULL),
		SQLITE_OK);
	sqlite3_close(db);
	errno = 0;
	assert_null(store_sqlite__open(dir));
	assert_int_equal(errno, EINVAL);
	/* It was left alone. */
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, "SELECT x FROM t", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(db);

	/* A directory that can't be made. */
	errno = 0;
	assert_null(store_sqlite__open("/proc/sonde-store-test"));
	assert_true(errno != 0);
	remove_dir(dir);
}

/* ---- concurrency ---- */

#define WRITERS 3
#define WINDOWS_PER_WRITER 60
#define READERS 2

struct conc {
	struct store *s;
	int id;
	atomic_int done;
	int64_t prefix[WINDOWS_PER_WRITER + 1]; /* writer 0's totals after i puts */
	int errors;
};

static int64_t wval(int writer, int i)
{
	return 1 + (i * 7 + writer) % 11;
}

static struct conc conc;

static void *writer_main(void *arg)
{
	int w = (int)(intptr_t)arg, i;
	char name[16];
	struct store_label l[] = {L("type", "cpu"), L("service_name", name)};

	snprintf(name, sizeof(name), "w%d", w);
	for (i = 0; i < WINDOWS_PER_WRITER; i++) {
		char stack[64];
		struct profile *p;

		snprintf(stack, sizeof(stack), "main;w%d;f%d", w, i % 5);
		p = prof("samples", stack, wval(w, i));
		if (put1(conc.s, l, 2, 10 * H + i * 1000, 10 * H + (i + 1) * 1000, p))
			__atomic_add_fetch(&conc.errors, 1, __ATOMIC_SEQ_CST);
		profile__free(p);
	}
	return NULL;
}

static void *reader_main(void *arg)
{
	struct store_matcher m[] = {{"service_name", "w0", STORE_EQ}};
	int64_t last = 0;

	(void)arg;
	while (!atomic_load(&conc.done)) {
		int64_t all = sel_total(conc.s, query(10 * H, 11 * H, NULL, 0));
		int64_t w0 = sel_total(conc.s, query(10 * H, 11 * H, m, 1));
		bool ok = false;
		int i;

		/* Puts are atomic and durable in order: writer 0's total is one
		 * of its prefix sums, and the grand total never goes back. */
		for (i = 0; i <= WINDOWS_PER_WRITER; i++)
			ok |= w0 == conc.prefix[i];
		if (!ok || all < last)
			__atomic_add_fetch(&conc.errors, 1, __ATOMIC_SEQ_CST);
		last = all;
	}
	return NULL;
}

static void *expirer_main(void *arg)
{
	(void)arg;
	while (!atomic_load(&conc.done)) {
		if (store__expire(conc.s, 2 * H))
			__atomic_add_fetch(&conc.errors, 1, __ATOMIC_SEQ_CST);
		usleep(2000);
	}
	return NULL;
}

static void test_concurrency(void **state)
{
	struct store_label l[] = {L("type", "cpu"), L("service_name", "old")};
	pthread_t wt[WRITERS], rt[READERS], et;
	char *dir = new_place();
	struct store_stats st;
	int64_t want = 0;
	int i, w;

	memset(&conc, 0, sizeof(conc));
	conc.s = store__open(dir);
	assert_non_null(conc.s);
	for (i = 0; i < WINDOWS_PER_WRITER; i++)
		conc.prefix[i + 1] = conc.prefix[i] + wval(0, i);
	/* Old data for the expirer to work through while the others run. */
	for (i = 0; i < 40; i++) {
		char stack[64];
		struct profile *p;

		snprintf(stack, sizeof(stack), "main;old;o%d", i);
		p = prof("samples", stack, 1);
		assert_int_equal(put1(conc.s, l, 2, i * 1000, (i + 1) * 1000, p), 0);
		profile__free(p);
	}

	for (i = 0; i < READERS; i++)
		assert_int_equal(pthread_create(&rt[i], NULL, reader_main, NULL), 0);
	assert_int_equal(pthread_create(&et, NULL, expirer_main, NULL), 0);
	for (w = 0; w < WRITERS; w++)
		assert_int_equal(pthread_create(&wt[w], NULL, writer_main, (void *)(intptr_t)w), 0);
	for (w = 0; w < WRITERS; w++)
		pthread_join(wt[w], NULL);
	usleep(50000);
	atomic_store(&conc.done, 1);
	for (i = 0; i < READERS; i++)
		pthread_join(rt[i], NULL);
	pthread_join(et, NULL);
	assert_int_equal(conc.errors, 0);

	for (w = 0; w < WRITERS; w++)
		for (i = 0; i < WINDOWS_PER_WRITER; i++)
			want += wval(w, i);
	assert_int_equal(sel_total(conc.s, query(10 * H, 11 * H, NULL, 0)), want);
	expire_all(conc.s, 2 * H);
	assert_int_equal(sel_total(conc.s, query(0, 2 * H, NULL, 0)), 0);
	store__stats(conc.s, &st);
	assert_int_equal(st.windows, WRITERS * WINDOWS_PER_WRITER);
	/* SQLite: main, w0..w2, f0..f4 under each; ClickHouse: the stacks,
	 * those of the expired days too (a day goes whole) */
	if (!store_url)
		assert_int_equal(st.stacks, 1 + WRITERS + WRITERS * 5);
	assert_int_equal(st.series, WRITERS);
	store__close(conc.s);
	drop_place(dir);
}

/* ---- kill -9 ---- */

static struct profile *crash_prof(int64_t i)
{
	char stack[64];
	struct profile *p;

	snprintf(stack, sizeof(stack), "main;work;f%" PRId64, i % 7);
	p = prof("samples", stack, 1 + i % 13);
	add(p, "main;idle", 1 + i % 3);
	return p;
}

static char *crash_want(int64_t i)
{
	char *buf = malloc(128);

	snprintf(buf, 128, "main;idle %" PRId64 "\nmain;work;f%" PRId64 " %" PRId64 "\n", 1 + i % 3,
		 i % 7, 1 + i % 13);
	return buf;
}

/* The child: puts window after window, writing each acknowledged index. */
static void crash_child(const char *dir, int64_t first, int fd)
{
	struct store_label l[] = {L("type", "cpu"), L("service_name", "crash")};
	struct store *s = store__open(dir);
	int64_t i;

	if (!s)
		_exit(2);
	for (i = first;; i++) {
		struct profile *p = crash_prof(i);

		if (put1(s, l, 2, i * 10000, (i + 1) * 10000, p))
			_exit(3);
		profile__free(p);
		if (write(fd, &i, sizeof(i)) != sizeof(i))
			_exit(4);
	}
}

static void test_crash(void **state)
{
	unsigned int seed = (unsigned int)time(NULL) ^ (unsigned int)getpid();
	char *dir = new_place();
	int64_t first = 0, acked = -1;
	int round;

	print_message("crash test seed %u\n", seed);
	srand(seed);
	for (round = 0; round < 4; round++) {
		int fds[2], status;
		int64_t i, v;
		pid_t pid;
		struct store *s;

		assert_int_equal(pipe(fds), 0);
		pid = fork();
		assert_true(pid >= 0);
		if (!pid) {
			close(fds[0]);
			crash_child(dir, first, fds[1]);
		}
		close(fds[1]);
		/* Let it get going, then kill it at a random moment. */
		assert_int_equal(read(fds[0], &v, sizeof(v)), sizeof(v));
		acked = v;
		usleep(20000 + rand() % 200000);
		assert_int_equal(kill(pid, SIGKILL), 0);
		assert_int_equal(waitpid(pid, &status, 0), pid);
		assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
		while (read(fds[0], &v, sizeof(v)) == sizeof(v))
			acked = v;
		close(fds[0]);
		print_message("round %d: windows %" PRId64 "..%" PRId64 " acknowledged\n", round,
			      first, acked);

		/* Every acknowledged window is there with its exact values; the
		 * one in flight is there whole or not at all. */
		s = store__open(dir);
		assert_non_null(s);
		for (i = 0; i <= acked; i++) {
			char *want = crash_want(i),
			     *got = sel(s, query(i * 10000, (i + 1) * 10000, NULL, 0), NULL);

			if (strcmp(got, want))
				fail_msg("window %" PRId64 ": got\n%swanted\n%s", i, got, want);
			free(got);
			free(want);
		}
		{
			char *want = crash_want(acked + 1);
			char *got = sel(s, query((acked + 1) * 10000, (acked + 2) * 10000, NULL, 0),
					NULL);

			assert_true(!strcmp(got, want) || !*got);
			first = *got ? acked + 2 : acked + 1;
			free(got);
			free(want);
		}
		store__close(s);
	}
	assert_true(acked > 4);
	drop_place(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_check_labels),
		cmocka_unit_test(test_check_matchers),
		cmocka_unit_test(test_varint_idmap),
		cmocka_unit_test(test_roundtrip),
		cmocka_unit_test(test_dedup),
		cmocka_unit_test(test_put_many),
		cmocka_unit_test(test_keyed_put),
		cmocka_unit_test(test_matchers),
		cmocka_unit_test(test_time_range),
		cmocka_unit_test(test_series_totals),
		cmocka_unit_test(test_saturated_sums),
		cmocka_unit_test(test_points),
		cmocka_unit_test(test_put_rejects),
		cmocka_unit_test(test_expire),
		cmocka_unit_test(test_expire_reads),
		cmocka_unit_test(test_expire_stacks_bounded),
		cmocka_unit_test(test_damaged_row),
		cmocka_unit_test(test_reopen),
		cmocka_unit_test(test_function_sources),
		cmocka_unit_test(test_keys_before_series),
		cmocka_unit_test(test_sources),
		cmocka_unit_test(test_flame_same_by_rule),
		cmocka_unit_test(test_hours),
		cmocka_unit_test(test_many_series),
		cmocka_unit_test(test_clickhouse_url),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_quota),
		cmocka_unit_test(test_spans),
		cmocka_unit_test(test_concurrency),
		cmocka_unit_test(test_crash),
	};
	/* The conformance suite: what every store must do alike. */
	const struct CMUnitTest conformance[] = {
		cmocka_unit_test(test_roundtrip),     cmocka_unit_test(test_dedup),
		cmocka_unit_test(test_put_many),      cmocka_unit_test(test_keyed_put),
		cmocka_unit_test(test_matchers),      cmocka_unit_test(test_time_range),
		cmocka_unit_test(test_series_totals), cmocka_unit_test(test_saturated_sums),
		cmocka_unit_test(test_points),	      cmocka_unit_test(test_put_rejects),
		cmocka_unit_test(test_expire_reads),  cmocka_unit_test(test_sources),
		cmocka_unit_test(test_concurrency),   cmocka_unit_test(test_crash),
		cmocka_unit_test(test_hours),	      cmocka_unit_test(test_many_series),
		cmocka_unit_test(test_spans),	      cmocka_unit_test(test_flame_same_by_rule),
	};

	log_init();
	store_url = getenv("SONDE_TEST_STORE");
	if (store_url && *store_url)
		return cmocka_run_group_tests_name("conformance", conformance, NULL, NULL);
	store_url = NULL;
	return cmocka_run_group_tests(tests, NULL, NULL);
}
