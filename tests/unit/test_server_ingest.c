/* test_server_ingest.c: unit tests of the ingest bodies
 * (src/server/ingest.c): an agent's pprof split into series by comm, pid,
 * exe, cgroup and service_name (tid dropped, service_name defaulting to
 * comm, the request's labels added, the type from the request or the
 * pprof), cpu nanoseconds back into samples, exact totals per series;
 * Sonde's own writer's output read back; every malformed body refused with
 * its reason (truncated, random, gzip bomb, negative values, bad labels, too
 * many series); Pyroscope folded and lines text; metric points JSON. */
#include <errno.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "profile/profile.h"
#include "common/xalloc.h"
#include "server/ingest.h"

#include "test_server_pprof.h"

#define MB (1024 * 1024)

static struct ingest_opts opts(const struct lset *labels)
{
	return (struct ingest_opts){
		.labels = labels,
		.now_ms = 1795337900000LL,
		.max_bytes = 64 * MB,
		.max_series = 1024,
	};
}

/* The series of b whose labels include every "k=v" of want (comma
 * separated), which must be exactly one. */
static const struct ingest_series *series_with(const struct ingest_batch *b, const char *want)
{
	const struct ingest_series *found = NULL;

	for (size_t i = 0; i < b->n; i++) {
		char *w = strdup(want), *pair, *save = NULL;
		bool ok = true;

		for (pair = strtok_r(w, ",", &save); pair && ok;
		     pair = strtok_r(NULL, ",", &save)) {
			char *eq = strchr(pair, '=');
			const char *v;

			*eq = '\0';
			v = lset__get(&b->series[i].labels, pair);
			ok = v ? !strcmp(v, eq + 1) : !eq[1];
		}
		free(w);
		if (ok) {
			if (found)
				fail_msg("two series match %s", want);
			found = &b->series[i];
		}
	}
	if (!found)
		fail_msg("no series matches %s", want);
	return found;
}

static void test_split(void **state)
{
	const struct tsample ts[] = {
		{"main;run;hot_a",
		 {60, 60 * 10101010LL},
		 "comm=shares,pid=#42,tid=#43,exe=/bin/shares"},
		{"main;run;hot_a",
		 {6, 6 * 10101010LL},
		 "comm=shares,pid=#42,tid=#44,exe=/bin/shares"},
		{"main;run;hot_b",
		 {30, 30 * 10101010LL},
		 "comm=shares,pid=#42,tid=#43,exe=/bin/shares"},
		{"main;loop", {7, 7 * 10101010LL}, "comm=python3,pid=#7,cgroup=/sys/fs/job"},
		{"main;loop",
		 {3, 3 * 10101010LL},
		 "comm=python3,pid=#8,service_name=trainer,cgroup=/sys/fs/job"},
		/* A value a little off the period still rounds to samples. */
		{"main;idle", {1, 10101010LL + 17}, "comm=python3,pid=#7,cgroup=/sys/fs/job"},
		{"main;zero", {0, 0}, "comm=python3,pid=#7,cgroup=/sys/fs/job"},
	};
	struct lset base = {0};
	struct ingest_batch b = {0};
	struct ingest_opts o;
	const struct ingest_series *s;
	char err[512];
	size_t len;
	uint8_t *body = make_pprof(&tp_cpu, ts, ARRAY_SIZE(ts), true, &len);

	lset__set(&base, "node", "gpu-7");
	o = opts(&base);
	assert_int_equal(ingest__pprof(&b, body, len, &o, err, sizeof(err)), 0);
	assert_int_equal(b.n, 3);
	assert_int_equal(b.samples, 6);
	/* The window is the pprof's. */
	assert_int_equal(b.start_ms, 1795337820000LL);
	assert_int_equal(b.end_ms, 1795337830000LL);

	s = series_with(&b, "comm=shares,pid=42,exe=/bin/shares,service_name=shares,type=cpu,"
			    "node=gpu-7,tid=");
	assert_int_equal(s->labels.n, 6);
	assert_int_equal(s->prof->total, 96);
	assert_string_equal(s->prof->unit, "samples");
	assert_int_equal(s->prof->period, 10101010);
	assert_int_equal(s->prof->nsamples, 2); /* tids merged */

	s = series_with(&b, "comm=python3,pid=7,service_name=python3,cgroup=/sys/fs/job");
	assert_int_equal(s->prof->total, 8);
	s = series_with(&b, "comm=python3,pid=8,service_name=trainer");
	assert_int_equal(s->prof->total, 3);

	assert_int_equal(ingest_batch__windows(&b), 3);
	for (size_t i = 0; i < 3; i++) {
		assert_int_equal(b.windows[i].start_ms, 1795337820000LL);
		assert_non_null(b.windows[i].prof);
	}
	ingest_batch__free(&b);

	/* The request's window and type win over the pprof's. */
	o.start_ms = 1000;
	o.end_ms = 2000;
	o.type = "offcpu";
	assert_int_equal(ingest__pprof(&b, body, len, &o, err, sizeof(err)), 0);
	assert_int_equal(b.start_ms, 1000);
	assert_int_equal(b.end_ms, 2000);
	for (size_t i = 0; i < b.n; i++)
		assert_string_equal(lset__get(&b.series[i].labels, "type"), "offcpu");
	ingest_batch__free(&b);

	/* A base service_name holds unless the sample has its own. */
	lset__set(&base, "service_name", "fleet");
	o = opts(&base);
	assert_int_equal(ingest__pprof(&b, body, len, &o, err, sizeof(err)), 0);
	series_with(&b, "pid=42,service_name=fleet");
	series_with(&b, "pid=8,service_name=trainer");
	ingest_batch__free(&b);
	lset__free(&base);
	free(body);
}

