/* fuzz_clickhouse.c: libFuzzer target for what the ClickHouse store
 * (src/store/clickhouse*.c) reads from its server -- every answer, which a
 * damaged table, another program's rows in the database or a server of
 * another version can make anything. The store's own code runs as against
 * a server but for the transport: this file's ch__post stands in for
 * clickhouse_http.c's and answers each query with the input's next chunk
 * (a 2-byte little-endian length, then that many bytes; 0xffff is an error
 * answered, the end of the input a server gone). Opening the store gets
 * true answers (a new database), so that every input reaches an operation.
 * The first byte picks it:
 *   0  select (and a second select over the caches the first filled)
 *   1  timeline
 *   2  label names and values
 *   3  series totals
 *   4  points
 *   5  a keyed put (whether the key is stored), then a select
 *   6  expiry (the partitions listed)
 *   7  stats
 *   8  the rest is a store URL, parsed (ch_url__parse)
 * the second byte the matchers. Every call must return 0 or an error, a
 * select a profile whose samples are in bounds and whose total is their
 * sum (stopping at INT64_MAX), and the heap must stay in proportion to the
 * input.
 * Seeds are made by gen_seeds (fuzz-seeds). */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/sat.h"
#include "fuzz_common.h"
#include "profile/profile.h"
#include "store/clickhouse_internal.h"

static const uint8_t *in;
static size_t in_left;
static bool opening;

/* ---- the transport ---- */

int ch__post(struct ch_store *s, const char *url, const void *body, size_t len, struct sbuf *out,
	     const char *what)
{
	static const uint8_t zero[8];
	size_t n;

	if (opening) {
		/* A new database: the schema's version and the longest
		 * window are 0, everything else answers nothing. */
		if (out && body && len >= 6 && !memcmp(body, "SELECT", 6))
			return sbuf__add(out, zero, sizeof(zero));
		return 0;
	}
	if (in_left < 2)
		return -EAGAIN;
	n = (size_t)in[0] | (size_t)in[1] << 8;
	in += 2;
	in_left -= 2;
	if (n == 0xffff)
		return -EIO;
	if (n > in_left)
		n = in_left;
	if (out && sbuf__add(out, in, n))
		return -ENOMEM;
	in += n;
	in_left -= n;
	return 0;
}

void ch__close_conns(struct ch_store *s)
{
}

char *ch__url(const struct ch_url *u, const char *sql)
{
	return strdup("http://127.0.0.1:1/?database=fuzz");
}

/* store.c opens SQLite stores too; this target never asks for one. */
struct store *store_sqlite__open(const char *dir)
{
	errno = ENOTSUP;
	return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	return 0;
}

/* ---- the operations ---- */

static void check_err(int err, const char *what)
{
	FUZZ_CHECK(err <= 0 && err > -4096, "%s returned %d", what, err);
}

static void check_profile(const struct profile *p)
{
	int64_t sum = 0;
	size_t i, j;

	for (i = 0; i < p->nsamples; i++) {
		const struct prof_sample *smp = &p->samples[i];

		FUZZ_CHECK(smp->nlocs <= PROF_MAX_FRAMES, "sample %zu has %u frames", i,
			   smp->nlocs);
		for (j = 0; j < smp->nlocs; j++)
			FUZZ_CHECK(smp->locs[j] < p->nlocs, "sample %zu: location %u of %zu", i,
				   smp->locs[j], p->nlocs);
		FUZZ_CHECK(smp->count >= 0, "sample %zu counts %" PRId64, i, smp->count);
		sum = sat_add_i64(sum, smp->count); /* a read's sums stop at INT64_MAX */
	}
	FUZZ_CHECK(sum == p->total, "the samples sum to %" PRId64 ", the total is %" PRId64, sum,
		   p->total);
}

static void do_select(struct store *s, const struct store_query *q)
{
	struct profile *p = profile__new("cpu", "", 0);
	char unit[64];
	int err;

	err = store__select(s, q, p, unit, sizeof(unit));
	check_err(err, "select");
	if (!err) {
		check_profile(p);
		FUZZ_CHECK(memchr(unit, '\0', sizeof(unit)), "the unit is not a string");
	}
	profile__free(p);
}

static void on_string(void *ctx, const char *str)
{
	FUZZ_CHECK(str, "a NULL string");
	*(size_t *)ctx += strlen(str);
}

static void on_series(void *ctx, const struct store_label *labels, size_t nlabels, int64_t total,
		      int64_t first_ms, int64_t last_ms)
{
	size_t i;

	for (i = 0; i < nlabels; i++)
		*(size_t *)ctx += strlen(labels[i].name) + strlen(labels[i].value);
}

