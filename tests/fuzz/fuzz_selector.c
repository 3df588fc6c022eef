/* fuzz_selector.c: libFuzzer target for selector__parse(), the parser of
 * the `query` argument of every query route (src/server/parse.c). Any text
 * must be parsed or refused with EINVAL and a message, in heap proportional
 * to it; a parsed selector must hold valid label names, UTF-8 values and
 * regexes that compile, and written back in canonical Prometheus form it
 * must parse to the same matchers. Seeds in tests/fuzz/seeds/selector/. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "common/regex.h"
#include "server/parse.h"
#include "common/sbuf.h"
#include "common/utf8.h"

#define SELECTOR_HEAP_PER_BYTE 64

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	return 0;
}

/* {name="value",...} with value escaped for double quotes. */
static char *canonical(const struct selector *sel)
{
	static const char *const ops[] = {"=", "!=", "=~", "!~"};
	struct sbuf b = {0};

	FUZZ_CHECK(!sbuf__puts(&b, "{"), "out of memory");
	for (size_t i = 0; i < sel->n; i++) {
		const char *v = sel->m[i].value;

		FUZZ_CHECK(!sbuf__printf(&b, "%s%s%s\"", i ? "," : "", sel->m[i].name,
					 ops[sel->m[i].op]),
			   "out of memory");
		for (; *v; v++) {
			if (*v == '"' || *v == '\\')
				sbuf__add(&b, "\\", 1);
			if (*v == '\n')
				sbuf__add(&b, "\\n", 2);
			else if (*v == '\t')
				sbuf__add(&b, "\\t", 2);
			else if (*v == '\r')
				sbuf__add(&b, "\\r", 2);
			else
				sbuf__add(&b, v, 1);
		}
		sbuf__add(&b, "\"", 1);
	}
	sbuf__puts(&b, "}");
	return sbuf__steal(&b, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *text = fuzz_strdup(data, size), *canon, err[512] = "", err2[512] = "";
	struct selector sel = {0}, again = {0};
	size_t heap;
	int rc;

	fuzz_heap_begin();
	rc = selector__parse(&sel, text, err, sizeof(err));
	heap = fuzz_heap_end();
	FUZZ_CHECK(heap <= SELECTOR_HEAP_PER_BYTE * size + FUZZ_HEAP_FIXED,
		   "%zu bytes of heap for %zu bytes of selector", heap, size);
	FUZZ_CHECK(rc == 0 || rc == -EINVAL, "refused with %d", rc);
	if (rc) {
		FUZZ_CHECK(err[0], "refused without a message");
		goto out;
	}
	FUZZ_CHECK(sel.n <= SELECTOR_MAX_MATCHERS + 2, "%zu matchers", sel.n);
	for (size_t i = 0; i < sel.n; i++) {
		const struct store_matcher *m = &sel.m[i];

		FUZZ_CHECK(label_name_valid(m->name), "matcher %zu: bad name", i);
		FUZZ_CHECK(utf8_valid(m->value, strlen(m->value)), "matcher %zu: not UTF-8", i);
		FUZZ_CHECK(m->op >= STORE_EQ && m->op <= STORE_NRE, "matcher %zu: op %d", i, m->op);
		if (m->op == STORE_RE || m->op == STORE_NRE)
			(void)regex_match_anchored(m->value, "python3");
	}
	canon = canonical(&sel);
	rc = selector__parse(&again, canon, err2, sizeof(err2));
	FUZZ_CHECK(!rc, "the canonical form '%.200s' does not parse: %s", canon, err2);
	FUZZ_CHECK(again.n == sel.n, "%zu matchers read back as %zu", sel.n, again.n);
	for (size_t i = 0; i < sel.n; i++)
		FUZZ_CHECK(!strcmp(again.m[i].name, sel.m[i].name) &&
				   !strcmp(again.m[i].value, sel.m[i].value) &&
				   again.m[i].op == sel.m[i].op,
			   "matcher %zu changed in the round trip", i);
	free(canon);
out:
	selector__free(&again);
	selector__free(&sel);
	free(text);
	return 0;
}
