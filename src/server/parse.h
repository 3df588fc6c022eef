/* parse.h: the server's parsers of query strings -- label selectors
 * (Prometheus matchers and Pyroscope's APP.TYPE{...}), times (now-1h,
 * milliseconds, Pyroscope's seconds), durations, and the name= of a
 * Pyroscope ingest (APP.TYPE{k=v,...}). Used by the API handlers (api_*.c)
 * and fuzzed by tests/fuzz/fuzz_{selector,timeparse,pyroname}.c. Every
 * parser takes untrusted text, bounds what it allocates by that text's
 * length, and reports a problem as -EINVAL with a message naming the
 * position. */
#ifndef SONDE_SERVER_PARSE_H
#define SONDE_SERVER_PARSE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "server/lset.h"
#include "store/store.h"

/* Longest selector and name accepted (bytes). */
#define SELECTOR_MAX_LEN 16384
/* At most this many matchers in a selector. */
#define SELECTOR_MAX_MATCHERS 64
/* A regular expression is at most this long; the rest of what it may ask
 * of glibc is bounded by common/regex.h. */
#define SELECTOR_MAX_REGEX 1024

/* A parsed selector: the matchers, owning their strings. */
struct selector {
	struct store_matcher *m;
	size_t n, cap;
};

/* Parses text (NULL or "" select everything) into sel, which must be
 * zeroed: `{name="v", name!="v", name=~"re", name!~"re"}` (values in double
 * or single quotes or backticks, with \" \\ \n \t escapes in double
 * quotes), optionally preceded by APP.TYPE (adding service_name="APP" and
 * type="TYPE"; "APP" alone means type cpu). Regexes are checked to compile
 * (POSIX extended). 0 or -EINVAL/-ENOMEM with the problem and its byte
 * position in err. */
int selector__parse(struct selector *sel, const char *text, char *err, size_t errlen);
/* Adds a matcher (copies name and value); 0 or -ENOMEM. */
int selector__add(struct selector *sel, const char *name, enum store_match op, const char *value);
/* The value of an equality matcher on name, or NULL. */
const char *selector__eq(const struct selector *sel, const char *name);
void selector__free(struct selector *sel);

/* How a bare integer time is read. */
enum time_unit { TIME_MS, TIME_PYROSCOPE_S };
/* Parses a time: "now", "now-DURATION", or an integer (milliseconds since
 * the epoch; with TIME_PYROSCOPE_S, seconds, or milliseconds when above
 * 10^11). 0 or -EINVAL with the reason in err. */
int parse_time_ms(const char *s, enum time_unit unit, int64_t now, int64_t *out_ms, char *err,
		  size_t errlen);

/* Parses a Pyroscope ingest name, "APP.TYPE{k=v,k2=v2}" (values plain or
 * in double quotes), into labels: service_name=APP, type=TYPE (what follows
 * the last dot; no type label when there is no ".TYPE": the caller's
 * default), and the pairs, dotted names with '_' (label_name_sanitize). 0 or -EINVAL with the reason and position in err, -ENOMEM. The
 * label limits (lset__check) are the caller's to apply. */
int pyroscope_name__parse(const char *name, struct lset *out, char *err, size_t errlen);

#endif
