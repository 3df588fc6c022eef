/* gen_seeds.c: writes the binary seeds of the fuzz targets at build time,
 * so that no binary blob is committed: `gen_seeds DIR` makes
 * DIR/pprof/profile.pb.gz (a profile written by profile__write_pprof with
 * kernel, user, unnamed and JIT frames, mappings and build-ids; fuzz.mk adds
 * its gunzipped copy, as the reader takes raw protobuf too),
 * DIR/folded/generated.folded (the same profile as folded text) and
 * DIR/cpu_sample/ (files of a header byte and struct cpu_sample records, see
 * fuzz_cpu_sample.c), DIR/late/ (deferred samples with their unwind rows,
 * see fuzz_late.c) and DIR/service/environ* (process environments, NUL
 * separated, after fuzz_service.c's picking byte 'e') and DIR/clickhouse/
 * (an operation, matchers, and the answers a ClickHouse server gives it, in
 * fuzz_clickhouse.c's chunks). The directories must exist. Run by fuzz.mk. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/stack_agg.h"
#include "cpu.h"	/* bpf/cpu.h: struct cpu_sample_late */
#include "unwind_abi.h" /* bpf/unwind_abi.h: unwind rows */
#include "profile/profile.h"

#define HDR_REBASE_USER 0x1
#define HDR_REBASE_KERNEL 0x2

static const char build_id[] = "0123456789abcdef0123456789abcdef01234567";

static struct prof_frame user_frame(const char *func, const char *module, uint64_t addr)
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

static struct prof_frame kernel_frame(const char *func, uint64_t addr)
{
	return (struct prof_frame){
		.func = func,
		.module = "[kernel.kallsyms]",
		.addr = addr,
		.offset = addr,
		.kernel = true,
	};
}

static struct profile *make_profile(void)
{
	struct profile *p = profile__new("cpu", "nanoseconds", 10101010);
	struct prof_frame app[] = {
		user_frame("compute", "/usr/bin/app", 0x401100),
		user_frame("main", "/usr/bin/app", 0x400800),
	};
	struct prof_frame sys[] = {
		kernel_frame("do_syscall_64", 0xffffffff81001234),
		kernel_frame("entry_SYSCALL_64_after_hwframe", 0xffffffff81200068),
		{.module = "/lib/x86_64-linux-gnu/libc.so.6",
		 .addr = 0x7f0000012345,
		 .offset = 0x12345,
		 .map_start = 0x7f0000000000,
		 .map_limit = 0x7f0000100000},
		user_frame("main", "/usr/bin/app", 0x400800),
	};
	struct prof_frame odd[] = {
		{.addr = 0x7fff1234},
		{.func = "LazyCompile:*handler /srv/app.js:12", .module = "[jit]", .addr = 0x3000},
		{.func = "std::vector<int>::push_back(int const&)", .module = "/usr/lib/libx.so"},
		{.func = "ns::f(a; b)", .module = "/usr/lib/libx.so"},
	};
	int err = 0;

	p->time_ns = 1700000000000000000LL;
	p->duration_ns = 5000000000LL;
	err |= profile__add(p, 100, 101, "app-worker", app, 2, 5);
	err |= profile__add(p, 100, 100, "app", sys, 4, 3);
	err |= profile__add(p, 200, 200, "node", odd, 4, 1000000);
	err |= profile__add(p, 300, 300, "idle", NULL, 0, 1);
	err |= profile__add(p, 300, 300, "", app, 1, 0);
	if (err) {
		fprintf(stderr, "gen_seeds: can't build the seed profile\n");
		exit(1);
	}
	return p;
}

static void write_profile(const struct profile *p, enum prof_format fmt, const char *dir,
			  const char *name)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "we");
	if (!f || profile__write(p, fmt, f) || fclose(f)) {
		fprintf(stderr, "gen_seeds: can't write %s: %s\n", path, strerror(errno));
		exit(1);
	}
}

