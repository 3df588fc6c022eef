/* fuzz_timeparse.c: libFuzzer target for the time and duration parsers of
 * the server and of every duration (parse_time_ms in src/server/parse.c,
 * duration_parse in src/common/duration.c), which read from/until/step of
 * every route, options and rules. The first byte picks milliseconds or
 * Pyroscope seconds; the rest is the text. Whatever is accepted must mean
 * what it says: "now" is now, "now-D" is now minus the duration D, digits
 * are that many ms (or s), a duration reads back from its value in ms;
 * nothing overflows (UBSan) and a refusal comes with a message. Seeds in
 * tests/fuzz/seeds/timeparse/. */
#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "common/duration.h"
#include "server/parse.h"

#define NOW 1795337821123LL

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	fuzz_setup();
	return 0;
}

static bool all_digits(const char *s)
{
	if (!*s)
		return false;
	for (; *s; s++)
		if (*s < '0' || *s > '9')
			return false;
	return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	enum time_unit unit = size && (data[0] & 1) ? TIME_PYROSCOPE_S : TIME_MS;
	char *s = fuzz_strdup(size ? data + 1 : data, size ? size - 1 : 0), err[256] = "";
	uint64_t d, d2;
	int64_t t;
	int rc;

	rc = duration_parse(s, &d);
	FUZZ_CHECK(rc == 0 || rc == -EINVAL, "duration refused with %d", rc);
	if (!rc) {
		char back[64];

		FUZZ_CHECK(d <= DURATION_MAX_MS, "duration %" PRIu64 " past the maximum", d);
		snprintf(back, sizeof(back), "%" PRIu64 "ms", d);
		FUZZ_CHECK(!duration_parse(d ? back : "0", &d2) && d2 == d,
			   "duration %" PRIu64 " does not read back", d);
		duration_format(back, sizeof(back), d);
		FUZZ_CHECK(!duration_parse(back, &d2) && d2 == d,
			   "duration %" PRIu64 " formatted as '%s' does not read back", d, back);
	}

	rc = parse_time_ms(s, unit, NOW, &t, err, sizeof(err));
	FUZZ_CHECK(rc == 0 || rc == -EINVAL, "time refused with %d", rc);
	if (rc) {
		FUZZ_CHECK(err[0], "refused without a message");
	} else if (!strcmp(s, "now")) {
		FUZZ_CHECK(t == NOW, "now is %" PRId64, t);
	} else if (!strncmp(s, "now-", 4)) {
		FUZZ_CHECK(!duration_parse(s + 4, &d) && t == NOW - (int64_t)d && t >= 0,
			   "now-D is %" PRId64, t);
	} else {
		int64_t v;

		FUZZ_CHECK(all_digits(s), "'%.40s' accepted as a time", s);
		v = strtoll(s, NULL, 10);
		if (unit == TIME_PYROSCOPE_S && v <= 100000000000LL)
			FUZZ_CHECK(t == v * 1000, "%" PRId64 " s read as %" PRId64 " ms", v, t);
		else
			FUZZ_CHECK(t == v, "%" PRId64 " ms read as %" PRId64, v, t);
	}
	free(s);
	return 0;
}
