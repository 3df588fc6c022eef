/* fuzz_folded.c: libFuzzer target for profile__read_folded(), the reader of
 * folded-stack text ("comm;root;...;leaf COUNT" lines) from anywhere, in
 * heap proportional to the input. A bad line must be refused with EINVAL and
 * its number, keeping the lines before it; what was read must be
 * consistent, and writing it as folded text and reading that back must keep
 * the total and write the very same text again. The profile also goes
 * through pprof and speedscope. Seeds are text files
 * in tests/fuzz/seeds/folded/ and one made by gen_seeds.c. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "fuzz_profile.h"

/* Heap the reader may take per byte of text: "a;b;c" makes a string, a
 * location and their index entries (about 200 bytes) of every 2 bytes. */
#define FOLDED_HEAP_PER_BYTE 256

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	return 0;
}

/* Lines in data, the last one counted even without its '\n'. */
static size_t count_lines(const uint8_t *data, size_t size)
{
	size_t n = 0, i;

	for (i = 0; i < size; i++)
		n += data[i] == '\n';
	return n + (size && data[size - 1] != '\n');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct profile *p = profile__new("cpu", "nanoseconds", 10101010), *q, *r;
	char *t1, *t2;
	size_t line = 0, l1, l2, heap;
	FILE *f;
	int err;

	f = fuzz_fopen(data, size);
	fuzz_heap_begin();
	err = profile__read_folded(p, f, &line);
	heap = fuzz_heap_end();
	fclose(f);
	FUZZ_CHECK(heap <= FOLDED_HEAP_PER_BYTE * size + FUZZ_HEAP_FIXED,
		   "%zu bytes of heap for %zu bytes of input", heap, size);
	FUZZ_CHECK(!err || err == -EINVAL, "refused with %s", strerror(-err));
	FUZZ_CHECK(err ? line >= 1 && line <= count_lines(data, size) : 1,
		   "bad line %zu of %zu lines", line, count_lines(data, size));
	fuzz_check_profile(p);

	/* With or without an error, p holds well-formed lines. */
	q = fuzz_folded_roundtrip(p, &t1, &l1);
	r = fuzz_folded_roundtrip(q, &t2, &l2);
	FUZZ_CHECK(l1 == l2 && !memcmp(t1, t2, l1), "folded round trip wrote other text");
	free(t1);
	free(t2);

	profile__free(r);
	r = fuzz_pprof_roundtrip(p);
	fuzz_check_speedscope(p);

	profile__free(r);
	profile__free(q);
	profile__free(p);
	return 0;
}