/* DIR/cpu_sample/name: the header byte, then n records, the last one cut
 * after its frames (the fuzz target zero-pads it). */
static void write_samples(const char *dir, const char *name, unsigned char hdr,
			  const struct cpu_sample *s, size_t n)
{
	const struct cpu_sample *last = &s[n - 1];
	int nk = last->nkern > 0 ? last->nkern : 0, nu = last->nuser > 0 ? last->nuser : 0;
	size_t tail = offsetof(struct cpu_sample, ips) + (size_t)(nk + nu) * sizeof(__u64);
	char path[4096];
	FILE *f;

	if (tail > sizeof(*last))
		tail = sizeof(*last);
	snprintf(path, sizeof(path), "%s/cpu_sample/%s", dir, name);
	f = fopen(path, "we");
	if (!f || fputc(hdr, f) == EOF || fwrite(s, sizeof(*s), n - 1, f) != n - 1 ||
	    fwrite(last, 1, tail, f) != tail || fclose(f)) {
		fprintf(stderr, "gen_seeds: can't write %s: %s\n", path, strerror(errno));
		exit(1);
	}
}

static void make_samples(const char *dir)
{
	static struct cpu_sample s[3];
	int i;

	/* The fuzz target maps pid 0 to its own pid and rebases addresses:
	 * kernel ones from _stext, user ones into its own code. */
	memset(s, 0, sizeof(s));
	for (i = 0; i < 3; i++) {
		s[i].tid = 1;
		s[i].nkern = 2;
		s[i].nuser = 4;
		memcpy(s[i].comm, "seed", 5);
		memcpy(s[i].thread, i ? "seed-worker" : "seed", i ? 12 : 5);
		for (int j = 0; j < 6; j++)
			s[i].ips[j] = 0x1000 + 0x400 * (unsigned int)j;
	}
	s[1].tid = 2;	  /* another thread, same stack */
	s[2].nkern = -14; /* -EFAULT: the kernel stack could not be read */
	write_samples(dir, "rebased", HDR_REBASE_USER | HDR_REBASE_KERNEL | (3 << 2), s, 3);

	memset(s, 0, sizeof(s));
	s[0].nkern = 1000;
	s[0].nuser = -1;
	for (i = 0; i < 2 * CPU_MAX_FRAMES; i++)
		s[0].ips[i] = 0xffffffff81000000ull + 0x10 * (unsigned int)i;
	write_samples(dir, "garbage_counts", 0, s, 1);

	memset(s, 0, sizeof(s));
	write_samples(dir, "no_stack", 0, s, 1);
}

/* DIR/late/: deferred samples as fuzz_late.c reads them -- a header
 * byte, unwind rows, a record up to the stack it kept. */
static void write_late(const char *dir, const char *name, unsigned char hdr,
		       const struct unw_row *rows, size_t nrows, const struct cpu_sample_late *r)
{
	size_t len = offsetof(struct cpu_sample_late, l.stack) + r->l.nstack;
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/late/%s", dir, name);
	f = fopen(path, "we");
	if (!f || fputc(hdr | (unsigned char)nrows, f) == EOF ||
	    fwrite(rows, sizeof(*rows), nrows, f) != nrows || fwrite(r, 1, len, f) != len ||
	    fclose(f)) {
		fprintf(stderr, "gen_seeds: can't write %s: %s\n", path, strerror(errno));
		exit(1);
	}
}