/* Many samples of one series, first all different (the split stops
 * remembering frames), then repeating: the totals and stacks stay exact. */
static void test_split_many(void **state)
{
	enum { N = 700 };
	struct tsample *ts = calloc(N, sizeof(*ts));
	char(*stacks)[48] = calloc(N, sizeof(*stacks));
	struct ingest_batch b = {0};
	struct ingest_opts o = opts(NULL);
	char err[512];
	size_t len;
	uint8_t *body;

	for (int i = 0; i < N; i++) {
		/* 400 distinct stacks, then the first 300 again */
		snprintf(stacks[i], sizeof(stacks[i]), "main;f%d;g%d", i % 400, (i % 400) / 7);
		ts[i] = (struct tsample){
			stacks[i], {1 + i % 3, (1 + i % 3) * 10101010LL}, "comm=app,pid=#5"};
	}
	body = make_pprof(&tp_cpu, ts, N, true, &len);
	assert_int_equal(ingest__pprof(&b, body, len, &o, err, sizeof(err)), 0);
	assert_int_equal(b.n, 1);
	assert_int_equal(b.samples, N);
	{
		int64_t want = 0;

		for (int i = 0; i < N; i++)
			want += 1 + i % 3;
		assert_int_equal(b.series[0].prof->total, want);
	}
	assert_int_equal(b.series[0].prof->nsamples, 400);
	ingest_batch__free(&b);
	free(body);
	free(stacks);
	free(ts);
}

/* A type the server does not know is stored under its own name and unit. */
static void test_unknown_type(void **state)
{
	const struct tpprof tp = {.types = {{"gpu_launch", "launches"}}, .ntypes = 1};
	const struct tsample ts[] = {{"main;train;cudaLaunchKernel", {12}, "comm=python3,pid=#4"}};
	struct ingest_batch b = {0};
	struct ingest_opts o = opts(NULL);
	char err[512];
	size_t len;
	uint8_t *body = make_pprof(&tp, ts, 1, false, &len);

	assert_int_equal(ingest__pprof(&b, body, len, &o, err, sizeof(err)), 0);
	assert_int_equal(b.n, 1);
	assert_string_equal(lset__get(&b.series[0].labels, "type"), "gpu_launch");
	assert_string_equal(b.series[0].prof->unit, "launches");
	assert_int_equal(b.series[0].prof->total, 12);
	/* No time in the pprof: the last 10 s. */
	assert_int_equal(b.end_ms, o.now_ms);
	assert_int_equal(b.start_ms, o.now_ms - 10000);
	ingest_batch__free(&b);
	free(body);
}

/* Pyroscope's sample_type_config: a series per configured type the profile
 * has, named and unitted by the config; what is refused and why. */
