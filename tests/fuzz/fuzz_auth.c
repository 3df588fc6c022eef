/* fuzz_auth.c: libFuzzer target for the Authorization header that `sonde
 * server --auth` reads from every request (auth/tokens.h,
 * token_from_header): the input is the header's value. A token taken from
 * it is non-empty, of a token's characters, and fits the buffer; a Bearer
 * header made of a token taken gives that token back. Seeds are in
 * tests/fuzz/seeds/auth/. */
#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth/tokens.h"
#include "fuzz_common.h"

/* tokens.c opens the backends; this target never does. */
struct token_backend *token_backend_sqlite__open(const char *dir)
{
	errno = ENOTSUP;
	return NULL;
}

struct token_backend *token_backend_clickhouse__open(const char *url)
{
	errno = ENOTSUP;
	return NULL;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *h = fuzz_strdup(data, size), tok[64], again[64], header[128];
	size_t i, n;

	if (token_from_header(h, tok, sizeof(tok))) {
		n = strlen(tok);
		FUZZ_CHECK(n > 0 && n < sizeof(tok), "a token of %zu bytes", n);
		for (i = 0; i < n; i++)
			FUZZ_CHECK(isalnum((unsigned char)tok[i]) || strchr("-_.~+/=", tok[i]),
				   "a token with byte %#x", (unsigned char)tok[i]);
		snprintf(header, sizeof(header), "Bearer %s", tok);
		FUZZ_CHECK(token_from_header(header, again, sizeof(again)) && !strcmp(again, tok),
			   "'%s' doesn't give '%s' back", header, tok);
	}
	free(h);
	return 0;
}
