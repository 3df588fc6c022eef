/* fuzz_pprof.c: libFuzzer target for profile__read_pprof(), the reader of
 * pprof files from anywhere (gzip or raw protobuf). Malformed input must be
 * refused with EINVAL or EFBIG, in heap proportional to the input; a profile
 * that is read must be consistent, read the same under a smaller size limit
 * or be refused as too big, and survive a pprof round trip with its total --
 * a second round trip changing nothing at all -- plus a folded round trip
 * and speedscope output. Seeds are made by gen_seeds.c. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "fuzz_profile.h"

/* Heap the reader may take per byte of raw protobuf: protobuf-c turns a
 * 2-byte empty message into a struct of up to ~100 bytes and a pointer. */
#define PPROF_HEAP_PER_BYTE 128

static bool is_gzip(const uint8_t *data, size_t size)
{
	return size >= 2 && data[0] == 0x1f && data[1] == 0x8b;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	return 0;
}

/* A smaller limit gives the same profile or EFBIG, never anything else. */
static void check_smaller_limit(const uint8_t *data, size_t size, const struct profile *p)
{
	struct profile *q = profile__read_pprof(data, size, size / 2);

	if (!q) {
		FUZZ_CHECK(errno == EFBIG, "read with a limit of %zu bytes: %s", size / 2,
			   strerror(errno));
		return;
	}
	FUZZ_CHECK(q->total == p->total && q->nsamples == p->nsamples,
		   "a smaller limit read another profile");
	profile__free(q);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct profile *p, *q, *r, *f;
	char *text, *bq, *br;
	size_t len, lq, lr, heap;

	fuzz_heap_begin();
	p = profile__read_pprof(data, size, FUZZ_PPROF_MAX);
	heap = fuzz_heap_end();
	/* The heap taken grows with the protobuf read; for gzip, that is the
	 * inflated size, which FUZZ_PPROF_MAX bounds instead. */
	if (!is_gzip(data, size))
		FUZZ_CHECK(heap <= PPROF_HEAP_PER_BYTE * size + FUZZ_HEAP_FIXED,
			   "%zu bytes of heap for %zu bytes of input", heap, size);
	if (!p) {
		FUZZ_CHECK(errno == EINVAL || errno == EFBIG, "refused with %s", strerror(errno));
		return 0;
	}
	fuzz_check_profile(p);
	check_smaller_limit(data, size, p);

	q = fuzz_pprof_roundtrip(p);
	r = fuzz_pprof_roundtrip(q);
	/* Everything is named after one round trip, so the second one is
	 * exact, down to the bytes written. */
	FUZZ_CHECK(r->nsamples == q->nsamples && r->nlocs == q->nlocs &&
			   r->nmappings == q->nmappings && r->nstrings == q->nstrings,
		   "second pprof round trip changed the profile");
	bq = fuzz_write_profile(q, PROF_FMT_PPROF, &lq);
	br = fuzz_write_profile(r, PROF_FMT_PPROF, &lr);
	FUZZ_CHECK(lq == lr && !memcmp(bq, br, lq), "second pprof round trip wrote other bytes");
	free(bq);
	free(br);

	f = fuzz_folded_roundtrip(p, &text, &len);
	free(text);
	fuzz_check_speedscope(p);

	profile__free(f);
	profile__free(r);
	profile__free(q);
	profile__free(p);
	return 0;
}