static void test_sample_type_config(void **state)
{
	const struct tpprof tp = {.types = {{"alloc_objects", "count"},
					    {"alloc_space", "bytes"},
					    {"inuse_objects", "count"},
					    {"inuse_space", "bytes"}},
				  .ntypes = 4};
	const struct tsample ts[] = {{"main;grow;malloc", {3, 300, 1, 100}, "comm=srv,pid=#9"},
				     {"main;load;malloc", {5, 4000, 2, 1500}, "comm=srv,pid=#9"}};
	struct ingest_batch b = {0};
	struct ingest_opts o = opts(NULL);
	char err[512];
	size_t len;
	uint8_t *body = make_pprof(&tp, ts, 2, false, &len);
	const struct ingest_series *sr;
	static const char cfg[] =
		"{\"alloc_space\": {\"units\": \"bytes\", \"aggregation\": \"sum\"},"
		" \"inuse_objects\": {\"units\": \"objects\", \"display-name\": \"inuse_objs\","
		"  \"aggregation\": \"average\", \"cumulative\": false, \"sampled\": false},"
		" \"goroutines\": {\"units\": \"goroutines\"}}";

	assert_int_equal(ingest__pprof_typed(&b, body, len, cfg, strlen(cfg), &o, err, sizeof(err)),
			 0);
	assert_int_equal(b.n, 2); /* goroutines: not in the profile, skipped */
	sr = series_with(&b, "type=alloc_space,pid=9");
	assert_int_equal(sr->prof->total, 4300);
	assert_string_equal(sr->prof->unit, "bytes");
	sr = series_with(&b, "type=inuse_objs,pid=9");
	assert_int_equal(sr->prof->total, 3);
	assert_string_equal(sr->prof->unit, "objects");
	ingest_batch__free(&b);

	/* Refused, each with its reason. */
	{
		static const struct {
			const char *cfg, *says;
		} bad[] = {
			{"{\"alloc_space\": {\"cumulative\": true}}", "cumulative"},
			{"{\"alloc_space\": ", "not valid JSON"},
			{"[1]", "must be an object"},
			{"{\"alloc_space\": 3}", "short sample type name"},
			{"{\"alloc_space\": {\"units\": 7}}", "malformed"},
			{"{\"alloc_space\": {\"aggregation\": \"max\"}}", "malformed"},
			{"{\"goroutines\": {}}", "none of the sample types"},
			{"{\"a\": {}, \"a\": {}}", "not valid JSON"},
		};

		for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
			assert_int_equal(ingest__pprof_typed(&b, body, len, bad[i].cfg,
							     strlen(bad[i].cfg), &o, err,
							     sizeof(err)),
					 -EINVAL);
			if (!strstr(err, bad[i].says))
				fail_msg("%s: '%s' lacks '%s'", bad[i].cfg, err, bad[i].says);
			ingest_batch__free(&b);
		}
	}
	/* {} configures nothing: the profile's last type, as without it. */
	assert_int_equal(ingest__pprof_typed(&b, body, len, "{}", 2, &o, err, sizeof(err)), 0);
	assert_int_equal(b.n, 1);
	sr = series_with(&b, "type=inuse_space,pid=9");
	assert_int_equal(sr->prof->total, 1600);
	ingest_batch__free(&b);

	/* A malformed profile is still named as such. */
	assert_int_equal(
		ingest__pprof_typed(&b, body, len / 2, cfg, strlen(cfg), &o, err, sizeof(err)),
		-EINVAL);
	assert_non_null(strstr(err, "not a valid pprof"));
	ingest_batch__free(&b);
	free(body);
}

/* Sonde's own writer: pid and comm split, tid dropped, totals exact. */
static void test_own_writer(void **state)
{
	struct profile *p = profile__new("cpu", "nanoseconds", 10101010);
	struct prof_frame fa[] = {{.func = "hot_a"}, {.func = "main"}};
	struct prof_frame fb[] = {{.func = "hot_b"}, {.func = "main"}};
	struct ingest_batch b = {0};
	struct ingest_opts o = opts(NULL);
	char *buf = NULL, err[512];
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	profile__add(p, 100, 101, "shares", fa, 2, 174);
	profile__add(p, 100, 102, "shares", fa, 2, 1);
	profile__add(p, 100, 101, "shares", fb, 2, 88);
	profile__add(p, 200, 200, "other", fb, 2, 29);
	assert_int_equal(profile__write_pprof(p, f), 0);
	fclose(f);
	assert_int_equal(ingest__pprof(&b, buf, len, &o, err, sizeof(err)), 0);
	assert_int_equal(b.n, 2);
	assert_int_equal(series_with(&b, "pid=100,comm=shares,service_name=shares")->prof->total,
			 263);
	assert_int_equal(series_with(&b, "pid=200,comm=other")->prof->total, 29);
	ingest_batch__free(&b);
	free(buf);
	profile__free(p);
}

