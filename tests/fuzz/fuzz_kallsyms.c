/* fuzz_kallsyms.c: libFuzzer target for ksyms__load(), the reader of
 * /proc/kallsyms ("ADDR TYPE NAME[\t[MODULE]]" lines). Loading must succeed
 * whatever the lines hold, in heap proportional to the input, keeping a table
 * sorted by address with one non-zero address per symbol, a name without
 * blanks and a module in brackets; ksyms__find() must give each symbol for its
 * own address and the greatest one below any other. The input is loaded twice
 * into the same table, as a reload replaces it. Seeds:
 * tests/fuzz/seeds/kallsyms/. */
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

static void check_ksyms(const struct ksyms *k)
{
	size_t i;

	FUZZ_CHECK(k->loaded, "not marked loaded");
	FUZZ_CHECK(k->n <= SYMBOLIZE_MAX_KSYMS, "%zu symbols", k->n);
	for (i = 0; i < k->n; i++) {
		const struct ksym *s = &k->syms[i];
		size_t mlen;

		FUZZ_CHECK(s->addr, "symbol %zu at address 0", i);
		FUZZ_CHECK(!i || k->syms[i - 1].addr < s->addr, "symbol %zu out of order", i);
		FUZZ_CHECK(s->name && *s->name && !s->name[strcspn(s->name, " \t\n")],
			   "symbol %zu: bad name", i);
		FUZZ_CHECK(s->module, "symbol %zu: no module", i);
		mlen = strlen(s->module);
		FUZZ_CHECK(mlen >= 2 && s->module[0] == '[' && s->module[mlen - 1] == ']',
			   "symbol %zu: module \"%s\"", i, s->module);
		FUZZ_CHECK(ksyms__find(k, s->addr) == s, "symbol %zu not found at its address", i);
		if (i + 1 < k->n)
			FUZZ_CHECK(ksyms__find(k, k->syms[i + 1].addr - 1) == s,
				   "symbol %zu not found below the next", i);
	}
	if (k->n) {
		FUZZ_CHECK(!ksyms__find(k, k->syms[0].addr - 1), "found below the first symbol");
		FUZZ_CHECK(ksyms__find(k, UINT64_MAX) == &k->syms[k->n - 1],
			   "the last symbol is not found at the top");
	} else {
		FUZZ_CHECK(!ksyms__find(k, 0) && !ksyms__find(k, UINT64_MAX), "found in nothing");
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct strpool *pool = strpool__new();
	struct ksyms k;
	size_t n, heap;
	FILE *f;
	int err;

	memset(&k, 0, sizeof(k));
	f = fuzz_fopen(data, size);
	fuzz_heap_begin();
	err = ksyms__load(&k, f, pool);
	heap = fuzz_heap_end();
	FUZZ_CHECK(heap <= 64 * size + FUZZ_HEAP_FIXED, "%zu bytes of heap for %zu bytes of input",
		   heap, size);
	FUZZ_CHECK(!err, "ksyms__load returned %d", err);
	check_ksyms(&k);
	n = k.n;

	rewind(f);
	err = ksyms__load(&k, f, pool);
	fclose(f);
	FUZZ_CHECK(!err, "reload returned %d", err);
	FUZZ_CHECK(k.n == n, "reload kept %zu symbols, not %zu", k.n, n);
	check_ksyms(&k);

	ksyms__release(&k);
	strpool__free(pool);
	return 0;
}
