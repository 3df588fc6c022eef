/* test_profile.c: unit tests of src/profile -- deduplication in
 * profile__add(), who took a sample (process, thread, service: their own
 * samples, their pprof labels, folded by process), frame naming, the folded, pprof and speedscope writers,
 * and the folded and pprof readers, including the pprof reader's defences
 * against truncated, random, oversized and inconsistent input. When `go` is
 * on PATH, `go tool pprof` must accept what we write. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <jansson.h>
#include <zlib.h>

#include "common/hash.h"
#include "common/utf8.h"
#include "profile/profile.h"
#include "profile/profile.pb-c.h"

#define MB (1024 * 1024)

/* ---- helpers ---- */

static struct prof_frame named(const char *func, const char *module, uint64_t addr)
{
	return (struct prof_frame){.func = func, .module = module, .addr = addr, .offset = addr};
}

static struct prof_frame kframe(const char *func, uint64_t addr)
{
	return (struct prof_frame){
		.func = func, .module = "[kernel.kallsyms]", .addr = addr, .kernel = true};
}

static struct prof_frame mapped(const char *func, const char *module, const char *build_id,
				uint64_t addr)
{
	return (struct prof_frame){
		.func = func,
		.module = module,
		.build_id = build_id,
		.addr = addr,
		.offset = addr - 0x400000 + 0x1000,
		.map_start = 0x400000,
		.map_limit = 0x500000,
		.map_pgoff = 0x1000,
	};
}

/* Writes p in fmt into a malloc()ed buffer. */
static char *write_mem(const struct profile *p, enum prof_format fmt, size_t *len)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&buf, &n);

	assert_non_null(f);
	assert_int_equal(profile__write(p, fmt, f), 0);
	assert_int_equal(fclose(f), 0);
	if (len)
		*len = n;
	return buf;
}

static int read_folded_str(struct profile *p, const char *text, size_t *line)
{
	FILE *f = fmemopen((void *)text, strlen(text), "r");
	int err;

	assert_non_null(f);
	err = profile__read_folded(p, f, line);
	fclose(f);
	return err;
}

