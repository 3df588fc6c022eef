/* count.c: counts with thousands separators. See count.h. */
#include "common/count.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

char *fmt_count(char *buf, size_t len, uint64_t v)
{
	char digits[21], out[27];
	size_t n, j = 0;

	if (!len)
		return buf;
	n = (size_t)snprintf(digits, sizeof(digits), "%" PRIu64, v);
	for (size_t i = 0; i < n; i++) {
		if (i && (n - i) % 3 == 0)
			out[j++] = ',';
		out[j++] = digits[i];
	}
	out[j] = '\0';
	snprintf(buf, len, "%s", out);
	return buf;
}
