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

#include "server/util.h"
#include "store/store.h"

/* Longest selector and name accepted (bytes). */
#define SELECTOR_MAX_LEN 16384
/* At most this many matchers in a selector. */
#define SELECTOR_MAX_MATCHERS 64
/* A regular expression's length and the states it would compile to are
 * bounded: glibc compiles '+' and counted repetitions ({m,n}) by copying
 * the repeated part, so nested ones multiply, and its memory grows with the
 * square of the states (500 take about 4 MB). Back-references are refused. */
#define SELECTOR_MAX_REGEX 1024
#define SELECTOR_MAX_EXPANSION 500
/* ...and repetitions of repetitions ("(a+)*") nest at most this deep:
 * deeper ones ("((a+)*)+", "a+*+") can take glibc seconds to compile. */
#define SELECTOR_MAX_NESTING 2
/* ...and a part that can match the empty string is repeated into at most
 * this many states: glibc's epsilon closures make its cost grow with the
 * cube of them ("(a*){1,400}" takes seconds, "(){,31}*" 10 MB). */
#define SELECTOR_MAX_EMPTY_REPEAT 16
/* ...and at most this many repetitions apply to such parts: in a row they
 * multiply ("(d*)*" 20 times takes a second, "(d*)+" 40 times forever). */
#define SELECTOR_MAX_EMPTY_LOOPS 4
/* ...and anchors (^ $) are few: each multiplies glibc's states. */
#define SELECTOR_MAX_ANCHORS 4

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

/* Whether value matches regex re anchored at both ends (as the store
 * matches); false when it does not compile. For the in-process uses (tests,
 * points filtering). */
bool selector_regex_match(const char *re, const char *value);

/* Parses a duration: a number and a unit (ms s m h d w), repeated from the
 * largest unit ("1h30m"). 0 or -EINVAL. */
int parse_duration_ms(const char *s, int64_t *out_ms);

/* How a bare integer time is read. */
enum time_unit { TIME_MS, TIME_PYROSCOPE_S };
/* Parses a time: "now", "now-DURATION", or an integer (milliseconds since
 * the epoch; with TIME_PYROSCOPE_S, seconds, or milliseconds when above
 * 10^11). 0 or -EINVAL with the reason in err. */
int parse_time_ms(const char *s, enum time_unit unit, int64_t now, int64_t *out_ms, char *err,
		  size_t errlen);

/* Parses a Pyroscope ingest name, "APP.TYPE{k=v,k2=v2}" (values plain or
 * in double quotes), into labels: service_name=APP, type=TYPE ("cpu" when
 * there is no ".TYPE": the type is what follows the last dot), and the
 * pairs. 0 or -EINVAL with the reason and position in err, -ENOMEM. The
 * label limits (lset__check) are the caller's to apply. */
int pyroscope_name__parse(const char *name, struct lset *out, char *err, size_t errlen);

#endif
