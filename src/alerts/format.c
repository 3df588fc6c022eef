/* format.c: the number and time formats of the alert engine -- Go's %v of a
 * float64 ({{ $value }}), Prometheus' humanize, humanize1024,
 * humanizeDuration and humanizePercentage (template functions, and the
 * default rules' thresholds), and RFC 3339 timestamps (startsAt, endsAt of
 * notifications). Written as Prometheus writes them so that a summary reads
 * the same from Sonde as from Prometheus. Used by template.c, json.c, eval.c
 * and defaults.c. */
#include "alerts/alerts_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/clock.h"
#include "common/xalloc.h"

bool alert_format_nonfinite(char *buf, size_t len, double v)
{
	if (isnan(v))
		snprintf(buf, len, "NaN");
	else if (isinf(v))
		snprintf(buf, len, v > 0 ? "+Inf" : "-Inf");
	else
		return false;
	return true;
}

void alert_format_value(char *buf, size_t len, double v)
{
	char tmp[40];
	int digits, exp;

	if (alert_format_nonfinite(buf, len, v))
		return;
	if (v == 0) {
		snprintf(buf, len, "0");
		return;
	}
	/* The shortest decimal that reads back as v, as Go's strconv does. */
	for (digits = 1; digits < 17; digits++) {
		snprintf(tmp, sizeof(tmp), "%.*e", digits - 1, v);
		if (strtod(tmp, NULL) == v)
			break;
	}
	snprintf(tmp, sizeof(tmp), "%.*e", digits - 1, v);
	exp = atoi(strchr(tmp, 'e') + 1);
	if (exp < -4 || exp >= 6)
		snprintf(buf, len, "%s", tmp);
	else
		snprintf(buf, len, "%.*f", digits - 1 - exp > 0 ? digits - 1 - exp : 0, v);
}

/* Go's %.4g: C's, but NaN and Inf spelled the Go way. */
static void g4(char *buf, size_t len, double v, const char *suffix)
{
	char tmp[40];

	if (!alert_format_nonfinite(tmp, sizeof(tmp), v))
		snprintf(tmp, sizeof(tmp), "%.4g", v);
	snprintf(buf, len, "%s%s", tmp, suffix);
}

static const char *const si_big[] = {"k", "M", "G", "T", "P", "E", "Z", "Y"};
static const char *const si_small[] = {"m", "u", "n", "p", "f", "a", "z", "y"};
static const char *const iec_big[] = {"ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"};

/* v divided by base while it is at least base, *prefix the prefix of the
 * last division (unchanged when none). */
static double scale_down(double v, double base, const char *const *prefixes, size_t n,
			 const char **prefix)
{
	for (size_t i = 0; i < n && fabs(v) >= base; i++) {
		*prefix = prefixes[i];
		v /= base;
	}
	return v;
}

/* v multiplied by 1000 while below 1, *prefix milli, micro, ... */
static double scale_up(double v, const char **prefix)
{
	for (size_t i = 0; i < ARRAY_SIZE(si_small) && fabs(v) < 1; i++) {
		*prefix = si_small[i];
		v *= 1000;
	}
	return v;
}

void alert_format_humanize(char *buf, size_t len, double v)
{
	const char *prefix = "";

	if (v == 0 || !isfinite(v)) {
		g4(buf, len, v, "");
		return;
	}
	if (fabs(v) >= 1)
		v = scale_down(v, 1000, si_big, ARRAY_SIZE(si_big), &prefix);
	else
		v = scale_up(v, &prefix);
	g4(buf, len, v, prefix);
}

void alert_format_humanize1024(char *buf, size_t len, double v)
{
	const char *prefix = "";

	if (fabs(v) <= 1 || !isfinite(v)) {
		g4(buf, len, v, "");
		return;
	}
	v = scale_down(v, 1024, iec_big, ARRAY_SIZE(iec_big), &prefix);
	g4(buf, len, v, prefix);
}

void alert_format_humanize_duration(char *buf, size_t len, double v)
{
	char suffix[4];
	const char *prefix = "";

	if (!isfinite(v)) {
		g4(buf, len, v, "");
		return;
	}
	if (v == 0) {
		snprintf(buf, len, "0s");
		return;
	}
	if (fabs(v) >= 1) {
		const char *sign = v < 0 ? "-" : "";
		long long s = (long long)fabs(v);
		long long days = s / 86400, hours = s / 3600 % 24, minutes = s / 60 % 60;

		s %= 60;
		if (days)
			snprintf(buf, len, "%s%lldd %lldh %lldm %llds", sign, days, hours, minutes,
				 s);
		else if (hours)
			snprintf(buf, len, "%s%lldh %lldm %llds", sign, hours, minutes, s);
		else if (minutes)
			snprintf(buf, len, "%s%lldm %llds", sign, minutes, s);
		else
			snprintf(buf, len, "%s%.4gs", sign, fabs(v));
		return;
	}
	v = scale_up(v, &prefix);
	snprintf(suffix, sizeof(suffix), "%ss", prefix);
	g4(buf, len, v, suffix);
}

void alert_format_humanize_percentage(char *buf, size_t len, double v)
{
	g4(buf, len, v * 100, "%");
}

void alert_format_rfc3339(char *buf, size_t len, int64_t ms)
{
	time_t s = (time_t)(ms / MS_PER_SEC);
	int frac = (int)(ms % MS_PER_SEC);
	struct tm tm;

	if (frac < 0) {
		frac += MS_PER_SEC;
		s--;
	}
	gmtime_r(&s, &tm);
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
		 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, frac);
}