static void make_late(const char *dir)
{
	/* Every frame: CFA = rsp + 16, rbp saved at CFA - 16; a PLT stub; a
	 * signal frame; the end. */
	const struct unw_row rows[] = {
		{0, UNW_CFA_RSP, -2, 2},
		{0x1000, UNW_PLT, 0, 11},
		{0x2000, UNW_SIGNAL, 0, 0},
		{0x3000, UNW_STOP, 0, 0},
	};
	static struct cpu_sample_late r;
	uint64_t *words = (uint64_t *)r.l.stack;

	memset(&r, 0, sizeof(r));
	r.s.tid = 1;
	r.s.flags = CPU_SF_LATE;
	r.s.nkern = 1;
	r.s.nuser = 2;
	memcpy(r.s.comm, "seed", 5);
	r.l.pc = 0x10;
	r.l.sp = 0x40;
	r.l.bp = 0x400;
	r.l.leaf = 1;
	r.l.nstack = 2 * LATE_PAGE;
	r.l.page[0] = 0;
	r.l.page[1] = 1;
	/* Return addresses a frame apart, rbp chained. */
	for (int i = 0; i < 2 * LATE_PAGE / 8; i++)
		words[i] = i % 2 ? 0x100 + 0x40 * (uint64_t)i : 0x400 + 0x10 * (uint64_t)i;
	r.l.npy = 3;
	for (int i = 0; i < 3; i++) {
		r.l.py[i] =
			UNW_PY_FRAME | (uint64_t)(7 + i) << UNW_PY_ADDR_BITS | (0x7000 + 64 * i);
		r.l.py_kind[i] = i == 2 ? UNW_PYK_LAST : UNW_PYK_FRAME;
	}
	r.l.flags = LATE_F_PY;
	/* Rebased, sized as handed over, as an interpreter's table. */
	write_late(dir, "rows", 0x20 | 0x40, rows, 4, &r);
	write_late(dir, "python", 0x10 | 0x20 | 0x40, rows, 1, &r);
	/* Pages out of order, then none. */
	r.l.page[0] = 1;
	r.l.page[1] = 0;
	write_late(dir, "pages", 0x20 | 0x40, rows, 2, &r);
	r.l.nstack = 0;
	write_late(dir, "empty", 0x20, rows, 0, &r);
}

/* DIR/service/name: pick (fuzz_service.c's parser: 'e' environ, 'k' a
 * command line), then len bytes. */
static void write_service(const char *dir, const char *name, char pick, const char *env, size_t len)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/service/%s", dir, name);
	f = fopen(path, "we");
	if (!f || fputc(pick, f) == EOF || fwrite(env, 1, len, f) != len || fclose(f)) {
		fprintf(stderr, "gen_seeds: can't write %s: %s\n", path, strerror(errno));
		exit(1);
	}
}

#define ENVIRON(dir, name, lit) write_service(dir, name, 'e', lit, sizeof(lit) - 1)
#define CMDLINE(dir, name, lit) write_service(dir, name, 'k', lit, sizeof(lit) - 1)

static void make_environs(const char *dir)
{
	ENVIRON(dir, "environ", "HOME=/root\0SONDE_SERVICE=trainer\0PATH=/usr/bin\0");
	/* The last entry cut by the read's bound. */
	ENVIRON(dir, "environ_cut", "A=1\0SONDE_SERVICE=tra");
	/* A value that can't be a label. */
	ENVIRON(dir, "environ_bad", "SONDE_SERVICE=a\xff\x01\0");
	ENVIRON(dir, "environ_visible", "SONDE_SERVICE=3,GPU-12,1,GPU-5d0,0,9\0");
	CMDLINE(dir, "cmdline_python", "/usr/bin/python3.11\0-u\0-X\0dev\0train.py\0--lr\0");
	CMDLINE(dir, "cmdline_torchrun",
		"/usr/bin/python3\0/usr/bin/torchrun\0--nproc-per-node\0002\0train.py\0");
	CMDLINE(dir, "cmdline_module", "python3\0-m\0torch.distributed.run\0x.py\0");
	CMDLINE(dir, "cmdline_java", "java\0-cp\0a.jar\0org.example.Main\0");
	CMDLINE(dir, "cmdline_cut", "node\0--require\0x\0app.j");
}

/* ---- ClickHouse answers (fuzz_clickhouse.c) ---- */

struct answers {
	unsigned char buf[4096], chunk[1024];
	size_t len, clen;
};