static void on_points(void *ctx, const char *name, const struct store_label *labels, size_t nlabels,
		      const int64_t *ts_ms, const double *values, size_t n)
{
	size_t i;

	for (i = 0; i < nlabels; i++)
		*(size_t *)ctx += strlen(labels[i].name) + strlen(labels[i].value);
	for (i = 1; i < n; i++)
		FUZZ_CHECK(ts_ms[i - 1] <= ts_ms[i], "points out of time order");
}

static void do_put(struct store *s)
{
	struct store_label labels[] = {{"type", "cpu"}, {"service_name", "fuzz"}};
	struct prof_frame frames[2] = {{.func = "leaf", .module = "/bin/app"},
				       {.func = "main", .module = "/bin/app"}};
	struct profile *p = profile__new("cpu", "samples", 10000000);
	struct store_window w = {.labels = labels,
				 .nlabels = 2,
				 .start_ms = 600000,
				 .end_ms = 610000,
				 .prof = p,
				 .key = "fuzz-key"};
	int err;

	FUZZ_CHECK(!profile__add(p, 1, 1, "app", frames, 2, 3), "can't make the profile");
	err = store__put_windows(s, &w, 1);
	/* 1: a keyed put already stored */
	check_err(err == 1 ? 0 : err, "put");
	profile__free(p);
}

/* A URL parsed is one whose parts can't change the meaning of the URLs
 * made of them. */
static void fuzz_url(const uint8_t *data, size_t size)
{
	char *url = fuzz_strdup(data, size), msg[256];
	struct ch_url u;
	const char *p;

	if (!ch_url__parse(&u, url, msg, sizeof(msg))) {
		FUZZ_CHECK(!strncmp(u.base, "http://", 7), "base %s", u.base);
		for (p = u.base + 7; *p && *p != '/'; p++)
			FUZZ_CHECK(isalnum((unsigned char)*p) || strchr(".-_[]:", *p),
				   "base %s has '%c'", u.base, *p);
		FUZZ_CHECK(!strcmp(p, "/"), "base %s has a path", u.base);
		for (p = u.database; *p; p++)
			FUZZ_CHECK(isalnum((unsigned char)*p) || *p == '_', "database %s",
				   u.database);
		ch_url__free(&u);
	} else {
		FUZZ_CHECK(memchr(msg, '\0', sizeof(msg)) && *msg, "no message");
	}
	free(url);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct store_matcher sets[][2] = {
		{{"type", "cpu", STORE_EQ}, {"service_name", "x", STORE_EQ}},
		{{"service_name", "a|b", STORE_RE}, {"pid", "", STORE_NE}},
		{{"type", "", STORE_NE}, {"node", ".*", STORE_NRE}},
	};
	struct store_query q = {.from_ms = 0, .until_ms = 10 * 86400000LL};
	struct store_stats st;
	struct store *s;
	size_t heap, sink = 0;
	double values[64];
	int op;

	if (size < 2)
		return 0;
	op = data[0] % 9;
	if (op == 8) {
		fuzz_url(data + 1, size - 1);
		return 0;
	}
	q.matchers = sets[data[1] % 4 < 3 ? data[1] % 4 : 0];
	q.nmatchers = data[1] % 4 < 3 ? 2 : 0;
	in = data + 2;
	in_left = size - 2;

	opening = true;
	s = store__open("clickhouse://127.0.0.1:1/fuzz");
	opening = false;
	FUZZ_CHECK(s, "can't open the store over true answers");
	fuzz_heap_begin();
	switch (op) {
	case 0:
		do_select(s, &q);
		do_select(s, &q);
		break;
	case 1:
		check_err(store__timeline(s, &q, q.until_ms / 64, values, 64), "timeline");
		break;
	case 2:
		check_err(store__label_names(s, &q, on_string, &sink), "label names");
		check_err(store__label_values(s, &q, "service_name", on_string, &sink),
			  "label values");
		break;
	case 3:
		check_err(store__series_totals(s, &q, on_series, &sink), "series totals");
		break;
	case 4:
		check_err(store__points(s, "gpu_memory_used_bytes", &q, on_points, &sink),
			  "points");
		break;
	case 5:
		do_put(s);
		do_select(s, &q);
		break;
	case 6:
		check_err(store__expire(s, 3 * 86400000LL), "expire");
		do_select(s, &q);
		break;
	default:
		store__stats(s, &st);
		break;
	}
	heap = fuzz_heap_end();
	/* Caches and answers in proportion to the input: a label set or a
	 * function is a few hundred bytes of cache for a few bytes of it. */
	FUZZ_CHECK(heap <= FUZZ_HEAP_FIXED + 512 * size, "%zu bytes of heap for %zu bytes of input",
		   heap, size);
	store__close(s);
	return 0;
}