static size_t count_string(const struct profile *p, const char *s)
{
	size_t i, n = 0;

	for (i = 0; i < p->nstrings; i++)
		n += !strcmp(p->strings[i], s);
	return n;
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Every sample as "pid/tid/comm:leaf[k]<module>;...;root=count", sorted,
 * joined by '\n': two profiles holding the same samples print the same. */
static char *describe(const struct profile *p)
{
	char **lines = calloc(p->nsamples + 1, sizeof(*lines));
	char *out = NULL;
	size_t i, j, n = 0;
	FILE *f;

	assert_non_null(lines);
	for (i = 0; i < p->nsamples; i++) {
		const struct prof_sample *s = &p->samples[i];
		char *buf = NULL;
		size_t len = 0;

		f = open_memstream(&buf, &len);
		fprintf(f, "%u/%u/%s:", s->pid, s->tid, profile__str(p, s->comm));
		for (j = 0; j < s->nlocs; j++) {
			const struct prof_location *l = &p->locs[s->locs[j]];

			fprintf(f, "%s%s%s<%s>", j ? ";" : "", profile__str(p, l->func),
				l->kernel ? "[k]" : "", profile__str(p, l->module));
		}
		fprintf(f, "=%" PRId64, s->count);
		fclose(f);
		lines[i] = buf;
	}
	qsort(lines, p->nsamples, sizeof(*lines), cmp_str);
	f = open_memstream(&out, &n);
	for (i = 0; i < p->nsamples; i++) {
		fprintf(f, "%s\n", lines[i]);
		free(lines[i]);
	}
	fclose(f);
	free(lines);
	return out;
}

/* A small profile with user, kernel, mapped and unnamed frames in 3 processes. */
static struct profile *sample_profile(void)
{
	struct profile *p = profile__new("cpu", "nanoseconds", 10101010);
	struct prof_frame a[] = {
		mapped("compute", "/usr/bin/app", "0123456789abcdef", 0x401100),
		mapped("main", "/usr/bin/app", "0123456789abcdef", 0x401000),
		named("__libc_start_main", "/usr/lib/libc.so.6", 0x7f0000029d90),
	};
	struct prof_frame b[] = {
		kframe("do_syscall_64", 0xffffffff81a00000ULL),
		kframe("entry_SYSCALL_64", 0xffffffff81c00000ULL),
		{.module = "/usr/lib/libc.so.6", .addr = 0x7f00000f0000, .offset = 0xf0000},
		mapped("main", "/usr/bin/app", "0123456789abcdef", 0x401000),
	};
	struct prof_frame c[] = {
		named("worker", "/usr/bin/other", 0x1234),
	};

	assert_non_null(p);
	p->time_ns = 1700000000000000000LL;
	p->duration_ns = 5000000000LL;
	assert_int_equal(profile__add(p, 100, 100, "app", a, 3, 5), 0);
	assert_int_equal(profile__add(p, 100, 101, "app-worker", a, 3, 2), 0);
	assert_int_equal(profile__add(p, 100, 100, "app", b, 4, 3), 0);
	assert_int_equal(profile__add(p, 200, 200, "other", c, 1, 7), 0);
	assert_int_equal(profile__add(p, 100, 100, "app", a, 3, 1), 0);
	return p;
}

/* ---- profile.c ---- */

static void test_new_and_free(void **state)
{
	struct profile *p = profile__new("cpu", "nanoseconds", 100);

	assert_non_null(p);
	assert_string_equal(p->type, "cpu");
	assert_string_equal(p->unit, "nanoseconds");
	assert_int_equal(p->period, 100);
	assert_int_equal(p->nstrings, 1);
	assert_string_equal(p->strings[0], "");
	assert_int_equal(profile__intern(p, ""), 0);
	assert_string_equal(profile__str(p, 12345), "");
	profile__free(p);
	profile__free(NULL);
}

static void test_intern(void **state)
{
	struct profile *p = profile__new("cpu", "ns", 1);
	uint32_t a = profile__intern(p, "alpha"), b = profile__intern(p, "beta");
	char buf[32];
	int i;

	assert_int_not_equal(a, b);
	assert_int_equal(profile__intern(p, "alpha"), a);
	assert_string_equal(profile__str(p, a), "alpha");
	/* Many strings: indices stay stable as the table grows. */
	for (i = 0; i < 10000; i++) {
		snprintf(buf, sizeof(buf), "s%d", i);
		assert_int_equal(profile__intern(p, buf), i + 3);
	}
	assert_int_equal(profile__intern(p, "s77"), 80);
	assert_int_equal(profile__intern(p, "beta"), b);
	/* Each string's length and hash are kept beside it; an index out of
	 * range answers for "". */
	for (i = 0; i < (int)p->nstrings; i++) {
		const char *str = profile__str(p, (uint32_t)i);
		struct prof_str info = profile__str_info(p, (uint32_t)i);

		assert_int_equal(info.len, strlen(str));
		assert_true(info.hash == hash_bytes(str, strlen(str), 0));
	}
	assert_int_equal(profile__str_info(p, 1u << 30).len, 0);
	assert_true(profile__str_info(p, 1u << 30).hash == hash_bytes("", 0, 0));
	assert_true(profile__str_info(p, a).hash != profile__str_info(p, b).hash);
	profile__free(p);
}

/* A string past PROF_MAX_STRING bytes is kept cut, with a mark, never
 * inside a UTF-8 sequence; the same long string interns to the same index
 * (and so do two that differ only past the cut). */
static void test_intern_cut(void **state)
{
	struct profile *p = profile__new("cpu", "ns", 1);
	size_t big = 1 << 20, mark = strlen(PROF_CUT_MARK), i;
	char *s = malloc(big + 1);
	const char *got;
	uint32_t a;

	memset(s, 'x', big);
	s[big] = '\0';
	a = profile__intern(p, s);
	got = profile__str(p, a);
	assert_int_equal(strlen(got), PROF_MAX_STRING);
	assert_int_equal(profile__str_info(p, a).len, PROF_MAX_STRING);
	assert_memory_equal(got, s, PROF_MAX_STRING - mark);
	assert_string_equal(got + PROF_MAX_STRING - mark, PROF_CUT_MARK);
	assert_int_equal(profile__intern(p, s), a);
	s[big - 1] = 'y';
	assert_int_equal(profile__intern(p, s), a);
	/* Exactly PROF_MAX_STRING bytes: kept whole. */
	s[PROF_MAX_STRING] = '\0';
	assert_string_equal(profile__str(p, profile__intern(p, s)), s);
	/* Two-byte characters across the cut: it falls between two. */
	for (int odd = 0; odd < 2; odd++) {
		memset(s, 'a', 2);
		for (i = 1 + odd; i + 1 < big; i += 2)
			memcpy(s + i, "\xc3\xa9", 2);
		s[i] = '\0';
		got = profile__str(p, profile__intern(p, s));
		assert_true(strlen(got) <= PROF_MAX_STRING);
		assert_true(strlen(got) >= PROF_MAX_STRING - 1);
		assert_true(utf8_valid(got, strlen(got)));
		assert_string_equal(got + strlen(got) - mark, PROF_CUT_MARK);
	}
	free(s);
	profile__free(p);
}

static void test_dedup_same_stack(void **state)
{
	struct profile *p = profile__new("cpu", "ns", 1);
	struct prof_frame st[] = {named("leaf", "/bin/x", 0x10), named("root", "/bin/x", 0x20)};

	assert_int_equal(profile__add(p, 1, 2, "x", st, 2, 3), 0);
	assert_int_equal(profile__add(p, 1, 2, "x", st, 2, 4), 0);
	assert_int_equal(p->nsamples, 1);
	assert_int_equal(p->samples[0].count, 7);
	assert_int_equal(p->total, 7);
	assert_int_equal(p->nlocs, 2);
	assert_int_equal(p->samples[0].nlocs, 2);
	assert_string_equal(profile__str(p, p->locs[p->samples[0].locs[0]].func), "leaf");
	assert_string_equal(profile__str(p, p->locs[p->samples[0].locs[1]].func), "root");
	assert_int_equal(count_string(p, "leaf"), 1);
	assert_int_equal(count_string(p, "/bin/x"), 1);
	assert_int_equal(count_string(p, "x"), 1);

	/* A different tid, pid, comm or stack is another sample. */
	assert_int_equal(profile__add(p, 1, 3, "x", st, 2, 1), 0);
	assert_int_equal(profile__add(p, 9, 2, "x", st, 2, 1), 0);
	assert_int_equal(profile__add(p, 1, 2, "y", st, 2, 1), 0);
	assert_int_equal(profile__add(p, 1, 2, "x", st, 1, 1), 0);
	assert_int_equal(p->nsamples, 5);
	assert_int_equal(p->nlocs, 2);
	assert_int_equal(p->total, 11);

	/* Same name at another address: a new location, not a new string. */
	st[0].addr = 0x11;
	assert_int_equal(profile__add(p, 1, 2, "x", st, 2, 1), 0);
	assert_int_equal(p->nlocs, 3);
	assert_int_equal(p->nsamples, 6);
	assert_int_equal(count_string(p, "leaf"), 1);
	profile__free(p);
}

static void test_mapping_dedup(void **state)
{
	struct profile *p = profile__new("cpu", "ns", 1);
	struct prof_frame st[] = {
		mapped("f", "/usr/bin/app", "feed", 0x401100),
		mapped("g", "/usr/bin/app", "feed", 0x401200),
		named("h", "/usr/lib/libz.so", 0x10),
	};
	const struct prof_mapping *m;

	assert_int_equal(profile__add(p, 1, 1, "app", st, 3, 1), 0);
	assert_int_equal(p->nmappings, 1);
	m = &p->mappings[0];
	assert_string_equal(profile__str(p, m->file), "/usr/bin/app");
	assert_string_equal(profile__str(p, m->build_id), "feed");
	assert_int_equal(m->start, 0x400000);
	assert_int_equal(m->limit, 0x500000);
	assert_int_equal(m->pgoff, 0x1000);
	assert_int_equal(p->locs[0].mapping, 1);
	assert_int_equal(p->locs[1].mapping, 1);
	assert_int_equal(p->locs[2].mapping, 0);
	assert_string_equal(profile__str(p, p->locs[2].module), "/usr/lib/libz.so");

	st[0].map_pgoff = 0;
	assert_int_equal(profile__add(p, 1, 1, "app", st, 1, 1), 0);
	assert_int_equal(p->nmappings, 2);
	assert_int_equal(p->locs[3].mapping, 2);
	profile__free(p);
}

static void test_unknown_frame_names(void **state)
{
	struct profile *p = profile__new("cpu", "ns", 1);
	struct prof_frame st[] = {
		{.module = "/usr/lib/x86_64-linux-gnu/libc.so.6",
		 .addr = 0x7f0000029d90,
		 .offset = 0x29d90},
		{.addr = 0xdeadbeef, .offset = 0xdeadbeef},
		{.func = "", .module = "[vdso]", .addr = 0x7ffd00000a00, .offset = 0xa00},
		{.module = "/usr/lib/x86_64-linux-gnu/libc.so.6",
		 .addr = 0x7f0000029da0,
		 .offset = 0x29da0},
	};

	assert_int_equal(profile__add(p, 1, 1, "x", st, 4, 1), 0);
	assert_int_equal(p->nlocs, 4);
	assert_string_equal(profile__str(p, p->locs[0].func), "libc.so.6+0x29d90");
	assert_string_equal(profile__str(p, p->locs[1].func), "[unknown]+0xdeadbeef");
	assert_string_equal(profile__str(p, p->locs[2].func), "[vdso]+0xa00");
	assert_string_equal(profile__str(p, p->locs[3].func), "libc.so.6+0x29da0");
	assert_int_equal(p->locs[1].module, 0);
	profile__free(p);
}

static void test_add_rejects(void **state)
{
	struct profile *p = profile__new("cpu", "ns", 1);
	struct prof_frame *deep = calloc(PROF_MAX_FRAMES + 1, sizeof(*deep));
	size_t i;

	for (i = 0; i <= PROF_MAX_FRAMES; i++)
		deep[i] = named("f", "/bin/x", i);
	assert_int_equal(profile__add(p, 1, 1, "x", deep, PROF_MAX_FRAMES + 1, 1), -EINVAL);
	assert_int_equal(profile__add(p, 1, 1, "x", deep, 2, -1), -EINVAL);
	assert_int_equal(profile__add(p, 1, 1, "x", NULL, 2, 1), -EINVAL);
	assert_int_equal(p->nsamples, 0);
	assert_int_equal(profile__add(p, 1, 1, "x", deep, PROF_MAX_FRAMES, 1), 0);
	assert_int_equal(p->samples[0].nlocs, PROF_MAX_FRAMES);
	assert_int_equal(profile__add(p, 1, 1, "x", deep, 0, INT64_MAX - 1), 0);
	assert_int_equal(profile__add(p, 1, 1, "x", deep, 0, 1), -EOVERFLOW);
	assert_int_equal(p->total, INT64_MAX);
	/* A profile that saturates (what a read builds) stops there instead,
	 * its samples' counts too. */
	p->saturate = true;
	assert_int_equal(profile__add(p, 1, 1, "x", deep, 0, INT64_MAX), 0);
	assert_int_equal(profile__add(p, 2, 2, "y", deep, 1, 5), 0);
	assert_int_equal(p->total, INT64_MAX);
	for (i = 0; i < p->nsamples; i++)
		if (p->samples[i].nlocs == 0)
			assert_int_equal(p->samples[i].count, INT64_MAX);
	p->saturate = false;
	/* A sample with no frames and a NULL comm is fine. */
	assert_int_equal(profile__add(p, 1, 1, NULL, NULL, 0, 0), 0);
	free(deep);
	profile__free(p);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* 100k samples of 30 frames, as a record of a busy machine gives: the
 * counts are checked, the time printed (a test asserts no timing; the
 * benchmarks in bench/ measure). */
static void test_add_many(void **state)
{
	static const char *mods[] = {"/usr/bin/app", "/usr/lib/libc.so.6", "/usr/lib/libm.so.6"};
	struct profile *p = profile__new("cpu", "ns", 1);
	struct prof_frame st[30];
	char names[300][32];
	double t, secs;
	size_t i, j;

	for (i = 0; i < 300; i++)
		snprintf(names[i], sizeof(names[i]), "function_number_%zu", i);

	/* Stacks drawn from a few thousand paths through 300 functions, with
	 * some unnamed frames that need formatting. */
	t = now();
	for (i = 0; i < 100000; i++) {
		size_t path = (i * 2654435761u) % 3000;

		for (j = 0; j < 30; j++) {
			size_t k = (path * 31 + j * 17 + (path >> (j % 5))) % 300;

			st[j] = mapped(k % 17 ? names[k] : NULL, mods[k % 3], "abc", 0x400000 + k);
		}
		assert_int_equal(profile__add(p, 1000 + i % 50, 1000 + i % 200, "app", st, 30, 1),
				 0);
	}
	secs = now() - t;
	printf("typical: 100000 samples of 30 frames in %.3f s (%zu samples, %zu locations)\n",
	       secs, p->nsamples, p->nlocs);
	assert_int_equal(p->total, 100000);
	profile__free(p);

	/* The worst case: every sample distinct, with a fresh leaf address
	 * each time, so the tables grow all the way. */
	p = profile__new("cpu", "ns", 1);
	t = now();
	for (i = 0; i < 100000; i++) {
		for (j = 0; j < 30; j++) {
			size_t k = (i * 7 + j * 13 + (i >> (j % 8))) % 300;

			st[j] = mapped(k % 17 ? names[k] : NULL, mods[k % 3], "abc", 0x400000 + k);
		}
		st[0].addr = 0x400000 + i % 4000;
		st[29].addr = i;
		assert_int_equal(profile__add(p, 1000 + i % 50, 1000 + i % 200, "app", st, 30, 1),
				 0);
	}
	secs = now() - t;
	printf("distinct: 100000 samples of 30 frames in %.3f s (%zu samples, %zu locations)\n",
	       secs, p->nsamples, p->nlocs);
	assert_int_equal(p->total, 100000);
	assert_int_equal(p->nsamples, 100000);
	profile__free(p);
}

static void test_format_names(void **state)
{
	assert_int_equal(prof_format_from_name("folded"), PROF_FMT_FOLDED);
	assert_int_equal(prof_format_from_name("pprof"), PROF_FMT_PPROF);
	assert_int_equal(prof_format_from_name("speedscope"), PROF_FMT_SPEEDSCOPE);
	assert_int_equal(prof_format_from_name("json"), PROF_FMT_NONE);
	assert_int_equal(prof_format_from_name(NULL), PROF_FMT_NONE);
	assert_string_equal(prof_format_name(PROF_FMT_FOLDED), "folded");
	assert_string_equal(prof_format_name(PROF_FMT_PPROF), "pprof");
	assert_string_equal(prof_format_name(PROF_FMT_SPEEDSCOPE), "speedscope");

	assert_int_equal(prof_format_from_path("out.folded"), PROF_FMT_FOLDED);
	assert_int_equal(prof_format_from_path("out.collapsed"), PROF_FMT_FOLDED);
	assert_int_equal(prof_format_from_path("/tmp/a.b/out.txt"), PROF_FMT_FOLDED);
	assert_int_equal(prof_format_from_path("cpu.pb.gz"), PROF_FMT_PPROF);
	assert_int_equal(prof_format_from_path("cpu.pprof"), PROF_FMT_PPROF);
	assert_int_equal(prof_format_from_path("cpu.pb"), PROF_FMT_PPROF);
	assert_int_equal(prof_format_from_path("x.speedscope.json"), PROF_FMT_SPEEDSCOPE);
	assert_int_equal(prof_format_from_path("x.json"), PROF_FMT_SPEEDSCOPE);
	assert_int_equal(prof_format_from_path("x.gz"), PROF_FMT_NONE);
	assert_int_equal(prof_format_from_path("folded"), PROF_FMT_NONE);
	assert_int_equal(prof_format_from_path(NULL), PROF_FMT_NONE);

	assert_int_equal(profile__write(NULL, PROF_FMT_NONE, stdout), -EINVAL);
}

/* ---- folded ---- */

static void test_folded_write(void **state)
{
	struct profile *p = sample_profile();
	struct prof_frame odd[] = {named("a;b\nc", NULL, 1)};
	char *text;

	/* Same stack in another pid of the same comm: one line. */
	assert_int_equal(
		profile__add(p, 300, 300, "other",
			     (struct prof_frame[]){named("worker", "/usr/bin/other", 0x1234)}, 1,
			     1),
		0);
	assert_int_equal(profile__add(p, 400, 400, "", odd, 1, 2), 0);
	text = write_mem(p, PROF_FMT_FOLDED, NULL);
	assert_string_equal(text,
			    "a:b c 2\n"
			    "app-worker;__libc_start_main;main;compute 2\n"
			    "app;__libc_start_main;main;compute 6\n"
			    "app;main;libc.so.6+0xf0000;entry_SYSCALL_64_[k];do_syscall_64_[k] 3\n"
			    "other;worker 8\n");
	free(text);
	profile__free(p);
}

static void test_folded_roundtrip(void **state)
{
	struct profile *p = sample_profile(), *q = profile__new("cpu", "ns", 1);
	char *text, *again, *d;
	size_t line = 99;

	text = write_mem(p, PROF_FMT_FOLDED, NULL);
	assert_int_equal(read_folded_str(q, text, &line), 0);
	assert_int_equal(line, 4);
	assert_int_equal(q->total, p->total);
	assert_int_equal(q->nsamples, 4);
	again = write_mem(q, PROF_FMT_FOLDED, NULL);
	assert_string_equal(again, text);

	d = describe(q);
	assert_string_equal(d, "0/0/app-worker:compute<>;main<>;__libc_start_main<>=2\n"
			       "0/0/app:compute<>;main<>;__libc_start_main<>=6\n"
			       "0/0/app:do_syscall_64[k]<>;entry_SYSCALL_64[k]<>;"
			       "libc.so.6+0xf0000<>;main<>=3\n"
			       "0/0/other:worker<>=7\n");
	free(d);
	free(again);
	free(text);
	profile__free(p);
	profile__free(q);
}

static void test_folded_read_lenient(void **state)
{
	struct profile *p = profile__new("cpu", "ns", 1);
	size_t line = 0;
	char *d;

	/* Blank lines, CRLF, trailing blanks, spaces inside names, a lone comm,
	 * and a final line without '\n'. */
	assert_int_equal(read_folded_str(p,
					 "\n"
					 "a;std::vector<int>::push_back(int const&);x 3\r\n"
					 "   \n"
					 "b 4  \n"
					 "a;x 1",
					 &line),
			 0);
	assert_int_equal(line, 5);
	d = describe(p);
	assert_string_equal(d, "0/0/a:x<>;std::vector<int>::push_back(int const&)<>=3\n"
			       "0/0/a:x<>=1\n"
			       "0/0/b:=4\n");
	free(d);
	profile__free(p);
}

static void test_folded_read_errors(void **state)
{
	static const struct {
		const char *text;
		size_t line;
	} bad[] = {
		{"a;b 1\nnocount\n", 2},
		{"a;b 1\na;b x\n", 2},
		{"a;b -1\n", 1},
		{"a;b 1.5\n", 1},
		{"a;b \n", 1},
		{"a;;b 1\n", 1},
		{"a;b; 1\n", 1},
		{" 5\n", 1},
		{"a;b 99999999999999999999\n", 1},
		{"\n\na;b 1\na;b 2\nc;d 1e3\n", 5},
		{"a;b 9223372036854775807\na;b 1\n", 2},
	};
	size_t i, line;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct profile *p = profile__new("cpu", "ns", 1);

		line = 0;
		assert_int_equal(read_folded_str(p, bad[i].text, &line), bad[i].line ? -EINVAL : 0);
		if (line != bad[i].line)
			fail_msg("case %zu: line %zu, want %zu", i, line, bad[i].line);
		profile__free(p);
	}
}

static void test_folded_read_limits(void **state)
{
	struct profile *p = profile__new("cpu", "ns", 1);
	size_t n = 2 * MB, i, line = 0;
	char *text = malloc(n + 64), *d;
	FILE *f;

	/* A line over 1 MiB is rejected, not buffered without end. */
	strcpy(text, "ok;a 1\ncomm;");
	for (i = strlen(text); i < n; i++)
		text[i] = 'x';
	strcpy(text + n, " 1\n");
	assert_int_equal(read_folded_str(p, text, &line), -EINVAL);
	assert_int_equal(line, 2);
	assert_int_equal(p->nsamples, 1);
	profile__free(p);

	/* A NUL byte in a line is malformed. */
	p = profile__new("cpu", "ns", 1);
	f = fmemopen("a;b 1\na;\0b 2\n", 13, "r");
	assert_int_equal(profile__read_folded(p, f, &line), -EINVAL);
	assert_int_equal(line, 2);
	fclose(f);
	profile__free(p);

	/* A stack deeper than PROF_MAX_FRAMES keeps its leaf-most frames. */
	p = profile__new("cpu", "ns", 1);
	f = fmemopen(text, n + 64, "w");
	fputs("deep", f);
	for (i = 0; i < 600; i++)
		fprintf(f, ";f%zu", i);
	fputs(" 2\n", f);
	fputc('\0', f);
	fclose(f);
	assert_int_equal(read_folded_str(p, text, &line), 0);
	assert_int_equal(p->nsamples, 1);
	assert_int_equal(p->samples[0].nlocs, PROF_MAX_FRAMES);
	assert_string_equal(profile__str(p, p->locs[p->samples[0].locs[0]].func), "f599");
	assert_string_equal(profile__str(p, p->locs[p->samples[0].locs[PROF_MAX_FRAMES - 1]].func),
			    "f88");
	d = describe(p);
	assert_non_null(strstr(d, "=2\n"));
	free(d);
	free(text);
	profile__free(p);
}

/* ---- pprof ---- */

static uint8_t *gunzip_all(const uint8_t *in, size_t len, size_t *outlen)
{
	size_t cap = 1 << 20;
	uint8_t *out = malloc(cap);
	z_stream zs = {0};

	assert_int_equal(inflateInit2(&zs, 31), Z_OK);
	zs.next_in = (Bytef *)in;
	zs.avail_in = len;
	zs.next_out = out;
	zs.avail_out = cap;
	assert_int_equal(inflate(&zs, Z_FINISH), Z_STREAM_END);
	*outlen = zs.total_out;
	inflateEnd(&zs);
	return out;
}

/* A profile as a store selects it -- functions by name, module, source file
 * and kernel-ness, with no mappings or addresses -- reads back from pprof
 * as it was (the coordinator merges servers' profiles through pprof): a
 * module beside a source file, a source file without line numbers, a
 * kernel frame known by name alone (folded input), a module alone. */
static void test_pprof_store_roundtrip(void **state)
{
	struct profile *p = profile__new("cpu", "samples", 10000000), *q;
	struct prof_frame st[4] = {
		{.func = "leaf_k", .kernel = true},
		{.func = "crunch", .module = "/usr/bin/app", .file = "/src/app.c"},
		{.func = "handler", .file = "main.go"},
		{.func = "main", .module = "/usr/bin/app"},
	};
	char *buf;
	size_t len, i, seen = 0;

	assert_int_equal(profile__add(p, 0, 0, "", st, 4, 7), 0);
	buf = write_mem(p, PROF_FMT_PPROF, &len);
	q = profile__read_pprof(buf, len, 16 * MB);
	assert_non_null(q);
	assert_int_equal(q->nlocs, 4);
	assert_int_equal(q->nsamples, 1);
	assert_int_equal(q->samples[0].count, 7);
	for (i = 0; i < q->nlocs; i++) {
		const struct prof_location *l = &q->locs[i];
		const char *fn = profile__str(q, l->func), *file = profile__str(q, l->file),
			   *mod = profile__str(q, l->module);

		if (!strcmp(fn, "leaf_k")) {
			assert_true(l->kernel);
			assert_string_equal(mod, "");
			assert_string_equal(file, "");
		} else if (!strcmp(fn, "crunch")) {
			assert_false(l->kernel);
			assert_string_equal(mod, "/usr/bin/app");
			assert_string_equal(file, "/src/app.c");
		} else if (!strcmp(fn, "handler")) {
			assert_string_equal(mod, "");
			assert_string_equal(file, "main.go");
		} else {
			assert_string_equal(fn, "main");
			assert_string_equal(mod, "/usr/bin/app");
			assert_string_equal(file, "");
		}
		assert_int_equal(l->kernel, !strcmp(fn, "leaf_k"));
		seen++;
	}
	assert_int_equal(seen, 4);
	free(buf);
	profile__free(p);
	profile__free(q);
}

/* Source lines: an inlined function and its caller at one address, and a
 * Python frame (no mapping) -- each keeps its file, line and first line
 * through pprof (Function.filename and start_line, Line.line), and
 * speedscope has a frame per function and line. Frames that
 * differ only by line are locations of their own. */
static void test_pprof_lines(void **state)
{
	struct profile *p = profile__new("cpu", "nanoseconds", 1), *q;
	struct prof_frame st[3], st2[3];
	char *buf, *js;
	size_t len, i, seen = 0;

	st[0] = mapped("crunch", "/usr/bin/app", NULL, 0x401000);
	st[0].file = "/src/app.c";
	st[0].line = 16;
	st[0].start_line = 14;
	st[1] = st[0];
	st[1].func = "spin_unit";
	st[1].line = 21;
	st[1].start_line = 19;
	st[2] = named("run (train.py)", NULL, 0x12345);
	st[2].file = "/work/train.py";
	st[2].line = 40;
	st[2].start_line = 37;
	assert_int_equal(profile__add(p, 1, 1, "app", st, 3, 5), 0);
	memcpy(st2, st, sizeof(st));
	st2[2].line = 41;
	st2[2].addr = 0x12346;
	assert_int_equal(profile__add(p, 1, 1, "app", st2, 3, 2), 0);
	assert_int_equal(p->nlocs, 4);
	assert_int_equal(p->nsamples, 2);

	buf = write_mem(p, PROF_FMT_PPROF, &len);
	q = profile__read_pprof(buf, len, 16 * MB);
	assert_non_null(q);
	assert_int_equal(q->nlocs, 4);
	for (i = 0; i < q->nlocs; i++) {
		const struct prof_location *l = &q->locs[i];
		const char *fn = profile__str(q, l->func), *file = profile__str(q, l->file);

		if (!strcmp(fn, "crunch")) {
			assert_string_equal(file, "/src/app.c");
			assert_int_equal(l->line, 16);
			assert_int_equal(l->start_line, 14);
			assert_string_equal(profile__str(q, l->module), "/usr/bin/app");
			seen++;
		} else if (!strcmp(fn, "spin_unit")) {
			assert_string_equal(file, "/src/app.c");
			assert_int_equal(l->line, 21);
			assert_int_equal(l->start_line, 19);
			assert_int_equal(l->addr, 0x401000);
			seen++;
		} else {
			assert_string_equal(fn, "run (train.py)");
			assert_string_equal(file, "/work/train.py");
			assert_true(l->line == 40 || l->line == 41);
			assert_int_equal(l->start_line, 37);
			assert_false(l->kernel);
			assert_int_equal(l->module, 0);
			seen++;
		}
	}
	assert_int_equal(seen, 4);
	profile__free(q);
	free(buf);

	js = write_mem(p, PROF_FMT_SPEEDSCOPE, NULL);
	/* A frame per function and line. */
	assert_non_null(strstr(js, "{\"name\":\"crunch\",\"file\":\"/src/app.c\",\"line\":16}"));
	assert_non_null(strstr(
		js, "{\"name\":\"run (train.py)\",\"file\":\"/work/train.py\",\"line\":40}"));
	assert_non_null(strstr(
		js, "{\"name\":\"run (train.py)\",\"file\":\"/work/train.py\",\"line\":41}"));
	free(js);
	profile__free(p);
}

static void test_pprof_roundtrip(void **state)
{
	struct profile *p = sample_profile(), *q;
	uint8_t *buf, *raw;
	char *d1, *d2;
	size_t len, rawlen, i;
	uint32_t app = UINT32_MAX;

	buf = (uint8_t *)write_mem(p, PROF_FMT_PPROF, &len);
	assert_true(len > 20);
	assert_int_equal(buf[0], 0x1f);
	assert_int_equal(buf[1], 0x8b);

	q = profile__read_pprof(buf, len, 16 * MB);
	assert_non_null(q);
	assert_string_equal(q->type, "cpu");
	assert_string_equal(q->unit, "nanoseconds");
	assert_int_equal(q->period, 10101010);
	assert_int_equal(q->time_ns, 1700000000000000000LL);
	assert_int_equal(q->duration_ns, 5000000000LL);
	assert_int_equal(q->total, p->total);
	assert_int_equal(q->nsamples, p->nsamples);
	assert_int_equal(q->nlocs, p->nlocs);

	/* Same samples: pid, tid, comm, names, kernel flags, modules, counts. */
	d1 = describe(p);
	d2 = describe(q);
	assert_string_equal(d2, d1);
	assert_non_null(strstr(d2, "100/101/app-worker:compute<"));
	assert_non_null(strstr(d2, "do_syscall_64[k]<[kernel.kallsyms]>"));
	free(d1);
	free(d2);

	/* The mapping, with its build id and range. */
	assert_int_equal(q->nmappings, 1);
	assert_string_equal(profile__str(q, q->mappings[0].file), "/usr/bin/app");
	assert_string_equal(profile__str(q, q->mappings[0].build_id), "0123456789abcdef");
	assert_int_equal(q->mappings[0].start, 0x400000);
	assert_int_equal(q->mappings[0].limit, 0x500000);
	assert_int_equal(q->mappings[0].pgoff, 0x1000);
	for (i = 0; i < q->nlocs; i++)
		if (!strcmp(profile__str(q, q->locs[i].func), "compute"))
			app = i;
	assert_int_not_equal(app, UINT32_MAX);
	assert_int_equal(q->locs[app].mapping, 1);
	assert_int_equal(q->locs[app].addr, 0x401100);

	/* The raw protobuf reads the same, and the second sample value is
	 * count * period. */
	raw = gunzip_all(buf, len, &rawlen);
	profile__free(q);
	q = profile__read_pprof(raw, rawlen, 16 * MB);
	assert_non_null(q);
	assert_int_equal(q->total, p->total);
	{
		Perftools__Profiles__Profile *m =
			perftools__profiles__profile__unpack(NULL, rawlen, raw);

		assert_non_null(m);
		assert_int_equal(m->n_sample_type, 2);
		assert_string_equal(m->string_table[m->sample_type[0]->type], "samples");
		assert_string_equal(m->string_table[m->sample_type[0]->unit], "count");
		assert_string_equal(m->string_table[m->sample_type[1]->type], "cpu");
		assert_string_equal(m->string_table[m->sample_type[1]->unit], "nanoseconds");
		assert_string_equal(m->string_table[m->period_type->type], "cpu");
		for (i = 0; i < m->n_sample; i++) {
			assert_int_equal(m->sample[i]->n_value, 2);
			assert_int_equal(m->sample[i]->value[1], m->sample[i]->value[0] * 10101010);
			assert_int_equal(m->sample[i]->n_label, 3);
		}
		/* Functions are one per (name, file): "main" appears once. */
		for (i = 0, app = 0; i < m->n_function; i++)
			app += !strcmp(m->string_table[m->function[i]->name], "main");
		assert_int_equal(app, 1);
		perftools__profiles__profile__free_unpacked(m, NULL);
	}
	/* Too large for max_bytes, compressed or not. */
	errno = 0;
	assert_null(profile__read_pprof(buf, len, rawlen - 1));
	assert_int_equal(errno, EFBIG);
	assert_null(profile__read_pprof(raw, rawlen, rawlen - 1));
	assert_int_equal(errno, EFBIG);
	profile__free(q);
	q = profile__read_pprof(buf, len, rawlen);
	assert_non_null(q);

	free(raw);
	free(buf);
	profile__free(q);
	profile__free(p);
}

static void test_pprof_empty_profile(void **state)
{
	struct profile *p = profile__new("cpu", "nanoseconds", 1), *q;
	size_t len;
	uint8_t *buf = (uint8_t *)write_mem(p, PROF_FMT_PPROF, &len);

	q = profile__read_pprof(buf, len, MB);
	assert_non_null(q);
	assert_int_equal(q->nsamples, 0);
	assert_string_equal(q->type, "cpu");
	free(buf);
	profile__free(q);
	profile__free(p);
}

static void test_pprof_rejects_truncated(void **state)
{
	struct profile *p = sample_profile(), *q;
	uint8_t *buf, *raw;
	size_t len, rawlen, i;

	buf = (uint8_t *)write_mem(p, PROF_FMT_PPROF, &len);
	/* Every prefix of the gzip file: the stream or its trailer is cut. */
	for (i = 0; i < len; i++) {
		errno = 0;
		q = profile__read_pprof(buf, i, 16 * MB);
		if (q)
			fail_msg("a %zu-byte prefix of %zu bytes was accepted", i, len);
		assert_int_equal(errno, EINVAL);
	}
	/* Trailing garbage after the gzip member. */
	buf = realloc(buf, len + 4);
	memcpy(buf + len, "junk", 4);
	assert_null(profile__read_pprof(buf, len + 4, 16 * MB));
	assert_int_equal(errno, EINVAL);

	/* Prefixes of the raw message may happen to be valid messages; they
	 * must not crash, and cut inside a field they must fail. */
	raw = gunzip_all(buf, len, &rawlen);
	for (i = 0; i < rawlen; i++) {
		q = profile__read_pprof(raw, i, 16 * MB);
		profile__free(q);
	}
	assert_null(profile__read_pprof(raw, rawlen - 1, 16 * MB));
	assert_null(profile__read_pprof(raw, 0, 16 * MB));
	assert_int_equal(errno, EINVAL);
	assert_null(profile__read_pprof(NULL, 5, 16 * MB));
	assert_int_equal(errno, EINVAL);
	free(raw);
	free(buf);
	profile__free(p);
}

static void test_pprof_rejects_garbage(void **state)
{
	struct profile *p = sample_profile(), *q;
	uint8_t junk[4096], *buf, *raw, *mut;
	size_t len, rawlen, i, j, accepted = 0;
	unsigned int seed = 12345;

	for (i = 0; i < 2000; i++) {
		size_t n = rand_r(&seed) % sizeof(junk);

		for (j = 0; j < n; j++)
			junk[j] = rand_r(&seed);
		if (i % 4 == 0 && n >= 2) {
			junk[0] = 0x1f;
			junk[1] = 0x8b;
		}
		errno = 0;
		q = profile__read_pprof(junk, n, MB);
		if (q) {
			accepted++;
			profile__free(q);
		} else {
			assert_int_equal(errno, EINVAL);
		}
	}
	assert_true(accepted < 20);

	/* Flipped bytes in a valid message: never a crash, and whatever is
	 * accepted has sane references. */
	buf = (uint8_t *)write_mem(p, PROF_FMT_PPROF, &len);
	raw = gunzip_all(buf, len, &rawlen);
	mut = malloc(rawlen);
	for (i = 0; i < 5000; i++) {
		memcpy(mut, raw, rawlen);
		for (j = 0; j < 1 + i % 4; j++)
			mut[rand_r(&seed) % rawlen] = rand_r(&seed);
		q = profile__read_pprof(mut, rawlen, MB);
		if (q) {
			for (j = 0; j < q->nsamples; j++)
				assert_true(q->samples[j].comm < q->nstrings);
			for (j = 0; j < q->nlocs; j++)
				assert_true(q->locs[j].mapping <= q->nmappings);
			profile__free(q);
		}
	}
	free(mut);
	free(raw);
	free(buf);
	profile__free(p);
}

static void test_pprof_rejects_gzip_bomb(void **state)
{
	static uint8_t zeros[MB];
	size_t cap = 1 << 20, total = 100 * (size_t)MB, fed = 0;
	uint8_t *out = malloc(cap);
	z_stream zs = {0};
	struct timespec t0, t1;

	/* 100 MB of zeros squeeze into about 100 kB. */
	assert_int_equal(deflateInit2(&zs, 9, Z_DEFLATED, 31, 9, Z_DEFAULT_STRATEGY), Z_OK);
	zs.next_out = out;
	zs.avail_out = cap;
	while (fed < total) {
		zs.next_in = zeros;
		zs.avail_in = sizeof(zeros);
		fed += sizeof(zeros);
		assert_int_equal(deflate(&zs, fed < total ? Z_NO_FLUSH : Z_FINISH),
				 fed < total ? Z_OK : Z_STREAM_END);
		assert_int_not_equal(zs.avail_out, 0);
	}
	printf("gzip bomb: %zu bytes expanding to %zu\n", (size_t)zs.total_out, total);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	errno = 0;
	assert_null(profile__read_pprof(out, zs.total_out, MB));
	assert_int_equal(errno, EFBIG);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	/* It stops at the bound instead of inflating all 100 MB. */
	assert_true((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9 < 0.2);
	deflateEnd(&zs);
	free(out);
}

/* VmRSS or VmHWM of this process, kB. */
static long status_kb(const char *key)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long v = -1;

	while (f && fgets(line, sizeof(line), f))
		if (!strncmp(line, key, strlen(key)))
			v = atol(line + strlen(key) + 1);
	if (f)
		fclose(f);
	return v;
}

static int visit_nothing(void *ctx, const struct pprof_sample *s)
{
	return 0;
}

/* 4 MB of empty samples ("\x12\x00" two million times) would unpack to
 * about 250 MB: refused by the scan before unpacking, the reader's peak
 * memory not moving (in a child, whose high-water mark is its own), while
 * a real profile of the same size is read. */
static void test_pprof_rejects_empty_submessages(void **state)
{
	size_t n = 4 * (size_t)MB, i;
	uint8_t *bomb = malloc(n);
	struct pprof_visitor v = {.sample = visit_nothing};
	int pipefd[2], status;
	long grew = -1;
	pid_t pid;

	for (i = 0; i < n; i += 2) {
		bomb[i] = 0x12;
		bomb[i + 1] = 0;
	}
	assert_int_equal(pipe(pipefd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		long before = status_kb("VmRSS");
		int err;

		/* VmHWM counts from here: the child's pages so far are its
		 * parent's. */
		FILE *f = fopen("/proc/self/clear_refs", "w");

		if (f) {
			fputs("5", f);
			fclose(f);
		}
		err = profile__visit_pprof(bomb, n, 64 * (size_t)MB, &v);
		grew = err == -EFBIG ? status_kb("VmHWM") - before : -2;
		if (write(pipefd[1], &grew, sizeof(grew)) != sizeof(grew))
			_exit(1);
		_exit(0);
	}
	close(pipefd[1]);
	assert_int_equal(read(pipefd[0], &grew, sizeof(grew)), sizeof(grew));
	close(pipefd[0]);
	waitpid(pid, &status, 0);
	printf("empty submessages: refused (EFBIG: %s), peak grew %ld kB\n",
	       grew >= 0 ? "yes" : "no", grew);
	assert_true(grew >= 0);
	assert_true(grew < 16 * 1024);
	errno = 0;
	assert_null(profile__read_pprof(bomb, n, 64 * (size_t)MB));
	assert_int_equal(errno, EFBIG);
	free(bomb);
}

/* A minimal valid message, built by hand so tests can break one reference
 * at a time: 1 mapping, 2 functions, 2 locations, 1 sample. */
struct hand_msg {
	Perftools__Profiles__Profile prof;
	Perftools__Profiles__ValueType vt, *vtp[1];
	Perftools__Profiles__Mapping map, *mapp[1];
	Perftools__Profiles__Function fn[2], *fnp[2];
	Perftools__Profiles__Line line[2], *linep[2];
	Perftools__Profiles__Location loc[2], *locp[2];
	Perftools__Profiles__Label lab[2], *labp[2];
	Perftools__Profiles__Sample smp, *smpp[1];
	uint64_t loc_ids[2];
	int64_t value[1];
	char *strings[9];
};

static void hand_msg__init(struct hand_msg *h)
{
	static const char *const strs[] = {"",	   "samples", "count", "/bin/app", "beef",
					   "leaf", "root",    "pid",   "comm"};
	int i;

	memset(h, 0, sizeof(*h));
	perftools__profiles__profile__init(&h->prof);
	for (i = 0; i < 9; i++)
		h->strings[i] = (char *)strs[i];
	h->prof.n_string_table = 9;
	h->prof.string_table = h->strings;
	perftools__profiles__value_type__init(&h->vt);
	h->vt.type = 1;
	h->vt.unit = 2;
	h->vtp[0] = &h->vt;
	h->prof.n_sample_type = 1;
	h->prof.sample_type = h->vtp;
	h->prof.period = 7;

	perftools__profiles__mapping__init(&h->map);
	h->map.id = 10;
	h->map.memory_start = 0x1000;
	h->map.memory_limit = 0x2000;
	h->map.filename = 3;
	h->map.build_id = 4;
	h->mapp[0] = &h->map;
	h->prof.n_mapping = 1;
	h->prof.mapping = h->mapp;

	for (i = 0; i < 2; i++) {
		perftools__profiles__function__init(&h->fn[i]);
		h->fn[i].id = 20 + i;
		h->fn[i].name = 5 + i;
		h->fnp[i] = &h->fn[i];
		perftools__profiles__line__init(&h->line[i]);
		h->line[i].function_id = 20 + i;
		h->linep[i] = &h->line[i];
		perftools__profiles__location__init(&h->loc[i]);
		h->loc[i].id = 30 + i;
		h->loc[i].mapping_id = 10;
		h->loc[i].address = 0x1100 + i;
		h->loc[i].n_line = 1;
		h->loc[i].line = &h->linep[i];
		h->locp[i] = &h->loc[i];
		h->loc_ids[i] = 30 + i;
		perftools__profiles__label__init(&h->lab[i]);
		h->labp[i] = &h->lab[i];
	}
	h->prof.n_function = 2;
	h->prof.function = h->fnp;
	h->prof.n_location = 2;
	h->prof.location = h->locp;
	h->lab[0].key = 7;
	h->lab[0].num = 4242;
	h->lab[1].key = 8;
	h->lab[1].str = 3;

	perftools__profiles__sample__init(&h->smp);
	h->smp.n_location_id = 2;
	h->smp.location_id = h->loc_ids;
	h->value[0] = 9;
	h->smp.n_value = 1;
	h->smp.value = h->value;
	h->smp.n_label = 2;
	h->smp.label = h->labp;
	h->smpp[0] = &h->smp;
	h->prof.n_sample = 1;
	h->prof.sample = h->smpp;
}

/* Packs h and reads it back: NULL with errno, or the profile. */
static struct profile *hand_msg__read(struct hand_msg *h)
{
	size_t n = perftools__profiles__profile__get_packed_size(&h->prof);
	uint8_t *buf = malloc(n + 1);
	struct profile *p;

	assert_int_equal(perftools__profiles__profile__pack(&h->prof, buf), n);
	errno = 0;
	p = profile__read_pprof(buf, n, MB);
	free(buf);
	return p;
}

static void expect_bad(struct hand_msg *h, const char *what)
{
	struct profile *p = hand_msg__read(h);

	if (p || errno != EINVAL)
		fail_msg("%s: accepted (errno %d)", what, errno);
	hand_msg__init(h);
}

static void test_pprof_rejects_bad_references(void **state)
{
	struct hand_msg h;
	struct profile *p;
	char *d;

	/* The control: the untouched message reads, so a rejection below is
	 * about the one field each case breaks. */
	hand_msg__init(&h);
	p = hand_msg__read(&h);
	assert_non_null(p);
	assert_string_equal(p->type, "samples");
	assert_int_equal(p->period, 7);
	d = describe(p);
	assert_string_equal(d, "4242/0//bin/app:leaf</bin/app>;root</bin/app>=9\n");
	free(d);
	assert_int_equal(p->nmappings, 1);
	assert_string_equal(profile__str(p, p->mappings[0].build_id), "beef");
	profile__free(p);

	h.fn[0].name = 9;
	expect_bad(&h, "function name past the string table");
	h.fn[1].filename = -1;
	expect_bad(&h, "negative string index");
	h.map.filename = 1000;
	expect_bad(&h, "mapping file name");
	h.map.build_id = 9;
	expect_bad(&h, "mapping build id");
	h.vt.unit = 9;
	expect_bad(&h, "sample type unit");
	h.lab[1].str = 9;
	expect_bad(&h, "label string");
	h.lab[0].key = 99;
	expect_bad(&h, "label key");
	h.prof.drop_frames = 9;
	expect_bad(&h, "drop_frames");
	h.prof.default_sample_type = 100;
	expect_bad(&h, "default_sample_type");
	h.loc_ids[1] = 32;
	expect_bad(&h, "sample location id");
	h.loc_ids[0] = 0;
	expect_bad(&h, "sample location id 0");
	h.loc[0].mapping_id = 11;
	expect_bad(&h, "location mapping id");
	h.line[1].function_id = 19;
	expect_bad(&h, "line function id");
	h.loc[1].id = 30;
	expect_bad(&h, "duplicate location id");
	h.fn[0].id = 0;
	expect_bad(&h, "function id 0");
	h.strings[0] = (char *)"x";
	expect_bad(&h, "string_table[0] not empty");
	h.prof.n_string_table = 0;
	expect_bad(&h, "no string table");
	h.prof.n_sample_type = 0;
	expect_bad(&h, "no sample type");
	h.smp.n_value = 0;
	expect_bad(&h, "value count != sample type count");
	h.value[0] = -3;
	expect_bad(&h, "negative count");
}

/* ---- speedscope ---- */

static const char *frame_name(json_t *frames, json_t *idx)
{
	return json_string_value(
		json_object_get(json_array_get(frames, json_integer_value(idx)), "name"));
}

/* ---- who took a sample: process, thread, service ---- */

struct who_seen {
	char text[8][256]; /* per sample: its labels, "k=v k=v ..." */
	size_t n;
};

static int who_sample(void *ctx, const struct pprof_sample *s)
{
	struct who_seen *w = ctx;
	char *t = w->text[w->n++];
	size_t off = 0;

	assert_true(w->n <= 8);
	for (size_t i = 0; i < s->nlabels; i++) {
		const struct pprof_label *l = &s->labels[i];

		if (l->str)
			off += snprintf(t + off, 256 - off, "%s%s=%s", i ? " " : "", l->key,
					l->str);
		else
			off += snprintf(t + off, 256 - off, "%s%s=%" PRId64, i ? " " : "", l->key,
					l->num);
	}
	return 0;
}

static int who_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The sample of p with this thread (string), NULL if none. */
static const struct prof_sample *sample_of_thread(const struct profile *p, const char *thread)
{
	for (size_t i = 0; i < p->nsamples; i++)
		if (!strcmp(profile__str(p, p->samples[i].thread), thread))
			return &p->samples[i];
	return NULL;
}

static void test_who(void **state)
{
	struct profile *p = profile__new("cpu", "nanoseconds", 10101010), *q;
	struct prof_frame st[] = {named("spin", "/w/labelproc", 0x1100),
				  named("worker", "/w/labelproc", 0x1000)};
	struct prof_who a = {.pid = 10,
			     .tid = 11,
			     .comm = "labelproc",
			     .thread = "worker-a",
			     .service = "trainer"};
	struct prof_who b = {.pid = 10, .tid = 12, .comm = "labelproc", .thread = "worker-b"};
	struct pprof_visitor v = {.sample = who_sample};
	struct who_seen seen = {0};
	const struct prof_sample *s;
	char *text, *buf;
	size_t len;

	assert_int_equal(profile__add_ex(p, &a, st, 2, 2), 0);
	assert_int_equal(profile__add_ex(p, &a, st, 2, 1), 0);
	assert_int_equal(profile__add_ex(p, &b, st, 2, 4), 0);
	/* The same thread under another service is another sample. */
	a.service = "other";
	assert_int_equal(profile__add_ex(p, &a, st, 2, 5), 0);
	assert_int_equal(profile__add(p, 10, 10, "labelproc", st, 1, 1), 0);
	assert_int_equal(p->nsamples, 4);
	assert_int_equal(p->total, 13);
	s = &p->samples[0];
	assert_string_equal(profile__str(p, s->comm), "labelproc");
	assert_string_equal(profile__str(p, s->thread), "worker-a");
	assert_string_equal(profile__str(p, s->service), "trainer");
	assert_int_equal(s->count, 3);
	s = sample_of_thread(p, "worker-b");
	assert_non_null(s);
	assert_int_equal(s->service, 0);
	/* profile__add names neither. */
	s = &p->samples[3];
	assert_int_equal(s->thread, 0);
	assert_int_equal(s->service, 0);
	assert_int_equal(profile__add_ex(p, NULL, st, 2, 1), -EINVAL);
	assert_int_equal(p->total, 13);

	/* Folded: the process, not the thread; threads and services merge. */
	text = write_mem(p, PROF_FMT_FOLDED, NULL);
	assert_string_equal(text, "labelproc;spin 1\n"
				  "labelproc;worker;spin 12\n");
	free(text);

	/* pprof: thread and service_name only where set. */
	buf = write_mem(p, PROF_FMT_PPROF, &len);
	v.ctx = &seen;
	assert_int_equal(profile__visit_pprof(buf, len, 16 * MB, &v), 0);
	assert_int_equal(seen.n, 4);
	qsort(seen.text, seen.n, sizeof(seen.text[0]), who_cmp);
	assert_string_equal(seen.text[0], "pid=10 tid=10 comm=labelproc");
	assert_string_equal(seen.text[1],
			    "pid=10 tid=11 comm=labelproc thread=worker-a service_name=other");
	assert_string_equal(seen.text[2],
			    "pid=10 tid=11 comm=labelproc thread=worker-a service_name=trainer");
	assert_string_equal(seen.text[3], "pid=10 tid=12 comm=labelproc thread=worker-b");

	/* ... and read back. */
	q = profile__read_pprof(buf, len, 16 * MB);
	assert_non_null(q);
	assert_int_equal(q->nsamples, 4);
	assert_int_equal(q->total, 13);
	s = sample_of_thread(q, "worker-b");
	assert_non_null(s);
	assert_int_equal(s->tid, 12);
	assert_string_equal(profile__str(q, s->comm), "labelproc");
	assert_int_equal(s->service, 0);
	for (size_t i = 0; i < q->nsamples; i++)
		if (q->samples[i].count == 3)
			assert_string_equal(profile__str(q, q->samples[i].service), "trainer");
	free(buf);
	profile__free(q);
	profile__free(p);
}

static void test_speedscope(void **state)
{
	struct profile *p = sample_profile();
	json_error_t jerr;
	json_t *root, *frames, *profs, *prof, *samples, *weights, *stack;
	char *text;
	size_t len, i, nmain = 0;
	json_int_t sum = 0;

	text = write_mem(p, PROF_FMT_SPEEDSCOPE, &len);
	root = json_loadb(text, len, 0, &jerr);
	if (!root)
		fail_msg("speedscope output doesn't parse: %s at %d", jerr.text, jerr.position);
	assert_string_equal(json_string_value(json_object_get(root, "$schema")),
			    "https://www.speedscope.app/file-format-schema.json");
	assert_string_equal(json_string_value(json_object_get(root, "exporter")), "sonde");
	assert_int_equal(json_integer_value(json_object_get(root, "activeProfileIndex")), 0);

	/* Frames are one per (name, file): main, at one address, once. */
	frames = json_object_get(json_object_get(root, "shared"), "frames");
	assert_true(json_is_array(frames));
	for (i = 0; i < json_array_size(frames); i++) {
		json_t *fr = json_array_get(frames, i);

		if (!strcmp(json_string_value(json_object_get(fr, "name")), "main")) {
			nmain++;
			assert_string_equal(json_string_value(json_object_get(fr, "file")),
					    "/usr/bin/app");
		}
	}
	assert_int_equal(nmain, 1);
	assert_int_equal(json_array_size(frames), 7);

	profs = json_object_get(root, "profiles");
	assert_int_equal(json_array_size(profs), 2);
	prof = json_array_get(profs, 0);
	assert_string_equal(json_string_value(json_object_get(prof, "type")), "sampled");
	assert_string_equal(json_string_value(json_object_get(prof, "name")), "app (100)");
	assert_string_equal(json_string_value(json_object_get(prof, "unit")), "none");
	assert_int_equal(json_integer_value(json_object_get(prof, "startValue")), 0);
	assert_int_equal(json_integer_value(json_object_get(prof, "endValue")), 11);
	samples = json_object_get(prof, "samples");
	weights = json_object_get(prof, "weights");
	assert_int_equal(json_array_size(samples), 3);
	assert_int_equal(json_array_size(weights), 3);
	for (i = 0; i < 3; i++)
		sum += json_integer_value(json_array_get(weights, i));
	assert_int_equal(sum, 11);
	/* Samples are in profile order, root first. */
	stack = json_array_get(samples, 0);
	assert_int_equal(json_array_size(stack), 3);
	assert_string_equal(frame_name(frames, json_array_get(stack, 0)), "__libc_start_main");
	assert_string_equal(frame_name(frames, json_array_get(stack, 2)), "compute");
	assert_int_equal(json_integer_value(json_array_get(weights, 0)), 6);
	stack = json_array_get(samples, 2);
	assert_int_equal(json_array_size(stack), 4);
	assert_string_equal(frame_name(frames, json_array_get(stack, 0)), "main");
	assert_string_equal(frame_name(frames, json_array_get(stack, 3)), "do_syscall_64");
	assert_int_equal(json_integer_value(json_array_get(weights, 2)), 3);

	prof = json_array_get(profs, 1);
	assert_string_equal(json_string_value(json_object_get(prof, "name")), "other (200)");
	assert_int_equal(json_integer_value(json_object_get(prof, "endValue")), 7);
	json_decref(root);
	free(text);
	profile__free(p);
}

static void test_speedscope_odd_strings(void **state)
{
	struct profile *p = profile__new("cpu", "ns", 1);
	struct prof_frame st[] = {named("bad\xff\xfeutf8 \"quoted\"", NULL, 1)};
	json_t *root;
	char *text;
	size_t len;

	assert_int_equal(profile__add(p, 5, 5, "c\xc3", st, 1, 1), 0);
	text = write_mem(p, PROF_FMT_SPEEDSCOPE, &len);
	root = json_loadb(text, len, 0, NULL);
	assert_non_null(root);
	assert_string_equal(
		json_string_value(json_object_get(
			json_array_get(json_object_get(json_object_get(root, "shared"), "frames"),
				       0),
			"name")),
		"bad??utf8 \"quoted\"");
	json_decref(root);
	free(text);
	profile__free(p);

	/* An empty profile is still a valid document. */
	p = profile__new("cpu", "ns", 1);
	text = write_mem(p, PROF_FMT_SPEEDSCOPE, &len);
	root = json_loadb(text, len, 0, NULL);
	assert_non_null(root);
	assert_int_equal(json_array_size(json_object_get(root, "profiles")), 0);
	json_decref(root);
	free(text);
	profile__free(p);
}

/* ---- go tool pprof ---- */

static void test_go_pprof_accepts(void **state)
{
	char path[] = "/tmp/sonde-test-XXXXXX.pb.gz", out[] = "/tmp/sonde-test-XXXXXX.txt";
	char cmd[512], *text = NULL;
	struct profile *p;
	size_t n = 0;
	FILE *f;
	int fd, rc;

	if (system("command -v go >/dev/null 2>&1") != 0) {
		printf("skip: go is not on PATH, can't check `go tool pprof` reads our files\n");
		skip();
	}
	p = sample_profile();
	fd = mkstemps(path, 6);
	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	assert_int_equal(profile__write_pprof(p, f), 0);
	assert_int_equal(fclose(f), 0);
	fd = mkstemps(out, 4);
	assert_true(fd >= 0);
	close(fd);

	snprintf(cmd, sizeof(cmd), "go tool pprof -top %s >%s 2>&1", path, out);
	rc = system(cmd);
	f = fopen(out, "r");
	assert_non_null(f);
	text = malloc(1 << 16);
	n = fread(text, 1, (1 << 16) - 1, f);
	text[n] = '\0';
	fclose(f);
	printf("%s", text);
	if (rc != 0)
		fail_msg("`%s` failed with status %d", cmd, rc);
	assert_non_null(strstr(text, "compute"));
	assert_non_null(strstr(text, "do_syscall_64"));
	assert_non_null(strstr(text, "Type: cpu"));
	unlink(path);
	unlink(out);
	free(text);
	profile__free(p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_new_and_free),
		cmocka_unit_test(test_intern),
		cmocka_unit_test(test_intern_cut),
		cmocka_unit_test(test_dedup_same_stack),
		cmocka_unit_test(test_mapping_dedup),
		cmocka_unit_test(test_unknown_frame_names),
		cmocka_unit_test(test_add_rejects),
		cmocka_unit_test(test_add_many),
		cmocka_unit_test(test_format_names),
		cmocka_unit_test(test_folded_write),
		cmocka_unit_test(test_folded_roundtrip),
		cmocka_unit_test(test_folded_read_lenient),
		cmocka_unit_test(test_folded_read_errors),
		cmocka_unit_test(test_folded_read_limits),
		cmocka_unit_test(test_pprof_roundtrip),
		cmocka_unit_test(test_pprof_lines),
		cmocka_unit_test(test_pprof_store_roundtrip),
		cmocka_unit_test(test_pprof_empty_profile),
		cmocka_unit_test(test_pprof_rejects_truncated),
		cmocka_unit_test(test_pprof_rejects_garbage),
		cmocka_unit_test(test_pprof_rejects_gzip_bomb),
		cmocka_unit_test(test_pprof_rejects_empty_submessages),
		cmocka_unit_test(test_pprof_rejects_bad_references),
		cmocka_unit_test(test_who),
		cmocka_unit_test(test_speedscope),
		cmocka_unit_test(test_speedscope_odd_strings),
		cmocka_unit_test(test_go_pprof_accepts),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