static void ans_bytes(struct answers *a, const void *p, size_t n)
{
	if (a->clen + n > sizeof(a->chunk)) {
		fprintf(stderr, "gen_seeds: a ClickHouse answer is too long\n");
		exit(1);
	}
	memcpy(a->chunk + a->clen, p, n);
	a->clen += n;
}

static void ans_u64(struct answers *a, uint64_t v)
{
	ans_bytes(a, &v, 8); /* RowBinary is little-endian, as this host */
}

static void ans_u32(struct answers *a, uint32_t v)
{
	ans_bytes(a, &v, 4);
}

static void ans_f64(struct answers *a, double v)
{
	ans_bytes(a, &v, 8);
}

static void ans_count(struct answers *a, size_t n)
{
	unsigned char b = (unsigned char)n; /* the seeds' counts fit in 7 bits */

	ans_bytes(a, &b, 1);
}

static void ans_str(struct answers *a, const char *str)
{
	ans_count(a, strlen(str));
	ans_bytes(a, str, strlen(str));
}

/* Ends the answer being built: its length, then it. */
static void ans_end(struct answers *a)
{
	a->buf[a->len++] = (unsigned char)(a->clen & 0xff);
	a->buf[a->len++] = (unsigned char)(a->clen >> 8);
	memcpy(a->buf + a->len, a->chunk, a->clen);
	a->len += a->clen;
	a->clen = 0;
}

/* The series in range: series 7, at an edge and in whole hour 5 (with the
 * windows' count and their totals' sum). */
static void ans_found(struct answers *a, int hours)
{
	if (hours) {
		ans_u64(a, 7), ans_u64(a, (uint64_t)-1), ans_u64(a, 1), ans_f64(a, 3);
		ans_u64(a, 7), ans_u64(a, 5), ans_u64(a, 2), ans_f64(a, 5);
	} else {
		ans_u64(a, 7);
	}
	ans_end(a);
}

/* Series 7's labels. */
static void ans_series(struct answers *a, const char *metric_labels)
{
	ans_u64(a, 7);
	ans_count(a, 2), ans_str(a, "type"), ans_str(a, "service_name");
	ans_count(a, 2), ans_str(a, metric_labels ? metric_labels : "cpu"), ans_str(a, "x");
	ans_end(a);
}

/* What a select asks after the series: the rollup's counts, the sums by
 * stack (as Int64 and Float64), the unit. */
static void ans_select_rest(struct answers *a)
{
	ans_u64(a, 7), ans_u32(a, 5), ans_u64(a, 2), ans_end(a);
	ans_u64(a, 100), ans_u64(a, 5), ans_f64(a, 5);
	ans_u64(a, 101), ans_u64(a, 3), ans_f64(a, 3), ans_end(a);
	ans_str(a, "samples"), ans_u64(a, 10000000), ans_end(a);
}

/* The stacks and functions a select resolves. */
static void ans_stacks(struct answers *a)
{
	static const char *const names[] = {"leaf", "main", "other"};
	int i;

	ans_u64(a, 100), ans_count(a, 2), ans_u64(a, 200), ans_u64(a, 201);
	ans_u64(a, 101), ans_count(a, 2), ans_u64(a, 202), ans_u64(a, 201);
	ans_end(a);
	for (i = 0; i < 3; i++) {
		ans_u64(a, 200 + i), ans_str(a, names[i]), ans_str(a, "/bin/app");
		ans_bytes(a, "", 1), ans_str(a, i ? "" : "app.c"), ans_u32(a, i ? 0 : 12);
	}
	ans_end(a);
}

static void write_answers(const char *dir, const char *name, unsigned char op, struct answers *a)
{
	char path[4096];
	unsigned char head[2] = {op, 0};
	FILE *f;

	snprintf(path, sizeof(path), "%s/clickhouse/%s", dir, name);
	f = fopen(path, "wb");
	if (!f || fwrite(head, 1, 2, f) != 2 || fwrite(a->buf, 1, a->len, f) != a->len ||
	    fclose(f)) {
		fprintf(stderr, "gen_seeds: can't write %s: %s\n", path, strerror(errno));
		exit(1);
	}
	a->len = 0;
}

