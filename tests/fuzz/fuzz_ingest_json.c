/* fuzz_ingest_json.c: libFuzzer target for the server's JSON ingest bodies
 * (src/server/ingest.c): the input as a body of POST /api/v1/ingest/points
 * and of POST /api/v1/ingest/spans (the agent's GPU timeline). A body is
 * taken or refused with EINVAL or EFBIG and a message, in heap
 * proportional to it. What is taken holds together: no more points or
 * spans than the bounds, each series' spans within the parsed ones in
 * order, every string there, and each span either valid for the store or
 * refused by store_check_span with a message naming it, as the route
 * does. Seeds in tests/fuzz/seeds/ingest_json/. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "server/ingest.h"
#include "store/store.h"

#define MAX_POINTS 64
#define MAX_SPANS 64
#define MAX_SERIES 8
/* jansson's tree: a few hundred bytes a byte of JSON at most. */
#define HEAP_PER_BYTE 512

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	return 0;
}

static void points(const uint8_t *data, size_t size)
{
	struct ingest_points pts;
	char err[512] = "";
	int rc = ingest_points__parse(&pts, data, size, MAX_POINTS, err, sizeof(err));

	FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -EFBIG, "points: refused with %d", rc);
	if (rc) {
		FUZZ_CHECK(err[0], "points: refused without a message");
		return;
	}
	FUZZ_CHECK(pts.n <= MAX_POINTS, "points: %zu taken past the bound", pts.n);
	for (size_t i = 0; i < pts.n; i++)
		FUZZ_CHECK(pts.p[i].name && pts.p[i].name[0], "points: point %zu has no name", i);
	ingest_points__free(&pts);
}

static void spans(const uint8_t *data, size_t size)
{
	struct ingest_spans in;
	char err[512] = "";
	int rc = ingest_spans__parse(&in, data, size, MAX_SPANS, MAX_SERIES, err, sizeof(err));

	FUZZ_CHECK(rc == 0 || rc == -EINVAL || rc == -EFBIG, "spans: refused with %d", rc);
	if (rc) {
		FUZZ_CHECK(err[0], "spans: refused without a message");
		return;
	}
	FUZZ_CHECK(in.n <= MAX_SPANS && in.nseries <= MAX_SERIES, "spans: %zu in %zu series taken",
		   in.n, in.nseries);
	FUZZ_CHECK(!in.nseries || in.first[in.nseries] == in.n, "spans: series end at %zu of %zu",
		   in.first[in.nseries], in.n);
	for (size_t s = 0; s < in.nseries; s++)
		FUZZ_CHECK(in.first[s] <= in.first[s + 1], "spans: series %zu runs backwards", s);
	for (size_t k = 0; k < in.n; k++) {
		const struct store_span *sp = &in.sp[k];

		FUZZ_CHECK(sp->name && sp->kind && sp->from, "spans: span %zu lacks a string", k);
		FUZZ_CHECK(sp->start_ns >= 0 && sp->end_ns >= 0, "spans: span %zu before 1970", k);
		err[0] = 0;
		rc = store_check_span(sp, k, err, sizeof(err));
		FUZZ_CHECK(rc == 0 || (rc == -EINVAL && err[0]),
			   "spans: span %zu checked with %d and no message", k, rc);
		if (!rc)
			FUZZ_CHECK(sp->end_ns >= sp->start_ns, "spans: span %zu taken ending early",
				   k);
	}
	ingest_spans__free(&in);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t heap;

	fuzz_heap_begin();
	points(data, size);
	spans(data, size);
	heap = fuzz_heap_end();
	FUZZ_CHECK(heap <= FUZZ_HEAP_FIXED + HEAP_PER_BYTE * size,
		   "%zu bytes of heap for %zu of input", heap, size);
	return 0;
}