/* An agent's samples name the process (comm), the thread and the service:
 * each thread is a series labelled thread, the sample's service_name wins
 * over the one comm would give, and without one it is comm, not the
 * thread. */
static void test_own_writer_who(void **state)
{
	struct profile *p = profile__new("cpu", "nanoseconds", 10101010);
	struct prof_frame fa[] = {{.func = "spin"}, {.func = "worker"}};
	struct prof_who a = {.pid = 7,
			     .tid = 8,
			     .comm = "labelproc",
			     .thread = "worker-a",
			     .service = "trainer"};
	struct prof_who bw = {.pid = 7,
			      .tid = 9,
			      .comm = "labelproc",
			      .thread = "worker-b",
			      .service = "trainer"};
	struct prof_who c = {.pid = 10, .tid = 11, .comm = "labelproc", .thread = "worker-a"};
	struct ingest_batch b = {0};
	struct ingest_opts o = opts(NULL);
	char *buf = NULL, err[512];
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_int_equal(profile__add_ex(p, &a, fa, 2, 3), 0);
	assert_int_equal(profile__add_ex(p, &bw, fa, 2, 4), 0);
	assert_int_equal(profile__add_ex(p, &c, fa, 2, 5), 0);
	assert_int_equal(profile__write_pprof(p, f), 0);
	fclose(f);
	assert_int_equal(ingest__pprof(&b, buf, len, &o, err, sizeof(err)), 0);
	assert_int_equal(b.n, 3);
	assert_int_equal(series_with(&b, "pid=7,comm=labelproc,thread=worker-a,"
					 "service_name=trainer,type=cpu")
				 ->prof->total,
			 3);
	assert_int_equal(series_with(&b, "pid=7,thread=worker-b,service_name=trainer")->prof->total,
			 4);
	assert_int_equal(series_with(&b, "pid=10,comm=labelproc,thread=worker-a,"
					 "service_name=labelproc")
				 ->prof->total,
			 5);
	ingest_batch__free(&b);
	free(buf);
	profile__free(p);
}

static void expect_refused(const void *body, size_t len, const struct ingest_opts *o, int want,
			   const char *msg)
{
	struct ingest_batch b = {0};
	char err[512] = "";
	int rc = ingest__pprof(&b, body, len, o, err, sizeof(err));

	if (rc != want)
		fail_msg("expected %d, got %d (%s)", want, rc, err);
	if (!strstr(err, msg))
		fail_msg("error '%s' does not say '%s'", err, msg);
	ingest_batch__free(&b);
}

