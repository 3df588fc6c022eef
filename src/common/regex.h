/* regex.h: POSIX extended regexes from outside -- selector matchers, store
 * matchers, alert rules -- matched anchored at both ends (as PromQL does),
 * behind one guard. glibc's regcomp copies a repeated part once per
 * repetition it may need, so nested repetitions multiply its states, its
 * memory grows with their square and its epsilon closures with their cube:
 * a regex of a few hundred bytes can cost it seconds or gigabytes. The guard
 * estimates the states and refuses, with a message naming the problem:
 * back-references (no bound on matching), more than REGEX_MAX_EXPANSION
 * states, repetitions nested deeper than REGEX_MAX_NESTING, parts that can
 * match nothing repeated past REGEX_MAX_EMPTY_REPEAT states or more than
 * REGEX_MAX_EMPTY_LOOPS times, more than REGEX_MAX_ANCHORS anchors, groups
 * nested deeper than REGEX_MAX_GROUPS, and a ')' that closes nothing (the
 * anchoring wrapper would change its meaning). */
#ifndef SONDE_COMMON_REGEX_H
#define SONDE_COMMON_REGEX_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>

#define REGEX_MAX_LEN 4096
#define REGEX_MAX_EXPANSION 500
#define REGEX_MAX_NESTING 2
#define REGEX_MAX_EMPTY_REPEAT 16
#define REGEX_MAX_EMPTY_LOOPS 4
#define REGEX_MAX_ANCHORS 4
#define REGEX_MAX_GROUPS 64

/* Checks re against the guard without compiling it. 0, or -EINVAL with the
 * reason in err. */
int regex_check(const char *re, char *err, size_t errlen);
/* Checks re, then compiles it anchored at both ends ("^(re)$", extended,
 * no sub-matches) into *out, which the caller regfree()s. 0, or -EINVAL /
 * -ENOMEM with the reason in err (nothing to free then). */
int regex_compile_anchored(const char *re, regex_t *out, char *err, size_t errlen);
/* Whether value matches re anchored at both ends; false when re is refused. */
bool regex_match_anchored(const char *re, const char *value);

#endif