static void make_clickhouse(const char *dir)
{
	struct answers a = {0};
	int i;

	/* select, twice: the second from the caches the first filled */
	ans_found(&a, 1), ans_series(&a, NULL), ans_select_rest(&a), ans_stacks(&a);
	ans_found(&a, 1), ans_select_rest(&a);
	write_answers(dir, "select", 0, &a);
	/* timeline: windows' (start, end, total as Int64 and Float64) */
	ans_found(&a, 0), ans_series(&a, NULL);
	ans_u64(&a, 0), ans_u64(&a, 10000), ans_u64(&a, 5), ans_f64(&a, 5);
	ans_u64(&a, 86400000), ans_u64(&a, 90000000), ans_u64(&a, 7), ans_f64(&a, 7);
	ans_end(&a);
	write_answers(dir, "timeline", 1, &a);
	/* label names, then values from the cache */
	ans_found(&a, 0), ans_series(&a, NULL), ans_found(&a, 0);
	write_answers(dir, "labels", 2, &a);
	/* series totals: (series, total as Int64 and Float64, first, last) */
	ans_found(&a, 0), ans_series(&a, NULL);
	ans_u64(&a, 7), ans_u64(&a, 12), ans_f64(&a, 12), ans_u64(&a, 0), ans_u64(&a, 20000);
	ans_end(&a);
	write_answers(dir, "totals", 3, &a);
	/* points: (series, ts, value) */
	ans_found(&a, 0), ans_series(&a, "gpu");
	for (i = 0; i < 3; i++) {
		double v = 1.5 * i;

		ans_u64(&a, 7), ans_u64(&a, 1000 * (uint64_t)i), ans_bytes(&a, &v, 8);
	}
	ans_end(&a);
	write_answers(dir, "points", 4, &a);
	/* a keyed put: the key not stored, the longest window noted, the
	 * inserts (functions, series, stacks, windows), then a select */
	ans_u64(&a, 0), ans_end(&a);
	for (i = 0; i < 5; i++)
		ans_end(&a);
	ans_found(&a, 1), ans_series(&a, NULL), ans_select_rest(&a), ans_stacks(&a);
	write_answers(dir, "put", 5, &a);
	/* expiry: the partitions, the mark and the drops, then a select */
	ans_str(&a, "windows"), ans_str(&a, "1"), ans_str(&a, "hour_stacks"), ans_str(&a, "0");
	ans_str(&a, "stacks"), ans_str(&a, "2"), ans_end(&a);
	for (i = 0; i < 4; i++)
		ans_end(&a);
	ans_found(&a, 1), ans_series(&a, NULL), ans_select_rest(&a), ans_stacks(&a);
	write_answers(dir, "expire", 6, &a);
	/* stats: seven counts */
	for (i = 0; i < 7; i++)
		ans_u64(&a, 10 + (uint64_t)i);
	ans_end(&a);
	write_answers(dir, "stats", 7, &a);
}

int main(int argc, char **argv)
{
	struct profile *p;
	char dir[4096];

	if (argc != 2) {
		fprintf(stderr, "usage: gen_seeds DIR\n");
		return 2;
	}
	p = make_profile();
	snprintf(dir, sizeof(dir), "%s/pprof", argv[1]);
	write_profile(p, PROF_FMT_PPROF, dir, "profile.pb.gz");
	snprintf(dir, sizeof(dir), "%s/folded", argv[1]);
	write_profile(p, PROF_FMT_FOLDED, dir, "generated.folded");
	profile__free(p);
	make_samples(argv[1]);
	make_late(argv[1]);
	make_environs(argv[1]);
	make_clickhouse(argv[1]);
	return 0;
}
