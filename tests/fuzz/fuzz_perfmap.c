/* fuzz_perfmap.c: libFuzzer target for perfmap__load(), the reader of the JIT
 * perf maps runtimes write to /tmp/perf-PID.map ("START SIZE NAME", hex).
 * Loading must succeed whatever the lines hold, in heap proportional to the
 * input, keeping entries sorted by start, one per start, each non-empty and
 * named; perfmap__find() must give each entry for its start and only ever an
 * entry holding the address asked for. The input is loaded twice into the same
 * map, as a re-read of a changed file replaces it. Seeds:
 * tests/fuzz/seeds/perfmap/. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "symbolize/symbolize_internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	return 0;
}

static void check_find(const struct perfmap *m, uint64_t addr)
{
	const struct perfmap_entry *e = perfmap__find(m, addr);

	FUZZ_CHECK(!e || (e->start <= addr && addr < e->end), "found [%#llx, %#llx) for %#llx",
		   e ? (unsigned long long)e->start : 0, e ? (unsigned long long)e->end : 0,
		   (unsigned long long)addr);
}

static void check_perfmap(const struct perfmap *m)
{
	size_t i;

	FUZZ_CHECK(m->n <= SYMBOLIZE_MAX_JIT_ENTRIES, "%zu entries", m->n);
	for (i = 0; i < m->n; i++) {
		const struct perfmap_entry *e = &m->e[i];

		FUZZ_CHECK(e->start < e->end, "entry %zu is empty", i);
		FUZZ_CHECK(!i || m->e[i - 1].start < e->start, "entry %zu out of order", i);
		FUZZ_CHECK(e->name && *e->name, "entry %zu has no name", i);
		FUZZ_CHECK(!strchr(e->name, '\n') && e->name[strlen(e->name) - 1] != '\r',
			   "entry %zu: line break in the name", i);
		FUZZ_CHECK(perfmap__find(m, e->start) == e, "entry %zu not found at its start", i);
		check_find(m, e->end - 1);
		check_find(m, e->end);
		check_find(m, e->start - 1);
	}
	check_find(m, 0);
	check_find(m, UINT64_MAX);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct strpool *pool = strpool__new();
	struct perfmap m;
	size_t n, heap;
	FILE *f;
	int err;

	memset(&m, 0, sizeof(m));
	f = fuzz_fopen(data, size);
	fuzz_heap_begin();
	err = perfmap__load(&m, f, pool);
	heap = fuzz_heap_end();
	FUZZ_CHECK(heap <= 64 * size + FUZZ_HEAP_FIXED, "%zu bytes of heap for %zu bytes of input",
		   heap, size);
	FUZZ_CHECK(!err, "perfmap__load returned %d", err);
	check_perfmap(&m);
	n = m.n;

	rewind(f);
	err = perfmap__load(&m, f, pool);
	fclose(f);
	FUZZ_CHECK(!err, "reload returned %d", err);
	FUZZ_CHECK(m.n == n, "reload kept %zu entries, not %zu", m.n, n);
	check_perfmap(&m);

	perfmap__release(&m);
	strpool__free(pool);
	return 0;
}
