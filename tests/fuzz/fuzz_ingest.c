/* fuzz_ingest.c: libFuzzer target for the server's ingest bodies
 * (src/server/ingest.c): the input as an agent's pprof split into series,
 * and as Pyroscope folded and lines text. A body is taken or refused with
 * EINVAL, EFBIG or E2BIG and a message, in heap proportional to it (gzip
 * aside, bounded by the decompression limit). What is taken must be what
 * an independent pass over the same pprof (profile__visit_pprof) counts:
 * the same number of samples and the same total value, in series whose
 * label sets are distinct, valid for the store, each with a type; windows
 * that start before they end. Seeds in tests/fuzz/seeds/ingest/ (pprof
 * bodies with labels) plus the pprof seeds of gen_seeds.c. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "fuzz_profile.h"
#include "server/ingest.h"

#define INGEST_HEAP_PER_BYTE 512
#define INGEST_MAX_SERIES 64
/* Each series holds a profile, whose index costs about 70 KiB. */
#define INGEST_HEAP_PER_SERIES (80u << 10)

/* A small valid pprof (types samples/count and cpu/nanoseconds), for the
 * inputs read as a sample_type_config. */
static char *fixed_pprof;
static size_t fixed_len;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct profile *p = profile__new("cpu", "nanoseconds", 10000000);
	struct prof_frame f[2] = {{.func = "leaf"}, {.func = "main"}};
	FILE *m = open_memstream(&fixed_pprof, &fixed_len);

	fuzz_setup();
	profile__add(p, 7, 7, "app", f, 2, 3);
	if (!m || profile__write_pprof(p, m) || fclose(m))
		abort();
	profile__free(p);
	return 0;
}

static void check_batch(const struct ingest_batch *b);

/* Pyroscope's multipart pprof with a sample_type_config: cfg over pprof. */
static void typed(const void *pprof, size_t plen, const void *cfg, size_t clen,
		  const struct ingest_opts *o)
{
	struct ingest_batch b = {0};
	char err[512] = "";
	int rc = ingest__pprof_typed(&b, pprof, plen, cfg, clen, o, err, sizeof(err));

	FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -EFBIG || rc == -E2BIG,
		   "typed: refused with %d", rc);
	if (rc)
		FUZZ_CHECK(err[0], "typed: refused without a message");
	else
		check_batch(&b);
	ingest_batch__free(&b);
}

struct count {
	size_t vidx;
	int64_t divisor, total;
	uint64_t samples;
};

static int count_header(void *ctx, const struct pprof_header *h)
{
	struct count *c = ctx;
	const char *t = h->types[h->ntypes - 1], *u = h->units[h->ntypes - 1];

	c->vidx = h->ntypes - 1;
	if (!strcmp(t, "cpu") && !strcmp(u, "nanoseconds") && h->period > 0 &&
	    (!*h->period_unit || !strcmp(h->period_unit, "nanoseconds")))
		c->divisor = h->period;
	return 0;
}

static int count_sample(void *ctx, const struct pprof_sample *s)
{
	struct count *c = ctx;
	int64_t v = s->values[c->vidx];

	if (v < 0)
		return 0;
	if (c->divisor)
		v = v / c->divisor + (v % c->divisor >= c->divisor - v % c->divisor);
	if (v) {
		c->samples++;
		if (__builtin_add_overflow(c->total, v, &c->total))
			c->total = INT64_MAX;
	}
	return 0;
}

static bool is_gzip(const uint8_t *data, size_t size)
{
	return size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
}

