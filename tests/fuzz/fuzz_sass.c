/* fuzz_sass.c: libFuzzer target for sass_parse() (src/agent/sass.c), which
 * reads nvdisasm's listing of a cubin saved by a GPU job: outside data (a
 * job's cubin, a toolkit's output). The input, copied into a buffer of
 * exactly its size so that ASan catches a read past its end, is parsed;
 * every instruction reported must have a function (a ".text.NAME" seen)
 * and a mnemonic of printable bytes without the separators, and parsing
 * twice reports the same count. Seeds: tests/fuzz/seeds/sass. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "agent/sass.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	return 0;
}

static void check(void *ctx, const char *function, uint64_t offset, const char *mnemonic)
{
	size_t *n = ctx;

	if (!*function || !*mnemonic || strpbrk(mnemonic, " \t;}\n"))
		abort();
	(*n)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = malloc(size ? size : 1);
	size_t n1 = 0, n2 = 0;

	memcpy(text, data, size);
	if (sass_parse(text, size, check, &n1) != n1)
		abort();
	sass_parse(text, size, check, &n2);
	if (n1 != n2)
		abort();
	free(text);
	return 0;
}
