/* duration.c: the duration grammar of duration.h. */
#include "common/duration.h"
#include "common/clock.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#define MS ((uint64_t)NS_PER_MS)

static const struct {
	const char *unit;
	uint64_t ns;
} units[] = {
	/* Largest first: the order a duration must follow. */
	{"y", 365ull * 86400000 * MS},
	{"w", 7ull * 86400000 * MS},
	{"d", 86400000 * MS},
	{"h", 3600000 * MS},
	{"m", 60000 * MS},
	{"s", MS_PER_SEC *MS},
	{"ms", MS},
	/* Below the millisecond: duration_parse_ns only. */
	{"us", NS_PER_US},
	{"ns", 1},
};
#define NUNITS (sizeof(units) / sizeof(units[0]))
#define NUNITS_MS 7 /* the units of duration_parse */

/* The unit at s among the first n, the longest that matches ("ms" before
 * "m"); -1 if none. */
static int unit_at(const char *s, int n_units)
{
	int found = -1;

	for (int u = 0; u < n_units; u++) {
		size_t n = strlen(units[u].unit);

		if (!strncmp(s, units[u].unit, n) && (found < 0 || n > strlen(units[found].unit)))
			found = u;
	}
	return found;
}

/* A NUMBER at *sp: digits with an optional fraction. */
static bool number_at(const char **sp, double *out)
{
	const char *s = *sp;
	double v = 0, scale = 1;
	bool digits = false;

	for (; *s >= '0' && *s <= '9'; s++, digits = true)
		if (v < 1e18)
			v = v * 10 + (*s - '0');
	if (!digits)
		return false;
	if (*s == '.') {
		bool frac = false;

		for (s++; *s >= '0' && *s <= '9'; s++, frac = true)
			if (scale > 1e-12) {
				scale /= 10;
				v += (*s - '0') * scale;
			}
		if (!frac)
			return false;
	}
	*sp = s;
	*out = v;
	return true;
}

/* The duration at s in nanoseconds, with the first n_units units. */
static int parse_ns(const char *s, int n_units, double *out)
{
	double total = 0, v, max = (double)DURATION_MAX_MS * NS_PER_MS;
	int last = -1;

	if (!s || !*s)
		return -EINVAL;
	if (!number_at(&s, &v))
		return -EINVAL;
	if (!*s) {
		total = v * NS_PER_SEC; /* a bare number: seconds */
	} else {
		for (;;) {
			int u = unit_at(s, n_units);

			if (u < 0 || u <= last)
				return -EINVAL;
			last = u;
			s += strlen(units[u].unit);
			total += v * (double)units[u].ns;
			if (total > max)
				return -EINVAL;
			if (!*s)
				break;
			if (!number_at(&s, &v))
				return -EINVAL;
		}
	}
	if (!(total <= max))
		return -EINVAL;
	*out = total;
	return 0;
}

int duration_parse(const char *s, uint64_t *ms)
{
	double ns;
	int err = parse_ns(s, NUNITS_MS, &ns);

	if (err)
		return err;
	*ms = (uint64_t)llround(ns / NS_PER_MS);
	return 0;
}

int duration_parse_ns(const char *s, uint64_t *ns)
{
	double v;
	int err = parse_ns(s, NUNITS, &v);

	if (err)
		return err;
	*ns = (uint64_t)llround(v);
	return 0;
}

void duration_format(char *buf, size_t len, uint64_t ms)
{
	size_t o = 0;

	if (!len)
		return;
	buf[0] = 0;
	if (!ms) {
		snprintf(buf, len, "0s");
		return;
	}
	/* Years and weeks would read oddly ("1w2d"): days are the largest. */
	for (size_t u = 2; u < NUNITS_MS && ms && o < len; u++) {
		uint64_t n = ms / (units[u].ns / MS);
		int w;

		if (!n)
			continue;
		w = snprintf(buf + o, len - o, "%llu%s", (unsigned long long)n, units[u].unit);
		if (w < 0)
			return;
		o += (size_t)w;
		ms -= n * (units[u].ns / MS);
	}
}