static void check_batch(const struct ingest_batch *b)
{
	char err[512];

	FUZZ_CHECK(b->start_ms >= 0 && b->start_ms < b->end_ms, "window [%" PRId64 ", %" PRId64 ")",
		   b->start_ms, b->end_ms);
	for (size_t i = 0; i < b->n; i++) {
		const struct ingest_series *s = &b->series[i];

		FUZZ_CHECK(lset__get(&s->labels, "type"), "series %zu has no type", i);
		FUZZ_CHECK(!lset__check(&s->labels, err, sizeof(err)), "series %zu: %s", i, err);
		fuzz_check_profile(s->prof);
		for (size_t j = 0; j < i; j++) {
			const struct lset *a = &s->labels, *o = &b->series[j].labels;
			bool same = a->n == o->n;

			for (size_t k = 0; same && k < a->n; k++) {
				const char *v = lset__get(o, a->v[k].name);

				same = v && !strcmp(v, a->v[k].value);
			}
			FUZZ_CHECK(!same, "series %zu and %zu have the same labels", i, j);
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ingest_batch b = {0};
	struct lset base = {0}, named = {0};
	struct ingest_opts o = {
		.now_ms = 1795337821000LL,
		.max_bytes = FUZZ_PPROF_MAX,
		.max_series = INGEST_MAX_SERIES,
		.unit = "samples",
		.period = 10000000,
	};
	struct count c = {0};
	struct pprof_visitor v = {count_header, count_sample, &c, 0};
	char err[512] = "";
	size_t heap;
	int rc;

	lset__set(&base, "node", "fuzz");
	o.labels = &base;
	fuzz_heap_begin();
	rc = ingest__pprof(&b, data, size, &o, err, sizeof(err));
	heap = fuzz_heap_end();
	if (!is_gzip(data, size))
		FUZZ_CHECK(heap <= INGEST_HEAP_PER_BYTE * size + FUZZ_HEAP_FIXED +
					   INGEST_HEAP_PER_SERIES * INGEST_MAX_SERIES,
			   "%zu bytes of heap for %zu bytes of pprof", heap, size);
	FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -EFBIG || rc == -E2BIG, "refused with %d", rc);
	if (rc) {
		FUZZ_CHECK(err[0], "refused without a message");
	} else {
		int64_t total = 0;
		int n;

		check_batch(&b);
		for (size_t i = 0; i < b.n; i++)
			total += b.series[i].prof->total;
		FUZZ_CHECK(!profile__visit_pprof(data, size, FUZZ_PPROF_MAX, &v),
			   "taken by the split, refused by the reader");
		FUZZ_CHECK(c.samples == b.samples, "%" PRIu64 " samples counted, %" PRIu64 " taken",
			   c.samples, b.samples);
		FUZZ_CHECK(c.total == total, "a total of %" PRId64 " counted, %" PRId64 " taken",
			   c.total, total);
		n = ingest_batch__windows(&b);
		FUZZ_CHECK(n >= 0 && (size_t)n <= b.n, "%d windows of %zu series", n, b.n);
		for (int i = 0; i < n; i++)
			FUZZ_CHECK(b.windows[i].nlabels && b.windows[i].prof->nsamples,
				   "window %d is empty", i);
	}
	ingest_batch__free(&b);

	/* The same bytes as a sample_type_config over a valid pprof, and as a
	 * pprof under a config that takes both of its usual types. */
	typed(fixed_pprof, fixed_len, data, size, &o);
	{
		static const char cfg[] = "{\"samples\": {\"display-name\": \"cpu\"}, "
					  "\"cpu\": {\"units\": \"nanoseconds\"}}";

		typed(data, size, cfg, sizeof(cfg) - 1, &o);
	}

	/* The same bytes as Pyroscope folded text, then as lines. */
	lset__set(&named, "service_name", "fuzz");
	lset__set(&named, "type", "cpu");
	o.labels = &named;
	for (int lines = 0; lines < 2; lines++) {
		err[0] = '\0';
		rc = ingest__folded(&b, data, size, lines, &o, err, sizeof(err));
		FUZZ_CHECK(rc == 0 || rc == -EINVAL, "folded refused with %d", rc);
		if (rc)
			FUZZ_CHECK(err[0], "folded refused without a message");
		else
			check_batch(&b);
		ingest_batch__free(&b);
	}
	lset__free(&named);
	lset__free(&base);
	return 0;
}
