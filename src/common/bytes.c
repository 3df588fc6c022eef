/* bytes.c: sizes as users write them. See bytes.h. */
#include "common/bytes.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* "80G", "40GiB", "81920M", "1073741824" -> bytes; 0 on a bad size. */
uint64_t parse_bytes(const char *s, const char **end_out)
{
	char *end;
	double v;
	uint64_t mult = 1;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || v <= 0)
		return 0;
	switch (*end) {
	case 'K':
	case 'k':
		mult = 1ull << 10;
		end++;
		break;
	case 'M':
		mult = 1ull << 20;
		end++;
		break;
	case 'G':
		mult = 1ull << 30;
		end++;
		break;
	case 'T':
		mult = 1ull << 40;
		end++;
		break;
	}
	if (mult > 1 && (!strncmp(end, "iB", 2) || !strncmp(end, "ib", 2)))
		end += 2;
	else if (mult > 1 && (*end == 'B' || *end == 'b'))
		end++;
	if (v * mult > 1e18)
		return 0;
	*end_out = end;
	return (uint64_t)(v * mult);
}