static void test_refused(void **state)
{
	const struct tsample good[] = {{"main;a", {1, 10101010}, "comm=x,pid=#1"}};
	struct ingest_opts o = opts(NULL);
	size_t len, i;
	uint8_t *body = make_pprof(&tp_cpu, good, 1, false, &len), *junk;

	/* Truncated at every length. */
	for (i = 0; i + 1 < len; i++) {
		struct ingest_batch b = {0};
		char err[512];
		int rc = ingest__pprof(&b, body, i, &o, err, sizeof(err));

		assert_true(rc == -EINVAL || rc == 0);
		ingest_batch__free(&b);
	}
	expect_refused(body, len / 2, &o, -EINVAL, "not a valid pprof");
	expect_refused("", 0, &o, -EINVAL, "not a valid pprof");
	junk = malloc(4096);
	for (i = 0; i < 4096; i++)
		junk[i] = (uint8_t)(i * 7919 + 13);
	expect_refused(junk, 4096, &o, -EINVAL, "not a valid pprof");
	free(junk);
	free(body);

	/* A gzip bomb: 100 MB of zeros in 100 KB. */
	{
		size_t zlen = 200000, n = 100 * MB;
		uint8_t *zeros = calloc(1, n), *z = malloc(zlen);
		z_stream zs;

		memset(&zs, 0, sizeof(zs));
		deflateInit2(&zs, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
		zs.next_in = zeros;
		zs.avail_in = (uInt)n;
		zs.next_out = z;
		zs.avail_out = (uInt)zlen;
		assert_int_equal(deflate(&zs, Z_FINISH), Z_STREAM_END);
		expect_refused(z, zlen - zs.avail_out, &o, -EFBIG, "larger than");
		deflateEnd(&zs);
		free(zeros);
		free(z);
	}

	/* Two million empty samples: 4 MB that protobuf-c would unpack into
	 * some 290 MB; refused once the unpacking passes its budget. */
	{
		size_t n = 2000000;
		uint8_t *amp = malloc(2 * n);

		for (i = 0; i < n; i++) {
			amp[2 * i] = 0x12; /* field 2 (sample), length-delimited */
			amp[2 * i + 1] = 0;
		}
		expect_refused(amp, 2 * n, &o, -EFBIG, "unpacking");
		o.max_heap = 1 << 20;
		expect_refused(amp, 2 * n, &o, -EFBIG, "unpacking");
		o.max_heap = 0;
		free(amp);
	}

	/* Bad values and labels. */
	{
		const struct tsample neg[] = {{"main;a", {1, -5}, "comm=x"}};
		const struct tsample badkey[] = {{"main;a", {1, 10101010}, "bad key=v"}};
		const struct tsample binval[] = {{"main;a", {1, 10101010}, "comm=\xff\xfe"}};
		struct tsample bigval[] = {{"main;a", {1, 10101010}, NULL}};
		char big[1100] = "exe=";

		memset(big + 4, 'x', 1050);
		bigval[0].labels = big;
		body = make_pprof(&tp_cpu, neg, 1, false, &len);
		expect_refused(body, len, &o, -EINVAL, "negative value");
		free(body);
		body = make_pprof(&tp_cpu, badkey, 1, true, &len);
		expect_refused(body, len, &o, -EINVAL, "'bad key'");
		free(body);
		body = make_pprof(&tp_cpu, binval, 1, true, &len);
		expect_refused(body, len, &o, -EINVAL,
			       "label 'comm' has a value that is not UTF-8");
		free(body);
		body = make_pprof(&tp_cpu, bigval, 1, true, &len);
		expect_refused(body, len, &o, -EINVAL, "label 'exe' has a value of 1050 bytes");
		free(body);
	}

	/* Too many series. */
	{
		struct tsample many[40];
		char labels[40][32];

		for (i = 0; i < 40; i++) {
			snprintf(labels[i], sizeof(labels[i]), "comm=c%zu", i);
			many[i] = (struct tsample){"main;a", {1, 10101010}, labels[i]};
		}
		body = make_pprof(&tp_cpu, many, 40, true, &len);
		o.max_series = 39;
		expect_refused(body, len, &o, -E2BIG, "more than 39 series");
		o.max_series = 40;
		{
			struct ingest_batch b = {0};
			char err[512];

			assert_int_equal(ingest__pprof(&b, body, len, &o, err, sizeof(err)), 0);
			assert_int_equal(b.n, 40);
			ingest_batch__free(&b);
		}
		free(body);
	}

	/* A window that ends before it starts. */
	o = opts(NULL);
	o.start_ms = 5000;
	o.end_ms = 4000;
	body = make_pprof(&tp_cpu, good, 1, false, &len);
	expect_refused(body, len, &o, -EINVAL, "from must be before until");
	free(body);
}

static void test_folded(void **state)
{
	const char text[] = "main;run;hot_a 600\n"
			    "\n"
			    "main;run;hot_b 300\r\n"
			    "main;sys_read_[k] 5\n"
			    "main;run;hot_a 1";
	struct lset ls = {0};
	struct ingest_batch b = {0};
	struct ingest_opts o;
	char err[512];
	struct profile *p;

	lset__set(&ls, "service_name", "shares");
	lset__set(&ls, "type", "cpu");
	o = opts(&ls);
	o.start_ms = 1000;
	o.end_ms = 11000;
	o.unit = "samples";
	o.period = 10000000;
	assert_int_equal(ingest__folded(&b, text, strlen(text), false, &o, err, sizeof(err)), 0);
	assert_int_equal(b.n, 1);
	p = b.series[0].prof;
	assert_int_equal(p->total, 906);
	assert_int_equal(p->nsamples, 3);
	assert_int_equal(p->period, 10000000);
	/* Root first in the text, leaf first in the profile. */
	for (size_t i = 0; i < p->nsamples; i++) {
		const struct prof_sample *s = &p->samples[i];

		assert_string_equal(profile__str(p, p->locs[s->locs[s->nlocs - 1]].func), "main");
		if (s->nlocs == 2) {
			assert_true(p->locs[s->locs[0]].kernel);
			assert_string_equal(profile__str(p, p->locs[s->locs[0]].func), "sys_read");
		}
	}
	ingest_batch__free(&b);

	/* lines: one sample per line. */
	{
		const char lines[] = "main;a\nmain;a\nmain;b\n\n";

		assert_int_equal(
			ingest__folded(&b, lines, strlen(lines), true, &o, err, sizeof(err)), 0);
		assert_int_equal(b.series[0].prof->total, 3);
		ingest_batch__free(&b);
	}

	/* Errors name the line. */
	{
		const char bad[] = "main;a 1\n\nmain;;b 2\n";
		const char nocount[] = "main;a 1\nmain;b\n";

		assert_int_equal(ingest__folded(&b, bad, strlen(bad), false, &o, err, sizeof(err)),
				 -EINVAL);
		assert_non_null(strstr(err, "line 3"));
		ingest_batch__free(&b);
		assert_int_equal(
			ingest__folded(&b, nocount, strlen(nocount), false, &o, err, sizeof(err)),
			-EINVAL);
		assert_non_null(strstr(err, "line 2"));
		ingest_batch__free(&b);
	}
	lset__free(&ls);
}

static void test_points(void **state)
{
	const char good[] =
		"{\"points\": [{\"name\": \"gpu_memory_used_bytes\", \"labels\": {\"node\": "
		"\"gpu-7\","
		" \"pid\": \"4242\", \"gpu_id\": \"0\"}, \"ts_ms\": 1795337821000, \"value\": "
		"6.4e10},"
		" {\"name\": \"nccl_calls\", \"ts_ms\": 5, \"value\": 3},"
		" {\"name\": \"x\", \"ts_ms\": 6, \"value\": \"NaN\", \"labels\": {\"e\": \"\"}}]}";
	struct ingest_points pts;
	char err[512];

	assert_int_equal(ingest_points__parse(&pts, good, strlen(good), 10, err, sizeof(err)), 0);
	assert_int_equal(pts.n, 3);
	assert_string_equal(pts.p[0].name, "gpu_memory_used_bytes");
	assert_int_equal(pts.p[0].nlabels, 3);
	assert_int_equal(pts.p[0].ts_ms, 1795337821000LL);
	assert_true(pts.p[0].value == 6.4e10);
	assert_int_equal(pts.p[1].nlabels, 0);
	assert_true(pts.p[2].value != pts.p[2].value);
	assert_int_equal(pts.p[2].nlabels, 0); /* empty values dropped */
	ingest_points__free(&pts);

	assert_int_equal(ingest_points__parse(&pts, good, strlen(good), 2, err, sizeof(err)),
			 -EFBIG);
	assert_non_null(strstr(err, "at most 2"));

	{
		static const struct {
			const char *body, *msg;
		} bad[] = {
			{"{\"points\": [", "not JSON"},
			{"[]", "expected {\"points\""},
			{"{\"points\": [{\"name\": \"9x\", \"ts_ms\": 1, \"value\": 1}]}",
			 "point 0"},
			{"{\"points\": [{\"name\": \"x\", \"ts_ms\": -1, \"value\": 1}]}", "ts_ms"},
			{"{\"points\": [{\"name\": \"x\", \"ts_ms\": 1.5, \"value\": 1}]}",
			 "ts_ms"},
			{"{\"points\": [{\"name\": \"x\", \"ts_ms\": 1, \"value\": \"a\"}]}",
			 "value"},
			{"{\"points\": [{\"name\": \"x\", \"ts_ms\": 1, \"value\": 1, \"labels\": "
			 "3}]}",
			 "labels"},
			{"{\"points\": [{\"name\": \"x\", \"ts_ms\": 1, \"value\": 1, \"labels\": "
			 "{\"a b\": \"v\"}}]}",
			 "'a b'"},
			{"{\"points\": [{\"name\": \"x\", \"ts_ms\": 1, \"value\": 1, \"labels\": "
			 "{\"a\": 5}}]}",
			 "must be a string"},
		};

		for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
			int rc = ingest_points__parse(&pts, bad[i].body, strlen(bad[i].body), 10,
						      err, sizeof(err));

			if (rc != -EINVAL || !strstr(err, bad[i].msg))
				fail_msg("%s: %d '%s'", bad[i].body, rc, err);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_split),	   cmocka_unit_test(test_unknown_type),
		cmocka_unit_test(test_own_writer), cmocka_unit_test(test_own_writer_who),
		cmocka_unit_test(test_refused),	   cmocka_unit_test(test_folded),
		cmocka_unit_test(test_points),	   cmocka_unit_test(test_sample_type_config),
		cmocka_unit_test(test_split_many),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
