/* fuzz_pyroname.c: libFuzzer target for pyroscope_name__parse(), the parser
 * of the name= argument of Pyroscope's POST /ingest (APP.TYPE{k=v,...},
 * src/server/parse.c). Any text is parsed or refused with EINVAL and a
 * message, in heap proportional to it; a parsed name gives a non-empty
 * service_name and, where the name has .TYPE, a non-empty type without a
 * dot (none otherwise: the caller's default), valid label names, one value
 * per name, and the label check (lset__check) runs on it. Seeds in
 * tests/fuzz/seeds/pyroname/. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "server/parse.h"
#include "server/lset.h"

#define PYRONAME_HEAP_PER_BYTE 128

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *name = fuzz_strdup(data, size), err[512] = "", err2[512];
	struct lset ls = {0};
	const char *svc, *type;
	size_t heap;
	int rc;

	fuzz_heap_begin();
	rc = pyroscope_name__parse(name, &ls, err, sizeof(err));
	heap = fuzz_heap_end();
	FUZZ_CHECK(heap <= PYRONAME_HEAP_PER_BYTE * size + FUZZ_HEAP_FIXED,
		   "%zu bytes of heap for %zu bytes of name", heap, size);
	FUZZ_CHECK(rc == 0 || rc == -EINVAL, "refused with %d", rc);
	if (rc) {
		FUZZ_CHECK(err[0], "refused without a message");
		goto out;
	}
	svc = lset__get(&ls, "service_name");
	type = lset__get(&ls, "type");
	/* No type when the name has no ".TYPE": the caller's default. */
	FUZZ_CHECK(svc && *svc && (!type || *type), "no service_name, or an empty type");
	FUZZ_CHECK(!type || !strchr(type, '.'), "type '%.40s' holds a dot", type);
	FUZZ_CHECK(!strchr(svc, '{') && (!type || !strchr(type, '{')),
		   "a brace in the app or type");
	for (size_t i = 0; i < ls.n; i++) {
		FUZZ_CHECK(label_name_valid(ls.v[i].name), "label %zu: bad name", i);
		for (size_t j = 0; j < i; j++)
			FUZZ_CHECK(strcmp(ls.v[i].name, ls.v[j].name), "label %zu twice", i);
	}
	(void)lset__check(&ls, err2, sizeof(err2));
out:
	lset__free(&ls);
	free(name);
	return 0;
}
